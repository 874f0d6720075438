/* cmd_repro.c: `flashcheck repro FILE` and `flashcheck shrink FILE`. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "fuzz/fz_gen.h"
#include "fuzz/fz_isolate.h"
#include "fuzz/fz_misuse.h"
#include "fuzz/fz_run.h"
#include "fuzz/fz_store.h"
#include "report/rp_progress.h"

/* ------------------------------------------------------------------------- */
/* shared                                                                    */

static const char *repro_help =
    "usage: flashcheck repro FILE [--backend cpu|cuda|PATH.so] [--timeout SEC] [--no-determinism] [--stress N]\n"
    "\n"
    "Replays a repro file (a finding from `flashcheck fuzz`/the fuzz targets, a regression, a .min)\n"
    "on the backend, in a child process with a watchdog (a kernel fault or a hang is reported, not\n"
    "fatal), and prints the verdict: every failing check, and per output tensor the elements checked\n"
    "and the worst |got - ref| / bound. API-misuse files (a '# misuse kind=' line) replay the invalid\n"
    "call and check that it is rejected without a write.\n"
    "\n"
    "options:\n"
    "  --backend B        backend to run (default: CUDA when a GPU is present, else CPU)\n"
    "  --timeout SEC      a case running longer is a hang (default 120, at least 1)\n"
    "  --no-determinism   skip the second run that checks bitwise reproducibility\n"
    "  --stress N         stress mode, N >= 2 runs (as certify/fuzz --stress: the case at many CTAs under a\n"
    "                     concurrent load, compared bitwise and with the oracle): replays a \"stress\" finding\n"
    "\n"
    "exit: 0 the case passes (the failure does not reproduce), 1 it fails, 2 bad case file (empty,\n"
    "      no shape, an invalid or overflowing problem) or option, 3 backend cannot be loaded,\n"
    "      4 harness error (out of memory, killed from outside, the harness ran past --timeout)\n";

static const char *shrink_help =
    "usage: flashcheck shrink FILE [--backend B] [--timeout SEC] [--max-runs N] [--any-failure] [--quiet]\n"
    "\n"
    "Reduces a failing repro file while the failure persists (same pass and failure class, e.g.\n"
    "fwd/bound or bwd/nan or crash:SEGV): batch, heads (GQA groups and kv heads), Sq, Sk, Dqk,\n"
    "Dv, then the mask (kind, density, broadcast), causal mode, window, layouts, value\n"
    "distributions and scale are simplified one step at a time. Each candidate runs in a child\n"
    "process with a watchdog. SIGTERM/SIGINT/SIGHUP stop it after the candidate in flight, and the\n"
    "smallest failing case found so far is written. Writes FILE.min (atomically; the input file is never modified; an\n"
    "existing FILE.min is kept and the result goes to FILE.min.1, .2, ...) and prints the\n"
    "before/after shapes. When no file can be written the minimized case is printed on stdout.\n"
    "On a terminal a progress line shows the candidate runs done (of --max-runs) and the elapsed time.\n"
    "\n"
    "options:\n"
    "  --backend B        backend to run (default: CUDA when a GPU is present, else CPU)\n"
    "  --timeout SEC      per-candidate watchdog (default 120, at least 1)\n"
    "  --max-runs N       stop after N candidate runs (default 400)\n"
    "  --any-failure      accept any failure, not only the original pass and failure class\n"
    "  --quiet            no progress line (there is none when stderr is not a terminal)\n"
    "\n"
    "exit: 0 FILE.min (or FILE.min.N) written, 1 FILE does not fail on this backend (nothing to\n"
    "      shrink), 2 bad case file or option, 3 backend cannot be loaded, 4 harness error (cannot\n"
    "      write the result: it is printed on stdout; out of memory; killed from outside)\n";

typedef struct {
    const char *backend;
    double timeout;
    int determinism;
    int64_t max_runs;
    int any_failure;
    int quiet;
    const char *file;
} repro_opts;

static int parse_common(const char *sub, int argc, char **argv, repro_opts *o, int shrink)
{
    memset(o, 0, sizeof *o);
    o->timeout = 120;
    o->determinism = 1;
    o->max_runs = 400;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(shrink ? shrink_help : repro_help, stdout);
            exit(CLI_OK);
        }
        if ((r = cli_opt(argc, argv, &i, "--backend", &v))) {
            if (r < 0) return cli_usage_error(sub, "--backend needs a value (cpu, cuda or a path to a .so)");
            o->backend = v;
        } else if ((r = cli_opt(argc, argv, &i, "--timeout", &v))) {
            if (r < 0 || cli_parse_double(v, &o->timeout) || o->timeout < FZ_ISO_MIN_TIMEOUT_S)
                return cli_usage_error(sub, "--timeout needs seconds >= %g (a shorter limit kills cases that are "
                                       "merely starting up and reports them as hangs)", FZ_ISO_MIN_TIMEOUT_S);
        } else if (shrink && (r = cli_opt(argc, argv, &i, "--max-runs", &v))) {
            if (r < 0 || cli_parse_i64(v, 1, 1000000, &o->max_runs))
                return cli_usage_error(sub, "--max-runs needs an integer in [1, 1000000]");
        } else if (strcmp(argv[i], "--no-determinism") == 0) {
            o->determinism = 0;
        } else if (!shrink && (r = cli_opt(argc, argv, &i, "--stress", &v))) {
            int64_t n;
            if (r < 0 || cli_parse_i64(v, 2, 1000, &n)) return cli_usage_error(sub, "--stress needs a number of runs in [2, 1000]");
            o->determinism = (int)n; /* fz_run.h: N >= 2 is stress mode with N runs */
        } else if (shrink && strcmp(argv[i], "--any-failure") == 0) {
            o->any_failure = 1;
        } else if (shrink && strcmp(argv[i], "--quiet") == 0) {
            o->quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage_error(sub, "unknown option '%s'", argv[i]);
        } else if (o->file) {
            return cli_usage_error(sub, "one FILE only (got '%s' and '%s')", o->file, argv[i]);
        } else {
            o->file = argv[i];
        }
    }
    if (!o->file) return cli_usage_error(sub, "missing FILE (a repro file written by flashcheck)");
    o->file = cli_path(o->file);
    return CLI_OK;
}

static void print_result(const fz_run_result *r, const fc_case *c)
{
    static const int outs[5] = { FC_T_O, FC_T_LSE, FC_T_DQ, FC_T_DK, FC_T_DV };
    printf("  %-5s %12s %10s %10s %10s %12s\n", "out", "elements", "violations", "nonfinite", "unwritten", "worst ratio");
    for (int i = 0; i < 5; i++) {
        const fc_tensor_stats *s = &r->v.t[outs[i]];
        if (!s->checked) continue;
        printf("  %-5s %12lld %10lld %10lld %10lld %12.4g\n", fc_tensor_name(outs[i]), (long long)s->elements,
               (long long)s->violations, (long long)s->nonfinite_mismatch, (long long)s->unwritten, s->max_ratio);
    }
    for (int i = 0; i < r->v.n_reasons; i++) printf("  %s: %s\n", r->v.reason[i].check, r->v.reason[i].text);
    if (r->v.n_dropped) printf("  (%d more reasons)\n", r->v.n_dropped);
    if ((r->klass == FZ_OUT_CRASH || r->klass == FZ_OUT_HANG || r->klass == FZ_OUT_ERROR || r->klass == FZ_OUT_SLOW) &&
        r->v.n_reasons == 0)   /* else the detail repeats the reasons */
        printf("  %s\n", r->detail);
    (void)c;
}

static const char *class_word(int klass)
{
    switch (klass) {
    case FZ_OUT_PASS: return "PASS";
    case FZ_OUT_SKIP: return "SKIP";
    case FZ_OUT_FAIL: return "FAIL";
    case FZ_OUT_DEVICE: return "FAIL (device fault)";
    case FZ_OUT_CRASH: return "FAIL (crash)";
    case FZ_OUT_HANG: return "FAIL (hang)";
    case FZ_OUT_SLOW: return "NOT JUDGED (the harness ran past --timeout; raise it)";
    case FZ_OUT_OVERFLOW: return "OVERFLOW-SENSITIVE (NaN/Inf where the profile's intermediates may overflow: oracle/BOUNDS.md 11)";
    default: return "HARNESS ERROR (not a finding against the backend)";
    }
}

static int is_failure(int klass)
{
    return klass == FZ_OUT_FAIL || klass == FZ_OUT_DEVICE || klass == FZ_OUT_CRASH || klass == FZ_OUT_HANG;
}

/* misuse replays run in a child too (a wrongly accepted call may crash) */
static int repro_misuse(const repro_opts *o, const char *text, size_t len)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        const fa_backend *be = fz_iso_backend(o->backend);
        if (!be) _exit(CLI_BACKEND);
        fz_budget b;
        fz_budget_default(&b);
        b.max_seq = b.max_head_dim = 1 << 20;
        b.max_work = INT64_MAX / 4;
        static fz_misuse_result res;
        if (!fz_misuse_run(be, (const uint8_t *)text, len, &b, &res)) {
            printf("SKIP: misuse kind %s does not apply to this case on backend %s\n", res.kind_name, be->name);
            _exit(CLI_OK);
        }
        printf("misuse: %s (%s) on %s, %s\n", res.kind_name, res.what, be->name, res.backward ? "backward" : "forward");
        printf("backend returned %s; arg '%s'; message '%s'\n", fa_status_name(res.status), res.err.arg, res.err.msg);
        if (res.failure[0]) {
            printf("FAIL: %s\n%s\n", res.failure, res.detail);
            _exit(CLI_FAIL);
        }
        printf("PASS: the invalid call was rejected with a message and wrote nothing\n");
        _exit(CLI_OK);
    }
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        printf("FAIL (crash): replaying the invalid call killed the process with signal %d (%s)\n",
               WTERMSIG(status), strsignal(WTERMSIG(status)));
        return CLI_FAIL;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : CLI_INTERNAL;
}

/* the "# state: ..." line of a finding file, if any */
static void recorded_state(const char *text, char *out, size_t outlen)
{
    out[0] = 0;
    const char *p = strstr(text, "# state: ");
    if (!p) return;
    p += 9;
    size_t n = strcspn(p, "\n");
    snprintf(out, outlen, "%.*s", (int)n, p);
}

/* ------------------------------------------------------------------------- */
/* repro                                                                     */

int cli_repro(int argc, char **argv)
{
    repro_opts o;
    int rc = parse_common("repro", argc, argv, &o, 0);
    if (rc != CLI_OK) return rc;
    char msg[512];
    size_t len;
    char *text = cli_read_file(o.file, &len, msg, sizeof msg);
    if (!text) { fprintf(stderr, "flashcheck repro: %s\n", msg); return CLI_USAGE; }
    int kind;
    unsigned param;
    size_t skip;
    if (fz_misuse_params((const uint8_t *)text, len, &kind, &param, &skip)) {
        int r = repro_misuse(&o, text, len);
        free(text);
        return r;
    }
    free(text);
    fc_case c;
    if (cli_load_case(o.file, &c, &text, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck repro: %s\n", msg);
        return CLI_USAGE;
    }
    char bname[64];
    fa_limits lim;
    int has_bwd;
    if (fz_iso_probe(o.backend, bname, sizeof bname, &lim, NULL, &has_bwd, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck repro: backend %s: %s\n", cli_backend_label(o.backend), msg);
        return CLI_BACKEND;
    }
    if (c.backward && !has_bwd) {
        printf("note: backend %s has no backward pass; replaying the forward only\n", bname);
        c.backward = 0;
    }
    printf("repro %s on backend %s: shape B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld Dqk=%lld Dv=%lld %s%s\n", o.file,
           bname, (long long)c.p.batch, (long long)c.p.seqlen_q, (long long)c.p.seqlen_k, (long long)c.p.heads_q,
           (long long)c.p.heads_kv, (long long)c.p.head_dim_qk, (long long)c.p.head_dim_v,
           fa_dtype_name(c.p.dtype), c.backward ? " (forward + backward)" : " (forward)");
    fz_run_result *r = malloc(sizeof *r);
    fz_iso_run(o.backend, &c, o.determinism, o.timeout, r, NULL);
    printf("%s\n", class_word(r->klass));
    print_result(r, &c);
    char was[256];
    recorded_state(text, was, sizeof was);
    if (is_failure(r->klass)) {
        fz_crash_state st;
        fz_crash_state_make(&st, &c, bname, r->pass, r->tensor, r->failure);
        char now[256];
        fz_crash_state_format(&st, now, sizeof now);
        printf("state: %s%s\n", now, was[0] ? (strcmp(was, now) == 0 ? " (same as recorded)" : "") : "");
        if (was[0] && strcmp(was, now) != 0) printf("recorded state was: %s\n", was);
    } else if (was[0]) {
        printf("the recorded failure (%s) does not reproduce on %s\n", was, bname);
    }
    int klass = r->klass, backend_error = strcmp(r->failure, "backend") == 0;
    free(r);
    free(text);
    if (klass == FZ_OUT_ERROR) return backend_error ? CLI_BACKEND : CLI_INTERNAL;
    if (klass == FZ_OUT_SLOW) return CLI_INTERNAL;
    return is_failure(klass) ? CLI_FAIL : CLI_OK;
}

/* ------------------------------------------------------------------------- */
/* shrink                                                                    */

typedef struct {
    const repro_opts *o;
    const fa_limits *lim;
    char pass[8], failure[32];
    int64_t runs;
    int round;
    rp_progress prog;
} shrink_ctx;

/* SIGTERM / SIGINT / SIGHUP during shrink (a CI step's time limit, Ctrl-C): the candidate in
 * flight finishes, no new one starts, and the smallest failing case found so far is written
 * as usual, so a cut-off shrink loses nothing. */
static volatile sig_atomic_t shrink_stop;
static void shrink_on_signal(int sig) { shrink_stop = sig; }

/* does candidate c still fail the same way? */
static int still_fails(shrink_ctx *s, const fc_case *c)
{
    char why[256];
    if (fc_case_check(c, why, sizeof why) != 0) return 0;
    if (s->lim) {
        int64_t m = s->lim->head_dim_multiple > 1 ? s->lim->head_dim_multiple : 1;
        if (c->p.head_dim_qk % m || c->p.head_dim_v % m) return 0;
        if (s->lim->dqk_must_equal_dv && c->p.head_dim_qk != c->p.head_dim_v) return 0;
    }
    if (s->runs >= s->o->max_runs || shrink_stop) return 0;
    s->runs++;
    char note[32];
    snprintf(note, sizeof note, "round %d", s->round + 1);
    rp_progress_update(&s->prog, s->runs, note);
    fz_run_result *r = malloc(sizeof *r);
    fz_iso_run(s->o->backend, c, s->o->determinism || strcmp(s->failure, "determinism") == 0, s->o->timeout, r, NULL);
    int ok = is_failure(r->klass) &&
             (s->o->any_failure || (strcmp(r->pass, s->pass) == 0 && strcmp(r->failure, s->failure) == 0));
    free(r);
    return ok;
}

/* candidate values for a size, smallest first: lo, n/2, n - step, n - 1 */
static int size_candidates(int64_t n, int64_t lo, int64_t step, int64_t out[4])
{
    int k = 0;
    int64_t cand[4] = { lo, n / 2 / step * step, n - step, n - 1 };
    for (int i = 0; i < 4; i++) {
        int64_t v = cand[i];
        if (v < lo || v >= n || (step > 1 && v % step)) continue;
        int dup = 0;
        for (int j = 0; j < k; j++) dup |= out[j] == v;
        if (!dup) out[k++] = v;
    }
    return k;
}

/* try to lower one size field; returns 1 if it changed */
static int shrink_field(shrink_ctx *s, fc_case *c, int64_t *field, int64_t lo, int64_t step, int tie_dv)
{
    int64_t cand[4];
    int n = size_candidates(*field, lo, step, cand);
    for (int i = 0; i < n; i++) {
        fc_case t = *c;
        int64_t *f = (int64_t *)((char *)&t + ((char *)field - (char *)c));
        *f = cand[i];
        if (tie_dv && c->p.head_dim_v == c->p.head_dim_qk) t.p.head_dim_v = cand[i];
        if (still_fails(s, &t)) { *c = t; return 1; }
    }
    return 0;
}

static int try_case(shrink_ctx *s, fc_case *c, const fc_case *t)
{
    if (fc_case_equal(c, t)) return 0;
    if (still_fails(s, t)) { *c = *t; return 1; }
    return 0;
}

/* contract v3: a batch of sequences shrinks by dropping a sequence (any one, its table row
 * with it), by shortening one (queries to 0, 1 or half; used keys to 0 or half), by tightening
 * the maxima to the longest sequence, and by dropping softcap, sinks and table padding. */
static void v3_drop_seq(fc_case *c, int64_t b)
{
    fc_v3 *v = &c->v3;
    const int64_t B = c->p.batch, m = v->max_pages;
    for (int64_t k = b; k + 1 < B; k++) {
        v->seqlens_q[k] = v->seqlens_q[k + 1];
        v->seqlens_k[k] = v->seqlens_k[k + 1];
        v->seqused_k[k] = v->seqused_k[k + 1];
        for (int64_t j = 0; c->p.page_size >= 1 && j < m; j++) v->block_table[k * m + j] = v->block_table[(k + 1) * m + j];
    }
    c->p.batch = B - 1;
}

static void v3_tighten(fc_case *c)
{
    const fc_v3 *v = &c->v3;
    int64_t mq = 0, mk = 0;
    for (int64_t b = 0; b < c->p.batch; b++) {
        if (v->seqlens_q[b] > mq) mq = v->seqlens_q[b];
        if (v->varlen_k && v->seqlens_k[b] > mk) mk = v->seqlens_k[b];
        if (c->p.page_size >= 1 && v->has_seqused && v->seqused_k[b] > mk) mk = v->seqused_k[b];
    }
    if (v->varlen_q) c->p.seqlen_q = mq;
    if (v->varlen_k || (c->p.page_size >= 1 && v->has_seqused)) c->p.seqlen_k = mk;
}

static int shrink_v3(shrink_ctx *s, fc_case *c)
{
    if (!fc_case_is_v3(c)) return 0;
    int changed = 0;
    fc_v3 *v = &c->v3;
    for (int64_t b = c->p.batch - 1; b >= 0 && c->p.batch > 1 && (v->varlen_q || v->varlen_k || v->has_seqused ||
                                                                   c->p.page_size >= 1); b--) {
        fc_case t = *c;
        v3_drop_seq(&t, b);
        changed |= try_case(s, c, &t);
    }
    for (int64_t b = 0; b < c->p.batch; b++) {
        if (v->varlen_q) {
            const int64_t cand[3] = { 0, 1, v->seqlens_q[b] / 2 };
            for (int k = 0; k < 3; k++)
                if (cand[k] < v->seqlens_q[b]) {
                    fc_case t = *c;
                    t.v3.seqlens_q[b] = cand[k];
                    if (try_case(s, c, &t)) { changed = 1; break; }
                }
        }
        if (v->has_seqused) {
            const int64_t cand[2] = { 0, v->seqused_k[b] / 2 };
            for (int k = 0; k < 2; k++)
                if (cand[k] < v->seqused_k[b]) {
                    fc_case t = *c;
                    t.v3.seqused_k[b] = cand[k];
                    if (try_case(s, c, &t)) { changed = 1; break; }
                }
        }
        if (v->varlen_k && v->seqlens_k[b] > 0) {
            fc_case t = *c;
            t.v3.seqlens_k[b] /= 2;
            if (t.v3.has_seqused && t.v3.seqused_k[b] > t.v3.seqlens_k[b]) t.v3.seqused_k[b] = t.v3.seqlens_k[b];
            changed |= try_case(s, c, &t);
        }
    }
    { fc_case t = *c; v3_tighten(&t); changed |= try_case(s, c, &t); }
    if (c->p.softcap > 0) { fc_case t = *c; t.p.softcap = 0; changed |= try_case(s, c, &t); }
    if (c->p.has_sinks) { fc_case t = *c; t.p.has_sinks = 0; changed |= try_case(s, c, &t); }
    if (c->v3.table_pad > 0) { fc_case t = *c; t.v3.table_pad = 0; changed |= try_case(s, c, &t); }
    return changed;
}

int cli_shrink(int argc, char **argv)
{
    repro_opts o;
    int rc = parse_common("shrink", argc, argv, &o, 1);
    if (rc != CLI_OK) return rc;
    char msg[512];
    fc_case c;
    char *text;
    if (cli_load_case(o.file, &c, &text, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck shrink: %s\n", msg);
        return CLI_USAGE;
    }
    free(text);
    char bname[64];
    fa_limits lim;
    int has_bwd;
    if (fz_iso_probe(o.backend, bname, sizeof bname, &lim, NULL, &has_bwd, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck shrink: backend %s: %s\n", cli_backend_label(o.backend), msg);
        return CLI_BACKEND;
    }
    if (!has_bwd) c.backward = 0;

    fz_run_result *r = malloc(sizeof *r);
    fz_iso_run(o.backend, &c, o.determinism, o.timeout, r, NULL);
    if (!is_failure(r->klass)) {
        printf("%s: %s on backend %s: nothing to shrink (the case does not fail)\n", o.file, class_word(r->klass), bname);
        int klass = r->klass, backend_error = strcmp(r->failure, "backend") == 0;
        if (klass == FZ_OUT_ERROR || klass == FZ_OUT_SLOW) printf("  %s\n", r->detail);
        free(r);
        if (klass == FZ_OUT_ERROR) return backend_error ? CLI_BACKEND : CLI_INTERNAL;
        return klass == FZ_OUT_SLOW ? CLI_INTERNAL : CLI_FAIL;
    }
    shrink_ctx s;
    memset(&s, 0, sizeof s);
    s.o = &o;
    s.lim = &lim;
    s.runs = 1;
    snprintf(s.pass, sizeof s.pass, "%s", r->pass);
    snprintf(s.failure, sizeof s.failure, "%s", r->failure);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = shrink_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    printf("shrinking %s on %s: failure %s/%s (%s)\n", o.file, bname, r->pass, r->failure, r->tensor);
    fflush(stdout);
    free(r);
    fc_case orig = c;
    rp_progress_start(&s.prog, stderr, "flashcheck shrink", "runs", o.max_runs, o.quiet);

    int64_t dstep = lim.head_dim_multiple > 1 ? lim.head_dim_multiple : 1;
    for (int round = 0, changed = 1; changed && s.runs < o.max_runs && !shrink_stop; round++) {
        changed = 0;
        s.round = round;
        /* sizes */
        changed |= shrink_v3(&s, &c);
        changed |= shrink_field(&s, &c, &c.p.batch, 1, 1, 0);
        {   /* heads: drop the kv heads, then the group size */
            int64_t g = c.p.heads_kv ? c.p.heads_q / c.p.heads_kv : 1;
            fc_case t = c;
            if (c.p.heads_kv > 1) { t.p.heads_kv = 1; t.p.heads_q = g; changed |= try_case(&s, &c, &t); }
            g = c.p.heads_kv ? c.p.heads_q / c.p.heads_kv : 1;
            if (g > 1) { t = c; t.p.heads_q = c.p.heads_kv; changed |= try_case(&s, &c, &t); }
            g = c.p.heads_kv ? c.p.heads_q / c.p.heads_kv : 1;
            if (g > 2) { t = c; t.p.heads_q = c.p.heads_kv * (g / 2); changed |= try_case(&s, &c, &t); }
        }
        changed |= shrink_field(&s, &c, &c.p.seqlen_q, 0, 1, 0);
        changed |= shrink_field(&s, &c, &c.p.seqlen_k, 0, 1, 0);
        changed |= shrink_field(&s, &c, &c.p.head_dim_qk, dstep, dstep, 1);
        if (!lim.dqk_must_equal_dv) changed |= shrink_field(&s, &c, &c.p.head_dim_v, dstep, dstep, 0);
        /* mask */
        if (c.mask.kind != FC_MASK_NONE) {
            fc_case t = c;
            t.mask.kind = FC_MASK_NONE;
            if (try_case(&s, &c, &t)) changed = 1;
            else {
                t = c; t.mask.broadcast_batch = 1; t.mask.broadcast_heads = 1;
                changed |= try_case(&s, &c, &t);
                if (c.mask.density > 0) { t = c; t.mask.density = 0; changed |= try_case(&s, &c, &t); }
            }
        }
        /* problem flags */
        { fc_case t = c; t.p.causal = FA_CAUSAL_NONE; changed |= try_case(&s, &c, &t); }
        { fc_case t = c; t.p.window_left = t.p.window_right = -1; changed |= try_case(&s, &c, &t); }
        { fc_case t = c; t.p.softmax_scale = 0; changed |= try_case(&s, &c, &t); }
        if (c.backward && strcmp(s.pass, "fwd") == 0) { fc_case t = c; t.backward = 0; changed |= try_case(&s, &c, &t); }
        /* layouts: all dense at once, else one tensor at a time */
        {
            fc_case t = c;
            for (int k = 0; k < FC_T_COUNT; k++) {
                memset(&t.layout[k], 0, sizeof t.layout[k]);
                for (int d = 0; d < 4; d++) t.layout[k].order[d] = d;
            }
            if (!try_case(&s, &c, &t))
                for (int k = 0; k < FC_T_COUNT; k++) {
                    t = c;
                    memset(&t.layout[k], 0, sizeof t.layout[k]);
                    for (int d = 0; d < 4; d++) t.layout[k].order[d] = d;
                    changed |= try_case(&s, &c, &t);
                }
            else changed = 1;
        }
        /* values */
        for (int k = 0; k < FC_N_DIST_INPUTS; k++) {
            fc_case t = c;
            t.dist[k].kind = FC_DIST_GAUSSIAN; t.dist[k].amp = 0; t.dist[k].prob = 0;
            changed |= try_case(&s, &c, &t);
        }
        rp_progress_clear(&s.prog);
        printf("  round %d: B=%lld Hq=%lld Hkv=%lld Sq=%lld Sk=%lld Dqk=%lld Dv=%lld mask=%s (%lld runs)\n", round + 1,
               (long long)c.p.batch, (long long)c.p.heads_q, (long long)c.p.heads_kv, (long long)c.p.seqlen_q,
               (long long)c.p.seqlen_k, (long long)c.p.head_dim_qk, (long long)c.p.head_dim_v,
               fc_mask_name(c.mask.kind), (long long)s.runs);
    }
    rp_progress_clear(&s.prog);
    rp_progress_end(&s.prog);
    if (s.runs >= o.max_runs) printf("  stopped at --max-runs %lld\n", (long long)o.max_runs);
    if (shrink_stop)
        printf("  stopped by signal %d (%s): writing the smallest failing case found so far\n", (int)shrink_stop,
               strsignal((int)shrink_stop));

    /* write FILE.min, never replacing a file: FILE.min exists -> FILE.min.1, .2, ...; when
       nothing can be written the minimized case goes to stdout (nothing is lost) and the
       exit is 4 */
    char out[4200];
    size_t need = fc_case_write(&c, NULL, 0) + 512;
    char *body = malloc(need + 1);
    int n = snprintf(body, need, "# minimized by flashcheck shrink from %s on backend %s\n"
                     "# failure: %s/%s; original shape B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld Dqk=%lld Dv=%lld\n",
                     o.file, bname, s.pass, s.failure, (long long)orig.p.batch, (long long)orig.p.seqlen_q,
                     (long long)orig.p.seqlen_k, (long long)orig.p.heads_q, (long long)orig.p.heads_kv,
                     (long long)orig.p.head_dim_qk, (long long)orig.p.head_dim_v);
    n += (int)fc_case_write(&c, body + n, need - (size_t)n);
    int wr = 0;
    for (int k = 0; k < 1000 && wr == 0; k++) {
        if (k == 0) snprintf(out, sizeof out, "%s.min", o.file);
        else snprintf(out, sizeof out, "%s.min.%d", o.file, k);
        wr = fz_write_new(out, body, (size_t)n, msg, sizeof msg);   /* 1 written, 0 exists, -1 error */
    }
    if (wr != 1) {
        fprintf(stderr, "flashcheck shrink: cannot write the minimized case: %s\n"
                "flashcheck shrink: here it is (save it as a .case file):\n", wr == 0 ? "FILE.min.1..999 all exist" : msg);
        fflush(stderr);
        fwrite(body, 1, (size_t)n, stdout);
        free(body);
        return CLI_INTERNAL;
    }
    free(body);
    if (strcmp(out + strlen(out) - 4, ".min") != 0) printf("note: %s.min exists and was kept\n", o.file);
    printf("wrote %s (B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld Dqk=%lld Dv=%lld, %lld runs)\n", out,
           (long long)c.p.batch, (long long)c.p.seqlen_q, (long long)c.p.seqlen_k, (long long)c.p.heads_q,
           (long long)c.p.heads_kv, (long long)c.p.head_dim_qk, (long long)c.p.head_dim_v, (long long)s.runs);
    return CLI_OK;
}
