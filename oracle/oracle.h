/* oracle.h: the flashcheck reference. High-precision attention forward and
 * backward with a per-element error bound for a backend's precision profile.
 *
 * Prefix orc_. C linkage. Shares no code with any kernel: visibility, fp16/bf16
 * decoding and validation are written here from the semantics documented in
 * kernels/flash_api.h (only its types are used).
 *
 * Two tiers:
 *   ORC_TIER_CERTIFIED  double precision with exact products and blocked
 *                       compensated summation; every element carries a rigorous
 *                       bound on the oracle's own error (orc_err). An element whose
 *                       verdict that error cannot decide is recomputed in MPFR
 *                       ("escalated"), at reference time (orc_err > escalate_ratio
 *                       * bound) and again at compare time (|kernel - ref| within
 *                       orc_err of the bound).
 *   ORC_TIER_MPFR       every computed element comes from MPFR at mpfr_prec bits.
 *
 * Per-element tolerance (oracle/BOUNDS.md derives it): bound[e] is the largest
 * |kernel - exact| a backend honouring its fa_precision profile can produce at
 * element e. A kernel element passes when |kernel - ref| <= bound - orc_err
 * (certainly inside), fails when |kernel - ref| > bound + orc_err (certainly
 * outside), and is escalated to MPFR when neither holds.
 *
 * Inputs are HOST pointers in the fa_fwd_args / fa_bwd_args layout. The
 * outputs fields of the args (o, lse in forward; dq, dk, dv in backward) are
 * ignored by orc_fwd / orc_bwd: the kernel's outputs are given to orc_compare_*.
 * A result keeps a copy of the args (pointers, not data): the caller keeps the
 * input tensors alive and unchanged until the result is freed, because compare
 * may escalate elements and recompute them from the inputs.
 *
 * Non-finite inputs: invisible positions are never read (never multiplied by
 * zero), so a NaN there cannot reach an output. NaN/Inf in visible inputs
 * follow IEEE evaluation of the documented formulas; such reference elements
 * are flagged ORC_F_NAN / ORC_F_INF and the kernel must match them.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_ORACLE_H
#define FLASHCHECK_ORACLE_H

#include <stdint.h>
#include "kernels/flash_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------- */
typedef enum {
    ORC_TIER_CERTIFIED = 0, /* double + certified error, MPFR escalation */
    ORC_TIER_MPFR = 1       /* MPFR for every element */
} orc_tier;

typedef struct {
    int mpfr_prec;          /* MPFR precision in bits; >= 113 (default 128) */
    orc_tier tier;          /* default ORC_TIER_CERTIFIED */
    int threads;            /* OpenMP threads; 0 = OpenMP default */
    int64_t max_rows;       /* forward and dQ: at most this many (b, h, i) rows; 0 = all */
    int64_t max_cols;       /* dK, dV: at most this many (b, hkv, j) columns; 0 = all */
    uint64_t seed;          /* sampling seed (same seed, same sample) */
    int baseline;           /* 1 (default): also compute the naive same-dtype reference */
    double escalate_ratio;  /* escalate at reference time when orc_err > ratio * bound;
                               default 2^-10 (verdicts are certain for any ratio: compare
                               escalates what orc_err leaves undecided; the ratio only
                               limits how far err/bound statistics may be off);
                               0 escalates every element (testing) */
    int lse_unknown;        /* orc_bwd only. 0 (default): the lse of fa_bwd_args is the LSE the
                               backend's backward used. 1: it is not known (the caller had no
                               LSE from the backend, e.g. PyTorch SDPA returns none, and filled
                               the buffer with anything, the oracle's own LSE say): the backward
                               is judged against ANY LSE a correct forward may give, i.e. one
                               within the forward LSE bound of the row (BOUNDS.md 5.0); the
                               given values are not read and lse_input_ratio is 0 */
} orc_options;

/* Fill *opt with the defaults above. */
void orc_options_init(orc_options *opt);

/* ---------------------------------------------------------------------------
 * Results
 * ------------------------------------------------------------------------- */
/* Defined: the CPU tiers implement contract v3 (the check path hands them v3 cases). */
#define ORC_CONTRACT_V3 1

/* Contract v3 (ABI 4) in the CPU tiers (orc_fwd, orc_bwd, orc_compare_*; BOUNDS.md 13-14):
 * packed varlen batches (cu_seqlens_q/k, seqused_k) and paged K/V are evaluated sequence
 * by sequence (result index b = sequence, s = position inside it; a paged problem's dK/dV
 * vectors are pool positions (b = page, h = kv head, s = slot), each the sum over every
 * (sequence, key) the block table maps there); softcap and sinks in the score stage; the
 * sink gradient in orc_bwd_result.dsinks. The GPU tier (oracle/gpu) refuses every v3
 * feature (FA_ERR_UNSUPPORTED). */

/* Per-element flags. */
enum {
    ORC_F_MASKED_ROW = 1,  /* no visible key (row) / no visible query (column):
                              expected exactly 0 (LSE: -inf) */
    ORC_F_NAN = 2,         /* reference is NaN: the kernel must give NaN */
    ORC_F_INF = 4,         /* reference is +-Inf: the kernel must give the same Inf */
    ORC_F_ESCALATED = 8,   /* value recomputed in MPFR */
    ORC_F_UNCHECKABLE = 16,/* no finite bound exists (fp32 overflow of a score, or
                              inconsistent backward inputs); counted, not judged */
    ORC_F_OVERFLOW = 32,   /* an intermediate of the profile that feeds this element may
                              overflow its format for these inputs (BOUNDS.md section 11):
                              a kernel NaN/Inf here is counted in overflow_sensitive, not
                              failed; a finite kernel value is judged as usual */
    ORC_F_INF_INPUT = 64   /* with ORC_F_INF: the exact value is that Inf because an infinite
                              input enters with a positive weight (BOUNDS.md 11.1); the element
                              has no finite bound, but the kernel must give the same Inf or NaN
                              (a weight it rounded to 0 times Inf); a finite value fails */
};

/* One (batch, head, seq) vector: a row of O/dQ (head = query head) or a
 * column of dK/dV (head = kv head, seq = key index). */
typedef struct {
    int64_t b, h, s;
} orc_index;

/* A set of n vectors of dim elements each; element k of vector v is at v*dim + k. */
typedef struct {
    int64_t n, dim;
    orc_index *index;      /* [n], sorted by (b, h, s) */
    double *ref;           /* [n*dim] reference value (NaN/Inf as flagged) */
    double *bound;         /* [n*dim] max allowed |kernel - exact| for the profile */
    double *orc_err;       /* [n*dim] rigorous bound on |ref - exact| */
    double *baseline;      /* [n*dim] naive same-dtype value, or NULL (baseline off) */
    uint8_t *flags;        /* [n*dim] ORC_F_* */
} orc_block;

typedef struct {
    fa_fwd_args args;      /* copy: input pointers must stay valid until free */
    fa_precision prof;
    orc_options opt;
    double scale;          /* effective softmax scale (exact value used) */
    orc_block o;           /* dim = head_dim_v */
    orc_block lse;         /* dim = 1, same index as o; no baseline (FA suites have none) */
    int64_t elements;      /* elements computed (o and lse) */
    int64_t escalations;   /* elements recomputed in MPFR at reference time */
} orc_fwd_result;

typedef struct {
    fa_bwd_args args;      /* copy: input pointers must stay valid until free */
    fa_precision prof;
    orc_options opt;
    double scale;
    orc_block dq;          /* rows (b, hq, i), dim = head_dim_qk */
    orc_block dk;          /* columns (b, hkv, j), dim = head_dim_qk */
    orc_block dv;          /* columns (b, hkv, j), dim = head_dim_v */
    /* Consistency of the given forward outputs with the exact forward, as the
     * largest |given - exact| / forward-bound over computed rows (> 1: the O or
     * LSE handed to backward is not what a correct forward produces). With
     * opt.lse_unknown the given LSE is not read and lse_input_ratio is 0. */
    double o_input_ratio, lse_input_ratio;
    int64_t elements;
    int64_t escalations;
    /* contract v3 (BOUNDS.md 13-14) */
    orc_block dsinks;      /* p.has_sinks: n = heads_q vectors (0, h, 0), dim 1, every row of
                              every sequence in each (never sampled); else n = 0 */
} orc_bwd_result;

/* Compute the reference and bounds. Validates like fa_validate_* (without a
 * backend's head-dim limits), FA_ERR_INVALID with err filled on bad input,
 * FA_ERR_NOMEM on allocation failure. On error *res is zeroed. */
fa_status orc_fwd(const fa_fwd_args *args, const fa_precision *prof,
                  const orc_options *opt, orc_fwd_result *res, fa_error *err);
fa_status orc_bwd(const fa_bwd_args *args, const fa_precision *prof,
                  const orc_options *opt, orc_bwd_result *res, fa_error *err);

void orc_fwd_free(orc_fwd_result *res);
void orc_bwd_free(orc_bwd_result *res);

/* ---------------------------------------------------------------------------
 * Comparison of a backend's outputs against a result
 * ------------------------------------------------------------------------- */
#define ORC_HIST_BUCKETS 64 /* bucket k: error/bound in [2^(k-48), 2^(k-47)); 0 and 63 open */
/* Worst-ratio grid for plots: at most ORC_GRID_ROWS head blocks x ORC_GRID_COLS
 * sequence blocks (orc_stats.grid). */
#define ORC_GRID_ROWS 16
#define ORC_GRID_COLS 32

typedef struct {
    int64_t checked;         /* elements judged (flags not UNCHECKABLE) */
    int64_t failed;          /* elements outside their bound, plus non-finite mismatches */
    int64_t unchecked;       /* elements flagged ORC_F_UNCHECKABLE */
    int64_t escalations;     /* undecided elements recomputed in MPFR during compare */
    double worst_ratio;      /* max |kernel - ref| / bound over finite elements */
    int64_t worst_at[4];     /* (b, s, h, d) of worst_ratio; s = key index for dK/dV */
    double worst_kernel, worst_ref, worst_bound;
    double median_ratio;     /* median of |kernel - ref| / bound over finite elements */
    int64_t nan_unexpected;  /* kernel NaN/Inf where the reference is finite (fails) */
    int64_t nan_missing;     /* reference NaN/Inf where the kernel differs (fails) */
    int64_t overflow_inf;    /* kernel +-Inf accepted for a finite reference that rounds
                                to that Inf in the output dtype (|ref| + bound - orc_err >=
                                the overflow threshold); counted in checked, not failed */
    int64_t overflow_sensitive; /* kernel NaN/Inf on an element flagged ORC_F_OVERFLOW (finite or
                                   uncheckable reference): not a failure, a class of its own */
    int64_t first_ovf_at[4]; /* (b, s, h, d) of the first overflow-sensitive element, -1 if none */
    int64_t first_fail_at[4];/* (b, s, h, d) of the first failure, -1 if none */
    int64_t ratio_hist[ORC_HIST_BUCKETS]; /* finite elements judged by |kernel - ref| / bound */
    int64_t exact;           /* of those, kernel == ref exactly (ratio 0, counted in ratio_hist[0]) */
    int64_t nonfinite_match; /* reference NaN/Inf matched by the kernel (checked, passed) */
    /* Rounding bias over the bias_n finite elements judged with bound > 0: bias_sum is the sum of
     * (kernel - ref) / bound, bias_zero_sum of sign(ref) (kernel - ref) / bound (< 0: toward
     * zero; ref = 0 counts as +). Their means are near 0 for unbiased rounding; a round-to-
     * nearest that truncates gives a negative zero-mean, one that rounds up a positive mean.
     * A statistic, never a verdict (properties/PROPERTIES.md, "Rounding bias"). */
    double bias_sum, bias_zero_sum;
    int64_t bias_n;
    /* Worst ratio per (head block, sequence block), for plots. Cell [r][c] is the
     * max |kernel - ref| / bound over batch and head dim of the elements at heads
     * [r*grid_hb, (r+1)*grid_hb) and positions [c*grid_sb, (c+1)*grid_sb): query
     * index for O, LSE, dQ; key index for dK, dV (their elements are sums over
     * the other sequence, so no query x key attribution exists). grid_hb is the
     * smallest power of two giving <= ORC_GRID_ROWS rows; grid_sb the smallest
     * power of two >= 16 giving <= ORC_GRID_COLS columns. -1: no element judged
     * there; +inf: a non-finite mismatch or an error against a zero bound; a
     * matched non-finite or accepted overflow counts as 0. float: the ratio
     * rounded to nearest (display only, never a verdict). */
    int grid_rows, grid_cols;
    int64_t grid_hb, grid_sb;
    int64_t grid_heads, grid_seq;  /* the extents the grid covers (heads, positions) */
    float grid[ORC_GRID_ROWS][ORC_GRID_COLS];
    /* Baseline-relative measure (FlashAttention style), when the result has a
     * baseline: passes when max_err <= factor * baseline_max_err + floor, with
     * factor 2 (forward) or 3 (gradients) and floor = 2 max |(ref+0.3)-0.3 - ref|
     * evaluated in the input dtype. */
    int has_baseline;
    double max_err;          /* max |kernel - ref| over finite elements */
    double baseline_max_err; /* max |naive - ref| */
    double baseline_floor;
    double baseline_limit;   /* factor * baseline_max_err + floor */
    int baseline_pass;
} orc_stats;

/* Compare a backend's forward outputs (host, dtype of the problem; LSE fp32)
 * against res. Pure: res is not modified; escalations are recomputed locally.
 * Either stats pointer may be NULL to skip that tensor. */
fa_status orc_compare_fwd(const orc_fwd_result *res, const fa_tensor *o,
                          const fa_lse *lse, orc_stats *o_stats,
                          orc_stats *lse_stats, fa_error *err);

/* Same for backward gradients; any tensor/stats pair may be NULL to skip it. */
fa_status orc_compare_bwd(const orc_bwd_result *res, const fa_tensor *dq,
                          const fa_tensor *dk, const fa_tensor *dv,
                          orc_stats *dq_stats, orc_stats *dk_stats,
                          orc_stats *dv_stats, fa_error *err);

/* dsinks (fp32 [heads_q], host) against res->dsinks (p.has_sinks). */
fa_status orc_compare_dsinks(const orc_bwd_result *res, const float *dsinks, orc_stats *stats, fa_error *err);

/* One-line human summary of stats into buf (always NUL-terminated). */
void orc_stats_format(const orc_stats *s, const char *tensor, char *buf, size_t n);

/* ---------------------------------------------------------------------------
 * Small exact helpers (also used by tests and the fuzzer)
 * ------------------------------------------------------------------------- */
/* Exact value of an fp16 / bf16 bit pattern (NaN and Inf preserved). */
double orc_decode(uint16_t bits, fa_dtype dt);
/* Round a double to the nearest fp16 / bf16 (ties to even, overflow to Inf). */
uint16_t orc_encode(double x, fa_dtype dt);
/* Smallest |x| that round-to-nearest-even takes to Inf: largest finite plus half
 * its ulp (65520 fp16, 0x1.ffp127 bf16); dt < 0 selects fp32 (0x1.ffffffp127). */
double orc_overflow_threshold(int dt);
/* Unit roundoff of the dtype: 2^-11 (fp16), 2^-8 (bf16). */
double orc_unit_roundoff(fa_dtype dt);

/* Visibility of key j to query i for problem p, per flash_api.h (causal,
 * window; the mask's -inf is not considered here). 1 visible, 0 not. */
int orc_visible(const fa_problem *p, int64_t i, int64_t j);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_ORACLE_H */
