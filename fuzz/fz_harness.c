/* fz_harness.c: see fz_harness.h. */
#include "fuzz/fz_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fz_h_state fz_h_global;
static int fz_h_ready;

static int64_t env_int(const char *name, int64_t dflt)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || v < 0) {
        fprintf(stderr, "flashcheck fuzz: %s='%s' is not a non-negative integer; using %lld\n", name, s,
                (long long)dflt);
        return dflt;
    }
    return v;
}

void fz_h_budget_from_env(fz_budget *b)
{
    fz_budget_default(b);
    b->max_seq = env_int("FLASHCHECK_MAX_SEQ", b->max_seq);
    b->max_head_dim = env_int("FLASHCHECK_MAX_DIM", b->max_head_dim);
    b->max_batch = env_int("FLASHCHECK_MAX_BATCH", b->max_batch);
    b->max_heads_q = env_int("FLASHCHECK_MAX_HEADS", b->max_heads_q);
    if (b->max_batch < 1) b->max_batch = 1;
    if (b->max_heads_q < 1) b->max_heads_q = 1;
    if (b->max_head_dim < 1) b->max_head_dim = 1;
}

fz_h_state *fz_h(void)
{
    if (fz_h_ready) return &fz_h_global;
    fz_h_state *h = &fz_h_global;
    memset(h, 0, sizeof *h);
    const char *name = getenv("FLASHCHECK_BACKEND");
    if (!name || !*name) name = "cpu";
    fa_error err = { 0 };
    if (fa_backend_by_name(name, &h->backend, &err) != FA_OK || !h->backend) {
        fprintf(stderr, "flashcheck fuzz: FLASHCHECK_BACKEND=%s: %s\n", name, err.msg);
        exit(2);
    }
    fz_h_budget_from_env(&h->budget);
    const char *dir = getenv("FLASHCHECK_FINDINGS");
    snprintf(h->findings_dir, sizeof h->findings_dir, "%s", dir && *dir ? dir : "findings");
    h->abort_on_finding = env_int("FLASHCHECK_ABORT", 0) != 0;
    fz_h_ready = 1;
    return h;
}

int fz_h_finding(const fc_case *c, const char *pass, const char *tensor, const char *failure,
                 const char *detail)
{
    fz_h_state *h = fz_h();
    fz_crash_state st;
    fz_crash_state_make(&st, c, h->backend->name, pass, tensor, failure);
    char path[1200], msg[512], state[256];
    fz_crash_state_format(&st, state, sizeof state);
    int r = fz_store_save(h->findings_dir, &st, c, detail, path, sizeof path, msg, sizeof msg);
    if (r < 0) {
        /* the finding must not be lost: print the whole repro to stderr */
        char text[16384];
        fc_case_write(c, text, sizeof text);
        fprintf(stderr, "flashcheck fuzz: FINDING %s (could not save: %s)\n%s\n%s\n", state, msg,
                detail ? detail : "", text);
        h->findings_new++;
    } else if (r == 1) {
        fprintf(stderr, "flashcheck fuzz: NEW FINDING %s -> %s\n", state, path);
        h->findings_new++;
    } else {
        h->findings_dup++;
    }
    if (r != 0 && h->abort_on_finding) {
        fprintf(stderr, "flashcheck fuzz: FLASHCHECK_ABORT=1: aborting on %s\n%s\n", state, detail ? detail : "");
        abort();
    }
    return r != 0;
}
