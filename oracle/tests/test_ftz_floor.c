/* test_ftz_floor.c: the oracle's underflow floor for profiles that flush
 * subnormals (fa_precision.flushes_subnormals, oracle/BOUNDS.md section 9).
 *
 * The kernel under test is the CPU backend in flush-to-zero mode
 * (kernels/cpu/cpu_ftz.h: MXCSR FTZ + DAZ, so expf results, fp32 products and
 * sums below 2^-126 become 0 and bf16 subnormal inputs read as 0), whose table
 * declares flushes_subnormals = 1. Asserted:
 *   (a) on bf16 cases whose outputs lie in the subnormal range (tiny V: O ~
 *       1e-39; tiny dO: dQ, dK, dV ~ 1e-39), the FTZ kernel passes against its
 *       own profile (the floor), and FAILS against the same profile with
 *       flushes_subnormals = 0 (the floor is needed); the FTZ kernel really
 *       flushed (outputs 0 where the reference is not), and the IEEE CPU
 *       backend passes the IEEE profile on the same inputs;
 *   (b) the floor is ~2^-126 in size: on normal-range inputs every bound of
 *       the FTZ profile exceeds the IEEE one by less than 2^-100;
 *   (c) it hides no real error: on normal-range inputs, against the FTZ
 *       profile, mutants with a relative error (lse_log2, rescale_missing,
 *       delta_from_dout_squared) fail, and an output moved by 8 ulps fails. */
#include "kernels/cpu/cpu_ftz.h"
#include "kernels/cpu/cpu_mutants.h"
#include "oracle/tests/tutil.h"

// ----------------------------------------------------------------------------
// helpers

static fa_precision prof_ftz(void) { return fa_backend_cpu_ftz()->precision; }
static fa_precision prof_ieee(void) {
    fa_precision p = fa_backend_cpu_ftz()->precision;
    p.flushes_subnormals = 0;
    return p;
}

static orc_options opts(void) {
    orc_options o;
    orc_options_init(&o);
    o.baseline = 0;
    return o;
}

/* Run be's forward into t->o, t->lse. */
static void run_fwd(const fa_backend *be, t_prob *t) {
    fa_fwd_args a = t_fwd_args(t);
    fa_error err;
    fa_status st = be->forward(&a, &err);
    CHECK(st == FA_OK, "%s forward: %s", be->name, err.msg);
}


static void run_bwd(const fa_backend *be, const t_prob *t, t_grads *g) {
    fa_bwd_args a = t_bwd_args(t);
    a.dq = g->tq; a.dk = g->tk; a.dv = g->tv;
    fa_error err;
    fa_status st = be->backward(&a, &err);
    CHECK(st == FA_OK, "%s backward: %s", be->name, err.msg);
}

/* forward verdict of t's O/LSE against prof; s[0] O, s[1] LSE */
static void judge_fwd(const t_prob *t, fa_precision prof, orc_stats s[2], orc_fwd_result *keep) {
    fa_fwd_args a = t_fwd_args(t);
    orc_options o = opts();
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &prof, &o, &r, NULL) == FA_OK, "orc_fwd");
    CHECK(orc_compare_fwd(&r, &t->to, &t->tlse, &s[0], &s[1], NULL) == FA_OK, "compare fwd");
    if (keep) *keep = r; else orc_fwd_free(&r);
}

static void judge_bwd(const t_prob *t, const t_grads *g, fa_precision prof, orc_stats s[3], orc_bwd_result *keep) {
    fa_bwd_args a = t_bwd_args(t);
    orc_options o = opts();
    orc_bwd_result r;
    CHECK(orc_bwd(&a, &prof, &o, &r, NULL) == FA_OK, "orc_bwd");
    CHECK(orc_compare_bwd(&r, &g->tq, &g->tk, &g->tv, &s[0], &s[1], &s[2], NULL) == FA_OK, "compare bwd");
    if (keep) *keep = r; else orc_bwd_free(&r);
}

static void print_stats(const char *tag, const char *tensor, const orc_stats *s) {
    char buf[700];
    orc_stats_format(s, tensor, buf, sizeof buf);
    printf("[%s] %s\n", tag, buf);
}

/* elements the kernel stored as 0 where the reference is not 0 (the flush at work) */
static int64_t flushed_zeros(const orc_block *blk, const uint16_t *buf, const int64_t st[4]) {
    int64_t n = 0;
    for (int64_t v = 0; v < blk->n; v++) {
        const orc_index *ix = &blk->index[v];
        for (int64_t d = 0; d < blk->dim; d++) {
            uint16_t x = buf[ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3]];
            if ((x & 0x7fff) == 0 && blk->ref[v * blk->dim + d] != 0 && isfinite(blk->ref[v * blk->dim + d])) n++;
        }
    }
    return n;
}

// ----------------------------------------------------------------------------
// (a) subnormal-range outputs: pass with the floor, fail without it

static void test_tiny_v_forward(void) {
    fa_problem p = t_problem(2, 40, 100, 4, 2, 32, 32, FA_BF16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1.0, 1.0, 1e-39, 0); /* V ~ 1e-39: bf16 subnormals */
    run_fwd(fa_backend_cpu_ftz(), &t);
    orc_stats s[2], s0[2];
    orc_fwd_result r;
    judge_fwd(&t, prof_ftz(), s, &r);
    print_stats("tiny V, FTZ kernel, FTZ profile", "O", &s[0]);
    print_stats("tiny V, FTZ kernel, FTZ profile", "LSE", &s[1]);
    CHECK(s[0].failed == 0 && s[1].failed == 0, "FTZ kernel outside the FTZ bound (O %lld, LSE %lld)",
          (long long)s[0].failed, (long long)s[1].failed);
    CHECK(s[0].checked == r.o.n * r.o.dim && s[0].unchecked == 0, "every O element judged");
    int64_t z = flushed_zeros(&r.o, t.o, t.to.stride);
    printf("[tiny V] FTZ kernel stored %lld O elements as 0 where the reference is not\n", (long long)z);
    CHECK(z > r.o.n * r.o.dim / 4, "the FTZ emulation flushed too little (%lld zeros)", (long long)z);
    orc_fwd_free(&r);
    judge_fwd(&t, prof_ieee(), s0, NULL);
    print_stats("tiny V, FTZ kernel, IEEE profile", "O", &s0[0]);
    CHECK(s0[0].failed > 0, "without the floor the flushed O must fail (floor not needed?)");
    /* the IEEE backend on the same inputs keeps its IEEE bound */
    run_fwd(fa_backend_cpu(), &t);
    judge_fwd(&t, prof_ieee(), s0, NULL);
    print_stats("tiny V, IEEE kernel, IEEE profile", "O", &s0[0]);
    CHECK(s0[0].failed == 0 && s0[1].failed == 0, "IEEE CPU backend outside the IEEE bound");
    t_free(&t);
}

static void test_tiny_dout_backward(void) {
    fa_problem p = t_problem(1, 48, 80, 4, 2, 32, 32, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1.0, 1.0, 1.0, 0);
    int64_t n = p.batch * p.seqlen_q * p.heads_q * p.head_dim_v;
    for (int64_t e = 0; e < n; e++) t.dout[e] = orc_encode(t_gauss() * 1e-39, p.dtype); /* dO ~ 1e-39 */
    run_fwd(fa_backend_cpu_ftz(), &t);
    t_grads g;
    t_grads_alloc(&t, &g);
    run_bwd(fa_backend_cpu_ftz(), &t, &g);
    orc_stats s[3], s0[3];
    orc_bwd_result r;
    judge_bwd(&t, &g, prof_ftz(), s, &r);
    const char *nm[3] = {"dQ", "dK", "dV"};
    const orc_block *blk[3] = {&r.dq, &r.dk, &r.dv};
    const fa_tensor *tt[3] = {&g.tq, &g.tk, &g.tv};
    for (int k = 0; k < 3; k++) {
        print_stats("tiny dO, FTZ kernel, FTZ profile", nm[k], &s[k]);
        CHECK(s[k].failed == 0, "%s: FTZ kernel outside the FTZ bound", nm[k]);
        CHECK(s[k].checked > 0 && s[k].unchecked == 0, "%s: not judged", nm[k]);
        int64_t z = flushed_zeros(blk[k], tt[k]->ptr, tt[k]->stride);
        printf("[tiny dO] %s: %lld elements stored as 0 where the reference is not\n", nm[k], (long long)z);
        CHECK(z > 0, "%s: the FTZ emulation flushed nothing", nm[k]);
    }
    orc_bwd_free(&r);
    judge_bwd(&t, &g, prof_ieee(), s0, NULL);
    for (int k = 0; k < 3; k++) {
        print_stats("tiny dO, FTZ kernel, IEEE profile", nm[k], &s0[k]);
        CHECK(s0[k].failed > 0, "%s: without the floor the flushed gradient must fail", nm[k]);
    }
    /* IEEE backend, IEEE profile, same inputs (its own forward) */
    run_fwd(fa_backend_cpu(), &t);
    run_bwd(fa_backend_cpu(), &t, &g);
    judge_bwd(&t, &g, prof_ieee(), s0, NULL);
    for (int k = 0; k < 3; k++) CHECK(s0[k].failed == 0, "%s: IEEE CPU backend outside the IEEE bound", nm[k]);
    t_grads_free(&g);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// (b), (c) normal range: the floor is negligible and hides no relative error

static double max_bound_gap(const orc_block *a, const orc_block *b) {
    double worst = 0;
    for (int64_t e = 0; e < a->n * a->dim; e++) {
        if (a->flags[e] & (ORC_F_UNCHECKABLE | ORC_F_NAN | ORC_F_INF | ORC_F_MASKED_ROW)) continue;
        double gap = a->bound[e] - b->bound[e];
        CHECK(gap >= 0, "FTZ bound below the IEEE bound at %lld", (long long)e);
        if (gap > worst) worst = gap;
    }
    return worst;
}

/* Move the output with the largest |ref| by 8 ulps of the dtype (relative ~2^-5
 * bf16, 2^-8 fp16): far outside any bound of a correct kernel. */
static void move_8ulps(const orc_block *blk, uint16_t *buf, const int64_t st[4]) {
    int64_t best = -1;
    for (int64_t e = 0; e < blk->n * blk->dim; e++)
        if (!(blk->flags[e] & ~ORC_F_ESCALATED) && (best < 0 || fabs(blk->ref[e]) > fabs(blk->ref[best]))) best = e;
    if (best < 0) return;
    const orc_index *ix = &blk->index[best / blk->dim];
    uint16_t *x = &buf[ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + (best % blk->dim) * st[3]];
    *x = (uint16_t)(*x + 8); /* away from zero for either sign (no exponent wrap at |ref| < max) */
}

static void test_normal_range(fa_dtype dt) {
    const char *tag = dt == FA_BF16 ? "normal bf16" : "normal fp16";
    fa_problem p = t_problem(1, 70, 200, 4, 2, 32, 32, dt, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1.5, 1.5, 1.0, 0); /* peaky enough that the running max grows */
    run_fwd(fa_backend_cpu_ftz(), &t);
    orc_stats s[2];
    orc_fwd_result rf, ri;
    judge_fwd(&t, prof_ftz(), s, &rf);
    CHECK(s[0].failed == 0 && s[1].failed == 0, "%s: FTZ kernel outside its bound", tag);
    judge_fwd(&t, prof_ieee(), s, &ri);
    double gap = max_bound_gap(&rf.o, &ri.o), gl = max_bound_gap(&rf.lse, &ri.lse);
    printf("[%s] forward: largest bound(FTZ) - bound(IEEE): O %.3g, LSE %.3g\n", tag, gap, gl);
    CHECK(gap < 0x1p-100 && gl < 0x1p-100, "%s: the floor is not ~2^-126 in size", tag);
    orc_fwd_free(&ri);

    t_grads g;
    t_grads_alloc(&t, &g);
    run_bwd(fa_backend_cpu_ftz(), &t, &g);
    orc_stats sb[3];
    orc_bwd_result bf, bi;
    judge_bwd(&t, &g, prof_ftz(), sb, &bf);
    for (int k = 0; k < 3; k++) CHECK(sb[k].failed == 0 && sb[k].checked > 0, "%s: gradient %d outside its bound", tag, k);
    judge_bwd(&t, &g, prof_ieee(), sb, &bi);
    double gq = max_bound_gap(&bf.dq, &bi.dq), gk = max_bound_gap(&bf.dk, &bi.dk), gv = max_bound_gap(&bf.dv, &bi.dv);
    printf("[%s] backward: largest bound(FTZ) - bound(IEEE): dQ %.3g dK %.3g dV %.3g\n", tag, gq, gk, gv);
    CHECK(gq < 0x1p-100 && gk < 0x1p-100 && gv < 0x1p-100, "%s: the backward floor is not ~2^-126", tag);
    orc_bwd_free(&bi);

    /* an output moved by 8 ulps fails against the FTZ profile */
    move_8ulps(&rf.o, t.o, t.to.stride);
    orc_stats sm[2];
    CHECK(orc_compare_fwd(&rf, &t.to, NULL, &sm[0], NULL, NULL) == FA_OK, "compare");
    CHECK(sm[0].failed >= 1, "%s: O moved by 8 ulps passes the FTZ bound", tag);
    move_8ulps(&bf.dv, g.dv, g.tv.stride);
    orc_stats sv;
    CHECK(orc_compare_bwd(&bf, NULL, NULL, &g.tv, NULL, NULL, &sv, NULL) == FA_OK, "compare");
    CHECK(sv.failed >= 1, "%s: dV moved by 8 ulps passes the FTZ bound", tag);
    orc_fwd_free(&rf);
    orc_bwd_free(&bf);

    /* mutants with a relative error, run in FTZ mode, judged with the FTZ profile */
    static const char *const fwd_mut[] = {"lse_log2", "rescale_missing"};
    for (int m = 0; m < 2; m++) {
        CHECK(fa_cpu_set_mutant(fa_cpu_mutant_id(fwd_mut[m])) == 0, "select %s", fwd_mut[m]);
        run_fwd(fa_backend_cpu_ftz(), &t);
        fa_cpu_set_mutant(0);
        judge_fwd(&t, prof_ftz(), s, NULL);
        printf("[%s] mutant %s in FTZ mode: O failed %lld, LSE failed %lld\n", tag, fwd_mut[m],
               (long long)s[0].failed, (long long)s[1].failed);
        CHECK(s[0].failed + s[1].failed > 0, "%s: mutant %s passes the FTZ profile", tag, fwd_mut[m]);
    }
    run_fwd(fa_backend_cpu_ftz(), &t); /* correct O, LSE for the backward */
    CHECK(fa_cpu_set_mutant(fa_cpu_mutant_id("delta_from_dout_squared")) == 0, "select mutant");
    run_bwd(fa_backend_cpu_ftz(), &t, &g);
    fa_cpu_set_mutant(0);
    judge_bwd(&t, &g, prof_ftz(), sb, NULL);
    printf("[%s] mutant delta_from_dout_squared in FTZ mode: dQ failed %lld, dK failed %lld\n", tag,
           (long long)sb[0].failed, (long long)sb[1].failed);
    CHECK(sb[0].failed > 0 && sb[1].failed > 0, "%s: delta mutant passes the FTZ profile", tag);
    t_grads_free(&g);
    t_free(&t);
}

int main(void) {
    test_tiny_v_forward();
    test_tiny_dout_backward();
    test_normal_range(FA_BF16);
    test_normal_range(FA_F16);
    if (t_failures) { fprintf(stderr, "%d check(s) failed\n", t_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
