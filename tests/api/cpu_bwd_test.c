/* cpu_bwd_test.c: the CPU backend's backward
 *   - against central finite differences of the naive fp64 forward's loss
 *     L = sum dO * O (tiny cases, every input element), with the backend's
 *     derived bound (api_test_ref.h) plus the finite-difference error;
 *   - against the analytic fp64 gradients on multi-tile cases;
 * and determinism: forward and backward twice, and with 1 vs 2 threads,
 * must agree bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <omp.h>

#include "kernels/cpu/cpu_mutants.h"
#include "tests/api/api_test_ref.h"

typedef struct {
    const char *name;
    int64_t B, Sq, Sk, Hq, Hkv, Dqk, Dv;
    fa_causal causal;
    int64_t wl, wr;
    fa_align align;
    tt_layout layout;
    double mask_hide; /* < 0: no mask */
} bwd_case;

static void bwd_setup(const bwd_case *bc, fa_dtype dt, tt_case *c) {
    fa_problem p = tt_problem(bc->B, bc->Sq, bc->Sk, bc->Hq, bc->Hkv, bc->Dqk, bc->Dv, dt);
    p.causal = bc->causal; p.window_left = bc->wl; p.window_right = bc->wr; p.window_align = bc->align;
    tt_case_init(c, p, bc->layout, 4321 + (uint64_t)bc->Sk * 3 + (uint64_t)dt);
    if (bc->mask_hide >= 0) tt_case_mask(c, bc->mask_hide, 11);
    fa_fwd_args fa = tt_fwd_args(c);
    fa_bwd_args ba = tt_bwd_args(c);
    fa_error err;
    if (fa_backend_cpu()->forward(&fa, &err) != FA_OK) fail_msg("%s: forward: %s", bc->name, err.msg);
    if (fa_backend_cpu()->backward(&ba, &err) != FA_OK) fail_msg("%s: backward: %s", bc->name, err.msg);
}

/* Soft mode: count violations instead of failing (to show the check catches mutants). */
static int bwd_soft = 0;
static long bwd_violations = 0;

/* Compare one gradient tensor; want[] is the reference value, extra[] an
 * additional allowed error (finite-difference error) or NULL. Returns worst ratio. */
static double bwd_compare(const bwd_case *bc, fa_dtype dt, const char *what, const tt_tensor *t,
                          const double *want, const double *tol, const double *extra) {
    double worst = 0.0;
    int bf16 = dt == FA_BF16;
    int64_t x = 0;
    for (int64_t a = 0; a < t->dim[0]; a++)
        for (int64_t b = 0; b < t->dim[1]; b++)
            for (int64_t c = 0; c < t->dim[2]; c++)
                for (int64_t d = 0; d < t->dim[3]; d++, x++) {
                    double got = tt_get(t, a, b, c, d, bf16);
                    double bound = tol[x] + (extra ? extra[x] : 0.0);
                    double e = fabs(got - want[x]);
                    if (!(e <= bound) && bwd_soft) bwd_violations++;
                    else if (!(e <= bound))
                        fail_msg("%s %s: %s(%lld,%lld,%lld,%lld) = %.9g, reference %.12g, |err| %.3g > bound %.3g",
                                 bc->name, fa_dtype_name(dt), what, (long long)a, (long long)b, (long long)c,
                                 (long long)d, got, want[x], e, bound);
                    if (bound > 0 && e / bound > worst) worst = e / bound;
                }
    return worst;
}

// ----------------------------------------------------------------------------
// finite differences

typedef struct {
    double *dq, *dk, *dv, *tq, *tk, *tv; /* analytic + bounds */
    double *o, *to, *lse, *tl;
} bwd_ref;

static void bwd_ref_run(ref_in *in, bwd_ref *r) {
    const fa_problem *p = &in->p;
    size_t nq = (size_t)(p->batch * p->seqlen_q * p->heads_q * p->head_dim_qk) + 1;
    size_t nk = (size_t)(p->batch * p->seqlen_k * p->heads_kv * p->head_dim_qk) + 1;
    size_t nv = (size_t)(p->batch * p->seqlen_k * p->heads_kv * p->head_dim_v) + 1;
    size_t no = (size_t)(p->batch * p->seqlen_q * p->heads_q * p->head_dim_v) + 1;
    size_t nl = (size_t)(p->batch * p->heads_q * p->seqlen_q) + 1;
    r->dq = malloc(nq * 8); r->tq = malloc(nq * 8);
    r->dk = malloc(nk * 8); r->tk = malloc(nk * 8);
    r->dv = malloc(nv * 8); r->tv = malloc(nv * 8);
    r->o = malloc(no * 8); r->to = malloc(no * 8); r->lse = malloc(nl * 8); r->tl = malloc(nl * 8);
    ref_forward(in, (ref_fwd_out){r->o, r->lse, r->to, r->tl});
    ref_backward(in, r->o, r->to, r->tl, (ref_bwd_out){r->dq, r->dk, r->dv, r->tq, r->tk, r->tv});
}

static void bwd_ref_free(bwd_ref *r) {
    free(r->dq); free(r->dk); free(r->dv); free(r->tq); free(r->tk); free(r->tv);
    free(r->o); free(r->to); free(r->lse); free(r->tl);
}

/* Central differences of L over every element of arr (n elements): fd[x] and
 * its error estimate err[x] = |FD(h) - FD(2h)| (three times the Richardson
 * estimate of FD(h)'s truncation error) + the effect of L's own rounding. */
static void bwd_fd(ref_in *in, double *arr, int64_t n, double *fd, double *err, double *scratch) {
    const double h = 0x1p-13;
    const fa_problem *p = &in->p;
    /* L is a sum of n_terms products each computed with <= n_ops roundings */
    const double n_ops = (double)(4 * (p->seqlen_k * (p->head_dim_qk + p->head_dim_v + 4)) +
                                  p->batch * p->seqlen_q * p->heads_q * p->head_dim_v);
    for (int64_t x = 0; x < n; x++) {
        const double x0 = arr[x];
        double L[4];
        const double off[4] = {h, -h, 2 * h, -2 * h};
        double Labs = 0.0;
        for (int t = 0; t < 4; t++) {
            arr[x] = x0 + off[t];
            L[t] = ref_loss(in, scratch);
            if (fabs(L[t]) > Labs) Labs = fabs(L[t]);
        }
        arr[x] = x0;
        const double f1 = (L[0] - L[1]) / (2 * h), f2 = (L[2] - L[3]) / (4 * h);
        fd[x] = f1;
        err[x] = fabs(f1 - f2) + 2 * n_ops * 0x1p-53 * (Labs + 1.0) / (2 * h);
    }
}

static const bwd_case fd_cases[] = {
    {"fd_plain",          1, 3, 5, 2, 1, 3, 2, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, -1},
    {"fd_causal_tl",      1, 4, 4, 2, 2, 3, 3, FA_CAUSAL_TOP_LEFT,     -1, -1, 0, TT_TRANSPOSED, -1},
    {"fd_causal_br_mask", 2, 5, 3, 2, 1, 2, 3, FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, TT_PADDED,     -1},
    {"fd_window",         1, 4, 6, 1, 1, 3, 2, FA_CAUSAL_NONE,          1,  1, 1, TT_CONTIGUOUS, -1},
    {"fd_additive_mask",  1, 4, 5, 4, 2, 2, 2, FA_CAUSAL_NONE,         -1, -1, 0, TT_TRANSPOSED, 0.3},
    {"fd_sk_zero",        1, 3, 0, 2, 1, 2, 2, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, -1},
    {"fd_sq_zero",        1, 0, 3, 2, 1, 2, 2, FA_CAUSAL_NONE,         -1, -1, 0, TT_CONTIGUOUS, -1},
};

static void test_bwd_vs_finite_differences(void **state) {
    (void)state;
    fa_cpu_set_mutant(0);
    for (size_t k = 0; k < sizeof(fd_cases) / sizeof(fd_cases[0]); k++)
        for (int dti = 0; dti < 2; dti++) {
            const bwd_case *bc = &fd_cases[k];
            fa_dtype dt = dti ? FA_BF16 : FA_F16;
            tt_case c;
            bwd_setup(bc, dt, &c);
            ref_in in = ref_from_case(&c);
            bwd_ref r;
            bwd_ref_run(&in, &r);
            const fa_problem *p = &c.p;
            int64_t nq = p->batch * p->seqlen_q * p->heads_q * p->head_dim_qk;
            int64_t nk = p->batch * p->seqlen_k * p->heads_kv * p->head_dim_qk;
            int64_t nv = p->batch * p->seqlen_k * p->heads_kv * p->head_dim_v;
            double *scratch = malloc(sizeof(double) * (size_t)(p->batch * p->seqlen_q * p->heads_q * p->head_dim_v + 1));
            double worst = 0.0;
            struct { const char *name; double *arr, *analytic, *tol; int64_t n; const tt_tensor *got; } g[3] = {
                {"dQ", in.q, r.dq, r.tq, nq, &c.dq}, {"dK", in.k, r.dk, r.tk, nk, &c.dk}, {"dV", in.v, r.dv, r.tv, nv, &c.dv}};
            for (int t = 0; t < 3; t++) {
                double *fd = malloc(sizeof(double) * (size_t)(g[t].n + 1)), *fe = malloc(sizeof(double) * (size_t)(g[t].n + 1));
                bwd_fd(&in, g[t].arr, g[t].n, fd, fe, scratch);
                /* the fp64 analytic gradient agrees with the finite differences */
                for (int64_t x = 0; x < g[t].n; x++)
                    if (!(fabs(fd[x] - g[t].analytic[x]) <= fe[x] + 1e-12))
                        fail_msg("%s: analytic %s[%lld] = %.12g but finite difference %.12g (err est %.3g)",
                                 bc->name, g[t].name, (long long)x, g[t].analytic[x], fd[x], fe[x]);
                /* the backend agrees with the finite differences within its bound */
                double w = bwd_compare(bc, dt, g[t].name, g[t].got, fd, g[t].tol, fe);
                if (w > worst) worst = w;
                free(fd); free(fe);
            }
            print_message("  %-20s %s: worst |err|/bound = %.3f\n", bc->name, fa_dtype_name(dt), worst);
            free(scratch);
            bwd_ref_free(&r);
            ref_free(&in);
            tt_case_free(&c);
        }
}

// ----------------------------------------------------------------------------
// multi-tile cases against the analytic fp64 gradients

static const bwd_case tile_cases[] = {
    {"tiles_causal_br_gqa", 1, 70, 150, 4, 2, 16, 8,  FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, TT_TRANSPOSED, -1},
    {"tiles_sq_gt_sk_mask", 1, 130, 66, 2, 1, 8, 16,  FA_CAUSAL_TOP_LEFT,     -1, -1, 0, TT_PADDED,     0.2},
    {"tiles_window",        2, 65, 129, 2, 2, 8, 8,   FA_CAUSAL_NONE,         20, 5,  1, TT_CONTIGUOUS, -1},
    {"tiles_br_masked_rows",1, 100, 40, 3, 1, 8, 8,   FA_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, TT_CONTIGUOUS, -1},
};

static void test_bwd_multitile_vs_analytic(void **state) {
    (void)state;
    fa_cpu_set_mutant(0);
    for (size_t k = 0; k < sizeof(tile_cases) / sizeof(tile_cases[0]); k++)
        for (int dti = 0; dti < 2; dti++) {
            const bwd_case *bc = &tile_cases[k];
            fa_dtype dt = dti ? FA_BF16 : FA_F16;
            tt_case c;
            bwd_setup(bc, dt, &c);
            ref_in in = ref_from_case(&c);
            bwd_ref r;
            bwd_ref_run(&in, &r);
            double w = bwd_compare(bc, dt, "dQ", &c.dq, r.dq, r.tq, NULL);
            double w2 = bwd_compare(bc, dt, "dK", &c.dk, r.dk, r.tk, NULL);
            double w3 = bwd_compare(bc, dt, "dV", &c.dv, r.dv, r.tv, NULL);
            if (w2 > w) w = w2;
            if (w3 > w) w = w3;
            /* rows with no visible key: dQ exactly +0 */
            int64_t masked = 0;
            for (int64_t b = 0; b < c.p.batch; b++)
                for (int64_t h = 0; h < c.p.heads_q; h++)
                    for (int64_t i = 0; i < c.p.seqlen_q; i++) {
                        if (r.lse[REF_L_IDX(&c.p, b, h, i)] != -INFINITY) continue;
                        masked++;
                        for (int64_t d = 0; d < c.p.head_dim_qk; d++)
                            assert_int_equal(c.dq.buf[tt_off(&c.dq, b, i, h, d)], 0);
                    }
            print_message("  %-20s %s: worst |err|/bound = %.3f, fully masked rows %lld\n", bc->name,
                          fa_dtype_name(dt), w, (long long)masked);
            bwd_ref_free(&r);
            ref_free(&in);
            tt_case_free(&c);
        }
}

/* The bounded comparison flags the backward mutants on cases where their bugs
 * show (the forward output and LSE handed to backward are the correct ones). */
static void test_bwd_check_catches_mutants(void **state) {
    (void)state;
    static const struct { const char *mutant; bwd_case c; } bad[] = {
        {"dq_tail_block_skipped", {"dqtail", 1, 16, 70, 1, 1, 8, 8, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1}},
        {"dv_gqa_not_summed", {"dvgqa", 1, 16, 20, 4, 2, 8, 8, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1}},
        {"delta_from_dout_squared", {"delta", 1, 16, 20, 1, 1, 8, 8, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1}},
        {"gqa_head_modulo", {"gqa", 1, 16, 20, 4, 2, 8, 8, FA_CAUSAL_NONE, -1, -1, 0, TT_CONTIGUOUS, -1}},
        {"causal_off_by_one", {"obo", 1, 16, 16, 1, 1, 8, 8, FA_CAUSAL_TOP_LEFT, -1, -1, 0, TT_CONTIGUOUS, -1}},
        {"strides_from_shape", {"strides", 1, 16, 16, 2, 2, 8, 8, FA_CAUSAL_NONE, -1, -1, 0, TT_TRANSPOSED, -1}},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        long counts[2];
        for (int pass = 0; pass < 2; pass++) {
            const bwd_case *bc = &bad[k].c;
            tt_case c;
            fa_cpu_set_mutant(0);
            fa_problem p = tt_problem(bc->B, bc->Sq, bc->Sk, bc->Hq, bc->Hkv, bc->Dqk, bc->Dv, FA_F16);
            p.causal = bc->causal;
            tt_case_init(&c, p, bc->layout, 17);
            fa_fwd_args fa = tt_fwd_args(&c);
            fa_bwd_args ba = tt_bwd_args(&c);
            fa_error err;
            assert_int_equal(fa_backend_cpu()->forward(&fa, &err), FA_OK);
            if (pass == 1) fa_cpu_set_mutant(fa_cpu_mutant_id(bad[k].mutant));
            assert_int_equal(fa_backend_cpu()->backward(&ba, &err), FA_OK);
            fa_cpu_set_mutant(0);
            ref_in in = ref_from_case(&c);
            bwd_ref r;
            bwd_ref_run(&in, &r);
            bwd_soft = 1;
            bwd_violations = 0;
            bwd_compare(bc, FA_F16, "dQ", &c.dq, r.dq, r.tq, NULL);
            bwd_compare(bc, FA_F16, "dK", &c.dk, r.dk, r.tk, NULL);
            bwd_compare(bc, FA_F16, "dV", &c.dv, r.dv, r.tv, NULL);
            bwd_soft = 0;
            counts[pass] = bwd_violations;
            bwd_ref_free(&r);
            ref_free(&in);
            tt_case_free(&c);
        }
        assert_int_equal(counts[0], 0); /* the correct backend passes the same case */
        if (counts[1] == 0) fail_msg("mutant %s passes the bounded backward comparison", bad[k].mutant);
        print_message("  %-34s caught: %ld gradient elements out of bound\n", bad[k].mutant, counts[1]);
    }
}

// ----------------------------------------------------------------------------
// determinism

static int tensors_equal(const tt_tensor *a, const tt_tensor *b) {
    return a->n_elems == b->n_elems && memcmp(a->buf, b->buf, a->n_elems * 2) == 0;
}

static void run_both(tt_case *c, int deterministic, int threads) {
    omp_set_num_threads(threads);
    fa_fwd_args fa = tt_fwd_args(c);
    fa_bwd_args ba = tt_bwd_args(c);
    ba.deterministic = deterministic;
    fa_error err;
    assert_int_equal(fa_backend_cpu()->forward(&fa, &err), FA_OK);
    assert_int_equal(fa_backend_cpu()->backward(&ba, &err), FA_OK);
}

static void test_determinism(void **state) {
    (void)state;
    fa_cpu_set_mutant(0);
    fa_problem p = tt_problem(2, 130, 200, 4, 2, 32, 32, FA_F16);
    p.causal = FA_CAUSAL_BOTTOM_RIGHT;
    tt_case ref, c;
    tt_case_init(&ref, p, TT_CONTIGUOUS, 8);
    run_both(&ref, 1, 2);
    const int threads[4] = {2, 2, 1, 2};
    for (int t = 0; t < 4; t++) {
        tt_case_init(&c, p, TT_CONTIGUOUS, 8);
        run_both(&c, t & 1, threads[t]);
        assert_true(tensors_equal(&ref.o, &c.o));
        assert_memory_equal(ref.lse, c.lse, sizeof(float) * (size_t)(2 * 4 * 130));
        assert_true(tensors_equal(&ref.dq, &c.dq));
        assert_true(tensors_equal(&ref.dk, &c.dk));
        assert_true(tensors_equal(&ref.dv, &c.dv));
        tt_case_free(&c);
    }
    omp_set_num_threads(2);
    tt_case_free(&ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bwd_vs_finite_differences),
        cmocka_unit_test(test_bwd_multitile_vs_analytic),
        cmocka_unit_test(test_bwd_check_catches_mutants),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
