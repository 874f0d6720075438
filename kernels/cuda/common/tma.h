/* tma.h: host side of the tensor-map copies of common/gmma.h (prefix tma_): the driver's encoder
 * (queried through the runtime, no libcuda link) and the rank-4 maps of a [batch, rows, heads, dim]
 * view that the warp-specialized kernels read with gmma_tma_load4. Host code only.
 *
 * A map covers (dim, rows, heads, batch), innermost first, strides in elements of the caller's
 * view; a box is 64 columns (128 bytes of 16-bit elements: the 128-byte swizzle span) x box_rows
 * rows of one head of one batch entry, landed in the layout of common/gmma.h (element (r, c) of
 * a box at r * 128 + ((c / 8) ^ (r % 8)) * 16 + (c % 8) * 2 from a 1024-byte aligned start).
 * Elements outside the tensor (rows >= rows, columns >= dim) land as zeros. */
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

#endif /* FLASHCHECK_CUDA_TMA_H */
