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

// ----------------------------------------------------------------------------
// the split combine inside a thread block cluster (sm_90: distributed shared memory)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
static __device__ __forceinline__ void fwd_dec_cluster_sync(void) {
    // release this CTA's shared-memory writes to the cluster, acquire the others'
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* The address of the same shared-memory byte in the cluster's CTA `rank`. */
static __device__ __forceinline__ uint32_t fwd_dec_map(uint32_t addr, int rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
static __device__ __forceinline__ float2 fwd_dec_ld2(uint32_t cluster_addr) {
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(cluster_addr));
    return v;
}
#endif

/* Splits combined in the cluster, fwd_dec_cluster_splits at most (one CTA a split). */
static constexpr int fwd_dec_cluster_splits = 16;

/* The cluster epilogue (CLUSTER kernels: the n_split CTAs of a unit form one cluster along z,
 * rank = blockIdx.z = the split). Each CTA stages its split's partials (acc, m, l: what
 * fwd_store_partial writes to global memory) in its own K stages, then the cluster's CTAs
 * combine them through distributed shared memory with flash_fwd_combine's arithmetic (fwd_host.cu:
 * m = max_z m_z, alpha_z = fwd_split_alpha, l and acc summed in split order z = 0, 1, ... with
 * RN multiplies and adds, O = RN_dtype(acc / l), LSE = fwd_split_lse), so the result is that of
 * the split kernel and the combine kernel, bitwise. Work: one warp task per (query row, 64
 * columns); lane z reads split z's (m, l), each lane its two columns of every split. */
template <int HD, bool BF16, bool NATURAL>
static __device__ __forceinline__ void fwd_dec_cluster_combine(const fwd_params &p, const fwd_seq &sq,
                                                               const float (&acc_o)[1][HD / 8][4],
                                                               const float (&row_m)[1][2], const float (&row_l)[1][2],
                                                               uint32_t sP, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int BM = 16, PS = HD + 4;  // staged rows of PS floats (+4: the 8 rows of a store hit distinct banks)
    constexpr int DT = HD / 8, CH = HD / 64;
    const int g = lane >> 2, t = lane & 3;
    const uint32_t sML = sP + BM * PS * 4;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        float l = row_l[0][hf];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int r = g + hf * 8;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sP + (uint32_t)(r * PS + dt * 8 + 2 * t) * 4),
                         "f"(acc_o[0][dt][hf * 2]), "f"(acc_o[0][dt][hf * 2 + 1]) : "memory");
        if (t == 0)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sML + (uint32_t)r * 8), "f"(row_m[0][hf]), "f"(l)
                         : "memory");
    }
    fwd_dec_cluster_sync();
    const int nz = p.n_split, rank = (int)blockIdx.z;
    const int tasks = p.pack * p.seqlen_q * CH;
    for (int task = rank; task < tasks; task += nz) {
        const int r = task / CH, d = (task % CH) * 64 + 2 * lane;
        int dh;
        const int i = fwd_row_of<true>(p, 0, r, &dh);
        if (i >= sq.sq) continue;  // warp-uniform: a row past the pack or the sequence
        // every load first (none depends on another): split lane's (m, l), this lane's columns of every split
        const float2 ml = lane < nz ? fwd_dec_ld2(fwd_dec_map(sML + (uint32_t)r * 8, lane)) : make_float2(-INFINITY, 0.0f);
        float2 v[fwd_dec_cluster_splits];
#pragma unroll
        for (int z = 0; z < fwd_dec_cluster_splits; ++z)
            v[z] = z < nz ? fwd_dec_ld2(fwd_dec_map(sP + (uint32_t)(r * PS + d) * 4, z)) : make_float2(0.0f, 0.0f);
        float m = ml.x;  // max: exact in any order
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float m_scaled = m == -INFINITY ? 0.0f : m * p.scale_log2;
        const float alpha = fwd_split_alpha(ml.x, m, m_scaled, p.scale_log2, NATURAL);
        float l = 0.0f, a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int z = 0; z < fwd_dec_cluster_splits; ++z) {  // the sums, in split order
            if (z >= nz) break;
            const float az = __shfl_sync(0xffffffffu, alpha, z), lz = __shfl_sync(0xffffffffu, ml.y, z);
            l = __fadd_rn(l, __fmul_rn(lz, az));
            a0 = __fadd_rn(a0, __fmul_rn(v[z].x, az));
            a1 = __fadd_rn(a1, __fmul_rn(v[z].y, az));
        }
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        if (d < p.head_dim_v) {
            uint16_t *orow = p.o + (p.cu_q != NULL ? (int64_t)sq.q_tok0 * p.o_ss : (int64_t)sq.b * p.o_sb) +
                             (int64_t)i * p.o_ss + (int64_t)(sq.h + dh) * p.o_sh;
            *(uint32_t *)(orow + d) = ptx_pack2<BF16>(a0 * inv, a1 * inv);
        }
        if (d == 0) {
            const int64_t lse_b = p.cu_q != NULL ? (int64_t)sq.q_tok0 * p.lse_ss : (int64_t)sq.b * p.lse_sb;
            p.lse[lse_b + (int64_t)(sq.h + dh) * p.lse_sh + (int64_t)i * p.lse_ss] = fwd_split_lse(m, l, p.scale, NATURAL);
        }
    }
    fwd_dec_cluster_sync();  // no CTA leaves or restages while another reads its partials
#else
    __trap();  // launched on sm_90 only (fwd_host.cu)
#endif
}

// ----------------------------------------------------------------------------
// the kernel

/* One warp a CTA (blockDim 32), grid (1, units, n_split or 1) as fwd_sm80.cu's decode tile:
 * unit u = the (batch, first query head) u * p.pack; split z = blockIdx.z. CLUSTER: launched
 * with clusters of (1, 1, n_split) (n_split <= fwd_dec_cluster_splits), the splits combined in
 * the cluster (fwd_dec_cluster_combine); else the partials go to global memory for
 * flash_fwd_combine (n_split > 0), or O and LSE are stored (no split). Shared memory:
 * Q [16][HD], K [2][64][HD], V [2][64][HD] (fwd_smem_bytes of the decode tile). */
template <int HD, bool BF16, bool NATURAL, bool CLUSTER>
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
    if (!CLUSTER && p.n_split > 0) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

    for (int u = blockIdx.y; u < units; u += gridDim.y) {
        const int bh = u * p.pack;
        const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, 0);
        if (!w.active) continue;  // cluster-uniform (the same unit): a varlen sequence with no query row
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
        if (CLUSTER) fwd_dec_cluster_combine<HD, BF16, NATURAL>(p, sq, acc_o, row_m, row_l, sK0, lane);
        else if (p.n_split > 0) fwd_store_partial<HD, 1, BM, true>(p, sq, bh, acc_o, row_m, row_l, 0, 0, lane);
        else fwd_store_o_lse<HD, 1, BM, BF16, NATURAL, true>(p, sq, acc_o, row_m, row_l, sQ, 0, 0, lane);
        __syncwarp();  // shared memory is reused by the next unit of this CTA
    }
}

template <int HD, bool CLUSTER>
static fwd_kernel_fn fwd_dec_pick(int bf16, int natural) {
    if (bf16) return natural ? flash_fwd_decode_kernel<HD, true, true, CLUSTER> : flash_fwd_decode_kernel<HD, true, false, CLUSTER>;
    return natural ? flash_fwd_decode_kernel<HD, false, true, CLUSTER> : flash_fwd_decode_kernel<HD, false, false, CLUSTER>;
}

/* The decode kernel for a padded head dim (64 or 128; NULL otherwise), a dtype and the score
 * units; cluster: the one that combines its splits in a cluster (sm_90 only). Its tile, shared
 * memory and grid are the decode tile's (fwd_decode_tiles). */
fwd_kernel_fn fwd_decode_kernel(int hd, int bf16, int natural, int cluster) {
    if (hd == 64) return cluster ? fwd_dec_pick<64, true>(bf16, natural) : fwd_dec_pick<64, false>(bf16, natural);
    if (hd == 128) return cluster ? fwd_dec_pick<128, true>(bf16, natural) : fwd_dec_pick<128, false>(bf16, natural);
    return NULL;
}
int fwd_decode_cluster_max(void) { return fwd_dec_cluster_splits; }
