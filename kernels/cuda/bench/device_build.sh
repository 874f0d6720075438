#!/bin/bash
# device_build.sh: build the forward's GPU-machine binaries without Bazel, fully static
# (cudart, MPFR, GMP, libgomp), for sm_90a, into .device/fwd/ (git-ignored):
#   flash_bench, fwd_certify_test, sanitize.sh, gmma_selftest; with NOGUARD=1 also the same two linked against a
#   forward built with -DFWD_NONFINITE_GUARD=0 (flash_bench_noguard, fwd_certify_test_noguard: the
#   old kernel that leaks NaN/Inf of hidden keys through 0 * NaN; regression demonstration only)
# The GPU machine has no Bazel and no MPFR; carry .device/fwd with the `run` tool.
# The backward is replaced by a stub (this build measures and certifies the forward only).
# Usage, from the repository root: [NOGUARD=1] bash kernels/cuda/bench/device_build.sh
set -euo pipefail
source "$(dirname "$0")/device_common.sh"
for f in oracle/orc_bwd.c oracle/orc_compare.c oracle/orc_fwd.c oracle/orc_mpfr.c oracle/orc_util.c; do
    gcc -std=c11 -O3 -mavx2 -mfma -fopenmp -ffp-contract=off -D_GNU_SOURCE -I. -c "$f" -o "$tmp/$(basename "$f" .c).o"
done
for f in kernels/api/fa_api.c kernels/api/fa_validate.c; do
    gcc -std=c11 -O2 -I. -c "$f" -o "$tmp/$(basename "$f" .c).o"
done
gcc -std=c11 -O2 -I. -I/usr/local/cuda/include -c kernels/cuda/tests/fwd_certify_test.c -o "$tmp/test.o"
$NV -c kernels/cuda/fwd/flash_fwd.cu -o "$tmp/flash_fwd.o" &
pid_fwd=$!
variants=""
pid_old=""
if [ "${NOGUARD:-0}" = 1 ]; then
    $NV -DFWD_NONFINITE_GUARD=0 -c kernels/cuda/fwd/flash_fwd.cu -o "$tmp/flash_fwd_noguard.o" &
    pid_old=$!
    variants=_noguard
fi
$NV -c kernels/cuda/backend.cu -o "$tmp/backend.o"
$NV -c "$tmp/bwd_stub.cu" -o "$tmp/bwd_stub.o"
$NV -c kernels/cuda/bench/flash_bench.cu -o "$tmp/bench.o"
wait $pid_fwd
[ -n "$pid_old" ] && wait $pid_old
gomp=$(gcc -print-file-name=libgomp.a)
for variant in "" $variants; do
    common="$tmp/flash_fwd$variant.o $tmp/backend.o $tmp/bwd_stub.o $tmp/fa_api.o $tmp/fa_validate.o"
    nvcc $ARCH -cudart static -o "$out/flash_bench$variant" "$tmp/bench.o" $common
    nvcc $ARCH -cudart static -o "$out/fwd_certify_test$variant" "$tmp/test.o" $common "$tmp"/orc_*.o \
        /usr/lib/x86_64-linux-gnu/libmpfr.a /usr/lib/x86_64-linux-gnu/libgmp.a "$gomp" -lpthread -ldl -lm
done
cp kernels/cuda/tests/sanitize.sh "$out/"
nvcc -O3 -std=c++17 -I. $ARCH -cudart static -o "$out/gmma_selftest" kernels/cuda/sm90/gmma_selftest.cu
ls -la "$out"
