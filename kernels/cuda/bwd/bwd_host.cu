/* bwd_host.cu: fa_cuda_backward (prefix bwd_): validation, the cached workspace, the screen's
 * verdict (fast or exact kernels), the kernel family per call (bwd_sm80.cu, bwd_sm90.cu; the
 * policy of kernels/cuda/testing.h) and the synchronization. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/bwd/bwd_common.cuh"
#include "kernels/cuda/common/limits.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/testing.h"

// ----------------------------------------------------------------------------
// host: workspace (one cached buffer per device, held under a lock for a whole call)

#define BWD_MAX_DEVICES 64
static pthread_mutex_t bwd_ws_lock = PTHREAD_MUTEX_INITIALIZER;
static void *bwd_ws_ptr[BWD_MAX_DEVICES];
static size_t bwd_ws_size[BWD_MAX_DEVICES];

static fa_status bwd_cuda_fail(fa_error *err, cudaError_t e, const char *what) {
    return fa_fail(err, FA_ERR_DEVICE, "", "CUDA error in the backward (%s): %s (%s)", what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

/* 16-byte vector access allowed: pointer 16-byte aligned and every used stride a multiple of 8. */
static int bwd_vec16(const fa_tensor *t, int64_t nb, int64_t ns, int64_t nh) {
    if (((uintptr_t)t->ptr) % 16 != 0) return 0;
    if (nb > 1 && t->stride[0] % 8 != 0) return 0;
    if (ns > 1 && t->stride[1] % 8 != 0) return 0;
    if (nh > 1 && t->stride[2] % 8 != 0) return 0;
    return 1;
}

/* 4-byte pair access allowed: pointer 4-byte aligned and every used stride even. */
static int bwd_vec4(const fa_tensor *t, int64_t nb, int64_t ns, int64_t nh) {
    if (((uintptr_t)t->ptr) % 4 != 0) return 0;
    if (nb > 1 && t->stride[0] % 2 != 0) return 0;
    if (ns > 1 && t->stride[1] % 2 != 0) return 0;
    if (nh > 1 && t->stride[2] % 2 != 0) return 0;
    return 1;
}

/* The screen's verdict (words documented at bwd_prep_kernel): 1 when this call needs
 * the exact kernels. */
static int bwd_needs_exact(const unsigned scr[4], const bwd_params *p) {
    float w[4];
    memcpy(w, scr, sizeof(w));
    if (p->scan_nf && scr[0] != 0) return 1;
    if (!p->scan_norm) return 0;
    const double ovf = 65520.0; /* |x| that rounds to Inf in fp16 */
    const double bound = sqrt((double)w[1]) * sqrt((double)w[2]) + (double)w[3];
    return !(bound < 0.5 * ovf); /* NaN: exact */
}

/* The backend's limits (common/limits.h), with the backward's own pointer alignment: the
 * element size (16-byte paths are chosen at run time, bwd_vec16). */
static const fa_limits bwd_limits = {
    FA_CUDA_MAX_HEAD_DIM,
    FA_CUDA_HEAD_DIM_MULTIPLE,
    FA_CUDA_DQK_MUST_EQUAL_DV,
    FA_CUDA_BWD_PTR_ALIGN_BYTES,
    FA_CUDA_UNIT_LAST_STRIDE,
    1, /* supports_varlen: one grid per kernel on the Hopper path, else per sequence (bwd_varlen) */
    0, /* supports_paged */
    1, /* supports_softcap: the CAP instantiations of the sm_80 kernels (bwd_common.cuh) */
    1, /* supports_sinks: dsinks by bwd_dsinks_run */
};

// ----------------------------------------------------------------------------
// sinks: dsinks[h] = - sum_{b,i} exp(sinks[h] - lse_bhi) D_bhi (flash_api.h)

/* D_bhi = sum_d dO_bhid O_bhid (fp32 products of the dtype values, summed by the lane over
 * d = lane, lane + 32, ... then a butterfly: fp32 RN); w = expf(sinks[h] - lse) (CUDA expf,
 * 2 ulp; the fp32 difference rounds once); term = -(w D). Partial sums per (head, chunk of
 * BWD_SINK_ROWS rows): one warp per row, then the block's warps in order; bwd_dsinks_sum adds
 * the chunks in order. No atomics: bitwise reproducible. Rows of every sequence, empty rows
 * included (their LSE is the sink: w = 1). */
#define BWD_SINK_ROWS 256
__global__ void bwd_dsinks_partial(const uint16_t *o, const uint16_t *dout, const float *lse, const float *sinks,
                                   int64_t o_sb, int64_t o_ss, int64_t o_sh, int64_t do_sb, int64_t do_ss, int64_t do_sh,
                                   int64_t l_sb, int64_t l_sh, int64_t l_ss, int64_t Sq, int64_t rows, int D, int bf16,
                                   float *part) {
    __shared__ float warp_sum[8];
    const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t r0 = (int64_t)blockIdx.y * BWD_SINK_ROWS;
    const float sink = sinks[h];
    float acc = 0.0f;
    for (int64_t r = r0 + warp; r < r0 + BWD_SINK_ROWS && r < rows; r += 8) {
        const int64_t b = r / Sq, i = r % Sq;
        const uint16_t *orow = o + b * o_sb + i * o_ss + (int64_t)h * o_sh;
        const uint16_t *drow = dout + b * do_sb + i * do_ss + (int64_t)h * do_sh;
        float d = 0.0f;
        for (int c = lane; c < D; c += 32)
            d = fmaf(bf16 ? ptx_to_float<true>(drow[c]) : ptx_to_float<false>(drow[c]),
                     bf16 ? ptx_to_float<true>(orow[c]) : ptx_to_float<false>(orow[c]), d);
#pragma unroll
        for (int m = 16; m >= 1; m >>= 1) d += __shfl_xor_sync(0xffffffffu, d, m);
        const float w = expf(sink - lse[b * l_sb + (int64_t)h * l_sh + i * l_ss]);
        acc -= w * d;  // per warp, rows in order (every lane holds the same value)
    }
    if (lane == 0) warp_sum[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < 8; ++w) s += warp_sum[w];
        part[(int64_t)h * gridDim.y + blockIdx.y] = s;
    }
}

__global__ void bwd_dsinks_sum(const float *part, int chunks, int heads, float *dsinks) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= heads) return;
    float s = 0.0f;
    for (int c = 0; c < chunks; ++c) s += part[(int64_t)h * chunks + c];
    dsinks[h] = s;
}

/* dsinks (contract v3): launches on st. Packed Q (cu_seqlens_q): the cu_q[B] packed rows are one
 * sequence of that length (every packed row belongs to a sequence); dense Q: B sequences of
 * seqlen_q rows (seqused_k and cu_seqlens_k change no query row). */
static cudaError_t bwd_dsinks_run(const fa_bwd_args *a, cudaStream_t st) {
    const fa_problem *pr = &a->p;
    const int32_t *cq = a->varlen.cu_seqlens_q;
    const int64_t sq = cq ? (int64_t)cq[pr->batch] : pr->seqlen_q;
    const int64_t rows = cq ? sq : pr->batch * pr->seqlen_q, Hq = pr->heads_q;
    if (rows == 0) return cudaMemsetAsync(a->dsinks, 0, (size_t)Hq * 4, st);
    const int64_t chunks = (rows + BWD_SINK_ROWS - 1) / BWD_SINK_ROWS;
    if (chunks > 65535) return cudaErrorInvalidValue; /* more than 16.7M rows: not handled */
    float *part = NULL;
    cudaError_t e = cudaMallocAsync((void **)&part, (size_t)(Hq * chunks) * 4, st);
    if (e != cudaSuccess) return e;
    bwd_dsinks_partial<<<dim3((unsigned)Hq, (unsigned)chunks), 256, 0, st>>>(
        (const uint16_t *)a->o.ptr, (const uint16_t *)a->dout.ptr, a->lse.ptr, a->sinks, a->o.stride[0], a->o.stride[1],
        a->o.stride[2], a->dout.stride[0], a->dout.stride[1], a->dout.stride[2], a->lse.stride[0], a->lse.stride[1],
        a->lse.stride[2], sq, rows, (int)pr->head_dim_v, pr->dtype == FA_BF16, part);
    bwd_dsinks_sum<<<(unsigned)((Hq + 127) / 128), 128, 0, st>>>(part, (int)chunks, (int)Hq, a->dsinks);
    e = cudaGetLastError();
    cudaError_t e2 = cudaFreeAsync(part, st);
    return e != cudaSuccess ? e : e2;
}

// ----------------------------------------------------------------------------
// entry point

/* One dense backward on a->stream, the workspace lock held. sync_end = 1: returns after the stream
 * has finished it; 0 (bwd_varlen's sequences): returns once it is queued (the caller synchronizes;
 * the workspace is reused in stream order, and is only freed after a synchronization). */
/* screen_only: the preprocess and the screen only (workspace writes, no output written): FA_OK,
 * or the softcap decline below; bwd_varlen_locked screens every sequence of a softcap call this
 * way before the first one writes, so a declined call writes nothing. */
/* vl (one-grid varlen, bwd_varlen_locked; NULL: a dense call): a's seqlen_q / seqlen_k are
 * then the maxima over its sequences, and the call runs only where every kernel it needs takes
 * the whole packed batch in one grid (bwd_seq_view): the Hopper kernels (a fast call, and in the
 * deterministic mode their dQ kernel), the preprocess and the dQ conversion. Elsewhere (the sm_80
 * kernels, a softcap, an exact call after the screen, more than 65535 sequences) it sets
 * *per_seq = 1 and returns FA_OK having written no output (the workspace only), and the caller
 * runs the sequences one by one. */
typedef struct {
    const int32_t *cu_q, *cu_k, *used; /* the call's host arrays (NULL: not given) */
    int64_t rows_q;                    /* query rows per head: cu_q[B], or B seqlen_q (dense Q) */
    int64_t sk_alloc;                  /* dense K: its allocated keys per sequence (seqlen_k) */
    int64_t sq_dense;                  /* dense Q: its rows per sequence (seqlen_q) */
    int64_t max_gap;                   /* the most keys any sequence allocates but does not use */
} bwd_vl_host;

__global__ void bwd_vl_zero_kernel(const bwd_params pk, int64_t sk_alloc);

/* The order in which the Hopper kernels' grid takes the sequences (bwd_params.order): by
 * Sq_b Sk_b (the product's count of (query, key) pairs, what a sequence's tiles cost),
 * largest first, ties in batch order (a stable order: the same call always launches the same
 * grid). Only the schedule changes: every sequence's tiles and arithmetic are the same. */
typedef struct {
    int64_t work;
    int32_t b;
} bwd_vl_key;

static int bwd_vl_key_cmp(const void *x, const void *y) {
    const bwd_vl_key *a = (const bwd_vl_key *)x, *c = (const bwd_vl_key *)y;
    if (a->work != c->work) return a->work > c->work ? -1 : 1;
    return a->b < c->b ? -1 : (a->b > c->b);
}

static void bwd_vl_order(const bwd_vl_host *vl, int64_t B, int32_t *order) {
    bwd_vl_key *k = (bwd_vl_key *)malloc(sizeof(bwd_vl_key) * (size_t)(B > 0 ? B : 1));
    if (!k) { /* batch order (only the schedule differs) */
        for (int64_t b = 0; b < B; b++) order[b] = (int32_t)b;
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t sq = vl->cu_q ? (int64_t)vl->cu_q[b + 1] - vl->cu_q[b] : vl->sq_dense;
        const int64_t sk = vl->used ? (int64_t)vl->used[b]
                                    : (vl->cu_k ? (int64_t)vl->cu_k[b + 1] - vl->cu_k[b] : vl->sk_alloc);
        k[b].work = sq * sk;
        k[b].b = (int32_t)b;
    }
    qsort(k, (size_t)B, sizeof(bwd_vl_key), bwd_vl_key_cmp);
    for (int64_t b = 0; b < B; b++) order[b] = k[b].b;
    free(k);
}

static fa_status bwd_run_locked(const fa_bwd_args *a, const fa_cuda_policy *pol, fa_error *err, int dev,
                                int sync_end, int screen_only, const bwd_vl_host *vl, int *per_seq) {
    const fa_problem *pr = &a->p;
    cudaStream_t st = (cudaStream_t)a->stream;
    cudaError_t e;
    const int64_t D = pr->head_dim_qk, Dv = pr->head_dim_v;
    const int hd = bwd_sm80_tile(D, Dv); /* 64, 128, 256, or 192: the pair (192, 128) */

    /* shared memory of the largest kernel of this call */
    int optin = 0;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess)
        return bwd_cuda_fail(err, e, "cudaDeviceGetAttribute");
    const size_t need = bwd_sm80_smem_bytes(hd, a->deterministic);
    if ((size_t)optin < need)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "head_dim_qk",
                       "head dims %lld/%lld need %zu bytes of shared memory per block in the backward; this GPU "
                       "allows %d.", (long long)D, (long long)Dv, need, optin);

    bwd_params p;
    memset(&p, 0, sizeof(p));
    p.B = pr->batch; p.Sq = pr->seqlen_q; p.Sk = pr->seqlen_k;
    p.Hq = pr->heads_q; p.Hkv = pr->heads_kv; p.group = p.Hq / p.Hkv; p.D = D; p.Dv = Dv;
    p.scale = fa_effective_scale(pr);
    p.q = (const uint16_t *)a->q.ptr; p.k = (const uint16_t *)a->k.ptr; p.v = (const uint16_t *)a->v.ptr;
    p.o = (const uint16_t *)a->o.ptr; p.dout = (const uint16_t *)a->dout.ptr;
    p.dq = (uint16_t *)a->dq.ptr; p.dk = (uint16_t *)a->dk.ptr; p.dv = (uint16_t *)a->dv.ptr;
    for (int x = 0; x < 3; x++) {
        p.qs[x] = a->q.stride[x]; p.ks[x] = a->k.stride[x]; p.vs[x] = a->v.stride[x];
        p.os[x] = a->o.stride[x]; p.dos[x] = a->dout.stride[x];
        p.dqs[x] = a->dq.stride[x]; p.dks[x] = a->dk.stride[x]; p.dvs[x] = a->dv.stride[x];
        p.lses[x] = a->lse.stride[x];
    }
    p.lse = a->lse.ptr;
    p.mask = a->mask.ptr;
    for (int x = 0; x < 4; x++) p.ms[x] = a->mask.stride[x];

    /* visibility: dj = j - i - off with diag(i) = i + off */
    const int bottom_right = pr->causal != FA_CAUSAL_NONE ? pr->causal == FA_CAUSAL_BOTTOM_RIGHT
                                                          : pr->window_align == FA_ALIGN_BOTTOM_RIGHT;
    p.off = bottom_right ? p.Sk - p.Sq : 0;
    const int64_t span = p.Sq + p.Sk; /* |dj| < span always: larger bounds never bind */
    /* causal: j <= diag(i); a window_right >= 0 is then never tighter than causal */
    const int64_t right = pr->causal != FA_CAUSAL_NONE ? 0 : pr->window_right; /* < 0: unbounded */
    p.has_right = right >= 0 && right < span;
    p.right = p.has_right ? right : 0;
    p.has_left = pr->window_left >= 0 && pr->window_left < span;
    p.left = p.has_left ? pr->window_left : 0;

    /* softcap: cap_scale = fl(scale / softcap), the forward's (fwd_host.cu) */
    const int cap = pr->softcap > 0.0f;
    if (cap) {
        p.softcap = pr->softcap;
        p.cap_scale = p.scale / pr->softcap; /* fp32 RN */
    }

    p.nsplit = bwd_sm80_nsplit(hd);
    /* the screen: NaN/Inf can only leak where visibility differs from row to row; the
     * |dS| bound only matters for fp16 (bf16 rounds dS to Inf only at the top of fp32's
     * range, where dP itself has already left the precision profile) */
    p.scan_nf = p.has_left || p.has_right || p.mask != NULL;
    p.scan_norm = pr->dtype == FA_F16;
    /* the views' extents: packed (vl with cu_seqlens): one batch of all the packed rows, so
     * that every sequence's first row (cu[b] times the row stride) keeps the alignment */
    const int64_t vb_q = vl && vl->cu_q ? 1 : p.B, vs_q = vl && vl->cu_q ? vl->rows_q : p.Sq;
    const int64_t vb_k = vl && vl->cu_k ? 1 : p.B, vs_k = vl && vl->cu_k ? (int64_t)vl->cu_k[p.B] : p.Sk;
    p.vec_q = bwd_vec16(&a->q, vb_q, vs_q, p.Hq);
    p.vec_k = bwd_vec16(&a->k, vb_k, vs_k, p.Hkv);
    p.vec_v = bwd_vec16(&a->v, vb_k, vs_k, p.Hkv);
    p.vec_do = bwd_vec16(&a->dout, vb_q, vs_q, p.Hq);
    p.vec_o_prep = bwd_vec16(&a->o, vb_q, vs_q, p.Hq);
    p.vec_do_prep = p.vec_do;
    p.w32_dq = bwd_vec4(&a->dq, vb_q, vs_q, p.Hq);
    p.w32_dk = bwd_vec4(&a->dk, vb_k, vs_k, p.Hkv);
    p.w32_dv = bwd_vec4(&a->dv, vb_k, vs_k, p.Hkv);

    /* the Hopper dK/dV kernel (section 2h) where it is proven: an sm_90 device (its code is
     * sm_90a), head dim padded to 64 or 128, 16-byte copies for every streamed view, the
     * shared memory it needs, and the policy (default: yes; testing.h); the launch also needs
     * the fast kernels (below). Deterministic mode: its dK/dV-only instantiation, then
     * bwd_g_dq_kernel (section 2q; bwd_dq_kernel under a policy with bwd_sm90_dq = 0) */
    int cc_major = 0, cc_minor = 0;
    if ((e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess)
        return bwd_cuda_fail(err, e, "cudaDeviceGetAttribute");
    /* (equal head dims only: the wgmma kernels have one head dim) */
    const int gmma = pol->bwd_sm90 && !cap && D == Dv && cc_major == 9 && cc_minor == 0 && (hd == 64 || hd == 128) && p.vec_q &&
                     p.vec_k && p.vec_v && p.vec_do && (size_t)optin >= bwd_sm90_smem_bytes(hd) &&
                     (!a->deterministic || pol->bwd_sm90_det);
    if (vl) {
        *per_seq = !gmma || (a->deterministic && !pol->bwd_sm90_dq) || p.B > 65535 || pol->bwd_vl_per_seq;
        if (*per_seq) return FA_OK;
        p.vl = 1;
        p.bottom_right = bottom_right;
    }

    /* workspace: lse, dsum [B*Hq*Sq] (vl: Hq rows_q, bwd_seq_view), the screen (256 bytes),
     * (default mode) dq [B*Hq*Sq*D] fp32, then (vl) the device copies of cu_q, cu_k, seqused_k */
    const int64_t nrows = vl ? p.Hq * vl->rows_q : p.B * p.Hq * p.Sq;
    const size_t rows_bytes = ((size_t)nrows * 4 + 255) / 256 * 256;
    const size_t dq_bytes = a->deterministic ? 0 : (size_t)nrows * (size_t)D * 4;
    const size_t tab_n = vl ? (size_t)(4 * p.B + 2) : 0, tab_bytes = tab_n * 4;
    const size_t ws_bytes = 2 * rows_bytes + 256 + dq_bytes + tab_bytes;
    if (ws_bytes > bwd_ws_size[dev]) {
        if (bwd_ws_ptr[dev]) {
            // queued work of this call (earlier sequences of a varlen call) may still use it
            if ((e = cudaStreamSynchronize(st)) != cudaSuccess) return bwd_cuda_fail(err, e, "cudaStreamSynchronize");
            if ((e = cudaFree(bwd_ws_ptr[dev])) != cudaSuccess) return bwd_cuda_fail(err, e, "cudaFree");
            bwd_ws_ptr[dev] = NULL;
            bwd_ws_size[dev] = 0;
        }
        e = cudaMalloc(&bwd_ws_ptr[dev], ws_bytes);
        if (e != cudaSuccess) {
            bwd_ws_ptr[dev] = NULL;
            cudaGetLastError();
            return fa_fail(err, FA_ERR_NOMEM, "", "the backward needs %zu bytes of device workspace: %s", ws_bytes,
                           cudaGetErrorString(e));
        }
        bwd_ws_size[dev] = ws_bytes;
    }
    char *ws = (char *)bwd_ws_ptr[dev];
    p.lse_ws = (float *)ws;
    p.dsum_ws = (float *)(ws + rows_bytes);
    p.screen = (unsigned *)(ws + 2 * rows_bytes);
    p.dq_ws = a->deterministic ? NULL : (float *)(ws + 2 * rows_bytes + 256);
    if ((e = cudaMemsetAsync(ws + 2 * rows_bytes, 0, 256 + dq_bytes, st)) != cudaSuccess)
        return bwd_cuda_fail(err, e, "cudaMemsetAsync");
    if (vl) {
        /* [cu_q (B+1)][cu_k (B+1)][seqused_k (B)], the absent ones left out, then the grid's
         * sequence order (B, bwd_vl_order); pageable source:
         * cudaMemcpyAsync returns once it has been staged, so tab is freed right after */
        int32_t *tab = (int32_t *)malloc(tab_bytes), *dtab = (int32_t *)(ws + 2 * rows_bytes + 256 + dq_bytes);
        if (!tab) return fa_fail(err, FA_ERR_NOMEM, "", "the backward's sequence table (%zu bytes)", tab_bytes);
        size_t n = 0;
        if (vl->cu_q) { memcpy(tab + n, vl->cu_q, (size_t)(p.B + 1) * 4); p.cu_q = dtab + n; n += (size_t)p.B + 1; }
        if (vl->cu_k) { memcpy(tab + n, vl->cu_k, (size_t)(p.B + 1) * 4); p.cu_k = dtab + n; n += (size_t)p.B + 1; }
        if (vl->used) { memcpy(tab + n, vl->used, (size_t)p.B * 4); p.used_k = dtab + n; n += (size_t)p.B; }
        bwd_vl_order(vl, p.B, tab + n);
        p.order = dtab + n;
        n += (size_t)p.B;
        e = n ? cudaMemcpyAsync(dtab, tab, n * 4, cudaMemcpyHostToDevice, st) : cudaSuccess;
        free(tab);
        if (e != cudaSuccess) return bwd_cuda_fail(err, e, "cudaMemcpyAsync (sequence table)");
    }

    /* preprocess and screen, then the fast or the exact kernels (bwd_needs_exact) */
    const int bf16 = pr->dtype == FA_BF16;
    e = bwd_sm80_prep(&p, bf16, st);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "preprocess launch");
    int exact = 0;
    if (p.scan_nf || p.scan_norm) {
        unsigned scr[4];
        if ((e = cudaMemcpyAsync(scr, p.screen, sizeof(scr), cudaMemcpyDeviceToHost, st)) != cudaSuccess)
            return bwd_cuda_fail(err, e, "cudaMemcpyAsync (screen)");
        if ((e = cudaStreamSynchronize(st)) != cudaSuccess) return bwd_cuda_fail(err, e, "cudaStreamSynchronize");
        exact = bwd_needs_exact(scr, &p);
    }
    if (vl && exact) { /* the exact kernels are sm_80 ones: the sequences one by one */
        *per_seq = 1;
        return FA_OK;
    }
    /* softcap has no exact instantiation: a call whose screen needs the slow paths (a NaN/Inf
     * in Q, dO or K under row-dependent visibility, or fp16 dS past 65504) is declined */
    if (cap && exact)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "softcap",
                       "the CUDA backward does not run softcap with non-finite Q, dO or K under a mask or window, "
                       "or with fp16 dS beyond the fp16 range (no exact softcap kernels).");
    if (screen_only) return FA_OK;
    p.no_ws = pol->bwd_no_ws;
    /* the Hopper kernels have no exact and no softcap instantiation: such calls run the sm_80 ones */
    e = gmma && !exact ? bwd_sm90_run(&p, hd, bf16, a->deterministic, pol->bwd_sm90_dq, st)
                       : bwd_sm80_run(&p, hd, bf16, a->deterministic, exact, cap, st);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "kernel launch");
    if (vl && vl->used && vl->max_gap > 0) { /* keys allocated but not used: dK = dV = 0 */
        int64_t bx = (vl->max_gap * p.Hkv * (D > Dv ? D : Dv) + 255) / 256, lim = 4096 / p.B;
        if (lim < 1) lim = 1;
        if (bx > lim) bx = lim;
        bwd_vl_zero_kernel<<<dim3((unsigned)bx, (unsigned)p.B), 256, 0, st>>>(p, vl->sk_alloc);
        if ((e = cudaGetLastError()) != cudaSuccess) return bwd_cuda_fail(err, e, "zeroing unused keys");
    }
    if (sync_end && (e = cudaStreamSynchronize(st)) != cudaSuccess)
        return bwd_cuda_fail(err, e, "cudaStreamSynchronize");
    return FA_OK;
}

/* 1 when ptr is CUDA device memory (the dsinks kernels dereference sinks, dsinks). */
static int bwd_is_device_ptr(const void *ptr) {
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, ptr) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return at.type != cudaMemoryTypeUnregistered && at.devicePointer != NULL;
}

/* dQ, dK, dV of a dense call (sinks change none of their formulas: P comes from the given
 * LSE, which holds the sink). */
static fa_status bwd_dense(const fa_bwd_args *a, const fa_cuda_policy *pol, fa_error *err) {
    const fa_problem *pr = &a->p;
    if (pr->batch == 0 || (pr->seqlen_q == 0 && pr->seqlen_k == 0)) return FA_OK; /* nothing to write */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "cudaGetDevice");
    if (dev < 0 || dev >= BWD_MAX_DEVICES)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "", "device %d is beyond the backward's table of %d devices", dev,
                       BWD_MAX_DEVICES);
    pthread_mutex_lock(&bwd_ws_lock);
    fa_status s = bwd_run_locked(a, pol, err, dev, 1, 0, NULL, NULL);
    pthread_mutex_unlock(&bwd_ws_lock);
    return s;
}

// ----------------------------------------------------------------------------
// varlen (contract v3): cu_seqlens_q/k and seqused_k

/* Zero rows [r0, r1) of every head of a [rows, heads, D] 16-bit view (the keys a sequence
 * allocates but does not use: dK = dV = 0 there, flash_api.h). One thread per element. */
__global__ void bwd_zero_rows(uint16_t *base, int64_t rs, int64_t hs, int64_t heads, int64_t D, int64_t r0, int64_t r1) {
    const int64_t n = (r1 - r0) * heads * D;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = x % D, h = (x / D) % heads, r = r0 + x / (D * heads);
        base[r * rs + h * hs + d] = 0;
    }
}

static cudaError_t bwd_zero_launch(const fa_tensor *t, int64_t row_off, int64_t heads, int64_t D, int64_t r0,
                                   int64_t r1, cudaStream_t st) {
    const int64_t n = (r1 - r0) * heads * D;
    if (n <= 0) return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    bwd_zero_rows<<<(unsigned)blocks, 256, 0, st>>>((uint16_t *)t->ptr + row_off, t->stride[1], t->stride[2], heads,
                                                    D, r0, r1);
    return cudaGetLastError();
}

/* One-grid varlen (bwd_run_locked): dK = dV = 0 on the keys sequence blockIdx.y allocates but
 * does not use (seqused_k[b] <= j < its cu_k span, or sk_alloc for dense K); grid-stride over
 * blockIdx.x. Its rows are located by bwd_seq_view (p.Sk = seqused_k[b]). */
__global__ void bwd_vl_zero_kernel(const bwd_params pk, int64_t sk_alloc) {
    const int64_t b = blockIdx.y;
    const bwd_params p = bwd_seq_view(pk, b);
    const int64_t alloc = pk.cu_k ? (int64_t)pk.cu_k[b + 1] - pk.cu_k[b] : sk_alloc;
    const int64_t step = (int64_t)gridDim.x * blockDim.x, x0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t nk = (alloc - p.Sk) * p.Hkv * p.D, nv = (alloc - p.Sk) * p.Hkv * p.Dv;
    for (int64_t x = x0; x < nk; x += step) {
        const int64_t d = x % p.D, h = (x / p.D) % p.Hkv, r = p.Sk + x / (p.D * p.Hkv);
        p.dk[r * p.dks[1] + h * p.dks[2] + d] = 0;
    }
    for (int64_t x = x0; x < nv; x += step) {
        const int64_t d = x % p.Dv, h = (x / p.Dv) % p.Hkv, r = p.Sk + x / (p.Dv * p.Hkv);
        p.dv[r * p.dvs[1] + h * p.dvs[2] + d] = 0;
    }
}

/* view of a 16-bit tensor at element offset off, batch stride 0 (a batch of one) */
static fa_tensor bwd_view(const fa_tensor *t, int64_t off) {
    fa_tensor v = *t;
    v.ptr = (void *)((uint16_t *)t->ptr + off);
    v.stride[0] = 0;
    return v;
}

/* A varlen call (cu_seqlens_q, cu_seqlens_k and/or seqused_k; host arrays) is its sequences'
 * dense calls: sequence b is the dense backward on the views of its rows, with batch 1,
 * seqlen_q = Sq_b, seqlen_k = Sk_b, so the causal and window diagonals are its own (bottom-right
 * aligns its own ends) and its arithmetic is that of the same sequence run alone, bit for bit.
 * Two ways to run them:
 *   one grid (first choice): bwd_run_locked with vl: one launch per kernel for the whole batch
 *     (preprocess and screen, the Hopper dK/dV kernel, the dQ conversion or the Hopper dQ
 *     kernel, the zeroing of unused keys); each CTA finds its sequence from the device copies of
 *     cu_seqlens / seqused_k and its tile within it (bwd_seq_view), blocks past a short
 *     sequence's end exit. Taken for fast calls (the screen) where the Hopper kernels run.
 *   per sequence (every other call: the sm_80 kernel families, a softcap, an exact call, the
 *     sm_80 deterministic dQ kernel under a test policy, more than 65535 sequences): bwd_dense's
 *     launch sequence per sequence, one after the other on the stream (the workspace is shared:
 *     the lock is held for the whole call; the host waits at the end, or where a sequence's
 *     screen is read back).
 * Keys allocated but not used (seqused_k[b] <= j < allocated) get dK = dV = 0. Offsets are int64
 * (cu[b] * stride). */
static fa_status bwd_varlen_locked(const fa_bwd_args *a, const fa_cuda_policy *pol, fa_error *err, int dev);

static fa_status bwd_varlen(const fa_bwd_args *a, const fa_cuda_policy *pol, fa_error *err) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "cudaGetDevice");
    if (dev < 0 || dev >= BWD_MAX_DEVICES)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "", "device %d is beyond the backward's table of %d devices", dev,
                       BWD_MAX_DEVICES);
    pthread_mutex_lock(&bwd_ws_lock);
    fa_status s = bwd_varlen_locked(a, pol, err, dev);
    if (s != FA_OK) cudaStreamSynchronize((cudaStream_t)a->stream);  // nothing queued outlives the lock
    pthread_mutex_unlock(&bwd_ws_lock);
    return s;
}

static fa_status bwd_varlen_locked(const fa_bwd_args *a, const fa_cuda_policy *pol, fa_error *err, int dev) {
    const fa_problem *pr = &a->p;
    const int32_t *cq = a->varlen.cu_seqlens_q, *ck = a->varlen.cu_seqlens_k, *used = a->varlen.seqused_k;
    cudaStream_t st = (cudaStream_t)a->stream;
    /* one grid per kernel for the whole batch where the kernels take it (bwd_run_locked's vl) */
    {
        bwd_vl_host vl;
        memset(&vl, 0, sizeof(vl));
        vl.cu_q = cq; vl.cu_k = ck; vl.used = used;
        vl.rows_q = cq ? (int64_t)cq[pr->batch] : pr->batch * pr->seqlen_q;
        vl.sk_alloc = pr->seqlen_k;
        vl.sq_dense = pr->seqlen_q;
        int64_t max_q = 0, max_k = 0;
        for (int64_t b = 0; b < pr->batch; b++) {
            const int64_t sq = cq ? (int64_t)cq[b + 1] - cq[b] : pr->seqlen_q;
            const int64_t alloc_k = ck ? (int64_t)ck[b + 1] - ck[b] : pr->seqlen_k;
            const int64_t sk = used ? (int64_t)used[b] : alloc_k;
            if (sq > max_q) max_q = sq;
            if (sk > max_k) max_k = sk;
            if (alloc_k - sk > vl.max_gap) vl.max_gap = alloc_k - sk;
        }
        if (max_q > 0 || max_k > 0) { /* else nothing but the zeroing below */
            fa_bwd_args s = *a;
            s.p.seqlen_q = max_q;
            s.p.seqlen_k = max_k;
            int per_seq = 0;
            fa_status r = bwd_run_locked(&s, pol, err, dev, 0, 0, &vl, &per_seq);
            if (r != FA_OK) return r;
            if (!per_seq) {
                cudaError_t e = cudaStreamSynchronize(st);
                if (e != cudaSuccess) return bwd_cuda_fail(err, e, "cudaStreamSynchronize");
                return FA_OK;
            }
        }
    }
    /* the sequences one by one (the sm_80 kernels, softcap, exact calls) */
    /* softcap: its decline depends on each sequence's screen; every sequence is screened (pass 0)
     * before any writes (pass 1), so a declined call leaves every output untouched */
    for (int pass = pr->softcap > 0.0f ? 0 : 1; pass < 2; pass++)
    for (int64_t b = 0; b < pr->batch; b++) {
        const int64_t sq = cq ? (int64_t)cq[b + 1] - cq[b] : pr->seqlen_q;
        const int64_t alloc_k = ck ? (int64_t)ck[b + 1] - ck[b] : pr->seqlen_k;
        const int64_t sk = used ? (int64_t)used[b] : alloc_k;
        /* element offsets of sequence b's first row: packed row cu[b], or batch b */
        const int64_t qrow = cq ? (int64_t)cq[b] : 0, krow = ck ? (int64_t)ck[b] : 0;
        fa_bwd_args s = *a;
        memset(&s.varlen, 0, sizeof(s.varlen));
        s.p.batch = 1;
        s.p.seqlen_q = sq;
        s.p.seqlen_k = sk;
#define BWD_QOFF(t) (cq ? qrow * (t).stride[1] : b * (t).stride[0])
#define BWD_KOFF(t) (ck ? krow * (t).stride[1] : b * (t).stride[0])
        s.q = bwd_view(&a->q, BWD_QOFF(a->q));
        s.o = bwd_view(&a->o, BWD_QOFF(a->o));
        s.dout = bwd_view(&a->dout, BWD_QOFF(a->dout));
        s.dq = bwd_view(&a->dq, BWD_QOFF(a->dq));
        s.k = bwd_view(&a->k, BWD_KOFF(a->k));
        s.v = bwd_view(&a->v, BWD_KOFF(a->v));
        s.dk = bwd_view(&a->dk, BWD_KOFF(a->dk));
        s.dv = bwd_view(&a->dv, BWD_KOFF(a->dv));
#undef BWD_QOFF
#undef BWD_KOFF
        s.lse.ptr = a->lse.ptr + (cq ? qrow * a->lse.stride[2] : b * a->lse.stride[0]);
        s.lse.stride[0] = 0;
        if (a->mask.ptr) { /* only without cu_seqlens (flash_api.h): batch b of the [B, Hq, Sq, Sk] mask */
            s.mask.ptr = a->mask.ptr + b * a->mask.stride[0];
            s.mask.stride[0] = 0;
        }
        if (sq != 0 || sk != 0) { /* bwd_dense's condition: nothing to write otherwise */
            fa_status r = bwd_run_locked(&s, pol, err, dev, 0, pass == 0, NULL, NULL);
            if (r != FA_OK) return r;
        }
        if (pass == 0) continue;
        if (sk < alloc_k) {
            cudaError_t e = bwd_zero_launch(&s.dk, 0, pr->heads_kv, pr->head_dim_qk, sk, alloc_k, st);
            if (e == cudaSuccess) e = bwd_zero_launch(&s.dv, 0, pr->heads_kv, pr->head_dim_v, sk, alloc_k, st);
            if (e != cudaSuccess) return bwd_cuda_fail(err, e, "zeroing unused keys");
        }
    }
    cudaError_t e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "cudaStreamSynchronize");
    return FA_OK;
}

extern "C" fa_status fa_cuda_backward_policy(const fa_bwd_args *a, const fa_cuda_policy *pol, fa_error *err) {
    fa_status s = fa_validate_bwd(a, &bwd_limits, err);
    if (s != FA_OK) return s;
    const fa_problem *pr = &a->p;
    // contract v3: paged K/V is not in the backward kernels (FA_ERR_UNSUPPORTED); varlen:
    // bwd_varlen; softcap: the CAP kernels (bwd_run_locked); sinks: the dense kernels, then
    // dsinks (bwd_dsinks_run)
    const int varlen = a->varlen.cu_seqlens_q != NULL || a->varlen.cu_seqlens_k != NULL || a->varlen.seqused_k != NULL;
    if (pr->page_size != 0)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "page_size", "the CUDA backward does not run paged K/V.");
    // every tensor the kernels read or write must be device memory: a host pointer is rejected
    // here, naming it, before anything is launched (the kernels would fault on it). A tensor
    // with no element (no query rows: q, o, dout, lse, dq; no key rows: k, v, dk, dv; either:
    // the mask) is never dereferenced, so its pointer is not checked: a packed sequence of
    // length 0 at the end of a buffer points one past its allocation, which
    // cudaPointerGetAttributes may not know. Rows: cu[B] when packed, else B * seqlen.
    const int64_t rows_q = a->varlen.cu_seqlens_q ? (int64_t)a->varlen.cu_seqlens_q[pr->batch] : pr->batch * pr->seqlen_q;
    const int64_t rows_k = a->varlen.cu_seqlens_k ? (int64_t)a->varlen.cu_seqlens_k[pr->batch] : pr->batch * pr->seqlen_k;
    const int has_q = rows_q > 0 && pr->heads_q > 0, has_k = rows_k > 0 && pr->heads_kv > 0;
    {
        const struct { const char *name; const void *ptr; int has; } t[10] = {
            { "q.ptr", a->q.ptr, has_q }, { "k.ptr", a->k.ptr, has_k }, { "v.ptr", a->v.ptr, has_k },
            { "o.ptr", a->o.ptr, has_q }, { "dout.ptr", a->dout.ptr, has_q }, { "lse.ptr", a->lse.ptr, has_q },
            { "mask.ptr", a->mask.ptr, has_q && has_k }, { "dq.ptr", a->dq.ptr, has_q },
            { "dk.ptr", a->dk.ptr, has_k }, { "dv.ptr", a->dv.ptr, has_k } };
        for (int i = 0; i < 10; i++)
            if (t[i].has && t[i].ptr != NULL && !bwd_is_device_ptr(t[i].ptr))
                return fa_fail(err, FA_ERR_INVALID, t[i].name,
                               "%s (%p) is not CUDA device memory; the cuda backend takes device pointers "
                               "(cudaMalloc), or use the cpu backend for host buffers.", t[i].name, t[i].ptr);
    }
    const int want_dsinks = pr->has_sinks && a->dsinks != NULL;
    if (want_dsinks && (a->sinks == NULL || !bwd_is_device_ptr(a->sinks) || !bwd_is_device_ptr(a->dsinks)))
        return fa_fail(err, FA_ERR_INVALID, a->sinks == NULL ? "sinks" : "dsinks",
                       "sinks and dsinks must be CUDA device memory (cudaMalloc) when has_sinks is set.");
    if ((s = varlen ? bwd_varlen(a, pol, err) : bwd_dense(a, pol, err)) != FA_OK || !want_dsinks) return s;
    cudaStream_t st = (cudaStream_t)a->stream;
    cudaError_t e = bwd_dsinks_run(a, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) return bwd_cuda_fail(err, e, "dsinks");
    return FA_OK;
}

extern "C" fa_status fa_cuda_backward(const fa_bwd_args *a, fa_error *err) {
    return fa_cuda_backward_policy(a, &fa_cuda_policy_default, err);
}
