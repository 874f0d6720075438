#!/bin/bash
# run_det.sh: one device call for the deterministic mode on the Hopper kernels (flash_bwd.cu
# section 2h, DQ = false, then the Hopper dQ kernel of section 2q): certification first (special
# cases, full grid + determinism repetitions), stop there on a failure; then the sanitizers
# on their subsets; then bwd_bench (both modes) at D = 128 and 64, the Hopper dK/dV kernel with
# the sm_80 bwd_dq_kernel (FLASHCHECK_BWD_GMMA_DQ=0) and the previous deterministic path (sm_80
# dK/dV kernel, FLASHCHECK_BWD_GMMA_DET=0) at a few sizes.
# Run from the repository root with the binaries of build_device.sh in .device/bwd.
. "$(dirname "$0")/certify_first.sh"  # B, O, el; certification first, exit on a failure
timeout 100 bash $B/sanitize.sh $B/bwd_selfcheck $B/bwd_certify_test > $O/sanitize.txt 2>&1; r3=$?; el "sanitize rc=$r3"
grep -E "^==|SUMMARY|cases|^FAIL|failed" $O/sanitize.txt
timeout 40 $B/bwd_bench 20 128 > $O/bench128.txt 2>&1; el "bench128 rc=$?"; cat $O/bench128.txt
timeout 30 $B/bwd_bench 20 64 > $O/bench64.txt 2>&1; el "bench64 rc=$?"; cat $O/bench64.txt
for d in 128 64; do for s in 2048 16384; do FLASHCHECK_BWD_GMMA_DQ=0 timeout 20 $B/bwd_bench 20 $d $s; done; done \
    > $O/bench_sm80dq.txt 2>&1
el "Hopper dK/dV + sm_80 bwd_dq_kernel (FLASHCHECK_BWD_GMMA_DQ=0)"; cat $O/bench_sm80dq.txt
for d in 128 64; do for s in 2048 16384; do FLASHCHECK_BWD_GMMA_DET=0 timeout 20 $B/bwd_bench 20 $d $s; done; done \
    > $O/bench_olddet.txt 2>&1
el "previous deterministic path (FLASHCHECK_BWD_GMMA_DET=0)"; cat $O/bench_olddet.txt
