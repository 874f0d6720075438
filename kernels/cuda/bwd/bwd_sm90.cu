/* bwd_sm90.cu: the Hopper backward kernels (sm_90a, warpgroup MMA): the dK/dV kernel of both
 * modes and the deterministic mode's dQ kernel. Design and arithmetic: bwd_common.cuh. */
#include <string.h>

#include "kernels/cuda/bwd/bwd_common.cuh"
#include "kernels/cuda/common/tma.h"

// ----------------------------------------------------------------------------
// 2h. Hopper dK/dV kernel (sm_90a; default mode, fast instantiation): warpgroup MMA
//
// The same algorithm, selects and arithmetic as bwd_dkdv_kernel<HD, .., DET = false,
// EXACT = false> (same roundings: fp32 tensor-core accumulation, P and dS rounded to
// the input type before the products that use them, dQ partials added in fp32 by
// atomics), with the products on wgmma (kernels/cuda/common/gmma.h) instead of mma.sync.
// CTA = 2 warpgroups (256 threads) and one block of 128 keys: warpgroup w owns keys
// 64w .. 64w+63 as the M (row) dimension of its products; K and V stay in shared memory
// (128-byte swizzle, gmma layout) while the query blocks of BR rows (BR = 128 at HD = 64,
// 64 at HD = 128: bwd_g_smem) of every query head of the GQA group stream through (Q, dO
// double-buffered by cp.async). Per query block, per warpgroup:
//   S^T[64 x BR] = K_w Q^T,  dP^T[64 x BR] = V_w dO^T   gmma_ss m64nBRk16, both operands
//                                                      K-major, HD/16 steps
//   P^T, dS^T in registers, as in the sm_80 kernel (-0 marks a hidden P, dS = 0 there)
//   dV += P^T dO,  dK += dS^T Q                         gmma_rs m64nHDk16: A = the rounded
//                                                      P^T / dS^T fragments, B = dO / Q tile
//                                                      MN-major, BR/16 steps over the queries
//   dS (queries x keys) to shared memory by stmatrix .trans, barrier, then
//   dQ[64 x 64] = dS K over the 128 keys               gmma_ss m64n64k16, A = dS (K-major),
//                                                      B = the K tile MN-major, 8 steps
//     HD = 128: warpgroup w forms dQ columns 64w .. 64w+63 of the 64 queries;
//     HD = 64:  warpgroup w forms dQ of queries 64w .. 64w+63 of the 128 (all 64 columns);
//     either way one partial per dQ element and key block.
//   dQ partials to a shared fp32 staging buffer (two, alternating), fenced for the async
//   proxy; after the NEXT iteration's barrier one thread per query row (threads tid < BR)
//   issues a bulk reduction of the row into the fp32 workspace
//   (cp.reduce.async.bulk .add.f32: one instruction per row instead of 16 float2 atomics per
//   thread, and no barrier of its own); a buffer is rewritten only after its reductions have
//   read it (wait_group.read).
// Measured (bench/RESULTS-2026-11-23-bwd.md): float2 atomics per thread instead of the bulk reductions, and
// the bulk reductions issued behind a barrier of their own, were both slower.
// Deterministic mode (template DQ = false): the same loop without the dQ stage (no sdS, no
// dS K products, no staging or bulk reductions; the dV/dK products of a block are waited for
// at the end of its iteration, before the next loop top's barrier lets its Q/dO buffer be
// reloaded; with the wait at the next loop top instead ptxas serialized the wgmmas), followed by
// bwd_g_dq_kernel (2q; bwd_dq_kernel, 3b, under a test policy: kernels/cuda/testing.h) for dQ. Its dK and dV
// are bitwise reproducible: each CTA owns its 128 keys'
// dK/dV rows, summed in the wgmma accumulators over the query heads of the group (outer) and the
// query blocks (inner) in a fixed order, and stored once; no atomics, no reductions in this path.
// Used only where proven: sm_90 device, head dim padded to 64 or 128, 16-byte copies
// allowed for Q, K, V and dO, fast (non-EXACT) call, either mode; everything else runs the
// kernels of bwd_sm80.cu (tests can ask for those too: the policy of kernels/cuda/testing.h).

template <int HD, bool DQ>
struct bwd_g_smem {
    /* query rows per block: 128 at HD = 64 (S^T, dP^T are m64n128 products), 64 at HD = 128 (the
     * registers: dK and dV accumulators of 128 columns) */
    static constexpr int br = HD == 64 ? 128 : 64;
    static constexpr uint32_t kv = 128u * HD * 2; /* bytes of sK or sV (128 rows) */
    static constexpr uint32_t qo = (uint32_t)br * HD * 2; /* bytes of one sQ or sdO buffer (br rows) */
    static constexpr uint32_t k = 0, v = kv, q = 2 * kv, dout = 2 * kv + 2 * qo, ds = 2 * kv + 4 * qo;
    /* sdS [br queries][128 keys] (only with DQ) */
    static constexpr uint32_t rows = ds + (DQ ? (uint32_t)br * 128 * 2 : 0u); /* sLse, sDsum [2][br] fp32 */
    /* sdQ: fp32 dQ partials for the bulk reductions, [2 buffers][br rows][D + 4] (row stride D + 4
     * floats: 16-byte aligned rows, conflict-free float2 stores); one partial per element (HD = 128:
     * the warpgroups own column halves; HD = 64: they own query-row halves) */
    static constexpr uint32_t dqbuf = DQ ? (uint32_t)br * (HD + 4) * 4 : 0u; /* none without DQ */
    static constexpr uint32_t dq = rows + 4u * br * 4;
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
        ptx_cp16(dst + x * RSTEP * 128, ok ? src : base, ok ? 16 : 0);
        src += RSTEP * rs;
    }
}

/* DQ = true: the default mode (dQ partials by bulk reductions into p.dq_ws); DQ = false: the
 * deterministic mode, dK and dV only (no sdS, no dQ products, no bulk reductions, p.dq_ws unused;
 * bwd_dq_kernel forms dQ afterwards). */
template <int HD, bool BF16, bool DQ, bool VL>
__global__ void __launch_bounds__(256, 1) bwd_g_dkdv_kernel(const bwd_params pk) {
    extern __shared__ __align__(1024) unsigned char bwd_g_raw[];
    typedef bwd_g_smem<HD, DQ> L;
    constexpr int BC = 128, BR = L::br;
    const uint32_t raw = ptx_smem(bwd_g_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t sK = base + L::k, sV = base + L::v, sQ = base + L::q, sdO = base + L::dout, sdS = base + L::ds;
    float *sLse = reinterpret_cast<float *>(bwd_g_raw + (base - raw) + L::rows); /* [2][BR] */
    float *sDsum = sLse + 2 * BR;                                                  /* [2][BR] */
    float *sdQ = reinterpret_cast<float *>(bwd_g_raw + (base - raw) + L::dq);      /* [2][BR][D + 4] */
    const uint32_t sdQa = base + L::dq;
    const int dq_ld = (int)pk.D + 4;

    const int tid = threadIdx.x, wg = tid >> 7, wl = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int krow = wg * 64 + wl * 16 + g; /* key (in the block) of accumulator rows g; +8 for g + 8 */

    /* block -> (kv block, kv head, batch entry); VL (one-grid varlen): the entry is a sequence
     * slot, the grid covers the longest sequence (pk.Sk), p is the sequence's own call
     * (bwd_seq_view), whose batch 0 it is, and a block past the end of a shorter sequence's keys
     * exits (CTA-uniform, before any copy or barrier). !VL: the dense call itself (p = pk, the
     * instantiation dense calls run: no per-sequence values held in registers) */
    int64_t bid = blockIdx.x;
    const int64_t nkb = (pk.Sk + BC - 1) / BC;
    const int64_t kb = bid % nkb;
    bid /= nkb;
    const int64_t hkv = bid % pk.Hkv, b = VL ? 0 : bid / pk.Hkv;
    const bwd_params p = VL ? bwd_seq_view(pk, bwd_seq_of_slot(pk, bid / pk.Hkv)) : pk;
    const int64_t j0 = kb * BC;
    if (VL && j0 >= p.Sk) return;
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
            ptx_cp4(ptx_smem(sLse + buf * BR + tid), ok ? p.lse_ws + ws + tid : p.lse_ws, ok ? 4 : 0);
        } else if (tid < 2 * BR) {
            int r = tid - BR;
            bool ok = r < rows;
            ptx_cp4(ptx_smem(sDsum + buf * BR + r), ok ? p.dsum_ws + ws + r : p.dsum_ws, ok ? 4 : 0);
        }
    };
    /* iterations: query heads of the group (outer), query blocks qb_lo .. qb_lo + nqb - 1 (inner) */
    int64_t hq = hkv * p.group, i0 = qb_lo * BR;        /* this iteration */
    int64_t hq_n = hq, i0_n = i0;                        /* the next one */
    const int64_t i0_end = (qb_lo + nqb) * BR;
    if (n_it > 0) issue(hq, i0, 0);
    ptx_cp_commit();

    /* descriptors (K-major, 128-byte swizzle) of this warpgroup's K and V rows; a k-step adds its
     * byte offset >> 4 (the start-address field; every address here is below 2^18) */
    const uint64_t dK0 = gmma_desc(sK + wg * 64 * 128, 16, 1024), dV0 = gmma_desc(sV + wg * 64 * 128, 16, 1024);
    /* dQ = dS K: A = dS (K-major; HD = 64: this warpgroup's 64 query rows), B = the K tile
     * MN-major (HD = 128: from column 64 wg) */
    const uint64_t ddS0 = gmma_desc(sdS + (HD == 64 ? wg * 64 * 128 : 0), 16, 1024);
    const uint64_t dKt0 = gmma_desc(sK + (HD == 128 ? wg * BC * 128 : 0), BC * 128, 1024);

    /* dQ partials of (query head hq_b, block i0_b), staged in sdQ[bb] (all threads' stores fenced,
     * then a barrier): one bulk reduction per query row, threads tid < BR (warps 0 .. BR/32 - 1;
     * spreading them over every warp was measured slower: bench/RESULTS-2026-11-25-s6-bwd.md) */
    auto bulk_dq = [&](int64_t hq_b, int64_t i0_b, int bb) {
        if (tid < BR) {
            const int r = tid;
            if (i0_b + r < p.Sq)
                gmma_bulk_add_f32(p.dq_ws + ((b * p.Hq + hq_b) * p.Sq + i0_b + r) * p.D,
                               sdQa + (uint32_t)((bb * BR + r) * dq_ld * 4), (uint32_t)p.D * 4);
            gmma_bulk_commit();
        }
    };

    float acc_dk[HD / 8][4], acc_dv[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dk[n][e] = acc_dv[n][e] = 0.f;

    for (int64_t it = 0; it < n_it; it++) {
        const int buf = (int)(it & 1);
        ptx_cp_wait<0>();
        /* the reductions of iteration it - 2 (issued at the top of it - 1) have read sdQ[buf] */
        if (DQ) gmma_bulk_wait_read<0>();
        gmma_fence_proxy(); /* this thread's cp.async data -> visible to wgmma after the barrier */
        __syncthreads();    /* buffer buf complete; every warpgroup is done with buf^1, sdS and sdQ[buf];
                               the dQ partials of iteration it - 1 are staged in sdQ[buf^1] */
        if (DQ && it > 0) bulk_dq(hq, i0, buf ^ 1); /* hq, i0: still iteration it - 1 */
        hq = hq_n; i0 = i0_n;
        i0_n += BR;
        if (i0_n == i0_end) { i0_n = qb_lo * BR; hq_n++; }
        if (it + 1 < n_it) issue(hq_n, i0_n, buf ^ 1);
        ptx_cp_commit();

        const uint32_t sQb = sQ + buf * L::qo, sdOb = sdO + buf * L::qo;
        const float *lse_b = sLse + buf * BR;
        const float *dsum_b = sDsum + buf * BR;

        /* S^T = K_w Q^T and dP^T = V_w dO^T (two groups) */
        float s[BR / 8][4], dp[BR / 8][4]; /* first step: scale_d = 0 (the inputs are ignored) */
        const uint64_t dQ0 = gmma_desc(sQb, 16, 1024), ddO0 = gmma_desc(sdOb, 16, 1024);
        gmma_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            gmma_ss<BR, BF16, 0, 0>(s, dK0 + (gmma_kslice_offset<BC>(ks) >> 4), dQ0 + (gmma_kslice_offset<BR>(ks) >> 4), ks > 0);
        gmma_commit();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            gmma_ss<BR, BF16, 0, 0>(dp, dV0 + (gmma_kslice_offset<BC>(ks) >> 4), ddO0 + (gmma_kslice_offset<BR>(ks) >> 4), ks > 0);
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
                const float lse[4] = {l.x, l.y, l.x, l.y};
                bwd_p_n8_full<BF16>(s[nt], p, lse, pa[nt >> 1][(nt & 1) * 2 + 0], pa[nt >> 1][(nt & 1) * 2 + 1]);
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                const int il = nt * 8 + 2 * t;
                const float lse[4] = {lse_b[il], lse_b[il + 1], lse_b[il], lse_b[il + 1]};
                bwd_p_n8<BF16, true>(s[nt], p, tm, mrow, krow, il, lse, pa[nt >> 1][(nt & 1) * 2 + 0],
                                     pa[nt >> 1][(nt & 1) * 2 + 1]);
            }
        }

        /* dV += P^T dO (its own group, B = dO MN-major): runs while dS is formed */
        const uint64_t dOt0 = gmma_desc(sdOb, BR * 128, 1024), dQt0 = gmma_desc(sQb, BR * 128, 1024);
        gmma_fence();
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++) gmma_rs<HD, BF16, 1>(acc_dv, pa[kk], dOt0 + ((kk * 16 * 128) >> 4));
        gmma_commit();

        /* dS^T = P^T (dP^T - Dsum), zero where hidden, rounded (A fragments); the dP group is done
         * when at most the dV group is left in flight */
        gmma_wait<1>();
        gmma_fence_operands(dp);
        uint32_t da[BR / 16][4];
        float ds_max = 0.f; /* unused: the Hopper kernels run fast calls only */
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt++) {
            const float2 ds2 = *reinterpret_cast<const float2 *>(dsum_b + nt * 8 + 2 * t);
            const float dsum[4] = {ds2.x, ds2.y, ds2.x, ds2.y};
            bwd_ds_n8<BF16>(dp[nt], pa[nt >> 1][(nt & 1) * 2 + 0], pa[nt >> 1][(nt & 1) * 2 + 1], dsum,
                            da[nt >> 1][(nt & 1) * 2 + 0], da[nt >> 1][(nt & 1) * 2 + 1], ds_max);
        }

        /* dS (query rows x key columns) to shared memory: fragment kk holds queries 16kk.. of keys
         * krow - g + {0, 8}; stored transposed, row = query, 8 keys per 16-byte chunk */
        if (DQ) {
            const int m = lane >> 3, j = lane & 7;
            const int ch = (wg * 64 + wl * 16 + (m & 1) * 8) >> 3;
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++)
                gmma_stsm4_t(sdS + gmma_tile_offset<BR>(kk * 16 + (m >> 1) * 8 + j, ch), da[kk]);
        }

        /* dK += dS^T Q (a second group, in flight while dS is shared); B = Q MN-major */
        gmma_fence();
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

        /* dQ[64 queries x 64 columns] = dS K over the 128 keys, added to the fp32 workspace
         * (HD = 128: columns 64 wg.. of the 64 queries; HD = 64: queries 64 wg.. of the 128) */
        float dq[8][4]; /* first step: scale_d = 0 */
        gmma_fence();
#pragma unroll
        for (int ks = 0; ks < BC / 16; ks++)
            gmma_ss_m64n64k16<BF16, 0, 1>(dq, ddS0 + (gmma_kslice_offset<BR>(ks) >> 4), dKt0 + ((ks * 16 * 128) >> 4), ks > 0);
        gmma_commit();
        gmma_wait<0>();
        gmma_fence_operands(dq);
        gmma_fence_operands(acc_dv);
        gmma_fence_operands(acc_dk);
        {
            /* stage this thread's fragment (rows r0 + wl 16 + g, + 8; columns c0 + 8n + 2t below D) */
            const int c0 = HD == 128 ? wg * 64 : 0, r0 = HD == 128 ? 0 : wg * 64;
            float *st = sdQ + (size_t)buf * BR * dq_ld + (r0 + wl * 16 + g) * dq_ld + c0 + 2 * t;
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

    ptx_cp_wait<0>(); /* no copy may be left in flight at exit (n_it == 0 leaves K, V pending) */
    if (DQ) {
        if (n_it > 0) {
            __syncthreads(); /* the last iteration's partials are staged */
            bulk_dq(hq, i0, (int)((n_it - 1) & 1));
        }
        gmma_bulk_wait_all(); /* no bulk reduction may be left reading sdQ */
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
// 2w. Warp-specialized Hopper dK/dV kernel (sm_90a; default mode, dense calls, fast instantiation)
//
// The algorithm, products, tiles and arithmetic of 2h (DQ = true), with the data movement and
// the dQ reductions taken off the consumer warpgroups (FA3's layout of roles):
//   warpgroup 0 (producer, 24 registers a thread after setmaxnreg):
//     warp 0 (loader): K and V once, then per iteration the Q and dO tiles of the query block into
//       a ring of two stages by tensor-map copies (common/tma.h maps, 128-byte swizzle: the layout
//       bwd_g_load writes), each stage guarded by a "full" mbarrier (the copies' bytes landed and
//       the 32 lanes' plain stores of the block's LSE and Dsum rows) and an "empty" one (every
//       consumer thread is done with the stage: its dV / dK products that read it completed, and
//       its own reads of the LSE / Dsum rows precede its arrival, so that the loader's next stores
//       are ordered after them thread by thread);
//     warp 1 (dQ): per iteration, once the consumers' dQ partials are staged in sdQ[it % 2]
//       (mbarrier dq_full, every consumer thread arrives after its stores and proxy fence), lane 0
//       adds them to the fp32 workspace by one tensor reduction per 32-column box
//       (cp.reduce.async.bulk.tensor .add, fp32 adds at L2 like 2h's per-row bulk reductions;
//       common/tma.h), then, the sources read (wait_group.read), releases the buffer (dq_empty);
//     warps 2, 3: none (they exit).
//   warpgroups 1, 2 (consumers, 240 registers): the per-iteration products of 2h's warpgroups 0, 1.
// No CTA-wide barrier in the loop. The consumers meet only where 2h's products need it: the dS
// tile is complete (named barrier 1, both warpgroups, before the dQ product that reads all 128
// keys of it), and warpgroup w rewrites sdS only after the other one's dQ product of the previous
// iteration has read it (named barrier 2 + w: w syncs, the other arrives after its dQ wait).
// Elements outside the tensors (rows past Sq / Sk, columns past D) land as zeros, as 2h's
// zero-filled cp.async; LSE and Dsum of rows past Sq are 0, as in 2h (those rows are hidden).
// Same roundings and summation orders as 2h: the dQ partials of a (query block, key block) are the
// same fp32 values, added to the workspace by the same kind of bulk reductions (order varies
// across CTAs, as before).

typedef struct {
    CUtensorMap q, dout, k, v; /* 16-bit inputs, boxes of 64 columns */
    CUtensorMap dq;            /* the fp32 dQ workspace [B, Hq, Sq, D], boxes of 32 columns x br rows */
} bwd_ws_maps;

template <int HD>
struct bwd_ws_smem {
    static constexpr int br = HD == 64 ? 128 : 64; /* query rows per block, as bwd_g_smem */
    static constexpr uint32_t kv = 128u * HD * 2, qo = (uint32_t)br * HD * 2;
    static constexpr uint32_t k = 0, v = kv, q = 2 * kv, dout = 2 * kv + 2 * qo, ds = 2 * kv + 4 * qo;
    static constexpr uint32_t rows = ds + (uint32_t)br * 128 * 2; /* sLse, sDsum [2][br] fp32 */
    /* sdQ [2 buffers][HD / 32 boxes][br rows][32] fp32, each box in the 128-byte swizzled layout of
     * tma_map32_rank4 (1024-byte aligned: rows is, and 4 br 4 is a multiple of 1024) */
    static constexpr uint32_t dq = rows + 4u * br * 4;
    static constexpr uint32_t dqbuf = (uint32_t)br * HD * 4;
    /* mbarriers: full[2], empty[2], dq_full[2], dq_empty[2], kv */
    static constexpr uint32_t bar = dq + 2 * dqbuf;
    static constexpr size_t bytes = (size_t)bar + 9 * 8 + 1024;
};
static constexpr int bwd_ws_threads = 384, bwd_ws_producer_regs = 24, bwd_ws_consumer_regs = 240;

template <int HD, bool BF16>
__global__ void __launch_bounds__(bwd_ws_threads, 1) bwd_ws_dkdv_kernel(const bwd_params p,
                                                                       const __grid_constant__ bwd_ws_maps maps) {
#if GMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char bwd_ws_raw[];
    typedef bwd_ws_smem<HD> L;
    constexpr int BC = 128, BR = L::br, CB = HD / 64;
    const uint32_t raw = ptx_smem(bwd_ws_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t sK = base + L::k, sV = base + L::v, sQ = base + L::q, sdO = base + L::dout, sdS = base + L::ds;
    float *sLse = reinterpret_cast<float *>(bwd_ws_raw + (base - raw) + L::rows); /* [2][BR] */
    float *sDsum = sLse + 2 * BR;                                                   /* [2][BR] */
    const uint32_t sdQa = base + L::dq; /* [2][HD / 32][BR][32], swizzled boxes */
    const uint32_t b_full = base + L::bar, b_empty = b_full + 16, b_dqfull = b_full + 32, b_dqempty = b_full + 48,
                   b_kv = b_full + 64;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    /* block -> (kv block, kv head, batch entry) as 2h (dense calls only) */
    int64_t bid = blockIdx.x;
    const int64_t nkb = (p.Sk + BC - 1) / BC;
    const int64_t kb = bid % nkb;
    bid /= nkb;
    const int64_t hkv = bid % p.Hkv, b = bid / p.Hkv;
    const int64_t j0 = kb * BC;
    const int64_t kv_rows = p.Sk - j0 < BC ? p.Sk - j0 : BC;
    int64_t i_lo = 0, i_hi = p.Sq; /* query rows that see at least one key of this block */
    if (p.has_right) { int64_t x = j0 - p.off - p.right; if (x > i_lo) i_lo = x; }
    if (p.has_left) { int64_t x = j0 + kv_rows - p.off + p.left; if (x < i_hi) i_hi = x; }
    int64_t qb_lo = 0, nqb = 0;
    if (i_lo < i_hi) { qb_lo = i_lo / BR; nqb = (i_hi + BR - 1) / BR - qb_lo; }
    const int64_t iters = nqb * p.group; /* query heads of the group (outer) x query blocks (inner) */
    const int64_t i0_end = (qb_lo + nqb) * BR;

    if (tid == 0) {
        for (int s = 0; s < 2; s++) {
            gmma_mbar_init(b_full + 8 * s, 33); /* lane 0's arrive_tx + the 32 lanes' row stores */
            gmma_mbar_init(b_empty + 8 * s, 256); /* every consumer thread (its LSE / Dsum reads) */
            gmma_mbar_init(b_dqfull + 8 * s, 256); /* every consumer thread, after its stores */
            gmma_mbar_init(b_dqempty + 8 * s, 1);  /* the dQ warp */
        }
        gmma_mbar_init(b_kv, 1);
        gmma_mbar_init_fence();
    }
    __syncthreads(); /* the only CTA-wide barrier: the roles split below */

    if (warp < 4) {
        gmma_setmaxnreg_dec<bwd_ws_producer_regs>();
        if (warp == 0) {
            /* ---------------- loader ---------------- */
            if (iters > 0 && lane == 0) {
                gmma_mbar_arrive_tx(b_kv, 2 * L::kv);
#pragma unroll
                for (int cb = 0; cb < CB; cb++) {
                    gmma_tma_load4(sK + cb * BC * 128, &maps.k, b_kv, cb * 64, (int)j0, (int)hkv, (int)b);
                    gmma_tma_load4(sV + cb * BC * 128, &maps.v, b_kv, cb * 64, (int)j0, (int)hkv, (int)b);
                }
            }
            int64_t hq = hkv * p.group, i0 = qb_lo * BR;
            for (int64_t it = 0; it < iters; it++) {
                const int s = (int)(it & 1);
                gmma_mbar_wait(b_empty + 8 * s, (uint32_t)((it >> 1) & 1) ^ 1u); /* iteration it - 2 is done with s */
                if (lane == 0) {
                    gmma_mbar_arrive_tx(b_full + 8 * s, 2 * L::qo);
#pragma unroll
                    for (int cb = 0; cb < CB; cb++) {
                        gmma_tma_load4(sQ + s * L::qo + cb * BR * 128, &maps.q, b_full + 8 * s, cb * 64, (int)i0, (int)hq,
                                       (int)b);
                        gmma_tma_load4(sdO + s * L::qo + cb * BR * 128, &maps.dout, b_full + 8 * s, cb * 64, (int)i0,
                                       (int)hq, (int)b);
                    }
                }
                const int64_t ws = (b * p.Hq + hq) * p.Sq + i0;
#pragma unroll
                for (int x = 0; x < BR / 32; x++) {
                    const int r = lane + 32 * x;
                    const bool ok = i0 + r < p.Sq;
                    sLse[s * BR + r] = ok ? p.lse_ws[ws + r] : 0.f;
                    sDsum[s * BR + r] = ok ? p.dsum_ws[ws + r] : 0.f;
                }
                gmma_mbar_arrive(b_full + 8 * s);
                i0 += BR;
                if (i0 == i0_end) { i0 = qb_lo * BR; hq++; }
            }
        } else if (warp == 1) {
            /* ---------------- dQ reductions ---------------- */
            int64_t hq = hkv * p.group, i0 = qb_lo * BR;
            for (int64_t it = 0; it < iters; it++) {
                const int bb = (int)(it & 1);
                gmma_mbar_wait(b_dqfull + 8 * bb, (uint32_t)((it >> 1) & 1));
                if (lane == 0) {
                    /* one tensor reduction per 32-column box (columns past D, rows past Sq: skipped) */
#pragma unroll
                    for (int cb = 0; cb < HD / 32; cb++)
                        if (cb * 32 < p.D)
                            tma_reduce_add4(&maps.dq, sdQa + bb * L::dqbuf + cb * BR * 128, cb * 32, (int)i0, (int)hq,
                                            (int)b);
                    gmma_bulk_commit();
                    gmma_bulk_wait_read<0>(); /* the reductions have read sdQ[bb] */
                    gmma_mbar_arrive(b_dqempty + 8 * bb);
                }
                __syncwarp();
                i0 += BR;
                if (i0 == i0_end) { i0 = qb_lo * BR; hq++; }
            }
            gmma_bulk_wait_all();
        }
        return;
    }

    /* ---------------- consumers ---------------- */
    gmma_setmaxnreg_inc<bwd_ws_consumer_regs>();
    const int cwg = warp / 4 - 1, wl = warp & 3; /* consumer warpgroup 0, 1: 2h's warpgroup wg */
    const int g = lane >> 2, t = lane & 3;
    const int krow = cwg * 64 + wl * 16 + g; /* key (in the block) of accumulator rows g; +8 for g + 8 */

    const uint64_t dK0 = gmma_desc(sK + cwg * 64 * 128, 16, 1024), dV0 = gmma_desc(sV + cwg * 64 * 128, 16, 1024);
    const uint64_t ddS0 = gmma_desc(sdS + (HD == 64 ? cwg * 64 * 128 : 0), 16, 1024);
    const uint64_t dKt0 = gmma_desc(sK + (HD == 128 ? cwg * BC * 128 : 0), BC * 128, 1024);

    float acc_dk[HD / 8][4], acc_dv[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dk[n][e] = acc_dv[n][e] = 0.f;

    if (iters > 0) gmma_mbar_wait(b_kv, 0);
    int64_t hq = hkv * p.group, i0 = qb_lo * BR;
    for (int64_t it = 0; it < iters; it++) {
        const int s = (int)(it & 1);
        const uint32_t ph = (uint32_t)((it >> 1) & 1);
        gmma_mbar_wait(b_full + 8 * s, ph);
        const uint32_t sQb = sQ + s * L::qo, sdOb = sdO + s * L::qo;
        const float *lse_b = sLse + s * BR;
        const float *dsum_b = sDsum + s * BR;

        /* S^T = K_w Q^T and dP^T = V_w dO^T (two groups) */
        float sc[BR / 8][4], dp[BR / 8][4];
        const uint64_t dQ0 = gmma_desc(sQb, 16, 1024), ddO0 = gmma_desc(sdOb, 16, 1024);
        gmma_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            gmma_ss<BR, BF16, 0, 0>(sc, dK0 + (gmma_kslice_offset<BC>(ks) >> 4), dQ0 + (gmma_kslice_offset<BR>(ks) >> 4), ks > 0);
        gmma_commit();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            gmma_ss<BR, BF16, 0, 0>(dp, dV0 + (gmma_kslice_offset<BC>(ks) >> 4), ddO0 + (gmma_kslice_offset<BR>(ks) >> 4), ks > 0);
        gmma_commit();
        gmma_wait<1>();
        gmma_fence_operands(sc);

        /* P^T (bwd_p_n8 / bwd_p_n8_full, as 2h) */
        const bwd_tile tm = bwd_tile_make<BC, BR>(p, i0, j0);
        const float *mrow = p.mask ? p.mask + b * p.ms[0] + hq * p.ms[1] + i0 * p.ms[2] + j0 * p.ms[3] : NULL;
        uint32_t pa[BR / 16][4];
        if (!tm.partial && !mrow) {
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                const float2 l = *reinterpret_cast<const float2 *>(lse_b + nt * 8 + 2 * t);
                const float lse[4] = {l.x, l.y, l.x, l.y};
                bwd_p_n8_full<BF16>(sc[nt], p, lse, pa[nt >> 1][(nt & 1) * 2 + 0], pa[nt >> 1][(nt & 1) * 2 + 1]);
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                const int il = nt * 8 + 2 * t;
                const float lse[4] = {lse_b[il], lse_b[il + 1], lse_b[il], lse_b[il + 1]};
                bwd_p_n8<BF16, true>(sc[nt], p, tm, mrow, krow, il, lse, pa[nt >> 1][(nt & 1) * 2 + 0],
                                     pa[nt >> 1][(nt & 1) * 2 + 1]);
            }
        }

        /* dS^T (bwd_ds_n8, as 2h) */
        gmma_wait<0>();
        gmma_fence_operands(dp);
        uint32_t da[BR / 16][4];
        float ds_max = 0.f; /* unused: fast calls only */
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt++) {
            const float2 ds2 = *reinterpret_cast<const float2 *>(dsum_b + nt * 8 + 2 * t);
            const float dsum[4] = {ds2.x, ds2.y, ds2.x, ds2.y};
            bwd_ds_n8<BF16>(dp[nt], pa[nt >> 1][(nt & 1) * 2 + 0], pa[nt >> 1][(nt & 1) * 2 + 1], dsum,
                            da[nt >> 1][(nt & 1) * 2 + 0], da[nt >> 1][(nt & 1) * 2 + 1], ds_max);
        }

        /* dS to sdS (as 2h), once the other warpgroup's dQ product of iteration it - 1 has read it */
        if (it > 0) gmma_bar_sync(2 + cwg, 256);
        {
            const int m = lane >> 3, j = lane & 7;
            const int ch = (cwg * 64 + wl * 16 + (m & 1) * 8) >> 3;
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++)
                gmma_stsm4_t(sdS + gmma_tile_offset<BR>(kk * 16 + (m >> 1) * 8 + j, ch), da[kk]);
        }

        /* dV += P^T dO, dK += dS^T Q (one group, in flight while dS is shared); B MN-major */
        const uint64_t dOt0 = gmma_desc(sdOb, BR * 128, 1024), dQt0 = gmma_desc(sQb, BR * 128, 1024);
        gmma_fence();
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++) gmma_rs<HD, BF16, 1>(acc_dv, pa[kk], dOt0 + ((kk * 16 * 128) >> 4));
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++) gmma_rs<HD, BF16, 1>(acc_dk, da[kk], dQt0 + ((kk * 16 * 128) >> 4));
        gmma_commit();
        gmma_fence_proxy(); /* the stmatrix stores -> visible to wgmma after the barrier */
        gmma_bar_sync(1, 256); /* the dS tile is complete (both warpgroups' keys) */

        /* dQ[64 x 64] = dS K over the 128 keys (as 2h) */
        float dq[8][4];
        gmma_fence();
#pragma unroll
        for (int ks = 0; ks < BC / 16; ks++)
            gmma_ss_m64n64k16<BF16, 0, 1>(dq, ddS0 + (gmma_kslice_offset<BR>(ks) >> 4), dKt0 + ((ks * 16 * 128) >> 4), ks > 0);
        gmma_commit();
        gmma_wait<0>();
        gmma_fence_operands(dq);
        gmma_fence_operands(acc_dv);
        gmma_fence_operands(acc_dk);
        /* this warpgroup is done with sdS (the other may rewrite it) and with stage s (its dV, dK
         * products that read Q and dO completed) */
        if (it + 1 < iters) gmma_bar_arrive(3 - cwg, 256);
        gmma_mbar_arrive(b_empty + 8 * s); /* every thread: its own sLse / sDsum reads are released */

        /* stage the partials in sdQ[s] once the dQ warp's reductions of iteration it - 2 have read it */
        gmma_mbar_wait(b_dqempty + 8 * s, ph ^ 1u);
        {
            /* this thread's fragment: rows r0 + wl 16 + g (+ 8), columns c0 + 8n + 2t, into box
             * (c0 + 8n) / 32 at column (8n + 2t) % 32 (c0 is 0 or 64); columns past D are not
             * reduced (outside the map) */
            const int c0 = HD == 128 ? cwg * 64 : 0, r0 = HD == 128 ? 0 : cwg * 64;
            const int ra = r0 + wl * 16 + g;
            const uint32_t sb = sdQa + s * L::dqbuf;
#pragma unroll
            for (int n = 0; n < 8; n++) {
                const uint32_t box = sb + (uint32_t)((c0 + 8 * n) >> 5) * (BR * 128);
                const int c = (8 * n + 2 * t) & 31;
                float2 lo = make_float2(dq[n][0], dq[n][1]), hi = make_float2(dq[n][2], dq[n][3]);
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(box + tma_swz32(ra, c)), "f"(lo.x), "f"(lo.y) : "memory");
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(box + tma_swz32(ra + 8, c)), "f"(hi.x), "f"(hi.y) : "memory");
            }
            gmma_fence_proxy(); /* the stores -> visible to the copy engine */
            gmma_mbar_arrive(b_dqfull + 8 * s);
        }
        i0 += BR;
        if (i0 == i0_end) { i0 = qb_lo * BR; hq++; }
    }

    /* dK = scale * acc, dV = acc (this thread's rows krow, krow + 8) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t j = j0 + krow + h * 8;
        if (j < p.Sk) {
            uint16_t *dkp = p.dk + b * p.dks[0] + j * p.dks[1] + hkv * p.dks[2];
            uint16_t *dvp = p.dv + b * p.dvs[0] + j * p.dvs[1] + hkv * p.dvs[2];
#pragma unroll
            for (int nt = 0; nt < HD / 8; nt++) {
                const int64_t d = nt * 8 + 2 * t;
                if (d < p.D) {
                    bwd_store_pair<BF16>(dkp + d, acc_dk[nt][2 * h] * p.scale, acc_dk[nt][2 * h + 1] * p.scale, p.w32_dk);
                    bwd_store_pair<BF16>(dvp + d, acc_dv[nt][2 * h], acc_dv[nt][2 * h + 1], p.w32_dv);
                }
            }
        }
    }
#else
    (void)p; (void)maps;
    __trap();
#endif
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
// A test policy (kernels/cuda/testing.h) can keep bwd_dq_kernel there.

template <int HD>
struct bwd_gq_smem {
    static constexpr uint32_t qo = 128u * HD * 2; /* bytes of sQ or sdO (128 rows) */
    static constexpr uint32_t kv = 64u * HD * 2;  /* bytes of one sK or sV buffer (64 rows) */
    static constexpr uint32_t q = 0, dout = qo, k = 2 * qo, v = 2 * qo + 2 * kv;
    /* + 1024: the tiles must start 1024-byte aligned */
    static constexpr size_t bytes = (size_t)2 * qo + 4 * kv + 1024;
};

template <int HD, bool BF16, bool VL>
__global__ void __launch_bounds__(256, 1) bwd_g_dq_kernel(const bwd_params pk) {
    extern __shared__ __align__(1024) unsigned char bwd_gq_raw[];
    typedef bwd_gq_smem<HD> L;
    constexpr int BR = 128, BC = 64;
    const uint32_t raw = ptx_smem(bwd_gq_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t sQ = base + L::q, sdO = base + L::dout, sK = base + L::k, sV = base + L::v;

    const int tid = threadIdx.x, wg = tid >> 7, wl = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int qrow = wg * 64 + wl * 16 + g; /* query (in the block) of accumulator rows g; +8 for g + 8 */

    /* block -> (query block, query head, batch entry); VL: a sequence slot as in
     * bwd_g_dkdv_kernel (the grid covers the longest sequence, pk.Sq; a block past the end of
     * a shorter sequence's queries exits before any copy or barrier); !VL: p = pk */
    int64_t bid = blockIdx.x;
    const int64_t nqb = (pk.Sq + BR - 1) / BR;
    const int64_t qb = bid % nqb;
    bid /= nqb;
    const int64_t hq = bid % pk.Hq, b = VL ? 0 : bid / pk.Hq;
    const bwd_params p = VL ? bwd_seq_view(pk, bwd_seq_of_slot(pk, bid / pk.Hq)) : pk;
    const int64_t hkv = hq / p.group;
    const int64_t i0 = qb * BR;
    if (VL && i0 >= p.Sq) return;
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
    ptx_cp_commit();

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
        ptx_cp_wait<0>();
        gmma_fence_proxy(); /* this thread's cp.async data -> visible to wgmma after the barrier */
        __syncthreads();    /* buffer buf complete; every warpgroup is done with buf^1 */
        if (it + 1 < nkb) issue(it + 1, buf ^ 1);
        ptx_cp_commit();
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
        const float lse[4] = {lse_a, lse_a, lse_b, lse_b};
        if (!tm.partial && !mrow) { /* CTA-uniform: every entry visible, no mask (mval = 0) */
#pragma unroll
            for (int nt = 0; nt < BC / 8; nt++)
                bwd_p_n8_full<BF16>(s[nt], p, lse, pa[nt >> 1][(nt & 1) * 2 + 0], pa[nt >> 1][(nt & 1) * 2 + 1]);
        } else {
#pragma unroll
            for (int nt = 0; nt < BC / 8; nt++)
                bwd_p_n8<BF16, false>(s[nt], p, tm, mrow, qrow, nt * 8 + 2 * t, lse, pa[nt >> 1][(nt & 1) * 2 + 0],
                                      pa[nt >> 1][(nt & 1) * 2 + 1]);
        }

        /* dS = P (dP - Dsum), zero where hidden, rounded (A fragments) */
        gmma_wait<0>();
        gmma_fence_operands(dp);
        uint32_t da[BC / 16][4];
        float ds_max = 0.f; /* unused: the Hopper kernels run fast calls only */
        const float dsum[4] = {ds_a, ds_a, ds_b, ds_b};
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
            bwd_ds_n8<BF16>(dp[nt], pa[nt >> 1][(nt & 1) * 2 + 0], pa[nt >> 1][(nt & 1) * 2 + 1], dsum,
                            da[nt >> 1][(nt & 1) * 2 + 0], da[nt >> 1][(nt & 1) * 2 + 1], ds_max);

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

    ptx_cp_wait<0>(); /* nkb == 0 leaves Q, dO pending */

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
// launches (the seams of bwd_common.cuh)

/* The warp-specialized kernel (section 2w) for a dense default-mode call: 1 when it does not
 * apply (a tensor map the driver cannot encode for these strides: nothing launched, the caller runs
 * 2h), 0 when launched (*e: the launch status). */
template <int HD, bool BF16>
static int bwd_ws_launch(const bwd_params &p, unsigned grid, cudaStream_t st, cudaError_t *e) {
    typedef bwd_ws_smem<HD> L;
    bwd_ws_maps m;
    memset(&m, 0, sizeof(m));
    if (tma_map16_rank4(&m.q, p.q, p.D, p.Sq, p.Hq, p.B, p.qs[1], p.qs[2], p.qs[0], L::br) ||
        tma_map16_rank4(&m.dout, p.dout, p.D, p.Sq, p.Hq, p.B, p.dos[1], p.dos[2], p.dos[0], L::br) ||
        tma_map16_rank4(&m.k, p.k, p.D, p.Sk, p.Hkv, p.B, p.ks[1], p.ks[2], p.ks[0], 128) ||
        tma_map16_rank4(&m.v, p.v, p.D, p.Sk, p.Hkv, p.B, p.vs[1], p.vs[2], p.vs[0], 128) ||
        tma_map32_rank4(&m.dq, p.dq_ws, p.D, p.Sq, p.Hq, p.B, p.D, p.Sq * p.D, p.Hq * p.Sq * p.D, L::br))
        return 1;
    if (p.Sq > 0x7fffffffLL || p.Sk > 0x7fffffffLL) return 1; /* the maps' coordinates are int32 */
    void (*kern)(const bwd_params, const bwd_ws_maps) = bwd_ws_dkdv_kernel<HD, BF16>;
    *e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::bytes);
    if (*e != cudaSuccess) return 0;
    kern<<<grid, bwd_ws_threads, L::bytes, st>>>(p, m);
    *e = cudaGetLastError();
    return 0;
}

/* the Hopper dK/dV kernel (section 2h), then the dQ conversion (DQ: default mode) or the
 * deterministic dQ kernel (!DQ: deterministic mode; the Hopper one, or with !dq_sm90 the sm_80
 * one, fast instantiation like the call) */
template <int HD, bool BF16, bool DQ>
static cudaError_t bwd_launch_g(const bwd_params &p, int dq_sm90, cudaStream_t st) {
    typedef bwd_g_smem<HD, DQ> L;
    const int64_t grid = (p.Sk + 127) / 128 * p.Hkv * p.B;
    if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    cudaError_t e;
    if (DQ && !p.vl && !p.no_ws && grid > 0) { /* dense default-mode calls: the warp-specialized kernel (2w) */
        if (bwd_ws_launch<HD, BF16>(p, (unsigned)grid, st, &e) == 0) {
            if (e != cudaSuccess) return e;
            return bwd_sm80_convert(&p, BF16, st);
        }
    }
    if (grid > 0) {
        void (*kern)(const bwd_params) = p.vl ? bwd_g_dkdv_kernel<HD, BF16, DQ, true> : bwd_g_dkdv_kernel<HD, BF16, DQ, false>;
        e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::bytes);
        if (e != cudaSuccess) return e;
        kern<<<(unsigned)grid, 256, L::bytes, st>>>(p);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (DQ) return bwd_sm80_convert(&p, BF16, st);
    if (!dq_sm90) return bwd_sm80_dq_det(&p, HD, BF16, st);
    typedef bwd_gq_smem<HD> LQ; /* the Hopper dQ kernel (section 2q) */
    const int64_t grid_q = (p.Sq + 127) / 128 * p.Hq * p.B;
    if (grid_q > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    if (grid_q == 0) return cudaSuccess;
    void (*kq)(const bwd_params) = p.vl ? bwd_g_dq_kernel<HD, BF16, true> : bwd_g_dq_kernel<HD, BF16, false>;
    e = cudaFuncSetAttribute(kq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)LQ::bytes);
    if (e != cudaSuccess) return e;
    kq<<<(unsigned)grid_q, 256, LQ::bytes, st>>>(p);
    return cudaGetLastError();
}

extern "C" cudaError_t bwd_sm90_run(const bwd_params *p, int hd, int bf16, int deterministic, int dq_sm90,
                                    cudaStream_t st) {
    if (hd == 64)
        return bf16 ? (deterministic ? bwd_launch_g<64, true, false>(*p, dq_sm90, st) : bwd_launch_g<64, true, true>(*p, dq_sm90, st))
                    : (deterministic ? bwd_launch_g<64, false, false>(*p, dq_sm90, st) : bwd_launch_g<64, false, true>(*p, dq_sm90, st));
    return bf16 ? (deterministic ? bwd_launch_g<128, true, false>(*p, dq_sm90, st) : bwd_launch_g<128, true, true>(*p, dq_sm90, st))
                : (deterministic ? bwd_launch_g<128, false, false>(*p, dq_sm90, st) : bwd_launch_g<128, false, true>(*p, dq_sm90, st));
}

/* the larger of the two modes' dK/dV kernels (the default mode's) */
extern "C" size_t bwd_sm90_smem_bytes(int hd) {
    const size_t a = hd == 64 ? bwd_g_smem<64, true>::bytes : bwd_g_smem<128, true>::bytes;
    const size_t w = hd == 64 ? bwd_ws_smem<64>::bytes : bwd_ws_smem<128>::bytes;
    return a > w ? a : w;
}
