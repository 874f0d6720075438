#!/bin/bash
# build_device.sh: build the backward's GPU binaries here (no GPU needed) into
# .device/bwd/ for the device machine: bwd_certify_test, bwd_selfcheck, bwd_bench
# (sm_90a only, static cudart, MPFR/GMP/libgomp linked statically). Run from the repository root.
# FWD_SRC: the forward source to link (default the working tree's; the forward only supplies O and
# LSE to the tests, so a committed copy keeps these binaries independent of forward work in progress).
set -euo pipefail
OUT=${OUT_DIR:-.device/bwd}
FWD_SRC=${FWD_SRC:-kernels/cuda/fwd/flash_fwd.cu}
mkdir -p $OUT/obj
NVCC="nvcc -O3 -std=c++17 -Xcompiler=-fPIC -lineinfo -I. -gencode=arch=compute_90a,code=sm_90a"
$NVCC -c kernels/cuda/bwd/flash_bwd.cu -o $OUT/obj/flash_bwd.o &
$NVCC -c $FWD_SRC -o $OUT/obj/flash_fwd.o &
$NVCC -c kernels/cuda/backend.cu -o $OUT/obj/backend.o
wait
CC="gcc -O2 -std=c11 -I. -I/usr/local/cuda/include"
$CC -c kernels/api/fa_api.c -o $OUT/obj/fa_api.o
$CC -c kernels/api/fa_validate.c -o $OUT/obj/fa_validate.o
LIBS="$OUT/obj/flash_bwd.o $OUT/obj/flash_fwd.o $OUT/obj/backend.o $OUT/obj/fa_api.o $OUT/obj/fa_validate.o"
LINK="-L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt -lstdc++ -lm"
ORC="gcc -O3 -std=c11 -mavx2 -mfma -fopenmp -ffp-contract=off -D_GNU_SOURCE -I."
for f in orc_bwd orc_compare orc_fwd orc_mpfr orc_util; do $ORC -c oracle/$f.c -o $OUT/obj/$f.o & done
wait
ORCLIBS="$OUT/obj/orc_bwd.o $OUT/obj/orc_compare.o $OUT/obj/orc_fwd.o $OUT/obj/orc_mpfr.o $OUT/obj/orc_util.o"
$CC -D_GNU_SOURCE -c case/case.c -o $OUT/obj/case.o
$CC -D_GNU_SOURCE -c case/case_text.c -o $OUT/obj/case_text.o
ORCLIBS="$ORCLIBS $OUT/obj/case.o $OUT/obj/case_text.o"
STATIC="/usr/lib/x86_64-linux-gnu/libmpfr.a /usr/lib/x86_64-linux-gnu/libgmp.a $(gcc -print-file-name=libgomp.a)"
$CC -fopenmp kernels/cuda/bwd/tests/bwd_certify_test.c $LIBS $ORCLIBS $STATIC $LINK -o $OUT/bwd_certify_test
$CC kernels/cuda/bwd/tests/bwd_selfcheck.c $LIBS $LINK -o $OUT/bwd_selfcheck
$CC kernels/cuda/bwd/bench/bwd_bench.c $LIBS $LINK -o $OUT/bwd_bench
cp kernels/cuda/bwd/bench/torch_bwd_bench.py kernels/cuda/bwd/sanitize.sh kernels/cuda/bwd/bench/certify_first.sh \
    kernels/cuda/bwd/bench/run_gmma.sh kernels/cuda/bwd/bench/run_det.sh $OUT/
rm -rf $OUT/obj
ls -la $OUT
