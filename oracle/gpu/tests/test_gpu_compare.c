/* test_gpu_compare: GPU. The device compare (orc_gpu_compare_fwd / _bwd) = the host compare
 * (orc_compare_fwd / _bwd) on random cases: every orc_stats field equal (counts, verdicts,
 * worst element and its position, first failure / overflow positions, histogram, grid,
 * median), the bias sums within the rounding of a reordered sum (cmp_cases.h). Kernel values
 * of every orc_judge.h class, elements escalated to MPFR, every layout, GQA, masks; one
 * case of >= 2^20 elements per tensor (the host compare's threaded path and par_select).
 * The backward also with the result blocks in device memory (orc_gpu_compare_bwd_dev, what
 * orc_gpu_bwd_dev leaves): the same fields, escalations included. Each case prints its
 * seconds on stderr (a run cut by a time limit shows where it was).
 * Also: host pointers and a baseline result are refused (FA_ERR_INVALID naming them). */
#include <time.h>

#include <cuda_runtime.h>

#include "oracle/gpu/orc_gpu.h"
#include "oracle/gpu/tests/cmp_cases.h"

#define CU(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) { fprintf(stderr, "CUDA: %s at %d\n", cudaGetErrorString(e_), __LINE__); exit(2); } \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *up(const void *h, size_t bytes) {
    void *d;
    CU(cudaMalloc(&d, bytes ? bytes : 8));
    CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* A device-resident result (orc_gpu_bwd_dres) holding the host result's blocks: what
 * orc_gpu_bwd_dev leaves, for orc_gpu_compare_bwd_dev. The host blocks stay in br. */
static void dres_of(const orc_bwd_result *br, orc_gpu_bwd_dres *dr) {
    memset(dr, 0, sizeof *dr);
    dr->r = *br;
    orc_block *b[3] = {&dr->r.dq, &dr->r.dk, &dr->r.dv};
    for (int k = 0; k < 3; k++) {
        size_t ne = (size_t)(b[k]->n * b[k]->dim);
        b[k]->ref = up(b[k]->ref, ne * 8);
        b[k]->bound = up(b[k]->bound, ne * 8);
        b[k]->orc_err = up(b[k]->orc_err, ne * 8);
        b[k]->flags = up(b[k]->flags, ne);
    }
}

static void dres_drop(orc_gpu_bwd_dres *dr) {
    orc_block *b[3] = {&dr->r.dq, &dr->r.dk, &dr->r.dv};
    for (int k = 0; k < 3; k++) {
        cudaFree(b[k]->ref); cudaFree(b[k]->bound); cudaFree(b[k]->orc_err); cudaFree(b[k]->flags);
    }
    memset(dr, 0, sizeof *dr);
}

int main(void) {
    if (!orc_gpu_available()) { fprintf(stderr, "no usable CUDA device\n"); return 2; }
    int64_t n_esc = 0, n_fail = 0, n_el = 0, n_dev_esc = 0;
    for (int cs = 0; cs < 14; cs++) {
        t_prob t;
        double c0 = now_s();
        fa_problem p = cc_problem(cs < 3 ? 30000 : 3000);
        if (cs == 0) /* O: 2^20 elements, 2^14 rows (the host compare's threaded path, par_select) */
            p = t_problem(1, 2048, 2048, 8, 2, 64, 64, FA_BF16, FA_CAUSAL_TOP_LEFT, -1, -1);
        t_setup(&t, p, cs % 3, 1.0, 1.0, 1.0, cs % 5 == 4);
        fa_precision pr = t_profile_fp32();
        orc_options opt;
        orc_options_init(&opt);
        opt.baseline = 0;
        fa_error err;
        orc_fwd_result fr;
        fa_fwd_args fa = t_fwd_args(&t);
        if (orc_fwd(&fa, &pr, &opt, &fr, &err) != FA_OK) { CHECK(0, "case %d: orc_fwd: %s", cs, err.msg); continue; }
        t_store_fwd(&t, &fr);
        cc_widen(&fr.o, cs == 0 ? 2 : 4);
        cc_widen(&fr.lse, 2);
        int64_t no = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, cs % 3, (int64_t[4]){0});
        uint16_t *ko = calloc((size_t)no, 2);
        float *kl = calloc((size_t)(p.batch * p.heads_q * p.seqlen_q + 1), 4);
        cc_fill16(&fr.o, ko, t.to.stride, p.dtype);
        cc_fill32(&fr.lse, kl, t.tlse.stride);
        fa_tensor ho = {ko, {t.to.stride[0], t.to.stride[1], t.to.stride[2], t.to.stride[3]}};
        fa_lse hl = {kl, {t.tlse.stride[0], t.tlse.stride[1], t.tlse.stride[2]}};
        fa_tensor dO = ho;
        fa_lse dl = hl;
        dO.ptr = up(ko, (size_t)no * 2);
        dl.ptr = up(kl, (size_t)(p.batch * p.heads_q * p.seqlen_q + 1) * 4);
        orc_stats so, sl, go, gl;
        CHECK(orc_compare_fwd(&fr, &ho, &hl, &so, &sl, &err) == FA_OK, "case %d: compare: %s", cs, err.msg);
        CHECK(orc_gpu_compare_fwd(&fr, &dO, &dl, &go, &gl, &err) == FA_OK, "case %d: gpu compare: %s", cs, err.msg);
        cc_check_stats("O", cs, &so, &go, 0);
        cc_check_stats("LSE", cs, &sl, &gl, 0);
        if (cs == 1) {
            CHECK(orc_gpu_compare_fwd(&fr, &ho, NULL, &go, NULL, &err) == FA_ERR_INVALID && !strcmp(err.arg, "o"),
                  "host o accepted: %s", err.msg);
        }
        n_esc += so.escalations + sl.escalations;
        n_fail += so.failed + sl.failed;
        n_el += so.checked + so.unchecked + sl.checked + sl.unchecked;
        orc_fwd_free(&fr);
        cudaFree(dO.ptr); cudaFree(dl.ptr); free(ko); free(kl);

        double c1 = now_s();
        orc_bwd_result br;
        fa_bwd_args ba = t_bwd_args(&t);
        if (orc_bwd(&ba, &pr, &opt, &br, &err) != FA_OK) { CHECK(0, "case %d: orc_bwd: %s", cs, err.msg); t_free(&t); continue; }
        int64_t sq[4], sk[4], sv[4];
        int64_t nq = t_layout(p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk, cs % 3, sq);
        int64_t nk = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk, cs % 3, sk);
        int64_t nv = t_layout(p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, cs % 3, sv);
        uint16_t *gq = calloc((size_t)nq, 2), *gk = calloc((size_t)nk, 2), *gv = calloc((size_t)nv, 2);
        /* case 0's columns are not widened: an MPFR dK / dV column of it recomputes every row of
         * its G = 4 heads (2^13 rows of 2048 keys) once per compare; the other cases escalate
         * columns through all three compares */
        cc_widen(&br.dq, 3); cc_widen(&br.dk, cs == 0 ? 0 : 2); cc_widen(&br.dv, cs == 0 ? 0 : 2);
        cc_fill16(&br.dq, gq, sq, p.dtype); cc_fill16(&br.dk, gk, sk, p.dtype); cc_fill16(&br.dv, gv, sv, p.dtype);
        fa_tensor tq = {gq, {sq[0], sq[1], sq[2], sq[3]}}, tk = {gk, {sk[0], sk[1], sk[2], sk[3]}},
                  tv = {gv, {sv[0], sv[1], sv[2], sv[3]}};
        fa_tensor dq = tq, dk = tk, dv = tv;
        dq.ptr = up(gq, (size_t)nq * 2); dk.ptr = up(gk, (size_t)nk * 2); dv.ptr = up(gv, (size_t)nv * 2);
        orc_stats h3[3], g3[3];
        CHECK(orc_compare_bwd(&br, &tq, &tk, &tv, &h3[0], &h3[1], &h3[2], &err) == FA_OK, "case %d: bwd compare: %s", cs, err.msg);
        CHECK(orc_gpu_compare_bwd(&br, &dq, &dk, &dv, &g3[0], &g3[1], &g3[2], &err) == FA_OK, "case %d: gpu bwd compare: %s", cs, err.msg);
        cc_check_stats("dQ", cs, &h3[0], &g3[0], 0);
        cc_check_stats("dK", cs, &h3[1], &g3[1], 0);
        cc_check_stats("dV", cs, &h3[2], &g3[2], 0);
        { /* the blocks in device memory (orc_gpu_compare_bwd_dev: read in place; the undecided
           * vectors and the worst elements fetched) = the host compare, field for field */
            orc_gpu_bwd_dres dr;
            orc_stats d3[3];
            dres_of(&br, &dr);
            CHECK(orc_gpu_compare_bwd_dev(&dr, &dq, &dk, &dv, &d3[0], &d3[1], &d3[2], &err) == FA_OK,
                  "case %d: gpu bwd compare (device blocks): %s", cs, err.msg);
            cc_check_stats("dQ dev", cs, &h3[0], &d3[0], 0);
            cc_check_stats("dK dev", cs, &h3[1], &d3[1], 0);
            cc_check_stats("dV dev", cs, &h3[2], &d3[2], 0);
            for (int k = 0; k < 3; k++) n_dev_esc += d3[k].escalations;
            dres_drop(&dr);
        }
        for (int k = 0; k < 3; k++) { n_esc += h3[k].escalations; n_fail += h3[k].failed; n_el += h3[k].checked + h3[k].unchecked; }
        orc_bwd_free(&br);
        cudaFree(dq.ptr); cudaFree(dk.ptr); cudaFree(dv.ptr);
        free(gq); free(gk); free(gv);
        t_free(&t);
        fprintf(stderr, "test_gpu_compare: case %d (B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld): forward %.2f s, backward %.2f s\n",
                cs, (long long)p.batch, (long long)p.seqlen_q, (long long)p.seqlen_k, (long long)p.heads_q,
                (long long)p.heads_kv, (long long)p.head_dim_qk, (long long)p.head_dim_v, c1 - c0, now_s() - c1);
    }
    /* a result with a naive baseline is refused */
    {
        t_prob t;
        t_setup(&t, t_problem(1, 16, 16, 2, 2, 32, 32, FA_BF16, FA_CAUSAL_NONE, -1, -1), 0, 1, 1, 1, 0);
        fa_precision pr = t_profile_fp32();
        orc_fwd_result fr;
        fa_error err;
        fa_fwd_args fa = t_fwd_args(&t);
        CHECK(orc_fwd(&fa, &pr, NULL, &fr, &err) == FA_OK, "baseline case: %s", err.msg);
        fa_tensor dO = t.to;
        dO.ptr = up(t.o, (size_t)(16 * 2 * 32 + 1) * 2);
        orc_stats s;
        CHECK(orc_gpu_compare_fwd(&fr, &dO, NULL, &s, NULL, &err) == FA_ERR_INVALID && !strcmp(err.arg, "res"),
              "baseline result accepted: %s", err.msg);
        cudaFree(dO.ptr);
        orc_fwd_free(&fr);
        t_free(&t);
    }
    CHECK(n_esc > 0 && n_fail > 0, "escalations %lld failures %lld", (long long)n_esc, (long long)n_fail);
    CHECK(n_dev_esc > 0, "no escalation through the device-block compare");
    printf("test_gpu_compare: %lld elements compared on both, %lld escalated (%lld of them by the device-block "
           "compare), %lld failed; %d check failures: %s\n",
           (long long)n_el, (long long)n_esc, (long long)n_dev_esc, (long long)n_fail, t_failures,
           t_failures ? "FAILED" : "PASSED");
    return t_failures ? 1 : 0;
}
