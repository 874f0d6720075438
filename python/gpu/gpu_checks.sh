#!/bin/bash
# gpu_checks.sh BUNDLE.tgz: run from the repository root on a GPU host with PyTorch (OUT: a folder for
# the logs). BUNDLE.tgz: a tarball of `bazel run //ci:gpu_bundle -- DIR`'s DIR. Final binaries of main: the GPU tests of the bundle (sanitizer and forced-sm80 runs left out:
# their device code ran unchanged in an earlier call), the cuDNN case-187 diagnosis, and in parallel
# the py backend: broken Triton kernel fuzz -> shrink (cut off by SIGTERM if slow) -> repro, certify
# --quick of torch SDPA flash/cudnn/efficient through py:.
set -u
R=$(pwd); B=/tmp/b; mkdir -p $B && tar xzf "${1:?usage: gpu_checks.sh BUNDLE.tgz}" -C $B; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export LD_LIBRARY_PATH=$B/lib PYTHONUNBUFFERED=1
FC=$B/tools/cli__flashcheck/flashcheck
nvidia-smi -L; date -u
(
  export PYTHONPATH=$R/python FLASHCHECK_PYTHON=$(command -v python3)
  W=/tmp/pyw; mkdir -p $W; cd $W; T=$OUT/py_table.txt; : > $T
  step() { local name=$1 lim=$2; shift 2; local t0=$(date +%s.%N); timeout -s TERM $lim "$@" > $W/$name.log 2>&1; local rc=$?; local t1=$(date +%s.%N);
    printf "%-20s rc=%-3d %6.1f s  %s\n" "$name" $rc $(awk "BEGIN{print $t1 - $t0}") "$(grep -E 'result:|^PASS|^FAIL|cases/s\)|findings  |wrote|round|stopped|reproduces|does not' $W/$name.log | head -5 | tr '\n' ' ' | cut -c1-400)" >> $T; }
  Bk=py:$R/examples/triton_fa_broken.py:attention; Ck=py:$R/examples/triton_fa.py:attention
  step fuzz_broken 60 $FC fuzz --time 40 --jobs 4 --quiet --corpus cb --findings fb --backend $Bk
  F=$(find fb -name '*.case' -not -path '*overflow*' | head -1); [ -n "$F" ] && cp "$F" $W/finding.case
  step shrink 220 $FC shrink $W/finding.case --max-runs 60 --timeout 60 --backend $Bk
  step repro_min_broken 45 $FC repro $W/finding.case.min --backend $Bk
  step repro_min_correct 45 $FC repro $W/finding.case.min --backend $Ck
  for k in flash cudnn efficient; do
    step certify_$k 100 $FC certify --quick --fuzz-seconds 10 --jobs 4 --timeout 60 --out rep_$k --backend py:flashcheck.adapters.torch_sdpa:$k
  done
  cp $W/finding.case $W/finding.case.min $OUT/ 2>/dev/null
  for f in fuzz_broken shrink repro_min_broken repro_min_correct certify_flash certify_cudnn certify_efficient; do echo "=== $f"; tail -40 $W/$f.log; done > $OUT/py_logs.txt
  tar czf $OUT/py_reports.tgz rep_* 2>/dev/null
) &
py=$!
python3 tests/false_alarm/runs/2026-11-24_run3_diag187.py 187 > $OUT/diag187.txt 2>&1
cd $B && TIMEOUT_S=300 ./run_all.sh 'certify_test\|certify_mma_test\|gmma_selftest\|bwd_selfcheck$\|checks_cuda\|properties_cuda\|tc_probe\|test_gpu_oracle\|replay_cuda' > $OUT/run_all.txt 2>&1
tar czf $OUT/gpu_logs.tgz -C $B logs
wait $py
cat $OUT/diag187.txt; echo; cat $OUT/run_all.txt | tail -60; echo; cat $OUT/py_table.txt
