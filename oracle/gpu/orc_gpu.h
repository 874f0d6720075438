/* orc_gpu.h: the GPU tier of the certified double oracle (oracle/gpu).
 *
 * Prefix orc_gpu_. C linkage. Same results as orc_fwd (oracle.h) -- the same
 * reference, orc_err and kernel bound per element, from the same formulas
 * (oracle/orc_formulas.h; BOUNDS.md "GPU tier") -- for inputs in CUDA device memory:
 * the O(rows * Sk * D) work runs on the GPU in float64, the per-element
 * assembly on the host with the CPU tier's own code, and elements the double
 * evaluation cannot decide are escalated to the CPU MPFR tier exactly as
 * orc_fwd does (reference time; orc_compare_fwd escalates at compare time).
 *
 * args: DEVICE pointers (q, k, v, mask) in the fa_fwd_args layout, any
 * strides, GQA, every mask; o and lse are ignored. The result's args point to
 * HOST copies of the inputs, owned by the result (orc_compare_fwd recomputes
 * escalated elements from them): free it with orc_gpu_fwd_free, not orc_fwd_free.
 * The result has no naive baseline (o.baseline == NULL). Compare a backend's
 * outputs with orc_compare_fwd (host copies of them). Runs on the current CUDA
 * device, default stream, synchronously.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_ORC_GPU_H
#define FLASHCHECK_ORC_GPU_H

#include "oracle/oracle.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Validates like orc_fwd (FA_ERR_INVALID with err filled), FA_ERR_NOMEM, or
 * FA_ERR_DEVICE with the CUDA error in err. On error *res is zeroed. */
fa_status orc_gpu_fwd(const fa_fwd_args *args, const fa_precision *prof, const orc_options *opt,
                      orc_fwd_result *res, fa_error *err);

/* Frees the result and the host copies of its inputs. */
void orc_gpu_fwd_free(orc_fwd_result *res);

/* The backward: what orc_bwd computes (dQ, dK, dV: reference, orc_err, kernel bound
 * per element; o_input_ratio, lse_input_ratio; MPFR escalation at reference time)
 * for inputs in CUDA device memory: args' q, k, v, o, dout, lse, mask are DEVICE
 * pointers (dq, dk, dv ignored); any strides, GQA, every mask. The O(rows * Sk * D)
 * work (the forward row recomputed, dP, dS and its bounds per (i, j), the dQ row
 * sums, the dK / dV column sums) runs on the GPU in float64 with orc_bwd's
 * formulas (orc_formulas.h; BOUNDS.md "GPU tier"). The result's args point to
 * host copies owned by it: free with orc_gpu_bwd_free. No naive baseline. Judge
 * a backend's gradients with orc_compare_bwd (host copies of them). */
fa_status orc_gpu_bwd(const fa_bwd_args *args, const fa_precision *prof, const orc_options *opt,
                      orc_bwd_result *res, fa_error *err);

/* Frees the result and the host copies of its inputs. */
void orc_gpu_bwd_free(orc_bwd_result *res);

/* The backward's device reference by kernel (orc_gpu_times.dev_part, event-timed per chunk):
 * the forward row (S, A dots; row weights; O's sums), the dP, B dots, k_brow, dQ's sums
 * (two wsum, k_dqcommon), dK's column sums (with the column statistics), dV's column sums. */
enum { ORC_GPU_P_FWDROW, ORC_GPU_P_DP, ORC_GPU_P_BROW, ORC_GPU_P_DQ, ORC_GPU_P_DK, ORC_GPU_P_DV, ORC_GPU_NPART };

/* Where a GPU-tier call's time went, seconds. dev_*: device time between CUDA events on
 * the tier's stream; the others host wall time. The input copies are made while the device
 * works (they overlap dev_*: a second host thread makes them while the first drives the
 * device; the forward's MPFR escalation waits for them). */
typedef struct {
    double inputs;       /* the host copies of the inputs (download; MPFR escalation reads them) */
    double inputs_wait;  /* host time the call waited for the copies after its device work and
                            (forward) its rows' filling: the copies' share of the critical path */
    double dev_ref;      /* device: the reference kernels (forward row, dP, dS, dQ / dK / dV sums) */
    double dev_finish;   /* device: the per-element finishing (value, orc_err, bound, flags) */
    double escalate;     /* reference-time MPFR escalation (device scan, the vectors' round trip) */
    double wait;         /* forward: host time waiting for the device's chunks */
    double host_finish;  /* forward: the rows finished on the host (orc_fwd_row_out, MPFR escalation
                            included), overlapping the device's next chunk */
    double total;        /* the whole call */
    double dev_part[ORC_GPU_NPART]; /* backward: the part of dev_ref in each kernel group (ORC_GPU_P_*) */
} orc_gpu_times;

/* The split of this thread's last orc_gpu_fwd call (host wall times: inputs, wait, host_finish,
 * total; zero before any). */
void orc_gpu_fwd_times(orc_gpu_times *t);

/* The forward with its result blocks left in DEVICE memory: r is what orc_gpu_fwd gives
 * (args: host copies of the inputs; prof, opt, scale, escalations; o, lse with n, dim and
 * index on the host) except that each block's ref, bound, orc_err and flags point to device
 * memory (never read them on the host; baseline NULL). Every element is finished on the
 * device by orc_fwd_row_out's per-element functions (orc_formulas.h: orc_fm_fwd_out_elem,
 * orc_fm_fwd_lse); the rows that need MPFR are found there by the same rule and escalated
 * on the host (their elements' round trip). Judge with orc_gpu_compare_fwd_dev; free with
 * orc_gpu_fwd_dev_free. 25 bytes of device memory per element on top of the scratch. */
typedef struct {
    orc_fwd_result r;
    orc_gpu_times t;
} orc_gpu_fwd_dres;

fa_status orc_gpu_fwd_dev(const fa_fwd_args *args, const fa_precision *prof, const orc_options *opt,
                          orc_gpu_fwd_dres *res, fa_error *err);
void orc_gpu_fwd_dev_free(orc_gpu_fwd_dres *res);
/* orc_gpu_compare_fwd for a result whose blocks are in device memory (same fields). */
fa_status orc_gpu_compare_fwd_dev(const orc_gpu_fwd_dres *res, const fa_tensor *o, const fa_lse *lse,
                                  orc_stats *o_stats, orc_stats *lse_stats, fa_error *err);

/* The backward with its result blocks left in DEVICE memory: r is what orc_gpu_bwd gives
 * (args: host copies of the inputs; prof, opt, scale, ratios, escalations; dq, dk, dv with
 * n, dim and index on the host) except that each block's ref, bound, orc_err and flags
 * point to device memory (never read them on the host; baseline NULL). Every element is
 * finished on the device by the same formulas (orc_formulas.h's orc_fm_grad_elem, the
 * flags and overflow tests of orc_bwd.c), escalation as orc_gpu_bwd (the vectors to
 * recompute found on the device by the same rule). Judge with orc_gpu_compare_bwd_dev;
 * free with orc_gpu_bwd_dev_free. Needs 25 bytes of device memory per element on top of the
 * scratch. */
typedef struct {
    orc_bwd_result r;
    orc_gpu_times t;
} orc_gpu_bwd_dres;

fa_status orc_gpu_bwd_dev(const fa_bwd_args *args, const fa_precision *prof, const orc_options *opt,
                          orc_gpu_bwd_dres *res, fa_error *err);
void orc_gpu_bwd_dev_free(orc_gpu_bwd_dres *res);

/* orc_gpu_compare_bwd for a result whose blocks are in device memory: nothing of the blocks
 * is uploaded or downloaded but the undecided vectors (judged on the host by
 * orc_compare_esc) and the worst elements' reference and bound. Same fields. */
fa_status orc_gpu_compare_bwd_dev(const orc_gpu_bwd_dres *res, const fa_tensor *dq, const fa_tensor *dk,
                                  const fa_tensor *dv, orc_stats *dq_stats, orc_stats *dk_stats,
                                  orc_stats *dv_stats, fa_error *err);

/* Frees the result's host copies of its inputs and points its args at host (same values:
 * the caller's host inputs that were uploaded); the result is then an ordinary one,
 * freed with orc_fwd_free / orc_bwd_free, whose compare escalates from those inputs. */
void orc_gpu_fwd_rehost(orc_fwd_result *res, const fa_fwd_args *host);
void orc_gpu_bwd_rehost(orc_bwd_result *res, const fa_bwd_args *host);

/* The comparison on the device: what orc_compare_fwd / orc_compare_bwd give (counts,
 * verdicts, worst element, first failure, histogram, grid, median; bias_sum and
 * bias_zero_sum up to the rounding of a sum in another order) for kernel outputs in CUDA
 * DEVICE memory, every element judged on the GPU by the host compare's rule (orc_judge.h);
 * the vectors the double reference leaves undecided are recomputed in MPFR on the host as
 * orc_compare_* does. Any result of a dense problem without a naive baseline (the GPU
 * tier's; a CPU tier result with opt.baseline = 0); a packed / paged problem or a baseline
 * is FA_ERR_INVALID naming it. FA_ERR_NOMEM / FA_ERR_DEVICE when the device cannot hold
 * a chunk or the ratios (8 bytes per element): the caller may judge on the host. */
fa_status orc_gpu_compare_fwd(const orc_fwd_result *res, const fa_tensor *o, const fa_lse *lse,
                              orc_stats *o_stats, orc_stats *lse_stats, fa_error *err);
fa_status orc_gpu_compare_bwd(const orc_bwd_result *res, const fa_tensor *dq, const fa_tensor *dk,
                              const fa_tensor *dv, orc_stats *dq_stats, orc_stats *dk_stats,
                              orc_stats *dv_stats, fa_error *err);

/* What the checks take from a block beyond orc_stats (properties/check/check.c, judge): the
 * exact masked-row rule and the magnitude sums, for a result block whose ref, bound, orc_err
 * and flags are in DEVICE memory (index on the host; an orc_gpu_*_dres block) and the kernel's
 * tensor kv in device memory (fp16/bf16 [b, s, h, d] by st, or fp32 LSE [b, h, s] by st[0..2]
 * with kv_f32). Elements with ORC_F_MASKED_ROW: masked_bad counts those whose kernel value is
 * not exactly ref (the first in element order at masked_at, (b, s, h, d) as orc_stats,
 * its value masked_got); masked_ref is the reference of the first masked-row element (NaN:
 * none). The other elements without NaN / Inf / uncheckable flags and with a finite kernel
 * value: ref2, got2, bnd2 are the sums of ref^2, kv^2 and (bound + orc_err)^2, RN double in a
 * fixed order (the host's own sums up to that order). Synchronous. */
typedef struct {
    double ref2, got2, bnd2;
    int64_t masked_bad;
    int64_t masked_at[4];
    double masked_got, masked_ref;
} orc_gpu_norms;
fa_status orc_gpu_block_norms(const orc_block *blk, const void *kv, const int64_t *st, int kv_f32, int bf16,
                              orc_gpu_norms *out, fa_error *err);

/* The tier keeps its device and pinned buffers per host thread from call to call (small
 * calls allocate nothing); this frees the calling thread's. */
void orc_gpu_release(void);

/* 1 if this process can run the GPU tier: a CUDA device is visible (and usable). */
int orc_gpu_available(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_ORC_GPU_H */
