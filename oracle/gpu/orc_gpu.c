/* orc_gpu.c: host half of the GPU tier's forward (orc_gpu.h).
 *
 * Validation, error models, sampling, result blocks, the row finalize
 * (orc_fwd_row_out: values, bounds, flags, the LSE, the declared LSE of an
 * empty row, escalation to MPFR) are the CPU tier's own code (orc_internal.h,
 * orc_util.c, orc_fwd.c, orc_mpfr.c); the device half (orc_gpu_fwd.cu), written
 * with the CPU tier's formulas (orc_formulas.h), supplies per row the
 * orc_row_info and per element the three weighted sums that orc_fwd_row_out
 * consumes. Its two steps are taken apart here: rows are filled (orc_fwd_row_fill) as
 * the device's chunks arrive while a second host thread makes the host copies of the
 * inputs; the rows that need MPFR are escalated (orc_fwd_row_esc) once the copies are
 * there. test_gpu_oracle checks the two tiers agree. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <pthread.h>

#include "oracle/gpu/orc_gpu.h"
#include "oracle/gpu/orc_gpu_dev.h"

/* Elements spanned by a strided view (0 if a dimension is 0). */
static int64_t view_extent(int nd, const int64_t *dims, const int64_t *st) {
    int64_t e = 0;
    for (int i = 0; i < nd; i++) {
        if (dims[i] == 0) return 0;
        e += (dims[i] - 1) * st[i];
    }
    return e + 1;
}

/* Host copy of a device view's extent (at least one element, zeroed). */
static void *host_copy(const void *dev, int64_t elems, size_t esize, fa_error *err, fa_status *st) {
    size_t bytes = (size_t)elems * esize;
    void *h = calloc(bytes ? bytes : esize, 1);
    char msg[256];
    if (!h) { *st = orc_fail(err, FA_ERR_NOMEM, "", "out of host memory for a copy of the inputs."); return NULL; }
    if (orc_gpu_to_host(h, dev, bytes, msg, sizeof msg)) {
        free(h);
        *st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
        return NULL;
    }
    return h;
}

void orc_gpu_fwd_free(orc_fwd_result *res) {
    if (!res) return;
    free(res->args.q.ptr);
    free(res->args.k.ptr);
    free(res->args.v.ptr);
    free((void *)res->args.mask.ptr);
    orc_fwd_free(res);
}

void orc_gpu_fwd_rehost(orc_fwd_result *res, const fa_fwd_args *host) {
    free(res->args.q.ptr);
    free(res->args.k.ptr);
    free(res->args.v.ptr);
    free((void *)res->args.mask.ptr);
    res->args = *host;
}

static _Thread_local orc_gpu_times fwd_last;

/* The host copies of a forward's inputs, made by a second host thread (fwd_copy_run) on the
 * caller's device: dst's pointers, st / err on failure, secs its wall time. */
typedef struct {
    const fa_fwd_args *src;
    fa_fwd_args *dst;
    int dev;
    pthread_t thr;
    fa_status st;
    fa_error err;
    double secs;
} fwd_copy;

static void *fwd_copy_run(void *arg) {
    fwd_copy *cp = arg;
    double t0 = orc_gpu_now_s();
    const fa_fwd_args *a = cp->src;
    const fa_problem *p = &a->p;
    int64_t dq[4] = {p->batch, p->seqlen_q, p->heads_q, p->head_dim_qk};
    int64_t dk[4] = {p->batch, p->seqlen_k, p->heads_kv, p->head_dim_qk};
    int64_t dv[4] = {p->batch, p->seqlen_k, p->heads_kv, p->head_dim_v};
    int64_t dm[4] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k};
    fa_status st = FA_OK;
    if (cudaSetDevice(cp->dev) != cudaSuccess) {
        (void)cudaGetLastError();
        st = orc_fail(&cp->err, FA_ERR_DEVICE, "", "cudaSetDevice(%d) failed in the copy thread.", cp->dev);
    }
    if (!st) cp->dst->q.ptr = host_copy(a->q.ptr, view_extent(4, dq, a->q.stride), 2, &cp->err, &st);
    if (!st) cp->dst->k.ptr = host_copy(a->k.ptr, view_extent(4, dk, a->k.stride), 2, &cp->err, &st);
    if (!st) cp->dst->v.ptr = host_copy(a->v.ptr, view_extent(4, dv, a->v.stride), 2, &cp->err, &st);
    if (!st && a->mask.ptr)
        cp->dst->mask.ptr = host_copy(a->mask.ptr, view_extent(4, dm, a->mask.stride), 4, &cp->err, &st);
    cp->st = st;
    cp->secs = orc_gpu_now_s() - t0;
    return NULL;
}

static void fwd_copy_join(fwd_copy *cp, int have_thr) {
    if (have_thr) pthread_join(cp->thr, NULL);
}

void orc_gpu_fwd_times(orc_gpu_times *t) { *t = fwd_last; }

double orc_gpu_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void orc_gpu_dblk_free(orc_gpu_dblk *b) {
    cudaFree(b->ref);
    cudaFree(b->bound);
    cudaFree(b->oe);
    cudaFree(b->flags);
    memset(b, 0, sizeof *b);
}

int orc_gpu_dblk_alloc(orc_gpu_dblk *b, int64_t nel) {
    size_t ne = (size_t)(nel > 0 ? nel : 1);
    memset(b, 0, sizeof *b);
    if (cudaMalloc((void **)&b->ref, ne * 8) != cudaSuccess || cudaMalloc((void **)&b->bound, ne * 8) != cudaSuccess ||
        cudaMalloc((void **)&b->oe, ne * 8) != cudaSuccess || cudaMalloc((void **)&b->flags, ne) != cudaSuccess) {
        (void)cudaGetLastError();
        orc_gpu_dblk_free(b);
        return -1;
    }
    return 0;
}

/* The device path's escalation of row x (orc_fwd_row_esc on the row's O and LSE fetched from
 * the device blocks, put back). 0, or -1 (memory, CUDA). */
static int64_t dev_row_esc(const orc_ctx *hc, const orc_options *opt, const orc_fwd_result *res,
                           const orc_gpu_dblk *o, const orc_gpu_dblk *l, int64_t x, double *buf, uint8_t *fb) {
    int64_t Dv = hc->Dv;
    orc_fwd_result t;
    memset(&t, 0, sizeof t);
    t.o.n = 1; t.o.dim = Dv; t.o.index = &res->o.index[x];
    t.lse.n = 1; t.lse.dim = 1; t.lse.index = &res->lse.index[x];
    t.o.ref = buf; t.o.orc_err = buf + Dv; t.o.flags = fb;
    t.lse.ref = buf + 2 * Dv; t.lse.orc_err = buf + 2 * Dv + 1; t.lse.flags = fb + Dv;
    if (orc_gpu_to_host(t.o.ref, o->ref + x * Dv, (size_t)Dv * 8, NULL, 0) ||
        orc_gpu_to_host(t.o.orc_err, o->oe + x * Dv, (size_t)Dv * 8, NULL, 0) ||
        orc_gpu_to_host(t.o.flags, o->flags + x * Dv, (size_t)Dv, NULL, 0) ||
        orc_gpu_to_host(t.lse.ref, l->ref + x, 8, NULL, 0) || orc_gpu_to_host(t.lse.orc_err, l->oe + x, 8, NULL, 0) ||
        orc_gpu_to_host(t.lse.flags, l->flags + x, 1, NULL, 0))
        return -1;
    int64_t e = orc_fwd_row_esc(hc, opt, &t, 0, buf + 2 * Dv + 2);
    if (orc_gpu_to_device(o->ref + x * Dv, t.o.ref, (size_t)Dv * 8, NULL, 0) ||
        orc_gpu_to_device(o->oe + x * Dv, t.o.orc_err, (size_t)Dv * 8, NULL, 0) ||
        orc_gpu_to_device(o->flags + x * Dv, t.o.flags, (size_t)Dv, NULL, 0) ||
        orc_gpu_to_device(l->ref + x, t.lse.ref, 8, NULL, 0) || orc_gpu_to_device(l->oe + x, t.lse.orc_err, 8, NULL, 0) ||
        orc_gpu_to_device(l->flags + x, t.lse.flags, 1, NULL, 0))
        return -1;
    return e;
}

/* The forward: dev = 0, host blocks (orc_gpu_fwd); dev = 1, every sampled element finished
 * on the device into blk[0] (O), blk[1] (LSE), res's blocks with n, dim, index only. */
static fa_status gf_run(const fa_fwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                        orc_fwd_result *res, int dev, orc_gpu_dblk blk[2], fa_error *err) {
    memset(blk, 0, 2 * sizeof *blk);
    double t_call = orc_gpu_now_s(), t_wait = 0, t_fin = 0;
    memset(&fwd_last, 0, sizeof fwd_last);
    orc_ctx c, hc;
    orc_options opt;
    fa_status st;
    char msg[256];
    if (!res) return orc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_fwd_result.");
    memset(res, 0, sizeof *res);
    if ((st = orc_ctx_fwd(args, &c, err))) return st;
    if ((st = orc_check_profile(prof, err))) return st;
    if (opt_in) opt = *opt_in; else orc_options_init(&opt);
    if ((st = orc_check_options(&opt, err))) return st;
    {
        const char *nm[4] = {"q", "k", "v", "mask"};
        const void *pt[4] = {args->q.ptr, args->k.ptr, args->v.ptr, args->mask.ptr};
        for (int t = 0; t < 4; t++)
            if (pt[t] && !orc_gpu_is_device(pt[t]))
                return orc_fail(err, FA_ERR_INVALID, nm[t], "%s is not CUDA device memory: orc_gpu_fwd takes "
                                "device pointers (orc_fwd takes host pointers).", nm[t]);
    }

    /* host copies of the inputs (escalation reads them), made by a second host thread while
     * this one drives the device and fills the rows; the escalation waits for them */
    res->args = *args;
    res->args.q.ptr = res->args.k.ptr = res->args.v.ptr = NULL;
    res->args.mask.ptr = NULL;
    st = FA_OK;
    fwd_copy cp;
    memset(&cp, 0, sizeof cp);
    cp.src = args;
    cp.dst = &res->args;
    if (cudaGetDevice(&cp.dev) != cudaSuccess) (void)cudaGetLastError();
    int have_thr = pthread_create(&cp.thr, NULL, fwd_copy_run, &cp) == 0;
    if (!have_thr) fwd_copy_run(&cp);
    res->prof = *prof;
    res->opt = opt;
    res->scale = c.scale;

    int64_t n;
    orc_index *ix = orc_sample(c.B, c.Hq, c.Sq, opt.max_rows, opt.seed, &n);
    int blk_ok = !dev || (orc_gpu_dblk_alloc(&blk[0], n * c.Dv) == 0 && orc_gpu_dblk_alloc(&blk[1], n) == 0);
    if (dev && blk_ok) {
        memset(&res->o, 0, sizeof res->o);
        memset(&res->lse, 0, sizeof res->lse);
        res->o.n = n; res->o.dim = c.Dv;
        res->lse.n = n; res->lse.dim = 1;
    }
    if (!ix || !blk_ok || (!dev && (!orc_block_alloc(&res->o, n, c.Dv, 0) || !orc_block_alloc(&res->lse, n, 1, 0)))) {
        free(ix);
        fwd_copy_join(&cp, have_thr);
        orc_gpu_fwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory for %lld rows.", (long long)n);
    }
    res->o.index = ix;
    res->lse.index = malloc((size_t)(n ? n : 1) * sizeof *ix);
    if (!res->lse.index) {
        fwd_copy_join(&cp, have_thr);
        orc_gpu_fwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory for %lld rows.", (long long)n);
    }
    memcpy(res->lse.index, ix, (size_t)n * sizeof *ix);
    res->elements = n * (c.Dv + 1);
    if (n == 0) {
        fwd_copy_join(&cp, have_thr);
        if (cp.st) { *err = cp.err; orc_gpu_fwd_free(res); return cp.st; }
        return FA_OK;
    }

    orc_gpu_fwd_desc d;
    memset(&d, 0, sizeof d);
    d.B = c.B; d.Sq = c.Sq; d.Sk = c.Sk; d.Hq = c.Hq; d.Hkv = c.Hkv; d.G = c.G; d.D = c.D; d.Dv = c.Dv;
    d.bf16 = c.dt == FA_BF16;
    d.q = args->q.ptr; d.k = args->k.ptr; d.v = args->v.ptr; d.mask = args->mask.ptr;
    memcpy(d.qs, args->q.stride, sizeof d.qs);
    memcpy(d.ks, args->k.stride, sizeof d.ks);
    memcpy(d.vs, args->v.stride, sizeof d.vs);
    memcpy(d.ms, args->mask.stride, sizeof d.ms);
    orc_model_kernel(&c, prof, &d.mk);
    orc_model_oracle(&c, &d.mo);
    orc_fm_rowc_init(&d.mk, &d.mo, c.scale, (double)c.D, &d.rc);

    orc_gpu_fwd_state *gs = NULL;
    int64_t rc = 0;
    if (orc_gpu_fwd_begin(&d, &rc, &gs, msg, sizeof msg)) {
        fwd_copy_join(&cp, have_thr);
        orc_gpu_fwd_free(res);
        return orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
    }
    int64_t *rlo = malloc((size_t)rc * sizeof(int64_t)), *rhi = malloc((size_t)rc * sizeof(int64_t));
    /* chunks: rows are sorted by (b, h, s); a chunk is <= rc consecutive query
     * rows of one (b, h) holding sampled rows x0 .. x1-1 */
    typedef struct { int64_t b, h, r0, nr, x0, x1; } chunk;
    chunk *ch = malloc((size_t)n * sizeof *ch);
    int64_t nch = 0;
    for (int64_t g0 = 0; ch && g0 < n;) {
        int64_t b = ix[g0].b, h = ix[g0].h, g1 = g0;
        while (g1 < n && ix[g1].b == b && ix[g1].h == h) g1++;
        for (int64_t x0 = g0; x0 < g1;) {
            int64_t r0 = ix[x0].s, nr = c.Sq - r0 < rc ? c.Sq - r0 : rc, x1 = x0;
            while (x1 < g1 && ix[x1].s < r0 + nr) x1++;
            ch[nch++] = (chunk){b, h, r0, ix[x1 - 1].s - r0 + 1, x0, x1};
            x0 = x1;
        }
        g0 = g1;
    }
    int nth = orc_nthreads(&opt);
    int64_t esc = 0;
    uint8_t *need = calloc((size_t)n, 1); /* rows to escalate once the input copies are there */
    int *need_d = NULL;
    orc_index *ix_d = NULL;
    st = (ch && rlo && rhi && need) ? FA_OK : orc_fail(err, FA_ERR_NOMEM, "", "out of host memory for the GPU tier.");
    if (!st && dev &&
        (cudaMalloc((void **)&need_d, (size_t)n * sizeof(int)) != cudaSuccess ||
         cudaMalloc((void **)&ix_d, (size_t)n * sizeof *ix) != cudaSuccess ||
         cudaMemset(need_d, 0, (size_t)n * sizeof(int)) != cudaSuccess ||
         cudaMemcpy(ix_d, ix, (size_t)n * sizeof *ix, cudaMemcpyHostToDevice) != cudaSuccess)) {
        (void)cudaGetLastError();
        st = orc_fail(err, FA_ERR_NOMEM, "", "out of device memory for the row index of the GPU tier.");
    }
    orc_gpu_ffin fin;
    memset(&fin, 0, sizeof fin);
    if (dev) {
        fin.o = blk[0]; fin.lse = blk[1]; fin.ix = ix_d; fin.need = need_d;
        fin.ratio = opt.escalate_ratio;
        fin.mpfr_all = opt.tier == ORC_TIER_MPFR;
        fin.has_sink = c.has_sinks;
    }
    /* the device path: every chunk finished on the device, nothing fetched per chunk */
    for (int64_t k = 0; dev && !st && k < nch; k++) {
        const chunk *q = &ch[k];
        for (int64_t r = 0; r < q->nr; r++) orc_row_range(&c.p, q->r0 + r, &rlo[r], &rhi[r]);
        fin.x0 = q->x0; fin.x1 = q->x1;
        fin.sink = c.has_sinks ? (double)c.sinks[q->h] : 0;
        if (orc_gpu_fwd_start_dev(gs, (int)(k & 1), q->b, q->h, q->r0, q->nr, rlo, rhi, &fin, msg, sizeof msg))
            st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
    }
    if (dev && !st) {
        double t_w = orc_gpu_now_s();
        int *nh = malloc((size_t)n * sizeof(int));
        if (!nh) st = orc_fail(err, FA_ERR_NOMEM, "", "out of host memory for the GPU tier.");
        else if (orc_gpu_fwd_sync(gs, msg, sizeof msg) ||
                 orc_gpu_to_host(nh, need_d, (size_t)n * sizeof(int), msg, sizeof msg))
            st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
        else
            for (int64_t x = 0; x < n; x++) need[x] = (uint8_t)(nh[x] != 0);
        free(nh);
        t_wait += orc_gpu_now_s() - t_w;
    }
    cudaFree(need_d);
    cudaFree(ix_d);
    /* the host path's pipeline: the device computes chunk k+1 while the host fills chunk k */
    for (int64_t k = 0; !dev && !st && k <= nch; k++) {
        if (k < nch) {
            const chunk *q = &ch[k];
            for (int64_t r = 0; r < q->nr; r++) orc_row_range(&c.p, q->r0 + r, &rlo[r], &rhi[r]);
            if (orc_gpu_fwd_start(gs, (int)(k & 1), q->b, q->h, q->r0, q->nr, rlo, rhi, msg, sizeof msg)) {
                st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
                break;
            }
        }
        if (k == 0) continue;
        const chunk *q = &ch[k - 1];
        const orc_row_info *ri;
        const double *num, *bsum, *osum;
        double t_w = orc_gpu_now_s();
        if (orc_gpu_fwd_wait(gs, (int)((k - 1) & 1), &ri, &num, &bsum, &osum, msg, sizeof msg)) {
            st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
            break;
        }
        double t_f = orc_gpu_now_s();
        t_wait += t_f - t_w;
        int64_t Dv = c.Dv;
        /* orc_fwd_row_out's first step (c: the device call's context, of which it reads the
         * shape, dtype and sinks, the same as the host copies' context) */
#pragma omp parallel for num_threads(nth) schedule(dynamic, 64)
        for (int64_t x = q->x0; x < q->x1; x++) {
            int64_t r = ix[x].s - q->r0;
            need[x] = (uint8_t)orc_fwd_row_fill(&c, &d.mk, &d.mo, &opt, res, x, &ri[r], num + r * Dv, bsum + r * Dv,
                                                osum + r * Dv, NULL);
        }
        t_fin += orc_gpu_now_s() - t_f;
    }
    orc_gpu_fwd_end(gs);
    free(ch); free(rlo); free(rhi);
    double t_j = orc_gpu_now_s();
    fwd_copy_join(&cp, have_thr);
    fwd_last.inputs = cp.secs;
    fwd_last.inputs_wait = orc_gpu_now_s() - t_j;
    if (!st && cp.st) { st = cp.st; *err = cp.err; }
    if (!st) st = orc_ctx_fwd(&res->args, &hc, err);
    /* orc_fwd_row_out's second step: the rows' MPFR escalation */
    if (!st) {
        double t_e = orc_gpu_now_s();
        int64_t e = 0, Dv = c.Dv;
        int mem_ok = 1, dev_fail = 0;
#pragma omp parallel num_threads(nth) reduction(+ : e)
        {
            double *tmp = malloc((size_t)Dv * sizeof(double));
            if (!tmp) {
#pragma omp atomic write
                mem_ok = 0;
            }
            uint8_t *fb = dev ? malloc((size_t)Dv + 1) : NULL;
            double *buf = dev ? malloc((size_t)(3 * Dv + 2) * sizeof(double)) : NULL;
            if (dev && (!fb || !buf)) {
#pragma omp atomic write
                mem_ok = 0;
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t x = 0; x < n; x++) {
                if (!tmp || !need[x]) continue;
                if (!dev) { e += orc_fwd_row_esc(&hc, &opt, res, x, tmp); continue; }
                if (!fb || !buf) continue;
                int64_t r = dev_row_esc(&hc, &opt, res, &blk[0], &blk[1], x, buf, fb);
                if (r < 0) {
#pragma omp atomic write
                    dev_fail = 1;
                } else e += r;
            }
            free(tmp);
            free(fb);
            free(buf);
        }
        if (!mem_ok) st = orc_fail(err, FA_ERR_NOMEM, "", "out of host memory in the GPU tier.");
        else if (dev_fail) st = orc_fail(err, FA_ERR_DEVICE, "", "escalation of rows on the device failed (a CUDA "
                                         "copy).");
        esc += e;
        t_fin += orc_gpu_now_s() - t_e;
    }
    free(need);
    if (st) {
        orc_gpu_fwd_free(res);
        return st;
    }
    res->escalations = esc;
    fwd_last.wait = t_wait;
    fwd_last.host_finish = t_fin;
    fwd_last.total = orc_gpu_now_s() - t_call;
    return FA_OK;
}

fa_status orc_gpu_fwd(const fa_fwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                      orc_fwd_result *res, fa_error *err) {
    orc_gpu_dblk blk[2];
    return gf_run(args, prof, opt_in, res, 0, blk, err);
}

fa_status orc_gpu_fwd_dev(const fa_fwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                          orc_gpu_fwd_dres *out, fa_error *err) {
    if (!out) return orc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_gpu_fwd_dres.");
    memset(out, 0, sizeof *out);
    orc_gpu_dblk blk[2];
    fa_status st = gf_run(args, prof, opt_in, &out->r, 1, blk, err);
    if (st) {
        orc_gpu_dblk_free(&blk[0]);
        orc_gpu_dblk_free(&blk[1]);
        return st;
    }
    orc_gpu_fwd_times(&out->t);
    orc_block *hb[2] = {&out->r.o, &out->r.lse};
    for (int k = 0; k < 2; k++) {
        hb[k]->ref = blk[k].ref;
        hb[k]->bound = blk[k].bound;
        hb[k]->orc_err = blk[k].oe;
        hb[k]->flags = blk[k].flags;
    }
    return FA_OK;
}

void orc_gpu_fwd_dev_free(orc_gpu_fwd_dres *r) {
    if (!r) return;
    orc_block *hb[2] = {&r->r.o, &r->r.lse};
    for (int k = 0; k < 2; k++) {
        orc_gpu_dblk b = {hb[k]->ref, hb[k]->bound, hb[k]->orc_err, hb[k]->flags};
        orc_gpu_dblk_free(&b);
        hb[k]->ref = hb[k]->bound = hb[k]->orc_err = NULL;
        hb[k]->flags = NULL;
    }
    orc_gpu_fwd_free(&r->r);
    memset(r, 0, sizeof *r);
}
