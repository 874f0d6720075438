/* svg_demo.c OUTDIR: writes OUTDIR/hist.svg and OUTDIR/heat.svg with the known
 * data below (svg_check.py asserts it back), and OUTDIR/rep/ (plots + plots.md)
 * from a synthetic verdict through rp_plots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report/rp_plots.h"
#include "report/rp_svg.h"

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: svg_demo OUTDIR\n"); return 2; }
    char path[4096];
    /* histogram: counts 0, 1, 7, 123456789, 42 (labels with XML specials) */
    rp_bin bins[5] = { { "exact", NULL, 0, RP_BAR_SPECIAL }, { "2^-3", "[2^-3, 2^-2)", 1, RP_BAR_PASS },
                       { "a<b&c", "quote \" and 'apos'", 7, RP_BAR_NEAR }, { "big", NULL, 123456789, RP_BAR_FAIL },
                       { ">=2^4", NULL, 42, RP_BAR_FAIL } };
    snprintf(path, sizeof path, "%s/hist.svg", argv[1]);
    FILE *f = fopen(path, "w");
    if (!f || rp_svg_histogram(f, "histogram <test> & co", "ratio", bins, 5) != 0) return 1;
    fclose(f);
    /* heat map 2 x 3: none, 0, 0.25 / 0.75, 2, inf */
    float v[2][4] = { { -1, 0, 0.25f, 9 }, { 0.75f, 2, INFINITY, 9 } };
    rp_heatmap h = { "heat <map>", "sub & title", "query head", "query position", 2, 3, 4, 1, 2, 16, 40, &v[0][0] };
    snprintf(path, sizeof path, "%s/heat.svg", argv[1]);
    f = fopen(path, "w");
    if (!f || rp_svg_heatmap(f, &h) != 0) return 1;
    fclose(f);

    /* rp_plots from a synthetic verdict: O near failing (ratio 0.75), dK with a NaN mismatch */
    fc_verdict *vd = calloc(1, sizeof *vd);
    fc_tensor_stats *o = &vd->t[FC_T_O], *dk = &vd->t[FC_T_DK];
    o->checked = 1; o->elements = 100; o->max_ratio = 0.75;
    o->ratio_hist[48 - 1] = 60; o->ratio_hist[0] = 40; o->exact = 30;
    o->grid_rows = 2; o->grid_cols = 3; o->grid_hb = 1; o->grid_sb = 16; o->grid_heads = 2; o->grid_seq = 40;
    for (int r = 0; r < ORC_GRID_ROWS; r++) for (int c = 0; c < ORC_GRID_COLS; c++) o->grid[r][c] = -1;
    o->grid[1][2] = 0.75f; o->grid[0][0] = 0.01f;
    dk->checked = 1; dk->elements = 10; dk->max_ratio = 0.1; dk->nonfinite_mismatch = 1;
    dk->ratio_hist[40] = 9;
    dk->grid_rows = 1; dk->grid_cols = 1; dk->grid_hb = 1; dk->grid_sb = 16; dk->grid_heads = 1; dk->grid_seq = 5;
    dk->grid[0][0] = INFINITY;
    rp_plots *p = rp_plots_new();
    rp_plots_add(p, vd, "synthetic <case> 1");
    snprintf(path, sizeof path, "%s/rep", argv[1]);
    mkdir(path, 0777);
    char msg[512];
    char *md = rp_plots_write(p, path, msg, sizeof msg);
    if (!md) { fprintf(stderr, "%s\n", msg); return 1; }
    snprintf(path, sizeof path, "%s/rep/plots.md", argv[1]);
    f = fopen(path, "w");
    fputs(md, f);
    fclose(f);
    free(md);
    rp_plots_free(p);
    free(vd);
    return 0;
}
