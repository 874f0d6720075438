/* oracle_tier.c: which tier of the oracle verifies a run (check.h, fc_oracle_tier), and
 * the glue to the GPU tier: r's host inputs uploaded to per-thread device mirrors, the
 * GPU tier's result pointed back at r's host buffers (orc_gpu_*_rehost) so that callers
 * free and compare it as a CPU-tier result. A GPU-tier failure falls back to the CPU
 * tier on the same inputs (counted, never a finding). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "oracle/gpu/orc_gpu.h"
#include "properties/check/oracle_tier.h"

static atomic_int g_tier = FC_ORACLE_AUTO;
static atomic_llong n_gpu, n_cpu, n_fallback;
static atomic_int g_usable = -1; /* orc_gpu_available(), asked once per process */

void fc_check_set_oracle(fc_oracle_tier t) { atomic_store(&g_tier, (int)t); }
fc_oracle_tier fc_check_oracle(void) { return (fc_oracle_tier)atomic_load(&g_tier); }

int fc_oracle_tier_parse(const char *name, fc_oracle_tier *t) {
    if (!name) return -1;
    if (!strcmp(name, "auto")) *t = FC_ORACLE_AUTO;
    else if (!strcmp(name, "cpu")) *t = FC_ORACLE_CPU;
    else if (!strcmp(name, "gpu")) *t = FC_ORACLE_GPU;
    else return -1;
    return 0;
}

const char *fc_oracle_tier_name(fc_oracle_tier t) {
    return t == FC_ORACLE_CPU ? "cpu" : t == FC_ORACLE_GPU ? "gpu" : "auto";
}

static _Atomic double g_min_work = FC_ORACLE_GPU_MIN_WORK;

void fc_check_set_oracle_gpu_min_work(double w) { atomic_store(&g_min_work, w > 0 ? w : FC_ORACLE_GPU_MIN_WORK); }
double fc_check_oracle_gpu_min_work(void) { return atomic_load(&g_min_work); }

int fc_oracle_use_gpu(fc_oracle_tier t, int backend_on_device, int gpu_usable, double work) {
    if (!gpu_usable || t == FC_ORACLE_CPU) return 0;
    return t == FC_ORACLE_GPU || (backend_on_device && work >= atomic_load(&g_min_work));
}

static double run_work(const fc_run *r) {
    const fa_problem *p = &r->c.p;
    double d = (double)(p->head_dim_qk > p->head_dim_v ? p->head_dim_qk : p->head_dim_v);
    return (double)p->batch * (double)p->heads_q * (double)p->seqlen_q * (double)p->seqlen_k * d;
}

void fc_oracle_counts_get(fc_oracle_counts *c) {
    c->gpu = atomic_load(&n_gpu);
    c->cpu = atomic_load(&n_cpu);
    c->fallback = atomic_load(&n_fallback);
}

static int gpu_usable(void) {
    int u = atomic_load(&g_usable);
    if (u < 0) {
        u = orc_gpu_available();
        atomic_store(&g_usable, u);
    }
    return u;
}

// ----------------------------------------------------------------------------
// device mirrors of the inputs (per thread, one per tensor slot, grown as needed:
// no cudaMalloc per call)

static _Thread_local void *mir[FC_T_COUNT];
static _Thread_local size_t mir_cap[FC_T_COUNT];

/* Device address of buffer t's view after uploading its whole allocation; NULL when
 * it has none; *fail = 1 on a CUDA error. */
static void *upload(const fc_run *r, int t, int *fail) {
    const fc_buf *b = &r->buf[t];
    if (!b->alloc || *fail) return NULL;
    size_t n = (size_t)b->alloc_elems * b->elem_size;
    if (!mir[t] || mir_cap[t] < n) {
        if (mir[t]) cudaFree(mir[t]);
        mir[t] = NULL;
        mir_cap[t] = 0;
        size_t want = n < ((size_t)1 << 20) ? ((size_t)1 << 20) : n;
        if (cudaMalloc(&mir[t], want) != cudaSuccess) { (void)cudaGetLastError(); mir[t] = NULL; *fail = 1; return NULL; }
        mir_cap[t] = want;
    }
    if (cudaMemcpy(mir[t], b->alloc, n, cudaMemcpyHostToDevice) != cudaSuccess) {
        (void)cudaGetLastError();
        *fail = 1;
        return NULL;
    }
    return (char *)mir[t] + ((const char *)fc_buf_view(b) - (const char *)b->alloc);
}

/* The CPU tier checks a seeded sample of `rows` rows (0: all; fc_check_sample_plan). */
static int cpu_fwd(const fa_fwd_args *a, const fa_precision *prec, int64_t rows, uint64_t seed, orc_fwd_result *res,
                   char *msg, size_t msglen) {
    orc_options opt;
    fc_oracle_options(&opt);
    opt.max_rows = rows;
    opt.seed = seed;
    fa_error err;
    memset(&err, 0, sizeof err);
    fa_status st = orc_fwd(a, prec, &opt, res, &err);
    atomic_fetch_add(&n_cpu, 1);
    if (st != FA_OK) {
        snprintf(msg, msglen, "oracle forward failed: %s (%s): %s", fa_status_name(st), err.arg, err.msg);
        return -1;
    }
    return 0;
}

static int cpu_bwd(const fa_bwd_args *a, const fa_precision *prec, int64_t rows, int64_t cols, uint64_t seed,
                   orc_bwd_result *res, char *msg, size_t msglen) {
    orc_options opt;
    fc_oracle_options(&opt);
    opt.max_rows = rows;
    opt.max_cols = cols;
    opt.seed = seed;
    fa_error err;
    memset(&err, 0, sizeof err);
    fa_status st = orc_bwd(a, prec, &opt, res, &err);
    atomic_fetch_add(&n_cpu, 1);
    if (st != FA_OK) {
        snprintf(msg, msglen, "oracle backward failed: %s (%s): %s", fa_status_name(st), err.arg, err.msg);
        return -1;
    }
    return 0;
}

int fc_oracle_fwd_tier(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, orc_fwd_result *res,
                       int *used_gpu, char *msg, size_t msglen) {
    int64_t rows, cols;
    fc_check_sample_plan(&r->c, NULL, &rows, &cols);
    return fc_oracle_fwd_plan(r, prec, t, rows, res, used_gpu, msg, msglen);
}

/* The GPU tier checks every element; the CPU tier the plan's sample. */
int fc_oracle_fwd_plan(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, int64_t rows, orc_fwd_result *res,
                       int *used_gpu, char *msg, size_t msglen) {
    fa_fwd_args a;
    fc_oracle_host_fwd_args(r, &a);
    if (used_gpu) *used_gpu = 0;
    if (fc_oracle_use_gpu(t, r->on_device, gpu_usable(), run_work(r))) {
        int fail = 0, ok = 0;
        fc_device_enter(); /* the uploads and the passes are device work (check.h, the device gate) */
        fa_fwd_args d = a;
        d.q.ptr = upload(r, FC_T_Q, &fail);
        d.k.ptr = upload(r, FC_T_K, &fail);
        d.v.ptr = upload(r, FC_T_V, &fail);
        d.mask.ptr = upload(r, FC_T_MASK, &fail);
        d.o.ptr = d.lse.ptr = NULL; /* ignored by the oracle */
        if (!fail) {
            orc_options opt;
            fc_oracle_options(&opt);
            fa_error err;
            memset(&err, 0, sizeof err);
            ok = orc_gpu_fwd(&d, prec, &opt, res, &err) == FA_OK;
        }
        fc_device_leave();
        if (ok) {
            orc_gpu_fwd_rehost(res, &a);
            atomic_fetch_add(&n_gpu, 1);
            if (used_gpu) *used_gpu = 1;
            return 0;
        }
        atomic_fetch_add(&n_fallback, 1);
    } else if (t == FC_ORACLE_GPU) {
        atomic_fetch_add(&n_fallback, 1); /* asked for, no usable device */
    }
    return cpu_fwd(&a, prec, rows, r->c.seed, res, msg, msglen);
}

int fc_oracle_bwd_tier(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, orc_bwd_result *res,
                       int *used_gpu, char *msg, size_t msglen) {
    int64_t rows, cols;
    fc_check_sample_plan(&r->c, NULL, &rows, &cols);
    return fc_oracle_bwd_plan(r, prec, t, rows, cols, res, used_gpu, msg, msglen);
}

int fc_oracle_bwd_plan(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, int64_t rows, int64_t cols,
                       orc_bwd_result *res, int *used_gpu, char *msg, size_t msglen) {
    fa_bwd_args a;
    fc_oracle_host_bwd_args(r, &a);
    if (used_gpu) *used_gpu = 0;
    if (fc_oracle_use_gpu(t, r->on_device, gpu_usable(), run_work(r))) {
        int fail = 0, ok = 0;
        fc_device_enter();
        fa_bwd_args d = a;
        d.q.ptr = upload(r, FC_T_Q, &fail);
        d.k.ptr = upload(r, FC_T_K, &fail);
        d.v.ptr = upload(r, FC_T_V, &fail);
        d.mask.ptr = upload(r, FC_T_MASK, &fail);
        d.o.ptr = upload(r, FC_T_O, &fail);
        d.lse.ptr = upload(r, FC_T_LSE, &fail);
        d.dout.ptr = upload(r, FC_T_DO, &fail);
        d.dq.ptr = d.dk.ptr = d.dv.ptr = NULL; /* ignored by the oracle */
        if (!fail) {
            orc_options opt;
            fc_oracle_options(&opt);
            fa_error err;
            memset(&err, 0, sizeof err);
            ok = orc_gpu_bwd(&d, prec, &opt, res, &err) == FA_OK;
        }
        fc_device_leave();
        if (ok) {
            orc_gpu_bwd_rehost(res, &a);
            atomic_fetch_add(&n_gpu, 1);
            if (used_gpu) *used_gpu = 1;
            return 0;
        }
        atomic_fetch_add(&n_fallback, 1);
    } else if (t == FC_ORACLE_GPU) {
        atomic_fetch_add(&n_fallback, 1);
    }
    return cpu_bwd(&a, prec, rows, cols, r->c.seed, res, msg, msglen);
}
