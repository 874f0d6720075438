/* test_cmp_host: CPU. The rule of orc_judge.h on hand-made elements of every class, and the
 * host half of the device compare (orc_compare_esc) given every vector from its first
 * element = orc_compare_fwd / orc_compare_bwd field for field (the same per-element code in
 * the same order: bias sums bit for bit; the median by orc_cmp_select over its ratios), on
 * random CPU-tier cases with every class of kernel value and elements escalated to MPFR. */
#include "oracle/gpu/tests/cmp_cases.h"
#include "oracle/orc_judge.h"

static void rule_table(void) {
    const double thr = 65520.0; /* fp16 overflow threshold */
    struct { double kv, ref, bound, oe; unsigned fl; int final, cls; } t[] = {
        {1.0, 1.0, 0.1, 0.0, 0, 0, ORC_JD_FINITE},
        {1.2, 1.0, 0.1, 0.0, 0, 0, ORC_JD_FINITE},            /* fails: err > bound */
        {1.1, 1.0, 0.1, 0.01, 0, 0, ORC_JD_UNDECIDED},        /* err within oe of bound */
        {1.1, 1.0, 0.1, 0.01, 0, 1, ORC_JD_FINITE},
        {NAN, NAN, 0.1, 0.0, ORC_F_NAN, 0, ORC_JD_NF_MATCH},
        {1.0, NAN, 0.1, 0.0, ORC_F_NAN, 0, ORC_JD_NAN_MISSING},
        {INFINITY, INFINITY, 0.1, 0.0, ORC_F_INF, 0, ORC_JD_NF_MATCH},
        {-INFINITY, INFINITY, 0.1, 0.0, ORC_F_INF, 0, ORC_JD_NAN_MISSING},
        {NAN, INFINITY, 0.1, 0.0, ORC_F_INF | ORC_F_INF_INPUT, 0, ORC_JD_NF_MATCH},
        {1.0, 1.0, 0.1, 0.0, ORC_F_UNCHECKABLE, 0, ORC_JD_UNCHECKED},
        {NAN, 1.0, 0.1, 0.0, ORC_F_UNCHECKABLE | ORC_F_OVERFLOW, 0, ORC_JD_UNCHECKED_OVF},
        {INFINITY, 65500.0, 100.0, 0.0, 0, 0, ORC_JD_OVF_INF},   /* 65600 >= thr */
        {INFINITY, 65500.0, 10.0, 0.0, 0, 0, ORC_JD_NAN_UNEXP},  /* 65510 < thr */
        {INFINITY, 65500.0, 20.0, 1.0, 0, 0, ORC_JD_UNDECIDED},  /* 65520 +- 1 */
        {INFINITY, 65500.0, 10.0, 0.0, ORC_F_OVERFLOW, 0, ORC_JD_CHECKED_OVF},
        {NAN, 1.0, 0.1, 0.0, 0, 0, ORC_JD_NAN_UNEXP},
        {NAN, 1.0, 0.1, 0.0, ORC_F_OVERFLOW, 0, ORC_JD_CHECKED_OVF},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        orc_jd r = orc_jd_elem(t[i].kv, t[i].ref, t[i].bound, t[i].oe, t[i].fl, thr, t[i].final);
        CHECK(r.cls == t[i].cls, "rule row %zu: class %d, expected %d", i, r.cls, t[i].cls);
    }
    orc_jd r = orc_jd_elem(1.2, 1.0, 0.1, 0.0, 0, thr, 0);
    CHECK(fabs(r.ratio - 2.0) < 1e-12 && r.err > 0.1, "ratio %.17g", r.ratio);
    r = orc_jd_elem(1.5, 1.0, 0.0, 0.0, 0, thr, 0);
    CHECK(isinf(r.ratio), "zero bound, nonzero err: ratio %g", r.ratio);
    CHECK(orc_jd_bucket(0) == 0 && orc_jd_bucket(INFINITY) == ORC_HIST_BUCKETS - 1 && orc_jd_bucket(1.0) == 48 &&
              orc_jd_bucket(0.75) == 47 && orc_jd_bucket(0x1p-60) == 0 && orc_jd_bucket(0x1p40) == ORC_HIST_BUCKETS - 1,
          "buckets");
}

/* every vector of blk from element 0 through orc_compare_esc, against the host compare's stats */
static void esc_all(const char *what, int cs, const orc_fwd_result *fr, const orc_bwd_result *br, int tensor,
                    const orc_block *blk, const void *kptr, const int64_t *st, int f32, fa_dtype dt,
                    const orc_stats *host) {
    int64_t n = blk->n, dim = blk->dim;
    int64_t *vs = malloc((size_t)(n ? n : 1) * 8);
    int32_t *d0 = calloc((size_t)(n ? n : 1), 4);
    double *kv = malloc((size_t)(n * dim > 0 ? n * dim : 1) * 8);
    for (int64_t v = 0; v < n; v++) {
        const orc_index *ix = &blk->index[v];
        vs[v] = v;
        for (int64_t d = 0; d < dim; d++)
            kv[v * dim + d] = f32 ? ((const float *)kptr)[ix->b * st[0] + ix->h * st[1] + ix->s * st[2]]
                                  : orc_decode(((const uint16_t *)kptr)[ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3]], dt);
    }
    orc_cmp_part p;
    fa_error err;
    CHECK(orc_compare_esc(fr, br, tensor, n, vs, d0, kv, &p, &err) == FA_OK, "case %d %s: esc: %s", cs, what, err.msg);
    orc_stats s = p.s;
    s.bias_sum = p.bias; s.bias_zero_sum = p.bias_zero; s.bias_n = p.nr;
    if (p.nr > 0) {
        double hi = orc_cmp_select(p.ratios, p.nr, p.nr / 2);
        double lo = p.nr % 2 ? hi : orc_cmp_select(p.ratios, p.nr, p.nr / 2 - 1);
        s.median_ratio = p.nr % 2 ? hi : 0.5 * (lo + hi);
    }
    cc_check_stats(what, cs, host, &s, 1);
    /* the element positions it reports are those of the stats */
    if (s.first_fail_at[0] >= 0 && p.fail_e >= 0) CHECK(p.fail_e % dim == (dim == 1 ? p.fail_e % dim : s.first_fail_at[3]), "case %d %s: fail_e", cs, what);
    CHECK((p.fail_e >= 0) == (s.first_fail_at[0] >= 0) && (p.worst_e >= 0) == (s.worst_at[0] >= 0) &&
              (p.ovf_e >= 0) == (s.first_ovf_at[0] >= 0), "case %d %s: positions", cs, what);
    if (p.worst_e >= 0) CHECK(blk->bound[p.worst_e] == s.worst_bound || host->escalations, "case %d %s: worst_e", cs, what);
    orc_cmp_part_free(&p);
    free(vs); free(d0); free(kv);
}

int main(void) {
    rule_table();
    int64_t n_esc = 0, n_fail = 0, n_el = 0;
    for (int cs = 0; cs < 12; cs++) {
        t_prob t;
        fa_problem p = cc_problem(cs < 2 ? 8000 : 2000);
        t_setup(&t, p, cs % 3, 1.0, 1.0, 1.0, cs % 5 == 4);
        fa_precision pr = t_profile_fp32();
        orc_options opt;
        orc_options_init(&opt);
        opt.baseline = 0;
        fa_error err;
        orc_fwd_result fr;
        fa_fwd_args fa = t_fwd_args(&t);
        if (orc_fwd(&fa, &pr, &opt, &fr, &err) != FA_OK) { CHECK(0, "case %d: orc_fwd: %s", cs, err.msg); continue; }
        t_store_fwd(&t, &fr);
        cc_widen(&fr.o, 4);
        cc_widen(&fr.lse, 2);
        cc_fill16(&fr.o, t.o, t.to.stride, p.dtype);
        cc_fill32(&fr.lse, t.lse, t.tlse.stride);
        orc_stats so, sl;
        CHECK(orc_compare_fwd(&fr, &t.to, &t.tlse, &so, &sl, &err) == FA_OK, "case %d: compare: %s", cs, err.msg);
        esc_all("O", cs, &fr, NULL, 0, &fr.o, t.o, t.to.stride, 0, p.dtype, &so);
        esc_all("LSE", cs, &fr, NULL, 1, &fr.lse, t.lse, t.tlse.stride, 1, p.dtype, &sl);
        n_esc += so.escalations + sl.escalations;
        n_fail += so.failed + sl.failed;
        n_el += so.checked + so.unchecked + sl.checked + sl.unchecked;
        /* the backward on the forward's O, LSE (stored from the reference) */
        t_store_fwd(&t, &fr);
        orc_fwd_free(&fr);
        fa_bwd_args ba = t_bwd_args(&t);
        orc_bwd_result br;
        if (orc_bwd(&ba, &pr, &opt, &br, &err) != FA_OK) { CHECK(0, "case %d: orc_bwd: %s", cs, err.msg); t_free(&t); continue; }
        int64_t sq[4], sk[4], sv[4];
        int64_t nq = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, cs % 3, sq);
        int64_t nk = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, cs % 3, sk);
        int64_t nv = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, cs % 3, sv);
        uint16_t *gq = calloc((size_t)nq, 2), *gk = calloc((size_t)nk, 2), *gv = calloc((size_t)nv, 2);
        cc_widen(&br.dq, 3); cc_widen(&br.dk, 2); cc_widen(&br.dv, 2);
        cc_fill16(&br.dq, gq, sq, p.dtype); cc_fill16(&br.dk, gk, sk, p.dtype); cc_fill16(&br.dv, gv, sv, p.dtype);
        fa_tensor tq = {gq, {sq[0], sq[1], sq[2], sq[3]}}, tk = {gk, {sk[0], sk[1], sk[2], sk[3]}},
                  tv = {gv, {sv[0], sv[1], sv[2], sv[3]}};
        orc_stats s3[3];
        CHECK(orc_compare_bwd(&br, &tq, &tk, &tv, &s3[0], &s3[1], &s3[2], &err) == FA_OK, "case %d: bwd compare: %s", cs, err.msg);
        esc_all("dQ", cs, NULL, &br, 2, &br.dq, gq, sq, 0, p.dtype, &s3[0]);
        esc_all("dK", cs, NULL, &br, 3, &br.dk, gk, sk, 0, p.dtype, &s3[1]);
        esc_all("dV", cs, NULL, &br, 4, &br.dv, gv, sv, 0, p.dtype, &s3[2]);
        for (int k = 0; k < 3; k++) { n_esc += s3[k].escalations; n_fail += s3[k].failed; n_el += s3[k].checked + s3[k].unchecked; }
        orc_bwd_free(&br);
        free(gq); free(gk); free(gv);
        t_free(&t);
    }
    /* the cases exercise what they claim */
    CHECK(n_esc > 0 && n_fail > 0, "escalations %lld failures %lld", (long long)n_esc, (long long)n_fail);
    printf("test_cmp_host: %lld elements, %lld escalated, %lld failed; %d check failures\n", (long long)n_el,
           (long long)n_esc, (long long)n_fail, t_failures);
    return t_failures ? 1 : 0;
}
