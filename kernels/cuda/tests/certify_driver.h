/* certify_driver.h: the GPU certification tests' one driver (fwd_certify_test.c,
 * bwd_certify_test.c): the sweep library (properties/sweep/sweep.h) run in process on the
 * CUDA backend, with a kernel policy (kernels/cuda/testing.h) so that both kernel families
 * are certified on an H100, plus the API-misuse suite. Everything it checks is the sweep's:
 * the cases, the checks (properties/check/check.h) and the properties.
 *
 * usage: PROGRAM [--quick] [--no-big] [--sanitize] [--production] [--category NAME] [POLICY]
 *   --quick        the sweep's quick subset
 *   --no-big       without the > 2^31-element calls
 *   --sanitize     the compute-sanitizer subset (sanitize_test.sh): short sequences, no big
 *                  case, no misuse suite
 *   --production   also the production set (S >= 8k, one call past 2^31 elements per tensor)
 *   --category C   only category C of the sweep (e.g. cuda_leak, production), no misuse suite
 *   POLICY         the driver's own kernel-policy flags (fwd: --mma-only, --no-ws; bwd: --sm80)
 * Exit status: 0 when every entry met its expectation, 1 otherwise (a failure, or a harness defect:
 * an entry the sweep cannot judge, printed as DEFECT and counted apart), 2 usage or setup error. */
#ifndef FLASHCHECK_CUDA_CERTIFY_DRIVER_H
#define FLASHCHECK_CUDA_CERTIFY_DRIVER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/testing.h"
#include "properties/sweep/sweep.h"

static fa_cuda_policy drv_policy;
static fa_status drv_fwd(const fa_fwd_args *a, fa_error *err) { return fa_cuda_forward_policy(a, &drv_policy, err); }
static fa_status drv_bwd(const fa_bwd_args *a, fa_error *err) { return fa_cuda_backward_policy(a, &drv_policy, err); }

typedef struct {
    int64_t calls, failed;
} drv_misuse;

static void drv_misuse_cb(void *user, const fz_misuse_result *res) {
    drv_misuse *m = (drv_misuse *)user;
    m->calls++;
    if (res->failure[0]) {
        m->failed++;
        printf("FAIL misuse %s (%s): %s: %s\n", res->kind_name, res->backward ? "bwd" : "fwd", res->failure, res->what);
    }
}

/* A driver's kernel-policy option: given, apply() changes the policy of every call. */
typedef struct {
    const char *flag;
    void (*apply)(fa_cuda_policy *p);
} drv_flag;

/* has_bwd: the entries run the backward too. flags: the driver's policy options (nflags). */
static int drv_main(int argc, char **argv, int has_bwd, const drv_flag *flags, int nflags) {
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.sets = FC_SWEEP_SET_BASE | FC_SWEEP_SET_CUDA;
    o.has_bwd = has_bwd;
    int only = -1;
    drv_policy = fa_cuda_policy_default;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick")) o.quick = 1;
        else if (!strcmp(argv[i], "--no-big")) o.big = 0;
        else if (!strcmp(argv[i], "--sanitize")) o.sanitize = 1;
        else if (!strcmp(argv[i], "--production")) o.sets |= FC_SWEEP_SET_PRODUCTION;
        else if (!strcmp(argv[i], "--category") && i + 1 < argc) {
            only = fc_sweep_cat_by_name(argv[++i]);
            if (only < 0) { fprintf(stderr, "%s: unknown category '%s'\n", argv[0], argv[i]); return 2; }
            o.sets |= fc_sweep_cat_set(only);
        } else {
            int k = 0;
            while (k < nflags && strcmp(argv[i], flags[k].flag)) k++;
            if (k < nflags) { flags[k].apply(&drv_policy); continue; }
            fprintf(stderr, "usage: %s [--quick] [--no-big] [--sanitize] [--production] [--category NAME]", argv[0]);
            for (k = 0; k < nflags; k++) fprintf(stderr, " [%s]", flags[k].flag);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    if (o.sanitize) o.sets &= ~(FC_SWEEP_SET_BASE | FC_SWEEP_SET_PRODUCTION), o.big = 0;
    if (fa_cuda_device_count() < 1) {
        fprintf(stderr, "FAIL: no CUDA device; this is a GPU test and must run on a GPU host\n");
        return 1;
    }
    fa_backend be = *fa_backend_cuda();
    be.forward = drv_fwd;
    be.backward = has_bwd ? drv_bwd : NULL;
    /* the base cases are fitted into the backend's limits and the contract-v3 categories
     * (varlen, paged, softcap, sinks) built for the features it claims, as `flashcheck certify`
     * does (cli/cmd_certify.c); without limits the sweep builds no v3 case */
    o.lim = &be.limits;
    fc_sweep_entry *e = NULL;
    int64_t n = fc_sweep_build(&o, &e);
    if (n < 0) { fprintf(stderr, "FAIL: out of memory building the sweep\n"); return 2; }
    fc_sweep_tally tally[FC_SWEEP_CAT_COUNT];
    int64_t failed = fc_sweep_run(&be, e, n, only, stdout, tally), ran = 0, defects = 0;
    for (int k = 0; k < FC_SWEEP_CAT_COUNT; k++) {
        ran += tally[k].ran;
        defects += tally[k].defects;
    }
    failed -= defects;   /* fc_sweep_run counts both; a harness defect is not a failure of the backend */
    drv_misuse m = {0, 0};
    if (only < 0 && !o.sanitize) {
        fc_sweep_misuse(&be, drv_misuse_cb, &m);
        printf("misuse: %lld invalid calls, %lld not rejected cleanly\n", (long long)m.calls, (long long)m.failed);
    }
    free(e);
    printf("%lld sweep entries + %lld misuse calls: %lld failed", (long long)ran, (long long)m.calls,
           (long long)(failed + m.failed));
    if (defects)
        printf(", %lld not judged: harness defects of the sweep (DEFECT lines; not findings against the backend, "
               "and not passes)", (long long)defects);
    printf("\n");
    return ran == 0 ? 1 : (failed + m.failed + defects) ? 1 : 0;
}

#endif
