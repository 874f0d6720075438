#!/bin/bash
# final device call: special cases, bench + torch bench (same call), selfcheck, certify grid, sanitize
B=.device/bwd; O=${OUT:-/tmp/out}; mkdir -p $O
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
timeout 120 $B/bwd_certify_test --special-only --threads 16 > $O/special.txt 2>&1; el "special rc=$?"
tail -1 $O/special.txt; grep -A3 "^FAIL" $O/special.txt | head -20
timeout 120 $B/bwd_bench 20 > $O/bench.txt 2>&1; el "bench rc=$?"
timeout 150 python3 $B/torch_bwd_bench.py 20 > $O/torch.txt 2>&1; el "torch rc=$?"
echo "== bwd_bench"; cat $O/bench.txt; echo "== torch"; cat $O/torch.txt
timeout 60 $B/bwd_selfcheck sanitize > $O/selfcheck.txt 2>&1; el "selfcheck (sanitize subset, no tool) rc=$?"; tail -1 $O/selfcheck.txt
timeout 200 $B/bwd_certify_test --no-big --no-special --threads 16 --rows 32 --det-reps 10 > $O/certify.txt 2>&1; el "certify rc=$?"
tail -2 $O/certify.txt; grep -A3 "^FAIL" $O/certify.txt | head -24
timeout 170 bash $B/sanitize.sh $B/bwd_selfcheck $B/bwd_certify_test > $O/sanitize.txt 2>&1; el "sanitize rc=$?"
grep -E "^==|SUMMARY|cases|^FAIL|failed" $O/sanitize.txt
