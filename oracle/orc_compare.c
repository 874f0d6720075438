/* orc_compare.c: judge a backend's outputs against an oracle result.
 *
 * Per element (finite reference): err = |kernel - ref|.
 *   err + orc_err <= bound   pass (certain: |kernel - exact| <= bound)
 *   err - orc_err >  bound   fail (certain)
 *   otherwise                undecided: the vector is recomputed in MPFR here
 *                            (orc_err ~ 2^-53 |ref|) and judged again; if still
 *                            undecided the MPFR value is taken as exact.
 * Non-finite: a reference NaN needs a kernel NaN, a reference Inf the same
 * Inf; a kernel NaN against a finite reference fails. A kernel +-Inf against a
 * finite reference passes when the exact value, moved by at most the bound
 * toward that Inf's sign, reaches the dtype's overflow threshold (RN to the
 * dtype then gives that Inf): dir*ref + bound - orc_err >= threshold with
 * dir = sign of the Inf (counted in overflow_inf; when bound > |ref| either
 * sign can qualify); it fails when dir*ref + bound + orc_err < threshold, and
 * is escalated in between. A finite kernel value where
 * |ref| - bound exceeds the largest finite number fails through the ordinary
 * |kernel - ref| > bound test.
 * Pure: nothing in the result is modified, no global state is touched. Blocks of
 * >= 2^20 elements are judged by the result's OpenMP threads (opt.threads) on
 * contiguous ranges of vectors, merged into the one-pass statistics (stats_merge). */
#include <stdio.h>
#include <string.h>

#include "oracle/orc_internal.h"
#include "oracle/orc_judge.h"
#ifdef _OPENMP
#include <omp.h>
#endif

// ----------------------------------------------------------------------------
// output views

static fa_status cmp_fail(fa_error *err, fa_status st, const char *arg, const char *msg) {
    if (err) {
        err->status = st;
        snprintf(err->arg, sizeof err->arg, "%s", arg);
        snprintf(err->msg, sizeof err->msg, "%s", msg);
    }
    return st;
}

static fa_status check_view(const char *name, const void *ptr, size_t esize, int nd,
                            const int64_t *dims, const int64_t *st, fa_error *err) {
    char msg[200];
    if (!ptr) {
        snprintf(msg, sizeof msg, "%s is NULL; pass the backend's output (host memory).", name);
        return cmp_fail(err, FA_ERR_INVALID, name, msg);
    }
    if ((uintptr_t)ptr % esize) {
        snprintf(msg, sizeof msg, "%s is not aligned to its %zu-byte element.", name, esize);
        return cmp_fail(err, FA_ERR_INVALID, name, msg);
    }
    __int128 ext = 0;
    for (int i = 0; i < nd; i++) {
        if (st[i] < 0) {
            snprintf(msg, sizeof msg, "%s has a negative stride[%d]; strides must be >= 0.", name, i);
            return cmp_fail(err, FA_ERR_INVALID, name, msg);
        }
        if (dims[i] > 0) ext += (__int128)(dims[i] - 1) * st[i];
    }
    if (ext > (__int128)INT64_MAX / 8) {
        snprintf(msg, sizeof msg, "the strides of %s give an extent that overflows 64 bits.", name);
        return cmp_fail(err, FA_ERR_INVALID, name, msg);
    }
    return FA_OK;
}

// ----------------------------------------------------------------------------
// statistics

typedef struct {
    orc_stats *s;
    double *ratios;
    int64_t nr;
    double floor_max;
    double thr;      /* overflow threshold of the output dtype (orc_overflow_threshold) */
    double vmax;     /* worst ratio of the vector being judged (-1: none judged yet); goes to its
                        grid cell (orc_stats.grid) when the vector is done */
    double bias, bias_zero; /* sums of the signed ratios (orc_stats.bias_sum, bias_zero_sum) */
} acc_stats;

static void vec_max(acc_stats *a, double ratio) {
    if (ratio > a->vmax) a->vmax = ratio;
}

/* k-th smallest of a[0..n) (quickselect, reorders a); values are not NaN */
static double select_kth(double *a, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = a[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) { double t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return a[k];
    }
    return a[k];
}

static void note_fail(orc_stats *s, const int64_t at[4]) {
    s->failed++;
    if (s->first_fail_at[0] < 0) memcpy(s->first_fail_at, at, sizeof s->first_fail_at);
}

static void note_ovf(orc_stats *s, const int64_t at[4]) {
    s->overflow_sensitive++;
    if (s->first_ovf_at[0] < 0) memcpy(s->first_ovf_at, at, sizeof s->first_ovf_at);
}

/* Judge one element by the rule of orc_judge.h (the device compare calls the same
 * orc_jd_elem) into a's statistics. Returns 0 judged, 1 undecided (needs MPFR). */
static inline __attribute__((always_inline)) int judge(acc_stats *a, double kv, double ref, double bound, double oe, uint8_t fl,
                 const int64_t at[4], int final) {
    orc_stats *s = a->s;
    orc_jd r = orc_jd_elem(kv, ref, bound, oe, fl, a->thr, final);
    switch (r.cls) {
    case ORC_JD_UNDECIDED: return 1;
    case ORC_JD_UNCHECKED: s->unchecked++; return 0;
    case ORC_JD_UNCHECKED_OVF: s->unchecked++; note_ovf(s, at); return 0;
    case ORC_JD_NF_MATCH: s->checked++; s->nonfinite_match++; vec_max(a, 0); return 0;
    case ORC_JD_NAN_MISSING: s->checked++; s->nan_missing++; note_fail(s, at); vec_max(a, INFINITY); return 0;
    case ORC_JD_OVF_INF: s->checked++; s->overflow_inf++; vec_max(a, 0); return 0;
    case ORC_JD_CHECKED_OVF: s->checked++; note_ovf(s, at); return 0;
    case ORC_JD_NAN_UNEXP: s->checked++; s->nan_unexpected++; note_fail(s, at); vec_max(a, INFINITY); return 0;
    default: break;
    }
    double err = r.err, ratio = r.ratio;
    s->checked++;
    if (err > bound) note_fail(s, at);
    if (ratio > s->worst_ratio || s->worst_at[0] < 0) {
        s->worst_ratio = ratio;
        memcpy(s->worst_at, at, sizeof s->worst_at);
        s->worst_kernel = kv; s->worst_ref = ref; s->worst_bound = bound;
    }
    s->ratio_hist[orc_jd_bucket(ratio)]++;
    s->exact += err == 0;
    vec_max(a, ratio);
    if (bound > 0) {
        a->ratios[a->nr++] = ratio;
        /* rounding bias: the signed ratio, and oriented by the sign of ref (round to nearest
           in double: a statistic, its error is far below the ratios' own spread) */
        double sr = kv < ref ? -ratio : ratio;
        a->bias += sr;
        a->bias_zero += ref < 0 ? -sr : sr;
    }
    if (err > s->max_err) s->max_err = err;
    return 0;
}

/* heads x seq: the extent of the vectors' (h, s) indices */
static void stats_init(orc_stats *s, int has_baseline, int64_t heads, int64_t seq) {
    memset(s, 0, sizeof *s);
    for (int k = 0; k < 4; k++) s->worst_at[k] = s->first_fail_at[k] = s->first_ovf_at[k] = -1;
    s->has_baseline = has_baseline;
    s->grid_hb = 1;
    while ((heads + s->grid_hb - 1) / s->grid_hb > ORC_GRID_ROWS) s->grid_hb *= 2;
    s->grid_sb = 16;
    while ((seq + s->grid_sb - 1) / s->grid_sb > ORC_GRID_COLS) s->grid_sb *= 2;
    s->grid_rows = (int)((heads + s->grid_hb - 1) / s->grid_hb);
    s->grid_cols = (int)((seq + s->grid_sb - 1) / s->grid_sb);
    s->grid_heads = heads;
    s->grid_seq = seq;
    for (int r = 0; r < ORC_GRID_ROWS; r++)
        for (int c = 0; c < ORC_GRID_COLS; c++) s->grid[r][c] = -1;
}

/* Blocks of at least this many elements are judged by nth threads, each on a contiguous
 * range of vectors, the ranges' statistics merged in order (stats_merge). */
#define CMP_PAR_MIN ((int64_t)1 << 20)

/* k-th smallest of a[0..n) (values >= 0, not NaN: their bit patterns order as the values)
 * on nth threads: histograms of 16 bits of the patterns, from the top, narrow the search to
 * one bucket, gathered until it is small, then select_kth. The same value as select_kth;
 * a is not modified. NAN if out of memory (the caller falls back to select_kth). */
static double par_select(const double *a, int64_t n, int64_t k, int nth) {
    const double *cur = a;
    double *own = NULL;
    int64_t cn = n;
    int64_t *cnt = malloc((size_t)nth * 65536 * sizeof(int64_t));
    if (!cnt) return NAN;
    for (int shift = 48; cn > 65536 && shift >= 0; shift -= 16) {
        memset(cnt, 0, (size_t)nth * 65536 * sizeof(int64_t));
#pragma omp parallel for schedule(static, 1) num_threads(nth)
        for (int t = 0; t < nth; t++) {
            int64_t *c = cnt + (size_t)t * 65536;
            for (int64_t i = cn * t / nth; i < cn * (t + 1) / nth; i++) {
                uint64_t u;
                memcpy(&u, &cur[i], 8);
                c[(u >> shift) & 0xffff]++;
            }
        }
        int64_t below = 0, bsel = 0, bcount = 0;
        for (int64_t x = 0; x < 65536; x++) {
            int64_t tot = 0;
            for (int t = 0; t < nth; t++) tot += cnt[(size_t)t * 65536 + x];
            if (below + tot > k) { bsel = x; bcount = tot; break; }
            below += tot;
        }
        k -= below;
        if (bcount == cn) continue; /* every element in one bucket: next 16 bits */
        double *nx = malloc((size_t)(bcount ? bcount : 1) * sizeof(double));
        if (!nx) { free(own); free(cnt); return NAN; }
        int64_t off[nth + 1];
        off[0] = 0;
        for (int t = 0; t < nth; t++) off[t + 1] = off[t] + cnt[(size_t)t * 65536 + bsel];
#pragma omp parallel for schedule(static, 1) num_threads(nth)
        for (int t = 0; t < nth; t++) {
            int64_t o = off[t];
            for (int64_t i = cn * t / nth; i < cn * (t + 1) / nth; i++) {
                uint64_t u;
                memcpy(&u, &cur[i], 8);
                if ((int64_t)((u >> shift) & 0xffff) == bsel) nx[o++] = cur[i];
            }
        }
        free(own);
        own = nx;
        cur = nx;
        cn = bcount;
    }
    free(cnt);
    double r;
    if (own) {
        r = select_kth(own, cn, k);
    } else { /* a stayed whole: select on a copy */
        double *cp = malloc((size_t)(cn ? cn : 1) * sizeof(double));
        if (!cp) return NAN;
        memcpy(cp, cur, (size_t)cn * sizeof(double));
        r = select_kth(cp, cn, k);
        free(cp);
    }
    free(own);
    return r;
}

static void stats_finish(acc_stats *a, double factor, int nth) {
    orc_stats *s = a->s;
    s->bias_sum = a->bias;
    s->bias_zero_sum = a->bias_zero;
    s->bias_n = a->nr;
    if (a->nr > 65536 && nth > 1) { /* nth > 1: a block of >= CMP_PAR_MIN elements */
        double hi = par_select(a->ratios, a->nr, a->nr / 2, nth);
        double lo = a->nr % 2 ? hi : par_select(a->ratios, a->nr, a->nr / 2 - 1, nth);
        if (!isnan(hi) && !isnan(lo)) {
            s->median_ratio = a->nr % 2 ? hi : 0.5 * (lo + hi);
            goto baseline;
        }
    }
    if (a->nr > 0) {
        double hi = select_kth(a->ratios, a->nr, a->nr / 2);
        if (a->nr % 2) {
            s->median_ratio = hi;
        } else {
            double lo = a->ratios[0]; /* max of the lower part */
            for (int64_t i = 1; i < a->nr / 2; i++) if (a->ratios[i] > lo) lo = a->ratios[i];
            s->median_ratio = 0.5 * (lo + hi);
        }
    }
baseline:
    if (s->has_baseline) {
        s->baseline_floor = 2 * a->floor_max;
        s->baseline_limit = factor * s->baseline_max_err + s->baseline_floor;
        s->baseline_pass = s->max_err <= s->baseline_limit && s->failed == 0;
    }
}

/* Baseline bookkeeping for a finite element. */
static void note_baseline(acc_stats *a, const orc_block *blk, int64_t e, double ref, int f32, fa_dtype dt) {
    if (!blk->baseline || !isfinite(ref) || (blk->flags[e] & (ORC_F_UNCHECKABLE | ORC_F_MASKED_ROW))) return;
    double be = fabs(blk->baseline[e] - ref);
    if (be > a->s->baseline_max_err || isnan(be)) a->s->baseline_max_err = be;
    double fl = f32 ? fabs((double)((float)((float)(ref + 0.3) - 0.3f)) - ref)
                    : fabs(orc_rd_fast(orc_rd_fast(ref + 0.3, dt) - 0.3, dt) - ref);
    if (fl > a->floor_max) a->floor_max = fl;
}

// ----------------------------------------------------------------------------
// one block against one kernel tensor

typedef enum { V_O, V_LSE, V_DQ, V_DKV, V_SINK } vec_kind;

/* A packed / paged problem (BOUNDS.md 13): its sequences, and the args to cut them from. */
typedef struct {
    const orc_seqs *s;
    const fa_fwd_args *fa; /* one of the two */
    const fa_bwd_args *ba;
} cmp_seq;

/* Sequence b's dense ctx (orc_seq_sub_*); *kb, *vb: gathered pages to free. 0: no memory. */
static int seq_ctx(const cmp_seq *sv, int64_t b, orc_ctx *cs, uint16_t **kb, uint16_t **vb) {
    if (sv->fa) {
        fa_fwd_args sub;
        if (!orc_seq_sub_fwd(sv->fa, sv->s, b, &sub, kb, vb)) return 0;
        return orc_ctx_fwd3(&sub, cs, NULL) == FA_OK;
    }
    fa_bwd_args sub;
    if (!orc_seq_sub_bwd(sv->ba, sv->s, b, &sub, kb, vb)) return 0;
    return orc_ctx_bwd3(&sub, cs, NULL) == FA_OK;
}

/* recompute vector v of blk in MPFR into out (O row, LSE, dQ row, dK or dV column) */
static void recompute(const orc_ctx *c, vec_kind kind, int is_dv, const orc_index *ix, int prec,
                      double *out);

/* The parts of a shared pool position (page, slot) of a paged problem: every (b, j < Sk_b)
 * whose table entry names the page (section 13.3). Returns the count; bs, js malloc'd. */
static int pool_parts(const orc_seqs *s, int64_t page, int64_t slot, int64_t **bs, int64_t **js) {
    int n = 0, cap = 4;
    *bs = malloc((size_t)cap * sizeof(int64_t));
    *js = malloc((size_t)cap * sizeof(int64_t));
    if (!*bs || !*js) abort();
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t t = 0; t * s->page_size < s->sk[b]; t++) {
            int64_t j = t * s->page_size + slot;
            if (s->table[b * s->tstride + t] != page || j >= s->sk[b]) continue;
            if (n == cap) {
                cap *= 2;
                *bs = realloc(*bs, (size_t)cap * sizeof(int64_t));
                *js = realloc(*js, (size_t)cap * sizeof(int64_t));
                if (!*bs || !*js) abort();
            }
            (*bs)[n] = b; (*js)[n] = j; n++;
        }
    return n;
}

/* recompute for a packed / paged problem: on sequence ix->b's dense ctx, a pool position's
 * parts summed in MPFR, or dsinks over every sequence */
static void recompute_seq(const cmp_seq *sv, const orc_ctx *c, vec_kind kind, int is_dv, const orc_index *ix,
                          int prec, double *out) {
    if (kind == V_SINK || (kind == V_DKV && sv->s->paged)) {
        int64_t *bs = NULL, *js = NULL;
        int n;
        if (kind == V_SINK) {
            n = (int)sv->s->B;
            bs = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
            js = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
            if (!bs || !js) abort();
            for (int k = 0; k < n; k++) { bs[k] = k; js[k] = 0; }
        } else {
            n = pool_parts(sv->s, ix->b, ix->s, &bs, &js);
        }
        orc_ctx *cs = calloc((size_t)(n ? n : 1), sizeof(orc_ctx));
        const orc_ctx **cp = malloc((size_t)(n ? n : 1) * sizeof(*cp));
        uint16_t **bufs = calloc((size_t)(2 * n + 1), sizeof(uint16_t *));
        int64_t *zero = calloc((size_t)(n ? n : 1), sizeof(int64_t));
        if (!cs || !cp || !bufs || !zero) abort();
        for (int k = 0; k < n; k++) {
            if (!seq_ctx(sv, bs[k], &cs[k], &bufs[2 * k], &bufs[2 * k + 1])) abort();
            cp[k] = &cs[k];
        }
        if (kind == V_SINK) {
            out[0] = n ? orc_mpfr_dsink(cp, zero, n, ix->h, prec) : 0.0;
        } else if (n == 0) {
            for (int64_t d = 0; d < (is_dv ? c->Dv : c->D); d++) out[d] = 0;
        } else {
            double *dk = malloc((size_t)c->D * sizeof(double)), *dv = malloc((size_t)c->Dv * sizeof(double));
            if (!dk || !dv) abort();
            orc_mpfr_dkdv_sum(cp, zero, js, n, ix->h, prec, dk, dv);
            memcpy(out, is_dv ? dv : dk, (size_t)(is_dv ? c->Dv : c->D) * sizeof(double));
            free(dk); free(dv);
        }
        for (int k = 0; k < 2 * n; k++) free(bufs[k]);
        free(cs); free(cp); free(bufs); free(zero); free(bs); free(js);
        return;
    }
    orc_ctx cs;
    uint16_t *kb = NULL, *vb = NULL;
    if (!seq_ctx(sv, ix->b, &cs, &kb, &vb)) abort();
    orc_index sub = *ix;
    sub.b = 0;
    recompute(&cs, kind, is_dv, &sub, prec, out);
    free(kb); free(vb);
}

static void recompute(const orc_ctx *c, vec_kind kind, int is_dv, const orc_index *ix, int prec,
                      double *out) {
    if (kind == V_O || kind == V_LSE) {
        double *o = malloc((size_t)c->Dv * sizeof(double)), lse;
        if (!o) abort();
        orc_mpfr_fwd_row(c, ix->b, ix->h, ix->s, prec, o, &lse);
        if (kind == V_O) memcpy(out, o, (size_t)c->Dv * sizeof(double));
        else out[0] = lse;
        free(o);
    } else if (kind == V_DQ) {
        orc_mpfr_dq_row(c, ix->b, ix->h, ix->s, prec, out);
    } else {
        double *dk = malloc((size_t)c->D * sizeof(double)), *dv = malloc((size_t)c->Dv * sizeof(double));
        if (!dk || !dv) abort();
        orc_mpfr_dkdv_col(c, ix->b, ix->h, ix->s, prec, dk, dv);
        memcpy(out, is_dv ? dv : dk, (size_t)(is_dv ? c->Dv : c->D) * sizeof(double));
        free(dk); free(dv);
    }
}

/* Element e (= v dim + d) of vector ix with kernel value kv: judged on the double reference,
 * an undecided one on the vector's MPFR values (recomputed into mp on the vector's first
 * undecided element, *escalated set; later elements of the vector then use mp too).
 * Returns the reference the element was judged on. */
static inline __attribute__((always_inline)) double judge_esc(acc_stats *a, const orc_block *blk, const orc_ctx *c,
        const cmp_seq *sv, vec_kind kind, int is_dv, const orc_index *ix, int prec, double nterms,
        int64_t e, int64_t d, double kv, const int64_t at[4], int *escalated, double *mp) {
    double ref = blk->ref[e], oe = blk->orc_err[e];
    if (*escalated) { oe = orc_mpfr_err(mp[d], oe, prec, nterms); ref = mp[d]; }
    if (judge(a, kv, ref, blk->bound[e], oe, blk->flags[e], at, 0)) {
        if (!*escalated) {
            if (sv) recompute_seq(sv, c, kind, is_dv, ix, prec, mp);
            else recompute(c, kind, is_dv, ix, prec, mp);
            *escalated = 1;
        }
        a->s->escalations++;
        oe = orc_mpfr_err(mp[d], blk->orc_err[e], prec, nterms);
        ref = mp[d];
        int still = judge(a, kv, ref, blk->bound[e], oe, blk->flags[e], at, 0);
        if (still) judge(a, kv, ref, blk->bound[e], 0, blk->flags[e], at, 1);
    }
    return ref;
}

/* Vectors v0 .. v1-1 of blk into a (its stats, its ratios), mp: [dim] scratch. sv: the
 * sequences of a contract-v3 problem (BOUNDS.md 13), or NULL (dense). */
static void compare_range(const orc_block *blk, const orc_ctx *c, const cmp_seq *sv, vec_kind kind, int is_dv,
                          const void *kptr, const int64_t *st, int prec, double nterms, int64_t v0, int64_t v1,
                          acc_stats *a, double *mp) {
    orc_stats *out = a->s;
    int f32 = kind == V_LSE || kind == V_SINK;
    int dkv = kind == V_DKV;
    int pool = dkv && sv && sv->s->paged; /* vectors are pool positions (page, hkv, slot) */
    /* grid_hb, grid_sb are powers of two: cells by shifts, not divisions */
    int hshift = __builtin_ctzll((unsigned long long)out->grid_hb), sshift = __builtin_ctzll((unsigned long long)out->grid_sb);
    for (int64_t v = v0; v < v1; v++) {
        const orc_index *ix = &blk->index[v];
        int escalated = 0;
        a->vmax = -1;
        for (int64_t d = 0; d < blk->dim; d++) {
            int64_t e = v * blk->dim + d;
            double kv;
            int64_t at[4] = {ix->b, ix->s, ix->h, d};
            if (kind == V_SINK) {
                kv = ((const float *)kptr)[ix->h];
                at[3] = 0;
            } else if (f32) {
                kv = ((const float *)kptr)[sv ? orc_seq_lse_off(sv->s, st, ix->b, ix->h, ix->s)
                                              : ix->b * st[0] + ix->h * st[1] + ix->s * st[2]];
                at[3] = 0;
            } else {
                int64_t off = !sv || pool ? ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3]
                              : dkv       ? orc_seq_koff(sv->s, st, ix->b, ix->s, ix->h, d)
                                          : orc_seq_qoff(sv->s, st, ix->b, ix->s, ix->h, d);
                kv = orc_decode_fast(((const uint16_t *)kptr)[off], c->dt);
            }
            double ref = judge_esc(a, blk, c, sv, kind, is_dv, ix, prec, nterms, e, d, kv, at, &escalated, mp);
            note_baseline(a, blk, e, ref, f32, c->dt);
        }
        float *cell = &out->grid[ix->h >> hshift][ix->s >> sshift];
        if (a->vmax > *cell) *cell = (float)a->vmax;
    }
}

/* Fold the stats p of a later range of vectors into o (the earlier ranges): the result is
 * the one pass over both in order gives (counts, first failure / overflow positions, worst
 * element: its first occurrence, maxima, grid cells); the ratios and bias sums are merged
 * by the caller. */
static void stats_merge(orc_stats *o, const orc_stats *p) {
    o->checked += p->checked;
    o->failed += p->failed;
    o->unchecked += p->unchecked;
    o->escalations += p->escalations;
    o->nan_unexpected += p->nan_unexpected;
    o->nan_missing += p->nan_missing;
    o->overflow_inf += p->overflow_inf;
    o->overflow_sensitive += p->overflow_sensitive;
    o->exact += p->exact;
    o->nonfinite_match += p->nonfinite_match;
    for (int k = 0; k < ORC_HIST_BUCKETS; k++) o->ratio_hist[k] += p->ratio_hist[k];
    if (p->worst_at[0] >= 0 && (o->worst_at[0] < 0 || p->worst_ratio > o->worst_ratio)) {
        o->worst_ratio = p->worst_ratio;
        memcpy(o->worst_at, p->worst_at, sizeof o->worst_at);
        o->worst_kernel = p->worst_kernel; o->worst_ref = p->worst_ref; o->worst_bound = p->worst_bound;
    }
    if (o->first_fail_at[0] < 0 && p->first_fail_at[0] >= 0) memcpy(o->first_fail_at, p->first_fail_at, sizeof o->first_fail_at);
    if (o->first_ovf_at[0] < 0 && p->first_ovf_at[0] >= 0) memcpy(o->first_ovf_at, p->first_ovf_at, sizeof o->first_ovf_at);
    if (p->max_err > o->max_err) o->max_err = p->max_err;
    if (p->baseline_max_err > o->baseline_max_err || isnan(p->baseline_max_err)) o->baseline_max_err = p->baseline_max_err;
    for (int r = 0; r < ORC_GRID_ROWS; r++)
        for (int c = 0; c < ORC_GRID_COLS; c++)
            if (p->grid[r][c] > o->grid[r][c]) o->grid[r][c] = p->grid[r][c];
}


static fa_status compare_block(const orc_block *blk, const orc_ctx *c, const cmp_seq *sv, vec_kind kind,
                               int is_dv, const void *kptr, const int64_t *st, int prec, double nterms,
                               double factor, int nth, orc_stats *out) {
    int64_t nel = blk->n * blk->dim;
    int f32 = kind == V_LSE || kind == V_SINK;
    acc_stats a = {out, malloc((size_t)(nel > 0 ? nel : 1) * sizeof(double)), 0, 0,
                   orc_overflow_threshold(f32 ? -1 : (int)c->dt), 0, 0, 0};
    if (!a.ratios) return FA_ERR_NOMEM;
    int dkv = kind == V_DKV;
    int pool = dkv && sv && sv->s->paged; /* vectors are pool positions (page, hkv, slot) */
    stats_init(out, blk->baseline != NULL, dkv ? c->Hkv : c->Hq,
               kind == V_SINK ? 1 : pool ? sv->s->page_size : dkv ? c->Sk : c->Sq);
    int nch = nel >= CMP_PAR_MIN && nth > 1 && blk->n >= nth ? nth : 1;
    orc_stats *ps = nch > 1 ? malloc((size_t)nch * sizeof *ps) : NULL;
    acc_stats *pa = nch > 1 ? malloc((size_t)nch * sizeof *pa) : NULL;
    if (nch > 1 && (!ps || !pa)) nch = 1;
    if (nch == 1) {
        double *mp = malloc((size_t)(blk->dim > 0 ? blk->dim : 1) * sizeof(double));
        if (!mp) { free(a.ratios); free(ps); free(pa); return FA_ERR_NOMEM; }
        compare_range(blk, c, sv, kind, is_dv, kptr, st, prec, nterms, 0, blk->n, &a, mp);
        free(mp);
    } else {
        int mem_ok = 1;
#pragma omp parallel for schedule(static, 1) num_threads(nch)
        for (int k = 0; k < nch; k++) {
            int64_t v0 = blk->n * k / nch, v1 = blk->n * (k + 1) / nch;
            pa[k] = a;
            pa[k].s = &ps[k];
            pa[k].ratios = a.ratios + v0 * blk->dim;
            *pa[k].s = *out; /* the initialized stats (grid geometry, -1 cells) */
            double *mp = malloc((size_t)(blk->dim > 0 ? blk->dim : 1) * sizeof(double));
            if (!mp) {
#pragma omp atomic write
                mem_ok = 0;
                continue;
            }
            compare_range(blk, c, sv, kind, is_dv, kptr, st, prec, nterms, v0, v1, &pa[k], mp);
            free(mp);
        }
        if (!mem_ok) { free(a.ratios); free(ps); free(pa); return FA_ERR_NOMEM; }
        for (int k = 0; k < nch; k++) {
            if (k == 0) *out = ps[0];
            else stats_merge(out, &ps[k]);
            if (a.ratios + a.nr != pa[k].ratios)
                memmove(a.ratios + a.nr, pa[k].ratios, (size_t)pa[k].nr * sizeof(double));
            a.nr += pa[k].nr;
            a.bias += pa[k].bias;
            a.bias_zero += pa[k].bias_zero;
            if (pa[k].floor_max > a.floor_max) a.floor_max = pa[k].floor_max;
        }
    }
    stats_finish(&a, factor, nch);
    free(a.ratios);
    free(ps);
    free(pa);
    return FA_OK;
}

// ----------------------------------------------------------------------------
// public

/* The full problem's ctx c (dense rules; a packed / paged problem's maxima) and, for a
 * packed / paged problem, its sequences into *sq and *sv (svp set). */
static fa_status cmp_ctx(const fa_fwd_args *fa, const fa_bwd_args *ba, orc_ctx *c, orc_seqs *sq, cmp_seq *sv,
                         const cmp_seq **svp, fa_error *err) {
    const fa_problem *p = fa ? &fa->p : &ba->p;
    const fa_varlen *vl = fa ? &fa->varlen : &ba->varlen;
    const fa_paged *pg = fa ? &fa->paged : &ba->paged;
    fa_status st;
    *svp = NULL;
    memset(sq, 0, sizeof *sq);
    if (!orc_seq_active(p, vl)) return fa ? orc_ctx_fwd3(fa, c, err) : orc_ctx_bwd3(ba, c, err);
    if (fa) {
        fa_fwd_args d = *fa;
        memset(&d.varlen, 0, sizeof d.varlen); memset(&d.paged, 0, sizeof d.paged); d.p.page_size = 0;
        if ((st = orc_ctx_fwd3(&d, c, err))) return st;
    } else {
        fa_bwd_args d = *ba;
        memset(&d.varlen, 0, sizeof d.varlen); memset(&d.paged, 0, sizeof d.paged); d.p.page_size = 0;
        if ((st = orc_ctx_bwd3(&d, c, err))) return st;
    }
    if ((st = orc_seqs_init(sq, p, vl, pg, err))) return st;
    sv->s = sq; sv->fa = fa; sv->ba = ba;
    *svp = sv;
    return FA_OK;
}

/* Output view dims: packed rows [1, cu[B], H, Dm] (stride 0 ignored), a page pool
 * [num_pages, page_size, H, Dm], or dense. */
static void out_dims(const orc_seqs *sq, int qside, const fa_problem *p, int64_t H, int64_t Dm, int64_t dims[4]) {
    int64_t B = p->batch, S = qside ? p->seqlen_q : p->seqlen_k;
    if (sq && sq->sq) {
        if (qside && B > 0 && sq->q0[0] >= 0) { B = 1; S = sq->rows_q; }
        else if (!qside && sq->paged) { B = sq->num_pages; S = sq->page_size; }
        else if (!qside && B > 0 && sq->k0[0] >= 0) { B = 1; S = sq->rows_k; }
    }
    dims[0] = B; dims[1] = S; dims[2] = H; dims[3] = Dm;
}

fa_status orc_compare_fwd(const orc_fwd_result *res, const fa_tensor *o, const fa_lse *lse,
                          orc_stats *o_stats, orc_stats *lse_stats, fa_error *err) {
    orc_ctx c;
    orc_seqs sq;
    cmp_seq sv;
    const cmp_seq *svp;
    fa_status st;
    if (!res) return cmp_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_fwd_result.");
    if ((st = cmp_ctx(&res->args, NULL, &c, &sq, &sv, &svp, err))) return st;
    const fa_problem *p = &res->args.p;
    int64_t dims[4], dl[3] = {p->batch, p->heads_q, p->seqlen_q};
    out_dims(svp ? &sq : NULL, 1, p, p->heads_q, p->head_dim_v, dims);
    if (svp && sq.B > 0 && sq.q0[0] >= 0) { dl[0] = 1; dl[2] = sq.rows_q; }
    if (o_stats) {
        if (!o) { orc_seqs_free(&sq); return cmp_fail(err, FA_ERR_INVALID, "o", "o is NULL while o_stats is given."); }
        if ((st = check_view("o", o->ptr, 2, 4, dims, o->stride, err))) { orc_seqs_free(&sq); return st; }
    }
    if (lse_stats) {
        if (!lse) { orc_seqs_free(&sq); return cmp_fail(err, FA_ERR_INVALID, "lse", "lse is NULL while lse_stats is given."); }
        if ((st = check_view("lse", lse->ptr, 4, 3, dl, lse->stride, err))) { orc_seqs_free(&sq); return st; }
    }
    int nth = orc_nthreads(&res->opt);
    st = FA_OK;
    if (o_stats && (st = compare_block(&res->o, &c, svp, V_O, 0, o->ptr, o->stride, res->opt.mpfr_prec,
                                       (double)c.Sk + 1, 2.0, nth, o_stats)))
        st = cmp_fail(err, st, "", "out of memory while comparing O.");
    if (!st && lse_stats && (st = compare_block(&res->lse, &c, svp, V_LSE, 0, lse->ptr, lse->stride,
                                                res->opt.mpfr_prec, (double)c.Sk + 1, 2.0, nth, lse_stats)))
        st = cmp_fail(err, st, "", "out of memory while comparing LSE.");
    orc_seqs_free(&sq);
    return st;
}

fa_status orc_compare_bwd(const orc_bwd_result *res, const fa_tensor *dq, const fa_tensor *dk,
                          const fa_tensor *dv, orc_stats *dq_stats, orc_stats *dk_stats,
                          orc_stats *dv_stats, fa_error *err) {
    orc_ctx c;
    orc_seqs sq;
    cmp_seq sv;
    const cmp_seq *svp;
    fa_status st;
    if (!res) return cmp_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_bwd_result.");
    if ((st = cmp_ctx(NULL, &res->args, &c, &sq, &sv, &svp, err))) return st;
    const fa_problem *p = &res->args.p;
    int64_t dims_q[4], dims_k[4], dims_v[4];
    out_dims(svp ? &sq : NULL, 1, p, p->heads_q, p->head_dim_qk, dims_q);
    out_dims(svp ? &sq : NULL, 0, p, p->heads_kv, p->head_dim_qk, dims_k);
    out_dims(svp ? &sq : NULL, 0, p, p->heads_kv, p->head_dim_v, dims_v);
    struct { const char *name; const fa_tensor *t; orc_stats *s; const int64_t *dims; } v[3] = {
        {"dq", dq, dq_stats, dims_q}, {"dk", dk, dk_stats, dims_k}, {"dv", dv, dv_stats, dims_v}};
    for (int i = 0; i < 3; i++) {
        if (!v[i].s) continue;
        if (!v[i].t) { orc_seqs_free(&sq); return cmp_fail(err, FA_ERR_INVALID, v[i].name, "tensor is NULL while its stats are given."); }
        if ((st = check_view(v[i].name, v[i].t->ptr, 2, 4, v[i].dims, v[i].t->stride, err))) { orc_seqs_free(&sq); return st; }
    }
    int prec = res->opt.mpfr_prec, nth = orc_nthreads(&res->opt);
    /* terms of a dK/dV column: every (head, row) of the group, of every sequence sharing a page */
    double ncol = (double)(c.Sq * c.G + c.G) *
                  (svp && sq.paged ? (double)(c.B > 0 ? c.B : 1) * (double)res->args.paged.max_pages_per_seq : 1);
    st = FA_OK;
    if (dq_stats && (st = compare_block(&res->dq, &c, svp, V_DQ, 0, dq->ptr, dq->stride, prec, (double)c.Sk + 1, 3.0, nth, dq_stats)))
        st = cmp_fail(err, st, "", "out of memory while comparing dQ.");
    if (!st && dk_stats && (st = compare_block(&res->dk, &c, svp, V_DKV, 0, dk->ptr, dk->stride, prec, ncol, 3.0, nth, dk_stats)))
        st = cmp_fail(err, st, "", "out of memory while comparing dK.");
    if (!st && dv_stats && (st = compare_block(&res->dv, &c, svp, V_DKV, 1, dv->ptr, dv->stride, prec, ncol, 3.0, nth, dv_stats)))
        st = cmp_fail(err, st, "", "out of memory while comparing dV.");
    orc_seqs_free(&sq);
    return st;
}

fa_status orc_compare_dsinks(const orc_bwd_result *res, const float *dsinks, orc_stats *stats, fa_error *err) {
    orc_ctx c;
    orc_seqs sq;
    cmp_seq sv;
    const cmp_seq *svp;
    fa_status st;
    if (!res) return cmp_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_bwd_result.");
    if (!stats) return FA_OK;
    if (!res->args.p.has_sinks || res->dsinks.n == 0)
        return cmp_fail(err, FA_ERR_INVALID, "dsinks", "the result has no dsinks (p.has_sinks = 0).");
    if (!dsinks) return cmp_fail(err, FA_ERR_INVALID, "dsinks", "dsinks is NULL; pass the backend's [heads_q] output.");
    if ((st = cmp_ctx(NULL, &res->args, &c, &sq, &sv, &svp, err))) return st;
    cmp_seq one = {NULL, NULL, &res->args};
    orc_seqs dense1; /* a dense problem: its batch as B sequences of full length */
    memset(&dense1, 0, sizeof dense1);
    if (!svp) {
        fa_varlen none;
        memset(&none, 0, sizeof none);
        fa_problem p = res->args.p;
        p.page_size = 0;
        if ((st = orc_seqs_init(&dense1, &p, &none, NULL, err))) return st;
        one.s = &dense1;
        svp = &one;
    }
    /* terms: every row of every sequence */
    double nt = (double)(c.B * c.Sq + 1);
    st = compare_block(&res->dsinks, &c, svp, V_SINK, 0, dsinks, NULL, res->opt.mpfr_prec, nt, 3.0, orc_nthreads(&res->opt), stats);
    if (st) st = cmp_fail(err, st, "", "out of memory while comparing dsinks.");
    orc_seqs_free(&sq);
    orc_seqs_free(&dense1);
    return st;
}

// ----------------------------------------------------------------------------
// the escalated vectors of a device compare (orc_judge.h)

fa_status orc_compare_esc(const orc_fwd_result *fr, const orc_bwd_result *br, int tensor, int64_t n,
                          const int64_t *vecs, const int32_t *d0, const double *kv, orc_cmp_part *out,
                          fa_error *err) {
    orc_ctx c;
    orc_seqs sq;
    cmp_seq sv;
    const cmp_seq *svp;
    fa_status st;
    memset(out, 0, sizeof *out);
    out->fail_e = out->ovf_e = out->worst_e = -1;
    if (fr ? (tensor < 0 || tensor > 1) : (!br || tensor < 2 || tensor > 4))
        return cmp_fail(err, FA_ERR_INVALID, "tensor", "tensor must be 0 (O) or 1 (LSE) of a forward result, 2-4 (dQ, dK, dV) of a backward result.");
    if ((st = cmp_ctx(fr ? &fr->args : NULL, fr ? NULL : &br->args, &c, &sq, &sv, &svp, err))) return st;
    orc_seqs_free(&sq);
    if (svp) return cmp_fail(err, FA_ERR_INVALID, "args", "a packed / paged problem: judge it with orc_compare_fwd / orc_compare_bwd.");
    const orc_block *blk = fr ? (tensor == 0 ? &fr->o : &fr->lse) : tensor == 2 ? &br->dq : tensor == 3 ? &br->dk : &br->dv;
    if (blk->baseline) return cmp_fail(err, FA_ERR_INVALID, "res", "a result with a naive baseline: judge it with orc_compare_fwd / orc_compare_bwd.");
    vec_kind kind = tensor == 0 ? V_O : tensor == 1 ? V_LSE : tensor == 2 ? V_DQ : V_DKV;
    int is_dv = tensor == 4, dkv = kind == V_DKV;
    int prec = fr ? fr->opt.mpfr_prec : br->opt.mpfr_prec;
    double nterms = dkv ? (double)(c.Sq * c.G + c.G) : (double)c.Sk + 1;
    out->dim = blk->dim;
    out->thr = orc_overflow_threshold(kind == V_LSE ? -1 : (int)c.dt);
    stats_init(&out->s, 0, dkv ? c.Hkv : c.Hq, dkv ? c.Sk : c.Sq);
    acc_stats a = {&out->s, malloc((size_t)(n * blk->dim > 0 ? n * blk->dim : 1) * sizeof(double)), 0, 0, out->thr, 0, 0, 0};
    double *mp = malloc((size_t)(blk->dim > 0 ? blk->dim : 1) * sizeof(double));
    if (!a.ratios || !mp) { free(a.ratios); free(mp); return cmp_fail(err, FA_ERR_NOMEM, "", "out of memory while comparing escalated vectors."); }
    orc_stats *s = &out->s;
    int hshift = __builtin_ctzll((unsigned long long)s->grid_hb), sshift = __builtin_ctzll((unsigned long long)s->grid_sb);
    for (int64_t k = 0; k < n; k++) {
        int64_t v = vecs[k];
        const orc_index *ix = &blk->index[v];
        int escalated = 0;
        a.vmax = -1;
        for (int64_t d = d0[k]; d < blk->dim; d++) {
            int64_t e = v * blk->dim + d;
            int64_t at[4] = {ix->b, ix->s, ix->h, blk->dim == 1 ? 0 : d};
            int had_fail = s->first_fail_at[0] >= 0, had_ovf = s->first_ovf_at[0] >= 0;
            double wr = s->worst_ratio;
            int had_worst = s->worst_at[0] >= 0;
            judge_esc(&a, blk, &c, NULL, kind, is_dv, ix, prec, nterms, e, d, kv[k * blk->dim + d], at, &escalated, mp);
            if (!had_fail && s->first_fail_at[0] >= 0) out->fail_e = e;
            if (!had_ovf && s->first_ovf_at[0] >= 0) out->ovf_e = e;
            if (s->worst_at[0] >= 0 && (!had_worst || s->worst_ratio > wr)) out->worst_e = e;
        }
        float *cell = &s->grid[ix->h >> hshift][ix->s >> sshift];
        if (a.vmax > *cell) *cell = (float)a.vmax;
    }
    free(mp);
    out->ratios = a.ratios;
    out->nr = a.nr;
    out->bias = a.bias;
    out->bias_zero = a.bias_zero;
    return FA_OK;
}

void orc_cmp_part_free(orc_cmp_part *p) {
    if (!p) return;
    free(p->ratios);
    p->ratios = NULL;
}

double orc_cmp_select(double *a, int64_t n, int64_t k) { return select_kth(a, n, k); }

void orc_stats_format(const orc_stats *s, const char *tensor, char *buf, size_t n) {
    if (!buf || n == 0) return;
    snprintf(buf, n,
             "%s: checked %lld failed %lld unchecked %lld escalated %lld | worst err/bound %.3g at "
             "(b=%lld,s=%lld,h=%lld,d=%lld) kernel %.9g ref %.9g bound %.3g | median %.3g | "
             "nan unexpected %lld missing %lld%s",
             tensor ? tensor : "?", (long long)s->checked, (long long)s->failed,
             (long long)s->unchecked, (long long)s->escalations, s->worst_ratio,
             (long long)s->worst_at[0], (long long)s->worst_at[1], (long long)s->worst_at[2],
             (long long)s->worst_at[3], s->worst_kernel, s->worst_ref, s->worst_bound,
             s->median_ratio, (long long)s->nan_unexpected, (long long)s->nan_missing,
             s->overflow_inf ? " (overflow to inf accepted: see overflow_inf)" : "");
    if (s->overflow_sensitive) {
        size_t len = strlen(buf);
        if (len < n)
            snprintf(buf + len, n - len, " | overflow-sensitive %lld (first at b=%lld,s=%lld,h=%lld,d=%lld)",
                     (long long)s->overflow_sensitive, (long long)s->first_ovf_at[0], (long long)s->first_ovf_at[1],
                     (long long)s->first_ovf_at[2], (long long)s->first_ovf_at[3]);
    }
    if (s->bias_n > 0) {
        size_t len = strlen(buf);
        if (len < n)
            snprintf(buf + len, n - len, " | mean signed err/bound %.3g (toward-zero oriented %.3g)",
                     s->bias_sum / (double)s->bias_n, s->bias_zero_sum / (double)s->bias_n);
    }
    if (s->has_baseline) {
        size_t len = strlen(buf);
        if (len < n)
            snprintf(buf + len, n - len, " | baseline: max err %.3g <= %.3g (naive %.3g, floor %.3g): %s",
                     s->max_err, s->baseline_limit, s->baseline_max_err, s->baseline_floor,
                     s->baseline_pass ? "pass" : "FAIL");
    }
}
