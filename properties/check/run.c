/* run.c: materialize a case, call a backend (host or CUDA memory), bring the
 * buffers back; and the buffer-level checks (guards, inputs unchanged,
 * bitwise equality, unwritten outputs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/check/check.h"

#if defined(__has_include)
#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define FC_HAVE_CUDA 1
#endif
#endif
#ifndef FC_HAVE_CUDA
#define FC_HAVE_CUDA 0
#endif

/* ---------------------------------------------------------------------------
 * Init / free
 * ------------------------------------------------------------------------- */
static int tensor_needed(const fc_case *c, int t) {
    switch (t) {
    case FC_T_MASK: return c->mask.kind != FC_MASK_NONE;
    case FC_T_DO: case FC_T_DQ: case FC_T_DK: case FC_T_DV: return c->backward != 0;
    default: return 1;
    }
}

int fc_run_init(fc_run *r, const fc_case *c, int poison, char *msg, size_t msglen) {
    memset(r, 0, sizeof *r);
    r->c = *c;
    r->poison = poison;
    char why[256];
    if (fc_case_check(c, why, sizeof why)) {
        snprintf(msg, msglen, "bad case: %s", why);
        return -1;
    }
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (!tensor_needed(c, t)) continue;
        if (fc_buf_alloc(c, t, FC_GUARD_ELEMS, poison, &r->buf[t], msg, msglen)) {
            fc_run_free(r);
            return -1;
        }
        if (t <= FC_T_MASK) fc_case_fill(c, &r->buf[t]);
    }
    return 0;
}

void fc_run_free(fc_run *r) {
    for (int t = 0; t < FC_T_COUNT; t++) {
        fc_buf_free(&r->buf[t]);
        free(r->snapshot[t]);
        r->snapshot[t] = NULL;
    }
}

static size_t buf_bytes(const fc_buf *b) {
    int64_t n = b->alloc_elems > 0 ? b->alloc_elems : 1;
    return (size_t)n * b->elem_size;
}

static void take_snapshot(fc_run *r, int t) {
    free(r->snapshot[t]);
    r->snapshot[t] = NULL;
    if (!r->buf[t].alloc) return;
    size_t n = buf_bytes(&r->buf[t]);
    r->snapshot[t] = malloc(n);
    if (r->snapshot[t]) memcpy(r->snapshot[t], r->buf[t].alloc, n);
}

/* ---------------------------------------------------------------------------
 * Argument building: view pointers into either host allocs or device mirrors
 * ------------------------------------------------------------------------- */
static void *view_in(const fc_buf *b, void *base) {
    if (!base) return NULL;
    return (char *)base + (size_t)(b->guard + b->offset) * b->elem_size;
}

static fa_tensor tensor_of(const fc_buf *b, void *base) {
    fa_tensor t;
    t.ptr = view_in(b, base);
    for (int k = 0; k < 4; k++) t.stride[k] = b->stride[k];
    return t;
}

static fa_lse lse_of(const fc_buf *b, void *base) {
    fa_lse l;
    l.ptr = (float *)view_in(b, base);
    for (int k = 0; k < 3; k++) l.stride[k] = b->stride[k];
    return l;
}

static fa_mask mask_of(const fc_buf *b, void *base) {
    fa_mask m;
    memset(&m, 0, sizeof m);
    if (!b->alloc) return m;
    m.ptr = (const float *)view_in(b, base);
    for (int k = 0; k < 4; k++) m.stride[k] = b->stride[k];
    return m;
}

/* ---------------------------------------------------------------------------
 * Calling a backend
 * ------------------------------------------------------------------------- */
typedef struct {
    void *base[FC_T_COUNT]; /* host alloc or device mirror per tensor */
    int device;
} call_mem;

static fa_status mem_setup(fc_run *r, const fa_backend *be, call_mem *m) {
    memset(m, 0, sizeof *m);
    if (be->memspace == FA_MEM_HOST) {
        for (int t = 0; t < FC_T_COUNT; t++) m->base[t] = r->buf[t].alloc;
        return FA_OK;
    }
#if FC_HAVE_CUDA
    m->device = 1;
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (!r->buf[t].alloc) continue;
        size_t n = buf_bytes(&r->buf[t]);
        cudaError_t e = cudaMalloc(&m->base[t], n);
        if (e == cudaSuccess) e = cudaMemcpy(m->base[t], r->buf[t].alloc, n, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            return fa_fail(&r->err, FA_ERR_DEVICE, fc_tensor_name(t), "harness: CUDA allocation/copy of %s failed: %s",
                           fc_tensor_name(t), cudaGetErrorString(e));
    }
    return FA_OK;
#else
    return fa_fail(&r->err, FA_ERR_DEVICE, "", "harness: built without the CUDA runtime; cannot feed a CUDA backend");
#endif
}

static fa_status mem_finish(fc_run *r, call_mem *m) {
    fa_status st = FA_OK;
#if FC_HAVE_CUDA
    if (m->device) {
        cudaError_t e0 = cudaDeviceSynchronize();
        for (int t = 0; t < FC_T_COUNT; t++) {
            if (!m->base[t]) continue;
            cudaError_t e = cudaMemcpy(r->buf[t].alloc, m->base[t], buf_bytes(&r->buf[t]), cudaMemcpyDeviceToHost);
            if ((e != cudaSuccess || e0 != cudaSuccess) && st == FA_OK)
                st = fa_fail(&r->err, FA_ERR_DEVICE, "", "harness: CUDA copy-back failed: %s",
                             cudaGetErrorString(e0 != cudaSuccess ? e0 : e));
            cudaFree(m->base[t]);
            m->base[t] = NULL;
        }
    }
#else
    (void)r;
    (void)m;
#endif
    return st;
}

fa_status fc_run_forward(fc_run *r, const fa_backend *be) {
    memset(&r->err, 0, sizeof r->err);
    const int inputs[4] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_MASK};
    for (int i = 0; i < 4; i++) take_snapshot(r, inputs[i]);
    call_mem m;
    fa_status st = mem_setup(r, be, &m);
    if (st == FA_OK) {
        fa_fwd_args a;
        memset(&a, 0, sizeof a);
        a.p = r->c.p;
        a.q = tensor_of(&r->buf[FC_T_Q], m.base[FC_T_Q]);
        a.k = tensor_of(&r->buf[FC_T_K], m.base[FC_T_K]);
        a.v = tensor_of(&r->buf[FC_T_V], m.base[FC_T_V]);
        a.mask = mask_of(&r->buf[FC_T_MASK], m.base[FC_T_MASK]);
        a.o = tensor_of(&r->buf[FC_T_O], m.base[FC_T_O]);
        a.lse = lse_of(&r->buf[FC_T_LSE], m.base[FC_T_LSE]);
        a.stream = NULL;
        st = be->forward(&a, &r->err);
        if (st != FA_OK && r->err.status == FA_OK) r->err.status = st;
    }
    fa_status st2 = mem_finish(r, &m);
    if (st == FA_OK) st = st2;
    r->status = st;
    r->have_fwd = st == FA_OK;
    return st;
}

fa_status fc_run_backward(fc_run *r, const fa_backend *be) {
    memset(&r->err, 0, sizeof r->err);
    if (!be->backward) {
        r->status = fa_fail(&r->err, FA_ERR_UNSUPPORTED, "", "backend %s has no backward", be->name);
        return r->status;
    }
    if (!r->buf[FC_T_DQ].alloc) {
        r->status = fa_fail(&r->err, FA_ERR_INTERNAL, "", "harness: case has backward = 0, no dQ/dK/dV buffers");
        return r->status;
    }
    const int inputs[7] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_MASK, FC_T_O, FC_T_LSE, FC_T_DO};
    for (int i = 0; i < 7; i++) take_snapshot(r, inputs[i]);
    call_mem m;
    fa_status st = mem_setup(r, be, &m);
    if (st == FA_OK) {
        fa_bwd_args a;
        memset(&a, 0, sizeof a);
        a.p = r->c.p;
        a.q = tensor_of(&r->buf[FC_T_Q], m.base[FC_T_Q]);
        a.k = tensor_of(&r->buf[FC_T_K], m.base[FC_T_K]);
        a.v = tensor_of(&r->buf[FC_T_V], m.base[FC_T_V]);
        a.o = tensor_of(&r->buf[FC_T_O], m.base[FC_T_O]);
        a.dout = tensor_of(&r->buf[FC_T_DO], m.base[FC_T_DO]);
        a.lse = lse_of(&r->buf[FC_T_LSE], m.base[FC_T_LSE]);
        a.mask = mask_of(&r->buf[FC_T_MASK], m.base[FC_T_MASK]);
        a.dq = tensor_of(&r->buf[FC_T_DQ], m.base[FC_T_DQ]);
        a.dk = tensor_of(&r->buf[FC_T_DK], m.base[FC_T_DK]);
        a.dv = tensor_of(&r->buf[FC_T_DV], m.base[FC_T_DV]);
        a.deterministic = r->c.deterministic;
        a.stream = NULL;
        st = be->backward(&a, &r->err);
        if (st != FA_OK && r->err.status == FA_OK) r->err.status = st;
    }
    fa_status st2 = mem_finish(r, &m);
    if (st == FA_OK) st = st2;
    r->status = st;
    r->have_bwd = st == FA_OK;
    return st;
}

/* ---------------------------------------------------------------------------
 * Buffer checks
 * ------------------------------------------------------------------------- */
/* Byte map over the allocation: 1 where a logical element lives. */
static unsigned char *logical_map(const fc_buf *b) {
    int64_t n = b->alloc_elems > 0 ? b->alloc_elems : 1;
    unsigned char *map = calloc((size_t)n, 1);
    if (!map) return NULL;
    int64_t total = 1;
    for (int k = 0; k < b->ndim; k++) total *= b->dim[k];
    int64_t idx[4] = {0, 0, 0, 0};
    for (int64_t e = 0; e < total; e++) {
        int64_t rem = e;
        for (int k = b->ndim - 1; k >= 0; k--) {
            idx[k] = rem % b->dim[k];
            rem /= b->dim[k];
        }
        map[fc_buf_index(b, idx)] = 1;
    }
    return map;
}

static int is_poison(const fc_buf *b, int64_t e, int poison) {
    if (b->elem_size == 2) return ((const uint16_t *)b->alloc)[e] == fc_poison16(poison);
    return ((const uint32_t *)b->alloc)[e] == fc_poison32(poison);
}

int64_t fc_check_guards(const fc_run *r, fc_verdict *v) {
    int64_t bad_total = 0;
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_buf *b = &r->buf[t];
        if (!b->alloc || b->alloc_elems == 0) continue;
        unsigned char *map = logical_map(b);
        if (!map) {
            fc_verdict_fail(v, "harness", "out of memory checking guards of %s", fc_tensor_name(t));
            return 1;
        }
        int64_t bad = 0, first = -1, lo_guard = 0, hi_guard = 0, gap = 0;
        for (int64_t e = 0; e < b->alloc_elems; e++) {
            if (map[e] || is_poison(b, e, r->poison)) continue;
            if (first < 0) first = e;
            bad++;
            if (e < b->guard) lo_guard++;
            else if (e >= b->alloc_elems - b->guard) hi_guard++;
            else gap++;
        }
        free(map);
        if (bad) {
            fc_verdict_fail(v, "guard",
                            "%s: %lld poison elements outside the tensor changed (%lld before it, %lld after it, "
                            "%lld in stride gaps/offset region); first at element %lld of the allocation "
                            "(tensor starts at %lld)",
                            fc_tensor_name(t), (long long)bad, (long long)lo_guard, (long long)hi_guard,
                            (long long)gap, (long long)first, (long long)(b->guard + b->offset));
            bad_total += bad;
        }
    }
    return bad_total;
}

int64_t fc_check_inputs_unchanged(const fc_run *r, fc_verdict *v) {
    int64_t bad_total = 0;
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (!r->snapshot[t] || !r->buf[t].alloc) continue;
        const fc_buf *b = &r->buf[t];
        int64_t n = b->alloc_elems, bad = 0, first = -1;
        for (int64_t e = 0; e < n; e++) {
            if (memcmp((const char *)b->alloc + e * (int64_t)b->elem_size,
                       (const char *)r->snapshot[t] + e * (int64_t)b->elem_size, b->elem_size) != 0) {
                if (first < 0) first = e;
                bad++;
            }
        }
        if (bad) {
            fc_verdict_fail(v, "input_modified", "input %s: %lld elements of its allocation changed during the call "
                                                 "(first at allocation element %lld)",
                            fc_tensor_name(t), (long long)bad, (long long)first);
            bad_total += bad;
        }
    }
    return bad_total;
}

int64_t fc_check_same_bits(const fc_run *a, const fc_run *b, int t, const char *check, fc_verdict *v) {
    const fc_buf *x = &a->buf[t], *y = &b->buf[t];
    if (!x->alloc || !y->alloc) return 0;
    int64_t total = 1, bad = 0, idx[4] = {0, 0, 0, 0}, first[4] = {0, 0, 0, 0};
    double fx = 0, fy = 0;
    for (int k = 0; k < x->ndim; k++) total *= x->dim[k];
    for (int64_t e = 0; e < total; e++) {
        int64_t rem = e;
        for (int k = x->ndim - 1; k >= 0; k--) {
            idx[k] = rem % x->dim[k];
            rem /= x->dim[k];
        }
        int64_t ix = fc_buf_index(x, idx), iy = fc_buf_index(y, idx);
        if (memcmp((const char *)x->alloc + ix * (int64_t)x->elem_size,
                   (const char *)y->alloc + iy * (int64_t)y->elem_size, x->elem_size) != 0) {
            if (!bad) {
                memcpy(first, idx, sizeof idx);
                fx = fc_buf_get(x, idx);
                fy = fc_buf_get(y, idx);
            }
            bad++;
        }
    }
    if (bad)
        fc_verdict_fail(v, check, "%s: %lld of %lld elements differ bitwise between two runs; first at [%lld,%lld,%lld,%lld]: "
                                  "%.9g vs %.9g",
                        fc_tensor_name(t), (long long)bad, (long long)total, (long long)first[0], (long long)first[1],
                        (long long)first[2], (long long)first[3], fx, fy);
    return bad;
}

int64_t fc_check_written(const fc_run *r, int t, fc_verdict *v) {
    const fc_buf *b = &r->buf[t];
    if (!b->alloc) return 0;
    int64_t total = 1, bad = 0, idx[4] = {0, 0, 0, 0}, first[4] = {0, 0, 0, 0};
    for (int k = 0; k < b->ndim; k++) total *= b->dim[k];
    for (int64_t e = 0; e < total; e++) {
        int64_t rem = e;
        for (int k = b->ndim - 1; k >= 0; k--) {
            idx[k] = rem % b->dim[k];
            rem /= b->dim[k];
        }
        if (is_poison(b, fc_buf_index(b, idx), r->poison)) {
            if (!bad) memcpy(first, idx, sizeof idx);
            bad++;
        }
    }
    v->t[t].unwritten = bad;
    if (bad)
        fc_verdict_fail(v, "unwritten", "%s: %lld of %lld elements never written (still the poison NaN), first at "
                                        "[%lld,%lld,%lld,%lld]",
                        fc_tensor_name(t), (long long)bad, (long long)total, (long long)first[0], (long long)first[1],
                        (long long)first[2], (long long)first[3]);
    return bad;
}
