/* fwd_host.cu: fa_cuda_forward (prefix fwd_): the checks beyond fa_validate_fwd, the tile and
 * kernel choice per call (fwd_tiles.h, the policy of kernels/cuda/testing.h), the launch, and
 * the rare path's NaN/Inf fix-up kernels (after a raised flag: fwd_common.cuh). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common/pairs.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/fwd/fwd_common.cuh"
#include "kernels/cuda/fwd/fwd_ws.h"
#include "kernels/cuda/testing.h"

// ----------------------------------------------------------------------------
// the exact contribution of NaN/Inf in V (rare path: only after a raised flag)

/* 1 when the fp16/bf16 bit pattern h (low 16 bits) is NaN or Inf. */
static __device__ __forceinline__ int half_nonfinite(uint32_t h, int bf16) {
    const uint32_t e = bf16 ? 0x7F80u : 0x7C00u;
    return (h & e) == e;
}

/* mark[(b * Hkv + hk) * Sk + j] = 1 when the V row (b, j, hk) holds a NaN/Inf, else 0
 * (Sk = p.seqlen_k, the maximum; keys j >= Sk_b of a varlen / paged sequence: 0).
 * One warp per row. */
__global__ void flash_fwd_mark_nonfinite_v(const fwd_params p, int heads_kv, unsigned char *mark, int bf16) {
    const int64_t rows = (int64_t)(p.bh_total / p.group) * p.seqlen_k;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = (int)threadIdx.x % 32;
    if (w >= rows) return;
    const int64_t bk = w / p.seqlen_k;
    const int j = (int)(w % p.seqlen_k), b = (int)(bk / heads_kv), hk = (int)(bk % heads_kv);
    const fwd_seq s = fwd_seq_of(p, b * p.heads_q + hk * p.group);
    int any = 0;
    if (j < s.sk) {
        const uint16_t *vrow = fwd_kv_row(s.v_base, p.v_ss, p.v_sb, s.pages, p.page_size, j);
        for (int d = lane; d < p.head_dim_v; d += 32) any |= half_nonfinite(vrow[d], bf16);
    }
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
    constexpr int COLS = FA_CUDA_MAX_HEAD_DIM / 64;
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const int bh = (int)(r / p.seqlen_q), i = (int)(r % p.seqlen_q);
        const fwd_seq s = fwd_seq_of(p, bh);
        const int b = s.b, h = s.h, hk = s.hk;
        if (i >= s.sq) continue;
        int lo, hi;
        row_key_range(p, s, i, &lo, &hi);
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
            const uint16_t *vrow = fwd_kv_row(s.v_base, p.v_ss, p.v_sb, s.pages, p.page_size, j);
#pragma unroll
            for (int c = 0; c < COLS; ++c) {
                const int d = (int)threadIdx.x + 64 * c;
                if (d >= p.head_dim_v) break;
                const uint32_t v = vrow[d];
                if (!half_nonfinite(v, bf16)) continue;
                const uint32_t mant = v & (bf16 ? 0x007Fu : 0x03FFu);
                cls[c] |= mant ? 4u : ((v & 0x8000u) ? 2u : 1u);
            }
        }
        uint16_t *orow = p.o + (p.cu_q != NULL ? (int64_t)s.q_tok0 * p.o_ss : (int64_t)b * p.o_sb) +
                         (int64_t)i * p.o_ss + (int64_t)h * p.o_sh;
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
            const int d = (int)threadIdx.x + 64 * c;
            if (d >= p.head_dim_v || cls[c] == 0) continue;
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
// split-KV combine (decode): the partials of fwd_store_partial -> O, LSE

/* Split counts are at most fwd_split_max (the combine keeps a split's m, l and alpha in shared
 * memory). */
static constexpr int fwd_split_max = 256;
static constexpr int fwd_combine_threads = 64;  // a column pair each: head dims up to 256
static constexpr int fwd_combine_unroll = 16;   // splits whose partials are in flight at once

/* One CTA per query row (bh, i < Sq_b); every such row is written, also when no split saw a
 * visible key (m = -inf everywhere: O = 0, LSE = -inf, or the sink's value, which split 0
 * carries as m = sink, l = 1). Arithmetic: the key loop's rescale, once per split in split
 * order: m = max_z m_z (exact, in any order), alpha_z = 2^((m_z - m) log2 e) (natural units)
 * or 2^(m_z scale log2 e - m scale log2 e) (raw q.k units), l = sum_z l_z alpha_z,
 * acc_d = sum_z acc_zd alpha_z (fp32 RN multiplies, then RN adds in split order z = 0, 1, ...);
 * then fwd_store_o_lse's epilogue: O = RN_dtype(acc_d * (1 / l)), LSE = m (* scale) + logf(l),
 * l == 0: O = 0, LSE = -inf. Only the loads run in parallel: every split's (m, l) is read once,
 * by thread z % T, and the first fwd_combine_unroll splits' partials are loaded before the
 * maximum is known (they do not depend on it), so the row costs one dependent round trip to
 * memory before its sums start; every sum keeps its order, so the result is that of the serial
 * loop. */
__global__ void __launch_bounds__(fwd_combine_threads) flash_fwd_combine(const fwd_params p, int natural, int bf16) {
    constexpr float LOG2E = 1.4426950408889634f;
    constexpr int T = fwd_combine_threads, U = fwd_combine_unroll;
    constexpr int PAIRS = FA_CUDA_MAX_HEAD_DIM / (2 * T);  // column pairs per thread: d = 2 tid + 2 T c
    constexpr int ZT = fwd_split_max / T;                  // splits' (m, l) per thread: z = tid + T j
    __shared__ float s_alpha[fwd_split_max], s_l[fwd_split_max], s_m[T / 32];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // launched as a programmatic dependent of the split kernel (sm_90): its partials are
    // complete and visible once this returns
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    const int64_t w = blockIdx.x;  // the row, (bh, i)
    const int tid = (int)threadIdx.x, lane = tid % 32;
    const int bh = (int)(w / p.seqlen_q), i = (int)(w % p.seqlen_q);
    const fwd_seq s = fwd_seq_of(p, bh);
    const int nz = p.n_split;
    const int64_t zstride = (int64_t)p.bh_total * p.seqlen_q;
    if (i < s.sq) {  // CTA-uniform
        float2 ml[ZT];
#pragma unroll
        for (int j = 0; j < ZT; ++j) {
            const int z = tid + T * j;
            ml[j] = z < nz ? *(const float2 *)(p.part_ml + (w + z * zstride) * 2) : make_float2(-INFINITY, 0.0f);
        }
        const float *po = p.part_o + w * p.head_dim_v;
        float2 v[U][PAIRS];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int c = 0; c < PAIRS; ++c) {
                const int dd = 2 * tid + 2 * T * c;
                v[u][c] = u < nz && dd < p.head_dim_v ? *(const float2 *)(po + u * zstride * p.head_dim_v + dd)
                                                      : make_float2(0.0f, 0.0f);
            }
        // m = max_z m_z: a max is exact, so the threads' partial maxima combine in any order
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < ZT; ++j) m = fmaxf(m, ml[j].x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) s_m[tid / 32] = m;
        __syncthreads();
#pragma unroll
        for (int x = 0; x < T / 32; ++x) m = fmaxf(m, s_m[x]);
        const float m_scaled = m == -INFINITY ? 0.0f : m * p.scale_log2;
#pragma unroll
        for (int j = 0; j < ZT; ++j) {
            const int z = tid + T * j;
            if (z < nz) {
                s_alpha[z] = m == -INFINITY ? 1.0f
                             : natural      ? ptx_ex2((ml[j].x - m) * LOG2E)
                                            : ptx_ex2(ml[j].x * p.scale_log2 - m_scaled);
                s_l[z] = ml[j].y;
            }
        }
        __syncthreads();
        float l = 0.0f, acc[PAIRS][2];
#pragma unroll
        for (int c = 0; c < PAIRS; ++c) acc[c][0] = acc[c][1] = 0.0f;
        for (int z0 = 0; z0 < nz; z0 += U) {
            if (z0 > 0) {
#pragma unroll
                for (int u = 0; u < U; ++u)
#pragma unroll
                    for (int c = 0; c < PAIRS; ++c) {
                        const int dd = 2 * tid + 2 * T * c;
                        v[u][c] = z0 + u < nz && dd < p.head_dim_v
                                      ? *(const float2 *)(po + (z0 + u) * zstride * p.head_dim_v + dd)
                                      : make_float2(0.0f, 0.0f);
                    }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (z0 + u >= nz) break;
                const float alpha = s_alpha[z0 + u];
                l = __fadd_rn(l, __fmul_rn(s_l[z0 + u], alpha));
#pragma unroll
                for (int c = 0; c < PAIRS; ++c) {
                    acc[c][0] = __fadd_rn(acc[c][0], __fmul_rn(v[u][c].x, alpha));
                    acc[c][1] = __fadd_rn(acc[c][1], __fmul_rn(v[u][c].y, alpha));
                }
            }
        }
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        uint16_t *orow = p.o + (p.cu_q != NULL ? (int64_t)s.q_tok0 * p.o_ss : (int64_t)s.b * p.o_sb) +
                         (int64_t)i * p.o_ss + (int64_t)s.h * p.o_sh;
#pragma unroll
        for (int c = 0; c < PAIRS; ++c) {
            const int dd = 2 * tid + 2 * T * c;
            if (dd < p.head_dim_v) {
                const uint32_t ov = bf16 ? ptx_pack2<true>(acc[c][0] * inv, acc[c][1] * inv)
                                         : ptx_pack2<false>(acc[c][0] * inv, acc[c][1] * inv);
                *(uint32_t *)(orow + dd) = ov;
            }
        }
        if (tid == 0) {
            const float lse = l == 0.0f ? -INFINITY : (natural ? m : m * p.scale) + logf(l);
            const int64_t lse_b = p.cu_q != NULL ? (int64_t)s.q_tok0 * p.lse_ss : (int64_t)s.b * p.lse_sb;
            p.lse[lse_b + (int64_t)s.h * p.lse_sh + (int64_t)i * p.lse_ss] = lse;
        }
    }
}

// ----------------------------------------------------------------------------
// host side: shared memory of a tile

static size_t fwd_sm90_smem_bytes(int hd) {
    return (size_t)(fwd_sm90_bm + 4 * fwd_sm90_bn) * (size_t)hd * 2 + 1024;  // + alignment to 1024
}

/* Q [bm][hd], K [2][bn][hd], V [2][bn][hv] (fwd_sm80.cu, fwd_cta_bytes) */
static size_t fwd_smem_bytes(const fwd_tile *c) {
    const size_t hv = c->hv ? (size_t)c->hv : (size_t)c->hd;
    return (size_t)(c->bm + 2 * c->bn) * (size_t)c->hd * 2 + (size_t)(2 * c->bn) * hv * 2;
}

// ----------------------------------------------------------------------------
// host side: checks beyond fa_validate_fwd

static fa_status fwd_device_error(fa_error *err, cudaError_t e, const char *what) {
    return fa_fail(err, FA_ERR_DEVICE, "cuda", "%s failed: %s (%s)", what, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}

/* The fast path loads and stores 16-byte chunks: every row start must be
 * 16-byte aligned, so the pointer and the batch/seq/head strides must be. */
static fa_status fwd_check_rows16(const char *name, const void *ptr, const int64_t *st, int packed, fa_error *err) {
    char arg[32];
    if (((uintptr_t)ptr) % 16 != 0) {
        snprintf(arg, sizeof(arg), "%s.ptr", name);
        return fa_fail(err, FA_ERR_UNSUPPORTED, arg,
                       "%s.ptr (%p) is not 16-byte aligned; the CUDA forward loads 16-byte row chunks, "
                       "so pass a 16-byte-aligned tensor (or use the cpu backend).", name, ptr);
    }
    for (int d = packed ? 1 : 0; d < 3; ++d)  // packed (varlen): stride[0] is ignored
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
// host: the workspace of contract-v3 calls (metadata, split-KV partials)

/* One cached device buffer per device, grown on demand and kept, held under a lock for
 * the whole call. Dense calls without split-KV use none (and take no lock). The host
 * int32 metadata (cu_seqlens_q/k, seqused_k, block table) is copied into it with one
 * cudaMemcpyAsync per call on the call's stream (pageable source: the copy is staged
 * before cudaMemcpyAsync returns, so the packed host buffer may be freed after it). */
#define FWD_MAX_DEVICES 64
static pthread_mutex_t fwd_ws_lock = PTHREAD_MUTEX_INITIALIZER;
static void *fwd_ws_ptr[FWD_MAX_DEVICES];
static size_t fwd_ws_size[FWD_MAX_DEVICES];

static size_t fwd_align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Split-KV for decode (Sq <= fwd_decode_max_sq): key blocks of fwd_decode_bn keys (the decode
 * tiles, fwd_tiles.h), at least fwd_split_min_blocks blocks per split, so a row's rescales stay
 * below the profile's max_rescales (33 per 1000 keys, + 1): one per block and one per split in
 * the combine, <= ceil(Sk/64) + ceil(Sk/64)/2 <= 1.5 (Sk/64 + 1) = 23.5 Sk/1000 + 1.5, within
 * 33 Sk/1000 + 1 for Sk >= 53 (splitting needs Sk > 192). The split count: the most splits
 * whose CTAs fit one wave of fwd_split_ctas_per_sm CTAs on every SM (at most what the occupancy
 * calculator admits). Measured on the H100 (bench/RESULTS-2026-11-25-decode.md): two one-warp
 * CTAs an SM already keep HBM busy; more CTAs, or more waves, only add per-split start-up
 * (the Q load, the first block's latency, the partials) and combine work. */
static constexpr int fwd_decode_max_sq = 16;
static constexpr int fwd_decode_bn = 64;
static constexpr int fwd_split_min_blocks = 2;
static constexpr int fwd_split_ctas_per_sm = 2;
/* The most key blocks a decode CTA runs on fwd_decode.cu's kernel (more: the general kernel's
 * decode instantiation; see fwd_run). */
static constexpr int fwd_decode_most_blocks = 128;

static fa_status fwd_run(const fa_fwd_args *a, const fa_cuda_policy *pol, fa_error *err, int dev);

/* Per (device, kernel): its dynamic shared memory attribute set once and its CTAs per SM at
 * that size (occupancy calculator), kept for the process (both are fixed for a kernel, a block
 * size and a shared memory size on a device), so a call does not query them again. */
#define FWD_KERNEL_CACHE 128
typedef struct {
    int dev, threads, per_sm;
    size_t smem;
    fwd_kernel_fn kern;
} fwd_kernel_info;
static pthread_mutex_t fwd_kc_lock = PTHREAD_MUTEX_INITIALIZER;
static fwd_kernel_info fwd_kc[FWD_KERNEL_CACHE];
static int fwd_kc_n;

static cudaError_t fwd_kernel_ready(int dev, fwd_kernel_fn kern, int threads, size_t smem, int *per_sm) {
    pthread_mutex_lock(&fwd_kc_lock);
    for (int x = 0; x < fwd_kc_n; ++x)
        if (fwd_kc[x].dev == dev && fwd_kc[x].kern == kern && fwd_kc[x].threads == threads && fwd_kc[x].smem == smem) {
            *per_sm = fwd_kc[x].per_sm;
            pthread_mutex_unlock(&fwd_kc_lock);
            return cudaSuccess;
        }
    // the attribute only grows (the largest size any cached entry of this kernel needs), so
    // every cached entry's launch stays allowed whatever order the sizes come in
    size_t attr = smem;
    for (int x = 0; x < fwd_kc_n; ++x)
        if (fwd_kc[x].dev == dev && fwd_kc[x].kern == kern && fwd_kc[x].smem > attr) attr = fwd_kc[x].smem;
    cudaError_t e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)attr);
    int n = 1;
    if (e == cudaSuccess && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void *)kern, threads, smem) != cudaSuccess) {
        cudaGetLastError();
        n = 0;  // unknown: not cached, 1 this call
    }
    *per_sm = n > 0 ? n : 1;
    if (e == cudaSuccess && n > 0 && fwd_kc_n < FWD_KERNEL_CACHE)
        fwd_kc[fwd_kc_n++] = (fwd_kernel_info){dev, threads, n, smem, kern};
    pthread_mutex_unlock(&fwd_kc_lock);
    return e;
}

extern "C" fa_status fa_cuda_forward_policy(const fa_fwd_args *a, const fa_cuda_policy *pol, fa_error *err) {
    const fa_backend *be = fa_backend_cuda();
    if (be == NULL) return fa_fail(err, FA_ERR_INTERNAL, "backend", "the cuda backend table is missing");
    fa_status st = fa_validate_fwd(a, &be->limits, err);
    if (st != FA_OK) return st;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return fwd_device_error(err, e, "cudaGetDevice");
    if (dev < 0 || dev >= FWD_MAX_DEVICES)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "cuda", "device %d: the CUDA forward handles devices 0..%d", dev,
                       FWD_MAX_DEVICES - 1);
    // only calls that may use the workspace (metadata, or decode's split-KV) take the lock
    const int may_use_ws = a->varlen.cu_seqlens_q != NULL || a->varlen.cu_seqlens_k != NULL ||
                           a->varlen.seqused_k != NULL || a->p.page_size >= 1 || a->p.seqlen_q <= fwd_decode_max_sq;
    if (!may_use_ws) return fwd_run(a, pol, err, dev);
    pthread_mutex_lock(&fwd_ws_lock);
    st = fwd_run(a, pol, err, dev);
    pthread_mutex_unlock(&fwd_ws_lock);
    return st;
}

static fa_status fwd_run(const fa_fwd_args *a, const fa_cuda_policy *pol, fa_error *err, int dev) {
    fa_status st;
    const fa_problem *pr = &a->p;
    const int32_t *cu_q = a->varlen.cu_seqlens_q, *cu_k = a->varlen.cu_seqlens_k, *used_k = a->varlen.seqused_k;
    const int paged = pr->page_size >= 1;
    const int softcap = pr->softcap > 0.0f;
    const int sinks = pr->has_sinks != 0;

    if (pr->seqlen_q > FA_CUDA_MAX_SEQLEN || pr->seqlen_k > FA_CUDA_MAX_SEQLEN)
        return fa_fail(err, FA_ERR_UNSUPPORTED, pr->seqlen_q > FA_CUDA_MAX_SEQLEN ? "seqlen_q" : "seqlen_k",
                       "sequence lengths above %lld are not supported by the CUDA forward (int32 positions).",
                       (long long)FA_CUDA_MAX_SEQLEN);
    if (pr->batch * pr->heads_q > INT32_MAX || pr->heads_q > INT32_MAX)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "heads_q",
                       "batch * heads_q = %lld exceeds 2^31 - 1, which the CUDA forward does not support.",
                       (long long)(pr->batch * pr->heads_q));
    // head dims: Dqk and Dv each a multiple of 8 in 8..256 (any pair: fwd_tiles.h, fwd_pair_tiles)
    for (int t = 0; t < 2; ++t) {
        const int64_t d = t ? pr->head_dim_v : pr->head_dim_qk;
        if (d <= 0 || d % 8 != 0 || d > FA_CUDA_MAX_HEAD_DIM)
            return fa_fail(err, FA_ERR_UNSUPPORTED, t ? "head_dim_v" : "head_dim_qk",
                           "head dims %lld/%lld: the CUDA forward needs Dqk and Dv multiples of 8, at most %d.",
                           (long long)pr->head_dim_qk, (long long)pr->head_dim_v, FA_CUDA_MAX_HEAD_DIM);
    }
    if (paged && (a->paged.block_table == NULL || cu_k != NULL))
        return fa_fail(err, FA_ERR_INVALID, a->paged.block_table == NULL ? "paged.block_table" : "varlen.cu_seqlens_k",
                       "page_size %lld needs a block table and no cu_seqlens_k.", (long long)pr->page_size);
    if (paged && (pr->page_size > INT32_MAX || a->paged.max_pages_per_seq > INT32_MAX))
        return fa_fail(err, FA_ERR_UNSUPPORTED, "page_size", "page sizes and pages per sequence are int32 in the CUDA forward.");
    if (sinks && a->sinks == NULL) return fa_fail(err, FA_ERR_INVALID, "sinks", "has_sinks is set but sinks is NULL.");

    // nothing to compute: no rows, or no (batch, head) pairs
    if (pr->seqlen_q == 0 || pr->batch == 0 || pr->heads_q == 0) return FA_OK;

    if ((st = fwd_check_rows16("q", a->q.ptr, a->q.stride, cu_q != NULL, err)) != FA_OK) return st;
    if ((st = fwd_check_rows16("k", a->k.ptr, a->k.stride, cu_k != NULL, err)) != FA_OK) return st;
    if ((st = fwd_check_rows16("v", a->v.ptr, a->v.stride, cu_k != NULL, err)) != FA_OK) return st;
    if ((st = fwd_check_rows16("o", a->o.ptr, a->o.stride, cu_q != NULL, err)) != FA_OK) return st;
    // only a tensor with at least one element is checked: one with none is never dereferenced
    // (a packed batch of empty sequences may point one past its allocation, which
    // cudaPointerGetAttributes may not know). Rows: cu[B] when packed, the pools when paged,
    // else B * seqlen.
    const int64_t rows_q = cu_q ? (int64_t)cu_q[pr->batch] : pr->batch * pr->seqlen_q;
    const int64_t rows_k = paged ? a->paged.num_pages * pr->page_size
                                 : (cu_k ? (int64_t)cu_k[pr->batch] : pr->batch * pr->seqlen_k);
    const int has_q = rows_q > 0, has_k = rows_k > 0 && pr->seqlen_k > 0 && pr->heads_kv > 0;
    if (has_q && (st = fwd_check_device_ptr("q.ptr", a->q.ptr, err)) != FA_OK) return st;
    if (has_k) {
        if ((st = fwd_check_device_ptr("k.ptr", a->k.ptr, err)) != FA_OK) return st;
        if ((st = fwd_check_device_ptr("v.ptr", a->v.ptr, err)) != FA_OK) return st;
        if (has_q && (st = fwd_check_device_ptr("mask.ptr", a->mask.ptr, err)) != FA_OK) return st;
    }
    if (has_q && (st = fwd_check_device_ptr("o.ptr", a->o.ptr, err)) != FA_OK) return st;
    if (has_q && (st = fwd_check_device_ptr("lse.ptr", a->lse.ptr, err)) != FA_OK) return st;
    if (sinks && (st = fwd_check_device_ptr("sinks", a->sinks, err)) != FA_OK) return st;

    int smem_optin = 0, cc_major = 0, cc_minor = 0, n_sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return fwd_device_error(err, e, "cudaDeviceGetAttribute");

    // ---- tile configuration and its shared memory; decode (Sq <= 16): the 64-row family
    const int decode = pr->seqlen_q <= fwd_decode_max_sq && !pol->fwd_no_decode;
    // Dqk != Dv: the pair's own tile (fwd_pair_tiles: Dqk padded to 192, Dv to 128), else the
    // equal-dim tile of max(Dqk, Dv), whose loads zero-fill the narrower tensor's columns past
    // its head dim (nothing read) and whose epilogue stores Dv columns
    const int64_t Dqk = pr->head_dim_qk, Dv = pr->head_dim_v, Dmax = Dqk > Dv ? Dqk : Dv;
    const int pair = fa_cuda_pair_native(Dqk, Dv);
    const fwd_tile *cfg = NULL;
    for (int c = 0; c < FWD_HEAD_DIMS; ++c)
        if (fwd_tiles[0][c].hd >= Dmax) {
            const int upper = (pr->causal != FA_CAUSAL_NONE || pr->window_right >= 0) &&
                              pr->seqlen_q <= fwd_short_causal_seqlen;
            const int fam = pol->fwd_family >= 0 && pol->fwd_family < FWD_FAMILIES ? pol->fwd_family
                            : decode                                               ? 1
                                                                                   : fwd_family_default[upper][c];
            cfg = &fwd_tiles[fam][c];
            if (pair) cfg = &fwd_pair_tiles[0][pol->fwd_family != 0];  // [1] unless the policy asks family 0
            else if (decode && pol->fwd_family < 0 && (cfg->hd == 64 || cfg->hd == 128))
                cfg = &fwd_decode_tiles[cfg->hd == 128];
            break;
        }
    if (cfg == NULL) return fa_fail(err, FA_ERR_INTERNAL, "head_dim_qk", "no tile configuration");
    const float scale = fa_effective_scale(pr);
    // natural units (scores = fmaf(q.k, scale, mask)): a mask, a scale <= 0, softcap, sinks
    const int natural = a->mask.ptr != NULL || !(scale > 0.0f) || softcap || sinks;

    // the wgmma kernel on sm_90 (its sm_90a code runs there only), else the mma.sync kernels
    // (equal head dims only: the wgmma kernels have one head dim)
    const int use_sm90 = !decode && Dqk == Dv && cc_major == 9 && cc_minor == 0 && pol->fwd_sm90 != 0 &&
                         (cfg->hd == 128 || (cfg->hd == 64 && pol->fwd_sm90 == 1));
    // the warp-specialized kernel at padded head dims 64 and 128 (fwd_sm90_ws.cu; it may decline a
    // call, e.g. a page size that is not a multiple of 8): dense, packed, seqused_k and paged calls
    // with equal head dims; not softcap, sinks or split-KV
    const int use_ws = !decode && Dqk == Dv && !softcap && !sinks &&
                       cc_major == 9 && cc_minor == 0 && pol->fwd_sm90 != 0 && pol->fwd_ws != 0 &&
                       (cfg->hd == 128 || cfg->hd == 64) && (size_t)smem_optin >= fwd_ws_smem_bytes(cfg->hd);
    fwd_kernel_fn kern, kern_decode = NULL, kern_general = NULL;
    size_t smem;
    int launch_bm, launch_bn, launch_threads;
    if (use_sm90) {
        kern = fwd_sm90_kernel(cfg->hd, pr->dtype == FA_BF16, natural);
        smem = fwd_sm90_smem_bytes(cfg->hd);
        launch_bm = fwd_sm90_bm;
        launch_bn = fwd_sm90_bn;
        launch_threads = fwd_sm90_threads;
    } else {
        kern = fwd_sm80_kernel(cfg, pr->dtype == FA_BF16, natural);
        // the decode tile runs fwd_decode.cu's kernel (the same tile, grid and arithmetic as the
        // general kernel's decode instantiation, compact code) where its CTAs run few key blocks
        // (below, once the split is known); the policy may ask for the general one everywhere
        if (cfg->nw == 1 && cfg->bm == 16 && cfg->hv == 0 && !pol->fwd_decode_general)
            kern_decode = fwd_decode_kernel(cfg->hd, pr->dtype == FA_BF16, natural);
        if (kern_decode != NULL) kern_general = kern, kern = kern_decode;
        smem = fwd_smem_bytes(cfg);
        launch_bm = cfg->bm;
        launch_bn = cfg->bn;
        launch_threads = cfg->nw * 32;
    }
    if (kern == NULL) return fa_fail(err, FA_ERR_INTERNAL, "head_dim_qk", "no kernel for the tile configuration");
    if ((size_t)smem_optin < smem)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "head_dim_qk",
                       "head dims %lld/%lld need %zu bytes of shared memory per block; this GPU allows %d.",
                       (long long)Dqk, (long long)Dv, smem, smem_optin);
    int per_sm = 1;  // CTAs of kern per SM (occupancy calculator), for the split rule
    e = fwd_kernel_ready(dev, kern, launch_threads, smem, &per_sm);
    if (e != cudaSuccess) return fwd_device_error(err, e, "cudaFuncSetAttribute");

    // ---- parameters
    fwd_params p;
    memset(&p, 0, sizeof(p));
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
    p.head_dim = (int)Dqk;
    p.head_dim_v = (int)Dv;
    p.scale = scale;
    p.scale_log2 = (float)((double)p.scale * 1.4426950408889634);
    if (softcap) {
        p.softcap = pr->softcap;
        p.softcap_scale = scale / pr->softcap;  // fp32 RN
    }
    p.sinks = sinks ? a->sinks : NULL;

    // visibility: diag(i) = i + diag_off, diag_off = Sk_b - Sq_b (bottom-right) or 0, per
    // sequence in the kernel (fwd_seq_of); windows larger than Sq + Sk are unbounded in effect
    const int64_t Sq = pr->seqlen_q, Sk = pr->seqlen_k, wcap = Sq + Sk + 1;
    p.diag_br = pr->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                (pr->causal == FA_CAUSAL_NONE && pr->window_align == FA_ALIGN_BOTTOM_RIGHT);
    const int64_t wl = pr->window_left < 0 ? -1 : (pr->window_left > wcap ? wcap : pr->window_left);
    const int64_t wr = pr->window_right < 0 ? -1 : (pr->window_right > wcap ? wcap : pr->window_right);
    const int causal = pr->causal != FA_CAUSAL_NONE;
    p.has_hi = causal || wr >= 0;
    p.hi_rel = causal ? 0 : wr;  // with causal, a right window >= 0 changes nothing
    p.has_lo = wl >= 0;
    p.lo_rel = -(wl >= 0 ? wl : 0);
    p.reverse_m = p.has_hi;

    // ---- GQA packing (the decode tile, fwd_sm80.cu): the most query heads of a KV head (a
    // divisor of the group) whose rows fit the tile, so each K/V block is read once per KV head
    p.pack = 1;
    if (decode && !use_sm90 && cfg->nw == 1 && cfg->bm == 16)
        for (int d = p.group; d > 1; --d)
            if (p.group % d == 0 && (int64_t)d * Sq <= cfg->bm) {
                p.pack = d;
                break;
            }
    const int64_t units = (int64_t)p.bh_total / p.pack;  // (batch, head) work units of the grid

    // ---- split-KV (decode): how many splits, and the workspace they need
    const int64_t m_blocks = (Sq + launch_bm - 1) / launch_bm;
    const int64_t n_blocks = (Sk + launch_bn - 1) / launch_bn;
    const int64_t ctas = m_blocks * units;
    const int64_t slots = (int64_t)(per_sm < fwd_split_ctas_per_sm ? per_sm : fwd_split_ctas_per_sm) * n_sms;
    int n_split = 0, bps = 0;
    // (the combine's grid is one CTA a row: rows within a grid dimension)
    if (decode && !use_sm90 && launch_bn == fwd_decode_bn && n_blocks >= 2 * fwd_split_min_blocks &&
        (int64_t)p.bh_total * Sq <= INT32_MAX) {
        int64_t most = n_blocks / fwd_split_min_blocks;
        if (most > fwd_split_max) most = fwd_split_max;
        int64_t want = slots / ctas;
        if (want > most) want = most;
        if (want < 1) want = 1;
        if (pol->fwd_split > 0) want = pol->fwd_split < most ? pol->fwd_split : most;  // test hook
        if (pol->fwd_split < 0) want = 1;
        bps = (int)((n_blocks + want - 1) / want);
        n_split = (int)((n_blocks + bps - 1) / bps);
        if (n_split < 2) n_split = bps = 0;
    }
    // a CTA that runs many key blocks (a long split, or a long cache without one): the general
    // kernel's decode instantiation, whose code is then warm and whose unrolled loads were faster
    // (0.5-1.6% at 256 and more blocks a CTA); fewer blocks: fwd_decode.cu's kernel, whose CTAs
    // no longer wait on instruction fetch (kernels/cuda/bench/RESULTS-2026-11-25-s7-decode.md).
    // Both give the same bits (the same tile, grid, split and arithmetic: fwd_v3_test's twin calls).
    if (kern_decode != NULL && (n_split ? (int64_t)bps : n_blocks) > fwd_decode_most_blocks) {
        kern = kern_general;
        int per_sm_general = 1;  // (the split counted fwd_decode.cu's CTAs an SM: same tile and shared memory)
        e = fwd_kernel_ready(dev, kern, launch_threads, smem, &per_sm_general);
        if (e != cudaSuccess) return fwd_device_error(err, e, "cudaFuncSetAttribute");
    }
    const int64_t B = pr->batch;
    const size_t meta_ints = (cu_q ? (size_t)(B + 1) : 0) + (cu_k ? (size_t)(B + 1) : 0) + (used_k ? (size_t)B : 0) +
                             (paged ? (size_t)((B - 1) * a->paged.table_stride + a->paged.max_pages_per_seq) : 0);
    const size_t part_rows = n_split ? (size_t)n_split * (size_t)p.bh_total * (size_t)Sq : 0;
    const size_t ws_bytes = fwd_align256(meta_ints * 4) + fwd_align256(part_rows * (size_t)p.head_dim_v * 4) +
                            fwd_align256(part_rows * 8);
    cudaStream_t stream = (cudaStream_t)a->stream;
    // test hook (testing.h): the call's GPU work starts here (the metadata copy, then the kernels)
    if (pol->fwd_events[0] != NULL) cudaEventRecord((cudaEvent_t)pol->fwd_events[0], stream);
    if (ws_bytes > 0) {
        if (fwd_ws_size[dev] < ws_bytes) {
            if (fwd_ws_ptr[dev] != NULL) {
                e = cudaDeviceSynchronize();  // no call of this process still uses it (we hold the lock)
                if (e == cudaSuccess) e = cudaFree(fwd_ws_ptr[dev]);
                fwd_ws_ptr[dev] = NULL;
                fwd_ws_size[dev] = 0;
                if (e != cudaSuccess) return fwd_device_error(err, e, "cudaFree (forward workspace)");
            }
            e = cudaMalloc(&fwd_ws_ptr[dev], ws_bytes);
            if (e != cudaSuccess) {
                cudaGetLastError();
                fwd_ws_ptr[dev] = NULL;
                return fa_fail(err, FA_ERR_NOMEM, "", "the forward needs %zu bytes of device workspace: %s", ws_bytes,
                               cudaGetErrorString(e));
            }
            fwd_ws_size[dev] = ws_bytes;
        }
        unsigned char *ws = (unsigned char *)fwd_ws_ptr[dev];
        if (meta_ints > 0) {
            int32_t *host = (int32_t *)malloc(meta_ints * 4);
            if (host == NULL) return fa_fail(err, FA_ERR_NOMEM, "", "no host memory for the metadata copy");
            int32_t *dptr = (int32_t *)ws;
            size_t at = 0;
            if (cu_q) { memcpy(host + at, cu_q, (size_t)(B + 1) * 4); p.cu_q = dptr + at; at += (size_t)(B + 1); }
            if (cu_k) { memcpy(host + at, cu_k, (size_t)(B + 1) * 4); p.cu_k = dptr + at; at += (size_t)(B + 1); }
            if (used_k) { memcpy(host + at, used_k, (size_t)B * 4); p.used_k = dptr + at; at += (size_t)B; }
            if (paged) {
                const size_t n = (size_t)((B - 1) * a->paged.table_stride + a->paged.max_pages_per_seq);
                memcpy(host + at, a->paged.block_table, n * 4);
                p.block_table = dptr + at;
                at += n;
            }
            e = cudaMemcpyAsync(ws, host, meta_ints * 4, cudaMemcpyHostToDevice, stream);
            free(host);  // pageable source: staged before cudaMemcpyAsync returns
            if (e != cudaSuccess) return fwd_device_error(err, e, "cudaMemcpyAsync (varlen / paged metadata)");
        }
        if (paged) {
            p.table_stride = a->paged.table_stride;
            p.page_size = (int)pr->page_size;
        }
        if (n_split) {
            p.n_split = n_split;
            p.blocks_per_split = bps;
            p.part_o = (float *)(ws + fwd_align256(meta_ints * 4));
            p.part_ml = (float *)(ws + fwd_align256(meta_ints * 4) + fwd_align256(part_rows * (size_t)p.head_dim_v * 4));
        }
    }

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

    // ---- launch (and, with split-KV, the combine)
    dim3 grid((unsigned)m_blocks, (unsigned)(units < 65535 ? units : 65535), (unsigned)(n_split ? n_split : 1));
    dim3 block((unsigned)launch_threads, 1, 1);
    if (!use_ws || fwd_ws_launch(&p, cfg->hd, pr->dtype == FA_BF16, natural, rows_q, cu_k ? (int64_t)cu_k[B] : 0,
                                 paged ? a->paged.num_pages : 0, stream, &e) != 0) {
        kern<<<grid, block, smem, stream>>>(p);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) return fwd_device_error(err, e, "flash_fwd_kernel launch");
    if (n_split) {
        const int64_t rows = (int64_t)p.bh_total * Sq;
        // sm_90: a programmatic dependent launch (its launch overlaps the split kernel's tail;
        // the combine waits for that grid's completion in griddepcontrol.wait)
        cudaLaunchConfig_t lc = {};
        lc.gridDim = dim3((unsigned)rows, 1, 1);
        lc.blockDim = dim3(fwd_combine_threads, 1, 1);
        lc.stream = stream;
        cudaLaunchAttribute la[1];
        la[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        la[0].val.programmaticStreamSerializationAllowed = 1;
        lc.attrs = la;
        lc.numAttrs = cc_major >= 9 ? 1 : 0;
        e = cudaLaunchKernelEx(&lc, flash_fwd_combine, p, natural, (int)(pr->dtype == FA_BF16));
        if (e != cudaSuccess) return fwd_device_error(err, e, "flash_fwd_combine launch");
    }
    if (pol->fwd_events[1] != NULL) cudaEventRecord((cudaEvent_t)pol->fwd_events[1], stream);  // test hook
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
extern "C" fa_status fa_cuda_forward(const fa_fwd_args *a, fa_error *err) {
    return fa_cuda_forward_policy(a, &fa_cuda_policy_default, err);
}
