#!/bin/bash
# py backend on the GPU host: smoke, broken Triton found/shrunk/replayed, SDPA certify, throughput.
set -u
D=$(cd "$(dirname "$0")" && pwd); R=$(pwd)
export LD_LIBRARY_PATH=$D/lib PYTHONPATH=$D/python FLASHCHECK_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1
FC=$D/flashcheck; W=/tmp/pyw; rm -rf $W; mkdir -p $W; cd $W
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
T=$OUT/table.txt; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$(date +%s.%N); timeout $lim "$@" > $W/$name.log 2>&1; local rc=$?; local t1=$(date +%s.%N);
  printf "%-28s rc=%-3d %6.1f s  %s\n" "$name" $rc $(awk "BEGIN{print $t1 - $t0}") "$(grep -E 'result:|^PASS|^FAIL|cases/s|findings  |wrote|state:' $W/$name.log | head -3 | tr '\n' ' ' | cut -c1-150)" >> $T; }
ls -la /usr/lib/x86_64-linux-gnu/libpython3* 2>&1 | head -3
date -u
step smoke_flash 90 $FC repro $D/reg/fwd/causal_top_left_sq_lt_sk.case --backend py:flashcheck.adapters.torch_sdpa:flash
step smoke_triton 120 $FC repro $D/reg/bwd/tail_not_multiple_of_128.case --backend py:$D/examples/triton_fa.py:attention
tail -25 smoke_flash.log smoke_triton.log
step fuzz_broken_triton 80 $FC fuzz --time 60 --jobs 8 --quiet --corpus c_b --findings f_b --seeds $D/seeds --backend py:$D/examples/triton_fa_broken.py:attention
F=$(ls f_b/*/*.case f_b/*.case 2>/dev/null | head -1); echo "finding: $F"; find f_b -type f | head -5
[ -n "$F" ] && cp "$F" $W/finding.case && step shrink_broken 150 $FC shrink $W/finding.case --max-runs 25 --timeout 60 --backend py:$D/examples/triton_fa_broken.py:attention
[ -f $W/finding.case.min ] && step repro_min_broken 60 $FC repro $W/finding.case.min --backend py:$D/examples/triton_fa_broken.py:attention && step repro_min_correct 60 $FC repro $W/finding.case.min --backend py:$D/examples/triton_fa.py:attention
for k in flash cudnn efficient; do step certify_$k 110 $FC certify --quick --fuzz-seconds 10 --jobs 8 --timeout 60 --out rep_$k --backend py:flashcheck.adapters.torch_sdpa:$k; done
step tput_py_triton 45 $FC fuzz --time 30 --jobs 16 --quiet --max-seq 256 --max-dim 128 --corpus c_t --findings f_t --seeds $D/seeds --backend py:$D/examples/triton_fa.py:attention
step tput_cuda 45 $FC fuzz --time 30 --jobs 16 --quiet --max-seq 256 --max-dim 128 --corpus c_c --findings f_c --seeds $D/seeds --backend cuda
for f in fuzz_broken_triton shrink_broken repro_min_broken certify_flash certify_cudnn certify_efficient tput_py_triton tput_cuda; do echo "=== $f"; tail -22 $W/$f.log 2>/dev/null; done > $OUT/logs.txt
cp $W/finding.case $W/finding.case.min $OUT/ 2>/dev/null
tar czf $OUT/all_logs.tgz -C $W --exclude='c_*' . 2>/dev/null
grep -h -A3 "Traceback\|raised" $W/*.log | head -30
cat $T
