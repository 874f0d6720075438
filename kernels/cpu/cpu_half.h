/* cpu_half.h: fp16 / bf16 <-> fp32 conversions for the CPU backend.
 *
 * Prefix fa_cpu_. All four are exact bit manipulations (no FPU mode
 * dependence except the fp32 addition in the fp16 subnormal path, which runs
 * in the default round-to-nearest-even mode; do not build with -ffast-math).
 *   to fp32:   exact (every fp16 and bf16 value is an fp32 value).
 *   from fp32: round to nearest, ties to even (IEEE 754 default), overflow to
 *              +-inf, subnormal results correctly rounded, signed zeros kept;
 *              a NaN stays a NaN of the same sign, made quiet, keeping the top
 *              payload bits (what F16C / CUDA __float2half do).
 * Error: |from_f32(x) - x| <= 2^-11 |x| (fp16) / 2^-8 |x| (bf16) in the
 * normal range, <= 2^-25 (fp16) / 2^-134 (bf16) absolute in the subnormal range. */
#ifndef FLASHCHECK_CPU_HALF_H
#define FLASHCHECK_CPU_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fa_cpu_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float fa_cpu_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// ----------------------------------------------------------------------------
// fp16 (binary16: 1 sign, 5 exponent, 10 fraction bits)

static inline float fa_cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t frac = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: frac * 2^-24, exact in fp32 */
        float mag = (float)frac * 0x1p-24f;
        return fa_cpu_f32_from_bits(fa_cpu_f32_bits(mag) | sign);
    }
    if (exp == 31) return fa_cpu_f32_from_bits(sign | 0x7f800000u | (frac << 13)); /* inf, NaN */
    return fa_cpu_f32_from_bits(sign | ((exp + 112u) << 23) | (frac << 13));
}

static inline uint16_t fa_cpu_f32_to_f16(float f) {
    uint32_t x = fa_cpu_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu); /* NaN */
    if (ax >= 0x47800000u) return sign | 0x7c00u;    /* >= 65536 (or inf): inf */
    if (ax < 0x38800000u) {                          /* below 2^-14: fp16 subnormal or zero */
        /* Adding 0.5 (2^-1) puts the fp16 subnormal quantum 2^-24 at the last
         * fp32 fraction bit, so the fp32 addition does the RNE rounding. */
        float t = fa_cpu_f32_from_bits(ax) + 0.5f;
        return sign | (uint16_t)(fa_cpu_f32_bits(t) - 0x3f000000u);
    }
    /* normal: rebias exponent, round the 13 dropped bits to nearest even; a
     * carry out of the fraction bumps the exponent (up to inf, correctly). */
    uint32_t odd = (ax >> 13) & 1u;
    uint32_t r = ax - (112u << 23) + 0xfffu + odd;
    return sign | (uint16_t)(r >> 13);
}

// ----------------------------------------------------------------------------
// bf16 (1 sign, 8 exponent, 7 fraction bits: the top half of an fp32)

static inline float fa_cpu_bf16_to_f32(uint16_t b) { return fa_cpu_f32_from_bits((uint32_t)b << 16); }

static inline uint16_t fa_cpu_f32_to_bf16(float f) {
    uint32_t x = fa_cpu_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u); /* NaN, quiet */
    uint32_t odd = (x >> 16) & 1u;
    return (uint16_t)((x + 0x7fffu + odd) >> 16); /* RNE; overflow carries into inf */
}

// ----------------------------------------------------------------------------
// by dtype (dtype 0 = FA_F16, 1 = FA_BF16)

static inline float fa_cpu_to_f32(uint16_t bits, int is_bf16) {
    return is_bf16 ? fa_cpu_bf16_to_f32(bits) : fa_cpu_f16_to_f32(bits);
}
static inline uint16_t fa_cpu_from_f32(float f, int is_bf16) {
    return is_bf16 ? fa_cpu_f32_to_bf16(f) : fa_cpu_f32_to_f16(f);
}
/* Round an fp32 value to the dtype and back (the value P carries into P.V). */
static inline float fa_cpu_round_to(float f, int is_bf16) {
    return fa_cpu_to_f32(fa_cpu_from_f32(f, is_bf16), is_bf16);
}

#endif /* FLASHCHECK_CPU_HALF_H */
