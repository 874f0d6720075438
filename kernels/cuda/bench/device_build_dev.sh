#!/bin/bash
# device_build_dev.sh: development experiment builds of flash_bench into .device/fwd/bench_x_NAME.
# Each compiles ONE forward kernel (-DFWD_DEV_ONE_VARIANT: D = 128, bf16, raw scores, tile
# FWD_DEV_BM x FWD_DEV_BN with FWD_DEV_NW warps, default 128 x 64 x 4) in a few seconds, so that
# scheduling and tiling ideas can be timed without the full build; none is certified, none is
# what the backend ships. device_certify.sh times every bench_x_* it finds.
# Usage, from the repository root: bash kernels/cuda/bench/device_build_dev.sh
set -euo pipefail
source "$(dirname "$0")/device_common.sh"
for f in kernels/api/fa_api.c kernels/api/fa_validate.c; do
    gcc -std=c11 -O2 -I. -c "$f" -o "$tmp/$(basename "$f" .c).o"
done
$NV -c kernels/cuda/backend.cu -o "$tmp/backend.o"
$NV -c "$tmp/bwd_stub.cu" -o "$tmp/bwd_stub.o"
$NV -c kernels/cuda/bench/flash_bench.cu -o "$tmp/bench.o"
build_x() {
    local name=$1
    shift
    $NV -DFWD_DEV_ONE_VARIANT "$@" -Xptxas -v -c kernels/cuda/fwd/flash_fwd.cu -o "$tmp/$name.o" 2>&1 |
        grep -E "stack frame" | head -n 1 | sed "s/^/$name: /"
    nvcc $ARCH -cudart static -o "$out/bench_x_$name" "$tmp/bench.o" "$tmp/$name.o" "$tmp/backend.o" \
        "$tmp/bwd_stub.o" "$tmp/fa_api.o" "$tmp/fa_validate.o"
}
rm -f "$out"/bench_x_*
build_x guard                                   # the shipped kernel code (NaN/Inf guard at the block top)
build_x noguard -DFWD_NONFINITE_GUARD=0         # the old kernel (leaks 0 * NaN)
# Experiments take -D switches that a development edit of flash_fwd.cu adds; the three measured on
# 2026-11-23 (mma non-volatile, late K/V prefetch, rescale vote) were rejected and their switches
# removed from the kernel (bench/RESULTS.md). Tile experiments: build_x NAME -DFWD_DEV_BM=.. -DFWD_DEV_BN=..
ls "$out"/bench_x_*
