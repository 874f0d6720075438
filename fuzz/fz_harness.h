/* fz_harness.h: what every fuzz target shares (prefix fz_h_): the backend
 * under test, the budget, the findings directory, and how a finding is
 * recorded.
 *
 * Configuration comes from the environment, so the same target binary works
 * under libFuzzer, under the standalone driver and under ClusterFuzzLite:
 *   FLASHCHECK_BACKEND    cpu (default) | cuda | PATH.so
 *   FLASHCHECK_FINDINGS   directory for deduplicated repro files (default ./findings)
 *   FLASHCHECK_ABORT      1: abort() on the first NEW finding so libFuzzer / ClusterFuzzLite
 *                         report it as a crash (default 0: record and go on)
 *   FLASHCHECK_MAX_SEQ, FLASHCHECK_MAX_DIM, FLASHCHECK_MAX_BATCH, FLASHCHECK_MAX_HEADS:
 *                         the size budget (defaults in fz_budget_default)
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_HARNESS_H
#define FLASHCHECK_FZ_HARNESS_H

#include <stdint.h>

#include "case/case.h"
#include "fuzz/fz_gen.h"
#include "fuzz/fz_store.h"
#include "kernels/flash_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const fa_backend *backend;
    fz_budget budget;
    char findings_dir[1024];
    int abort_on_finding;
    int64_t findings_new;      /* new (deduplicated) findings saved by this process */
    int64_t findings_dup;      /* findings that matched an existing state */
    int64_t execs;
    int64_t skipped;           /* cases the backend declared unsupported */
    double worst_ratio;        /* over all executions */
} fz_h_state;

/* The process-wide harness state, initialized on first use from the environment.
 * Exits with status 2 and a message when the backend cannot be loaded. */
fz_h_state *fz_h(void);

/* Record a finding: save it (deduplicated, atomic), print one line to stderr,
 * count it, and abort() when FLASHCHECK_ABORT=1 and it is new. Returns 1 new, 0 dup. */
int fz_h_finding(const fc_case *c, const char *pass, const char *tensor, const char *failure,
                 const char *detail);

/* Budget from the environment (FLASHCHECK_MAX_*), on top of fz_budget_default. */
void fz_h_budget_from_env(fz_budget *b);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_HARNESS_H */
