/* fz_devlock.c: see fz_devlock.h. */
#define _GNU_SOURCE
#include "fuzz/fz_devlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fuzz/fz_run.h"

int fz_lock_file(const char *path, char *msg, size_t msglen)
{
    int fd = path ? open(path, O_RDWR | O_CREAT, 0600) : memfd_create("flashcheck-device-lock", 0);
    if (fd < 0)
        snprintf(msg, msglen, "cannot create the device lock %s: %s", path ? path : "(memfd)", strerror(errno));
    return fd;
}

int fz_lock_open(fz_lock *l, const char *path, int fd, char *msg, size_t msglen)
{
    memset(l, 0, sizeof *l);
    char self[64];
    if (!path) {
        /* a new open file description of the same file: flock locks belong to descriptions, and
           the one inherited from the supervisor is shared by every worker */
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        path = self;
    }
    l->fd = open(path, O_RDWR | O_CLOEXEC);
    if (l->fd < 0) {
        snprintf(msg, msglen, "cannot open the device lock %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

void fz_lock_close(fz_lock *l)
{
    if (l->fd >= 0) close(l->fd);   /* releases the lock if held */
    l->fd = -1;
    l->depth = 0;
}

void fz_lock_acquire(fz_lock *l)
{
    if (l->fd < 0 || l->depth++ > 0) return;
    int64_t t0 = fc_clock_ns();
    int prev = FZ_PHASE_IDLE;
    if (l->phase) {
        prev = __atomic_load_n(l->phase, __ATOMIC_ACQUIRE);
        __atomic_store_n(l->phase, FZ_PHASE_WAIT, __ATOMIC_SEQ_CST);
    }
    while (flock(l->fd, LOCK_EX) != 0 && errno == EINTR) {}
    int64_t t1 = fc_clock_ns();
    /* the wait is not the case's time: move its start by as much, then leave the wait phase
       (the watchdog reads the phase first: past FZ_PHASE_WAIT it sees the moved start) */
    if (l->start_ns) __atomic_add_fetch(l->start_ns, t1 - t0, __ATOMIC_SEQ_CST);
    if (l->phase) __atomic_store_n(l->phase, prev, __ATOMIC_SEQ_CST);
    l->wait_s += (double)(t1 - t0) * 1e-9;
    l->t_acquired = t1;
    l->n++;
}

void fz_lock_release(fz_lock *l)
{
    if (l->fd < 0 || l->depth <= 0 || --l->depth > 0) return;
    l->held_s += (double)(fc_clock_ns() - l->t_acquired) * 1e-9;
    flock(l->fd, LOCK_UN);
}

void fz_lock_gate_enter(void *user) { fz_lock_acquire((fz_lock *)user); }
void fz_lock_gate_leave(void *user) { fz_lock_release((fz_lock *)user); }
