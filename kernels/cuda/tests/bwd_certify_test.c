/* bwd_certify_test.c: certification of the CUDA backward against the oracle.
 *
 * For every case of an awkward grid: random inputs (a fresh seed per case) in
 * the case's layout, O and LSE from fa_cuda_forward, a random dO in its own
 * layout (non-contiguous in most cases: [B, H, S, D] or padded strides),
 * outputs dQ, dK, dV poisoned (0xFFFF, a NaN), then, for the default (atomic)
 * mode and the deterministic mode:
 *   1. every dQ, dK, dV element was written (no poison left),
 *   2. the oracle's per-element backward bounds (oracle/oracle.h, profile of the
 *      CUDA backend table) hold on the checked rows of dQ and columns of dK/dV
 *      (all for small cases, a seeded sample of max_rows / max_cols for big
 *      ones): orc_compare_bwd reports no failure and checks > 0 elements,
 *   3. a second deterministic run is bitwise identical to the first.
 * Plus a batch-heavy determinism case repeated many times, rejections
 * (bad arguments return a status and leave the outputs untouched), and the
 * special cases (section "special cases" below):
 *   - non-finite inputs at hidden positions: a NaN or Inf in K, V, dO or Q
 *     placed where some rows of the same kernel tile see it and others do not
 *     (causal diagonal, window edge, -inf mask entries, fully masked rows), fp16
 *     and bf16, both modes: the oracle (which never reads hidden positions)
 *     judges every element, NaN/Inf included, and the rows/columns the value is
 *     hidden from must come out finite;
 *   - GPU fuzz findings replayed from their case text (fuzz/gpu_findings/..., and the dQ NaN of
 *     fuzz/regressions/bwd/dq_nan_fp16_large_qk_lse_ulp.case).
 *
 * Grid (shared with kernels/cuda/tests/fwd_certify_test.c, whose case
 * generator is copied here): seqlens 1 3 17 63 64 65 97 113 127 128 239 513
 * 799 1023 1025 2048 4224 with Sq == Sk and Sq != Sk both ways, head dims
 * 8..256, every mask kind (causal both ways, windows, additive masks with
 * -inf: full, broadcast, key padding, fully masked rows), GQA ratios 1, 2, 8,
 * layouts BSHD / BHSD / padded / fused QKV, empty problems, many (b, h) pairs,
 * and (unless --no-big) a Q/O/dO/dQ tensor of more than 2^31 elements.
 *
 * usage: bwd_certify_test [--quick] [--no-big] [--sanitize] [--rows N] [--threads N] [--det-reps N]
 *                         [--special-only] [--no-special] [--sm80]
 * --sm80: the sm_80 (mma.sync) kernels for every call, also where an sm_90 device runs the
 * Hopper kernels (a test policy, kernels/cuda/testing.h; without it every call is
 * fa_cuda_backward's, as shipped).
 * --sanitize: the small grid subset and the small special subset, no big case and
 * no determinism repetitions (for compute-sanitizer runs).
 * Exit status: 0 when every case passed, 1 otherwise (2: setup error). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/testing.h"
#include "kernels/flash_api.h"
#include "oracle/oracle.h"

/* The kernel policy of every backward call: the shipped default, or (--sm80) never the Hopper kernels. */
static fa_cuda_policy bwd_policy;

static fa_status bwd_call(const fa_bwd_args *a, fa_error *err) { return fa_cuda_backward_policy(a, &bwd_policy, err); }

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

// Case generator copied from kernels/cuda/tests/fwd_certify_test.c (same grid for both directions).
// ----------------------------------------------------------------------------
// cases

enum { MK_NONE = 0, MK_FULL, MK_BCAST, MK_KEYPAD, MK_ROWS, MK_COUNT };
static const char *mk_name[MK_COUNT] = {"none", "full", "bcast", "keypad", "rows-inf"};
enum { LAY_BSHD = 0, LAY_BHSD, LAY_PAD, LAY_QKV, LAY_COUNT };
static const char *lay_name[LAY_COUNT] = {"bshd", "bhsd", "pad", "qkv"};

typedef struct {
    int64_t B, Sq, Sk, Hq, Hkv, D;
    fa_dtype dt;
    fa_causal causal;
    int64_t wl, wr;
    fa_align align;
    int mask;
    int layout;
    float scale;   /* 0: default */
    int big;       /* 1: > 2^31 elements, filled by tiling, no repeat run */
} tc_case;

static int tc_n = 0, tc_cap = 0;
static tc_case *tc_list = NULL;

static void add(tc_case c) {
    if (tc_n == tc_cap) {
        tc_cap = tc_cap ? 2 * tc_cap : 256;
        tc_list = (tc_case *)realloc(tc_list, sizeof(tc_case) * tc_cap);
    }
    tc_list[tc_n++] = c;
}

static tc_case base_case(int64_t Sq, int64_t Sk, int64_t D, fa_dtype dt) {
    tc_case c;
    memset(&c, 0, sizeof(c));
    c.B = 2; c.Sq = Sq; c.Sk = Sk; c.Hq = 2; c.Hkv = 2; c.D = D; c.dt = dt;
    c.causal = FA_CAUSAL_NONE; c.wl = -1; c.wr = -1; c.align = FA_ALIGN_TOP_LEFT;
    c.mask = MK_NONE; c.layout = LAY_BSHD;
    return c;
}

/* A geometric / additive mask kind by number (13 kinds). */
static void set_mask_kind(tc_case *c, int kind) {
    c->causal = FA_CAUSAL_NONE; c->wl = c->wr = -1; c->align = FA_ALIGN_TOP_LEFT; c->mask = MK_NONE;
    switch (kind % 13) {
    case 0: break;
    case 1: c->causal = FA_CAUSAL_TOP_LEFT; break;
    case 2: c->causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 3: c->wl = 37; c->wr = 5; c->align = FA_ALIGN_TOP_LEFT; break;
    case 4: c->wl = 100; c->wr = 0; c->align = FA_ALIGN_BOTTOM_RIGHT; break;
    case 5: c->wl = -1; c->wr = 20; c->align = FA_ALIGN_BOTTOM_RIGHT; break;
    case 6: c->causal = FA_CAUSAL_BOTTOM_RIGHT; c->wl = 64; break;
    case 7: c->causal = FA_CAUSAL_TOP_LEFT; c->wl = 129; c->wr = 3; break;
    case 8: c->mask = MK_FULL; break;
    case 9: c->mask = MK_BCAST; c->causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 10: c->mask = MK_KEYPAD; break;
    case 11: c->mask = MK_ROWS; c->wl = 50; c->wr = 50; break;
    case 12: c->wl = 0; c->wr = 0; c->align = FA_ALIGN_TOP_LEFT; break;  /* one key per row at most */
    }
}

static const int64_t seqlens[17] = {1, 3, 17, 63, 64, 65, 97, 113, 127, 128, 239, 513, 799, 1023, 1025, 2048, 4224};
static const int64_t special_d[6] = {32, 64, 96, 128, 192, 256};

static void build_grid(int quick, int big) {
    // A: sequence lengths, Sq == Sk and Sq != Sk both ways; head dims, masks, GQA, dtypes rotate
    const int gq[3] = {1, 2, 8};
    int r = 0;
    for (int i = 0; i < 17; ++i)
        for (int v = 0; v < 3; ++v, ++r) {
            if (quick && (i % 4) != 0) continue;
            int64_t a = seqlens[i], b = seqlens[(i + 5 + v) % 17];
            int64_t Sq = v == 0 ? a : (v == 1 ? a : b), Sk = v == 0 ? a : (v == 1 ? b : a);
            tc_case c = base_case(Sq, Sk, special_d[r % 6], (r & 1) ? FA_F16 : FA_BF16);
            set_mask_kind(&c, r);
            int g = gq[r % 3];
            c.Hkv = 1 + (r % 2);
            c.Hq = g * c.Hkv;
            c.B = Sq * Sk > 1000000 ? 1 : 2;
            add(c);
        }
    // B: every head dim 8..256 (step 8), both dtypes, ragged lengths
    for (int64_t D = 8; D <= 256; D += 8)
        for (int dt = 0; dt < 2; ++dt) {
            if (quick && D % 32 != 8 && D % 64 != 0) continue;
            tc_case c = base_case(97 + D % 31, 65 + (D * 7) % 129, D, dt ? FA_BF16 : FA_F16);
            set_mask_kind(&c, (int)(D / 8) + dt);
            c.Hkv = 1; c.Hq = dt ? 2 : 1;
            add(c);
        }
    // C: every mask kind on Sq < Sk, Sq > Sk, and both ~1k, two dtypes/head dims
    const int64_t qk[3][2] = {{127, 513}, {513, 127}, {1023, 1025}};
    for (int kind = 0; kind < 13; ++kind)
        for (int s = 0; s < 3; ++s) {
            if (quick && s == 2) continue;
            tc_case c = base_case(qk[s][0], qk[s][1], s == 1 ? 64 : 128, s == 1 ? FA_F16 : FA_BF16);
            set_mask_kind(&c, kind);
            c.Hq = 4; c.Hkv = 2;
            add(c);
        }
    // D: sliding window with a single query row (window offset vs corner), and windows past the ends
    {
        tc_case c = base_case(1, 239, 64, FA_BF16);
        c.wl = 127; c.wr = 0; c.align = FA_ALIGN_BOTTOM_RIGHT; add(c);
        c.causal = FA_CAUSAL_BOTTOM_RIGHT; c.wl = 127; c.wr = -1; add(c);
        c = base_case(65, 97, 128, FA_F16);
        c.wl = 1000000; c.wr = 1000000; add(c);
        c.causal = FA_CAUSAL_TOP_LEFT; c.wl = 0; c.wr = -1; add(c);  /* only the diagonal */
        c = base_case(300, 40, 64, FA_BF16);  /* Sq > Sk, causal bottom-right: top rows see nothing */
        c.causal = FA_CAUSAL_BOTTOM_RIGHT; add(c);
        c.causal = FA_CAUSAL_TOP_LEFT; c.mask = MK_ROWS; add(c);
    }
    // E: layouts
    for (int lay = 1; lay < LAY_COUNT; ++lay)
        for (int d = 0; d < 3; ++d) {
            int64_t D = d == 0 ? 64 : (d == 1 ? 128 : 72);
            tc_case c = base_case(239, lay == LAY_QKV ? 239 : 513, D, d == 1 ? FA_F16 : FA_BF16);
            c.layout = lay; c.Hq = 4; c.Hkv = lay == LAY_QKV ? 4 : 1;
            set_mask_kind(&c, d == 0 ? 2 : (d == 1 ? 8 : 3));
            if (lay == LAY_QKV) c.mask = MK_NONE;
            add(c);
        }
    // F: scales (negative, large), empty problems, many (batch, head) pairs
    {
        tc_case c = base_case(97, 113, 64, FA_BF16);
        c.scale = -0.3f; add(c);
        c.scale = 2.0f; c.causal = FA_CAUSAL_TOP_LEFT; add(c);
        c = base_case(0, 17, 64, FA_F16); add(c);
        c = base_case(17, 0, 64, FA_F16); add(c);
        c = base_case(3, 17, 32, FA_BF16); c.B = 0; add(c);
        c = base_case(3, 5, 8, FA_BF16); c.B = 300; c.Hq = 256; c.Hkv = 32; add(c); /* 76800 pairs */
    }
    // G: more than 2^31 elements in Q and O (64-bit offsets): Sq * Hq * D = 131073 * 128 * 128
    if (big) {
        tc_case c = base_case(131073, 65, 128, FA_BF16);
        c.B = 1; c.Hq = 128; c.Hkv = 1; c.causal = FA_CAUSAL_BOTTOM_RIGHT; c.wl = 40; c.big = 1;
        add(c);
    }
}

// ----------------------------------------------------------------------------
// random values

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53 * 2.0 - 1.0; }

static void fill_half(uint16_t *p, int64_t n, fa_dtype dt, double amp, uint64_t seed, int tiled) {
    uint64_t s = seed;
    int64_t m = tiled && n > (1 << 22) ? (1 << 22) : n;
    for (int64_t i = 0; i < m; ++i) p[i] = orc_encode(amp * rng_uniform(&s), dt);
    for (int64_t i = m; i < n; i += m) memcpy(p + i, p, sizeof(uint16_t) * (size_t)(n - i < m ? n - i : m));
}

// ----------------------------------------------------------------------------
// layouts

typedef struct {
    int64_t st[4];
    int64_t extent; /* elements spanned */
} tc_view;

static int64_t extent4(const int64_t *dims, const int64_t *st) {
    int64_t e = 1;
    for (int i = 0; i < 4; ++i) {
        if (dims[i] == 0) return 0;
        e += (dims[i] - 1) * st[i];
    }
    return e;
}

/* dims [B, S, H, D] -> strides for the layout (QKV handled by the caller). */
static tc_view make_view(int lay, int64_t B, int64_t S, int64_t H, int64_t D) {
    tc_view v;
    int64_t dims[4] = {B, S, H, D};
    if (lay == LAY_BHSD) {
        v.st[3] = 1; v.st[1] = D; v.st[2] = S * D; v.st[0] = H * S * D;
    } else if (lay == LAY_PAD) {
        int64_t hs = D + 24, ss = H * hs + 40;
        v.st[3] = 1; v.st[2] = hs; v.st[1] = ss; v.st[0] = S * ss + 16;
    } else {
        v.st[3] = 1; v.st[2] = D; v.st[1] = H * D; v.st[0] = S * H * D;
    }
    v.extent = extent4(dims, v.st);
    return v;
}

// ----------------------------------------------------------------------------
// one case

static int rows_sample = 48, omp_threads = 0;

static void *dmalloc(size_t n) {
    void *p = NULL;
    if (n == 0) n = 16;
    CK(cudaMalloc(&p, n));
    return p;
}

static void *hmalloc(size_t n) {
    void *p = malloc(n ? n : 16);
    if (!p) { fprintf(stderr, "out of host memory (%zu bytes)\n", n); exit(2); }
    return p;
}

/* poisoned elements left in a [B, S, H, D] view of a host copy */
static int64_t count_poison(const uint16_t *h, const tc_view *v, int64_t B, int64_t S, int64_t H, int64_t D) {
    int64_t n = 0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
            for (int64_t hh = 0; hh < H; ++hh)
                for (int64_t d = 0; d < D; ++d) n += h[b * v->st[0] + s * v->st[1] + hh * v->st[2] + d] == 0xffff;
    return n;
}

typedef struct {
    uint16_t *dq, *dk, *dv; /* device */
    uint16_t *hq, *hk, *hv; /* host copies */
} tc_grads;

static fa_status run_bwd(fa_bwd_args *a, int det, const tc_view *vdq, const tc_view *vdk, const tc_view *vdv,
                         tc_grads *g, fa_error *err) {
    CK(cudaMemset(g->dq, 0xff, sizeof(uint16_t) * (size_t)vdq->extent));
    CK(cudaMemset(g->dk, 0xff, sizeof(uint16_t) * (size_t)vdk->extent));
    CK(cudaMemset(g->dv, 0xff, sizeof(uint16_t) * (size_t)vdv->extent));
    a->dq.ptr = g->dq; a->dk.ptr = g->dk; a->dv.ptr = g->dv;
    a->deterministic = det;
    fa_status st = bwd_call(a, err);
    CK(cudaMemcpy(g->hq, g->dq, sizeof(uint16_t) * (size_t)vdq->extent, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g->hk, g->dk, sizeof(uint16_t) * (size_t)vdk->extent, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g->hv, g->dv, sizeof(uint16_t) * (size_t)vdv->extent, cudaMemcpyDeviceToHost));
    return st;
}

static int run_case(int idx, const tc_case *c) {
    const int64_t B = c->B, Sq = c->Sq, Sk = c->Sk, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    uint64_t seed = 0xb0d00000ull + (uint64_t)idx * 7919;
    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p.batch = B; a.p.seqlen_q = Sq; a.p.seqlen_k = Sk; a.p.heads_q = Hq; a.p.heads_kv = Hkv;
    a.p.head_dim_qk = D; a.p.head_dim_v = D; a.p.dtype = c->dt; a.p.softmax_scale = c->scale;
    a.p.causal = c->causal; a.p.window_left = c->wl; a.p.window_right = c->wr; a.p.window_align = c->align;

    // ---- host inputs in their layout
    tc_view vq, vk, vv, vo, vdo;
    uint16_t *hqkv = NULL, *hq, *hk, *hv;
    int64_t n_qkv = 0;
    if (c->layout == LAY_QKV) {
        int64_t Ht = Hq + 2 * Hkv;
        int64_t dims[4] = {B, Sq, Ht, D};
        int64_t st[4] = {Sq * Ht * D, Ht * D, D, 1};
        n_qkv = extent4(dims, st);
        hqkv = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)n_qkv);
        fill_half(hqkv, n_qkv, c->dt, 1.5, seed + 1, 0);
        for (int i = 0; i < 4; ++i) vq.st[i] = vk.st[i] = vv.st[i] = st[i];
        int64_t dq[4] = {B, Sq, Hq, D}, dk[4] = {B, Sk, Hkv, D};
        vq.extent = extent4(dq, st); vk.extent = extent4(dk, st); vv.extent = vk.extent;
        hq = hqkv; hk = hqkv + Hq * D; hv = hqkv + (Hq + Hkv) * D;
    } else {
        vq = make_view(c->layout, B, Sq, Hq, D);
        vk = make_view(c->layout, B, Sk, Hkv, D);
        vv = make_view(c->layout, B, Sk, Hkv, D);
        hq = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)vq.extent);
        hk = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)vk.extent);
        hv = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)vv.extent);
        fill_half(hq, vq.extent, c->dt, 1.5, seed + 1, c->big);
        fill_half(hk, vk.extent, c->dt, 1.5, seed + 2, c->big);
        fill_half(hv, vv.extent, c->dt, 1.0, seed + 3, c->big);
    }
    const int olay = c->layout == LAY_QKV ? LAY_BSHD : c->layout;
    vo = make_view(olay, B, Sq, Hq, D);
    /* dO: non-contiguous unless the case index says otherwise (bug class: stride assumption on dout) */
    const int dolay = c->big ? LAY_BSHD : (idx % 3 == 0 ? LAY_BSHD : (idx % 3 == 1 ? LAY_BHSD : LAY_PAD));
    vdo = make_view(dolay, B, Sq, Hq, D);
    uint16_t *hdo = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)vdo.extent);
    fill_half(hdo, vdo.extent, c->dt, 1.0, seed + 5, c->big);
    /* outputs: dQ in the dO layout, dK/dV in the K layout (separate buffers for fused QKV) */
    tc_view vdq = make_view(dolay, B, Sq, Hq, D);
    tc_view vdk = make_view(olay, B, Sk, Hkv, D), vdv = vdk;

    // ---- additive mask
    float *hm = NULL;
    int64_t n_mask = 0;
    int64_t mst[4] = {0, 0, 0, 0};
    if (c->mask != MK_NONE) {
        uint64_t s = seed + 4;
        if (c->mask == MK_FULL) {
            mst[3] = 1; mst[2] = Sk; mst[1] = Sq * Sk; mst[0] = Hq * Sq * Sk;
            n_mask = B * Hq * Sq * Sk;
        } else if (c->mask == MK_KEYPAD) {
            mst[3] = 1; mst[2] = 0; mst[1] = 0; mst[0] = Sk;
            n_mask = B * Sk;
        } else {
            mst[3] = 1; mst[2] = Sk; mst[1] = 0; mst[0] = 0;
            n_mask = Sq * Sk;
        }
        hm = (float *)hmalloc(sizeof(float) * (size_t)n_mask);
        for (int64_t e = 0; e < n_mask; ++e) {
            double u = rng_uniform(&s);
            float v = (float)(3.0 * u);
            if (c->mask == MK_KEYPAD) {
                int64_t j = e % (Sk ? Sk : 1), b = e / (Sk ? Sk : 1);
                v = j >= Sk - (Sk / 4) * (1 + b % 2) / 2 - 1 ? -INFINITY : 0.0f;
            } else if (c->mask == MK_ROWS) {
                int64_t i = e / (Sk ? Sk : 1);
                v = (i % 5 == 2) ? -INFINITY : (fabs(u) < 0.2 ? -INFINITY : v);
            } else if (fabs(u) < 0.1) {
                v = -INFINITY;
            }
            hm[e] = v;
        }
    }

    // ---- device buffers
    uint16_t *dq, *dk, *dv, *dqkv = NULL, *d_o, *d_do;
    float *d_lse, *dm = NULL;
    if (c->layout == LAY_QKV) {
        dqkv = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)n_qkv);
        CK(cudaMemcpy(dqkv, hqkv, sizeof(uint16_t) * (size_t)n_qkv, cudaMemcpyHostToDevice));
        dq = dqkv; dk = dqkv + Hq * D; dv = dqkv + (Hq + Hkv) * D;
    } else {
        dq = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vq.extent);
        dk = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vk.extent);
        dv = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vv.extent);
        CK(cudaMemcpy(dq, hq, sizeof(uint16_t) * (size_t)vq.extent, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dk, hk, sizeof(uint16_t) * (size_t)vk.extent, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dv, hv, sizeof(uint16_t) * (size_t)vv.extent, cudaMemcpyHostToDevice));
    }
    if (hm) {
        dm = (float *)dmalloc(sizeof(float) * (size_t)n_mask);
        CK(cudaMemcpy(dm, hm, sizeof(float) * (size_t)n_mask, cudaMemcpyHostToDevice));
    }
    const int64_t n_lse = B * Hq * Sq;
    d_o = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vo.extent);
    d_lse = (float *)dmalloc(sizeof(float) * (size_t)n_lse);
    d_do = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vdo.extent);
    CK(cudaMemcpy(d_do, hdo, sizeof(uint16_t) * (size_t)vdo.extent, cudaMemcpyHostToDevice));

    a.q.ptr = dq; a.k.ptr = dk; a.v.ptr = dv; a.o.ptr = d_o;
    memcpy(a.q.stride, vq.st, sizeof(vq.st)); memcpy(a.k.stride, vk.st, sizeof(vk.st));
    memcpy(a.v.stride, vv.st, sizeof(vv.st)); memcpy(a.o.stride, vo.st, sizeof(vo.st));
    a.lse.ptr = d_lse; a.lse.stride[0] = Hq * Sq; a.lse.stride[1] = Sq; a.lse.stride[2] = 1;
    a.mask.ptr = dm; memcpy(a.mask.stride, mst, sizeof(mst));

    char label[200];
    snprintf(label, sizeof(label), "#%d B%lld Sq%lld Sk%lld H%lld/%lld D%lld %s c%d w%lld,%lld a%d m=%s %s dO=%s%s", idx,
             (long long)B, (long long)Sq, (long long)Sk, (long long)Hq, (long long)Hkv, (long long)D,
             c->dt == FA_BF16 ? "bf16" : "fp16", (int)c->causal, (long long)c->wl, (long long)c->wr, (int)c->align,
             mk_name[c->mask], lay_name[c->layout], lay_name[dolay], c->scale != 0 ? " scale" : "");
    int ok = 1;
    fa_error err;
    memset(&err, 0, sizeof(err));
    fa_status st = fa_cuda_forward(&a, &err);
    if (st != FA_OK) {
        printf("FAIL %s: forward returned %s (%s: %s)\n", label, fa_status_name(st), err.arg, err.msg);
        ok = 0;
    }
    uint16_t *ho = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)vo.extent);
    float *hl = (float *)hmalloc(sizeof(float) * (size_t)n_lse);
    CK(cudaMemcpy(ho, d_o, sizeof(uint16_t) * (size_t)vo.extent, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl, d_lse, sizeof(float) * (size_t)n_lse, cudaMemcpyDeviceToHost));

    fa_bwd_args ba;
    memset(&ba, 0, sizeof(ba));
    ba.p = a.p;
    ba.q = a.q; ba.k = a.k; ba.v = a.v; ba.o = a.o; ba.lse = a.lse; ba.mask = a.mask;
    ba.dout.ptr = d_do; memcpy(ba.dout.stride, vdo.st, sizeof(vdo.st));
    memcpy(ba.dq.stride, vdq.st, sizeof(vdq.st));
    memcpy(ba.dk.stride, vdk.st, sizeof(vdk.st));
    memcpy(ba.dv.stride, vdv.st, sizeof(vdv.st));
    tc_grads g[3];
    for (int r = 0; r < 3; ++r) {
        g[r].dq = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vdq.extent);
        g[r].dk = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vdk.extent);
        g[r].dv = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vdv.extent);
        g[r].hq = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)vdq.extent);
        g[r].hk = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)vdk.extent);
        g[r].hv = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)vdv.extent);
        if (r == 2 && c->big) break;
    }
    /* run 0: default mode; run 1: deterministic; run 2: deterministic again */
    const int nruns = c->big ? 2 : 3;
    for (int r = 0; ok && r < nruns; ++r) {
        st = run_bwd(&ba, r > 0, &vdq, &vdk, &vdv, &g[r], &err);
        if (st != FA_OK) {
            printf("FAIL %s: backward (%s) returned %s (%s: %s)\n", label, r ? "det" : "default", fa_status_name(st),
                   err.arg, err.msg);
            ok = 0;
            break;
        }
        int64_t un = count_poison(g[r].hq, &vdq, B, Sq, Hq, D) + count_poison(g[r].hk, &vdk, B, Sk, Hkv, D) +
                     count_poison(g[r].hv, &vdv, B, Sk, Hkv, D);
        if (un) {
            printf("FAIL %s: %s mode left %lld gradient elements unwritten (poison)\n", label, r ? "det" : "default",
                   (long long)un);
            ok = 0;
        }
    }
    if (ok && nruns == 3 &&
        (memcmp(g[1].hq, g[2].hq, sizeof(uint16_t) * (size_t)vdq.extent) ||
         memcmp(g[1].hk, g[2].hk, sizeof(uint16_t) * (size_t)vdk.extent) ||
         memcmp(g[1].hv, g[2].hv, sizeof(uint16_t) * (size_t)vdv.extent))) {
        printf("FAIL %s: deterministic mode: second run differs bitwise\n", label);
        ok = 0;
    }
    if (ok && B * (Sq + Sk) * Hq > 0) {
        fa_bwd_args h = ba;
        h.q.ptr = hq; h.k.ptr = hk; h.v.ptr = hv; h.mask.ptr = hm; h.o.ptr = ho; h.lse.ptr = hl; h.dout.ptr = hdo;
        h.dq.ptr = g[0].hq; h.dk.ptr = g[0].hk; h.dv.ptr = g[0].hv;
        h.stream = NULL;
        orc_options opt;
        orc_options_init(&opt);
        opt.max_rows = B * Hq * Sq > 4 * rows_sample ? rows_sample : 0;
        opt.max_cols = B * Hkv * Sk > 4 * rows_sample ? rows_sample : 0;
        opt.seed = seed;
        opt.threads = omp_threads;
        opt.baseline = 0;
        orc_bwd_result res;
        fa_precision prof = fa_backend_cuda()->precision;
        fa_status os = orc_bwd(&h, &prof, &opt, &res, &err);
        if (os != FA_OK) {
            printf("FAIL %s: oracle refused the case: %s (%s: %s)\n", label, fa_status_name(os), err.arg, err.msg);
            ok = 0;
        } else {
            for (int r = 0; r < 2 && ok; ++r) {
                fa_tensor tq = h.dq, tk = h.dk, tv = h.dv;
                tq.ptr = g[r].hq; tk.ptr = g[r].hk; tv.ptr = g[r].hv;
                orc_stats sq, sk, sv;
                os = orc_compare_bwd(&res, &tq, &tk, &tv, &sq, &sk, &sv, &err);
                if (os != FA_OK) {
                    printf("FAIL %s: compare error %s: %s\n", label, err.arg, err.msg);
                    ok = 0;
                    break;
                }
                /* a tensor with elements must have had some of them judged */
                int none = (B * Sq * Hq > 0 && sq.checked == 0) || (B * Sk * Hkv > 0 && (sk.checked == 0 || sv.checked == 0));
                if (sq.failed || sk.failed || sv.failed || none) {
                    char b1[400], b2[400], b3[400];
                    orc_stats_format(&sq, "dQ", b1, sizeof(b1));
                    orc_stats_format(&sk, "dK", b2, sizeof(b2));
                    orc_stats_format(&sv, "dV", b3, sizeof(b3));
                    printf("FAIL %s (%s mode):\n    %s\n    %s\n    %s\n", label, r ? "det" : "default", b1, b2, b3);
                    ok = 0;
                } else {
                    printf("ok   %s %s: rows %lld cols %lld, worst dQ %.3g dK %.3g dV %.3g (median %.2g %.2g %.2g)"
                           " in-ratio O %.2g LSE %.2g\n", label, r ? "det" : "atm", (long long)res.dq.n,
                           (long long)res.dk.n, sq.worst_ratio, sk.worst_ratio, sv.worst_ratio, sq.median_ratio,
                           sk.median_ratio, sv.median_ratio, res.o_input_ratio, res.lse_input_ratio);
                }
            }
            orc_bwd_free(&res);
        }
    } else if (ok) {
        printf("ok   %s: empty problem, returned FA_OK\n", label);
    }

    for (int r = 0; r < nruns; ++r) {
        cudaFree(g[r].dq); cudaFree(g[r].dk); cudaFree(g[r].dv);
        free(g[r].hq); free(g[r].hk); free(g[r].hv);
    }
    free(ho); free(hl); free(hm); free(hdo);
    if (hqkv) free(hqkv);
    else { free(hq); free(hk); free(hv); }
    if (dqkv) cudaFree(dqkv);
    else { cudaFree(dq); cudaFree(dk); cudaFree(dv); }
    cudaFree(dm); cudaFree(d_o); cudaFree(d_lse); cudaFree(d_do);
    fflush(stdout);
    return ok;
}

// ----------------------------------------------------------------------------
// determinism: a batch-heavy case, many repetitions, bitwise equal

static int check_determinism(int reps) {
    const int64_t B = 48, S = 257, Hq = 8, Hkv = 2, D = 128;
    tc_case c = base_case(S, S + 64, D, FA_BF16);
    (void)c;
    const int64_t nq = B * S * Hq * D, nk = B * (S + 64) * Hkv * D;
    uint16_t *h = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)(nq > nk ? nq : nk));
    uint16_t *d[5];
    int64_t n[5] = {nq, nk, nk, nq, nq};
    for (int t = 0; t < 5; ++t) {
        d[t] = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)n[t]);
        fill_half(h, n[t], FA_BF16, 1.0, 0xde7000ull + t, 0);
        CK(cudaMemcpy(d[t], h, sizeof(uint16_t) * (size_t)n[t], cudaMemcpyHostToDevice));
    }
    free(h);
    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p.batch = B; a.p.seqlen_q = S; a.p.seqlen_k = S + 64; a.p.heads_q = Hq; a.p.heads_kv = Hkv;
    a.p.head_dim_qk = a.p.head_dim_v = D; a.p.dtype = FA_BF16; a.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
    a.p.window_left = a.p.window_right = -1;
    int64_t sq[4] = {S * Hq * D, Hq * D, D, 1}, sk[4] = {(S + 64) * Hkv * D, Hkv * D, D, 1};
    a.q.ptr = d[0]; a.k.ptr = d[1]; a.v.ptr = d[2]; a.o.ptr = d[3];
    memcpy(a.q.stride, sq, 32); memcpy(a.k.stride, sk, 32); memcpy(a.v.stride, sk, 32); memcpy(a.o.stride, sq, 32);
    float *dl = (float *)dmalloc(sizeof(float) * (size_t)(B * Hq * S));
    a.lse.ptr = dl; a.lse.stride[0] = Hq * S; a.lse.stride[1] = S; a.lse.stride[2] = 1;
    fa_error err;
    if (fa_cuda_forward(&a, &err) != FA_OK) { printf("FAIL determinism: forward: %s\n", err.msg); return 0; }
    fa_bwd_args ba;
    memset(&ba, 0, sizeof(ba));
    ba.p = a.p; ba.q = a.q; ba.k = a.k; ba.v = a.v; ba.o = a.o; ba.lse = a.lse;
    ba.dout.ptr = d[4]; memcpy(ba.dout.stride, sq, 32);
    tc_view vdq = {{sq[0], sq[1], sq[2], sq[3]}, nq}, vdk = {{sk[0], sk[1], sk[2], sk[3]}, nk};
    tc_grads g[2];
    for (int r = 0; r < 2; ++r) {
        g[r].dq = (uint16_t *)dmalloc(2 * (size_t)nq); g[r].dk = (uint16_t *)dmalloc(2 * (size_t)nk);
        g[r].dv = (uint16_t *)dmalloc(2 * (size_t)nk);
        g[r].hq = (uint16_t *)hmalloc(2 * (size_t)nq); g[r].hk = (uint16_t *)hmalloc(2 * (size_t)nk);
        g[r].hv = (uint16_t *)hmalloc(2 * (size_t)nk);
    }
    memcpy(ba.dq.stride, sq, 32); memcpy(ba.dk.stride, sk, 32); memcpy(ba.dv.stride, sk, 32);
    int ok = 1, differ_default = 0;
    if (run_bwd(&ba, 1, &vdq, &vdk, &vdk, &g[0], &err) != FA_OK) { printf("FAIL determinism: %s\n", err.msg); ok = 0; }
    for (int r = 0; ok && r < reps; ++r) {
        if (run_bwd(&ba, 1, &vdq, &vdk, &vdk, &g[1], &err) != FA_OK) { printf("FAIL determinism: %s\n", err.msg); ok = 0; break; }
        if (memcmp(g[0].hq, g[1].hq, 2 * (size_t)nq) || memcmp(g[0].hk, g[1].hk, 2 * (size_t)nk) ||
            memcmp(g[0].hv, g[1].hv, 2 * (size_t)nk)) {
            printf("FAIL determinism: repetition %d of %d differs bitwise from the first\n", r + 1, reps);
            ok = 0;
        }
    }
    /* information only: does the default (atomic) mode vary? (allowed) */
    for (int r = 0; ok && r < 5; ++r) {
        if (run_bwd(&ba, 0, &vdq, &vdk, &vdk, &g[1], &err) != FA_OK) { ok = 0; break; }
        differ_default += memcmp(g[0].hq, g[1].hq, 2 * (size_t)nq) != 0;
    }
    printf("%s determinism: B%lld S%lld H%lld/%lld D%lld causal-br, %d deterministic repetitions bitwise equal; "
           "default mode dQ differed from it in %d of 5 runs (allowed)\n", ok ? "ok  " : "FAIL", (long long)B,
           (long long)S, (long long)Hq, (long long)Hkv, (long long)D, reps, differ_default);
    for (int r = 0; r < 2; ++r) {
        cudaFree(g[r].dq); cudaFree(g[r].dk); cudaFree(g[r].dv); free(g[r].hq); free(g[r].hk); free(g[r].hv);
    }
    for (int t = 0; t < 5; ++t) cudaFree(d[t]);
    cudaFree(dl);
    return ok;
}

// ----------------------------------------------------------------------------
// rejections: the call returns a status naming the argument, outputs untouched

static int check_rejections(void) {
    const int64_t B = 1, S = 64, H = 2, D = 64;
    const int64_t n = B * S * H * D;
    uint16_t *d = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)(8 * n + 64));
    float *dl = (float *)dmalloc(sizeof(float) * (size_t)(B * H * S));
    CK(cudaMemset(d, 0x11, sizeof(uint16_t) * (size_t)(8 * n + 64)));
    CK(cudaMemset(dl, 0, sizeof(float) * (size_t)(B * H * S)));
    int ok = 1;
    for (int which = 0; which < 3; ++which) {
        fa_bwd_args a;
        memset(&a, 0, sizeof(a));
        a.p.batch = B; a.p.seqlen_q = S; a.p.seqlen_k = S; a.p.heads_q = H; a.p.heads_kv = H;
        a.p.head_dim_qk = D; a.p.head_dim_v = D; a.p.dtype = FA_BF16; a.p.window_left = a.p.window_right = -1;
        fa_tensor *ts[8] = {&a.q, &a.k, &a.v, &a.o, &a.dout, &a.dq, &a.dk, &a.dv};
        for (int t = 0; t < 8; ++t) {
            ts[t]->ptr = d + t * n;
            ts[t]->stride[0] = S * H * D; ts[t]->stride[1] = H * D; ts[t]->stride[2] = D; ts[t]->stride[3] = 1;
        }
        a.lse.ptr = dl; a.lse.stride[0] = H * S; a.lse.stride[1] = S; a.lse.stride[2] = 1;
        fa_status want;
        const char *what;
        if (which == 0) { a.dk.ptr = a.k.ptr; want = FA_ERR_INVALID; what = "dk"; }            /* output overlaps input */
        else if (which == 1) { a.dq.stride[3] = 2; a.dq.stride[2] = 2 * D; a.dq.stride[1] = 2 * H * D; a.dq.stride[0] = 2 * n;
                               want = FA_ERR_UNSUPPORTED; what = "dq.stride[3]"; }             /* non-unit last stride */
        else { a.p.head_dim_qk = a.p.head_dim_v = 264; want = FA_ERR_UNSUPPORTED; what = "head_dim"; } /* too big */
        fa_error err;
        memset(&err, 0, sizeof(err));
        fa_status st = bwd_call(&a, &err);
        uint16_t *ho = (uint16_t *)hmalloc(sizeof(uint16_t) * (size_t)(3 * n));
        CK(cudaMemcpy(ho, d + 5 * n, sizeof(uint16_t) * (size_t)(3 * n), cudaMemcpyDeviceToHost));
        int64_t touched = 0;
        for (int64_t e = 0; e < 3 * n; ++e) touched += ho[e] != 0x1111;
        if (which == 0) { /* dk aliases k: k must be untouched too */
            CK(cudaMemcpy(ho, d + 1 * n, sizeof(uint16_t) * (size_t)n, cudaMemcpyDeviceToHost));
            for (int64_t e = 0; e < n; ++e) touched += ho[e] != 0x1111;
        }
        int good = st == want && touched == 0 && strncmp(err.arg, what, strlen(what)) == 0 && err.msg[0] != 0;
        printf("%s rejection %d: status %s (want %s), arg '%s', outputs touched %lld: %s\n", good ? "ok  " : "FAIL",
               which, fa_status_name(st), fa_status_name(want), err.arg, (long long)touched, err.msg);
        ok &= good;
        free(ho);
    }
    cudaFree(d); cudaFree(dl);
    return ok;
}


// ----------------------------------------------------------------------------
// special cases 1: NaN / Inf at positions hidden from some rows of a tile
//
// One problem per (geometry, injection, dtype): B 1, Sq = Sk = 150, Hq 2, Hkv 1,
// D 64 (fp16) or 128 (bf16). The kernels tile keys by 128 (dK/dV kernel) or 64
// (dQ kernel) and queries by 64, so key 100 and query row 90 both sit in tiles
// whose visibility differs from row to row. O and LSE come from the oracle's
// forward (rounded to the storage types), not from the CUDA forward, so that a
// forward bug cannot mask or fake a backward one. Then, for both modes:
//   - orc_compare_bwd: every element within its bound, NaN where the oracle says
//     NaN, the same Inf where it says Inf, finite where it is finite;
//   - the injection must have produced at least one non-finite reference element
//     (the case exercises propagation), and the tensors the hidden value could
//     leak into (the "guarded" one: dQ for K/V injections, dK and dV for dO/Q
//     injections) must keep at least one finite, judged element. (With a NaN/Inf
//     in K or V the oracle marks every dK/dV element UNCHECKABLE; dQ is judged.)

enum { NF_CAUSAL = 0, NF_WINDOW, NF_MASK_ENTRIES, NF_DEAD_ROWS, NF_GEOM_COUNT };
static const char *nf_geom_name[NF_GEOM_COUNT] = {"causal-diagonal", "window-edge", "mask-entries", "dead-rows"};
enum { NF_K_NAN = 0, NF_K_INF, NF_V_NAN, NF_DO_NAN, NF_Q_INF, NF_INJ_COUNT };
static const char *nf_inj_name[NF_INJ_COUNT] = {"K[key 100] NaN", "K[key 100] -Inf", "V[key 100] NaN",
                                                "dO[row 90] NaN", "Q[row 90] +Inf"};
#define NF_KEY 100
#define NF_ROW 90

/* the additive mask of a geometry, [Sq, Sk] broadcast over heads; NULL for none */
static float *nf_mask(int geom, int64_t Sq, int64_t Sk, uint64_t seed) {
    if (geom != NF_MASK_ENTRIES && geom != NF_DEAD_ROWS) return NULL;
    float *m = (float *)hmalloc(sizeof(float) * (size_t)(Sq * Sk));
    uint64_t s = seed;
    for (int64_t i = 0; i < Sq; ++i)
        for (int64_t j = 0; j < Sk; ++j) {
            float v = (float)(2.0 * rng_uniform(&s));
            if (geom == NF_MASK_ENTRIES) {
                /* key NF_KEY hidden from the even rows; row NF_ROW hides the odd keys */
                if (j == NF_KEY && i % 2 == 0) v = -INFINITY;
                if (i == NF_ROW && j % 2 == 1) v = -INFINITY;
            } else if (i == NF_ROW || i == 3) {
                v = -INFINITY; /* fully masked rows */
            }
            m[i * Sk + j] = v;
        }
    return m;
}

/* number of elements of a block whose reference is NaN/Inf, and finite judged ones */
static void nf_count(const orc_block *blk, int64_t *nonfinite, int64_t *finite) {
    *nonfinite = *finite = 0;
    for (int64_t e = 0; e < blk->n * blk->dim; ++e) {
        uint8_t f = blk->flags[e];
        if (f & (ORC_F_NAN | ORC_F_INF)) ++*nonfinite;
        else if (!(f & ORC_F_UNCHECKABLE)) ++*finite;
    }
}

static int nf_case(int idx, int geom, int inj, fa_dtype dt) {
    const int64_t B = 1, Sq = 150, Sk = 150, Hq = 2, Hkv = 1, D = dt == FA_F16 ? 64 : 128;
    const uint64_t seed = 0x7a70000ull + (uint64_t)idx * 104729;
    char label[160];
    snprintf(label, sizeof(label), "nonfinite #%d %s %s, %s D%lld", idx, fa_dtype_name(dt), nf_geom_name[geom],
             nf_inj_name[inj], (long long)D);

    fa_problem p;
    memset(&p, 0, sizeof(p));
    p.batch = B; p.seqlen_q = Sq; p.seqlen_k = Sk; p.heads_q = Hq; p.heads_kv = Hkv;
    p.head_dim_qk = p.head_dim_v = D; p.dtype = dt; p.window_left = p.window_right = -1;
    if (geom == NF_CAUSAL) p.causal = FA_CAUSAL_TOP_LEFT;
    if (geom == NF_WINDOW) { p.window_left = 20; p.window_right = 5; }

    // ---- inputs (dense BSHD), then the one non-finite value
    const int64_t nq = B * Sq * Hq * D, nk = B * Sk * Hkv * D;
    const int64_t sq[4] = {Sq * Hq * D, Hq * D, D, 1}, sk[4] = {Sk * Hkv * D, Hkv * D, D, 1};
    uint16_t *hq = (uint16_t *)hmalloc(2 * (size_t)nq), *hk = (uint16_t *)hmalloc(2 * (size_t)nk);
    uint16_t *hv = (uint16_t *)hmalloc(2 * (size_t)nk), *hdo = (uint16_t *)hmalloc(2 * (size_t)nq);
    fill_half(hq, nq, dt, 1.5, seed + 1, 0);
    fill_half(hk, nk, dt, 1.5, seed + 2, 0);
    fill_half(hv, nk, dt, 1.0, seed + 3, 0);
    fill_half(hdo, nq, dt, 1.0, seed + 4, 0);
    const uint16_t nan16 = 0x7fe0, /* a quiet NaN both as fp16 and as bf16 */
        pinf16 = dt == FA_F16 ? 0x7c00 : 0x7f80, ninf16 = pinf16 | 0x8000;
    switch (inj) {
    case NF_K_NAN: hk[NF_KEY * sk[1] + 3] = nan16; break;
    case NF_K_INF: hk[NF_KEY * sk[1] + 5] = ninf16; break;
    case NF_V_NAN: hv[NF_KEY * sk[1] + 7] = nan16; break;
    case NF_DO_NAN: hdo[NF_ROW * sq[1] + 1 * sq[2] + 2] = nan16; break; /* head 1 */
    case NF_Q_INF: hq[NF_ROW * sq[1] + 0 * sq[2] + 4] = pinf16; break;  /* head 0 */
    }
    float *hm = nf_mask(geom, Sq, Sk, seed + 5);
    fa_mask mask;
    memset(&mask, 0, sizeof(mask));
    if (hm) { mask.stride[2] = Sk; mask.stride[3] = 1; }

    // ---- O and LSE from the oracle's forward, rounded to the storage types
    fa_fwd_args fa;
    memset(&fa, 0, sizeof(fa));
    fa.p = p;
    fa.q.ptr = hq; fa.k.ptr = hk; fa.v.ptr = hv;
    memcpy(fa.q.stride, sq, 32); memcpy(fa.k.stride, sk, 32); memcpy(fa.v.stride, sk, 32);
    fa.mask = mask; fa.mask.ptr = hm;
    uint16_t *ho = (uint16_t *)hmalloc(2 * (size_t)nq);
    float *hl = (float *)hmalloc(sizeof(float) * (size_t)(B * Hq * Sq));
    fa.o.ptr = ho; memcpy(fa.o.stride, sq, 32);
    fa.lse.ptr = hl; fa.lse.stride[0] = Hq * Sq; fa.lse.stride[1] = Sq; fa.lse.stride[2] = 1;
    fa_precision prof = fa_backend_cuda()->precision;
    orc_options opt;
    orc_options_init(&opt);
    opt.threads = omp_threads;
    opt.baseline = 0;
    opt.seed = seed;
    fa_error err;
    memset(&err, 0, sizeof(err));
    orc_fwd_result fr;
    int ok = 1;
    if (orc_fwd(&fa, &prof, &opt, &fr, &err) != FA_OK) {
        printf("FAIL %s: oracle forward refused: %s: %s\n", label, err.arg, err.msg);
        return 0;
    }
    for (int64_t v = 0; v < fr.o.n; ++v) {
        const orc_index ix = fr.o.index[v];
        for (int64_t d = 0; d < D; ++d)
            ho[ix.b * sq[0] + ix.s * sq[1] + ix.h * sq[2] + d] = orc_encode(fr.o.ref[v * D + d], dt);
        hl[(ix.b * Hq + ix.h) * Sq + ix.s] = (float)fr.lse.ref[v];
    }
    orc_fwd_free(&fr);

    // ---- device copies, both modes
    uint16_t *d_in[5];
    const uint16_t *h_in[5] = {hq, hk, hv, ho, hdo};
    const int64_t n_in[5] = {nq, nk, nk, nq, nq};
    for (int t = 0; t < 5; ++t) {
        d_in[t] = (uint16_t *)dmalloc(2 * (size_t)n_in[t]);
        CK(cudaMemcpy(d_in[t], h_in[t], 2 * (size_t)n_in[t], cudaMemcpyHostToDevice));
    }
    float *d_l = (float *)dmalloc(sizeof(float) * (size_t)(B * Hq * Sq)), *d_m = NULL;
    CK(cudaMemcpy(d_l, hl, sizeof(float) * (size_t)(B * Hq * Sq), cudaMemcpyHostToDevice));
    if (hm) {
        d_m = (float *)dmalloc(sizeof(float) * (size_t)(Sq * Sk));
        CK(cudaMemcpy(d_m, hm, sizeof(float) * (size_t)(Sq * Sk), cudaMemcpyHostToDevice));
    }
    fa_bwd_args ba;
    memset(&ba, 0, sizeof(ba));
    ba.p = p;
    fa_tensor *ti[5] = {&ba.q, &ba.k, &ba.v, &ba.o, &ba.dout};
    for (int t = 0; t < 5; ++t) { ti[t]->ptr = d_in[t]; memcpy(ti[t]->stride, (t == 1 || t == 2) ? sk : sq, 32); }
    ba.lse.ptr = d_l; memcpy(ba.lse.stride, fa.lse.stride, sizeof(fa.lse.stride));
    ba.mask = mask; ba.mask.ptr = d_m;
    memcpy(ba.dq.stride, sq, 32); memcpy(ba.dk.stride, sk, 32); memcpy(ba.dv.stride, sk, 32);
    tc_view vdq = {{sq[0], sq[1], sq[2], sq[3]}, nq}, vdk = {{sk[0], sk[1], sk[2], sk[3]}, nk};
    tc_grads g[2];
    for (int r = 0; r < 2; ++r) {
        g[r].dq = (uint16_t *)dmalloc(2 * (size_t)nq); g[r].dk = (uint16_t *)dmalloc(2 * (size_t)nk);
        g[r].dv = (uint16_t *)dmalloc(2 * (size_t)nk);
        g[r].hq = (uint16_t *)hmalloc(2 * (size_t)nq); g[r].hk = (uint16_t *)hmalloc(2 * (size_t)nk);
        g[r].hv = (uint16_t *)hmalloc(2 * (size_t)nk);
        fa_status st = run_bwd(&ba, r, &vdq, &vdk, &vdk, &g[r], &err);
        if (st != FA_OK) {
            printf("FAIL %s: backward (%s) returned %s: %s\n", label, r ? "det" : "default", fa_status_name(st), err.msg);
            ok = 0;
        }
    }

    // ---- oracle backward on the host inputs, compare both modes
    if (ok) {
        fa_bwd_args h = ba;
        h.q.ptr = hq; h.k.ptr = hk; h.v.ptr = hv; h.o.ptr = ho; h.dout.ptr = hdo; h.lse.ptr = hl; h.mask.ptr = hm;
        orc_bwd_result res;
        if (orc_bwd(&h, &prof, &opt, &res, &err) != FA_OK) {
            printf("FAIL %s: oracle backward refused: %s: %s\n", label, err.arg, err.msg);
            ok = 0;
        } else {
            int64_t nf_q, fin_q, nf_k, fin_k, nf_v, fin_v;
            nf_count(&res.dq, &nf_q, &fin_q);
            nf_count(&res.dk, &nf_k, &fin_k);
            nf_count(&res.dv, &nf_v, &fin_v);
            const int guard_dq = inj == NF_K_NAN || inj == NF_K_INF || inj == NF_V_NAN;
            /* dead rows: a non-finite dO or Q row that sees nothing reaches nothing */
            const int expect_nonfinite = !(geom == NF_DEAD_ROWS && (inj == NF_DO_NAN || inj == NF_Q_INF));
            if ((expect_nonfinite && nf_q + nf_k + nf_v == 0) || (!expect_nonfinite && nf_q + nf_k + nf_v != 0) ||
                (guard_dq ? fin_q == 0 : (fin_k == 0 || fin_v == 0))) {
                printf("FAIL %s: test setup: reference non-finite dQ/dK/dV %lld/%lld/%lld, finite %lld/%lld/%lld\n",
                       label, (long long)nf_q, (long long)nf_k, (long long)nf_v, (long long)fin_q, (long long)fin_k,
                       (long long)fin_v);
                ok = 0;
            }
            for (int r = 0; r < 2 && ok; ++r) {
                fa_tensor tq = h.dq, tk = h.dk, tv = h.dv;
                tq.ptr = g[r].hq; tk.ptr = g[r].hk; tv.ptr = g[r].hv;
                orc_stats s3[3];
                if (orc_compare_bwd(&res, &tq, &tk, &tv, &s3[0], &s3[1], &s3[2], &err) != FA_OK) {
                    printf("FAIL %s: compare error: %s\n", label, err.msg);
                    ok = 0;
                    break;
                }
                /* with a NaN/Inf in K or V the oracle cannot bound dK/dV (all UNCHECKABLE): there dQ,
                 * the tensor the hidden key could leak into, is the one that must be judged */
                if (s3[0].failed || s3[1].failed || s3[2].failed || s3[0].checked == 0 ||
                    (!guard_dq && (s3[1].checked == 0 || s3[2].checked == 0))) {
                    char b[3][400];
                    orc_stats_format(&s3[0], "dQ", b[0], sizeof(b[0]));
                    orc_stats_format(&s3[1], "dK", b[1], sizeof(b[1]));
                    orc_stats_format(&s3[2], "dV", b[2], sizeof(b[2]));
                    printf("FAIL %s (%s mode):\n    %s\n    %s\n    %s\n", label, r ? "det" : "default", b[0], b[1], b[2]);
                    ok = 0;
                } else {
                    printf("ok   %s %s: reference non-finite dQ/dK/dV %lld/%lld/%lld, finite %lld/%lld/%lld all matched;"
                           " worst dQ %.3g dK %.3g dV %.3g\n", label, r ? "det" : "atm", (long long)nf_q, (long long)nf_k,
                           (long long)nf_v, (long long)fin_q, (long long)fin_k, (long long)fin_v, s3[0].worst_ratio,
                           s3[1].worst_ratio, s3[2].worst_ratio);
                }
            }
            orc_bwd_free(&res);
        }
    }
    for (int r = 0; r < 2; ++r) {
        cudaFree(g[r].dq); cudaFree(g[r].dk); cudaFree(g[r].dv); free(g[r].hq); free(g[r].hk); free(g[r].hv);
    }
    for (int t = 0; t < 5; ++t) cudaFree(d_in[t]);
    cudaFree(d_l); cudaFree(d_m);
    free(hq); free(hk); free(hv); free(hdo); free(ho); free(hl); free(hm);
    fflush(stdout);
    return ok;
}

// ----------------------------------------------------------------------------
// special cases 2: GPU fuzz findings, replayed from their case text
//
// Inputs materialized by case/ exactly as the campaign did (same seed, layouts,
// distributions); O and LSE from fa_cuda_forward as in the campaign; both modes
// judged by the oracle like every grid case.

static const char *finding_a63605906157a3f1 = /* fuzz/gpu_findings/cuda-h100-2026-11-22/a63605906157a3f1.case:
    fp16 dS past 65504 rounded to Inf, then Inf - Inf in dS K gave NaN dQ/dK */
    "shape = 2 193 20 8 1 128 128\n"
    "dtype = fp16\n"
    "scale = 0.00100000005\n"
    "causal = none\n"
    "window = -1 127\n"
    "window_align = bottom_right\n"
    "mask = full_rows density=0.050000000000000003 amp=0.5 width=2 shift=3\n"
    "mask_broadcast = heads\n"
    "dist.q = gaussian amp=0 prob=0.01\n"
    "dist.k = gaussian amp=0 prob=0\n"
    "dist.v = gaussian amp=1000 prob=0\n"
    "dist.do = large amp=0 prob=0.5\n"
    "seed = 0xd6820771424faf39\n"
    "backward = 1\n"
    "deterministic = 0\n";

static const char *finding_cuda_dq_nan = /* fuzz/regressions/bwd/dq_nan_fp16_large_qk_lse_ulp.case:
    fp16 q, k ~ 3e4 at D = 8: the recomputed P was e^16 (LSE's ulp), fp16 Inf, dS = Inf * 0 = NaN in dQ.
    Rows whose forward O overflowed are UNCHECKABLE for the oracle (given O not finite), and so is the
    one dK/dV column they all reach (Sk = 1): only dQ is required to have checked elements. */
    "shape = 1 37 1 1 1 8 8\n"
    "dtype = fp16\n"
    "scale = 0\n"
    "causal = none\n"
    "window = -1 -1\n"
    "window_align = top_left\n"
    "dist.q = large amp=0 prob=0.5\n"
    "dist.k = large amp=0 prob=0.5\n"
    "dist.v = gaussian amp=0 prob=0\n"
    "dist.do = gaussian amp=0 prob=0\n"
    "seed = 0xbbee36f88e84db3b\n"
    "backward = 1\n"
    "deterministic = 1\n";

static void *upload_buf(const fc_buf *b) {
    void *d = dmalloc(b->elem_size * (size_t)b->alloc_elems);
    if (b->alloc_elems) CK(cudaMemcpy(d, b->alloc, b->elem_size * (size_t)b->alloc_elems, cudaMemcpyHostToDevice));
    return d;
}
/* device pointer of element (0,0,0,0) of an uploaded buffer */
static void *dev_view(void *d, const fc_buf *b) { return (char *)d + b->elem_size * (size_t)(b->guard + b->offset); }

/* need_dkdv: dK and dV must have checked elements too (else only dQ must). */
static int finding_case(const char *name, const char *text, int need_dkdv) {
    fc_case c;
    char msg[300];
    if (fc_case_parse(text, &c, msg, sizeof(msg)) != 0) {
        printf("FAIL finding %s: case text: %s\n", name, msg);
        return 0;
    }
    const int ins[5] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_DO, FC_T_MASK};
    fc_buf buf[FC_T_COUNT];
    memset(buf, 0, sizeof(buf));
    int ok = 1;
    for (int t = 0; t < FC_T_COUNT && ok; ++t) {
        if (t == FC_T_MASK && c.mask.kind == FC_MASK_NONE) continue;
        if (fc_buf_alloc(&c, t, 0, FC_POISON_A, &buf[t], msg, sizeof(msg)) != 0) {
            printf("FAIL finding %s: buffer %s: %s\n", name, fc_tensor_name(t), msg);
            ok = 0;
        }
    }
    if (!ok) return 0;
    for (int x = 0; x < 5; ++x)
        if (buf[ins[x]].alloc) fc_case_fill(&c, &buf[ins[x]]);
    void *dv[FC_T_COUNT];
    for (int t = 0; t < FC_T_COUNT; ++t) dv[t] = buf[t].alloc ? upload_buf(&buf[t]) : NULL;
    fa_tensor tt[FC_T_COUNT];
    for (int t = 0; t < FC_T_COUNT; ++t) {
        memset(&tt[t], 0, sizeof(tt[t]));
        if (dv[t]) tt[t].ptr = dev_view(dv[t], &buf[t]);
        for (int k = 0; k < 4; ++k) tt[t].stride[k] = buf[t].stride[k];
    }
    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p = c.p;
    a.q = tt[FC_T_Q]; a.k = tt[FC_T_K]; a.v = tt[FC_T_V]; a.o = tt[FC_T_O];
    if (dv[FC_T_MASK]) { a.mask.ptr = (const float *)tt[FC_T_MASK].ptr; memcpy(a.mask.stride, tt[FC_T_MASK].stride, 32); }
    a.lse.ptr = (float *)tt[FC_T_LSE].ptr; memcpy(a.lse.stride, tt[FC_T_LSE].stride, 24);
    fa_error err;
    memset(&err, 0, sizeof(err));
    if (fa_cuda_forward(&a, &err) != FA_OK) {
        printf("FAIL finding %s: forward: %s\n", name, err.msg);
        ok = 0;
    }
    /* host copies of O and LSE for the oracle */
    if (ok) {
        CK(cudaMemcpy(buf[FC_T_O].alloc, dv[FC_T_O], 2 * (size_t)buf[FC_T_O].alloc_elems, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(buf[FC_T_LSE].alloc, dv[FC_T_LSE], 4 * (size_t)buf[FC_T_LSE].alloc_elems, cudaMemcpyDeviceToHost));
    }
    fa_bwd_args ba;
    memset(&ba, 0, sizeof(ba));
    ba.p = c.p; ba.q = a.q; ba.k = a.k; ba.v = a.v; ba.o = a.o; ba.lse = a.lse; ba.mask = a.mask;
    ba.dout = tt[FC_T_DO]; ba.dq = tt[FC_T_DQ]; ba.dk = tt[FC_T_DK]; ba.dv = tt[FC_T_DV];
    /* host result copies per mode (the poison around the views stays, which is fine: compared by view) */
    void *hres[2][3] = {{NULL, NULL, NULL}, {NULL, NULL, NULL}};
    const int outs[3] = {FC_T_DQ, FC_T_DK, FC_T_DV};
    for (int r = 0; r < 2 && ok; ++r) {
        for (int x = 0; x < 3; ++x) CK(cudaMemset(dv[outs[x]], 0xff, 2 * (size_t)buf[outs[x]].alloc_elems));
        ba.deterministic = r;
        fa_status st = bwd_call(&ba, &err);
        if (st != FA_OK) {
            printf("FAIL finding %s: backward (%s) returned %s: %s\n", name, r ? "det" : "default", fa_status_name(st), err.msg);
            ok = 0;
            break;
        }
        for (int x = 0; x < 3; ++x) {
            hres[r][x] = hmalloc(2 * (size_t)buf[outs[x]].alloc_elems);
            CK(cudaMemcpy(hres[r][x], dv[outs[x]], 2 * (size_t)buf[outs[x]].alloc_elems, cudaMemcpyDeviceToHost));
        }
    }
    if (ok) {
        fa_bwd_args h = ba;
        fa_tensor *hp[5] = {&h.q, &h.k, &h.v, &h.o, &h.dout};
        const int hid[5] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_O, FC_T_DO};
        for (int x = 0; x < 5; ++x) hp[x]->ptr = fc_buf_view(&buf[hid[x]]);
        h.lse.ptr = (float *)fc_buf_view(&buf[FC_T_LSE]);
        h.mask.ptr = buf[FC_T_MASK].alloc ? (const float *)fc_buf_view(&buf[FC_T_MASK]) : NULL;
        fa_precision prof = fa_backend_cuda()->precision;
        orc_options opt;
        orc_options_init(&opt);
        opt.threads = omp_threads;
        opt.baseline = 0;
        orc_bwd_result res;
        if (orc_bwd(&h, &prof, &opt, &res, &err) != FA_OK) {
            printf("FAIL finding %s: oracle refused: %s: %s\n", name, err.arg, err.msg);
            ok = 0;
        } else {
            for (int r = 0; r < 2 && ok; ++r) {
                fa_tensor o3[3];
                for (int x = 0; x < 3; ++x) {
                    o3[x] = tt[outs[x]];
                    o3[x].ptr = (char *)hres[r][x] + 2 * (size_t)(buf[outs[x]].guard + buf[outs[x]].offset);
                }
                orc_stats s3[3];
                if (orc_compare_bwd(&res, &o3[0], &o3[1], &o3[2], &s3[0], &s3[1], &s3[2], &err) != FA_OK) {
                    printf("FAIL finding %s: compare error: %s\n", name, err.msg);
                    ok = 0;
                    break;
                }
                char b[3][400];
                orc_stats_format(&s3[0], "dQ", b[0], sizeof(b[0]));
                orc_stats_format(&s3[1], "dK", b[1], sizeof(b[1]));
                orc_stats_format(&s3[2], "dV", b[2], sizeof(b[2]));
                const int good = !s3[0].failed && !s3[1].failed && !s3[2].failed && s3[0].checked > 0 &&
                                 (!need_dkdv || (s3[1].checked > 0 && s3[2].checked > 0));
                printf("%s finding %s (%s mode):\n    %s\n    %s\n    %s\n", good ? "ok  " : "FAIL", name,
                       r ? "det" : "default", b[0], b[1], b[2]);
                ok &= good;
            }
            orc_bwd_free(&res);
        }
    }
    for (int r = 0; r < 2; ++r)
        for (int x = 0; x < 3; ++x) free(hres[r][x]);
    for (int t = 0; t < FC_T_COUNT; ++t) { if (dv[t]) cudaFree(dv[t]); fc_buf_free(&buf[t]); }
    fflush(stdout);
    return ok;
}

/* small: the subset for compute-sanitizer runs (one K and one dO injection, on the
 * causal diagonal and on mask entries, both dtypes) */
static int check_special(int *ran, int small) {
    int failed = 0, idx = 0;
    for (int geom = 0; geom < NF_GEOM_COUNT; ++geom)
        for (int inj = 0; inj < NF_INJ_COUNT; ++inj)
            for (int dt = 0; dt < 2; ++dt, ++idx) {
                if (small && !((geom == NF_CAUSAL || geom == NF_MASK_ENTRIES) && (inj == NF_K_NAN || inj == NF_DO_NAN)))
                    continue;
                failed += !nf_case(idx, geom, inj, dt ? FA_BF16 : FA_F16);
                ++*ran;
            }
    failed += !finding_case("a63605906157a3f1", finding_a63605906157a3f1, 1);
    ++*ran;
    failed += !finding_case("cuda_dq_nan", finding_cuda_dq_nan, 0);
    ++*ran;
    return failed;
}

// ----------------------------------------------------------------------------
// main

int main(int argc, char **argv) {
    int quick = 0, big = 1, sanitize = 0, det_reps = 30, special = 1, special_only = 0;
    bwd_policy = fa_cuda_policy_default;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-big")) big = 0;
        else if (!strcmp(argv[i], "--sanitize")) sanitize = 1;
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows_sample = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) omp_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--det-reps") && i + 1 < argc) det_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--special-only")) special_only = 1;
        else if (!strcmp(argv[i], "--no-special")) special = 0;
        else if (!strcmp(argv[i], "--sm80")) bwd_policy.bwd_sm90 = 0;
        else {
            fprintf(stderr, "usage: %s [--quick] [--no-big] [--sanitize] [--rows N] [--threads N] [--det-reps N]"
                            " [--special-only] [--no-special] [--sm80]\n", argv[0]);
            return 2;
        }
    }
    if (fa_cuda_device_count() < 1) {
        fprintf(stderr, "FAIL: no CUDA device; this is a GPU test and must run on a GPU host\n");
        return 1;
    }
    int failed = 0, ran = 0;
    if (special) failed += check_special(&ran, sanitize);
    if (special_only) {
        printf("%d special cases%s: %d failed\n", ran, sanitize ? " (sanitize subset)" : "", failed);
        return failed ? 1 : 0;
    }
    build_grid(quick || sanitize, big && !sanitize);
    for (int i = 0; i < tc_n; ++i) {
        const tc_case *c = &tc_list[i];
        if (sanitize && (c->Sq > 300 || c->Sk > 300 || c->B * c->Hq > 64 || i % 3 != 0)) continue;
        failed += !run_case(i, c);
        ++ran;
    }
    if (!sanitize) failed += !check_determinism(det_reps);
    failed += !check_rejections();
    printf("%d cases (grid and special) + determinism + rejections: %d failed\n", ran, failed);
    return failed ? 1 : 0;
}
