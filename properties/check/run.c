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

static size_t buf_bytes(const fc_buf *b) {
    int64_t n = b->alloc_elems > 0 ? b->alloc_elems : 1;
    return (size_t)n * b->elem_size;
}

/* ---------------------------------------------------------------------------
 * Generated-input cache (per thread)
 *
 * fc_check_case initializes a second run of the same case for the
 * determinism check; generating the inputs again would give the same bytes
 * (fc_case_fill is a pure function of the case). The cache keeps the last
 * case's generated input allocations, and a run of an equal case (same
 * fields: fc_case_equal) copies the logical elements from it into buffers
 * poisoned with its own pattern. Inputs edited after fc_run_init (fc_buf_set)
 * live in the run's own buffers and never reach the cache.
 * ------------------------------------------------------------------------- */
typedef struct {
    int valid;
    fc_case c;
    fc_buf buf[FC_T_MASK + 1]; /* filled input allocations (any poison) */
} input_cache;

static _Thread_local input_cache run_cache;
#define FC_RUN_CACHE_MAX_BYTES ((size_t)64 << 20) /* per tensor */

/* Call fn(dst_elem_ptr, src_elem_ptr, n) for each innermost run of logical
 * elements: n elements at element steps dst_step / src_step. Both buffers
 * have the same logical dims. Used for copies and comparisons below. */
typedef struct {
    int64_t dim[4];
    int64_t sa[4], sb[4];      /* strides (elements) of the two buffers */
    char *pa, *pb;             /* element (0,0,0,0) of each */
    size_t es;                 /* element size */
} pair_walk;

static void pair_walk_init(pair_walk *w, const fc_buf *a, const fc_buf *b) {
    for (int k = 0; k < 4; k++) {
        w->dim[k] = k < a->ndim ? a->dim[k] : 1;
        w->sa[k] = k < a->ndim ? a->stride[k] : 0;
        w->sb[k] = k < b->ndim ? b->stride[k] : 0;
    }
    w->pa = fc_buf_view(a);
    w->pb = fc_buf_view(b);
    w->es = a->elem_size;
}

static void copy_logical(fc_buf *dst, const fc_buf *src) {
    pair_walk w;
    pair_walk_init(&w, dst, src);
    for (int64_t i0 = 0; i0 < w.dim[0]; i0++)
        for (int64_t i1 = 0; i1 < w.dim[1]; i1++)
            for (int64_t i2 = 0; i2 < w.dim[2]; i2++) {
                int64_t oa = i0 * w.sa[0] + i1 * w.sa[1] + i2 * w.sa[2];
                int64_t ob = i0 * w.sb[0] + i1 * w.sb[1] + i2 * w.sb[2];
                if (w.sa[3] == 1 && w.sb[3] == 1) {
                    memcpy(w.pa + (size_t)oa * w.es, w.pb + (size_t)ob * w.es, (size_t)w.dim[3] * w.es);
                } else if (w.es == 2) {
                    uint16_t *d = (uint16_t *)w.pa + oa;
                    const uint16_t *sp = (const uint16_t *)w.pb + ob;
                    for (int64_t i3 = 0; i3 < w.dim[3]; i3++) d[i3 * w.sa[3]] = sp[i3 * w.sb[3]];
                } else {
                    uint32_t *d = (uint32_t *)w.pa + oa;
                    const uint32_t *sp = (const uint32_t *)w.pb + ob;
                    for (int64_t i3 = 0; i3 < w.dim[3]; i3++) d[i3 * w.sa[3]] = sp[i3 * w.sb[3]];
                }
            }
}

static void cache_clear(void) {
    for (int t = 0; t <= FC_T_MASK; t++) fc_buf_free(&run_cache.buf[t]);
    run_cache.valid = 0;
}

/* The host arrays of a v3 case (fc_case_v3_arrays) and the sinks. 0 ok, -1 out of memory. */
static int run_v3_init(fc_run *r, const fc_case *c) {
    const int64_t B = c->p.batch;
    if (c->v3.varlen_q && !(r->cu_q = malloc(sizeof(int32_t) * (size_t)(B + 1)))) return -1;
    if (c->v3.varlen_k && !(r->cu_k = malloc(sizeof(int32_t) * (size_t)(B + 1)))) return -1;
    if (c->v3.has_seqused && !(r->seqused = malloc(sizeof(int32_t) * (size_t)(B + 1)))) return -1;
    if (c->p.page_size >= 1) {
        r->table_stride = c->v3.max_pages + c->v3.table_pad;
        if (!(r->table = malloc(sizeof(int32_t) * (size_t)(B * r->table_stride + 1)))) return -1;
    }
    fc_case_v3_arrays(c, r->cu_q, r->cu_k, r->seqused, r->table);
    if (c->p.has_sinks) {
        r->sinks = malloc(sizeof(float) * (size_t)c->p.heads_q);
        r->dsinks = malloc(sizeof(float) * (size_t)c->p.heads_q);
        if (!r->sinks || !r->dsinks) return -1;
        for (int64_t h = 0; h < c->p.heads_q; h++) {
            r->sinks[h] = (float)fc_case_sink(c, h);
            r->dsinks[h] = NAN;
        }
    }
    return 0;
}

void fc_run_v3_args(const fc_run *r, fa_varlen *vl, fa_paged *pg) {
    memset(vl, 0, sizeof *vl);
    memset(pg, 0, sizeof *pg);
    vl->cu_seqlens_q = r->cu_q;
    vl->cu_seqlens_k = r->cu_k;
    vl->seqused_k = r->seqused;
    if (r->table) {
        pg->block_table = r->table;
        pg->table_stride = r->table_stride;
        pg->max_pages_per_seq = r->c.v3.max_pages;
        pg->num_pages = r->c.v3.num_pages;
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
    int hit = run_cache.valid && fc_case_equal(&run_cache.c, c);
    if (!hit) cache_clear();
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (!tensor_needed(c, t)) continue;
        if (fc_buf_alloc(c, t, FC_GUARD_ELEMS, poison, &r->buf[t], msg, msglen)) {
            fc_run_free(r);
            return -1;
        }
        if (t > FC_T_MASK) continue;
        if (hit && run_cache.buf[t].alloc) {
            copy_logical(&r->buf[t], &run_cache.buf[t]);
            continue;
        }
        fc_case_fill(c, &r->buf[t]);
        /* keep a copy for the next run of this case (best effort: no copy, no cache; large
           tensors, e.g. a certify-sized mask, are generated again rather than held twice) */
        if (buf_bytes(&r->buf[t]) > FC_RUN_CACHE_MAX_BYTES) continue;
        fc_buf *cb = &run_cache.buf[t];
        fc_buf_free(cb);
        *cb = r->buf[t];
        size_t bytes = ((size_t)(cb->alloc_elems > 0 ? cb->alloc_elems : 1) * cb->elem_size + 63) & ~(size_t)63;
        cb->alloc = aligned_alloc(64, bytes);
        if (cb->alloc) memcpy(cb->alloc, r->buf[t].alloc, buf_bytes(cb));
    }
    if (!hit) {
        run_cache.c = *c;
        run_cache.valid = 1;
    }
    if (run_v3_init(r, c)) {
        snprintf(msg, msglen, "harness: out of memory for the contract-v3 arrays");
        fc_run_free(r);
        return -1;
    }
    return 0;
}

void fc_run_free(fc_run *r) {
    for (int t = 0; t < FC_T_COUNT; t++) {
        fc_buf_free(&r->buf[t]);
        free(r->snapshot[t]);
        r->snapshot[t] = NULL;
    }
    free(r->cu_q); free(r->cu_k); free(r->seqused); free(r->table); free(r->sinks); free(r->dsinks);
    r->cu_q = r->cu_k = r->seqused = r->table = NULL;
    r->sinks = r->dsinks = NULL;
}

/* The snapshot of a buffer has the buffer's size, which never changes within
 * a run: the forward's allocation is reused by the backward. */
static void take_snapshot(fc_run *r, int t) {
    if (!r->buf[t].alloc) {
        free(r->snapshot[t]);
        r->snapshot[t] = NULL;
        return;
    }
    size_t n = buf_bytes(&r->buf[t]);
    if (!r->snapshot[t]) r->snapshot[t] = malloc(n);
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
    int gated;              /* inside fc_device_enter: leave in mem_finish */
    int packed;             /* the buffers travel in one staging block (pack_* below) */
    unsigned char input[FC_T_COUNT]; /* the call's inputs (their bytes must come back unchanged) */
    size_t off[FC_T_COUNT + 1], total; /* packed: offset of each buffer (FC_T_COUNT: the sinks) */
    float *sinks, *dsinks;  /* the run's sinks / dsinks, or their device copies */
    int harness;            /* an error returned was the harness's (HARNESS_ERR) */
} call_mem;

/* A failure of the harness's own device work around the call (not the backend's): FA_ERR_DEVICE
 * with the message, marked in m (fc_run.harness_err once it is the call's status). */
#define HARNESS_ERR(m, r, arg, ...) ((m)->harness = 1, fa_fail(&(r)->err, FA_ERR_DEVICE, arg, __VA_ARGS__))

/* ---------------------------------------------------------------------------
 * The device gate (check.h): process-wide hooks around every device section
 * ------------------------------------------------------------------------- */
static fc_device_gate run_gate;

void fc_run_set_device_gate(const fc_device_gate *g) {
    if (g) run_gate = *g;
    else memset(&run_gate, 0, sizeof run_gate);
}

void fc_device_enter(void) {
    if (run_gate.enter) run_gate.enter(run_gate.user);
}

void fc_device_leave(void) {
    if (run_gate.leave) run_gate.leave(run_gate.user);
}

#if FC_HAVE_CUDA
int fc_run_device_wait(fc_device_wait w) {
    unsigned flags = w == FC_DEVICE_WAIT_BLOCK ? cudaDeviceScheduleBlockingSync
                     : w == FC_DEVICE_WAIT_YIELD ? cudaDeviceScheduleYield : cudaDeviceScheduleSpin;
    cudaError_t e = cudaSetDeviceFlags(flags);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess ? 0 : -1;
}

/* Device mirrors are reused from call to call (per thread, grown when a case
 * needs more): every call copies each whole host allocation (guards, gaps,
 * poison included) over its mirror before the backend runs and copies it all
 * back after, so nothing of an earlier call can be seen, and no cudaMalloc/cudaFree
 * (which synchronize the device) is paid per call.
 *
 * Calls whose buffers total at most FC_RUN_PACK_MAX bytes are packed: every
 * allocation (and the sinks) is copied into one page-locked staging block on the
 * host BEFORE the device gate is entered, the block goes to one device arena in
 * one copy, comes back in one copy after the call, and is unpacked after the gate
 * is left. The device section is then two DMA copies, the call and a synchronize:
 * the least time a process holds a shared device. Larger calls mirror each buffer
 * on its own (dev_pool), with pageable copies. */
#define FC_RUN_PACK_MAX ((size_t)256 << 20)
#define FC_RUN_PACK_ALIGN ((size_t)256)
static _Thread_local void *dev_pool[FC_T_COUNT];
static _Thread_local size_t dev_cap[FC_T_COUNT];
static _Thread_local void *pack_host, *pack_dev;  /* staging block (cudaMallocHost) and its arena */
static _Thread_local size_t pack_host_cap, pack_dev_cap;
static _Thread_local int pack_broken;             /* page-locked memory refused once: stop trying */

static cudaError_t dev_reserve(int t, size_t n) {
    if (dev_pool[t] && dev_cap[t] >= n) return cudaSuccess;
    if (dev_pool[t]) cudaFree(dev_pool[t]);
    dev_pool[t] = NULL;
    dev_cap[t] = 0;
    size_t want = n < ((size_t)1 << 20) ? ((size_t)1 << 20) : n; /* at least 1 MiB: fewer regrowths */
    cudaError_t e = cudaMalloc(&dev_pool[t], want);
    if (e == cudaSuccess) dev_cap[t] = want;
    else dev_pool[t] = NULL;
    return e;
}

/* Grow *p (capacity *cap) to n bytes: at least 4 MiB, doubling. */
static cudaError_t pack_grow(void **p, size_t *cap, size_t n, int host) {
    if (*p && *cap >= n) return cudaSuccess;
    if (*p) { if (host) cudaFreeHost(*p); else cudaFree(*p); }
    *p = NULL;
    *cap = 0;
    size_t want = (size_t)4 << 20;
    while (want < n) want *= 2;
    cudaError_t e = host ? cudaMallocHost(p, want) : cudaMalloc(p, want);
    if (e == cudaSuccess) *cap = want;
    else { *p = NULL; (void)cudaGetLastError(); }
    return e;
}

/* The packed layout of r's buffers: m->off, m->total. 0 when it fits FC_RUN_PACK_MAX. */
static int pack_layout(const fc_run *r, call_mem *m) {
    size_t at = 0;
    for (int t = 0; t < FC_T_COUNT; t++) {
        m->off[t] = at;
        if (r->buf[t].alloc) at += (buf_bytes(&r->buf[t]) + FC_RUN_PACK_ALIGN - 1) & ~(FC_RUN_PACK_ALIGN - 1);
    }
    m->off[FC_T_COUNT] = at;
    if (r->sinks) at += 2 * sizeof(float) * (size_t)r->c.p.heads_q;
    m->total = at;
    return at <= FC_RUN_PACK_MAX ? 0 : -1;
}
#else
int fc_run_device_wait(fc_device_wait w) { (void)w; return 0; }
#endif

/* Mirror r's buffers for a call of be whose inputs are inputs[0..ninputs). The inputs' bytes are
 * kept for fc_check_inputs_unchanged: a snapshot taken now (host backends, per-buffer mirrors), or,
 * for a packed call, the host buffer itself: it is not touched by the call, and mem_finish
 * compares it with what came back, making the snapshot (the old bytes) only when they differ. */
static fa_status mem_setup(fc_run *r, const fa_backend *be, call_mem *m, const int *inputs, int ninputs) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i < ninputs; i++) m->input[inputs[i]] = 1;
    if (be->memspace == FA_MEM_HOST) {
        for (int i = 0; i < ninputs; i++) take_snapshot(r, inputs[i]);
        for (int t = 0; t < FC_T_COUNT; t++) m->base[t] = r->buf[t].alloc;
        m->sinks = r->sinks;
        m->dsinks = r->dsinks;
        fc_device_enter();
        m->gated = 1;
        return FA_OK;
    }
#if FC_HAVE_CUDA
    m->device = 1;
    size_t nsinks = r->sinks ? sizeof(float) * (size_t)r->c.p.heads_q : 0;
    if (!pack_broken && pack_layout(r, m) == 0) {
        /* host side first (no device work): the staging block */
        if (pack_grow(&pack_host, &pack_host_cap, m->total, 1) == cudaSuccess) {
            for (int t = 0; t < FC_T_COUNT; t++)
                if (r->buf[t].alloc) memcpy((char *)pack_host + m->off[t], r->buf[t].alloc, buf_bytes(&r->buf[t]));
            if (r->sinks) {
                memcpy((char *)pack_host + m->off[FC_T_COUNT], r->sinks, nsinks);
                memcpy((char *)pack_host + m->off[FC_T_COUNT] + nsinks, r->dsinks, nsinks);
            }
            m->packed = 1;
        } else {
            pack_broken = 1; /* no page-locked memory here: the per-buffer mirrors from now on */
        }
    }
    for (int i = 0; i < ninputs; i++) {
        if (!m->packed) {
            take_snapshot(r, inputs[i]);
        } else { /* made in mem_finish if the call changed the input */
            free(r->snapshot[inputs[i]]);
            r->snapshot[inputs[i]] = NULL;
        }
    }
    fc_device_enter();
    m->gated = 1;
    if (m->packed) {
        cudaError_t e = pack_grow(&pack_dev, &pack_dev_cap, m->total, 0);
        if (e == cudaSuccess) e = cudaMemcpy(pack_dev, pack_host, m->total, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            m->packed = 0; /* nothing to copy back */
            return HARNESS_ERR(m, r, "", "harness: CUDA allocation/copy of the packed buffers (%zu bytes) "
                           "failed: %s", m->total, cudaGetErrorString(e));
        }
        for (int t = 0; t < FC_T_COUNT; t++)
            if (r->buf[t].alloc) m->base[t] = (char *)pack_dev + m->off[t];
        if (r->sinks) {
            m->sinks = (float *)((char *)pack_dev + m->off[FC_T_COUNT]);
            m->dsinks = m->sinks + r->c.p.heads_q;
        }
        return FA_OK;
    }
    if (r->sinks) { /* small: a fresh allocation per call, copied both ways */
        cudaError_t e = cudaMalloc((void **)&m->sinks, 2 * nsinks);
        if (e == cudaSuccess) {
            m->dsinks = m->sinks + r->c.p.heads_q;
            e = cudaMemcpy(m->sinks, r->sinks, nsinks, cudaMemcpyHostToDevice);
        }
        if (e == cudaSuccess) e = cudaMemcpy(m->dsinks, r->dsinks, nsinks, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            return HARNESS_ERR(m, r, "sinks", "harness: CUDA allocation/copy of the sinks failed: %s",
                           cudaGetErrorString(e));
    }
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (!r->buf[t].alloc) continue;
        size_t n = buf_bytes(&r->buf[t]);
        cudaError_t e = dev_reserve(t, n);
        if (e == cudaSuccess) {
            m->base[t] = dev_pool[t];
            e = cudaMemcpy(m->base[t], r->buf[t].alloc, n, cudaMemcpyHostToDevice);
        }
        if (e != cudaSuccess)
            return HARNESS_ERR(m, r, fc_tensor_name(t), "harness: CUDA allocation/copy of %s failed: %s",
                           fc_tensor_name(t), cudaGetErrorString(e));
    }
    return FA_OK;
#else
    return HARNESS_ERR(m, r, "", "harness: built without the CUDA runtime; cannot feed a CUDA backend");
#endif
}

fc_blame fc_device_blame(fa_status before, int sync_failed, int copy_failed) {
    if (before != FA_OK) return FC_BLAME_KEEP;
    if (sync_failed) return FC_BLAME_BACKEND;
    if (copy_failed) return FC_BLAME_HARNESS;
    return FC_BLAME_NONE;
}

/* Synchronize and copy every mirrored buffer back, leave the gate, unpack. before: the status so
 * far (mem_setup's or the backend's): an error already reported is kept (fc_device_blame). */
static fa_status mem_finish(fc_run *r, call_mem *m, fa_status before) {
    fa_status st = FA_OK;
#if FC_HAVE_CUDA
    if (m->device) {
        cudaError_t e0 = cudaDeviceSynchronize(), ec = cudaSuccess;
        if (m->packed) {
            ec = cudaMemcpy(pack_host, pack_dev, m->total, cudaMemcpyDeviceToHost);
            if (m->gated) fc_device_leave();
            m->gated = 0;
            if (ec == cudaSuccess) {
                for (int t = 0; t < FC_T_COUNT; t++) {
                    if (!r->buf[t].alloc) continue;
                    const char *back = (const char *)pack_host + m->off[t];
                    size_t n = buf_bytes(&r->buf[t]);
                    if (m->input[t]) {
                        if (memcmp(r->buf[t].alloc, back, n) == 0) continue; /* unchanged: nothing to copy */
                        r->snapshot[t] = malloc(n);                           /* the bytes before the call */
                        if (!r->snapshot[t]) {
                            if (st == FA_OK)
                                st = HARNESS_ERR(m, r, fc_tensor_name(t), "harness: out of memory for the "
                                             "snapshot of input %s", fc_tensor_name(t));
                        } else {
                            memcpy(r->snapshot[t], r->buf[t].alloc, n);
                        }
                    }
                    memcpy(r->buf[t].alloc, back, n);
                }
                if (r->sinks)
                    memcpy(r->dsinks, (char *)pack_host + m->off[FC_T_COUNT] + sizeof(float) * (size_t)r->c.p.heads_q,
                           sizeof(float) * (size_t)r->c.p.heads_q);
            }
            for (int t = 0; t < FC_T_COUNT; t++) m->base[t] = NULL;
            m->sinks = m->dsinks = NULL;
        } else {
            for (int t = 0; t < FC_T_COUNT; t++) {
                if (!m->base[t]) continue;
                cudaError_t e = cudaMemcpy(r->buf[t].alloc, m->base[t], buf_bytes(&r->buf[t]), cudaMemcpyDeviceToHost);
                if (e != cudaSuccess && ec == cudaSuccess) ec = e;
                m->base[t] = NULL; /* the mirror stays in dev_pool for the next call */
            }
            if (m->sinks) {
                cudaError_t e = cudaMemcpy(r->dsinks, m->dsinks, sizeof(float) * (size_t)r->c.p.heads_q,
                                           cudaMemcpyDeviceToHost);
                if (e != cudaSuccess && ec == cudaSuccess) ec = e;
                cudaFree(m->sinks);
                m->sinks = m->dsinks = NULL;
            }
        }
        switch (fc_device_blame(before, e0 != cudaSuccess, ec != cudaSuccess)) {
        case FC_BLAME_BACKEND:
            m->harness = 0;   /* the backend's fault is the call's status */
            st = fa_fail(&r->err, FA_ERR_DEVICE, "backend",
                         "the first CUDA synchronize after the backend returned FA_OK failed: %s (a kernel of "
                         "the backend faulted, or the call did not finish its work before returning)",
                         cudaGetErrorString(e0));
            break;
        case FC_BLAME_HARNESS:
            st = HARNESS_ERR(m, r, "", "harness: CUDA copy-back failed: %s", cudaGetErrorString(ec));
            break;
        default: break;
        }
    }
#else
    (void)r;
    (void)before;
#endif
    if (m->gated) fc_device_leave();
    m->gated = 0;
    return st;
}

fc_reason_kind fc_run_status_kind(const fc_run *r) {
    return r->harness_err ? FC_REASON_HARNESS : r->status == FA_ERR_DEVICE ? FC_REASON_DEVICE : FC_REASON_FAILURE;
}

fa_status fc_run_forward(fc_run *r, const fa_backend *be) {
    memset(&r->err, 0, sizeof r->err);
    const int inputs[4] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_MASK};
    call_mem m;
    r->on_device = be->memspace != FA_MEM_HOST;
    fa_status st = mem_setup(r, be, &m, inputs, 4);
    int harness = m.harness;   /* mem_setup's errors are the harness's */
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
        fc_run_v3_args(r, &a.varlen, &a.paged);
        a.sinks = m.sinks;
        st = be->forward(&a, &r->err);
        if (st != FA_OK && r->err.status == FA_OK) r->err.status = st;
    }
    m.harness = 0;
    fa_status st2 = mem_finish(r, &m, st);
    if (st == FA_OK) {
        st = st2;
        harness = m.harness;
    }
    r->status = st;
    r->harness_err = st != FA_OK && harness;
    r->have_fwd = st == FA_OK;
    return st;
}

fa_status fc_run_backward(fc_run *r, const fa_backend *be) {
    memset(&r->err, 0, sizeof r->err);
    if (!be->backward) {
        r->status = fa_fail(&r->err, FA_ERR_UNSUPPORTED, "", "backend %s has no backward", be->name);
        r->harness_err = 0;
        return r->status;
    }
    if (!r->buf[FC_T_DQ].alloc) {
        r->status = fa_fail(&r->err, FA_ERR_INTERNAL, "", "harness: case has backward = 0, no dQ/dK/dV buffers");
        r->harness_err = 1;
        return r->status;
    }
    const int inputs[7] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_MASK, FC_T_O, FC_T_LSE, FC_T_DO};
    if (r->dsinks)
        for (int64_t h = 0; h < r->c.p.heads_q; h++) r->dsinks[h] = NAN;
    call_mem m;
    r->on_device = be->memspace != FA_MEM_HOST;
    fa_status st = mem_setup(r, be, &m, inputs, 7);
    int harness = m.harness;   /* mem_setup's errors are the harness's */
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
        fc_run_v3_args(r, &a.varlen, &a.paged);
        a.sinks = m.sinks;
        a.dsinks = m.dsinks;
        st = be->backward(&a, &r->err);
        if (st != FA_OK && r->err.status == FA_OK) r->err.status = st;
    }
    m.harness = 0;
    fa_status st2 = mem_finish(r, &m, st);
    if (st == FA_OK) {
        st = st2;
        harness = m.harness;
    }
    r->status = st;
    r->harness_err = st != FA_OK && harness;
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

/* Element-by-element guard count (the reference; used to word the failure
 * once the fast test below found one). */
static int64_t guards_slow(const fc_run *r, int t, fc_verdict *v) {
    int64_t bad_total = 0;
    {
        const fc_buf *b = &r->buf[t];
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


/* ---------------------------------------------------------------------------
 * Fast guard test: every element outside the tensor's logical elements holds
 * the poison pattern. The tensor's dims with extent > 1 and stride > 0, taken
 * from the largest stride down, nest: each stride is at least the extent of
 * everything inside it (fc_case_strides builds them so; checked below, and
 * anything else goes to the element-by-element path). The non-logical
 * elements are then exactly: the region before element 0, the region after
 * the last element, and at each level the gap between one sub-block's extent
 * and the next sub-block's start. Those regions are compared word by word.
 * ------------------------------------------------------------------------- */
typedef struct {
    int m;                  /* nesting levels */
    int64_t dim[4], stride[4];
    int64_t ext[5];         /* ext[k]: elements spanned by one sub-block at level k (ext[m] = 1) */
    int dense[5];           /* dense[k]: levels k.. have no gaps */
    const char *base;       /* element (0,0,0,0) */
    size_t es;
    uint32_t pat;
} gap_walk;

/* 1 if all n elements at p equal the pattern (vectorizable; no early exit per element) */
static int region_poison(const char *p, int64_t n, size_t es, uint32_t pat) {
    if (n <= 0) return 1;
    if (es == 2) {
        const uint16_t *q = (const uint16_t *)p;
        uint16_t v = (uint16_t)pat, acc = 0;
        for (int64_t i = 0; i < n; i++) acc |= (uint16_t)(q[i] ^ v);
        return acc == 0;
    }
    const uint32_t *q = (const uint32_t *)p;
    uint32_t acc = 0;
    for (int64_t i = 0; i < n; i++) acc |= q[i] ^ pat;
    return acc == 0;
}

static int gaps_poison(const gap_walk *w, int level, int64_t start) {
    if (level >= w->m || w->dense[level]) return 1;
    int64_t inner = w->ext[level + 1], gap = w->stride[level] - inner;
    for (int64_t i = 0; i < w->dim[level]; i++) {
        int64_t s0 = start + i * w->stride[level];
        if (!gaps_poison(w, level + 1, s0)) return 0;
        if (i + 1 < w->dim[level] && gap > 0 &&
            !region_poison(w->base + (size_t)(s0 + inner) * w->es, gap, w->es, w->pat))
            return 0;
    }
    return 1;
}

/* 1: all non-logical elements hold poison; 0: some do not; -1: layout not
 * nested (use the element-by-element path). */
static int guards_fast(const fc_buf *b, int poison) {
    gap_walk w;
    memset(&w, 0, sizeof w);
    w.es = b->elem_size;
    w.pat = b->elem_size == 2 ? fc_poison16(poison) : fc_poison32(poison);
    int64_t numel = 1;
    for (int k = 0; k < b->ndim; k++) numel *= b->dim[k];
    const char *alloc = b->alloc;
    int64_t first = b->guard + b->offset;
    if (numel == 0) return region_poison(alloc, b->alloc_elems, w.es, w.pat);
    /* levels: dims with extent > 1 and nonzero stride, largest stride first */
    int used[4] = {0, 0, 0, 0};
    for (;;) {
        int best = -1;
        for (int k = 0; k < b->ndim; k++)
            if (!used[k] && b->dim[k] > 1 && b->stride[k] > 0 && (best < 0 || b->stride[k] > b->stride[best])) best = k;
        if (best < 0) break;
        used[best] = 1;
        w.dim[w.m] = b->dim[best];
        w.stride[w.m] = b->stride[best];
        w.m++;
    }
    for (int k = 0; k < b->ndim; k++)
        if (b->dim[k] > 1 && b->stride[k] < 0) return -1;
    w.ext[w.m] = 1;
    w.dense[w.m] = 1;
    for (int k = w.m - 1; k >= 0; k--) {
        if (w.stride[k] < w.ext[k + 1]) return -1;   /* not nested */
        w.ext[k] = (w.dim[k] - 1) * w.stride[k] + w.ext[k + 1];
        w.dense[k] = w.dense[k + 1] && w.stride[k] == w.ext[k + 1];
    }
    int64_t last = first + w.ext[0];   /* one past the last logical element */
    if (last > b->alloc_elems) return -1;
    w.base = alloc + (size_t)first * w.es;
    if (!region_poison(alloc, first, w.es, w.pat)) return 0;
    if (!region_poison(alloc + (size_t)last * w.es, b->alloc_elems - last, w.es, w.pat)) return 0;
    return gaps_poison(&w, 0, 0);
}

int64_t fc_check_guards(const fc_run *r, fc_verdict *v) {
    int64_t bad_total = 0;
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_buf *b = &r->buf[t];
        if (!b->alloc || b->alloc_elems == 0) continue;
        if (guards_fast(b, r->poison) == 1) continue;
        bad_total += guards_slow(r, t, v);
    }
    return bad_total;
}

int64_t fc_check_inputs_unchanged(const fc_run *r, fc_verdict *v) {
    int64_t bad_total = 0;
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (!r->snapshot[t] || !r->buf[t].alloc) continue;
        const fc_buf *b = &r->buf[t];
        if (memcmp(b->alloc, r->snapshot[t], buf_bytes(b)) == 0) continue; /* the common case */
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

/* Logical elements of a and b (same dims) that differ bitwise: count, and
 * the first in row-major logical order. Nested loops with running offsets. */
static int64_t count_differ(const fc_buf *x, const fc_buf *y, int64_t first[4]) {
    pair_walk w;
    pair_walk_init(&w, x, y);
    int64_t bad = 0;
    for (int64_t i0 = 0; i0 < w.dim[0]; i0++)
        for (int64_t i1 = 0; i1 < w.dim[1]; i1++)
            for (int64_t i2 = 0; i2 < w.dim[2]; i2++) {
                int64_t oa = i0 * w.sa[0] + i1 * w.sa[1] + i2 * w.sa[2];
                int64_t ob = i0 * w.sb[0] + i1 * w.sb[1] + i2 * w.sb[2];
                int64_t row_bad = 0;
                if (w.es == 2) {
                    const uint16_t *p = (const uint16_t *)w.pa + oa, *q = (const uint16_t *)w.pb + ob;
                    for (int64_t i3 = 0; i3 < w.dim[3]; i3++) row_bad += p[i3 * w.sa[3]] != q[i3 * w.sb[3]];
                } else {
                    const uint32_t *p = (const uint32_t *)w.pa + oa, *q = (const uint32_t *)w.pb + ob;
                    for (int64_t i3 = 0; i3 < w.dim[3]; i3++) row_bad += p[i3 * w.sa[3]] != q[i3 * w.sb[3]];
                }
                if (row_bad && !bad) {
                    /* find the first differing element of this row */
                    for (int64_t i3 = 0; i3 < w.dim[3]; i3++) {
                        if (memcmp(w.pa + (size_t)(oa + i3 * w.sa[3]) * w.es, w.pb + (size_t)(ob + i3 * w.sb[3]) * w.es,
                                   w.es) != 0) {
                            first[0] = i0; first[1] = i1; first[2] = i2; first[3] = i3;
                            break;
                        }
                    }
                }
                bad += row_bad;
            }
    return bad;
}

int64_t fc_check_same_bits(const fc_run *a, const fc_run *b, int t, const char *check, fc_verdict *v) {
    const fc_buf *x = &a->buf[t], *y = &b->buf[t];
    if (!x->alloc || !y->alloc) return 0;
    int64_t total = 1, first[4] = {0, 0, 0, 0};
    for (int k = 0; k < x->ndim; k++) total *= x->dim[k];
    int64_t bad = count_differ(x, y, first);
    if (bad) {
        int64_t idx[4] = {first[0], first[1], first[2], x->ndim == 4 ? first[3] : 0};
        double fx = fc_buf_get(x, idx), fy = fc_buf_get(y, idx);
        fc_verdict_fail(v, check, "%s: %lld of %lld elements differ bitwise between two runs; first at [%lld,%lld,%lld,%lld]: "
                                  "%.9g vs %.9g",
                        fc_tensor_name(t), (long long)bad, (long long)total, (long long)idx[0], (long long)idx[1],
                        (long long)idx[2], (long long)idx[3], fx, fy);
    }
    return bad;
}

/* Logical elements of b holding the poison pattern: count and first (row-major). */
static int64_t count_poison(const fc_buf *b, int poison, int64_t first[4]) {
    pair_walk w;
    pair_walk_init(&w, b, b);
    uint32_t pat = b->elem_size == 2 ? fc_poison16(poison) : fc_poison32(poison);
    int64_t bad = 0;
    for (int64_t i0 = 0; i0 < w.dim[0]; i0++)
        for (int64_t i1 = 0; i1 < w.dim[1]; i1++)
            for (int64_t i2 = 0; i2 < w.dim[2]; i2++) {
                int64_t oa = i0 * w.sa[0] + i1 * w.sa[1] + i2 * w.sa[2];
                int64_t row_bad = 0, row_first = -1;
                if (w.es == 2) {
                    const uint16_t *p = (const uint16_t *)w.pa + oa;
                    for (int64_t i3 = 0; i3 < w.dim[3]; i3++) row_bad += p[i3 * w.sa[3]] == (uint16_t)pat;
                    if (row_bad && !bad)
                        for (row_first = 0; p[row_first * w.sa[3]] != (uint16_t)pat; row_first++) {}
                } else {
                    const uint32_t *p = (const uint32_t *)w.pa + oa;
                    for (int64_t i3 = 0; i3 < w.dim[3]; i3++) row_bad += p[i3 * w.sa[3]] == pat;
                    if (row_bad && !bad)
                        for (row_first = 0; p[row_first * w.sa[3]] != pat; row_first++) {}
                }
                if (row_bad && !bad) { first[0] = i0; first[1] = i1; first[2] = i2; first[3] = row_first; }
                bad += row_bad;
            }
    return bad;
}

int64_t fc_check_written(const fc_run *r, int t, fc_verdict *v) {
    const fc_buf *b = &r->buf[t];
    if (!b->alloc) return 0;
    int64_t total = 1, first[4] = {0, 0, 0, 0};
    for (int k = 0; k < b->ndim; k++) total *= b->dim[k];
    int64_t bad = count_poison(b, r->poison, first);
    if (b->ndim == 3) first[3] = 0;
    v->t[t].unwritten = bad;
    if (bad)
        fc_verdict_fail(v, "unwritten", "%s: %lld of %lld elements never written (still the poison NaN), first at "
                                        "[%lld,%lld,%lld,%lld]",
                        fc_tensor_name(t), (long long)bad, (long long)total, (long long)first[0], (long long)first[1],
                        (long long)first[2], (long long)first[3]);
    return bad;
}
