/* test_dq_zero.c: dQ rows and dK columns that are exactly 0 by their inputs' structure
 * (BOUNDS.md 6.1, orc_mpfr_dq_row_zero, orc_mpfr_dk_col_zero). On random problems (GQA, causal /
 * windows, additive masks with -inf entries, softcap, fp16 / bf16, scales) with, by case, K
 * constant per (b, hk), V constant, both, neither, dO zero, Q zero:
 *   - the predicates hold where the structure says they must (and with a -inf sink), and not
 *     with a finite sink (unless dO or Q is zero), a key and a value one ulp off, an Inf input;
 *   - where they hold, the full MPFR value at 1024 bits is 0 to within 2^-700 of the 128-bit
 *     one (a nonzero exact value would agree with it to ~2^-120), and the certified double
 *     tier's interval ref +- orc_err contains 0;
 *   - orc_bwd (MPFR tier, certified tier with every element escalated) returns +0 exactly for
 *     the zero dQ rows (the 128-bit MPFR sum alone leaves a residual, counted) and the MPFR sum's
 *     bits elsewhere; with the default ratio, a column whose dK alone needed MPFR and is 0 by
 *     structure gets dK = +0 and keeps the double tier's dV bits (counted: the change). */
#include "oracle/orc_mpfr.h"
#include "oracle/orc_internal.h"
#include "oracle/tests/tutil.h"

static int same_bits(double a, double b) { return !memcmp(&a, &b, sizeof a); }

static int64_t n_zero_rows, n_other_rows, n_residual, n_neg, n_zero_cols, n_short_cols;

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
    fa_problem p = t_random_problem();
    const int64_t B = p.batch, Sq = p.seqlen_q, Sk = p.seqlen_k, Hq = p.heads_q, Hkv = p.heads_kv, G = Hq / Hkv;
    const int64_t D = p.head_dim_qk, Dv = p.head_dim_v;
    const fa_dtype dt = p.dtype;
    int kind = id % 6; /* 0: K constant, 1: V constant, 2: both, 3: neither (random), 4: dO 0, 5: Q 0 */
    t_prob t;
    t_random_setup(&t, &p, 0.125f); /* softcap 0.125: saturated tanh */
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
    if (kind == 4 || kind == 5) {
        uint16_t *x = kind == 4 ? t.dout : t.q;
        const fa_tensor *tx = kind == 4 ? &t.tdo : &t.tq;
        int64_t dm = kind == 4 ? Dv : D;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t h = 0; h < Hq; h++)
                    for (int64_t d = 0; d < dm; d++)
                        x[b * tx->stride[0] + i * tx->stride[1] + h * tx->stride[2] + d * tx->stride[3]] =
                            (t_next() & 1) ? 0x8000 : 0; /* +0 and -0 */
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
                if (kind != 3 && kind != 5) CHECK(z == (nv > 0), "case %d: row (%lld,%lld,%lld), %lld visible keys: predicate %d",
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
                    CHECK(orc_mpfr_dq_row_zero(&c2, b, h, i) == (kind == 4), "case %d: dO zero %d, finite sink: %d", id,
                          kind == 4, !(kind == 4));
                    sk[h] = NAN; /* a NaN sink makes the row NaN: never 0 (dO zero or not) */
                    CHECK(!orc_mpfr_dq_row_zero(&c2, b, h, i), "case %d: taken with a NaN sink", id);
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
                    if (kind != 4) CHECK(!orc_mpfr_dq_row_zero(&c, b, h, i), "case %d: taken with K and V not constant", id);
                    kp[0] = k0;
                    vp[0] = orc_encode(INFINITY, dt);
                    CHECK(!orc_mpfr_dq_row_zero(&c, b, h, i), "case %d: taken with an Inf value", id);
                    vp[0] = v0;
                    n_neg++;
                }
    }
    /* dK columns: the predicate against the structure, MPFR at 1024 / 128 bits */
    double *k1 = malloc((size_t)D * sizeof(double)), *k2 = malloc((size_t)D * sizeof(double));
    double *v1 = malloc((size_t)Dv * sizeof(double));
    int8_t *cache = malloc((size_t)(G * Sq));
    for (int64_t b = 0; b < B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++) {
            memset(cache, -1, (size_t)(G * Sq));
            for (int64_t j = 0; j < Sk; j++) {
                int64_t seen = 0;
                for (int64_t h = hk * G; h < (hk + 1) * G; h++)
                    for (int64_t i = 0; i < Sq; i++) {
                        int64_t lo, hi;
                        orc_row_range(&c.p, i, &lo, &hi);
                        seen += j >= lo && j <= hi && orc_mask_at(&c, b, h, i, j) > -INFINITY;
                    }
                int z = orc_mpfr_dk_col_zero(&c, b, hk, j, (t_next() & 1) ? cache : NULL);
                CHECK(z == orc_mpfr_dk_col_zero(&c, b, hk, j, NULL), "case %d: column %lld: cached and uncached differ", id,
                      (long long)j);
                if (kind == 1 || kind == 2 || kind == 4 || kind == 5)
                    CHECK(z, "case %d: column (%lld,%lld,%lld) seen by %lld rows: not 0 by structure", id, (long long)b,
                          (long long)hk, (long long)j, (long long)seen);
                if (!z || !seen) continue;
                orc_ctx c2 = c;
                float sk[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
                c2.has_sinks = 1;
                c2.sinks = sk;
                if (kind == 1 || kind == 2) CHECK(!orc_mpfr_dk_col_zero(&c2, b, hk, j, NULL), "case %d: column with a sink", id);
                if (kind == 4 || kind == 5) CHECK(orc_mpfr_dk_col_zero(&c2, b, hk, j, NULL), "case %d: column, dO / Q 0, sink", id);
                if (n_zero_cols++ % 4) continue; /* MPFR on every fourth (the cost of a column: G Sq rows) */
                orc_mpfr_dkdv_col(&c, b, hk, j, 1024, k1, v1);
                orc_mpfr_dkdv_col(&c, b, hk, j, 128, k2, v1);
                for (int64_t d = 0; d < D; d++)
                    CHECK(fabs(k1[d]) <= 0x1p-700 * fmax(fabs(k2[d]), 0x1p-300), "case %d: column %lld d %lld: MPFR-1024 dK %a "
                          "(128 bits: %a), not 0", id, (long long)j, (long long)d, k1[d], k2[d]);
            }
        }
    free(k1); free(k2); free(v1); free(cache);
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
    /* dK columns: the double interval contains 0 where the predicate holds; default ratio: a
     * column with dK escalated and dV not is a structural 0 (dK = +0, dV the double tier's) */
    orc_bwd_result rf;
    orc_options_init(&o);
    o.baseline = 0;
    CHECK(orc_bwd(&a, &pr, &o, &rf, &err) == FA_OK, "case %d: orc_bwd default: %s", id, err.msg);
    int64_t kc = 0, ks = 0;
    for (int64_t x = 0; x < rf.dk.n; x++) {
        if (rf.dk.flags[x * D] & ORC_F_MASKED_ROW) continue;
        const orc_index *ix = &rf.dk.index[x];
        int z = orc_mpfr_dk_col_zero(&c, ix->b, ix->h, ix->s, NULL);
        for (int64_t d = 0; d < D && z; d++)
            if (!(rd.dk.flags[x * D + d] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE)))
                kc += !(fabs(rd.dk.ref[x * D + d]) <= rd.dk.orc_err[x * D + d]);
        int kesc = (rf.dk.flags[x * D] & ORC_F_ESCALATED) != 0, vesc = (rf.dv.flags[x * Dv] & ORC_F_ESCALATED) != 0;
        if (!kesc || vesc) continue;
        ks++;
        CHECK(z, "case %d: column %lld: dK escalated alone without a structural 0", id, (long long)x);
        for (int64_t d = 0; d < D; d++) CHECK(same_bits(rf.dk.ref[x * D + d], 0.0), "case %d: dK not +0", id);
        for (int64_t d = 0; d < Dv; d++)
            CHECK(same_bits(rf.dv.ref[x * Dv + d], rd.dv.ref[x * Dv + d]) && rf.dv.orc_err[x * Dv + d] == rd.dv.orc_err[x * Dv + d],
                  "case %d: column %lld: dV is not the double tier's", id, (long long)x);
    }
    CHECK(kc == 0, "case %d: %lld structurally 0 dK elements outside the double tier's ref +- orc_err", id, (long long)kc);
    n_short_cols += ks;
    orc_bwd_free(&rf);
    CHECK(cont == 0, "case %d: %lld exactly-0 dQ elements outside the double tier's ref +- orc_err", id, (long long)cont);
    orc_bwd_free(&rm); orc_bwd_free(&rc); orc_bwd_free(&rd);
    free(x1); free(x2);
    t_free(&t);
}

int main(void) {
    for (int id = 0; id < 96; id++) run_case(id);
    printf("%lld dQ rows exactly 0 by structure (%lld of their elements nonzero in the 128-bit MPFR sum), "
           "%lld other rows, %lld rows through the negatives; %lld dK columns 0 by structure, %lld of them "
           "escalated alone in orc_bwd (dK = +0 without MPFR)\n",
           (long long)n_zero_rows, (long long)n_residual, (long long)n_other_rows, (long long)n_neg,
           (long long)n_zero_cols, (long long)n_short_cols);
    CHECK(n_zero_rows > 100 && n_other_rows > 100 && n_neg > 20 && n_zero_cols > 100 && n_short_cols > 0,
          "too few rows / columns of each kind");
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("PASS\n");
    return 0;
}
