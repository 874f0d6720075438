/* cpu_fwd_test.c: the CPU backend's forward against the naive fp64 reference
 * (tests/api/api_test_ref.h, bounds derived there) on small random cases:
 * all mask modes, GQA/MQA, strided layouts, Sk = 0, Sq = 0, fully masked rows,
 * head dims 1..512, fp16 and bf16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kernels/cpu/cpu_mutants.h"
#include "tests/api/api_test_ref.h"

// ----------------------------------------------------------------------------
// one case: run, compare every element, check the layout gaps stayed NaN
//
// In soft mode (used to show the check has teeth against mutants) a violation
// is counted in fwd_violations instead of failing the test.

static int fwd_soft = 0;
static long fwd_violations = 0;
#define FWD_FAIL(...)                                    \
    do {                                                 \
        if (fwd_soft) fwd_violations++;                  \
        else fail_msg(__VA_ARGS__);                      \
    } while (0)

typedef struct {
    const char *name;
    int64_t B, Sq, Sk, Hq, Hkv, Dqk, Dv;
    fa_causal causal;
    int64_t wl, wr;
    fa_align align;
    tt_layout layout;
    double mask_hide;   /* < 0: no mask; else fraction of -inf entries */
    int mask_broadcast; /* 1: mask strides [0, 0, Sk, 1] */
    int64_t masked_row; /* >= 0: query row made fully -inf in the mask */
    float scale;
} fwd_case;

static double fwd_check(const fwd_case *fc, fa_dtype dt) {
    fa_problem p = tt_problem(fc->B, fc->Sq, fc->Sk, fc->Hq, fc->Hkv, fc->Dqk, fc->Dv, dt);
    p.causal = fc->causal; p.window_left = fc->wl; p.window_right = fc->wr; p.window_align = fc->align;
    p.softmax_scale = fc->scale;
    tt_case c;
    tt_case_init(&c, p, fc->layout, 1234 + (uint64_t)fc->Sq * 7 + (uint64_t)dt);
    if (fc->mask_hide >= 0) {
        tt_case_mask(&c, fc->mask_hide, 99);
        if (fc->mask_broadcast) c.mask_st[0] = c.mask_st[1] = 0;
        if (fc->masked_row >= 0)
            for (int64_t j = 0; j < p.seqlen_k; j++)
                c.mask[fc->masked_row * c.mask_st[2] + j * c.mask_st[3]] = -INFINITY; /* b=0,h=0 */
    }
    fa_fwd_args a = tt_fwd_args(&c);
    fa_error err;
    fa_status st = fa_backend_cpu()->forward(&a, &err);
    if (st != FA_OK) fail_msg("%s: forward failed: %s (%s)", fc->name, err.msg, err.arg);

    ref_in in = ref_from_case(&c);
    size_t no = (size_t)(p.batch * p.seqlen_q * p.heads_q * p.head_dim_v) + 1;
    size_t nl = (size_t)(p.batch * p.heads_q * p.seqlen_q) + 1;
    double *o = malloc(no * 8), *to = malloc(no * 8), *lse = malloc(nl * 8), *tl = malloc(nl * 8);
    ref_forward(&in, (ref_fwd_out){o, lse, to, tl});

    int bf16 = dt == FA_BF16;
    double worst = 0.0; /* max |err| / tol over elements with tol > 0 */
    int64_t masked_rows = 0;
    for (int64_t b = 0; b < p.batch; b++)
        for (int64_t h = 0; h < p.heads_q; h++)
            for (int64_t i = 0; i < p.seqlen_q; i++) {
                const int64_t li = REF_L_IDX(&p, b, h, i);
                const double got_lse = c.lse[li];
                if (lse[li] == -INFINITY) {
                    masked_rows++;
                    if (got_lse != -INFINITY)
                        FWD_FAIL("%s %s: row (%lld,%lld,%lld) has no visible key but LSE = %g", fc->name,
                                 fa_dtype_name(dt), (long long)b, (long long)h, (long long)i, got_lse);
                } else {
                    double e = fabs(got_lse - lse[li]);
                    if (!(e <= tl[li]))
                        FWD_FAIL("%s %s: LSE(%lld,%lld,%lld) = %.9g, reference %.12g, |err| %.3g > bound %.3g",
                                 fc->name, fa_dtype_name(dt), (long long)b, (long long)h, (long long)i,
                                 got_lse, lse[li], e, tl[li]);
                    if (e / tl[li] > worst) worst = e / tl[li];
                }
                for (int64_t d = 0; d < p.head_dim_v; d++) {
                    const int64_t oi = REF_O_IDX(&p, b, i, h, d);
                    const uint16_t bits = c.o.buf[tt_off(&c.o, b, i, h, d)];
                    const double got = fa_cpu_to_f32(bits, bf16);
                    if (lse[li] == -INFINITY) {
                        if (bits != 0) FWD_FAIL("%s: masked row O bits 0x%04x, expected +0", fc->name, bits);
                        continue;
                    }
                    double e = fabs(got - o[oi]);
                    if (!(e <= to[oi]))
                        FWD_FAIL("%s %s: O(%lld,%lld,%lld,%lld) = %.9g, reference %.12g, |err| %.3g > bound %.3g",
                                 fc->name, fa_dtype_name(dt), (long long)b, (long long)i, (long long)h,
                                 (long long)d, got, o[oi], e, to[oi]);
                    if (to[oi] > 0 && e / to[oi] > worst) worst = e / to[oi];
                }
            }
    /* the strided layouts leave gaps: they must still hold the NaN fill */
    size_t written = 0;
    for (size_t x = 0; x < c.o.n_elems; x++) written += c.o.buf[x] != 0x7e01;
    size_t elems = (size_t)(p.batch * p.seqlen_q * p.heads_q * p.head_dim_v);
    assert_true(written <= elems);
    if (fc->masked_row >= 0 && p.seqlen_q > 0) assert_true(masked_rows > 0);
    if (!fwd_soft)
        print_message("  %-28s %s: worst |err|/bound = %.3f, fully masked rows %lld\n", fc->name,
                  fa_dtype_name(dt), worst, (long long)masked_rows);
    free(o); free(to); free(lse); free(tl);
    ref_free(&in);
    tt_case_free(&c);
    return worst;
}

static const fwd_case fwd_cases[] = {
    /* name                      B  Sq   Sk  Hq Hkv Dqk Dv  causal                  wl  wr  align  layout  mask bc row scale */
    {"plain_gqa",                2, 37,  45,  4, 2, 16, 16, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0},
    {"causal_tl_multitile",      1, 70, 130,  2, 1, 32, 24, FA_CAUSAL_TOP_LEFT,     -1, -1, 0, TT_TRANSPOSED, -1, 0, -1, 0},
    {"causal_br_sq_gt_sk",       1, 90,  50,  2, 2,  8,  8, FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, TT_PADDED,     -1, 0, -1, 0},
    {"causal_br_sq_lt_sk",       2, 20,  75,  3, 1, 16,  8, FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0},
    {"window_br_align",          1, 40, 100,  2, 1, 16, 16, FA_CAUSAL_NONE,          5,  3, 1, TT_PADDED,     -1, 0, -1, 0},
    {"window_tl_left_only",      1, 66,  66,  1, 1,  8,  8, FA_CAUSAL_NONE,         10, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0},
    {"causal_br_window",         1, 150, 150, 2, 2, 16, 16, FA_CAUSAL_BOTTOM_RIGHT, 10, -1, 0, TT_TRANSPOSED, -1, 0, -1, 0},
    {"window_right_beyond",      1, 30,  20,  1, 1,  8,  4, FA_CAUSAL_NONE,         -1,  2, 1, TT_CONTIGUOUS, -1, 0, -1, 0},
    {"mask_inf_masked_row",      2, 20,  80,  2, 1, 16, 16, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, 0.3, 0, 5, 0},
    {"mask_broadcast_causal",    2, 33,  33,  2, 2,  8, 16, FA_CAUSAL_TOP_LEFT,     -1, -1, 0, TT_PADDED,     0.1, 1, -1, 0},
    {"sk_zero",                  1,  5,   0,  2, 1,  8,  8, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0},
    {"sq_zero",                  1,  0,   9,  2, 1,  8,  8, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0},
    {"batch_zero",               0,  4,   9,  2, 1,  8,  8, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0},
    {"head_dim_1",               1,  9,  70,  1, 1,  1,  1, FA_CAUSAL_NONE,         -1, -1, 0, TT_PADDED,     -1, 0, -1, 0},
    {"head_dim_512",             1,  3,   5,  1, 1, 512, 512, FA_CAUSAL_NONE,       -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0},
    {"mqa_dqk_ne_dv",            1, 17,  29,  4, 1, 24, 40, FA_CAUSAL_TOP_LEFT,     -1, -1, 0, TT_TRANSPOSED, -1, 0, -1, 0},
    {"large_scale",              1, 16, 140,  1, 1, 16, 16, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 3.0f},
};

static void test_fwd_all_cases(void **state) {
    (void)state;
    fa_cpu_set_mutant(0);
    for (size_t k = 0; k < sizeof(fwd_cases) / sizeof(fwd_cases[0]); k++) {
        fwd_check(&fwd_cases[k], FA_F16);
        fwd_check(&fwd_cases[k], FA_BF16);
    }
}

/* The same comparison flags broken backends: each mutant below, on a case
 * where its bug shows, must produce at least one element outside the bound. */
static void test_fwd_check_catches_mutants(void **state) {
    (void)state;
    static const struct { const char *mutant; fwd_case c; } bad[] = {
        {"rescale_missing", {"rescale", 1, 16, 200, 1, 1, 16, 16, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 1.0f}},
        {"causal_off_by_one", {"obo", 1, 20, 20, 1, 1, 16, 16, FA_CAUSAL_TOP_LEFT, -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0}},
        {"causal_top_left_for_bottom_right", {"tlbr", 1, 10, 30, 1, 1, 16, 16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0}},
        {"ragged_tail_unmasked", {"tail", 1, 8, 70, 1, 1, 16, 16, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0}},
        {"strides_from_shape", {"strides", 1, 20, 20, 2, 2, 16, 16, FA_CAUSAL_NONE, -1, -1, 0, TT_TRANSPOSED, -1, 0, -1, 0}},
        {"gqa_head_modulo", {"gqa", 1, 8, 20, 4, 2, 16, 16, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0}},
        {"masked_row_inf_minus_inf", {"nan", 1, 8, 20, 1, 1, 16, 16, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, 0.1, 0, 3, 0}},
        {"lse_log2", {"log2", 1, 8, 20, 1, 1, 16, 16, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0}},
        {"p_not_max_shifted", {"noshift", 1, 8, 20, 1, 1, 16, 16, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 30.0f}},
        {"window_off_by_one", {"window", 1, 30, 30, 1, 1, 16, 16, FA_CAUSAL_NONE, 3, -1, 0, TT_CONTIGUOUS, -1, 0, -1, 0}},
        {"mask_bh_stride_ignored", {"maskbh", 2, 8, 20, 2, 2, 16, 16, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, 0.1, 0, -1, 0}},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        /* the correct backend passes this very case */
        fa_cpu_set_mutant(0);
        fwd_soft = 1;
        fwd_violations = 0;
        fwd_check(&bad[k].c, FA_F16);
        assert_int_equal(fwd_violations, 0);
        assert_int_equal(fa_cpu_set_mutant(fa_cpu_mutant_id(bad[k].mutant)), 0);
        fwd_check(&bad[k].c, FA_F16);
        fa_cpu_set_mutant(0);
        fwd_soft = 0;
        if (fwd_violations == 0) fail_msg("mutant %s passes the bounded comparison", bad[k].mutant);
        print_message("  %-34s caught: %ld elements out of bound\n", bad[k].mutant, fwd_violations);
    }
}

/* Sq = 0 / batch = 0 write nothing: the O and LSE buffers keep their fill. */
static void test_fwd_empty_writes_nothing(void **state) {
    (void)state;
    fa_problem p = tt_problem(1, 0, 9, 2, 1, 8, 8, FA_F16);
    tt_case c;
    tt_case_init(&c, p, TT_CONTIGUOUS, 5);
    fa_fwd_args a = tt_fwd_args(&c);
    fa_error err;
    assert_int_equal(fa_backend_cpu()->forward(&a, &err), FA_OK);
    for (size_t x = 0; x < c.o.n_elems; x++) assert_int_equal(c.o.buf[x], 0x7e01);
    assert_true(isnan(c.lse[0]));
    tt_case_free(&c);
}

/* The profile the backend publishes is what the bounds above assume. */
static void test_profile_matches_derivation(void **state) {
    (void)state;
    const fa_backend *b = fa_backend_cpu();
    assert_int_equal(b->abi_version, FA_ABI_VERSION);
    assert_string_equal(b->name, "cpu");
    assert_int_equal(b->memspace, FA_MEM_HOST);
    assert_true(b->precision.u_acc == REF_U);
    assert_true(b->precision.exp_rel_err == REF_UE);
    assert_int_equal(b->precision.scores_fp32, 1);
    assert_int_equal(b->precision.p_rounded, 1);
    assert_int_equal(b->precision.ds_rounded, 0);
    assert_int_equal(b->precision.out_rounded, 1);
    assert_int_equal(b->limits.max_head_dim, 512);
    assert_non_null(b->backward);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_matches_derivation),
        cmocka_unit_test(test_fwd_all_cases),
        cmocka_unit_test(test_fwd_empty_writes_nothing),
        cmocka_unit_test(test_fwd_check_catches_mutants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
