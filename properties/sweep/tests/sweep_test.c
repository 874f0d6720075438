/* sweep_test.c: the sweep library (properties/sweep/sweep.h).
 *   - the base set is certify's sweep as it was before the move (counts per category, seeds);
 *   - the cuda set covers what the GPU cc_tests covered (every head dim 8..256 in both dtypes,
 *     every grid sequence length, the 13 mask kinds, GQA 1/2/8, the three layouts with the fused
 *     QKV strides, dO layouts, the leak geometries, the findings, the declined layouts, one call
 *     past 2^31 elements), and its sanitize subset stays short;
 *   - production: S >= 8k, GQA, causal, one call past 2^31 elements per tensor;
 *   - every entry is a valid case (fc_case_check);
 *   - fc_sweep_met on synthetic verdicts;
 *   - fc_sweep_run on the CPU backend: a quick category passes, a mutant of the backend fails it;
 *     the cuda set's sanitize subset passes (its cases are well formed, expectations are met);
 *   - what the old GPU cc_tests checked besides the grid (test_coverage): the nonfinite entries
 *     (rows that see a NaN/Inf judged, rows that cannot see it and rows with no visible key kept
 *     clean: each shown failing on a broken backend that the leak property lets pass), the
 *     grid's finite-and--inf masks, 30 determinism runs, the host-pointer call of the misuse
 *     suite on backends that declare device memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_mutants.h"
#define CHECK_QUIET_OK /* checks in loops over every entry of the sweeps */
#include "properties/check/tests/check_test.h"
#include "properties/properties.h"
#include "properties/sweep/sweep.h"
#include "properties/sweep/tests/sweep_fixtures.h"


static int64_t count_cat(const fc_sweep_entry *e, int64_t n, int cat) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += e[i].category == cat;
    return k;
}

static void test_base(void) {
    /* the counts of certify's build_sweep before it moved here (cli/cmd_certify.c; mask: + the
       random_mixed (finite values with -inf) and key_padding kinds, in both broadcasts); then the
       contract-v3 categories (varlen, paged, softcap, sinks: 4 cases each, 2 quick) only for
       a backend whose limits claim the features (the CPU backend's), and the packing and
       paging properties likewise */
    static const int64_t full[12] = {29, 12, 8, 15, 5, 6, 16, 3, 6, 4, 4, 4},
                         quick[12] = {14, 6, 5, 8, 3, 3, 8, 3, 4, 2, 2, 2};
    for (int q = 0; q < 4; q++) {
        int claims = q >= 2;
        fc_sweep_opts o;
        fc_sweep_opts_default(&o);
        o.quick = q % 2;
        if (claims) o.lim = &fa_backend_cpu()->limits;
        fc_sweep_entry *e;
        int64_t n = fc_sweep_build(&o, &e);
        CHECK(n > 0, "base sweep built");
        for (int c = 0; c <= FC_SWEEP_PROPERTIES; c++) {
            int64_t want = q % 2 ? quick[c] : full[c];
            if (c >= FC_SWEEP_VARLEN && c <= FC_SWEEP_SINKS && !claims) want = 0;
            if (c == FC_SWEEP_PROPERTIES) want = (q % 2 ? 1 : 2) * (fc_prop_count() - (claims ? 0 : 2));
            CHECK(count_cat(e, n, c) == want, "base %s%s%s: %lld cases, want %lld", fc_sweep_cat_name(c), q % 2 ? " (quick)" : "",
                  claims ? " (v3 claimed)" : "",
                  (long long)count_cat(e, n, c), (long long)want);
        }
        for (int64_t i = 0; i < n; i++) {
            char msg[256];
            CHECK(fc_case_check(&e[i].c, msg, sizeof msg) == 0, "base entry %lld: %s", (long long)i, msg);
            CHECK(e[i].c.seed == 1000 + (uint64_t)i, "base entry %lld seed %llu (certify's 1000 + position)", (long long)i,
                  (unsigned long long)e[i].c.seed);
            CHECK(fc_sweep_cat_set(e[i].category) == FC_SWEEP_SET_BASE, "base set holds only base categories");
        }
        free(e);
    }
}

static int64_t numel_q(const fc_case *c) { return fc_case_numel(c, FC_T_Q); }

static void test_cuda(void) {
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.sets = FC_SWEEP_SET_CUDA;
    fc_sweep_entry *e;
    int64_t n = fc_sweep_build(&o, &e);
    CHECK(n > 200, "cuda set: %lld entries", (long long)n);
    int head_dims[2][33] = {{0}}, seq_seen[17] = {0}, causal[3] = {0}, masks[FC_MASK_COUNT] = {0}, gqa[9] = {0};
    int bhsd = 0, pad = 0, qkv = 0, do_bhsd = 0, do_pad = 0, big = 0, neg_scale = 0, empty = 0, pairs = 0, windows = 0;
    int leak = 0, leak_long = 0, det = 0, declined = 0, findings = 0, sq_ne_sk = 0, det_modes[2] = {0, 0};
    int mla = 0, dqk_ne_dv = 0, leak_mla = 0; /* grid entries at Dqk/Dv 192/128 (the MLA kernels), any Dqk != Dv */
    static const int64_t seqlens[17] = {1, 3, 17, 63, 64, 65, 97, 113, 127, 128, 239, 513, 799, 1023, 1025, 2048, 4224};
    for (int64_t i = 0; i < n; i++) {
        const fc_case *c = &e[i].c;
        const fa_problem *p = &c->p;
        char msg[256];
        CHECK(fc_case_check(c, msg, sizeof msg) == 0, "cuda entry %s: %s", e[i].label, msg);
        CHECK(c->backward == 1 || strncmp(e[i].label, "big fwd", 7) == 0 ||
                  (strncmp(e[i].label, "nonfinite", 9) == 0 && p->seqlen_q > 1000),
              "cuda entry %s: backward on", e[i].label);
        if (e[i].category == FC_SWEEP_CUDA_GRID) {
            if (p->head_dim_qk % 8 == 0 && p->head_dim_qk <= 256) head_dims[p->dtype == FA_BF16][p->head_dim_qk / 8]++;
            for (int k = 0; k < 17; k++) seq_seen[k] += p->seqlen_q == seqlens[k] || p->seqlen_k == seqlens[k];
            causal[p->causal]++;
            masks[c->mask.kind]++;
            gqa[p->heads_q / p->heads_kv <= 8 ? p->heads_q / p->heads_kv : 0]++;
            bhsd += c->layout[FC_T_Q].order[1] == 2;
            pad += c->layout[FC_T_Q].pad[2] == 24;
            do_bhsd += c->layout[FC_T_DO].order[1] == 2 && c->layout[FC_T_Q].order[1] != 2;
            do_pad += c->layout[FC_T_DO].pad[2] == 24 && c->layout[FC_T_Q].pad[2] != 24;
            neg_scale += p->softmax_scale < 0;
            empty += p->batch * p->seqlen_q * p->seqlen_k == 0;
            pairs += p->batch * p->heads_q >= 76800;
            windows += p->window_left >= 0 || p->window_right >= 0;
            sq_ne_sk += p->seqlen_q != p->seqlen_k;
            det_modes[c->deterministic != 0]++;
            mla += p->head_dim_qk == 192 && p->head_dim_v == 128;
            dqk_ne_dv += p->head_dim_qk != p->head_dim_v;
            if (c->layout[FC_T_K].offset > 0 && c->layout[FC_T_Q].pad[1] > 0) {
                /* fused QKV: Q, K, V are head slices of one [B, S, Hq + 2 Hkv, D] buffer */
                int64_t sq[4], sk[4], sv[4], Ht = p->heads_q + 2 * p->heads_kv, D = p->head_dim_qk;
                fc_case_strides(c, FC_T_Q, sq);
                fc_case_strides(c, FC_T_K, sk);
                fc_case_strides(c, FC_T_V, sv);
                int ok = 1;
                for (int k = 0; k < 4; k++) ok &= sq[k] == sk[k] && sk[k] == sv[k];
                ok &= sq[1] == Ht * D && sq[0] == p->seqlen_q * Ht * D && sq[2] == D;
                ok &= c->layout[FC_T_K].offset == p->heads_q * D && c->layout[FC_T_V].offset == (p->heads_q + p->heads_kv) * D;
                CHECK(ok, "fused QKV strides of %s", e[i].label);
                qkv++;
            }
        }
        if (e[i].category == FC_SWEEP_CUDA_LEAK) {
            int is_leak = e[i].prop >= 0 && strcmp(fc_prop_table[e[i].prop].name, "leak") == 0;
            leak += is_leak;
            leak_long += is_leak && p->seqlen_q >= 2000;
            leak_mla += is_leak && p->head_dim_qk == 192 && p->head_dim_v == 128;
            CHECK(is_leak || (e[i].prop >= 0 && strcmp(fc_prop_table[e[i].prop].name, "nonfinite") == 0),
                  "cuda_leak entries use the leak or the nonfinite property");
        }
        if (e[i].category == FC_SWEEP_CUDA_DETERMINISM) {
            det++;
            CHECK(strcmp(fc_prop_table[e[i].prop].name, "determinism") == 0 && c->deterministic && p->batch >= 48,
                  "batch-heavy deterministic backward under the determinism property");
        }
        if (e[i].category == FC_SWEEP_CUDA_DECLINED) {
            declined++;
            CHECK(e[i].expect == FC_SWEEP_EXPECT_DECLINE, "declined entries may be declined");
        }
        if (e[i].category == FC_SWEEP_CUDA_FINDINGS) findings++;
        if (e[i].category == FC_SWEEP_CUDA_BIG) {
            big++;
            CHECK(numel_q(c) > ((int64_t)1 << 31) && fc_case_numel(c, FC_T_O) > ((int64_t)1 << 31),
                  "big entry %s has > 2^31 elements in Q and O", e[i].label);
            CHECK(!e[i].determinism, "no determinism re-run on the big case (memory)");
        } else {
            CHECK(numel_q(c) <= ((int64_t)1 << 31), "only the big category is past 2^31 (%s)", e[i].label);
        }
    }
    for (int dt = 0; dt < 2; dt++)
        for (int d = 1; d <= 32; d++) CHECK(head_dims[dt][d] > 0, "head dim %d %s in the grid", 8 * d, dt ? "bf16" : "fp16");
    for (int k = 0; k < 17; k++) CHECK(seq_seen[k] > 0, "sequence length %lld in the grid", (long long)seqlens[k]);
    for (int k = 0; k < 3; k++) CHECK(causal[k] > 0, "causal mode %d in the grid", k);
    CHECK(masks[FC_MASK_RANDOM_MIXED] && masks[FC_MASK_KEY_PADDING], "mask kinds in the grid");
    CHECK(gqa[1] && gqa[2] && gqa[8], "GQA ratios 1, 2, 8");
    CHECK(bhsd >= 3 && pad >= 3 && qkv >= 3, "layouts bhsd %d pad %d qkv %d", bhsd, pad, qkv);
    CHECK(do_bhsd > 10 && do_pad > 10, "dO in its own layout: bhsd %d pad %d", do_bhsd, do_pad);
    CHECK(neg_scale && empty >= 3 && pairs && windows > 20 && sq_ne_sk > 50, "scales, empty, (b, h) pairs, windows, Sq != Sk");
    CHECK(mla >= 13 && dqk_ne_dv >= 17, "Dqk != Dv on the CUDA grid: %d at 192/128, %d in all", mla, dqk_ne_dv);
    CHECK(det_modes[0] > 50 && det_modes[1] > 50, "both backward modes: atomic %d, deterministic %d", det_modes[0], det_modes[1]);
    CHECK(leak == 20 && leak_long == 2 && leak_mla == 2, "leak geometries: %d (long %d, 192/128 %d)", leak, leak_long, leak_mla);
    CHECK(det == 6 && declined == 4 && findings == 4 && big == 2, "det %d declined %d findings %d big %d", det, declined,
          findings, big);
    free(e);

    /* without big: no case past 2^31; sanitize: short sequences only */
    o.big = 0;
    n = fc_sweep_build(&o, &e);
    for (int64_t i = 0; i < n; i++) CHECK(numel_q(&e[i].c) <= ((int64_t)1 << 31), "--no-big: %s", e[i].label);
    free(e);
    o.sanitize = 1;
    o.big = 1;
    n = fc_sweep_build(&o, &e);
    CHECK(n > 10 && n < 80, "sanitize subset: %lld entries", (long long)n);
    for (int64_t i = 0; i < n; i++)
        CHECK(e[i].c.p.seqlen_q <= 300 && e[i].c.p.seqlen_k <= 300 && e[i].category != FC_SWEEP_CUDA_BIG,
              "sanitize subset is short: %s", e[i].label);
    free(e);
    /* forward only: no entry runs a backward */
    fc_sweep_opts_default(&o);
    o.sets = FC_SWEEP_SET_CUDA | FC_SWEEP_SET_PRODUCTION | FC_SWEEP_SET_BASE;
    o.has_bwd = 0;
    n = fc_sweep_build(&o, &e);
    for (int64_t i = 0; i < n; i++)
        CHECK(e[i].c.backward == 0 && e[i].category != FC_SWEEP_CUDA_FINDINGS, "forward-only sweep: %s", e[i].label);
    free(e);
}

static void test_production(void) {
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.sets = FC_SWEEP_SET_PRODUCTION;
    fc_sweep_entry *e;
    int64_t n = fc_sweep_build(&o, &e);
    int huge = 0, g = 0, causal = 0, long_s = 0;
    CHECK(n >= 4, "production: %lld entries", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const fa_problem *p = &e[i].c.p;
        char msg[256];
        CHECK(fc_case_check(&e[i].c, msg, sizeof msg) == 0, "production %s: %s", e[i].label, msg);
        CHECK(e[i].category == FC_SWEEP_PRODUCTION, "category: %s", e[i].label);
        /* every production shape is on the device path of a CUDA backend (every element judged) */
        CHECK(fc_case_work(&e[i].c) >= FC_CHECK_DEVICE_WORK, "device-path size: %s", e[i].label);
        g += p->heads_q > p->heads_kv;
        causal += p->causal != FA_CAUSAL_NONE;
        if (numel_q(&e[i].c) <= ((int64_t)1 << 31)) {
            long_s++;
            CHECK(p->seqlen_q >= 8192 && p->seqlen_k >= 8192, "S >= 8k: %s", e[i].label);
        } else {
            huge++;
            /* a batch offset computed in 32 bits wraps for the batches that start past element
               2^31 of Q (batch stride Sq Hq D): at least an eighth of them */
            const int64_t bs = p->seqlen_q * p->heads_q * p->head_dim_qk;
            int64_t past = 0;
            for (int64_t b = 0; b < p->batch; b++) past += b * bs >= ((int64_t)1 << 31);
            CHECK(past * 8 >= p->batch && p->batch > 1, "the huge call has %lld of %lld batches past 2^31", (long long)past,
                  (long long)p->batch);
            int64_t rows, cols;
            fc_check_sample_plan(&e[i].c, NULL, &rows, &cols);
            CHECK(rows == FC_CHECK_SAMPLE && cols == FC_CHECK_SAMPLE, "the huge call is checked on a row sample");
            for (int t = 0; t < FC_T_COUNT; t++)
                if (t == FC_T_Q || t == FC_T_O || t == FC_T_DO || t == FC_T_DQ)
                    CHECK(fc_case_numel(&e[i].c, t) > ((int64_t)1 << 31), "%s past 2^31", fc_tensor_name(t));
        }
    }
    CHECK(huge == 1 && long_s >= 3 && g >= 2 && causal == n,
          "one call past 2^31 (%d), S >= 8k (%d), GQA (%d), causal (%d of %lld)", huge, long_s, g, causal, (long long)n);
    free(e);
}

static void test_met(void) {
    fc_sweep_entry e;
    memset(&e, 0, sizeof e);
    fc_case_default(&e.c);
    fc_verdict v;
    char why[300];
    fc_verdict_init(&v);
    CHECK(fc_sweep_met(&e, &v, why, sizeof why), "PASS meets PASS");
    fc_verdict_decline(&v, FC_PHASE_FORWARD, "forward: backend says unsupported (q.ptr): misaligned");
    CHECK(!fc_sweep_met(&e, &v, why, sizeof why), "a SKIP is not a pass");
    e.expect = FC_SWEEP_EXPECT_DECLINE;
    CHECK(fc_sweep_met(&e, &v, why, sizeof why), "UNSUPPORTED meets DECLINE");
    fc_verdict_fail(&v, "rejected_wrote", "forward: the call was rejected but output o was written");
    CHECK(!fc_sweep_met(&e, &v, why, sizeof why) && strstr(why, "rejected_wrote"), "a write on a decline fails: %s", why);
    fc_verdict_init(&v);
    fc_verdict_add(&v, FC_PHASE_BACKWARD, FC_REASON_UNCHECKABLE, NULL,
                   "dk: 8 elements have no finite oracle bound (uncheckable); not judged");
    CHECK(!fc_sweep_met(&e, &v, why, sizeof why), "uncheckable does not meet DECLINE");
    e.expect = FC_SWEEP_EXPECT_JUDGED;
    CHECK(!fc_sweep_met(&e, &v, why, sizeof why), "JUDGED needs judged dQ elements");
    v.t[FC_T_DQ].checked = 1;
    v.t[FC_T_DQ].elements = 10;
    CHECK(fc_sweep_met(&e, &v, why, sizeof why), "JUDGED with judged dQ elements");
    fc_verdict_overflow(&v, "dq: 16 elements NaN/Inf where the profile's own intermediates may overflow");
    CHECK(fc_sweep_met(&e, &v, why, sizeof why), "a finding: overflow-sensitive elements beside judged dQ elements");
    e.expect = FC_SWEEP_EXPECT_JUDGED_ALL;
    CHECK(!fc_sweep_met(&e, &v, why, sizeof why), "JUDGED_ALL needs judged dK and dV elements too");
    v.t[FC_T_DK].checked = v.t[FC_T_DV].checked = 1;
    v.t[FC_T_DK].elements = v.t[FC_T_DV].elements = 4;
    CHECK(fc_sweep_met(&e, &v, why, sizeof why), "JUDGED_ALL with judged dQ, dK, dV elements");
    e.expect = FC_SWEEP_EXPECT_PASS;
    CHECK(!fc_sweep_met(&e, &v, why, sizeof why), "overflow-sensitive is not a pass");
    e.expect = FC_SWEEP_EXPECT_JUDGED;
    fc_verdict_fail(&v, "bound", "dq: 1 of 128 elements outside their bound");
    CHECK(!fc_sweep_met(&e, &v, why, sizeof why) && strstr(why, "bound"), "a finding that fails: %s", why);
}

/* the in-process driver on the CPU backend: the quick gqa category passes; a GQA mutant fails it */
static void test_run(void) {
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.quick = 1;
    fc_sweep_entry *e;
    int64_t n = fc_sweep_build(&o, &e);
    fc_sweep_tally t[FC_SWEEP_CAT_COUNT];
    fa_cpu_set_mutant(0);
    int64_t bad = fc_sweep_run(fa_backend_cpu(), e, n, FC_SWEEP_GQA, stdout, t);
    CHECK(bad == 0 && t[FC_SWEEP_GQA].ran == 3 && t[FC_SWEEP_SHAPES].ran == 0, "correct CPU backend: %lld failed", (long long)bad);
    int id = fa_cpu_mutant_id("gqa_head_modulo");
    CHECK(id > 0, "mutant gqa_head_modulo exists");
    fa_cpu_set_mutant(id);
    bad = fc_sweep_run(fa_backend_cpu(), e, n, FC_SWEEP_GQA, stdout, t);
    fa_cpu_set_mutant(0);
    CHECK(bad > 0 && t[FC_SWEEP_GQA].failed == bad, "mutant gqa_head_modulo fails the gqa category (%lld)", (long long)bad);
    free(e);
}

/* the device grid's cases are well formed and a correct backend meets every expectation: the
   sanitize subset of the cuda set (short grid cases, leak geometries, declined layouts, findings)
   on the CPU backend */
static void test_cuda_on_cpu(void) {
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.sets = FC_SWEEP_SET_CUDA;
    o.sanitize = 1;
    fc_sweep_entry *e;
    int64_t n = fc_sweep_build(&o, &e);
    fc_sweep_tally t[FC_SWEEP_CAT_COUNT];
    fa_cpu_set_mutant(0);
    int64_t bad = fc_sweep_run(fa_backend_cpu(), e, n, -1, stdout, t);
    CHECK(bad == 0 && t[FC_SWEEP_CUDA_GRID].ran > 10 && t[FC_SWEEP_CUDA_LEAK].ran > 3 && t[FC_SWEEP_CUDA_FINDINGS].ran == 2 &&
              t[FC_SWEEP_CUDA_DECLINED].ran == 4,
          "cuda sanitize subset on the CPU backend: %lld of %lld failed", (long long)bad, (long long)n);
    free(e);
}

/* ------------------------------------------------------------------------- */
/* test_coverage: broken backends built on the CPU backend                   */

/* backward that, like a tile loop multiplying P = 0 by dO (and dS = 0 by Q) instead of skipping
   hidden pairs, lets a NaN/Inf of dO or Q reach every dV / dK column of its head group: the old
   cc_tests' dead-row NaN dO / +Inf Q case. (Visible rows reach some columns anyway; a row that
   sees no key reaches none.) */
static fa_status bwd_zero_times(const fa_bwd_args *a, fa_error *err) {
    fa_status st = fa_backend_cpu()->backward(a, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    const int64_t G = p->heads_q / p->heads_kv;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t i = 0; i < p->seqlen_q; i++)
            for (int64_t h = 0; h < p->heads_q; h++) {
                int bad_do = 0, bad_q = 0;
                for (int64_t d = 0; d < p->head_dim_v; d++) bad_do |= !isfinite(get16(a->dout.ptr, off4(a->dout.stride, b, i, h, d), p->dtype));
                for (int64_t d = 0; d < p->head_dim_qk; d++) bad_q |= !isfinite(get16(a->q.ptr, off4(a->q.stride, b, i, h, d), p->dtype));
                for (int64_t j = 0; j < p->seqlen_k; j++) {
                    if (bad_do) set16(a->dv.ptr, off4(a->dv.stride, b, j, h / G, 0), p->dtype, NAN);
                    if (bad_q) set16(a->dk.ptr, off4(a->dk.stride, b, j, h / G, 0), p->dtype, NAN);
                }
            }
    return FA_OK;
}

/* forward that reads the additive mask as 0 / -inf only (finite entries taken as 0) */
static fa_status fwd_mask_finite_ignored(const fa_fwd_args *a, fa_error *err) {
    if (!a->mask.ptr) return fa_backend_cpu()->forward(a, err);
    const fa_problem *p = &a->p;
    const int64_t dims[4] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k};
    int64_t span = 1;
    for (int k = 0; k < 4; k++) span += (dims[k] - 1) * a->mask.stride[k];
    float *m = malloc(sizeof(float) * (size_t)span);
    for (int64_t e = 0; e < span; e++) m[e] = a->mask.ptr[e] == -INFINITY ? -INFINITY : 0.0f;
    fa_fwd_args b = *a;
    b.mask.ptr = m;
    fa_status st = fa_backend_cpu()->forward(&b, err);
    free(m);
    return st;
}

/* a device backend (declares FA_MEM_CUDA) that validates and rejects host pointers, and one that
   computes on them (the CPU forward) */
static fa_status fwd_rejects_host(const fa_fwd_args *a, fa_error *err) {
    fa_status st = fa_validate_fwd(a, &fa_backend_cpu()->limits, err);
    if (st != FA_OK) return st;
    return fa_fail(err, FA_ERR_INVALID, "q.ptr", "q.ptr is not device memory (test backend)");
}

static fa_status bwd_rejects_host(const fa_bwd_args *a, fa_error *err) {
    fa_status st = fa_validate_bwd(a, &fa_backend_cpu()->limits, err);
    if (st != FA_OK) return st;
    return fa_fail(err, FA_ERR_INVALID, "dq.ptr", "dq.ptr is not device memory (test backend)");
}

static fa_backend cpu_with(fa_status (*fwd)(const fa_fwd_args *, fa_error *),
                           fa_status (*bwd)(const fa_bwd_args *, fa_error *)) {
    fa_backend be = *fa_backend_cpu();
    if (fwd) be.forward = fwd;
    if (bwd) be.backward = bwd;
    return be;
}

/* a failure reason of v whose text has both a and b */
static int has_text(const fc_verdict *v, const char *a, const char *b) {
    for (int i = 0; i < v->n_reasons; i++)
        if (strcmp(v->reason[i].check, "skip") && strstr(v->reason[i].text, a) && strstr(v->reason[i].text, b)) return 1;
    return 0;
}

/* one entry of the sweep judged on be; 1 when it met its expectation */
static int entry_ok(const fa_backend *be, const fc_sweep_entry *e, fc_verdict *v, const char *what) {
    char why[400];
    fc_sweep_check(be, e, v);
    int ok = fc_sweep_met(e, v, why, sizeof why);
    printf("  %s %s on %s: %s %s\n", ok ? "met " : "FAIL", e->label, what, fc_outcome_name(v->outcome), why);
    return ok;
}

typedef struct {
    int64_t calls, host_ptr, host_ptr_failed, host_ptr_bwd, host_ptr_bwd_failed;
    char failure[32], bwd_failure[32];
} misuse_tally;
static void misuse_count(void *user, const fz_misuse_result *res) {
    misuse_tally *m = user;
    m->calls++;
    if (!strcmp(res->kind_name, "host_ptr_bwd")) {
        m->host_ptr_bwd++;
        if (res->failure[0]) {
            m->host_ptr_bwd_failed++;
            snprintf(m->bwd_failure, sizeof m->bwd_failure, "%s", res->failure);
        }
        return;
    }
    if (strcmp(res->kind_name, "host_ptr")) return;
    m->host_ptr++;
    if (res->failure[0]) {
        m->host_ptr_failed++;
        snprintf(m->failure, sizeof m->failure, "%s", res->failure);
    }
}

static void test_coverage(void) {
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.sets = FC_SWEEP_SET_CUDA;
    fc_sweep_entry *e;
    int64_t n = fc_sweep_build(&o, &e);
    const int nonfinite = (int)(fc_prop_by_name("nonfinite") - fc_prop_table);
    const int leak = (int)(fc_prop_by_name("leak") - fc_prop_table);
    int64_t nf = 0, det = 0, mixed = 0, mixed_vals = 0, dead_entry = -1, leak_entry = -1, nf_modes[2] = {0, 0};
    int64_t findings_modes[2] = {0, 0}, keypad_tiles = 0, rows_mixed = 0;
    fc_verdict *fv = malloc(sizeof *fv);
    for (int64_t i = 0; i < n; i++) {
        if (e[i].category == FC_SWEEP_CUDA_FINDINGS) {
            findings_modes[e[i].c.deterministic != 0]++;
            CHECK((e[i].expect == FC_SWEEP_EXPECT_JUDGED_ALL) == (strstr(e[i].label, "a63605906157a3f1") != NULL),
                  "%s: dK/dV judged required exactly for a63605906157a3f1", e[i].label);
            if (strstr(e[i].label, " mode)"))
                CHECK(entry_ok(fa_backend_cpu(), &e[i], fv, "cpu"), "%s meets its expectation on the CPU backend", e[i].label);
        }
        if (e[i].prop == nonfinite) {
            nf++;
            nf_modes[e[i].c.deterministic != 0]++;
            CHECK(e[i].category == FC_SWEEP_CUDA_LEAK && (e[i].c.backward || e[i].c.p.seqlen_q > 1000),
                  "nonfinite entry %s: backward on (forward only at S > 1000)", e[i].label);
            if (dead_entry < 0 && e[i].c.p.window_left == 50 && e[i].c.p.seqlen_q == 150) dead_entry = i;
        }
        if (e[i].prop == leak && leak_entry < 0 && e[i].c.p.seqlen_q == 200 && e[i].c.p.dtype == FA_F16) leak_entry = i;
        det += e[i].category == FC_SWEEP_CUDA_DETERMINISM;
        if (e[i].category == FC_SWEEP_CUDA_GRID && e[i].c.mask.kind == FC_MASK_KEY_PADDING && e[i].c.p.batch >= 2 &&
            e[i].c.p.seqlen_k >= 256) {
            /* key padding hides whole trailing key tiles (64 keys) of batch 1, fewer keys of batch 0 */
            int64_t tail = 0, tail0 = 0, Sk = e[i].c.p.seqlen_k;
            for (int64_t j = Sk - 64; j < Sk; j++) {
                int64_t i1[4] = {1, 0, 0, j}, i0[4] = {0, 0, 0, j};
                tail += fc_case_value(&e[i].c, FC_T_MASK, i1) == -INFINITY;
                tail0 += fc_case_value(&e[i].c, FC_T_MASK, i0) == -INFINITY;
            }
            int64_t i1[4] = {1, 0, 0, 0};
            keypad_tiles += tail == 64 && fc_case_value(&e[i].c, FC_T_MASK, i1) == 0;
        }
        if (e[i].category == FC_SWEEP_CUDA_GRID && e[i].c.mask.kind == FC_MASK_RANDOM_MIXED && e[i].c.mask.width == 5 &&
            e[i].c.p.seqlen_q >= 8) {
            /* the old MK_ROWS: rows 2, 7, ... entirely -inf, finite values and -inf elsewhere */
            int full = 1, fin = 0;
            for (int64_t j = 0; j < e[i].c.p.seqlen_k; j++) {
                int64_t r2[4] = {0, 0, 2, j}, r3[4] = {0, 0, 3, j};
                full &= fc_case_value(&e[i].c, FC_T_MASK, r2) == -INFINITY;
                double m = fc_case_value(&e[i].c, FC_T_MASK, r3);
                fin += isfinite(m) && m != 0;
            }
            rows_mixed += full && fin > 0;
        }
        if (e[i].category == FC_SWEEP_CUDA_GRID && e[i].c.mask.kind == FC_MASK_RANDOM_MIXED) {
            mixed++;
            /* finite non-zero values and -inf entries in the same mask */
            int ninf = 0, nfin = 0;
            for (int64_t j = 0; j < e[i].c.p.seqlen_k && j < 64; j++) {
                int64_t idx[4] = {0, 0, e[i].c.p.seqlen_q / 2, j};
                double m = fc_case_value(&e[i].c, FC_T_MASK, idx);
                ninf += m == -INFINITY;
                nfin += isfinite(m) && m != 0;
            }
            mixed_vals += ninf > 0 && nfin > 0;
        }
    }
    CHECK(nf == 19, "nonfinite entries: %lld (10 geometries of the old backward test and Sq > Sk, 9 leak geometries)",
          (long long)nf);
    free(fv);
    CHECK(nf_modes[0] >= 5 && nf_modes[1] >= 5, "nonfinite in both backward modes: atomic %lld, deterministic %lld",
          (long long)nf_modes[0], (long long)nf_modes[1]);
    CHECK(findings_modes[0] == 2 && findings_modes[1] == 2, "findings in both backward modes: %lld, %lld",
          (long long)findings_modes[0], (long long)findings_modes[1]);
    CHECK(rows_mixed >= 5, "fully masked rows in a finite-and--inf mask in %lld grid entries", (long long)rows_mixed);
    CHECK(keypad_tiles >= 3, "key padding hiding a whole trailing 64-key tile in %lld grid entries", (long long)keypad_tiles);
    CHECK(det == 6, "determinism: %lld entries of 5 runs (30 runs, the old cc_test's repetitions)", (long long)det);
    CHECK(mixed >= 20 && mixed_vals >= mixed / 2, "grid masks with finite values mixed with -inf: %lld (%lld with both "
          "in a 64-key row)", (long long)mixed, (long long)mixed_vals);
    free(e);
    o.quick = 1;
    n = fc_sweep_build(&o, &e);
    nf = det = 0;
    for (int64_t i = 0; i < n; i++) {
        nf += e[i].prop == nonfinite;
        det += e[i].category == FC_SWEEP_CUDA_DETERMINISM;
    }
    CHECK(nf == 2 && det == 1, "quick: %lld nonfinite entries, %lld determinism (want 2, 1)", (long long)nf, (long long)det);
    free(e);

    /* the nonfinite entries on the CPU backend (the sanitize subset: diagonal and mask entries,
       and the quick subset's fully masked rows): met; each broken backend fails them */
    o.quick = 0;
    o.sanitize = 1;
    n = fc_sweep_build(&o, &e);
    fc_sweep_entry *fe = NULL;
    int64_t nfe = 0;
    for (int64_t i = 0; i < n; i++)
        if (e[i].prop == nonfinite) nfe++;
    CHECK(nfe == 2, "sanitize: %lld nonfinite entries (want 2)", (long long)nfe);
    fc_verdict *v = malloc(sizeof *v);
    fa_cpu_set_mutant(0);
    const fa_backend *cpu = fa_backend_cpu();
    fa_backend zero = cpu_with(fwd_nan_to_zero, NULL), leaky = cpu_with(NULL, bwd_zero_times);
    fa_backend finite_ignored = cpu_with(fwd_mask_finite_ignored, NULL);
    for (int64_t i = 0; i < n; i++) {
        if (e[i].prop != nonfinite) continue;
        fe = &e[i];
        CHECK(entry_ok(cpu, fe, v, "cpu"), "nonfinite entry %s on the CPU backend", fe->label);
        /* (a) rows that see the value: clamping their NaN/Inf to 0 fails nonfinite ("nan") */
        CHECK(!entry_ok(&zero, fe, v, "nan_to_zero") && fc_verdict_has(v, "property:nonfinite"),
              "a forward writing 0 where the exact O is NaN/Inf fails %s", fe->label);
        int id = fa_cpu_mutant_id("mask_by_multiplication");
        fa_cpu_set_mutant(id);
        int met = entry_ok(cpu, fe, v, "mask_by_multiplication");
        fa_cpu_set_mutant(0);
        if (fe->c.mask.kind != FC_MASK_NONE)
            CHECK(!met, "mutant mask_by_multiplication (NaN/Inf of hidden keys leak) fails %s", fe->label);
    }
    /* the leak property lets the clamping forward pass: it does not judge the rows that see */
    {
        fc_sweep_opts lo;
        fc_sweep_opts_default(&lo);
        lo.sets = FC_SWEEP_SET_CUDA;
        fc_sweep_entry *le;
        int64_t ln = fc_sweep_build(&lo, &le);
        for (int64_t i = 0; i < ln; i++)
            if (le[i].prop == leak && le[i].c.p.seqlen_q == 200 && le[i].c.p.dtype == FA_F16) {
                CHECK(entry_ok(&zero, &le[i], v, "nan_to_zero"), "the leak property does not see the clamped rows");
                break;
            }
        /* (b) the fully masked rows geometry: a NaN dO / +Inf Q of a row that sees no key must not
           reach dK/dV; the correct backend meets it, the leaky backward fails it */
        for (int64_t i = 0; i < ln; i++)
            if (le[i].prop == nonfinite && le[i].c.p.seqlen_q == 150 && le[i].c.p.window_left == 50 &&
                le[i].c.p.dtype == FA_BF16) {
                CHECK(entry_ok(cpu, &le[i], v, "cpu"), "dead-row nonfinite entry on the CPU backend");
                CHECK(!entry_ok(&leaky, &le[i], v, "zero_times_dO") && has_text(v, "dO NaN at row", "no visible key") &&
                          has_text(v, "Q +Inf at row", "no visible key"),
                      "a backward letting 0 * NaN dO (0 * Inf Q) of a row with no visible key into dV (dK) fails %s",
                      le[i].label);
                break;
            }
        /* key padding differs across the batch: a backend reading the mask's [0, 0] slice for
           every batch element (mutant mask_bh_stride_ignored) fails a small keypad grid entry */
        for (int64_t i = 0; i < ln; i++)
            if (le[i].category == FC_SWEEP_CUDA_GRID && le[i].c.mask.kind == FC_MASK_KEY_PADDING &&
                le[i].c.p.batch >= 2 && le[i].c.p.seqlen_q * le[i].c.p.seqlen_k <= 40000) {
                fc_sweep_entry x = le[i];
                x.c.backward = 0;
                CHECK(entry_ok(cpu, &x, v, "cpu"), "keypad grid entry on the CPU backend");
                fa_cpu_set_mutant(fa_cpu_mutant_id("mask_bh_stride_ignored"));
                int met = entry_ok(cpu, &x, v, "mask_bh_stride_ignored");
                fa_cpu_set_mutant(0);
                CHECK(!met, "mutant mask_bh_stride_ignored fails %s", x.label);
                break;
            }
        /* (e) a grid entry with a finite-and--inf mask: a forward that ignores finite mask values
           fails it; the same case with a 0 / -inf mask cannot show the fault */
        for (int64_t i = 0; i < ln; i++)
            if (le[i].category == FC_SWEEP_CUDA_GRID && le[i].c.mask.kind == FC_MASK_RANDOM_MIXED &&
                le[i].c.p.seqlen_q * le[i].c.p.seqlen_k <= 20000 && le[i].c.p.batch * le[i].c.p.heads_q <= 8) {
                fc_sweep_entry x = le[i];
                x.c.backward = 0;
                CHECK(entry_ok(cpu, &x, v, "cpu"), "mixed-mask grid entry on the CPU backend");
                CHECK(!entry_ok(&finite_ignored, &x, v, "mask_finite_ignored"), "finite mask values ignored fails %s",
                      x.label);
                x.c.mask.kind = FC_MASK_RANDOM_NEGINF;
                CHECK(entry_ok(&finite_ignored, &x, v, "mask_finite_ignored"), "a 0 / -inf mask cannot show it");
                break;
            }
        free(le);
    }
    free(v);
    free(e);

    /* the base set's nonfinite entries: both judged (the first case gets a top-left causal mask:
       keys hidden from some rows; without one it could not show the relation, a sweep defect) */
    {
        fc_sweep_opts bo;
        fc_sweep_opts_default(&bo);
        bo.lim = &cpu->limits;
        fc_sweep_entry *be;
        int64_t bn = fc_sweep_build(&bo, &be), seen = 0;
        fc_verdict *bv = malloc(sizeof *bv);
        for (int64_t i = 0; i < bn; i++) {
            if (be[i].prop != nonfinite) continue;
            fc_sweep_check(cpu, &be[i], bv);
            int64_t judged = bv->t[FC_T_O].elements + bv->t[FC_T_DQ].elements;
            printf("  base %s property nonfinite: %s, %lld O/dQ elements judged\n", be[i].label,
                   fc_outcome_name(bv->outcome), (long long)judged);
            CHECK(bv->outcome == FC_PASS && judged > 0,
                  "base nonfinite entry %lld: %s", (long long)seen, fc_outcome_name(bv->outcome));
            seen++;
        }
        CHECK(seen == 2, "base set: %lld nonfinite entries (want 2)", (long long)seen);
        free(bv);
        free(be);
    }

    /* (c) host pointers: only a backend that declares device memory gets the call; it must reject it */
    misuse_tally m;
    memset(&m, 0, sizeof m);
    fc_sweep_misuse(cpu, misuse_count, &m);
    CHECK(m.calls > 100 && m.host_ptr == 0, "host backend: %lld misuse calls, %lld host_ptr (want 0)", (long long)m.calls,
          (long long)m.host_ptr);
    fa_backend dev_ok = cpu_with(fwd_rejects_host, NULL), dev_bad = *cpu;
    dev_ok.memspace = FA_MEM_CUDA;
    dev_ok.backward = NULL;
    dev_bad.memspace = FA_MEM_CUDA;
    dev_bad.backward = NULL;
    memset(&m, 0, sizeof m);
    fc_sweep_misuse(&dev_ok, misuse_count, &m);
    CHECK(m.host_ptr == 1 && m.host_ptr_failed == 0, "device backend rejecting host memory: host_ptr %lld failed %lld (%s)",
          (long long)m.host_ptr, (long long)m.host_ptr_failed, m.failure);
    memset(&m, 0, sizeof m);
    fc_sweep_misuse(&dev_bad, misuse_count, &m);
    CHECK(m.host_ptr == 1 && m.host_ptr_failed == 1 && !strcmp(m.failure, "accepted_invalid"),
          "device backend computing on host memory: host_ptr %lld failed %lld (%s)", (long long)m.host_ptr,
          (long long)m.host_ptr_failed, m.failure);
    CHECK(m.host_ptr_bwd == 0, "a device backend without a backward got %lld host_ptr_bwd calls", (long long)m.host_ptr_bwd);
    /* the backward's host pointers (a device backend with a backward) */
    fa_backend dev_ok2 = cpu_with(fwd_rejects_host, bwd_rejects_host), dev_bad2 = *cpu;
    dev_ok2.memspace = FA_MEM_CUDA;
    dev_bad2.memspace = FA_MEM_CUDA;
    memset(&m, 0, sizeof m);
    fc_sweep_misuse(&dev_ok2, misuse_count, &m);
    CHECK(m.host_ptr_bwd == 1 && m.host_ptr_bwd_failed == 0, "device backward rejecting host memory: host_ptr_bwd %lld failed %lld (%s)",
          (long long)m.host_ptr_bwd, (long long)m.host_ptr_bwd_failed, m.bwd_failure);
    memset(&m, 0, sizeof m);
    fc_sweep_misuse(&dev_bad2, misuse_count, &m);
    CHECK(m.host_ptr_bwd == 1 && m.host_ptr_bwd_failed == 1 && !strcmp(m.bwd_failure, "accepted_invalid"),
          "device backward computing on host memory: host_ptr_bwd %lld failed %lld (%s)", (long long)m.host_ptr_bwd,
          (long long)m.host_ptr_bwd_failed, m.bwd_failure);
    (void)dead_entry;
    (void)leak_entry;
}

int main(void) {
    test_coverage();
    test_base();
    test_cuda();
    test_production();
    test_met();
    test_run();
    test_cuda_on_cpu();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
