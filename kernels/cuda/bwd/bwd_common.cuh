/* bwd_common.cuh: what every CUDA backward kernel shares (prefix bwd_): parameters, tiles,
 * loads/stores, the visibility of a tile, the hidden-entry markers, and the algorithm steps
 * between the products: P of an accumulator tile (bwd_p_n8, bwd_p_n8_full) and dS
 * (bwd_ds_n8), written once and called by all four main kernels.
 *
 * Files: bwd_sm80.cu (preprocess, mma.sync dK/dV and dQ kernels, dQ conversion; the
 * exact slow paths), bwd_sm90.cu (the wgmma dK/dV and dQ kernels), bwd_host.cu
 * (fa_cuda_backward: workspace, screen verdict, kernel choice). Contract:
 * kernels/flash_api.h; seam: kernels/cuda/cuda_backend.h.
 *
 * Contract v3: varlen calls on the Hopper path run one grid per kernel for the whole packed batch
 * (each CTA finds its sequence and its tile within it: bwd_seq_view; blocks past a short
 * sequence's end exit); every other varlen call runs the dense kernels once per sequence
 * (bwd_host.cu, bwd_varlen);
 * softcap runs the CAP instantiations of the sm_80 kernels (bwd_p_n8 / bwd_ds_n8: s = fmaf(cap,
 * t, mask) with t = tanhf(q.k fl(scale / cap)) exactly as the forward, dS' = fl(fl(P (dP - D))
 * fl(1 - fl(t t)))); the Hopper kernels and the exact (slow-path) kernels have no CAP form.
 *
 * Kernels, run in order on args->stream:
 *   1. bwd_prep_kernel   a segment of a warp per query row (the fewest lanes whose 16-byte
 *                        chunks cover the head dim; 32 without 16-byte loads: bwd_prep_lanes):
 *                        Dsum_i = dO_i . O_i (fp32) and a
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
 *                        Query blocks of 128 rows at head dim 64, 64 at 128.
 *   2w. dense default-mode calls where 2h applies: bwd_ws_dkdv_kernel, 2h's products and
 *                        element steps in consumer warpgroups, a producer warp loading Q/dO by
 *                        TMA into a 2-stage mbarrier ring and a dQ warp adding the staged dQ
 *                        partials by tensor reductions (section 2w; 2h when a tensor map cannot
 *                        be encoded, or under the test policy bwd_no_ws).
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
 *   t = fmaf(S, scale, mask) - lse (two fp32 roundings), P = min(ex2.approx(t * log2 e), 1)
 *   (one more rounding, ex2 rel. err ~2^-22; the clamp: bwd_p_n8); P rounded (RN) to the input dtype and that
 *   rounded P is used for dV = P^T dO and for dS = P (dP - Dsum) (fp32); dS rounded (RN)
 *   to the input dtype before dS K and dS^T Q; Dsum accumulated in fp32 (RN, sequential
 *   per lane then a butterfly over the row's lanes); dQ partials added in fp32 (RN) by atomics in the default
 *   mode (order varies; the sm_90 kernels add them with bulk reductions, cp.reduce.async.bulk
 *   .add.f32 per row (2h) or cp.reduce.async.bulk.tensor .add per 32-column box (2w): fp32 adds done at L2 like the atomics', held to the same oracle bounds by the
 *   certification; the PTX manual we could check does not state their rounding) or summed in the mma
 *   accumulator in kv order (deterministic); wgmma accumulates like mma.sync (fp32, truncating);
 *   dQ and dK multiplied by scale in fp32, then every output rounded (RN) once.
 *
 * Tiles (dK/dV kernel): 8 warps, 128 kv rows x 64 query rows (4 warps, 64 x 64 for head
 * dim 256); dQ kernel: 4 warps, 64 x 64. Head dims padded to 64, 128 or 256 with zeros
 * (loads zero-fill), the dK/dV/dQ columns split in halves of 128 for 256.
 * Dqk != Dv: Q, K, dQ, dK are D = Dqk wide, V, O, dO, dV Dv wide (p.D, p.Dv). The pair
 * (Dqk padded to 192, Dv to 128) has its own instantiations (HD = 192 for S = K Q^T, dK, dQ;
 * HV = 128 for dP = V dO^T, dV, Dsum); any other pair runs the kernels of the larger padded
 * dim with both tensors' columns zero-filled past their own head dim (bwd_sm80_tile).
 * All global offsets are 64-bit. */
#ifndef FLASHCHECK_CUDA_BWD_COMMON_CUH
#define FLASHCHECK_CUDA_BWD_COMMON_CUH
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/common/gmma.h"
#include "kernels/cuda/common/ptx.h"

/* Element index of (row r, col c) in a tile of ROW 16-bit elements per row whose
 * 16-byte chunks are XOR-swizzled by the row's low 3 bits (ROW >= 64), so that
 * ldmatrix and cp.async on 8 consecutive rows hit 8 different bank groups. */
template <int ROW>
static __device__ __forceinline__ int bwd_swz(int r, int c) {
    return r * ROW + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
}

// ----------------------------------------------------------------------------
// tiles (typed data): the sm_80 dQ kernel and the preprocess constants; the other kernels'
// tiles are their shared-memory layouts (bwd_dkdv_smem, bwd_g_smem, bwd_gq_smem) and the
// dispatch in bwd_sm80.cu / bwd_sm90.cu

static constexpr int BWD_WARPS = 4;                /* sm_80 dQ kernel: warps */
static constexpr int BWD_THREADS = BWD_WARPS * 32;
static constexpr int BWD_BC = 64;                  /* kv rows per block */
static constexpr int BWD_BR = 64;                  /* query rows per block */
static constexpr float BWD_LOG2E = 1.4426950408889634f;

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
    int64_t B, Sq, Sk, Hq, Hkv, group, D; /* D: head dim of Q, K (Dqk) */
    int64_t Dv;                           /* head dim of V, O, dO, dV */
    float scale;
    /* visibility: dj = j - i - off; visible iff (!has_right || dj <= right) && (!has_left || dj >= -left) */
    int64_t off, right, left;
    int has_right, has_left;
    int nsplit;                  /* column halves of dK/dV/dQ (1 or 2) */
    int vec_q, vec_k, vec_v, vec_do; /* 1: 16-byte cp.async allowed for this view */
    int vec_o_prep, vec_do_prep;     /* 1: 16-byte loads allowed in the preprocess */
    int w32_dq, w32_dk, w32_dv;      /* 1: 4-byte stores of pairs allowed */
    /* softcap (contract v3; the CAP instantiations read them): s = fmaf(softcap,
     * tanhf(q.k * cap_scale), mask), cap_scale = fl(scale / softcap), as the forward forms it */
    float softcap, cap_scale;
    /* one-grid varlen (contract v3; bwd_seq_view): vl = 1 when the call is packed and its kernels
     * take the whole batch in one launch; then B sequences, Sq and Sk are the maxima over them (the
     * grids' extents), and sequence b's own lengths and offsets come from the device copies of
     * cu_seqlens_q / cu_seqlens_k / seqused_k (NULL: that one is not given); bottom_right: the
     * causal / window diagonal of each sequence is aligned to its own ends (off = Sk_b - Sq_b) */
    int vl, bottom_right;
    const int32_t *cu_q, *cu_k, *used_k;
    /* one-grid varlen: the Hopper kernels' grid takes the sequences in this order (slot s runs
     * sequence order[s]: the most work first, bwd_host.cu), so that the longest sequences' tiles
     * do not start last; NULL: in batch order */
    const int32_t *order;
    /* 1: a dense default-mode Hopper call runs the 2h dK/dV kernel, not the warp-specialized one
     * (2w); set from the test policy (kernels/cuda/testing.h bwd_no_ws), 0 in shipped calls */
    int no_ws;
} bwd_params;

/* The sequence of grid slot s (bwd_params.order). */
static __device__ __forceinline__ int64_t bwd_seq_of_slot(const bwd_params &p, int64_t s) {
    return p.order ? (int64_t)p.order[s] : s;
}

/* The parameters of sequence b (batch entry b of a dense call) as a dense call of batch 1:
 * every tensor pointer moved to b's first row (packed: row cu[b] times the row stride; dense:
 * b times the batch stride; LSE: its row stride st[2] when packed), the workspace rows moved to
 * b's block, B = 1; with vl, Sq, Sk and off become b's own (Sq_b, Sk_b = seqused_k[b] or the
 * cu_k span, off = Sk_b - Sq_b when bottom-right aligned). A kernel that calls it indexes batch 0
 * from then on.
 * Workspace layout: dense (and varlen with dense Q): [B][Hq][Sq] rows, b's block at b Hq Sq;
 * packed Q: [sequences][Hq][Sq_b], b's block at Hq cu_q[b] (total Hq cu_q[B] rows), so inside a
 * block row (hq, i) is at hq Sq_b + i in both layouts. All offsets int64. */
static __device__ __forceinline__ bwd_params bwd_seq_view(const bwd_params &pk, int64_t b) {
    bwd_params p = pk;
    int64_t qb = b, qr = 0, kb = b, kr = 0, ws0 = b * pk.Hq * pk.Sq;
    if (pk.vl) {
        if (pk.cu_q) {
            qb = 0;
            qr = pk.cu_q[b];
            p.Sq = (int64_t)pk.cu_q[b + 1] - qr;
            ws0 = pk.Hq * qr;
        }
        if (pk.cu_k) {
            kb = 0;
            kr = pk.cu_k[b];
            p.Sk = (int64_t)pk.cu_k[b + 1] - kr;
        }
        if (pk.used_k) p.Sk = pk.used_k[b];
        p.off = pk.bottom_right ? p.Sk - p.Sq : 0;
    }
    p.q += qb * pk.qs[0] + qr * pk.qs[1];
    p.o += qb * pk.os[0] + qr * pk.os[1];
    p.dout += qb * pk.dos[0] + qr * pk.dos[1];
    p.dq += qb * pk.dqs[0] + qr * pk.dqs[1];
    p.k += kb * pk.ks[0] + kr * pk.ks[1];
    p.v += kb * pk.vs[0] + kr * pk.vs[1];
    p.dk += kb * pk.dks[0] + kr * pk.dks[1];
    p.dv += kb * pk.dvs[0] + kr * pk.dvs[1];
    p.lse += qb * pk.lses[0] + qr * pk.lses[2];
    if (p.mask) p.mask += b * pk.ms[0]; /* dense Q and K only (flash_api.h) */
    p.lse_ws += ws0;
    p.dsum_ws += ws0;
    if (p.dq_ws) p.dq_ws += ws0 * pk.D;
    p.B = 1;
    return p;
}

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
        uint16_t *dst = tile + bwd_swz<HD>(r, c);
        if (vec) {
            const uint16_t *src = ok ? base + (int64_t)r * rs + c : base;
            ptx_cp16(ptx_smem(dst), src, ok ? 16 : 0);
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
        *reinterpret_cast<uint32_t *>(dst) = ptx_pack2<BF16>(x, y);
    } else {
        dst[0] = ptx_from_float<BF16>(x);
        dst[1] = ptx_from_float<BF16>(y);
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

/* Nonzero when either 16-bit half of w is NaN or Inf (exponent all ones). */
template <bool BF16>
static __device__ __forceinline__ uint32_t bwd_nonfinite2(uint32_t w) {
    const uint32_t m = BF16 ? 0x7f807f80u : 0x7c007c00u;
    return __vcmpeq2(w & m, m);
}

/* A packed pair's low / high element is the hidden marker -0 (0x8000). */
static __device__ __forceinline__ bool bwd_hid_lo(uint32_t u) { return (u & 0xffffu) == 0x8000u; }
static __device__ __forceinline__ bool bwd_hid_hi(uint32_t u) { return (u & 0xffff0000u) == 0x80000000u; }

// ----------------------------------------------------------------------------
// the algorithm steps between the products (one definition, every kernel)
//
// An accumulator tile of a warp is NT n8 tiles in the mma C layout: this thread holds, per n8
// tile, the entries (r0 + 8 (e >> 1), c0 + (e & 1)), e = 0..3, with r0 = the warp's row base
// + g and c0 = 8 nt + 2t. TRANS = false: rows are queries, columns keys (S = Q K^T, the dQ
// kernels); TRANS = true: rows are keys, columns queries (S^T = K Q^T, the dK/dV kernels).
// The two packed words of an n8 tile are the two halves of an m16n8k16 A fragment.

/* P of one n8 tile: fmaf(S, scale, mask) - lse (two fp32 roundings), then ex2 of that times
 * log2 e (one more rounding; ex2.approx, relative error ~2^-22), clamped to at most 1, rounded
 * RN to the input type. Hidden entries (outside the tile's visibility, or a -inf mask entry) are
 * -0, never ex2 of anything: the dS step and the exact paths read -0 as "hidden" (a visible ex2
 * is never -0). lse[e]: the row's (compact) LSE for entry e.
 * The clamp: exactly, P = exp(s - LSE) <= 1 for every visible entry (LSE >= s). Computed, the
 * argument carries the roundings of fmaf and of the LSE, which grow with |LSE|: at |LSE| ~ 2^28
 * (fp16 q, k ~ 3e4, D = 8: cuda_dq_nan.case) the LSE's ulp is 16-64, the argument is 16 or 32
 * instead of 0, and P = e^16 rounded to fp16 is Inf; dS = Inf * (dP - Dsum = 0) was NaN in dQ.
 * min(P, 1) only moves P toward the exact value (so the profile's bound on P still holds), keeps
 * NaN (min.NaN), and makes true what the screen's dS bound assumes (P <= 1, bwd_needs_exact). */
template <bool BF16, bool TRANS, bool CAP = false>
static __device__ __forceinline__ void bwd_p_n8(const float (&s)[4], const bwd_params &p, const bwd_tile &tm,
                                                const float *mrow, int r0, int c0, const float (&lse)[4],
                                                uint32_t &lo, uint32_t &hi, float *cf = nullptr) {
    float pv[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int rl = r0 + ((e >> 1) << 3), cl = c0 + (e & 1);
        const int il = TRANS ? cl : rl, jl = TRANS ? rl : cl;
        bool vis = true;
        if (tm.partial) vis = bwd_tile_vis(tm, il, jl);
        float mval = 0.f;
        if (mrow && vis) {
            mval = __ldg(mrow + il * p.ms[2] + jl * p.ms[3]);
            vis = mval != -INFINITY;
        }
        float x;
        if (CAP) {
            /* the forward's capped score (fwd_common.cuh, fwd_mask_scores): t = tanhf(q.k * cap_scale)
             * (CUDA tanhf, 2 ulp), s = fmaf(softcap, t, mask) (one rounding); cf = fl(1 - fl(t t)),
             * the cap's derivative, explicitly rounded twice (no contraction), for bwd_ds_n8; 0 where
             * hidden (a hidden entry's q.k may be non-finite: its dS must stay 0) */
            const float tv = tanhf(s[e] * p.cap_scale);
            cf[e] = vis ? __fsub_rn(1.f, __fmul_rn(tv, tv)) : 0.f; /* hidden: 0, never NaN (dS = 0 * cf) */
            x = fmaf(p.softcap, tv, mval) - lse[e];
        } else {
            x = fmaf(s[e], p.scale, mval) - lse[e];
        }
        pv[e] = vis ? ptx_min_nan(ptx_ex2(x * BWD_LOG2E), 1.f) : -0.f;
    }
    lo = ptx_pack2<BF16>(pv[0], pv[1]);
    hi = ptx_pack2<BF16>(pv[2], pv[3]);
}

/* bwd_p_n8 for a tile whose every entry is visible and no mask (mval = 0): the same
 * expression (clamp included) without the selects (CTA-uniform branch of the Hopper kernels). */
template <bool BF16>
static __device__ __forceinline__ void bwd_p_n8_full(const float (&s)[4], const bwd_params &p, const float (&lse)[4],
                                                     uint32_t &lo, uint32_t &hi) {
    float pv[4];
#pragma unroll
    for (int e = 0; e < 4; e++) pv[e] = ptx_min_nan(ptx_ex2((fmaf(s[e], p.scale, 0.f) - lse[e]) * BWD_LOG2E), 1.f);
    lo = ptx_pack2<BF16>(pv[0], pv[1]);
    hi = ptx_pack2<BF16>(pv[2], pv[3]);
}

/* dS of one n8 tile: 0 where P is the hidden marker, else P (dP - Dsum) with the ROUNDED P
 * (fp32: one rounding for the subtraction, one for the product), rounded RN to the input
 * type. dsum[e]: Dsum of entry e's query row. ds_max: the largest |dS| before rounding (NaN
 * ignored; the exact kernels test it against the 16-bit overflow threshold). */
template <bool BF16, bool CAP = false>
static __device__ __forceinline__ void bwd_ds_n8(const float (&dp)[4], uint32_t p_lo, uint32_t p_hi,
                                                 const float (&dsum)[4], uint32_t &lo, uint32_t &hi, float &ds_max,
                                                 const float *cf = nullptr) {
    float dv4[4];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t pp = h ? p_hi : p_lo;
        const float2 pr = ptx_unpack2<BF16>(pp);
        const float d0 = dp[2 * h] - dsum[2 * h];
        const float d1 = dp[2 * h + 1] - dsum[2 * h + 1];
        dv4[2 * h] = bwd_hid_lo(pp) ? 0.f : pr.x * d0;
        dv4[2 * h + 1] = bwd_hid_hi(pp) ? 0.f : pr.y * d1;
    }
    if (CAP) { /* softcap: dS' = fl(fl(P (dP - D)) * cf), cf = 1 - t^2 from bwd_p_n8 (the chain rule through
                * the cap; the scale is applied to the fp32 dQ / dK sums as without a cap) */
#pragma unroll
        for (int e = 0; e < 4; e++) dv4[e] = __fmul_rn(dv4[e], cf[e]);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) ds_max = fmaxf(ds_max, fabsf(dv4[e]));
    lo = ptx_pack2<BF16>(dv4[0], dv4[1]);
    hi = ptx_pack2<BF16>(dv4[2], dv4[3]);
}

// ----------------------------------------------------------------------------
// launch seams (host side, bwd_host.cu calls them; C linkage)

extern "C" {
/* preprocess and screen (bwd_sm80.cu, every architecture) */
cudaError_t bwd_sm80_prep(const bwd_params *p, int bf16, cudaStream_t st);
/* the mma.sync kernels of one mode: dK/dV (+ dQ atomics and conversion, or the deterministic
 * dQ kernel); exact: the EXACT instantiations (slow paths per tile); cap: the softcap (CAP)
 * instantiations (not with exact: cudaErrorInvalidValue) */
cudaError_t bwd_sm80_run(const bwd_params *p, int hd, int bf16, int deterministic, int exact, int cap,
                         cudaStream_t st);
/* the deterministic mode's sm_80 dQ kernel alone (fast instantiation) */
cudaError_t bwd_sm80_dq_det(const bwd_params *p, int hd, int bf16, cudaStream_t st);
/* default mode: dQ = scale * the fp32 workspace */
cudaError_t bwd_sm80_convert(const bwd_params *p, int bf16, cudaStream_t st);
/* shared memory of the largest sm_80 kernel of a call */
size_t bwd_sm80_smem_bytes(int hd, int deterministic);
/* the sm_80 tile code of a head-dim pair: 64, 128, 256 (both dims padded to the larger one), or
 * 192 (the pair's own kernels: Dqk in 136..192 padded to 192, Dv in 72..128 padded to 128) */
int bwd_sm80_tile(int64_t dqk, int64_t dv);
/* the column halves (p.nsplit) the sm_80 kernels of tile code hd are launched with */
int bwd_sm80_nsplit(int hd);
/* the Hopper kernels (bwd_sm90.cu; hd 64 or 128, fast calls): dK/dV, then the dQ conversion
 * (default) or the deterministic dQ kernel (dq_sm90) or bwd_sm80_dq_det (!dq_sm90) */
cudaError_t bwd_sm90_run(const bwd_params *p, int hd, int bf16, int deterministic, int dq_sm90, cudaStream_t st);
size_t bwd_sm90_smem_bytes(int hd);
}

#endif /* FLASHCHECK_CUDA_BWD_COMMON_CUH */
