#!/usr/bin/env bash
# ci/setup.sh: install what flashcheck needs on a fresh Debian 12 machine (run as root, or with sudo).
# Idempotent: packages already present are not fetched again. The CUDA toolkit (nvcc) is expected at
# $CUDA_PATH or /usr/local/cuda; without it the CUDA targets fail to build with a message saying so.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap     # Bazel 4.2.3, the build (runs offline with the stand-ins in build/local_repos)
  build-essential     # gcc 12: host C11 code
  libmpfr-dev         # the oracle's arbitrary-precision tier
  libgmp-dev          # MPFR's integer layer
  libcjson-dev        # JSON reports (flashcheck certify) and baselines
  libcmocka-dev       # unit-test framework for the API tests
  clang-14            # libFuzzer campaigns (-fsanitize=fuzzer,address,undefined)
  libclang-rt-14-dev  # libFuzzer and sanitizer runtimes
  python3-mpmath      # the oracle's independent cross-check (second arbitrary-precision implementation)
  python3-numpy       # .npy fixtures for `flashcheck verify` tests; the numpy kernels of the py backend tests
  python3-dev         # CPython's stable-ABI headers for the py backend (kernels/py; libpython is dlopen'ed at run time)
  libdlpack-dev       # dlpack/dlpack.h: the py backend hands the harness's buffers to torch without copies
  python3-pytest      # the Python package's tests and its pytest plugin (python/tests)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v bazel >/dev/null || { echo "setup: bazel not on PATH after installing bazel-bootstrap" >&2; exit 1; }
nvcc_path="${CUDA_PATH:-/usr/local/cuda}/bin/nvcc"
[ -x "$nvcc_path" ] || echo "setup: warning: no nvcc at $nvcc_path: CUDA targets will not build (set CUDA_PATH)" >&2
echo "setup: ok"
