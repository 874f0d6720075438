/* fz_isolate.c: see fz_isolate.h. */
#define _GNU_SOURCE
#include "fuzz/fz_isolate.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const fa_backend *fz_iso_backend(const char *backend_name)
{
    if (!backend_name) return fa_backend_default();
    const fa_backend *be = NULL;
    fa_error err;
    memset(&err, 0, sizeof err);
    if (fa_backend_by_name(backend_name, &be, &err) != FA_OK || !be) {
        fprintf(stderr, "flashcheck: backend '%s': %s\n", backend_name, err.msg);
        return NULL;
    }
    return be;
}

static void fail_result(fz_run_result *r, int klass, const char *failure, const char *detail, const fc_case *c);

void fz_iso_child_init(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);   /* the parent died before prctl: nobody waits for us */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

int fz_iso_external_signal(int sig)
{
    return sig == SIGKILL || sig == SIGTERM || sig == SIGHUP || sig == SIGINT || sig == SIGQUIT;
}

/* a child that died of signal sig: a crash finding, or a harness event (killed from outside) */
static void signal_result(fz_run_result *r, int sig, const char *who, const fc_case *c)
{
    char failure[32], d[220];
    const char *ab = sigabbrev_np(sig);
    if (fz_iso_external_signal(sig)) {
        snprintf(d, sizeof d, "harness: %s was killed from outside by signal %d (%s): not a backend fault "
                 "(a user, the OOM killer or a service manager); run the case again", who, sig, strsignal(sig));
        fail_result(r, FZ_OUT_ERROR, "killed", d, c);
        return;
    }
    snprintf(failure, sizeof failure, "crash:%s", ab ? ab : "SIG?");
    snprintf(d, sizeof d, "%s was killed by signal %d (%s)", who, sig, strsignal(sig));
    fail_result(r, FZ_OUT_CRASH, failure, d, c);
}

/* write all / read all with EINTR handling */
static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        p += w; n -= (size_t)w;
    }
    return 0;
}

/* read up to n bytes before `deadline` (0: none); returns bytes read, -2 on timeout */
static ssize_t read_until(int fd, void *buf, size_t n, double deadline)
{
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        int ms = -1;
        if (deadline > 0) {
            double left = deadline - fc_clock_s();
            if (left <= 0) return -2;
            ms = (int)(left * 1000) + 1;
        }
        struct pollfd pfd = { fd, POLLIN, 0 };
        int r = poll(&pfd, 1, ms);
        if (r < 0) { if (errno == EINTR) continue; return (ssize_t)got; }
        if (r == 0) return -2;
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0) { if (errno == EINTR) continue; return (ssize_t)got; }
        if (k == 0) return (ssize_t)got;   /* EOF: the child is gone */
        got += (size_t)k;
    }
    return (ssize_t)got;
}

typedef struct {
    fz_run_result r;
    fz_feat f;
} iso_msg;

/* one shared int per isolated run: where the child is (fz_run.h FZ_PHASE_*) */
static volatile int *shared_phase(void)
{
    static volatile int *p;
    if (!p) {
        void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        p = m == MAP_FAILED ? NULL : (volatile int *)m;
    }
    if (p) *p = FZ_PHASE_IDLE;
    return p;
}

/* a timeout: a hang of the backend, or a slow harness */
static void timeout_result(fz_run_result *r, int phase, double timeout_s, const fc_case *c)
{
    char d[200];
    if (phase == FZ_PHASE_BACKEND) {
        snprintf(d, sizeof d, "the backend call ran longer than %.1f s and was killed (hang)", timeout_s);
        fail_result(r, FZ_OUT_HANG, "hang", d, c);
    } else {
        snprintf(d, sizeof d, "the harness (oracle/checks, not the backend) ran longer than %.1f s; killed", timeout_s);
        fail_result(r, FZ_OUT_SLOW, "harness_slow", d, c);
    }
}

static void fail_result(fz_run_result *r, int klass, const char *failure, const char *detail, const fc_case *c)
{
    memset(r, 0, sizeof *r);
    fc_verdict_init(&r->v);
    r->klass = klass;
    r->v.outcome = FC_FAIL;
    snprintf(r->failure, sizeof r->failure, "%s", failure);
    snprintf(r->pass, sizeof r->pass, "%s", c->backward ? "bwd" : "fwd");
    snprintf(r->tensor, sizeof r->tensor, "-");
    snprintf(r->detail, sizeof r->detail, "%s", detail);
}

void fz_iso_run(const char *backend_name, const fc_case *c, int determinism, double timeout_s,
                fz_run_result *r, fz_feat *f)
{
    int fds[2];
    if (pipe(fds) != 0) {
        fail_result(r, FZ_OUT_ERROR, "harness", "pipe() failed", c);
        return;
    }
    volatile int *phase = shared_phase();
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]); close(fds[1]);
        fail_result(r, FZ_OUT_ERROR, "harness", "fork() failed", c);
        return;
    }
    if (pid == 0) {
        fz_iso_child_init(parent);
        close(fds[0]);
        fz_run_set_phase_hook(phase);
        iso_msg *m = calloc(1, sizeof *m);
        const fa_backend *be = fz_iso_backend(backend_name);
        if (!be || !m) _exit(3);
        if (f) m->f = *f;
        fz_run_case(be, c, determinism, &m->r, f ? &m->f : NULL);
        int rc = write_all(fds[1], m, sizeof *m) == 0 ? 0 : 4;
        _exit(rc);
    }
    close(fds[1]);
    iso_msg *m = calloc(1, sizeof *m);
    double deadline = timeout_s > 0 ? fc_clock_s() + timeout_s : 0;
    ssize_t got = m ? read_until(fds[0], m, sizeof *m, deadline) : -1;
    close(fds[0]);
    int status = 0;
    if (got == -2) {
        int ph = phase ? *phase : FZ_PHASE_BACKEND;
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        timeout_result(r, ph, timeout_s, c);
    } else {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        if (got == (ssize_t)sizeof *m && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            *r = m->r;
            if (f) *f = m->f;
        } else if (WIFSIGNALED(status)) {
            signal_result(r, WTERMSIG(status), "the process running the case", c);
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
            fail_result(r, FZ_OUT_ERROR, "backend", "the backend could not be loaded in the child process", c);
        } else {
            char d[128];
            snprintf(d, sizeof d, "the process running the case exited with status %d before reporting",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            fail_result(r, FZ_OUT_CRASH, "crash:exit", d, c);
        }
    }
    free(m);
}

typedef struct {
    char name[64];
    fa_limits lim;
    fa_memspace mem;
    int has_backward;
    int ok;
    char msg[256];
} probe_msg;

int fz_iso_probe(const char *backend_name, char *name, size_t namelen, fa_limits *lim,
                 fa_memspace *mem, int *has_backward, char *msg, size_t msglen)
{
    int fds[2];
    if (pipe(fds) != 0) { snprintf(msg, msglen, "pipe() failed"); return -1; }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) { close(fds[0]); close(fds[1]); snprintf(msg, msglen, "fork() failed"); return -1; }
    if (pid == 0) {
        fz_iso_child_init(parent);
        close(fds[0]);
        probe_msg p;
        memset(&p, 0, sizeof p);
        const fa_backend *be = NULL;
        fa_error err;
        memset(&err, 0, sizeof err);
        if (!backend_name) be = fa_backend_default();
        else if (fa_backend_by_name(backend_name, &be, &err) != FA_OK) be = NULL;
        if (be) {
            p.ok = 1;
            snprintf(p.name, sizeof p.name, "%s", be->name);
            p.lim = be->limits;
            p.mem = be->memspace;
            p.has_backward = be->backward != NULL;
        } else {
            snprintf(p.msg, sizeof p.msg, "%s", err.msg[0] ? err.msg : "no backend");
        }
        _exit(write_all(fds[1], &p, sizeof p) == 0 ? 0 : 4);
    }
    close(fds[1]);
    probe_msg p;
    memset(&p, 0, sizeof p);
    ssize_t got = read_until(fds[0], &p, sizeof p, fc_clock_s() + 120);
    close(fds[0]);
    if (got == -2) kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof p) { snprintf(msg, msglen, "the backend probe process failed (crashed or hung while loading the backend)"); return -1; }
    if (!p.ok) { snprintf(msg, msglen, "%s", p.msg); return -1; }
    snprintf(name, namelen, "%s", p.name);
    if (lim) *lim = p.lim;
    if (mem) *mem = p.mem;
    if (has_backward) *has_backward = p.has_backward;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* batches: one worker, a watchdog per job                                   */

#include "properties/properties.h"

typedef struct {
    int64_t index;
    fz_run_result r;
} batch_msg;

static void batch_child(const char *backend_name, const fz_iso_job *jobs, int64_t from, int64_t n, int fd,
                        volatile int *phase)
{
    fz_run_set_phase_hook(phase);
    const fa_backend *be = fz_iso_backend(backend_name);
    if (!be) _exit(3);
    batch_msg *m = calloc(1, sizeof *m);
    fc_verdict *v = calloc(1, sizeof *v);
    if (!m || !v) _exit(4);
    for (int64_t i = from; i < n; i++) {
        m->index = i;
        const fz_iso_job *j = &jobs[i];
        if (j->prop < 0 || j->prop >= fc_prop_count()) {
            fz_run_case(be, &j->c, j->determinism, &m->r, NULL);
        } else {
            fc_verdict_init(v);
            fc_prop_table[j->prop].fn(be, &j->c, v);
            fz_run_classify(&j->c, v, &m->r, NULL);
        }
        if (write_all(fd, m, sizeof *m) != 0) _exit(4);
        if (m->r.klass == FZ_OUT_DEVICE) _exit(0);   /* device context is gone: restart */
    }
    _exit(0);
}

int fz_iso_batch(const char *backend_name, const fz_iso_job *jobs, int64_t n, double timeout_s,
                 fz_iso_cb cb, void *user)
{
    int restarts = 0;
    int64_t next = 0;
    batch_msg *m = calloc(1, sizeof *m);
    if (!m) return -1;
    while (next < n) {
        int fds[2];
        if (pipe(fds) != 0) break;
        volatile int *phase = shared_phase();
        fflush(stdout);
        fflush(stderr);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) { close(fds[0]); close(fds[1]); break; }
        if (pid == 0) {
            fz_iso_child_init(parent);
            close(fds[0]);
            batch_child(backend_name, jobs, next, n, fds[1], phase);
        }
        close(fds[1]);
        int died = 0;
        while (next < n) {
            double deadline = timeout_s > 0 ? fc_clock_s() + timeout_s : 0;
            ssize_t got = read_until(fds[0], m, sizeof *m, deadline);
            if (got == (ssize_t)sizeof *m && m->index == next) {
                cb(user, next, &m->r);
                next++;
                if (m->r.klass == FZ_OUT_DEVICE) { died = 1; break; }
                continue;
            }
            /* the job `next` hung or the worker died while running it */
            fz_run_result r;
            int status = 0;
            if (got == -2) {
                int ph = phase ? *phase : FZ_PHASE_BACKEND;
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                timeout_result(&r, ph, timeout_s, &jobs[next].c);
            } else {
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
                if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
                    fail_result(&r, FZ_OUT_ERROR, "backend", "the worker could not load the backend", &jobs[next].c);
                } else if (WIFSIGNALED(status)) {
                    signal_result(&r, WTERMSIG(status), "the worker running the job", &jobs[next].c);
                } else {
                    char d[128];
                    snprintf(d, sizeof d, "the worker exited with status %d while running the job",
                             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
                    fail_result(&r, FZ_OUT_CRASH, "crash:exit", d, &jobs[next].c);
                }
            }
            cb(user, next, &r);
            next++;
            pid = -1;
            died = 1;
            break;
        }
        close(fds[0]);
        if (pid > 0) {
            int status;
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        }
        if (died && next < n) restarts++;
    }
    free(m);
    return restarts;
}
