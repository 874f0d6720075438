#!/usr/bin/env bash
# tools_test.sh FA_NPY_RUN FLASHCHECK FA_SUITE_PY: the false-alarm suite's tools without a GPU:
# fa_npy_run on the CPU backend (outputs verify PASS; a CPU mutant's outputs FAIL; bad input exits 2
# naming the file), and fa_suite.py reporting SKIPPED with exit 77 (never a pass) without PyTorch.
set -uo pipefail
run=$(realpath "$1"); fc=$(realpath "$2"); suite=$(realpath "$3")
tmp=${TEST_TMPDIR:-$(mktemp -d)}/tools
rm -rf "$tmp"; mkdir -p "$tmp"
export OMP_NUM_THREADS=1
pass=0; fail=0; out="$tmp/out.txt"
expect() { # RC PATTERN WHAT -- COMMAND...
  local rc=$1 pat=$2 what=$3; shift 4
  "$@" >"$out" 2>&1; local got=$?
  if [ "$got" -eq "$rc" ] && { [ -z "$pat" ] || grep -Eq -- "$pat" "$out"; }; then
    pass=$((pass + 1)); echo "ok    $what"
  else
    fail=$((fail + 1)); echo "FAIL  $what: exit $got (want $rc), pattern '$pat'"; sed 's/^/      | /' "$out" | tail -15
  fi
}
# a GQA case in PyTorch's [B, H, S, D] layout with a fully hidden row (numpy from Debian's python3)
mk() { # DIR CAUSAL(0/1)
  /usr/bin/python3 - "$1" "$2" <<'PY'
import os, sys, numpy as np
d, causal = sys.argv[1], sys.argv[2] == "1"
os.makedirs(d, exist_ok=True)
r = np.random.default_rng(3)
B, H, Hk, Sq, Sk, D = 1, 4, 2, 19, 23, 32
for n, sh in (("q", (B, H, Sq, D)), ("k", (B, Hk, Sk, D)), ("v", (B, Hk, Sk, D)), ("do", (B, H, Sq, D))):
    np.save(f"{d}/{n}.npy", r.standard_normal(sh).astype(np.float16))
if not causal:
    m = np.zeros((B, 1, Sq, Sk), np.float32); m[:, :, 4, :] = -np.inf; m[:, :, 7, 5:] = -np.inf
    np.save(f"{d}/mask.npy", m)
PY
}
mk "$tmp/a" 0
expect 0 "" "fa_npy_run --backend cpu runs a saved GQA case with a hidden row" -- "$run" --dir "$tmp/a" --backend cpu --layout bhsd --scale 0.3
for f in o lse dq dk dv; do
  expect 0 "" "fa_npy_run wrote $f.npy" -- test -s "$tmp/a/$f.npy"
done
expect 0 "^PASS" "its outputs pass flashcheck verify --profile tensorcore" -- "$fc" verify --dir "$tmp/a" --layout bhsd --scale 0.3 --profile tensorcore
expect 0 "" "the LSE of the hidden row is -inf (the contract)" -- /usr/bin/python3 -c "
import numpy as np, sys; l = np.load('$tmp/a/lse.npy'); sys.exit(0 if np.isneginf(l[0, :, 4]).all() and np.isfinite(l[0, :, 5]).all() else 1)"
mk "$tmp/b" 1
expect 0 "" "fa_npy_run on a causal case with the CPU mutant causal_off_by_one" -- \
  env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$run" --dir "$tmp/b" --backend cpu --layout bhsd --causal top_left
expect 1 "^FAIL" "verify catches the mutant's outputs" -- "$fc" verify --dir "$tmp/b" --layout bhsd --causal top_left --profile tensorcore
rm -f "$tmp/b/do.npy"
expect 2 "do.npy is missing" "a case without do.npy: exit 2 naming the file" -- "$run" --dir "$tmp/b" --backend cpu
expect 2 "unknown option" "an unknown option: exit 2" -- "$run" --dir "$tmp/b" --bogus 1
expect 2 "--causal must be" "a bad --causal value: exit 2" -- "$run" --dir "$tmp/b" --causal diagonal
# fa_suite.py without PyTorch: SKIPPED, exit 77 (a stand-in torch module that fails to import)
mkdir -p "$tmp/notorch"; echo 'raise ImportError("no torch in this test")' > "$tmp/notorch/torch.py"
expect 77 "SKIPPED: PyTorch with CUDA is not available" "fa_suite.py without PyTorch: SKIPPED, exit 77, nothing run" -- \
  env PYTHONPATH="$tmp/notorch" /usr/bin/python3 "$suite" --flashcheck "$fc" --out "$tmp/s" --cases 3
# the tightness statistic by value class (fa_suite.class_medians): in-range and huge cases apart, a case
# with no element of non-zero bound (mean_bias null) left out, an exact element with a bound kept
expect 0 "^class ok" "fa_suite.class_medians: medians per value class, masked-only cases left out" -- \
  /usr/bin/python3 -c "
import importlib.util, math, sys
sp = importlib.util.spec_from_file_location('fa_suite', '$suite'); m = importlib.util.module_from_spec(sp); sp.loader.exec_module(m)
def rec(dist, med, bias=0.0): return {'desc': {'dist': dist}, 'right': {'json': {'tensors': {'dq': {'median_ratio': med, 'worst_ratio': med, 'mean_bias': bias}}}}}
runs = [rec('normal', 0.05), rec('ties', 0.07), rec('uniform', 0.0), rec('uniform', 0.06), rec('normal', 0.0, None), rec('huge', 1e-20), rec('mixed', 1e-9), rec('tiny_do', 3e-4)]
c = m.class_medians(runs, 'dq')
ok = c['in-range'] == (0.055, 4) and c['huge'] == (0.5 * (1e-20 + 1e-9), 2) and c['subnormal'] == (3e-4, 1) and math.isnan(m.class_medians(runs, 'dk')['in-range'][0])
print('class ok' if ok else 'class BAD %r' % (c,)); sys.exit(0 if ok else 1)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
