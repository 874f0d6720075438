/* cpu_bwd.c: the CPU backward pass, FlashAttention-2 style, deterministic.
 *
 * Three phases, each parallel over independent work units with OpenMP, each
 * unit summing in a fixed order (so dQ, dK, dV are bitwise reproducible for
 * any thread count; `deterministic` is honoured trivially):
 *   1. D_i = sum_d dO_i[d] * O_i[d]          fp32, d in order; unit (b, h)
 *   2. dK, dV for one key tile               unit (b, kv head, key tile):
 *        for each query head h of the group (in order), each row i (in order):
 *          s_c  = scale q_i.k_c (+mask)       (cpu_row_scores, visible keys only)
 *          p_c  = expf(s_c - LSE_i)           fp32, recomputed from the given LSE
 *          dV_c += rnd(p_c) dO_i              P rounded to the dtype, as in P.V
 *          dP_c = dO_i . v_c                  fp32
 *          dS_c = p_c (dP_c - D_i)            fp32 from the unrounded p (as FA2); NOT rounded
 *          dK_c += dS_c q_i                   fp32
 *        dK = rnd(scale * dK_acc), dV = rnd(dV_acc)
 *   3. dQ for one query tile                 unit (b, h, query tile):
 *        the same p, dS per key tile (in order), dQ_i += dS_c k_c,
 *        dQ = rnd(scale * dQ_acc)
 * A row whose LSE is -inf (no visible key) contributes nothing and gets dQ = 0.
 * rnd = round to fp16/bf16, nearest even.
 *
 * Contract v3 (cpu_seq gives each sequence's lengths and row addresses):
 *   softcap: s_c as in the forward (cpu_row_softcap keeps t_c = tanh), and
 *            dS_c = fp32(fp32(p_c (dP_c - D_i)) * fp32(1 - fp32(t_c t_c)))   (ds/d(scale q.k)
 *            = 1 - t^2), then dQ, dK get the softmax scale as without softcap;
 *   sinks:   p_c = expf(s_c - LSE_i) with the LSE that includes the sink (unchanged
 *            formulas); phase 1 also sums, per (b, h) in row order in fp32,
 *            e_i = expf(sink_h - LSE_i) * D_i, and dsinks[h] = -(sum over b in order);
 *   keys past Sk_b (allocated, unused) get dK = dV = 0 and are never read;
 *   paged:   phase 2 runs per kv head over every sequence in order and adds each tile's
 *            fp32 dK/dV into an fp32 page pool (a shared page sums every contribution,
 *            in (sequence, key) order), then the pools are rounded once; pages no
 *            sequence uses get 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

// ----------------------------------------------------------------------------
// plan shared by the phases

typedef struct {
    const fa_bwd_args *a;
    const fa_problem *p;
    int bf16;
    float scale;        /* the softmax scale (dQ, dK) */
    float score_scale;  /* the score scale: fp32(scale / softcap) with softcap, else scale */
    int64_t q_st[4], k_st[4], v_st[4], o_st[4], do_st[4], mask_st[4];
    float *delta;       /* [B][Hq][Sq] */
    float *sink_part;   /* [B][Hq] sum_i expf(sink_h - LSE_i) D_i, or NULL (no dsinks) */
    float *pool_dk, *pool_dv; /* paged: fp32 [num_pages][page_size][Hkv][D], else NULL */
} cpu_bwd_plan;

typedef struct {
    float *kt, *vt; /* [D][CPU_TILE_K] transposed key / value tile */
    float *k;       /* [CPU_TILE_K][Dqk] key tile row-major (dQ phase) */
    float *acc_a;   /* dK acc [TILE_K][Dqk] (phase 2) or dQ acc [TILE_Q][Dqk] (phase 3) */
    float *acc_b;   /* dV acc [TILE_K][Dv] */
    float *q, *dout;/* one row each (phase 2) or a tile (phase 3): [TILE_Q][D] */
    float *s, *dp;  /* [CPU_TILE_K] */
    float *t;       /* [CPU_TILE_K] tanh of the capped scores (softcap) */
    unsigned char *vis;
} cpu_bwd_scratch;

static size_t cpu_bwd_scratch_floats(int64_t dqk, int64_t dv) {
    return (size_t)(dqk * CPU_TILE_K + dv * CPU_TILE_K + CPU_TILE_K * dqk +
                    (CPU_TILE_K > CPU_TILE_Q ? CPU_TILE_K : CPU_TILE_Q) * dqk + CPU_TILE_K * dv +
                    CPU_TILE_Q * dqk + CPU_TILE_Q * dv + 4 * CPU_TILE_K);
}

static cpu_bwd_scratch cpu_bwd_scratch_at(float *base, int64_t dqk, int64_t dv) {
    cpu_bwd_scratch s;
    s.kt = base; base += dqk * CPU_TILE_K;
    s.vt = base; base += dv * CPU_TILE_K;
    s.k = base; base += CPU_TILE_K * dqk;
    s.acc_a = base; base += (CPU_TILE_K > CPU_TILE_Q ? CPU_TILE_K : CPU_TILE_Q) * dqk;
    s.acc_b = base; base += CPU_TILE_K * dv;
    s.q = base; base += CPU_TILE_Q * dqk;
    s.dout = base; base += CPU_TILE_Q * dv;
    s.s = base; base += CPU_TILE_K;
    s.dp = base; base += CPU_TILE_K;
    s.t = base; base += CPU_TILE_K;
    s.vis = (unsigned char *)base;
    return s;
}

static float cpu_bwd_lse(const cpu_bwd_plan *pl, const cpu_seq *s, int64_t h, int64_t i) {
    const fa_lse *lse = &pl->a->lse;
    return lse->ptr[cpu_lse_off(s, lse->stride, i, h)];
}

static const float *cpu_bwd_mask_row(const cpu_bwd_plan *pl, int64_t b, int64_t h, int64_t i) {
    if (pl->a->mask.ptr == NULL) return NULL;
    return pl->a->mask.ptr + b * pl->mask_st[0] + h * pl->mask_st[1] + i * pl->mask_st[2];
}

/* p_c and dS_c of row i against the loaded key tile (kt, vt); returns 0 when
 * the row sees no key of the tile. p_rounded[c] gets rnd(p_c) (for dV). */
static int cpu_bwd_row(const cpu_bwd_plan *pl, cpu_bwd_scratch *w, const cpu_seq *sq, int64_t b,
                       int64_t h, int64_t i, int64_t j0, int64_t nk, const float *q, const float *dout,
                       float lse, float delta, float *ds, float *p_rounded) {
    const fa_problem *p = pl->p;
    cpu_row_range rr = cpu_visible_range(p, sq, i);
    if (rr.lo > rr.hi || j0 > rr.hi || j0 + nk - 1 < rr.lo) return 0;
    cpu_row_scores(q, w->kt, p->head_dim_qk, nk, pl->score_scale, w->s);
    cpu_row_softcap(p->softcap, nk, w->s, w->t);
    if (!cpu_row_visibility(rr, j0, nk, cpu_bwd_mask_row(pl, b, h, i), pl->mask_st[3], w->s, w->vis))
        return 0;
    /* dP_c = dO_i . v_c, d in order (the same loop shape as the scores) */
    for (int64_t c = 0; c < nk; c++) w->dp[c] = 0.0f;
    for (int64_t d = 0; d < p->head_dim_v; d++) {
        const float g = dout[d];
        const float *vd = w->vt + d * CPU_TILE_K;
        for (int64_t c = 0; c < nk; c++) w->dp[c] += g * vd[c];
    }
    for (int64_t c = 0; c < nk; c++) {
        if (!w->vis[c]) { ds[c] = 0.0f; if (p_rounded) p_rounded[c] = 0.0f; continue; }
        const float pc = expf(w->s[c] - lse);
        if (p_rounded) p_rounded[c] = fa_cpu_round_to(pc, pl->bf16);
        ds[c] = pc * (w->dp[c] - delta);
        /* softcap: chain rule through s = cap tanh(u); the mutant drops the factor */
        if (p->softcap > 0.0f && !cpu_mut(CPU_MUT_SOFTCAP_NO_DERIVATIVE))
            ds[c] *= 1.0f - w->t[c] * w->t[c];
    }
    return 1;
}

// ----------------------------------------------------------------------------
// phase 1: D_i = dO_i . O_i

static void cpu_bwd_delta(const cpu_bwd_plan *pl, int64_t b, int64_t h) {
    const fa_problem *p = pl->p;
    const uint16_t *o = pl->a->o.ptr, *dout = pl->a->dout.ptr;
    const int use_dout_twice = cpu_mut(CPU_MUT_DELTA_FROM_DOUT_SQ);
    const cpu_seq seq = cpu_seq_of(p, &pl->a->varlen, &pl->a->paged, b);
    const float sink = pl->sink_part ? pl->a->sinks[h] : 0.0f;
    float sink_sum = 0.0f;
    for (int64_t i = 0; i < seq.sq; i++) {
        const uint16_t *orow = o + cpu_q_off(&seq, pl->o_st, i, h);
        const uint16_t *grow = dout + cpu_q_off(&seq, pl->do_st, i, h);
        float sum = 0.0f;
        for (int64_t d = 0; d < p->head_dim_v; d++) {
            const float g = fa_cpu_to_f32(grow[d * pl->do_st[3]], pl->bf16);
            const float x = use_dout_twice ? g : fa_cpu_to_f32(orow[d * pl->o_st[3]], pl->bf16);
            sum += g * x;
        }
        pl->delta[(b * p->heads_q + h) * p->seqlen_q + i] = sum;
        if (pl->sink_part) {
            const float lse = cpu_bwd_lse(pl, &seq, h, i);
            if (lse != -INFINITY) sink_sum += expf(sink - lse) * sum;
        }
    }
    if (pl->sink_part) pl->sink_part[b * p->heads_q + h] = sink_sum;
}

// ----------------------------------------------------------------------------
// phase 2: dK, dV of one key tile, summed over the GQA group

static int64_t cpu_clamp_tile(int64_t len, int64_t j0) {
    return len - j0 <= 0 ? 0 : (len - j0 < CPU_TILE_K ? len - j0 : CPU_TILE_K);
}

/* dK, dV (fp32, unscaled) of keys j0 .. j0+nk-1 of sequence b, kv head hk, into acc_a / acc_b;
 * returns nk (0: no key of this tile is used). */
static int64_t cpu_bwd_dkdv_tile(const cpu_bwd_plan *pl, const cpu_seq *seq, int64_t b, int64_t hk,
                                 int64_t j0, cpu_bwd_scratch *w) {
    const fa_problem *p = pl->p;
    const fa_bwd_args *a = pl->a;
    const int64_t Dqk = p->head_dim_qk, Dv = p->head_dim_v;
    const int64_t nk = cpu_clamp_tile(seq->sk, j0);
    float *dk_acc = w->acc_a, *dv_acc = w->acc_b;
    float ds[CPU_TILE_K], pr[CPU_TILE_K];
    if (nk == 0) return 0;

    cpu_load_rows(a->k.ptr, pl->k_st, seq, 1, hk, j0, nk, Dqk, pl->bf16, w->kt, CPU_TILE_K, 1);
    cpu_load_rows(a->v.ptr, pl->v_st, seq, 1, hk, j0, nk, Dv, pl->bf16, w->vt, CPU_TILE_K, 1);
    memset(dk_acc, 0, sizeof(float) * (size_t)(nk * Dqk));
    memset(dv_acc, 0, sizeof(float) * (size_t)(nk * Dv));

    /* mutant dk_rows_at_dv_pitch: the dK accumulator's rows are Dv floats apart (a tile sized by
     * the value head dim); with Dqk > Dv neighbouring rows overlap (inside acc_a: (nk-1) Dv + Dqk
     * <= nk Dqk), the store reads them at the right pitch */
    const int64_t dk_pitch = cpu_mut(CPU_MUT_DK_ACC_DV_PITCH) && Dv < Dqk ? Dv : Dqk;
    for (int64_t h = 0; h < p->heads_q; h++) {
        if (cpu_kv_head(p, h) != hk) continue;
        /* mutant dv_gqa_not_summed: each head of the group overwrites dV */
        if (cpu_mut(CPU_MUT_DV_GQA_NOT_SUMMED)) memset(dv_acc, 0, sizeof(float) * (size_t)(nk * Dv));
        for (int64_t i = 0; i < seq->sq; i++) {
            const float lse = cpu_bwd_lse(pl, seq, h, i);
            if (lse == -INFINITY) continue; /* no visible key: no contribution */
            cpu_row_range rr = cpu_visible_range(p, seq, i);
            if (rr.lo > rr.hi || j0 > rr.hi || j0 + nk - 1 < rr.lo) continue;
            cpu_load_rows(a->q.ptr, pl->q_st, seq, 0, h, i, 1, Dqk, pl->bf16, w->q, Dqk, 0);
            cpu_load_rows(a->dout.ptr, pl->do_st, seq, 0, h, i, 1, Dv, pl->bf16, w->dout, Dv, 0);
            const float delta = pl->delta[(b * p->heads_q + h) * p->seqlen_q + i];
            if (!cpu_bwd_row(pl, w, seq, b, h, i, j0, nk, w->q, w->dout, lse, delta, ds, pr)) continue;
            for (int64_t c = 0; c < nk; c++) {
                if (!w->vis[c]) continue;
                float *dvc = dv_acc + c * Dv, *dkc = dk_acc + c * dk_pitch;
                for (int64_t d = 0; d < Dv; d++) dvc[d] += pr[c] * w->dout[d];
                for (int64_t d = 0; d < Dqk; d++) dkc[d] += ds[c] * w->q[d];
            }
        }
    }

    return nk;
}

/* Dense or packed K: the unit (b, kv head, key tile) owns its dK, dV rows; keys past Sk_b
 * (allocated but unused) are written as 0. */
static void cpu_bwd_dkdv_unit(const cpu_bwd_plan *pl, int64_t b, int64_t hk, int64_t j0,
                              cpu_bwd_scratch *w) {
    const fa_problem *p = pl->p;
    const fa_bwd_args *a = pl->a;
    const int64_t Dqk = p->head_dim_qk, Dv = p->head_dim_v;
    const cpu_seq seq = cpu_seq_of(p, &a->varlen, &a->paged, b);
    const int64_t n_alloc = cpu_clamp_tile(seq.sk_alloc, j0);
    if (n_alloc == 0) return;
    const int64_t nk = cpu_bwd_dkdv_tile(pl, &seq, b, hk, j0, w);
    const float *dk_acc = w->acc_a, *dv_acc = w->acc_b;
    uint16_t *dk = a->dk.ptr, *dv = a->dv.ptr;
    const int64_t *kst = a->dk.stride, *vst = a->dv.stride;
    for (int64_t c = 0; c < n_alloc; c++) {
        const int64_t j = j0 + c;
        uint16_t *dkr = dk + cpu_k_off(&seq, kst, j, hk);
        uint16_t *dvr = dv + cpu_k_off(&seq, vst, j, hk);
        for (int64_t d = 0; d < Dqk; d++)
            dkr[d * kst[3]] = c < nk ? fa_cpu_from_f32(pl->scale * dk_acc[c * Dqk + d], pl->bf16) : 0;
        for (int64_t d = 0; d < Dv; d++)
            dvr[d * vst[3]] = c < nk ? fa_cpu_from_f32(dv_acc[c * Dv + d], pl->bf16) : 0;
    }
}

/* Paged K: kv head hk over every sequence in order, each tile's fp32 dK, dV added into the
 * fp32 pools at the pages the table maps the keys to (fp32 additions, (b, key) order). */
static void cpu_bwd_dkdv_paged(const cpu_bwd_plan *pl, int64_t hk, cpu_bwd_scratch *w) {
    const fa_problem *p = pl->p;
    const int64_t Dqk = p->head_dim_qk, Dv = p->head_dim_v;
    for (int64_t b = 0; b < p->batch; b++) {
        const cpu_seq seq = cpu_seq_of(p, &pl->a->varlen, &pl->a->paged, b);
        for (int64_t j0 = 0; j0 < seq.sk; j0 += CPU_TILE_K) {
            const int64_t nk = cpu_bwd_dkdv_tile(pl, &seq, b, hk, j0, w);
            for (int64_t c = 0; c < nk; c++) {
                const int64_t j = j0 + c;
                const int64_t page = cpu_k_off(&seq, (const int64_t[4]){1, 0, 0, 0}, j, 0);
                const int64_t slot = (page * p->page_size + j % p->page_size) * p->heads_kv + hk;
                float *pk = pl->pool_dk + slot * Dqk, *pv = pl->pool_dv + slot * Dv;
                for (int64_t d = 0; d < Dqk; d++) pk[d] += w->acc_a[c * Dqk + d];
                for (int64_t d = 0; d < Dv; d++) pv[d] += w->acc_b[c * Dv + d];
            }
        }
    }
}

/* Paged: round the fp32 pools of one page into dK, dV (scale on dK as in the dense path). */
static void cpu_bwd_store_page(const cpu_bwd_plan *pl, int64_t page) {
    const fa_problem *p = pl->p;
    const fa_bwd_args *a = pl->a;
    const int64_t Dqk = p->head_dim_qk, Dv = p->head_dim_v;
    uint16_t *dk = a->dk.ptr, *dv = a->dv.ptr;
    const int64_t *kst = a->dk.stride, *vst = a->dv.stride;
    for (int64_t s = 0; s < p->page_size; s++)
        for (int64_t hk = 0; hk < p->heads_kv; hk++) {
            const int64_t slot = (page * p->page_size + s) * p->heads_kv + hk;
            uint16_t *dkr = dk + page * kst[0] + s * kst[1] + hk * kst[2];
            uint16_t *dvr = dv + page * vst[0] + s * vst[1] + hk * vst[2];
            for (int64_t d = 0; d < Dqk; d++)
                dkr[d * kst[3]] = fa_cpu_from_f32(pl->scale * pl->pool_dk[slot * Dqk + d], pl->bf16);
            for (int64_t d = 0; d < Dv; d++)
                dvr[d * vst[3]] = fa_cpu_from_f32(pl->pool_dv[slot * Dv + d], pl->bf16);
        }
}

// ----------------------------------------------------------------------------
// phase 3: dQ of one query tile

static unsigned cpu_bwd_call_counter; /* only the dq_nondeterministic_order mutant reads it */

static void cpu_bwd_dq_unit(const cpu_bwd_plan *pl, int64_t b, int64_t h, int64_t i0,
                            unsigned call_no, cpu_bwd_scratch *w) {
    const fa_problem *p = pl->p;
    const fa_bwd_args *a = pl->a;
    const cpu_seq seq = cpu_seq_of(p, &a->varlen, &a->paged, b);
    if (i0 >= seq.sq) return;
    const int64_t Dqk = p->head_dim_qk, Dv = p->head_dim_v, Sk = seq.sk;
    const int64_t nq = seq.sq - i0 < CPU_TILE_Q ? seq.sq - i0 : CPU_TILE_Q;
    const int64_t hk = cpu_kv_head(p, h);
    float *dq_acc = w->acc_a;
    float ds[CPU_TILE_K];
    float lse[CPU_TILE_Q];

    memset(dq_acc, 0, sizeof(float) * (size_t)(nq * Dqk));
    cpu_load_rows(a->q.ptr, pl->q_st, &seq, 0, h, i0, nq, Dqk, pl->bf16, w->q, Dqk, 0);
    cpu_load_rows(a->dout.ptr, pl->do_st, &seq, 0, h, i0, nq, Dv, pl->bf16, w->dout, Dv, 0);
    for (int64_t r = 0; r < nq; r++) lse[r] = cpu_bwd_lse(pl, &seq, h, i0 + r);

    const int64_t n_kt = (Sk + CPU_TILE_K - 1) / CPU_TILE_K;
    /* mutant dq_nondeterministic_order: the sum over key tiles starts at a
     * tile that depends on a per-call counter (as atomics would reorder it) */
    const int64_t start = (cpu_mut(CPU_MUT_DQ_NONDETERMINISTIC) && n_kt > 0) ? call_no % n_kt : 0;
    for (int64_t t = 0; t < n_kt; t++) {
        const int64_t kt = (start + t) % n_kt;
        const int64_t j0 = kt * CPU_TILE_K;
        const int64_t nk = Sk - j0 < CPU_TILE_K ? Sk - j0 : CPU_TILE_K;
        /* mutant dq_tail_block_skipped: a partial last key tile is dropped */
        if (cpu_mut(CPU_MUT_DQ_TAIL_SKIPPED) && kt == n_kt - 1 && nk < CPU_TILE_K) continue;
        int loaded = 0;
        for (int64_t r = 0; r < nq; r++) {
            const int64_t i = i0 + r;
            if (lse[r] == -INFINITY) continue;
            cpu_row_range rr = cpu_visible_range(p, &seq, i);
            if (rr.lo > rr.hi || j0 > rr.hi || j0 + nk - 1 < rr.lo) continue;
            if (!loaded) {
                cpu_load_rows(a->k.ptr, pl->k_st, &seq, 1, hk, j0, nk, Dqk, pl->bf16, w->kt, CPU_TILE_K, 1);
                cpu_load_rows(a->v.ptr, pl->v_st, &seq, 1, hk, j0, nk, Dv, pl->bf16, w->vt, CPU_TILE_K, 1);
                cpu_load_rows(a->k.ptr, pl->k_st, &seq, 1, hk, j0, nk, Dqk, pl->bf16, w->k, Dqk, 0);
                loaded = 1;
            }
            const float delta = pl->delta[(b * p->heads_q + h) * p->seqlen_q + i];
            if (!cpu_bwd_row(pl, w, &seq, b, h, i, j0, nk, w->q + r * Dqk, w->dout + r * Dv, lse[r], delta,
                             ds, NULL))
                continue;
            float *dqr = dq_acc + r * Dqk;
            for (int64_t c = 0; c < nk; c++) {
                if (!w->vis[c]) continue;
                const float *kc = w->k + c * Dqk;
                for (int64_t d = 0; d < Dqk; d++) dqr[d] += ds[c] * kc[d];
            }
        }
    }

    uint16_t *dq = a->dq.ptr;
    const int64_t *st = a->dq.stride;
    for (int64_t r = 0; r < nq; r++) {
        uint16_t *row = dq + cpu_q_off(&seq, st, i0 + r, h);
        for (int64_t d = 0; d < Dqk; d++)
            row[d * st[3]] = fa_cpu_from_f32(pl->scale * dq_acc[r * Dqk + d], pl->bf16);
    }
}

// ----------------------------------------------------------------------------
// entry point

fa_status cpu_backward(const fa_bwd_args *a, fa_error *err) { return cpu_backward_mode(a, 0, err); }

fa_status cpu_backward_mode(const fa_bwd_args *a, int ftz, fa_error *err) {
    fa_status st = cpu_call_start(fa_validate_bwd(a, &cpu_limits, err), ftz, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    const int paged = p->page_size >= 1;
    if (p->batch == 0 && !paged) {
        if (p->has_sinks && a->dsinks)
            for (int64_t h = 0; h < p->heads_q; h++) a->dsinks[h] = 0.0f;
        return FA_OK;
    }

    cpu_bwd_plan pl;
    pl.a = a;
    pl.p = p;
    pl.bf16 = p->dtype == FA_BF16;
    pl.scale = cpu_softmax_scale(p);
    pl.score_scale = cpu_softcap_scale(pl.scale, p->softcap);
    const int dense_q =
        cpu_qkv_strides(p, &a->varlen, &a->q, &a->k, &a->v, &a->mask, pl.q_st, pl.k_st, pl.v_st, pl.mask_st);
    const int64_t odim[4] = {p->batch, p->seqlen_q, p->heads_q, p->head_dim_v};
    cpu_input_strides(&a->o, odim, dense_q, pl.o_st);
    cpu_input_strides(&a->dout, odim, dense_q, pl.do_st);

    const int nthreads = cpu_max_threads();
    const size_t per_thread = cpu_bwd_scratch_floats(p->head_dim_qk, p->head_dim_v);
    const size_t n_delta = (size_t)(p->batch * p->heads_q * p->seqlen_q);
    const size_t n_sink = (p->has_sinks && a->dsinks) ? (size_t)(p->batch * p->heads_q) : 0;
    const size_t n_pool = paged ? (size_t)(a->paged.num_pages * p->page_size * p->heads_kv) : 0;
    const size_t n_floats = per_thread * (size_t)nthreads + n_delta + n_sink +
                            n_pool * (size_t)(p->head_dim_qk + p->head_dim_v) + 1;
    float *scratch = malloc(sizeof(float) * n_floats);
    if (scratch == NULL)
        return fa_fail(err, FA_ERR_NOMEM, "", "cpu backward: cannot allocate scratch memory.");
    pl.delta = scratch + per_thread * (size_t)nthreads;
    pl.sink_part = n_sink ? pl.delta + n_delta : NULL;
    pl.pool_dk = pl.pool_dv = NULL;
    if (paged) {
        pl.pool_dk = pl.delta + n_delta + n_sink;
        pl.pool_dv = pl.pool_dk + n_pool * (size_t)p->head_dim_qk;
        memset(pl.pool_dk, 0, sizeof(float) * n_pool * (size_t)(p->head_dim_qk + p->head_dim_v));
    }
    const unsigned call_no = __atomic_fetch_add(&cpu_bwd_call_counter, 1u, __ATOMIC_RELAXED);

    const int64_t bh = p->batch * p->heads_q;
#pragma omp parallel num_threads(nthreads)
    {
        const unsigned csr = cpu_ftz_enter(ftz); /* every thread of the team, restored below */
        const int tid = cpu_thread_id();
        cpu_bwd_scratch w = cpu_bwd_scratch_at(scratch + per_thread * (size_t)tid, p->head_dim_qk,
                                               p->head_dim_v);
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < bh; u++) cpu_bwd_delta(&pl, u / p->heads_q, u % p->heads_q);
        /* implicit barrier: D complete */
        if (paged) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t hk = 0; hk < p->heads_kv; hk++) cpu_bwd_dkdv_paged(&pl, hk, &w);
            /* implicit barrier: the pools are complete */
#pragma omp for schedule(static) nowait
            for (int64_t page = 0; page < a->paged.num_pages; page++) cpu_bwd_store_page(&pl, page);
        } else {
            const int64_t n_kt = (p->seqlen_k + CPU_TILE_K - 1) / CPU_TILE_K;
            const int64_t units_kv = p->batch * p->heads_kv * n_kt;
#pragma omp for schedule(dynamic, 1) nowait
            for (int64_t u = 0; u < units_kv; u++) {
                const int64_t kt = u % n_kt, bk = u / n_kt;
                cpu_bwd_dkdv_unit(&pl, bk / p->heads_kv, bk % p->heads_kv, kt * CPU_TILE_K, &w);
            }
        }
        const int64_t n_qt = (p->seqlen_q + CPU_TILE_Q - 1) / CPU_TILE_Q;
        const int64_t units_q = bh * n_qt;
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units_q; u++) {
            const int64_t qt = u % n_qt, bhq = u / n_qt;
            cpu_bwd_dq_unit(&pl, bhq / p->heads_q, bhq % p->heads_q, qt * CPU_TILE_Q, call_no, &w);
        }
        cpu_ftz_leave(ftz, csr);
    }
    if (pl.sink_part) { /* dsinks[h] = -sum_b part[b][h], b in order (fp32) */
        for (int64_t h = 0; h < p->heads_q; h++) {
            float sum = 0.0f;
            for (int64_t b = 0; b < p->batch; b++) sum += pl.sink_part[b * p->heads_q + h];
            a->dsinks[h] = cpu_mut(CPU_MUT_DSINK_SIGN) ? sum : 0.0f - sum;
        }
    }
    free(scratch);
    return FA_OK;
}
