/* fz_feat.h: numerical and geometric fuzzing feedback (prefix fz_feat_).
 *
 * Host coverage cannot see what happened inside a GPU kernel, or how close a
 * result came to its error bound. These features can: each is a counter
 * index; the harness sets the counters for a case and publishes them in
 * libFuzzer's __libfuzzer_extra_counters section, so a case that reaches a
 * new error-ratio bucket or a rarer tile path is kept in the corpus exactly
 * like a case that covers a new branch. The `flashcheck fuzz` engine uses the
 * same counters for its own corpus decisions.
 *
 * Features (nominal tile sizes T in {16, 32, 64, 128}; the real kernels use
 * some of these, so each tile path a kernel may take is hit by some T):
 *   ratio      log2 bucket of the worst |err| / bound per tensor (o, lse, dq, dk, dv)
 *   tiles      partial query tile, partial key tile, one key tile / several, per T
 *   masked     number of fully masked and of partially masked (q tile, k tile)
 *              pairs, log2 bucketed, per T
 *   rows       fully masked query rows present; keys visible to no query present
 *   rescales   online-softmax rescales: times a key tile raises a row's running
 *              maximum, on sampled rows, bucketed, per T
 *   gqa        group size bucket (1, 2, 3-4, 5-8, >8), MQA
 *   diag       sq <, =, > sk crossed with the causal mode; window sides x align
 *   values     dtype x distribution per input; mask kind x broadcast; non-dense
 *              layout per tensor; empty sequences
 * All geometry is computed here, in the harness, from the case (visibility
 * re-derived from flash_api.h's rules; it is not shared with any kernel or the
 * oracle). The counts are approximate where noted (sampled rows, batch 0 and
 * head 0 only); a feature is a signal for the search, never a verdict.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_FEAT_H
#define FLASHCHECK_FZ_FEAT_H

#include <stdint.h>

#include "case/case.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    FZ_FEAT_RATIO = 0,                          /* 5 tensors x 40 buckets */
    FZ_FEAT_RATIO_BUCKETS = 40,
    FZ_FEAT_TILES = FZ_FEAT_RATIO + 5 * 40,     /* 4 T x 4 flags */
    FZ_FEAT_MASKED = FZ_FEAT_TILES + 16,        /* 4 T x (full 8 + partial 8) */
    FZ_FEAT_ROWS = FZ_FEAT_MASKED + 64,         /* 4 */
    FZ_FEAT_RESCALE = FZ_FEAT_ROWS + 4,         /* 4 T x 8 buckets */
    FZ_FEAT_GQA = FZ_FEAT_RESCALE + 32,         /* 6 */
    FZ_FEAT_DIAG = FZ_FEAT_GQA + 6,             /* 3 x 3 + window 3 x 2 */
    FZ_FEAT_VALUES = FZ_FEAT_DIAG + 16,         /* 2 dtypes x 4 inputs x 8 dists */
    FZ_FEAT_MASKKIND = FZ_FEAT_VALUES + 64,     /* 8 kinds x 4 broadcast */
    FZ_FEAT_LAYOUT = FZ_FEAT_MASKKIND + 32,     /* 10 tensors */
    FZ_FEAT_EMPTY = FZ_FEAT_LAYOUT + 10,        /* sq = 0, sk = 0, and pass backward */
    FZ_FEAT_OUTCOME = FZ_FEAT_EMPTY + 3,        /* verdict classes, 16 */
    FZ_FEAT_COUNT = FZ_FEAT_OUTCOME + 16
};

typedef struct {
    uint8_t c[FZ_FEAT_COUNT];
} fz_feat;

/* Tensor index for fz_feat_ratio: 0 o, 1 lse, 2 dq, 3 dk, 4 dv. */
int fz_feat_tensor_index(const char *name);

/* log2 bucket of a ratio: 0 for r <= 0 (exact), 1 for r < 2^-30, then one per
 * power of two up to r >= 2^8 (the top bucket). NaN/inf ratios go to the top. */
int fz_feat_ratio_bucket(double ratio);

void fz_feat_clear(fz_feat *f);
/* Geometry, tile paths, mask coverage and value features of a case. */
void fz_feat_geometry(fz_feat *f, const fc_case *c);
/* The worst error/bound ratio of one output tensor (0 o, 1 lse, 2 dq, 3 dk, 4 dv). */
void fz_feat_ratio(fz_feat *f, int tensor, double ratio);
/* A verdict class (0..15), e.g. pass / unsupported / bound / nan / ... */
void fz_feat_outcome(fz_feat *f, int klass);

/* Copy f into libFuzzer's extra counters (a no-op array outside libFuzzer). */
void fz_feat_publish(const fz_feat *f);

/* Novelty tracking for the campaign engine: the (feature, count bucket) pairs
 * seen so far. fz_feat_novel() records f and returns how many pairs were new. */
typedef struct {
    uint8_t seen[FZ_FEAT_COUNT];   /* bit k: count bucket k seen */
} fz_feat_map;
int fz_feat_novel(fz_feat_map *m, const fz_feat *f);
/* Number of (feature, bucket) pairs recorded. */
int fz_feat_map_size(const fz_feat_map *m);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_FEAT_H */
