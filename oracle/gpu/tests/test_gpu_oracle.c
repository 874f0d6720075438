/* test_gpu_oracle.c: the GPU tier (orc_gpu_fwd) against the CPU tiers on
 * random cases: shapes (Sq != Sk, ragged tiles), GQA/MQA, Dqk != Dv, fp16 and
 * bf16, default and explicit scales, causal top-left / bottom-right, windows
 * with both alignments, additive masks (-inf holes, fully masked rows, stride-0
 * broadcast), layouts (contiguous, permuted, padded strides, pointer offsets),
 * NaN/Inf inputs. Per case and element:
 *   - flags equal (escalation aside); |ref_gpu - ref_cpu| <= orc_err_gpu + orc_err_cpu;
 *     kernel bounds equal to the rounding of their evaluation (2^-30 relative:
 *     ORC_SAFETY's margin; the tiers sum in different orders);
 *   - small cases: |ref_gpu - ref_mpfr| <= orc_err_gpu + orc_err_mpfr (the MPFR tier);
 *   - verdicts (orc_compare_fwd: checked, failed, unchecked, non-finite counts)
 *     identical for the CPU backend's outputs, the CUDA backend's outputs
 *     (where it accepts the case), and the CPU backend's outputs with elements
 *     pushed outside their bound (failures must be found by both tiers);
 *   - escalate_ratio 0: every element escalated to MPFR, same values;
 *   - every 4th case on a row sample (max_rows, seed) instead of every row;
 *   - per case one named precision preset (fa_precision_preset_names in turn:
 *     tensorcore, fp32, torch-flash, torch-efficient, torch-cudnn, torch-math;
 *     tensor-core accumulation models, exp in ulps, dtype score stages, declared
 *     LSE of empty rows): both tiers' results compared as above (flags include
 *     ORC_F_OVERFLOW) and their verdicts on the CPU backend's outputs;
 *   - bf16 cases with huge q, k (fp32 scores overflow: uncheckable rows) or huge
 *     v (the P.V numerator may overflow): overflow-sensitive flags in both tiers.
 * Backward (orc_gpu_bwd against orc_bwd, argv[2] cases, default half of argv[1]): the
 * same shapes, masks, layouts and non-finite inputs, O and LSE from the CPU backend's
 * forward; per case under the CPU backend's profile, the CUDA backend's and one named
 * preset in turn (every third preset pass with orc_options.lse_unknown): dQ, dK, dV elements as above (flags, values within both orc_err,
 * bounds to 2^-30 plus what the references' difference moves the RN store's bound, for an
 * element escalated at reference time what the double references' did: bound_agree.h,
 * BOUNDS.md 5.8, 12), MPFR containment on small cases, the input-consistency ratios,
 * verdicts (orc_compare_bwd) on the CPU backend's gradients, on the CUDA backend's
 * (its backward on the device copies) and on mutated gradients; every 10th case all
 * escalated in both tiers; huge v (dP / dV overflow) and huge q, k cases flag
 * ORC_F_OVERFLOW alike.
 * Needs a GPU (target_compatible_with @local_gpu//:present). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <time.h>

#include "oracle/gpu/orc_gpu.h"
#include "oracle/gpu/tests/bound_agree.h"
#include "oracle/tests/tutil.h"

#define CU(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

static int same_bits(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static int64_t n_cmp, n_mpfr, n_verdict, n_fail_found, n_ovf_flags, n_preset_cases[16];

/* Element-wise: GPU result g against CPU result c (same sample). grad: a dQ / dK / dV block of
 * dtype bf16 (grad = 1 + bf16): its bounds agree per ba_bounds_agree (the RN store's bound
 * moves with the reference, bound_agree.h), or ba_bounds_agree_esc where reference-time
 * escalation replaced either tier's reference and orc_err (prec: mpfr_prec, nterms: the
 * block's orc_mpfr_err term count); 0: a forward block, bounds to 2^-30. */
static void cmp_block_g(const char *what, int cs, const orc_block *g, const orc_block *c, int grad, int prec,
                        double nterms) {
    CHECK(g->n == c->n && g->dim == c->dim, "case %d %s: shape", cs, what);
    if (g->n != c->n || g->dim != c->dim) return;
    int bad = 0;
    for (int64_t e = 0; e < g->n * g->dim && bad < 5; e++) {
        uint8_t fg = g->flags[e] & ~ORC_F_ESCALATED, fc = c->flags[e] & ~ORC_F_ESCALATED;
        n_cmp++;
        if (fg & ORC_F_OVERFLOW) n_ovf_flags++;
        if (fg != fc) { bad++; CHECK(0, "case %d %s[%lld]: flags %d vs %d", cs, what, (long long)e, fg, fc); continue; }
        if (fg & (ORC_F_NAN | ORC_F_UNCHECKABLE)) continue;
        double rg = g->ref[e], rc = c->ref[e];
        if (isinf(rg) || isinf(rc)) {
            if (!same_bits(rg, rc)) { bad++; CHECK(0, "case %d %s[%lld]: %g vs %g", cs, what, (long long)e, rg, rc); }
            continue;
        }
        if (!(fabs(rg - rc) <= g->orc_err[e] + c->orc_err[e])) {
            bad++;
            CHECK(0, "case %d %s[%lld]: ref %a vs %a, orc_err %g + %g", cs, what, (long long)e, rg, rc,
                  g->orc_err[e], c->orc_err[e]);
        }
        double bg = g->bound[e], bc = c->bound[e];
        int agree = grad ? ba_bounds_agree_esc(bg, bc, rg, rc, g->orc_err[e], c->orc_err[e],
                                               (g->flags[e] & ORC_F_ESCALATED) != 0,
                                               (c->flags[e] & ORC_F_ESCALATED) != 0, prec, nterms, grad == 2)
                         : same_bits(bg, bc) || fabs(bg - bc) <= 0x1p-30 * fmax(bg, bc);
        if (!agree) {
            bad++;
            CHECK(0, "case %d %s[%lld]: bound %a vs %a (ref %a vs %a, orc_err %a vs %a, escalated %d / %d)", cs, what,
                  (long long)e, bg, bc, rg, rc, g->orc_err[e], c->orc_err[e], (g->flags[e] & ORC_F_ESCALATED) != 0,
                  (c->flags[e] & ORC_F_ESCALATED) != 0);
        }
    }
}

static void cmp_block(const char *what, int cs, const orc_block *g, const orc_block *c) {
    cmp_block_g(what, cs, g, c, 0, 0, 0);
}

/* GPU result against the MPFR tier: the exact value lies in ref_gpu +- orc_err_gpu. */
static void cmp_mpfr(const char *what, int cs, const orc_block *g, const orc_block *m) {
    int bad = 0;
    for (int64_t e = 0; e < g->n * g->dim && bad < 5; e++) {
        if ((g->flags[e] | m->flags[e]) & (ORC_F_NAN | ORC_F_UNCHECKABLE | ORC_F_INF)) continue;
        n_mpfr++;
        if (!(fabs(g->ref[e] - m->ref[e]) <= g->orc_err[e] + m->orc_err[e])) {
            bad++;
            CHECK(0, "case %d %s[%lld]: gpu %a +- %g does not contain mpfr %a", cs, what, (long long)e,
                  g->ref[e], g->orc_err[e], m->ref[e]);
        }
    }
}

static void cmp_stats(const char *what, int cs, const orc_stats *a, const orc_stats *b) {
    n_verdict++;
    CHECK(a->checked == b->checked && a->failed == b->failed && a->unchecked == b->unchecked &&
              a->nan_unexpected == b->nan_unexpected && a->nan_missing == b->nan_missing &&
              a->overflow_inf == b->overflow_inf && a->overflow_sensitive == b->overflow_sensitive &&
              a->nonfinite_match == b->nonfinite_match,
          "case %d %s: verdicts differ: gpu checked %lld failed %lld unchecked %lld, cpu checked %lld failed %lld "
          "unchecked %lld",
          cs, what, (long long)a->checked, (long long)a->failed, (long long)a->unchecked, (long long)b->checked,
          (long long)b->failed, (long long)b->unchecked);
}

typedef struct {
    void *q, *k, *v, *mask, *o, *lse;
} dev_bufs;

static void *dev_copy(const void *h, size_t bytes, size_t off_bytes) {
    char *d;
    CU(cudaMalloc((void **)&d, bytes + off_bytes));
    CU(cudaMemset(d, 0xff, off_bytes));
    CU(cudaMemcpy(d + off_bytes, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static int64_t n_fdev, n_fdev_verdict;

/* The forward's device path (orc_gpu_fwd_dev: every element finished on the device by
 * orc_formulas.h's orc_fm_fwd_out_elem / orc_fm_fwd_lse, blocks left there, escalation found
 * there) = the host path orc_gpu_fwd bit for bit: index, ref, bound, orc_err, flags,
 * escalations. 1 with *dr filled, else 0. */
static int fwd_dev_same(const char *what, int cs, const fa_fwd_args *da, const fa_precision *pr,
                        const orc_options *opt, const orc_fwd_result *rg, orc_gpu_fwd_dres *dr) {
    fa_error err;
    if (orc_gpu_fwd_dev(da, pr, opt, dr, &err) != FA_OK) {
        CHECK(0, "case %d %s: orc_gpu_fwd_dev: %s", cs, what, err.msg);
        return 0;
    }
    const orc_block *g[2] = {&rg->o, &rg->lse}, *d[2] = {&dr->r.o, &dr->r.lse};
    const char *nm[2] = {"O", "LSE"};
    for (int k = 0; k < 2; k++) {
        int64_t ne = g[k]->n * g[k]->dim, bad = 0, first = -1;
        CHECK(d[k]->n == g[k]->n && d[k]->dim == g[k]->dim, "case %d %s %s: shape", cs, what, nm[k]);
        if (d[k]->n != g[k]->n || d[k]->dim != g[k]->dim) continue;
        CHECK(!memcmp(d[k]->index, g[k]->index, (size_t)g[k]->n * sizeof(orc_index)), "case %d %s %s: index", cs,
              what, nm[k]);
        double *h = malloc((size_t)(3 * ne + 1) * 8);
        uint8_t *f = malloc((size_t)ne + 1);
        CU(cudaMemcpy(h, d[k]->ref, (size_t)ne * 8, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(h + ne, d[k]->bound, (size_t)ne * 8, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(h + 2 * ne, d[k]->orc_err, (size_t)ne * 8, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(f, d[k]->flags, (size_t)ne, cudaMemcpyDeviceToHost));
        for (int64_t e = 0; e < ne; e++)
            if (!same_bits(h[e], g[k]->ref[e]) || !same_bits(h[ne + e], g[k]->bound[e]) ||
                !same_bits(h[2 * ne + e], g[k]->orc_err[e]) || f[e] != g[k]->flags[e]) {
                if (first < 0) first = e;
                bad++;
            }
        CHECK(bad == 0, "case %d %s %s: %lld of %lld elements differ between the device and host paths (first %lld: "
              "ref %a / %a bound %a / %a flags %d / %d)", cs, what, nm[k], (long long)bad, (long long)ne,
              (long long)first, first >= 0 ? h[first] : 0.0, first >= 0 ? g[k]->ref[first] : 0.0,
              first >= 0 ? h[ne + first] : 0.0, first >= 0 ? g[k]->bound[first] : 0.0, first >= 0 ? f[first] : 0,
              first >= 0 ? g[k]->flags[first] : 0);
        n_fdev += ne;
        free(h);
        free(f);
    }
    CHECK(dr->r.escalations == rg->escalations, "case %d %s: device path escalations %lld, host path %lld", cs, what,
          (long long)dr->r.escalations, (long long)rg->escalations);
    return 1;
}

/* The device-block compare (orc_gpu_compare_fwd_dev on outputs uploaded) = the host compare
 * of the host path's result. o, l: host outputs; no, nl: their elements. */
static void fwd_dev_verdicts(const char *what, int cs, const orc_gpu_fwd_dres *dr, const orc_fwd_result *rg,
                             const fa_tensor *o, const fa_lse *l, int64_t no, int64_t nl) {
    fa_tensor od = *o;
    fa_lse ld = *l;
    void *p, *q;
    CU(cudaMalloc(&p, (size_t)no * 2 + 2));
    CU(cudaMalloc(&q, (size_t)nl * 4 + 4));
    CU(cudaMemcpy(p, o->ptr, (size_t)no * 2, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(q, l->ptr, (size_t)nl * 4, cudaMemcpyHostToDevice));
    od.ptr = p;
    ld.ptr = q;
    orc_stats h[2], d[2];
    fa_error err;
    CHECK(orc_compare_fwd(rg, o, l, &h[0], &h[1], &err) == FA_OK, "case %d: compare: %s", cs, err.msg);
    CHECK(orc_gpu_compare_fwd_dev(dr, &od, &ld, &d[0], &d[1], &err) == FA_OK, "case %d: device-block compare: %s",
          cs, err.msg);
    const char *nm[2] = {"O", "LSE"};
    for (int k = 0; k < 2; k++) {
        const orc_stats *a = &d[k], *b = &h[k];
        n_fdev_verdict++;
        CHECK(a->checked == b->checked && a->failed == b->failed && a->unchecked == b->unchecked &&
                  a->escalations == b->escalations && a->nan_unexpected == b->nan_unexpected &&
                  a->nan_missing == b->nan_missing && a->overflow_inf == b->overflow_inf &&
                  a->overflow_sensitive == b->overflow_sensitive && a->nonfinite_match == b->nonfinite_match &&
                  same_bits(a->worst_ratio, b->worst_ratio) && same_bits(a->median_ratio, b->median_ratio) &&
                  !memcmp(a->worst_at, b->worst_at, sizeof a->worst_at) &&
                  !memcmp(a->first_fail_at, b->first_fail_at, sizeof a->first_fail_at) &&
                  !memcmp(a->ratio_hist, b->ratio_hist, sizeof a->ratio_hist),
              "case %d %s %s: device-block compare checked %lld failed %lld esc %lld worst %g median %g; host "
              "compare %lld %lld %lld %g %g", cs, what, nm[k], (long long)a->checked, (long long)a->failed,
              (long long)a->escalations, a->worst_ratio, a->median_ratio, (long long)b->checked, (long long)b->failed,
              (long long)b->escalations, b->worst_ratio, b->median_ratio);
    }
    cudaFree(p);
    cudaFree(q);
}

/* Verdicts of both results on outputs (host O of the problem's layout, LSE). */
static void verdicts(const char *what, int cs, const orc_fwd_result *rg, const orc_fwd_result *rc,
                     const fa_tensor *o, const fa_lse *lse) {
    orc_stats og, lg, oc, lc;
    fa_error err;
    CHECK(orc_compare_fwd(rg, o, lse, &og, &lg, &err) == FA_OK, "case %d: compare gpu: %s", cs, err.msg);
    CHECK(orc_compare_fwd(rc, o, lse, &oc, &lc, &err) == FA_OK, "case %d: compare cpu: %s", cs, err.msg);
    char w[64];
    snprintf(w, sizeof w, "%s O", what);
    cmp_stats(w, cs, &og, &oc);
    snprintf(w, sizeof w, "%s LSE", what);
    cmp_stats(w, cs, &lg, &lc);
    n_fail_found += og.failed + lg.failed;
}

/* One named preset (in turn over the cases): both tiers' results under that profile,
 * and their verdicts on the CPU backend's outputs. */
static void run_preset(int cs, const fa_fwd_args *ha, const fa_fwd_args *da, const fa_backend *cpu,
                       int64_t max_rows, uint64_t seed) {
    const char *const *names = fa_precision_preset_names();
    int np = 0;
    while (names[np]) np++;
    int k = cs % np;
    fa_precision pr;
    fa_error err;
    memset(&err, 0, sizeof err);
    CHECK(fa_precision_preset(names[k], &pr, &err) == FA_OK, "preset %s: %s", names[k], err.msg);
    if (k < 16) n_preset_cases[k]++;
    orc_options opt;
    orc_options_init(&opt);
    opt.baseline = 0;
    opt.max_rows = max_rows;
    opt.seed = seed;
    orc_fwd_result rc, rg;
    CHECK(orc_fwd(ha, &pr, &opt, &rc, &err) == FA_OK, "case %d %s: orc_fwd: %s", cs, names[k], err.msg);
    CHECK(orc_gpu_fwd(da, &pr, &opt, &rg, &err) == FA_OK, "case %d %s: orc_gpu_fwd: %s", cs, names[k], err.msg);
    char w[64];
    snprintf(w, sizeof w, "%s O", names[k]);
    cmp_block(w, cs, &rg.o, &rc.o);
    snprintf(w, sizeof w, "%s LSE", names[k]);
    cmp_block(w, cs, &rg.lse, &rc.lse);
    const fa_problem *p = &ha->p;
    int64_t no = 1;
    for (int x = 0; x < 4; x++) no += (x == 0 ? p->batch : x == 1 ? p->seqlen_q : x == 2 ? p->heads_q : p->head_dim_v) *
                                     ha->o.stride[x];
    int64_t nl = p->batch * p->heads_q * p->seqlen_q + 1;
    uint16_t *oh = calloc((size_t)no, 2);
    float *lh = calloc((size_t)nl, sizeof(float));
    fa_fwd_args ka = *ha;
    ka.o.ptr = oh;
    ka.lse.ptr = lh;
    if (oh && lh && cpu->forward(&ka, &err) == FA_OK) {
        fa_tensor o = ha->o;
        o.ptr = oh;
        fa_lse l = ha->lse;
        l.ptr = lh;
        verdicts(w, cs, &rg, &rc, &o, &l);
    }
    free(oh);
    free(lh);
    orc_fwd_free(&rc);
    orc_gpu_fwd_free(&rg);
}

static void run_case(int cs, const fa_backend *cpu, const fa_backend *cuda) {
    int64_t B = 1 + (int64_t)(t_next() % 2), Sq = 1 + (int64_t)(t_next() % 200), Sk = 1 + (int64_t)(t_next() % 200);
    if (cs % 7 == 0) Sk = Sq;
    int64_t Hkv = 1 + (int64_t)(t_next() % 2), G = 1 + (int64_t)(t_next() % 3);
    int64_t dims[] = {16, 32, 40, 64, 72, 96, 128};
    int64_t D = dims[t_next() % 7], Dv = t_next() % 4 == 0 ? dims[t_next() % 7] : D;
    fa_dtype dt = t_next() % 2 ? FA_BF16 : FA_F16;
    fa_causal causal = (fa_causal)(t_next() % 3);
    int64_t wl = t_next() % 3 == 0 ? (int64_t)(t_next() % 64) : -1;
    int64_t wr = t_next() % 3 == 0 ? (int64_t)(t_next() % 64) : -1;
    fa_problem p = t_problem(B, Sq, Sk, Hkv * G, Hkv, D, Dv, dt, causal, wl, wr);
    p.window_align = (fa_align)(t_next() % 2);
    if (t_next() % 3 == 0) p.softmax_scale = (float)(0.02 + t_unif());
    int layout = (int)(t_next() % 3), mask_kind = (int)(t_next() % 4); /* 0 none 1 full 2 broadcast 3 rows masked */
    double amp = t_next() % 5 == 0 ? 8.0 : 1.0, vamp = 1.0;
    if (dt == FA_BF16 && cs % 9 == 4) vamp = 0x1p120;  /* P.V numerator may overflow fp32 */
    if (dt == FA_BF16 && cs % 9 == 7) amp = 0x1p64;    /* fp32 scores overflow */
    t_prob t;
    t_setup(&t, p, layout, amp, amp, vamp, mask_kind != 0);
    if (mask_kind == 2) { t.tmask.stride[0] = 0; t.tmask.stride[1] = 0; }
    if (mask_kind == 3)
        for (int64_t x = 0; x < Sk && t.mask; x++) t.mask[x] = -INFINITY; /* row (0, 0, 0) fully masked */
    if (t_next() % 6 == 0) { /* a non-finite input somewhere */
        uint16_t special = t_next() % 2 ? 0x7e00 : 0x7c00; /* fp16 NaN / Inf patterns */
        if (dt == FA_BF16) special = t_next() % 2 ? 0x7fc0 : 0x7f80;
        int64_t sl = (int64_t)(t_next() % (uint64_t)Sk);
        int64_t st4[4];
        t_layout(B, Sk, Hkv, Dv, layout, st4);
        t.v[sl * st4[1]] = special;
    }
    fa_fwd_args ha = t_fwd_args(&t);
    /* device copies, some at an offset */
    int64_t st[4];
    size_t off = t_next() % 2 ? 2 * (size_t)(1 + t_next() % 40) : 0;
    dev_bufs db;
    memset(&db, 0, sizeof db);
    int64_t nq = t_layout(B, Sq, Hkv * G, D, layout, st), nk = t_layout(B, Sk, Hkv, D, layout, st);
    int64_t nv = t_layout(B, Sk, Hkv, Dv, layout, st), no = t_layout(B, Sq, Hkv * G, Dv, layout, st);
    db.q = dev_copy(t.q, (size_t)nq * 2, off);
    db.k = dev_copy(t.k, (size_t)nk * 2, off);
    db.v = dev_copy(t.v, (size_t)nv * 2, 0);
    int64_t nm = B * Hkv * G * Sq * Sk + 1;
    if (t.mask) db.mask = dev_copy(t.mask, (size_t)nm * 4, 4 * off);
    fa_fwd_args da = ha;
    da.q.ptr = (char *)db.q + off;
    da.k.ptr = (char *)db.k + off;
    da.v.ptr = db.v;
    da.mask.ptr = t.mask ? (const float *)((char *)db.mask + 4 * off) : NULL;

    /* every 4th case: a row sample (same seed: the same rows in both tiers) */
    int64_t max_rows = cs % 4 == 3 ? 1 + (int64_t)(t_next() % (uint64_t)(B * Hkv * G * Sq)) : 0;
    uint64_t seed = t_next();
    const fa_backend *bes[2] = {cpu, cuda};
    for (int bi = 0; bi < 2; bi++) {
        const fa_backend *be = bes[bi];
        if (!be) continue;
        orc_options opt;
        orc_options_init(&opt);
        opt.baseline = 0;
        opt.max_rows = max_rows;
        opt.seed = seed;
        orc_fwd_result rc, rg;
        fa_error err;
        memset(&err, 0, sizeof err);
        CHECK(orc_fwd(&ha, &be->precision, &opt, &rc, &err) == FA_OK, "case %d: orc_fwd: %s", cs, err.msg);
        CHECK(orc_gpu_fwd(&da, &be->precision, &opt, &rg, &err) == FA_OK, "case %d: orc_gpu_fwd: %s", cs, err.msg);
        cmp_block("O", cs, &rg.o, &rc.o);
        cmp_block("LSE", cs, &rg.lse, &rc.lse);
        orc_gpu_fwd_dres fdr;
        int have_fdr = fwd_dev_same(be->name, cs, &da, &be->precision, &opt, &rg, &fdr);
        if (bi == 0 && Sq * Sk * (Hkv * G) * B <= 40000) { /* MPFR tier */
            orc_fwd_result rm;
            opt.tier = ORC_TIER_MPFR;
            CHECK(orc_fwd(&ha, &be->precision, &opt, &rm, &err) == FA_OK, "case %d: mpfr: %s", cs, err.msg);
            cmp_mpfr("O", cs, &rg.o, &rm.o);
            cmp_mpfr("LSE", cs, &rg.lse, &rm.lse);
            orc_fwd_free(&rm);
            opt.tier = ORC_TIER_CERTIFIED;
        }
        /* the backend's outputs, judged by both tiers */
        uint16_t *oh = calloc((size_t)no, 2);
        float *lh = calloc((size_t)(B * Hkv * G * Sq + 1), sizeof(float));
        fa_fwd_args ka = bi == 0 ? ha : da;
        int ran = 0;
        if (be->memspace == FA_MEM_HOST) {
            ka.o.ptr = oh;
            ka.lse.ptr = lh;
            ran = be->forward(&ka, &err) == FA_OK;
        } else {
            void *od, *ld;
            CU(cudaMalloc(&od, (size_t)no * 2));
            CU(cudaMalloc(&ld, (size_t)(B * Hkv * G * Sq + 1) * 4));
            ka.o.ptr = od;
            ka.lse.ptr = ld;
            ran = be->forward(&ka, &err) == FA_OK;
            if (ran) {
                CU(cudaMemcpy(oh, od, (size_t)no * 2, cudaMemcpyDeviceToHost));
                CU(cudaMemcpy(lh, ld, (size_t)(B * Hkv * G * Sq + 1) * 4, cudaMemcpyDeviceToHost));
            }
            CU(cudaFree(od));
            CU(cudaFree(ld));
        }
        if (ran) {
            fa_tensor o = ha.o;
            o.ptr = oh;
            fa_lse l = ha.lse;
            l.ptr = lh;
            verdicts(be->name, cs, &rg, &rc, &o, &l);
            if (have_fdr) fwd_dev_verdicts(be->name, cs, &fdr, &rg, &o, &l, no, B * Hkv * G * Sq);
            if (bi == 0) { /* push some elements outside their bound: both tiers must fail them alike */
                for (int64_t x = 0; x < rc.o.n; x += 3) {
                    const orc_index *ix = &rc.o.index[x];
                    int64_t d = x % Dv, e = x * Dv + d;
                    if (rc.o.flags[e]) continue;
                    double bad = rc.o.ref[e] + 4 * rc.o.bound[e] + 1e-3 * fabs(rc.o.ref[e]) + 1e-6;
                    oh[ix->b * o.stride[0] + ix->s * o.stride[1] + ix->h * o.stride[2] + d * o.stride[3]] =
                        orc_encode(bad, dt);
                }
                verdicts("cpu-mutated", cs, &rg, &rc, &o, &l);
                if (have_fdr) fwd_dev_verdicts("cpu-mutated", cs, &fdr, &rg, &o, &l, no, B * Hkv * G * Sq);
            }
        }
        free(oh);
        free(lh);
        if (bi == 0 && cs % 10 == 0) { /* everything escalated */
            orc_fwd_result re;
            opt.escalate_ratio = 0;
            CHECK(orc_gpu_fwd(&da, &be->precision, &opt, &re, &err) == FA_OK, "case %d: esc: %s", cs, err.msg);
            int64_t normal = 0;
            for (int64_t x = 0; x < re.o.n; x++) normal += re.lse.flags[x] == 0 || re.lse.flags[x] == ORC_F_ESCALATED;
            CHECK(re.escalations >= normal * (Dv + 1), "case %d: %lld escalations < %lld", cs,
                  (long long)re.escalations, (long long)(normal * (Dv + 1)));
            /* against the CPU tier escalating alike (MPFR values on both sides) */
            orc_fwd_result rce;
            CHECK(orc_fwd(&ha, &be->precision, &opt, &rce, &err) == FA_OK, "case %d: cpu esc: %s", cs, err.msg);
            cmp_block("O-esc", cs, &re.o, &rce.o);
            cmp_block("LSE-esc", cs, &re.lse, &rce.lse);
            orc_gpu_fwd_dres fde;
            if (fwd_dev_same("esc", cs, &da, &be->precision, &opt, &re, &fde)) orc_gpu_fwd_dev_free(&fde);
            orc_fwd_free(&rce);
            orc_gpu_fwd_free(&re);
        }
        if (have_fdr) orc_gpu_fwd_dev_free(&fdr);
        orc_fwd_free(&rc);
        orc_gpu_fwd_free(&rg);
    }
    run_preset(cs, &ha, &da, cpu, max_rows, seed);
    cudaFree(db.q); cudaFree(db.k); cudaFree(db.v); cudaFree(db.mask);
    t_free(&t);
}

// ----------------------------------------------------------------------------
// backward: orc_gpu_bwd against orc_bwd (and MPFR), verdicts on backends' gradients

static int64_t n_bcmp, n_bmpfr, n_bverdict, n_bfail_found, n_bovf_flags, n_bpreset_cases[16];

static void bcmp_blocks(const char *what, int cs, const orc_bwd_result *g, const orc_bwd_result *c, int finite) {
    char w[96];
    int64_t before = n_cmp, ovf_before = n_ovf_flags;
    int grad = 1 + (c->args.p.dtype == FA_BF16), prec = c->opt.mpfr_prec;
    /* orc_mpfr_err's term counts of the escalation (orc_bwd.c): Sk for dQ, G Sq + G for dK, dV */
    const fa_problem *p = &c->args.p;
    double G = (double)(p->heads_q / p->heads_kv), nq = (double)p->seqlen_k, nc = G * (double)p->seqlen_q + G;
    snprintf(w, sizeof w, "%s dQ", what);
    cmp_block_g(w, cs, &g->dq, &c->dq, grad, prec, nq);
    snprintf(w, sizeof w, "%s dK", what);
    cmp_block_g(w, cs, &g->dk, &c->dk, grad, prec, nc);
    snprintf(w, sizeof w, "%s dV", what);
    cmp_block_g(w, cs, &g->dv, &c->dv, grad, prec, nc);
    n_bcmp += n_cmp - before;
    n_bovf_flags += n_ovf_flags - ovf_before;
    n_cmp = before;
    n_ovf_flags = ovf_before;
    /* the input-consistency ratios: the same forward bounds, different summation orders. With
     * a non-finite input (NaN O rows) orc_bwd's per-tile maximum restarts after a NaN row
     * (`if (!(rt <= m)) m = rt`) while the GPU tier takes the maximum over finite rows: compared
     * on finite inputs only */
    CHECK(!finite || fabs(g->o_input_ratio - c->o_input_ratio) <= 1e-6 * fmax(1, c->o_input_ratio) &&
              fabs(g->lse_input_ratio - c->lse_input_ratio) <= 1e-6 * fmax(1, c->lse_input_ratio),
          "case %d %s: input ratios gpu %g %g cpu %g %g", cs, what, g->o_input_ratio, g->lse_input_ratio,
          c->o_input_ratio, c->lse_input_ratio);
}

static void bverdicts(const char *what, int cs, const orc_bwd_result *rg, const orc_bwd_result *rc, const fa_tensor *dq,
                      const fa_tensor *dk, const fa_tensor *dv) {
    orc_stats g[3], c[3];
    fa_error err;
    CHECK(orc_compare_bwd(rg, dq, dk, dv, &g[0], &g[1], &g[2], &err) == FA_OK, "case %d: compare gpu: %s", cs, err.msg);
    CHECK(orc_compare_bwd(rc, dq, dk, dv, &c[0], &c[1], &c[2], &err) == FA_OK, "case %d: compare cpu: %s", cs, err.msg);
    const char *nm[3] = {"dQ", "dK", "dV"};
    for (int k = 0; k < 3; k++) {
        char w[96];
        snprintf(w, sizeof w, "%s %s", what, nm[k]);
        int64_t before = n_verdict;
        cmp_stats(w, cs, &g[k], &c[k]);
        n_bverdict += n_verdict - before;
        n_verdict = before;
        n_bfail_found += g[k].failed;
    }
}

typedef struct {
    uint16_t *dq, *dk, *dv;
    int64_t nq, nk, nv;
} host_grads;

static int64_t n_bdev, n_bdev_verdict;

/* The device path (orc_gpu_bwd_dev: every element finished on the device, blocks left there,
 * escalation found on the device) = the host path orc_gpu_bwd bit for bit: index, ref,
 * bound, orc_err, flags, escalations, input ratios. 1 with *dr filled, else 0. */
static int dev_same(const char *what, int cs, const fa_bwd_args *da, const fa_precision *pr, const orc_options *opt,
                    const orc_bwd_result *rg, orc_gpu_bwd_dres *dr) {
    fa_error err;
    if (orc_gpu_bwd_dev(da, pr, opt, dr, &err) != FA_OK) {
        CHECK(0, "case %d %s: orc_gpu_bwd_dev: %s", cs, what, err.msg);
        return 0;
    }
    const orc_block *g[3] = {&rg->dq, &rg->dk, &rg->dv}, *d[3] = {&dr->r.dq, &dr->r.dk, &dr->r.dv};
    const char *nm[3] = {"dQ", "dK", "dV"};
    for (int k = 0; k < 3; k++) {
        int64_t ne = g[k]->n * g[k]->dim, bad = 0, first = -1;
        CHECK(d[k]->n == g[k]->n && d[k]->dim == g[k]->dim, "case %d %s %s: shape", cs, what, nm[k]);
        if (d[k]->n != g[k]->n || d[k]->dim != g[k]->dim) continue;
        CHECK(!memcmp(d[k]->index, g[k]->index, (size_t)g[k]->n * sizeof(orc_index)), "case %d %s %s: index", cs,
              what, nm[k]);
        double *h = malloc((size_t)(3 * ne + 1) * 8);
        uint8_t *f = malloc((size_t)ne + 1);
        CU(cudaMemcpy(h, d[k]->ref, (size_t)ne * 8, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(h + ne, d[k]->bound, (size_t)ne * 8, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(h + 2 * ne, d[k]->orc_err, (size_t)ne * 8, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(f, d[k]->flags, (size_t)ne, cudaMemcpyDeviceToHost));
        for (int64_t e = 0; e < ne; e++)
            if (!same_bits(h[e], g[k]->ref[e]) || !same_bits(h[ne + e], g[k]->bound[e]) ||
                !same_bits(h[2 * ne + e], g[k]->orc_err[e]) || f[e] != g[k]->flags[e]) {
                if (first < 0) first = e;
                bad++;
            }
        CHECK(bad == 0, "case %d %s %s: %lld of %lld elements differ between the device and host paths (first %lld: "
              "ref %.17g / %.17g flags %d / %d)", cs, what, nm[k], (long long)bad, (long long)ne, (long long)first,
              first >= 0 ? h[first] : 0.0, first >= 0 ? g[k]->ref[first] : 0.0, first >= 0 ? f[first] : 0,
              first >= 0 ? g[k]->flags[first] : 0);
        n_bdev += ne;
        free(h);
        free(f);
    }
    CHECK(dr->r.escalations == rg->escalations && same_bits(dr->r.o_input_ratio, rg->o_input_ratio) &&
              same_bits(dr->r.lse_input_ratio, rg->lse_input_ratio),
          "case %d %s: device path escalations %lld ratios %g %g, host path %lld %g %g", cs, what,
          (long long)dr->r.escalations, dr->r.o_input_ratio, dr->r.lse_input_ratio, (long long)rg->escalations,
          rg->o_input_ratio, rg->lse_input_ratio);
    return 1;
}

/* The device-block compare (orc_gpu_compare_bwd_dev on gradients uploaded) = the host
 * compare of the host path's result (verdicts, worst, first failure, median, histogram). */
static void dev_verdicts(const char *what, int cs, const orc_gpu_bwd_dres *dr, const orc_bwd_result *rg,
                         const host_grads *hg, const fa_tensor *gq, const fa_tensor *gk, const fa_tensor *gv) {
    fa_tensor t[3] = {*gq, *gk, *gv};
    const void *hp[3] = {hg->dq, hg->dk, hg->dv};
    int64_t n[3] = {hg->nq, hg->nk, hg->nv};
    for (int k = 0; k < 3; k++) {
        void *p;
        CU(cudaMalloc(&p, (size_t)n[k] * 2 + 2));
        CU(cudaMemcpy(p, hp[k], (size_t)n[k] * 2, cudaMemcpyHostToDevice));
        t[k].ptr = p;
    }
    orc_stats h[3], d[3];
    fa_error err;
    CHECK(orc_compare_bwd(rg, gq, gk, gv, &h[0], &h[1], &h[2], &err) == FA_OK, "case %d: compare: %s", cs, err.msg);
    CHECK(orc_gpu_compare_bwd_dev(dr, &t[0], &t[1], &t[2], &d[0], &d[1], &d[2], &err) == FA_OK,
          "case %d: device-block compare: %s", cs, err.msg);
    const char *nm[3] = {"dQ", "dK", "dV"};
    for (int k = 0; k < 3; k++) {
        const orc_stats *a = &d[k], *b = &h[k];
        n_bdev_verdict++;
        CHECK(a->checked == b->checked && a->failed == b->failed && a->unchecked == b->unchecked &&
                  a->escalations == b->escalations && a->nan_unexpected == b->nan_unexpected &&
                  a->nan_missing == b->nan_missing && a->overflow_inf == b->overflow_inf &&
                  a->overflow_sensitive == b->overflow_sensitive && a->nonfinite_match == b->nonfinite_match &&
                  same_bits(a->worst_ratio, b->worst_ratio) && same_bits(a->median_ratio, b->median_ratio) &&
                  !memcmp(a->worst_at, b->worst_at, sizeof a->worst_at) &&
                  !memcmp(a->first_fail_at, b->first_fail_at, sizeof a->first_fail_at) &&
                  !memcmp(a->ratio_hist, b->ratio_hist, sizeof a->ratio_hist),
              "case %d %s %s: device-block compare checked %lld failed %lld esc %lld worst %g median %g; host "
              "compare %lld %lld %lld %g %g", cs, what, nm[k], (long long)a->checked, (long long)a->failed,
              (long long)a->escalations, a->worst_ratio, a->median_ratio, (long long)b->checked, (long long)b->failed,
              (long long)b->escalations, b->worst_ratio, b->median_ratio);
    }
    for (int k = 0; k < 3; k++) cudaFree(t[k].ptr);
}

/* A backend's backward on (host or device) args; gradients copied to host (g). 1 if it ran. */
static int run_backward(const fa_backend *be, const fa_bwd_args *ha, const fa_bwd_args *da, host_grads *g) {
    fa_error err;
    fa_bwd_args a = be->memspace == FA_MEM_HOST ? *ha : *da;
    void *p[3] = {g->dq, g->dk, g->dv};
    int64_t n[3] = {g->nq, g->nk, g->nv};
    void *dp[3] = {NULL, NULL, NULL};
    if (be->memspace != FA_MEM_HOST)
        for (int k = 0; k < 3; k++) { CU(cudaMalloc(&dp[k], (size_t)n[k] * 2)); CU(cudaMemset(dp[k], 0, (size_t)n[k] * 2)); }
    a.dq.ptr = be->memspace == FA_MEM_HOST ? p[0] : dp[0];
    a.dk.ptr = be->memspace == FA_MEM_HOST ? p[1] : dp[1];
    a.dv.ptr = be->memspace == FA_MEM_HOST ? p[2] : dp[2];
    int ran = be->backward && be->backward(&a, &err) == FA_OK;
    if (be->memspace != FA_MEM_HOST) {
        if (ran) CU(cudaDeviceSynchronize());
        for (int k = 0; k < 3; k++) {
            if (ran) CU(cudaMemcpy(p[k], dp[k], (size_t)n[k] * 2, cudaMemcpyDeviceToHost));
            CU(cudaFree(dp[k]));
        }
    }
    return ran;
}

static void run_bwd_case(int cs, const fa_backend *cpu, const fa_backend *cuda) {
    int64_t B = 1 + (int64_t)(t_next() % 2), Sq = 1 + (int64_t)(t_next() % 160), Sk = 1 + (int64_t)(t_next() % 160);
    if (cs % 5 == 0) Sk = Sq;
    int64_t Hkv = 1 + (int64_t)(t_next() % 2), G = 1 + (int64_t)(t_next() % 3);
    int64_t dims[] = {16, 32, 40, 64, 72, 96, 128};
    int64_t D = dims[t_next() % 7], Dv = t_next() % 4 == 0 ? dims[t_next() % 7] : D;
    fa_dtype dt = t_next() % 2 ? FA_BF16 : FA_F16;
    fa_causal causal = (fa_causal)(t_next() % 3);
    int64_t wl = t_next() % 3 == 0 ? (int64_t)(t_next() % 64) : -1;
    int64_t wr = t_next() % 3 == 0 ? (int64_t)(t_next() % 64) : -1;
    fa_problem p = t_problem(B, Sq, Sk, Hkv * G, Hkv, D, Dv, dt, causal, wl, wr);
    p.window_align = (fa_align)(t_next() % 2);
    if (t_next() % 3 == 0) p.softmax_scale = (float)(0.02 + t_unif());
    int layout = (int)(t_next() % 3), mask_kind = (int)(t_next() % 4);
    double amp = t_next() % 5 == 0 ? 8.0 : 1.0, vamp = 1.0;
    if (dt == FA_BF16 && cs % 9 == 4) vamp = 0x1p100;  /* dP, dV sums may overflow fp32 */
    if (dt == FA_BF16 && cs % 9 == 7) amp = 0x1p64;    /* fp32 scores overflow: uncheckable rows */
    t_prob t;
    t_setup(&t, p, layout, amp, amp, vamp, mask_kind != 0);
    if (mask_kind == 2) { t.tmask.stride[0] = 0; t.tmask.stride[1] = 0; }
    if (mask_kind == 3)
        for (int64_t x = 0; x < Sk && t.mask; x++) t.mask[x] = -INFINITY; /* row (0, 0, 0) fully masked */
    /* O and LSE from the CPU backend's forward: what a backward is handed */
    {
        fa_fwd_args fa = t_fwd_args(&t);
        fa_error err;
        if (cpu->forward(&fa, &err) != FA_OK) { t_free(&t); return; }
    }
    int finite = amp < 1e3 && vamp < 1e3; /* huge inputs: NaN / Inf forward rows */
    if (t_next() % 6 == 0) { /* a non-finite input somewhere (after the forward) */
        finite = 0;
        uint16_t special = dt == FA_BF16 ? (t_next() % 2 ? 0x7fc0 : 0x7f80) : (t_next() % 2 ? 0x7e00 : 0x7c00);
        int64_t sl = (int64_t)(t_next() % (uint64_t)Sk), st4[4];
        t_layout(B, Sk, Hkv, Dv, layout, st4);
        t.v[sl * st4[1]] = special;
    }
    fa_bwd_args ha = t_bwd_args(&t);
    int64_t st[4];
    size_t off = t_next() % 2 ? 2 * (size_t)(1 + t_next() % 40) : 0;
    int64_t nq = t_layout(B, Sq, Hkv * G, D, layout, st), nk = t_layout(B, Sk, Hkv, D, layout, st);
    int64_t nv = t_layout(B, Sk, Hkv, Dv, layout, st), no = t_layout(B, Sq, Hkv * G, Dv, layout, st);
    int64_t nl = B * Hkv * G * Sq + 1, nm = B * Hkv * G * Sq * Sk + 1;
    void *dq_ = dev_copy(t.q, (size_t)nq * 2, off), *dk_ = dev_copy(t.k, (size_t)nk * 2, off);
    void *dv_ = dev_copy(t.v, (size_t)nv * 2, 0), *do_ = dev_copy(t.o, (size_t)no * 2, off);
    void *ddo = dev_copy(t.dout, (size_t)no * 2, 0), *dl = dev_copy(t.lse, (size_t)nl * 4, 0);
    void *dm = t.mask ? dev_copy(t.mask, (size_t)nm * 4, 4 * off) : NULL;
    fa_bwd_args da = ha;
    da.q.ptr = (char *)dq_ + off;
    da.k.ptr = (char *)dk_ + off;
    da.v.ptr = dv_;
    da.o.ptr = (char *)do_ + off;
    da.dout.ptr = ddo;
    da.lse.ptr = (float *)dl;
    da.mask.ptr = dm ? (const float *)((char *)dm + 4 * off) : NULL;
    int64_t max_rows = cs % 4 == 3 ? 1 + (int64_t)(t_next() % (uint64_t)(B * Hkv * G * Sq)) : 0;
    int64_t max_cols = cs % 4 == 3 ? 1 + (int64_t)(t_next() % (uint64_t)(B * Hkv * Sk)) : 0;
    uint64_t seed = t_next();
    host_grads hg = {calloc((size_t)nq, 2), calloc((size_t)nk, 2), calloc((size_t)nv, 2), nq, nk, nv};
    fa_tensor gq = ha.q, gk = ha.k, gv = ha.v; /* the gradients share the inputs' layouts */
    gq.ptr = hg.dq; gk.ptr = hg.dk; gv.ptr = hg.dv;
    ha.dq = gq; ha.dk = gk; ha.dv = gv; /* strides (run_backward sets the pointers) */
    da.dq = gq; da.dk = gk; da.dv = gv;

    const char *const *names = fa_precision_preset_names();
    int np = 0;
    while (names[np]) np++;
    for (int pass = 0; pass < 3; pass++) { /* 0: the CPU backend's profile, 1: CUDA's, 2: a preset */
        const fa_backend *be = pass == 1 ? cuda : cpu;
        if (!be) continue;
        fa_precision pr = be->precision;
        const char *what = be->name;
        if (pass == 2) {
            fa_error err;
            int k = cs % np;
            CHECK(fa_precision_preset(names[k], &pr, &err) == FA_OK, "preset %s: %s", names[k], err.msg);
            if (k < 16) n_bpreset_cases[k]++;
            what = names[k];
        }
        orc_options opt;
        orc_options_init(&opt);
        opt.baseline = 0;
        opt.max_rows = max_rows;
        opt.max_cols = max_cols;
        opt.seed = seed;
        opt.lse_unknown = pass == 2 && cs % 3 == 1; /* the LSE the kernel used: any within the bound (5.0) */
        orc_bwd_result rc, rg;
        fa_error err;
        memset(&err, 0, sizeof err);
        CHECK(orc_bwd(&ha, &pr, &opt, &rc, &err) == FA_OK, "case %d: orc_bwd: %s", cs, err.msg);
        CHECK(orc_gpu_bwd(&da, &pr, &opt, &rg, &err) == FA_OK, "case %d: orc_gpu_bwd: %s", cs, err.msg);
        bcmp_blocks(what, cs, &rg, &rc, finite);
        orc_gpu_bwd_dres dr;
        int have_dr = dev_same(what, cs, &da, &pr, &opt, &rg, &dr);
        if (pass == 0 && B * Hkv * G * Sq * Sk <= 12000) { /* MPFR tier */
            orc_bwd_result rm;
            opt.tier = ORC_TIER_MPFR;
            CHECK(orc_bwd(&ha, &pr, &opt, &rm, &err) == FA_OK, "case %d: mpfr: %s", cs, err.msg);
            int64_t before = n_mpfr;
            cmp_mpfr("dQ", cs, &rg.dq, &rm.dq);
            cmp_mpfr("dK", cs, &rg.dk, &rm.dk);
            cmp_mpfr("dV", cs, &rg.dv, &rm.dv);
            n_bmpfr += n_mpfr - before;
            n_mpfr = before;
            orc_bwd_free(&rm);
            opt.tier = ORC_TIER_CERTIFIED;
        }
        /* gradients of the backend (pass 1: the CUDA backend on the device copies; else the CPU backend) */
        if (run_backward(pass == 1 ? cuda : cpu, &ha, &da, &hg)) {
            bverdicts(what, cs, &rg, &rc, &gq, &gk, &gv);
            if (have_dr) dev_verdicts(what, cs, &dr, &rg, &hg, &gq, &gk, &gv);
            if (pass == 0) { /* push elements outside their bound: both tiers must fail them alike */
                const orc_block *bl[3] = {&rc.dq, &rc.dk, &rc.dv};
                uint16_t *buf[3] = {hg.dq, hg.dk, hg.dv};
                const fa_tensor *tt[3] = {&gq, &gk, &gv};
                for (int k = 0; k < 3; k++)
                    for (int64_t x = 0; x < bl[k]->n; x += 3) {
                        const orc_index *ix = &bl[k]->index[x];
                        int64_t d = x % bl[k]->dim, e = x * bl[k]->dim + d;
                        if (bl[k]->flags[e]) continue;
                        double bad = bl[k]->ref[e] + 4 * bl[k]->bound[e] + 1e-3 * fabs(bl[k]->ref[e]) + 1e-6;
                        buf[k][ix->b * tt[k]->stride[0] + ix->s * tt[k]->stride[1] + ix->h * tt[k]->stride[2] +
                               d * tt[k]->stride[3]] = orc_encode(bad, dt);
                    }
                bverdicts("cpu-mutated", cs, &rg, &rc, &gq, &gk, &gv);
                if (have_dr) dev_verdicts("cpu-mutated", cs, &dr, &rg, &hg, &gq, &gk, &gv);
            }
        }
        if (pass == 0 && cs % 10 == 0) { /* everything escalated, both tiers */
            orc_bwd_result re, rce;
            opt.escalate_ratio = 0;
            CHECK(orc_gpu_bwd(&da, &pr, &opt, &re, &err) == FA_OK, "case %d: esc: %s", cs, err.msg);
            CHECK(orc_bwd(&ha, &pr, &opt, &rce, &err) == FA_OK, "case %d: cpu esc: %s", cs, err.msg);
            /* some escalation unless no element can be escalated (orc_bwd: a finite, checkable element
             * with orc_err > 0; a case of huge q, k has only uncheckable rows) */
            int64_t cand = 0;
            const orc_block *cb[3] = {&rc.dq, &rc.dk, &rc.dv};
            for (int k = 0; k < 3; k++)
                for (int64_t x = 0; x < cb[k]->n * cb[k]->dim; x++)
                    cand += !(cb[k]->flags[x] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE | ORC_F_MASKED_ROW)) &&
                            cb[k]->orc_err[x] > 0;
            CHECK(re.escalations == rce.escalations && (re.escalations > 0) == (cand > 0),
                  "case %d: escalations gpu %lld cpu %lld (%lld elements could escalate)", cs, (long long)re.escalations,
                  (long long)rce.escalations, (long long)cand);
            bcmp_blocks("esc", cs, &re, &rce, finite);
            orc_gpu_bwd_dres dre;
            if (dev_same("esc", cs, &da, &pr, &opt, &re, &dre)) orc_gpu_bwd_dev_free(&dre);
            orc_bwd_free(&rce);
            orc_gpu_bwd_free(&re);
        }
        if (have_dr) orc_gpu_bwd_dev_free(&dr);
        orc_bwd_free(&rc);
        orc_gpu_bwd_free(&rg);
    }
    free(hg.dq); free(hg.dk); free(hg.dv);
    cudaFree(dq_); cudaFree(dk_); cudaFree(dv_); cudaFree(do_); cudaFree(ddo); cudaFree(dl);
    if (dm) cudaFree(dm);
    t_free(&t);
}

int main(int argc, char **argv) {
    int ncases = argc > 1 ? atoi(argv[1]) : 160;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "test_gpu_oracle: no CUDA device: cannot run (not passed)\n");
        return 2;
    }
    const fa_backend *cpu = fa_backend_cpu(), *cuda = NULL;
    fa_error err;
    if (fa_backend_by_name("cuda", &cuda, &err) != FA_OK) {
        fprintf(stderr, "test_gpu_oracle: no cuda backend: %s\n", err.msg);
        return 2;
    }
    /* invalid input is refused with a named argument, like orc_fwd */
    {
        t_prob t;
        t_setup(&t, t_problem(1, 8, 8, 2, 1, 16, 16, FA_F16, FA_CAUSAL_NONE, -1, -1), 0, 1, 1, 1, 0);
        fa_fwd_args a = t_fwd_args(&t);
        orc_fwd_result r;
        CHECK(orc_gpu_fwd(&a, &cpu->precision, NULL, &r, &err) == FA_ERR_INVALID && !strcmp(err.arg, "q"),
              "host pointers not refused: %d %s", err.status, err.arg);
        a.p.heads_q = 3;
        a.p.heads_kv = 2;
        CHECK(orc_gpu_fwd(&a, &cpu->precision, NULL, &r, &err) == FA_ERR_INVALID && !strcmp(err.arg, "heads_kv"),
              "GQA mismatch not refused: %d %s", err.status, err.arg);
        t_free(&t);
    }
    int nbwd = argc > 2 ? atoi(argv[2]) : ncases / 2;
    clock_t t0 = clock();
    for (int cs = 0; cs < ncases; cs++) run_case(cs, cpu, cuda);
    for (int cs = 0; cs < nbwd; cs++) run_bwd_case(cs, cpu, cuda);
    printf("test_gpu_oracle: backward: %d cases, %lld elements compared with the CPU tier, %lld with MPFR, %lld "
           "verdicts compared (%lld failures found by both tiers alike), %lld flagged overflow-sensitive\n",
           nbwd, (long long)n_bcmp, (long long)n_bmpfr, (long long)n_bverdict, (long long)n_bfail_found,
           (long long)n_bovf_flags);
    if (nbwd > 0) {
        CHECK(n_bcmp > 0 && n_bmpfr > 0 && n_bverdict > 0, "backward: nothing compared");
        CHECK(n_bdev > 0 && n_bdev_verdict > 0, "backward: device path not compared");
        printf("test_gpu_oracle: backward device path (orc_gpu_bwd_dev): %lld elements equal to the host path bit "
               "for bit, %lld device-block compares equal to the host compare\n", (long long)n_bdev,
               (long long)n_bdev_verdict);
        CHECK(n_bfail_found > 0, "backward: the mutated gradients produced no failure: the comparison cannot fail");
        CHECK(n_bovf_flags > 0 || nbwd < 9, "backward: no element flagged ORC_F_OVERFLOW");
        const char *const *nm = fa_precision_preset_names();
        for (int k = 0; nm[k] && k < 16; k++)
            CHECK(n_bpreset_cases[k] > 0 || nbwd < 16, "backward: preset %s not run", nm[k]);
    }
    printf("test_gpu_oracle: %d cases, %lld elements compared with the CPU tier, %lld with MPFR, %lld verdicts "
           "compared (%lld failures found by both tiers alike), %.1f s CPU\n",
           ncases, (long long)n_cmp, (long long)n_mpfr, (long long)n_verdict, (long long)n_fail_found,
           (double)(clock() - t0) / CLOCKS_PER_SEC);
    CHECK(n_fail_found > 0, "the mutated outputs produced no failure: the comparison cannot fail");
    CHECK(ncases == 0 || (n_fdev > 0 && n_fdev_verdict > 0), "forward: device path not compared");
    printf("test_gpu_oracle: forward device path (orc_gpu_fwd_dev): %lld elements equal to the host path bit for "
           "bit, %lld device-block compares equal to the host compare\n", (long long)n_fdev,
           (long long)n_fdev_verdict);
    CHECK(n_ovf_flags > 0 || ncases < 160, "no element flagged ORC_F_OVERFLOW: the overflow cases do not reach the flag");
    {
        const char *const *names = fa_precision_preset_names();
        for (int k = 0; names[k] && k < 16; k++) {
            printf("  preset %-16s %lld cases\n", names[k], (long long)n_preset_cases[k]);
            CHECK(n_preset_cases[k] > 0 || ncases < 16, "preset %s not run", names[k]);
        }
        printf("  %lld elements flagged overflow-sensitive (both tiers alike)\n", (long long)n_ovf_flags);
    }
    if (t_failures) { fprintf(stderr, "%d failures\n", t_failures); return 1; }
    printf("test_gpu_oracle: OK\n");
    return 0;
}
