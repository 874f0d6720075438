/* check.c: judge a backend's outputs against the oracle, and the whole check
 * of one case (fc_check_case). The list of checks is in check.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/check/check.h"
#include "properties/check/oracle_tier.h"

/* Phases of fc_check_case timed for calls of oracle work >= 2^36 (production shapes; never a
 * fuzz case): one "check timing" line on stderr per such case, so that a certify run shows
 * where the time of its production entries goes. */
enum { TM_INIT, TM_FWD, TM_FCHK, TM_FORC, TM_FCMP, TM_DET, TM_BWD, TM_BCHK, TM_BORC, TM_BCMP, TM_N };
_Static_assert(TM_N == FC_PH_COUNT && TM_DET == FC_PH_OTHER && TM_BCMP == FC_PH_BWD_COMPARE,
               "the laps are check.h's phases");
#define TIMED_WORK ((int64_t)1 << 36)
static const char *const tm_name[TM_N] = {"inputs", "forward call", "forward buffer checks", "oracle forward",
                                          "compare forward", "determinism/other", "backward call",
                                          "backward buffer checks", "oracle backward", "compare backward"};
static _Thread_local double tm_total[TM_N]; /* fc_check_phase_seconds */

void fc_check_phase_seconds(double out[FC_PH_COUNT]) {
    for (int k = 0; k < TM_N; k++) out[k] = tm_total[k];
}

const char *fc_check_phase_name(int k) { return k >= 0 && k < TM_N ? tm_name[k] : "?"; }

static void lap_note(const fc_case *c, int k, double secs) {
    const char *const *name = tm_name;
    fprintf(stderr, "check phase B%lld Sq%lld Sk%lld H%lld/%lld: %s %.2f s\n", (long long)c->p.batch,
            (long long)c->p.seqlen_q, (long long)c->p.seqlen_k, (long long)c->p.heads_q, (long long)c->p.heads_kv,
            name[k], secs);
}

/* ---------------------------------------------------------------------------
 * Oracle glue
 * ------------------------------------------------------------------------- */
static fa_tensor host_tensor(const fc_buf *b) {
    fa_tensor t;
    t.ptr = b->alloc ? fc_buf_view(b) : NULL;
    for (int k = 0; k < 4; k++) t.stride[k] = b->stride[k];
    return t;
}

static fa_lse host_lse(const fc_buf *b) {
    fa_lse l;
    l.ptr = b->alloc ? (float *)fc_buf_view(b) : NULL;
    for (int k = 0; k < 3; k++) l.stride[k] = b->stride[k];
    return l;
}

static fa_mask host_mask(const fc_buf *b) {
    fa_mask m;
    memset(&m, 0, sizeof m);
    if (!b->alloc) return m;
    m.ptr = (const float *)fc_buf_view(b);
    for (int k = 0; k < 4; k++) m.stride[k] = b->stride[k];
    return m;
}

static void oracle_options(orc_options *opt) {
    orc_options_init(opt);
    opt->baseline = 0;
}

/* The oracle reads the contract-v3 arguments only when oracle/oracle.h says it implements
 * them (ORC_CONTRACT_V3); before that a v3 case is refused here, as a harness error (never a
 * finding), instead of an oracle that would read packed or paged tensors as dense ones. */
static int oracle_v3_refused(const fc_run *r, char *msg, size_t msglen) {
#ifdef ORC_CONTRACT_V3
    (void)r; (void)msg; (void)msglen;
    return 0;
#else
    if (!fc_case_is_v3(&r->c)) return 0;
    snprintf(msg, msglen, "the oracle of this build has no contract-v3 support (varlen, paged, softcap, sinks): "
                          "this case can run the oracle-free checks and properties only");
    return -1;
#endif
}

/* B Hq Sq Sk max(Dqk, Dv), saturating at INT64_MAX */
static int64_t oracle_work(const fc_case *c) {
    const fa_problem *p = &c->p;
    int64_t d = p->head_dim_qk > p->head_dim_v ? p->head_dim_qk : p->head_dim_v;
    int64_t f[5] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k, d}, w = 1;
    for (int k = 0; k < 5; k++) {
        if (f[k] <= 0) return 0;
        if (__builtin_mul_overflow(w, f[k], &w)) return INT64_MAX;
    }
    return w;
}

void fc_check_sample_plan(const fc_case *c, const fc_check_opts *o, int64_t *max_rows, int64_t *max_cols) {
    int64_t r = o ? o->max_rows : -1, k = o ? o->max_cols : -1;
    int big = oracle_work(c) > FC_CHECK_FULL_WORK;
    *max_rows = r >= 0 ? r : big ? FC_CHECK_SAMPLE : 0;
    *max_cols = k >= 0 ? k : big ? FC_CHECK_SAMPLE : 0;
}

/* The host args of r's inputs (the CPU tier's input; the GPU tier's after upload). */
void fc_oracle_host_fwd_args(const fc_run *r, fa_fwd_args *out) {
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.p = r->c.p;
    a.q = host_tensor(&r->buf[FC_T_Q]);
    a.k = host_tensor(&r->buf[FC_T_K]);
    a.v = host_tensor(&r->buf[FC_T_V]);
    a.mask = host_mask(&r->buf[FC_T_MASK]);
    a.o = host_tensor(&r->buf[FC_T_O]);
    a.lse = host_lse(&r->buf[FC_T_LSE]);
    fc_run_v3_args(r, &a.varlen, &a.paged);
    a.sinks = r->sinks;
    *out = a;
}

void fc_oracle_options(orc_options *opt) { oracle_options(opt); }

int fc_oracle_fwd(const fc_run *r, const fa_precision *prec, orc_fwd_result *res, char *msg, size_t msglen) {
    if (oracle_v3_refused(r, msg, msglen)) return -1;
    int64_t rows, cols;
    fc_check_sample_plan(&r->c, NULL, &rows, &cols);
    return fc_oracle_fwd_plan(r, prec, fc_check_oracle(), rows, res, NULL, msg, msglen);
}

int fc_oracle_bwd(const fc_run *r, const fa_precision *prec, orc_bwd_result *res, char *msg, size_t msglen) {
    if (oracle_v3_refused(r, msg, msglen)) return -1;
    int64_t rows, cols;
    fc_check_sample_plan(&r->c, NULL, &rows, &cols);
    return fc_oracle_bwd_plan(r, prec, fc_check_oracle(), rows, cols, res, NULL, msg, msglen);
}

void fc_oracle_host_bwd_args(const fc_run *r, fa_bwd_args *out) {
    fa_bwd_args a;
    memset(&a, 0, sizeof a);
    a.p = r->c.p;
    a.q = host_tensor(&r->buf[FC_T_Q]);
    a.k = host_tensor(&r->buf[FC_T_K]);
    a.v = host_tensor(&r->buf[FC_T_V]);
    a.o = host_tensor(&r->buf[FC_T_O]);
    a.dout = host_tensor(&r->buf[FC_T_DO]);
    a.lse = host_lse(&r->buf[FC_T_LSE]);
    a.mask = host_mask(&r->buf[FC_T_MASK]);
    a.dq = host_tensor(&r->buf[FC_T_DQ]);
    a.dk = host_tensor(&r->buf[FC_T_DK]);
    a.dv = host_tensor(&r->buf[FC_T_DV]);
    a.deterministic = r->c.deterministic;
    fc_run_v3_args(r, &a.varlen, &a.paged);
    a.sinks = r->sinks;
    a.dsinks = r->dsinks;
    *out = a;
}

/* Stress mode's sampled calls (check.h): max_rows rows and as many columns, the current tier. */
int fc_oracle_fwd_sampled(const fc_run *r, const fa_precision *prec, int64_t max_rows, orc_fwd_result *res, char *msg,
                          size_t msglen) {
    return fc_oracle_fwd_plan(r, prec, fc_check_oracle(), max_rows > 0 ? max_rows : 0, res, NULL, msg, msglen);
}

int fc_oracle_bwd_sampled(const fc_run *r, const fa_precision *prec, int64_t max_rows, orc_bwd_result *res, char *msg,
                          size_t msglen) {
    int64_t n = max_rows > 0 ? max_rows : 0;
    return fc_oracle_bwd_plan(r, prec, fc_check_oracle(), n, n, res, NULL, msg, msglen);
}

int64_t fc_oracle_find(const orc_block *blk, int64_t b, int64_t h, int64_t s) {
    int64_t lo = 0, hi = blk->n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const orc_index *x = &blk->index[mid];
        int cmp = x->b != b ? (x->b < b ? -1 : 1) : x->h != h ? (x->h < h ? -1 : 1) : x->s != s ? (x->s < s ? -1 : 1) : 0;
        if (cmp == 0) return mid;
        if (cmp < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* ---------------------------------------------------------------------------
 * Element-level judgement of one output tensor against one oracle block
 *
 * The element test itself (bound, with MPFR escalation of undecided
 * elements) is orc_compare_*; its stats arrive in `st`. Here: the reason
 * texts, the exact masked-row rule, and the magnitude test.
 * ------------------------------------------------------------------------- */
static void block_logical(const fc_run *r, int t, const orc_index *ix, int64_t k, int64_t idx[4]) {
    /* O, dQ: rows (b, hq, i) -> [b, i, hq, k]; dK, dV: columns (b, hkv, j) -> [b, j, hkv, k];
       LSE: (b, hq, i) -> [b, hq, i]. Contract v3 (BOUNDS.md 13.2): b is the sequence and the
       position is inside it; a packed tensor is [1, total, H, D] (LSE [1, H, total]), so row i
       of sequence b is cu[b] + i; a paged dK/dV vector is already a pool position (page, hkv,
       slot) of the [num_pages, page_size, Hkv, D] pool. */
    const int32_t *cu = t == FC_T_DK || t == FC_T_DV ? (r->table ? NULL : r->cu_k) : r->cu_q;
    int64_t b = cu ? 0 : ix->b, s = cu ? (int64_t)cu[ix->b] + ix->s : ix->s;
    if (t == FC_T_LSE) {
        idx[0] = b; idx[1] = ix->h; idx[2] = s; idx[3] = 0;
    } else {
        idx[0] = b; idx[1] = s; idx[2] = ix->h; idx[3] = k;
    }
}

/* the LSE value a masked row must hold, as text, from the reference of a masked-row element
   (NaN: none) */
static const char *lse_empty_name(double ref) {
    return ref == 0 ? "0 (the profile's lse_empty)" : ref > 0 ? "+inf (the profile's lse_empty)" : "-inf";
}

int64_t fc_judge_tensor(const fc_run *r, int t, const orc_stats *st, const fc_block_norms *nm, fc_verdict *v) {
    (void)r;
    fc_tensor_stats *ts = &v->t[t];
    const char *name = fc_tensor_name(t);
    const fc_phase ph = t == FC_T_O || t == FC_T_LSE ? FC_PHASE_FORWARD : FC_PHASE_BACKWARD;
    int64_t problems = 0;
    ts->checked = 1;
    ts->elements = st->checked;
    ts->violations = st->failed - st->nan_unexpected - st->nan_missing;
    if (ts->violations < 0) ts->violations = 0;
    ts->nonfinite_mismatch = st->nan_unexpected + st->nan_missing;
    /* A correctly rounded +-Inf (exact value past the dtype's overflow threshold) is accepted by
       orc_compare itself and counted in st->overflow_inf, not in the failures. */
    ts->max_ratio = st->worst_ratio;
    ts->max_abs_err = st->max_err;
    memcpy(ts->worst, st->worst_at, sizeof ts->worst);
    ts->worst_got = st->worst_kernel;
    ts->worst_ref = st->worst_ref;
    ts->worst_bound = st->worst_bound;
    memcpy(ts->ratio_hist, st->ratio_hist, sizeof ts->ratio_hist);
    ts->exact = st->exact;
    ts->nonfinite_ok = st->nonfinite_match + st->overflow_inf;
    ts->uncheckable = st->unchecked;
    ts->bias_sum = st->bias_sum;
    ts->bias_zero_sum = st->bias_zero_sum;
    ts->bias_n = st->bias_n;
    ts->grid_rows = st->grid_rows;
    ts->grid_cols = st->grid_cols;
    ts->grid_hb = st->grid_hb;
    ts->grid_sb = st->grid_sb;
    ts->grid_heads = st->grid_heads;
    ts->grid_seq = st->grid_seq;
    memcpy(ts->grid, st->grid, sizeof ts->grid);
    if (ts->violations > 0) {
        fc_verdict_add(v, ph, FC_REASON_FAILURE, "bound", "%s: %lld of %lld elements outside their bound; worst |got-ref|/bound = %.3g at "
                                    "[%lld,%lld,%lld,%lld]: got %.9g, ref %.9g, bound %.3g",
                        name, (long long)ts->violations, (long long)st->checked, st->worst_ratio,
                        (long long)st->worst_at[0], (long long)st->worst_at[1], (long long)st->worst_at[2],
                        (long long)st->worst_at[3], st->worst_kernel, st->worst_ref, st->worst_bound);
        problems += ts->violations;
    }
    if (ts->nonfinite_mismatch > 0) {
        fc_verdict_add(v, ph, FC_REASON_FAILURE, "nan", "%s: %lld elements NaN/Inf where the oracle is finite (not counting %lld correctly "
                                  "rounded overflows to Inf), %lld finite (or another non-finite) where the oracle is NaN/Inf; "
                                  "first at [%lld,%lld,%lld,%lld]",
                        name, (long long)st->nan_unexpected, (long long)st->overflow_inf,
                        (long long)st->nan_missing,
                        (long long)st->first_fail_at[0], (long long)st->first_fail_at[1],
                        (long long)st->first_fail_at[2], (long long)st->first_fail_at[3]);
        problems += ts->nonfinite_mismatch;
    }
    ts->overflow_sensitive = st->overflow_sensitive;
    if (st->overflow_sensitive > 0) {
        /* the profile's own intermediates may overflow for these magnitudes (oracle/BOUNDS.md
           section 11): reported as its own class with the case, never as a pass or a failure */
        fc_verdict_add(v, ph, FC_REASON_OVERFLOW, NULL, "%s: %lld elements NaN/Inf where the profile's own intermediates may overflow "
                               "for these magnitudes (oracle/BOUNDS.md section 11); first at [%lld,%lld,%lld,%lld]",
                            name, (long long)st->overflow_sensitive, (long long)st->first_ovf_at[0],
                            (long long)st->first_ovf_at[1], (long long)st->first_ovf_at[2],
                            (long long)st->first_ovf_at[3]);
    }
    if (st->unchecked > 0) {
        /* no finite bound exists for these elements (e.g. fp32 score error too large for exp):
           they are not judged, so the case cannot PASS */
        fc_verdict_add(v, ph, FC_REASON_UNCHECKABLE, NULL, "%s: %lld elements have no finite oracle bound (uncheckable); not judged", name,
                        (long long)st->unchecked);
    }
    if (st->failed > 0 && ts->violations == 0 && ts->nonfinite_mismatch == 0) {
        fc_verdict_add(v, ph, FC_REASON_FAILURE, "bound", "%s: oracle compare reports %lld failed elements", name, (long long)st->failed);
        problems += st->failed;
    }

    if (nm->masked_bad) {
        fc_verdict_add(v, ph, FC_REASON_FAILURE, "masked_row", "%s: %lld elements of rows/columns with no visible key (or query) are not "
                                         "exactly %s; first at [%lld,%lld,%lld,%lld] = %.9g",
                        name, (long long)nm->masked_bad, t != FC_T_LSE ? "0" : lse_empty_name(nm->masked_ref),
                        (long long)nm->masked_at[0], (long long)nm->masked_at[1], (long long)nm->masked_at[2],
                        (long long)nm->masked_at[3], nm->masked_got);
        problems += nm->masked_bad;
    }
    ts->ref_norm2 = sqrt(nm->ref2);
    ts->got_norm2 = sqrt(nm->got2);
    ts->bound_norm2 = sqrt(nm->bnd2);
    /* | ||got|| - ||ref|| | <= ||got - ref|| <= ||bound + orc_err||; 1e-12 relative slack
       covers the rounding of the three double sums of squares (n < 2^31 terms, u = 2^-53). */
    double slack = 1e-12 * (ts->ref_norm2 + ts->got_norm2);
    if (fabs(ts->got_norm2 - ts->ref_norm2) > ts->bound_norm2 + slack) {
        fc_verdict_add(v, ph, FC_REASON_FAILURE, "magnitude", "%s: ||got||_2 = %.6g but ||ref||_2 = %.6g (allowed difference %.3g)", name,
                        ts->got_norm2, ts->ref_norm2, ts->bound_norm2);
        problems++;
    }
    ts->weak = ts->ref_norm2 > 0 && ts->bound_norm2 >= ts->ref_norm2;
    return problems;
}

void fc_block_norms_init(fc_block_norms *n) {
    memset(n, 0, sizeof *n);
    for (int k = 0; k < 4; k++) n->masked_at[k] = -1;
    n->masked_ref = NAN;
}

void fc_block_norms_host(const fc_run *r, int t, const orc_block *blk, fc_block_norms *out) {
    const fc_buf *b = &r->buf[t];
    fc_block_norms_init(out);
    /* masked rows (exact), magnitude */
    double ref2 = 0, got2 = 0, bnd2 = 0;
    /* a vector's elements lie at one stride (the last dim; LSE vectors have one element): its
       first element's index, then steps; values decoded as fc_buf_get does. The block's arrays
       are read through locals (nothing here writes them), the sums run in element order. */
    const int64_t step = t == FC_T_LSE ? 0 : b->stride[3], dim = blk->dim;
    const char *base = b->alloc;
    const double *ref = blk->ref, *bound = blk->bound, *oerr = blk->orc_err;
    const uint8_t *flags = blk->flags;
    const int f32 = b->elem_size == 4, bf = b->dtype_bf16;
    double masked_ref = out->masked_ref;
    for (int64_t vi = 0; vi < blk->n; vi++) {
        int64_t idx[4];
        block_logical(r, t, &blk->index[vi], 0, idx);
        const int64_t e0 = fc_buf_index(b, idx);
        for (int64_t k = 0; k < dim; k++) {
            int64_t e = vi * dim + k, at = e0 + k * step;
            double got;
            if (f32) {
                float g;
                memcpy(&g, base + (size_t)at * 4, 4);
                got = (double)g;
            } else {
                uint16_t h;
                memcpy(&h, base + (size_t)at * 2, 2);
                got = fc_half_to_double(h, bf);
            }
            uint8_t f = flags[e];
            if (f & ORC_F_MASKED_ROW) {
                /* exactly the declared value: O, dQ, dK, dV 0; LSE the profile's lse_empty
                   (-inf by the contract) */
                if (isnan(masked_ref)) masked_ref = ref[e];
                if (!(got == ref[e])) {
                    if (!out->masked_bad) {
                        if (t != FC_T_LSE) idx[3] = k;
                        memcpy(out->masked_at, idx, sizeof idx);
                        out->masked_got = got;
                    }
                    out->masked_bad++;
                }
                continue;
            }
            if (f & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE)) continue;
            if (!isfinite(got)) continue; /* counted by "nan" */
            double rf = ref[e], bd = bound[e] + oerr[e];
            ref2 += rf * rf;
            got2 += got * got;
            bnd2 += bd * bd;
        }
    }
    out->masked_ref = masked_ref;
    out->ref2 = ref2;
    out->got2 = got2;
    out->bnd2 = bnd2;
}

/* ---------------------------------------------------------------------------
 * Declared rules for non-finite values (check.h above fc_mnf; PROPERTIES.md "Masked
 * non-finite"; oracle/BOUNDS.md 10.6, 10.8). Applied to a copy of the oracle block: an
 * accepted element gets the reference the backend's value matches (NaN, or +inf for the LSE of
 * a NaN row), so the compare counts it as a matched non-finite value; nothing else changes.
 * ------------------------------------------------------------------------- */

/* out = blk with the rules applied (fresh ref and flags arrays when some element is accepted,
   else the same arrays); *prop += elements NaN by the masked non-finite rule, *lse_inf += LSE
   elements +inf where the oracle is NaN. 0, or -1 out of memory. */
static int nf_rules(const fc_run *r, int t, const orc_block *blk, const fa_precision *prof, const fc_mnf *m,
                    orc_block *out, int64_t *prop, int64_t *lse_inf) {
    *out = *blk;
    const int rows = t == FC_T_O || t == FC_T_LSE || t == FC_T_DQ;
    const int lse_pos = t == FC_T_LSE && prof->lse_empty == FA_LSE_EMPTY_POS_INF;
    if (!m->on && !lse_pos) return 0;
    const fc_buf *b = &r->buf[t];
    for (int64_t vi = 0; vi < blk->n; vi++) {
        const orc_index *ix = &blk->index[vi];
        const int reach = rows ? fc_mnf_row(m, ix->b, ix->h, ix->s) : fc_mnf_col(m, ix->b, ix->h, ix->s);
        if (!reach && !lse_pos) continue;
        for (int64_t k = 0; k < blk->dim; k++) {
            const int64_t e = vi * blk->dim + k;
            int64_t idx[4];
            block_logical(r, t, ix, k, idx);
            if (t != FC_T_LSE) idx[3] = k;
            const double got = fc_buf_get(b, idx);
            const uint8_t f = blk->flags[e];
            double ref;
            uint8_t nf;
            if (reach && isnan(got) && !(f & (ORC_F_NAN | ORC_F_UNCHECKABLE))) {
                /* a masked pair's NaN/Inf through an exact-zero weight (fa_masked_nonfinite) */
                ref = NAN;
                nf = (uint8_t)((f & ~(ORC_F_MASKED_ROW | ORC_F_INF | ORC_F_INF_INPUT | ORC_F_OVERFLOW)) | ORC_F_NAN);
                (*prop)++;
            } else if (lse_pos && (f & ORC_F_NAN) && got == INFINITY) {
                /* FlashAttention-2 normalize_softmax_lse: sum != sum takes the empty row's branch */
                ref = INFINITY;
                nf = (uint8_t)((f & ~ORC_F_NAN) | ORC_F_INF);
                (*lse_inf)++;
            } else {
                continue;
            }
            if (out->ref == blk->ref) {
                const size_t n = (size_t)(blk->n * blk->dim);
                out->ref = malloc(n * sizeof *out->ref);
                out->flags = malloc(n);
                if (!out->ref || !out->flags) {
                    free(out->ref);
                    free(out->flags);
                    *out = *blk;
                    return -1;
                }
                memcpy(out->ref, blk->ref, n * sizeof *out->ref);
                memcpy(out->flags, blk->flags, n);
            }
            out->ref[e] = ref;
            out->flags[e] = nf;
        }
    }
    return 0;
}

static void nf_rules_free(const orc_block *blk, orc_block *out) {
    if (out->ref != blk->ref) free(out->ref);
    if (out->flags != blk->flags) free(out->flags);
}

/* the notes of the rules applied to a call's outputs (nothing when nothing was accepted) */
static void nf_rules_note(fc_verdict *v, int64_t prop, int64_t lse_inf, int64_t pairs) {
    if (prop > 0)
        fc_verdict_note(v, "masked non-finite: declared propagating; %lld elements NaN by it (%lld masked pairs with a "
                           "NaN/Inf input)", (long long)prop, (long long)pairs);
    if (lse_inf > 0)
        fc_verdict_note(v, "lse: %lld rows whose exact LSE is NaN hold +inf, as the profile's lse_empty +inf declares "
                           "(FlashAttention-2 normalize_softmax_lse)", (long long)lse_inf);
}

static int64_t judge(const fc_run *r, const orc_block *blk, const orc_stats *st, int t, fc_verdict *v) {
    fc_block_norms nm;
    fc_block_norms_host(r, t, blk, &nm);
    return fc_judge_tensor(r, t, st, &nm, v);
}

int64_t fc_check_fwd_outputs(const fc_run *r, const orc_fwd_result *res0, fc_verdict *v) {
    fa_tensor o = host_tensor(&r->buf[FC_T_O]);
    fa_lse lse = host_lse(&r->buf[FC_T_LSE]);
    orc_stats so, sl;
    fa_error err;
    memset(&err, 0, sizeof err);
    /* the declared non-finite rules on a shallow copy of the result (check.h) */
    orc_fwd_result rc = *res0, *res = &rc;
    fc_mnf m;
    int64_t po = 0, pl = 0, li = 0;
    if (fc_mnf_init(&m, r, &res0->prof, 0) || nf_rules(r, FC_T_O, &res0->o, &res0->prof, &m, &rc.o, &po, &li) ||
        nf_rules(r, FC_T_LSE, &res0->lse, &res0->prof, &m, &rc.lse, &pl, &li)) {
        nf_rules_free(&res0->o, &rc.o);
        fc_mnf_free(&m);
        fc_verdict_fail(v, "harness", "out of memory for the non-finite rules (forward)");
        return 1;
    }
    const int64_t pairs = m.pairs;
    fc_mnf_free(&m);
    fa_status st = orc_compare_fwd(res, &o, &lse, &so, &sl, &err);
    int64_t n = 1;
    if (st != FA_OK) {
        fc_verdict_fail(v, "harness", "oracle compare (forward) failed: %s: %s", fa_status_name(st), err.msg);
    } else {
        n = judge(r, &res->o, &so, FC_T_O, v);
        n += judge(r, &res->lse, &sl, FC_T_LSE, v);
        v->t[FC_T_O].propagated += po;
        v->t[FC_T_LSE].propagated += pl;
        nf_rules_note(v, po + pl, li, pairs);
    }
    nf_rules_free(&res0->o, &rc.o);
    nf_rules_free(&res0->lse, &rc.lse);
    return n;
}

static int64_t check_bwd(const fc_run *r, const orc_bwd_result *res, fc_verdict *v);

int64_t fc_check_bwd_outputs(const fc_run *r, const orc_bwd_result *res0, fc_verdict *v) {
    /* the declared non-finite rules on a shallow copy of the result (check.h) */
    orc_bwd_result rc = *res0;
    fc_mnf m;
    int64_t pq = 0, pk = 0, pv = 0, li = 0;
    const int bad = fc_mnf_init(&m, r, &res0->prof, 1) ||
                    nf_rules(r, FC_T_DQ, &res0->dq, &res0->prof, &m, &rc.dq, &pq, &li) ||
                    nf_rules(r, FC_T_DK, &res0->dk, &res0->prof, &m, &rc.dk, &pk, &li) ||
                    nf_rules(r, FC_T_DV, &res0->dv, &res0->prof, &m, &rc.dv, &pv, &li);
    const int64_t pairs = m.pairs;
    fc_mnf_free(&m);
    int64_t n = 1;
    if (bad) {
        fc_verdict_fail(v, "harness", "out of memory for the non-finite rules (backward)");
    } else {
        n = check_bwd(r, &rc, v);
        v->t[FC_T_DQ].propagated += pq;
        v->t[FC_T_DK].propagated += pk;
        v->t[FC_T_DV].propagated += pv;
        nf_rules_note(v, pq + pk + pv, 0, pairs);
    }
    nf_rules_free(&res0->dq, &rc.dq);
    nf_rules_free(&res0->dk, &rc.dk);
    nf_rules_free(&res0->dv, &rc.dv);
    return n;
}

static int64_t check_bwd(const fc_run *r, const orc_bwd_result *res, fc_verdict *v) {
    fa_tensor dq = host_tensor(&r->buf[FC_T_DQ]), dk = host_tensor(&r->buf[FC_T_DK]), dv = host_tensor(&r->buf[FC_T_DV]);
    orc_stats sq, sk, sv;
    fa_error err;
    memset(&err, 0, sizeof err);
    fa_status st = orc_compare_bwd(res, &dq, &dk, &dv, &sq, &sk, &sv, &err);
    if (st != FA_OK) {
        fc_verdict_fail(v, "harness", "oracle compare (backward) failed: %s: %s", fa_status_name(st), err.msg);
        return 1;
    }
    int64_t n = judge(r, &res->dq, &sq, FC_T_DQ, v);
    n += judge(r, &res->dk, &sk, FC_T_DK, v);
    n += judge(r, &res->dv, &sv, FC_T_DV, v);
    if (r->c.p.has_sinks && r->dsinks && res->dsinks.n > 0) {
        /* the sink gradient [Hq] (BOUNDS.md 14): every element, against its bound */
        orc_stats ss;
        st = orc_compare_dsinks(res, r->dsinks, &ss, &err);
        if (st != FA_OK) {
            fc_verdict_fail(v, "harness", "oracle compare (dsinks) failed: %s: %s", fa_status_name(st), err.msg);
            return n + 1;
        }
        if (ss.failed > 0) {
            fc_verdict_add(v, FC_PHASE_BACKWARD, FC_REASON_FAILURE, "bound", "dsinks: %lld of %lld elements outside their bound; worst |got-ref|/bound = %.3g "
                                        "at head %lld: got %.9g, ref %.9g, bound %.3g",
                            (long long)ss.failed, (long long)ss.checked, ss.worst_ratio, (long long)ss.worst_at[2],
                            ss.worst_kernel, ss.worst_ref, ss.worst_bound);
            n += ss.failed;
        }
    }
    return n;
}

/* ---------------------------------------------------------------------------
 * The device path's chunking (check.h): plan, views, merge, driver
 * ------------------------------------------------------------------------- */
int64_t fc_chunk_per(int64_t batch, double bytes_per_batch, double budget) {
    if (batch <= 0) return 0;
    if (!(bytes_per_batch > 0)) return batch;
    double k = floor(budget / bytes_per_batch);
    if (!(k >= 1)) return 0;
    return k >= (double)batch ? batch : (int64_t)k;
}

static void *adv(const void *p, int64_t elems, size_t esz) {
    return p ? (void *)((const char *)p + (ptrdiff_t)elems * (ptrdiff_t)esz) : NULL;
}

static fa_tensor tview(fa_tensor t, int64_t b0) {
    t.ptr = adv(t.ptr, b0 * t.stride[0], 2); /* fp16 / bf16 */
    return t;
}

void fc_fwd_args_batch_view(const fa_fwd_args *a, int64_t b0, int64_t nb, fa_fwd_args *out) {
    *out = *a;
    out->p.batch = nb;
    out->q = tview(a->q, b0);
    out->k = tview(a->k, b0);
    out->v = tview(a->v, b0);
    out->o = tview(a->o, b0);
    out->lse.ptr = adv(a->lse.ptr, b0 * a->lse.stride[0], sizeof(float));
    out->mask.ptr = adv(a->mask.ptr, b0 * a->mask.stride[0], sizeof(float));
}

void fc_bwd_args_batch_view(const fa_bwd_args *a, int64_t b0, int64_t nb, fa_bwd_args *out) {
    *out = *a;
    out->p.batch = nb;
    out->q = tview(a->q, b0);
    out->k = tview(a->k, b0);
    out->v = tview(a->v, b0);
    out->o = tview(a->o, b0);
    out->dout = tview(a->dout, b0);
    out->dq = tview(a->dq, b0);
    out->dk = tview(a->dk, b0);
    out->dv = tview(a->dv, b0);
    out->lse.ptr = adv(a->lse.ptr, b0 * a->lse.stride[0], sizeof(float));
    out->mask.ptr = adv(a->mask.ptr, b0 * a->mask.stride[0], sizeof(float));
}

void fc_stats_chunk_init(orc_stats *acc) {
    memset(acc, 0, sizeof *acc);
    for (int k = 0; k < 4; k++) acc->worst_at[k] = acc->first_fail_at[k] = acc->first_ovf_at[k] = -1;
    acc->median_ratio = NAN;
}

static void at_shift(int64_t dst[4], const int64_t src[4], int64_t b0) {
    memcpy(dst, src, 4 * sizeof *dst);
    if (src[0] >= 0) dst[0] = src[0] + b0;
}

void fc_stats_chunk_merge(orc_stats *acc, const orc_stats *s, int64_t b0, int first) {
    acc->checked += s->checked;
    acc->failed += s->failed;
    acc->unchecked += s->unchecked;
    acc->escalations += s->escalations;
    /* worst: strictly larger ratio wins (a tie keeps the earlier chunk, the smaller index); a
       chunk with no finite element has worst_at -1 and ratio 0 */
    if (first || (s->worst_at[0] >= 0 && (acc->worst_at[0] < 0 || s->worst_ratio > acc->worst_ratio))) {
        acc->worst_ratio = s->worst_ratio;
        at_shift(acc->worst_at, s->worst_at, b0);
        acc->worst_kernel = s->worst_kernel;
        acc->worst_ref = s->worst_ref;
        acc->worst_bound = s->worst_bound;
    }
    acc->nan_unexpected += s->nan_unexpected;
    acc->nan_missing += s->nan_missing;
    acc->overflow_inf += s->overflow_inf;
    acc->overflow_sensitive += s->overflow_sensitive;
    if (acc->first_ovf_at[0] < 0 && s->first_ovf_at[0] >= 0) at_shift(acc->first_ovf_at, s->first_ovf_at, b0);
    if (acc->first_fail_at[0] < 0 && s->first_fail_at[0] >= 0) at_shift(acc->first_fail_at, s->first_fail_at, b0);
    for (int k = 0; k < ORC_HIST_BUCKETS; k++) acc->ratio_hist[k] += s->ratio_hist[k];
    acc->exact += s->exact;
    acc->nonfinite_match += s->nonfinite_match;
    acc->bias_sum += s->bias_sum;
    acc->bias_zero_sum += s->bias_zero_sum;
    acc->bias_n += s->bias_n;
    if (first) {
        /* the grid's cells are (head block, position block), maxima over the batch: the same
           layout in every chunk of a call */
        acc->grid_rows = s->grid_rows;
        acc->grid_cols = s->grid_cols;
        acc->grid_hb = s->grid_hb;
        acc->grid_sb = s->grid_sb;
        acc->grid_heads = s->grid_heads;
        acc->grid_seq = s->grid_seq;
        memcpy(acc->grid, s->grid, sizeof acc->grid);
    } else {
        for (int i = 0; i < ORC_GRID_ROWS; i++)
            for (int j = 0; j < ORC_GRID_COLS; j++)
                if (s->grid[i][j] > acc->grid[i][j]) acc->grid[i][j] = s->grid[i][j];
    }
    if (s->max_err > acc->max_err) acc->max_err = s->max_err;
    acc->median_ratio = NAN;
}

void fc_norms_chunk_merge(fc_block_norms *acc, const fc_block_norms *s, int64_t b0) {
    acc->ref2 += s->ref2;
    acc->got2 += s->got2;
    acc->bnd2 += s->bnd2;
    if (acc->masked_bad == 0 && s->masked_bad > 0) {
        at_shift(acc->masked_at, s->masked_at, b0);
        acc->masked_got = s->masked_got;
    }
    acc->masked_bad += s->masked_bad;
    if (isnan(acc->masked_ref)) acc->masked_ref = s->masked_ref;
}

int fc_check_chunked(int64_t batch, int64_t per, int ntensors, fc_chunk_fn fn, void *user, orc_stats *st,
                     fc_block_norms *nm, int64_t *nchunks, char *msg, size_t msglen) {
    orc_stats cs[8];
    fc_block_norms cn[8];
    if (ntensors < 1 || ntensors > 8 || per < 1) {
        snprintf(msg, msglen, "harness: chunked check with %d tensors and %lld batches per chunk", ntensors,
                 (long long)per);
        return -1;
    }
    for (int k = 0; k < ntensors; k++) {
        fc_stats_chunk_init(&st[k]);
        fc_block_norms_init(&nm[k]);
    }
    int64_t n = 0;
    for (int64_t b0 = 0; b0 < batch;) {
        fc_chunk c = {b0, batch - b0 < per ? batch - b0 : per};
        for (int k = 0; k < ntensors; k++) {
            fc_stats_chunk_init(&cs[k]);
            fc_block_norms_init(&cn[k]);
        }
        int r = fn(user, &c, cs, cn, msg, msglen);
        if (r < 0) return -1;
        if (r > 0) {
            if (c.nb == 1) {
                char why[256];
                snprintf(why, sizeof why, "%s", msg);
                snprintf(msg, msglen, "harness: one batch of this call does not fit in device memory for the oracle "
                                      "(batch %lld%s%s); not judged", (long long)b0, why[0] ? ": " : "", why);
                return -1;
            }
            per = c.nb / 2; /* shrink and retry the same batches */
            continue;
        }
        for (int k = 0; k < ntensors; k++) {
            fc_stats_chunk_merge(&st[k], &cs[k], c.b0, n == 0);
            fc_norms_chunk_merge(&nm[k], &cn[k], c.b0);
        }
        n++;
        b0 += c.nb;
    }
    if (nchunks) *nchunks = n;
    return 0;
}

int fc_check_device_path(const fc_run *r) {
    if (!r->on_device || fc_case_is_v3(&r->c) || oracle_work(&r->c) < FC_CHECK_DEVICE_WORK) return 0;
    return fc_oracle_use_gpu(fc_check_oracle(), r->on_device, fc_oracle_gpu_usable(), (double)oracle_work(&r->c));
}

/* ---------------------------------------------------------------------------
 * The whole check of one case
 * ------------------------------------------------------------------------- */
static int g_have_profile;
static fa_precision g_profile;

void fc_check_set_profile(const fa_precision *prof) {
    g_have_profile = prof != NULL;
    if (prof) g_profile = *prof;
}

const fa_precision *fc_check_profile(const fa_backend *be) { return g_have_profile ? &g_profile : &be->precision; }

void fc_check_opts_default(fc_check_opts *o) {
    o->determinism = 1;
    o->backward = -1;
    o->verbose = 0;
    o->max_rows = -1;
    o->max_cols = -1;
    o->stress = 0;
}

/* Status of a call on a valid case: OK continues; UNSUPPORTED skips; anything
 * else fails. A rejected call must not have written its outputs. Returns 1
 * when the caller may go on checking outputs. */
static int judge_status(const fc_run *r, fc_phase ph, const int *outs, int nouts, fc_verdict *v) {
    if (r->status == FA_OK) return 1;
    const char *pass = fc_phase_name(ph);
    if (r->status == FA_ERR_UNSUPPORTED) {
        fc_verdict_decline(v, ph, "%s: backend says unsupported (%s): %s", pass, r->err.arg, r->err.msg);
    } else {
        /* the harness's own failure around the call is no finding against the backend */
        fc_verdict_add(v, ph, fc_run_status_kind(r), r->harness_err ? "harness" : "status",
                       "%s: backend rejected a valid case with %s (arg '%s'): %s", pass, fa_status_name(r->status),
                       r->err.arg, r->err.msg);
    }
    if (r->status != FA_ERR_DEVICE) {
        /* nothing may be written by a rejected call */
        for (int i = 0; i < nouts; i++) {
            fc_verdict tmp;
            fc_verdict_init(&tmp);
            fc_run rr = *r; /* shallow: only reads */
            if (fc_check_written(&rr, outs[i], &tmp) < fc_case_numel(&r->c, outs[i]))
                fc_verdict_add(v, ph, FC_REASON_FAILURE, "rejected_wrote", "%s: the call was rejected but output %s "
                               "was written", pass, fc_tensor_name(outs[i]));
        }
    }
    return 0;
}

/* The laps of one fc_check_case: each lap's time goes to the phase that just ended (tm[k]); a
 * production-size call (timed) prints a line per lap as it ends, so that a run cut short still shows
 * where its time went. */
typedef struct {
    double tm[TM_N], t0;
    int timed;
    const fc_case *c;
} check_laps;

static void lap(check_laps *l, int k) {
    double t1 = fc_clock_s();
    l->tm[k] += t1 - l->t0;
    l->t0 = t1;
    if (l->timed) lap_note(l->c, k, l->tm[k]);
}

/* The values of one pass (bwd: dQ, dK, dV; else O, LSE) judged against the oracle: with dev_path
 * on the device first (fc_check_*_device: oracle and compare in one pass, timed as the oracle's
 * lap; nch its chunks), else, or when the device path does not take the call, the host path (the
 * oracle, then the compare). The buffer checks' lap ends first. Returns 0 judged on the device, 1 on
 * the host, -1 after a harness failure (recorded in v). */
static int judge_values(const fa_backend *be, const fc_run *r, int bwd, int dev_path, int64_t max_rows,
                        int64_t max_cols, check_laps *L, int64_t *nch, fc_verdict *v, char *msg, size_t msglen) {
    const int chk = bwd ? TM_BCHK : TM_FCHK, orc = chk + 1, cmp = chk + 2;
    const fa_precision *prof = fc_check_profile(be);
    if (dev_path) {
        lap(L, chk);
        int d = bwd ? fc_check_bwd_device(r, prof, v, nch, msg, msglen) : fc_check_fwd_device(r, prof, v, nch, msg, msglen);
        lap(L, orc);
        if (d < 0) {
            fc_verdict_fail(v, "harness", "%s", msg);
            return -1;
        }
        if (d == 0) return 0;
    }
    lap(L, chk);
    int st;
    if (bwd) {
        orc_bwd_result res;
        st = fc_oracle_bwd_plan(r, prof, fc_check_oracle(), max_rows, max_cols, &res, NULL, msg, msglen);
        if (!st) {
            lap(L, orc);
            fc_check_bwd_outputs(r, &res, v);
            orc_bwd_free(&res);
        }
    } else {
        orc_fwd_result res;
        st = fc_oracle_fwd_plan(r, prof, fc_check_oracle(), max_rows, &res, NULL, msg, msglen);
        if (!st) {
            lap(L, orc);
            fc_check_fwd_outputs(r, &res, v);
            orc_fwd_free(&res);
        }
    }
    if (st) {
        fc_verdict_fail(v, "harness", "%s", msg);
        return -1;
    }
    lap(L, cmp);
    return 1;
}

fc_outcome fc_check_case(const fa_backend *be, const fc_case *c0, const fc_check_opts *o, fc_verdict *v) {
    fc_check_opts def;
    if (!o) {
        fc_check_opts_default(&def);
        o = &def;
    }
    fc_verdict_init(v);
    fc_case c = *c0;
    if (o->backward >= 0) c.backward = o->backward;
    if (!be->backward) {
        if (c.backward)
            fc_verdict_add(v, FC_PHASE_BACKWARD, FC_REASON_NOT_JUDGED, NULL, "backend %s has no backward; backward not "
                           "checked", be->name);
        c.backward = 0;
    }
    char msg[512];
    fc_run r1, r2;
    int second = 0; /* r2 initialized */
    int64_t nch_f = 0, nch_b = 0; /* chunks of the device path (0: host path) */
    memset(&r2, 0, sizeof r2);
    check_laps L = {{0}, fc_clock_s(), oracle_work(&c) >= TIMED_WORK, &c};
    double *const tm = L.tm;
#define LAP(k) lap(&L, k)
    if (fc_run_init(&r1, &c, FC_POISON_A, msg, sizeof msg)) {
        fc_verdict_fail(v, "harness", "%s", msg);
        return v->outcome;
    }
    const int fwd_outs[2] = {FC_T_O, FC_T_LSE}, bwd_outs[3] = {FC_T_DQ, FC_T_DK, FC_T_DV};

    LAP(TM_INIT);
    /* forward */
    fc_run_forward(&r1, be);
    LAP(TM_FWD);
    fc_check_inputs_unchanged(&r1, v);
    fc_check_guards(&r1, v);
    if (!judge_status(&r1, FC_PHASE_FORWARD, fwd_outs, 2, v)) goto done;
    fc_check_written(&r1, FC_T_O, v);
    fc_check_written(&r1, FC_T_LSE, v);
    int64_t max_rows, max_cols;
    fc_check_sample_plan(&c, o, &max_rows, &max_cols);
    const int no_oracle = oracle_v3_refused(&r1, msg, sizeof msg) != 0;
    /* production size on a CUDA backend: judged on the device in batch chunks (check.h), unless
       the device path does not take the call (then the host path, for the backward too) */
    int dev_path = !no_oracle && fc_check_device_path(&r1);
    if (no_oracle) {
        fc_verdict_add(v, FC_PHASE_FORWARD, FC_REASON_NOT_JUDGED, NULL, "forward values not judged: %s", msg);
    } else {
        const int where = judge_values(be, &r1, 0, dev_path, max_rows, max_cols, &L, &nch_f, v, msg, sizeof msg);
        if (where < 0) goto done;
        dev_path = where == 0;
    }

    /* second run: fresh buffers, other poison */
    if (o->determinism) {
        if (fc_run_init(&r2, &c, FC_POISON_B, msg, sizeof msg)) {
            fc_verdict_fail(v, "harness", "%s", msg);
            goto done;
        }
        second = 1;
        fc_run_forward(&r2, be);
        if (r2.status != r1.status) {
            fc_verdict_add(v, FC_PHASE_FORWARD, r2.status != FA_OK ? fc_run_status_kind(&r2) : FC_REASON_FAILURE,
                           r2.harness_err ? "harness" : "determinism", "forward: second run returned %s, "
                           "first %s", fa_status_name(r2.status), fa_status_name(r1.status));
        } else {
            fc_check_guards(&r2, v);
            fc_check_inputs_unchanged(&r2, v);
            fc_check_same_bits(&r1, &r2, FC_T_O, "determinism", v);
            fc_check_same_bits(&r1, &r2, FC_T_LSE, "determinism", v);
        }
    }

    LAP(TM_DET);
    /* backward (on the backend's own forward outputs) */
    if (c.backward) {
        fc_run_backward(&r1, be);
        LAP(TM_BWD);
        fc_check_inputs_unchanged(&r1, v);
        fc_check_guards(&r1, v);
        if (!judge_status(&r1, FC_PHASE_BACKWARD, bwd_outs, 3, v)) goto done;
        for (int i = 0; i < 3; i++) fc_check_written(&r1, bwd_outs[i], v);
        if (no_oracle) {
            fc_verdict_add(v, FC_PHASE_BACKWARD, FC_REASON_NOT_JUDGED, NULL,
                           "backward values not judged: the oracle of this build has no contract-v3 support");
        } else if (dev_path && v->outcome == FC_FAIL && (LAP(TM_BCHK), 1)) {
            /* a production-size call whose forward already failed: the backward ran (status,
               guards, unwritten outputs, inputs above) but its values are not judged; the
               forward's failure is the finding, the backward's oracle pass would cost minutes */
            fc_verdict_add(v, FC_PHASE_BACKWARD, FC_REASON_NOT_JUDGED, NULL,
                           "backward values not judged: the forward of this production-size call already failed");
        } else if (judge_values(be, &r1, 1, dev_path, max_rows, max_cols, &L, &nch_b, v, msg, sizeof msg) < 0) {
            goto done;
        }
        if (second && c.deterministic && r2.status == FA_OK) {
            fc_run_backward(&r2, be);
            if (r2.status != r1.status) {
                fc_verdict_add(v, FC_PHASE_BACKWARD, r2.status != FA_OK ? fc_run_status_kind(&r2) : FC_REASON_FAILURE,
                               r2.harness_err ? "harness" : "determinism", "backward: second run returned "
                               "%s, first %s", fa_status_name(r2.status), fa_status_name(r1.status));
            } else {
                fc_check_guards(&r2, v);
                for (int i = 0; i < 3; i++) fc_check_same_bits(&r1, &r2, bwd_outs[i], "determinism", v);
            }
        }
    }
    /* stress mode: only once every check above passed (a failing case needs no more runs) */
    if (o->stress > 0 && (v->outcome == FC_PASS || v->outcome == FC_SKIP)) fc_check_stress(be, &c, o->stress, v);
done:
    LAP(TM_DET);
    fc_run_free(&r1);
    if (second) fc_run_free(&r2);
    LAP(TM_DET);
    for (int k = 0; k < TM_N; k++) tm_total[k] += tm[k];
    char dev_note[96];
    if (nch_f || nch_b)
        snprintf(dev_note, sizeof dev_note, "device path (oracle and compare on the GPU): %lld + %lld chunks",
                 (long long)nch_f, (long long)nch_b);
    else
        snprintf(dev_note, sizeof dev_note, "host path");
    if (oracle_work(&c) >= TIMED_WORK)
        fprintf(stderr,
                "check timing B%lld Sq%lld Sk%lld H%lld/%lld D%lld: inputs %.2f s, forward %.2f s (+ buffer checks "
                "%.2f s), oracle fwd %.2f s, compare fwd %.2f s, backward %.2f s (+ buffer checks %.2f s), oracle bwd "
                "%.2f s, compare bwd %.2f s, other (determinism run, stress, frees) %.2f s; %s\n",
                (long long)c.p.batch, (long long)c.p.seqlen_q, (long long)c.p.seqlen_k, (long long)c.p.heads_q,
                (long long)c.p.heads_kv, (long long)c.p.head_dim_qk, tm[TM_INIT], tm[TM_FWD], tm[TM_FCHK],
                tm[TM_FORC], tm[TM_FCMP], tm[TM_BWD], tm[TM_BCHK], tm[TM_BORC], tm[TM_BCMP], tm[TM_DET], dev_note);
#undef LAP
    if (o->verbose && v->outcome == FC_FAIL) fc_verdict_print(v, stderr);
    return v->outcome;
}
