/* cuda_backend.h: the seams inside the CUDA backend (C linkage).
 *   kernels/cuda/backend.cu     fills the fa_backend table, fa_cuda_device_count
 *   kernels/cuda/fwd/           fa_cuda_forward
 *   kernels/cuda/bwd/           fa_cuda_backward
 * Both entry points take DEVICE pointers, validate with fa_validate_*, run on
 * args->stream and synchronize it before returning. */
#ifndef FLASHCHECK_CUDA_BACKEND_H
#define FLASHCHECK_CUDA_BACKEND_H
#include "kernels/flash_api.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Number of usable CUDA devices; 0 when there is no GPU or driver (never fails). */
int fa_cuda_device_count(void);
fa_status fa_cuda_forward(const fa_fwd_args *args, fa_error *err);
fa_status fa_cuda_backward(const fa_bwd_args *args, fa_error *err);
#ifdef __cplusplus
}
#endif
#endif
