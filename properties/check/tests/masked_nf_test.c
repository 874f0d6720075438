/* masked_nf_test.c: the declared rules for non-finite values (check.h, above fc_mnf;
 * properties/PROPERTIES.md "Masked non-finite"; kernels/flash_api.h fa_masked_nonfinite).
 *
 * Test backends wrap the CPU backend (correct, isolated) and then do what production kernels do
 * with the keys hidden from a row: multiply them by an exact-zero weight, O_i += 0 * V_j in the
 * forward, dQ_i += 0 * K_j, dK_j += 0 * Q_i, dK_j += 0 * D_i (dS_ij = P_ij (dP_ij - D_i) with
 * D_i = dO_i . O_i NaN when row i sees a NaN key: PyTorch's efficient and math backends, found by
 * certify on the H100, RESULTS-2026-11-25-s7.md), dV_j += 0 * dO_i in the backward
 * (FlashAttention-2's P.V and dS.K GEMMs over a whole key block). Each mode, declared ISOLATED and
 * PROPAGATES:
 *   propagate      the products over the problem's keys (j < Sk_b): passes the leak and nonfinite
 *                  properties when it declares PROPAGATES, fails them when it declares ISOLATED
 *                  (the torch false alarms of 2026-11-25, RESULTS-2026-11-25-s7-nf.md);
 *   wrong_finite   the same rows get a wrong FINITE value instead of NaN: fails under both;
 *   outside        the products over every allocated key slot, past seqused_k too: a NaN in an
 *                  unused slot reaches outputs: fails under both (garbage memory, never a pair);
 *   lse_inf        forward; a NaN LSE written +inf (FlashAttention-2's normalize_softmax_lse):
 *                  passes under lse_empty POS_INF, fails under NEG_INF.
 * And the "note" reasons that name an applied rule: they change no outcome and stay after
 * every failure (reason[0] is what reports print). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"
#include "properties/check/check.h"
#include "properties/check/tests/check_test.h"
#include "properties/properties.h"

enum { TB_PROPAGATE = 0, TB_WRONG_FINITE, TB_OUTSIDE, TB_LSE_INF };
static const char *const tb_mode_name[] = {"propagate", "wrong_finite", "outside", "lse_inf"};
static int tb_mode;

/* ---------------------------------------------------------------------------
 * Element access of the call's tensors (dense or seqused_k; fp16 / bf16)
 * ------------------------------------------------------------------------- */
static uint16_t *tb_at(const fa_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d) {
    return (uint16_t *)t->ptr + b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + d * t->stride[3];
}

static float tb_get(const fa_tensor *t, fa_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d) {
    return (float)fc_half_to_double(*tb_at(t, b, s, h, d), dt == FA_BF16);
}

static void tb_set(const fa_tensor *t, fa_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, double x) {
    *tb_at(t, b, s, h, d) = dt == FA_BF16 ? fc_bf16_from_double(x) : fc_f16_from_double(x);
}

/* the contract's visibility rule (flash_api.h), written here: the test backend shares no code
   with the oracle */
static int tb_visible(const fa_problem *p, const fa_mask *m, int64_t sq, int64_t sk, int64_t b, int64_t h, int64_t i,
                      int64_t j) {
    if (j >= sk) return 0;
    const int br = p->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                   (p->causal == FA_CAUSAL_NONE && p->window_align == FA_ALIGN_BOTTOM_RIGHT);
    const int64_t diag = i + (br ? sk - sq : 0);
    if (p->causal != FA_CAUSAL_NONE && j > diag) return 0;
    if (p->window_left >= 0 && j < diag - p->window_left) return 0;
    if (p->window_right >= 0 && j > diag + p->window_right) return 0;
    if (m->ptr && m->ptr[b * m->stride[0] + h * m->stride[1] + i * m->stride[2] + j * m->stride[3]] == -INFINITY)
        return 0;
    return 1;
}

/* keys a row of sequence b runs its products over: the problem's (Sk_b), or every slot */
static int64_t tb_keys(const fa_problem *p, const fa_varlen *vl, int64_t b, int64_t *sk_b) {
    *sk_b = vl->seqused_k ? vl->seqused_k[b] : p->seqlen_k;
    return tb_mode == TB_OUTSIDE ? p->seqlen_k : *sk_b;
}

/* out (element of an output) += 0 * x; a NaN result is stored as NaN, or (wrong_finite) as the
   old value + 1: a finite value far outside any bound */
static void tb_zero_product(const fa_tensor *out, fa_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, float x) {
    const float o = tb_get(out, dt, b, s, h, d);
    const float r = o + 0.0f * x;
    if (!isnan(r) || isnan(o)) return;
    tb_set(out, dt, b, s, h, d, tb_mode == TB_WRONG_FINITE ? (double)o + 1.0 : (double)NAN);
}

static fa_status tb_forward(const fa_fwd_args *a, fa_error *err) {
    if (a->varlen.cu_seqlens_q || a->varlen.cu_seqlens_k || a->p.page_size)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "varlen", "test backend: dense or seqused_k only");
    fa_status st = fa_backend_cpu()->forward(a, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    const int64_t G = p->heads_q / p->heads_kv;
    if (tb_mode == TB_LSE_INF) {
        for (int64_t b = 0; b < p->batch; b++)
            for (int64_t h = 0; h < p->heads_q; h++)
                for (int64_t i = 0; i < p->seqlen_q; i++) {
                    float *l = a->lse.ptr + b * a->lse.stride[0] + h * a->lse.stride[1] + i * a->lse.stride[2];
                    if (isnan(*l)) *l = INFINITY;
                }
        return FA_OK;
    }
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t sk;
        const int64_t nk = tb_keys(p, &a->varlen, b, &sk);
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < p->seqlen_q; i++)
                for (int64_t j = 0; j < nk; j++) {
                    if (tb_visible(p, &a->mask, p->seqlen_q, sk, b, h, i, j)) continue;
                    for (int64_t d = 0; d < p->head_dim_v; d++)   /* P_ij = 0 times V_j */
                        tb_zero_product(&a->o, p->dtype, b, i, h, d, tb_get(&a->v, p->dtype, b, j, h / G, d));
                }
    }
    return FA_OK;
}

static fa_status tb_backward(const fa_bwd_args *a, fa_error *err) {
    if (a->varlen.cu_seqlens_q || a->varlen.cu_seqlens_k || a->p.page_size)
        return fa_fail(err, FA_ERR_UNSUPPORTED, "varlen", "test backend: dense or seqused_k only");
    fa_status st = fa_backend_cpu()->backward(a, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    const int64_t G = p->heads_q / p->heads_kv;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t sk;
        const int64_t nk = tb_keys(p, &a->varlen, b, &sk);
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < p->seqlen_q; i++) {
                /* dS_ij = P_ij (dP_ij - D_i) = 0 times D_i = dO_i . O_i, NaN when row i's O is
                   (a NaN at a key row i sees) */
                float di = 0.0f;
                for (int64_t d = 0; d < p->head_dim_v; d++)
                    di += tb_get(&a->dout, p->dtype, b, i, h, d) * tb_get(&a->o, p->dtype, b, i, h, d);
                for (int64_t j = 0; j < nk; j++) {
                    if (tb_visible(p, &a->mask, p->seqlen_q, sk, b, h, i, j)) continue;
                    /* dS_ij = 0 times K_j (dQ) and Q_i (dK); P_ij = 0 times dO_i (dV) */
                    for (int64_t d = 0; d < p->head_dim_qk; d++) {
                        tb_zero_product(&a->dk, p->dtype, b, j, h / G, d, di);
                        tb_zero_product(&a->dq, p->dtype, b, i, h, d, tb_get(&a->k, p->dtype, b, j, h / G, d));
                        tb_zero_product(&a->dk, p->dtype, b, j, h / G, d, tb_get(&a->q, p->dtype, b, i, h, d));
                    }
                    for (int64_t d = 0; d < p->head_dim_v; d++)
                        tb_zero_product(&a->dv, p->dtype, b, j, h / G, d, tb_get(&a->dout, p->dtype, b, i, h, d));
                }
            }
    }
    return FA_OK;
}

static fa_backend tb_backend(int masked_nonfinite, int lse_empty) {
    fa_backend b = *fa_backend_cpu();
    b.name = "masked-nf-test";
    b.precision.masked_nonfinite = masked_nonfinite;
    b.precision.lse_empty = lse_empty;
    b.forward = tb_forward;
    b.backward = tb_backward;
    return b;
}

static int has_note(const fc_verdict *v, const char *needle) {
    for (int i = 0; i < v->n_reasons; i++)
        if (!strcmp(v->reason[i].check, "note") && strstr(v->reason[i].text, needle)) return 1;
    return 0;
}

static const char *first_text(const fc_verdict *v) { return v->n_reasons ? v->reason[0].text : ""; }

/* causal top-left, Sq < Sk: keys hidden from some rows (and keys 40.. from every row) */
static void prop_case(fc_case *c, fa_dtype dt) {
    fct_case(c, 1, 40, 56, 2, 1, 16, dt);
    c->p.causal = FA_CAUSAL_TOP_LEFT;
    c->backward = 1;
    c->deterministic = 1;
    c->seed = 7;
}

/* ---------------------------------------------------------------------------
 * The leak and nonfinite properties
 * ------------------------------------------------------------------------- */
static void test_properties(void) {
    fc_case c;
    prop_case(&c, FA_F16);
    fc_verdict v;
    /* the control: the isolated CPU backend passes both (the properties can pass at all) */
    CHECK(fc_prop_nonfinite(fa_backend_cpu(), &c, &v) == FC_PASS, "cpu: nonfinite passes (%s)", first_text(&v));
    CHECK(fc_prop_leak(fa_backend_cpu(), &c, &v) == FC_PASS, "cpu: leak passes (%s)", first_text(&v));
    for (int mode = TB_PROPAGATE; mode <= TB_WRONG_FINITE; mode++) {
        tb_mode = mode;
        for (int decl = FA_MASKED_NF_ISOLATED; decl <= FA_MASKED_NF_PROPAGATES; decl++) {
            fa_backend be = tb_backend(decl, FA_LSE_EMPTY_NEG_INF);
            const char *dn = decl ? "PROPAGATES" : "ISOLATED";
            const int want_pass = mode == TB_PROPAGATE && decl == FA_MASKED_NF_PROPAGATES;
            fc_outcome o = fc_prop_nonfinite(&be, &c, &v);
            CHECK(want_pass ? o == FC_PASS : o == FC_FAIL, "%s declared %s: nonfinite %s (%s: %s)", tb_mode_name[mode], dn,
                  want_pass ? "passes" : "fails", fc_outcome_name(o), first_text(&v));
            if (want_pass) {
                CHECK(has_note(&v, "masked non-finite: declared propagating;"), "%s declared %s: nonfinite names the "
                      "rule (%lld dQ, %lld dK, %lld dV, %lld O elements NaN by it)", tb_mode_name[mode], dn,
                      (long long)v.t[FC_T_DQ].propagated, (long long)v.t[FC_T_DK].propagated,
                      (long long)v.t[FC_T_DV].propagated, (long long)v.t[FC_T_O].propagated);
                CHECK(v.t[FC_T_DQ].propagated > 0 && v.t[FC_T_O].propagated > 0 && v.t[FC_T_DK].propagated > 0 &&
                      v.t[FC_T_DV].propagated > 0, "%s declared %s: NaN accepted in O, dQ, dK and dV",
                      tb_mode_name[mode], dn);
            }
            o = fc_prop_leak(&be, &c, &v);
            CHECK(want_pass ? o == FC_PASS : o == FC_FAIL, "%s declared %s: leak %s (%s: %s)", tb_mode_name[mode], dn,
                  want_pass ? "passes" : "fails", fc_outcome_name(o), first_text(&v));
            if (want_pass)
                CHECK(has_note(&v, "declared propagating;"), "%s declared %s: leak names the rule", tb_mode_name[mode],
                      dn);
        }
    }
}

/* ---------------------------------------------------------------------------
 * A NaN past seqused_k (outside the problem) never propagates
 * ------------------------------------------------------------------------- */
static fc_outcome judge_run(const fa_backend *be, fc_run *r, fc_verdict *v) {
    char msg[300];
    fc_verdict_init(v);
    if (fc_run_forward(r, be) != FA_OK || fc_run_backward(r, be) != FA_OK) {
        fc_verdict_fail(v, "harness", "call failed: %s", r->err.msg);
        return v->outcome;
    }
    orc_fwd_result fr;
    orc_bwd_result br;
    if (fc_oracle_fwd(r, fc_check_profile(be), &fr, msg, sizeof msg)) {
        fc_verdict_fail(v, "harness", "%s", msg);
        return v->outcome;
    }
    fc_check_fwd_outputs(r, &fr, v);
    orc_fwd_free(&fr);
    if (fc_oracle_bwd(r, fc_check_profile(be), &br, msg, sizeof msg)) {
        fc_verdict_fail(v, "harness", "%s", msg);
        return v->outcome;
    }
    fc_check_bwd_outputs(r, &br, v);
    orc_bwd_free(&br);
    return v->outcome;
}

static void test_outside(void) {
    fc_case c;
    fct_case(&c, 2, 24, 40, 2, 1, 16, FA_BF16);
    c.p.causal = FA_CAUSAL_BOTTOM_RIGHT; /* keys of each sequence hidden from its early rows */
    c.backward = 1;
    c.seed = 11;
    c.v3.has_seqused = 1;
    c.v3.seqused_k[0] = 30;
    c.v3.seqused_k[1] = 40;
    for (int mode = TB_PROPAGATE; mode <= TB_OUTSIDE; mode += TB_OUTSIDE - TB_PROPAGATE) {
        tb_mode = mode;
        for (int decl = FA_MASKED_NF_ISOLATED; decl <= FA_MASKED_NF_PROPAGATES; decl++) {
            fa_backend be = tb_backend(decl, FA_LSE_EMPTY_NEG_INF);
            char msg[300];
            fc_run r;
            if (fc_run_init(&r, &c, FC_POISON_A, msg, sizeof msg)) {
                CHECK(0, "seqused case: %s", msg);
                return;
            }
            /* K and V NaN at key 35 of sequence 0: past its seqused_k = 30, outside the problem */
            for (int64_t d = 0; d < 16; d++) {
                int64_t idx[4] = {0, 35, 0, d};
                fc_buf_set(&r.buf[FC_T_K], idx, NAN);
                fc_buf_set(&r.buf[FC_T_V], idx, NAN);
            }
            fc_verdict v;
            fc_outcome o = judge_run(&be, &r, &v);
            const int want_fail = mode == TB_OUTSIDE;
            CHECK(want_fail ? o == FC_FAIL && fc_verdict_has(&v, "nan") : o == FC_PASS,
                  "%s declared %s: a NaN past seqused_k %s (%s: %s)", tb_mode_name[mode],
                  decl ? "PROPAGATES" : "ISOLATED", want_fail ? "reaching outputs fails" : "never read passes",
                  fc_outcome_name(o), first_text(&v));
            CHECK(!has_note(&v, "declared propagating"), "%s declared %s: no masked pair holds it (no rule applied)",
                  tb_mode_name[mode], decl ? "PROPAGATES" : "ISOLATED");
            fc_run_free(&r);
        }
    }
}

/* ---------------------------------------------------------------------------
 * The LSE of a NaN row
 * ------------------------------------------------------------------------- */
static void test_lse(void) {
    fc_case c;
    fct_case(&c, 1, 32, 32, 2, 1, 16, FA_F16);
    c.p.causal = FA_CAUSAL_TOP_LEFT; /* every row sees key 0: no empty row */
    c.seed = 5;
    tb_mode = TB_LSE_INF;
    const int empties[3] = {FA_LSE_EMPTY_POS_INF, FA_LSE_EMPTY_NEG_INF, FA_LSE_EMPTY_ZERO};
    for (int k = 0; k < 3; k++) {
        fa_backend be = tb_backend(FA_MASKED_NF_ISOLATED, empties[k]);
        char msg[300];
        fc_run r;
        if (fc_run_init(&r, &c, FC_POISON_A, msg, sizeof msg)) {
            CHECK(0, "lse case: %s", msg);
            return;
        }
        int64_t idx[4] = {0, 20, 0, 3}; /* K NaN at key 20: rows 20.. of both heads have a NaN LSE */
        fc_buf_set(&r.buf[FC_T_K], idx, NAN);
        fc_verdict v;
        fc_verdict_init(&v);
        fc_outcome o = FC_FAIL;
        orc_fwd_result fr;
        if (fc_run_forward(&r, &be) == FA_OK && !fc_oracle_fwd(&r, fc_check_profile(&be), &fr, msg, sizeof msg)) {
            fc_check_fwd_outputs(&r, &fr, &v);
            o = v.outcome;
            orc_fwd_free(&fr);
        }
        const int want_pass = empties[k] == FA_LSE_EMPTY_POS_INF;
        CHECK(want_pass ? o == FC_PASS && has_note(&v, "24 rows whose exact LSE is NaN hold +inf")
                        : o == FC_FAIL && fc_verdict_has(&v, "nan"),
              "lse_empty %d: +inf for a NaN row %s (%s: %s)", empties[k], want_pass ? "passes" : "fails",
              fc_outcome_name(o), first_text(&v));
        fc_run_free(&r);
    }
}

/* ---------------------------------------------------------------------------
 * Notes (fc_verdict_note): no outcome change, kept after every other reason
 * ------------------------------------------------------------------------- */
static void test_notes(void) {
    fc_verdict v;
    fc_verdict_init(&v);
    fc_verdict_note(&v, "a rule applied");
    CHECK(v.outcome == FC_PASS && !strcmp(fc_verdict_first_check(&v), ""), "a note leaves a pass a pass");
    fc_verdict_fail(&v, "nan", "dq: a failure");
    CHECK(v.outcome == FC_FAIL && !strcmp(v.reason[0].check, "nan") && !strcmp(v.reason[1].check, "note") &&
          !strcmp(fc_verdict_first_check(&v), "nan"), "a failure after a note is reason[0] (reports show it)");
    fc_verdict w;
    fc_verdict_init(&w);
    for (int i = 0; i < FC_VERDICT_MAX_REASONS; i++) fc_verdict_note(&w, "note %d", i);
    fc_verdict_skip(&w, "a skip");
    CHECK(w.outcome == FC_SKIP && !strcmp(w.reason[0].check, "skip") && w.n_reasons == FC_VERDICT_MAX_REASONS &&
          w.n_dropped == 1, "a full list gives up its last note for another reason");
    fc_verdict m;
    fc_verdict_init(&m);
    fc_verdict_note(&m, "note of dst");
    fc_verdict_merge(&m, &v);
    CHECK(m.outcome == FC_FAIL && !strcmp(m.reason[0].check, "nan") && m.n_reasons == 3,
          "merge keeps failures before notes");
}

int main(void) {
    test_notes();
    test_properties();
    test_outside();
    test_lse();
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
