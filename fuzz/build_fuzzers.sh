#!/usr/bin/env bash
# build_fuzzers.sh [OUT]: build the real libFuzzer binaries with clang 14
# (-fsanitize=fuzzer, AddressSanitizer and UndefinedBehaviorSanitizer on all
# host code) from the SAME target sources Bazel builds with gcc:
#   OUT/fz_fwd     forward target        (fuzz/fz_target_case.c, FZ_TARGET_BACKWARD=0)
#   OUT/fz_bwd     backward target       (fuzz/fz_target_case.c, FZ_TARGET_BACKWARD=1)
#   OUT/fz_misuse  API-misuse target     (fuzz/fz_target_misuse.c)
#   OUT/flashcheck.dict, OUT/seeds/{case,misuse}/
# OUT defaults to .fuzzbuild/ in the workspace root (git-ignored through .git/info/exclude).
# Bazel cannot build these: its toolchain here is gcc, which has no libFuzzer.
#
# The default build has the CPU backend only. FLASHCHECK_FUZZ_CUDA=1 also compiles
# the CUDA backend with nvcc (device code is not instrumented; host code is) and
# links the static CUDA runtime; run it with ASAN_OPTIONS=protect_shadow_gap=0.
#
# Run, e.g.:
#   .fuzzbuild/fz_fwd -dict=.fuzzbuild/flashcheck.dict -max_len=8192 -timeout=120 \
#       corpus/ .fuzzbuild/seeds/case            # findings go to ./findings (FLASHCHECK_FINDINGS)
#   .fuzzbuild/fz_bwd -fork=8 -ignore_crashes=1 corpus/  # device faults abort one child, the rest go on
#   FLASHCHECK_BACKEND=cuda FLASHCHECK_ABORT=1 .fuzzbuild/fz_fwd ...   # ClusterFuzzLite-style: crash on finding
set -euo pipefail
ws="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$ws/.fuzzbuild}"
CC="${CC:-clang-14}"
command -v "$CC" >/dev/null || { echo "build_fuzzers: $CC not found; install clang-14 and libclang-rt-14-dev (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }
echo 'int LLVMFuzzerTestOneInput(const unsigned char*d,unsigned long n){(void)d;(void)n;return 0;}' > /tmp/fz_probe.$$.c
if ! "$CC" -fsanitize=fuzzer /tmp/fz_probe.$$.c -o /tmp/fz_probe.$$ 2>/dev/null; then
  rm -f /tmp/fz_probe.$$.c; echo "build_fuzzers: $CC cannot link -fsanitize=fuzzer; install libclang-rt-14-dev" >&2; exit 2
fi
rm -f /tmp/fz_probe.$$.c /tmp/fz_probe.$$
mkdir -p "$out/obj"
cd "$ws"

san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
common="-std=c11 -g -O1 -I. -D_GNU_SOURCE -fopenmp $san"
cov="-fsanitize=fuzzer-no-link"       # coverage on the harness and the host-side backend code
cuda=${FLASHCHECK_FUZZ_CUDA:-0}

objs=()
compile() { # flags file...
  local flags=$1; shift
  for f in "$@"; do
    local o="$out/obj/$(echo "$f" | tr / _).o"
    "$CC" $common $flags -c "$f" -o "$o"
    objs+=("$o")
  done
}
# harness, case, API, CPU backend, checks and properties: coverage + sanitizers
compile "$cov" fuzz/fz_gen.c fuzz/fz_feat.c fuzz/fz_store.c fuzz/fz_harness.c fuzz/fz_misuse.c fuzz/fz_run.c \
  case/case.c case/case_clock.c case/case_text.c kernels/api/fa_api.c kernels/api/fa_validate.c \
  kernels/cpu/cpu_backend.c kernels/cpu/cpu_fwd.c kernels/cpu/cpu_bwd.c kernels/cpu/cpu_mutants.c \
  properties/check/check.c properties/check/masked_nf.c properties/check/run.c properties/check/verdict.c properties/properties.c
# the oracle: sanitizers, no coverage (its branches say nothing about the kernel), its own ISA flags
compile "-mavx2 -mfma -ffp-contract=off" $(ls oracle/orc_*.c)
libs="-lmpfr -lgmp -lm -ldl -lpthread"
# properties/check/run.c mirrors buffers to the device when <cuda_runtime_api.h> is visible
cudart="${CUDA_PATH:-/usr/local/cuda}/lib64/libcudart_static.a"
[ -f "$cudart" ] && libs="$libs $cudart -lrt -lstdc++"
if [ "$cuda" = 1 ]; then
  nvcc="${CUDA_PATH:-/usr/local/cuda}/bin/nvcc"
  for f in $(find kernels/cuda -name '*.cu' -not -path '*/bench/*' -not -path '*/tests/*' -not -name '*selftest*'); do
    o="$out/obj/$(echo "$f" | tr / _).o"
    "$nvcc" -c -O3 -std=c++17 -I. -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 "$f" -o "$o"
    objs+=("$o")
  done
  compile "$cov -DFA_REGISTRY_NO_PY -I${CUDA_PATH:-/usr/local/cuda}/include" kernels/registry/fa_registry.c
else
  compile "$cov -DFA_REGISTRY_CPU_ONLY -DFA_REGISTRY_NO_PY" kernels/registry/fa_registry.c
fi

link() { # name defines source
  local name=$1 defs=$2 src=$3
  "$CC" $common -fsanitize=fuzzer $defs "$src" "${objs[@]}" $libs -o "$out/$name"
  echo "built $out/$name"
}
link fz_fwd "-DFZ_TARGET_BACKWARD=0" fuzz/fz_target_case.c
link fz_bwd "-DFZ_TARGET_BACKWARD=1" fuzz/fz_target_case.c
link fz_misuse "" fuzz/fz_target_misuse.c
cp fuzz/flashcheck.dict "$out/flashcheck.dict"
rm -rf "$out/seeds"; mkdir -p "$out/seeds/case"
cp fuzz/regressions/fwd/*.case fuzz/regressions/bwd/*.case "$out/seeds/case/"   # the case seeds (fuzz/seeds/BUILD)
cp -r fuzz/seeds/misuse "$out/seeds/"
echo "build_fuzzers: done; e.g. $out/fz_fwd -dict=$out/flashcheck.dict -max_len=8192 -timeout=120 corpus/ $out/seeds/case"
