/* bwd_ptx.h: the few PTX wrappers the backward kernels use (prefix bwdx_).
 *
 * mma.sync m16n8k16 (fp32 accumulate), ldmatrix x4 (plain and .trans),
 * cp.async (16 and 4 bytes, zero-fill through src-size), an XOR-swizzled
 * shared-memory tile index, and bf16/fp16 pair packing.
 *
 * Fragment layouts (g = lane / 4, t = lane % 4), PTX ISA "mma.m16n8k16":
 *   A 16x16: a0 (row g, cols 2t..2t+1), a1 (row g+8, same cols),
 *            a2 (row g, cols 8+2t..), a3 (row g+8, cols 8+2t..)
 *   B 16x8 : b0 (rows 2t..2t+1, col g), b1 (rows 8+2t.., col g)
 *   C 16x8 : c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, same cols)
 * so two C tiles side by side (n 0-7, 8-15) are one A tile (k 0-15) once packed.
 * Rounding: mma accumulates in fp32 (the tensor core truncates partial sums,
 * unit roundoff 2^-23); packing rounds fp32 to the 16-bit type to nearest even. */
#ifndef FLASHCHECK_BWD_PTX_H
#define FLASHCHECK_BWD_PTX_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// ----------------------------------------------------------------------------
// shared memory addressing

static __device__ __forceinline__ uint32_t bwdx_smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Element index of (row r, col c) in a tile of ROW 16-bit elements per row whose
 * 16-byte chunks are XOR-swizzled by the row's low 3 bits (ROW >= 64), so that
 * ldmatrix and cp.async on 8 consecutive rows hit 8 different bank groups. */
template <int ROW>
static __device__ __forceinline__ int bwdx_swz(int r, int c) {
    return r * ROW + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
}

// ----------------------------------------------------------------------------
// asynchronous copies global -> shared

/* 16 bytes; when !valid nothing is read and the 16 bytes are zeroed. */
static __device__ __forceinline__ void bwdx_cp16(uint32_t dst, const void *src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
}

/* 4 bytes; when !valid nothing is read and the 4 bytes are zeroed. */
static __device__ __forceinline__ void bwdx_cp4(uint32_t dst, const void *src, bool valid) {
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
}

static __device__ __forceinline__ void bwdx_cp_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

static __device__ __forceinline__ void bwdx_cp_wait_all(void) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// ----------------------------------------------------------------------------
// ldmatrix

static __device__ __forceinline__ void bwdx_ldsm4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void bwdx_ldsm4_t(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* Lane address patterns for one ldmatrix.x4 (element row, col inside a tile):
 *   A  (row-major A, rows m0.., cols k0..)       -> a0..a3
 *   Bn (storage [n][k], n-tiles n0, n0+8)        -> b0,b1 of tile n0; b0,b1 of tile n0+8
 *   Bk (storage [k][n], .trans)                  -> same order as Bn
 *   At (storage [k][m], .trans, gives row-major A) -> a0..a3 */
static __device__ __forceinline__ int bwdx_row_A(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
static __device__ __forceinline__ int bwdx_col_A(int lane) { return (lane >> 4) * 8; }
static __device__ __forceinline__ int bwdx_row_Bn(int lane) { return (lane & 7) + (lane >> 4) * 8; }
static __device__ __forceinline__ int bwdx_col_Bn(int lane) { return ((lane >> 3) & 1) * 8; }
static __device__ __forceinline__ int bwdx_row_Bk(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
static __device__ __forceinline__ int bwdx_col_Bk(int lane) { return (lane >> 4) * 8; }
static __device__ __forceinline__ int bwdx_row_At(int lane) { return (lane & 7) + (lane >> 4) * 8; }
static __device__ __forceinline__ int bwdx_col_At(int lane) { return ((lane >> 3) & 1) * 8; }

// ----------------------------------------------------------------------------
// mma.sync m16n8k16, D = A * B + C in fp32

template <bool BF16>
static __device__ __forceinline__ void bwdx_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// ----------------------------------------------------------------------------
// 16-bit pairs: pack rounds to nearest even; unpack is exact

template <bool BF16>
static __device__ __forceinline__ uint32_t bwdx_pack(float lo, float hi) {
    if (BF16) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
}

template <bool BF16>
static __device__ __forceinline__ float2 bwdx_unpack(uint32_t u) {
    if (BF16) {
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    } else {
        __half2 h = *reinterpret_cast<__half2 *>(&u);
        return __half22float2(h);
    }
}

template <bool BF16>
static __device__ __forceinline__ float bwdx_to_float(uint16_t x) {
    if (BF16) return __uint_as_float(((uint32_t)x) << 16);
    __half h = *reinterpret_cast<__half *>(&x);
    return __half2float(h);
}

template <bool BF16>
static __device__ __forceinline__ uint16_t bwdx_from_float(float x) {
    if (BF16) {
        __nv_bfloat16 v = __float2bfloat16_rn(x);
        return *reinterpret_cast<uint16_t *>(&v);
    } else {
        __half v = __float2half_rn(x);
        return *reinterpret_cast<uint16_t *>(&v);
    }
}

/* 2^x by ex2.approx.ftz.f32: relative error about 2^-22 (PTX ISA), ex2(-inf) = +0. */
static __device__ __forceinline__ float bwdx_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

#endif /* FLASHCHECK_BWD_PTX_H */
