/* flash_fwd.cu: the CUDA forward kernels and fa_cuda_forward.
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
 *     D = 128: bench/RESULTS.md.)
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
 * FWD_NONFINITE_GUARD=0 (compile flag) builds the old, leaking kernel for the
 * regression test's demonstration; the default is 1.
 * Every offset into a tensor is int64; positions inside a sequence are int32
 * (seqlens up to 2^31 - 1024, checked on the host).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>

#include <cuda_fp16.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/sm90/gmma.h"

/* Unroll factor of the k loop of S = Q K^T (register pressure vs. ILP). */
#ifndef FWD_QK_UNROLL
#define FWD_QK_UNROLL 16
#endif
static constexpr int fwd_qk_unroll = FWD_QK_UNROLL;

/* Largest head dim (also in the host limits below). */
#define FWD_LIMITS_MAX_HEAD_DIM_DEV 256

/* 1: hidden keys with non-finite V cannot leak (see the header). 0: the old kernel (tests only). */
#ifndef FWD_NONFINITE_GUARD
#define FWD_NONFINITE_GUARD 1
#endif

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
    int head_dim;               /* the real head dim (<= the tile's HD, multiple of 8) */
    float scale;                /* softmax scale */
    float scale_log2;           /* scale * log2(e) */
    /* visibility of key j to row i: lo(i) <= j <= hi(i), with
       hi(i) = i + hi_off when has_hi, lo(i) = i + lo_off when has_lo */
    int has_hi, has_lo;
    int64_t hi_off, lo_off;
    int reverse_m;              /* 1: launch the heaviest (last) query blocks first */
    int *nonfinite_flag;        /* set to 1 when a boundary block's V held NaN/Inf (host-mapped) */
} fwd_params;

// ----------------------------------------------------------------------------
// PTX helpers

static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes gmem -> smem, asynchronously; src_bytes = 0 writes zeros and reads nothing. */
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
static __device__ __forceinline__ void cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
static __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* c += a * b, m16n8k16, fp32 accumulate. */
template <bool BF16>
static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (BF16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

/* Two floats -> two fp16/bf16 (RN) packed, lo in the low half. */
template <bool BF16>
static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t r;
    if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 2^x, ex2.approx.ftz.f32: ex2(-inf) = +0. */
static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ void ld_shared16(uint32_t addr, uint4 *v) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v->x), "=r"(v->y), "=r"(v->z), "=r"(v->w)
                 : "r"(addr));
}
static __device__ __forceinline__ void st_shared32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v));
}
static __device__ __forceinline__ void st_global16(void *p, uint4 v) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}

static __device__ __forceinline__ void st_shared16(uint32_t addr, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

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
 * sm_80 kernel, or (GMMA) the 64-column-block layout of kernels/cuda/sm90/gmma.h. */
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
                cp_async16(s_base + tile_off<ROWS, HD, GMMA>(r0 + it * STEP, c), src, 16);
                src += src_step;
            }
            return;
        }
#pragma unroll
        for (int it = 0; it < ROWS / STEP; ++it) {
            const int r = r0 + it * STEP, gr = row0 + r;
            const bool ok = col_ok && gr >= valid_lo && gr < valid_hi;
            cp_async16(s_base + tile_off<ROWS, HD, GMMA>(r, c), ok ? src : g_base, ok ? 16 : 0);
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
            cp_async16(s_base + tile_off<ROWS, HD, GMMA>(r, c), src, ok ? 16 : 0);
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
        ld_shared16(addr, &x);
        const uint32_t bx = nonfinite_bits<BF16>(x.x), by = nonfinite_bits<BF16>(x.y);
        const uint32_t bz = nonfinite_bits<BF16>(x.z), bw = nonfinite_bits<BF16>(x.w);
        if (bx | by | bz | bw) {
            any = 1;
            x.x &= ~zero_mask(bx); x.y &= ~zero_mask(by); x.z &= ~zero_mask(bz); x.w &= ~zero_mask(bw);
            st_shared16(addr, x);
        }
    }
    return any;
}

/* The visible keys [lo, hi] of query row i (hi = -1: none; rows past Sq see nothing). */
static __device__ __forceinline__ void row_key_range(const fwd_params &p, int i, int *lo, int *hi) {
    const int Sq = p.seqlen_q, Sk = p.seqlen_k;
    int64_t lo64 = p.has_lo ? (int64_t)i + p.lo_off : 0;
    int64_t hi64 = p.has_hi ? (int64_t)i + p.hi_off : (int64_t)Sk - 1;
    lo64 = lo64 < 0 ? 0 : (lo64 > Sk ? Sk : lo64);
    hi64 = hi64 > (int64_t)Sk - 1 ? (int64_t)Sk - 1 : (hi64 < -1 ? -1 : hi64);
    *lo = (int)lo64;
    *hi = i < Sq ? (int)hi64 : -1;
}

// ----------------------------------------------------------------------------
// scores -> P and the epilogue (shared by the sm_80 and the sm_90a kernels)
//
// Both kernels hold S, O and the row statistics in the mma.sync C layout: per
// m16 tile mt of a warp, a thread owns rows g and g + 8 (hf = 0, 1) and, per
// n8 tile, columns 2t and 2t + 1 (e = 0, 1): acc[mt][nt][hf * 2 + e].

/* A CTA's (batch, head) and the key blocks its query block [m0, m0 + BM) visits
 * (visibility is monotone in the row): keys [kv_lo, kv_hi), blocks n_begin .. n_end-1 of BN keys (none
 * when n_end == n_begin); hi_first / lo_last: the first row's upper and the last
 * row's lower visibility bound (a block inside both needs no element mask). */
typedef struct {
    int b, h;                                  /* batch, query head */
    const uint16_t *q_base, *k_base, *v_base;  /* their slices (K/V: head h / group) */
    int kv_lo, kv_hi, n_begin, n_end;
    int64_t hi_first, lo_last;
} fwd_cta_work;

/* What one CTA works on for the pair bh = b * heads_q + h and the query block at m0. */
template <int BM, int BN>
static __device__ __forceinline__ fwd_cta_work fwd_cta_work_of(const fwd_params &p, int bh, int m0) {
    const int Sq = p.seqlen_q, Sk = p.seqlen_k;
    fwd_cta_work r;
    r.b = bh / p.heads_q;
    r.h = bh % p.heads_q;
    const int hk = r.h / p.group;
    r.q_base = p.q + (int64_t)r.b * p.q_sb + (int64_t)r.h * p.q_sh;
    r.k_base = p.k + (int64_t)r.b * p.k_sb + (int64_t)hk * p.k_sh;
    r.v_base = p.v + (int64_t)r.b * p.v_sb + (int64_t)hk * p.v_sh;
    const int last_row = min(m0 + BM, Sq) - 1;
    int64_t key_lo = p.has_lo ? (int64_t)m0 + p.lo_off : 0;
    int64_t key_hi = p.has_hi ? (int64_t)last_row + p.hi_off : (int64_t)Sk - 1;
    if (key_lo < 0) key_lo = 0;
    if (key_hi > (int64_t)Sk - 1) key_hi = (int64_t)Sk - 1;
    const bool any_key = key_hi >= key_lo;
    r.kv_lo = any_key ? (int)key_lo : 0;
    r.kv_hi = any_key ? (int)key_hi + 1 : 0;
    r.n_begin = r.kv_lo / BN;
    r.n_end = any_key ? (r.kv_hi - 1) / BN + 1 : r.n_begin;
    r.hi_first = p.has_hi ? (int64_t)m0 + p.hi_off : (int64_t)Sk - 1;
    r.lo_last = p.has_lo ? (int64_t)last_row + p.lo_off : 0;
    return r;
}

/* Element mask of one key block: hidden keys -> -inf (selected, never added);
 * natural units: s = fmaf(q.k, scale, mask) or -inf for a -inf mask entry.
 * row_g: the query row of (mt = 0, hf = 0) of this thread (m0 + warp row base + g);
 * key_t: the key of (nt = 0, e = 0) (key0 + 2t). */
template <int MT, int NT, bool NATURAL>
static __device__ __forceinline__ void fwd_mask_scores(const fwd_params &p, float (&acc_s)[MT][NT][4], int row_g,
                                                       int key_t, int b, int h) {
    const int Sq = p.seqlen_q;
    const bool use_mask = p.mask != NULL;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            // this row's visible keys [lo, hi] (rows past Sq see nothing)
            const int i = row_g + mt * 16 + hf * 8;
            int row_lo, row_hi;
            row_key_range(p, i, &row_lo, &row_hi);
            const float *mrow = use_mask && i < Sq
                                    ? p.mask + (int64_t)b * p.mask_sb + (int64_t)h * p.mask_sh + (int64_t)i * p.mask_sq
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
                        s = (mv == -INFINITY) ? -INFINITY : fmaf(s, p.scale, mv);
                    } else if (!vis) {
                        s = -INFINITY;
                    }
                    acc_s[mt][nt][hf * 2 + e] = s;
                }
        }
}

/* Online softmax over one key block: new row max m (quad shuffles), p = 2^(...)
 * in place of the scores, l = l * alpha + sum(p) (per-thread partial sums; the
 * quad adds them in the epilogue), O *= alpha with alpha = 2^(m_old - m_new).
 * Rescale O every block: alpha is exactly 1 for a row whose max did not move
 * (x * 1 = x, no bit changes). A warp vote that skipped the multiplications
 * when no row moved was slower (it splits the block's code at a branch the
 * scheduler cannot cross). */
template <int MT, int NT, int DT, bool NATURAL>
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
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                mx = fmaxf(mx, fmaxf(acc_s[mt][nt][hf * 2], acc_s[mt][nt][hf * 2 + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_old = row_m[mt][hf];
            row_m[mt][hf] = mx;
            float alpha, sum = 0.0f;
            if (NATURAL) {
                // natural units: p = 2^((s - m) log2e); s - m <= 0 cannot overflow
                const float m_use = mx == -INFINITY ? 0.0f : mx;
                alpha = mx == -INFINITY ? 1.0f : ex2((m_old - mx) * LOG2E);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float pv = ex2((acc_s[mt][nt][hf * 2 + e] - m_use) * LOG2E);
                        acc_s[mt][nt][hf * 2 + e] = pv;
                        sum += pv;
                    }
            } else {
                // raw q.k units, log2(e) folded into the scale: one FFMA + one ex2
                const float m_scaled = mx == -INFINITY ? 0.0f : mx * p.scale_log2;
                alpha = mx == -INFINITY ? 1.0f : ex2(m_old * p.scale_log2 - m_scaled);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float pv = ex2(fmaf(acc_s[mt][nt][hf * 2 + e], p.scale_log2, -m_scaled));
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
            pa[mt][kk][0] = pack2<BF16>(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
            pa[mt][kk][1] = pack2<BF16>(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
            pa[mt][kk][2] = pack2<BF16>(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
            pa[mt][kk][3] = pack2<BF16>(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
        }
}

/* Epilogue of one query block: O / l rounded (RN) to the dtype, staged in this
 * warp's own WM rows of the tile at sO (rows of HD elements, swz layout; the
 * caller's barrier has retired every read of it), then 16-byte stores; LSE by
 * the t == 0 lane of each row. l == 0: no visible key (O = 0, LSE = -inf);
 * l = NaN (a visible NaN score) stays NaN. */
template <int HD, int MT, int WM, bool BF16, bool NATURAL>
static __device__ __forceinline__ void fwd_store_o_lse(const fwd_params &p, const float (&acc_o)[MT][HD / 8][4],
                                                       const float (&row_m)[MT][2], const float (&row_l)[MT][2],
                                                       uint32_t sO, int m0, int warp, int lane, int b, int h) {
    constexpr int DT = HD / 8, NCH = HD / 8;
    const int g = lane >> 2, t = lane & 3, Sq = p.seqlen_q;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float l = row_l[mt][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l == 0.0f ? 0.0f : 1.0f / l;
            const int r = warp * WM + mt * 16 + g + hf * 8;
            const int i = m0 + r;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                uint32_t v = pack2<BF16>(acc_o[mt][dt][hf * 2] * inv, acc_o[mt][dt][hf * 2 + 1] * inv);
                st_shared32(sO + swz<HD>(r, dt) + t * 4, v);
            }
            if (t == 0 && i < Sq) {
                const float m = row_m[mt][hf];
                float lse;
                if (l == 0.0f) lse = -INFINITY;
                else lse = (NATURAL ? m : m * p.scale) + logf(l);
                p.lse[(int64_t)b * p.lse_sb + (int64_t)h * p.lse_sh + (int64_t)i * p.lse_ss] = lse;
            }
        }
    __syncwarp();
    uint16_t *o_base = p.o + (int64_t)b * p.o_sb + (int64_t)h * p.o_sh;
#pragma unroll
    for (int it = 0; it < WM * NCH / 32; ++it) {
        const int idx = it * 32 + lane;
        const int r = warp * WM + idx / NCH, c = idx % NCH;
        const int i = m0 + r;
        if (i < Sq && c * 8 < p.head_dim) {
            uint4 v;
            ld_shared16(sO + swz<HD>(r, c), &v);
            st_global16(o_base + (int64_t)i * p.o_ss + c * 8, v);
        }
    }
}

// ----------------------------------------------------------------------------
// the kernel

/* CTAs per SM the register cap is sized for: as many as shared memory admits
 * (H100: 227 KB per SM for blocks), at most 3; two for 32 rows per warp (255
 * registers for the 128-float O accumulator), one for 8-warp CTAs. */
static constexpr int fwd_min_blocks(int hd, int bm, int bn, int nw) {
    return nw == 8 ? 1 : (bm / nw == 32 ? 2 : ((232448 / ((bm + 4 * bn) * hd * 2)) >= 3 ? 3 : ((232448 / ((bm + 4 * bn) * hd * 2)) >= 2 ? 2 : 1)));
}

#ifdef FWD_DEV_ONE_VARIANT
#ifndef FWD_DEV_BM
#define FWD_DEV_BM 128
#define FWD_DEV_BN 64
#define FWD_DEV_NW 4
#endif
#ifdef FWD_DEV_MINB
#define FWD_MIN_BLOCKS(hd, bm, bn, nw) FWD_DEV_MINB
#endif
#endif
#ifndef FWD_MIN_BLOCKS
#define FWD_MIN_BLOCKS(hd, bm, bn, nw) fwd_min_blocks(hd, bm, bn, nw)
#endif

template <int HD, int BM, int BN, int NW, bool BF16, bool NATURAL>
__global__ void __launch_bounds__(NW * 32, FWD_MIN_BLOCKS(HD, BM, BN, NW)) flash_fwd_kernel(const fwd_params p) {
    constexpr int THREADS = NW * 32;
    constexpr int WM = BM / NW;  // rows per warp
    constexpr int MT = WM / 16;  // m16 tiles per warp
    constexpr int NT = BN / 8;   // n8 tiles of S per warp
    constexpr int DT = HD / 8;   // n8 tiles of O per warp
    constexpr int KQ = HD / 16;  // k16 steps of Q K^T
    constexpr int KP = BN / 16;  // k16 steps of P V
    static_assert(WM == 16 || WM == 32, "a warp owns 16 or 32 rows");
    static_assert(NT % 2 == 0 && DT % 2 == 0, "tiles are loaded in pairs");

    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_addr(smem);
    const uint32_t sK0 = sQ + BM * HD * 2;
    const uint32_t sV0 = sK0 + 2 * BN * HD * 2;
    constexpr uint32_t KV_STAGE_BYTES = BN * HD * 2;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;  // mma fragment row group, thread in group
    const int mb = p.reverse_m ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mb * BM;
    const int Sq = p.seqlen_q, Sk = p.seqlen_k;
    constexpr bool natural = NATURAL;  // additive mask or scale <= 0: natural units

    for (int bh = blockIdx.y; bh < p.bh_total; bh += gridDim.y) {
        // ---- this (batch, head): slices of Q, K, V (GQA) and the key range of the query block
        const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, m0);
        const int b = w.b, h = w.h;
        const uint16_t *q_base = w.q_base, *k_base = w.k_base, *v_base = w.v_base;
        const int kv_lo = w.kv_lo, kv_hi = w.kv_hi, n_begin = w.n_begin, n_end = w.n_end;
        const int64_t hi_first = w.hi_first, lo_last = w.lo_last;

        // ---- issue loads: Q, then K/V of the last visible block (blocks run last to first)
        load_tile<BM, HD, THREADS>(sQ, q_base, p.q_ss, m0, 0, Sq, p.head_dim);
        cp_async_commit();
        if (n_end > n_begin) {
            load_tile<BN, HD, THREADS>(sK0, k_base, p.k_ss, (n_end - 1) * BN, kv_lo, kv_hi, p.head_dim);
            cp_async_commit();
            load_tile<BN, HD, THREADS>(sV0, v_base, p.v_ss, (n_end - 1) * BN, kv_lo, kv_hi, p.head_dim);
            cp_async_commit();
        }

        float acc_o[MT][DT][4];
        float row_m[MT][2], row_l[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.0f;
            row_m[mt][0] = row_m[mt][1] = -INFINITY;
            row_l[mt][0] = row_l[mt][1] = 0.0f;
        }

        // ---- main loop over key blocks, from the last to the first
        int stage = 0;
        for (int n = n_end - 1; n >= n_begin; --n, stage ^= 1) {
            const uint32_t sK = opaque(sK0 + stage * KV_STAGE_BYTES), sV = opaque(sV0 + stage * KV_STAGE_BYTES);
            const bool prefetch = n - 1 >= n_begin;
            // boundary block: some key of it hidden from some row of the CTA
            // (diagonal, window edge, tail, additive mask): needs the element mask
            const bool boundary = natural || (int64_t)n * BN + BN - 1 > hi_first || (int64_t)n * BN < lo_last ||
                                  n * BN + BN > Sk;
            // One barrier: K(n) is visible to all, and every warp has finished the
            // previous iteration, so its stage (the other one) may be refilled now.
            if (FWD_NONFINITE_GUARD && boundary) {
                // NaN/Inf in V(n) would reach a row it is hidden from as 0 * NaN:
                // wait for V(n) too, each thread tests the V chunks it copied and
                // zeroes NaN/Inf in place, the barrier ORs the result, and a hit
                // raises the call's flag (the host then adds the exact IEEE
                // contribution, flash_fwd_fix_nonfinite_v). Interior blocks need
                // no test. Done here, before S = Q K^T, where few registers live.
                cp_async_wait<0>();
                if (__syncthreads_or((int)sanitize_own_chunks<BN, HD, THREADS, BF16>(sV)) && tid == 0)
                    *p.nonfinite_flag = 1;
            } else {
                cp_async_wait<1>();  // K(n) (and Q) landed; V(n) may fly
                __syncthreads();
            }
            if (prefetch) {
                const uint32_t off = (stage ^ 1) * KV_STAGE_BYTES;
                load_tile<BN, HD, THREADS>(sK0 + off, k_base, p.k_ss, (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                cp_async_commit();
                load_tile<BN, HD, THREADS>(sV0 + off, v_base, p.v_ss, (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                cp_async_commit();
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
                    ldmatrix_x4(qa[mt], swz_at<HD>(q_row + mt * 16 * HD * 2, kk * 2));
#pragma unroll
                for (int np = 0; np < NT / 2; ++np) {
                    uint32_t kb[4];
                    ldmatrix_x4(kb, swz_at<HD>(k_row + np * 16 * HD * 2, kk * 2));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma16816<BF16>(acc_s[mt][2 * np], qa[mt], kb[0], kb[1]);
                        mma16816<BF16>(acc_s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
                    }
                }
            }


            // ---- scores: element mask where needed (tail, diagonal, window, additive mask)
            // (the same test as `boundary`, recomputed: one register less across Q K^T)
            const int key0 = (int)opaque((uint32_t)n) * BN;
            if (NATURAL || (int64_t)key0 + BN - 1 > hi_first || (int64_t)key0 < lo_last || key0 + BN > Sk)
                fwd_mask_scores<MT, NT, NATURAL>(p, acc_s, m0 + warp * WM + g, key0 + 2 * t, b, h);

            // ---- online softmax: new row max, rescale O and l, p = 2^(...)
            fwd_softmax_step<MT, NT, DT, NATURAL>(p, acc_s, row_m, row_l, acc_o);

            // ---- P in the input dtype, laid out as mma A fragments
            uint32_t pa[MT][KP][4];
            fwd_pack_p<MT, KP, BF16>(acc_s, pa);

            // ---- O += P V
            const uint32_t v_row = swz_row_base<HD>(sV, lane & 15, lane >> 4);
            if (prefetch) cp_async_wait<2>();  // V(n) landed
            else cp_async_wait<0>();
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < KP; ++kk)
#pragma unroll
                for (int dp = 0; dp < DT / 2; ++dp) {
                    uint32_t vb[4];
                    ldmatrix_x4_trans(vb, swz_at<HD>(v_row + kk * 16 * HD * 2, dp * 2));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma16816<BF16>(acc_o[mt][2 * dp], pa[mt][kk], vb[0], vb[1]);
                        mma16816<BF16>(acc_o[mt][2 * dp + 1], pa[mt][kk], vb[2], vb[3]);
                    }
                }
        }
        cp_async_wait<0>();  // the Q group when no key block ran
        __syncthreads();

        // ---- epilogue: O / l rounded to the dtype, staged in this warp's Q rows, then stored
        fwd_store_o_lse<HD, MT, WM, BF16, NATURAL>(p, acc_o, row_m, row_l, sQ, m0, warp, lane, b, h);
        __syncthreads();  // smem is reused by the next (batch, head) of this CTA
    }
}

// ----------------------------------------------------------------------------
// the Hopper kernel (sm_90a): the same algorithm, both products on wgmma
//
// BLOCK_M = 128 query rows in two warpgroups of 64 (a warp owns 16 rows, in the
// mma.sync C layout the shared functions above use), BLOCK_N = BN keys, HD = 64
// or 128. Q, K and V tiles use the 128-byte swizzled 64-column-block layout of
// kernels/cuda/sm90/gmma.h; K/V in two stages, as in the sm_80 kernel.
//   S = Q K^T   gmma_ss: A = this warpgroup's 64 Q rows, B = the K tile (both K-major)
//   O += P V    gmma_rs: A = P in registers (the fwd_pack_p fragments), B = the V tile
//               (MN-major: its rows are the k dimension)
// Element mask, online softmax, the NaN/Inf guard of V and the epilogue are the
// sm_80 kernel's code. Arithmetic: the same tensor cores (exact products, fp32
// accumulate), so the precision profile in backend.cu holds unchanged.
// One barrier per key block: K(n) and V(n) landed (they were issued a whole block
// earlier) and every warpgroup's products of the previous block are complete, so
// the other stage may be refilled.

/* Tile: FWD_SM90_NWG warpgroups of 64 query rows, FWD_SM90_BN keys per block.
 * Shipped: 2 x 64 rows, 128 keys, 1 CTA per SM (registers: 254-255 a thread).
 * The -D overrides are development experiments (bench/device_build_dev.sh). */
#ifndef FWD_SM90_NWG
#define FWD_SM90_NWG 2
#endif
#ifndef FWD_SM90_BN
#define FWD_SM90_BN 128
#endif
#define FWD_SM90_BM (64 * FWD_SM90_NWG)
#define FWD_SM90_THREADS (128 * FWD_SM90_NWG)
#define FWD_SM90_MINB (FWD_SM90_NWG == 1 ? 2 : 1)

template <int HD, int BN, bool BF16, bool NATURAL>
__global__ void __launch_bounds__(FWD_SM90_THREADS, FWD_SM90_MINB) flash_fwd_sm90_kernel(const fwd_params p) {
    constexpr int BM = FWD_SM90_BM, THREADS = FWD_SM90_THREADS, WM = 16, MT = 1;
    constexpr int NT = BN / 8, DT = HD / 8, KQ = HD / 16, KP = BN / 16;
    static_assert(HD == 64 || HD == 128, "sm90 forward: HD is 64 or 128");
    static_assert(BN == 64 || BN == 128, "sm90 forward: BN is 64 or 128");
#if GMMA_ENABLED
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = (smem_addr(smem) + 1023u) & ~1023u;  // the swizzle needs 1024-byte tiles
    const uint32_t sK0 = sQ + BM * HD * 2;
    const uint32_t sV0 = sK0 + 2 * BN * HD * 2;
    constexpr uint32_t KV_STAGE_BYTES = BN * HD * 2;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3, wg = warp >> 2;
    const int mb = p.reverse_m ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mb * BM;
    const int Sq = p.seqlen_q, Sk = p.seqlen_k;

    for (int bh = blockIdx.y; bh < p.bh_total; bh += gridDim.y) {
        // ---- this (batch, head): slices of Q, K, V (GQA) and the key range of the query block
        const fwd_cta_work w = fwd_cta_work_of<BM, BN>(p, bh, m0);
        const int b = w.b, h = w.h;
        const uint16_t *q_base = w.q_base, *k_base = w.k_base, *v_base = w.v_base;
        const int kv_lo = w.kv_lo, kv_hi = w.kv_hi, n_begin = w.n_begin, n_end = w.n_end;
        const int64_t hi_first = w.hi_first, lo_last = w.lo_last;

        // ---- issue loads: Q and K/V of the last visible block, one group
        load_tile<BM, HD, THREADS, true>(sQ, q_base, p.q_ss, m0, 0, Sq, p.head_dim);
        if (n_end > n_begin) {
            load_tile<BN, HD, THREADS, true>(sK0, k_base, p.k_ss, (n_end - 1) * BN, kv_lo, kv_hi, p.head_dim);
            load_tile<BN, HD, THREADS, true>(sV0, v_base, p.v_ss, (n_end - 1) * BN, kv_lo, kv_hi, p.head_dim);
        }
        cp_async_commit();

        float acc_o[MT][DT][4];
        float row_m[MT][2], row_l[MT][2];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[0][dt][e] = 0.0f;
        row_m[0][0] = row_m[0][1] = -INFINITY;
        row_l[0][0] = row_l[0][1] = 0.0f;

        // ---- main loop over key blocks, from the last to the first
        int stage = 0;
        for (int n = n_end - 1; n >= n_begin; --n, stage ^= 1) {
            const uint32_t sK = sK0 + stage * KV_STAGE_BYTES, sV = sV0 + stage * KV_STAGE_BYTES;
            const bool prefetch = n - 1 >= n_begin;
            const int key0 = n * BN;
            const bool boundary = NATURAL || (int64_t)key0 + BN - 1 > hi_first || (int64_t)key0 < lo_last ||
                                  key0 + BN > Sk;
            cp_async_wait<0>();  // this thread's copies of K(n), V(n) (and Q) landed
            // NaN/Inf guard of V(n) in boundary blocks (see the sm_80 kernel)
            const uint32_t hit = FWD_NONFINITE_GUARD && boundary ? sanitize_own_chunks<BN, HD, THREADS, BF16, true>(sV) : 0u;
            gmma_fence_proxy();  // the copies (and the guard's stores) -> the tensor cores' reads
            if (FWD_NONFINITE_GUARD && boundary) {
                if (__syncthreads_or((int)hit) && tid == 0) *p.nonfinite_flag = 1;
            } else {
                __syncthreads();
            }
            if (prefetch) {
                const uint32_t off = (stage ^ 1) * KV_STAGE_BYTES;
                load_tile<BN, HD, THREADS, true>(sK0 + off, k_base, p.k_ss, (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                load_tile<BN, HD, THREADS, true>(sV0 + off, v_base, p.v_ss, (n - 1) * BN, kv_lo, kv_hi, p.head_dim);
                cp_async_commit();
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
            if (boundary) fwd_mask_scores<MT, NT, NATURAL>(p, acc_s, m0 + warp * WM + g, key0 + 2 * t, b, h);
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
        cp_async_wait<0>();  // the Q group when no key block ran
        __syncthreads();

        // ---- epilogue (staged in the Q tile's bytes, sm_80 layout: only this warp's rows)
        fwd_store_o_lse<HD, MT, WM, BF16, NATURAL>(p, acc_o, row_m, row_l, sQ, m0, warp, lane, b, h);
        __syncthreads();  // smem is reused by the next (batch, head) of this CTA
    }
#else
    (void)p;
    __trap();  // never launched: the host picks this kernel on sm_90 devices only
#endif
}

// ----------------------------------------------------------------------------
// the exact contribution of NaN/Inf in V (rare path: only after a raised flag)

/* 1 when the fp16/bf16 bit pattern h (low 16 bits) is NaN or Inf. */
static __device__ __forceinline__ int half_nonfinite(uint32_t h, int bf16) {
    const uint32_t e = bf16 ? 0x7F80u : 0x7C00u;
    return (h & e) == e;
}

/* mark[(b * Hkv + hk) * Sk + j] = 1 when the V row (b, j, hk) holds a NaN/Inf, else 0.
 * One warp per row. */
__global__ void flash_fwd_mark_nonfinite_v(const fwd_params p, int heads_kv, unsigned char *mark, int bf16) {
    const int64_t rows = (int64_t)(p.bh_total / p.group) * p.seqlen_k;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = (int)threadIdx.x % 32;
    if (w >= rows) return;
    const int64_t bk = w / p.seqlen_k;
    const int j = (int)(w % p.seqlen_k), b = (int)(bk / heads_kv), hk = (int)(bk % heads_kv);
    const uint16_t *vrow = p.v + (int64_t)b * p.v_sb + (int64_t)j * p.v_ss + (int64_t)hk * p.v_sh;
    int any = 0;
    for (int d = lane; d < p.head_dim; d += 32) any |= half_nonfinite(vrow[d], bf16);
    any = __any_sync(0xffffffffu, any);
    if (lane == 0) mark[w] = (unsigned char)any;
}

/* For every query row and column d: the keys j the row sees (key range and
 * mask != -inf) whose v_jd is NaN/Inf contribute, in exact arithmetic (p > 0),
 *   NaN if one is NaN or both +Inf and -Inf occur, else +Inf or -Inf.
 * The main kernel zeroed such values in boundary blocks (where a hidden row
 * would have turned 0 * NaN into NaN) and let interior blocks multiply them
 * in the mma. O := O + that value, in fp32 then rounded (IEEE: an O already
 * +-Inf/NaN from an interior block combines as Inf + Inf = Inf, Inf - Inf =
 * NaN, NaN + x = NaN; a finite O becomes the value). Rows that see no NaN/Inf
 * in V are not written. LSE does not depend on V. 64 threads per row. */
__global__ void flash_fwd_fix_nonfinite_v(const fwd_params p, int heads_kv, const unsigned char *mark, int bf16) {
    const int64_t nrows = (int64_t)p.bh_total * p.seqlen_q;
    constexpr int COLS = FWD_LIMITS_MAX_HEAD_DIM_DEV / 64;
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const int bh = (int)(r / p.seqlen_q), i = (int)(r % p.seqlen_q);
        const int b = bh / p.heads_q, h = bh % p.heads_q, hk = h / p.group;
        int lo, hi;
        row_key_range(p, i, &lo, &hi);
        const float *mrow = p.mask != NULL
                                ? p.mask + (int64_t)b * p.mask_sb + (int64_t)h * p.mask_sh + (int64_t)i * p.mask_sq
                                : NULL;
        const unsigned char *mk = mark + ((int64_t)b * heads_kv + hk) * p.seqlen_k;
        uint32_t cls[COLS];  // bit 0: +Inf seen, bit 1: -Inf, bit 2: NaN
#pragma unroll
        for (int c = 0; c < COLS; ++c) cls[c] = 0;
        for (int j = lo; j <= hi; ++j) {
            if (!mk[j]) continue;
            if (mrow != NULL && mrow[(int64_t)j * p.mask_sk] == -INFINITY) continue;
            const uint16_t *vrow = p.v + (int64_t)b * p.v_sb + (int64_t)j * p.v_ss + (int64_t)hk * p.v_sh;
#pragma unroll
            for (int c = 0; c < COLS; ++c) {
                const int d = (int)threadIdx.x + 64 * c;
                if (d >= p.head_dim) break;
                const uint32_t v = vrow[d];
                if (!half_nonfinite(v, bf16)) continue;
                const uint32_t mant = v & (bf16 ? 0x007Fu : 0x03FFu);
                cls[c] |= mant ? 4u : ((v & 0x8000u) ? 2u : 1u);
            }
        }
        uint16_t *orow = p.o + (int64_t)b * p.o_sb + (int64_t)i * p.o_ss + (int64_t)h * p.o_sh;
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
            const int d = (int)threadIdx.x + 64 * c;
            if (d >= p.head_dim || cls[c] == 0) continue;
            const float add = (cls[c] & 4u) || cls[c] == 3u ? __int_as_float(0x7FC00000) : (cls[c] == 1u ? INFINITY : -INFINITY);
            const uint32_t ob = orow[d];
            const float o = (bf16 ? __uint_as_float(ob << 16) : __half2float(__ushort_as_half((unsigned short)ob))) + add;
            // o is NaN or +-Inf: its dtype pattern
            uint16_t res;
            if (o != o) res = bf16 ? 0x7FC0u : 0x7E00u;
            else res = (uint16_t)((o > 0 ? 0x0000u : 0x8000u) | (bf16 ? 0x7F80u : 0x7C00u));
            orow[d] = res;
        }
    }
}

// ----------------------------------------------------------------------------
// host side: tile configurations

typedef struct {
    int hd, bm, bn, nw;
} fwd_config;

/* Tiles per padded head dim. Family 0: 32 rows per warp (4 warps) up to 128,
 * 16 rows per warp with 8 warps above (register budget of the O accumulator).
 * Family 1: 16 rows per warp, 4 warps, BLOCK_M = 64 (fewer registers, more
 * shared-memory traffic per flop). Family 2: family 0 with half the key block
 * (smaller S fragment). Family 3: family 0 with 128-key blocks at D = 64.
 * The benchmark measures them all. */
static const fwd_config fwd_configs[4][6] = {
    {{32, 128, 128, 4}, {64, 128, 64, 4}, {96, 128, 64, 4}, {128, 128, 64, 4}, {192, 128, 32, 8}, {256, 128, 32, 8}},
    {{32, 64, 128, 4}, {64, 64, 64, 4}, {96, 64, 64, 4}, {128, 64, 64, 4}, {192, 64, 32, 4}, {256, 64, 32, 4}},
    {{32, 128, 64, 4}, {64, 128, 32, 4}, {96, 128, 32, 4}, {128, 128, 32, 4}, {192, 128, 32, 8}, {256, 128, 32, 8}},
    {{32, 128, 128, 4}, {64, 128, 128, 4}, {96, 128, 64, 4}, {128, 128, 64, 4}, {192, 128, 32, 8}, {256, 128, 32, 8}},
};
/* Default family per padded head dim, without and with an upper visibility
 * bound (causal / right window) at Sq <= 2048, from the measurements in
 * bench/RESULTS.md: 64-row blocks balance short causal problems better. */
static const int fwd_family_default[2][6] = {{0, 3, 0, 0, 0, 0}, {0, 3, 1, 1, 0, 0}};
#define FWD_SHORT_CAUSAL_SEQLEN 2048 /* the second row applies up to this Sq, the first above */
static int fwd_family_override = -1;

/* Benchmark knob (not part of the API): -1 default, 0 or 1 force a family. */
extern "C" void fa_cuda_fwd_set_family(int family) { fwd_family_override = family; }

/* The sm_90a kernel: -1 the default (sm_90 devices, padded head dim 128), 0 never,
 * 1 also at padded head dim 64 (benchmark knob, not part of the API). */
static int fwd_sm90_override = -1;
extern "C" void fa_cuda_fwd_set_sm90(int mode) { fwd_sm90_override = mode; }

static size_t fwd_sm90_smem_bytes(int hd) {
    return (size_t)(FWD_SM90_BM + 4 * FWD_SM90_BN) * (size_t)hd * 2 + 1024;  // + alignment to 1024
}

static size_t fwd_smem_bytes(const fwd_config *c) {
    return (size_t)(c->bm + 4 * c->bn) * (size_t)c->hd * 2;
}

typedef void (*fwd_kernel_fn)(const fwd_params);

template <int HD, int BM, int BN, int NW>
static fwd_kernel_fn pick_variant(int bf16, int natural) {
    if (bf16) return natural ? flash_fwd_kernel<HD, BM, BN, NW, true, true> : flash_fwd_kernel<HD, BM, BN, NW, true, false>;
    return natural ? flash_fwd_kernel<HD, BM, BN, NW, false, true> : flash_fwd_kernel<HD, BM, BN, NW, false, false>;
}

template <int HD>
static fwd_kernel_fn pick_sm90(int bf16, int natural) {
    constexpr int BN = FWD_SM90_BN;
    if (bf16) return natural ? flash_fwd_sm90_kernel<HD, BN, true, true> : flash_fwd_sm90_kernel<HD, BN, true, false>;
    return natural ? flash_fwd_sm90_kernel<HD, BN, false, true> : flash_fwd_sm90_kernel<HD, BN, false, false>;
}

static fwd_kernel_fn fwd_kernel_for(const fwd_config *c, int bf16, int natural) {
#ifdef FWD_DEV_ONE_VARIANT  /* development only: compile one kernel (D=128, bf16, raw) for quick experiments */
    (void)c; (void)bf16; (void)natural;
    return flash_fwd_kernel<128, FWD_DEV_BM, FWD_DEV_BN, FWD_DEV_NW, true, false>;
#else
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
#endif
}

// ----------------------------------------------------------------------------
// host side: checks beyond fa_validate_fwd

#define FWD_LIMITS_MAX_HEAD_DIM 256
#define FWD_MAX_SEQLEN ((int64_t)INT32_MAX - 1024)

static fa_status fwd_device_error(fa_error *err, cudaError_t e, const char *what) {
    return fa_fail(err, FA_ERR_DEVICE, "cuda", "%s failed: %s (%s)", what, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}

/* The fast path loads and stores 16-byte chunks: every row start must be
 * 16-byte aligned, so the pointer and the batch/seq/head strides must be. */
static fa_status fwd_check_rows16(const char *name, const void *ptr, const int64_t *st, fa_error *err) {
    char arg[32];
    if (((uintptr_t)ptr) % 16 != 0) {
        snprintf(arg, sizeof(arg), "%s.ptr", name);
        return fa_fail(err, FA_ERR_UNSUPPORTED, arg,
                       "%s.ptr (%p) is not 16-byte aligned; the CUDA forward loads 16-byte row chunks, "
                       "so pass a 16-byte-aligned tensor (or use the cpu backend).", name, ptr);
    }
    for (int d = 0; d < 3; ++d)
        if (st[d] % 8 != 0) {
            snprintf(arg, sizeof(arg), "%s.stride[%d]", name, d);
            return fa_fail(err, FA_ERR_UNSUPPORTED, arg,
                           "%s is %lld elements; the CUDA forward needs batch, seq and head strides that "
                           "are multiples of 8 elements (16-byte-aligned rows). Copy the tensor to a "
                           "contiguous buffer (or use the cpu backend).", arg, (long long)st[d]);
        }
    return FA_OK;
}

/* A pointer the kernel dereferences must be device-accessible memory. */
static fa_status fwd_check_device_ptr(const char *name, const void *ptr, fa_error *err) {
    if (ptr == NULL) return FA_OK;
    struct cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, ptr);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fwd_device_error(err, e, "cudaPointerGetAttributes");
    }
    if (at.type == cudaMemoryTypeUnregistered || at.devicePointer == NULL)
        return fa_fail(err, FA_ERR_INVALID, name,
                       "%s (%p) is not CUDA device memory; the cuda backend takes device pointers "
                       "(cudaMalloc), or use the cpu backend for host buffers.", name, ptr);
    return FA_OK;
}

// ----------------------------------------------------------------------------
// entry point

extern "C" fa_status fa_cuda_forward(const fa_fwd_args *a, fa_error *err) {
    const fa_backend *be = fa_backend_cuda();
    if (be == NULL) return fa_fail(err, FA_ERR_INTERNAL, "backend", "the cuda backend table is missing");
    fa_status st = fa_validate_fwd(a, &be->limits, err);
    if (st != FA_OK) return st;
    const fa_problem *pr = &a->p;

    if (pr->seqlen_q > FWD_MAX_SEQLEN || pr->seqlen_k > FWD_MAX_SEQLEN)
        return fa_fail(err, FA_ERR_UNSUPPORTED, pr->seqlen_q > FWD_MAX_SEQLEN ? "seqlen_q" : "seqlen_k",
                       "sequence lengths above %lld are not supported by the CUDA forward (int32 positions).",
                       (long long)FWD_MAX_SEQLEN);
    if (pr->batch * pr->heads_q > INT32_MAX || pr->heads_q > INT32_MAX)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "heads_q",
                       "batch * heads_q = %lld exceeds 2^31 - 1, which the CUDA forward does not support.",
                       (long long)(pr->batch * pr->heads_q));
    if (pr->head_dim_qk != pr->head_dim_v || pr->head_dim_qk <= 0 || pr->head_dim_qk % 8 != 0 ||
        pr->head_dim_qk > FWD_LIMITS_MAX_HEAD_DIM)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "head_dim_qk",
                       "head dims %lld/%lld: the CUDA forward needs Dqk == Dv, a multiple of 8, at most %d.",
                       (long long)pr->head_dim_qk, (long long)pr->head_dim_v, FWD_LIMITS_MAX_HEAD_DIM);

    // nothing to compute: no rows, or no (batch, head) pairs
    if (pr->seqlen_q == 0 || pr->batch == 0 || pr->heads_q == 0) return FA_OK;

    if ((st = fwd_check_rows16("q", a->q.ptr, a->q.stride, err)) != FA_OK) return st;
    if ((st = fwd_check_rows16("k", a->k.ptr, a->k.stride, err)) != FA_OK) return st;
    if ((st = fwd_check_rows16("v", a->v.ptr, a->v.stride, err)) != FA_OK) return st;
    if ((st = fwd_check_rows16("o", a->o.ptr, a->o.stride, err)) != FA_OK) return st;
    if ((st = fwd_check_device_ptr("q.ptr", a->q.ptr, err)) != FA_OK) return st;
    if (pr->seqlen_k > 0) {
        if ((st = fwd_check_device_ptr("k.ptr", a->k.ptr, err)) != FA_OK) return st;
        if ((st = fwd_check_device_ptr("v.ptr", a->v.ptr, err)) != FA_OK) return st;
        if ((st = fwd_check_device_ptr("mask.ptr", a->mask.ptr, err)) != FA_OK) return st;
    }
    if ((st = fwd_check_device_ptr("o.ptr", a->o.ptr, err)) != FA_OK) return st;
    if ((st = fwd_check_device_ptr("lse.ptr", a->lse.ptr, err)) != FA_OK) return st;

    // ---- tile configuration and its shared memory
    const fwd_config *cfg = NULL;
    for (int c = 0; c < 6; ++c)
        if (fwd_configs[0][c].hd >= pr->head_dim_qk) {
            const int upper = (pr->causal != FA_CAUSAL_NONE || pr->window_right >= 0) &&
                              pr->seqlen_q <= FWD_SHORT_CAUSAL_SEQLEN;
            const int fam = fwd_family_override >= 0 && fwd_family_override < 4 ? fwd_family_override
                                                                                 : fwd_family_default[upper][c];
            cfg = &fwd_configs[fam][c];
            break;
        }
#ifdef FWD_DEV_ONE_VARIANT
    static const fwd_config dev_cfg = {128, FWD_DEV_BM, FWD_DEV_BN, FWD_DEV_NW};
    if (pr->head_dim_qk != 128 || pr->dtype != FA_BF16 || a->mask.ptr != NULL)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "head_dim_qk", "development build: D = 128, bf16, no mask only");
    cfg = &dev_cfg;
#endif
    if (cfg == NULL) return fa_fail(err, FA_ERR_INTERNAL, "head_dim_qk", "no tile configuration");
    const float scale = fa_effective_scale(pr);
    const int natural = a->mask.ptr != NULL || !(scale > 0.0f);

    int dev = 0, smem_optin = 0, cc_major = 0, cc_minor = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return fwd_device_error(err, e, "cudaGetDevice");
    e = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) return fwd_device_error(err, e, "cudaDeviceGetAttribute");

    // the wgmma kernel on sm_90 (its sm_90a code runs there only), else the mma.sync kernels
#ifdef FWD_DEV_ONE_VARIANT
    const int use_sm90 = 0;
#else
    const int use_sm90 = cc_major == 9 && cc_minor == 0 && fwd_sm90_override != 0 &&
                         (cfg->hd == 128 || (cfg->hd == 64 && fwd_sm90_override == 1));
#endif
    fwd_kernel_fn kern;
    size_t smem;
    int launch_bm, launch_threads;
    if (use_sm90) {
        kern = cfg->hd == 128 ? pick_sm90<128>(pr->dtype == FA_BF16, natural) : pick_sm90<64>(pr->dtype == FA_BF16, natural);
        smem = fwd_sm90_smem_bytes(cfg->hd);
        launch_bm = FWD_SM90_BM;
        launch_threads = FWD_SM90_THREADS;
    } else {
        kern = fwd_kernel_for(cfg, pr->dtype == FA_BF16, natural);
        smem = fwd_smem_bytes(cfg);
        launch_bm = cfg->bm;
        launch_threads = cfg->nw * 32;
    }
    if ((size_t)smem_optin < smem)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "head_dim_qk",
                       "head dim %lld needs %zu bytes of shared memory per block; this GPU allows %d.",
                       (long long)pr->head_dim_qk, smem, smem_optin);
    e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return fwd_device_error(err, e, "cudaFuncSetAttribute");

    // ---- parameters
    fwd_params p;
    p.q = (const uint16_t *)a->q.ptr;
    p.k = (const uint16_t *)a->k.ptr;
    p.v = (const uint16_t *)a->v.ptr;
    p.o = (uint16_t *)a->o.ptr;
    p.lse = a->lse.ptr;
    p.mask = a->mask.ptr;
    p.q_sb = a->q.stride[0]; p.q_ss = a->q.stride[1]; p.q_sh = a->q.stride[2];
    p.k_sb = a->k.stride[0]; p.k_ss = a->k.stride[1]; p.k_sh = a->k.stride[2];
    p.v_sb = a->v.stride[0]; p.v_ss = a->v.stride[1]; p.v_sh = a->v.stride[2];
    p.o_sb = a->o.stride[0]; p.o_ss = a->o.stride[1]; p.o_sh = a->o.stride[2];
    p.lse_sb = a->lse.stride[0]; p.lse_sh = a->lse.stride[1]; p.lse_ss = a->lse.stride[2];
    p.mask_sb = a->mask.stride[0]; p.mask_sh = a->mask.stride[1];
    p.mask_sq = a->mask.stride[2]; p.mask_sk = a->mask.stride[3];
    p.seqlen_q = (int)pr->seqlen_q;
    p.seqlen_k = (int)pr->seqlen_k;
    p.heads_q = (int)pr->heads_q;
    p.group = (int)(pr->heads_q / pr->heads_kv);
    p.bh_total = (int)(pr->batch * pr->heads_q);
    p.head_dim = (int)pr->head_dim_qk;
    p.scale = scale;
    p.scale_log2 = (float)((double)p.scale * 1.4426950408889634);

    // visibility: diag(i) = i + diag_off; windows larger than Sq + Sk are unbounded in effect
    const int64_t Sq = pr->seqlen_q, Sk = pr->seqlen_k, wcap = Sq + Sk + 1;
    const int br = pr->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                   (pr->causal == FA_CAUSAL_NONE && pr->window_align == FA_ALIGN_BOTTOM_RIGHT);
    const int64_t diag_off = br ? Sk - Sq : 0;
    const int64_t wl = pr->window_left < 0 ? -1 : (pr->window_left > wcap ? wcap : pr->window_left);
    const int64_t wr = pr->window_right < 0 ? -1 : (pr->window_right > wcap ? wcap : pr->window_right);
    const int causal = pr->causal != FA_CAUSAL_NONE;
    p.has_hi = causal || wr >= 0;
    p.hi_off = diag_off + (causal ? 0 : wr);  // with causal, a right window >= 0 changes nothing
    p.has_lo = wl >= 0;
    p.lo_off = diag_off - (wl >= 0 ? wl : 0);
    p.reverse_m = p.has_hi;

    // ---- the NaN/Inf flag: pinned host memory the kernel writes through its
    // mapping (no device work on the common path), one per host thread (calls on
    // one thread are synchronous, so they cannot share it concurrently)
    static thread_local int *nonfinite_flag_host = NULL;
    if (nonfinite_flag_host == NULL) {
        e = cudaHostAlloc((void **)&nonfinite_flag_host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable);
        if (e != cudaSuccess) {
            nonfinite_flag_host = NULL;
            return fwd_device_error(err, e, "cudaHostAlloc (non-finite flag)");
        }
    }
    *(volatile int *)nonfinite_flag_host = 0;
    e = cudaHostGetDevicePointer((void **)&p.nonfinite_flag, nonfinite_flag_host, 0);
    if (e != cudaSuccess) return fwd_device_error(err, e, "cudaHostGetDevicePointer (non-finite flag)");

    // ---- launch
    const int64_t m_blocks = (Sq + launch_bm - 1) / launch_bm;
    dim3 grid((unsigned)m_blocks, (unsigned)(p.bh_total < 65535 ? p.bh_total : 65535), 1);
    dim3 block((unsigned)launch_threads, 1, 1);
    cudaStream_t stream = (cudaStream_t)a->stream;
    kern<<<grid, block, smem, stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess) return fwd_device_error(err, e, "flash_fwd_kernel launch");
    e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return fwd_device_error(err, e, "cudaStreamSynchronize after flash_fwd_kernel");

    // ---- rare path: a boundary block held NaN/Inf in V; add its exact contribution
    if (*(volatile int *)nonfinite_flag_host) {
        const int bf16 = pr->dtype == FA_BF16;
        const int64_t kv_rows = pr->batch * pr->heads_kv * Sk, q_rows = pr->batch * pr->heads_q * Sq;
        unsigned char *mark = NULL;
        e = cudaMallocAsync((void **)&mark, (size_t)kv_rows, stream);
        if (e != cudaSuccess) return fwd_device_error(err, e, "cudaMallocAsync (non-finite V marks)");
        flash_fwd_mark_nonfinite_v<<<(unsigned)((kv_rows + 7) / 8), 256, 0, stream>>>(p, (int)pr->heads_kv, mark, bf16);
        flash_fwd_fix_nonfinite_v<<<(unsigned)(q_rows < 1048576 ? q_rows : 1048576), 64, 0, stream>>>(
            p, (int)pr->heads_kv, mark, bf16);
        e = cudaGetLastError();
        cudaError_t e2 = cudaFreeAsync(mark, stream);
        if (e != cudaSuccess) return fwd_device_error(err, e, "non-finite V fix-up launch");
        if (e2 != cudaSuccess) return fwd_device_error(err, e2, "cudaFreeAsync (non-finite V marks)");
        e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) return fwd_device_error(err, e, "cudaStreamSynchronize after the non-finite V fix-up");
    }
    return FA_OK;
}
