/* fwd_tiles.h: the forward's tile configurations, as data (prefix fwd_).
 * Read by the kernels (template arguments) and by the host (the choice per call). */
#ifndef FLASHCHECK_CUDA_FWD_TILES_H
#define FLASHCHECK_CUDA_FWD_TILES_H

/* An mma.sync tile: padded head dim, query rows per CTA, keys per block, warps. */
typedef struct {
    int hd, bm, bn, nw;
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
 * copies, 24 registers) and two consumer warpgroups of 64 query rows (240 registers), 128 keys
 * per block, a ring of fwd_ws_stages K and V stages; padded head dims 64 and 128. */
static constexpr int fwd_ws_bm = 128;
static constexpr int fwd_ws_bn = 128;
static constexpr int fwd_ws_stages = 2;
static constexpr int fwd_ws_threads = 384;
static constexpr int fwd_ws_producer_regs = 40;
static constexpr int fwd_ws_consumer_regs = 232;

#endif /* FLASHCHECK_CUDA_FWD_TILES_H */
