/* bench_gpu_oracle.c: full verification (every element of O and LSE, of dQ, dK
 * and dV) of the CUDA backend's forward and backward by the GPU tier, beside
 * the CPU tier in the same run.
 *
 *   bench_gpu_oracle [B Hq Hkv S D causal  Bc Hqc Sc]
 *   default: 4 16 16 8192 128 1   1 16 2048   (bf16)
 *
 * For the large size (B, Hq, Hkv, S, D): the CUDA backend's forward, then
 * orc_gpu_fwd (reference + bounds, device inputs) and orc_gpu_compare_fwd (the
 * verdict of every element, on the device), wall times; the host compare
 * orc_compare_fwd of the same result beside it (its time, and whether its
 * statistics equal the device's). For the small size (Bc, Hqc, Sc, same
 * D and mask): the same with both tiers, and the CPU tier's time extrapolated to
 * the large size, labelled: the reference by the ratio of visible (query, key)
 * pairs (its work is proportional to pairs * (Dqk + Dv)), the comparison by the
 * ratio of output elements. The backward likewise: the CUDA backend's backward
 * on its own forward outputs (dO Gaussian), orc_gpu_bwd_dev + orc_gpu_compare_bwd_dev (result blocks
 * finished and judged in device memory; its split: input copies, device reference and
 * finishing kernels by CUDA events, escalation), and beside it the host path orc_gpu_bwd +
 * orc_compare_bwd of the same call, whose statistics must be equal.
 * Not a test: prints figures. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/flash_api.h"
#include "oracle/gpu/orc_gpu.h"
#include "oracle/oracle.h"

#define CU(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Gaussian bf16 values, element i from a hash of (seed, i): parallel and reproducible. */
static uint16_t *filled(size_t n, uint64_t seed) {
    uint16_t *x = malloc(n * 2);
    if (!x) { fprintf(stderr, "out of memory\n"); exit(2); }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint64_t z = mix(seed * 0x100000001b3ull + i);
        double u = ((z >> 11) + 0.5) * 0x1p-53, v = ((z & 0x7ff) + 0.5) / 2048.0;
        x[i] = orc_encode(sqrt(-2 * log(u)) * cos(6.283185307179586 * v), FA_BF16);
    }
    return x;
}

static void contiguous(fa_tensor *t, void *p, int64_t S, int64_t H, int64_t D) {
    t->ptr = p;
    t->stride[3] = 1; t->stride[2] = D; t->stride[1] = H * D; t->stride[0] = S * H * D;
}

typedef struct {
    double gpu_ref, gpu_cmp, cpu_ref, cpu_cmp, kernel;
    double bgpu_ref, bgpu_cmp, bcpu_ref, bcpu_cmp; /* backward */
    double gpu_hcmp, bgpu_hcmp; /* the host compare of the GPU tier's results (beside the device compare) */
    double bgpu_href;           /* orc_gpu_bwd (host blocks) */
    double gpu_href;            /* orc_gpu_fwd (host blocks) */
    double bgpu_ucmp;           /* orc_gpu_compare_bwd of those host blocks (uploaded) */
    orc_gpu_times bsplit;       /* the device path's split */
    orc_gpu_times fsplit;       /* the forward's split */
    double belems;
    double pairs, elems; /* visible (query, key) pairs; output elements */
} timing;

/* the device compare's statistics = the host compare's (verdicts, worst, median) */
static int same_stats(const orc_stats *a, const orc_stats *b) {
    return a->checked == b->checked && a->failed == b->failed && a->unchecked == b->unchecked &&
           a->escalations == b->escalations && a->worst_ratio == b->worst_ratio &&
           a->median_ratio == b->median_ratio && !memcmp(a->worst_at, b->worst_at, sizeof a->worst_at) &&
           !memcmp(a->first_fail_at, b->first_fail_at, sizeof a->first_fail_at) &&
           !memcmp(a->ratio_hist, b->ratio_hist, sizeof a->ratio_hist);
}

static void report(const char *tier, const char *name, const orc_stats *s) {
    char buf[700];
    orc_stats_format(s, name, buf, sizeof buf);
    printf("    %-4s %s\n", tier, buf);
}

/* One size: inputs, the CUDA backend's forward, the GPU tier (and the CPU tier if cpu). */
static int run_size(int64_t B, int64_t Hq, int64_t Hkv, int64_t S, int64_t D, int causal, int cpu,
                    const fa_backend *be, timing *t) {
    memset(t, 0, sizeof *t);
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.p.batch = B; a.p.seqlen_q = a.p.seqlen_k = S; a.p.heads_q = Hq; a.p.heads_kv = Hkv;
    a.p.head_dim_qk = a.p.head_dim_v = D; a.p.dtype = FA_BF16;
    a.p.causal = causal ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_NONE;
    a.p.window_left = a.p.window_right = -1;
    size_t nq = (size_t)(B * S * Hq * D), nk = (size_t)(B * S * Hkv * D), nl = (size_t)(B * Hq * S);
    uint16_t *q = filled(nq, 1), *k = filled(nk, 2), *v = filled(nk, 3), *o = malloc(nq * 2);
    float *lse = malloc(nl * 4);
    void *dq, *dk, *dv, *dO, *dl;
    CU(cudaMalloc(&dq, nq * 2)); CU(cudaMalloc(&dk, nk * 2)); CU(cudaMalloc(&dv, nk * 2));
    CU(cudaMalloc(&dO, nq * 2)); CU(cudaMalloc(&dl, nl * 4));
    CU(cudaMemcpy(dq, q, nq * 2, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dk, k, nk * 2, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dv, v, nk * 2, cudaMemcpyHostToDevice));
    contiguous(&a.q, dq, S, Hq, D); contiguous(&a.k, dk, S, Hkv, D); contiguous(&a.v, dv, S, Hkv, D);
    contiguous(&a.o, dO, S, Hq, D);
    a.lse.ptr = dl; a.lse.stride[2] = 1; a.lse.stride[1] = S; a.lse.stride[0] = Hq * S;
    fa_error err;
    double t0 = now();
    if (be->forward(&a, &err) != FA_OK) { fprintf(stderr, "cuda forward: %s\n", err.msg); return 1; }
    CU(cudaDeviceSynchronize());
    t->kernel = now() - t0;
    CU(cudaMemcpy(o, dO, nq * 2, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(lse, dl, nl * 4, cudaMemcpyDeviceToHost));
    fa_tensor ho = a.o;
    ho.ptr = o;
    fa_lse hl = a.lse;
    hl.ptr = lse;
    t->pairs = causal ? (double)B * Hq * (double)S * (S + 1) / 2 : (double)B * Hq * (double)S * S;
    t->elems = (double)nq + (double)nl;
    printf("  B=%lld Hq=%lld Hkv=%lld S=%lld D=%lld bf16 causal=%d: %.3g visible pairs, %lld O + %lld LSE elements\n",
           (long long)B, (long long)Hq, (long long)Hkv, (long long)S, (long long)D, causal, t->pairs,
           (long long)nq, (long long)nl);

    orc_options opt;
    orc_options_init(&opt);
    opt.baseline = 0;
    orc_fwd_result r;
    orc_gpu_fwd_dres fdr;
    orc_stats so, sl;
    int bad_cmp = 0;
    /* the device path (blocks finished and judged on the device): the table's figures */
    t0 = now();
    if (orc_gpu_fwd_dev(&a, &be->precision, &opt, &fdr, &err) != FA_OK) { fprintf(stderr, "orc_gpu_fwd_dev: %s\n", err.msg); return 1; }
    double t1 = now();
    if (orc_gpu_compare_fwd_dev(&fdr, &a.o, &a.lse, &so, &sl, &err) != FA_OK) { fprintf(stderr, "device compare: %s\n", err.msg); return 1; }
    double t2 = now();
    t->gpu_ref = t1 - t0;
    t->gpu_cmp = t2 - t1;
    t->fsplit = fdr.t;
    long long fesc = (long long)fdr.r.escalations;
    orc_gpu_fwd_dev_free(&fdr);
    printf("    gpu  forward split (device path): input copies %.3f s (second thread; waited for %.3f s), waiting for "
           "the device %.3f s, escalation and rest %.3f s, call %.3f s; device compare (blocks in place) %.3f s\n",
           t->fsplit.inputs, t->fsplit.inputs_wait, t->fsplit.wait, t->fsplit.host_finish, t->fsplit.total,
           t->gpu_cmp);
    /* the host path (rows filled on the host) and the host compare: same statistics */
    double t4 = now();
    if (orc_gpu_fwd(&a, &be->precision, &opt, &r, &err) != FA_OK) { fprintf(stderr, "orc_gpu_fwd: %s\n", err.msg); return 1; }
    t->gpu_href = now() - t4;
    {
        orc_stats ho_s, hl_s;
        double t3 = now();
        if (orc_compare_fwd(&r, &ho, &hl, &ho_s, &hl_s, &err) != FA_OK) { fprintf(stderr, "compare: %s\n", err.msg); return 1; }
        t->gpu_hcmp = now() - t3;
        int same = same_stats(&so, &ho_s) && same_stats(&sl, &hl_s) && fesc == (long long)r.escalations;
        printf("    gpu  forward: device path %.3f + %.3f s; host path %.3f s + host compare %.3f s; statistics %s\n",
               t->gpu_ref, t->gpu_cmp, t->gpu_href, t->gpu_hcmp, same ? "equal" : "DIFFER");
        if (!same) { report("host", "O", &ho_s); report("host", "LSE", &hl_s); }
        bad_cmp |= !same;
    }
    printf("    gpu  reference+bounds %.3f s, compare %.3f s, total %.3f s; escalations %lld (reference) %lld (compare)\n",
           t->gpu_ref, t->gpu_cmp, t->gpu_ref + t->gpu_cmp, fesc, (long long)(so.escalations + sl.escalations));
    report("gpu", "O", &so);
    report("gpu", "LSE", &sl);
    int bad = so.failed + sl.failed > 0 || so.checked + sl.checked == 0 || bad_cmp;
    orc_gpu_fwd_free(&r);
    /* backward: the CUDA backend's, on its forward outputs */
    fa_bwd_args ba;
    memset(&ba, 0, sizeof ba);
    ba.p = a.p;
    ba.q = a.q; ba.k = a.k; ba.v = a.v; ba.o = a.o; ba.lse = a.lse;
    uint16_t *hdo = filled(nq, 4), *gq = malloc(nq * 2), *gk = malloc(nk * 2), *gv = malloc(nk * 2);
    void *ddo, *dgq, *dgk, *dgv;
    CU(cudaMalloc(&ddo, nq * 2)); CU(cudaMalloc(&dgq, nq * 2)); CU(cudaMalloc(&dgk, nk * 2)); CU(cudaMalloc(&dgv, nk * 2));
    CU(cudaMemcpy(ddo, hdo, nq * 2, cudaMemcpyHostToDevice));
    contiguous(&ba.dout, ddo, S, Hq, D);
    contiguous(&ba.dq, dgq, S, Hq, D); contiguous(&ba.dk, dgk, S, Hkv, D); contiguous(&ba.dv, dgv, S, Hkv, D);
    int have_bwd = be->backward != NULL;
    if (have_bwd && be->backward(&ba, &err) != FA_OK) { fprintf(stderr, "cuda backward: %s\n", err.msg); have_bwd = 0; }
    orc_stats sq_, sk_, sv_;
    memset(&sq_, 0, sizeof sq_); memset(&sk_, 0, sizeof sk_); memset(&sv_, 0, sizeof sv_);
    fa_tensor hgq = ba.dq, hgk = ba.dk, hgv = ba.dv;
    hgq.ptr = gq; hgk.ptr = gk; hgv.ptr = gv;
    t->belems = (double)(nq + 2 * nk);
    if (have_bwd) {
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(gq, dgq, nq * 2, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(gk, dgk, nk * 2, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(gv, dgv, nk * 2, cudaMemcpyDeviceToHost));
        /* the device path: blocks finished and judged on the device, never transferred */
        orc_gpu_bwd_dres dr;
        t0 = now();
        if (orc_gpu_bwd_dev(&ba, &be->precision, &opt, &dr, &err) != FA_OK) { fprintf(stderr, "orc_gpu_bwd_dev: %s\n", err.msg); return 1; }
        t1 = now();
        if (orc_gpu_compare_bwd_dev(&dr, &ba.dq, &ba.dk, &ba.dv, &sq_, &sk_, &sv_, &err) != FA_OK) { fprintf(stderr, "device compare: %s\n", err.msg); return 1; }
        t2 = now();
        t->bgpu_ref = t1 - t0;
        t->bgpu_cmp = t2 - t1;
        t->bsplit = dr.t;
        long long besc = (long long)dr.r.escalations;
        double bor = dr.r.o_input_ratio, blr = dr.r.lse_input_ratio;
        printf("    gpu  backward split: input copies %.3f s (second thread; waited for after queueing %.3f s), "
               "device reference %.3f s, device finishing %.3f s "
               "(event-timed), escalation %.3f s, call %.3f s; device compare %.3f s\n", dr.t.inputs,
               dr.t.inputs_wait, dr.t.dev_ref,
               dr.t.dev_finish, dr.t.escalate, dr.t.total, t->bgpu_cmp);
        orc_gpu_bwd_dev_free(&dr);
        {
            /* the host path (orc_gpu_bwd: the same device finishing, blocks downloaded) judged
             * by the host compare: its statistics must equal the device path's */
            orc_bwd_result br;
            orc_stats h3[3];
            double t3 = now();
            if (orc_gpu_bwd(&ba, &be->precision, &opt, &br, &err) != FA_OK) { fprintf(stderr, "orc_gpu_bwd: %s\n", err.msg); return 1; }
            double t4 = now();
            if (orc_compare_bwd(&br, &hgq, &hgk, &hgv, &h3[0], &h3[1], &h3[2], &err) != FA_OK) { fprintf(stderr, "compare: %s\n", err.msg); return 1; }
            t->bgpu_hcmp = now() - t4;
            t->bgpu_href = t4 - t3;
            /* and the device compare of the host blocks (uploaded): the transfer the device path saves */
            orc_stats u3[3];
            double t5 = now();
            if (orc_gpu_compare_bwd(&br, &ba.dq, &ba.dk, &ba.dv, &u3[0], &u3[1], &u3[2], &err) != FA_OK) { fprintf(stderr, "device compare (uploaded): %s\n", err.msg); return 1; }
            t->bgpu_ucmp = now() - t5;
            int same = same_stats(&sq_, &h3[0]) && same_stats(&sk_, &h3[1]) && same_stats(&sv_, &h3[2]) &&
                       same_stats(&u3[0], &h3[0]) && same_stats(&u3[1], &h3[1]) && same_stats(&u3[2], &h3[2]) &&
                       br.escalations == besc && br.o_input_ratio == bor && br.lse_input_ratio == blr;
            printf("    gpu  backward: device path %.3f + %.3f s; host path (blocks fetched per group) %.3f s, host "
                   "compare %.3f s, device compare of uploaded blocks %.3f s; statistics %s\n", t->bgpu_ref,
                   t->bgpu_cmp, t->bgpu_href, t->bgpu_hcmp, t->bgpu_ucmp, same ? "equal" : "DIFFER");
            if (!same) { report("host", "dQ", &h3[0]); report("host", "dK", &h3[1]); report("host", "dV", &h3[2]); }
            bad_cmp |= !same;
            orc_gpu_bwd_free(&br);
        }
        printf("    gpu  backward reference+bounds %.3f s, compare %.3f s, total %.3f s; escalations %lld (reference) %lld (compare); input ratios O %.3g LSE %.3g\n",
               t->bgpu_ref, t->bgpu_cmp, t->bgpu_ref + t->bgpu_cmp, besc,
               (long long)(sq_.escalations + sk_.escalations + sv_.escalations), bor, blr);
        report("gpu", "dQ", &sq_);
        report("gpu", "dK", &sk_);
        report("gpu", "dV", &sv_);
        bad |= sq_.failed + sk_.failed + sv_.failed > 0 || sq_.checked == 0 || bad_cmp;
    } else {
        printf("    backend has no backward: not measured\n");
    }
    if (cpu) {
        fa_fwd_args h = a;
        h.q.ptr = q; h.k.ptr = k; h.v.ptr = v;
        t0 = now();
        if (orc_fwd(&h, &be->precision, &opt, &r, &err) != FA_OK) { fprintf(stderr, "orc_fwd: %s\n", err.msg); return 1; }
        t1 = now();
        orc_stats co, cl;
        if (orc_compare_fwd(&r, &ho, &hl, &co, &cl, &err) != FA_OK) { fprintf(stderr, "compare: %s\n", err.msg); return 1; }
        t2 = now();
        t->cpu_ref = t1 - t0;
        t->cpu_cmp = t2 - t1;
        printf("    cpu  reference+bounds %.3f s, compare %.3f s, total %.3f s; escalations %lld\n", t->cpu_ref,
               t->cpu_cmp, t->cpu_ref + t->cpu_cmp, (long long)r.escalations);
        report("cpu", "O", &co);
        report("cpu", "LSE", &cl);
        if (co.failed != so.failed || cl.failed != sl.failed || co.checked != so.checked || cl.checked != sl.checked) {
            printf("    VERDICTS DIFFER between the tiers\n");
            bad = 1;
        }
        orc_fwd_free(&r);
        if (have_bwd) {
            fa_bwd_args hb = ba;
            hb.q.ptr = q; hb.k.ptr = k; hb.v.ptr = v; hb.o.ptr = o; hb.lse.ptr = lse; hb.dout.ptr = hdo;
            orc_bwd_result br;
            orc_stats cq_, ck_, cv_;
            t0 = now();
            if (orc_bwd(&hb, &be->precision, &opt, &br, &err) != FA_OK) { fprintf(stderr, "orc_bwd: %s\n", err.msg); return 1; }
            t1 = now();
            if (orc_compare_bwd(&br, &hgq, &hgk, &hgv, &cq_, &ck_, &cv_, &err) != FA_OK) { fprintf(stderr, "compare: %s\n", err.msg); return 1; }
            t2 = now();
            t->bcpu_ref = t1 - t0;
            t->bcpu_cmp = t2 - t1;
            printf("    cpu  backward reference+bounds %.3f s, compare %.3f s, total %.3f s; escalations %lld\n",
                   t->bcpu_ref, t->bcpu_cmp, t->bcpu_ref + t->bcpu_cmp, (long long)br.escalations);
            report("cpu", "dQ", &cq_);
            report("cpu", "dK", &ck_);
            report("cpu", "dV", &cv_);
            if (cq_.failed != sq_.failed || ck_.failed != sk_.failed || cv_.failed != sv_.failed ||
                cq_.checked != sq_.checked || ck_.checked != sk_.checked || cv_.checked != sv_.checked) {
                printf("    BACKWARD VERDICTS DIFFER between the tiers\n");
                bad = 1;
            }
            orc_bwd_free(&br);
        }
    }
    cudaFree(ddo); cudaFree(dgq); cudaFree(dgk); cudaFree(dgv);
    free(hdo); free(gq); free(gk); free(gv);
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dO); cudaFree(dl);
    free(q); free(k); free(v); free(o); free(lse);
    return bad;
}

int main(int argc, char **argv) {
    int64_t B = 4, Hq = 16, Hkv = 16, S = 8192, D = 128, Bc = 1, Hqc = 16, Sc = 2048;
    int causal = 1;
    if (argc == 10) {
        B = atoll(argv[1]); Hq = atoll(argv[2]); Hkv = atoll(argv[3]); S = atoll(argv[4]); D = atoll(argv[5]);
        causal = atoi(argv[6]); Bc = atoll(argv[7]); Hqc = atoll(argv[8]); Sc = atoll(argv[9]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: bench_gpu_oracle [B Hq Hkv S D causal Bc Hqc Sc]\n");
        return 2;
    }
    const fa_backend *be;
    fa_error err;
    if (fa_backend_by_name("cuda", &be, &err) != FA_OK) { fprintf(stderr, "no cuda backend: %s\n", err.msg); return 2; }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("bench_gpu_oracle: %s, %d host threads, backend '%s', forward, every element of O and LSE\n", prop.name,
           threads, be->name);
    timing w, small, big;
    printf("warm-up:\n");
    int bad = run_size(1, 2, 1, 256, D, causal, 0, be, &w);
    printf("small size (both tiers):\n");
    bad |= run_size(Bc, Hqc, Hkv < Hqc ? (Hkv * Hqc / Hq > 0 ? Hkv * Hqc / Hq : 1) : Hqc, Sc, D, causal, 1, be, &small);
    printf("large size (GPU tier):\n");
    bad |= run_size(B, Hq, Hkv, S, D, causal, 0, be, &big);
    double f = big.pairs / small.pairs, fe = big.elems / small.elems;
    printf("\n| size | tier | reference+bounds s | compare s | full verification s |\n|---|---|---|---|---|\n");
    printf("| B=%lld Hq=%lld S=%lld | cpu | %.3f | %.3f | %.3f |\n", (long long)Bc, (long long)Hqc, (long long)Sc,
           small.cpu_ref, small.cpu_cmp, small.cpu_ref + small.cpu_cmp);
    printf("| B=%lld Hq=%lld S=%lld | gpu | %.3f | %.3f | %.3f |\n", (long long)Bc, (long long)Hqc, (long long)Sc,
           small.gpu_ref, small.gpu_cmp, small.gpu_ref + small.gpu_cmp);
    printf("| B=%lld Hq=%lld S=%lld | gpu | %.3f | %.3f | %.3f |\n", (long long)B, (long long)Hq, (long long)S,
           big.gpu_ref, big.gpu_cmp, big.gpu_ref + big.gpu_cmp);
    printf("| B=%lld Hq=%lld S=%lld | cpu (EXTRAPOLATED: reference x%.0f pairs, compare x%.0f elements) | %.1f | %.1f | %.1f |\n",
           (long long)B, (long long)Hq, (long long)S, f, fe, small.cpu_ref * f, small.cpu_cmp * fe,
           small.cpu_ref * f + small.cpu_cmp * fe);
    printf("\nbackward (dQ, dK, dV):\n| size | tier | reference+bounds s | compare s | full verification s |\n|---|---|---|---|---|\n");
    double fb = big.belems / small.belems;
    printf("| B=%lld Hq=%lld S=%lld | cpu | %.3f | %.3f | %.3f |\n", (long long)Bc, (long long)Hqc, (long long)Sc,
           small.bcpu_ref, small.bcpu_cmp, small.bcpu_ref + small.bcpu_cmp);
    printf("| B=%lld Hq=%lld S=%lld | gpu | %.3f | %.3f | %.3f |\n", (long long)Bc, (long long)Hqc, (long long)Sc,
           small.bgpu_ref, small.bgpu_cmp, small.bgpu_ref + small.bgpu_cmp);
    printf("| B=%lld Hq=%lld S=%lld | gpu | %.3f | %.3f | %.3f |\n", (long long)B, (long long)Hq, (long long)S,
           big.bgpu_ref, big.bgpu_cmp, big.bgpu_ref + big.bgpu_cmp);
    printf("| B=%lld Hq=%lld S=%lld | cpu (EXTRAPOLATED: reference x%.0f pairs, compare x%.0f elements) | %.1f | %.1f | %.1f |\n",
           (long long)B, (long long)Hq, (long long)S, f, fb, small.bcpu_ref * f, small.bcpu_cmp * fb,
           small.bcpu_ref * f + small.bcpu_cmp * fb);
    printf("\ngpu tier compare on the device (orc_gpu_compare_*; the tables' compare column) beside the host compare "
           "(orc_compare_*) of the same results, large size: forward %.3f s vs %.3f s, backward %.3f s vs %.3f s "
           "(host paths' references: forward %.3f s, backward %.3f s)\n",
           big.gpu_cmp, big.gpu_hcmp, big.bgpu_cmp, big.bgpu_hcmp, big.gpu_href, big.bgpu_href);
    printf("\nforward split, large size (device path): input copies %.3f s (second thread; waited for %.3f s), "
           "waiting for the device %.3f s, escalation and rest %.3f s, call %.3f s, device compare (blocks in place) "
           "%.3f s\n", big.fsplit.inputs, big.fsplit.inputs_wait, big.fsplit.wait, big.fsplit.host_finish,
           big.fsplit.total, big.gpu_cmp);
    printf("\nbackward split, large size (device path): input copies %.3f s (second thread; waited for after "
           "queueing %.3f s), device "
           "reference %.3f s, device finishing %.3f s, escalation %.3f s, call %.3f s, device compare %.3f s (blocks "
           "in place; uploaded from the host path's blocks: %.3f s)\n", big.bsplit.inputs, big.bsplit.inputs_wait,
           big.bsplit.dev_ref, big.bsplit.dev_finish, big.bsplit.escalate, big.bsplit.total, big.bgpu_cmp,
           big.bgpu_ucmp);
    {
        const double *pt = big.bsplit.dev_part;
        double sum = 0;
        for (int k = 0; k < ORC_GPU_NPART; k++) sum += pt[k];
        printf("\nbackward device reference by kernel group, large size (event-timed per chunk): forward row (S, A "
               "dots, row weights, O's sums) %.3f s, dP dots %.3f s, k_brow %.3f s, dQ sums %.3f s, dK column sums "
               "(with the column statistics) %.3f s, dV column sums %.3f s, rest (group / head / column kernels) "
               "%.3f s\n", pt[ORC_GPU_P_FWDROW], pt[ORC_GPU_P_DP], pt[ORC_GPU_P_BROW], pt[ORC_GPU_P_DQ],
               pt[ORC_GPU_P_DK], pt[ORC_GPU_P_DV], big.bsplit.dev_ref - sum);
    }
    printf("\nforward + backward, full verification, B=%lld Hq=%lld S=%lld: GPU tier %.3f s (target 5 s)\n",
           (long long)B, (long long)Hq, (long long)S, big.gpu_ref + big.gpu_cmp + big.bgpu_ref + big.bgpu_cmp);
    printf("%s\n", bad ? "RESULT: some verdicts failed or differ" : "RESULT: every element checked, 0 failed, verdicts equal");
    return bad;
}
