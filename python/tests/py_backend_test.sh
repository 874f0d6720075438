#!/usr/bin/env bash
# py_backend_test.sh FLASHCHECK: the py backend end to end with numpy kernels (examples/numpy_attention.py):
# the correct kernel passes certify --quick and a fuzz budget; each broken copy is found by fuzz within
# a fixed budget (one worker, fixed seed, 150 executions of cases up to S=96, D=64) and its finding replays with `repro`; a Python
# exception is a failed case with the exception in the finding (not a crash of the campaign);
# shrink minimizes a finding; flashcheck.Unsupported is SKIP; a bad declaration or module is a clear load error (exit 3).
# The embedded interpreter is Debian's /usr/bin/python3 (numpy), the package comes from python/.
set -uo pipefail
FC=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ROOT=$(pwd)
export PYTHONPATH=$ROOT/python FLASHCHECK_PYTHON=/usr/bin/python3
K=py:$ROOT/examples/numpy_attention.py
T=$ROOT/python/tests/kernels_for_tests.py
W=${TEST_TMPDIR:-$(mktemp -d)}/w; mkdir -p "$W"; cd "$W"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 1. the correct kernel certifies (--quick)
"$FC" certify --quick --fuzz-seconds 5 --jobs 2 --out cert --backend "$K:attention" > cert.log 2>&1
rc=$?; grep -q "result: CERTIFIED" cert.log && [ $rc -eq 0 ] || { bad "certify --quick of the correct numpy kernel (rc $rc)"; tail -20 cert.log; }
grep -q "backend numpy" cert.log || bad "certify does not name the declared backend"

# 2. fuzz: nothing on the correct kernel, a finding on each broken copy
fz() { "$FC" fuzz --jobs 1 --seed 1 --cases 150 --time 0 --max-seq 96 --max-dim 64 --quiet --corpus "c_$1" --findings "f_$1" --backend "$K:$1" > "fz_$1.log" 2>&1; }
fz attention; rc=$?
[ $rc -eq 0 ] || { bad "fuzz found something in the correct numpy kernel (rc $rc)"; tail -5 fz_attention.log; }
for b in broken_causal broken_window broken_gqa broken_tail broken_dk; do
  fz $b; rc=$?
  n=$(find "f_$b" -name '*.case' | wc -l)
  if [ $rc -ne 1 ] || [ "$n" -eq 0 ]; then bad "fuzz did not find $b in 150 executions (rc $rc, $n files)"; tail -5 "fz_$b.log"; continue; fi
  f=$(find "f_$b" -name '*.case' | head -1)
  "$FC" repro "$f" --backend "$K:$b" > "rp_$b.log" 2>&1; rc=$?
  [ $rc -eq 1 ] || bad "repro of a $b finding does not fail on $b (rc $rc)"
  "$FC" repro "$f" --backend "$K:attention" > "rpok_$b.log" 2>&1; rc=$?
  [ $rc -eq 0 ] || { bad "a $b finding fails on the correct kernel too (rc $rc)"; tail -12 "rpok_$b.log"; }
  echo "ok: $b found ($n findings)"
done

# 3. shrink minimizes a finding of the broken ragged-tail kernel through the py backend; the .min
#    still fails on it and passes on the correct kernel
f=$(find f_broken_tail -name '*.case' | head -1)
if [ -n "$f" ]; then
  cp "$f" tail.case
  "$FC" shrink tail.case --max-runs 60 --backend "$K:broken_tail" > shrink.log 2>&1; rc=$?
  if [ $rc -ne 0 ] || [ ! -f tail.case.min ]; then bad "shrink of a broken_tail finding (rc $rc)"; tail -5 shrink.log
  else
    "$FC" repro tail.case.min --backend "$K:broken_tail" > rpmin.log 2>&1; rc1=$?
    "$FC" repro tail.case.min --backend "$K:attention" > rpminok.log 2>&1; rc2=$?
    [ $rc1 -eq 1 ] && [ $rc2 -eq 0 ] || bad "tail.case.min: broken rc $rc1 (want 1), correct rc $rc2 (want 0)"
    echo "ok: shrink: $(grep -h 'wrote' shrink.log | head -1)"
  fi
fi

# 4. exceptions: a failed case with the exception text, the campaign survives
C=$ROOT/fuzz/regressions/fwd/causal_top_left_sq_lt_sk.case
"$FC" repro "$C" --backend "py:$T:raises" > raises.log 2>&1; rc=$?
[ $rc -eq 1 ] || bad "a raising kernel: repro exit $rc, expected 1 (a failed case)"
grep -q "ZeroDivisionError: planted failure in the kernel" raises.log || bad "the exception is not in the verdict"
grep -q "kernels_for_tests.py" raises.log || bad "the traceback's frame is not reported"
"$FC" fuzz --jobs 1 --cases 20 --time 0 --quiet --corpus c_r --findings f_r --backend "py:$T:raises" > fz_raises.log 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "0 crashes" fz_raises.log || { bad "fuzz on a raising kernel: rc $rc (expected findings, no crash)"; tail -5 fz_raises.log; }
"$FC" repro "$C" --backend "py:$T:unsupported" > unsup.log 2>&1; rc=$?
grep -qi "skip" unsup.log && [ $rc -eq 0 ] || { bad "Unsupported is not a SKIP (rc $rc)"; cat unsup.log; }
"$FC" repro "$C" --backend "py:$T:bad_profile" > badprof.log 2>&1; rc=$?
[ $rc -eq 3 ] && grep -q "unknown precision preset 'no-such-preset'" badprof.log || { bad "unknown preset: rc $rc"; cat badprof.log; }
"$FC" repro "$C" --backend "py:$T:no_such_callable" > nocall.log 2>&1; rc=$?
[ $rc -eq 3 ] && grep -q "no_such_callable" nocall.log || { bad "missing callable: rc $rc"; cat nocall.log; }
"$FC" repro "$C" --backend "py:nonsense" > nospec.log 2>&1; rc=$?
[ $rc -eq 3 ] && grep -q "MODULE_OR_FILE:CALLABLE" nospec.log || { bad "bad spec: rc $rc"; cat nospec.log; }
FLASHCHECK_PYTHON=/nonexistent/python3 "$FC" repro "$C" --backend "$K:attention" > nopy.log 2>&1; rc=$?
[ $rc -eq 3 ] && grep -q "FLASHCHECK_PYTHON" nopy.log || { bad "missing interpreter: rc $rc"; cat nopy.log; }

env -u PYTHONPATH FLASHCHECK_PYTHON=/usr/bin/python3 "$FC" repro "$C" --backend "$K:attention" > nopkg.log 2>&1; rc=$?
[ $rc -eq 3 ] && grep -q "No module named 'flashcheck'" nopkg.log || { bad "package not importable: rc $rc"; cat nopkg.log; }

# 5. contract v3 through the bridge (python/README.md "Contract v3"): a numpy kernel claiming varlen,
#    paged, softcap and sinks passes packed (seqused_k, softcap, sinks: dsinks in the backward) and
#    paged cases forward and backward; each broken copy fails; a kernel claiming nothing is SKIP on
#    them (the adapters are such kernels); a claim without its keyword arguments is a load error
cat > v3_packed.case <<'CASE'
shape = 3 20 40 4 2 16 16
seqlens_q = 5,0,20
seqlens_k = 7,3,40
seqused_k = 7,2,33
softcap = 20
sinks = gaussian amp=2
causal = bottom_right
seed = 3
CASE
cat > v3_paged.case <<'CASE'
shape = 2 9 30 2 1 16 8
seqlens_q = 4,9
seqused_k = 30,17
paged = 8 8 0
block_table.0 = 3,0,5,1
block_table.1 = 5,2,4,0
causal = bottom_right
seed = 4
CASE
for c in v3_packed v3_paged; do
  "$FC" repro $c.case --backend "py:$T:v3_attention" > rp_$c.log 2>&1; rc=$?
  [ $rc -eq 0 ] && grep -q "^PASS" rp_$c.log && grep -q "forward + backward" rp_$c.log && grep -Eq "^  dk +[1-9]" rp_$c.log ||
    { bad "$c: the v3 numpy kernel does not pass forward and backward (rc $rc)"; tail -12 rp_$c.log; }
  "$FC" repro $c.case --backend "$K:attention" > skip_$c.log 2>&1; rc=$?
  [ $rc -eq 0 ] && grep -q "^SKIP" skip_$c.log && grep -q "does not support" skip_$c.log ||
    { bad "$c: a kernel claiming no v3 feature is not SKIP (rc $rc)"; tail -5 skip_$c.log; }
done
for kc in v3_broken_seqused:v3_packed v3_broken_seqused:v3_paged v3_broken_page:v3_paged v3_broken_sinks:v3_packed \
          v3_broken_dsinks:v3_packed; do
  k=${kc%%:*}; c=${kc##*:}
  "$FC" repro $c.case --backend "py:$T:$k" > rp_${k}_$c.log 2>&1; rc=$?
  [ $rc -eq 1 ] && grep -q "^FAIL" rp_${k}_$c.log || { bad "$k on $c does not fail (rc $rc)"; tail -8 rp_${k}_$c.log; }
done
grep -q "dsinks" rp_v3_broken_dsinks_v3_packed.log || bad "the wrong dsinks is not what fails"
"$FC" repro v3_paged.case --backend "py:$T:v3_undeclared_kwargs" > undecl.log 2>&1; rc=$?
[ $rc -eq 3 ] && grep -q "declares varlen=True but its forward takes no cu_seqlens_q" undecl.log ||
  { bad "a v3 claim without its keyword arguments: rc $rc"; cat undecl.log; }

# 6. empty problems: the bridge answers a call with nothing to write without calling the kernel
#    (B = 0: cuda_grid F#173; Sq = Sk = 0), so a kernel that raises on every call passes them; a
#    backward with key rows to zero (Sq = 0 < Sk) still reaches the kernel (and fails here)
printf 'shape = 0 3 17 2 2 32 32\ndtype = bf16\nbackward = 1\ndeterministic = 0\nseed = 5\n' > empty_b0.case
printf 'shape = 1 0 0 2 1 16 16\nbackward = 1\ndeterministic = 0\nseed = 6\n' > empty_q0k0.case
printf 'shape = 1 0 17 2 1 16 16\nbackward = 1\ndeterministic = 0\nseed = 7\n' > empty_q0.case
for c in empty_b0 empty_q0k0; do
  "$FC" repro $c.case --backend "py:$T:raises_fb" > rp_$c.log 2>&1; rc=$?
  [ $rc -eq 0 ] && grep -q "^PASS" rp_$c.log && grep -q "forward + backward" rp_$c.log && ! grep -q "planted failure" rp_$c.log ||
    { bad "$c: the bridge called the kernel on a problem with nothing to write (rc $rc)"; tail -8 rp_$c.log; }
done
"$FC" repro empty_q0.case --backend "py:$T:raises_fb" > rp_empty_q0.log 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "planted failure in the backward" rp_empty_q0.log ||
  { bad "empty_q0: the backward with dK, dV to write did not reach the kernel (rc $rc)"; tail -8 rp_empty_q0.log; }
"$FC" repro empty_b0.case --backend "$K:attention" > rp_empty_b0_np.log 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q "^PASS" rp_empty_b0_np.log || { bad "empty_b0 on the numpy kernel (rc $rc)"; tail -5 rp_empty_b0_np.log; }

[ $fail -eq 0 ] && echo "py_backend_test: all passed"
exit $fail
