/* fa_validate.c: fa_validate_fwd / fa_validate_bwd, the argument checks every
 * backend runs before touching memory (contract: kernels/flash_api.h).
 *
 * Order of checks (the first failure is reported):
 *   1. problem scalars: sizes, head counts, head dims, enums, softmax scale,
 *      softcap, has_sinks, page_size;
 *   2. backend limits (FA_ERR_UNSUPPORTED): head dims, Dqk == Dv, then the
 *      contract-v3 features the limits do not claim (varlen, paged, softcap, sinks);
 *   2b. contract-v3 host arrays and their exclusions: mask with cu_seqlens,
 *      paging with cu_seqlens_k, cu_seqlens_q/k, the paged geometry, seqused_k,
 *      the block table entries each sequence uses, sinks present;
 *   3. per tensor, in argument order: pointer present, pointer alignment,
 *      strides >= 0, unit last stride (limit), element count and address
 *      extent fit in 64 bits;
 *   4. every output: no two of its elements share an address;
 *   5. every output: its byte range meets no other tensor's byte range.
 * A tensor with zero elements touches no memory: its range is empty, it
 * overlaps nothing and its strides are not bounded (they are still >= 0).
 * A packed tensor (cu_seqlens given) is the view [1, total, H, D] with its
 * stride[0] ignored (total = cu[B], so its range ends at the LAST packed row); a
 * paged K/V/dK/dV is the pool [num_pages, page_size, Hkv, D]; sinks and dsinks
 * are [Hq] fp32 contiguous.
 * Nothing but *err is written, and *err only on failure. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/flash_api.h"

// ----------------------------------------------------------------------------
// one tensor argument as the checks see it

typedef struct {
    const char *name;       /* argument name: "q", "lse", "mask", ... */
    uintptr_t addr;         /* the pointer */
    const int64_t *stride;  /* rank entries, in elements */
    int rank;               /* 4, or 3 for lse */
    int64_t dim[4];         /* logical extents in the stride order */
    const char *dim_name[4];
    int64_t elem_size;      /* bytes */
    int64_t align_limit;    /* backend alignment requirement in bytes (0: none) */
    bool unit_last_stride;  /* backend requires stride[3] == 1 (when dim[3] > 1) */
    bool is_output;
    bool empty;             /* computed: some dim is 0 */
    uintptr_t lo, hi;       /* computed: byte range [lo, hi), empty when lo == hi */
    int64_t own_stride[4];  /* strides rewritten for a packed view (stride[0] ignored) */
} val_view;

#define VAL_MAX_VIEWS 13

static const char *val_dims_tensor_q[4] = {"batch", "seqlen_q", "heads_q", "head_dim_qk"};
static const char *val_dims_tensor_k[4] = {"batch", "seqlen_k", "heads_kv", "head_dim_qk"};
static const char *val_dims_tensor_v[4] = {"batch", "seqlen_k", "heads_kv", "head_dim_v"};
static const char *val_dims_tensor_o[4] = {"batch", "seqlen_q", "heads_q", "head_dim_v"};
static const char *val_dims_mask[4] = {"batch", "heads_q", "seqlen_q", "seqlen_k"};
static const char *val_dims_lse[4] = {"batch", "heads_q", "seqlen_q", ""};
static const char *val_dims_packed_q[4] = {"batch", "cu_seqlens_q[batch]", "heads_q", "head_dim"};
static const char *val_dims_packed_k[4] = {"batch", "cu_seqlens_k[batch]", "heads_kv", "head_dim"};
static const char *val_dims_pool[4] = {"paged.num_pages", "page_size", "heads_kv", "head_dim"};
static const char *val_dims_packed_lse[4] = {"batch", "heads_q", "cu_seqlens_q[batch]", ""};
static const char *val_dims_sinks[4] = {"heads_q", "", "", ""};

static void val_set(val_view *v, const char *name, const void *ptr, const int64_t *stride, int rank,
                    int64_t d0, int64_t d1, int64_t d2, int64_t d3, const char **dim_name,
                    int64_t elem_size, bool is_output) {
    v->name = name;
    v->addr = (uintptr_t)ptr;
    v->stride = stride;
    v->rank = rank;
    v->dim[0] = d0; v->dim[1] = d1; v->dim[2] = d2; v->dim[3] = d3;
    for (int i = 0; i < 4; i++) v->dim_name[i] = dim_name[i];
    v->elem_size = elem_size;
    v->align_limit = 0;
    v->unit_last_stride = false;
    v->is_output = is_output;
    v->empty = false;
    v->lo = v->hi = 0;
}

/* A q/k/v/o/dout/dq/dk/dv view: element of the problem dtype, backend limits apply. */
static void val_set_data(val_view *v, const char *name, const fa_tensor *t, int64_t d0, int64_t d1,
                         int64_t d2, int64_t d3, const char **dim_name, int64_t elem_size,
                         const fa_limits *lim, bool is_output) {
    val_set(v, name, t->ptr, t->stride, 4, d0, d1, d2, d3, dim_name, elem_size, is_output);
    if (lim) {
        v->align_limit = lim->ptr_align_bytes;
        v->unit_last_stride = lim->unit_last_stride != 0;
    }
}

// ----------------------------------------------------------------------------
// 1, 2: problem scalars and backend limits

static fa_status val_problem(const fa_problem *p, const fa_limits *lim, fa_error *err) {
    const struct { const char *name; int64_t value; } counts[3] = {
        {"batch", p->batch}, {"seqlen_q", p->seqlen_q}, {"seqlen_k", p->seqlen_k}};
    for (int i = 0; i < 3; i++)
        if (counts[i].value < 0)
            return fa_fail(err, FA_ERR_INVALID, counts[i].name,
                           "%s is %lld; it must be >= 0 (0 is allowed and writes nothing).",
                           counts[i].name, (long long)counts[i].value);
    if (p->heads_q < 1)
        return fa_fail(err, FA_ERR_INVALID, "heads_q",
                       "heads_q is %lld; a problem needs at least 1 query head.", (long long)p->heads_q);
    if (p->heads_kv < 1)
        return fa_fail(err, FA_ERR_INVALID, "heads_kv",
                       "heads_kv is %lld; a problem needs at least 1 key/value head.",
                       (long long)p->heads_kv);
    if (p->heads_q % p->heads_kv != 0)
        return fa_fail(err, FA_ERR_INVALID, "heads_kv",
                       "heads_q (%lld) is not a multiple of heads_kv (%lld); GQA needs "
                       "heads_q = g * heads_kv.", (long long)p->heads_q, (long long)p->heads_kv);
    if (p->head_dim_qk < 1)
        return fa_fail(err, FA_ERR_INVALID, "head_dim_qk",
                       "head_dim_qk is %lld; it must be >= 1.", (long long)p->head_dim_qk);
    if (p->head_dim_v < 1)
        return fa_fail(err, FA_ERR_INVALID, "head_dim_v",
                       "head_dim_v is %lld; it must be >= 1.", (long long)p->head_dim_v);
    if (p->dtype != FA_F16 && p->dtype != FA_BF16)
        return fa_fail(err, FA_ERR_INVALID, "dtype",
                       "dtype is %d; use FA_F16 (0) or FA_BF16 (1).", (int)p->dtype);
    if (p->causal != FA_CAUSAL_NONE && p->causal != FA_CAUSAL_TOP_LEFT &&
        p->causal != FA_CAUSAL_BOTTOM_RIGHT)
        return fa_fail(err, FA_ERR_INVALID, "causal",
                       "causal is %d; use FA_CAUSAL_NONE (0), FA_CAUSAL_TOP_LEFT (1) or "
                       "FA_CAUSAL_BOTTOM_RIGHT (2).", (int)p->causal);
    if (p->window_align != FA_ALIGN_TOP_LEFT && p->window_align != FA_ALIGN_BOTTOM_RIGHT)
        return fa_fail(err, FA_ERR_INVALID, "window_align",
                       "window_align is %d; use FA_ALIGN_TOP_LEFT (0) or FA_ALIGN_BOTTOM_RIGHT (1).",
                       (int)p->window_align);
    if (!isfinite(p->softmax_scale))
        return fa_fail(err, FA_ERR_INVALID, "softmax_scale",
                       "softmax_scale is %g; pass a finite scale, or 0 for 1/sqrt(head_dim_qk).",
                       (double)p->softmax_scale);
    if (!isfinite(p->softcap) || p->softcap < 0.0f)
        return fa_fail(err, FA_ERR_INVALID, "softcap",
                       "softcap is %g; pass 0 (no capping) or a finite cap > 0.", (double)p->softcap);
    if (p->has_sinks != 0 && p->has_sinks != 1)
        return fa_fail(err, FA_ERR_INVALID, "has_sinks",
                       "has_sinks is %d; use 0 (no sinks) or 1 (sinks[heads_q] given).", p->has_sinks);
    if (p->page_size < 0)
        return fa_fail(err, FA_ERR_INVALID, "page_size",
                       "page_size is %lld; use 0 (dense K/V) or >= 1 (paged through paged.block_table).",
                       (long long)p->page_size);
    if (lim == NULL) return FA_OK;
    const struct { const char *name; int64_t value; } dims[2] = {
        {"head_dim_qk", p->head_dim_qk}, {"head_dim_v", p->head_dim_v}};
    for (int i = 0; i < 2; i++) {
        if (lim->max_head_dim > 0 && dims[i].value > lim->max_head_dim)
            return fa_fail(err, FA_ERR_UNSUPPORTED, dims[i].name,
                           "%s is %lld; this backend supports head dims up to %lld.", dims[i].name,
                           (long long)dims[i].value, (long long)lim->max_head_dim);
        if (lim->head_dim_multiple > 1 && dims[i].value % lim->head_dim_multiple != 0)
            return fa_fail(err, FA_ERR_UNSUPPORTED, dims[i].name,
                           "%s is %lld; this backend needs a multiple of %lld (pad the head dim).",
                           dims[i].name, (long long)dims[i].value, (long long)lim->head_dim_multiple);
    }
    if (lim->dqk_must_equal_dv && p->head_dim_qk != p->head_dim_v)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "head_dim_v",
                       "head_dim_v (%lld) differs from head_dim_qk (%lld); this backend needs them "
                       "equal.", (long long)p->head_dim_v, (long long)p->head_dim_qk);
    return FA_OK;
}

/* 2 (features): the contract-v3 features a call uses that the limits do not claim. */
static fa_status val_features(const fa_problem *p, const fa_varlen *vl, const fa_limits *lim,
                              fa_error *err) {
    if (lim == NULL) return FA_OK;
    const struct { const char *name; bool used; int claimed; const char *what; } f[6] = {
        {"varlen.cu_seqlens_q", vl->cu_seqlens_q != NULL, lim->supports_varlen, "packed variable-length Q"},
        {"varlen.cu_seqlens_k", vl->cu_seqlens_k != NULL, lim->supports_varlen, "packed variable-length K/V"},
        {"varlen.seqused_k", vl->seqused_k != NULL, lim->supports_varlen, "per-sequence used keys"},
        {"page_size", p->page_size >= 1, lim->supports_paged, "a paged K/V cache"},
        {"softcap", p->softcap > 0.0f, lim->supports_softcap, "logit softcapping"},
        {"has_sinks", p->has_sinks != 0, lim->supports_sinks, "attention sinks"}};
    for (int i = 0; i < 6; i++)
        if (f[i].used && !f[i].claimed)
            return fa_fail(err, FA_ERR_UNSUPPORTED, f[i].name,
                           "%s is set but this backend does not support %s (its fa_limits do not claim "
                           "it); run the case without it or on a backend that claims it.", f[i].name,
                           f[i].what);
    return FA_OK;
}

// ----------------------------------------------------------------------------
// 2b: the contract-v3 host arrays (cu_seqlens, seqused_k, block table)

/* cu[0] == 0, non-decreasing, every span <= max_len. */
static fa_status val_cu(const int32_t *cu, int64_t batch, int64_t max_len, const char *name,
                        const char *len_name, fa_error *err) {
    if (cu[0] != 0)
        return fa_fail(err, FA_ERR_INVALID, name, "%s[0] is %d; it must be 0 (offsets of packed sequences "
                       "start at row 0).", name, (int)cu[0]);
    for (int64_t b = 0; b < batch; b++) {
        int64_t span = (int64_t)cu[b + 1] - (int64_t)cu[b];
        if (span < 0)
            return fa_fail(err, FA_ERR_INVALID, name, "%s decreases at sequence %lld (%d then %d); the "
                           "offsets must be non-decreasing.", name, (long long)b, (int)cu[b], (int)cu[b + 1]);
        if (span > max_len)
            return fa_fail(err, FA_ERR_INVALID, name, "sequence %lld of %s has length %lld, above %s = "
                           "%lld (which must be the maximum over sequences).", (long long)b, name,
                           (long long)span, len_name, (long long)max_len);
    }
    return FA_OK;
}

/* Keys allocated to sequence b: the cu_k span, the pages of its table row, or seqlen_k. */
static int64_t val_alloc_k(const fa_problem *p, const fa_varlen *vl, const fa_paged *pg, int64_t b) {
    if (vl->cu_seqlens_k) return (int64_t)vl->cu_seqlens_k[b + 1] - (int64_t)vl->cu_seqlens_k[b];
    if (p->page_size >= 1) return pg->max_pages_per_seq * p->page_size; /* checked not to overflow */
    return p->seqlen_k;
}

static fa_status val_v3(const fa_problem *p, const fa_varlen *vl, const fa_paged *pg, const fa_mask *mask,
                        const float *sinks, fa_error *err) {
    bool paged = p->page_size >= 1;
    if (mask->ptr != NULL && (vl->cu_seqlens_q != NULL || vl->cu_seqlens_k != NULL))
        return fa_fail(err, FA_ERR_INVALID, "mask", "an additive mask is not allowed with packed sequences "
                       "(cu_seqlens); pass the mask of each sequence in its own dense call.");
    if (paged && vl->cu_seqlens_k != NULL)
        return fa_fail(err, FA_ERR_INVALID, "varlen.cu_seqlens_k", "varlen.cu_seqlens_k is given with a paged "
                       "K/V cache (page_size %lld); K/V are either packed or paged: use seqused_k for the "
                       "lengths of paged sequences.", (long long)p->page_size);
    fa_status st;
    if (vl->cu_seqlens_q &&
        (st = val_cu(vl->cu_seqlens_q, p->batch, p->seqlen_q, "varlen.cu_seqlens_q", "seqlen_q", err)) != FA_OK)
        return st;
    if (vl->cu_seqlens_k &&
        (st = val_cu(vl->cu_seqlens_k, p->batch, p->seqlen_k, "varlen.cu_seqlens_k", "seqlen_k", err)) != FA_OK)
        return st;
    if (!paged && pg->block_table != NULL)
        return fa_fail(err, FA_ERR_INVALID, "paged.block_table", "paged.block_table is given but page_size "
                       "is 0; set page_size >= 1 for a paged cache, or pass no table for dense K/V.");
    if (paged) {
        if (pg->block_table == NULL)
            return fa_fail(err, FA_ERR_INVALID, "paged.block_table", "page_size is %lld but "
                           "paged.block_table is NULL; pass the [batch, max_pages_per_seq] page table.",
                           (long long)p->page_size);
        if (pg->max_pages_per_seq < 1)
            return fa_fail(err, FA_ERR_INVALID, "paged.max_pages_per_seq", "paged.max_pages_per_seq is "
                           "%lld; it must be >= 1.", (long long)pg->max_pages_per_seq);
        if (pg->table_stride < pg->max_pages_per_seq)
            return fa_fail(err, FA_ERR_INVALID, "paged.table_stride", "paged.table_stride (%lld) is below "
                           "paged.max_pages_per_seq (%lld); rows of the block table would overlap.",
                           (long long)pg->table_stride, (long long)pg->max_pages_per_seq);
        if (pg->num_pages < 1)
            return fa_fail(err, FA_ERR_INVALID, "paged.num_pages", "paged.num_pages is %lld; the pool "
                           "needs at least one page.", (long long)pg->num_pages);
        int64_t cap, last_row;
        if (__builtin_mul_overflow(pg->max_pages_per_seq, p->page_size, &cap) || cap < p->seqlen_k)
            return fa_fail(err, FA_ERR_INVALID, "paged.max_pages_per_seq", "paged.max_pages_per_seq (%lld) "
                           "* page_size (%lld) holds fewer than seqlen_k = %lld keys (or overflows); give "
                           "each sequence enough table entries.", (long long)pg->max_pages_per_seq,
                           (long long)p->page_size, (long long)p->seqlen_k);
        if (p->batch > 0 && __builtin_mul_overflow(p->batch - 1, pg->table_stride, &last_row))
            return fa_fail(err, FA_ERR_INVALID, "paged.table_stride", "paged.table_stride (%lld) times "
                           "batch - 1 overflows 64 bits.", (long long)pg->table_stride);
    }
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t alloc = val_alloc_k(p, vl, pg, b), used = alloc;
        if (paged) used = p->seqlen_k; /* without seqused_k every sequence uses seqlen_k keys */
        if (vl->seqused_k) {
            used = vl->seqused_k[b];
            const int64_t cap = alloc < p->seqlen_k ? alloc : p->seqlen_k; /* seqlen_k is the maximum */
            if (used < 0 || used > cap)
                return fa_fail(err, FA_ERR_INVALID, "varlen.seqused_k", "varlen.seqused_k[%lld] is %lld; it "
                               "must be in [0, %lld] (the keys allocated to sequence %lld, at most seqlen_k).",
                               (long long)b, (long long)used, (long long)cap, (long long)b);
        }
        if (!paged) continue;
        int64_t pages = (used + p->page_size - 1) / p->page_size;
        const int32_t *row = pg->block_table + b * pg->table_stride;
        for (int64_t j = 0; j < pages; j++)
            if (row[j] < 0 || (int64_t)row[j] >= pg->num_pages)
                return fa_fail(err, FA_ERR_INVALID, "paged.block_table", "paged.block_table[%lld][%lld] is "
                               "%d; page numbers must be in [0, num_pages = %lld).", (long long)b,
                               (long long)j, (int)row[j], (long long)pg->num_pages);
    }
    if (p->has_sinks && sinks == NULL)
        return fa_fail(err, FA_ERR_INVALID, "sinks", "has_sinks is 1 but sinks is NULL; pass the [heads_q] "
                       "fp32 sink logits.");
    return FA_OK;
}

// ----------------------------------------------------------------------------
// 3: one tensor on its own

static fa_status val_tensor(val_view *v, fa_error *err) {
    char arg[32];
    snprintf(arg, sizeof(arg), "%s.ptr", v->name);
    if (v->addr == 0)
        return fa_fail(err, FA_ERR_INVALID, arg, "%s is NULL; pass a pointer to the %s buffer.", arg,
                       v->name);
    if (v->addr % (uintptr_t)v->elem_size != 0)
        return fa_fail(err, FA_ERR_INVALID, arg,
                       "%s (%p) is not aligned to its element size (%lld bytes); pass an aligned "
                       "pointer.", arg, (void *)v->addr, (long long)v->elem_size);
    if (v->align_limit > v->elem_size && v->addr % (uintptr_t)v->align_limit != 0)
        return fa_fail(err, FA_ERR_UNSUPPORTED, arg,
                       "%s (%p) is not aligned to %lld bytes, which this backend requires; copy the "
                       "tensor to an aligned buffer.", arg, (void *)v->addr, (long long)v->align_limit);
    for (int i = 0; i < v->rank; i++) {
        if (v->stride[i] < 0) {
            snprintf(arg, sizeof(arg), "%s.stride[%d]", v->name, i);
            return fa_fail(err, FA_ERR_INVALID, arg,
                           "%s is %lld; strides must be >= 0 (make a copy instead of a reversed "
                           "view).", arg, (long long)v->stride[i]);
        }
    }
    if (v->unit_last_stride && v->rank == 4 && v->dim[3] > 1 && v->stride[3] != 1) {
        snprintf(arg, sizeof(arg), "%s.stride[3]", v->name);
        return fa_fail(err, FA_ERR_UNSUPPORTED, arg,
                       "%s is %lld; this backend needs the head dim contiguous (stride 1); make the "
                       "tensor contiguous in its last dimension.", arg, (long long)v->stride[3]);
    }
    /* element count (a broadcast input may have many elements in little memory) */
    int64_t count = 1;
    for (int i = 0; i < v->rank; i++) {
        if (__builtin_mul_overflow(count, v->dim[i], &count))
            return fa_fail(err, FA_ERR_INVALID, v->name,
                           "%s has more than 2^63 elements (%s = %lld overflows); reduce the problem "
                           "size.", v->name, v->dim_name[i], (long long)v->dim[i]);
    }
    v->empty = (count == 0);
    if (v->empty) {
        v->lo = v->hi = v->addr;
        return FA_OK;
    }
    /* largest element offset: sum (n_i - 1) * stride_i. On overflow, blame the
     * stride whose product overflows, else the one with the largest term. */
    int64_t last = 0, term[4];
    int culprit = -1;
    for (int i = 0; i < v->rank && culprit < 0; i++)
        if (__builtin_mul_overflow(v->dim[i] - 1, v->stride[i], &term[i])) culprit = i;
    if (culprit < 0) {
        for (int i = 0; i < v->rank; i++) {
            if (__builtin_add_overflow(last, term[i], &last)) {
                culprit = 0;
                for (int k = 1; k < v->rank; k++)
                    if (term[k] > term[culprit]) culprit = k;
                break;
            }
        }
    }
    if (culprit >= 0) {
        snprintf(arg, sizeof(arg), "%s.stride[%d]", v->name, culprit);
        return fa_fail(err, FA_ERR_INVALID, arg,
                       "%s (%lld) times %s - 1 (%lld) makes the extent of %s overflow 64 bits; "
                       "check the strides.", arg, (long long)v->stride[culprit],
                       v->dim_name[culprit], (long long)(v->dim[culprit] - 1), v->name);
    }
    int64_t bytes;
    uintptr_t hi;
    if (__builtin_add_overflow(last, (int64_t)1, &bytes) ||
        __builtin_mul_overflow(bytes, v->elem_size, &bytes) ||
        __builtin_add_overflow(v->addr, (uintptr_t)bytes, &hi)) {
        return fa_fail(err, FA_ERR_INVALID, v->name,
                       "the byte range of %s (largest element offset %lld) overflows the address "
                       "space; check the pointer and strides.", v->name, (long long)last);
    }
    v->lo = v->addr;
    v->hi = hi;
    return FA_OK;
}

// ----------------------------------------------------------------------------
// 4: an output must not map two of its elements to one address
//
// Sufficient rule: sort the dims with extent > 1 by stride; each stride must be
// >= the previous stride times the previous extent (and the smallest >= 1).
// Then the offsets of distinct index tuples are distinct (mixed-radix argument).

static fa_status val_output_layout(const val_view *v, fa_error *err) {
    if (v->empty) return FA_OK;
    int order[4], n = 0;
    for (int i = 0; i < v->rank; i++)
        if (v->dim[i] > 1) order[n++] = i;
    for (int a = 1; a < n; a++) { /* insertion sort by (stride, index): stable, tiny */
        int x = order[a], b = a - 1;
        while (b >= 0 && v->stride[order[b]] > v->stride[x]) { order[b + 1] = order[b]; b--; }
        order[b + 1] = x;
    }
    char arg[32];
    for (int a = 0; a < n; a++) {
        int i = order[a];
        if (v->stride[i] == 0) {
            snprintf(arg, sizeof(arg), "%s.stride[%d]", v->name, i);
            return fa_fail(err, FA_ERR_INVALID, arg,
                           "%s is 0 while %s is %lld: output %s would write %lld elements to one "
                           "address; give the output a real (non-broadcast) layout.", arg,
                           v->dim_name[i], (long long)v->dim[i], v->name, (long long)v->dim[i]);
        }
        if (a == 0) continue;
        int prev = order[a - 1];
        int64_t span;
        bool over = __builtin_mul_overflow(v->stride[prev], v->dim[prev], &span);
        if (over || v->stride[i] < span) {
            snprintf(arg, sizeof(arg), "%s.stride[%d]", v->name, i);
            return fa_fail(err, FA_ERR_INVALID, arg,
                           "%s (%lld) is smaller than %s.stride[%d] * %s (%lld * %lld): output %s "
                           "would map two elements to one address; use non-overlapping strides.",
                           arg, (long long)v->stride[i], v->name, prev, v->dim_name[prev],
                           (long long)v->stride[prev], (long long)v->dim[prev], v->name);
        }
    }
    return FA_OK;
}

// ----------------------------------------------------------------------------
// 5: an output's bytes must not meet any other tensor's bytes

static fa_status val_disjoint(const val_view *views, int n, fa_error *err) {
    for (int a = 0; a < n; a++) {
        const val_view *o = &views[a];
        if (!o->is_output || o->empty) continue;
        for (int b = 0; b < n; b++) {
            const val_view *t = &views[b];
            if (b == a || t->empty) continue;
            if (o->lo < t->hi && t->lo < o->hi)
                return fa_fail(err, FA_ERR_INVALID, o->name,
                               "output %s (bytes [%p, %p)) overlaps %s %s (bytes [%p, %p)); outputs "
                               "must not share memory with any input or other output: give %s its "
                               "own buffer.", o->name, (void *)o->lo, (void *)o->hi,
                               t->is_output ? "output" : "input", t->name, (void *)t->lo,
                               (void *)t->hi, o->name);
        }
    }
    return FA_OK;
}

static fa_status val_views(val_view *views, int n, fa_error *err) {
    fa_status st;
    for (int i = 0; i < n; i++)
        if ((st = val_tensor(&views[i], err)) != FA_OK) return st;
    for (int i = 0; i < n; i++)
        if (views[i].is_output && (st = val_output_layout(&views[i], err)) != FA_OK) return st;
    return val_disjoint(views, n, err);
}

// ----------------------------------------------------------------------------
// the views of one call: each tensor takes the shape of Q, K, V or O (its gradient has the same)

typedef enum { VAL_LIKE_Q, VAL_LIKE_K, VAL_LIKE_V, VAL_LIKE_O } val_like;

/* Packed rows (cu[B], -1 when not packed) and the paged pool of one call. */
typedef struct {
    int64_t total_q, total_k;
    int64_t page_size, num_pages; /* page_size 0: not paged */
} val_geom;

static val_geom val_geometry(const fa_problem *p, const fa_varlen *vl, const fa_paged *pg) {
    val_geom g = {-1, -1, 0, 0};
    if (vl->cu_seqlens_q) g.total_q = vl->cu_seqlens_q[p->batch];
    if (vl->cu_seqlens_k) g.total_k = vl->cu_seqlens_k[p->batch];
    if (p->page_size >= 1) { g.page_size = p->page_size; g.num_pages = pg->num_pages; }
    return g;
}

/* The view of a packed tensor: [1, total, H, D] with stride[0] ignored. */
static void val_set_packed(val_view *v, const char *name, const fa_tensor *t, int64_t total, int64_t h,
                           int64_t d, const char **dim_name, int64_t es, const fa_limits *lim,
                           bool is_output) {
    val_set_data(v, name, t, 1, total, h, d, dim_name, es, lim, is_output);
    v->own_stride[0] = 0;
    for (int i = 1; i < 4; i++) v->own_stride[i] = t->stride[i];
    v->stride = v->own_stride;
}

static void val_add_v3(val_view *views, int *n, const char *name, const fa_tensor *t, val_like like,
                       const fa_problem *p, const val_geom *g, int64_t es, const fa_limits *lim,
                       bool is_output);

static void val_add(val_view *views, int *n, const char *name, const fa_tensor *t, val_like like,
                    const fa_problem *p, int64_t es, const fa_limits *lim, bool is_output) {
    switch (like) {
    case VAL_LIKE_Q:
        val_set_data(&views[(*n)++], name, t, p->batch, p->seqlen_q, p->heads_q, p->head_dim_qk,
                     val_dims_tensor_q, es, lim, is_output);
        break;
    case VAL_LIKE_K:
        val_set_data(&views[(*n)++], name, t, p->batch, p->seqlen_k, p->heads_kv, p->head_dim_qk,
                     val_dims_tensor_k, es, lim, is_output);
        break;
    case VAL_LIKE_V:
        val_set_data(&views[(*n)++], name, t, p->batch, p->seqlen_k, p->heads_kv, p->head_dim_v,
                     val_dims_tensor_v, es, lim, is_output);
        break;
    case VAL_LIKE_O:
        val_set_data(&views[(*n)++], name, t, p->batch, p->seqlen_q, p->heads_q, p->head_dim_v,
                     val_dims_tensor_o, es, lim, is_output);
        break;
    }
}

static void val_add_v3(val_view *views, int *n, const char *name, const fa_tensor *t, val_like like,
                       const fa_problem *p, const val_geom *g, int64_t es, const fa_limits *lim,
                       bool is_output) {
    bool q_side = like == VAL_LIKE_Q || like == VAL_LIKE_O;
    int64_t d = (like == VAL_LIKE_Q || like == VAL_LIKE_K) ? p->head_dim_qk : p->head_dim_v;
    if (q_side && g->total_q >= 0)
        val_set_packed(&views[(*n)++], name, t, g->total_q, p->heads_q, d, val_dims_packed_q, es, lim, is_output);
    else if (!q_side && g->total_k >= 0)
        val_set_packed(&views[(*n)++], name, t, g->total_k, p->heads_kv, d, val_dims_packed_k, es, lim, is_output);
    else if (!q_side && g->page_size >= 1)
        val_set_data(&views[(*n)++], name, t, g->num_pages, g->page_size, p->heads_kv, d, val_dims_pool, es,
                     lim, is_output);
    else
        val_add(views, n, name, t, like, p, es, lim, is_output);
}

static void val_add_lse(val_view *views, int *n, const fa_lse *lse, const fa_problem *p, const val_geom *g,
                        bool is_output) {
    if (g->total_q >= 0) { /* packed: (b, h, i) at h*st[1] + (cu_q[b] + i)*st[2] */
        val_view *v = &views[(*n)++];
        val_set(v, "lse", lse->ptr, lse->stride, 3, 1, p->heads_q, g->total_q, 1, val_dims_packed_lse, 4,
                is_output);
        v->own_stride[0] = 0; v->own_stride[1] = lse->stride[1]; v->own_stride[2] = lse->stride[2];
        v->stride = v->own_stride;
        return;
    }
    val_set(&views[(*n)++], "lse", lse->ptr, lse->stride, 3, p->batch, p->heads_q, p->seqlen_q, 1,
            val_dims_lse, 4, is_output);
}

static const int64_t val_unit_stride[4] = {1, 0, 0, 0};

/* sinks [Hq] (input) or dsinks [Hq] (output), fp32 contiguous; only with has_sinks. */
static void val_add_sinks(val_view *views, int *n, const char *name, const float *ptr, const fa_problem *p,
                          bool is_output) {
    val_set(&views[(*n)++], name, ptr, val_unit_stride, 1, p->heads_q, 1, 1, 1, val_dims_sinks, 4, is_output);
}

static void val_add_mask(val_view *views, int *n, const fa_mask *mask, const fa_problem *p) {
    if (mask->ptr != NULL)
        val_set(&views[(*n)++], "mask", mask->ptr, mask->stride, 4, p->batch, p->heads_q, p->seqlen_q,
                p->seqlen_k, val_dims_mask, 4, false);
}

// ----------------------------------------------------------------------------
// public entry points

fa_status fa_validate_fwd(const fa_fwd_args *a, const fa_limits *lim, fa_error *err) {
    if (a == NULL) return fa_fail(err, FA_ERR_INVALID, "args", "args is NULL; pass a fa_fwd_args.");
    const fa_problem *p = &a->p;
    fa_status st = val_problem(p, lim, err);
    if (st != FA_OK) return st;
    if ((st = val_features(p, &a->varlen, lim, err)) != FA_OK) return st;
    if ((st = val_v3(p, &a->varlen, &a->paged, &a->mask, a->sinks, err)) != FA_OK) return st;
    int64_t es = (int64_t)fa_dtype_size(p->dtype);
    val_geom g = val_geometry(p, &a->varlen, &a->paged);
    val_view v[VAL_MAX_VIEWS];
    int n = 0;
    val_add_v3(v, &n, "q", &a->q, VAL_LIKE_Q, p, &g, es, lim, false);
    val_add_v3(v, &n, "k", &a->k, VAL_LIKE_K, p, &g, es, lim, false);
    val_add_v3(v, &n, "v", &a->v, VAL_LIKE_V, p, &g, es, lim, false);
    val_add_mask(v, &n, &a->mask, p);
    if (p->has_sinks) val_add_sinks(v, &n, "sinks", a->sinks, p, false);
    val_add_v3(v, &n, "o", &a->o, VAL_LIKE_O, p, &g, es, lim, true);
    val_add_lse(v, &n, &a->lse, p, &g, true);
    return val_views(v, n, err);
}

fa_status fa_validate_bwd(const fa_bwd_args *a, const fa_limits *lim, fa_error *err) {
    if (a == NULL) return fa_fail(err, FA_ERR_INVALID, "args", "args is NULL; pass a fa_bwd_args.");
    const fa_problem *p = &a->p;
    fa_status st = val_problem(p, lim, err);
    if (st != FA_OK) return st;
    if ((st = val_features(p, &a->varlen, lim, err)) != FA_OK) return st;
    if ((st = val_v3(p, &a->varlen, &a->paged, &a->mask, a->sinks, err)) != FA_OK) return st;
    int64_t es = (int64_t)fa_dtype_size(p->dtype);
    val_geom g = val_geometry(p, &a->varlen, &a->paged);
    val_view v[VAL_MAX_VIEWS];
    int n = 0;
    val_add_v3(v, &n, "q", &a->q, VAL_LIKE_Q, p, &g, es, lim, false);
    val_add_v3(v, &n, "k", &a->k, VAL_LIKE_K, p, &g, es, lim, false);
    val_add_v3(v, &n, "v", &a->v, VAL_LIKE_V, p, &g, es, lim, false);
    val_add_v3(v, &n, "o", &a->o, VAL_LIKE_O, p, &g, es, lim, false);
    val_add_v3(v, &n, "dout", &a->dout, VAL_LIKE_O, p, &g, es, lim, false);
    val_add_lse(v, &n, &a->lse, p, &g, false);
    val_add_mask(v, &n, &a->mask, p);
    if (p->has_sinks) val_add_sinks(v, &n, "sinks", a->sinks, p, false);
    val_add_v3(v, &n, "dq", &a->dq, VAL_LIKE_Q, p, &g, es, lim, true);
    val_add_v3(v, &n, "dk", &a->dk, VAL_LIKE_K, p, &g, es, lim, true);
    val_add_v3(v, &n, "dv", &a->dv, VAL_LIKE_V, p, &g, es, lim, true);
    if (p->has_sinks && a->dsinks != NULL) val_add_sinks(v, &n, "dsinks", a->dsinks, p, true);
    return val_views(v, n, err);
}
