/* orc_formulas.h: the scalar bound formulas of the certified double tier, the one
 * definition that the CPU tier (orc_util.c, orc_fwd.c, orc_bwd.c) and the GPU tier
 * (oracle/gpu/orc_gpu_fwd.cu, orc_gpu.c) both call. Host and device inline
 * functions (ORC_HD); included by orc_internal.h after orc_model and orc_row_info.
 * Not part of the API; nothing here is shared with any kernel.
 *
 * What it owns: the error coefficients (orc_gamma, orc_acc_coef with the
 * tensor-core model of BOUNDS.md 10.2), the score-stage coefficients
 * (orc_fm_score_coefs, section 2), expm1_up, the score underflow floor (9.1),
 * the exact fp16/bf16 decode by arithmetic and the RN-even rounding to them
 * (orc_fm_round16, for the store bound of BOUNDS.md 5.8), the per-key and per-row steps of the
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

/* Knuth's TwoSum (RN, no contraction): *s + *e = a + b exactly for a finite sum. A
 * non-finite sum carries no error term (*e = 0): Inf - Inf in the correction would turn
 * an infinite sum (an infinite input, BOUNDS.md 11.1) into NaN. The one definition of the
 * CPU tier's two_sum (orc_internal.h) and the GPU tier's compensated folds (orc_gpu_fwd.cu,
 * orc_gpu_bwd.cu): test_gpu_row_host checks the non-finite cases. */
ORC_HD void orc_fm_two_sum(double a, double b, double *s, double *e) {
    double x = a + b, bb = x - a;
    *e = isfinite(x) ? (a - (x - bb)) + (b - bb) : 0.0;
    *s = x;
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

/* x rounded to nearest (ties to even) to fp16 (bf16 = 0) or bf16 (bf16 = 1), as a double:
 * +-Inf past the largest finite value (RN overflow), NaN kept, signed zeros kept. One
 * rounding from double (rint of an exact power-of-two scaling: exact but for rint's own RN);
 * the CPU tier's orc_encode + orc_decode give the same value (test_gpu_bwd_host checks it on
 * ties, subnormals, overflow and random doubles of both types). */
ORC_HD double orc_fm_round16(double x, int bf16) {
    if (!isfinite(x)) return x;
    int mant = bf16 ? 7 : 10, emin = bf16 ? -126 : -14;
    double maxf = bf16 ? 0x1.fep127 : 65504.0;
    double a = fabs(x), q;
#ifdef __CUDA_ARCH__
    if (a < ldexp(1.0, emin)) /* subnormal grid: ulp 2^(emin - mant) */
        q = ldexp(rint(ldexp(a, mant - emin)), emin - mant);
    else {
        int E = ilogb(a);
        q = ldexp(rint(ldexp(a, mant - E)), E - mant);
    }
#else
    /* the host: the same value without libm (test_round16 compares the two). Subnormal grid:
     * a 2^(mant - emin) < 2^mant and the scalings are exact powers of two; the integer is
     * rounded by adding and removing 2^52 (RN, ties to even, as rint in the default mode).
     * Else a is a normal double: its significand rounded to mant + 1 bits in its bits (ties
     * to even; a carry moves into the exponent, to +Inf past the largest double, as ldexp). */
    if (a < (bf16 ? 0x1p-126 : 0x1p-14)) {
        double y = a * (bf16 ? 0x1p133 : 0x1p24);
        y = (y + 0x1p52) - 0x1p52;
        q = y * (bf16 ? 0x1p-133 : 0x1p-24);
    } else {
        uint64_t u;
        memcpy(&u, &a, sizeof u);
        int sh = 52 - mant;
        u += ((uint64_t)1 << (sh - 1)) - 1 + ((u >> sh) & 1);
        u &= ~(((uint64_t)1 << sh) - 1);
        memcpy(&q, &u, sizeof q);
    }
#endif
    if (q > maxf) q = INFINITY;
    return copysign(q, x);
}

/* Bound on |stored - exact| of an output rounded (RN) to fp16 / bf16 when stored, from the
 * reference ref (|ref - exact| <= e) and pre >= |y - exact|, y the kernel's value before the
 * store (BOUNDS.md 5.8): the stored value is RN(y) with y in [lo, hi] = ref -+ (e + pre), so
 * it lies in [RN(lo), RN(hi)] (RN is monotone), and 0 joins that set when the profile flushes
 * (flush = 1) and y may lie below 2^-126. Returns min(generic, max(RN(hi) - ref, ref - RN(lo))
 * + e): generic is the relative-plus-floor store term's bound, kept where RN overflows or an
 * operand is not finite. e gets 2^-900 for the double tier's underflow (5.8). The CPU tier's
 * orc_store_bound (orc_internal.h) is this function. */
ORC_HD double orc_fm_store_bound(double ref, double e, double pre, double generic, int bf16, int flush) {
    if (!isfinite(ref) || !isfinite(e) || !isfinite(pre) || !(generic > 0) || !isfinite(generic)) return generic;
    /* the double tier's errors are relative (section 1): below 2^-1022 each of its < 2^40 operations
     * of an element may lose 2^-1074 more, magnified by < 2^128 (the largest input): < 2^-906 */
    e += 0x1p-900;
    /* w >= e + pre, and its slack covers the rounding of ref -+ w to double (<= 2^-53 (|ref| + w)) */
    double w = (e + pre) * (1 + 0x1p-40) + fabs(ref) * 0x1p-52;
    double hi = ref + w, lo = ref - w;
    double rh = orc_fm_round16(hi, bf16), rl = orc_fm_round16(lo, bf16);
    if (!isfinite(rh) || !isfinite(rl)) return generic;
    if (flush && lo < 0x1p-126 && hi > -0x1p-126) {
        if (rh < 0) rh = 0;
        if (rl > 0) rl = 0;
    }
    double d = rh - ref > ref - rl ? rh - ref : ref - rl;
    /* the difference of two doubles errs by <= 2^-53 of it; then the oracle's error */
    double b = ((d > 0 ? d : 0) * (1 + 0x1p-50) + e) * ORC_SAFETY;
    return b < generic ? b : generic;
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

// ----------------------------------------------------------------------------
// backward (BOUNDS.md sections 5, 9.3-9.5, 10.3-10.5, 11): the per-(i, j) dS terms,
// the dQ / dK / dV sum coefficients and the final element bounds, written from
// orc_bwd.c's phase A / phase B / finalize term by term. The GPU tier
// (oracle/gpu/orc_gpu_bwd.cu, orc_gpu_bwd.c) calls these; orc_bwd.c calls
// orc_fm_dse_kernel and (through orc_store_bound) orc_fm_store_bound and has the
// rest inline (the same expressions in the same order: test_gpu_bwd_host).

/* Constants of a backward problem. */
typedef struct {
    double ce_o, cm_o, ce_k, cm_k; /* orc_fm_score_coefs of the oracle / kernel model */
    double gdv_o, gdv_k;           /* dP / D_i dots over Dv: oracle gamma_{Dv+1}, kernel acc_coef */
    double sc;                     /* |scale| */
    double f_ds;                   /* dS rounding floor in dS units (10.3) */
    double thr32, thrdt;           /* fp32 / dtype overflow thresholds (section 11) */
    double th_d;                   /* relative error of the roundings after dP' - D' (5.9) */
} orc_fm_bwdc;

ORC_HD void orc_fm_bwdc_init(const orc_model *mk, const orc_model *mo, double scale, double D, double Dv,
                             double thrdt, orc_fm_bwdc *k) {
    orc_fm_score_coefs(mo, scale, D, &k->ce_o, &k->cm_o);
    orc_fm_score_coefs(mk, scale, D, &k->ce_k, &k->cm_k);
    k->gdv_o = orc_gamma(Dv + 1, ORC_U_D);
    k->gdv_k = orc_acc_coef(mk, Dv, Dv, 0);
    k->sc = fabs(scale);
    /* the scale folded into dS before its rounding: the rounding's absolute floor is
     * f_ds in units of scale*dS, f_ds / |scale| in dS units */
    double sc = k->sc;
    k->f_ds = mk->ds_fold == 0 ? mk->f_ds : mk->ds_fold == 1 ? mk->f_ds / sc : mk->f_ds * (sc < 1 ? 1 / sc : 1);
    k->thr32 = ORC_F32_OVF;
    k->thrdt = thrdt;
    /* the subtraction, the product, the fold, the dS store (5.9) */
    k->th_d = pow(1 + mk->u_s, 3) * (1 + mk->u_ds) * (1 + 0x1p-50) - 1;
}

/* Row state of the backward (one query row of a ROW_NORMAL forward row). */
typedef struct {
    double lse, lse_orc;   /* exact-forward LSE and its oracle error (orc_row_info) */
    double Eo_max;         /* max over visible keys of ce_o A + cm_o |m| */
    double efl;            /* kernel score underflow floor (9.1) */
    double Dorc;           /* D_i = sum_d dO O (oracle O) */
    double dD_o, dD_k;     /* |D - exact| oracle; |D' - D| kernel (replaced for d_from_p) */
    double dlse;           /* >= |LSE the kernel used - lse| (5.0) */
    double dOaOg;          /* sum |dO| |O_given| */
    double h_floor;        /* underflow of dP, D and their difference (9.3) */
} orc_fm_brow;

/* The row's D-stage terms from its sums over d (orc_bwd.c phase A): Dorc = sum dO O,
 * dOaO = sum |dO||O|, dOdO = sum |dO| (|O_given - O| + eO), dOaOg = sum |dO||O_given|,
 * dO1 = sum |dO|, Og1 = sum |O_given|, dOeO = sum |dO| eO; v1max (rounded up) of the kv
 * head; lse_g the given LSE, not read when lse_unknown (orc_options.lse_unknown: the
 * kernel's LSE is any within the forward bound, 5.0). Returns 1 if the row cannot be
 * bounded (dlse or dD_k not finite: inconsistent inputs, or an infinite LSE bound). */
ORC_HD int orc_fm_brow_init(const orc_model *mk, const orc_fm_bwdc *k, const orc_row_info *R, double Dv,
                            double Dorc, double dOaO, double dOdO, double dOaOg, double dO1, double Og1,
                            double dOeO, double v1max, int lse_unknown, double lse_g, orc_fm_brow *br) {
    br->lse = R->lse;
    br->lse_orc = R->lse_orc;
    br->Dorc = Dorc;
    br->dOaOg = dOaOg;
    br->h_floor = mk->tau * (4 * Dv + 2 * dO1 + v1max + Og1 + 1) * (1 + 0x1p-40);
    /* dlse >= |LSE the kernel used - exact LSE| (5.0): the given LSE's distance from the
     * oracle's plus the oracle's error; with lse_unknown the forward LSE bound (section 4) */
    br->dlse = lse_unknown ? R->lse_bound : fabs(lse_g - R->lse) + R->lse_orc;
    br->dD_k = dOdO + k->gdv_k * dOaOg;
    br->dD_o = dOeO + k->gdv_o * dOaO;
    return !isfinite(br->dlse) || !isfinite(br->dD_k);
}

/* Per visible key of score s, A = |q|.|k|, am = |mask|: the exact P = exp(s - lse),
 * its oracle relative error pio, upper bound Pup, the kernel's relative error pik
 * and absolute floor fP (9.3). */
ORC_HD void orc_fm_bkey_p(const orc_model *mk, const orc_model *mo, const orc_fm_bwdc *k, const orc_fm_brow *br,
                          double s, double A, double am, double *P, double *pio, double *Pup, double *pik,
                          double *fP) {
    double Eo = k->ce_o * A + k->cm_o * am;
    double Ek = k->ce_k * A + k->cm_k * am + br->efl;
    double gap = br->lse - s + 2 * br->Eo_max + br->lse_orc;
    double p = exp(s - br->lse);
    double po = orc_expm1_up(Eo + br->lse_orc + 3 * mo->u_s * (gap + Eo) + mo->lue);
    double pu = p / (1 - po);
    double pk = orc_expm1_up(Ek + br->dlse + 3 * mk->u_s * (gap + Ek + br->dlse) + mk->lue);
    double f = 0;
    if (mk->u_p > 0 && p * (1 - po) * (1 - pk) < mk->nmin_p) f = mk->f_p;
    f += mk->tau; /* exp result below 2^-126 flushed (9.3) */
    *P = p; *pio = po; *Pup = pu; *pik = pk; *fP = f;
}

/* A kernel forming D from P and dP (d_from_p, 10.3): the key's terms of the bound on
 * |P' dP' - P dP| (*err) and on |P' dP'| (*abs). dP = dO.v, bij = |dO|.|v|. */
ORC_HD void orc_fm_bkey_dsum(const orc_model *mk, const orc_fm_bwdc *k, const orc_fm_brow *br, double Pup,
                             double pik, double fP, double dP, double bij, double *err, double *abs_) {
    double piP = (1 + pik) * (1 + mk->u_p) - 1;
    double dPm = fabs(dP) + k->gdv_o * bij; /* >= |dP| */
    double edp = k->gdv_k * bij + mk->u_dp * (dPm + k->gdv_k * bij) + mk->f_dp + br->h_floor;
    *err = (Pup * piP + fP) * (dPm + edp) + Pup * edp;
    *abs_ = (Pup * (1 + piP) + fP) * (dPm + edp);
}

/* d_from_p: |D' - D| from the row sums of orc_fm_bkey_dsum over the row's n visible
 * keys, span_k = hi - lo + 1 (D' = fl(sum_j fl(P' dP')): each product one fp32
 * rounding, 2^-23 covers RN and truncation). */
ORC_HD double orc_fm_brow_dfromp(const orc_model *mk, double n, double span_k, double err_sum, double abs_sum) {
    return (err_sum + (orc_acc_coef(mk, n, span_k, 0) + 0x1p-23) * abs_sum) * (1 + 0x1p-40) + mk->tau * (2 * n + 1);
}

/* The kernel's dS error bound of one (i, j) (BOUNDS.md 5.3): P error Pup piP + fP against
 * gup >= |dP - D|, |P'| <= Pk against hk_raw >= |(dP' - D') - (dP - D)| before the subtraction's
 * rounding, the subtraction and the product (u_s), the flushed product, the dS rounding. */
ORC_HD double orc_fm_dse_kernel(const orc_model *mk, double Pup, double piP, double fP, double Pk, double gup,
                                double hk_raw, double f_ds) {
    double hk = hk_raw + mk->u_s * (gup + hk_raw);
    double e = Pup * piP * gup + Pk * hk + fP * gup;
    e += mk->u_s * Pk * (gup + hk) * (1 + mk->u_s);
    e += 2 * mk->tau; /* the product P (dP - D) flushed */
    if (mk->u_ds > 0) e += mk->u_ds * (Pup * gup + e) + f_ds;
    return e;
}

/* The per-(i, j) values of a visible key (orc_bwd.c's matrices M_P .. M_PPIO, and its
 * dQ weight T_E as DSEQ). */
enum { ORC_BM_P, ORC_BM_DS, ORC_BM_DSE, ORC_BM_DSM, ORC_BM_DSEO, ORC_BM_PPI, ORC_BM_P1, ORC_BM_PPIO, ORC_BM_DSEQ,
       ORC_BM_N };

/* Per visible key: dS = P (dP - D), its oracle error DSEO and kernel error DSE, DSM >=
 * |dS| + both, the dV weights PPI, P1, PPIO (sections 5, 9.3, 10.3) and dQ's kernel
 * weight DSEQ: DSE with the row-common part of D' - D taken out (summed once per element
 * against |sum_j P K|, orc_fm_dq_common) but for its per-key remainder dD (|P16' - P| +
 * th |P16'|) (5.9). Returns 1 if an intermediate of (i, j) may overflow (section 11). */
ORC_HD int orc_fm_bkey_ds(const orc_model *mk, const orc_model *mo, const orc_fm_bwdc *k, const orc_fm_brow *br,
                          double P, double pio, double Pup, double pik, double fP, double dP, double bij,
                          double *m) {
    double gdv_o = k->gdv_o, gdv_k = k->gdv_k, sc = k->sc;
    double piP = (1 + pik) * (1 + mk->u_p) - 1;
    double dSv = P * (dP - br->Dorc);
    double gup = fabs(dP - br->Dorc) + gdv_o * bij + br->dD_o;
    /* oracle dS error */
    double ho = gdv_o * bij + br->dD_o + ORC_U_D * gup;
    double dSe_o = Pup * pio * gup + Pup * (1 + pio) * ho + ORC_U_D * fabs(dSv);
    dSe_o *= ORC_SAFETY;
    /* kernel dS error: dP' (accumulation, its rounding to the dtype when dp_rounded), D',
     * the subtraction */
    double hk0 = gdv_k * bij + br->h_floor + mk->u_dp * (fabs(dP) + (gdv_o + gdv_k) * bij) + mk->f_dp;
    double Pk = Pup * (1 + piP) + fP;
    double dSe_k = orc_fm_dse_kernel(mk, Pup, piP, fP, Pk, gup, hk0 + br->dD_k, k->f_ds);
    /* section 11: P', dP', D', dP' - D', dS' against fp32's threshold, dP' and dS' against
     * the dtype's when rounded to it (dS' scaled when the scale is folded) */
    int o;
    {
        double thr32 = k->thr32, thrdt = k->thrdt;
        double dPb = (fabs(dP) + (gdv_o + gdv_k) * bij) * (1 + mk->u_dp) + mk->f_dp;
        double Db = (mk->d_from_p ? br->dD_k + fabs(br->Dorc) : br->dOaOg * (1 + gdv_k)) * (1 + 0x1p-40);
        double dSb = fabs(dSv) + dSe_o + dSe_k, dsc = mk->ds_fold ? (sc > 1 ? sc : 1) : 1;
        o = !(Pk < thr32) || !(dPb < thr32) || !(Db < thr32) || !(dPb + Db < thr32) || !(dSb * dsc < thr32) ||
            (mk->u_dp > 0 && !(dPb < thrdt)) ||
            (mk->u_ds > 0 && !(dSb * (mk->ds_fold == 1 ? sc : mk->ds_fold ? dsc : 1) < thrdt));
    }
    m[ORC_BM_P] = P;
    m[ORC_BM_DS] = dSv;
    m[ORC_BM_DSE] = dSe_k * ORC_SAFETY;
    m[ORC_BM_DSM] = fabs(dSv) + dSe_o + dSe_k;
    m[ORC_BM_DSEO] = dSe_o;
    m[ORC_BM_PPI] = (Pup * pik + fP) * ORC_SAFETY; /* x (1 + acc of the column) in the dV weight */
    m[ORC_BM_P1] = Pup * (1 + pik) * ORC_SAFETY;
    m[ORC_BM_PPIO] = Pup * pio * ORC_SAFETY;
    m[ORC_BM_DSEQ] = (orc_fm_dse_kernel(mk, Pup, piP, fP, Pk, gup, hk0, k->f_ds) +
                      br->dD_k * (Pup * piP + fP + k->th_d * Pk)) * ORC_SAFETY;
    return o;
}

/* dQ's row-common D term (5.9): A_d = sum_j P_ij K_jd is summed in double with per-key
 * error weight (PPIO + cA P1) ORC_SAFETY (the oracle's P error Pup pio, and cA Pup for the
 * sum), cA = orc_fm_dq_acoef of the row; aerr = that weight's sum with |K_jd|. Returns the
 * term added to the dQ element's kernel weight sum (orc_fm_grad_elem's bsum). */
ORC_HD double orc_fm_dq_acoef(double n, double span) { return orc_gamma(n + span / ORC_BLK + 18, ORC_U_D); }
ORC_HD double orc_fm_dq_common(double dD_k, double asum, double aerr) { return dD_k * (fabs(asum) + aerr); }

/* dQ row of n visible keys over key range span_k = hi - lo + 1, the oracle's compensated
 * sum over span_o positions: kernel coefficient kQ (accumulation, n_bq fp32 roundings
 * of the scale multiply / unfused graph (10.5), the scale's error) and oracle kQo. The
 * per-key weights of |K_jd| are DSE + kQ DSM (kernel) and DSEO + kQo DSM (oracle). */
ORC_HD void orc_fm_dq_coefs(const orc_model *mk, const orc_model *mo, double n, double span_k, double span_o,
                            double *kQ, double *kQo) {
    *kQ = (1 + orc_acc_coef(mk, n, span_k, 0)) * pow(1 + mk->u_s, mk->n_bq) * (1 + mk->sigma) - 1;
    *kQo = (1 + orc_acc_coef(mo, n, span_o, 0)) * (1 + ORC_U_D) * (1 + mo->sigma) - 1;
}

/* Underflow floor of a dQ row / dK column (9.4): operand |dS| tau, product, add and
 * scale multiply per term, final scale multiply and store; sdsm = sum DSM, n terms. */
ORC_HD double orc_fm_dqk_floor(const orc_model *mk, double sc_abs, double sdsm, double n) {
    double smax = sc_abs > 1 ? sc_abs : 1;
    return mk->tau * (sc_abs * sdsm * (1 + 0x1p-40) + n * (2 * smax + 1) + 3);
}

/* Underflow floor of a dV column (9.5); sp = sum over rows of an upper bound on P'. */
ORC_HD double orc_fm_dv_floor(const orc_model *mk, double sp, double nn) {
    return mk->tau * (sp * (1 + 0x1p-40) + 2 * nn + 2);
}

/* Section 11: the fp32 dQ accumulator |sum_j dS' K| <= sdsm kmax (scaled first when the
 * scale is folded into dS). 1: may overflow. */
ORC_HD int orc_fm_dq_acc_ovf(const orc_model *mk, double sc_abs, double sdsm, double kmax, double kQ) {
    return !(sdsm * kmax * (1 + kQ) * (mk->ds_fold && sc_abs > 1 ? sc_abs : 1) < ORC_F32_OVF);
}

/* Column coefficients of dK, dV (phase B) for a column seen by nn = ncol + G terms: the
 * kernel's sum over spk = G Sq + G positions, the oracle's compensated sum over sp
 * positions (its own blocks). */
typedef struct {
    double kK, kKo, accV, accVo, cp;
} orc_fm_colc;

ORC_HD void orc_fm_col_coefs(const orc_model *mk, const orc_model *mo, double nn, double spk, double sp,
                             orc_fm_colc *cc) {
    cc->kK = (1 + orc_acc_coef(mk, nn, spk, 0)) * pow(1 + mk->u_s, mk->n_bq) * (1 + mk->sigma) - 1;
    cc->kKo = (1 + orc_acc_coef(mo, nn, sp, 0)) * (1 + ORC_U_D) * (1 + mo->sigma) - 1;
    cc->accV = orc_acc_coef(mk, nn, spk, 0);
    cc->accVo = orc_acc_coef(mo, nn, sp, 0);
    cc->cp = mk->u_p + cc->accV * (1 + mk->u_p);
}

/* The weights of |Q_id| (dK) and |dO_id| (dV) of one visible (i, j), m = its
 * orc_fm_bkey_ds values. */
ORC_HD double orc_fm_wk(const orc_fm_colc *cc, double dse, double dsm) { return dse + cc->kK * dsm; }
ORC_HD double orc_fm_wko(const orc_fm_colc *cc, double dseo, double dsm) { return dseo + cc->kKo * dsm; }
ORC_HD double orc_fm_wv(const orc_fm_colc *cc, double ppi, double p1) { return ppi * (1 + cc->accV) + p1 * cc->cp; }
ORC_HD double orc_fm_wvo(const orc_fm_colc *cc, double ppio, double p1) { return ppio + p1 * cc->accVo; }
/* the column's sum of an upper bound on P'_ij (9.5) */
ORC_HD double orc_fm_sp_term(const orc_model *mk, double ppi, double p1) { return p1 * (1 + mk->u_p) + ppi; }

/* GQA per-head rounding (BOUNDS.md 10.4), orc_bwd.c's gqa_rounding: the bound before the
 * final store of a dK/dV element of a group of G > 1 heads reduced as mk->gqa says.
 * pre: the fused bound; habs: sum over heads of an upper bound on the oracle's per-head
 * part; eo: the column's oracle error; u_in = orc_unit_roundoff(dtype), bf16: 1 for bf16. */
ORC_HD double orc_fm_gqa_rounding(const orc_model *mk, double G, double u_in, int bf16, double pre, double habs,
                                  double eo) {
    if (G <= 1 || mk->gqa == FA_GQA_FUSED) return pre;
    double f_in = bf16 ? 0x1p-134 : 0x1p-25;
    double X = habs * (1 + 0x1p-50) + 2 * G * eo;
    double rnd = u_in * (X + pre) + G * (f_in + mk->tau);
    double ug = mk->gqa == FA_GQA_ROUND_SUM32 ? 0x1p-23 : u_in;
    double sum = orc_gamma(G, ug) * (1 + u_in) * (X + pre + G * f_in + G * mk->tau);
    if (mk->gqa == FA_GQA_ROUND_SUM16) sum += G * (f_in + mk->tau);
    return (pre + rnd + sum) * (1 + 0x1p-40);
}

/* Head boundaries of a column sum (10.4): the part of a head is the running compensated
 * sum after it minus the one before it; |part| + 2^-51 (|after| + |before|) bounds the
 * oracle's own per-head part from above. Returns the term added to habs. */
ORC_HD double orc_fm_head_part(double now, double before) {
    return fabs(now - before) + 0x1p-51 * (fabs(now) + fabs(before));
}

/* A gradient element from its sums (sum = hi + lo of sum w x, bsum = sum kernel weight
 * |x|, osum = sum oracle weight |x|), the output scale s (scale for dQ, dK; 1 for dV),
 * sumsafe = ORC_SAFETY (1 + gamma_{n+16}(2^-53)), the underflow floor fl, the dtype (bf16)
 * and, for dK / dV, the GQA rounding (gqa: 1, with G, u_in, habs = the per-head sum
 * bound). Out: value, oracle error, the bound before the store (*pre: the GQA
 * rounding included; section 11 tests it) and the kernel bound, the RN store's
 * reachable values (orc_fm_store_bound, 5.8) when the output is rounded. */
ORC_HD void orc_fm_grad_elem(const orc_model *mk, double s, double sum, double bsum, double osum, double sumsafe,
                             double fl, int gqa, double G, double u_in, int bf16, double habs, double *val,
                             double *eo, double *pre_out, double *bound) {
    double v = s * sum;
    double e = fabs(s) * osum * sumsafe * ORC_SAFETY;
    double pre = fabs(s) * bsum * sumsafe;
    if (gqa) pre = orc_fm_gqa_rounding(mk, G, u_in, bf16, pre, fabs(s) * habs, e);
    *val = v;
    *eo = e;
    *pre_out = pre;
    double bd = (pre + mk->u_out * (fabs(v) + e + pre) + mk->f_out + fl) * ORC_SAFETY;
    if (mk->u_out > 0) bd = orc_fm_store_bound(v, e, (pre + fl) * ORC_SAFETY, bd, bf16, mk->tau >= 0x1p-126);
    *bound = bd;
}

/* The flags of a reference element's value (orc_value_flags of orc_internal.h, callable on
 * the device): NaN, Inf or none. */
ORC_HD uint8_t orc_fm_value_flags(double ref) {
    return isnan(ref) ? ORC_F_NAN : isinf(ref) ? ORC_F_INF : 0;
}

// ----------------------------------------------------------------------------
// a forward row's outputs (orc_fwd_row_out's per-element logic; both tiers)

/* One O element from the row sums num = sum w v, bsum = sum C |v|, osum = sum CO |v|:
 * value, oracle error bound, kernel bound (BOUNDS.md 3.6). */
ORC_HD void orc_fwd_elem(const orc_model *mk, const orc_model *mo, const orc_row_info *R,
                                double num, double bsum, double osum, double *O, double *eo,
                                double *bound) {
    double ko = R->kap_o, kk = R->kap_k;
    double sumsafe = ORC_SAFETY * (1 + orc_gamma((double)R->n + 16, ORC_U_D));
    double o = num / R->L;
    double e = (osum * sumsafe + fabs(o) * ko) / (1 - ko);
    e = (e + mo->u_div * (fabs(o) + e)) * ORC_SAFETY;
    double Om = fabs(o) + e;
    double pre = (bsum * sumsafe + R->floor_n + Om * kk) / (1 - kk);
    double dv = mk->u_div * (Om + pre) + mk->tau;               /* division, its underflow */
    double out = mk->u_out * (Om + pre + dv) + mk->f_out + mk->tau; /* store, its underflow */
    *O = o;
    *eo = e;
    *bound = kk < 1 ? (pre + dv + out) * ORC_SAFETY : INFINITY;
}

/* One O element of a row (orc_fwd_row_out): value, orc_err, kernel bound, flags. A masked
 * row's: 0 exactly (ORC_F_MASKED_ROW); a NaN or uncheckable row's: NaN (its flags, with
 * ORC_F_OVERFLOW where R->ovf). A normal row's: orc_fwd_elem, uncheckable where kap_k >= 1
 * or the bound is not finite, ORC_F_INF_INPUT for an infinite value (an infinite v_jd with
 * positive weight, BOUNDS.md 11.1), ORC_F_OVERFLOW where R->ovf (section 11). Returns 1
 * where a checkable element's orc_err exceeds ratio * bound (escalation at reference time). */
ORC_HD int orc_fm_fwd_out_elem(const orc_model *mk, const orc_model *mo, const orc_row_info *R, double num,
                               double bsum, double osum, double ratio, double *ref, double *oe, double *bound,
                               uint8_t *flags) {
    if (R->kind == ROW_MASKED) {
        *ref = 0; *bound = 0; *oe = 0; *flags = ORC_F_MASKED_ROW;
        return 0;
    }
    if (R->kind != ROW_NORMAL) {
        *ref = NAN; *bound = NAN; *oe = NAN;
        *flags = (uint8_t)(R->kind == ROW_NAN ? ORC_F_NAN : ORC_F_UNCHECKABLE | (R->ovf ? ORC_F_OVERFLOW : 0));
        return 0;
    }
    double O;
    orc_fwd_elem(mk, mo, R, num, bsum, osum, &O, oe, bound);
    *ref = O;
    uint8_t f = orc_fm_value_flags(O);
    if (!(R->kap_k < 1) || !isfinite(*bound)) f |= ORC_F_UNCHECKABLE;
    if (isinf(O)) f |= ORC_F_INF_INPUT;
    if (R->ovf) f |= ORC_F_OVERFLOW;
    *flags = f;
    return !(f & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE)) && *oe > ratio * *bound;
}

/* The LSE of a row (orc_fwd_row_out): a masked row's is the sink exactly when the head has
 * one (has_sink; 14.2: a kernel's log2 round trip of the sink, <= 4 roundings of u_s, and
 * the fp32 store), else the declared convention mk->lse_empty (BOUNDS.md 10.6) with
 * ORC_F_MASKED_ROW; a NaN / uncheckable row's NaN (the O elements' flags); a normal row's
 * R's LSE, uncheckable where its bound is not finite. Returns 1 for a normal row whose
 * LSE orc_err exceeds ratio * bound. */
ORC_HD int orc_fm_fwd_lse(const orc_model *mk, const orc_row_info *R, int has_sink, double sink, double ratio,
                          double *ref, double *oe, double *bound, uint8_t *flags) {
    if (R->kind == ROW_MASKED) {
        if (has_sink) {
            *ref = sink;
            *oe = 0;
            *bound = isfinite(sink) ? ((4 * mk->u_s + mk->u_lse) * fabs(sink) * (1 + 0x1p-40) + 3 * mk->tau) * ORC_SAFETY
                                    : 0;
            *flags = orc_fm_value_flags(sink);
            return 0;
        }
        *ref = mk->lse_empty; *oe = 0; *bound = 0;
        *flags = (uint8_t)(ORC_F_MASKED_ROW | orc_fm_value_flags(mk->lse_empty));
        return 0;
    }
    if (R->kind != ROW_NORMAL) {
        *ref = NAN; *bound = NAN; *oe = NAN;
        *flags = (uint8_t)(R->kind == ROW_NAN ? ORC_F_NAN : ORC_F_UNCHECKABLE | (R->ovf ? ORC_F_OVERFLOW : 0));
        return 0;
    }
    *ref = R->lse;
    *oe = R->lse_orc;
    *bound = R->lse_bound;
    *flags = (uint8_t)(orc_fm_value_flags(R->lse) | (isfinite(R->lse_bound) ? 0 : ORC_F_UNCHECKABLE));
    return R->lse_orc > ratio * R->lse_bound;
}

#endif /* FLASHCHECK_ORC_FORMULAS_H */
