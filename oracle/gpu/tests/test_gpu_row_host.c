/* test_gpu_row_host.c: the GPU tier's arithmetic (orc_gpu_row.h) compiled as
 * host code equals the CPU tier's bit for bit. CPU only.
 *
 *   - orc_gpu_decode = orc_decode on all 2^16 patterns of fp16 and bf16
 *   - orc_gpu_gamma / acc_coef / expm1_up / score_floor = the CPU helpers
 *   - the four passes of a row (sequential here, summing L in the CPU's
 *     order) = orc_row_weights: W, C, CO per key and every orc_row_info
 *     field, on random rows (windows, -inf and finite masks, NaN scores, fully
 *     masked rows), several precision profiles, fp16/bf16, default and
 *     explicit scales.
 * A formula changed in orc_fwd.c and not in orc_gpu_row.h (or back) fails here. */
#include <stdio.h>

#include "oracle/orc_internal.h"
#include "oracle/gpu/orc_gpu_row.h"
#include "oracle/tests/tutil.h"

static int same(double a, double b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

static void test_decode(void) {
    for (int dt = 0; dt < 2; dt++)
        for (unsigned u = 0; u < 65536; u++) {
            double a = orc_gpu_decode(u, dt == FA_BF16), b = orc_decode((uint16_t)u, (fa_dtype)dt);
            if (!same(a, b)) { CHECK(0, "decode dt %d bits 0x%04x: %a vs %a", dt, u, a, b); return; }
        }
}

static void test_helpers(void) {
    double ns[] = {0, 1, 2, 31, 32, 33, 1000, 1e6, 1e15, 9e15};
    double us[] = {0x1p-53, 0x1p-24, 0x1p-23, 0x1p-8, 0x1p-11};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof us / sizeof *us; b++)
            CHECK(same(orc_gpu_gamma(ns[a], us[b]), orc_gamma(ns[a], us[b])), "gamma %g %g", ns[a], us[b]);
    orc_model m = {0};
    for (int comp = 0; comp < 2; comp++)
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
            m.compensated = comp;
            m.u_acc = comp ? ORC_U_D : 0x1p-23;
            double sp = ns[a] * 1.5 + 7;
            CHECK(same(orc_gpu_acc_coef(&m, ns[a], sp), orc_acc_coef(&m, ns[a], sp)), "acc_coef %d %g", comp, ns[a]);
        }
    for (int k = 0; k < 200; k++) {
        double x = ldexp(t_unif(), -(int)(t_next() % 60)) * (k % 3 ? 1 : 8);
        CHECK(same(orc_gpu_expm1_up(x), orc_expm1_up(x)), "expm1_up %a", x);
    }
}

/* One random row: orc_row_weights against the passes of orc_gpu_row.h. */
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
    int pk = (int)(t_next() % 3);
    pr.u_acc = pk == 0 ? 0x1p-24 : 0x1p-23;
    pr.exp_rel_err = pk == 0 ? 0x1p-23 : 0x1p-21;
    pr.scores_fp32 = 1;
    pr.p_rounded = pk != 0;
    pr.ds_rounded = pk != 0;
    pr.out_rounded = 1;
    pr.max_rescales = pk == 2 ? -1 : 50;
    pr.flushes_subnormals = pk == 2;
    orc_model mk, mo;
    orc_model_kernel(&c, &pr, &mk);
    orc_model_oracle(&c, &mo);
    int64_t i = (int64_t)(t_next() % (uint64_t)c.Sq);
    double *S = malloc((size_t)Sk * 8), *S0 = malloc((size_t)Sk * 8), *A = malloc((size_t)Sk * 8);
    double *W = calloc((size_t)Sk, 8), *C = calloc((size_t)Sk, 8), *CO = calloc((size_t)Sk, 8), *E = calloc((size_t)Sk, 8);
    uint8_t *vis = calloc((size_t)Sk, 1);
    double amp = t_next() % 4 == 0 ? 40 : 3;
    for (int64_t j = 0; j < Sk; j++) {
        S0[j] = S[j] = t_gauss() * amp * sqrt((double)D);
        A[j] = fabs(S0[j]) * (1 + t_unif()) + t_unif() * D;
    }
    if (mode == 3) S0[Sk / 2] = S[Sk / 2] = NAN;
    double q1 = t_unif() * D * 2, k1max = t_unif() * D * 2;
    double ef = orc_score_floor(&c, &mk, q1, k1max);
    CHECK(same(ef, orc_gpu_score_floor(mk.tau, fabs(c.scale), (double)D, q1, k1max)), "score floor");
    orc_row_info ri;
    memset(&ri, 0, sizeof ri);
    orc_row_weights(&c, &mk, &mo, 0, 0, i, 0, Sk, S, A, ef, vis, W, C, CO, E, &ri);

    /* the GPU tier's passes, sequentially */
    orc_gpu_rowc rc;
    memset(&rc, 0, sizeof rc);
    rc.scale = c.scale;
    orc_score_coefs(&c, &mo, &rc.ce_o, &rc.cm_o);
    orc_score_coefs(&c, &mk, &rc.ce_k, &rc.cm_k);
    rc.lue_k = (mk.R + 1) * mk.lue;
    rc.sc_abs = fabs(c.scale);
    rc.D = (double)D;
    int64_t lo, hi;
    orc_row_range(&c.p, i, &lo, &hi);
    orc_gpu_rows rs;
    memset(&rs, 0, sizeof rs);
    rs.M = -INFINITY;
#define VIS(j) ((j) >= lo && (j) <= hi && !(c.mask && c.mask[j] == -INFINITY))
#define MSK(j) (c.mask ? (double)c.mask[j] : 0.0)
    for (int64_t j = 0; j < Sk; j++)
        if (VIS(j)) orc_gpu_pass1(&mk, &rs, orc_gpu_score(&rc, S0[j], MSK(j)));
    int kind = orc_gpu_row_kind(&rs);
    CHECK(kind == ri.kind, "iter %d: kind %d vs %d", iter, kind, ri.kind);
    CHECK(rs.n == ri.n, "iter %d: n %lld vs %lld", iter, (long long)rs.n, (long long)ri.n);
    if (kind == ROW_NORMAL && ri.kind == ROW_NORMAL) {
        rs.e_floor = ef;
        double Ls = 0, Le = 0, blk = 0;
        int cnt = 0;
        double *w = calloc((size_t)Sk, 8);
        for (int64_t j = 0; j < Sk; j++) {
            if (!VIS(j)) continue;
            double eo, ek;
            orc_gpu_key_err(&rc, &rs, A[j], fabs(MSK(j)), &eo, &ek);
            if (eo > rs.Eo_max) rs.Eo_max = eo;
            if (ek > rs.Ek_max) rs.Ek_max = ek;
            w[j] = exp(orc_gpu_score(&rc, S0[j], MSK(j)) - rs.M);
            blk += w[j]; /* the CPU's order: blocks of 32 visible keys */
            if (++cnt == ORC_BLK) { double e; two_sum(Ls, blk, &Ls, &e); Le += e; blk = 0; cnt = 0; }
        }
        { double e; two_sum(Ls, blk, &Ls, &e); Le += e; }
        rs.L = Ls + Le;
        for (int64_t j = 0; j < Sk; j++) {
            if (!VIS(j)) continue;
            double eo, ek, eta_o, eta_k;
            orc_gpu_key_err(&rc, &rs, A[j], fabs(MSK(j)), &eo, &ek);
            orc_gpu_key_eta(&mk, &mo, &rc, &rs, orc_gpu_score(&rc, S0[j], MSK(j)), eo, ek, &eta_o, &eta_k);
            if (eta_o > rs.eta_o_max) rs.eta_o_max = eta_o;
            if (eta_k > rs.eta_k_max) rs.eta_k_max = eta_k;
            rs.sum_pe += orc_gpu_key_pe(&rs, w[j], eta_o);
        }
        orc_row_info gi;
        memset(&gi, 0, sizeof gi);
        orc_gpu_row_mid(&mk, &mo, &rs, &gi, (double)Sk);
        double spk = 0;
        int bad = 0;
        for (int64_t j = 0; j < Sk; j++) {
            if (!VIS(j)) continue;
            double eo, ek, eta_o, eta_k, cc, co;
            orc_gpu_key_err(&rc, &rs, A[j], fabs(MSK(j)), &eo, &ek);
            orc_gpu_key_eta(&mk, &mo, &rc, &rs, orc_gpu_score(&rc, S0[j], MSK(j)), eo, ek, &eta_o, &eta_k);
            spk += orc_gpu_key_weights(&mk, &rs, w[j], eta_o, eta_k, &cc, &co);
            if (!bad && !(same(w[j], W[j]) && same(cc, C[j]) && same(co, CO[j]))) {
                bad = 1;
                CHECK(0, "iter %d key %lld: W %a/%a C %a/%a CO %a/%a", iter, (long long)j, w[j], W[j], cc,
                      C[j], co, CO[j]);
            }
        }
        orc_gpu_row_end(&mk, &mo, &rs, spk, &gi);
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
    test_decode();
    test_helpers();
    for (int it = 0; it < 3000; it++) test_row(it);
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("test_gpu_row_host: OK\n");
    return 0;
}
