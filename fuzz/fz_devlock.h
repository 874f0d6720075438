/* fz_devlock.h: the device lock of a fuzz campaign (prefix fz_lock_, `fuzz --device-lock
 * on|FILE`): the worker processes of a campaign take turns on the device instead of
 * time-slicing it (one CUDA context per process). Off by default: on an H100 host each
 * hand-over costs a GPU context switch, and small calls run slower in turns than
 * time-sliced (fuzz/RESULTS-2026-11-25-rate2.md); it serves campaigns that share one
 * GPU with other processes (FILE), or large calls.
 *
 * The lock is an exclusive flock(2) on a file: the campaign's own anonymous file
 * (fz_lock_file(NULL): a memfd, each worker opening it afresh through
 * /proc/self/fd so that each has its own open file description), or a named file
 * that other processes may lock too (one lock for several campaigns on one GPU).
 * The kernel releases it when its holder dies, however it dies (SIGKILL included),
 * so a crashed or killed worker never blocks the others. Waiting blocks in the
 * kernel (no spinning).
 *
 * A worker installs fz_lock_gate as the check library's device gate (check.h
 * fc_device_gate): every device section (the mirrors' copies, the backend call, the
 * copy-back, the GPU oracle tier) runs holding the lock. While it waits, the phase
 * word the campaign's watchdog reads says FZ_PHASE_WAIT, and the time waited is
 * added to the case's start time when the lock is taken: a case is never timed out
 * (reported as a hang or a slow harness) for time spent waiting for the device.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_DEVLOCK_H
#define FLASHCHECK_FZ_DEVLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int fd;                   /* this process's open file description of the lock file, -1: none */
    int depth;                /* nested fz_lock_acquire calls (only the outermost locks) */
    volatile int *phase;      /* the watchdog's phase word (fz_run.h FZ_PHASE_*), or NULL */
    volatile int64_t *start_ns; /* the case's start (CLOCK_MONOTONIC ns) the watchdog times, or NULL */
    int64_t t_acquired;       /* when the outermost acquire got the lock */
    /* totals since fz_lock_open */
    int64_t n;                /* sections (outermost acquires) */
    double wait_s, held_s;    /* seconds waiting for the lock, and holding it */
} fz_lock;

/* Create the campaign's lock file: path NULL: an anonymous file (memfd); else path
 * (created if missing, never truncated). Returns its descriptor (close-on-exec off:
 * forked workers inherit it), or -1 with msg. */
int fz_lock_file(const char *path, char *msg, size_t msglen);

/* In a process that will lock: open its own description of the lock file (path, or
 * the inherited descriptor fd of fz_lock_file(NULL) when path is NULL). 0 or -1 with msg. */
int fz_lock_open(fz_lock *l, const char *path, int fd, char *msg, size_t msglen);
void fz_lock_close(fz_lock *l);

/* Block until this process holds the lock (retrying on EINTR); nested calls count.
 * While blocked, *l->phase is FZ_PHASE_WAIT (restored after), and the time blocked is
 * added to *l->start_ns before the phase is restored. */
void fz_lock_acquire(fz_lock *l);
void fz_lock_release(fz_lock *l);

/* fc_device_gate hooks (user: an fz_lock *). */
void fz_lock_gate_enter(void *user);
void fz_lock_gate_leave(void *user);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_DEVLOCK_H */
