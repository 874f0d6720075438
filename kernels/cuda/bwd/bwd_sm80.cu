/* bwd_sm80.cu: the mma.sync backward kernels (sm_80 and newer, every head dim): preprocess
 * and screen, dK/dV (+ dQ partials by atomics), the dQ conversion, the deterministic dQ
 * kernel, and the EXACT slow paths. Design and arithmetic: bwd_common.cuh. */
#include "kernels/cuda/bwd/bwd_common.cuh"
#include "kernels/cuda/common/pairs.h"

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
            const float2 x = ptx_unpack2<BF16>(*reinterpret_cast<const uint32_t *>(sB + bwd_swz<HD>(i, d_off + n * 8 + 2 * t)));
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
            sdSf[(warp * 16 + x / BR) * BR + x % BR] = ptx_to_float<BF16>(sdS[bwd_swz<64>(warp * 16 + x / BR, x % BR)]);
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
            const float2 x = ptx_unpack2<BF16>(*reinterpret_cast<const uint32_t *>(sK + bwd_swz<HD>(j, dc + 2 * t)));
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

/* sum of squares over one row of D 16-bit elements (strided over the lpr lanes of the row's
 * segment, sub = this lane's index in it), and whether one is NaN/Inf (this lane's share) */
template <bool BF16>
static __device__ __forceinline__ float bwd_row_sq(const uint16_t *x, int64_t D, int vec, int sub, int lpr,
                                                   uint32_t *bad) {
    float s2 = 0.f;
    if (vec) {
        for (int64_t d = sub * 8; d < D; d += lpr * 8) {
            const uint4 v = *reinterpret_cast<const uint4 *>(x + d);
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 f = ptx_unpack2<BF16>(w[k]);
                s2 = fmaf(f.x, f.x, s2);
                s2 = fmaf(f.y, f.y, s2);
                *bad |= bwd_nonfinite2<BF16>(w[k]);
            }
        }
    } else {
        for (int64_t d = sub; d < D; d += lpr) {
            const uint16_t h = x[d];
            const float f = ptx_to_float<BF16>(h);
            s2 = fmaf(f, f, s2);
            *bad |= bwd_nonfinite2<BF16>(h);
        }
    }
    return s2;
}

/* Lanes per row of the preprocess: with 16-byte loads of O and dO, the fewest lanes (a power of
 * two) whose 8-element chunks cover the wider head dim, so that a warp takes 32 / lanes rows at
 * once; else 32 (lane-strided elements). Every lane sums its own chunks in order and the lanes
 * are added by a butterfly, as with 32 lanes: the lanes past the row's chunks held +0, so Dsum is
 * the same value either way. */
static __host__ __device__ __forceinline__ int bwd_prep_lanes(const bwd_params &p) {
    if (!(p.vec_o_prep && p.vec_do_prep)) return 32;
    const int64_t dmax = p.D > p.Dv ? p.D : p.Dv;
    int l = 1;
    while (l < 32 && l * 8 < dmax) l <<= 1;
    return l;
}

/* sum over the lpr lanes of this lane's row segment (butterfly; mask: the segment's lanes) */
static __device__ __forceinline__ float bwd_seg_sum(float v, unsigned mask, int lpr) {
    for (int m = lpr >> 1; m >= 1; m >>= 1) v += __shfl_xor_sync(mask, v, m);
    return v;
}

/* bwd_prep_lanes(p) lanes per row (a warp takes 32 / lpr rows), grid-stride: rows [0, B Hq Sq)
 * are query rows (b, hq, i), then (when screening) B Hkv Sk key rows (b, hkv, j). The screen is
 * reduced per block in shared memory and added by one set of atomics per block (unsigned max of
 * fp32 bits: the values are >= 0 or NaN, and a NaN's bits are above +Inf's). */
template <bool BF16>
__global__ void __launch_bounds__(256) bwd_prep_kernel(const bwd_params pk) {
    __shared__ unsigned red[4][8];
    /* one-grid varlen: blockIdx.y is the sequence, its rows the dense rows of its own call
     * (bwd_seq_view: batch 1, its lengths, its workspace block) */
    const bwd_params p = pk.vl ? bwd_seq_view(pk, blockIdx.y) : pk;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int lpr = bwd_prep_lanes(p), rpw = 32 / lpr, slot = lane / lpr, sub = lane % lpr;
    const unsigned seg = lpr == 32 ? 0xffffffffu : ((1u << lpr) - 1u) << (slot * lpr);
    const int screening = p.scan_nf || p.scan_norm;
    const int64_t nrows = p.B * p.Hq * p.Sq, nkrows = screening ? p.B * p.Hkv * p.Sk : 0;
    uint32_t bad = 0;
    float do2max = 0.f, v2max = 0.f, dmax = 0.f; /* fmaxf drops NaN: NaN is tracked in bad2 */
    uint32_t nan_norm = 0;
    for (int64_t row0 = ((int64_t)blockIdx.x * 8 + warp) * rpw; row0 < nrows + nkrows;
         row0 += (int64_t)gridDim.x * 8 * rpw) {
        const int64_t row = row0 + slot; /* a segment past the end idles (its shuffles are its own) */
        if (row >= nrows + nkrows) continue;
        if (row >= nrows) {
            const int64_t r = row - nrows, j = r % p.Sk, bh = r / p.Sk;
            const int64_t hkv = bh % p.Hkv, b = bh / p.Hkv;
            if (p.scan_nf) bwd_row_sq<BF16>(p.k + b * p.ks[0] + j * p.ks[1] + hkv * p.ks[2], p.D, p.vec_k, sub, lpr, &bad);
            if (p.scan_norm) {
                uint32_t unused = 0;
                float v2 = bwd_row_sq<BF16>(p.v + b * p.vs[0] + j * p.vs[1] + hkv * p.vs[2], p.Dv, p.vec_v, sub, lpr, &unused);
                v2 = bwd_seg_sum(v2, seg, lpr);
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
            for (int64_t d = sub * 8; d < p.Dv; d += lpr * 8) {
                uint4 ov = *reinterpret_cast<const uint4 *>(o + d);
                uint4 gv = *reinterpret_cast<const uint4 *>(g + d);
                const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    float2 a = ptx_unpack2<BF16>(ow[x]), c = ptx_unpack2<BF16>(gw[x]);
                    acc = fmaf(a.x, c.x, acc);
                    acc = fmaf(a.y, c.y, acc);
                }
            }
        } else {
            for (int64_t d = lane; d < p.Dv; d += 32) acc = fmaf(ptx_to_float<BF16>(o[d]), ptx_to_float<BF16>(g[d]), acc);
        }
        acc = bwd_seg_sum(acc, seg, lpr);
        if (sub == 0) {
            float l = p.lse[b * p.lses[0] + hq * p.lses[1] + i * p.lses[2]];
            p.lse_ws[row] = (l == -INFINITY) ? INFINITY : l;
            p.dsum_ws[row] = acc;
        }
        if (screening) {
            float g2 = bwd_row_sq<BF16>(g, p.Dv, p.vec_do_prep, sub, lpr, &bad); /* dO again: from L1/L2 */
            if (p.scan_nf) bwd_row_sq<BF16>(p.q + b * p.qs[0] + i * p.qs[1] + hq * p.qs[2], p.D, p.vec_q, sub, lpr, &bad);
            g2 = bwd_seg_sum(g2, seg, lpr);
            nan_norm |= (g2 != g2) | (acc != acc);
            do2max = fmaxf(do2max, g2);
            dmax = fmaxf(dmax, fabsf(acc));
        }
    }
    if (!screening) return; /* uniform over the grid */
    bad = __any_sync(0xffffffffu, bad != 0) | __any_sync(0xffffffffu, nan_norm != 0) << 1;
    /* the maxima over the warp's row segments (lane 0 holds only its own segment's rows) */
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) {
        do2max = fmaxf(do2max, __shfl_xor_sync(0xffffffffu, do2max, m));
        v2max = fmaxf(v2max, __shfl_xor_sync(0xffffffffu, v2max, m));
        dmax = fmaxf(dmax, __shfl_xor_sync(0xffffffffu, dmax, m));
    }
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

/* NW warps, each owning 16 kv rows: BC = 16 NW kv rows per block. HD: padded head dim of Q
 * and K (sK, sQ rows), HV: of V and dO (sV, sdO rows); HV == HD for equal head dims. */
template <int HD, int HV, int NW, int BR>
struct bwd_dkdv_smem {
    static constexpr int BC = 16 * NW;
    static constexpr size_t kv = (size_t)BC * HD;  /* elements of sK */
    static constexpr size_t vv = (size_t)BC * HV;  /* elements of sV */
    static constexpr size_t qo = (size_t)BR * HD;  /* elements of one sQ buffer */
    static constexpr size_t go = (size_t)BR * HV;  /* elements of one sdO buffer */
    /* sdS is [BC][64] (64-wide rows keep the 8-chunk swizzle) whatever BR is; then
     * sLse, sDsum [2][BR] fp32, then the slow path's fp32 scratch sdSf [BC][BR] */
    static constexpr size_t bytes = (kv + vv + 2 * qo + 2 * go + (size_t)BC * 64) * 2 + 4 * BR * 4 + (size_t)BC * BR * 4;
};

/* HO: the dK (and dQ) columns of a CTA, HOV: its dV columns; column half `split` of the grid
 * owns dK columns [split HO, (split + 1) HO) and dV columns [split HOV, (split + 1) HOV). */
template <int HD, int HV, int HO, int HOV, int NW, int BR, bool BF16, bool DET, bool EXACT, bool CAP>
__global__ void __launch_bounds__(NW * 32, (NW == 4 && HD <= 128 ? 2 : 1)) bwd_dkdv_kernel(const bwd_params p) {
    extern __shared__ __align__(128) unsigned char bwd_smem_raw[];
    typedef bwd_dkdv_smem<HD, HV, NW, BR> L;
    constexpr int BC = L::BC, NT = NW * 32;
    uint16_t *sK = reinterpret_cast<uint16_t *>(bwd_smem_raw);
    uint16_t *sV = sK + L::kv;
    uint16_t *sQ = sV + L::vv;       /* [2][BR][HD] */
    uint16_t *sdO = sQ + 2 * L::qo;  /* [2][BR][HV] */
    uint16_t *sdS = sdO + 2 * L::go; /* [BC][BR]: dS^T */
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
    const int d_off = split * HO, dv_off = split * HOV;
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
    bwd_load_tile<BC, HV, NT>(sV, p.v + b * p.vs[0] + j0 * p.vs[1] + hkv * p.vs[2], p.vs[1], kv_rows, p.Dv,
                              p.vec_v, tid);

    /* issue the loads of iteration it into buffer buf */
    auto issue = [&](int64_t it, int buf) {
        const int64_t hq = hkv * p.group + it / nqb;
        const int64_t i0 = (qb_lo + it % nqb) * BR;
        const int64_t rows = p.Sq - i0 < BR ? p.Sq - i0 : BR;
        bwd_load_tile<BR, HD, NT>(sQ + buf * L::qo, p.q + b * p.qs[0] + i0 * p.qs[1] + hq * p.qs[2], p.qs[1],
                                  rows, p.D, p.vec_q, tid);
        bwd_load_tile<BR, HV, NT>(sdO + buf * L::go, p.dout + b * p.dos[0] + i0 * p.dos[1] + hq * p.dos[2],
                                  p.dos[1], rows, p.Dv, p.vec_do, tid);
        const int64_t ws = (b * p.Hq + hq) * p.Sq + i0;
        if (tid < BR) {
            bool ok = tid < rows;
            ptx_cp4(ptx_smem(sLse + buf * BR + tid), ok ? p.lse_ws + ws + tid : p.lse_ws, ok ? 4 : 0);
        } else if (tid < 2 * BR) {
            int r = tid - BR;
            bool ok = r < rows;
            ptx_cp4(ptx_smem(sDsum + buf * BR + r), ok ? p.dsum_ws + ws + r : p.dsum_ws, ok ? 4 : 0);
        }
    };
    if (n_it > 0) issue(0, 0);
    ptx_cp_commit();

    float acc_dk[HO / 8][4], acc_dv[HOV / 8][4];
#pragma unroll
    for (int n = 0; n < HO / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dk[n][e] = 0.f;
#pragma unroll
    for (int n = 0; n < HOV / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dv[n][e] = 0.f;

    int kbad = 0; /* the K block holds a NaN/Inf (the dQ product's summed operand) */
    float *myf = sdSf + warp * 16 * BR; /* this warp's 16 rows of the scratch */

    for (int64_t it = 0; it < n_it; it++) {
        const int buf = (int)(it & 1);
        ptx_cp_wait<0>();
        __syncthreads(); /* buffer buf is complete; every warp is done with buf^1, sdS and sdSf */
        if (it + 1 < n_it) issue(it + 1, buf ^ 1);
        ptx_cp_commit();
        if (EXACT && !DET && it == 0) kbad = __syncthreads_or(bwd_tile_nonfinite<BF16, BC * HD, NT>(sK, tid));

        const int64_t hq = hkv * p.group + it / nqb;
        const int64_t i0 = (qb_lo + it % nqb) * BR;
        const uint16_t *sQb = sQ + buf * L::qo;
        const uint16_t *sdOb = sdO + buf * L::go;
        const float *lse_b = sLse + buf * BR;
        const float *dsum_b = sDsum + buf * BR;

        /* slow path for the summed products: row-dependent visibility and a NaN/Inf in Q, dO or K */
        const bwd_tile tm = bwd_tile_make<BC, BR>(p, i0, j0);
        int nf = 0;
        if (EXACT && (tm.partial || p.mask))
            nf = __syncthreads_or(kbad || bwd_tile_nonfinite<BF16, BR * HD, NT>(sQb, tid) ||
                                  bwd_tile_nonfinite<BF16, BR * HV, NT>(sdOb, tid));

        const float *mrow = p.mask ? p.mask + b * p.ms[0] + hq * p.ms[1] + i0 * p.ms[2] + j0 * p.ms[3] : NULL;
        /* S^T (16 kv rows of this warp x 64 query rows) = K Q^T, then
         * P^T = exp(scale * S + mask - lse), rounded to the input type (A fragments); -0 where hidden.
         * A lambda: the slow dK path recomputes it rather than keeping it live. */
        float cf[BR / 8][4]; /* softcap: 1 - t^2 per entry (CAP only; otherwise unused) */
        auto compute_p = [&](uint32_t (&pa)[BR / 16][4]) {
            float acc_s[BR / 8][4];
#pragma unroll
            for (int n = 0; n < BR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_s[n][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                uint32_t a[4];
                ptx_ldsm4(a, ptx_smem(sK + bwd_swz<HD>(warp * 16 + ptx_ldsm_row_A(lane), ks * 16 + ptx_ldsm_col_A(lane))));
#pragma unroll
                for (int np = 0; np < BR / 16; np++) {
                    uint32_t bb[4];
                    ptx_ldsm4(bb, ptx_smem(sQb + bwd_swz<HD>(np * 16 + ptx_ldsm_row_Bn(lane), ks * 16 + ptx_ldsm_col_Bn(lane))));
                    ptx_mma16816<BF16>(acc_s[2 * np], a, bb[0], bb[1]);
                    ptx_mma16816<BF16>(acc_s[2 * np + 1], a, bb[2], bb[3]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                const int il = nt * 8 + 2 * t;
                const float lse[4] = {lse_b[il], lse_b[il + 1], lse_b[il], lse_b[il + 1]};
                bwd_p_n8<BF16, true, CAP>(acc_s[nt], p, tm, mrow, warp * 16 + g, il, lse, pa[nt >> 1][(nt & 1) * 2 + 0],
                                          pa[nt >> 1][(nt & 1) * 2 + 1], cf[nt]);
            }
        };
        /* dP^T = V dO^T */
        auto compute_dp = [&](float (&acc_s)[BR / 8][4]) {
#pragma unroll
            for (int n = 0; n < BR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_s[n][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HV / 16; ks++) {
                uint32_t a[4];
                ptx_ldsm4(a, ptx_smem(sV + bwd_swz<HV>(warp * 16 + ptx_ldsm_row_A(lane), ks * 16 + ptx_ldsm_col_A(lane))));
#pragma unroll
                for (int np = 0; np < BR / 16; np++) {
                    uint32_t bb[4];
                    ptx_ldsm4(bb, ptx_smem(sdOb + bwd_swz<HV>(np * 16 + ptx_ldsm_row_Bn(lane), ks * 16 + ptx_ldsm_col_Bn(lane))));
                    ptx_mma16816<BF16>(acc_s[2 * np], a, bb[0], bb[1]);
                    ptx_mma16816<BF16>(acc_s[2 * np + 1], a, bb[2], bb[3]);
                }
            }
        };
        uint32_t pa[BR / 16][4];
        compute_p(pa);

        /* dV += P^T dO (columns dv_off .. dv_off + HOV) */
        if (!EXACT || !nf) {
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
#pragma unroll
                for (int np = 0; np < HOV / 16; np++) {
                    uint32_t bb[4];
                    ptx_ldsm4_t(bb, ptx_smem(sdOb + bwd_swz<HV>(kk * 16 + ptx_ldsm_row_Bk(lane), dv_off + np * 16 + ptx_ldsm_col_Bk(lane))));
                    ptx_mma16816<BF16>(acc_dv[2 * np], pa[kk], bb[0], bb[1]);
                    ptx_mma16816<BF16>(acc_dv[2 * np + 1], pa[kk], bb[2], bb[3]);
                }
            }
        } else {
            /* slow: P^T rows of this warp to the scratch, then scalar FMAs that skip hidden entries */
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    *reinterpret_cast<float2 *>(myf + (g + 8 * h) * BR + nt * 8 + 2 * t) =
                        ptx_unpack2<BF16>(pa[nt >> 1][(nt & 1) * 2 + h]);
            __syncwarp();
            float mem[HOV / 2];
#pragma unroll
            for (int n = 0; n < HOV / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) mem[n * 4 + e] = acc_dv[n][e];
            bwd_rows_slow<HV, HOV, BR, BF16>(mem, myf, sdOb, lane, dv_off);
#pragma unroll
            for (int n = 0; n < HOV / 8; n++)
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
            const int il = nt * 8 + 2 * t;
            const float dsum[4] = {dsum_b[il], dsum_b[il + 1], dsum_b[il], dsum_b[il + 1]};
            bwd_ds_n8<BF16, CAP>(acc_s[nt], pa[nt >> 1][(nt & 1) * 2 + 0], pa[nt >> 1][(nt & 1) * 2 + 1], dsum,
                                 da[nt >> 1][(nt & 1) * 2 + 0], da[nt >> 1][(nt & 1) * 2 + 1], ds_max, cf[nt]);
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
                    ptx_ldsm4_t(bb, ptx_smem(sQb + bwd_swz<HD>(kk * 16 + ptx_ldsm_row_Bk(lane), d_off + np * 16 + ptx_ldsm_col_Bk(lane))));
                    ptx_mma16816<BF16>(acc_dk[2 * np], da[kk], bb[0], bb[1]);
                    ptx_mma16816<BF16>(acc_dk[2 * np + 1], da[kk], bb[2], bb[3]);
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
                    const float2 pr = ptx_unpack2<BF16>(pp);
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
                *reinterpret_cast<uint32_t *>(sdS + bwd_swz<64>(jl, il)) = da[kk][0];
                *reinterpret_cast<uint32_t *>(sdS + bwd_swz<64>(jl + 8, il)) = da[kk][1];
                *reinterpret_cast<uint32_t *>(sdS + bwd_swz<64>(jl, il + 8)) = da[kk][2];
                *reinterpret_cast<uint32_t *>(sdS + bwd_swz<64>(jl + 8, il + 8)) = da[kk][3];
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
                ptx_ldsm4_t(qa[kk], ptx_smem(sdS + bwd_swz<64>(kk * 16 + ptx_ldsm_row_At(lane), rg * 16 + ptx_ldsm_col_At(lane))));
#pragma unroll
            for (int np = 0; np < CPW / 16; np++) {
                const int dcol = d_off + cp * CPW + np * 16;
                float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
                for (int kk = 0; kk < BC / 16; kk++) {
                    uint32_t bb[4];
                    ptx_ldsm4_t(bb, ptx_smem(sK + bwd_swz<HD>(kk * 16 + ptx_ldsm_row_Bk(lane), dcol + ptx_ldsm_col_Bk(lane))));
                    ptx_mma16816<BF16>(c[0], qa[kk], bb[0], bb[1]);
                    ptx_mma16816<BF16>(c[1], qa[kk], bb[2], bb[3]);
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

    ptx_cp_wait<0>(); /* no copy may be left in flight at exit (n_it == 0 leaves K, V pending) */

    /* write dK = scale * acc (Dqk columns), dV = acc (Dv columns) (rows of this warp, columns of this half) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t j = j0 + warp * 16 + g + h * 8;
        if (j < p.Sk) {
            uint16_t *dk = p.dk + b * p.dks[0] + j * p.dks[1] + hkv * p.dks[2];
            uint16_t *dv = p.dv + b * p.dvs[0] + j * p.dvs[1] + hkv * p.dvs[2];
#pragma unroll
            for (int nt = 0; nt < HO / 8; nt++) {
                const int64_t d = d_off + nt * 8 + 2 * t;
                if (d < p.D)
                    bwd_store_pair<BF16>(dk + d, acc_dk[nt][2 * h] * p.scale, acc_dk[nt][2 * h + 1] * p.scale, p.w32_dk);
            }
#pragma unroll
            for (int nt = 0; nt < HOV / 8; nt++) {
                const int64_t d = dv_off + nt * 8 + 2 * t;
                if (d < p.Dv) bwd_store_pair<BF16>(dv + d, acc_dv[nt][2 * h], acc_dv[nt][2 * h + 1], p.w32_dv);
            }
        }
    }
}

// ----------------------------------------------------------------------------
// 3a. default mode: dQ = scale * fp32 workspace

template <bool BF16>
__global__ void __launch_bounds__(256) bwd_dq_convert_kernel(const bwd_params pk) {
    const bwd_params p = pk.vl ? bwd_seq_view(pk, blockIdx.y) : pk; /* one-grid varlen: bwd_prep_kernel */
    const int64_t npairs = p.B * p.Hq * p.Sq * (p.D / 2);
    if (npairs + (int64_t)gridDim.x * blockDim.x <= 0xffffffffLL) {
        /* the same loop in 32-bit unsigned index arithmetic (the divisions are most of its instructions) */
        const uint32_t hp = (uint32_t)(p.D / 2), sq = (uint32_t)p.Sq, hqn = (uint32_t)p.Hq, n = (uint32_t)npairs;
        for (uint32_t x = blockIdx.x * blockDim.x + threadIdx.x; x < n; x += gridDim.x * blockDim.x) {
            const uint32_t row = x / hp, d = (x - row * hp) * 2;
            const uint32_t bh = row / sq, i = row - bh * sq;
            const uint32_t b = bh / hqn, hq = bh - b * hqn;
            const float2 v = *reinterpret_cast<const float2 *>(p.dq_ws + (int64_t)row * p.D + d);
            bwd_store_pair<BF16>(p.dq + b * p.dqs[0] + i * p.dqs[1] + hq * p.dqs[2] + d, v.x * p.scale, v.y * p.scale,
                                 p.w32_dq);
        }
        return;
    }
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

template <int HD, int HV>
struct bwd_dq_smem {
    static constexpr size_t t = (size_t)BWD_BR * HD;  /* sQ, one sK buffer (BR == BC) */
    static constexpr size_t tv = (size_t)BWD_BR * HV; /* sdO, one sV buffer */
    /* sQ, sdO, sK[2], sV[2]; then the slow path's fp32 scratch [BWD_WARPS][16][BWD_BC] */
    static constexpr size_t bytes = (3 * t + 3 * tv) * 2 + (size_t)BWD_WARPS * 16 * BWD_BC * 4;
};

template <int HD, int HV, int HO, bool BF16, bool EXACT, bool CAP>
__global__ void __launch_bounds__(BWD_THREADS, (HD <= 128 ? 2 : 1)) bwd_dq_kernel(const bwd_params p) {
    extern __shared__ __align__(128) unsigned char bwd_smem_raw[];
    typedef bwd_dq_smem<HD, HV> L;
    uint16_t *sQ = reinterpret_cast<uint16_t *>(bwd_smem_raw);
    uint16_t *sdO = sQ + L::t;
    uint16_t *sK = sdO + L::tv; /* [2] */
    uint16_t *sV = sK + 2 * L::t; /* [2] */
    float *sdSf = reinterpret_cast<float *>(sV + 2 * L::tv); /* [warp][16][BC], slow path only */

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
    bwd_load_tile<BWD_BR, HV, BWD_THREADS>(sdO, p.dout + b * p.dos[0] + i0 * p.dos[1] + hq * p.dos[2], p.dos[1], q_rows, p.Dv,
                              p.vec_do, tid);
    auto issue = [&](int64_t it, int buf) {
        const int64_t j0 = (kb_lo + it) * BWD_BC;
        const int64_t rows = p.Sk - j0 < BWD_BC ? p.Sk - j0 : BWD_BC;
        bwd_load_tile<BWD_BC, HD, BWD_THREADS>(sK + buf * L::t, p.k + b * p.ks[0] + j0 * p.ks[1] + hkv * p.ks[2], p.ks[1], rows,
                                  p.D, p.vec_k, tid);
        bwd_load_tile<BWD_BC, HV, BWD_THREADS>(sV + buf * L::tv, p.v + b * p.vs[0] + j0 * p.vs[1] + hkv * p.vs[2], p.vs[1], rows,
                                  p.Dv, p.vec_v, tid);
    };
    if (nkb > 0) issue(0, 0);
    ptx_cp_commit();

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
        ptx_cp_wait<0>();
        __syncthreads();
        if (it + 1 < nkb) issue(it + 1, buf ^ 1);
        ptx_cp_commit();
        const int64_t j0 = (kb_lo + it) * BWD_BC;
        const uint16_t *sKb = sK + buf * L::t;
        const uint16_t *sVb = sV + buf * L::tv;

        /* slow path for dQ += dS K: row-dependent visibility and a NaN/Inf in this K block */
        const bwd_tile tm = bwd_tile_make<BWD_BC, BWD_BR>(p, i0, j0);
        int nf = 0;
        if (EXACT && (tm.partial || p.mask)) nf = __syncthreads_or(bwd_tile_nonfinite<BF16, BWD_BC * HD, BWD_THREADS>(sKb, tid));

        const float *mrow = p.mask ? p.mask + b * p.ms[0] + hq * p.ms[1] + i0 * p.ms[2] + j0 * p.ms[3] : NULL;
        /* S (16 query rows of this warp x 64 keys) = Q K^T, then P rounded, packed pairs
         * (row g / g+8), -0 where hidden. A lambda: the slow path recomputes it. */
        float cf[8][4]; /* softcap: 1 - t^2 per entry (CAP only; otherwise unused) */
        auto compute_p = [&](uint32_t (&pa)[8][2]) {
            float acc_s[8][4];
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_s[n][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                uint32_t a[4];
                ptx_ldsm4(a, ptx_smem(sQ + bwd_swz<HD>(warp * 16 + ptx_ldsm_row_A(lane), ks * 16 + ptx_ldsm_col_A(lane))));
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bb[4];
                    ptx_ldsm4(bb, ptx_smem(sKb + bwd_swz<HD>(np * 16 + ptx_ldsm_row_Bn(lane), ks * 16 + ptx_ldsm_col_Bn(lane))));
                    ptx_mma16816<BF16>(acc_s[2 * np], a, bb[0], bb[1]);
                    ptx_mma16816<BF16>(acc_s[2 * np + 1], a, bb[2], bb[3]);
                }
            }
            const float lse[4] = {lse_a, lse_a, lse_b, lse_b};
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
                bwd_p_n8<BF16, false, CAP>(acc_s[nt], p, tm, mrow, ila, nt * 8 + 2 * t, lse, pa[nt][0], pa[nt][1], cf[nt]);
        };
        /* dP = dO V^T */
        auto compute_dp = [&](float (&acc_s)[8][4]) {
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc_s[n][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HV / 16; ks++) {
                uint32_t a[4];
                ptx_ldsm4(a, ptx_smem(sdO + bwd_swz<HV>(warp * 16 + ptx_ldsm_row_A(lane), ks * 16 + ptx_ldsm_col_A(lane))));
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bb[4];
                    ptx_ldsm4(bb, ptx_smem(sVb + bwd_swz<HV>(np * 16 + ptx_ldsm_row_Bn(lane), ks * 16 + ptx_ldsm_col_Bn(lane))));
                    ptx_mma16816<BF16>(acc_s[2 * np], a, bb[0], bb[1]);
                    ptx_mma16816<BF16>(acc_s[2 * np + 1], a, bb[2], bb[3]);
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
        const float dsum[4] = {ds_a, ds_a, ds_b, ds_b};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            bwd_ds_n8<BF16, CAP>(acc_s[nt], pa[nt][0], pa[nt][1], dsum, da[nt >> 1][(nt & 1) * 2 + 0],
                                 da[nt >> 1][(nt & 1) * 2 + 1], ds_max, cf[nt]);

        /* dQ += dS K (columns d_off .. d_off + HO) */
        if (!EXACT || (!nf && !__any_sync(0xffffffffu, ds_max >= bwd_ovf16<BF16>()))) {
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                for (int np = 0; np < HO / 16; np++) {
                    uint32_t bb[4];
                    ptx_ldsm4_t(bb, ptx_smem(sKb + bwd_swz<HD>(kk * 16 + ptx_ldsm_row_Bk(lane), d_off + np * 16 + ptx_ldsm_col_Bk(lane))));
                    ptx_mma16816<BF16>(acc_dq[2 * np], da[kk], bb[0], bb[1]);
                    ptx_mma16816<BF16>(acc_dq[2 * np + 1], da[kk], bb[2], bb[3]);
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
                    const float2 pr = ptx_unpack2<BF16>(pp);
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
                    const float2 x = ptx_unpack2<BF16>(*reinterpret_cast<const uint32_t *>(sKb + bwd_swz<HD>(j, d_off + n * 8 + 2 * t)));
                    if (!h0) { acc_dq[n][0] = fmaf(s0, x.x, acc_dq[n][0]); acc_dq[n][1] = fmaf(s0, x.y, acc_dq[n][1]); }
                    if (!h1) { acc_dq[n][2] = fmaf(s1, x.x, acc_dq[n][2]); acc_dq[n][3] = fmaf(s1, x.y, acc_dq[n][3]); }
                }
            }
        }
    }

    ptx_cp_wait<0>(); /* nkb == 0 leaves Q, dO pending */

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
// launches (the seams of bwd_common.cuh)

/* Column halves of a tile (the grid's p.nsplit): 2 at padded Qk 256 and for the pair (192, 128),
 * else 1. HO = HD / split dK and dQ columns, HOV = HV / split dV columns per CTA. The pair
 * unsplit (dK and dV accumulators of 96 + 64 floats a thread) spills 358 bytes in the fast dK/dV
 * kernel and about 900 in the softcap and exact ones at 255 registers (ptxas, sm_90a); halves
 * of 96 / 64 columns spill none, for S = K Q^T and dP^T = V dO^T computed once per half. */
static constexpr int bwd_split_of(int hd) { return hd == 256 || hd == 192 ? 2 : 1; }

/* The dK/dV kernel (NW warps) for one mode. */
template <int HD, int HV, int NW, int BR, bool BF16, bool DET, bool EXACT, bool CAP>
static cudaError_t bwd_launch_dkdv(const bwd_params &p, cudaStream_t st) {
    constexpr int HO = HD / bwd_split_of(HD), HOV = HV / bwd_split_of(HD);
    typedef bwd_dkdv_smem<HD, HV, NW, BR> L;
    if (p.nsplit != bwd_split_of(HD)) return cudaErrorInvalidValue;
    const int64_t grid = (p.Sk + L::BC - 1) / L::BC * p.nsplit * p.Hkv * p.B;
    if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    if (grid == 0) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(bwd_dkdv_kernel<HD, HV, HO, HOV, NW, BR, BF16, DET, EXACT, CAP>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::bytes);
    if (e != cudaSuccess) return e;
    bwd_dkdv_kernel<HD, HV, HO, HOV, NW, BR, BF16, DET, EXACT, CAP><<<(unsigned)grid, NW * 32, L::bytes, st>>>(p);
    return cudaGetLastError();
}

/* default mode, after the dK/dV kernel: dQ = scale * workspace */
/* one-grid varlen (p.vl): grid.y = the sequences, grid.x sized for the longest one and shared
 * out (grid-stride) so that about as many blocks run as in one dense launch of the same rows */
static unsigned bwd_vl_blocks(const bwd_params &p, int64_t per_seq_blocks, int64_t cap) {
    int64_t x = p.vl ? cap / (p.B > 0 ? p.B : 1) : cap;
    if (x < 1) x = 1;
    return (unsigned)(per_seq_blocks < x ? per_seq_blocks : x);
}

template <bool BF16>
static cudaError_t bwd_launch_convert(const bwd_params &p, cudaStream_t st) {
    const int64_t npairs = (p.vl ? 1 : p.B) * p.Hq * p.Sq * (p.D / 2); /* of one sequence when vl */
    if (npairs == 0 || p.B == 0) return cudaSuccess;
    if (p.vl && p.B > 65535) return cudaErrorInvalidConfiguration;
    const unsigned blocks = bwd_vl_blocks(p, (npairs + 255) / 256, 65536);
    bwd_dq_convert_kernel<BF16><<<dim3(blocks, p.vl ? (unsigned)p.B : 1u), 256, 0, st>>>(p);
    return cudaGetLastError();
}

/* deterministic mode, after the dK/dV kernel: dQ per query block (section 3b) */
template <int HD, int HV, bool BF16, bool EXACT, bool CAP = false>
static cudaError_t bwd_launch_dq_det(const bwd_params &p, cudaStream_t st) {
    constexpr int HO = HD / bwd_split_of(HD);
    if (p.nsplit != bwd_split_of(HD)) return cudaErrorInvalidValue;
    const int64_t grid_q = (p.Sq + BWD_BR - 1) / BWD_BR * p.nsplit * p.Hq * p.B;
    if (grid_q > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    if (grid_q == 0) return cudaSuccess;
    const size_t smem_q = bwd_dq_smem<HD, HV>::bytes;
    cudaError_t e = cudaFuncSetAttribute(bwd_dq_kernel<HD, HV, HO, BF16, EXACT, CAP>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q);
    if (e != cudaSuccess) return e;
    bwd_dq_kernel<HD, HV, HO, BF16, EXACT, CAP><<<(unsigned)grid_q, BWD_THREADS, smem_q, st>>>(p);
    return cudaGetLastError();
}

template <int HD, int HV, int NW, int BR, bool BF16, bool EXACT, bool CAP = false>
static cudaError_t bwd_launch_main(const bwd_params &p, int deterministic, cudaStream_t st) {
    cudaError_t e;
    if (!deterministic) {
        if ((e = bwd_launch_dkdv<HD, HV, NW, BR, BF16, false, EXACT, CAP>(p, st)) != cudaSuccess) return e;
        if ((e = bwd_launch_convert<BF16>(p, st)) != cudaSuccess) return e;
    } else {
        if ((e = bwd_launch_dkdv<HD, HV, NW, BR, BF16, true, EXACT, CAP>(p, st)) != cudaSuccess) return e;
        if ((e = bwd_launch_dq_det<HD, HV, BF16, EXACT, CAP>(p, st)) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

template <bool BF16>
static cudaError_t bwd_launch_prep(const bwd_params &p, cudaStream_t st) {
    const int64_t nb = p.vl ? 1 : p.B; /* vl: the rows of the longest sequence, one grid row each */
    const int64_t nrows = nb * p.Hq * p.Sq + ((p.scan_nf || p.scan_norm) ? nb * p.Hkv * p.Sk : 0);
    if (nrows == 0 || p.B == 0) return cudaSuccess;
    if (p.vl && p.B > 65535) return cudaErrorInvalidConfiguration;
    /* grid-stride; few blocks keep the screen's atomics few */
    const int64_t rpb = 8 * (32 / bwd_prep_lanes(p)); /* rows a block takes at once */
    const unsigned blocks = bwd_vl_blocks(p, (nrows + rpb - 1) / rpb, 4096);
    bwd_prep_kernel<BF16><<<dim3(blocks, p.vl ? (unsigned)p.B : 1u), 256, 0, st>>>(p);
    return cudaGetLastError();
}

/* dK/dV kernel: 8 warps (128 kv rows x 64 query rows per step) for head dims <= 128 and the
 * pair (192, 128), 4 warps for 256; query blocks of 64 rows (32 was measured slower,
 * bench/RESULTS-2026-11-23-bwd.md). hd: the tile code of bwd_sm80_tile (64, 128, 256; 192:
 * the pair Qk 192, V 128). */
template <bool BF16>
static cudaError_t bwd_launch_body(const bwd_params &p, int hd, int deterministic, int exact, int cap,
                                   cudaStream_t st) {
    if (cap) { /* softcap: fast instantiations only (the host never asks for exact with a cap) */
        if (exact) return cudaErrorInvalidValue;
        if (hd == 64) return bwd_launch_main<64, 64, 8, 64, BF16, false, true>(p, deterministic, st);
        if (hd == 128) return bwd_launch_main<128, 128, 8, 64, BF16, false, true>(p, deterministic, st);
        if (hd == 192) return bwd_launch_main<192, 128, 8, 64, BF16, false, true>(p, deterministic, st);
        return bwd_launch_main<256, 256, 4, 64, BF16, false, true>(p, deterministic, st);
    }
    if (hd == 64) return exact ? bwd_launch_main<64, 64, 8, 64, BF16, true>(p, deterministic, st)
                               : bwd_launch_main<64, 64, 8, 64, BF16, false>(p, deterministic, st);
    if (hd == 128) return exact ? bwd_launch_main<128, 128, 8, 64, BF16, true>(p, deterministic, st)
                                : bwd_launch_main<128, 128, 8, 64, BF16, false>(p, deterministic, st);
    if (hd == 192) return exact ? bwd_launch_main<192, 128, 8, 64, BF16, true>(p, deterministic, st)
                                : bwd_launch_main<192, 128, 8, 64, BF16, false>(p, deterministic, st);
    return exact ? bwd_launch_main<256, 256, 4, 64, BF16, true>(p, deterministic, st)
                 : bwd_launch_main<256, 256, 4, 64, BF16, false>(p, deterministic, st);
}

extern "C" cudaError_t bwd_sm80_prep(const bwd_params *p, int bf16, cudaStream_t st) {
    return bf16 ? bwd_launch_prep<true>(*p, st) : bwd_launch_prep<false>(*p, st);
}

extern "C" cudaError_t bwd_sm80_run(const bwd_params *p, int hd, int bf16, int deterministic, int exact, int cap,
                                    cudaStream_t st) {
    return bf16 ? bwd_launch_body<true>(*p, hd, deterministic, exact, cap, st)
                : bwd_launch_body<false>(*p, hd, deterministic, exact, cap, st);
}

extern "C" cudaError_t bwd_sm80_dq_det(const bwd_params *p, int hd, int bf16, cudaStream_t st) {
    if (hd == 64) return bf16 ? bwd_launch_dq_det<64, 64, true, false>(*p, st) : bwd_launch_dq_det<64, 64, false, false>(*p, st);
    return bf16 ? bwd_launch_dq_det<128, 128, true, false>(*p, st) : bwd_launch_dq_det<128, 128, false, false>(*p, st);
}

extern "C" cudaError_t bwd_sm80_convert(const bwd_params *p, int bf16, cudaStream_t st) {
    return bf16 ? bwd_launch_convert<true>(*p, st) : bwd_launch_convert<false>(*p, st);
}

extern "C" int bwd_sm80_tile(int64_t dqk, int64_t dv) { return fa_cuda_bwd_tile(dqk, dv); }

extern "C" int bwd_sm80_nsplit(int hd) { return bwd_split_of(hd); }

extern "C" size_t bwd_sm80_smem_bytes(int hd, int deterministic) {
    size_t need = hd == 64    ? bwd_dkdv_smem<64, 64, 8, 64>::bytes
                  : hd == 128 ? bwd_dkdv_smem<128, 128, 8, 64>::bytes
                  : hd == 192 ? bwd_dkdv_smem<192, 128, 8, 64>::bytes
                              : bwd_dkdv_smem<256, 256, 4, 64>::bytes;
    size_t need_q = hd == 64    ? bwd_dq_smem<64, 64>::bytes
                    : hd == 128 ? bwd_dq_smem<128, 128>::bytes
                    : hd == 192 ? bwd_dq_smem<192, 128>::bytes
                                : bwd_dq_smem<256, 256>::bytes;
    if (deterministic && need_q > need) need = need_q;
    return need;
}
