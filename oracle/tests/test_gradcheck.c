/* test_gradcheck.c: the backward oracle agrees with MPFR central finite
 * differences of the forward oracle.
 *
 * Loss L = sum dO . O, with O from the MPFR tier of orc_fwd. For every element
 * x of Q, K and V: D(h) = (L(x+h) - L(x-h)) / 2h for h = 2^-6, 2^-7, 2^-8,
 * Richardson R1(h) = (4 D(h/2) - D(h)) / 3, R2 = (16 R1(h/2) - R1(h)) / 15.
 * Inputs are multiples of 2^-9 below 1 in magnitude, so x +- h is exact in fp16.
 * Assertion: |grad - R2| <= |R2 - R1(2^-7)| (a-posteriori truncation estimate:
 * R1 errs O(h^4), R2 O(h^6)) + e_round (evaluation error of L propagated
 * through the difference quotients: <= 16 E_L / h_min) + orc_err(grad).
 * The test also requires that tolerance to be small (<= 1e-6 relative to the
 * gradient scale) so that it can fail. */
#include "oracle/tests/tutil.h"

static t_prob T;
static orc_options OPT;

/* L and a bound on its evaluation error (orc_err of O plus the double sum) */
static double loss(double *err) {
    fa_fwd_args a = t_fwd_args(&T);
    fa_precision pr = t_profile_fp32();
    orc_fwd_result r;
    if (orc_fwd(&a, &pr, &OPT, &r, NULL) != FA_OK) { fprintf(stderr, "fwd failed\n"); exit(2); }
    double L = 0, E = 0, S = 0;
    int64_t Dv = T.p.head_dim_v;
    for (int64_t x = 0; x < r.o.n; x++) {
        const orc_index *ix = &r.o.index[x];
        for (int64_t d = 0; d < Dv; d++) {
            double g = orc_decode(T.dout[ix->b * T.tdo.stride[0] + ix->s * T.tdo.stride[1] + ix->h * T.tdo.stride[2] +
                                         d * T.tdo.stride[3]], T.p.dtype);
            double o = r.o.ref[x * Dv + d];
            L += g * o;
            E += fabs(g) * r.o.orc_err[x * Dv + d];
            S += fabs(g * o);
        }
    }
    double nu = (double)(r.o.n * Dv) * 2 * 0x1p-53; /* gamma_n of the double sum */
    *err = E + nu / (1 - nu) * S;
    orc_fwd_free(&r);
    return L;
}

static uint16_t q9(void) { /* multiple of 2^-9 in (-1, 1), mostly coarse */
    int k = (int)floor(t_unif() * 31) - 15;
    return orc_encode(k * 0x1p-4 + (t_unif() < 0.3 ? 0x1p-9 : 0), FA_F16);
}

int main(void) {
    fa_problem p = t_problem(1, 3, 5, 2, 1, 4, 3, FA_F16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
    p.softmax_scale = 0.75f;
    t_setup(&T, p, 0, 1, 1, 1, 1);
    int64_t nq = 3 * 2 * 4, nk = 5 * 4, nv = 5 * 3, no = 3 * 2 * 3, nm = 2 * 3 * 5;
    for (int64_t i = 0; i < nq; i++) T.q[i] = q9();
    for (int64_t i = 0; i < nk; i++) T.k[i] = q9();
    for (int64_t i = 0; i < nv; i++) T.v[i] = q9();
    for (int64_t i = 0; i < no; i++) T.dout[i] = q9();
    for (int64_t i = 0; i < nm; i++) T.mask[i] = t_unif() < 0.15 ? -INFINITY : (float)(floor(t_unif() * 9 - 4) / 8);
    orc_options_init(&OPT);
    OPT.tier = ORC_TIER_MPFR;

    /* backward oracle (certified tier), with O / LSE from the forward oracle */
    fa_fwd_args a = t_fwd_args(&T);
    fa_precision pr = t_profile_fp32();
    orc_fwd_result fr;
    CHECK(orc_fwd(&a, &pr, NULL, &fr, NULL) == FA_OK, "fwd");
    t_store_fwd(&T, &fr);
    orc_fwd_free(&fr);
    fa_bwd_args ba = t_bwd_args(&T);
    orc_bwd_result br;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd");

    struct { const char *name; uint16_t *buf; int64_t n; const orc_block *blk; int64_t dim; } ts[3] = {
        {"dQ", T.q, nq, &br.dq, 4}, {"dK", T.k, nk, &br.dk, 4}, {"dV", T.v, nv, &br.dv, 3}};
    double worst_tol = 0, gscale = 0, worst_ratio = 0;
    int64_t checked = 0;
    for (int t = 0; t < 3; t++) {
        for (int64_t e = 0; e < ts[t].n; e++) {
            /* contiguous BSHD: element e is (s, h, d) = vector e / dim in (b, h, s) order? map it */
            int64_t dim = ts[t].dim, H = t == 0 ? 2 : 1, S = t == 0 ? 3 : 5;
            int64_t s = e / (H * dim), h = (e / dim) % H, d = e % dim;
            int64_t vec = h * S + s; /* result blocks are sorted by (b, h, s) */
            double grad = ts[t].blk->ref[vec * dim + d], gerr = ts[t].blk->orc_err[vec * dim + d];
            uint16_t saved = ts[t].buf[e];
            double x0 = orc_decode(saved, FA_F16), D[3], EL = 0;
            for (int k = 0; k < 3; k++) {
                double hh = ldexp(1.0, -6 - k), ep, em;
                ts[t].buf[e] = orc_encode(x0 + hh, FA_F16);
                CHECK(orc_decode(ts[t].buf[e], FA_F16) == x0 + hh, "x+h not exact");
                double Lp = loss(&ep);
                ts[t].buf[e] = orc_encode(x0 - hh, FA_F16);
                CHECK(orc_decode(ts[t].buf[e], FA_F16) == x0 - hh, "x-h not exact");
                double Lm = loss(&em);
                D[k] = (Lp - Lm) / (2 * hh);
                EL = fmax(EL, fmax(ep, em));
            }
            ts[t].buf[e] = saved;
            double R1a = (4 * D[1] - D[0]) / 3, R1b = (4 * D[2] - D[1]) / 3, R2 = (16 * R1b - R1a) / 15;
            double tol = fabs(R2 - R1b) + 16 * EL / 0x1p-8 + gerr;
            CHECK(fabs(grad - R2) <= tol, "%s[%lld]: backward %.15g vs FD %.15g (tol %.3g)", ts[t].name,
                  (long long)e, grad, R2, tol);
            worst_tol = fmax(worst_tol, tol);
            gscale = fmax(gscale, fabs(grad));
            if (tol > 0) worst_ratio = fmax(worst_ratio, fabs(grad - R2) / tol);
            checked++;
        }
    }
    printf("gradcheck: %lld elements, max |grad| %.3g, max tolerance %.3g, worst |grad-FD|/tol %.3g\n",
           (long long)checked, gscale, worst_tol, worst_ratio);
    CHECK(worst_tol <= 1e-6 * gscale, "finite-difference tolerance %.3g too loose to test anything", worst_tol);
    orc_bwd_free(&br);
    t_free(&T);
    if (t_failures) { fprintf(stderr, "%d check(s) failed\n", t_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
