/* fz_devlock_test.c: the campaign's device lock (fuzz/fz_devlock.h) and the check
 * library's device gate (properties/check/check.h fc_device_gate), on the CPU:
 *   devlock_excludes              a second process blocks while the first holds the lock;
 *   devlock_sigkill_holder_releases a holder killed with SIGKILL releases it: the waiting
 *                                 process gets the lock (a crashed worker never blocks the others);
 *   devlock_wait_phase            while blocked, the phase word reads FZ_PHASE_WAIT, and the
 *                                 time waited moves the case's start (the watchdog's timer) by
 *                                 as much; the phase is restored after;
 *   devlock_nested                nested acquires lock once and release at the outermost;
 *   gate_wraps_every_backend_call fc_check_case (forward, backward, determinism run) calls the
 *                                 backend only between the gate's enter and leave, balanced. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz/fz_devlock.h"
#include "fuzz/fz_run.h"
#include "properties/check/check.h"
#include "properties/check/tests/check_test.h"


/* a byte from fd within ms milliseconds: 1 got, 0 timeout, -1 EOF/error */
static int wait_byte(int fd, int ms)
{
    struct pollfd p = { fd, POLLIN, 0 };
    int r;
    while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR) {}
    if (r == 0) return 0;
    char b;
    return read(fd, &b, 1) == 1 ? 1 : -1;
}

/* fork a process that opens the lock, takes it, writes a byte to `out`, then holds it for hold_ms
 * (-1: until killed) */
static pid_t locker(int lockfd, int out, int hold_ms)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    fz_lock l;
    char msg[256];
    if (fz_lock_open(&l, NULL, lockfd, msg, sizeof msg) != 0) _exit(2);
    fz_lock_acquire(&l);
    if (write(out, "x", 1) != 1) _exit(3);
    if (hold_ms < 0) for (;;) pause();
    usleep((useconds_t)hold_ms * 1000);
    fz_lock_release(&l);
    _exit(0);
}

static void test_kill_releases(void)
{
    char msg[256];
    int fd = fz_lock_file(NULL, msg, sizeof msg);
    CHECK(fd >= 0, "fz_lock_file: %s", msg);
    int pa[2], pb[2];
    if (pipe(pa) || pipe(pb)) { CHECK(0, "pipe"); return; }
    pid_t a = locker(fd, pa[1], -1);
    CHECK(wait_byte(pa[0], 5000) == 1, "devlock_excludes: the first process did not get the free lock");
    pid_t b = locker(fd, pb[1], 0);
    CHECK(wait_byte(pb[0], 500) == 0, "devlock_excludes: the second process got the lock while the first held it");
    kill(a, SIGKILL);
    int st;
    waitpid(a, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the holder was not killed by SIGKILL");
    CHECK(wait_byte(pb[0], 5000) == 1,
          "devlock_sigkill_holder_releases: the waiting process did not get the lock after its holder was SIGKILLed");
    waitpid(b, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the second locker exited with %d", st);
    close(pa[0]); close(pa[1]); close(pb[0]); close(pb[1]);
    close(fd);
}

static void test_wait_phase(void)
{
    char msg[256];
    int fd = fz_lock_file(NULL, msg, sizeof msg);
    int p[2];
    if (fd < 0 || pipe(p)) { CHECK(0, "setup"); return; }
    /* the holder keeps it 600 ms */
    pid_t a = locker(fd, p[1], 600);
    CHECK(wait_byte(p[0], 5000) == 1, "the holder did not get the lock");
    /* shared words the test reads from another process while this one waits */
    volatile int *phase = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    volatile int64_t *start = (volatile int64_t *)(phase + 16);
    *phase = FZ_PHASE_HARNESS;
    int64_t t0 = fc_clock_ns();
    *start = t0;
    pid_t watcher = fork();
    if (watcher == 0) {   /* sees FZ_PHASE_WAIT within the holder's 600 ms */
        int64_t end = fc_clock_ns() + 500000000LL;
        while (fc_clock_ns() < end)
            if (*phase == FZ_PHASE_WAIT) _exit(0);
        _exit(1);
    }
    fz_lock l;
    CHECK(fz_lock_open(&l, NULL, fd, msg, sizeof msg) == 0, "open: %s", msg);
    l.phase = phase;
    l.start_ns = start;
    fz_lock_acquire(&l);
    int64_t t1 = fc_clock_ns();
    int st;
    waitpid(watcher, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "devlock_wait_phase: the phase never read FZ_PHASE_WAIT while blocked");
    CHECK(*phase == FZ_PHASE_HARNESS, "devlock_wait_phase: phase %d after the wait, not restored", *phase);
    double waited = (double)(*start - t0) * 1e-9;
    CHECK(waited > 0.3 && waited <= (double)(t1 - t0) * 1e-9 + 1e-6,
          "devlock_wait_phase: the case's start moved by %.3f s for a wait of %.3f s", waited, (double)(t1 - t0) * 1e-9);
    CHECK(l.n == 1 && l.wait_s > 0.3, "devlock_wait_phase: stats n %lld wait %.3f", (long long)l.n, l.wait_s);
    /* nested: the inner acquire does not deadlock, the inner release keeps it */
    fz_lock_acquire(&l);
    fz_lock_release(&l);
    pid_t b = locker(fd, p[1], 0);
    CHECK(wait_byte(p[0], 300) == 0, "devlock_nested: the inner release released the lock");
    fz_lock_release(&l);
    CHECK(wait_byte(p[0], 5000) == 1, "devlock_nested: the outermost release did not release the lock");
    CHECK(l.n == 1, "devlock_nested: %lld sections counted, 1 expected", (long long)l.n);
    waitpid(a, &st, 0);
    waitpid(b, &st, 0);
    fz_lock_close(&l);
    close(fd);
}

/* the gate around backend calls */
static int gate_depth, gate_enters, gate_leaves, calls_outside, calls;
static const fa_backend *real;
static void g_enter(void *u) { (void)u; gate_depth++; gate_enters++; }
static void g_leave(void *u) { (void)u; gate_depth--; gate_leaves++; }
static fa_status w_fwd(const fa_fwd_args *a, fa_error *e) { calls++; calls_outside += gate_depth != 1; return real->forward(a, e); }
static fa_status w_bwd(const fa_bwd_args *a, fa_error *e) { calls++; calls_outside += gate_depth != 1; return real->backward(a, e); }

static void test_gate(void)
{
    real = fa_backend_cpu();
    fa_backend w = *real;
    w.forward = w_fwd;
    w.backward = w_bwd;
    fc_device_gate g = { g_enter, g_leave, NULL };
    fc_run_set_device_gate(&g);
    fc_case c;
    fc_case_default(&c);
    c.p.batch = 1; c.p.heads_q = 2; c.p.heads_kv = 1; c.p.seqlen_q = 17; c.p.seqlen_k = 33;
    c.p.head_dim_qk = c.p.head_dim_v = 16;
    c.backward = 1;
    fc_check_opts o;
    fc_check_opts_default(&o);
    o.determinism = 1;
    fc_verdict v;
    fc_outcome out = fc_check_case(&w, &c, &o, &v);
    fc_run_set_device_gate(NULL);
    CHECK(out == FC_PASS, "the case did not pass (%d)", (int)out);
    CHECK(calls == 4, "gate_wraps_every_backend_call: %d backend calls, 4 expected (fwd, bwd, twice)", calls);
    CHECK(calls_outside == 0, "gate_wraps_every_backend_call: %d backend calls outside the gate", calls_outside);
    CHECK(gate_enters == gate_leaves && gate_depth == 0 && gate_enters >= calls,
          "gate_wraps_every_backend_call: %d enters, %d leaves", gate_enters, gate_leaves);
}

int main(void)
{
    test_kill_releases();
    test_wait_phase();
    test_gate();
    printf("fz_devlock_test: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
