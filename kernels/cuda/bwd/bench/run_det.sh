#!/bin/bash
# run_det.sh: one device call for the deterministic mode on the Hopper kernels (flash_bwd.cu
# section 2h, DQ = false, then the Hopper dQ kernel of section 2q): certification first (special
# cases, full grid + determinism repetitions), stop there on a failure; then the sanitizers
# on their subsets; then bwd_bench (both modes) at D = 128 and 64, the Hopper dK/dV kernel with
# the sm_80 bwd_dq_kernel (FLASHCHECK_BWD_GMMA_DQ=0) and the previous deterministic path (sm_80
# dK/dV kernel, FLASHCHECK_BWD_GMMA_DET=0) at a few sizes.
# Run from the repository root with the binaries of build_device.sh in .device/bwd.
B=.device/bwd; O=${OUT:-/tmp/out}; mkdir -p $O
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
timeout 60 $B/bwd_certify_test --special-only --threads 16 > $O/special.txt 2>&1; r1=$?; el "special rc=$r1"
tail -1 $O/special.txt; grep -A3 "^FAIL" $O/special.txt | head -20
timeout 110 $B/bwd_certify_test --no-big --no-special --threads 16 --rows 32 --det-reps 10 > $O/certify.txt 2>&1; r2=$?
el "certify rc=$r2"; tail -1 $O/certify.txt; echo "FAIL lines: $(grep -c '^FAIL' $O/certify.txt)"; grep -A3 "^FAIL" $O/certify.txt | head -40
if [ $r1 -ne 0 ] || [ $r2 -ne 0 ]; then
    timeout 30 $B/bwd_bench 10 128 4096; el "stopped: certification failed"; exit 1
fi
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
