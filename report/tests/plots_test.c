/* plots_test.c: rp_plots' bins and heat-map selection on synthetic verdicts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/check/tests/check_test.h"
#include "report/rp_plots.h"


static void one_o(fc_verdict *v, double worst)
{
    memset(v, 0, sizeof *v);
    fc_tensor_stats *o = &v->t[FC_T_O];
    o->checked = 1;
    o->max_ratio = worst;
    o->ratio_hist[48 + (worst > 0 ? ilogb(worst) : -48)] = 1;
    o->grid_rows = o->grid_cols = 1;
    o->grid_hb = 1; o->grid_sb = 16; o->grid_heads = 1; o->grid_seq = 3;
    o->grid[0][0] = (float)worst;
}

int main(void)
{
    /* bins: every oracle bucket lands in exactly one report bin */
    fc_tensor_stats s;
    memset(&s, 0, sizeof s);
    s.checked = 1;
    int64_t n = 0;
    for (int k = 0; k < ORC_HIST_BUCKETS; k++) { s.ratio_hist[k] = k + 1; n += k + 1; }
    s.exact = 1; s.nonfinite_ok = 5; s.nonfinite_mismatch = 6; s.uncheckable = 7;
    int64_t b[RP_BIN_COUNT], tot = 0;
    rp_plots_bins(&s, b);
    for (int i = 0; i < RP_BIN_COUNT; i++) tot += b[i];
    CHECK(tot == n + 5 + 6 + 7, "total %lld, want %lld", (long long)tot, (long long)(n + 18));
    CHECK(b[RP_BIN_EXACT] == 1 && b[RP_BIN_BELOW] == 18 * 19 / 2 - 1, "exact %lld below %lld", (long long)b[RP_BIN_EXACT],
          (long long)b[RP_BIN_BELOW]);
    CHECK(b[RP_BIN_LOG0] == 19 && b[RP_BIN_LOG0 + 30] == 49, "2^-30 bin %lld, 2^0 bin %lld", (long long)b[RP_BIN_LOG0],
          (long long)b[RP_BIN_LOG0 + 30]);
    CHECK(b[RP_BIN_NONFINITE_OK] == 5 && b[RP_BIN_NONFINITE_BAD] == 6 && b[RP_BIN_UNCHECKABLE] == 7, "special bins");
    s.checked = 0;
    rp_plots_bins(&s, b);
    tot = 0;
    for (int i = 0; i < RP_BIN_COUNT; i++) tot += b[i];
    CHECK(tot == 0, "an unchecked tensor has no elements");

    /* selection: ratio 0.5 is not near-failing; of 20 candidates the 12 worst are kept */
    rp_plots *p = rp_plots_new();
    fc_verdict *v = malloc(sizeof *v);
    one_o(v, 0.5);
    rp_plots_add(p, v, "at 0.5");
    for (int i = 0; i < 20; i++) {
        one_o(v, 0.51 + 0.01 * i);
        char label[32];
        snprintf(label, sizeof label, "case %d", i);
        rp_plots_add(p, v, label);
    }
    int64_t t[RP_BIN_COUNT];
    rp_plots_totals(p, FC_T_O, t);
    tot = 0;
    for (int i = 0; i < RP_BIN_COUNT; i++) tot += t[i];
    CHECK(tot == 21 && rp_plots_cases(p) == 21, "21 elements over 21 cases, got %lld", (long long)tot);
    const char *dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
    char msg[256];
    char *md = rp_plots_write(p, dir, msg, sizeof msg);
    CHECK(md != NULL, "write: %s", msg);
    if (md) {
        CHECK(strstr(md, "(20 such, the 12") != NULL, "count of candidates: %s", md);
        CHECK(strstr(md, "### 1. case 19, O") != NULL && strstr(md, "### 12. case 8, O") != NULL, "worst first");
        CHECK(strstr(md, "case 7,") == NULL && strstr(md, "at 0.5") == NULL, "milder ones dropped");
        free(md);
    }
    rp_plots_free(p);

    /* nothing near failing: no heat map, said so */
    p = rp_plots_new();
    one_o(v, 0.01);
    rp_plots_add(p, v, "fine");
    md = rp_plots_write(p, dir, msg, sizeof msg);
    CHECK(md && strstr(md, "no heat map") != NULL, "no heat map sentence");
    free(md);
    /* an unwritable directory is an error with a message */
    md = rp_plots_write(p, "/nonexistent/dir", msg, sizeof msg);
    CHECK(md == NULL && strstr(msg, "/nonexistent/dir/plots") != NULL, "unwritable: %s", msg);
    rp_plots_free(p);
    free(v);
    if (failures) { fprintf(stderr, "%d check(s) failed\n", failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
