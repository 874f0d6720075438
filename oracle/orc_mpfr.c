/* orc_mpfr.c: the MPFR tier. Forward rows, dQ rows and dK/dV columns computed
 * from the decoded fp16/bf16 inputs at `prec` bits (every operation correctly
 * rounded to prec bits, RNDN), then rounded once to double (RN).
 *
 * Error: each value is the same formula as the double tier with every unit
 * roundoff <= 2^-prec and plain recursive sums; BOUNDS.md section 6 bounds the
 * result by orc_mpfr_err(). Invisible keys are skipped, never multiplied by 0. */
#include <mpfr.h>
#include <string.h>

#include "oracle/orc_internal.h"

// ----------------------------------------------------------------------------
// one row: scores s_j (visible keys only), lse, O

typedef struct {
    int64_t lo, hi, n;   /* key range; n visible keys */
    uint8_t *vis;        /* [Sk] */
    mpfr_t *s;           /* [Sk], valid where vis */
    mpfr_t lse;
    mpfr_t *o;           /* [Dv] */
} mp_row;

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
    r->o = malloc((size_t)c->Dv * sizeof(mpfr_t));
    if (!r->vis || !r->s || !r->o) abort(); /* small: failure here is not recoverable */
    for (int64_t j = 0; j < c->Sk; j++) mpfr_init2(r->s[j], prec);
    for (int64_t d = 0; d < c->Dv; d++) mpfr_init2(r->o[d], prec);
    mpfr_init2(r->lse, prec);
}

static void mp_row_clear(const orc_ctx *c, mp_row *r) {
    for (int64_t j = 0; j < c->Sk; j++) mpfr_clear(r->s[j]);
    for (int64_t d = 0; d < c->Dv; d++) mpfr_clear(r->o[d]);
    mpfr_clear(r->lse);
    free(r->vis); free(r->s); free(r->o);
}

/* Compute the row; returns 0 when no key is visible (o = 0, lse = -inf). */
static int mp_row_compute(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int prec, mp_row *r) {
    int64_t hk = h / c->G;
    mpfr_t sc, acc, x, y, M, L, w;
    mpfr_inits2(prec, sc, acc, x, y, M, L, w, (mpfr_ptr)0);
    mp_scale(c, sc);
    orc_row_range(&c->p, i, &r->lo, &r->hi);
    r->n = 0;
    mpfr_set_inf(M, -1);
    int nan = 0;
    double *qd = malloc((size_t)c->D * sizeof(double));
    if (!qd) abort();
    for (int64_t d = 0; d < c->D; d++) qd[d] = orc_ld(c->q, c->qs, b, i, h, d, c->dt);
    for (int64_t j = 0; j < c->Sk; j++) {
        r->vis[j] = 0;
        if (j < r->lo || j > r->hi) continue;
        double m = orc_mask_at(c, b, h, i, j);
        if (m == -INFINITY) continue;
        r->vis[j] = 1;
        r->n++;
        mpfr_set_zero(acc, 1);
        /* fp16/bf16 products are exact in double: add them exactly-rounded */
        for (int64_t d = 0; d < c->D; d++)
            mpfr_add_d(acc, acc, qd[d] * orc_ld(c->k, c->ks, b, j, hk, d, c->dt), MPFR_RNDN);
        mpfr_mul(acc, acc, sc, MPFR_RNDN);
        mpfr_add_d(r->s[j], acc, m, MPFR_RNDN);
        if (mpfr_nan_p(r->s[j])) nan = 1;
        else if (mpfr_greater_p(r->s[j], M)) mpfr_set(M, r->s[j], MPFR_RNDN);
    }
    free(qd);
    int vis = r->n > 0;
    if (!vis) {
        for (int64_t d = 0; d < c->Dv; d++) mpfr_set_zero(r->o[d], 1);
        mpfr_set_inf(r->lse, -1);
    } else if (nan || mpfr_inf_p(M)) {
        for (int64_t d = 0; d < c->Dv; d++) mpfr_set_nan(r->o[d]);
        mpfr_set_nan(r->lse);
    } else {
        mpfr_set_zero(L, 1);
        for (int64_t d = 0; d < c->Dv; d++) mpfr_set_zero(r->o[d], 1);
        for (int64_t j = r->lo; j <= r->hi; j++) {
            if (!r->vis[j]) continue;
            mpfr_sub(w, r->s[j], M, MPFR_RNDN);
            mpfr_exp(w, w, MPFR_RNDN);
            mpfr_add(L, L, w, MPFR_RNDN);
            for (int64_t d = 0; d < c->Dv; d++) {
                mpfr_mul_d(x, w, orc_ld(c->v, c->vs, b, j, hk, d, c->dt), MPFR_RNDN);
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
    int vis = mp_row_compute(c, b, h, i, prec, &r);
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
    mpfr_set_zero(dS, 1);
    (void)x; (void)y;
    for (int64_t d = 0; d < c->Dv; d++) /* exact product in double */
        mpfr_add_d(dS, dS, orc_ld(c->dout, c->dos, b, i, h, d, c->dt) * orc_ld(c->v, c->vs, b, j, hk, d, c->dt),
                   MPFR_RNDN);
    mpfr_sub(dS, dS, Di, MPFR_RNDN);
    mpfr_mul(dS, dS, P, MPFR_RNDN);
}

void orc_mpfr_dq_row(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int prec, double *dq_out) {
    int64_t hk = h / c->G;
    mp_row r;
    mp_row_init(c, &r, prec);
    int vis = mp_row_compute(c, b, h, i, prec, &r);
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

void orc_mpfr_dkdv_col(const orc_ctx *c, int64_t b, int64_t hk, int64_t j, int prec,
                       double *dk_out, double *dv_out) {
    mpfr_t Di, P, dS, x, y, sc;
    mpfr_inits2(prec, Di, P, dS, x, y, sc, (mpfr_ptr)0);
    mp_scale(c, sc);
    mpfr_t *dk = malloc((size_t)c->D * sizeof(mpfr_t)), *dv = malloc((size_t)c->Dv * sizeof(mpfr_t));
    if (!dk || !dv) abort();
    for (int64_t d = 0; d < c->D; d++) { mpfr_init2(dk[d], prec); mpfr_set_zero(dk[d], 1); }
    for (int64_t d = 0; d < c->Dv; d++) { mpfr_init2(dv[d], prec); mpfr_set_zero(dv[d], 1); }
    mp_row r;
    mp_row_init(c, &r, prec);
    for (int64_t h = hk * c->G; h < (hk + 1) * c->G; h++) {
        for (int64_t i = 0; i < c->Sq; i++) {
            int64_t lo, hi;
            orc_row_range(&c->p, i, &lo, &hi);
            if (j < lo || j > hi || orc_mask_at(c, b, h, i, j) == -INFINITY) continue;
            mp_row_compute(c, b, h, i, prec, &r);
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
    for (int64_t d = 0; d < c->D; d++) {
        mpfr_mul(dk[d], dk[d], sc, MPFR_RNDN);
        dk_out[d] = mpfr_get_d(dk[d], MPFR_RNDN);
        mpfr_clear(dk[d]);
    }
    for (int64_t d = 0; d < c->Dv; d++) { dv_out[d] = mpfr_get_d(dv[d], MPFR_RNDN); mpfr_clear(dv[d]); }
    free(dk); free(dv);
    mp_row_clear(c, &r);
    mpfr_clears(Di, P, dS, x, y, sc, (mpfr_ptr)0);
}
