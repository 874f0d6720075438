/* fa_py_mem.c: see fa_py_mem.h. */
#define _GNU_SOURCE
#include "kernels/py/fa_py_mem.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* which tensors have elements                                               */

typedef struct {
    const char *name;
    const void *ptr;
    int has; /* 1: at least one element (so the kernel may dereference ptr) */
} mem_item;

/* Rows of the Q side (q, o, dout, lse, dq) and of the K side (k, v, dk, dv):
 * cu[B] when packed, the page pool when paged, else B * seqlen (validated). */
static int64_t rows_q_of(const fa_problem *p, const fa_varlen *vl) {
    return vl->cu_seqlens_q ? (int64_t)vl->cu_seqlens_q[p->batch] : p->batch * p->seqlen_q;
}

static int64_t rows_k_of(const fa_problem *p, const fa_varlen *vl, const fa_paged *pg) {
    if (p->page_size >= 1) return pg->num_pages * p->page_size;
    return vl->cu_seqlens_k ? (int64_t)vl->cu_seqlens_k[p->batch] : p->batch * p->seqlen_k;
}

static fa_status mem_check(const mem_item *it, int n, fa_py_mem_space_fn space, void *ctx, fa_error *err) {
    for (int i = 0; i < n; i++) {
        if (!it[i].has || it[i].ptr == NULL) continue;
        char why[200] = "";
        const int r = space(it[i].ptr, ctx, why, sizeof why);
        if (r < 0)
            return fa_fail(err, FA_ERR_DEVICE, "backend", "py backend: cannot tell where %s (%p) lives: %s", it[i].name,
                           it[i].ptr, why[0] ? why : "the CUDA driver's pointer query failed");
        if (r == 0)
            return fa_fail(err, FA_ERR_INVALID, it[i].name,
                           "%s (%p) is not CUDA device memory; this py backend declares device='cuda' and takes "
                           "device pointers (cudaMalloc, torch CUDA tensors), or declare device='cpu' for host "
                           "buffers.", it[i].name, it[i].ptr);
    }
    return FA_OK;
}

fa_status fa_py_mem_check_fwd(const fa_fwd_args *a, fa_py_mem_space_fn space, void *ctx, fa_error *err) {
    const fa_problem *p = &a->p;
    const int64_t rq = rows_q_of(p, &a->varlen), rk = rows_k_of(p, &a->varlen, &a->paged);
    const int q = rq > 0 && p->heads_q > 0, k = rk > 0 && p->heads_kv > 0;
    const int dqk = p->head_dim_qk > 0, dv = p->head_dim_v > 0;
    const int dense_k = p->seqlen_k > 0; /* the mask is [B, Hq, Sq, Sk] */
    const mem_item it[7] = {
        {"q.ptr", a->q.ptr, q && dqk},          {"k.ptr", a->k.ptr, k && dqk},
        {"v.ptr", a->v.ptr, k && dv},           {"mask.ptr", a->mask.ptr, q && dense_k},
        {"o.ptr", a->o.ptr, q && dv},           {"lse.ptr", a->lse.ptr, q},
        {"sinks", a->sinks, p->has_sinks && p->heads_q > 0},
    };
    return mem_check(it, 7, space, ctx, err);
}

fa_status fa_py_mem_check_bwd(const fa_bwd_args *a, fa_py_mem_space_fn space, void *ctx, fa_error *err) {
    const fa_problem *p = &a->p;
    const int64_t rq = rows_q_of(p, &a->varlen), rk = rows_k_of(p, &a->varlen, &a->paged);
    const int q = rq > 0 && p->heads_q > 0, k = rk > 0 && p->heads_kv > 0;
    const int dqk = p->head_dim_qk > 0, dv = p->head_dim_v > 0;
    const int dense_k = p->seqlen_k > 0;
    const int sinks = p->has_sinks && p->heads_q > 0;
    const mem_item it[12] = {
        {"q.ptr", a->q.ptr, q && dqk},   {"k.ptr", a->k.ptr, k && dqk},   {"v.ptr", a->v.ptr, k && dv},
        {"o.ptr", a->o.ptr, q && dv},    {"dout.ptr", a->dout.ptr, q && dv}, {"lse.ptr", a->lse.ptr, q},
        {"mask.ptr", a->mask.ptr, q && dense_k},
        {"dq.ptr", a->dq.ptr, q && dqk}, {"dk.ptr", a->dk.ptr, k && dqk}, {"dv.ptr", a->dv.ptr, k && dv},
        {"sinks", a->sinks, sinks},      {"dsinks", a->dsinks, sinks},
    };
    return mem_check(it, 12, space, ctx, err);
}

/* ------------------------------------------------------------------------- */
/* the CUDA driver, dlopen()ed                                               */

/* The driver API's ABI (cuda.h; these values and signatures are fixed across
 * CUDA versions): CUresult is an int, 0 = CUDA_SUCCESS; CUdeviceptr is 64 bits. */
enum {
    CU_SUCCESS = 0,
    CU_ERROR_INVALID_VALUE = 1,
    CU_ERROR_NOT_INITIALIZED = 3,
    CU_ERROR_INVALID_CONTEXT = 201,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
};
typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_device_get_fn)(int *dev, int ordinal);
typedef int (*cu_primary_retain_fn)(void **ctx, int dev);
typedef int (*cu_ctx_set_current_fn)(void *ctx);
typedef int (*cu_pointer_get_attributes_fn)(unsigned int n, int *attrs, void **data, unsigned long long ptr);

static struct {
    pthread_once_t once;
    char why[160];
    cu_init_fn init;
    cu_device_get_fn device_get;
    cu_primary_retain_fn primary_retain;
    cu_ctx_set_current_fn set_current;
    cu_pointer_get_attributes_fn attrs;
} CU = {PTHREAD_ONCE_INIT, "", NULL, NULL, NULL, NULL, NULL};

static void cu_load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(CU.why, sizeof CU.why, "libcuda.so.1 (the CUDA driver) cannot be loaded: %.100s", dlerror());
        return;
    }
    void *s[5] = {dlsym(lib, "cuInit"), dlsym(lib, "cuDeviceGet"), dlsym(lib, "cuDevicePrimaryCtxRetain"),
                  dlsym(lib, "cuCtxSetCurrent"), dlsym(lib, "cuPointerGetAttributes")};
    for (int i = 0; i < 5; i++)
        if (!s[i]) {
            snprintf(CU.why, sizeof CU.why, "libcuda.so.1 lacks a driver entry point the pointer check needs");
            return;
        }
    memcpy(&CU.init, &s[0], sizeof s[0]);
    memcpy(&CU.device_get, &s[1], sizeof s[1]);
    memcpy(&CU.primary_retain, &s[2], sizeof s[2]);
    memcpy(&CU.set_current, &s[3], sizeof s[3]);
    memcpy(&CU.attrs, &s[4], sizeof s[4]);
    CU.init(0); /* idempotent; torch has normally done it already */
}

/* The device address of ptr (0 when no CUDA context knows it: plain host memory). */
static int cu_device_address(const void *ptr, unsigned long long *addr) {
    int attr = CU_POINTER_ATTRIBUTE_DEVICE_POINTER;
    void *data = addr;
    *addr = 0;
    return CU.attrs(1, &attr, &data, (unsigned long long)(uintptr_t)ptr);
}

int fa_py_mem_cuda_space(const void *ptr, void *ctx, char *why, size_t whylen) {
    (void)ctx;
    pthread_once(&CU.once, cu_load);
    if (!CU.attrs) {
        snprintf(why, whylen, "%s", CU.why);
        return -1;
    }
    unsigned long long addr = 0;
    int rc = cu_device_address(ptr, &addr);
    if (rc == CU_ERROR_NOT_INITIALIZED || rc == CU_ERROR_INVALID_CONTEXT) {
        /* no current context on this thread yet: bind device 0's primary context (the
           worker's only visible device; the one torch's runtime uses) and ask again */
        int dev = 0;
        void *pctx = NULL;
        if (CU.init(0) == CU_SUCCESS && CU.device_get(&dev, 0) == CU_SUCCESS &&
            CU.primary_retain(&pctx, dev) == CU_SUCCESS && CU.set_current(pctx) == CU_SUCCESS) {
            rc = cu_device_address(ptr, &addr);
            /* with a context current, the remaining "invalid" answers mean that no UVA
               context knows ptr (cuda.h: "If ptr was not allocated by, mapped by, or
               registered with a CUcontext which uses UVA, CUDA_ERROR_INVALID_CONTEXT"):
               plain host memory */
            if (rc == CU_ERROR_INVALID_CONTEXT || rc == CU_ERROR_INVALID_VALUE) return 0;
        }
    } else if (rc == CU_ERROR_INVALID_VALUE) {
        return 0; /* the pointer is not one the driver knows (the singular query's answer) */
    }
    if (rc != CU_SUCCESS) {
        snprintf(why, whylen, "cuPointerGetAttributes returned CUresult %d", rc);
        return -1;
    }
    return addr != 0;
}
