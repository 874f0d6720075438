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

#ifdef __cplusplus
extern "C" {
#endif

#define ORC_GPU_RT 64 /* rows per tile (tile spans, score and P.V tiles) */

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

/* 1 if p points into CUDA device (or managed) memory, else 0. */
int orc_gpu_is_device(const void *p);

/* Copy bytes from device memory to host. 0 on success, else -1 with msg. */
int orc_gpu_to_host(void *dst, const void *src, size_t bytes, char *msg, size_t nmsg);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_ORC_GPU_DEV_H */
