/* test_bound_soundness.c: a simulated fp32 flash-attention kernel written here
 * (not the oracle's code, not a backend's), deliberately worst-case-ish:
 * several tile sizes (many online-softmax rescales), exp with a one-sided bias
 * of 2^-23 relative, scale*log2(e) folded into the scores, truncating (round
 * toward zero) accumulation, P and dS rounded to the input dtype, outputs
 * rounded. Its profile says exactly that. Asserts, for forward and backward:
 *   - no element exceeds its bound (orc_compare: failed == 0), NaN agreement;
 *   - the bound is tight: median error/bound of an RN fp32 kernel > 1e-3;
 *   - an output moved to the first representable value above ref + bound +
 *     orc_err is flagged, and the last value below ref + bound - orc_err is not. */
#include <float.h>

#include "oracle/tests/sim_kernel.h"

// ----------------------------------------------------------------------------
// neighbours in a 16-bit float format (sign-magnitude bit patterns)

static uint16_t next_up(uint16_t x) {
    if (x == 0x8000) return 0x0001;
    return (x & 0x8000) ? (uint16_t)(x - 1) : (uint16_t)(x + 1);
}
static uint16_t next_down(uint16_t x) {
    if (x == 0x0000) return 0x8001;
    return (x & 0x8000) ? (uint16_t)(x + 1) : (uint16_t)(x - 1);
}

// ----------------------------------------------------------------------------
// perturbation: the first dtype value above ref + bound + orc_err must fail,
// the last one below ref + bound - orc_err must pass

static void perturb_check(const orc_block *blk, uint16_t *buf, const int64_t st[4], fa_dtype dt, int is_col,
                          orc_stats *before, int (*cmp)(void *ctx, orc_stats *s), void *ctx, const char *what) {
    /* pick the element with the largest bound among finite, checkable ones */
    int64_t best = -1;
    for (int64_t e = 0; e < blk->n * blk->dim; e++) {
        if (blk->flags[e] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE | ORC_F_MASKED_ROW)) continue;
        if (best < 0 || blk->bound[e] > blk->bound[best]) best = e;
    }
    if (best < 0) return;
    const orc_index *ix = &blk->index[best / blk->dim];
    int64_t d = best % blk->dim;
    (void)is_col;
    uint16_t *slot = &buf[ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3]];
    uint16_t saved = *slot;
    double ref = blk->ref[best], hiT = ref + blk->bound[best] + blk->orc_err[best];
    double loT = ref + blk->bound[best] - blk->orc_err[best];
    /* walk dtype values upward from ref */
    uint16_t x = orc_encode(ref, dt);
    int guard = 0;
    while (orc_decode(x, dt) <= hiT && guard++ < 100000) x = next_up(x);
    *slot = x;
    orc_stats s;
    cmp(ctx, &s);
    CHECK(s.failed == before->failed + 1, "%s: value %.9g above ref %.9g + bound %.3g not flagged (failed %lld)",
          what, orc_decode(x, dt), ref, blk->bound[best], (long long)s.failed);
    /* last value <= loT */
    uint16_t y = orc_encode(loT, dt);
    while (orc_decode(y, dt) > loT) y = next_down(y);
    if (orc_decode(y, dt) >= ref) {
        *slot = y;
        cmp(ctx, &s);
        CHECK(s.failed == before->failed, "%s: value %.9g inside the bound flagged", what, orc_decode(y, dt));
    }
    *slot = saved;
}

typedef struct {
    const orc_fwd_result *r;
    const orc_bwd_result *br;
    fa_tensor o, dq, dk, dv;
    int which; /* 0 O, 1 dQ, 2 dK, 3 dV */
} cmp_ctx;

static int cmp_any(void *vc, orc_stats *s) {
    cmp_ctx *c = vc;
    if (c->which == 0) return orc_compare_fwd(c->r, &c->o, NULL, s, NULL, NULL);
    return orc_compare_bwd(c->br, c->which == 1 ? &c->dq : NULL, c->which == 2 ? &c->dk : NULL,
                           c->which == 3 ? &c->dv : NULL, c->which == 1 ? s : NULL, c->which == 2 ? s : NULL,
                           c->which == 3 ? s : NULL, NULL);
}

// ----------------------------------------------------------------------------

static double g_median_rn[5];

/* A simulated kernel (opts) checked with profile pr. expect_pass: no element may
 * exceed its bound (and the perturbation checks run); otherwise some element of
 * the tensors in fail_mask (bit k: O, LSE, dQ, dK, dV) must fail. dO is scaled by
 * do_scale (tiny values put the gradients on the fp16 subnormal grid). Prints the
 * medians of error/bound; fills med[5] when med != NULL. */
static void run_case_p(const char *name, fa_problem p, int layout, double qs, int mask, int Bc, s_opts opts,
                       fa_precision pr, double do_scale, int expect_pass, int fail_mask, double *med) {
    t_prob t;
    t_setup(&t, p, layout, qs, 1.0, 1.0, mask);
    if (do_scale != 1.0) {
        int64_t st[4], n = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, layout, st);
        for (int64_t e = 0; e < n; e++) t.dout[e] = orc_encode(orc_decode(t.dout[e], p.dtype) * do_scale, p.dtype);
    }
    so = opts;
    sim s = {&t, 1, Bc};
    sim_fwd(&s, t.o, t.lse);
    fa_fwd_args a = t_fwd_args(&t);
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    orc_stats so_, sl;
    CHECK(orc_compare_fwd(&r, &t.to, &t.tlse, &so_, &sl, NULL) == FA_OK, "cmp");
    char buf[600];
    orc_stats_format(&so_, "O", buf, sizeof buf);
    printf("[%s] %s\n", name, buf);
    orc_stats_format(&sl, "LSE", buf, sizeof buf);
    printf("[%s] %s\n", name, buf);

    /* backward on the simulated forward's O and LSE */
    int64_t n;
    int64_t sq[4], sk[4], sv[4];
    n = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, layout, sq);
    uint16_t *dq = calloc((size_t)n, 2);
    n = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, layout, sk);
    uint16_t *dk = calloc((size_t)n, 2);
    n = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, layout, sv);
    uint16_t *dv = calloc((size_t)n, 2);
    sim_bwd(&s, dq, dk, dv, sq, sk, sv);
    fa_bwd_args ba = t_bwd_args(&t);
    orc_bwd_result br;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd");
    fa_tensor tq = {dq, {sq[0], sq[1], sq[2], sq[3]}}, tk = {dk, {sk[0], sk[1], sk[2], sk[3]}},
              tv = {dv, {sv[0], sv[1], sv[2], sv[3]}};
    orc_stats s3[3];
    CHECK(orc_compare_bwd(&br, &tq, &tk, &tv, &s3[0], &s3[1], &s3[2], NULL) == FA_OK, "cmp bwd");
    const char *nm[3] = {"dQ", "dK", "dV"};
    for (int k = 0; k < 3; k++) {
        orc_stats_format(&s3[k], nm[k], buf, sizeof buf);
        printf("[%s] %s\n", name, buf);
    }
    const orc_stats *all[5] = {&so_, &sl, &s3[0], &s3[1], &s3[2]};
    printf("[%s] median err/bound O %.3g LSE %.3g dQ %.3g dK %.3g dV %.3g\n", name, so_.median_ratio,
           sl.median_ratio, s3[0].median_ratio, s3[1].median_ratio, s3[2].median_ratio);
    if (med) for (int k = 0; k < 5; k++) med[k] = all[k]->median_ratio;
    if (!expect_pass) {
        int64_t failed = 0;
        for (int k = 0; k < 5; k++) if (fail_mask & (1 << k)) failed += all[k]->failed;
        printf("[%s] (a kernel outside its profile) failed elements in the expected tensors: %lld\n", name,
               (long long)failed);
        CHECK(failed > 0, "%s: a kernel that does what its profile does not declare passed", name);
        orc_fwd_free(&r);
        orc_bwd_free(&br);
        free(dq); free(dk); free(dv);
        t_free(&t);
        return;
    }
    CHECK(so_.failed == 0 && sl.failed == 0, "%s: forward exceeded the bound", name);
    CHECK(so_.checked > 0 && sl.checked > 0, "%s: nothing checked", name);
    for (int k = 0; k < 3; k++) {
        CHECK(s3[k].failed == 0, "%s: %s exceeded the bound", name, nm[k]);
        CHECK(s3[k].checked > 0, "%s: %s nothing checked", name, nm[k]);
    }
    printf("[%s] backward input consistency: O %.3g LSE %.3g (<= 1: a correct forward)\n", name,
           br.o_input_ratio, br.lse_input_ratio);
    CHECK(br.o_input_ratio <= 1 && br.lse_input_ratio <= 1, "%s: simulated forward outside its bound", name);
    /* perturbations slightly beyond / inside the bound */
    cmp_ctx cc = {&r, &br, t.to, tq, tk, tv, 0};
    perturb_check(&r.o, t.o, t.to.stride, p.dtype, 0, &so_, cmp_any, &cc, "O");
    cc.which = 1; perturb_check(&br.dq, dq, sq, p.dtype, 0, &s3[0], cmp_any, &cc, "dQ");
    cc.which = 2; perturb_check(&br.dk, dk, sk, p.dtype, 1, &s3[1], cmp_any, &cc, "dK");
    cc.which = 3; perturb_check(&br.dv, dv, sv, p.dtype, 1, &s3[2], cmp_any, &cc, "dV");
    /* LSE: nextafterf beyond ref + bound + orc_err */
    {
        int64_t x = 0;
        while (x < r.lse.n && (r.lse.flags[x] & (ORC_F_MASKED_ROW | ORC_F_UNCHECKABLE | ORC_F_NAN))) x++;
        if (x < r.lse.n) {
            const orc_index *ix = &r.lse.index[x];
            float *slot = &t.lse[ix->b * t.tlse.stride[0] + ix->h * t.tlse.stride[1] + ix->s * t.tlse.stride[2]];
            float saved = *slot;
            double lim = r.lse.ref[x] + r.lse.bound[x] + r.lse.orc_err[x];
            float f = (float)lim;
            while ((double)f <= lim) f = nextafterf(f, INFINITY);
            *slot = f;
            orc_stats s2;
            orc_compare_fwd(&r, NULL, &t.tlse, NULL, &s2, NULL);
            CHECK(s2.failed == 1, "LSE above the bound not flagged");
            *slot = saved;
        }
    }
    /* NaN where the reference is finite, and a nonzero in a masked row, fail */
    {
        int64_t x = 0;
        while (x < r.o.n * r.o.dim && (r.o.flags[x] & (ORC_F_MASKED_ROW | ORC_F_NAN))) x++;
        if (x < r.o.n * r.o.dim) {
            const orc_index *ix = &r.o.index[x / r.o.dim];
            int64_t d = x % r.o.dim;
            uint16_t *slot = &t.o[ix->b * t.to.stride[0] + ix->s * t.to.stride[1] + ix->h * t.to.stride[2] + d * t.to.stride[3]];
            uint16_t saved = *slot;
            *slot = orc_encode(NAN, p.dtype);
            orc_stats s2;
            orc_compare_fwd(&r, &t.to, NULL, &s2, NULL, NULL);
            CHECK(s2.nan_unexpected == 1 && s2.failed == 1, "NaN not flagged");
            *slot = saved;
        }
    }
    orc_fwd_free(&r);
    orc_bwd_free(&br);
    free(dq); free(dk); free(dv);
    t_free(&t);
}


static s_opts opts_ieee(int trunc) {
    s_opts o;
    memset(&o, 0, sizeof o);
    o.trunc = trunc;
    o.exp_bias = 1;
    return o;
}

/* the old signature: an IEEE kernel, P and dS rounded, its own profile, must pass */
static void run_case(const char *name, fa_problem p, int layout, double qs, int mask, int Bc, int trunc,
                     int tight_slot) {
    fa_precision pr = {.u_acc = trunc ? 0x1p-23 : 0x1p-24, .exp_rel_err = 0x1p-22, .scores_fp32 = 1,
                       .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1,
                       .flushes_subnormals = 0};
    run_case_p(name, p, layout, qs, mask, Bc, opts_ieee(trunc), pr, 1.0, 1, 0, tight_slot >= 0 ? g_median_rn : NULL);
}

/* The store's reachable values (BOUNDS.md 5.8), attained: fp16 inputs ~2e-6 put every exact
 * gradient far below half the smallest subnormal (2^-25), so a kernel within the fp32 preset can
 * only store 0. The bound of such an element is |ref| + orc_err (the generic store term was
 * f_out = 2^-25): the correct kernel's 0 attains it (ratio ~1), the smallest subnormal fails. */
static void test_store_forced(void) {
    fa_problem p = t_problem(1, 20, 24, 2, 1, 16, 16, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 2e-6, 2e-6, 2e-6, 0);
    int64_t st[4], n = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, 0, st);
    for (int64_t e = 0; e < n; e++) t.dout[e] = orc_encode(orc_decode(t.dout[e], p.dtype) * 2e-6, p.dtype);
    s_opts o;
    memset(&o, 0, sizeof o);
    o.p_keep = 1; o.ds_keep = 1;
    so = o;
    sim s = {&t, 1, 8};
    sim_fwd(&s, t.o, t.lse);
    fa_precision pr;
    CHECK(fa_precision_preset("fp32", &pr, NULL) == FA_OK, "fp32 preset");
    int64_t sq[4], sk[4];
    n = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, 0, sq);
    uint16_t *dq = calloc((size_t)n, 2);
    n = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, 0, sk);
    uint16_t *dk = calloc((size_t)n, 2), *dv = calloc((size_t)n, 2);
    sim_bwd(&s, dq, dk, dv, sq, sk, sk);
    fa_bwd_args ba = t_bwd_args(&t);
    orc_bwd_result br;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd");
    fa_tensor tq = {dq, {sq[0], sq[1], sq[2], sq[3]}}, tk = {dk, {sk[0], sk[1], sk[2], sk[3]}},
              tv = {dv, {sk[0], sk[1], sk[2], sk[3]}};
    orc_stats s3[3];
    CHECK(orc_compare_bwd(&br, &tq, &tk, &tv, &s3[0], &s3[1], &s3[2], NULL) == FA_OK, "cmp bwd");
    const orc_block *bl[3] = {&br.dq, &br.dk, &br.dv};
    uint16_t *bufs[3] = {dq, dk, dv};
    const int64_t *sts[3] = {sq, sk, sk};
    const char *nm[3] = {"dQ", "dK", "dV"};
    for (int k = 0; k < 3; k++) {
        int64_t forced = 0, loose = 0, at = -1;
        for (int64_t x = 0; x < bl[k]->n * bl[k]->dim; x++) {
            const orc_index *ix = &bl[k]->index[x / bl[k]->dim];
            int64_t d = x % bl[k]->dim;
            uint16_t *slot = &bufs[k][ix->b * sts[k][0] + ix->s * sts[k][1] + ix->h * sts[k][2] + d * sts[k][3]];
            double r = bl[k]->ref[x];
            if (orc_decode(*slot, p.dtype) != 0 || r == 0 || !isfinite(r)) continue;
            forced++;
            if (at < 0) at = x;
            if (!(bl[k]->bound[x] <= (fabs(r) + bl[k]->orc_err[x] + 0x1p-899) * (1 + 0x1p-28) && bl[k]->bound[x] < 0x1p-25))
                loose++;
        }
        printf("[store forced] %s: %lld elements forced to 0, median err/bound %.3g, failed %lld\n", nm[k],
               (long long)forced, s3[k].median_ratio, (long long)s3[k].failed);
        CHECK(s3[k].failed == 0, "store forced: %s fails the correct kernel", nm[k]);
        CHECK(loose == 0, "store forced: %s: %lld forced elements keep a bound above |ref| + orc_err", nm[k], (long long)loose);
        if (k < 2) { /* dQ, dK ~ 1e-12; dV = sum P dO ~ 1e-6 stays in the fp16 subnormal range */
            CHECK(forced > bl[k]->n * bl[k]->dim / 2, "store forced: %s has %lld forced elements only", nm[k],
                  (long long)forced);
            CHECK(s3[k].median_ratio > 0.9, "store forced: %s median %.3g: the bound is not attained", nm[k],
                  s3[k].median_ratio);
        }
        if (at >= 0) { /* the smallest subnormal instead of 0 fails */
            const orc_index *ix = &bl[k]->index[at / bl[k]->dim];
            int64_t d = at % bl[k]->dim;
            uint16_t *slot = &bufs[k][ix->b * sts[k][0] + ix->s * sts[k][1] + ix->h * sts[k][2] + d * sts[k][3]];
            *slot = bl[k]->ref[at] > 0 ? 0x0001 : 0x8001;
            orc_stats s2[3];
            orc_compare_bwd(&br, &tq, &tk, &tv, &s2[0], &s2[1], &s2[2], NULL);
            CHECK(s2[k].failed == 1, "store forced: %s: the smallest subnormal where 0 is forced passes", nm[k]);
            *slot = 0;
        }
    }
    orc_bwd_free(&br);
    free(dq); free(dk); free(dv);
    t_free(&t);
}

/* The row-common part of D' - D in dQ (BOUNDS.md 5.10), attained: the O handed to the
 * backward is moved by 64 ulps in the direction of sign(dO_id), so D' = dO.O' errs by about
 * sum_d |dO_d| |O'_d - O_d| = dD, the whole row's dS' by -P16' dD, and dQ by scale dD
 * sum_j P_ij K_jd: the term the refinement bounds by scale dD |sum_j P_ij K_jd| (the per-key
 * form scale dD sum_j P_ij |K_jd| is sqrt(keys) looser). fp32 arithmetic (P, dS kept), so
 * that term dominates: the median error/bound of dQ must exceed 0.5, with no failure. */
static void test_d_common(void) {
    fa_problem p = t_problem(1, 32, 96, 2, 2, 32, 32, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1.0, 1.0, 1.0, 0);
    s_opts o;
    memset(&o, 0, sizeof o);
    o.p_keep = 1; o.ds_keep = 1;
    so = o;
    sim s = {&t, 1, 16};
    sim_fwd(&s, t.o, t.lse);
    for (int64_t b = 0; b < p.batch; b++)
        for (int64_t i = 0; i < p.seqlen_q; i++)
            for (int64_t h = 0; h < p.heads_q; h++)
                for (int64_t d = 0; d < p.head_dim_v; d++) {
                    const int64_t *os = t.to.stride, *ds = t.tdo.stride;
                    uint16_t *x = &t.o[b * os[0] + i * os[1] + h * os[2] + d * os[3]];
                    double g = orc_decode(t.dout[b * ds[0] + i * ds[1] + h * ds[2] + d * ds[3]], p.dtype);
                    double v = orc_decode(*x, p.dtype);
                    *x = orc_encode(v + (g > 0 ? 1 : -1) * 64 * 0x1p-10 * (fabs(v) > 0x1p-14 ? fabs(v) : 0x1p-14), p.dtype);
                }
    fa_precision pr;
    CHECK(fa_precision_preset("fp32", &pr, NULL) == FA_OK, "fp32 preset");
    int64_t sq[4], sk[4], n;
    n = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, 0, sq);
    uint16_t *dq = calloc((size_t)n, 2);
    n = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, 0, sk);
    uint16_t *dk = calloc((size_t)n, 2), *dv = calloc((size_t)n, 2);
    sim_bwd(&s, dq, dk, dv, sq, sk, sk);
    fa_bwd_args ba = t_bwd_args(&t);
    orc_bwd_result br;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd");
    fa_tensor tq = {dq, {sq[0], sq[1], sq[2], sq[3]}}, tk = {dk, {sk[0], sk[1], sk[2], sk[3]}},
              tv = {dv, {sk[0], sk[1], sk[2], sk[3]}};
    orc_stats s3[3];
    CHECK(orc_compare_bwd(&br, &tq, &tk, &tv, &s3[0], &s3[1], &s3[2], NULL) == FA_OK, "cmp bwd");
    printf("[D common] O moved by 64 ulps toward sign(dO): O input ratio %.3g; dQ median err/bound %.3g worst %.3g "
           "failed %lld; dK %.3g dV %.3g\n", br.o_input_ratio, s3[0].median_ratio, s3[0].worst_ratio,
           (long long)s3[0].failed, s3[1].median_ratio, s3[2].median_ratio);
    for (int k = 0; k < 3; k++) CHECK(s3[k].failed == 0, "D common: tensor %d fails", k);
    CHECK(s3[0].median_ratio > 0.5, "D common: dQ median %.3g: the row-common D term is not attained",
          s3[0].median_ratio);
    orc_bwd_free(&br);
    free(dq); free(dk); free(dv);
    t_free(&t);
}

int main(void) {
    fa_problem p;
    test_store_forced();
    test_d_common();
    /* RN fp32 accumulation, fp16: the tightness measurement */
    p = t_problem(1, 48, 64, 4, 2, 64, 64, FA_F16, FA_CAUSAL_NONE, -1, -1);
    run_case("fp16 RN Bc=16", p, 0, 1.0, 0, 16, 0, 0);
    /* truncating accumulation, many rescales (Bc = 1), causal bottom-right, mask */
    p = t_problem(2, 13, 37, 4, 1, 32, 16, FA_F16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
    run_case("fp16 trunc Bc=1 causal-BR mask", p, 1, 2.0, 1, 1, 1, -1);
    /* bf16, window + align, padded strides, large scores (peaky softmax) */
    p = t_problem(1, 29, 23, 2, 2, 40, 24, FA_BF16, FA_CAUSAL_NONE, 5, 2);
    p.window_align = FA_ALIGN_BOTTOM_RIGHT;
    run_case("bf16 trunc Bc=3 window", p, 2, 4.0, 1, 3, 1, -1);
    /* fp16 with tiny probabilities (subnormal P floor): large q, explicit scale */
    p = t_problem(1, 9, 200, 1, 1, 16, 16, FA_F16, FA_CAUSAL_TOP_LEFT, -1, -1);
    p.softmax_scale = 0.9f;
    run_case("fp16 trunc Bc=64 peaky", p, 0, 3.0, 0, 64, 1, -1);
    printf("tightness (RN fp32 kernel, fp16): median err/bound O %.3g LSE %.3g dQ %.3g dK %.3g dV %.3g\n",
           g_median_rn[0], g_median_rn[1], g_median_rn[2], g_median_rn[3], g_median_rn[4]);
    for (int k = 0; k < 5; k++)
        CHECK(g_median_rn[k] > 1e-3, "bound too loose: median ratio %.3g <= 1e-3 (tensor %d)", g_median_rn[k], k);

    /* ---- ABI-3 profile fields (BOUNDS.md section 10): a kernel doing exactly what its
     * profile says passes at the bound; one doing what the profile does not declare fails */
    fa_precision base = {.u_acc = 0x1p-24, .exp_rel_err = 0x1p-22, .scores_fp32 = 1, .p_rounded = 1,
                         .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1, .flushes_subnormals = 0};
    double med[5];
    /* tensor-core steps: 4 terms, no extra bit, truncation (the conservative preset) and 8 terms
     * with 3 extra bits, RN normalisation; every accumulation of the kernel is tc steps */
    {
        s_opts o = opts_ieee(0);
        o.tc_t = 4; o.tc_e = 0;
        fa_precision pr = base;
        pr.u_acc = 0x1p-23; pr.tc_terms = 4; pr.tc_extra_bits = 0;
        p = t_problem(1, 40, 70, 4, 2, 64, 64, FA_F16, FA_CAUSAL_NONE, -1, -1);
        run_case_p("tc t=4 e=0 trunc", p, 0, 1.5, 1, 16, o, pr, 1.0, 1, 0, med);
        for (int k = 0; k < 5; k++) CHECK(med[k] > 1e-3, "tc: bound too loose (tensor %d: %.3g)", k, med[k]);
        o.tc_t = 8; o.tc_e = 3; o.tc_norm_rn = 1;
        pr.tc_terms = 8; pr.tc_extra_bits = 3; pr.tc_norm_rn = 1;
        p = t_problem(1, 33, 90, 2, 2, 32, 32, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
        run_case_p("tc t=8 e=3 RN-norm bf16", p, 1, 2.0, 0, 32, o, pr, 1.0, 1, 0, NULL);
    }
    /* the PyTorch-style backward: scale folded into dS, dP rounded, D from P and dP, GQA parts
     * rounded per head then summed in fp32; tiny dO (gradients on the fp16 subnormal grid) and
     * an explicit small scale, where the folding and the per-head rounding matter */
    {
        s_opts o = opts_ieee(0);
        o.fold = 1; o.dp_rnd = 1; o.d_from_p = 1; o.gqa = FA_GQA_ROUND_SUM32;
        fa_precision pr = base;
        pr.ds_scale_folded = 1; pr.dp_rounded = 1; pr.d_source = FA_D_FROM_P; pr.gqa_reduce = FA_GQA_ROUND_SUM32;
        p = t_problem(1, 24, 20, 8, 1, 16, 16, FA_F16, FA_CAUSAL_NONE, -1, -1);
        p.softmax_scale = 0.05f;
        run_case_p("torch-style bwd G=8 tiny dO", p, 0, 1.0, 0, 16, o, pr, 1e-5, 1, 0, med);
        for (int k = 2; k < 5; k++) CHECK(med[k] > 1e-3 && med[k] < 0.5, "torch-style: median %.3g (tensor %d)", med[k], k);
        p.softmax_scale = 0;
        run_case_p("torch-style bwd G=8 normal dO", p, 2, 1.0, 1, 16, o, pr, 1.0, 1, 0, NULL);
        o.gqa = FA_GQA_ROUND_SUM16; pr.gqa_reduce = FA_GQA_ROUND_SUM16;
        run_case_p("GQA summed in the dtype", p, 0, 1.0, 0, 16, o, pr, 1e-5, 1, 0, NULL);
        /* either placement of the scale (2) covers both kernels */
        o = opts_ieee(0); pr = base; pr.ds_scale_folded = 2;
        p.softmax_scale = 0.05f;
        run_case_p("scale after, profile says either", p, 0, 1.0, 0, 16, o, pr, 1e-5, 1, 0, NULL);
        o.fold = 1;
        run_case_p("scale folded, profile says either", p, 0, 1.0, 0, 16, o, pr, 1e-5, 1, 0, NULL);
    }
    /* PyTorch's math graph upcast to fp32 (the torch-math preset): natural exp, sqrt(scale) on
     * q and k, P and dS in fp32, D from P and dP, GQA over fp32 gradients */
    {
        s_opts o = opts_ieee(0);
        o.split = 1; o.p_keep = 1; o.ds_keep = 1; o.d_from_p = 1;
        fa_precision pr;
        CHECK(fa_precision_preset("torch-math", &pr, NULL) == FA_OK, "torch-math preset");
        p = t_problem(1, 30, 41, 4, 2, 32, 32, FA_F16, FA_CAUSAL_TOP_LEFT, -1, -1);
        p.softmax_scale = 0.3f;
        run_case_p("unfused fp32 graph, preset torch-math", p, 0, 2.0, 1, 41, o, pr, 1.0, 1, 0, med);
        for (int k = 0; k < 5; k++) CHECK(med[k] > 1e-3, "torch-math: bound too loose (tensor %d: %.3g)", k, med[k]);
        p.softmax_scale = 0;
        run_case_p("unfused fp32 graph, default scale, bf16", (p.dtype = FA_BF16, p), 1, 2.0, 0, 41, o, pr, 1.0, 1, 0, NULL);
    }
    /* undeclared behaviour fails somewhere */
    {
        p = t_problem(1, 24, 20, 8, 1, 16, 16, FA_F16, FA_CAUSAL_NONE, -1, -1);
        s_opts o = opts_ieee(0);
        o.gqa = FA_GQA_ROUND_SUM32;
        run_case_p("per-head rounding, profile says fused", p, 0, 1.0, 0, 16, o, base, 1e-5, 0, (1 << 3) | (1 << 4), NULL);
        o = opts_ieee(0);
        o.fold = 1;
        p.softmax_scale = 0.05f;
        run_case_p("scale folded, profile says after", p, 0, 1.0, 0, 16, o, base, 1e-5, 0, (1 << 2) | (1 << 3), NULL);
        /* the wrong preset: a tensor-core-style kernel (P and dS rounded to the dtype,
         * truncating adds) checked with the "fp32" preset (P and dS kept in fp32) fails: the
         * presets are not just looser */
        fa_precision fp32;
        CHECK(fa_precision_preset("fp32", &fp32, NULL) == FA_OK, "fp32 preset");
        o = opts_ieee(1);
        p = t_problem(1, 48, 64, 4, 2, 64, 64, FA_F16, FA_CAUSAL_NONE, -1, -1);
        p.softmax_scale = 0;
        run_case_p("P, dS rounded, checked with preset fp32", p, 0, 1.0, 0, 16, o, fp32, 1.0, 0, 0x1f, NULL);
        /* and with its own preset's settings it passes (tensorcore, IEEE adds declared) */
        fa_precision tcp;
        CHECK(fa_precision_preset("tensorcore", &tcp, NULL) == FA_OK, "tensorcore preset");
        run_case_p("P, dS rounded, checked with preset tensorcore", p, 0, 1.0, 0, 16, o, tcp, 1.0, 1, 0, NULL);
    }
    if (t_failures) { fprintf(stderr, "%d check(s) failed\n", t_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
