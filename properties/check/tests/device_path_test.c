/* device_path_test.c (GPU): the device path (properties/check/check.h) on the CUDA backend's
 * outputs = the host path on the same run (the GPU tier with host blocks, the host compare and
 * judge): the same per-tensor statistics and verdicts for one chunk and for chunks of 1 and 4
 * batches; errors planted in the last batch (O, dQ, a masked LSE row) named at their whole-call
 * positions by both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"
#include "oracle/oracle.h"
#include "properties/check/check.h"

static int failures = 0;
#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        } else {                                        \
            printf("ok   ");                            \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

static int rel_close(double a, double b) { return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b)) + 1e-300; }

static void same_tensor(const fc_verdict *a, const fc_verdict *b, int t, const char *what) {
    const fc_tensor_stats *x = &a->t[t], *y = &b->t[t];
    int same = x->checked == y->checked && x->elements == y->elements && x->violations == y->violations &&
               x->nonfinite_mismatch == y->nonfinite_mismatch && x->max_ratio == y->max_ratio &&
               x->max_abs_err == y->max_abs_err && !memcmp(x->worst, y->worst, sizeof x->worst) &&
               x->worst_got == y->worst_got && x->worst_ref == y->worst_ref && x->worst_bound == y->worst_bound &&
               !memcmp(x->ratio_hist, y->ratio_hist, sizeof x->ratio_hist) && x->exact == y->exact &&
               x->nonfinite_ok == y->nonfinite_ok && x->uncheckable == y->uncheckable && x->bias_n == y->bias_n &&
               x->weak == y->weak && x->grid_rows == y->grid_rows && x->grid_cols == y->grid_cols &&
               !memcmp(x->grid, y->grid, sizeof x->grid);
    int close = rel_close(x->ref_norm2, y->ref_norm2) && rel_close(x->got_norm2, y->got_norm2) &&
                rel_close(x->bound_norm2, y->bound_norm2) && fabs(x->bias_sum - y->bias_sum) <= 1e-9 * (double)x->bias_n;
    CHECK(same && close, "%s %s: chunked = whole call (%lld elements, %lld violations, worst %.3g at [%lld,%lld,%lld,%lld])",
          what, fc_tensor_name(t), (long long)y->elements, (long long)y->violations, y->max_ratio, (long long)y->worst[0],
          (long long)y->worst[1], (long long)y->worst[2], (long long)y->worst[3]);
}

static void same_verdict(const fc_verdict *a, const fc_verdict *b, const char *what) {
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

/* the host path (GPU tier, host blocks, host compare and judge) and the device path in chunks
   of at most cap batches (0: the memory plan) */
static void both(const fc_run *r, const fa_precision *prec, int bwd, int64_t cap, fc_verdict *va, fc_verdict *vb,
                 int64_t *nch) {
    fc_verdict_init(va);
    fc_verdict_init(vb);
    char msg[512] = "";
    int used = 0;
    if (!bwd) {
        orc_fwd_result res;
        CHECK(fc_oracle_fwd_plan(r, prec, FC_ORACLE_GPU, 0, &res, &used, msg, sizeof msg) == 0 && used,
              "host path: GPU tier forward %s", msg);
        fc_check_fwd_outputs(r, &res, va);
        orc_fwd_free(&res);
    } else {
        orc_bwd_result res;
        CHECK(fc_oracle_bwd_plan(r, prec, FC_ORACLE_GPU, 0, 0, &res, &used, msg, sizeof msg) == 0 && used,
              "host path: GPU tier backward %s", msg);
        fc_check_bwd_outputs(r, &res, va);
        orc_bwd_free(&res);
    }
    fc_check_set_device_chunk_cap(cap);
    int rc = bwd ? fc_check_bwd_device(r, prec, vb, nch, msg, sizeof msg) : fc_check_fwd_device(r, prec, vb, nch, msg, sizeof msg);
    CHECK(rc == 0, "device path %s, cap %lld: %lld chunks %s", bwd ? "backward" : "forward", (long long)cap,
          (long long)*nch, msg);
    fc_check_set_device_chunk_cap(0);
}

int main(void) {
    const fa_backend *be = fa_backend_cuda();
    if (!be) {
        printf("FAIL: no CUDA backend in this build\n");
        return 1;
    }
    fc_case c;
    fc_case_default(&c);
    c.p.batch = 6; c.p.seqlen_q = 400; c.p.seqlen_k = 384; c.p.heads_q = 8; c.p.heads_kv = 2;
    c.p.head_dim_qk = c.p.head_dim_v = 128; c.p.dtype = FA_BF16; c.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
    c.backward = 1;
    c.seed = 4242;
    char msg[256];
    fc_run r;
    CHECK(fc_case_check(&c, msg, sizeof msg) == 0 && fc_run_init(&r, &c, FC_POISON_A, msg, sizeof msg) == 0, "run: %s", msg);
    CHECK(fc_run_forward(&r, be) == FA_OK && fc_run_backward(&r, be) == FA_OK, "CUDA backend forward + backward");
    CHECK(r.on_device, "the run's backend works in device memory");
    const fa_precision *prec = &be->precision;
    fc_verdict va, vb;
    static const char *wh[2] = {"forward", "backward"};
    const int64_t caps[3] = {0, 1, 4}, want[3] = {1, 6, 2};
    for (int bwd = 0; bwd < 2; bwd++)
        for (int k = 0; k < 3; k++) {
            int64_t nch = 0;
            both(&r, prec, bwd, caps[k], &va, &vb, &nch);
            char what[64];
            snprintf(what, sizeof what, "%s, cap %lld", wh[bwd], (long long)caps[k]);
            CHECK(nch == want[k], "%s: %lld chunks (want %lld)", what, (long long)nch, (long long)want[k]);
            for (int t = 0; t < FC_T_COUNT; t++)
                if (va.t[t].checked || vb.t[t].checked) same_tensor(&va, &vb, t, what);
            same_verdict(&va, &vb, what);
            CHECK(vb.outcome == FC_PASS, "%s: the CUDA backend passes", what);
        }
    int64_t io[4] = {5, 398, 7, 100}, iq[4] = {5, 390, 3, 17}, il[4] = {5, 6, 1, 0};
    fc_buf_set(&r.buf[FC_T_O], io, fc_buf_get(&r.buf[FC_T_O], io) + 0.5);
    fc_buf_set(&r.buf[FC_T_DQ], iq, fc_buf_get(&r.buf[FC_T_DQ], iq) - 0.75);
    fc_buf_set(&r.buf[FC_T_LSE], il, 0.0); /* row 1 < Sq - Sk = 16: no visible key */
    for (int bwd = 0; bwd < 2; bwd++) {
        int64_t nch = 0;
        both(&r, prec, bwd, 4, &va, &vb, &nch);
        char what[64];
        snprintf(what, sizeof what, "planted, %s, cap 4", wh[bwd]);
        for (int t = 0; t < FC_T_COUNT; t++)
            if (va.t[t].checked || vb.t[t].checked) same_tensor(&va, &vb, t, what);
        same_verdict(&va, &vb, what);
        const int t = bwd ? FC_T_DQ : FC_T_O;
        const int64_t *w = bwd ? iq : io;
        CHECK(vb.outcome == FC_FAIL && vb.t[t].violations == 1 && !memcmp(vb.t[t].worst, w, 4 * sizeof(int64_t)),
              "%s: fails, the one violation at its whole-call position [%lld,%lld,%lld,%lld]", what,
              (long long)vb.t[t].worst[0], (long long)vb.t[t].worst[1], (long long)vb.t[t].worst[2],
              (long long)vb.t[t].worst[3]);
        if (!bwd) {
            int found = 0;
            for (int i = 0; i < vb.n_reasons; i++)
                found |= !strcmp(vb.reason[i].check, "masked_row") && strstr(vb.reason[i].text, "lse:") &&
                         strstr(vb.reason[i].text, "[5,6,1,0]");
            CHECK(found, "the masked LSE row of the last batch named at [5,6,1,0] (b, h, s)");
        }
    }
    fc_run_free(&r);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
