/* test_round16.c: orc_fm_round16 (x rounded to fp16 / bf16, RN ties to even, as a double) on
 * the host, by bit arithmetic, = the libm formula it replaced there (ldexp / ilogb / rint,
 * still the device's), bit for bit: every fp16 / bf16 value, the midpoints between neighbours
 * (ties) and a hair either side, the subnormal grids, the overflow threshold, zeros of both
 * signs, Inf, NaN, double subnormals and huge doubles, and 4M random doubles of every
 * exponent. */
#include "oracle/orc_internal.h"
#include "oracle/tests/tutil.h"

static double ref_round16(double x, int bf16) {
    if (!isfinite(x)) return x;
    int mant = bf16 ? 7 : 10, emin = bf16 ? -126 : -14;
    double maxf = bf16 ? 0x1.fep127 : 65504.0;
    double a = fabs(x), q;
    if (a < ldexp(1.0, emin))
        q = ldexp(rint(ldexp(a, mant - emin)), emin - mant);
    else {
        int E = ilogb(a);
        q = ldexp(rint(ldexp(a, mant - E)), E - mant);
    }
    if (q > maxf) q = INFINITY;
    return copysign(q, x);
}

static int64_t n_checked, n_bad;

static void one(double x, int bf16) {
    double a = orc_fm_round16(x, bf16), b = ref_round16(x, bf16);
    n_checked++;
    if (memcmp(&a, &b, sizeof a) && !(isnan(a) && isnan(b))) {
        if (n_bad++ < 10) fprintf(stderr, "FAIL: round16(%a, bf16 %d) = %a, libm formula %a\n", x, bf16, a, b);
    }
}

int main(void) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        fa_dtype dt = bf16 ? FA_BF16 : FA_F16;
        for (uint32_t bits = 0; bits < 65536; bits++) {
            double v = orc_decode_fast((uint16_t)bits, dt), w = orc_decode_fast((uint16_t)(bits + 1), dt);
            one(v, bf16);
            one(nextafter(v, INFINITY), bf16);
            one(nextafter(v, -INFINITY), bf16);
            if (isfinite(v) && isfinite(w) && (bits & 0x7fff) != 0x7fff && ((bits + 1) & 0x8000) == (bits & 0x8000)) {
                double mid = v + (w - v) / 2; /* exact: one more bit */
                one(mid, bf16);
                one(nextafter(mid, INFINITY), bf16);
                one(nextafter(mid, -INFINITY), bf16);
            }
        }
        double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 0x1p-1074, -0x1p-1074, 0x1p-1022, 0x1.fffffffffffffp1023,
                       -0x1.fffffffffffffp1023, 65504.0, 65520.0, 65519.99, 0x1.fep127, 0x1.ffp127, 0x1p-24, 0x1p-25,
                       0x1.8p-25, 0x1p-133, 0x1p-134, 0x1.8p-134, 0x1p-14, 0x1p-126};
        for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) { one(sp[k], bf16); one(-sp[k], bf16); }
    }
    for (int i = 0; i < 4000000; i++) {
        uint64_t u = t_next();
        double x;
        if (i & 1) { /* any double */
            memcpy(&x, &u, sizeof x);
        } else { /* exponents near the fp16 / bf16 ranges */
            int e = (int)(t_next() % 300) - 160;
            x = ldexp(1.0 + (double)(u >> 12) * 0x1p-52, e) * ((u & 1) ? -1 : 1);
        }
        one(x, (int)((u >> 7) & 1));
    }
    printf("%lld values, %lld differ\n", (long long)n_checked, (long long)n_bad);
    CHECK(n_bad == 0, "%lld values differ from the libm formula", (long long)n_bad);
    if (t_failures) return 1;
    printf("PASS\n");
    return 0;
}
