/* orc_gpu_fwd.cu: device half of the GPU tier's forward (orc_gpu_dev.h).
 * Written from the contract (kernels/flash_api.h) and the CPU tier's formulas
 * (oracle/orc_formulas.h, the same functions the CPU tier calls); shares
 * nothing with kernels/cuda.
 *
 * Per chunk of rows of one (b, h), three kernels over device scratch
 * [rows][Sk] of doubles X, Y, W:
 *   k_scores  X = q.k (raw dot), Y = |q|.|k|: exact products, fma-accumulated
 *             in double (error <= gamma_D(2^-53) |q|.|k|, any order, BOUNDS.md 2)
 *   k_k1max   per kv head: k1max = max_j sum_d |k_jd|, vmax = max |v_jd|, kmax = max |k_jd|,
 *             v1max = max_j sum_d |v_jd| (finite rows; the backward uses the last two)
 *   k_rows    one warp per row: orc_row_weights in four passes over the row's
 *             keys (orc_formulas.h); W = exp(s - M) (-1: key not visible, never
 *             read), then X <- CO, Y <- C; the row info with ovf (section 11)
 *   k_pv      per 64-row x 64-column tile: num = sum_j W_j v_j in plain fma
 *             blocks of 32 keys aligned to key positions, each folded into
 *             (hi, lo) with TwoSum (the CPU tier's blocked compensated sum),
 *             bsum = sum_j C_j |v_j|, osum = sum_j CO_j |v_j| (plain fma sums)
 * Built with -fmad=false: every a*b+c not written as fma() rounds twice, as in
 * the CPU tier (-ffp-contract=off); TwoSum needs that. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "oracle/gpu/orc_gpu_dev.h"

#define RT ORC_GPU_RT  /* rows per tile */
#define KT 64          /* keys per score tile; columns per P.V tile */
#define DK 32          /* head dims per score stage */
#define KS 16          /* keys per P.V stage (two stages per compensated block) */
#define PADR (RT + 1)  /* padded row count of the shared tiles (bank-conflict free) */

/* One of two result slots: a chunk's outputs on the device and in pinned host
 * memory, so the host assembles one chunk while the device computes the next. */
typedef struct {
    double *num, *bsum, *osum; /* device [rc][Dv] */
    orc_row_info *ri;          /* device [rc] */
    int64_t *rng;              /* device: rlo [rc], rhi [rc], tlo [rc/RT], thi [rc/RT] */
    double *hnum, *hbsum, *hosum; /* pinned host copies */
    orc_row_info *hri;
    int64_t *hrng;             /* pinned host ranges (upload source) */
    cudaEvent_t done;
    int64_t nr;
} slot_t;

struct orc_gpu_fwd_state {
    orc_gpu_fwd_desc d;
    int64_t rc;                /* rows per chunk */
    double *X, *Y, *W;         /* [rc][Sk]: scratch, shared by the slots (stream order) */
    unsigned long long *k1;    /* k1max, vmax, kmax, v1max bits of the current kv head */
    int64_t cur_b, cur_hk;     /* kv head whose k1max is in k1 */
    cudaStream_t stream;
    slot_t slot[2];
};

static int cu_ok(cudaError_t e, const char *what, char *msg, size_t n) {
    if (e == cudaSuccess) return 1;
    snprintf(msg, n, "CUDA error in the GPU oracle (%s): %s", what, cudaGetErrorString(e));
    return 0;
}

// ----------------------------------------------------------------------------
// per-thread pool of the tier's buffers, stream and events (orc_gpu_dev.h)

#define POOL_SITES 160
static thread_local void *pool_p[POOL_SITES];
static thread_local size_t pool_n[POOL_SITES];
static thread_local char pool_h[POOL_SITES];
static thread_local cudaStream_t pool_stream;
static thread_local cudaEvent_t pool_ev[8];

extern "C" int orc_gpu_pool(int site, size_t bytes, int host, void **p, char *msg, size_t n) {
    if (site < 0 || site >= POOL_SITES) { snprintf(msg, n, "internal: pool site %d", site); return -1; }
    if (bytes == 0) bytes = 8;
    if (pool_p[site] && pool_n[site] >= bytes && pool_h[site] == (char)host) { *p = pool_p[site]; return 0; }
    if (pool_p[site]) {
        if (pool_h[site]) cudaFreeHost(pool_p[site]); else cudaFree(pool_p[site]);
        pool_p[site] = NULL;
        pool_n[site] = 0;
    }
    void *q = NULL;
    cudaError_t e = host ? cudaMallocHost(&q, bytes) : cudaMalloc(&q, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(msg, n, "CUDA error in the GPU oracle (%s of %zu bytes): %s", host ? "pinned memory" : "scratch",
                 bytes, cudaGetErrorString(e));
        return -1;
    }
    pool_p[site] = q;
    pool_n[site] = bytes;
    pool_h[site] = (char)host;
    *p = q;
    return 0;
}

static int pool_stream_get(cudaStream_t *s, char *msg, size_t n) {
    if (!pool_stream && !cu_ok(cudaStreamCreateWithFlags(&pool_stream, cudaStreamNonBlocking), "stream", msg, n))
        return -1;
    *s = pool_stream;
    return 0;
}

static int pool_event_get(int k, cudaEvent_t *ev, char *msg, size_t n) {
    if (!pool_ev[k] && !cu_ok(cudaEventCreateWithFlags(&pool_ev[k], cudaEventDisableTiming), "event", msg, n)) return -1;
    *ev = pool_ev[k];
    return 0;
}

extern "C" int orc_gpu_pool_stream_get(void **s, char *msg, size_t n) {
    cudaStream_t x;
    if (pool_stream_get(&x, msg, n)) return -1;
    *s = (void *)x;
    return 0;
}

extern "C" int orc_gpu_pool_event_get(int k, void **ev, char *msg, size_t n) {
    cudaEvent_t x;
    if (k < 0 || k >= 8) { snprintf(msg, n, "internal: pool event %d", k); return -1; }
    if (pool_event_get(k, &x, msg, n)) return -1;
    *ev = (void *)x;
    return 0;
}

extern "C" void orc_gpu_release(void) {
    if (pool_stream) cudaStreamSynchronize(pool_stream);
    for (int k = 0; k < POOL_SITES; k++) {
        if (pool_p[k]) { if (pool_h[k]) cudaFreeHost(pool_p[k]); else cudaFree(pool_p[k]); }
        pool_p[k] = NULL;
        pool_n[k] = 0;
    }
    for (int k = 0; k < 8; k++) { if (pool_ev[k]) cudaEventDestroy(pool_ev[k]); pool_ev[k] = NULL; }
    if (pool_stream) cudaStreamDestroy(pool_stream);
    pool_stream = NULL;
}

// ----------------------------------------------------------------------------
// loads

__device__ static inline double ld16(const uint16_t *p, const int64_t *st, int64_t b, int64_t s,
                                     int64_t h, int64_t d, int bf16) {
    return orc_fm_decode(p[b * st[0] + s * st[1] + h * st[2] + d * st[3]], bf16);
}

__device__ static inline double mask_at(const orc_gpu_fwd_desc &d, int64_t b, int64_t h, int64_t i,
                                        int64_t j) {
    if (!d.mask) return 0.0;
    return (double)d.mask[b * d.ms[0] + h * d.ms[1] + i * d.ms[2] + j * d.ms[3]];
}

__device__ static inline double warp_sum(double x) {
    for (int o = 16; o; o >>= 1) x = x + __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ static inline double warp_max(double x) {
    for (int o = 16; o; o >>= 1) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ static inline int64_t warp_sum_i(int64_t x) {
    for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ static inline int warp_or(int x) { return __any_sync(0xffffffffu, x); }

/* TwoSum of the compensated folds: the CPU tier's (orc_fm_two_sum: exact for a finite sum,
 * no error term for an infinite one, so an infinite input's sum stays Inf, BOUNDS.md 11.1) */
#define two_sum_d orc_fm_two_sum

// ----------------------------------------------------------------------------
// out[0]: k1max = max_j sum_d |k_jd| over keys with a finite sum; out[1]: vmax =
// max_j max_d |v_jd| over rows j with a finite max; out[2]: kmax = max |k_jd| over
// rows with a finite max; out[3]: v1max = max_j sum_d |v_jd| over finite sums (as
// kv_load / bkv_load: d in order; the values are >= 0, so their bit patterns order
// as the values)

__global__ void k_k1max(orc_gpu_fwd_desc d, int64_t b, int64_t hk, unsigned long long *out) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d.Sk) return;
    double k1 = 0, vm = 0, km = 0, v1 = 0;
    for (int64_t x = 0; x < d.D; x++) {
        double a = fabs(ld16(d.k, d.ks, b, j, hk, x, d.bf16));
        k1 += a;
        if (a > km) km = a;
    }
    if (isfinite(k1)) atomicMax(&out[0], (unsigned long long)__double_as_longlong(k1));
    if (isfinite(km)) atomicMax(&out[2], (unsigned long long)__double_as_longlong(km));
    for (int64_t x = 0; x < d.Dv; x++) {
        double a = fabs(ld16(d.v, d.vs, b, j, hk, x, d.bf16));
        v1 += a;
        if (a > vm) vm = a;
    }
    if (isfinite(vm)) atomicMax(&out[1], (unsigned long long)__double_as_longlong(vm));
    if (isfinite(v1)) atomicMax(&out[3], (unsigned long long)__double_as_longlong(v1));
}

// ----------------------------------------------------------------------------
// dots: X = a_i.t_j, Y = |a_i|.|t_j| for the key tiles that meet the row tile's span;
// a: a row tensor [b, i, h, x] (q; dO for the backward's dP), t: a kv tensor [b, j, hk, x]
// (k; v), x < Dd

__global__ void __launch_bounds__(256) k_scores(orc_gpu_fwd_desc d, orc_gpu_ten ra, orc_gpu_ten ta, int64_t Dd,
                                                int64_t b, int64_t h, int64_t r0, int64_t nr,
                                                const int64_t *tlo, const int64_t *thi, double *X, double *Y) {
    __shared__ double Qs[DK][PADR], Ks[DK][PADR];
    int64_t t = blockIdx.y, j0 = (int64_t)blockIdx.x * KT;
    if (thi[t] < tlo[t] || j0 > thi[t] || j0 + KT - 1 < tlo[t]) return;
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    int64_t hk = h / d.G, rbase = t * RT;
    double s[4][4], a[4][4];
    for (int x = 0; x < 4; x++)
        for (int y = 0; y < 4; y++) s[x][y] = a[x][y] = 0;
    for (int64_t d0 = 0; d0 < Dd; d0 += DK) {
        for (int e = tid; e < DK * RT; e += 256) {
            int dd = e % DK, rr = e / DK;
            int64_t r = rbase + rr, i = r0 + r, dim = d0 + dd, j = j0 + rr;
            Qs[dd][rr] = (r < nr && dim < Dd) ? ld16(ra.p, ra.s, b, i, h, dim, d.bf16) : 0.0;
            Ks[dd][rr] = (j < d.Sk && dim < Dd) ? ld16(ta.p, ta.s, b, j, hk, dim, d.bf16) : 0.0;
        }
        __syncthreads();
#pragma unroll 4
        for (int dd = 0; dd < DK; dd++) {
            double qv[4], kv[4];
            for (int x = 0; x < 4; x++) qv[x] = Qs[dd][ty + 16 * x];
            for (int y = 0; y < 4; y++) kv[y] = Ks[dd][tx + 16 * y];
            for (int x = 0; x < 4; x++)
                for (int y = 0; y < 4; y++) {
                    s[x][y] = fma(qv[x], kv[y], s[x][y]);
                    a[x][y] = fma(fabs(qv[x]), fabs(kv[y]), a[x][y]);
                }
        }
        __syncthreads();
    }
    for (int x = 0; x < 4; x++) {
        int64_t r = rbase + ty + 16 * x;
        if (r >= nr) continue;
        for (int y = 0; y < 4; y++) {
            int64_t j = j0 + tx + 16 * y;
            if (j >= d.Sk) continue;
            X[r * d.Sk + j] = s[x][y];
            Y[r * d.Sk + j] = a[x][y];
        }
    }
}

// ----------------------------------------------------------------------------
// row weights: one warp per row (the passes 1-4 of orc_formulas.h)

__global__ void __launch_bounds__(128) k_rows(orc_gpu_fwd_desc d, int64_t b, int64_t h, int64_t r0,
                                              int64_t nr, const int64_t *rlo, const int64_t *rhi,
                                              const int64_t *tlo, const int64_t *thi,
                                              const unsigned long long *k1bits, double *X, double *Y,
                                              double *W, double *Cw, double *COw, double *eomax,
                                              orc_row_info *ri_out) {
    /* rows in reverse: a causal row's key span grows with r, the longest go first */
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= nr) return; /* whole warps leave together */
    r = nr - 1 - r;
    int64_t i = r0 + r, lo = rlo[r], hi = rhi[r], tl = tlo[r / RT], th = thi[r / RT];
    const orc_model &mk = d.mk, &mo = d.mo;
    const orc_fm_rowc &rc = d.rc;
    /* as kv_load: a sum of D terms in double, gamma_D(2^-53) < 2^-40 */
    double k1max = __longlong_as_double((long long)k1bits[0]) * (1 + 0x1p-40);
    double vmax = __longlong_as_double((long long)k1bits[1]);
    double *Xr = X + r * d.Sk, *Yr = Y + r * d.Sk, *Wr = W + r * d.Sk;
    double *Cr = Cw + r * d.Sk, *COr = COw + r * d.Sk;
    orc_row_info ri;
    memset(&ri, 0, sizeof ri);
    ri.lo = lo;
    ri.hi = hi;

    /* q1 = sum_d |q_d| (any order: gamma_D(2^-53) < 2^-40 of it, in the factor) */
    double q1 = 0;
    for (int64_t x = lane; x < d.D; x += 32) q1 += fabs(ld16(d.q, d.qs, b, i, h, x, d.bf16));
    q1 = warp_sum(q1);

    /* pass 1: scores, n, M, kind */
    orc_fm_rows rs;
    orc_fm_rows_init(&rs);
    for (int64_t j0 = lo >= 0 ? lo / 32 * 32 : 0; j0 <= hi; j0 += 32) {
        int64_t j = j0 + lane;
        if (j < lo || j > hi) continue;
        double m = mask_at(d, b, h, i, j);
        if (m == -INFINITY) continue;
        orc_fm_pass1(&mk, &rs, orc_fm_score(&rc, Xr[j], m));
    }
    rs.n = warp_sum_i(rs.n);
    rs.M = warp_max(rs.M);
    rs.nan = warp_or(rs.nan);
    rs.neg_inf = warp_or(rs.neg_inf);
    rs.overflow = warp_or(rs.overflow);
    if (orc_fm_row_kind(&rs, &ri) != ROW_NORMAL) {
        for (int64_t j0 = tl / 32 * 32; th >= tl && j0 <= th; j0 += 32) {
            int64_t j = j0 + lane;
            if (j >= tl && j <= th) Wr[j] = -1.0;
        }
        if (lane == 0) ri_out[r] = ri;
        return;
    }
    rs.e_floor = orc_fm_score_floor(mk.tau, rc.sc_abs, rc.D, q1 * (1 + 0x1p-40), k1max);

    /* pass 2: errors, W, L (blocks of 32 key positions, TwoSum folds) */
    double Ls = 0, Le = 0, eom = 0, ekm = 0;
    for (int64_t j0 = tl / 32 * 32; j0 <= th; j0 += 32) {
        int64_t j = j0 + lane;
        int in = j >= tl && j <= th;
        double m = in && j >= lo && j <= hi ? mask_at(d, b, h, i, j) : -INFINITY;
        double w = 0;
        if (m != -INFINITY) {
            double eo, ek;
            orc_fm_key_err(&rc, &rs, Yr[j], fabs(m), &eo, &ek);
            eom = fmax(eom, eo);
            ekm = fmax(ekm, ek);
            w = exp(orc_fm_score(&rc, Xr[j], m) - rs.M);
            Wr[j] = w;
        } else if (in) {
            Wr[j] = -1.0;
        }
        double blk = warp_sum(w), e;
        two_sum_d(Ls, blk, &Ls, &e);
        Le += e;
    }
    rs.L = Ls + Le;
    rs.Eo_max = warp_max(eom);
    rs.Ek_max = warp_max(ekm);
    if (eomax && lane == 0) eomax[r] = rs.Eo_max;

    /* pass 3: eta_o, eta_k, sum_pe */
    double spe = 0, etom = 0, etkm = 0;
    for (int64_t j0 = lo / 32 * 32; j0 <= hi; j0 += 32) {
        int64_t j = j0 + lane;
        if (j < lo || j > hi) continue;
        double m = mask_at(d, b, h, i, j);
        if (m == -INFINITY) continue;
        double eo, ek, eta_o, eta_k;
        orc_fm_key_err(&rc, &rs, Yr[j], fabs(m), &eo, &ek);
        orc_fm_key_eta(&mk, &mo, &rc, &rs, orc_fm_score(&rc, Xr[j], m), eo, ek, &eta_o, &eta_k);
        etom = fmax(etom, eta_o);
        etkm = fmax(etkm, eta_k);
        spe += orc_fm_key_pe(&rs, Wr[j], eta_o);
    }
    rs.sum_pe = warp_sum(spe);
    rs.eta_o_max = warp_max(etom);
    rs.eta_k_max = warp_max(etkm);
    orc_fm_row_mid(&mk, &mo, &rs, &ri, (double)(th - tl + 1), (double)(hi - lo + 1));

    /* pass 4: C, CO (into Cw, COw: Y, X in the forward), sum_pek */
    double spk = 0;
    for (int64_t j0 = lo / 32 * 32; j0 <= hi; j0 += 32) {
        int64_t j = j0 + lane;
        if (j < lo || j > hi) continue;
        double m = mask_at(d, b, h, i, j);
        if (m == -INFINITY) continue;
        double eo, ek, eta_o, eta_k, C, CO;
        orc_fm_key_err(&rc, &rs, Yr[j], fabs(m), &eo, &ek);
        orc_fm_key_eta(&mk, &mo, &rc, &rs, orc_fm_score(&rc, Xr[j], m), eo, ek, &eta_o, &eta_k);
        spk += orc_fm_key_weights(&mk, &rs, Wr[j], eta_o, eta_k, &C, &CO);
        Cr[j] = C;
        COr[j] = CO;
    }
    spk = warp_sum(spk);
    if (lane == 0) {
        orc_fm_row_end(&mk, &mo, &rs, spk, &ri);
        ri.ovf = orc_fm_pv_overflow(&mk, (double)ri.n, (double)(hi - lo + 1), vmax);
        ri_out[r] = ri;
    }
}

// ----------------------------------------------------------------------------
// weighted key sums: per (row r, column c < Dd of the kv tensor ta)
//   num  = sum_j Wv_rj t_jc          (blocked compensated: 32-key aligned blocks, TwoSum)
//   bsum = sum_j (Wb_rj [+ cb_r Wbm_rj]) |t_jc|,  osum = sum_j (Wo_rj [+ co_r Wbm_rj]) |t_jc|
// over the visible keys: j in the row tile's span and Vis_rj != -1 (ORC_GPU_INVIS).
// Forward P.V: Vis = Wv = W, Wb = C, Wo = CO; backward dQ: Vis = P, Wv = dS, Wb = DSE,
// Wo = DSEO, Wbm = DSM with the row coefficients kQ, kQo (orc_fm_dq_coefs).

__global__ void __launch_bounds__(256) k_pv(orc_gpu_fwd_desc d, orc_gpu_ten ta, int64_t Dd, int64_t b,
                                            int64_t h, int64_t nr, const int64_t *tlo, const int64_t *thi,
                                            const double *Vis, const double *Wv, const double *Wb,
                                            const double *Wo, const double *Wbm, const double *cb,
                                            const double *co, double *num, double *bsum, double *osum) {
    __shared__ double Ws[KS][PADR], Cs[KS][PADR], Os[KS][PADR], Vs[KS][KT];
    __shared__ unsigned char Vv[KS][PADR];
    /* row tiles in reverse launch order: a causal tile's key span grows with t and the blocks
     * run one per SM (240 registers), so the longest go first (the sums are per block: the
     * order changes no value) */
    int64_t t = (int64_t)gridDim.y - 1 - blockIdx.y, c0 = (int64_t)blockIdx.x * KT, rbase = t * RT;
    int64_t tl = tlo[t], th = thi[t], hk = h / d.G;
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    double blk[4][4], hi[4][4], lo[4][4], bs[4][4], os[4][4];
    for (int x = 0; x < 4; x++)
        for (int y = 0; y < 4; y++) blk[x][y] = hi[x][y] = lo[x][y] = bs[x][y] = os[x][y] = 0;
    for (int64_t j0 = th >= tl ? tl / 32 * 32 : 1, stage = 0; j0 <= th; j0 += KS, stage++) {
        for (int e = tid; e < KS * RT; e += 256) {
            int kk = e % KS, rr = e / KS;
            int64_t r = rbase + rr, j = j0 + kk;
            int ok = r < nr && j >= tl && j <= th;
            int vis = ok && Vis[r * d.Sk + j] != ORC_GPU_INVIS;
            double w = vis ? Wv[r * d.Sk + j] : 0.0, cw = 0.0, ow = 0.0;
            if (vis) {
                cw = Wb[r * d.Sk + j];
                ow = Wo[r * d.Sk + j];
                if (Wbm) {
                    double m = Wbm[r * d.Sk + j];
                    cw = cw + cb[r] * m;
                    ow = ow + co[r] * m;
                }
            }
            Vv[kk][rr] = (unsigned char)vis;
            Ws[kk][rr] = w;
            Cs[kk][rr] = cw;
            Os[kk][rr] = ow;
        }
        for (int e = tid; e < KS * KT; e += 256) {
            int cc = e % KT, kk = e / KT;
            int64_t j = j0 + kk, col = c0 + cc;
            Vs[kk][cc] = (j >= tl && j <= th && col < Dd) ? ld16(ta.p, ta.s, b, j, hk, col, d.bf16) : 0.0;
        }
        __syncthreads();
        for (int kk = 0; kk < KS; kk++) {
            double vv[4];
            for (int y = 0; y < 4; y++) vv[y] = Vs[kk][tx + 16 * y];
            for (int x = 0; x < 4; x++) {
                int rr = ty + 16 * x;
                double w = Ws[kk][rr];
                if (Vv[kk][rr]) { /* visible: invisible keys are never read (a NaN v must not leak) */
                    double cw = Cs[kk][rr], ow = Os[kk][rr];
                    for (int y = 0; y < 4; y++) {
                        double ax = fabs(vv[y]);
                        blk[x][y] = fma(w, vv[y], blk[x][y]);
                        bs[x][y] = fma(cw, ax, bs[x][y]);
                        os[x][y] = fma(ow, ax, os[x][y]);
                    }
                }
            }
        }
        __syncthreads();
        if (stage % 2 == 1 || j0 + KS > th) { /* end of a 32-key aligned block: fold */
            for (int x = 0; x < 4; x++)
                for (int y = 0; y < 4; y++) {
                    double e;
                    two_sum_d(hi[x][y], blk[x][y], &hi[x][y], &e);
                    lo[x][y] += e;
                    blk[x][y] = 0;
                }
        }
    }
    for (int x = 0; x < 4; x++) {
        int64_t r = rbase + ty + 16 * x;
        if (r >= nr) continue;
        for (int y = 0; y < 4; y++) {
            int64_t col = c0 + tx + 16 * y;
            if (col >= Dd) continue;
            num[r * Dd + col] = hi[x][y] + lo[x][y];
            bsum[r * Dd + col] = bs[x][y];
            if (osum) osum[r * Dd + col] = os[x][y];
        }
    }
}

// ----------------------------------------------------------------------------
// host side

extern "C" int orc_gpu_is_device(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

extern "C" int orc_gpu_to_host(void *dst, const void *src, size_t bytes, char *msg, size_t n) {
    if (bytes == 0) return 0;
    return cu_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to host", msg, n) ? 0 : -1;
}

extern "C" int orc_gpu_to_device(void *dst, const void *src, size_t bytes, char *msg, size_t n) {
    if (bytes == 0) return 0;
    return cu_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device", msg, n) ? 0 : -1;
}

/* The buffers, stream and events stay in the thread's pool for the next call. */
extern "C" void orc_gpu_fwd_end(orc_gpu_fwd_state *st) {
    if (!st) return;
    if (st->stream) cudaStreamSynchronize(st->stream);
    free(st);
}

extern "C" int orc_gpu_fwd_begin(const orc_gpu_fwd_desc *d, int64_t *rc_out, orc_gpu_fwd_state **out,
                                 char *msg, size_t n) {
    *out = NULL;
    orc_gpu_fwd_state *st = (orc_gpu_fwd_state *)calloc(1, sizeof *st);
    if (!st) { snprintf(msg, n, "out of host memory"); return -1; }
    st->d = *d;
    (void)cudaGetLastError(); /* errors left by earlier calls are not this run's */
    /* the inputs' writers (a backend's kernels, a copy from pageable memory whose DMA may
     * still run) are on other streams: the tier's non-blocking stream must not overtake them */
    if (!cu_ok(cudaDeviceSynchronize(), "synchronize before the oracle", msg, n)) { free(st); return -1; }
    st->cur_b = st->cur_hk = -1;
    size_t fr = 0, tot = 0;
    if (!cu_ok(cudaMemGetInfo(&fr, &tot), "memory info", msg, n)) { free(st); return -1; }
    int64_t Sk = d->Sk > 0 ? d->Sk : 1;
    /* scratch: 3 doubles per (row, key) + 6 per (row, column); at most half the free memory, 8 GiB */
    double budget = (double)fr * 0.5 < 0x1p33 ? (double)fr * 0.5 : 0x1p33;
    int64_t rc = (int64_t)(budget / (24.0 * (double)Sk + 48.0 * (double)d->Dv)) / RT * RT;
    int64_t sq = (d->Sq + RT - 1) / RT * RT;
    if (rc > sq) rc = sq;
    if (rc > (int64_t)65535 * RT) rc = (int64_t)65535 * RT; /* row tiles go in gridDim.y */
    if (rc < RT) rc = RT;
    st->rc = rc;
    size_t nm = (size_t)rc * (size_t)Sk, no = (size_t)rc * (size_t)d->Dv, ng = (size_t)(2 * rc + 2 * (rc / RT));
#define PD(site, p, bytes) (orc_gpu_pool((site), (size_t)(bytes), 0, (void **)&(p), msg, n) == 0)
#define PH(site, p, bytes) (orc_gpu_pool((site), (size_t)(bytes), 1, (void **)&(p), msg, n) == 0)
    int ok = pool_stream_get(&st->stream, msg, n) == 0 && PD(0, st->X, nm * 8) && PD(1, st->Y, nm * 8) &&
             PD(2, st->W, nm * 8) && PD(3, st->k1, 32);
    for (int k = 0; ok && k < 2; k++) {
        slot_t *sl = &st->slot[k];
        int b = 4 + 10 * k;
        ok = PD(b, sl->num, no * 8) && PD(b + 1, sl->bsum, no * 8) && PD(b + 2, sl->osum, no * 8) &&
             PD(b + 3, sl->ri, (size_t)rc * sizeof(orc_row_info)) && PD(b + 4, sl->rng, ng * 8) &&
             PH(b + 5, sl->hnum, no * 8) && PH(b + 6, sl->hbsum, no * 8) && PH(b + 7, sl->hosum, no * 8) &&
             PH(b + 8, sl->hri, (size_t)rc * sizeof(orc_row_info)) && PH(b + 9, sl->hrng, ng * 8) &&
             pool_event_get(k, &sl->done, msg, n) == 0;
    }
    if (!ok) { orc_gpu_fwd_end(st); return -1; }
    *rc_out = rc;
    *out = st;
    return 0;
}

/* The sampled rows x0 .. x1-1 of a chunk (row ix[x].s - r0) finished: one thread per O
 * element and per LSE (orc_fwd_row_fill's per-element calls). */
__global__ void k_fwdfin(orc_gpu_fwd_desc d, orc_gpu_ffin f, int64_t r0, const orc_row_info *ri, const double *num,
                         const double *bsum, const double *osum) {
    int64_t Dv = d.Dv, n = f.x1 - f.x0, t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * (Dv + 1)) return;
    int64_t y = f.x0 + (t < n * Dv ? t / Dv : t - n * Dv), r = f.ix[y].s - r0;
    const orc_row_info *R = &ri[r];
    int need;
    if (t < n * Dv) {
        int64_t dd = t % Dv, e = y * Dv + dd, x = r * Dv + dd;
        int normal = R->kind == ROW_NORMAL;
        need = orc_fm_fwd_out_elem(&d.mk, &d.mo, R, normal ? num[x] : 0, normal ? bsum[x] : 0, normal ? osum[x] : 0,
                                   f.ratio, &f.o.ref[e], &f.o.oe[e], &f.o.bound[e], &f.o.flags[e]);
        if (normal && f.mpfr_all) need = 1;
    } else {
        need = orc_fm_fwd_lse(&d.mk, R, f.has_sink, f.sink, f.ratio, &f.lse.ref[y], &f.lse.oe[y], &f.lse.bound[y],
                              &f.lse.flags[y]);
    }
    if (need) f.need[y] = 1;
}

static int fwd_start(orc_gpu_fwd_state *st, int slot, int64_t b, int64_t h, int64_t r0, int64_t nr,
                     const int64_t *rlo, const int64_t *rhi, const orc_gpu_ffin *fin, char *msg, size_t n);

extern "C" int orc_gpu_fwd_start(orc_gpu_fwd_state *st, int slot, int64_t b, int64_t h, int64_t r0,
                                 int64_t nr, const int64_t *rlo, const int64_t *rhi, char *msg, size_t n) {
    return fwd_start(st, slot, b, h, r0, nr, rlo, rhi, NULL, msg, n);
}

extern "C" int orc_gpu_fwd_start_dev(orc_gpu_fwd_state *st, int slot, int64_t b, int64_t h, int64_t r0, int64_t nr,
                                     const int64_t *rlo, const int64_t *rhi, const orc_gpu_ffin *fin, char *msg,
                                     size_t n) {
    slot_t *sl = &st->slot[slot & 1];
    /* the slot's pinned ranges are reused: its previous chunk's upload must be done */
    if (sl->nr > 0 && !cu_ok(cudaEventSynchronize(sl->done), "device work", msg, n)) return -1;
    return fwd_start(st, slot, b, h, r0, nr, rlo, rhi, fin, msg, n);
}

extern "C" int orc_gpu_fwd_sync(orc_gpu_fwd_state *st, char *msg, size_t n) {
    return cu_ok(cudaStreamSynchronize(st->stream), "device work", msg, n) ? 0 : -1;
}

static int fwd_start(orc_gpu_fwd_state *st, int slot, int64_t b, int64_t h, int64_t r0, int64_t nr,
                     const int64_t *rlo, const int64_t *rhi, const orc_gpu_ffin *fin, char *msg, size_t n) {
    const orc_gpu_fwd_desc &d = st->d;
    slot_t *sl = &st->slot[slot & 1];
    cudaStream_t s = st->stream;
    sl->nr = nr;
    if (nr <= 0) return 0;
    if (nr > st->rc) { snprintf(msg, n, "internal: %lld rows > chunk %lld", (long long)nr, (long long)st->rc); return -1; }
    int64_t nt = (nr + RT - 1) / RT, hk = h / d.G;
    /* ranges (pinned): rows, then tile spans = union of the non-empty row ranges of each tile */
    int64_t *hr = sl->hrng, *tl = hr + 2 * nr, *th = tl + nt;
    memcpy(hr, rlo, (size_t)nr * 8);
    memcpy(hr + nr, rhi, (size_t)nr * 8);
    for (int64_t t = 0; t < nt; t++) {
        int64_t a = INT64_MAX, z = -1;
        for (int64_t r = t * RT; r < nr && r < (t + 1) * RT; r++) {
            if (rhi[r] < rlo[r]) continue;
            if (rlo[r] < a) a = rlo[r];
            if (rhi[r] > z) z = rhi[r];
        }
        if (z < 0) a = 0;
        tl[t] = a;
        th[t] = z;
    }
    int64_t *drlo = sl->rng, *drhi = drlo + nr, *dtlo = drhi + nr, *dthi = dtlo + nt;
    if (!cu_ok(cudaMemcpyAsync(sl->rng, hr, (size_t)(2 * nr + 2 * nt) * 8, cudaMemcpyHostToDevice, s), "upload", msg, n))
        return -1;
    if (b != st->cur_b || hk != st->cur_hk) {
        if (!cu_ok(cudaMemsetAsync(st->k1, 0, 32, s), "memset", msg, n)) return -1;
        if (d.Sk > 0) k_k1max<<<(unsigned)((d.Sk + 255) / 256), 256, 0, s>>>(d, b, hk, st->k1);
        if (!cu_ok(cudaGetLastError(), "k_k1max launch", msg, n)) return -1;
        st->cur_b = b;
        st->cur_hk = hk;
    }
    if (d.Sk > 0) {
        dim3 gs((unsigned)((d.Sk + KT - 1) / KT), (unsigned)nt);
        orc_gpu_ten qa = {d.q, {d.qs[0], d.qs[1], d.qs[2], d.qs[3]}}, ka = {d.k, {d.ks[0], d.ks[1], d.ks[2], d.ks[3]}};
        k_scores<<<gs, 256, 0, s>>>(d, qa, ka, d.D, b, h, r0, nr, dtlo, dthi, st->X, st->Y);
        if (!cu_ok(cudaGetLastError(), "k_scores launch", msg, n)) return -1;
    }
    k_rows<<<(unsigned)((nr + 3) / 4), 128, 0, s>>>(d, b, h, r0, nr, drlo, drhi, dtlo, dthi, st->k1, st->X,
                                                   st->Y, st->W, st->Y, st->X, NULL, sl->ri);
    if (!cu_ok(cudaGetLastError(), "k_rows launch", msg, n)) return -1;
    dim3 gp((unsigned)((d.Dv + KT - 1) / KT), (unsigned)nt);
    orc_gpu_ten va = {d.v, {d.vs[0], d.vs[1], d.vs[2], d.vs[3]}};
    k_pv<<<gp, 256, 0, s>>>(d, va, d.Dv, b, h, nr, dtlo, dthi, st->W, st->W, st->Y, st->X, NULL, NULL, NULL,
                            sl->num, sl->bsum, sl->osum);
    if (!cu_ok(cudaGetLastError(), "k_pv launch", msg, n)) return -1;
    if (fin) {
        int64_t ne = (fin->x1 - fin->x0) * (d.Dv + 1);
        if (ne > 0) k_fwdfin<<<(unsigned)((ne + 127) / 128), 128, 0, s>>>(d, *fin, r0, sl->ri, sl->num, sl->bsum,
                                                                           sl->osum);
        if (!cu_ok(cudaGetLastError(), "k_fwdfin launch", msg, n) || !cu_ok(cudaEventRecord(sl->done, s), "event", msg, n))
            return -1;
        return 0;
    }
    size_t no = (size_t)nr * (size_t)d.Dv * 8;
    if (!cu_ok(cudaMemcpyAsync(sl->hri, sl->ri, (size_t)nr * sizeof(orc_row_info), cudaMemcpyDeviceToHost, s), "results", msg, n) ||
        !cu_ok(cudaMemcpyAsync(sl->hnum, sl->num, no, cudaMemcpyDeviceToHost, s), "results", msg, n) ||
        !cu_ok(cudaMemcpyAsync(sl->hbsum, sl->bsum, no, cudaMemcpyDeviceToHost, s), "results", msg, n) ||
        !cu_ok(cudaMemcpyAsync(sl->hosum, sl->osum, no, cudaMemcpyDeviceToHost, s), "results", msg, n) ||
        !cu_ok(cudaEventRecord(sl->done, s), "event", msg, n))
        return -1;
    return 0;
}

extern "C" int orc_gpu_fwd_wait(orc_gpu_fwd_state *st, int slot, const orc_row_info **ri, const double **num,
                                const double **bsum, const double **osum, char *msg, size_t n) {
    slot_t *sl = &st->slot[slot & 1];
    if (sl->nr > 0 && !cu_ok(cudaEventSynchronize(sl->done), "device work", msg, n)) return -1;
    *ri = sl->hri;
    *num = sl->hnum;
    *bsum = sl->hbsum;
    *osum = sl->hosum;
    return 0;
}

// ----------------------------------------------------------------------------
// launchers of these kernels for the backward (orc_gpu_bwd.cu; orc_gpu_dev.h)

extern "C" int orc_gpu_launch_kvstat(const orc_gpu_fwd_desc *d, void *stream, int64_t b, int64_t hk,
                                     unsigned long long *out4) {
    cudaStream_t s = (cudaStream_t)stream;
    if (cudaMemsetAsync(out4, 0, 32, s) != cudaSuccess) return -1;
    if (d->Sk > 0) k_k1max<<<(unsigned)((d->Sk + 255) / 256), 256, 0, s>>>(*d, b, hk, out4);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int orc_gpu_launch_dots(const orc_gpu_fwd_desc *d, void *stream, orc_gpu_ten ra, orc_gpu_ten ta,
                                   int64_t Dd, int64_t b, int64_t h, int64_t r0, int64_t nr, const int64_t *tlo,
                                   const int64_t *thi, double *X, double *Y) {
    if (d->Sk <= 0 || nr <= 0) return 0;
    dim3 gs((unsigned)((d->Sk + KT - 1) / KT), (unsigned)((nr + RT - 1) / RT));
    k_scores<<<gs, 256, 0, (cudaStream_t)stream>>>(*d, ra, ta, Dd, b, h, r0, nr, tlo, thi, X, Y);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int orc_gpu_launch_rows(const orc_gpu_fwd_desc *d, void *stream, int64_t b, int64_t h, int64_t r0,
                                   int64_t nr, const int64_t *rlo, const int64_t *rhi, const int64_t *tlo,
                                   const int64_t *thi, const unsigned long long *k1, double *X, double *Y,
                                   double *W, double *Cw, double *COw, double *eomax, orc_row_info *ri) {
    if (nr <= 0) return 0;
    k_rows<<<(unsigned)((nr + 3) / 4), 128, 0, (cudaStream_t)stream>>>(*d, b, h, r0, nr, rlo, rhi, tlo, thi, k1,
                                                                       X, Y, W, Cw, COw, eomax, ri);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int orc_gpu_launch_wsum(const orc_gpu_fwd_desc *d, void *stream, orc_gpu_ten ta, int64_t Dd, int64_t b,
                                   int64_t h, int64_t nr, const int64_t *tlo, const int64_t *thi,
                                   const double *Vis, const double *Wv, const double *Wb, const double *Wo,
                                   const double *Wbm, const double *cb, const double *co, double *num,
                                   double *bsum, double *osum) {
    if (nr <= 0 || Dd <= 0) return 0;
    dim3 gp((unsigned)((Dd + KT - 1) / KT), (unsigned)((nr + RT - 1) / RT));
    k_pv<<<gp, 256, 0, (cudaStream_t)stream>>>(*d, ta, Dd, b, h, nr, tlo, thi, Vis, Wv, Wb, Wo, Wbm, cb, co, num,
                                               bsum, osum);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int orc_gpu_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return n > 0;
}
