/* test_compare_parallel.c: orc_compare_* on blocks of >= 2^20 elements judged by several
 * threads (contiguous ranges, statistics merged) give the one-pass statistics: every
 * count, the histogram, the worst element and its position, the first failure, the
 * median, max_err, the grid; the bias sums to rounding (summation order). Outputs: the
 * reference rounded to the dtype, with failures, NaNs and Infs planted at spread
 * positions (several ranges each), so that the merge of firsts and maxima is exercised;
 * the median of the ~2^20 ratios by the threads' bucket selection (par_select). */
#include <stdio.h>

#include "oracle/tests/tutil.h"

static void same(const char *what, const orc_stats *a, const orc_stats *b) {
    CHECK(a->checked == b->checked && a->failed == b->failed && a->unchecked == b->unchecked &&
              a->escalations == b->escalations && a->nan_unexpected == b->nan_unexpected &&
              a->nan_missing == b->nan_missing && a->overflow_inf == b->overflow_inf &&
              a->overflow_sensitive == b->overflow_sensitive && a->exact == b->exact &&
              a->nonfinite_match == b->nonfinite_match && a->bias_n == b->bias_n,
          "%s: counts differ (checked %lld/%lld failed %lld/%lld)", what, (long long)a->checked, (long long)b->checked,
          (long long)a->failed, (long long)b->failed);
    CHECK(!memcmp(a->ratio_hist, b->ratio_hist, sizeof a->ratio_hist), "%s: histograms differ", what);
    CHECK(a->worst_ratio == b->worst_ratio && !memcmp(a->worst_at, b->worst_at, sizeof a->worst_at) &&
              a->worst_kernel == b->worst_kernel && a->worst_ref == b->worst_ref && a->worst_bound == b->worst_bound,
          "%s: worst differs: %g at %lld,%lld,%lld,%lld vs %g at %lld,%lld,%lld,%lld", what, a->worst_ratio,
          (long long)a->worst_at[0], (long long)a->worst_at[1], (long long)a->worst_at[2], (long long)a->worst_at[3],
          b->worst_ratio, (long long)b->worst_at[0], (long long)b->worst_at[1], (long long)b->worst_at[2],
          (long long)b->worst_at[3]);
    CHECK(!memcmp(a->first_fail_at, b->first_fail_at, sizeof a->first_fail_at) &&
              !memcmp(a->first_ovf_at, b->first_ovf_at, sizeof a->first_ovf_at),
          "%s: first failure differs", what);
    CHECK(a->median_ratio == b->median_ratio && a->max_err == b->max_err, "%s: median %g/%g max_err %g/%g", what,
          a->median_ratio, b->median_ratio, a->max_err, b->max_err);
    CHECK(!memcmp(a->grid, b->grid, sizeof a->grid), "%s: grids differ", what);
    CHECK(fabs(a->bias_sum - b->bias_sum) <= 1e-9 * (1 + fabs(b->bias_sum)) &&
              fabs(a->bias_zero_sum - b->bias_zero_sum) <= 1e-9 * (1 + fabs(b->bias_zero_sum)),
          "%s: bias sums %g/%g", what, a->bias_sum, b->bias_sum);
}

int main(void) {
    /* 1 x 4096 x 2 heads x 128: 2^20 O elements; causal keeps the reference cheap */
    t_prob t;
    t_setup(&t, t_problem(1, 4096, 4096, 2, 1, 128, 128, FA_BF16, FA_CAUSAL_TOP_LEFT, -1, -1), 0, 1, 1, 1, 0);
    fa_fwd_args a = t_fwd_args(&t);
    orc_options opt;
    orc_options_init(&opt);
    opt.baseline = 0;
    orc_fwd_result r;
    fa_error err;
    fa_precision prof = t_profile_fp32();
    CHECK(orc_fwd(&a, &prof, &opt, &r, &err) == FA_OK, "orc_fwd: %s", err.msg);
    CHECK(r.o.n * r.o.dim >= (1 << 20), "block too small for the parallel path");
    /* outputs: the reference rounded, with planted errors */
    for (int64_t x = 0; x < r.o.n; x++) {
        const orc_index *ix = &r.o.index[x];
        for (int64_t d = 0; d < r.o.dim; d++) {
            int64_t e = x * r.o.dim + d;
            double v = r.o.ref[e];
            if (x % 997 == 5 && d == 3) v += 8 * r.o.bound[e] + 1e-3;       /* failures */
            if (x % 1499 == 7 && d == 1) v = NAN;                            /* non-finite mismatches */
            if (x % 2003 == 11 && d == 2) v = INFINITY;
            if (x == 6000 && d == 9) v += 64 * r.o.bound[e] + 1;             /* the worst, mid-way */
            t.o[ix->b * t.to.stride[0] + ix->s * t.to.stride[1] + ix->h * t.to.stride[2] + d * t.to.stride[3]] =
                orc_encode(v, FA_BF16);
        }
        t.lse[ix->b * t.tlse.stride[0] + ix->h * t.tlse.stride[1] + ix->s * t.tlse.stride[2]] = (float)r.lse.ref[x];
    }
    orc_stats o1, l1, o4, l4, o7, l7;
    r.opt.threads = 1;
    CHECK(orc_compare_fwd(&r, &a.o, &a.lse, &o1, &l1, &err) == FA_OK, "compare 1: %s", err.msg);
    r.opt.threads = 4;
    CHECK(orc_compare_fwd(&r, &a.o, &a.lse, &o4, &l4, &err) == FA_OK, "compare 4: %s", err.msg);
    r.opt.threads = 7;
    CHECK(orc_compare_fwd(&r, &a.o, &a.lse, &o7, &l7, &err) == FA_OK, "compare 7: %s", err.msg);
    CHECK(o1.failed > 10 && o1.nan_unexpected > 5, "planted failures not found: %lld %lld", (long long)o1.failed,
          (long long)o1.nan_unexpected);
    same("O 4 threads", &o4, &o1);
    same("O 7 threads", &o7, &o1);
    same("LSE 4 threads", &l4, &l1);
    printf("test_compare_parallel: O %lld checked, %lld failed, worst %g at s=%lld; 4 and 7 threads = 1 thread\n",
           (long long)o1.checked, (long long)o1.failed, o1.worst_ratio, (long long)o1.worst_at[1]);
    orc_fwd_free(&r);
    t_free(&t);
    if (t_failures) { printf("%d failures\n", t_failures); return 1; }
    printf("test_compare_parallel: OK\n");
    return 0;
}
