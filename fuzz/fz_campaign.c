/* fz_campaign.c: see fz_campaign.h. */
#define _GNU_SOURCE
#include "fuzz/fz_campaign.h"

#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fuzz/fz_devlock.h"
#include "fuzz/fz_feat.h"
#include "fuzz/fz_isolate.h"
#include "fuzz/fz_run.h"
#include "fuzz/fz_store.h"

#define CAMP_TEXT_MAX 8192

/* ------------------------------------------------------------------------- */
/* shared memory: one slot per worker                                        */

typedef struct {
    /* written by the worker */
    int64_t execs, cases, skipped, elements, findings_new, findings_dup, corpus_added;
    int64_t overflow;           /* overflow-sensitive cases (saved under FINDINGS/overflow-sensitive/) */
    double worst_ratio;
    double total_s, backend_s;  /* time in checks, and of it inside the backend */
    double phase_s[FC_PH_COUNT]; /* time in checks by phase (fc_check_phase_seconds) */
    double work;                /* sum of fz_camp_case_work over checked cases */
    int64_t backward_cases;     /* checked cases with the backward */
    int64_t oracle_gpu, oracle_cpu, oracle_fallback; /* oracle calls by tier (fc_oracle_counts) */
    int64_t lock_n;             /* device lock: sections, seconds waiting and holding (fz_lock) */
    double lock_wait_s, lock_held_s;
    int wait_failed;            /* CUDA refused cfg->device_wait in this slot's worker */
    int state;                  /* 0 idle, 1 running the case in `text` */
    int phase;                  /* FZ_PHASE_*: inside the backend or the harness */
    int64_t case_start_ns;      /* CLOCK_MONOTONIC when the case started */
    char backend[64];
    char text[CAMP_TEXT_MAX];   /* the in-flight case, complete before state = 1 */
    int64_t harness_errors;     /* cases the harness could not run (FZ_OUT_ERROR: out of memory, ...) */
    int64_t findings_unsaved;   /* findings that could not be written (not counted as findings) */
    int64_t corpus_unsaved;     /* corpus inputs that could not be written (kept in memory) */
    int64_t timeouts_unconfirmed; /* a re-run of a timed-out case finished: not a hang */
    int save_failed;            /* a finding could not be saved: the supervisor stops the campaign */
    char save_error[512];       /* the first such error (path and errno text) */
    fz_feat_map map;            /* features seen by this slot's workers: kept across restarts, so a
                                   replacement worker does not add what its predecessor had seen */
    /* written by the supervisor */
    int stop;
    int generation;             /* restarts of this slot */
    int confirm;                /* the next worker first re-runs `text`: CONFIRM_TIMEOUT (it ran past
                                   the timeout; a hang only if it does again with 4x the limit) or
                                   CONFIRM_KILLED (its worker was killed from outside) */
} camp_slot;

enum { CONFIRM_NONE = 0, CONFIRM_TIMEOUT = 1, CONFIRM_KILLED = 2 };
#define CAMP_CONFIRM_FACTOR 4.0   /* the confirming re-run's limit, times case_timeout_s */

/* the campaign's device lock file (fz_lock_file), inherited by the workers; -1: none */
static int camp_lock_fd = -1;

static volatile sig_atomic_t camp_interrupted;
static volatile sig_atomic_t camp_signal;
static void on_signal(int sig) { camp_signal = sig; camp_interrupted = 1; }

void fz_camp_cfg_default(fz_camp_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->workers = 1;
    cfg->corpus_dir = "fuzz-corpus";
    cfg->findings_dir = "findings";
    cfg->case_timeout_s = 60;
    cfg->seed = 1;
    fz_budget_default(&cfg->budget);
    cfg->determinism = 1;
    cfg->status_line = 1;
}

int fz_camp_default_workers(long online_cores)
{
    if (online_cores < 1) return 1;
    return online_cores > FZ_CAMP_MAX_WORKERS ? FZ_CAMP_MAX_WORKERS : (int)online_cores;
}

double fz_camp_case_work(const fc_case *c)
{
    const fa_problem *p = &c->p;
    int64_t d = p->head_dim_qk > p->head_dim_v ? p->head_dim_qk : p->head_dim_v;
    return (double)p->batch * (double)p->heads_q * (double)p->seqlen_q * (double)p->seqlen_k * (double)d;
}

/* ------------------------------------------------------------------------- */
/* worker: corpus                                                            */

typedef struct {
    char **text;
    size_t n, cap;
    /* names of corpus files already loaded (simple open hash of 64-bit name hashes) */
    uint64_t *seen;
    size_t seen_cap, seen_n;
} camp_corpus;

static uint64_t hash_str(const char *s, size_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 0x100000001B3ull; }
    return h ? h : 1;
}

static int seen_insert(camp_corpus *c, uint64_t h)
{
    if (c->seen_n * 2 >= c->seen_cap) {
        size_t cap = c->seen_cap ? 2 * c->seen_cap : 1024;
        uint64_t *ns = calloc(cap, sizeof *ns);
        for (size_t i = 0; i < c->seen_cap; i++)
            if (c->seen[i]) {
                size_t j = c->seen[i] % cap;
                while (ns[j]) j = (j + 1) % cap;
                ns[j] = c->seen[i];
            }
        free(c->seen);
        c->seen = ns;
        c->seen_cap = cap;
    }
    size_t j = h % c->seen_cap;
    while (c->seen[j]) { if (c->seen[j] == h) return 0; j = (j + 1) % c->seen_cap; }
    c->seen[j] = h;
    c->seen_n++;
    return 1;
}

static void corpus_add(camp_corpus *c, const char *text)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->text = realloc(c->text, c->cap * sizeof *c->text);
    }
    c->text[c->n++] = strdup(text);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(CAMP_TEXT_MAX);
    size_t n = fread(b, 1, CAMP_TEXT_MAX - 1, f);
    fclose(f);
    b[n] = 0;
    return b;
}

/* load every *.case of dir not loaded before */
static void corpus_scan(camp_corpus *c, const char *dir)
{
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || l < 6 || strcmp(e->d_name + l - 5, ".case") != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!seen_insert(c, hash_str(path, strlen(path)))) continue;
        char *t = read_text(path);
        if (t) { corpus_add(c, t); free(t); }
    }
    closedir(d);
}

/* ------------------------------------------------------------------------- */
/* worker                                                                    */

/* save a finding; counts it only when it is on disk; a save failure is a harness error that
   stops the campaign (flagged in the slot) */
static void worker_save(const fz_camp_cfg *cfg, camp_slot *slot, int index, const fa_backend *be,
                        const fc_case *c, const fz_run_result *r, const char *text)
{
    fz_crash_state st;
    fz_crash_state_make(&st, c, be->name, r->pass, r->tensor, r->failure);
    char path[4200], msg[512], state[256];
    int s = fz_store_save(cfg->findings_dir, &st, c, r->detail, path, sizeof path, msg, sizeof msg);
    fz_crash_state_format(&st, state, sizeof state);
    if (s == 1) {
        slot->findings_new++;
        if (!cfg->quiet) fprintf(stderr, "\nflashcheck fuzz: worker %d: NEW FINDING %s -> %s\n", index, state, path);
    } else if (s == 0) {
        slot->findings_dup++;
    } else {
        slot->findings_unsaved++;
        if (!slot->save_failed) snprintf(slot->save_error, sizeof slot->save_error, "%s", msg);
        __atomic_store_n(&slot->save_failed, 1, __ATOMIC_RELEASE);
        fprintf(stderr, "\nflashcheck fuzz: worker %d: HARNESS ERROR: finding %s NOT SAVED: %s; the campaign stops; "
                "its repro:\n%s\n", index, state, msg, text);
    }
}

/* the confirming re-run of a case that ran past the timeout or whose worker was killed from
   outside: its result is recorded like any other, but the case never enters the corpus */
static void worker_confirm(const fz_camp_cfg *cfg, camp_slot *slot, int index, const fa_backend *be)
{
    int why = slot->confirm;
    fc_case c;
    char msg[256];
    if (fc_case_parse(slot->text, &c, msg, sizeof msg) != 0) { slot->confirm = CONFIRM_NONE; return; }
    slot->case_start_ns = fc_clock_ns();
    __atomic_store_n(&slot->state, 1, __ATOMIC_RELEASE);
    fz_run_result r;
    fz_run_case(be, &c, cfg->determinism, &r, NULL);
    __atomic_store_n(&slot->state, 0, __ATOMIC_RELEASE);
    slot->confirm = CONFIRM_NONE;
    slot->execs++;
    if (r.klass == FZ_OUT_FAIL || r.klass == FZ_OUT_DEVICE) {
        slot->cases++;
        worker_save(cfg, slot, index, be, &c, &r, slot->text);
        if (r.klass == FZ_OUT_DEVICE) _exit(4);
    } else if (r.klass == FZ_OUT_ERROR) {
        slot->harness_errors++;
    } else if (why == CONFIRM_TIMEOUT) {
        slot->timeouts_unconfirmed++;
        fprintf(stderr, "\nflashcheck fuzz: worker %d: a case ran past --timeout %.1f s but finished in %.1f s when run "
                "again: not a hang (raise --timeout for cases this size)\n", index, cfg->case_timeout_s, r.total_s);
    }
}

static void worker_main(const fz_camp_cfg *cfg, camp_slot *slot, int index, pid_t supervisor)
{
    fz_iso_child_init(supervisor);     /* dies with the supervisor; default signal dispositions */
    signal(SIGINT, SIG_IGN);           /* a terminal's Ctrl-C reaches the whole group: the supervisor
                                          decides when to stop (SIGTERM/SIGHUP keep their defaults) */
    if (cfg->gpu[index]) setenv("CUDA_VISIBLE_DEVICES", cfg->gpu[index], 1);
    /* One OpenMP team size for the oracle and host backends of this worker:
       N workers x (cores by default) threads would oversubscribe the machine. */
    if (cfg->omp_threads > 0) omp_set_num_threads(cfg->omp_threads);
    /* Case buffers of a few MB come and go every case: keep them in the heap
       (no mmap per allocation, no trimming) instead of faulting fresh pages in each time. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    if (cfg->device_wait > 0 && fc_run_device_wait((fc_device_wait)cfg->device_wait) != 0) slot->wait_failed = 1;
    const fa_backend *be = fz_iso_backend(cfg->backend);
    if (!be) _exit(3);
    fz_run_set_phase_hook(&slot->phase);
    static fz_lock lock;   /* the device gate's state: lives as long as the process */
    lock.fd = -1;
    if (cfg->device_lock) {
        char msg[512];
        if (fz_lock_open(&lock, cfg->device_lock_path, camp_lock_fd, msg, sizeof msg) != 0) {
            fprintf(stderr, "\nflashcheck fuzz: worker %d: %s\n", index, msg);
            _exit(3);
        }
        lock.phase = &slot->phase;
        lock.start_ns = (volatile int64_t *)&slot->case_start_ns;
        fc_device_gate g = { fz_lock_gate_enter, fz_lock_gate_leave, &lock };
        fc_run_set_device_gate(&g);
    }
    snprintf(slot->backend, sizeof slot->backend, "%s", be->name);
    int has_bwd = be->backward != NULL;

    fz_rng rng;
    fz_rng_seed(&rng, cfg->seed * 1000003u + (uint64_t)index * 7919u + (uint64_t)slot->generation * 104729u);
    camp_corpus corpus;
    memset(&corpus, 0, sizeof corpus);
    corpus_scan(&corpus, cfg->corpus_dir);
    corpus_scan(&corpus, cfg->seeds_dir);
    fz_feat_map *map = &slot->map;
    int64_t last_scan = fc_clock_ns();
    char *text = malloc(CAMP_TEXT_MAX);
    if (slot->confirm != CONFIRM_NONE) worker_confirm(cfg, slot, index, be);
    int error_lines = 0;
    fc_oracle_counts oc_prev;
    fc_oracle_counts_get(&oc_prev);
    double ph_prev[FC_PH_COUNT];
    fc_check_phase_seconds(ph_prev);
    fz_lock lock_prev = lock;

    while (!__atomic_load_n(&slot->stop, __ATOMIC_ACQUIRE)) {
        /* next case */
        fc_case c;
        uint64_t pick = fz_rng_below(&rng, 16);
        if (corpus.n == 0 || pick == 0) {
            fz_case_random(&rng, &c);
            fz_case_stretch(&rng, &c, &cfg->budget);
        } else if (pick == 1 && corpus.n > 1) {
            fc_case a, b;
            const char *ta = corpus.text[fz_rng_below(&rng, corpus.n)], *tb = corpus.text[fz_rng_below(&rng, corpus.n)];
            fz_case_from_input((const uint8_t *)ta, strlen(ta), &cfg->budget, &be->limits, has_bwd, &a);
            fz_case_from_input((const uint8_t *)tb, strlen(tb), &cfg->budget, &be->limits, has_bwd, &b);
            fz_case_crossover(&rng, &a, &b, &c);
        } else {
            const char *t = corpus.text[fz_rng_below(&rng, corpus.n)];
            fz_case_from_input((const uint8_t *)t, strlen(t), &cfg->budget, &be->limits, has_bwd, &c);
            fz_case_mutate(&rng, &c);
            fz_case_stretch(&rng, &c, &cfg->budget);
        }
        fz_case_fit(&c, &cfg->budget, &be->limits, has_bwd);
        size_t tl = fc_case_write(&c, text, CAMP_TEXT_MAX);
        if (tl >= CAMP_TEXT_MAX) continue;

        /* publish the in-flight case, then run it */
        memcpy(slot->text, text, tl + 1);
        slot->case_start_ns = fc_clock_ns();
        __atomic_store_n(&slot->state, 1, __ATOMIC_RELEASE);
        fz_feat f;
        fz_feat_clear(&f);
        fz_run_result r;
        fz_run_case(be, &c, cfg->determinism, &r, &f);
        __atomic_store_n(&slot->state, 0, __ATOMIC_RELEASE);

        /* account */
        {
            fc_oracle_counts oc;
            fc_oracle_counts_get(&oc);
            slot->oracle_gpu += oc.gpu - oc_prev.gpu;
            slot->oracle_cpu += oc.cpu - oc_prev.cpu;
            slot->oracle_fallback += oc.fallback - oc_prev.fallback;
            oc_prev = oc;
            double ph[FC_PH_COUNT];
            fc_check_phase_seconds(ph);
            for (int k = 0; k < FC_PH_COUNT; k++) slot->phase_s[k] += ph[k] - ph_prev[k];
            memcpy(ph_prev, ph, sizeof ph);
            slot->lock_n += lock.n - lock_prev.n;        /* deltas: the slot's totals outlive restarts */
            slot->lock_wait_s += lock.wait_s - lock_prev.wait_s;
            slot->lock_held_s += lock.held_s - lock_prev.held_s;
            lock_prev = lock;
        }
        slot->execs++;
        if (r.klass == FZ_OUT_SKIP) slot->skipped++;
        else {
            slot->cases++;
            slot->work += fz_camp_case_work(&c);
            slot->backward_cases += c.backward != 0;
        }
        slot->elements += r.elements;
        slot->total_s += r.total_s;
        if (r.backend_s > 0) slot->backend_s += r.backend_s;
        if (r.worst_ratio > slot->worst_ratio) slot->worst_ratio = r.worst_ratio;
        if (r.klass == FZ_OUT_PASS && fz_feat_novel(map, &f) > 0) {
            char path[4200], msg[512];
            snprintf(path, sizeof path, "%s/%016llx.case", cfg->corpus_dir, (unsigned long long)hash_str(text, tl));
            seen_insert(&corpus, hash_str(path, strlen(path)));
            int w = fz_write_new(path, text, tl, msg, sizeof msg);
            if (w == 1) slot->corpus_added++;
            else if (w < 0 && slot->corpus_unsaved++ == 0)   /* degrade: the input stays in memory */
                fprintf(stderr, "\nflashcheck fuzz: worker %d: HARNESS ERROR: cannot add to the corpus: %s "
                        "(inputs are kept in memory only)\n", index, msg);
            corpus_add(&corpus, text);
        }
        if (r.klass == FZ_OUT_ERROR) {
            slot->harness_errors++;
            if (error_lines++ < 3)
                fprintf(stderr, "\nflashcheck fuzz: worker %d: HARNESS ERROR (not a finding): %s", index, r.detail);
        }
        if (r.klass == FZ_OUT_FAIL || r.klass == FZ_OUT_DEVICE) {
            worker_save(cfg, slot, index, be, &c, &r, text);
            if (r.klass == FZ_OUT_DEVICE) _exit(4);   /* fresh process, fresh device context */
        }
        if (r.klass == FZ_OUT_OVERFLOW) {
            /* NaN/Inf where the profile's own intermediates may overflow (oracle/BOUNDS.md 11):
             * not a finding against the backend, but never dropped: its own class and directory */
            fz_crash_state st;
            fz_crash_state_make(&st, &c, be->name, r.pass, r.tensor, "overflow-sensitive");
            char dir[4200], path[4200], msg[256], state[256];
            snprintf(dir, sizeof dir, "%s/overflow-sensitive", cfg->findings_dir);
            int s = fz_mkdirs(dir, msg, sizeof msg) == 0
                        ? fz_store_save(dir, &st, &c, r.detail, path, sizeof path, msg, sizeof msg) : -1;
            fz_crash_state_format(&st, state, sizeof state);
            slot->overflow++;
            if (s == 1 && !cfg->quiet)
                fprintf(stderr, "\nflashcheck fuzz: worker %d: overflow-sensitive %s -> %s\n", index, state, path);
            else if (s < 0)
                fprintf(stderr, "\nflashcheck fuzz: worker %d: overflow-sensitive %s NOT SAVED (%s); repro:\n%s\n", index,
                        state, msg, text);
        }
        if (fc_clock_ns() - last_scan > 5000000000LL) {
            corpus_scan(&corpus, cfg->corpus_dir);
            last_scan = fc_clock_ns();
        }
    }
    _exit(0);
}

/* ------------------------------------------------------------------------- */
/* supervisor                                                                */

static pid_t spawn(const fz_camp_cfg *cfg, camp_slot *slot, int index)
{
    fflush(stdout);
    fflush(stderr);
    pid_t supervisor = getpid();
    pid_t pid = fork();
    if (pid == 0) worker_main(cfg, slot, index, supervisor);
    return pid;
}

/* record the in-flight case of a dead or hung worker */
static void record_lost_case(const fz_camp_cfg *cfg, camp_slot *slot, int index, const char *failure,
                             const char *detail, fz_camp_stats *st)
{
    fc_case c;
    char msg[256];
    if (fc_case_parse(slot->text, &c, msg, sizeof msg) != 0) {
        fprintf(stderr, "\nflashcheck fuzz: worker %d: %s, but its case text does not parse (%s):\n%s\n", index,
                failure, msg, slot->text);
        return;
    }
    fz_crash_state s;
    fz_crash_state_make(&s, &c, slot->backend[0] ? slot->backend : (cfg->backend ? cfg->backend : "default"),
                        c.backward ? "bwd" : "fwd", "-", failure);
    char path[4200], state[256];
    fz_crash_state_format(&s, state, sizeof state);
    char err[512];
    int r = fz_store_save(cfg->findings_dir, &s, &c, detail, path, sizeof path, err, sizeof err);
    if (r == 1) {
        st->findings_new++;
        if (!cfg->quiet) fprintf(stderr, "\nflashcheck fuzz: worker %d: NEW FINDING %s -> %s\n", index, state, path);
    } else if (r == 0) {
        st->findings_dup++;
    } else {
        st->findings_unsaved++;
        if (!st->save_error[0]) snprintf(st->save_error, sizeof st->save_error, "%s", err);
        fprintf(stderr, "\nflashcheck fuzz: HARNESS ERROR: finding %s NOT SAVED: %s; the campaign stops; its repro:\n%s\n",
                state, err, slot->text);
    }
}

static void sum_slots(camp_slot *slots, int n, fz_camp_stats *st, const fz_camp_stats *base)
{
    *st = *base;
    for (int i = 0; i < n; i++) {
        st->execs += slots[i].execs;
        st->cases += slots[i].cases;
        st->skipped += slots[i].skipped;
        st->elements += slots[i].elements;
        st->check_s += slots[i].total_s;
        st->backend_s += slots[i].backend_s;
        for (int k = 0; k < FC_PH_COUNT; k++) st->phase_s[k] += slots[i].phase_s[k];
        st->work += slots[i].work;
        st->backward_cases += slots[i].backward_cases;
        st->oracle_gpu += slots[i].oracle_gpu;
        st->oracle_cpu += slots[i].oracle_cpu;
        st->oracle_fallback += slots[i].oracle_fallback;
        st->lock_sections += slots[i].lock_n;
        st->lock_wait_s += slots[i].lock_wait_s;
        st->lock_held_s += slots[i].lock_held_s;
        st->wait_failed += slots[i].wait_failed;
        st->findings_new += slots[i].findings_new;
        st->findings_dup += slots[i].findings_dup;
        st->findings_unsaved += slots[i].findings_unsaved;
        st->corpus_unsaved += slots[i].corpus_unsaved;
        st->harness_errors += slots[i].harness_errors;
        st->timeouts_unconfirmed += slots[i].timeouts_unconfirmed;
        if (slots[i].save_failed && !st->save_error[0])
            snprintf(st->save_error, sizeof st->save_error, "%s", slots[i].save_error);
        st->overflow += slots[i].overflow;
        st->corpus += slots[i].corpus_added;
        if (slots[i].worst_ratio > st->worst_ratio) st->worst_ratio = slots[i].worst_ratio;
    }
}

int fz_camp_run(const fz_camp_cfg *cfg, fz_camp_stats *stats, char *msg, size_t msglen)
{
    memset(stats, 0, sizeof *stats);
    int n = cfg->workers;
    if (n < 1 || n > FZ_CAMP_MAX_WORKERS) {
        snprintf(msg, msglen, "--jobs must be between 1 and %d (got %d)", FZ_CAMP_MAX_WORKERS, n);
        return -1;
    }
    if (fz_mkdirs(cfg->corpus_dir, msg, msglen) != 0 || fz_mkdirs(cfg->findings_dir, msg, msglen) != 0) return -1;

    camp_lock_fd = -1;
    if (cfg->device_lock && (camp_lock_fd = fz_lock_file(cfg->device_lock_path, msg, msglen)) < 0) return -1;

    camp_slot *slots = mmap(NULL, sizeof(camp_slot) * (size_t)n, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (slots == MAP_FAILED) {
        snprintf(msg, msglen, "mmap of the shared status failed");
        if (camp_lock_fd >= 0) close(camp_lock_fd);
        camp_lock_fd = -1;
        return -1;
    }
    memset(slots, 0, sizeof(camp_slot) * (size_t)n);

    /* SIGINT, SIGTERM, SIGHUP (a closed terminal) stop the campaign cleanly: workers are told
       to stop, then reaped; a SIGKILLed supervisor takes its workers along (PDEATHSIG) */
    struct sigaction sa, old_int, old_term, old_hup;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    camp_interrupted = 0;
    camp_signal = 0;

    pid_t *pid = calloc((size_t)n, sizeof *pid);
    int64_t *deaths_window = calloc((size_t)n, sizeof *deaths_window);
    for (int i = 0; i < n; i++) pid[i] = spawn(cfg, &slots[i], i);

    fz_camp_stats base;            /* what the supervisor itself counted */
    memset(&base, 0, sizeof base);
    int64_t t0 = fc_clock_ns(), last_print = 0;
    int64_t prev_cases = 0, prev_t = t0;
    int64_t warm_ns = 0, warm_cases = 0;   /* when every slot had run a case, and the cases then */
    double rate = 0;
    int backend_failures = 0;
    for (;;) {
        int64_t now = fc_clock_ns();
        double elapsed = (double)(now - t0) * 1e-9;
        fz_camp_stats cur;
        sum_slots(slots, n, &cur, &base);
        int done = camp_interrupted || (cfg->seconds > 0 && elapsed >= cfg->seconds) ||
                   (cfg->max_cases > 0 && cur.execs >= cfg->max_cases) || backend_failures >= n ||
                   cur.findings_unsaved > 0;
        if (done) break;
        if (!warm_ns) {
            int all = 1;
            for (int i = 0; i < n && all; i++) all = __atomic_load_n(&slots[i].execs, __ATOMIC_RELAXED) > 0;
            if (all) { warm_ns = now; warm_cases = cur.cases; }
        }

        for (int i = 0; i < n; i++) {
            int status;
            pid_t w = pid[i] > 0 ? waitpid(pid[i], &status, WNOHANG) : 0;
            int running = __atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE);
            if (w == pid[i] && pid[i] > 0) {
                /* worker gone */
                if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
                    backend_failures++;
                    pid[i] = -1;
                    continue;
                }
                int confirm = CONFIRM_NONE;
                if (WIFSIGNALED(status) && fz_iso_external_signal(WTERMSIG(status))) {
                    /* killed from outside (a user, the OOM killer): a harness event; its case, if
                       any, is run once more by the next worker, and never becomes a finding
                       through this death */
                    base.external_kills++;
                    const char *ab = sigabbrev_np(WTERMSIG(status));
                    int again = running && slots[i].confirm == CONFIRM_KILLED;
                    fprintf(stderr, "\nflashcheck fuzz: worker %d was killed from outside by SIG%s (harness event, not a "
                            "finding)%s\n", i, ab ? ab : "?", !running ? "" : again ? "; its case was killed twice: dropped"
                            : "; its case runs again");
                    if (running && !again) confirm = CONFIRM_KILLED;
                } else if (WIFSIGNALED(status) && running) {
                    char failure[32], detail[200];
                    const char *ab = sigabbrev_np(WTERMSIG(status));
                    snprintf(failure, sizeof failure, "crash:%s", ab ? ab : "SIG?");
                    snprintf(detail, sizeof detail, "the worker running this case was killed by signal %d (%s)",
                             WTERMSIG(status), strsignal(WTERMSIG(status)));
                    record_lost_case(cfg, &slots[i], i, failure, detail, &base);
                    base.crashes++;
                } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 4 && running) {
                    char detail[200];
                    snprintf(detail, sizeof detail, "the worker running this case exited with status %d", WEXITSTATUS(status));
                    record_lost_case(cfg, &slots[i], i, "crash:exit", detail, &base);
                    base.crashes++;
                }
                slots[i].state = 0;
                slots[i].confirm = confirm;
                slots[i].generation++;
                if (++deaths_window[i] > 20) usleep(200000);   /* crash loop: slow down */
                pid[i] = spawn(cfg, &slots[i], i);
            } else if (pid[i] > 0 && running && cfg->case_timeout_s > 0 &&
                       __atomic_load_n(&slots[i].phase, __ATOMIC_SEQ_CST) != FZ_PHASE_WAIT &&
                       (double)(now - __atomic_load_n(&slots[i].case_start_ns, __ATOMIC_SEQ_CST)) * 1e-9 >
                           cfg->case_timeout_s * (slots[i].confirm == CONFIRM_TIMEOUT ? CAMP_CONFIRM_FACTOR : 1.0)) {
                int phase = __atomic_load_n(&slots[i].phase, __ATOMIC_ACQUIRE);
                kill(pid[i], SIGKILL);
                waitpid(pid[i], &status, 0);
                char detail[200];
                int confirm = CONFIRM_NONE;
                if (phase == FZ_PHASE_BACKEND && slots[i].confirm != CONFIRM_TIMEOUT) {
                    /* first time past the limit: the next worker runs the case again with
                       CAMP_CONFIRM_FACTOR times the limit before it is called a hang */
                    confirm = CONFIRM_TIMEOUT;
                } else if (phase == FZ_PHASE_BACKEND) {
                    snprintf(detail, sizeof detail, "the backend call ran longer than %.1f s, and again longer than "
                             "%.1f s when re-run; the worker was killed (hang)", cfg->case_timeout_s,
                             cfg->case_timeout_s * CAMP_CONFIRM_FACTOR);
                    record_lost_case(cfg, &slots[i], i, "hang", detail, &base);
                    base.hangs++;
                } else {
                    /* the oracle or the checks were slow: not a backend bug; kept apart for the harness */
                    char dir[4200], path[4300], msg[256];
                    snprintf(dir, sizeof dir, "%s/harness-slow", cfg->findings_dir);
                    snprintf(path, sizeof path, "%s/%016llx.case", dir,
                             (unsigned long long)hash_str(slots[i].text, strlen(slots[i].text)));
                    if (fz_mkdirs(dir, msg, sizeof msg) == 0)
                        fz_write_new(path, slots[i].text, strlen(slots[i].text), msg, sizeof msg);
                    base.slow++;
                }
                slots[i].state = 0;
                slots[i].confirm = confirm;
                slots[i].generation++;
                pid[i] = spawn(cfg, &slots[i], i);
            }
        }

        int tty = isatty(2);
        if (cfg->status_line && now - last_print >= (tty ? 1000000000LL : 10000000000LL)) {
            double dt = (double)(now - prev_t) * 1e-9;
            if (dt > 0 && prev_t != t0) rate = (double)(cur.cases - prev_cases) / dt;
            else if (elapsed > 0) rate = (double)cur.cases / elapsed;
            prev_cases = cur.cases;
            prev_t = now;
            int alive = 0;
            for (int i = 0; i < n; i++) alive += pid[i] > 0;
            fprintf(stderr, "%s[%6.0fs] cases %lld (%.1f cases/s, %.1f avg) execs %lld (%.1f/s) skipped %lld | worst err/bound %.3g | corpus +%lld | findings %lld%s | oracle gpu %lld cpu %lld | workers %d/%d   ",
                    tty ? "\r" : "", elapsed, (long long)cur.cases, rate, elapsed > 0 ? (double)cur.cases / elapsed : 0.0,
                    (long long)cur.execs, elapsed > 0 ? (double)cur.execs / elapsed : 0.0, (long long)cur.skipped, cur.worst_ratio, (long long)cur.corpus,
                    (long long)cur.findings_new, cur.slow ? " (+slow harness cases)" : "", (long long)cur.oracle_gpu,
                    (long long)cur.oracle_cpu, alive, n);
            if (!tty) fprintf(stderr, "\n");
            last_print = now;
        }
        usleep(20000);
    }

    /* stop: ask, then insist */
    for (int i = 0; i < n; i++) __atomic_store_n(&slots[i].stop, 1, __ATOMIC_RELEASE);
    /* a short grace for the case in flight (it has not failed: killing it loses nothing) */
    int64_t deadline = fc_clock_ns() + 2000000000LL;
    for (int i = 0; i < n; i++) {
        if (pid[i] <= 0) continue;
        int status;
        while (waitpid(pid[i], &status, WNOHANG) == 0) {
            if (fc_clock_ns() > deadline) {
                /* still running a case at the end: stop it (not a finding: it had not timed out) */
                kill(pid[i], SIGKILL);
                waitpid(pid[i], &status, 0);
                break;
            }
            usleep(10000);
        }
    }
    sum_slots(slots, n, stats, &base);
    stats->seconds = (double)(fc_clock_ns() - t0) * 1e-9;
    stats->cases_per_s = stats->seconds > 0 ? (double)stats->cases / stats->seconds : 0;
    stats->execs_per_s = stats->seconds > 0 ? (double)stats->execs / stats->seconds : 0;
    if (warm_ns) {
        int64_t end = t0 + (int64_t)(stats->seconds * 1e9);
        stats->startup_s = (double)(warm_ns - t0) * 1e-9;
        if (end > warm_ns) stats->warm_cases_per_s = (double)(stats->cases - warm_cases) / ((double)(end - warm_ns) * 1e-9);
    }
    if (cfg->status_line) fprintf(stderr, "\n");
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    stats->stop_signal = camp_signal;
    munmap(slots, sizeof(camp_slot) * (size_t)n);
    if (camp_lock_fd >= 0) close(camp_lock_fd);
    camp_lock_fd = -1;
    free(pid);
    free(deaths_window);
    if (backend_failures >= n && stats->execs == 0) {
        snprintf(msg, msglen, "no worker could load the backend '%s' (see the message above)",
                 cfg->backend ? cfg->backend : "default");
        return -1;
    }
    return 0;
}
