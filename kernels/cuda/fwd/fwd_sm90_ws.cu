/* fwd_sm90_ws.cu: the warp-specialized wgmma forward (sm_90a, padded head dims 64 and 128; prefix
 * fwd_ws_). Algorithm and arithmetic: fwd_common.cuh (the element mask, the online softmax, the
 * P rounding and the epilogue are its shared steps, unchanged); what differs from fwd_sm90.cu is
 * who moves the data and when each warpgroup issues its products.
 *
 * A CTA walks tiles of 128 query rows of one (batch, query head), key blocks of 128 (fwd_ws_tile_of,
 * fwd_ws_paired_tile_of: persistent, one CTA per SM, for equal sequence lengths); the producer
 * loads the next tile's Q (a second Q slot at head dim 64) and K/V while the consumers finish
 * the last one.
 * CTA = 3 warpgroups:
 *   warpgroup 0 (producer, 40 registers a thread after setmaxnreg): warp 0 only. Lane 0 loads
 *     the Q tiles and, block by block, K and V into a ring of fwd_ws_stages_of(HD) stages with tensor-map
 *     copies (cp.async.bulk.tensor, 128-byte swizzle: the layout of common/gmma.h), each stage
 *     guarded by a "full" mbarrier (copy bytes landed) and an "empty" one (the 8 consumer warps
 *     are done reading it).
 *   warpgroups 1, 2 (consumers, 232 registers): 64 query rows each, as in fwd_sm90.cu:
 *     S = Q K^T by gmma_ss, P in registers (fwd_pack_p), O += P V by gmma_rs.
 * Ping-pong: each consumer warpgroup issues its products of block n (S = Q K(n)^T, then
 * O += P(n+1) V(n+1) of the previous block) between a bar.sync on its own named barrier and a
 * bar.arrive on the other's. The two warpgroups thus take turns on the tensor cores, and one's
 * softmax runs while the other's products do. Inside a warpgroup the softmax of block n follows
 * the completion of both its products (FA3's intra-warpgroup overlap, the softmax beside its own
 * P V, measured no faster here: bench/RESULTS-2026-11-25-s6-fwd.md). Deferring P V by one block
 * changes no arithmetic: O still receives, in order, the rescale by alpha(n+1), the
 * P(n+1) V(n+1) sum, the rescale by alpha(n), ... (same operations, same order).
 * The key blocks after a tile's first run in three loops of one step: the blocks holding a key
 * past the first row's upper bound (element mask), the interior blocks (no mask: no branch in
 * the loop that runs most blocks), the blocks holding a key before the last row's lower bound
 * (mask). A warpgroup releases the Q slot once the tile's last S = Q K^T has landed, so the
 * producer loads the next tile's Q during the last block's softmax, P V and the epilogue.
 *
 * Tensor maps (built on the host, fwd_ws_launch): Q, K, V as rank-4 tensors (head dim, sequence,
 * head, batch) with the call's strides; a box is 64 columns x 128 rows. Elements outside the
 * tensor (rows past Sq / Sk, columns past the head dim) land as zeros. Unlike the cp.async
 * kernels, K/V rows inside [0, Sk) but outside the query block's visible key range are loaded
 * too; they lie only in boundary blocks (fwd_cta_work_of: keys below the last row's lower bound
 * or above the first row's upper bound), where the element mask hides their scores and the V
 * guard below covers their values.
 * Contract v3 (fwd_common.cuh's fwd_seq_of gives each tile its sequence): packed Q or K/V
 * (cu_seqlens) use batch-1 maps over the packed rows, a tile's box starting at the sequence's
 * first row (cu[b] + m0, cu[b] + key0); seqused_k and packed K/V bound a sequence's keys by Sk_b,
 * and the rows a box reads past Sk_b (the next sequence's, or the unused ones) lie in boundary
 * blocks, handled as above (hidden scores, V guard); query rows past Sq_b are computed and not
 * stored. Paged K/V: maps over the pools [num_pages, page_size], boxes of gcd(page_size, 128)
 * rows (a multiple of 8: each box starts a 1024-byte swizzle atom, so the stage's layout is the
 * dense one), each in one page, issued by the producer warp's lanes together
 * (fwd_ws_page_of). Page sizes that are not multiples of 8 are declined (the cp.async kernels
 * gather them). A call with per-sequence lengths runs one CTA per tile (inactive tiles of
 * short sequences exit at once).
 * NaN/Inf guard of V (fwd_common.cuh): in a boundary block the producer warp has the copy
 * complete on a separate mbarrier, scans the whole V stage, replaces NaN/Inf halves by +0, fences
 * (generic -> async proxy), raises the host-mapped flag on a hit, and only then arrives on the
 * stage's full barrier. The host's fix-up then adds the exact contribution of visible NaN/Inf V
 * entries, as for the other kernels. */
#include <string.h>

#include <cuda.h>  // CUtensorMap and the encoder's types (the encoder comes from the driver at run time)

#include "kernels/cuda/fwd/fwd_ws.h"

/* The tensor maps of one call (kernel parameter, __grid_constant__: TMA reads them in place).
 * page_box: paged K/V (p.block_table != NULL): the rows of one K/V box, gcd(page_size, BN) (a
 * multiple of 8, so each box starts a 1024-byte swizzle atom); 0 otherwise.
 * paired: the persistent walk of a call with an upper visibility bound (fwd_ws_tile_of): CTA c
 * takes the tile pairs c, c + gridDim.x, ... (pair w: tiles 2w, 2w + 1); 0: tiles c, c +
 * gridDim.x, ... */
typedef struct {
    CUtensorMap q, k, v;
    int page_box;
    int paired;
} fwd_ws_maps;

/* Byte offsets inside the (1024-byte aligned) shared memory: Q slots, K ring, V ring, O staging,
 * mbarriers (per stage K full, V full, K empty, V empty; per Q slot full, empty; V landed). */
static __host__ __device__ constexpr uint32_t fwd_ws_q_bytes(int hd) { return (uint32_t)(fwd_ws_bm * hd * 2); }
static __host__ __device__ constexpr uint32_t fwd_ws_kv_bytes(int hd) { return (uint32_t)(fwd_ws_bn * hd * 2); }
static __host__ __device__ constexpr uint32_t fwd_ws_off_k(int hd) { return fwd_ws_q_slots_of(hd) * fwd_ws_q_bytes(hd); }
static __host__ __device__ constexpr uint32_t fwd_ws_off_v(int hd) { return fwd_ws_off_k(hd) + fwd_ws_stages_of(hd) * fwd_ws_kv_bytes(hd); }
static __host__ __device__ constexpr uint32_t fwd_ws_off_o(int hd) { return fwd_ws_off_v(hd) + fwd_ws_stages_of(hd) * fwd_ws_kv_bytes(hd); }
static __host__ __device__ constexpr uint32_t fwd_ws_off_bar(int hd) { return fwd_ws_off_o(hd) + fwd_ws_q_bytes(hd); }
static __host__ __device__ constexpr uint32_t fwd_ws_bar_bytes(int hd) { return 8 * (4 * fwd_ws_stages_of(hd) + 2 * fwd_ws_q_slots_of(hd) + 1); }

size_t fwd_ws_smem_bytes(int hd) { return (size_t)fwd_ws_off_bar(hd) + fwd_ws_bar_bytes(hd) + 1024; }

// ----------------------------------------------------------------------------
// device

/* The V stage at sV (BN x HD, read and rewritten by one warp): NaN/Inf halves replaced by +0;
 * returns 1 in every lane when one held a NaN/Inf. The stage's copy has completed. */
template <int HD, bool BF16>
static __device__ __forceinline__ uint32_t fwd_ws_scan_v(uint32_t sV, int lane) {
    constexpr int CHUNKS = fwd_ws_bn * HD * 2 / 16;
    uint32_t any = 0;
#pragma unroll 8
    for (int c = lane; c < CHUNKS; c += 32) {
        uint4 x;
        ptx_ld_shared16(sV + (uint32_t)c * 16u, &x);
        const uint32_t bx = nonfinite_bits<BF16>(x.x), by = nonfinite_bits<BF16>(x.y);
        const uint32_t bz = nonfinite_bits<BF16>(x.z), bw = nonfinite_bits<BF16>(x.w);
        if (bx | by | bz | bw) {
            any = 1;
            x.x &= ~zero_mask(bx); x.y &= ~zero_mask(by); x.z &= ~zero_mask(bz); x.w &= ~zero_mask(bw);
            ptx_st_shared16(sV + (uint32_t)c * 16u, x);
        }
    }
    return (uint32_t)__any_sync(0xffffffffu, (int)any);
}

/* Is key block key0 .. key0 + BN - 1 a boundary block of work w (some key hidden from some row,
 * or past Sk_b, the sequence's used keys)? The test of fwd_sm90.cu with its two upper conditions
 * (key0 + BN - 1 > w.hi_first, key0 + BN > Sk_b) as one: hi_b = min(w.hi_first, Sk_b - 1)
 * (fwd_ws_hi_b), which a thread holds instead of both. */
static __device__ __forceinline__ int64_t fwd_ws_hi_b(const fwd_cta_work &w) {
    return w.hi_first < (int64_t)w.s.sk - 1 ? w.hi_first : (int64_t)w.s.sk - 1;
}
template <bool NATURAL>
static __device__ __forceinline__ bool fwd_ws_boundary(int64_t hi_b, int64_t lo_last, int key0) {
    return NATURAL || (int64_t)key0 + fwd_ws_bn - 1 > hi_b || (int64_t)key0 < lo_last;
}

/* Where lane `lane` of the producer warp loads its box of paged key block key0 (pages = the table
 * row of b): box u = lane < BN / box covers keys j0 = key0 + u * box .. + box - 1 (box |
 * page_size: one page), slot j0 % page_size of page pages[j0 / page_size]. Boxes past Sk_b
 * (j0 >= sk) read no table entry past the sequence's pages: they load page pages[0] (the block
 * is a boundary block: their scores are hidden and the V guard covers their values). The lanes
 * read their table entries at once (one latency per block, for K and V). *page < 0: no box. */
static __device__ __forceinline__ void fwd_ws_page_of(const int *pages, int page_size, int box, int sk, int key0,
                                                      int lane, int *page, int *slot) {
    *page = -1;
    *slot = 0;
    if (lane * box >= fwd_ws_bn) return;
    const int j0 = key0 + lane * box;
    *page = j0 < sk ? pages[j0 / page_size] : pages[0];
    *slot = j0 < sk ? j0 % page_size : 0;
}

/* One K or V stage (sX) of key block key0 of a (batch, KV head) from its map, issued by the
 * producer warp after lane 0's arrive_tx on bar (every lane calls it). Dense: lane 0 loads the
 * box at (row0 + key0, hk, kb) with row0 = 0, kb = b; packed (p.cu_k): the batch-1 map, row0 =
 * cu_k[b], kb = 0; paged (paged = 1): each lane its box of fwd_ws_page_of. Every box lands its
 * full bytes (rows outside a map: zeros), so the stage's transaction count is BN * HD * 2 in
 * every case. */
template <int CB>
static __device__ __forceinline__ void fwd_ws_load_kv(uint32_t sX, const CUtensorMap *map, uint32_t bar, int paged,
                                                      int page, int slot, int box, int row0, int kb, int hk, int key0,
                                                      int lane) {
    if (!paged) {
        if (lane == 0)
#pragma unroll
            for (int cb = 0; cb < CB; ++cb)
                gmma_tma_load4(sX + cb * fwd_ws_bn * 128, map, bar, cb * 64, row0 + key0, hk, kb);
        return;
    }
    if (page >= 0)
#pragma unroll
        for (int cb = 0; cb < CB; ++cb)
            gmma_tma_load4(sX + cb * fwd_ws_bn * 128 + lane * box * 128, map, bar, cb * 64, slot, hk, page);
}

/* S = Q K^T for this warpgroup's 64 rows (sQw: its rows of the Q tile) against the K stage sK;
 * k steps of 16 along the head dim, fp32 accumulation from zero. Issue only (no fence, commit
 * or wait). */
template <int HD, bool BF16>
static __device__ __forceinline__ void fwd_ws_issue_qk(float (&acc_s)[1][fwd_ws_bn / 8][4], uint32_t sQw, uint32_t sK) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const uint64_t da = gmma_desc(sQw + gmma_kslice_offset<fwd_ws_bm>(kk), 16, 1024);
        const uint64_t db = gmma_desc(sK + gmma_kslice_offset<fwd_ws_bn>(kk), 16, 1024);
        gmma_ss<fwd_ws_bn, BF16, 0, 0>(acc_s[0], da, db, kk > 0);
    }
}

/* O += P V with P the rounded fragments pa (register A operand) and the V stage sV (MN-major);
 * k steps of 16 keys. Issue only. */
template <int HD, bool BF16>
static __device__ __forceinline__ void fwd_ws_issue_pv(float (&acc_o)[1][HD / 8][4],
                                                       const uint32_t (&pa)[1][fwd_ws_bn / 16][4], uint32_t sV) {
#pragma unroll
    for (int kk = 0; kk < fwd_ws_bn / 16; ++kk)
        gmma_rs<HD, BF16, 1>(acc_o[0], pa[0][kk], gmma_desc(sV + kk * 16 * 128, fwd_ws_bn * 128, 1024));
}

/* A compile-time flag passed as a value (the key-block step's `masked`). */
template <bool B>
struct fwd_ws_bool {
    static constexpr bool value = B;
};

/* Scores of one key block (key0) -> P: the element mask in boundary blocks, the online softmax
 * step (rescales O) and the rounding of P (fwd_common.cuh's steps). row_g: this thread's first
 * row (m0 + warp row base + g). */
template <int NT, int DT, int KP, bool BF16, bool NATURAL>
static __device__ __forceinline__ void fwd_ws_scores_to_p(const fwd_params &p, const fwd_cta_work &w,
                                                          float (&acc_s)[1][NT][4], float (&row_m)[1][2],
                                                          float (&row_l)[1][2], float (&acc_o)[1][DT][4],
                                                          uint32_t (&pa)[1][KP][4], int key0, int64_t hi_b, int row_g, int t) {
    if (fwd_ws_boundary<NATURAL>(hi_b, w.lo_last, key0)) fwd_mask_scores<1, NT, NATURAL>(p, w.s, acc_s, row_g, key0 + 2 * t);
    fwd_softmax_step<1, NT, DT, NATURAL, true>(p, acc_s, row_m, row_l, acc_o);
    fwd_pack_p<1, KP, BF16>(acc_s, pa);
}

/* Tile tl of m_blocks x bh_total (query block, (batch, head)): the query block is the fast index,
 * so that tiles that run together share their (batch, head)'s K and V in L2; with an upper
 * visibility bound (p.reverse_m: causal, right window) the last (heaviest) query blocks first.
 * CTA c takes tiles c, c + gridDim.x, ...: the host launches one CTA per SM (persistent) for
 * equal lengths without an upper bound (with one: fwd_ws_paired_tile_of), one CTA per tile with
 * per-sequence lengths (the hardware's dynamic order balances the unequal tiles; a static
 * persistent order with heaviest-first query blocks lost L2 reuse and balance:
 * bench/RESULTS-2026-11-24-ws.md). */
static __device__ __forceinline__ void fwd_ws_tile_of(const fwd_params &p, int64_t tl, int m_blocks, int *m0, int *bh) {
    const int mi = (int)(tl % m_blocks);
    *bh = (int)(tl / m_blocks);
    *m0 = (p.reverse_m ? m_blocks - 1 - mi : mi) * fwd_ws_bm;
}

/* The paired persistent walk (maps.paired, dense Q with an upper bound: causal, right window):
 * query block r of a (batch, head) is, in walk order, M - 1 - r / 2 for even r and r / 2 for
 * odd r (M = m_blocks), so the pair 2w, 2w + 1 of one (batch, head) holds the query blocks M - 1
 * - k and k. Under a causal bound (Sq = Sk) block i visits i + 1 key blocks: every pair visits
 * M + 1, so a static round-robin over pairs gives each CTA the same work up to one pair (an odd
 * M leaves one pair per (batch, head) that straddles two of them). */
static __device__ __forceinline__ void fwd_ws_paired_tile_of(int64_t tl, int m_blocks, int *m0, int *bh) {
    const int r = (int)(tl % m_blocks);
    *bh = (int)(tl / m_blocks);
    *m0 = ((r & 1) ? r / 2 : m_blocks - 1 - r / 2) * fwd_ws_bm;
}

/* A CTA's first tile and the one after tl in its walk (fwd_ws_maps.paired). */
static __device__ __forceinline__ int64_t fwd_ws_first_tile(int paired) {
    return paired ? 2 * (int64_t)blockIdx.x : (int64_t)blockIdx.x;
}
static __device__ __forceinline__ int64_t fwd_ws_next_tile(int paired, int64_t tl) {
    return paired ? ((tl & 1) ? tl + 2 * (int64_t)gridDim.x - 1 : tl + 1) : tl + gridDim.x;
}

template <int HD, bool BF16, bool NATURAL>
__global__ void __launch_bounds__(fwd_ws_threads, 1)
    flash_fwd_ws_kernel(const fwd_params p, const __grid_constant__ fwd_ws_maps maps) {
    static_assert(HD == 64 || HD == 128, "warp-specialized forward: HD is 64 or 128");
    static_assert(fwd_ws_bm == 128 && fwd_ws_bn == 128 && fwd_ws_threads == 384, "warp-specialized forward: the tile");
#if GMMA_ENABLED
    constexpr int BM = fwd_ws_bm, BN = fwd_ws_bn, ST = fwd_ws_stages_of(HD), QS = fwd_ws_q_slots_of(HD);
    constexpr int NT = BN / 8, DT = HD / 8, KP = BN / 16, CB = HD / 64;
    constexpr uint32_t Q_BYTES = fwd_ws_q_bytes(HD), KV_BYTES = fwd_ws_kv_bytes(HD);
    constexpr uint32_t CONSUMER_WARPS = 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = (ptx_smem(smem) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1024-byte tiles
    const uint32_t sK0 = sQ + fwd_ws_off_k(HD), sV0 = sQ + fwd_ws_off_v(HD), sO = sQ + fwd_ws_off_o(HD);
    // mbarriers: per stage K full, V full, K empty, V empty; per Q slot full, empty; V landed
    const uint32_t sB = sQ + fwd_ws_off_bar(HD);
    const uint32_t b_kfull = sB, b_vfull = sB + 8 * ST, b_kempty = sB + 16 * ST, b_vempty = sB + 24 * ST;
    const uint32_t b_qfull = sB + 32 * ST, b_qempty = b_qfull + 8 * QS, b_vland = b_qempty + 8 * QS;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
    const int m_blocks = (p.seqlen_q + BM - 1) / BM;
    const int64_t tiles = (int64_t)m_blocks * p.bh_total;

    if (tid == 0) {
        for (int s = 0; s < ST; ++s) {
            gmma_mbar_init(b_kfull + 8 * s, 1);
            gmma_mbar_init(b_vfull + 8 * s, 1);
            gmma_mbar_init(b_kempty + 8 * s, CONSUMER_WARPS);
            gmma_mbar_init(b_vempty + 8 * s, CONSUMER_WARPS);
        }
        for (int q = 0; q < QS; ++q) {
            gmma_mbar_init(b_qfull + 8 * q, 1);
            gmma_mbar_init(b_qempty + 8 * q, CONSUMER_WARPS);
        }
        gmma_mbar_init(b_vland, 1);
        gmma_mbar_init_fence();
    }
    __syncthreads();  // the last CTA-wide barrier: the roles split below

    if (wg == 0) {
        // ================= producer =================
        gmma_setmaxnreg_dec<fwd_ws_producer_regs>();
        if (warp != 0) return;
        // tile: active tiles so far; tile % QS is the tile's Q slot, (tile / QS) & 1 its barriers' phase
        uint32_t it = 0, tile = 0, land_phase = 0;
        for (int64_t tl = fwd_ws_first_tile(maps.paired); tl < tiles; tl = fwd_ws_next_tile(maps.paired, tl)) {
            int m0, bh;
            if (maps.paired) fwd_ws_paired_tile_of(tl, m_blocks, &m0, &bh);
            else fwd_ws_tile_of(p, tl, m_blocks, &m0, &bh);
            const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, m0);
            if (!w.active) continue;  // a varlen sequence with fewer query blocks than the grid: no work
            const int hk = w.s.h / p.group;
            const int64_t hi_b = fwd_ws_hi_b(w);
            const int krow0 = p.cu_k != NULL ? p.cu_k[w.s.b] : 0, kb = p.cu_k != NULL ? 0 : w.s.b;
            if (lane == 0) {
                const uint32_t qs = tile % QS, qf = b_qfull + 8 * qs, sQt = sQ + qs * Q_BYTES;
                gmma_mbar_wait(b_qempty + 8 * qs, ((tile / QS) & 1u) ^ 1u);  // tile - QS's Q reads are done
                gmma_mbar_arrive_tx(qf, Q_BYTES);
                // packed Q (p.cu_q): the batch-1 map's rows q_tok0 + m0 (rows past Sq_b belong to the
                // next sequence: their rows are computed and not stored)
                const int qrow = w.s.q_tok0 + m0, qb = p.cu_q != NULL ? 0 : w.s.b;
#pragma unroll
                for (int cb = 0; cb < CB; ++cb)
                    gmma_tma_load4(sQt + cb * BM * 128, &maps.q, qf, cb * 64, qrow, w.s.h, qb);
            }
            ++tile;
            for (int n = w.n_end - 1; n >= w.n_begin; --n, ++it) {
                const uint32_t s = it % ST, ph = (it / ST) & 1u;
                const int key0 = n * BN;
                const bool boundary = fwd_ws_boundary<NATURAL>(hi_b, w.lo_last, key0);
                const uint32_t sK = sK0 + s * KV_BYTES, sV = sV0 + s * KV_BYTES;
                const int paged = w.s.pages != NULL;
                int page = -1, slot = 0;
                if (paged) fwd_ws_page_of(w.s.pages, p.page_size, maps.page_box, w.s.sk, key0, lane, &page, &slot);
                const uint32_t bv = boundary ? b_vland : b_vfull + 8 * s;
                // lane 0 waits for the stage and announces its bytes; then the warp issues the copies
                if (lane == 0) {
                    gmma_mbar_wait(b_kempty + 8 * s, ph ^ 1u);
                    gmma_mbar_arrive_tx(b_kfull + 8 * s, KV_BYTES);
                }
                __syncwarp();
                fwd_ws_load_kv<CB>(sK, &maps.k, b_kfull + 8 * s, paged, page, slot, maps.page_box, krow0, kb, hk, key0,
                                   lane);
                if (lane == 0) {
                    gmma_mbar_wait(b_vempty + 8 * s, ph ^ 1u);
                    gmma_mbar_arrive_tx(bv, KV_BYTES);
                }
                __syncwarp();
                fwd_ws_load_kv<CB>(sV, &maps.v, bv, paged, page, slot, maps.page_box, krow0, kb, hk, key0, lane);
                if (boundary) {
                    // the V guard: scan the landed stage before the consumers may read it
                    __syncwarp();
                    gmma_mbar_wait(b_vland, land_phase);
                    land_phase ^= 1u;
                    const uint32_t hit = fwd_ws_scan_v<HD, BF16>(sV, lane);
                    if (hit && lane == 0) *p.nonfinite_flag = 1;
                    gmma_fence_proxy();  // the rewritten halves -> the tensor cores' reads
                    __syncwarp();
                    if (lane == 0) gmma_mbar_arrive(b_vfull + 8 * s);
                }
            }
        }
        return;
    }

    // ================= consumers =================
    gmma_setmaxnreg_inc<fwd_ws_consumer_regs>();
    const int cw = warp - 4, cwg = cw >> 2, g = lane >> 2, t = lane & 3;
    const int sched_me = 1 + cwg, sched_other = 2 - cwg;  // named barriers 1, 2 (256 threads)
    // Turns alternate over the whole CTA (both warpgroups take one turn per key block of every
    // tile): warpgroup 1 arrives once here so that warpgroup 0 takes the first turn, and
    // warpgroup 0 consumes warpgroup 1's last arrival after the last tile. (Per-tile arrivals
    // could let warpgroup 1 arrive twice on barrier 1 before warpgroup 0 syncs on it.)
    if (cwg == 1) gmma_bar_arrive(1, 256);
    uint32_t it = 0, tile = 0;  // tile: active tiles so far, as the producer counts them
    for (int64_t tl = fwd_ws_first_tile(maps.paired); tl < tiles; tl = fwd_ws_next_tile(maps.paired, tl)) {
        int m0, bh;
        if (maps.paired) fwd_ws_paired_tile_of(tl, m_blocks, &m0, &bh);
        else fwd_ws_tile_of(p, tl, m_blocks, &m0, &bh);
        const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, m0);
        if (!w.active) continue;  // the producer skips it too (same test, same order)
        const int64_t hi_b = fwd_ws_hi_b(w);

        float acc_o[1][DT][4];
        float row_m[1][2], row_l[1][2];
        uint32_t pa[1][KP][4];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[0][dt][e] = 0.0f;
        row_m[0][0] = row_m[0][1] = -INFINITY;
        row_l[0][0] = row_l[0][1] = 0.0f;

        const uint32_t qs = tile % QS;
        const uint32_t sQw = sQ + qs * Q_BYTES + cwg * 64 * 128;  // this warpgroup's 64 rows of each column block
        gmma_mbar_wait(b_qfull + 8 * qs, (tile / QS) & 1u);
        ++tile;
        if (w.n_end > w.n_begin) {
            // ---- the first (last-keyed) block: S = Q K^T alone
            uint32_t s = it % ST, ph = (it / ST) & 1u;
            int n = w.n_end - 1;
            {
                float acc_s[1][NT][4];
                gmma_mbar_wait(b_kfull + 8 * s, ph);
                gmma_bar_sync(sched_me, 256);
                gmma_fence();
                fwd_ws_issue_qk<HD, BF16>(acc_s, sQw, sK0 + s * KV_BYTES);
                gmma_commit();
                gmma_bar_arrive(sched_other, 256);
                gmma_wait<0>();
                gmma_fence_operands(acc_s[0]);
                if (lane == 0) {
                    gmma_mbar_arrive(b_kempty + 8 * s);
                    if (n == w.n_begin) gmma_mbar_arrive(b_qempty + 8 * qs);  // the tile's last Q read
                }
                fwd_ws_scores_to_p<NT, DT, KP, BF16, NATURAL>(p, w, acc_s, row_m, row_l, acc_o, pa, n * BN, hi_b,
                                                              m0 + cw * 16 + g, t);
            }
            // ---- the other blocks: O += P(prev) V(prev) and S = Q K^T in one turn
            --n;
            ++it;
            if constexpr (NATURAL) {
                for (; n >= w.n_begin; --n, ++it) {
                    const uint32_t sp = s, php = ph;
                    s = it % ST;
                    ph = (it / ST) & 1u;
                    float acc_s[1][NT][4];
                    gmma_mbar_wait(b_kfull + 8 * s, ph);
                    gmma_mbar_wait(b_vfull + 8 * sp, php);
                    gmma_bar_sync(sched_me, 256);
                    gmma_fence();
                    // masks / natural units: every block is a boundary block (fwd_ws_boundary);
                    // both products waited for, then the scores (the same arithmetic)
                    fwd_ws_issue_pv<HD, BF16>(acc_o, pa, sV0 + sp * KV_BYTES);
                    fwd_ws_issue_qk<HD, BF16>(acc_s, sQw, sK0 + s * KV_BYTES);
                    gmma_commit();
                    gmma_bar_arrive(sched_other, 256);
                    gmma_wait<0>();
                    gmma_fence_operands(acc_s[0]);
                    gmma_fence_operands(acc_o[0]);
                    if (lane == 0) {
                        gmma_mbar_arrive(b_kempty + 8 * s);
                        gmma_mbar_arrive(b_vempty + 8 * sp);
                        if (n == w.n_begin) gmma_mbar_arrive(b_qempty + 8 * qs);
                    }
                    fwd_ws_scores_to_p<NT, DT, KP, BF16, NATURAL>(p, w, acc_s, row_m, row_l, acc_o, pa, n * BN, hi_b,
                                                                  m0 + cw * 16 + g, t);
                }
            } else {
                // one key block n (it: its ring position): O += P(prev) V(prev) and S = Q K^T in one
                // turn; the element mask when `masked` (a boundary block); the K stage, and after
                // the tile's last S the Q slot, released once S landed, the V stage once P V did
                auto step = [&](auto masked) {
                    const uint32_t sp = s, php = ph;
                    s = it % ST;
                    ph = (it / ST) & 1u;
                    float acc_s[1][NT][4];
                    gmma_mbar_wait(b_kfull + 8 * s, ph);
                    gmma_mbar_wait(b_vfull + 8 * sp, php);
                    gmma_bar_sync(sched_me, 256);
                    gmma_fence();
                    fwd_ws_issue_qk<HD, BF16>(acc_s, sQw, sK0 + s * KV_BYTES);
                    gmma_commit();
                    fwd_ws_issue_pv<HD, BF16>(acc_o, pa, sV0 + sp * KV_BYTES);
                    gmma_commit();
                    gmma_bar_arrive(sched_other, 256);
                    gmma_wait<1>();  // S landed; P(prev) V(prev) may still run
                    gmma_fence_operands(acc_s[0]);
                    if (lane == 0) gmma_mbar_arrive(b_kempty + 8 * s);
                    if (lane == 0 && n == w.n_begin) gmma_mbar_arrive(b_qempty + 8 * qs);
                    if constexpr (decltype(masked)::value)
                        fwd_mask_scores<1, NT, NATURAL>(p, w.s, acc_s, m0 + cw * 16 + g, n * BN + 2 * t);
                    gmma_wait<0>();
                    gmma_fence_operands(acc_o[0]);
                    if (lane == 0) gmma_mbar_arrive(b_vempty + 8 * sp);
                    fwd_softmax_step<1, NT, DT, NATURAL, true>(p, acc_s, row_m, row_l, acc_o);
                    fwd_pack_p<1, KP, BF16>(acc_s, pa);
                };
                // the blocks with a key past hi_b (masked), then the interior (no mask), then the
                // blocks with a key before lo_last (masked): fwd_ws_boundary's two conditions, each
                // monotone in n
                for (; n >= w.n_begin && (int64_t)n * BN + BN - 1 > hi_b; --n, ++it) step(fwd_ws_bool<true>());
                for (; n >= w.n_begin && (int64_t)n * BN >= w.lo_last; --n, ++it) step(fwd_ws_bool<false>());
                for (; n >= w.n_begin; --n, ++it) step(fwd_ws_bool<true>());
            }
            // ---- the last block's P V
            gmma_mbar_wait(b_vfull + 8 * s, ph);
            gmma_fence();
            fwd_ws_issue_pv<HD, BF16>(acc_o, pa, sV0 + s * KV_BYTES);
            gmma_commit();
            gmma_wait<0>();
            gmma_fence_operands(acc_o[0]);
            if (lane == 0) gmma_mbar_arrive(b_vempty + 8 * s);
        } else if (lane == 0) {
            gmma_mbar_arrive(b_qempty + 8 * qs);  // no key block: Q unread
        }

        // ---- epilogue: this warp's 16 rows, staged in its own rows of the O tile
        fwd_store_o_lse<HD, 1, 16, BF16, NATURAL>(p, w.s, acc_o, row_m, row_l, sO, m0, cw, lane);
    }
    if (cwg == 0) gmma_bar_sync(1, 256);  // warpgroup 1's last arrival on barrier 1
#else
    (void)p;
    (void)maps;
    __trap();  // never launched: the host picks this kernel on sm_90 devices only
#endif
}

// ----------------------------------------------------------------------------
// host: tensor maps and the launch

typedef CUresult (*fwd_ws_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's cuTensorMapEncodeTiled (the runtime's entry-point query: no libcuda link), or NULL. */
static fwd_ws_encode_fn fwd_ws_encoder(void) {
    static fwd_ws_encode_fn fn = NULL;
    static int tried = 0;
    if (!tried) {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (fwd_ws_encode_fn)f;
        else
            cudaGetLastError();
        tried = 1;
    }
    return fn;
}

/* A rank-4 map (head dim, rows, heads, batch) of 16-bit elements, strides in elements; box 64
 * columns x box_rows rows, 128-byte swizzle, zeros outside. 0 on success. A dimension of size 1 gets
 * the next inner stride (its own is never used, and may be 0 or odd in the caller's view). */
static int fwd_ws_map(CUtensorMap *m, const void *base, int64_t d, int64_t rows, int64_t heads, int64_t batch,
                      int64_t s_row, int64_t s_head, int64_t s_batch, int box_rows) {
    fwd_ws_encode_fn enc = fwd_ws_encoder();
    if (enc == NULL) return 1;
    if (rows == 1) s_row = d;
    if (heads == 1) s_head = s_row;
    if (batch == 1) s_batch = s_head;
    const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)s_row * 2, (cuuint64_t)s_head * 2, (cuuint64_t)s_batch * 2};
    const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    for (int i = 0; i < 3; ++i)
        if (strides[i] == 0 || strides[i] % 16 != 0 || strides[i] >= (1ull << 40)) return 1;
    const CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, (void *)base, dims, strides, box, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : 1;
}

typedef void (*fwd_ws_kernel_fn)(const fwd_params, const fwd_ws_maps);

static fwd_ws_kernel_fn fwd_ws_pick(int hd, int bf16, int natural) {
    if (hd == 128) {
        if (bf16) return natural ? flash_fwd_ws_kernel<128, true, true> : flash_fwd_ws_kernel<128, true, false>;
        return natural ? flash_fwd_ws_kernel<128, false, true> : flash_fwd_ws_kernel<128, false, false>;
    }
    if (hd == 64) {
        if (bf16) return natural ? flash_fwd_ws_kernel<64, true, true> : flash_fwd_ws_kernel<64, true, false>;
        return natural ? flash_fwd_ws_kernel<64, false, true> : flash_fwd_ws_kernel<64, false, false>;
    }
    return NULL;
}

static int64_t fwd_ws_gcd(int64_t a, int64_t b) {
    while (b != 0) {
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

int fwd_ws_launch(const fwd_params *p, int hd, int bf16, int natural, int64_t q_rows, int64_t k_rows,
                  int64_t num_pages, cudaStream_t st, cudaError_t *e) {
    const fwd_ws_kernel_fn kern = fwd_ws_pick(hd, bf16, natural);
    if (kern == NULL) return 1;
    const int64_t batch = p->bh_total / p->heads_q, heads_kv = p->heads_q / p->group;
    fwd_ws_maps maps;
    memset(&maps, 0, sizeof(maps));
    // Q: [B, Sq] rows, or the packed rows as one batch; K/V: [B, Sk], packed, or the page pools
    // [num_pages, page_size] with boxes of gcd(page_size, BN) rows (at least 8: one swizzle atom)
    const int paged = p->block_table != NULL;
    if (paged) {
        maps.page_box = (int)fwd_ws_gcd(p->page_size, fwd_ws_bn);
        if (maps.page_box % 8 != 0) return 1;  // page sizes that are not multiples of 8: cp.async gathers
    }
    const int kbox = paged ? maps.page_box : fwd_ws_bn;
    const int64_t kr = paged ? p->page_size : (p->cu_k != NULL ? k_rows : p->seqlen_k);
    const int64_t kbatch = paged ? num_pages : (p->cu_k != NULL ? 1 : batch);
    if (fwd_ws_map(&maps.q, p->q, p->head_dim, p->cu_q != NULL ? q_rows : p->seqlen_q, p->heads_q,
                   p->cu_q != NULL ? 1 : batch, p->q_ss, p->q_sh, p->q_sb, fwd_ws_bm) ||
        fwd_ws_map(&maps.k, p->k, p->head_dim, kr, heads_kv, kbatch, p->k_ss, p->k_sh, p->k_sb, kbox) ||
        fwd_ws_map(&maps.v, p->v, p->head_dim, kr, heads_kv, kbatch, p->v_ss, p->v_sh, p->v_sb, kbox))
        return 1;
    const size_t smem = fwd_ws_smem_bytes(hd);
    *e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (*e != cudaSuccess) return 0;
    // persistent grid (one CTA per SM) without an upper visibility bound, one CTA per tile with
    // one (fwd_ws_tile_of); at most 2^31 - 1 CTAs, each walking tiles gridDim.x apart
    int dev = 0, sms = 0;
    *e = cudaGetDevice(&dev);
    if (*e == cudaSuccess) *e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (*e != cudaSuccess) return 0;
    const int64_t tiles = ((int64_t)p->seqlen_q + fwd_ws_bm - 1) / fwd_ws_bm * p->bh_total;
    // the grid: one CTA per SM (persistent) for equal lengths, in the paired walk with an upper
    // bound (fwd_ws_paired_tile_of); per-sequence lengths (varlen, seqused_k): one CTA per tile
    // (tiles of unequal work, balanced by the hardware's dynamic order)
    const int per_seq = p->cu_q != NULL || p->cu_k != NULL || p->used_k != NULL;
    maps.paired = !per_seq && p->reverse_m;
    const int64_t cap = per_seq ? (int64_t)INT32_MAX : (int64_t)sms;
    const int64_t want = maps.paired ? (tiles + 1) / 2 : tiles;  // CTAs that get a first tile
    const unsigned grid = (unsigned)(want < cap ? want : cap);
    kern<<<grid, dim3(fwd_ws_threads, 1, 1), smem, st>>>(*p, maps);
    *e = cudaGetLastError();
    return 0;
}
