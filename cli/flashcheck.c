/* flashcheck.c: the `flashcheck` command: dispatch, help, shared helpers.
 * See cli.h for the exit codes. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    "  fuzz      coverage- and error-guided campaign on N workers (one per GPU) with a live status line\n"
    "  repro     replay a repro file (a finding, a regression, a .min)\n"
    "  shrink    reduce a failing repro file to a minimal case (writes FILE.min)\n"
    "  verify    check outputs of any framework saved as .npy (q k v o lse; do dq dk dv)\n"
    "\n"
    "every command takes --backend cpu|cuda|PATH.so (default: CUDA when a GPU is present, else CPU)\n"
    "or py:MODULE_OR_FILE:CALLABLE (a Python kernel: python/README.md), and --help. With no\n"
    "command-specific option, `flashcheck certify` certifies the default backend.\n"
    "\n"
    "exit codes: 0 ok/pass; 1 a check failed (or findings, or the failure reproduced);\n"
    "            2 usage or bad input file; 3 backend cannot be loaded; 4 internal or I/O error\n";

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
    if (*i + 1 >= argc) return -1;
    *value = argv[++*i];
    return 1;
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
    if (fc_case_parse(text, c, why, sizeof why) != 0) {
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
        { "shrink", cli_shrink }, { "verify", cli_verify },
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(sub, cmds[i].name) == 0) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "flashcheck: unknown command '%s'; the commands are certify, fuzz, repro, shrink, verify "
                    "(run 'flashcheck --help')\n", sub);
    return CLI_USAGE;
}
