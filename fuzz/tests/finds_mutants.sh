#!/usr/bin/env bash
# finds_mutants.sh FWD_DRIVER BWD_DRIVER: the fuzzer must catch deliberately
# broken CPU backends (kernels/cpu/cpu_mutants.h). For each mutant below, a
# short generated campaign (no seeds: the generator alone must reach the bug)
# must record at least one finding (-expect_finding turns "no finding" into a
# failure). A fuzzer that cannot tell these from the real backend is not testing.
set -uo pipefail
fwd=$1; bwd=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
export FLASHCHECK_MAX_SEQ=96 FLASHCHECK_MAX_DIM=64 FLASHCHECK_MAX_BATCH=2 FLASHCHECK_MAX_HEADS=4
fail=0; n=0
check() { # driver mutant runs
  local drv=$1 m=$2 runs=$3
  n=$((n + 1))
  if FLASHCHECK_CPU_MUTANT=$m FLASHCHECK_FINDINGS="$tmp/findings-$m" "$drv" -runs="$runs" -seed=3 -expect_finding \
       >"$tmp/$m.log" 2>&1; then
    echo "ok    mutant $m caught: $(ls "$tmp/findings-$m" | wc -l) distinct finding(s), e.g. $(grep -h '^# state:' "$tmp/findings-$m"/*.case | head -1)"
  else
    echo "FAIL  mutant $m NOT caught in $runs inputs"; tail -3 "$tmp/$m.log"; fail=$((fail + 1))
  fi
}
check "$fwd" causal_off_by_one 150
check "$fwd" ragged_tail_unmasked 150
check "$fwd" masked_row_inf_minus_inf 150
check "$fwd" gqa_head_modulo 150
check "$fwd" lse_log2 60
check "$bwd" dv_gqa_not_summed 150
check "$bwd" delta_from_dout_squared 80
echo "$((n - fail)) of $n mutants caught"
[ $fail -eq 0 ]
