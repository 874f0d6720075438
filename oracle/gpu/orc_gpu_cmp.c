/* orc_gpu_cmp.c: the GPU tier's compare (orc_gpu.h: orc_gpu_compare_fwd / _bwd), host half.
 *
 * What orc_compare_fwd / orc_compare_bwd compute, for kernel outputs in device memory: the
 * result block goes to the device in chunks of vectors; every element is judged there by
 * orc_judge.h's rule (orc_gpu_cmp.cu); the vectors with an element the double reference
 * leaves undecided come back with their kernel values and are judged from that element on
 * by orc_compare_esc (the host compare's own code: MPFR recomputation); the statistics are
 * merged here in element order (first failure / overflow: the smaller element index; worst:
 * the larger ratio, the smaller index on a tie) and the median of the ratios is selected
 * over the device's ratios and the host's by a radix select on the bit patterns (8 bits a
 * round; ratios are >= 0, so the patterns order as the values): the same value the host's
 * select_kth gives. Equal to the host compare in every field but bias_sum and
 * bias_zero_sum, RN sums of the same terms in another order.
 * Dense problems without a naive baseline (the GPU tier's results); anything else is
 * FA_ERR_INVALID naming it (judge it with orc_compare_*). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "oracle/gpu/orc_gpu.h"
#include "oracle/gpu/orc_gpu_dev.h"

/* elements per chunk: the chunk's block data on the device is 25 bytes an element */
#define CMP_CHUNK ((int64_t)1 << 26)

static fa_status gc_fail(fa_error *err, fa_status st, const char *arg, const char *msg) {
    if (err) {
        err->status = st;
        snprintf(err->arg, sizeof err->arg, "%s", arg);
        snprintf(err->msg, sizeof err->msg, "%s", msg);
    }
    return st;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    int64_t v;
    int32_t d0;
    int64_t k; /* row of the gathered kernel values */
} esc_ent;

static int cmp_esc(const void *a, const void *b) {
    return cmp_i64(&((const esc_ent *)a)->v, &((const esc_ent *)b)->v);
}

/* k-th smallest of the union of the device array a[0..na) and the host array h[0..nh):
 * 8 rounds of 8-bit digits from the top. */
static int union_select(const double *a, int64_t na, const double *h, int64_t nh, int64_t k, unsigned long long *hd,
                        double *out, char *msg, size_t nmsg) {
    unsigned long long prefix = 0, hist[256];
    for (int shift = 56; shift >= 0; shift -= 8) {
        if (orc_gpu_cmp_hist(a, na, shift, prefix, hd, hist, msg, nmsg)) return -1;
        for (int64_t i = 0; i < nh; i++) {
            uint64_t u;
            memcpy(&u, &h[i], 8);
            if (shift == 56 || (u >> (shift + 8)) == prefix) hist[(u >> shift) & 255u]++;
        }
        int x = 0;
        for (; x < 255; x++) {
            if ((int64_t)hist[x] > k) break;
            k -= (int64_t)hist[x];
        }
        prefix = (prefix << 8) | (unsigned)x;
    }
    uint64_t u = prefix;
    memcpy(out, &u, 8);
    return 0;
}

static void at_of(const orc_block *blk, int64_t e, int64_t at[4]) {
    const orc_index *ix = &blk->index[e / blk->dim];
    at[0] = ix->b; at[1] = ix->s; at[2] = ix->h; at[3] = blk->dim == 1 ? 0 : e % blk->dim;
}

/* The undecided vectors vs[0..n) of a block in device memory as a compact host block (the
 * same index entries; element k dim + d is vector vs[k]'s d): what orc_compare_esc reads. */
static int shadow_block(const orc_block *blk, const int64_t *vs, int64_t n, orc_block *sb, char *msg, size_t nmsg) {
    int64_t dim = blk->dim;
    memset(sb, 0, sizeof *sb);
    if (!orc_block_alloc(sb, n, dim, 0) || !(sb->index = malloc((size_t)(n > 0 ? n : 1) * sizeof(orc_index)))) {
        orc_block_free(sb);
        snprintf(msg, nmsg, "out of memory in the GPU compare.");
        return -1;
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t v = vs[k], e = v * dim, f = k * dim;
        sb->index[k] = blk->index[v];
        if (orc_gpu_to_host(sb->ref + f, blk->ref + e, (size_t)dim * 8, msg, nmsg) ||
            orc_gpu_to_host(sb->bound + f, blk->bound + e, (size_t)dim * 8, msg, nmsg) ||
            orc_gpu_to_host(sb->orc_err + f, blk->orc_err + e, (size_t)dim * 8, msg, nmsg) ||
            orc_gpu_to_host(sb->flags + f, blk->flags + e, (size_t)dim, msg, nmsg)) {
            orc_block_free(sb);
            return -1;
        }
    }
    return 0;
}

/* One tensor: block blk of fr / br (tensor as orc_compare_esc), kernel values kv (device).
 * dev: the block's ref, bound, orc_err, flags are in device memory (read there in place). */
static fa_status gc_tensor(const orc_fwd_result *fr, const orc_bwd_result *br, int tensor, const orc_block *blk,
                           int dev, const void *kv, const int64_t *st, int kv_f32, int bf16, orc_stats *out,
                           fa_error *err) {
    char msg[256] = "";
    orc_cmp_part p0, ph;
    memset(&ph, 0, sizeof ph);
    fa_status rs = orc_compare_esc(fr, br, tensor, 0, NULL, NULL, NULL, &p0, err);
    if (rs) return rs;
    int64_t dim = blk->dim, nel = blk->n * dim;
    int64_t cv = dim > 0 ? CMP_CHUNK / dim : 1; /* vectors per chunk */
    if (cv < 1) cv = 1;
    if (cv > blk->n) cv = blk->n > 0 ? blk->n : 1;
    int64_t cel = cv * dim;
    double *d_ref = NULL, *d_bound = NULL, *d_oe = NULL, *d_ratios = NULL, *d_kvo = NULL;
    uint8_t *d_flags = NULL;
    orc_index *d_index = NULL;
    int32_t *d_d0 = NULL;
    int64_t *d_list = NULL;
    unsigned long long *d_cnt = NULL, *d_nr = NULL, *d_hist = NULL;
    int *d_grid = NULL;
    orc_gpu_cmp_part *d_parts = NULL, *parts = NULL;
    esc_ent *esc = NULL;
    int64_t nesc = 0, cap = 0;
    double *ekv = NULL; /* [cap][dim] gathered kernel values */
    int64_t *hlist = NULL;
    fa_status ret = FA_OK;
#define CU(x, what)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            (void)cudaGetLastError();                                                      \
            snprintf(msg, sizeof msg, "CUDA error in the GPU compare (%s): %s", what,      \
                     cudaGetErrorString(e_));                                              \
            ret = e_ == cudaErrorMemoryAllocation ? FA_ERR_NOMEM : FA_ERR_DEVICE;          \
            goto done;                                                                     \
        }                                                                                  \
    } while (0)
#define DEV(x) do { if (x) { ret = FA_ERR_DEVICE; goto done; } } while (0)
    if (!dev) {
        CU(cudaMalloc((void **)&d_ref, (size_t)cel * 8), "scratch");
        CU(cudaMalloc((void **)&d_bound, (size_t)cel * 8), "scratch");
        CU(cudaMalloc((void **)&d_oe, (size_t)cel * 8), "scratch");
        CU(cudaMalloc((void **)&d_flags, (size_t)cel), "scratch");
    }
    CU(cudaMalloc((void **)&d_index, (size_t)cv * sizeof(orc_index)), "scratch");
    CU(cudaMalloc((void **)&d_d0, (size_t)cv * 4), "scratch");
    CU(cudaMalloc((void **)&d_list, (size_t)cv * 8), "scratch");
    CU(cudaMalloc((void **)&d_cnt, 8), "scratch");
    CU(cudaMalloc((void **)&d_nr, 8), "scratch");
    CU(cudaMalloc((void **)&d_hist, 256 * 8), "scratch");
    CU(cudaMalloc((void **)&d_grid, sizeof(float) * ORC_GRID_ROWS * ORC_GRID_COLS), "scratch");
    CU(cudaMalloc((void **)&d_parts, sizeof(orc_gpu_cmp_part) * ORC_GPU_CMP_BLOCKS), "scratch");
    CU(cudaMalloc((void **)&d_ratios, (size_t)(nel > 0 ? nel : 1) * 8), "ratios");
    CU(cudaMemset(d_nr, 0, 8), "memset");
    CU(cudaMemcpy(d_grid, p0.s.grid, sizeof p0.s.grid, cudaMemcpyHostToDevice), "grid");
    parts = malloc(sizeof *parts * ORC_GPU_CMP_BLOCKS);
    hlist = malloc((size_t)cv * 8);
    if (!parts || !hlist) { ret = FA_ERR_NOMEM; snprintf(msg, sizeof msg, "out of memory in the GPU compare."); goto done; }

    /* device-judged statistics, folded in block order */
    unsigned long long cnt[ORC_JD_FINITE + 1] = {0}, hist[ORC_HIST_BUCKETS] = {0}, ffin = 0, exact = 0;
    double max_err = 0, wr = 0, wkv = 0, bias = 0, biasz = 0;
    long long we = -1, fe = -1, oe = -1;
    orc_gpu_cmp_desc c;
    memset(&c, 0, sizeof c);
    c.dim = dim; c.kv = kv; c.kv_f32 = kv_f32; c.bf16 = bf16; c.thr = p0.thr;
    for (int k = 0; k < 4; k++) c.st[k] = st[k < 3 || !kv_f32 ? k : 2];
    c.hshift = __builtin_ctzll((unsigned long long)p0.s.grid_hb);
    c.sshift = __builtin_ctzll((unsigned long long)p0.s.grid_sb);
    c.ref = d_ref; c.bound = d_bound; c.oe = d_oe; c.flags = d_flags; c.index = d_index;
    for (int64_t v0 = 0; v0 < blk->n; v0 += cv) {
        int64_t n = blk->n - v0 < cv ? blk->n - v0 : cv, ne = n * dim, e0 = v0 * dim;
        c.n = n; c.e0 = e0;
        if (dev) {
            c.ref = blk->ref + e0; c.bound = blk->bound + e0; c.oe = blk->orc_err + e0; c.flags = blk->flags + e0;
        } else {
            CU(cudaMemcpy(d_ref, blk->ref + e0, (size_t)ne * 8, cudaMemcpyHostToDevice), "upload");
            CU(cudaMemcpy(d_bound, blk->bound + e0, (size_t)ne * 8, cudaMemcpyHostToDevice), "upload");
            CU(cudaMemcpy(d_oe, blk->orc_err + e0, (size_t)ne * 8, cudaMemcpyHostToDevice), "upload");
            CU(cudaMemcpy(d_flags, blk->flags + e0, (size_t)ne, cudaMemcpyHostToDevice), "upload");
        }
        CU(cudaMemcpy(d_index, blk->index + v0, (size_t)n * sizeof(orc_index), cudaMemcpyHostToDevice), "upload");
        int64_t nl = 0;
        DEV(orc_gpu_cmp_chunk(&c, d_d0, d_list, d_cnt, &nl, msg, sizeof msg));
        if (nl > 0) {
            if (nesc + nl > cap) {
                int64_t nc = (nesc + nl) * 2;
                esc_ent *x = realloc(esc, (size_t)nc * sizeof *esc);
                if (x) esc = x;
                double *y = x ? realloc(ekv, (size_t)(nc * dim) * sizeof(double)) : NULL;
                if (y) ekv = y;
                if (!x || !y) { ret = FA_ERR_NOMEM; snprintf(msg, sizeof msg, "out of memory in the GPU compare."); goto done; }
                cap = nc;
            }
            CU(cudaMalloc((void **)&d_kvo, (size_t)(nl * dim) * 8), "gather");
            DEV(orc_gpu_cmp_gather(&c, d_list, nl, d_kvo, msg, sizeof msg));
            CU(cudaMemcpy(ekv + nesc * dim, d_kvo, (size_t)(nl * dim) * 8, cudaMemcpyDeviceToHost), "gather");
            CU(cudaMemcpy(hlist, d_list, (size_t)nl * 8, cudaMemcpyDeviceToHost), "list");
            int32_t *hd0 = malloc((size_t)n * 4);
            if (!hd0) { ret = FA_ERR_NOMEM; snprintf(msg, sizeof msg, "out of memory in the GPU compare."); goto done; }
            cudaError_t e1 = cudaMemcpy(hd0, d_d0, (size_t)n * 4, cudaMemcpyDeviceToHost);
            for (int64_t k = 0; k < nl && e1 == cudaSuccess; k++)
                esc[nesc + k] = (esc_ent){v0 + hlist[k], hd0[hlist[k]], nesc + k};
            free(hd0);
            CU(e1, "d0");
            cudaFree(d_kvo);
            d_kvo = NULL;
            nesc += nl;
        }
        DEV(orc_gpu_cmp_stats(&c, d_d0, d_parts, d_grid, d_ratios, d_nr, msg, sizeof msg));
        CU(cudaMemcpy(parts, d_parts, sizeof *parts * ORC_GPU_CMP_BLOCKS, cudaMemcpyDeviceToHost), "partials");
        for (int b = 0; b < ORC_GPU_CMP_BLOCKS; b++) {
            const orc_gpu_cmp_part *q = &parts[b];
            for (int k = 0; k <= ORC_JD_FINITE; k++) cnt[k] += q->cnt[k];
            for (int k = 0; k < ORC_HIST_BUCKETS; k++) hist[k] += q->hist[k];
            ffin += q->failed_finite;
            exact += q->exact;
            if (q->max_err > max_err) max_err = q->max_err;
            if (q->worst_e >= 0 && (we < 0 || q->worst_ratio > wr || (q->worst_ratio == wr && q->worst_e < we))) {
                wr = q->worst_ratio; we = q->worst_e; wkv = q->worst_kv;
            }
            if (q->fail_e >= 0 && (fe < 0 || q->fail_e < fe)) fe = q->fail_e;
            if (q->ovf_e >= 0 && (oe < 0 || q->ovf_e < oe)) oe = q->ovf_e;
            bias += q->bias;
            biasz += q->bias_zero;
        }
    }

    /* the escalated vectors, in vector order, on the host */
    {
        qsort(esc, (size_t)nesc, sizeof *esc, cmp_esc);
        int64_t *vs = malloc((size_t)(nesc ? nesc : 1) * 8);
        int32_t *ds = malloc((size_t)(nesc ? nesc : 1) * 4);
        double *ks = malloc((size_t)(nesc * dim > 0 ? nesc * dim : 1) * 8);
        if (!vs || !ds || !ks) {
            free(vs); free(ds); free(ks);
            ret = FA_ERR_NOMEM; snprintf(msg, sizeof msg, "out of memory in the GPU compare."); goto done;
        }
        for (int64_t k = 0; k < nesc; k++) {
            vs[k] = esc[k].v;
            ds[k] = esc[k].d0;
            memcpy(ks + k * dim, ekv + esc[k].k * dim, (size_t)dim * 8);
        }
        if (!dev || nesc == 0) rs = orc_compare_esc(fr, br, tensor, nesc, vs, ds, ks, &ph, err);
        else {
            /* the vectors' block data come back; orc_compare_esc judges a compact copy whose
             * element k dim + d is vector vs[k]'s d: its element indices are mapped back */
            orc_block sb;
            int64_t *ks_ = malloc((size_t)nesc * 8);
            if (!ks_ || shadow_block(blk, vs, nesc, &sb, msg, sizeof msg)) {
                free(ks_); free(vs); free(ds); free(ks);
                if (!msg[0]) snprintf(msg, sizeof msg, "out of memory in the GPU compare.");
                ret = FA_ERR_DEVICE; goto done;
            }
            for (int64_t k = 0; k < nesc; k++) ks_[k] = k;
            orc_fwd_result sf;
            orc_bwd_result sbr;
            if (fr) { sf = *fr; if (tensor == 0) sf.o = sb; else sf.lse = sb; }
            else { sbr = *br; if (tensor == 2) sbr.dq = sb; else if (tensor == 3) sbr.dk = sb; else sbr.dv = sb; }
            rs = orc_compare_esc(fr ? &sf : NULL, fr ? NULL : &sbr, tensor, nesc, ks_, ds, ks, &ph, err);
            int64_t *pe64[3] = {&ph.fail_e, &ph.ovf_e, &ph.worst_e};
            for (int q = 0; q < 3; q++)
                if (*pe64[q] >= 0) *pe64[q] = vs[*pe64[q] / dim] * dim + *pe64[q] % dim;
            orc_block_free(&sb);
            free(ks_);
        }
        free(vs); free(ds); free(ks);
        if (rs) goto done;
    }

    /* merge */
    {
        orc_stats *s = out;
        *s = ph.s;
        s->checked += cnt[ORC_JD_NF_MATCH] + cnt[ORC_JD_NAN_MISSING] + cnt[ORC_JD_OVF_INF] + cnt[ORC_JD_CHECKED_OVF] +
                      cnt[ORC_JD_NAN_UNEXP] + cnt[ORC_JD_FINITE];
        s->failed += cnt[ORC_JD_NAN_MISSING] + cnt[ORC_JD_NAN_UNEXP] + ffin;
        s->unchecked += cnt[ORC_JD_UNCHECKED] + cnt[ORC_JD_UNCHECKED_OVF];
        s->nan_unexpected += cnt[ORC_JD_NAN_UNEXP];
        s->nan_missing += cnt[ORC_JD_NAN_MISSING];
        s->overflow_inf += cnt[ORC_JD_OVF_INF];
        s->overflow_sensitive += cnt[ORC_JD_UNCHECKED_OVF] + cnt[ORC_JD_CHECKED_OVF];
        s->exact += exact;
        s->nonfinite_match += cnt[ORC_JD_NF_MATCH];
        for (int k = 0; k < ORC_HIST_BUCKETS; k++) s->ratio_hist[k] += hist[k];
        if (max_err > s->max_err) s->max_err = max_err;
        if (fe >= 0 && (ph.fail_e < 0 || fe < ph.fail_e)) at_of(blk, fe, s->first_fail_at);
        if (oe >= 0 && (ph.ovf_e < 0 || oe < ph.ovf_e)) at_of(blk, oe, s->first_ovf_at);
        if (we >= 0 && (ph.worst_e < 0 || wr > s->worst_ratio || (wr == s->worst_ratio && we < ph.worst_e))) {
            s->worst_ratio = wr;
            at_of(blk, we, s->worst_at);
            s->worst_kernel = wkv;
            if (dev) {
                CU(cudaMemcpy(&s->worst_ref, blk->ref + we, 8, cudaMemcpyDeviceToHost), "worst element");
                CU(cudaMemcpy(&s->worst_bound, blk->bound + we, 8, cudaMemcpyDeviceToHost), "worst element");
            } else {
                s->worst_ref = blk->ref[we];
                s->worst_bound = blk->bound[we];
            }
        }
        float grid[ORC_GRID_ROWS][ORC_GRID_COLS];
        CU(cudaMemcpy(grid, d_grid, sizeof grid, cudaMemcpyDeviceToHost), "grid");
        for (int r = 0; r < ORC_GRID_ROWS; r++)
            for (int q = 0; q < ORC_GRID_COLS; q++)
                if (grid[r][q] > s->grid[r][q]) s->grid[r][q] = grid[r][q];
        unsigned long long ndev = 0;
        CU(cudaMemcpy(&ndev, d_nr, 8, cudaMemcpyDeviceToHost), "ratio count");
        int64_t nr = (int64_t)ndev + ph.nr;
        s->bias_sum = bias + ph.bias;
        s->bias_zero_sum = biasz + ph.bias_zero;
        s->bias_n = nr;
        if (nr > 0) {
            double hi, lo;
            DEV(union_select(d_ratios, (int64_t)ndev, ph.ratios, ph.nr, nr / 2, d_hist, &hi, msg, sizeof msg));
            if (nr % 2) s->median_ratio = hi;
            else {
                DEV(union_select(d_ratios, (int64_t)ndev, ph.ratios, ph.nr, nr / 2 - 1, d_hist, &lo, msg, sizeof msg));
                s->median_ratio = 0.5 * (lo + hi);
            }
        }
    }
done:
    if (ret) gc_fail(err, ret, "", msg[0] ? msg : "the GPU compare failed.");
    orc_cmp_part_free(&ph);
    orc_cmp_part_free(&p0);
    free(parts); free(hlist); free(esc); free(ekv);
    cudaFree(d_ref); cudaFree(d_bound); cudaFree(d_oe); cudaFree(d_flags); cudaFree(d_index); cudaFree(d_d0);
    cudaFree(d_list); cudaFree(d_cnt); cudaFree(d_nr); cudaFree(d_hist); cudaFree(d_grid); cudaFree(d_parts);
    cudaFree(d_ratios); cudaFree(d_kvo);
    return ret ? ret : rs;
#undef CU
#undef DEV
}

// ----------------------------------------------------------------------------
// public (orc_gpu.h)

static fa_status gc_view(const char *name, const void *p, int nd, const int64_t *st, fa_error *err) {
    char m[200];
    if (!p) {
        snprintf(m, sizeof m, "%s is NULL; pass the backend's output (device memory).", name);
        return gc_fail(err, FA_ERR_INVALID, name, m);
    }
    if (!orc_gpu_is_device(p)) {
        snprintf(m, sizeof m, "%s is not in CUDA device memory; judge host outputs with orc_compare_*.", name);
        return gc_fail(err, FA_ERR_INVALID, name, m);
    }
    for (int i = 0; i < nd; i++)
        if (st[i] < 0) {
            snprintf(m, sizeof m, "%s has a negative stride[%d]; strides must be >= 0.", name, i);
            return gc_fail(err, FA_ERR_INVALID, name, m);
        }
    return FA_OK;
}

static fa_status gc_fwd(const orc_fwd_result *res, int dev, const fa_tensor *o, const fa_lse *lse,
                        orc_stats *o_stats, orc_stats *lse_stats, fa_error *err) {
    fa_status st;
    int bf16 = res->args.p.dtype == FA_BF16;
    if (o_stats) {
        if (!o) return gc_fail(err, FA_ERR_INVALID, "o", "o is NULL while o_stats is given.");
        if ((st = gc_view("o", o->ptr, 4, o->stride, err))) return st;
        if ((st = gc_tensor(res, NULL, 0, &res->o, dev, o->ptr, o->stride, 0, bf16, o_stats, err))) return st;
    }
    if (lse_stats) {
        if (!lse) return gc_fail(err, FA_ERR_INVALID, "lse", "lse is NULL while lse_stats is given.");
        if ((st = gc_view("lse", lse->ptr, 3, lse->stride, err))) return st;
        int64_t s4[4] = {lse->stride[0], lse->stride[1], lse->stride[2], 0};
        if ((st = gc_tensor(res, NULL, 1, &res->lse, dev, lse->ptr, s4, 1, bf16, lse_stats, err))) return st;
    }
    return FA_OK;
}

fa_status orc_gpu_compare_fwd(const orc_fwd_result *res, const fa_tensor *o, const fa_lse *lse, orc_stats *o_stats,
                              orc_stats *lse_stats, fa_error *err) {
    if (!res) return gc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_fwd_result.");
    return gc_fwd(res, 0, o, lse, o_stats, lse_stats, err);
}

fa_status orc_gpu_compare_fwd_dev(const orc_gpu_fwd_dres *res, const fa_tensor *o, const fa_lse *lse,
                                  orc_stats *o_stats, orc_stats *lse_stats, fa_error *err) {
    if (!res) return gc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_gpu_fwd_dres.");
    return gc_fwd(&res->r, 1, o, lse, o_stats, lse_stats, err);
}

static fa_status gc_bwd(const orc_bwd_result *res, int dev, const fa_tensor *dq, const fa_tensor *dk,
                        const fa_tensor *dv, orc_stats *dq_stats, orc_stats *dk_stats, orc_stats *dv_stats,
                        fa_error *err) {
    fa_status st;
    int bf16 = res->args.p.dtype == FA_BF16;
    struct { const char *name; const fa_tensor *t; orc_stats *s; const orc_block *b; } v[3] = {
        {"dq", dq, dq_stats, &res->dq}, {"dk", dk, dk_stats, &res->dk}, {"dv", dv, dv_stats, &res->dv}};
    for (int i = 0; i < 3; i++) {
        if (!v[i].s) continue;
        if (!v[i].t) return gc_fail(err, FA_ERR_INVALID, v[i].name, "tensor is NULL while its stats are given.");
        if ((st = gc_view(v[i].name, v[i].t->ptr, 4, v[i].t->stride, err))) return st;
    }
    for (int i = 0; i < 3; i++)
        if (v[i].s && (st = gc_tensor(NULL, res, 2 + i, v[i].b, dev, v[i].t->ptr, v[i].t->stride, 0, bf16, v[i].s, err)))
            return st;
    return FA_OK;
}

fa_status orc_gpu_compare_bwd(const orc_bwd_result *res, const fa_tensor *dq, const fa_tensor *dk,
                              const fa_tensor *dv, orc_stats *dq_stats, orc_stats *dk_stats, orc_stats *dv_stats,
                              fa_error *err) {
    if (!res) return gc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_bwd_result.");
    return gc_bwd(res, 0, dq, dk, dv, dq_stats, dk_stats, dv_stats, err);
}

fa_status orc_gpu_compare_bwd_dev(const orc_gpu_bwd_dres *res, const fa_tensor *dq, const fa_tensor *dk,
                                  const fa_tensor *dv, orc_stats *dq_stats, orc_stats *dk_stats, orc_stats *dv_stats,
                                  fa_error *err) {
    if (!res) return gc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_gpu_bwd_dres.");
    return gc_bwd(&res->r, 1, dq, dk, dv, dq_stats, dk_stats, dv_stats, err);
}

// ----------------------------------------------------------------------------
// the checks' masked-row and magnitude sums (orc_gpu.h: orc_gpu_block_norms)

fa_status orc_gpu_block_norms(const orc_block *blk, const void *kv, const int64_t *st, int kv_f32, int bf16,
                              orc_gpu_norms *out, fa_error *err) {
    char msg[256] = "";
    if (!blk || !out) return gc_fail(err, FA_ERR_INVALID, "blk", "blk and out must not be NULL.");
    memset(out, 0, sizeof *out);
    for (int k = 0; k < 4; k++) out->masked_at[k] = -1;
    out->masked_ref = NAN;
    if (blk->n > 0 && (!orc_gpu_is_device(blk->ref) || !orc_gpu_is_device(kv)))
        return gc_fail(err, FA_ERR_INVALID, "blk", "the block's arrays and the kernel tensor must be in device memory.");
    int64_t dim = blk->dim;
    int64_t cv = dim > 0 ? CMP_CHUNK / dim : 1;
    if (cv < 1) cv = 1;
    if (cv > blk->n) cv = blk->n > 0 ? blk->n : 1;
    orc_index *d_index = NULL;
    orc_gpu_norm_part *d_parts = NULL, *parts = malloc(sizeof *parts * ORC_GPU_CMP_BLOCKS);
    fa_status ret = FA_OK;
    long long be = -1, me = -1;
    if (!parts) return gc_fail(err, FA_ERR_NOMEM, "", "out of memory in the GPU norms.");
#define CU(x, what)                                                                                       \
    do {                                                                                                  \
        cudaError_t e_ = (x);                                                                             \
        if (e_ != cudaSuccess) {                                                                          \
            (void)cudaGetLastError();                                                                     \
            snprintf(msg, sizeof msg, "CUDA error in the GPU norms (%s): %s", what, cudaGetErrorString(e_)); \
            ret = e_ == cudaErrorMemoryAllocation ? FA_ERR_NOMEM : FA_ERR_DEVICE;                         \
            goto done;                                                                                    \
        }                                                                                                 \
    } while (0)
    CU(cudaMalloc((void **)&d_index, (size_t)cv * sizeof(orc_index)), "scratch");
    CU(cudaMalloc((void **)&d_parts, sizeof(orc_gpu_norm_part) * ORC_GPU_CMP_BLOCKS), "scratch");
    orc_gpu_cmp_desc c;
    memset(&c, 0, sizeof c);
    c.dim = dim; c.kv = kv; c.kv_f32 = kv_f32; c.bf16 = bf16;
    for (int k = 0; k < 4; k++) c.st[k] = st[k < 3 || !kv_f32 ? k : 2];
    c.index = d_index;
    for (int64_t v0 = 0; v0 < blk->n; v0 += cv) {
        int64_t n = blk->n - v0 < cv ? blk->n - v0 : cv, e0 = v0 * dim;
        c.n = n; c.e0 = e0;
        c.ref = blk->ref + e0; c.bound = blk->bound + e0; c.oe = blk->orc_err + e0; c.flags = blk->flags + e0;
        CU(cudaMemcpy(d_index, blk->index + v0, (size_t)n * sizeof(orc_index), cudaMemcpyHostToDevice), "upload");
        if (orc_gpu_cmp_norms(&c, d_parts, msg, sizeof msg)) { ret = FA_ERR_DEVICE; goto done; }
        CU(cudaMemcpy(parts, d_parts, sizeof *parts * ORC_GPU_CMP_BLOCKS, cudaMemcpyDeviceToHost), "partials");
        for (int b = 0; b < ORC_GPU_CMP_BLOCKS; b++) { /* in block order: a fixed sum */
            const orc_gpu_norm_part *q = &parts[b];
            out->ref2 += q->ref2;
            out->got2 += q->got2;
            out->bnd2 += q->bnd2;
            out->masked_bad += (int64_t)q->masked_bad;
            if (q->bad_e >= 0 && (be < 0 || q->bad_e < be)) be = q->bad_e;
            if (q->masked_e >= 0 && (me < 0 || q->masked_e < me)) me = q->masked_e;
        }
    }
    if (be >= 0) {
        const orc_index *ix = &blk->index[be / dim];
        int64_t d = be % dim;
        at_of(blk, be, out->masked_at);
        if (kv_f32) { /* the check names an LSE element [b, h, s] (its logical index) */
            out->masked_at[1] = ix->h;
            out->masked_at[2] = ix->s;
        }
        if (kv_f32) {
            float f;
            CU(cudaMemcpy(&f, (const float *)kv + ix->b * st[0] + ix->h * st[1] + ix->s * st[2], 4,
                          cudaMemcpyDeviceToHost), "masked element");
            out->masked_got = f;
        } else {
            uint16_t u;
            CU(cudaMemcpy(&u, (const uint16_t *)kv + ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3], 2,
                          cudaMemcpyDeviceToHost), "masked element");
            out->masked_got = orc_decode(u, bf16 ? FA_BF16 : FA_F16);
        }
    }
    if (me >= 0) CU(cudaMemcpy(&out->masked_ref, blk->ref + me, 8, cudaMemcpyDeviceToHost), "masked element");
#undef CU
done:
    if (ret) gc_fail(err, ret, "", msg[0] ? msg : "the GPU norms failed.");
    free(parts);
    cudaFree(d_index);
    cudaFree(d_parts);
    return ret;
}
