/* faulty_backend.c: the correct CPU backend behind a .so that FAULTS on some
 * cases, to test that a fault is isolated, recorded as a finding, and that the
 * campaign goes on. The fault triggers when seqlen_k % 5 == 3 (common in the
 * fuzzer's shapes: 3, 8, 13, 33, 63, 113, 128, 193, ...):
 *   FAULTY_MODE=segv    dereferences NULL (like a host-side crash in a plugin)
 *   FAULTY_MODE=hang    never returns (like a kernel stuck in a barrier)
 *   FAULTY_MODE=device  returns FA_ERR_DEVICE "illegal memory access" (like a CUDA fault)
 *   FAULTY_MODE=slow    sleeps 1.3 s, then computes correctly (slow, not hung: past a 1 s
 *                       timeout, within the 4x limit of the confirming re-run)
 *   FAULTY_MODE=killed  raises SIGKILL on a valid call (like the OOM killer or a user: a harness
 *                       event, not judged); invalid calls are rejected as by the CPU backend
 *   FAULTY_MODE=killed_all  the same on every call, whatever the shape */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/flash_api.h"

const fa_backend *fa_backend_export(void);

static int faulty_trigger(const fa_problem *p, int valid, fa_error *err, fa_status *st)
{
    const char *m = getenv("FAULTY_MODE");
    if (m && strcmp(m, "killed_all") == 0) raise(SIGKILL);
    if (p->seqlen_k % 5 != 3) return 0;
    if (m && strcmp(m, "segv") == 0) {
        volatile int *null = NULL;
        *null = 1;
    } else if (m && strcmp(m, "hang") == 0) {
        for (;;) pause();
    } else if (m && strcmp(m, "killed") == 0) {
        if (valid) raise(SIGKILL);
    } else if (m && strcmp(m, "slow") == 0) {
        usleep(1300000);
        return 0;
    } else if (m && strcmp(m, "device") == 0) {
        *st = fa_fail(err, FA_ERR_DEVICE, "", "an illegal memory access was encountered (simulated)");
        return 1;
    }
    return 0;
}

static fa_status faulty_forward(const fa_fwd_args *a, fa_error *err)
{
    fa_status st;
    fa_error scratch;
    int valid = fa_validate_fwd(a, &fa_backend_cpu()->limits, &scratch) == FA_OK;
    if (faulty_trigger(&a->p, valid, err, &st)) return st;
    return fa_backend_cpu()->forward(a, err);
}

static fa_status faulty_backward(const fa_bwd_args *a, fa_error *err)
{
    fa_status st;
    fa_error scratch;
    int valid = fa_validate_bwd(a, &fa_backend_cpu()->limits, &scratch) == FA_OK;
    if (faulty_trigger(&a->p, valid, err, &st)) return st;
    return fa_backend_cpu()->backward(a, err);
}

const fa_backend *fa_backend_export(void)
{
    static fa_backend b;
    b = *fa_backend_cpu();
    b.name = "faulty";
    b.forward = faulty_forward;
    b.backward = faulty_backward;
    return &b;
}
