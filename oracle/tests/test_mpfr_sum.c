/* test_mpfr_sum.c: orc_mpfr_sum (the MPFR tier's sums of exact products: scores q.k, dO.v)
 * gives the same MPFR number, bit for bit (value, sign of zero, NaN), as the plain loop of
 * correctly rounded adds from +0 that it replaces, at the precisions the oracle uses and
 * below; and its fixed-point path is the one taken on fp16 products (all of them) and on
 * ordinary bf16 products, while bf16 extremes, Inf and NaN take the loop. Products of
 * random fp16 / bf16 bit patterns (subnormals, extremes, signed zeros), exact cancellations,
 * a 2^-60 grid edge and long vectors. */
#include <mpfr.h>

#include "oracle/orc_internal.h"
#include "oracle/orc_mpfr.h"
#include "oracle/tests/tutil.h"

static void loop_sum(mpfr_t r, const double *x, int64_t n) {
    mpfr_set_zero(r, 1);
    for (int64_t k = 0; k < n; k++) mpfr_add_d(r, r, x[k], MPFR_RNDN);
}

static int same_mpfr(mpfr_t a, mpfr_t b) {
    if (mpfr_nan_p(a) || mpfr_nan_p(b)) return mpfr_nan_p(a) && mpfr_nan_p(b);
    return mpfr_equal_p(a, b) && mpfr_signbit(a) == mpfr_signbit(b);
}

/* a random 16-bit pattern's value; kind 0: any, 1: finite and moderate (|x| in [2^-10, 2^6]) */
static double rnd16(fa_dtype dt, int kind) {
    for (;;) {
        uint16_t bits = (uint16_t)t_next();
        double v = orc_decode_fast(bits, dt);
        if (kind == 0) return v;
        if (isfinite(v) && fabs(v) >= 0x1p-10 && fabs(v) <= 0x1p6) return v;
    }
}

static int64_t n_fixed, n_loop;

static void one(const double *x, int64_t n, int prec, const char *what, int want_fixed) {
    mpfr_t a, b;
    mpfr_inits2(prec, a, b, (mpfr_ptr)0);
    mpfr_set_d(b, 12345.0, MPFR_RNDN);
    int fx = orc_mpfr_sum_fixed(b, x, n);
    if (!fx) CHECK(mpfr_cmp_d(b, 12345.0) == 0, "%s: the declined fixed path wrote r", what);
    orc_mpfr_sum(a, x, n);
    mpfr_t ref;
    mpfr_init2(ref, prec);
    loop_sum(ref, x, n);
    CHECK(same_mpfr(a, ref), "%s (prec %d, n %lld): orc_mpfr_sum differs from the loop", what, prec, (long long)n);
    if (fx) CHECK(same_mpfr(b, ref), "%s (prec %d): the fixed path differs from the loop", what, prec);
    if (want_fixed >= 0) CHECK(fx == want_fixed, "%s (prec %d): fixed path %s", what, prec, fx ? "taken" : "declined");
    if (fx) n_fixed++; else n_loop++;
    mpfr_clears(a, b, ref, (mpfr_ptr)0);
}

int main(void) {
    enum { NMAX = 1024 };
    static double x[NMAX];
    const int precs[4] = {128, 113, 64, 24};
    for (int it = 0; it < 4000; it++) {
        int64_t n = 1 + (int64_t)(t_next() % (it % 10 == 0 ? NMAX : 257));
        int kind = (int)(t_next() % 6);
        fa_dtype dt = (kind == 1 || kind == 3) ? FA_BF16 : FA_F16;
        for (int64_t k = 0; k < n; k++) {
            double a = rnd16(dt, kind >= 2), b = rnd16(dt, kind >= 2);
            while (dt == FA_F16 && !isfinite(a * b)) a = rnd16(dt, kind >= 2), b = rnd16(dt, kind >= 2); /* fp16: finite */
            x[k] = a * b;                               /* exact in double */
        }
        if (kind == 4) /* exact cancellation to zero: the sum's sign is +0 either way */
            for (int64_t k = 0; k + 1 < n; k += 2) x[k + 1] = -x[k];
        if (kind == 5 && n > 2) { x[0] = -0.0; x[n - 1] = -0.0; }
        int prec = precs[t_next() % 4];
        /* fp16 products are on the 2^-48 grid below 2^32: fixed at prec >= 113 */
        int want = dt == FA_F16 && prec >= 113 ? 1 : -1;
        char what[64];
        snprintf(what, sizeof what, "vector %d (kind %d)", it, kind);
        one(x, n, prec, what, want);
    }
    /* the loop's cases: Inf, NaN, bf16 extremes, products off the 2^-60 grid or at 2^100 */
    double inf[3] = {1.0, INFINITY, -2.0}, nan[2] = {NAN, 1.0}, tiny[2] = {0x1p-61, 1.0}, big[2] = {0x1p40, 1.0};
    double grid[2] = {0x1p-60, -0x1p39}, mixed[3] = {0x1p-20, 0x1p30, -0x1p30};
    one(inf, 3, 128, "Inf", 0);
    one(nan, 2, 128, "NaN", 0);
    one(tiny, 2, 128, "2^-61", 0);
    one(big, 2, 128, "2^40", 0);
    one(grid, 2, 128, "2^-60 and 2^39", 1);
    one(mixed, 3, 128, "cancelling 2^30", 1);
    one(x, 0, 128, "empty", 1);
    /* sums past the precision: the partial sums are not exact at 24 bits, the fixed path declines */
    one(grid, 2, 24, "2^-60 + 2^39 at 24 bits", 0);
    printf("%lld vectors by the fixed path, %lld by the loop\n", (long long)n_fixed, (long long)n_loop);
    CHECK(n_fixed > 1000 && n_loop > 500, "both paths exercised (%lld fixed, %lld loop)", (long long)n_fixed,
          (long long)n_loop);
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("PASS\n");
    return 0;
}
