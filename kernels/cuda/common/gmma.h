/* gmma.h: the Hopper (sm_90a) part of the PTX layer: warpgroup MMA (wgmma), stmatrix and
 * bulk reductions. Prefix gmma_. (ptx.h holds the instructions every architecture has.)
 *
 * A warpgroup (4 consecutive warps, 128 threads) computes D[64 x N] += A[64 x 16] B[16 x N]
 * asynchronously on the tensor cores; fp16/bf16 inputs, fp32 accumulator (the same
 * tensor-core arithmetic as mma.sync: exact products, truncating fp32 sums).
 *
 * Register layouts (per warp w of the warpgroup, rows 16w..16w+15; lane = 4g + t):
 *   D: d[i][0..1] = row g,   columns 8i + 2t, 8i + 2t + 1
 *      d[i][2..3] = row g+8, the same columns            (mma.sync m16n8 C, i = 0..N/8-1)
 *   A (register operand): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..),
 *      a[3] = (g+8, 2t+8..), two 16-bit values per register, low half first (mma.sync A).
 *
 * Shared-memory operands: 128-byte swizzle only. A tile is stored as blocks of 64 columns
 * (128 bytes): element (r, c) of a ROWS-row tile is at
 *   (c / 64) * ROWS * 128 + r * 128 + (((c % 64) / 8) ^ (r % 8)) * 16 + (c % 8) * 2,
 * tile base 1024-byte aligned (the swizzle XORs address bits 4..6 with bits 7..9).
 * gmma_tile_offset() gives the byte offset of a 16-byte chunk.
 *   K-major operand (the 16-wide k slice is contiguous in a row: Q or K for S = Q K^T):
 *     start = tile + (k0 / 64) * ROWS * 128 + ((k0 % 64) / 8) * 16 + row0 * 128,
 *     LBO unused (16), SBO = 1024 (next 8 rows).
 *   MN-major operand (the N dimension contiguous in a row: V for O = P V, rows = k):
 *     start = tile + k0 * 128 (+ (n0 / 64) * ROWS * 128), LBO = ROWS * 128 (next 64 columns
 *     of N), SBO = 1024 (next 8 rows of k).
 *
 * Ordering rules the callers follow:
 *   - shared memory written by ordinary stores or cp.async is made visible to the tensor
 *     cores' (async proxy) reads by gmma_fence_proxy() in each writing thread, then a barrier;
 *   - gmma_fence() before the first wgmma of a batch (its registers were written by ordinary
 *     instructions), gmma_commit() after the batch, gmma_wait<N>() before reading D (or
 *     before overwriting A's registers or the shared tiles it reads);
 *   - gmma_fence_operands(d) after the wait: the compiler must not move reads of D above it.
 * Only compiled for sm_90a (GMMA_ENABLED); elsewhere the wrappers trap and the host never
 * launches their kernels. The self-test (gmma_selftest.cu) checks the wgmma wrappers and
 * layouts against a host reference. */
#pragma once
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GMMA_ENABLED 1
#else
#define GMMA_ENABLED 0
#endif

// ----------------------------------------------------------------------------
// descriptors and ordering

/* Byte offset of 16-byte chunk `ch` (= column / 8) of row r in a ROWS-row swizzled tile. */
template <int ROWS>
static __device__ __forceinline__ uint32_t gmma_tile_offset(int r, int ch) {
    return (uint32_t)((ch >> 3) * ROWS * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

/* Byte offset of the ks-th 16-column k slice of a K-major operand in a ROWS-row tile:
 * 32 bytes per slice inside a 64-column block, ROWS * 128 bytes per block. */
template <int ROWS>
static __device__ __forceinline__ uint32_t gmma_kslice_offset(int ks) {
    return (uint32_t)((ks >> 2) * ROWS * 128 + (ks & 3) * 32);
}

/* Shared-memory matrix descriptor, 128-byte swizzle (layout type 1 in bits 62..63). */
static __device__ __forceinline__ uint64_t gmma_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    return (uint64_t)((smem_addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((sbo_bytes & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

static __device__ __forceinline__ void gmma_fence(void) {
#if GMMA_ENABLED
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
static __device__ __forceinline__ void gmma_commit(void) {
#if GMMA_ENABLED
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
static __device__ __forceinline__ void gmma_wait(void) {
#if GMMA_ENABLED
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* This thread's generic-proxy writes to shared memory -> visible to wgmma (async proxy). */
static __device__ __forceinline__ void gmma_fence_proxy(void) {
#if GMMA_ENABLED
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* Pin the accumulator registers after a wait (no read of them may move above it). */
template <int NT>
static __device__ __forceinline__ void gmma_fence_operands(float (&d)[NT][4]) {
#pragma unroll
    for (int i = 0; i < NT; ++i)
        asm volatile("" : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])::"memory");
}

// ----------------------------------------------------------------------------
// wgmma m64nNk16, fp32 accumulate (asm has no loops: the operand lists are written out once
// per N in the macros, the two input types share them)
#define GMMA_D_N64(d) "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define GMMA_SS_N64(TY) "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
#define GMMA_RS_N64(TY) "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 1, 1, 1, %37;\n"

#define GMMA_D_N128(d) "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
#define GMMA_SS_N128(TY) "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
#define GMMA_RS_N128(TY) "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, 1, 1, 1, %69;\n"

/* D[64 x 64] (+)= A[64 x 16] B[16 x 64], A and B in shared memory (descriptors).
 * scale_d = 0: D = A B (D's input ignored); 1: D += A B. TA/TB: 0 K-major, 1 MN-major. */
template <bool BF16, int TA, int TB>
static __device__ __forceinline__ void gmma_ss_m64n64k16(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if GMMA_ENABLED
    if (BF16)
        asm volatile(GMMA_SS_N64("bf16") : GMMA_D_N64(d) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
    else
        asm volatile(GMMA_SS_N64("f16") : GMMA_D_N64(d) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
#else
    (void)d; (void)desc_a; (void)desc_b; (void)scale_d;
    __trap();
#endif
}

/* D[64 x 64] += A[64 x 16] B[16 x 64], A in registers (the mma.sync m16n8k16 A
 * fragment of this warp's 16 rows), B in shared memory. TB: 0 K-major, 1 MN-major. */
template <bool BF16, int TB>
static __device__ __forceinline__ void gmma_rs_m64n64k16(float (&d)[8][4], const uint32_t a[4], uint64_t desc_b) {
#if GMMA_ENABLED
    if (BF16)
        asm volatile(GMMA_RS_N64("bf16") : GMMA_D_N64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TB));
    else
        asm volatile(GMMA_RS_N64("f16") : GMMA_D_N64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TB));
#else
    (void)d; (void)a; (void)desc_b;
    __trap();
#endif
}

/* D[64 x 128] (+)= A[64 x 16] B[16 x 128], A and B in shared memory (descriptors).
 * scale_d = 0: D = A B (D's input ignored); 1: D += A B. TA/TB: 0 K-major, 1 MN-major. */
template <bool BF16, int TA, int TB>
static __device__ __forceinline__ void gmma_ss_m64n128k16(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if GMMA_ENABLED
    if (BF16)
        asm volatile(GMMA_SS_N128("bf16") : GMMA_D_N128(d) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
    else
        asm volatile(GMMA_SS_N128("f16") : GMMA_D_N128(d) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
#else
    (void)d; (void)desc_a; (void)desc_b; (void)scale_d;
    __trap();
#endif
}

/* D[64 x 128] += A[64 x 16] B[16 x 128], A in registers (the mma.sync m16n8k16 A
 * fragment of this warp's 16 rows), B in shared memory. TB: 0 K-major, 1 MN-major. */
template <bool BF16, int TB>
static __device__ __forceinline__ void gmma_rs_m64n128k16(float (&d)[16][4], const uint32_t a[4], uint64_t desc_b) {
#if GMMA_ENABLED
    if (BF16)
        asm volatile(GMMA_RS_N128("bf16") : GMMA_D_N128(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TB));
    else
        asm volatile(GMMA_RS_N128("f16") : GMMA_D_N128(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TB));
#else
    (void)d; (void)a; (void)desc_b;
    __trap();
#endif
}

// ----------------------------------------------------------------------------
// by N (a compile-time tile width): 64 or 128

template <int N, bool BF16, int TA, int TB>
static __device__ __forceinline__ void gmma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128, "gmma_ss: N is 64 or 128");
    if constexpr (N == 128) gmma_ss_m64n128k16<BF16, TA, TB>(d, desc_a, desc_b, scale_d);
    else gmma_ss_m64n64k16<BF16, TA, TB>(d, desc_a, desc_b, scale_d);
}
template <int N, bool BF16, int TB>
static __device__ __forceinline__ void gmma_rs(float (&d)[N / 8][4], const uint32_t a[4], uint64_t desc_b) {
    static_assert(N == 64 || N == 128, "gmma_rs: N is 64 or 128");
    if constexpr (N == 128) gmma_rs_m64n128k16<BF16, TB>(d, a, desc_b);
    else gmma_rs_m64n64k16<BF16, TB>(d, a, desc_b);
}

// ----------------------------------------------------------------------------
// stmatrix and bulk reductions (sm_90a)

/* stmatrix x4 .trans: the four 8x8 fragments r[0..3] (mma C layout: row g, cols 2t, 2t+1)
 * stored transposed; lane 8m + j gives the address of row j of stored matrix m. */
static __device__ __forceinline__ void gmma_stsm4_t(uint32_t addr, const uint32_t r[4]) {
#if GMMA_ENABLED
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
#else
    (void)addr; (void)r;
    __trap();
#endif
}

/* Bulk reduction global[0 .. bytes) += shared[0 .. bytes) (fp32 adds at L2, like red.add.f32),
 * its bulk-group commit, and the waits (reads of the shared source done / all done). */
static __device__ __forceinline__ void gmma_bulk_add_f32(float *gdst, uint32_t ssrc, uint32_t bytes) {
#if GMMA_ENABLED
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gdst), "r"(ssrc),
                 "r"(bytes)
                 : "memory");
#else
    (void)gdst; (void)ssrc; (void)bytes;
    __trap();
#endif
}
static __device__ __forceinline__ void gmma_bulk_commit(void) {
#if GMMA_ENABLED
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
template <int N>
static __device__ __forceinline__ void gmma_bulk_wait_read(void) {
#if GMMA_ENABLED
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
static __device__ __forceinline__ void gmma_bulk_wait_all(void) {
#if GMMA_ENABLED
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// ----------------------------------------------------------------------------
// warp specialization (sm_90a): mbarriers, tensor-map copies (TMA), register reallocation,
// named barriers. PTX ISA: "mbarrier", "cp.async.bulk.tensor", "setmaxnreg", "bar".
//
// mbarrier protocol (producer/consumer ring): a "full" barrier expects one arrival with a
// transaction count (gmma_mbar_arrive_tx by the producer) and completes when the copy engine
// has written that many bytes (complete_tx); an "empty" barrier expects one arrival per
// consumer warp. Waiters name the phase parity they wait for (gmma_mbar_wait): a fresh
// barrier is in phase 0, and waiting for parity 1 returns at once (the "previous" phase).
// Copies by the copy engine and wgmma reads are in the async proxy: no proxy fence is needed
// between them; ordinary stores into a tile that wgmma or a copy reads next need
// gmma_fence_proxy() in the writing thread first.

/* Initialise the mbarrier at smem address bar for `count` arrivals (one thread). */
static __device__ __forceinline__ void gmma_mbar_init(uint32_t bar, uint32_t count) {
#if GMMA_ENABLED
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
    (void)bar; (void)count;
#endif
}
/* Make the initialisations visible to the other threads and to the copy engine (before a barrier). */
static __device__ __forceinline__ void gmma_mbar_init_fence(void) {
#if GMMA_ENABLED
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
/* One arrival (release semantics: this thread's earlier accesses are ordered before it). */
static __device__ __forceinline__ void gmma_mbar_arrive(uint32_t bar) {
#if GMMA_ENABLED
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
#else
    (void)bar;
#endif
}
/* One arrival that also expects `bytes` more bytes of copies to complete on this barrier. */
static __device__ __forceinline__ void gmma_mbar_arrive_tx(uint32_t bar, uint32_t bytes) {
#if GMMA_ENABLED
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
#else
    (void)bar; (void)bytes;
#endif
}
/* Wait until the phase of parity `parity` of the barrier has completed (acquire semantics). */
static __device__ __forceinline__ void gmma_mbar_wait(uint32_t bar, uint32_t parity) {
#if GMMA_ENABLED
    asm volatile(
        "{\n.reg .pred p;\n"
        "GMMA_MBAR_WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra GMMA_MBAR_WAIT_%=;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
#else
    (void)bar; (void)parity;
    __trap();
#endif
}

/* Tensor-map copy of one box of a rank-4 tensor (map: a __grid_constant__ kernel parameter,
 * coordinates c0 innermost, in elements, may lie outside the tensor: those elements are
 * written as zeros) into shared memory at dst (the box's swizzled layout, 1024-byte aligned
 * for the 128-byte swizzle); completes `box bytes` of transactions on the mbarrier bar. */
static __device__ __forceinline__ void gmma_tma_load4(uint32_t dst, const void *map, uint32_t bar, int c0, int c1,
                                                      int c2, int c3) {
#if GMMA_ENABLED
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
#else
    (void)dst; (void)map; (void)bar; (void)c0; (void)c1; (void)c2; (void)c3;
    __trap();
#endif
}

/* Register reallocation of this warpgroup (every thread of the warpgroup executes it; needs a
 * register cap at kernel entry: __launch_bounds__(threads, 1)). */
template <int N>
static __device__ __forceinline__ void gmma_setmaxnreg_inc(void) {
#if GMMA_ENABLED
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
static __device__ __forceinline__ void gmma_setmaxnreg_dec(void) {
#if GMMA_ENABLED
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/* Named barrier `id` (1..15; 0 is __syncthreads) for `count` threads (multiple of 32):
 * sync waits for the count, arrive counts this warp without waiting. */
static __device__ __forceinline__ void gmma_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
static __device__ __forceinline__ void gmma_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
