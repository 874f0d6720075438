/* flash_bwd.cu: the CUDA flash-attention backward (fa_cuda_backward).
 *
 * Prefix bwd_. Contract: kernels/flash_api.h; seam: kernels/cuda/cuda_backend.h.
 *
 * Kernels, run in order on args->stream:
 *   1. bwd_prep_kernel   one warp per query row: Dsum_i = dO_i . O_i (fp32) and a
 *                        compact copy of the LSE (+inf for a dead row, so that
 *                        exp(s - lse) = 0 without a test); workspace [B, Hq, Sq];
 *                        plus the screen (NaN/Inf in Q, dO, K; bounds of |dS|),
 *                        read back by the host, which picks the fast kernels or
 *                        the exact ones (EXACT: slow paths per tile, see "non-finite
 *                        inputs and dS overflow" below).
 *   2. bwd_dkdv_kernel   one CTA per (batch, kv head, KV block of 64, column half):
 *                        K and V stay in shared memory while the query blocks of
 *                        every query head of the GQA group stream through (double
 *                        buffered cp.async). Per query block: S^T = K Q^T, P^T,
 *                        dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - Dsum),
 *                        dK += dS^T Q; dK and dV live in registers for the whole
 *                        loop, so the GQA sum is in a fixed order. Default mode:
 *                        dS goes through shared memory and dQ_partial = dS K is
 *                        added to an fp32 workspace with atomics.
 *   2h. on an H100 (sm_90), fast calls, head dim padded to 64 or 128, 16-byte views:
 *                        bwd_g_dkdv_kernel instead of 2, the same algorithm on warpgroup
 *                        MMA (wgmma), 128 keys per CTA; default mode (DQ = true): dQ partials
 *                        staged in shared memory and added to the workspace by bulk reductions;
 *                        deterministic mode (DQ = false): dK and dV only, then 2q (section 2h).
 *   2q. after 2h in the deterministic mode: bwd_g_dq_kernel, 3b on wgmma: one CTA per (batch,
 *                        query head, query block of 128), Q, dO resident, K/V blocks of 64
 *                        stream, P and dS recomputed, dQ summed in the wgmma accumulators in
 *                        kv order (section 2q).
 *   3a. default:         bwd_dq_convert_kernel: dQ = scale * workspace, rounded.
 *   3b. deterministic:   bwd_dq_kernel, one CTA per (batch, query head, query block
 *                        of 64, column half): Q, dO resident, K/V blocks stream,
 *                        P and dS recomputed, dQ summed in registers in kv order.
 *                        No atomics anywhere: dQ, dK, dV are bitwise reproducible.
 *
 * Arithmetic (what the oracle's precision profile should say for this backward):
 *   S = Q K^T by mma.sync m16n8k16, fp32 accumulate (tensor-core truncation, u = 2^-23);
 *   t = fmaf(S, scale, mask) - lse (two fp32 roundings), P = ex2.approx(t * log2 e)
 *   (one more rounding, ex2 rel. err ~2^-22); P rounded (RN) to the input dtype and that
 *   rounded P is used for dV = P^T dO and for dS = P (dP - Dsum) (fp32); dS rounded (RN)
 *   to the input dtype before dS K and dS^T Q; Dsum accumulated in fp32 (RN, sequential
 *   per lane then a butterfly); dQ partials added in fp32 (RN) by atomics in the default
 *   mode (order varies; the sm_90 kernel adds them with bulk reductions, cp.reduce.async.bulk
 *   .add.f32: fp32 adds done at L2 like the atomics', held to the same oracle bounds by the
 *   certification; the PTX manual we could check does not state their rounding) or summed in the mma
 *   accumulator in kv order (deterministic); wgmma accumulates like mma.sync (fp32, truncating);
 *   dQ and dK multiplied by scale in fp32, then every output rounded (RN) once.
 *
 * Tiles (dK/dV kernel): 8 warps, 128 kv rows x 64 query rows (4 warps, 64 x 64 for head
 * dim 256); dQ kernel: 4 warps, 64 x 64. Head dims padded to 64, 128 or 256 with zeros
 * (loads zero-fill), the dK/dV/dQ columns split in halves of 128 for 256.
 * All global offsets are 64-bit. */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/bwd/bwd_ptx.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/sm90/gmma.h"

// ----------------------------------------------------------------------------
// tile parameters

#define BWD_WARPS 4
#define BWD_THREADS (BWD_WARPS * 32)
#define BWD_BC 64 /* kv rows per block */
#define BWD_BR 64 /* query rows per block */
#define BWD_LOG2E 1.4426950408889634f

/* Everything a kernel needs, by value. Strides in elements; 16-bit data views
 * are [batch, seq, head, dim] with unit dim stride. */
typedef struct {
    const uint16_t *q, *k, *v, *o, *dout;
    int64_t qs[3], ks[3], vs[3], os[3], dos[3];
    uint16_t *dq, *dk, *dv;
    int64_t dqs[3], dks[3], dvs[3];
    const float *lse;
    int64_t lses[3];
    const float *mask; /* NULL: none */
    int64_t ms[4];
    float *lse_ws;  /* [B, Hq, Sq] compact LSE, +inf for dead rows */
    float *dsum_ws; /* [B, Hq, Sq] rowsum(dO * O) */
    float *dq_ws;   /* [B, Hq, Sq, D] fp32 dQ accumulator (default mode) */
    unsigned *screen; /* [4], zeroed per call, filled by the preprocess (bwd_prep_kernel) */
    int scan_nf;      /* screen: look for NaN/Inf in Q, dO, K (visibility is row-dependent) */
    int scan_norm;    /* screen: bound |dS| (fp16; bf16 has fp32's range) */
    int64_t B, Sq, Sk, Hq, Hkv, group, D;
    float scale;
    /* visibility: dj = j - i - off; visible iff (!has_right || dj <= right) && (!has_left || dj >= -left) */
    int64_t off, right, left;
    int has_right, has_left;
    int nsplit;                  /* column halves of dK/dV/dQ (1 or 2) */
    int vec_q, vec_k, vec_v, vec_do; /* 1: 16-byte cp.async allowed for this view */
    int vec_o_prep, vec_do_prep;     /* 1: 16-byte loads allowed in the preprocess */
    int w32_dq, w32_dk, w32_dv;      /* 1: 4-byte stores of pairs allowed */
} bwd_params;

// ----------------------------------------------------------------------------
// small device helpers

/* Load a tile of ROWS x HD 16-bit elements (rows >= nrows or cols >= D are zero)
 * from base (row stride rs) into the swizzled shared tile. vec: cp.async 16 B,
 * else ordinary 2-byte loads and a 16-byte shared store (visible after the
 * caller's barrier like the async copies once they are waited for). */
template <int ROWS, int HD, int NT>
static __device__ __forceinline__ void bwd_load_tile(uint16_t *tile, const uint16_t *base, int64_t rs,
                                                     int64_t nrows, int64_t D, int vec, int tid) {
    constexpr int CH = HD / 8;
#pragma unroll 4
    for (int idx = tid; idx < ROWS * CH; idx += NT) {
        int r = idx / CH, c = (idx % CH) * 8;
        bool ok = r < nrows && c < D;
        uint16_t *dst = tile + bwdx_swz<HD>(r, c);
        if (vec) {
            const uint16_t *src = ok ? base + (int64_t)r * rs + c : base;
            bwdx_cp16(bwdx_smem(dst), src, ok);
        } else {
            uint16_t e[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (ok) {
                const uint16_t *src = base + (int64_t)r * rs + c;
#pragma unroll
                for (int x = 0; x < 8; x++) e[x] = src[x];
            }
            uint4 w;
            w.x = e[0] | ((uint32_t)e[1] << 16);
            w.y = e[2] | ((uint32_t)e[3] << 16);
            w.z = e[4] | ((uint32_t)e[5] << 16);
            w.w = e[6] | ((uint32_t)e[7] << 16);
            *reinterpret_cast<uint4 *>(dst) = w;
        }
    }
}

/* Store a pair of adjacent output elements (x at col d, y at d + 1). */
template <bool BF16>
static __device__ __forceinline__ void bwd_store_pair(uint16_t *dst, float x, float y, int w32) {
    if (w32) {
        *reinterpret_cast<uint32_t *>(dst) = bwdx_pack<BF16>(x, y);
    } else {
        dst[0] = bwdx_from_float<BF16>(x);
        dst[1] = bwdx_from_float<BF16>(y);
    }
}

/* Element checks of one tile, query rows [i0, i0+BR) x keys [j0, j0+BC), in small
 * integers: (il, jl) inside the tile is visible iff il < qlim, jl < klim,
 * jl - il <= rr (when has_right) and jl - il >= ll (when has_left). With
 * dj0 = j0 - i0 - off, dj = dj0 + (jl - il), so rr = right - dj0, ll = -left - dj0;
 * |jl - il| < 128 (BC, BR <= 128), so clamping rr and ll to [-256, 256] keeps every comparison exact. */
typedef struct {
    int partial; /* 0: every element of the tile is visible */
    int qlim, klim, rr, ll;
} bwd_tile;

static __device__ __forceinline__ int bwd_clamp256(int64_t x) { return x < -256 ? -256 : (x > 256 ? 256 : (int)x); }

template <int BC, int BR>
static __device__ __forceinline__ bwd_tile bwd_tile_make(const bwd_params &p, int64_t i0, int64_t j0) {
    bwd_tile m;
    const int64_t dj0 = j0 - i0 - p.off;
    m.qlim = p.Sq - i0 < BR ? (int)(p.Sq - i0) : BR;
    m.klim = p.Sk - j0 < BC ? (int)(p.Sk - j0) : BC;
    m.rr = p.has_right ? bwd_clamp256(p.right - dj0) : 256;
    m.ll = p.has_left ? bwd_clamp256(-p.left - dj0) : -256;
    /* jl - il ranges over [-(BR-1), BC-1] */
    m.partial = m.qlim < BR || m.klim < BC || m.rr < BC - 1 || m.ll > -(BR - 1);
    return m;
}

static __device__ __forceinline__ bool bwd_tile_vis(const bwd_tile &m, int il, int jl) {
    return il < m.qlim && jl < m.klim && jl - il <= m.rr && jl - il >= m.ll;
}

// ----------------------------------------------------------------------------
// non-finite inputs and dS overflow: the exact slow path's triggers
//
// A hidden (query i, key j) pair must contribute nothing (flash_api.h), also when
// an input is NaN/Inf. Per-entry products (S = Q K^T, dP = dO V^T) are safe: P and
// dS are selected, not multiplied, at hidden entries. P of a hidden entry is stored
// as -0 (a visible P = ex2(..) is never -0), which marks it for the dS select and
// the slow paths. The three products that SUM over the hidden index are not safe on
// the tensor cores: dV += P^T dO (hidden P = 0 times a NaN dO row is NaN), dK += dS^T Q
// and dQ += dS K. They can only leak when the tile has row-dependent visibility
// (partial tile or an additive mask) AND the summed operand holds a non-finite value;
// such a tile runs the slow path: scalar fp32 FMAs that skip hidden entries. The same
// scalar path also takes a tile whose dS does not fit the 16-bit type (|dS| at or
// above the rounding-to-Inf threshold: fp16 65520), keeping dS in fp32 there instead
// of rounding it to Inf (Inf - Inf in dS K was the fuzz finding a63605906157a3f1).
// Scalar fp32 (round to nearest) and unrounded dS have no larger error than the
// profile's tensor-core truncation and rounded dS, so the oracle's bounds still hold.
// The slow paths exist only in the EXACT instantiations of the kernels; a call runs
// them only when the preprocess's screen finds a NaN/Inf in Q, dO or K with
// row-dependent visibility, or cannot rule out a dS overflow (bwd_needs_exact). The
// fast instantiations keep only the selects (-0 P, mask -inf, hidden dS = 0).

/* Smallest |x| that rounds to Inf in the 16-bit type (fp16 65520, bf16 0x1.ffp127). */
template <bool BF16>
static __device__ __forceinline__ float bwd_ovf16(void) {
    return BF16 ? __uint_as_float(0x7f7f8000u) : 65520.f;
}

/* Nonzero when either 16-bit half of w is NaN or Inf (exponent all ones). */
template <bool BF16>
static __device__ __forceinline__ uint32_t bwd_nonfinite2(uint32_t w) {
    const uint32_t m = BF16 ? 0x7f807f80u : 0x7c007c00u;
    return __vcmpeq2(w & m, m);
}

/* 1 when a 16-bit tile of ELEMS elements (a multiple of 8, 16-byte aligned) holds a
 * NaN or Inf; this thread's share only (the caller combines with __syncthreads_or). */
template <bool BF16, int ELEMS, int NT>
static __device__ __forceinline__ int bwd_tile_nonfinite(const uint16_t *tile, int tid) {
    const uint4 *t4 = reinterpret_cast<const uint4 *>(tile);
    uint32_t bad = 0;
#pragma unroll 2
    for (int x = tid; x < ELEMS / 8; x += NT) {
        const uint4 w = t4[x];
        bad |= bwd_nonfinite2<BF16>(w.x) | bwd_nonfinite2<BF16>(w.y) | bwd_nonfinite2<BF16>(w.z) |
               bwd_nonfinite2<BF16>(w.w);
    }
    return bad != 0;
}

/* A packed pair's low / high element is the hidden marker -0 (0x8000). */
static __device__ __forceinline__ bool bwd_hid_lo(uint32_t u) { return (u & 0xffffu) == 0x8000u; }
static __device__ __forceinline__ bool bwd_hid_hi(uint32_t u) { return (u & 0xffff0000u) == 0x80000000u; }
/* An fp32 scratch value is the hidden marker -0. */
static __device__ __forceinline__ bool bwd_hid32(float x) { return __float_as_uint(x) == 0x80000000u; }

/* dS of one entry for the slow path's fp32 scratch: -0 when hidden, else P (dP - Dsum)
 * with a visible -0 turned into +0 (the sum of zero products is 0 either way). */
static __device__ __forceinline__ float bwd_ds_scratch(bool hid, float pv, float dpm) {
    return hid ? -0.f : pv * dpm + 0.f;
}

/* Slow path of a per-warp product acc[16 x HO] += A[16 x BR] B[BR x HO] (dkdv kernel:
 * dV += P^T dO, dK += dS^T Q): A in fp32 rows of the scratch (row stride BR, -0 =
 * hidden, skipped), B the swizzled 16-bit tile sB from column d_off; scalar FMAs in
 * row order. acc is this thread's fragment [HO/8][4] flattened, in local memory: the
 * caller copies it out and back only on this path, and the call is not inlined,
 * so the fast path's registers are untouched. */
template <int HD, int HO, int BR, bool BF16>
static __device__ __noinline__ void bwd_rows_slow(float *acc_mem, const float *rows, const uint16_t *sB, int lane,
                                                  int d_off) {
    const int g = lane >> 2, t = lane & 3;
    float acc[HO / 8][4];
#pragma unroll
    for (int n = 0; n < HO / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[n][e] = acc_mem[n * 4 + e];
#pragma unroll 1
    for (int i = 0; i < BR; i++) {
        const float a0 = rows[g * BR + i], a1 = rows[(g + 8) * BR + i];
        const bool h0 = bwd_hid32(a0), h1 = bwd_hid32(a1);
#pragma unroll
        for (int n = 0; n < HO / 8; n++) {
            const float2 x = bwdx_unpack<BF16>(*reinterpret_cast<const uint32_t *>(sB + bwdx_swz<HD>(i, d_off + n * 8 + 2 * t)));
            if (!h0) { acc[n][0] = fmaf(a0, x.x, acc[n][0]); acc[n][1] = fmaf(a0, x.y, acc[n][1]); }
            if (!h1) { acc[n][2] = fmaf(a1, x.x, acc[n][2]); acc[n][3] = fmaf(a1, x.y, acc[n][3]); }
        }
    }
#pragma unroll
    for (int n = 0; n < HO / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_mem[n * 4 + e] = acc[n][e];
}

/* Slow path of the default-mode dQ product (dkdv kernel), CTA-uniform: the warps whose
 * dS^T was rounded (slow_w == 0) copy it exactly into their fp32 scratch rows; then each
 * warp forms its 16 query rows (rg) x CPW columns from dc0 by scalar FMAs in key order,
 * skipping hidden (-0) entries, and adds them to the fp32 workspace rows dqa, dqb
 * (when a_ok / b_ok) by atomics. Not inlined, so that its registers do not weigh on
 * the fast path. Contains a __syncthreads: every thread of the CTA must call it. */
template <int HD, int BR, int BC, int CPW, bool BF16>
static __device__ __noinline__ void bwd_dq_slow(float *sdSf, const uint16_t *sdS, const uint16_t *sK, int warp, int lane,
                                                int slow_w, int rg, int dc0, int D, float *dqa, float *dqb, bool a_ok,
                                                bool b_ok) {
    const int g = lane >> 2, t = lane & 3;
    if (!slow_w)
        for (int x = lane; x < 16 * BR; x += 32)
            sdSf[(warp * 16 + x / BR) * BR + x % BR] = bwdx_to_float<BF16>(sdS[bwdx_swz<64>(warp * 16 + x / BR, x % BR)]);
    __syncthreads();
    const int ila = rg * 16 + g;
#pragma unroll 1
    for (int n = 0; n < CPW / 8; n++) {
        const int dc = dc0 + n * 8;
        if (dc >= D) break; /* D % 8 == 0: an 8-column group is all in or all out */
        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
        for (int j = 0; j < BC; j++) {
            const float s0 = sdSf[j * BR + ila], s1 = sdSf[j * BR + ila + 8];
            const float2 x = bwdx_unpack<BF16>(*reinterpret_cast<const uint32_t *>(sK + bwdx_swz<HD>(j, dc + 2 * t)));
            if (!bwd_hid32(s0)) { c[0] = fmaf(s0, x.x, c[0]); c[1] = fmaf(s0, x.y, c[1]); }
            if (!bwd_hid32(s1)) { c[2] = fmaf(s1, x.x, c[2]); c[3] = fmaf(s1, x.y, c[3]); }
        }
        if (a_ok) { atomicAdd(dqa + dc + 2 * t, c[0]); atomicAdd(dqa + dc + 2 * t + 1, c[1]); }
        if (b_ok) { atomicAdd(dqb + dc + 2 * t, c[2]); atomicAdd(dqb + dc + 2 * t + 1, c[3]); }
    }
}

// ----------------------------------------------------------------------------
// 1. preprocess: Dsum = rowsum(dO * O), compact LSE, and the screen
//
// The screen decides, once per call, whether the exact kernels (EXACT = true: the slow
// paths above, per tile) are needed; the common case runs the fast ones, whose code
// has no slow path at all. It runs only for what can happen: NaN/Inf words when the
// visibility is row-dependent (causal, window, mask), norms for fp16 (p.scan_*); a
// bf16 call without causal/window/mask skips it and the host read-back. Words (uint32, fp32 bits for the maxima; a NaN compares
// above +Inf as an unsigned, so a NaN maximum reads as "unbounded"):
//   screen[0]  1 when an element of Q, dO or K (the summed operands) is NaN or Inf
//   screen[1]  max over query rows of ||dO_i||^2 (fp32)
//   screen[2]  max over key rows of ||V_j||^2 (fp32)
//   screen[3]  max over query rows of |Dsum_i|
// |dS_ij| = P_ij |dP_ij - Dsum_i| <= ||dO_i|| ||V_j|| + |Dsum_i| (P <= 1, Cauchy-Schwarz),
// so dS cannot reach the 16-bit overflow threshold when sqrt(s1 s2) + s3 is below half
// of it (the half absorbs the fp32 rounding of the norms and of dP). bwd_needs_exact.

/* sum of squares over one row of D 16-bit elements (lane-strided), and whether one is
 * NaN/Inf (this lane's share) */
template <bool BF16>
static __device__ __forceinline__ float bwd_row_sq(const uint16_t *x, int64_t D, int vec, int lane, uint32_t *bad) {
    float s2 = 0.f;
    if (vec) {
        for (int64_t d = lane * 8; d < D; d += 256) {
            const uint4 v = *reinterpret_cast<const uint4 *>(x + d);
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 f = bwdx_unpack<BF16>(w[k]);
                s2 = fmaf(f.x, f.x, s2);
                s2 = fmaf(f.y, f.y, s2);
                *bad |= bwd_nonfinite2<BF16>(w[k]);
            }
        }
    } else {
        for (int64_t d = lane; d < D; d += 32) {
            const uint16_t h = x[d];
            const float f = bwdx_to_float<BF16>(h);
            s2 = fmaf(f, f, s2);
            *bad |= bwd_nonfinite2<BF16>(h);
        }
    }
    return s2;
}

/* one warp per row, grid-stride: rows [0, B Hq Sq) are query rows (b, hq, i), then (when
 * screening) B Hkv Sk key rows (b, hkv, j). The screen is reduced per block in shared
 * memory and added by one set of atomics per block (unsigned max of fp32 bits: the
 * values are >= 0 or NaN, and a NaN's bits are above +Inf's). */
template <bool BF16>
__global__ void __launch_bounds__(256) bwd_prep_kernel(const bwd_params p) {
    __shared__ unsigned red[4][8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int screening = p.scan_nf || p.scan_norm;
    const int64_t nrows = p.B * p.Hq * p.Sq, nkrows = screening ? p.B * p.Hkv * p.Sk : 0;
    uint32_t bad = 0;
    float do2max = 0.f, v2max = 0.f, dmax = 0.f; /* fmaxf drops NaN: NaN is tracked in bad2 */
    uint32_t nan_norm = 0;
    for (int64_t row = (int64_t)blockIdx.x * 8 + warp; row < nrows + nkrows; row += (int64_t)gridDim.x * 8) {
        if (row >= nrows) {
            const int64_t r = row - nrows, j = r % p.Sk, bh = r / p.Sk;
            const int64_t hkv = bh % p.Hkv, b = bh / p.Hkv;
            if (p.scan_nf) bwd_row_sq<BF16>(p.k + b * p.ks[0] + j * p.ks[1] + hkv * p.ks[2], p.D, p.vec_k, lane, &bad);
            if (p.scan_norm) {
                uint32_t unused = 0;
                float v2 = bwd_row_sq<BF16>(p.v + b * p.vs[0] + j * p.vs[1] + hkv * p.vs[2], p.D, p.vec_v, lane, &unused);
#pragma unroll
                for (int m = 16; m >= 1; m >>= 1) v2 += __shfl_xor_sync(0xffffffffu, v2, m);
                nan_norm |= v2 != v2;
                v2max = fmaxf(v2max, v2);
            }
            continue;
        }
        const int64_t i = row % p.Sq;
        const int64_t bh = row / p.Sq;
        const int64_t hq = bh % p.Hq, b = bh / p.Hq;
        const uint16_t *o = p.o + b * p.os[0] + i * p.os[1] + hq * p.os[2];
        const uint16_t *g = p.dout + b * p.dos[0] + i * p.dos[1] + hq * p.dos[2];
        float acc = 0.f;
        if (p.vec_o_prep && p.vec_do_prep) {
            for (int64_t d = lane * 8; d < p.D; d += 256) {
                uint4 ov = *reinterpret_cast<const uint4 *>(o + d);
                uint4 gv = *reinterpret_cast<const uint4 *>(g + d);
                const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    float2 a = bwdx_unpack<BF16>(ow[x]), c = bwdx_unpack<BF16>(gw[x]);
                    acc = fmaf(a.x, c.x, acc);
                    acc = fmaf(a.y, c.y, acc);
                }
            }
        } else {
            for (int64_t d = lane; d < p.D; d += 32) acc = fmaf(bwdx_to_float<BF16>(o[d]), bwdx_to_float<BF16>(g[d]), acc);
        }
#pragma unroll
        for (int m = 16; m >= 1; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
        if (lane == 0) {
            float l = p.lse[b * p.lses[0] + hq * p.lses[1] + i * p.lses[2]];
            p.lse_ws[row] = (l == -INFINITY) ? INFINITY : l;
            p.dsum_ws[row] = acc;
        }
        if (screening) {
            float g2 = bwd_row_sq<BF16>(g, p.D, p.vec_do_prep, lane, &bad); /* dO again: from L1/L2 */
            if (p.scan_nf) bwd_row_sq<BF16>(p.q + b * p.qs[0] + i * p.qs[1] + hq * p.qs[2], p.D, p.vec_q, lane, &bad);
#pragma unroll
            for (int m = 16; m >= 1; m >>= 1) g2 += __shfl_xor_sync(0xffffffffu, g2, m);
            nan_norm |= (g2 != g2) | (acc != acc);
            do2max = fmaxf(do2max, g2);
            dmax = fmaxf(dmax, fabsf(acc));
        }
    }
    if (!screening) return; /* uniform over the grid */
    bad = __any_sync(0xffffffffu, bad != 0) | __any_sync(0xffffffffu, nan_norm != 0) << 1;
    if (lane == 0) {
        red[0][warp] = bad;
        red[1][warp] = __float_as_uint(do2max);
        red[2][warp] = __float_as_uint(v2max);
        red[3][warp] = __float_as_uint(dmax);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned r[4] = {0, 0, 0, 0};
        for (int w = 0; w < 8; w++) {
            r[0] |= red[0][w];
            for (int k = 1; k < 4; k++) r[k] = red[k][w] > r[k] ? red[k][w] : r[k];
        }
        if (r[0] & 1) atomicOr(p.screen, 1u);
        if (r[0] & 2) r[1] = 0x7fc00000u; /* a NaN norm or Dsum: unbounded */
        for (int k = 1; k < 4; k++)
            if (r[k] > *(volatile unsigned *)(p.screen + k)) atomicMax(p.screen + k, r[k]);
    }
}

// ----------------------------------------------------------------------------
// 2. dK, dV (and dQ partials by atomics when !DET)

/* NW warps, each owning 16 kv rows: BC = 16 NW kv rows per block. */
template <int HD, int NW, int BR>
struct bwd_dkdv_smem {
    static constexpr int BC = 16 * NW;
    static constexpr size_t kv = (size_t)BC * HD;  /* elements of sK or sV */
    static constexpr size_t qo = (size_t)BR * HD;  /* elements of one sQ or sdO buffer */
    /* sdS is [BC][64] (64-wide rows keep the 8-chunk swizzle) whatever BR is; then
     * sLse, sDsum [2][BR] fp32, then the slow path's fp32 scratch sdSf [BC][BR] */
    static constexpr size_t bytes = (2 * kv + 4 * qo + (size_t)BC * 64) * 2 + 4 * BR * 4 + (size_t)BC * BR * 4;
};

template <int HD, int HO, int NW, int BR, bool BF16, bool DET, bool EXACT>
__global__ void __launch_bounds__(NW * 32, (NW == 4 && HD <= 128 ? 2 : 1)) bwd_dkdv_kernel(const bwd_params p) {
    extern __shared__ __align__(128) unsigned char bwd_smem_raw[];
    typedef bwd_dkdv_smem<HD, NW, BR> L;
    constexpr int BC = L::BC, NT = NW * 32;
    uint16_t *sK = reinterpret_cast<uint16_t *>(bwd_smem_raw);
    uint16_t *sV = sK + L::kv;
    uint16_t *sQ = sV + L::kv;       /* [2][BR][HD] */
    uint16_t *sdO = sQ + 2 * L::qo;  /* [2][BR][HD] */
    uint16_t *sdS = sdO + 2 * L::qo; /* [BC][BR]: dS^T */
    float *sLse = reinterpret_cast<float *>(sdS + BC * 64); /* [2][BR] */
    float *sDsum = sLse + 2 * BR;                                /* [2][BR] */
    float *sdSf = sDsum + 2 * BR; /* [BC][BR]: slow path only: P^T, then dS^T, fp32, -0 = hidden */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;

    /* block -> (kv block, column half, kv head, batch) */
    int64_t bid = blockIdx.x;
    const int64_t nkb = (p.Sk + BC - 1) / BC;
    const int64_t kb = bid % nkb;
    bid /= nkb;
    const int split = (int)(bid % p.nsplit);
    bid /= p.nsplit;
    const int64_t hkv = bid % p.Hkv, b = bid / p.Hkv;
    const int d_off = split * HO;
    const int64_t j0 = kb * BC;
    const int64_t kv_rows = p.Sk - j0 < BC ? p.Sk - j0 : BC;

    /* query rows that see at least one key of this block */
    int64_t i_lo = 0, i_hi = p.Sq;
    if (p.has_right) { int64_t x = j0 - p.off - p.right; if (x > i_lo) i_lo = x; }
    if (p.has_left) { int64_t x = j0 + kv_rows - p.off + p.left; if (x < i_hi) i_hi = x; }
    int64_t qb_lo = 0, nqb = 0;
    if (i_lo < i_hi) { qb_lo = i_lo / BR; nqb = (i_hi + BR - 1) / BR - qb_lo; }
    const int64_t n_it = nqb * p.group;

    /* K, V of this block */
    bwd_load_tile<BC, HD, NT>(sK, p.k + b * p.ks[0] + j0 * p.ks[1] + hkv * p.ks[2], p.ks[1], kv_rows, p.D,
                              p.vec_k, tid);
    bwd_load_tile<BC, HD, NT>(sV, p.v + b * p.vs[0] + j0 * p.vs[1] + hkv * p.vs[2], p.vs[1], kv_rows, p.D,
                              p.vec_v, tid);

    /* issue the loads of iteration it into buffer buf */
    auto issue = [&](int64_t it, int buf) {
        const int64_t hq = hkv * p.group + it / nqb;
        const int64_t i0 = (qb_lo + it % nqb) * BR;
        const int64_t rows = p.Sq - i0 < BR ? p.Sq - i0 : BR;
        bwd_load_tile<BR, HD, NT>(sQ + buf * L::qo, p.q + b * p.qs[0] + i0 * p.qs[1] + hq * p.qs[2], p.qs[1],
                                  rows, p.D, p.vec_q, tid);
        bwd_load_tile<BR, HD, NT>(sdO + buf * L::qo, p.dout + b * p.dos[0] + i0 * p.dos[1] + hq * p.dos[2],
                                  p.dos[1], rows, p.D, p.vec_do, tid);
        const int64_t ws = (b * p.Hq + hq) * p.Sq + i0;
        if (tid < BR) {
            bool ok = tid < rows;
            bwdx_cp4(bwdx_smem(sLse + buf * BR + tid), ok ? p.lse_ws + ws + tid : p.lse_ws, ok);
        } else if (tid < 2 * BR) {
            int r = tid - BR;
            bool ok = r < rows;
            bwdx_cp4(bwdx_smem(sDsum + buf * BR + r), ok ? p.dsum_ws + ws + r : p.dsum_ws, ok);
        }
    };
    if (n_it > 0) issue(0, 0);
    bwdx_cp_commit();

    float acc_dk[HO / 8][4], acc_dv[HO / 8][4];
#pragma unroll
    for (int n = 0; n < HO / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dk[n][e] = acc_dv[n][e] = 0.f;

    int kbad = 0; /* the K block holds a NaN/Inf (the dQ product's summed operand) */
    float *myf = sdSf + warp * 16 * BR; /* this warp's 16 rows of the scratch */

    for (int64_t it = 0; it < n_it; it++) {
        const int buf = (int)(it & 1);
        bwdx_cp_wait_all();
        __syncthreads(); /* buffer buf is complete; every warp is done with buf^1, sdS and sdSf */
        if (it + 1 < n_it) issue(it + 1, buf ^ 1);
        bwdx_cp_commit();
        if (EXACT && !DET && it == 0) kbad = __syncthreads_or(bwd_tile_nonfinite<BF16, BC * HD, NT>(sK, tid));

        const int64_t hq = hkv * p.group + it / nqb;
        const int64_t i0 = (qb_lo + it % nqb) * BR;
        const uint16_t *sQb = sQ + buf * L::qo;
        const uint16_t *sdOb = sdO + buf * L::qo;
        const float *lse_b = sLse + buf * BR;
        const float *dsum_b = sDsum + buf * BR;

        /* slow path for the summed products: row-dependent visibility and a NaN/Inf in Q, dO or K */
        const bwd_tile tm = bwd_tile_make<BC, BR>(p, i0, j0);
        int nf = 0;
        if (EXACT && (tm.partial || p.mask))
            nf = __syncthreads_or(kbad || bwd_tile_nonfinite<BF16, BR * HD, NT>(sQb, tid) ||
                                  bwd_tile_nonfinite<BF16, BR * HD, NT>(sdOb, tid));

        const float *mrow = p.mask ? p.mask + b * p.ms[0] + hq * p.ms[1] + i0 * p.ms[2] + j0 * p.ms[3] : NULL;
        /* S^T (16 kv rows of this warp x 64 query rows) = K Q^T, then
         * P^T = exp(scale * S + mask - lse), rounded to the input type (A fragments); -0 where hidden.
         * A lambda: the slow dK path recomputes it rather than keeping it live. */
        auto compute_p = [&](uint32_t (&pa)[BR / 16][4]) {
            float acc_s[BR / 8][4];
#pragma unroll
            for (int n = 0; n < BR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_s[n][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                uint32_t a[4];
                bwdx_ldsm4(a, bwdx_smem(sK + bwdx_swz<HD>(warp * 16 + bwdx_row_A(lane), ks * 16 + bwdx_col_A(lane))));
#pragma unroll
                for (int np = 0; np < BR / 16; np++) {
                    uint32_t bb[4];
                    bwdx_ldsm4(bb, bwdx_smem(sQb + bwdx_swz<HD>(np * 16 + bwdx_row_Bn(lane), ks * 16 + bwdx_col_Bn(lane))));
                    bwdx_mma<BF16>(acc_s[2 * np], a, bb[0], bb[1]);
                    bwdx_mma<BF16>(acc_s[2 * np + 1], a, bb[2], bb[3]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                float pv[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int il = nt * 8 + 2 * t + (e & 1);
                    const int jl = warp * 16 + g + ((e >> 1) << 3);
                    bool vis = true;
                    if (tm.partial) vis = bwd_tile_vis(tm, il, jl);
                    float mval = 0.f;
                    if (mrow && vis) {
                        mval = __ldg(mrow + il * p.ms[2] + jl * p.ms[3]);
                        vis = mval != -INFINITY;
                    }
                    const float x = fmaf(acc_s[nt][e], p.scale, mval) - lse_b[il];
                    pv[e] = vis ? bwdx_exp2(x * BWD_LOG2E) : -0.f;
                }
                pa[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(pv[0], pv[1]);
                pa[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(pv[2], pv[3]);
            }
        };
        /* dP^T = V dO^T */
        auto compute_dp = [&](float (&acc_s)[BR / 8][4]) {
#pragma unroll
            for (int n = 0; n < BR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_s[n][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                uint32_t a[4];
                bwdx_ldsm4(a, bwdx_smem(sV + bwdx_swz<HD>(warp * 16 + bwdx_row_A(lane), ks * 16 + bwdx_col_A(lane))));
#pragma unroll
                for (int np = 0; np < BR / 16; np++) {
                    uint32_t bb[4];
                    bwdx_ldsm4(bb, bwdx_smem(sdOb + bwdx_swz<HD>(np * 16 + bwdx_row_Bn(lane), ks * 16 + bwdx_col_Bn(lane))));
                    bwdx_mma<BF16>(acc_s[2 * np], a, bb[0], bb[1]);
                    bwdx_mma<BF16>(acc_s[2 * np + 1], a, bb[2], bb[3]);
                }
            }
        };
        uint32_t pa[BR / 16][4];
        compute_p(pa);

        /* dV += P^T dO (columns d_off .. d_off + HO) */
        if (!EXACT || !nf) {
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
#pragma unroll
                for (int np = 0; np < HO / 16; np++) {
                    uint32_t bb[4];
                    bwdx_ldsm4_t(bb, bwdx_smem(sdOb + bwdx_swz<HD>(kk * 16 + bwdx_row_Bk(lane), d_off + np * 16 + bwdx_col_Bk(lane))));
                    bwdx_mma<BF16>(acc_dv[2 * np], pa[kk], bb[0], bb[1]);
                    bwdx_mma<BF16>(acc_dv[2 * np + 1], pa[kk], bb[2], bb[3]);
                }
            }
        } else {
            /* slow: P^T rows of this warp to the scratch, then scalar FMAs that skip hidden entries */
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    *reinterpret_cast<float2 *>(myf + (g + 8 * h) * BR + nt * 8 + 2 * t) =
                        bwdx_unpack<BF16>(pa[nt >> 1][(nt & 1) * 2 + h]);
            __syncwarp();
            float mem[HO / 2];
#pragma unroll
            for (int n = 0; n < HO / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) mem[n * 4 + e] = acc_dv[n][e];
            bwd_rows_slow<HD, HO, BR, BF16>(mem, myf, sdOb, lane, d_off);
#pragma unroll
            for (int n = 0; n < HO / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_dv[n][e] = mem[n * 4 + e];
            __syncwarp();
        }

        /* dP^T = V dO^T */
        float acc_s[BR / 8][4];
        compute_dp(acc_s);

        /* dS^T = P^T (dP^T - Dsum), zero where hidden, rounded (A fragments) */
        uint32_t da[BR / 16][4];
        float ds_max = 0.f; /* largest |dS| (NaN ignored): does the 16-bit rounding overflow? */
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt++) {
            float dv4[4];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t pp = pa[nt >> 1][(nt & 1) * 2 + h];
                const float2 pr = bwdx_unpack<BF16>(pp);
                const int il = nt * 8 + 2 * t;
                const float d0 = acc_s[nt][2 * h] - dsum_b[il];
                const float d1 = acc_s[nt][2 * h + 1] - dsum_b[il + 1];
                dv4[2 * h] = bwd_hid_lo(pp) ? 0.f : pr.x * d0;
                dv4[2 * h + 1] = bwd_hid_hi(pp) ? 0.f : pr.y * d1;
            }
#pragma unroll
            for (int e = 0; e < 4; e++) ds_max = fmaxf(ds_max, fabsf(dv4[e]));
            da[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(dv4[0], dv4[1]);
            da[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(dv4[2], dv4[3]);
        }
        /* warp-uniform: this warp's dS^T goes through the fp32 scratch */
        const int slow_w = EXACT && (nf || __any_sync(0xffffffffu, ds_max >= bwd_ovf16<BF16>()));

        /* dK += dS^T Q (columns d_off .. d_off + HO) */
        if (!slow_w) {
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
#pragma unroll
                for (int np = 0; np < HO / 16; np++) {
                    uint32_t bb[4];
                    bwdx_ldsm4_t(bb, bwdx_smem(sQb + bwdx_swz<HD>(kk * 16 + bwdx_row_Bk(lane), d_off + np * 16 + bwdx_col_Bk(lane))));
                    bwdx_mma<BF16>(acc_dk[2 * np], da[kk], bb[0], bb[1]);
                    bwdx_mma<BF16>(acc_dk[2 * np + 1], da[kk], bb[2], bb[3]);
                }
            }
        } else {
            /* slow: P^T and dP^T recomputed (bitwise the same), fp32 dS^T rows of this warp to
             * the scratch (-0 = hidden), then scalar FMAs */
            uint32_t pa2[BR / 16][4];
            float dp2[BR / 8][4];
            compute_p(pa2);
            compute_dp(dp2);
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t pp = pa2[nt >> 1][(nt & 1) * 2 + h];
                    const float2 pr = bwdx_unpack<BF16>(pp);
                    const int il = nt * 8 + 2 * t;
                    float2 v;
                    v.x = bwd_ds_scratch(bwd_hid_lo(pp), pr.x, dp2[nt][2 * h] - dsum_b[il]);
                    v.y = bwd_ds_scratch(bwd_hid_hi(pp), pr.y, dp2[nt][2 * h + 1] - dsum_b[il + 1]);
                    *reinterpret_cast<float2 *>(myf + (g + 8 * h) * BR + il) = v;
                }
            __syncwarp();
            float mem[HO / 2];
#pragma unroll
            for (int n = 0; n < HO / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) mem[n * 4 + e] = acc_dk[n][e];
            bwd_rows_slow<HD, HO, BR, BF16>(mem, myf, sQb, lane, d_off);
#pragma unroll
            for (int n = 0; n < HO / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_dk[n][e] = mem[n * 4 + e];
        }

        if (!DET) {
            /* dS^T to shared memory, then dQ rows (16 per warp) += dS K, added by atomics */
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
                const int jl = warp * 16 + g, il = kk * 16 + 2 * t;
                *reinterpret_cast<uint32_t *>(sdS + bwdx_swz<64>(jl, il)) = da[kk][0];
                *reinterpret_cast<uint32_t *>(sdS + bwdx_swz<64>(jl + 8, il)) = da[kk][1];
                *reinterpret_cast<uint32_t *>(sdS + bwdx_swz<64>(jl, il + 8)) = da[kk][2];
                *reinterpret_cast<uint32_t *>(sdS + bwdx_swz<64>(jl + 8, il + 8)) = da[kk][3];
            }
            /* CTA-uniform: some warp's dS^T is in the fp32 scratch (overflow or NaN/Inf path) */
            int slow_q = 0;
            if (EXACT) slow_q = __syncthreads_or(slow_w);
            else __syncthreads();
            /* warp -> 16 query rows (rg of RG) x CPW columns (cp) of dQ, k = the BC keys */
            constexpr int RG = BR / 16, CPW = HO / (NW / RG);
            const int rg = warp % RG, cp = warp / RG;
            const int64_t ia = i0 + rg * 16 + g, ib = ia + 8;
            float *dqa = p.dq_ws + ((b * p.Hq + hq) * p.Sq + ia) * p.D;
            float *dqb = dqa + 8 * p.D;
            if (slow_q) {
                /* out of line: the fast path keeps its registers */
                bwd_dq_slow<HD, BR, BC, CPW, BF16>(sdSf, sdS, sK, warp, lane, slow_w, rg, d_off + cp * CPW, (int)p.D, dqa,
                                                   dqb, ia < p.Sq, ib < p.Sq);
                continue;
            }
            uint32_t qa[BC / 16][4];
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
                bwdx_ldsm4_t(qa[kk], bwdx_smem(sdS + bwdx_swz<64>(kk * 16 + bwdx_row_At(lane), rg * 16 + bwdx_col_At(lane))));
#pragma unroll
            for (int np = 0; np < CPW / 16; np++) {
                const int dcol = d_off + cp * CPW + np * 16;
                float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
                for (int kk = 0; kk < BC / 16; kk++) {
                    uint32_t bb[4];
                    bwdx_ldsm4_t(bb, bwdx_smem(sK + bwdx_swz<HD>(kk * 16 + bwdx_row_Bk(lane), dcol + bwdx_col_Bk(lane))));
                    bwdx_mma<BF16>(c[0], qa[kk], bb[0], bb[1]);
                    bwdx_mma<BF16>(c[1], qa[kk], bb[2], bb[3]);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t d = dcol + h * 8 + 2 * t;
                    if (dcol + h * 8 < p.D) { /* D % 8 == 0: an 8-column tile is all in or all out */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                        if (ia < p.Sq) atomicAdd(reinterpret_cast<float2 *>(dqa + d), make_float2(c[h][0], c[h][1]));
                        if (ib < p.Sq) atomicAdd(reinterpret_cast<float2 *>(dqb + d), make_float2(c[h][2], c[h][3]));
#else
                        if (ia < p.Sq) { atomicAdd(dqa + d, c[h][0]); atomicAdd(dqa + d + 1, c[h][1]); }
                        if (ib < p.Sq) { atomicAdd(dqb + d, c[h][2]); atomicAdd(dqb + d + 1, c[h][3]); }
#endif
                    }
                }
            }
        }
    }

    bwdx_cp_wait_all(); /* no copy may be left in flight at exit (n_it == 0 leaves K, V pending) */

    /* write dK = scale * acc, dV = acc (rows of this warp, columns of this half) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t j = j0 + warp * 16 + g + h * 8;
        if (j < p.Sk) {
            uint16_t *dk = p.dk + b * p.dks[0] + j * p.dks[1] + hkv * p.dks[2];
            uint16_t *dv = p.dv + b * p.dvs[0] + j * p.dvs[1] + hkv * p.dvs[2];
#pragma unroll
            for (int nt = 0; nt < HO / 8; nt++) {
                const int64_t d = d_off + nt * 8 + 2 * t;
                if (d < p.D) {
                    bwd_store_pair<BF16>(dk + d, acc_dk[nt][2 * h] * p.scale, acc_dk[nt][2 * h + 1] * p.scale, p.w32_dk);
                    bwd_store_pair<BF16>(dv + d, acc_dv[nt][2 * h], acc_dv[nt][2 * h + 1], p.w32_dv);
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// 2h. Hopper dK/dV kernel (sm_90a; default mode, fast instantiation): warpgroup MMA
//
// The same algorithm, selects and arithmetic as bwd_dkdv_kernel<HD, .., DET = false,
// EXACT = false> (same roundings: fp32 tensor-core accumulation, P and dS rounded to
// the input type before the products that use them, dQ partials added in fp32 by
// atomics), with the products on wgmma (kernels/cuda/sm90/gmma.h) instead of mma.sync.
// CTA = 2 warpgroups (256 threads) and one block of 128 keys: warpgroup w owns keys
// 64w .. 64w+63 as the M (row) dimension of its products; K and V stay in shared memory
// (128-byte swizzle, gmma layout) while the query blocks of 64 rows of every query head
// of the GQA group stream through (Q, dO double-buffered by cp.async). Per query block,
// per warpgroup:
//   S^T[64 x 64] = K_w Q^T,  dP^T[64 x 64] = V_w dO^T   gmma_ss m64n64k16, both operands
//                                                      K-major, HD/16 steps
//   P^T, dS^T in registers, as in the sm_80 kernel (-0 marks a hidden P, dS = 0 there)
//   dV += P^T dO,  dK += dS^T Q                         gmma_rs m64nHDk16: A = the rounded
//                                                      P^T / dS^T fragments, B = dO / Q tile
//                                                      MN-major, 4 steps over the 64 queries
//   dS (queries x keys) to shared memory by stmatrix .trans, barrier, then
//   dQ[64 x 64] = dS K                                  gmma_ss m64n64k16, A = dS (K-major),
//                                                      B = the K tile MN-major
//     HD = 128: warpgroup w forms dQ columns 64w .. 64w+63 over the 128 keys;
//     HD = 64:  each warpgroup forms all 64 columns over its own 64 keys (two partial
//               sums per element, both added: the order of the adds varies anyway).
//   dQ partials to a shared fp32 staging buffer (two, alternating), fenced for the async
//   proxy; after the NEXT iteration's barrier one thread per (partial, query row) issues a
//   bulk reduction of the row into the fp32 workspace (cp.reduce.async.bulk .add.f32: one
//   instruction per row instead of 16 float2 atomics per thread, and no barrier of its own);
//   a buffer is rewritten only after its reductions have read it (wait_group.read).
// Measured (bench/RESULTS.md): float2 atomics per thread instead of the bulk reductions, and
// the bulk reductions issued behind a barrier of their own, were both slower.
// Deterministic mode (template DQ = false): the same loop without the dQ stage (no sdS, no
// dS K products, no staging or bulk reductions; the dV/dK products of a block are waited for
// at the end of its iteration, before the next loop top's barrier lets its Q/dO buffer be
// reloaded; with the wait at the next loop top instead ptxas serialized the wgmmas), followed by
// bwd_g_dq_kernel (2q; bwd_dq_kernel, 3b, with FLASHCHECK_BWD_GMMA_DQ=0) for dQ. Its dK and dV
// are bitwise reproducible: each CTA owns its 128 keys'
// dK/dV rows, summed in the wgmma accumulators over the query heads of the group (outer) and the
// query blocks (inner) in a fixed order, and stored once; no atomics, no reductions in this path.
// Used only where proven: sm_90 device, head dim padded to 64 or 128, 16-byte copies
// allowed for Q, K, V and dO, fast (non-EXACT) call, either mode; everything else runs the
// kernels above. FLASHCHECK_BWD_GMMA=0 in the environment turns it off, FLASHCHECK_BWD_GMMA_DET=0
// only for the deterministic mode (A/B measurements).

/* Bulk reduction global[0 .. bytes) += shared[0 .. bytes) (fp32 adds at L2, like red.add.f32),
 * its bulk-group commit, and the waits (reads of the shared source done / all done). */
static __device__ __forceinline__ void bwd_g_bulk_add(float *gdst, uint32_t ssrc, uint32_t bytes) {
#if GMMA_ENABLED
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gdst), "r"(ssrc),
                 "r"(bytes)
                 : "memory");
#else
    (void)gdst; (void)ssrc; (void)bytes;
    __trap();
#endif
}
static __device__ __forceinline__ void bwd_g_bulk_commit(void) {
#if GMMA_ENABLED
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
template <int N>
static __device__ __forceinline__ void bwd_g_bulk_wait_read(void) {
#if GMMA_ENABLED
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
static __device__ __forceinline__ void bwd_g_bulk_wait_all(void) {
#if GMMA_ENABLED
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

template <int HD, bool DQ>
struct bwd_g_smem {
    static constexpr uint32_t kv = 128u * HD * 2; /* bytes of sK or sV (128 rows) */
    static constexpr uint32_t qo = 64u * HD * 2;  /* bytes of one sQ or sdO buffer (64 rows) */
    static constexpr uint32_t k = 0, v = kv, q = 2 * kv, dout = 2 * kv + 2 * qo, ds = 2 * kv + 4 * qo;
    /* sdS [64 queries][128 keys] (only with DQ) */
    static constexpr uint32_t rows = ds + (DQ ? 64u * 128 * 2 : 0u); /* sLse, sDsum [2][64] fp32 */
    /* sdQ: fp32 dQ partials for the bulk reductions, [2 buffers][NP partials][64 rows][D + 4]
     * (row stride D + 4 floats: 16-byte aligned rows, conflict-free float2 stores);
     * NP = 1 for HD = 128 (the warpgroups own column halves), 2 for HD = 64 */
    static constexpr int np = HD == 128 ? 1 : 2;
    static constexpr uint32_t dqbuf = DQ ? (uint32_t)np * 64u * (HD + 4) * 4 : 0u; /* none without DQ */
    static constexpr uint32_t dq = rows + 4 * 64 * 4;
    /* + 1024: the tiles must start 1024-byte aligned (the swizzle reads address bits 7..9) */
    static constexpr size_t bytes = (size_t)dq + 2 * dqbuf + 1024;
};

/* Load ROWS x HD 16-bit elements (rows >= nrows or cols >= D zero) from base (row stride
 * rs) into the gmma tile at shared address tile, by 16-byte cp.async (the caller checked
 * 16-byte alignment of the view). */
template <int ROWS, int HD>
static __device__ __forceinline__ void bwd_g_load(uint32_t tile, const uint16_t *base, int64_t rs, int64_t nrows,
                                                  int64_t D, int tid) {
    constexpr int CH = HD / 8, RSTEP = 256 / CH; /* thread tid: chunk tid % CH of rows tid / CH + x RSTEP */
    static_assert(RSTEP % 8 == 0 && ROWS % RSTEP == 0, "bwd_g_load: the swizzle phase must be the same for every pass");
    const int ch = tid % CH, r0 = tid / CH;
    const bool col_ok = ch * 8 < D;
    const uint16_t *src = base + (int64_t)r0 * rs + ch * 8;
    const uint32_t dst = tile + gmma_tile_offset<ROWS>(r0, ch); /* + x RSTEP 128: (r0 + x RSTEP) % 8 == r0 % 8 */
#pragma unroll
    for (int x = 0; x < ROWS / RSTEP; x++) {
        const bool ok = col_ok && r0 + x * RSTEP < nrows;
        bwdx_cp16(dst + x * RSTEP * 128, ok ? src : base, ok);
        src += RSTEP * rs;
    }
}

/* stmatrix x4 .trans: the four 8x8 fragments r[0..3] (mma C layout: row g, cols 2t, 2t+1)
 * stored transposed; lane 8m + j gives the address of row j of stored matrix m. */
static __device__ __forceinline__ void bwd_g_stsm4_t(uint32_t addr, const uint32_t r[4]) {
#if GMMA_ENABLED
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
#else
    (void)addr; (void)r;
    __trap();
#endif
}


/* DQ = true: the default mode (dQ partials by bulk reductions into p.dq_ws); DQ = false: the
 * deterministic mode, dK and dV only (no sdS, no dQ products, no bulk reductions, p.dq_ws unused;
 * bwd_dq_kernel forms dQ afterwards). */
template <int HD, bool BF16, bool DQ>
__global__ void __launch_bounds__(256, 1) bwd_g_dkdv_kernel(const bwd_params p) {
    extern __shared__ __align__(1024) unsigned char bwd_g_raw[];
    typedef bwd_g_smem<HD, DQ> L;
    constexpr int BC = 128, BR = 64;
    const uint32_t raw = bwdx_smem(bwd_g_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t sK = base + L::k, sV = base + L::v, sQ = base + L::q, sdO = base + L::dout, sdS = base + L::ds;
    float *sLse = reinterpret_cast<float *>(bwd_g_raw + (base - raw) + L::rows); /* [2][BR] */
    float *sDsum = sLse + 2 * BR;                                                  /* [2][BR] */
    float *sdQ = reinterpret_cast<float *>(bwd_g_raw + (base - raw) + L::dq);      /* [2][NP][BR][D + 4] */
    const uint32_t sdQa = base + L::dq;
    const int dq_ld = (int)p.D + 4;

    const int tid = threadIdx.x, wg = tid >> 7, wl = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int krow = wg * 64 + wl * 16 + g; /* key (in the block) of accumulator rows g; +8 for g + 8 */

    /* block -> (kv block, kv head, batch) */
    int64_t bid = blockIdx.x;
    const int64_t nkb = (p.Sk + BC - 1) / BC;
    const int64_t kb = bid % nkb;
    bid /= nkb;
    const int64_t hkv = bid % p.Hkv, b = bid / p.Hkv;
    const int64_t j0 = kb * BC;
    const int64_t kv_rows = p.Sk - j0 < BC ? p.Sk - j0 : BC;

    /* query rows that see at least one key of this block */
    int64_t i_lo = 0, i_hi = p.Sq;
    if (p.has_right) { int64_t x = j0 - p.off - p.right; if (x > i_lo) i_lo = x; }
    if (p.has_left) { int64_t x = j0 + kv_rows - p.off + p.left; if (x < i_hi) i_hi = x; }
    int64_t qb_lo = 0, nqb = 0;
    if (i_lo < i_hi) { qb_lo = i_lo / BR; nqb = (i_hi + BR - 1) / BR - qb_lo; }
    const int64_t n_it = nqb * p.group;

    bwd_g_load<BC, HD>(sK, p.k + b * p.ks[0] + j0 * p.ks[1] + hkv * p.ks[2], p.ks[1], kv_rows, p.D, tid);
    bwd_g_load<BC, HD>(sV, p.v + b * p.vs[0] + j0 * p.vs[1] + hkv * p.vs[2], p.vs[1], kv_rows, p.D, tid);

    /* issue the loads of query head hq, query block starting at row i0, into buffer buf */
    auto issue = [&](int64_t hq, int64_t i0, int buf) {
        const int64_t rows = p.Sq - i0 < BR ? p.Sq - i0 : BR;
        bwd_g_load<BR, HD>(sQ + buf * L::qo, p.q + b * p.qs[0] + i0 * p.qs[1] + hq * p.qs[2], p.qs[1], rows, p.D, tid);
        bwd_g_load<BR, HD>(sdO + buf * L::qo, p.dout + b * p.dos[0] + i0 * p.dos[1] + hq * p.dos[2], p.dos[1], rows,
                           p.D, tid);
        const int64_t ws = (b * p.Hq + hq) * p.Sq + i0;
        if (tid < BR) {
            bool ok = tid < rows;
            bwdx_cp4(bwdx_smem(sLse + buf * BR + tid), ok ? p.lse_ws + ws + tid : p.lse_ws, ok);
        } else if (tid < 2 * BR) {
            int r = tid - BR;
            bool ok = r < rows;
            bwdx_cp4(bwdx_smem(sDsum + buf * BR + r), ok ? p.dsum_ws + ws + r : p.dsum_ws, ok);
        }
    };
    /* iterations: query heads of the group (outer), query blocks qb_lo .. qb_lo + nqb - 1 (inner) */
    int64_t hq = hkv * p.group, i0 = qb_lo * BR;        /* this iteration */
    int64_t hq_n = hq, i0_n = i0;                        /* the next one */
    const int64_t i0_end = (qb_lo + nqb) * BR;
    if (n_it > 0) issue(hq, i0, 0);
    bwdx_cp_commit();

    /* descriptors (K-major, 128-byte swizzle) of this warpgroup's K and V rows; a k-step adds its
     * byte offset >> 4 (the start-address field; every address here is below 2^18) */
    const uint64_t dK0 = gmma_desc(sK + wg * 64 * 128, 16, 1024), dV0 = gmma_desc(sV + wg * 64 * 128, 16, 1024);
    /* dQ = dS K: A = dS (K-major), B = the K tile MN-major from column 64 wg (HD = 128) */
    const uint64_t ddS0 = gmma_desc(sdS, 16, 1024);
    const uint64_t dKt0 = gmma_desc(sK + (HD == 128 ? wg * BC * 128 : 0), BC * 128, 1024);

    /* dQ partials of (query head hq_b, block i0_b), staged in sdQ[bb] (all threads' stores fenced,
     * then a barrier): one bulk reduction per (partial, query row), threads tid < NP 64 */
    auto bulk_dq = [&](int64_t hq_b, int64_t i0_b, int bb) {
        if (tid < L::np * BR) {
            const int part = tid / BR, r = tid % BR;
            if (i0_b + r < p.Sq)
                bwd_g_bulk_add(p.dq_ws + ((b * p.Hq + hq_b) * p.Sq + i0_b + r) * p.D,
                               sdQa + (uint32_t)(((bb * L::np + part) * BR + r) * dq_ld * 4), (uint32_t)p.D * 4);
            bwd_g_bulk_commit();
        }
    };

    float acc_dk[HD / 8][4], acc_dv[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dk[n][e] = acc_dv[n][e] = 0.f;

    for (int64_t it = 0; it < n_it; it++) {
        const int buf = (int)(it & 1);
        bwdx_cp_wait_all();
        /* the reductions of iteration it - 2 (issued at the top of it - 1) have read sdQ[buf] */
        if (DQ) bwd_g_bulk_wait_read<0>();
        gmma_fence_proxy(); /* this thread's cp.async data -> visible to wgmma after the barrier */
        __syncthreads();    /* buffer buf complete; every warpgroup is done with buf^1, sdS and sdQ[buf];
                               the dQ partials of iteration it - 1 are staged in sdQ[buf^1] */
        if (DQ && it > 0) bulk_dq(hq, i0, buf ^ 1); /* hq, i0: still iteration it - 1 */
        hq = hq_n; i0 = i0_n;
        i0_n += BR;
        if (i0_n == i0_end) { i0_n = qb_lo * BR; hq_n++; }
        if (it + 1 < n_it) issue(hq_n, i0_n, buf ^ 1);
        bwdx_cp_commit();

        const uint32_t sQb = sQ + buf * L::qo, sdOb = sdO + buf * L::qo;
        const float *lse_b = sLse + buf * BR;
        const float *dsum_b = sDsum + buf * BR;

        /* S^T = K_w Q^T and dP^T = V_w dO^T (two groups) */
        float s[BR / 8][4], dp[BR / 8][4]; /* first step: scale_d = 0 (the inputs are ignored) */
        const uint64_t dQ0 = gmma_desc(sQb, 16, 1024), ddO0 = gmma_desc(sdOb, 16, 1024);
        gmma_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            gmma_ss_m64n64k16<BF16, 0, 0>(s, dK0 + (gmma_kslice_offset<BC>(ks) >> 4), dQ0 + (gmma_kslice_offset<BR>(ks) >> 4), ks > 0);
        gmma_commit();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            gmma_ss_m64n64k16<BF16, 0, 0>(dp, dV0 + (gmma_kslice_offset<BC>(ks) >> 4), ddO0 + (gmma_kslice_offset<BR>(ks) >> 4), ks > 0);
        gmma_commit();
        gmma_wait<1>();
        gmma_fence_operands(s);

        /* P^T = exp(scale * S + mask - lse), rounded to the input type (A fragments); -0 where hidden */
        const bwd_tile tm = bwd_tile_make<BC, BR>(p, i0, j0);
        const float *mrow = p.mask ? p.mask + b * p.ms[0] + hq * p.ms[1] + i0 * p.ms[2] + j0 * p.ms[3] : NULL;
        uint32_t pa[BR / 16][4];
        if (!tm.partial && !mrow) { /* CTA-uniform: every entry visible, no mask (mval = 0) */
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                const float2 l = *reinterpret_cast<const float2 *>(lse_b + nt * 8 + 2 * t);
                float pv[4];
#pragma unroll
                for (int e = 0; e < 4; e++)
                    pv[e] = bwdx_exp2((fmaf(s[nt][e], p.scale, 0.f) - ((e & 1) ? l.y : l.x)) * BWD_LOG2E);
                pa[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(pv[0], pv[1]);
                pa[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(pv[2], pv[3]);
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                float pv[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int il = nt * 8 + 2 * t + (e & 1);
                    const int jl = krow + ((e >> 1) << 3);
                    bool vis = true;
                    if (tm.partial) vis = bwd_tile_vis(tm, il, jl);
                    float mval = 0.f;
                    if (mrow && vis) {
                        mval = __ldg(mrow + il * p.ms[2] + jl * p.ms[3]);
                        vis = mval != -INFINITY;
                    }
                    const float x = fmaf(s[nt][e], p.scale, mval) - lse_b[il];
                    pv[e] = vis ? bwdx_exp2(x * BWD_LOG2E) : -0.f;
                }
                pa[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(pv[0], pv[1]);
                pa[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(pv[2], pv[3]);
            }
        }

        /* dS^T = P^T (dP^T - Dsum), zero where hidden, rounded (A fragments) */
        gmma_wait<0>();
        gmma_fence_operands(dp);
        uint32_t da[BR / 16][4];
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt++) {
            const float2 ds2 = *reinterpret_cast<const float2 *>(dsum_b + nt * 8 + 2 * t);
            float dv4[4];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t pp = pa[nt >> 1][(nt & 1) * 2 + h];
                const float2 pr = bwdx_unpack<BF16>(pp);
                const float d0 = dp[nt][2 * h] - ds2.x;
                const float d1 = dp[nt][2 * h + 1] - ds2.y;
                dv4[2 * h] = bwd_hid_lo(pp) ? 0.f : pr.x * d0;
                dv4[2 * h + 1] = bwd_hid_hi(pp) ? 0.f : pr.y * d1;
            }
            da[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(dv4[0], dv4[1]);
            da[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(dv4[2], dv4[3]);
        }

        /* dS (query rows x key columns) to shared memory: fragment kk holds queries 16kk.. of keys
         * krow - g + {0, 8}; stored transposed, row = query, 8 keys per 16-byte chunk */
        if (DQ) {
            const int m = lane >> 3, j = lane & 7;
            const int ch = (wg * 64 + wl * 16 + (m & 1) * 8) >> 3;
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++)
                bwd_g_stsm4_t(sdS + gmma_tile_offset<BR>(kk * 16 + (m >> 1) * 8 + j, ch), da[kk]);
        }

        /* dV += P^T dO, dK += dS^T Q (one group, in flight while dS is shared); B MN-major */
        const uint64_t dOt0 = gmma_desc(sdOb, BR * 128, 1024), dQt0 = gmma_desc(sQb, BR * 128, 1024);
        gmma_fence();
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++) gmma_rs<HD, BF16, 1>(acc_dv, pa[kk], dOt0 + ((kk * 16 * 128) >> 4));
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++) gmma_rs<HD, BF16, 1>(acc_dk, da[kk], dQt0 + ((kk * 16 * 128) >> 4));
        gmma_commit();
        if (!DQ) {
            /* dK/dV only: these products must be done (their registers and buffer buf read)
             * before the next loop top's barrier, after which buf is reloaded */
            gmma_wait<0>();
            gmma_fence_operands(acc_dv);
            gmma_fence_operands(acc_dk);
            continue;
        }
        gmma_fence_proxy(); /* the stmatrix stores -> visible to wgmma after the barrier */
        __syncthreads();

        /* dQ[64 queries x 64 columns] = dS K, added to the fp32 workspace */
        float dq[8][4]; /* first step: scale_d = 0 */
        gmma_fence();
        if (HD == 128) {
#pragma unroll
            for (int ks = 0; ks < BC / 16; ks++)
                gmma_ss_m64n64k16<BF16, 0, 1>(dq, ddS0 + (gmma_kslice_offset<BR>(ks) >> 4), dKt0 + ((ks * 16 * 128) >> 4), ks > 0);
        } else {
#pragma unroll
            for (int x = 0; x < 4; x++) {
                const int ks = wg * 4 + x; /* this warpgroup's keys */
                gmma_ss_m64n64k16<BF16, 0, 1>(dq, ddS0 + (gmma_kslice_offset<BR>(ks) >> 4), dKt0 + ((ks * 16 * 128) >> 4), x > 0);
            }
        }
        gmma_commit();
        gmma_wait<0>();
        gmma_fence_operands(dq);
        gmma_fence_operands(acc_dv);
        gmma_fence_operands(acc_dk);
        {
            /* stage this thread's fragment (rows wl 16 + g, + 8; columns c0 + 8n + 2t below D) */
            const int c0 = HD == 128 ? wg * 64 : 0;
            float *st = sdQ + ((size_t)buf * L::np + (HD == 128 ? 0 : wg)) * BR * dq_ld + (wl * 16 + g) * dq_ld + c0 + 2 * t;
            const int ncol = (int)(p.D - c0); /* D % 8 == 0: an 8-column group is all in or all out */
#pragma unroll
            for (int n = 0; n < 8; n++)
                if (n * 8 < ncol) {
                    *reinterpret_cast<float2 *>(st + n * 8) = make_float2(dq[n][0], dq[n][1]);
                    *reinterpret_cast<float2 *>(st + 8 * dq_ld + n * 8) = make_float2(dq[n][2], dq[n][3]);
                }
            gmma_fence_proxy(); /* the stores -> visible to the bulk copy engine after the next barrier */
        }
    }

    bwdx_cp_wait_all(); /* no copy may be left in flight at exit (n_it == 0 leaves K, V pending) */
    if (DQ) {
        if (n_it > 0) {
            __syncthreads(); /* the last iteration's partials are staged */
            bulk_dq(hq, i0, (int)((n_it - 1) & 1));
        }
        bwd_g_bulk_wait_all(); /* no bulk reduction may be left reading sdQ */
    }

    /* write dK = scale * acc, dV = acc (this thread's rows krow, krow + 8) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t j = j0 + krow + h * 8;
        if (j < p.Sk) {
            uint16_t *dk = p.dk + b * p.dks[0] + j * p.dks[1] + hkv * p.dks[2];
            uint16_t *dv = p.dv + b * p.dvs[0] + j * p.dvs[1] + hkv * p.dvs[2];
#pragma unroll
            for (int nt = 0; nt < HD / 8; nt++) {
                const int64_t d = nt * 8 + 2 * t;
                if (d < p.D) {
                    bwd_store_pair<BF16>(dk + d, acc_dk[nt][2 * h] * p.scale, acc_dk[nt][2 * h + 1] * p.scale, p.w32_dk);
                    bwd_store_pair<BF16>(dv + d, acc_dv[nt][2 * h], acc_dv[nt][2 * h + 1], p.w32_dv);
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// 2q. Hopper dQ kernel for the deterministic mode (sm_90a; fast instantiation only)
//
// bwd_dq_kernel (3b) on warpgroup MMA, i.e. the Hopper dK/dV kernel's loop with the roles of
// queries and keys exchanged. CTA = 2 warpgroups and one block of 128 query rows of one query
// head: warpgroup w owns rows 64w .. 64w+63 as the M dimension; Q and dO stay in shared memory
// (gmma layout, 128-byte swizzle) while the key blocks of 64 rows of the kv head stream through
// (K, V double-buffered by cp.async), in key order. Per key block, per warpgroup:
//   S[64 x 64] = Q_w K^T,  dP[64 x 64] = dO_w V^T      gmma_ss m64n64k16, both K-major
//   P, dS in registers as in bwd_dq_kernel (same expressions: fmaf(S, scale, mask) - lse,
//   ex2, P rounded, -0 marks hidden, dS = hidden ? 0 : P (dP - Dsum), rounded)
//   dQ += dS K                                          gmma_rs m64nHDk16: A = the rounded dS
//                                                      fragments, B = the K tile MN-major
// dQ is summed in the wgmma accumulators over the key blocks in a fixed order (4 k-steps of
// 16 keys per block) and stored once (times scale): no atomics, bitwise reproducible.
// Used only for the deterministic mode where the Hopper dK/dV kernel runs (same conditions);
// FLASHCHECK_BWD_GMMA_DQ=0 keeps bwd_dq_kernel there (A/B measurements).

template <int HD>
struct bwd_gq_smem {
    static constexpr uint32_t qo = 128u * HD * 2; /* bytes of sQ or sdO (128 rows) */
    static constexpr uint32_t kv = 64u * HD * 2;  /* bytes of one sK or sV buffer (64 rows) */
    static constexpr uint32_t q = 0, dout = qo, k = 2 * qo, v = 2 * qo + 2 * kv;
    /* + 1024: the tiles must start 1024-byte aligned */
    static constexpr size_t bytes = (size_t)2 * qo + 4 * kv + 1024;
};

template <int HD, bool BF16>
__global__ void __launch_bounds__(256, 1) bwd_g_dq_kernel(const bwd_params p) {
    extern __shared__ __align__(1024) unsigned char bwd_gq_raw[];
    typedef bwd_gq_smem<HD> L;
    constexpr int BR = 128, BC = 64;
    const uint32_t raw = bwdx_smem(bwd_gq_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t sQ = base + L::q, sdO = base + L::dout, sK = base + L::k, sV = base + L::v;

    const int tid = threadIdx.x, wg = tid >> 7, wl = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int qrow = wg * 64 + wl * 16 + g; /* query (in the block) of accumulator rows g; +8 for g + 8 */

    /* block -> (query block, query head, batch) */
    int64_t bid = blockIdx.x;
    const int64_t nqb = (p.Sq + BR - 1) / BR;
    const int64_t qb = bid % nqb;
    bid /= nqb;
    const int64_t hq = bid % p.Hq, b = bid / p.Hq;
    const int64_t hkv = hq / p.group;
    const int64_t i0 = qb * BR;
    const int64_t q_rows = p.Sq - i0 < BR ? p.Sq - i0 : BR;

    /* keys seen by at least one row of this block */
    int64_t j_lo = 0, j_hi = p.Sk;
    if (p.has_left) { int64_t x = i0 + p.off - p.left; if (x > j_lo) j_lo = x; }
    if (p.has_right) { int64_t x = i0 + q_rows + p.off + p.right; if (x < j_hi) j_hi = x; }
    int64_t kb_lo = 0, nkb = 0;
    if (j_lo < j_hi) { kb_lo = j_lo / BC; nkb = (j_hi + BC - 1) / BC - kb_lo; }

    bwd_g_load<BR, HD>(sQ, p.q + b * p.qs[0] + i0 * p.qs[1] + hq * p.qs[2], p.qs[1], q_rows, p.D, tid);
    bwd_g_load<BR, HD>(sdO, p.dout + b * p.dos[0] + i0 * p.dos[1] + hq * p.dos[2], p.dos[1], q_rows, p.D, tid);
    auto issue = [&](int64_t it, int buf) {
        const int64_t j0 = (kb_lo + it) * BC;
        const int64_t rows = p.Sk - j0 < BC ? p.Sk - j0 : BC;
        bwd_g_load<BC, HD>(sK + buf * L::kv, p.k + b * p.ks[0] + j0 * p.ks[1] + hkv * p.ks[2], p.ks[1], rows, p.D, tid);
        bwd_g_load<BC, HD>(sV + buf * L::kv, p.v + b * p.vs[0] + j0 * p.vs[1] + hkv * p.vs[2], p.vs[1], rows, p.D, tid);
    };
    if (nkb > 0) issue(0, 0);
    bwdx_cp_commit();

    /* this thread's rows qrow, qrow + 8: LSE (+inf beyond the rows: P = 0) and Dsum */
    const int64_t ws = (b * p.Hq + hq) * p.Sq + i0;
    const float lse_a = qrow < q_rows ? p.lse_ws[ws + qrow] : INFINITY;
    const float lse_b = qrow + 8 < q_rows ? p.lse_ws[ws + qrow + 8] : INFINITY;
    const float ds_a = qrow < q_rows ? p.dsum_ws[ws + qrow] : 0.f;
    const float ds_b = qrow + 8 < q_rows ? p.dsum_ws[ws + qrow + 8] : 0.f;

    /* descriptors (K-major) of this warpgroup's Q and dO rows */
    const uint64_t dQ0 = gmma_desc(sQ + wg * 64 * 128, 16, 1024), ddO0 = gmma_desc(sdO + wg * 64 * 128, 16, 1024);

    float acc_dq[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dq[n][e] = 0.f;

    for (int64_t it = 0; it < nkb; it++) {
        const int buf = (int)(it & 1);
        bwdx_cp_wait_all();
        gmma_fence_proxy(); /* this thread's cp.async data -> visible to wgmma after the barrier */
        __syncthreads();    /* buffer buf complete; every warpgroup is done with buf^1 */
        if (it + 1 < nkb) issue(it + 1, buf ^ 1);
        bwdx_cp_commit();
        const int64_t j0 = (kb_lo + it) * BC;
        const uint32_t sKb = sK + buf * L::kv, sVb = sV + buf * L::kv;

        /* S = Q_w K^T and dP = dO_w V^T (two groups) */
        float s[BC / 8][4], dp[BC / 8][4]; /* first step: scale_d = 0 */
        const uint64_t dK0 = gmma_desc(sKb, 16, 1024), dV0 = gmma_desc(sVb, 16, 1024);
        gmma_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            gmma_ss_m64n64k16<BF16, 0, 0>(s, dQ0 + (gmma_kslice_offset<BR>(ks) >> 4), dK0 + (gmma_kslice_offset<BC>(ks) >> 4), ks > 0);
        gmma_commit();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            gmma_ss_m64n64k16<BF16, 0, 0>(dp, ddO0 + (gmma_kslice_offset<BR>(ks) >> 4), dV0 + (gmma_kslice_offset<BC>(ks) >> 4), ks > 0);
        gmma_commit();
        gmma_wait<1>();
        gmma_fence_operands(s);

        /* P = exp(scale * S + mask - lse), rounded (A fragments, k = key); -0 where hidden */
        const bwd_tile tm = bwd_tile_make<BC, BR>(p, i0, j0);
        const float *mrow = p.mask ? p.mask + b * p.ms[0] + hq * p.ms[1] + i0 * p.ms[2] + j0 * p.ms[3] : NULL;
        uint32_t pa[BC / 16][4];
        if (!tm.partial && !mrow) { /* CTA-uniform: every entry visible, no mask (mval = 0) */
#pragma unroll
            for (int nt = 0; nt < BC / 8; nt++) {
                float pv[4];
#pragma unroll
                for (int e = 0; e < 4; e++)
                    pv[e] = bwdx_exp2((fmaf(s[nt][e], p.scale, 0.f) - ((e >> 1) ? lse_b : lse_a)) * BWD_LOG2E);
                pa[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(pv[0], pv[1]);
                pa[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(pv[2], pv[3]);
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < BC / 8; nt++) {
                float pv[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int jl = nt * 8 + 2 * t + (e & 1);
                    const int il = qrow + ((e >> 1) << 3);
                    bool vis = true;
                    if (tm.partial) vis = bwd_tile_vis(tm, il, jl);
                    float mval = 0.f;
                    if (mrow && vis) {
                        mval = __ldg(mrow + il * p.ms[2] + jl * p.ms[3]);
                        vis = mval != -INFINITY;
                    }
                    const float x = fmaf(s[nt][e], p.scale, mval) - ((e >> 1) ? lse_b : lse_a);
                    pv[e] = vis ? bwdx_exp2(x * BWD_LOG2E) : -0.f;
                }
                pa[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(pv[0], pv[1]);
                pa[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(pv[2], pv[3]);
            }
        }

        /* dS = P (dP - Dsum), zero where hidden, rounded (A fragments) */
        gmma_wait<0>();
        gmma_fence_operands(dp);
        uint32_t da[BC / 16][4];
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
            float dv4[4];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t pp = pa[nt >> 1][(nt & 1) * 2 + h];
                const float2 pr = bwdx_unpack<BF16>(pp);
                const float dsum = h ? ds_b : ds_a;
                dv4[2 * h] = bwd_hid_lo(pp) ? 0.f : pr.x * (dp[nt][2 * h] - dsum);
                dv4[2 * h + 1] = bwd_hid_hi(pp) ? 0.f : pr.y * (dp[nt][2 * h + 1] - dsum);
            }
            da[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(dv4[0], dv4[1]);
            da[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(dv4[2], dv4[3]);
        }

        /* dQ += dS K (B = the K tile MN-major); done before the next loop top's barrier, after
         * which buffer buf is reloaded */
        const uint64_t dKt0 = gmma_desc(sKb, BC * 128, 1024);
        gmma_fence();
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) gmma_rs<HD, BF16, 1>(acc_dq, da[kk], dKt0 + ((kk * 16 * 128) >> 4));
        gmma_commit();
        gmma_wait<0>();
        gmma_fence_operands(acc_dq);
    }

    bwdx_cp_wait_all(); /* nkb == 0 leaves Q, dO pending */

    /* dQ = scale * acc (this thread's rows qrow, qrow + 8) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t i = i0 + qrow + h * 8;
        if (i < p.Sq) {
            uint16_t *dq = p.dq + b * p.dqs[0] + i * p.dqs[1] + hq * p.dqs[2];
#pragma unroll
            for (int nt = 0; nt < HD / 8; nt++) {
                const int64_t d = nt * 8 + 2 * t;
                if (d < p.D)
                    bwd_store_pair<BF16>(dq + d, acc_dq[nt][2 * h] * p.scale, acc_dq[nt][2 * h + 1] * p.scale, p.w32_dq);
            }
        }
    }
}

// ----------------------------------------------------------------------------
// 3a. default mode: dQ = scale * fp32 workspace

template <bool BF16>
__global__ void __launch_bounds__(256) bwd_dq_convert_kernel(const bwd_params p) {
    const int64_t npairs = p.B * p.Hq * p.Sq * (p.D / 2);
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < npairs; x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = (x % (p.D / 2)) * 2;
        const int64_t row = x / (p.D / 2);
        const int64_t i = row % p.Sq, bh = row / p.Sq;
        const int64_t hq = bh % p.Hq, b = bh / p.Hq;
        const float2 v = *reinterpret_cast<const float2 *>(p.dq_ws + row * p.D + d);
        bwd_store_pair<BF16>(p.dq + b * p.dqs[0] + i * p.dqs[1] + hq * p.dqs[2] + d, v.x * p.scale, v.y * p.scale,
                             p.w32_dq);
    }
}

// ----------------------------------------------------------------------------
// 3b. deterministic mode: dQ per query block, kv blocks summed in order

template <int HD>
struct bwd_dq_smem {
    static constexpr size_t t = (size_t)BWD_BR * HD; /* BR == BC */
    /* sQ, sdO, sK[2], sV[2]; then the slow path's fp32 scratch [BWD_WARPS][16][BWD_BC] */
    static constexpr size_t bytes = 6 * t * 2 + (size_t)BWD_WARPS * 16 * BWD_BC * 4;
};

template <int HD, int HO, bool BF16, bool EXACT>
__global__ void __launch_bounds__(BWD_THREADS, (HD <= 128 ? 2 : 1)) bwd_dq_kernel(const bwd_params p) {
    extern __shared__ __align__(128) unsigned char bwd_smem_raw[];
    typedef bwd_dq_smem<HD> L;
    uint16_t *sQ = reinterpret_cast<uint16_t *>(bwd_smem_raw);
    uint16_t *sdO = sQ + L::t;
    uint16_t *sK = sdO + L::t; /* [2] */
    uint16_t *sV = sK + 2 * L::t; /* [2] */
    float *sdSf = reinterpret_cast<float *>(sV + 2 * L::t); /* [warp][16][BC], slow path only */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    float *myf = sdSf + warp * 16 * BWD_BC;

    int64_t bid = blockIdx.x;
    const int64_t nqb = (p.Sq + BWD_BR - 1) / BWD_BR;
    const int64_t qb = bid % nqb;
    bid /= nqb;
    const int split = (int)(bid % p.nsplit);
    bid /= p.nsplit;
    const int64_t hq = bid % p.Hq, b = bid / p.Hq;
    const int64_t hkv = hq / p.group;
    const int d_off = split * HO;
    const int64_t i0 = qb * BWD_BR;
    const int64_t q_rows = p.Sq - i0 < BWD_BR ? p.Sq - i0 : BWD_BR;

    /* keys seen by at least one row of this block */
    int64_t j_lo = 0, j_hi = p.Sk;
    if (p.has_left) { int64_t x = i0 + p.off - p.left; if (x > j_lo) j_lo = x; }
    if (p.has_right) { int64_t x = i0 + q_rows + p.off + p.right; if (x < j_hi) j_hi = x; }
    int64_t kb_lo = 0, nkb = 0;
    if (j_lo < j_hi) { kb_lo = j_lo / BWD_BC; nkb = (j_hi + BWD_BC - 1) / BWD_BC - kb_lo; }

    bwd_load_tile<BWD_BR, HD, BWD_THREADS>(sQ, p.q + b * p.qs[0] + i0 * p.qs[1] + hq * p.qs[2], p.qs[1], q_rows, p.D, p.vec_q, tid);
    bwd_load_tile<BWD_BR, HD, BWD_THREADS>(sdO, p.dout + b * p.dos[0] + i0 * p.dos[1] + hq * p.dos[2], p.dos[1], q_rows, p.D,
                              p.vec_do, tid);
    auto issue = [&](int64_t it, int buf) {
        const int64_t j0 = (kb_lo + it) * BWD_BC;
        const int64_t rows = p.Sk - j0 < BWD_BC ? p.Sk - j0 : BWD_BC;
        bwd_load_tile<BWD_BC, HD, BWD_THREADS>(sK + buf * L::t, p.k + b * p.ks[0] + j0 * p.ks[1] + hkv * p.ks[2], p.ks[1], rows,
                                  p.D, p.vec_k, tid);
        bwd_load_tile<BWD_BC, HD, BWD_THREADS>(sV + buf * L::t, p.v + b * p.vs[0] + j0 * p.vs[1] + hkv * p.vs[2], p.vs[1], rows,
                                  p.D, p.vec_v, tid);
    };
    if (nkb > 0) issue(0, 0);
    bwdx_cp_commit();

    /* per-thread rows: il = warp*16 + g (+8) */
    const int ila = warp * 16 + g;
    const int64_t ws = (b * p.Hq + hq) * p.Sq + i0;
    const float lse_a = ila < q_rows ? p.lse_ws[ws + ila] : INFINITY;
    const float lse_b = ila + 8 < q_rows ? p.lse_ws[ws + ila + 8] : INFINITY;
    const float ds_a = ila < q_rows ? p.dsum_ws[ws + ila] : 0.f;
    const float ds_b = ila + 8 < q_rows ? p.dsum_ws[ws + ila + 8] : 0.f;

    float acc_dq[HO / 8][4];
#pragma unroll
    for (int n = 0; n < HO / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dq[n][e] = 0.f;

    for (int64_t it = 0; it < nkb; it++) {
        const int buf = (int)(it & 1);
        bwdx_cp_wait_all();
        __syncthreads();
        if (it + 1 < nkb) issue(it + 1, buf ^ 1);
        bwdx_cp_commit();
        const int64_t j0 = (kb_lo + it) * BWD_BC;
        const uint16_t *sKb = sK + buf * L::t;
        const uint16_t *sVb = sV + buf * L::t;

        /* slow path for dQ += dS K: row-dependent visibility and a NaN/Inf in this K block */
        const bwd_tile tm = bwd_tile_make<BWD_BC, BWD_BR>(p, i0, j0);
        int nf = 0;
        if (EXACT && (tm.partial || p.mask)) nf = __syncthreads_or(bwd_tile_nonfinite<BF16, BWD_BC * HD, BWD_THREADS>(sKb, tid));

        const float *mrow = p.mask ? p.mask + b * p.ms[0] + hq * p.ms[1] + i0 * p.ms[2] + j0 * p.ms[3] : NULL;
        /* S (16 query rows of this warp x 64 keys) = Q K^T, then P rounded, packed pairs
         * (row g / g+8), -0 where hidden. A lambda: the slow path recomputes it. */
        auto compute_p = [&](uint32_t (&pa)[8][2]) {
            float acc_s[8][4];
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_s[n][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                uint32_t a[4];
                bwdx_ldsm4(a, bwdx_smem(sQ + bwdx_swz<HD>(warp * 16 + bwdx_row_A(lane), ks * 16 + bwdx_col_A(lane))));
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bb[4];
                    bwdx_ldsm4(bb, bwdx_smem(sKb + bwdx_swz<HD>(np * 16 + bwdx_row_Bn(lane), ks * 16 + bwdx_col_Bn(lane))));
                    bwdx_mma<BF16>(acc_s[2 * np], a, bb[0], bb[1]);
                    bwdx_mma<BF16>(acc_s[2 * np + 1], a, bb[2], bb[3]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float pv[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int jl = nt * 8 + 2 * t + (e & 1);
                    const int il = ila + ((e >> 1) << 3);
                    bool vis = true;
                    if (tm.partial) vis = bwd_tile_vis(tm, il, jl);
                    float mval = 0.f;
                    if (mrow && vis) {
                        mval = __ldg(mrow + il * p.ms[2] + jl * p.ms[3]);
                        vis = mval != -INFINITY;
                    }
                    const float x = fmaf(acc_s[nt][e], p.scale, mval) - ((e >> 1) ? lse_b : lse_a);
                    pv[e] = vis ? bwdx_exp2(x * BWD_LOG2E) : -0.f;
                }
                pa[nt][0] = bwdx_pack<BF16>(pv[0], pv[1]);
                pa[nt][1] = bwdx_pack<BF16>(pv[2], pv[3]);
            }
        };
        /* dP = dO V^T */
        auto compute_dp = [&](float (&acc_s)[8][4]) {
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_s[n][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                uint32_t a[4];
                bwdx_ldsm4(a, bwdx_smem(sdO + bwdx_swz<HD>(warp * 16 + bwdx_row_A(lane), ks * 16 + bwdx_col_A(lane))));
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bb[4];
                    bwdx_ldsm4(bb, bwdx_smem(sVb + bwdx_swz<HD>(np * 16 + bwdx_row_Bn(lane), ks * 16 + bwdx_col_Bn(lane))));
                    bwdx_mma<BF16>(acc_s[2 * np], a, bb[0], bb[1]);
                    bwdx_mma<BF16>(acc_s[2 * np + 1], a, bb[2], bb[3]);
                }
            }
        };
        uint32_t pa[8][2];
        compute_p(pa);
        float acc_s[8][4];
        compute_dp(acc_s);

        /* dS = P (dP - Dsum), zero where hidden, rounded, as A fragments (k = key) */
        uint32_t da[4][4];
        float ds_max = 0.f; /* largest |dS| (NaN ignored): does the 16-bit rounding overflow? */
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            float dv4[4];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t pp = pa[nt][h];
                const float2 pr = bwdx_unpack<BF16>(pp);
                const float dsum = h ? ds_b : ds_a;
                dv4[2 * h] = bwd_hid_lo(pp) ? 0.f : pr.x * (acc_s[nt][2 * h] - dsum);
                dv4[2 * h + 1] = bwd_hid_hi(pp) ? 0.f : pr.y * (acc_s[nt][2 * h + 1] - dsum);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) ds_max = fmaxf(ds_max, fabsf(dv4[e]));
            da[nt >> 1][(nt & 1) * 2 + 0] = bwdx_pack<BF16>(dv4[0], dv4[1]);
            da[nt >> 1][(nt & 1) * 2 + 1] = bwdx_pack<BF16>(dv4[2], dv4[3]);
        }

        /* dQ += dS K (columns d_off .. d_off + HO) */
        if (!EXACT || (!nf && !__any_sync(0xffffffffu, ds_max >= bwd_ovf16<BF16>()))) {
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                for (int np = 0; np < HO / 16; np++) {
                    uint32_t bb[4];
                    bwdx_ldsm4_t(bb, bwdx_smem(sKb + bwdx_swz<HD>(kk * 16 + bwdx_row_Bk(lane), d_off + np * 16 + bwdx_col_Bk(lane))));
                    bwdx_mma<BF16>(acc_dq[2 * np], da[kk], bb[0], bb[1]);
                    bwdx_mma<BF16>(acc_dq[2 * np + 1], da[kk], bb[2], bb[3]);
                }
            }
        } else {
            /* slow (warp-uniform): P and dP recomputed (bitwise the same), fp32 dS rows of this
             * warp to its scratch (-0 = hidden), scalar FMAs in key order */
            uint32_t pa2[8][2];
            float dp2[8][4];
            compute_p(pa2);
            compute_dp(dp2);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t pp = pa2[nt][h];
                    const float2 pr = bwdx_unpack<BF16>(pp);
                    const float dsum = h ? ds_b : ds_a;
                    float2 v;
                    v.x = bwd_ds_scratch(bwd_hid_lo(pp), pr.x, dp2[nt][2 * h] - dsum);
                    v.y = bwd_ds_scratch(bwd_hid_hi(pp), pr.y, dp2[nt][2 * h + 1] - dsum);
                    *reinterpret_cast<float2 *>(myf + (g + 8 * h) * BWD_BC + nt * 8 + 2 * t) = v;
                }
            __syncwarp();
#pragma unroll 1
            for (int j = 0; j < BWD_BC; j++) {
                const float s0 = myf[g * BWD_BC + j], s1 = myf[(g + 8) * BWD_BC + j];
                const bool h0 = bwd_hid32(s0), h1 = bwd_hid32(s1);
#pragma unroll
                for (int n = 0; n < HO / 8; n++) {
                    const float2 x = bwdx_unpack<BF16>(*reinterpret_cast<const uint32_t *>(sKb + bwdx_swz<HD>(j, d_off + n * 8 + 2 * t)));
                    if (!h0) { acc_dq[n][0] = fmaf(s0, x.x, acc_dq[n][0]); acc_dq[n][1] = fmaf(s0, x.y, acc_dq[n][1]); }
                    if (!h1) { acc_dq[n][2] = fmaf(s1, x.x, acc_dq[n][2]); acc_dq[n][3] = fmaf(s1, x.y, acc_dq[n][3]); }
                }
            }
        }
    }

    bwdx_cp_wait_all(); /* nkb == 0 leaves Q, dO pending */

#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t i = i0 + ila + h * 8;
        if (i < p.Sq) {
            uint16_t *dq = p.dq + b * p.dqs[0] + i * p.dqs[1] + hq * p.dqs[2];
#pragma unroll
            for (int nt = 0; nt < HO / 8; nt++) {
                const int64_t d = d_off + nt * 8 + 2 * t;
                if (d < p.D)
                    bwd_store_pair<BF16>(dq + d, acc_dq[nt][2 * h] * p.scale, acc_dq[nt][2 * h + 1] * p.scale, p.w32_dq);
            }
        }
    }
}

// ----------------------------------------------------------------------------
// host: workspace (one cached buffer per device, held under a lock for a whole call)

#define BWD_MAX_DEVICES 64
static pthread_mutex_t bwd_ws_lock = PTHREAD_MUTEX_INITIALIZER;
static void *bwd_ws_ptr[BWD_MAX_DEVICES];
static size_t bwd_ws_size[BWD_MAX_DEVICES];

static fa_status bwd_cuda_fail(fa_error *err, cudaError_t e, const char *what) {
    return fa_fail(err, FA_ERR_DEVICE, "", "CUDA error in the backward (%s): %s (%s)", what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

/* 16-byte vector access allowed: pointer 16-byte aligned and every used stride a multiple of 8. */
static int bwd_vec16(const fa_tensor *t, int64_t nb, int64_t ns, int64_t nh) {
    if (((uintptr_t)t->ptr) % 16 != 0) return 0;
    if (nb > 1 && t->stride[0] % 8 != 0) return 0;
    if (ns > 1 && t->stride[1] % 8 != 0) return 0;
    if (nh > 1 && t->stride[2] % 8 != 0) return 0;
    return 1;
}

/* 4-byte pair access allowed: pointer 4-byte aligned and every used stride even. */
static int bwd_vec4(const fa_tensor *t, int64_t nb, int64_t ns, int64_t nh) {
    if (((uintptr_t)t->ptr) % 4 != 0) return 0;
    if (nb > 1 && t->stride[0] % 2 != 0) return 0;
    if (ns > 1 && t->stride[1] % 2 != 0) return 0;
    if (nh > 1 && t->stride[2] % 2 != 0) return 0;
    return 1;
}

/* The dK/dV kernel (NW warps) for one mode. */
template <int HD, int NW, int BR, bool BF16, bool DET, bool EXACT>
static cudaError_t bwd_launch_dkdv(const bwd_params &p, cudaStream_t st) {
    constexpr int HO = HD < 128 ? HD : 128;
    typedef bwd_dkdv_smem<HD, NW, BR> L;
    const int64_t grid = (p.Sk + L::BC - 1) / L::BC * p.nsplit * p.Hkv * p.B;
    if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    if (grid == 0) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(bwd_dkdv_kernel<HD, HO, NW, BR, BF16, DET, EXACT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::bytes);
    if (e != cudaSuccess) return e;
    bwd_dkdv_kernel<HD, HO, NW, BR, BF16, DET, EXACT><<<(unsigned)grid, NW * 32, L::bytes, st>>>(p);
    return cudaGetLastError();
}

/* default mode, after the dK/dV kernel: dQ = scale * workspace */
template <bool BF16>
static cudaError_t bwd_launch_convert(const bwd_params &p, cudaStream_t st) {
    const int64_t npairs = p.B * p.Hq * p.Sq * (p.D / 2);
    if (npairs == 0) return cudaSuccess;
    int64_t blocks = (npairs + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    bwd_dq_convert_kernel<BF16><<<(unsigned)blocks, 256, 0, st>>>(p);
    return cudaGetLastError();
}

/* 0 when FLASHCHECK_BWD_GMMA_DQ=0 is set: the deterministic mode's dQ stays on bwd_dq_kernel
 * where the Hopper dK/dV kernel runs (A/B figures; read once, under bwd_ws_lock) */
static int bwd_gmma_dq_allowed(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *s = getenv("FLASHCHECK_BWD_GMMA_DQ");
        cached = !(s && strcmp(s, "0") == 0);
    }
    return cached;
}

/* deterministic mode, after the dK/dV kernel: dQ per query block (section 3b) */
template <int HD, bool BF16, bool EXACT>
static cudaError_t bwd_launch_dq_det(const bwd_params &p, cudaStream_t st) {
    constexpr int HO = HD < 128 ? HD : 128;
    const int64_t grid_q = (p.Sq + BWD_BR - 1) / BWD_BR * p.nsplit * p.Hq * p.B;
    if (grid_q > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    if (grid_q == 0) return cudaSuccess;
    const size_t smem_q = bwd_dq_smem<HD>::bytes;
    cudaError_t e = cudaFuncSetAttribute(bwd_dq_kernel<HD, HO, BF16, EXACT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem_q);
    if (e != cudaSuccess) return e;
    bwd_dq_kernel<HD, HO, BF16, EXACT><<<(unsigned)grid_q, BWD_THREADS, smem_q, st>>>(p);
    return cudaGetLastError();
}

/* the Hopper dK/dV kernel (section 2h), then the dQ conversion (DQ: default mode) or the
 * deterministic dQ kernel (!DQ: deterministic mode; the fast instantiation, like the call) */
template <int HD, bool BF16, bool DQ>
static cudaError_t bwd_launch_g(const bwd_params &p, cudaStream_t st) {
    typedef bwd_g_smem<HD, DQ> L;
    const int64_t grid = (p.Sk + 127) / 128 * p.Hkv * p.B;
    if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    cudaError_t e;
    if (grid > 0) {
        e = cudaFuncSetAttribute(bwd_g_dkdv_kernel<HD, BF16, DQ>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)L::bytes);
        if (e != cudaSuccess) return e;
        bwd_g_dkdv_kernel<HD, BF16, DQ><<<(unsigned)grid, 256, L::bytes, st>>>(p);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (DQ) return bwd_launch_convert<BF16>(p, st);
    if (!bwd_gmma_dq_allowed()) return bwd_launch_dq_det<HD, BF16, false>(p, st);
    typedef bwd_gq_smem<HD> LQ; /* the Hopper dQ kernel (section 2q) */
    const int64_t grid_q = (p.Sq + 127) / 128 * p.Hq * p.B;
    if (grid_q > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    if (grid_q == 0) return cudaSuccess;
    e = cudaFuncSetAttribute(bwd_g_dq_kernel<HD, BF16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)LQ::bytes);
    if (e != cudaSuccess) return e;
    bwd_g_dq_kernel<HD, BF16><<<(unsigned)grid_q, 256, LQ::bytes, st>>>(p);
    return cudaGetLastError();
}

template <int HD, int NW, int BR, bool BF16, bool EXACT>
static cudaError_t bwd_launch_main(const bwd_params &p, int deterministic, cudaStream_t st) {
    cudaError_t e;
    if (!deterministic) {
        if ((e = bwd_launch_dkdv<HD, NW, BR, BF16, false, EXACT>(p, st)) != cudaSuccess) return e;
        if ((e = bwd_launch_convert<BF16>(p, st)) != cudaSuccess) return e;
    } else {
        if ((e = bwd_launch_dkdv<HD, NW, BR, BF16, true, EXACT>(p, st)) != cudaSuccess) return e;
        if ((e = bwd_launch_dq_det<HD, BF16, EXACT>(p, st)) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

template <bool BF16>
static cudaError_t bwd_launch_prep(const bwd_params &p, cudaStream_t st) {
    const int64_t nrows = p.B * p.Hq * p.Sq + ((p.scan_nf || p.scan_norm) ? p.B * p.Hkv * p.Sk : 0);
    if (nrows == 0) return cudaSuccess;
    int64_t blocks = (nrows + 7) / 8;
    if (blocks > 4096) blocks = 4096; /* grid-stride; few blocks keep the screen's atomics few */
    bwd_prep_kernel<BF16><<<(unsigned)blocks, 256, 0, st>>>(p);
    return cudaGetLastError();
}

/* dK/dV kernel: 8 warps (128 kv rows x 64 query rows per step) for head dims <= 128,
 * 4 warps for 256; query blocks of 64 rows (32 was measured slower, bench/RESULTS.md) */
template <bool BF16>
static cudaError_t bwd_launch_body(const bwd_params &p, int hd, int deterministic, int exact, int gmma, cudaStream_t st) {
    if (gmma && !exact && hd == 64)
        return deterministic ? bwd_launch_g<64, BF16, false>(p, st) : bwd_launch_g<64, BF16, true>(p, st);
    if (gmma && !exact && hd == 128)
        return deterministic ? bwd_launch_g<128, BF16, false>(p, st) : bwd_launch_g<128, BF16, true>(p, st);
    if (hd == 64) return exact ? bwd_launch_main<64, 8, 64, BF16, true>(p, deterministic, st)
                               : bwd_launch_main<64, 8, 64, BF16, false>(p, deterministic, st);
    if (hd == 128) return exact ? bwd_launch_main<128, 8, 64, BF16, true>(p, deterministic, st)
                                : bwd_launch_main<128, 8, 64, BF16, false>(p, deterministic, st);
    return exact ? bwd_launch_main<256, 4, 64, BF16, true>(p, deterministic, st)
                 : bwd_launch_main<256, 4, 64, BF16, false>(p, deterministic, st);
}

/* The screen's verdict (words documented at bwd_prep_kernel): 1 when this call needs
 * the exact kernels. */
static int bwd_needs_exact(const unsigned scr[4], const bwd_params *p) {
    float w[4];
    memcpy(w, scr, sizeof(w));
    if (p->scan_nf && scr[0] != 0) return 1;
    if (!p->scan_norm) return 0;
    const double ovf = 65520.0; /* |x| that rounds to Inf in fp16 */
    const double bound = sqrt((double)w[1]) * sqrt((double)w[2]) + (double)w[3];
    return !(bound < 0.5 * ovf); /* NaN: exact */
}

static const fa_limits bwd_limits = {
    256, /* max_head_dim */
    8,   /* head_dim_multiple */
    1,   /* dqk_must_equal_dv */
    2,   /* ptr_align_bytes: the element size; 16-byte paths are chosen at run time */
    1,   /* unit_last_stride */
};

/* 0 when FLASHCHECK_BWD_GMMA=0 is set (read once; callers hold bwd_ws_lock) */
static int bwd_gmma_allowed(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *s = getenv("FLASHCHECK_BWD_GMMA");
        cached = !(s && strcmp(s, "0") == 0);
    }
    return cached;
}

/* 0 when FLASHCHECK_BWD_GMMA_DET=0 is set: the deterministic mode keeps the sm_80 dK/dV
 * kernel even where the Hopper one is allowed (A/B figures; read once, under bwd_ws_lock) */
static int bwd_gmma_det_allowed(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *s = getenv("FLASHCHECK_BWD_GMMA_DET");
        cached = !(s && strcmp(s, "0") == 0);
    }
    return cached;
}

// ----------------------------------------------------------------------------
// entry point

static fa_status bwd_run_locked(const fa_bwd_args *a, fa_error *err, int dev) {
    const fa_problem *pr = &a->p;
    cudaStream_t st = (cudaStream_t)a->stream;
    cudaError_t e;
    const int64_t D = pr->head_dim_qk;
    const int hd = D <= 64 ? 64 : (D <= 128 ? 128 : 256);

    /* shared memory of the largest kernel of this call */
    int optin = 0;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess)
        return bwd_cuda_fail(err, e, "cudaDeviceGetAttribute");
    size_t need = hd == 64 ? bwd_dkdv_smem<64, 8, 64>::bytes
                  : hd == 128 ? bwd_dkdv_smem<128, 8, 64>::bytes
                              : bwd_dkdv_smem<256, 4, 64>::bytes;
    size_t need_q = hd == 64 ? bwd_dq_smem<64>::bytes : hd == 128 ? bwd_dq_smem<128>::bytes : bwd_dq_smem<256>::bytes;
    if (a->deterministic && need_q > need) need = need_q;
    if ((size_t)optin < need)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "head_dim_qk",
                       "head_dim_qk %lld needs %zu bytes of shared memory per block in the backward; this GPU "
                       "allows %d.", (long long)D, need, optin);

    bwd_params p;
    memset(&p, 0, sizeof(p));
    p.B = pr->batch; p.Sq = pr->seqlen_q; p.Sk = pr->seqlen_k;
    p.Hq = pr->heads_q; p.Hkv = pr->heads_kv; p.group = p.Hq / p.Hkv; p.D = D;
    p.scale = fa_effective_scale(pr);
    p.q = (const uint16_t *)a->q.ptr; p.k = (const uint16_t *)a->k.ptr; p.v = (const uint16_t *)a->v.ptr;
    p.o = (const uint16_t *)a->o.ptr; p.dout = (const uint16_t *)a->dout.ptr;
    p.dq = (uint16_t *)a->dq.ptr; p.dk = (uint16_t *)a->dk.ptr; p.dv = (uint16_t *)a->dv.ptr;
    for (int x = 0; x < 3; x++) {
        p.qs[x] = a->q.stride[x]; p.ks[x] = a->k.stride[x]; p.vs[x] = a->v.stride[x];
        p.os[x] = a->o.stride[x]; p.dos[x] = a->dout.stride[x];
        p.dqs[x] = a->dq.stride[x]; p.dks[x] = a->dk.stride[x]; p.dvs[x] = a->dv.stride[x];
        p.lses[x] = a->lse.stride[x];
    }
    p.lse = a->lse.ptr;
    p.mask = a->mask.ptr;
    for (int x = 0; x < 4; x++) p.ms[x] = a->mask.stride[x];

    /* visibility: dj = j - i - off with diag(i) = i + off */
    const int bottom_right = pr->causal != FA_CAUSAL_NONE ? pr->causal == FA_CAUSAL_BOTTOM_RIGHT
                                                          : pr->window_align == FA_ALIGN_BOTTOM_RIGHT;
    p.off = bottom_right ? p.Sk - p.Sq : 0;
    const int64_t span = p.Sq + p.Sk; /* |dj| < span always: larger bounds never bind */
    /* causal: j <= diag(i); a window_right >= 0 is then never tighter than causal */
    const int64_t right = pr->causal != FA_CAUSAL_NONE ? 0 : pr->window_right; /* < 0: unbounded */
    p.has_right = right >= 0 && right < span;
    p.right = p.has_right ? right : 0;
    p.has_left = pr->window_left >= 0 && pr->window_left < span;
    p.left = p.has_left ? pr->window_left : 0;

    p.nsplit = hd == 256 ? 2 : 1;
    /* the screen: NaN/Inf can only leak where visibility differs from row to row; the
     * |dS| bound only matters for fp16 (bf16 rounds dS to Inf only at the top of fp32's
     * range, where dP itself has already left the precision profile) */
    p.scan_nf = p.has_left || p.has_right || p.mask != NULL;
    p.scan_norm = pr->dtype == FA_F16;
    p.vec_q = bwd_vec16(&a->q, p.B, p.Sq, p.Hq);
    p.vec_k = bwd_vec16(&a->k, p.B, p.Sk, p.Hkv);
    p.vec_v = bwd_vec16(&a->v, p.B, p.Sk, p.Hkv);
    p.vec_do = bwd_vec16(&a->dout, p.B, p.Sq, p.Hq);
    p.vec_o_prep = bwd_vec16(&a->o, p.B, p.Sq, p.Hq);
    p.vec_do_prep = p.vec_do;
    p.w32_dq = bwd_vec4(&a->dq, p.B, p.Sq, p.Hq);
    p.w32_dk = bwd_vec4(&a->dk, p.B, p.Sk, p.Hkv);
    p.w32_dv = bwd_vec4(&a->dv, p.B, p.Sk, p.Hkv);

    /* the Hopper dK/dV kernel (section 2h) where it is proven: an sm_90 device (its code is
     * sm_90a), head dim padded to 64 or 128, 16-byte copies for every streamed view, the
     * shared memory it needs, and not switched off (FLASHCHECK_BWD_GMMA=0; for the deterministic
     * mode also FLASHCHECK_BWD_GMMA_DET=0); the launch also needs the fast kernels
     * (bwd_launch_body). Deterministic mode: its dK/dV-only instantiation, then bwd_g_dq_kernel
     * (section 2q; bwd_dq_kernel with FLASHCHECK_BWD_GMMA_DQ=0) */
    int cc_major = 0, cc_minor = 0;
    if ((e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess)
        return bwd_cuda_fail(err, e, "cudaDeviceGetAttribute");
    const size_t need_g = hd == 64 ? bwd_g_smem<64, true>::bytes : bwd_g_smem<128, true>::bytes; /* the larger */
    const int gmma = bwd_gmma_allowed() && cc_major == 9 && cc_minor == 0 && (hd == 64 || hd == 128) && p.vec_q &&
                     p.vec_k && p.vec_v && p.vec_do && (size_t)optin >= need_g &&
                     (!a->deterministic || bwd_gmma_det_allowed());

    /* workspace: lse, dsum [B*Hq*Sq], the screen (256 bytes) and (default mode) dq [B*Hq*Sq*D], fp32 */
    const int64_t nrows = p.B * p.Hq * p.Sq;
    const size_t rows_bytes = ((size_t)nrows * 4 + 255) / 256 * 256;
    const size_t dq_bytes = a->deterministic ? 0 : (size_t)nrows * (size_t)D * 4;
    const size_t ws_bytes = 2 * rows_bytes + 256 + dq_bytes;
    if (ws_bytes > bwd_ws_size[dev]) {
        if (bwd_ws_ptr[dev]) {
            if ((e = cudaFree(bwd_ws_ptr[dev])) != cudaSuccess) return bwd_cuda_fail(err, e, "cudaFree");
            bwd_ws_ptr[dev] = NULL;
            bwd_ws_size[dev] = 0;
        }
        e = cudaMalloc(&bwd_ws_ptr[dev], ws_bytes);
        if (e != cudaSuccess) {
            bwd_ws_ptr[dev] = NULL;
            cudaGetLastError();
            return fa_fail(err, FA_ERR_NOMEM, "", "the backward needs %zu bytes of device workspace: %s", ws_bytes,
                           cudaGetErrorString(e));
        }
        bwd_ws_size[dev] = ws_bytes;
    }
    char *ws = (char *)bwd_ws_ptr[dev];
    p.lse_ws = (float *)ws;
    p.dsum_ws = (float *)(ws + rows_bytes);
    p.screen = (unsigned *)(ws + 2 * rows_bytes);
    p.dq_ws = a->deterministic ? NULL : (float *)(ws + 2 * rows_bytes + 256);
    if ((e = cudaMemsetAsync(ws + 2 * rows_bytes, 0, 256 + dq_bytes, st)) != cudaSuccess)
        return bwd_cuda_fail(err, e, "cudaMemsetAsync");

    /* preprocess and screen, then the fast or the exact kernels (bwd_needs_exact) */
    const int bf16 = pr->dtype == FA_BF16;
    e = bf16 ? bwd_launch_prep<true>(p, st) : bwd_launch_prep<false>(p, st);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "preprocess launch");
    int exact = 0;
    if (p.scan_nf || p.scan_norm) {
        unsigned scr[4];
        if ((e = cudaMemcpyAsync(scr, p.screen, sizeof(scr), cudaMemcpyDeviceToHost, st)) != cudaSuccess)
            return bwd_cuda_fail(err, e, "cudaMemcpyAsync (screen)");
        if ((e = cudaStreamSynchronize(st)) != cudaSuccess) return bwd_cuda_fail(err, e, "cudaStreamSynchronize");
        exact = bwd_needs_exact(scr, &p);
    }
    e = bf16 ? bwd_launch_body<true>(p, hd, a->deterministic, exact, gmma, st)
             : bwd_launch_body<false>(p, hd, a->deterministic, exact, gmma, st);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "kernel launch");
    if ((e = cudaStreamSynchronize(st)) != cudaSuccess) return bwd_cuda_fail(err, e, "cudaStreamSynchronize");
    return FA_OK;
}

extern "C" fa_status fa_cuda_backward(const fa_bwd_args *a, fa_error *err) {
    fa_status s = fa_validate_bwd(a, &bwd_limits, err);
    if (s != FA_OK) return s;
    const fa_problem *pr = &a->p;
    if (pr->batch == 0 || (pr->seqlen_q == 0 && pr->seqlen_k == 0)) return FA_OK; /* nothing to write */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "cudaGetDevice");
    if (dev < 0 || dev >= BWD_MAX_DEVICES)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "", "device %d is beyond the backward's table of %d devices", dev,
                       BWD_MAX_DEVICES);
    pthread_mutex_lock(&bwd_ws_lock);
    s = bwd_run_locked(a, err, dev);
    pthread_mutex_unlock(&bwd_ws_lock);
    return s;
}
