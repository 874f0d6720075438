// PLACEHOLDER until the backward kernel lands: reports UNSUPPORTED, never passes a check.
#include "kernels/cuda/cuda_backend.h"
extern "C" fa_status fa_cuda_backward(const fa_bwd_args *args, fa_error *err) {
    (void)args;
    return fa_fail(err, FA_ERR_UNSUPPORTED, "backward", "CUDA backward is not implemented yet");
}
