/* fa_py_mem.h: the memory-space check of the py backend (prefix fa_py_mem_).
 * Internal to kernels/py: not part of the API.
 *
 * A py backend that declares device="cuda" (FA_MEM_CUDA) gets the harness's
 * pointers wrapped as CUDA DLPack tensors; a host pointer there would reach the
 * user's kernel as a "device" tensor and fault (or be read through UVA as if it
 * were device memory). The bridge is the C ABI on the kernel's behalf, so it
 * rejects such a call itself, before wrapping anything, as the cuda backend does
 * (kernels/cuda/fwd/fwd_host.cu fwd_check_device_ptr): FA_ERR_INVALID naming the
 * argument ("q.ptr", "dk.ptr", ...), a message, nothing written.
 *
 * Which pointers: every tensor the kernel may dereference that has at least one
 * element (q, k, v, o, lse, the mask, sinks; backward also dout, dq, dk, dv,
 * dsinks). A tensor with no element is never dereferenced and is not checked (a
 * packed sequence of length 0 at the end of a buffer points one past it). The
 * contract-v3 int32 arrays (cu_seqlens_*, seqused_k, block_table) are host arrays
 * whatever the memspace and are not checked. */
#ifndef FLASHCHECK_FA_PY_MEM_H
#define FLASHCHECK_FA_PY_MEM_H

#include <stddef.h>

#include "kernels/flash_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where ptr lives: 1 device-accessible memory (device, managed, or host memory
 * registered/pinned with a device address), 0 not device-accessible, -1 the query
 * failed (why filled). */
typedef int (*fa_py_mem_space_fn)(const void *ptr, void *ctx, char *why, size_t whylen);

/* FA_OK when every checked pointer is device-accessible; FA_ERR_INVALID naming the
 * first one that is not (argument order: q, k, v, mask, o, lse, sinks; backward q,
 * k, v, o, dout, lse, mask, dq, dk, dv, sinks, dsinks); FA_ERR_DEVICE (arg
 * "backend") when the query failed. Call after fa_validate_*: sizes and packed
 * offsets are trusted. Writes nothing but *err. */
fa_status fa_py_mem_check_fwd(const fa_fwd_args *a, fa_py_mem_space_fn space, void *ctx, fa_error *err);
fa_status fa_py_mem_check_bwd(const fa_bwd_args *a, fa_py_mem_space_fn space, void *ctx, fa_error *err);

/* The CUDA driver's answer (cuPointerGetAttributes: a device address for ptr), with
 * libcuda.so.1 dlopen()ed on first use (the binary links no libcuda). ctx unused. */
int fa_py_mem_cuda_space(const void *ptr, void *ctx, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FA_PY_MEM_H */
