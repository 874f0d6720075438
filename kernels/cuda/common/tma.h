/* tma.h: host side of the tensor-map copies of common/gmma.h (prefix tma_): the driver's encoder
 * (queried through the runtime, no libcuda link) and the rank-4 maps of a [batch, rows, heads, dim]
 * view that the warp-specialized kernels read with gmma_tma_load4. Host code only.
 *
 * A map covers (dim, rows, heads, batch), innermost first, strides in elements of the caller's
 * view; a box is 64 columns (128 bytes of 16-bit elements: the 128-byte swizzle span) x box_rows
 * rows of one head of one batch entry, landed in the layout of common/gmma.h (element (r, c) of
 * a box at r * 128 + ((c / 8) ^ (r % 8)) * 16 + (c % 8) * 2 from a 1024-byte aligned start).
 * Elements outside the tensor (rows >= rows, columns >= dim) land as zeros. tma_map32_rank4 and
 * tma_reduce_add4: the fp32 destination of tensor reductions (the backward's dQ workspace). */
#ifndef FLASHCHECK_CUDA_TMA_H
#define FLASHCHECK_CUDA_TMA_H
#include <cuda.h> /* CUtensorMap and the encoder's types */
#include <cuda_runtime.h>
#include <stdint.h>

typedef CUresult (*tma_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's cuTensorMapEncodeTiled, or NULL (queried once per translation unit). */
static inline tma_encode_fn tma_encoder(void) {
    static tma_encode_fn fn = NULL;
    static int tried = 0;
    if (!tried) {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (tma_encode_fn)f;
        else
            cudaGetLastError();
        tried = 1;
    }
    return fn;
}

/* The rank-4 map of 16-bit elements at base: sizes (d, rows, heads, batch), strides s_row, s_head,
 * s_batch in elements; box 64 x box_rows (box_rows <= 256), 128-byte swizzle, zeros outside.
 * A dimension of size 1 gets the next inner stride (its own is never used and may be 0 or odd).
 * 0 on success; 1 when the driver has no encoder or a stride is not a multiple of 16 bytes (or
 * >= 2^40), or the encoder refuses: the caller then runs a kernel that does not use maps. */
static inline int tma_map16_rank4(CUtensorMap *m, const void *base, int64_t d, int64_t rows, int64_t heads,
                                  int64_t batch, int64_t s_row, int64_t s_head, int64_t s_batch, int box_rows) {
    const tma_encode_fn enc = tma_encoder();
    if (enc == NULL) return 1;
    if (rows == 1) s_row = d;
    if (heads == 1) s_head = s_row;
    if (batch == 1) s_batch = s_head;
    const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)s_row * 2, (cuuint64_t)s_head * 2, (cuuint64_t)s_batch * 2};
    const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    if (((uintptr_t)base & 15) != 0) return 1;
    for (int i = 0; i < 3; ++i)
        if (strides[i] == 0 || strides[i] % 16 != 0 || strides[i] >= (1ull << 40)) return 1;
    const CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, (void *)base, dims, strides, box, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : 1;
}

/* The rank-4 map of fp32 elements at base (the same sizes and strides in elements), box 32 columns
 * (128 bytes) x box_rows rows, 128-byte swizzle: the element (r, c) of a box is at
 * r * 128 + ((c / 4) ^ (r % 8)) * 16 + (c % 4) * 4 from a 1024-byte aligned start (tma_swz32).
 * Used as the destination of tensor reductions (tma_reduce_add4): elements outside the tensor are
 * not written. 0 on success, 1 as tma_map16_rank4. */
static inline int tma_map32_rank4(CUtensorMap *m, const void *base, int64_t d, int64_t rows, int64_t heads,
                                  int64_t batch, int64_t s_row, int64_t s_head, int64_t s_batch, int box_rows) {
    const tma_encode_fn enc = tma_encoder();
    if (enc == NULL) return 1;
    if (rows == 1) s_row = d;
    if (heads == 1) s_head = s_row;
    if (batch == 1) s_batch = s_head;
    const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)s_row * 4, (cuuint64_t)s_head * 4, (cuuint64_t)s_batch * 4};
    const cuuint32_t box[4] = {32, (cuuint32_t)box_rows, 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    if (((uintptr_t)base & 15) != 0) return 1;
    for (int i = 0; i < 3; ++i)
        if (strides[i] == 0 || strides[i] % 16 != 0 || strides[i] >= (1ull << 40)) return 1;
    const CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, (void *)base, dims, strides, box, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : 1;
}

#ifdef __CUDACC__
/* Byte offset of fp32 element (r, c) (c < 32) in a box of a tma_map32_rank4 map. */
static __device__ __forceinline__ uint32_t tma_swz32(int r, int c) {
    return (uint32_t)(r * 128 + ((((c >> 2) ^ (r & 7))) << 4) + (c & 3) * 4);
}

/* Tensor reduction global += shared of one box of a tma_map32_rank4 map (map: a __grid_constant__
 * kernel parameter) at coordinates (c0 innermost, in elements) from the swizzled box at src
 * (1024-byte aligned): fp32 adds at L2 (as cp.reduce.async.bulk .add.f32), elements outside the
 * tensor skipped; completes in the issuing thread's bulk group (gmma_bulk_commit, then
 * gmma_bulk_wait_read before src is rewritten). sm_90a only. */
static __device__ __forceinline__ void tma_reduce_add4(const void *map, uint32_t src, int c0, int c1, int c2, int c3) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(map),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
                 : "memory");
#else
    (void)map; (void)src; (void)c0; (void)c1; (void)c2; (void)c3;
    __trap();
#endif
}
#endif

#endif /* FLASHCHECK_CUDA_TMA_H */
