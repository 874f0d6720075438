/* cpu_fwd.c: the CPU forward pass, written as the flash algorithm.
 *
 * Work unit: (batch b, query head h, query tile of CPU_TILE_Q rows). Units are
 * independent (each writes its own O rows and LSE entries), run in parallel
 * with OpenMP, and each runs in a fixed order, so results are bitwise
 * reproducible whatever the thread count.
 *
 * Per unit, for each key tile of CPU_TILE_K keys (tiles no row can see are
 * skipped), for each row i of the query tile (all fp32):
 *   s_c    = scale * q_i . k_c (+ mask)         visible keys only (cpu_row_scores)
 *   m_new  = max(m, max_c s_c)                  running max (guard: -inf stays skipped)
 *   alpha  = expf(m - m_new)                    rescale of earlier tiles
 *   p_c    = expf(s_c - m_new)                  fp32 (glibc expf, < 1 ulp)
 *   l      = alpha * l + sum_c p_c              row sum of the UNROUNDED p (as FA2)
 *   acc    = alpha * acc + sum_c rnd(p_c) v_c   rnd = round to fp16/bf16 (RNE), fp32 FMA-free sums
 * then O_i = rnd(acc / l) (fp32 division, then RNE to the dtype), LSE_i =
 * m + logf(l) (natural log, fp32). A row with no visible key keeps l = 0:
 * O_i = 0, LSE_i = -inf; (-inf) - (-inf) is never evaluated.
 *
 * Contract v3: a unit works on one sequence (cpu_seq: Sq_b, Sk_b, packed row offsets or
 * the block-table row; query tiles past Sq_b do nothing, keys past Sk_b are never read).
 * Softcap: the scores are s_c = fp32(cap * tanhf(fp32(q_i.k_c) * fp32(scale / cap)))
 * (cpu_row_softcap), then the mask. Sinks: the running max and sum start at m = sink_h,
 * l = 1 (the sink's own term exp(sink_h - m)), so the sink joins the denominator and
 * the LSE through the same rescales as any key, and a row with no visible key ends with
 * O = 0, LSE = sink_h + logf(1) = sink_h.
 *
 * Split-KV decode (cpu_fwd_splits): a sequence with Sq_b <= 16 and Sk_b > 192 has its key
 * tiles cut into splits of consecutive tiles; each split runs the loop above from m = -inf,
 * l = 0, acc = 0 (the first split from the sink's m, l), and the partials are combined by
 * one more rescale each (cpu_fwd_combine, the CUDA decode combine's arithmetic), then the
 * same epilogue. The splits of a row run in order inside its unit: this is the decode
 * algorithm's arithmetic (partials and combine), not its schedule. Error model (BOUNDS.md
 * 3.1, 3.3): a key in tile t of a split covering tiles a..e is multiplied by the alphas of
 * tiles t+1..e and by its split's combine alpha, at most e - a + 1 <= n_kt factors, and the
 * sink by the e - a + 1 alphas of split 0 plus its combine alpha, at most n_kt when there
 * are >= 2 splits; the exponents telescope as before (m_first <= ... <= m_z <= M, every m a
 * computed score or the sink); a key's term goes through its split's additions and the
 * combine's additions over the splits that saw a visible key (an empty split adds an exact
 * 0), at most n visible keys in all. So R and acc(n+R) of the unsplit loop still bound it:
 * the profile (cpu_backend.c, max_rescales = 17 per 1000 keys >= one per 64-key tile) is
 * unchanged. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

// ----------------------------------------------------------------------------
// per-thread scratch

/* Split-KV (decode, cpu_fwd_splits): rows per decode unit, smallest split, most splits. */
#define CPU_DECODE_MAX_SQ 16
#define CPU_SPLIT_MIN_TILES 2
#define CPU_SPLIT_MAX 16

typedef struct {
    float *q;     /* [CPU_TILE_Q][Dqk]  query tile, row-major */
    float *kt;    /* [Dqk][CPU_TILE_K]  key tile, transposed */
    float *v;     /* [CPU_TILE_K][Dv]   value tile, row-major */
    float *acc;   /* [CPU_TILE_Q][Dv]   unnormalized output */
    float *s;     /* [CPU_TILE_K]       scores of one row */
    float *p;     /* [CPU_TILE_K]       rounded probabilities of one row */
    float *part_m, *part_l; /* [CPU_SPLIT_MAX][CPU_DECODE_MAX_SQ]      split-KV partials */
    float *part_acc;        /* [CPU_SPLIT_MAX][CPU_DECODE_MAX_SQ][Dv] */
    unsigned char *vis; /* [CPU_TILE_K] */
} cpu_fwd_scratch;

#define CPU_PARTS (CPU_SPLIT_MAX * CPU_DECODE_MAX_SQ)

static size_t cpu_fwd_scratch_floats(int64_t dqk, int64_t dv) {
    return (size_t)(CPU_TILE_Q * dqk + dqk * CPU_TILE_K + CPU_TILE_K * dv + CPU_TILE_Q * dv +
                    2 * CPU_TILE_K + CPU_PARTS * (2 + dv) + CPU_TILE_K /* vis, generously as floats */);
}

static cpu_fwd_scratch cpu_fwd_scratch_at(float *base, int64_t dqk, int64_t dv) {
    cpu_fwd_scratch s;
    s.q = base; base += CPU_TILE_Q * dqk;
    s.kt = base; base += dqk * CPU_TILE_K;
    s.v = base; base += CPU_TILE_K * dv;
    s.acc = base; base += CPU_TILE_Q * dv;
    s.s = base; base += CPU_TILE_K;
    s.p = base; base += CPU_TILE_K;
    s.part_m = base; base += CPU_PARTS;
    s.part_l = base; base += CPU_PARTS;
    s.part_acc = base; base += CPU_PARTS * dv;
    s.vis = (unsigned char *)base;
    return s;
}

// ----------------------------------------------------------------------------
// one work unit

typedef struct {
    const fa_fwd_args *a;
    const fa_problem *p;
    int bf16;
    float scale;     /* the score scale: fp32(scale / softcap) with softcap, else the softmax scale */
    int64_t q_st[4], k_st[4], v_st[4], mask_st[4];
    int reverse_dots; /* mutant fwd_order_varies_at_scale: this call sums the dot products reversed */
} cpu_fwd_plan;

static unsigned cpu_fwd_call_counter; /* only the fwd_order_varies_at_scale mutant reads it */

/* The rows i0 .. i0+nq-1 of one unit (sequence seq, batch b, query head h, Q tile in w->q)
 * against key tiles kt_lo .. kt_hi-1: the online-softmax update of the running max m[r],
 * sum l[r] and unnormalized output acc[r * Dv + d] (the file comment's arithmetic). range[r]
 * is row r's visible range, key_lo .. key_hi the union of the rows' ranges. */
static void cpu_fwd_tiles(const cpu_fwd_plan *pl, const cpu_seq *seq, int64_t b, int64_t h, int64_t i0,
                          int64_t nq, const cpu_row_range *range, int64_t key_lo, int64_t key_hi, int64_t kt_lo,
                          int64_t kt_hi, float *m, float *l, float *acc_rows, cpu_fwd_scratch *w) {
    const fa_problem *p = pl->p;
    const fa_fwd_args *a = pl->a;
    const int64_t Dqk = p->head_dim_qk, Dv = p->head_dim_v, Sk = seq->sk;
    const int64_t hk = cpu_kv_head(p, h);
    const int mut_tail = cpu_mut(CPU_MUT_RAGGED_TAIL);
    const int mut_nan = cpu_mut(CPU_MUT_MASKED_ROW_NAN);
    const int mut_mul = cpu_mut(CPU_MUT_MASK_BY_MULTIPLY);
    const int mut_noshift = cpu_mut(CPU_MUT_P_NOT_SHIFTED);
    const int mut_norescale = cpu_mut(CPU_MUT_RESCALE_MISSING);
    const int mut_batch_order = (cpu_mut(CPU_MUT_BATCH_DEPENDENT_ORDER) && p->batch > 1) || pl->reverse_dots;

    for (int64_t kt = kt_lo; kt < kt_hi; kt++) {
        const int64_t j0 = kt * CPU_TILE_K;
        const int64_t nk_real = Sk - j0 < CPU_TILE_K ? Sk - j0 : CPU_TILE_K;
        /* mutant ragged_tail_unmasked: the tail tile runs full width */
        const int64_t nk = mut_tail ? CPU_TILE_K : nk_real;
        if (j0 > key_hi || j0 + nk - 1 < key_lo) continue; /* no row sees this tile */

        cpu_load_rows((const uint16_t *)a->k.ptr, pl->k_st, seq, 1, hk, j0, nk_real, Dqk, pl->bf16, w->kt,
                      CPU_TILE_K, 1);
        cpu_load_rows((const uint16_t *)a->v.ptr, pl->v_st, seq, 1, hk, j0, nk_real, Dv, pl->bf16, w->v,
                      Dv, 0);
        for (int64_t c = nk_real; c < nk; c++) { /* phantom keys: score 0, value of key Sk-1 */
            for (int64_t d = 0; d < Dqk; d++) w->kt[d * CPU_TILE_K + c] = 0.0f;
            memcpy(w->v + c * Dv, w->v + (nk_real - 1) * Dv, sizeof(float) * (size_t)Dv);
        }

        for (int64_t r = 0; r < nq; r++) {
            const int64_t i = i0 + r;
            cpu_row_range rr = range[r];
            if (mut_tail) rr.hi = rr.hi_unclamped;
            const float *mask_row = NULL;
            if (a->mask.ptr)
                mask_row = a->mask.ptr + b * pl->mask_st[0] + h * pl->mask_st[1] + i * pl->mask_st[2];
            if (mut_batch_order) { /* mutant: the dot products summed from the last component down */
                for (int64_t c = 0; c < nk; c++) w->s[c] = 0.0f;
                for (int64_t d = Dqk - 1; d >= 0; d--)
                    for (int64_t c = 0; c < nk; c++) w->s[c] += w->q[r * Dqk + d] * w->kt[d * CPU_TILE_K + c];
                for (int64_t c = 0; c < nk; c++) w->s[c] *= pl->scale;
            } else {
                cpu_row_scores(w->q + r * Dqk, w->kt, Dqk, nk, pl->scale, w->s);
            }
            if (p->softcap > 0.0f && cpu_mut(CPU_MUT_SOFTCAP_CAP_MISSING)) {
                /* mutant softcap_cap_not_reapplied: tanh(u), never multiplied back by the cap */
                for (int64_t c = 0; c < nk; c++) w->s[c] = tanhf(w->s[c]);
            } else {
                cpu_row_softcap(p->softcap, nk, w->s, NULL);
            }
            /* the mask exists only for real keys (phantom keys of the mutant get none) */
            int any = cpu_row_visibility(rr, j0, nk_real, mask_row, pl->mask_st[3], w->s, w->vis);
            for (int64_t c = nk_real; c < nk; c++) {
                w->vis[c] = (unsigned char)(j0 + c >= rr.lo && j0 + c <= rr.hi);
                any |= w->vis[c];
            }
            if (!any && !mut_nan) continue;

            float tile_max = -INFINITY;
            for (int64_t c = 0; c < nk; c++)
                if (w->vis[c] && w->s[c] > tile_max) tile_max = w->s[c];
            const float m_new = tile_max > m[r] ? tile_max : m[r];
            /* all visible scores -inf (or none visible): nothing to add. The
             * masked_row_inf_minus_inf mutant drops this guard. */
            if (m_new == -INFINITY && !mut_nan) continue;

            const float alpha = mut_noshift ? 1.0f : expf(m[r] - m_new);
            const float shift = mut_noshift ? 0.0f : m_new;
            float row_sum = 0.0f;
            for (int64_t c = 0; c < nk; c++) {
                if (w->vis[c]) {
                    const float pc = expf(w->s[c] - shift);
                    row_sum += pc;
                    w->p[c] = fa_cpu_round_to(pc, pl->bf16);
                } else if (mut_mul) { /* mutant: hidden key weighted by 0 instead of skipped */
                    const float pc = expf(w->s[c] - shift) * 0.0f;
                    row_sum += pc;
                    w->p[c] = fa_cpu_round_to(pc, pl->bf16);
                }
            }
            l[r] = alpha * l[r] + row_sum;
            float *acc = acc_rows + r * Dv;
            if (!mut_norescale)
                for (int64_t d = 0; d < Dv; d++) acc[d] *= alpha;
            for (int64_t c = 0; c < nk; c++) {
                if (!w->vis[c] && !mut_mul) continue;
                const float pc = w->p[c];
                const float *vc = w->v + c * Dv;
                for (int64_t d = 0; d < Dv; d++) acc[d] += pc * vc[d];
            }
            m[r] = m_new;
        }
    }
}

/* Split-KV (decode): how many splits a unit's key tiles go into, and tiles per split.
 * A sequence with Sq_b <= CPU_DECODE_MAX_SQ and at least 2 * CPU_SPLIT_MIN_TILES key tiles
 * (Sk_b > 192) is split into n = min(n_kt / CPU_SPLIT_MIN_TILES, CPU_SPLIT_MAX) splits of
 * ceil(n_kt / n) tiles (the last may have fewer; none is empty); anything else is 1 split.
 * Depends only on the sequence's own Sq_b and Sk_b, so a sequence's bits do not depend on
 * the batch it runs in. */
static int64_t cpu_fwd_splits(int64_t sq, int64_t n_kt, int64_t *tiles_per_split) {
    *tiles_per_split = n_kt;
    if (sq > CPU_DECODE_MAX_SQ || n_kt < 2 * CPU_SPLIT_MIN_TILES) return 1;
    int64_t n = n_kt / CPU_SPLIT_MIN_TILES;
    if (n > CPU_SPLIT_MAX) n = CPU_SPLIT_MAX;
    const int64_t tps = (n_kt + n - 1) / n;
    *tiles_per_split = tps;
    return (n_kt + tps - 1) / tps;
}

/* The combine of n_split partials (pm, pl_ [z * CPU_DECODE_MAX_SQ + r], pacc [(z *
 * CPU_DECODE_MAX_SQ + r) * Dv + d]) of rows 0 .. nq-1 into m, l, acc: for each row
 *   M = max_z m_z (exact), alpha_z = expf(m_z - M) (1 when M = -inf: every partial is empty),
 *   l = sum_z fp32(l_z alpha_z), acc_d = sum_z fp32(acc_zd alpha_z)   (fp32 RN, z = 0, 1, ...)
 * (the key loop's rescale, once per split, as the CUDA combine, fwd_host.cu). A split with
 * m_z = -inf has l_z = 0, acc_z = 0 and adds an exact 0. */
static void cpu_fwd_combine(int64_t n_split, int64_t nq, int64_t Dv, const float *pm, const float *pls,
                            const float *pacc, float *m, float *l, float *acc_rows) {
    /* mutant split_combine_drops_last: the loops stop one split early */
    const int64_t nz = cpu_mut(CPU_MUT_SPLIT_DROPS_LAST) ? n_split - 1 : n_split;
    for (int64_t r = 0; r < nq; r++) {
        float M = -INFINITY;
        for (int64_t z = 0; z < nz; z++) {
            const float mz = pm[z * CPU_DECODE_MAX_SQ + r];
            if (mz > M) M = mz;
        }
        float L = 0.0f, *acc = acc_rows + r * Dv;
        for (int64_t d = 0; d < Dv; d++) acc[d] = 0.0f;
        for (int64_t z = 0; z < nz; z++) {
            const int64_t zr = z * CPU_DECODE_MAX_SQ + r;
            const float alpha = M == -INFINITY ? 1.0f : expf(pm[zr] - M);
            L += pls[zr] * alpha;
            const float *az = pacc + zr * Dv;
            for (int64_t d = 0; d < Dv; d++) acc[d] += az[d] * alpha;
        }
        m[r] = M;
        l[r] = L;
    }
}

static void cpu_fwd_unit(const cpu_fwd_plan *pl, int64_t b, int64_t h, int64_t i0,
                         cpu_fwd_scratch *w) {
    const fa_problem *p = pl->p;
    const fa_fwd_args *a = pl->a;
    const cpu_seq seq = cpu_seq_of(p, &a->varlen, &a->paged, b);
    if (i0 >= seq.sq) return; /* a query tile past this sequence's end */
    const int64_t Dqk = p->head_dim_qk, Dv = p->head_dim_v, Sk = seq.sk;
    const int64_t nq = seq.sq - i0 < CPU_TILE_Q ? seq.sq - i0 : CPU_TILE_Q;
    const int mut_tail = cpu_mut(CPU_MUT_RAGGED_TAIL);
    const int mut_noshift = cpu_mut(CPU_MUT_P_NOT_SHIFTED);
    const int sinks = p->has_sinks && !cpu_mut(CPU_MUT_SINK_LEFT_OUT);
    const float sink = sinks ? a->sinks[h] : 0.0f;

    float m[CPU_TILE_Q], l[CPU_TILE_Q];
    cpu_row_range range[CPU_TILE_Q];
    int64_t key_lo = INT64_MAX, key_hi = -1; /* union of the rows' visible ranges */
    for (int64_t r = 0; r < nq; r++) {
        range[r] = cpu_visible_range(p, &seq, i0 + r);
        int64_t hi = mut_tail ? range[r].hi_unclamped : range[r].hi;
        if (range[r].lo <= hi) {
            if (range[r].lo < key_lo) key_lo = range[r].lo;
            if (hi > key_hi) key_hi = hi;
        }
    }
    cpu_load_rows((const uint16_t *)a->q.ptr, pl->q_st, &seq, 0, h, i0, nq, Dqk, pl->bf16, w->q, Dqk, 0);

    const int64_t n_kt = (Sk + CPU_TILE_K - 1) / CPU_TILE_K;
    int64_t tps;
    const int64_t n_split = cpu_fwd_splits(seq.sq, n_kt, &tps);
    /* the sink starts the running max and sum (m = sink, l = 1) of the first split only */
    for (int64_t z = 0; z < n_split; z++) {
        float *mz = n_split > 1 ? w->part_m + z * CPU_DECODE_MAX_SQ : m;
        float *lz = n_split > 1 ? w->part_l + z * CPU_DECODE_MAX_SQ : l;
        float *accz = n_split > 1 ? w->part_acc + z * CPU_DECODE_MAX_SQ * Dv : w->acc;
        for (int64_t r = 0; r < nq; r++) {
            mz[r] = sinks && z == 0 ? sink : -INFINITY;
            lz[r] = sinks && z == 0 ? 1.0f : 0.0f;
        }
        memset(accz, 0, sizeof(float) * (size_t)(nq * Dv));
        const int64_t kt_lo = z * tps, kt_hi = kt_lo + tps < n_kt ? kt_lo + tps : n_kt;
        cpu_fwd_tiles(pl, &seq, b, h, i0, nq, range, key_lo, key_hi, kt_lo, kt_hi, mz, lz, accz, w);
    }
    if (n_split > 1) cpu_fwd_combine(n_split, nq, Dv, w->part_m, w->part_l, w->part_acc, m, l, w->acc);

    /* epilogue: normalize, round, store O and LSE */
    uint16_t *o = (uint16_t *)a->o.ptr;
    const int64_t *ost = a->o.stride;
    for (int64_t r = 0; r < nq; r++) {
        const int64_t i = i0 + r;
        uint16_t *orow = o + cpu_q_off(&seq, ost, i, h);
        const float *acc = w->acc + r * Dv;
        float lse;
        if (l[r] == 0.0f) { /* no visible key (and no sink) */
            for (int64_t d = 0; d < Dv; d++) orow[d * ost[3]] = 0;
            lse = -INFINITY;
        } else {
            for (int64_t d = 0; d < Dv; d++) orow[d * ost[3]] = fa_cpu_from_f32(acc[d] / l[r], pl->bf16);
            const float shift = mut_noshift ? 0.0f : m[r];
            lse = shift + (cpu_mut(CPU_MUT_LSE_LOG2) ? log2f(l[r]) : logf(l[r]));
        }
        a->lse.ptr[cpu_lse_off(&seq, a->lse.stride, i, h)] = lse;
    }
}

// ----------------------------------------------------------------------------
// entry point

fa_status cpu_forward(const fa_fwd_args *a, fa_error *err) { return cpu_forward_mode(a, 0, err); }

fa_status cpu_forward_mode(const fa_fwd_args *a, int ftz, fa_error *err) {
    fa_status st = cpu_call_start(fa_validate_fwd(a, &cpu_limits, err), ftz, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    if (p->batch == 0 || p->seqlen_q == 0) return FA_OK;

    cpu_fwd_plan pl;
    pl.a = a;
    pl.p = p;
    pl.bf16 = p->dtype == FA_BF16;
    pl.scale = cpu_softcap_scale(cpu_softmax_scale(p), p->softcap);
    pl.reverse_dots = 0;
    if (cpu_mut(CPU_MUT_FWD_ORDER_AT_SCALE) && p->batch * p->heads_q * p->seqlen_q >= 4096)
        pl.reverse_dots = (int)(__atomic_fetch_add(&cpu_fwd_call_counter, 1u, __ATOMIC_RELAXED) & 1u);
    cpu_qkv_strides(p, &a->varlen, &a->q, &a->k, &a->v, &a->mask, pl.q_st, pl.k_st, pl.v_st, pl.mask_st);

    const int nthreads = cpu_max_threads();
    const size_t per_thread = cpu_fwd_scratch_floats(p->head_dim_qk, p->head_dim_v);
    float *scratch = malloc(sizeof(float) * per_thread * (size_t)nthreads);
    if (scratch == NULL)
        return fa_fail(err, FA_ERR_NOMEM, "", "cpu forward: cannot allocate %zu bytes of scratch.",
                       sizeof(float) * per_thread * (size_t)nthreads);

    const int64_t n_qt = (p->seqlen_q + CPU_TILE_Q - 1) / CPU_TILE_Q;
    const int64_t units = p->batch * p->heads_q * n_qt;
#pragma omp parallel num_threads(nthreads)
    {
        const unsigned csr = cpu_ftz_enter(ftz); /* every thread of the team, restored below */
        const int tid = cpu_thread_id();
        cpu_fwd_scratch w = cpu_fwd_scratch_at(scratch + per_thread * (size_t)tid, p->head_dim_qk,
                                               p->head_dim_v);
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) {
            const int64_t qt = u % n_qt, bh = u / n_qt;
            cpu_fwd_unit(&pl, bh / p->heads_q, bh % p->heads_q, qt * CPU_TILE_Q, &w);
        }
        cpu_ftz_leave(ftz, csr);
    }
    free(scratch);
    return FA_OK;
}
