/* test_gpu_bwd_host.c (CPU only): the GPU tier's backward as a sequence of
 * orc_formulas.h calls -- the calls k_brow, k_colstat, k_colsum and the host
 * finishing (orc_gpu_bwd.c) make, in their order, with plain host loops in place
 * of the device's tiling -- against orc_bwd (which still evaluates its own inline
 * copies of these formulas) on random cases under every named precision preset:
 * every dQ, dK, dV element's flags equal, values within the two orc_err, kernel
 * bounds agreeing (bound_agree.h: 2^-30 plus what the reference's difference moves the
 * RN store's bound, BOUNDS.md 5.8, 12). A change to orc_bwd.c's derivation that orc_formulas.h
 * does not follow fails here, without a GPU (test_gpu_oracle checks the device
 * code itself). Replay structure: one row tile per row (the span is the row's
 * range), compensated sums in aligned 32-position blocks folded with TwoSum, the
 * column sums over rows in order across the group's heads, k_brow's row sums over d
 * (D_i and the D-stage terms) per lane d % 32 and then the warp's butterfly (warp_sum):
 * the device's order, not orc_bwd's, so the references differ from orc_bwd's by a few
 * ulps as the device's do (regression: under torch-math and fp32, where the store bound
 * is the distance to the nearest dtype value, that difference is 2^-27 .. 2^-23 of the
 * bound, beyond a 2^-30 equality: test_gpu_oracle failed 34 elements so). */
#include <stdio.h>

#include "oracle/gpu/tests/bound_agree.h"
#include "oracle/orc_internal.h"
#include "oracle/tests/tutil.h"

typedef struct {
    double hi, lo, blk;
    int cnt;
} csum; /* blocked compensated sum: plain blocks of <= 32 terms folded with TwoSum */

static void cs_fold(csum *s) {
    double e;
    two_sum(s->hi, s->blk, &s->hi, &e);
    s->lo += e;
    s->blk = 0;
}

/* lane 0's value of the device's butterfly warp_sum (x = x + shfl_xor(x, o), o = 16 .. 1;
 * each lane's sum is the same: a + b = b + a) over the lanes' partial sums v[32] */
static double warp_sum_h(const double *v0) {
    double v[32], w[32];
    memcpy(v, v0, sizeof v);
    for (int o = 16; o; o >>= 1) {
        for (int l = 0; l < 32; l++) w[l] = v[l] + v[l ^ o];
        memcpy(v, w, sizeof v);
    }
    return v[0];
}

static int64_t n_elem, n_ref_differs, n_bound_beyond30, n_cases_preset[16];
static int n_lse_unknown;

/* orc_fm_round16 (the device's RN store, orc_fm_store_bound) = orc_encode + orc_decode (the
 * CPU tier's orc_store_bound before the two were one) on both dtypes: every midpoint between
 * adjacent finite values and its neighbours (ties to even, subnormals, the overflow
 * threshold), the values themselves, zeros, infinities and random doubles. */
static void check_round16(void) {
    int64_t n = 0, bad = 0;
    for (int bf = 0; bf < 2; bf++) {
        fa_dtype dt = bf ? FA_BF16 : FA_F16;
        for (unsigned u = 0; u < 0x7c00u + (bf ? 0x7f80u - 0x7c00u : 0); u++) {
            double a = orc_decode((uint16_t)u, dt), z = orc_decode((uint16_t)(u + 1), dt);
            if (isinf(z)) z = a + (a - orc_decode((uint16_t)(u - 1), dt)); /* past the largest: the threshold */
            double mid = a + (z - a) / 2; /* exact: both are on a grid far coarser than double's */
            double xs[7] = {a, mid, nextafter(mid, 0), nextafter(mid, INFINITY), -mid, -nextafter(mid, INFINITY),
                            nextafter(a, INFINITY)};
            for (int k = 0; k < 7; k++) {
                double x = xs[k], r = orc_fm_round16(x, bf), w = orc_decode(orc_encode(x, dt), dt);
                n++;
                if (!(r == w && signbit(r) == signbit(w))) {
                    if (bad++ < 4) CHECK(0, "orc_fm_round16(%a, %s) = %a, orc_encode/decode %a", x, bf ? "bf16" : "fp16", r, w);
                }
            }
        }
        for (int k = 0; k < 200000; k++) {
            double x = ldexp(2 * t_unif() - 1, (int)(t_next() % 300) - (bf ? 160 : 40));
            double r = orc_fm_round16(x, bf), w = orc_decode(orc_encode(x, dt), dt);
            n++;
            if (!(r == w && signbit(r) == signbit(w)) && bad++ < 4)
                CHECK(0, "orc_fm_round16(%a, %s) = %a, orc_encode/decode %a", x, bf ? "bf16" : "fp16", r, w);
        }
        double sp[5] = {0.0, -0.0, INFINITY, -INFINITY, 0x1p-1074};
        for (int k = 0; k < 5; k++) {
            double r = orc_fm_round16(sp[k], bf), w = orc_decode(orc_encode(sp[k], dt), dt);
            n++;
            if (!(r == w && signbit(r) == signbit(w)) && bad++ < 4) CHECK(0, "orc_fm_round16(%a) = %a vs %a", sp[k], r, w);
        }
    }
    CHECK(bad == 0, "orc_fm_round16: %lld of %lld values differ from orc_encode/orc_decode", (long long)bad, (long long)n);
    printf("test_gpu_bwd_host: orc_fm_round16 = orc_encode/orc_decode on %lld values\n", (long long)n);
}

/* ba_bounds_agree (bound_agree.h) on store bounds (orc_fm_store_bound) of references a few
 * ulps apart, pre below the dtype's resolution: they agree though most differ by more than
 * 2^-30; hi moved across a rounding boundary of the dtype (a crossing): they agree; a bound
 * moved by more than the derived tolerance, or by 2^-28 at equal references: they do not. */
static void check_bound_agree(void) {
    int64_t n = 0, beyond30 = 0, cross = 0, neg = 0;
    for (int k = 0; k < 20000; k++) {
        int bf = k % 2;
        double ulp_in = bf ? 0x1p-8 : 0x1p-11, ref = ldexp(1 + t_unif(), (int)(t_next() % 20) - 12);
        if (t_next() % 2) ref = -ref;
        /* within 2^12 ulps of a dtype value: the store bound is that distance (5.8) */
        ref = orc_fm_round16(ref, bf) + (double)(1 + t_next() % 4096) * ldexp(1, ilogb(ref) - 52) * (t_next() % 2 ? 1 : -1);
        double e = fabs(ref) * 0x1p-60 * (1 + t_unif()), pre = fabs(ref) * 0x1p-50 * t_unif();
        double gen = (pre + ulp_in * (fabs(ref) + e + pre)) * ORC_SAFETY;
        double r2 = ref + (double)(1 + t_next() % 8) * ldexp(1, ilogb(ref) - 52) * (t_next() % 2 ? 1 : -1);
        double e2 = e * (1 + 0x1p-40);
        double b1 = orc_fm_store_bound(ref, e, pre, gen, bf, 0), b2 = orc_fm_store_bound(r2, e2, pre, gen, bf, 0);
        n++;
        beyond30 += !(fabs(b1 - b2) <= 0x1p-30 * fmax(b1, b2));
        if (!ba_bounds_agree(b1, b2, ref, r2, e, e2, bf) && neg++ < 4)
            CHECK(0, "store bounds of %a, %a: %a, %a judged different", ref, r2, b1, b2);
        double tol = 0x1p-30 * fmax(b1, b2) + 2 * ORC_SAFETY * (fabs(ref - r2) + fabs(e - e2));
        CHECK(!ba_bounds_agree(b1, b2 + 2 * tol, ref, r2, e, e2, bf), "bound moved by 2 tol judged equal");
        CHECK(!ba_bounds_agree(b1, b1 * (1 + 0x1p-28), ref, ref, e, e, bf), "bound moved by 2^-28 judged equal");
        /* a crossing: ref = a + ulp/4 (a a dtype value), w = ulp/4, so hi = ref + w is the midpoint
         * above a and lo lies well inside: ref walked over it one ulp of ref at a time moves
         * RN(hi) from a to the next dtype value and the bound from ulp/4 to 3 ulp/4 */
        double a = orc_fm_round16(fabs(ref), bf), q = ba_ulp(a, bf) / 4, x = a + q;
        double pc = (q - x * 0x1p-52) / (1 + 0x1p-40) - e - 0x1p-900, pb = NAN, px = 0;
        for (int s = -40; s <= 40; s++) {
            double y = x + s * ldexp(1, ilogb(x) - 52), b = orc_fm_store_bound(y, e, pc, 1e300, bf, 0);
            if (s > -40 && fabs(b - pb) > 0x1p-30 * b + 4 * ORC_SAFETY * fabs(y - px)) { /* RN(hi) moved */
                cross++;
                CHECK(ba_bounds_agree(pb, b, px, y, e, e, bf), "crossing at %a / %a: %a vs %a judged different", px, y,
                      pb, b);
                CHECK(!ba_bounds_agree(pb, b + 2 * ba_ulp(a, bf), px, y, e, e, bf), "crossing plus an ulp judged equal");
            }
            pb = b;
            px = y;
        }
    }
    CHECK(neg == 0, "%lld store-bound pairs judged different", (long long)neg);
    CHECK(beyond30 > n / 10 && cross > 1000, "the pairs do not exercise the tolerance: %lld beyond 2^-30, %lld crossings",
          (long long)beyond30, (long long)cross);
    printf("test_gpu_bwd_host: ba_bounds_agree on %lld store-bound pairs (%lld beyond 2^-30), %lld crossings\n",
           (long long)n, (long long)beyond30, (long long)cross);
}

/* Regression (test_gpu_oracle: case 22 torch-math dQ[5375], bounds 0x1.b49df67879672p+69 vs
 * 0x1.b49df57879671p+69): reference-time escalation replaces ref and orc_err by the MPFR
 * tier's and keeps the bound each tier computed from its own double reference, so the
 * escalated references (equal) no longer say how far the bounds may be apart. Two tiers'
 * double references within their orc_err e1, e2 of an exact value X (e large: the element
 * escalates), store bounds from them, both then escalated to X: ba_bounds_agree on the
 * escalated values rejects many such pairs, ba_bounds_agree_esc accepts every one, and
 * rejects a bound moved by twice its allowance and a 2^-28 move of an unescalated pair. */
static void check_bound_agree_esc(void) {
    int64_t n = 0, old_rej = 0, bad = 0;
    const int prec = 128;
    const double nt = 1000;
    for (int k = 0; k < 20000; k++) {
        int bf = k % 2;
        double ulp_in = bf ? 0x1p-8 : 0x1p-11;
        double X = ldexp(1 + t_unif(), bf ? (int)(t_next() % 80) - 10 : (int)(t_next() % 20) - 6);
        if (t_next() % 2) X = -X;
        double pre = fabs(X) * ldexp(1 + t_unif(), -(int)(t_next() % 12));
        double e1 = pre * ldexp(1 + t_unif(), -(int)(3 + t_next() % 6)), e2 = e1 * (1 + t_unif());
        double r1 = X + e1 * (2 * t_unif() - 1), r2 = X + e2 * (2 * t_unif() - 1);
        double g1 = (pre + ulp_in * (fabs(r1) + e1 + pre)) * ORC_SAFETY;
        double g2 = (pre * (1 + 0x1p-45) + ulp_in * (fabs(r2) + e2 + pre)) * ORC_SAFETY;
        double b1 = orc_fm_store_bound(r1, e1, pre, g1, bf, 0);
        double b2 = orc_fm_store_bound(r2, e2, pre * (1 + 0x1p-45), g2, bf, 0);
        double m1 = orc_mpfr_err(X, e1, prec, nt), m2 = orc_mpfr_err(X, e2, prec, nt);
        if (!isfinite(b1) || !isfinite(b2) || !(e1 > 0x1p-10 * b1)) continue;
        n++;
        old_rej += !ba_bounds_agree(b1, b2, X, X, m1, m2, bf);
        CHECK(ba_err_before(m1, X, prec, nt) >= e1 && ba_err_before(m1, X, prec, nt) <= e1 * (1 + 0x1p-16),
              "ba_err_before(%a) = %a, e_double %a", m1, ba_err_before(m1, X, prec, nt), e1);
        if (!ba_bounds_agree_esc(b1, b2, X, X, m1, m2, 1, 1, prec, nt, bf) && bad++ < 4)
            CHECK(0, "escalated pair X %a refs %a %a e %a %a: bounds %a %a judged different", X, r1, r2, e1, e2, b1, b2);
        /* one tier escalated, the other not */
        if (!ba_bounds_agree_esc(b1, b2, X, r2, m1, e2, 1, 0, prec, nt, bf) && bad++ < 4)
            CHECK(0, "half-escalated pair: bounds %a %a judged different", b1, b2);
        double mb = fmax(b1, b2), d = 2 * (e1 + e2) * (1 + 0x1p-30);
        double allow = 0x1p-29 * mb + ORC_SAFETY * (1 + 0x1p-49) * (2 * d + ba_ulp(fabs(X) + mb + d, bf));
        CHECK(!ba_bounds_agree_esc(b1, b1 + 2 * allow, X, X, m1, m2, 1, 1, prec, nt, bf),
              "escalated bound moved by twice the allowance judged equal");
        CHECK(!ba_bounds_agree_esc(b1, b1 * (1 + 0x1p-28), r1, r1, e1 * 0x1p-40, e1 * 0x1p-40, 0, 0, prec, nt, bf),
              "unescalated bound moved by 2^-28 judged equal");
    }
    CHECK(bad == 0, "%lld escalated pairs judged different", (long long)bad);
    CHECK(n > 5000 && old_rej > n / 10, "the escalated pairs do not exercise the rule: %lld pairs, %lld rejected by "
          "ba_bounds_agree", (long long)n, (long long)old_rej);
    printf("test_gpu_bwd_host: ba_bounds_agree_esc on %lld escalated store-bound pairs (%lld of them rejected by the "
           "unescalated rule)\n", (long long)n, (long long)old_rej);
}

static void cmp(const char *what, int cs, const char *pn, const orc_block *g, const orc_block *c, int bf16) {
    int bad = 0;
    for (int64_t e = 0; e < g->n * g->dim && bad < 4; e++) {
        n_elem++;
        uint8_t fg = g->flags[e] & ~ORC_F_ESCALATED, fc = c->flags[e] & ~ORC_F_ESCALATED;
        if (fg != fc) { bad++; CHECK(0, "case %d %s %s[%lld]: flags %d vs %d", cs, pn, what, (long long)e, fg, fc); continue; }
        if (fg & (ORC_F_NAN | ORC_F_UNCHECKABLE | ORC_F_INF)) continue;
        if (!(fabs(g->ref[e] - c->ref[e]) <= g->orc_err[e] + c->orc_err[e])) {
            bad++;
            CHECK(0, "case %d %s %s[%lld]: ref %a vs %a", cs, pn, what, (long long)e, g->ref[e], c->ref[e]);
        }
        double bg = g->bound[e], bc = c->bound[e];
        n_ref_differs += g->ref[e] != c->ref[e];
        n_bound_beyond30 += !(bg == bc || fabs(bg - bc) <= 0x1p-30 * fmax(bg, bc));
        if (!ba_bounds_agree(bg, bc, g->ref[e], c->ref[e], g->orc_err[e], c->orc_err[e], bf16)) {
            bad++;
            CHECK(0, "case %d %s %s[%lld]: bound %a vs %a (ref %a vs %a, orc_err %g vs %g)", cs, pn, what,
                  (long long)e, bg, bc, g->ref[e], c->ref[e], g->orc_err[e], c->orc_err[e]);
        }
    }
}

/* The replay: res gets dQ, dK, dV of every row / column (blocks allocated by the caller). */
static void replay(const orc_ctx *c, const orc_model *mk, const orc_model *mo, int lse_unknown, orc_bwd_result *res) {
    int64_t D = c->D, Dv = c->Dv, Sk = c->Sk, Sq = c->Sq, G = c->G;
    orc_fm_bwdc bc;
    orc_fm_bwdc_init(mk, mo, c->scale, (double)D, (double)Dv, orc_overflow_threshold((int)c->dt), &bc);
    double *S = calloc((size_t)Sk + 1, 8), *A = calloc((size_t)Sk + 1, 8), *W = calloc((size_t)Sk + 1, 8);
    double *C = calloc((size_t)Sk + 1, 8), *CO = calloc((size_t)Sk + 1, 8), *E = calloc((size_t)Sk + 1, 8);
    uint8_t *vis = calloc((size_t)Sk + 1, 1);
    /* per (head, row, key) values of a group: [G][Sq][Sk][8] and row flags */
    double *M = calloc((size_t)(G * Sq * Sk * ORC_BM_N) + 1, 8);
    uint8_t *V = calloc((size_t)(G * Sq * Sk) + 1, 1), *OV = calloc((size_t)(G * Sq * Sk) + 1, 1);
    int *rbad = calloc((size_t)(G * Sq) + 1, sizeof(int));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t hk = 0; hk < c->Hkv; hk++) {
            double k1max = 0, v1max = 0, kmax = 0, qmax = 0, domax = 0;
            for (int64_t j = 0; j < Sk; j++) {
                double k1 = 0, v1 = 0, km = 0;
                for (int64_t d = 0; d < D; d++) { double x = fabs(orc_ld(c->k, c->ks, b, j, hk, d, c->dt)); k1 += x; km = fmax(km, x); }
                for (int64_t d = 0; d < Dv; d++) v1 += fabs(orc_ld(c->v, c->vs, b, j, hk, d, c->dt));
                if (isfinite(k1) && k1 > k1max) k1max = k1;
                if (isfinite(v1) && v1 > v1max) v1max = v1;
                if (isfinite(km) && km > kmax) kmax = km;
            }
            k1max *= 1 + 0x1p-40;
            v1max *= 1 + 0x1p-40;
            memset(V, 0, (size_t)(G * Sq * Sk));
            memset(OV, 0, (size_t)(G * Sq * Sk));
            for (int64_t g = 0; g < G; g++) {
                int64_t h = hk * G + g;
                for (int64_t i = 0; i < Sq; i++) {
                    for (int64_t d = 0; d < D; d++) { double x = orc_ld(c->q, c->qs, b, i, h, d, c->dt); if (isfinite(x) && fabs(x) > qmax) qmax = fabs(x); }
                    for (int64_t d = 0; d < Dv; d++) { double x = orc_ld(c->dout, c->dos, b, i, h, d, c->dt); if (isfinite(x) && fabs(x) > domax) domax = fabs(x); }
                    int64_t lo, hi;
                    orc_row_range(&c->p, i, &lo, &hi);
                    int64_t jlo = hi >= lo ? lo : 0, span = hi >= lo ? hi - lo + 1 : 0;
                    double q1 = 0;
                    for (int64_t d = 0; d < D; d++) q1 += fabs(orc_ld(c->q, c->qs, b, i, h, d, c->dt));
                    for (int64_t t = 0; t < span; t++) {
                        double s = 0, a = 0;
                        for (int64_t d = 0; d < D; d++) {
                            double x = orc_ld(c->q, c->qs, b, i, h, d, c->dt), y = orc_ld(c->k, c->ks, b, jlo + t, hk, d, c->dt);
                            s = fma(x, y, s);
                            a = fma(fabs(x), fabs(y), a);
                        }
                        S[t] = s;
                        A[t] = a;
                    }
                    orc_row_info R;
                    double efl = orc_score_floor(c, mk, q1 * (1 + 0x1p-40), k1max);
                    orc_row_weights(c, mk, mo, b, h, i, jlo, span, S, A, efl, vis, W, C, CO, E, &R);
                    double *m = M + (size_t)((g * Sq + i) * Sk) * ORC_BM_N;
                    uint8_t *v = V + (g * Sq + i) * Sk, *ov = OV + (g * Sq + i) * Sk;
                    int64_t slot = (b * c->Hq + h) * Sq + i;
                    orc_block *bq = &res->dq;
                    rbad[g * Sq + i] = 0;
                    if (R.kind != ROW_NORMAL) {
                        for (int64_t t = 0; t < span; t++) {
                            if (!vis[t]) continue;
                            v[jlo + t] = 1;
                            ov[jlo + t] = (uint8_t)R.ovf;
                            for (int k = 0; k < ORC_BM_N; k++) m[(jlo + t) * ORC_BM_N + k] = NAN;
                        }
                        rbad[g * Sq + i] = R.kind == ROW_UNCHECKABLE;
                        for (int64_t d = 0; d < D; d++) {
                            int64_t e = slot * D + d;
                            bq->ref[e] = R.kind == ROW_MASKED ? 0.0 : NAN;
                            bq->bound[e] = bq->orc_err[e] = R.kind == ROW_MASKED ? 0.0 : NAN;
                            bq->flags[e] = R.kind == ROW_MASKED ? ORC_F_MASKED_ROW : R.kind == ROW_NAN ? ORC_F_NAN
                                           : ORC_F_UNCHECKABLE | (R.ovf ? ORC_F_OVERFLOW : 0);
                        }
                        continue;
                    }
                    /* O and the row sums (k_brow) */
                    double ln[7][32]; /* k_brow: lane d % 32's sums, then warp_sum */
                    memset(ln, 0, sizeof ln);
                    for (int64_t d = 0; d < Dv; d++) {
                        csum nm = {0, 0, 0, 0};
                        double bs = 0, os = 0;
                        for (int64_t jb = jlo / 32 * 32; jb <= hi; jb += 32) {
                            for (int64_t j = jb; j < jb + 32 && j <= hi; j++) {
                                if (j < jlo || !vis[j - jlo]) continue;
                                double x = orc_ld(c->v, c->vs, b, j, hk, d, c->dt);
                                nm.blk = fma(W[j - jlo], x, nm.blk);
                                bs = fma(C[j - jlo], fabs(x), bs);
                                os = fma(CO[j - jlo], fabs(x), os);
                            }
                            cs_fold(&nm);
                        }
                        double O, e, bd;
                        orc_fwd_elem(mk, mo, &R, nm.hi + nm.lo, bs, os, &O, &e, &bd);
                        double og = orc_ld(c->o, c->os, b, i, h, d, c->dt), x = orc_ld(c->dout, c->dos, b, i, h, d, c->dt);
                        double dev = fabs(og - O);
                        int l = (int)(d % 32);
                        ln[0][l] += x * O; ln[1][l] += fabs(x) * fabs(O); ln[2][l] += fabs(x) * (dev + e);
                        ln[3][l] += fabs(x) * fabs(og); ln[4][l] += fabs(x); ln[5][l] += fabs(og); ln[6][l] += fabs(x) * e;
                    }
                    double Dorc = warp_sum_h(ln[0]), dOaO = warp_sum_h(ln[1]), dOdO = warp_sum_h(ln[2]);
                    double dOaOg = warp_sum_h(ln[3]), dO1 = warp_sum_h(ln[4]), Og1 = warp_sum_h(ln[5]);
                    double dOeO = warp_sum_h(ln[6]);
                    double lse_g = lse_unknown ? NAN : c->lse[b * c->ls[0] + h * c->ls[1] + i * c->ls[2]];
                    orc_fm_brow w;
                    int bad = orc_fm_brow_init(mk, &bc, &R, (double)Dv, Dorc, dOaO, dOdO, dOaOg, dO1, Og1, dOeO, v1max,
                                               lse_unknown, lse_g, &w);
                    w.efl = efl;
                    w.Eo_max = 0;
                    for (int64_t t = 0; t < span; t++)
                        if (vis[t]) w.Eo_max = fmax(w.Eo_max, bc.ce_o * A[t] + bc.cm_o * fabs(orc_mask_at(c, b, h, i, jlo + t)));
                    double *dP = calloc((size_t)span + 1, 8), *Bm = calloc((size_t)span + 1, 8);
                    for (int64_t t = 0; t < span; t++) {
                        if (!vis[t]) continue;
                        for (int64_t d = 0; d < Dv; d++) {
                            double x = orc_ld(c->dout, c->dos, b, i, h, d, c->dt), y = orc_ld(c->v, c->vs, b, jlo + t, hk, d, c->dt);
                            dP[t] = fma(x, y, dP[t]);
                            Bm[t] = fma(fabs(x), fabs(y), Bm[t]);
                        }
                    }
                    if (mk->d_from_p) {
                        double se = 0, sa = 0;
                        for (int64_t t = 0; t < span; t++) {
                            if (!vis[t]) continue;
                            double P, pio, Pup, pik, fP, e1, a1;
                            orc_fm_bkey_p(mk, mo, &bc, &w, S[t], A[t], fabs(orc_mask_at(c, b, h, i, jlo + t)), &P, &pio, &Pup, &pik, &fP);
                            orc_fm_bkey_dsum(mk, &bc, &w, Pup, pik, fP, dP[t], Bm[t], &e1, &a1);
                            se += e1;
                            sa += a1;
                        }
                        w.dD_k = orc_fm_brow_dfromp(mk, (double)R.n, (double)(hi - lo + 1), se, sa);
                        if (!isfinite(w.dD_k)) bad = 1;
                    }
                    double sdsm = 0;
                    int rovf = 0;
                    for (int64_t t = 0; t < span; t++) {
                        if (!vis[t]) continue;
                        double P, pio, Pup, pik, fP, *mm = m + (jlo + t) * ORC_BM_N;
                        orc_fm_bkey_p(mk, mo, &bc, &w, S[t], A[t], fabs(orc_mask_at(c, b, h, i, jlo + t)), &P, &pio, &Pup, &pik, &fP);
                        int o = orc_fm_bkey_ds(mk, mo, &bc, &w, P, pio, Pup, pik, fP, dP[t], Bm[t], mm);
                        v[jlo + t] = 1;
                        ov[jlo + t] = (uint8_t)o;
                        rovf |= o;
                        sdsm += mm[ORC_BM_DSM];
                    }
                    free(dP);
                    free(Bm);
                    rbad[g * Sq + i] = bad;
                    /* dQ row */
                    double kQ, kQo, n = (double)R.n;
                    orc_fm_dq_coefs(mk, mo, n, (double)(hi - lo + 1), (double)span, &kQ, &kQo);
                    double fq = orc_fm_dqk_floor(mk, bc.sc, sdsm, n);
                    rovf |= orc_fm_dq_acc_ovf(mk, bc.sc, sdsm, kmax, kQ);
                    double sumsafe = ORC_SAFETY * (1 + orc_gamma(n + 16, ORC_U_D));
                    double cA = orc_fm_dq_acoef(n, (double)span);
                    for (int64_t d = 0; d < D; d++) {
                        csum s = {0, 0, 0, 0}, as = {0, 0, 0, 0};
                        double bs = 0, os = 0, ae = 0;
                        for (int64_t jb = jlo / 32 * 32; jb <= hi; jb += 32) {
                            for (int64_t j = jb; j < jb + 32 && j <= hi; j++) {
                                if (j < jlo || !v[j]) continue;
                                double x = orc_ld(c->k, c->ks, b, j, hk, d, c->dt), *mm = m + j * ORC_BM_N;
                                s.blk = fma(mm[ORC_BM_DS], x, s.blk);
                                bs = fma(mm[ORC_BM_DSEQ] + kQ * mm[ORC_BM_DSM], fabs(x), bs);
                                os = fma(mm[ORC_BM_DSEO] + kQo * mm[ORC_BM_DSM], fabs(x), os);
                                /* the row-common D term's sum A = sum P K (k_brow's second wsum) */
                                as.blk = fma(mm[ORC_BM_P], x, as.blk);
                                ae = fma(mm[ORC_BM_PPIO] + cA * mm[ORC_BM_P1], fabs(x), ae);
                            }
                            cs_fold(&s);
                            cs_fold(&as);
                        }
                        bs = bs + orc_fm_dq_common(w.dD_k, as.hi + as.lo, ae * ORC_SAFETY); /* k_dqcommon */
                        int64_t e = slot * D + d;
                        double val, eo, pre, bound;
                        orc_fm_grad_elem(mk, c->scale, s.hi + s.lo, bs, os, sumsafe, fq, 0, 1, 0, c->dt == FA_BF16, 0, &val, &eo, &pre, &bound);
                        bq->ref[e] = val;
                        bq->orc_err[e] = eo;
                        bq->bound[e] = bound;
                        bq->flags[e] = orc_value_flags(val) | ((bad || !isfinite(bound)) ? ORC_F_UNCHECKABLE : 0) |
                                       (rovf ? ORC_F_OVERFLOW : 0);
                    }
                }
            }
            /* columns (k_colstat, k_colsum, the host finishing) */
            for (int64_t j = 0; j < Sk; j++) {
                int64_t ncol = 0;
                for (int64_t x = 0; x < G * Sq; x++) ncol += V[x * Sk + j];
                double nn = (double)(ncol + G), sp_o = (double)(G * Sq) + 64.0 * (double)G;
                orc_fm_colc cc;
                orc_fm_col_coefs(mk, mo, nn, (double)(G * Sq + G), sp_o, &cc);
                double sdsm = 0, spp = 0;
                int cbad = 0, covf = 0;
                for (int64_t x = 0; x < G * Sq; x++) {
                    if (!V[x * Sk + j]) continue;
                    const double *mm = M + (size_t)(x * Sk + j) * ORC_BM_N;
                    if (rbad[x]) cbad = 1;
                    if (OV[x * Sk + j]) covf = 1;
                    sdsm += mm[ORC_BM_DSM];
                    spp += orc_fm_sp_term(mk, mm[ORC_BM_PPI], mm[ORC_BM_P1]);
                }
                double sumsafe = ORC_SAFETY * (1 + orc_gamma(nn + 16, ORC_U_D)), sc = bc.sc;
                double fk = orc_fm_dqk_floor(mk, sc, sdsm, nn), fv = orc_fm_dv_floor(mk, spp, nn);
                double cck = orc_acc_coef(mk, nn, (double)(G * Sq + G), 0), sck = mk->ds_fold && sc > 1 ? sc : 1;
                int ovf_k = covf || !(sdsm * qmax * (1 + cck) * sck < bc.thr32);
                int ovf_v = covf || !(spp * domax * (1 + cck) < bc.thr32);
                int64_t slot = (b * c->Hkv + hk) * Sk + j;
                for (int k = 0; k < 2; k++) {
                    int64_t dim = k ? Dv : D;
                    orc_block *bl = k ? &res->dv : &res->dk;
                    for (int64_t d = 0; d < dim; d++) {
                        csum s = {0, 0, 0, 0};
                        double bs = 0, os = 0, habs = 0;
                        for (int64_t g = 0; g < G; g++) {
                            double before = s.hi + s.lo;
                            int64_t h = hk * G + g;
                            for (int64_t i0 = 0; i0 < Sq; i0 += 32) {
                                for (int64_t i = i0; i < i0 + 32 && i < Sq; i++) {
                                    int64_t x = g * Sq + i;
                                    if (!V[x * Sk + j]) continue;
                                    const double *mm = M + (size_t)(x * Sk + j) * ORC_BM_N;
                                    double t = k ? orc_ld(c->dout, c->dos, b, i, h, d, c->dt) : orc_ld(c->q, c->qs, b, i, h, d, c->dt);
                                    if (!k) {
                                        s.blk = fma(mm[ORC_BM_DS], t, s.blk);
                                        bs = fma(orc_fm_wk(&cc, mm[ORC_BM_DSE], mm[ORC_BM_DSM]), fabs(t), bs);
                                        os = fma(orc_fm_wko(&cc, mm[ORC_BM_DSEO], mm[ORC_BM_DSM]), fabs(t), os);
                                    } else {
                                        s.blk = fma(mm[ORC_BM_P], t, s.blk);
                                        bs = fma(orc_fm_wv(&cc, mm[ORC_BM_PPI], mm[ORC_BM_P1]), fabs(t), bs);
                                        os = fma(orc_fm_wvo(&cc, mm[ORC_BM_PPIO], mm[ORC_BM_P1]), fabs(t), os);
                                    }
                                }
                                cs_fold(&s);
                            }
                            habs += orc_fm_head_part(s.hi + s.lo, before);
                        }
                        double scl = k ? 1.0 : c->scale, val, eo, pre, bound;
                        orc_fm_grad_elem(mk, scl, s.hi + s.lo, bs, os, sumsafe, k ? fv : fk, 1, (double)G,
                                         orc_unit_roundoff(c->dt), c->dt == FA_BF16, habs, &val, &eo, &pre, &bound);
                        int ovf_e = (k ? ovf_v : ovf_k) ||
                                    (G > 1 && mk->gqa != FA_GQA_FUSED && !(fabs(scl) * habs + 2 * (double)G * eo + pre < bc.thrdt));
                        int64_t e = slot * dim + d;
                        bl->ref[e] = val;
                        bl->orc_err[e] = eo;
                        bl->bound[e] = ncol ? bound : 0;
                        bl->flags[e] = orc_value_flags(val) | (ncol ? 0 : ORC_F_MASKED_ROW) |
                                       ((cbad || !isfinite(bound)) ? ORC_F_UNCHECKABLE : 0) | (ovf_e && ncol ? ORC_F_OVERFLOW : 0);
                    }
                }
            }
        }
    free(S); free(A); free(W); free(C); free(CO); free(E); free(vis); free(M); free(V); free(OV); free(rbad);
}

int main(int argc, char **argv) {
    int ncases = argc > 1 ? atoi(argv[1]) : 42;
    const char *const *names = fa_precision_preset_names();
    int np = 0;
    while (names[np]) np++;
    const fa_backend *cpu = fa_backend_cpu();
    check_round16();
    check_bound_agree();
    check_bound_agree_esc();
    for (int cs = 0; cs < ncases; cs++) {
        int64_t B = 1 + (int64_t)(t_next() % 2), Sq = 1 + (int64_t)(t_next() % 70), Sk = 1 + (int64_t)(t_next() % 70);
        int64_t Hkv = 1 + (int64_t)(t_next() % 2), G = 1 + (int64_t)(t_next() % 3);
        int64_t dims[] = {16, 32, 40, 64};
        int64_t D = dims[t_next() % 4], Dv = t_next() % 4 == 0 ? dims[t_next() % 4] : D;
        fa_dtype dt = t_next() % 2 ? FA_BF16 : FA_F16;
        fa_causal causal = (fa_causal)(t_next() % 3);
        int64_t wl = t_next() % 3 == 0 ? (int64_t)(t_next() % 40) : -1, wr = t_next() % 3 == 0 ? (int64_t)(t_next() % 40) : -1;
        fa_problem p = t_problem(B, Sq, Sk, Hkv * G, Hkv, D, Dv, dt, causal, wl, wr);
        p.window_align = (fa_align)(t_next() % 2);
        if (t_next() % 3 == 0) p.softmax_scale = (float)(0.02 + t_unif());
        int mask = (int)(t_next() % 3);
        double vamp = dt == FA_BF16 && cs % 7 == 3 ? 0x1p100 : 1.0, amp = dt == FA_BF16 && cs % 7 == 5 ? 0x1p64 : 1.0;
        t_prob t;
        t_setup(&t, p, (int)(t_next() % 3), amp, amp, vamp, mask != 0);
        if (mask == 2)
            for (int64_t x = 0; x < Sk && t.mask; x++) t.mask[x] = -INFINITY; /* a fully masked row */
        fa_fwd_args fa = t_fwd_args(&t);
        fa_error err;
        if (cpu->forward(&fa, &err) != FA_OK) { t_free(&t); continue; }
        fa_bwd_args ba = t_bwd_args(&t);
        int k = cs % np;
        fa_precision pr;
        CHECK(fa_precision_preset(names[k], &pr, &err) == FA_OK, "preset %s", names[k]);
        if (k < 16) n_cases_preset[k]++;
        orc_options opt;
        orc_options_init(&opt);
        opt.baseline = 0;
        opt.lse_unknown = cs % 3 == 1; /* the LSE the kernel used: given, or any within the bound (5.0) */
        n_lse_unknown += opt.lse_unknown;
        opt.escalate_ratio = 1e300; /* compare the double tiers, no MPFR */
        orc_bwd_result rc, rg;
        CHECK(orc_bwd(&ba, &pr, &opt, &rc, &err) == FA_OK, "case %d: orc_bwd: %s", cs, err.msg);
        memset(&rg, 0, sizeof rg);
        orc_ctx c;
        CHECK(orc_ctx_bwd(&ba, &c, &err) == FA_OK, "ctx");
        orc_model mk, mo;
        orc_model_kernel(&c, &pr, &mk);
        orc_model_oracle(&c, &mo);
        orc_block_alloc(&rg.dq, rc.dq.n, D, 0);
        orc_block_alloc(&rg.dk, rc.dk.n, D, 0);
        orc_block_alloc(&rg.dv, rc.dv.n, Dv, 0);
        replay(&c, &mk, &mo, opt.lse_unknown, &rg);
        cmp("dQ", cs, names[k], &rg.dq, &rc.dq, dt == FA_BF16);
        cmp("dK", cs, names[k], &rg.dk, &rc.dk, dt == FA_BF16);
        cmp("dV", cs, names[k], &rg.dv, &rc.dv, dt == FA_BF16);
        orc_block_free(&rg.dq);
        orc_block_free(&rg.dk);
        orc_block_free(&rg.dv);
        orc_bwd_free(&rc);
        t_free(&t);
    }
    printf("test_gpu_bwd_host: %d cases, %lld elements: the orc_formulas.h replay against orc_bwd (%lld references "
           "differ, %lld bounds beyond 2^-30 within the derived tolerance)\n",
           ncases, (long long)n_elem, (long long)n_ref_differs, (long long)n_bound_beyond30);
    /* the device's row-sum order must reach the references (else the comparison tests nothing) */
    CHECK(n_ref_differs > 0 || ncases < 8, "no reference differs from orc_bwd's");
    CHECK(n_lse_unknown > 0 || ncases < 3, "no lse_unknown case");
    for (int k = 0; k < np && k < 16; k++) CHECK(n_cases_preset[k] > 0 || ncases < np, "preset %s not run", names[k]);
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("test_gpu_bwd_host: OK\n");
    return 0;
}
