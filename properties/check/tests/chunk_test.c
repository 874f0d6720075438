/* chunk_test.c: the device path's chunking (properties/check/check.h), on the CPU.
 *
 * 1. fc_chunk_per: batches per chunk within a byte budget; 0 when one batch does not fit.
 * 2. fc_check_chunked: every batch judged exactly once, in order, chunks of at most `per`
 *    batches; a chunk the callback refuses (does not fit) is halved and retried, never below one
 *    batch: a batch that never fits is a harness error naming it.
 * 3. The chunked check emulated on the host: the device path's pipeline (batch views of the
 *    run's tensors, the oracle and its compare per chunk, the masked-row and magnitude sums per
 *    chunk, merged with positions moved to the whole call, then fc_judge_tensor) with the CPU tier
 *    in place of the GPU tier, against the host path on the whole call (fc_check_fwd_outputs /
 *    fc_check_bwd_outputs): the same per-tensor statistics and verdicts; an error planted in the
 *    last chunk (O and dQ of the last batch, a masked LSE row of the last batch) is found by both
 *    with the same whole-call position. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"
#include "oracle/oracle.h"
#include "properties/check/check.h"
#include "properties/check/tests/check_test.h"


/* ------------------------------------------------------------------------- */
static void test_per(void) {
    CHECK(fc_chunk_per(10, 100, 1000) == 10, "all batches fit in one chunk");
    CHECK(fc_chunk_per(10, 100, 350) == 3, "350 bytes hold 3 batches of 100");
    CHECK(fc_chunk_per(10, 100, 99) == 0, "one batch does not fit: 0");
    CHECK(fc_chunk_per(320, 10485760.0 * 40, 15e9) == 35, "the huge production entry's backward: 35 batches in 15 GB");
}

/* ------------------------------------------------------------------------- */
typedef struct {
    int64_t batch, fit;   /* chunks of more than fit batches are refused */
    int64_t seen[64];     /* times each batch was judged */
    int64_t last_end, calls, out_of_order;
} cover_ctx;

static int cover_fn(void *user, const fc_chunk *c, orc_stats *st, fc_block_norms *nm, char *msg, size_t msglen) {
    cover_ctx *x = user;
    x->calls++;
    if (c->nb > x->fit) {
        snprintf(msg, msglen, "chunk of %lld batches too large", (long long)c->nb);
        return 1;
    }
    if (c->b0 != x->last_end) x->out_of_order++;
    x->last_end = c->b0 + c->nb;
    for (int64_t b = c->b0; b < c->b0 + c->nb; b++) x->seen[b]++;
    /* one checked element per batch, a failure in batch 5 at chunk-relative position */
    st[0].checked = c->nb;
    for (int64_t b = c->b0; b < c->b0 + c->nb; b++)
        if (b == 5) {
            st[0].failed = 1;
            st[0].first_fail_at[0] = b - c->b0;
            st[0].first_fail_at[1] = 7;
            st[0].worst_at[0] = b - c->b0;
            st[0].worst_ratio = 3;
        }
    nm[0].ref2 = (double)c->nb;
    return 0;
}

static void test_cover(void) {
    const int64_t B = 23;
    int64_t per_list[3] = {1, 4, 23}, fit_list[3] = {23, 3, 23};
    for (int k = 0; k < 3; k++) {
        cover_ctx x;
        memset(&x, 0, sizeof x);
        x.batch = B;
        x.fit = fit_list[k];
        orc_stats st[1];
        fc_block_norms nm[1];
        int64_t nch = 0;
        char msg[256] = "";
        int rc = fc_check_chunked(B, per_list[k], 1, cover_fn, &x, st, nm, &nch, msg, sizeof msg);
        int once = 1;
        for (int64_t b = 0; b < B; b++) once &= x.seen[b] == 1;
        CHECK(rc == 0 && once && x.out_of_order == 0, "per %lld, fit %lld: every batch judged once, in order (%lld chunks)",
              (long long)per_list[k], (long long)x.fit, (long long)nch);
        const int64_t want_list[3] = {23, 12, 1}; /* per 4 over fit 3: halved to 2 */
        int64_t want = want_list[k];
        CHECK(nch == want, "chunks: %lld (want %lld)", (long long)nch, (long long)want);
        CHECK(st[0].checked == B && nm[0].ref2 == (double)B, "counts and sums add over the chunks");
        CHECK(st[0].first_fail_at[0] == 5 && st[0].first_fail_at[1] == 7 && st[0].worst_at[0] == 5 &&
                  st[0].worst_ratio == 3,
              "positions moved to the whole call: first failure and worst at batch 5 (got %lld, %lld)",
              (long long)st[0].first_fail_at[0], (long long)st[0].worst_at[0]);
    }
    cover_ctx x;
    memset(&x, 0, sizeof x);
    x.batch = 6;
    x.fit = 0; /* nothing fits */
    orc_stats st[1];
    fc_block_norms nm[1];
    char msg[256] = "";
    int rc = fc_check_chunked(6, 6, 1, cover_fn, &x, st, nm, NULL, msg, sizeof msg);
    CHECK(rc == -1 && strstr(msg, "harness") && strstr(msg, "does not fit") && strstr(msg, "batch 0"),
          "a batch that does not fit is a harness error: %s", msg);
    CHECK(x.calls == 3, "halved 6 -> 3 -> 1, then refused (%lld calls)", (long long)x.calls);
}

/* ------------------------------------------------------------------------- */
/* the emulated device path: views of the run's host tensors, the CPU tier per chunk */

typedef struct {
    const fc_run *r;
    const fa_precision *prec;
    int bwd;
    fa_fwd_args f;
    fa_bwd_args b;
    int64_t chunks;
} emu_ctx;

static fa_tensor host_view(const fc_buf *b) {
    fa_tensor t;
    t.ptr = b->alloc ? fc_buf_view(b) : NULL;
    for (int k = 0; k < 4; k++) t.stride[k] = b->stride[k];
    return t;
}

/* what k_cmp_norms computes, on a dense view: (b, s, h, d) of a vector / LSE (b, h, s) */
static void emu_norms(const orc_block *blk, const void *kv, const int64_t *st, int f32, int bf16, fc_block_norms *n) {
    fc_block_norms_init(n);
    for (int64_t v = 0; v < blk->n; v++)
        for (int64_t d = 0; d < blk->dim; d++) {
            const orc_index *ix = &blk->index[v];
            int64_t e = v * blk->dim + d;
            double got = f32 ? (double)((const float *)kv)[ix->b * st[0] + ix->h * st[1] + ix->s * st[2]]
                             : orc_decode(((const uint16_t *)kv)[ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + d * st[3]],
                                          bf16 ? FA_BF16 : FA_F16);
            unsigned f = blk->flags[e];
            if (f & ORC_F_MASKED_ROW) {
                if (isnan(n->masked_ref)) n->masked_ref = blk->ref[e];
                if (!(got == blk->ref[e])) {
                    if (!n->masked_bad) {
                        n->masked_at[0] = ix->b; n->masked_at[1] = f32 ? ix->h : ix->s;
                        n->masked_at[2] = f32 ? ix->s : ix->h; n->masked_at[3] = blk->dim == 1 ? 0 : d;
                        n->masked_got = got;
                    }
                    n->masked_bad++;
                }
                continue;
            }
            if (f & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE)) continue;
            if (!isfinite(got)) continue;
            double bd = blk->bound[e] + blk->orc_err[e];
            n->ref2 += blk->ref[e] * blk->ref[e];
            n->got2 += got * got;
            n->bnd2 += bd * bd;
        }
}

static int emu_fn(void *user, const fc_chunk *c, orc_stats *st, fc_block_norms *nm, char *msg, size_t msglen) {
    emu_ctx *x = user;
    orc_options opt;
    orc_options_init(&opt);
    opt.baseline = 0;
    fa_error err;
    memset(&err, 0, sizeof err);
    const int bf16 = x->r->c.p.dtype == FA_BF16;
    x->chunks++;
    if (!x->bwd) {
        fa_fwd_args a;
        fc_fwd_args_batch_view(&x->f, c->b0, c->nb, &a);
        orc_fwd_result res;
        if (orc_fwd(&a, x->prec, &opt, &res, &err) != FA_OK ||
            orc_compare_fwd(&res, &a.o, &a.lse, &st[0], &st[1], &err) != FA_OK) {
            snprintf(msg, msglen, "emulated chunk: %s", err.msg);
            return -1;
        }
        const int64_t ls[4] = {a.lse.stride[0], a.lse.stride[1], a.lse.stride[2], 0};
        emu_norms(&res.o, a.o.ptr, a.o.stride, 0, bf16, &nm[0]);
        emu_norms(&res.lse, a.lse.ptr, ls, 1, bf16, &nm[1]);
        orc_fwd_free(&res);
        return 0;
    }
    fa_bwd_args a;
    fc_bwd_args_batch_view(&x->b, c->b0, c->nb, &a);
    orc_bwd_result res;
    if (orc_bwd(&a, x->prec, &opt, &res, &err) != FA_OK ||
        orc_compare_bwd(&res, &a.dq, &a.dk, &a.dv, &st[0], &st[1], &st[2], &err) != FA_OK) {
        snprintf(msg, msglen, "emulated chunk: %s", err.msg);
        return -1;
    }
    emu_norms(&res.dq, a.dq.ptr, a.dq.stride, 0, bf16, &nm[0]);
    emu_norms(&res.dk, a.dk.ptr, a.dk.stride, 0, bf16, &nm[1]);
    emu_norms(&res.dv, a.dv.ptr, a.dv.stride, 0, bf16, &nm[2]);
    orc_bwd_free(&res);
    return 0;
}

static void emu_args(const fc_run *r, emu_ctx *x) {
    memset(&x->f, 0, sizeof x->f);
    memset(&x->b, 0, sizeof x->b);
    x->f.p = x->b.p = r->c.p;
    x->f.q = x->b.q = host_view(&r->buf[FC_T_Q]);
    x->f.k = x->b.k = host_view(&r->buf[FC_T_K]);
    x->f.v = x->b.v = host_view(&r->buf[FC_T_V]);
    x->f.o = x->b.o = host_view(&r->buf[FC_T_O]);
    x->b.dout = host_view(&r->buf[FC_T_DO]);
    x->b.dq = host_view(&r->buf[FC_T_DQ]);
    x->b.dk = host_view(&r->buf[FC_T_DK]);
    x->b.dv = host_view(&r->buf[FC_T_DV]);
    const fc_buf *l = &r->buf[FC_T_LSE];
    x->f.lse.ptr = x->b.lse.ptr = (float *)fc_buf_view(l);
    for (int k = 0; k < 3; k++) x->f.lse.stride[k] = x->b.lse.stride[k] = l->stride[k];
    x->b.deterministic = r->c.deterministic;
}

/* whole call on the host path vs the emulated chunks (per batches a chunk) into va / vb */
static void both(const fc_run *r, const fa_precision *prec, int bwd, int64_t per, fc_verdict *va, fc_verdict *vb) {
    fc_verdict_init(va);
    fc_verdict_init(vb);
    char msg[256];
    if (!bwd) {
        orc_fwd_result res;
        CHECK(fc_oracle_fwd_plan(r, prec, FC_ORACLE_CPU, 0, &res, NULL, msg, sizeof msg) == 0, "host path oracle");
        fc_check_fwd_outputs(r, &res, va);
        orc_fwd_free(&res);
    } else {
        orc_bwd_result res;
        CHECK(fc_oracle_bwd_plan(r, prec, FC_ORACLE_CPU, 0, 0, &res, NULL, msg, sizeof msg) == 0, "host path oracle");
        fc_check_bwd_outputs(r, &res, va);
        orc_bwd_free(&res);
    }
    emu_ctx x;
    memset(&x, 0, sizeof x);
    x.r = r;
    x.prec = prec;
    x.bwd = bwd;
    emu_args(r, &x);
    orc_stats st[3];
    fc_block_norms nm[3];
    static const int tf[2] = {FC_T_O, FC_T_LSE}, tb[3] = {FC_T_DQ, FC_T_DK, FC_T_DV};
    int nt = bwd ? 3 : 2;
    int rc = fc_check_chunked(r->c.p.batch, per, nt, emu_fn, &x, st, nm, NULL, msg, sizeof msg);
    CHECK(rc == 0, "emulated chunked %s: %lld chunks of <= %lld batches", bwd ? "backward" : "forward",
          (long long)x.chunks, (long long)per);
    for (int k = 0; k < nt; k++) fc_judge_tensor(r, bwd ? tb[k] : tf[k], &st[k], &nm[k], vb);
}

static void test_emulated(void) {
    /* B = 5 in chunks of 2 (the last chunk one batch); GQA 4/2; causal bottom-right with Sq > Sk:
       the first Sq - Sk rows of every (b, h) see no key (masked rows: O = 0, LSE = -inf, dQ = 0) */
    fc_case c;
    fct_case(&c, 5, 40, 33, 4, 2, 32, FA_BF16);
    c.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
    c.backward = 1;
    c.seed = 1717;
    char msg[256];
    CHECK(fc_case_check(&c, msg, sizeof msg) == 0, "case valid: %s", msg);
    const fa_backend *be = fa_backend_cpu();
    fc_run r;
    CHECK(fc_run_init(&r, &c, FC_POISON_A, msg, sizeof msg) == 0, "run init: %s", msg);
    CHECK(fc_run_forward(&r, be) == FA_OK && fc_run_backward(&r, be) == FA_OK, "CPU backend forward + backward");
    const fa_precision *prec = &be->precision;
    fc_verdict va, vb;
    static const char *wh[2] = {"forward", "backward"};
    for (int bwd = 0; bwd < 2; bwd++)
        for (int per = 1; per <= 5; per += 1) {
            if (per == 3 || per == 4) continue;
            both(&r, prec, bwd, per, &va, &vb);
            char what[64];
            snprintf(what, sizeof what, "%s, chunks of %d", wh[bwd], per);
            fct_same_verdicts(&va, &vb, what);
            CHECK(va.outcome == FC_PASS, "%s: the CPU backend passes", what);
        }

    /* planted errors in the last chunk (batch 4): O[4, 38, 3, 5], dQ[4, 37, 1, 9], and the masked
       LSE row (4, 2, 0) */
    const int64_t io[4] = {4, 38, 3, 5}, iq[4] = {4, 37, 1, 9}, il[4] = {4, 2, 0, 0};
    fct_plant(&r, io, iq, il);
    for (int bwd = 0; bwd < 2; bwd++) {
        both(&r, prec, bwd, 2, &va, &vb);
        char what[64];
        snprintf(what, sizeof what, "planted, %s, chunks of 2", wh[bwd]);
        fct_same_verdicts(&va, &vb, what);
        fct_planted(&vb, bwd, io, iq, il, what);
    }
    fc_run_free(&r);
}

int main(void) {
    test_per();
    test_cover();
    test_emulated();
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
