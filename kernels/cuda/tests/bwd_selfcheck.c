/* bwd_selfcheck.c: a quick GPU smoke check of fa_cuda_backward against a
 * double-precision reference written here (independent of the kernel code).
 *
 * This is NOT the certification (that is bwd_gpu_test.c with the oracle's
 * per-element bounds); it is the fast check used while developing and under
 * compute-sanitizer. Its pass rule is a normwise one:
 *   max_e |kernel - ref| <= tol * max_e |ref| + tiny,  tol = 8 u(dtype)
 * (u = 2^-8 bf16, 2^-11 fp16: the outputs are rounded once (u/2) and the
 * operands of each product are rounded once (P, dS: u/2 each), so a correct
 * kernel sits at a few u; an indexing or masking bug gives O(1)).
 * Exact checks: dQ rows with no visible key are exactly 0; dK/dV columns seen
 * by no query are exactly 0; no NaN anywhere; the deterministic mode repeated
 * gives identical bits; inputs are not modified; outputs are fully written.
 *
 * Usage: bwd_selfcheck [quick|sanitize|det REPS]. Exit status 0 only if every
 * case passed. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"

// ----------------------------------------------------------------------------
// helpers

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

static uint64_t sc_rng = 0x9e3779b97f4a7c15ull;
static double sc_uniform(void) { /* [-1, 1) */
    sc_rng ^= sc_rng << 13; sc_rng ^= sc_rng >> 7; sc_rng ^= sc_rng << 17;
    return (double)(sc_rng >> 11) * 0x1p-52 - 1.0;
}

static float sc_decode(uint16_t h, fa_dtype dt) {
    if (dt == FA_BF16) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m | 1024), e - 25);
    return (float)(s ? -v : v);
}

static uint16_t sc_encode(double x, fa_dtype dt) { /* RN-even, finite inputs in range */
    if (dt == FA_BF16) {
        float f = (float)x; uint32_t u; memcpy(&u, &f, 4);
        u += 0x7fff + ((u >> 16) & 1);
        return (uint16_t)(u >> 16);
    }
    uint16_t s = x < 0 ? 0x8000 : 0;
    double a = fabs(x);
    if (a == 0) return s;
    int e; frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int ex = e - 1;
    if (ex < -14) ex = -14;
    double q = ldexp(a, 10 - ex); /* mantissa units */
    double r = nearbyint(q);
    uint32_t mant = (uint32_t)r;
    if (mant >= 2048) { mant >>= 1; ex++; }
    if (ex > 15) return s | 0x7c00;
    if (mant < 1024) return s | (uint16_t)mant; /* subnormal */
    return s | (uint16_t)(((ex + 15) << 10) | (mant - 1024));
}

// ----------------------------------------------------------------------------
// a case

typedef struct {
    int64_t B, Sq, Sk, Hq, Hkv, D;
    fa_dtype dt;
    fa_causal causal;
    int64_t wl, wr;
    fa_align align;
    int mask_kind;    /* 0 none, 1 random finite with some -inf, 2 broadcast over batch/head with dead rows */
    int noncontig;    /* 1: dO (and dQ) in [B, H, S, D] order with padding; Q,K,V from a fused QKV */
    int misalign;     /* 1: pointers offset by one element (2-byte aligned only) */
    int det;
} sc_case;

static int sc_visible(const sc_case *c, int64_t i, int64_t j) {
    int br = c->causal != FA_CAUSAL_NONE ? c->causal == FA_CAUSAL_BOTTOM_RIGHT : c->align == FA_ALIGN_BOTTOM_RIGHT;
    int64_t diag = br ? i + c->Sk - c->Sq : i;
    if (c->causal != FA_CAUSAL_NONE && j > diag) return 0;
    if (c->wl >= 0 && j < diag - c->wl) return 0;
    if (c->wr >= 0 && j > diag + c->wr) return 0;
    return 1;
}

typedef struct { double max_err, max_ref; int64_t nan, nonzero_dead; } sc_err;

static void sc_acc(sc_err *e, double k, double r) {
    if (isnan(k) || isinf(k)) { e->nan++; return; }
    double d = fabs(k - r);
    if (d > e->max_err) e->max_err = d;
    if (fabs(r) > e->max_ref) e->max_ref = fabs(r);
}

/* Run one case; returns 1 on pass. reps > 1: deterministic repetition check. */
static int sc_run(const sc_case *c, int reps, int check) {
    const int64_t B = c->B, Sq = c->Sq, Sk = c->Sk, Hq = c->Hq, Hkv = c->Hkv, D = c->D, g = Hq / Hkv;
    const double scale = 1.0 / sqrt((double)D);
    const fa_dtype dt = c->dt;
    const int64_t mis = c->misalign ? 1 : 0;
    /* host tensors, contiguous logical [B, S, H, D] */
    const int64_t nq = B * Sq * Hq * D, nk = B * Sk * Hkv * D;
    uint16_t *hq = malloc(2 * (nq + 1)), *hk = malloc(2 * (nk + 1)), *hv = malloc(2 * (nk + 1));
    uint16_t *ho = malloc(2 * (nq + 1)), *hdo = malloc(2 * (nq + 1));
    float *hlse = malloc(4 * (B * Hq * Sq + 1));
    float *hmask = NULL;
    int64_t mst[4] = {0, 0, 0, 0};
    for (int64_t x = 0; x < nq; x++) hq[x] = sc_encode(sc_uniform(), dt);
    for (int64_t x = 0; x < nk; x++) hk[x] = sc_encode(sc_uniform(), dt);
    for (int64_t x = 0; x < nk; x++) hv[x] = sc_encode(sc_uniform(), dt);
    for (int64_t x = 0; x < nq; x++) hdo[x] = sc_encode(sc_uniform(), dt);
    if (c->mask_kind == 1) {
        int64_t n = B * Hq * Sq * Sk;
        hmask = malloc(4 * (n + 1));
        for (int64_t x = 0; x < n; x++) {
            double u = sc_uniform();
            hmask[x] = u < -0.8 ? -INFINITY : (float)(2.0 * u);
        }
        mst[0] = Hq * Sq * Sk; mst[1] = Sq * Sk; mst[2] = Sk; mst[3] = 1;
    } else if (c->mask_kind == 2) {
        int64_t n = Sq * Sk;
        hmask = malloc(4 * (n + 1));
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t j = 0; j < Sk; j++)
                hmask[i * Sk + j] = (i % 5 == 3) ? -INFINITY : (j % 3 == 0 ? -INFINITY : (float)sc_uniform());
        mst[2] = Sk; mst[3] = 1;
    }
#define QI(b, s, h, d) ((((b) * Sq + (s)) * Hq + (h)) * D + (d))
#define KI(b, s, h, d) ((((b) * Sk + (s)) * Hkv + (h)) * D + (d))
    /* reference forward (double) -> O rounded, LSE as float; P row cache per row */
    double *lse_d = malloc(8 * (B * Hq * Sq + 1)), *dsum = malloc(8 * (B * Hq * Sq + 1));
    double *srow = malloc(8 * (Sk + 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Sq; i++) {
                int64_t hk_ = h / g;
                double m = -INFINITY;
                for (int64_t j = 0; j < Sk; j++) {
                    double s = -INFINITY;
                    float mv = hmask ? hmask[b * mst[0] + h * mst[1] + i * mst[2] + j * mst[3]] : 0.f;
                    if (sc_visible(c, i, j) && mv != -INFINITY) {
                        double dot = 0;
                        for (int64_t d = 0; d < D; d++)
                            dot += (double)sc_decode(hq[QI(b, i, h, d)], dt) * sc_decode(hk[KI(b, j, hk_, d)], dt);
                        s = scale * dot + mv;
                    }
                    srow[j] = s;
                    if (s > m) m = s;
                }
                double l = 0;
                for (int64_t j = 0; j < Sk; j++) l += srow[j] == -INFINITY ? 0 : exp(srow[j] - m);
                double lse = m == -INFINITY ? -INFINITY : m + log(l);
                lse_d[(b * Hq + h) * Sq + i] = lse;
                hlse[(b * Hq + h) * Sq + i] = (float)lse;
                double ds = 0;
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    if (m != -INFINITY)
                        for (int64_t j = 0; j < Sk; j++)
                            if (srow[j] != -INFINITY) o += exp(srow[j] - lse) * sc_decode(hv[KI(b, j, hk_, d)], dt);
                    ho[QI(b, i, h, d)] = sc_encode(o, dt);
                    ds += (double)sc_decode(ho[QI(b, i, h, d)], dt) * sc_decode(hdo[QI(b, i, h, d)], dt);
                }
                dsum[(b * Hq + h) * Sq + i] = ds;
            }
    /* device buffers. Q, K, V: fused [B, S, Hq+2Hkv... ] when noncontig (needs Sq == Sk),
     * else separate contiguous. dO/dQ noncontig: [B, H, S, D+8] */
    fa_bwd_args a;
    memset(&a, 0, sizeof(a));
    a.p.batch = B; a.p.seqlen_q = Sq; a.p.seqlen_k = Sk; a.p.heads_q = Hq; a.p.heads_kv = Hkv;
    a.p.head_dim_qk = D; a.p.head_dim_v = D; a.p.dtype = dt; a.p.softmax_scale = 0;
    a.p.causal = c->causal; a.p.window_left = c->wl; a.p.window_right = c->wr; a.p.window_align = c->align;
    a.deterministic = c->det;
    uint16_t *dq_, *dk_, *dv_, *dqkv = NULL, *dqd, *dkd, *dvd, *dod, *dod_, *dO_dev;
    (void)dO_dev;
    int64_t nqpad = c->noncontig ? B * Hq * Sq * (D + 8) : nq;
    int fused = c->noncontig && Sq == Sk;
    if (fused) {
        int64_t W = (Hq + 2 * Hkv) * D, n = B * Sq * W;
        CK(cudaMalloc((void **)&dqkv, 2 * (n + 8)));
        uint16_t *tmp = malloc(2 * n);
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < Sq; s++) {
                memcpy(tmp + (b * Sq + s) * W, hq + QI(b, s, 0, 0), 2 * Hq * D);
                memcpy(tmp + (b * Sq + s) * W + Hq * D, hk + KI(b, s, 0, 0), 2 * Hkv * D);
                memcpy(tmp + (b * Sq + s) * W + (Hq + Hkv) * D, hv + KI(b, s, 0, 0), 2 * Hkv * D);
            }
        CK(cudaMemcpy(dqkv + mis, tmp, 2 * n, cudaMemcpyHostToDevice));
        free(tmp);
        a.q.ptr = dqkv + mis; a.k.ptr = dqkv + mis + Hq * D; a.v.ptr = dqkv + mis + (Hq + Hkv) * D;
        a.q.stride[0] = a.k.stride[0] = a.v.stride[0] = Sq * W;
        a.q.stride[1] = a.k.stride[1] = a.v.stride[1] = W;
        a.q.stride[2] = a.k.stride[2] = a.v.stride[2] = D;
        a.q.stride[3] = a.k.stride[3] = a.v.stride[3] = 1;
        dqd = dkd = dvd = NULL;
    } else {
        CK(cudaMalloc((void **)&dqd, 2 * (nq + 8))); CK(cudaMalloc((void **)&dkd, 2 * (nk + 8)));
        CK(cudaMalloc((void **)&dvd, 2 * (nk + 8)));
        CK(cudaMemcpy(dqd + mis, hq, 2 * nq, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dkd + mis, hk, 2 * nk, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dvd + mis, hv, 2 * nk, cudaMemcpyHostToDevice));
        a.q.ptr = dqd + mis; a.k.ptr = dkd + mis; a.v.ptr = dvd + mis;
        int64_t qs[4] = {Sq * Hq * D, Hq * D, D, 1}, ks[4] = {Sk * Hkv * D, Hkv * D, D, 1};
        memcpy(a.q.stride, qs, 32); memcpy(a.k.stride, ks, 32); memcpy(a.v.stride, ks, 32);
    }
    uint16_t *dout_d;
    CK(cudaMalloc((void **)&dod, 2 * (nq + 8)));
    CK(cudaMemcpy(dod + mis, ho, 2 * nq, cudaMemcpyHostToDevice));
    a.o.ptr = dod + mis;
    { int64_t s[4] = {Sq * Hq * D, Hq * D, D, 1}; memcpy(a.o.stride, s, 32); }
    CK(cudaMalloc((void **)&dout_d, 2 * (nqpad + 8)));
    if (c->noncontig) {
        uint16_t *tmp = malloc(2 * (nqpad + 1));
        for (int64_t x = 0; x < nqpad; x++) tmp[x] = 0x7fff; /* NaN in the padding */
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t s = 0; s < Sq; s++)
                    memcpy(tmp + ((b * Hq + h) * Sq + s) * (D + 8), hdo + QI(b, s, h, 0), 2 * D);
        CK(cudaMemcpy(dout_d + mis, tmp, 2 * nqpad, cudaMemcpyHostToDevice));
        free(tmp);
        int64_t s[4] = {Hq * Sq * (D + 8), D + 8, Sq * (D + 8), 1};
        memcpy(a.dout.stride, s, 32);
    } else {
        CK(cudaMemcpy(dout_d + mis, hdo, 2 * nq, cudaMemcpyHostToDevice));
        int64_t s[4] = {Sq * Hq * D, Hq * D, D, 1};
        memcpy(a.dout.stride, s, 32);
    }
    a.dout.ptr = dout_d + mis;
    float *lse_dev, *mask_dev = NULL;
    CK(cudaMalloc((void **)&lse_dev, 4 * (B * Hq * Sq + 1)));
    CK(cudaMemcpy(lse_dev, hlse, 4 * B * Hq * Sq, cudaMemcpyHostToDevice));
    a.lse.ptr = lse_dev; a.lse.stride[0] = Hq * Sq; a.lse.stride[1] = Sq; a.lse.stride[2] = 1;
    if (hmask) {
        int64_t n = c->mask_kind == 1 ? B * Hq * Sq * Sk : Sq * Sk;
        CK(cudaMalloc((void **)&mask_dev, 4 * (n + 1)));
        CK(cudaMemcpy(mask_dev, hmask, 4 * n, cudaMemcpyHostToDevice));
        a.mask.ptr = mask_dev; memcpy(a.mask.stride, mst, 32);
    }
    /* outputs: dQ in the same layout as dO; dK, dV contiguous; poisoned with 0xffff (NaN) */
    CK(cudaMalloc((void **)&dq_, 2 * (nqpad + 8))); CK(cudaMalloc((void **)&dk_, 2 * (nk + 8)));
    CK(cudaMalloc((void **)&dv_, 2 * (nk + 8)));
    a.dq.ptr = dq_ + mis; memcpy(a.dq.stride, a.dout.stride, 32);
    a.dk.ptr = dk_ + mis; a.dv.ptr = dv_ + mis;
    { int64_t s[4] = {Sk * Hkv * D, Hkv * D, D, 1}; memcpy(a.dk.stride, s, 32); memcpy(a.dv.stride, s, 32); }

    uint16_t *rq = malloc(2 * (nqpad + 1)), *rk = malloc(2 * (nk + 1)), *rv = malloc(2 * (nk + 1));
    uint16_t *fq = malloc(2 * (nqpad + 1)), *fk = malloc(2 * (nk + 1)), *fv = malloc(2 * (nk + 1));
    int ok = 1;
    for (int rep = 0; rep < reps; rep++) {
        CK(cudaMemset(dq_, 0xff, 2 * (nqpad + 8))); CK(cudaMemset(dk_, 0xff, 2 * (nk + 8)));
        CK(cudaMemset(dv_, 0xff, 2 * (nk + 8)));
        fa_error err;
        fa_status st = fa_cuda_backward(&a, &err);
        if (st != FA_OK) { fprintf(stderr, "backward failed: %s [%s] %s\n", fa_status_name(st), err.arg, err.msg); ok = 0; break; }
        CK(cudaMemcpy(rq, dq_ + mis, 2 * nqpad, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(rk, dk_ + mis, 2 * nk, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(rv, dv_ + mis, 2 * nk, cudaMemcpyDeviceToHost));
        if (rep == 0) { memcpy(fq, rq, 2 * nqpad); memcpy(fk, rk, 2 * nk); memcpy(fv, rv, 2 * nk); }
        else if (memcmp(fq, rq, 2 * nqpad) || memcmp(fk, rk, 2 * nk) || memcmp(fv, rv, 2 * nk)) {
            fprintf(stderr, "deterministic mode: repetition %d differs from the first\n", rep);
            ok = 0; break;
        }
    }
    if (ok && c->noncontig) { /* padding of dQ untouched */
        for (int64_t b = 0; b < B && ok; b++)
            for (int64_t h = 0; h < Hq && ok; h++)
                for (int64_t s = 0; s < Sq && ok; s++)
                    for (int d = 0; d < 8; d++)
                        if (rq[((b * Hq + h) * Sq + s) * (D + 8) + D + d] != 0xffff) { fprintf(stderr, "dQ padding written\n"); ok = 0; break; }
    }
    sc_err eq = {0}, ek = {0}, ev = {0};
    if (ok && check) {
        /* sampled reference gradients: rows of dQ, columns of dK/dV (all when small) */
        const int64_t rstep = (Sq > 300) ? Sq / 97 + 1 : 1, cstep = (Sk > 300) ? Sk / 89 + 1 : 1;
        double *gq = malloc(8 * D), *gk = malloc(8 * D), *gv = malloc(8 * D);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < Sq; i += rstep) {
                    int64_t hk_ = h / g;
                    double lse = lse_d[(b * Hq + h) * Sq + i];
                    for (int64_t d = 0; d < D; d++) gq[d] = 0;
                    for (int64_t j = 0; j < Sk && lse != -INFINITY; j++) {
                        float mv = hmask ? hmask[b * mst[0] + h * mst[1] + i * mst[2] + j * mst[3]] : 0.f;
                        if (!sc_visible(c, i, j) || mv == -INFINITY) continue;
                        double dot = 0, dp = 0;
                        for (int64_t d = 0; d < D; d++) {
                            dot += (double)sc_decode(hq[QI(b, i, h, d)], dt) * sc_decode(hk[KI(b, j, hk_, d)], dt);
                            dp += (double)sc_decode(hdo[QI(b, i, h, d)], dt) * sc_decode(hv[KI(b, j, hk_, d)], dt);
                        }
                        double p = exp(scale * dot + mv - lse);
                        double ds = p * (dp - dsum[(b * Hq + h) * Sq + i]);
                        for (int64_t d = 0; d < D; d++) gq[d] += scale * ds * sc_decode(hk[KI(b, j, hk_, d)], dt);
                    }
                    const int64_t base = c->noncontig ? ((b * Hq + h) * Sq + i) * (D + 8) : QI(b, i, h, 0);
                    for (int64_t d = 0; d < D; d++) {
                        double kv = sc_decode(rq[base + d], dt);
                        if (lse == -INFINITY && kv != 0) eq.nonzero_dead++;
                        sc_acc(&eq, kv, gq[d]);
                    }
                }
        for (int64_t b = 0; b < B; b++)
            for (int64_t hk_ = 0; hk_ < Hkv; hk_++)
                for (int64_t j = 0; j < Sk; j += cstep) {
                    for (int64_t d = 0; d < D; d++) gk[d] = gv[d] = 0;
                    int seen = 0;
                    for (int64_t h = hk_ * g; h < (hk_ + 1) * g; h++)
                        for (int64_t i = 0; i < Sq; i++) {
                            double lse = lse_d[(b * Hq + h) * Sq + i];
                            float mv = hmask ? hmask[b * mst[0] + h * mst[1] + i * mst[2] + j * mst[3]] : 0.f;
                            if (lse == -INFINITY || !sc_visible(c, i, j) || mv == -INFINITY) continue;
                            seen = 1;
                            double dot = 0, dp = 0;
                            for (int64_t d = 0; d < D; d++) {
                                dot += (double)sc_decode(hq[QI(b, i, h, d)], dt) * sc_decode(hk[KI(b, j, hk_, d)], dt);
                                dp += (double)sc_decode(hdo[QI(b, i, h, d)], dt) * sc_decode(hv[KI(b, j, hk_, d)], dt);
                            }
                            double p = exp(scale * dot + mv - lse);
                            double ds = p * (dp - dsum[(b * Hq + h) * Sq + i]);
                            for (int64_t d = 0; d < D; d++) {
                                gk[d] += scale * ds * sc_decode(hq[QI(b, i, h, d)], dt);
                                gv[d] += p * sc_decode(hdo[QI(b, i, h, d)], dt);
                            }
                        }
                    for (int64_t d = 0; d < D; d++) {
                        double kk = sc_decode(rk[KI(b, j, hk_, d)], dt), vv = sc_decode(rv[KI(b, j, hk_, d)], dt);
                        if (!seen && (kk != 0 || vv != 0)) ek.nonzero_dead++;
                        sc_acc(&ek, kk, gk[d]);
                        sc_acc(&ev, vv, gv[d]);
                    }
                }
        free(gq); free(gk); free(gv);
        const double tol = 8 * (dt == FA_BF16 ? 0x1p-8 : 0x1p-11);
        sc_err *es[3] = {&eq, &ek, &ev};
        for (int x = 0; x < 3; x++)
            if (es[x]->nan || es[x]->nonzero_dead || es[x]->max_err > tol * es[x]->max_ref + 1e-6) ok = 0;
    }
    printf("%s B%lld Sq%lld Sk%lld Hq%lld Hkv%lld D%lld %s causal%d wl%lld wr%lld al%d mask%d nc%d mis%d det%d reps%d | "
           "dq %.2e/%.2e dk %.2e/%.2e dv %.2e/%.2e nan %lld/%lld/%lld dead %lld/%lld\n",
           ok ? "PASS" : "FAIL", (long long)B, (long long)Sq, (long long)Sk, (long long)Hq, (long long)Hkv, (long long)D,
           dt == FA_BF16 ? "bf16" : "fp16", (int)c->causal, (long long)c->wl, (long long)c->wr, (int)c->align,
           c->mask_kind, c->noncontig, c->misalign, c->det, reps, eq.max_err, eq.max_ref, ek.max_err, ek.max_ref,
           ev.max_err, ev.max_ref, (long long)eq.nan, (long long)ek.nan, (long long)ev.nan,
           (long long)eq.nonzero_dead, (long long)ek.nonzero_dead);
    fflush(stdout);
    cudaFree(dq_); cudaFree(dk_); cudaFree(dv_); cudaFree(dout_d); cudaFree(dod); cudaFree(lse_dev);
    if (mask_dev) cudaFree(mask_dev);
    if (fused) cudaFree(dqkv); else { cudaFree(dqd); cudaFree(dkd); cudaFree(dvd); }
    free(hq); free(hk); free(hv); free(ho); free(hdo); free(hlse); free(hmask); free(lse_d); free(dsum); free(srow);
    free(rq); free(rk); free(rv); free(fq); free(fk); free(fv);
    return ok;
}

// ----------------------------------------------------------------------------
// case lists

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "quick";
    int fails = 0, n = 0;
    if (!strcmp(mode, "det")) {
        int reps = argc > 2 ? atoi(argv[2]) : 50;
        sc_case c1 = {16, 200, 333, 8, 2, 128, FA_BF16, FA_CAUSAL_NONE, -1, -1, FA_ALIGN_TOP_LEFT, 0, 0, 0, 1};
        sc_case c2 = {32, 97, 129, 4, 4, 64, FA_F16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1, FA_ALIGN_TOP_LEFT, 1, 0, 0, 1};
        sc_case c3 = {4, 130, 130, 2, 1, 256, FA_BF16, FA_CAUSAL_NONE, 40, 7, FA_ALIGN_BOTTOM_RIGHT, 0, 1, 0, 1};
        fails += !sc_run(&c1, reps, 0); fails += !sc_run(&c2, reps, 0); fails += !sc_run(&c3, reps, 0);
        n = 3;
    } else {
        int sanitize = !strcmp(mode, "sanitize");
        static const int64_t seqs[][2] = {{1, 1}, {3, 17}, {17, 3}, {63, 65}, {64, 64}, {65, 63}, {97, 113},
                                          {128, 127}, {239, 513}, {513, 239}, {0, 5}, {5, 0}};
        static const int64_t dims[] = {8, 64, 72, 128, 136, 256};
        int ns = sizeof(seqs) / sizeof(seqs[0]);
        for (int s = 0; s < ns; s++) {
            if (sanitize && !(s == 0 || s == 2 || s == 5 || s == 6 || s == 10 || s == 11)) continue;
            for (int di = 0; di < 6; di++) {
                if (sanitize && !(di == 0 || di == 2 || di == 5)) continue;
                for (int var = 0; var < 3; var++) {
                    sc_case c;
                    memset(&c, 0, sizeof(c));
                    c.B = 2; c.Sq = seqs[s][0]; c.Sk = seqs[s][1]; c.D = dims[di];
                    /* GQA ratios 1, 2, 8 */
                    c.Hkv = var == 2 ? 1 : 2; c.Hq = var == 0 ? 2 : (var == 1 ? 4 : 8);
                    c.dt = (s + di + var) % 2 ? FA_BF16 : FA_F16;
                    c.causal = (fa_causal)((s + var) % 3);
                    c.wl = c.wr = -1;
                    if ((s + di) % 4 == 1) { c.wl = 5 + s; c.wr = (var == 1) ? 3 : -1; c.align = (fa_align)(di % 2); }
                    c.mask_kind = (s + di + var) % 3;
                    c.noncontig = (s + var) % 2;
                    c.misalign = (s + di + var) % 5 == 0;
                    c.det = (s * 7 + di + var) % 2;
                    if (sanitize && var == 2) continue;
                    n++;
                    fails += !sc_run(&c, c.det ? 2 : 1, 1);
                }
            }
        }
        if (!sanitize) { /* a few large ones, sampled */
            sc_case big[] = {
                {1, 1025, 2048, 4, 2, 128, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1, FA_ALIGN_TOP_LEFT, 0, 1, 0, 0},
                {1, 2048, 1023, 2, 2, 64, FA_F16, FA_CAUSAL_TOP_LEFT, -1, -1, FA_ALIGN_TOP_LEFT, 1, 0, 0, 1},
                {1, 799, 4224, 8, 1, 128, FA_BF16, FA_CAUSAL_NONE, 300, 100, FA_ALIGN_BOTTOM_RIGHT, 0, 0, 0, 0},
            };
            for (int x = 0; x < 3; x++) { n++; fails += !sc_run(&big[x], 1, 1); }
        }
    }
    printf("selfcheck %s: %d cases, %d failed\n", mode, n, fails);
    return fails ? 1 : 0;
}
