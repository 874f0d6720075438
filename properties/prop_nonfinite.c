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
 *     O = 0, LSE = -inf, dQ = 0 ("masked_row"), whatever its Q or dO hold;
 *   - except where the profile declares FA_MASKED_NF_PROPAGATES: an element a masked pair with the
 *     poisoned value reaches may be NaN (check.h fc_mnf; noted "masked non-finite: declared
 *     propagating; N elements NaN by it"); a finite value there is judged as above. And a row whose
 *     exact LSE is NaN may hold +inf under lse_empty +inf (BOUNDS.md 10.6).
 * Placements (nf_plan, head 0): the key j0 of batch b visible to some rows of (b, 0) and hidden
 * from others, next to the probe row's visible range; when no batch has one (key padding), a key
 * no row of its batch sees, preferably one another batch's rows see (nothing may reach any
 * output); rows: a row with no visible key when the case has one, and a row that sees some keys
 * but not all, Q's +Inf in a component that gives it a +Inf or NaN score (nf_q_comp):
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
    int64_t b;     /* batch of the placement */
    int64_t pos;   /* key j0 (K, V) or query row (Q, dO) */
    int64_t comp;  /* the component poisoned (K NaN / -Inf, Q +Inf, dO NaN) */
    int dead;      /* Q, dO: the row sees no key; K, V: no row of batch b sees the key (nothing may
                      reach any output) */
    int cross;     /* K, V dead: rows of another batch see the same key index (a cross-batch leak) */
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
        if (!strcmp(x->check, "note")) fc_verdict_note(v, "%s: %s: %.200s", NF, label, x->text);
        else fc_prop_fail(v, NF, "%s: [%s] %.200s", label, x->check, x->text);
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
        b->propagated += a->propagated;
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
    const int kv = pl->kind <= NF_V_ROW;
    char batch[32] = "";
    if (pl->b) snprintf(batch, sizeof batch, " of batch %lld", (long long)pl->b);
    snprintf(label, sizeof label, "%s at %s %lld%s%s", nf_kind_name[pl->kind], kv ? "key" : "row", (long long)pl->pos,
             batch, !pl->dead ? "" : !kv ? " (a row with no visible key)"
                      : pl->cross ? " (hidden from every row of its batch, seen by another batch's rows)"
                                  : " (hidden from every row)");
    fc_run r;
    if (fc_run_init(&r, c, FC_POISON_A, msg, sizeof msg)) {
        fc_prop_fail(v, NF, "harness: %s", msg);
        return 0;
    }
    const int64_t dv = p->head_dim_v;
    switch (pl->kind) {
    case NF_K_NAN: { int64_t idx[4] = {pl->b, pl->pos, 0, pl->comp}; fc_buf_set(&r.buf[FC_T_K], idx, NAN); break; }
    case NF_K_NEGINF: { int64_t idx[4] = {pl->b, pl->pos, 0, pl->comp}; fc_buf_set(&r.buf[FC_T_K], idx, -INFINITY); break; }
    case NF_V_ROW:
        for (int64_t d = 0; d < dv; d++) {
            int64_t idx[4] = {pl->b, pl->pos, 0, d};
            fc_buf_set(&r.buf[FC_T_V], idx, d % 3 == 0 ? NAN : d % 3 == 1 ? INFINITY : -INFINITY);
        }
        break;
    case NF_Q_INF: { int64_t idx[4] = {pl->b, pl->pos, 0, pl->comp}; fc_buf_set(&r.buf[FC_T_Q], idx, INFINITY); break; }
    case NF_DO_NAN: { int64_t idx[4] = {pl->b, pl->pos, 0, pl->comp}; fc_buf_set(&r.buf[FC_T_DO], idx, NAN); break; }
    default: break;
    }
    fc_verdict_init(s);
    int judged = 0;
    nf_counts fwd = {0, 0, 0}, gq = {0, 0, 0}, gk = {0, 0, 0}, gv = {0, 0, 0};
    fa_status st = fc_run_forward(&r, be);
    fc_phase ph = FC_PHASE_FORWARD;
    if (st == FA_OK && bwd) st = fc_run_backward(&r, be), ph = FC_PHASE_BACKWARD;
    if (st == FA_ERR_UNSUPPORTED) {
        fc_verdict_decline(v, ph, "%s: %s: backend says unsupported: %s", NF, label, r.err.msg);
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
        const int64_t nonfinite = fwd.nonfinite + gq.nonfinite + gk.nonfinite + gv.nonfinite;
        if (fwd.finite == 0) fc_prop_fail(v, NF, "%s: no O/LSE element kept a finite judged reference", label);
        if (bwd && kv && gq.finite == 0) {
            /* under FA_MASKED_NF_PROPAGATES a NaN/Inf V_j0 may turn the O rows hidden from j0 into NaN
               (declared); the rows that see j0 are NaN anyway, so every row's D = dO.O and dQ are NaN
               and the oracle has no dQ to judge: this placement shows nothing about dQ (the K
               placements judge it) */
            if (s->t[FC_T_O].propagated > 0)
                fc_verdict_note(v, "%s: %s: dQ not judged: every O row is NaN, by the declared masked non-finite "
                                   "propagation or by seeing the key", NF, label);
            else
                fc_prop_fail(v, NF, "%s: no dQ element kept a finite judged reference", label);
        }
        if (bwd && !kv && (gk.finite == 0 || gv.finite == 0))
            fc_prop_fail(v, NF, "%s: no dK (%lld) or dV (%lld) element kept a finite judged reference", label,
                    (long long)gk.finite, (long long)gv.finite);
        /* a row with no visible key, or a key no row of its batch sees, reaches nothing */
        if (pl->dead && nonfinite > 0)
            fc_prop_fail(v, NF, "%s: the oracle has %lld non-finite references for a value %s (harness)", label,
                         (long long)nonfinite, kv ? "no row sees" : "only a row with no visible key reads");
        /* a placement some row sees must reach an output (K -Inf may only hide its key: a score of
           -Inf is a weight of 0; dO reaches outputs in the backward only) */
        if (!pl->dead && pl->kind != NF_K_NEGINF && (pl->kind != NF_DO_NAN || bwd) && nonfinite == 0) {
            fc_verdict_skip(v, "%s: %s: no output has a non-finite reference; the placement shows nothing", NF, label);
            judged = 0;
        }
        if (pl->kind == NF_V_ROW && !pl->dead && fwd.inf_input == 0) {
            fc_verdict_skip(v, "%s: %s: no O element has an infinite exact value (BOUNDS.md 11.1)", NF, label);
            judged = 0;
        }
    }
out:
    fc_run_free(&r);
    return judged;
}

/* Rows and keys of batch b, head 0 (the mask of the clean run r0): nvis[i] keys row i sees, the
 * first and last of them; seen[j] rows that see key j. The probe (the row nearest Sq / 2 that sees
 * some keys but not all, else one that sees any), a row with no visible key (dead), and j0: a key
 * some row sees and another does not, hidden from the probe and nearest its visible range when
 * there is one, else nearest Sk / 2. -1 where there is none. */
static void nf_scan(const fc_run *r0, int64_t b, int64_t *nvis, int64_t *first, int64_t *last, int64_t *seen,
                    int64_t *probe, int64_t *dead, int64_t *j0) {
    const int64_t Sq = r0->c.p.seqlen_q, Sk = r0->c.p.seqlen_k;
    memset(seen, 0, sizeof *seen * (size_t)Sk);
    for (int64_t i = 0; i < Sq; i++) {
        first[i] = last[i] = -1;
        nvis[i] = 0;
        for (int64_t j = 0; j < Sk; j++)
            if (nf_visible(r0, b, 0, i, j)) {
                if (first[i] < 0) first[i] = j;
                last[i] = j;
                nvis[i]++;
                seen[j]++;
            }
    }
    *probe = *dead = *j0 = -1;
    for (int pass = 0; pass < 2 && *probe < 0; pass++)
        for (int64_t k = 0; k < Sq && *probe < 0; k++)
            for (int sgn = 0; sgn < 2 && *probe < 0; sgn++) {
                int64_t i = Sq / 2 + (sgn ? -k : k);
                if (i >= 0 && i < Sq && nvis[i] > 0 && (pass || nvis[i] < Sk)) *probe = i;
            }
    for (int64_t i = 0; i < Sq && *dead < 0; i++)
        if (nvis[i] == 0) *dead = i;
    if (*probe < 0) return;
    int64_t best = -1;
    for (int pass = 0; pass < 2 && *j0 < 0; pass++)
        for (int64_t j = 0; j < Sk; j++) {
            if (seen[j] == 0 || seen[j] == Sq) continue;
            int64_t dist;
            if (pass == 0) {
                if (nf_visible(r0, b, 0, *probe, j)) continue;
                dist = j < first[*probe] ? first[*probe] - j : j > last[*probe] ? j - last[*probe] : 0;
            } else {
                dist = j < Sk / 2 ? Sk / 2 - j : j - Sk / 2;
            }
            if (best < 0 || dist < best) { best = dist; *j0 = j; }
        }
}

/* The component of Q[b, i, 0, .] whose +Inf reaches row i's outputs: one where some key j the row
 * sees has scale * K[b, j, 0, d] >= 0, so that its score is +Inf or NaN (a non-finite reference,
 * BOUNDS.md 11); a score of -Inf is only an UNCHECKABLE row (a weight of 0 from an overflowed
 * intermediate) and shows nothing. Tried from d = 4 mod Dqk on; -1 when no component qualifies. */
static int64_t nf_q_comp(const fc_run *r0, int64_t b, int64_t i) {
    const fa_problem *p = &r0->c.p;
    const double sgn = p->softmax_scale < 0 ? -1.0 : 1.0;   /* 0: the default scale, 1/sqrt(Dqk) */
    for (int64_t k = 0; k < p->head_dim_qk; k++) {
        int64_t d = (4 + k) % p->head_dim_qk;
        for (int64_t j = 0; j < p->seqlen_k; j++) {
            if (!nf_visible(r0, b, 0, i, j)) continue;
            int64_t idx[4] = {b, j, 0, d};
            if (sgn * fc_buf_get(&r0->buf[FC_T_K], idx) >= 0) return d;
        }
    }
    return -1;
}

/* The placements of nonfinite for the case of the clean run r0, derived from its geometry and
 * inputs so that each one can show the relation (PROPERTIES.md "nonfinite"):
 *   K, V at (b, j0): the first batch b (from 0) with a key some of its rows see and others do not
 *     (j0 as nf_scan); else a key no row of its batch sees (nothing may reach any output),
 *     preferring one that rows of another batch see (a kernel that reads another batch's mask
 *     leaks it), then the one nearest its batch's visible keys (a key tile those rows read);
 *   Q +Inf, dO NaN at the probe row of that batch (else of the first batch with a row that sees a
 *     key), Q's component by nf_q_comp; and at a row with no visible key when the case has one.
 * Returns the number of placements (pl holds 7), 0 with the reason in why when the case cannot
 * show the relation (no key hidden from any row: nothing can leak), -1 out of memory. */
static int nf_plan(const fc_run *r0, int bwd, nf_place *pl, char *why, size_t whylen) {
    const fa_problem *p = &r0->c.p;
    const int64_t B = p->batch, Sq = p->seqlen_q, Sk = p->seqlen_k;
    int64_t *nvis = calloc((size_t)Sq, sizeof *nvis), *first = calloc((size_t)Sq, sizeof *first);
    int64_t *last = calloc((size_t)Sq, sizeof *last), *seen = calloc((size_t)Sk, sizeof *seen);
    int64_t *probe = calloc((size_t)B, sizeof *probe), *dead = calloc((size_t)B, sizeof *dead);
    unsigned char *sees = calloc((size_t)(B * Sk), 1);   /* sees[b Sk + j]: some row of batch b sees key j */
    int64_t *dist = calloc((size_t)(B * Sk), sizeof *dist); /* key j to batch b's nearest seen key */
    int np = -1;
    if (!nvis || !first || !last || !seen || !probe || !dead || !sees || !dist) {
        snprintf(why, whylen, "out of memory");
        goto done;
    }
    int64_t kb = -1, kj = -1, kdead = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t j0;
        nf_scan(r0, b, nvis, first, last, seen, &probe[b], &dead[b], &j0);
        int64_t prev = -1;
        for (int64_t j = 0; j < Sk; j++) {
            sees[b * Sk + j] = seen[j] > 0;
            if (seen[j]) prev = j;
            dist[b * Sk + j] = prev >= 0 ? j - prev : INT64_MAX;
        }
        for (int64_t j = Sk - 1, next = -1; j >= 0; j--) {
            if (seen[j]) next = j;
            if (next >= 0 && next - j < dist[b * Sk + j]) dist[b * Sk + j] = next - j;
        }
        if (kb < 0 && j0 >= 0) { kb = b; kj = j0; }
    }
    int cross = 0;
    if (kb < 0) {   /* no split key in any batch: a key hidden from every row of its batch */
        int64_t best = INT64_MAX;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < Sk; j++) {
                if (sees[b * Sk + j]) continue;
                int x = 0;
                for (int64_t o = 0; o < B && !x; o++) x = o != b && sees[o * Sk + j];
                /* cross-batch first, then nearest the batch's own visible keys */
                int64_t d = dist[b * Sk + j] == INT64_MAX ? Sk : dist[b * Sk + j];
                int64_t score = (x ? 0 : 2 * Sk) + d;
                if (score < best) { best = score; kb = b; kj = j; cross = x; }
            }
        kdead = 1;
    }
    if (kb < 0) {
        snprintf(why, whylen, "no key is hidden from one row and seen by another, nor hidden from every row of a "
                              "batch; nothing can leak");
        np = 0;
        goto done;
    }
    int64_t pb = probe[kb] >= 0 ? kb : -1, db = dead[kb] >= 0 ? kb : -1;
    for (int64_t b = 0; b < B && pb < 0; b++) if (probe[b] >= 0) pb = b;
    for (int64_t b = 0; b < B && db < 0; b++) if (dead[b] >= 0) db = b;
    const int64_t dqk = p->head_dim_qk, dv = p->head_dim_v;
    np = 0;
    pl[np++] = (nf_place){NF_K_NAN, kb, kj, 3 % dqk, kdead, cross};
    pl[np++] = (nf_place){NF_K_NEGINF, kb, kj, 5 % dqk, kdead, cross};
    pl[np++] = (nf_place){NF_V_ROW, kb, kj, 0, kdead, cross};
    if (pb >= 0) {
        int64_t qd = nf_q_comp(r0, pb, probe[pb]);
        if (qd < 0) {
            snprintf(why, whylen, "row %lld of batch %lld: every key it sees has scale * K < 0 in every component (a "
                                  "+Inf in Q gives only -Inf scores)", (long long)probe[pb], (long long)pb);
            np = 0;
            goto done;
        }
        pl[np++] = (nf_place){NF_Q_INF, pb, probe[pb], qd, 0, 0};
        if (bwd) pl[np++] = (nf_place){NF_DO_NAN, pb, probe[pb], 2 % dv, 0, 0};
    }
    if (db >= 0) {
        pl[np++] = (nf_place){NF_Q_INF, db, dead[db], 4 % dqk, 1, 0};
        if (bwd) pl[np++] = (nf_place){NF_DO_NAN, db, dead[db], 2 % dv, 1, 0};
    }
done:
    free(nvis);
    free(first);
    free(last);
    free(seen);
    free(probe);
    free(dead);
    free(sees);
    free(dist);
    return np;
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
    fc_run r0;
    char msg[300];
    if (fc_run_init(&r0, c, FC_POISON_A, msg, sizeof msg)) {
        fc_prop_fail(v, NF, "harness: %s", msg);
        return v->outcome;
    }
    nf_place pl[7];
    char why[200];
    int np = nf_plan(&r0, bwd, pl, why, sizeof why);
    if (np < 0) fc_prop_fail(v, NF, "harness: %s", why);
    else if (np == 0) fc_verdict_skip(v, "%s: %s", NF, why);
    else {
        fc_verdict *s = malloc(sizeof *s);
        if (!s) fc_prop_fail(v, NF, "harness: out of memory");
        for (int k = 0; s && k < np; k++) nf_one(be, c, &pl[k], bwd, v, s);
        free(s);
    }
    fc_run_free(&r0);
    return v->outcome;
}

int fc_prop_nonfinite_plan(const fc_case *c, int bwd, char *why, size_t whylen) {
    char buf[300];
    if (fc_case_is_v3(c)) {
        snprintf(why, whylen, "not defined for contract-v3 cases");
        return 0;
    }
    if (c->p.batch == 0 || c->p.seqlen_q == 0 || c->p.seqlen_k == 0 || c->p.heads_q == 0) {
        snprintf(why, whylen, "empty problem");
        return 0;
    }
    fc_run r0;
    if (fc_run_init(&r0, c, FC_POISON_A, buf, sizeof buf)) {
        snprintf(why, whylen, "%s", buf);
        return -1;
    }
    nf_place pl[7];
    int np = nf_plan(&r0, bwd, pl, buf, sizeof buf);
    snprintf(why, whylen, "%s", np > 0 ? "" : buf);
    fc_run_free(&r0);
    return np;
}
