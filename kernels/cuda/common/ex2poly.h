/* ex2poly.h: 2^x on the FMA pipe (prefix poly_), for a softmax that computes a fixed share of a
 * row's exponentials with it and the rest with ex2.approx (MUFU.EX2), so that both pipes work
 * (FA3 / FA4).
 * No shipped kernel calls it: in the warp-specialized forward (a share of 1..4 of 16 column
 * tiles) it was slower at every measured size (bench/RESULTS-2026-11-25-s7-fwd.md), and a kernel
 * with it no longer gives the same bits as the kernels with ex2.approx alone (fwd_v3_test's
 * paged-vs-dense identity). Kept with its error bound and test for a kernel whose MUFU pipe is
 * the limit. Host and device (the CPU test tests/ex2poly_test.cu evaluates the same code).
 *
 * poly_ex2(x), any float x (12 SASS instructions: 2 FMNMX.NAN, 3 FADD, 6 FFMA, 1 LEA):
 *   x = min.NaN(max.NaN(x, -127), 128)    (NaN stays NaN)
 *   t = RN(x + M), M = 1.5 * 2^23         (t - M = n = round(x), an integer: x + M lies in
 *                                          [2^23, 2^24), where the fp32 spacing is 1)
 *   f = x - (t - M)                       (both subtractions exact: f in [-1/2, 1/2])
 *   p = 1 + f (c1 + f (c2 + f (c3 + f (c4 + f c5))))   (Horner, 5 FFMA, RN; p in [0.70, 1.42])
 *   r = the float with bits bits(p) + (bits(t) << 23)   (the low 9 bits of t's encoding are n:
 *                                          n is added to p's exponent field, an exact 2^n p
 *                                          while the field stays in [1, 254])
 *   result fma(f, 0, r)                    (= r, or NaN when x is NaN: the integer add does
 *                                          not keep a NaN)
 * Error (kernels/cuda/NOTES.md, "poly_ex2"): relative error at most 0.88 * 2^-22 (a priori;
 * 0.72 * 2^-22 measured exhaustively) where 2^x is a normal float (x in [-126, 128)), which
 * is inside the CUDA backend's exp_rel_err 2^-22; x in [-127, -126): a result in [0, 2^-126)
 * (flushes_subnormals: within the absolute floor 2^-126), x <= -127 and -inf: exactly +0
 * (n = -127 with f = 0: p = 1 and bits(1.0) - (127 << 23) = 0); x >= 128: +inf (n = 128,
 * p = 1); NaN: NaN. Coefficients: a near-minimax fit of the relative error on [-1/2, 1/2] with
 * p(0) = 1 exactly, rounded to fp32. */
#ifndef FLASHCHECK_CUDA_EX2POLY_H
#define FLASHCHECK_CUDA_EX2POLY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define POLY_EX2_C1 0x1.62e42ap-1f
#define POLY_EX2_C2 0x1.ebf9bcp-3f
#define POLY_EX2_C3 0x1.c6b752p-5f
#define POLY_EX2_C4 0x1.3cea9p-7f
#define POLY_EX2_C5 0x1.5bba24p-10f
#define POLY_EX2_SHIFT 12582912.0f /* 1.5 * 2^23 */

/* min(max(x, -127), 128), NaN if x is NaN (max.NaN.f32, min.NaN.f32; the host writes the same
 * function in C). */
static __host__ __device__ __forceinline__ float poly_clamp(float x) {
#ifdef __CUDA_ARCH__
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(-127.0f));
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(r), "f"(128.0f));
    return r;
#else
    return x != x ? x : x < -127.0f ? -127.0f : x > 128.0f ? 128.0f : x;
#endif
}

/* 2^x: the steps and the error in the header comment (relative 0.88 * 2^-22 for normal results). */
static __host__ __device__ __forceinline__ float poly_ex2(float x) {
    x = poly_clamp(x);
    const float t = x + POLY_EX2_SHIFT;
    const float f = x - (t - POLY_EX2_SHIFT);
    float q = fmaf(POLY_EX2_C5, f, POLY_EX2_C4);
    q = fmaf(q, f, POLY_EX2_C3);
    q = fmaf(q, f, POLY_EX2_C2);
    q = fmaf(q, f, POLY_EX2_C1);
    const float p = fmaf(q, f, 1.0f);
    uint32_t pb, tb;
    memcpy(&pb, &p, 4);
    memcpy(&tb, &t, 4);
    pb += tb << 23;
    float r;
    memcpy(&r, &pb, 4);
    return fmaf(f, 0.0f, r);
}

#endif /* FLASHCHECK_CUDA_EX2POLY_H */
