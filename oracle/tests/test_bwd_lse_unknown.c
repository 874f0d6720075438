/* test_bwd_lse_unknown.c: regression for the backward judged with a substituted LSE
 * (oracle/BOUNDS.md 5.0, orc_options.lse_unknown).
 *
 * Bug: `flashcheck verify` without --lse (every PyTorch SDPA case: SDPA returns no LSE)
 * handed orc_bwd the oracle's own LSE, and orc_bwd took delta_lse = |given - LSE| +
 * orc_err ~ 0, i.e. assumed the backend's backward used an exact LSE. It used its own
 * forward's LSE, which a correct forward may produce anywhere within the forward LSE
 * bound (false-alarm run 3, cuDNN case 187: dK 21.1 where the bound was 1e-29).
 *
 * The kernel: the CPU backend's backward (fa_backend_cpu()) fed an LSE shifted from the
 * exact one by 80% of the forward LSE bound, i.e. an LSE a correct forward may give (the
 * test checks that premise row by row). The oracle is given what verify gave it: the
 * oracle's LSE rounded to fp32. Asserted:
 *   (a) lse_unknown = 0 (the old behaviour) fails that correct backward: the bug;
 *   (b) lse_unknown = 1 passes it, and passes the CPU backward run with its own forward's
 *       LSE;
 *   (c) lse_unknown = 1 still fails broken backwards (mutants delta_from_dout_squared and
 *       dq_tail_block_skipped) and (bf16 case) a dQ moved by 8 ulps;
 *   (d) with lse_unknown = 1 the given LSE values are not read (NaN there changes nothing)
 *       and lse_input_ratio is 0.
 * Inputs: an additive mask with a large constant offset (-C on every key): the scores and
 * the LSE are ~ -C, so the forward LSE bound (log and conversions of unit ~2^-22 on |LSE|,
 * section 4) is several times the score error the backward's own bound allows per key
 * (2 2^-24 C from the mask add, section 2); the shift is then visible in every P. */
#include "kernels/cpu/cpu_mutants.h"
#include "oracle/tests/tutil.h"

static orc_options opts(int lse_unknown) {
    orc_options o;
    orc_options_init(&o);
    o.baseline = 0;
    o.lse_unknown = lse_unknown;
    return o;
}


/* the CPU backend's backward with the LSE in lse (mutant id mut) */
static void run_bwd(const t_prob *t, const float *lse, int mut, t_grads *g) {
    fa_bwd_args a = t_bwd_args(t);
    a.lse.ptr = (float *)lse;
    a.dq = g->tq; a.dk = g->tk; a.dv = g->tv;
    fa_error err;
    CHECK(fa_cpu_set_mutant(mut) == 0, "mutant %d", mut);
    fa_status st = fa_backend_cpu()->backward(&a, &err);
    fa_cpu_set_mutant(0);
    CHECK(st == FA_OK, "cpu backward: %s", err.msg);
}

/* failed elements over dQ, dK, dV of g judged with the given lse (the oracle's) */
static int64_t judge(const t_prob *t, const float *lse_given, const t_grads *g, int lse_unknown, const char *tag,
                     double *lse_ratio) {
    fa_bwd_args a = t_bwd_args(t);
    a.lse.ptr = (float *)lse_given;
    orc_options o = opts(lse_unknown);
    orc_bwd_result r;
    orc_stats s[3];
    fa_precision pr = fa_backend_cpu()->precision;
    CHECK(orc_bwd(&a, &pr, &o, &r, NULL) == FA_OK, "orc_bwd");
    CHECK(orc_compare_bwd(&r, &g->tq, &g->tk, &g->tv, &s[0], &s[1], &s[2], NULL) == FA_OK, "compare");
    int64_t f = 0;
    const char *nm[3] = {"dQ", "dK", "dV"};
    for (int k = 0; k < 3; k++) {
        char buf[700];
        orc_stats_format(&s[k], nm[k], buf, sizeof buf);
        printf("[%s, lse_unknown=%d] %s\n", tag, lse_unknown, buf);
        f += s[k].failed;
        CHECK(s[k].unchecked == 0, "%s: %s unchecked %lld", tag, nm[k], (long long)s[k].unchecked);
    }
    if (lse_ratio) *lse_ratio = r.lse_input_ratio;
    orc_bwd_free(&r);
    return f;
}

/* ulps > 0: also move every 7th dQ element by that many ulps, which must fail */
static void run_case(const char *tag, fa_problem p, double qk_sigma, double mask_offset, int ulps) {
    t_prob t;
    t_setup(&t, p, 0, qk_sigma, qk_sigma, 1.0, mask_offset != 0);
    if (mask_offset != 0) {
        int64_t nm = p.batch * p.heads_q * p.seqlen_q * p.seqlen_k;
        for (int64_t x = 0; x < nm; x++) t.mask[x] = (float)-mask_offset;
    }
    /* the CPU forward: O and the backend's own LSE */
    fa_fwd_args fa = t_fwd_args(&t);
    fa_error err;
    CHECK(fa_backend_cpu()->forward(&fa, &err) == FA_OK, "cpu forward: %s", err.msg);
    int64_t nl = p.batch * p.heads_q * p.seqlen_q;
    float *lse_own = malloc((size_t)nl * sizeof(float)), *lse_orc = malloc((size_t)nl * sizeof(float));
    float *lse_shift = malloc((size_t)nl * sizeof(float)), *lse_nan = malloc((size_t)nl * sizeof(float));
    memcpy(lse_own, t.lse, (size_t)nl * sizeof(float));
    /* the oracle's forward: the LSE verify substituted, and the forward LSE bound */
    fa_precision pr = fa_backend_cpu()->precision;
    orc_options o = opts(0);
    orc_fwd_result fr;
    CHECK(orc_fwd(&fa, &pr, &o, &fr, NULL) == FA_OK, "orc_fwd");
    {
        orc_stats so, sl;
        CHECK(orc_compare_fwd(&fr, &t.to, &t.tlse, &so, &sl, NULL) == FA_OK, "compare fwd");
        CHECK(so.failed == 0 && sl.failed == 0, "%s: the CPU forward must pass (O %lld, LSE %lld)", tag,
              (long long)so.failed, (long long)sl.failed);
    }
    int64_t premise_bad = 0;
    double minrel = INFINITY;
    for (int64_t x = 0; x < fr.lse.n; x++) {
        const orc_index *ix = &fr.lse.index[x];
        int64_t at = ix->b * t.tlse.stride[0] + ix->h * t.tlse.stride[1] + ix->s * t.tlse.stride[2];
        double L = fr.lse.ref[x], bd = fr.lse.bound[x], oe = fr.lse.orc_err[x];
        lse_orc[at] = (float)L;
        lse_nan[at] = NAN;
        lse_shift[at] = (float)(L - 0.8 * bd);
        /* premise: the shifted LSE is one a correct forward may give, certainly */
        if (!(fabs((double)lse_shift[at] - L) + oe <= bd)) premise_bad++;
        double rel = fabs((double)lse_shift[at] - L) / bd;
        if (rel < minrel) minrel = rel;
    }
    printf("[%s] LSE shifted by %.3g..0.8 of its forward bound (bound of row 0: %.3g)\n", tag, minrel,
           fr.lse.bound[0]);
    CHECK(premise_bad == 0, "%s: %lld shifted LSEs outside the forward bound", tag, (long long)premise_bad);
    orc_fwd_free(&fr);

    t_grads g;
    t_grads_alloc(&t, &g);
    double ratio = -1;
    /* (a) + (b): the correct backward with a legitimately shifted LSE */
    run_bwd(&t, lse_shift, 0, &g);
    int64_t f_old = judge(&t, lse_orc, &g, 0, tag, NULL);
    int64_t f_new = judge(&t, lse_orc, &g, 1, tag, &ratio);
    CHECK(f_old > 0, "%s: the shifted-LSE backward passes the exact-LSE bound: the case shows no bug", tag);
    CHECK(f_new == 0, "%s: a correct backward with an LSE within the forward bound fails lse_unknown (%lld)", tag,
          (long long)f_new);
    CHECK(ratio == 0, "%s: lse_input_ratio %g with lse_unknown", tag, ratio);
    /* (d) the given values are not read */
    CHECK(judge(&t, lse_nan, &g, 1, tag, NULL) == 0, "%s: NaN given LSE changed the lse_unknown verdict", tag);
    /* (b) the backward with its own forward's LSE */
    run_bwd(&t, lse_own, 0, &g);
    CHECK(judge(&t, lse_orc, &g, 1, tag, NULL) == 0, "%s: the CPU backward with its own LSE fails lse_unknown", tag);
    /* (c) broken backwards still fail */
    const char *muts[2] = {"delta_from_dout_squared", "dq_tail_block_skipped"};
    for (int k = 0; k < 2; k++) {
        int id = fa_cpu_mutant_id(muts[k]);
        CHECK(id > 0, "mutant %s", muts[k]);
        run_bwd(&t, lse_own, id, &g);
        int64_t f = judge(&t, lse_orc, &g, 1, muts[k], NULL);
        CHECK(f > 0, "%s: mutant %s passes with lse_unknown", tag, muts[k]);
    }
    if (ulps > 0) {
        run_bwd(&t, lse_own, 0, &g);
        for (int64_t x = 0; x < p.batch * p.seqlen_q * p.heads_q * p.head_dim_qk; x += 7) {
            double v = orc_decode(g.dq[x], p.dtype);
            g.dq[x] = orc_encode(v + ulps * 2 * orc_unit_roundoff(p.dtype) * fabs(v), p.dtype);
        }
        CHECK(judge(&t, lse_orc, &g, 1, "dq moved", NULL) > 0, "%s: dQ moved by %d ulps passes with lse_unknown", tag,
              ulps);
    }
    t_grads_free(&g);
    free(lse_own); free(lse_orc); free(lse_shift); free(lse_nan);
    t_free(&t);
}

int main(void) {
    /* mask offset: scores ~ -1e5, forward LSE bound ~ 0.05, mask-add error per score ~ 0.012; at
     * that magnitude a correct fp32 kernel's dQ is only determined to ~10% (the score error
     * alone), so no small perturbation is asserted to fail there */
    run_case("mask offset 1e5", t_problem(1, 48, 48, 2, 2, 32, 32, FA_F16, FA_CAUSAL_NONE, -1, -1), 1.0, 1e5, 0);
    run_case("mask offset 3e4, bf16 GQA", t_problem(2, 33, 40, 4, 2, 64, 48, FA_BF16, FA_CAUSAL_TOP_LEFT, -1, -1), 1.0,
             3e4, 8);
    if (t_failures) { fprintf(stderr, "%d check(s) failed\n", t_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
