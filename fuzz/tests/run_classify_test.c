/* run_classify_test.c: fz_run_case's classification of a failure reads the verdict's fields.
 *   - regression backward_in_text: the pass of a failure with no failing tensor was told by
 *     "backward" anywhere in the first reason's text, so a third-party backend whose FORWARD
 *     error message says "backward" was filed as a backward finding; the reason's phase says
 *     which call it was now (forward message mentioning "backward": "fwd"; the backward's own
 *     failure: "bwd"). */
#include <stdio.h>
#include <string.h>

#include "fuzz/fz_run.h"
#include "kernels/cpu/cpu_mutants.h"
#include "properties/check/tests/check_test.h"

static fa_status fwd_fails(const fa_fwd_args *a, fa_error *err) {
    (void)a;
    return fa_fail(err, FA_ERR_INTERNAL, "workspace", "backward workspace not allocated by the caller");
}

static fa_status fwd_says_harness(const fa_fwd_args *a, fa_error *err) {
    (void)a;
    return fa_fail(err, FA_ERR_INVALID, "q", "harness: the caller's scratch buffer is too small");
}

static fa_status fwd_says_device(const fa_fwd_args *a, fa_error *err) {
    (void)a;
    return fa_fail(err, FA_ERR_INVALID, "q", "DEVICE pointer expected, got host memory");
}

static fa_status fwd_device_fault(const fa_fwd_args *a, fa_error *err) {
    (void)a;
    return fa_fail(err, FA_ERR_DEVICE, "", "illegal memory access");
}

static fa_status bwd_fails(const fa_bwd_args *a, fa_error *err) {
    (void)a;
    return fa_fail(err, FA_ERR_INTERNAL, "workspace", "out of scratch");
}

int main(void) {
    fc_case c;
    fct_case(&c, 1, 17, 33, 2, 1, 16, FA_F16);
    c.backward = 1;
    fa_cpu_set_mutant(0);
    static fz_run_result r;
    fa_backend be = *fa_backend_cpu();
    be.forward = fwd_fails;
    fz_run_case(&be, &c, 0, &r, NULL);
    CHECK(r.klass == FZ_OUT_FAIL && !strcmp(r.failure, "status") && !strcmp(r.tensor, "-"),
          "a forward's error status: a finding of check status, no tensor (%d %s %s)", r.klass, r.failure, r.tensor);
    CHECK(!strcmp(r.pass, "fwd"), "the forward's message saying \"backward\" leaves it the forward's: %s", r.pass);
    be = *fa_backend_cpu();
    be.backward = bwd_fails;
    fz_run_case(&be, &c, 0, &r, NULL);
    CHECK(r.klass == FZ_OUT_FAIL && !strcmp(r.failure, "status") && !strcmp(r.pass, "bwd"),
          "the backward's error status: a backward finding (%d %s %s)", r.klass, r.failure, r.pass);
    be = *fa_backend_cpu();
    be.forward = fwd_says_harness;
    fz_run_case(&be, &c, 0, &r, NULL);
    CHECK(r.klass == FZ_OUT_FAIL && !strcmp(r.failure, "status") && !strcmp(r.pass, "fwd"),
          "a backend's message starting \"harness:\" is the backend's finding (%d %s %s)", r.klass, r.failure, r.pass);
    be.forward = fwd_says_device;
    fz_run_case(&be, &c, 0, &r, NULL);
    CHECK(r.klass == FZ_OUT_FAIL && !strcmp(r.failure, "status"),
          "a backend's message saying \"DEVICE\" with FA_ERR_INVALID is a plain finding (%d %s)", r.klass, r.failure);
    be.forward = fwd_device_fault;
    fz_run_case(&be, &c, 0, &r, NULL);
    CHECK(r.klass == FZ_OUT_DEVICE && !strcmp(r.failure, "device") && !strcmp(r.pass, "fwd"),
          "FA_ERR_DEVICE from the forward: a device fault (%d %s %s)", r.klass, r.failure, r.pass);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
