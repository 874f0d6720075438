/* orc_gpu_dev.h: the device half of the GPU tier (orc_gpu_fwd.cu), called by
 * the host half (orc_gpu.c). Not part of the API. C linkage.
 *
 * The device computes, for a chunk of query rows of one (b, h), the heavy
 * O(rows * Sk * D) parts of the certified double forward: the row weights of
 * orc_row_weights (the same orc_formulas.h calls) with the row info (ovf
 * included: orc_fm_row_kind, orc_fm_pv_overflow), and the three weighted
 * sums of every O element (value sum_j W_j v_j by 32-key blocks folded with
 * TwoSum, kernel-bound sum_j C_j |v_j|, oracle-bound sum_j CO_j |v_j|). The
 * host assembles the rows with the CPU tier's own orc_fwd_row_out. */
#ifndef FLASHCHECK_ORC_GPU_DEV_H
#define FLASHCHECK_ORC_GPU_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "oracle/orc_internal.h"
#include "oracle/orc_judge.h"
#include "oracle/gpu/orc_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ORC_GPU_RT 64 /* rows per tile (tile spans, score and P.V tiles) */
#define ORC_GPU_INVIS (-1.0) /* weight-matrix marker of a key not visible to the row
                                (a visible P, W is >= 0 or NaN) */

/* A 4-d fp16/bf16 view in device memory: element [b, s, h, x] at p[b s0 + s s1 + h s2 + x s3]. */
typedef struct {
    const uint16_t *p;
    int64_t s[4];
} orc_gpu_ten;

typedef struct {
    int64_t B, Sq, Sk, Hq, Hkv, G, D, Dv;
    int bf16;
    const uint16_t *q, *k, *v;   /* device */
    const float *mask;           /* device, or NULL */
    int64_t qs[4], ks[4], vs[4], ms[4];
    orc_model mk, mo;
    orc_fm_rowc rc;              /* orc_fm_rowc_init of mk, mo */
} orc_gpu_fwd_desc;

typedef struct orc_gpu_fwd_state orc_gpu_fwd_state;

/* Allocate device scratch for chunks of up to *rc rows (chosen here: a multiple
 * of ORC_GPU_RT, scratch 24 * rc * Sk bytes within the device's free memory).
 * 0 on success, else -1 with msg filled. */
int orc_gpu_fwd_begin(const orc_gpu_fwd_desc *d, int64_t *rc, orc_gpu_fwd_state **st, char *msg,
                      size_t nmsg);

/* Start rows r0 .. r0+nr-1 (nr <= *rc) of query head h of batch b in result
 * slot 0 or 1 (asynchronous: the device works while the host assembles the
 * other slot). rlo/rhi: key range of each row (orc_row_range, host), read
 * before the call returns. 0 on success, else -1 with msg filled. */
int orc_gpu_fwd_start(orc_gpu_fwd_state *st, int slot, int64_t b, int64_t h, int64_t r0, int64_t nr,
                      const int64_t *rlo, const int64_t *rhi, char *msg, size_t nmsg);

/* Wait for a slot's results: ri [nr], num, bsum, osum [nr * Dv] in host memory,
 * valid until the slot is started again. 0 on success, else -1 with msg. */
int orc_gpu_fwd_wait(orc_gpu_fwd_state *st, int slot, const orc_row_info **ri, const double **num,
                     const double **bsum, const double **osum, char *msg, size_t nmsg);

void orc_gpu_fwd_end(orc_gpu_fwd_state *st);

/* Launchers of the forward's kernels (orc_gpu_fwd.cu) for the backward, on a stream
 * (cudaStream_t), asynchronous; 0 on success, -1 on a launch error (cudaGetLastError).
 *   kvstat: out4 = k1max, vmax, kmax, v1max bits of kv head (b, hk) (doubles >= 0)
 *   dots:   X = a_i.t_j, Y = |a_i|.|t_j| over x < Dd, rows r0 .. r0+nr-1 of head h, keys
 *           in each 64-row tile's span [tlo, thi] ([rows][Sk] matrices, row r - r0)
 *   rows:   the forward row weights of k_rows: W (ORC_GPU_INVIS where invisible),
 *           Cw = C, COw = CO, eomax[r] = the row's Eo_max (NULL: not written), ri
 *   wsum:   num = sum Wv t (blocked compensated), bsum = sum (Wb + cb Wbm) |t|,
 *           osum = sum (Wo + co Wbm) |t| over visible keys (Vis != ORC_GPU_INVIS);
 *           Wbm NULL: no cb, co terms; outputs [nr][Dd] (osum NULL: not written) */
int orc_gpu_launch_kvstat(const orc_gpu_fwd_desc *d, void *stream, int64_t b, int64_t hk,
                          unsigned long long *out4);
int orc_gpu_launch_dots(const orc_gpu_fwd_desc *d, void *stream, orc_gpu_ten ra, orc_gpu_ten ta, int64_t Dd,
                        int64_t b, int64_t h, int64_t r0, int64_t nr, const int64_t *tlo, const int64_t *thi,
                        double *X, double *Y);
int orc_gpu_launch_rows(const orc_gpu_fwd_desc *d, void *stream, int64_t b, int64_t h, int64_t r0, int64_t nr,
                        const int64_t *rlo, const int64_t *rhi, const int64_t *tlo, const int64_t *thi,
                        const unsigned long long *k1, double *X, double *Y, double *W, double *Cw, double *COw,
                        double *eomax, orc_row_info *ri);
int orc_gpu_launch_wsum(const orc_gpu_fwd_desc *d, void *stream, orc_gpu_ten ta, int64_t Dd, int64_t b, int64_t h,
                        int64_t nr, const int64_t *tlo, const int64_t *thi, const double *Vis, const double *Wv,
                        const double *Wb, const double *Wo, const double *Wbm, const double *cb, const double *co,
                        double *num, double *bsum, double *osum);

// ----------------------------------------------------------------------------
// backward (orc_gpu_bwd.cu), called by orc_gpu_bwd.c

typedef struct {
    orc_gpu_fwd_desc f;            /* inputs q, k, v, mask; models; forward row constants */
    const uint16_t *o, *dout;      /* device: the given O, dO */
    const float *lse;              /* device: the given LSE */
    int64_t os[4], dos[4], ls[3];
    int lse_unknown;               /* orc_options.lse_unknown: lse not read (BOUNDS.md 5.0) */
    orc_fm_bwdc bc;                /* orc_fm_bwdc_init */
} orc_gpu_bwd_desc;

/* Per query row of a chunk (device memory), for the dQ finishing. */
typedef struct {
    int kind, ovf;                 /* forward row kind (ROW_*) and its ovf */
    int bad;                       /* the row cannot be bounded (orc_bwd.c's row_bad) */
    int rovf;                      /* some (i, j) or the dQ accumulator may overflow (section 11) */
    int64_t n;                     /* visible keys */
    double fq;                     /* dQ underflow floor (orc_fm_dqk_floor) */
    double o_ratio, lse_ratio;     /* |given - exact| / forward bound: max over the row's O, its LSE */
} orc_gpu_brow;

/* A result block's element arrays in device memory ([n][dim] each, orc_block's layout). */
typedef struct {
    double *ref, *bound, *oe;
    uint8_t *flags;
} orc_gpu_dblk;

/* What the device finishing needs beyond the descriptor: host values of oracle.h's
 * functions, the sampled vectors (host; uploaded by begin) and the result blocks. */
typedef struct {
    double scale;                  /* the problem's scale (signed) */
    double thr32, thrdt, u_in;     /* orc_overflow_threshold(-1), (dtype); orc_unit_roundoff(dtype) */
    int bf16;
    const orc_index *iq, *ic;      /* host: sampled dQ rows [nq], dK/dV columns [nc], sorted */
    int64_t nq, nc;
    orc_gpu_dblk dq, dk, dv;       /* device: [nq][D], [nc][D], [nc][Dv], or a kv-head group's
                                      part of them (the qbase / cbase of chunk and cols) */
} orc_gpu_bfin;

/* The forward finished on the device (orc_gpu_fwd_dev): where orc_gpu_fwd_start_dev writes a
 * chunk's sampled rows x0 .. x1-1 (O block o [n][Dv], LSE block lse [n][1], index ix [n]
 * in device memory) with orc_formulas.h's orc_fm_fwd_out_elem / orc_fm_fwd_lse, and
 * need [n] (device, 1: the row asks for MPFR: tier MPFR on a normal row (mpfr_all), or
 * an element / the LSE above ratio times its bound). sink: the head's sink (has_sink). */
typedef struct {
    orc_gpu_dblk o, lse;
    const orc_index *ix;
    int *need;
    double ratio;
    int mpfr_all, has_sink;
    double sink;
    int64_t x0, x1;
} orc_gpu_ffin;

/* orc_gpu_fwd_start, the chunk finished on the device into fin's blocks instead of its sums
 * fetched to the host (no orc_gpu_fwd_wait; the slot's previous chunk is waited for before
 * its pinned ranges are reused). orc_gpu_fwd_sync waits for all of it. */
int orc_gpu_fwd_start_dev(orc_gpu_fwd_state *st, int slot, int64_t b, int64_t h, int64_t r0, int64_t nr,
                          const int64_t *rlo, const int64_t *rhi, const orc_gpu_ffin *fin, char *msg, size_t nmsg);
int orc_gpu_fwd_sync(orc_gpu_fwd_state *st, char *msg, size_t nmsg);

typedef struct orc_gpu_bwd_state orc_gpu_bwd_state;

/* Device scratch for chunks of up to *rc rows (a multiple of ORC_GPU_RT) and the column
 * accumulators; rlo/rhi: the key range of every query row (Sq entries, host; the tile spans
 * of every chunk are formed and uploaded here). 0 or -1. Everything after begin is queued
 * on the tier's stream without waiting on the host until orc_gpu_bwd_finish. */
int orc_gpu_bwd_begin(const orc_gpu_bwd_desc *d, const orc_gpu_bfin *fin, const int64_t *rlo, const int64_t *rhi,
                      int64_t *rc, orc_gpu_bwd_state **st, char *msg, size_t nmsg);
/* Start kv-head group (b, hk): its key statistics, the visible rows per column, zeroed
 * column accumulators; sp_o = the oracle's column-sum positions (orc_fm_col_coefs). */
int orc_gpu_bwd_group(orc_gpu_bwd_state *st, int64_t b, int64_t hk, double sp_o, char *msg, size_t nmsg);
/* Head boundary of the group's column sums (end = 0: before head h, 1: after it). */
int orc_gpu_bwd_head(orc_gpu_bwd_state *st, int end, char *msg, size_t nmsg);
/* Rows r0 .. r0+nr-1 of query head h of the current group (phase A and B), then the
 * finishing of the sampled dQ rows x0 .. x1-1 of fin.iq in that range into vectors
 * x - qbase of fin.dq (orc_fm_grad_elem, the flags), and the running maxima of the O / LSE
 * input ratios. */
int orc_gpu_bwd_chunk(orc_gpu_bwd_state *st, int64_t h, int64_t r0, int64_t nr, int64_t x0, int64_t x1,
                      int64_t qbase, char *msg, size_t nmsg);
/* After the group's last chunk: the columns' sums folded, the sampled columns c0 ..
 * c0+ncs-1 of fin.ic (this group's) finished into vectors x - cbase of fin.dk, fin.dv. */
int orc_gpu_bwd_cols(orc_gpu_bwd_state *st, int64_t c0, int64_t ncs, int64_t cbase, char *msg, size_t nmsg);
/* ne elements of a device block (src) to host arrays after the work queued so far
 * (the tier's stream, then a wait). 0 or -1 with msg. */
int orc_gpu_bwd_fetch(orc_gpu_bwd_state *st, const orc_gpu_dblk *src, int64_t ne, double *ref, double *bound,
                      double *oe, uint8_t *flags, char *msg, size_t nmsg);
/* Wait for the device; the maxima of the input ratios; ms_all: device time from begin's
 * uploads to the end, ms_fin: the part in the finishing kernels, ms_part[ORC_GPU_NPART]: the
 * parts in the chunks' kernel groups (event-timed). */
int orc_gpu_bwd_finish(orc_gpu_bwd_state *st, double *o_ratio, double *lse_ratio, double *ms_all, double *ms_fin,
                       double *ms_part, char *msg, size_t nmsg);
void orc_gpu_bwd_end(orc_gpu_bwd_state *st);

/* The vectors to escalate at reference time (orc_bwd.c's rule): vector v of n needs MPFR if
 * all, or if some element of a (dim adim) or b (dim bdim; b NULL: none) without
 * NaN / Inf / uncheckable / masked-row flags has oe > ratio * bound, and its first element
 * of a is not ORC_F_MASKED_ROW. *list: host malloc'd ascending indices (free it), *nl.
 * Synchronous (default stream). 0 or -1 with msg. */
int orc_gpu_esc_scan(const orc_gpu_dblk *a, int64_t adim, const orc_gpu_dblk *b, int64_t bdim, int64_t n,
                     double ratio, int all, int64_t **list, int64_t *nl, char *msg, size_t nmsg);

/* The thread's pool of device / pinned buffers by allocation site (forward 0-31, backward
 * 32-159), its stream and events (0-1 forward, 2-5 backward): kept from call to call so
 * that small calls allocate nothing; orc_gpu_release (orc_gpu.h) frees them. */
int orc_gpu_pool(int site, size_t bytes, int host, void **p, char *msg, size_t nmsg);
int orc_gpu_pool_stream_get(void **stream, char *msg, size_t nmsg);
int orc_gpu_pool_event_get(int k, void **ev, char *msg, size_t nmsg);

/* 1 if p points into CUDA device (or managed) memory, else 0. */
int orc_gpu_is_device(const void *p);

/* Copy bytes from device memory to host / from host to device memory (synchronous).
 * 0 on success, else -1 with msg (msg may be NULL with nmsg 0). */
int orc_gpu_to_host(void *dst, const void *src, size_t bytes, char *msg, size_t nmsg);
int orc_gpu_to_device(void *dst, const void *src, size_t bytes, char *msg, size_t nmsg);

/* ---- the device compare (orc_gpu_cmp.cu, driven by orc_gpu_cmp.c) ---- */

#define ORC_GPU_CMP_TPB 256    /* threads per block (k_cmp_hist needs 256) */
#define ORC_GPU_CMP_BLOCKS 2048 /* fixed grid: partials and sums in a fixed order */

/* A chunk of vectors [.., .. + n) of a result block on the device: elements i < n dim at
 * block element e0 + i. Kernel tensor kv (device): fp16/bf16 [b, s, h, d] by st, or fp32
 * LSE [b, h, s] by st[0..2] (kv_f32). */
typedef struct {
    int64_t n, dim, e0;
    const double *ref, *bound, *oe;
    const uint8_t *flags;
    const orc_index *index;
    const void *kv;
    int kv_f32, bf16;
    int64_t st[4];
    double thr;
    int hshift, sshift;       /* grid cell of vector (h, s): (h >> hshift, s >> sshift) */
} orc_gpu_cmp_desc;

/* One block's statistics of the elements it judged (orc_judge.h classes). */
typedef struct {
    unsigned long long cnt[ORC_JD_FINITE + 1]; /* per class */
    unsigned long long hist[ORC_HIST_BUCKETS];
    unsigned long long failed_finite, exact;
    double max_err, worst_ratio, worst_kv, bias, bias_zero;
    long long worst_e, fail_e, ovf_e;          /* block element index (e0 + i); -1 none */
} orc_gpu_cmp_part;

/* d0[v] = first element of vector v the double reference leaves undecided (dim: none);
 * list[0 .. *nlist) those vectors (unordered); cnt: a device counter. Synchronous. */
int orc_gpu_cmp_chunk(const orc_gpu_cmp_desc *c, int32_t *d0, int64_t *list, unsigned long long *cnt,
                      int64_t *nlist, char *msg, size_t nmsg);
/* kvo[k dim + d] = decoded kernel value of (list[k], d). Asynchronous (default stream). */
int orc_gpu_cmp_gather(const orc_gpu_cmp_desc *c, const int64_t *list, int64_t nl, double *kvo, char *msg,
                       size_t nmsg);
/* Statistics of the elements d < d0[v] into parts[ORC_GPU_CMP_BLOCKS], the grid cells
 * (float bits, atomicMax), the ratios (bound > 0) appended at ratios[*nratio ..].
 * Asynchronous (default stream). */
int orc_gpu_cmp_stats(const orc_gpu_cmp_desc *c, const int32_t *d0, orc_gpu_cmp_part *parts, int *grid,
                      double *ratios, unsigned long long *nratio, char *msg, size_t nmsg);
/* hist_host[x] = number of a[i] whose bits >> (shift + 8) == prefix (all for shift 56)
 * and (bits >> shift) & 255 == x. Synchronous. */
int orc_gpu_cmp_hist(const double *a, int64_t n, int shift, unsigned long long prefix,
                     unsigned long long *hist_dev, unsigned long long *hist_host, char *msg, size_t nmsg);

/* One block's masked-row and magnitude partials (k_cmp_norms): sums of ref^2, kv^2,
 * (bound + orc_err)^2 over the elements the check's magnitude test takes, masked-row
 * elements not exactly their reference (count; smallest block element index bad_e), the
 * smallest masked-row element index masked_e (-1 none). */
typedef struct {
    double ref2, got2, bnd2;
    unsigned long long masked_bad;
    long long bad_e, masked_e;
} orc_gpu_norm_part;
/* parts[ORC_GPU_CMP_BLOCKS] of the chunk c (d0 not used). Asynchronous (default stream). */
int orc_gpu_cmp_norms(const orc_gpu_cmp_desc *c, orc_gpu_norm_part *parts, char *msg, size_t nmsg);

/* Host helpers of both passes (orc_gpu.c). A device result block of nel elements (ref, bound,
 * orc_err: double; flags: uint8): 0, or -1 with nothing left allocated (CUDA error cleared).
 * orc_gpu_dblk_free frees and zeroes it (a zeroed block is freed as a no-op). */
int orc_gpu_dblk_alloc(orc_gpu_dblk *b, int64_t nel);
void orc_gpu_dblk_free(orc_gpu_dblk *b);
/* CLOCK_MONOTONIC in seconds (the passes' timings). */
double orc_gpu_now_s(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_ORC_GPU_DEV_H */
