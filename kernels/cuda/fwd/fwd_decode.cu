/* fwd_decode.cu: the decode kernel (prefix fwd_dec_): the decode tile of fwd_tiles.h (one warp,
 * 16 query rows packed from a KV head's query heads, 64-key blocks, two K/V stages) with the
 * arithmetic of fwd_sm80.cu's flash_fwd_kernel, step for step (fwd_common.cuh's mask, online
 * softmax, P packing, split and full epilogues), so both give the same bits for the same tile,
 * split count and call (kernels/cuda/tests/fwd_v3_test.c compares them).
 *
 * What differs is the code's shape, for a grid of one-warp CTAs that each run a few key blocks:
 * such a CTA runs its loop body a few times with nothing else on its SM sub-partition, so its
 * instructions are fetched cold and nothing hides their latency. The general kernel's unrolled
 * tile loads (every paged and partial-tile variant, at two sites) made it 17k SASS lines and
 * its warp waited on instruction fetch most of the time (ncu, B 1, Hkv 8, 4096 keys:
 * bench/RESULTS-2026-11-25-s6-decode.md). Here the K/V loads are short rolled loops with one
 * body for dense and whole-page tiles, Q stays in registers for the whole call (its fragments
 * are loaded once, not once per block), and each k16 step loads its K or V fragments before
 * its products, so one warp keeps several loads in flight. */
#include "kernels/cuda/fwd/fwd_common.cuh"

/* One K or V tile (64 rows x HD columns) of the warp (lane = threadIdx.x, blockDim.x = 32) into
 * the swz layout: lane copies chunk column c = lane % (HD / 8) of rows lane / (HD / 8) + STEP it
 * (load_tile's assignment for 32 threads, so sanitize_own_chunks finds its own chunks). Rows
 * outside [valid_lo, valid_hi) and columns >= head_dim are zero-filled (nothing read). Paged:
 * a page size that is a multiple of 64 holds the tile in one page (one table read), any other
 * page size gathers per row (fwd_kv_row), as load_kv_tile does. */
template <int HD>
static __device__ __noinline__ void fwd_dec_load_kv(uint32_t s_base, const uint16_t *g_base, int64_t row_stride,
                                                       int64_t page_stride, const int *pages, int page_size,
                                                       int row0, int valid_lo, int valid_hi, int head_dim) {
    constexpr int NCH = HD / 8, STEP = 32 / NCH, N = 64 / STEP;
    static_assert(32 % NCH == 0 && 64 % STEP == 0, "the tile's chunks divide among the warp's lanes");
    const int lane = (int)threadIdx.x, c = lane % NCH, r0 = lane / NCH;
    if (pages != NULL && page_size % 64 != 0) {  // rows of several pages: per-row gather
#pragma unroll 4
        for (int it = 0; it < N; ++it) {
            const int r = r0 + it * STEP, gr = row0 + r;
            const bool ok = gr >= valid_lo && gr < valid_hi && c * 8 < head_dim;
            const uint16_t *src = ok ? fwd_kv_row(g_base, row_stride, page_stride, pages, page_size, gr) + c * 8 : g_base;
            ptx_cp16(s_base + swz<HD>(r, c), src, ok ? 16 : 0);
        }
        return;
    }
    // dense, or the tile in one page: row gr at base + gr * row_stride
    const uint16_t *base = g_base;
    if (pages != NULL) base += (int64_t)pages[row0 / page_size] * page_stride - (int64_t)(row0 - row0 % page_size) * row_stride;
    const uint16_t *src = base + (int64_t)(row0 + r0) * row_stride + c * 8;
    const int64_t step = (int64_t)STEP * row_stride;
    if (row0 >= valid_lo && row0 + 64 <= valid_hi && head_dim == HD) {  // whole tile valid
#pragma unroll 4
        for (int it = 0; it < N; ++it) ptx_cp16(s_base + swz<HD>(r0 + it * STEP, c), src + it * step, 16);
        return;
    }
    const bool col_ok = c * 8 < head_dim;
#pragma unroll 4
    for (int it = 0; it < N; ++it) {
        const int r = r0 + it * STEP, gr = row0 + r;
        const bool ok = col_ok && gr >= valid_lo && gr < valid_hi;
        ptx_cp16(s_base + swz<HD>(r, c), ok ? src + it * step : g_base, ok ? 16 : 0);
    }
}

/* One warp a CTA (blockDim 32), grid (1, units, n_split or 1) as fwd_sm80.cu's decode tile:
 * unit u = the (batch, first query head) u * p.pack; split z = blockIdx.z. Shared memory:
 * Q [16][HD], K [2][64][HD], V [2][64][HD] (fwd_smem_bytes of the decode tile). */
template <int HD, bool BF16, bool NATURAL>
__global__ void __launch_bounds__(32, 3) flash_fwd_decode_kernel(const fwd_params p) {
    constexpr int BM = 16, BN = 64;
    constexpr int NT = BN / 8;   // n8 tiles of S
    constexpr int DT = HD / 8;   // n8 tiles of O
    constexpr int KQ = HD / 16;  // k16 steps of Q K^T
    constexpr int KP = BN / 16;  // k16 steps of P V
    constexpr uint32_t K_STAGE_BYTES = BN * HD * 2, V_STAGE_BYTES = BN * HD * 2;

    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = ptx_smem(smem);
    const uint32_t sK0 = sQ + BM * HD * 2;
    const uint32_t sV0 = sK0 + 2 * K_STAGE_BYTES;
    const int lane = (int)threadIdx.x;
    const int g = lane >> 2, t = lane & 3;
    const int units = p.bh_total / p.pack;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // split-KV: the combine (a programmatic dependent launch, fwd_host.cu) may be scheduled once
    // every CTA of this grid has started; it waits for this grid's completion before reading
    if (p.n_split > 0) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

    for (int u = blockIdx.y; u < units; u += gridDim.y) {
        const int bh = u * p.pack;
        const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, 0);
        if (!w.active) continue;  // CTA-uniform: a varlen sequence with no query row
        const fwd_seq &sq = w.s;
        const int kv_lo = w.kv_lo, kv_hi = w.kv_hi, n_begin = w.n_begin, n_end = w.n_end;
        const int64_t hi_first = w.hi_first, lo_last = w.lo_last;

        // ---- loads: Q, then K/V of the last visible block (blocks run last to first)
        fwd_load_q_packed<BM, HD, 32>(sQ, p, sq);
        ptx_cp_commit();
        if (n_end > n_begin) {
            fwd_dec_load_kv<HD>(sK0, sq.k_base, p.k_ss, p.k_sb, sq.pages, p.page_size, (n_end - 1) * BN, kv_lo, kv_hi,
                                p.head_dim);
            ptx_cp_commit();
            fwd_dec_load_kv<HD>(sV0, sq.v_base, p.v_ss, p.v_sb, sq.pages, p.page_size, (n_end - 1) * BN, kv_lo, kv_hi,
                                p.head_dim_v);
            ptx_cp_commit();
        }

        float acc_o[1][DT][4];
        float row_m[1][2], row_l[1][2];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[0][dt][e] = 0.0f;
        fwd_init_rows<1, true>(p, sq.h, t, row_m, row_l, g);

        // Q's A fragments, loaded once (the group of Q completes first: wait for all but K/V)
        uint32_t qa[KQ][4];
        if (n_end > n_begin) ptx_cp_wait<2>();
        else ptx_cp_wait<0>();
        __syncwarp();
        {
            const uint32_t q_row = swz_row_base<HD>(sQ, lane & 15, lane >> 4);
#pragma unroll
            for (int kk = 0; kk < KQ; ++kk) ptx_ldsm4(qa[kk], swz_at<HD>(q_row, kk * 2));
        }

        // ---- key blocks from the last to the first; block n-1's copies are issued at the top of
        // iteration n, before the wait for K(n) (the warp's reads of that stage, in iteration
        // n+1, are complete), so the first two blocks' copies fly together
        int stage = 0;
        for (int n = n_end - 1; n >= n_begin; --n, stage ^= 1) {
            const uint32_t sK = sK0 + stage * K_STAGE_BYTES, sV = sV0 + stage * V_STAGE_BYTES;
            const bool prefetch = n - 1 >= n_begin;
            if (prefetch) {
                fwd_dec_load_kv<HD>(sK0 + (stage ^ 1) * K_STAGE_BYTES, sq.k_base, p.k_ss, p.k_sb, sq.pages,
                                    p.page_size, (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                ptx_cp_commit();
                fwd_dec_load_kv<HD>(sV0 + (stage ^ 1) * V_STAGE_BYTES, sq.v_base, p.v_ss, p.v_sb, sq.pages,
                                    p.page_size, (n - 1) * BN, kv_lo, kv_hi, p.head_dim_v);
                ptx_cp_commit();
            }
            // boundary block: some key hidden from some row (tail, window, diagonal, natural
            // units): the element mask, and V's NaN/Inf guard (fwd_common.cuh: V(n) waited for,
            // each lane zeroes NaN/Inf in the chunks it copied, the warp ORs, a hit raises the flag)
            const bool boundary = NATURAL || (int64_t)n * BN + BN - 1 > hi_first || (int64_t)n * BN < lo_last ||
                                  n * BN + BN > sq.sk;
            if (boundary) {
                if (prefetch) ptx_cp_wait<2>();  // V(n) landed; K(n-1), V(n-1) may fly
                else ptx_cp_wait<0>();
                const uint32_t hit = sanitize_own_chunks<BN, HD, 32, BF16>(sV);
                if (__any_sync(0xffffffffu, hit != 0) && lane == 0) *p.nonfinite_flag = 1;
            } else {
                if (prefetch) ptx_cp_wait<3>();  // K(n) landed; V(n), K(n-1), V(n-1) may fly
                else ptx_cp_wait<1>();
            }
            __syncwarp();  // every lane's copies (and zeroed chunks) visible to the warp

            // ---- S = Q K^T (raw fp32 dot products; each k16 step's fragments before its products)
            const uint32_t k_row = swz_row_base<HD>(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
            float acc_s[1][NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_s[0][nt][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KQ; ++kk) {
                uint32_t kb[NT / 2][4];
#pragma unroll
                for (int np = 0; np < NT / 2; ++np) ptx_ldsm4(kb[np], swz_at<HD>(k_row + np * 16 * HD * 2, kk * 2));
#pragma unroll
                for (int np = 0; np < NT / 2; ++np) {
                    ptx_mma16816<BF16>(acc_s[0][2 * np], qa[kk], kb[np][0], kb[np][1]);
                    ptx_mma16816<BF16>(acc_s[0][2 * np + 1], qa[kk], kb[np][2], kb[np][3]);
                }
            }

            // ---- element mask where needed, online softmax, P in the input dtype
            const int key0 = n * BN;
            if (NATURAL || (int64_t)key0 + BN - 1 > hi_first || (int64_t)key0 < lo_last || key0 + BN > sq.sk)
                fwd_mask_scores<1, NT, NATURAL, true>(p, sq, acc_s, g, key0 + 2 * t);
            fwd_softmax_step<1, NT, DT, NATURAL>(p, acc_s, row_m, row_l, acc_o);
            uint32_t pa[1][KP][4];
            fwd_pack_p<1, KP, BF16>(acc_s, pa);

            // ---- O += P V
            if (prefetch) ptx_cp_wait<2>();  // V(n) landed
            else ptx_cp_wait<0>();
            __syncwarp();
            const uint32_t v_row = swz_row_base<HD>(sV, lane & 15, lane >> 4);
#pragma unroll
            for (int kk = 0; kk < KP; ++kk) {
                uint32_t vb[DT / 2][4];
#pragma unroll
                for (int dp = 0; dp < DT / 2; ++dp) ptx_ldsm4_t(vb[dp], swz_at<HD>(v_row + kk * 16 * HD * 2, dp * 2));
#pragma unroll
                for (int dp = 0; dp < DT / 2; ++dp) {
                    ptx_mma16816<BF16>(acc_o[0][2 * dp], pa[0][kk], vb[dp][0], vb[dp][1]);
                    ptx_mma16816<BF16>(acc_o[0][2 * dp + 1], pa[0][kk], vb[dp][2], vb[dp][3]);
                }
            }
            __syncwarp();  // this stage's reads are done before iteration n-1 refills it
        }
        ptx_cp_wait<0>();
        __syncwarp();

        // ---- epilogue: the split's partials, or O / l and LSE (staged in the Q tile)
        if (p.n_split > 0) fwd_store_partial<HD, 1, BM, true>(p, sq, bh, acc_o, row_m, row_l, 0, 0, lane);
        else fwd_store_o_lse<HD, 1, BM, BF16, NATURAL, true>(p, sq, acc_o, row_m, row_l, sQ, 0, 0, lane);
        __syncwarp();  // shared memory is reused by the next unit of this CTA
    }
}

/* The decode kernel for a padded head dim (64 or 128; NULL otherwise), a dtype and the score
 * units. Its tile, shared memory and grid are the decode tile's (fwd_decode_tiles). */
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
