/* test_oracle_basic.c: closed forms, masked and empty cases, GQA sums, NaN in
 * invisible positions, validation, agreement of the certified tier with the
 * MPFR tier (|cert - mpfr| <= orc_err_cert + orc_err_mpfr), escalation. */
#include "oracle/tests/tutil.h"

// ----------------------------------------------------------------------------

static double o_at(const orc_fwd_result *r, int64_t b, int64_t h, int64_t i, int64_t d) {
    for (int64_t x = 0; x < r->o.n; x++)
        if (r->o.index[x].b == b && r->o.index[x].h == h && r->o.index[x].s == i)
            return r->o.ref[x * r->o.dim + d];
    return NAN;
}

/* Q = 0: every visible score is the mask value (0 here), O = mean of visible V rows,
 * LSE = log(n). Causal bottom-right with a window, Sq != Sk. */
static void test_q_zero(void) {
    fa_problem p = t_problem(2, 5, 9, 2, 1, 8, 6, FA_F16, FA_CAUSAL_BOTTOM_RIGHT, 3, -1);
    t_prob t;
    t_setup(&t, p, 1, 0.0, 1.0, 1.0, 0);
    fa_fwd_args a = t_fwd_args(&t);
    fa_precision pr = t_profile_fp32();
    orc_fwd_result r;
    fa_error e;
    CHECK(orc_fwd(&a, &pr, NULL, &r, &e) == FA_OK, "%s", e.msg);
    for (int64_t x = 0; x < r.o.n; x++) {
        const orc_index *ix = &r.o.index[x];
        int64_t n = 0;
        double sum[6] = {0};
        for (int64_t j = 0; j < p.seqlen_k; j++) {
            if (!orc_visible(&p, ix->s, j)) continue;
            n++;
            for (int d = 0; d < 6; d++)
                sum[d] += orc_decode(t.v[ix->b * t.tv.stride[0] + j * t.tv.stride[1] + d * t.tv.stride[3]], p.dtype);
        }
        /* diag = i + 4, window 3: keys i+1 .. i+4 (n = 4) */
        CHECK(n == 4, "row %lld sees %lld keys", (long long)ix->s, (long long)n);
        for (int d = 0; d < 6; d++) {
            double mean = sum[d] / n, ref = r.o.ref[x * 6 + d]; /* fp16 sums of 4 terms are exact */
            CHECK(fabs(ref - mean) <= r.o.orc_err[x * 6 + d] + 0x1p-53 * fabs(mean),
                  "Q=0 row %lld d %d ref %.17g mean %.17g", (long long)ix->s, d, ref, mean);
        }
        CHECK(fabs(r.lse.ref[x] - log(4.0)) <= r.lse.orc_err[x] + 0x1p-52, "lse %.17g", r.lse.ref[x]);
    }
    orc_fwd_free(&r);
    t_free(&t);
}

/* One dominant key: q = e_0 * 8, k_j0 = e_0 * 8, others 0: scale*64 = 64/sqrt(4) = 32
 * above the rest, so O = v_j0 + O(n e^-32 max|v|). */
static void test_dominant_key(void) {
    fa_problem p = t_problem(1, 1, 16, 1, 1, 4, 4, FA_BF16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 0.0, 0.0, 1.0, 0);
    int64_t j0 = 11;
    t.q[0] = orc_encode(8.0, p.dtype);
    t.k[j0 * t.tk.stride[1]] = orc_encode(8.0, p.dtype);
    fa_fwd_args a = t_fwd_args(&t);
    fa_precision pr = t_profile_fp32();
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    double vmax = 0;
    for (int64_t j = 0; j < 16; j++)
        for (int d = 0; d < 4; d++) vmax = fmax(vmax, fabs(orc_decode(t.v[j * t.tv.stride[1] + d], p.dtype)));
    for (int d = 0; d < 4; d++) {
        double vj = orc_decode(t.v[j0 * t.tv.stride[1] + d], p.dtype);
        double tol = 15 * exp(-32.0) * 2 * vmax + r.o.orc_err[d];
        CHECK(fabs(r.o.ref[d] - vj) <= tol, "dominant d %d ref %.17g v %.17g", d, r.o.ref[d], vj);
    }
    orc_fwd_free(&r);
    t_free(&t);
}

/* Sparse small integers with equal scores on the visible keys: O is the mean of
 * 4 or 8 small-integer V rows, exactly representable; both tiers must be exact. */
static void test_exact_integers(void) {
    fa_problem p = t_problem(1, 8, 8, 1, 1, 8, 8, FA_F16, FA_CAUSAL_TOP_LEFT, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 0.0, 0.0, 0.0, 0);
    /* q has nonzeros only in dims 0..1; k has the same values in those dims for all keys
     * (so every score is equal), and arbitrary sparse integers elsewhere. */
    for (int64_t i = 0; i < 8; i++) {
        t.q[i * 8 + 0] = orc_encode(2, p.dtype);
        t.q[i * 8 + 1] = orc_encode(-1, p.dtype);
    }
    for (int64_t j = 0; j < 8; j++) {
        t.k[j * 8 + 0] = orc_encode(1, p.dtype);
        t.k[j * 8 + 1] = orc_encode(2, p.dtype);
        for (int d = 2; d < 8; d++) t.k[j * 8 + d] = orc_encode(t_unif() < 0.8 ? 0 : floor(t_unif() * 5) - 2, p.dtype);
        for (int d = 0; d < 8; d++) t.v[j * 8 + d] = orc_encode(t_unif() < 0.8 ? 0 : floor(t_unif() * 5) - 2, p.dtype);
    }
    fa_fwd_args a = t_fwd_args(&t);
    fa_precision pr = t_profile_fp32();
    orc_options opt;
    orc_options_init(&opt);
    for (int tier = 0; tier < 2; tier++) {
        opt.tier = tier ? ORC_TIER_MPFR : ORC_TIER_CERTIFIED;
        orc_fwd_result r;
        CHECK(orc_fwd(&a, &pr, &opt, &r, NULL) == FA_OK, "fwd");
        for (int64_t i = 0; i < 8; i++) {
            if (i != 3 && i != 7) continue; /* rows seeing 4 and 8 keys: exact means */
            for (int d = 0; d < 8; d++) {
                double s = 0;
                for (int64_t j = 0; j <= i; j++) s += orc_decode(t.v[j * 8 + d], p.dtype);
                double mean = s / (double)(i + 1);
                CHECK(o_at(&r, 0, 0, i, d) == mean, "tier %d row %lld d %d: %.17g != %.17g", tier,
                      (long long)i, d, o_at(&r, 0, 0, i, d), mean);
            }
        }
        orc_fwd_free(&r);
    }
    t_free(&t);
}

// ----------------------------------------------------------------------------
// masked and empty

static void test_masked_and_empty(void) {
    fa_precision pr = t_profile_fp32();
    /* window that hides everything for the first rows: causal top-left, window_right
     * irrelevant, mask -inf on a whole row */
    fa_problem p = t_problem(1, 6, 4, 2, 1, 8, 8, FA_F16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1, 1, 1, 1);
    for (int64_t j = 0; j < 4; j++) t.mask[0 * 24 + 5 * 4 + j] = -INFINITY; /* head 0 row 5 */
    fa_fwd_args a = t_fwd_args(&t);
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    for (int64_t x = 0; x < r.o.n; x++) {
        const orc_index *ix = &r.o.index[x];
        int masked = ix->s < 2 || (ix->h == 0 && ix->s == 5); /* diag(i) = i - 2 */
        int all_mask_inf = 1;
        for (int64_t j = 0; j < 4 && !masked; j++)
            if (orc_visible(&p, ix->s, j) && t.mask[ix->h * 24 + ix->s * 4 + j] != -INFINITY) all_mask_inf = 0;
        if (!masked && all_mask_inf) masked = 1; /* random -inf may hide a short row too */
        CHECK(((r.lse.flags[x] & ORC_F_MASKED_ROW) != 0) == masked, "row %lld h %lld", (long long)ix->s, (long long)ix->h);
        if (masked) {
            CHECK(r.lse.ref[x] == -INFINITY, "lse %g", r.lse.ref[x]);
            for (int d = 0; d < 8; d++) CHECK(r.o.ref[x * 8 + d] == 0 && r.o.bound[x * 8 + d] == 0, "o");
        }
    }
    /* the backward of the same: masked rows give dQ = 0 */
    t_store_fwd(&t, &r);
    fa_bwd_args ba = t_bwd_args(&t);
    orc_bwd_result br;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd");
    for (int64_t x = 0; x < br.dq.n; x++)
        if (br.dq.index[x].s < 2)
            for (int d = 0; d < 8; d++) CHECK(br.dq.ref[x * 8 + d] == 0 && (br.dq.flags[x * 8 + d] & ORC_F_MASKED_ROW), "dq");
    orc_bwd_free(&br);
    orc_fwd_free(&r);
    t_free(&t);

    /* Sk = 0: every row masked; Sq = 0: nothing */
    p = t_problem(1, 3, 0, 1, 1, 8, 8, FA_BF16, FA_CAUSAL_NONE, -1, -1);
    t_setup(&t, p, 0, 1, 1, 1, 0);
    a = t_fwd_args(&t);
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd sk=0");
    CHECK(r.o.n == 3, "rows %lld", (long long)r.o.n);
    for (int64_t x = 0; x < r.o.n; x++) CHECK(r.lse.ref[x] == -INFINITY && r.o.ref[x * 8] == 0, "sk=0");
    ba = t_bwd_args(&t);
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd sk=0");
    CHECK(br.dk.n == 0 && br.dq.n == 3, "bwd sk=0 shapes");
    for (int64_t x = 0; x < br.dq.n * 8; x++) CHECK(br.dq.ref[x] == 0, "dq sk=0");
    orc_bwd_free(&br);
    orc_fwd_free(&r);
    t_free(&t);
    p = t_problem(2, 0, 5, 1, 1, 8, 8, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_setup(&t, p, 0, 1, 1, 1, 0);
    a = t_fwd_args(&t);
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK && r.o.n == 0, "fwd sq=0");
    ba = t_bwd_args(&t);
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd sq=0");
    /* no query: every key column is masked, dK = dV = 0 */
    for (int64_t x = 0; x < br.dk.n * 8; x++) CHECK(br.dk.ref[x] == 0 && (br.dk.flags[x] & ORC_F_MASKED_ROW), "dk sq=0");
    orc_bwd_free(&br);
    orc_fwd_free(&r);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// GQA: dK, dV of a group equal the sums of the MHA gradients of its heads

static void test_gqa_sums(void) {
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(1, 6, 7, 4, 2, 8, 8, FA_F16, FA_CAUSAL_TOP_LEFT, -1, -1);
    t_prob g, m;
    t_setup(&g, p, 0, 1, 1, 1, 0);
    fa_problem pm = p;
    pm.heads_kv = 4;
    t_setup(&m, pm, 0, 1, 1, 1, 0);
    memcpy(m.q, g.q, 2 * 6 * 4 * 8);
    memcpy(m.dout, g.dout, 2 * 6 * 4 * 8);
    for (int64_t j = 0; j < 7; j++)
        for (int64_t h = 0; h < 4; h++)
            for (int d = 0; d < 8; d++) {
                m.k[j * 32 + h * 8 + d] = g.k[j * 16 + (h / 2) * 8 + d];
                m.v[j * 32 + h * 8 + d] = g.v[j * 16 + (h / 2) * 8 + d];
            }
    orc_fwd_result fr;
    fa_fwd_args fa = t_fwd_args(&g);
    CHECK(orc_fwd(&fa, &pr, NULL, &fr, NULL) == FA_OK, "fwd");
    t_store_fwd(&g, &fr);
    memcpy(m.o, g.o, 2 * 6 * 4 * 8);
    memcpy(m.lse, g.lse, sizeof(float) * 24);
    orc_fwd_free(&fr);
    orc_bwd_result rg, rm;
    fa_bwd_args ag = t_bwd_args(&g), am = t_bwd_args(&m);
    CHECK(orc_bwd(&ag, &pr, NULL, &rg, NULL) == FA_OK, "bwd gqa");
    CHECK(orc_bwd(&am, &pr, NULL, &rm, NULL) == FA_OK, "bwd mha");
    for (int64_t x = 0; x < rg.dk.n; x++) {
        int64_t hk = rg.dk.index[x].h, j = rg.dk.index[x].s;
        for (int d = 0; d < 8; d++) {
            double sk = 0, sv = 0, ek = 0, ev = 0;
            for (int64_t h = 2 * hk; h < 2 * hk + 2; h++) {
                int64_t y = h * 7 + j; /* MHA column (b=0, h, j) in sorted order */
                sk += rm.dk.ref[y * 8 + d]; ek += rm.dk.orc_err[y * 8 + d];
                sv += rm.dv.ref[y * 8 + d]; ev += rm.dv.orc_err[y * 8 + d];
            }
            /* the MHA pair sum itself rounds once: 2^-53 |sum| */
            CHECK(fabs(rg.dk.ref[x * 8 + d] - sk) <= rg.dk.orc_err[x * 8 + d] + ek + 0x1p-52 * fabs(sk),
                  "dk %lld %lld %d: %.17g vs %.17g", (long long)hk, (long long)j, d, rg.dk.ref[x * 8 + d], sk);
            CHECK(fabs(rg.dv.ref[x * 8 + d] - sv) <= rg.dv.orc_err[x * 8 + d] + ev + 0x1p-52 * fabs(sv),
                  "dv %lld %lld %d: %.17g vs %.17g", (long long)hk, (long long)j, d, rg.dv.ref[x * 8 + d], sv);
        }
    }
    /* dQ is per head and must agree exactly in meaning */
    for (int64_t x = 0; x < rg.dq.n * 8; x++)
        CHECK(fabs(rg.dq.ref[x] - rm.dq.ref[x]) <= rg.dq.orc_err[x] + rm.dq.orc_err[x], "dq %lld", (long long)x);
    orc_bwd_free(&rg);
    orc_bwd_free(&rm);
    t_free(&g);
    t_free(&m);
}

// ----------------------------------------------------------------------------
// NaN and Inf in invisible positions change nothing (bitwise)

static void test_invisible_nan(void) {
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(1, 5, 6, 1, 1, 8, 8, FA_BF16, FA_CAUSAL_TOP_LEFT, 2, -1);
    t_prob t;
    t_setup(&t, p, 2, 1, 1, 1, 1);
    fa_fwd_args a = t_fwd_args(&t);
    orc_fwd_result r0, r1;
    CHECK(orc_fwd(&a, &pr, NULL, &r0, NULL) == FA_OK, "fwd");
    t_store_fwd(&t, &r0);
    fa_bwd_args ba = t_bwd_args(&t);
    orc_bwd_result b0, b1;
    CHECK(orc_bwd(&ba, &pr, NULL, &b0, NULL) == FA_OK, "bwd");
    /* key 5 is invisible to every row (causal, Sq < Sk top-left): poison K, V there,
     * and V/K of any key a row cannot see through the mask stay read by other rows. */
    for (int d = 0; d < 8; d++) {
        t.k[5 * t.tk.stride[1] + d * t.tk.stride[3]] = orc_encode(NAN, p.dtype);
        t.v[5 * t.tv.stride[1] + d * t.tv.stride[3]] = orc_encode(INFINITY, p.dtype);
    }
    CHECK(orc_fwd(&a, &pr, NULL, &r1, NULL) == FA_OK, "fwd poisoned");
    CHECK(memcmp(r0.o.ref, r1.o.ref, sizeof(double) * (size_t)(r0.o.n * 8)) == 0, "O changed by invisible NaN");
    CHECK(memcmp(r0.o.bound, r1.o.bound, sizeof(double) * (size_t)(r0.o.n * 8)) == 0, "bound changed");
    CHECK(orc_bwd(&ba, &pr, NULL, &b1, NULL) == FA_OK, "bwd poisoned");
    CHECK(memcmp(b0.dq.ref, b1.dq.ref, sizeof(double) * (size_t)(b0.dq.n * 8)) == 0, "dQ changed by invisible NaN");
    for (int64_t x = 0; x < b0.dk.n * 8; x++)
        if (b0.dk.index[x / 8].s != 5)
            CHECK(b0.dk.ref[x] == b1.dk.ref[x] && b0.dv.ref[x] == b1.dv.ref[x], "dK/dV changed");
    /* a visible NaN in V poisons exactly that column of the rows that see it */
    t.v[0 * t.tv.stride[1] + 3 * t.tv.stride[3]] = orc_encode(NAN, p.dtype);
    orc_fwd_result r2;
    CHECK(orc_fwd(&a, &pr, NULL, &r2, NULL) == FA_OK, "fwd visible nan");
    for (int64_t x = 0; x < r2.o.n; x++) {
        int sees = orc_visible(&p, r2.o.index[x].s, 0) && t.mask[r2.o.index[x].s * 6 + 0] != -INFINITY;
        CHECK(((r2.o.flags[x * 8 + 3] & ORC_F_NAN) != 0) == sees, "row %lld", (long long)x);
        CHECK(!(r2.o.flags[x * 8 + 2] & ORC_F_NAN), "other column");
    }
    orc_fwd_free(&r0); orc_fwd_free(&r1); orc_fwd_free(&r2);
    orc_bwd_free(&b0); orc_bwd_free(&b1);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// validation

static void test_validation(void) {
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(1, 4, 4, 2, 1, 8, 8, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1, 1, 1, 0);
    fa_fwd_args a;
    orc_fwd_result r;
    fa_error e;
    struct { const char *arg; } cases[] = {{"q"}, {"k.stride[1]"}, {"heads_kv"}, {"softmax_scale"},
                                           {"seqlen_q"}, {"dtype"}, {"v"}, {"mask.stride[2]"}, {"causal"}};
    for (int c = 0; c < 9; c++) {
        a = t_fwd_args(&t);
        switch (c) {
        case 0: a.q.ptr = NULL; break;
        case 1: a.k.stride[1] = -1; break;
        case 2: a.p.heads_kv = 3; break;
        case 3: a.p.softmax_scale = INFINITY; break;
        case 4: a.p.seqlen_q = -2; break;
        case 5: a.p.dtype = (fa_dtype)7; break;
        case 6: a.v.ptr = (char *)t.v + 1; break;
        case 7: { static float m[16]; a.mask.ptr = m; a.mask.stride[2] = -4; break; }
        case 8: a.p.causal = (fa_causal)9; break;
        }
        memset(&e, 0, sizeof e);
        fa_status st = orc_fwd(&a, &pr, NULL, &r, &e);
        CHECK(st == FA_ERR_INVALID, "case %d status %d", c, (int)st);
        CHECK(strcmp(e.arg, cases[c].arg) == 0, "case %d arg '%s' msg '%s'", c, e.arg, e.msg);
        CHECK(e.msg[0] != 0 && r.o.ref == NULL, "case %d", c);
    }
    a = t_fwd_args(&t);
    orc_options opt;
    orc_options_init(&opt);
    opt.mpfr_prec = 64;
    CHECK(orc_fwd(&a, &pr, &opt, &r, &e) == FA_ERR_INVALID && strcmp(e.arg, "mpfr_prec") == 0, "prec");
    fa_precision bad = pr;
    bad.u_acc = 0;
    CHECK(orc_fwd(&a, &pr, NULL, &r, &e) == FA_OK, "ok");
    orc_fwd_free(&r);
    CHECK(orc_fwd(&a, &bad, NULL, &r, &e) == FA_ERR_INVALID && strcmp(e.arg, "prof.u_acc") == 0, "profile");
    fa_bwd_args ba = t_bwd_args(&t);
    ba.lse.ptr = NULL;
    orc_bwd_result br;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, &e) == FA_ERR_INVALID && strcmp(e.arg, "lse") == 0, "bwd lse");
    /* compare validates the kernel's tensors */
    CHECK(orc_fwd(&a, &pr, NULL, &r, &e) == FA_OK, "ok");
    orc_stats so;
    fa_tensor o = t.to;
    o.stride[0] = -1;
    CHECK(orc_compare_fwd(&r, &o, NULL, &so, NULL, &e) == FA_ERR_INVALID && strcmp(e.arg, "o") == 0, "cmp stride");
    orc_fwd_free(&r);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// certified tier vs MPFR tier on random problems, forward and backward

static void agree(const orc_block *c, const orc_block *m, const char *what) {
    CHECK(c->n == m->n && c->dim == m->dim, "%s shape", what);
    int64_t bad = 0;
    double worst = 0;
    for (int64_t e = 0; e < c->n * c->dim; e++) {
        if (c->flags[e] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE)) continue;
        double d = fabs(c->ref[e] - m->ref[e]), tol = c->orc_err[e] + m->orc_err[e];
        if (!(d <= tol)) bad++;
        if (tol > 0 && d / tol > worst) worst = d / tol;
        /* the oracle error must be far below the kernel bound (else escalation) */
        if (c->bound[e] > 0 && !(c->orc_err[e] <= 0x1p-20 * c->bound[e]) && !(c->flags[e] & ORC_F_ESCALATED)) bad++;
    }
    CHECK(bad == 0, "%s: %lld elements disagree (worst diff/err %.3g)", what, (long long)bad, worst);
}

static void test_cert_vs_mpfr(void) {
    fa_precision pr = t_profile_fp32();
    struct { fa_problem p; int layout, mask; double qs; } cs[] = {
        {t_problem(1, 7, 9, 4, 2, 16, 8, FA_F16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1), 0, 0, 1.0},
        {t_problem(2, 9, 5, 2, 1, 8, 16, FA_BF16, FA_CAUSAL_TOP_LEFT, 2, 1), 1, 1, 2.0},
        {t_problem(1, 6, 70, 2, 2, 8, 8, FA_F16, FA_CAUSAL_NONE, 10, 3), 2, 1, 3.0},
        {t_problem(1, 5, 5, 3, 1, 24, 8, FA_BF16, FA_CAUSAL_NONE, -1, -1), 0, 0, 6.0},
    };
    cs[2].p.window_align = FA_ALIGN_BOTTOM_RIGHT;
    cs[3].p.softmax_scale = 0.3f;
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        t_prob t;
        t_setup(&t, cs[k].p, cs[k].layout, cs[k].qs, 1.0, 1.0, cs[k].mask);
        fa_fwd_args a = t_fwd_args(&t);
        orc_options oc, om;
        orc_options_init(&oc);
        om = oc;
        om.tier = ORC_TIER_MPFR;
        orc_fwd_result rc, rm;
        CHECK(orc_fwd(&a, &pr, &oc, &rc, NULL) == FA_OK, "fwd");
        CHECK(orc_fwd(&a, &pr, &om, &rm, NULL) == FA_OK, "fwd mpfr");
        CHECK(rm.escalations > 0, "mpfr tier escalates every row");
        agree(&rc.o, &rm.o, "O");
        agree(&rc.lse, &rm.lse, "LSE");
        t_store_fwd(&t, &rc);
        fa_bwd_args ba = t_bwd_args(&t);
        orc_bwd_result bc, bm;
        CHECK(orc_bwd(&ba, &pr, &oc, &bc, NULL) == FA_OK, "bwd");
        CHECK(orc_bwd(&ba, &pr, &om, &bm, NULL) == FA_OK, "bwd mpfr");
        agree(&bc.dq, &bm.dq, "dQ");
        agree(&bc.dk, &bm.dk, "dK");
        agree(&bc.dv, &bm.dv, "dV");
        CHECK(bc.o_input_ratio <= 1 && bc.lse_input_ratio <= 1, "consistent inputs: ratios %g %g",
              bc.o_input_ratio, bc.lse_input_ratio);
        /* escalate_ratio 0: every element goes through MPFR */
        oc.escalate_ratio = 0;
        orc_fwd_result re;
        CHECK(orc_fwd(&a, &pr, &oc, &re, NULL) == FA_OK, "fwd esc");
        CHECK(re.escalations > 0, "escalations %lld", (long long)re.escalations);
        int all = 1;
        for (int64_t e = 0; e < re.o.n * re.o.dim; e++)
            if (!(re.o.flags[e] & (ORC_F_MASKED_ROW | ORC_F_ESCALATED))) all = 0;
        CHECK(all, "escalate_ratio 0 left an element unescalated");
        orc_fwd_free(&re);
        orc_fwd_free(&rc); orc_fwd_free(&rm);
        orc_bwd_free(&bc); orc_bwd_free(&bm);
        t_free(&t);
    }
}

// ----------------------------------------------------------------------------
// sampling records the sampled set and is reproducible

static void test_sampling(void) {
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(2, 40, 30, 2, 1, 8, 8, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1, 1, 1, 0);
    fa_fwd_args a = t_fwd_args(&t);
    orc_options opt;
    orc_options_init(&opt);
    opt.max_rows = 17;
    opt.seed = 99;
    orc_fwd_result r1, r2, all;
    CHECK(orc_fwd(&a, &pr, &opt, &r1, NULL) == FA_OK && r1.o.n == 17, "sample size %lld", (long long)r1.o.n);
    CHECK(orc_fwd(&a, &pr, &opt, &r2, NULL) == FA_OK, "fwd");
    CHECK(memcmp(r1.o.index, r2.o.index, 17 * sizeof(orc_index)) == 0, "same seed, same sample");
    CHECK(orc_fwd(&a, &pr, NULL, &all, NULL) == FA_OK && all.o.n == 160, "all rows");
    for (int64_t x = 0; x < 17; x++) {
        const orc_index *ix = &r1.o.index[x];
        int64_t y = (ix->b * 2 + ix->h) * 40 + ix->s;
        CHECK(r1.o.ref[x * 8] == all.o.ref[y * 8], "sampled row %lld differs", (long long)x);
        if (x) CHECK(memcmp(&r1.o.index[x - 1], ix, sizeof *ix) != 0, "duplicate");
    }
    orc_fwd_free(&r1); orc_fwd_free(&r2); orc_fwd_free(&all);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// compare-time escalation: an element whose error sits within orc_err of its
// bound is recomputed in MPFR (forward row and backward column paths)

static void test_compare_escalation(void) {
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(1, 4, 6, 2, 1, 8, 8, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1, 1, 1, 0);
    fa_fwd_args a = t_fwd_args(&t);
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    t_store_fwd(&t, &r); /* the "kernel" output: the reference rounded to fp16 */
    orc_fwd_result r2 = r;
    size_t ne = (size_t)(r.o.n * r.o.dim);
    r2.o.bound = malloc(ne * sizeof(double));
    memcpy(r2.o.bound, r.o.bound, ne * sizeof(double));
    int64_t e0 = 5;
    const orc_index *ix = &r.o.index[e0 / 8];
    double k0 = orc_decode(t.o[ix->b * t.to.stride[0] + ix->s * t.to.stride[1] + ix->h * t.to.stride[2] + (e0 % 8)], p.dtype);
    r2.o.bound[e0] = fabs(k0 - r.o.ref[e0]); /* undecidable by the double tier */
    orc_stats s;
    CHECK(orc_compare_fwd(&r2, &t.to, NULL, &s, NULL, NULL) == FA_OK, "cmp");
    CHECK(s.escalations == 1 && s.checked == (int64_t)ne, "fwd compare escalations %lld checked %lld",
          (long long)s.escalations, (long long)s.checked);
    free(r2.o.bound);
    /* backward: the same through a dK column */
    fa_bwd_args ba = t_bwd_args(&t);
    orc_bwd_result br;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd");
    int64_t nk = br.dk.n * br.dk.dim;
    uint16_t *dk = malloc((size_t)nk * 2);
    for (int64_t e = 0; e < nk; e++) dk[e] = orc_encode(br.dk.ref[e], p.dtype);
    fa_tensor tk = {dk, {6 * 8, 8, 8, 1}};
    orc_bwd_result b2 = br;
    b2.dk.bound = malloc((size_t)nk * sizeof(double));
    memcpy(b2.dk.bound, br.dk.bound, (size_t)nk * sizeof(double));
    b2.dk.bound[3] = fabs(orc_decode(dk[3], p.dtype) - br.dk.ref[3]);
    CHECK(orc_compare_bwd(&b2, NULL, &tk, NULL, NULL, &s, NULL, NULL) == FA_OK, "cmp bwd");
    CHECK(s.escalations == 1 && s.checked == nk, "bwd compare escalations %lld", (long long)s.escalations);
    /* with the true bounds nothing is undecided and nothing fails */
    CHECK(orc_compare_bwd(&br, NULL, &tk, NULL, NULL, &s, NULL, NULL) == FA_OK && s.escalations == 0 && s.failed == 0,
          "bwd compare clean: esc %lld failed %lld", (long long)s.escalations, (long long)s.failed);
    free(b2.dk.bound);
    free(dk);
    orc_bwd_free(&br);
    orc_fwd_free(&r);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// overflow to Inf: a finite exact value beyond the dtype's range correctly
// rounds to +-Inf (fp16: |x| >= 65520); compare accepts that Inf, and only it

/* Judge one O element of r against a kernel value kv, with ref/bound/orc_err
 * of element 0 replaced; returns the stats. Every other element is the
 * reference rounded to fp16 (passes). */
static orc_stats judge_one(const orc_fwd_result *r, t_prob *t, double ref, double bound, double oe,
                           uint16_t kv) {
    orc_fwd_result r2 = *r;
    size_t ne = (size_t)(r->o.n * r->o.dim);
    r2.o.ref = malloc(ne * sizeof(double));
    r2.o.bound = malloc(ne * sizeof(double));
    r2.o.orc_err = malloc(ne * sizeof(double));
    memcpy(r2.o.ref, r->o.ref, ne * sizeof(double));
    memcpy(r2.o.bound, r->o.bound, ne * sizeof(double));
    memcpy(r2.o.orc_err, r->o.orc_err, ne * sizeof(double));
    r2.o.ref[0] = ref; r2.o.bound[0] = bound; r2.o.orc_err[0] = oe;
    const orc_index *ix = &r->o.index[0];
    uint16_t *at = &t->o[ix->b * t->to.stride[0] + ix->s * t->to.stride[1] + ix->h * t->to.stride[2]];
    uint16_t saved = *at;
    *at = kv;
    orc_stats s;
    CHECK(orc_compare_fwd(&r2, &t->to, NULL, &s, NULL, NULL) == FA_OK, "cmp");
    *at = saved;
    free(r2.o.ref); free(r2.o.bound); free(r2.o.orc_err);
    return s;
}

static void test_overflow_inf(void) {
    CHECK(orc_overflow_threshold(FA_F16) == 65520.0, "fp16 threshold");
    CHECK(orc_encode(65520.0, FA_F16) == 0x7c00 && orc_encode(nextafter(65520.0, 0), FA_F16) == 0x7bff,
          "fp16 threshold is where RN-even overflows");
    CHECK(orc_encode(orc_overflow_threshold(FA_BF16), FA_BF16) == 0x7f80 &&
          orc_encode(nextafter(orc_overflow_threshold(FA_BF16), 0), FA_BF16) == 0x7f7f, "bf16 threshold");
    CHECK(isinf((float)orc_overflow_threshold(-1)) && !isinf((float)nextafter(orc_overflow_threshold(-1), 0)),
          "fp32 threshold");

    /* synthetic verdicts on one element (the rest of the row is the rounded reference) */
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(1, 2, 4, 1, 1, 8, 8, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1, 1, 1, 0);
    fa_fwd_args a = t_fwd_args(&t);
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    t_store_fwd(&t, &r);
    const uint16_t NINF = 0xfc00, PINF = 0x7c00, NMAX = 0xfbff; /* -inf, +inf, -65504 */
    struct { double ref, bound; uint16_t kv; int pass, ovf; const char *what; } cs[] = {
        {-271092, 200, NINF, 1, 1, "far beyond: -inf is the rounding"},
        {-271092, 200, PINF, 0, 0, "far beyond: wrong sign"},
        {-271092, 200, NMAX, 0, 0, "far beyond: largest finite is wrong"},
        {-65500, 30, NINF, 1, 1, "straddles: -inf accepted"},
        {-65500, 30, NMAX, 1, 0, "straddles: -65504 accepted"},
        {-65400, 100, NINF, 0, 0, "|ref| + bound < 65520: -inf is wrong"},
        {65519, 0.5, PINF, 1, 1, "reach 65519.5 + oe: exactly straddling through orc_err escalates"},
        /* the pre-store value lies anywhere in ref +- bound: when bound > |ref| it may
         * reach either threshold (a false alarm on the CPU backend once:
         * fuzz/regressions/bwd/inf_opposite_sign_wide_bound.case) */
        {0, 70000, PINF, 1, 1, "zero reference, bound past the threshold: +inf admissible"},
        {100, 70000, NINF, 1, 1, "bound > |ref|: the opposite sign's inf is admissible"},
        {0, 60000, PINF, 0, 0, "zero reference, bound short of the threshold: inf is wrong"},
        {100, 65450, NINF, 0, 0, "opposite sign reaches only 65350: -inf is wrong"},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        if (k == 6) continue; /* an undecided case would escalate and recompute the real row */
        orc_stats s = judge_one(&r, &t, cs[k].ref, cs[k].bound, 0x1p-40, cs[k].kv);
        CHECK((s.failed == 0) == cs[k].pass && s.overflow_inf == cs[k].ovf &&
              s.nan_unexpected == (cs[k].pass || cs[k].kv == NMAX ? 0 : 1) && s.checked == r.o.n * r.o.dim,
              "case %zu (%s): failed %lld overflow_inf %lld nan_unexpected %lld", k, cs[k].what,
              (long long)s.failed, (long long)s.overflow_inf, (long long)s.nan_unexpected);
    }
    orc_fwd_free(&r);
    t_free(&t);

    /* end to end: fp16 backward whose dQ lies far beyond 65504 (large K, dO, V); the
     * kernel output is the reference rounded to fp16 (RN-even), i.e. a correct store.
     * dS (~1e6) stays in fp32 here: a profile rounding it to fp16 would make dQ
     * overflow-sensitive (BOUNDS.md section 11; checked below) */
    pr.ds_rounded = 0;
    p = t_problem(1, 3, 5, 1, 1, 8, 8, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_setup(&t, p, 0, 0.01, 100, 2000, 0);
    for (int64_t e = 0; e < 3 * 8; e++) t.dout[e] = orc_encode(1000 * orc_decode(t.dout[e], FA_F16), FA_F16);
    a = t_fwd_args(&t);
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    t_store_fwd(&t, &r);
    fa_bwd_args ba = t_bwd_args(&t);
    orc_bwd_result br;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd");
    int64_t nq = br.dq.n * br.dq.dim, beyond = 0;
    uint16_t *dq = malloc((size_t)nq * 2);
    for (int64_t e = 0; e < nq; e++) {
        CHECK(isfinite(br.dq.ref[e]) && !(br.dq.flags[e] & ORC_F_UNCHECKABLE), "dq ref %lld finite", (long long)e);
        dq[e] = orc_encode(br.dq.ref[e], FA_F16);
        if (fabs(br.dq.ref[e]) >= 65520) beyond++;
    }
    CHECK(beyond > 0, "the case must overflow fp16 (largest |dQ| too small)");
    fa_tensor tq = {dq, {3 * 8, 8, 8, 1}};
    orc_stats s;
    CHECK(orc_compare_bwd(&br, &tq, NULL, NULL, &s, NULL, NULL, NULL) == FA_OK, "cmp dq");
    CHECK(s.failed == 0 && s.overflow_inf >= beyond && s.checked == nq,
          "correctly rounded dQ: failed %lld overflow_inf %lld (beyond %lld) nan_unexpected %lld", (long long)s.failed,
          (long long)s.overflow_inf, (long long)beyond, (long long)s.nan_unexpected);
    /* flipping the sign of one overflowing element must fail */
    int64_t flipped = -1;
    for (int64_t e = 0; e < nq; e++)
        if ((dq[e] & 0x7fff) == 0x7c00) { dq[e] ^= 0x8000; flipped = e; break; }
    CHECK(orc_compare_bwd(&br, &tq, NULL, NULL, &s, NULL, NULL, NULL) == FA_OK && s.failed == 1 &&
          s.nan_unexpected == 1 && s.overflow_sensitive == 0, "wrong-sign Inf: failed %lld", (long long)s.failed);
    /* the same outputs under a profile that rounds dS to fp16: dS (~1e6) overflows in the
     * profile itself, so the wrong-sign Inf (and a NaN) are overflow-sensitive, not failures,
     * while the correctly rounded Infs still count as overflow_inf */
    orc_bwd_free(&br);
    pr.ds_rounded = 1;
    CHECK(orc_bwd(&ba, &pr, NULL, &br, NULL) == FA_OK, "bwd");
    {
        int64_t nflag = 0;
        for (int64_t e = 0; e < nq; e++) nflag += (br.dq.flags[e] & ORC_F_OVERFLOW) != 0;
        CHECK(nflag == nq, "every dQ element is fed by an overflowing dS: %lld of %lld flagged", (long long)nflag,
              (long long)nq);
        int64_t other = flipped == 0 ? 1 : 0;
        dq[other] = orc_encode(NAN, FA_F16);
        CHECK(orc_compare_bwd(&br, &tq, NULL, NULL, &s, NULL, NULL, NULL) == FA_OK && s.failed == 0 &&
                  s.overflow_sensitive == 2 && s.overflow_inf >= beyond - 2,
              "overflow-sensitive: failed %lld sensitive %lld overflow_inf %lld", (long long)s.failed,
              (long long)s.overflow_sensitive, (long long)s.overflow_inf);
    }
    free(dq);
    orc_bwd_free(&br);
    orc_fwd_free(&r);
    t_free(&t);
}

/* Bug #175: a GQA group whose G * Sq visible-or-not rows reach 1 / u_acc (the
 * CUDA certify case: G = 128, Sq = 131073, u_acc = 2^-23) made the dV weight
 * use gamma_{G Sq + G}(u_acc) = +inf for every (i, j), and 0 * inf = NaN: every
 * dV element UNCHECKABLE while dK was judged. The dV coefficient must come from
 * the column's own count of visible rows. Two constructions of the same path:
 * a coarse profile (u_acc = 2^-10, G Sq + G = 1204 > 2^10) on a tiny problem, and
 * the certify case's shape at D = 8 with Sq = 65537 (G Sq + G > 2^23). */
static void check_dv_judged(const char *what, const t_prob *t, fa_precision pr, int64_t max_rows) {
    fa_bwd_args a = t_bwd_args(t);
    orc_options o;
    orc_options_init(&o);
    o.max_rows = max_rows;
    o.baseline = 0;
    orc_bwd_result r;
    fa_error e;
    CHECK(orc_bwd(&a, &pr, &o, &r, &e) == FA_OK, "%s: %s", what, e.msg);
    int64_t unch[2] = {0, 0}, judged[2] = {0, 0};
    const orc_block *blk[2] = {&r.dk, &r.dv};
    for (int k = 0; k < 2; k++)
        for (int64_t x = 0; x < blk[k]->n * blk[k]->dim; x++) {
            if (blk[k]->flags[x] & ORC_F_UNCHECKABLE) unch[k]++;
            else if (!(blk[k]->flags[x] & ORC_F_MASKED_ROW)) {
                judged[k]++;
                CHECK(isfinite(blk[k]->bound[x]) && blk[k]->bound[x] > 0, "%s: bound %g", what, blk[k]->bound[x]);
            }
        }
    printf("[%s] dK: %lld judged, %lld uncheckable; dV: %lld judged, %lld uncheckable\n", what,
           (long long)judged[0], (long long)unch[0], (long long)judged[1], (long long)unch[1]);
    CHECK(unch[0] == 0 && unch[1] == 0, "%s: uncheckable dK/dV elements", what);
    CHECK(judged[1] > 0 && judged[1] == judged[0] * t->p.head_dim_v / t->p.head_dim_qk,
          "%s: dV not judged like dK", what);
    /* the reference itself, rounded to bf16, passes the comparison (elements judged) */
    int64_t nv = t->p.batch * t->p.seqlen_k * t->p.heads_kv * t->p.head_dim_v;
    uint16_t *dv = calloc((size_t)nv + 1, 2);
    fa_tensor tv = {dv, {t->p.seqlen_k * t->p.heads_kv * t->p.head_dim_v, t->p.heads_kv * t->p.head_dim_v,
                         t->p.head_dim_v, 1}};
    for (int64_t x = 0; x < r.dv.n; x++)
        for (int64_t d = 0; d < r.dv.dim; d++) {
            const orc_index *ix = &r.dv.index[x];
            dv[ix->b * tv.stride[0] + ix->s * tv.stride[1] + ix->h * tv.stride[2] + d] =
                orc_encode(r.dv.ref[x * r.dv.dim + d], t->p.dtype);
        }
    orc_stats sv;
    CHECK(orc_compare_bwd(&r, NULL, NULL, &tv, NULL, NULL, &sv, NULL) == FA_OK, "compare");
    CHECK(sv.checked == judged[1] && sv.failed == 0 && sv.unchecked == 0, "%s: dV compare checked %lld failed %lld",
          what, (long long)sv.checked, (long long)sv.failed);
    free(dv);
    orc_bwd_free(&r);
}

static void test_dv_large_group(void) {
    t_prob t;
    fa_problem p = t_problem(1, 300, 8, 4, 1, 16, 16, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
    t_setup(&t, p, 0, 1.0, 1.0, 1.0, 0);
    fa_precision pr = t_profile_fp32();
    pr.u_acc = 0x1p-10; /* 1 / u_acc = 1024 < G Sq + G = 1204 */
    check_dv_judged("#175 small, u_acc 2^-10", &t, pr, 0);
    t_free(&t);
    /* the certify case's shape: B1 Hq128/Hkv1 Sk65 bf16 causal bottom-right, window 40 */
    p = t_problem(1, 65537, 65, 128, 1, 8, 8, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, 40, -1);
    t_setup(&t, t_problem(1, 65, 65, 1, 1, 8, 8, FA_BF16, FA_CAUSAL_NONE, -1, -1), 0, 1.5, 1.5, 1.0, 0);
    /* Q, O, dO of the big shape: zero, except the rows that see a key (i >= Sq - Sk) */
    t.p = p;
    int64_t nq = p.seqlen_q * p.heads_q * p.head_dim_qk, row0 = p.seqlen_q - p.seqlen_k;
    free(t.q); free(t.o); free(t.dout); free(t.lse);
    t.q = calloc((size_t)nq, 2); t.o = calloc((size_t)nq, 2); t.dout = calloc((size_t)nq, 2);
    t.lse = calloc((size_t)(p.heads_q * p.seqlen_q), sizeof(float));
    for (int64_t e = row0 * p.heads_q * p.head_dim_qk; e < nq; e++) {
        t.q[e] = orc_encode(t_gauss() * 1.5, p.dtype);
        t.dout[e] = orc_encode(t_gauss(), p.dtype);
    }
    int64_t st[4] = {nq, p.heads_q * p.head_dim_qk, p.head_dim_qk, 1};
    t.tq.ptr = t.q; t.to.ptr = t.o; t.tdo.ptr = t.dout; t.tlse.ptr = t.lse;
    memcpy(t.tq.stride, st, sizeof st); memcpy(t.to.stride, st, sizeof st); memcpy(t.tdo.stride, st, sizeof st);
    t.tlse.stride[0] = p.heads_q * p.seqlen_q; t.tlse.stride[1] = p.seqlen_q; t.tlse.stride[2] = 1;
    pr = t_profile_fp32();
    pr.u_acc = 0x1p-23; /* the CUDA profile's: 2^23 < G Sq + G = 8388864 */
    pr.flushes_subnormals = 1;
    check_dv_judged("#175 shape, Sq 65537 G 128", &t, pr, 32);
    t_free(&t);
}

/* orc_decode against an independent decoder (sign, exponent, mantissa, ldexp)
 * for every 16-bit pattern of both types, and orc_encode(orc_decode(x)) == x
 * for every non-NaN pattern. */
static void test_decode_all(void) {
    for (int dt = 0; dt < 2; dt++) {
        int mb = dt ? 7 : 10, eb = dt ? 8 : 5, bias = dt ? 127 : 15;
        int64_t bad = 0, bad_rt = 0;
        for (uint32_t x = 0; x < 65536; x++) {
            int e = (int)(x >> mb) & ((1 << eb) - 1), m = (int)(x & ((1u << mb) - 1));
            double sg = (x & 0x8000) ? -1.0 : 1.0, ref;
            if (e == (1 << eb) - 1) ref = m ? NAN : sg * INFINITY;
            else if (e == 0) ref = sg * ldexp((double)m, 1 - bias - mb);
            else ref = sg * ldexp((double)(m | (1 << mb)), e - bias - mb);
            double got = orc_decode((uint16_t)x, (fa_dtype)dt);
            if (isnan(ref) ? !isnan(got) : (got != ref || signbit(got) != signbit(ref))) bad++;
            if (!isnan(ref) && orc_encode(got, (fa_dtype)dt) != x) bad_rt++;
        }
        CHECK(bad == 0 && bad_rt == 0, "%s: %lld decode mismatches, %lld round-trip mismatches",
              dt ? "bf16" : "fp16", (long long)bad, (long long)bad_rt);
    }
}


// ----------------------------------------------------------------------------
// compare's plot data: exact count, histogram totals, worst-ratio grid cells

static void test_compare_grid(void) {
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(2, 40, 24, 3, 1, 8, 8, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1, 1, 1, 0);
    fa_fwd_args a = t_fwd_args(&t);
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    t_store_fwd(&t, &r);
    uint16_t *o = t.o;
    const int64_t *st = t.to.stride;
    /* element (b=1, s=35, h=2, d=3) off by about 5 bounds: cell [2][35/16 = 2] */
    int64_t x5 = -1;
    for (int64_t x = 0; x < r.o.n; x++)
        if (r.o.index[x].b == 1 && r.o.index[x].s == 35 && r.o.index[x].h == 2) x5 = x;
    CHECK(x5 >= 0, "row not found");
    double ref = r.o.ref[x5 * 8 + 3], bd = r.o.bound[x5 * 8 + 3];
    uint16_t kv = orc_encode(ref + 5 * bd, p.dtype);
    o[1 * st[0] + 35 * st[1] + 2 * st[2] + 3 * st[3]] = kv;
    double want = fabs(orc_decode(kv, p.dtype) - ref) / bd;
    /* a NaN at (b=0, s=0, h=0, d=0): cell [0][0] becomes +inf */
    o[0] = 0x7e00;
    int64_t exact = 0;
    for (int64_t x = 0; x < r.o.n; x++) {
        const orc_index *ix = &r.o.index[x];
        for (int d = 0; d < 8; d++)
            exact += orc_decode(o[ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3]], p.dtype) == r.o.ref[x * 8 + d];
    }
    orc_stats s;
    CHECK(orc_compare_fwd(&r, &t.to, NULL, &s, NULL, NULL) == FA_OK, "cmp");
    CHECK(s.grid_rows == 3 && s.grid_cols == 3 && s.grid_hb == 1 && s.grid_sb == 16 && s.grid_heads == 3 && s.grid_seq == 40, "grid %dx%d hb %lld sb %lld",
          s.grid_rows, s.grid_cols, (long long)s.grid_hb, (long long)s.grid_sb);
    CHECK(want > 4 && s.grid[2][2] == (float)want, "cell [2][2] = %g, want %g", s.grid[2][2], want);
    CHECK(isinf(s.grid[0][0]), "cell [0][0] = %g, want inf", s.grid[0][0]);
    for (int rr = 0; rr < ORC_GRID_ROWS; rr++)
        for (int c = 0; c < ORC_GRID_COLS; c++) {
            int used = rr < 3 && c < 3;
            if (!used) CHECK(s.grid[rr][c] == -1, "unused cell [%d][%d] = %g", rr, c, s.grid[rr][c]);
            else if (!(rr == 2 && c == 2) && !(rr == 0 && c == 0))
                CHECK(s.grid[rr][c] >= 0 && s.grid[rr][c] <= 1, "cell [%d][%d] = %g", rr, c, s.grid[rr][c]);
        }
    int64_t hsum = 0;
    for (int k = 0; k < ORC_HIST_BUCKETS; k++) hsum += s.ratio_hist[k];
    CHECK(hsum + s.nonfinite_match + s.nan_unexpected + s.nan_missing + s.overflow_inf == s.checked,
          "histogram %lld + non-finite %lld + %lld + %lld + %lld != checked %lld", (long long)hsum,
          (long long)s.nonfinite_match, (long long)s.nan_unexpected, (long long)s.nan_missing,
          (long long)s.overflow_inf, (long long)s.checked);
    CHECK(s.exact == exact && s.exact <= s.ratio_hist[0], "exact %lld, counted %lld", (long long)s.exact, (long long)exact);
    CHECK(s.ratio_hist[ilogb(want) + 48] >= 1 && s.nan_unexpected == 1, "bucket of the wrong element");
    orc_fwd_free(&r);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// rounding bias (orc_stats.bias_*): O stored round-to-nearest from the exact
// reference has means near 0; truncated toward zero, a clearly negative mean
// oriented by the reference's sign; always rounded up, a clearly positive signed
// mean. Expected sizes: a directed rounding errs by ulp/2 on average against the
// bound (>= the ulp/2 of the final rounding plus the fp32 accumulation terms), so
// its mean ratio is a sizeable fraction of 1/2; RN's mean is 0 up to sampling noise.

/* one fp16/bf16 step of bits x toward zero (dir 0) or toward +inf (dir 1); 0 stays 0 */
static uint16_t bias_step(uint16_t x, int dir) {
    if ((x & 0x7fff) == 0) return dir ? 1 : x;
    int neg = x >> 15;
    if (dir == 0 || neg) return (uint16_t)(x - 1);   /* magnitude down: toward zero (up if negative) */
    return (uint16_t)(x + 1);
}

static orc_stats bias_run(const orc_fwd_result *r, t_prob *t, int mode) {
    int64_t Dv = t->p.head_dim_v;
    const int64_t *st = t->to.stride;
    for (int64_t x = 0; x < r->o.n; x++) {
        const orc_index *ix = &r->o.index[x];
        for (int64_t d = 0; d < Dv; d++) {
            double ref = r->o.ref[x * Dv + d];
            uint16_t kv = orc_encode(ref, t->p.dtype);          /* round to nearest */
            double got = orc_decode(kv, t->p.dtype);
            if (mode == 1 && fabs(got) > fabs(ref)) kv = bias_step(kv, 0);   /* truncate toward zero */
            if (mode == 2 && got < ref) kv = bias_step(kv, 1);               /* round up */
            t->o[ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3]] = kv;
        }
    }
    orc_stats s;
    CHECK(orc_compare_fwd(r, &t->to, NULL, &s, NULL, NULL) == FA_OK, "cmp");
    return s;
}

static void test_compare_bias(void) {
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(2, 48, 40, 2, 1, 32, 32, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1, 1, 1, 0);
    fa_fwd_args a = t_fwd_args(&t);
    orc_fwd_result r;
    CHECK(orc_fwd(&a, &pr, NULL, &r, NULL) == FA_OK, "fwd");
    orc_stats rn = bias_run(&r, &t, 0), rz = bias_run(&r, &t, 1), ru = bias_run(&r, &t, 2);
    CHECK(rn.bias_n > 1000 && rn.bias_n == rz.bias_n && rn.bias_n == ru.bias_n, "bias_n %lld %lld %lld",
          (long long)rn.bias_n, (long long)rz.bias_n, (long long)ru.bias_n);
    double n = (double)rn.bias_n;
    printf("bias (mean signed, mean toward-zero-oriented): RN %.4f %.4f, RZ %.4f %.4f, RU %.4f %.4f; "
           "worst ratio RN %.3g RZ %.3g RU %.3g; RN median %.3g\n", rn.bias_sum / n, rn.bias_zero_sum / n, rz.bias_sum / n,
           rz.bias_zero_sum / n, ru.bias_sum / n, ru.bias_zero_sum / n, rn.worst_ratio, rz.worst_ratio, ru.worst_ratio, rn.median_ratio);
    /* RN's error is uniform on [0, ulp/2]: its median ratio m is about ulp/4 / bound; a directed
       rounding errs by ulp/2 on average, a mean of about 2m; RN's mean is 0 +- m / sqrt(n) */
    double m = rn.median_ratio;
    CHECK(m > 0.01 && fabs(rn.bias_sum / n) < 0.1 * m && fabs(rn.bias_zero_sum / n) < 0.1 * m,
          "round to nearest: bias %g, %g (median ratio %g)", rn.bias_sum / n, rn.bias_zero_sum / n, m);
    CHECK(rz.bias_zero_sum / n < -m && rz.bias_zero_sum / n < -0.1, "truncation toward zero: oriented bias %g, want < -%g",
          rz.bias_zero_sum / n, m);
    CHECK(ru.bias_sum / n > m && ru.bias_sum / n > 0.1, "round up: signed bias %g, want > %g", ru.bias_sum / n, m);
    /* the sums are over exactly the ratios of the histogram's finite elements with bound > 0 */
    int64_t hsum = 0;
    for (int k = 0; k < ORC_HIST_BUCKETS; k++) hsum += rz.ratio_hist[k];
    CHECK(rz.bias_n <= hsum, "bias_n %lld > finite elements %lld", (long long)rz.bias_n, (long long)hsum);
    orc_fwd_free(&r);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// infinite inputs (BOUNDS.md 11.1). Regression: an O column fed by v_jd = +inf was
// UNCHECKABLE (infinite bound) and the compensated sum's Inf - Inf correction made its
// reference NaN, so a kernel writing 0 there passed `verify` with nothing said.

static void test_inf_input(void) {
    fa_precision pr = t_profile_fp32();
    fa_problem p = t_problem(1, 4, 4, 1, 1, 8, 8, FA_F16, FA_CAUSAL_NONE, -1, -1);
    t_prob t;
    t_setup(&t, p, 0, 1, 1, 1, 0);
    const uint16_t PINF = 0x7c00, NINF = 0xfc00, QNAN = 0x7e00;
    t.v[2 * t.tv.stride[1] + 3] = PINF;                            /* key 2, d 3: every row sees it */
    t.v[1 * t.tv.stride[1] + 5] = PINF; t.v[3 * t.tv.stride[1] + 5] = NINF; /* d 5: +inf and -inf */
    fa_fwd_args a = t_fwd_args(&t);
    for (int tier = 0; tier < 2; tier++) {
        orc_options opt;
        orc_options_init(&opt);
        opt.tier = tier ? ORC_TIER_MPFR : ORC_TIER_CERTIFIED;
        orc_fwd_result r;
        CHECK(orc_fwd(&a, &pr, &opt, &r, NULL) == FA_OK, "fwd");
        for (int64_t x = 0; x < r.o.n; x++) {
            CHECK(r.o.ref[x * 8 + 3] == INFINITY && (r.o.flags[x * 8 + 3] & ORC_F_INF_INPUT),
                  "tier %d row %lld: ref %g flags %d", tier, (long long)x, r.o.ref[x * 8 + 3], r.o.flags[x * 8 + 3]);
            CHECK(isnan(r.o.ref[x * 8 + 5]) && !(r.o.flags[x * 8 + 5] & ORC_F_INF_INPUT), "mixed signs: NaN, unflagged");
            CHECK(isfinite(r.o.ref[x * 8 + 0]), "other columns stay finite");
        }
        t_store_fwd(&t, &r);
        /* the kernel's column 3: 0 (wrong), NaN (a weight rounded to 0 times inf), +inf, -inf (wrong) */
        struct { uint16_t kv; int fail; } cs[] = { { 0, 1 }, { QNAN, 0 }, { PINF, 0 }, { NINF, 1 } };
        for (int c = 0; c < 4; c++) {
            for (int64_t i = 0; i < 4; i++) t.o[i * t.to.stride[1] + 3] = cs[c].kv;
            orc_stats s;
            CHECK(orc_compare_fwd(&r, &t.to, NULL, &s, NULL, NULL) == FA_OK, "cmp");
            CHECK((s.failed == 4) == cs[c].fail && (s.failed == 0) == !cs[c].fail,
                  "tier %d kernel value 0x%04x: failed %lld", tier, cs[c].kv, (long long)s.failed);
            CHECK(s.unchecked == 4, "the mixed-sign column stays unchecked: %lld", (long long)s.unchecked);
        }
        orc_fwd_free(&r);
    }
    t_free(&t);
}

int main(void) {
    test_inf_input();
    test_compare_bias();
    test_compare_grid();
    test_decode_all();
    test_dv_large_group();
    test_overflow_inf();
    test_compare_escalation();
    test_q_zero();
    test_dominant_key();
    test_exact_integers();
    test_masked_and_empty();
    test_gqa_sums();
    test_invisible_nan();
    test_validation();
    test_cert_vs_mpfr();
    test_sampling();
    if (t_failures) { fprintf(stderr, "%d check(s) failed\n", t_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
