/* fa_validate.c: fa_validate_fwd / fa_validate_bwd, the argument checks every
 * backend runs before touching memory (contract: kernels/flash_api.h).
 *
 * Order of checks (the first failure is reported):
 *   1. problem scalars: sizes, head counts, head dims, enums, softmax scale;
 *   2. backend limits (FA_ERR_UNSUPPORTED): head dims, Dqk == Dv;
 *   3. per tensor, in argument order: pointer present, pointer alignment,
 *      strides >= 0, unit last stride (limit), element count and address
 *      extent fit in 64 bits;
 *   4. every output: no two of its elements share an address;
 *   5. every output: its byte range meets no other tensor's byte range.
 * A tensor with zero elements touches no memory: its range is empty, it
 * overlaps nothing and its strides are not bounded (they are still >= 0).
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
} val_view;

#define VAL_MAX_VIEWS 11

static const char *val_dims_tensor_q[4] = {"batch", "seqlen_q", "heads_q", "head_dim_qk"};
static const char *val_dims_tensor_k[4] = {"batch", "seqlen_k", "heads_kv", "head_dim_qk"};
static const char *val_dims_tensor_v[4] = {"batch", "seqlen_k", "heads_kv", "head_dim_v"};
static const char *val_dims_tensor_o[4] = {"batch", "seqlen_q", "heads_q", "head_dim_v"};
static const char *val_dims_mask[4] = {"batch", "heads_q", "seqlen_q", "seqlen_k"};
static const char *val_dims_lse[4] = {"batch", "heads_q", "seqlen_q", ""};

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

static void val_add_lse(val_view *views, int *n, const fa_lse *lse, const fa_problem *p, bool is_output) {
    val_set(&views[(*n)++], "lse", lse->ptr, lse->stride, 3, p->batch, p->heads_q, p->seqlen_q, 1,
            val_dims_lse, 4, is_output);
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
    int64_t es = (int64_t)fa_dtype_size(p->dtype);
    val_view v[VAL_MAX_VIEWS];
    int n = 0;
    val_add(v, &n, "q", &a->q, VAL_LIKE_Q, p, es, lim, false);
    val_add(v, &n, "k", &a->k, VAL_LIKE_K, p, es, lim, false);
    val_add(v, &n, "v", &a->v, VAL_LIKE_V, p, es, lim, false);
    val_add_mask(v, &n, &a->mask, p);
    val_add(v, &n, "o", &a->o, VAL_LIKE_O, p, es, lim, true);
    val_add_lse(v, &n, &a->lse, p, true);
    return val_views(v, n, err);
}

fa_status fa_validate_bwd(const fa_bwd_args *a, const fa_limits *lim, fa_error *err) {
    if (a == NULL) return fa_fail(err, FA_ERR_INVALID, "args", "args is NULL; pass a fa_bwd_args.");
    const fa_problem *p = &a->p;
    fa_status st = val_problem(p, lim, err);
    if (st != FA_OK) return st;
    int64_t es = (int64_t)fa_dtype_size(p->dtype);
    val_view v[VAL_MAX_VIEWS];
    int n = 0;
    val_add(v, &n, "q", &a->q, VAL_LIKE_Q, p, es, lim, false);
    val_add(v, &n, "k", &a->k, VAL_LIKE_K, p, es, lim, false);
    val_add(v, &n, "v", &a->v, VAL_LIKE_V, p, es, lim, false);
    val_add(v, &n, "o", &a->o, VAL_LIKE_O, p, es, lim, false);
    val_add(v, &n, "dout", &a->dout, VAL_LIKE_O, p, es, lim, false);
    val_add_lse(v, &n, &a->lse, p, false);
    val_add_mask(v, &n, &a->mask, p);
    val_add(v, &n, "dq", &a->dq, VAL_LIKE_Q, p, es, lim, true);
    val_add(v, &n, "dk", &a->dk, VAL_LIKE_K, p, es, lim, true);
    val_add(v, &n, "dv", &a->dv, VAL_LIKE_V, p, es, lim, true);
    return val_views(v, n, err);
}
