/* test_mpfr_cols.c: the shared-row MPFR dK/dV path (orc_mpfr_dkdv_cols, V of the head
 * converted once: orc_mp_head) gives the same doubles, bit for bit, as the per-column path
 * (orc_mpfr_dkdv_col, which recomputes the G*Sq rows for every column), on random problems:
 * GQA, causal / windows, additive masks with -inf entries (rows that see some columns and not
 * others), softcap, scales; both called directly on random column subsets (any order, repeats)
 * and through orc_bwd with every element escalated (tier MPFR: the escalation loop's grouping
 * into (b, hk) tasks). Likewise dQ rows: with the head's K and V (orc_mpfr_dq_row_head) = row
 * by row without it (orc_mpfr_dq_row), directly and through orc_bwd's grouped tasks.
 * Timing-independent: only values are compared. */
#include "oracle/orc_mpfr.h"
#include "oracle/orc_internal.h"
#include "oracle/tests/tutil.h"

static int same_bits(double a, double b) { return !memcmp(&a, &b, sizeof a); }

static void run_case(int id) {
    fa_problem p = t_random_problem();
    const int64_t B = p.batch, Sq = p.seqlen_q, Sk = p.seqlen_k, Hq = p.heads_q, Hkv = p.heads_kv, G = Hq / Hkv;
    const int64_t D = p.head_dim_qk, Dv = p.head_dim_v;
    const fa_causal cz = p.causal;
    t_prob t;
    const int with_mask = t_random_setup(&t, &p, 0);
    for (int64_t x = 0; x < B * Hq * Sq; x++) t.lse[x] = 0; /* orc_ctx_bwd reads LSE: any finite */
    fa_bwd_args a = t_bwd_args(&t);
    orc_ctx c;
    fa_error err;
    CHECK(orc_ctx_bwd3(&a, &c, &err) == FA_OK, "case %d: orc_ctx_bwd3: %s", id, err.msg);
    int prec = (t_next() & 1) ? 128 : 113;
    int64_t mism = 0, tot = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++) {
            int n = 1 + (int)(t_next() % (uint64_t)(Sk + 2));
            int64_t *js = malloc((size_t)n * sizeof(int64_t));
            double *dk = malloc((size_t)(n * D) * sizeof(double)), *dv = malloc((size_t)(n * Dv) * sizeof(double));
            double *rk = malloc((size_t)D * sizeof(double)), *rv = malloc((size_t)Dv * sizeof(double));
            for (int k = 0; k < n; k++) js[k] = (int64_t)(t_next() % (uint64_t)Sk);
            orc_mpfr_dkdv_cols(&c, b, hk, js, n, prec, dk, dv);
            for (int k = 0; k < n; k++) {
                orc_mpfr_dkdv_col(&c, b, hk, js[k], prec, rk, rv);
                for (int64_t d = 0; d < D; d++, tot++) mism += !same_bits(dk[k * D + d], rk[d]);
                for (int64_t d = 0; d < Dv; d++, tot++) mism += !same_bits(dv[k * Dv + d], rv[d]);
            }
            free(js); free(dk); free(dv); free(rk); free(rv);
        }
    CHECK(mism == 0, "case %d: %lld of %lld dK/dV values differ (shared rows vs per column)", id,
          (long long)mism, (long long)tot);
    /* orc_bwd, every element from MPFR: each dK/dV column equals the per-column path */
    orc_options o;
    orc_options_init(&o);
    o.baseline = 0;
    o.tier = ORC_TIER_MPFR;
    o.mpfr_prec = prec;
    o.threads = 1 + (int)(t_next() % 3);
    orc_bwd_result r;
    fa_precision pr = t_profile_fp32();
    CHECK(orc_bwd(&a, &pr, &o, &r, &err) == FA_OK, "case %d: orc_bwd: %s", id, err.msg);
    double *rk = malloc((size_t)D * sizeof(double)), *rv = malloc((size_t)Dv * sizeof(double));
    int64_t m2 = 0, esc = 0;
    for (int64_t x = 0; x < r.dk.n; x++) {
        if (r.dk.flags[x * D] & ORC_F_MASKED_ROW) continue;
        esc++;
        orc_mpfr_dkdv_col(&c, r.dk.index[x].b, r.dk.index[x].h, r.dk.index[x].s, prec, rk, rv);
        for (int64_t d = 0; d < D; d++) m2 += !same_bits(r.dk.ref[x * D + d], rk[d]) || !(r.dk.flags[x * D + d] & ORC_F_ESCALATED);
        for (int64_t d = 0; d < Dv; d++) m2 += !same_bits(r.dv.ref[x * Dv + d], rv[d]) || !(r.dv.flags[x * Dv + d] & ORC_F_ESCALATED);
    }
    CHECK(m2 == 0, "case %d: orc_bwd: %lld dK/dV elements differ from the per-column MPFR path", id, (long long)m2);
    /* dQ rows: orc_bwd's grouped tasks (a head per (b, hk)) and orc_mpfr_dq_row_head = orc_mpfr_dq_row */
    double *rq = malloc((size_t)D * sizeof(double)), *hq = malloc((size_t)D * sizeof(double));
    int64_t m3 = 0, m4 = 0, nrow = 0;
    for (int64_t x = 0; x < r.dq.n; x++) {
        if (r.dq.flags[x * D] & ORC_F_MASKED_ROW) continue;
        nrow++;
        const orc_index *ix = &r.dq.index[x];
        orc_mpfr_dq_row(&c, ix->b, ix->h, ix->s, prec, rq);
        orc_mp_head hd;
        CHECK(orc_mp_head_init(&hd, &c, ix->b, ix->h / c.G, 1) == 0, "head: out of memory");
        orc_mpfr_dq_row_head(&c, &hd, ix->b, ix->h, ix->s, prec, hq);
        orc_mp_head_free(&hd);
        for (int64_t d = 0; d < D; d++) {
            m3 += !same_bits(r.dq.ref[x * D + d], rq[d]) || !(r.dq.flags[x * D + d] & ORC_F_ESCALATED);
            m4 += !same_bits(hq[d], rq[d]);
        }
    }
    CHECK(m3 == 0 && m4 == 0, "case %d: dQ: %lld elements of orc_bwd and %lld of the head path differ from orc_mpfr_dq_row",
          id, (long long)m3, (long long)m4);
    free(rq); free(hq);
    printf("case %2d: B%lld Sq%lld Sk%lld Hq%lld Hkv%lld D%lld Dv%lld causal %d mask %d softcap %g: %lld values, %lld columns via orc_bwd\n",
           id, (long long)B, (long long)Sq, (long long)Sk, (long long)Hq, (long long)Hkv, (long long)D, (long long)Dv,
           (int)cz, with_mask, (double)p.softcap, (long long)tot, (long long)esc);
    printf("         %lld dQ rows via orc_bwd and the head path\n", (long long)nrow);
    free(rk); free(rv);
    orc_bwd_free(&r);
    t_free(&t);
}

int main(void) {
    for (int id = 0; id < 24; id++) run_case(id);
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("PASS\n");
    return 0;
}
