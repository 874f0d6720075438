/* fz_campaign.h: the `flashcheck fuzz` engine (prefix fz_camp_): a
 * coverage-guided campaign over several worker processes sharing one corpus
 * directory, guided by the numerical and geometric features of fz_feat.h
 * (this engine runs where libFuzzer cannot: gcc builds, device backends,
 * several GPUs).
 *
 * Process structure:
 *   supervisor (the calling process; never touches CUDA)
 *     +- worker 0 (fork; CUDA_VISIBLE_DEVICES = gpu[0] when GPUs are used)
 *     +- worker 1 ...
 * Each worker loops: pick a corpus entry, mutate it (fz_gen.h), write the
 * case text into its shared-memory slot, run and check it (fz_run.h), keep
 * the input when it shows a new (feature, count bucket) pair, save failures
 * as deduplicated findings (fz_store.h). Workers rescan the corpus directory
 * to pick up each other's inputs.
 *
 * Workers die with the supervisor (fz_iso_child_init: PDEATHSIG); SIGINT,
 * SIGTERM and SIGHUP to the supervisor stop the campaign cleanly.
 *
 * Harness events are never findings: a worker killed from outside (SIGKILL,
 * SIGTERM, ...: fz_iso_external_signal) has its case run once more; a case past
 * case_timeout_s is run once more with 4x the limit and is a hang only if it
 * times out again; a finding that cannot be saved stops the campaign (counted in
 * findings_unsaved, not as a finding); a replacement worker keeps its slot's
 * feature map, so restarts do not refill the corpus.
 *
 * Isolation: the in-flight case lives in shared memory, so when a worker dies
 * (signal, a kernel fault that kills the process) or hangs past case_timeout_s
 * (the supervisor SIGKILLs it), the supervisor records that case as a
 * "crash:SIG..." or "hang" finding and starts a fresh worker. A backend that
 * reports FA_ERR_DEVICE gets its finding saved by the worker, which then
 * exits so the next worker starts with a clean CUDA context.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_CAMPAIGN_H
#define FLASHCHECK_FZ_CAMPAIGN_H

#include <stdint.h>

#include "fuzz/fz_gen.h"
#include "properties/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FZ_CAMP_MAX_WORKERS 256

typedef struct {
    const char *backend;        /* "cpu", "cuda", PATH.so, or NULL (fa_backend_default) */
    int workers;                /* >= 1 */
    const char *gpu[FZ_CAMP_MAX_WORKERS]; /* CUDA_VISIBLE_DEVICES per worker, or NULL */
    const char *corpus_dir;     /* shared corpus (created) */
    const char *findings_dir;   /* findings (created) */
    const char *seeds_dir;      /* optional extra seeds (read only), or NULL */
    double seconds;             /* stop after this long (0: no limit) */
    int64_t max_cases;          /* stop after this many executions in total (0: no limit) */
    double case_timeout_s;      /* a case running longer is a hang (default 60) */
    uint64_t seed;
    fz_budget budget;
    int determinism;            /* run each case twice and compare bitwise (default 1); N >= 2: also stress
                                   mode, N runs of the many-CTA case under load (fz_run.h) */
    int status_line;            /* print the live status line to stderr */
    int quiet;                  /* no per-finding lines */
    int omp_threads;            /* > 0: each worker calls omp_set_num_threads(omp_threads) before its
                                   first case (OMP_NUM_THREADS set by the caller after program start
                                   is not seen: libgomp reads it when it loads); 0: leave as is */
    int device_lock;            /* 1: the workers take turns on the device (fz_devlock.h): every device
                                   section of a case runs holding the campaign's lock; 0: none */
    const char *device_lock_path; /* with device_lock: a lock file shared with other processes, or
                                   NULL: a lock private to this campaign */
    int device_wait;            /* > 0: how each worker's CUDA synchronizations wait (check.h fc_device_wait,
                                   set before its first CUDA call); 0: CUDA's default */
} fz_camp_cfg;

typedef struct {
    int64_t execs;              /* executions (including unsupported ones) */
    int64_t cases;              /* executions that were checked (not skipped) */
    int64_t skipped;
    int64_t elements;           /* output elements compared with the oracle */
    int64_t findings_new, findings_dup;
    int64_t overflow;           /* overflow-sensitive cases (FINDINGS/overflow-sensitive/): NaN/Inf
                                   where the profile's own intermediates may overflow; not findings */
    int64_t crashes, hangs;     /* worker deaths recorded by the supervisor */
    int64_t slow;               /* cases killed at the timeout while in the HARNESS (oracle,
                                   checks), saved under FINDINGS/harness-slow/, not findings */
    int64_t corpus;             /* inputs added to the corpus by this campaign */
    /* harness events: never findings */
    int64_t findings_unsaved;   /* findings that could not be written (the campaign stops at the first;
                                   not counted in findings_new/dup; save_error says why) */
    int64_t corpus_unsaved;     /* corpus inputs that could not be written (kept in memory) */
    int64_t harness_errors;     /* cases the harness could not run (out of memory, ...) */
    int64_t external_kills;     /* workers killed from outside (SIGKILL/SIGTERM/SIGHUP/SIGINT/SIGQUIT) */
    int64_t timeouts_unconfirmed; /* cases past case_timeout_s that finished when re-run with 4x the limit */
    int stop_signal;            /* the signal that stopped the campaign, 0 if none */
    char save_error[512];       /* the first failed save: path and errno text */
    double worst_ratio;
    double check_s, backend_s;  /* worker seconds spent checking cases, and of them in the backend */
    double phase_s[FC_PH_COUNT]; /* check_s by phase of fc_check_case (check.h fc_check_phase_seconds) */
    double work;                /* sum over checked cases of B*Hq*Sq*Sk*max(Dqk, Dv) (fz_camp_case_work) */
    int64_t backward_cases;     /* checked cases that ran the backward too */
    int64_t oracle_gpu, oracle_cpu; /* oracle calls (forward and backward) by the GPU / CPU tier */
    int64_t oracle_fallback;    /* GPU-tier calls that fell back to the CPU tier (harness events) */
    int64_t lock_sections;      /* device sections run holding the device lock */
    double lock_wait_s;         /* worker seconds waiting for the device lock (part of check_s; never
                                   counted toward a case's timeout) */
    double lock_held_s;         /* worker seconds holding it (at most the wall time: one holder) */
    int64_t wait_failed;        /* workers where CUDA refused cfg.device_wait */
    double seconds;
    double cases_per_s, execs_per_s;
    double startup_s;           /* from the start until every worker had finished a case (its process,
                                   backend, CUDA context started): 0 if that never happened */
    double warm_cases_per_s;    /* checked cases per second after startup_s (0 if none) */
} fz_camp_stats;

void fz_camp_cfg_default(fz_camp_cfg *cfg);

/* Default number of workers: one per online core, for host and CUDA backends alike
 * (CUDA workers share the GPUs round-robin; one worker per GPU leaves the GPU idle
 * while the oracle runs on the host), clamped to [1, FZ_CAMP_MAX_WORKERS]. */
int fz_camp_default_workers(long online_cores);

/* The size of a case as the campaign reports it: B*Hq*Sq*Sk*max(Dqk, Dv),
 * the same product fz_case_fit keeps under budget.max_work. */
double fz_camp_case_work(const fc_case *c);

/* Run the campaign until the time or case limit, or SIGINT/SIGTERM.
 * Returns 0 when it ran (see stats->findings_new), -1 with msg on setup errors. */
int fz_camp_run(const fz_camp_cfg *cfg, fz_camp_stats *stats, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_CAMPAIGN_H */
