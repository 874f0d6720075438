/* flash_api.h: the one contract every flashcheck backend and the oracle share.
 *
 * Prefix fa_. C linkage. No function here depends on where the data lives:
 * a backend declares its memory space (host or CUDA device) and the harness
 * hands it pointers of that space.
 *
 * ---------------------------------------------------------------------------
 * Shapes (all counts are int64_t, all strides in ELEMENTS, any order, >= 0):
 *   Q   [B, Sq, Hq,  Dqk]   dtype fp16 or bf16
 *   K   [B, Sk, Hkv, Dqk]
 *   V   [B, Sk, Hkv, Dv ]
 *   O   [B, Sq, Hq,  Dv ]   same dtype as Q
 *   LSE [B, Hq, Sq]         fp32, natural log: lse = log(sum_j exp(scale*q.k_j + mask_ij))
 *   additive mask [B, Hq, Sq, Sk] fp32, stride 0 broadcasts, entries may be -inf.
 *   dO, dQ, dK, dV: same shapes as O, Q, K, V, each with its own strides.
 *
 * Visibility of key j to query i (0 <= i < Sq, 0 <= j < Sk):
 *   diag(i) = i                  for FA_CAUSAL_TOP_LEFT      (and window_align TOP_LEFT)
 *   diag(i) = i + Sk - Sq        for FA_CAUSAL_BOTTOM_RIGHT  (and window_align BOTTOM_RIGHT)
 *   causal:        j <= diag(i)
 *   window_left  >= 0:  j >= diag(i) - window_left
 *   window_right >= 0:  j <= diag(i) + window_right
 *   (a negative window side is unbounded). With a causal mode the window uses
 *   the causal diagonal; with FA_CAUSAL_NONE it uses window_align.
 *   An additive mask entry of -inf also hides the key; finite entries add to
 *   the score AFTER the softmax scale: s_ij = scale * q_i.k_j + mask_ij.
 *
 * A row with no visible key (this includes Sk = 0): O row = 0, LSE = -inf,
 * and in backward dQ row = 0, no contribution to dK, dV. Sq = 0 writes nothing.
 * A hidden key never changes a row's outputs, whatever its K/V hold (NaN/Inf too);
 * a backend whose exact-zero weights multiply such values declares it
 * (fa_precision.masked_nonfinite).
 *
 * GQA/MQA: Hq = g * Hkv; query head h reads kv head h / g; dK and dV sum over
 * the g query heads of a group.
 *
 * Backward computes, with P the softmax probabilities and D_i = dO_i . O_i:
 *   dV_j = sum_i P_ij dO_i,  dP_ij = dO_i . V_j,  dS_ij = P_ij (dP_ij - D_i),
 *   dQ_i = scale * sum_j dS_ij K_j,  dK_j = scale * sum_i dS_ij Q_i.
 * The mask is a constant (no gradient).
 *
 * Contract v3 (ABI 4; every field below is appended to its struct and its zero
 * value turns the feature off, so a zeroed v3 field set is the dense call above):
 *   varlen  (fa_*_args.varlen): cu_seqlens_q / cu_seqlens_k pack B sequences of
 *           different lengths along the seq dim; seqused_k limits the keys each
 *           sequence uses. Per-sequence lengths Sq_b, Sk_b replace Sq, Sk in every
 *           rule above (causal and window diagonals align each sequence's own ends).
 *   paged   (p.page_size >= 1, fa_*_args.paged): K and V (and dK, dV) are page pools
 *           [num_pages, page_size, Hkv, D] read through a block table.
 *   softcap (p.softcap > 0): s_ij = softcap * tanh(scale * q_i.k_j / softcap) + mask_ij.
 *   sinks   (p.has_sinks): a per-head logit joins every row's softmax denominator.
 *   Dqk != Dv was already part of the contract (dqk_must_equal_dv = 0 claims it).
 * The exact rules are at fa_varlen, fa_paged, fa_problem.softcap and fa_fwd_args.sinks.
 * A backend claims each feature in fa_limits (supports_*); a call using a feature it
 * does not claim is rejected by validation with FA_ERR_UNSUPPORTED naming the feature.
 *
 * Validation (fa_validate_fwd / fa_validate_bwd, which every backend calls
 * first): null pointers, negative or impossible sizes, Hq % Hkv != 0, head dims
 * outside the backend's limits, a pointer not aligned to its element size,
 * a negative stride, strides whose extent overflows 64 bits, an output whose
 * layout maps two elements to one address, an output whose address range
 * intersects an input's or another output's, a non-finite softmax scale,
 * mask strides. Contract v3 adds: cu_seqlens_*[0] != 0, decreasing entries, a
 * sequence longer than p.seqlen_q / p.seqlen_k; seqused_k[b] < 0 or above the
 * sequence's allocated keys; page_size < 0, a table with page_size 0, page_size >= 1
 * without a table, table_stride < max_pages_per_seq, a table entry (of the pages a
 * sequence uses) outside [0, num_pages), max_pages_per_seq * page_size < p.seqlen_k;
 * paging with cu_seqlens_k; the mask with cu_seqlens; softcap < 0 or non-finite;
 * has_sinks with sinks NULL (and dsinks overlapping anything); a feature the limits
 * do not claim (FA_ERR_UNSUPPORTED). Packed tensors' address ranges are computed
 * from their LAST packed row (total rows = cu[B]); page pools from num_pages. Inputs may overlap each other (fused QKV is fine); outputs
 * may not overlap anything. A rejected call returns a status, fills fa_error
 * with the argument's name and a message, and writes no output.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FLASH_API_H
#define FLASHCHECK_FLASH_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FA_ABI_VERSION 5 /* 2: fa_precision.flushes_subnormals; 3: exp_ulps, tensor-core
                            accumulation, backward scale/dP/D/GQA roundings, empty-row LSE;
                            4: contract v3 (varlen, paged K/V, softcap, sinks): fields appended
                            to fa_problem, fa_fwd_args, fa_bwd_args, fa_limits. The layouts of
                            ABI 3 and 4 differ (fa_problem opens the args structs and fa_limits
                            sits before the function pointers in fa_backend), so the loader
                            rejects an ABI-3 library with a message to rebuild it: ABI 4 is
                            SOURCE compatible (new fields zero = off), not binary compatible.
                            5: fa_precision.masked_nonfinite appended; fa_precision is embedded
                            in fa_backend before fa_limits, so the loader rejects an ABI-4
                            library the same way: source compatible (zero = isolated, the
                            contract), not binary compatible. */

typedef enum {
    FA_OK = 0,
    FA_ERR_INVALID = 1,     /* an argument is wrong: fa_error.arg names it */
    FA_ERR_UNSUPPORTED = 2, /* valid, but this backend cannot run it */
    FA_ERR_NOMEM = 3,
    FA_ERR_DEVICE = 4,      /* a CUDA (or other device) error; message has it */
    FA_ERR_INTERNAL = 5
} fa_status;

typedef enum { FA_F16 = 0, FA_BF16 = 1 } fa_dtype;

typedef enum {
    FA_CAUSAL_NONE = 0,
    FA_CAUSAL_TOP_LEFT = 1,     /* j <= i            (PyTorch is_causal) */
    FA_CAUSAL_BOTTOM_RIGHT = 2  /* j <= i + Sk - Sq  (FlashAttention-2 >= 2.1) */
} fa_causal;

typedef enum { FA_ALIGN_TOP_LEFT = 0, FA_ALIGN_BOTTOM_RIGHT = 1 } fa_align;

/* A 4-d tensor view: dims [batch, seq, head, dim] in that logical order. */
typedef struct {
    void *ptr;
    int64_t stride[4]; /* elements; element (b,s,h,d) at ptr + b*st[0]+s*st[1]+h*st[2]+d*st[3] */
} fa_tensor;

/* LSE view [batch, head_q, seq_q], fp32. */
typedef struct {
    float *ptr;
    int64_t stride[3];
} fa_lse;

/* Additive mask view [batch, head_q, seq_q, seq_k], fp32. ptr == NULL: no mask. */
typedef struct {
    const float *ptr;
    int64_t stride[4];
} fa_mask;

typedef struct {
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_qk, head_dim_v;
    fa_dtype dtype;
    float softmax_scale;     /* 0 selects the default 1/sqrt(head_dim_qk) */
    fa_causal causal;
    int64_t window_left;     /* < 0: unbounded */
    int64_t window_right;    /* < 0: unbounded */
    fa_align window_align;   /* diagonal of the window when causal == FA_CAUSAL_NONE */
    /* --- ABI 4 (contract v3) --- */
    float softcap;           /* 0: none. > 0 (finite): s_ij = softcap * tanh(scale * q_i.k_j / softcap)
                                + mask_ij (FlashAttention-2 / Gemma-2 order: scale, cap, then mask).
                                Backward: d s_ij / d(q_i.k_j) = scale * (1 - tanh^2(scale q_i.k_j /
                                softcap)), so dQ_i = scale sum_j dS_ij (1 - t_ij^2) K_j and dK_j =
                                scale sum_i dS_ij (1 - t_ij^2) Q_i with t_ij the tanh. */
    int has_sinks;           /* 1: fa_*_args.sinks is given (a per-head softmax sink, see sinks) */
    int64_t page_size;       /* 0: K, V dense (or packed). >= 1: paged through fa_*_args.paged */
} fa_problem;

/* Packed variable-length batch (contract v3). The int32 arrays are in HOST memory
 * whatever the backend's memspace.
 *   cu_seqlens_q [B+1] or NULL (dense Q): cu_q[0] = 0, non-decreasing; sequence b's
 *     queries are the packed rows cu_q[b] .. cu_q[b+1]-1, Sq_b = cu_q[b+1] - cu_q[b].
 *     Element (b, i, h, d) of Q, O, dO, dQ is at ptr + (cu_q[b] + i)*st[1] + h*st[2]
 *     + d*st[3] (st[0] is ignored); LSE (b, h, i) at ptr + h*st[1] + (cu_q[b] + i)*st[2]
 *     (st[0] ignored). Without it Sq_b = p.seqlen_q.
 *   cu_seqlens_k [B+1] or NULL: the same for K, V, dK, dV; allocated keys
 *     cu_k[b+1] - cu_k[b]. Exclusive with paging.
 *   seqused_k [B] or NULL: sequence b uses only its first seqused_k[b] keys
 *     (0 <= seqused_k[b] <= its allocated keys: the cu_k span, max_pages_per_seq *
 *     page_size when paged, else p.seqlen_k; and <= p.seqlen_k, the maximum, in every
 *     case: a paged row may hold more keys than seqlen_k); the others are never read, and in
 *     backward their dK, dV rows (dense or packed K) are written as 0.
 *   Sk_b = seqused_k[b] if given, else the cu_k span, else p.seqlen_k.
 * p.seqlen_q and p.seqlen_k are the MAXIMA over sequences (every Sq_b <= seqlen_q, every
 * cu_k span <= seqlen_k). Sq_b = 0 and Sk_b = 0 are allowed (a row of a sequence with
 * Sk_b = 0 sees no key). Causal and window diagonals use Sq_b and Sk_b:
 * diag(i) = i + Sk_b - Sq_b for bottom-right. The additive mask is not allowed with
 * cu_seqlens_q or cu_seqlens_k (FA_ERR_INVALID naming "mask"). */
typedef struct {
    const int32_t *cu_seqlens_q;
    const int32_t *cu_seqlens_k;
    const int32_t *seqused_k;
} fa_varlen;

/* Paged K/V cache (contract v3), used when p.page_size >= 1. block_table is HOST
 * int32 [B, max_pages_per_seq], row b at block_table + b * table_stride; entries in
 * [0, num_pages); pages may repeat (shared between sequences or within one) and come
 * in any order. Key j (< Sk_b) of sequence b is in page block_table[b*table_stride +
 * j / page_size], slot j % page_size: element (page, slot, h, d) of K, V (and dK, dV in
 * backward) at ptr + page*st[0] + slot*st[1] + h*st[2] + d*st[3], i.e. the pools are
 * [num_pages, page_size, Hkv, D]. Table entries past ceil(Sk_b / page_size) are never
 * read. max_pages_per_seq * page_size >= p.seqlen_k. Paged backward: dK, dV of a
 * shared page accumulate the contributions of every (sequence, position) mapped to it;
 * pages no sequence uses are zeroed (a backend may return FA_ERR_UNSUPPORTED for
 * paged backward). */
typedef struct {
    const int32_t *block_table;
    int64_t table_stride;       /* >= max_pages_per_seq */
    int64_t max_pages_per_seq;  /* >= 1 */
    int64_t num_pages;          /* >= 1 */
} fa_paged;

typedef struct {
    fa_problem p;
    fa_tensor q, k, v;       /* inputs */
    fa_mask mask;            /* optional input */
    fa_tensor o;             /* output */
    fa_lse lse;              /* output (required) */
    void *stream;            /* cudaStream_t for device backends, NULL = default; ignored on host */
    /* --- ABI 4 (contract v3) --- */
    fa_varlen varlen;        /* all NULL: dense */
    fa_paged paged;          /* used when p.page_size >= 1 */
    const float *sinks;      /* [Hq] fp32 in the backend's memory space, read when p.has_sinks:
                                lse_i = log(sum_{visible j} exp(s_ij) + exp(sinks[h])),
                                P_ij = exp(s_ij - lse_i), O_i = sum_j P_ij V_j (the sink has no
                                value). A row with no visible key has O = 0, LSE = sinks[h]. */
} fa_fwd_args;

typedef struct {
    fa_problem p;
    fa_tensor q, k, v, o, dout; /* inputs */
    fa_lse lse;                 /* input: the forward's LSE */
    fa_mask mask;               /* optional input */
    fa_tensor dq, dk, dv;       /* outputs */
    int deterministic;          /* 1: bitwise reproducible dQ, dK, dV */
    void *stream;
    /* --- ABI 4 (contract v3) --- */
    fa_varlen varlen;           /* as in fa_fwd_args; applies to q, o, dout, lse, dq (cu_q) and
                                   k, v, dk, dv (cu_k) */
    fa_paged paged;             /* k, v, dk, dv are page pools when p.page_size >= 1 */
    const float *sinks;         /* [Hq] input, as in fa_fwd_args, when p.has_sinks */
    float *dsinks;              /* [Hq] fp32 output (backend memory) or NULL (not wanted), when
                                   p.has_sinks: dsinks[h] = - sum_{b,i} exp(sinks[h] - lse_bhi) D_bhi,
                                   D = dO . O (rows of every sequence, including empty rows) */
} fa_bwd_args;

typedef struct {
    fa_status status;
    char arg[32];   /* the offending argument ("q.stride[2]", "heads_kv", ...) or "" */
    char msg[256];  /* a sentence saying what is wrong and what to do */
} fa_error;

/* ---------------------------------------------------------------------------
 * Precision profile: what a backend promises about its arithmetic, so the
 * oracle can bound its error element by element (oracle/BOUNDS.md; section
 * numbers below refer to it). Every field describes what the kernel DOES; a
 * kernel doing something its profile does not declare may be judged wrong.
 * Named profiles of known implementations: fa_precision_preset.
 * ------------------------------------------------------------------------- */

/* How D_i = dO_i . O_i enters dS = P (dP - D) in the backward (section 10.3). */
typedef enum {
    FA_D_FROM_O = 0, /* D_i = sum_d dO_id O_id in fp32 from the O given to the backward (dtype
                        values): FlashAttention-2/3, PyTorch's efficient kernel, ours */
    FA_D_FROM_P = 1  /* D_i = sum_j P'_ij dP'_ij in fp32 from the P and dP the kernel uses (rounded
                        when p_rounded / dp_rounded): the softmax backward of an unfused graph */
} fa_d_source;

/* How dK_j, dV_j of a kv head get the contributions of the g query heads of
 * its group (GQA/MQA; section 10.4). With g = 1 all three are the same. */
typedef enum {
    FA_GQA_FUSED = 0,       /* every query head's terms accumulate in fp32 (one accumulator, or
                               fp32 partials added in fp32), rounded to the dtype once */
    FA_GQA_ROUND_SUM32 = 1, /* per query head dK_h, dV_h are rounded (RN) to the dtype, then summed
                               over the group in fp32 (any order) and rounded once: PyTorch
                               enable_gqa (K/V expanded per head, then .sum() of the dtype tensor,
                               which accumulates in fp32) */
    FA_GQA_ROUND_SUM16 = 2  /* per head rounded, then summed in the dtype: every partial sum of
                               the group rounded (RN) to the dtype */
} fa_gqa_reduce;

/* What a backend writes to LSE for a row with no visible key (section 10.6).
 * The checker accepts the declared value and nothing else. FA_LSE_EMPTY_POS_INF also
 * covers a row whose exact LSE is NaN (a NaN score it sees): FlashAttention-2's
 * normalize_softmax_lse takes one branch for both, lse = (sum == 0 || sum != sum) ?
 * INFINITY : ..., so such a row's LSE may be NaN or +inf; under the other values it
 * must be NaN (section 10.6). */
typedef enum {
    FA_LSE_EMPTY_NEG_INF = 0, /* -inf: the contract above (log of an empty sum) */
    FA_LSE_EMPTY_POS_INF = 1, /* +inf: FlashAttention-2 (softmax.h normalize_softmax_lse) */
    FA_LSE_EMPTY_ZERO = 2     /* 0 */
} fa_lse_empty;

/* Whether a non-finite input of a MASKED pair may reach outputs (section 10.10). A pair
 * (i, j) of one sequence is masked when key j < Sk_b is hidden from row i < Sq_b by the
 * causal rule, the window or an additive -inf. Keys outside the problem (past seqused_k or a
 * sequence's end, unused cache slots, pool pages no table entry names, stride gaps) are not
 * pairs: whatever they hold never reaches an output, for every value of this field. */
typedef enum {
    FA_MASKED_NF_ISOLATED = 0,  /* the contract: a key hidden from row i never changes row i's
                                   outputs, whatever its K/V hold (and a hidden pair's Q_i, dO_i
                                   never reach dK_j, dV_j) */
    FA_MASKED_NF_PROPAGATES = 1 /* a NaN/Inf in Q_i, K_j, V_j or dO_i of a masked pair (i, j), or in
                                   the O_i given to the backward (D_i), may reach O_i, LSE_i, dQ_i,
                                   dK_j, dV_j as NaN through a product with an exact-zero weight
                                   (P_ij = 0 times V_j in P.V, dS_ij = 0 times K_j or Q_i or
                                   (dP_ij - D_i), a -inf bias added to a NaN score); never a wrong
                                   finite value, never an Inf */
} fa_masked_nonfinite;

typedef struct {
    double u_acc;        /* unit roundoff of the fp32 additions of dot products and P.V / dQ / dK / dV
                            accumulations when tc_terms = 0 (2^-24 IEEE fp32 RN; 2^-23 for additions
                            that truncate) */
    double exp_rel_err;  /* max relative error of exp(x) for the argument actually passed
                            (excludes error already in the score); see also exp_ulps */
    int scores_fp32;     /* 1: S = scale*QK^T (+mask) is computed and held in fp32 (a fused kernel);
                            2: held in fp32 but formed as (q sqrt(scale)).(k sqrt(scale)) with a
                            float sqrt(scale), q and k scaled in fp32 (an unfused fp32 graph; the
                            backward scales K, Q the same way); 0: the score stage rounds to the
                            input dtype (q and k scaled by sqrt(scale), the product, the mask add;
                            an unfused dtype graph). Oracle/BOUNDS.md 10.5 */
    int p_rounded;       /* 1: P is rounded to the input dtype before P.V (and before dV, dP use);
                            the row sum l is formed from the unrounded P */
    int ds_rounded;      /* 1: dS is rounded to the input dtype before dS.K and dS^T.Q */
    int out_rounded;     /* 1: O, dQ, dK, dV are rounded (RN) to the input dtype when stored */
    int max_rescales;    /* upper bound on online-softmax rescales per row per 1000 keys, or -1 unknown */
    int flushes_subnormals; /* 1: fp32 intermediates and stored outputs below the normal range
                               (|x| < 2^-126) may be flushed to zero (FTZ/DAZ, ex2.approx.ftz);
                               the oracle then adds an absolute floor (section 9) */
    /* --- ABI 3 --- */
    double exp_ulps;     /* max error of the exp/exp2 the kernel calls, in units in the last place
                            of its fp32 result: 1 for glibc expf, 2 for CUDA expf/exp2f and for
                            ex2.approx.f32 on normal results (PTX ISA), 0 = not stated. The oracle
                            uses max(exp_rel_err, exp_ulps 2^-23) relative and exp_ulps 2^-149
                            absolute for subnormal results (section 10.1) */
    int tc_terms;        /* 0: accumulations are IEEE-style fp32 additions of unit u_acc. n >= 1:
                            tensor-core fused multi-term adds: each step adds n exact products to
                            the fp32 accumulator c; the n products and c are aligned to the largest
                            exponent among them, each aligned term keeps 24 + tc_extra_bits bits
                            (the rest truncated, or RN when tc_align_rn), the exact sum of the
                            aligned terms is normalised and rounded to fp32 (truncated, or RN
                            when tc_norm_rn). Every other fp32 operation is IEEE. (section 10.2) */
    int tc_extra_bits;   /* alignment bits kept beyond fp32's 24-bit significand (>= 0) */
    int tc_align_rn;     /* 1: aligned terms are rounded to nearest, 0: truncated */
    int tc_norm_rn;      /* 1: the normalised step result is rounded to nearest, 0: truncated */
    int ds_scale_folded; /* 1: the softmax scale multiplies dS before dS is rounded to the dtype
                            (dS' = rd(scale P (dP - D))) and dQ = dS'.K, dK = dS'^T.Q get no further
                            scale; 0: dQ = scale (dS.K), dK = scale (dS^T.Q), the scale applied in
                            fp32 after (or inside) the products (section 10.3) */
    int dp_rounded;      /* 1: dP = dO.V^T is rounded to the input dtype before dS and D use it */
    int d_source;        /* fa_d_source */
    int gqa_reduce;      /* fa_gqa_reduce */
    int lse_empty;       /* fa_lse_empty */
    /* --- ABI 5 --- */
    int masked_nonfinite; /* fa_masked_nonfinite: 0 ISOLATED (the contract), 1 PROPAGATES */
} fa_precision;

/* Limits a backend supports; used by fa_validate_*. */
typedef struct {
    int64_t max_head_dim;     /* largest Dqk/Dv */
    int64_t head_dim_multiple;/* Dqk and Dv must be multiples of this (1 = any) */
    int dqk_must_equal_dv;    /* 1: Dqk == Dv required */
    int64_t ptr_align_bytes;  /* required alignment of q,k,v,o,dout,dq,dk,dv pointers (>= element size) */
    int unit_last_stride;     /* 1: stride[3] must be 1 for all 4-d tensors */
    /* --- ABI 4 (contract v3): 1 claims the feature (forward, and backward when backward != NULL) --- */
    int supports_varlen;      /* cu_seqlens_q, cu_seqlens_k, seqused_k */
    int supports_paged;       /* page_size >= 1 with a block table (forward; backward may still
                                 answer FA_ERR_UNSUPPORTED) */
    int supports_softcap;     /* softcap > 0 */
    int supports_sinks;       /* has_sinks */
} fa_limits;

typedef enum { FA_MEM_HOST = 0, FA_MEM_CUDA = 1 } fa_memspace;

/* The table every backend fills. A third-party backend is a shared library
 * exporting `const fa_backend *fa_backend_export(void)`. Calls are synchronous:
 * when forward/backward return, the outputs are written (device backends
 * synchronize their stream before returning). */
typedef struct fa_backend {
    int abi_version;          /* FA_ABI_VERSION */
    const char *name;
    fa_memspace memspace;
    fa_precision precision;
    fa_limits limits;
    fa_status (*forward)(const fa_fwd_args *args, fa_error *err);
    fa_status (*backward)(const fa_bwd_args *args, fa_error *err); /* NULL: forward only */
} fa_backend;

#define FA_BACKEND_EXPORT_SYMBOL "fa_backend_export"
typedef const fa_backend *(*fa_backend_export_fn)(void);

/* ---------------------------------------------------------------------------
 * Shared helpers (kernels/api/)
 * ------------------------------------------------------------------------- */
const char *fa_status_name(fa_status s);
const char *fa_dtype_name(fa_dtype d);
size_t fa_dtype_size(fa_dtype d);

/* The effective softmax scale: p->softmax_scale, or 1/sqrt(head_dim_qk) when it is 0. */
float fa_effective_scale(const fa_problem *p);

/* Validate a call against the API contract and the backend's limits.
 * FA_OK, or FA_ERR_INVALID / FA_ERR_UNSUPPORTED with err filled. Writes nothing else. */
fa_status fa_validate_fwd(const fa_fwd_args *a, const fa_limits *lim, fa_error *err);
fa_status fa_validate_bwd(const fa_bwd_args *a, const fa_limits *lim, fa_error *err);

/* Fill err (may be NULL) and return status. printf-style message. */
fa_status fa_fail(fa_error *err, fa_status status, const char *arg, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Named precision presets (kernels/api/fa_profile.c): the profile of a known
 * implementation ("tensorcore", "fp32", ...), for verify/certify/fuzz and the
 * Python package. FA_OK and *out filled, or FA_ERR_INVALID with err naming the
 * known presets. fa_precision_preset_names: NULL-terminated list. */
fa_status fa_precision_preset(const char *name, fa_precision *out, fa_error *err);
const char *const *fa_precision_preset_names(void);

/* Backends */
const fa_backend *fa_backend_cpu(void);
const fa_backend *fa_backend_cuda(void);  /* NULL when flashcheck was built without CUDA */
/* dlopen a third-party backend; checks the ABI version. */
fa_status fa_backend_load(const char *path, const fa_backend **out, fa_error *err);
/* "cpu", "cuda", or a path to a .so */
fa_status fa_backend_by_name(const char *name, const fa_backend **out, fa_error *err);
/* The CUDA backend when built in and a GPU is present, else the CPU backend. */
const fa_backend *fa_backend_default(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FLASH_API_H */
