/* cmd_fuzz.c: `flashcheck fuzz`: a campaign on N workers (one per online core by
 * default; a CUDA backend's workers share the GPUs round-robin) with a live status line. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "fuzz/fz_campaign.h"
#include "fuzz/fz_isolate.h"
#include "properties/check/check.h"

static const char *fuzz_help =
    "usage: flashcheck fuzz [--backend B] [--jobs N | --gpus LIST] [--time SEC] [--cases N]\n"
    "                       [--corpus DIR] [--findings DIR] [--seeds DIR] [--max-seq N] [--max-dim N]\n"
    "                       [--max-batch N] [--max-heads N] [--max-work N] [--budget small|production]\n"
    "                       [--forward-only] [--timeout SEC] [--seed S]\n"
    "                       [--no-determinism] [--stress N] [--quiet] [--profile NAME] [--oracle auto|cpu|gpu]\n"
    "                       [--device-lock off|on|FILE] [--device-wait auto|spin|yield|block]\n"
    "\n"
    "A coverage- and error-guided campaign: each worker mutates cases from the shared corpus\n"
    "(shapes at tile boundaries +-1, 0, 1, primes; permuted/padded/offset layouts; masks with\n"
    "fully masked rows and columns; extreme values), checks EVERY output element against the\n"
    "oracle's bound (plus guards, unwritten outputs, determinism), and keeps cases that reach a new\n"
    "error/bound bucket or tile path. Findings are deduplicated by numerical crash state and saved\n"
    "atomically as repro files; a worker that crashes or hangs is replaced and its case recorded.\n"
    "The status line shows elapsed time, cases/s (cases = checked executions), worst error/bound,\n"
    "corpus growth and findings; the summary repeats them.\n"
    "\n"
    "options:\n"
    "  --backend B      cpu | cuda | PATH.so (default: CUDA when a GPU is present, else CPU)\n"
    "  --jobs N         worker processes (default: the number of online cores; CUDA workers share the GPUs)\n"
    "  --gpus LIST      comma-separated GPU ids; workers are spread over them round-robin\n"
    "                   (default: every GPU visible through CUDA_VISIBLE_DEVICES / /dev/nvidiaN)\n"
    "  --time SEC       stop after SEC seconds (default 60; 0 = until Ctrl-C or --cases)\n"
    "  --cases N        stop after N executions in total\n"
    "  --corpus DIR     shared corpus directory (default fuzz-corpus)\n"
    "  --findings DIR   findings directory (default findings)\n"
    "  --seeds DIR      extra seed cases (read only; default fuzz/regressions/fwd when it exists)\n"
    "  --max-seq N --max-dim N --max-batch N --max-heads N   case size budget (256, 128, 3, 8)\n"
    "  --max-work N     cap on a case's B*Hq*Sq*Sk*max(Dqk,Dv) (default 2^24 = 16777216): a case over it\n"
    "                   is shrunk (batch, then heads, then the longer sequence), so --max-seq alone does\n"
    "                   not reach long sequences\n"
    "  --budget NAME    named size budget, overridden by the --max-* options given with it: small (the\n"
    "                   default above) or production (S <= 16384, D <= 128, B <= 4, Hq <= 16, work <= 2^37,\n"
    "                   B*Hq*Sq*Sk <= 2^29: a CUDA backend's large calls go to the GPU oracle tier with\n"
    "                   --oracle auto; use fewer --jobs, each worker holds such a case in memory)\n"
    "  --forward-only   never run the backward pass\n"
    "  --timeout SEC    a backend call running longer is run once more with 4x the limit, and recorded\n"
    "                   as a hang if it times out again (default 60, at least 1)\n"
    "  --seed S         campaign seed (default 1)\n"
    "  --no-determinism skip the bitwise re-run of each case (about 2x faster)\n"
    "  --stress N       stress mode: each case that passes is also run N times at a size with many CTAs\n"
    "                   (batch raised toward 32768 query rows) while another thread loads the device (a\n"
    "                   quarter of its free memory copied without pause), compared bitwise across the runs\n"
    "                   and against the oracle (properties/check/check.h \"stress\"): races and\n"
    "                   schedule-dependent results that two runs of a small case rarely show\n"
    "  --quiet          no per-finding lines\n"
    "  --oracle TIER    the oracle tier that verifies each call: auto (default: the GPU tier for a CUDA\n"
    "                   backend's large calls, B*Hq*Sq*Sk*max(D) >= 2^24, when a device is usable; else the\n"
    "                   CPU tier), cpu, gpu (the GPU tier for every call of any backend); a GPU-tier failure\n"
    "                   falls back to the CPU tier (counted in the summary)\n"
    "  --oracle-gpu-min-work W  with --oracle auto, the smallest call (B*Hq*Sq*Sk*max(D)) of a CUDA\n"
    "                   backend verified on the GPU tier (default 2^24 = 16777216)\n"
    "  --device-lock L  off (default): CUDA workers share the device time-sliced; on: they take turns,\n"
    "                   one holding a lock private to the campaign around each device section (copies,\n"
    "                   call, copy-back, GPU oracle tier); FILE: the same with an flock(2) on FILE, for\n"
    "                   any backend, shared with other processes locking it (e.g. several campaigns on\n"
    "                   one GPU). Time waiting for the lock never counts toward --timeout; the summary's\n"
    "                   \"device\" line shows the time held and waited\n"
    "  --device-wait W  how a CUDA worker waits for the device in its synchronizations: spin (a core,\n"
    "                   the lowest latency), yield (spins, giving the core to others), block (sleeps;\n"
    "                   a wake-up per wait); auto (default): spin while holding the device lock, yield\n"
    "                   without one\n"
    "  --profile NAME   judge by the named precision preset (tensorcore, fp32, torch-flash, torch-efficient,\n"
    "                   torch-cudnn, torch-math, torch-math-lowp, torch-flex) instead of the backend's profile\n"
    "\n"
    "NaN/Inf where the profile's own intermediates may overflow for the case's magnitudes\n"
    "(oracle/BOUNDS.md section 11) are not findings: they are saved as repro files under\n"
    "FINDINGS/overflow-sensitive/ and counted in the summary.\n"
    "\n"
    "Harness events are never findings: a worker killed from outside (SIGKILL, SIGTERM, ...) has its\n"
    "case run again; out of memory in the harness is counted as a harness error. SIGINT, SIGTERM and\n"
    "SIGHUP stop the campaign cleanly (summary printed); workers die with the supervisor, even when it\n"
    "is SIGKILLed. A finding that cannot be saved (full or read-only disk) stops the campaign with\n"
    "exit 4; only saved findings are counted.\n"
    "\n"
    "exit: 0 no new finding, 1 new findings (listed in DIR), 2 usage, 3 backend cannot be loaded,\n"
    "      4 harness error (a finding could not be saved: the message names the path and the error)\n";

/* GPU ids: CUDA_VISIBLE_DEVICES if set, else /dev/nvidia<N> device files (no CUDA call here:
 * the supervisor must not initialize CUDA before forking workers) */
static int visible_gpus(char ids[][16], int max)
{
    int n = 0;
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    if (env) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", env);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
            if (*t && strcmp(t, "-1") != 0) snprintf(ids[n++], 16, "%s", t);
        return n;
    }
    for (int i = 0; i < 64 && n < max; i++) {
        char path[32];
        snprintf(path, sizeof path, "/dev/nvidia%d", i);
        if (access(path, F_OK) == 0) snprintf(ids[n++], 16, "%d", i);
    }
    return n;
}

int cli_fuzz(int argc, char **argv)
{
    fz_camp_cfg cfg;
    fz_camp_cfg_default(&cfg);
    cfg.seconds = 60;
    const char *fz_default_corpus = cfg.corpus_dir, *fz_default_findings = cfg.findings_dir;
    int64_t jobs = 0;
    const char *gpus = NULL;
    int seeds_given = 0, stress = 0;
    const char *profile = NULL;
    fc_oracle_tier oracle = FC_ORACLE_AUTO;
    fa_precision prof;
    /* --max-* given on the command line (-1: not given); applied over --budget after parsing */
    int64_t max_seq = -1, max_dim = -1, max_batch = -1, max_heads = -1, max_work = -1;
    const char *budget = NULL;
    const char *device_lock = "off", *device_wait = "auto";
    double gpu_min_work = 0;   /* 0: check.h FC_ORACLE_GPU_MIN_WORK */
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        int64_t x;
        double d;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { fputs(fuzz_help, stdout); return CLI_OK; }
#define NEED(cond, ...) do { if (r < 0 || !(cond)) return cli_usage_error("fuzz", __VA_ARGS__); } while (0)
        if ((r = cli_opt(argc, argv, &i, "--backend", &v))) { NEED(1, "--backend needs cpu, cuda or a .so path"); cfg.backend = v; }
        else if ((r = cli_opt(argc, argv, &i, "--jobs", &v))) { NEED(!cli_parse_i64(v, 1, FZ_CAMP_MAX_WORKERS, &x), "--jobs needs an integer in [1, %d]", FZ_CAMP_MAX_WORKERS); jobs = x; }
        else if ((r = cli_opt(argc, argv, &i, "--gpus", &v))) { NEED(*v, "--gpus needs a list like 0,1,2,3"); gpus = v; }
        else if ((r = cli_opt(argc, argv, &i, "--time", &v))) { NEED(!cli_parse_double(v, &d) && d >= 0, "--time needs seconds >= 0"); cfg.seconds = d; }
        else if ((r = cli_opt(argc, argv, &i, "--cases", &v))) { NEED(!cli_parse_i64(v, 1, INT64_MAX, &x), "--cases needs a positive integer"); cfg.max_cases = x; }
        else if ((r = cli_opt(argc, argv, &i, "--corpus", &v))) { NEED(*v, "--corpus needs a directory"); cfg.corpus_dir = cli_path(v); }
        else if ((r = cli_opt(argc, argv, &i, "--findings", &v))) { NEED(*v, "--findings needs a directory"); cfg.findings_dir = cli_path(v); }
        else if ((r = cli_opt(argc, argv, &i, "--seeds", &v))) { NEED(*v, "--seeds needs a directory"); cfg.seeds_dir = cli_path(v); seeds_given = 1; }
        else if ((r = cli_opt(argc, argv, &i, "--max-seq", &v))) { NEED(!cli_parse_i64(v, 1, 1 << 20, &x), "--max-seq needs an integer in [1, 2^20]"); max_seq = x; }
        else if ((r = cli_opt(argc, argv, &i, "--max-dim", &v))) { NEED(!cli_parse_i64(v, 1, 4096, &x), "--max-dim needs an integer in [1, 4096]"); max_dim = x; }
        else if ((r = cli_opt(argc, argv, &i, "--max-batch", &v))) { NEED(!cli_parse_i64(v, 1, 4096, &x), "--max-batch needs an integer in [1, 4096]"); max_batch = x; }
        else if ((r = cli_opt(argc, argv, &i, "--max-heads", &v))) { NEED(!cli_parse_i64(v, 1, 4096, &x), "--max-heads needs an integer in [1, 4096]"); max_heads = x; }
        else if ((r = cli_opt(argc, argv, &i, "--max-work", &v))) { NEED(!cli_parse_i64(v, 1, (int64_t)1 << 50, &x), "--max-work needs an integer in [1, 2^50]"); max_work = x; }
        else if ((r = cli_opt(argc, argv, &i, "--budget", &v))) {
            fz_budget tmp = cfg.budget;
            NEED(v && fz_budget_preset(v, &tmp) == 0, "--budget needs small or production");
            budget = v;
        }
        else if ((r = cli_opt(argc, argv, &i, "--timeout", &v))) { NEED(!cli_parse_double(v, &d) && d >= FZ_ISO_MIN_TIMEOUT_S, "--timeout needs seconds >= %g (a shorter limit kills cases that are merely starting up)", FZ_ISO_MIN_TIMEOUT_S); cfg.case_timeout_s = d; }
        else if ((r = cli_opt(argc, argv, &i, "--seed", &v))) { NEED(!cli_parse_i64(v, 0, INT64_MAX, &x), "--seed needs a non-negative integer"); cfg.seed = (uint64_t)x; }
        else if ((r = cli_opt(argc, argv, &i, "--oracle", &v))) {
            NEED(v && !fc_oracle_tier_parse(v, &oracle), "--oracle needs auto, cpu or gpu");
        }
        else if ((r = cli_opt(argc, argv, &i, "--oracle-gpu-min-work", &v))) { NEED(!cli_parse_double(v, &d) && d >= 1, "--oracle-gpu-min-work needs a work >= 1"); gpu_min_work = d; }
        else if ((r = cli_opt(argc, argv, &i, "--profile", &v))) {
            fa_error perr;
            NEED(1, "--profile needs a preset name");
            if (fa_precision_preset(v, &prof, &perr) != FA_OK) return cli_usage_error("fuzz", "--profile: %s", perr.msg);
            profile = v;
        }
        else if (strcmp(argv[i], "--forward-only") == 0) cfg.budget.backward = 0;
        else if (strcmp(argv[i], "--no-determinism") == 0) cfg.determinism = 0;
        else if ((r = cli_opt(argc, argv, &i, "--stress", &v))) { NEED(!cli_parse_i64(v, 2, 1000, &x), "--stress needs a number of runs in [2, 1000]"); stress = (int)x; }
        else if (strcmp(argv[i], "--quiet") == 0) cfg.quiet = 1;
        else if ((r = cli_opt(argc, argv, &i, "--device-lock", &v))) { NEED(v && *v, "--device-lock needs off, on or a file"); device_lock = v; }
        else if ((r = cli_opt(argc, argv, &i, "--device-wait", &v))) {
            NEED(v && (!strcmp(v, "auto") || !strcmp(v, "spin") || !strcmp(v, "yield") || !strcmp(v, "block")),
                 "--device-wait needs auto, spin, yield or block");
            device_wait = v;
        }
        else return cli_usage_error("fuzz", "unknown option or argument '%s'", argv[i]);
#undef NEED
    }
    if (budget) fz_budget_preset(budget, &cfg.budget);   /* validated above */
    if (max_seq > 0) cfg.budget.max_seq = max_seq;
    if (max_dim > 0) cfg.budget.max_head_dim = max_dim;
    if (max_batch > 0) cfg.budget.max_batch = max_batch;
    if (max_heads > 0) cfg.budget.max_heads_q = max_heads;
    if (max_work > 0) cfg.budget.max_work = max_work;
    if (stress) {
        if (!cfg.determinism) return cli_usage_error("fuzz", "--stress compares runs bitwise: it cannot go with --no-determinism");
        cfg.determinism = stress; /* fz_run.h: N >= 2 is stress mode with N runs */
    }
    if (cfg.seconds == 0 && cfg.max_cases == 0)
        fprintf(stderr, "flashcheck fuzz: no --time or --cases limit: running until Ctrl-C\n");
    if (!seeds_given) cfg.seeds_dir = cli_seeds_default();
    if (cfg.corpus_dir == fz_default_corpus) cfg.corpus_dir = cli_path(cfg.corpus_dir);
    if (cfg.findings_dir == fz_default_findings) cfg.findings_dir = cli_path(cfg.findings_dir);
    if (cfg.seeds_dir && access(cfg.seeds_dir, R_OK) != 0)
        return cli_usage_error("fuzz", "--seeds %s: no such readable directory", cfg.seeds_dir);

    /* which backend (probed in a child: this process must not initialize CUDA) */
    char bname[64], msg[512];
    fa_memspace mem;
    int has_bwd;
    if (fz_iso_probe(cfg.backend, bname, sizeof bname, NULL, &mem, &has_bwd, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck fuzz: backend %s: %s\n", cli_backend_label(cfg.backend), msg);
        return CLI_BACKEND;
    }
    if (!has_bwd) cfg.budget.backward = 0;

    /* workers and GPUs */
    static char ids[FZ_CAMP_MAX_WORKERS][16];
    int nids = 0;
    if (gpus) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", gpus);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && nids < FZ_CAMP_MAX_WORKERS; t = strtok_r(NULL, ",", &save)) {
            int64_t g;
            if (cli_parse_i64(t, 0, 1023, &g)) return cli_usage_error("fuzz", "--gpus: '%s' is not a GPU id", t);
            snprintf(ids[nids++], 16, "%lld", (long long)g);
        }
    } else if (mem == FA_MEM_CUDA) {
        nids = visible_gpus(ids, FZ_CAMP_MAX_WORKERS);
    }
    if (mem == FA_MEM_CUDA && nids == 0) {
        fprintf(stderr, "flashcheck fuzz: backend %s runs on CUDA but no GPU is visible (CUDA_VISIBLE_DEVICES, /dev/nvidia*)\n", bname);
        return CLI_BACKEND;
    }
    /* CUDA workers share the device time-sliced and yield their core while they wait in their
       synchronizations (to the other workers' host work); with --device-lock they take turns, the holder
       spinning (the device is its alone), the others blocked on the lock. Measured on an H100
       host (fuzz/RESULTS-2026-11-25-rate2.md): turns cost a GPU context switch per hand-over,
       more than time-slicing small calls, so the lock is off by default. */
    if (strcmp(device_lock, "off") == 0) cfg.device_lock = 0;
    else if (strcmp(device_lock, "on") == 0) cfg.device_lock = 1;
    else { cfg.device_lock = 1; cfg.device_lock_path = cli_path(device_lock); }
    if (strcmp(device_wait, "auto") == 0)
        cfg.device_wait = mem != FA_MEM_CUDA ? 0 : cfg.device_lock ? FC_DEVICE_WAIT_SPIN : FC_DEVICE_WAIT_YIELD;
    else
        cfg.device_wait = !strcmp(device_wait, "spin") ? FC_DEVICE_WAIT_SPIN : !strcmp(device_wait, "yield")
                          ? FC_DEVICE_WAIT_YIELD : FC_DEVICE_WAIT_BLOCK;
    if (jobs == 0) jobs = fz_camp_default_workers(sysconf(_SC_NPROCESSORS_ONLN));
    cfg.workers = (int)jobs;
    for (int i = 0; i < cfg.workers; i++) cfg.gpu[i] = nids ? ids[i % nids] : NULL;
    /* each worker's own threads: one core each unless the user says otherwise (OMP_NUM_THREADS
       in the environment, read by libgomp at program start, is then left alone) */
    if (!getenv("OMP_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long per = cores > cfg.workers ? cores / cfg.workers : 1;
        char t[32];
        snprintf(t, sizeof t, "%ld", per);
        setenv("OMP_NUM_THREADS", t, 1);   /* for processes the workers start */
        cfg.omp_threads = (int)per;         /* for the workers themselves */
    }

    if (profile) fc_check_set_profile(&prof); /* workers are forked: they inherit it */
    fc_check_set_oracle(oracle);             /* likewise */
    fc_check_set_oracle_gpu_min_work(gpu_min_work);
    fprintf(stderr, "flashcheck fuzz: profile %s\n", profile ? profile : "declared by the backend");
    fprintf(stderr, "flashcheck fuzz: backend %s, %d worker%s%s, budget S<=%lld D<=%lld B<=%lld Hq<=%lld work<=%lld%s, corpus %s, findings %s\n",
            bname, cfg.workers, cfg.workers == 1 ? "" : "s", nids ? " (GPUs round-robin)" : "",
            (long long)cfg.budget.max_seq, (long long)cfg.budget.max_head_dim, (long long)cfg.budget.max_batch,
            (long long)cfg.budget.max_heads_q, (long long)cfg.budget.max_work, cfg.budget.backward == 0 ? ", forward only" : "", cfg.corpus_dir,
            cfg.findings_dir);
    cfg.status_line = 1;
    fz_camp_stats st;
    if (fz_camp_run(&cfg, &st, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck fuzz: %s\n", msg);
        return strstr(msg, "backend") ? CLI_BACKEND : strstr(msg, "cannot create") ? CLI_INTERNAL : CLI_USAGE;
    }
    printf("fuzz summary: backend %s, %d workers, %.1f s, profile %s\n", bname, cfg.workers, st.seconds,
           profile ? profile : "declared by the backend");
    printf("  cases      %lld checked (%.1f cases/s), %lld executions (%.1f/s), %lld unsupported\n",
           (long long)st.cases, st.cases_per_s, (long long)st.execs, st.execs_per_s, (long long)st.skipped);
    if (st.startup_s > 0)
        printf("  rate       %.1f checked cases/s after the start-up (%.1f s until every worker had run a case)\n",
               st.warm_cases_per_s, st.startup_s);
    printf("  elements   %lld output elements compared with the oracle\n", (long long)st.elements);
    printf("  oracle     --oracle %s: %lld calls on the GPU tier, %lld on the CPU tier, %lld GPU-tier fallbacks%s",
           fc_oracle_tier_name(oracle), (long long)st.oracle_gpu, (long long)st.oracle_cpu,
           (long long)st.oracle_fallback, oracle == FC_ORACLE_AUTO ? "; GPU tier for a CUDA backend's calls of work >= " : "\n");
    if (oracle == FC_ORACLE_AUTO) printf("%.4g\n", fc_check_oracle_gpu_min_work());
    if (st.cases > 0)
        printf("  size       mean B*Hq*Sq*Sk*max(Dqk,Dv) %.4g per checked case; %.0f%% with backward\n",
               st.work / (double)st.cases, 100.0 * (double)st.backward_cases / (double)st.cases);
    if (st.check_s > 0)
        printf("  time       %.1f worker-s checking: %.1f%% inside the backend, %.1f%% waiting for the device lock, "
               "%.1f%% harness (inputs, oracle, checks, device copies)\n",
               st.check_s, 100.0 * st.backend_s / st.check_s, 100.0 * st.lock_wait_s / st.check_s,
               100.0 * (st.check_s - st.backend_s - st.lock_wait_s) / st.check_s);
    if (st.check_s > 0) {
        printf("  phases    ");
        for (int k = 0; k < FC_PH_COUNT; k++)
            printf(" %s %.1f%%%s", fc_check_phase_name(k), 100.0 * st.phase_s[k] / st.check_s, k + 1 < FC_PH_COUNT ? "," : "\n");
    }
    if (cfg.device_lock)
        printf("  device     lock %s: %lld sections, held %.1f s (%.0f%% of the wall time; %.3f ms per checked case), "
               "workers waited %.1f worker-s (%.1f%% of the checking time)%s\n",
               cfg.device_lock_path ? cfg.device_lock_path : "(campaign)", (long long)st.lock_sections, st.lock_held_s,
               st.seconds > 0 ? 100.0 * st.lock_held_s / st.seconds : 0.0,
               st.cases > 0 ? 1e3 * st.lock_held_s / (double)st.cases : 0.0, st.lock_wait_s,
               st.check_s > 0 ? 100.0 * st.lock_wait_s / st.check_s : 0.0,
               st.wait_failed ? "; CUDA refused --device-wait in some workers" : "");
    else if (cfg.device_wait)
        printf("  device     no device lock%s\n", st.wait_failed ? "; CUDA refused --device-wait in some workers" : "");
    if (cfg.device_wait)
        printf("  device     synchronizations %s\n", cfg.device_wait == FC_DEVICE_WAIT_SPIN ? "spin" :
               cfg.device_wait == FC_DEVICE_WAIT_YIELD ? "spin and yield" : "block");
    printf("  worst      error/bound %.4g\n", st.worst_ratio);
    printf("  corpus     +%lld inputs in %s\n", (long long)st.corpus, cfg.corpus_dir);
    printf("  findings   %lld new, %lld duplicates (%lld crashes, %lld hangs) in %s\n", (long long)st.findings_new,
           (long long)st.findings_dup, (long long)st.crashes, (long long)st.hangs, cfg.findings_dir);
    printf("  overflow   %lld overflow-sensitive cases (NaN/Inf where the profile may overflow; not findings) in "
           "%s/overflow-sensitive\n", (long long)st.overflow, cfg.findings_dir);
    if (st.harness_errors || st.external_kills || st.timeouts_unconfirmed || st.slow || st.corpus_unsaved)
        printf("  harness    %lld harness errors (not findings), %lld workers killed from outside, %lld timeouts not "
               "confirmed on re-run, %lld slow harness cases, %lld corpus inputs not written\n",
               (long long)st.harness_errors, (long long)st.external_kills, (long long)st.timeouts_unconfirmed,
               (long long)st.slow, (long long)st.corpus_unsaved);
    if (st.stop_signal) printf("  stopped    by signal %d (%s)\n", st.stop_signal, strsignal(st.stop_signal));
    if (st.findings_unsaved > 0) {
        printf("  NOT SAVED  %lld finding(s) could not be written (not counted above): %s\n", (long long)st.findings_unsaved,
               st.save_error);
        fprintf(stderr, "flashcheck fuzz: harness error: %lld finding(s) could not be saved: %s; the campaign was stopped "
                "(their repro text is printed above)\n", (long long)st.findings_unsaved, st.save_error);
        return CLI_INTERNAL;
    }
    return st.findings_new > 0 ? CLI_FAIL : CLI_OK;
}
