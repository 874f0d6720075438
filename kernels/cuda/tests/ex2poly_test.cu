/* ex2poly_test.cu: poly_ex2 (common/ex2poly.h, the forward's FMA-pipe 2^x) compiled for the
 * host, against exp2l (x86 long double, 64-bit significand: its own error ~2^-63 is far below the
 * bounds checked). No GPU. The claims of kernels/cuda/NOTES.md "poly_ex2":
 *   - normal results (x in [-126, 128)): relative error <= 0.73 * 2^-22 (inside the CUDA
 *     profile's exp_rel_err 2^-22; the a priori bound is 0.88 * 2^-22). The error depends on f = x - round(x) only (the scaling by
 *     2^n is exact), so the test covers every f the domain produces: every multiple of 2^-24 in
 *     [-1/2, 1/2] (all f of |x| >= 1/2: there ulp(x) >= 2^-24) and, with --exhaustive, every
 *     float in [2^-24, 1/2) of both signs (the f of |x| < 1/2; default: every 61st of them plus
 *     the binade ends), and the grid shifted by integers over the whole normal range;
 *   - x in (-127, -126): a result in [0, 2^-126), so |error| < 2^-126, the flushes_subnormals
 *     floor; x <= -127 and -inf -> +0 exactly (the masked score);
 *   - x >= 128 and +inf -> +inf; every float in [127.5, 128) finite and within the bound;
 *   - NaN -> NaN (quiet, negative, payloads); x = 0 -> 1 exactly.
 * Exit 0 when all hold; prints the worst relative error found. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/common/ex2poly.h"

static int failures = 0;
static double worst = 0.0;
static float worst_x = 0.0f;

static float from_bits(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* x with a normal 2^x: relative error against exp2l. */
static void check_normal(float x) {
    const long double ref = exp2l((long double)x);
    const float r = poly_ex2(x);
    const double e = (double)fabsl(((long double)r - ref) / ref);
    if (e > worst) {
        worst = e;
        worst_x = x;
    }
    if (!(e <= 0.73 * 0x1p-22)) {
        if (failures < 10) printf("FAIL x = %a: poly_ex2 = %a, 2^x = %La, relative error %.3g * 2^-22\n", x, r,
                                  ref, e / 0x1p-22);
        ++failures;
    }
}

/* x < -126: result in [0, 2^-126), error below the absolute floor 2^-126, exactly +0 from -127 down. */
static void check_below(float x) {
    const long double ref = exp2l((long double)x);
    const float r = poly_ex2(x);
    const int ok = r >= 0.0f && r < 0x1p-126f && fabsl((long double)r - ref) < 0x1p-126L &&
                   (x > -127.0f || (r == 0.0f && !signbit(r)));
    if (!ok) {
        if (failures < 10) printf("FAIL x = %a (below -126): poly_ex2 = %a, 2^x = %La\n", x, r, ref);
        ++failures;
    }
}

int main(int argc, char **argv) {
    const int exhaustive = argc > 1 && strcmp(argv[1], "--exhaustive") == 0;
    long n = 0;
    // every f in 2^-24 Z cap [-1/2, 1/2], as x = f - 10 (and at the ends of the normal range)
    for (int32_t i = -(1 << 23); i <= (1 << 23); ++i, ++n) check_normal((float)i * 0x1p-24f - 10.0f);
    for (int32_t i = -(1 << 23); i <= (1 << 23); i += 97, n += 2) {
        check_normal((float)i * 0x1p-24f - 125.5f);
        check_normal((float)i * 0x1p-24f + 127.0f);
    }
    for (uint32_t b = 0x42ff0000u; b < 0x43000000u; ++b, ++n) check_normal(from_bits(b));  // [127.5, 128)
    // every integer shift over the normal range, a sparse f grid
    for (int k = -125; k <= 127; ++k)
        for (int32_t i = -(1 << 23); i <= (1 << 23); i += 4099, ++n) check_normal((float)i * 0x1p-24f + (float)k);
    // the f of |x| < 1/2: floats in [2^-24, 1/2) of both signs (stride 1 or 61, binade ends)
    const uint32_t step = exhaustive ? 1u : 61u;
    for (int sgn = 0; sgn < 2; ++sgn) {
        const uint32_t s = sgn ? 0x80000000u : 0u;
        for (uint32_t b = 0x33800000u; b < 0x3f000000u; b += step, ++n) check_normal(from_bits(s | b));
        for (uint32_t e = 0x33800000u; e <= 0x3f000000u; e += 0x00800000u, n += 2) {
            check_normal(from_bits(s | e));
            check_normal(from_bits(s | (e - 1u)));
        }
        check_normal(from_bits(s | 0x00000001u));  // subnormal and tiny arguments: 2^x ~ 1
        check_normal(from_bits(s | 0x00800000u));
        n += 2;
    }
    check_normal(0.0f);
    if (poly_ex2(0.0f) != 1.0f || poly_ex2(-0.0f) != 1.0f) {
        printf("FAIL 2^0 != 1\n");
        ++failures;
    }
    // below the normal range: -126 down to -127 densely, then the rest of the negative floats
    for (int32_t i = 1; i <= (1 << 17); ++i, ++n) check_below(-126.0f - (float)i * 0x1p-17f);  // fp32 spacing there
    for (uint32_t b = 0xc2fe0001u; b < 0xff800000u; b += 4093u, ++n) check_below(from_bits(b));
    check_below(-0x1.fffffep127f);
    const float minf = poly_ex2(-INFINITY);
    if (!(minf == 0.0f && !signbit(minf))) {
        printf("FAIL 2^-inf = %a, not +0\n", minf);
        ++failures;
    }
    const float qn = poly_ex2(NAN), qn2 = poly_ex2(from_bits(0xffc00001u));
    if (!(qn != qn) || !(qn2 != qn2)) {
        printf("FAIL 2^NaN = %a / %a, not NaN\n", qn, qn2);
        ++failures;
    }
    const float big[] = {128.0f, 128.5f, 0x1p22f, 0x1.fffffep127f, INFINITY};
    for (int i = 0; i < 5; ++i)
        if (!(isinf(poly_ex2(big[i])) && poly_ex2(big[i]) > 0.0f)) {
            printf("FAIL 2^%a = %a, not +inf\n", big[i], poly_ex2(big[i]));
            ++failures;
        }
    if (!(poly_ex2(-127.0f) == 0.0f)) {
        printf("FAIL 2^-127 = %a, not +0\n", poly_ex2(-127.0f));
        ++failures;
    }
    printf("ex2poly_test: %ld arguments%s, worst relative error %.4g * 2^-22 at x = %a, %d failed\n", n,
           exhaustive ? " (exhaustive over |x| < 1/2)" : "", worst / 0x1p-22, worst_x, failures);
    return failures ? 1 : 0;
}
