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
#include "properties/check/tests/check_test.h"


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
    fct_case(&c, 6, 400, 384, 8, 2, 128, FA_BF16);
    c.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
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
            fct_same_verdicts(&va, &vb, what);
            CHECK(vb.outcome == FC_PASS, "%s: the CUDA backend passes", what);
        }
    const int64_t io[4] = {5, 398, 7, 100}, iq[4] = {5, 390, 3, 17}, il[4] = {5, 6, 1, 0};
    fct_plant(&r, io, iq, il); /* LSE row 1 < Sq - Sk = 16: no visible key */
    for (int bwd = 0; bwd < 2; bwd++) {
        int64_t nch = 0;
        both(&r, prec, bwd, 4, &va, &vb, &nch);
        char what[64];
        snprintf(what, sizeof what, "planted, %s, cap 4", wh[bwd]);
        fct_same_verdicts(&va, &vb, what);
        fct_planted(&vb, bwd, io, iq, il, what);
    }
    fc_run_free(&r);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
