/* fwd_common.cuh: what both CUDA forward kernels share (prefix fwd_): parameters, tile
 * loads, the NaN/Inf guard of V, the visibility, and the algorithm steps between the
 * two matrix products (element mask, online softmax, P packing, epilogue).
 *
 * Files: fwd_sm80.cu (mma.sync kernel), fwd_sm90.cu (wgmma kernel), fwd_host.cu
 * (fa_cuda_forward: checks, tile choice, launch, the NaN/Inf fix-up kernels).
 *
 *
 * Two kernels with one algorithm, one arithmetic and shared code for everything
 * but the two matrix products:
 *   flash_fwd_kernel       mma.sync m16n8k16 + ldmatrix (sm_80 and newer; every head dim)
 *   flash_fwd_sm90_kernel  wgmma (sm_90a; head dims padded to 128 on an sm_90 device),
 *                          see "the Hopper kernel" below
 * The description that follows is the mma.sync kernel's; the wgmma kernel differs
 * only in the tiles' shared-memory layout and in how the products are issued.
 *
 * One CTA computes BLOCK_M query rows of one (batch, query head) against every
 * visible key block. Each warp owns BLOCK_M / NUM_WARPS rows (16 or 32) and
 * keeps its rows' output accumulator, running max and running sum in registers.
 *
 *   Q tile   gmem --cp.async--> smem (once)
 *   K, V     gmem --cp.async--> smem, two stages: block n-1 loads while n computes
 *   S = Q K^T     ldmatrix + mma.sync.m16n8k16 (fp16/bf16 in, fp32 accumulate)
 *   softmax       online, exp2 with log2(e) folded into the scale, fp32
 *   O += P V      P rounded to the input dtype, V read with ldmatrix.trans
 *   O / l         rounded (RN) to the input dtype, staged in smem, 16-byte stores
 *
 * Shared memory rows are swizzled (16-byte chunk index XOR a function of the
 * row) so that the 8 row addresses of every ldmatrix phase hit 8 different
 * bank groups.
 *
 * Arithmetic (what the precision profile in backend.cu promises):
 *   - q.k and p.v accumulate in the tensor cores' fp32 accumulator (products
 *     exact, sums truncated: unit roundoff 2^-23).
 *   - no additive mask: scores stay in raw q.k units; the row max m is the raw
 *     max; p = ex2(fma(s, scale*log2e, -m*scale*log2e)).
 *   - additive mask (or a scale <= 0): s = fma(q.k, scale, mask) in natural
 *     units (one rounding, the mask added after the scale as the contract
 *     says; mask 0 without one); p = ex2((s-m)*log2e).
 *     A -inf mask entry or a hidden key gives s = -inf (selected, not added).
 *   - ex2 is ex2.approx.ftz.f32; results below 2^-126 flush to 0.
 *   - the row sum l adds the fp32 p before they are rounded for the P.V product.
 *   - a row with no visible key keeps m = -inf, l = 0: O = 0, LSE = -inf.
 *   - LSE = m*scale + log(l) (natural log, logf), or m + log(l) with a mask.
 *   - O is rescaled by 2^(m_old - m_new) after every key block; a row whose
 *     max did not move has exactly 2^0 = 1, and x * 1 = x changes no bit.
 *     (Skipping the multiplications behind a warp vote was 4-5% slower at
 *     D = 128: bench/RESULTS-2026-11-23-fwd.md.)
 * Non-finite inputs: a hidden key contributes nothing (flash_api.h).
 *   - K/V rows outside the query block's visible key range and past Sk are
 *     zero-filled by cp.async (never read).
 *   - K: hidden scores are replaced by -inf (selected, never added to) before
 *     the row max, so a NaN/Inf q.k of a hidden key reaches neither m, l nor P.
 *   - V: P = 0 at a hidden key, but 0 * NaN = NaN in the P.V mma. Only boundary
 *     blocks (some key hidden from some row of the CTA: causal diagonal, window
 *     edge, tail, every block with an additive mask) can hold such a key. For
 *     those, the block's first barrier waits for V too, each thread tests the
 *     V chunks it copied itself (exponent bits all ones) and replaces NaN/Inf
 *     there by 0 in shared memory (rare), and the barrier ORs the result
 *     (__syncthreads_or); a hit writes a flag in pinned host memory. After the kernel the host reads the flag (no
 *     device work on the common path) and, when raised, runs a fix-up that adds
 *     to every row the exact IEEE value of its visible NaN/Inf V entries
 *     (flash_fwd_fix_nonfinite_v: NaN, +Inf or -Inf per column). Rows that see
 *     none are not touched, so they are bitwise what they would be without
 *     the NaN/Inf. Interior blocks (every row sees every key) need no test and
 *     multiply visible NaN/Inf in the mma (p * Inf = Inf; a p that rounded to
 *     0 gives 0 * Inf = NaN there, as the arithmetic says).
 *   - l = NaN (a visible NaN score) gives O = NaN and LSE = NaN, not the
 *     empty-row result (only l == 0 means no visible key).
 * Every offset into a tensor is int64; positions inside a sequence are int32
 * (seqlens up to 2^31 - 1024, checked on the host).
 */
#ifndef FLASHCHECK_CUDA_FWD_COMMON_CUH
#define FLASHCHECK_CUDA_FWD_COMMON_CUH
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/common/gmma.h"
#include "kernels/cuda/common/limits.h"
#include "kernels/cuda/common/ptx.h"
#include "kernels/cuda/fwd/fwd_tiles.h"

// ----------------------------------------------------------------------------
// kernel parameters

typedef struct {
    const uint16_t *q, *k, *v;  /* fp16 or bf16 bit patterns */
    uint16_t *o;
    float *lse;
    const float *mask;          /* NULL: no additive mask */
    int64_t q_sb, q_ss, q_sh;   /* strides in elements: batch, seq, head (dim stride is 1) */
    int64_t k_sb, k_ss, k_sh;
    int64_t v_sb, v_ss, v_sh;
    int64_t o_sb, o_ss, o_sh;
    int64_t lse_sb, lse_sh, lse_ss;
    int64_t mask_sb, mask_sh, mask_sq, mask_sk;
    int seqlen_q, seqlen_k;
    int heads_q, group;         /* group = heads_q / heads_kv */
    int bh_total;               /* batch * heads_q */
    int head_dim;               /* the real head dim of Q and K, Dqk (<= the tile's HD, multiple of 8) */
    int head_dim_v;             /* the real head dim of V and O, Dv (<= the tile's HV, multiple of 8) */
    float scale;                /* softmax scale */
    float scale_log2;           /* scale * log2(e) */
    /* visibility of key j to row i: lo(i) <= j <= hi(i), with
       hi(i) = i + hi_off when has_hi, lo(i) = i + lo_off when has_lo */
    int has_hi, has_lo;
    int64_t hi_off, lo_off;
    int reverse_m;              /* 1: launch the heaviest (last) query blocks first */
    int *nonfinite_flag;        /* set to 1 when a boundary block's V held NaN/Inf (host-mapped) */
    /* contract v3 (flash_api.h). Dense calls: every pointer NULL, softcap 0, n_split 0. */
    const int *cu_q, *cu_k;     /* device copies of cu_seqlens_q/k [B+1], or NULL */
    const int *used_k;          /* device copy of seqused_k [B], or NULL */
    const int *block_table;     /* device copy of the block table, or NULL (K/V dense) */
    int64_t table_stride;       /* row stride of block_table (entries) */
    int page_size;              /* keys per page when block_table != NULL */
    int diag_br;                /* 1: the diagonals are bottom-right: diag(i) = i + Sk_b - Sq_b */
    int64_t hi_rel, lo_rel;     /* hi(i) = diag(i) + hi_rel (has_hi), lo(i) = diag(i) + lo_rel (has_lo) */
    float softcap;              /* > 0: s = softcap * tanhf(q.k * softcap_scale) + mask (NATURAL kernels) */
    float softcap_scale;        /* fl(scale / softcap) */
    const float *sinks;         /* [heads_q] device, or NULL (NATURAL kernels) */
    /* split-KV (decode): n_split > 0 runs key blocks [z*bps, (z+1)*bps) in CTA z = blockIdx.z and
       writes the unnormalized partials (acc, m, l) instead of O / LSE; fwd_host.cu combines them */
    int n_split, blocks_per_split;
    float *part_o;              /* [n_split][bh_total][seqlen_q][head_dim] fp32 */
    float *part_ml;             /* [n_split][bh_total][seqlen_q][2]: m (kernel units), l */
    /* GQA packing (the decode tile only, fwd_sm80.cu PACK): pack query heads of one KV head share
       a CTA's rows, row r = dh * seqlen_q + i (head h0 + dh, query i); pack divides group and
       pack * seqlen_q <= the tile's rows. 1: one head per CTA. */
    int pack;
} fwd_params;

// ----------------------------------------------------------------------------
// non-finite fp16/bf16 values (exponent bits all ones)

/* Per 16-bit half of w: bit 15 of the half is set iff the half is NaN or Inf.
 * (exponent field + one exponent unit carries into bit 15 only from all ones;
 * the low half cannot carry into the high one.) OR these together, test 0x80008000. */
template <bool BF16>
static __device__ __forceinline__ uint32_t nonfinite_bits(uint32_t w) {
    constexpr uint32_t EXP = BF16 ? 0x7F807F80u : 0x7C007C00u;
    constexpr uint32_t ONE = BF16 ? 0x00800080u : 0x04000400u;
    return ((w & EXP) + ONE) & 0x80008000u;
}

/* 0xFFFF in each half whose bit 15 is set in b (b from nonfinite_bits). */
static __device__ __forceinline__ uint32_t zero_mask(uint32_t b) {
    uint32_t m;
    asm("prmt.b32 %0, %1, 0, 0xBB99;\n" : "=r"(m) : "r"(b));
    return m;
}

// ----------------------------------------------------------------------------
// shared-memory tile layout: rows of HD elements, 16-byte chunks swizzled

/* Byte offset of chunk c (8 elements) of row r in a tile with HD columns.
 * HD/8 a multiple of 8: chunk ^= row & 7 (8 rows of one ldmatrix phase land in
 * 8 distinct 16-byte bank groups). HD/8 = 4 or 12: chunk ^= (row >> 1) & 3,
 * which stays inside each group of 4 chunks and, with the odd/even row offset
 * of 64 bytes, again gives 8 distinct bank groups for 8 consecutive rows. */
template <int HD>
static __device__ __forceinline__ uint32_t swz(int r, int c) {
    constexpr int NCH = HD / 8;
    int pc = (NCH % 8 == 0) ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
    return (uint32_t)(r * HD * 2 + pc * 16);
}

/* The same layout as an XOR on the byte address, for fragment loads whose
 * chunk index is a compile-time even number plus a lane bit: the swizzle only
 * touches address bits 4..6 (4..5 for HD/8 = 4, 12), which are zero in every
 * tile and row start (tiles and rows are 128-byte multiples, 64 for 4/12), so
 *   tile + swz(r, c) = (row_base + (c & ~M) * 16) ^ ((c & M) * 16)
 * with row_base = tile + r * HD * 2 + ((sw(r) ^ lane_bit) * 16), c = c_even + lane_bit.
 * Per fragment that is an add and an XOR of immediates on one register. */
template <int HD>
static __device__ __forceinline__ uint32_t swz_row_base(uint32_t tile, int r, int lane_bit) {
    constexpr int NCH = HD / 8;
    const int sw = (NCH % 8 == 0) ? (r & 7) : ((r >> 1) & 3);
    return tile + (uint32_t)(r * HD * 2) + (uint32_t)((sw ^ lane_bit) * 16);
}
template <int HD>
static __device__ __forceinline__ uint32_t swz_at(uint32_t row_base, int c_even) {
    constexpr int M = ((HD / 8) % 8 == 0) ? 7 : 3;
    return (row_base + (uint32_t)((c_even & ~M) * 16)) ^ (uint32_t)((c_even & M) * 16);
}

/* An opaque copy: the compiler may not hoist address arithmetic on it out of
 * the key loop (hoisted per-fragment addresses cost registers and spills). */
static __device__ __forceinline__ uint32_t opaque(uint32_t x) {
    uint32_t y;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

/* Byte offset of chunk c of row r in a ROWS x HD tile: the swz layout of the
 * sm_80 kernel, or (GMMA) the 64-column-block layout of kernels/cuda/common/gmma.h. */
template <int ROWS, int HD, bool GMMA>
static __device__ __forceinline__ uint32_t tile_off(int r, int c) {
    return GMMA ? gmma_tile_offset<ROWS>(r, c) : swz<HD>(r, c);
}

/* Load ROWS rows of a [seq, HD] slice starting at row0 into smem; rows outside
 * [valid_lo, valid_hi) and columns >= head_dim are zero-filled (nothing read). */
template <int ROWS, int HD, int THREADS, bool GMMA = false>
static __device__ __forceinline__ void load_tile(uint32_t s_base, const uint16_t *g_base, int64_t row_stride,
                                                 int row0, int valid_lo, int valid_hi, int head_dim) {
    constexpr int NCH = HD / 8;
    static_assert((ROWS * NCH) % THREADS == 0, "tile chunks must divide evenly among threads");
    if (THREADS % NCH == 0) {
        // each thread keeps one chunk column and walks rows THREADS/NCH apart
        constexpr int STEP = THREADS % NCH == 0 ? THREADS / NCH : 1;
        const int c = (int)threadIdx.x % NCH, r0 = (int)threadIdx.x / NCH;
        const bool col_ok = c * 8 < head_dim;
        const uint16_t *src = g_base + (int64_t)(row0 + r0) * row_stride + c * 8;
        const int64_t src_step = (int64_t)STEP * row_stride;
        if (row0 >= valid_lo && row0 + ROWS <= valid_hi && head_dim == HD) {  // whole tile valid
#pragma unroll
            for (int it = 0; it < ROWS / STEP; ++it) {
                ptx_cp16(s_base + tile_off<ROWS, HD, GMMA>(r0 + it * STEP, c), src, 16);
                src += src_step;
            }
            return;
        }
#pragma unroll
        for (int it = 0; it < ROWS / STEP; ++it) {
            const int r = r0 + it * STEP, gr = row0 + r;
            const bool ok = col_ok && gr >= valid_lo && gr < valid_hi;
            ptx_cp16(s_base + tile_off<ROWS, HD, GMMA>(r, c), ok ? src : g_base, ok ? 16 : 0);
            src += src_step;
        }
    } else {
#pragma unroll
        for (int it = 0; it < ROWS * NCH / THREADS; ++it) {
            const int idx = it * THREADS + (int)threadIdx.x;
            const int r = idx / NCH, c = idx % NCH;
            const int gr = row0 + r;
            const bool ok = gr >= valid_lo && gr < valid_hi && c * 8 < head_dim;
            const uint16_t *src = ok ? g_base + (int64_t)gr * row_stride + c * 8 : g_base;
            ptx_cp16(s_base + tile_off<ROWS, HD, GMMA>(r, c), src, ok ? 16 : 0);
        }
    }
}

/* The chunks that THIS thread copied into a ROWS x HD tile with load_tile (the
 * same chunk assignment): returns 1 when one holds a NaN/Inf, and rewrites such
 * a chunk in place with its NaN/Inf halves replaced by +0 (rare; a finite chunk
 * is only read). Valid once this thread's own cp.async group of the tile has
 * completed; a barrier must follow before other threads read the tile. */
template <int ROWS, int HD, int THREADS, bool BF16, bool GMMA = false>
static __device__ __forceinline__ uint32_t sanitize_own_chunks(uint32_t s_base) {
    constexpr int NCH = HD / 8;
    constexpr int N = (THREADS % NCH == 0) ? ROWS / (THREADS % NCH == 0 ? THREADS / NCH : 1) : ROWS * NCH / THREADS;
    uint32_t any = 0;
    // opaque: keeps the per-chunk addresses from being hoisted out of the key loop
    const int tx = (int)opaque(threadIdx.x);
#pragma unroll
    for (int it = 0; it < N; ++it) {
        uint32_t addr;
        if (THREADS % NCH == 0) {
            constexpr int STEP = THREADS % NCH == 0 ? THREADS / NCH : 1;
            addr = s_base + tile_off<ROWS, HD, GMMA>(tx / NCH + it * STEP, tx % NCH);
        } else {
            const int idx = it * THREADS + tx;
            addr = s_base + tile_off<ROWS, HD, GMMA>(idx / NCH, idx % NCH);
        }
        uint4 x;
        ptx_ld_shared16(addr, &x);
        const uint32_t bx = nonfinite_bits<BF16>(x.x), by = nonfinite_bits<BF16>(x.y);
        const uint32_t bz = nonfinite_bits<BF16>(x.z), bw = nonfinite_bits<BF16>(x.w);
        if (bx | by | bz | bw) {
            any = 1;
            x.x &= ~zero_mask(bx); x.y &= ~zero_mask(by); x.z &= ~zero_mask(bz); x.w &= ~zero_mask(bw);
            ptx_st_shared16(addr, x);
        }
    }
    return any;
}

/* One (batch, query head): its sequence's lengths, diagonal offsets and slices.
 * Dense: Sq_b = seqlen_q, Sk_b = seqlen_k, slices at b * stride[0]. Varlen (cu_q / cu_k):
 * the packed rows cu[b] .. cu[b+1]-1 (stride[0] ignored). Paged: k_base / v_base are the
 * pools at head hk (the page is added per key row, fwd_kv_row), pages = the table's row b.
 * hi_off / lo_off: hi(i) = i + hi_off, lo(i) = i + lo_off, clamped to [-Sq_b - 1, Sk_b + 1]
 * (a bound past that range changes no row's key range), so they fit int32. */
typedef struct {
    int b, h, hk;
    int sq, sk;                                /* Sq_b, Sk_b */
    int hi_off, lo_off;
    int q_tok0;                                /* cu_q[b] (0 dense): packed row of query 0 */
    const uint16_t *q_base, *k_base, *v_base;
    const int *pages;                          /* block table row of b, or NULL */
} fwd_seq;

static __device__ __forceinline__ int fwd_clamp_off(int64_t off, int sq, int sk) {
    return (int)(off < -(int64_t)sq - 1 ? -(int64_t)sq - 1 : (off > (int64_t)sk + 1 ? (int64_t)sk + 1 : off));
}

static __device__ __forceinline__ fwd_seq fwd_seq_of(const fwd_params &p, int bh) {
    fwd_seq s;
    s.b = bh / p.heads_q;
    s.h = bh % p.heads_q;
    s.hk = s.h / p.group;
    const int b = s.b;
    s.q_tok0 = p.cu_q != NULL ? p.cu_q[b] : 0;
    s.sq = p.cu_q != NULL ? p.cu_q[b + 1] - s.q_tok0 : p.seqlen_q;
    const int k_tok0 = p.cu_k != NULL ? p.cu_k[b] : 0;
    s.sk = p.used_k != NULL ? p.used_k[b] : (p.cu_k != NULL ? p.cu_k[b + 1] - k_tok0 : p.seqlen_k);
    const int64_t diag = p.diag_br ? (int64_t)s.sk - s.sq : 0;
    s.hi_off = fwd_clamp_off(diag + p.hi_rel, s.sq, s.sk);
    s.lo_off = fwd_clamp_off(diag + p.lo_rel, s.sq, s.sk);
    s.q_base = p.q + (p.cu_q != NULL ? (int64_t)s.q_tok0 * p.q_ss : (int64_t)b * p.q_sb) + (int64_t)s.h * p.q_sh;
    if (p.block_table != NULL) {
        s.pages = p.block_table + (int64_t)b * p.table_stride;
        s.k_base = p.k + (int64_t)s.hk * p.k_sh;
        s.v_base = p.v + (int64_t)s.hk * p.v_sh;
    } else {
        s.pages = NULL;
        s.k_base = p.k + (p.cu_k != NULL ? (int64_t)k_tok0 * p.k_ss : (int64_t)b * p.k_sb) + (int64_t)s.hk * p.k_sh;
        s.v_base = p.v + (p.cu_k != NULL ? (int64_t)k_tok0 * p.v_ss : (int64_t)b * p.v_sb) + (int64_t)s.hk * p.v_sh;
    }
    return s;
}

/* Key row j of a K or V slice: dense/packed base + j * row_stride, or paged: the page of j
 * (pages[j / page_size], page_stride = stride[0] of the pool) and its slot. j < Sk_b (>= 0, so
 * for a power-of-two page size j >> log2 and j & (size - 1) are the quotient and remainder). */
static __device__ __forceinline__ const uint16_t *fwd_kv_row(const uint16_t *base, int64_t row_stride,
                                                            int64_t page_stride, const int *pages, int page_size,
                                                            int j) {
    if (pages == NULL) return base + (int64_t)j * row_stride;
    if ((page_size & (page_size - 1)) == 0) {  // a power of two (16, 64, ...): shift and mask, no division
        const int sh = __ffs(page_size) - 1;
        return base + (int64_t)pages[j >> sh] * page_stride + (int64_t)(j & (page_size - 1)) * row_stride;
    }
    return base + (int64_t)pages[j / page_size] * page_stride + (int64_t)(j % page_size) * row_stride;
}

/* The visible keys [lo, hi] of query row i of sequence s (hi = -1: none; rows past Sq_b see nothing). */
static __device__ __forceinline__ void row_key_range(const fwd_params &p, const fwd_seq &s, int i, int *lo, int *hi) {
    const int Sq = s.sq, Sk = s.sk;
    int64_t lo64 = p.has_lo ? (int64_t)i + s.lo_off : 0;
    int64_t hi64 = p.has_hi ? (int64_t)i + s.hi_off : (int64_t)Sk - 1;
    lo64 = lo64 < 0 ? 0 : (lo64 > Sk ? Sk : lo64);
    hi64 = hi64 > (int64_t)Sk - 1 ? (int64_t)Sk - 1 : (hi64 < -1 ? -1 : hi64);
    *lo = (int)lo64;
    *hi = i < Sq ? (int)hi64 : -1;
}

/* Query row i (returned) and head offset dh of tile row r. Not packed: i = m0 + r, dh = 0.
 * Packed (GQA, m0 = 0): r = dh * seqlen_q + i; a row past the pack's heads returns
 * i = seqlen_q (>= Sq_b: a row past the sequence, which sees nothing and is not stored). */
template <bool PACK>
static __device__ __forceinline__ int fwd_row_of(const fwd_params &p, int m0, int r, int *dh) {
    if (!PACK) {
        *dh = 0;
        return m0 + r;
    }
    const int u = r / p.seqlen_q;
    *dh = u < p.pack ? u : 0;
    return u < p.pack ? r - u * p.seqlen_q : p.seqlen_q;
}

/* The Q tile of a packed CTA: row r = dh * seqlen_q + i holds query i of head h0 + dh (rows
 * past Sq_b or past the pack and columns >= head_dim zero-filled, nothing read). */
template <int ROWS, int HD, int THREADS>
static __device__ __forceinline__ void fwd_load_q_packed(uint32_t s_base, const fwd_params &p, const fwd_seq &sq) {
    constexpr int NCH = HD / 8;
    static_assert((ROWS * NCH) % THREADS == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int it = 0; it < ROWS * NCH / THREADS; ++it) {
        const int idx = it * THREADS + (int)threadIdx.x;
        const int r = idx / NCH, c = idx % NCH;
        int dh;
        const int i = fwd_row_of<true>(p, 0, r, &dh);
        const bool ok = i < sq.sq && c * 8 < p.head_dim;
        const uint16_t *src = ok ? sq.q_base + (int64_t)dh * p.q_sh + (int64_t)i * p.q_ss + c * 8 : sq.q_base;
        ptx_cp16(s_base + swz<HD>(r, c), src, ok ? 16 : 0);
    }
}

/* load_tile for K/V: dense or packed (pages == NULL) as load_tile; paged: a page size that
 * is a multiple of ROWS puts the whole tile in one page (one table read); any other page
 * size gathers per key row (fwd_kv_row). Only rows in [valid_lo, valid_hi) (< Sk_b) read
 * the table; the others are zero-filled as in load_tile. */
template <int ROWS, int HD, int THREADS, bool GMMA = false>
static __device__ __forceinline__ void load_kv_tile(uint32_t s_base, const uint16_t *g_base, int64_t row_stride,
                                                    int64_t page_stride, const int *pages, int page_size, int row0,
                                                    int valid_lo, int valid_hi, int head_dim) {
    if (pages == NULL) {
        load_tile<ROWS, HD, THREADS, GMMA>(s_base, g_base, row_stride, row0, valid_lo, valid_hi, head_dim);
        return;
    }
    if (page_size % ROWS == 0) {  // row0 is a multiple of ROWS: the tile lies in one page
        const uint16_t *base = g_base + (int64_t)pages[row0 / page_size] * page_stride;
        const int slot0 = row0 % page_size;
        load_tile<ROWS, HD, THREADS, GMMA>(s_base, base - (int64_t)row0 * row_stride + (int64_t)slot0 * row_stride,
                                           row_stride, row0, valid_lo, valid_hi, head_dim);
        return;
    }
    constexpr int NCH = HD / 8;
    static_assert((ROWS * NCH) % THREADS == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int it = 0; it < ROWS * NCH / THREADS; ++it) {
        const int idx = it * THREADS + (int)threadIdx.x;
        const int r = idx / NCH, c = idx % NCH;
        const int gr = row0 + r;
        const bool ok = gr >= valid_lo && gr < valid_hi && c * 8 < head_dim;
        const uint16_t *src = ok ? fwd_kv_row(g_base, row_stride, page_stride, pages, page_size, gr) + c * 8 : g_base;
        ptx_cp16(s_base + tile_off<ROWS, HD, GMMA>(r, c), src, ok ? 16 : 0);
    }
}

// ----------------------------------------------------------------------------
// scores -> P and the epilogue (shared by the sm_80 and the sm_90a kernels)
//
// Both kernels hold S, O and the row statistics in the mma.sync C layout: per
// m16 tile mt of a warp, a thread owns rows g and g + 8 (hf = 0, 1) and, per
// n8 tile, columns 2t and 2t + 1 (e = 0, 1): acc[mt][nt][hf * 2 + e].

/* A CTA's sequence (fwd_seq) and the key blocks its query block [m0, m0 + BM) visits
 * (visibility is monotone in the row): keys [kv_lo, kv_hi), blocks n_begin .. n_end-1 of BN keys (none
 * when n_end == n_begin); hi_first / lo_last: the first row's upper and the last
 * row's lower visibility bound (a block inside both needs no element mask). With split-KV
 * (p.n_split > 0) the blocks are cut to split z's range [z * bps, (z + 1) * bps).
 * active = 0: the query block starts past Sq_b (a varlen sequence shorter than the grid). */
typedef struct {
    fwd_seq s;
    int active;
    int kv_lo, kv_hi, n_begin, n_end;
    int64_t hi_first, lo_last;
} fwd_cta_work;

/* What one CTA works on for the pair bh = b * heads_q + h and the query block at m0. */
template <int BM, int BN>
static __device__ __forceinline__ fwd_cta_work fwd_cta_work_of(const fwd_params &p, int bh, int m0) {
    fwd_cta_work r;
    r.s = fwd_seq_of(p, bh);
    const int Sq = r.s.sq, Sk = r.s.sk;
    r.active = m0 < Sq;
    const int last_row = min(m0 + BM, Sq) - 1;
    int64_t key_lo = p.has_lo ? (int64_t)m0 + r.s.lo_off : 0;
    int64_t key_hi = p.has_hi ? (int64_t)last_row + r.s.hi_off : (int64_t)Sk - 1;
    if (key_lo < 0) key_lo = 0;
    if (key_hi > (int64_t)Sk - 1) key_hi = (int64_t)Sk - 1;
    const bool any_key = key_hi >= key_lo;
    r.kv_lo = any_key ? (int)key_lo : 0;
    r.kv_hi = any_key ? (int)key_hi + 1 : 0;
    r.n_begin = r.kv_lo / BN;
    r.n_end = any_key ? (r.kv_hi - 1) / BN + 1 : r.n_begin;
    if (p.n_split > 0) {
        const int z0 = (int)blockIdx.z * p.blocks_per_split, z1 = z0 + p.blocks_per_split;
        r.n_begin = max(r.n_begin, z0);
        r.n_end = min(r.n_end, z1);
        if (r.n_end < r.n_begin) r.n_end = r.n_begin;
    }
    r.hi_first = p.has_hi ? (int64_t)m0 + r.s.hi_off : (int64_t)Sk - 1;
    r.lo_last = p.has_lo ? (int64_t)last_row + r.s.lo_off : 0;
    return r;
}

/* Element mask of one key block: hidden keys -> -inf (selected, never added);
 * natural units: s = fmaf(q.k, scale, mask), or with softcap s = fmaf(softcap,
 * tanhf(q.k * softcap_scale), mask) (softcap_scale = fl(scale / softcap); tanhf: CUDA's,
 * 2 ulp), or -inf for a -inf mask entry.
 * row_g: the query row of (mt = 0, hf = 0) of this thread (m0 + warp row base + g; PACK: the
 * tile row, mapped by fwd_row_of);
 * key_t: the key of (nt = 0, e = 0) (key0 + 2t). */
template <int MT, int NT, bool NATURAL, bool PACK = false>
static __device__ __forceinline__ void fwd_mask_scores(const fwd_params &p, const fwd_seq &sq, float (&acc_s)[MT][NT][4],
                                                       int row_g, int key_t) {
    const int Sq = sq.sq;
    const bool use_mask = p.mask != NULL;
    const bool capped = NATURAL && p.softcap > 0.0f;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            // this row's visible keys [lo, hi] (rows past Sq see nothing)
            int dh;
            const int i = fwd_row_of<PACK>(p, 0, row_g + mt * 16 + hf * 8, &dh);
            int row_lo, row_hi;
            row_key_range(p, sq, i, &row_lo, &row_hi);
            const float *mrow = use_mask && i < Sq
                                    ? p.mask + (int64_t)sq.b * p.mask_sb + (int64_t)(sq.h + dh) * p.mask_sh +
                                          (int64_t)i * p.mask_sq
                                    : NULL;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = key_t + nt * 8 + e;
                    float s = acc_s[mt][nt][hf * 2 + e];
                    const bool vis = j >= row_lo && j <= row_hi;
                    if (NATURAL) {
                        float mv = !vis ? -INFINITY : (mrow ? mrow[(int64_t)j * p.mask_sk] : 0.0f);
                        if (capped) s = (mv == -INFINITY) ? -INFINITY : fmaf(p.softcap, tanhf(s * p.softcap_scale), mv);
                        else s = (mv == -INFINITY) ? -INFINITY : fmaf(s, p.scale, mv);
                    } else if (!vis) {
                        s = -INFINITY;
                    }
                    acc_s[mt][nt][hf * 2 + e] = s;
                }
        }
}

/* The row statistics a query block starts from: m = -inf, l = 0; with sinks (NATURAL
 * kernels, split 0 only) m = sink_h and l = exp(sink_h - m) = 1 on the quad's t == 0 lane
 * (l is a per-thread partial sum), so the sink joins the denominator with the online
 * softmax's own rescaling and has no value (O starts at 0). A -inf sink is no sink.
 * PACK: each row takes its own head's sink (row_g as in fwd_mask_scores). */
template <int MT, bool PACK = false>
static __device__ __forceinline__ void fwd_init_rows(const fwd_params &p, int h, int t, float (&row_m)[MT][2],
                                                     float (&row_l)[MT][2], int row_g = 0) {
    const bool sinks = p.sinks != NULL && (p.n_split == 0 || blockIdx.z == 0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float m0 = -INFINITY, l0 = 0.0f;
            if (sinks) {
                int dh = 0;
                if (PACK) (void)fwd_row_of<true>(p, 0, row_g + mt * 16 + hf * 8, &dh);
                const float sk = p.sinks[h + dh];
                if (sk != -INFINITY) {
                    m0 = sk;
                    l0 = t == 0 ? 1.0f : 0.0f;
                }
            }
            row_m[mt][hf] = m0;
            row_l[mt][hf] = l0;
        }
}

/* Online softmax over one key block: new row max m (quad shuffles), p = 2^(...)
 * in place of the scores, l = l * alpha + sum(p) (per-thread partial sums; the
 * quad adds them in the epilogue), O *= alpha with alpha = 2^(m_old - m_new).
 * Rescale O every block: alpha is exactly 1 for a row whose max did not move
 * (x * 1 = x, no bit changes). A warp vote that skipped the multiplications
 * when no row moved was slower (it splits the block's code at a branch the
 * scheduler cannot cross). */
template <int MT, int NT, int DT, bool NATURAL, bool TREE_MAX = false>
static __device__ __forceinline__ void fwd_softmax_step(const fwd_params &p, float (&acc_s)[MT][NT][4],
                                                        float (&row_m)[MT][2], float (&row_l)[MT][2],
                                                        float (&acc_o)[MT][DT][4]) {
    constexpr float LOG2E = 1.4426950408889634f;
    float row_alpha[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float mx = row_m[mt][hf];
            if constexpr (TREE_MAX) {
                // the same maximum by a pairwise tree (fmaxf is exact, associative and
                // commutative, and drops a NaN operand in any order): depth log2(NT) + 2 instead
                // of a chain of NT + 1 dependent FMNMX (the warp-specialized kernel, whose
                // softmax latency is on its critical path)
                float part[NT];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) part[nt] = fmaxf(acc_s[mt][nt][hf * 2], acc_s[mt][nt][hf * 2 + 1]);
#pragma unroll
                for (int wd = 1; wd < NT; wd *= 2)
#pragma unroll
                    for (int nt = 0; nt + wd < NT; nt += 2 * wd) part[nt] = fmaxf(part[nt], part[nt + wd]);
                mx = fmaxf(mx, part[0]);
            } else {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    mx = fmaxf(mx, fmaxf(acc_s[mt][nt][hf * 2], acc_s[mt][nt][hf * 2 + 1]));
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_old = row_m[mt][hf];
            row_m[mt][hf] = mx;
            float alpha, sum = 0.0f;
            if (NATURAL) {
                // natural units: p = 2^((s - m) log2e); s - m <= 0 cannot overflow
                const float m_use = mx == -INFINITY ? 0.0f : mx;
                alpha = mx == -INFINITY ? 1.0f : ptx_ex2((m_old - mx) * LOG2E);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float pv = ptx_ex2((acc_s[mt][nt][hf * 2 + e] - m_use) * LOG2E);
                        acc_s[mt][nt][hf * 2 + e] = pv;
                        sum += pv;
                    }
            } else {
                // raw q.k units, log2(e) folded into the scale: one FFMA + one ex2
                const float m_scaled = mx == -INFINITY ? 0.0f : mx * p.scale_log2;
                alpha = mx == -INFINITY ? 1.0f : ptx_ex2(m_old * p.scale_log2 - m_scaled);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float pv = ptx_ex2(fmaf(acc_s[mt][nt][hf * 2 + e], p.scale_log2, -m_scaled));
                        acc_s[mt][nt][hf * 2 + e] = pv;
                        sum += pv;
                    }
            }
            row_l[mt][hf] = row_l[mt][hf] * alpha + sum;  // per-thread partial sum
            row_alpha[mt][hf] = alpha;
        }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] *= row_alpha[mt][e >> 1];
}

/* P rounded (RN) to the input dtype as m16n8k16 A fragments (k16 step kk = two n8 tiles). */
template <int MT, int KP, bool BF16>
static __device__ __forceinline__ void fwd_pack_p(const float (&acc_s)[MT][2 * KP][4], uint32_t (&pa)[MT][KP][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KP; ++kk) {
            pa[mt][kk][0] = ptx_pack2<BF16>(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
            pa[mt][kk][1] = ptx_pack2<BF16>(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
            pa[mt][kk][2] = ptx_pack2<BF16>(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
            pa[mt][kk][3] = ptx_pack2<BF16>(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
        }
}

/* Epilogue of one query block: O / l rounded (RN) to the dtype, staged in this
 * warp's own WM rows of the tile at sO (rows of HD elements, swz layout; the
 * caller's barrier has retired every read of it), then 16-byte stores; LSE by
 * the t == 0 lane of each row; HD here is the O tile's padded width (the kernel's HV), columns
 * < head_dim_v stored. l == 0: no visible key (O = 0, LSE = -inf);
 * l = NaN (a visible NaN score) stays NaN. */
template <int HD, int MT, int WM, bool BF16, bool NATURAL, bool PACK = false>
static __device__ __forceinline__ void fwd_store_o_lse(const fwd_params &p, const fwd_seq &sq,
                                                       const float (&acc_o)[MT][HD / 8][4],
                                                       const float (&row_m)[MT][2], const float (&row_l)[MT][2],
                                                       uint32_t sO, int m0, int warp, int lane) {
    constexpr int DT = HD / 8, NCH = HD / 8;
    const int g = lane >> 2, t = lane & 3, Sq = sq.sq;
    // packed (varlen) rows: O row cu_q[b] + i, LSE (h, cu_q[b] + i); dense: batch strides
    const int64_t lse_b = p.cu_q != NULL ? (int64_t)sq.q_tok0 * p.lse_ss : (int64_t)sq.b * p.lse_sb;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float l = row_l[mt][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l == 0.0f ? 0.0f : 1.0f / l;
            const int r = warp * WM + mt * 16 + g + hf * 8;
            int dh;
            const int i = fwd_row_of<PACK>(p, m0, r, &dh);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                uint32_t v = ptx_pack2<BF16>(acc_o[mt][dt][hf * 2] * inv, acc_o[mt][dt][hf * 2 + 1] * inv);
                ptx_st_shared32(sO + swz<HD>(r, dt) + t * 4, v);
            }
            if (t == 0 && i < Sq) {
                const float m = row_m[mt][hf];
                float lse;
                if (l == 0.0f) lse = -INFINITY;
                else lse = (NATURAL ? m : m * p.scale) + logf(l);
                p.lse[lse_b + (int64_t)(sq.h + dh) * p.lse_sh + (int64_t)i * p.lse_ss] = lse;
            }
        }
    __syncwarp();
    uint16_t *o_base = p.o + (p.cu_q != NULL ? (int64_t)sq.q_tok0 * p.o_ss : (int64_t)sq.b * p.o_sb) +
                       (int64_t)sq.h * p.o_sh;
#pragma unroll
    for (int it = 0; it < WM * NCH / 32; ++it) {
        const int idx = it * 32 + lane;
        const int r = warp * WM + idx / NCH, c = idx % NCH;
        int dh;
        const int i = fwd_row_of<PACK>(p, m0, r, &dh);
        if (i < Sq && c * 8 < p.head_dim_v) {
            uint4 v;
            ptx_ld_shared16(sO + swz<HD>(r, c), &v);
            ptx_st_global16(o_base + (int64_t)dh * p.o_sh + (int64_t)i * p.o_ss + c * 8, v);
        }
    }
}

/* Split-KV epilogue (HD: the O tile's padded width, HV of the kernel): the unnormalized partials of split z = blockIdx.z for rows i < Sq_b:
 * acc (fp32, as accumulated), m (the kernel's units) and l (the quad's sum), for
 * fwd_host.cu's combine, which rescales them exactly as the key loop rescales (one more
 * rescale per row) and then divides and rounds as fwd_store_o_lse does. */
template <int HD, int MT, int WM, bool PACK = false>
static __device__ __forceinline__ void fwd_store_partial(const fwd_params &p, const fwd_seq &sq, int bh,
                                                         const float (&acc_o)[MT][HD / 8][4],
                                                         const float (&row_m)[MT][2], const float (&row_l)[MT][2],
                                                         int m0, int warp, int lane) {
    constexpr int DT = HD / 8;
    const int g = lane >> 2, t = lane & 3;
    const int64_t row0 = ((int64_t)blockIdx.z * p.bh_total + bh) * p.seqlen_q;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float l = row_l[mt][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            int dh;
            const int i = fwd_row_of<PACK>(p, m0, warp * WM + mt * 16 + g + hf * 8, &dh);
            if (i >= sq.sq) continue;
            const int64_t row = row0 + (int64_t)dh * p.seqlen_q + i;  // the pair bh + dh
            float *po = p.part_o + row * p.head_dim_v;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                const int d = dt * 8 + 2 * t;
                if (d < p.head_dim_v) *(float2 *)(po + d) = make_float2(acc_o[mt][dt][hf * 2], acc_o[mt][dt][hf * 2 + 1]);
            }
            if (t == 0) *(float2 *)(p.part_ml + row * 2) = make_float2(row_m[mt][hf], l);
        }
}

typedef void (*fwd_kernel_fn)(const fwd_params);

/* The kernels of one family for a tile, a dtype and the score units (fwd_sm80.cu,
 * fwd_sm90.cu); NULL when the family has no kernel for that tile. */
fwd_kernel_fn fwd_sm80_kernel(const fwd_tile *t, int bf16, int natural);
fwd_kernel_fn fwd_sm90_kernel(int hd, int bf16, int natural);

#endif /* FLASHCHECK_CUDA_FWD_COMMON_CUH */
