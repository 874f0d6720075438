/* fz_run.c: see fz_run.h. */
#define _GNU_SOURCE
#include "fuzz/fz_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int fz_run_outputs[5] = { FC_T_O, FC_T_LSE, FC_T_DQ, FC_T_DK, FC_T_DV };

/* which output tensor a failure belongs to: the first with a problem in its stats */
static int failing_tensor(const fc_verdict *v)
{
    for (int i = 0; i < 5; i++) {
        const fc_tensor_stats *s = &v->t[fz_run_outputs[i]];
        if (s->checked && (s->violations || s->nonfinite_mismatch || s->unwritten || s->overflow_sensitive))
            return fz_run_outputs[i];
    }
    /* else: a tensor named at the start of the first reason ("dq: ...", "o[...]") */
    if (v->n_reasons > 0) {
        const char *text = v->reason[0].text;
        for (int i = 4; i >= 0; i--) {     /* "lse" before "o"? no overlap issue: try long names first */
            const char *n = fc_tensor_name(fz_run_outputs[i]);
            size_t l = strlen(n);
            if (strncmp(text, n, l) == 0 && (text[l] == ':' || text[l] == '[' || text[l] == ' ' || text[l] == '.'))
                return fz_run_outputs[i];
        }
    }
    return -1;
}

/* ------------------------------------------------------------------------- */
/* phase hook: a shim backend that marks when control is inside the backend  */

static volatile int *fz_run_phase;
static const fa_backend *fz_run_real;
static double fz_run_backend_s;     /* seconds inside backend calls during the current case */

void fz_run_set_phase_hook(volatile int *phase)
{
    fz_run_phase = phase;
}

static fa_status shim_forward(const fa_fwd_args *a, fa_error *e)
{
    __atomic_store_n(fz_run_phase, FZ_PHASE_BACKEND, __ATOMIC_SEQ_CST);
    double t0 = fc_clock_s();
    fa_status st = fz_run_real->forward(a, e);
    fz_run_backend_s += fc_clock_s() - t0;
    __atomic_store_n(fz_run_phase, FZ_PHASE_HARNESS, __ATOMIC_SEQ_CST);
    return st;
}

static fa_status shim_backward(const fa_bwd_args *a, fa_error *e)
{
    __atomic_store_n(fz_run_phase, FZ_PHASE_BACKEND, __ATOMIC_SEQ_CST);
    double t0 = fc_clock_s();
    fa_status st = fz_run_real->backward(a, e);
    fz_run_backend_s += fc_clock_s() - t0;
    __atomic_store_n(fz_run_phase, FZ_PHASE_HARNESS, __ATOMIC_SEQ_CST);
    return st;
}

void fz_run_case(const fa_backend *be, const fc_case *c, int determinism, fz_run_result *r, fz_feat *f)
{
    fa_backend shim;
    if (fz_run_phase) {
        shim = *be;
        shim.forward = shim_forward;
        shim.backward = be->backward ? shim_backward : NULL;
        fz_run_real = be;
        be = &shim;
        __atomic_store_n(fz_run_phase, FZ_PHASE_HARNESS, __ATOMIC_SEQ_CST);
    }
    fc_verdict *v = malloc(sizeof *v);
    fc_check_opts o;
    fc_check_opts_default(&o);
    o.determinism = determinism != 0;
    o.stress = determinism >= 2 ? determinism : 0; /* fz_run.h: N >= 2 is stress mode with N runs */
    if (!v) { memset(r, 0, sizeof *r); r->klass = FZ_OUT_ERROR; return; }
    fz_run_backend_s = 0;
    double t0 = fc_clock_s();
    fc_check_case(be, c, &o, v);
    double total = fc_clock_s() - t0;
    fz_run_classify(c, v, r, f);
    r->total_s = total;
    r->backend_s = fz_run_phase ? fz_run_backend_s : -1;
    free(v);
}

/* A property's reason (check "property:<name>") whose text has `what`: the properties record a
 * backend's FA_ERR_DEVICE and their own harness errors as property failures whose text says so
 * ("backend returned FA_ERR_DEVICE", "harness: ..."), not yet as reasons of kind DEVICE or HARNESS
 * (prop_nonfinite.c among them); fc_check_case's reasons are told by their kind alone. */
static int prop_text(const fc_reason *x, const char *what)
{
    return strncmp(x->check, "property:", 9) == 0 && strstr(x->text, what) != NULL;
}

void fz_run_classify(const fc_case *c, const fc_verdict *verdict, fz_run_result *r, fz_feat *f)
{
    memset(r, 0, sizeof *r);
    r->v = *verdict;

    for (int i = 0; i < 5; i++) {
        const fc_tensor_stats *s = &r->v.t[fz_run_outputs[i]];
        if (!s->checked) continue;
        r->elements += s->elements;
        if (s->max_ratio > r->worst_ratio || s->max_ratio != s->max_ratio) r->worst_ratio = s->max_ratio;
        if (f) fz_feat_ratio(f, i, s->max_ratio);
    }

    r->klass = r->v.outcome == FC_PASS ? FZ_OUT_PASS : r->v.outcome == FC_SKIP ? FZ_OUT_SKIP
               : r->v.outcome == FC_OVERFLOW ? FZ_OUT_OVERFLOW : FZ_OUT_FAIL;
    if (r->v.outcome == FC_FAIL || r->v.outcome == FC_OVERFLOW) {
        const char *check = fc_verdict_first_check(&r->v);
        snprintf(r->failure, sizeof r->failure, "%s", check && *check ? check : "fail");
        int t = failing_tensor(&r->v);
        snprintf(r->tensor, sizeof r->tensor, "%s", t >= 0 ? fc_tensor_name(t) : "-");
        int bwd = t == FC_T_DQ || t == FC_T_DK || t == FC_T_DV ||
                  (t < 0 && c->backward && r->v.reason[0].phase == FC_PHASE_BACKWARD);
        snprintf(r->pass, sizeof r->pass, "%s", bwd ? "bwd" : "fwd");
        for (int i = 0; i < r->v.n_reasons; i++)
            if (r->v.reason[i].kind == FC_REASON_DEVICE || prop_text(&r->v.reason[i], "DEVICE")) {
                r->klass = FZ_OUT_DEVICE;
                snprintf(r->failure, sizeof r->failure, "device");
            }
        /* the HARNESS could not run or judge the case (a bad case, out of memory while
           materializing inputs or computing the oracle, a failed CUDA allocation or copy of
           the harness's own buffers): a harness error, never a finding against the backend */
        /* by the reasons' kinds: the first failure is the harness's, or a call's status was the
           harness's own failure (a reason of kind HARNESS with a phase: judge_status), whatever
           the checks it spoiled before (guards, inputs of buffers never copied back) */
        int harness = 0, first = 1;
        for (int i = 0; i < r->v.n_reasons && !harness; i++) {
            const fc_reason *x = &r->v.reason[i];
            if (!fc_reason_fails(x->kind)) continue;
            harness = (x->kind == FC_REASON_HARNESS && (first || x->phase != FC_PHASE_NONE)) || prop_text(x, "harness:");
            first = 0;
        }
        if (harness) {
            r->klass = FZ_OUT_ERROR;
            snprintf(r->failure, sizeof r->failure, "harness");
        }
        size_t n = 0;
        for (int i = 0; i < r->v.n_reasons && n + 16 < sizeof r->detail; i++)
            n += (size_t)snprintf(r->detail + n, sizeof r->detail - n, "%s: %s\n", r->v.reason[i].check,
                                  r->v.reason[i].text);
        if (r->v.n_dropped && n + 40 < sizeof r->detail)
            snprintf(r->detail + n, sizeof r->detail - n, "(%d more reasons)\n", r->v.n_dropped);
    }
    if (f) {
        fz_feat_geometry(f, c);
        fz_feat_outcome(f, r->klass);
        if (r->klass == FZ_OUT_FAIL) fz_feat_outcome(f, 4 + (int)(strlen(r->failure) % 8));
    }
}

int fz_run_is_device_fault(const fz_run_result *r)
{
    return r->klass == FZ_OUT_DEVICE;
}
