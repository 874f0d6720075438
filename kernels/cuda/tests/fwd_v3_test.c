/* fwd_v3_test.c: the CUDA forward's contract-v3 features (varlen, paged K/V, seqused_k,
 * softcap, sinks, the decode path with split-KV) on the GPU.
 *
 * Two kinds of checks, until the oracle covers v3 (then fwd_certify_test's v3 grid):
 *   1. exact properties (no tolerance): a packed / paged batch run once equals each of its
 *      sequences run alone as a dense B = 1 call, bitwise, O and LSE, for the same kernel and
 *      tile (a testing.h policy pins them: fwd_no_decode = 1 and a fixed family / sm90 choice).
 *      Every sequence's per-sequence lengths, causal / window diagonals, page gathers (page
 *      sizes 1, 3, 16, 64, 128, 256; pages shuffled and shared) and seqused_k are thereby
 *      checked against the dense path that fwd_certify_test certifies. Outputs are poisoned
 *      with different NaN patterns in the two runs, so an unwritten row cannot match.
 *   2. a float64 reference (written here, per sequence: dense attention on the dtype values,
 *      softcap and sinks by their formulas) for every case of 1., and for the decode cases
 *      (default policy: Sq <= 16 runs the decode tile with split-KV and the combine kernel):
 *      per element |O - ref| <= 2 * (sum_j P_j e_j (|V_jd| + |O_d|) + u |O_d|
 *      + (Sk_b + 16) 2^-23 sum_j P_j |V_jd| + f sum_j |V_jd| / l + f) + 2^-120 (f: the dtype's
 *      absolute floor, fp16 2^-25 for subnormal P and O, bf16 2^-126 for flushed ones; l the
 *      softmax denominator relative to the row max), with e_j = u + 2 ds_j + |s_j - m|
 *      2^-23 + 2^-20 (u: unit roundoff of P's dtype; ds_j: the fp32 score error
 *      D 2^-23 scale sum_d |q_d k_jd|, plus, with softcap, |scale q.k| 2^-22 + cap 2^-21), the
 *      first-order error of rounding P, the scores' error, the exponent and the fp32 sums
 *      (factor 2 for second-order terms); |LSE - ref| <= 2 (max_j ds_j + |lse| 2^-22
 *      + (Sk_b + 16) 2^-23 + 2^-20). Rows without a visible key: O = 0 and LSE = -inf, or
 *      the sink, exactly. These bounds are this test's, stated here, not the oracle's.
 * usage: fwd_v3_test [--threads N] [--ws-only] [--decode-only] (OpenMP threads of the reference; --ws-only: the
 * warp-specialized kernel's cases only, ws_cases; --decode-only: the decode cases only, Sq <= 16 with
 * split-KV, the combine and the pinned split counts). Exit 0: all passed. */
#include <cuda_runtime.h>
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
            fprintf(stderr, "fwd_v3_test: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,              \
                    cudaGetErrorString(e_));                                                      \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

#define MAXB 8

/* ---- host fp16 / bf16 ---------------------------------------------------- */
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
static uint16_t d2h(double x, int bf16) { /* RN to nearest even, via fp32 (inputs are fp32-exact here) */
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (bf16) {
        u += 0x7FFF + ((u >> 16) & 1);
        return (uint16_t)(u >> 16);
    }
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const double a = fabs((double)f);
    if (a >= 65520.0) return (uint16_t)(sign | 0x7C00);
    int e;
    frexp(a, &e);                                   /* a = m 2^e, m in [0.5, 1) */
    const double q = e - 11 < -24 ? 0x1p-24 : ldexp(1.0, e - 11); /* fp16 spacing at a */
    const double r = nearbyint(a / q) * q;          /* RN-even on the spacing grid (exact in double) */
    uint16_t h;
    if (r < 0x1p-14) h = (uint16_t)(r / 0x1p-24);
    else {
        int e2;
        const double m2 = frexp(r, &e2);            /* r = m2 2^e2 */
        h = (uint16_t)(((e2 - 1 + 15) << 10) | (int)((m2 * 2 - 1) * 1024));
    }
    return (uint16_t)(sign | h);
}

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) { /* [0, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* ---- one problem ---------------------------------------------------------- */
typedef struct {
    int B, Hq, Hkv, D, bf16;
    int Dv; /* head dim of V and O (0: D, the head dim of Q and K) */
    fa_causal causal;
    int64_t wl, wr;
    fa_align align;
    int sq[MAXB], sk_alloc[MAXB], used[MAXB]; /* used[b] = Sk_b */
    int varlen_q, varlen_k, use_used, page_size; /* page_size 0: not paged */
    int poison;  /* 1: allocated but unused keys (packed K/V, rows Sk_b .. span - 1) hold NaN/Inf */
    float softcap;
    int sinks;
    double amp; /* |q| amplitude */
    const char *name;
} v3_case;

typedef struct {
    uint16_t *q, *k, *v;   /* host: q [tot_q or B*Sqmax, Hq, D], k/v per sequence [Sk_b, Hkv, D] gathered */
    int qrow0[MAXB];       /* row of sequence b's query 0 in q */
    uint16_t *kseq[MAXB], *vseq[MAXB];
    float *sinks;
} v3_data;

static int v3_max(const int *x, int n) {
    int m = 0;
    for (int i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

static fa_cuda_policy pol_exact[3], pol_default, pol_ws;
/* NULL, or the policy of run_case's twin call: the same call again under it must give the same
 * bits (the decode cases: fwd_decode.cu's kernel against the general kernel's decode tile,
 * testing.h fwd_decode_general, which share the tile, the grid and the arithmetic). */
static const fa_cuda_policy *pol_twin = NULL;
static const char *pol_name[3] = {"sm90/default-tile", "sm80 family 0", "sm80 family 1"};
static long n_checked = 0, n_failed = 0;

static void fail(const v3_case *c, const char *what) {
    ++n_failed;
    if (n_failed < 40)
        fprintf(stderr, "FAIL %s [B%d Hq%d Hkv%d D%d/%d %s causal%d wl%lld wr%lld ps%d cap%g sinks%d]: %s\n", c->name, c->B,
                c->Hq, c->Hkv, c->D, c->Dv ? c->Dv : c->D, c->bf16 ? "bf16" : "fp16", (int)c->causal, (long long)c->wl, (long long)c->wr,
                c->page_size, c->softcap, c->sinks, what);
}

/* float64 reference of sequence b, head h, row i: o[Dv], *lse; returns the per-element bounds. */
static void ref_row(const v3_case *c, const v3_data *d, int b, int h, int i, double *o, double *lse, double *ob,
                    double *lb, int *empty) {
    const int D = c->D, Dv = c->Dv ? c->Dv : c->D, Sq = c->sq[b], Sk = c->used[b], hk = h / (c->Hq / c->Hkv);
    const double scale = 1.0 / sqrt((double)D);
    const double u = c->bf16 ? 0x1p-8 : 0x1p-11;
    const int br = c->causal == FA_CAUSAL_BOTTOM_RIGHT || (c->causal == FA_CAUSAL_NONE && c->align == FA_ALIGN_BOTTOM_RIGHT);
    const int64_t diag = (int64_t)i + (br ? Sk - Sq : 0);
    const uint16_t *qr = d->q + ((int64_t)(d->qrow0[b] + i) * c->Hq + h) * D;
    double *s = malloc(sizeof(double) * (Sk + 1)), *ds = malloc(sizeof(double) * (Sk + 1));
    char *vis = malloc((size_t)Sk + 1);
    double m = -INFINITY;
    for (int j = 0; j < Sk; ++j) {
        vis[j] = 1;
        if (c->causal != FA_CAUSAL_NONE && j > diag) vis[j] = 0;
        if (c->wl >= 0 && j < diag - c->wl) vis[j] = 0;
        if (c->causal == FA_CAUSAL_NONE && c->wr >= 0 && j > diag + c->wr) vis[j] = 0;
        if (!vis[j]) continue;
        const uint16_t *kr = d->kseq[b] + ((int64_t)j * c->Hkv + hk) * D;
        double dot = 0, adot = 0;
        for (int e = 0; e < D; ++e) {
            double x = h2d(qr[e], c->bf16) * h2d(kr[e], c->bf16);
            dot += x;
            adot += fabs(x);
        }
        double sc = scale * dot;
        ds[j] = D * 0x1p-23 * scale * adot;
        if (c->softcap > 0) {
            ds[j] += fabs(sc) * 0x1p-22 + c->softcap * 0x1p-21;
            sc = c->softcap * tanh(sc / c->softcap);
        }
        s[j] = sc;
        if (sc > m) m = sc;
    }
    const double sink = c->sinks ? d->sinks[h] : -INFINITY;
    const double mm = sink > m ? sink : m;
    const int has_sink = c->sinks && sink > -INFINITY;
    double l = has_sink ? exp(sink - mm) : 0, dsmax = 0;
    for (int j = 0; j < Sk; ++j)
        if (vis[j]) {
            l += exp(s[j] - mm);
            if (ds[j] > dsmax) dsmax = ds[j];
        }
    *empty = m == -INFINITY;
    for (int e = 0; e < Dv; ++e) o[e] = 0;
    double *spv = calloc((size_t)Dv, sizeof(double)), *sepv = calloc((size_t)Dv, sizeof(double));
    double *sav = calloc((size_t)Dv, sizeof(double));
    /* the sink's weight in l: exponent rounding as for a key */
    double pe_sum = has_sink && l > 0 ? exp(sink - mm) / l * (fabs(sink - mm) * 0x1p-23 + 0x1p-20) : 0;
    for (int j = 0; j < Sk; ++j) {
        if (!vis[j]) continue;
        const double P = exp(s[j] - mm) / l;
        const double ej = u + 2 * ds[j] + fabs(s[j] - mm) * 0x1p-23 + 0x1p-20;
        pe_sum += P * ej;
        const uint16_t *vr = d->vseq[b] + ((int64_t)j * c->Hkv + hk) * Dv;
        for (int e = 0; e < Dv; ++e) {
            const double vv = h2d(vr[e], c->bf16);
            o[e] += P * vv;
            spv[e] += P * fabs(vv);
            sepv[e] += P * ej * fabs(vv);
            sav[e] += fabs(vv);
        }
    }
    *lse = (l == 0) ? -INFINITY : mm + log(l);
    /* absolute floor of the dtype: P (unnormalized, <= 1) and O below the normal range round with
       absolute error <= sub (fp16: half the subnormal spacing 2^-24; bf16: flushed below 2^-126) */
    const double sub = c->bf16 ? 0x1p-126 : 0x1p-25;
    for (int e = 0; e < Dv; ++e)
        ob[e] = 2 * (sepv[e] + pe_sum * fabs(o[e]) + u * fabs(o[e]) + (Sk + 16) * 0x1p-23 * spv[e] +
                     (l > 0 ? sub * sav[e] / l : 0) + sub) + 0x1p-120;
    *lb = 2 * (dsmax + fabs(*lse) * 0x1p-22 + (Sk + 16) * 0x1p-23 + 0x1p-20);
    free(s); free(ds); free(vis); free(spv); free(sepv); free(sav);
}

static void *dalloc(size_t n) {
    void *p = NULL;
    CK(cudaMalloc(&p, n < 16 ? 16 : n));
    return p;
}

/* Runs case c: the packed/paged call (policy pol), then (exact = 1) each sequence alone, bitwise;
 * and the float64 reference on every row (ref = 1). */
static void run_case(const v3_case *c, const fa_cuda_policy *pol, int exact, int ref) {
    const int B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, Dv = c->Dv ? c->Dv : c->D, bf = c->bf16;
    const int Sqmax = v3_max(c->sq, B), Skmax = v3_max(c->sk_alloc, B);
    v3_data d;
    memset(&d, 0, sizeof(d));
    int32_t cu_q[MAXB + 1], cu_k[MAXB + 1], used[MAXB];
    cu_q[0] = cu_k[0] = 0;
    for (int b = 0; b < B; ++b) {
        cu_q[b + 1] = cu_q[b] + c->sq[b];
        cu_k[b + 1] = cu_k[b] + c->sk_alloc[b];
        used[b] = c->used[b];
    }
    const int64_t qrows = c->varlen_q ? cu_q[B] : (int64_t)B * Sqmax;
    for (int b = 0; b < B; ++b) d.qrow0[b] = c->varlen_q ? cu_q[b] : b * Sqmax;
    const size_t qn = (size_t)qrows * Hq * D, on = (size_t)qrows * Hq * Dv;
    d.q = malloc(qn * 2 + 2);
    for (size_t x = 0; x < qn; ++x) d.q[x] = d2h(c->amp * (2 * urand() - 1), bf);
    /* K/V storage: packed [tot_k, Hkv, D], dense [B, Skmax, Hkv, D], or a page pool */
    int64_t kv_rows;
    int npages = 0, mpp = 0;
    int32_t *table = NULL;
    if (c->page_size > 0) {
        mpp = (Skmax + c->page_size - 1) / c->page_size;
        if (mpp < 1) mpp = 1;
        npages = B * mpp / 2 + 3; /* fewer pages than slots: some are shared */
        table = malloc(sizeof(int32_t) * B * (mpp + 1));
        for (int x = 0; x < B * (mpp + 1); ++x) table[x] = (int32_t)(urand() * npages); /* shuffled, repeated */
        kv_rows = (int64_t)npages * c->page_size;
    } else {
        kv_rows = c->varlen_k ? cu_k[B] : (int64_t)B * Skmax;
    }
    const size_t kvn = (size_t)kv_rows * Hkv * D, vn = (size_t)kv_rows * Hkv * Dv;
    uint16_t *kst = malloc(kvn * 2 + 2), *vst = malloc(vn * 2 + 2);
    for (size_t x = 0; x < (kvn > vn ? kvn : vn); ++x) {
        const double xk = 2 * urand() - 1, xv = 2 * urand() - 1;
        if (x < kvn) kst[x] = d2h(xk, bf);
        if (x < vn) vst[x] = d2h(xv, bf);
    }
    if (c->poison && c->varlen_k) /* keys no sequence uses: NaN in K, +-Inf and NaN in V */
        for (int b = 0; b < B; ++b)
            for (int64_t r = cu_k[b] + c->used[b]; r < cu_k[b + 1]; ++r) {
                for (int x = 0; x < Hkv * D; ++x) kst[(size_t)r * Hkv * D + x] = bf ? 0x7FC0u : 0x7E00u;
                for (int x = 0; x < Hkv * Dv; ++x)
                    vst[(size_t)r * Hkv * Dv + x] =
                        x % 3 == 0 ? (bf ? 0x7F80u : 0x7C00u) : (x % 3 == 1 ? (bf ? 0xFF80u : 0xFC00u) : (bf ? 0x7FC0u : 0x7E00u));
            }
    /* per-sequence gathered copies (the reference's and the dense runs' K/V) */
    for (int b = 0; b < B; ++b) {
        const int n = c->used[b];
        d.kseq[b] = malloc((size_t)n * Hkv * D * 2 + 2);
        d.vseq[b] = malloc((size_t)n * Hkv * Dv * 2 + 2);
        for (int j = 0; j < n; ++j) {
            int64_t row;
            if (c->page_size > 0) row = (int64_t)table[b * (mpp + 1) + j / c->page_size] * c->page_size + j % c->page_size;
            else row = c->varlen_k ? cu_k[b] + j : (int64_t)b * Skmax + j;
            memcpy(d.kseq[b] + (size_t)j * Hkv * D, kst + (size_t)row * Hkv * D, (size_t)Hkv * D * 2);
            memcpy(d.vseq[b] + (size_t)j * Hkv * Dv, vst + (size_t)row * Hkv * Dv, (size_t)Hkv * Dv * 2);
        }
    }
    float *sinks_h = NULL, *sinks_d = NULL;
    if (c->sinks) {
        sinks_h = malloc(sizeof(float) * Hq);
        for (int h = 0; h < Hq; ++h) sinks_h[h] = h == 0 ? -INFINITY : (float)(4 * urand() - 1);
        d.sinks = sinks_h;
        sinks_d = dalloc(sizeof(float) * Hq);
        CK(cudaMemcpy(sinks_d, sinks_h, sizeof(float) * Hq, cudaMemcpyHostToDevice));
    }
    /* the packed / paged call */
    uint16_t *dq = dalloc(qn * 2), *dk = dalloc(kvn * 2), *dv = dalloc(vn * 2), *dO = dalloc(on * 2);
    const size_t lsen = (size_t)Hq * qrows;
    float *dl = dalloc(lsen * 4);
    CK(cudaMemcpy(dq, d.q, qn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, kst, kvn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, vst, vn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(dO, 0xFF, on * 2)); /* NaN pattern 0xFFFF */
    CK(cudaMemset(dl, 0xFF, lsen * 4));
    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p.batch = B;
    a.p.seqlen_q = Sqmax;
    a.p.seqlen_k = c->page_size > 0 ? (int64_t)mpp * c->page_size < Skmax ? Skmax : Skmax : Skmax;
    a.p.heads_q = Hq;
    a.p.heads_kv = Hkv;
    a.p.head_dim_qk = D;
    a.p.head_dim_v = Dv;
    a.p.dtype = bf ? FA_BF16 : FA_F16;
    a.p.causal = c->causal;
    a.p.window_left = c->wl;
    a.p.window_right = c->wr;
    a.p.window_align = c->align;
    a.p.softcap = c->softcap;
    a.p.has_sinks = c->sinks;
    a.p.page_size = c->page_size;
    const int64_t qs1 = (int64_t)Hq * D, ks1 = (int64_t)Hkv * D, os1 = (int64_t)Hq * Dv, vs1 = (int64_t)Hkv * Dv;
    a.q = (fa_tensor){dq, {c->varlen_q ? 0 : Sqmax * qs1, qs1, D, 1}};
    a.o = (fa_tensor){dO, {c->varlen_q ? 0 : Sqmax * os1, os1, Dv, 1}};
    const int64_t kb = c->page_size > 0 ? (int64_t)c->page_size * ks1 : (c->varlen_k ? 0 : Skmax * ks1);
    const int64_t vb = c->page_size > 0 ? (int64_t)c->page_size * vs1 : (c->varlen_k ? 0 : Skmax * vs1);
    a.k = (fa_tensor){dk, {kb, ks1, D, 1}};
    a.v = (fa_tensor){dv, {vb, vs1, Dv, 1}};
    if (c->varlen_q) a.lse = (fa_lse){dl, {0, qrows, 1}};
    else a.lse = (fa_lse){dl, {(int64_t)Hq * Sqmax, Sqmax, 1}};
    a.varlen.cu_seqlens_q = c->varlen_q ? cu_q : NULL;
    a.varlen.cu_seqlens_k = c->varlen_k ? cu_k : NULL;
    a.varlen.seqused_k = c->use_used ? used : NULL;
    if (c->page_size > 0) {
        a.paged.block_table = table;
        a.paged.table_stride = mpp + 1;
        a.paged.max_pages_per_seq = mpp;
        a.paged.num_pages = npages;
    }
    a.sinks = sinks_d;
    fa_error err;
    memset(&err, 0, sizeof(err));
    fa_status st = fa_cuda_forward_policy(&a, pol, &err);
    ++n_checked;
    if (st != FA_OK) {
        char msg[400];
        snprintf(msg, sizeof(msg), "forward returned %s: %s: %s", fa_status_name(st), err.arg, err.msg);
        fail(c, msg);
        goto out;
    }
    uint16_t *O = malloc(on * 2 + 2);
    float *L = malloc(lsen * 4 + 4);
    CK(cudaMemcpy(O, dO, on * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(L, dl, lsen * 4, cudaMemcpyDeviceToHost));
    /* 0. the twin call (pol_twin): the outputs poisoned with another NaN pattern, then bitwise */
    if (pol_twin != NULL) {
        CK(cudaMemset(dO, 0xFE, on * 2));
        CK(cudaMemset(dl, 0xFE, lsen * 4));
        st = fa_cuda_forward_policy(&a, pol_twin, &err);
        ++n_checked;
        if (st != FA_OK) {
            char msg[400];
            snprintf(msg, sizeof(msg), "twin call returned %s: %s: %s", fa_status_name(st), err.arg, err.msg);
            fail(c, msg);
        } else {
            uint16_t *O2 = malloc(on * 2 + 2);
            float *L2 = malloc(lsen * 4 + 4);
            CK(cudaMemcpy(O2, dO, on * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(L2, dl, lsen * 4, cudaMemcpyDeviceToHost));
            if (memcmp(O2, O, on * 2) != 0) fail(c, "O differs from the twin policy's call (not bitwise)");
            else if (memcmp(L2, L, lsen * 4) != 0) fail(c, "LSE differs from the twin policy's call (not bitwise)");
            free(O2);
            free(L2);
        }
    }
#define LSE_AT(b, h, i) (c->varlen_q ? L[(int64_t)(h) * qrows + cu_q[b] + (i)] : L[((int64_t)(b) * Hq + (h)) * Sqmax + (i)])
#define LSE_PTR(b, h) (c->varlen_q ? &L[(int64_t)(h) * qrows + cu_q[b]] : &L[((int64_t)(b) * Hq + (h)) * Sqmax])
    /* 1. each sequence alone, dense, bitwise */
    if (exact)
        for (int b = 0; b < B && n_failed < 40; ++b) {
            const int sq = c->sq[b], sk = c->used[b];
            if (sq == 0) continue;
            uint16_t *q1 = dalloc((size_t)sq * qs1 * 2), *k1 = dalloc((size_t)sk * ks1 * 2 + 16),
                     *v1 = dalloc((size_t)sk * vs1 * 2 + 16), *o1 = dalloc((size_t)sq * os1 * 2);
            float *l1 = dalloc((size_t)Hq * sq * 4);
            CK(cudaMemcpy(q1, d.q + (size_t)d.qrow0[b] * qs1, (size_t)sq * qs1 * 2, cudaMemcpyHostToDevice));
            if (sk) {
                CK(cudaMemcpy(k1, d.kseq[b], (size_t)sk * ks1 * 2, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(v1, d.vseq[b], (size_t)sk * vs1 * 2, cudaMemcpyHostToDevice));
            }
            CK(cudaMemset(o1, 0xFE, (size_t)sq * os1 * 2)); /* another NaN pattern: 0xFEFE */
            CK(cudaMemset(l1, 0xFE, (size_t)Hq * sq * 4));
            fa_fwd_args a1 = a;
            memset(&a1.varlen, 0, sizeof(a1.varlen));
            memset(&a1.paged, 0, sizeof(a1.paged));
            a1.p.batch = 1;
            a1.p.seqlen_q = sq;
            a1.p.seqlen_k = sk;
            a1.p.page_size = 0;
            a1.q = (fa_tensor){q1, {sq * qs1, qs1, D, 1}};
            a1.o = (fa_tensor){o1, {sq * os1, os1, Dv, 1}};
            a1.k = (fa_tensor){k1, {sk * ks1, ks1, D, 1}};
            a1.v = (fa_tensor){v1, {sk * vs1, vs1, Dv, 1}};
            a1.lse = (fa_lse){l1, {(int64_t)Hq * sq, sq, 1}};
            st = fa_cuda_forward_policy(&a1, pol, &err);
            if (st != FA_OK) {
                char msg[400];
                snprintf(msg, sizeof(msg), "dense forward of sequence %d returned %s: %s", b, fa_status_name(st), err.msg);
                fail(c, msg);
            } else {
                uint16_t *O1 = malloc((size_t)sq * os1 * 2);
                float *L1 = malloc((size_t)Hq * sq * 4);
                CK(cudaMemcpy(O1, o1, (size_t)sq * os1 * 2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(L1, l1, (size_t)Hq * sq * 4, cudaMemcpyDeviceToHost));
                if (memcmp(O1, O + (size_t)d.qrow0[b] * os1, (size_t)sq * os1 * 2) != 0) {
                    char msg[128];
                    snprintf(msg, sizeof(msg), "O of sequence %d (Sq %d Sk %d) differs from its dense run", b, sq, sk);
                    fail(c, msg);
                }
                for (int h = 0; h < Hq; ++h)
                    if (memcmp(&L1[(size_t)h * sq], LSE_PTR(b, h), (size_t)sq * 4) != 0) {
                        char msg[128];
                        snprintf(msg, sizeof(msg), "LSE of sequence %d head %d differs from its dense run", b, h);
                        fail(c, msg);
                        break;
                    }
                free(O1);
                free(L1);
            }
            cudaFree(q1); cudaFree(k1); cudaFree(v1); cudaFree(o1); cudaFree(l1);
        }
    /* 2. float64 reference, every row */
    if (ref) {
        long bad = 0;
        double worst = 0, worst_l = 0;
        char first[200] = "";
#pragma omp parallel for schedule(dynamic) collapse(2) reduction(+ : bad) reduction(max : worst, worst_l)
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < Hq; ++h) {
                double *o = malloc(sizeof(double) * Dv * 2), *ob = o + Dv;
                for (int i = 0; i < c->sq[b]; ++i) {
                    double lse, lb;
                    int empty;
                    ref_row(c, &d, b, h, i, o, &lse, ob, &lb, &empty);
                    const uint16_t *orow = O + ((size_t)(d.qrow0[b] + i) * Hq + h) * Dv;
                    const double gl = LSE_AT(b, h, i);
                    for (int e = 0; e < Dv; ++e) {
                        const double g = h2d(orow[e], bf);
                        const double r = empty ? fabs(g) : fabs(g - o[e]) / ob[e];
                        if (!(r <= 1.0) || (empty && g != 0)) {
                            bad++;
#pragma omp critical
                            if (!first[0])
                                snprintf(first, sizeof(first), "b%d h%d i%d d%d: O %.6g ref %.6g bound %.3g%s", b, h, i,
                                         e, g, o[e], ob[e], empty ? " (empty row)" : "");
                        } else if (!empty && r > worst) worst = r;
                    }
                    const double lr = empty ? (gl == lse ? 0 : INFINITY) : fabs(gl - lse) / lb;
                    if (!(lr <= 1.0)) {
                        bad++;
#pragma omp critical
                        if (!first[0])
                            snprintf(first, sizeof(first), "b%d h%d i%d: LSE %.9g ref %.9g bound %.3g", b, h, i, gl, lse, lb);
                    } else if (lr > worst_l) worst_l = lr;
                }
                free(o);
            }
        if (bad) {
            char msg[320];
            snprintf(msg, sizeof(msg), "%ld elements outside the float64 bound; first %s", bad, first);
            fail(c, msg);
        }
        if (worst > 0.5 || worst_l > 0.5) printf("  note %s: worst O %.3f LSE %.3f of the bound\n", c->name, worst, worst_l);
    }
    free(O);
    free(L);
out:
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dO); cudaFree(dl);
    if (sinks_d) cudaFree(sinks_d);
    free(sinks_h);
    for (int b = 0; b < B; ++b) free(d.kseq[b]), free(d.vseq[b]);
    free(d.q); free(kst); free(vst); free(table);
}

/* Backward with sinks (dense call): dsinks against a float64 sum over the GPU's own O, LSE and
 * dO (the backward's inputs): per head |dsinks - ref| <= 2 sum_i (|w_i D_i| (2^-21 + |sink - lse_i|
 * 2^-23) + w_i (Dv + 32) 2^-24 sum_d |dO_id O_id|) + 2 rows 2^-24 sum_i |w_i D_i| (expf 2 ulp, the
 * difference's rounding, D's fp32 sums, the fp32 sums over rows); and dQ, dK, dV against a
 * float64 backward from the same O, LSE (P = exp(s - lse): the sink only enters through the LSE),
 * normwise ||x - ref|| <= 8 u ||ref|| (u: the dtype's unit roundoff; first order: P and dS rounded
 * to the dtype, the output rounding, factor 2). Returns the number of failures. */
static int bwd_sinks_case(int bf, int D, int Dv, int causal) {
    const int B = 2, S = 97, Hq = 4, Hkv = 2, g = Hq / Hkv;
    const double u = bf ? 0x1p-8 : 0x1p-11, scale = 1.0 / sqrt((double)D);
    /* q, dq [B, S, Hq, D]; k, dk [B, S, Hkv, D]; o, dout [B, S, Hq, Dv]; v, dv [B, S, Hkv, Dv] */
    const size_t qn = (size_t)B * S * Hq * D, kn = (size_t)B * S * Hkv * D;
    const size_t on = (size_t)B * S * Hq * Dv, vn = (size_t)B * S * Hkv * Dv;
    uint16_t *hq = malloc(qn * 2), *hk = malloc(kn * 2), *hv = malloc(vn * 2), *hdo = malloc(on * 2), *ho = malloc(on * 2);
    uint16_t *hdq = malloc(qn * 2), *hdk = malloc(kn * 2), *hdv = malloc(vn * 2);
    float sinks[4] = {0.5f, -1.0f, 2.5f, -INFINITY}, *hl = malloc(sizeof(float) * B * Hq * S), ds[4];
    for (size_t x = 0; x < (qn > on ? qn : on); ++x) {
        const double xq = 2 * urand() - 1, xo = 2 * urand() - 1;
        if (x < qn) hq[x] = d2h(xq, bf);
        if (x < on) hdo[x] = d2h(xo, bf);
    }
    for (size_t x = 0; x < (kn > vn ? kn : vn); ++x) {
        const double xk = 2 * urand() - 1, xv = 2 * urand() - 1;
        if (x < kn) hk[x] = d2h(xk, bf);
        if (x < vn) hv[x] = d2h(xv, bf);
    }
    uint16_t *q = dalloc(qn * 2), *k = dalloc(kn * 2), *v = dalloc(vn * 2), *o = dalloc(on * 2), *dout = dalloc(on * 2);
    uint16_t *dq = dalloc(qn * 2), *dk = dalloc(kn * 2), *dv = dalloc(vn * 2);
    float *l = dalloc(sizeof(float) * B * Hq * S), *sk = dalloc(16), *dsk = dalloc(16);
    CK(cudaMemcpy(q, hq, qn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(k, hk, kn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, hv, vn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dout, hdo, on * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sk, sinks, 16, cudaMemcpyHostToDevice));
    CK(cudaMemset(dsk, 0xFF, 16));
    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p.batch = B; a.p.seqlen_q = a.p.seqlen_k = S; a.p.heads_q = Hq; a.p.heads_kv = Hkv;
    a.p.head_dim_qk = D; a.p.head_dim_v = Dv; a.p.dtype = bf ? FA_BF16 : FA_F16;
    a.p.causal = causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
    a.p.window_left = a.p.window_right = -1;
    a.p.has_sinks = 1;
    a.q = (fa_tensor){q, {(int64_t)S * Hq * D, (int64_t)Hq * D, D, 1}};
    a.o = (fa_tensor){o, {(int64_t)S * Hq * Dv, (int64_t)Hq * Dv, Dv, 1}};
    a.k = (fa_tensor){k, {(int64_t)S * Hkv * D, (int64_t)Hkv * D, D, 1}};
    a.v = (fa_tensor){v, {(int64_t)S * Hkv * Dv, (int64_t)Hkv * Dv, Dv, 1}};
    a.lse = (fa_lse){l, {(int64_t)Hq * S, S, 1}};
    a.sinks = sk;
    fa_error err;
    int bad = 0;
    if (fa_cuda_forward(&a, &err) != FA_OK) {
        fprintf(stderr, "FAIL bwd sinks: forward: %s\n", err.msg);
        return 1;
    }
    fa_bwd_args ba;
    memset(&ba, 0, sizeof(ba));
    ba.p = a.p;
    ba.q = a.q; ba.k = a.k; ba.v = a.v; ba.o = a.o; ba.lse = a.lse;
    ba.dout = (fa_tensor){dout, {(int64_t)S * Hq * Dv, (int64_t)Hq * Dv, Dv, 1}};
    ba.dq = (fa_tensor){dq, {(int64_t)S * Hq * D, (int64_t)Hq * D, D, 1}};
    ba.dk = (fa_tensor){dk, {(int64_t)S * Hkv * D, (int64_t)Hkv * D, D, 1}};
    ba.dv = (fa_tensor){dv, {(int64_t)S * Hkv * Dv, (int64_t)Hkv * Dv, Dv, 1}};
    ba.sinks = sk;
    ba.dsinks = dsk;
    if (fa_cuda_backward(&ba, &err) != FA_OK) {
        fprintf(stderr, "FAIL bwd sinks: backward: %s: %s\n", err.arg, err.msg);
        return 1;
    }
    CK(cudaMemcpy(ho, o, on * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl, l, sizeof(float) * B * Hq * S, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ds, dsk, 16, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdq, dq, qn * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdk, dk, kn * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdv, dv, vn * 2, cudaMemcpyDeviceToHost));
    double *rq = calloc(qn, sizeof(double)), *rk = calloc(kn, sizeof(double)), *rv = calloc(vn, sizeof(double));
    double *P = malloc(sizeof(double) * S), *dP = malloc(sizeof(double) * S);
#define E(p, i) h2d((p)[i], bf)
    for (int h = 0; h < Hq; ++h) {
        double ref = 0, bound = 0, sumt = 0;
        const int hkv = h / g;
        for (int b = 0; b < B; ++b)
            for (int i = 0; i < S; ++i) {
                const size_t qo = (((size_t)b * S + i) * Hq + h) * D, oo = (((size_t)b * S + i) * Hq + h) * Dv;
                double Dd = 0, ad = 0;
                for (int e = 0; e < Dv; ++e) Dd += E(hdo, oo + e) * E(ho, oo + e), ad += fabs(E(hdo, oo + e) * E(ho, oo + e));
                const double lse = hl[((size_t)b * Hq + h) * S + i];
                const double w = exp((double)sinks[h] - lse);
                const double t = -w * Dd;
                ref += t;
                sumt += fabs(t);
                bound += fabs(t) * (0x1p-21 + (isfinite(sinks[h]) ? fabs(sinks[h] - lse) : 0) * 0x1p-23) + w * (Dv + 32) * 0x1p-24 * ad;
                /* float64 backward of this row */
                for (int j = 0; j < S; ++j) {
                    P[j] = 0, dP[j] = 0;
                    if (causal && j > i) continue;
                    const size_t ko = (((size_t)b * S + j) * Hkv + hkv) * D, vo = (((size_t)b * S + j) * Hkv + hkv) * Dv;
                    double s = 0, dp = 0;
                    for (int e = 0; e < D; ++e) s += E(hq, qo + e) * E(hk, ko + e);
                    for (int e = 0; e < Dv; ++e) dp += E(hdo, oo + e) * E(hv, vo + e);
                    P[j] = exp(scale * s - lse);
                    dP[j] = dp;
                }
                for (int j = 0; j < S; ++j) {
                    if (P[j] == 0) continue;
                    const size_t ko = (((size_t)b * S + j) * Hkv + hkv) * D, vo = (((size_t)b * S + j) * Hkv + hkv) * Dv;
                    const double dS = P[j] * (dP[j] - Dd);
                    for (int e = 0; e < D; ++e) {
                        rq[qo + e] += scale * dS * E(hk, ko + e);
                        rk[ko + e] += scale * dS * E(hq, qo + e);
                    }
                    for (int e = 0; e < Dv; ++e) rv[vo + e] += P[j] * E(hdo, oo + e);
                }
            }
        bound = 2 * bound + 2 * (double)(B * S) * 0x1p-24 * sumt;
        if (!(fabs(ds[h] - ref) <= bound)) {
            fprintf(stderr, "FAIL bwd sinks %s D%d/%d causal%d: dsinks[%d] = %.9g, ref %.9g, bound %.3g\n", bf ? "bf16" : "fp16",
                    D, Dv, causal, h, ds[h], ref, bound);
            bad++;
        }
    }
    const double *refs[3] = {rq, rk, rv};
    const uint16_t *got[3] = {hdq, hdk, hdv};
    const size_t ns[3] = {qn, kn, vn};
    for (int t = 0; t < 3; ++t) {
        double en = 0, rn = 0;
        for (size_t x = 0; x < ns[t]; ++x) {
            const double dd = E(got[t], x) - refs[t][x];
            en += dd * dd;
            rn += refs[t][x] * refs[t][x];
        }
        if (!(sqrt(en) <= 8 * u * sqrt(rn))) {
            fprintf(stderr, "FAIL bwd sinks %s D%d/%d causal%d: d%c normwise error %.3g > 8u = %.3g\n", bf ? "bf16" : "fp16", D,
                    Dv, causal, "QKV"[t], sqrt(en) / sqrt(rn), 8 * u);
            bad++;
        }
    }
#undef E
    free(rq); free(rk); free(rv); free(P); free(dP);
    free(hq); free(hk); free(hv); free(hdo); free(ho); free(hdq); free(hdk); free(hdv); free(hl);
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(dout); cudaFree(dq); cudaFree(dk); cudaFree(dv);
    cudaFree(l); cudaFree(sk); cudaFree(dsk);
    return bad;
}

/* The warp-specialized Hopper kernel (fwd_sm90_ws.cu; default policy without the decode tile) on
 * packed, seqused_k and paged calls, exact (each sequence alone, the same policy: the dense
 * warp-specialized kernel) and against the float64 reference: page sizes it loads by tensor-map
 * boxes of gcd(page size, 128) rows (8, 16, 24, 64, 128, 192, 256: boxes of 8..128 rows, pages
 * shuffled and shared, boxes past Sk_b) and page sizes it declines (1, 100: the cp.async kernel
 * runs); sequences of 0 and 1 rows and keys beside ones of several query and key blocks; GQA
 * (8/8, 8/2, 8/1); every mask kind; unused packed keys poisoned with NaN/Inf (the producer loads
 * them in boundary blocks: the mask hides their scores, the V guard their values). On a GPU
 * other than sm_90 the same cases run on the other kernels. Returns the number of cases. */
static int ws_cases(void) {
    static const int wps[9] = {1, 8, 16, 24, 64, 100, 128, 192, 256};
    static const int wsq[6] = {300, 0, 1, 129, 17, 640}, wsk[6] = {700, 1, 0, 300, 129, 513};
    struct { fa_causal c; int64_t wl, wr; fa_align al; } masks[5] = {
        {FA_CAUSAL_NONE, -1, -1, FA_ALIGN_TOP_LEFT},     {FA_CAUSAL_BOTTOM_RIGHT, -1, -1, FA_ALIGN_TOP_LEFT},
        {FA_CAUSAL_TOP_LEFT, -1, -1, FA_ALIGN_TOP_LEFT}, {FA_CAUSAL_NONE, 150, 40, FA_ALIGN_BOTTOM_RIGHT},
        {FA_CAUSAL_BOTTOM_RIGHT, 200, -1, FA_ALIGN_TOP_LEFT}};
    int n = 0, npaged = 0;
    for (int di = 0; di < 2; ++di)
        for (int bf = 0; bf < 2; ++bf)
            for (int mi = 0; mi < 5; ++mi)
                for (int lay = 0; lay < 3; ++lay) {
                    v3_case c;
                    memset(&c, 0, sizeof(c));
                    c.B = 6, c.Hq = 8, c.Hkv = mi % 3 == 0 ? 8 : (mi % 3 == 1 ? 2 : 1), c.D = di ? 128 : 64, c.bf16 = bf;
                    c.causal = masks[mi].c, c.wl = masks[mi].wl, c.wr = masks[mi].wr, c.align = masks[mi].al;
                    for (int b = 0; b < 6; ++b) c.sq[b] = wsq[(b + mi) % 6], c.sk_alloc[b] = wsk[(b + lay + di) % 6];
                    c.varlen_q = 1;
                    c.amp = 1.0;
                    if (lay == 0) {
                        c.name = "ws varlen q+k";
                        c.varlen_k = 1;
                        for (int b = 0; b < 6; ++b) c.used[b] = c.sk_alloc[b];
                    } else if (lay == 1) {
                        c.name = "ws varlen q+k, seqused_k, unused keys NaN/Inf";
                        c.varlen_k = 1, c.use_used = 1, c.poison = 1;
                        for (int b = 0; b < 6; ++b) c.used[b] = (int)(c.sk_alloc[b] * (0.5 + 0.5 * urand()));
                    } else {
                        c.name = "ws paged, seqused_k";
                        c.page_size = wps[npaged++ % 9];
                        c.use_used = 1;
                        for (int b = 0; b < 6; ++b) c.used[b] = c.sk_alloc[b] - (int)(c.sk_alloc[b] * urand() * 0.3);
                    }
                    run_case(&c, &pol_ws, 1, 1);
                    ++n;
                }
    return n;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* each section's line reaches a log even if the run is cut short */
    int ws_only = 0, decode_only = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) ++i; /* OMP_NUM_THREADS decides; kept for symmetry */
        else if (!strcmp(argv[i], "--ws-only")) ws_only = 1; /* only ws_cases (a short device call) */
        else if (!strcmp(argv[i], "--decode-only")) decode_only = 1; /* only the decode cases (Sq <= 16) */
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "fwd_v3_test: no CUDA device\n");
        return 2;
    }
    pol_default = fa_cuda_policy_default;
    for (int k = 0; k < 3; ++k) {
        pol_exact[k] = fa_cuda_policy_default;
        pol_exact[k].fwd_no_decode = 1;
    }
    pol_exact[0].fwd_sm90 = 1;     /* wgmma kernel at padded 64 and 128 on an sm_90 device */
    pol_exact[1].fwd_sm90 = 0, pol_exact[1].fwd_family = 0;
    pol_exact[2].fwd_sm90 = 0, pol_exact[2].fwd_family = 1;
    pol_ws = fa_cuda_policy_default;
    pol_ws.fwd_no_decode = 1;
    {
        const int nws = decode_only ? 0 : ws_cases();
        printf("warp-specialized kernel, packed / seqused_k / paged: %d cases, %ld failed so far\n", nws, n_failed);
        if (ws_only) {
            printf("fwd_v3_test: %ld calls checked, %ld failed\n", n_checked, n_failed);
            return n_failed ? 1 : 0;
        }
    }

    /* ---- exact + reference: packed, seqused, paged; every mask kind; softcap, sinks */
    static const int sqs[5] = {37, 0, 1, 200, 130}, sks[5] = {300, 1, 0, 129, 257};
    static const int pss[6] = {1, 3, 16, 64, 128, 256};
    struct { fa_causal c; int64_t wl, wr; fa_align al; } masks[5] = {
        {FA_CAUSAL_NONE, -1, -1, FA_ALIGN_TOP_LEFT},     {FA_CAUSAL_BOTTOM_RIGHT, -1, -1, FA_ALIGN_TOP_LEFT},
        {FA_CAUSAL_TOP_LEFT, -1, -1, FA_ALIGN_TOP_LEFT}, {FA_CAUSAL_NONE, 17, 5, FA_ALIGN_BOTTOM_RIGHT},
        {FA_CAUSAL_BOTTOM_RIGHT, 40, -1, FA_ALIGN_TOP_LEFT}};
    static const int dims[4] = {64, 128, 96, 256};
    int ncase = 0;
    for (int pk = 0; pk < (decode_only ? 0 : 3); ++pk)
        for (int di = 0; di < 4; ++di) {
            if (pk == 0 && di >= 2) continue; /* the wgmma kernel: padded 64 and 128 */
            for (int bf = 0; bf < 2; ++bf)
                for (int mi = 0; mi < 5; ++mi)
                    for (int lay = 0; lay < 3; ++lay) {
                        v3_case c;
                        memset(&c, 0, sizeof(c));
                        c.B = 5, c.Hq = 4, c.Hkv = (mi & 1) ? 2 : 4, c.D = dims[di], c.bf16 = bf;
                        c.causal = masks[mi].c, c.wl = masks[mi].wl, c.wr = masks[mi].wr, c.align = masks[mi].al;
                        for (int b = 0; b < 5; ++b) c.sq[b] = sqs[(b + mi) % 5], c.sk_alloc[b] = sks[(b + lay) % 5];
                        c.varlen_q = 1;
                        c.amp = 1.0;
                        c.softcap = (ncase % 3 == 1) ? 1.5f : 0.0f;
                        c.sinks = (ncase % 4) == 2;
                        if (c.softcap > 0) c.amp = 4.0;
                        if (lay == 0) {
                            c.name = "varlen q+k";
                            c.varlen_k = 1;
                            for (int b = 0; b < 5; ++b) c.used[b] = c.sk_alloc[b];
                        } else if (lay == 1) {
                            c.name = "varlen q+k, seqused_k";
                            c.varlen_k = 1, c.use_used = 1;
                            for (int b = 0; b < 5; ++b) c.used[b] = (int)(c.sk_alloc[b] * urand());
                        } else {
                            c.name = "paged, seqused_k";
                            c.page_size = pss[(ncase + di) % 6];
                            c.use_used = 1;
                            for (int b = 0; b < 5; ++b) c.used[b] = c.sk_alloc[b] - (int)(c.sk_alloc[b] * urand() * 0.3);
                        }
                        run_case(&c, &pol_exact[pk], 1, pk == 0 || (ncase % 2) == 0);
                        ++ncase;
                    }
        }
    printf("exact + reference: %d cases (%s / %s / %s), %ld failed so far\n", ncase, pol_name[0], pol_name[1],
           pol_name[2], n_failed);

    /* ---- Dqk != Dv: the MLA pair 192/128 (fwd_pair_tiles, both families; the sm90 policy runs the
       default family there) and pairs on the larger dim's tile (128/64, 64/128, 136/72): exact +
       reference, every mask kind and layout, softcap and sinks rotating */
    int npair = 0;
    static const int pdq[4] = {192, 192, 128, 64}, pdv[4] = {128, 128, 64, 128};
    for (int pk = 0; pk < (decode_only ? 0 : 3); ++pk)
        for (int di = 0; di < 4; ++di) {
            if ((di >= 2 && pk != 1) || (pk == 0 && di != 0)) continue;
            for (int bf = 0; bf < 2; ++bf)
                for (int mi = 0; mi < 5; ++mi)
                    for (int lay = 0; lay < 3; ++lay) {
                        if (di == 1 && (mi + lay) % 2) continue; /* 136/72: half the grid */
                        if (di >= 2 && lay == 1) continue;
                        v3_case c;
                        memset(&c, 0, sizeof(c));
                        c.B = 5, c.Hq = 4, c.Hkv = (mi & 1) ? 2 : 4, c.bf16 = bf;
                        c.D = di == 1 ? 136 : pdq[di], c.Dv = di == 1 ? 72 : pdv[di];
                        c.causal = masks[mi].c, c.wl = masks[mi].wl, c.wr = masks[mi].wr, c.align = masks[mi].al;
                        for (int b = 0; b < 5; ++b) c.sq[b] = sqs[(b + mi) % 5], c.sk_alloc[b] = sks[(b + lay) % 5];
                        c.varlen_q = 1;
                        c.amp = 1.0;
                        c.softcap = (npair % 3 == 1) ? 1.5f : 0.0f;
                        c.sinks = (npair % 4) == 2;
                        if (c.softcap > 0) c.amp = 4.0;
                        if (lay == 0) {
                            c.name = "Dqk != Dv, varlen q+k";
                            c.varlen_k = 1;
                            for (int b = 0; b < 5; ++b) c.used[b] = c.sk_alloc[b];
                        } else if (lay == 1) {
                            c.name = "Dqk != Dv, varlen q+k, seqused_k";
                            c.varlen_k = 1, c.use_used = 1;
                            for (int b = 0; b < 5; ++b) c.used[b] = (int)(c.sk_alloc[b] * urand());
                        } else {
                            c.name = "Dqk != Dv, paged, seqused_k";
                            c.page_size = pss[(npair + di) % 6];
                            c.use_used = 1;
                            for (int b = 0; b < 5; ++b) c.used[b] = c.sk_alloc[b] - (int)(c.sk_alloc[b] * urand() * 0.3);
                        }
                        run_case(&c, &pol_exact[pk], 1, 1);
                        ++npair;
                    }
        }
    /* decode at 192/128 (default policy: the pair's 64-row tile with split-KV and the combine) and
       128/64 (the decode tile of 128 with Dv 64) */
    for (int di = 0; di < 2; ++di)
        for (int qi = 0; qi < 3; ++qi)
            for (int lay = 0; lay < 2; ++lay) {
                v3_case c;
                memset(&c, 0, sizeof(c));
                c.B = 3, c.Hq = 8, c.Hkv = (npair % 2) ? 1 : 2, c.bf16 = npair & 1;
                c.D = di ? 128 : 192, c.Dv = di ? 64 : 128;
                c.causal = (npair % 3 == 0) ? FA_CAUSAL_NONE : FA_CAUSAL_BOTTOM_RIGHT;
                c.wl = -1, c.wr = -1;
                c.amp = 1.0;
                c.softcap = (npair % 4 == 1) ? 2.0f : 0.0f;
                if (c.softcap > 0) c.amp = 4.0;
                c.sinks = (npair % 3) == 1;
                static const int dq3[3] = {1, 4, 16};
                for (int b = 0; b < 3; ++b) {
                    c.sq[b] = dq3[qi];
                    c.sk_alloc[b] = 3000;
                    c.used[b] = b == 2 ? 700 : 3000 - 7 * b;
                }
                c.use_used = 1;
                if (lay == 0) c.name = "Dqk != Dv, decode dense", c.varlen_q = 0;
                else c.name = "Dqk != Dv, decode paged", c.page_size = (npair % 2) ? 16 : 256, c.varlen_q = 1;
                run_case(&c, &pol_default, 0, 1);
                ++npair;
            }
    printf("Dqk != Dv (192/128, 136/72, 128/64, 64/128): %d cases, %ld failed so far\n", npair, n_failed);

    /* ---- decode (default policy: decode tile, split-KV, combine) against the float64 reference,
     * and bitwise against the general kernel's decode tile (pol_twin) */
    fa_cuda_policy pol_general = fa_cuda_policy_default;
    pol_general.fwd_decode_general = 1;
    pol_twin = &pol_general;
    int ndec = 0;
    static const int dsq[3] = {1, 4, 16}, dsk[3] = {1000, 4096, 20000};
    for (int di = 0; di < 2; ++di)
        for (int qi = 0; qi < 3; ++qi)
            for (int ki = 0; ki < 3; ++ki)
                for (int lay = 0; lay < 2; ++lay) {
                    v3_case c;
                    memset(&c, 0, sizeof(c));
                    /* GQA groups 4 and 8: the decode tile packs the group's heads into its rows */
                    c.B = 3, c.Hq = 8, c.Hkv = (ndec % 4 == 3) ? 1 : 2, c.D = di ? 128 : 64, c.bf16 = (ndec & 1);
                    c.causal = (ndec % 3 == 0) ? FA_CAUSAL_NONE : FA_CAUSAL_BOTTOM_RIGHT;
                    c.wl = (ndec % 5 == 4) ? 700 : -1, c.wr = -1;
                    c.amp = 1.0;
                    c.softcap = (ndec % 4 == 1) ? 2.0f : 0.0f;
                    if (c.softcap > 0) c.amp = 4.0;
                    c.sinks = (ndec % 3) == 1;
                    for (int b = 0; b < 3; ++b) {
                        c.sq[b] = dsq[qi];
                        c.sk_alloc[b] = dsk[ki];
                        c.used[b] = b == 2 ? (ki == 0 ? 0 : dsk[ki] / 3) : dsk[ki] - 7 * b; /* one empty cache */
                    }
                    c.use_used = 1;
                    if (lay == 0) c.name = "decode dense", c.varlen_q = 0;
                    else c.name = "decode paged", c.page_size = (ndec % 2) ? 16 : 256, c.varlen_q = 1;
                    /* packed queries of unequal lengths (Sq_b < Sqmax): packed rows stride by Sqmax */
                    if (lay == 1 && dsq[qi] > 1)
                        for (int b = 0; b < 3; ++b) c.sq[b] = dsq[qi] - b;
                    run_case(&c, &pol_default, 0, 1);
                    ++ndec;
                }
    printf("decode (split-KV + combine; twin: the general kernel's decode tile, bitwise): %d cases\n", ndec);
    /* ---- decode with the split count pinned (testing.h fwd_split): no split, a few splits, more
     * splits than the combine has threads, the most the rule admits (fwd_split_max = 256 at
     * 33000 keys: 516 blocks of 64, 2 a split); one cache shorter (its last splits see no key) */
    static const int forced[6] = {-1, 2, 7, 65, 130, 256};
    int nforced = 0;
    for (int fi = 0; fi < 6; ++fi)
        for (int qi = 0; qi < 2; ++qi) {
            fa_cuda_policy pol = fa_cuda_policy_default;
            pol.fwd_split = forced[fi];
            pol_general.fwd_split = forced[fi];
            v3_case c;
            memset(&c, 0, sizeof(c));
            c.B = 2, c.Hq = 8, c.Hkv = qi ? 8 : 2, c.D = (fi & 1) ? 64 : 128, c.bf16 = (fi + qi) & 1;
            c.causal = qi ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
            c.wl = c.wr = -1;
            c.amp = 1.0;
            c.sinks = fi == 3;
            for (int b = 0; b < 2; ++b) c.sq[b] = qi ? 3 : 1, c.sk_alloc[b] = 33000, c.used[b] = b ? 20000 : 33000;
            c.use_used = 1;
            c.name = "decode, split count pinned";
            run_case(&c, &pol, 0, 1);
            ++nforced;
        }
    printf("decode (split count pinned: -1, 2, 7, 65, 130, 256; twin as above): %d cases\n", nforced);
    pol_twin = NULL;
    /* ---- backward with sinks: dsinks and dQ, dK, dV */
    int nb = 0;
    for (int bf = 0; bf < (decode_only ? 0 : 2); ++bf)
        for (int di = 0; di < 2; ++di)
            for (int causal = 0; causal < 2; ++causal) {
                n_failed += bwd_sinks_case(bf, di ? 128 : 64, di ? 128 : 64, causal);
                ++n_checked, ++nb;
            }
    /* the MLA pair 192/128 (its own backward kernels) */
    for (int bf = 0; bf < (decode_only ? 0 : 2); ++bf)
        for (int causal = 0; causal < 2; ++causal) {
            n_failed += bwd_sinks_case(bf, 192, 128, causal);
            ++n_checked, ++nb;
        }
    printf("backward with sinks: %d cases\n", nb);
    printf("fwd_v3_test: %ld calls checked, %ld failed\n", n_checked, n_failed);
    return n_failed ? 1 : 0;
}
