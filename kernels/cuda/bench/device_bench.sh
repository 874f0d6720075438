#!/bin/bash
# device_bench.sh: the measured table in one GPU-machine call (repository root, .device/fwd
# carried; logs to $OUT): flash_bench then torch_sdpa_bench.py on the whole grid, one after the
# other; then (diagnosis) ncu warp-stall sampling per SASS instruction of the D = 128, S = 2048,
# non-causal bf16 forward, summarized by kernels/cuda/bench/ncu_stall_top.py.
set -u
out="${OUT:-/tmp/bench}"
mkdir -p "$out"
bin="$(pwd)/.device/fwd"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
"$bin/flash_bench" --iters 30 > "$out/flash_bench.txt" 2>&1
echo "flash_bench exit $?"
python3 kernels/cuda/bench/torch_sdpa_bench.py --iters 30 > "$out/torch_sdpa_bench.txt" 2>&1
echo "torch_sdpa_bench exit $?"
nvidia-smi --query-gpu=clocks.sm --format=csv,noheader | sed 's/^/SM clock after the runs: /'
cat "$out/flash_bench.txt" "$out/torch_sdpa_bench.txt"
timeout 200 ncu --section WarpStateStats --section SourceCounters -k regex:flash_fwd -c 1 -f -o "$out/ours" \
    "$bin/flash_bench" --d 128 --s 2048 --causal 0 --dtype bf16 --iters 1 --warmup 0 > "$out/ncu_log.txt" 2>&1
echo "ncu exit $?"
ncu -i "$out/ours.ncu-rep" --page source --csv --print-source sass > "$out/ours_source.csv" 2> "$out/ncu_src_err.txt"
python3 kernels/cuda/bench/ncu_stall_top.py "$out/ours_source.csv" 2>&1 | head -n 60
rm -f "$out/ours.ncu-rep"
