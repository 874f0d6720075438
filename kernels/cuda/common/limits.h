/* limits.h: the CUDA backend's limits, defined once (prefix FA_CUDA_).
 * backend.cu puts them in the backend table (what fa_validate_fwd/bwd and the harness
 * see); the forward and backward hosts check the rest (sequence lengths, pairs) with
 * the same names. */
#ifndef FLASHCHECK_CUDA_LIMITS_H
#define FLASHCHECK_CUDA_LIMITS_H

#define FA_CUDA_MAX_HEAD_DIM 256     /* head dims 8..256 */
#define FA_CUDA_HEAD_DIM_MULTIPLE 8  /* in steps of 8 (16-byte chunks) */
#define FA_CUDA_DQK_MUST_EQUAL_DV 0 /* any pair (Dqk, Dv) of head dims: fwd_tiles.h, bwd_common.cuh */
#define FA_CUDA_PTR_ALIGN_BYTES 16   /* the forward moves 16-byte chunks (table value) */
#define FA_CUDA_BWD_PTR_ALIGN_BYTES 2 /* the backward has scalar paths: the element size */
#define FA_CUDA_UNIT_LAST_STRIDE 1
/* contract v3 features the forward runs (fwd/fwd_host.cu): varlen (cu_seqlens_q/k, seqused_k),
 * paged K/V (any page size), softcap, sinks. The backward (bwd/bwd_host.cu) runs varlen (one
 * dense backward per sequence), sinks, and softcap on the sm_80 kernels; it answers
 * FA_ERR_UNSUPPORTED for paged K/V ("page_size") and for a softcap call that needs the exact
 * kernels ("softcap"). */
#define FA_CUDA_SUPPORTS_VARLEN 1
#define FA_CUDA_SUPPORTS_PAGED 1
#define FA_CUDA_SUPPORTS_SOFTCAP 1
#define FA_CUDA_SUPPORTS_SINKS 1
/* sequence positions are int32 in the forward kernels */
#define FA_CUDA_MAX_SEQLEN ((int64_t)INT32_MAX - 1024)

#endif /* FLASHCHECK_CUDA_LIMITS_H */
