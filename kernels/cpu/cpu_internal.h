/* cpu_internal.h: pieces shared by the CPU forward (cpu_fwd.c) and backward
 * (cpu_bwd.c): tile sizes, mutant ids, the visibility rule, GQA mapping,
 * effective strides and the score computation for one row against one key
 * tile. Not part of any public API. */
#ifndef FLASHCHECK_CPU_INTERNAL_H
#define FLASHCHECK_CPU_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "kernels/cpu/cpu_half.h"
#include "kernels/flash_api.h"

#define CPU_TILE_Q 64 /* query rows per work unit */
#define CPU_TILE_K 64 /* keys per tile of the online softmax */

// ----------------------------------------------------------------------------
// mutants (table and selection in cpu_mutants.c; ids are the public ids)

enum {
    CPU_MUT_NONE = 0,
    CPU_MUT_RESCALE_MISSING,
    CPU_MUT_CAUSAL_OFF_BY_ONE,
    CPU_MUT_CAUSAL_TOP_LEFT_FOR_BR,
    CPU_MUT_RAGGED_TAIL,
    CPU_MUT_STRIDES_FROM_SHAPE,
    CPU_MUT_GQA_MODULO,
    CPU_MUT_MASKED_ROW_NAN,
    CPU_MUT_MASK_BY_MULTIPLY,
    CPU_MUT_LSE_LOG2,
    CPU_MUT_P_NOT_SHIFTED,
    CPU_MUT_DQ_TAIL_SKIPPED,
    CPU_MUT_DQ_NONDETERMINISTIC,
    CPU_MUT_WINDOW_OFF_BY_ONE,
    CPU_MUT_DV_GQA_NOT_SUMMED,
    CPU_MUT_DELTA_FROM_DOUT_SQ,
    CPU_MUT_MASK_BH_STRIDE_IGNORED,
    CPU_MUT_BATCH_DEPENDENT_ORDER,
    CPU_MUT_FWD_ORDER_AT_SCALE,
    CPU_MUT_TABLE_STRIDE,          /* contract v3 */
    CPU_MUT_SOFTCAP_NO_DERIVATIVE,
    CPU_MUT_SINK_LEFT_OUT,
    CPU_MUT_VARLEN_PREV_OFFSET,
    CPU_MUT_SEQUSED_IGNORED,
    CPU_MUT_DSINK_SIGN,
    CPU_MUT_PAGES_CONTIGUOUS,
    CPU_MUT_SPLIT_DROPS_LAST,
    CPU_MUT_VARLEN_CAUSAL_MAX,
    CPU_MUT_SOFTCAP_CAP_MISSING,
    CPU_MUT_SCALE_FROM_DV,
    CPU_MUT_DK_ACC_DV_PITCH,
    CPU_MUT_COUNT
};

extern int cpu_mutant_selected; /* read-only outside cpu_mutants.c */
void cpu_mutant_init(void);     /* reads FLASHCHECK_CPU_MUTANT once */
static inline int cpu_mut(int id) { return cpu_mutant_selected == id; }

fa_status cpu_forward(const fa_fwd_args *args, fa_error *err);
fa_status cpu_backward(const fa_bwd_args *args, fa_error *err);
/* The same in flush-to-zero mode (cpu_ftz.h); ftz = 0 is cpu_forward / cpu_backward. */
fa_status cpu_forward_mode(const fa_fwd_args *args, int ftz, fa_error *err);
fa_status cpu_backward_mode(const fa_bwd_args *args, int ftz, fa_error *err);
extern const fa_limits cpu_limits;

// ----------------------------------------------------------------------------
// flush-to-zero mode (cpu_ftz.h): MXCSR FTZ (bit 15) and DAZ (bit 6), per thread

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define CPU_HAS_FTZ 1
/* Set FTZ and DAZ in the calling thread when on; returns the previous MXCSR. */
static inline unsigned cpu_ftz_enter(int on) {
    unsigned saved = _mm_getcsr();
    if (on) _mm_setcsr(saved | 0x8040u);
    return saved;
}
static inline void cpu_ftz_leave(int on, unsigned saved) {
    if (on) _mm_setcsr(saved);
}
#else
#define CPU_HAS_FTZ 0
static inline unsigned cpu_ftz_enter(int on) { (void)on; return 0; }
static inline void cpu_ftz_leave(int on, unsigned saved) { (void)on; (void)saved; }
#endif

// ----------------------------------------------------------------------------
// visibility: the keys query row i may see are lo <= j <= hi (inclusive),
// further thinned by -inf entries of the additive mask. hi_unclamped is hi
// before clamping to seqlen_k - 1 (only the ragged-tail mutant uses it).

typedef struct {
    int64_t lo, hi, hi_unclamped;
} cpu_row_range;

static inline int64_t cpu_sat_sub(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_sub_overflow(a, b, &r) ? INT64_MIN : r;
}
static inline int64_t cpu_sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

// ----------------------------------------------------------------------------
// one sequence of the batch (contract v3): its lengths and where its rows live
//
// Q-like rows (q, o, dout, dq) of row i: b_q*st[0] + (q_row0 + i)*st[1] (packed: b_q = 0,
// q_row0 = cu_q[b]; dense: b_q = b, q_row0 = 0); LSE (b, h, i): b_q*st[0] + h*st[1] +
// (q_row0 + i)*st[2]. K-like rows (k, v, dk, dv) of key j: through the table row when paged
// (page table[j / page_size], slot j % page_size), else b_k*st[0] + (k_row0 + j)*st[1].

typedef struct {
    int64_t sq, sk;        /* Sq_b, Sk_b (keys used) */
    int64_t sk_alloc;      /* keys allocated (>= sk): the cu_k span, seqlen_k, or sk when paged */
    int64_t b_q, q_row0;
    int64_t b_k, k_row0;
    const int32_t *table;  /* the sequence's block-table row when paged, else NULL */
    int64_t page_size, num_pages;
} cpu_seq;

static inline cpu_seq cpu_seq_of(const fa_problem *p, const fa_varlen *vl, const fa_paged *pg, int64_t b) {
    cpu_seq s;
    s.sq = p->seqlen_q; s.b_q = b; s.q_row0 = 0;
    if (vl->cu_seqlens_q) {
        s.sq = (int64_t)vl->cu_seqlens_q[b + 1] - vl->cu_seqlens_q[b];
        s.b_q = 0; s.q_row0 = vl->cu_seqlens_q[b];
    }
    s.sk_alloc = p->seqlen_k; s.b_k = b; s.k_row0 = 0; s.table = NULL; s.page_size = 0; s.num_pages = 0;
    if (vl->cu_seqlens_k) {
        s.sk_alloc = (int64_t)vl->cu_seqlens_k[b + 1] - vl->cu_seqlens_k[b];
        s.b_k = 0; s.k_row0 = vl->cu_seqlens_k[b];
        /* mutant varlen_prev_offset: sequence b > 0 reads its keys from the previous one's start */
        if (cpu_mut(CPU_MUT_VARLEN_PREV_OFFSET) && b > 0) s.k_row0 = vl->cu_seqlens_k[b - 1];
    }
    if (p->page_size >= 1) {
        s.page_size = p->page_size; s.num_pages = pg->num_pages;
        /* mutant block_table_stride: row b at b * max_pages_per_seq instead of b * table_stride */
        int64_t row_stride = cpu_mut(CPU_MUT_TABLE_STRIDE) ? pg->max_pages_per_seq : pg->table_stride;
        s.table = pg->block_table + b * row_stride;
        s.sk_alloc = pg->max_pages_per_seq * p->page_size;
    }
    s.sk = s.sk_alloc;
    if (p->page_size >= 1 && !vl->seqused_k) s.sk = p->seqlen_k;
    if (vl->seqused_k) {
        s.sk = vl->seqused_k[b];
        /* mutant seqused_k_ignored: the allocated keys (dense/packed), or the whole last page */
        if (cpu_mut(CPU_MUT_SEQUSED_IGNORED))
            s.sk = p->page_size >= 1 ? (s.sk + p->page_size - 1) / p->page_size * p->page_size : s.sk_alloc;
    }
    if (p->page_size >= 1) s.sk_alloc = s.sk;
    return s;
}

static inline int64_t cpu_q_off(const cpu_seq *s, const int64_t st[4], int64_t i, int64_t h) {
    return s->b_q * st[0] + (s->q_row0 + i) * st[1] + h * st[2];
}
static inline int64_t cpu_lse_off(const cpu_seq *s, const int64_t st[3], int64_t i, int64_t h) {
    return s->b_q * st[0] + h * st[1] + (s->q_row0 + i) * st[2];
}
static inline int64_t cpu_k_off(const cpu_seq *s, const int64_t st[4], int64_t j, int64_t h) {
    if (s->table) {
        /* mutant pages_assumed_contiguous: page table[0] + j / page_size */
        int64_t page = cpu_mut(CPU_MUT_PAGES_CONTIGUOUS) ? s->table[0] + j / s->page_size : s->table[j / s->page_size];
        if (page < 0 || page >= s->num_pages) /* only the table-stride mutant reads an unchecked */
            page = (page % s->num_pages + s->num_pages) % s->num_pages; /* entry: keep it in the pool */
        return page * st[0] + (j % s->page_size) * st[1] + h * st[2];
    }
    return s->b_k * st[0] + (s->k_row0 + j) * st[1] + h * st[2];
}

static inline cpu_row_range cpu_visible_range(const fa_problem *p, const cpu_seq *sq, int64_t i) {
    int bottom_right = p->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                       (p->causal == FA_CAUSAL_NONE && p->window_align == FA_ALIGN_BOTTOM_RIGHT);
    if (cpu_mut(CPU_MUT_CAUSAL_TOP_LEFT_FOR_BR)) bottom_right = 0;
    int64_t diag = bottom_right ? i + (sq->sk - sq->sq) : i;
    /* mutant varlen_causal_from_max_lengths: the batch's maxima align every sequence */
    if (bottom_right && cpu_mut(CPU_MUT_VARLEN_CAUSAL_MAX)) diag = i + (p->seqlen_k - p->seqlen_q);
    int64_t lo = 0, hi = INT64_MAX;
    if (p->causal != FA_CAUSAL_NONE) hi = cpu_mut(CPU_MUT_CAUSAL_OFF_BY_ONE) ? diag + 1 : diag;
    if (p->window_left >= 0) {
        int64_t wl = cpu_sat_sub(diag, p->window_left);
        if (cpu_mut(CPU_MUT_WINDOW_OFF_BY_ONE)) wl = cpu_sat_add(wl, 1);
        if (wl > lo) lo = wl;
    }
    if (p->window_right >= 0) {
        int64_t wr = cpu_sat_add(diag, p->window_right);
        if (wr < hi) hi = wr;
    }
    cpu_row_range r = {lo, hi < sq->sk - 1 ? hi : sq->sk - 1, hi};
    return r;
}

/* The softmax scale (fa_effective_scale); the scale_from_dv mutant takes the default
 * 1/sqrt(head_dim_v) (rounded as fa_effective_scale rounds) instead of 1/sqrt(head_dim_qk). */
static inline float cpu_softmax_scale(const fa_problem *p) {
    if (cpu_mut(CPU_MUT_SCALE_FROM_DV) && p->softmax_scale == 0.0f && p->head_dim_v > 0)
        return (float)(1.0 / sqrt((double)p->head_dim_v));
    return fa_effective_scale(p);
}

/* Query head h reads kv head h / g, g = heads_q / heads_kv. */
static inline int64_t cpu_kv_head(const fa_problem *p, int64_t h) {
    if (cpu_mut(CPU_MUT_GQA_MODULO)) return h % p->heads_kv;
    return h / (p->heads_q / p->heads_kv);
}

// ----------------------------------------------------------------------------
// strides

/* The strides an input is read with: its own, except under the
 * strides_from_shape mutant, which uses the contiguous strides of the shape
 * when those stay inside the tensor's own memory range. */
static inline void cpu_input_strides(const fa_tensor *t, const int64_t dim[4], int dense, int64_t out[4]) {
    for (int i = 0; i < 4; i++) out[i] = t->stride[i];
    if (!cpu_mut(CPU_MUT_STRIDES_FROM_SHAPE) || !dense) return; /* packed/paged: own strides */
    int64_t contiguous[4] = {dim[1] * dim[2] * dim[3], dim[2] * dim[3], dim[3], 1};
    int64_t real_last = 0, contiguous_last = 0;
    for (int i = 0; i < 4; i++) {
        if (dim[i] == 0) return;
        real_last += (dim[i] - 1) * t->stride[i];      /* validated: no overflow */
        contiguous_last += (dim[i] - 1) * contiguous[i]; /* <= element count <= real range */
    }
    if (contiguous_last > real_last) return; /* would read outside the tensor: keep real strides */
    for (int i = 0; i < 4; i++) out[i] = contiguous[i];
}

/* The mask strides used: its own, or (mask_bh_stride_ignored mutant) with the
 * batch and head strides dropped. */
static inline void cpu_mask_strides(const fa_mask *m, int64_t out[4]) {
    for (int i = 0; i < 4; i++) out[i] = m->stride[i];
    if (cpu_mut(CPU_MUT_MASK_BH_STRIDE_IGNORED)) out[0] = out[1] = 0;
}

/* The strides q, k, v and the mask are read with (cpu_input_strides, cpu_mask_strides); Q is
 * dense unless packed (cu_seqlens_q), K and V unless packed or paged. Returns dense_q. */
static inline int cpu_qkv_strides(const fa_problem *p, const fa_varlen *vl, const fa_tensor *q, const fa_tensor *k,
                                  const fa_tensor *v, const fa_mask *m, int64_t q_st[4], int64_t k_st[4],
                                  int64_t v_st[4], int64_t mask_st[4]) {
    const int64_t qdim[4] = {p->batch, p->seqlen_q, p->heads_q, p->head_dim_qk};
    const int64_t kdim[4] = {p->batch, p->seqlen_k, p->heads_kv, p->head_dim_qk};
    const int64_t vdim[4] = {p->batch, p->seqlen_k, p->heads_kv, p->head_dim_v};
    const int dense_q = vl->cu_seqlens_q == NULL;
    const int dense_k = vl->cu_seqlens_k == NULL && p->page_size == 0;
    cpu_input_strides(q, qdim, dense_q, q_st);
    cpu_input_strides(k, kdim, dense_k, k_st);
    cpu_input_strides(v, vdim, dense_k, v_st);
    cpu_mask_strides(m, mask_st);
    return dense_q;
}

// ----------------------------------------------------------------------------
// OpenMP: the team size of a call and a thread's index in it (1 and 0 without OpenMP)

#ifdef _OPENMP
#include <omp.h>
static inline int cpu_max_threads(void) { return omp_get_max_threads(); }
static inline int cpu_thread_id(void) { return omp_get_thread_num(); }
#else
static inline int cpu_max_threads(void) { return 1; }
static inline int cpu_thread_id(void) { return 0; }
#endif

// ----------------------------------------------------------------------------
// the start of every call

/* validated: what fa_validate_fwd / fa_validate_bwd returned. Reads the mutant selection
 * (FLASHCHECK_CPU_MUTANT) once, passes a validation failure on, and refuses flush-to-zero mode
 * where there is no MXCSR. FA_OK: the call may run. */
static inline fa_status cpu_call_start(fa_status validated, int ftz, fa_error *err) {
    cpu_mutant_init();
    if (validated != FA_OK) return validated;
    if (ftz && !CPU_HAS_FTZ)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "", "cpu_ftz: flush-to-zero mode needs x86 MXCSR; "
                       "use the cpu backend on this machine.");
    return FA_OK;
}

// ----------------------------------------------------------------------------
// loading tiles to fp32 (exact conversions)

/* rows [j0, j0+n) of sequence s at head h, D values each, of a Q-like (kside 0) or K-like
 * (kside 1) tensor, into dst[c * ld + d] (row-major) or dst[d * ld + c] (transposed). */
static inline void cpu_load_rows(const uint16_t *base, const int64_t st[4], const cpu_seq *s, int kside,
                                 int64_t h, int64_t j0, int64_t n, int64_t D, int bf16, float *dst,
                                 int64_t ld, int transposed) {
    for (int64_t c = 0; c < n; c++) {
        const uint16_t *row = base + (kside ? cpu_k_off(s, st, j0 + c, h) : cpu_q_off(s, st, j0 + c, h));
        for (int64_t d = 0; d < D; d++) {
            float x = fa_cpu_to_f32(row[d * st[3]], bf16);
            if (transposed) dst[d * ld + c] = x; else dst[c * ld + d] = x;
        }
    }
}

// ----------------------------------------------------------------------------
// scores of one query row against one key tile
//
// s[c] = fp32(fp32(sum_d q[d] * kt[d][c]) * scale) (+ mask[c], fp32 add).
// The products of two fp16/bf16 values are exact in fp32; the sum runs over
// d = 0..D-1 in order, each addition rounded to fp32 (RN), so the error is the
// usual (D-1) u_acc |q|.|k| recursive-summation bound, then one rounding for
// the scale and one for the mask. Computed for all c < n (hidden keys too: the
// caller decides visibility and never uses a hidden score).

static inline void cpu_row_scores(const float *q, const float *kt, int64_t D, int64_t n, float scale,
                                  float *s) {
    for (int64_t c = 0; c < n; c++) s[c] = 0.0f;
    for (int64_t d = 0; d < D; d++) {
        const float qd = q[d];
        const float *kd = kt + d * CPU_TILE_K;
        for (int64_t c = 0; c < n; c++) s[c] += qd * kd[c];
    }
    for (int64_t c = 0; c < n; c++) s[c] *= scale;
}

/* Softcap (contract v3, p.softcap = cap > 0), applied to the scores of cpu_row_scores
 * computed with scale' = fp32(scale / cap) (one rounding) instead of scale:
 *   t[c] = tanhf(s'[c])   (glibc tanhf, max 2 ulp: glibc's libm-test-ulps for tanh, float)
 *   s[c] = fp32(cap * t[c])
 * t (when not NULL) keeps the tanh for the backward's derivative factor 1 - t^2. The
 * additive mask is added after (cpu_row_visibility), as the contract orders. */
static inline float cpu_softcap_scale(float scale, float cap) { return cap > 0.0f ? scale / cap : scale; }
static inline void cpu_row_softcap(float cap, int64_t n, float *s, float *t) {
    if (!(cap > 0.0f)) return;
    for (int64_t c = 0; c < n; c++) {
        const float tc = tanhf(s[c]);
        if (t) t[c] = tc;
        s[c] = cap * tc;
    }
}

/* Visibility and mask for keys j0 .. j0+n-1 of row i: vis[c] = 1 when the key
 * is inside the row range and its mask entry is not -inf; finite mask entries
 * are added to s[c]. mask_row points at mask[b, h, i, 0] (NULL: no mask). */
static inline int cpu_row_visibility(cpu_row_range r, int64_t j0, int64_t n, const float *mask_row,
                                     int64_t mask_stride_k, float *s, unsigned char *vis) {
    int any = 0;
    for (int64_t c = 0; c < n; c++) {
        int64_t j = j0 + c;
        int v = j >= r.lo && j <= r.hi;
        if (v && mask_row) {
            float mv = mask_row[j * mask_stride_k];
            if (mv == -INFINITY) v = 0;
            else s[c] += mv;
        }
        vis[c] = (unsigned char)v;
        any |= v;
    }
    return any;
}

#endif /* FLASHCHECK_CPU_INTERNAL_H */
