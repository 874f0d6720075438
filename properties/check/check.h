/* check.h: run one case on any backend and judge the result.
 *
 * Prefixes: fc_run_ (materialize a case, call a backend, get the buffers
 * back), fc_verdict_ (the result: outcome, per-tensor statistics, reasons),
 * fc_check_ (the checks themselves). C linkage.
 *
 * Pipeline: case -> inputs (fc_run_init) -> backend (fc_run_forward /
 * fc_run_backward) -> oracle (fc_check_reference) -> checks (fc_check_*) ->
 * verdict (fc_verdict_print / fc_verdict_json).
 *
 * What fc_check_case verifies (each failure names its check):
 *   "status"       the backend rejected a valid case (INVALID, NOMEM, DEVICE,
 *                  INTERNAL): failure with the backend's message. UNSUPPORTED
 *                  makes the verdict SKIP (never PASS).
 *   "rejected_wrote" a rejected call wrote into an output.
 *   "guard"        a guard element around a buffer, a stride gap or the storage
 *                  offset region changed (all hold NaN poison before the call).
 *   "input_modified" an input buffer (any byte of its allocation) changed.
 *   "bound"        |got - ref| > bound for an element (O, LSE, dQ, dK, dV).
 *   "nan"          non-finite mismatch: NaN/Inf in the output where the oracle
 *                  is finite, or the reverse; or a different infinity.
 *   "unwritten"    an output element still holds the poison NaN payload.
 *   "masked_row"   a row with no visible key is not exactly O = 0, LSE = -inf,
 *                  dQ = 0.
 *   "magnitude"    | ||got||_2 - ||ref||_2 | > ||bound||_2 (triangle inequality;
 *                  implied by the element bound, kept as an independent guard),
 *                  and the suite-level "weak" flag: a tensor whose bound would
 *                  let an all-zero output pass is marked weak (test suites
 *                  assert their cases have no weak tensor).
 *   (skip)         elements the oracle flags UNCHECKABLE (no finite bound) are
 *                  not judged, so a case with any of them is SKIP, never PASS.
 *   "determinism"  a second run (fresh buffers, other poison) differs bitwise
 *                  (forward always; backward when args.deterministic).
 *   "stress"       (only with fc_check_opts.stress = N > 0, after every check above
 *                  passed) the case at a size with many CTAs (fc_stress_case) run N
 *                  times while another thread loads the device (fc_stress_load_*):
 *                  the first run judged against the oracle (on FC_STRESS_ORACLE_ROWS
 *                  sampled rows), every later run bitwise
 *                  equal to the first (forward; backward when args.deterministic) or,
 *                  for a nondeterministic backward, judged against the oracle too.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_CHECK_H
#define FLASHCHECK_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "case/case.h"
#include "kernels/flash_api.h"
#include "oracle/oracle.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Verdict
 * ------------------------------------------------------------------------- */
/* FC_OVERFLOW ("overflow-sensitive"): no check failed, but the backend gave NaN/Inf
 * where the profile's own intermediates may overflow for these inputs (oracle/BOUNDS.md
 * section 11): neither a pass nor a failure of the backend. Precedence when merging:
 * FAIL > OVERFLOW > SKIP > PASS. */
typedef enum { FC_PASS = 0, FC_FAIL = 1, FC_SKIP = 2, FC_OVERFLOW = 3 } fc_outcome;
const char *fc_outcome_name(fc_outcome o);

typedef struct {
    int checked;            /* 1: this tensor was compared with the oracle */
    int64_t elements;       /* logical elements compared */
    int64_t violations;     /* elements with |got - ref| > bound */
    int64_t nonfinite_mismatch;
    int64_t unwritten;      /* elements still holding poison */
    int64_t overflow_sensitive; /* NaN/Inf where the profile may overflow (BOUNDS.md 11) */
    double max_abs_err;     /* over finite pairs */
    double max_ratio;       /* max |got - ref| / bound (bound 0: inf if err > 0) */
    double ref_norm2, got_norm2, bound_norm2;
    int weak;               /* ref != 0 and ||bound||_2 >= ||ref||_2 */
    int64_t worst[4];       /* logical index of max_ratio */
    double worst_got, worst_ref, worst_bound;
    /* Plot data, copied from the oracle's compare (orc_stats in oracle/oracle.h):
     * the error/bound histogram of the finite elements, the exact ones among
     * them, matched non-finite elements (reference NaN/Inf, or an accepted
     * overflow to Inf), uncheckable elements, and the worst ratio per (head
     * block, sequence block) cell (-1 none judged, +inf non-finite mismatch). */
    int64_t ratio_hist[ORC_HIST_BUCKETS];
    int64_t exact, nonfinite_ok, uncheckable;
    int64_t propagated;     /* NaN accepted by the masked non-finite rule (fc_check_fwd_outputs) */
    /* Rounding bias, from orc_stats: sums of (got - ref) / bound and of sign(ref) (got - ref) /
     * bound over the bias_n finite elements with bound > 0 (properties/PROPERTIES.md, "Rounding
     * bias"). Sums, so that cases can be pooled; fc_bias_mean gives the means. */
    double bias_sum, bias_zero_sum;
    int64_t bias_n;
    int grid_rows, grid_cols;
    int64_t grid_hb, grid_sb, grid_heads, grid_seq;
    float grid[ORC_GRID_ROWS][ORC_GRID_COLS];
} fc_tensor_stats;

#define FC_VERDICT_MAX_REASONS 24
/* What a reason concerns and what it is, set by the code that makes the reason (never read back
 * from its text: a backend's message may say anything). */
typedef enum {
    FC_PHASE_NONE = 0,      /* the case as a whole, or a property's relation */
    FC_PHASE_FORWARD,       /* the forward call or its outputs (O, LSE) */
    FC_PHASE_BACKWARD       /* the backward call or its outputs (dQ, dK, dV, dsinks) */
} fc_phase;
const char *fc_phase_name(fc_phase p);   /* "", "forward", "backward" */
typedef enum {
    FC_REASON_FAILURE = 0,  /* a check failed: a finding against the backend (outcome FAIL) */
    FC_REASON_HARNESS,      /* the harness could not run or judge the case (check "harness"; FAIL) */
    FC_REASON_UNSUPPORTED,  /* the backend answered FA_ERR_UNSUPPORTED: it declined the call (SKIP) */
    FC_REASON_UNCHECKABLE,  /* elements without a finite oracle bound, not judged (SKIP) */
    FC_REASON_OVERFLOW,     /* NaN/Inf where the profile's own intermediates may overflow (OVERFLOW) */
    FC_REASON_NOT_JUDGED,   /* any other skip: a precondition not met, nothing to test (SKIP) */
    FC_REASON_DEVICE,       /* the backend's call ended in a device fault (FA_ERR_DEVICE: its own, or a
                               fault seen at the first synchronize after it; FAIL) */
    FC_REASON_NOTE          /* a rule the checks applied (check "note", fc_verdict_note): no outcome
                               change, kept after every other reason */
} fc_reason_kind;
const char *fc_reason_kind_name(fc_reason_kind k);   /* "failure", "harness", "unsupported", ... */
/* 1 for the kinds that make a verdict FAIL: FAILURE, HARNESS, DEVICE. */
static inline int fc_reason_fails(fc_reason_kind k) {
    return k == FC_REASON_FAILURE || k == FC_REASON_HARNESS || k == FC_REASON_DEVICE;
}

typedef struct {
    char check[40];   /* "bound", "guard", ... or "property:<name>"; "skip" and "overflow" for those kinds */
    char text[256];
    fc_phase phase;
    fc_reason_kind kind;
} fc_reason;

typedef struct {
    fc_outcome outcome;
    fc_tensor_stats t[FC_T_COUNT];
    int n_reasons;
    int n_dropped;    /* reasons not stored (list full) */
    fc_reason reason[FC_VERDICT_MAX_REASONS];
} fc_verdict;

void fc_verdict_init(fc_verdict *v);
/* Record a reason of the given phase and kind. check: the failure's check name (kinds FAILURE and
 * HARNESS; NULL: "harness" for HARNESS); the other kinds get check "skip" ("overflow" for
 * OVERFLOW). The outcome follows the kind: FAILURE and HARNESS make it FAIL; OVERFLOW makes it
 * OVERFLOW unless FAIL; the skip kinds make a PASS a SKIP. */
void fc_verdict_add(fc_verdict *v, fc_phase phase, fc_reason_kind kind, const char *check, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* Record that the backend declined a call of this phase (FA_ERR_UNSUPPORTED): kind UNSUPPORTED. */
void fc_verdict_decline(fc_verdict *v, fc_phase phase, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* The shorthands below record phase NONE. */
/* Record a failure (outcome becomes FAIL; a SKIP becomes FAIL too); kind HARNESS when check is
 * "harness", else FAILURE. */
void fc_verdict_fail(fc_verdict *v, const char *check, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Record a skip: a reason with check "skip", kind NOT_JUDGED; outcome SKIP unless already FAIL or
 * OVERFLOW. */
void fc_verdict_skip(fc_verdict *v, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Record an overflow-sensitive result: a reason with check "overflow", kind OVERFLOW; outcome
 * OVERFLOW unless already FAIL. */
void fc_verdict_overflow(fc_verdict *v, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Record a note: a reason with check "note" naming a rule the judgement applied; it changes
 * no outcome and is kept after every other reason (reason[0] is a note only when nothing
 * else was recorded). */
void fc_verdict_note(fc_verdict *v, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Merge src's reasons and stats (tensors src checked) into dst. */
void fc_verdict_merge(fc_verdict *dst, const fc_verdict *src);
/* Name of the check of the first failure reason ("overflow" for an overflow-sensitive
 * verdict), or "" if none. */
const char *fc_verdict_first_check(const fc_verdict *v);
/* Mean of a bias sum over n elements (fc_tensor_stats.bias_*), NAN when n == 0. */
double fc_bias_mean(double sum, int64_t n);
/* 1 if some reason has this check name (prefix match when name ends in '*'). */
int fc_verdict_has(const fc_verdict *v, const char *check);
void fc_verdict_print(const fc_verdict *v, FILE *f);
/* JSON object; returns the full length like snprintf. */
size_t fc_verdict_json(const fc_verdict *v, char *buf, size_t buflen);

/* ---------------------------------------------------------------------------
 * A run: the case's buffers on the host (and mirrors on the device for a
 * CUDA backend), one call of the backend.
 * ------------------------------------------------------------------------- */
#define FC_GUARD_ELEMS 64

typedef struct {
    fc_case c;
    fc_buf buf[FC_T_COUNT];     /* host buffers; allocated ones have alloc != NULL */
    void *snapshot[FC_T_COUNT]; /* input bytes right before the call (for input_modified) */
    int poison;                 /* FC_POISON_A or FC_POISON_B */
    int on_device;              /* the last call ran on a backend working in device memory (CUDA) */
    int have_fwd, have_bwd;     /* outputs of forward / backward are in buf */
    fa_status status;           /* status of the last call */
    int harness_err;            /* that status is the harness's own failure (a CUDA allocation or copy
                                   of its buffers, no backward buffers), not the backend's */
    fa_error err;
    /* contract v3 (host memory; NULL when the case does not use the feature): the varlen and
     * paged host arrays of the call, the sinks [Hq] and the backward's dsinks [Hq] (NaN-poisoned
     * before each backward; mirrored on the device for a CUDA backend) */
    int32_t *cu_q, *cu_k, *seqused, *table;
    int64_t table_stride;
    float *sinks, *dsinks;
} fc_run;

/* The contract-v3 part of a call's arguments from a run (host pointers; sinks / dsinks
 * as given). */
void fc_run_v3_args(const fc_run *r, fa_varlen *vl, fa_paged *pg);
/* The kind of a failed call's status (r->status != FA_OK, not UNSUPPORTED): HARNESS when the
 * harness's own work around the call failed (r->harness_err), DEVICE for the backend's
 * FA_ERR_DEVICE, else FAILURE. */
fc_reason_kind fc_run_status_kind(const fc_run *r);

/* Allocate and fill the inputs (Q, K, V, dO, mask) from the case; outputs O,
 * LSE (and dQ, dK, dV when c->backward) are allocated and poisoned with
 * `poison`. The caller may edit inputs (fc_buf_set) before running.
 * 0 on success, -1 with msg. */
int fc_run_init(fc_run *r, const fc_case *c, int poison, char *msg, size_t msglen);
void fc_run_free(fc_run *r);

/* Run the forward on backend be (host or CUDA memory: buffers are mirrored to
 * the device, the call made, everything copied back, inputs included).
 * Returns the backend's status (err filled); FA_ERR_DEVICE for a CUDA runtime
 * failure of the harness itself (message says so). */
fa_status fc_run_forward(fc_run *r, const fa_backend *be);
/* Run the backward with the run's current O and LSE (normally the forward's). */
fa_status fc_run_backward(fc_run *r, const fa_backend *be);

/* The device gate: a process that shares its device with others (the worker processes of a
 * fuzz campaign, fuzz/fz_devlock.h) serializes its device work through it. When a gate is set,
 * fc_run_forward / fc_run_backward call enter() before their first device operation (the
 * mirrors' copies) and leave() after their last (the copy-back), around the backend call for a
 * host backend too, and the GPU oracle tier calls them around its uploads and passes. enter()
 * blocks until the device is this process's; no device work of this process runs outside an
 * enter/leave pair. NULL (the default): no gate. Process-wide (a forked child inherits it). */
typedef struct {
    void (*enter)(void *user);
    void (*leave)(void *user);
    void *user;
} fc_device_gate;
void fc_run_set_device_gate(const fc_device_gate *g);
void fc_device_enter(void);
void fc_device_leave(void);
/* How this process's CUDA synchronizations (cudaDeviceSynchronize, cudaStreamSynchronize,
 * synchronous copies) wait for the current device: SPIN a core (cudaDeviceScheduleSpin: the
 * lowest latency), YIELD it while spinning (cudaDeviceScheduleYield), or BLOCK on the OS
 * (cudaDeviceScheduleBlockingSync: no core used, a wake-up's latency per wait). Call before
 * the process's first CUDA call. 0 on success (or built without CUDA: nothing to do), -1 when
 * CUDA refused. */
typedef enum { FC_DEVICE_WAIT_SPIN = 1, FC_DEVICE_WAIT_YIELD = 2, FC_DEVICE_WAIT_BLOCK = 3 } fc_device_wait;
int fc_run_device_wait(fc_device_wait w);

/* Whose failure is a CUDA error after a backend call on device buffers (fc_run_forward /
 * fc_run_backward mirror the buffers, call, synchronize, copy back)?
 *   FC_BLAME_KEEP     an error was already reported (by the backend, or by the harness before
 *                     the call): it stays; what fails after it is its consequence
 *   FC_BLAME_BACKEND  the backend returned FA_OK and the first synchronize after it fails: a
 *                     kernel of the backend faulted (a sticky error such as a misaligned or
 *                     illegal address) or the call was not synchronous, as the contract requires:
 *                     a finding against the backend (FA_ERR_DEVICE), never a harness error
 *   FC_BLAME_HARNESS  the synchronize succeeded and the harness's own copy-back failed
 *   FC_BLAME_NONE     nothing failed */
typedef enum { FC_BLAME_NONE, FC_BLAME_KEEP, FC_BLAME_BACKEND, FC_BLAME_HARNESS } fc_blame;
fc_blame fc_device_blame(fa_status before, int sync_failed, int copy_failed);

/* ---------------------------------------------------------------------------
 * Individual checks (each adds reasons to v; returns the number of problems)
 * ------------------------------------------------------------------------- */
/* Guards, stride gaps, offset region of every allocated buffer still hold
 * the run's poison pattern bitwise. */
int64_t fc_check_guards(const fc_run *r, fc_verdict *v);
/* Input buffers (whole allocations) equal their snapshots bitwise. */
int64_t fc_check_inputs_unchanged(const fc_run *r, fc_verdict *v);
/* Output tensor t of a and b are bitwise equal on every logical element. */
int64_t fc_check_same_bits(const fc_run *a, const fc_run *b, int t, const char *check, fc_verdict *v);
/* Logical elements still holding the poison payload of r (unwritten outputs). */
int64_t fc_check_written(const fc_run *r, int t, fc_verdict *v);

/* The oracle (oracle/oracle.h) on r's inputs: exactly the values in r's
 * buffers, so inputs edited after fc_run_init are honoured. The result keeps
 * pointers into r: free it before r. Forward needs nothing from the backend;
 * backward uses r's O and LSE (normally the backend's own forward outputs).
 * The tier is fc_check_oracle()'s (fc_oracle_fwd_tier). 0 on success, -1 with msg. */
int fc_oracle_fwd(const fc_run *r, const fa_precision *prec, orc_fwd_result *res, char *msg, size_t msglen);
int fc_oracle_bwd(const fc_run *r, const fa_precision *prec, orc_bwd_result *res, char *msg, size_t msglen);
/* Which tier of the oracle verifies a run: the CPU tiers (oracle/oracle.h: certified
 * double, MPFR escalation) or the GPU tier (oracle/gpu/orc_gpu.h: the same results,
 * the O(rows * Sk * D) work on the GPU, escalation to the same MPFR tier).
 *   FC_ORACLE_AUTO  the GPU tier for a run whose backend works in device memory (a CUDA
 *                   backend) when a CUDA device is usable here and the call is large
 *                   (work B*Hq*Sq*Sk*max(Dqk, Dv) >= FC_ORACLE_GPU_MIN_WORK), else the CPU tier
 *   FC_ORACLE_CPU   always the CPU tier
 *   FC_ORACLE_GPU   the GPU tier whenever a CUDA device is usable (any backend)
 * A GPU-tier call that fails (no device, device out of memory, a CUDA error) falls back
 * to the CPU tier on the same inputs; fallbacks are counted (fc_oracle_counts), never
 * reported against the backend. fc_check_set_oracle is process-wide (forked campaign
 * workers inherit it), like fc_check_set_profile. */
typedef enum { FC_ORACLE_AUTO = 0, FC_ORACLE_CPU = 1, FC_ORACLE_GPU = 2 } fc_oracle_tier;
/* AUTO's size threshold, 2^24: a GPU-tier call pays a few ms of launches and
 * synchronizations, the CPU tier about 1e-9 s per unit of work on one core (a campaign
 * worker's share). Set between two measured points on an H100 host
 * (oracle/gpu/RESULTS-2026-11-24-bwd.md): at mean work 1.2e6 a 16-worker campaign checked
 * 163 cases/s on the GPU tier against 297 on the CPU tier; at 2.1e9 the GPU tier was 4-6x
 * faster than the 16-thread CPU tier. The crossover itself was not measured. */
#define FC_ORACLE_GPU_MIN_WORK 16777216.0
/* AUTO's threshold in this process (and the processes it forks): w > 0, or w <= 0 for
 * FC_ORACLE_GPU_MIN_WORK. A caller that knows its balance of host and device work (a fuzz
 * campaign: fuzz --oracle-gpu-min-work) sets it; the rule below reads it. */
void fc_check_set_oracle_gpu_min_work(double w);
double fc_check_oracle_gpu_min_work(void);
void fc_check_set_oracle(fc_oracle_tier t);
fc_oracle_tier fc_check_oracle(void);
/* "auto", "cpu", "gpu" -> *t; 0 on success, -1 for another name. */
int fc_oracle_tier_parse(const char *name, fc_oracle_tier *t);
const char *fc_oracle_tier_name(fc_oracle_tier t);
/* The selection rule above (AUTO's threshold: fc_check_oracle_gpu_min_work()): 1 = try the GPU
 * tier; work = B*Hq*Sq*Sk*max(Dqk, Dv). */
int fc_oracle_use_gpu(fc_oracle_tier t, int backend_on_device, int gpu_usable, double work);
/* 1 when the GPU tier models the case's call: dense problems only (no varlen, paged,
 * seqused, softcap or sinks: oracle/gpu refuses those as unsupported). A call it does not
 * model goes to the CPU tier without touching the device: under AUTO that is no fallback,
 * under GPU it is counted as one. */
int fc_oracle_gpu_models(const fc_case *c);
/* Calls verified by each tier in this process, and GPU-tier calls that fell back. */
typedef struct {
    int64_t gpu, cpu, fallback;
} fc_oracle_counts;
void fc_oracle_counts_get(fc_oracle_counts *c);
/* fc_oracle_fwd / fc_oracle_bwd with an explicit tier: the seam for callers that verify a
 * call on the GPU tier (production-size checks). *used_gpu (may be NULL): 1 if the GPU
 * tier produced res. The result is freed with orc_fwd_free / orc_bwd_free either way and
 * keeps pointers into r (the inputs' host buffers), as fc_oracle_fwd's. */
int fc_oracle_fwd_tier(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, orc_fwd_result *res,
                       int *used_gpu, char *msg, size_t msglen);
int fc_oracle_bwd_tier(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, orc_bwd_result *res,
                       int *used_gpu, char *msg, size_t msglen);
/* The same with an explicit row/column sample for the CPU tier (fc_check_sample_plan's
 * max_rows/max_cols: 0 all, > 0 a seeded sample); the GPU tier checks every element. */
int fc_oracle_fwd_plan(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, int64_t rows, orc_fwd_result *res,
                       int *used_gpu, char *msg, size_t msglen);
int fc_oracle_bwd_plan(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, int64_t rows, int64_t cols,
                       orc_bwd_result *res, int *used_gpu, char *msg, size_t msglen);

/* The same on a seeded sample (r's case seed) of at most max_rows rows (forward, dQ) and
 * max_rows columns (dK, dV) of the oracle (orc_options.max_rows/max_cols); elements outside it
 * are not judged. max_rows <= 0: every row, as above. Stress mode judges its large case so. */
int fc_oracle_fwd_sampled(const fc_run *r, const fa_precision *prec, int64_t max_rows, orc_fwd_result *res, char *msg,
                          size_t msglen);
int fc_oracle_bwd_sampled(const fc_run *r, const fa_precision *prec, int64_t max_rows, orc_bwd_result *res, char *msg,
                          size_t msglen);
/* Vector number of (b, h, s) in an oracle block, or -1 when not computed. */
int64_t fc_oracle_find(const orc_block *blk, int64_t b, int64_t h, int64_t s);

/* Judge r's forward (O, LSE) / backward (dQ, dK, dV) outputs against an
 * oracle result: checks bound, nan, masked_row, magnitude (and the weak flag).
 * Fills v->t[...]; returns the number of problems. */
int64_t fc_check_fwd_outputs(const fc_run *r, const orc_fwd_result *res, fc_verdict *v);
int64_t fc_check_bwd_outputs(const fc_run *r, const orc_bwd_result *res, fc_verdict *v);
/* Both apply two declared rules for non-finite values (properties/PROPERTIES.md "Masked
 * non-finite"; oracle/BOUNDS.md 10.6, 10.10), each named by a "note" reason when it accepted
 * something:
 *   masked non-finite: under fa_precision.masked_nonfinite = PROPAGATES, an element of O_i,
 *     LSE_i, dQ_i (row i) or dK_j, dV_j (key j) that a masked pair (i, j) with a non-finite
 *     input reaches (fc_mnf) may be NaN where the oracle has another value; a finite value is
 *     judged against its bound as ever, an Inf is not accepted;
 *   the LSE of a NaN row: where the oracle's LSE is NaN, +inf is accepted when the profile's
 *     lse_empty is FA_LSE_EMPTY_POS_INF (FlashAttention-2 writes one value for both rows).
 * fc_tensor_stats.propagated counts the elements accepted by the first rule. */

/* The reach of masked pairs with a non-finite input (fa_masked_nonfinite), on the logical
 * inputs of a run: pair (i, j) of sequence b is masked when j < Sk_b is hidden from row i < Sq_b
 * (causal, window, a -inf mask entry); Q_i, K_j, V_j (and dO_i for a backward) are its inputs.
 * Keys j >= Sk_b (past seqused_k, another sequence's, unused pool slots) are never pairs.
 * rows [B, Hq, seqlen_q] by (sequence, query head, position); cols [CB, Hkv, CS] by the dK/dV
 * block's vector index: (sequence, kv head, key) or, paged, (page, kv head, slot). */
typedef struct {
    int on;                 /* the profile propagates and some masked pair has a non-finite input */
    int64_t B, H, S;        /* row array dims */
    int64_t CB, CH, CS;     /* column array dims */
    unsigned char *row, *col;
    int64_t pairs;          /* masked pairs with a non-finite input */
} fc_mnf;
/* 0 (m->on tells whether anything may propagate), -1 out of memory (m->on = 0). bwd: dO is an
 * input (judging a backward). */
int fc_mnf_init(fc_mnf *m, const fc_run *r, const fa_precision *prof, int bwd);
void fc_mnf_free(fc_mnf *m);
int fc_mnf_row(const fc_mnf *m, int64_t b, int64_t h, int64_t i);
int fc_mnf_col(const fc_mnf *m, int64_t b, int64_t hkv, int64_t j);

/* ---------------------------------------------------------------------------
 * The device path: production-size calls judged on the GPU in batch chunks
 *
 * For a run whose backend works in device memory (on_device), a dense case (no contract-v3
 * feature) of oracle work >= FC_CHECK_DEVICE_WORK, and a GPU tier that fc_oracle_use_gpu
 * allows, fc_check_case judges O, LSE, dQ, dK, dV on the device (fc_check_fwd_device /
 * fc_check_bwd_device): the run's tensors are uploaded once, the call is cut into chunks of
 * whole batches (views: pointers advanced by b0 * stride[0], batch nb), each chunk verified by
 * the GPU tier with its result blocks left on the device (orc_gpu_fwd_dev / orc_gpu_bwd_dev),
 * judged there (orc_gpu_compare_*_dev: orc_judge.h's rule, MPFR escalation of undecided
 * vectors on the host) and measured there (orc_gpu_block_norms: masked rows, magnitude); only
 * statistics come back. Chunk statistics are merged with their indices moved to the full call
 * (b + b0), so a verdict names elements as a whole-call check does. Device memory holds the
 * uploaded tensors plus one chunk's oracle blocks; a chunk the device cannot hold is halved
 * (down to one batch; then a harness error, never a finding). A call whose single batch is too
 * large for the plan (cuda_big: B = 1, 2.5e9 elements) is judged by the host path instead. Every element is judged: no
 * sample. The guards, unwritten, unchanged-input and determinism checks stay on the host copies.
 * When the forward of such a call already failed, its backward still runs and gets the buffer
 * checks, but its values are not judged (a skip reason says so; the verdict stays FAIL).
 * ------------------------------------------------------------------------- */
/* 2^36: the production shapes (S >= 8k); below it the host path's result blocks are small. */
#define FC_CHECK_DEVICE_WORK ((int64_t)1 << 36)
/* Device bytes an element of a chunk's oracle result costs: ref, bound, orc_err (3 doubles),
 * flags (1), the compare's ratio (8) and index/escalation scratch (rounded up). */
#define FC_CHECK_DEVICE_ELEM_BYTES 40

/* 1 when fc_check_case takes the device path for run r (the rule above); pure but for the
 * device probe (orc_gpu_available). */
int fc_check_device_path(const fc_run *r);

/* The masked-row and magnitude sums of a tensor (what judge adds to orc_stats): as
 * orc_gpu_norms (oracle/gpu/orc_gpu.h). masked_at the logical index of the first bad
 * masked-row element ([b, s, h, d]; LSE [b, h, s, 0]), -1 none; masked_ref NaN none. */
typedef struct {
    double ref2, got2, bnd2;
    int64_t masked_bad;
    int64_t masked_at[4];
    double masked_got, masked_ref;
} fc_block_norms;
void fc_block_norms_init(fc_block_norms *n);
/* The sums of the elements of host block blk against the kernel's host tensor t of r (what the
 * host path's judge computes). */
void fc_block_norms_host(const fc_run *r, int t, const orc_block *blk, fc_block_norms *out);

/* A chunk: batches [b0, b0 + nb). */
typedef struct {
    int64_t b0, nb;
} fc_chunk;
/* Batches per chunk for `batch` batches of bytes_per_batch device bytes each within budget
 * bytes: min(batch, floor(budget / bytes_per_batch)); 0 when one batch does not fit. */
int64_t fc_chunk_per(int64_t batch, double bytes_per_batch, double budget);
/* Views of args restricted to batches [b0, b0 + nb): every tensor's pointer advanced by
 * b0 * stride[0] elements (a broadcast mask, stride 0, stays), p.batch = nb. Dense args only. */
void fc_fwd_args_batch_view(const fa_fwd_args *a, int64_t b0, int64_t nb, fa_fwd_args *out);
void fc_bwd_args_batch_view(const fa_bwd_args *a, int64_t b0, int64_t nb, fa_bwd_args *out);

/* Merge the statistics of a chunk starting at batch b0 into acc (chunks in batch order; acc from
 * fc_stats_chunk_init; first: this is the first chunk, whose worst and grid are taken): counts, histograms and sums add; the worst element is the larger ratio
 * (the earlier chunk on a tie: the smaller element index); first failure / overflow the first
 * chunk's; grid cells the max; every position's batch index moved by b0. median_ratio is not
 * mergeable: NaN in acc (the checks do not read it). */
void fc_stats_chunk_init(orc_stats *acc);
void fc_stats_chunk_merge(orc_stats *acc, const orc_stats *s, int64_t b0, int first);
void fc_norms_chunk_merge(fc_block_norms *acc, const fc_block_norms *s, int64_t b0);

/* One chunk's judgement: fill st[k], nm[k] for the ntensors tensors of the pass (forward: O,
 * LSE; backward: dQ, dK, dV) with positions relative to the chunk. Returns 0, 1 when the chunk
 * does not fit (the driver halves it), -1 on an error (msg). */
typedef int (*fc_chunk_fn)(void *user, const fc_chunk *c, orc_stats *st, fc_block_norms *nm, char *msg, size_t msglen);
/* Run fn over the batches [0, batch) in chunks of at most per batches (halved on a 1 from fn,
 * never below one batch), merging into st[ntensors], nm[ntensors]. *nchunks (may be NULL): the
 * chunks judged. 0 on success, -1 with msg (a chunk of one batch that does not fit, or fn's
 * error). */
int fc_check_chunked(int64_t batch, int64_t per, int ntensors, fc_chunk_fn fn, void *user, orc_stats *st,
                     fc_block_norms *nm, int64_t *nchunks, char *msg, size_t msglen);

/* Judge tensor t of r from its merged statistics and sums (the checks "bound", "nan",
 * "masked_row", "magnitude", the skip and overflow notes, the weak flag): what
 * fc_check_fwd_outputs / fc_check_bwd_outputs do for a host block. Returns the problems. */
int64_t fc_judge_tensor(const fc_run *r, int t, const orc_stats *st, const fc_block_norms *nm, fc_verdict *v);

/* Test seam: chunks of the device path hold at most max_batches batches (0, the default: as the
 * memory plan gives). Process-wide. */
void fc_check_set_device_chunk_cap(int64_t max_batches);

/* The device path's passes (oracle_tier.c): the whole forward (O, LSE) / backward (dQ, dK, dV)
 * of r judged into v. 0; 1 when the path does not apply (the run's tensors cannot be copied to
 * the device, or one batch's oracle blocks need more than half the device memory left after
 * them: the caller judges on the host path, nothing was added to v); or -1 with msg: a harness error (no usable device, a chunk of one
 * batch that still fails, a CUDA error of the harness), never a finding. *nchunks: chunks used. */
int fc_check_fwd_device(const fc_run *r, const fa_precision *prec, fc_verdict *v, int64_t *nchunks, char *msg,
                        size_t msglen);
int fc_check_bwd_device(const fc_run *r, const fa_precision *prec, fc_verdict *v, int64_t *nchunks, char *msg,
                        size_t msglen);

/* ---------------------------------------------------------------------------
 * The whole check of one case
 * ------------------------------------------------------------------------- */
typedef struct {
    int determinism;   /* 1 (default): run a second time and compare bitwise */
    int backward;      /* -1 (default): as the case says; 0/1 force */
    int verbose;       /* print the verdict to stderr on failure */
    int64_t max_rows;  /* oracle rows (O, LSE, dQ): -1 (default) fc_check_sample_plan, 0 all, > 0 a seeded sample */
    int64_t max_cols;  /* oracle columns (dK, dV): the same */
    int stress;        /* 0 (default): off; N >= 1: stress mode, N runs of the many-CTA case ("stress") */
} fc_check_opts;
void fc_check_opts_default(fc_check_opts *o);

/* Oracle sampling of large cases (64-bit cases of more than 2^31 elements included). The CPU
 * oracle costs about B Hq Sq Sk max(Dqk, Dv) operations per pass; past FC_CHECK_FULL_WORK it
 * checks a seeded sample of FC_CHECK_SAMPLE rows (b, hq, i) of O, LSE, dQ and as many columns
 * (b, hkv, j) of dK, dV (uniform over every row: rows past element 2^31 are drawn in proportion),
 * the seed being the case's. Guards, unwritten outputs, unchanged inputs and determinism still
 * cover every element. A GPU tier of the oracle (oracle/gpu/) that can take every element of
 * such a case replaces the sample here (the one place the plan is made). */
#define FC_CHECK_FULL_WORK ((int64_t)1 << 31)
#define FC_CHECK_SAMPLE 256
void fc_check_sample_plan(const fc_case *c, const fc_check_opts *o, int64_t *max_rows, int64_t *max_cols);

/* The precision profile the checks judge a backend by: the one set with
 * fc_check_set_profile (verify/certify/fuzz --profile NAME: a named preset overriding
 * every backend's declared profile in this process and the processes it forks), else
 * be->precision. fc_check_set_profile(NULL) goes back to the declared profiles. */
void fc_check_set_profile(const fa_precision *prof);
const fa_precision *fc_check_profile(const fa_backend *be);

/* ---------------------------------------------------------------------------
 * Stress mode (stress.c): races and schedule-dependent results show only at sizes with many
 * CTAs (work units), under load, over many runs; two runs of a small case rarely differ.
 * ------------------------------------------------------------------------- */
/* Rows (batch * heads_q * seqlen_q) the stress case reaches at least, when the work cap allows:
 * 32768 rows are 256 CTAs of 128 query rows (about 2 per SM on an H100), 512 of 64. */
#define FC_STRESS_ROWS 32768
/* Rows (and dK/dV columns) of the stress case's first run judged against the oracle, a seeded
 * sample (fc_oracle_fwd_sampled); the later runs are compared with the first on every element. */
#define FC_STRESS_ORACLE_ROWS 2048
/* Largest stress case, in batch * heads_q * seqlen_q * seqlen_k * max(Dqk, Dv) (fc_case_work
 * below): bounds the oracle's cost of judging it (one forward and one backward). */
#define FC_STRESS_MAX_WORK ((int64_t)1 << 26)
/* B * Hq * Sq * Sk * max(Dqk, Dv) of c. */
int64_t fc_case_work(const fc_case *c);
/* The stress size of c: c with its batch raised (never lowered) toward FC_STRESS_ROWS rows
 * within FC_STRESS_MAX_WORK; everything else (shape edges, masks, layouts, values, seed) is c's.
 * Returns the new batch (c's own when it cannot grow). */
int64_t fc_stress_case(const fc_case *c, fc_case *out);

/* 1 when a stress re-run of c can show what its own runs cannot: its kernels run a pipeline of
 * more than two blocks of 128 (seqlen_k > 256: the forward's K/V stages, the backward's dQ
 * accumulation over key blocks; with a backward also seqlen_q > 256: the dK/dV loop over query
 * blocks). With one or two blocks there is no stage refilled while another is read; such a
 * case keeps its determinism re-run. certify --stress re-runs only these entries. */
int fc_stress_applies(const fc_case *c);

/* A load beside the runs under test: for a CUDA backend a thread with its own non-blocking
 * stream that holds a quarter of the free device memory (at most 2 GiB: memory pressure) and
 * copies it device to device without pause (bandwidth and SM contention); for a host backend a
 * thread copying between two 64 MiB buffers, 4 MiB a copy (memory bandwidth and a core). Never a finding: when it cannot start, the runs go on without it
 * and fc_stress_load_stop says so (msg). */
typedef struct fc_stress_load fc_stress_load;
fc_stress_load *fc_stress_load_start(const fa_backend *be);
/* Copies made so far (a running load: a test waits for the first). */
int64_t fc_stress_load_copies(const fc_stress_load *l);
/* Stop and free; returns the number of copies the load made, -1 when it ran none (msg says why). */
int64_t fc_stress_load_stop(fc_stress_load *l, char *msg, size_t msglen);

/* The stress check of c (what "stress" above says), reasons into v. Returns the problems found. */
int64_t fc_check_stress(const fa_backend *be, const fc_case *c, int runs, fc_verdict *v);

/* Run c on be and check everything listed at the top. Returns v->outcome. */
fc_outcome fc_check_case(const fa_backend *be, const fc_case *c, const fc_check_opts *o, fc_verdict *v);

/* Where fc_check_case's wall time goes, per phase, summed over the calls made by this thread
 * (CLOCK_MONOTONIC laps, a few per case): the inputs (the first run's buffers), each pass's
 * call (mirror copies included), its buffer checks (guards, inputs unchanged, unwritten
 * outputs), its oracle and its compare; "other": the determinism run, stress, frees. A device
 * path's chunks count as oracle. */
enum {
    FC_PH_INPUTS, FC_PH_FWD_CALL, FC_PH_FWD_CHECKS, FC_PH_FWD_ORACLE, FC_PH_FWD_COMPARE, FC_PH_OTHER,
    FC_PH_BWD_CALL, FC_PH_BWD_CHECKS, FC_PH_BWD_ORACLE, FC_PH_BWD_COMPARE, FC_PH_COUNT
};
void fc_check_phase_seconds(double out[FC_PH_COUNT]);
const char *fc_check_phase_name(int k);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_CHECK_H */
