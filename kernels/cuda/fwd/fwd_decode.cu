/* fwd_decode.cu: the decode kernel (Sq <= 16; fwd_tiles.h fwd_decode_tiles: one warp, 16 query
 * rows, 64-key blocks; GQA-packed rows, split-KV partials). The mma.sync kernel of fwd_sm80.cu
 * restricted to that tile, with a ring of fwd_decode_stages K/V stages instead of two: the
 * copies of the next fwd_decode_stages - 1 blocks are in flight while a block is computed
 * (decode streams K/V once and does little arithmetic per byte, so bytes in flight decide its
 * speed). Per element the same operations in the same order as flash_fwd_kernel: only the
 * copies run further ahead. Algorithm and arithmetic: fwd_common.cuh. */
#include "kernels/cuda/fwd/fwd_common.cuh"

static constexpr int fwd_dec_bm = 16, fwd_dec_bn = 64, fwd_dec_threads = 32;  // fwd_decode_tiles
/* K/V stages of the ring: the copies of fwd_decode_stages - 1 blocks fly while one is computed.
 * 3 at head dim 128: 100 KB of shared memory, two CTAs an SM. */
static constexpr int fwd_decode_stages = 3;

/* CTAs per SM the register cap is sized for: as many as the shared memory of the ring admits
 * (227 KB an SM on the H100), at most 4. */
static constexpr int fwd_dec_min_blocks(int hd) {
    return (232448 / ((fwd_dec_bm + 2 * fwd_decode_stages * fwd_dec_bn) * hd * 2)) >= 4
               ? 4
               : ((232448 / ((fwd_dec_bm + 2 * fwd_decode_stages * fwd_dec_bn) * hd * 2)) >= 2 ? 2 : 1);
}

/* Key block n needs the element mask (a key of it hidden from some row of the CTA: diagonal,
 * window edge, tail) or natural units (additive mask, softcap, sinks): flash_fwd_kernel's test. */
template <bool NATURAL>
static __device__ __forceinline__ bool fwd_dec_boundary(int n, int64_t hi_first, int64_t lo_last, int sk) {
    return NATURAL || (int64_t)n * fwd_dec_bn + fwd_dec_bn - 1 > hi_first || (int64_t)n * fwd_dec_bn < lo_last ||
           n * fwd_dec_bn + fwd_dec_bn > sk;
}

/* Copies of key block n's K and V tile (two commit groups). page >= 0: the block lies in that
 * page of the pool (paged K/V, a page size that is a multiple of the block; the caller read the
 * table entry an iteration ahead, so no copy waits on the table); else load_kv_tile's
 * addressing (dense, packed, or per-row gathers, which read the table themselves). */
template <int HD>
static __device__ __forceinline__ void fwd_dec_load_block(uint32_t sK, uint32_t sV, const fwd_params &p,
                                                          const fwd_seq &sq, int n, int page, int kv_lo, int kv_hi) {
    const int row0 = n * fwd_dec_bn;
    if (page >= 0) {
        const int64_t slot = (int64_t)(row0 % p.page_size) - row0;  // the tile's first row in its page, minus row0
        load_tile<fwd_dec_bn, HD, fwd_dec_threads>(sK, sq.k_base + (int64_t)page * p.k_sb + slot * p.k_ss, p.k_ss, row0,
                                                   kv_lo, kv_hi, p.head_dim);
        ptx_cp_commit();
        load_tile<fwd_dec_bn, HD, fwd_dec_threads>(sV, sq.v_base + (int64_t)page * p.v_sb + slot * p.v_ss, p.v_ss, row0,
                                                   kv_lo, kv_hi, p.head_dim);
        ptx_cp_commit();
        return;
    }
    load_kv_tile<fwd_dec_bn, HD, fwd_dec_threads>(sK, sq.k_base, p.k_ss, p.k_sb, sq.pages, p.page_size, row0, kv_lo,
                                                  kv_hi, p.head_dim);
    ptx_cp_commit();
    load_kv_tile<fwd_dec_bn, HD, fwd_dec_threads>(sV, sq.v_base, p.v_ss, p.v_sb, sq.pages, p.page_size, row0, kv_lo,
                                                  kv_hi, p.head_dim);
    ptx_cp_commit();
}

template <int HD, bool BF16, bool NATURAL>
__global__ void __launch_bounds__(fwd_dec_threads, fwd_dec_min_blocks(HD)) flash_fwd_decode_kernel(const fwd_params p) {
    constexpr int BM = fwd_dec_bm, BN = fwd_dec_bn, THREADS = fwd_dec_threads, S = fwd_decode_stages;
    constexpr int MT = 1, WM = 16;  // one warp, one m16 tile
    constexpr int NT = BN / 8;      // n8 tiles of S
    constexpr int DT = HD / 8;      // n8 tiles of O
    constexpr int KQ = HD / 16;     // k16 steps of Q K^T
    constexpr int KP = BN / 16;     // k16 steps of P V
    static_assert(S >= 2, "a ring of at least two stages");

    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = ptx_smem(smem);
    const uint32_t sK0 = sQ + BM * HD * 2;
    const uint32_t sV0 = sK0 + S * BN * HD * 2;
    constexpr uint32_t KV_STAGE_BYTES = BN * HD * 2;

    const int tid = threadIdx.x, warp = 0, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int units = p.bh_total / p.pack;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // split-KV: the combine (launched as a programmatic dependent, fwd_host.cu) may be scheduled
    // once every CTA of this grid has started; it waits for this grid's completion before reading
    if (p.n_split > 0) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

    for (int u = blockIdx.y; u < units; u += gridDim.y) {
        const int bh = u * p.pack;  // the (batch, first query head) of this CTA
        const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, 0);
        if (!w.active) continue;  // CTA-uniform
        const fwd_seq &sq = w.s;
        const int kv_lo = w.kv_lo, kv_hi = w.kv_hi, n_begin = w.n_begin, n_end = w.n_end;
        const int64_t hi_first = w.hi_first, lo_last = w.lo_last;

        // ---- commit groups, in order: Q; then K and V of each block, last block first, S - 1
        // blocks ahead (a group past the first block is empty: the wait counts stay fixed)
        fwd_load_q_packed<BM, HD, THREADS>(sQ, p, sq);
        ptx_cp_commit();
#pragma unroll 1  // unrolled, its addresses stay live into the key loop (spills)
        for (int x = 0; x < S - 1; ++x) {
            const int n = n_end - 1 - x;
            if (n >= n_begin) fwd_dec_load_block<HD>(sK0 + x * KV_STAGE_BYTES, sV0 + x * KV_STAGE_BYTES, p, sq, n, -1, kv_lo, kv_hi);
            else ptx_cp_commit(), ptx_cp_commit();
        }
        // whole tiles in pages: the table entry of the next block to copy, read an iteration ahead
        const bool whole_pages = sq.pages != NULL && p.page_size % BN == 0;  // CTA-uniform
        int page_next = whole_pages && n_end - S >= n_begin ? sq.pages[(n_end - S) * BN / p.page_size] : -1;

        float acc_o[MT][DT][4];
        float row_m[MT][2], row_l[MT][2];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[0][dt][e] = 0.0f;
        fwd_init_rows<MT, true>(p, sq.h, t, row_m, row_l, g);

        // ---- key blocks from the last to the first; block x = n_end - 1 - n sits in stage x % S
        int stage = 0;
        for (int n = n_end - 1; n >= n_begin; --n) {
            const uint32_t sK = opaque(sK0 + stage * KV_STAGE_BYTES), sV = opaque(sV0 + stage * KV_STAGE_BYTES);
            const bool boundary = fwd_dec_boundary<NATURAL>(n, hi_first, lo_last, sq.sk);
            // pending before this iteration's copies: K(n), V(n), then 2 (S - 2) groups of the
            // blocks ahead. Boundary block: wait for V(n) too and zero NaN/Inf in it (see
            // flash_fwd_kernel); else for K(n) only.
            if (boundary) {
                ptx_cp_wait<2 * (S - 2)>();
                if (__syncthreads_or((int)sanitize_own_chunks<BN, HD, THREADS, BF16>(sV)) && tid == 0)
                    *p.nonfinite_flag = 1;
            } else {
                ptx_cp_wait<2 * (S - 2) + 1>();
                __syncthreads();
            }
            // copies of block n - (S - 1) into the stage block n + 1 used (its reads are done:
            // the barrier above); empty groups past the first block
            {
                // opaque: no strength reduction of the per-chunk source addresses across the loop
                const int nn = (int)opaque((uint32_t)(n - (S - 1)));
                const uint32_t off = (uint32_t)((stage + S - 1) % S) * KV_STAGE_BYTES;
                if (nn >= n_begin) fwd_dec_load_block<HD>(sK0 + off, sV0 + off, p, sq, nn, page_next, kv_lo, kv_hi);
                else ptx_cp_commit(), ptx_cp_commit();
                if (whole_pages) page_next = nn - 1 >= n_begin ? sq.pages[(nn - 1) * BN / p.page_size] : -1;
            }

            // ---- S = Q K^T (raw fp32 dot products), as flash_fwd_kernel
            const uint32_t q_row = swz_row_base<HD>(opaque(sQ), lane & 15, lane >> 4);
            const uint32_t k_row = swz_row_base<HD>(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
            float acc_s[MT][NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_s[0][nt][e] = 0.0f;
#pragma unroll fwd_qk_unroll
            for (int kk = 0; kk < KQ; ++kk) {
                uint32_t qa[4];
                ptx_ldsm4(qa, swz_at<HD>(q_row, kk * 2));
#pragma unroll
                for (int np = 0; np < NT / 2; ++np) {
                    uint32_t kb[4];
                    ptx_ldsm4(kb, swz_at<HD>(k_row + np * 16 * HD * 2, kk * 2));
                    ptx_mma16816<BF16>(acc_s[0][2 * np], qa, kb[0], kb[1]);
                    ptx_mma16816<BF16>(acc_s[0][2 * np + 1], qa, kb[2], kb[3]);
                }
            }

            // ---- scores: element mask where needed; online softmax; P in the input dtype
            const int key0 = (int)opaque((uint32_t)n) * BN;
            if (fwd_dec_boundary<NATURAL>(key0 / BN, hi_first, lo_last, sq.sk))
                fwd_mask_scores<MT, NT, NATURAL, true>(p, sq, acc_s, g, key0 + 2 * t);
            fwd_softmax_step<MT, NT, DT, NATURAL>(p, acc_s, row_m, row_l, acc_o);
            uint32_t pa[MT][KP][4];
            fwd_pack_p<MT, KP, BF16>(acc_s, pa);

            // ---- O += P V; pending after V(n): the 2 (S - 1) groups of the blocks ahead
            const uint32_t v_row = swz_row_base<HD>(sV, lane & 15, lane >> 4);
            ptx_cp_wait<2 * (S - 1)>();
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < KP; ++kk)
#pragma unroll
                for (int dp = 0; dp < DT / 2; ++dp) {
                    uint32_t vb[4];
                    ptx_ldsm4_t(vb, swz_at<HD>(v_row + kk * 16 * HD * 2, dp * 2));
                    ptx_mma16816<BF16>(acc_o[0][2 * dp], pa[0][kk], vb[0], vb[1]);
                    ptx_mma16816<BF16>(acc_o[0][2 * dp + 1], pa[0][kk], vb[2], vb[3]);
                }
            stage = stage == S - 1 ? 0 : stage + 1;
        }
        ptx_cp_wait<0>();  // Q and the empty groups when no key block ran
        __syncthreads();

        if (p.n_split > 0) fwd_store_partial<HD, MT, WM, true>(p, sq, bh, acc_o, row_m, row_l, 0, warp, lane);
        else fwd_store_o_lse<HD, MT, WM, BF16, NATURAL, true>(p, sq, acc_o, row_m, row_l, sQ, 0, warp, lane);
        __syncthreads();  // smem is reused by the next unit of this CTA
    }
}

/* Dynamic shared memory of the decode kernel at padded head dim hd: Q and the K/V ring. */
size_t fwd_decode_smem_bytes(int hd) {
    return (size_t)(fwd_dec_bm + 2 * fwd_decode_stages * fwd_dec_bn) * (size_t)hd * 2;
}

/* The decode kernel for padded head dim hd (64 or 128), NULL for another. */
fwd_kernel_fn fwd_decode_kernel(int hd, int bf16, int natural) {
    if (hd == 64) {
        if (bf16) return natural ? flash_fwd_decode_kernel<64, true, true> : flash_fwd_decode_kernel<64, true, false>;
        return natural ? flash_fwd_decode_kernel<64, false, true> : flash_fwd_decode_kernel<64, false, false>;
    }
    if (hd == 128) {
        if (bf16) return natural ? flash_fwd_decode_kernel<128, true, true> : flash_fwd_decode_kernel<128, true, false>;
        return natural ? flash_fwd_decode_kernel<128, false, true> : flash_fwd_decode_kernel<128, false, false>;
    }
    return NULL;
}
