/* orc_internal.h: shared internals of the oracle (not part of the API).
 * Nothing here is shared with any kernel. */
#ifndef FLASHCHECK_ORC_INTERNAL_H
#define FLASHCHECK_ORC_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oracle/oracle.h"

// ----------------------------------------------------------------------------
// constants

#define ORC_U_D 0x1p-53    /* double unit roundoff */
#define ORC_U_F 0x1p-24    /* fp32 unit roundoff */
#define ORC_BLK 32         /* plain-summation block of the compensated sums (= ORC_PB) */
#define ORC_SAFETY (1.0 + 0x1p-30) /* covers rounding of the bound's own evaluation */

// ----------------------------------------------------------------------------
// problem context: the inputs decoded into plain numbers and strides

typedef struct {
    fa_problem p;
    int64_t B, Sq, Sk, Hq, Hkv, G, D, Dv;   /* G = Hq / Hkv */
    fa_dtype dt;
    double scale;          /* effective scale as used by the oracle (double) */
    int scale_default;     /* 1: scale is 1/sqrt(D) (not representable exactly) */
    const uint16_t *q, *k, *v, *o, *dout;
    int64_t qs[4], ks[4], vs[4], os[4], dos[4];
    const float *mask;
    int64_t ms[4];
    const float *lse;
    int64_t ls[3];
    /* contract v3 score features (BOUNDS.md 13, 14); the layout features (varlen, paged)
     * never reach a ctx: orc_seq.c splits such a problem into dense per-sequence ctxs */
    double softcap;        /* p.softcap (a float: exact); 0 = none */
    int has_sinks;         /* p.has_sinks */
    const float *sinks;    /* [Hq] host, when has_sinks */
} orc_ctx;

/* An error model: the unit roundoffs of one implementation (a backend's
 * profile, or the oracle's own double arithmetic). oracle/BOUNDS.md. */
typedef struct {
    double u_dot;      /* accumulation unit of the length-D dot products */
    double u_acc;      /* accumulation unit of the long sums (P.V, dV, dQ, dK, l) */
    int compensated;   /* 1: long sums are blocked-compensated double (oracle) */
    double u_s;        /* unit of scalar score-stage ops (scale, mask add, subtract) */
    double sigma;      /* relative error of the softmax scale used */
    double u_e;        /* exp relative error */
    double lue;        /* log1p(u_e), rounded up (1 + 2^-50) */
    double u_log;      /* log relative error */
    double R;          /* online-softmax rescales per row (forward) */
    double u_p, f_p, nmin_p;  /* P rounding: unit, absolute floor, smallest normal (0 = none) */
    double u_ds, f_ds;        /* dS rounding (0 = none) */
    double u_out, f_out;      /* output rounding to dtype (0 = none) */
    double u_lse;             /* LSE store rounding (fp32: 2^-24; oracle 0) */
    double u_div;             /* final normalisation (division) */
    double tau;               /* underflow: absolute error of one fp32 operation whose result
                                 or operand lies below 2^-126 (BOUNDS.md section 9): 2^-126
                                 when the profile flushes subnormals, else 2^-149 (one
                                 subnormal ulp, gradual underflow) or exp_ulps * 2^-149 for
                                 an exp on the subnormal grid (10.1); 0 for the oracle */
    int n_sr;                 /* roundings of unit u_s in the score stage: 3 fp32, 4 dtype (10.5) */
    int n_bq;                 /* roundings of unit u_s in dQ, dK besides the accumulation: 1 (the
                                 scale multiply), 2 for unfused graphs (scaled K or Q, and the
                                 product or the scale multiply) (10.5) */
    /* tensor-core multi-term accumulation (BOUNDS.md 10.2): tc_t > 0 replaces gamma_n(u_acc) */
    double tc_t, tc_a, tc_un; /* terms per step, alignment unit per term, normalisation unit */
    int ds_fold;              /* fa_precision.ds_scale_folded: 0 after, 1 folded, 2 either (10.3) */
    double u_dp, f_dp;        /* dP rounding (0 = none) (10.3) */
    int d_from_p;             /* 1: D_i = sum_j P' dP' (FA_D_FROM_P) (10.3) */
    int gqa;                  /* fa_gqa_reduce (10.4) */
    double lse_empty;         /* LSE of a row with no visible key (10.6) */
    double u_t, tau_t;        /* tanh of the softcap (13.2): relative error of a normal result and
                                 absolute error of one on the subnormal grid */
} orc_model;

// ----------------------------------------------------------------------------
// helpers (orc_util.c)

/* orc_gamma, orc_acc_coef, orc_expm1_up: orc_formulas.h (below, after orc_row_info) */
void orc_model_kernel(const orc_ctx *c, const fa_precision *prof, orc_model *m);
void orc_model_oracle(const orc_ctx *c, orc_model *m);

/* Key range [*lo, *hi] visible to query i from causal/window (empty: hi < lo). */
void orc_row_range(const fa_problem *p, int64_t i, int64_t *lo, int64_t *hi);

/* Exact value of an fp16 / bf16 bit pattern, by assembling the double's bits
 * (the same value as orc_decode, which test_oracle_basic checks for all 2^16
 * patterns of both types; orc_decode's ldexp is 10x slower). */
static inline double orc_decode_fast(uint16_t bits, fa_dtype dt) {
    if (dt == FA_BF16) { /* the top half of an fp32: exact in float, then in double */
        uint32_t u = (uint32_t)bits << 16;
        float f;
        memcpy(&f, &u, 4);
        return (double)f;
    }
    uint64_t sign = (uint64_t)(bits >> 15) << 63;
    unsigned e = (bits >> 10) & 31u, m = bits & 1023u;
    double x;
    if (e == 31) return m ? NAN : (sign ? -INFINITY : INFINITY);
    if (e == 0) {
        x = (double)m * 0x1p-24; /* subnormal: m 2^-24, exact */
        return sign ? -x : x;
    }
    uint64_t u = sign | ((uint64_t)(e - 15 + 1023) << 52) | ((uint64_t)m << 42);
    memcpy(&x, &u, 8);
    return x;
}

static inline double orc_ld(const uint16_t *base, const int64_t st[4], int64_t b, int64_t s,
                            int64_t h, int64_t d, fa_dtype dt) {
    return orc_decode_fast(base[b * st[0] + s * st[1] + h * st[2] + d * st[3]], dt);
}
static inline double orc_mask_at(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!c->mask) return 0.0;
    return (double)c->mask[b * c->ms[0] + h * c->ms[1] + i * c->ms[2] + j * c->ms[3]];
}
/* Round x to the dtype and return the rounded value as double. */
static inline double orc_rd(double x, fa_dtype dt) { return orc_decode(orc_encode(x, dt), dt); }

/* Fill err (may be NULL) and return st. */
fa_status orc_fail(fa_error *err, fa_status st, const char *arg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int orc_nthreads(const orc_options *o); /* OpenMP team size for o->threads */

/* Dense (contract v2) contexts: a problem using a v3 feature (varlen, paged, softcap,
 * sinks) is FA_ERR_UNSUPPORTED here (the GPU tier calls these and models none of them). */
fa_status orc_ctx_fwd(const fa_fwd_args *a, orc_ctx *c, fa_error *err);
fa_status orc_ctx_bwd(const fa_bwd_args *a, orc_ctx *c, fa_error *err);
/* The CPU tiers' contexts: softcap and sinks accepted; the layout features (varlen,
 * paged) must have been split away (orc_seq.c) and are FA_ERR_INVALID here. */
fa_status orc_ctx_fwd3(const fa_fwd_args *a, orc_ctx *c, fa_error *err);
fa_status orc_ctx_bwd3(const fa_bwd_args *a, orc_ctx *c, fa_error *err);

// ----------------------------------------------------------------------------
// contract v3 layouts (orc_seq.c, BOUNDS.md section 13): a packed (cu_seqlens) or paged
// problem is B dense sub-problems of batch 1, one per sequence; each is evaluated by the
// dense tiers and the results are written at their (b, h, s) places.

typedef struct {
    int64_t B;
    int64_t *sq, *sk;      /* [B] Sq_b, Sk_b */
    int64_t *ka;           /* [B] allocated keys: the cu_k span, max_pages_per_seq * page_size, or seqlen_k */
    int64_t *q0, *k0;      /* [B] first packed row of sequence b (cu_q[b], cu_k[b]); -1: dense */
    int paged;             /* K, V (dK, dV) are pools read through the block table */
    const int32_t *table;  /* [B * table_stride] */
    int64_t tstride, page_size, num_pages;
    int64_t rows_q, rows_k;/* packed rows (cu[B]) or 0 */
} orc_seqs;

/* 1 when a problem uses a v3 layout feature (cu_seqlens_q/k, seqused_k, page_size >= 1). */
int orc_seq_active(const fa_problem *p, const fa_varlen *vl);
/* Validate the v3 layout (the contract's rules, own code) and fill s. FA_ERR_INVALID
 * naming the field; FA_ERR_NOMEM. */
fa_status orc_seqs_init(orc_seqs *s, const fa_problem *p, const fa_varlen *vl, const fa_paged *pg,
                        fa_error *err);
void orc_seqs_free(orc_seqs *s);
/* Element offset of (b, s, h, d) of a Q-side tensor (Q, O, dO, dQ) with strides st:
 * packed rows when cu_seqlens_q is given. LSE: orc_seq_lse_off. */
int64_t orc_seq_qoff(const orc_seqs *s, const int64_t st[4], int64_t b, int64_t i, int64_t h, int64_t d);
int64_t orc_seq_lse_off(const orc_seqs *s, const int64_t st[3], int64_t b, int64_t h, int64_t i);
/* Element offset of key j of sequence b in a K-side tensor (K, V, dK, dV): packed, paged
 * (through the table) or dense. */
int64_t orc_seq_koff(const orc_seqs *s, const int64_t st[4], int64_t b, int64_t j, int64_t h, int64_t d);
/* The dense sub-problem of sequence b (batch 1, seqlen_q = Sq_b, seqlen_k = Sk_b, no
 * layout feature). A paged K/V is gathered into *kbuf, *vbuf ([Sk_b, Hkv, D] contiguous,
 * malloc, caller frees; NULL when not paged). Returns 0 on allocation failure. */
int orc_seq_sub_fwd(const fa_fwd_args *a, const orc_seqs *s, int64_t b, fa_fwd_args *sub,
                    uint16_t **kbuf, uint16_t **vbuf);
int orc_seq_sub_bwd(const fa_bwd_args *a, const orc_seqs *s, int64_t b, fa_bwd_args *sub,
                    uint16_t **kbuf, uint16_t **vbuf);
/* Sample up to max of the sum_b H * len[b] vectors (b, h, s < len[b]); sorted; malloc. */
orc_index *orc_sample_seq(int64_t B, int64_t H, const int64_t *len, int64_t max, uint64_t seed, int64_t *n);
fa_status orc_check_options(const orc_options *o, fa_error *err);
fa_status orc_check_profile(const fa_precision *pr, fa_error *err);

/* Sample up to max of total vector indices over (B, H, S); max = 0: all.
 * Returns a sorted orc_index array of *n entries (malloc), NULL on failure. */
orc_index *orc_sample(int64_t B, int64_t H, int64_t S, int64_t max, uint64_t seed, int64_t *n);
int orc_block_alloc(orc_block *blk, int64_t n, int64_t dim, int baseline);
void orc_block_free(orc_block *blk);

/* Round to the dtype quickly (Veltkamp splitting to 11 / 8 bits, magic-number
 * rounding in the subnormal range, overflow to Inf): round to nearest, but a
 * tie may round away from even. Only for the naive baseline, never for a
 * reference or a bound. */
static inline double orc_rd_fast(double x, fa_dtype dt) {
    double nmin = dt == FA_BF16 ? 0x1p-126 : 0x1p-14, ax = fabs(x);
    if (ax < nmin) {
        double magic = dt == FA_BF16 ? 0x1.8p-81 : 0x1.8p+28; /* 1.5 * 2^52 * min subnormal */
        return (x + magic) - magic;
    }
    double c = dt == FA_BF16 ? 0x1p45 + 1 : 0x1p42 + 1;
    double t = c * x, r = t - (t - x);
    double max = dt == FA_BF16 ? 0x1.fep127 : 65504.0;
    if (fabs(r) > max) return isnan(x) ? x : copysign(INFINITY, x);
    return r;
}

/* Fill flags of a finite-or-not reference element. */
static inline uint8_t orc_value_flags(double ref) {
    return isnan(ref) ? ORC_F_NAN : isinf(ref) ? ORC_F_INF : 0;
}

// ----------------------------------------------------------------------------
// forward row weights (orc_fwd.c), shared with the backward

enum { ROW_NORMAL = 0, ROW_MASKED = 1, ROW_NAN = 2, ROW_UNCHECKABLE = 3 };

typedef struct {
    int kind;
    int ovf;                 /* section 11: ROW_UNCHECKABLE: an fp32 score may overflow
                                (orc_fm_row_kind); ROW_NORMAL: 0 from orc_row_weights, then
                                the forward sets orc_fm_pv_overflow (P.V numerator) */
    int64_t lo, hi;          /* key range of the row (causal/window) */
    double M, L, logL;       /* max score, sum of exp(s - M) (oracle values) */
    double kap_o, kap_k;     /* relative perturbation of the denominator: oracle, kernel */
    double lse, lse_orc, lse_bound;
    double floor_n;          /* kernel underflow floor of O's numerator, P units, without
                                the |v| part (folded into C): BOUNDS.md 9.2 */
    int64_t n;               /* visible keys */
} orc_row_info;

/* The scalar bound formulas, one definition for the CPU and GPU tiers. */
#include "oracle/orc_formulas.h"

/* Error-free transformation (Knuth TwoSum; RN, no FMA contraction): exact for a finite sum, no error term for a non-finite one (orc_fm_two_sum, the
 * definition the GPU tier's device folds share) */
static inline void two_sum(double a, double b, double *s, double *e) { orc_fm_two_sum(a, b, s, e); }

/* The RN store's reachable-set bound of a dQ / dK / dV element (BOUNDS.md 5.8):
 * orc_fm_store_bound (orc_formulas.h, shared with the GPU tier) for dtype dt. */
static inline double orc_store_bound(double ref, double e, double pre, double generic, fa_dtype dt, int flush) {
    return orc_fm_store_bound(ref, e, pre, generic, dt == FA_BF16, flush);
}

/* Score-stage error coefficients of model m: |s' - s| <= ce * |q|.|k| + cm * |mask|. */
void orc_score_coefs(const orc_ctx *c, const orc_model *m, double *ce, double *cm);

/* Kernel score underflow floor of a row (BOUNDS.md 9.1): added to every E_j.
 * q1 = sum_d |q_d| of the row, k1max = max_j sum_d |k_jd| over the kv head. */
static inline double orc_score_floor(const orc_ctx *c, const orc_model *mk, double q1, double k1max) {
    return orc_fm_score_floor(mk->tau, fabs(c->scale), (double)c->D, q1, k1max);
}

/* Row i of head (b, h) over keys jlo .. jlo+span-1. In: S (raw dot q.k), A
 * (|q|.|k|), e_floor (orc_score_floor of the row). Out: S (score), vis, W
 * (exp(s - M)), C (kernel weight of |v_j|), CO (oracle weight), E (kernel
 * eta_j), *ri. BOUNDS.md sections 3 and 9. */
void orc_row_weights(const orc_ctx *c, const orc_model *mk, const orc_model *mo,
                     int64_t b, int64_t h, int64_t i, int64_t jlo, int64_t span,
                     double *S, const double *A, double e_floor, uint8_t *vis, double *W, double *C,
                     double *CO, double *E, orc_row_info *ri);

/* orc_fwd_elem (one O element from the row sums): orc_formulas.h. */

/* One forward row's outputs in res (row = its index in the sample): O values, orc_err,
 * bounds and flags from the row info R and the row sums num = sum w v, bsum = sum C |v|,
 * osum = sum CO |v| [Dv] (orc_fwd_elem); the LSE; the declared LSE of an empty row;
 * ORC_F_OVERFLOW from R->ovf (section 11: set by the caller for a normal row,
 * orc_fm_pv_overflow); MPFR escalation (tmp [Dv] scratch). b16: the baseline sums
 * (NULL: none). The one finalize of both tiers (orc_fwd, orc_gpu_fwd). Returns the
 * number of escalated elements. */
int64_t orc_fwd_row_out(const orc_ctx *c, const orc_model *mk, const orc_model *mo, const orc_options *opt,
                        orc_fwd_result *res, int64_t row, const orc_row_info *R, const double *num,
                        const double *bsum, const double *osum, const double *b16, double *tmp);
/* orc_fwd_row_out in two steps (the same operations): everything but the escalation (returns
 * 1 if the row needs MPFR: tier MPFR, or an element's / the LSE's orc_err above
 * escalate_ratio times its bound), then the row's MPFR escalation (reads the inputs through
 * c; returns the elements escalated). orc_gpu_fwd fills rows while the host copies of the
 * inputs are still being made and escalates after. */
int orc_fwd_row_fill(const orc_ctx *c, const orc_model *mk, const orc_model *mo, const orc_options *opt,
                     orc_fwd_result *res, int64_t row, const orc_row_info *R, const double *num, const double *bsum,
                     const double *osum, const double *b16);
int64_t orc_fwd_row_esc(const orc_ctx *c, const orc_options *opt, orc_fwd_result *res, int64_t row, double *tmp);

/* Baseline (naive same-dtype) probabilities of a row: P16[t] = rd(softmax(rd(rd(qs.k) + rd(m))))
 * from S16 = rd(q*scale).k; 0 where invisible. */
void orc_row_baseline(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int64_t jlo,
                      int64_t span, const double *S16, const uint8_t *vis, double *P16);

// ----------------------------------------------------------------------------
// MPFR tier (orc_mpfr.c). Values are rounded to double (RN).

/* One forward row: o_out[Dv], *lse_out. Returns 0, or -1 when the row has no
 * visible key (o = 0, lse = -inf written). */
int orc_mpfr_fwd_row(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int prec,
                     double *o_out, double *lse_out);
/* One backward dQ row (dq_out[D]). */
void orc_mpfr_dq_row(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int prec, double *dq_out);
/* One key column of kv head hk: dk_out[D], dv_out[Dv] (sums over the group). */
void orc_mpfr_dkdv_col(const orc_ctx *c, int64_t b, int64_t hk, int64_t j, int prec,
                       double *dk_out, double *dv_out);

/* The n key columns js[] of kv head hk, batch b: dk_out[n*D], dv_out[n*Dv]; the same
 * values as n calls of orc_mpfr_dkdv_col, each row's MPFR quantities computed once. */
void orc_mpfr_dkdv_cols(const orc_ctx *c, int64_t b, int64_t hk, const int64_t *js, int n, int prec,
                        double *dk_out, double *dv_out);
/* dK/dV of one pool position: the sum over n (ctx, batch index, key) parts in MPFR, one
 * rounding to double (BOUNDS.md 13.3). */
void orc_mpfr_dkdv_sum(const orc_ctx *const *cs, const int64_t *bs, const int64_t *js, int n, int64_t hk,
                       int prec, double *dk_out, double *dv_out);
/* dsinks[h] over the n (ctx, batch index) sequences, exact forward (BOUNDS.md 14.4). */
double orc_mpfr_dsink(const orc_ctx *const *cs, const int64_t *bs, int n, int64_t h, int prec);

/* orc_err of an MPFR value x (rounded to double) given the double tier's
 * bound e_double for the same element: the MPFR computation follows the same
 * algorithm with every unit roundoff <= 2^-prec, plain sums of up to nterms
 * terms (BOUNDS.md section 6). */
static inline double orc_mpfr_err(double x, double e_double, int prec, double nterms) {
    return ORC_U_D * fabs(x) + ldexp(e_double, 53 + 2 - prec) * (1.0 + nterms);
}

#endif /* FLASHCHECK_ORC_INTERNAL_H */
