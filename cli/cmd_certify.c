/* cmd_certify.c: `flashcheck certify`: a fixed sweep of awkward shapes, the
 * property suite, API misuse, a fuzz budget and (CUDA) compute-sanitizer
 * passes; a Markdown and a JSON report; --baseline flags regressions. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "fuzz/fz_campaign.h"
#include "fuzz/fz_gen.h"
#include "fuzz/fz_isolate.h"
#include "fuzz/fz_misuse.h"
#include "fuzz/fz_run.h"
#include "fuzz/fz_store.h"
#include "properties/properties.h"
#include "properties/sweep/sweep.h"
#include "report/rp_plots.h"
#include "report/rp_progress.h"

static const char *certify_help =
    "usage: flashcheck certify [--backend B] [--out DIR] [--baseline REPORT.json] [--quick]\n"
    "                          [--fuzz-seconds N] [--jobs N] [--sanitizer] [--timeout SEC] [--quiet]\n"
    "                          [--profile NAME] [--stress N] [--category NAME]\n"
    "\n"
    "Certifies a backend: (1) a fixed sweep of awkward cases, grouped in categories (shapes at tile\n"
    "boundaries +-1, primes, 0 and 1; causal alignments with Sq != Sk; windows; additive masks incl.\n"
    "fully masked rows/columns; GQA/MQA; permuted, padded and offset layouts; value distributions;\n"
    "empty sequences), each case forward (+ backward when the backend has one) with every output\n"
    "element checked against the oracle's per-element bound, guards, unwritten outputs, inputs\n"
    "unchanged and determinism; on CUDA backends also the device grid (cuda_*: seqlens to 4224, every\n"
    "head dim 8..256, 13 mask kinds, fused-QKV and padded layouts, NaN/Inf at hidden keys and NaN/Inf\n"
    "inputs judged row by row, a batch-heavy deterministic backward 30 times, GPU findings in both\n"
    "backward modes, declined layouts, a call past 2^31 elements) and the production shapes\n"
    "(S >= 8k, GQA, causal, one call past 2^31 elements per tensor; host backends: not run, the\n"
    "report says why); on a CUDA backend with a GPU, a call of oracle work B*Hq*Sq*Sk*D >= 2^36 (the\n"
    "production shapes) is judged on every element on the device (GPU tier of the oracle, compare on\n"
    "the GPU, in batch chunks); otherwise a case whose oracle work passes 2^31 is judged against the\n"
    "oracle on a seeded 256-row/column sample, every element for the other checks (properties/sweep/\n"
    "sweep.h, properties/check/check.h); (2) the metamorphic property suite; (3) API misuse (every invalid\n"
    "descriptor must be rejected without a write; a device backend must reject host pointers); (4) a\n"
    "fuzz budget; (5) with --sanitizer and a CUDA backend, compute-sanitizer memcheck/racecheck/\n"
    "synccheck/initcheck on a few cases.\n"
    "Every case runs in a worker process with a watchdog: a kernel fault or hang is a failure of\n"
    "that case, not of the run. Prints a summary table; writes DIR/report.md and DIR/report.json\n"
    "(pass/fail and the worst error/bound ratio per category), DIR/plots/*.svg (shown in report.md:\n"
    "an error/bound histogram per output tensor, a heat map per failing or near-failing tensor) and a\n"
    "repro file per failure, and DIR/cases.log, a line per case as it finishes (category, label, verdict,\n"
    "seconds). On a terminal a progress line shows cases done and the elapsed time.\n"
    "\n"
    "options:\n"
    "  --backend B         cpu | cuda | PATH.so (default: CUDA when a GPU is present, else CPU)\n"
    "  --out DIR           report directory (default flashcheck-report-BACKEND-DATE); must not hold a report;\n"
    "                      locked while the run lasts (a second run on DIR refuses, naming the first)\n"
    "  --baseline FILE     an earlier report.json (checked before anything runs): a category that passed\n"
    "                      and now fails, or (fixed sweep categories) whose worst error/bound ratio\n"
    "                      more than doubled (one log2 bucket), is a regression\n"
    "  --quick             a smaller sweep (about a quarter of the cases; on a CUDA backend without the\n"
    "                      production shapes and the > 2^31-element calls)\n"
    "  --fuzz-seconds N    fuzz budget (default 30; 0 skips the fuzz step)\n"
    "  --jobs N            fuzz workers (default: the number of online cores; CUDA workers share the GPUs)\n"
    "  --sanitizer         run compute-sanitizer passes (CUDA backends; compute-sanitizer on PATH)\n"
    "  --timeout SEC       per-case watchdog (default 300, at least 1)\n"
    "  --quiet             no progress line (there is none when stderr is not a terminal)\n"
    "  --stress N          stress mode (N >= 2 runs): every sweep case with a pipeline of more than two\n"
    "                      blocks (seqlen_k > 256, or seqlen_q > 256 with a backward) that passes is also run N\n"
    "                      times at a size with many CTAs under a concurrent device load and compared bitwise and\n"
    "                      with the oracle (properties/check/check.h \"stress\"); the fuzz step likewise\n"
    "  --category NAME     certify one category of the fixed sweep alone (e.g. production; names as in the\n"
    "                      summary): the same sweep, workers and checks, the other categories, the\n"
    "                      property suite, API misuse, fuzz and sanitizer steps not run; the result line\n"
    "                      and report.json (\"only_category\") say so\n"
    "  --profile NAME      judge by the named precision preset (tensorcore, fp32, torch-flash, torch-efficient,\n"
    "                      torch-cudnn, torch-math, torch-math-lowp, torch-flex) instead of the backend's profile\n"
    "\n"
    "A case whose NaN/Inf comes where the profile's own intermediates may overflow for its magnitudes\n"
    "(oracle/BOUNDS.md section 11) is counted as overflow-sensitive, saved under DIR/overflow-sensitive/,\n"
    "and does not fail the certification.\n"
    "\n"
    "Verdict: CERTIFIED when every case was judged and none failed; NOT CERTIFIED when a case failed or\n"
    "regressed; INCOMPLETE when none failed but some cases were not judged (a harness error: out of\n"
    "memory, a worker killed from outside, the harness past --timeout, a finding that could not be\n"
    "saved, a fuzz step stopped by a signal or that checked no case, or a harness defect: an entry of\n"
    "the device sets (cuda_*, production) that the harness could not judge, named with its reason): the summary, report.md and report.json list the categories and\n"
    "counts not judged. The summary and the reports give each category's wall time (seconds).\n"
    "\n"
    "exit: 0 CERTIFIED (and no regression), 1 NOT CERTIFIED (a category failed or regressed), 2 usage\n"
    "      (incl. a bad --baseline, or DIR in use by another run or holding a report), 3 backend cannot be\n"
    "      loaded, 4 harness error: INCOMPLETE (cases not judged, report written), or DIR cannot be created\n"
    "      or written (checked first), or the report cannot be written\n";

/* ------------------------------------------------------------------------- */
/* categories: the sweep's (properties/sweep/sweep.h), then certify's own steps */

enum { CAT_API = FC_SWEEP_CAT_COUNT, CAT_FUZZ, CAT_SANITIZER, CAT_COUNT };
static const char *cat_name(int i)
{
    static const char *own[3] = { "api_misuse", "fuzz", "sanitizer" };
    return i < FC_SWEEP_CAT_COUNT ? fc_sweep_cat_name(i) : own[i - FC_SWEEP_CAT_COUNT];
}
static const char *cat_what(int i)
{
    static const char *own[3] = { "invalid descriptors rejected with a message and no write",
                                  "coverage- and error-guided fuzz campaign",
                                  "compute-sanitizer memcheck, racecheck, synccheck, initcheck" };
    return i < FC_SWEEP_CAT_COUNT ? fc_sweep_cat_what(i) : own[i - FC_SWEEP_CAT_COUNT];
}

typedef struct {
    int run;                 /* 0: not run (reason in note) */
    int has_ratio;           /* some case compared elements with the oracle (worst_ratio is meaningful) */
    int64_t cases, passed, failed, skipped, not_judged;
    int64_t overflow;        /* overflow-sensitive cases (oracle/BOUNDS.md 11): not failures */
    int64_t bwd_declined;    /* of passed: paged cases whose forward was judged and whose backward the backend
                                declined (fa_limits.supports_paged claims the forward only) */
    int64_t defects;         /* of not_judged: device entries the harness could not judge (fc_sweep_miss
                                FC_SWEEP_MISS_DEFECT: a defect of the sweep's entry, not of the backend) */
    double seconds;          /* wall time: the sweep's categories, the sum over their cases of the time from the
                                previous case's end to theirs; certify's own steps, the step's */
    double worst_ratio;
    char note[256];
    char failures[8][300];   /* first failures: "state -> file" */
    int nfail_listed;
    char defect_list[4][300];/* first harness defects: "LABEL: reason" */
    int ndefect_listed;
} cat_result;

/* Rounding bias of one output tensor pooled over the fixed sweep's cases (fc_tensor_stats.bias_*,
   properties/PROPERTIES.md "Rounding bias"), and the case whose own mean is farthest from 0 among
   those with at least BIAS_MIN_CASE elements (fewer: too noisy to name). A statistic, not a verdict. */
#define BIAS_MIN_CASE 256
typedef struct {
    double sum, zero_sum;
    int64_t n;
    double case_mean;        /* the most biased case's mean (signed or toward-zero, whichever is larger) */
    const char *case_kind;   /* "signed" or "toward zero"; NULL: no case qualified */
    char case_label[200];
} bias_acc;
static const int bias_tensors[5] = { FC_T_O, FC_T_LSE, FC_T_DQ, FC_T_DK, FC_T_DV };

typedef struct {
    const char *backend_arg;
    const char *profile;     /* --profile NAME, or NULL: the backend's declared profile */
    fa_precision prof_val;
    char backend[64];
    fa_limits lim;
    fa_memspace mem;
    int has_bwd;
    int stress;              /* --stress N: 0 off, N >= 2 runs (fz_run.h: the jobs' determinism value) */
    int only;                /* --category NAME: that sweep category alone (its index), -1 all */
    char out[4096];
    cat_result cat[CAT_COUNT];
    fz_iso_job *jobs;
    int *job_cat;
    fc_sweep_entry *entries;  /* the sweep, jobs[i] is entries[i] */
    int64_t njobs, cap;
    int64_t done;
    rp_plots *plots;         /* histograms and heat maps of the sweep's verdicts */
    bias_acc bias[5];        /* rounding bias per output tensor (bias_tensors), pooled over the fixed sweep */
    rp_progress prog;
    FILE *cases_log;         /* DIR/cases.log: a line per sweep case and per own step, as they finish */
    double t_last;           /* when the previous sweep case ended (now_s), or the sweep started */
} certify_ctx;

/* ------------------------------------------------------------------------- */
/* the sweep                                                                 */

/* A category is shown in the summary and the reports when it belongs to a set this backend
   takes: the device sets (cuda_*) on CUDA backends only; production always (on a host backend
   as not run, with the reason). */
static int cat_shown(const certify_ctx *x, int i)
{
    return i >= FC_SWEEP_CAT_COUNT || fc_sweep_cat_set(i) != FC_SWEEP_SET_CUDA || x->mem == FA_MEM_CUDA;
}

/* the sweep of this backend: the base set on every backend, the device grid and production
   on CUDA backends (with the > 2^31-element calls) */
static int build_sweep(certify_ctx *x, int quick)
{
    fc_sweep_opts o;
    fc_sweep_opts_default(&o);
    o.quick = quick;
    o.has_bwd = x->has_bwd;
    o.lim = &x->lim;
    if (x->mem == FA_MEM_CUDA && quick) {
        /* --quick: the device grid without its > 2^31-element calls and no production shapes
           (each is minutes of oracle work on the sample; the full certification runs them) */
        o.sets |= FC_SWEEP_SET_CUDA;
        o.big = 0;
        snprintf(x->cat[FC_SWEEP_PRODUCTION].note, sizeof x->cat[0].note,
                 "not run: --quick (production shapes and the > 2^31-element calls of cuda_big run in the full "
                 "certification, without --quick)");
        snprintf(x->cat[FC_SWEEP_CUDA_BIG].note, sizeof x->cat[0].note,
                 "not run: --quick (the > 2^31-element calls run in the full certification, without --quick)");
    } else if (x->mem == FA_MEM_CUDA)
        o.sets |= FC_SWEEP_SET_CUDA | FC_SWEEP_SET_PRODUCTION;
    else
        snprintf(x->cat[FC_SWEEP_PRODUCTION].note, sizeof x->cat[0].note,
                 "not run: %.40s is a host backend; production shapes (S >= 8k, > 2^31 elements per tensor) run "
                 "on CUDA backends (the harness's > 2^31 indexing: //properties:wide_index_test)", x->backend);
    int64_t n = fc_sweep_build(&o, &x->entries);
    if (n < 0) return -1;
    /* a contract-v3 category with no entry: the backend claims none of its features */
    static const char *feature[4] = { "varlen", "paged", "softcap", "sinks" };
    for (int c = FC_SWEEP_VARLEN; c <= FC_SWEEP_SINKS; c++) {
        int64_t k = 0;
        while (k < n && x->entries[k].category != c) k++;
        if (k == n)
            snprintf(x->cat[c].note, sizeof x->cat[0].note, "not run: backend %.60s does not claim %s (fa_limits.supports_%s)",
                     x->backend[0] ? x->backend : "(this backend)", feature[c - FC_SWEEP_VARLEN], feature[c - FC_SWEEP_VARLEN]);
    }
    if (x->only >= 0) {   /* --category: the entries of that category, in sweep order */
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++)
            if (x->entries[i].category == x->only) x->entries[m++] = x->entries[i];
        n = m;
        for (int c = 0; c < CAT_COUNT; c++)
            if (c != x->only && !x->cat[c].note[0])
                snprintf(x->cat[c].note, sizeof x->cat[0].note, "not run: --category %s", cat_name(x->only));
    }
    x->jobs = calloc((size_t)(n ? n : 1), sizeof *x->jobs);
    x->job_cat = calloc((size_t)(n ? n : 1), sizeof *x->job_cat);
    if (!x->jobs || !x->job_cat) return -1;
    for (int64_t i = 0; i < n; i++) {
        x->jobs[i].c = x->entries[i].c;
        x->jobs[i].prop = x->entries[i].prop;
        /* --stress N rides on the determinism value (fz_run.h); entries without the re-run (the
           > 2^31-element calls) keep none */
        x->jobs[i].determinism = x->stress && x->entries[i].determinism && fc_stress_applies(&x->entries[i].c)
                                     ? x->stress : x->entries[i].determinism;
        x->job_cat[i] = x->entries[i].category;
    }
    x->njobs = n;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* results                                                                   */

static void note_failure(certify_ctx *x, cat_result *cr, const fc_case *c, const char *pass, const char *tensor,
                         const char *failure, const char *detail)
{
    fz_crash_state st;
    fz_crash_state_make(&st, c, x->backend, pass, tensor, failure);
    char dir[4200], path[4400], msg[256], state[256];
    snprintf(dir, sizeof dir, "%s/failures", x->out);
    fz_crash_state_format(&st, state, sizeof state);
    int r = fz_store_save(dir, &st, c, detail, path, sizeof path, msg, sizeof msg);
    if (cr->nfail_listed < 8)
        snprintf(cr->failures[cr->nfail_listed++], sizeof cr->failures[0], "%s -> %s", state,
                 r >= 0 ? path + strlen(x->out) + 1 : "(not saved)");
}

static void on_job(void *user, int64_t index, const fz_run_result *r)
{
    certify_ctx *x = user;
    int cat = x->job_cat[index];
    cat_result *cr = &x->cat[cat];
    const fz_iso_job *j = &x->jobs[index];
    cr->run = 1;
    cr->cases++;
    /* wall time since the previous case ended (the worker runs the jobs in order): the case with its
       share of worker start-ups and restarts (r->total_s covers fz_run_case's checks only) */
    const double t_now = fc_clock_s(), dt = t_now - x->t_last;
    x->t_last = t_now;
    cr->seconds += dt;
    {   /* a line per case: on stdout with --category (few, large cases: where the time goes), always
           in DIR/cases.log as the run goes (what ran, how long, what was running if the run is cut) */
        static const char *kn[9] = { "PASS", "SKIP", "FAIL", "FAIL (device fault)", "FAIL (crash)", "FAIL (hang)",
                                     "NOT JUDGED (harness error)", "NOT JUDGED (harness past --timeout)", "OVERFLOW" };
        FILE *outs[2] = { x->only >= 0 ? stdout : NULL, x->cases_log };
        for (int k = 0; k < 2; k++) {
            if (!outs[k]) continue;
            fprintf(outs[k], "case %lld/%lld %s %s: %s, %lld elements judged, worst ratio %.4g, %.1f s%s%s%s%s\n",
                    (long long)index + 1, (long long)x->njobs, cat_name(cat), x->entries[index].label,
                    r->klass >= 0 && r->klass < 9 ? kn[r->klass] : "?", (long long)r->elements, r->worst_ratio,
                    dt, r->failure[0] ? " [" : "", r->failure, r->failure[0] ? "] " : "",
                    r->failure[0] && r->v.n_reasons ? r->v.reason[0].text : "");
            fflush(outs[k]);
        }
    }
    if (r->elements > 0) cr->has_ratio = 1;
    if (r->worst_ratio > cr->worst_ratio) cr->worst_ratio = r->worst_ratio;
    switch (r->klass) {
    case FZ_OUT_PASS: cr->passed++; break;
    case FZ_OUT_SKIP:   /* a declined layout or an uncheckable finding may be what the entry expects */
        if (fc_sweep_met(&x->entries[index], &r->v, NULL, 0)) {
            cr->passed++;
            cr->bwd_declined += x->entries[index].expect == FC_SWEEP_EXPECT_FWD_BWD_MAY_DECLINE;
        } else if (fc_sweep_miss(&x->entries[index], &r->v) == FC_SWEEP_MISS_DEFECT) {
            /* a device entry the harness cannot judge: not judged (the run cannot certify), named
               with its reason as a harness defect, not a failure of the backend */
            cr->not_judged++;
            cr->defects++;
            if (cr->ndefect_listed < 4)
                snprintf(cr->defect_list[cr->ndefect_listed++], sizeof cr->defect_list[0], "%.120s: %.170s",
                         x->entries[index].label, r->v.n_reasons > 0 ? r->v.reason[0].text : "(no reason given)");
        } else {
            cr->skipped++;
            if (cat >= FC_SWEEP_VARLEN && cat <= FC_SWEEP_SINKS && !cr->note[0])   /* contract v3: say why, once */
                snprintf(cr->note, sizeof cr->note, "skipped: %.200s",
                         r->v.n_reasons > 0 ? r->v.reason[0].text : "(no reason given)");
        }
        break;
    case FZ_OUT_SLOW: case FZ_OUT_ERROR: cr->not_judged++; break;
    case FZ_OUT_OVERFLOW: { /* its own class: counted and saved, never a failure */
        fz_crash_state st;
        fz_crash_state_make(&st, &j->c, x->backend, r->pass, r->tensor, "overflow-sensitive");
        char dir[4200], path[4400], msg[256];
        snprintf(dir, sizeof dir, "%s/overflow-sensitive", x->out);
        if (fz_store_save(dir, &st, &j->c, r->detail, path, sizeof path, msg, sizeof msg) < 0)
            fprintf(stderr, "flashcheck certify: overflow-sensitive case not saved: %s\n", msg);
        cr->overflow++;
        break;
    }
    default: {
        cr->failed++;
        char failure[64];
        snprintf(failure, sizeof failure, "%s%s%s", j->prop >= 0 ? fc_prop_table[j->prop].name : "",
                 j->prop >= 0 ? ":" : "", r->failure);
        note_failure(x, cr, &j->c, r->pass, r->tensor, failure, r->detail);
    }
    }
    if (j->prop < 0) {   /* the fixed sweep: one full check per case (a property's verdict merges several) */
        char label[200];
        snprintf(label, sizeof label, "%s case %lld (B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld D=%lld/%lld)", cat_name(cat),
                 (long long)index, (long long)j->c.p.batch, (long long)j->c.p.seqlen_q, (long long)j->c.p.seqlen_k,
                 (long long)j->c.p.heads_q, (long long)j->c.p.heads_kv, (long long)j->c.p.head_dim_qk, (long long)j->c.p.head_dim_v);
        rp_plots_add(x->plots, &r->v, label);
        for (int k = 0; k < 5; k++) {
            const fc_tensor_stats *ts = &r->v.t[bias_tensors[k]];
            bias_acc *ba = &x->bias[k];
            if (!ts->checked || ts->bias_n <= 0) continue;
            ba->sum += ts->bias_sum;
            ba->zero_sum += ts->bias_zero_sum;
            ba->n += ts->bias_n;
            if (ts->bias_n < BIAS_MIN_CASE) continue;
            double ms = ts->bias_sum / (double)ts->bias_n, mz = ts->bias_zero_sum / (double)ts->bias_n;
            double m = fabs(mz) > fabs(ms) ? mz : ms;
            if (!ba->case_kind || fabs(m) > fabs(ba->case_mean)) {
                ba->case_mean = m;
                ba->case_kind = fabs(mz) > fabs(ms) ? "toward zero" : "signed";
                snprintf(ba->case_label, sizeof ba->case_label, "%s", label);
            }
        }
    }
    x->done++;
    rp_progress_update(&x->prog, x->done, cat_name(cat));
}

static void misuse_to_pipe(void *user, const fz_misuse_result *res)
{
    int w = write(*(int *)user, res, sizeof *res);
    (void)w;
}

/* API misuse: every corruption kind, forward and backward, in a child process */
static void run_misuse(certify_ctx *x)
{
    cat_result *cr = &x->cat[CAT_API];
    cr->run = 1;
    int fds[2];
    if (pipe(fds) != 0) { snprintf(cr->note, sizeof cr->note, "pipe() failed"); return; }
    fflush(stdout); fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        fz_iso_child_init(parent);
        close(fds[0]);
        const fa_backend *be = fz_iso_backend(x->backend_arg);
        if (!be) _exit(3);
        fc_sweep_misuse(be, misuse_to_pipe, &fds[1]);
        _exit(0);
    }
    close(fds[1]);
    static fz_misuse_result res;
    for (;;) {
        size_t got = 0;
        while (got < sizeof res) {
            ssize_t k = read(fds[0], (char *)&res + got, sizeof res - got);
            if (k <= 0) break;
            got += (size_t)k;
        }
        if (got < sizeof res) break;
        cr->cases++;
        if (res.failure[0]) {
            cr->failed++;
            note_failure(x, cr, &res.c, res.backward ? "bwd" : "fwd", res.kind_name, res.failure, res.detail);
        } else {
            cr->passed++;
        }
    }
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && fz_iso_external_signal(WTERMSIG(status))) {   /* OOM killer, a user: not judged */
        cr->not_judged++;
        snprintf(cr->note, sizeof cr->note, "harness: the misuse process was killed from outside (signal %d, %s); "
                 "the remaining invalid calls were not run", WTERMSIG(status), strsignal(WTERMSIG(status)));
    } else if (WIFSIGNALED(status)) {
        cr->failed++;
        snprintf(cr->note, sizeof cr->note, "an invalid call crashed the process (signal %d, %s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    }
}

static void run_fuzz(certify_ctx *x, double seconds, int jobs)
{
    cat_result *cr = &x->cat[CAT_FUZZ];
    if (seconds <= 0) { snprintf(cr->note, sizeof cr->note, "skipped (--fuzz-seconds 0)"); return; }
    fz_camp_cfg cfg;
    fz_camp_cfg_default(&cfg);
    static char corpus[4200], findings[4200];
    snprintf(corpus, sizeof corpus, "%s/fuzz-corpus", x->out);
    snprintf(findings, sizeof findings, "%s/fuzz-findings", x->out);
    cfg.backend = x->backend_arg;
    cfg.corpus_dir = corpus;
    cfg.findings_dir = findings;
    cfg.seconds = seconds;
    cfg.status_line = x->prog.on;   /* the campaign's own line, on a terminal only */
    cfg.quiet = 1;
    cfg.seeds_dir = cli_seeds_default();
    cfg.workers = jobs > 0 ? jobs : fz_camp_default_workers(sysconf(_SC_NPROCESSORS_ONLN));
    if (!x->has_bwd) cfg.budget.backward = 0;
    if (x->stress) cfg.determinism = x->stress;
    fz_camp_stats st;
    char msg[256];
    if (fz_camp_run(&cfg, &st, msg, sizeof msg) != 0) { cr->run = 1; cr->not_judged = 1; snprintf(cr->note, sizeof cr->note, "harness error: %.230s", msg); return; }
    cr->run = 1;
    cr->cases = st.cases;
    cr->failed = st.findings_new + st.findings_dup;
    cr->passed = st.cases - cr->failed > 0 ? st.cases - cr->failed : 0;
    cr->skipped = st.skipped;
    cr->not_judged = st.slow;
    cr->overflow = st.overflow;
    cr->worst_ratio = st.worst_ratio;
    cr->has_ratio = st.elements > 0;
    snprintf(cr->note, sizeof cr->note, "%.0f s, %d worker(s), %.1f cases/s, %lld distinct findings in fuzz-findings/",
             st.seconds, cfg.workers, st.cases_per_s, (long long)st.findings_new);
    /* a fuzz step that was cut short or checked nothing is not judged (the run cannot certify), and says
       why: a signal (SIGTERM from a timeout, SIGINT, SIGHUP) stops the campaign cleanly after its
       current cases, and certify then writes its reports, which must not read as a pass */
    if (st.stop_signal) {
        cr->not_judged++;
        snprintf(cr->note, sizeof cr->note, "harness: the fuzz step was stopped by signal %d (%s) after %.1f of %.0f s, "
                 "%lld case(s) checked: not judged (not a finding; run certify again)", st.stop_signal,
                 strsignal(st.stop_signal), st.seconds, seconds, (long long)st.cases);
    } else if (st.cases == 0) {
        cr->not_judged++;
        snprintf(cr->note, sizeof cr->note, "harness: the fuzz step checked no case in %.1f s (budget %.0f s, %d "
                 "worker(s), %lld skipped, %lld harness errors): not judged (not a finding)", st.seconds, seconds,
                 cfg.workers, (long long)st.skipped, (long long)st.harness_errors);
    }
    if (st.findings_unsaved > 0) {   /* harness error: the findings are not on disk (stderr has their text) */
        cr->not_judged += st.findings_unsaved;
        snprintf(cr->note, sizeof cr->note, "harness error: %lld finding(s) could not be saved: %.180s",
                 (long long)st.findings_unsaved, st.save_error);
    }
}

/* compute-sanitizer on a few small cases (CUDA backends only) */
static void run_sanitizer(certify_ctx *x, int want)
{
    cat_result *cr = &x->cat[CAT_SANITIZER];
    if (!want) { snprintf(cr->note, sizeof cr->note, "not run (pass --sanitizer)"); return; }
    if (x->mem != FA_MEM_CUDA) { snprintf(cr->note, sizeof cr->note, "not run: backend %s is not a CUDA backend", x->backend); return; }
    const char *tool = NULL;
    static const char *cands[] = { "/usr/local/cuda/bin/compute-sanitizer", "/usr/bin/compute-sanitizer" };
    if (system("command -v compute-sanitizer >/dev/null 2>&1") == 0) tool = "compute-sanitizer";
    for (int i = 0; i < 2 && !tool; i++) if (access(cands[i], X_OK) == 0) tool = cands[i];
    if (!tool) { snprintf(cr->note, sizeof cr->note, "not run: compute-sanitizer not found on PATH or in /usr/local/cuda/bin"); return; }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) { snprintf(cr->note, sizeof cr->note, "not run: cannot find this executable"); return; }
    self[n] = 0;
    const char *cases[3] = { "shape = 1 65 97 2 1 64 64\nbackward = 1\n",
                             "shape = 1 129 33 4 2 64 64\ncausal = bottom_right\nmask = full_rows\nbackward = 1\n",
                             "shape = 2 17 129 2 1 128 128\nwindow = 16 15\nlayout.q = order 0 2 1 3 pad 0 0 8 0 offset 8\nbackward = 1\n" };
    static const char *tools[4] = { "memcheck", "racecheck", "synccheck", "initcheck" };
    cr->run = 1;
    rp_progress_start(&x->prog, stderr, "flashcheck certify: sanitizer", "runs", 12, !x->prog.on);   /* on as before */
    char dir[4200], msg[256];
    snprintf(dir, sizeof dir, "%s/sanitizer", x->out);
    fz_mkdirs(dir, msg, sizeof msg);
    for (int c = 0; c < 3; c++) {
        char cpath[4300];
        snprintf(cpath, sizeof cpath, "%s/case%d.case", dir, c);
        fz_write_atomic(cpath, cases[c], strlen(cases[c]), msg, sizeof msg);
        for (int t = 0; t < 4; t++) {
            char cmd[13000], log[4400];
            snprintf(log, sizeof log, "%s/case%d.%s.log", dir, c, tools[t]);
            snprintf(cmd, sizeof cmd, "'%s' --tool %s --error-exitcode 99 '%s' repro '%s' --backend '%s' --no-determinism > '%s' 2>&1",
                     tool, tools[t], self, cpath, x->backend_arg ? x->backend_arg : "cuda", log);
            int rc = system(cmd);
            int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
            cr->cases++;
            rp_progress_update(&x->prog, cr->cases, tools[t]);
            if (code == 0) cr->passed++;
            else {
                cr->failed++;
                if (cr->nfail_listed < 8)
                    snprintf(cr->failures[cr->nfail_listed++], sizeof cr->failures[0], "%s on case%d: exit %d%s -> sanitizer/case%d.%s.log",
                             tools[t], c, code, code == 99 ? " (errors reported)" : "", c, tools[t]);
            }
        }
    }
}

/* ------------------------------------------------------------------------- */
/* report                                                                    */

/* the run's verdict: a failure or regression decides NOT CERTIFIED; otherwise any case not judged
   (a harness error) makes it INCOMPLETE, never CERTIFIED */
enum { V_CERTIFIED, V_NOT_CERTIFIED, V_INCOMPLETE };
static const char *verdict_line[3] = { "CERTIFIED", "NOT CERTIFIED", "INCOMPLETE" };
static const char *verdict_json[3] = { "PASS", "FAIL", "INCOMPLETE" };

/* "shapes 3, fuzz 1" into buf: the categories with cases not judged; returns their total */
static int64_t not_judged_list(const certify_ctx *x, char *buf, size_t len)
{
    int64_t total = 0;
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < CAT_COUNT; i++) {
        if (!x->cat[i].not_judged) continue;
        total += x->cat[i].not_judged;
        if (n < len) n += (size_t)snprintf(buf + n, len - n, "%s%s %lld", n ? ", " : "", cat_name(i), (long long)x->cat[i].not_judged);
    }
    return total;
}

static const char *cat_status(const cat_result *c)
{
    if (!c->run) return "not run";
    if (c->failed) return "FAIL";
    if (c->not_judged) return "INCOMPLETE";   /* some cases not judged (harness errors): cannot PASS */
    if (c->cases == 0 || c->passed == 0) return c->skipped || c->not_judged ? "not judged" : "empty";
    return "PASS";
}

/* The category's worst error/bound as the tables show it ("%.4g"), or "-" when no element was
 * compared with the oracle. */
static const char *cat_ratio(const cat_result *c, char *buf, size_t len)
{
    if (c->has_ratio) snprintf(buf, len, "%.4g", c->worst_ratio);
    else snprintf(buf, len, "-");
    return buf;
}

static cJSON *report_json(const certify_ctx *x, int verdict, const char *date, cJSON *regressions)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "flashcheck_report", 1);
    cJSON_AddStringToObject(root, "backend", x->backend);
    cJSON_AddStringToObject(root, "profile", x->profile ? x->profile : "declared by the backend");
    cJSON_AddStringToObject(root, "date", date);
    cJSON_AddStringToObject(root, "result", verdict_json[verdict]);
    if (x->only >= 0) cJSON_AddStringToObject(root, "only_category", cat_name(x->only));
    cJSON *nj = cJSON_AddObjectToObject(root, "not_judged");   /* category -> cases not judged (harness errors) */
    for (int i = 0; i < CAT_COUNT; i++)
        if (x->cat[i].not_judged) cJSON_AddNumberToObject(nj, cat_name(i), (double)x->cat[i].not_judged);
    cJSON *cats = cJSON_AddArrayToObject(root, "categories");
    for (int i = 0; i < CAT_COUNT; i++) {
        const cat_result *c = &x->cat[i];
        if (!cat_shown(x, i)) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", cat_name(i));
        cJSON_AddStringToObject(o, "status", cat_status(c));
        cJSON_AddNumberToObject(o, "cases", (double)c->cases);
        cJSON_AddNumberToObject(o, "passed", (double)c->passed);
        cJSON_AddNumberToObject(o, "failed", (double)c->failed);
        cJSON_AddNumberToObject(o, "skipped", (double)c->skipped);
        cJSON_AddNumberToObject(o, "not_judged", (double)c->not_judged);
        cJSON_AddNumberToObject(o, "overflow_sensitive", (double)c->overflow);
        cJSON_AddNumberToObject(o, "harness_defects", (double)c->defects);   /* of not_judged */
        cJSON_AddNumberToObject(o, "backward_declined", (double)c->bwd_declined);   /* of passed: forward judged */
        cJSON_AddNumberToObject(o, "seconds", c->seconds);
        if (c->has_ratio) cJSON_AddNumberToObject(o, "worst_ratio", c->worst_ratio);
        else cJSON_AddNullToObject(o, "worst_ratio");   /* no element compared with the oracle */
        cJSON_AddStringToObject(o, "note", c->note);
        cJSON *f = cJSON_AddArrayToObject(o, "failures");
        for (int k = 0; k < c->nfail_listed; k++) cJSON_AddItemToArray(f, cJSON_CreateString(c->failures[k]));
        cJSON *d = cJSON_AddArrayToObject(o, "harness_defect_list");
        for (int k = 0; k < c->ndefect_listed; k++) cJSON_AddItemToArray(d, cJSON_CreateString(c->defect_list[k]));
        cJSON_AddItemToArray(cats, o);
    }
    cJSON *bias = cJSON_AddObjectToObject(root, "rounding_bias");   /* per output tensor, fixed sweep pooled */
    for (int k = 0; k < 5; k++) {
        const bias_acc *ba = &x->bias[k];
        if (ba->n <= 0) continue;
        cJSON *o = cJSON_AddObjectToObject(bias, fc_tensor_name(bias_tensors[k]));
        cJSON_AddNumberToObject(o, "elements", (double)ba->n);
        cJSON_AddNumberToObject(o, "mean_bias", ba->sum / (double)ba->n);
        cJSON_AddNumberToObject(o, "mean_bias_toward_zero", ba->zero_sum / (double)ba->n);
        if (ba->case_kind) {
            cJSON_AddNumberToObject(o, "most_biased_case_mean", ba->case_mean);
            cJSON_AddStringToObject(o, "most_biased_case_kind", ba->case_kind);
            cJSON_AddStringToObject(o, "most_biased_case", ba->case_label);
        }
    }
    if (regressions) cJSON_AddItemToObject(root, "regressions", regressions);
    return root;
}

/* compare with a baseline report; returns a JSON array of regressions (maybe empty), NULL on a bad file */
static cJSON *compare_baseline(const certify_ctx *x, const char *path, char *msg, size_t msglen, char *bl_backend, size_t bllen)
{
    size_t len;
    char *text = cli_read_file(path, &len, msg, msglen);
    if (!text) return NULL;
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON *cats = root ? cJSON_GetObjectItemCaseSensitive(root, "categories") : NULL;
    cJSON *ver = root ? cJSON_GetObjectItemCaseSensitive(root, "flashcheck_report") : NULL;
    if (!root || !cJSON_IsArray(cats) || !cJSON_IsNumber(ver)) {
        snprintf(msg, msglen, "%s is not a flashcheck report.json (expected the JSON written by `flashcheck certify`)", path);
        cJSON_Delete(root);
        return NULL;
    }
    cJSON *be = cJSON_GetObjectItemCaseSensitive(root, "backend");
    snprintf(bl_backend, bllen, "%s", cJSON_IsString(be) ? be->valuestring : "?");
    cJSON *regs = cJSON_CreateArray();
    cJSON *c;
    cJSON_ArrayForEach(c, cats) {
        cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
        cJSON *failed = cJSON_GetObjectItemCaseSensitive(c, "failed");
        cJSON *passed = cJSON_GetObjectItemCaseSensitive(c, "passed");
        cJSON *worst = cJSON_GetObjectItemCaseSensitive(c, "worst_ratio");
        if (!cJSON_IsString(name) || !cJSON_IsNumber(failed)) continue;
        double base_worst = cJSON_IsNumber(worst) ? worst->valuedouble : -1;   /* null: not measured */
        for (int i = 0; i < CAT_COUNT; i++) {
            if (strcmp(cat_name(i), name->valuestring) != 0) continue;
            const cat_result *now = &x->cat[i];
            char line[400] = "";
            int was_pass = failed->valuedouble == 0 && cJSON_IsNumber(passed) && passed->valuedouble > 0;
            if (was_pass && now->run && now->failed > 0)
                snprintf(line, sizeof line, "%s: passed in the baseline, now %lld failure(s)", cat_name(i), (long long)now->failed);
            else if (now->run && now->has_ratio && i != CAT_FUZZ && base_worst > 0 && now->worst_ratio > 2.0 * base_worst)
                snprintf(line, sizeof line, "%s: worst error/bound grew from %.4g to %.4g (more than one log2 bucket)",
                         cat_name(i), base_worst, now->worst_ratio);
            else if (now->run && now->has_ratio && base_worst == 0 && now->worst_ratio > 0 && was_pass && i != CAT_FUZZ)
                snprintf(line, sizeof line, "%s: exact in the baseline (error 0), now error/bound %.4g", cat_name(i), now->worst_ratio);
            if (line[0]) cJSON_AddItemToArray(regs, cJSON_CreateString(line));
        }
    }
    cJSON_Delete(root);
    return regs;
}

static int write_markdown(const certify_ctx *x, const char *path, int verdict, const char *date, const cJSON *regs,
                          const char *baseline, const char *plots_md, char *msg, size_t msglen)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
#define MD(...) do { if (n < cap) n += (size_t)snprintf(b + n, cap - n, __VA_ARGS__); } while (0)
    MD("# flashcheck certification: %s\n\n", x->backend);
    MD("- result: **%s**\n- date: %s\n- backend: `%s` (%s memory; max head dim %lld, head dim multiple %lld%s)\n\n",
       verdict_line[verdict], date, x->backend, x->mem == FA_MEM_CUDA ? "CUDA" : "host",
       (long long)x->lim.max_head_dim, (long long)x->lim.head_dim_multiple, x->has_bwd ? ", forward + backward" : ", forward only");
    MD("- precision profile: %s\n\n", x->profile ? x->profile : "declared by the backend");
    char njl[600];
    if (not_judged_list(x, njl, sizeof njl) > 0)
        MD("**Not judged** (harness errors: out of memory, killed from outside, harness past --timeout, a sweep entry "
           "the harness cannot judge; not findings against the backend, but the run cannot certify): %s. Run those "
           "cases again; a harness defect (listed below) needs a fixed sweep.\n\n", njl);
    MD("Each case checks every output element against the oracle's per-element bound (ratio = |got - ref| / bound;\n"
       "an element passes at ratio <= 1), plus guards, unwritten outputs, unchanged inputs and determinism.\n\n");
    MD("| category | status | cases | passed | failed | skipped | not judged | worst error/bound | seconds | covers |\n");
    MD("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < CAT_COUNT; i++) {
        const cat_result *c = &x->cat[i];
        if (!cat_shown(x, i)) continue;
        char ratio[32];
        cat_ratio(c, ratio, sizeof ratio);
        MD("| %s | %s | %lld | %lld | %lld | %lld | %lld | %s | %.1f | %s |\n", cat_name(i), cat_status(c), (long long)c->cases,
           (long long)c->passed, (long long)c->failed, (long long)c->skipped, (long long)c->not_judged, ratio, c->seconds,
           cat_what(i));
    }
    MD("\n");
    int any_bias = 0;
    for (int k = 0; k < 5; k++) any_bias |= x->bias[k].n > 0;
    if (any_bias) {
        MD("Rounding bias of the fixed sweep (mean of (got - ref) / bound over every finite element with a bound, pooled "
           "over the cases; *toward zero*: the same with the sign of ref, < 0 when results are pulled toward zero). "
           "Unbiased rounding gives means near 0; a round-to-nearest that truncates shows a negative toward-zero mean, "
           "one that rounds up a positive signed mean. A statistic, not a verdict: see properties/PROPERTIES.md, "
           "\"Rounding bias\".\n\n");
        MD("| tensor | elements | mean signed | mean toward zero | most biased case (>= %d elements) |\n|---|---:|---:|---:|---|\n",
           BIAS_MIN_CASE);
        for (int k = 0; k < 5; k++) {
            const bias_acc *ba = &x->bias[k];
            if (ba->n <= 0) continue;
            MD("| %s | %lld | %.3g | %.3g | ", fc_tensor_name(bias_tensors[k]), (long long)ba->n, ba->sum / (double)ba->n,
               ba->zero_sum / (double)ba->n);
            if (ba->case_kind) MD("%.3g (%s): %s |\n", ba->case_mean, ba->case_kind, ba->case_label);
            else MD("- |\n");
        }
        MD("\n");
    }
    for (int i = 0; i < CAT_COUNT; i++) {
        const cat_result *c = &x->cat[i];
        if (c->note[0]) MD("- %s: %s\n", cat_name(i), c->note);
        if (c->bwd_declined)
            MD("- %s: %lld case(s) passed on the forward alone: the backend declined their backward (paged K/V: "
               "fa_limits.supports_paged claims the forward only)\n", cat_name(i), (long long)c->bwd_declined);
        if (c->overflow)
            MD("- %s: %lld overflow-sensitive case(s) (NaN/Inf where the profile's intermediates may overflow, "
               "oracle/BOUNDS.md section 11; not failures): overflow-sensitive/\n", cat_name(i), (long long)c->overflow);
    }
    for (int i = 0; i < CAT_COUNT; i++) {
        const cat_result *c = &x->cat[i];
        if (!c->ndefect_listed) continue;
        MD("\n## %s: harness defects (entries the sweep built but cannot judge; not findings against the backend)\n\n",
           cat_name(i));
        for (int k = 0; k < c->ndefect_listed; k++) MD("- %s\n", c->defect_list[k]);
        if (c->defects > c->ndefect_listed) MD("- ... %lld more\n", (long long)(c->defects - c->ndefect_listed));
    }
    for (int i = 0; i < CAT_COUNT; i++) {
        const cat_result *c = &x->cat[i];
        if (!c->nfail_listed) continue;
        MD("\n## %s failures (replay with `flashcheck repro FILE`)\n\n", cat_name(i));
        for (int k = 0; k < c->nfail_listed; k++) MD("- `%s`\n", c->failures[k]);
        if (c->failed > c->nfail_listed) MD("- ... %lld more\n", (long long)(c->failed - c->nfail_listed));
    }
    if (baseline) {
        MD("\n## Comparison with %s\n\n", baseline);
        int nr = cJSON_GetArraySize(regs);
        if (nr == 0) MD("No regression.\n");
        const cJSON *r;
        cJSON_ArrayForEach(r, regs) MD("- REGRESSION: %s\n", r->valuestring);
    }
    if (plots_md) MD("%s", plots_md);
#undef MD
    int rc = fz_write_atomic(path, b, n < cap ? n : cap, msg, msglen);
    free(b);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* main                                                                      */

int cli_certify(int argc, char **argv)
{
    certify_ctx *x = calloc(1, sizeof *x);
    x->only = -1;
    const char *out = NULL, *baseline = NULL;
    int quick = 0, sanitizer = 0, quiet = 0;
    int64_t jobs = 0;
    double fuzz_s = 30, timeout = 300;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        int64_t k;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { fputs(certify_help, stdout); return CLI_OK; }
        if ((r = cli_opt(argc, argv, &i, "--backend", &v))) { if (r < 0) return cli_usage_error("certify", "--backend needs cpu, cuda or a .so path"); x->backend_arg = v; }
        else if ((r = cli_opt(argc, argv, &i, "--out", &v))) { if (r < 0 || !*v) return cli_usage_error("certify", "--out needs a directory"); out = cli_path(v); }
        else if ((r = cli_opt(argc, argv, &i, "--baseline", &v))) { if (r < 0) return cli_usage_error("certify", "--baseline needs a report.json"); baseline = cli_path(v); }
        else if ((r = cli_opt(argc, argv, &i, "--fuzz-seconds", &v))) { if (r < 0 || cli_parse_double(v, &fuzz_s) || fuzz_s < 0) return cli_usage_error("certify", "--fuzz-seconds needs seconds >= 0"); }
        else if ((r = cli_opt(argc, argv, &i, "--timeout", &v))) { if (r < 0 || cli_parse_double(v, &timeout) || timeout < FZ_ISO_MIN_TIMEOUT_S) return cli_usage_error("certify", "--timeout needs seconds >= %g", FZ_ISO_MIN_TIMEOUT_S); }
        else if ((r = cli_opt(argc, argv, &i, "--jobs", &v))) { if (r < 0 || cli_parse_i64(v, 1, FZ_CAMP_MAX_WORKERS, &k)) return cli_usage_error("certify", "--jobs needs an integer in [1, %d]", FZ_CAMP_MAX_WORKERS); jobs = k; }
        else if ((r = cli_opt(argc, argv, &i, "--profile", &v))) {
            fa_error perr;
            if (r < 0) return cli_usage_error("certify", "--profile needs a preset name");
            if (fa_precision_preset(v, &x->prof_val, &perr) != FA_OK) return cli_usage_error("certify", "--profile: %s", perr.msg);
            x->profile = v;
        }
        else if ((r = cli_opt(argc, argv, &i, "--stress", &v))) { if (r < 0 || cli_parse_i64(v, 2, 1000, &k)) return cli_usage_error("certify", "--stress needs a number of runs in [2, 1000]"); x->stress = (int)k; }
        else if ((r = cli_opt(argc, argv, &i, "--category", &v))) {
            int c = r < 0 ? -1 : fc_sweep_cat_by_name(v);
            if (c < 0) {
                char names[1024] = "";
                for (int k = 0; k < FC_SWEEP_CAT_COUNT; k++) {
                    size_t l = strlen(names);
                    snprintf(names + l, sizeof names - l, "%s%s", k ? ", " : "", fc_sweep_cat_name(k));
                }
                return cli_usage_error("certify", "--category needs a category of the fixed sweep: %s", names);
            }
            x->only = c;
        }
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--sanitizer") == 0) sanitizer = 1;
        else if (strcmp(argv[i], "--quiet") == 0) quiet = 1;
        else return cli_usage_error("certify", "unknown option or argument '%s'", argv[i]);
    }
    char msg[1024];
    if (baseline && access(baseline, R_OK) != 0)
        return cli_usage_error("certify", "--baseline %s: cannot read it (%s)", baseline, strerror(errno));
    if (baseline) {   /* parsed and validated now, not after the whole run */
        char blb[64];
        cJSON *probe = compare_baseline(x, baseline, msg, sizeof msg, blb, sizeof blb);
        if (!probe) return cli_usage_error("certify", "--baseline: %s", msg);
        cJSON_Delete(probe);
    }
    if (fz_iso_probe(x->backend_arg, x->backend, sizeof x->backend, &x->lim, &x->mem, &x->has_bwd, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck certify: backend %s: %s\n", cli_backend_label(x->backend_arg), msg);
        return CLI_BACKEND;
    }
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (out) snprintf(x->out, sizeof x->out, "%s", out);
    else {
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(x->out, sizeof x->out, "%s", cli_path("flashcheck-report"));
        size_t ol = strlen(x->out);
        snprintf(x->out + ol, sizeof x->out - ol, "-%s-%s", x->backend, stamp);
    }
    char md[4300], js[4300];
    snprintf(md, sizeof md, "%s/report.md", x->out);
    snprintf(js, sizeof js, "%s/report.json", x->out);
    /* the out dir: created, locked for the whole run (a second run on it refuses), probed for
       writing, and free of a report, all before anything runs */
    if (fz_mkdirs(x->out, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck certify: cannot use --out %s: %s (nothing was run)\n", x->out, msg);
        return CLI_INTERNAL;
    }
    int lock_rc = cli_lock_out_dir(x->out, msg, sizeof msg);
    if (lock_rc != 0) {
        fprintf(stderr, "flashcheck certify: %s (nothing was run)\n", msg);
        return lock_rc > 0 ? CLI_USAGE : CLI_INTERNAL;
    }
    if (access(md, F_OK) == 0 || access(js, F_OK) == 0) {
        fprintf(stderr, "flashcheck certify: %s already holds a report; choose another --out (nothing was overwritten)\n", x->out);
        return CLI_USAGE;
    }

    fprintf(stderr, "flashcheck certify: backend %s%s, report in %s\n", x->backend,
            x->backend_arg ? "" : " (default)", x->out);
    if (x->profile) fc_check_set_profile(&x->prof_val); /* the case workers are forked: they inherit it */
    fprintf(stderr, "flashcheck certify: precision profile %s\n", x->profile ? x->profile : "declared by the backend");
    if (build_sweep(x, quick) != 0) { fprintf(stderr, "flashcheck certify: out of memory building the sweep\n"); return CLI_INTERNAL; }
    x->plots = rp_plots_new();
    {
        char lp[4300];
        snprintf(lp, sizeof lp, "%s/cases.log", x->out);
        /* appended (a run cut short on this DIR leaves its lines); a log only: the reports are
           written, and their failure reported, at the end */
        x->cases_log = fopen(lp, "a");
        if (!x->cases_log) fprintf(stderr, "flashcheck certify: cannot write %s: %s (no per-case log)\n", lp, strerror(errno));
        else fprintf(x->cases_log, "# flashcheck certify %s, backend %s, %lld sweep cases\n", date, x->backend,
                     (long long)x->njobs);
    }
    rp_progress_start(&x->prog, stderr, "flashcheck certify", "cases", x->njobs, quiet);
    x->t_last = fc_clock_s();
    fz_iso_batch(x->backend_arg, x->jobs, x->njobs, timeout, on_job, x);
    rp_progress_end(&x->prog);
    if (x->only < 0) {
        double t0 = fc_clock_s();
        run_misuse(x);
        double t1 = fc_clock_s();
        x->cat[CAT_API].seconds = t1 - t0;
        fprintf(stderr, "flashcheck certify: API misuse done; fuzzing %.0f s\n", fuzz_s);
        run_fuzz(x, fuzz_s, (int)jobs);
        double t2 = fc_clock_s();
        x->cat[CAT_FUZZ].seconds = t2 - t1;
        run_sanitizer(x, sanitizer);
        x->cat[CAT_SANITIZER].seconds = fc_clock_s() - t2;
        for (int i = CAT_API; i < CAT_COUNT && x->cases_log; i++)
            if (x->cat[i].run)
                fprintf(x->cases_log, "step %s: %lld cases, %lld failed, %lld not judged, %.1f s\n", cat_name(i),
                        (long long)x->cat[i].cases, (long long)x->cat[i].failed, (long long)x->cat[i].not_judged,
                        x->cat[i].seconds);
    }
    rp_progress_end(&x->prog);
    if (x->cases_log) fclose(x->cases_log);
    x->cases_log = NULL;

    int pass = 1;
    for (int i = 0; i < CAT_COUNT; i++) if (x->cat[i].failed) pass = 0;
    char njl[600];
    int64_t n_not_judged = not_judged_list(x, njl, sizeof njl);
    cJSON *regs = NULL;
    char bl_backend[64] = "";
    if (baseline) {
        regs = compare_baseline(x, baseline, msg, sizeof msg, bl_backend, sizeof bl_backend);
        if (!regs) { fprintf(stderr, "flashcheck certify: --baseline: %s\n", msg); return CLI_USAGE; }
    }
    int nreg = regs ? cJSON_GetArraySize(regs) : 0;
    int verdict = !pass || nreg ? V_NOT_CERTIFIED : n_not_judged ? V_INCOMPLETE : V_CERTIFIED;
    cJSON *root = report_json(x, verdict, date, regs);
    if (baseline) cJSON_AddStringToObject(root, "baseline", baseline);
    char *jtext = cJSON_Print(root);
    int werr = fz_write_atomic(js, jtext, strlen(jtext), msg, sizeof msg) != 0;
    char *plots_md = NULL;
    if (!werr) werr = !(plots_md = rp_plots_write(x->plots, x->out, msg, sizeof msg));
    if (!werr) werr = write_markdown(x, md, verdict, date, cJSON_GetObjectItemCaseSensitive(root, "regressions"), baseline, plots_md, msg, sizeof msg) != 0;
    free(plots_md);
    rp_plots_free(x->plots);
    free(jtext);

    /* summary table */
    printf("flashcheck certify: backend %s, profile %s\n", x->backend, x->profile ? x->profile : "declared by the backend");
    printf("  %-16s %-10s %7s %7s %7s %8s %11s %12s %9s\n", "category", "status", "cases", "passed", "failed", "skipped",
           "not judged", "worst ratio", "seconds");
    for (int i = 0; i < CAT_COUNT; i++) {
        const cat_result *c = &x->cat[i];
        if (!cat_shown(x, i)) continue;
        char ratio[32];
        cat_ratio(c, ratio, sizeof ratio);
        printf("  %-16s %-10s %7lld %7lld %7lld %8lld %11lld %12s %9.1f\n", cat_name(i), cat_status(c), (long long)c->cases,
               (long long)c->passed, (long long)c->failed, (long long)c->skipped, (long long)c->not_judged, ratio,
               c->seconds);
    }
    for (int i = 0; i < CAT_COUNT; i++)
        for (int k = 0; k < x->cat[i].nfail_listed; k++) printf("  FAIL %s: %s\n", cat_name(i), x->cat[i].failures[k]);
    for (int i = 0; i < CAT_COUNT; i++)
        if (x->cat[i].bwd_declined)
            printf("  %s: %lld case(s) passed on the forward alone (the backend declined their paged backward)\n",
                   cat_name(i), (long long)x->cat[i].bwd_declined);
    for (int i = 0; i < CAT_COUNT; i++)
        for (int k = 0; k < x->cat[i].ndefect_listed; k++)
            printf("  HARNESS DEFECT %s (not judged, not a backend finding): %s\n", cat_name(i), x->cat[i].defect_list[k]);
    for (int i = 0; i < CAT_COUNT; i++)
        if (x->cat[i].overflow)
            printf("  overflow-sensitive %s: %lld case(s), not failures (oracle/BOUNDS.md 11), in %s/overflow-sensitive/\n",
                   cat_name(i), (long long)x->cat[i].overflow, x->out);
    if (baseline) {
        printf("baseline %s (backend %s): %d regression(s)\n", baseline, bl_backend, nreg);
        const cJSON *r;
        cJSON_ArrayForEach(r, regs) printf("  REGRESSION %s\n", r->valuestring);
    }
    if (n_not_judged)
        printf("not judged: %lld case(s) (harness errors, not findings): %s\n", (long long)n_not_judged, njl);
    printf("result: %s%s%s%s\n", verdict_line[verdict], nreg ? " (with regressions against the baseline)" : "",
           x->only >= 0 ? " -- category only: " : "", x->only >= 0 ? cat_name(x->only) : "");
    if (!werr) printf("report: %s\n        %s\n", md, js);
    cJSON_Delete(root);
    if (werr) { fprintf(stderr, "flashcheck certify: cannot write the report: %s (the summary above is the result)\n", msg); return CLI_INTERNAL; }
    return verdict == V_CERTIFIED ? CLI_OK : verdict == V_INCOMPLETE ? CLI_INTERNAL : CLI_FAIL;
}
