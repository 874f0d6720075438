#!/bin/bash
# device_diag.sh: one GPU-machine call for the forward's diagnosis (run from the repository root
# with .device/fwd carried; logs go to $OUT):
#   1. the non-finite hidden-key cases (fwd_certify_test --poison) on the guarded kernel and on
#      the old one (-DFWD_NONFINITE_GUARD=0), which must fail;
#   2. flash_bench (guarded, old) and torch_sdpa_bench.py on D = 128 (--quick: S = 2k, 8k);
#   3. ncu on one D = 128, S = 2048, non-causal bf16 forward: this kernel and PyTorch's
#      FlashAttention-2 kernel (same sections, for comparison).
set -u
out="${OUT:-/tmp/diag}"
mkdir -p "$out"
root=$(pwd)
bin="$root/.device/fwd"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader | tee "$out/gpu.txt"
"$bin/fwd_certify_test" --poison --threads 16 > "$out/poison_new.txt" 2>&1
echo "poison (guarded kernel): exit $?; $(grep -c '^ok' "$out/poison_new.txt") ok, $(grep -c '^FAIL' "$out/poison_new.txt") FAIL; $(tail -n 1 "$out/poison_new.txt")"
"$bin/fwd_certify_test_noguard" --poison --threads 16 > "$out/poison_old.txt" 2>&1
echo "poison (old kernel): exit $?; $(grep -c '^ok' "$out/poison_old.txt") ok, $(grep -c '^FAIL' "$out/poison_old.txt") FAIL; $(tail -n 1 "$out/poison_old.txt")"
grep '^FAIL' "$out/poison_new.txt" | head -n 5
grep -A2 '^FAIL' "$out/poison_old.txt" | head -n 9
"$bin/flash_bench_noguard" --d 128 --quick --iters 20 > "$out/bench_noguard.txt" 2>&1
"$bin/flash_bench" --d 128 --quick --iters 20 > "$out/bench.txt" 2>&1
"$bin/flash_bench" --d 128 --quick --iters 20 --family 1 > "$out/bench_fam1.txt" 2>&1
python3 kernels/cuda/bench/torch_sdpa_bench.py --d 128 --quick --iters 20 > "$out/torch.txt" 2>&1
echo "== old kernel"; grep '^| 128' "$out/bench_noguard.txt"
echo "== guarded kernel"; grep '^| 128' "$out/bench.txt"
echo "== guarded, family 1"; grep "^| 128" "$out/bench_fam1.txt"
echo "== torch"; grep '^| 128' "$out/torch.txt"
secs="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
timeout 150 ncu $secs -k regex:flash_fwd -c 1 "$bin/flash_bench" --d 128 --s 2048 --causal 0 --dtype bf16 --iters 1 --warmup 0 > "$out/ncu_ours.txt" 2>&1
echo "ncu ours: exit $?"
timeout 150 ncu $secs --target-processes all -k regex:flash_fwd -c 1 python3 kernels/cuda/bench/torch_sdpa_bench.py --d 128 --s 2048 --causal 0 --dtype bf16 --backend flash --iters 1 --warmup 0 > "$out/ncu_fa2.txt" 2>&1
echo "ncu fa2: exit $?"
for f in ours fa2; do
    echo "== ncu $f"
    grep -E "flash_fwd|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Executed Instructions  |Block Limit Reg|Block Limit Shared|Dynamic Shared|L2 Hit|Compute \(SM\) Th|Memory Th" "$out/ncu_$f.txt" | head -n 24
done
# SASS of the D = 128, 128x64, bf16, raw-score kernel: where the spills are, loop size
k='_Z16flash_fwd_kernelILi128ELi128ELi64ELi4ELb1ELb0EEv10fwd_params'
cuobjdump -sass -fun "$k" "$bin/flash_bench" > "$out/sass128.txt" 2>&1
echo "sass: $(wc -l < "$out/sass128.txt") lines, STL $(grep -c STL "$out/sass128.txt"), LDL $(grep -c LDL "$out/sass128.txt"), HMMA $(grep -c HMMA "$out/sass128.txt"), BAR $(grep -c 'BAR' "$out/sass128.txt")"
