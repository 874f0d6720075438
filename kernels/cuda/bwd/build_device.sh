#!/bin/bash
# build_device.sh: build the backward's GPU binaries here (no GPU needed) into
# .device/bwd/ for the device machine: bwd_selfcheck, bwd_bench (sm_90a only,
# static cudart). Run from the repository root.
set -euo pipefail
OUT=.device/bwd
mkdir -p $OUT/obj
NVCC="nvcc -O3 -std=c++17 -Xcompiler=-fPIC -lineinfo -I. -gencode=arch=compute_90a,code=sm_90a"
$NVCC -c kernels/cuda/bwd/flash_bwd.cu -o $OUT/obj/flash_bwd.o &
$NVCC -c kernels/cuda/fwd/flash_fwd.cu -o $OUT/obj/flash_fwd.o &
$NVCC -c kernels/cuda/backend.cu -o $OUT/obj/backend.o
wait
CC="gcc -O2 -std=c11 -I. -I/usr/local/cuda/include"
$CC -c kernels/api/fa_api.c -o $OUT/obj/fa_api.o
$CC -c kernels/api/fa_validate.c -o $OUT/obj/fa_validate.o
LIBS="$OUT/obj/flash_bwd.o $OUT/obj/flash_fwd.o $OUT/obj/backend.o $OUT/obj/fa_api.o $OUT/obj/fa_validate.o"
LINK="-L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt -lstdc++ -lm"
$CC kernels/cuda/bwd/tests/bwd_selfcheck.c $LIBS $LINK -o $OUT/bwd_selfcheck
$CC kernels/cuda/bwd/bench/bwd_bench.c $LIBS $LINK -o $OUT/bwd_bench
cp kernels/cuda/bwd/bench/torch_bwd_bench.py kernels/cuda/bwd/sanitize.sh $OUT/ 2>/dev/null || true
ls -la $OUT
