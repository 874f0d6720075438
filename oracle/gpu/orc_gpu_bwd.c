/* orc_gpu_bwd.c: host half of the GPU tier's backward (orc_gpu.h).
 *
 * Validation, models, sampling, result blocks and the MPFR tier are the CPU
 * tier's own code (orc_internal.h, orc_util.c, orc_mpfr.c); the device half
 * (orc_gpu_bwd.cu) computes per query row its dQ sums and row terms, per key
 * column of a kv-head group its dK / dV sums and column terms, all from the
 * formulas of orc_formulas.h that mirror orc_bwd.c, and finishes each element as
 * orc_bwd.c finishes it (orc_fm_grad_elem with the RN store's reachable-set bound,
 * the flags, the overflow tests of section 11; the LSE the kernel used as
 * opt.lse_unknown says). Here: the work list, queued without host waits; the blocks
 * fetched group by group (orc_gpu_bwd) or left on the device (orc_gpu_bwd_dev);
 * undecided elements escalated to MPFR at reference time with orc_bwd.c's rule (host
 * blocks: orc_gpu_bwd_escalate, the same loop; device blocks: the vectors found by the
 * device scan). test_gpu_oracle checks the tiers and the two paths agree. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include <cuda_runtime.h>

#include "oracle/gpu/orc_gpu.h"
#include "oracle/gpu/orc_gpu_dev.h"

static int64_t view_extent(int nd, const int64_t *dims, const int64_t *st) {
    int64_t e = 0;
    for (int i = 0; i < nd; i++) {
        if (dims[i] == 0) return 0;
        e += (dims[i] - 1) * st[i];
    }
    return e + 1;
}

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

void orc_gpu_bwd_free(orc_bwd_result *res) {
    if (!res) return;
    free(res->args.q.ptr);
    free(res->args.k.ptr);
    free(res->args.v.ptr);
    free(res->args.o.ptr);
    free(res->args.dout.ptr);
    free((void *)res->args.lse.ptr);
    free((void *)res->args.mask.ptr);
    orc_bwd_free(res);
}

void orc_gpu_bwd_rehost(orc_bwd_result *res, const fa_bwd_args *host) {
    free(res->args.q.ptr);
    free(res->args.k.ptr);
    free(res->args.v.ptr);
    free(res->args.o.ptr);
    free(res->args.dout.ptr);
    free((void *)res->args.lse.ptr);
    free((void *)res->args.mask.ptr);
    res->args = *host;
}

/* MPFR recomputation of a dQ row (ref, oe, flags: its D elements), orc_bwd.c's update. */
static void esc_dq_vec(const orc_ctx *c, const orc_options *opt, const orc_index *ix, double *ref, double *oe,
                       uint8_t *flags, double *mp) {
    int prec = opt->mpfr_prec;
    orc_mpfr_dq_row(c, ix->b, ix->h, ix->s, prec, mp);
    for (int64_t d = 0; d < c->D; d++) {
        oe[d] = orc_mpfr_err(mp[d], oe[d], prec, (double)c->Sk);
        ref[d] = mp[d];
        flags[d] = (uint8_t)((flags[d] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW)) | orc_value_flags(mp[d]) | ORC_F_ESCALATED);
    }
}

/* MPFR recomputation of a dK / dV column: [0] dK (D elements), [1] dV (Dv). */
static void esc_col_vec(const orc_ctx *c, const orc_options *opt, const orc_index *ix, double *ref[2], double *oe[2],
                        uint8_t *flags[2], double *mk_, double *mv_) {
    int prec = opt->mpfr_prec;
    orc_mpfr_dkdv_col(c, ix->b, ix->h, ix->s, prec, mk_, mv_);
    double nn = (double)(c->G * c->Sq + c->G);
    for (int k = 0; k < 2; k++) {
        double *mp = k ? mv_ : mk_;
        for (int64_t d = 0; d < (k ? c->Dv : c->D); d++) {
            oe[k][d] = orc_mpfr_err(mp[d], oe[k][d], prec, nn);
            ref[k][d] = mp[d];
            flags[k][d] = (uint8_t)((flags[k][d] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW)) | orc_value_flags(mp[d]) |
                                    ORC_F_ESCALATED);
        }
    }
}

/* Reference-time escalation to MPFR, orc_bwd.c's rule and loops, host blocks: a dQ row (a
 * dK/dV column) any of whose checkable elements has orc_err > escalate_ratio * bound is
 * recomputed in MPFR (every element with ORC_TIER_MPFR). Returns the elements. */
static int64_t orc_gpu_bwd_escalate(const orc_ctx *c, const orc_options *opt, orc_bwd_result *res, int nth) {
    int64_t esc = 0, D = c->D, Dv = c->Dv, nq = res->dq.n, nc = res->dk.n;
    const orc_index *iq = res->dq.index, *ic = res->dk.index;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) reduction(+ : esc)
    for (int64_t x = 0; x < nq; x++) {
        orc_block *bq = &res->dq;
        int need = opt->tier == ORC_TIER_MPFR;
        for (int64_t d = 0; d < D && !need; d++) {
            int64_t e = x * D + d;
            if (!(bq->flags[e] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE | ORC_F_MASKED_ROW)) &&
                bq->orc_err[e] > opt->escalate_ratio * bq->bound[e])
                need = 1;
        }
        if (!need || (bq->flags[x * D] & ORC_F_MASKED_ROW)) continue;
        double *mp = malloc((size_t)D * sizeof(double));
        if (!mp) continue;
        esc_dq_vec(c, opt, &iq[x], bq->ref + x * D, bq->orc_err + x * D, bq->flags + x * D, mp);
        esc += D;
        free(mp);
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) reduction(+ : esc)
    for (int64_t x = 0; x < nc; x++) {
        int need = opt->tier == ORC_TIER_MPFR;
        orc_block *bl[2] = {&res->dk, &res->dv};
        for (int k = 0; k < 2 && !need; k++)
            for (int64_t d = 0; d < bl[k]->dim && !need; d++) {
                int64_t e = x * bl[k]->dim + d;
                if (!(bl[k]->flags[e] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE | ORC_F_MASKED_ROW)) &&
                    bl[k]->orc_err[e] > opt->escalate_ratio * bl[k]->bound[e])
                    need = 1;
            }
        if (!need || (res->dk.flags[x * D] & ORC_F_MASKED_ROW)) continue;
        double *mk_ = malloc((size_t)D * sizeof(double)), *mv_ = malloc((size_t)Dv * sizeof(double));
        if (!mk_ || !mv_) { free(mk_); free(mv_); continue; }
        double *ref[2] = {res->dk.ref + x * D, res->dv.ref + x * Dv};
        double *oe[2] = {res->dk.orc_err + x * D, res->dv.orc_err + x * Dv};
        uint8_t *fl[2] = {res->dk.flags + x * D, res->dv.flags + x * Dv};
        esc_col_vec(c, opt, &ic[x], ref, oe, fl, mk_, mv_);
        esc += D + Dv;
        free(mk_);
        free(mv_);
    }
    return esc;
}

/* The same escalation for blocks in device memory: the vectors to recompute are found on
 * the device by the same rule (orc_gpu_esc_scan); only they travel (ref, orc_err, flags
 * down, recomputed, up). Returns the elements, or -1 with msg. */
static int64_t dev_escalate(const orc_ctx *c, const orc_options *opt, const orc_bwd_result *res,
                            const orc_gpu_dblk *q, const orc_gpu_dblk *k, const orc_gpu_dblk *v, int nth, char *msg,
                            size_t nmsg) {
    int64_t esc = 0, D = c->D, Dv = c->Dv;
    int all = opt->tier == ORC_TIER_MPFR;
    for (int pass = 0; pass < 2; pass++) {
        int64_t *list = NULL, nl = 0;
        if (pass == 0 ? orc_gpu_esc_scan(q, D, NULL, 0, res->dq.n, opt->escalate_ratio, all, &list, &nl, msg, nmsg)
                      : orc_gpu_esc_scan(k, D, v, Dv, res->dk.n, opt->escalate_ratio, all, &list, &nl, msg, nmsg))
            return -1;
        int fails = 0;
        const orc_gpu_dblk *bl[2] = {pass == 0 ? q : k, v};
        int64_t dims[2] = {D, Dv};
        int nb = pass == 0 ? 1 : 2;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) reduction(+ : esc, fails)
        for (int64_t y = 0; y < nl; y++) {
            int64_t x = list[y];
            double *buf = malloc((size_t)(3 * (D + Dv) + 2) * sizeof(double));
            uint8_t *fb = malloc((size_t)(D + Dv + 2));
            if (!buf || !fb) { free(buf); free(fb); fails++; continue; }
            double *ref[2] = {buf, buf + D}, *oe[2] = {buf + D + Dv, buf + 2 * D + Dv}, *mp = buf + 2 * (D + Dv);
            uint8_t *fl[2] = {fb, fb + D};
            int ok = 1;
            for (int b = 0; b < nb && ok; b++)
                ok = orc_gpu_to_host(ref[b], bl[b]->ref + x * dims[b], (size_t)dims[b] * 8, NULL, 0) == 0 &&
                     orc_gpu_to_host(oe[b], bl[b]->oe + x * dims[b], (size_t)dims[b] * 8, NULL, 0) == 0 &&
                     orc_gpu_to_host(fl[b], bl[b]->flags + x * dims[b], (size_t)dims[b], NULL, 0) == 0;
            if (ok) {
                if (pass == 0) esc_dq_vec(c, opt, &res->dq.index[x], ref[0], oe[0], fl[0], mp);
                else esc_col_vec(c, opt, &res->dk.index[x], ref, oe, fl, mp, mp + D);
            }
            for (int b = 0; b < nb && ok; b++)
                ok = orc_gpu_to_device(bl[b]->ref + x * dims[b], ref[b], (size_t)dims[b] * 8, NULL, 0) == 0 &&
                     orc_gpu_to_device(bl[b]->oe + x * dims[b], oe[b], (size_t)dims[b] * 8, NULL, 0) == 0 &&
                     orc_gpu_to_device(bl[b]->flags + x * dims[b], fl[b], (size_t)dims[b], NULL, 0) == 0;
            if (ok) esc += pass == 0 ? D : D + Dv;
            else fails++;
            free(buf);
            free(fb);
        }
        free(list);
        if (fails) {
            snprintf(msg, nmsg, "escalation of %d vectors on the device failed (memory or a CUDA error).", fails);
            return -1;
        }
    }
    return esc;
}


/* The backward up to reference-time escalation: res gets everything; with dev = 0 its blocks
 * are host blocks filled group by group from the device blocks blk[3] (dQ, dK, dV: one kv-head
 * group's part), with dev = 1 its blocks' element arrays are NULL and blk[3] hold every
 * sampled element finished on the device. tm: the timings (dev = 0: dev_ref includes the
 * fetches). On error res is freed and blk is empty. */
static fa_status gb_run(const fa_bwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                        orc_bwd_result *res, int dev, orc_gpu_dblk blk[3], orc_gpu_times *tm, orc_ctx *hc_out,
                        fa_error *err) {
    memset(blk, 0, 3 * sizeof *blk);
    memset(tm, 0, sizeof *tm);
    orc_ctx c, hc;
    orc_options opt;
    fa_status st;
    char msg[256];
    if (!res) return orc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_bwd_result.");
    memset(res, 0, sizeof *res);
    if ((st = orc_ctx_bwd(args, &c, err))) return st;
    if ((st = orc_check_profile(prof, err))) return st;
    if (opt_in) opt = *opt_in; else orc_options_init(&opt);
    if ((st = orc_check_options(&opt, err))) return st;
    {
        const char *nm[7] = {"q", "k", "v", "o", "dout", "lse", "mask"};
        const void *pt[7] = {args->q.ptr, args->k.ptr, args->v.ptr, args->o.ptr, args->dout.ptr, args->lse.ptr,
                             args->mask.ptr};
        for (int t = 0; t < 7; t++)
            if (pt[t] && !orc_gpu_is_device(pt[t]))
                return orc_fail(err, FA_ERR_INVALID, nm[t], "%s is not CUDA device memory: orc_gpu_bwd takes "
                                "device pointers (orc_bwd takes host pointers).", nm[t]);
    }
    const fa_problem *p = &args->p;
    int64_t dq4[4] = {p->batch, p->seqlen_q, p->heads_q, p->head_dim_qk};
    int64_t dk4[4] = {p->batch, p->seqlen_k, p->heads_kv, p->head_dim_qk};
    int64_t dv4[4] = {p->batch, p->seqlen_k, p->heads_kv, p->head_dim_v};
    int64_t do4[4] = {p->batch, p->seqlen_q, p->heads_q, p->head_dim_v};
    int64_t dm4[4] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k};
    int64_t dl3[3] = {p->batch, p->heads_q, p->seqlen_q};
    res->args = *args;
    res->args.q.ptr = res->args.k.ptr = res->args.v.ptr = res->args.o.ptr = res->args.dout.ptr = NULL;
    res->args.lse.ptr = NULL;
    res->args.mask.ptr = NULL;
    res->args.dq.ptr = res->args.dk.ptr = res->args.dv.ptr = NULL;
    st = FA_OK;
    res->prof = *prof;
    res->opt = opt;
    res->scale = c.scale;

    int64_t nq, nc;
    orc_index *iq = orc_sample(c.B, c.Hq, c.Sq, opt.max_rows, opt.seed, &nq);
    orc_index *ic = orc_sample(c.B, c.Hkv, c.Sk, opt.max_cols, opt.seed ^ 0x5bd1e995u, &nc);
    int ok = iq && ic;
    if (ok && !dev)
        ok = orc_block_alloc(&res->dq, nq, c.D, 0) && orc_block_alloc(&res->dk, nc, c.D, 0) &&
             orc_block_alloc(&res->dv, nc, c.Dv, 0);
    else if (ok) {
        res->dq.n = nq; res->dq.dim = c.D;
        res->dk.n = nc; res->dk.dim = c.D;
        res->dv.n = nc; res->dv.dim = c.Dv;
    }
    res->dq.index = iq;
    res->dk.index = ic;
    res->dv.index = ic ? malloc((size_t)(nc ? nc : 1) * sizeof *ic) : NULL;
    if (!ok || !res->dv.index) {
        if (!res->dq.index) free(iq);
        if (!res->dk.index) free(ic);
        orc_gpu_bwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory for %lld rows / %lld columns.", (long long)nq,
                        (long long)nc);
    }
    memcpy(res->dv.index, ic, (size_t)nc * sizeof *ic);
    res->elements = nq * c.D + nc * (c.D + c.Dv);
    /* device blocks: the whole result (dev), or one kv-head group's part, fetched to the host
     * blocks after the group (the sampled rows / columns of a group are consecutive) */
    int64_t maxq = 0, maxc = 0;
    for (int64_t x0 = 0, x1; x0 < nq; x0 = x1) {
        for (x1 = x0; x1 < nq && iq[x1].b == iq[x0].b && iq[x1].h / c.G == iq[x0].h / c.G; x1++) {}
        if (x1 - x0 > maxq) maxq = x1 - x0;
    }
    for (int64_t x0 = 0, x1; x0 < nc; x0 = x1) {
        for (x1 = x0; x1 < nc && ic[x1].b == ic[x0].b && ic[x1].h == ic[x0].h; x1++) {}
        if (x1 - x0 > maxc) maxc = x1 - x0;
    }
    if (dev) { maxq = nq; maxc = nc; }
    if (orc_gpu_dblk_alloc(&blk[0], maxq * c.D) || orc_gpu_dblk_alloc(&blk[1], maxc * c.D) || orc_gpu_dblk_alloc(&blk[2], maxc * c.Dv)) {
        for (int k = 0; k < 3; k++) orc_gpu_dblk_free(&blk[k]);
        orc_gpu_bwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of device memory for the result blocks (%lld elements, 25 bytes "
                        "each).", (long long)res->elements);
    }
    orc_gpu_bfin fin;
    memset(&fin, 0, sizeof fin);
    fin.scale = c.scale;
    fin.thr32 = orc_overflow_threshold(-1);
    fin.thrdt = orc_overflow_threshold((int)c.dt);
    fin.u_in = orc_unit_roundoff(c.dt);
    fin.bf16 = c.dt == FA_BF16;
    fin.iq = iq; fin.ic = ic; fin.nq = nq; fin.nc = nc;
    fin.dq = blk[0]; fin.dk = blk[1]; fin.dv = blk[2];

    orc_gpu_bwd_desc d;
    memset(&d, 0, sizeof d);
    orc_gpu_fwd_desc *f = &d.f;
    f->B = c.B; f->Sq = c.Sq; f->Sk = c.Sk; f->Hq = c.Hq; f->Hkv = c.Hkv; f->G = c.G; f->D = c.D; f->Dv = c.Dv;
    f->bf16 = c.dt == FA_BF16;
    f->q = args->q.ptr; f->k = args->k.ptr; f->v = args->v.ptr; f->mask = args->mask.ptr;
    memcpy(f->qs, args->q.stride, sizeof f->qs);
    memcpy(f->ks, args->k.stride, sizeof f->ks);
    memcpy(f->vs, args->v.stride, sizeof f->vs);
    memcpy(f->ms, args->mask.stride, sizeof f->ms);
    orc_model_kernel(&c, prof, &f->mk);
    orc_model_oracle(&c, &f->mo);
    orc_fm_rowc_init(&f->mk, &f->mo, c.scale, (double)c.D, &f->rc);
    d.o = args->o.ptr; d.dout = args->dout.ptr; d.lse = args->lse.ptr;
    memcpy(d.os, args->o.stride, sizeof d.os);
    memcpy(d.dos, args->dout.stride, sizeof d.dos);
    memcpy(d.ls, args->lse.stride, sizeof d.ls);
    d.lse_unknown = opt.lse_unknown;
    orc_fm_bwdc_init(&f->mk, &f->mo, c.scale, (double)c.D, (double)c.Dv, orc_overflow_threshold((int)c.dt), &d.bc);

    int64_t Sq1 = c.Sq > 0 ? c.Sq : 1;
    int64_t *rlo = malloc((size_t)Sq1 * sizeof(int64_t)), *rhi = malloc((size_t)Sq1 * sizeof(int64_t));
    if (!rlo || !rhi) {
        free(rlo); free(rhi);
        for (int k = 0; k < 3; k++) orc_gpu_dblk_free(&blk[k]);
        orc_gpu_bwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of host memory for the GPU tier.");
    }
    for (int64_t i = 0; i < c.Sq; i++) orc_row_range(&c.p, i, &rlo[i], &rhi[i]);
    orc_gpu_bwd_state *gs = NULL;
    int64_t rc = 0;
    if (orc_gpu_bwd_begin(&d, &fin, rlo, rhi, &rc, &gs, msg, sizeof msg)) {
        free(rlo); free(rhi);
        for (int k = 0; k < 3; k++) orc_gpu_dblk_free(&blk[k]);
        orc_gpu_bwd_free(res);
        return orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
    }
    /* the oracle's column sums: blocks of 32 rows per chunk and head (orc_acc_coef's span) */
    double sp_o = (double)(c.G * c.Sq) + 64.0 * (double)c.G * ceil((double)c.Sq / (double)rc);
    /* the work: chunks of the groups with a sampled dQ row or dK/dV column, in order */
    typedef struct { int64_t b, hk, h, r0, nr, c0, ncs, gi, q0, nqg; int first_g, first_h, last_h, last_g; } item;
    int64_t nck = (c.Sq + rc - 1) / rc, nit = 0;
    item *it = malloc((size_t)(c.B * c.Hq * (nck > 0 ? nck : 1) + 1) * sizeof *it);
    if (!it) st = orc_fail(err, FA_ERR_NOMEM, "", "out of host memory for the GPU tier.");
    /* the group's sampled columns and rows: consecutive runs of ic (sorted by b, hkv, s) and iq
       (sorted by b, hq, s; hq / G = hkv), found by two cursors advancing with the groups (a
       linear pass: a scan of the whole index per group costs B^2 Hkv Hq S) */
    int64_t pc = 0, pq = 0;
    for (int64_t gi = 0, ng = 0; !st && gi < c.B * c.Hkv; gi++) {
        int64_t b = gi / c.Hkv, hk = gi % c.Hkv;
        while (pc < nc && (ic[pc].b < b || (ic[pc].b == b && ic[pc].h < hk))) pc++;
        while (pq < nq && (iq[pq].b < b || (iq[pq].b == b && iq[pq].h / c.G < hk))) pq++;
        int64_t c0 = -1, ncs = 0;
        for (int64_t x = pc; x < nc && ic[x].b == b && ic[x].h == hk; x++) { if (c0 < 0) c0 = x; ncs++; }
        int64_t q0 = -1, nqg = 0;
        for (int64_t x = pq; x < nq && iq[x].b == b && iq[x].h / c.G == hk; x++) { if (q0 < 0) q0 = x; nqg++; }
        if (ncs == 0 && nqg == 0) continue;
        if (c0 < 0) c0 = 0;
        if (q0 < 0) q0 = 0;
        int64_t first = nit;
        for (int64_t h = hk * c.G; h < (hk + 1) * c.G; h++) {
            int64_t hfirst = nit;
            for (int64_t r0 = 0; r0 < c.Sq || (r0 == 0 && c.Sq == 0); r0 += rc) {
                item x = {b, hk, h, r0, c.Sq - r0 < rc ? c.Sq - r0 : rc, c0, ncs, ng, q0, nqg, 0, 0, 0, 0};
                it[nit++] = x;
                if (c.Sq == 0) break;
            }
            it[hfirst].first_h = 1;
            it[nit - 1].last_h = 1;
        }
        it[first].first_g = 1;
        it[nit - 1].last_g = 1;
        ng++;
    }
    fa_status st_in = FA_OK;
    fa_error err_in;
    memset(&err_in, 0, sizeof err_in);
    int cudev = 0;
    if (cudaGetDevice(&cudev) != cudaSuccess) (void)cudaGetLastError();
    double t_q = 0;
#pragma omp parallel num_threads(2)
    {
        int tid = omp_get_thread_num(), nthr = omp_get_num_threads();
        /* every item queued on the tier's stream: no host wait until orc_gpu_bwd_finish */
        for (int64_t k = 0; tid == 0 && !st && k < nit; k++) {
            const item *x = &it[k];
            /* the sampled rows of (b, h) in [r0, r0 + nr) */
            int64_t x0, x1, lo = 0, hi = nq;
            while (lo < hi) {
                int64_t mid = (lo + hi) / 2;
                const orc_index *y = &iq[mid];
                int less = y->b != x->b ? y->b < x->b : y->h != x->h ? y->h < x->h : y->s < x->r0;
                if (less) lo = mid + 1; else hi = mid;
            }
            x0 = lo;
            for (x1 = x0; x1 < nq && iq[x1].b == x->b && iq[x1].h == x->h && iq[x1].s < x->r0 + x->nr; x1++) {}
            int e = 0;
            if (x->first_g) e = orc_gpu_bwd_group(gs, x->b, x->hk, sp_o, msg, sizeof msg);
            if (!e && x->first_h) e = orc_gpu_bwd_head(gs, 0, msg, sizeof msg);
            if (!e) e = orc_gpu_bwd_chunk(gs, x->h, x->r0, x->nr, x0, x1, dev ? 0 : x->q0, msg, sizeof msg);
            if (!e && x->last_h) e = orc_gpu_bwd_head(gs, 1, msg, sizeof msg);
            if (!e && x->last_g) e = orc_gpu_bwd_cols(gs, x->c0, x->ncs, dev ? 0 : x->c0, msg, sizeof msg);
            if (!e && x->last_g && !dev) { /* the group's part to the host blocks */
                orc_block *hb[3] = {&res->dq, &res->dk, &res->dv};
                int64_t v0[3] = {x->q0, x->c0, x->c0}, nv[3] = {x->nqg, x->ncs, x->ncs};
                for (int q = 0; q < 3 && !e; q++) {
                    int64_t o = v0[q] * hb[q]->dim;
                    e = orc_gpu_bwd_fetch(gs, &blk[q], nv[q] * hb[q]->dim, hb[q]->ref + o, hb[q]->bound + o,
                                          hb[q]->orc_err + o, hb[q]->flags + o, msg, sizeof msg);
                }
            }
            if (e) st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
        }
        /* the host copies of the inputs (MPFR escalation reads them), made by a second host
         * thread while this one queues the work (the queueing blocks once the launch queue
         * is full, i.e. for most of the device time): the copies run on the legacy stream
         * of the same device, the work on the tier's non-blocking stream */
        if (tid == 1 || nthr == 1) {
            double t_in = orc_gpu_now_s();
            if (tid == 1 && cudaSetDevice(cudev) != cudaSuccess) {
                (void)cudaGetLastError();
                st_in = orc_fail(&err_in, FA_ERR_DEVICE, "", "cudaSetDevice(%d) failed in the copy thread.", cudev);
            }
            if (!st_in) res->args.q.ptr = host_copy(args->q.ptr, view_extent(4, dq4, args->q.stride), 2, &err_in, &st_in);
            if (!st_in) res->args.k.ptr = host_copy(args->k.ptr, view_extent(4, dk4, args->k.stride), 2, &err_in, &st_in);
            if (!st_in) res->args.v.ptr = host_copy(args->v.ptr, view_extent(4, dv4, args->v.stride), 2, &err_in, &st_in);
            if (!st_in) res->args.o.ptr = host_copy(args->o.ptr, view_extent(4, do4, args->o.stride), 2, &err_in, &st_in);
            if (!st_in)
                res->args.dout.ptr = host_copy(args->dout.ptr, view_extent(4, do4, args->dout.stride), 2, &err_in, &st_in);
            if (!st_in)
                res->args.lse.ptr = host_copy(args->lse.ptr, view_extent(3, dl3, args->lse.stride), 4, &err_in, &st_in);
            if (!st_in && args->mask.ptr)
                res->args.mask.ptr = host_copy(args->mask.ptr, view_extent(4, dm4, args->mask.stride), 4, &err_in, &st_in);
            tm->inputs = orc_gpu_now_s() - t_in;
        }
        if (tid == 0) t_q = orc_gpu_now_s();
    }
    tm->inputs_wait = orc_gpu_now_s() - t_q;
    if (!st && st_in) { st = st_in; *err = err_in; }
    if (!st) st = orc_ctx_bwd(&res->args, &hc, err);
    double o_ratio = 0, lse_ratio = 0, ms_all = 0, ms_fin = 0, ms_part[ORC_GPU_NPART] = {0};
    if (!st && orc_gpu_bwd_finish(gs, &o_ratio, &lse_ratio, &ms_all, &ms_fin, ms_part, msg, sizeof msg))
        st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
    free(it);
    orc_gpu_bwd_end(gs);
    free(rlo);
    free(rhi);
    if (st) {
        for (int k = 0; k < 3; k++) orc_gpu_dblk_free(&blk[k]);
        orc_gpu_bwd_free(res);
        return st;
    }
    res->o_input_ratio = o_ratio;
    res->lse_input_ratio = lse_ratio;
    tm->dev_finish = 1e-3 * ms_fin;
    tm->dev_ref = 1e-3 * (ms_all - ms_fin);
    for (int k = 0; k < ORC_GPU_NPART; k++) tm->dev_part[k] = 1e-3 * ms_part[k];
    *hc_out = hc;
    return FA_OK;
}

fa_status orc_gpu_bwd(const fa_bwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                      orc_bwd_result *res, fa_error *err) {
    orc_gpu_dblk blk[3];
    orc_gpu_times tm;
    orc_ctx hc;
    fa_status st = gb_run(args, prof, opt_in, res, 0, blk, &tm, &hc, err);
    if (st) return st;
    /* the host blocks are filled group by group; then the host's escalation (orc_bwd.c's loops) */
    for (int k = 0; k < 3; k++) orc_gpu_dblk_free(&blk[k]);
    res->escalations = orc_gpu_bwd_escalate(&hc, &res->opt, res, orc_nthreads(&res->opt));
    return FA_OK;
}

fa_status orc_gpu_bwd_dev(const fa_bwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                          orc_gpu_bwd_dres *out, fa_error *err) {
    if (!out) return orc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_gpu_bwd_dres.");
    memset(out, 0, sizeof *out);
    orc_gpu_dblk blk[3];
    orc_ctx hc;
    orc_bwd_result *res = &out->r;
    double t0 = orc_gpu_now_s();
    fa_status st = gb_run(args, prof, opt_in, res, 1, blk, &out->t, &hc, err);
    if (st) return st;
    double t1 = orc_gpu_now_s();
    char msg[256];
    int64_t esc = dev_escalate(&hc, &res->opt, res, &blk[0], &blk[1], &blk[2], orc_nthreads(&res->opt), msg, sizeof msg);
    out->t.escalate = orc_gpu_now_s() - t1;
    orc_block *hb[3] = {&res->dq, &res->dk, &res->dv};
    for (int k = 0; k < 3; k++) {
        hb[k]->ref = blk[k].ref;
        hb[k]->bound = blk[k].bound;
        hb[k]->orc_err = blk[k].oe;
        hb[k]->flags = blk[k].flags;
    }
    if (esc < 0) {
        orc_gpu_bwd_dev_free(out);
        return orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
    }
    res->escalations = esc;
    out->t.total = orc_gpu_now_s() - t0;
    return FA_OK;
}

void orc_gpu_bwd_dev_free(orc_gpu_bwd_dres *r) {
    if (!r) return;
    orc_block *hb[3] = {&r->r.dq, &r->r.dk, &r->r.dv};
    for (int k = 0; k < 3; k++) {
        orc_gpu_dblk b = {hb[k]->ref, hb[k]->bound, hb[k]->orc_err, hb[k]->flags};
        orc_gpu_dblk_free(&b);
        hb[k]->ref = hb[k]->bound = hb[k]->orc_err = NULL;
        hb[k]->flags = NULL;
    }
    orc_gpu_bwd_free(&r->r);
    memset(r, 0, sizeof *r);
}
