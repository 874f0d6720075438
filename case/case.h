/* case.h: one attention problem CASE, described without its tensors, and the
 * deterministic materialization of its inputs into host buffers.
 *
 * Prefix fc_case_ (and fc_ for the small shared types). C linkage.
 *
 * A case holds: the shape, dtype, softmax scale, causal mode and window, an
 * additive-mask PATTERN (not the mask itself), a LAYOUT for each of the ten
 * tensors (dimension order, stride padding, storage offset), and a value
 * DISTRIBUTION per input tensor plus one seed. Every input element is a pure
 * function of (seed, tensor, logical index): fc_case_value() regenerates any
 * single element without materializing the tensor (counter-based RNG, a
 * splitmix64 hash of the counter; no generator state).
 *
 * A case is written and read as "key = value" text (case/case_text.c):
 *
 *     # flashcheck case
 *     shape = 2 33 47 4 2 64 64        # B Sq Sk Hq Hkv Dqk Dv
 *     dtype = bf16
 *     scale = 0                        # 0: 1/sqrt(Dqk)
 *     causal = bottom_right            # none | top_left | bottom_right
 *     window = 16 -1                   # left right (< 0: unbounded)
 *     window_align = top_left
 *     mask = random_neginf density=0.2 # see fc_mask_kind
 *     mask_broadcast = batch           # none | batch | heads | batch heads
 *     layout.q = order 0 2 1 3 pad 0 0 3 0 offset 7
 *     dist = gaussian                  # all four inputs
 *     dist.k = ties                    # one input
 *     seed = 12345
 *     generator = 2                    # input generator version (absent: 1)
 *     backward = 1
 *     deterministic = 1
 *
 * Numeric note: every generated value is computed in double and then rounded
 * to nearest-even into the tensor's storage type (fp16, bf16 or fp32);
 * fc_case_value() returns that stored value exactly (as a double).
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_CASE_H
#define FLASHCHECK_CASE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/flash_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Tensors of a case
 * ------------------------------------------------------------------------- */
typedef enum {
    FC_T_Q = 0,   /* [B, Sq, Hq,  Dqk]  input  */
    FC_T_K,       /* [B, Sk, Hkv, Dqk]  input  */
    FC_T_V,       /* [B, Sk, Hkv, Dv ]  input  */
    FC_T_DO,      /* [B, Sq, Hq,  Dv ]  input (backward) */
    FC_T_MASK,    /* [B, Hq, Sq, Sk]    input fp32 (only when mask != NONE) */
    FC_T_O,       /* [B, Sq, Hq,  Dv ]  output (forward), input (backward) */
    FC_T_LSE,     /* [B, Hq, Sq]        output fp32 (3-d) */
    FC_T_DQ,      /* like Q, output */
    FC_T_DK,      /* like K, output */
    FC_T_DV,      /* like V, output */
    FC_T_COUNT
} fc_tensor_id;

/* Inputs that draw values from a distribution (Q, K, V, dO). */
#define FC_N_DIST_INPUTS 4

const char *fc_tensor_name(int t);   /* "q", "k", "v", "do", "mask", "o", "lse", "dq", "dk", "dv" */
int fc_tensor_by_name(const char *name); /* -1 if unknown */

/* ---------------------------------------------------------------------------
 * Layout of one tensor
 *
 * order[0..n-1] lists the LOGICAL dimensions from outermost to innermost
 * (a permutation of 0..n-1, n = 4, or 3 for LSE). Strides are built from the
 * innermost outwards:
 *     stride[order[n-1]] = 1 + pad[order[n-1]]          (pad > 0: gaps between elements)
 *     stride[order[k]]   = stride[order[k+1]] * dim[order[k+1]] + pad[order[k]]
 * so pad[d] adds pad[d] unused elements to every step of logical dim d.
 * offset is a storage offset in elements before element (0,0,0,0).
 * For the mask, mask_broadcast forces stride 0 on the batch and/or head dim.
 * Default: order 0 1 2 3, no pad, no offset (dense row-major).
 * ------------------------------------------------------------------------- */
typedef struct {
    int order[4];
    int64_t pad[4];
    int64_t offset;
} fc_layout;

/* ---------------------------------------------------------------------------
 * Value distributions (per input tensor)
 *   GAUSSIAN    N(0, amp^2), amp default 1.
 *   LARGE       amp * g, g ~ N(0,1) clipped to [-2, 2]; amp default keeps the
 *               fp32 score and dP products finite: fp16 amp = 16000 (about a
 *               quarter of 65504, so |x| <= 32000); bf16 amp = 2^44, because
 *               2^88 * D * scale must stay below FLT_MAX (bf16's own range,
 *               3.4e38, cannot be used for products accumulated in fp32).
 *               Meant for V and dO. On Q and K at these amplitudes the fp32
 *               score error alone exceeds exp's range, so no finite per-element
 *               bound exists (the oracle marks such elements uncheckable and the
 *               checks report SKIP); for large scores give Q, K a moderate amp
 *               (e.g. amp=6 with D=32 gives |s| in the tens).
 *   TINY        +-2^e, e uniform over [emin_subnormal, emin_normal + 4]: a mix of
 *               subnormals and the smallest normals of the dtype.
 *   SPARSE_INT  with probability prob (default 0.8) zero, else an integer in
 *               [-2, 2]: with fp32 accumulation most sums are exact.
 *   HEAVY_TAIL  Cauchy (tan(pi(u - 1/2))), clipped to +-amp (default 1000).
 *   SPIKES      N(0,1), but with probability prob (default 0.01) times amp (default 100).
 *   CONST_ROWS  N(0,1) depending only on (b, h, d): every sequence position
 *               holds the same vector, so every score in a row is equal.
 *   TIES        N(0,1) with positions paired: position s takes the value of
 *               position 2*(s/2), so each row's maximum score occurs at least
 *               twice (exact ties), for K; other tensors the same rule.
 * ------------------------------------------------------------------------- */
typedef enum {
    FC_DIST_GAUSSIAN = 0,
    FC_DIST_LARGE,
    FC_DIST_TINY,
    FC_DIST_SPARSE_INT,
    FC_DIST_HEAVY_TAIL,
    FC_DIST_SPIKES,
    FC_DIST_CONST_ROWS,
    FC_DIST_TIES,
    FC_DIST_COUNT
} fc_dist_kind;

typedef struct {
    fc_dist_kind kind;
    double amp;   /* 0: the distribution's default */
    double prob;  /* 0: the distribution's default */
} fc_dist;

const char *fc_dist_name(fc_dist_kind k);
int fc_dist_by_name(const char *name); /* -1 if unknown */

/* ---------------------------------------------------------------------------
 * Additive mask patterns [B, Hq, Sq, Sk]; entries are 0, -inf, or finite.
 *   NONE            no mask tensor (fa_mask.ptr = NULL)
 *   RANDOM_NEGINF   -inf with probability density (default 0.3), else 0
 *   STRIPES         -inf where ((j + i * shift) / width) is odd (width default 4;
 *                   shift as given, fc_case_default sets 1: diagonal stripes), else 0
 *   FULL_ROWS       whole query rows -inf: row 0 and each other row with
 *                   probability density (default 0.3); other entries 0
 *   FULL_COLS       whole key columns -inf: column 0 and each other column with
 *                   probability density (default 0.3); other entries 0
 *   RANDOM_FINITE   uniform in [-amp, amp] (amp default 4)
 *   RANDOM_MIXED    -inf with probability density (default 0.1), else uniform in
 *                   [-amp, amp] (amp default 3): a finite additive bias mixed with
 *                   -inf entries (a position bias over padding); with width w >= 1,
 *                   every row i with i % w == w / 2 is entirely -inf as well
 *   KEY_PADDING     -inf on the last keys of each batch element, 0 elsewhere (the same
 *                   for every head and row): 1 + floor(density * Sk) keys for odd b,
 *                   1 + floor(density * Sk / 2) for even b (density default 0.25), so
 *                   whole trailing key tiles are hidden
 * mask_broadcast_batch / _heads: the value ignores b / h and the mask tensor
 * has stride 0 on that dim (one slice broadcast to all).
 * ------------------------------------------------------------------------- */
typedef enum {
    FC_MASK_NONE = 0,
    FC_MASK_RANDOM_NEGINF,
    FC_MASK_STRIPES,
    FC_MASK_FULL_ROWS,
    FC_MASK_FULL_COLS,
    FC_MASK_RANDOM_FINITE,
    FC_MASK_RANDOM_MIXED,
    FC_MASK_KEY_PADDING,
    FC_MASK_COUNT
} fc_mask_kind;

typedef struct {
    fc_mask_kind kind;
    double density;   /* RANDOM_NEGINF, FULL_ROWS, FULL_COLS, RANDOM_MIXED, KEY_PADDING; 0: default */
    double amp;       /* RANDOM_FINITE, RANDOM_MIXED; 0: default */
    int64_t width;    /* STRIPES (0: default); RANDOM_MIXED (0: no fully masked rows) */
    int64_t shift;    /* STRIPES; >= 0 (0: vertical stripes) */
    int broadcast_batch;
    int broadcast_heads;
} fc_mask_spec;

const char *fc_mask_name(fc_mask_kind k);
int fc_mask_by_name(const char *name); /* -1 if unknown */

/* ---------------------------------------------------------------------------
 * Contract-v3 fields of a case (case/case_v3.c; kernels/flash_api.h fa_varlen, fa_paged)
 *
 *     seqlens_q = 5,0,1,70          # packed Q: B query counts (cu_seqlens_q = prefix sums)
 *     seqlens_k = 7,3,0,130         # packed K/V: B allocated key counts (cu_seqlens_k)
 *     seqused_k = 7,2,0,100         # keys each sequence uses (seqused_k)
 *     softcap = 30                  # p.softcap
 *     sinks = gaussian amp=2        # p.has_sinks; sink_h = amp N(0,1) from the seed, fp32
 *     paged = 16 12 2               # page_size num_pages table_pad (table_stride = max_pages + pad)
 *     block_table.0 = 3,0,1         # row b of the table: max_pages_per_seq entries (same for all)
 *
 * The shape line's Sq and Sk are the maxima over sequences. With packing, the tensors
 * are [1, total, H, D] (LSE [1, Hq, total_q]); paged K, V, dK, dV are the pools
 * [num_pages, page_size, Hkv, D]; their layouts apply to those dims. A table entry past
 * a sequence's used pages (and the row padding) is never read; the harness fills the
 * padding with -1. Lists are comma-separated, one token. None of these lines is written
 * for a case without the feature (v2 case files are unchanged).
 * ------------------------------------------------------------------------- */
#define FC_MAX_SEQS 64    /* sequences (batch) of a varlen or paged case */
#define FC_MAX_TABLE 4096 /* block-table entries, batch * max_pages */
#define FC_MAX_PAGES 128  /* max_pages per sequence (a row fits one text line) */

typedef struct {
    int varlen_q, varlen_k, has_seqused;
    int64_t seqlens_q[FC_MAX_SEQS], seqlens_k[FC_MAX_SEQS], seqused_k[FC_MAX_SEQS];
    int64_t num_pages, max_pages, table_pad;  /* when p.page_size >= 1 */
    int32_t block_table[FC_MAX_TABLE];        /* [batch][max_pages], row-major, no padding */
    fc_dist sinks;                            /* values when p.has_sinks (kind, amp) */
} fc_v3;

/* ---------------------------------------------------------------------------
 * The case
 * ------------------------------------------------------------------------- */
/* Input generator versions (text key `generator`; a case file without it is version 1).
 * A version's values never change: a repro file replays the same bytes forever.
 *   FC_GEN_V1  Box-Muller with glibc's log1p and cos (the generator before versions
 *              existed; its values depend on glibc's libm).
 *   FC_GEN_V2  the same distributions from integer arithmetic on the counter hash:
 *              normals by a table-based inverse CDF (fc_gen2_normal, case.c), Cauchy as
 *              a ratio of two normals; no libm, the same bits on any platform; several
 *              times faster. The default of new cases (fc_case_default).
 * The mask patterns and fp16/bf16 rounding are the same in both (already integer and
 * IEEE-exact arithmetic on the hash). */
#define FC_GEN_V1 1
#define FC_GEN_V2 2
#define FC_GEN_LATEST FC_GEN_V2
/* Version 2's standard normal of a 64-bit hash h (a multiple of 2^-48, |x| <= 9.53). */
double fc_gen2_normal(uint64_t h);

typedef struct {
    fa_problem p;                    /* shape, dtype, scale, causal, window */
    fc_mask_spec mask;
    fc_layout layout[FC_T_COUNT];
    fc_dist dist[FC_N_DIST_INPUTS];  /* indexed by FC_T_Q, FC_T_K, FC_T_V, FC_T_DO */
    uint64_t seed;
    int gen;                         /* input generator version, FC_GEN_V1 or FC_GEN_V2 (see below) */
    int backward;                    /* 1: the case also runs the backward pass */
    int deterministic;               /* fa_bwd_args.deterministic */
    fc_v3 v3;                        /* contract v3: varlen, paged, sinks (softcap, has_sinks,
                                        page_size are in p) */
} fc_case;

/* Contract-v3 helpers (case/case_v3.c). */
int fc_case_is_v3(const fc_case *c);               /* 1 when any v3 feature is on */
int64_t fc_case_total_q(const fc_case *c);         /* packed Q rows (sum seqlens_q), else B*Sq */
int64_t fc_case_total_k(const fc_case *c);         /* packed K rows (sum seqlens_k), else B*Sk */
int64_t fc_case_seq_q(const fc_case *c, int64_t b);     /* Sq_b */
int64_t fc_case_seq_k(const fc_case *c, int64_t b);     /* Sk_b (keys used) */
int64_t fc_case_seq_alloc(const fc_case *c, int64_t b); /* keys allocated to sequence b */
/* The sink of query head h (fp32 value, as a double). */
double fc_case_sink(const fc_case *c, int64_t h);
/* The host arrays of the call: cu_q, cu_k [B+1], used [B], table [B * table_stride] (padding
 * -1); any pointer may be NULL. Returns the table stride (0 when not paged). */
int64_t fc_case_v3_arrays(const fc_case *c, int32_t *cu_q, int32_t *cu_k, int32_t *used, int32_t *table);
/* Internal to case/: dims of a packed or paged tensor (0: not v3, use the dense dims),
 * the v3 checks, text keys, writer and equality. */
int fc_v3_dims(const fc_case *c, int t, int64_t dim[4]);
int fc_v3_check(const fc_case *c, char *msg, size_t msglen);
typedef struct { uint64_t keys, rows; int count[8]; } fc_v3_seen; /* keys seen while parsing */
/* 1: key handled, 0: not a v3 key, -1: error (msg, without the line prefix). */
int fc_v3_parse_key(const char *key, char **tok, int n, fc_case *c, fc_v3_seen *seen, char *msg, size_t msglen);
int fc_v3_parse_end(fc_case *c, const fc_v3_seen *seen, char *msg, size_t msglen);
size_t fc_v3_write(const fc_case *c, char *buf, size_t buflen);
int fc_v3_equal(const fc_case *a, const fc_case *b);

/* A small default: B=1 Sq=Sk=16 Hq=Hkv=1 D=32 fp16, no mask, dense layouts,
 * Gaussian inputs, seed 1, generator FC_GEN_LATEST, backward on, deterministic on. */
void fc_case_default(fc_case *c);

/* Structural sanity of a case (batch and sequence lengths >= 0, heads and head
 * dims >= 1 as the contract requires, Hq % Hkv == 0, a nonzero scale normal in
 * fp32, layouts are permutations, pads >= 0, distribution/mask parameters in
 * range, every element count and span computed without 64-bit overflow, no
 * tensor over FC_CASE_MAX_ELEMS elements or span). 0 if fine, else -1 with a sentence in
 * msg naming the field. Does not decide whether a BACKEND accepts it.
 * Element counts, spans and offsets are 64-bit everywhere (tensors past 2^31 elements
 * are ordinary cases). */
#define FC_CASE_MAX_ELEMS ((int64_t)1 << 40)
int fc_case_check(const fc_case *c, char *msg, size_t msglen);

/* Logical dims of tensor t in the contract's order; returns ndim (4, or 3 for LSE). */
int fc_case_dims(const fc_case *c, int t, int64_t dim[4]);
/* Number of logical elements of tensor t. */
int64_t fc_case_numel(const fc_case *c, int t);
/* Storage dtype of tensor t: element size in bytes (2 for Q..dV in fp16/bf16, 4 for mask, LSE). */
size_t fc_case_elem_size(const fc_case *c, int t);
int fc_case_is_fp32(int t);  /* 1 for MASK, LSE */

/* Strides (elements) of tensor t from its layout (mask: broadcast dims get 0),
 * and the span: 1 + the largest element index reached from element 0 (0 if empty),
 * plus the layout offset. */
void fc_case_strides(const fc_case *c, int t, int64_t stride[4]);
int64_t fc_case_span(const fc_case *c, int t);

/* The value of input element idx (logical, length ndim) of tensor t
 * (Q, K, V, DO or MASK), exactly as stored (already rounded to the storage type).
 * Pure function of (c->seed, distribution, t, idx). */
double fc_case_value(const fc_case *c, int t, const int64_t idx[4]);
/* n consecutive values along the last dim from idx: out[k] = fc_case_value
 * at (idx[0], idx[1], idx[2], idx[3] + k); the per-tensor setup done once. */
void fc_case_value_row(const fc_case *c, int t, const int64_t idx[4], int64_t n, double *out);

/* ---------------------------------------------------------------------------
 * Host buffers
 *
 * One allocation per tensor: [guard][offset + span][guard], in elements of the
 * tensor's storage type. view = alloc + guard + offset is element (0,0,0,0).
 * ------------------------------------------------------------------------- */
typedef struct {
    int tensor;
    int ndim;
    int64_t dim[4];
    int64_t stride[4];
    size_t elem_size;    /* 2 (fp16/bf16) or 4 (fp32) */
    int dtype_bf16;      /* 1: 2-byte elements are bf16, 0: fp16 */
    int64_t guard;       /* elements of guard zone on each side */
    int64_t offset;      /* layout storage offset */
    int64_t span;        /* elements reachable from view */
    int64_t alloc_elems; /* guard + offset + span + guard */
    void *alloc;         /* malloc'd; NULL when alloc_elems == 0 */
} fc_buf;

/* Element index (within alloc) of the logical element idx. */
int64_t fc_buf_index(const fc_buf *b, const int64_t idx[4]);
/* Pointer to element (0,0,0,0) (alloc + guard + offset), also for an empty tensor. */
void *fc_buf_view(const fc_buf *b);

/* Allocate the buffer for tensor t with `guard` guard elements each side and
 * fill ALL of it (guards, offset region, stride gaps, elements) with the
 * quiet-NaN poison pattern number `poison` (FC_POISON_A or FC_POISON_B).
 * 0 on success; -1 with msg on failure (size, out of memory). */
int fc_buf_alloc(const fc_case *c, int t, int64_t guard, int poison, fc_buf *b,
                 char *msg, size_t msglen);
void fc_buf_free(fc_buf *b);
/* Write the case's generated values into every logical element of b (inputs
 * Q, K, V, DO, MASK); gaps and guards keep whatever they hold. */
void fc_case_fill(const fc_case *c, fc_buf *b);
/* Read logical element idx of any buffer as a double (fp16/bf16/fp32 exactly). */
double fc_buf_get(const fc_buf *b, const int64_t idx[4]);
/* Store x (rounded to nearest-even into the storage type) at logical element idx. */
void fc_buf_set(fc_buf *b, const int64_t idx[4], double x);

/* Quiet-NaN poison patterns with distinct payloads (two fills per check run).
 * The 16-bit patterns are quiet NaNs both as fp16 and as bf16. */
#define FC_POISON_A 0
#define FC_POISON_B 1
#define FC_POISON_A_16 0x7FE5u
#define FC_POISON_B_16 0x7FCAu
#define FC_POISON_A_32 0x7FC05A5Au
#define FC_POISON_B_32 0x7FE0C3C3u
uint16_t fc_poison16(int poison); /* FC_POISON_A_16 or FC_POISON_B_16 */
uint32_t fc_poison32(int poison); /* FC_POISON_A_32 or FC_POISON_B_32 */

/* ---------------------------------------------------------------------------
 * Scalars: rounding to the storage types (all round-to-nearest-even,
 * overflow to +-inf, NaN kept as a quiet NaN).
 * ------------------------------------------------------------------------- */
uint16_t fc_f16_from_double(double x);
double fc_f16_to_double(uint16_t h);
uint16_t fc_bf16_from_double(double x);
double fc_bf16_to_double(uint16_t h);
/* The value of fp16 (bf16 = 0) or bf16 (bf16 = 1) bits as a double, exact: what
 * fc_f16_to_double / fc_bf16_to_double return (they call it), inlined into hot loops. */
static inline double fc_half_to_double(uint16_t h, int bf16) {
    double v;
    if (bf16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return (double)f;
    }
    int sign = h >> 15, ex = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (ex == 0x1F) v = m ? NAN : INFINITY;
    else if (ex == 0) v = (double)m * 0x1p-24; /* subnormal: exact (m < 2^10, power-of-two scale) */
    else {
        /* normal: the same value as a double, built from its bits (exponent ex - 15, 10 mantissa bits) */
        uint64_t u = ((uint64_t)(ex - 15 + 1023) << 52) | ((uint64_t)m << 42);
        memcpy(&v, &u, 8);
    }
    return sign ? -v : v;
}
/* x rounded to dtype d and back (exact round trip value). */
double fc_round_to(fa_dtype d, double x);

/* Counter-based RNG: splitmix64 finalizer of the counter; u01 in [0, 1) with 53 bits. */
uint64_t fc_rng_hash(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);
double fc_rng_u01(uint64_t h);

/* ---------------------------------------------------------------------------
 * Text form ("key = value" lines; '#' starts a comment)
 * ------------------------------------------------------------------------- */
/* Parse text into c (starting from fc_case_default). 0 on success; -1 with
 * "line N: ..." in msg on the first error. Unknown keys, duplicate keys,
 * malformed numbers and out-of-range values are errors. fc_case_check is run
 * at the end (its message is prefixed with "case: "). */
int fc_case_parse(const char *text, fc_case *c, char *msg, size_t msglen);
/* Same for a repro FILE (fc_case_load, `flashcheck repro/shrink`): the text must also
 * state the shape; an empty file or one without a shape line is an error, not the
 * default case. */
int fc_case_parse_repro(const char *text, fc_case *c, char *msg, size_t msglen);
/* Write c as text into buf (always NUL-terminated when buflen > 0). Returns
 * the length the full text needs (excluding NUL), like snprintf. Every field
 * is written, so parse(write(c)) == c field for field. */
size_t fc_case_write(const fc_case *c, char *buf, size_t buflen);
/* Field-by-field equality (1 equal, 0 not). */
int fc_case_equal(const fc_case *a, const fc_case *b);
/* Read / write a case file. 0 on success, -1 with msg. */
int fc_case_load(const char *path, fc_case *c, char *msg, size_t msglen);
int fc_case_save(const char *path, const fc_case *c, char *msg, size_t msglen);

/* Fill an fa_problem (copy of c->p). */
static inline fa_problem fc_case_problem(const fc_case *c) { return c->p; }

/* The harness's one clock (case/case_clock.c), for elapsed times, watchdogs and progress lines:
 * CLOCK_MONOTONIC in nanoseconds (never goes back; its origin is arbitrary, the same for every
 * process of the machine). fc_clock_s: the same in seconds (one rounding of the int64 to double:
 * exact to 2 ns for an origin < 10^7 s back). */
int64_t fc_clock_ns(void);
static inline double fc_clock_s(void) { return 1e-9 * (double)fc_clock_ns(); }

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_CASE_H */
