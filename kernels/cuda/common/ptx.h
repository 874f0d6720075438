/* ptx.h: the PTX layer shared by every CUDA kernel of the backend (prefix ptx_).
 *
 * Named primitives, each one instruction (or a fixed short sequence), no policy:
 *   addressing   ptx_smem                          generic -> shared-window address
 *   copies       ptx_cp16, ptx_cp4, ptx_cp_commit, ptx_cp_wait<N>
 *                                                  cp.async global -> shared (zero-fill by size)
 *   fragments    ptx_ldsm4, ptx_ldsm4_t            ldmatrix x4 (plain, .trans)
 *                ptx_ldsm_{row,col}_{A,Bn,Bk,At}   the lane address patterns of one ldmatrix.x4
 *   products     ptx_mma16816<BF16>                mma.sync m16n8k16, fp32 accumulate
 *   values       ptx_pack2, ptx_unpack2, ptx_to_float, ptx_from_float, ptx_ex2, ptx_min_nan
 *   plain moves  ptx_ld_shared16, ptx_st_shared16, ptx_st_shared32, ptx_st_global16
 * The Hopper-only instructions (wgmma, stmatrix, bulk reductions) are in gmma.h.
 *
 * Fragment layouts (g = lane / 4, t = lane % 4), PTX ISA "mma.m16n8k16":
 *   A 16x16: a0 (row g, cols 2t..2t+1), a1 (row g+8, same cols),
 *            a2 (row g, cols 8+2t..), a3 (row g+8, cols 8+2t..)
 *   B 16x8 : b0 (rows 2t..2t+1, col g), b1 (rows 8+2t.., col g)
 *   C 16x8 : c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, same cols)
 * so two C tiles side by side (n 0-7, 8-15) are one A tile (k 0-15) once packed.
 * Rounding: mma accumulates in fp32 (the tensor core truncates partial sums, unit
 * roundoff 2^-23, products exact); ptx_pack2 / ptx_from_float round fp32 to the 16-bit
 * type to nearest even; ptx_unpack2 / ptx_to_float are exact; ptx_ex2 is
 * ex2.approx.ftz.f32 (relative error about 2^-22, results below 2^-126 flush to 0,
 * ex2(-inf) = +0). */
#ifndef FLASHCHECK_CUDA_PTX_H
#define FLASHCHECK_CUDA_PTX_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// ----------------------------------------------------------------------------
// addressing

static __device__ __forceinline__ uint32_t ptx_smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// ----------------------------------------------------------------------------
// asynchronous copies global -> shared

/* 16 bytes; src_bytes = 0 reads nothing and writes 16 zero bytes. */
static __device__ __forceinline__ void ptx_cp16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}

/* 4 bytes; src_bytes = 0 reads nothing and writes 4 zero bytes. */
static __device__ __forceinline__ void ptx_cp4(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}

static __device__ __forceinline__ void ptx_cp_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Wait until at most N of this thread's committed groups are in flight. */
template <int N>
static __device__ __forceinline__ void ptx_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ----------------------------------------------------------------------------
// ldmatrix

static __device__ __forceinline__ void ptx_ldsm4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void ptx_ldsm4_t(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* Lane address patterns for one ldmatrix.x4 (element row, col inside a tile):
 *   A  (row-major A, rows m0.., cols k0..)         -> a0..a3
 *   Bn (storage [n][k], n-tiles n0, n0+8)          -> b0,b1 of tile n0; b0,b1 of tile n0+8
 *   Bk (storage [k][n], .trans)                    -> same order as Bn
 *   At (storage [k][m], .trans, gives row-major A) -> a0..a3 */
static __device__ __forceinline__ int ptx_ldsm_row_A(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
static __device__ __forceinline__ int ptx_ldsm_col_A(int lane) { return (lane >> 4) * 8; }
static __device__ __forceinline__ int ptx_ldsm_row_Bn(int lane) { return (lane & 7) + (lane >> 4) * 8; }
static __device__ __forceinline__ int ptx_ldsm_col_Bn(int lane) { return ((lane >> 3) & 1) * 8; }
static __device__ __forceinline__ int ptx_ldsm_row_Bk(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
static __device__ __forceinline__ int ptx_ldsm_col_Bk(int lane) { return (lane >> 4) * 8; }
static __device__ __forceinline__ int ptx_ldsm_row_At(int lane) { return (lane & 7) + (lane >> 4) * 8; }
static __device__ __forceinline__ int ptx_ldsm_col_At(int lane) { return ((lane >> 3) & 1) * 8; }

// ----------------------------------------------------------------------------
// mma.sync m16n8k16: c += a * b in fp32

template <bool BF16>
static __device__ __forceinline__ void ptx_mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
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
// 16-bit values: pack rounds to nearest even; unpack is exact

/* Two floats -> two fp16/bf16 (RN) packed, lo in the low half. */
template <bool BF16>
static __device__ __forceinline__ uint32_t ptx_pack2(float lo, float hi) {
    uint32_t r;
    if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <bool BF16>
static __device__ __forceinline__ float2 ptx_unpack2(uint32_t u) {
    if (BF16) {
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    } else {
        __half2 h = *reinterpret_cast<__half2 *>(&u);
        return __half22float2(h);
    }
}

template <bool BF16>
static __device__ __forceinline__ float ptx_to_float(uint16_t x) {
    if (BF16) return __uint_as_float(((uint32_t)x) << 16);
    __half h = *reinterpret_cast<__half *>(&x);
    return __half2float(h);
}

template <bool BF16>
static __device__ __forceinline__ uint16_t ptx_from_float(float x) {
    if (BF16) {
        __nv_bfloat16 v = __float2bfloat16_rn(x);
        return *reinterpret_cast<uint16_t *>(&v);
    } else {
        __half v = __float2half_rn(x);
        return *reinterpret_cast<uint16_t *>(&v);
    }
}

/* 2^x by ex2.approx.ftz.f32. */
static __device__ __forceinline__ float ptx_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* min(a, b) by min.NaN.f32 (sm_80+): exact; NaN when either is NaN (fminf would drop it). */
static __device__ __forceinline__ float ptx_min_nan(float a, float b) {
    float y;
    asm("min.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
    return y;
}

// ----------------------------------------------------------------------------
// plain 16-byte / 4-byte moves

static __device__ __forceinline__ void ptx_ld_shared16(uint32_t addr, uint4 *v) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v->x), "=r"(v->y), "=r"(v->z), "=r"(v->w)
                 : "r"(addr));
}
static __device__ __forceinline__ void ptx_st_shared16(uint32_t addr, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
static __device__ __forceinline__ void ptx_st_shared32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v));
}
static __device__ __forceinline__ void ptx_st_global16(void *p, uint4 v) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

#endif /* FLASHCHECK_CUDA_PTX_H */
