/* fwd_certify_test.c: certification of the CUDA forward against the oracle.
 *
 * For every case of an awkward grid: random inputs (a fresh seed per case) in
 * the case's layout, outputs poisoned (O = 0xFFFF, a NaN, LSE = NaN), one
 * fa_cuda_forward, then
 *   1. every O element and LSE entry was written (no poison left),
 *   2. oracle (oracle/oracle.h) per-element bounds for the CUDA precision
 *      profile hold on the checked rows (all rows of small cases, a seeded
 *      sample of rows of big ones): orc_compare_fwd reports no failure,
 *   3. a second run gives bitwise identical O and LSE.
 * Plus rejections: layouts the kernel cannot run return a status and leave the
 * outputs untouched.
 *
 * Non-finite K/V at hidden keys (issue #4, grid section H): for a probe row i0,
 * the keys hidden from i0 next to its visible range (within 3 keys: causal
 * diagonal, window edges, key padding) and the first keys hidden from i0 only
 * by a -inf mask entry get NaN / +Inf / -Inf in every V (or every K) element.
 * Those keys lie in key blocks that other rows of the same CTA see. The oracle
 * never reads hidden positions, so a row that sees none of the poisoned keys
 * has a finite reference and the kernel must match it within the bound;
 * a row that sees one has a NaN/Inf reference (IEEE on the formulas) and the
 * kernel must give the same NaN/Inf. The case also asserts that both kinds of
 * rows occur (near-boundary finite rows, non-finite rows), so it cannot pass
 * vacuously. All rows are checked (no sampling). The kernel before the guard
 * (the old 0 * NaN leak) failed the V cases.
 *
 * Grid: seqlens 1 3 17 63 64 65 97 113 127 128 239 513 799 1023 1025 2048 4224
 * (Sq == Sk and Sq != Sk both ways), every head dim 8..256 step 8 in both
 * dtypes, every mask kind (causal top-left / bottom-right, windows left/right/
 * both in both alignments, additive masks with -inf: full, broadcast, key
 * padding, fully masked rows), GQA ratios 1, 2, 8, layouts BSHD / BHSD /
 * padded strides / fused QKV, empty problems, > 65535 (batch, head) pairs and
 * a Q/O tensor of more than 2^31 elements.
 *
 * usage: fwd_certify_test [--quick] [--no-big] [--sanitize] [--poison] [--rows N] [--threads N] [--mma-only]
 *                         [--no-ws]
 *   --sanitize: the small subset that sanitize_test.sh runs under compute-sanitizer
 *   --poison: only the non-finite hidden-key cases (section H)
 *   --mma-only: the mma.sync kernel for every case, also where an sm_90 device would run the
 *     wgmma kernel (head dims 104..128), so that both kernels are certified on an H100 (a test
 *     policy, kernels/cuda/testing.h; without it the calls are fa_cuda_forward's, as shipped)
 *   --no-ws: never the warp-specialized wgmma kernel (fwd_sm90_ws.cu), so that the plain wgmma
 *     kernel it falls back to is certified too
 * Exit status: 0 when every case passed, 1 otherwise (2: setup error).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/testing.h"
#include "kernels/flash_api.h"
#include "oracle/oracle.h"

/* The kernel policy of every call: the shipped default, or (--mma-only) never the wgmma kernel. */
static fa_cuda_policy fwd_policy;

static fa_status fwd_call(const fa_fwd_args *a, fa_error *err) { return fa_cuda_forward_policy(a, &fwd_policy, err); }

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

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
    int poison;    /* PZ_*: NaN/Inf at keys hidden from row `probe` (section H) */
    int64_t probe;
} tc_case;

enum { PZ_NONE = 0, PZ_V, PZ_K };
static const char *pz_name[3] = {"", " poison-V", " poison-K"};

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
    // H: NaN/Inf in V or K at keys hidden from a probe row inside key blocks that
    // other rows of the CTA see (causal diagonal, window edges, -inf mask entries,
    // key padding, fully masked rows); both dtypes; 128- and 64-row query blocks
    {
        typedef struct { int64_t Sq, Sk, D; int kind; int64_t wl, wr; } pz_spec;
        const pz_spec specs[9] = {
            {200, 200, 128, 1, -1, -1},   // causal top-left, diagonal block (64-row blocks)
            {130, 300, 64, 2, -1, -1},    // causal bottom-right, D = 64 (128x128 blocks)
            {257, 257, 128, 3, 37, 5},    // window both sides
            {300, 400, 64, 4, 100, 0},    // window left + diagonal, bottom-right
            {150, 190, 128, 8, -1, -1},   // full additive mask with -inf entries
            {300, 300, 128, 10, -1, -1},  // key padding mask (-inf on the last keys)
            {210, 210, 64, 11, 50, 50},   // fully masked rows (probe is one) + window
            {2100, 2100, 128, 1, -1, -1}, // causal, long: 128-row blocks
            {1100, 1100, 128, 0, 300, -1},// left window only: 128-row blocks, left edge
        };
        for (int sp = 0; sp < 9; ++sp)
            for (int mode = PZ_V; mode <= PZ_K; ++mode)
                for (int dt = 0; dt < 2; ++dt) {
                    const pz_spec *z = &specs[sp];
                    tc_case c = base_case(z->Sq, z->Sk, z->D, dt ? FA_BF16 : FA_F16);
                    set_mask_kind(&c, z->kind);
                    if (z->wl >= 0 || z->wr >= 0) { c.wl = z->wl; c.wr = z->wr; }
                    c.B = 1; c.Hq = 2; c.Hkv = 1;
                    c.poison = mode;
                    c.probe = z->Sq / 2 + 3;
                    if (c.mask == MK_ROWS) c.probe = (c.probe / 5) * 5 + 2;  // a fully masked row
                    add(c);
                }
    }
    // G: more than 2^31 elements in Q and O (64-bit offsets): Sq * Hq * D = 150001 * 128 * 128
    // = 2.46e9; rows i >= 131072 (13% of them) start past element 2^31. Every row sees all
    // 65 keys (no mask), so the sampled rows carry real values; the poison scan covers all rows.
    if (big) {
        tc_case c = base_case(150001, 65, 128, FA_BF16);
        c.B = 1; c.Hq = 128; c.Hkv = 1; c.big = 1;
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

/* tiled: repeat a block of 4194301 (prime) elements, so an offset that wrapped
 * at 2^31 or 2^32 elements reads different values, never the same ones. */
static void fill_half(uint16_t *p, int64_t n, fa_dtype dt, double amp, uint64_t seed, int tiled) {
    uint64_t s = seed;
    int64_t m = tiled && n > 4194301 ? 4194301 : n;
    for (int64_t i = 0; i < m; ++i) p[i] = orc_encode(amp * rng_uniform(&s), dt);
    for (int64_t i = m; i < n; i += m) memcpy(p + i, p, sizeof(uint16_t) * (size_t)(n - i < m ? n - i : m));
}

// ----------------------------------------------------------------------------
// visibility as flash_api.h states it (test-side, for choosing poisoned keys and
// for the non-vacuity counts; the pass/fail verdict comes from the oracle)

static int tc_visible(const tc_case *c, const float *hm, const int64_t *mst, int64_t b, int64_t h, int64_t i,
                      int64_t j) {
    const int br = c->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                   (c->causal == FA_CAUSAL_NONE && c->align == FA_ALIGN_BOTTOM_RIGHT);
    const int64_t diag = i + (br ? c->Sk - c->Sq : 0);
    if (c->causal != FA_CAUSAL_NONE && j > diag) return 0;
    if (c->wl >= 0 && j < diag - c->wl) return 0;
    if (c->wr >= 0 && j > diag + c->wr) return 0;
    if (hm && hm[b * mst[0] + h * mst[1] + i * mst[2] + j * mst[3]] == -INFINITY) return 0;
    return 1;
}

static double poison_value(int64_t k) {
    switch (k % 3) {
    case 0: return NAN;
    case 1: return INFINITY;
    default: return -INFINITY;
    }
}

/* Mark (in *pz, [B, Hkv, Sk]) and poison the keys hidden from row c->probe of the
 * group's first query head: hidden keys within 3 of a visible one, and the first
 * two keys that only the mask hides. Every element of the V (or K) row gets
 * NaN, +Inf or -Inf. Returns the number of poisoned (b, hkv, j). */
static int64_t apply_poison(const tc_case *c, const float *hm, const int64_t *mst, uint16_t *hk, const int64_t *kst,
                            uint16_t *hv, const int64_t *vst, unsigned char *pz) {
    const int64_t Sk = c->Sk, G = c->Hq / c->Hkv, i0 = c->probe;
    int64_t n = 0;
    unsigned char *vis = (unsigned char *)malloc((size_t)(Sk ? Sk : 1));
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t hk_ = 0; hk_ < c->Hkv; ++hk_) {
            for (int64_t j = 0; j < Sk; ++j) vis[j] = (unsigned char)tc_visible(c, hm, mst, b, hk_ * G, i0, j);
            int mask_only = 0;
            for (int64_t j = 0; j < Sk; ++j) {
                int near = 0;
                for (int64_t d = -3; d <= 3 && !near; ++d) near = j + d >= 0 && j + d < Sk && vis[j + d];
                int by_mask = 0;
                if (!vis[j] && hm && mask_only < 2 && tc_visible(c, NULL, mst, b, hk_ * G, i0, j)) {
                    by_mask = 1;
                    mask_only++;
                }
                pz[(b * c->Hkv + hk_) * Sk + j] = (unsigned char)(!vis[j] && (near || by_mask));
                if (!pz[(b * c->Hkv + hk_) * Sk + j]) continue;
                n++;
                uint16_t *row = c->poison == PZ_V ? hv + b * vst[0] + j * vst[1] + hk_ * vst[2]
                                                  : hk + b * kst[0] + j * kst[1] + hk_ * kst[2];
                for (int64_t d = 0; d < c->D; ++d) row[d] = orc_encode(poison_value(d + j), c->dt);
            }
        }
    free(vis);
    return n;
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

static fa_precision cuda_profile(void) { return fa_backend_cuda()->precision; }

static int rows_sample = 48, omp_threads = 0;

static void *dmalloc(size_t n) {
    void *p = NULL;
    if (n == 0) n = 16;
    CK(cudaMalloc(&p, n));
    return p;
}

/* Section H, after orc_compare_fwd passed (which already holds every finite
 * reference row to its bound and every NaN/Inf reference element to the same
 * NaN/Inf). Cross-check and non-vacuity:
 *   - a row's reference is non-finite exactly when the row sees a poisoned key
 *     (every element of a poisoned V/K row is NaN or +-Inf);
 *   - the case has finite rows that a poisoned key is hidden from while a key
 *     within 8 of it is visible to them, or that only the mask hides it from,
 *     or that see no key at all (the rows the old kernel leaked into). */
static int poison_rows_ok(const tc_case *c, const orc_fwd_result *res, const float *hm, const int64_t *mst,
                          const unsigned char *pz, int64_t n_poisoned, const char *label) {
    const int64_t Sk = c->Sk, G = c->Hq / c->Hkv, Dv = res->o.dim;
    int64_t rows_seeing = 0, rows_hidden_near = 0, disagree = 0;
    for (int64_t r = 0; r < res->o.n; ++r) {
        const orc_index *ix = &res->o.index[r];
        const unsigned char *zrow = pz + (ix->b * c->Hkv + ix->h / G) * Sk;
        int nonfinite = 0, sees = 0, near = 0, any_vis = 0;
        for (int64_t d = 0; d < Dv; ++d) nonfinite |= (res->o.flags[r * Dv + d] & (ORC_F_NAN | ORC_F_INF)) != 0;
        for (int64_t j = 0; j < Sk; ++j) {
            const int v = tc_visible(c, hm, mst, ix->b, ix->h, ix->s, j);
            any_vis |= v;
            sees |= v && zrow[j];
        }
        disagree += sees != nonfinite;
        if (sees) { rows_seeing++; continue; }
        for (int64_t j = 0; j < Sk && !near; ++j) {
            if (!zrow[j]) continue;
            if (!any_vis || tc_visible(c, NULL, mst, ix->b, ix->h, ix->s, j)) { near = 1; break; }
            for (int64_t d = -8; d <= 8 && !near; ++d)
                near = j + d >= 0 && j + d < Sk && tc_visible(c, hm, mst, ix->b, ix->h, ix->s, j + d);
        }
        rows_hidden_near += near;
    }
    if (n_poisoned == 0 || rows_hidden_near == 0 || disagree) {
        printf("FAIL %s: poison case: %lld keys poisoned, %lld rows see one, %lld rows where the oracle's "
               "NaN/Inf flag and the test's visibility disagree, %lld finite rows with a poisoned key hidden "
               "next to a visible one (must be > 0)\n",
               label, (long long)n_poisoned, (long long)rows_seeing, (long long)disagree, (long long)rows_hidden_near);
        return 0;
    }
    printf("ok   %s: %lld keys poisoned; %lld rows see one (NaN/Inf as the oracle says), %lld finite rows next "
           "to a hidden poisoned key within bounds\n",
           label, (long long)n_poisoned, (long long)rows_seeing, (long long)rows_hidden_near);
    return 1;
}

static int run_case(int idx, const tc_case *c) {
    const int64_t B = c->B, Sq = c->Sq, Sk = c->Sk, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    uint64_t seed = 0x5eed0000ull + (uint64_t)idx * 7919;
    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p.batch = B; a.p.seqlen_q = Sq; a.p.seqlen_k = Sk; a.p.heads_q = Hq; a.p.heads_kv = Hkv;
    a.p.head_dim_qk = D; a.p.head_dim_v = D; a.p.dtype = c->dt; a.p.softmax_scale = c->scale;
    a.p.causal = c->causal; a.p.window_left = c->wl; a.p.window_right = c->wr; a.p.window_align = c->align;

    // ---- host inputs in their layout
    tc_view vq, vk, vv, vo;
    uint16_t *hqkv = NULL, *hq, *hk, *hv;
    int64_t n_qkv = 0;
    if (c->layout == LAY_QKV) {  // one buffer [B, S, Hq + 2 Hkv, D]: q, k, v are head slices
        int64_t Ht = Hq + 2 * Hkv;
        int64_t dims[4] = {B, Sq, Ht, D};
        int64_t st[4] = {Sq * Ht * D, Ht * D, D, 1};
        n_qkv = extent4(dims, st);
        hqkv = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(n_qkv ? n_qkv : 1));
        fill_half(hqkv, n_qkv, c->dt, 1.5, seed + 1, 0);
        for (int i = 0; i < 4; ++i) vq.st[i] = vk.st[i] = vv.st[i] = st[i];
        int64_t dq[4] = {B, Sq, Hq, D}, dk[4] = {B, Sk, Hkv, D};
        vq.extent = extent4(dq, st); vk.extent = extent4(dk, st); vv.extent = vk.extent;
        hq = hqkv; hk = hqkv + Hq * D; hv = hqkv + (Hq + Hkv) * D;
    } else {
        vq = make_view(c->layout, B, Sq, Hq, D);
        vk = make_view(c->layout, B, Sk, Hkv, D);
        vv = make_view(c->layout, B, Sk, Hkv, D);
        hq = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(vq.extent ? vq.extent : 1));
        hk = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(vk.extent ? vk.extent : 1));
        hv = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(vv.extent ? vv.extent : 1));
        // poison cases: |score| stays small, so no visible P rounds to 0 in fp16
        // (the exact p * Inf is Inf; a P rounded to 0 would give 0 * Inf = NaN)
        fill_half(hq, vq.extent, c->dt, c->poison ? 0.5 : 1.5, seed + 1, c->big);
        fill_half(hk, vk.extent, c->dt, 1.5, seed + 2, c->big);
        fill_half(hv, vv.extent, c->dt, 1.0, seed + 3, c->big);
    }
    vo = make_view(c->layout == LAY_QKV ? LAY_BSHD : c->layout, B, Sq, Hq, D);

    // ---- additive mask
    float *hm = NULL;
    int64_t n_mask = 0;
    int64_t mst[4] = {0, 0, 0, 0};
    if (c->mask != MK_NONE) {
        uint64_t s = seed + 4;
        if (c->mask == MK_FULL) {
            mst[3] = 1; mst[2] = Sk; mst[1] = Sq * Sk; mst[0] = Hq * Sq * Sk;
            n_mask = B * Hq * Sq * Sk;
        } else if (c->mask == MK_KEYPAD) {  // [B, 1, 1, Sk] broadcast over heads and rows
            mst[3] = 1; mst[2] = 0; mst[1] = 0; mst[0] = Sk;
            n_mask = B * Sk;
        } else {  // [1, 1, Sq, Sk] broadcast over batch and heads
            mst[3] = 1; mst[2] = Sk; mst[1] = 0; mst[0] = 0;
            n_mask = Sq * Sk;
        }
        hm = (float *)malloc(sizeof(float) * (size_t)(n_mask ? n_mask : 1));
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

    // ---- NaN/Inf at hidden keys (section H)
    unsigned char *pz = NULL;
    int64_t n_poisoned = 0;
    if (c->poison) {
        pz = (unsigned char *)calloc((size_t)(B * Hkv * (Sk ? Sk : 1)), 1);
        n_poisoned = apply_poison(c, hm, mst, hk, vk.st, hv, vv.st, pz);
    }

    // ---- device buffers
    uint16_t *dq, *dk, *dv, *dqkv = NULL, *d_o, *d_o2;
    float *d_lse, *d_lse2, *dm = NULL;
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
    CK(cudaMemset(d_o, 0xff, sizeof(uint16_t) * (size_t)vo.extent));
    CK(cudaMemset(d_lse, 0xff, sizeof(float) * (size_t)n_lse));

    a.q.ptr = dq; a.k.ptr = dk; a.v.ptr = dv; a.o.ptr = d_o;
    memcpy(a.q.stride, vq.st, sizeof(vq.st)); memcpy(a.k.stride, vk.st, sizeof(vk.st));
    memcpy(a.v.stride, vv.st, sizeof(vv.st)); memcpy(a.o.stride, vo.st, sizeof(vo.st));
    a.lse.ptr = d_lse; a.lse.stride[0] = Hq * Sq; a.lse.stride[1] = Sq; a.lse.stride[2] = 1;
    a.mask.ptr = dm; memcpy(a.mask.stride, mst, sizeof(mst));

    // ---- run
    fa_error err;
    memset(&err, 0, sizeof(err));
    fa_status st = fwd_call(&a, &err);
    char label[160];
    snprintf(label, sizeof(label), "#%d B%lld Sq%lld Sk%lld H%lld/%lld D%lld %s c%d w%lld,%lld a%d m=%s %s%s%s", idx,
             (long long)B, (long long)Sq, (long long)Sk, (long long)Hq, (long long)Hkv, (long long)D,
             c->dt == FA_BF16 ? "bf16" : "fp16", (int)c->causal, (long long)c->wl, (long long)c->wr, (int)c->align,
             mk_name[c->mask], lay_name[c->layout], c->scale != 0 ? " scale" : "", pz_name[c->poison]);
    int ok = 1;
    if (st != FA_OK) {
        printf("FAIL %s: forward returned %s (%s: %s)\n", label, fa_status_name(st), err.arg, err.msg);
        ok = 0;
    }

    uint16_t *ho = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(vo.extent ? vo.extent : 1));
    float *hl = (float *)malloc(sizeof(float) * (size_t)(n_lse ? n_lse : 1));
    if (ok) {
        CK(cudaMemcpy(ho, d_o, sizeof(uint16_t) * (size_t)vo.extent, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hl, d_lse, sizeof(float) * (size_t)n_lse, cudaMemcpyDeviceToHost));
        // 1. every element written
        int64_t unwritten = 0;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t i = 0; i < Sq; ++i)
                for (int64_t h = 0; h < Hq; ++h)
                    for (int64_t d = 0; d < D; ++d)
                        unwritten += ho[b * vo.st[0] + i * vo.st[1] + h * vo.st[2] + d] == 0xffff;
        for (int64_t e = 0; e < n_lse; ++e) {
            uint32_t u;
            memcpy(&u, &hl[e], 4);
            unwritten += u == 0xffffffffu;
        }
        if (unwritten) {
            printf("FAIL %s: %lld output elements still hold the poison pattern\n", label, (long long)unwritten);
            ok = 0;
        }
    }
    if (ok && B * Sq * Hq > 0) {
        // 2. oracle bounds on all rows (small) or a seeded sample of rows
        fa_fwd_args h = a;
        h.q.ptr = hq; h.k.ptr = hk; h.v.ptr = hv; h.mask.ptr = hm;
        h.o.ptr = ho; h.lse.ptr = hl;
        h.stream = NULL;
        orc_options opt;
        orc_options_init(&opt);
        opt.max_rows = B * Hq * Sq > 4 * rows_sample && !c->poison ? (c->big ? 8 * rows_sample : rows_sample) : 0;
        opt.seed = seed;
        opt.threads = omp_threads;
        opt.baseline = 0;
        orc_fwd_result res;
        fa_precision prof = cuda_profile();
        fa_status os = orc_fwd(&h, &prof, &opt, &res, &err);
        if (os != FA_OK) {
            printf("FAIL %s: oracle refused the case: %s (%s: %s)\n", label, fa_status_name(os), err.arg, err.msg);
            ok = 0;
        } else {
            orc_stats so, sl;
            fa_tensor ot = h.o;
            fa_lse lt = h.lse;
            os = orc_compare_fwd(&res, &ot, &lt, &so, &sl, &err);
            if (os != FA_OK) {
                printf("FAIL %s: compare error %s: %s\n", label, err.arg, err.msg);
                ok = 0;
            } else {
                if (so.failed || sl.failed || so.checked == 0) {
                    char b1[400], b2[400];
                    orc_stats_format(&so, "O", b1, sizeof(b1));
                    orc_stats_format(&sl, "LSE", b2, sizeof(b2));
                    printf("FAIL %s:\n    %s\n    %s\n", label, b1, b2);
                    ok = 0;
                } else if (c->poison && !poison_rows_ok(c, &res, hm, mst, pz, n_poisoned, label)) {
                    ok = 0;
                } else {
                    printf("ok   %s: rows %lld, O worst %.3g (median %.2g), LSE worst %.3g\n", label,
                           (long long)res.o.n, so.worst_ratio, so.median_ratio, sl.worst_ratio);
                }
            }
            orc_fwd_free(&res);
        }
    } else if (ok) {
        printf("ok   %s: empty problem, returned FA_OK\n", label);
    }

    // 3. bitwise identical on a second run
    if (ok && !c->big && vo.extent > 0) {
        d_o2 = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)vo.extent);
        d_lse2 = (float *)dmalloc(sizeof(float) * (size_t)n_lse);
        CK(cudaMemset(d_o2, 0xff, sizeof(uint16_t) * (size_t)vo.extent));
        CK(cudaMemset(d_lse2, 0xff, sizeof(float) * (size_t)n_lse));
        fa_fwd_args a2 = a;
        a2.o.ptr = d_o2; a2.lse.ptr = d_lse2;
        st = fwd_call(&a2, &err);
        uint16_t *ho2 = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)vo.extent);
        float *hl2 = (float *)malloc(sizeof(float) * (size_t)(n_lse ? n_lse : 1));
        CK(cudaMemcpy(ho2, d_o2, sizeof(uint16_t) * (size_t)vo.extent, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hl2, d_lse2, sizeof(float) * (size_t)n_lse, cudaMemcpyDeviceToHost));
        if (st != FA_OK || memcmp(ho, ho2, sizeof(uint16_t) * (size_t)vo.extent) != 0 ||
            memcmp(hl, hl2, sizeof(float) * (size_t)n_lse) != 0) {
            printf("FAIL %s: second run differs bitwise (status %s)\n", label, fa_status_name(st));
            ok = 0;
        }
        free(ho2); free(hl2);
        cudaFree(d_o2); cudaFree(d_lse2);
    }

    free(ho); free(hl); free(hm); free(pz);
    if (hqkv) free(hqkv);
    else { free(hq); free(hk); free(hv); }
    if (dqkv) cudaFree(dqkv);
    else { cudaFree(dq); cudaFree(dk); cudaFree(dv); }
    cudaFree(dm); cudaFree(d_o); cudaFree(d_lse);
    fflush(stdout);
    return ok;
}

// ----------------------------------------------------------------------------
// rejections: the call returns a status and leaves the outputs untouched

static int check_rejections(void) {
    const int64_t B = 1, S = 64, H = 2, D = 64;
    const int64_t n = B * S * H * D;
    uint16_t *d = (uint16_t *)dmalloc(sizeof(uint16_t) * (size_t)(4 * n + 64));
    float *dl = (float *)dmalloc(sizeof(float) * (size_t)(B * H * S));
    CK(cudaMemset(d, 0x11, sizeof(uint16_t) * (size_t)(4 * n + 64)));
    CK(cudaMemset(dl, 0x22, sizeof(float) * (size_t)(B * H * S)));
    int ok = 1;
    for (int which = 0; which < 3; ++which) {
        fa_fwd_args a;
        memset(&a, 0, sizeof(a));
        a.p.batch = B; a.p.seqlen_q = S; a.p.seqlen_k = S; a.p.heads_q = H; a.p.heads_kv = H;
        a.p.head_dim_qk = D; a.p.head_dim_v = D; a.p.dtype = FA_BF16; a.p.window_left = a.p.window_right = -1;
        fa_tensor *ts[4] = {&a.q, &a.k, &a.v, &a.o};
        for (int t = 0; t < 4; ++t) {
            ts[t]->ptr = d + t * n;
            ts[t]->stride[0] = S * H * D; ts[t]->stride[1] = H * D; ts[t]->stride[2] = D; ts[t]->stride[3] = 1;
        }
        a.lse.ptr = dl; a.lse.stride[0] = H * S; a.lse.stride[1] = S; a.lse.stride[2] = 1;
        fa_status want;
        const char *what;
        uint16_t *host_q = NULL;
        if (which == 0) {  // a k row stride that is not a multiple of 8 elements (K is then [.., S*H*D - ...])
            a.k.stride[1] = H * D - 4; a.k.stride[2] = D - 2; want = FA_ERR_UNSUPPORTED; what = "k.stride";
        } else if (which == 1) {  // a q pointer 2 bytes off a 16-byte boundary
            a.q.ptr = d + 1; want = FA_ERR_UNSUPPORTED; what = "q.ptr";
        } else {  // a host pointer
            host_q = (uint16_t *)calloc((size_t)n, sizeof(uint16_t));
            a.q.ptr = host_q; want = FA_ERR_INVALID; what = "q.ptr";
        }
        fa_error err;
        memset(&err, 0, sizeof(err));
        fa_status st = fwd_call(&a, &err);
        uint16_t *ho = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)n);
        float *hl = (float *)malloc(sizeof(float) * (size_t)(B * H * S));
        CK(cudaMemcpy(ho, d + 3 * n, sizeof(uint16_t) * (size_t)n, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hl, dl, sizeof(float) * (size_t)(B * H * S), cudaMemcpyDeviceToHost));
        int64_t touched = 0;
        for (int64_t e = 0; e < n; ++e) touched += ho[e] != 0x1111;
        for (int64_t e = 0; e < B * H * S; ++e) { uint32_t u; memcpy(&u, &hl[e], 4); touched += u != 0x22222222u; }
        int good = st == want && touched == 0 && strncmp(err.arg, what, strlen(what)) == 0 && err.msg[0] != 0;
        printf("%s rejection %d: status %s (want %s), arg '%s', outputs touched %lld: %s\n", good ? "ok  " : "FAIL",
               which, fa_status_name(st), fa_status_name(want), err.arg, (long long)touched, err.msg);
        ok &= good;
        free(ho); free(hl); free(host_q);
    }
    cudaFree(d); cudaFree(dl);
    return ok;
}

// ----------------------------------------------------------------------------
// main

int main(int argc, char **argv) {
    fwd_policy = fa_cuda_policy_default;
    int quick = 0, big = 1, sanitize = 0, poison_only = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-big")) big = 0;
        else if (!strcmp(argv[i], "--sanitize")) sanitize = 1;
        else if (!strcmp(argv[i], "--poison")) poison_only = 1;
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows_sample = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) omp_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mma-only")) fwd_policy.fwd_sm90 = 0;
        else if (!strcmp(argv[i], "--no-ws")) fwd_policy.fwd_ws = 0;
        else { fprintf(stderr, "usage: %s [--quick] [--no-big] [--sanitize] [--poison] [--rows N] [--threads N] [--mma-only] [--no-ws]\n", argv[0]); return 2; }
    }
    if (fa_cuda_device_count() < 1) {
        fprintf(stderr, "FAIL: no CUDA device; this is a GPU test and must run on a GPU host\n");
        return 1;
    }
    build_grid(quick || sanitize, big && !sanitize);
    int failed = 0, ran = 0;
    for (int i = 0; i < tc_n; ++i) {
        const tc_case *c = &tc_list[i];
        // sanitizer subset: short sequences (the tools slow kernels 10-100x), every third case
        if (sanitize && (c->Sq > 300 || c->Sk > 300 || c->B * c->Hq > 64 || i % 3 != 0)) continue;
        if (poison_only && !c->poison) continue;
        failed += !run_case(i, c);
        ++ran;
    }
    if (!poison_only) failed += !check_rejections();
    printf("%d cases%s: %d failed\n", ran, poison_only ? "" : " + rejections", failed);
    return failed ? 1 : 0;
}
