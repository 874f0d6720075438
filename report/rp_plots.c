/* rp_plots.c: a certification report's plots from verdicts (rp_plots.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/rp_plots.h"
#include "report/rp_svg.h"

static const int out_t[5] = { FC_T_O, FC_T_LSE, FC_T_DQ, FC_T_DK, FC_T_DV };
static const char *out_title[5] = { "O", "LSE", "dQ", "dK", "dV" };

typedef struct {
    char label[200];
    int k;                 /* index into out_t */
    double worst;          /* max ratio; +inf with a non-finite mismatch */
    fc_tensor_stats s;
} heat;

struct rp_plots {
    int64_t cases;
    int64_t bins[5][RP_BIN_COUNT];
    int checked[5];
    heat heat[RP_MAX_HEATMAPS];
    int nheat;
    int64_t candidates;    /* tensors that qualified for a heat map */
};

rp_plots *rp_plots_new(void) { return calloc(1, sizeof(rp_plots)); }
void rp_plots_free(rp_plots *p) { free(p); }
int64_t rp_plots_cases(const rp_plots *p) { return p->cases; }

void rp_plots_totals(const rp_plots *p, int tensor, int64_t out[RP_BIN_COUNT])
{
    memset(out, 0, sizeof(int64_t) * RP_BIN_COUNT);
    for (int k = 0; k < 5; k++)
        if (out_t[k] == tensor) memcpy(out, p->bins[k], sizeof(int64_t) * RP_BIN_COUNT);
}

void rp_plots_bins(const fc_tensor_stats *s, int64_t out[RP_BIN_COUNT])
{
    memset(out, 0, sizeof(int64_t) * RP_BIN_COUNT);
    if (!s->checked) return;
    /* oracle bucket k holds ratios in [2^(k-48), 2^(k-47)); bucket 0 also holds ratio 0 */
    for (int k = 0; k < ORC_HIST_BUCKETS; k++) {
        int e = k - 48;
        int b = e < RP_LOG_LO ? RP_BIN_BELOW : e >= RP_LOG_HI ? RP_BIN_ABOVE : RP_BIN_LOG0 + (e - RP_LOG_LO);
        out[b] += s->ratio_hist[k];
    }
    out[RP_BIN_BELOW] -= s->exact;
    out[RP_BIN_EXACT] = s->exact;
    out[RP_BIN_NONFINITE_OK] = s->nonfinite_ok;
    out[RP_BIN_NONFINITE_BAD] = s->nonfinite_mismatch;
    out[RP_BIN_UNCHECKABLE] = s->uncheckable;
}

void rp_plots_add(rp_plots *p, const fc_verdict *v, const char *label)
{
    p->cases++;
    for (int k = 0; k < 5; k++) {
        const fc_tensor_stats *s = &v->t[out_t[k]];
        if (!s->checked) continue;
        p->checked[k] = 1;
        int64_t b[RP_BIN_COUNT];
        rp_plots_bins(s, b);
        for (int i = 0; i < RP_BIN_COUNT; i++) p->bins[k][i] += b[i];
        double worst = s->nonfinite_mismatch > 0 ? INFINITY : s->max_ratio;
        if (!(worst > RP_NEAR_FAIL) || s->grid_rows <= 0 || s->grid_cols <= 0) continue;
        p->candidates++;
        /* keep the RP_MAX_HEATMAPS worst: replace the mildest when full */
        int slot = p->nheat;
        if (slot == RP_MAX_HEATMAPS) {
            slot = 0;
            for (int i = 1; i < p->nheat; i++)
                if (p->heat[i].worst < p->heat[slot].worst) slot = i;
            if (!(worst > p->heat[slot].worst)) continue;
        } else {
            p->nheat++;
        }
        heat *h = &p->heat[slot];
        snprintf(h->label, sizeof h->label, "%s", label ? label : "");
        h->k = k;
        h->worst = worst;
        h->s = *s;
    }
}

/* ------------------------------------------------------------------------- */
/* writing                                                                   */

/* write text to path through path.tmp + rename: a reader never sees half a file */
static int write_file(const char *path, const char *text, size_t len, char *msg, size_t msglen)
{
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) { snprintf(msg, msglen, "cannot create %s: %s", tmp, strerror(errno)); return -1; }
    size_t w = fwrite(text, 1, len, f);
    int bad = w != len || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int e = errno;
    if (fclose(f) != 0 && !bad) { bad = 1; e = errno; }
    if (bad || rename(tmp, path) != 0) {
        if (!bad) e = errno;
        unlink(tmp);
        snprintf(msg, msglen, "cannot write %s: %s", path, strerror(e));
        return -1;
    }
    return 0;
}

static const char *bin_label(int i, char *buf, size_t n, char *what, size_t wn)
{
    switch (i) {
    case RP_BIN_EXACT: snprintf(what, wn, "exact (error 0)"); return "exact";
    case RP_BIN_BELOW: snprintf(what, wn, "0 < ratio < 2^%d", RP_LOG_LO); return "<2^-30";
    case RP_BIN_ABOVE: snprintf(what, wn, "ratio >= 2^%d (fails)", RP_LOG_HI); return ">=2^4";
    case RP_BIN_NONFINITE_OK: snprintf(what, wn, "NaN/Inf matched (reference non-finite, or an accepted overflow)"); return "nonfinite ok";
    case RP_BIN_NONFINITE_BAD: snprintf(what, wn, "NaN/Inf mismatch (fails)"); return "nonfinite BAD";
    case RP_BIN_UNCHECKABLE: snprintf(what, wn, "uncheckable (no finite bound; not judged)"); return "uncheckable";
    default: {
        int e = RP_LOG_LO + (i - RP_BIN_LOG0);
        snprintf(buf, n, "2^%d", e);
        snprintf(what, wn, "ratio in [2^%d, 2^%d)%s", e, e + 1, e >= 0 ? " (above 1 fails)" : "");
        return buf;
    }
    }
}

static rp_bar_kind bin_kind(int i)
{
    if (i == RP_BIN_EXACT || i == RP_BIN_NONFINITE_OK || i == RP_BIN_UNCHECKABLE) return RP_BAR_SPECIAL;
    if (i == RP_BIN_ABOVE || i == RP_BIN_NONFINITE_BAD) return RP_BAR_FAIL;
    if (i == RP_BIN_BELOW) return RP_BAR_PASS;
    int e = RP_LOG_LO + (i - RP_BIN_LOG0);
    return e >= 0 ? RP_BAR_FAIL : e == -1 ? RP_BAR_NEAR : RP_BAR_PASS;
}

/* render into memory with fn(f, arg), then write the file */
static int svg_file(const char *path, int (*fn)(FILE *, const void *), const void *arg, char *msg, size_t msglen)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) { snprintf(msg, msglen, "out of memory rendering %s", path); return -1; }
    int rc = fn(f, arg);
    if (fclose(f) != 0) rc = -1;
    if (rc != 0) { free(buf); snprintf(msg, msglen, "out of memory rendering %s", path); return -1; }
    rc = write_file(path, buf, len, msg, msglen);
    free(buf);
    return rc;
}

typedef struct { const char *title; const int64_t *bins; } hist_arg;

static int draw_hist(FILE *f, const void *a)
{
    const hist_arg *h = a;
    rp_bin bins[RP_BIN_COUNT];
    char labels[RP_BIN_COUNT][24], whats[RP_BIN_COUNT][96];
    for (int i = 0; i < RP_BIN_COUNT; i++) {
        bins[i].label = bin_label(i, labels[i], sizeof labels[i], whats[i], sizeof whats[i]);
        if (bins[i].label != labels[i]) { snprintf(labels[i], sizeof labels[i], "%s", bins[i].label); bins[i].label = labels[i]; }
        bins[i].what = whats[i];
        bins[i].count = h->bins[i];
        bins[i].kind = bin_kind(i);
    }
    return rp_svg_histogram(f, h->title, "|got - ref| / bound (log2 bins; an element passes at <= 1)", bins, RP_BIN_COUNT);
}

static int draw_heat(FILE *f, const void *a)
{
    const heat *h = a;
    int t = out_t[h->k], kv = t == FC_T_DK || t == FC_T_DV;
    char title[300], sub[200];
    snprintf(title, sizeof title, "%s: worst error/bound per block, %s", out_title[h->k], h->label);
    if (isinf(h->worst)) snprintf(sub, sizeof sub, "worst: a non-finite mismatch; largest finite ratio %.4g", h->s.max_ratio);
    else snprintf(sub, sizeof sub, "worst ratio %.4g (%s)", h->worst, h->worst > 1 ? "FAILS" : "passes, near the bound");
    int64_t heads = h->s.grid_heads, seq = h->s.grid_seq;
    rp_heatmap m;
    memset(&m, 0, sizeof m);
    m.title = title;
    m.subtitle = sub;
    m.row_name = kv ? "kv head" : "query head";
    m.col_name = kv ? "key position" : "query position";
    m.rows = h->s.grid_rows;
    m.cols = h->s.grid_cols;
    m.ld = ORC_GRID_COLS;
    m.row_step = h->s.grid_hb;
    m.row_total = heads;
    m.col_step = h->s.grid_sb;
    m.col_total = seq;
    m.v = &h->s.grid[0][0];
    return rp_svg_heatmap(f, &m);
}

static void lower(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++) d[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    d[i] = 0;
}

char *rp_plots_write(const rp_plots *p, const char *dir, char *msg, size_t msglen)
{
    char pdir[4200];
    snprintf(pdir, sizeof pdir, "%s/plots", dir);
    if (mkdir(pdir, 0777) != 0 && errno != EEXIST) {
        snprintf(msg, msglen, "cannot create %s: %s", pdir, strerror(errno));
        return NULL;
    }
    char *md = NULL;
    size_t mdlen = 0;
    FILE *m = open_memstream(&md, &mdlen);
    if (!m) { snprintf(msg, msglen, "out of memory"); return NULL; }
    fprintf(m, "\n## Error/bound histograms\n\n"
               "Every output element checked in the %lld cases of the fixed sweep (the property, misuse and fuzz steps\n"
               "are not included), binned by ratio = |got - ref| / bound (an element passes at ratio <= 1), plus exact\n"
               "elements (error 0), non-finite elements (matched, or a mismatch) and uncheckable ones (no finite bound,\n"
               "not judged). Bar heights are on a log scale; each bar's tooltip holds its count.\n\n",
            (long long)p->cases);
    int rc = 0;
    for (int k = 0; k < 5 && rc == 0; k++) {
        char name[16], path[4300], title[80];
        lower(name, out_title[k], sizeof name);
        if (!p->checked[k]) { fprintf(m, "- %s: not checked in this run\n", out_title[k]); continue; }
        int64_t tot = 0;
        for (int i = 0; i < RP_BIN_COUNT; i++) tot += p->bins[k][i];
        snprintf(path, sizeof path, "%s/hist-%s.svg", pdir, name);
        snprintf(title, sizeof title, "%s: error/bound over %lld elements", out_title[k], (long long)tot);
        hist_arg a = { title, p->bins[k] };
        rc = svg_file(path, draw_hist, &a, msg, msglen);
        fprintf(m, "### %s\n\n![%s error/bound histogram](plots/hist-%s.svg)\n\n", out_title[k], out_title[k], name);
    }
    if (rc == 0) {
        fprintf(m, "\n## Worst error/bound per block (failing and near-failing cases)\n\n");
        if (p->nheat == 0) {
            fprintf(m, "No tensor of any sweep case had a worst error/bound above %g or a non-finite mismatch: no heat map.\n",
                    RP_NEAR_FAIL);
        } else {
            fprintf(m, "One map per tensor whose worst ratio exceeds %g or that has a non-finite mismatch (%lld such, the %d\n"
                       "worst shown). Axes: rows are heads (query heads for O, LSE, dQ; kv heads for dK, dV); columns are\n"
                       "query positions (O, LSE, dQ) or key positions (dK, dV), in blocks; a cell holds the worst ratio over\n"
                       "the batch, the head dimension and its block (grey: nothing judged there, black: a non-finite\n"
                       "mismatch, red: above 1). There is no query x key map: every element of these tensors is a sum\n"
                       "over the whole other sequence, so it belongs to one query (or key) block but to no single key\n"
                       "(or query) block.\n\n",
                    RP_NEAR_FAIL, (long long)p->candidates, p->nheat);
            /* worst first */
            int order[RP_MAX_HEATMAPS];
            for (int i = 0; i < p->nheat; i++) order[i] = i;
            for (int i = 1; i < p->nheat; i++)
                for (int j = i; j > 0 && p->heat[order[j]].worst > p->heat[order[j - 1]].worst; j--) {
                    int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
                }
            for (int i = 0; i < p->nheat && rc == 0; i++) {
                const heat *h = &p->heat[order[i]];
                char name[16], path[4300];
                lower(name, out_title[h->k], sizeof name);
                snprintf(path, sizeof path, "%s/heat-%02d-%s.svg", pdir, i + 1, name);
                rc = svg_file(path, draw_heat, h, msg, msglen);
                fprintf(m, "### %d. %s, %s (worst %s%.4g)\n\n![%s worst error/bound per block](plots/heat-%02d-%s.svg)\n\n", i + 1,
                        h->label, out_title[h->k], isinf(h->worst) ? "non-finite; finite " : "", h->s.max_ratio,
                        out_title[h->k], i + 1, name);
            }
        }
    }
    if (fclose(m) != 0 && rc == 0) { snprintf(msg, msglen, "out of memory"); rc = -1; }
    if (rc != 0) { free(md); return NULL; }
    return md;
}
