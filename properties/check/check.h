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
typedef struct {
    char check[40];   /* "bound", "guard", ... or "property:<name>" */
    char text[256];
} fc_reason;

typedef struct {
    fc_outcome outcome;
    fc_tensor_stats t[FC_T_COUNT];
    int n_reasons;
    int n_dropped;    /* reasons not stored (list full) */
    fc_reason reason[FC_VERDICT_MAX_REASONS];
} fc_verdict;

void fc_verdict_init(fc_verdict *v);
/* Record a failure (outcome becomes FAIL; a SKIP becomes FAIL too). */
void fc_verdict_fail(fc_verdict *v, const char *check, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Record a skip: a reason with check "skip"; outcome SKIP unless already FAIL or OVERFLOW. */
void fc_verdict_skip(fc_verdict *v, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Record an overflow-sensitive result: a reason with check "overflow"; outcome
 * OVERFLOW unless already FAIL. */
void fc_verdict_overflow(fc_verdict *v, const char *fmt, ...)
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
    int have_fwd, have_bwd;     /* outputs of forward / backward are in buf */
    fa_status status;           /* status of the last call */
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
 * 0 on success, -1 with msg. */
int fc_oracle_fwd(const fc_run *r, const fa_precision *prec, orc_fwd_result *res, char *msg, size_t msglen);
int fc_oracle_bwd(const fc_run *r, const fa_precision *prec, orc_bwd_result *res, char *msg, size_t msglen);
/* Vector number of (b, h, s) in an oracle block, or -1 when not computed. */
int64_t fc_oracle_find(const orc_block *blk, int64_t b, int64_t h, int64_t s);

/* Judge r's forward (O, LSE) / backward (dQ, dK, dV) outputs against an
 * oracle result: checks bound, nan, masked_row, magnitude (and the weak flag).
 * Fills v->t[...]; returns the number of problems. */
int64_t fc_check_fwd_outputs(const fc_run *r, const orc_fwd_result *res, fc_verdict *v);
int64_t fc_check_bwd_outputs(const fc_run *r, const orc_bwd_result *res, fc_verdict *v);

/* ---------------------------------------------------------------------------
 * The whole check of one case
 * ------------------------------------------------------------------------- */
typedef struct {
    int determinism;   /* 1 (default): run a second time and compare bitwise */
    int backward;      /* -1 (default): as the case says; 0/1 force */
    int verbose;       /* print the verdict to stderr on failure */
} fc_check_opts;
void fc_check_opts_default(fc_check_opts *o);

/* The precision profile the checks judge a backend by: the one set with
 * fc_check_set_profile (verify/certify/fuzz --profile NAME: a named preset overriding
 * every backend's declared profile in this process and the processes it forks), else
 * be->precision. fc_check_set_profile(NULL) goes back to the declared profiles. */
void fc_check_set_profile(const fa_precision *prof);
const fa_precision *fc_check_profile(const fa_backend *be);

/* Run c on be and check everything listed at the top. Returns v->outcome. */
fc_outcome fc_check_case(const fa_backend *be, const fc_case *c, const fc_check_opts *o, fc_verdict *v);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_CHECK_H */
