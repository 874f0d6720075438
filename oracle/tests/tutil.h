/* tutil.h: small helpers of the oracle tests (problem set-up, RNG, checks).
 * Header-only; every test is one translation unit. */
#ifndef FLASHCHECK_ORACLE_TUTIL_H
#define FLASHCHECK_ORACLE_TUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle/oracle.h"

// ----------------------------------------------------------------------------
// checks: count failures, print each, exit code at the end

static int t_failures = 0;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            t_failures++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

// ----------------------------------------------------------------------------
// RNG (splitmix64)

static uint64_t t_rng = 0x1234;
static uint64_t t_next(void) {
    uint64_t z = (t_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double t_unif(void) { return (double)(t_next() >> 11) * 0x1p-53; }
static double t_gauss(void) {
    double u = t_unif(), v = t_unif();
    return sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

// ----------------------------------------------------------------------------
// a problem with its own buffers

typedef struct {
    fa_problem p;
    uint16_t *q, *k, *v, *o, *dout;
    float *lse, *mask;
    fa_tensor tq, tk, tv, to, tdo;
    fa_lse tlse;
    fa_mask tmask;
} t_prob;

/* Strides for [B, S, H, Dm]; layout 0: contiguous BSHD, 1: BHSD (permuted),
 * 2: padded (extra gaps). Returns element count to allocate. */
static int64_t t_layout(int64_t B, int64_t S, int64_t H, int64_t Dm, int layout, int64_t st[4]) {
    if (layout == 1) { st[3] = 1; st[1] = Dm; st[2] = S * Dm; st[0] = H * S * Dm; return B * H * S * Dm + 1; }
    if (layout == 2) { st[3] = 2; st[2] = 2 * Dm + 3; st[1] = H * st[2] + 5; st[0] = S * st[1] + 7; return B * st[0] + 8; }
    st[3] = 1; st[2] = Dm; st[1] = H * Dm; st[0] = S * H * Dm;
    return B * S * H * Dm + 1;
}

static uint16_t *t_alloc_fill(int64_t n, fa_dtype dt, double sigma) {
    uint16_t *x = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) x[i] = orc_encode(t_gauss() * sigma, dt);
    return x;
}

static void t_setup(t_prob *t, fa_problem p, int layout, double qs, double ks, double vs, int with_mask) {
    memset(t, 0, sizeof *t);
    t->p = p;
    int64_t n;
    n = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, layout, t->tq.stride);
    t->q = t_alloc_fill(n, p.dtype, qs); t->tq.ptr = t->q;
    n = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, layout, t->tk.stride);
    t->k = t_alloc_fill(n, p.dtype, ks); t->tk.ptr = t->k;
    n = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, layout, t->tv.stride);
    t->v = t_alloc_fill(n, p.dtype, vs); t->tv.ptr = t->v;
    n = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, layout, t->to.stride);
    t->o = t_alloc_fill(n, p.dtype, 0); t->to.ptr = t->o;
    t->dout = t_alloc_fill(n, p.dtype, 1.0); t->tdo.ptr = t->dout;
    memcpy(t->tdo.stride, t->to.stride, sizeof t->to.stride);
    int64_t nl = p.batch * p.heads_q * p.seqlen_q + 1;
    t->lse = calloc((size_t)nl, sizeof(float));
    t->tlse.ptr = t->lse;
    t->tlse.stride[2] = 1; t->tlse.stride[1] = p.seqlen_q; t->tlse.stride[0] = p.heads_q * p.seqlen_q;
    if (with_mask) {
        int64_t nm = p.batch * p.heads_q * p.seqlen_q * p.seqlen_k + 1;
        t->mask = malloc((size_t)nm * sizeof(float));
        for (int64_t i = 0; i < nm; i++) {
            double u = t_unif();
            t->mask[i] = u < 0.15 ? -INFINITY : (float)(t_gauss() * 0.5);
        }
        t->tmask.ptr = t->mask;
        t->tmask.stride[3] = 1; t->tmask.stride[2] = p.seqlen_k;
        t->tmask.stride[1] = p.seqlen_q * p.seqlen_k; t->tmask.stride[0] = p.heads_q * p.seqlen_q * p.seqlen_k;
    }
}

static void t_free(t_prob *t) {
    free(t->q); free(t->k); free(t->v); free(t->o); free(t->dout); free(t->lse); free(t->mask);
    memset(t, 0, sizeof *t);
}

static fa_fwd_args t_fwd_args(const t_prob *t) {
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.p = t->p; a.q = t->tq; a.k = t->tk; a.v = t->tv; a.mask = t->tmask; a.o = t->to; a.lse = t->tlse;
    return a;
}

static fa_bwd_args t_bwd_args(const t_prob *t) {
    fa_bwd_args a;
    memset(&a, 0, sizeof a);
    a.p = t->p; a.q = t->tq; a.k = t->tk; a.v = t->tv; a.o = t->to; a.dout = t->tdo;
    a.lse = t->tlse; a.mask = t->tmask;
    return a;
}

/* Fill t->o and t->lse from a forward result (O rounded to dtype, LSE to fp32),
 * i.e. what a correct forward hands to backward. */
static void t_store_fwd(t_prob *t, const orc_fwd_result *r) {
    int64_t Dv = t->p.head_dim_v;
    for (int64_t x = 0; x < r->o.n; x++) {
        const orc_index *ix = &r->o.index[x];
        for (int64_t d = 0; d < Dv; d++)
            t->o[ix->b * t->to.stride[0] + ix->s * t->to.stride[1] + ix->h * t->to.stride[2] + d * t->to.stride[3]] =
                orc_encode(r->o.flags[x * Dv + d] & ORC_F_NAN ? 0 : r->o.ref[x * Dv + d], t->p.dtype);
        t->lse[ix->b * t->tlse.stride[0] + ix->h * t->tlse.stride[1] + ix->s * t->tlse.stride[2]] = (float)r->lse.ref[x];
    }
}

static fa_problem t_problem(int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                            int64_t Dv, fa_dtype dt, fa_causal causal, int64_t wl, int64_t wr) {
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = B; p.seqlen_q = Sq; p.seqlen_k = Sk; p.heads_q = Hq; p.heads_kv = Hkv;
    p.head_dim_qk = D; p.head_dim_v = Dv; p.dtype = dt; p.causal = causal;
    p.window_left = wl; p.window_right = wr; p.window_align = FA_ALIGN_TOP_LEFT;
    return p;
}

/* A small random problem (the oracle tests' shared draw, in this order): B 1..2, Hkv 1..2, G 1..3
 * (Hq = Hkv G), Sq 1..13, Sk 1..17, Dqk and Dv 1..9, fp16 or bf16, causal none/top-left/bottom-right,
 * each window side -1 (2 in 3) or 0..4. */
static fa_problem t_random_problem(void) {
    int64_t B = 1 + (int64_t)(t_next() % 2), Hkv = 1 + (int64_t)(t_next() % 2);
    int64_t G = 1 + (int64_t)(t_next() % 3), Hq = Hkv * G;
    int64_t Sq = 1 + (int64_t)(t_next() % 13), Sk = 1 + (int64_t)(t_next() % 17);
    int64_t D = 1 + (int64_t)(t_next() % 9), Dv = 1 + (int64_t)(t_next() % 9);
    fa_dtype dt = (t_next() & 1) ? FA_F16 : FA_BF16;
    fa_causal cz = (fa_causal)(t_next() % 3);
    int64_t wl = (t_next() % 3) ? -1 : (int64_t)(t_next() % 5), wr = (t_next() % 3) ? -1 : (int64_t)(t_next() % 5);
    return t_problem(B, Sq, Sk, Hq, Hkv, D, Dv, dt, cz, wl, wr);
}

/* The set-up after t_random_problem that test_dq_zero and test_mpfr_cols share, drawn in this
 * order: softcap in 1 of 3 problems (5; with alt_cap > 0 a further draw picks alt_cap or 5 in
 * equal parts), softmax scale 0.375 in 1 of 2, an additive mask in 1 of 2, a layout (t_layout's
 * 0..2); then t_setup's fills (Q, K, V with sigma 1.5, 2, 1) and the mask's entries redrawn:
 * -inf with probability 1/4, else N(0, 1). *p gets the softcap and scale. Returns 1 with a mask. */
static int t_random_setup(t_prob *t, fa_problem *p, float alt_cap) {
    if (t_next() % 3 == 0) p->softcap = alt_cap > 0 && (t_next() & 1) ? alt_cap : 5.0f;
    if (t_next() % 2) p->softmax_scale = 0.375f;
    int with_mask = (int)(t_next() % 2);
    t_setup(t, *p, (int)(t_next() % 3), 1.5, 2.0, 1.0, with_mask);
    if (with_mask) {
        int64_t nm = p->batch * p->heads_q * p->seqlen_q * p->seqlen_k;
        for (int64_t x = 0; x < nm; x++) t->mask[x] = (t_next() % 4 == 0) ? -INFINITY : (float)t_gauss();
    }
    return with_mask;
}

/* An fp32-accumulating profile (RN), P and dS rounded, outputs rounded, IEEE
 * gradual underflow (no flush to zero). */
static fa_precision t_profile_fp32(void) {
    fa_precision pr = {.u_acc = 0x1p-24, .exp_rel_err = 0x1p-22, .scores_fp32 = 1, .p_rounded = 1,
                       .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1, .flushes_subnormals = 0};
    return pr;
}


/* The tests' own dtype conversions (independent of the oracle's): fp16/bf16 bits to float and
 * back, round to nearest even (bf16 NaN kept quiet); t_rd rounds a float to the dtype. */
static inline float t_dec(uint16_t x, fa_dtype dt) {
    if (dt == FA_BF16) {
        uint32_t u = (uint32_t)x << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    _Float16 h;
    memcpy(&h, &x, 2);
    return (float)h;
}

static inline uint16_t t_enc(float f, fa_dtype dt) {
    if (dt == FA_BF16) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
        u += 0x7fff + ((u >> 16) & 1);
        return (uint16_t)(u >> 16);
    }
    _Float16 h = (_Float16)f;
    uint16_t x;
    memcpy(&x, &h, 2);
    return x;
}
static inline float t_rd(float f, fa_dtype dt) { return t_dec(t_enc(f, dt), dt); }

/* Gradient buffers of t's shape, dense BSHD, zeroed (one spare element each). */
typedef struct {
    uint16_t *dq, *dk, *dv;
    fa_tensor tq, tk, tv;
} t_grads;

static inline void t_grads_alloc(const t_prob *t, t_grads *g) {
    const fa_problem *p = &t->p;
    int64_t nq = p->batch * p->seqlen_q * p->heads_q * p->head_dim_qk;
    int64_t nk = p->batch * p->seqlen_k * p->heads_kv * p->head_dim_qk;
    int64_t nv = p->batch * p->seqlen_k * p->heads_kv * p->head_dim_v;
    g->dq = calloc((size_t)nq + 1, 2); g->dk = calloc((size_t)nk + 1, 2); g->dv = calloc((size_t)nv + 1, 2);
    int64_t sq[4] = {p->seqlen_q * p->heads_q * p->head_dim_qk, p->heads_q * p->head_dim_qk, p->head_dim_qk, 1};
    int64_t sk[4] = {p->seqlen_k * p->heads_kv * p->head_dim_qk, p->heads_kv * p->head_dim_qk, p->head_dim_qk, 1};
    int64_t sv[4] = {p->seqlen_k * p->heads_kv * p->head_dim_v, p->heads_kv * p->head_dim_v, p->head_dim_v, 1};
    g->tq.ptr = g->dq; memcpy(g->tq.stride, sq, sizeof sq);
    g->tk.ptr = g->dk; memcpy(g->tk.stride, sk, sizeof sk);
    g->tv.ptr = g->dv; memcpy(g->tv.stride, sv, sizeof sv);
}
static inline void t_grads_free(t_grads *g) { free(g->dq); free(g->dk); free(g->dv); }

#endif /* FLASHCHECK_ORACLE_TUTIL_H */
