/* fwd_sm90.cu: the wgmma forward kernel (sm_90a; head dims padded to 64 or 128 on an
 * sm_90 device) and its instantiations. Algorithm and arithmetic: fwd_common.cuh. */
#include "kernels/cuda/fwd/fwd_common.cuh"

// ----------------------------------------------------------------------------
// the Hopper kernel (sm_90a): the same algorithm, both products on wgmma
//
// BLOCK_M = 128 query rows in two warpgroups of 64 (a warp owns 16 rows, in the
// mma.sync C layout the shared functions above use), BLOCK_N = BN keys, HD = 64
// or 128. Q, K and V tiles use the 128-byte swizzled 64-column-block layout of
// kernels/cuda/common/gmma.h; K/V in two stages, as in the sm_80 kernel.
//   S = Q K^T   gmma_ss: A = this warpgroup's 64 Q rows, B = the K tile (both K-major)
//   O += P V    gmma_rs: A = P in registers (the fwd_pack_p fragments), B = the V tile
//               (MN-major: its rows are the k dimension)
// Element mask, online softmax, the NaN/Inf guard of V and the epilogue are the
// sm_80 kernel's code. Arithmetic: the same tensor cores (exact products, fp32
// accumulate), so the precision profile in backend.cu holds unchanged.
// One barrier per key block: K(n) and V(n) landed (they were issued a whole block
// earlier) and every warpgroup's products of the previous block are complete, so
// the other stage may be refilled.

/* Tile: fwd_tiles.h (fwd_sm90_*). */
template <int HD, int BN, bool BF16, bool NATURAL>
__global__ void __launch_bounds__(fwd_sm90_threads, fwd_sm90_minb) flash_fwd_sm90_kernel(const fwd_params p) {
    constexpr int BM = fwd_sm90_bm, THREADS = fwd_sm90_threads, WM = 16, MT = 1;
    constexpr int NT = BN / 8, DT = HD / 8, KQ = HD / 16, KP = BN / 16;
    static_assert(HD == 64 || HD == 128, "sm90 forward: HD is 64 or 128");
    static_assert(BN == 64 || BN == 128, "sm90 forward: BN is 64 or 128");
#if GMMA_ENABLED
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = (ptx_smem(smem) + 1023u) & ~1023u;  // the swizzle needs 1024-byte tiles
    const uint32_t sK0 = sQ + BM * HD * 2;
    const uint32_t sV0 = sK0 + 2 * BN * HD * 2;
    constexpr uint32_t KV_STAGE_BYTES = BN * HD * 2;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3, wg = warp >> 2;
    const int mb = p.reverse_m ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mb * BM;

    for (int bh = blockIdx.y; bh < p.bh_total; bh += gridDim.y) {
        // ---- this (batch, head): slices of Q, K, V (GQA) and the key range of the query block
        const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, m0);
        if (!w.active) continue;  // CTA-uniform: a varlen sequence with fewer rows than the grid
        const fwd_seq &sq = w.s;
        const int Sq = sq.sq;
        const uint16_t *q_base = sq.q_base, *k_base = sq.k_base, *v_base = sq.v_base;
        const int kv_lo = w.kv_lo, kv_hi = w.kv_hi, n_begin = w.n_begin, n_end = w.n_end;
        const int64_t hi_first = w.hi_first, lo_last = w.lo_last;

        // ---- issue loads: Q and K/V of the last visible block, one group
        load_tile<BM, HD, THREADS, true>(sQ, q_base, p.q_ss, m0, 0, Sq, p.head_dim);
        if (n_end > n_begin) {
            load_kv_tile<BN, HD, THREADS, true>(sK0, k_base, p.k_ss, p.k_sb, sq.pages, p.page_size, (n_end - 1) * BN,
                                                kv_lo, kv_hi, p.head_dim);
            load_kv_tile<BN, HD, THREADS, true>(sV0, v_base, p.v_ss, p.v_sb, sq.pages, p.page_size, (n_end - 1) * BN,
                                                kv_lo, kv_hi, p.head_dim);
        }
        ptx_cp_commit();

        float acc_o[MT][DT][4];
        float row_m[MT][2], row_l[MT][2];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[0][dt][e] = 0.0f;
        fwd_init_rows<MT>(p, sq.h, t, row_m, row_l);

        // ---- main loop over key blocks, from the last to the first
        int stage = 0;
        for (int n = n_end - 1; n >= n_begin; --n, stage ^= 1) {
            const uint32_t sK = sK0 + stage * KV_STAGE_BYTES, sV = sV0 + stage * KV_STAGE_BYTES;
            const bool prefetch = n - 1 >= n_begin;
            const int key0 = n * BN;
            const bool boundary = NATURAL || (int64_t)key0 + BN - 1 > hi_first || (int64_t)key0 < lo_last ||
                                  key0 + BN > sq.sk;
            ptx_cp_wait<0>();  // this thread's copies of K(n), V(n) (and Q) landed
            // NaN/Inf guard of V(n) in boundary blocks (see the sm_80 kernel)
            const uint32_t hit = boundary ? sanitize_own_chunks<BN, HD, THREADS, BF16, true>(sV) : 0u;
            gmma_fence_proxy();  // the copies (and the guard's stores) -> the tensor cores' reads
            if (boundary) {
                if (__syncthreads_or((int)hit) && tid == 0) *p.nonfinite_flag = 1;
            } else {
                __syncthreads();
            }
            if (prefetch) {
                const uint32_t off = (stage ^ 1) * KV_STAGE_BYTES;
                load_kv_tile<BN, HD, THREADS, true>(sK0 + off, k_base, p.k_ss, p.k_sb, sq.pages, p.page_size,
                                                    (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                load_kv_tile<BN, HD, THREADS, true>(sV0 + off, v_base, p.v_ss, p.v_sb, sq.pages, p.page_size,
                                                    (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                ptx_cp_commit();
            }

            // ---- S = Q K^T (raw fp32 dot products), k steps of 16 along the head dim
            float acc_s[MT][NT][4];
            gmma_fence();
#pragma unroll
            for (int kk = 0; kk < KQ; ++kk) {
                const uint64_t da = gmma_desc(sQ + gmma_kslice_offset<BM>(kk) + wg * 64 * 128, 16, 1024);
                const uint64_t db = gmma_desc(sK + gmma_kslice_offset<BN>(kk), 16, 1024);
                gmma_ss<BN, BF16, 0, 0>(acc_s[0], da, db, kk > 0);
            }
            gmma_commit();
            gmma_wait<0>();
            gmma_fence_operands(acc_s[0]);

            // ---- scores -> P (the shared code of both kernels)
            if (boundary) fwd_mask_scores<MT, NT, NATURAL>(p, sq, acc_s, m0 + warp * WM + g, key0 + 2 * t);
            fwd_softmax_step<MT, NT, DT, NATURAL>(p, acc_s, row_m, row_l, acc_o);
            uint32_t pa[MT][KP][4];
            fwd_pack_p<MT, KP, BF16>(acc_s, pa);

            // ---- O += P V, k steps of 16 keys
            gmma_fence();
#pragma unroll
            for (int kk = 0; kk < KP; ++kk)
                gmma_rs<HD, BF16, 1>(acc_o[0], pa[0][kk], gmma_desc(sV + kk * 16 * 128, BN * 128, 1024));
            gmma_commit();
            gmma_wait<0>();
            gmma_fence_operands(acc_o[0]);
        }
        ptx_cp_wait<0>();  // the Q group when no key block ran
        __syncthreads();

        // ---- epilogue (staged in the Q tile's bytes, sm_80 layout: only this warp's rows)
        if (p.n_split > 0) fwd_store_partial<HD, MT, WM>(p, sq, bh, acc_o, row_m, row_l, m0, warp, lane);
        else fwd_store_o_lse<HD, MT, WM, BF16, NATURAL>(p, sq, acc_o, row_m, row_l, sQ, m0, warp, lane);
        __syncthreads();  // smem is reused by the next (batch, head) of this CTA
    }
#else
    (void)p;
    __trap();  // never launched: the host picks this kernel on sm_90 devices only
#endif
}

// ----------------------------------------------------------------------------
// instantiations

template <int HD>
static fwd_kernel_fn pick_sm90(int bf16, int natural) {
    constexpr int BN = fwd_sm90_bn;
    if (bf16) return natural ? flash_fwd_sm90_kernel<HD, BN, true, true> : flash_fwd_sm90_kernel<HD, BN, true, false>;
    return natural ? flash_fwd_sm90_kernel<HD, BN, false, true> : flash_fwd_sm90_kernel<HD, BN, false, false>;
}

/* The kernel for padded head dim hd (64 or 128), NULL otherwise. */
fwd_kernel_fn fwd_sm90_kernel(int hd, int bf16, int natural) {
    if (hd == 128) return pick_sm90<128>(bf16, natural);
    if (hd == 64) return pick_sm90<64>(bf16, natural);
    return NULL;
}
