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

/* What the simulated kernel does (its profile must say the same, or the test
 * expects a failure): accumulation (IEEE adds, truncating or RN, or tensor-core
 * multi-term steps), the backward's scale placement, dP rounding, D source and
 * GQA reduction (BOUNDS.md section 10). */
typedef struct {
    int trunc;            /* IEEE adds: 1 round toward zero (u = 2^-23), 0 RN */
    int tc_t, tc_e;       /* tensor-core steps of tc_t products (0: IEEE adds), tc_e extra bits */
    int tc_align_rn, tc_norm_rn;
    int fold;             /* dS' = rd(scale P (dP - D)), no scale after the products */
    int dp_rnd;           /* dP rounded to the dtype */
    int d_from_p;         /* D = sum_j P16 dP */
    int gqa;              /* fa_gqa_reduce */
    int exp_bias;         /* exp biased by 2^-23 (1) or correctly rounded (0) */
    int split;            /* unfused fp32 graph: natural exp, scores (q sf).(k sf) with a float
                             sf = sqrt(scale), dQ = (dS . k sf) sf (scores_fp32 = 2) */
    int p_keep, ds_keep;  /* P, dS not rounded to the dtype */
} s_opts;
static s_opts so;

/* acc + x with the kernel's IEEE accumulation rounding */
static float s_add(float acc, float x) {
    double e = (double)acc + (double)x;
    float f = (float)e;
    if (so.trunc && fabs((double)f) > fabs(e)) f = nextafterf(f, 0.0f);
    return f;
}
static float s_mul(float a, float x) { return a * x; } /* RN fp32 */

/* one tensor-core step: c plus k exact products (doubles), aligned to the largest
 * exponent, each aligned term kept to 24 + tc_e bits (truncated or RN), the exact sum
 * normalised to fp32 (truncated or RN): the model of BOUNDS.md 10.2 */
static float s_tc_step(float c, const double *p, int k) {
    double mx = fabs((double)c);
    for (int i = 0; i < k; i++) if (fabs(p[i]) > mx) mx = fabs(p[i]);
    if (mx == 0) return 0.0f;
    int ex;
    frexp(mx, &ex);
    double grid = ldexp(1.0, ex - 1 - 23 - so.tc_e), sum = 0;
    for (int i = -1; i < k; i++) {
        double x = i < 0 ? (double)c : p[i], q = x / grid;
        q = so.tc_align_rn ? nearbyint(q) : trunc(q);
        sum += q * grid; /* exact: <= 2^(25 + tc_e + log2(k+1)) grid units */
    }
    float f = (float)sum;
    if (!so.tc_norm_rn && fabs((double)f) > fabs(sum)) f = nextafterf(f, 0.0f);
    return f;
}

/* c + sum of n exact products p[0..n) with the kernel's accumulation */
static float s_acc(float c, const double *p, int64_t n) {
    if (so.tc_t <= 0) {
        for (int64_t i = 0; i < n; i++) c = s_add(c, (float)p[i]); /* products exact in fp32 */
        return c;
    }
    for (int64_t i = 0; i < n; i += so.tc_t) c = s_tc_step(c, p + i, (int)(n - i < so.tc_t ? n - i : so.tc_t));
    return c;
}

/* 2^x with a one-sided relative bias: declared exp_rel_err = 2^-22 covers it */
static float s_exp2(float x) {
    float f = so.split ? (float)exp((double)x) : (float)exp2((double)x);
    return so.exp_bias ? f * (1.0f - 0x1p-23f) : f;
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

static int s_seen(const t_prob *t, int64_t b, int64_t h, int64_t i, int64_t j) {
    return s_vis(&t->p, i, j) && s_mask(t, b, h, i, j) != -INFINITY;
}

/* log2-domain score of (i, j): (scale*log2e) * (q.k) + mask*log2e, all fp32 */
static float s_score(const sim *s, int64_t b, int64_t h, int64_t i, int64_t j, float sl2) {
    const t_prob *t = s->t;
    const fa_problem *p = &t->p;
    int64_t hk = h / (p->heads_q / p->heads_kv);
    double pr[512];
    for (int64_t d = 0; d < p->head_dim_qk; d++)
        pr[d] = (double)s_ld(t->q, t->tq.stride, b, i, h, d, p->dtype) * s_ld(t->k, t->tk.stride, b, j, hk, d, p->dtype);
    if (so.split) { /* q' = fl(q sf), k' = fl(k sf), s = fl(q'.k') + m: natural-log domain */
        float sf = (float)sqrt((double)sl2);
        for (int64_t d = 0; d < p->head_dim_qk; d++)
            pr[d] = (double)s_mul(s_ld(t->q, t->tq.stride, b, i, h, d, p->dtype), sf) *
                    s_mul(s_ld(t->k, t->tk.stride, b, j, hk, d, p->dtype), sf);
        return s_acc(0.0f, pr, p->head_dim_qk) + s_mask(t, b, h, i, j);
    }
    float acc = s_acc(0.0f, pr, p->head_dim_qk);
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
    float sl2 = so.split ? s_scale(p) : s_mul(s_scale(p), 1.44269504f);
    float *acc = malloc((size_t)Dv * sizeof(float)), *sc = malloc((size_t)s->Bc * sizeof(float));
    double *pv = malloc((size_t)s->Bc * sizeof(double));
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
                        if (!s_seen(t, b, h, i, j)) continue;
                        sc[u] = s_score(s, b, h, i, j, sl2);
                        if (sc[u] > mt) mt = sc[u];
                    }
                    if (mt == -INFINITY) continue; /* nothing visible yet */
                    float alpha = m == -INFINITY ? 0.0f : s_exp2(m - mt);
                    l = s_mul(l, alpha);
                    for (int64_t d = 0; d < Dv; d++) acc[d] = s_mul(acc[d], alpha);
                    m = mt;
                    for (int64_t u = 0; u < jn; u++) {
                        if (sc[u] == -INFINITY) { sc[u] = 0; continue; } /* P = 0: a zero product */
                        float pr = s_exp2(sc[u] - m);
                        l = s_add(l, pr);
                        sc[u] = so.p_keep ? pr : s_rd(pr, p->dtype);
                    }
                    for (int64_t d = 0; d < Dv; d++) {
                        for (int64_t u = 0; u < jn; u++)
                            pv[u] = sc[u] == 0 ? 0.0 : (double)sc[u] * s_ld(t->v, t->tv.stride, b, j0 + u, hk, d, p->dtype);
                        acc[d] = s_acc(acc[d], pv, jn);
                    }
                }
                const int64_t *os = t->to.stride;
                for (int64_t d = 0; d < Dv; d++)
                    o[b * os[0] + i * os[1] + h * os[2] + d * os[3]] = s_enc(l > 0 ? acc[d] / l : 0.0f, p->dtype);
                lse[b * t->tlse.stride[0] + h * t->tlse.stride[1] + i * t->tlse.stride[2]] =
                    l > 0 ? (so.split ? m + logf(l) : (m + log2f(l)) * 0.693147182f) : -INFINITY;
            }
        }
    free(acc);
    free(sc);
    free(pv);
}

/* backward (FA2 style, matrix form per kv group): P from the given LSE, P rounded;
 * dP (rounded if dp_rnd); D = dO.O, or sum_j P16 dP (d_from_p); dS = P16 (dP - D)
 * (times scale if fold) rounded; fp32 accumulations in (row, key) order; outputs
 * rounded; GQA reduced as so.gqa says */
static void sim_bwd(const sim *s, uint16_t *dq, uint16_t *dk, uint16_t *dv, const int64_t qst[4],
                    const int64_t kst[4], const int64_t vst[4]) {
    const t_prob *t = s->t;
    const fa_problem *p = &t->p;
    int64_t D = p->head_dim_qk, Dv = p->head_dim_v, G = p->heads_q / p->heads_kv, Sk = p->seqlen_k, Sq = p->seqlen_q;
    float sc = s_scale(p), sl2 = so.split ? sc : s_mul(sc, 1.44269504f);
    float sf = (float)sqrt((double)sc); /* split: the scale as sqrt(scale) on K (Q) and after */
    fa_dtype dt = p->dtype;
    size_t nij = (size_t)(G * Sq * Sk) + 1;
    float *P16 = calloc(nij, sizeof(float)), *dS = calloc(nij, sizeof(float));
    size_t nrow = (size_t)(G * Sq > Sk ? G * Sq : Sk) + 1;
    double *pr = malloc(nrow * sizeof(double) * 2);
    double *prd = malloc((size_t)(D > Dv ? D : Dv) * sizeof(double) + 8);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t hk = 0; hk < p->heads_kv; hk++) {
            /* P16, dS for the group's heads */
            for (int64_t g = 0; g < G; g++) {
                int64_t h = hk * G + g;
                for (int64_t i = 0; i < Sq; i++) {
                    float lse = t->lse[b * t->tlse.stride[0] + h * t->tlse.stride[1] + i * t->tlse.stride[2]];
                    float *Pr = P16 + (size_t)((g * Sq + i) * Sk), *dSr = dS + (size_t)((g * Sq + i) * Sk);
                    float *dPr = dSr; /* dP parked in the dS row until D is known */
                    for (int64_t j = 0; j < Sk; j++) {
                        Pr[j] = 0; dSr[j] = 0;
                        if (!s_seen(t, b, h, i, j)) continue;
                        float P = s_exp2(s_score(s, b, h, i, j, sl2) - (so.split ? lse : s_mul(lse, 1.44269504f)));
                        Pr[j] = so.p_keep ? P : s_rd(P, dt);
                        for (int64_t d = 0; d < Dv; d++)
                            prd[d] = (double)s_ld(t->dout, t->tdo.stride, b, i, h, d, dt) * s_ld(t->v, t->tv.stride, b, j, hk, d, dt);
                        float dP = s_acc(0.0f, prd, Dv);
                        dPr[j] = so.dp_rnd ? s_rd(dP, dt) : dP;
                    }
                    float Di;
                    if (so.d_from_p) {
                        int64_t n = 0;
                        for (int64_t j = 0; j < Sk; j++) if (Pr[j] != 0) pr[n++] = (double)Pr[j] * dPr[j];
                        Di = s_acc(0.0f, pr, n);
                    } else {
                        for (int64_t d = 0; d < Dv; d++)
                            prd[d] = (double)s_ld(t->dout, t->tdo.stride, b, i, h, d, dt) * s_ld(t->o, t->to.stride, b, i, h, d, dt);
                        Di = s_acc(0.0f, prd, Dv);
                    }
                    for (int64_t j = 0; j < Sk; j++) {
                        if (!s_seen(t, b, h, i, j)) continue;
                        float x = Pr[j] * (dPr[j] - Di);
                        x = so.fold ? x * sc : x;
                        dSr[j] = so.ds_keep ? x : s_rd(x, dt);
                    }
                }
            }
            float post = so.fold ? 1.0f : so.split ? sf : sc;
            /* dQ rows: sum over keys */
            for (int64_t g = 0; g < G; g++)
                for (int64_t i = 0; i < Sq; i++)
                    for (int64_t d = 0; d < D; d++) {
                        const float *dSr = dS + (size_t)((g * Sq + i) * Sk);
                        for (int64_t j = 0; j < Sk; j++) {
                            float kk = s_ld(t->k, t->tk.stride, b, j, hk, d, dt);
                            pr[j] = (double)dSr[j] * (so.split ? s_mul(kk, sf) : kk);
                        }
                        float a = s_acc(0.0f, pr, Sk);
                        dq[b * qst[0] + i * qst[1] + (hk * G + g) * qst[2] + d * qst[3]] = s_enc(a * post, dt);
                    }
            /* dK, dV columns: per head (then reduced as so.gqa says) or over the whole group */
            for (int64_t j = 0; j < Sk; j++) {
                for (int64_t d = 0; d < D + Dv; d++) {
                    int isv = d >= D;
                    int64_t dd = isv ? d - D : d;
                    float parts[64];
                    int64_t n = 0;
                    float a = 0;
                    for (int64_t g = 0; g < G; g++) {
                        int64_t h = hk * G + g;
                        for (int64_t i = 0; i < Sq; i++) {
                            size_t e = (size_t)((g * Sq + i) * Sk + j);
                            pr[n++] = isv ? (double)P16[e] * s_ld(t->dout, t->tdo.stride, b, i, h, dd, dt)
                                          : (double)dS[e] * (so.split ? s_mul(s_ld(t->q, t->tq.stride, b, i, h, dd, dt), sf)
                                                                      : s_ld(t->q, t->tq.stride, b, i, h, dd, dt));
                        }
                        if (so.gqa != FA_GQA_FUSED) { /* this head's part, stored in the dtype */
                            float part = s_acc(0.0f, pr, n);
                            parts[g] = s_rd(isv ? part : part * post, dt);
                            n = 0;
                        }
                    }
                    if (so.gqa == FA_GQA_FUSED) {
                        a = s_acc(0.0f, pr, n);
                        if (!isv) a *= post;
                    } else {
                        for (int64_t g = 0; g < G; g++)
                            a = so.gqa == FA_GQA_ROUND_SUM16 ? s_rd(a + parts[g], dt) : a + parts[g]; /* fp32 RN */
                    }
                    if (isv) dv[b * vst[0] + j * vst[1] + hk * vst[2] + dd * vst[3]] = s_enc(a, dt);
                    else dk[b * kst[0] + j * kst[1] + hk * kst[2] + dd * kst[3]] = s_enc(a, dt);
                }
            }
        }
    free(P16); free(dS); free(pr); free(prd);
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
