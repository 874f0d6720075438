/* fz_run.h: one fuzz execution (prefix fz_run_): check a case on a backend
 * with the property library (properties/check/check.h), turn the verdict into
 * features (fz_feat.h) and, on failure, into a crash state (fz_store.h).
 * Used by the libFuzzer targets, the standalone driver and `flashcheck fuzz`.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_RUN_H
#define FLASHCHECK_FZ_RUN_H

#include "case/case.h"
#include "fuzz/fz_feat.h"
#include "kernels/flash_api.h"
#include "properties/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Outcome classes for fz_feat_outcome (and the campaign's counters). */
enum {
    FZ_OUT_PASS = 0,
    FZ_OUT_SKIP = 1,     /* the backend does not support the case (UNSUPPORTED) */
    FZ_OUT_FAIL = 2,     /* a check failed */
    FZ_OUT_DEVICE = 3,   /* FA_ERR_DEVICE: a kernel fault reported by the backend */
    FZ_OUT_CRASH = 4,    /* the process running the case died (fz_isolate.h) */
    FZ_OUT_HANG = 5,     /* the backend call ran past the timeout and was killed (fz_isolate.h) */
    FZ_OUT_ERROR = 6,    /* the harness could not run the case (fork, pipe, bad case, out of memory,
                            killed from outside): failure "harness", "killed" or "backend" (cannot
                            load it); never a finding */
    FZ_OUT_SLOW = 7,     /* the HARNESS (oracle, checks) ran past the timeout: not a backend finding */
    FZ_OUT_OVERFLOW = 8  /* overflow-sensitive (check.h FC_OVERFLOW): NaN/Inf where the profile's
                            intermediates may overflow; saved as its own class, not a failure */
};

typedef struct {
    fc_verdict v;
    int klass;               /* FZ_OUT_* */
    double worst_ratio;      /* max over checked output tensors of max_ratio (0 if none) */
    int64_t elements;        /* output elements compared with the oracle */
    char pass[8];            /* on failure: "fwd" or "bwd" */
    char tensor[8];          /* on failure: "o", "lse", "dq", "dk", "dv", or "-" */
    char failure[32];        /* on failure: the first failing check ("bound", "nan", "guard", ...) */
    char detail[1024];       /* on failure: the reasons, one a line */
    double total_s;          /* wall time of the whole check (fz_run_case) */
    double backend_s;        /* of which inside backend calls (-1 without the phase hook) */
} fz_run_result;

/* Check c on be, fill r and, when f is non-NULL, add features. determinism: 0 no re-run, 1 the
 * bitwise re-run (check.h "determinism"), N >= 2 that and stress mode with N runs of the many-CTA
 * case under load (check.h "stress", fc_check_opts.stress = N); the same meaning wherever a
 * `determinism` value reaches fz_run_case (fz_iso_run, fz_iso_job, fz_camp_cfg). The features
 * added to f: geometry, ratio and outcome. */
void fz_run_case(const fa_backend *be, const fc_case *c, int determinism, fz_run_result *r, fz_feat *f);

/* Where a running case is: set through the hook so that a watchdog in another
 * process can tell a hung BACKEND (a kernel that never returns: a finding)
 * from a slow HARNESS (oracle, checks: not a kernel bug). */
/* FZ_PHASE_WAIT: waiting for the campaign's device lock (fz_devlock.h): neither the case's
 * time nor a hang. */
enum { FZ_PHASE_IDLE = 0, FZ_PHASE_HARNESS = 1, FZ_PHASE_BACKEND = 2, FZ_PHASE_WAIT = 3 };
/* phase: shared memory the watchdog reads, or NULL (off). fz_run_case then
 * calls the backend through a shim that stores FZ_PHASE_BACKEND around every
 * forward/backward call. */
void fz_run_set_phase_hook(volatile int *phase);

/* Fill r (and f) from a verdict already computed for c (e.g. by a property). */
void fz_run_classify(const fc_case *c, const fc_verdict *v, fz_run_result *r, fz_feat *f);

/* A device fault: the backend reported FA_ERR_DEVICE (illegal address, launch
 * failure...). A CUDA context is unusable after one, so the caller should
 * record the finding and restart the process. */
int fz_run_is_device_fault(const fz_run_result *r);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_RUN_H */
