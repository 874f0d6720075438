/* fwd_sm80.cu: the mma.sync forward kernel (sm_80 and newer, every head dim) and its
 * instantiations per tile (fwd_tiles.h). Algorithm and arithmetic: fwd_common.cuh. */
#include "kernels/cuda/fwd/fwd_common.cuh"

// ----------------------------------------------------------------------------
// the kernel

/* CTAs per SM the register cap is sized for: as many as shared memory admits
 * (H100: 227 KB per SM for blocks), at most 3; two for 32 rows per warp (255
 * registers for the 128-float O accumulator), one for 8-warp CTAs. Bytes per CTA:
 * fwd_smem_bytes (fwd_host.cu): (BM + 2 BN) HD 2 + 2 BN HV 2. */
static constexpr int fwd_cta_bytes(int hd, int hv, int bm, int bn) { return (bm + 2 * bn) * hd * 2 + 2 * bn * hv * 2; }
static constexpr int fwd_min_blocks(int hd, int hv, int bm, int bn, int nw) {
    return nw == 1 ? 3 : nw == 8 ? 1 : (bm / nw == 32 ? 2 : ((232448 / fwd_cta_bytes(hd, hv, bm, bn)) >= 3 ? 3 : ((232448 / fwd_cta_bytes(hd, hv, bm, bn)) >= 2 ? 2 : 1)));
}

/* HD: padded head dim of Q and K (the k extent of S = Q K^T); HV: padded head dim of V and O
 * (the n extent of O += P V), HV <= HD (O is staged in the Q tile's bytes). HV == HD for equal
 * head dims; fwd_tiles.h lists the pairs with their own tile. */
template <int HD, int HV, int BM, int BN, int NW, bool BF16, bool NATURAL>
__global__ void __launch_bounds__(NW * 32, fwd_min_blocks(HD, HV, BM, BN, NW)) flash_fwd_kernel(const fwd_params p) {
    constexpr int THREADS = NW * 32;
    constexpr int WM = BM / NW;  // rows per warp
    constexpr int MT = WM / 16;  // m16 tiles per warp
    constexpr int NT = BN / 8;   // n8 tiles of S per warp
    constexpr int DT = HV / 8;   // n8 tiles of O per warp
    constexpr int KQ = HD / 16;  // k16 steps of Q K^T
    constexpr int KP = BN / 16;  // k16 steps of P V
    static_assert(WM == 16 || WM == 32, "a warp owns 16 or 32 rows");
    static_assert(NT % 2 == 0 && DT % 2 == 0, "tiles are loaded in pairs");
    static_assert(HV <= HD, "O is staged in the Q tile");

    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = ptx_smem(smem);
    const uint32_t sK0 = sQ + BM * HD * 2;
    const uint32_t sV0 = sK0 + 2 * BN * HD * 2;
    constexpr uint32_t K_STAGE_BYTES = BN * HD * 2, V_STAGE_BYTES = BN * HV * 2;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;  // mma fragment row group, thread in group
    const int mb = p.reverse_m ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mb * BM;
    constexpr bool natural = NATURAL;  // additive mask or scale <= 0: natural units
    // The decode tile packs p.pack query heads of one KV head into its rows (fwd_row_of): one
    // CTA streams each K/V block once for all of them. Its grid has one query block (m0 = 0).
    constexpr bool PACK = NW == 1 && BM == 16;
    const int units = PACK ? p.bh_total / p.pack : p.bh_total;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // split-KV: the combine (launched as a programmatic dependent, fwd_host.cu) may be scheduled
    // once every CTA of this grid has started; it waits for this grid's completion before reading
    if (p.n_split > 0) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

    for (int u = blockIdx.y; u < units; u += gridDim.y) {
        const int bh = PACK ? u * p.pack : u;  // the (batch, first query head) of this CTA
        // ---- this (batch, head): slices of Q, K, V (GQA) and the key range of the query block
        const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, m0);
        if (!w.active) continue;  // CTA-uniform: a varlen sequence with fewer rows than the grid
        const fwd_seq &sq = w.s;
        const int Sq = sq.sq;
        const uint16_t *q_base = sq.q_base, *k_base = sq.k_base, *v_base = sq.v_base;
        const int kv_lo = w.kv_lo, kv_hi = w.kv_hi, n_begin = w.n_begin, n_end = w.n_end;
        const int64_t hi_first = w.hi_first, lo_last = w.lo_last;

        // ---- issue loads: Q, then K/V of the last visible block (blocks run last to first)
        if (PACK) fwd_load_q_packed<BM, HD, THREADS>(sQ, p, sq);
        else load_tile<BM, HD, THREADS>(sQ, q_base, p.q_ss, m0, 0, Sq, p.head_dim);
        ptx_cp_commit();
        if (n_end > n_begin) {
            load_kv_tile<BN, HD, THREADS>(sK0, k_base, p.k_ss, p.k_sb, sq.pages, p.page_size, (n_end - 1) * BN, kv_lo,
                                          kv_hi, p.head_dim);
            ptx_cp_commit();
            load_kv_tile<BN, HV, THREADS>(sV0, v_base, p.v_ss, p.v_sb, sq.pages, p.page_size, (n_end - 1) * BN, kv_lo,
                                          kv_hi, p.head_dim_v);
            ptx_cp_commit();
        }

        float acc_o[MT][DT][4];
        float row_m[MT][2], row_l[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.0f;
        }
        fwd_init_rows<MT, PACK>(p, sq.h, t, row_m, row_l, m0 + warp * WM + g);

        // ---- main loop over key blocks, from the last to the first. One warp (the decode tile):
        // block n-1's copies are issued at the top of iteration n, before the wait for K(n) (the
        // warp's own reads of that stage, in iteration n+1, are complete when it gets here), so
        // the first two blocks' copies fly together and every later prefetch starts earlier;
        // more warps: after the barrier that ends every warp's use of the other stage.
        constexpr bool EARLY = NW == 1;
        int stage = 0;
        for (int n = n_end - 1; n >= n_begin; --n, stage ^= 1) {
            const uint32_t sK = opaque(sK0 + stage * K_STAGE_BYTES), sV = opaque(sV0 + stage * V_STAGE_BYTES);
            const bool prefetch = n - 1 >= n_begin;
            if (EARLY && prefetch) {
                load_kv_tile<BN, HD, THREADS>(sK0 + (stage ^ 1) * K_STAGE_BYTES, k_base, p.k_ss, p.k_sb, sq.pages,
                                              p.page_size, (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                ptx_cp_commit();
                load_kv_tile<BN, HV, THREADS>(sV0 + (stage ^ 1) * V_STAGE_BYTES, v_base, p.v_ss, p.v_sb, sq.pages,
                                              p.page_size, (n - 1) * BN, kv_lo, kv_hi, p.head_dim_v);
                ptx_cp_commit();
            }
            // boundary block: some key of it hidden from some row of the CTA
            // (diagonal, window edge, tail, additive mask): needs the element mask
            const bool boundary = natural || (int64_t)n * BN + BN - 1 > hi_first || (int64_t)n * BN < lo_last ||
                                  n * BN + BN > sq.sk;
            // One barrier: K(n) is visible to all, and every warp has finished the
            // previous iteration, so its stage (the other one) may be refilled now.
            if (boundary) {
                // NaN/Inf in V(n) would reach a row it is hidden from as 0 * NaN:
                // wait for V(n) too, each thread tests the V chunks it copied and
                // zeroes NaN/Inf in place, the barrier ORs the result, and a hit
                // raises the call's flag (the host then adds the exact IEEE
                // contribution, flash_fwd_fix_nonfinite_v). Interior blocks need
                // no test. Done here, before S = Q K^T, where few registers live.
                if (EARLY && prefetch) ptx_cp_wait<2>();  // V(n) landed; K(n-1), V(n-1) may fly
                else ptx_cp_wait<0>();
                if (__syncthreads_or((int)sanitize_own_chunks<BN, HV, THREADS, BF16>(sV)) && tid == 0)
                    *p.nonfinite_flag = 1;
            } else {
                if (EARLY && prefetch) ptx_cp_wait<3>();  // K(n) (and Q) landed; V(n), K(n-1), V(n-1) may fly
                else ptx_cp_wait<1>();                    // K(n) (and Q) landed; V(n) may fly
                __syncthreads();
            }
            if (!EARLY && prefetch) {
                load_kv_tile<BN, HD, THREADS>(sK0 + (stage ^ 1) * K_STAGE_BYTES, k_base, p.k_ss, p.k_sb, sq.pages,
                                              p.page_size, (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                ptx_cp_commit();
                load_kv_tile<BN, HV, THREADS>(sV0 + (stage ^ 1) * V_STAGE_BYTES, v_base, p.v_ss, p.v_sb, sq.pages,
                                              p.page_size, (n - 1) * BN, kv_lo, kv_hi, p.head_dim_v);
                ptx_cp_commit();
            }

            // ---- S = Q K^T (raw fp32 dot products)
            // per-lane fragment row bases (ldmatrix row = lane & 15 for A and V^T,
            // keys (lane & 7) + 8 (lane >> 4) for K; the lane bit picks the chunk)
            const uint32_t q_row = swz_row_base<HD>(opaque(sQ), warp * WM + (lane & 15), lane >> 4);
            const uint32_t k_row = swz_row_base<HD>(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
            float acc_s[MT][NT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = 0.0f;
#pragma unroll fwd_qk_unroll
            for (int kk = 0; kk < KQ; ++kk) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    ptx_ldsm4(qa[mt], swz_at<HD>(q_row + mt * 16 * HD * 2, kk * 2));
#pragma unroll
                for (int np = 0; np < NT / 2; ++np) {
                    uint32_t kb[4];
                    ptx_ldsm4(kb, swz_at<HD>(k_row + np * 16 * HD * 2, kk * 2));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        ptx_mma16816<BF16>(acc_s[mt][2 * np], qa[mt], kb[0], kb[1]);
                        ptx_mma16816<BF16>(acc_s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
                    }
                }
            }


            // ---- scores: element mask where needed (tail, diagonal, window, additive mask)
            // (the same test as `boundary`, recomputed: one register less across Q K^T)
            const int key0 = (int)opaque((uint32_t)n) * BN;
            if (NATURAL || (int64_t)key0 + BN - 1 > hi_first || (int64_t)key0 < lo_last || key0 + BN > sq.sk)
                fwd_mask_scores<MT, NT, NATURAL, PACK>(p, sq, acc_s, m0 + warp * WM + g, key0 + 2 * t);

            // ---- online softmax: new row max, rescale O and l, p = 2^(...)
            fwd_softmax_step<MT, NT, DT, NATURAL>(p, acc_s, row_m, row_l, acc_o);

            // ---- P in the input dtype, laid out as mma A fragments
            uint32_t pa[MT][KP][4];
            fwd_pack_p<MT, KP, BF16>(acc_s, pa);

            // ---- O += P V
            const uint32_t v_row = swz_row_base<HV>(sV, lane & 15, lane >> 4);
            if (prefetch) ptx_cp_wait<2>();  // V(n) landed
            else ptx_cp_wait<0>();
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < KP; ++kk)
#pragma unroll
                for (int dp = 0; dp < DT / 2; ++dp) {
                    uint32_t vb[4];
                    ptx_ldsm4_t(vb, swz_at<HV>(v_row + kk * 16 * HV * 2, dp * 2));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        ptx_mma16816<BF16>(acc_o[mt][2 * dp], pa[mt][kk], vb[0], vb[1]);
                        ptx_mma16816<BF16>(acc_o[mt][2 * dp + 1], pa[mt][kk], vb[2], vb[3]);
                    }
                }
        }
        ptx_cp_wait<0>();  // the Q group when no key block ran
        __syncthreads();

        // ---- epilogue: O / l rounded to the dtype, staged in this warp's Q rows, then stored
        if (p.n_split > 0) fwd_store_partial<HV, MT, WM, PACK>(p, sq, bh, acc_o, row_m, row_l, m0, warp, lane);
        else fwd_store_o_lse<HV, MT, WM, BF16, NATURAL, PACK>(p, sq, acc_o, row_m, row_l, sQ, m0, warp, lane);
        __syncthreads();  // smem is reused by the next (batch, head) of this CTA
    }
}

// ----------------------------------------------------------------------------
// instantiations

template <int HD, int HV, int BM, int BN, int NW>
static fwd_kernel_fn pick_variant(int bf16, int natural) {
    if (bf16) return natural ? flash_fwd_kernel<HD, HV, BM, BN, NW, true, true> : flash_fwd_kernel<HD, HV, BM, BN, NW, true, false>;
    return natural ? flash_fwd_kernel<HD, HV, BM, BN, NW, false, true> : flash_fwd_kernel<HD, HV, BM, BN, NW, false, false>;
}
template <int HD, int BM, int BN, int NW>
static fwd_kernel_fn pick_variant(int bf16, int natural) {
    return pick_variant<HD, HD, BM, BN, NW>(bf16, natural);
}

/* The kernel for tile c (a row of fwd_tiles, fwd_decode_tiles or fwd_pair_tiles), NULL for a
 * tile without one. */
fwd_kernel_fn fwd_sm80_kernel(const fwd_tile *c, int bf16, int natural) {
    if (c->hv != 0 && c->hv != c->hd) {  // fwd_pair_tiles
        if (c->hd == 192 && c->hv == 128 && c->bm == 128 && c->bn == 64 && c->nw == 8)
            return pick_variant<192, 128, 128, 64, 8>(bf16, natural);
        if (c->hd == 192 && c->hv == 128 && c->bm == 64 && c->bn == 64 && c->nw == 4)
            return pick_variant<192, 128, 64, 64, 4>(bf16, natural);
        return NULL;
    }
    if (c->bm == 16 && c->bn == 64 && c->nw == 1) {  // fwd_decode_tiles
        switch (c->hd) {
        case 64: return pick_variant<64, 16, 64, 1>(bf16, natural);
        case 128: return pick_variant<128, 16, 64, 1>(bf16, natural);
        }
        return NULL;
    }
    if (c->bm == 128 && c->bn == 32 && c->nw == 4) {
        switch (c->hd) {
        case 64: return pick_variant<64, 128, 32, 4>(bf16, natural);
        case 96: return pick_variant<96, 128, 32, 4>(bf16, natural);
        case 128: return pick_variant<128, 128, 32, 4>(bf16, natural);
        }
    } else if (c->bm == 128 && c->hd == 64 && c->bn == 128) {
        return pick_variant<64, 128, 128, 4>(bf16, natural);
    } else if (c->bm == 128 && c->hd == 32 && c->bn == 64) {
        return pick_variant<32, 128, 64, 4>(bf16, natural);
    } else if (c->bm == 128) {
        switch (c->hd) {
        case 32: return pick_variant<32, 128, 128, 4>(bf16, natural);
        case 64: return pick_variant<64, 128, 64, 4>(bf16, natural);
        case 96: return pick_variant<96, 128, 64, 4>(bf16, natural);
        case 128: return pick_variant<128, 128, 64, 4>(bf16, natural);
        case 192: return pick_variant<192, 128, 32, 8>(bf16, natural);
        case 256: return pick_variant<256, 128, 32, 8>(bf16, natural);
        }
    } else {
        switch (c->hd) {
        case 32: return pick_variant<32, 64, 128, 4>(bf16, natural);
        case 64: return pick_variant<64, 64, 64, 4>(bf16, natural);
        case 96: return pick_variant<96, 64, 64, 4>(bf16, natural);
        case 128: return pick_variant<128, 64, 64, 4>(bf16, natural);
        case 192: return pick_variant<192, 64, 32, 4>(bf16, natural);
        case 256: return pick_variant<256, 64, 32, 4>(bf16, natural);
        }
    }
    return NULL;
}

