#!/usr/bin/env bash
# stress_cli_test.sh FLASHCHECK: --stress N of certify, fuzz and repro (N >= 2 runs; a bad value is a
# usage error, exit 2), and a stress finding replays: the CPU mutant fwd_order_varies_at_scale passes
# `repro` without --stress and fails it with --stress 3 (check "stress").
set -uo pipefail
fc=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}/scli
rm -rf "$tmp"; mkdir -p "$tmp"
fails=0
want() { # rc what cmd...
  local w=$1 what=$2; shift 2
  "$@" > "$tmp/out" 2>&1; local rc=$?
  if [ "$rc" = "$w" ]; then echo "ok   $what (exit $rc)"; else echo "FAIL $what: exit $rc, want $w"; sed 's/^/     /' "$tmp/out" | tail -8; fails=$((fails + 1)); fi
}
want 2 "certify --stress 1 refused" "$fc" certify --backend cpu --stress 1 --out "$tmp/c"
want 2 "fuzz --stress 0 refused" "$fc" fuzz --backend cpu --stress 0 --time 1
want 2 "fuzz --stress with --no-determinism refused" "$fc" fuzz --backend cpu --stress 3 --no-determinism --time 1
want 2 "repro --stress x refused" "$fc" repro "$tmp/none.case" --stress x
printf 'shape = 1 64 96 2 1 16 16\nbackward = 0\nseed = 41\n' > "$tmp/s.case"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
want 0 "correct backend, repro --stress 3" "$fc" repro "$tmp/s.case" --backend cpu --stress 3
FLASHCHECK_CPU_MUTANT=fwd_order_varies_at_scale want 0 "fwd_order_varies_at_scale passes repro without --stress" "$fc" repro "$tmp/s.case" --backend cpu
FLASHCHECK_CPU_MUTANT=fwd_order_varies_at_scale want 1 "fwd_order_varies_at_scale fails repro --stress 3" "$fc" repro "$tmp/s.case" --backend cpu --stress 3
grep -q "stress" "$tmp/out" || { echo "FAIL: the failure does not name the stress check"; cat "$tmp/out"; fails=$((fails + 1)); }
[ "$fails" = 0 ] && echo "stress_cli_test: all passed" || { echo "stress_cli_test: $fails failure(s)"; exit 1; }
