/* sweep.h: the fixed certification sweeps, one library for every driver.
 *
 * Prefix fc_sweep_. C linkage.
 *
 * A sweep is a list of entries; an entry is a case (case/case.h) plus how to
 * judge it: the whole check of properties/check/check.h (fc_check_case) or one
 * property of properties/properties.h, with or without the determinism re-run,
 * and what outcome it must have. Drivers:
 *   `flashcheck certify` (cli/cmd_certify.c: every set its backend can take,
 *       each entry in a worker process with a watchdog),
 *   `flashcheck cases` (cli/cmd_cases.c: the base set written as case files),
 *   the GPU cc_tests kernels/cuda/tests/{fwd,bwd}_certify_test.c (thin drivers:
 *       the cuda and production sets on the CUDA backend, with a kernel policy).
 *
 * Sets (fc_sweep_opts.sets):
 *   BASE        every backend: shapes at tile edges, causal alignments, windows,
 *               additive masks, GQA, layouts, value distributions, empty problems,
 *               the contract-v3 features the backend's limits claim (packed
 *               variable-length batches, paged K/V, softcap, sinks; fc_sweep_v3_claimed),
 *               and the property suite on two cases each (packing and paging on v3 cases).
 *   CUDA        device backends: the grid the CUDA cc_tests ran before this
 *               library (sections A..H of their old header): every sequence length
 *               of {1 3 17 63 64 65 97 113 127 128 239 513 799 1023 1025 2048 4224}
 *               with Sq == Sk and Sq != Sk both ways, every head dim 8..256 step 8
 *               in both dtypes, 13 mask kinds on Sq <, >, ~= Sk, decode windows and
 *               windows past the ends, BHSD / padded / fused-QKV layouts with dO and
 *               dQ in their own layouts, negative and large scales, empty problems,
 *               76800 (batch, head) pairs, the leak property (NaN/Inf in K and V at
 *               keys hidden from a row, inside tiles other rows see) on the poison
 *               geometries, the nonfinite property (one NaN/Inf in K, V, Q or dO at a
 *               time, the rows that see it and the rows that cannot all judged by the
 *               oracle; rows with no visible key) on those and the backward's four
 *               geometries, a batch-heavy deterministic backward under the
 *               determinism property (6 entries: 30 runs), the GPU fuzz findings replayed from their
 *               case text, declined layouts (misaligned pointer, strides that are
 *               not a multiple of 8 elements, head dim past the limit) and, with
 *               big, a Q/O tensor of more than 2^31 elements.
 *   PRODUCTION  device backends: S >= 8k shapes with GQA and causal masks, and
 *               (with big) one call of more than 2^31 elements in Q, O, dO, dQ
 *               (B320 S2048 H32/4 D128: the batches from 256 on start past element
 *               2^31; shorter sequences keep its quadratic oracle work affordable).
 * On a CUDA backend with a usable GPU every production entry is judged on every
 * element by the device path (check.h: GPU tier, compare on the device, batch
 * chunks); elsewhere the oracle checks a seeded row/column sample of cases past
 * the oracle work limit (fc_check_sample_plan in check.h). The unwritten-output
 * scan, guards and input checks always cover every element.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_SWEEP_H
#define FLASHCHECK_SWEEP_H

#include <stdint.h>
#include <stdio.h>

#include "case/case.h"
#include "fuzz/fz_misuse.h"
#include "kernels/flash_api.h"
#include "properties/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Categories, in report order. */
typedef enum {
    FC_SWEEP_SHAPES = 0,
    FC_SWEEP_CAUSAL,
    FC_SWEEP_WINDOW,
    FC_SWEEP_MASK,
    FC_SWEEP_GQA,
    FC_SWEEP_LAYOUT,
    FC_SWEEP_VALUES,
    FC_SWEEP_EMPTY,
    FC_SWEEP_VARLEN,             /* contract v3 (BASE, only the features the backend's limits claim) */
    FC_SWEEP_PAGED,
    FC_SWEEP_SOFTCAP,
    FC_SWEEP_SINKS,
    FC_SWEEP_PROPERTIES,
    FC_SWEEP_CUDA_GRID,
    FC_SWEEP_CUDA_LEAK,
    FC_SWEEP_CUDA_DETERMINISM,
    FC_SWEEP_CUDA_DECLINED,
    FC_SWEEP_CUDA_FINDINGS,
    FC_SWEEP_CUDA_BIG,
    FC_SWEEP_PRODUCTION,
    FC_SWEEP_CAT_COUNT
} fc_sweep_cat;

const char *fc_sweep_cat_name(int cat);  /* "shapes", ..., "production" */
const char *fc_sweep_cat_what(int cat);  /* one line: what the category covers */
int fc_sweep_cat_by_name(const char *name); /* -1 if unknown */
/* The set a category belongs to (FC_SWEEP_SET_*). */
int fc_sweep_cat_set(int cat);

#define FC_SWEEP_SET_BASE 1
#define FC_SWEEP_SET_CUDA 2
#define FC_SWEEP_SET_PRODUCTION 4

/* What an entry must give (fc_sweep_met). The verdict's reasons are read by their kind and phase
 * (fc_reason in check.h: UNSUPPORTED is the backend's FA_ERR_UNSUPPORTED, recorded where the status
 * was judged), never by their text. */
typedef enum {
    FC_SWEEP_EXPECT_PASS = 0,    /* PASS; a SKIP (unsupported, uncheckable) is not a pass */
    FC_SWEEP_EXPECT_DECLINE,     /* a layout the backend may decline: PASS, or SKIP because the
                                    backend said UNSUPPORTED (fc_check_case then also checks that
                                    nothing was written: "rejected_wrote") */
    FC_SWEEP_EXPECT_JUDGED,      /* PASS, or SKIP / OVERFLOW only for elements without a finite
                                    bound (the oracle's UNCHECKABLE, or NaN/Inf where the profile's
                                    own intermediates may overflow: oracle/BOUNDS.md section 11)
                                    while the tensor the entry is about (dQ; O when forward only)
                                    had judged elements and none failed (the fuzz findings) */
    FC_SWEEP_EXPECT_JUDGED_ALL,  /* JUDGED, and dK and dV had judged elements too (a finding whose
                                    dK/dV the old cc_test required judged: a63605906157a3f1) */
    FC_SWEEP_EXPECT_FWD_BWD_MAY_DECLINE /* a paged case with a backward, under the full check or the
                                    paging property (fa_limits.supports_paged claims the forward; the
                                    backward may answer UNSUPPORTED): PASS, or SKIP whose only reasons
                                    are the backward's UNSUPPORTED after a forward that was judged (O
                                    had judged elements) and passed */
} fc_sweep_expect;

typedef struct {
    fc_case c;
    int category;                /* fc_sweep_cat */
    int prop;                    /* -1: fc_check_case; else an index into fc_prop_table */
    int determinism;             /* fc_check_case: the second run compared bitwise */
    int expect;                  /* fc_sweep_expect */
    char label[120];             /* e.g. "grid A#12 B2 Sq97 Sk513 H4/2 D128 bf16 c1 w-1,-1 mask=none bhsd" */
} fc_sweep_entry;

typedef struct {
    int sets;                    /* FC_SWEEP_SET_* bits */
    int quick;                   /* about a quarter of the cases */
    int big;                     /* CUDA and PRODUCTION: include the > 2^31-element calls */
    int sanitize;                /* CUDA: the compute-sanitizer subset (short sequences, every third
                                    grid case, a few leak cases; no big case, no determinism property) */
    int has_bwd;                 /* cases with backward on (else forward only) */
    const fa_limits *lim;        /* BASE cases are fitted into these limits (NULL: the contract's);
                                    CUDA and PRODUCTION cases are built for the CUDA backend's */
} fc_sweep_opts;

void fc_sweep_opts_default(fc_sweep_opts *o); /* BASE only, not quick, big on, backward on, no limits */

/* 1 when lim (NULL: none claimed) claims every contract-v3 feature c uses: a case it does not
 * claim is not in the sweep (fitting would strip the feature and certify something else). */
int fc_sweep_v3_claimed(const fa_limits *lim, const fc_case *c);

/* Build the sweep: a malloc'd array in *out (free it), the count returned; -1 out of memory.
 * Deterministic: the same options give the same entries (seeds included). */
int64_t fc_sweep_build(const fc_sweep_opts *o, fc_sweep_entry **out);

/* Judge one entry on be: fc_check_case (with the entry's determinism) or its property.
 * Returns v->outcome. */
fc_outcome fc_sweep_check(const fa_backend *be, const fc_sweep_entry *e, fc_verdict *v);

/* 1 when verdict v is what entry e expects (fc_sweep_expect), else 0 with a sentence in why. */
int fc_sweep_met(const fc_sweep_entry *e, const fc_verdict *v, char *why, size_t whylen);

/* What an entry that did not meet its expectation (fc_sweep_met returned 0) means:
 *   FC_SWEEP_MISS_FAIL    a failure against the backend: FAIL, an UNSUPPORTED where the entry
 *                         allows no decline, a write on a rejected call;
 *   FC_SWEEP_MISS_SKIP    a BASE entry the backend declined or that has elements without a finite
 *                         bound (these cases are built for any backend): skipped, as certify skips it;
 *   FC_SWEEP_MISS_DEFECT  a CUDA or PRODUCTION entry the harness could not judge (SKIP for a reason
 *                         other than the backend's UNSUPPORTED, or overflow-sensitive): those sets are
 *                         built for the CUDA backend's claims and every entry must be judgeable by
 *                         construction (sweep_judgeable_test), so this is a defect of the sweep's
 *                         entry, reported with its reason: never a finding against the backend, never
 *                         a pass. */
enum { FC_SWEEP_MISS_FAIL = 1, FC_SWEEP_MISS_SKIP, FC_SWEEP_MISS_DEFECT };
int fc_sweep_miss(const fc_sweep_entry *e, const fc_verdict *v);

/* Run entries in process, one after another (a driver without worker processes: the GPU
 * cc_tests): entries whose category is not `only` (>= 0) are left out. Prints one line per entry
 * to log ("ok   LABEL: ...", "FAIL LABEL: why", "skip LABEL: why" for a BASE entry the backend
 * declined or that could not be judged: skipped, as in `flashcheck certify`, or "DEFECT LABEL:
 * why" for a harness defect, fc_sweep_miss) and a table per category with its wall time; fills
 * tally (per category, may be NULL). Returns the number of entries that did not meet their
 * expectation (fc_sweep_met), skipped BASE entries excluded: failures and harness defects (the
 * tally tells them apart; either leaves the sweep uncertified). */
typedef struct {
    int64_t ran, failed, skipped, defects;
    double seconds;
} fc_sweep_tally;
int64_t fc_sweep_run(const fa_backend *be, const fc_sweep_entry *e, int64_t n, int only, FILE *log,
                     fc_sweep_tally tally[FC_SWEEP_CAT_COUNT]);

/* The API-misuse suite (fuzz/fz_misuse.h): every corruption kind at 10 parameters, forward and
 * backward, on one small case; then, on a backend that declares device memory (FA_MEM_CUDA), one
 * valid forward call with every tensor in host memory, which must be rejected without a write
 * (kind_name "host_ptr"). cb gets each call that applied. Returns the number of calls made. */
typedef void (*fc_sweep_misuse_cb)(void *user, const fz_misuse_result *res);
int64_t fc_sweep_misuse(const fa_backend *be, fc_sweep_misuse_cb cb, void *user);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_SWEEP_H */
