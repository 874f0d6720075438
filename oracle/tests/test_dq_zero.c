/* test_dq_zero.c: dQ rows that are exactly 0 by their inputs' structure (BOUNDS.md 6.1,
 * orc_mpfr_dq_row_zero): a row whose visible keys are all equal, or whose visible values are
 * all equal, with no sink and finite inputs. On random problems (GQA, causal / windows, additive
 * masks with -inf entries, softcap, fp16 / bf16, scales) with K or V made constant per (b, hk)
 * in part of the cases:
 *   - the predicate holds where the structure says it must, and not with a finite sink, a key
 *     or value changed by one ulp, or an Inf input;
 *   - where it holds, the full MPFR sum (orc_mpfr_dq_row_sum) at 1024 bits is within 2^-900
 *     of the row's magnitude of 0, and the certified double tier's interval ref +- orc_err
 *     contains 0 (the shortcut agrees with both tiers);
 *   - orc_bwd (MPFR tier and certified tier with every row escalated) returns +0 exactly for
 *     those rows (the change: the MPFR sum alone leaves a residual, counted below) and, on the
 *     other rows, the same bits as orc_mpfr_dq_row_sum. */
#include "oracle/orc_mpfr.h"
#include "oracle/orc_internal.h"
#include "oracle/tests/tutil.h"

static int same_bits(double a, double b) { return !memcmp(&a, &b, sizeof a); }

static int64_t n_zero_rows, n_other_rows, n_residual, n_neg;

/* max over the row's visible keys of |scale| |K_j|_inf * (|dO_i| |V_j| + |dO_i| max |V|): a
 * magnitude of the row's terms, for the 2^-900 test */
static double row_mag(const orc_ctx *c, int64_t b, int64_t h, int64_t i) {
    int64_t lo, hi, hk = h / c->G;
    orc_row_range(&c->p, i, &lo, &hi);
    double m = 0;
    for (int64_t j = lo; j <= hi; j++) {
        double ka = 0, va = 0;
        for (int64_t d = 0; d < c->D; d++) ka = fmax(ka, fabs(orc_ld(c->k, c->ks, b, j, hk, d, c->dt)));
        for (int64_t d = 0; d < c->Dv; d++) va += fabs(orc_ld(c->v, c->vs, b, j, hk, d, c->dt));
        m = fmax(m, ka * (1 + va));
    }
    return m;
}

static void run_case(int id) {
    int64_t B = 1 + (int64_t)(t_next() % 2), Hkv = 1 + (int64_t)(t_next() % 2);
    int64_t G = 1 + (int64_t)(t_next() % 3), Hq = Hkv * G;
    int64_t Sq = 1 + (int64_t)(t_next() % 13), Sk = 1 + (int64_t)(t_next() % 17);
    int64_t D = 1 + (int64_t)(t_next() % 9), Dv = 1 + (int64_t)(t_next() % 9);
    fa_dtype dt = (t_next() & 1) ? FA_F16 : FA_BF16;
    fa_causal cz = (fa_causal)(t_next() % 3);
    int64_t wl = (t_next() % 3) ? -1 : (int64_t)(t_next() % 5), wr = (t_next() % 3) ? -1 : (int64_t)(t_next() % 5);
    fa_problem p = t_problem(B, Sq, Sk, Hq, Hkv, D, Dv, dt, cz, wl, wr);
    int kind = id % 4; /* 0: K constant, 1: V constant, 2: both, 3: neither (random) */
    if (t_next() % 3 == 0) p.softcap = (t_next() & 1) ? 0.125f : 5.0f; /* 0.125: saturated tanh */
    if (t_next() % 2) p.softmax_scale = 0.375f;
    int with_mask = (int)(t_next() % 2);
    t_prob t;
    t_setup(&t, p, (int)(t_next() % 3), 1.5, 2.0, 1.0, with_mask);
    if (with_mask) {
        int64_t nm = B * Hq * Sq * Sk;
        for (int64_t x = 0; x < nm; x++) t.mask[x] = (t_next() % 4 == 0) ? -INFINITY : (float)t_gauss();
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t j = 1; j < Sk; j++) {
                if (kind == 0 || kind == 2)
                    for (int64_t d = 0; d < D; d++)
                        t.k[b * t.tk.stride[0] + j * t.tk.stride[1] + hk * t.tk.stride[2] + d * t.tk.stride[3]] =
                            t.k[b * t.tk.stride[0] + hk * t.tk.stride[2] + d * t.tk.stride[3]];
                if (kind == 1 || kind == 2)
                    for (int64_t d = 0; d < Dv; d++)
                        t.v[b * t.tv.stride[0] + j * t.tv.stride[1] + hk * t.tv.stride[2] + d * t.tv.stride[3]] =
                            t.v[b * t.tv.stride[0] + hk * t.tv.stride[2] + d * t.tv.stride[3]];
            }
    fa_fwd_args fa = t_fwd_args(&t);
    orc_options o;
    orc_options_init(&o);
    o.baseline = 0;
    fa_precision pr = t_profile_fp32();
    orc_fwd_result fr;
    fa_error err;
    CHECK(orc_fwd(&fa, &pr, &o, &fr, &err) == FA_OK, "case %d: orc_fwd: %s", id, err.msg);
    t_store_fwd(&t, &fr);
    orc_fwd_free(&fr);
    fa_bwd_args a = t_bwd_args(&t);
    orc_ctx c;
    CHECK(orc_ctx_bwd3(&a, &c, &err) == FA_OK, "case %d: orc_ctx_bwd3: %s", id, err.msg);
    double *x1 = malloc((size_t)D * sizeof(double)), *x2 = malloc((size_t)D * sizeof(double));
    int64_t zr = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Sq; i++) {
                int64_t lo, hi, nv = 0;
                orc_row_range(&c.p, i, &lo, &hi);
                for (int64_t j = lo; j <= hi; j++) nv += orc_mask_at(&c, b, h, i, j) > -INFINITY;
                int z = orc_mpfr_dq_row_zero(&c, b, h, i);
                /* the structure implies the predicate: constant K or V, or a single visible key */
                if (kind != 3 || nv == 1) CHECK(z == (nv > 0), "case %d: row (%lld,%lld,%lld), %lld visible keys: predicate %d",
                                                id, (long long)b, (long long)h, (long long)i, (long long)nv, z);
                if (!z) continue;
                zr++;
                orc_mpfr_dq_row_sum(&c, NULL, b, h, i, 1024, x1);
                orc_mpfr_dq_row_sum(&c, NULL, b, h, i, 128, x2);
                double mag = row_mag(&c, b, h, i);
                for (int64_t d = 0; d < D; d++) {
                    CHECK(fabs(x1[d]) <= 0x1p-900 * mag, "case %d: row (%lld,%lld,%lld) d %lld: MPFR-1024 %a, not 0",
                          id, (long long)b, (long long)h, (long long)i, (long long)d, x1[d]);
                    if (x2[d] != 0) n_residual++;
                }
            }
    /* the negatives: a finite sink, one key and one value changed by an ulp, an Inf value */
    if (zr > 0 && kind != 2) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < Sq; i++) {
                    if (!orc_mpfr_dq_row_zero(&c, b, h, i)) continue;
                    int64_t lo, hi, j1 = -1, j0 = -1;
                    orc_row_range(&c.p, i, &lo, &hi);
                    for (int64_t j = lo; j <= hi; j++)
                        if (orc_mask_at(&c, b, h, i, j) > -INFINITY) { if (j0 < 0) j0 = j; else if (j1 < 0) j1 = j; }
                    orc_ctx c2 = c;
                    float sk[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
                    c2.has_sinks = 1;
                    c2.sinks = sk;
                    CHECK(!orc_mpfr_dq_row_zero(&c2, b, h, i), "case %d: taken with a finite sink", id);
                    sk[h] = -INFINITY; /* a sink of -inf is no sink */
                    CHECK(orc_mpfr_dq_row_zero(&c2, b, h, i), "case %d: not taken with a -inf sink", id);
                    if (j1 < 0) continue;
                    int64_t hk = h / G;
                    uint16_t *kp = &t.k[b * t.tk.stride[0] + j1 * t.tk.stride[1] + hk * t.tk.stride[2]];
                    uint16_t *vp = &t.v[b * t.tv.stride[0] + j1 * t.tv.stride[1] + hk * t.tv.stride[2]];
                    uint16_t k0 = kp[0], v0 = vp[0];
                    if (kind == 0) { /* +0 and -0 are one number: K stays constant */
                        uint16_t *kj = &t.k[b * t.tk.stride[0] + hk * t.tk.stride[2]], *sv = malloc((size_t)Sk * 2);
                        for (int64_t j = 0; j < Sk; j++) { sv[j] = kj[j * t.tk.stride[1]]; kj[j * t.tk.stride[1]] = 0; }
                        kp[0] = 0x8000;
                        CHECK(orc_mpfr_dq_row_zero(&c, b, h, i), "case %d: not taken with K holding +0 and -0", id);
                        for (int64_t j = 0; j < Sk; j++) kj[j * t.tk.stride[1]] = sv[j];
                        free(sv);
                    }
                    kp[0] ^= 1; vp[0] ^= 1; /* one ulp off in K and in V: neither is constant */
                    CHECK(!orc_mpfr_dq_row_zero(&c, b, h, i), "case %d: taken with K and V not constant", id);
                    kp[0] = k0;
                    vp[0] = orc_encode(INFINITY, dt);
                    CHECK(!orc_mpfr_dq_row_zero(&c, b, h, i), "case %d: taken with an Inf value", id);
                    vp[0] = v0;
                    n_neg++;
                }
    }
    /* orc_bwd: MPFR tier (every row through the dQ row functions), then the certified tier
     * with every row escalated (ratio 0) and without escalation (the double interval) */
    orc_bwd_result rm, rc, rd;
    o.tier = ORC_TIER_MPFR;
    o.mpfr_prec = 128;
    o.threads = 1 + (int)(t_next() % 3);
    CHECK(orc_bwd(&a, &pr, &o, &rm, &err) == FA_OK, "case %d: orc_bwd mpfr: %s", id, err.msg);
    o.tier = ORC_TIER_CERTIFIED;
    o.escalate_ratio = 0;
    CHECK(orc_bwd(&a, &pr, &o, &rc, &err) == FA_OK, "case %d: orc_bwd escalated: %s", id, err.msg);
    o.escalate_ratio = 1e300; /* no escalation at reference time */
    CHECK(orc_bwd(&a, &pr, &o, &rd, &err) == FA_OK, "case %d: orc_bwd double: %s", id, err.msg);
    int64_t bad = 0, cont = 0;
    for (int64_t x = 0; x < rm.dq.n; x++) {
        if (rm.dq.flags[x * D] & ORC_F_MASKED_ROW) continue;
        const orc_index *ix = &rm.dq.index[x];
        int z = orc_mpfr_dq_row_zero(&c, ix->b, ix->h, ix->s);
        orc_mpfr_dq_row_sum(&c, NULL, ix->b, ix->h, ix->s, 128, x1);
        for (int64_t d = 0; d < D; d++) {
            int64_t e = x * D + d;
            double want = z ? 0.0 : x1[d];
            bad += !same_bits(rm.dq.ref[e], want) || !same_bits(rc.dq.ref[e], want);
            if (z && !(rd.dq.flags[e] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE)))
                cont += !(fabs(rd.dq.ref[e]) <= rd.dq.orc_err[e]);
        }
        if (z) n_zero_rows++; else n_other_rows++;
    }
    CHECK(bad == 0, "case %d: %lld dQ elements of orc_bwd differ from the exact 0 / the MPFR sum", id, (long long)bad);
    CHECK(cont == 0, "case %d: %lld exactly-0 dQ elements outside the double tier's ref +- orc_err", id, (long long)cont);
    orc_bwd_free(&rm); orc_bwd_free(&rc); orc_bwd_free(&rd);
    free(x1); free(x2);
    t_free(&t);
}

int main(void) {
    for (int id = 0; id < 64; id++) run_case(id);
    printf("%lld dQ rows exactly 0 by structure (%lld of their elements nonzero in the 128-bit MPFR sum), "
           "%lld other rows, %lld rows through the negatives\n",
           (long long)n_zero_rows, (long long)n_residual, (long long)n_other_rows, (long long)n_neg);
    CHECK(n_zero_rows > 100 && n_other_rows > 100 && n_neg > 20, "too few rows of each kind");
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("PASS\n");
    return 0;
}
