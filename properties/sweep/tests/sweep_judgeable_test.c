#define _POSIX_C_SOURCE 200809L
/* sweep_judgeable_test.c: every entry the sweep builds for a property is judgeable by construction
 * (properties/sweep/sweep.h, fc_sweep_miss), no GPU needed.
 *   - test_device_properties: the full (not quick, big on) CUDA and production sets, with and
 *     without the backward: every nonfinite entry passes the property's own judging precondition
 *     (fc_prop_nonfinite_plan: placements that can show the relation), and every property entry of
 *     the device sets (leak, nonfinite, determinism) run on the CPU backend, which models the same
 *     calls, is judged: PASS, never SKIP;
 *   - test_base_properties: the base set's property entries (every property on its two cases) are
 *     judged on the CPU backend, with and without the backward;
 *   - regressions nonfinite#4105 (key padding: no key is seen by some rows of a batch and hidden
 *     from others; was SKIP "nothing can leak") and nonfinite#4009 (Sq 300 > Sk 40 bottom-right, bf16:
 *     Q = +Inf at row 260, which sees only key 0 with K < 0 in the placed component, gave a -Inf
 *     score and no non-finite reference; was SKIP "the placement shows nothing"): judged now, and
 *     each catches a broken backend it let through before (4105: a mask read with batch stride 0,
 *     the cross-batch leak; 4009: a forward that clamps NaN/Inf results to 0);
 *   - test_paged_backward_declined: a paged case on a backend that declines the paged backward (the
 *     contract lets it) is judged on its forward and met, and still fails with a broken paged forward;
 *   - test_miss: a device entry the harness cannot judge is a harness defect (fc_sweep_miss, and
 *     fc_sweep_run's DEFECT line and tally), not a failure of the backend and not a pass; a BASE
 *     skip stays a skip; a device UNSUPPORTED stays the backend's failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_mutants.h"
#include "properties/check/tests/check_test.h"
#include "properties/properties.h"
#include "properties/sweep/sweep.h"
#include "properties/sweep/tests/sweep_fixtures.h"


/* a small dense case (B1 Sq17 Sk33 H1 D16) */
static fc_case base_case_small(void) {
    fc_case c;
    fc_case_default(&c);
    c.p.batch = 1; c.p.seqlen_q = 17; c.p.seqlen_k = 33; c.p.heads_q = c.p.heads_kv = 1;
    c.p.head_dim_qk = c.p.head_dim_v = 16;
    return c;
}

static const char *prop_name(const fc_sweep_entry *e) { return e->prop >= 0 ? fc_prop_table[e->prop].name : ""; }

/* e judged on be: 1 when it met its expectation; prints the verdict's first reason */
static int judged(const fa_backend *be, const fc_sweep_entry *e, fc_verdict *v, const char *what) {
    char why[400];
    fc_sweep_check(be, e, v);
    int ok = fc_sweep_met(e, v, why, sizeof why);
    printf("  %s %s property %s on %s: %s %s\n", ok ? "met " : "MISS", e->label, prop_name(e), what,
           fc_outcome_name(v->outcome), ok ? "" : why);
    return ok;
}

static void test_device_properties(void) {
    const int nonfinite = (int)(fc_prop_by_name("nonfinite") - fc_prop_table);
    const int determinism = (int)(fc_prop_by_name("determinism") - fc_prop_table);
    fc_verdict *v = malloc(sizeof *v);
    fa_cpu_set_mutant(0);
    for (int bwd = 1; bwd >= 0; bwd--) {
        fc_sweep_opts o;
        fc_sweep_opts_default(&o);
        o.sets = FC_SWEEP_SET_CUDA | FC_SWEEP_SET_PRODUCTION;
        o.has_bwd = bwd;
        fc_sweep_entry *e;
        int64_t n = fc_sweep_build(&o, &e), nprop = 0, nnf = 0, ndet = 0;
        CHECK(n > 200, "device sets: %lld entries", (long long)n);
        for (int64_t i = 0; i < n; i++) {
            if (e[i].prop < 0) continue;
            nprop++;
            if (e[i].prop == nonfinite) {
                char why[300];
                int np = fc_prop_nonfinite_plan(&e[i].c, e[i].c.backward, why, sizeof why);
                /* K NaN, K -Inf, V row, Q +Inf at a row that sees a key (+ dO NaN with a backward) */
                CHECK(np >= 4 + e[i].c.backward, "%s: nonfinite plans %d placements (%s)", e[i].label, np, why);
                nnf++;
            }
            /* determinism entries: one of the six on the CPU (B48: the others differ only in seed) */
            if (e[i].prop == determinism && ndet++ > 0) continue;
            CHECK(judged(fa_backend_cpu(), &e[i], v, "cpu") && v->outcome == FC_PASS, "%s property %s judged on the "
                  "CPU backend (backward %s): %s", e[i].label, prop_name(&e[i]), bwd ? "on" : "off",
                  fc_outcome_name(v->outcome));
        }
        CHECK(nnf == 19 && nprop >= 19 + 20 + (bwd ? 6 : 0), "device property entries: %lld, nonfinite %lld (backward %d)",
              (long long)nprop, (long long)nnf, bwd);
        free(e);
    }
    free(v);
}

static void test_base_properties(void) {
    fc_verdict *v = malloc(sizeof *v);
    fa_cpu_set_mutant(0);
    for (int bwd = 1; bwd >= 0; bwd--) {
        fc_sweep_opts o;
        fc_sweep_opts_default(&o);
        o.has_bwd = bwd;
        o.lim = &fa_backend_cpu()->limits;
        fc_sweep_entry *e;
        int64_t n = fc_sweep_build(&o, &e), nprop = 0;
        for (int64_t i = 0; i < n; i++) {
            if (e[i].category != FC_SWEEP_PROPERTIES) continue;
            nprop++;
            CHECK(judged(fa_backend_cpu(), &e[i], v, "cpu") && v->outcome == FC_PASS,
                  "base %s property %s judged on the CPU backend (backward %s): %s", e[i].label, prop_name(&e[i]),
                  bwd ? "on" : "off", fc_outcome_name(v->outcome));
        }
        /* every property on two cases; gradient_fd only with a backward */
        CHECK(nprop == 2 * fc_prop_count() - (bwd ? 0 : 2), "base property entries: %lld (backward %d)", (long long)nprop,
              bwd);
        free(e);
    }
    free(v);
}

/* the full CUDA set's entry whose label starts with `label` */
static fc_sweep_entry *find_entry(fc_sweep_entry **all, const char *label, int bwd) {
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.sets = FC_SWEEP_SET_CUDA;
    o.has_bwd = bwd;
    int64_t n = fc_sweep_build(&o, all);
    for (int64_t i = 0; i < n; i++)
        if (!strncmp((*all)[i].label, label, strlen(label))) return &(*all)[i];
    return NULL;
}

/* a failure reason of v whose text has both a and b */
static int has_text(const fc_verdict *v, const char *a, const char *b) {
    for (int i = 0; i < v->n_reasons; i++)
        if (strcmp(v->reason[i].check, "skip") && strstr(v->reason[i].text, a) && strstr(v->reason[i].text, b)) return 1;
    return 0;
}

/* nonfinite#4105: key padding (B = 2: batch 0 pads its last 38 keys, batch 1 its last 76) */
static void test_regression_nonfinite_4105_keypad(void) {
    fc_verdict *v = malloc(sizeof *v);
    for (int bwd = 1; bwd >= 0; bwd--) {
        fc_sweep_entry *all;
        fc_sweep_entry *e = find_entry(&all, "nonfinite#4105 ", bwd);
        CHECK(e && e->c.mask.kind == FC_MASK_KEY_PADDING && e->c.p.batch >= 2, "nonfinite#4105: key padding at B >= 2");
        if (!e) { free(all); continue; }
        char why[300];
        CHECK(fc_prop_nonfinite_plan(&e->c, bwd, why, sizeof why) >= 4 + bwd, "nonfinite#4105 plan: %s", why);
        fa_cpu_set_mutant(0);
        CHECK(judged(fa_backend_cpu(), e, v, "cpu") && v->outcome == FC_PASS, "nonfinite#4105 judged (was SKIP: nothing "
              "can leak)");
        /* the K/V placement sits in batch 1 at a key batch 0's rows see: a backend that reads
           batch 0's mask for every batch element lets it into batch 1's rows */
        int id = fa_cpu_mutant_id("mask_bh_stride_ignored");
        CHECK(id > 0, "mutant mask_bh_stride_ignored exists");
        fa_cpu_set_mutant(id);
        int met = judged(fa_backend_cpu(), e, v, "mask_bh_stride_ignored");
        fa_cpu_set_mutant(0);
        CHECK(!met && has_text(v, "of batch 1 (hidden from every row of its batch, seen by another batch's rows)", "[nan]"),
              "nonfinite#4105 catches a mask read with batch stride 0 (cross-batch leak): %s", fc_outcome_name(v->outcome));
        free(all);
    }
    free(v);
}

/* nonfinite#4009: Sq 300 > Sk 40 bottom-right, bf16: the probe row 260 sees key 0 only */
static void test_regression_nonfinite_4009_one_key_row(void) {
    fc_verdict *v = malloc(sizeof *v);
    for (int bwd = 1; bwd >= 0; bwd--) {
        fc_sweep_entry *all;
        fc_sweep_entry *e = find_entry(&all, "nonfinite#4009 ", bwd);
        CHECK(e && e->c.p.seqlen_q == 300 && e->c.p.seqlen_k == 40 && e->c.p.causal == FA_CAUSAL_BOTTOM_RIGHT,
              "nonfinite#4009: Sq 300, Sk 40, bottom-right");
        if (!e) { free(all); continue; }
        /* the premise of the old SKIP: K[0, 0, 0, 4] < 0, so Q = +Inf in component 4 of row 260 gave -Inf */
        int64_t k4[4] = {0, 0, 0, 4};
        CHECK(fc_case_value(&e->c, FC_T_K, k4) < 0, "nonfinite#4009: K[0,0,0,4] = %g (the old placement's score is -Inf)",
              fc_case_value(&e->c, FC_T_K, k4));
        char why[300];
        CHECK(fc_prop_nonfinite_plan(&e->c, bwd, why, sizeof why) >= 4 + bwd, "nonfinite#4009 plan: %s", why);
        fa_cpu_set_mutant(0);
        CHECK(judged(fa_backend_cpu(), e, v, "cpu") && v->outcome == FC_PASS, "nonfinite#4009 judged (was SKIP: the "
              "placement shows nothing)");
        /* the rows the +Inf reaches are judged now: a forward that writes 0 for NaN/Inf fails */
        fa_backend zero = *fa_backend_cpu();
        zero.forward = fwd_nan_to_zero;
        CHECK(!judged(&zero, e, v, "nan_to_zero") && has_text(v, "Q +Inf at row 260", "[nan]"),
              "nonfinite#4009: the Q +Inf placement at row 260 catches a forward clamping NaN/Inf to 0: %s",
              fc_outcome_name(v->outcome));
        free(all);
    }
    free(v);
}

static void test_miss(void) {
    fc_sweep_entry e;
    memset(&e, 0, sizeof e);
    fc_case_default(&e.c);
    fc_verdict v;
    fc_verdict_init(&v);
    fc_verdict_skip(&v, "nonfinite: no key is hidden from one row and seen by another; nothing can leak");
    e.category = FC_SWEEP_CUDA_LEAK;
    CHECK(!fc_sweep_met(&e, &v, NULL, 0) && fc_sweep_miss(&e, &v) == FC_SWEEP_MISS_DEFECT, "device SKIP: a harness defect");
    e.category = FC_SWEEP_PRODUCTION;
    CHECK(fc_sweep_miss(&e, &v) == FC_SWEEP_MISS_DEFECT, "production SKIP: a harness defect");
    e.category = FC_SWEEP_PROPERTIES;
    CHECK(fc_sweep_miss(&e, &v) == FC_SWEEP_MISS_SKIP, "base SKIP: skipped");
    e.category = FC_SWEEP_CUDA_GRID;
    fc_verdict_init(&v);
    fc_verdict_decline(&v, FC_PHASE_FORWARD, "forward: backend says unsupported (q.ptr): misaligned");
    CHECK(fc_sweep_miss(&e, &v) == FC_SWEEP_MISS_FAIL, "a device entry declined where no decline is allowed: the backend's");
    fc_verdict_init(&v);
    fc_verdict_overflow(&v, "o: 3 elements NaN/Inf where the profile's own intermediates may overflow");
    CHECK(fc_sweep_miss(&e, &v) == FC_SWEEP_MISS_DEFECT, "a device entry with no finite bound: a harness defect");
    fc_verdict_init(&v);
    fc_verdict_fail(&v, "bound", "o: 1 of 10 elements outside their bound");
    CHECK(fc_sweep_miss(&e, &v) == FC_SWEEP_MISS_FAIL, "FAIL: the backend's");

    /* fc_sweep_run: an unjudgeable device entry (nonfinite on a case with no mask: every row sees
       every key) is a DEFECT: counted apart from failures, never a pass */
    fc_sweep_entry d;
    memset(&d, 0, sizeof d);
    fc_case_default(&d.c);
    d.c.p.batch = 1; d.c.p.seqlen_q = 17; d.c.p.seqlen_k = 33; d.c.p.heads_q = d.c.p.heads_kv = 1;
    d.c.p.head_dim_qk = d.c.p.head_dim_v = 16;
    d.c.backward = 1;
    d.category = FC_SWEEP_CUDA_LEAK;
    d.prop = (int)(fc_prop_by_name("nonfinite") - fc_prop_table);
    snprintf(d.label, sizeof d.label, "unjudgeable nonfinite B1 Sq17 Sk33 (no mask)");
    char why[300];
    CHECK(fc_prop_nonfinite_plan(&d.c, 1, why, sizeof why) == 0 && strstr(why, "nothing can leak"),
          "the precondition names why: %s", why);
    char buf[8192] = "";
    FILE *log = fmemopen(buf, sizeof buf - 1, "w");
    fc_sweep_tally t[FC_SWEEP_CAT_COUNT];
    fa_cpu_set_mutant(0);
    int64_t r = fc_sweep_run(fa_backend_cpu(), &d, 1, -1, log, t);
    fclose(log);
    printf("%s", buf);
    CHECK(r == 1 && t[FC_SWEEP_CUDA_LEAK].defects == 1 && t[FC_SWEEP_CUDA_LEAK].failed == 0 &&
              t[FC_SWEEP_CUDA_LEAK].skipped == 0,
          "fc_sweep_run: %lld not met, defects %lld, failed %lld", (long long)r, (long long)t[FC_SWEEP_CUDA_LEAK].defects,
          (long long)t[FC_SWEEP_CUDA_LEAK].failed);
    CHECK(strstr(buf, "DEFECT unjudgeable") && strstr(buf, "nothing can leak") && !strstr(buf, "FAIL ") &&
              !strstr(buf, "ok   "),
          "the log names the defect with its reason, neither a failure nor a pass");
}

/* a backend that claims paged K/V (the forward) and declines the paged backward, as the contract lets
   it (fa_limits.supports_paged): UNSUPPORTED before any write */
static fa_status bwd_no_paged(const fa_bwd_args *a, fa_error *err) {
    if (a->p.page_size >= 1) return fa_fail(err, FA_ERR_UNSUPPORTED, "page_size", "no paged backward (test backend)");
    return fa_backend_cpu()->backward(a, err);
}

/* the paged category on such a backend: its forward is judged and passes (the entries are met, not
   skipped); a paged forward that reads the block table with the wrong stride still fails it; a
   backend that declines the paged forward too is skipped, not met */
static void test_paged_backward_declined(void) {
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.lim = &fa_backend_cpu()->limits;
    fc_sweep_entry *e;
    int64_t n = fc_sweep_build(&o, &e), np = 0;
    for (int64_t i = 0; i < n; i++)
        if (e[i].c.p.page_size >= 1 && e[i].prop < 0) {
            np++;
            CHECK(e[i].expect == FC_SWEEP_EXPECT_FWD_BWD_MAY_DECLINE, "%s: the backward may be declined", e[i].label);
        }
    CHECK(np >= 5, "paged entries: %lld (the paged category and the sinks' paged case)", (long long)np);
    fa_backend be = *fa_backend_cpu();
    be.backward = bwd_no_paged;
    fc_sweep_tally t[FC_SWEEP_CAT_COUNT];
    fa_cpu_set_mutant(0);
    int64_t bad = fc_sweep_run(&be, e, n, FC_SWEEP_PAGED, stdout, t);
    CHECK(bad == 0 && t[FC_SWEEP_PAGED].ran == 4 && t[FC_SWEEP_PAGED].skipped == 0 && t[FC_SWEEP_PAGED].failed == 0,
          "paged category with the backward declined: %lld not met, %lld skipped of %lld", (long long)bad,
          (long long)t[FC_SWEEP_PAGED].skipped, (long long)t[FC_SWEEP_PAGED].ran);
    fc_verdict *v = malloc(sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        if (e[i].category != FC_SWEEP_PAGED) continue;
        fc_sweep_check(&be, &e[i], v);
        CHECK(fc_sweep_met(&e[i], v, NULL, 0) && v->outcome == FC_SKIP && v->t[FC_T_O].elements > 0 &&
                  !v->t[FC_T_DQ].checked,
              "%s: met on the forward alone (%s, %lld O elements judged)", e[i].label, fc_outcome_name(v->outcome),
              (long long)v->t[FC_T_O].elements);
    }
    int id = fa_cpu_mutant_id("block_table_stride");
    CHECK(id > 0, "mutant block_table_stride exists");
    fa_cpu_set_mutant(id);
    bad = fc_sweep_run(&be, e, n, FC_SWEEP_PAGED, stdout, t);
    fa_cpu_set_mutant(0);
    CHECK(bad > 0 && t[FC_SWEEP_PAGED].failed == bad, "a paged forward reading the block table with the wrong stride "
          "fails the category with the backward declined (%lld)", (long long)bad);
    /* the same expectation does not excuse a declined forward */
    for (int64_t i = 0; i < n; i++) {
        if (e[i].category != FC_SWEEP_PAGED) continue;
        fc_verdict_init(v);
        fc_verdict_decline(v, FC_PHASE_FORWARD, "forward: backend says unsupported (page_size): no paged forward");
        CHECK(!fc_sweep_met(&e[i], v, NULL, 0) && fc_sweep_miss(&e[i], v) == FC_SWEEP_MISS_SKIP,
              "a declined paged forward is skipped, not met");
        break;
    }
    free(v);
    free(e);
}

/* regression unsupported_in_text: the sweep once told the backend's UNSUPPORTED by the reason's
   text ("unsupported" in it, a "backward: " prefix); a reason's kind and phase are set where it is
   made now. A third-party backend whose own words say "unsupported" is not thereby a decline:
   here one named "vendor-attn (unsupported (fp8) disabled)" with no backward at all, on an entry
   that allows a decline: its backward was never run, which is no decline of the backend's (was: met
   as a decline); on a device entry a harness defect, not the backend's UNSUPPORTED (was: FAIL). A
   harness skip quoting such words is no decline either; a real decline of the forward is not
   excused as the backward's by a text that starts "backward: ". */
static void test_regression_unsupported_in_text(void) {
    fa_backend be = *fa_backend_cpu();
    be.name = "vendor-attn (unsupported (fp8) disabled)";
    be.backward = NULL;
    fc_sweep_entry e;
    memset(&e, 0, sizeof e);
    e.c = base_case_small();
    e.c.backward = 1;
    e.prop = -1;
    e.determinism = 1;
    e.category = FC_SWEEP_CUDA_DECLINED;
    e.expect = FC_SWEEP_EXPECT_DECLINE;
    snprintf(e.label, sizeof e.label, "declined B1 Sq17 Sk33 (backend without a backward)");
    fc_verdict *v = malloc(sizeof *v);
    fa_cpu_set_mutant(0);
    fc_sweep_check(&be, &e, v);
    CHECK(v->outcome == FC_SKIP && v->n_reasons == 1 && strstr(v->reason[0].text, "unsupported (") &&
              v->reason[0].kind == FC_REASON_NOT_JUDGED && v->reason[0].phase == FC_PHASE_BACKWARD,
          "a backend without a backward: one not-judged reason of the backward (%s, %d reasons)",
          fc_outcome_name(v->outcome), v->n_reasons);
    CHECK(!fc_sweep_met(&e, v, NULL, 0), "a backward never run is no decline, whatever the backend's name says");
    CHECK(fc_sweep_miss(&e, v) == FC_SWEEP_MISS_DEFECT, "a device entry not judged: a harness defect");
    fc_verdict_init(v);
    fc_verdict_skip(v, "forward values not judged: the backend's note: unsupported (fp8) kernels disabled");
    CHECK(!fc_sweep_met(&e, v, NULL, 0) && fc_sweep_miss(&e, v) == FC_SWEEP_MISS_DEFECT,
          "a not-judged reason quoting \"unsupported (\": neither a decline nor the backend's failure");
    fc_verdict_init(v);
    fc_verdict_decline(v, FC_PHASE_BACKWARD, "the backward declined");
    CHECK(fc_sweep_met(&e, v, NULL, 0), "a real decline (kind UNSUPPORTED) meets DECLINE");
    e.expect = FC_SWEEP_EXPECT_PASS;
    CHECK(!fc_sweep_met(&e, v, NULL, 0) && fc_sweep_miss(&e, v) == FC_SWEEP_MISS_FAIL,
          "a real decline where none is allowed: the backend's");
    e.expect = FC_SWEEP_EXPECT_FWD_BWD_MAY_DECLINE;
    fc_verdict_init(v);
    v->t[FC_T_O].checked = 1;
    v->t[FC_T_O].elements = 10;
    fc_verdict_decline(v, FC_PHASE_FORWARD, "backward: kernels unsupported (fp8)");
    CHECK(!fc_sweep_met(&e, v, NULL, 0), "the forward's decline is not the backward's, whatever its text");
    fc_verdict_init(v);
    v->t[FC_T_O].checked = 1;
    v->t[FC_T_O].elements = 10;
    fc_verdict_decline(v, FC_PHASE_BACKWARD, "paged backward not built");
    CHECK(fc_sweep_met(&e, v, NULL, 0), "the backward's decline (phase BACKWARD) after a judged forward is met");
    free(v);
}

/* the paging property on a backend that declines the paged backward (bwd_no_paged): it runs and
   judges the forward (was: SKIP "paging: backward unsupported" with nothing judged, not met), and a
   page lookup that assumes a sequence's pages are consecutive fails it */
static void test_paging_backward_declined(void) {
    const int paging = (int)(fc_prop_by_name("paging") - fc_prop_table);
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.lim = &fa_backend_cpu()->limits;
    fc_sweep_entry *e;
    int64_t n = fc_sweep_build(&o, &e), np = 0;
    fa_backend be = *fa_backend_cpu();
    be.backward = bwd_no_paged;
    fc_verdict *v = malloc(sizeof *v);
    const int id = fa_cpu_mutant_id("pages_assumed_contiguous");
    CHECK(id > 0, "mutant pages_assumed_contiguous exists");
    for (int64_t i = 0; i < n; i++) {
        if (e[i].prop != paging) continue;
        np++;
        CHECK(e[i].expect == FC_SWEEP_EXPECT_FWD_BWD_MAY_DECLINE, "%s paging: the backward may be declined", e[i].label);
        fa_cpu_set_mutant(0);
        fc_sweep_check(&be, &e[i], v);
        CHECK(fc_sweep_met(&e[i], v, NULL, 0) && v->outcome == FC_SKIP && v->n_reasons == 1 &&
                  v->reason[0].kind == FC_REASON_UNSUPPORTED && v->reason[0].phase == FC_PHASE_BACKWARD &&
                  v->t[FC_T_O].elements > 0 && v->t[FC_T_LSE].elements > 0 && !v->t[FC_T_DQ].checked,
              "%s paging with the backward declined: met on the forward (%s, %lld O elements compared)", e[i].label,
              fc_outcome_name(v->outcome), (long long)v->t[FC_T_O].elements);
        fa_cpu_set_mutant(id);
        fc_sweep_check(&be, &e[i], v);
        fa_cpu_set_mutant(0);
        CHECK(!fc_sweep_met(&e[i], v, NULL, 0) && v->outcome == FC_FAIL && fc_sweep_miss(&e[i], v) == FC_SWEEP_MISS_FAIL &&
                  v->t[FC_T_O].violations > 0,
              "%s paging catches pages assumed consecutive with the backward declined (%s, %lld O elements differ)",
              e[i].label, fc_outcome_name(v->outcome), (long long)v->t[FC_T_O].violations);
        /* the full backward still judged where the backend has it */
        fc_sweep_check(fa_backend_cpu(), &e[i], v);
        CHECK(v->outcome == FC_PASS && v->t[FC_T_DK].elements > 0, "%s paging on the CPU backend: dK judged too (%s)",
              e[i].label, fc_outcome_name(v->outcome));
    }
    CHECK(np == 2, "paging entries in the base set: %lld", (long long)np);
    free(v);
    free(e);
}

int main(void) {
    test_paging_backward_declined();
    test_regression_unsupported_in_text();
    test_paged_backward_declined();
    test_miss();
    test_regression_nonfinite_4105_keypad();
    test_regression_nonfinite_4009_one_key_row();
    test_base_properties();
    test_device_properties();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
