# certify_first.sh: sourced by run_gmma.sh and run_det.sh (not run on its own). Sets B (the
# binaries of build_device.sh, .device/bwd), O (logs, $OUT), el (elapsed-time echo); prints the GPU;
# runs the certification (special cases, then the full grid with determinism repetitions) and
# stops the calling script on a failure, after one timing line for orientation.
B=.device/bwd; O=${OUT:-/tmp/out}; mkdir -p $O
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
timeout 60 $B/bwd_certify_test --special-only --threads 16 > $O/special.txt 2>&1; r1=$?; el "special rc=$r1"
tail -1 $O/special.txt; grep -A3 "^FAIL" $O/special.txt | head -20
timeout 110 $B/bwd_certify_test --no-big --no-special --threads 16 --rows 32 --det-reps 10 > $O/certify.txt 2>&1; r2=$?
el "certify rc=$r2"; tail -1 $O/certify.txt; echo "FAIL lines: $(grep -c '^FAIL' $O/certify.txt)"; grep -A3 "^FAIL" $O/certify.txt | head -40
if [ $r1 -ne 0 ] || [ $r2 -ne 0 ]; then
    timeout 30 $B/bwd_bench 20 128 4096; el "stopped: certification failed"; exit 1
fi
