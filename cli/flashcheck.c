/* flashcheck.c: the `flashcheck` command: dispatch, help, shared helpers.
 * See cli.h for the exit codes. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

/* ------------------------------------------------------------------------- */
/* help                                                                      */

static const char *main_help =
    "flashcheck: certify, fuzz and debug flash-attention kernels against an MPFR oracle\n"
    "with a per-element error bound.\n"
    "\n"
    "usage: flashcheck COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  certify   fixed sweep of awkward shapes + property suite + fuzz budget (+ compute-sanitizer);\n"
    "            writes a Markdown and a JSON report; --baseline flags regressions\n"
    "  fuzz      coverage- and error-guided campaign on N workers (one per core) with a live status line\n"
    "  repro     replay a repro file (a finding, a regression, a .min)\n"
    "  shrink    reduce a failing repro file to a minimal case (writes FILE.min)\n"
    "  verify    check outputs of any framework saved as .npy (q k v o lse; do dq dk dv)\n"
    "  cases     write certify's fixed sweep as case files (one per case; nothing is run)\n"
    "  inputs    write a case's inputs as .npy (q k v do, mask) and the verify options (case.json)\n"
    "\n"
    "every command takes --backend cpu|cuda|PATH.so (default: CUDA when a GPU is present, else CPU)\n"
    "or py:MODULE_OR_FILE:CALLABLE (a Python kernel: python/README.md), and --help. With no\n"
    "command-specific option, `flashcheck certify` certifies the default backend.\n"
    "\n"
    "exit codes: 0 ok/pass; 1 a check failed (or findings, or the failure reproduced);\n"
    "            2 usage or bad input file (a bad case file, a missing option value);\n"
    "            3 backend cannot be loaded; 4 harness error: I/O (cannot write a report, a finding,\n"
    "            a full disk), out of memory, a worker killed from outside; never a finding (certify:\n"
    "            INCOMPLETE, some cases not judged for such a reason)\n"
    "\n"
    "under `bazel run`, relative paths are taken from the directory you ran bazel in\n"
    "(BUILD_WORKING_DIRECTORY), so reports and findings land there.\n";

/* ------------------------------------------------------------------------- */
/* shared helpers                                                            */

int cli_usage_error(const char *sub, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "flashcheck %s: ", sub);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(run 'flashcheck %s --help' for the options)\n", sub);
    return CLI_USAGE;
}

int cli_opt(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *a = argv[*i];
    size_t l = strlen(name);
    if (strncmp(a, name, l) != 0) return 0;
    if (a[l] == '=') { *value = a + l + 1; return 1; }
    if (a[l] != 0) return 0;
    /* a missing value, or the next option in its place ("--findings --quiet"), is an error:
       no value of these options starts with "--" (write --name=--x for one that does) */
    if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0) return -1;
    *value = argv[++*i];
    return 1;
}

const char *cli_path(const char *p)
{
    const char *wd = getenv("BUILD_WORKING_DIRECTORY");
    if (!p || !*p || p[0] == '/' || !wd || !*wd) return p;
    size_t n = strlen(wd) + strlen(p) + 2;
    char *r = malloc(n);
    if (!r) return p;
    snprintf(r, n, "%s/%s", wd, p);
    return r;   /* lives until exit */
}

int cli_lock_out_dir(const char *dir, char *msg, size_t msglen)
{
    static int held = -1;   /* open for the whole run; released by the kernel at exit */
    char path[4200];
    snprintf(path, sizeof path, "%s/.flashcheck.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(msg, msglen, "cannot write to %s: %s (creating %s)", dir, strerror(errno), path);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char who[512] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        who[n > 0 ? n : 0] = 0;
        who[strcspn(who, "\n")] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            snprintf(msg, msglen, "%s is in use by another run (%s); wait for it to finish or choose another --out",
                     dir, who[0] ? who : "its lock file names no process");
        else
            snprintf(msg, msglen, "cannot lock %s: %s", path, strerror(e));
        return e == EWOULDBLOCK ? 1 : -1;
    }
    /* this record doubles as the write probe: a read-only or full disk fails here, before any work */
    char rec[256], date[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(rec, sizeof rec, "flashcheck pid %ld, started %s\n", (long)getpid(), date);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, (size_t)n, 0) != n || fsync(fd) != 0) {
        snprintf(msg, msglen, "cannot write to %s: %s (writing %s)", dir, strerror(errno ? errno : EIO), path);
        close(fd);
        return -1;
    }
    if (held >= 0) close(held);
    held = fd;
    return 0;
}

const char *cli_seeds_default(void)
{
    static char buf[4200];
    if (access("fuzz/regressions/fwd", R_OK) == 0) return "fuzz/regressions/fwd";
    const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
    if (ws && *ws) {
        snprintf(buf, sizeof buf, "%s/fuzz/regressions/fwd", ws);
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

char *cli_read_file(const char *path, size_t *len, char *msg, size_t msglen)
{
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(msg, msglen, "cannot open %s: %s", path, strerror(errno)); return NULL; }
    size_t cap = 8192, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(b, 2 * cap + 1);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) { free(b); snprintf(msg, msglen, "cannot read %s", path); return NULL; }
    b[n] = 0;
    if (len) *len = n;
    return b;
}

int cli_load_case(const char *path, fc_case *c, char **text_out, char *msg, size_t msglen)
{
    size_t len;
    char why[300];
    char *text = cli_read_file(path, &len, msg, msglen);
    if (!text) return -1;
    if (memchr(text, 0, len)) {
        snprintf(msg, msglen, "%s is not a text repro file (it contains NUL bytes); a raw libFuzzer "
                 "input can be replayed with the fuzz target binary itself", path);
        free(text);
        return -1;
    }
    if (fc_case_parse_repro(text, c, why, sizeof why) != 0) {
        snprintf(msg, msglen, "%s: %s", path, why);
        free(text);
        return -1;
    }
    if (text_out) *text_out = text;
    else free(text);
    return 0;
}

const char *cli_backend_label(const char *name)
{
    return name ? name : "default (CUDA when a GPU is present, else CPU)";
}

/* ------------------------------------------------------------------------- */
/* main                                                                      */

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    struct { const char *name; int (*fn)(int, char **); } cmds[] = {
        { "certify", cli_certify }, { "fuzz", cli_fuzz }, { "repro", cli_repro },
        { "shrink", cli_shrink }, { "verify", cli_verify }, { "cases", cli_cases }, { "inputs", cli_inputs },
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(sub, cmds[i].name) == 0) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "flashcheck: unknown command '%s'; the commands are certify, fuzz, repro, shrink, verify, cases, inputs "
                    "(run 'flashcheck --help')\n", sub);
    return CLI_USAGE;
}
