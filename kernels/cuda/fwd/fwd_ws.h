/* fwd_ws.h: the warp-specialized Hopper forward (fwd_sm90_ws.cu), as the host dispatch sees it
 * (prefix fwd_ws_). */
#ifndef FLASHCHECK_CUDA_FWD_WS_H
#define FLASHCHECK_CUDA_FWD_WS_H
#include <cuda_runtime.h>

#include "kernels/cuda/fwd/fwd_common.cuh"

/* Shared memory (bytes) of the kernel at padded head dim hd (64 or 128). */
size_t fwd_ws_smem_bytes(int hd);

/* Launch the warp-specialized kernel for p (padded head dim hd = 64 or 128, an sm_90 device, 16-byte
 * aligned rows: fa_cuda_forward's checks) on stream st. Dense, packed (p->cu_q / p->cu_k: q_rows /
 * k_rows are the packed row counts cu_q[B] / cu_k[B], from the host), seqused_k, and paged K/V
 * (p->block_table: num_pages pages of p->page_size rows, a page size that is a multiple of 8).
 * Returns 1 when it does not apply (a head dim it has no instantiation for, a page size that is
 * not a multiple of 8, tensor maps the driver cannot encode for these strides): the caller runs
 * another kernel, nothing was launched. Returns 0 when launched; *e is the launch status. */
int fwd_ws_launch(const fwd_params *p, int hd, int bf16, int natural, int64_t q_rows, int64_t k_rows,
                  int64_t num_pages, cudaStream_t st, cudaError_t *e);

#endif /* FLASHCHECK_CUDA_FWD_WS_H */
