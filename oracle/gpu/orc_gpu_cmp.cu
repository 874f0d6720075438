/* orc_gpu_cmp.cu: the device half of the GPU tier's compare (orc_gpu_cmp.c drives it;
 * seam in orc_gpu_dev.h). Every element is judged by orc_judge.h's orc_jd_elem, the rule
 * the host compare calls; only per-block partial statistics, the escalated vectors (with
 * their kernel values) and radix-select histograms go back to the host.
 *
 * Determinism: the grid size is fixed (ORC_GPU_CMP_BLOCKS blocks of ORC_GPU_CMP_TPB
 * threads, element i0 + tid of each block stride), each block's partials are reduced in a
 * fixed order (warp shuffles, then warps in order), the host folds the blocks in order:
 * the same call gives the same statistics bit for bit. Counts, extrema, first positions,
 * histograms and the median are order-free; the bias sums are RN sums in this order. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "oracle/gpu/orc_gpu_dev.h"
#include "oracle/orc_judge.h"

#define TPB ORC_GPU_CMP_TPB
#define NWARP (TPB / 32)

static int cmp_ok(cudaError_t e, const char *what, char *msg, size_t n) {
    if (e == cudaSuccess) return 1;
    (void)cudaGetLastError();
    snprintf(msg, n, "CUDA error in the GPU compare (%s): %s", what, cudaGetErrorString(e));
    return 0;
}

/* The kernel value of element (v, d) of the chunk: decoded exactly (orc_fm_decode; fp32 as is). */
__device__ static double cmp_kv(const orc_gpu_cmp_desc *c, int64_t v, int64_t d) {
    const orc_index ix = c->index[v];
    if (c->kv_f32)
        return (double)((const float *)c->kv)[ix.b * c->st[0] + ix.h * c->st[1] + ix.s * c->st[2]];
    return orc_fm_decode(((const uint16_t *)c->kv)[ix.b * c->st[0] + ix.s * c->st[1] + ix.h * c->st[2] + d * c->st[3]],
                         c->bf16);
}

__device__ static orc_jd cmp_elem(const orc_gpu_cmp_desc *c, int64_t i, double *kv) {
    int64_t v = i / c->dim, d = i - v * c->dim;
    *kv = cmp_kv(c, v, d);
    return orc_jd_elem(*kv, c->ref[i], c->bound[i], c->oe[i], c->flags[i], c->thr, 0);
}

__global__ void k_cmp_d0(orc_gpu_cmp_desc c, int32_t *d0) {
    int64_t nel = c.n * c.dim;
    for (int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x; i < nel; i += (int64_t)gridDim.x * TPB) {
        double kv;
        if (cmp_elem(&c, i, &kv).cls == ORC_JD_UNDECIDED) {
            int64_t v = i / c.dim;
            atomicMin(&d0[v], (int32_t)(i - v * c.dim));
        }
    }
}

__global__ void k_cmp_init(int32_t *d0, int64_t n, int32_t dim) {
    for (int64_t v = (int64_t)blockIdx.x * TPB + threadIdx.x; v < n; v += (int64_t)gridDim.x * TPB) d0[v] = dim;
}

/* vectors with an undecided element into list (unordered), *cnt their number */
__global__ void k_cmp_list(int64_t n, int32_t dim, const int32_t *d0, int64_t *list, unsigned long long *cnt) {
    for (int64_t v = (int64_t)blockIdx.x * TPB + threadIdx.x; v < n; v += (int64_t)gridDim.x * TPB)
        if (d0[v] < dim) list[atomicAdd(cnt, 1ULL)] = v;
}

/* the listed vectors' kernel values, [k][dim] */
__global__ void k_cmp_gather(orc_gpu_cmp_desc c, const int64_t *list, int64_t nl, double *kvo) {
    for (int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x; i < nl * c.dim; i += (int64_t)gridDim.x * TPB) {
        int64_t k = i / c.dim, d = i - k * c.dim;
        kvo[i] = cmp_kv(&c, list[k], d);
    }
}

/* (ratio, e, kv) of the larger ratio, the smaller e on a tie; e < 0: none */
__device__ static void worst_fold(double *r, long long *e, double *kv, double r2, long long e2, double kv2) {
    if (e2 < 0) return;
    if (*e < 0 || r2 > *r || (r2 == *r && e2 < *e)) { *r = r2; *e = e2; *kv = kv2; }
}

__global__ void __launch_bounds__(TPB) k_cmp_stats(orc_gpu_cmp_desc c, const int32_t *d0, orc_gpu_cmp_part *parts,
                                                   int *grid, double *ratios, unsigned long long *nratio) {
    __shared__ unsigned long long s_cnt[ORC_JD_FINITE + 1], s_hist[ORC_HIST_BUCKETS], s_fail, s_exact;
    __shared__ unsigned long long s_fe, s_oe;
    __shared__ unsigned long long s_maxerr;
    __shared__ double w_r[NWARP], w_kv[NWARP], w_b[NWARP], w_bz[NWARP];
    __shared__ long long w_e[NWARP];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid <= ORC_JD_FINITE) s_cnt[tid] = 0;
    if (tid < ORC_HIST_BUCKETS) s_hist[tid] = 0;
    if (tid == 0) { s_fail = s_exact = 0; s_fe = s_oe = ~0ULL; s_maxerr = 0; }
    __syncthreads();
    int64_t nel = c.n * c.dim;
    double wr = 0, wkv = 0, bias = 0, biasz = 0;
    long long we = -1;
    unsigned long long fe = ~0ULL, oe = ~0ULL;
    for (int64_t i0 = (int64_t)blockIdx.x * TPB; i0 < nel; i0 += (int64_t)gridDim.x * TPB) {
        int64_t i = i0 + tid;
        int want = 0;
        double ratio = 0;
        if (i < nel) {
            int64_t v = i / c.dim, d = i - v * c.dim;
            if (d < d0[v]) { /* d >= d0[v]: the host judges it (orc_compare_esc) */
                double kv;
                orc_jd r = cmp_elem(&c, i, &kv);
                unsigned long long ge = (unsigned long long)(c.e0 + i);
                atomicAdd(&s_cnt[r.cls], 1ULL);
                double vmax = -1;
                if (r.cls == ORC_JD_UNCHECKED_OVF || r.cls == ORC_JD_CHECKED_OVF) { if (ge < oe) oe = ge; }
                if (r.cls == ORC_JD_NAN_MISSING || r.cls == ORC_JD_NAN_UNEXP) { if (ge < fe) fe = ge; vmax = INFINITY; }
                if (r.cls == ORC_JD_NF_MATCH || r.cls == ORC_JD_OVF_INF) vmax = 0;
                if (r.cls == ORC_JD_FINITE) {
                    double bound = c.bound[i], ref = c.ref[i];
                    if (r.err > bound) { atomicAdd(&s_fail, 1ULL); if (ge < fe) fe = ge; }
                    worst_fold(&wr, &we, &wkv, r.ratio, (long long)ge, kv);
                    atomicAdd(&s_hist[orc_jd_bucket(r.ratio)], 1ULL);
                    if (r.err == 0) atomicAdd(&s_exact, 1ULL);
                    atomicMax(&s_maxerr, (unsigned long long)__double_as_longlong(r.err));
                    vmax = r.ratio;
                    if (bound > 0) {
                        want = 1;
                        ratio = r.ratio;
                        double sr = kv < ref ? -r.ratio : r.ratio;
                        bias += sr;
                        biasz += ref < 0 ? -sr : sr;
                    }
                }
                if (vmax >= 0) {
                    orc_index ix = c.index[v];
                    float f = (float)vmax;
                    atomicMax(&grid[(ix.h >> c.hshift) * ORC_GRID_COLS + (ix.s >> c.sshift)], __float_as_int(f));
                }
            }
        }
        /* append the ratios: one atomic per warp */
        unsigned m = __ballot_sync(0xffffffffu, want);
        unsigned long long base = 0;
        if (lane == 0 && m) base = atomicAdd(nratio, (unsigned long long)__popc(m));
        base = __shfl_sync(0xffffffffu, base, 0);
        if (want) ratios[base + __popc(m & ((1u << lane) - 1))] = ratio;
    }
    /* block reduction in a fixed order */
    for (int o = 16; o > 0; o >>= 1) {
        double r2 = __shfl_down_sync(0xffffffffu, wr, o), kv2 = __shfl_down_sync(0xffffffffu, wkv, o);
        long long e2 = __shfl_down_sync(0xffffffffu, we, o);
        worst_fold(&wr, &we, &wkv, r2, e2, kv2);
        bias += __shfl_down_sync(0xffffffffu, bias, o);
        biasz += __shfl_down_sync(0xffffffffu, biasz, o);
    }
    if (fe != ~0ULL) atomicMin(&s_fe, fe);
    if (oe != ~0ULL) atomicMin(&s_oe, oe);
    if (lane == 0) { w_r[warp] = wr; w_e[warp] = we; w_kv[warp] = wkv; w_b[warp] = bias; w_bz[warp] = biasz; }
    __syncthreads();
    if (tid == 0) {
        orc_gpu_cmp_part p;
        p.worst_ratio = w_r[0]; p.worst_e = w_e[0]; p.worst_kv = w_kv[0]; p.bias = w_b[0]; p.bias_zero = w_bz[0];
        for (int w = 1; w < NWARP; w++) {
            worst_fold(&p.worst_ratio, &p.worst_e, &p.worst_kv, w_r[w], w_e[w], w_kv[w]);
            p.bias += w_b[w];
            p.bias_zero += w_bz[w];
        }
        for (int k = 0; k <= ORC_JD_FINITE; k++) p.cnt[k] = s_cnt[k];
        for (int k = 0; k < ORC_HIST_BUCKETS; k++) p.hist[k] = s_hist[k];
        p.failed_finite = s_fail;
        p.exact = s_exact;
        p.max_err = __longlong_as_double((long long)s_maxerr);
        p.fail_e = s_fe == ~0ULL ? -1 : (long long)s_fe;
        p.ovf_e = s_oe == ~0ULL ? -1 : (long long)s_oe;
        parts[blockIdx.x] = p;
    }
}

/* The host check's masked-row and magnitude sums (properties/check/check.c, judge) over a chunk,
 * one partial per block, warps folded in order: masked-row elements whose kernel value is not
 * exactly the reference (count, smallest element index), and over the other elements with no
 * NaN / Inf / uncheckable flag and a finite kernel value the sums of ref^2, kv^2 and
 * (bound + orc_err)^2 (RN, this order). */
__global__ void __launch_bounds__(TPB) k_cmp_norms(orc_gpu_cmp_desc c, orc_gpu_norm_part *parts) {
    __shared__ double w_r[NWARP], w_g[NWARP], w_b[NWARP];
    __shared__ unsigned long long s_bad, s_be, s_me;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) { s_bad = 0; s_be = ~0ULL; s_me = ~0ULL; }
    __syncthreads();
    int64_t nel = c.n * c.dim;
    double r2 = 0, g2 = 0, b2 = 0;
    unsigned long long bad = 0, be = ~0ULL, me = ~0ULL;
    for (int64_t i = (int64_t)blockIdx.x * TPB + tid; i < nel; i += (int64_t)gridDim.x * TPB) {
        int64_t v = i / c.dim, d = i - v * c.dim;
        unsigned f = c.flags[i];
        double kv = cmp_kv(&c, v, d), ref = c.ref[i];
        unsigned long long ge = (unsigned long long)(c.e0 + i);
        if (f & ORC_F_MASKED_ROW) {
            if (ge < me) me = ge;
            if (!(kv == ref)) { bad++; if (ge < be) be = ge; }
            continue;
        }
        if (f & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE)) continue;
        if (!isfinite(kv)) continue;
        double bd = c.bound[i] + c.oe[i];
        r2 += ref * ref;
        g2 += kv * kv;
        b2 += bd * bd;
    }
    for (int o = 16; o > 0; o >>= 1) {
        r2 += __shfl_down_sync(0xffffffffu, r2, o);
        g2 += __shfl_down_sync(0xffffffffu, g2, o);
        b2 += __shfl_down_sync(0xffffffffu, b2, o);
    }
    if (bad) atomicAdd(&s_bad, bad);
    if (be != ~0ULL) atomicMin(&s_be, be);
    if (me != ~0ULL) atomicMin(&s_me, me);
    if (lane == 0) { w_r[warp] = r2; w_g[warp] = g2; w_b[warp] = b2; }
    __syncthreads();
    if (tid == 0) {
        orc_gpu_norm_part p;
        p.ref2 = w_r[0]; p.got2 = w_g[0]; p.bnd2 = w_b[0];
        for (int w = 1; w < NWARP; w++) { p.ref2 += w_r[w]; p.got2 += w_g[w]; p.bnd2 += w_b[w]; }
        p.masked_bad = s_bad;
        p.bad_e = s_be == ~0ULL ? -1 : (long long)s_be;
        p.masked_e = s_me == ~0ULL ? -1 : (long long)s_me;
        parts[blockIdx.x] = p;
    }
}

/* histogram of bits [shift, shift + 8) of the ratios whose bits above shift + 8 equal prefix */
__global__ void k_cmp_hist(const double *a, int64_t n, int shift, unsigned long long prefix, unsigned long long *hist) {
    __shared__ unsigned int h[256];
    h[threadIdx.x] = 0;
    __syncthreads();
    for (int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x; i < n; i += (int64_t)gridDim.x * TPB) {
        unsigned long long u = (unsigned long long)__double_as_longlong(a[i]);
        if (shift + 8 >= 64 || (u >> (shift + 8)) == prefix) atomicAdd(&h[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (h[threadIdx.x]) atomicAdd(&hist[threadIdx.x], (unsigned long long)h[threadIdx.x]);
}

// ----------------------------------------------------------------------------
// launchers (orc_gpu_dev.h)

extern "C" int orc_gpu_cmp_chunk(const orc_gpu_cmp_desc *c, int32_t *d0, int64_t *list, unsigned long long *cnt,
                                 int64_t *nlist, char *msg, size_t nmsg) {
    int nb = ORC_GPU_CMP_BLOCKS;
    k_cmp_init<<<nb, TPB>>>(d0, c->n, (int32_t)c->dim);
    k_cmp_d0<<<nb, TPB>>>(*c, d0);
    if (!cmp_ok(cudaMemset(cnt, 0, sizeof *cnt), "memset", msg, nmsg)) return -1;
    k_cmp_list<<<nb, TPB>>>(c->n, (int32_t)c->dim, d0, list, cnt);
    unsigned long long h = 0;
    if (!cmp_ok(cudaGetLastError(), "launch", msg, nmsg)) return -1;
    if (!cmp_ok(cudaMemcpy(&h, cnt, sizeof h, cudaMemcpyDeviceToHost), "escalation count", msg, nmsg)) return -1;
    *nlist = (int64_t)h;
    return 0;
}

extern "C" int orc_gpu_cmp_gather(const orc_gpu_cmp_desc *c, const int64_t *list, int64_t nl, double *kvo, char *msg,
                                  size_t nmsg) {
    if (nl > 0) k_cmp_gather<<<ORC_GPU_CMP_BLOCKS, TPB>>>(*c, list, nl, kvo);
    return cmp_ok(cudaGetLastError(), "gather launch", msg, nmsg) ? 0 : -1;
}

extern "C" int orc_gpu_cmp_stats(const orc_gpu_cmp_desc *c, const int32_t *d0, orc_gpu_cmp_part *parts, int *grid,
                                 double *ratios, unsigned long long *nratio, char *msg, size_t nmsg) {
    k_cmp_stats<<<ORC_GPU_CMP_BLOCKS, TPB>>>(*c, d0, parts, grid, ratios, nratio);
    return cmp_ok(cudaGetLastError(), "stats launch", msg, nmsg) ? 0 : -1;
}

extern "C" int orc_gpu_cmp_hist(const double *a, int64_t n, int shift, unsigned long long prefix,
                                unsigned long long *hist_dev, unsigned long long *hist_host, char *msg, size_t nmsg) {
    if (!cmp_ok(cudaMemset(hist_dev, 0, 256 * sizeof *hist_dev), "memset", msg, nmsg)) return -1;
    if (n > 0) k_cmp_hist<<<ORC_GPU_CMP_BLOCKS, TPB>>>(a, n, shift, prefix, hist_dev);
    if (!cmp_ok(cudaGetLastError(), "hist launch", msg, nmsg)) return -1;
    return cmp_ok(cudaMemcpy(hist_host, hist_dev, 256 * sizeof *hist_host, cudaMemcpyDeviceToHost), "hist", msg, nmsg)
               ? 0 : -1;
}

extern "C" int orc_gpu_cmp_norms(const orc_gpu_cmp_desc *c, orc_gpu_norm_part *parts, char *msg, size_t nmsg) {
    k_cmp_norms<<<ORC_GPU_CMP_BLOCKS, TPB>>>(*c, parts);
    return cmp_ok(cudaGetLastError(), "norms launch", msg, nmsg) ? 0 : -1;
}
