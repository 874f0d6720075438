/* check_test.h: what the tests of properties/check share (check/tests/chunk_test.c,
 * check/tests/device_path_test.c, tests/wide_index_test.c). Test-only, header-only.
 *
 *   CHECK(cond, fmt, ...)  prints "ok   <text>" or "FAIL file:line: <text>" and counts the
 *                          checks in `checks` and the failures in `failures` (main returns
 *                          failures ? 1 : 0); a file that checks in long loops defines
 *                          CHECK_QUIET_OK before the include: no "ok" lines
 *   fct_case               a case of one shape (Dqk = Dv), every other field the default
 *   fct_same_verdicts      two verdicts of the same run (the whole-call host path and a chunked
 *                          or device path) agree: per-tensor statistics exactly, norms to 1e-12
 *                          relative, the same outcome and reasons
 *   fct_plant, fct_planted errors planted in O, dQ and a masked LSE row, and the check that a
 *                          verdict fails with each of them named at its whole-call position */
#ifndef FLASHCHECK_CHECK_TEST_H
#define FLASHCHECK_CHECK_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "case/case.h"
#include "properties/check/check.h"

static int failures = 0, checks = 0;
#ifdef CHECK_QUIET_OK
#define CHECK_OK_LINE(...) ((void)0)
#else
#define CHECK_OK_LINE(...) (printf("ok   "), printf(__VA_ARGS__), printf("\n"))
#endif
#define CHECK(cond, ...)                                \
    do {                                                \
        checks++;                                       \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        } else {                                        \
            CHECK_OK_LINE(__VA_ARGS__);                 \
        }                                               \
    } while (0)

/* The default case (fc_case_default) with shape B, Sq, Sk, Hq, Hkv, D = Dqk = Dv and dtype dt. */
static inline void fct_case(fc_case *c, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                            fa_dtype dt) {
    fc_case_default(c);
    c->p.batch = B; c->p.seqlen_q = Sq; c->p.seqlen_k = Sk; c->p.heads_q = Hq; c->p.heads_kv = Hkv;
    c->p.head_dim_qk = c->p.head_dim_v = D; c->p.dtype = dt;
}

/* Sums of squares computed in another order (per chunk, then merged) agree to 1e-12 relative. */
static inline int fct_rel_close(double a, double b) { return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b)) + 1e-300; }

static inline void fct_same_tensor(const fc_verdict *a, const fc_verdict *b, int t, const char *what) {
    const fc_tensor_stats *x = &a->t[t], *y = &b->t[t];
    int same = x->checked == y->checked && x->elements == y->elements && x->violations == y->violations &&
               x->nonfinite_mismatch == y->nonfinite_mismatch && x->max_ratio == y->max_ratio &&
               x->max_abs_err == y->max_abs_err && !memcmp(x->worst, y->worst, sizeof x->worst) &&
               x->worst_got == y->worst_got && x->worst_ref == y->worst_ref && x->worst_bound == y->worst_bound &&
               !memcmp(x->ratio_hist, y->ratio_hist, sizeof x->ratio_hist) && x->exact == y->exact &&
               x->nonfinite_ok == y->nonfinite_ok && x->uncheckable == y->uncheckable && x->bias_n == y->bias_n &&
               x->weak == y->weak && x->grid_rows == y->grid_rows && x->grid_cols == y->grid_cols &&
               !memcmp(x->grid, y->grid, sizeof x->grid);
    int close = fct_rel_close(x->ref_norm2, y->ref_norm2) && fct_rel_close(x->got_norm2, y->got_norm2) &&
                fct_rel_close(x->bound_norm2, y->bound_norm2) &&
                fabs(x->bias_sum - y->bias_sum) <= 1e-9 * (double)x->bias_n;
    CHECK(same && close, "%s %s: chunked = whole call (%lld elements, %lld violations, worst %.3g at [%lld,%lld,%lld,%lld])",
          what, fc_tensor_name(t), (long long)y->elements, (long long)y->violations, y->max_ratio, (long long)y->worst[0],
          (long long)y->worst[1], (long long)y->worst[2], (long long)y->worst[3]);
}

static inline void fct_same_verdict(const fc_verdict *a, const fc_verdict *b, const char *what) {
    int same = a->outcome == b->outcome && a->n_reasons == b->n_reasons;
    for (int i = 0; same && i < a->n_reasons; i++)
        same = !strcmp(a->reason[i].check, b->reason[i].check) && !strcmp(a->reason[i].text, b->reason[i].text);
    CHECK(same, "%s: the same verdict and reasons (%s, %d reasons%s%s)", what, fc_outcome_name(b->outcome), b->n_reasons,
          b->n_reasons ? ": " : "", b->n_reasons ? b->reason[0].text : "");
    if (!same)
        for (int i = 0; i < a->n_reasons || i < b->n_reasons; i++)
            printf("     whole [%s] %s\n     chunk [%s] %s\n", i < a->n_reasons ? a->reason[i].check : "",
                   i < a->n_reasons ? a->reason[i].text : "", i < b->n_reasons ? b->reason[i].check : "",
                   i < b->n_reasons ? b->reason[i].text : "");
}

/* a (whole call) and b (chunked) agree on every tensor either checked, and on the verdict. */
static inline void fct_same_verdicts(const fc_verdict *a, const fc_verdict *b, const char *what) {
    for (int t = 0; t < FC_T_COUNT; t++)
        if (a->t[t].checked || b->t[t].checked) fct_same_tensor(a, b, t, what);
    fct_same_verdict(a, b, what);
}

/* Planted errors: O[io] += 0.5, dQ[iq] -= 0.75, LSE[il] = 0 (il a row with no visible key). */
static inline void fct_plant(fc_run *r, const int64_t io[4], const int64_t iq[4], const int64_t il[4]) {
    fc_buf_set(&r->buf[FC_T_O], io, fc_buf_get(&r->buf[FC_T_O], io) + 0.5);
    fc_buf_set(&r->buf[FC_T_DQ], iq, fc_buf_get(&r->buf[FC_T_DQ], iq) - 0.75);
    fc_buf_set(&r->buf[FC_T_LSE], il, 0.0);
}

/* v (of the forward, bwd = 0, or the backward) fails with exactly one violation in O (dQ), at its
 * planted whole-call position; the forward's also names the planted masked LSE row. */
static inline void fct_planted(const fc_verdict *v, int bwd, const int64_t io[4], const int64_t iq[4],
                               const int64_t il[4], const char *what) {
    const int t = bwd ? FC_T_DQ : FC_T_O;
    const int64_t *w = bwd ? iq : io;
    CHECK(v->outcome == FC_FAIL && v->t[t].violations == 1 && !memcmp(v->t[t].worst, w, 4 * sizeof(int64_t)),
          "%s: fails, the one violation at its whole-call position [%lld,%lld,%lld,%lld]", what,
          (long long)v->t[t].worst[0], (long long)v->t[t].worst[1], (long long)v->t[t].worst[2],
          (long long)v->t[t].worst[3]);
    if (bwd) return;
    char at[64];
    snprintf(at, sizeof at, "[%lld,%lld,%lld,%lld]", (long long)il[0], (long long)il[1], (long long)il[2],
             (long long)il[3]);
    int found = 0;
    for (int i = 0; i < v->n_reasons; i++)
        found |= !strcmp(v->reason[i].check, "masked_row") && strstr(v->reason[i].text, "lse:") &&
                 strstr(v->reason[i].text, at);
    CHECK(found, "the masked LSE row of the last batch named at %s (b, h, s)", at);
    if (!found)
        for (int i = 0; i < v->n_reasons; i++) printf("     [%s] %s\n", v->reason[i].check, v->reason[i].text);
}

#endif /* FLASHCHECK_CHECK_TEST_H */
