/* prop_nonfinite.c: the nonfinite property (properties.h; PROPERTIES.md "nonfinite").
 *
 * One NaN or Inf placed in one input, one run per placement; every output element judged by the
 * oracle on the poisoned inputs (fc_check_fwd_outputs / fc_check_bwd_outputs: the oracle's rule
 * for non-finite values, oracle/BOUNDS.md 11.1):
 *   - an element the poisoned value reaches has a NaN / +-Inf reference (ORC_F_NAN, ORC_F_INF,
 *     with ORC_F_INF_INPUT where an infinite V enters with a positive weight): the kernel must give
 *     that NaN / Inf (check "nan");
 *   - an element it cannot reach keeps its finite reference and bound: a NaN/Inf there is a leak
 *     ("nan"), a value outside the bound a "bound" failure; a row with no visible key stays exactly
 *     O = 0, LSE = -inf, dQ = 0 ("masked_row"), whatever its Q or dO hold.
 * Placements (b = 0; the probe key j0 is visible to some rows of (b, h) and hidden from others of
 * the same (b, h), next to the probe row's visible range; rows: a row with no visible key when the
 * case has one, and a row that sees some keys but not all):
 *   K[j0] one element NaN, K[j0] one element -Inf, V[j0] a whole row NaN/+Inf/-Inf by component,
 *   Q[row] one element +Inf, dO[row] one element NaN (backward).
 * Elements without a finite bound (the oracle's UNCHECKABLE: dK/dV with a NaN K or V, rows whose
 * given O is not finite) are not judged; the property requires instead that the tensor the value
 * could leak into (O and dQ for K, V, Q; dK and dV for dO and Q) keeps judged finite elements, and
 * that a placement some row sees produces a non-finite reference somewhere (else SKIP: the case
 * cannot show the relation, never a pass of it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/prop_internal.h"
#include "properties/properties.h"

static const char *const NF = "nonfinite";


/* Key j visible to row (b, h, i): the oracle's causal/window rule and the mask's -inf. */
static int nf_visible(const fc_run *r, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!orc_visible(&r->c.p, i, j)) return 0;
    if (r->buf[FC_T_MASK].alloc) {
        int64_t idx[4] = {b, h, i, j};
        if (fc_buf_get(&r->buf[FC_T_MASK], idx) == -INFINITY) return 0;
    }
    return 1;
}

typedef enum { NF_K_NAN = 0, NF_K_NEGINF, NF_V_ROW, NF_Q_INF, NF_DO_NAN, NF_KINDS } nf_kind;
static const char *const nf_kind_name[NF_KINDS] = {"K NaN", "K -Inf", "V NaN/+Inf/-Inf row", "Q +Inf", "dO NaN"};

typedef struct {
    nf_kind kind;
    int64_t pos;   /* key j0 (K, V) or query row (Q, dO) */
    int dead;      /* Q, dO: the row sees no key (nothing may reach any output) */
} nf_place;

/* Counts over one oracle block: references NaN/Inf, elements with ORC_F_INF_INPUT, and finite
 * judged ones (no NaN/Inf/UNCHECKABLE flag; rows with no visible key count: judged exactly). */
typedef struct {
    int64_t nonfinite, inf_input, finite;
} nf_counts;

static void nf_count(const orc_block *blk, nf_counts *n) {
    for (int64_t e = 0; e < blk->n * blk->dim; e++) {
        uint8_t f = blk->flags[e];
        if (f & ORC_F_MASKED_ROW) {
            n->finite++;  /* judged exactly (O = 0, LSE = -inf, dQ = 0) */
        } else if (f & (ORC_F_NAN | ORC_F_INF)) {
            n->nonfinite++;
            n->inf_input += (f & ORC_F_INF_INPUT) != 0;
        } else if (!(f & ORC_F_UNCHECKABLE)) {
            n->finite++;
        }
    }
}

/* Failures of a scratch verdict into v, prefixed with the placement. Its skips (elements without
 * a finite bound) stay behind: the property states which tensors must keep judged elements. Its
 * overflow notes too: downstream of a NaN/Inf input the oracle flags elements UNCHECKABLE and, its
 * magnitudes being non-finite, ORC_F_OVERFLOW as well (BOUNDS.md 11 assumes finite inputs);
 * nf_overflow counts the overflow-sensitive elements that have a bound. */
static void nf_transfer(fc_verdict *v, const fc_verdict *s, const char *label) {
    for (int i = 0; i < s->n_reasons; i++) {
        const fc_reason *x = &s->reason[i];
        if (!strcmp(x->check, "skip") || !strcmp(x->check, "overflow")) continue;
        fc_prop_fail(v, NF, "%s: [%s] %.200s", label, x->check, x->text);
    }
}

/* The per-tensor counts of a placement's scratch verdict added to v (elements judged, matched
 * non-finite ones, uncheckable ones, the worst ratio), so that reports show what was judged. */
static void nf_stats(fc_verdict *v, const fc_verdict *s) {
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_tensor_stats *a = &s->t[t];
        fc_tensor_stats *b = &v->t[t];
        if (!a->checked) continue;
        b->checked = 1;
        b->elements += a->elements;
        b->violations += a->violations;
        b->nonfinite_mismatch += a->nonfinite_mismatch;
        b->nonfinite_ok += a->nonfinite_ok;
        b->uncheckable += a->uncheckable;
        b->exact += a->exact;
        if (a->max_ratio > b->max_ratio) b->max_ratio = a->max_ratio;
        if (a->max_abs_err > b->max_abs_err) b->max_abs_err = a->max_abs_err;
    }
}

/* Elements of tensor t flagged ORC_F_OVERFLOW but not UNCHECKABLE where the backend gave NaN/Inf
 * and the reference is finite: overflow-sensitive in the sense of BOUNDS.md 11 (dense cases). */
static int64_t nf_overflow(const fc_run *r, const orc_block *blk, int t) {
    int64_t n = 0;
    for (int64_t vi = 0; vi < blk->n; vi++)
        for (int64_t k = 0; k < blk->dim; k++) {
            uint8_t f = blk->flags[vi * blk->dim + k];
            if (!(f & ORC_F_OVERFLOW) || (f & (ORC_F_UNCHECKABLE | ORC_F_NAN | ORC_F_INF))) continue;
            const orc_index *ix = &blk->index[vi];
            int64_t idx[4] = {ix->b, ix->s, ix->h, k};
            if (t == FC_T_LSE) { idx[1] = ix->h; idx[2] = ix->s; idx[3] = 0; }
            n += !isfinite(fc_buf_get(&r->buf[t], idx));
        }
    return n;
}

/* One placement: returns 1 when it was judged, 0 when the case could not show it (skip noted). */
static int nf_one(const fa_backend *be, const fc_case *c, const nf_place *pl, int bwd, fc_verdict *v,
                  fc_verdict *s) {
    const fa_problem *p = &c->p;
    char label[96], msg[300];
    snprintf(label, sizeof label, "%s at %s %lld%s", nf_kind_name[pl->kind], pl->kind <= NF_V_ROW ? "key" : "row",
             (long long)pl->pos, pl->dead ? " (a row with no visible key)" : "");
    fc_run r;
    if (fc_run_init(&r, c, FC_POISON_A, msg, sizeof msg)) {
        fc_prop_fail(v, NF, "harness: %s", msg);
        return 0;
    }
    const int64_t dqk = p->head_dim_qk, dv = p->head_dim_v;
    switch (pl->kind) {
    case NF_K_NAN: { int64_t idx[4] = {0, pl->pos, 0, 3 % dqk}; fc_buf_set(&r.buf[FC_T_K], idx, NAN); break; }
    case NF_K_NEGINF: { int64_t idx[4] = {0, pl->pos, 0, 5 % dqk}; fc_buf_set(&r.buf[FC_T_K], idx, -INFINITY); break; }
    case NF_V_ROW:
        for (int64_t d = 0; d < dv; d++) {
            int64_t idx[4] = {0, pl->pos, 0, d};
            fc_buf_set(&r.buf[FC_T_V], idx, d % 3 == 0 ? NAN : d % 3 == 1 ? INFINITY : -INFINITY);
        }
        break;
    case NF_Q_INF: { int64_t idx[4] = {0, pl->pos, 0, 4 % dqk}; fc_buf_set(&r.buf[FC_T_Q], idx, INFINITY); break; }
    case NF_DO_NAN: { int64_t idx[4] = {0, pl->pos, 0, 2 % dv}; fc_buf_set(&r.buf[FC_T_DO], idx, NAN); break; }
    default: break;
    }
    fc_verdict_init(s);
    int judged = 0;
    nf_counts fwd = {0, 0, 0}, gq = {0, 0, 0}, gk = {0, 0, 0}, gv = {0, 0, 0};
    fa_status st = fc_run_forward(&r, be);
    if (st == FA_OK && bwd) st = fc_run_backward(&r, be);
    if (st == FA_ERR_UNSUPPORTED) {
        fc_verdict_skip(v, "%s: %s: backend says unsupported: %s", NF, label, r.err.msg);
        goto out;
    }
    if (st != FA_OK) {
        fc_prop_fail(v, NF, "%s: backend returned %s (arg '%s'): %s", label, fa_status_name(st), r.err.arg, r.err.msg);
        goto out;
    }
    fc_check_guards(&r, s);
    fc_check_inputs_unchanged(&r, s);
    fc_check_written(&r, FC_T_O, s);
    fc_check_written(&r, FC_T_LSE, s);
    orc_fwd_result fr;
    if (fc_oracle_fwd(&r, fc_check_profile(be), &fr, msg, sizeof msg)) {
        fc_prop_fail(v, NF, "%s: harness: %s", label, msg);
        goto out;
    }
    fc_check_fwd_outputs(&r, &fr, s);
    int64_t ovf = nf_overflow(&r, &fr.o, FC_T_O) + nf_overflow(&r, &fr.lse, FC_T_LSE);
    nf_count(&fr.o, &fwd);
    nf_count(&fr.lse, &fwd);
    orc_fwd_free(&fr);
    if (bwd) {
        for (int t = FC_T_DQ; t <= FC_T_DV; t++) fc_check_written(&r, t, s);
        orc_bwd_result br;
        if (fc_oracle_bwd(&r, fc_check_profile(be), &br, msg, sizeof msg)) {
            fc_prop_fail(v, NF, "%s: harness: %s", label, msg);
            goto out;
        }
        fc_check_bwd_outputs(&r, &br, s);
        ovf += nf_overflow(&r, &br.dq, FC_T_DQ) + nf_overflow(&r, &br.dk, FC_T_DK) + nf_overflow(&r, &br.dv, FC_T_DV);
        nf_count(&br.dq, &gq);
        nf_count(&br.dk, &gk);
        nf_count(&br.dv, &gv);
        orc_bwd_free(&br);
    }
    nf_transfer(v, s, label);
    nf_stats(v, s);
    if (ovf > 0)
        fc_verdict_overflow(v, "%s: %s: %lld elements NaN/Inf where the profile's own intermediates may overflow "
                               "(oracle/BOUNDS.md section 11)", NF, label, (long long)ovf);
    judged = 1;
    /* what the placement must have shown: the guarded tensors keep judged finite elements */
    {
        const int kv = pl->kind <= NF_V_ROW;
        const int64_t nonfinite = fwd.nonfinite + gq.nonfinite + gk.nonfinite + gv.nonfinite;
        if (fwd.finite == 0) fc_prop_fail(v, NF, "%s: no O/LSE element kept a finite judged reference", label);
        if (bwd && kv && gq.finite == 0) fc_prop_fail(v, NF, "%s: no dQ element kept a finite judged reference", label);
        if (bwd && !kv && (gk.finite == 0 || gv.finite == 0))
            fc_prop_fail(v, NF, "%s: no dK (%lld) or dV (%lld) element kept a finite judged reference", label,
                    (long long)gk.finite, (long long)gv.finite);
        /* a row with no visible key reaches nothing */
        if (pl->dead && nonfinite > 0)
            fc_prop_fail(v, NF, "%s: the oracle has %lld non-finite references for a value only a row with no visible "
                       "key reads (harness)", label, (long long)nonfinite);
        /* a placement some row sees must reach an output (K -Inf may only hide its key: a score of
           -Inf is a weight of 0; dO reaches outputs in the backward only) */
        if (!pl->dead && pl->kind != NF_K_NEGINF && (pl->kind != NF_DO_NAN || bwd) && nonfinite == 0) {
            fc_verdict_skip(v, "%s: %s: no output has a non-finite reference; the placement shows nothing", NF, label);
            judged = 0;
        }
        if (pl->kind == NF_V_ROW && fwd.inf_input == 0) {
            fc_verdict_skip(v, "%s: %s: no O element has an infinite exact value (BOUNDS.md 11.1)", NF, label);
            judged = 0;
        }
    }
out:
    fc_run_free(&r);
    return judged;
}

fc_outcome fc_prop_nonfinite(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    fc_verdict_init(v);
    if (fc_case_is_v3(c)) {
        fc_verdict_skip(v, "%s: not defined for contract-v3 cases (packed/paged tensors, softcap, sinks)", NF);
        return v->outcome;
    }
    const fa_problem *p = &c->p;
    const int64_t Sq = p->seqlen_q, Sk = p->seqlen_k;
    if (p->batch == 0 || Sq == 0 || Sk == 0 || p->heads_q == 0) {
        fc_verdict_skip(v, "%s: empty problem", NF);
        return v->outcome;
    }
    const int bwd = c->backward && be->backward != NULL;
    /* visibility of (b = 0, h = 0): the mask buffer of a clean run */
    fc_run r0;
    char msg[300];
    if (fc_run_init(&r0, c, FC_POISON_A, msg, sizeof msg)) {
        fc_prop_fail(v, NF, "harness: %s", msg);
        return v->outcome;
    }
    int64_t *nvis = calloc((size_t)Sq, sizeof *nvis), *first = calloc((size_t)Sq, sizeof *first);
    int64_t *last = calloc((size_t)Sq, sizeof *last), *seen_by = calloc((size_t)Sk, sizeof *seen_by);
    if (!nvis || !first || !last || !seen_by) {
        fc_prop_fail(v, NF, "harness: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < Sq; i++) {
        first[i] = -1;
        for (int64_t j = 0; j < Sk; j++)
            if (nf_visible(&r0, 0, 0, i, j)) {
                if (first[i] < 0) first[i] = j;
                last[i] = j;
                nvis[i]++;
                seen_by[j]++;
            }
    }
    /* probe row: the row nearest Sq / 2 that sees some keys but not all (else one that sees any);
       j0: a key some row sees and another does not (a tile other rows read), hidden from the probe
       and nearest its visible range when there is one, else nearest Sk / 2 */
    int64_t probe = -1, j0 = -1, dead = -1;
    for (int pass = 0; pass < 2 && probe < 0; pass++)
        for (int64_t k = 0; k < Sq && probe < 0; k++)
            for (int sgn = 0; sgn < 2 && probe < 0; sgn++) {
                int64_t i = Sq / 2 + (sgn ? -k : k);
                if (i >= 0 && i < Sq && nvis[i] > 0 && (pass || nvis[i] < Sk)) probe = i;
            }
    for (int64_t i = 0; i < Sq && dead < 0; i++)
        if (nvis[i] == 0) dead = i;
    if (probe >= 0) {
        int64_t best = -1;
        for (int pass = 0; pass < 2 && j0 < 0; pass++)
            for (int64_t j = 0; j < Sk; j++) {
                if (seen_by[j] == 0 || seen_by[j] == Sq) continue;
                int64_t dist;
                if (pass == 0) {
                    if (nf_visible(&r0, 0, 0, probe, j)) continue;
                    dist = j < first[probe] ? first[probe] - j : j > last[probe] ? j - last[probe] : 0;
                } else {
                    dist = j < Sk / 2 ? Sk / 2 - j : j - Sk / 2;
                }
                if (best < 0 || dist < best) { best = dist; j0 = j; }
            }
    }
    if (j0 < 0) {
        fc_verdict_skip(v, "%s: no key is hidden from one row and seen by another; nothing can leak", NF);
        goto done;
    }
    nf_place pl[7];
    int np = 0;
    pl[np++] = (nf_place){NF_K_NAN, j0, 0};
    pl[np++] = (nf_place){NF_K_NEGINF, j0, 0};
    pl[np++] = (nf_place){NF_V_ROW, j0, 0};
    pl[np++] = (nf_place){NF_Q_INF, probe, 0};
    if (bwd) pl[np++] = (nf_place){NF_DO_NAN, probe, 0};
    if (dead >= 0) {
        pl[np++] = (nf_place){NF_Q_INF, dead, 1};
        if (bwd) pl[np++] = (nf_place){NF_DO_NAN, dead, 1};
    }
    fc_verdict *s = malloc(sizeof *s);
    if (!s) {
        fc_prop_fail(v, NF, "harness: out of memory");
        goto done;
    }
    for (int k = 0; k < np; k++) nf_one(be, c, &pl[k], bwd, v, s);
    free(s);
done:
    free(nvis);
    free(first);
    free(last);
    free(seen_by);
    fc_run_free(&r0);
    return v->outcome;
}
