/* fz_isolate.h: run one case in a child process with a watchdog (prefix
 * fz_iso_), so a kernel fault (illegal address, launch failure, a segfault in
 * a third-party .so) or a hang becomes a result instead of killing the caller.
 *
 * The child is forked, resolves the backend BY NAME itself (so the parent
 * never initializes CUDA, which does not survive fork), runs fz_run_case and
 * writes the result through a pipe. The parent waits at most timeout_s:
 *   - child exits normally   -> its result
 *   - child killed by signal -> FZ_OUT_CRASH, failure "crash:SEGV" (etc., the signal abbreviation);
 *                               killed from outside (fz_iso_external_signal) -> FZ_OUT_ERROR,
 *                               failure "killed" (a harness event, not a finding)
 *   - timeout                -> child SIGKILLed, FZ_OUT_HANG, failure "hang"
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_ISOLATE_H
#define FLASHCHECK_FZ_ISOLATE_H

#include "case/case.h"
#include "fuzz/fz_run.h"

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Shortest per-case watchdog the commands accept (seconds). A shorter limit
 * kills cases that are merely starting up (process start, a CUDA context) and
 * would report them as hangs. */
#define FZ_ISO_MIN_TIMEOUT_S 1.0

/* Call first in a freshly forked child of `parent`: the child dies with its
 * parent (PR_SET_PDEATHSIG SIGKILL, and an immediate exit when the parent died
 * before that call: getppid() no longer `parent`), signal dispositions and the
 * signal mask inherited from the parent are reset to the defaults (a parent's
 * handler would otherwise make the child ignore SIGTERM/SIGHUP). */
void fz_iso_child_init(pid_t parent);

/* 1 when a child that died of signal sig was killed FROM OUTSIDE: SIGKILL,
 * SIGTERM, SIGHUP, SIGINT, SIGQUIT are what users, the OOM killer and service
 * managers send, and the watchdogs here reap the children they kill themselves,
 * so such a death is a harness event (retried or reported as such), never a
 * backend finding. 0 for the signals a process brings on itself (SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, ...): backend crashes. */
int fz_iso_external_signal(int sig);

/* backend_name: "cpu", "cuda", a .so path, or NULL for fa_backend_default().
 * timeout_s <= 0: no limit. Always fills r (r->klass says what happened). */
void fz_iso_run(const char *backend_name, const fc_case *c, int determinism, double timeout_s,
                fz_run_result *r, fz_feat *f);

/* A batch of jobs run by ONE worker process with a watchdog (a CUDA context
 * is set up once, not per case). A job is a case and what to do with it:
 * prop < 0: the full check (fz_run_case); prop >= 0: property number prop of
 * fc_prop_table (properties/properties.h). The worker streams one result per
 * job; when it dies or a job exceeds timeout_s, that job gets a CRASH/HANG
 * result and a fresh worker continues with the next job. cb is called once
 * per job, in order. Returns the number of worker restarts. */
typedef struct {
    fc_case c;
    int prop;
    int determinism;   /* 0, 1, or N >= 2: stress mode with N runs (fz_run.h) */
} fz_iso_job;
typedef void (*fz_iso_cb)(void *user, int64_t index, const fz_run_result *r);
int fz_iso_batch(const char *backend_name, const fz_iso_job *jobs, int64_t n, double timeout_s,
                 fz_iso_cb cb, void *user);

/* Resolve a backend by name (NULL: default) in this process; on failure print
 * "flashcheck: backend NAME: message" to stderr and return NULL. */
const fa_backend *fz_iso_backend(const char *backend_name);

/* Ask a forked child which backend `backend_name` resolves to and its limits,
 * without touching CUDA in this process. 0 on success (name, limits, has_backward
 * filled), -1 with msg. */
int fz_iso_probe(const char *backend_name, char *name, size_t namelen, fa_limits *lim,
                 fa_memspace *mem, int *has_backward, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_ISOLATE_H */
