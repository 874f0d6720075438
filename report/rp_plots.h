/* rp_plots.h: the plots of a certification report (prefix rp_plots_), made
 * from the checking library's per-element verdicts (properties/check/check.h:
 * fc_tensor_stats' histogram and worst-ratio grid, filled by the oracle's
 * compare, oracle/oracle.h orc_stats).
 *
 *  - one error/bound histogram per output tensor (O, LSE, dQ, dK, dV) over
 *    every element checked in the cases added: log2 bins 2^-30 .. 2^4, plus
 *    exact (error 0), below 2^-30, at or above 2^4, matched non-finite,
 *    non-finite mismatch and uncheckable;
 *  - a heat map of the worst ratio over (head block x sequence block) for each
 *    failing or near-failing tensor of a case (worst ratio > RP_NEAR_FAIL, or a
 *    non-finite mismatch), the RP_MAX_HEATMAPS worst kept. Rows are heads
 *    (query heads for O, LSE, dQ; kv heads for dK, dV), columns are query
 *    positions (O, LSE, dQ) or key positions (dK, dV): each element of these
 *    tensors is a sum over the whole other sequence, so it belongs to one
 *    query (or key) block but to no single key (or query) block.
 *
 * rp_plots_write puts the SVGs (rp_svg.h) in DIR/plots/ and returns the
 * Markdown that links them with relative paths (plots/NAME.svg).
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_RP_PLOTS_H
#define FLASHCHECK_RP_PLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "properties/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RP_NEAR_FAIL 0.5
#define RP_MAX_HEATMAPS 12

/* Histogram bins of the report, in order. */
enum {
    RP_BIN_EXACT = 0,                 /* error 0 */
    RP_BIN_BELOW = 1,                 /* 0 < ratio < 2^-30 */
    RP_BIN_LOG0 = 2,                  /* [2^-30, 2^-29) ... */
    RP_LOG_LO = -30, RP_LOG_HI = 4,   /* log bins cover [2^LO, 2^HI) */
    RP_BIN_ABOVE = RP_BIN_LOG0 + (RP_LOG_HI - RP_LOG_LO), /* ratio >= 2^4 (inf: error against a zero bound) */
    RP_BIN_NONFINITE_OK,              /* reference NaN/Inf matched, or an accepted overflow to Inf */
    RP_BIN_NONFINITE_BAD,             /* non-finite mismatch */
    RP_BIN_UNCHECKABLE,               /* no finite bound: not judged */
    RP_BIN_COUNT
};

typedef struct rp_plots rp_plots;

rp_plots *rp_plots_new(void);
void rp_plots_free(rp_plots *p);

/* The report's bins of one tensor's stats (zeros when not checked). */
void rp_plots_bins(const fc_tensor_stats *s, int64_t out[RP_BIN_COUNT]);

/* Add one case's verdict: histograms of its checked tensors added to the run's;
 * its failing or near-failing tensors become heat-map candidates, labelled
 * `label` (e.g. "shapes case 12: B=1 Sq=97 ..."). */
void rp_plots_add(rp_plots *p, const fc_verdict *v, const char *label);

/* Cases and elements added so far (for tests and the report's text). */
int64_t rp_plots_cases(const rp_plots *p);
void rp_plots_totals(const rp_plots *p, int tensor, int64_t out[RP_BIN_COUNT]);

/* Write the SVGs into DIR/plots/ and return the Markdown section (malloc'd; the caller
 * frees it), or NULL with msg when a file cannot be written. */
char *rp_plots_write(const rp_plots *p, const char *dir, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_RP_PLOTS_H */
