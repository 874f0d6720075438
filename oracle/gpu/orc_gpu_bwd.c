/* orc_gpu_bwd.c: host half of the GPU tier's backward (orc_gpu.h).
 *
 * Validation, models, sampling, result blocks and the MPFR tier are the CPU
 * tier's own code (orc_internal.h, orc_util.c, orc_mpfr.c); the device half
 * (orc_gpu_bwd.cu) supplies per query row its dQ sums and row terms, per key
 * column of a kv-head group its dK / dV sums and column terms, all from the
 * formulas of orc_formulas.h that mirror orc_bwd.c; here each element is
 * finished as orc_bwd.c finishes it (orc_fm_grad_elem with the RN store's
 * reachable-set bound, the flags, the overflow tests of section 11; the LSE the
 * kernel used as opt.lse_unknown says) and undecided elements are escalated to MPFR
 * at reference time with orc_bwd.c's rule (orc_gpu_bwd_escalate: the same loop).
 * test_gpu_oracle checks the two tiers agree. */
#include <stdio.h>
#include <string.h>

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

/* Reference-time escalation to MPFR, orc_bwd.c's rule and loops: a dQ row (a dK/dV
 * column) any of whose checkable elements has orc_err > escalate_ratio * bound is
 * recomputed in MPFR (every element with ORC_TIER_MPFR). Returns the elements. */
static int64_t orc_gpu_bwd_escalate(const orc_ctx *c, const orc_options *opt, orc_bwd_result *res, int nth) {
    int64_t esc = 0, D = c->D, Dv = c->Dv, Sk = c->Sk, nq = res->dq.n, nc = res->dk.n;
    int prec = opt->mpfr_prec;
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
        orc_mpfr_dq_row(c, iq[x].b, iq[x].h, iq[x].s, prec, mp);
        for (int64_t d = 0; d < D; d++) {
            int64_t e = x * D + d;
            bq->orc_err[e] = orc_mpfr_err(mp[d], bq->orc_err[e], prec, (double)Sk);
            bq->ref[e] = mp[d];
            bq->flags[e] = (uint8_t)((bq->flags[e] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW)) | orc_value_flags(mp[d]) |
                                     ORC_F_ESCALATED);
        }
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
        orc_mpfr_dkdv_col(c, ic[x].b, ic[x].h, ic[x].s, prec, mk_, mv_);
        double nn = (double)(c->G * c->Sq + c->G);
        for (int k = 0; k < 2; k++) {
            double *mp = k ? mv_ : mk_;
            for (int64_t d = 0; d < bl[k]->dim; d++) {
                int64_t e = x * bl[k]->dim + d;
                bl[k]->orc_err[e] = orc_mpfr_err(mp[d], bl[k]->orc_err[e], prec, nn);
                bl[k]->ref[e] = mp[d];
                bl[k]->flags[e] = (uint8_t)((bl[k]->flags[e] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW)) |
                                            orc_value_flags(mp[d]) | ORC_F_ESCALATED);
            }
        }
        esc += D + Dv;
        free(mk_);
        free(mv_);
    }
    return esc;
}

/* dQ of one sampled row (orc_bwd.c phase A's non-normal block and dQ finalize). */
static void dq_row(const orc_ctx *c, const orc_model *mk, orc_block *bq, int64_t slot, const orc_gpu_brow *R,
                   const double *qs, const double *qb, const double *qo) {
    int64_t D = c->D;
    if (R->kind != ROW_NORMAL) {
        for (int64_t d = 0; d < D; d++) {
            int64_t e = slot * D + d;
            bq->ref[e] = R->kind == ROW_MASKED ? 0.0 : NAN;
            bq->bound[e] = bq->orc_err[e] = R->kind == ROW_MASKED ? 0.0 : NAN;
            bq->flags[e] = R->kind == ROW_MASKED ? ORC_F_MASKED_ROW
                           : R->kind == ROW_NAN  ? ORC_F_NAN
                                                 : ORC_F_UNCHECKABLE | (R->ovf ? ORC_F_OVERFLOW : 0);
        }
        return;
    }
    double sumsafe = ORC_SAFETY * (1 + orc_gamma((double)R->n + 16, ORC_U_D));
    for (int64_t d = 0; d < D; d++) {
        int64_t e = slot * D + d;
        double val, eo, pre, bound;
        orc_fm_grad_elem(mk, c->scale, qs[d], qb[d], qo[d], sumsafe, R->fq, 0, 1, 0, c->dt == FA_BF16, 0, &val, &eo,
                         &pre, &bound);
        bq->ref[e] = val;
        bq->orc_err[e] = eo;
        bq->bound[e] = bound;
        bq->flags[e] = orc_value_flags(val);
        if (R->bad || !isfinite(bound)) bq->flags[e] |= ORC_F_UNCHECKABLE;
        if (R->rovf) bq->flags[e] |= ORC_F_OVERFLOW;
    }
}

/* dK, dV of one sampled column j (orc_bwd.c's column finalize). */
static void dkdv_col(const orc_ctx *c, const orc_model *mk, orc_bwd_result *res, int64_t slot, int64_t j,
                     const orc_gpu_cols *g) {
    int64_t D = c->D, Dv = c->Dv, ncol = g->ncol[j];
    double G = (double)c->G, nn = (double)(ncol + c->G), sc = fabs(c->scale);
    double sumsafe = ORC_SAFETY * (1 + orc_gamma(nn + 16, ORC_U_D));
    double fk = orc_fm_dqk_floor(mk, sc, g->sdsm[j], nn), fv = orc_fm_dv_floor(mk, g->sp[j], nn);
    double thr32 = orc_overflow_threshold(-1), thrdt = orc_overflow_threshold((int)c->dt);
    double sck = mk->ds_fold && sc > 1 ? sc : 1;
    double cc_kk_bound = orc_acc_coef(mk, nn, (double)(c->G * c->Sq + c->G), 0);
    int ovf_k = g->ovf[j] || !(g->sdsm[j] * g->qmax * (1 + cc_kk_bound) * sck < thr32);
    int ovf_v = g->ovf[j] || !(g->sp[j] * g->domax * (1 + cc_kk_bound) < thr32);
    double u_in = orc_unit_roundoff(c->dt);
    int bf16 = c->dt == FA_BF16, split = c->G > 1 && mk->gqa != FA_GQA_FUSED;
    for (int k = 0; k < 2; k++) {
        orc_block *bl = k ? &res->dv : &res->dk;
        int64_t dim = k ? Dv : D;
        const double *s = k ? g->vs : g->ks, *bs = k ? g->vb : g->kb, *os = k ? g->vo : g->ko, *ha = k ? g->vh : g->kh;
        double scl = k ? 1.0 : c->scale, fl = k ? fv : fk;
        int ovf = k ? ovf_v : ovf_k;
        for (int64_t d = 0; d < dim; d++) {
            int64_t e = slot * dim + d, x = j * dim + d;
            double val, eo, pre, bound;
            orc_fm_grad_elem(mk, scl, s[x], bs[x], os[x], sumsafe, fl, 1, G, u_in, bf16, ha[x], &val, &eo, &pre,
                             &bound);
            int ovf_e = ovf || (split && !(fabs(scl) * ha[x] + 2 * G * eo + pre < thrdt));
            bl->ref[e] = val;
            bl->orc_err[e] = eo;
            bl->bound[e] = ncol ? bound : 0;
            bl->flags[e] = orc_value_flags(val) | (ncol ? 0 : ORC_F_MASKED_ROW) |
                           ((g->bad[j] || !isfinite(bound)) ? ORC_F_UNCHECKABLE : 0) |
                           (ovf_e && ncol ? ORC_F_OVERFLOW : 0);
        }
    }
}

fa_status orc_gpu_bwd(const fa_bwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                      orc_bwd_result *res, fa_error *err) {
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
    res->args.q.ptr = host_copy(args->q.ptr, view_extent(4, dq4, args->q.stride), 2, err, &st);
    if (!st) res->args.k.ptr = host_copy(args->k.ptr, view_extent(4, dk4, args->k.stride), 2, err, &st);
    if (!st) res->args.v.ptr = host_copy(args->v.ptr, view_extent(4, dv4, args->v.stride), 2, err, &st);
    if (!st) res->args.o.ptr = host_copy(args->o.ptr, view_extent(4, do4, args->o.stride), 2, err, &st);
    if (!st) res->args.dout.ptr = host_copy(args->dout.ptr, view_extent(4, do4, args->dout.stride), 2, err, &st);
    if (!st) res->args.lse.ptr = host_copy(args->lse.ptr, view_extent(3, dl3, args->lse.stride), 4, err, &st);
    if (!st && args->mask.ptr)
        res->args.mask.ptr = host_copy(args->mask.ptr, view_extent(4, dm4, args->mask.stride), 4, err, &st);
    if (st) { orc_gpu_bwd_free(res); return st; }
    if ((st = orc_ctx_bwd(&res->args, &hc, err))) { orc_gpu_bwd_free(res); return st; }
    res->prof = *prof;
    res->opt = opt;
    res->scale = c.scale;

    int64_t nq, nc;
    orc_index *iq = orc_sample(c.B, c.Hq, c.Sq, opt.max_rows, opt.seed, &nq);
    orc_index *ic = orc_sample(c.B, c.Hkv, c.Sk, opt.max_cols, opt.seed ^ 0x5bd1e995u, &nc);
    int ok = iq && ic && orc_block_alloc(&res->dq, nq, c.D, 0) && orc_block_alloc(&res->dk, nc, c.D, 0) &&
             orc_block_alloc(&res->dv, nc, c.Dv, 0);
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
        orc_gpu_bwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of host memory for the GPU tier.");
    }
    for (int64_t i = 0; i < c.Sq; i++) orc_row_range(&c.p, i, &rlo[i], &rhi[i]);
    orc_gpu_bwd_state *gs = NULL;
    int64_t rc = 0;
    if (orc_gpu_bwd_begin(&d, rlo, rhi, &rc, &gs, msg, sizeof msg)) {
        free(rlo); free(rhi);
        orc_gpu_bwd_free(res);
        return orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
    }
    orc_model mk = f->mk;
    int nth = orc_nthreads(&opt);
    double o_ratio = 0, lse_ratio = 0;
    /* the oracle's column sums: blocks of 32 rows per chunk and head (orc_acc_coef's span) */
    double sp_o = (double)(c.G * c.Sq) + 64.0 * (double)c.G * ceil((double)c.Sq / (double)rc);
    /* the work: chunks of the groups with a sampled dQ row or dK/dV column, in order */
    typedef struct { int64_t b, hk, h, r0, nr, c0, ncs, gi; int first_g, first_h, last_h, last_g; } item;
    int64_t nck = (c.Sq + rc - 1) / rc, nit = 0;
    item *it = malloc((size_t)(c.B * c.Hq * (nck > 0 ? nck : 1) + 1) * sizeof *it);
    if (!it) st = orc_fail(err, FA_ERR_NOMEM, "", "out of host memory for the GPU tier.");
    for (int64_t gi = 0, ng = 0; !st && gi < c.B * c.Hkv; gi++) {
        int64_t b = gi / c.Hkv, hk = gi % c.Hkv;
        int64_t c0 = -1, ncs = 0;
        for (int64_t x = 0; x < nc; x++)
            if (ic[x].b == b && ic[x].h == hk) { if (c0 < 0) c0 = x; ncs++; }
        int any_dq = 0;
        for (int64_t x = 0; x < nq && !any_dq; x++) any_dq = iq[x].b == b && iq[x].h / c.G == hk;
        if (ncs == 0 && !any_dq) continue;
        int64_t first = nit;
        for (int64_t h = hk * c.G; h < (hk + 1) * c.G; h++) {
            int64_t hfirst = nit;
            for (int64_t r0 = 0; r0 < c.Sq || (r0 == 0 && c.Sq == 0); r0 += rc) {
                item x = {b, hk, h, r0, c.Sq - r0 < rc ? c.Sq - r0 : rc, c0, ncs, ng, 0, 0, 0, 0};
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
    /* pipeline: the device computes item k while the host finishes item k - 1 (its dQ rows,
     * and its group's dK / dV columns after the group's last item) */
    for (int64_t k = 0; !st && k <= nit; k++) {
        if (k < nit) {
            const item *x = &it[k];
            int e = 0;
            if (x->first_g) e = orc_gpu_bwd_group(gs, x->b, x->hk, sp_o, msg, sizeof msg);
            if (!e && x->first_h) e = orc_gpu_bwd_head(gs, 0, msg, sizeof msg);
            if (!e) e = orc_gpu_bwd_chunk(gs, (int)(k & 1), x->h, x->r0, x->nr, msg, sizeof msg);
            if (!e && x->last_h) e = orc_gpu_bwd_head(gs, 1, msg, sizeof msg);
            if (!e && x->last_g) e = orc_gpu_bwd_cols(gs, (int)(x->gi & 1), msg, sizeof msg);
            if (e) { st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg); break; }
        }
        if (k == 0) continue;
        const item *x = &it[k - 1];
        int64_t b = x->b, h = x->h, r0 = x->r0, nr = x->nr;
        const orc_gpu_brow *br;
        const double *qs, *qb, *qo;
        if (orc_gpu_bwd_chunk_wait(gs, (int)((k - 1) & 1), &br, &qs, &qb, &qo, msg, sizeof msg)) {
            st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
            break;
        }
        for (int64_t r = 0; r < nr; r++) {
            if (br[r].kind != ROW_NORMAL) continue;
            if (br[r].o_ratio > o_ratio) o_ratio = br[r].o_ratio;
            if (br[r].lse_ratio > lse_ratio) lse_ratio = br[r].lse_ratio;
        }
        /* the sampled rows of (b, h) in [r0, r0 + nr) */
        int64_t x0, x1, lo = 0, hi = nq;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            const orc_index *y = &iq[mid];
            int less = y->b != b ? y->b < b : y->h != h ? y->h < h : y->s < r0;
            if (less) lo = mid + 1; else hi = mid;
        }
        x0 = lo;
        for (x1 = x0; x1 < nq && iq[x1].b == b && iq[x1].h == h && iq[x1].s < r0 + nr; x1++) {}
#pragma omp parallel for schedule(static) num_threads(nth)
        for (int64_t y = x0; y < x1; y++) {
            int64_t r = iq[y].s - r0;
            dq_row(&c, &mk, &res->dq, y, &br[r], qs + r * c.D, qb + r * c.D, qo + r * c.D);
        }
        if (x->last_g) {
            orc_gpu_cols cols;
            if (orc_gpu_bwd_cols_wait(gs, (int)(x->gi & 1), &cols, msg, sizeof msg)) {
                st = orc_fail(err, FA_ERR_DEVICE, "", "%s", msg);
                break;
            }
            int64_t c0 = x->c0, ncs = x->ncs;
#pragma omp parallel for schedule(static) num_threads(nth)
            for (int64_t y = 0; y < ncs; y++) dkdv_col(&c, &mk, res, c0 + y, ic[c0 + y].s, &cols);
        }
    }
    free(it);
    orc_gpu_bwd_end(gs);
    free(rlo);
    free(rhi);
    if (st) { orc_gpu_bwd_free(res); return st; }
    res->o_input_ratio = o_ratio;
    res->lse_input_ratio = lse_ratio;
    res->escalations = orc_gpu_bwd_escalate(&hc, &opt, res, nth);
    return FA_OK;
}
