/* fwd_tiles.h: the forward's tile configurations, as data (prefix fwd_).
 * Read by the kernels (template arguments) and by the host (the choice per call). */
#ifndef FLASHCHECK_CUDA_FWD_TILES_H
#define FLASHCHECK_CUDA_FWD_TILES_H

/* An mma.sync tile: padded head dim of Q and K, query rows per CTA, keys per block, warps,
 * and the padded head dim of V and O (0: the same as hd). */
typedef struct {
    int hd, bm, bn, nw, hv;
} fwd_tile;

/* Tiles per padded head dim (32, 64, 96, 128, 192, 256). Family 0: 32 rows per warp
 * (4 warps) up to 128, 16 rows per warp with 8 warps above (register budget of the O
 * accumulator). Family 1: 16 rows per warp, 4 warps, BLOCK_M = 64 (fewer registers, more
 * shared-memory traffic per flop). Family 2: family 0 with half the key block (smaller S
 * fragment). Family 3: family 0 with 128-key blocks at D = 64. */
#define FWD_FAMILIES 4
#define FWD_HEAD_DIMS 6
static const fwd_tile fwd_tiles[FWD_FAMILIES][FWD_HEAD_DIMS] = {
    {{32, 128, 128, 4}, {64, 128, 64, 4}, {96, 128, 64, 4}, {128, 128, 64, 4}, {192, 128, 32, 8}, {256, 128, 32, 8}},
    {{32, 64, 128, 4}, {64, 64, 64, 4}, {96, 64, 64, 4}, {128, 64, 64, 4}, {192, 64, 32, 4}, {256, 64, 32, 4}},
    {{32, 128, 64, 4}, {64, 128, 32, 4}, {96, 128, 32, 4}, {128, 128, 32, 4}, {192, 128, 32, 8}, {256, 128, 32, 8}},
    {{32, 128, 128, 4}, {64, 128, 128, 4}, {96, 128, 64, 4}, {128, 128, 64, 4}, {192, 128, 32, 8}, {256, 128, 32, 8}},
};
/* Default family per padded head dim, without and with an upper visibility bound (causal /
 * right window) at Sq <= fwd_short_causal_seqlen (measurements: bench/RESULTS-2026-11-23-fwd.md): 64-row
 * blocks balance short causal problems better. */
static const int fwd_family_default[2][FWD_HEAD_DIMS] = {{0, 3, 0, 0, 0, 0}, {0, 3, 1, 1, 0, 0}};
static constexpr int fwd_short_causal_seqlen = 2048;

/* Tiles of a head-dim pair Dqk != Dv with its own kernel (S = Q K^T over hd, O += P V over hv):
 * the MLA / DeepSeek shape: Dqk in 136..192 (padded to 192), Dv in 72..128 (padded to 128).
 * 16 rows per warp and 64-key blocks (32 rows per warp spill 1 KB at 255 registers: the 12 k16
 * steps of Q K^T); [0]: 8 warps, BLOCK_M = 128 (the policy's family 0 only); [1]: 4 warps,
 * BLOCK_M = 64, the default: 4-11% faster than [0] at S = 1024 and 4096, causal or not, on the
 * H100 (bench/RESULTS-2026-11-25-mla.md). Any other pair
 * runs the equal-dim tile of max(Dqk, Dv) with the narrower tensor's columns zero-filled
 * (fwd_host.cu). */
#define FWD_PAIRS 1
static const fwd_tile fwd_pair_tiles[FWD_PAIRS][2] = {
    {{192, 128, 64, 8, 128}, {192, 64, 64, 4, 128}},
};

/* The decode tile (Sq <= 16, head dims padded to 64 or 128): one warp, 16 query rows, 64-key
 * blocks. A decode call streams K/V once; 16 rows keep the wasted tensor-core work of rows past
 * Sq at most 16x (the 64-row tile: 64x), and three CTAs fit an SM's shared memory. */
static const fwd_tile fwd_decode_tiles[2] = {{64, 16, 64, 1}, {128, 16, 64, 1}};

/* Unroll factor of the k loop of S = Q K^T in the mma.sync kernel (register pressure vs. ILP). */
static constexpr int fwd_qk_unroll = 16;

/* The wgmma tile: 2 warpgroups of 64 query rows, 128 keys per block, 1 CTA per SM
 * (254-255 registers a thread); head dims padded to 64 or 128. */
static constexpr int fwd_sm90_nwg = 2;
static constexpr int fwd_sm90_bn = 128;
static constexpr int fwd_sm90_bm = 64 * fwd_sm90_nwg;
static constexpr int fwd_sm90_threads = 128 * fwd_sm90_nwg;
static constexpr int fwd_sm90_minb = fwd_sm90_nwg == 1 ? 2 : 1;

/* The warp-specialized wgmma tile (fwd_sm90_ws.cu): one producer warpgroup (one warp issues the
 * copies, 40 registers) and two consumer warpgroups of 64 query rows (232 registers), 128 keys
 * per block, a ring of fwd_ws_stages_of(hd) K and V stages and fwd_ws_q_slots_of(hd) Q tiles;
 * padded head dims 64 and 128. Head dim 64: 4 stages and 2 Q slots (the next tile's Q loads
 * while the consumers finish the current one), 176 KiB; its shorter blocks need the deeper ring.
 * Head dim 128: 2 stages, 1 Q slot, 192 KiB (a second Q slot, 224 KiB, was slower:
 * bench/RESULTS-2026-11-25-fws.md). */
static constexpr int fwd_ws_bm = 128;
static constexpr int fwd_ws_bn = 128;
static constexpr __host__ __device__ int fwd_ws_stages_of(int hd) { return hd <= 64 ? 4 : 2; }
static constexpr __host__ __device__ int fwd_ws_q_slots_of(int hd) { return hd <= 64 ? 2 : 1; }
static constexpr int fwd_ws_threads = 384;
static constexpr int fwd_ws_producer_regs = 40;
static constexpr int fwd_ws_consumer_regs = 232;

#endif /* FLASHCHECK_CUDA_FWD_TILES_H */
