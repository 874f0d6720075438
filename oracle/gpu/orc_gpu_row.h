/* orc_gpu_row.h: the row-weight arithmetic of the GPU tier (oracle/gpu), written
 * once for the device and for the host (ORC_HD). It is the per-key and per-row
 * part of orc_row_weights (oracle/orc_fwd.c, BOUNDS.md sections 3, 4 and 9)
 * split into the passes a warp makes over a row's keys:
 *
 *   pass 1  s_j = scale * S_j + m_j                     -> n, M, row kind
 *   pass 2  eo_j, ek_j; W_j = exp(s_j - M); L          -> Eo_max, Ek_max, L
 *   pass 3  eta_o_j, eta_k_j; sum_pe                   -> kap_o, pin (orc_gpu_row_mid)
 *   pass 4  C_j, CO_j; sum_pek                         -> kap_k, floor_n, LSE (orc_gpu_row_end)
 *
 * Every formula is the CPU tier's, operation for operation (no contraction:
 * the device code is compiled with -fmad=false, the host with
 * -ffp-contract=off), so with the same exp/log the values are bitwise those of
 * orc_row_weights; test_gpu_row_host checks that against the CPU functions, and
 * fails when the CPU formula changes and this copy does not. On the device only
 * summation orders differ: L (32-key blocks aligned to key positions instead of
 * 32 visible keys; the same error coefficient covers both), and the row sums of
 * bound terms (per lane, then a tree; covered by the same evaluation factors).
 * BOUNDS.md, "GPU tier".
 *
 * Rounding: as stated at each formula in orc_fwd.c; exp/log/expm1/log1p are
 * CUDA's on the device (<= 1 ulp, BOUNDS.md "GPU tier"), glibc's on the host. */
#ifndef FLASHCHECK_ORC_GPU_ROW_H
#define FLASHCHECK_ORC_GPU_ROW_H

#ifdef __CUDACC__
#define ORC_HD __host__ __device__ static inline
#else
#define ORC_HD static inline
#endif

/* orc_model and orc_row_info (orc_internal.h) must be declared before this. */

/* = orc_gamma */
ORC_HD double orc_gpu_gamma(double n, double u) {
    double nu = n * u;
    return nu >= 1.0 ? INFINITY : nu / (1.0 - nu);
}

/* = orc_acc_coef: plain sums (kernel), or plain blocks of <= ORC_BLK positions
 * folded with TwoSum (oracle) */
ORC_HD double orc_gpu_acc_coef(const orc_model *m, double n_terms, double n_span) {
    if (!m->compensated) return orc_gpu_gamma(n_terms, m->u_acc);
    double mb = n_terms < ORC_BLK ? n_terms : ORC_BLK;
    double K = ceil(n_span / ORC_BLK) + 1;
    double gk = orc_gpu_gamma(K, m->u_acc);
    return orc_gpu_gamma(mb + 1, m->u_acc) + 2 * gk * gk;
}

/* = orc_expm1_up */
ORC_HD double orc_gpu_expm1_up(double x) {
    return (x <= 0.5 ? x + x * x : expm1(x)) * (1.0 + 0x1p-50);
}

/* = orc_score_floor; sc_abs = |scale|, D = head_dim_qk */
ORC_HD double orc_gpu_score_floor(double tau, double sc_abs, double D, double q1, double k1max) {
    double sc = sc_abs > 1 ? sc_abs : 1;
    return tau * (sc * (2 * D + q1 + k1max) + 8) * (1 + 0x1p-40);
}

/* Exact value of an fp16 / bf16 bit pattern (= orc_decode_fast, by arithmetic). */
ORC_HD double orc_gpu_decode(unsigned bits, int bf16) {
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

/* Row constants shared by every key of every row (host-computed from the models). */
typedef struct {
    double scale;              /* c->scale */
    double ce_o, cm_o, ce_k, cm_k; /* orc_score_coefs of the oracle / kernel model */
    double lue_k;              /* (R + 1) * mk.lue */
    double sc_abs, D;          /* |scale|, head_dim_qk (score floor) */
    double k1max;              /* max_j sum_d |k_jd| of the kv head (finite rows), times 1 + 2^-40 */
} orc_gpu_rowc;

/* Row state across the passes. */
typedef struct {
    int64_t n;                 /* visible keys */
    double M;                  /* max score */
    int nan, neg_inf, overflow;
    double e_floor;            /* orc_gpu_score_floor of the row */
    double Eo_max, Ek_max, L;
    double eta_o_max, eta_k_max, sum_pe;
    /* orc_gpu_row_mid */
    double acc_o, acc_k, pin, floor_unit, tau_w, floor_lim;
} orc_gpu_rows;

/* pass 1: the score (two roundings, as orc_row_weights) */
ORC_HD double orc_gpu_score(const orc_gpu_rowc *k, double S, double m) { return k->scale * S + m; }

/* pass 1 per key: fold s into the row state */
ORC_HD void orc_gpu_pass1(const orc_model *mk, orc_gpu_rows *r, double s) {
    r->n++;
    if (isnan(s) || s == INFINITY) r->nan = 1;
    else if (s == -INFINITY) r->neg_inf = 1;
    else if (s > r->M) r->M = s;
    if (fabs(s) > 0x1p126 && mk->u_s >= ORC_U_F) r->overflow = 1;
}

/* row kind after pass 1 (ROW_* of orc_internal.h) */
ORC_HD int orc_gpu_row_kind(const orc_gpu_rows *r) {
    if (r->n == 0) return ROW_MASKED;
    if (r->nan) return ROW_NAN;
    if (r->neg_inf || r->M == -INFINITY || r->overflow) return ROW_UNCHECKABLE;
    return ROW_NORMAL;
}

/* pass 2 per key: score errors (oracle eo, kernel ek) */
ORC_HD void orc_gpu_key_err(const orc_gpu_rowc *k, const orc_gpu_rows *r, double A, double am,
                            double *eo, double *ek) {
    *eo = k->ce_o * A + k->cm_o * am;
    *ek = k->ce_k * A + k->cm_k * am + r->e_floor;
}

/* pass 3 per key: eta_o, eta_k (sections 3.3-3.5) */
ORC_HD void orc_gpu_key_eta(const orc_model *mk, const orc_model *mo, const orc_gpu_rowc *k,
                            const orc_gpu_rows *r, double s, double eo, double ek, double *eta_o,
                            double *eta_k) {
    double gap = r->M - s + 2 * r->Eo_max;
    *eta_o = orc_gpu_expm1_up(eo + 3 * mo->u_s * (gap + eo + r->Eo_max) + mo->lue);
    *eta_k = orc_gpu_expm1_up(ek + 3 * mk->u_s * (gap + ek + r->Ek_max) + k->lue_k);
}

/* pass 3 per key: the term of sum_pe */
ORC_HD double orc_gpu_key_pe(const orc_gpu_rows *r, double W, double eta_o) {
    return W / r->L * (1 + eta_o) * eta_o;
}

/* after pass 3: kap_o, pin and the kernel model's row factors; span = key
 * positions the row's compensated sums fold over (orc_acc_coef's n_span) */
ORC_HD void orc_gpu_row_mid(const orc_model *mk, const orc_model *mo, orc_gpu_rows *r,
                            orc_row_info *ri, double span) {
    double n = (double)r->n, L = r->L;
    r->acc_o = orc_gpu_acc_coef(mo, n, span);
    ri->kap_o = (r->sum_pe + r->acc_o * (1 + r->eta_o_max)) * (1 + 0x1p-40);
    r->pin = 1.0 / (L * (1 - ri->kap_o));
    double R = mk->R;
    r->acc_k = orc_gpu_acc_coef(mk, n + R, n + R);
    r->floor_unit = mk->f_p * (1 + r->acc_k) * exp(2 * r->Ek_max) * (1 + r->eta_k_max) * r->pin * (1 + 0x1p-50);
    r->tau_w = mk->tau * (1 + r->eta_k_max) * (1 + mk->u_p) * (1 + r->acc_k) * (1 + 0x1p-50);
    r->floor_lim = mk->nmin_p * exp(r->Ek_max) * (1 + 0x1p-50);
}

/* pass 4 per key: kernel weight C, oracle weight CO of |v_j|; returns p * eta_k */
ORC_HD double orc_gpu_key_weights(const orc_model *mk, const orc_gpu_rows *r, double W, double eta_o,
                                  double eta_k, double *C, double *CO) {
    double p = W * (1 + eta_o) * r->pin;
    double fl = 0;
    if (mk->u_p > 0 && W * (1 - eta_o) * (1 - eta_k) < r->floor_lim) fl = r->floor_unit;
    *C = p * (eta_k + (1 + eta_k) * (mk->u_p + r->acc_k * (1 + mk->u_p))) + fl + r->tau_w * r->pin;
    *CO = p * (eta_o + (1 + eta_o) * r->acc_o);
    return p * eta_k;
}

/* after pass 4: kap_k, floor_n and the LSE with its bounds (section 4) */
ORC_HD void orc_gpu_row_end(const orc_model *mk, const orc_model *mo, const orc_gpu_rows *r,
                            double sum_pek, orc_row_info *ri) {
    double n = (double)r->n, R = mk->R;
    ri->kind = ROW_NORMAL;
    ri->n = r->n;
    ri->M = r->M;
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

#endif /* FLASHCHECK_ORC_GPU_ROW_H */
