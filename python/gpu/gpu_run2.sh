#!/bin/bash
# second call: the fixed Triton example (broken copy found, shrunk, replayed), py throughput, SDPA flash certify
set -u
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/lib PYTHONPATH=$D/python FLASHCHECK_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1
FC=$D/flashcheck; W=/tmp/pyw; rm -rf $W; mkdir -p $W; cd $W
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T=$OUT/table.txt; : > $T
step() { local name=$1 lim=$2; shift 2; local t0=$(date +%s.%N); timeout $lim "$@" > $W/$name.log 2>&1; local rc=$?; local t1=$(date +%s.%N);
  printf "%-22s rc=%-3d %6.1f s  %s\n" "$name" $rc $(awk "BEGIN{print $t1 - $t0}") "$(grep -E 'result:|^PASS|^FAIL|cases/s\)|findings  |wrote|state:|inside the' $W/$name.log | head -4 | tr '\n' ' ' | cut -c1-260)" >> $T; }
B=py:$D/examples/triton_fa_broken.py:attention; C=py:$D/examples/triton_fa.py:attention
step fuzz_broken_triton 40 $FC fuzz --time 25 --jobs 8 --quiet --corpus c_b --findings f_b --seeds $D/seeds --backend $B
F=$(find f_b -name '*.case' | head -1); cp "$F" $W/finding.case
step shrink_broken 45 $FC shrink $W/finding.case --max-runs 6 --timeout 40 --backend $B
step repro_min_broken 20 $FC repro $W/finding.case.min --backend $B
step tput_py_triton 30 $FC fuzz --time 20 --jobs 16 --quiet --max-seq 256 --max-dim 128 --corpus c_t --findings f_t --seeds $D/seeds --backend $C
step certify_flash_q 40 $FC certify --quick --fuzz-seconds 0 --timeout 30 --out rep_flash --backend py:flashcheck.adapters.torch_sdpa:flash
cp $W/finding.case $W/finding.case.min $OUT/ 2>/dev/null
tar czf $OUT/all_logs.tgz -C $W --exclude='c_*' . 2>/dev/null
head -12 finding.case; grep -A13 category certify_flash_q.log; tail -12 tput_py_triton.log; tail -8 shrink_broken.log
cat $T
