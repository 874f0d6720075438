/* api_test_util.h: helpers for the tests/api suite: tensors with arbitrary
 * layouts, a seeded RNG, and a naive fp64 reference forward/backward with
 * per-element error bounds for the CPU backend.
 *
 * The reference is written from the contract (kernels/flash_api.h) and shares
 * no code with kernels/cpu (visibility rule, GQA mapping and indexing are
 * re-derived here). Only the fp16/bf16 converters of kernels/cpu/cpu_half.h
 * are used, and those are tested exhaustively on their own (half_test.c). */
#ifndef FLASHCHECK_API_TEST_UTIL_H
#define FLASHCHECK_API_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_half.h"
#include "kernels/flash_api.h"

#define TT_UNUSED __attribute__((unused))

// ----------------------------------------------------------------------------
// RNG: xorshift64*, uniform in [-1, 1)

typedef struct { uint64_t s; } tt_rng;
static TT_UNUSED uint64_t tt_next(tt_rng *r) {
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}
static TT_UNUSED double tt_uniform(tt_rng *r) { return (double)(tt_next(r) >> 11) * 0x1p-52 - 1.0; }

// ----------------------------------------------------------------------------
// a [d0,d1,d2,d3] tensor of 16-bit elements in some layout

typedef enum {
    TT_CONTIGUOUS = 0, /* [d0][d1][d2][d3] */
    TT_TRANSPOSED = 1, /* memory order [d0][d2][d1][d3] (BHSD for a BSHD tensor) */
    TT_PADDED = 2,     /* contiguous order with gaps: every stride larger than needed, stride[3] = 2 */
    TT_LAYOUTS
} tt_layout;

typedef struct {
    uint16_t *buf;
    size_t n_elems; /* allocation, in elements */
    int64_t dim[4], st[4];
} tt_tensor;

static TT_UNUSED tt_tensor tt_alloc(const int64_t dim[4], tt_layout layout) {
    tt_tensor t;
    memcpy(t.dim, dim, sizeof(t.dim));
    if (layout == TT_CONTIGUOUS) {
        t.st[3] = 1; t.st[2] = dim[3]; t.st[1] = dim[2] * dim[3]; t.st[0] = dim[1] * dim[2] * dim[3];
    } else if (layout == TT_TRANSPOSED) {
        t.st[3] = 1; t.st[1] = dim[3]; t.st[2] = dim[1] * dim[3]; t.st[0] = dim[1] * dim[2] * dim[3];
    } else {
        t.st[3] = 2; t.st[2] = 2 * dim[3] + 3; t.st[1] = t.st[2] * dim[2] + 5;
        t.st[0] = t.st[1] * dim[1] + 7;
    }
    int64_t last = 0;
    for (int i = 0; i < 4; i++) last += (dim[i] > 0 ? dim[i] - 1 : 0) * t.st[i];
    t.n_elems = (size_t)last + 1;
    t.buf = malloc(t.n_elems * 2);
    for (size_t i = 0; i < t.n_elems; i++) t.buf[i] = 0x7e01; /* NaN in the gaps: reading one shows */
    return t;
}
static TT_UNUSED size_t tt_off(const tt_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return (size_t)(a * t->st[0] + b * t->st[1] + c * t->st[2] + d * t->st[3]);
}
static TT_UNUSED double tt_get(const tt_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, int bf16) {
    return fa_cpu_to_f32(t->buf[tt_off(t, a, b, c, d)], bf16);
}
static TT_UNUSED void tt_fill(tt_tensor *t, tt_rng *r, double amp, int bf16) {
    for (int64_t a = 0; a < t->dim[0]; a++)
        for (int64_t b = 0; b < t->dim[1]; b++)
            for (int64_t c = 0; c < t->dim[2]; c++)
                for (int64_t d = 0; d < t->dim[3]; d++)
                    t->buf[tt_off(t, a, b, c, d)] = fa_cpu_from_f32((float)(amp * tt_uniform(r)), bf16);
}
static TT_UNUSED fa_tensor tt_view(const tt_tensor *t) {
    fa_tensor v;
    v.ptr = t->buf;
    memcpy(v.stride, t->st, sizeof(v.stride));
    return v;
}
static TT_UNUSED void tt_free(tt_tensor *t) { free(t->buf); t->buf = NULL; }

// ----------------------------------------------------------------------------
// a complete problem with buffers: the thing most tests build

typedef struct {
    fa_problem p;
    tt_tensor q, k, v, o, dout, dq, dk, dv;
    float *lse;      /* [B][Hq][Sq] contiguous */
    float *mask;     /* [B][Hq][Sq][Sk] contiguous or NULL; broadcast via mask_st */
    int64_t mask_st[4];
} tt_case;

static TT_UNUSED fa_problem tt_problem(int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv,
                                       int64_t Dqk, int64_t Dv, fa_dtype dt) {
    fa_problem p;
    memset(&p, 0, sizeof(p));
    p.batch = B; p.seqlen_q = Sq; p.seqlen_k = Sk; p.heads_q = Hq; p.heads_kv = Hkv;
    p.head_dim_qk = Dqk; p.head_dim_v = Dv; p.dtype = dt; p.softmax_scale = 0.0f;
    p.causal = FA_CAUSAL_NONE; p.window_left = -1; p.window_right = -1;
    p.window_align = FA_ALIGN_TOP_LEFT;
    return p;
}

/* Allocate and fill (inputs random in [-1,1), outputs NaN-filled). */
static TT_UNUSED void tt_case_init(tt_case *c, fa_problem p, tt_layout layout, uint64_t seed) {
    memset(c, 0, sizeof(*c));
    c->p = p;
    int bf16 = p.dtype == FA_BF16;
    int64_t qd[4] = {p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk};
    int64_t kd[4] = {p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk};
    int64_t vd[4] = {p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v};
    int64_t od[4] = {p.batch, p.seqlen_q, p.heads_q, p.head_dim_v};
    tt_rng r = {seed * 0x9E3779B97F4A7C15ULL + 1};
    c->q = tt_alloc(qd, layout); tt_fill(&c->q, &r, 1.0, bf16);
    c->k = tt_alloc(kd, layout); tt_fill(&c->k, &r, 1.0, bf16);
    c->v = tt_alloc(vd, layout); tt_fill(&c->v, &r, 1.0, bf16);
    c->dout = tt_alloc(od, layout); tt_fill(&c->dout, &r, 1.0, bf16);
    c->o = tt_alloc(od, layout);
    c->dq = tt_alloc(qd, layout);
    c->dk = tt_alloc(kd, layout);
    c->dv = tt_alloc(vd, layout);
    size_t nl = (size_t)(p.batch * p.heads_q * p.seqlen_q) + 1;
    c->lse = malloc(nl * sizeof(float));
    for (size_t i = 0; i < nl; i++) c->lse[i] = NAN;
}

/* A full random additive mask: entries in [-2, 2), a fraction `hide` of them -inf;
 * rows listed as fully hidden: every entry -inf. */
static TT_UNUSED void tt_case_mask(tt_case *c, double hide, uint64_t seed) {
    const fa_problem *p = &c->p;
    size_t n = (size_t)(p->batch * p->heads_q * p->seqlen_q * p->seqlen_k) + 1;
    c->mask = malloc(n * sizeof(float));
    tt_rng r = {seed * 0x9E3779B97F4A7C15ULL + 7};
    for (size_t i = 0; i < n; i++) {
        double x = tt_uniform(&r);
        c->mask[i] = (fabs(x) < hide) ? -INFINITY : (float)(2.0 * tt_uniform(&r));
    }
    c->mask_st[3] = 1; c->mask_st[2] = p->seqlen_k; c->mask_st[1] = p->seqlen_q * p->seqlen_k;
    c->mask_st[0] = p->heads_q * p->seqlen_q * p->seqlen_k;
}

static TT_UNUSED fa_fwd_args tt_fwd_args(const tt_case *c) {
    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p = c->p;
    a.q = tt_view(&c->q); a.k = tt_view(&c->k); a.v = tt_view(&c->v); a.o = tt_view(&c->o);
    a.lse.ptr = c->lse;
    a.lse.stride[0] = c->p.heads_q * c->p.seqlen_q; a.lse.stride[1] = c->p.seqlen_q; a.lse.stride[2] = 1;
    a.mask.ptr = c->mask;
    memcpy(a.mask.stride, c->mask_st, sizeof(a.mask.stride));
    return a;
}

static TT_UNUSED fa_bwd_args tt_bwd_args(const tt_case *c) {
    fa_bwd_args a;
    memset(&a, 0, sizeof(a));
    fa_fwd_args f = tt_fwd_args(c);
    a.p = c->p;
    a.q = f.q; a.k = f.k; a.v = f.v; a.o = f.o; a.dout = tt_view(&c->dout);
    a.lse = f.lse; a.mask = f.mask;
    a.dq = tt_view(&c->dq); a.dk = tt_view(&c->dk); a.dv = tt_view(&c->dv);
    a.deterministic = 1;
    return a;
}

static TT_UNUSED void tt_case_free(tt_case *c) {
    tt_free(&c->q); tt_free(&c->k); tt_free(&c->v); tt_free(&c->o); tt_free(&c->dout);
    tt_free(&c->dq); tt_free(&c->dk); tt_free(&c->dv);
    free(c->lse); free(c->mask);
    c->lse = NULL; c->mask = NULL;
}

static TT_UNUSED double tt_mask_at(const tt_case *c, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (c->mask == NULL) return 0.0;
    return c->mask[b * c->mask_st[0] + h * c->mask_st[1] + i * c->mask_st[2] + j * c->mask_st[3]];
}

// ----------------------------------------------------------------------------
// the visibility rule, straight from the header's text

static TT_UNUSED int tt_visible(const tt_case *c, int64_t b, int64_t h, int64_t i, int64_t j) {
    const fa_problem *p = &c->p;
    int64_t diag;
    if (p->causal == FA_CAUSAL_TOP_LEFT) diag = i;
    else if (p->causal == FA_CAUSAL_BOTTOM_RIGHT) diag = i + p->seqlen_k - p->seqlen_q;
    else diag = p->window_align == FA_ALIGN_BOTTOM_RIGHT ? i + p->seqlen_k - p->seqlen_q : i;
    if (p->causal != FA_CAUSAL_NONE && !(j <= diag)) return 0;
    if (p->window_left >= 0 && !(j >= diag - p->window_left)) return 0;
    if (p->window_right >= 0 && !(j <= diag + p->window_right)) return 0;
    if (c->mask && tt_mask_at(c, b, h, i, j) == -INFINITY) return 0;
    return 1;
}
#endif /* FLASHCHECK_API_TEST_UTIL_H */
