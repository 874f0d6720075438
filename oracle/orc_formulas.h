/* orc_formulas.h: the scalar bound formulas of the certified double tier, the one
 * definition that the CPU tier (orc_util.c, orc_fwd.c, orc_bwd.c) and the GPU tier
 * (oracle/gpu/orc_gpu_fwd.cu, orc_gpu.c) both call. Host and device inline
 * functions (ORC_HD); included by orc_internal.h after orc_model and orc_row_info.
 * Not part of the API; nothing here is shared with any kernel.
 *
 * What it owns: the error coefficients (orc_gamma, orc_acc_coef with the
 * tensor-core model of BOUNDS.md 10.2), the score-stage coefficients
 * (orc_fm_score_coefs, section 2), expm1_up, the score underflow floor (9.1),
 * the exact fp16/bf16 decode by arithmetic, the per-key and per-row steps of the
 * forward row weights (sections 3, 4, 9: orc_row_weights is written with them,
 * the GPU tier's warp passes are the same calls), and the overflow-sensitive
 * tests of a forward row (section 11).
 *
 * The row weights as passes over a row's keys (the CPU tier makes them in one
 * tile loop per pass, the GPU tier one warp per row):
 *
 *   pass 1  s_j = scale * S_j + m_j                     -> n, M, row kind (orc_fm_row_kind)
 *   pass 2  eo_j, ek_j; W_j = exp(s_j - M); L          -> Eo_max, Ek_max, L
 *   pass 3  eta_o_j, eta_k_j; sum_pe                   -> kap_o, pin (orc_fm_row_mid)
 *   pass 4  C_j, CO_j; sum_pek                         -> kap_k, floor_n, LSE (orc_fm_row_end)
 *
 * Only the summation orders are each tier's own: L (blocks of 32 visible keys
 * on the CPU, 32-key blocks aligned to key positions on the GPU; the same error
 * coefficient covers both) and the row sums of bound terms (sequential on the
 * CPU, per lane then a tree on the GPU; covered by the same evaluation factors).
 * No contraction anywhere: the CPU tier is compiled with -ffp-contract=off, the
 * device code with -fmad=false.
 *
 * Rounding: round to nearest double at every operation, as stated at each
 * formula; exp/log/expm1/log1p are glibc's on the host and CUDA's on the device
 * (<= 1 ulp; the bounds assume < 2 ulps, BOUNDS.md section 12). */
#ifndef FLASHCHECK_ORC_FORMULAS_H
#define FLASHCHECK_ORC_FORMULAS_H

#ifdef __CUDACC__
#define ORC_HD __host__ __device__ static inline
#else
#define ORC_HD static inline
#endif

/* The fp32 overflow threshold: the smallest magnitude that rounds to +-Inf in
 * fp32, (2 - 2^-23 + 2^-24) 2^127 (orc_overflow_threshold(-1)). */
#define ORC_F32_OVF 0x1.ffffffp127

// ----------------------------------------------------------------------------
// error coefficients

/* n u / (1 - n u), +inf if n u >= 1 (Higham's gamma_n). */
ORC_HD double orc_gamma(double n, double u) {
    double nu = n * u;
    return nu >= 1.0 ? INFINITY : nu / (1.0 - nu);
}

/* Error coefficient c with |computed - exact| <= c * sum|terms| for a sum of
 * n_terms nonzero products spread over n_span positions, plus n_ops further
 * fp32 operations on the accumulator (rescale multiplies). Kernel, IEEE adds:
 * gamma_{n + ops}(u_acc) (any order). Kernel, tensor cores (BOUNDS.md 10.2):
 * X = (n + S) a (1 + u_n) + S u_n + (C + ops) 2^-23 with S = min(n, ceil(span/t)
 * + 2C) steps, C = ceil(span/16) + 1 partial sums, c = X / (1 - X). Oracle:
 * plain blocks of <= ORC_BLK positions folded with Sum2 (Ogita-Rump-Oishi):
 * gamma_{m+1} + 2 gamma_K^2, K = number of blocks. */
ORC_HD double orc_acc_coef(const orc_model *m, double n_terms, double n_span, double n_ops) {
    if (!m->compensated) {
        double g = orc_gamma(n_terms + n_ops, m->u_acc);
        if (m->tc_t > 0 && n_terms > 0) {
            if (n_span < n_terms) n_span = n_terms;
            double C = ceil(n_span / 16) + 1, S = ceil(n_span / m->tc_t) + 2 * C;
            if (S > n_terms) S = n_terms;
            double X = ((n_terms + S) * m->tc_a * (1 + m->tc_un) + S * m->tc_un + (C + n_ops) * 0x1p-23) *
                       (1 + 0x1p-40);
            double t = X >= 1 ? INFINITY : X / (1 - X);
            if (t > g) g = t;
        }
        return g;
    }
    double mb = n_terms < ORC_BLK ? n_terms : ORC_BLK;
    double K = ceil(n_span / ORC_BLK) + 1;
    double gk = orc_gamma(K, m->u_acc);
    return orc_gamma(mb + 1, m->u_acc) + 2 * gk * gk;
}

/* Upper bound of expm1(x) for x >= 0 (used for relative-error factors):
 * e^x - 1 <= x + x^2 on [0, 1/2]; the factor 1 + 2^-50 covers the rounding
 * of evaluating it (and of expm1 itself, < 1 ulp, above 1/2). */
ORC_HD double orc_expm1_up(double x) {
    return (x <= 0.5 ? x + x * x : expm1(x)) * (1.0 + 0x1p-50);
}

/* Score-stage error coefficients of model m (section 2): |s' - s| <= ce * |q|.|k|
 * + cm * |mask|, for the score scale * q.k + mask over head dim D. The oracle's
 * dots are plain double sums (gamma_D); a kernel's follow its profile
 * (orc_acc_coef, tensor cores included); n_sr roundings of unit u_s. */
ORC_HD void orc_fm_score_coefs(const orc_model *m, double scale, double D, double *ce, double *cm) {
    double g = m->compensated ? orc_gamma(D, m->u_dot) : orc_acc_coef(m, D, D, 0);
    double us = m->u_s, r = 1;
    for (int k = 0; k < m->n_sr; k++) r *= 1 + us;
    *ce = fabs(scale) * ((1 + m->sigma) * r * (1 + g) - 1);
    *cm = orc_gamma(2, us);
}

/* Softcap (BOUNDS.md 14.1). x = scale q.k (the uncapped score), e >= |x' - x| the error
 * of a computed x' (section 2's coefficient and floor), cap > 0. Returns Dt >= cap
 * |tanh(t') - tanh(x/cap)| for t' = fl(x' / cap) (a division, or a multiply by a rounded
 * 1/cap: <= 2 roundings of unit u): |t' - x/cap| <= dt := (e + gamma_2(u)(|x| + e)) / cap,
 * and tanh's slope on that interval is <= F = min(1, 4 exp(-2 (|x|/cap - dt))) (tanh's
 * condition: sech^2 y <= 4 e^{-2|y|}). Rounding: y is evaluated as a lower bound (factors
 * 1 - 2^-50), F as an upper bound (glibc exp < 1 ulp; + 2^-1000 for exp's underflow), the
 * product carries 1 + 2^-40. */
ORC_HD double orc_fm_tanh_dev(double e, double x, double cap, double u) {
    double ex = e + orc_gamma(2, u) * (fabs(x) + e);
    double y = (fabs(x) - ex * (1 + 0x1p-50)) / cap * (1 - 0x1p-50);
    double F = y > 0 ? 4 * exp(-2 * y) * (1 + 0x1p-50) + 0x1p-1000 : 1;
    if (F > 1) F = 1;
    return F * ex * (1 + 0x1p-40);
}

/* Error of a capped score sc' = fl(cap * tanh'(t')) against sc = cap tanh(x / cap)
 * (14.1): Dt (orc_fm_tanh_dev) + (u_t + u + u_t u) Tm + cap tau_t (1 + u), with Tm =
 * min(cap, |sc| + Dt) >= cap |tanh(t')|; u_t, tau_t: tanh's relative and subnormal error. */
ORC_HD double orc_fm_cap_err(double Dt, double sc_abs, double cap, double u, double u_t, double tau_t) {
    double Tm = sc_abs + Dt;
    if (Tm > cap) Tm = cap;
    return (Dt + (u_t + u + u_t * u) * Tm + cap * tau_t * (1 + u)) * (1 + 0x1p-40);
}

/* The softcapped score's full error (14.1): the cap's, then the mask add and a log2 fold,
 * two roundings of unit u on |sc'| + |m| <= |sc| + Ecap + am. */
ORC_HD double orc_fm_cap_score_err(double Ecap, double sc_abs, double am, double u) {
    return (Ecap + orc_gamma(2, u) * (sc_abs + Ecap + am)) * (1 + 0x1p-40);
}

/* |th' - th| for a computed tanh th' of the capped score, th = tanh(x/cap) (14.3):
 * Dt / cap + u_t min(1, |th| + Dt/cap) + tau_t. */
ORC_HD double orc_fm_th_err(double Dt, double th_abs, double cap, double u_t, double tau_t) {
    double d = Dt / cap, m = th_abs + d;
    if (m > 1) m = 1;
    return (d + u_t * m + tau_t) * (1 + 0x1p-40);
}

/* |g' - g| for the softcap derivative factor g = 1 - th^2 evaluated as fl(1 - fl(th'^2))
 * with |th' - th| <= et (14.3): et (2|th| + et) + u (1+et)^2 (the square) + u (1+et)^2 (1+u)
 * (the subtraction: |1 - sq'| <= max(1, sq')). */
ORC_HD double orc_fm_dtanh_err(double et, double th_abs, double u) {
    double sq = (1 + et) * (1 + et);
    return (et * (2 * th_abs + et) + u * sq + u * sq * (1 + u)) * (1 + 0x1p-40);
}

/* Kernel score underflow floor of a row (BOUNDS.md 9.1), added to every E_j:
 * sc_abs = |scale|, D = head_dim_qk, q1 = sum_d |q_d| of the row, k1max = max_j
 * sum_d |k_jd| over the kv head (both already rounded up). */
ORC_HD double orc_fm_score_floor(double tau, double sc_abs, double D, double q1, double k1max) {
    double sc = sc_abs > 1 ? sc_abs : 1;
    return tau * (sc * (2 * D + q1 + k1max) + 8) * (1 + 0x1p-40);
}

/* Exact value of an fp16 / bf16 bit pattern by arithmetic (ldexp of an exact
 * integer: exact). The CPU tier's orc_decode_fast assembles the bits instead;
 * test_gpu_row_host checks the two on all 2^16 patterns of both types. */
ORC_HD double orc_fm_decode(unsigned bits, int bf16) {
    double sign = (bits >> 15) ? -1.0 : 1.0;
    if (bf16) {
        unsigned e = (bits >> 7) & 255u, m = bits & 127u;
        if (e == 255) return m ? NAN : sign * INFINITY;
        if (e == 0) return sign * (double)m * 0x1p-133;
        return sign * ldexp((double)(m | 128u), (int)e - 134);
    }
    unsigned e = (bits >> 10) & 31u, m = bits & 1023u;
    if (e == 31) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * (double)m * 0x1p-24;
    return sign * ldexp((double)(m | 1024u), (int)e - 25);
}

// ----------------------------------------------------------------------------
// forward row weights: constants, state, per-key and per-row steps

/* Constants shared by every key of every row of a problem. */
typedef struct {
    double scale;                  /* c->scale */
    double ce_o, cm_o, ce_k, cm_k; /* orc_fm_score_coefs of the oracle / kernel model */
    double lue_k;                  /* (R + 1) * mk.lue */
    double sc_abs, D;              /* |scale|, head_dim_qk (score floor) */
    double cap;                    /* softcap (0: none; set by the CPU tier after init) */
} orc_fm_rowc;

ORC_HD void orc_fm_rowc_init(const orc_model *mk, const orc_model *mo, double scale, double D, orc_fm_rowc *k) {
    k->scale = scale;
    orc_fm_score_coefs(mo, scale, D, &k->ce_o, &k->cm_o);
    orc_fm_score_coefs(mk, scale, D, &k->ce_k, &k->cm_k);
    k->lue_k = (mk->R + 1) * mk->lue;
    k->sc_abs = fabs(scale);
    k->D = D;
    k->cap = 0;
}

/* Row state across the passes. */
typedef struct {
    int64_t n;                 /* visible keys */
    double M;                  /* max score */
    int nan, neg_inf, overflow;
    double e_floor;            /* orc_fm_score_floor of the row */
    double Eo_max, Ek_max, L;
    double eta_o_max, eta_k_max, sum_pe;
    /* orc_fm_row_mid */
    double acc_o, acc_k, pin, floor_unit, tau_w, floor_lim;
} orc_fm_rows;

ORC_HD void orc_fm_rows_init(orc_fm_rows *r) {
    memset(r, 0, sizeof *r);
    r->M = -INFINITY;
}

/* pass 1: the score of raw dot S and mask m, two roundings (in ce, cm) */
ORC_HD double orc_fm_score(const orc_fm_rowc *k, double S, double m) { return k->scale * S + m; }

/* pass 1 per visible key: fold s into the row state; an fp32 score above 2^126 may
 * overflow (section 11) */
ORC_HD void orc_fm_pass1(const orc_model *mk, orc_fm_rows *r, double s) {
    r->n++;
    if (isnan(s) || s == INFINITY) r->nan = 1;
    else if (s == -INFINITY) r->neg_inf = 1;
    else if (s > r->M) r->M = s;
    if (fabs(s) > 0x1p126 && mk->u_s >= ORC_U_F) r->overflow = 1;
}

/* after pass 1: ri->kind (ROW_*), n, M, and ovf: an UNCHECKABLE row is one whose
 * fp32 scores may overflow (|s| > 2^126, or s = -inf from finite inputs), the
 * profile's own intermediate (section 11). Returns the kind. */
ORC_HD int orc_fm_row_kind(const orc_fm_rows *r, orc_row_info *ri) {
    ri->n = r->n;
    ri->M = r->M;
    ri->ovf = 0;
    if (r->n == 0) ri->kind = ROW_MASKED;
    else if (r->nan) ri->kind = ROW_NAN;
    else if (r->neg_inf || r->M == -INFINITY || r->overflow) { ri->kind = ROW_UNCHECKABLE; ri->ovf = 1; }
    else ri->kind = ROW_NORMAL;
    return ri->kind;
}

/* pass 2 per key: score errors, oracle eo and kernel ek; A = |q|.|k|, am = |mask| */
ORC_HD void orc_fm_key_err(const orc_fm_rowc *k, const orc_fm_rows *r, double A, double am, double *eo,
                           double *ek) {
    *eo = k->ce_o * A + k->cm_o * am;
    *ek = k->ce_k * A + k->cm_k * am + r->e_floor;
}

/* pass 3 per key of score s: eta_o, eta_k (sections 3.3-3.5) */
ORC_HD void orc_fm_key_eta(const orc_model *mk, const orc_model *mo, const orc_fm_rowc *k, const orc_fm_rows *r,
                           double s, double eo, double ek, double *eta_o, double *eta_k) {
    double gap = r->M - s + 2 * r->Eo_max;
    *eta_o = orc_expm1_up(eo + 3 * mo->u_s * (gap + eo + r->Eo_max) + mo->lue);
    *eta_k = orc_expm1_up(ek + 3 * mk->u_s * (gap + ek + r->Ek_max) + k->lue_k);
}

/* pass 3 per key: the term of sum_pe */
ORC_HD double orc_fm_key_pe(const orc_fm_rows *r, double W, double eta_o) {
    return W / r->L * (1 + eta_o) * eta_o;
}

/* after pass 3: kap_o, pin and the kernel model's row factors. span_o: key
 * positions the oracle's compensated sums fold over (the tile span, orc_acc_coef's
 * n_span); span_k = hi - lo + 1, the row's key range (the kernel's sums and
 * tensor-core steps run over it, with R rescales). */
ORC_HD void orc_fm_row_mid(const orc_model *mk, const orc_model *mo, orc_fm_rows *r, orc_row_info *ri,
                           double span_o, double span_k) {
    double n = (double)r->n, L = r->L;
    r->acc_o = orc_acc_coef(mo, n, span_o, 0);
    ri->kap_o = (r->sum_pe + r->acc_o * (1 + r->eta_o_max)) * (1 + 0x1p-40);
    r->pin = 1.0 / (L * (1 - ri->kap_o)); /* true P_j <= W_j (1+eta_o) * pin */
    double R = mk->R;
    r->acc_k = orc_acc_coef(mk, n, span_k, R);
    r->floor_unit = mk->f_p * (1 + r->acc_k) * exp(2 * r->Ek_max) * (1 + r->eta_k_max) * r->pin * (1 + 0x1p-50);
    /* underflow (section 9.2): per key tau (1+eta_max)(1+u_p)(1+acc) |v_j| in w units */
    r->tau_w = mk->tau * (1 + r->eta_k_max) * (1 + mk->u_p) * (1 + r->acc_k) * (1 + 0x1p-50);
    /* P rounding floor applies where w (1-eta_o)(1-eta_k) e^-Ek < nmin */
    r->floor_lim = mk->nmin_p * exp(r->Ek_max) * (1 + 0x1p-50);
}

/* pass 4 per key: kernel weight C and oracle weight CO of |v_j|; returns p * eta_k,
 * the key's term of kap_k */
ORC_HD double orc_fm_key_weights(const orc_model *mk, const orc_fm_rows *r, double W, double eta_o,
                                 double eta_k, double *C, double *CO) {
    double p = W * (1 + eta_o) * r->pin;
    double fl = 0;
    if (mk->u_p > 0 && W * (1 - eta_o) * (1 - eta_k) < r->floor_lim) fl = r->floor_unit;
    *C = p * (eta_k + (1 + eta_k) * (mk->u_p + r->acc_k * (1 + mk->u_p))) + fl + r->tau_w * r->pin;
    *CO = p * (eta_o + (1 + eta_o) * r->acc_o);
    return p * eta_k;
}

/* after pass 4: kap_k, floor_n and the LSE with its bounds (section 4). The row
 * sum l is formed from the UNROUNDED P (flash_api.h: p_rounded rounds P before
 * P.V, dV and dP only), so P rounding does not enter the denominator. */
ORC_HD void orc_fm_row_end(const orc_model *mk, const orc_model *mo, const orc_fm_rows *r, double sum_pek,
                           orc_row_info *ri) {
    double n = (double)r->n, R = mk->R;
    ri->L = r->L;
    ri->kap_k = sum_pek + r->acc_k * (1 + r->eta_k_max) + r->tau_w * (2 * n + 2 * R) * r->pin;
    ri->floor_n = r->tau_w * (3 * n + R) * r->pin;
    ri->logL = log(r->L);
    ri->lse = ri->M + ri->logL;
    double lk = -log1p(-ri->kap_o);
    ri->lse_orc = (lk + (mo->u_log + 4 * mo->u_s) * (fabs(ri->M) + r->Eo_max + fabs(ri->logL) + lk)) *
                  ORC_SAFETY;
    if (ri->kap_k >= 1) { ri->lse_bound = INFINITY; return; }
    double lkk = -log1p(-ri->kap_k);
    double bk = lkk + (mk->u_log + 4 * mk->u_s) * (fabs(ri->M) + r->Ek_max + fabs(ri->logL) + lkk);
    ri->lse_bound = (bk + mk->u_lse * (fabs(ri->lse) + ri->lse_orc + bk) + 3 * mk->tau) * ORC_SAFETY;
}

/* Section 11, a ROW_NORMAL row of n visible keys over a key range of span_k
 * positions: 1 if the kernel's unnormalised numerator sum_j w'_j v_jd may overflow
 * fp32 (w' <= 1 + u_e: the exp of a computed score minus the running max of
 * computed scores is <= 0), vmax = max |v_jd| over the kv head's finite rows. */
ORC_HD int orc_fm_pv_overflow(const orc_model *mk, double n, double span_k, double vmax) {
    double accm = orc_acc_coef(mk, n, span_k, mk->R);
    return n * vmax * (1 + mk->u_e) * (1 + mk->u_p) * (1 + accm) * (1 + 0x1p-20) >= ORC_F32_OVF;
}

#endif /* FLASHCHECK_ORC_FORMULAS_H */
