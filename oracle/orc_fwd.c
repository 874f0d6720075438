/* orc_fwd.c: certified double-precision forward reference (O, LSE) with the
 * per-element kernel bound and the oracle's own error bound, MPFR escalation,
 * and the naive same-dtype baseline. Derivation: oracle/BOUNDS.md sections 2-4.
 *
 * Arithmetic: scores are dot products of exact fp16/bf16 products summed in
 * double (error <= gamma_D(2^-53) sum|q||k|); the P.V sums and l are blocked
 * compensated (plain blocks of ORC_BLK keys folded with TwoSum, Sum2 of
 * Ogita-Rump-Oishi); exp/log are glibc's (< 1 ulp). */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "oracle/orc_internal.h"
#include "oracle/orc_simd.h"

#define RT 16      /* rows per tile */

// ----------------------------------------------------------------------------
// one kv head in double, in panel layouts

typedef struct {
    double *kp8;   /* K in P8 layout (orc_simd.h), for the score dots */
    double *vp64;  /* V in P64 layout, for the P.V sums */
    double k1max;  /* max_j sum_d |k_jd| (underflow floor of the scores) */
    double vmax;   /* max |v_jd| over finite rows (overflow of the P.V accumulator, section 11) */
} kv_head;

static int kv_load(const orc_ctx *c, int64_t b, int64_t hk, kv_head *kv, int nth) {
    kv->kp8 = calloc(orc_p8_size(c->Sk, c->D) + 1, sizeof(double));
    kv->vp64 = calloc(orc_p64_size(c->Sk, c->Dv) + 1, sizeof(double));
    if (!kv->kp8 || !kv->vp64) return 0;
    double k1max = 0, vmax = 0;
#pragma omp parallel for schedule(static) num_threads(nth) reduction(max : k1max, vmax)
    for (int64_t j = 0; j < c->Sk; j++) {
        double k1 = 0, vm = 0;
        for (int64_t d = 0; d < c->D; d++) {
            double x = orc_ld(c->k, c->ks, b, j, hk, d, c->dt);
            kv->kp8[orc_p8_at(j, d, c->D)] = x;
            k1 += fabs(x);
        }
        /* a key with a non-finite entry makes every row that sees it NaN/Inf (not
         * bounded), and one nobody sees must not matter: skip it */
        if (isfinite(k1) && k1 > k1max) k1max = k1;
        for (int64_t d = 0; d < c->Dv; d++) {
            double x = orc_ld(c->v, c->vs, b, j, hk, d, c->dt);
            kv->vp64[orc_p64_at(j, d, c->Dv)] = x;
            if (fabs(x) > vm) vm = fabs(x);
        }
        if (isfinite(vm) && vm > vmax) vmax = vm;
    }
    kv->k1max = k1max * (1 + 0x1p-40); /* sum of D terms in double: gamma_D(2^-53) < 2^-40 */
    kv->vmax = vmax;
    return 1;
}

static void kv_free(kv_head *kv) {
    free(kv->kp8); free(kv->vp64);
    memset(kv, 0, sizeof *kv);
}

// ----------------------------------------------------------------------------
// per-row weights (BOUNDS.md section 3)

/* Score-stage error coefficient (section 2): |s' - s| <= ce * a + cm * |m|
 * (orc_fm_score_coefs, orc_formulas.h). */
void orc_score_coefs(const orc_ctx *c, const orc_model *m, double *ce, double *cm) {
    orc_fm_score_coefs(m, c->scale, (double)c->D, ce, cm);
}

/* Row r of a tile: S (raw dot, becomes the score), A (abs dot), vis flags,
 * and on return W (exp(s - M)), C (kernel weight), CO (oracle weight), all
 * indexed by t = j - jlo. The passes of orc_formulas.h; only the sum L is this
 * tier's (blocks of ORC_BLK visible keys folded with TwoSum). */
void orc_row_weights(const orc_ctx *c, const orc_model *mk, const orc_model *mo,
                        int64_t b, int64_t h, int64_t i, int64_t jlo, int64_t span,
                        double *S, const double *A, double e_floor, uint8_t *vis, double *W, double *C,
                        double *CO, double *E, orc_row_info *ri) {
    orc_fm_rowc k;
    orc_fm_rowc_init(mk, mo, c->scale, (double)c->D, &k);
    double cap = c->softcap;
    k.cap = cap;
    orc_row_range(&c->p, i, &ri->lo, &ri->hi);
    ri->floor_n = 0;
    orc_fm_rows rs;
    orc_fm_rows_init(&rs);
    /* pass 1; softcap (section 14.1): s = cap tanh(x / cap) + m, x = scale q.k parked in W
     * until pass 2 (a fp32 x above 2^126 may overflow: section 11) */
    for (int64_t t = 0; t < span; t++) {
        int64_t j = jlo + t;
        vis[t] = 0;
        W[t] = C[t] = CO[t] = 0;
        if (j < ri->lo || j > ri->hi) continue;
        double m = orc_mask_at(c, b, h, i, j);
        if (m == -INFINITY) continue;
        vis[t] = 1;
        double s;
        if (cap > 0) {
            double x = k.scale * S[t];
            s = cap * tanh(x / cap) + m;
            W[t] = x;
            if (fabs(x) > 0x1p126 && mk->u_s >= ORC_U_F) rs.overflow = 1;
        } else {
            s = orc_fm_score(&k, S[t], m);
        }
        S[t] = s;
        E[t] = fabs(m); /* keep |m| until the error pass */
        orc_fm_pass1(mk, &rs, s);
    }
    if (orc_fm_row_kind(&rs, ri) != ROW_NORMAL) return;
    rs.e_floor = e_floor;
    /* the sink (section 14.2): one more denominator term exp(sink - M) with no value and no
     * score error but its log2 fold (eks); M covers it, smax stays the largest key score */
    double sink = c->has_sinks ? (double)c->sinks[h] : -INFINITY, smax = rs.M, Ws = 0, eks = 0;
    int hs = sink > -INFINITY;
    if (hs && sink > rs.M) ri->M = rs.M = sink;

    /* pass 2: score errors and exp values; L by blocked compensated sum */
    double Ls = 0, Le = 0, blk = 0;
    int cnt = 0;
    for (int64_t t = 0; t < span; t++) {
        if (!vis[t]) continue;
        double eo, ek;
        if (cap > 0) { /* 14.1: the cap's error from x's (W[t] = x, E[t] = |m|) */
            double x = W[t], sca = fabs(cap * tanh(x / cap));
            double Dto = orc_fm_tanh_dev(k.ce_o * A[t], x, cap, mo->u_s);
            double Dtk = orc_fm_tanh_dev(k.ce_k * A[t] + rs.e_floor, x, cap, mk->u_s);
            eo = orc_fm_cap_score_err(orc_fm_cap_err(Dto, sca, cap, mo->u_s, mo->u_t, mo->tau_t), sca, E[t], mo->u_s);
            ek = orc_fm_cap_score_err(orc_fm_cap_err(Dtk, sca, cap, mk->u_s, mk->u_t, mk->tau_t), sca, E[t], mk->u_s);
        } else {
            orc_fm_key_err(&k, &rs, A[t], E[t], &eo, &ek);
        }
        if (eo > rs.Eo_max) rs.Eo_max = eo;
        if (ek > rs.Ek_max) rs.Ek_max = ek;
        E[t] = ek;
        C[t] = eo; /* park the oracle score error in C until pass 3 */
        W[t] = exp(S[t] - rs.M);
        blk += W[t];
        if (++cnt == ORC_BLK) { double e; two_sum(Ls, blk, &Ls, &e); Le += e; blk = 0; cnt = 0; }
    }
    if (hs) {
        Ws = exp(sink - rs.M);
        blk += Ws;
        eks = 2 * mk->u_s * fabs(sink) * (1 + 0x1p-40);
        if (eks > rs.Ek_max) rs.Ek_max = eks;
    }
    { double e; two_sum(Ls, blk, &Ls, &e); Le += e; }
    rs.L = Ls + Le;

    /* pass 3: eta_o (parked in CO), eta_k (in E), sum_pe; kappa_o (section 3.5) */
    for (int64_t t = 0; t < span; t++) {
        if (!vis[t]) continue;
        double eta_o, eta_k;
        orc_fm_key_eta(mk, mo, &k, &rs, S[t], C[t], E[t], &eta_o, &eta_k);
        CO[t] = eta_o;
        E[t] = eta_k;
        if (eta_o > rs.eta_o_max) rs.eta_o_max = eta_o;
        if (eta_k > rs.eta_k_max) rs.eta_k_max = eta_k;
        rs.sum_pe += orc_fm_key_pe(&rs, W[t], eta_o);
    }
    /* the sink's eta: its subtraction |sink - m_run| <= (M - sink) + (M - smax) + E_max (a
     * kernel's running max may leave the sink out), i.e. the gap of a score sink - (M - smax);
     * it counts as one more term of every denominator sum (n + 1, span + 1) (14.2) */
    double eta_os = 0, eta_ks = 0;
    if (hs) {
        orc_fm_key_eta(mk, mo, &k, &rs, sink - (rs.M - smax), 0.0, eks, &eta_os, &eta_ks);
        if (eta_os > rs.eta_o_max) rs.eta_o_max = eta_os;
        if (eta_ks > rs.eta_k_max) rs.eta_k_max = eta_ks;
        rs.sum_pe += orc_fm_key_pe(&rs, Ws, eta_os);
        rs.n++;
    }
    orc_fm_row_mid(mk, mo, &rs, ri, (double)(span + hs), (double)(ri->hi - ri->lo + 1 + hs));

    /* pass 4: kernel and oracle weights, kappa_k, floors, LSE (sections 3.6, 4, 9) */
    double sum_pek = 0;
    for (int64_t t = 0; t < span; t++) {
        if (!vis[t]) continue;
        sum_pek += orc_fm_key_weights(mk, &rs, W[t], CO[t], E[t], &C[t], &CO[t]);
    }
    if (hs) { double cs, cos_; sum_pek += orc_fm_key_weights(mk, &rs, Ws, eta_os, eta_ks, &cs, &cos_); }
    orc_fm_row_end(mk, mo, &rs, sum_pek, ri);
}

/* Baseline row (FlashAttention's out_pt, in the input dtype): s = rd(rd(qs.k) + rd(m))
 * with qs = rd(q*scale), p = rd(softmax(s)), o = rd(sum p v) (accumulated in
 * double, rounded once). Fills P16 (0 where invisible). */
void orc_row_baseline(const orc_ctx *c, int64_t b, int64_t h, int64_t i, int64_t jlo,
                         int64_t span, const double *S16, const uint8_t *vis, double *P16) {
    double M = -INFINITY, L = 0;
    for (int64_t t = 0; t < span; t++) {
        P16[t] = 0;
        if (!vis[t]) continue;
        double x16 = orc_rd_fast(S16[t], c->dt);
        if (c->softcap > 0) x16 = orc_rd_fast(c->softcap * tanh(x16 / c->softcap), c->dt);
        double s = orc_rd_fast(x16 + orc_rd_fast(orc_mask_at(c, b, h, i, jlo + t), c->dt), c->dt);
        P16[t] = s;
        if (s > M) M = s;
    }
    double sink = c->has_sinks ? (double)c->sinks[h] : -INFINITY;
    if (sink > M) M = sink;
    if (sink > -INFINITY) L += exp(sink - M);
    for (int64_t t = 0; t < span; t++)
        if (vis[t]) { P16[t] = exp(P16[t] - M); L += P16[t]; }
    for (int64_t t = 0; t < span; t++)
        if (vis[t]) P16[t] = orc_rd_fast(P16[t] / L, c->dt);
}

// ----------------------------------------------------------------------------
// one row's outputs (both tiers: orc_fwd here, orc_gpu_fwd in oracle/gpu)

int orc_fwd_row_fill(const orc_ctx *c, const orc_model *mk, const orc_model *mo, const orc_options *opt,
                     orc_fwd_result *res, int64_t row, const orc_row_info *R, const double *num, const double *bsum,
                     const double *osum, const double *b16) {
    int64_t Dv = c->Dv;
    double *ref = res->o.ref + row * Dv, *bound = res->o.bound + row * Dv;
    double *oe = res->o.orc_err + row * Dv;
    uint8_t *fl = res->o.flags + row * Dv;
    double *bl = res->o.baseline && b16 ? res->o.baseline + row * Dv : NULL;
    /* the per-element logic is orc_formulas.h's (the GPU tier's device finishing calls it too) */
    int normal = R->kind == ROW_NORMAL, need_esc = normal && opt->tier == ORC_TIER_MPFR;
    for (int64_t d = 0; d < Dv; d++)
        need_esc |= orc_fm_fwd_out_elem(mk, mo, R, normal ? num[d] : 0, normal ? bsum[d] : 0, normal ? osum[d] : 0,
                                        opt->escalate_ratio, &ref[d], &oe[d], &bound[d], &fl[d]);
    if (bl)
        for (int64_t d = 0; d < Dv; d++)
            bl[d] = R->kind == ROW_MASKED ? 0 : normal ? orc_rd_fast(b16[d], c->dt) : NAN;
    double sk = c->has_sinks ? (double)c->sinks[res->o.index[row].h] : 0;
    need_esc |= orc_fm_fwd_lse(mk, R, c->has_sinks, sk, opt->escalate_ratio, &res->lse.ref[row],
                               &res->lse.orc_err[row], &res->lse.bound[row], &res->lse.flags[row]);
    return need_esc;
}

int64_t orc_fwd_row_esc(const orc_ctx *c, const orc_options *opt, orc_fwd_result *res, int64_t row, double *tmp) {
    int64_t Dv = c->Dv;
    double *ref = res->o.ref + row * Dv, *oe = res->o.orc_err + row * Dv;
    uint8_t *fl = res->o.flags + row * Dv;
    const orc_index *ix = &res->o.index[row];
    double lse_mp;
    orc_mpfr_fwd_row(c, ix->b, ix->h, ix->s, opt->mpfr_prec, tmp, &lse_mp);
    for (int64_t d = 0; d < Dv; d++) {
        ref[d] = tmp[d];
        oe[d] = orc_mpfr_err(tmp[d], oe[d], opt->mpfr_prec, (double)c->Sk);
        fl[d] = (uint8_t)((fl[d] & (ORC_F_UNCHECKABLE | ORC_F_OVERFLOW)) | orc_value_flags(tmp[d]) | ORC_F_ESCALATED);
        if (isinf(tmp[d])) fl[d] |= ORC_F_INF_INPUT;
    }
    res->lse.ref[row] = lse_mp;
    res->lse.orc_err[row] = orc_mpfr_err(lse_mp, res->lse.orc_err[row], opt->mpfr_prec, (double)c->Sk);
    res->lse.flags[row] |= ORC_F_ESCALATED;
    return Dv + 1;
}

int64_t orc_fwd_row_out(const orc_ctx *c, const orc_model *mk, const orc_model *mo, const orc_options *opt,
                        orc_fwd_result *res, int64_t row, const orc_row_info *R, const double *num,
                        const double *bsum, const double *osum, const double *b16, double *tmp) {
    if (!orc_fwd_row_fill(c, mk, mo, opt, res, row, R, num, bsum, osum, b16)) return 0;
    return orc_fwd_row_esc(c, opt, res, row, tmp);
}

// ----------------------------------------------------------------------------
// one tile: up to RT rows of the same (b, h)

typedef struct {
    const orc_ctx *c;
    const orc_model *mk, *mo;
    const orc_options *opt;
    const kv_head *kv;
    orc_fwd_result *res;
    int64_t esc;             /* escalated elements (reduction) */
} fwd_job;

static int fwd_tile(fwd_job *job, int64_t first, int nr) {
    const orc_ctx *c = job->c;
    const kv_head *kv = job->kv;
    orc_fwd_result *res = job->res;
    const orc_index *ix = res->o.index + first;
    int64_t b = ix[0].b, h = ix[0].h, D = c->D, Dv = c->Dv;
    int base = res->o.baseline != NULL;

    int64_t jlo = INT64_MAX, jhi = -1;
    for (int r = 0; r < nr; r++) {
        int64_t lo, hi;
        orc_row_range(&c->p, ix[r].s, &lo, &hi);
        if (hi < lo) continue;
        if (lo < jlo) jlo = lo;
        if (hi > jhi) jhi = hi;
    }
    int64_t span = jhi >= jlo ? jhi - jlo + 1 : 0;
    if (span == 0) jlo = 0;

    size_t ns = (size_t)(RT * (span ? span : 1));
    double *S = calloc(ns, sizeof(double)), *A = calloc(ns, sizeof(double));
    double *S16 = base ? calloc(ns, sizeof(double)) : NULL;
    double *W = malloc(ns * sizeof(double)), *C = malloc(ns * sizeof(double));
    double *CO = malloc(ns * sizeof(double)), *E = malloc(ns * sizeof(double));
    double *P16 = base ? malloc(ns * sizeof(double)) : NULL;
    uint8_t *vis = malloc(ns);
    double *q = malloc((size_t)(RT * D) * sizeof(double)), *q16 = malloc((size_t)(RT * D) * sizeof(double));
    double *acc = calloc((size_t)(RT * Dv) * 7, sizeof(double));
    if (!S || !A || (base && (!S16 || !P16)) || !W || !C || !CO || !E || !vis || !q || !q16 || !acc) {
        free(S); free(A); free(S16); free(W); free(C); free(CO); free(E); free(P16);
        free(vis); free(q); free(q16); free(acc);
        return 0;
    }
    double *num_hi = acc, *num_lo = acc + RT * Dv, *num = acc + 2 * RT * Dv;
    double *bnd = acc + 3 * RT * Dv, *orc = acc + 4 * RT * Dv, *b16 = acc + 5 * RT * Dv;
    double *tmp = acc + 6 * RT * Dv;

    /* scores: S = q.k, A = |q|.|k|, S16 = rd(q*scale).k over the tile span */
    for (int r = 0; r < nr; r++)
        for (int64_t d = 0; d < D; d++) {
            q[r * D + d] = orc_ld(c->q, c->qs, b, ix[r].s, h, d, c->dt);
            q16[r * D + d] = orc_rd_fast(q[r * D + d] * c->scale, c->dt);
        }
    orc_dots_p8(nr, D, jlo, span, q, base ? q16 : NULL, kv->kp8, S, A, S16, span);

    orc_row_info ri[RT];
    for (int r = 0; r < nr; r++) {
        double q1 = 0;
        for (int64_t d = 0; d < D; d++) q1 += fabs(q[r * D + d]);
        double ef = orc_score_floor(c, job->mk, q1 * (1 + 0x1p-40), kv->k1max);
        orc_row_weights(c, job->mk, job->mo, b, h, ix[r].s, jlo, span, S + r * span, A + r * span, ef,
                    vis + r * span, W + r * span, C + r * span, CO + r * span, E + r * span, &ri[r]);
        if (base) orc_row_baseline(c, b, h, ix[r].s, jlo, span, S16 + r * span, vis + r * span, P16 + r * span);
    }

    /* P.V: value (blocked compensated), kernel bound, oracle bound, baseline; key
     * blocks aligned to the ORC_PB-row panels of V */
    int64_t nch = orc_nch(Dv);
    for (int64_t jb = span ? jlo / ORC_PB * ORC_PB : 0; span && jb <= jhi; jb += ORC_PB) {
        int64_t kb = jlo > jb ? jlo - jb : 0, ke = jhi - jb + 1 < ORC_PB ? jhi - jb + 1 : ORC_PB, off = jb - jlo;
        const double *blk = kv->vp64 + (size_t)(jb / ORC_PB) * (size_t)nch * ORC_PB * 8;
        for (int r = 0; r < nr; r++) {
            if (ri[r].kind != ROW_NORMAL) continue;
            int64_t o = r * span;
            orc_wsum_p64(kb, ke, off, vis + o, W + o, C + o, CO + o, base ? P16 + o : NULL, 1, blk, Dv,
                         num + r * Dv, bnd + r * Dv, orc + r * Dv, b16 + r * Dv);
            double *hi = num_hi + r * Dv, *lo = num_lo + r * Dv, *nm = num + r * Dv;
            for (int64_t d = 0; d < Dv; d++) {
                double e;
                two_sum(hi[d], nm[d], &hi[d], &e);
                lo[d] += e;
            }
        }
    }

    /* finalize rows */
    int64_t esc = 0;
    for (int r = 0; r < nr; r++) {
        orc_row_info *R = &ri[r];
        if (R->kind == ROW_NORMAL) {
            R->ovf = orc_fm_pv_overflow(job->mk, (double)R->n, (double)(R->hi - R->lo + 1), kv->vmax);
            for (int64_t d = 0; d < Dv; d++) num[r * Dv + d] = num_hi[r * Dv + d] + num_lo[r * Dv + d];
        }
        esc += orc_fwd_row_out(c, job->mk, job->mo, job->opt, res, first + r, R, num + r * Dv, bnd + r * Dv,
                               orc + r * Dv, base ? b16 + r * Dv : NULL, tmp);
    }
#pragma omp atomic
    job->esc += esc;

    free(S); free(A); free(S16); free(W); free(C); free(CO); free(E); free(P16);
    free(vis); free(q); free(q16); free(acc);
    return 1;
}

// ----------------------------------------------------------------------------
// the rows of a result on one dense ctx

/* Evaluate the n rows of res (index sorted by (b, h, s), blocks allocated) on the dense
 * ctx c. Returns 0 on allocation failure; *esc += escalated elements. */
static int fwd_run(const orc_ctx *c, const orc_model *mk, const orc_model *mo, const orc_options *opt,
                   orc_fwd_result *res, int64_t n, int64_t *esc) {
    const orc_index *ix = res->o.index;
    int nth = orc_nthreads(opt);
    fwd_job job = {c, mk, mo, opt, NULL, res, 0};
    int ok = 1;
    /* rows are sorted by (b, h, s): walk kv-head groups, tile each group */
    for (int64_t g0 = 0; g0 < n && ok;) {
        int64_t b = ix[g0].b, hk = ix[g0].h / c->G, g1 = g0;
        while (g1 < n && ix[g1].b == b && ix[g1].h / c->G == hk) g1++;
        kv_head kv;
        if (!kv_load(c, b, hk, &kv, nth)) { kv_free(&kv); ok = 0; break; }
        job.kv = &kv;
        /* tiles: runs of <= RT rows of one query head */
        int64_t ntile_max = (g1 - g0), nt = 0;
        int64_t *tstart = malloc((size_t)ntile_max * sizeof(int64_t));
        int *tcount = malloc((size_t)ntile_max * sizeof(int));
        if (!tstart || !tcount) { free(tstart); free(tcount); kv_free(&kv); ok = 0; break; }
        for (int64_t r = g0; r < g1;) {
            int64_t e = r;
            while (e < g1 && e - r < RT && ix[e].h == ix[r].h) e++;
            tstart[nt] = r; tcount[nt] = (int)(e - r); nt++;
            r = e;
        }
        int tile_ok = 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
        for (int64_t t = 0; t < nt; t++)
            if (!fwd_tile(&job, tstart[t], tcount[t])) {
#pragma omp atomic write
                tile_ok = 0;
            }
        ok = tile_ok;
        free(tstart); free(tcount);
        kv_free(&kv);
        g0 = g1;
    }
    *esc += job.esc;
    return ok;
}

static fa_status fwd_alloc(orc_fwd_result *res, orc_index *ix, int64_t n, int64_t Dv, const orc_options *opt,
                           fa_error *err) {
    if (!ix || !orc_block_alloc(&res->o, n, Dv, opt->baseline) || !orc_block_alloc(&res->lse, n, 1, 0)) {
        free(ix);
        orc_fwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory for %lld rows.", (long long)n);
    }
    res->o.index = ix;
    res->lse.index = malloc((size_t)(n ? n : 1) * sizeof *ix);
    if (!res->lse.index) {
        orc_fwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory for %lld rows.", (long long)n);
    }
    memcpy(res->lse.index, ix, (size_t)n * sizeof *ix);
    return FA_OK;
}

/* A block's rows [r0, r0 + n) as a block of its own (pointers into blk), index replaced. */
static orc_block block_view(const orc_block *blk, int64_t r0, int64_t n, orc_index *ix) {
    orc_block v = *blk;
    size_t off = (size_t)(r0 * blk->dim);
    v.n = n;
    v.index = ix;
    v.ref += off; v.bound += off; v.orc_err += off; v.flags += off;
    if (v.baseline) v.baseline += off;
    return v;
}

/* Packed / paged problems (section 13): sequence by sequence on dense sub-problems. */
static fa_status orc_fwd_seq(const fa_fwd_args *args, const fa_precision *prof, const orc_options *opt,
                             orc_fwd_result *res, fa_error *err) {
    orc_ctx c;
    fa_status st;
    fa_fwd_args dense = *args; /* the problem and views, validated as far as dense rules go */
    memset(&dense.varlen, 0, sizeof dense.varlen);
    memset(&dense.paged, 0, sizeof dense.paged);
    dense.p.page_size = 0;
    if ((st = orc_ctx_fwd3(&dense, &c, err))) return st;
    if (args->mask.ptr && (args->varlen.cu_seqlens_q || args->varlen.cu_seqlens_k))
        return orc_fail(err, FA_ERR_INVALID, "mask", "the additive mask is not allowed with cu_seqlens.");
    orc_seqs sq;
    if ((st = orc_seqs_init(&sq, &args->p, &args->varlen, &args->paged, err))) return st;
    int64_t n;
    orc_index *ix = orc_sample_seq(c.B, c.Hq, sq.sq, opt->max_rows, opt->seed, &n);
    if ((st = fwd_alloc(res, ix, n, c.Dv, opt, err))) { orc_seqs_free(&sq); return st; }
    orc_index *tix = malloc((size_t)(n ? n : 1) * sizeof *tix);
    int ok = tix != NULL;
    int64_t esc = 0;
    for (int64_t r0 = 0; ok && r0 < n;) {
        int64_t b = ix[r0].b, r1 = r0;
        while (r1 < n && ix[r1].b == b) { tix[r1] = ix[r1]; tix[r1].b = 0; r1++; }
        fa_fwd_args sub;
        uint16_t *kb, *vb;
        orc_ctx cs;
        if (!orc_seq_sub_fwd(args, &sq, b, &sub, &kb, &vb)) { ok = 0; break; }
        if ((st = orc_ctx_fwd3(&sub, &cs, err))) { free(kb); free(vb); free(tix); orc_seqs_free(&sq); orc_fwd_free(res); return st; }
        orc_model mk, mo;
        orc_model_kernel(&cs, prof, &mk);
        orc_model_oracle(&cs, &mo);
        orc_fwd_result view = *res;
        view.o = block_view(&res->o, r0, r1 - r0, tix + r0);
        view.lse = block_view(&res->lse, r0, r1 - r0, tix + r0);
        ok = fwd_run(&cs, &mk, &mo, opt, &view, r1 - r0, &esc);
        free(kb); free(vb);
        r0 = r1;
    }
    free(tix);
    orc_seqs_free(&sq);
    if (!ok) {
        orc_fwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory in the forward oracle.");
    }
    res->args = *args;
    res->prof = *prof;
    res->opt = *opt;
    res->scale = c.scale;
    res->elements = n * (c.Dv + 1);
    res->escalations = esc;
    return FA_OK;
}

// ----------------------------------------------------------------------------
// public entry

fa_status orc_fwd(const fa_fwd_args *args, const fa_precision *prof, const orc_options *opt_in,
                  orc_fwd_result *res, fa_error *err) {
    orc_ctx c;
    orc_options opt;
    fa_status st;
    if (res) memset(res, 0, sizeof *res);
    if (!res) {
        return orc_fail(err, FA_ERR_INVALID, "res", "res is NULL; pass an orc_fwd_result.");
    }
    if (!args) return orc_fail(err, FA_ERR_INVALID, "args", "args is NULL; pass a fa_fwd_args.");
    if ((st = orc_check_profile(prof, err))) return st;
    if (opt_in) opt = *opt_in; else orc_options_init(&opt);
    if ((st = orc_check_options(&opt, err))) return st;
    if (orc_seq_active(&args->p, &args->varlen)) return orc_fwd_seq(args, prof, &opt, res, err);
    if ((st = orc_ctx_fwd3(args, &c, err))) return st;

    int64_t n;
    orc_index *ix = orc_sample(c.B, c.Hq, c.Sq, opt.max_rows, opt.seed, &n);
    if ((st = fwd_alloc(res, ix, n, c.Dv, &opt, err))) return st;
    res->args = *args;
    res->prof = *prof;
    res->opt = opt;
    res->scale = c.scale;

    orc_model mk, mo;
    orc_model_kernel(&c, prof, &mk);
    orc_model_oracle(&c, &mo);
    int64_t esc = 0;
    if (!fwd_run(&c, &mk, &mo, &opt, res, n, &esc)) {
        orc_fwd_free(res);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory in the forward oracle.");
    }
    res->elements = n * (c.Dv + 1);
    res->escalations = esc;
    return FA_OK;
}

void orc_fwd_free(orc_fwd_result *res) {
    if (!res) return;
    orc_block_free(&res->o);
    orc_block_free(&res->lse);
    memset(res, 0, sizeof *res);
}
