/* test_compare_parallel.c: orc_compare_fwd / orc_compare_bwd judge large
 * blocks (>= 2^20 elements) on several threads; every statistic (counts,
 * histogram, worst and first-failure positions, median) must equal the
 * single-thread pass. CPU only. The GPU tier's full verifications of
 * production sizes rely on it. */
#include "oracle/tests/tutil.h"

static int same_stats(const orc_stats *a, const orc_stats *b) { return memcmp(a, b, sizeof *a) == 0; }

int main(void) {
    fa_problem p = t_problem(1, 1024, 1024, 8, 2, 128, 128, FA_BF16, FA_CAUSAL_TOP_LEFT, -1, -1);
    t_prob t;
    t_setup(&t, p, 2, 1.0, 1.0, 1.0, 1);
    fa_precision pr = t_profile_fp32();
    orc_options opt;
    orc_options_init(&opt);
    opt.baseline = 1;
    orc_fwd_result r;
    fa_error err;
    fa_fwd_args fa = t_fwd_args(&t);
    CHECK(orc_fwd(&fa, &pr, &opt, &r, &err) == FA_OK, "orc_fwd: %s", err.msg);
    CHECK(r.o.n * r.o.dim >= (1 << 20), "block too small to take the parallel path");
    t_store_fwd(&t, &r);
    /* failures, NaN and Inf scattered in the outputs */
    for (int64_t x = 0; x < r.o.n; x += 97) {
        const orc_index *ix = &r.o.index[x];
        int64_t d = (x * 7) % p.head_dim_v;
        uint16_t *e = &t.o[ix->b * t.to.stride[0] + ix->s * t.to.stride[1] + ix->h * t.to.stride[2] + d * t.to.stride[3]];
        *e = x % 3 == 0 ? 0x7fc0 : x % 3 == 1 ? 0x7f80 : orc_encode(r.o.ref[x * p.head_dim_v + d] + 0.5, FA_BF16);
    }
    orc_stats o1, l1, o4, l4;
    r.opt.threads = 1;
    CHECK(orc_compare_fwd(&r, &t.to, &t.tlse, &o1, &l1, &err) == FA_OK, "compare 1: %s", err.msg);
    r.opt.threads = 4;
    CHECK(orc_compare_fwd(&r, &t.to, &t.tlse, &o4, &l4, &err) == FA_OK, "compare 4: %s", err.msg);
    CHECK(o1.failed > 0 && o1.has_baseline, "the mutated output has no failure (%lld)", (long long)o1.failed);
    CHECK(same_stats(&o1, &o4), "O stats differ: failed %lld/%lld worst %g/%g median %g/%g first (%lld,%lld)/(%lld,%lld)",
          (long long)o1.failed, (long long)o4.failed, o1.worst_ratio, o4.worst_ratio, o1.median_ratio,
          o4.median_ratio, (long long)o1.first_fail_at[1], (long long)o1.first_fail_at[3],
          (long long)o4.first_fail_at[1], (long long)o4.first_fail_at[3]);
    CHECK(same_stats(&l1, &l4), "LSE stats differ");
    orc_fwd_free(&r);
    t_free(&t);
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("test_compare_parallel: OK (O failed %lld of %lld, median %.3g)\n", (long long)o1.failed,
           (long long)o1.checked, o1.median_ratio);
    return 0;
}
