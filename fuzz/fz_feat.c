/* fz_feat.c: see fz_feat.h. */
#include "fuzz/fz_feat.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* libFuzzer scans this section after every execution (SanitizerCoverage's
 * extra counters). Outside libFuzzer it is an ordinary array. */
#if defined(__linux__)
__attribute__((section("__libfuzzer_extra_counters"), used))
#endif
uint8_t fz_extra_counters[FZ_FEAT_COUNT];

static const int64_t feat_tiles[4] = { 16, 32, 64, 128 };

/* ------------------------------------------------------------------------- */
/* small helpers                                                             */

void fz_feat_clear(fz_feat *f)
{
    memset(f, 0, sizeof *f);
}

static void set(fz_feat *f, int idx)
{
    if (idx >= 0 && idx < FZ_FEAT_COUNT && f->c[idx] < 255) f->c[idx]++;
}

/* 0, 1, 2-3, 4-7, ..., 2^6 and more -> 0..7 */
static int count_bucket(int64_t n)
{
    int b = 0;
    while (n > 0 && b < 7) { n >>= 1; b++; }
    return b;
}

int fz_feat_tensor_index(const char *name)
{
    static const char *names[5] = { "o", "lse", "dq", "dk", "dv" };
    for (int i = 0; i < 5; i++)
        if (name && strcmp(name, names[i]) == 0) return i;
    return -1;
}

int fz_feat_ratio_bucket(double ratio)
{
    if (ratio != ratio || ratio >= 256.0) return FZ_FEAT_RATIO_BUCKETS - 1;
    if (!(ratio > 0.0)) return 0;
    int e;
    frexp(ratio, &e);                 /* ratio in [2^(e-1), 2^e) */
    int b = e + 30;                   /* 2^-30 -> 1 */
    if (b < 1) b = 1;
    if (b > FZ_FEAT_RATIO_BUCKETS - 1) b = FZ_FEAT_RATIO_BUCKETS - 1;
    return b;
}

void fz_feat_ratio(fz_feat *f, int tensor, double ratio)
{
    if (tensor < 0 || tensor >= 5) return;
    set(f, FZ_FEAT_RATIO + tensor * FZ_FEAT_RATIO_BUCKETS + fz_feat_ratio_bucket(ratio));
}

void fz_feat_outcome(fz_feat *f, int klass)
{
    set(f, FZ_FEAT_OUTCOME + (klass & 15));
}

/* ------------------------------------------------------------------------- */
/* visibility (flash_api.h rules, re-derived here for the harness)           */

static int64_t diag_of(const fa_problem *p, int64_t i)
{
    int bottom_right = p->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                       (p->causal == FA_CAUSAL_NONE && p->window_align == FA_ALIGN_BOTTOM_RIGHT);
    return bottom_right ? i + p->seqlen_k - p->seqlen_q : i;
}

static int structurally_visible(const fa_problem *p, int64_t i, int64_t j)
{
    int64_t d = diag_of(p, i);
    if (p->causal != FA_CAUSAL_NONE && j > d) return 0;
    if (p->window_left >= 0 && j < d - p->window_left) return 0;
    if (p->window_right >= 0 && j > d + p->window_right) return 0;
    return 1;
}

static int mask_hides(const fc_case *c)
{
    return c->mask.kind == FC_MASK_RANDOM_NEGINF || c->mask.kind == FC_MASK_STRIPES ||
           c->mask.kind == FC_MASK_FULL_ROWS || c->mask.kind == FC_MASK_FULL_COLS;
}

/* ------------------------------------------------------------------------- */
/* geometry                                                                  */

void fz_feat_geometry(fz_feat *f, const fc_case *c)
{
    const fa_problem *p = &c->p;
    int64_t sq = p->seqlen_q, sk = p->seqlen_k;

    /* tiles */
    for (int t = 0; t < 4; t++) {
        int64_t T = feat_tiles[t];
        if (sq % T) set(f, FZ_FEAT_TILES + 4 * t + 0);
        if (sk % T) set(f, FZ_FEAT_TILES + 4 * t + 1);
        set(f, FZ_FEAT_TILES + 4 * t + (sk > T ? 3 : 2));
    }

    /* gqa */
    int64_t g = p->heads_kv > 0 ? p->heads_q / p->heads_kv : 1;
    set(f, FZ_FEAT_GQA + (g <= 1 ? 0 : g == 2 ? 1 : g <= 4 ? 2 : g <= 8 ? 3 : 4));
    if (p->heads_kv == 1 && p->heads_q > 1) set(f, FZ_FEAT_GQA + 5);

    /* diagonal relation x causal mode; window sides x alignment */
    int rel = sq < sk ? 0 : sq == sk ? 1 : 2;
    set(f, FZ_FEAT_DIAG + 3 * rel + (int)p->causal % 3);
    int ws = (p->window_left >= 0) + 2 * (p->window_right >= 0);
    if (ws) set(f, FZ_FEAT_DIAG + 9 + 2 * (ws - 1) + (int)p->window_align % 2);

    /* values, mask kind, layouts, empties */
    for (int t = 0; t < FC_N_DIST_INPUTS; t++)
        if (t != FC_T_DO || c->backward)
            set(f, FZ_FEAT_VALUES + 32 * (p->dtype == FA_BF16) + 8 * t + (int)c->dist[t].kind % 8);
    set(f, FZ_FEAT_MASKKIND + 4 * ((int)c->mask.kind % 8) + c->mask.broadcast_batch + 2 * c->mask.broadcast_heads);
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_layout *l = &c->layout[t];
        int dense = l->offset == 0;
        for (int k = 0; k < 4; k++) dense &= l->order[k] == k && l->pad[k] == 0;
        if (!dense) set(f, FZ_FEAT_LAYOUT + t);
    }
    if (sq == 0) set(f, FZ_FEAT_EMPTY + 0);
    if (sk == 0) set(f, FZ_FEAT_EMPTY + 1);
    if (c->backward) set(f, FZ_FEAT_EMPTY + 2);

    if (sq == 0 || sk == 0 || p->batch == 0 || p->heads_q == 0) return;
    if (sq * sk > ((int64_t)1 << 22)) return;      /* too large to scan: structural features only */

    /* visibility of batch 0, head 0 */
    uint8_t *vis = malloc((size_t)(sq * sk));
    double *mrow = malloc(sizeof(double) * (size_t)sk);
    if (!vis || !mrow) { free(vis); free(mrow); return; }
    int use_mask = mask_hides(c);
    int64_t rows_empty = 0;
    for (int64_t i = 0; i < sq; i++) {
        int64_t any = 0;
        if (use_mask) {
            int64_t idx[4] = { 0, 0, i, 0 };
            fc_case_value_row(c, FC_T_MASK, idx, sk, mrow);
        }
        for (int64_t j = 0; j < sk; j++) {
            int v = structurally_visible(p, i, j);
            if (v && use_mask) v = !isinf(mrow[j]);
            vis[i * sk + j] = (uint8_t)v;
            any |= v;
        }
        rows_empty += !any;
    }
    free(mrow);
    int64_t cols_empty = 0;
    for (int64_t j = 0; j < sk; j++) {
        int any = 0;
        for (int64_t i = 0; i < sq && !any; i++) any = vis[i * sk + j];
        cols_empty += !any;
    }
    if (rows_empty) set(f, FZ_FEAT_ROWS + 0);
    if (rows_empty == sq) set(f, FZ_FEAT_ROWS + 1);
    if (cols_empty) set(f, FZ_FEAT_ROWS + 2);
    if (cols_empty == sk) set(f, FZ_FEAT_ROWS + 3);

    /* fully / partially masked tile pairs: visible counts of the tiles from the 2-d prefix sums
       of vis (one pass for the four tile sizes) */
    int32_t *ps = malloc(sizeof(int32_t) * (size_t)((sq + 1) * (sk + 1)));
    if (!ps) { free(vis); return; }
    for (int64_t j = 0; j <= sk; j++) ps[j] = 0;
    for (int64_t i = 0; i < sq; i++) {
        int32_t run = 0, *row = ps + (i + 1) * (sk + 1), *up = ps + i * (sk + 1);
        row[0] = 0;
        for (int64_t j = 0; j < sk; j++) { run += vis[i * sk + j]; row[j + 1] = up[j + 1] + run; }
    }
    for (int t = 0; t < 4; t++) {
        int64_t T = feat_tiles[t], full = 0, partial = 0;
        for (int64_t i0 = 0; i0 < sq; i0 += T)
            for (int64_t j0 = 0; j0 < sk; j0 += T) {
                int64_t i1 = i0 + T < sq ? i0 + T : sq, j1 = j0 + T < sk ? j0 + T : sk;
                int64_t n = (int64_t)ps[i1 * (sk + 1) + j1] - ps[i0 * (sk + 1) + j1] - ps[i1 * (sk + 1) + j0] +
                            ps[i0 * (sk + 1) + j0];
                if (n == 0) full++;
                else if (n < (i1 - i0) * (j1 - j0)) partial++;
            }
        set(f, FZ_FEAT_MASKED + 16 * t + count_bucket(full));
        set(f, FZ_FEAT_MASKED + 16 * t + 8 + count_bucket(partial));
    }
    free(ps);

    /* online-softmax rescales on up to 4 sampled rows of batch 0, head 0 */
    int64_t dqk = p->head_dim_qk;
    if (dqk > 0 && sk * dqk <= ((int64_t)1 << 16)) {
        double *kmat = malloc(sizeof(double) * (size_t)(sk * dqk));
        double *qrow = malloc(sizeof(double) * (size_t)dqk);
        double *score = malloc(sizeof(double) * (size_t)sk);
        double *mrow2 = c->mask.kind != FC_MASK_NONE ? malloc(sizeof(double) * (size_t)sk) : NULL;
        if (kmat && qrow && score && (mrow2 || c->mask.kind == FC_MASK_NONE)) {
            for (int64_t j = 0; j < sk; j++) {
                int64_t idx[4] = { 0, j, 0, 0 };
                fc_case_value_row(c, FC_T_K, idx, dqk, kmat + j * dqk);
            }
            double scale = fa_effective_scale(p);
            int64_t rows[4] = { 0, sq / 2, sq - 1, (int64_t)(c->seed % (uint64_t)sq) };
            int64_t most[4] = { 0, 0, 0, 0 };
            for (int r = 0; r < 4; r++) {
                int64_t i = rows[r];
                int64_t qi[4] = { 0, i, 0, 0 }, mi[4] = { 0, 0, i, 0 };
                fc_case_value_row(c, FC_T_Q, qi, dqk, qrow);        /* = fc_case_value per element */
                if (mrow2) fc_case_value_row(c, FC_T_MASK, mi, sk, mrow2);
                for (int64_t j = 0; j < sk; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < dqk; d++) s += qrow[d] * kmat[j * dqk + d];
                    s *= scale;
                    if (mrow2) s += mrow2[j];
                    score[j] = vis[i * sk + j] ? s : -INFINITY;
                }
                for (int t = 0; t < 4; t++) {
                    int64_t T = feat_tiles[t], n = 0;
                    double m = -INFINITY;
                    for (int64_t j0 = 0; j0 < sk; j0 += T) {
                        double tm = -INFINITY;
                        for (int64_t j = j0; j < j0 + T && j < sk; j++) if (score[j] > tm) tm = score[j];
                        if (tm > m) { if (m > -INFINITY) n++; m = tm; }
                    }
                    if (n > most[t]) most[t] = n;
                }
            }
            for (int t = 0; t < 4; t++) set(f, FZ_FEAT_RESCALE + 8 * t + count_bucket(most[t]));
        }
        free(kmat); free(qrow); free(score); free(mrow2);
    }
    free(vis);
}

void fz_feat_publish(const fz_feat *f)
{
    memcpy(fz_extra_counters, f->c, sizeof fz_extra_counters);
}

/* ------------------------------------------------------------------------- */
/* novelty                                                                   */

int fz_feat_novel(fz_feat_map *m, const fz_feat *f)
{
    int n = 0;
    for (int i = 0; i < FZ_FEAT_COUNT; i++) {
        if (!f->c[i]) continue;
        uint8_t bit = (uint8_t)(1u << count_bucket(f->c[i]));
        if (!(m->seen[i] & bit)) { m->seen[i] |= bit; n++; }
    }
    return n;
}

int fz_feat_map_size(const fz_feat_map *m)
{
    int n = 0;
    for (int i = 0; i < FZ_FEAT_COUNT; i++) n += __builtin_popcount(m->seen[i]);
    return n;
}
