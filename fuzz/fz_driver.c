/* fz_driver.c: a standalone main for the fuzz targets, so the SAME target
 * sources built with gcc (Bazel) can replay files and run short generated
 * campaigns in tests, without libFuzzer.
 *
 *   TARGET [-runs=N] [-seed=S] [-max_len=L] [-expect_finding] [PATH...]
 *
 * Every PATH (a file, or a directory: each regular file in it, sorted) is
 * replayed once. With -runs=N, N more inputs are generated: each one is a
 * mutation (the target's LLVMFuzzerCustomMutator, else a byte mutation) of
 * an input drawn from a pool of the replayed files and earlier inputs.
 * Findings are recorded as in libFuzzer runs (fz_harness.h); under
 * `bazel test` they go to $TEST_UNDECLARED_OUTPUTS_DIR/findings unless
 * FLASHCHECK_FINDINGS says otherwise.
 *
 * Exit status: 0 no finding; 1 at least one finding (new or duplicate);
 * 2 usage or I/O error. -expect_finding inverts 0 and 1 (a test that the
 * harness catches a deliberately broken backend).
 * ------------------------------------------------------------------------- */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/fz_gen.h"
#include "fuzz/fz_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);
__attribute__((weak)) size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

/* ------------------------------------------------------------------------- */
/* libFuzzer's LLVMFuzzerMutate, for custom mutators that call it: a simple   */
/* byte mutation (flip, insert, erase, copy a digit run)                      */

static fz_rng drv_rng;

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size)
{
    if (max_size == 0) return 0;
    if (size == 0) { data[0] = (uint8_t)fz_rng_next(&drv_rng); return 1; }
    switch (fz_rng_below(&drv_rng, 4)) {
    case 0: data[fz_rng_below(&drv_rng, size)] ^= (uint8_t)(1u << fz_rng_below(&drv_rng, 8)); return size;
    case 1: data[fz_rng_below(&drv_rng, size)] = (uint8_t)('0' + fz_rng_below(&drv_rng, 10)); return size;
    case 2:
        if (size < max_size) {
            size_t at = fz_rng_below(&drv_rng, size + 1);
            memmove(data + at + 1, data + at, size - at);
            data[at] = (uint8_t)fz_rng_next(&drv_rng);
            return size + 1;
        }
        return size;
    default:
        if (size > 1) {
            size_t at = fz_rng_below(&drv_rng, size);
            memmove(data + at, data + at + 1, size - at - 1);
            return size - 1;
        }
        return size;
    }
}

/* ------------------------------------------------------------------------- */
/* inputs                                                                    */

typedef struct { uint8_t *data; size_t size; } drv_input;
typedef struct { drv_input *v; size_t n, cap; } drv_pool;

static void pool_add(drv_pool *p, const uint8_t *data, size_t size)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->v = realloc(p->v, p->cap * sizeof *p->v);
        if (!p->v) { fprintf(stderr, "out of memory\n"); exit(2); }
    }
    p->v[p->n].data = malloc(size ? size : 1);
    memcpy(p->v[p->n].data, data, size);
    p->v[p->n].size = size;
    p->n++;
}

static int read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    uint8_t *b = malloc(cap);
    for (;;) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        b = realloc(b, cap *= 2);
    }
    fclose(f);
    *data = b;
    *size = n;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_one(const char *path, drv_pool *pool)
{
    uint8_t *data;
    size_t size;
    if (read_file(path, &data, &size) != 0) {
        fprintf(stderr, "fz_driver: cannot read %s\n", path);
        return -1;
    }
    fz_h_state *h = fz_h();
    int64_t before = h->findings_new + h->findings_dup;
    LLVMFuzzerTestOneInput(data, size);
    int found = h->findings_new + h->findings_dup > before;
    fprintf(stderr, "fz_driver: %s %s\n", found ? "FINDING" : "ok     ", path);
    pool_add(pool, data, size);
    free(data);
    return found;
}

static int replay_path(const char *path, drv_pool *pool, int64_t *files)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fz_driver: %s does not exist\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) { (*files)++; return run_one(path, pool) < 0 ? -1 : 0; }
    DIR *d = opendir(path);
    if (!d) { fprintf(stderr, "fz_driver: cannot open directory %s\n", path); return -1; }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) names = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
        names[n++] = strdup(full);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        (*files)++;
        if (run_one(names[i], pool) < 0) rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* main                                                                      */

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [-runs=N] [-seed=S] [-max_len=L] [-expect_finding] [PATH...]\n"
            "  replays each PATH (file or directory), then runs N generated inputs.\n"
            "  environment: FLASHCHECK_BACKEND (cpu|cuda|PATH.so), FLASHCHECK_FINDINGS (dir),\n"
            "  FLASHCHECK_MAX_SEQ/_DIM/_BATCH/_HEADS (budget), FLASHCHECK_CPU_MUTANT (cpu backend).\n"
            "  exit: 0 no finding, 1 findings, 2 usage/IO error (-expect_finding swaps 0 and 1)\n",
            argv0);
}

int main(int argc, char **argv)
{
    long long runs = 0;
    unsigned long long seed = 1;
    size_t max_len = 8192;
    int expect = 0;
    char **paths = calloc((size_t)argc, sizeof *paths);
    int npaths = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "-runs=", 6) == 0) runs = atoll(a + 6);
        else if (strncmp(a, "-seed=", 6) == 0) seed = strtoull(a + 6, NULL, 10);
        else if (strncmp(a, "-max_len=", 9) == 0) max_len = (size_t)atoll(a + 9);
        else if (strcmp(a, "-expect_finding") == 0) expect = 1;
        else if (strcmp(a, "-help") == 0 || strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(argv[0]); return 0; }
        else if (a[0] == '-') { fprintf(stderr, "fz_driver: unknown option %s\n", a); usage(argv[0]); return 2; }
        else paths[npaths++] = argv[i];
    }
    if (runs < 0 || max_len < 64) { usage(argv[0]); return 2; }
    if (!getenv("FLASHCHECK_FINDINGS")) {
        const char *out = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
        if (!out) out = getenv("TEST_TMPDIR");
        if (out) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/findings", out);
            setenv("FLASHCHECK_FINDINGS", dir, 1);
        }
    }
    fz_rng_seed(&drv_rng, seed);
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    fz_h_state *h = fz_h();
    fprintf(stderr, "fz_driver: backend %s, findings -> %s\n", h->backend->name, h->findings_dir);

    drv_pool pool = { 0 };
    int64_t files = 0;
    int io_error = 0;
    for (int i = 0; i < npaths; i++)
        if (replay_path(paths[i], &pool, &files) != 0) io_error = 1;

    const int64_t t0 = fc_clock_ns();
    uint8_t *buf = malloc(max_len + 1);
    for (long long r = 0; r < runs; r++) {
        size_t size = 0;
        if (pool.n && fz_rng_below(&drv_rng, 8) != 0) {
            drv_input *in = &pool.v[fz_rng_below(&drv_rng, pool.n)];
            size = in->size < max_len ? in->size : max_len;
            memcpy(buf, in->data, size);
        }
        unsigned s = (unsigned)fz_rng_next(&drv_rng);
        if (LLVMFuzzerCustomMutator) size = LLVMFuzzerCustomMutator(buf, size, max_len, s);
        else for (int k = 0; k < 4; k++) size = LLVMFuzzerMutate(buf, size, max_len);
        int64_t before = h->findings_new + h->findings_dup;
        LLVMFuzzerTestOneInput(buf, size);
        if (h->findings_new + h->findings_dup == before) pool_add(&pool, buf, size);
        if (pool.n > 4096) { free(pool.v[0].data); memmove(pool.v, pool.v + 1, (pool.n - 1) * sizeof *pool.v); pool.n--; }
    }
    double secs = 1e-9 * (double)(fc_clock_ns() - t0);
    int64_t found = h->findings_new + h->findings_dup;
    fprintf(stderr,
            "fz_driver: %lld files replayed, %lld generated in %.2f s (%.1f/s), %lld executions, "
            "%lld skipped (unsupported), worst error/bound %.3g, findings %lld new + %lld duplicate\n",
            (long long)files, runs, secs, runs && secs > 0 ? (double)runs / secs : 0.0, (long long)h->execs,
            (long long)h->skipped, h->worst_ratio, (long long)h->findings_new, (long long)h->findings_dup);
    for (size_t i = 0; i < pool.n; i++) free(pool.v[i].data);
    free(pool.v);
    free(buf);
    free(paths);
    if (io_error) return 2;
    if (expect) {
        if (!found) fprintf(stderr, "fz_driver: FAIL: expected a finding (deliberately broken backend) and got none\n");
        return found ? 0 : 1;
    }
    return found ? 1 : 0;
}
