/* sim_kernel.h: a simulated flash-attention kernel written for the oracle tests (not the
 * oracle's code, not a backend's): fp32 forward with online softmax over key tiles and an
 * FA2-style backward, every setting of BOUNDS.md section 10 selectable (s_opts): IEEE adds
 * (RN or truncating) or tensor-core multi-term steps, exp bias, P/dS rounding, the scale
 * folded into dS, dP rounding, D from P, GQA reduction, the unfused fp32 graph of PyTorch's
 * math backend. Header-only (static), shared by test_bound_soundness.c and tight_bench.c. */
#ifndef FLASHCHECK_ORACLE_SIM_KERNEL_H
#define FLASHCHECK_ORACLE_SIM_KERNEL_H

#include "oracle/tests/tutil.h"


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
    return t_dec(p[b * st[0] + s * st[1] + h * st[2] + d * st[3]], dt);
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
                        sc[u] = so.p_keep ? pr : t_rd(pr, p->dtype);
                    }
                    for (int64_t d = 0; d < Dv; d++) {
                        for (int64_t u = 0; u < jn; u++)
                            pv[u] = sc[u] == 0 ? 0.0 : (double)sc[u] * s_ld(t->v, t->tv.stride, b, j0 + u, hk, d, p->dtype);
                        acc[d] = s_acc(acc[d], pv, jn);
                    }
                }
                const int64_t *os = t->to.stride;
                for (int64_t d = 0; d < Dv; d++)
                    o[b * os[0] + i * os[1] + h * os[2] + d * os[3]] = t_enc(l > 0 ? acc[d] / l : 0.0f, p->dtype);
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
                        Pr[j] = so.p_keep ? P : t_rd(P, dt);
                        for (int64_t d = 0; d < Dv; d++)
                            prd[d] = (double)s_ld(t->dout, t->tdo.stride, b, i, h, d, dt) * s_ld(t->v, t->tv.stride, b, j, hk, d, dt);
                        float dP = s_acc(0.0f, prd, Dv);
                        dPr[j] = so.dp_rnd ? t_rd(dP, dt) : dP;
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
                        dSr[j] = so.ds_keep ? x : t_rd(x, dt);
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
                        dq[b * qst[0] + i * qst[1] + (hk * G + g) * qst[2] + d * qst[3]] = t_enc(a * post, dt);
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
                            parts[g] = t_rd(isv ? part : part * post, dt);
                            n = 0;
                        }
                    }
                    if (so.gqa == FA_GQA_FUSED) {
                        a = s_acc(0.0f, pr, n);
                        if (!isv) a *= post;
                    } else {
                        for (int64_t g = 0; g < G; g++)
                            a = so.gqa == FA_GQA_ROUND_SUM16 ? t_rd(a + parts[g], dt) : a + parts[g]; /* fp32 RN */
                    }
                    if (isv) dv[b * vst[0] + j * vst[1] + hk * vst[2] + dd * vst[3]] = t_enc(a, dt);
                    else dk[b * kst[0] + j * kst[1] + hk * kst[2] + dd * kst[3]] = t_enc(a, dt);
                }
            }
        }
    free(P16); free(dS); free(pr); free(prd);
}


#endif /* FLASHCHECK_ORACLE_SIM_KERNEL_H */
