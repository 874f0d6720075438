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

static inline cpu_row_range cpu_visible_range(const fa_problem *p, int64_t i) {
    int bottom_right = p->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                       (p->causal == FA_CAUSAL_NONE && p->window_align == FA_ALIGN_BOTTOM_RIGHT);
    if (cpu_mut(CPU_MUT_CAUSAL_TOP_LEFT_FOR_BR)) bottom_right = 0;
    int64_t diag = bottom_right ? i + (p->seqlen_k - p->seqlen_q) : i;
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
    cpu_row_range r = {lo, hi < p->seqlen_k - 1 ? hi : p->seqlen_k - 1, hi};
    return r;
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
static inline void cpu_input_strides(const fa_tensor *t, const int64_t dim[4], int64_t out[4]) {
    for (int i = 0; i < 4; i++) out[i] = t->stride[i];
    if (!cpu_mut(CPU_MUT_STRIDES_FROM_SHAPE)) return;
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

// ----------------------------------------------------------------------------
// loading tiles to fp32 (exact conversions)

/* rows [j0, j0+n) of a [B,S,H,D] tensor at (b, h), D values each, into
 * dst[c * ld + d] (row-major) or dst[d * ld + c] (transposed). */
static inline void cpu_load_rows(const uint16_t *base, const int64_t st[4], int64_t b, int64_t h,
                                 int64_t j0, int64_t n, int64_t D, int bf16, float *dst, int64_t ld,
                                 int transposed) {
    for (int64_t c = 0; c < n; c++) {
        const uint16_t *row = base + b * st[0] + (j0 + c) * st[1] + h * st[2];
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
