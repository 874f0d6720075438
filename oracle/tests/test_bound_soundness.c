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

#include "oracle/tests/tutil.h"

// ----------------------------------------------------------------------------
// own dtype conversions (independent of the oracle)

static float s_dec(uint16_t x, fa_dtype dt) {
    if (dt == FA_BF16) {
        uint32_t u = (uint32_t)x << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    _Float16 h;
    memcpy(&h, &x, 2);
    return (float)h;
}

static uint16_t s_enc(float f, fa_dtype dt) {
    if (dt == FA_BF16) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
        u += 0x7fff + ((u >> 16) & 1);
        return (uint16_t)(u >> 16);
    }
    _Float16 h = (_Float16)f;
    uint16_t x;
    memcpy(&x, &h, 2);
    return x;
}
static float s_rd(float f, fa_dtype dt) { return s_dec(s_enc(f, dt), dt); }

// ----------------------------------------------------------------------------
// the simulated kernel's arithmetic

static int s_trunc = 1; /* 1: accumulation rounds toward zero (u = 2^-23), 0: RN (2^-24) */

/* acc + x with the kernel's accumulation rounding */
static float s_add(float acc, float x) {
    double e = (double)acc + (double)x;
    float f = (float)e;
    if (s_trunc && fabs((double)f) > fabs(e)) f = nextafterf(f, 0.0f);
    return f;
}
static float s_mul(float a, float x) { return a * x; } /* RN fp32 */

/* 2^x with a one-sided relative bias: declared exp_rel_err = 2^-22 covers it */
static float s_exp2(float x) {
    float f = (float)exp2((double)x);
    return f * (1.0f - 0x1p-23f);
}

typedef struct {
    const t_prob *t;
    int Br, Bc;
} sim;

static float s_ld(const uint16_t *p, const int64_t st[4], int64_t b, int64_t s, int64_t h, int64_t d, fa_dtype dt) {
    return s_dec(p[b * st[0] + s * st[1] + h * st[2] + d * st[3]], dt);
}

static int s_vis(const fa_problem *p, int64_t i, int64_t j) {
    int64_t diag = (p->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                    (p->causal == FA_CAUSAL_NONE && p->window_align == FA_ALIGN_BOTTOM_RIGHT))
                       ? i + p->seqlen_k - p->seqlen_q : i;
    if (p->causal != FA_CAUSAL_NONE && j > diag) return 0;
    if (p->window_left >= 0 && j < diag - p->window_left) return 0;
    if (p->window_right >= 0 && j > diag + p->window_right) return 0;
    return 1;
}

static float s_mask(const t_prob *t, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!t->mask) return 0;
    const int64_t *st = t->tmask.stride;
    return t->mask[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
}

/* log2-domain score of (i, j): (scale*log2e) * (q.k) + mask*log2e, all fp32 */
static float s_score(const sim *s, int64_t b, int64_t h, int64_t i, int64_t j, float sl2) {
    const t_prob *t = s->t;
    const fa_problem *p = &t->p;
    int64_t hk = h / (p->heads_q / p->heads_kv);
    float acc = 0;
    for (int64_t d = 0; d < p->head_dim_qk; d++)
        acc = s_add(acc, s_ld(t->q, t->tq.stride, b, i, h, d, p->dtype) * s_ld(t->k, t->tk.stride, b, j, hk, d, p->dtype));
    return s_mul(acc, sl2) + s_mul(s_mask(t, b, h, i, j), 1.44269504f);
}

static float s_scale(const fa_problem *p) {
    return p->softmax_scale != 0 ? p->softmax_scale : (float)(1.0 / sqrt((double)p->head_dim_qk));
}

/* forward: writes O (dtype) and LSE (fp32) into the problem's o / lse buffers */
static void sim_fwd(const sim *s, uint16_t *o, float *lse) {
    const t_prob *t = s->t;
    const fa_problem *p = &t->p;
    int64_t Dv = p->head_dim_v, hk;
    float sl2 = s_mul(s_scale(p), 1.44269504f);
    float *acc = malloc((size_t)Dv * sizeof(float)), *sc = malloc((size_t)s->Bc * sizeof(float));
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++) {
            hk = h / (p->heads_q / p->heads_kv);
            for (int64_t i = 0; i < p->seqlen_q; i++) {
                float m = -INFINITY, l = 0;
                for (int64_t d = 0; d < Dv; d++) acc[d] = 0;
                for (int64_t j0 = 0; j0 < p->seqlen_k; j0 += s->Bc) {
                    int64_t jn = p->seqlen_k - j0 < s->Bc ? p->seqlen_k - j0 : s->Bc;
                    float mt = m;
                    for (int64_t u = 0; u < jn; u++) {
                        int64_t j = j0 + u;
                        sc[u] = -INFINITY;
                        if (!s_vis(p, i, j) || s_mask(t, b, h, i, j) == -INFINITY) continue;
                        sc[u] = s_score(s, b, h, i, j, sl2);
                        if (sc[u] > mt) mt = sc[u];
                    }
                    if (mt == -INFINITY) continue; /* nothing visible yet */
                    float alpha = m == -INFINITY ? 0.0f : s_exp2(m - mt);
                    l = s_mul(l, alpha);
                    for (int64_t d = 0; d < Dv; d++) acc[d] = s_mul(acc[d], alpha);
                    m = mt;
                    for (int64_t u = 0; u < jn; u++) {
                        if (sc[u] == -INFINITY) continue;
                        float pr = s_exp2(sc[u] - m);
                        l = s_add(l, pr);
                        float p16 = s_rd(pr, p->dtype);
                        for (int64_t d = 0; d < Dv; d++)
                            acc[d] = s_add(acc[d], p16 * s_ld(t->v, t->tv.stride, b, j0 + u, hk, d, p->dtype));
                    }
                }
                const int64_t *os = t->to.stride;
                for (int64_t d = 0; d < Dv; d++)
                    o[b * os[0] + i * os[1] + h * os[2] + d * os[3]] = s_enc(l > 0 ? acc[d] / l : 0.0f, p->dtype);
                lse[b * t->tlse.stride[0] + h * t->tlse.stride[1] + i * t->tlse.stride[2]] =
                    l > 0 ? (m + log2f(l)) * 0.693147182f : -INFINITY;
            }
        }
    free(acc);
    free(sc);
}

/* backward (FA2 style): P from the given LSE, dS = P (dP - D) with D = dO.O,
 * P and dS rounded to the dtype, fp32 accumulations, outputs rounded */
static void sim_bwd(const sim *s, uint16_t *dq, uint16_t *dk, uint16_t *dv, const int64_t qst[4],
                    const int64_t kst[4], const int64_t vst[4]) {
    const t_prob *t = s->t;
    const fa_problem *p = &t->p;
    int64_t D = p->head_dim_qk, Dv = p->head_dim_v, G = p->heads_q / p->heads_kv, Sk = p->seqlen_k;
    float sc = s_scale(p), sl2 = s_mul(sc, 1.44269504f);
    fa_dtype dt = p->dtype;
    float *aq = malloc((size_t)D * sizeof(float));
    float *ak = calloc((size_t)(Sk * D) + 1, sizeof(float)), *av = calloc((size_t)(Sk * Dv) + 1, sizeof(float));
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t hk = 0; hk < p->heads_kv; hk++) {
            memset(ak, 0, (size_t)(Sk * D) * sizeof(float));
            memset(av, 0, (size_t)(Sk * Dv) * sizeof(float));
            for (int64_t h = hk * G; h < hk * G + G; h++)
                for (int64_t i = 0; i < p->seqlen_q; i++) {
                    float lse = t->lse[b * t->tlse.stride[0] + h * t->tlse.stride[1] + i * t->tlse.stride[2]];
                    float Di = 0;
                    for (int64_t d = 0; d < Dv; d++)
                        Di = s_add(Di, s_ld(t->dout, t->tdo.stride, b, i, h, d, dt) * s_ld(t->o, t->to.stride, b, i, h, d, dt));
                    for (int64_t d = 0; d < D; d++) aq[d] = 0;
                    for (int64_t j = 0; j < Sk; j++) {
                        if (!s_vis(p, i, j) || s_mask(t, b, h, i, j) == -INFINITY) continue;
                        float P = s_exp2(s_score(s, b, h, i, j, sl2) - s_mul(lse, 1.44269504f));
                        float P16 = s_rd(P, dt);
                        float dP = 0;
                        for (int64_t d = 0; d < Dv; d++)
                            dP = s_add(dP, s_ld(t->dout, t->tdo.stride, b, i, h, d, dt) * s_ld(t->v, t->tv.stride, b, j, hk, d, dt));
                        float dS = s_rd(P * (dP - Di), dt);
                        for (int64_t d = 0; d < D; d++) {
                            aq[d] = s_add(aq[d], dS * s_ld(t->k, t->tk.stride, b, j, hk, d, dt));
                            ak[j * D + d] = s_add(ak[j * D + d], dS * s_ld(t->q, t->tq.stride, b, i, h, d, dt));
                        }
                        for (int64_t d = 0; d < Dv; d++)
                            av[j * Dv + d] = s_add(av[j * Dv + d], P16 * s_ld(t->dout, t->tdo.stride, b, i, h, d, dt));
                    }
                    for (int64_t d = 0; d < D; d++)
                        dq[b * qst[0] + i * qst[1] + h * qst[2] + d * qst[3]] = s_enc(aq[d] * sc, dt);
                }
            for (int64_t j = 0; j < Sk; j++) {
                for (int64_t d = 0; d < D; d++) dk[b * kst[0] + j * kst[1] + hk * kst[2] + d * kst[3]] = s_enc(ak[j * D + d] * sc, dt);
                for (int64_t d = 0; d < Dv; d++) dv[b * vst[0] + j * vst[1] + hk * vst[2] + d * vst[3]] = s_enc(av[j * Dv + d], dt);
            }
        }
    free(aq); free(ak); free(av);
}

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

static void run_case(const char *name, fa_problem p, int layout, double qs, int mask, int Bc, int trunc,
                     int tight_slot) {
    t_prob t;
    t_setup(&t, p, layout, qs, 1.0, 1.0, mask);
    s_trunc = trunc;
    sim s = {&t, 1, Bc};
    /* the simulated kernel keeps gradual underflow: flushes_subnormals = 0 */
    fa_precision pr = {.u_acc = trunc ? 0x1p-23 : 0x1p-24, .exp_rel_err = 0x1p-22, .scores_fp32 = 1,
                       .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1,
                       .flushes_subnormals = 0};
    sim_fwd(&s, t.o, t.lse);
    fa_fwd_args a = t_fwd_args(&t);
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    orc_stats so, sl;
    CHECK(orc_compare_fwd(&r, &t.to, &t.tlse, &so, &sl, NULL) == FA_OK, "cmp");
    char buf[600];
    orc_stats_format(&so, "O", buf, sizeof buf);
    printf("[%s] %s\n", name, buf);
    orc_stats_format(&sl, "LSE", buf, sizeof buf);
    printf("[%s] %s\n", name, buf);
    CHECK(so.failed == 0 && sl.failed == 0, "%s: forward exceeded the bound", name);
    CHECK(so.checked > 0 && sl.checked > 0, "%s: nothing checked", name);

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
        CHECK(s3[k].failed == 0, "%s: %s exceeded the bound", name, nm[k]);
        CHECK(s3[k].checked > 0, "%s: %s nothing checked", name, nm[k]);
    }
    printf("[%s] backward input consistency: O %.3g LSE %.3g (<= 1: a correct forward)\n", name,
           br.o_input_ratio, br.lse_input_ratio);
    CHECK(br.o_input_ratio <= 1 && br.lse_input_ratio <= 1, "%s: simulated forward outside its bound", name);
    if (tight_slot >= 0) {
        g_median_rn[0] = so.median_ratio;
        g_median_rn[1] = s3[0].median_ratio;
        g_median_rn[2] = s3[1].median_ratio;
        g_median_rn[3] = s3[2].median_ratio;
        g_median_rn[4] = sl.median_ratio;
    }
    /* perturbations slightly beyond / inside the bound */
    cmp_ctx cc = {&r, &br, t.to, tq, tk, tv, 0};
    perturb_check(&r.o, t.o, t.to.stride, p.dtype, 0, &so, cmp_any, &cc, "O");
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

int main(void) {
    fa_problem p;
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
    printf("tightness (RN fp32 kernel, fp16): median err/bound O %.3g dQ %.3g dK %.3g dV %.3g LSE %.3g\n",
           g_median_rn[0], g_median_rn[1], g_median_rn[2], g_median_rn[3], g_median_rn[4]);
    for (int k = 0; k < 5; k++)
        CHECK(g_median_rn[k] > 1e-3, "bound too loose: median ratio %.3g <= 1e-3 (tensor %d)", g_median_rn[k], k);
    if (t_failures) { fprintf(stderr, "%d check(s) failed\n", t_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
