# device_common.sh: sourced by device_build.sh and device_build_dev.sh (not run on its own).
# Sets out (.device/fwd), tmp (removed on exit), ARCH and NV (nvcc for sm_90a), and writes
# $tmp/bwd_stub.cu: a backward that returns FA_ERR_UNSUPPORTED, for forward-only device builds.
out=.device/fwd
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
ARCH="-gencode=arch=compute_90a,code=sm_90a"
NV="nvcc -O3 -std=c++17 -I. $ARCH -Xcompiler=-fPIC ${NVCC_EXTRA:-}"
cat > "$tmp/bwd_stub.cu" <<'STUB'
#include "kernels/cuda/cuda_backend.h"
extern "C" fa_status fa_cuda_backward(const fa_bwd_args *args, fa_error *err) {
    (void)args;
    return fa_fail(err, FA_ERR_UNSUPPORTED, "backward", "not in this forward-only device build");
}
STUB
