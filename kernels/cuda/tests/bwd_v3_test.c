/* bwd_v3_test.c: the CUDA backward's contract-v3 varlen features (cu_seqlens_q/k, seqused_k,
 * per-sequence causal / window alignment, GQA, sequences of length 0 and 1) on the GPU.
 *
 * Each case: random Q, K, V, dO of a packed (or dense + seqused_k) batch; O and LSE from the
 * CUDA forward of the same varlen call; then the varlen backward, and checks:
 *   1. packing property (no tolerance): for every sequence b, the dense backward of that
 *      sequence alone (B = 1, seqlen_q = Sq_b, seqlen_k = Sk_b, its rows copied into fresh
 *      buffers, the same O and LSE) gives the same bits as the varlen call's rows of b: dQ, dK,
 *      dV in the deterministic mode; dK, dV in the default mode (dQ's fp32 atomics add in a
 *      varying order there; dQ is then held to check 3 only). Outputs are poisoned with
 *      different NaN patterns before the two runs, so an unwritten element cannot match.
 *   2. keys allocated but not used (seqused_k[b] <= j < allocated): dK = dV = +0 exactly.
 *   3. a float64 reference per sequence (P = exp(scale q.k + mask - lse) with the forward's LSE,
 *      D_i = dO_i . O_i with the forward's O, dS = P (dP - D), dQ = scale dS K, dK = scale dS^T Q,
 *      dV = P^T dO on the dtype values): normwise per output and sequence
 *      ||x - ref|| <= 4 u ||A|| + 2^-100 (u: the dtype's unit roundoff; A: the output with every
 *      term in absolute value; derivation under 4.). This bound is this test's, stated here.
 *   4. softcap (s = cap tanh(scale q.k / cap) + mask; dS = P (dP - D) (1 - tanh^2)): the float64
 *      reference of 3. with the cap, and per output and sequence the normwise bound
 *      ||x - ref|| <= 4 u ||A|| + 2^-19 ||C|| + 2^-100, where A is the output computed with every
 *      term in absolute value (|dS_j| |K_j|, |dS_j| |Q_i|, P_j |dO_i|) and C the dQ / dK sums
 *      with |dS_j| replaced by P_j |dP_j - D_i| (C = 0 for dV). Derivation (first order, each
 *      term): P's rounding to the dtype (u), dS's (u), the output's (u), the fp32 sums
 *      (<= (Sk + D) 2^-23 < u/8 here) and P's score error (cap 2^-21 < u/8): 4 u |term|; the
 *      cap's derivative fl(1 - fl(t t)) with t = tanhf(fl(q.k fl(scale/cap))) has an absolute
 *      error <= 2 (2^-22 + 2^-25) + 2^-24 + 2^-24 < 2^-20.5 (tanhf 2 ulp at |t| <= 1, the argument's
 *      two roundings times x (1 - tanh^2 x) <= 0.45, the two fp32 roundings), times P |dP - D|:
 *      2^-19 leaves a factor 2.8 for second-order terms. Scores are made to saturate (|q| up
 *      to 4, cap 1.5 and 5) so that 1 - t^2 spans (0, 1].
 * Variants: fp16 / bf16, D 64 / 128 / 96, Dqk/Dv 192/128, 136/72, 128/64, 64/128, GQA (Hkv 2 of Hq 4) and MHA, masks none, causal
 * bottom-right / top-left, window (17, 5) bottom-right, causal + window left 40, an additive
 * mask (dense Q/K with seqused_k only: the contract forbids a mask with cu_seqlens), layouts
 * varlen q+k, varlen q+k + seqused_k, dense + seqused_k; every policy family (default: sm_90
 * wgmma where eligible; sm_80 forced). The one-grid group (Hopper path: one launch per kernel for
 * the whole batch, bwd_seq_view) adds GQA 8/2 and MHA at D 64 / 128, both modes, every mask kind
 * and layout, lengths whose sequences end in the middle of the longest one's tiles (Sq_b > Sk_b
 * and Sq_b < Sk_b, 0 and 1 inside the batch): a sequence read at another's offset, or a tile past
 * its end not skipped, changes its bits (check 1) or writes a neighbour's rows (checks 1-3).
 *
 * usage: bwd_v3_test [--backend LIB.so]: with a backend library (a GPU mutant, mutants.bzl), the
 * varlen call under test goes through its exported table (default policy; the sm_80-forced and
 * policy-free cases are skipped) while the per-sequence dense reference of check 1 and the forward
 * stay this binary's own (the shipped backend). Exit 0: all passed; 1: a check failed; 2: harness. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/testing.h"
#include "kernels/flash_api.h"

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "bwd_v3_test: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,              \
                    cudaGetErrorString(e_));                                                      \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

#define NB 5

static double h2d(uint16_t h, int bf16) {
    if (bf16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (h >> 10) & 31, m = h & 1023, s = h >> 15;
    double v = e == 0 ? ldexp(m, -24) : (e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25));
    return s ? -v : v;
}
/* inputs here are multiples of 2^-8 in [-1, 1): exact in fp16 and bf16 */
static uint16_t d2h_exact(double x, int bf16) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (bf16) return (uint16_t)(u >> 16);
    if (x == 0) return 0;
    const uint16_t sign = x < 0 ? 0x8000 : 0;
    int e;
    const double m = frexp(fabs(x), &e); /* |x| = m 2^e, m in [0.5, 1) */
    return (uint16_t)(sign | ((e - 1 + 15) << 10) | (int)((m * 2 - 1) * 1024));
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}
static double rval(void) { return floor((2 * urand() - 1) * 256) / 256; }

static long n_cases = 0, n_failed = 0;

/* --backend: the loaded table whose backward runs the varlen call under test (NULL: our own) */
static const fa_backend *under_test = NULL;

typedef struct {
    int Hq, Hkv, D, bf16, det;
    int Dv; /* head dim of V, O, dO, dV (0: D, the head dim of Q, K) */
    fa_causal causal;
    int64_t wl, wr;
    fa_align align;
    int sq[NB], ska[NB], used[NB]; /* Sq_b, allocated keys, Sk_b */
    int layout;                    /* 0 varlen q+k, 1 varlen q+k + seqused_k, 2 dense + seqused_k (+ mask) */
    int mask;                      /* additive mask (layout 2 only) */
    float cap;                     /* softcap, 0: none */
    const fa_cuda_policy *pol;
    const char *pname;
} bcase;

static void failf(const bcase *c, const char *fmt, int b, const char *what, double x) {
    ++n_failed;
    if (n_failed > 40) return;
    fprintf(stderr, "FAIL [lay%d Hq%d Hkv%d D%d/%d %s %s causal%d wl%lld wr%lld mask%d cap%g %s] seq %d: ", c->layout,
            c->Hq, c->Hkv, c->D, c->Dv ? c->Dv : c->D, c->bf16 ? "bf16" : "fp16", c->det ? "det" : "default", (int)c->causal, (long long)c->wl,
            (long long)c->wr, c->mask, (double)c->cap, c->pname, b);
    fprintf(stderr, fmt, what, x);
    fprintf(stderr, "\n");
}

static void *dalloc(size_t n) {
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 16));
    return p;
}

/* visibility of key j for query i of a sequence (Sq, Sk), the contract's rule */
static int visible(const bcase *c, int64_t sq, int64_t sk, int64_t i, int64_t j) {
    const int br = c->causal != FA_CAUSAL_NONE ? c->causal == FA_CAUSAL_BOTTOM_RIGHT : c->align == FA_ALIGN_BOTTOM_RIGHT;
    const int64_t diag = i + (br ? sk - sq : 0);
    if (c->causal != FA_CAUSAL_NONE && j > diag) return 0;
    if (c->causal == FA_CAUSAL_NONE && c->wr >= 0 && j > diag + c->wr) return 0;
    if (c->wl >= 0 && j < diag - c->wl) return 0;
    return 1;
}

static void run_case(const bcase *c) {
    if (under_test && memcmp(c->pol, &fa_cuda_policy_default, sizeof *c->pol))
        return; /* a loaded backend runs its default policy only */
    const int Hq = c->Hq, Hkv = c->Hkv, D = c->D, Dv = c->Dv ? c->Dv : c->D, bf = c->bf16, g = Hq / Hkv;
    const int vq = c->layout <= 1, vk = c->layout <= 1, useu = c->layout >= 1;
    int32_t cuq[NB + 1], cuk[NB + 1], used[NB];
    int sqmax = 0, skmax = 0;
    cuq[0] = cuk[0] = 0;
    for (int b = 0; b < NB; ++b) {
        cuq[b + 1] = cuq[b] + c->sq[b];
        cuk[b + 1] = cuk[b] + c->ska[b];
        used[b] = useu ? c->used[b] : c->ska[b];
        sqmax = c->sq[b] > sqmax ? c->sq[b] : sqmax;
        skmax = c->ska[b] > skmax ? c->ska[b] : skmax;
    }
    /* per sequence: query rows sq_b, allocated key rows ska_b (dense layout: sqmax / skmax each) */
    int sqb[NB], skab[NB];
    int64_t qrow[NB], krow[NB];
    for (int b = 0; b < NB; ++b) {
        sqb[b] = vq ? c->sq[b] : sqmax;
        skab[b] = vk ? c->ska[b] : skmax;
        qrow[b] = vq ? cuq[b] : (int64_t)b * sqmax;
        krow[b] = vk ? cuk[b] : (int64_t)b * skmax;
        if (useu && used[b] > skab[b]) used[b] = skab[b];
    }
    const int64_t tq = vq ? cuq[NB] : (int64_t)NB * sqmax, tk = vk ? cuk[NB] : (int64_t)NB * skmax;
    /* Q, dQ: D wide; O, dO: Dv; K, dK: D; V, dV: Dv */
    const size_t qn = (size_t)tq * Hq * D, kn = (size_t)tk * Hkv * D, on = (size_t)tq * Hq * Dv, vn = (size_t)tk * Hkv * Dv;
    uint16_t *hq = malloc(qn * 2 + 2), *hk = malloc(kn * 2 + 2), *hv = malloc(vn * 2 + 2), *hdo = malloc(on * 2 + 2);
    uint16_t *ho = malloc(on * 2 + 2), *hdq = malloc(qn * 2 + 2), *hdk = malloc(kn * 2 + 2), *hdv = malloc(vn * 2 + 2);
    float *hl = malloc(sizeof(float) * (size_t)(tq * Hq + 1));
    const double amp = c->cap > 0 ? 4.0 : 1.0; /* q in [-4, 4) with a cap: saturated scores */
    for (size_t x = 0; x < (qn > on ? qn : on); ++x) {
        const double xq = amp * rval(), xo = rval();
        if (x < qn) hq[x] = d2h_exact(xq, bf);
        if (x < on) hdo[x] = d2h_exact(xo, bf);
    }
    for (size_t x = 0; x < (kn > vn ? kn : vn); ++x) {
        const double xk = rval(), xv = rval();
        if (x < kn) hk[x] = d2h_exact(xk, bf);
        if (x < vn) hv[x] = d2h_exact(xv, bf);
    }
    /* additive mask [B, Hq, sqmax, skmax]: finite values, 20% -inf */
    const size_t mn = c->mask ? (size_t)NB * Hq * sqmax * skmax : 0;
    float *hm = malloc(sizeof(float) * (mn + 1));
    for (size_t x = 0; x < mn; ++x) hm[x] = urand() < 0.2 ? -INFINITY : (float)(2 * urand() - 1);
    uint16_t *q = dalloc(qn * 2), *k = dalloc(kn * 2), *v = dalloc(vn * 2), *dout = dalloc(on * 2), *o = dalloc(on * 2);
    uint16_t *dq = dalloc(qn * 2), *dk = dalloc(kn * 2), *dv = dalloc(vn * 2);
    float *l = dalloc(sizeof(float) * (size_t)tq * Hq), *m = dalloc(sizeof(float) * mn);
    CK(cudaMemcpy(q, hq, qn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(k, hk, kn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, hv, vn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dout, hdo, on * 2, cudaMemcpyHostToDevice));
    if (mn) CK(cudaMemcpy(m, hm, sizeof(float) * mn, cudaMemcpyHostToDevice));
    CK(cudaMemset(dq, 0xFF, qn * 2));
    CK(cudaMemset(dk, 0xFF, kn * 2));
    CK(cudaMemset(dv, 0xFF, vn * 2));

    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p.batch = NB; a.p.seqlen_q = sqmax; a.p.seqlen_k = skmax; a.p.heads_q = Hq; a.p.heads_kv = Hkv;
    a.p.head_dim_qk = D; a.p.head_dim_v = Dv; a.p.dtype = bf ? FA_BF16 : FA_F16;
    a.p.causal = c->causal; a.p.window_left = c->wl; a.p.window_right = c->wr; a.p.window_align = c->align;
    a.p.softcap = c->cap;
    const int64_t qs0 = vq ? 0 : (int64_t)sqmax * Hq * D, ks0 = vk ? 0 : (int64_t)skmax * Hkv * D;
    const int64_t os0 = vq ? 0 : (int64_t)sqmax * Hq * Dv, vs0 = vk ? 0 : (int64_t)skmax * Hkv * Dv;
    a.q = (fa_tensor){q, {qs0, (int64_t)Hq * D, D, 1}};
    a.o = (fa_tensor){o, {os0, (int64_t)Hq * Dv, Dv, 1}};
    a.k = (fa_tensor){k, {ks0, (int64_t)Hkv * D, D, 1}};
    a.v = (fa_tensor){v, {vs0, (int64_t)Hkv * Dv, Dv, 1}};
    a.lse = vq ? (fa_lse){l, {0, tq, 1}} : (fa_lse){l, {(int64_t)Hq * sqmax, sqmax, 1}};
    if (mn) a.mask = (fa_mask){m, {(int64_t)Hq * sqmax * skmax, (int64_t)sqmax * skmax, skmax, 1}};
    a.varlen.cu_seqlens_q = vq ? cuq : NULL;
    a.varlen.cu_seqlens_k = vk ? cuk : NULL;
    a.varlen.seqused_k = useu ? used : NULL;
    fa_error err;
    if (fa_cuda_forward(&a, &err) != FA_OK) {
        failf(c, "%s: %g", -1, err.msg, 0);
        goto out;
    }
    fa_bwd_args ba;
    memset(&ba, 0, sizeof(ba));
    ba.p = a.p;
    ba.q = a.q; ba.k = a.k; ba.v = a.v; ba.o = a.o; ba.lse = a.lse; ba.mask = a.mask; ba.varlen = a.varlen;
    ba.dout = (fa_tensor){dout, {os0, (int64_t)Hq * Dv, Dv, 1}};
    ba.dq = (fa_tensor){dq, {qs0, (int64_t)Hq * D, D, 1}};
    ba.dk = (fa_tensor){dk, {ks0, (int64_t)Hkv * D, D, 1}};
    ba.dv = (fa_tensor){dv, {vs0, (int64_t)Hkv * Dv, Dv, 1}};
    ba.deterministic = c->det;
    if ((under_test ? under_test->backward(&ba, &err) : fa_cuda_backward_policy(&ba, c->pol, &err)) != FA_OK) {
        failf(c, "backward: %s %g", -1, err.msg, 0);
        goto out;
    }
    CK(cudaMemcpy(ho, o, on * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl, l, sizeof(float) * (size_t)tq * Hq, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdq, dq, qn * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdk, dk, kn * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdv, dv, vn * 2, cudaMemcpyDeviceToHost));
    const double u = bf ? 0x1p-8 : 0x1p-11, scale = 1.0 / sqrt((double)D);
    /* the reference reads float64 copies of the dtype values (converted once) */
    double *Fq = malloc(sizeof(double) * (qn + 1)), *Fdo = malloc(sizeof(double) * (on + 1)),
           *Fo = malloc(sizeof(double) * (on + 1)), *Fk = malloc(sizeof(double) * (kn + 1)),
           *Fv = malloc(sizeof(double) * (vn + 1));
    for (size_t x = 0; x < qn; ++x) Fq[x] = h2d(hq[x], bf);
    for (size_t x = 0; x < on; ++x) Fdo[x] = h2d(hdo[x], bf), Fo[x] = h2d(ho[x], bf);
    for (size_t x = 0; x < kn; ++x) Fk[x] = h2d(hk[x], bf);
    for (size_t x = 0; x < vn; ++x) Fv[x] = h2d(hv[x], bf);
#define E(p, i) h2d((p)[i], bf)
    for (int b = 0; b < NB; ++b) {
        const int64_t sq = sqb[b], sk = used[b], ska = skab[b];
        const size_t bq = (size_t)sq * Hq * D, bk = (size_t)ska * Hkv * D;
        const size_t bo = (size_t)sq * Hq * Dv, bv = (size_t)ska * Hkv * Dv;
        const size_t q0 = (size_t)qrow[b] * Hq * D, k0 = (size_t)krow[b] * Hkv * D;
        const size_t o0 = (size_t)qrow[b] * Hq * Dv, v0 = (size_t)krow[b] * Hkv * Dv;
        /* 2. unused keys */
        for (size_t x = (size_t)sk * Hkv * D; x < bk; ++x)
            if (hdk[k0 + x] != 0) {
                failf(c, "%s unused key element %g not +0", b, "dK", (double)x);
                break;
            }
        for (size_t x = (size_t)sk * Hkv * Dv; x < bv; ++x)
            if (hdv[v0 + x] != 0) {
                failf(c, "%s unused key element %g not +0", b, "dV", (double)x);
                break;
            }
        /* 1. the sequence alone, dense */
        if (sq > 0 || sk > 0) {
            uint16_t *sdq = dalloc(bq * 2), *sdk = dalloc(bk * 2), *sdv = dalloc(bv * 2);
            float *sl = dalloc(sizeof(float) * (size_t)sq * Hq + 4);
            uint16_t *gdq = malloc(bq * 2 + 2), *gdk = malloc(bk * 2 + 2), *gdv = malloc(bv * 2 + 2);
            float *slh = malloc(sizeof(float) * ((size_t)sq * Hq + 1));
            for (int h = 0; h < Hq; ++h)
                for (int64_t i = 0; i < sq; ++i)
                    slh[h * sq + i] = hl[vq ? (size_t)(h * tq + qrow[b] + i) : ((size_t)b * Hq + h) * sqmax + i];
            CK(cudaMemcpy(sl, slh, sizeof(float) * (size_t)sq * Hq, cudaMemcpyHostToDevice));
            CK(cudaMemset(sdq, 0x7F, bq * 2));
            CK(cudaMemset(sdk, 0x7F, bk * 2));
            CK(cudaMemset(sdv, 0x7F, bv * 2));
            fa_bwd_args sa;
            memset(&sa, 0, sizeof(sa));
            sa.p = a.p;
            sa.p.batch = 1; sa.p.seqlen_q = sq; sa.p.seqlen_k = sk;
            sa.q = (fa_tensor){q + q0, {0, (int64_t)Hq * D, D, 1}};
            sa.o = (fa_tensor){o + o0, {0, (int64_t)Hq * Dv, Dv, 1}};
            sa.dout = (fa_tensor){dout + o0, {0, (int64_t)Hq * Dv, Dv, 1}};
            sa.k = (fa_tensor){k + k0, {0, (int64_t)Hkv * D, D, 1}};
            sa.v = (fa_tensor){v + v0, {0, (int64_t)Hkv * Dv, Dv, 1}};
            sa.lse = (fa_lse){sl, {0, sq, 1}};
            if (mn) sa.mask = (fa_mask){m + (size_t)b * Hq * sqmax * skmax, {0, (int64_t)sqmax * skmax, skmax, 1}};
            sa.dq = (fa_tensor){sdq, {0, (int64_t)Hq * D, D, 1}};
            sa.dk = (fa_tensor){sdk, {0, (int64_t)Hkv * D, D, 1}};
            sa.dv = (fa_tensor){sdv, {0, (int64_t)Hkv * Dv, Dv, 1}};
            sa.deterministic = c->det;
            if (fa_cuda_backward_policy(&sa, c->pol, &err) != FA_OK) {
                failf(c, "dense alone: %s %g", b, err.msg, 0);
            } else {
                CK(cudaMemcpy(gdq, sdq, bq * 2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(gdk, sdk, bk * 2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(gdv, sdv, bv * 2, cudaMemcpyDeviceToHost));
                const size_t bku = (size_t)sk * Hkv * D, bvu = (size_t)sk * Hkv * Dv;
                if (c->det && memcmp(gdq, hdq + q0, bq * 2)) failf(c, "%s differs from the sequence alone %g", b, "dQ", 0);
                if (memcmp(gdk, hdk + k0, bku * 2)) failf(c, "%s differs from the sequence alone %g", b, "dK", 0);
                if (memcmp(gdv, hdv + v0, bvu * 2)) failf(c, "%s differs from the sequence alone %g", b, "dV", 0);
            }
            cudaFree(sdq); cudaFree(sdk); cudaFree(sdv); cudaFree(sl);
            free(gdq); free(gdk); free(gdv); free(slh);
        }
        /* 3. float64 reference of sequence b */
        double *rq = calloc(bq + 1, sizeof(double)), *rk = calloc(bk + 1, sizeof(double)), *rv = calloc(bv + 1, sizeof(double));
        double *aq = calloc(bq + 1, sizeof(double)), *ak = calloc(bk + 1, sizeof(double)), *av = calloc(bv + 1, sizeof(double));
        double *cq = calloc(bq + 1, sizeof(double)), *ck = calloc(bk + 1, sizeof(double));
        double *P = malloc(sizeof(double) * (sk + 1)), *dP = malloc(sizeof(double) * (sk + 1));
        double *CF = malloc(sizeof(double) * (sk + 1));
        for (int h = 0; h < Hq; ++h) {
            const int hkv = h / g;
            for (int64_t i = 0; i < sq; ++i) {
                const size_t qo = q0 + ((size_t)i * Hq + h) * D, oo = o0 + ((size_t)i * Hq + h) * Dv;
                const double lse = hl[vq ? (size_t)(h * tq + qrow[b] + i) : ((size_t)b * Hq + h) * sqmax + i];
                double Dd = 0;
                for (int e = 0; e < Dv; ++e) Dd += Fdo[oo + e] * Fo[oo + e];
                for (int64_t j = 0; j < sk; ++j) {
                    P[j] = 0, dP[j] = 0;
                    double mv = 0;
                    if (!visible(c, sq, sk, i, j)) continue;
                    if (mn) {
                        mv = hm[(((size_t)b * Hq + h) * sqmax + i) * skmax + j];
                        if (mv == -INFINITY) continue;
                    }
                    const size_t ko = k0 + ((size_t)j * Hkv + hkv) * D, vo = v0 + ((size_t)j * Hkv + hkv) * Dv;
                    double s = 0, dp = 0;
                    for (int e = 0; e < D; ++e) s += Fq[qo + e] * Fk[ko + e];
                    for (int e = 0; e < Dv; ++e) dp += Fdo[oo + e] * Fv[vo + e];
                    CF[j] = 1;
                    if (c->cap > 0) {
                        const double th = tanh(scale * s / c->cap);
                        P[j] = exp(c->cap * th + mv - lse);
                        CF[j] = 1 - th * th;
                    } else {
                        P[j] = exp(scale * s + mv - lse);
                    }
                    dP[j] = dp;
                }
                for (int64_t j = 0; j < sk; ++j) {
                    if (P[j] == 0) continue;
                    const size_t ko = k0 + ((size_t)j * Hkv + hkv) * D, vo = v0 + ((size_t)j * Hkv + hkv) * Dv;
                    const double dS = P[j] * (dP[j] - Dd) * CF[j], dC = P[j] * fabs(dP[j] - Dd);
                    for (int e = 0; e < D; ++e) {
                        rq[qo - q0 + e] += scale * dS * Fk[ko + e];
                        rk[ko - k0 + e] += scale * dS * Fq[qo + e];
                        aq[qo - q0 + e] += scale * fabs(dS * Fk[ko + e]);
                        ak[ko - k0 + e] += scale * fabs(dS * Fq[qo + e]);
                        cq[qo - q0 + e] += scale * dC * fabs(Fk[ko + e]);
                        ck[ko - k0 + e] += scale * dC * fabs(Fq[qo + e]);
                    }
                    for (int e = 0; e < Dv; ++e) {
                        rv[vo - v0 + e] += P[j] * Fdo[oo + e];
                        av[vo - v0 + e] += P[j] * fabs(Fdo[oo + e]);
                    }
                }
            }
        }
        const double *refs[3] = {rq, rk, rv}, *abss[3] = {aq, ak, av}, *caps[3] = {cq, ck, NULL};
        const uint16_t *got[3] = {hdq + q0, hdk + k0, hdv + v0};
        const size_t ns[3] = {bq, (size_t)sk * Hkv * D, (size_t)sk * Hkv * Dv};
        static const char *nm[3] = {"dQ", "dK", "dV"};
        for (int t = 0; t < 3; ++t) {
            double en = 0, an = 0, cn = 0;
            for (size_t x = 0; x < ns[t]; ++x) {
                const double dd = E(got[t], x) - refs[t][x];
                en += dd * dd;
                an += abss[t][x] * abss[t][x];
                if (caps[t]) cn += caps[t][x] * caps[t][x];
            }
            const double bound = 4 * u * sqrt(an) + (c->cap > 0 ? 0x1p-19 * sqrt(cn) : 0) + 0x1p-100;
            if (!(sqrt(en) <= bound))
                failf(c, "%s: normwise error vs float64 / bound = %.3g > 1", b, nm[t], sqrt(en) / bound);
        }
        free(rq); free(rk); free(rv); free(aq); free(ak); free(av); free(cq); free(ck); free(P); free(dP); free(CF);
    }
#undef E
    free(Fq); free(Fdo); free(Fo); free(Fk); free(Fv);
out:
    ++n_cases;
    free(hq); free(hk); free(hv); free(hdo); free(ho); free(hdq); free(hdk); free(hdv); free(hl); free(hm);
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(dout); cudaFree(o); cudaFree(dq); cudaFree(dk); cudaFree(dv);
    cudaFree(l); cudaFree(m);
}

/* paged K/V is not in the CUDA backward: FA_ERR_UNSUPPORTED naming "page_size". */
static void unsupported_case(void) {
    const int D = 64, S = 8;
    uint16_t *buf = dalloc((size_t)S * D * 2 * 9);
    float *l = dalloc(sizeof(float) * S);
    CK(cudaMemset(buf, 0, (size_t)S * D * 2 * 9));
    fa_bwd_args ba;
    memset(&ba, 0, sizeof(ba));
    ba.p.batch = 1; ba.p.seqlen_q = ba.p.seqlen_k = S; ba.p.heads_q = ba.p.heads_kv = 1;
    ba.p.head_dim_qk = ba.p.head_dim_v = D; ba.p.dtype = FA_F16;
    ba.p.window_left = ba.p.window_right = -1;
    fa_tensor t[8];
    for (int x = 0; x < 8; ++x) t[x] = (fa_tensor){buf + (size_t)x * S * D, {(int64_t)S * D, D, D, 1}};
    ba.q = t[0]; ba.k = t[1]; ba.v = t[2]; ba.o = t[3]; ba.dout = t[4]; ba.dq = t[5]; ba.dk = t[6]; ba.dv = t[7];
    ba.lse = (fa_lse){l, {S, S, 1}};
    static const int32_t table[1] = {0};
    ba.p.page_size = S;
    ba.paged.block_table = table;
    ba.paged.table_stride = 1, ba.paged.max_pages_per_seq = 1, ba.paged.num_pages = 1;
    fa_error err;
    fa_status s = fa_cuda_backward(&ba, &err);
    ++n_cases;
    if (s != FA_ERR_UNSUPPORTED || strcmp(err.arg, "page_size") != 0) {
        ++n_failed;
        fprintf(stderr, "FAIL paged backward: status %d arg '%s' (want FA_ERR_UNSUPPORTED 'page_size')\n", (int)s, err.arg);
    }
    cudaFree(buf); cudaFree(l);
}

/* Zero-element tensors (regression: a packed sequence of length 0 at the end of the batch run
 * alone handed the backward q = one past the end of the q allocation, and the device-pointer
 * check rejected it). The contract never dereferences a tensor with no element, so its pointer
 * is not checked: here one past the end of a cudaMalloc buffer and a host buffer, both accepted
 * (FA_OK) and untouched; the tensors with elements are written (dK = dV = 0 with no query,
 * dQ = 0 with no key); a host pointer for a tensor WITH elements is still FA_ERR_INVALID naming
 * it; the forward likewise (a packed batch whose sequences are all empty). */
static void zero_elements_case(void) {
    enum { D = 64, S = 17 };
    const size_t big = (size_t)2 << 20; /* bytes: one past the end is a 2 MiB boundary */
    uint16_t *dbuf = dalloc(big), *kin = dalloc((size_t)S * D * 2), *vin = dalloc((size_t)S * D * 2);
    uint16_t *gk = dalloc((size_t)S * D * 2), *gv = dalloc((size_t)S * D * 2), *gq = dalloc((size_t)S * D * 2);
    float *dl = dalloc(sizeof(float) * S);
    uint16_t *host = malloc(big), *hostc = malloc(big), *hk = malloc((size_t)S * D * 2);
    memset(host, 0x5A, big);
    memcpy(hostc, host, big);
    for (int x = 0; x < S * D; ++x) hk[x] = d2h_exact(rval(), 0);
    CK(cudaMemcpy(kin, hk, (size_t)S * D * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(vin, hk, (size_t)S * D * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gq, hk, (size_t)S * D * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(dl, 0, sizeof(float) * S));
    void *past = (char *)dbuf + big;
    const fa_tensor dk_t = {gk, {(int64_t)S * D, D, D, 1}}, dv_t = {gv, {(int64_t)S * D, D, D, 1}};
    for (int w = 0; w < 2; ++w) { /* zero-element pointer: 0 one past the end, 1 host memory */
        void *z = w ? (void *)host : past;
        const char *zn = w ? "host buffer" : "one past the end";
        for (int det = 0; det < 2; ++det) {
            /* 1. Sq = 0, Sk = 17: q, o, dout, lse, dq have no element */
            fa_bwd_args ba;
            memset(&ba, 0, sizeof(ba));
            ba.p.batch = 1; ba.p.seqlen_q = 0; ba.p.seqlen_k = S; ba.p.heads_q = ba.p.heads_kv = 1;
            ba.p.head_dim_qk = ba.p.head_dim_v = D; ba.p.dtype = FA_F16;
            ba.p.window_left = ba.p.window_right = -1;
            const fa_tensor zt = {z, {(int64_t)S * D, D, D, 1}};
            ba.q = ba.o = ba.dout = ba.dq = zt;
            ba.lse = (fa_lse){(float *)z, {S, S, 1}};
            ba.k = (fa_tensor){kin, {(int64_t)S * D, D, D, 1}};
            ba.v = (fa_tensor){vin, {(int64_t)S * D, D, D, 1}};
            ba.dk = dk_t; ba.dv = dv_t;
            ba.deterministic = det;
            CK(cudaMemset(gk, 0xFF, (size_t)S * D * 2));
            CK(cudaMemset(gv, 0xFF, (size_t)S * D * 2));
            fa_error err;
            fa_status st = fa_cuda_backward(&ba, &err);
            ++n_cases;
            if (st != FA_OK) {
                ++n_failed;
                fprintf(stderr, "FAIL zero elements (Sq 0, q/o/dout/lse/dq %s, det %d): status %d '%s': %s\n", zn, det,
                        (int)st, err.arg, err.msg);
            } else {
                uint16_t *hgk = malloc((size_t)S * D * 2), *hgv = malloc((size_t)S * D * 2);
                CK(cudaMemcpy(hgk, gk, (size_t)S * D * 2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hgv, gv, (size_t)S * D * 2, cudaMemcpyDeviceToHost));
                for (int x = 0; x < S * D; ++x)
                    if (hgk[x] != 0 || hgv[x] != 0) {
                        ++n_failed;
                        fprintf(stderr, "FAIL zero elements (Sq 0, det %d): dK/dV element %d is not +0\n", det, x);
                        break;
                    }
                free(hgk); free(hgv);
            }
            /* 2. Sq = 17, Sk = 0: k, v, dk, dv have no element; dQ = 0 */
            memset(&ba, 0, sizeof(ba));
            ba.p.batch = 1; ba.p.seqlen_q = S; ba.p.seqlen_k = 0; ba.p.heads_q = ba.p.heads_kv = 1;
            ba.p.head_dim_qk = ba.p.head_dim_v = D; ba.p.dtype = FA_F16;
            ba.p.window_left = ba.p.window_right = -1;
            ba.q = ba.o = ba.dout = (fa_tensor){kin, {(int64_t)S * D, D, D, 1}};
            ba.dq = (fa_tensor){gq, {(int64_t)S * D, D, D, 1}};
            ba.lse = (fa_lse){dl, {S, S, 1}};
            ba.k = ba.v = ba.dk = ba.dv = zt;
            ba.deterministic = det;
            CK(cudaMemset(gq, 0xFF, (size_t)S * D * 2));
            st = fa_cuda_backward(&ba, &err);
            ++n_cases;
            if (st != FA_OK) {
                ++n_failed;
                fprintf(stderr, "FAIL zero elements (Sk 0, k/v/dk/dv %s, det %d): status %d '%s': %s\n", zn, det, (int)st,
                        err.arg, err.msg);
            } else {
                uint16_t *hgq = malloc((size_t)S * D * 2);
                CK(cudaMemcpy(hgq, gq, (size_t)S * D * 2, cudaMemcpyDeviceToHost));
                for (int x = 0; x < S * D; ++x)
                    if (hgq[x] != 0) {
                        ++n_failed;
                        fprintf(stderr, "FAIL zero elements (Sk 0, det %d): dQ element %d is not +0\n", det, x);
                        break;
                    }
                free(hgq);
            }
            /* 3. the same call with Sk = 17: k now has elements, and a host k is rejected naming it */
            if (w == 1) {
                ba.p.seqlen_k = S;
                ba.k = zt;
                ba.v = (fa_tensor){vin, {(int64_t)S * D, D, D, 1}};
                ba.dk = dk_t; ba.dv = dv_t;
                st = fa_cuda_backward(&ba, &err);
                ++n_cases;
                if (st != FA_ERR_INVALID || strcmp(err.arg, "k.ptr") != 0) {
                    ++n_failed;
                    fprintf(stderr, "FAIL host k with 17 keys: status %d '%s' (want FA_ERR_INVALID 'k.ptr')\n", (int)st,
                            err.arg);
                }
            }
        }
        /* 4. forward: a packed batch of two empty sequences (seqlen_q, the maximum, may exceed
         * every Sq_b): q, o, lse have no element */
        static const int32_t cu0[3] = {0, 0, 0};
        fa_fwd_args fa;
        memset(&fa, 0, sizeof(fa));
        fa.p.batch = 2; fa.p.seqlen_q = 4; fa.p.seqlen_k = 8; fa.p.heads_q = fa.p.heads_kv = 1;
        fa.p.head_dim_qk = fa.p.head_dim_v = D; fa.p.dtype = FA_F16;
        fa.p.window_left = fa.p.window_right = -1;
        fa.q = fa.o = (fa_tensor){z, {0, D, D, 1}};
        fa.lse = (fa_lse){(float *)z, {0, 1, 1}};
        fa.k = fa.v = (fa_tensor){kin, {8 * D, D, D, 1}};
        fa.varlen.cu_seqlens_q = cu0;
        fa_error err;
        const fa_status st = fa_cuda_forward(&fa, &err);
        ++n_cases;
        if (st != FA_OK) {
            ++n_failed;
            fprintf(stderr, "FAIL zero elements (forward, empty packed q/o/lse %s): status %d '%s': %s\n", zn, (int)st,
                    err.arg, err.msg);
        }
        /* 5. forward: the same batch with one query row: a host q is rejected naming it */
        if (w == 1) {
            static const int32_t cu1[3] = {0, 1, 1};
            fa.varlen.cu_seqlens_q = cu1;
            fa.o = (fa_tensor){gq, {0, D, D, 1}};
            fa.lse = (fa_lse){dl, {0, 1, 1}};
            const fa_status s2 = fa_cuda_forward(&fa, &err);
            ++n_cases;
            if (s2 != FA_ERR_INVALID || strcmp(err.arg, "q.ptr") != 0) {
                ++n_failed;
                fprintf(stderr, "FAIL forward host q with a row: status %d '%s' (want FA_ERR_INVALID 'q.ptr')\n", (int)s2,
                        err.arg);
            }
        }
    }
    CK(cudaDeviceSynchronize());
    ++n_cases;
    if (memcmp(host, hostc, big) != 0) {
        ++n_failed;
        fprintf(stderr, "FAIL zero elements: the host buffer given as a zero-element tensor was written\n");
    }
    cudaFree(dbuf); cudaFree(kin); cudaFree(vin); cudaFree(gk); cudaFree(gv); cudaFree(gq); cudaFree(dl);
    free(host); free(hostc); free(hk);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--backend")) {
        void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
        fa_backend_export_fn fn = h ? (fa_backend_export_fn)dlsym(h, FA_BACKEND_EXPORT_SYMBOL) : NULL;
        under_test = fn ? fn() : NULL;
        if (!under_test || !under_test->backward) {
            fprintf(stderr, "bwd_v3_test: %s: no backend table with a backward (%s)\n", argv[2], h ? "no export" : dlerror());
            return 2;
        }
        printf("bwd_v3_test: varlen calls through %s (%s)\n", argv[2], under_test->name);
    } else if (argc != 1) {
        fprintf(stderr, "usage: bwd_v3_test [--backend LIB.so]\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bwd_v3_test: no CUDA device\n");
        return 2;
    }
    fa_cuda_policy pols[2];
    pols[0] = fa_cuda_policy_default;
    pols[1] = fa_cuda_policy_default;
    pols[1].bwd_sm90 = 0;
    static const char *pnames[2] = {"default policy", "sm80 forced"};
    static const int sqs[NB] = {37, 0, 1, 200, 130}, sks[NB] = {300, 1, 0, 129, 257};
    struct { fa_causal c; int64_t wl, wr; fa_align al; } masks[5] = {
        {FA_CAUSAL_NONE, -1, -1, FA_ALIGN_TOP_LEFT},     {FA_CAUSAL_BOTTOM_RIGHT, -1, -1, FA_ALIGN_TOP_LEFT},
        {FA_CAUSAL_TOP_LEFT, -1, -1, FA_ALIGN_TOP_LEFT}, {FA_CAUSAL_NONE, 17, 5, FA_ALIGN_BOTTOM_RIGHT},
        {FA_CAUSAL_BOTTOM_RIGHT, 40, -1, FA_ALIGN_TOP_LEFT}};
    static const int dims[3] = {64, 128, 96};
    int n = 0;
    for (int pi = 0; pi < 2; ++pi)
        for (int det = 0; det < 2; ++det)
            for (int mi = 0; mi < 5; ++mi)
                for (int lay = 0; lay < 3; ++lay) {
                    bcase c;
                    memset(&c, 0, sizeof(c));
                    c.Hq = 4, c.Hkv = (mi + lay) & 1 ? 2 : 4, c.D = dims[(n + pi) % 3], c.bf16 = n & 1, c.det = det;
                    c.causal = masks[mi].c, c.wl = masks[mi].wl, c.wr = masks[mi].wr, c.align = masks[mi].al;
                    c.layout = lay;
                    c.mask = lay == 2 && (mi % 2) == 0;
                    for (int b = 0; b < NB; ++b) {
                        c.sq[b] = sqs[(b + mi) % NB];
                        c.ska[b] = sks[(b + lay + det) % NB];
                        c.used[b] = lay == 0 ? c.ska[b] : (int)(c.ska[b] * urand());
                    }
                    c.pol = &pols[pi];
                    c.pname = pnames[pi];
                    run_case(&c);
                    ++n;
                }
    /* softcap: dense and varlen (the packing property holds with the cap too), every mask kind,
     * both modes, D 64 / 128 / 256 (the CAP kernels are sm_80 only: the policy does not matter) */
    static const int cdims[3] = {64, 128, 256};
    for (int det = 0; det < 2; ++det)
        for (int mi = 0; mi < 5; ++mi)
            for (int lay = 0; lay < 3; ++lay) {
                bcase c;
                memset(&c, 0, sizeof(c));
                c.Hq = 4, c.Hkv = (mi + lay) & 1 ? 2 : 4, c.D = cdims[(n + det) % 3], c.bf16 = (n >> 1) & 1, c.det = det;
                c.causal = masks[mi].c, c.wl = masks[mi].wl, c.wr = masks[mi].wr, c.align = masks[mi].al;
                c.layout = lay;
                c.mask = lay == 2 && (mi % 2) == 1;
                c.cap = (n % 2) ? 1.5f : 5.0f;
                for (int b = 0; b < NB; ++b) {
                    c.sq[b] = sqs[(b + mi + 1) % NB];
                    c.ska[b] = sks[(b + lay) % NB];
                    c.used[b] = lay == 0 ? c.ska[b] : (int)(c.ska[b] * urand());
                }
                c.pol = &pols[0];
                c.pname = pnames[0];
                run_case(&c);
                ++n;
            }
    /* Dqk != Dv: the MLA pair 192/128 (its own kernels: bwd_sm80_tile), 136/72 (the same kernels,
     * zero-filled columns), 128/64 and 64/128 (the larger dim's kernels); every mask kind and
     * layout, both modes, softcap on every third case; the sm_90 kernels never take a pair, so the
     * policy does not matter */
    static const int pq[4] = {192, 136, 128, 64}, pv[4] = {128, 72, 64, 128};
    for (int di = 0; di < 4; ++di)
        for (int det = 0; det < 2; ++det)
            for (int mi = 0; mi < 5; ++mi)
                for (int lay = 0; lay < 3; ++lay) {
                    if (di > 0 && (mi + lay + det) % 3) continue; /* the other pairs: a third of the grid */
                    bcase c;
                    memset(&c, 0, sizeof(c));
                    c.Hq = 4, c.Hkv = (mi + lay) & 1 ? 2 : 4, c.D = pq[di], c.Dv = pv[di], c.bf16 = n & 1, c.det = det;
                    c.causal = masks[mi].c, c.wl = masks[mi].wl, c.wr = masks[mi].wr, c.align = masks[mi].al;
                    c.layout = lay;
                    c.mask = lay == 2 && (mi % 2) == 0;
                    c.cap = (n % 3) == 1 ? 1.5f : 0.0f;
                    for (int b = 0; b < NB; ++b) {
                        c.sq[b] = sqs[(b + mi) % NB];
                        c.ska[b] = sks[(b + lay + det) % NB];
                        c.used[b] = lay == 0 ? c.ska[b] : (int)(c.ska[b] * urand());
                    }
                    c.pol = &pols[n % 2];
                    c.pname = pnames[n % 2];
                    run_case(&c);
                    ++n;
                }
    /* the one-grid group (Hopper path; the header says what it catches): GQA 8/2 and MHA 4/4,
     * D 64 / 128, lengths ending inside the longest sequence's tiles, 0 and 1 inside the batch */
    static const int gsq[NB] = {129, 1, 0, 300, 64}, gsk[NB] = {1, 257, 0, 130, 191};
    for (int det = 0; det < 2; ++det)
        for (int mi = 0; mi < 5; ++mi)
            for (int lay = 0; lay < 3; ++lay) {
                bcase c;
                memset(&c, 0, sizeof(c));
                c.Hq = (mi + lay) & 1 ? 8 : 4, c.Hkv = (mi + lay) & 1 ? 2 : 4, c.D = (mi + det) & 1 ? 128 : 64;
                c.bf16 = (mi + lay + det) & 1, c.det = det;
                c.causal = masks[mi].c, c.wl = masks[mi].wl, c.wr = masks[mi].wr, c.align = masks[mi].al;
                c.layout = lay;
                c.mask = lay == 2 && (mi % 2) == 1;
                for (int b = 0; b < NB; ++b) {
                    c.sq[b] = gsq[(b + lay) % NB];
                    c.ska[b] = gsk[(b + mi) % NB];
                    c.used[b] = lay == 0 ? c.ska[b] : (int)(c.ska[b] * (0.25 + 0.75 * urand()));
                }
                c.pol = &pols[0];
                c.pname = "one grid, default policy";
                run_case(&c);
                ++n;
            }
    if (!under_test) {
        unsupported_case();
        zero_elements_case();
    }
    printf("bwd_v3_test: %ld cases, %ld failed\n", n_cases, n_failed);
    return n_failed ? 1 : 0;
}
