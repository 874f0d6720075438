/* rp_svg.h: plots for the reports people look at (prefix rp_svg_): a bar
 * histogram and a heat map, written as standalone SVG text.
 *
 * The SVG is plain and self-contained so that a Markdown viewer (GitHub shows
 * `![..](plots/x.svg)` as an image) renders it: no script, no external font
 * (the generic "sans-serif" family), no external reference, no CSS import.
 * Every bar and cell carries its data for readers and tests: a <title>
 * (tooltip) and data-* attributes (data-label, data-count on bars; data-row,
 * data-col, data-ratio on cells).
 *
 * Pure C11 with stdio; no state. Each writer returns 0, or -1 when writing to f
 * failed (ferror).
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_RP_SVG_H
#define FLASHCHECK_RP_SVG_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bar colours by meaning. */
typedef enum {
    RP_BAR_PASS = 0,     /* well inside (ratio <= 1/2) */
    RP_BAR_NEAR = 1,     /* ratio in (1/2, 1] region */
    RP_BAR_FAIL = 2,     /* outside the bound (ratio > 1) or a mismatch */
    RP_BAR_SPECIAL = 3   /* exact, matched non-finite, uncheckable */
} rp_bar_kind;

typedef struct {
    const char *label;   /* short tick label, e.g. "2^-3" or "exact" */
    const char *what;    /* tooltip text, e.g. "[2^-3, 2^-2)"; NULL: label */
    int64_t count;       /* >= 0 */
    rp_bar_kind kind;
} rp_bin;

/* Histogram: one bar per bin, heights on a log scale (log10(1 + count)), so
 * bins of 1 and of 10^7 elements are both visible; the count is printed above
 * each non-empty bar and in its title. */
int rp_svg_histogram(FILE *f, const char *title, const char *xlabel, const rp_bin *bins, int nbins);

/* Heat map of ratios: rows x cols cells, cell (r, c) = v[r * ld + c].
 * Value < 0: nothing there (light grey); +inf: non-finite (black); else the
 * colour follows log2(v) from 2^-24 (pale) to 1 (dark orange) and red above 1.
 * Row r is labelled row_label(r) = "row_name row_first..row_last" where
 * first = r * row_step, last = min(first + row_step, row_total) - 1 (columns
 * likewise); the axis names say what rows and columns are. */
typedef struct {
    const char *title;
    const char *subtitle;                  /* second line (may be NULL) */
    const char *row_name, *col_name;       /* axis names, e.g. "query head", "query position" */
    int rows, cols, ld;
    int64_t row_step, row_total, col_step, col_total;
    const float *v;
} rp_heatmap;
int rp_svg_heatmap(FILE *f, const rp_heatmap *h);

/* s with &, <, >, ", ' replaced by entities (for text and attribute values). */
void rp_svg_escape(FILE *f, const char *s);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_RP_SVG_H */
