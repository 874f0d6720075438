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

static int gpu_usable(void);
int fc_oracle_gpu_models(const fc_case *c) { return !fc_case_is_v3(c); }

/* The GPU tier is tried when the rule says so and it models the call. A call it does not
 * model (contract v3) goes to the CPU tier directly, without uploading its inputs: under
 * AUTO an ordinary CPU-tier call, under GPU a counted fallback (asked for, not modelled). */
static int try_gpu(const fc_run *r, fc_oracle_tier t, double work) {
    int want = fc_oracle_use_gpu(t, r->on_device, gpu_usable(), work);
    if (want && !fc_oracle_gpu_models(&r->c)) {
        if (t == FC_ORACLE_GPU) atomic_fetch_add(&n_fallback, 1);
        return 0;
    }
    if (!want && t == FC_ORACLE_GPU) atomic_fetch_add(&n_fallback, 1); /* asked for, no usable device */
    return want;
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

int fc_oracle_gpu_usable(void) { return gpu_usable(); }

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

/* The GPU tier's pass over r, forward (fa, fres) or backward (ba, bres): r's inputs uploaded
 * to the mirrors, the pass, its result pointed back at r's host buffers (so that it is freed
 * and compared as a CPU-tier result). Returns 1 (counted as a GPU-tier call), or 0 after a
 * failure (counted as a fallback: the caller runs the CPU tier on the same inputs). */
static int gpu_pass(const fc_run *r, const fa_precision *prec, const fa_fwd_args *fa, orc_fwd_result *fres,
                    const fa_bwd_args *ba, orc_bwd_result *bres) {
    int fail = 0, ok;
    orc_options opt;
    fc_oracle_options(&opt);
    fa_error err;
    memset(&err, 0, sizeof err);
    fc_device_enter(); /* the uploads and the pass are device work (check.h, the device gate) */
    void *q = upload(r, FC_T_Q, &fail), *k = upload(r, FC_T_K, &fail), *v = upload(r, FC_T_V, &fail);
    void *mask = upload(r, FC_T_MASK, &fail);
    if (fa) {
        fa_fwd_args d = *fa;
        d.q.ptr = q; d.k.ptr = k; d.v.ptr = v; d.mask.ptr = mask;
        d.o.ptr = d.lse.ptr = NULL; /* ignored by the oracle */
        ok = !fail && orc_gpu_fwd(&d, prec, &opt, fres, &err) == FA_OK;
    } else {
        fa_bwd_args d = *ba;
        d.q.ptr = q; d.k.ptr = k; d.v.ptr = v; d.mask.ptr = mask;
        d.o.ptr = upload(r, FC_T_O, &fail);
        d.lse.ptr = upload(r, FC_T_LSE, &fail);
        d.dout.ptr = upload(r, FC_T_DO, &fail);
        d.dq.ptr = d.dk.ptr = d.dv.ptr = NULL; /* ignored by the oracle */
        ok = !fail && orc_gpu_bwd(&d, prec, &opt, bres, &err) == FA_OK;
    }
    fc_device_leave();
    if (!ok) {
        atomic_fetch_add(&n_fallback, 1);
        return 0;
    }
    if (fa) orc_gpu_fwd_rehost(fres, fa);
    else orc_gpu_bwd_rehost(bres, ba);
    atomic_fetch_add(&n_gpu, 1);
    return 1;
}

/* The GPU tier checks every element; the CPU tier the plan's sample. */
int fc_oracle_fwd_plan(const fc_run *r, const fa_precision *prec, fc_oracle_tier t, int64_t rows, orc_fwd_result *res,
                       int *used_gpu, char *msg, size_t msglen) {
    fa_fwd_args a;
    fc_oracle_host_fwd_args(r, &a);
    if (used_gpu) *used_gpu = 0;
    if (try_gpu(r, t, run_work(r)) && gpu_pass(r, prec, &a, res, NULL, NULL)) {
        if (used_gpu) *used_gpu = 1;
        return 0;
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
    if (try_gpu(r, t, run_work(r)) && gpu_pass(r, prec, NULL, NULL, &a, res)) {
        if (used_gpu) *used_gpu = 1;
        return 0;
    }
    return cpu_bwd(&a, prec, rows, cols, r->c.seed, res, msg, msglen);
}

// ----------------------------------------------------------------------------
// the device path (check.h): the run's tensors uploaded once, the call judged on the device
// in chunks of whole batches

static void mir_release(void) {
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (mir[t]) cudaFree(mir[t]);
        mir[t] = NULL;
        mir_cap[t] = 0;
    }
}

typedef struct {
    const fa_precision *prec;
    fa_fwd_args f; /* device args of the whole call */
    fa_bwd_args b;
} dev_ctx;

/* A GPU-tier or compare failure of a chunk: 1 (halve the chunk) when the device is still usable
 * and the cause may be its size (out of memory; a CUDA error that did not poison the context),
 * -1 when the context is lost. */
static int chunk_fail(fa_status st, const fa_error *err, const char *what, char *msg, size_t msglen) {
    int alive = cudaDeviceSynchronize() == cudaSuccess;
    (void)cudaGetLastError();
    snprintf(msg, msglen, "%s: %s: %s", what, fa_status_name(st), err->msg);
    if (st == FA_ERR_INVALID) return -1;
    return alive ? 1 : -1;
}

static void norms_of(const orc_gpu_norms *g, fc_block_norms *n) {
    n->ref2 = g->ref2;
    n->got2 = g->got2;
    n->bnd2 = g->bnd2;
    n->masked_bad = g->masked_bad;
    memcpy(n->masked_at, g->masked_at, sizeof n->masked_at);
    n->masked_got = g->masked_got;
    n->masked_ref = g->masked_ref;
}

static fa_status block_norms(const orc_block *blk, const void *kv, const int64_t *st, int f32, int bf16,
                             fc_block_norms *out, fa_error *err) {
    orc_gpu_norms g;
    fa_status s = orc_gpu_block_norms(blk, kv, st, f32, bf16, &g, err);
    if (s == FA_OK) norms_of(&g, out);
    return s;
}

static int fwd_chunk(void *user, const fc_chunk *c, orc_stats *st, fc_block_norms *nm, char *msg, size_t msglen) {
    dev_ctx *x = user;
    fa_fwd_args a;
    fc_fwd_args_batch_view(&x->f, c->b0, c->nb, &a);
    orc_options opt;
    fc_oracle_options(&opt);
    fa_error err;
    memset(&err, 0, sizeof err);
    orc_gpu_fwd_dres res;
    fa_status s = orc_gpu_fwd_dev(&a, x->prec, &opt, &res, &err);
    if (s != FA_OK) return chunk_fail(s, &err, "GPU tier (forward)", msg, msglen);
    atomic_fetch_add(&n_gpu, 1);
    const int bf16 = a.p.dtype == FA_BF16;
    const int64_t ls[4] = {a.lse.stride[0], a.lse.stride[1], a.lse.stride[2], 0};
    s = orc_gpu_compare_fwd_dev(&res, &a.o, &a.lse, &st[0], &st[1], &err);
    if (s == FA_OK) s = block_norms(&res.r.o, a.o.ptr, a.o.stride, 0, bf16, &nm[0], &err);
    if (s == FA_OK) s = block_norms(&res.r.lse, a.lse.ptr, ls, 1, bf16, &nm[1], &err);
    orc_gpu_fwd_dev_free(&res);
    return s == FA_OK ? 0 : chunk_fail(s, &err, "GPU compare (forward)", msg, msglen);
}

static int bwd_chunk(void *user, const fc_chunk *c, orc_stats *st, fc_block_norms *nm, char *msg, size_t msglen) {
    dev_ctx *x = user;
    fa_bwd_args a;
    fc_bwd_args_batch_view(&x->b, c->b0, c->nb, &a);
    orc_options opt;
    fc_oracle_options(&opt);
    fa_error err;
    memset(&err, 0, sizeof err);
    orc_gpu_bwd_dres res;
    fa_status s = orc_gpu_bwd_dev(&a, x->prec, &opt, &res, &err);
    if (s != FA_OK) return chunk_fail(s, &err, "GPU tier (backward)", msg, msglen);
    atomic_fetch_add(&n_gpu, 1);
    const int bf16 = a.p.dtype == FA_BF16;
    s = orc_gpu_compare_bwd_dev(&res, &a.dq, &a.dk, &a.dv, &st[0], &st[1], &st[2], &err);
    if (s == FA_OK) s = block_norms(&res.r.dq, a.dq.ptr, a.dq.stride, 0, bf16, &nm[0], &err);
    if (s == FA_OK) s = block_norms(&res.r.dk, a.dk.ptr, a.dk.stride, 0, bf16, &nm[1], &err);
    if (s == FA_OK) s = block_norms(&res.r.dv, a.dv.ptr, a.dv.stride, 0, bf16, &nm[2], &err);
    orc_gpu_bwd_dev_free(&res);
    return s == FA_OK ? 0 : chunk_fail(s, &err, "GPU compare (backward)", msg, msglen);
}

/* Batches per chunk: half the device memory free after the uploads, FC_CHECK_DEVICE_ELEM_BYTES
 * per element of the chunk's result blocks (the other half: the tier's own scratch). */
static atomic_llong g_chunk_cap; /* fc_check_set_device_chunk_cap; 0 none */
void fc_check_set_device_chunk_cap(int64_t max_batches) { atomic_store(&g_chunk_cap, max_batches > 0 ? max_batches : 0); }

/* 0: one batch does not fit (the device path does not apply; the host path judges the call). */
static int64_t dev_per(int64_t batch, double elems_per_batch) {
    int64_t cap = atomic_load(&g_chunk_cap);
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    (void)tot;
    int64_t per = fc_chunk_per(batch, elems_per_batch * FC_CHECK_DEVICE_ELEM_BYTES, 0.5 * (double)fr);
    if (cap > 0 && per > cap) per = cap;
    return per;
}

static int dev_pass(const fc_run *r, const int *ts, int nt, int bwd, const fa_precision *prec, fc_verdict *v,
                    int64_t *nchunks, char *msg, size_t msglen) {
    if (nchunks) *nchunks = 0;
    if (!gpu_usable()) {
        snprintf(msg, msglen, "harness: the device path needs a usable CUDA device for the GPU tier of the oracle");
        return -1;
    }
    dev_ctx x;
    memset(&x, 0, sizeof x);
    x.prec = prec;
    int fail = 0;
    const fa_problem *p = &r->c.p;
    double epb;
    if (!bwd) {
        fc_oracle_host_fwd_args(r, &x.f);
        x.f.q.ptr = upload(r, FC_T_Q, &fail);
        x.f.k.ptr = upload(r, FC_T_K, &fail);
        x.f.v.ptr = upload(r, FC_T_V, &fail);
        x.f.mask.ptr = upload(r, FC_T_MASK, &fail);
        x.f.o.ptr = upload(r, FC_T_O, &fail);
        x.f.lse.ptr = upload(r, FC_T_LSE, &fail);
        epb = (double)p->seqlen_q * (double)p->heads_q * (double)(p->head_dim_v + 1);
    } else {
        fc_oracle_host_bwd_args(r, &x.b);
        x.b.q.ptr = upload(r, FC_T_Q, &fail);
        x.b.k.ptr = upload(r, FC_T_K, &fail);
        x.b.v.ptr = upload(r, FC_T_V, &fail);
        x.b.mask.ptr = upload(r, FC_T_MASK, &fail);
        x.b.o.ptr = upload(r, FC_T_O, &fail);
        x.b.lse.ptr = upload(r, FC_T_LSE, &fail);
        x.b.dout.ptr = upload(r, FC_T_DO, &fail);
        x.b.dq.ptr = upload(r, FC_T_DQ, &fail);
        x.b.dk.ptr = upload(r, FC_T_DK, &fail);
        x.b.dv.ptr = upload(r, FC_T_DV, &fail);
        x.b.dsinks = NULL;
        epb = (double)p->seqlen_q * (double)p->heads_q * (double)p->head_dim_qk +
              (double)p->seqlen_k * (double)p->heads_kv * (double)(p->head_dim_qk + p->head_dim_v);
    }
    if (fail) {
        /* no room for the copies: the host path judges the call (its GPU tier falls back to the
           CPU tier in turn) */
        (void)cudaGetLastError();
        mir_release();
        return 1;
    }
    orc_stats st[3];
    fc_block_norms nm[3];
    const int64_t per = dev_per(p->batch, epb);
    if (per < 1) {
        /* chunks are whole batches: a call whose one batch needs more than the device has left
           (one long sequence with many heads) goes the host path */
        mir_release();
        return 1;
    }
    int rc = fc_check_chunked(p->batch, per, nt, bwd ? bwd_chunk : fwd_chunk, &x, st, nm, nchunks, msg, msglen);
    mir_release();
    orc_gpu_release();
    if (rc) return -1;
    for (int k = 0; k < nt; k++) fc_judge_tensor(r, ts[k], &st[k], &nm[k], v);
    return 0;
}

int fc_check_fwd_device(const fc_run *r, const fa_precision *prec, fc_verdict *v, int64_t *nchunks, char *msg,
                        size_t msglen) {
    static const int ts[2] = {FC_T_O, FC_T_LSE};
    return dev_pass(r, ts, 2, 0, prec, v, nchunks, msg, msglen);
}

int fc_check_bwd_device(const fc_run *r, const fa_precision *prec, fc_verdict *v, int64_t *nchunks, char *msg,
                        size_t msglen) {
    static const int ts[3] = {FC_T_DQ, FC_T_DK, FC_T_DV};
    return dev_pass(r, ts, 3, 1, prec, v, nchunks, msg, msglen);
}
