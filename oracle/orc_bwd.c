/* orc_bwd.c: certified double-precision backward reference (dQ, dK, dV) with
 * per-element kernel bounds and oracle error bounds. BOUNDS.md section 5.
 *
 * The reference is the exact gradient at the given inputs: P and D_i = dO_i.O_i
 * use the exact forward (recomputed here), not the O and LSE handed in. A
 * kernel uses the given O and LSE, so their measured deviation from the exact
 * forward enters the bound; o_input_ratio / lse_input_ratio report it. With
 * opt->lse_unknown the LSE the kernel used is any within the forward bound (5.0).
 *
 * Layout per kv-head group (b, hk): for every query head of the group, rows are
 * processed in chunks. Phase A (parallel over row tiles) recomputes the forward
 * row, P, dP, dS and the per-(i,j) error weights, and finishes dQ rows. Phase B
 * (parallel over key columns) accumulates dK and dV of the chunk. */
#include <string.h>

#include "oracle/orc_internal.h"
#include "oracle/orc_mpfr.h"
#include "oracle/orc_simd.h"

#define RT 16
#define NMAT 10   /* per-(i,j) matrices of a chunk */

// ----------------------------------------------------------------------------
// one kv head in double, in the layouts the loops need

typedef struct {
    double *kp8;   /* K, P8 layout: score dots */
    double *vp8;   /* V, P8 layout: dP = dO.V dots */
    double *kp64;  /* K, P64 layout: dQ = sum dS K */
    double *vp64;  /* V, P64 layout: O = sum P V */
    double k1max, v1max; /* max_j sum_d |k_jd|, |v_jd| over finite rows (underflow floors) */
    double kmax;   /* max |k_jd| over finite rows (overflow of the dQ accumulator, section 11) */
} bkv;

static int bkv_load(const orc_ctx *c, int64_t b, int64_t hk, bkv *kv, int nth) {
    kv->kp8 = calloc(orc_p8_size(c->Sk, c->D) + 1, sizeof(double));
    kv->vp8 = calloc(orc_p8_size(c->Sk, c->Dv) + 1, sizeof(double));
    kv->kp64 = calloc(orc_p64_size(c->Sk, c->D) + 1, sizeof(double));
    kv->vp64 = calloc(orc_p64_size(c->Sk, c->Dv) + 1, sizeof(double));
    if (!kv->kp8 || !kv->vp8 || !kv->kp64 || !kv->vp64) return 0;
    double k1max = 0, v1max = 0, kmax = 0;
#pragma omp parallel for schedule(static) num_threads(nth) reduction(max : k1max, v1max, kmax)
    for (int64_t j = 0; j < c->Sk; j++) {
        double k1 = 0, v1 = 0, km = 0;
        for (int64_t d = 0; d < c->D; d++) {
            double x = orc_ld(c->k, c->ks, b, j, hk, d, c->dt);
            kv->kp8[orc_p8_at(j, d, c->D)] = x;
            kv->kp64[orc_p64_at(j, d, c->D)] = x;
            k1 += fabs(x);
            if (fabs(x) > km) km = fabs(x);
        }
        for (int64_t d = 0; d < c->Dv; d++) {
            double x = orc_ld(c->v, c->vs, b, j, hk, d, c->dt);
            kv->vp8[orc_p8_at(j, d, c->Dv)] = x;
            kv->vp64[orc_p64_at(j, d, c->Dv)] = x;
            v1 += fabs(x);
        }
        /* a non-finite key/value row makes every (i, j) that sees it NaN/Inf: skip it */
        if (isfinite(k1) && k1 > k1max) k1max = k1;
        if (isfinite(v1) && v1 > v1max) v1max = v1;
        if (isfinite(km) && km > kmax) kmax = km;
    }
    kv->kmax = kmax;
    kv->k1max = k1max * (1 + 0x1p-40); /* D-term sums in double: gamma_D(2^-53) < 2^-40 */
    kv->v1max = v1max * (1 + 0x1p-40);
    return 1;
}

static void bkv_free(bkv *kv) {
    free(kv->kp8); free(kv->vp8); free(kv->kp64); free(kv->vp64);
    memset(kv, 0, sizeof *kv);
}

// ----------------------------------------------------------------------------
// shared state of one group

typedef struct {
    const orc_ctx *c;
    const orc_model *mk, *mo;
    const orc_options *opt;
    orc_bwd_result *res;
    const bkv *kv;
    int64_t b, hk, h;          /* current query head */
    int base;
    /* chunk */
    const int64_t *rows;       /* query indices of the chunk */
    const int64_t *dq_slot;    /* per chunk row: dq block vector or -1 */
    int64_t nrows, Sk;
    uint8_t *vis;              /* [nrows * Sk] */
    double *mat[NMAT];         /* [nrows * Sk] each, see M_* */
    uint8_t *row_bad;          /* [nrows]: row cannot be bounded (input inconsistent) */
    uint8_t *ovf;              /* [nrows * Sk]: an intermediate of (i, j) may overflow (section 11) */
    /* dsinks (BOUNDS.md 14.4), per chunk row: the term exp(sink - lse) D_i (value), bounds on
     * its kernel error and oracle error, on |kernel term|, flags (1 uncheckable, 2 NaN) */
    int sinks;
    double *skv, *ske, *sko, *ska;
    uint8_t *skf;
    /* results of phase A */
    double o_ratio, lse_ratio;
    int64_t esc;
} bgroup;

enum { M_P, M_DS, M_DSE, M_DSM, M_DSEO, M_PPI, M_P1, M_PPIO, M_P16, M_DS16 };

// ----------------------------------------------------------------------------
// phase A: one tile of <= RT rows of the chunk

/* The kernel's dS error bound of one (i, j) (BOUNDS.md 5.3): orc_fm_dse_kernel (orc_formulas.h). */
#define dse_kernel orc_fm_dse_kernel

/* Score errors of key j of a row (oracle Eo, kernel Ek): section 2 (ce A + cm |m|, the
 * kernel's with the row's underflow floor efl), or with softcap section 14.1 from the raw
 * dot S (x = scale S). */
static void key_err(const orc_ctx *c, const orc_model *mk, const orc_model *mo, double ce_o, double cm_o,
                    double ce_k, double cm_k, double A, double am, double efl, double S, double *Eo, double *Ek) {
    if (!(c->softcap > 0)) {
        *Eo = ce_o * A + cm_o * am;
        *Ek = ce_k * A + cm_k * am + efl;
        return;
    }
    double cap = c->softcap, x = c->scale * S, sca = fabs(cap * tanh(x / cap));
    double Dto = orc_fm_tanh_dev(ce_o * A, x, cap, mo->u_s), Dtk = orc_fm_tanh_dev(ce_k * A + efl, x, cap, mk->u_s);
    *Eo = orc_fm_cap_score_err(orc_fm_cap_err(Dto, sca, cap, mo->u_s, mo->u_t, mo->tau_t), sca, am, mo->u_s);
    *Ek = orc_fm_cap_score_err(orc_fm_cap_err(Dtk, sca, cap, mk->u_s, mk->u_t, mk->tau_t), sca, am, mk->u_s);
}

static int phase_a_tile(bgroup *g, int64_t r0, int nr) {
    const orc_ctx *c = g->c;
    const bkv *kv = g->kv;
    const orc_model *mk = g->mk, *mo = g->mo;
    int64_t b = g->b, h = g->h, D = c->D, Dv = c->Dv, Sk = c->Sk;
    int base = g->base;
    int64_t jlo = INT64_MAX, jhi = -1;
    for (int r = 0; r < nr; r++) {
        int64_t lo, hi;
        orc_row_range(&c->p, g->rows[r0 + r], &lo, &hi);
        if (hi < lo) continue;
        if (lo < jlo) jlo = lo;
        if (hi > jhi) jhi = hi;
    }
    int64_t span = jhi >= jlo ? jhi - jlo + 1 : 0;
    if (span == 0) jlo = 0;
    size_t ns = (size_t)(RT * (span ? span : 1));
    enum { T_S, T_A, T_S16, T_DP, T_B, T_W, T_C, T_CO, T_E, T_P16, T_X, T_N };
    double *T[T_N];
    int ok = 1;
    for (int k = 0; k < T_N; k++) { T[k] = calloc(ns, sizeof(double)); ok = ok && T[k]; }
    uint8_t *vis = calloc(ns, 1);
    double *q = malloc((size_t)(RT * D) * sizeof(double)), *dO = malloc((size_t)(RT * Dv) * sizeof(double));
    double *q16 = malloc((size_t)(RT * D) * sizeof(double));
    double *wq = malloc((size_t)(Sk ? Sk : 1) * 2 * sizeof(double)); /* dQ weights by key index */
    size_t na = (size_t)RT * (size_t)(D > Dv ? D : Dv);
    double *acc = calloc(na * 8, sizeof(double));
    if (!ok || !vis || !q || !dO || !acc || !q16 || !wq) {
        for (int k = 0; k < T_N; k++) free(T[k]);
        free(vis); free(q); free(dO); free(acc); free(q16); free(wq);
        return 0;
    }
    for (int r = 0; r < nr; r++) {
        int64_t i = g->rows[r0 + r];
        for (int64_t d = 0; d < D; d++) {
            q[r * D + d] = orc_ld(c->q, c->qs, b, i, h, d, c->dt);
            q16[r * D + d] = orc_rd_fast(q[r * D + d] * c->scale, c->dt);
        }
        for (int64_t d = 0; d < Dv; d++) dO[r * Dv + d] = orc_ld(c->dout, c->dos, b, i, h, d, c->dt);
    }
    /* S = q.k, A = |q|.|k|, S16 = rd(q scale).k, dP = dO.v, B = |dO|.|v| */
    orc_dots_p8(nr, D, jlo, span, q, base ? q16 : NULL, kv->kp8, T[T_S], T[T_A], T[T_S16], span);
    orc_dots_p8(nr, Dv, jlo, span, dO, NULL, kv->vp8, T[T_DP], T[T_B], NULL, span);
    if (c->softcap > 0) memcpy(T[T_X], T[T_S], ns * sizeof(double)); /* raw q.k for 14.3 */
    /* forward rows: weights, then O by P.V */
    orc_row_info ri[RT];
    double *num_hi = acc, *num_lo = acc + na, *num = acc + 2 * na, *bnd = acc + 3 * na;
    double *orc = acc + 4 * na, *Oo = acc + 6 * na, *eO = acc + 7 * na;
    double efl[RT]; /* score underflow floor per row (BOUNDS.md 9.1) */
    for (int r = 0; r < nr; r++) {
        int64_t i = g->rows[r0 + r];
        double q1 = 0;
        for (int64_t d = 0; d < D; d++) q1 += fabs(q[r * D + d]);
        efl[r] = orc_score_floor(c, mk, q1 * (1 + 0x1p-40), kv->k1max);
        orc_row_weights(c, mk, mo, b, h, i, jlo, span, T[T_S] + r * span, T[T_A] + r * span, efl[r],
                        vis + r * span, T[T_W] + r * span, T[T_C] + r * span, T[T_CO] + r * span,
                        T[T_E] + r * span, &ri[r]);
        if (base) orc_row_baseline(c, b, h, i, jlo, span, T[T_S16] + r * span, vis + r * span,
                                   T[T_P16] + r * span);
    }
    int64_t nchv = orc_nch(Dv), nchk = orc_nch(D);
    for (int64_t jb = span ? jlo / ORC_PB * ORC_PB : 0; span && jb <= jhi; jb += ORC_PB) {
        int64_t kb = jlo > jb ? jlo - jb : 0, ke = jhi - jb + 1 < ORC_PB ? jhi - jb + 1 : ORC_PB, off = jb - jlo;
        const double *blk = kv->vp64 + (size_t)(jb / ORC_PB) * (size_t)nchv * ORC_PB * 8;
        for (int r = 0; r < nr; r++) {
            if (ri[r].kind != ROW_NORMAL) continue;
            int64_t o = r * span;
            orc_wsum_p64(kb, ke, off, vis + o, T[T_W] + o, T[T_C] + o, T[T_CO] + o, NULL, 1,
                         blk, Dv, num + r * Dv, bnd + r * Dv, orc + r * Dv, NULL);
            for (int64_t d = 0; d < Dv; d++) {
                double e;
                two_sum(num_hi[r * Dv + d], num[r * Dv + d], &num_hi[r * Dv + d], &e);
                num_lo[r * Dv + d] += e;
            }
        }
    }
    /* per row: O, D_i, input consistency, then P, dS and weights per key */
    double ce_o, cm_o, ce_k, cm_k;
    orc_score_coefs(c, mo, &ce_o, &cm_o);
    orc_score_coefs(c, mk, &ce_k, &cm_k);
    double gdv_o = orc_gamma((double)Dv + 1, ORC_U_D), gdv_k = orc_acc_coef(mk, (double)Dv, (double)Dv, 0);
    double o_ratio = 0, lse_ratio = 0;
    for (int r = 0; r < nr; r++) {
        int64_t i = g->rows[r0 + r], cr = r0 + r;
        orc_row_info *R = &ri[r];
        uint8_t *mv = g->vis + cr * Sk, *mo_ = g->ovf + cr * Sk;
        double *m[NMAT];
        for (int k = 0; k < NMAT; k++) m[k] = g->mat[k] + cr * Sk;
        memset(mv, 0, (size_t)Sk);
        memset(mo_, 0, (size_t)Sk);
        int64_t slot = g->dq_slot[cr];
        if (R->kind != ROW_NORMAL && slot >= 0) {
            orc_block *bq = &g->res->dq;
            for (int64_t d = 0; d < D; d++) {
                int64_t e = slot * D + d;
                bq->ref[e] = R->kind == ROW_MASKED ? 0.0 : NAN;
                bq->bound[e] = bq->orc_err[e] = R->kind == ROW_MASKED ? 0.0 : NAN;
                bq->flags[e] = R->kind == ROW_MASKED ? ORC_F_MASKED_ROW
                               : R->kind == ROW_NAN  ? ORC_F_NAN
                                                     : ORC_F_UNCHECKABLE | (R->ovf ? ORC_F_OVERFLOW : 0);
                if (bq->baseline) bq->baseline[e] = bq->ref[e];
            }
        }
        if (g->sinks) { g->skv[cr] = g->ske[cr] = g->sko[cr] = g->ska[cr] = 0; g->skf[cr] = 0; }
        if (R->kind == ROW_MASKED) {
            /* 14.4: exact term 0 (O = 0, D = 0); the kernel's D' = dO . O_given times its
             * exp(sink - lse_given) (any exp within 2^-10, and its underflow) */
            if (g->sinks && c->sinks[h] > -INFINITY) {
                double dOaOg = 0;
                for (int64_t d = 0; d < Dv; d++)
                    dOaOg += fabs(dO[r * Dv + d]) * fabs(orc_ld(c->o, c->os, b, i, h, d, c->dt));
                double lse_g = c->lse[b * c->ls[0] + h * c->ls[1] + i * c->ls[2]];
                double Pk = exp((double)c->sinks[h] - lse_g) * (1 + 0x1p-10) + mk->tau;
                double e = Pk * dOaOg * (1 + gdv_k) * (1 + 0x1p-40);
                g->ske[cr] = g->ska[cr] = e;
                if (!isfinite(e)) g->skf[cr] = 1;
            }
            continue;
        }
        if (R->kind != ROW_NORMAL) {
            if (g->sinks) g->skf[cr] = R->kind == ROW_NAN ? 2 : 1;
            /* NaN row: propagate NaN to every visible (i, j); uncheckable: mark the row */
            for (int64_t t = 0; t < span; t++) {
                if (!vis[r * span + t]) continue;
                mv[jlo + t] = 1;
                mo_[jlo + t] = (uint8_t)R->ovf;
                for (int k = 0; k < NMAT; k++) m[k][jlo + t] = NAN;
            }
            g->row_bad[cr] = R->kind == ROW_UNCHECKABLE;
            continue;
        }
        double Dorc = 0, dOaO = 0, dOdO = 0, dOaOg = 0, dO1 = 0, Og1 = 0;
        for (int64_t d = 0; d < Dv; d++) {
            double O, e, bd;
            orc_fwd_elem(mk, mo, R, num_hi[r * Dv + d] + num_lo[r * Dv + d], bnd[r * Dv + d],
                         orc[r * Dv + d], &O, &e, &bd);
            Oo[r * Dv + d] = O;
            eO[r * Dv + d] = e;
            double og = orc_ld(c->o, c->os, b, i, h, d, c->dt), x = dO[r * Dv + d];
            double dev = fabs(og - O);
            { double rt = dev / bd; if (!(rt <= o_ratio)) o_ratio = rt; }
            Dorc += x * O;
            dOaO += fabs(x) * fabs(O);
            dOdO += fabs(x) * (dev + e);
            dOaOg += fabs(x) * fabs(og);
            dO1 += fabs(x);
            Og1 += fabs(og);
        }
        /* underflow of dP_ij = dO_i.V_j, D_i = dO_i.O_i and their difference (9.3) */
        double h_floor = mk->tau * (4 * (double)Dv + 2 * dO1 + kv->v1max + Og1 + 1) * (1 + 0x1p-40);
        /* dlse >= |LSE the kernel used - exact LSE| (5.0): the given LSE's distance from the
         * oracle's plus the oracle's error; with lse_unknown any LSE within the forward bound,
         * which bounds the distance from the exact LSE itself (section 4) */
        double dlse;
        if (g->opt->lse_unknown) {
            dlse = R->lse_bound;
        } else {
            double lse_g = c->lse[b * c->ls[0] + h * c->ls[1] + i * c->ls[2]];
            dlse = fabs(lse_g - R->lse) + R->lse_orc;
            double rt = fabs(lse_g - R->lse) / R->lse_bound;
            if (!(rt <= lse_ratio)) lse_ratio = rt;
        }
        double dD_o = 0, dD_k = dOdO + gdv_k * dOaOg; /* |D' - D| for the kernel */
        for (int64_t d = 0; d < Dv; d++) dD_o += fabs(dO[r * Dv + d]) * eO[r * Dv + d];
        dD_o = dD_o + gdv_o * dOaO;
        if (!isfinite(dlse) || !isfinite(dD_k)) g->row_bad[cr] = 1;
        /* baseline D16 = rd(sum_j P16 rd(dP)) */
        double D16 = 0;
        if (base) {
            for (int64_t t = 0; t < span; t++)
                if (vis[r * span + t]) D16 += T[T_P16][r * span + t] * orc_rd_fast(T[T_DP][r * span + t], c->dt);
            D16 = orc_rd_fast(D16, c->dt);
        }
        double Eo_max = 0;
        for (int64_t t = 0; t < span; t++) {
            if (!vis[r * span + t]) continue;
            double am = fabs(orc_mask_at(c, b, h, i, jlo + t));
            double eo, ek_;
            key_err(c, mk, mo, ce_o, cm_o, ce_k, cm_k, T[T_A][r * span + t], am, efl[r], T[T_X][r * span + t],
                    &eo, &ek_);
            if (eo > Eo_max) Eo_max = eo;
        }
        double lue_o = mo->lue, lue_k = mk->lue, sdsm = 0;
        double thr32 = orc_overflow_threshold(-1), thrdt = orc_overflow_threshold((int)c->dt);
        int row_ovf = 0;
        /* first pass: P's upper bound, the kernel's P error and floor per key (parked in the
         * forward's scratch rows W, C, CO, free once O is formed) and, for a kernel that forms
         * D from P and dP (10.3), the bound on |D' - D| */
        double *tPup = T[T_W] + r * span, *tpik = T[T_C] + r * span, *tfP = T[T_CO] + r * span;
        double dSum_err = 0, dSum_abs = 0;
        for (int64_t t = 0; t < span; t++) {
            if (!vis[r * span + t]) continue;
            int64_t j = jlo + t;
            double s = T[T_S][r * span + t];
            double am = fabs(orc_mask_at(c, b, h, i, j));
            double Eo, Ek;
            key_err(c, mk, mo, ce_o, cm_o, ce_k, cm_k, T[T_A][r * span + t], am, efl[r], T[T_X][r * span + t],
                    &Eo, &Ek);
            double gap = R->lse - s + 2 * Eo_max + R->lse_orc;
            double P = exp(s - R->lse);
            double pio = orc_expm1_up(Eo + R->lse_orc + 3 * mo->u_s * (gap + Eo) + lue_o);
            double Pup = P / (1 - pio);
            double pik = orc_expm1_up(Ek + dlse + 3 * mk->u_s * (gap + Ek + dlse) + lue_k);
            double fP = 0;
            if (mk->u_p > 0 && P * (1 - pio) * (1 - pik) < mk->nmin_p) fP = mk->f_p;
            fP += mk->tau; /* exp result below 2^-126 flushed (9.3) */
            tPup[t] = Pup; tpik[t] = pik; tfP[t] = fP;
            if (mk->d_from_p) {
                double piP = (1 + pik) * (1 + mk->u_p) - 1, bij = T[T_B][r * span + t];
                double dPm = fabs(T[T_DP][r * span + t]) + gdv_o * bij; /* >= |dP| */
                double edp = gdv_k * bij + mk->u_dp * (dPm + gdv_k * bij) + mk->f_dp + h_floor;
                /* |P' dP' - P dP| <= |P' - P| (|dP| + e) + P e, and |P' dP'| for the sum */
                dSum_err += (Pup * piP + fP) * (dPm + edp) + Pup * edp;
                dSum_abs += (Pup * (1 + piP) + fP) * (dPm + edp);
            }
        }
        if (mk->d_from_p) {
            /* D' = fl(sum_j fl(P'_ij dP'_ij)) over the row's n keys (each product one fp32
             * rounding, 2^-23 covers RN and truncation); exact D = dO.O (10.3) */
            double n = (double)R->n;
            dD_k = (dSum_err + (orc_acc_coef(mk, n, (double)(R->hi - R->lo + 1), 0) + 0x1p-23) * dSum_abs) *
                   (1 + 0x1p-40) + mk->tau * (2 * n + 1);
            if (!isfinite(dD_k)) g->row_bad[cr] = 1;
        }
        if (g->sinks && c->sinks[h] > -INFINITY) {
            /* 14.4: t_i = P_s D_i, P_s = exp(sink - LSE). Oracle: |P_s^orc - P_s| <= pio P_s (its
             * LSE error, the subtraction, exp), |D^orc - D| <= dD_o. Kernel: exp(sink - lse_given)
             * with dlse, the sink's log2 fold (2 u_s |sink|), 3 u_s on the argument, one exp; D'
             * within dD_k; the product rounded (u_s); exp's underflow tau */
            double sink = (double)c->sinks[h], a = fabs(sink - R->lse), es = 2 * mk->u_s * fabs(sink);
            double P = exp(sink - R->lse);
            double pio = orc_expm1_up(R->lse_orc + 3 * mo->u_s * (a + R->lse_orc) + lue_o);
            double Pup = P / (1 - pio);
            double pik = orc_expm1_up(dlse + es + 3 * mk->u_s * (a + dlse + es) + lue_k);
            double Da = fabs(Dorc) + dD_o, Pk = Pup * (1 + pik) + mk->tau;
            g->skv[cr] = P * Dorc;
            g->sko[cr] = (Pup * pio * fabs(Dorc) + Pup * dD_o + ORC_U_D * fabs(P * Dorc)) * (1 + 0x1p-40);
            g->ske[cr] = ((Pup * pik + mk->tau) * (Da + dD_k) + Pup * dD_k + mk->u_s * Pk * (Da + dD_k) + mk->tau) *
                         (1 + 0x1p-40);
            g->ska[cr] = Pk * (Da + dD_k) * (1 + 0x1p-40);
            if (g->row_bad[cr] || !isfinite(g->ske[cr])) g->skf[cr] = 1;
        }
        /* the scale folded into dS before its rounding (10.3): the rounding's absolute floor
         * is f_ds in units of scale*dS, f_ds / |scale| in the dS units used below */
        double sc = fabs(c->scale);
        double th_d = pow(1 + mk->u_s, 3) * (1 + mk->u_ds) * (1 + 0x1p-50) - 1;
        double f_ds = mk->ds_fold == 0 ? mk->f_ds
                      : mk->ds_fold == 1 ? mk->f_ds / sc
                                         : mk->f_ds * (sc < 1 ? 1 / sc : 1);
        for (int64_t t = 0; t < span; t++) {
            if (!vis[r * span + t]) continue;
            int64_t j = jlo + t;
            double s = T[T_S][r * span + t];
            double P = exp(s - R->lse);
            double am = fabs(orc_mask_at(c, b, h, i, j));
            double Eo, Ek_;
            key_err(c, mk, mo, ce_o, cm_o, ce_k, cm_k, T[T_A][r * span + t], am, efl[r], T[T_X][r * span + t],
                    &Eo, &Ek_);
            double gap = R->lse - s + 2 * Eo_max + R->lse_orc;
            double pio = orc_expm1_up(Eo + R->lse_orc + 3 * mo->u_s * (gap + Eo) + lue_o);
            double Pup = tPup[t], pik = tpik[t], fP = tfP[t];
            double piP = (1 + pik) * (1 + mk->u_p) - 1;
            double dP = T[T_DP][r * span + t], bij = T[T_B][r * span + t];
            double dSv = P * (dP - Dorc);
            double gup = fabs(dP - Dorc) + gdv_o * bij + dD_o;
            /* oracle dS error */
            double ho = gdv_o * bij + dD_o + ORC_U_D * gup;
            double dSe_o = Pup * pio * gup + Pup * (1 + pio) * ho + ORC_U_D * fabs(dSv);
            dSe_o *= ORC_SAFETY;
            /* kernel dS error: dP' (accumulation, its rounding to the dtype when dp_rounded:
             * 10.3), D', the subtraction */
            double hk0 = gdv_k * bij + h_floor + mk->u_dp * (fabs(dP) + (gdv_o + gdv_k) * bij) + mk->f_dp;
            double Pk = Pup * (1 + piP) + fP;
            double dSe_k = dse_kernel(mk, Pup, piP, fP, Pk, gup, hk0 + dD_k, f_ds);
            /* dQ's weight (5.9): the part of D' - D common to the row is summed apart, with
             * |sum_j P16'_ij K_jd|; here the rest of the error and the per-key remainder of that
             * part, dD (|P16' - P| + th |P16'|), th the relative error of the roundings that
             * follow the subtraction (subtraction, product, fold, dS store) */
            T[T_E][r * span + t] = (dse_kernel(mk, Pup, piP, fP, Pk, gup, hk0, f_ds) +
                                    dD_k * (Pup * piP + fP + th_d * Pk)) * ORC_SAFETY;
            /* section 11: P', dP', D', dP' - D', dS' against fp32's overflow threshold, dP' and dS'
             * against the dtype's when they are rounded to it (dS' scaled when the scale is folded) */
            {
                double dPb = (fabs(dP) + (gdv_o + gdv_k) * bij) * (1 + mk->u_dp) + mk->f_dp;
                double Db = (mk->d_from_p ? dD_k + fabs(Dorc) : dOaOg * (1 + gdv_k)) * (1 + 0x1p-40);
                double dSb = fabs(dSv) + dSe_o + dSe_k, dsc = mk->ds_fold ? (sc > 1 ? sc : 1) : 1;
                int o = !(Pk < thr32) || !(dPb < thr32) || !(Db < thr32) || !(dPb + Db < thr32) ||
                        !(dSb * dsc < thr32) || (mk->u_dp > 0 && !(dPb < thrdt)) ||
                        (mk->u_ds > 0 && !(dSb * (mk->ds_fold == 1 ? sc : mk->ds_fold ? dsc : 1) < thrdt));
                mo_[j] = (uint8_t)o;
                row_ovf |= o;
            }
            if (c->softcap > 0) { /* 14.3: dS (1 - tanh^2) */
                double cap = c->softcap, x = c->scale * T[T_X][r * span + t], th = tanh(x / cap), tha = fabs(th);
                double A = T[T_A][r * span + t];
                double eto = orc_fm_th_err(orc_fm_tanh_dev(ce_o * A, x, cap, mo->u_s), tha, cap, mo->u_t, mo->tau_t);
                double etk = orc_fm_th_err(orc_fm_tanh_dev(ce_k * A + efl[r], x, cap, mk->u_s), tha, cap, mk->u_t,
                                           mk->tau_t);
                double gv = 1 - th * th, ego = orc_fm_dtanh_err(eto, tha, mo->u_s);
                double egk = orc_fm_dtanh_err(etk, tha, mk->u_s), gup = gv + ego;
                double dSa = fabs(dSv) + dSe_o;                 /* >= |dS| */
                double ko = (dSe_o * gv + dSa * ego) * (1 + 0x1p-40);
                double kk = dSe_k * (gup + egk) + dSa * egk;
                double mag = (dSa + dSe_k) * (gup + egk);       /* >= |dS' g'| */
                kk += mk->u_s * mag;                            /* the product's rounding */
                if (mk->u_ds > 0) kk += mk->u_ds * mag + f_ds;  /* rounded after the factor */
                dSv = dSv * gv;
                dSe_o = (ko + ORC_U_D * fabs(dSv)) * ORC_SAFETY;
                dSe_k = kk * (1 + 0x1p-40) + mk->tau;
                /* dQ's weight: the whole per-key error (the row-common refinement of 5.9 does not
                 * hold once every dS_ij carries its own factor 1 - tanh^2; the dQ row skips it) */
                T[T_E][r * span + t] = dSe_k * ORC_SAFETY;
            }
            mv[j] = 1;
            m[M_P][j] = P;
            m[M_DS][j] = dSv;
            m[M_DSE][j] = dSe_k * ORC_SAFETY;
            m[M_DSM][j] = fabs(dSv) + dSe_o + dSe_k;
            sdsm += m[M_DSM][j];
            m[M_DSEO][j] = dSe_o;
            m[M_PPI][j] = (Pup * pik + fP) * ORC_SAFETY; /* x (1 + acc of the column) in phase B */
            m[M_P1][j] = Pup * (1 + pik) * ORC_SAFETY;
            m[M_PPIO][j] = Pup * pio * ORC_SAFETY;
            if (base) {
                double p16 = T[T_P16][r * span + t];
                m[M_P16][j] = p16;
                m[M_DS16][j] = orc_rd_fast(p16 * (orc_rd_fast(dP, c->dt) - D16), c->dt);
                if (c->softcap > 0) {
                    double th = tanh(c->scale * T[T_X][r * span + t] / c->softcap);
                    m[M_DS16][j] = orc_rd_fast(m[M_DS16][j] * orc_rd_fast(1 - th * th, c->dt), c->dt);
                }
            }
        }
        /* dQ row (if sampled): scale * sum_j dS K_j */
        if (slot < 0) continue;
        double *qh = calloc((size_t)D * 9, sizeof(double));
        if (!qh) { ok = 0; break; }
        double *ql = qh + D, *qp = qh + 2 * D, *qe = qh + 3 * D, *dq16 = qh + 4 * D;
        double n = (double)R->n;
        /* accumulation, the scale multiply (n_bq = 1 fp32 rounding; an unfused graph rounds
         * the scaled K and the product or the multiply: 2, 10.5), the scale's own error */
        double kQ = (1 + orc_acc_coef(mk, n, (double)(R->hi - R->lo + 1), 0)) *
                        pow(1 + mk->u_s, mk->n_bq) * (1 + mk->sigma) - 1;
        double kQo = (1 + orc_acc_coef(mo, n, (double)span, 0)) * (1 + ORC_U_D) * (1 + mo->sigma) - 1;
        double *blkv = calloc((size_t)D, sizeof(double));
        if (!blkv) { free(qh); ok = 0; break; }
        double *wkq = wq, *woq = wq + Sk;
        for (int64_t j = jlo; j < jlo + span; j++) {
            wkq[j] = mv[j] ? T[T_E][r * span + (j - jlo)] + kQ * m[M_DSM][j] : 0;
            woq[j] = mv[j] ? m[M_DSEO][j] + kQo * m[M_DSM][j] : 0;
        }
        /* A_d = sum_j P_ij K_jd (5.9) in plain double blocks, and per key its error weight:
         * the oracle's P error Pup pio plus gamma of the sum on Pup (parked in T_W, T_C) */
        double *pa = T[T_W] + r * span;
        double gA = orc_gamma(n + (double)span / ORC_PB + 18, ORC_U_D);
        for (int64_t t = 0; t < span; t++) {
            if (!vis[r * span + t]) continue;
            int64_t j = jlo + t;
            pa[t] = (m[M_PPIO][j] + gA * m[M_P1][j]) * ORC_SAFETY; /* M_P1 >= Pup, M_PPIO = Pup pio */
        }
        double *Asum = qh + 5 * D, *Aerr = qh + 6 * D, *Ascr = qh + 7 * D, *Ablk = qh + 8 * D;
        for (int64_t jb = jlo / ORC_PB * ORC_PB; jb <= jhi; jb += ORC_PB) {
            int64_t kb = jlo > jb ? jlo - jb : 0, ke = jhi - jb + 1 < ORC_PB ? jhi - jb + 1 : ORC_PB;
            const double *kblk = kv->kp64 + (size_t)(jb / ORC_PB) * (size_t)nchk * ORC_PB * 8;
            orc_wsum_p64(kb, ke, jb, mv, m[M_DS], wkq, woq, base ? m[M_DS16] : NULL, 1, kblk, D, blkv, qp, qe, dq16);
            for (int64_t d = 0; d < D; d++) { double e; two_sum(qh[d], blkv[d], &qh[d], &e); ql[d] += e; }
            orc_wsum_p64(kb, ke, jb - jlo, mv + jlo, m[M_P] + jlo, pa, pa, NULL, 1, kblk, D, Ablk, Aerr, Ascr, NULL);
            for (int64_t d = 0; d < D; d++) Asum[d] += Ablk[d];
        }
        double sumsafe = ORC_SAFETY * (1 + orc_gamma(n + 16, ORC_U_D));
        /* underflow of the dQ sum (9.4): k operand |dS| tau, product, add and scale
         * multiply per term, final scale multiply and store */
        double smax = fabs(c->scale) > 1 ? fabs(c->scale) : 1;
        double fq = mk->tau * (fabs(c->scale) * sdsm * (1 + 0x1p-40) + n * (2 * smax + 1) + 3);
        /* the fp32 dQ accumulator: |sum_j dS'_ij K_jd| <= sum_j dSm_ij max|K| (scaled first
         * when the scale is folded into dS) (section 11) */
        if (!(sdsm * kv->kmax * (1 + kQ) * (mk->ds_fold && sc > 1 ? sc : 1) < thr32)) row_ovf = 1;
        orc_block *bq = &g->res->dq;
        for (int64_t d = 0; d < D; d++) {
            int64_t e = slot * D + d;
            double val = c->scale * (qh[d] + ql[d]);
            double eo = fabs(c->scale) * qe[d] * sumsafe * ORC_SAFETY;
            /* + the row-common part of D' - D against |sum_j P_ij K_jd| (5.9) */
            double pre = fabs(c->scale) * (qp[d] + (c->softcap > 0 ? 0 : dD_k * (fabs(Asum[d]) + Aerr[d]))) * sumsafe;
            double bound = (pre + mk->u_out * (fabs(val) + eo + pre) + mk->f_out + fq) * ORC_SAFETY;
            if (mk->u_out > 0) /* the RN store's reachable values (5.8) */
                bound = orc_store_bound(val, eo, (pre + fq) * ORC_SAFETY, bound, c->dt, mk->tau >= 0x1p-126);
            bq->ref[e] = val;
            bq->orc_err[e] = eo;
            bq->bound[e] = bound;
            bq->flags[e] = orc_value_flags(val);
            if (g->row_bad[cr] || !isfinite(bound)) bq->flags[e] |= ORC_F_UNCHECKABLE;
            if (row_ovf) bq->flags[e] |= ORC_F_OVERFLOW;
            if (bq->baseline) bq->baseline[e] = orc_rd_fast(orc_rd_fast(dq16[d], c->dt) * c->scale, c->dt);
        }
        free(qh);
        free(blkv);
    }
#pragma omp critical(orc_bwd_ratio)
    {
        if (o_ratio > g->o_ratio) g->o_ratio = o_ratio;
        if (lse_ratio > g->lse_ratio) g->lse_ratio = lse_ratio;
    }
    for (int k = 0; k < T_N; k++) free(T[k]);
    free(vis); free(q); free(dO); free(acc); free(q16); free(wq);
    return ok;
}

// ----------------------------------------------------------------------------
// phase B: dK, dV of one sampled column over the chunk rows

typedef struct {
    double *hi, *lo, *blk, *bnd, *orc, *b16;   /* dK: [D] each */
    double *vhi, *vlo, *vblk, *vbnd, *vorc, *v16; /* dV: [Dv] each */
    int cnt;
    uint8_t bad;
    uint8_t ovf;       /* some (i, j) feeding the column may overflow (section 11) */
    double sdsm, sp;   /* sum over rows of dSm_ij and of an upper bound on P'_ij (9.4, 9.5) */
    double *hs, *habs;   /* dK: running sum at the current head's start; sum over heads of an
                            upper bound on |that head's part| (GQA per-head rounding, 10.4) */
    double *vhs, *vhabs; /* the same for dV */
} col_acc;

/* Head boundaries of a column (10.4): the part of head h is the running compensated sum
 * after it minus the one before it; each of the three roundings (two hi + lo, one
 * difference) errs by <= 2^-53 of its operands, so |part| + 2^-51 (|after| + |before|)
 * bounds the oracle's own per-head part from above (the oracle error of the parts is
 * added at the end). */
static void col_head_start(col_acc *a, int64_t D, int64_t Dv) {
    for (int64_t d = 0; d < D; d++) a->hs[d] = a->hi[d] + a->lo[d];
    for (int64_t d = 0; d < Dv; d++) a->vhs[d] = a->vhi[d] + a->vlo[d];
}
static void col_head_end(col_acc *a, int64_t D, int64_t Dv) {
    for (int64_t d = 0; d < D; d++) {
        double now = a->hi[d] + a->lo[d];
        a->habs[d] += fabs(now - a->hs[d]) + 0x1p-51 * (fabs(now) + fabs(a->hs[d]));
    }
    for (int64_t d = 0; d < Dv; d++) {
        double now = a->vhi[d] + a->vlo[d];
        a->vhabs[d] += fabs(now - a->vhs[d]) + 0x1p-51 * (fabs(now) + fabs(a->vhs[d]));
    }
}

static void col_fold(col_acc *a, int64_t D, int64_t Dv) {
    for (int64_t d = 0; d < D; d++) { double e; two_sum(a->hi[d], a->blk[d], &a->hi[d], &e); a->lo[d] += e; a->blk[d] = 0; }
    for (int64_t d = 0; d < Dv; d++) { double e; two_sum(a->vhi[d], a->vblk[d], &a->vhi[d], &e); a->vlo[d] += e; a->vblk[d] = 0; }
    a->cnt = 0;
}

typedef struct {
    double kK, kKo, accV, accVo; /* per-column error coefficients */
} col_coef;

/* Column j over the chunk rows: gather its per-row weights (one cache line per
 * row and matrix for consecutive columns), then weighted row sums of Q and dO. */
enum { W_DS, W_K, W_KO, W_D16, W_P, W_V, W_VO, W_P16, W_N };

/* Columns cols[0..nc) over the chunk rows. The per-(i, j) weights of all nc
 * columns are gathered in one pass over the rows (rows outer: each row's
 * matrix segment is one cache line for consecutive columns), then each column
 * does weighted row sums of Q and dO. */
static int phase_b_cols(bgroup *g, const int64_t *cols, int nc, col_acc *accs, const col_coef *cc,
                        const double *Qp, const double *dOp) {
    const orc_ctx *c = g->c;
    int64_t D = c->D, Dv = c->Dv, Sk = c->Sk, n = g->nrows;
    const orc_model *mk = g->mk;
    size_t per = (size_t)(n ? n : 1) * W_N;
    double *w = malloc(per * (size_t)nc * sizeof(double));
    uint8_t *vis = malloc((size_t)(n ? n : 1) * (size_t)nc);
    if (!w || !vis) { free(w); free(vis); return 0; }
    for (int64_t r = 0; r < n; r++) {
        for (int k = 0; k < nc; k++) {
            int64_t e = r * Sk + cols[k];
            double *x = w + (size_t)k * per + (size_t)r * W_N;
            uint8_t v = g->vis[e];
            vis[(size_t)k * (size_t)n + (size_t)r] = v;
            if (!v) continue;
            if (g->row_bad[r]) accs[k].bad = 1;
            if (g->ovf[e]) accs[k].ovf = 1;
            double cp = mk->u_p + cc[k].accV * (1 + mk->u_p);
            accs[k].sdsm += g->mat[M_DSM][e];
            accs[k].sp += g->mat[M_P1][e] * (1 + mk->u_p) + g->mat[M_PPI][e];
            x[W_DS] = g->mat[M_DS][e];
            x[W_K] = g->mat[M_DSE][e] + cc[k].kK * g->mat[M_DSM][e];
            x[W_KO] = g->mat[M_DSEO][e] + cc[k].kKo * g->mat[M_DSM][e];
            x[W_P] = g->mat[M_P][e];
            x[W_V] = g->mat[M_PPI][e] * (1 + cc[k].accV) + g->mat[M_P1][e] * cp;
            x[W_VO] = g->mat[M_PPIO][e] + g->mat[M_P1][e] * cc[k].accVo;
            if (g->base) { x[W_D16] = g->mat[M_DS16][e]; x[W_P16] = g->mat[M_P16][e]; }
        }
    }
    for (int k = 0; k < nc; k++) {
        col_acc *a = &accs[k];
        const double *wb = w + (size_t)k * per;
        const uint8_t *vk = vis + (size_t)k * (size_t)n;
        for (int64_t r0 = 0; r0 < n; r0 += ORC_BLK) {
            int64_t rn = n - r0 < ORC_BLK ? n - r0 : ORC_BLK;
            orc_wsum_p64(0, rn, r0, vk, wb + W_DS, wb + W_K, wb + W_KO, g->base ? wb + W_D16 : NULL, W_N,
                         Qp + (size_t)(r0 / ORC_PB) * (size_t)orc_nch(D) * ORC_PB * 8, D, a->blk, a->bnd, a->orc, a->b16);
            orc_wsum_p64(0, rn, r0, vk, wb + W_P, wb + W_V, wb + W_VO, g->base ? wb + W_P16 : NULL, W_N,
                         dOp + (size_t)(r0 / ORC_PB) * (size_t)orc_nch(Dv) * ORC_PB * 8, Dv, a->vblk, a->vbnd, a->vorc, a->v16);
            col_fold(a, D, Dv);
        }
    }
    free(w);
    free(vis);
    return 1;
}

/* GQA per-head rounding (BOUNDS.md 10.4): the bound before the final store of a dK/dV
 * element whose group of G > 1 heads is reduced as the profile says. pre: the fused
 * bound (sum over heads of every head's own bound B_h); habs: sum over heads of an
 * upper bound on the oracle's per-head part; eo: the column's oracle error (each
 * per-head part errs by at most 2 eo). X = habs + 2 G eo >= sum_h |exact part_h|.
 * Per head rd(y_h) errs by u_in |y_h| + f_in (+ tau when bf16 parts below 2^-126 flush),
 * |y_h| <= |x_h| + B_h; the sum of the G rounded parts by gamma_G(u_g) sum |rd(y_h)|,
 * u_g = 2^-23 (fp32, any order) or u_in with f_in per partial sum (dtype). */
static double gqa_rounding(const orc_model *mk, const orc_ctx *c, double pre, double habs, double eo) {
    if (c->G <= 1 || mk->gqa == FA_GQA_FUSED) return pre;
    double G = (double)c->G, u_in = orc_unit_roundoff(c->dt);
    double f_in = c->dt == FA_BF16 ? 0x1p-134 : 0x1p-25;
    double X = habs * (1 + 0x1p-50) + 2 * G * eo;
    double rnd = u_in * (X + pre) + G * (f_in + mk->tau);
    double ug = mk->gqa == FA_GQA_ROUND_SUM32 ? 0x1p-23 : u_in;
    double sum = orc_gamma(G, ug) * (1 + u_in) * (X + pre + G * f_in + G * mk->tau);
    if (mk->gqa == FA_GQA_ROUND_SUM16) sum += G * (f_in + mk->tau);
    return (pre + rnd + sum) * (1 + 0x1p-40);
}

// ----------------------------------------------------------------------------
// public entry

static int64_t find_slot(const orc_index *ix, int64_t n, int64_t b, int64_t h, int64_t s) {
    int64_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        const orc_index *x = &ix[mid];
        int cmp = x->b != b ? (x->b < b ? -1 : 1) : x->h != h ? (x->h < h ? -1 : 1)
                                                               : x->s != s ? (x->s < s ? -1 : 1) : 0;
        if (cmp == 0) return mid;
        if (cmp < 0) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

/* dsinks accumulation of one query head over every row of every sequence (14.4) */
typedef struct {
    double hi, lo;        /* compensated sum of the oracle's terms */
    double eo, ek;        /* sums of the per-row oracle / kernel errors */
    double abs_o, abs_k;  /* sums of |oracle term| + its error, of |kernel term| bounds */
    int64_t n;            /* rows */
    int bad, nan;
} sink_acc;

/* dQ rows, dK/dV columns of res (indices sorted, blocks allocated; res->dq.n, dk.n) on
 * the dense ctx cin; dsinks terms into sacc[Hq] when not NULL. 0: out of memory. */
static int bwd_run(const orc_ctx *cin, const fa_precision *prof, const orc_options *optp, orc_bwd_result *res,
                   sink_acc *sacc) {
    orc_ctx c = *cin;
    orc_options opt = *optp;
    orc_index *iq = res->dq.index, *ic = res->dk.index;
    int64_t nq = res->dq.n, nc = res->dk.n;
    orc_model mk, mo;
    orc_model_kernel(&c, prof, &mk);
    orc_model_oracle(&c, &mo);
    int nth = orc_nthreads(&opt);
    int64_t D = c.D, Dv = c.Dv, Sk = c.Sk;
    int base = opt.baseline != 0;
    int64_t RC = (800000 / (Sk > 0 ? Sk : 1)) / RT * RT;
    if (RC < RT) RC = RT;
    if (RC > c.Sq) RC = c.Sq > 0 ? c.Sq : 1;

    int ok = 1;
    bgroup g;
    memset(&g, 0, sizeof g);
    g.c = &c; g.mk = &mk; g.mo = &mo; g.opt = &opt; g.res = res; g.base = base; g.Sk = Sk;
    size_t nm = (size_t)RC * (size_t)(Sk > 0 ? Sk : 1);
    g.vis = malloc(nm);
    for (int k = 0; k < NMAT; k++) { g.mat[k] = malloc(nm * sizeof(double)); ok = ok && g.mat[k]; }
    g.row_bad = malloc((size_t)RC);
    g.ovf = malloc(nm);
    int64_t *rows = malloc((size_t)(c.Sq > 0 ? c.Sq : 1) * sizeof(int64_t));
    int64_t *slots = malloc((size_t)(c.Sq > 0 ? c.Sq : 1) * sizeof(int64_t));
    int64_t *ncol = malloc((size_t)(Sk > 0 ? Sk : 1) * sizeof(int64_t));
    int64_t *colj = malloc((size_t)(Sk > 0 ? Sk : 1) * sizeof(int64_t));
    double *Qc = calloc(orc_p64_size(RC, D) + 1, sizeof(double)), *dOc = calloc(orc_p64_size(RC, Dv) + 1, sizeof(double));
    col_acc *ca = calloc((size_t)(Sk > 0 ? Sk : 1), sizeof(col_acc));
    double *cabuf = calloc((size_t)(Sk > 0 ? Sk : 1) * (size_t)(8 * D + 8 * Dv), sizeof(double));
    ok = ok && g.vis && g.row_bad && g.ovf && rows && slots && ncol && colj && Qc && dOc && ca && cabuf;
    g.sinks = sacc != NULL;
    if (g.sinks) {
        g.skv = malloc((size_t)RC * 4 * sizeof(double));
        g.skf = malloc((size_t)RC);
        ok = ok && g.skv && g.skf;
        if (g.skv) { g.ske = g.skv + RC; g.sko = g.skv + 2 * RC; g.ska = g.skv + 3 * RC; }
    }

    for (int64_t gi = 0; ok && gi < c.B * c.Hkv; gi++) {
        int64_t b = gi / c.Hkv, hk = gi % c.Hkv;
        /* sampled columns of this group */
        int64_t ncs = 0, c0 = -1;
        for (int64_t x = 0; x < nc; x++)
            if (ic[x].b == b && ic[x].h == hk) { if (c0 < 0) c0 = x; colj[ncs++] = ic[x].s; }
        /* sampled dq rows of this group? */
        int any_dq = 0;
        for (int64_t h = hk * c.G; h < (hk + 1) * c.G && !any_dq; h++)
            for (int64_t x = 0; x < nq; x++) if (iq[x].b == b && iq[x].h == h) { any_dq = 1; break; }
        if (ncs == 0 && !any_dq && !g.sinks) continue; /* dsinks needs every row (14.4) */
        bkv kv;
        if (!bkv_load(&c, b, hk, &kv, nth)) { bkv_free(&kv); ok = 0; break; }
        g.kv = &kv; g.b = b; g.hk = hk;
        double qmax = 0, domax = 0; /* max |Q|, |dO| over the group's rows (section 11) */
        /* visible rows per column over the group (for the gamma of dK, dV) */
        memset(ncol, 0, (size_t)Sk * sizeof(int64_t));
        for (int64_t h = hk * c.G; h < (hk + 1) * c.G; h++)
            for (int64_t i = 0; i < c.Sq; i++) {
                int64_t lo, hi;
                orc_row_range(&c.p, i, &lo, &hi);
                for (int64_t j = lo; j <= hi; j++)
                    if (orc_mask_at(&c, b, h, i, j) != -INFINITY) ncol[j]++;
            }
        for (int64_t x = 0; x < ncs; x++) {
            col_acc *a = &ca[x];
            double *p = cabuf + (size_t)x * (size_t)(8 * D + 8 * Dv);
            memset(p, 0, (size_t)(8 * D + 8 * Dv) * sizeof(double));
            a->hi = p; a->lo = p + D; a->blk = p + 2 * D; a->bnd = p + 3 * D; a->orc = p + 4 * D; a->b16 = p + 5 * D;
            a->hs = p + 6 * D; a->habs = p + 7 * D;
            p += 8 * D;
            a->vhi = p; a->vlo = p + Dv; a->vblk = p + 2 * Dv; a->vbnd = p + 3 * Dv; a->vorc = p + 4 * Dv; a->v16 = p + 5 * Dv;
            a->vhs = p + 6 * Dv; a->vhabs = p + 7 * Dv;
            a->cnt = 0; a->bad = 0; a->ovf = 0; a->sdsm = 0; a->sp = 0;
        }
        for (int64_t h = hk * c.G; ok && h < (hk + 1) * c.G; h++) {
            g.h = h;
            for (int64_t x = 0; x < ncs; x++) col_head_start(&ca[x], D, Dv);
            int64_t nr = 0;
            for (int64_t i = 0; i < c.Sq; i++) {
                int64_t s = find_slot(iq, nq, b, h, i);
                if (s < 0 && !g.sinks) { /* not a sampled dQ row: needed only if it sees a key (dK, dV) */
                    int64_t lo, hi;
                    orc_row_range(&c.p, i, &lo, &hi);
                    if (ncs == 0 || hi < lo) continue;
                }
                rows[nr] = i; slots[nr] = s; nr++;
            }
            for (int64_t r0 = 0; ok && r0 < nr; r0 += RC) {
                int64_t n = nr - r0 < RC ? nr - r0 : RC;
                g.rows = rows + r0; g.dq_slot = slots + r0; g.nrows = n;
                memset(g.row_bad, 0, (size_t)n);
                int64_t ntile = (n + RT - 1) / RT;
                int tok = 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
                for (int64_t t = 0; t < ntile; t++) {
                    int cnt = (int)(n - t * RT < RT ? n - t * RT : RT);
                    if (!phase_a_tile(&g, t * RT, cnt)) {
#pragma omp atomic write
                        tok = 0;
                    }
                }
                ok = tok;
                if (ok && g.sinks) { /* the chunk's dsinks terms, in row order (deterministic) */
                    sink_acc *sa = &sacc[h];
                    for (int64_t r = 0; r < n; r++) {
                        double e;
                        two_sum(sa->hi, g.skv[r], &sa->hi, &e);
                        sa->lo += e;
                        sa->eo += g.sko[r]; sa->ek += g.ske[r];
                        sa->abs_o += fabs(g.skv[r]) + g.sko[r]; sa->abs_k += g.ska[r];
                        sa->n++;
                        if (g.skf[r] & 1) sa->bad = 1;
                        if (g.skf[r] & 2) sa->nan = 1;
                    }
                }
                if (!ok || ncs == 0) continue;
                tok = 1;
                for (int64_t r = 0; r < n; r++) {
                    for (int64_t d = 0; d < D; d++) {
                        double x = orc_ld(c.q, c.qs, b, g.rows[r], h, d, c.dt);
                        Qc[orc_p64_at(r, d, D)] = x;
                        if (isfinite(x) && fabs(x) > qmax) qmax = fabs(x);
                    }
                    for (int64_t d = 0; d < Dv; d++) {
                        double x = orc_ld(c.dout, c.dos, b, g.rows[r], h, d, c.dt);
                        dOc[orc_p64_at(r, d, Dv)] = x;
                        if (isfinite(x) && fabs(x) > domax) domax = fabs(x);
                    }
                }
#define CB 8 /* columns per phase-B block */
                int64_t nblk = (ncs + CB - 1) / CB;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
                for (int64_t xb = 0; xb < nblk; xb++) {
                    col_coef cc[CB];
                    int nck = (int)(ncs - xb * CB < CB ? ncs - xb * CB : CB);
                    for (int k = 0; k < nck; k++) {
                        int64_t j = colj[xb * CB + k];
                        double nn = (double)(ncol[j] + c.G);
                        double sp = (double)(c.G * c.Sq) + 64.0 * (double)c.G * ceil((double)c.Sq / (double)RC);
                        double spk = (double)(c.G * c.Sq + c.G); /* positions of a column's sum */
                        cc[k].kK = (1 + orc_acc_coef(&mk, nn, spk, 0)) * pow(1 + mk.u_s, mk.n_bq) *
                                       (1 + mk.sigma) - 1;
                        cc[k].kKo = (1 + orc_acc_coef(&mo, nn, sp, 0)) * (1 + ORC_U_D) * (1 + mo.sigma) - 1;
                        cc[k].accV = orc_acc_coef(&mk, nn, spk, 0);
                        cc[k].accVo = orc_acc_coef(&mo, nn, sp, 0);
                    }
                    if (!phase_b_cols(&g, colj + xb * CB, nck, ca + xb * CB, cc, Qc, dOc)) {
#pragma omp atomic write
                        tok = 0;
                    }
                }
                ok = tok;
            }
            for (int64_t x = 0; x < ncs; x++) col_head_end(&ca[x], D, Dv);
        }
        /* finalize the group's columns */
        for (int64_t x = 0; ok && x < ncs; x++) {
            int64_t j = colj[x], slot = c0 + x;
            col_acc *a = &ca[x];
            double nn = (double)(ncol[j] + c.G);
            double sumsafe = ORC_SAFETY * (1 + orc_gamma(nn + 16, ORC_U_D));
            /* underflow floors (BOUNDS.md 9.4, 9.5): operand |dS| or P' times tau, product,
             * add (and scale) per term, final scale multiply and store */
            double smax = fabs(c.scale) > 1 ? fabs(c.scale) : 1;
            double fk = mk.tau * (fabs(c.scale) * a->sdsm * (1 + 0x1p-40) + nn * (2 * smax + 1) + 3);
            double fv = mk.tau * (a->sp * (1 + 0x1p-40) + 2 * nn + 2);
            /* section 11: an overflowing (i, j) feeds the column, or the fp32 accumulators
             * |sum dS' Q| <= sum dSm max|Q| (scaled first if folded), |sum P' dO| <= sum P' max|dO|
             * may overflow */
            double thr32 = orc_overflow_threshold(-1), thrdt = orc_overflow_threshold((int)c.dt);
            double sck = mk.ds_fold && fabs(c.scale) > 1 ? fabs(c.scale) : 1;
            double cc_kk_bound = orc_acc_coef(&mk, nn, (double)(c.G * c.Sq + c.G), 0);
            int ovf_k = a->ovf || !(a->sdsm * qmax * (1 + cc_kk_bound) * sck < thr32);
            int ovf_v = a->ovf || !(a->sp * domax * (1 + cc_kk_bound) < thr32);
            for (int64_t d = 0; d < D; d++) {
                int64_t e = slot * D + d;
                double val = c.scale * (a->hi[d] + a->lo[d]);
                double eo = fabs(c.scale) * a->orc[d] * sumsafe * ORC_SAFETY;
                double pre = fabs(c.scale) * a->bnd[d] * sumsafe;
                pre = gqa_rounding(&mk, &c, pre, fabs(c.scale) * a->habs[d], eo);
                int ovf_e = ovf_k || (c.G > 1 && mk.gqa != FA_GQA_FUSED &&
                                      !(fabs(c.scale) * a->habs[d] + 2 * (double)c.G * eo + pre < thrdt));
                double bound = (pre + mk.u_out * (fabs(val) + eo + pre) + mk.f_out + fk) * ORC_SAFETY;
                if (mk.u_out > 0) /* the RN store's reachable values (5.8) */
                    bound = orc_store_bound(val, eo, (pre + fk) * ORC_SAFETY, bound, c.dt, mk.tau >= 0x1p-126);
                res->dk.ref[e] = val; res->dk.orc_err[e] = eo; res->dk.bound[e] = ncol[j] ? bound : 0;
                res->dk.flags[e] = orc_value_flags(val) | (ncol[j] ? 0 : ORC_F_MASKED_ROW) |
                                   ((a->bad || !isfinite(bound)) ? ORC_F_UNCHECKABLE : 0) |
                                   (ovf_e && ncol[j] ? ORC_F_OVERFLOW : 0);
                if (base) res->dk.baseline[e] = orc_rd_fast(orc_rd_fast(a->b16[d], c.dt) * c.scale, c.dt);
            }
            for (int64_t d = 0; d < Dv; d++) {
                int64_t e = slot * Dv + d;
                double val = a->vhi[d] + a->vlo[d];
                double eo = a->vorc[d] * sumsafe * ORC_SAFETY;
                double pre = a->vbnd[d] * sumsafe;
                pre = gqa_rounding(&mk, &c, pre, a->vhabs[d], eo);
                int ovf_e = ovf_v || (c.G > 1 && mk.gqa != FA_GQA_FUSED &&
                                      !(a->vhabs[d] + 2 * (double)c.G * eo + pre < thrdt));
                double bound = (pre + mk.u_out * (fabs(val) + eo + pre) + mk.f_out + fv) * ORC_SAFETY;
                if (mk.u_out > 0) /* the RN store's reachable values (5.8) */
                    bound = orc_store_bound(val, eo, (pre + fv) * ORC_SAFETY, bound, c.dt, mk.tau >= 0x1p-126);
                res->dv.ref[e] = val; res->dv.orc_err[e] = eo; res->dv.bound[e] = ncol[j] ? bound : 0;
                res->dv.flags[e] = orc_value_flags(val) | (ncol[j] ? 0 : ORC_F_MASKED_ROW) |
                                   ((a->bad || !isfinite(bound)) ? ORC_F_UNCHECKABLE : 0) |
                                   (ovf_e && ncol[j] ? ORC_F_OVERFLOW : 0);
                if (base) res->dv.baseline[e] = orc_rd_fast(a->v16[d], c.dt);
            }
        }
        bkv_free(&kv);
    }
    for (int k = 0; k < NMAT; k++) free(g.mat[k]);
    free(g.vis); free(g.row_bad); free(g.ovf); free(rows); free(slots); free(ncol); free(colj);
    free(Qc); free(dOc); free(ca); free(cabuf);
    free(g.skv); free(g.skf);
    if (!ok) return 0;
    /* masked dq rows never reached phase A's dq code: rows with no visible key */
    if (g.o_ratio > res->o_input_ratio) res->o_input_ratio = g.o_ratio;
    if (g.lse_ratio > res->lse_input_ratio) res->lse_input_ratio = g.lse_ratio;

    /* escalation to MPFR (reference time) */
    int64_t esc = 0;
    int prec = opt.mpfr_prec;
    /* dQ rows: the rows to escalate, in iq's order (grouped by (b, h), so by (b, hk)); a task is
     * a run of one (b, hk) of at most ceil(run / nth) rows, sharing that head's K and V in MPFR
     * (orc_mp_head: the same values as row by row) */
    orc_block *bq = &res->dq;
    int64_t *rq = malloc((size_t)(nq > 0 ? nq : 1) * sizeof(int64_t)), nr = 0;
    int64_t *tq = malloc((size_t)(nq > 0 ? nq + 1 : 1) * sizeof(int64_t)), ntq = 0;
    if (!rq || !tq) { free(rq); free(tq); return 0; }
    for (int64_t x = 0; x < nq; x++) {
        int need = opt.tier == ORC_TIER_MPFR;
        for (int64_t d = 0; d < D && !need; d++) {
            int64_t e = x * D + d;
            if (!(bq->flags[e] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE | ORC_F_MASKED_ROW)) &&
                bq->orc_err[e] > opt.escalate_ratio * bq->bound[e])
                need = 1;
        }
        if (need && !(bq->flags[x * D] & ORC_F_MASKED_ROW)) rq[nr++] = x;
    }
    for (int64_t a = 0; a < nr;) {
        int64_t e = a;
        while (e < nr && iq[rq[e]].b == iq[rq[a]].b && iq[rq[e]].h / c.G == iq[rq[a]].h / c.G) e++;
        int64_t len = (e - a + nth - 1) / nth;
        for (int64_t s0 = a; s0 < e; s0 += len) tq[ntq++] = s0;
        a = e;
    }
    tq[ntq] = nr;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) reduction(+ : esc)
    for (int64_t t = 0; t < ntq; t++) {
        int64_t a = tq[t], e = tq[t + 1];
        double *mp = malloc((size_t)D * sizeof(double));
        if (!mp) continue;
        orc_mp_head hd;
        int64_t b0 = iq[rq[a]].b, hk0 = iq[rq[a]].h / c.G;
        const orc_mp_head *hdp = e - a > 1 && orc_mp_head_init(&hd, &c, b0, hk0, 1) == 0 ? &hd : NULL;
        for (int64_t y = a; y < e; y++) {
            int64_t x = rq[y];
            orc_mpfr_dq_row_head(&c, hdp, iq[x].b, iq[x].h, iq[x].s, prec, mp);
            for (int64_t d = 0; d < D; d++) {
                int64_t el = x * D + d;
                bq->orc_err[el] = orc_mpfr_err(mp[d], bq->orc_err[el], prec, (double)Sk);
                bq->ref[el] = mp[d];
                bq->flags[el] = (uint8_t)((bq->flags[el] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW)) | orc_value_flags(mp[d]) |
                                          ORC_F_ESCALATED);
            }
            esc += D;
        }
        if (hdp) orc_mp_head_free(&hd);
        free(mp);
    }
    free(rq); free(tq);
    /* dK/dV columns: the escalated columns of one (b, hk) share their rows' MPFR quantities
     * (orc_mpfr_dkdv_cols); a (b, hk)'s columns are split into up to nth tasks */
    orc_block *bl[2] = {&res->dk, &res->dv};
    int64_t *xs = malloc((size_t)(nc > 0 ? nc : 1) * sizeof(int64_t)), nx = 0;
    int64_t *t0 = malloc((size_t)(nc > 0 ? nc : 1) * sizeof(int64_t)), nt = 0;
    if (!xs || !t0) { free(xs); free(t0); return 0; }
    /* a column whose dK alone needs MPFR and is exactly 0 by structure (BOUNDS.md 6.1) takes
     * that 0 and keeps its dV; rz: orc_mpfr_dk_col_zero's row answers for one (b, hk) */
    int8_t *rz = NULL;
    int64_t rz_b = -1, rz_hk = -1;
    for (int64_t x = 0; x < nc; x++) {
        int need[2] = {opt.tier == ORC_TIER_MPFR, opt.tier == ORC_TIER_MPFR};
        for (int k = 0; k < 2; k++)
            for (int64_t d = 0; d < bl[k]->dim && !need[k]; d++) {
                int64_t e = x * bl[k]->dim + d;
                if (!(bl[k]->flags[e] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE | ORC_F_MASKED_ROW)) &&
                    bl[k]->orc_err[e] > opt.escalate_ratio * bl[k]->bound[e])
                    need[k] = 1;
            }
        if (!(need[0] || need[1]) || (res->dk.flags[x * D] & ORC_F_MASKED_ROW)) continue;
        if (!need[1]) {
            if (ic[x].b != rz_b || ic[x].h != rz_hk) {
                free(rz);
                rz = malloc((size_t)(c.G * c.Sq > 0 ? c.G * c.Sq : 1));
                if (rz) memset(rz, -1, (size_t)(c.G * c.Sq));
                rz_b = ic[x].b;
                rz_hk = ic[x].h;
            }
            if (rz && orc_mpfr_dk_col_zero(&c, ic[x].b, ic[x].h, ic[x].s, rz)) {
                double nn = (double)(c.G * c.Sq + c.G);
                for (int64_t d = 0; d < D; d++) {
                    int64_t el = x * D + d;
                    res->dk.orc_err[el] = orc_mpfr_err(0.0, res->dk.orc_err[el], prec, nn);
                    res->dk.ref[el] = 0.0;
                    res->dk.flags[el] = (uint8_t)((res->dk.flags[el] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW)) |
                                                  orc_value_flags(0.0) | ORC_F_ESCALATED);
                }
                esc += D;
                continue;
            }
        }
        xs[nx++] = x;
    }
    free(rz);
    /* ic is grouped by (b, hk): tasks are runs of one (b, hk), at most ceil(run / nth) long */
    for (int64_t a = 0; a < nx;) {
        int64_t e = a;
        while (e < nx && ic[xs[e]].b == ic[xs[a]].b && ic[xs[e]].h == ic[xs[a]].h) e++;
        int64_t len = (e - a + nth - 1) / nth;
        for (int64_t s0 = a; s0 < e; s0 += len) t0[nt++] = s0;
        a = e;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) reduction(+ : esc)
    for (int64_t t = 0; t < nt; t++) {
        int64_t a = t0[t], e = a + 1;
        while (e < nx && (t + 1 >= nt || e < t0[t + 1]) && ic[xs[e]].b == ic[xs[a]].b && ic[xs[e]].h == ic[xs[a]].h) e++;
        int n = (int)(e - a);
        int64_t *js = malloc((size_t)n * sizeof(int64_t));
        double *mk_ = malloc((size_t)n * (size_t)D * sizeof(double)), *mv_ = malloc((size_t)n * (size_t)(Dv ? Dv : 1) * sizeof(double));
        if (!js || !mk_ || !mv_) { free(js); free(mk_); free(mv_); continue; }
        for (int k = 0; k < n; k++) js[k] = ic[xs[a + k]].s;
        orc_mpfr_dkdv_cols(&c, ic[xs[a]].b, ic[xs[a]].h, js, n, prec, mk_, mv_);
        double nn = (double)(c.G * c.Sq + c.G);
        for (int q = 0; q < n; q++) {
            int64_t x = xs[a + q];
            for (int k = 0; k < 2; k++) {
                double *mp = k ? mv_ + (size_t)q * (size_t)Dv : mk_ + (size_t)q * (size_t)D;
                for (int64_t d = 0; d < bl[k]->dim; d++) {
                    int64_t el = x * bl[k]->dim + d;
                    bl[k]->orc_err[el] = orc_mpfr_err(mp[d], bl[k]->orc_err[el], prec, nn);
                    bl[k]->ref[el] = mp[d];
                    bl[k]->flags[el] = (uint8_t)((bl[k]->flags[el] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW)) | orc_value_flags(mp[d]) | ORC_F_ESCALATED);
                }
            }
            esc += D + Dv;
        }
        free(js); free(mk_); free(mv_);
    }
    free(xs); free(t0);
    res->escalations += esc;
    return 1;
}


static fa_status bwd_alloc(orc_bwd_result *res, orc_index *iq, int64_t nq, orc_index *ic, int64_t nc, int64_t D,
                           int64_t Dv, int64_t Hq, int sinks, const orc_options *opt, fa_error *err) {
    int ok = (iq || !nq) && (ic || !nc) && orc_block_alloc(&res->dq, nq, D, opt->baseline) &&
             orc_block_alloc(&res->dk, nc, D, opt->baseline) && orc_block_alloc(&res->dv, nc, Dv, opt->baseline) &&
             (!sinks || orc_block_alloc(&res->dsinks, Hq, 1, 0));
    res->dq.index = iq;
    res->dk.index = ic;
    res->dv.index = malloc((size_t)(nc ? nc : 1) * sizeof *ic);
    if (sinks && ok) {
        res->dsinks.index = calloc((size_t)(Hq ? Hq : 1), sizeof(orc_index));
        ok = res->dsinks.index != NULL;
        for (int64_t h = 0; ok && h < Hq; h++) res->dsinks.index[h].h = h;
    }
    if (!ok || !res->dv.index) {
        if (!res->dq.index) free(iq);
        if (!res->dk.index) free(ic);
        orc_bwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory for %lld rows / %lld columns.",
                        (long long)nq, (long long)nc);
    }
    if (nc) memcpy(res->dv.index, ic, (size_t)nc * sizeof *ic);
    return FA_OK;
}

/* dsinks from the accumulators (14.4): value -sum t_i; oracle error sum eo_i + the
 * compensated sum's coefficient; kernel bound sum ek_i + gamma_n(u_acc) (any order) sum
 * |t'_i| + the fp32 store; MPFR in the MPFR tier or when the oracle's error is not small
 * against the bound (cs[k], bs[k]: the ctx and batch index of every sequence). */
static void sinks_finish(orc_bwd_result *res, const sink_acc *sacc, const orc_ctx *c, const fa_precision *prof,
                         const orc_options *opt, const orc_ctx *const *cs, const int64_t *bs, int nseq) {
    orc_model mk, mo;
    orc_model_kernel(c, prof, &mk);
    orc_model_oracle(c, &mo);
    orc_block *bl = &res->dsinks;
    for (int64_t h = 0; h < bl->n; h++) {
        const sink_acc *a = &sacc[h];
        double n = (double)a->n;
        double sumsafe = ORC_SAFETY * (1 + orc_gamma(n + 16, ORC_U_D));
        double val = -(a->hi + a->lo);
        double eo = (a->eo + orc_acc_coef(&mo, n, n, 0) * a->abs_o + ORC_U_D * fabs(val)) * sumsafe;
        double pre = (a->ek + orc_gamma(n, mk.u_acc > ORC_U_F ? mk.u_acc : ORC_U_F) * a->abs_k) * sumsafe;
        double bound = (pre + ORC_U_F * (fabs(val) + eo + pre) + mk.tau) * ORC_SAFETY;
        int sink_off = !(c->sinks[h] > -INFINITY);
        bl->ref[h] = a->nan ? NAN : sink_off ? 0.0 : val;
        bl->orc_err[h] = sink_off ? 0 : eo;
        bl->bound[h] = sink_off ? 0 : bound;
        bl->flags[h] = (uint8_t)(orc_value_flags(bl->ref[h]) | ((a->bad || !isfinite(bound)) ? ORC_F_UNCHECKABLE : 0));
        if (sink_off || a->nan || (bl->flags[h] & ORC_F_UNCHECKABLE)) continue;
        if (opt->tier == ORC_TIER_MPFR || eo > opt->escalate_ratio * bound) {
            double x = orc_mpfr_dsink(cs, bs, nseq, h, opt->mpfr_prec);
            bl->orc_err[h] = orc_mpfr_err(x, eo, opt->mpfr_prec, n);
            bl->ref[h] = x;
            bl->flags[h] |= ORC_F_ESCALATED;
            res->escalations++;
        }
    }
}

/* A block's vectors [r0, r0 + n) as a block of its own (pointers into blk), index replaced. */
static orc_block bblock_view(const orc_block *blk, int64_t r0, int64_t n, orc_index *ix) {
    orc_block v = *blk;
    size_t off = (size_t)(r0 * blk->dim);
    v.n = n;
    v.index = ix;
    v.ref += off; v.bound += off; v.orc_err += off; v.flags += off;
    if (v.baseline) v.baseline += off;
    return v;
}

/* Sample the pool positions (page, hkv, slot) of a paged problem (13.3), sorted: the
 * referenced ones and every slot of the pages no sequence uses (expected 0). */
static orc_index *sample_pool(const orc_seqs *sq, int64_t Hkv, int64_t max, uint64_t seed, int64_t *n) {
    int64_t P = sq->num_pages, ps = sq->page_size;
    uint8_t *used = calloc((size_t)(P * ps > 0 ? P * ps : 1), 1);
    int64_t *cnt = calloc((size_t)(P + 1), sizeof(int64_t));
    if (!used || !cnt) { free(used); free(cnt); return NULL; }
    for (int64_t b = 0; b < sq->B; b++)
        for (int64_t j = 0; j < sq->sk[b]; j++) used[sq->table[b * sq->tstride + j / ps] * ps + j % ps] = 1;
    int64_t total = 0;
    for (int64_t pg = 0; pg < P; pg++) {
        for (int64_t sl = 0; sl < ps; sl++) cnt[pg] += used[pg * ps + sl];
        if (cnt[pg] == 0) { /* a page no sequence uses: written as 0 (flash_api.h fa_paged) */
            memset(used + pg * ps, 1, (size_t)ps);
            cnt[pg] = ps;
        }
        total += Hkv * cnt[pg];
    }
    int64_t m;
    orc_index *ix = orc_sample(1, 1, total, max, seed, &m);
    if (!ix) { free(used); free(cnt); return NULL; }
    int64_t pg = 0, base = 0;
    for (int64_t x = 0; x < m; x++) {
        int64_t t = ix[x].s;
        while (t >= base + Hkv * cnt[pg]) { base += Hkv * cnt[pg]; pg++; }
        int64_t r = t - base, k = r % cnt[pg], sl = 0;
        for (;; sl++) if (used[pg * ps + sl] && k-- == 0) break;
        ix[x].b = pg; ix[x].h = r / cnt[pg]; ix[x].s = sl;
    }
    free(used); free(cnt);
    *n = m;
    return ix;
}

static int cmp_ix(const void *a, const void *b) {
    const orc_index *x = a, *y = b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    return x->s < y->s ? -1 : x->s > y->s;
}

/* Packed / paged problems (section 13): sequence by sequence on dense sub-problems; a
 * paged problem's pool positions summed over their parts (13.3). */
static fa_status orc_bwd_seq(const fa_bwd_args *args, const fa_precision *prof, const orc_options *opt,
                             orc_bwd_result *res, fa_error *err) {
    orc_ctx c;
    fa_status st;
    fa_bwd_args dense = *args;
    memset(&dense.varlen, 0, sizeof dense.varlen);
    memset(&dense.paged, 0, sizeof dense.paged);
    dense.p.page_size = 0;
    if ((st = orc_ctx_bwd3(&dense, &c, err))) return st;
    if (args->mask.ptr && (args->varlen.cu_seqlens_q || args->varlen.cu_seqlens_k))
        return orc_fail(err, FA_ERR_INVALID, "mask", "the additive mask is not allowed with cu_seqlens.");
    orc_seqs sq;
    if ((st = orc_seqs_init(&sq, &args->p, &args->varlen, &args->paged, err))) return st;
    int64_t B = c.B, nq, nc;
    orc_index *iq = orc_sample_seq(B, c.Hq, sq.sq, opt->max_rows, opt->seed, &nq);
    orc_index *ic = sq.paged ? sample_pool(&sq, c.Hkv, opt->max_cols, opt->seed ^ 0x5bd1e995u, &nc)
                             : orc_sample_seq(B, c.Hkv, sq.ka, opt->max_cols, opt->seed ^ 0x5bd1e995u, &nc);
    if ((st = bwd_alloc(res, iq, nq, ic, nc, c.D, c.Dv, c.Hq, c.has_sinks, opt, err))) { orc_seqs_free(&sq); return st; }
    res->args = *args;
    res->prof = *prof;
    res->opt = *opt;
    res->scale = c.scale;
    /* the parts (b, hkv, j < Sk_b) of the sampled columns, in (b, hkv, j) order: paged, the
     * keys mapped to a sampled pool position; else the sampled keys below Sk_b (the keys a
     * sequence allocates past seqused_k are written as 0 in backward: flash_api.h) */
    int64_t np = nc;
    orc_index *parts = ic;
    orc_bwd_result tmp; /* the parts' dK, dV blocks (agg) */
    memset(&tmp, 0, sizeof tmp);
    int ok = 1, agg = sq.paged;
    for (int64_t b = 0; b < B; b++) if (sq.sk[b] < sq.ka[b]) agg = 1;
    if (agg && !sq.paged) {
        np = 0;
        parts = malloc((size_t)(nc ? nc : 1) * sizeof *parts);
        ok = parts != NULL;
        for (int64_t x = 0; ok && x < nc; x++) if (ic[x].s < sq.sk[ic[x].b]) parts[np++] = ic[x];
        if (ok) {
            st = bwd_alloc(&tmp, NULL, 0, parts, np, c.D, c.Dv, 0, 0, opt, err);
            tmp.dq.index = NULL;
            ok = st == FA_OK;
        }
    }
    if (sq.paged) {
        np = 0;
        int64_t cap = nc + 1;
        parts = malloc((size_t)cap * sizeof *parts);
        ok = parts != NULL;
        /* every (b, j < Sk_b, hkv) whose pool position is sampled: in (b, hkv, j) order */
        for (int64_t b = 0; ok && b < B; b++)
            for (int64_t hk = 0; ok && hk < c.Hkv; hk++)
                for (int64_t j = 0; j < sq.sk[b]; j++) {
                    orc_index key = {sq.table[b * sq.tstride + j / sq.page_size], hk, j % sq.page_size};
                    if (!nc || !bsearch(&key, ic, (size_t)nc, sizeof key, cmp_ix)) continue;
                    if (np == cap) {
                        cap *= 2;
                        orc_index *q = realloc(parts, (size_t)cap * sizeof *parts);
                        if (!q) { ok = 0; break; }
                        parts = q;
                    }
                    parts[np].b = b; parts[np].h = hk; parts[np].s = j; np++;
                }
        orc_options o2 = *opt;
        o2.baseline = opt->baseline;
        if (ok) {
            st = bwd_alloc(&tmp, NULL, 0, parts, np, c.D, c.Dv, 0, 0, &o2, err);
            tmp.dq.index = NULL;
            ok = st == FA_OK;
            if (!ok) parts = NULL; /* freed by bwd_alloc's cleanup */
        }
    }
    sink_acc *sacc = c.has_sinks ? calloc((size_t)c.Hq, sizeof(sink_acc)) : NULL;
    orc_index *tq = malloc((size_t)(nq ? nq : 1) * sizeof *tq), *tc = malloc((size_t)(np ? np : 1) * sizeof *tc);
    orc_ctx *cs = calloc((size_t)(B ? B : 1), sizeof(orc_ctx));
    uint16_t **bufs = calloc((size_t)(2 * B + 1), sizeof(uint16_t *));
    ok = ok && tq && tc && cs && bufs && (!c.has_sinks || sacc);
    orc_block *kdst = agg ? &tmp.dk : &res->dk, *vdst = agg ? &tmp.dv : &res->dv;
    const orc_index *pix = agg ? tmp.dk.index : res->dk.index;
    int64_t q0 = 0, k0 = 0;
    for (int64_t b = 0; ok && b < B; b++) {
        int64_t q1 = q0, k1 = k0;
        while (q1 < nq && iq[q1].b == b) { tq[q1] = iq[q1]; tq[q1].b = 0; q1++; }
        while (k1 < np && pix[k1].b == b) { tc[k1] = pix[k1]; tc[k1].b = 0; k1++; }
        fa_bwd_args sub;
        if (!orc_seq_sub_bwd(args, &sq, b, &sub, &bufs[2 * b], &bufs[2 * b + 1])) { ok = 0; break; }
        if ((st = orc_ctx_bwd3(&sub, &cs[b], err))) { ok = -1; break; }
        if (q1 > q0 || k1 > k0 || sacc) {
            orc_bwd_result view = *res;
            view.dq = bblock_view(&res->dq, q0, q1 - q0, tq + q0);
            view.dk = bblock_view(kdst, k0, k1 - k0, tc + k0);
            view.dv = bblock_view(vdst, k0, k1 - k0, tc + k0);
            view.escalations = 0;
            view.o_input_ratio = res->o_input_ratio;
            view.lse_input_ratio = res->lse_input_ratio;
            ok = bwd_run(&cs[b], prof, opt, &view, sacc);
            res->escalations += view.escalations;
            res->o_input_ratio = view.o_input_ratio;
            res->lse_input_ratio = view.lse_input_ratio;
        }
        q0 = q1; k0 = k1;
    }
    if (ok == 1 && agg) {
        /* 13.3: a pool position is the sum of its parts (disjoint: each (b, j) has one place);
         * a key past Sk_b or a position of an unused page has none: exactly 0 (MASKED) */
        double u_in = orc_unit_roundoff(c.dt), f_in = c.dt == FA_BF16 ? 0x1p-134 : 0x1p-25;
        orc_model mk;
        orc_model_kernel(&c, prof, &mk);
        orc_block *dst[2] = {&res->dk, &res->dv}, *src[2] = {&tmp.dk, &tmp.dv};
        int64_t *own = malloc((size_t)(np ? np : 1) * sizeof(int64_t)), *cnt = calloc((size_t)(nc ? nc : 1), sizeof(int64_t));
        ok = own && cnt;
        for (int64_t y = 0; ok && y < np; y++) { /* the pool column of part y */
            const orc_index *q = &tmp.dk.index[y];
            orc_index key = *q;
            if (sq.paged) { key.b = sq.table[q->b * sq.tstride + q->s / sq.page_size]; key.s = q->s % sq.page_size; }
            own[y] = (const orc_index *)bsearch(&key, ic, (size_t)nc, sizeof key, cmp_ix) - ic;
            cnt[own[y]]++;
        }
        for (int w = 0; ok && w < 2; w++) {
            int64_t dim = dst[w]->dim;
            double *sabs = calloc((size_t)(nc * dim + 1), sizeof(double)), *bl = calloc((size_t)(nc * dim + 1), sizeof(double));
            uint8_t *live = calloc((size_t)(nc * dim + 1), 1);
            if (!sabs || !bl || !live) { free(sabs); free(bl); free(live); ok = 0; break; }
            for (int64_t e = 0; e < nc * dim; e++) {
                dst[w]->ref[e] = dst[w]->orc_err[e] = dst[w]->bound[e] = 0;
                dst[w]->flags[e] = 0;
            }
            for (int64_t y = 0; y < np; y++)
                for (int64_t d = 0; d < dim; d++) {
                    int64_t e = own[y] * dim + d, f = y * dim + d;
                    dst[w]->ref[e] += src[w]->ref[f];
                    dst[w]->orc_err[e] += src[w]->orc_err[f];
                    dst[w]->bound[e] += src[w]->bound[f];
                    sabs[e] += fabs(src[w]->ref[f]) + src[w]->orc_err[f] + src[w]->bound[f];
                    if (src[w]->baseline) bl[e] += src[w]->baseline[f];
                    dst[w]->flags[e] |= src[w]->flags[f] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW | ORC_F_ESCALATED);
                    if (!(src[w]->flags[f] & ORC_F_MASKED_ROW)) live[e] = 1;
                }
            /* the oracle's sum of k doubles; the kernel's parts rounded to the dtype and summed
             * in it (the widest accumulation a backend may use): gamma_{k-1}(u_in) sum(|ref| +
             * orc_err + bound) + (k - 1)(f_in + tau) */
            for (int64_t x = 0; x < nc; x++)
                for (int64_t d = 0; d < dim; d++) {
                    int64_t e = x * dim + d;
                    double kk = (double)cnt[x];
                    if (cnt[x] > 1) dst[w]->orc_err[e] = (dst[w]->orc_err[e] + orc_gamma(kk, ORC_U_D) * sabs[e]) * ORC_SAFETY;
                    if (cnt[x] > 1)
                        dst[w]->bound[e] = (dst[w]->bound[e] + orc_gamma(kk - 1, u_in) * sabs[e] +
                                            (kk - 1) * (f_in + mk.tau)) * ORC_SAFETY;
                    dst[w]->flags[e] |= (uint8_t)(orc_value_flags(dst[w]->ref[e]) | (live[e] ? 0 : ORC_F_MASKED_ROW));
                    if (dst[w]->baseline) dst[w]->baseline[e] = orc_rd_fast(bl[e], c.dt);
                }
            free(sabs); free(bl); free(live);
        }
        free(own); free(cnt);
    }
    if (ok == 1 && sacc) {
        const orc_ctx **cp = malloc((size_t)(B ? B : 1) * sizeof *cp);
        int64_t *zero = calloc((size_t)(B ? B : 1), sizeof(int64_t));
        if (cp && zero) {
            for (int64_t b = 0; b < B; b++) cp[b] = &cs[b];
            sinks_finish(res, sacc, &c, prof, opt, cp, zero, (int)B);
        } else {
            ok = 0;
        }
        free(cp); free(zero);
    }
    for (int64_t k = 0; k < 2 * B; k++) free(bufs[k]);
    free(bufs); free(cs); free(tq); free(tc); free(sacc);
    orc_bwd_free(&tmp);
    orc_seqs_free(&sq);
    if (ok != 1) {
        orc_bwd_free(res);
        if (ok == -1) return st;
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory in the backward oracle.");
    }
    res->elements = nq * c.D + nc * (c.D + c.Dv) + res->dsinks.n;
    return FA_OK;
}

fa_status orc_bwd(const fa_bwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                  orc_bwd_result *res, fa_error *err) {
    orc_ctx c;
    orc_options opt;
    fa_status st;
    if (!res) return orc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_bwd_result.");
    memset(res, 0, sizeof *res);
    if (!args) return orc_fail(err, FA_ERR_INVALID, "args", "args is NULL; pass a fa_bwd_args.");
    if ((st = orc_check_profile(prof, err))) return st;
    if (opt_in) opt = *opt_in; else orc_options_init(&opt);
    if ((st = orc_check_options(&opt, err))) return st;
    if (orc_seq_active(&args->p, &args->varlen)) return orc_bwd_seq(args, prof, &opt, res, err);
    if ((st = orc_ctx_bwd3(args, &c, err))) return st;
    int64_t nq, nc;
    orc_index *iq = orc_sample(c.B, c.Hq, c.Sq, opt.max_rows, opt.seed, &nq);
    orc_index *ic = orc_sample(c.B, c.Hkv, c.Sk, opt.max_cols, opt.seed ^ 0x5bd1e995u, &nc);
    if ((st = bwd_alloc(res, iq, nq, ic, nc, c.D, c.Dv, c.Hq, c.has_sinks, &opt, err))) return st;
    res->args = *args;
    res->prof = *prof;
    res->opt = opt;
    res->scale = c.scale;
    sink_acc *sacc = c.has_sinks ? calloc((size_t)c.Hq, sizeof(sink_acc)) : NULL;
    if ((c.has_sinks && !sacc) || !bwd_run(&c, prof, &opt, res, sacc)) {
        free(sacc);
        orc_bwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory in the backward oracle.");
    }
    if (sacc) {
        const orc_ctx **cp = malloc((size_t)(c.B ? c.B : 1) * sizeof *cp);
        int64_t *bs = malloc((size_t)(c.B ? c.B : 1) * sizeof(int64_t));
        if (!cp || !bs) {
            free(cp); free(bs); free(sacc);
            orc_bwd_free(res);
            return orc_fail(err, FA_ERR_NOMEM, "", "out of memory in the backward oracle.");
        }
        for (int64_t b = 0; b < c.B; b++) { cp[b] = &c; bs[b] = b; }
        sinks_finish(res, sacc, &c, prof, &opt, cp, bs, (int)c.B);
        free(cp); free(bs); free(sacc);
    }
    res->elements = nq * c.D + nc * (c.D + c.Dv) + res->dsinks.n;
    return FA_OK;
}

void orc_bwd_free(orc_bwd_result *res) {
    if (!res) return;
    orc_block_free(&res->dq);
    orc_block_free(&res->dk);
    orc_block_free(&res->dv);
    orc_block_free(&res->dsinks);
    memset(res, 0, sizeof *res);
}
