/* orc_mpfr.c: the MPFR tier. Forward rows, dQ rows and dK/dV columns computed
 * from the decoded fp16/bf16 inputs at `prec` bits (every operation correctly
 * rounded to prec bits, RNDN), then rounded once to double (RN).
 *
 * Error: each value is the same formula as the double tier with every unit
 * roundoff <= 2^-prec and plain recursive sums; BOUNDS.md section 6 bounds the
 * result by orc_mpfr_err(). Invisible keys are skipped, never multiplied by 0. */
#include <math.h>
#include <mpfr.h>
#include <string.h>

#include "oracle/orc_internal.h"
#include "oracle/orc_mpfr.h"

enum { ORC_MPFR_DOT_MAX = 512 }; /* stack buffer of a dO.v product row */

// ----------------------------------------------------------------------------
// one row: scores s_j (visible keys only), lse, O

typedef struct {
    int64_t lo, hi, n;   /* key range; n visible keys */
    uint8_t *vis;        /* [Sk] */
    mpfr_t *s;           /* [Sk], valid where vis */
    mpfr_t *th;          /* [Sk], softcap: tanh(scale q.k / cap), valid where vis */
    mpfr_t lse;
    mpfr_t *o;           /* [Dv] */
} mp_row;

/* r = x[0] + x[1] + ... + x[n-1] summed left to right, each add correctly rounded to r's
 * precision (RNDN, r starting at +0): the sums of exact fp16/bf16 products (scores q.k, dO.v).
 * Fast path (orc_mpfr_sum_fixed): when every x[k] is a multiple of 2^-60 with |x[k]| < 2^100
 * and sum |x[k]| < 2^min(prec, 120), every partial sum is an integer multiple of 2^-60 below
 * 2^prec in magnitude, so representable: each add of the loop is exact and the loop's result
 * is the exact sum, which the fixed-point sum gives (+0 for a zero sum, as RNDN adds give
 * from +0). Otherwise (bf16 extremes, Inf, NaN) the loop itself. Bit-identical either way
 * (oracle test test_mpfr_sum). */
int orc_mpfr_sum_fixed(mpfr_t r, const double *x, int64_t n) {
    __int128 s = 0;
    unsigned __int128 a = 0;
    for (int64_t k = 0; k < n; k++) {
        double y = x[k] * 0x1p60; /* exact: a power of two, |x| < 2^100 checked below */
        if (!(fabs(y) < 0x1p100)) return 0; /* also Inf, NaN */
        __int128 v = (__int128)y;
        if ((double)v != y) return 0; /* not on the 2^-60 grid */
        s += v;
        a += (unsigned __int128)(v < 0 ? -v : v);
        if (a >> 120) return 0; /* a < 2^120 + 2^100: never wraps */
    }
    long prec = (long)mpfr_get_prec(r);
    int lim = prec < 120 ? (int)prec : 120;
    if (a >> lim) return 0;
    unsigned __int128 u = s < 0 ? (unsigned __int128)(-s) : (unsigned __int128)s;
    mpfr_set_ui_2exp(r, (unsigned long)(u >> 64), 64, MPFR_RNDN); /* < 2^56: exact */
    mpfr_add_ui(r, r, (unsigned long)(uint64_t)u, MPFR_RNDN);    /* u < 2^prec: exact */
    mpfr_mul_2si(r, r, -60, MPFR_RNDN);
    if (s < 0) mpfr_neg(r, r, MPFR_RNDN);
    return 1;
}

void orc_mpfr_sum(mpfr_t r, const double *x, int64_t n) {
    if (orc_mpfr_sum_fixed(r, x, n)) return;
    mpfr_set_zero(r, 1);
    for (int64_t k = 0; k < n; k++) mpfr_add_d(r, r, x[k], MPFR_RNDN);
}

int orc_mp_head_init(orc_mp_head *hd, const orc_ctx *c, int64_t b, int64_t hk, int with_k) {
    memset(hd, 0, sizeof *hd);
    size_t nk = with_k ? (size_t)(c->Sk * c->D) : 0, nv = (size_t)(c->Sk * c->Dv), n = nk + nv;
    size_t lb = mpfr_custom_get_size(53); /* bytes of a 53-bit significand: a multiple of a limb */
    char *mem = malloc((n ? n : 1) * (sizeof(mpfr_t) + lb));
    if (!mem) return -1;
    mpfr_t *x = (mpfr_t *)mem;
    char *limbs = mem + n * sizeof(mpfr_t);
    for (size_t e = 0; e < n; e++) {
        void *sig = limbs + e * lb;
        mpfr_custom_init(sig, 53);
        mpfr_custom_init_set(x[e], MPFR_ZERO_KIND, 0, 53, sig);
    }
    int64_t D = c->D, Dv = c->Dv;
    for (int64_t j = 0; j < c->Sk; j++) {
        if (with_k)
            for (int64_t d = 0; d < D; d++) mpfr_set_d(x[j * D + d], orc_ld(c->k, c->ks, b, j, hk, d, c->dt), MPFR_RNDN);
        for (int64_t d = 0; d < Dv; d++)
            mpfr_set_d(x[nk + (size_t)(j * Dv + d)], orc_ld(c->v, c->vs, b, j, hk, d, c->dt), MPFR_RNDN);
    }
    hd->b = b;
    hd->hk = hk;
    hd->k = with_k ? x : NULL;
    hd->v = x + nk;
    hd->mem = mem;
    return 0;
}

void orc_mp_head_free(orc_mp_head *hd) {
    free(hd->mem); /* custom-initialized numbers: nothing to clear */
    memset(hd, 0, sizeof *hd);
}

static void mp_scale(const orc_ctx *c, mpfr_t sc) {
    if (c->scale_default) {
        mpfr_set_si(sc, (long)c->D, MPFR_RNDN);
        mpfr_rec_sqrt(sc, sc, MPFR_RNDN);
    } else {
        mpfr_set_d(sc, c->scale, MPFR_RNDN); /* a float: exact */
    }
}

static void mp_row_init(const orc_ctx *c, mp_row *r, int prec) {
    r->vis = calloc((size_t)(c->Sk ? c->Sk : 1), 1);
    r->s = malloc((size_t)(c->Sk ? c->Sk : 1) * sizeof(mpfr_t));
    r->th = malloc((size_t)(c->Sk ? c->Sk : 1) * sizeof(mpfr_t));
    r->o = malloc((size_t)c->Dv * sizeof(mpfr_t));
    if (!r->vis || !r->s || !r->th || !r->o) abort(); /* small: failure here is not recoverable */
    for (int64_t j = 0; j < c->Sk; j++) { mpfr_init2(r->s[j], prec); mpfr_init2(r->th[j], prec); }
    for (int64_t d = 0; d < c->Dv; d++) mpfr_init2(r->o[d], prec);
    mpfr_init2(r->lse, prec);
}

static void mp_row_clear(const orc_ctx *c, mp_row *r) {
    for (int64_t j = 0; j < c->Sk; j++) { mpfr_clear(r->s[j]); mpfr_clear(r->th[j]); }
    for (int64_t d = 0; d < c->Dv; d++) mpfr_clear(r->o[d]);
    mpfr_clear(r->lse);
    free(r->vis); free(r->s); free(r->th); free(r->o);
}

/* Compute the row; returns 0 when no key is visible (o = 0, lse = -inf, or lse = sink_h
 * with sinks). Softcap (BOUNDS.md 14): s = cap tanh(scale q.k / cap) + m, each operation
 * correctly rounded (mpfr_tanh included). Sinks (14.2): exp(sink_h - M) joins L, M the max
 * of the scores and the sink. */
static int mp_row_compute(const orc_ctx *c, const orc_mp_head *hd, int64_t b, int64_t h, int64_t i, int prec,
                          mp_row *r) {
    int64_t hk = h / c->G;
    const mpfr_t *hv = hd && hd->b == b && hd->hk == hk ? (const mpfr_t *)hd->v : NULL; /* V of (b, hk), exact:
                                                                                        mpfr_mul = mpfr_mul_d */
    mpfr_t sc, acc, x, y, M, L, w;
    mpfr_inits2(prec, sc, acc, x, y, M, L, w, (mpfr_ptr)0);
    mp_scale(c, sc);
    orc_row_range(&c->p, i, &r->lo, &r->hi);
    r->n = 0;
    mpfr_set_inf(M, -1);
    int nan = 0;
    double *qd = malloc((size_t)c->D * 2 * sizeof(double)), *pr = qd + c->D;
    if (!qd) abort();
    for (int64_t d = 0; d < c->D; d++) qd[d] = orc_ld(c->q, c->qs, b, i, h, d, c->dt);
    for (int64_t j = 0; j < c->Sk; j++) {
        r->vis[j] = 0;
        if (j < r->lo || j > r->hi) continue;
        double m = orc_mask_at(c, b, h, i, j);
        if (m == -INFINITY) continue;
        r->vis[j] = 1;
        r->n++;
        /* fp16/bf16 products are exact in double: add them exactly-rounded */
        for (int64_t d = 0; d < c->D; d++) pr[d] = qd[d] * orc_ld(c->k, c->ks, b, j, hk, d, c->dt);
        orc_mpfr_sum(acc, pr, c->D);
        mpfr_mul(acc, acc, sc, MPFR_RNDN);
        if (c->softcap > 0) {
            mpfr_div_d(acc, acc, c->softcap, MPFR_RNDN);
            mpfr_tanh(r->th[j], acc, MPFR_RNDN);
            mpfr_mul_d(acc, r->th[j], c->softcap, MPFR_RNDN);
        }
        mpfr_add_d(r->s[j], acc, m, MPFR_RNDN);
        if (mpfr_nan_p(r->s[j])) nan = 1;
        else if (mpfr_greater_p(r->s[j], M)) mpfr_set(M, r->s[j], MPFR_RNDN);
    }
    free(qd);
    int vis = r->n > 0;
    double sink = c->has_sinks ? (double)c->sinks[h] : -INFINITY;
    if (!vis) {
        for (int64_t d = 0; d < c->Dv; d++) mpfr_set_zero(r->o[d], 1);
        mpfr_set_d(r->lse, sink, MPFR_RNDN); /* -inf without a sink */
    } else if (nan || mpfr_inf_p(M)) {
        for (int64_t d = 0; d < c->Dv; d++) mpfr_set_nan(r->o[d]);
        mpfr_set_nan(r->lse);
    } else {
        mpfr_set_zero(L, 1);
        if (sink > -INFINITY) {
            if (mpfr_cmp_d(M, sink) < 0) mpfr_set_d(M, sink, MPFR_RNDN);
            mpfr_set_d(w, sink, MPFR_RNDN);
            mpfr_sub(w, w, M, MPFR_RNDN);
            mpfr_exp(L, w, MPFR_RNDN);
        }
        for (int64_t d = 0; d < c->Dv; d++) mpfr_set_zero(r->o[d], 1);
        for (int64_t j = r->lo; j <= r->hi; j++) {
            if (!r->vis[j]) continue;
            mpfr_sub(w, r->s[j], M, MPFR_RNDN);
            mpfr_exp(w, w, MPFR_RNDN);
            mpfr_add(L, L, w, MPFR_RNDN);
            for (int64_t d = 0; d < c->Dv; d++) {
                if (hv) mpfr_mul(x, w, hv[j * c->Dv + d], MPFR_RNDN);
                else mpfr_mul_d(x, w, orc_ld(c->v, c->vs, b, j, hk, d, c->dt), MPFR_RNDN);
                mpfr_add(r->o[d], r->o[d], x, MPFR_RNDN);
            }
        }
        for (int64_t d = 0; d < c->Dv; d++) mpfr_div(r->o[d], r->o[d], L, MPFR_RNDN);
        mpfr_log(L, L, MPFR_RNDN);
        mpfr_add(r->lse, M, L, MPFR_RNDN);
    }
    mpfr_clears(sc, acc, x, y, M, L, w, (mpfr_ptr)0);
    return vis;
}

int orc_mpfr_fwd_row(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int prec,
                     double *o_out, double *lse_out) {
    mp_row r;
    mp_row_init(c, &r, prec);
    int vis = mp_row_compute(c, NULL, b, h, i, prec, &r);
    for (int64_t d = 0; d < c->Dv; d++) o_out[d] = mpfr_get_d(r.o[d], MPFR_RNDN);
    *lse_out = mpfr_get_d(r.lse, MPFR_RNDN);
    mp_row_clear(c, &r);
    return vis ? 0 : -1;
}

// ----------------------------------------------------------------------------
// backward pieces: for row i and visible key j, P_ij and dS_ij from the row

/* Dq_i = dO_i . O_i (O exact, from the row) */
static void mp_delta(const orc_ctx *c, int64_t b, int64_t h, int64_t i, const mp_row *r, mpfr_t Di,
                     mpfr_t tmp) {
    mpfr_set_zero(Di, 1);
    for (int64_t d = 0; d < c->Dv; d++) {
        mpfr_set_d(tmp, orc_ld(c->dout, c->dos, b, i, h, d, c->dt), MPFR_RNDN);
        mpfr_fma(Di, tmp, r->o[d], Di, MPFR_RNDN);
    }
}

/* P = exp(s_j - lse), dS = P (dO_i . V_j - Di) */
static void mp_p_ds(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int64_t j, const mp_row *r,
                    const mpfr_t Di, mpfr_t P, mpfr_t dS, mpfr_t x, mpfr_t y) {
    int64_t hk = h / c->G;
    mpfr_sub(P, r->s[j], r->lse, MPFR_RNDN);
    mpfr_exp(P, P, MPFR_RNDN);
    (void)y;
    double pr[ORC_MPFR_DOT_MAX], *pp = c->Dv <= ORC_MPFR_DOT_MAX ? pr : malloc((size_t)c->Dv * sizeof(double));
    if (!pp) abort();
    for (int64_t d = 0; d < c->Dv; d++) /* exact product in double */
        pp[d] = orc_ld(c->dout, c->dos, b, i, h, d, c->dt) * orc_ld(c->v, c->vs, b, j, hk, d, c->dt);
    orc_mpfr_sum(dS, pp, c->Dv);
    if (pp != pr) free(pp);
    mpfr_sub(dS, dS, Di, MPFR_RNDN);
    mpfr_mul(dS, dS, P, MPFR_RNDN);
    if (c->softcap > 0) { /* d s / d(scale q.k) = 1 - tanh^2 (14.3) */
        mpfr_sqr(x, r->th[j], MPFR_RNDN);
        mpfr_ui_sub(x, 1, x, MPFR_RNDN);
        mpfr_mul(dS, dS, x, MPFR_RNDN);
    }
}

/* x is finite: exponent field not all ones (fp16: 5 bits, bf16: 8 bits) */
static inline int mp_bits_finite(uint16_t x, fa_dtype dt) {
    uint16_t e = dt == FA_BF16 ? 0x7f80 : 0x7c00;
    return (x & e) != e;
}
/* two finite encodings hold the same number: the same bits, or +0 and -0 */
static inline int mp_bits_same(uint16_t x, uint16_t y) { return x == y || ((x | y) & 0x7fff) == 0; }

/* The inputs row i of head h (batch b) reads, by their encodings (fp16 / bf16 bits; +0 = -0):
 * -1 when q_i, dO_i, a visible key's mask, K_j or V_j is not finite, or the sink is NaN or
 * +inf (a sink of -inf is none); else the number of
 * visible keys, with *keq / *veq: every visible K_j / V_j equals the first visible one, *qz /
 * *dz: q_i / dO_i is all zeros. */
static int64_t mp_row_scan(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int *keq, int *veq, int *qz, int *dz) {
    int64_t hk = h / c->G, lo, hi, D = c->D, Dv = c->Dv, n = 0;
    if (c->has_sinks && !(c->sinks[h] == -INFINITY || isfinite(c->sinks[h]))) return -1; /* NaN / +inf sink */
    const uint16_t *q = c->q + b * c->qs[0] + i * c->qs[1] + h * c->qs[2];
    const uint16_t *dO = c->dout + b * c->dos[0] + i * c->dos[1] + h * c->dos[2];
    *keq = *veq = *qz = *dz = 1;
    for (int64_t d = 0; d < D; d++) {
        uint16_t x = q[d * c->qs[3]];
        if (!mp_bits_finite(x, c->dt)) return -1;
        if (x & 0x7fff) *qz = 0;
    }
    for (int64_t d = 0; d < Dv; d++) {
        uint16_t x = dO[d * c->dos[3]];
        if (!mp_bits_finite(x, c->dt)) return -1;
        if (x & 0x7fff) *dz = 0;
    }
    orc_row_range(&c->p, i, &lo, &hi);
    const uint16_t *k0 = NULL, *v0 = NULL;
    for (int64_t j = lo; j <= hi; j++) {
        double m = orc_mask_at(c, b, h, i, j);
        if (m == -INFINITY) continue;
        if (!isfinite(m)) return -1;
        const uint16_t *k = c->k + b * c->ks[0] + j * c->ks[1] + hk * c->ks[2];
        const uint16_t *v = c->v + b * c->vs[0] + j * c->vs[1] + hk * c->vs[2];
        for (int64_t d = 0; d < D; d++) {
            uint16_t x = k[d * c->ks[3]];
            if (!mp_bits_finite(x, c->dt)) return -1;
            if (k0 && !mp_bits_same(x, k0[d * c->ks[3]])) *keq = 0;
        }
        for (int64_t d = 0; d < Dv; d++) {
            uint16_t x = v[d * c->vs[3]];
            if (!mp_bits_finite(x, c->dt)) return -1;
            if (v0 && !mp_bits_same(x, v0[d * c->vs[3]])) *veq = 0;
        }
        if (!k0) { k0 = k; v0 = v; }
        n++;
    }
    return n;
}

/* 1 when the exact dQ row i of head h (batch b) is 0 (BOUNDS.md 6.1): finite inputs, at least
 * one visible key, and dO_i = 0 (then D_i = 0 and every dP_ij = 0, so dS_ij = 0), or, with no
 * sink, every visible K_j or every visible V_j equal to the first visible one (sum_j P_ij = 1
 * and D_i = sum_j P_ij dP_ij give: equal V_j, dP_ij = D_i and dS_ij = 0; equal K_j, one softcap
 * factor g and dQ_i = scale g K sum_j P_ij (dP_ij - D_i) = 0). Reads no MPFR number. */
int orc_mpfr_dq_row_zero(const orc_ctx *c, int64_t b, int64_t h, int64_t i) {
    int keq, veq, qz, dz;
    if (mp_row_scan(c, b, h, i, &keq, &veq, &qz, &dz) <= 0) return 0;
    int sink = c->has_sinks && c->sinks[h] > -INFINITY;
    return dz || (!sink && (keq || veq));
}

/* 1 when row i of head h (batch b) adds exactly 0 to every dK column it sees (6.1): finite
 * inputs, and q_i = 0 (its terms dS_ij q_i), dO_i = 0, or, with no sink, every visible V_j equal
 * (dS_ij = 0 as for dQ). A row that sees no key adds nothing (1). */
static int mp_dk_row_zero(const orc_ctx *c, int64_t b, int64_t h, int64_t i) {
    int keq, veq, qz, dz;
    int64_t n = mp_row_scan(c, b, h, i, &keq, &veq, &qz, &dz);
    if (n < 0) return 0;
    int sink = c->has_sinks && c->sinks[h] > -INFINITY;
    return n == 0 || qz || dz || (!sink && veq);
}

int orc_mpfr_dk_col_zero(const orc_ctx *c, int64_t b, int64_t hk, int64_t j, int8_t *rows) {
    for (int64_t g = 0; g < c->G; g++) {
        int64_t h = hk * c->G + g;
        for (int64_t i = 0; i < c->Sq; i++) {
            int64_t lo, hi;
            orc_row_range(&c->p, i, &lo, &hi);
            if (j < lo || j > hi || orc_mask_at(c, b, h, i, j) == -INFINITY) continue;
            int8_t *f = rows ? &rows[g * c->Sq + i] : NULL;
            int z = f && *f >= 0 ? *f : mp_dk_row_zero(c, b, h, i);
            if (f) *f = (int8_t)z;
            if (!z) return 0;
        }
    }
    return 1;
}

void orc_mpfr_dq_row(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int prec, double *dq_out) {
    orc_mpfr_dq_row_head(c, NULL, b, h, i, prec, dq_out);
}

void orc_mpfr_dq_row_head(const orc_ctx *c, const orc_mp_head *hd, int64_t b, int64_t h, int64_t i, int prec,
                          double *dq_out) {
    if (orc_mpfr_dq_row_zero(c, b, h, i)) { /* exactly 0 (6.1): the MPFR sum would only approximate it */
        for (int64_t d = 0; d < c->D; d++) dq_out[d] = 0.0;
        return;
    }
    orc_mpfr_dq_row_sum(c, hd, b, h, i, prec, dq_out);
}

void orc_mpfr_dq_row_sum(const orc_ctx *c, const orc_mp_head *hd, int64_t b, int64_t h, int64_t i, int prec,
                         double *dq_out) {
    int64_t hk = h / c->G;
    if (hd && (hd->b != b || hd->hk != hk || !hd->k)) hd = NULL; /* not this row's head */
    const mpfr_t *hkk = hd ? (const mpfr_t *)hd->k : NULL;
    mp_row r;
    mp_row_init(c, &r, prec);
    int vis = mp_row_compute(c, hd, b, h, i, prec, &r);
    mpfr_t Di, P, dS, x, y, sc;
    mpfr_inits2(prec, Di, P, dS, x, y, sc, (mpfr_ptr)0);
    mpfr_t *acc = malloc((size_t)c->D * sizeof(mpfr_t));
    if (!acc) abort();
    for (int64_t d = 0; d < c->D; d++) { mpfr_init2(acc[d], prec); mpfr_set_zero(acc[d], 1); }
    if (vis) {
        mp_scale(c, sc);
        mp_delta(c, b, h, i, &r, Di, x);
        for (int64_t j = r.lo; j <= r.hi; j++) {
            if (!r.vis[j]) continue;
            mp_p_ds(c, b, h, i, j, &r, Di, P, dS, x, y);
            if (hkk) /* K of the head, exact: the fma's operand has the same value */
                for (int64_t d = 0; d < c->D; d++) mpfr_fma(acc[d], dS, hkk[j * c->D + d], acc[d], MPFR_RNDN);
            else
                for (int64_t d = 0; d < c->D; d++) {
                    mpfr_set_d(x, orc_ld(c->k, c->ks, b, j, hk, d, c->dt), MPFR_RNDN);
                    mpfr_fma(acc[d], dS, x, acc[d], MPFR_RNDN);
                }
        }
        for (int64_t d = 0; d < c->D; d++) mpfr_mul(acc[d], acc[d], sc, MPFR_RNDN);
    }
    for (int64_t d = 0; d < c->D; d++) { dq_out[d] = mpfr_get_d(acc[d], MPFR_RNDN); mpfr_clear(acc[d]); }
    free(acc);
    mpfr_clears(Di, P, dS, x, y, sc, (mpfr_ptr)0);
    mp_row_clear(c, &r);
}

/* dK/dV summed over n (ctx, key) pairs of kv head hk, batch index b of each ctx (a
 * paged pool position shared by several sequences, BOUNDS.md 13.3: every part in MPFR,
 * one rounding to double at the end). The ctxs share D, Dv, G and the scale. */
void orc_mpfr_dkdv_sum(const orc_ctx *const *cs, const int64_t *bs, const int64_t *js, int n, int64_t hk,
                       int prec, double *dk_out, double *dv_out) {
    const orc_ctx *c0 = cs[0];
    mpfr_t Di, P, dS, x, y, sc;
    mpfr_inits2(prec, Di, P, dS, x, y, sc, (mpfr_ptr)0);
    mp_scale(c0, sc);
    mpfr_t *dk = malloc((size_t)c0->D * sizeof(mpfr_t)), *dv = malloc((size_t)c0->Dv * sizeof(mpfr_t));
    if (!dk || !dv) abort();
    for (int64_t d = 0; d < c0->D; d++) { mpfr_init2(dk[d], prec); mpfr_set_zero(dk[d], 1); }
    for (int64_t d = 0; d < c0->Dv; d++) { mpfr_init2(dv[d], prec); mpfr_set_zero(dv[d], 1); }
    for (int part = 0; part < n; part++) {
        const orc_ctx *c = cs[part];
        int64_t b = bs[part], j = js[part];
        mp_row r;
        mp_row_init(c, &r, prec);
        for (int64_t h = hk * c->G; h < (hk + 1) * c->G; h++) {
            for (int64_t i = 0; i < c->Sq; i++) {
                int64_t lo, hi;
                orc_row_range(&c->p, i, &lo, &hi);
                if (j < lo || j > hi || orc_mask_at(c, b, h, i, j) == -INFINITY) continue;
                mp_row_compute(c, NULL, b, h, i, prec, &r);
                mp_delta(c, b, h, i, &r, Di, x);
                mp_p_ds(c, b, h, i, j, &r, Di, P, dS, x, y);
                for (int64_t d = 0; d < c->D; d++) {
                    mpfr_set_d(x, orc_ld(c->q, c->qs, b, i, h, d, c->dt), MPFR_RNDN);
                    mpfr_fma(dk[d], dS, x, dk[d], MPFR_RNDN);
                }
                for (int64_t d = 0; d < c->Dv; d++) {
                    mpfr_set_d(x, orc_ld(c->dout, c->dos, b, i, h, d, c->dt), MPFR_RNDN);
                    mpfr_fma(dv[d], P, x, dv[d], MPFR_RNDN);
                }
            }
        }
        mp_row_clear(c, &r);
    }
    for (int64_t d = 0; d < c0->D; d++) {
        mpfr_mul(dk[d], dk[d], sc, MPFR_RNDN);
        dk_out[d] = mpfr_get_d(dk[d], MPFR_RNDN);
        mpfr_clear(dk[d]);
    }
    for (int64_t d = 0; d < c0->Dv; d++) { dv_out[d] = mpfr_get_d(dv[d], MPFR_RNDN); mpfr_clear(dv[d]); }
    free(dk); free(dv);
    mpfr_clears(Di, P, dS, x, y, sc, (mpfr_ptr)0);
}

void orc_mpfr_dkdv_col(const orc_ctx *c, int64_t b, int64_t hk, int64_t j, int prec,
                       double *dk_out, double *dv_out) {
    orc_mpfr_dkdv_sum(&c, &b, &j, 1, hk, prec, dk_out, dv_out);
}

/* n key columns js[0..n-1] of kv head hk in batch b: dk_out[n*D], dv_out[n*Dv] (column k
 * at k*D, k*Dv). A row's MPFR quantities (scores, tanh, lse, O, D_i) are computed once and
 * shared by every column it sees; each column's sums receive the same operations, at the
 * same precision and in the same order (h, then i ascending), as orc_mpfr_dkdv_col of that
 * column alone, so the results are identical to it (oracle test test_mpfr_cols). */
void orc_mpfr_dkdv_cols(const orc_ctx *c, int64_t b, int64_t hk, const int64_t *js, int n, int prec,
                        double *dk_out, double *dv_out) {
    if (n <= 0) return;
    mpfr_t Di, P, dS, x, y, sc;
    mpfr_inits2(prec, Di, P, dS, x, y, sc, (mpfr_ptr)0);
    mp_scale(c, sc);
    size_t nk = (size_t)n * (size_t)c->D, nv = (size_t)n * (size_t)c->Dv;
    mpfr_t *dk = malloc((nk ? nk : 1) * sizeof(mpfr_t)), *dv = malloc((nv ? nv : 1) * sizeof(mpfr_t));
    uint8_t *see = malloc((size_t)n);
    mpfr_t *qm = malloc((size_t)(c->D + c->Dv) * sizeof(mpfr_t)), *om = qm + c->D;
    if (!dk || !dv || !see || !qm) abort();
    for (int64_t d = 0; d < c->D + c->Dv; d++) mpfr_init2(qm[d], 53);
    for (size_t e = 0; e < nk; e++) { mpfr_init2(dk[e], prec); mpfr_set_zero(dk[e], 1); }
    for (size_t e = 0; e < nv; e++) { mpfr_init2(dv[e], prec); mpfr_set_zero(dv[e], 1); }
    mp_row r;
    mp_row_init(c, &r, prec);
    /* V of (b, hk) converted once for every row (when there are several) */
    orc_mp_head hd;
    const orc_mp_head *hdp = c->G * c->Sq > 1 && orc_mp_head_init(&hd, c, b, hk, 0) == 0 ? &hd : NULL;
    for (int64_t h = hk * c->G; h < (hk + 1) * c->G; h++) {
        for (int64_t i = 0; i < c->Sq; i++) {
            int64_t lo, hi;
            orc_row_range(&c->p, i, &lo, &hi);
            int any = 0;
            for (int k = 0; k < n; k++) {
                int64_t j = js[k];
                see[k] = !(j < lo || j > hi || orc_mask_at(c, b, h, i, j) == -INFINITY);
                any |= see[k];
            }
            if (!any) continue;
            mp_row_compute(c, hdp, b, h, i, prec, &r);
            mp_delta(c, b, h, i, &r, Di, x);
            /* the row's q and dO as exact 53-bit MPFR numbers, once for all its columns (an fma
               rounds the exact dS q + acc: the operands' precision does not change it) */
            for (int64_t d = 0; d < c->D; d++) mpfr_set_d(qm[d], orc_ld(c->q, c->qs, b, i, h, d, c->dt), MPFR_RNDN);
            for (int64_t d = 0; d < c->Dv; d++)
                mpfr_set_d(om[d], orc_ld(c->dout, c->dos, b, i, h, d, c->dt), MPFR_RNDN);
            for (int k = 0; k < n; k++) {
                if (!see[k]) continue;
                mp_p_ds(c, b, h, i, js[k], &r, Di, P, dS, x, y);
                mpfr_t *ak = dk + (size_t)k * (size_t)c->D, *av = dv + (size_t)k * (size_t)c->Dv;
                for (int64_t d = 0; d < c->D; d++) mpfr_fma(ak[d], dS, qm[d], ak[d], MPFR_RNDN);
                for (int64_t d = 0; d < c->Dv; d++) mpfr_fma(av[d], P, om[d], av[d], MPFR_RNDN);
            }
        }
    }
    mp_row_clear(c, &r);
    if (hdp) orc_mp_head_free(&hd);
    for (size_t e = 0; e < nk; e++) {
        mpfr_mul(dk[e], dk[e], sc, MPFR_RNDN);
        dk_out[e] = mpfr_get_d(dk[e], MPFR_RNDN);
        mpfr_clear(dk[e]);
    }
    for (size_t e = 0; e < nv; e++) { dv_out[e] = mpfr_get_d(dv[e], MPFR_RNDN); mpfr_clear(dv[e]); }
    for (int64_t d = 0; d < c->D + c->Dv; d++) mpfr_clear(qm[d]);
    free(dk); free(dv); free(see); free(qm);
    mpfr_clears(Di, P, dS, x, y, sc, (mpfr_ptr)0);
}

/* dsinks of query head h (BOUNDS.md 14.4): - sum over the n ctxs (batch index bs[k]) and
 * their rows i of exp(sink_h - lse_i) D_i, D_i = dO_i . O_i, with the exact forward (a row
 * with no visible key has O = 0: D = 0). Every operation correctly rounded, one rounding
 * to double at the end. */
double orc_mpfr_dsink(const orc_ctx *const *cs, const int64_t *bs, int n, int64_t h, int prec) {
    mpfr_t acc, Di, P, x;
    mpfr_inits2(prec, acc, Di, P, x, (mpfr_ptr)0);
    mpfr_set_zero(acc, 1);
    for (int part = 0; part < n; part++) {
        const orc_ctx *c = cs[part];
        int64_t b = bs[part];
        double sink = (double)c->sinks[h];
        mp_row r;
        mp_row_init(c, &r, prec);
        for (int64_t i = 0; i < c->Sq; i++) {
            if (!mp_row_compute(c, NULL, b, h, i, prec, &r)) continue; /* O = 0: D = 0 */
            mp_delta(c, b, h, i, &r, Di, x);
            mpfr_set_d(P, sink, MPFR_RNDN);
            mpfr_sub(P, P, r.lse, MPFR_RNDN);
            mpfr_exp(P, P, MPFR_RNDN);
            mpfr_fma(acc, P, Di, acc, MPFR_RNDN);
        }
        mp_row_clear(c, &r);
    }
    double out = -mpfr_get_d(acc, MPFR_RNDN);
    mpfr_clears(acc, Di, P, x, (mpfr_ptr)0);
    return out;
}
