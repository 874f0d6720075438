/* api_test_ref.h: naive fp64 reference attention for the tests/api suite, with
 * per-element error bounds for the CPU backend's arithmetic.
 *
 * Arrays are fp64, logical contiguous: Q [B][Sq][Hq][Dqk], K [B][Sk][Hkv][Dqk],
 * V [B][Sk][Hkv][Dv], O/dO [B][Sq][Hq][Dv], LSE [B][Hq][Sq]. The reference
 * evaluates the contract's formulas directly (fp64, one query row at a time,
 * no tiling, no online softmax). Its own rounding error (~1e-15 relative) is
 * far below the bounds below and is ignored.
 *
 * ---------------------------------------------------------------------------
 * DERIVATION of the forward bound (CPU backend, kernels/cpu/cpu_fwd.c).
 * u = 2^-24 (fp32 RN), ue = 2^-23 (glibc expf, < 1 ulp), ud = 2^-11 (fp16) or
 * 2^-8 (bf16) (round to the dtype), gamma_n = n u / (1 - n u). For row i,
 * visible keys j (n_vis of them, in T tiles of 64):
 *  1. Score s_j = fl(fl(sum_d q_d k_jd) * scale) (+ mask, one more add).
 *     Products of fp16/bf16 values are exact in fp32; the sum of D terms has
 *     error <= gamma_D sum_d |q_d k_jd|; the scale adds u|scale q.k|, the mask
 *     add u|s_j|:   e_s = max_j [gamma_D |scale| sum|q k| + u|scale q.k| + u|s_j|].
 *  2. Each final probability p_j (relative to the final running max m_c) went
 *     through at most T+1 expf calls (its own and the rescale factors alpha)
 *     and T+1 fp32 subtractions of computed scores (each |.| <= 2W, W =
 *     max|s_j| + e_s, so error <= 2uW each); the scores of j and of the max
 *     are each off by <= e_s. Hence p_j = exp(s_j - m_c)(1 + eta_j),
 *         |eta_j| <= eta = exp(2 e_s + 2(T+1) u W) (1+ue)^(T+1) - 1.
 *  3. l = sum of unrounded p (at most 64 per tile, then alpha*l + row_sum per
 *     tile): relative error gamma_N, N = min(Sk,64) + 2T + 2. The accumulator
 *     sums rnd(p_j) v_j: rnd adds ud relative (or abs_p absolute below the
 *     dtype's normal range: 2^-25 fp16, 2^-134 bf16, plus 2^-149 for fp32
 *     underflow of expf), the sums gamma_N as for l (the product adds one u).
 *  4. O_c = fl(acc / l): with A_d = sum_j P_j |v_jd| >= |O_d| (P exact), the
 *     ratio of the perturbed sums differs from O_d by at most
 *         rel A_d + abs_p sum_j |v_jd|,   rel = 3 eta + ud + 3 gamma_N + u
 *     (numerator: eta + ud + gamma_N on A_d; denominator: (eta + gamma_N)/(1-.)
 *     on |O| <= A_d, counted twice for the 1/(1-x) expansion; u for the
 *     division), using l_c >= 1 (the max term contributes exp(0) = 1).
 *  5. Rounding to the dtype: ud |O_c| (relative) or 2^-25 (fp16 subnormal) /
 *     2^-134 (bf16) absolute.
 *  6. LSE_c = fl(m_c + logf(l_c)): m_c + log(l_c) = log sum_j exp(s_j + delta_j)
 *     (1 + eta_j)(1 + gamma) so it differs from LSE by <= x/(1-x), x = eta +
 *     gamma_N (eta already contains the score errors); logf adds < 1 ulp <=
 *     2u |log l_c|, |log l_c| <= |log l| + e_s + 2x; the final add u |LSE_c|.
 * Every bound is multiplied by 1.01 to cover the products of the first-order
 * terms above (all of them are < 2^-7, their products < 1% of the sum).
 *
 * DERIVATION of the backward bound (kernels/cpu/cpu_bwd.c), given the
 * backend's own forward O (error <= tolO) and LSE (error <= tolL):
 *  p_c = expf(fl(s_c - LSE_c)) = P (1 + eta_b),
 *      eta_b = exp(e_s + tolL + u(|s| + |LSE| + e_s + tolL)) (1 + ue) - 1.
 *  dP_c = fp32 dot of Dv exact products: e_dP = gamma_Dv sum_d |dO_d v_d|.
 *  D_c = fp32 dot of dO and the GIVEN O: e_D = gamma_Dv sum|dO|(|O|+tolO)
 *      + sum_d |dO_d| tolO_d.
 *  dS_c = fl(p_c fl(dP_c - D_c)), Qm = |dP - D| + e_dP + e_D:
 *      e_dS = P eta_b |dP - D| + P (1+eta_b)(e_dP + e_D) + 2u P (1+eta_b) Qm
 *             + 2^-149 Qm.
 *  dV_jd = fl sum over n = g*Sq (h,i) terms of rnd(p_c) dO_id:
 *      sum [P(eta_b + ud(1+eta_b)) + abs_p] |dO| + gamma_(n+1) sum P (1+eta_b+ud) |dO|.
 *  dQ_id = fl(scale fl(sum_j dS_c k_jd)) (n = Sk terms), dK_jd likewise over
 *      n = g*Sq terms with q_id:
 *      |scale| [sum e_dS |k| + gamma_(n+1) sum (|dS| + e_dS) |k|] + u |.|.
 *  Then the rounding to the dtype as in 5, and the factor 1.01.
 *
 * CONTRACT V3 terms (softcap, sinks; varlen and paging are checked bitwise against
 * per-sequence dense runs in cpu_v3_test.c, so they need no bound):
 *  S1. Softcap cap > 0: the backend computes u = fl(fl(q.k) fl(scale/cap)), t = tanhf(u),
 *      s = fl(cap t) (+ mask). With x = scale q.k / cap exact and c = fl(scale/cap):
 *        |u - x| <= e_x = |scale/cap| gamma_D sum|q k| (1+u)^2 + (2u + u^2) |x|
 *      tanh is 1-Lipschitz; glibc tanhf is within 2 ulp (libm-test-ulps, "tanh" float: 2),
 *      ulp(y) <= 2^-23 |y| for normal y and 2^-149 below:
 *        |t - tanh x| <= e_t = e_x + 2^-22 (|tanh x| + e_x) + 2^-148
 *        |s - cap tanh x| <= e_s = |cap| e_t + u |cap| (|tanh x| + e_t)   (+ u|s| for a mask)
 *      Backward: dS' = fl(dS fl(1 - fl(t t))); with f = 1 - tanh^2 x exact:
 *        e_sq = 2|tanh x| e_t + e_t^2 + u (|tanh x| + e_t)^2,  e_f = e_sq + u (f + e_sq)
 *        e_dS' = e_dS (f + e_f) + |dS| e_f + u (|dS| + e_dS)(f + e_f)
 *      and dS', e_dS' replace dS, e_dS in dQ, dK (dV does not see the cap).
 *  S2. Sinks: the sink is a term exp(sink - m) with an EXACT score and value 0 that enters
 *      the running state before the first tile: in the forward derivation it is one more
 *      key in one more tile (T + 1 rescales, N + 1 summands, W >= |sink|, l_c >= 1 still
 *      holds). A row with no visible key: O = 0 and LSE = sink + logf(1) = sink exactly.
 *      dsinks[h] = -sum_{b,i} fl(expf(fl(sink - LSE_c)) D_c) summed in fp32 (rows of one b
 *      in order, then over b): per term w = exp(sink - LSE), eta_w = exp(tl + u(|sink| +
 *      |LSE| + tl))(1 + ue) - 1, e_term = w eta_w |D| + w (1 + eta_w) e_D + u w (1 + eta_w)
 *      (|D| + e_D); the sum adds gamma_(n + B) sum |term| (n = B Sq terms).
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_API_TEST_REF_H
#define FLASHCHECK_API_TEST_REF_H

#include "tests/api/api_test_util.h"

#define REF_U 0x1p-24
#define REF_UE 0x1p-23

typedef struct {
    fa_problem p;
    double *q, *k, *v, *dout; /* inputs, logical contiguous */
    const tt_case *vis_case;  /* for tt_visible (problem + mask) */
    const float *sinks;       /* [Hq] when p.has_sinks (set by the caller after ref_from_case) */
} ref_in;

static TT_UNUSED double ref_gamma(double n) { return n * REF_U / (1.0 - n * REF_U); }
static TT_UNUSED double ref_ud(const fa_problem *p) { return p->dtype == FA_BF16 ? 0x1p-8 : 0x1p-11; }
static TT_UNUSED double ref_abs_p(const fa_problem *p) {
    return (p->dtype == FA_BF16 ? 0x1p-134 : 0x1p-25) + 0x1p-149;
}
static TT_UNUSED double ref_out_abs(const fa_problem *p) { return p->dtype == FA_BF16 ? 0x1p-134 : 0x1p-25; }

#define REF_Q(in, b, i, h, d) (in)->q[(((b) * (in)->p.seqlen_q + (i)) * (in)->p.heads_q + (h)) * (in)->p.head_dim_qk + (d)]
#define REF_K(in, b, j, h, d) (in)->k[(((b) * (in)->p.seqlen_k + (j)) * (in)->p.heads_kv + (h)) * (in)->p.head_dim_qk + (d)]
#define REF_V(in, b, j, h, d) (in)->v[(((b) * (in)->p.seqlen_k + (j)) * (in)->p.heads_kv + (h)) * (in)->p.head_dim_v + (d)]
#define REF_O_IDX(p, b, i, h, d) ((((b) * (p)->seqlen_q + (i)) * (p)->heads_q + (h)) * (p)->head_dim_v + (d))
#define REF_DQ_IDX(p, b, i, h, d) ((((b) * (p)->seqlen_q + (i)) * (p)->heads_q + (h)) * (p)->head_dim_qk + (d))
#define REF_DK_IDX(p, b, j, h, d) ((((b) * (p)->seqlen_k + (j)) * (p)->heads_kv + (h)) * (p)->head_dim_qk + (d))
#define REF_DV_IDX(p, b, j, h, d) ((((b) * (p)->seqlen_k + (j)) * (p)->heads_kv + (h)) * (p)->head_dim_v + (d))
#define REF_L_IDX(p, b, h, i) (((b) * (p)->heads_q + (h)) * (p)->seqlen_q + (i))

/* Copy a case's fp16/bf16 inputs into fp64 arrays (exact). */
static TT_UNUSED ref_in ref_from_case(const tt_case *c) {
    ref_in in;
    const fa_problem *p = &c->p;
    int bf16 = p->dtype == FA_BF16;
    in.p = *p;
    in.vis_case = c;
    in.sinks = NULL;
    in.q = malloc(sizeof(double) * (size_t)(p->batch * p->seqlen_q * p->heads_q * p->head_dim_qk + 1));
    in.k = malloc(sizeof(double) * (size_t)(p->batch * p->seqlen_k * p->heads_kv * p->head_dim_qk + 1));
    in.v = malloc(sizeof(double) * (size_t)(p->batch * p->seqlen_k * p->heads_kv * p->head_dim_v + 1));
    in.dout = malloc(sizeof(double) * (size_t)(p->batch * p->seqlen_q * p->heads_q * p->head_dim_v + 1));
    for (int64_t b = 0; b < p->batch; b++) {
        for (int64_t i = 0; i < p->seqlen_q; i++)
            for (int64_t h = 0; h < p->heads_q; h++) {
                for (int64_t d = 0; d < p->head_dim_qk; d++) REF_Q(&in, b, i, h, d) = tt_get(&c->q, b, i, h, d, bf16);
                for (int64_t d = 0; d < p->head_dim_v; d++)
                    in.dout[REF_O_IDX(p, b, i, h, d)] = tt_get(&c->dout, b, i, h, d, bf16);
            }
        for (int64_t j = 0; j < p->seqlen_k; j++)
            for (int64_t h = 0; h < p->heads_kv; h++) {
                for (int64_t d = 0; d < p->head_dim_qk; d++) REF_K(&in, b, j, h, d) = tt_get(&c->k, b, j, h, d, bf16);
                for (int64_t d = 0; d < p->head_dim_v; d++) REF_V(&in, b, j, h, d) = tt_get(&c->v, b, j, h, d, bf16);
            }
    }
    return in;
}
static TT_UNUSED void ref_free(ref_in *in) { free(in->q); free(in->k); free(in->v); free(in->dout); }

// ----------------------------------------------------------------------------
// forward: O, LSE and their bounds (any output pointer may be NULL)

typedef struct {
    double *o, *lse;        /* values */
    double *tol_o, *tol_lse;/* bounds on |backend - value| */
} ref_fwd_out;

/* Scores of row (b,h,i); returns the number of visible keys; s[j] = -inf when hidden.
 * t (may be NULL): tanh(scale q.k / cap) per key and e_t (its bound S1) when softcapped. */
static TT_UNUSED int64_t ref_row_t(const ref_in *in, int64_t b, int64_t h, int64_t i, double *s,
                                   double *e_s, double *W, int64_t *tiles, double *t, double *e_t) {
    const fa_problem *p = &in->p;
    const double scale = fa_effective_scale(p);
    const int64_t hk = h / (p->heads_q / p->heads_kv);
    const double D = (double)p->head_dim_qk;
    int64_t nvis = 0, first = -1, last = -1;
    double es = 0.0, w = 0.0;
    for (int64_t j = 0; j < p->seqlen_k; j++) {
        if (!tt_visible(in->vis_case, b, h, i, j)) { s[j] = -INFINITY; continue; }
        double dot = 0.0, dot_abs = 0.0;
        for (int64_t d = 0; d < p->head_dim_qk; d++) {
            dot += REF_Q(in, b, i, h, d) * REF_K(in, b, j, hk, d);
            dot_abs += fabs(REF_Q(in, b, i, h, d) * REF_K(in, b, j, hk, d));
        }
        double mask = tt_mask_at(in->vis_case, b, h, i, j);
        double e;
        if (p->softcap > 0.0f) { /* S1 */
            const double cap = p->softcap, x = scale * dot / cap, th = tanh(x);
            const double e_x = fabs(scale / cap) * ref_gamma(D) * dot_abs * (1 + REF_U) * (1 + REF_U) +
                               (2 * REF_U + REF_U * REF_U) * fabs(x);
            const double et = e_x + 0x1p-22 * (fabs(th) + e_x) + 0x1p-148;
            s[j] = cap * th + mask;
            e = cap * et + REF_U * cap * (fabs(th) + et) + (in->vis_case->mask ? REF_U * fabs(s[j]) : 0.0);
            if (t) { t[j] = th; e_t[j] = et; }
        } else {
            s[j] = scale * dot + mask;
            e = ref_gamma(D) * fabs(scale) * dot_abs + REF_U * fabs(scale * dot) +
                (in->vis_case->mask ? REF_U * fabs(s[j]) : 0.0);
        }
        if (e > es) es = e;
        if (fabs(s[j]) > w) w = fabs(s[j]);
        if (first < 0) first = j;
        last = j;
        nvis++;
    }
    *e_s = es;
    *W = w + es;
    *tiles = nvis ? last / 64 - first / 64 + 1 : 0;
    if (p->has_sinks) { /* S2: one more term (exact score) in one more "tile" */
        const double sk = in->sinks[h];
        if (fabs(sk) + es > *W) *W = fabs(sk) + es;
        *tiles += 1;
    }
    return nvis;
}
static TT_UNUSED int64_t ref_row(const ref_in *in, int64_t b, int64_t h, int64_t i, double *s,
                                 double *e_s, double *W, int64_t *tiles) {
    return ref_row_t(in, b, h, i, s, e_s, W, tiles, NULL, NULL);
}

static TT_UNUSED void ref_forward(const ref_in *in, ref_fwd_out out) {
    const fa_problem *p = &in->p;
    const int64_t g = p->heads_q / p->heads_kv;
    const double ud = ref_ud(p), abs_p = ref_abs_p(p), out_abs = ref_out_abs(p);
    double *s = malloc(sizeof(double) * (size_t)(p->seqlen_k + 1));
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < p->seqlen_q; i++) {
                double e_s, W;
                int64_t T;
                int64_t nvis = ref_row(in, b, h, i, s, &e_s, &W, &T);
                const int64_t li = REF_L_IDX(p, b, h, i);
                if (nvis == 0) {
                    for (int64_t d = 0; d < p->head_dim_v; d++) {
                        int64_t oi = REF_O_IDX(p, b, i, h, d);
                        if (out.o) out.o[oi] = 0.0;
                        if (out.tol_o) out.tol_o[oi] = 0.0;
                    }
                    if (out.lse) out.lse[li] = p->has_sinks ? (double)in->sinks[h] : -INFINITY;
                    if (out.tol_lse) out.tol_lse[li] = 0.0;
                    continue;
                }
                double m = -INFINITY, l = 0.0;
                for (int64_t j = 0; j < p->seqlen_k; j++) if (s[j] > m) m = s[j];
                if (p->has_sinks && in->sinks[h] > m) m = in->sinks[h];
                for (int64_t j = 0; j < p->seqlen_k; j++) if (s[j] != -INFINITY) l += exp(s[j] - m);
                if (p->has_sinks) l += exp((double)in->sinks[h] - m);
                const double eta = exp(2 * e_s + 2 * (T + 1) * REF_U * W) * pow(1 + REF_UE, (double)(T + 1)) - 1;
                const double N = (double)(p->seqlen_k < 64 ? p->seqlen_k : 64) + 2 * T + 2 + (p->has_sinks ? 1 : 0);
                const double gam = ref_gamma(N);
                const double rel = 3 * eta + ud + 3 * gam + REF_U;
                for (int64_t d = 0; d < p->head_dim_v; d++) {
                    double o = 0.0, A = 0.0, vabs = 0.0;
                    for (int64_t j = 0; j < p->seqlen_k; j++) {
                        if (s[j] == -INFINITY) continue;
                        double P = exp(s[j] - m) / l, vv = REF_V(in, b, j, h / g, d);
                        o += P * vv;
                        A += P * fabs(vv);
                        vabs += fabs(vv);
                    }
                    int64_t oi = REF_O_IDX(p, b, i, h, d);
                    if (out.o) out.o[oi] = o;
                    double err = rel * A + abs_p * vabs;
                    if (out.tol_o) out.tol_o[oi] = 1.01 * (err + ud * (fabs(o) + err) + out_abs);
                }
                const double lse = m + log(l);
                if (out.lse) out.lse[li] = lse;
                const double x = eta + gam;
                if (out.tol_lse)
                    out.tol_lse[li] = 1.01 * (x / (1 - x) + 2 * REF_U * (fabs(log(l)) + e_s + 2 * x) +
                                              REF_U * (fabs(lse) + 2 * e_s + 2 * x));
            }
    free(s);
}

/* The scalar loss sum_{b,i,h,d} dO * O of the fp64 forward (for finite differences). */
static TT_UNUSED double ref_loss(const ref_in *in, double *o_scratch) {
    ref_fwd_out out = {o_scratch, NULL, NULL, NULL};
    ref_forward(in, out);
    const fa_problem *p = &in->p;
    double L = 0.0;
    int64_t n = p->batch * p->seqlen_q * p->heads_q * p->head_dim_v;
    for (int64_t x = 0; x < n; x++) L += in->dout[x] * o_scratch[x];
    return L;
}

// ----------------------------------------------------------------------------
// backward: analytic fp64 gradients and the backend's bounds
//
// o_given / tol_o / tol_lse describe the O and LSE the backend is handed (its
// own forward's); NULL tol_* means exact inputs.

typedef struct {
    double *dq, *dk, *dv;
    double *tol_dq, *tol_dk, *tol_dv;
    double *dsinks, *tol_dsinks; /* [Hq], when p.has_sinks (may be NULL) */
} ref_bwd_out;

static TT_UNUSED void ref_backward(const ref_in *in, const double *o_exact, const double *tol_o,
                                   const double *tol_lse, ref_bwd_out out) {
    const fa_problem *p = &in->p;
    const int64_t g = p->heads_q / p->heads_kv, Sk = p->seqlen_k;
    const double scale = fa_effective_scale(p), ud = ref_ud(p), abs_p = ref_abs_p(p);
    const double out_abs = ref_out_abs(p);
    const int64_t nq = p->batch * p->seqlen_q * p->heads_q * p->head_dim_qk;
    const int64_t nk = p->batch * p->seqlen_k * p->heads_kv * p->head_dim_qk;
    const int64_t nv = p->batch * p->seqlen_k * p->heads_kv * p->head_dim_v;
    /* accumulate |.| sums for the bounds in the tol arrays, then finish */
    double *dq_e = calloc((size_t)nq + 1, sizeof(double)), *dq_a = calloc((size_t)nq + 1, sizeof(double));
    double *dk_e = calloc((size_t)nk + 1, sizeof(double)), *dk_a = calloc((size_t)nk + 1, sizeof(double));
    double *dv_e = calloc((size_t)nv + 1, sizeof(double)), *dv_a = calloc((size_t)nv + 1, sizeof(double));
    memset(out.dq, 0, sizeof(double) * (size_t)nq);
    memset(out.dk, 0, sizeof(double) * (size_t)nk);
    memset(out.dv, 0, sizeof(double) * (size_t)nv);
    double *s = malloc(sizeof(double) * (size_t)(Sk + 1));
    double *th = malloc(sizeof(double) * (size_t)(Sk + 1)), *e_th = malloc(sizeof(double) * (size_t)(Sk + 1));
    double *ds_sum = calloc((size_t)p->heads_q + 1, sizeof(double)), *ds_abs = calloc((size_t)p->heads_q + 1, sizeof(double));
    double *ds_e = calloc((size_t)p->heads_q + 1, sizeof(double));
    const double gDv = ref_gamma((double)p->head_dim_v);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++) {
            const int64_t hk = h / g;
            for (int64_t i = 0; i < p->seqlen_q; i++) {
                double e_s, W;
                int64_t T;
                if (ref_row_t(in, b, h, i, s, &e_s, &W, &T, th, e_th) == 0) continue;
                double m = -INFINITY, l = 0.0;
                for (int64_t j = 0; j < Sk; j++) if (s[j] > m) m = s[j];
                if (p->has_sinks && in->sinks[h] > m) m = in->sinks[h];
                for (int64_t j = 0; j < Sk; j++) if (s[j] != -INFINITY) l += exp(s[j] - m);
                if (p->has_sinks) l += exp((double)in->sinks[h] - m);
                const double lse = m + log(l);
                const double tl = tol_lse ? tol_lse[REF_L_IDX(p, b, h, i)] : 0.0;
                double D = 0.0, e_D = 0.0;
                for (int64_t d = 0; d < p->head_dim_v; d++) {
                    const int64_t oi = REF_O_IDX(p, b, i, h, d);
                    const double to = tol_o ? tol_o[oi] : 0.0;
                    D += in->dout[oi] * o_exact[oi];
                    e_D += gDv * fabs(in->dout[oi]) * (fabs(o_exact[oi]) + to) + fabs(in->dout[oi]) * to;
                }
                if (p->has_sinks) { /* S2: this row's dsinks term */
                    const double sk = in->sinks[h], w = exp(sk - lse);
                    const double eta_w = exp(tl + REF_U * (fabs(sk) + fabs(lse) + tl)) * (1 + REF_UE) - 1;
                    ds_sum[h] -= w * D;
                    ds_e[h] += w * eta_w * fabs(D) + w * (1 + eta_w) * e_D +
                               REF_U * w * (1 + eta_w) * (fabs(D) + e_D);
                    ds_abs[h] += w * (1 + eta_w) * (fabs(D) + e_D) * (1 + REF_U);
                }
                for (int64_t j = 0; j < Sk; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double P = exp(s[j] - lse);
                    double dP = 0.0, e_dP = 0.0;
                    for (int64_t d = 0; d < p->head_dim_v; d++) {
                        const double t = in->dout[REF_O_IDX(p, b, i, h, d)] * REF_V(in, b, j, hk, d);
                        dP += t;
                        e_dP += gDv * fabs(t);
                    }
                    double dS = P * (dP - D);
                    const double eta_b = exp(e_s + tl + REF_U * (fabs(s[j]) + fabs(lse) + e_s + tl)) * (1 + REF_UE) - 1;
                    const double Qm = fabs(dP - D) + e_dP + e_D;
                    double e_dS = P * eta_b * fabs(dP - D) + P * (1 + eta_b) * (e_dP + e_D) +
                                  2 * REF_U * P * (1 + eta_b) * Qm + 0x1p-149 * Qm;
                    if (p->softcap > 0.0f) { /* S1: chain rule through the cap */
                        const double tj = fabs(th[j]), et = e_th[j], f = 1.0 - th[j] * th[j];
                        const double e_sq = 2 * tj * et + et * et + REF_U * (tj + et) * (tj + et);
                        const double e_f = e_sq + REF_U * (f + e_sq);
                        e_dS = e_dS * (f + e_f) + fabs(dS) * e_f + REF_U * (fabs(dS) + e_dS) * (f + e_f);
                        dS *= f;
                    }
                    for (int64_t d = 0; d < p->head_dim_v; d++) {
                        const int64_t vi = REF_DV_IDX(p, b, j, hk, d);
                        const double go = in->dout[REF_O_IDX(p, b, i, h, d)];
                        out.dv[vi] += P * go;
                        dv_e[vi] += (P * (eta_b + ud * (1 + eta_b)) + abs_p) * fabs(go);
                        dv_a[vi] += P * (1 + eta_b + ud) * fabs(go);
                    }
                    for (int64_t d = 0; d < p->head_dim_qk; d++) {
                        const int64_t qi = REF_DQ_IDX(p, b, i, h, d), ki = REF_DK_IDX(p, b, j, hk, d);
                        const double kv = REF_K(in, b, j, hk, d), qv = REF_Q(in, b, i, h, d);
                        out.dq[qi] += scale * dS * kv;
                        dq_e[qi] += e_dS * fabs(kv);
                        dq_a[qi] += (fabs(dS) + e_dS) * fabs(kv);
                        out.dk[ki] += scale * dS * qv;
                        dk_e[ki] += e_dS * fabs(qv);
                        dk_a[ki] += (fabs(dS) + e_dS) * fabs(qv);
                    }
                }
            }
        }
    const double g_q = ref_gamma((double)Sk + 1), g_k = ref_gamma((double)(g * p->seqlen_q) + 1);
    for (int64_t x = 0; x < nq; x++) {
        double err = fabs(scale) * (dq_e[x] + g_q * dq_a[x]) + REF_U * (fabs(out.dq[x]) + fabs(scale) * dq_e[x]);
        out.tol_dq[x] = 1.01 * (err + ud * (fabs(out.dq[x]) + err) + out_abs);
    }
    for (int64_t x = 0; x < nk; x++) {
        double err = fabs(scale) * (dk_e[x] + g_k * dk_a[x]) + REF_U * (fabs(out.dk[x]) + fabs(scale) * dk_e[x]);
        out.tol_dk[x] = 1.01 * (err + ud * (fabs(out.dk[x]) + err) + out_abs);
    }
    for (int64_t x = 0; x < nv; x++) {
        double err = dv_e[x] + g_k * dv_a[x];
        out.tol_dv[x] = 1.01 * (err + ud * (fabs(out.dv[x]) + err) + out_abs);
    }
    if (p->has_sinks && out.dsinks) {
        const double g_s = ref_gamma((double)(p->batch * p->seqlen_q + p->batch));
        for (int64_t h = 0; h < p->heads_q; h++) {
            out.dsinks[h] = ds_sum[h];
            out.tol_dsinks[h] = 1.01 * (ds_e[h] + g_s * ds_abs[h]);
        }
    }
    free(s); free(dq_e); free(dq_a); free(dk_e); free(dk_a); free(dv_e); free(dv_a);
    free(th); free(e_th); free(ds_sum); free(ds_abs); free(ds_e);
}
#endif /* FLASHCHECK_API_TEST_REF_H */
