/* properties.c: metamorphic properties of attention (see properties.h; the
 * bounds are derived in PROPERTIES.md, section names match the functions). */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/prop_internal.h"
#include "properties/properties.h"

/* ---------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------- */
void fc_prop_fail(fc_verdict *v, const char *prop, const char *fmt, ...) {
    char check[40], text[256];
    snprintf(check, sizeof check, "property:%s", prop);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fc_verdict_fail(v, check, "%s", text);
}

static int64_t buf_numel(const fc_buf *b) {
    int64_t n = 1;
    for (int k = 0; k < b->ndim; k++) n *= b->dim[k];
    return n;
}

static void unravel(const fc_buf *b, int64_t e, int64_t idx[4]) {
    idx[3] = 0;
    for (int k = b->ndim - 1; k >= 0; k--) {
        idx[k] = e % b->dim[k];
        e /= b->dim[k];
    }
}

static const void *elem_ptr(const fc_buf *b, const int64_t idx[4]) {
    return (const char *)b->alloc + fc_buf_index(b, idx) * (int64_t)b->elem_size;
}

static int same_bits(const fc_buf *a, const fc_buf *b, const int64_t idx[4]) {
    return memcmp(elem_ptr(a, idx), elem_ptr(b, idx), a->elem_size) == 0;
}

/* The properties written for dense [B, S, H, D] tensors and the v2 softmax skip contract-v3
 * cases (packed or paged tensors, softcap, sinks); those get packing, paging (prop_v3.c),
 * determinism and pow2_scale, which hold for them as written. */
static int V3_NOT_YET(const fc_case *c, fc_verdict *v, const char *prop) {
    if (!fc_case_is_v3(c)) return 0;
    fc_verdict_skip(v, "%s: not defined for contract-v3 cases (packed/paged tensors, softcap, sinks)", prop);
    return 1;
}

static int init_run(fc_run *r, const fc_case *c, int poison, fc_verdict *v, const char *prop) {
    char msg[300];
    if (fc_run_init(r, c, poison, msg, sizeof msg)) {
        fc_prop_fail(v, prop, "harness: %s", msg);
        return 0;
    }
    return 1;
}

int fc_prop_call(const fa_backend *be, fc_run *r, int bwd, fc_verdict *v, const char *prop) {
    fc_phase ph = FC_PHASE_FORWARD;
    fa_status st = fc_run_forward(r, be);
    if (st == FA_OK && bwd) {
        ph = FC_PHASE_BACKWARD;
        st = be->backward ? fc_run_backward(r, be) : FA_ERR_UNSUPPORTED;
    }
    if (st == FA_OK) return 1;
    if (st == FA_ERR_UNSUPPORTED) fc_verdict_decline(v, ph, "%s: %s unsupported: %s", prop, fc_phase_name(ph), r->err.msg);
    else fc_prop_fail(v, prop, "%s: backend returned %s: %s", fc_phase_name(ph), fa_status_name(st), r->err.msg);
    return st == FA_ERR_UNSUPPORTED && ph == FC_PHASE_BACKWARD ? 2 : 0;
}

/* fc_prop_call: 1 when every call succeeded, else 0 (the reason recorded). */
static int run_all(const fa_backend *be, fc_run *r, int bwd, fc_verdict *v, const char *prop) {
    return fc_prop_call(be, r, bwd, v, prop) == 1;
}

static int oracle_fwd(const fc_run *r, const fa_backend *be, orc_fwd_result *res, fc_verdict *v, const char *prop) {
    char msg[300];
    if (fc_oracle_fwd(r, fc_check_profile(be), res, msg, sizeof msg)) {
        fc_prop_fail(v, prop, "harness: %s", msg);
        return 0;
    }
    return 1;
}

static int oracle_bwd(const fc_run *r, const fa_backend *be, orc_bwd_result *res, fc_verdict *v, const char *prop) {
    char msg[300];
    if (fc_oracle_bwd(r, fc_check_profile(be), res, msg, sizeof msg)) {
        fc_prop_fail(v, prop, "harness: %s", msg);
        return 0;
    }
    return 1;
}

/* Oracle block entry of logical element idx of tensor t: vector (b, h, s),
 * component k. Returns the flat entry or -1 when not computed. */
static int64_t blk_entry(const orc_block *blk, int t, const int64_t idx[4]) {
    int64_t vi = t == FC_T_LSE ? fc_oracle_find(blk, idx[0], idx[1], idx[2]) : fc_oracle_find(blk, idx[0], idx[2], idx[1]);
    if (vi < 0) return -1;
    return vi * blk->dim + (t == FC_T_LSE ? 0 : idx[3]);
}

static double blk_bound(const orc_block *blk, int t, const int64_t idx[4], uint8_t *flags) {
    int64_t e = blk_entry(blk, t, idx);
    if (e < 0) {
        *flags = ORC_F_UNCHECKABLE;
        return INFINITY;
    }
    *flags = blk->flags[e];
    return blk->bound[e];
}

/* Exactly representable grid values: x rounded to a multiple of 1/16 and
 * clamped to [-2, 2]. Sums of two such values lie on the grid in [-4, 4],
 * representable in fp16 and bf16 (8 significant bits suffice: 4 = 2^2, 2^2 / 2^-4 = 2^6). */
static double grid16(double x) {
    double g = nearbyint(x * 16.0) / 16.0;
    return fmax(-2.0, fmin(2.0, g));
}

static void quantize(fc_run *r, int t) {
    fc_buf *b = &r->buf[t];
    int64_t idx[4], n = buf_numel(b);
    for (int64_t e = 0; e < n; e++) {
        unravel(b, e, idx);
        fc_buf_set(b, idx, grid16(fc_buf_get(b, idx)));
    }
}

/* |x - y| <= ba + bb for tensor t of two runs whose exact values are equal
 * (triangle inequality through the common exact value). seq_map (or NULL)
 * maps run b's index along dim 1 to run a's. Elements flagged masked in both
 * are skipped (the checks test them exactly). Returns violations. */
static int64_t within_sum_of_bounds(const char *prop, int t, const fc_run *ra, const orc_block *ba, const fc_run *rb,
                                    const orc_block *bb, const int64_t *seq_map, fc_verdict *v) {
    const fc_buf *xa = &ra->buf[t], *xb = &rb->buf[t];
    int64_t n = buf_numel(xb), bad = 0, idx[4], ia[4], worst[4] = {0, 0, 0, 0};
    double worst_r = 0, wx = 0, wy = 0, wbd = 0;
    for (int64_t e = 0; e < n; e++) {
        unravel(xb, e, idx);
        memcpy(ia, idx, sizeof ia);
        if (seq_map) ia[1] = seq_map[idx[1]];
        uint8_t fa, fb;
        double bda = blk_bound(ba, t, ia, &fa), bdb = blk_bound(bb, t, idx, &fb);
        if ((fa & ORC_F_UNCHECKABLE) || (fb & ORC_F_UNCHECKABLE)) continue;
        if ((fa & ORC_F_MASKED_ROW) && (fb & ORC_F_MASKED_ROW)) continue;
        double x = fc_buf_get(xa, ia), y = fc_buf_get(xb, idx);
        double lim = bda + bdb, d = fabs(x - y);
        int ok = isfinite(x) && isfinite(y) ? d <= lim : (x == y);
        if (!ok) {
            double r = lim > 0 ? d / lim : INFINITY;
            if (!bad || r > worst_r) {
                worst_r = r;
                memcpy(worst, idx, sizeof worst);
                wx = x; wy = y; wbd = lim;
            }
            bad++;
        }
    }
    if (bad)
        fc_prop_fail(v, prop,
                     "%s: %lld elements differ by more than bound_a + bound_b; worst at [%lld,%lld,%lld,%lld]: "
                       "%.9g vs %.9g (allowed %.3g)",
              fc_tensor_name(t), (long long)bad, (long long)worst[0], (long long)worst[1], (long long)worst[2],
              (long long)worst[3], wx, wy, wbd);
    return bad;
}

static double dtype_min_normal(fa_dtype d) { return d == FA_BF16 ? 0x1p-126 : 0x1p-14; }
static double dtype_max(fa_dtype d) { return d == FA_BF16 ? 0x1.FEp127 : 65504.0; }

/* Is key j visible to query row (b, h, i) of run r: causal/window rule of the
 * oracle (orc_visible, independent of every kernel) and the mask's -inf. */
static int visible(const fc_run *r, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!orc_visible(&r->c.p, i, j)) return 0;
    if (r->buf[FC_T_MASK].alloc) {
        int64_t idx[4] = {b, h, i, j};
        if (fc_buf_get(&r->buf[FC_T_MASK], idx) == -INFINITY) return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------------
 * row_sums
 * ------------------------------------------------------------------------- */
fc_outcome fc_prop_row_sums(const fa_backend *be, const fc_case *c0, fc_verdict *v) {
    const char *prop = "row_sums";
    fc_verdict_init(v);
    if (V3_NOT_YET(c0, v, prop)) return v->outcome;
    if (c0->p.head_dim_v == 0 || fc_case_numel(c0, FC_T_O) == 0) {
        fc_verdict_skip(v, "%s: no output elements", prop);
        return v->outcome;
    }
    fc_case c = *c0;
    c.backward = 0;
    fc_run r;
    if (!init_run(&r, &c, FC_POISON_A, v, prop)) return v->outcome;
    fc_buf *vb = &r.buf[FC_T_V];
    int64_t idx[4], n = buf_numel(vb);
    for (int64_t e = 0; e < n; e++) {
        unravel(vb, e, idx);
        if (idx[3] == 0) fc_buf_set(vb, idx, 1.0);
    }
    orc_fwd_result res;
    if (run_all(be, &r, 0, v, prop) && oracle_fwd(&r, be, &res, v, prop)) {
        const fc_buf *ob = &r.buf[FC_T_O];
        int64_t m = buf_numel(ob), bad = 0, checked = 0;
        for (int64_t e = 0; e < m; e++) {
            unravel(ob, e, idx);
            if (idx[3] != 0) continue;
            uint8_t f;
            double bd = blk_bound(&res.o, FC_T_O, idx, &f);
            if (f & ORC_F_UNCHECKABLE) continue;
            double want = (f & ORC_F_MASKED_ROW) ? 0.0 : 1.0, got = fc_buf_get(ob, idx);
            checked++;
            if (!(fabs(got - want) <= bd)) {
                if (!bad)
                    fc_prop_fail(v, prop, "O[%lld,%lld,%lld,0] = %.9g with a column of ones in V; want %g within %.3g",
                          (long long)idx[0], (long long)idx[1], (long long)idx[2], got, want, bd);
                bad++;
            }
        }
        if (bad > 1) fc_prop_fail(v, prop, "%lld of %lld rows off", (long long)bad, (long long)checked);
        orc_fwd_free(&res);
    }
    fc_run_free(&r);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * leak
 * ------------------------------------------------------------------------- */
static double poison_value(int64_t k) {
    switch (k % 3) {
    case 0: return NAN;
    case 1: return INFINITY;
    default: return -INFINITY;
    }
}

/* Element idx of tensor t in buffer got is no leak: finite where the exact
 * value is finite, and |got - ref| <= bound + orc_err (the reference is within
 * orc_err of the exact value, so a correct kernel always passes). Elements the
 * oracle did not compute or flags uncheckable need only be finite. */
static int leak_elem_ok(const orc_block *blk, int t, fa_dtype dt, const fc_buf *got, const int64_t idx[4],
                        int propagates, int64_t *propagated) {
    double x = fc_buf_get(got, idx);
    /* a backend declaring FA_MASKED_NF_PROPAGATES: every poisoned key is hidden from this row, so
       a NaN here came through an exact-zero weight (check.h fc_mnf); a finite value is judged */
    if (propagates && isnan(x)) {
        (*propagated)++;
        return 1;
    }
    int64_t e = blk_entry(blk, t, idx);
    if (e < 0 || (blk->flags[e] & ORC_F_UNCHECKABLE)) return !isnan(x) && !isinf(x);
    double ref = blk->ref[e];
    if (isnan(ref)) return isnan(x);
    if (isinf(ref)) return x == ref;
    double reach = blk->bound[e] + blk->orc_err[e];
    /* an Inf is admissible only where the value may round to it (orc_compare's rule) */
    if (isinf(x)) return (x > 0 ? ref : -ref) + reach >= orc_overflow_threshold(t == FC_T_LSE ? -1 : (int)dt);
    return fabs(x - ref) <= reach;
}

fc_outcome fc_prop_leak(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "leak";
    fc_verdict_init(v);
    if (V3_NOT_YET(c, v, prop)) return v->outcome;
    const fa_problem *p = &c->p;
    int64_t B = p->batch, Sq = p->seqlen_q, Sk = p->seqlen_k, Hq = p->heads_q, Hkv = p->heads_kv;
    if (Sq == 0 || Sk == 0 || B == 0 || Hq == 0) {
        fc_verdict_skip(v, "%s: empty problem", prop);
        return v->outcome;
    }
    int64_t G = Hq / Hkv, rows_compared = 0;
    int bwd = c->backward && c->deterministic && be->backward;
    int64_t probes[3] = {0, Sq / 2, Sq - 1};
    for (int pi = 0; pi < 3 && v->outcome != FC_FAIL; pi++) {
        int64_t i0 = probes[pi];
        if (pi > 0 && i0 == probes[pi - 1]) continue;
        fc_run ra, rb;
        if (!init_run(&ra, c, FC_POISON_A, v, prop)) break;
        if (!init_run(&rb, c, FC_POISON_B, v, prop)) {
            fc_run_free(&ra);
            break;
        }
        /* hidden[b, hkv, j]: key j invisible to row i0 of every query head of the group */
        unsigned char *hidden = calloc((size_t)(B * Hkv * Sk), 1);
        int64_t nhidden = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t hk = 0; hk < Hkv; hk++)
                for (int64_t j = 0; j < Sk; j++) {
                    int vis = 0;
                    for (int64_t g = 0; g < G && !vis; g++) vis = visible(&ra, b, hk * G + g, i0, j);
                    if (!vis) {
                        hidden[(b * Hkv + hk) * Sk + j] = 1;
                        nhidden++;
                        for (int t = FC_T_K; t <= FC_T_V; t++) {
                            int64_t D = t == FC_T_K ? p->head_dim_qk : p->head_dim_v;
                            for (int64_t d = 0; d < D; d++) {
                                int64_t idx[4] = {b, j, hk, d};
                                fc_buf_set(&rb.buf[t], idx, poison_value(d + j + t));
                            }
                        }
                    }
                }
        fc_mnf mnf;
        memset(&mnf, 0, sizeof mnf);
        if (nhidden > 0 && fc_mnf_init(&mnf, &rb, fc_check_profile(be), bwd)) {
            fc_prop_fail(v, prop, "harness: out of memory");
            nhidden = 0;
        }
        int64_t propagated = 0;
        if (nhidden > 0 && run_all(be, &ra, bwd, v, prop) && run_all(be, &rb, bwd, v, prop)) {
            /* The oracle of the clean run, computed only if some row's bits moved: the
             * exact O/LSE/dQ of a row that sees no key of J do not depend on J's values,
             * so its reference and bound hold for the poisoned run too. */
            orc_fwd_result fa;
            orc_bwd_result ba;
            int have_fwd = 0, have_bwd = 0, oracle_failed = 0;
            int64_t bad = 0, moved_within = 0;
            for (int64_t b = 0; b < B && !oracle_failed; b++)
                for (int64_t h = 0; h < Hq && !oracle_failed; h++)
                    for (int64_t i = 0; i < Sq && !oracle_failed; i++) {
                        int sees = 0;
                        for (int64_t j = 0; j < Sk && !sees; j++)
                            sees = hidden[(b * Hkv + h / G) * Sk + j] && visible(&ra, b, h, i, j);
                        if (sees) continue;
                        rows_compared++;
                        int64_t li[4] = {b, h, i, 0};
                        int moved = !same_bits(&ra.buf[FC_T_LSE], &rb.buf[FC_T_LSE], li);
                        for (int64_t d = 0; d < p->head_dim_v; d++) {
                            int64_t idx[4] = {b, i, h, d};
                            moved |= !same_bits(&ra.buf[FC_T_O], &rb.buf[FC_T_O], idx);
                        }
                        if (bwd)
                            for (int64_t d = 0; d < p->head_dim_qk; d++) {
                                int64_t idx[4] = {b, i, h, d};
                                moved |= !same_bits(&ra.buf[FC_T_DQ], &rb.buf[FC_T_DQ], idx);
                            }
                        if (!moved) continue;
                        /* Bits moved. A backend may take another (exact) arithmetic path
                         * when it sees non-finite values anywhere in a tile (the CUDA
                         * backward does), so bitwise equality is not the contract; a leak
                         * is: a non-finite value, or one outside the oracle's bound. */
                        if (!have_fwd) {
                            if (!oracle_fwd(&ra, be, &fa, v, prop)) { oracle_failed = 1; break; }
                            have_fwd = 1;
                        }
                        if (bwd && !have_bwd) {
                            if (!oracle_bwd(&ra, be, &ba, v, prop)) { oracle_failed = 1; break; }
                            have_bwd = 1;
                        }
                        const int pr = fc_mnf_row(&mnf, b, h, i);
                        int row_bad = !leak_elem_ok(&fa.lse, FC_T_LSE, p->dtype, &rb.buf[FC_T_LSE], li, pr, &propagated);
                        for (int64_t d = 0; d < p->head_dim_v; d++) {
                            int64_t idx[4] = {b, i, h, d};
                            row_bad |= !leak_elem_ok(&fa.o, FC_T_O, p->dtype, &rb.buf[FC_T_O], idx, pr, &propagated);
                        }
                        if (bwd)
                            for (int64_t d = 0; d < p->head_dim_qk; d++) {
                                int64_t idx[4] = {b, i, h, d};
                                row_bad |= !leak_elem_ok(&ba.dq, FC_T_DQ, p->dtype, &rb.buf[FC_T_DQ], idx, pr,
                                                         &propagated);
                            }
                        if (!row_bad) { moved_within++; continue; }
                        if (!bad)
                            fc_prop_fail(v, prop,
                                         "row [b=%lld,h=%lld,i=%lld] sees none of the %lld keys hidden from row "
                                           "%lld, yet its O/LSE%s became non-finite or left the oracle's bound when "
                                           "those K/V became NaN/Inf",
                                  (long long)b, (long long)h, (long long)i, (long long)nhidden, (long long)i0,
                                  bwd ? "/dQ" : "");
                        bad++;
                    }
            if (bad > 1) fc_prop_fail(v, prop, "%lld rows leaked in all", (long long)bad);
            if (propagated > 0)
                fc_verdict_note(v, "%s: probe row %lld: masked non-finite: declared propagating; %lld elements NaN by it",
                                prop, (long long)i0, (long long)propagated);
            (void)moved_within; /* rows that moved within their bound: a legitimate path change */
            if (have_fwd) orc_fwd_free(&fa);
            if (have_bwd) orc_bwd_free(&ba);
        }
        fc_mnf_free(&mnf);
        free(hidden);
        fc_run_free(&ra);
        fc_run_free(&rb);
    }
    if (v->outcome == FC_PASS && rows_compared == 0)
        fc_verdict_skip(v, "%s: no key is hidden from any probed row; nothing to test", prop);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * pow2_scale
 * ------------------------------------------------------------------------- */
/* y == 2 * x bitwise for every element where |x| is above the dtype's smallest normal
 * and 2x is finite in the dtype. Why above, not at: rounding to the dtype commutes with *2
 * when the unrounded value z has |z| >= min normal (ulp(2z) = 2 ulp(z)); a stored x with
 * |x| > min normal is at least min normal + ulp, so |z| > min normal; a stored x = +-min
 * normal may come from |z| just below it (rounded up on the subnormal grid, spacing ulp),
 * and 2z then rounds on the same spacing: 2x - ulp is possible (seen on the CPU backend:
 * dK = 2^-14 gave 2^-13 - 2^-24 with V doubled). */
static int64_t check_doubled(const char *prop, const char *what, int t, const fc_run *ra, const fc_run *rb, fc_verdict *v) {
    const fc_buf *xa = &ra->buf[t], *xb = &rb->buf[t];
    fa_dtype dt = ra->c.p.dtype;
    int64_t n = buf_numel(xa), bad = 0, idx[4], tested = 0;
    for (int64_t e = 0; e < n; e++) {
        unravel(xa, e, idx);
        double x = fc_buf_get(xa, idx), y = fc_buf_get(xb, idx);
        if (!isfinite(x)) continue;
        /* zero and subnormal results are excluded: a stored 0 or subnormal may be an
           underflowed value whose double rounds to a nonzero subnormal (not 2x) */
        if (fabs(x) <= dtype_min_normal(dt) || fabs(2 * x) > dtype_max(dt)) continue;
        tested++;
        int ok = y == 2 * x && signbit(y) == signbit(x);
        if (!ok) {
            if (!bad)
                fc_prop_fail(v, prop, "%s: %s[%lld,%lld,%lld,%lld] = %.9g, expected exactly 2 * %.9g", what,
                      fc_tensor_name(t), (long long)idx[0], (long long)idx[1], (long long)idx[2], (long long)idx[3],
                      y, x);
            bad++;
        }
    }
    if (bad > 1) fc_prop_fail(v, prop, "%s: %lld of %lld %s elements not exactly doubled", what, (long long)bad,
                              (long long)tested,
                       fc_tensor_name(t));
    return bad;
}

static int64_t check_same(const char *prop, const char *what, int t, const fc_run *ra, const fc_run *rb, fc_verdict *v) {
    const fc_buf *xa = &ra->buf[t];
    int64_t n = buf_numel(xa), bad = 0, idx[4], first[4] = {0, 0, 0, 0};
    for (int64_t e = 0; e < n; e++) {
        unravel(xa, e, idx);
        if (!same_bits(xa, &rb->buf[t], idx)) {
            if (!bad) memcpy(first, idx, sizeof first);
            bad++;
        }
    }
    if (bad)
        fc_prop_fail(v, prop, "%s: %lld %s elements changed, expected bitwise equal; first [%lld,%lld,%lld,%lld]", what,
              (long long)bad, fc_tensor_name(t), (long long)first[0], (long long)first[1], (long long)first[2],
              (long long)first[3]);
    return bad;
}

static int scale_input(fc_run *r, int t, double f) {
    fc_buf *b = &r->buf[t];
    int64_t idx[4], n = buf_numel(b);
    double mx = dtype_max(r->c.p.dtype);
    for (int64_t e = 0; e < n; e++) {
        unravel(b, e, idx);
        double x = fc_buf_get(b, idx) * f;
        if (fabs(x) > mx) return 0;
        fc_buf_set(b, idx, x);
    }
    return 1;
}

/* 1 when an O element of r at or below the dtype's smallest normal (zero included; at: see
 * check_doubled) lies in a row with a
 * visible key (finite LSE; packed rows: any row): D_i = dO_i . O_i from the stored O (FA_D_FROM_O)
 * then need not double with V, as rounding 2 * o to the dtype is not 2 * round(o) there, and dS,
 * dQ, dK change in their last bits (seen on the CPU backend: dK one fp16 ulp off). */
static int o_has_tiny(const fc_run *r) {
    const fc_buf *o = &r->buf[FC_T_O], *l = &r->buf[FC_T_LSE];
    const double mn = dtype_min_normal(r->c.p.dtype);
    const int packed = r->c.v3.varlen_q;
    int64_t n = buf_numel(o), idx[4];
    for (int64_t e = 0; e < n; e++) {
        unravel(o, e, idx);
        double x = fc_buf_get(o, idx);
        if (!isfinite(x) || fabs(x) > mn) continue;
        if (packed) return 1;
        const int64_t li[4] = {idx[0], idx[2], idx[1], 0};
        if (isfinite(fc_buf_get(l, li))) return 1;
    }
    return 0;
}

fc_outcome fc_prop_pow2_scale(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "pow2_scale";
    fc_verdict_init(v);
    int bwd = c->backward && be->backward;
    int grads_exact = !fc_check_profile(be)->ds_rounded; /* rounding dS to fp16/bf16 does not commute with *2 near underflow */
    fc_run ra, rb, rc;
    memset(&rb, 0, sizeof rb);
    memset(&rc, 0, sizeof rc);
    if (!init_run(&ra, c, FC_POISON_A, v, prop)) return v->outcome;
    if (!init_run(&rb, c, FC_POISON_B, v, prop)) goto done;
    if (!scale_input(&rb, FC_T_V, 2.0)) {
        fc_verdict_skip(v, "%s: 2 * V overflows the dtype", prop);
        goto done;
    }
    if (!run_all(be, &ra, bwd, v, prop) || !run_all(be, &rb, bwd, v, prop)) goto done;
    check_doubled(prop, "V*2", FC_T_O, &ra, &rb, v);
    check_same(prop, "V*2", FC_T_LSE, &ra, &rb, v);
    if (bwd) {
        check_same(prop, "V*2", FC_T_DV, &ra, &rb, v);
        if (grads_exact && (fc_check_profile(be)->d_source == FA_D_FROM_P || !o_has_tiny(&ra))) {
            check_doubled(prop, "V*2", FC_T_DQ, &ra, &rb, v);
            check_doubled(prop, "V*2", FC_T_DK, &ra, &rb, v);
        }
        if (!init_run(&rc, c, FC_POISON_B, v, prop)) goto done;
        if (!scale_input(&rc, FC_T_DO, 2.0)) goto done;
        if (!run_all(be, &rc, 1, v, prop)) goto done;
        check_doubled(prop, "dO*2", FC_T_DV, &ra, &rc, v);
        if (grads_exact) {
            check_doubled(prop, "dO*2", FC_T_DQ, &ra, &rc, v);
            check_doubled(prop, "dO*2", FC_T_DK, &ra, &rc, v);
        }
    }
done:
    fc_run_free(&ra);
    fc_run_free(&rb);
    fc_run_free(&rc);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * key_permutation
 * ------------------------------------------------------------------------- */
static int position_free(const fc_case *c) {
    return c->p.causal == FA_CAUSAL_NONE && c->p.window_left < 0 && c->p.window_right < 0;
}

/* Copy K, V rows and mask columns of src into dst with dst key j = src key map[j]. */
static void permute_keys(const fc_run *src, fc_run *dst, const int64_t *map) {
    const int tk[2] = {FC_T_K, FC_T_V};
    for (int q = 0; q < 2; q++) {
        const fc_buf *s = &src->buf[tk[q]];
        fc_buf *d = &dst->buf[tk[q]];
        int64_t idx[4], si[4], n = buf_numel(d);
        for (int64_t e = 0; e < n; e++) {
            unravel(d, e, idx);
            memcpy(si, idx, sizeof si);
            si[1] = map[idx[1]];
            fc_buf_set(d, idx, fc_buf_get(s, si));
        }
    }
    if (dst->buf[FC_T_MASK].alloc) {
        const fc_buf *s = &src->buf[FC_T_MASK];
        fc_buf *d = &dst->buf[FC_T_MASK];
        int64_t idx[4], si[4], n = buf_numel(d);
        for (int64_t e = 0; e < n; e++) {
            unravel(d, e, idx);
            memcpy(si, idx, sizeof si);
            si[3] = map[idx[3]];
            fc_buf_set(d, idx, fc_buf_get(s, si));
        }
    }
}

fc_outcome fc_prop_key_permutation(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "key_permutation";
    fc_verdict_init(v);
    if (V3_NOT_YET(c, v, prop)) return v->outcome;
    int64_t Sk = c->p.seqlen_k;
    if (!position_free(c) || Sk < 2) {
        fc_verdict_skip(v, "%s: needs no causal mask, no window and Sk >= 2", prop);
        return v->outcome;
    }
    int bwd = c->backward && be->backward;
    int64_t *map = malloc((size_t)Sk * sizeof *map);
    for (int64_t j = 0; j < Sk; j++) map[j] = (Sk - 1 - j + Sk / 3) % Sk; /* reverse, then rotate */
    fc_run ra, rb;
    memset(&rb, 0, sizeof rb);
    orc_fwd_result fa, fb;
    orc_bwd_result ba, bb;
    int have_f = 0, have_b = 0;
    if (!init_run(&ra, c, FC_POISON_A, v, prop)) goto out;
    if (!init_run(&rb, c, FC_POISON_B, v, prop)) goto done;
    permute_keys(&ra, &rb, map);
    if (!run_all(be, &ra, bwd, v, prop) || !run_all(be, &rb, bwd, v, prop)) goto done;
    if (!oracle_fwd(&ra, be, &fa, v, prop)) goto done;
    if (!oracle_fwd(&rb, be, &fb, v, prop)) {
        orc_fwd_free(&fa);
        goto done;
    }
    have_f = 1;
    within_sum_of_bounds(prop, FC_T_O, &ra, &fa.o, &rb, &fb.o, NULL, v);
    within_sum_of_bounds(prop, FC_T_LSE, &ra, &fa.lse, &rb, &fb.lse, NULL, v);
    if (bwd) {
        if (!oracle_bwd(&ra, be, &ba, v, prop)) goto done;
        if (!oracle_bwd(&rb, be, &bb, v, prop)) {
            orc_bwd_free(&ba);
            goto done;
        }
        have_b = 1;
        within_sum_of_bounds(prop, FC_T_DQ, &ra, &ba.dq, &rb, &bb.dq, NULL, v);
        within_sum_of_bounds(prop, FC_T_DK, &ra, &ba.dk, &rb, &bb.dk, map, v);
        within_sum_of_bounds(prop, FC_T_DV, &ra, &ba.dv, &rb, &bb.dv, map, v);
    }
done:
    if (have_f) {
        orc_fwd_free(&fa);
        orc_fwd_free(&fb);
    }
    if (have_b) {
        orc_bwd_free(&ba);
        orc_bwd_free(&bb);
    }
    fc_run_free(&ra);
    fc_run_free(&rb);
out:
    free(map);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * key_translation
 * ------------------------------------------------------------------------- */
/* sum_j dK_j = 0 and sum_j dV_j = sum_i dO_i (rows with a visible key) on
 * run r. The oracle's gradient reference is the exact gradient at the inputs
 * (exact P and D_i = dO_i . O_i*, oracle/orc_bwd.c), for which both identities
 * hold exactly, and its bound covers |kernel - exact| per element, including
 * the effect of the backend's own O and LSE. Hence (PROPERTIES.md
 * #key_translation) |sum_j dK_j| <= sum_j bound(dK_j) and
 * |sum_j dV_j - sum_i dO_i| <= sum_j bound(dV_j), plus the rounding of the
 * double sums (< 2^-40 of the sum of magnitudes for fewer than 2^13 terms). */
static void gradient_sums(const char *prop, const fc_run *r, const orc_fwd_result *fr, const orc_bwd_result *br,
                          fc_verdict *v) {
    const fa_problem *p = &r->c.p;
    int64_t B = p->batch, Sq = p->seqlen_q, Sk = p->seqlen_k, Hq = p->heads_q, Hkv = p->heads_kv;
    int64_t D = p->head_dim_qk, Dv = p->head_dim_v, G = Hq / Hkv;
    const double slack_rel = 0x1p-40;
    int64_t bad_k = 0, bad_v = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t d = 0; d < (D > Dv ? D : Dv); d++) {
                double sk = 0, sk_abs = 0, bk = 0, sv = 0, sv_abs = 0, bv = 0, sdo = 0, sdo_abs = 0;
                for (int64_t j = 0; j < Sk; j++) {
                    int64_t idx[4] = {b, j, hk, d};
                    uint8_t f;
                    if (d < D) {
                        double x = fc_buf_get(&r->buf[FC_T_DK], idx);
                        sk += x; sk_abs += fabs(x);
                        bk += blk_bound(&br->dk, FC_T_DK, idx, &f);
                        if (f & ORC_F_UNCHECKABLE) bk = INFINITY;
                    }
                    if (d < Dv) {
                        double x = fc_buf_get(&r->buf[FC_T_DV], idx);
                        sv += x; sv_abs += fabs(x);
                        bv += blk_bound(&br->dv, FC_T_DV, idx, &f);
                        if (f & ORC_F_UNCHECKABLE) bv = INFINITY;
                    }
                }
                if (d < Dv)
                    for (int64_t g = 0; g < G; g++)
                        for (int64_t i = 0; i < Sq; i++) {
                            int64_t li[4] = {b, hk * G + g, i, 0}, oi[4] = {b, i, hk * G + g, d};
                            uint8_t f;
                            blk_bound(&fr->lse, FC_T_LSE, li, &f);
                            if (f & ORC_F_MASKED_ROW) continue; /* no visible key: P row is 0 */
                            double x = fc_buf_get(&r->buf[FC_T_DO], oi);
                            sdo += x; sdo_abs += fabs(x);
                        }
                if (d < D && !(fabs(sk) <= bk + slack_rel * sk_abs)) {
                    if (!bad_k)
                        fc_prop_fail(v, prop, "sum_j dK[b=%lld,hkv=%lld,d=%lld] = %.6g, expected 0 within %.3g",
                                     (long long)b,
                              (long long)hk, (long long)d, sk, bk);
                    bad_k++;
                }
                if (d < Dv && !(fabs(sv - sdo) <= bv + slack_rel * (sv_abs + sdo_abs))) {
                    if (!bad_v)
                        fc_prop_fail(v, prop,
                                     "sum_j dV[b=%lld,hkv=%lld,d=%lld] = %.6g but sum_i dO = %.6g (allowed %.3g)",
                              (long long)b, (long long)hk, (long long)d, sv, sdo, bv);
                    bad_v++;
                }
                if (getenv("FC_PROP_DEBUG") && b == 0 && hk == 0 && d == 0)
                    fprintf(stderr, "gradient_sums: sum dK %.3g (allowed %.3g); sum dV - sum dO %.3g (allowed %.3g)\n",
                            sk, bk, sv - sdo, bv);
            }
}

fc_outcome fc_prop_key_translation(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "key_translation";
    fc_verdict_init(v);
    if (V3_NOT_YET(c, v, prop)) return v->outcome;
    int bwd = c->backward && be->backward;
    fc_run ra, rb;
    memset(&rb, 0, sizeof rb);
    orc_fwd_result fa, fb;
    orc_bwd_result ba, bb;
    int have_fa = 0, have_fb = 0, have_ba = 0, have_bb = 0;
    if (!init_run(&ra, c, FC_POISON_A, v, prop)) return v->outcome;
    if (!init_run(&rb, c, FC_POISON_B, v, prop)) goto done;
    quantize(&ra, FC_T_K);
    {
        const fc_buf *ka = &ra.buf[FC_T_K];
        fc_buf *kb = &rb.buf[FC_T_K];
        int64_t idx[4], n = buf_numel(kb);
        for (int64_t e = 0; e < n; e++) {
            unravel(kb, e, idx);
            /* c_d on the 1/16 grid in [-2, 2], one vector per (batch, kv head) */
            double cd = grid16(4.0 * fc_rng_u01(fc_rng_hash(c->seed, 77, (uint64_t)(idx[0] * 4099 + idx[2]), (uint64_t)idx[3])) - 2.0);
            fc_buf_set(kb, idx, fc_buf_get(ka, idx) + cd);
        }
    }
    if (!run_all(be, &ra, bwd, v, prop) || !run_all(be, &rb, bwd, v, prop)) goto done;
    if (!(have_fa = oracle_fwd(&ra, be, &fa, v, prop))) goto done;
    if (!(have_fb = oracle_fwd(&rb, be, &fb, v, prop))) goto done;
    within_sum_of_bounds(prop, FC_T_O, &ra, &fa.o, &rb, &fb.o, NULL, v);
    if (bwd) {
        if (!(have_ba = oracle_bwd(&ra, be, &ba, v, prop))) goto done;
        if (!(have_bb = oracle_bwd(&rb, be, &bb, v, prop))) goto done;
        /* dQ_i = scale sum_j dS_ij k_j and sum_j dS_ij = 0: dQ is translation invariant; dV too */
        within_sum_of_bounds(prop, FC_T_DQ, &ra, &ba.dq, &rb, &bb.dq, NULL, v);
        within_sum_of_bounds(prop, FC_T_DV, &ra, &ba.dv, &rb, &bb.dv, NULL, v);
        gradient_sums(prop, &ra, &fa, &ba, v);
    }
done:
    if (have_fa) orc_fwd_free(&fa);
    if (have_fb) orc_fwd_free(&fb);
    if (have_ba) orc_bwd_free(&ba);
    if (have_bb) orc_bwd_free(&bb);
    fc_run_free(&ra);
    fc_run_free(&rb);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * linearity
 * ------------------------------------------------------------------------- */
/* |z - x - y| <= bz + bx + by, element by element (exact: z* = x* + y*). */
static int64_t check_sum3(const char *prop, int t, const fc_run *rx, const orc_block *bx, const fc_run *ry,
                          const orc_block *by, const fc_run *rz, const orc_block *bz, fc_verdict *v) {
    const fc_buf *z = &rz->buf[t];
    int64_t n = buf_numel(z), bad = 0, idx[4];
    for (int64_t e = 0; e < n; e++) {
        unravel(z, e, idx);
        uint8_t f1, f2, f3;
        double lim = blk_bound(bx, t, idx, &f1) + blk_bound(by, t, idx, &f2) + blk_bound(bz, t, idx, &f3);
        if ((f1 | f2 | f3) & ORC_F_UNCHECKABLE) continue;
        double gx = fc_buf_get(&rx->buf[t], idx), gy = fc_buf_get(&ry->buf[t], idx), gz = fc_buf_get(z, idx);
        double d = fabs(gz - gx - gy); /* fp16/bf16 values: the double sum is exact */
        if (!(d <= lim)) {
            if (!bad)
                fc_prop_fail(v, prop, "%s[%lld,%lld,%lld,%lld]: f(a+b) = %.9g but f(a) + f(b) = %.9g (allowed %.3g)",
                      fc_tensor_name(t), (long long)idx[0], (long long)idx[1], (long long)idx[2], (long long)idx[3], gz,
                      gx + gy, lim);
            bad++;
        }
    }
    if (bad > 1) fc_prop_fail(v, prop, "%s: %lld elements not linear within bound", fc_tensor_name(t), (long long)bad);
    return bad;
}

static void add_into(fc_run *dst, const fc_run *a, const fc_run *b, int t) {
    fc_buf *d = &dst->buf[t];
    int64_t idx[4], n = buf_numel(d);
    for (int64_t e = 0; e < n; e++) {
        unravel(d, e, idx);
        fc_buf_set(d, idx, fc_buf_get(&a->buf[t], idx) + fc_buf_get(&b->buf[t], idx));
    }
}

fc_outcome fc_prop_linearity(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "linearity";
    fc_verdict_init(v);
    if (V3_NOT_YET(c, v, prop)) return v->outcome;
    int bwd = c->backward && be->backward;
    fc_case c2 = *c;
    c2.seed = c->seed ^ 0x5bd1e995ull;
    enum { R1, R2, R3, R4, R5, NR };
    fc_run r[NR];
    memset(r, 0, sizeof r);
    orc_fwd_result f[3];
    orc_bwd_result g[3];
    int nf = 0, ng = 0, nr = bwd ? NR : 3;
    for (int k = 0; k < nr; k++)
        if (!init_run(&r[k], k == R2 || k == R4 ? &c2 : c, k & 1 ? FC_POISON_B : FC_POISON_A, v, prop)) goto done;
    /* R1: (V1, dO1)  R2: (V2)  R3: (V1+V2)  R4: (V1, dO2)  R5: (V1, dO1+dO2); Q, K of R1 everywhere */
    for (int k = 0; k < nr; k++) {
        quantize(&r[k], FC_T_V);
        if (bwd) quantize(&r[k], FC_T_DO);
    }
    for (int k = 1; k < nr; k++) {
        int64_t idx[4];
        const int same[2] = {FC_T_Q, FC_T_K};
        for (int q = 0; q < 2; q++) {
            fc_buf *d = &r[k].buf[same[q]];
            for (int64_t e = 0; e < buf_numel(d); e++) {
                unravel(d, e, idx);
                fc_buf_set(d, idx, fc_buf_get(&r[R1].buf[same[q]], idx));
            }
        }
        if (r[R1].buf[FC_T_MASK].alloc) {
            fc_buf *d = &r[k].buf[FC_T_MASK];
            for (int64_t e = 0; e < buf_numel(d); e++) {
                unravel(d, e, idx);
                fc_buf_set(d, idx, fc_buf_get(&r[R1].buf[FC_T_MASK], idx));
            }
        }
    }
    add_into(&r[R3], &r[R1], &r[R2], FC_T_V);
    if (bwd) {
        int64_t idx[4];
        fc_buf *d4 = &r[R4].buf[FC_T_V], *d5 = &r[R5].buf[FC_T_V];
        for (int64_t e = 0; e < buf_numel(d4); e++) {
            unravel(d4, e, idx);
            fc_buf_set(d4, idx, fc_buf_get(&r[R1].buf[FC_T_V], idx));
            fc_buf_set(d5, idx, fc_buf_get(&r[R1].buf[FC_T_V], idx));
        }
        add_into(&r[R5], &r[R1], &r[R4], FC_T_DO);
    }
    for (int k = 0; k < nr; k++)
        if (!run_all(be, &r[k], bwd && k != R2 && k != R3, v, prop)) goto done;
    for (; nf < 3; nf++)
        if (!oracle_fwd(&r[nf], be, &f[nf], v, prop)) goto done;
    check_sum3(prop, FC_T_O, &r[R1], &f[0].o, &r[R2], &f[1].o, &r[R3], &f[2].o, v);
    if (bwd) {
        const int which[3] = {R1, R4, R5};
        for (; ng < 3; ng++)
            if (!oracle_bwd(&r[which[ng]], be, &g[ng], v, prop)) goto done;
        check_sum3(prop, FC_T_DQ, &r[R1], &g[0].dq, &r[R4], &g[1].dq, &r[R5], &g[2].dq, v);
        check_sum3(prop, FC_T_DK, &r[R1], &g[0].dk, &r[R4], &g[1].dk, &r[R5], &g[2].dk, v);
        check_sum3(prop, FC_T_DV, &r[R1], &g[0].dv, &r[R4], &g[1].dv, &r[R5], &g[2].dv, v);
    }
done:
    for (int k = 0; k < nf; k++) orc_fwd_free(&f[k]);
    for (int k = 0; k < ng; k++) orc_bwd_free(&g[k]);
    for (int k = 0; k < NR; k++) fc_run_free(&r[k]);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * slices
 * ------------------------------------------------------------------------- */
/* Outputs of run a and b bitwise equal on every element whose batch (sel = 0)
 * or head group (sel = 1) differs from `changed`. */
static int64_t slices_equal(const char *prop, const fc_run *ra, const fc_run *rb, int sel, int64_t changed, int bwd,
                            fc_verdict *v) {
    const int outs[5] = {FC_T_O, FC_T_LSE, FC_T_DQ, FC_T_DK, FC_T_DV};
    int64_t G = ra->c.p.heads_q / ra->c.p.heads_kv, bad = 0;
    for (int q = 0; q < (bwd ? 5 : 2); q++) {
        int t = outs[q];
        const fc_buf *x = &ra->buf[t];
        int64_t idx[4], n = buf_numel(x), tb = 0;
        for (int64_t e = 0; e < n; e++) {
            unravel(x, e, idx);
            int64_t head = t == FC_T_LSE ? idx[1] : idx[2];
            int64_t group = (t == FC_T_DK || t == FC_T_DV) ? head : head / G;
            if ((sel == 0 ? idx[0] : group) == changed) continue;
            if (!same_bits(x, &rb->buf[t], idx)) {
                if (!tb)
                    fc_prop_fail(v, prop, "%s[%lld,%lld,%lld,%lld] changed when only %s %lld's inputs changed",
                          fc_tensor_name(t), (long long)idx[0], (long long)idx[1], (long long)idx[2],
                          (long long)idx[3], sel == 0 ? "batch" : "kv-head group", (long long)changed);
                tb++;
            }
        }
        bad += tb;
    }
    return bad;
}

fc_outcome fc_prop_slices(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "slices";
    fc_verdict_init(v);
    if (V3_NOT_YET(c, v, prop)) return v->outcome;
    const fa_problem *p = &c->p;
    int bwd = c->backward && c->deterministic && be->backward;
    int tested = 0;
    fc_case other = *c;
    other.seed = c->seed * 0x9E3779B97F4A7C15ull + 1;
    for (int sel = 0; sel < 2 && v->outcome != FC_FAIL; sel++) {
        int64_t count = sel == 0 ? p->batch : p->heads_kv;
        if (count < 2 || fc_case_numel(c, FC_T_O) == 0) continue;
        int64_t changed = count - 1, G = p->heads_q / p->heads_kv;
        fc_run ra, rb;
        if (!init_run(&ra, c, FC_POISON_A, v, prop)) break;
        if (!init_run(&rb, c, FC_POISON_B, v, prop)) {
            fc_run_free(&ra);
            break;
        }
        const int ins[4] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_DO};
        for (int q = 0; q < 4; q++) {
            fc_buf *b = &rb.buf[ins[q]];
            if (!b->alloc) continue;
            int64_t idx[4], n = buf_numel(b);
            for (int64_t e = 0; e < n; e++) {
                unravel(b, e, idx);
                int64_t group = (ins[q] == FC_T_K || ins[q] == FC_T_V) ? idx[2] : idx[2] / G;
                if ((sel == 0 ? idx[0] : group) == changed) fc_buf_set(b, idx, fc_case_value(&other, ins[q], idx));
            }
        }
        if (run_all(be, &ra, bwd, v, prop) && run_all(be, &rb, bwd, v, prop)) {
            slices_equal(prop, &ra, &rb, sel, changed, bwd, v);
            tested++;
        }
        fc_run_free(&ra);
        fc_run_free(&rb);
    }
    if (v->outcome == FC_PASS && !tested) fc_verdict_skip(v, "%s: needs batch >= 2 or heads_kv >= 2", prop);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * split_merge
 * ------------------------------------------------------------------------- */
fc_outcome fc_prop_split_merge(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "split_merge";
    fc_verdict_init(v);
    if (V3_NOT_YET(c, v, prop)) return v->outcome;
    const fa_problem *p = &c->p;
    int64_t Sk = p->seqlen_k, m = Sk / 2;
    if (!position_free(c) || Sk < 2 || fc_case_numel(c, FC_T_O) == 0) {
        fc_verdict_skip(v, "%s: needs no causal mask, no window, Sk >= 2", prop);
        return v->outcome;
    }
    fc_case cw = *c, c1 = *c, c2 = *c;
    cw.backward = c1.backward = c2.backward = 0;
    c1.p.seqlen_k = m;
    c2.p.seqlen_k = Sk - m;
    fc_run rw, r1, r2;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    orc_fwd_result fw, f1, f2;
    int nf = 0;
    if (!init_run(&rw, &cw, FC_POISON_A, v, prop)) return v->outcome;
    if (!init_run(&r1, &c1, FC_POISON_B, v, prop) || !init_run(&r2, &c2, FC_POISON_A, v, prop)) goto done;
    {
        /* halves: same Q; keys [0, m) and [m, Sk) of K, V and the mask columns */
        fc_run *half[2] = {&r1, &r2};
        int64_t base[2] = {0, m};
        for (int hh = 0; hh < 2; hh++) {
            const int ts[4] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_MASK};
            for (int q = 0; q < 4; q++) {
                fc_buf *d = &half[hh]->buf[ts[q]];
                if (!d->alloc) continue;
                int64_t idx[4], si[4], n = buf_numel(d);
                for (int64_t e = 0; e < n; e++) {
                    unravel(d, e, idx);
                    memcpy(si, idx, sizeof si);
                    if (ts[q] == FC_T_K || ts[q] == FC_T_V) si[1] += base[hh];
                    if (ts[q] == FC_T_MASK) si[3] += base[hh];
                    fc_buf_set(d, idx, fc_buf_get(&rw.buf[ts[q]], si));
                }
            }
        }
    }
    if (!run_all(be, &rw, 0, v, prop) || !run_all(be, &r1, 0, v, prop) || !run_all(be, &r2, 0, v, prop)) goto done;
    if (!oracle_fwd(&rw, be, &fw, v, prop)) goto done;
    nf = 1;
    if (!oracle_fwd(&r1, be, &f1, v, prop)) goto done;
    nf = 2;
    if (!oracle_fwd(&r2, be, &f2, v, prop)) goto done;
    nf = 3;
    {
        int64_t B = p->batch, Sq = p->seqlen_q, Hq = p->heads_q, Dv = p->head_dim_v, bad_o = 0, bad_l = 0;
        const double u_eval = 0x1p-40; /* double merge: a few exp/log/div at < 2^-50 relative each */
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < Sq; i++) {
                    int64_t li[4] = {b, h, i, 0};
                    uint8_t fl1, fl2, flw;
                    double L1 = fc_buf_get(&r1.buf[FC_T_LSE], li), L2 = fc_buf_get(&r2.buf[FC_T_LSE], li);
                    double Lw = fc_buf_get(&rw.buf[FC_T_LSE], li);
                    double bL1 = blk_bound(&f1.lse, FC_T_LSE, li, &fl1), bL2 = blk_bound(&f2.lse, FC_T_LSE, li, &fl2);
                    double bLw = blk_bound(&fw.lse, FC_T_LSE, li, &flw);
                    if ((fl1 | fl2 | flw) & ORC_F_UNCHECKABLE) continue;
                    int m1 = (fl1 & ORC_F_MASKED_ROW) != 0, m2 = (fl2 & ORC_F_MASKED_ROW) != 0;
                    if (m1 && m2) continue; /* whole row masked: the checks test it exactly */
                    double w1, w2, L, dw;
                    if (m1) { w1 = 0; w2 = 1; L = L2; dw = 0; bL1 = 0; }
                    else if (m2) { w1 = 1; w2 = 0; L = L1; dw = 0; bL2 = 0; }
                    else {
                        double M = fmax(L1, L2), e1 = exp(L1 - M), e2 = exp(L2 - M);
                        w1 = e1 / (e1 + e2);
                        w2 = e2 / (e1 + e2);
                        L = M + log(e1 + e2);
                        dw = 0.25 * (bL1 + bL2); /* |d sigma/dx| <= 1/4, x = L1 - L2 */
                    }
                    double limL = fmax(bL1, bL2) + bLw + u_eval * (fabs(L) + 1);
                    if (!(fabs(L - Lw) <= limL)) {
                        if (!bad_l)
                            fc_prop_fail(v, prop, "LSE[%lld,%lld,%lld]: merged halves %.9g, whole %.9g (allowed %.3g)",
                                  (long long)b, (long long)h, (long long)i, L, Lw, limL);
                        bad_l++;
                    }
                    for (int64_t d = 0; d < Dv; d++) {
                        int64_t oi[4] = {b, i, h, d};
                        uint8_t g1, g2, gw;
                        double o1 = fc_buf_get(&r1.buf[FC_T_O], oi), o2 = fc_buf_get(&r2.buf[FC_T_O], oi);
                        double ow = fc_buf_get(&rw.buf[FC_T_O], oi);
                        double b1 = m1 ? 0 : blk_bound(&f1.o, FC_T_O, oi, &g1), b2 = m2 ? 0 : blk_bound(&f2.o, FC_T_O, oi, &g2);
                        double bw = blk_bound(&fw.o, FC_T_O, oi, &gw);
                        double om = w1 * o1 + w2 * o2;
                        double lim = w1 * b1 + w2 * b2 + dw * (fabs(o1) + b1 + fabs(o2) + b2) + bw +
                                     u_eval * (fabs(o1) + fabs(o2));
                        if (!(fabs(om - ow) <= lim)) {
                            if (!bad_o)
                                fc_prop_fail(v, prop,
                                             "O[%lld,%lld,%lld,%lld]: merged halves %.9g, whole %.9g (allowed %.3g)",
                                      (long long)b, (long long)i, (long long)h, (long long)d, om, ow, lim);
                            bad_o++;
                        }
                    }
                }
        if (bad_o + bad_l > 1)
            fc_prop_fail(v, prop, "%lld O and %lld LSE elements off after merging", (long long)bad_o, (long long)bad_l);
    }
done:
    if (nf > 0) orc_fwd_free(&fw);
    if (nf > 1) orc_fwd_free(&f1);
    if (nf > 2) orc_fwd_free(&f2);
    fc_run_free(&rw);
    fc_run_free(&r1);
    fc_run_free(&r2);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * gradient_fd
 * ------------------------------------------------------------------------- */
/* Direction component in {-1, 0, 1} for element idx of tensor t. */
static double direction(uint64_t seed, int t, const int64_t idx[4]) {
    uint64_t h = fc_rng_hash(seed ^ 0xD1Bull, (uint64_t)t, (uint64_t)((idx[0] * 65537 + idx[1]) * 4099 + idx[2]),
                             (uint64_t)idx[3]);
    return (double)(int)(h % 3) - 1.0;
}

/* loss = sum dO * O_ref over the oracle result, and its evaluation error bound
 * sum |dO| * orc_err (+ double rounding). */
static double loss_of(const fc_run *r, const orc_fwd_result *f, double *err) {
    double s = 0, e = 0, a = 0;
    for (int64_t vi = 0; vi < f->o.n; vi++) {
        const orc_index *ix = &f->o.index[vi];
        for (int64_t k = 0; k < f->o.dim; k++) {
            int64_t idx[4] = {ix->b, ix->s, ix->h, k};
            double w = fc_buf_get(&r->buf[FC_T_DO], idx), x = f->o.ref[vi * f->o.dim + k];
            if (f->o.flags[vi * f->o.dim + k] & ORC_F_MASKED_ROW) continue;
            s += w * x;
            a += fabs(w * x);
            e += fabs(w) * f->o.orc_err[vi * f->o.dim + k];
        }
    }
    *err = e + 0x1p-40 * a;
    return s;
}

fc_outcome fc_prop_gradient_fd(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "gradient_fd";
    fc_verdict_init(v);
    if (V3_NOT_YET(c, v, prop)) return v->outcome;
    if (!c->backward || !be->backward || fc_case_numel(c, FC_T_O) == 0) {
        fc_verdict_skip(v, "%s: needs a backward pass and a non-empty output", prop);
        return v->outcome;
    }
    const double h = 0x1p-6;
    fc_case cf = *c;
    cf.backward = 0;
    fc_run ra, rp[4];
    memset(rp, 0, sizeof rp);
    orc_fwd_result fa, fp[4];
    orc_bwd_result ba;
    int have_fa = 0, have_ba = 0, nfp = 0;
    if (!init_run(&ra, c, FC_POISON_A, v, prop)) return v->outcome;
    quantize(&ra, FC_T_Q);
    quantize(&ra, FC_T_K);
    quantize(&ra, FC_T_V);
    /* perturbed inputs x + s*h*dir, s in {+1, -1, +2, -2}: on the 2^-6 grid within [-2.04, 2.04], exact in fp16 and bf16 */
    const double steps[4] = {1, -1, 2, -2};
    for (int k = 0; k < 4; k++) {
        if (!init_run(&rp[k], &cf, k & 1 ? FC_POISON_B : FC_POISON_A, v, prop)) goto done;
        const int ts[4] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_MASK};
        for (int q = 0; q < 4; q++) {
            fc_buf *d = &rp[k].buf[ts[q]];
            if (!d->alloc) continue;
            int64_t idx[4], n = buf_numel(d);
            for (int64_t e = 0; e < n; e++) {
                unravel(d, e, idx);
                double x = fc_buf_get(&ra.buf[ts[q]], idx);
                if (ts[q] != FC_T_MASK) x += steps[k] * h * direction(c->seed, ts[q], idx);
                fc_buf_set(d, idx, x);
            }
        }
        /* the loss weights dO come from ra */
    }
    if (!run_all(be, &ra, 1, v, prop)) goto done;
    if (!(have_fa = oracle_fwd(&ra, be, &fa, v, prop))) goto done;
    if (!(have_ba = oracle_bwd(&ra, be, &ba, v, prop))) goto done;
    for (; nfp < 4; nfp++)
        if (!oracle_fwd(&rp[nfp], be, &fp[nfp], v, prop)) goto done;
    {
        /* loss evaluation uses ra's dO on the perturbed oracle outputs */
        double e[4], L[4];
        for (int k = 0; k < 4; k++) {
            fc_run tmp = rp[k];
            tmp.buf[FC_T_DO] = ra.buf[FC_T_DO];
            L[k] = loss_of(&tmp, &fp[k], &e[k]);
        }
        double fd1 = (L[0] - L[1]) / (2 * h), fd2 = (L[2] - L[3]) / (4 * h);
        double fd_eval = (e[0] + e[1]) / (2 * h) + (e[2] + e[3]) / (4 * h);
        /* kernel directional derivative and its bound */
        double g = 0, gb = 0;
        const int gt[3] = {FC_T_DQ, FC_T_DK, FC_T_DV};
        const int it[3] = {FC_T_Q, FC_T_K, FC_T_V};
        const orc_block *gblk[3] = {&ba.dq, &ba.dk, &ba.dv};
        int unchecked = 0;
        int64_t overflow = 0, nonfinite = 0;
        const fa_problem *p = &c->p;
        for (int q = 0; q < 3; q++) {
            const fc_buf *gbuf = &ra.buf[gt[q]];
            int64_t idx[4], n = buf_numel(gbuf);
            for (int64_t ee = 0; ee < n; ee++) {
                unravel(gbuf, ee, idx);
                double dir = direction(c->seed, it[q], idx);
                if (dir == 0) continue;
                uint8_t f;
                double bd = blk_bound(gblk[q], gt[q], idx, &f);
                if (f & ORC_F_UNCHECKABLE) unchecked++;
                double gv = fc_buf_get(gbuf, idx);
                if (!isfinite(gv)) {
                    /* an fp16/bf16 gradient that overflows is only legitimate where the exact
                       value is out of range or the oracle has no finite bound */
                    int64_t ent = blk_entry(gblk[q], gt[q], idx);
                    double ref = ent >= 0 ? gblk[q]->ref[ent] : NAN;
                    if ((f & (ORC_F_INF | ORC_F_UNCHECKABLE)) || !(fabs(ref) + bd <= dtype_max(p->dtype))) overflow++;
                    else nonfinite++;
                    continue;
                }
                g += dir * gv;
                gb += bd;
            }
        }
        double trunc = fabs(fd2 - fd1);
        double lim = gb + trunc + fd_eval + 0x1p-40 * fabs(g);
        if (getenv("FC_PROP_DEBUG"))
            fprintf(stderr, "gradient_fd: <grad,dir> %.9g fd(h) %.9g fd(2h) %.9g |diff| %.3g allowed %.3g (kernel bound %.3g, "
                            "truncation %.3g, evaluation %.3g)\n",
                    g, fd1, fd2, fabs(g - fd1), lim, gb, trunc, fd_eval);
        if (nonfinite) {
            fc_prop_fail(v, prop,
                         "%lld kernel gradient elements are NaN/Inf where the exact gradient is finite and in range",
                  (long long)nonfinite);
        } else if (overflow) {
            fc_verdict_skip(v, "%s: %lld gradient elements overflow the dtype; the directional derivative is not "
                               "comparable", prop, (long long)overflow);
        } else if (unchecked) {
            fc_verdict_add(v, FC_PHASE_BACKWARD, FC_REASON_UNCHECKABLE, NULL, "%s: %d gradient elements uncheckable by "
                           "the oracle", prop, unchecked);
        } else if (!(fabs(g - fd1) <= lim)) {
            fc_prop_fail(v, prop,
                         "<grad, dir> = %.9g but finite difference = %.9g (h = 2^-6; allowed %.3g = kernel bound %.3g "
                           "+ truncation %.3g + evaluation %.3g)",
                  g, fd1, lim, gb, trunc, fd_eval);
        }
    }
done:
    if (have_fa) orc_fwd_free(&fa);
    if (have_ba) orc_bwd_free(&ba);
    for (int k = 0; k < nfp; k++) orc_fwd_free(&fp[k]);
    fc_run_free(&ra);
    for (int k = 0; k < 4; k++) fc_run_free(&rp[k]);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * determinism
 * ------------------------------------------------------------------------- */
fc_outcome fc_prop_determinism(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "determinism";
    fc_verdict_init(v);
    int bwd = c->backward && c->deterministic && be->backward;
    fc_run first;
    if (!init_run(&first, c, FC_POISON_A, v, prop)) return v->outcome;
    if (run_all(be, &first, bwd, v, prop)) {
        for (int rep = 1; rep < 5 && v->outcome != FC_FAIL; rep++) {
            fc_run r;
            if (!init_run(&r, c, rep & 1 ? FC_POISON_B : FC_POISON_A, v, prop)) break;
            if (run_all(be, &r, bwd, v, prop)) {
                const int outs[5] = {FC_T_O, FC_T_LSE, FC_T_DQ, FC_T_DK, FC_T_DV};
                for (int q = 0; q < (bwd ? 5 : 2); q++) {
                    char what[32];
                    snprintf(what, sizeof what, "run %d vs run 0", rep);
                    check_same(prop, what, outs[q], &first, &r, v);
                }
            }
            fc_run_free(&r);
        }
    }
    fc_run_free(&first);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * batch_invariance
 * ------------------------------------------------------------------------- */
/* The backends whose batch invariance is checked bitwise: flashcheck's own CPU backends (one
 * thread computes a whole row with a fixed order, whatever the batch). The contract has no
 * declaration of this (PROPERTIES.md, batch_invariance): every other backend is held to the
 * oracle's bound. */
static int batch_bitwise(const fa_backend *be) {
    return be->name && (strcmp(be->name, "cpu") == 0 || strcmp(be->name, "cpu_ftz") == 0);
}

/* Tensor t of run a at batch element b against run s (batch 1): bitwise, or, with oracle
 * blocks ba, bs (exact values equal: the same inputs), |x - y| <= bd_a + bd_s. Returns the
 * number of differing elements (one failure reason per tensor). */
static int64_t batch_compare(const char *prop, int t, const fc_run *ra, const orc_block *ba, int64_t b, const fc_run *rs,
                             const orc_block *bs, fc_verdict *v) {
    const fc_buf *xs = &rs->buf[t], *xa = &ra->buf[t];
    int64_t n = buf_numel(xs), bad = 0, idx[4], ia[4], first[4] = {0, 0, 0, 0};
    double fx = 0, fy = 0, flim = 0;
    for (int64_t e = 0; e < n; e++) {
        unravel(xs, e, idx);
        memcpy(ia, idx, sizeof ia);
        ia[0] = b;
        int ok;
        double lim = 0;
        if (!ba) {
            ok = memcmp(elem_ptr(xa, ia), elem_ptr(xs, idx), xs->elem_size) == 0;
        } else {
            uint8_t fa, fs;
            double bda = blk_bound(ba, t, ia, &fa), bds = blk_bound(bs, t, idx, &fs);
            if ((fa & ORC_F_UNCHECKABLE) || (fs & ORC_F_UNCHECKABLE)) continue;
            double x = fc_buf_get(xa, ia), y = fc_buf_get(xs, idx);
            lim = bda + bds;
            ok = isfinite(x) && isfinite(y) ? fabs(x - y) <= lim : (x == y || (isnan(x) && isnan(y)));
        }
        if (!ok) {
            if (!bad) {
                memcpy(first, ia, sizeof first);
                fx = fc_buf_get(xa, ia);
                fy = fc_buf_get(xs, idx);
                flim = lim;
            }
            bad++;
        }
    }
    if (bad && !ba)
        fc_prop_fail(v, prop,
                     "%s: %lld elements of batch element %lld differ bitwise when it runs alone (B=1, same data); "
                       "first [%lld,%lld,%lld,%lld]: %.9g in the batch, %.9g alone",
              fc_tensor_name(t), (long long)bad, (long long)b, (long long)first[0], (long long)first[1],
              (long long)first[2], (long long)first[3], fx, fy);
    else if (bad)
        fc_prop_fail(v, prop,
                     "%s: %lld elements of batch element %lld differ by more than bound_a + bound_b when it runs "
                       "alone (B=1, same data); first [%lld,%lld,%lld,%lld]: %.9g in the batch, %.9g alone (allowed %.3g)",
              fc_tensor_name(t), (long long)bad, (long long)b, (long long)first[0], (long long)first[1],
              (long long)first[2], (long long)first[3], fx, fy, flim);
    return bad;
}

fc_outcome fc_prop_batch_invariance(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "batch_invariance";
    fc_verdict_init(v);
    if (V3_NOT_YET(c, v, prop)) return v->outcome;
    const fa_problem *p = &c->p;
    if (p->batch < 2 || fc_case_numel(c, FC_T_O) == 0) {
        fc_verdict_skip(v, "%s: needs batch >= 2 and a non-empty output", prop);
        return v->outcome;
    }
    int bwd = c->backward && be->backward != NULL;
    int bit_fwd = batch_bitwise(be), bit_bwd = bit_fwd && c->deterministic;
    fc_run ra;
    if (!init_run(&ra, c, FC_POISON_A, v, prop)) return v->outcome;
    orc_fwd_result fa;
    orc_bwd_result ga;
    int have_fa = 0, have_ga = 0;
    if (!run_all(be, &ra, bwd, v, prop)) goto done;
    if (!bit_fwd) { if (!(have_fa = oracle_fwd(&ra, be, &fa, v, prop))) goto done; }
    if (bwd && !bit_bwd) { if (!(have_ga = oracle_bwd(&ra, be, &ga, v, prop))) goto done; }
    /* the batch elements run alone: every one up to 4, else the first, second, middle and last */
    int64_t picks[4], np = 0;
    if (p->batch <= 4) for (int64_t b = 0; b < p->batch; b++) picks[np++] = b;
    else { picks[0] = 0; picks[1] = 1; picks[2] = p->batch / 2; picks[3] = p->batch - 1; np = 4; }
    fc_case c1 = *c;
    c1.p.batch = 1;
    const int ins[5] = {FC_T_Q, FC_T_K, FC_T_V, FC_T_DO, FC_T_MASK};
    for (int64_t k = 0; k < np && v->outcome != FC_FAIL; k++) {
        int64_t b = picks[k];
        fc_run rs;
        if (!init_run(&rs, &c1, FC_POISON_B, v, prop)) break;
        for (int q = 0; q < 5; q++) {   /* batch element b's inputs, bit for bit */
            fc_buf *d = &rs.buf[ins[q]];
            const fc_buf *src = &ra.buf[ins[q]];
            if (!d->alloc || !src->alloc) continue;
            int64_t idx[4], ia[4], n = buf_numel(d);
            for (int64_t e = 0; e < n; e++) {
                unravel(d, e, idx);
                memcpy(ia, idx, sizeof ia);
                ia[0] = b;
                memcpy((char *)d->alloc + fc_buf_index(d, idx) * (int64_t)d->elem_size, elem_ptr(src, ia), d->elem_size);
            }
        }
        orc_fwd_result fs;
        orc_bwd_result gs;
        int have_fs = 0, have_gs = 0;
        if (run_all(be, &rs, bwd, v, prop) && (bit_fwd || (have_fs = oracle_fwd(&rs, be, &fs, v, prop))) &&
            (!bwd || bit_bwd || (have_gs = oracle_bwd(&rs, be, &gs, v, prop)))) {
            batch_compare(prop, FC_T_O, &ra, have_fa ? &fa.o : NULL, b, &rs, have_fs ? &fs.o : NULL, v);
            batch_compare(prop, FC_T_LSE, &ra, have_fa ? &fa.lse : NULL, b, &rs, have_fs ? &fs.lse : NULL, v);
            if (bwd) {
                batch_compare(prop, FC_T_DQ, &ra, have_ga ? &ga.dq : NULL, b, &rs, have_gs ? &gs.dq : NULL, v);
                batch_compare(prop, FC_T_DK, &ra, have_ga ? &ga.dk : NULL, b, &rs, have_gs ? &gs.dk : NULL, v);
                batch_compare(prop, FC_T_DV, &ra, have_ga ? &ga.dv : NULL, b, &rs, have_gs ? &gs.dv : NULL, v);
            }
        }
        if (have_gs) orc_bwd_free(&gs);
        if (have_fs) orc_fwd_free(&fs);
        fc_run_free(&rs);
    }
done:
    if (have_ga) orc_bwd_free(&ga);
    if (have_fa) orc_fwd_free(&fa);
    fc_run_free(&ra);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * Table
 * ------------------------------------------------------------------------- */
const fc_prop_entry fc_prop_table[] = {
    {"determinism", fc_prop_determinism, 0},
    {"leak", fc_prop_leak, 0},
    {"pow2_scale", fc_prop_pow2_scale, 0},
    {"slices", fc_prop_slices, 0},
    {"batch_invariance", fc_prop_batch_invariance, 1},
    {"row_sums", fc_prop_row_sums, 1},
    {"key_permutation", fc_prop_key_permutation, 1},
    {"key_translation", fc_prop_key_translation, 1},
    {"linearity", fc_prop_linearity, 1},
    {"split_merge", fc_prop_split_merge, 1},
    {"gradient_fd", fc_prop_gradient_fd, 1},
    {"packing", fc_prop_packing, 0},
    {"paging", fc_prop_paging, 0},
    {"nonfinite", fc_prop_nonfinite, 1},
};

int fc_prop_count(void) { return (int)(sizeof fc_prop_table / sizeof fc_prop_table[0]); }

const fc_prop_entry *fc_prop_by_name(const char *name) {
    for (int i = 0; i < fc_prop_count(); i++)
        if (strcmp(fc_prop_table[i].name, name) == 0) return &fc_prop_table[i];
    return NULL;
}
