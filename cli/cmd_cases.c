/* cmd_cases.c: `flashcheck cases` (certify's fixed sweep written as case files) and
 * `flashcheck inputs` (one case's inputs materialized by the case model as .npy, with
 * the options `flashcheck verify` needs to check that case's outputs). Nothing is run.
 * Used by the Python package's pytest fixture (python/flashcheck/pytest_plugin.py), so
 * that its cases and their values are certify's, never a second implementation. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/npy.h"
#include "fuzz/fz_store.h"
#include "properties/sweep/sweep.h"

static const char *cases_help =
    "usage: flashcheck cases --out DIR [--quick] [--category C]\n"
    "\n"
    "Writes the fixed sweep of `flashcheck certify` (the same cases, built by the same code: the\n"
    "categories shapes, causal, window, mask, gqa, layout, values, empty; not the property suite,\n"
    "misuse or fuzz steps) as case files DIR/CATEGORY-NNN.case (NNN counts from 001 within the\n"
    "category), in the repro text format that `flashcheck repro FILE` and `flashcheck inputs FILE`\n"
    "read. Nothing is run. The cases are not fitted to a backend's limits (certify fits them to the\n"
    "backend it runs) and all have backward on. Prints the file names, one a line.\n"
    "\n"
    "options:\n"
    "  --out DIR       directory to write (created if missing); refused when it already holds a\n"
    "                  .case file (nothing is overwritten)\n"
    "  --quick         the sweep of `certify --quick` (about a quarter of the cases)\n"
    "  --category C    only category C (shapes causal window mask gqa layout values empty)\n"
    "\n"
    "exit: 0 written, 2 usage (bad option, unknown category, DIR holds case files), 4 cannot write\n";

static const char *inputs_help =
    "usage: flashcheck inputs FILE --out DIR\n"
    "\n"
    "Materializes the inputs of case FILE (a repro file: `flashcheck cases`, a finding, a .min)\n"
    "through the case model (case/case.h fc_case_value: the values every backend run of the case\n"
    "gets) and writes, in DIR:\n"
    "  q.npy k.npy v.npy do.npy   [B, S, H, D] dense C order (the logical order, verify's\n"
    "                             --layout bshd), float16 ('<f2') or bfloat16 as uint16 bit patterns\n"
    "                             ('<u2'), the convention `flashcheck verify` reads\n"
    "  mask.npy                   float32 [B, Hq, Sq, Sk] additive mask (only when the case has one;\n"
    "                             broadcast masks are written expanded)\n"
    "  case.json                  what verify needs for this case's outputs: dtype, shape, causal\n"
    "                             (none|top_left|bottom_right), window [left, right] or null,\n"
    "                             window_align, scale (the effective softmax scale), layout (\"bshd\"),\n"
    "                             mask (true/false), backward, and case_layout: \"dense\" or \"strided\"\n"
    "                             (the case's own tensor layouts: permuted, padded or offset storage,\n"
    "                             which the dense arrays here do not reproduce; the values are the same)\n"
    "\n"
    "Then `flashcheck verify --dir DIR --causal C [--window L R] --window-align A --scale S` checks\n"
    "o.npy (+ lse.npy, dq.npy, dk.npy, dv.npy) written there.\n"
    "\n"
    "options:\n"
    "  --out DIR       directory to write (created if missing); refused when it already holds any of\n"
    "                  these files (nothing is overwritten)\n"
    "\n"
    "exit: 0 written, 2 usage (bad option, bad case file, DIR holds input files), 4 cannot write\n";


static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* 1 when dir holds a file named *.case (first name in first), 0 not, -1 unreadable */
static int dir_has_case(const char *dir, char *first, size_t len)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (ends_with(e->d_name, ".case")) { snprintf(first, len, "%s", e->d_name); found = 1; break; }
    closedir(d);
    return found;
}

/* write text to path, which must not exist (O_EXCL); 0 or -1 with msg */
static int write_new(const char *path, const char *text, char *msg, size_t msglen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) { snprintf(msg, msglen, "%s: cannot create: %s", path, strerror(errno)); return -1; }
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0) { if (errno == EINTR) continue; break; }
        off += (size_t)w;
    }
    int ok = off == n;
    ok = close(fd) == 0 && ok;
    if (!ok) { snprintf(msg, msglen, "%s: write failed: %s", path, strerror(errno)); unlink(path); return -1; }
    return 0;
}

int cli_cases(int argc, char **argv)
{
    const char *out = NULL, *cat = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { fputs(cases_help, stdout); return CLI_OK; }
        if ((r = cli_opt(argc, argv, &i, "--out", &v))) { if (r < 0 || !*v) return cli_usage_error("cases", "--out needs a directory"); out = cli_path(v); }
        else if ((r = cli_opt(argc, argv, &i, "--category", &v))) {
            if (r < 0) return cli_usage_error("cases", "--category needs a category name");
            int ok = 0;
            int k = fc_sweep_cat_by_name(v);   /* the base set's categories, not its property cases */
            ok = k >= 0 && fc_sweep_cat_set(k) == FC_SWEEP_SET_BASE && k != FC_SWEEP_PROPERTIES;
            if (!ok) return cli_usage_error("cases", "--category %s: unknown; the categories are shapes causal window mask gqa layout values empty", v);
            cat = v;
        }
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else return cli_usage_error("cases", "unknown option or argument '%s'", argv[i]);
    }
    if (!out) return cli_usage_error("cases", "--out DIR is required");
    char msg[4400], first[256];
    if (fz_mkdirs(out, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck cases: cannot use --out %s: %s\n", out, msg);
        return CLI_INTERNAL;
    }
    int has = dir_has_case(out, first, sizeof first);
    if (has < 0) { fprintf(stderr, "flashcheck cases: cannot read --out %s: %s\n", out, strerror(errno)); return CLI_INTERNAL; }
    if (has) {
        fprintf(stderr, "flashcheck cases: %s already holds case files (%s); choose another --out (nothing was overwritten)\n", out, first);
        return CLI_USAGE;
    }
    /* certify's base set (properties/sweep/sweep.h), not fitted to a backend, backward on */
    fc_sweep_opts so;
    fc_sweep_opts_default(&so);
    so.quick = quick;
    fc_sweep_entry *sw = NULL;
    int64_t n = fc_sweep_build(&so, &sw);
    if (n < 0) { fprintf(stderr, "flashcheck cases: out of memory\n"); return CLI_INTERNAL; }
    int rc = CLI_OK, num = 0;
    const char *prev = NULL;
    for (int64_t i = 0; i < n && rc == CLI_OK; i++) {
        if (sw[i].category == FC_SWEEP_PROPERTIES) continue;
        const char *category = fc_sweep_cat_name(sw[i].category);
        num = prev && strcmp(prev, category) == 0 ? num + 1 : 1;
        prev = category;
        if (cat && strcmp(cat, category) != 0) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s-%03d.case", out, category, num);
        size_t len = fc_case_write(&sw[i].c, NULL, 0);
        char *text = malloc(len + 1);
        if (!text) { fprintf(stderr, "flashcheck cases: out of memory\n"); rc = CLI_INTERNAL; break; }
        fc_case_write(&sw[i].c, text, len + 1);
        if (write_new(path, text, msg, sizeof msg) != 0) { fprintf(stderr, "flashcheck cases: %s\n", msg); rc = CLI_INTERNAL; }
        else printf("%s-%03d.case\n", category, num);
        free(text);
    }
    free(sw);
    return rc;
}

/* tensor t of c as a dense C-order .npy in the logical order (4-d: the contract's order) */
static int write_tensor(const fc_case *c, int t, const char *path, char *msg, size_t msglen)
{
    int64_t dim[4];
    int nd = fc_case_dims(c, t, dim);
    int64_t numel = fc_case_numel(c, t), rows = 1, n = dim[nd - 1];
    for (int k = 0; k < nd - 1; k++) rows *= dim[k];
    int f32 = fc_case_is_fp32(t), bf = c->p.dtype == FA_BF16;
    float *fv = f32 ? malloc((size_t)(numel ? numel : 1) * sizeof *fv) : NULL;
    uint16_t *bits = f32 ? NULL : malloc((size_t)(numel ? numel : 1) * sizeof *bits);
    double *row = malloc((size_t)(n ? n : 1) * sizeof *row);
    if ((f32 ? !fv : !bits) || !row) {
        free(fv); free(bits); free(row);
        snprintf(msg, msglen, "%s: out of memory", path);
        return -1;
    }
    for (int64_t r = 0; r < rows && n > 0; r++) {
        int64_t idx[4] = { 0, 0, 0, 0 }, q = r;
        for (int k = nd - 2; k >= 0; k--) { idx[k] = q % dim[k]; q /= dim[k]; }
        fc_case_value_row(c, t, idx, n, row);   /* already rounded to the storage type: exact below */
        for (int64_t j = 0; j < n; j++) {
            if (f32) fv[r * n + j] = (float)row[j];
            else bits[r * n + j] = bf ? fc_bf16_from_double(row[j]) : fc_f16_from_double(row[j]);
        }
    }
    int rc = npy_write(path, f32 ? NPY_F32 : (bf ? NPY_BF16 : NPY_F16), nd, dim, fv, bits, msg, msglen);
    free(fv); free(bits); free(row);
    return rc;
}

static int layout_dense(const fc_case *c)
{
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_layout *l = &c->layout[t];
        if (l->offset) return 0;
        for (int k = 0; k < 4; k++)
            if ((k < (t == FC_T_LSE ? 3 : 4) && l->order[k] != k) || l->pad[k]) return 0;
    }
    return 1;
}

static const char *causal_name(fa_causal m)
{
    return m == FA_CAUSAL_TOP_LEFT ? "top_left" : m == FA_CAUSAL_BOTTOM_RIGHT ? "bottom_right" : "none";
}

int cli_inputs(int argc, char **argv)
{
    const char *file = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { fputs(inputs_help, stdout); return CLI_OK; }
        if ((r = cli_opt(argc, argv, &i, "--out", &v))) { if (r < 0 || !*v) return cli_usage_error("inputs", "--out needs a directory"); out = cli_path(v); }
        else if (argv[i][0] == '-') return cli_usage_error("inputs", "unknown option '%s'", argv[i]);
        else if (file) return cli_usage_error("inputs", "one case FILE only ('%s' and '%s' given)", file, argv[i]);
        else file = cli_path(argv[i]);
    }
    if (!file) return cli_usage_error("inputs", "a case FILE is required");
    if (!out) return cli_usage_error("inputs", "--out DIR is required");
    char msg[4400];
    fc_case c;
    if (cli_load_case(file, &c, NULL, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck inputs: %s: %s\n", file, msg);
        return CLI_USAGE;
    }
    int has_mask = c.mask.kind != FC_MASK_NONE;
    static const char *names[] = { "q.npy", "k.npy", "v.npy", "do.npy", "mask.npy", "case.json" };
    static const int tensors[] = { FC_T_Q, FC_T_K, FC_T_V, FC_T_DO, FC_T_MASK };
    if (fz_mkdirs(out, msg, sizeof msg) != 0) {
        fprintf(stderr, "flashcheck inputs: cannot use --out %s: %s\n", out, msg);
        return CLI_INTERNAL;
    }
    char path[4400];
    for (int k = 0; k < 6; k++) {
        snprintf(path, sizeof path, "%s/%s", out, names[k]);
        if (access(path, F_OK) == 0) {
            fprintf(stderr, "flashcheck inputs: %s already exists; choose another --out (nothing was overwritten)\n", path);
            return CLI_USAGE;
        }
    }
    for (int k = 0; k < 5; k++) {
        if (tensors[k] == FC_T_MASK && !has_mask) continue;
        snprintf(path, sizeof path, "%s/%s", out, names[k]);
        if (write_tensor(&c, tensors[k], path, msg, sizeof msg) != 0) {
            fprintf(stderr, "flashcheck inputs: %s\n", msg);
            return CLI_INTERNAL;
        }
    }
    const fa_problem *p = &c.p;
    cJSON *j = cJSON_CreateObject();
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char name[256];
    snprintf(name, sizeof name, "%s", base);
    if (ends_with(name, ".case")) name[strlen(name) - 5] = 0;
    cJSON_AddStringToObject(j, "name", name);
    cJSON_AddStringToObject(j, "dtype", p->dtype == FA_BF16 ? "bfloat16" : "float16");
    cJSON *sh = cJSON_AddObjectToObject(j, "shape");
    cJSON_AddNumberToObject(sh, "B", (double)p->batch);
    cJSON_AddNumberToObject(sh, "Sq", (double)p->seqlen_q);
    cJSON_AddNumberToObject(sh, "Sk", (double)p->seqlen_k);
    cJSON_AddNumberToObject(sh, "Hq", (double)p->heads_q);
    cJSON_AddNumberToObject(sh, "Hkv", (double)p->heads_kv);
    cJSON_AddNumberToObject(sh, "Dqk", (double)p->head_dim_qk);
    cJSON_AddNumberToObject(sh, "Dv", (double)p->head_dim_v);
    cJSON_AddStringToObject(j, "causal", causal_name(p->causal));
    if (p->window_left < 0 && p->window_right < 0) cJSON_AddNullToObject(j, "window");
    else {
        cJSON *w = cJSON_AddArrayToObject(j, "window");
        cJSON_AddItemToArray(w, cJSON_CreateNumber((double)p->window_left));
        cJSON_AddItemToArray(w, cJSON_CreateNumber((double)p->window_right));
    }
    cJSON_AddStringToObject(j, "window_align", p->window_align == FA_ALIGN_BOTTOM_RIGHT ? "bottom_right" : "top_left");
    /* the effective scale is an fp32 value; printed with 17 digits it round-trips exactly */
    cJSON_AddNumberToObject(j, "scale", (double)fa_effective_scale(p));
    cJSON_AddStringToObject(j, "layout", "bshd");
    cJSON_AddBoolToObject(j, "mask", has_mask);
    cJSON_AddBoolToObject(j, "backward", c.backward);
    cJSON_AddStringToObject(j, "case_layout", layout_dense(&c) ? "dense" : "strided");
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/case.json", out);
    int rc = CLI_OK;
    if (!text) { fprintf(stderr, "flashcheck inputs: out of memory\n"); return CLI_INTERNAL; }
    size_t tl = strlen(text);
    char *t2 = malloc(tl + 2);
    if (t2) { memcpy(t2, text, tl); t2[tl] = '\n'; t2[tl + 1] = 0; }
    if (!t2 || write_new(path, t2, msg, sizeof msg) != 0) { fprintf(stderr, "flashcheck inputs: %s\n", t2 ? msg : "out of memory"); rc = CLI_INTERNAL; }
    free(t2);
    cJSON_free(text);
    return rc;
}
