/* test_gpu_row_host.c: the GPU tier's use of the shared formulas
 * (oracle/orc_formulas.h) compiled as host code equals the CPU tier's bit for
 * bit. CPU only.
 *
 *   - orc_fm_decode (the device's decode) = orc_decode and orc_decode_fast on
 *     all 2^16 patterns of fp16 and bf16
 *   - the four passes of a row as k_rows (orc_gpu_fwd.cu) makes them:
 *     recomputing eo/ek/eta from the raw score in passes 3 and 4, row spans
 *     passed to orc_fm_row_mid, the warp's pass-1 reduction (sequential here,
 *     summing L in the CPU's order) = orc_row_weights: W, C, CO per key and
 *     every orc_row_info field (kind, ovf, n, M included), on random rows
 *     (windows, -inf and finite masks, NaN scores, fp32 score overflow, fully
 *     masked rows), fp16/bf16, default and explicit scales, for every named
 *     precision preset (fa_precision_preset_names: the tensor-core models) and
 *     random IEEE profiles.
 *   - orc_fm_two_sum (both tiers' TwoSum): exact on finite sums, no error term
 *     on an infinite one (an infinite input's sum stays Inf, BOUNDS.md 11.1)
 * A change of one tier's pass structure, or a formula computed outside
 * orc_formulas.h by one tier, fails here. */
#include <stdio.h>

#include "oracle/orc_internal.h"
#include "oracle/tests/tutil.h"

static int same(double a, double b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

static void test_decode(void) {
    for (int dt = 0; dt < 2; dt++)
        for (unsigned u = 0; u < 65536; u++) {
            double a = orc_fm_decode(u, dt == FA_BF16), b = orc_decode((uint16_t)u, (fa_dtype)dt);
            double f = orc_decode_fast((uint16_t)u, (fa_dtype)dt);
            if (!same(a, b) || !same(f, b)) {
                CHECK(0, "decode dt %d bits 0x%04x: %a / %a vs %a", dt, u, a, f, b);
                return;
            }
        }
}

/* orc_fm_two_sum, the TwoSum of both tiers' compensated folds (the device's two_sum_d is it):
 * exact on finite sums (s + e = a + b, checked as TwoSum's |e| <= ulp(s)/2 and s = RN(a + b));
 * an infinite sum carries e = 0, so a blocked sum that meets an infinite input stays that Inf
 * (BOUNDS.md 11.1: the forward's ORC_F_INF_INPUT needs it; the device's copy once gave
 * Inf - Inf = NaN there: test_gpu_oracle's "flags 18 vs 84") and opposite infinities give NaN. */
static void test_two_sum(void) {
    double s, e;
    double inf_cases[][2] = {{INFINITY, 1.0}, {1.0, INFINITY}, {-INFINITY, 2.5}, {0x1p1023, 0x1p1023},
                             {INFINITY, INFINITY}, {-0x1.fp1023, -0x1.fp1023}};
    for (int k = 0; k < 6; k++) {
        orc_fm_two_sum(inf_cases[k][0], inf_cases[k][1], &s, &e);
        CHECK(isinf(s) && e == 0, "two_sum(%a, %a) = %a + %a: an infinite sum must carry no error term",
              inf_cases[k][0], inf_cases[k][1], s, e);
    }
    orc_fm_two_sum(INFINITY, -INFINITY, &s, &e);
    CHECK(isnan(s), "two_sum(Inf, -Inf) = %a", s);
    /* a fold as the tiers make it: hi, lo over blocks, one block infinite */
    double hi = 0, lo = 0, blk[4] = {1.5, INFINITY, 3.25, -7.0};
    for (int k = 0; k < 4; k++) { orc_fm_two_sum(hi, blk[k], &hi, &e); lo += e; }
    CHECK(hi + lo == INFINITY, "a compensated fold through an infinite block: %a + %a", hi, lo);
    for (int k = 0; k < 100000; k++) {
        double a = ldexp(t_gauss(), (int)(t_next() % 200) - 100), b = ldexp(t_gauss(), (int)(t_next() % 200) - 100);
        double s2, e2;
        orc_fm_two_sum(a, b, &s, &e);
        two_sum(a, b, &s2, &e2);
        if (!(s == a + b && fabs(e) <= ldexp(1, ilogb(s) - 53) && same(s, s2) && same(e, e2))) {
            CHECK(0, "two_sum(%a, %a) = %a + %a (CPU %a + %a)", a, b, s, e, s2, e2);
            break;
        }
    }
}

static const char *const *presets;
static int n_presets;
static int64_t n_rows[4], n_tc_rows, n_ovf_rows;

/* One random row: orc_row_weights against the passes of k_rows. */
static void test_row(int iter) {
    int64_t Sk = 1 + (int64_t)(t_next() % 300), D = 1 + (int64_t)(t_next() % 160);
    orc_ctx c;
    memset(&c, 0, sizeof c);
    c.p.batch = 1; c.p.seqlen_q = 1 + (int64_t)(t_next() % 400); c.p.seqlen_k = Sk;
    c.p.heads_q = c.p.heads_kv = 1; c.p.head_dim_qk = c.p.head_dim_v = D;
    c.p.dtype = t_next() % 2 ? FA_BF16 : FA_F16;
    c.p.causal = (fa_causal)(t_next() % 3);
    c.p.window_left = t_next() % 3 ? -1 : (int64_t)(t_next() % 100);
    c.p.window_right = t_next() % 3 ? -1 : (int64_t)(t_next() % 100);
    c.p.window_align = (fa_align)(t_next() % 2);
    c.B = 1; c.Sq = c.p.seqlen_q; c.Sk = Sk; c.Hq = c.Hkv = c.G = 1; c.D = c.Dv = D; c.dt = c.p.dtype;
    c.scale_default = t_next() % 2;
    c.scale = c.scale_default ? 1.0 / sqrt((double)D) : (double)(float)(0.01 + 2 * t_unif());
    int mode = (int)(t_next() % 5); /* 0 none, 1 finite mask, 2 -inf holes, 3 NaN score, 4 all masked */
    float *mask = malloc((size_t)Sk * sizeof(float));
    for (int64_t j = 0; j < Sk; j++) {
        mask[j] = mode == 1 || mode == 2 ? (float)(t_gauss() * 3) : 0.0f;
        if ((mode == 2 && t_next() % 4 == 0) || mode == 4) mask[j] = -INFINITY;
    }
    c.mask = mode ? mask : NULL;
    c.ms[3] = 1;
    fa_precision pr = {0};
    int pk = iter % (n_presets + 3);
    if (pk < n_presets) { /* every named preset in turn */
        fa_error err;
        CHECK(fa_precision_preset(presets[pk], &pr, &err) == FA_OK, "preset %s: %s", presets[pk], err.msg);
    } else {
        pk -= n_presets;
        pr.u_acc = pk == 0 ? 0x1p-24 : 0x1p-23;
        pr.exp_rel_err = pk == 0 ? 0x1p-23 : 0x1p-21;
        pr.scores_fp32 = 1;
        pr.p_rounded = pk != 0;
        pr.ds_rounded = pk != 0;
        pr.out_rounded = 1;
        pr.max_rescales = pk == 2 ? -1 : 50;
        pr.flushes_subnormals = pk == 2;
    }
    orc_model mk, mo;
    orc_model_kernel(&c, &pr, &mk);
    orc_model_oracle(&c, &mo);
    int64_t i = (int64_t)(t_next() % (uint64_t)c.Sq);
    double *S = malloc((size_t)Sk * 8), *S0 = malloc((size_t)Sk * 8), *A = malloc((size_t)Sk * 8);
    double *W = calloc((size_t)Sk, 8), *C = calloc((size_t)Sk, 8), *CO = calloc((size_t)Sk, 8), *E = calloc((size_t)Sk, 8);
    uint8_t *vis = calloc((size_t)Sk, 1);
    /* amp 2^130: fp32 scores may overflow (an UNCHECKABLE row with ovf) */
    double amp = t_next() % 4 == 0 ? 40 : t_next() % 8 == 0 ? 0x1p130 : 3;
    for (int64_t j = 0; j < Sk; j++) {
        S0[j] = S[j] = t_gauss() * amp * sqrt((double)D);
        A[j] = fabs(S0[j]) * (1 + t_unif()) + t_unif() * D;
    }
    if (mode == 3) S0[Sk / 2] = S[Sk / 2] = NAN;
    double q1 = t_unif() * D * 2, k1max = t_unif() * D * 2;
    double ef = orc_score_floor(&c, &mk, q1, k1max);
    orc_row_info ri;
    memset(&ri, 0, sizeof ri);
    orc_row_weights(&c, &mk, &mo, 0, 0, i, 0, Sk, S, A, ef, vis, W, C, CO, E, &ri);

    /* the GPU tier's passes, sequentially: the constants as orc_gpu_fwd sets them */
    orc_fm_rowc rc;
    orc_fm_rowc_init(&mk, &mo, c.scale, (double)D, &rc);
    int64_t lo, hi;
    orc_row_range(&c.p, i, &lo, &hi);
    orc_fm_rows rs;
    orc_fm_rows_init(&rs);
    orc_row_info gi;
    memset(&gi, 0, sizeof gi);
#define VIS(j) ((j) >= lo && (j) <= hi && !(c.mask && c.mask[j] == -INFINITY))
#define MSK(j) (c.mask ? (double)c.mask[j] : 0.0)
    for (int64_t j = 0; j < Sk; j++)
        if (VIS(j)) orc_fm_pass1(&mk, &rs, orc_fm_score(&rc, S0[j], MSK(j)));
    int kind = orc_fm_row_kind(&rs, &gi);
    CHECK(kind == ri.kind, "iter %d: kind %d vs %d", iter, kind, ri.kind);
    CHECK(gi.n == ri.n && rs.n == ri.n, "iter %d: n %lld vs %lld", iter, (long long)gi.n, (long long)ri.n);
    CHECK(gi.ovf == ri.ovf, "iter %d: ovf %d vs %d", iter, gi.ovf, ri.ovf);
    CHECK(same(gi.M, ri.M), "iter %d: M %a vs %a", iter, gi.M, ri.M);
    if (kind >= 0 && kind < 4) n_rows[kind]++;
    if (ri.ovf) n_ovf_rows++;
    if (kind == ROW_NORMAL && mk.tc_t > 0) n_tc_rows++;
    if (kind == ROW_NORMAL && ri.kind == ROW_NORMAL) {
        rs.e_floor = ef;
        double Ls = 0, Le = 0, blk = 0;
        int cnt = 0;
        double *w = calloc((size_t)Sk, 8);
        for (int64_t j = 0; j < Sk; j++) {
            if (!VIS(j)) continue;
            double eo, ek;
            orc_fm_key_err(&rc, &rs, A[j], fabs(MSK(j)), &eo, &ek);
            if (eo > rs.Eo_max) rs.Eo_max = eo;
            if (ek > rs.Ek_max) rs.Ek_max = ek;
            w[j] = exp(orc_fm_score(&rc, S0[j], MSK(j)) - rs.M);
            blk += w[j]; /* the CPU's order: blocks of 32 visible keys */
            if (++cnt == ORC_BLK) { double e; two_sum(Ls, blk, &Ls, &e); Le += e; blk = 0; cnt = 0; }
        }
        { double e; two_sum(Ls, blk, &Ls, &e); Le += e; }
        rs.L = Ls + Le;
        for (int64_t j = 0; j < Sk; j++) {
            if (!VIS(j)) continue;
            double eo, ek, eta_o, eta_k;
            orc_fm_key_err(&rc, &rs, A[j], fabs(MSK(j)), &eo, &ek);
            orc_fm_key_eta(&mk, &mo, &rc, &rs, orc_fm_score(&rc, S0[j], MSK(j)), eo, ek, &eta_o, &eta_k);
            if (eta_o > rs.eta_o_max) rs.eta_o_max = eta_o;
            if (eta_k > rs.eta_k_max) rs.eta_k_max = eta_k;
            rs.sum_pe += orc_fm_key_pe(&rs, w[j], eta_o);
        }
        /* spans: the tile's key positions (here the row's tile is 0 .. Sk-1, as in
         * orc_row_weights above) and the row's own key range */
        orc_fm_row_mid(&mk, &mo, &rs, &gi, (double)Sk, (double)(hi - lo + 1));
        double spk = 0;
        int bad = 0;
        for (int64_t j = 0; j < Sk; j++) {
            if (!VIS(j)) continue;
            double eo, ek, eta_o, eta_k, cc, co;
            orc_fm_key_err(&rc, &rs, A[j], fabs(MSK(j)), &eo, &ek);
            orc_fm_key_eta(&mk, &mo, &rc, &rs, orc_fm_score(&rc, S0[j], MSK(j)), eo, ek, &eta_o, &eta_k);
            spk += orc_fm_key_weights(&mk, &rs, w[j], eta_o, eta_k, &cc, &co);
            if (!bad && !(same(w[j], W[j]) && same(cc, C[j]) && same(co, CO[j]))) {
                bad = 1;
                CHECK(0, "iter %d key %lld: W %a/%a C %a/%a CO %a/%a", iter, (long long)j, w[j], W[j], cc,
                      C[j], co, CO[j]);
            }
        }
        orc_fm_row_end(&mk, &mo, &rs, spk, &gi);
        const char *nm[] = {"M", "L", "logL", "kap_o", "kap_k", "lse", "lse_orc", "lse_bound", "floor_n"};
        double gv[] = {gi.M, gi.L, gi.logL, gi.kap_o, gi.kap_k, gi.lse, gi.lse_orc, gi.lse_bound, gi.floor_n};
        double cv[] = {ri.M, ri.L, ri.logL, ri.kap_o, ri.kap_k, ri.lse, ri.lse_orc, ri.lse_bound, ri.floor_n};
        for (int k = 0; k < 9; k++)
            CHECK(same(gv[k], cv[k]), "iter %d: row %s %a (gpu formulas) vs %a (orc_row_weights)", iter, nm[k],
                  gv[k], cv[k]);
        free(w);
    }
    free(mask); free(S); free(S0); free(A); free(W); free(C); free(CO); free(E); free(vis);
}

int main(void) {
    presets = fa_precision_preset_names();
    while (presets[n_presets]) n_presets++;
    CHECK(n_presets >= 4, "only %d presets", n_presets);
    test_decode();
    test_two_sum();
    for (int it = 0; it < 4000; it++) test_row(it);
    printf("rows: %lld normal (%lld with a tensor-core model), %lld masked, %lld NaN, %lld uncheckable "
           "(%lld overflow-sensitive); %d presets\n",
           (long long)n_rows[ROW_NORMAL], (long long)n_tc_rows, (long long)n_rows[ROW_MASKED],
           (long long)n_rows[ROW_NAN], (long long)n_rows[ROW_UNCHECKABLE], (long long)n_ovf_rows, n_presets);
    CHECK(n_tc_rows > 100 && n_ovf_rows > 10 && n_rows[ROW_MASKED] > 10, "the random rows miss a class");
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("test_gpu_row_host: OK\n");
    return 0;
}
