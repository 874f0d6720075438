#!/bin/bash
# device_table.sh: the forward's measured table and its certification in ONE GPU-machine call
# (repository root, .device/fwd carried, built by device_build.sh; logs to $OUT):
#   flash_bench on the whole grid, torch_sdpa_bench.py (flash, cuDNN), flash_bench at D = 128 with the
#   mma.sync kernel forced (--sm90 0), the merged table; then fwd_certify_test and sanitize.sh side by
#   side, and gmma_selftest (the wgmma wrappers). The 03:29 UTC table of RESULTS.md came from these
#   commands (run from a scratch copy of this script that differed only in where the logs went).
set -u
OUT="${OUT:-/tmp/table}"
mkdir -p "$OUT/san"
bin="$(pwd)/.device/fwd"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
date -u
"$bin/flash_bench" --iters 30 > "$OUT/flash_bench.txt" 2>&1; echo "flash_bench exit $?"
python3 kernels/cuda/bench/torch_sdpa_bench.py --iters 30 > "$OUT/torch_sdpa_bench.txt" 2>&1; echo "torch exit $?"
"$bin/flash_bench" --iters 30 --d 128 --sm90 0 > "$OUT/flash_bench_mma.txt" 2>&1; echo "flash_bench (mma.sync kernel) exit $?"
nvidia-smi --query-gpu=clocks.sm --format=csv,noheader | sed 's/^/SM clock after: /'
python3 kernels/cuda/bench/merge_tables.py "$OUT/flash_bench.txt" "$OUT/torch_sdpa_bench.txt" > "$OUT/merged.md" 2>&1
cat "$OUT/merged.md"
( cd "$bin" && timeout 400 ./fwd_certify_test --threads 8 > "$OUT/certify.txt" 2>&1; echo "certify exit $?" > "$OUT/certify_rc.txt" ) &
( cd "$bin" && TEST_TMPDIR="$OUT/san" timeout 400 ./sanitize.sh ./fwd_certify_test > "$OUT/sanitize.txt" 2>&1; echo "sanitize exit $?" > "$OUT/sanitize_rc.txt" ) &
"$bin/gmma_selftest"
wait
cat "$OUT/certify_rc.txt" "$OUT/sanitize_rc.txt"; tail -n 1 "$OUT/certify.txt"; grep '^FAIL' "$OUT/certify.txt" | head
grep -E '^(memcheck|racecheck|initcheck|synccheck):|^sanitize:' "$OUT/sanitize.txt"
echo "sanitized cases with D 104..128: $(grep -cE ' D(104|112|120|128) ' "$OUT/san/sanitize_memcheck.log")"
date -u
