/* wide_index_test.c: the > 2^31-element path is indexed in 64 bits, tested on the CPU.
 *
 * 1. case/: a case whose Q and O hold more than 2^31 elements is valid (it was refused before:
 *    "more than 2^31 elements"), its counts, spans, strides and buffer indices are exact 64-bit
 *    values, and its generated values past element 2^31 come from the 64-bit
 *    counter (they are not the values of the wrapped index). Past 2^40 a case is refused.
 * 2. properties/check: the oracle sample plan takes every row of small cases and a seeded
 *    sample of the huge ones; options override it.
 * 3. fuzz/: fitting a case into a production-size budget does not overflow the work product.
 * 4. Sparse views: Q, O (and dO, dQ, LSE) whose batch stride is more than 2^32 elements, in
 *    mmap(MAP_NORESERVE) memory of which only the logical elements are ever touched (a few MB
 *    of many GB of address space). The CPU backend's forward and backward on them pass the
 *    oracle's per-element bounds on every element; a backend that computes the batch offset in
 *    32 bits (a fake wrapping the CPU backend per batch at the wrapped offset: the bug class
 *    issue 17 names) fails them. The oracle and its compare read the same views, so a 32-bit
 *    offset in either would let the fake pass or the real backend fail. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "case/case.h"
#include "fuzz/fz_gen.h"
#include "kernels/cpu/cpu_mutants.h"
#include "oracle/oracle.h"
#include "properties/check/check.h"
#include "properties/check/tests/check_test.h"


#define TWO31 ((int64_t)1 << 31)
#define TWO32 ((int64_t)1 << 32)

/* ------------------------------------------------------------------------- */
static void test_case(void) {
    fc_case c;
    fct_case(&c, 1, 150001, 65, 128, 1, 128, FA_BF16);
    char msg[256] = "";
    CHECK(fc_case_check(&c, msg, sizeof msg) == 0, "a case with 2.46e9 elements in Q and O is valid (%s)", msg);
    int64_t nq = fc_case_numel(&c, FC_T_Q);
    CHECK(nq == (int64_t)150001 * 128 * 128 && nq > TWO31, "numel(Q) = %lld", (long long)nq);
    CHECK(fc_case_span(&c, FC_T_O) == nq && fc_case_numel(&c, FC_T_DQ) == nq, "span(O) = numel = %lld", (long long)nq);
    int64_t st[4];
    fc_case_strides(&c, FC_T_Q, st);
    CHECK(st[0] == nq && st[1] == 128 * 128 && st[2] == 128 && st[3] == 1, "strides of Q");
    /* the buffer index of the last row (no allocation needed: fc_buf_index is arithmetic) */
    fc_buf b;
    memset(&b, 0, sizeof b);
    b.ndim = fc_case_dims(&c, FC_T_Q, b.dim);
    memcpy(b.stride, st, sizeof st);
    b.guard = 64;
    int64_t last[4] = {0, 150000, 127, 127};
    CHECK(fc_buf_index(&b, last) == 64 + nq - 1, "index of the last element = %lld", (long long)fc_buf_index(&b, last));
    /* values past element 2^31 and 2^32: fc_case_value, fc_case_value_row agree, and differ from
       the values at the index wrapped to 32 bits */
    int64_t row = (TWO31 + 4096) / (128 * 128) + 1;    /* starts past element 2^31 */
    int64_t idx[4] = {0, row, 3, 0};
    double r[16], w[16];
    fc_case_value_row(&c, FC_T_Q, idx, 16, r);
    int same_elem = 1, differ_wrapped = 0;
    int64_t lin = (row * 128 + 3) * 128, wrapped = lin - TWO31;  /* what a 31-bit counter would give */
    int64_t widx[4] = {0, wrapped / (128 * 128), (wrapped / 128) % 128, wrapped % 128};
    fc_case_value_row(&c, FC_T_Q, widx, 16, w);
    for (int k = 0; k < 16; k++) {
        int64_t e[4] = {0, row, 3, k};
        same_elem &= fc_case_value(&c, FC_T_Q, e) == r[k];
        differ_wrapped += r[k] != w[k];
    }
    CHECK(lin > TWO31 && same_elem && differ_wrapped >= 12,
          "values past element 2^31 come from the 64-bit counter (%d of 16 differ from the wrapped index)", differ_wrapped);
    /* past 2^40 elements: refused with the reason */
    fc_case h = c;
    h.p.batch = 1 << 12; h.p.seqlen_q = 1 << 16; h.p.heads_q = 1 << 8; h.p.heads_kv = 1; h.p.head_dim_qk = h.p.head_dim_v = 1 << 8;
    CHECK(fc_case_check(&h, msg, sizeof msg) != 0 && strstr(msg, "2^40"), "2^44 elements refused: %s", msg);
}

/* ------------------------------------------------------------------------- */
static void test_plan(void) {
    fc_case c;
    fc_case_default(&c);
    int64_t rows, cols;
    fc_check_sample_plan(&c, NULL, &rows, &cols);
    CHECK(rows == 0 && cols == 0, "small case: every row and column");
    c.p.batch = 80; c.p.seqlen_q = c.p.seqlen_k = 8192; c.p.heads_q = 32; c.p.heads_kv = 4; c.p.head_dim_qk = c.p.head_dim_v = 128;
    fc_check_sample_plan(&c, NULL, &rows, &cols);
    CHECK(rows == FC_CHECK_SAMPLE && cols == FC_CHECK_SAMPLE, "production case: a %d-row sample", FC_CHECK_SAMPLE);
    fc_check_opts o;
    fc_check_opts_default(&o);
    o.max_rows = 0;
    o.max_cols = 7;
    fc_check_sample_plan(&c, &o, &rows, &cols);
    CHECK(rows == 0 && cols == 7, "options override the plan");
}

/* ------------------------------------------------------------------------- */
static void test_fit(void) {
    fc_case c;
    fc_case_default(&c);
    c.p.batch = 1 << 12; c.p.heads_q = c.p.heads_kv = 1 << 12; c.p.seqlen_q = c.p.seqlen_k = 1 << 20;
    c.p.head_dim_qk = c.p.head_dim_v = 1 << 12;
    fz_budget b;
    fz_budget_default(&b);
    b.max_batch = b.max_heads_q = 1 << 12;
    b.max_seq = 1 << 20;
    b.max_head_dim = 1 << 12;
    b.max_work = (int64_t)1 << 40;
    fz_case_fit(&c, &b, NULL, 1);
    long double w = (long double)c.p.batch * c.p.heads_q * c.p.seqlen_q * c.p.seqlen_k * c.p.head_dim_qk;
    char msg[256] = "";
    CHECK(w <= (long double)b.max_work && w > (long double)b.max_work / 64 && fc_case_check(&c, msg, sizeof msg) == 0,
          "fit into a 2^40 work budget from 2^76: work %.3Lg (%s)", w, msg);
}

/* ------------------------------------------------------------------------- */
/* sparse views */

enum { B = 2, SQ = 40, SK = 56, HQ = 4, HKV = 2, D = 32 };
#define BSTRIDE (TWO32 + 8192) /* batch stride of Q, O, dO, dQ (elements); LSE the same */

static void *sparse(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return (double)(rng(s) >> 11) * 0x1p-53 * 2.0 - 1.0; }

/* [B, S, H, D] with batch stride bs and dense [S, H, D] inside; n/a for K, V (dense) */
static void set_strides(int64_t st[4], int64_t bs, int64_t S, int64_t H) {
    st[3] = 1; st[2] = D; st[1] = H * D; st[0] = bs ? bs : S * H * D;
}

static void fill(uint16_t *p, const int64_t st[4], int64_t S, int64_t H, uint64_t seed, double amp) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) p[b * st[0] + s * st[1] + h * st[2] + d] = fc_bf16_from_double(amp * unif(&seed));
}

static void poison(uint16_t *p, const int64_t st[4], int64_t S, int64_t H) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) p[b * st[0] + s * st[1] + h * st[2] + d] = FC_POISON_A_16;
}

/* a backend whose batch offsets are 32-bit: the CPU backend run per batch at the offset
   (uint32_t)(b * stride) of Q, O, LSE, dO, dQ */
static const fa_backend *real;
static const void *off32(const void *p, int64_t b, int64_t st, size_t es) {
    return (const char *)p + (size_t)(uint32_t)(b * st) * es;
}
static fa_status fwd32(const fa_fwd_args *a, fa_error *err) {
    for (int64_t b = 0; b < a->p.batch; b++) {
        fa_fwd_args x = *a;
        x.p.batch = 1;
        x.q.ptr = off32(a->q.ptr, b, a->q.stride[0], 2);
        x.k.ptr = (const char *)a->k.ptr + (size_t)(b * a->k.stride[0]) * 2;
        x.v.ptr = (const char *)a->v.ptr + (size_t)(b * a->v.stride[0]) * 2;
        x.o.ptr = (void *)off32(a->o.ptr, b, a->o.stride[0], 2);
        x.lse.ptr = (float *)off32(a->lse.ptr, b, a->lse.stride[0], 4);
        fa_status s = real->forward(&x, err);
        if (s != FA_OK) return s;
    }
    return FA_OK;
}
static fa_status bwd32(const fa_bwd_args *a, fa_error *err) {
    for (int64_t b = 0; b < a->p.batch; b++) {
        fa_bwd_args x = *a;
        x.p.batch = 1;
        x.q.ptr = off32(a->q.ptr, b, a->q.stride[0], 2);
        x.o.ptr = off32(a->o.ptr, b, a->o.stride[0], 2);
        x.dout.ptr = off32(a->dout.ptr, b, a->dout.stride[0], 2);
        x.dq.ptr = (void *)off32(a->dq.ptr, b, a->dq.stride[0], 2);
        x.lse.ptr = (float *)off32(a->lse.ptr, b, a->lse.stride[0], 4);
        x.k.ptr = (const char *)a->k.ptr + (size_t)(b * a->k.stride[0]) * 2;
        x.v.ptr = (const char *)a->v.ptr + (size_t)(b * a->v.stride[0]) * 2;
        x.dk.ptr = (char *)a->dk.ptr + (size_t)(b * a->dk.stride[0]) * 2;
        x.dv.ptr = (char *)a->dv.ptr + (size_t)(b * a->dv.stride[0]) * 2;
        fa_status s = real->backward(&x, err);
        if (s != FA_OK) return s;
    }
    return FA_OK;
}

/* Run forward + backward of be on the sparse views and judge every element with the oracle.
   Returns the number of failed elements (O, LSE, dQ, dK, dV), -1 on a harness error. */
static int64_t run_sparse(const fa_backend *be, const char *name) {
    const size_t big16 = (size_t)(BSTRIDE * (B - 1) + (int64_t)SQ * HQ * D) * 2;
    const size_t big32 = (size_t)(BSTRIDE * (B - 1) + (int64_t)HQ * SQ) * 4;
    uint16_t *q = sparse(big16), *o = sparse(big16), *dout = sparse(big16), *dq = sparse(big16);
    float *lse = sparse(big32);
    int64_t sq[4], skv[4];
    set_strides(sq, BSTRIDE, SQ, HQ);
    set_strides(skv, 0, SK, HKV);
    const size_t nk = (size_t)(B * SK * HKV * D);
    uint16_t *k = malloc(2 * nk), *v = malloc(2 * nk), *dk = malloc(2 * nk), *dv = malloc(2 * nk);
    if (!q || !o || !dout || !dq || !lse || !k || !v || !dk || !dv) {
        printf("FAIL %s: cannot map the sparse views (mmap MAP_NORESERVE of %zu bytes)\n", name, big16);
        return -1;
    }
    fill(q, sq, SQ, HQ, 11, 1.0);
    fill(k, skv, SK, HKV, 12, 1.0);
    fill(v, skv, SK, HKV, 13, 1.0);
    fill(dout, sq, SQ, HQ, 14, 1.0);
    poison(o, sq, SQ, HQ);
    poison(dq, sq, SQ, HQ);
    for (int64_t b = 0; b < B; b++)
        for (int64_t e = 0; e < HQ * SQ; e++) lse[b * BSTRIDE + e] = NAN;

    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.p.batch = B; a.p.seqlen_q = SQ; a.p.seqlen_k = SK; a.p.heads_q = HQ; a.p.heads_kv = HKV;
    a.p.head_dim_qk = a.p.head_dim_v = D; a.p.dtype = FA_BF16; a.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
    a.p.window_left = a.p.window_right = -1;
    a.q.ptr = q; a.k.ptr = k; a.v.ptr = v; a.o.ptr = o;
    memcpy(a.q.stride, sq, 32); memcpy(a.o.stride, sq, 32); memcpy(a.k.stride, skv, 32); memcpy(a.v.stride, skv, 32);
    a.lse.ptr = lse; a.lse.stride[0] = BSTRIDE; a.lse.stride[1] = SQ; a.lse.stride[2] = 1;
    fa_error err;
    memset(&err, 0, sizeof err);
    int64_t bad = -1;
    fa_status st = be->forward(&a, &err);
    orc_options opt;
    orc_options_init(&opt);
    opt.baseline = 0;
    const fa_precision *prof = &fa_backend_cpu()->precision;
    orc_fwd_result fr;
    orc_bwd_result br;
    if (st != FA_OK) printf("     %s: forward returned %s: %s\n", name, fa_status_name(st), err.msg);
    else if (orc_fwd(&a, prof, &opt, &fr, &err) != FA_OK) printf("FAIL %s: oracle forward: %s\n", name, err.msg);
    else {
        orc_stats so, sl;
        if (orc_compare_fwd(&fr, &a.o, &a.lse, &so, &sl, &err) == FA_OK) {
            bad = so.failed + sl.failed;
            printf("     %s forward: O %lld of %lld judged elements failed, LSE %lld of %lld\n", name, (long long)so.failed,
                   (long long)so.checked, (long long)sl.failed, (long long)sl.checked);
            if (so.checked != (int64_t)B * SQ * HQ * D) bad = -1;
        }
        orc_fwd_free(&fr);
    }
    if (bad >= 0) {
        fa_bwd_args ba;
        memset(&ba, 0, sizeof ba);
        ba.p = a.p;
        ba.q = a.q; ba.k = a.k; ba.v = a.v; ba.o = a.o; ba.lse = a.lse;
        ba.dout.ptr = dout; memcpy(ba.dout.stride, sq, 32);
        ba.dq.ptr = dq; memcpy(ba.dq.stride, sq, 32);
        ba.dk.ptr = dk; memcpy(ba.dk.stride, skv, 32);
        ba.dv.ptr = dv; memcpy(ba.dv.stride, skv, 32);
        ba.deterministic = 1;
        /* the backward judged on its own: O and LSE rebuilt from the correct forward so that a
           broken forward does not decide it */
        st = fa_backend_cpu()->forward(&a, &err);
        if (st == FA_OK) st = be->backward(&ba, &err);
        if (st != FA_OK) printf("     %s: backward returned %s: %s\n", name, fa_status_name(st), err.msg);
        else if (orc_bwd(&ba, prof, &opt, &br, &err) != FA_OK) printf("FAIL %s: oracle backward: %s\n", name, err.msg), bad = -1;
        else {
            orc_stats s3[3];
            if (orc_compare_bwd(&br, &ba.dq, &ba.dk, &ba.dv, &s3[0], &s3[1], &s3[2], &err) == FA_OK) {
                bad += s3[0].failed + s3[1].failed + s3[2].failed;
                printf("     %s backward: dQ %lld of %lld judged elements failed, dK %lld, dV %lld\n", name,
                       (long long)s3[0].failed, (long long)s3[0].checked, (long long)s3[1].failed, (long long)s3[2].failed);
                if (s3[0].checked != (int64_t)B * SQ * HQ * D) bad = -1;
            } else bad = -1;
            orc_bwd_free(&br);
        }
    }
    munmap(q, big16); munmap(o, big16); munmap(dout, big16); munmap(dq, big16); munmap(lse, big32);
    free(k); free(v); free(dk); free(dv);
    return bad;
}

static void test_sparse(void) {
    fa_cpu_set_mutant(0);
    real = fa_backend_cpu();
    int64_t good = run_sparse(real, "cpu");
    CHECK(good == 0, "CPU backend, batch stride 2^32 + 8192 elements: every element of O, LSE, dQ, dK, dV within bound");
    fa_backend fake = *real;
    fake.name = "cpu-32bit-batch-offset";
    fake.forward = fwd32;
    fake.backward = bwd32;
    int64_t bad = run_sparse(&fake, "32-bit batch offsets");
    CHECK(bad > 0, "a backend with 32-bit batch offsets fails (%lld elements)", (long long)bad);
}

int main(void) {
    test_case();
    test_plan();
    test_fit();
    test_sparse();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
