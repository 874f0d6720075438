/* cmp_cases.h: random comparison cases for the compare tests (test_cmp_host: the host
 * compare's escalation entry = the host compare; test_gpu_compare: the device compare = the
 * host compare). A case: a CPU-tier result (no baseline) of a random problem, kernel outputs
 * made from it with every class of orc_judge.h (within the bound, on it, outside it, exact,
 * NaN, +-Inf, huge), and orc_err widened to the bound on a few elements so that the double
 * reference cannot decide them (a wider orc_err stays a valid error bound) and both
 * compares recompute them in MPFR. */
#ifndef FLASHCHECK_CMP_CASES_H
#define FLASHCHECK_CMP_CASES_H

#include "oracle/tests/tutil.h"

/* A kernel value for an element of reference r and bound b, before the store. */
static double cc_value(double r, double b) {
    double u = t_unif();
    if (!isfinite(r)) return u < 0.5 ? r : 0.0;
    if (u < 0.45) return r + b * (2 * t_unif() - 1) * 0.9;
    if (u < 0.60) return r;
    if (u < 0.70) return r + (t_unif() < 0.5 ? b : -b);
    if (u < 0.80) return r + 3 * b * (t_unif() < 0.5 ? 1 : -1);
    if (u < 0.85) return NAN;
    if (u < 0.90) return t_unif() < 0.5 ? INFINITY : -INFINITY;
    if (u < 0.93) return 1e300;
    return r + b * 1e-3;
}

/* kernel tensor [B, S, H, dim] (st) of block blk in dtype dt */
static void cc_fill16(const orc_block *blk, uint16_t *out, const int64_t st[4], fa_dtype dt) {
    for (int64_t v = 0; v < blk->n; v++) {
        const orc_index *ix = &blk->index[v];
        for (int64_t d = 0; d < blk->dim; d++) {
            int64_t e = v * blk->dim + d;
            out[ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3]] = orc_encode(cc_value(blk->ref[e], blk->bound[e]), dt);
        }
    }
}

/* LSE [B, H, S] (st[0..2]) in fp32 */
static void cc_fill32(const orc_block *blk, float *out, const int64_t st[3]) {
    for (int64_t v = 0; v < blk->n; v++) {
        const orc_index *ix = &blk->index[v];
        out[ix->b * st[0] + ix->h * st[1] + ix->s * st[2]] = (float)cc_value(blk->ref[v], blk->bound[v]);
    }
}

/* orc_err widened to the bound on about `count` random finite elements (MPFR recomputes
 * their vectors: kept few) */
static void cc_widen(orc_block *blk, double count) {
    double frac = blk->n * blk->dim > 0 ? count / (double)(blk->n * blk->dim) : 0;
    for (int64_t e = 0; e < blk->n * blk->dim; e++)
        if (isfinite(blk->ref[e]) && isfinite(blk->bound[e]) && t_unif() < frac && blk->bound[e] > blk->orc_err[e])
            blk->orc_err[e] = blk->bound[e];
}

/* A random problem (dtype, causal, GQA, layout, mask by the RNG) of about `size` output
 * elements per tensor. */
static fa_problem cc_problem(int64_t size) {
    int64_t Hkv = 1 + (int64_t)(t_unif() * 2), G = 1 + (int64_t)(t_unif() * 3);
    int64_t D = t_unif() < 0.5 ? 64 : 32, Dv = t_unif() < 0.7 ? D : 48;
    int64_t S = size / (Hkv * G * Dv);
    if (S < 8) S = 8;
    int64_t Sq = S, Sk = t_unif() < 0.7 ? S : S / 2 + 3;
    return t_problem(1 + (int64_t)(t_unif() * 2), Sq, Sk, Hkv * G, Hkv, D, Dv, t_unif() < 0.5 ? FA_BF16 : FA_F16,
                     t_unif() < 0.5 ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_NONE, -1, -1);
}

static int cc_same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* Every field of two compares' statistics equal; the bias sums equal (exact = 1), or
 * within the rounding of two sums of the same n terms in different orders,
 * 2 gamma_n sum|terms| <= 2 gamma_n n worst_ratio (each term's magnitude is a ratio). */
static void cc_check_stats(const char *what, int cs, const orc_stats *a, const orc_stats *b, int exact) {
#define EQ(f) CHECK(a->f == b->f, "case %d %s: " #f " %lld != %lld", cs, what, (long long)a->f, (long long)b->f)
#define EQD(f) CHECK(cc_same(a->f, b->f), "case %d %s: " #f " %.17g != %.17g", cs, what, (double)a->f, (double)b->f)
    EQ(checked); EQ(failed); EQ(unchecked); EQ(escalations); EQ(nan_unexpected); EQ(nan_missing);
    EQ(overflow_inf); EQ(overflow_sensitive); EQ(exact); EQ(nonfinite_match); EQ(bias_n);
    EQD(worst_ratio); EQD(worst_kernel); EQD(worst_ref); EQD(worst_bound); EQD(median_ratio); EQD(max_err);
    for (int k = 0; k < 4; k++) { EQ(worst_at[k]); EQ(first_fail_at[k]); EQ(first_ovf_at[k]); }
    for (int k = 0; k < ORC_HIST_BUCKETS; k++) EQ(ratio_hist[k]);
    EQ(grid_rows); EQ(grid_cols); EQ(grid_hb); EQ(grid_sb);
    for (int r = 0; r < ORC_GRID_ROWS; r++)
        for (int c = 0; c < ORC_GRID_COLS; c++) EQD(grid[r][c]);
    if (exact || !isfinite(a->bias_sum) || !isfinite(b->bias_sum)) {
        EQD(bias_sum); EQD(bias_zero_sum);
    } else {
        double n = (double)a->bias_n, tol = 2 * (n * 0x1p-53 / (1 - n * 0x1p-53)) * n * a->worst_ratio;
        CHECK(fabs(a->bias_sum - b->bias_sum) <= tol, "case %d %s: bias_sum %.17g vs %.17g", cs, what, a->bias_sum, b->bias_sum);
        CHECK(fabs(a->bias_zero_sum - b->bias_zero_sum) <= tol, "case %d %s: bias_zero_sum %.17g vs %.17g", cs, what,
              a->bias_zero_sum, b->bias_zero_sum);
    }
#undef EQ
#undef EQD
}

#endif
