#!/bin/bash
# run_gmma.sh: one device call for the Hopper dK/dV kernel (flash_bwd.cu section 2h):
# certification first (special cases, full grid + determinism), stop there on a failure;
# then ours (new kernel; the sm_80 kernel via FLASHCHECK_BWD_GMMA=0 at two sizes; optional
# extra bench binaries named in $EXTRA_BENCH, e.g. experiment builds) and PyTorch in the same
# call, then the sanitizers on their subsets.
# Run from the repository root with the binaries of build_device.sh in .device/bwd.
. "$(dirname "$0")/certify_first.sh"  # B, O, el; certification first, exit on a failure
timeout 40 $B/bwd_bench 20 128 > $O/bench128.txt 2>&1; el "bench128 rc=$?"; cat $O/bench128.txt
for s in 2048 16384; do FLASHCHECK_BWD_GMMA=0 timeout 20 $B/bwd_bench 20 128 $s; done > $O/bench128_old.txt 2>&1
el "sm_80 kernel (FLASHCHECK_BWD_GMMA=0)"; cat $O/bench128_old.txt
for x in $EXTRA_BENCH; do for s in 2048 16384; do echo "== $x"; timeout 20 $x 20 128 $s 2>&1 | grep -v "illegal"; done; done
timeout 60 python3 $B/torch_bwd_bench.py 20 128 > $O/torch128.txt 2>&1; el "torch128 rc=$?"; cat $O/torch128.txt
timeout 30 $B/bwd_bench 20 64 > $O/bench64.txt 2>&1; el "bench64 rc=$?"; cat $O/bench64.txt
timeout 100 bash $B/sanitize.sh $B/bwd_selfcheck $B/bwd_certify_test > $O/sanitize.txt 2>&1; el "sanitize rc=$?"
grep -E "^==|SUMMARY|cases|^FAIL|failed" $O/sanitize.txt
timeout 40 python3 $B/torch_bwd_bench.py 20 64 > $O/torch64.txt 2>&1; el "torch64 rc=$?"; cat $O/torch64.txt
