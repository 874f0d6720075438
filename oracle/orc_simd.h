/* orc_simd.h: the two hot loops of the certified tier, register-blocked with
 * GCC vector extensions (AVX2 + FMA when compiled with -mavx2 -mfma).
 *
 * Rounding: every product here is either exact (fp16/bf16 x fp16/bf16 in
 * double) or one of the rounded products the error analysis already counts
 * (BOUNDS.md section 1: a sum of n rounded products errs <= gamma_{n+1}); a
 * fused multiply-add only removes roundings, so using fma keeps every bound.
 * Summation order: plain recursive per lane, then the lanes are disjoint
 * outputs (no reassociation of one sum). */
#ifndef FLASHCHECK_ORC_SIMD_H
#define FLASHCHECK_ORC_SIMD_H

#include <stdint.h>
#include <string.h>

typedef double orc_v4 __attribute__((vector_size(32)));
typedef int64_t orc_v4i __attribute__((vector_size(32)));

static inline orc_v4 orc_v4_load(const double *p) {
    orc_v4 x;
    memcpy(&x, p, sizeof x);
    return x;
}
static inline void orc_v4_store(double *p, orc_v4 x) { memcpy(p, &x, sizeof x); }
static inline orc_v4 orc_v4_abs(orc_v4 x) {
    const orc_v4i m = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    return (orc_v4)((orc_v4i)x & m);
}
static inline orc_v4 orc_v4_fma(orc_v4 a, orc_v4 b, orc_v4 c) {
#if defined(__FMA__)
    return __builtin_ia32_vfmaddpd256(a, b, c);
#else
    return a * b + c;
#endif
}
static inline orc_v4 orc_v4_set1(double x) { return (orc_v4){x, x, x, x}; }

/* Dot products of nr rows against span columns of a transposed matrix:
 *   S[r*ld_s + t] = sum_d x[r*D + d] * Mt[d*ldm + t]
 *   A[r*ld_s + t] = sum_d |x[r*D + d]| * |Mt[d*ldm + t]|
 *   S2[r*ld_s + t] = sum_d x2[r*D + d] * Mt[d*ldm + t]     (if x2 != NULL)
 * (sums over d in order d = 0..D-1). S, A, S2 are overwritten. */
static inline void orc_dots(int nr, int64_t D, int64_t span, const double *x, const double *x2,
                            const double *Mt, int64_t ldm, double *S, double *A, double *S2, int64_t ld_s) {
    int64_t t = 0;
    for (; t + 8 <= span; t += 8) {
        for (int r = 0; r < nr; r++) {
            orc_v4 s0 = {0}, s1 = {0}, a0 = {0}, a1 = {0}, u0 = {0}, u1 = {0};
            const double *xr = x + r * D, *x2r = x2 ? x2 + r * D : NULL;
            for (int64_t d = 0; d < D; d++) {
                orc_v4 k0 = orc_v4_load(Mt + d * ldm + t), k1 = orc_v4_load(Mt + d * ldm + t + 4);
                orc_v4 qd = orc_v4_set1(xr[d]), aq = orc_v4_set1(fabs(xr[d]));
                s0 = orc_v4_fma(qd, k0, s0);
                s1 = orc_v4_fma(qd, k1, s1);
                a0 = orc_v4_fma(aq, orc_v4_abs(k0), a0);
                a1 = orc_v4_fma(aq, orc_v4_abs(k1), a1);
                if (x2r) {
                    orc_v4 q2 = orc_v4_set1(x2r[d]);
                    u0 = orc_v4_fma(q2, k0, u0);
                    u1 = orc_v4_fma(q2, k1, u1);
                }
            }
            orc_v4_store(S + r * ld_s + t, s0); orc_v4_store(S + r * ld_s + t + 4, s1);
            orc_v4_store(A + r * ld_s + t, a0); orc_v4_store(A + r * ld_s + t + 4, a1);
            if (x2r) { orc_v4_store(S2 + r * ld_s + t, u0); orc_v4_store(S2 + r * ld_s + t + 4, u1); }
        }
    }
    for (; t < span; t++)
        for (int r = 0; r < nr; r++) {
            double s = 0, a = 0, u = 0;
            for (int64_t d = 0; d < D; d++) {
                double k = Mt[d * ldm + t];
                s = fma(x[r * D + d], k, s);
                a = fma(fabs(x[r * D + d]), fabs(k), a);
                if (x2) u = fma(x2[r * D + d], k, u);
            }
            S[r * ld_s + t] = s; A[r * ld_s + t] = a;
            if (x2) S2[r * ld_s + t] = u;
        }
}

/* Running sums of one 8-column chunk, shared by orc_wsum and orc_wsum_p64:
 * s += w0 x, b += w1 |x|, c += w2 |x|, e += w3 x (e only when w3 != NULL).
 * Each is one fma per row in row order: rounding as in the scalar tail loop. */
typedef struct {
    orc_v4 s0, s1, b0, b1, c0, c1, e0, e1;
} orc_wsum8;

static inline void orc_wsum8_add(orc_wsum8 *a, const double *x8, double w0, double w1, double w2,
                                 const double *w3) {
    orc_v4 x0 = orc_v4_load(x8), x1 = orc_v4_load(x8 + 4);
    orc_v4 ax0 = orc_v4_abs(x0), ax1 = orc_v4_abs(x1);
    orc_v4 p = orc_v4_set1(w0), q = orc_v4_set1(w1), r = orc_v4_set1(w2);
    a->s0 = orc_v4_fma(p, x0, a->s0); a->s1 = orc_v4_fma(p, x1, a->s1);
    a->b0 = orc_v4_fma(q, ax0, a->b0); a->b1 = orc_v4_fma(q, ax1, a->b1);
    a->c0 = orc_v4_fma(r, ax0, a->c0); a->c1 = orc_v4_fma(r, ax1, a->c1);
    if (w3) {
        orc_v4 z = orc_v4_set1(*w3);
        a->e0 = orc_v4_fma(z, x0, a->e0); a->e1 = orc_v4_fma(z, x1, a->e1);
    }
}

/* Weighted row sums over n rows of X (row t at X + t*ldx, dim columns),
 * skipping rows with vis[t] == 0 (never read):
 *   o0[d]  = sum_t w0[t] X[t][d]        (OVERWRITTEN: a plain block sum)
 *   o1[d] += sum_t w1[t] |X[t][d]|
 *   o2[d] += sum_t w2[t] |X[t][d]|
 *   o3[d] += sum_t w3[t] X[t][d]        (if w3 != NULL)
 * Weights are read at w*[t * ldw]. */
static inline void orc_wsum(int64_t n, const uint8_t *vis, const double *w0, const double *w1,
                            const double *w2, const double *w3, int64_t ldw, const double *X, int64_t ldx,
                            int64_t dim, double *o0, double *o1, double *o2, double *o3) {
    int64_t d0 = 0;
    for (; d0 + 8 <= dim; d0 += 8) {
        orc_wsum8 a = {{0}};
        for (int64_t t = 0; t < n; t++) {
            if (!vis[t]) continue;
            orc_wsum8_add(&a, X + t * ldx + d0, w0[t * ldw], w1[t * ldw], w2[t * ldw], w3 ? w3 + t * ldw : NULL);
        }
        orc_v4_store(o0 + d0, a.s0); orc_v4_store(o0 + d0 + 4, a.s1);
        orc_v4_store(o1 + d0, orc_v4_load(o1 + d0) + a.b0); orc_v4_store(o1 + d0 + 4, orc_v4_load(o1 + d0 + 4) + a.b1);
        orc_v4_store(o2 + d0, orc_v4_load(o2 + d0) + a.c0); orc_v4_store(o2 + d0 + 4, orc_v4_load(o2 + d0 + 4) + a.c1);
        if (w3) {
            orc_v4_store(o3 + d0, orc_v4_load(o3 + d0) + a.e0);
            orc_v4_store(o3 + d0 + 4, orc_v4_load(o3 + d0 + 4) + a.e1);
        }
    }
    for (; d0 < dim; d0++) {
        double s = 0, b = 0, c = 0, e = 0;
        for (int64_t t = 0; t < n; t++) {
            if (!vis[t]) continue;
            double x = X[t * ldx + d0], ax = fabs(x);
            s = fma(w0[t * ldw], x, s);
            b = fma(w1[t * ldw], ax, b);
            c = fma(w2[t * ldw], ax, c);
            if (w3) e = fma(w3[t * ldw], x, e);
        }
        o0[d0] = s; o1[d0] += b; o2[d0] += c;
        if (w3) o3[d0] += e;
    }
}

// ----------------------------------------------------------------------------
// panel layouts: contiguous, conflict-free streams for the two loops above
//   P8  (dots):  element (j, d) at ((j / 8) * D + d) * 8 + j % 8
//   P64 (wsum):  element (t, d) at ((t / PB) * nch + d / 8) * PB*8 + (t % PB) * 8 + d % 8,
//                PB = ORC_PB rows per block (one block of a chunk fits L1),
//                nch = ceil(dim / 8); padding is zero.

#define ORC_PB 32

static inline size_t orc_p8_size(int64_t n, int64_t D) { return (size_t)((n + 7) / 8) * 8 * (size_t)D; }
static inline size_t orc_p8_at(int64_t j, int64_t d, int64_t D) { return (size_t)(((j / 8) * D + d) * 8 + j % 8); }
static inline int64_t orc_nch(int64_t dim) { return (dim + 7) / 8; }
static inline size_t orc_p64_size(int64_t n, int64_t dim) {
    return (size_t)((n + ORC_PB - 1) / ORC_PB) * (size_t)orc_nch(dim) * ORC_PB * 8;
}
static inline size_t orc_p64_at(int64_t t, int64_t d, int64_t dim) {
    return (size_t)(((t / ORC_PB) * orc_nch(dim) + d / 8) * ORC_PB * 8 + (t % ORC_PB) * 8 + d % 8);
}

/* orc_dots over a P8 matrix: keys jlo .. jlo+span-1, results at t = j - jlo. */
static inline void orc_dots_p8(int nr, int64_t D, int64_t jlo, int64_t span, const double *x, const double *x2,
                               const double *P8, double *S, double *A, double *S2, int64_t ld_s) {
    if (span <= 0) return;
    for (int64_t pj = jlo / 8; pj * 8 < jlo + span; pj++) {
        const double *blk = P8 + (size_t)pj * (size_t)D * 8;
        int r = 0;
        /* two rows per pass over the key block: each K/V load feeds both rows and
         * 8 (or 12) independent FMA chains hide the FMA latency; every output is
         * still the same recursive sum over d = 0..D-1 */
        for (; r + 2 <= nr; r += 2) {
            orc_v4 s0 = {0}, s1 = {0}, a0 = {0}, a1 = {0}, u0 = {0}, u1 = {0};
            orc_v4 t0 = {0}, t1 = {0}, c0 = {0}, c1 = {0}, w0 = {0}, w1 = {0};
            const double *xr = x + r * D, *yr = x + (r + 1) * D;
            const double *x2r = x2 ? x2 + r * D : NULL, *y2r = x2 ? x2 + (r + 1) * D : NULL;
            if (x2r) {
                for (int64_t d = 0; d < D; d++) {
                    orc_v4 k0 = orc_v4_load(blk + d * 8), k1 = orc_v4_load(blk + d * 8 + 4);
                    orc_v4 ak0 = orc_v4_abs(k0), ak1 = orc_v4_abs(k1);
                    orc_v4 qd = orc_v4_set1(xr[d]), aq = orc_v4_set1(fabs(xr[d])), q2 = orc_v4_set1(x2r[d]);
                    orc_v4 pd = orc_v4_set1(yr[d]), ap = orc_v4_set1(fabs(yr[d])), p2 = orc_v4_set1(y2r[d]);
                    s0 = orc_v4_fma(qd, k0, s0); s1 = orc_v4_fma(qd, k1, s1);
                    a0 = orc_v4_fma(aq, ak0, a0); a1 = orc_v4_fma(aq, ak1, a1);
                    u0 = orc_v4_fma(q2, k0, u0); u1 = orc_v4_fma(q2, k1, u1);
                    t0 = orc_v4_fma(pd, k0, t0); t1 = orc_v4_fma(pd, k1, t1);
                    c0 = orc_v4_fma(ap, ak0, c0); c1 = orc_v4_fma(ap, ak1, c1);
                    w0 = orc_v4_fma(p2, k0, w0); w1 = orc_v4_fma(p2, k1, w1);
                }
            } else {
                for (int64_t d = 0; d < D; d++) {
                    orc_v4 k0 = orc_v4_load(blk + d * 8), k1 = orc_v4_load(blk + d * 8 + 4);
                    orc_v4 ak0 = orc_v4_abs(k0), ak1 = orc_v4_abs(k1);
                    orc_v4 qd = orc_v4_set1(xr[d]), aq = orc_v4_set1(fabs(xr[d]));
                    orc_v4 pd = orc_v4_set1(yr[d]), ap = orc_v4_set1(fabs(yr[d]));
                    s0 = orc_v4_fma(qd, k0, s0); s1 = orc_v4_fma(qd, k1, s1);
                    a0 = orc_v4_fma(aq, ak0, a0); a1 = orc_v4_fma(aq, ak1, a1);
                    t0 = orc_v4_fma(pd, k0, t0); t1 = orc_v4_fma(pd, k1, t1);
                    c0 = orc_v4_fma(ap, ak0, c0); c1 = orc_v4_fma(ap, ak1, c1);
                }
            }
            double vs[2][8], va[2][8], vu[2][8];
            orc_v4_store(vs[0], s0); orc_v4_store(vs[0] + 4, s1);
            orc_v4_store(va[0], a0); orc_v4_store(va[0] + 4, a1);
            orc_v4_store(vu[0], u0); orc_v4_store(vu[0] + 4, u1);
            orc_v4_store(vs[1], t0); orc_v4_store(vs[1] + 4, t1);
            orc_v4_store(va[1], c0); orc_v4_store(va[1] + 4, c1);
            orc_v4_store(vu[1], w0); orc_v4_store(vu[1] + 4, w1);
            for (int m = 0; m < 2; m++)
                for (int k = 0; k < 8; k++) {
                    int64_t t = pj * 8 + k - jlo;
                    if (t < 0 || t >= span) continue;
                    S[(r + m) * ld_s + t] = vs[m][k];
                    A[(r + m) * ld_s + t] = va[m][k];
                    if (x2r) S2[(r + m) * ld_s + t] = vu[m][k];
                }
        }
        for (; r < nr; r++) {
            orc_v4 s0 = {0}, s1 = {0}, a0 = {0}, a1 = {0}, u0 = {0}, u1 = {0};
            const double *xr = x + r * D, *x2r = x2 ? x2 + r * D : NULL;
            if (x2r) {
                for (int64_t d = 0; d < D; d++) {
                    orc_v4 k0 = orc_v4_load(blk + d * 8), k1 = orc_v4_load(blk + d * 8 + 4);
                    orc_v4 qd = orc_v4_set1(xr[d]), aq = orc_v4_set1(fabs(xr[d])), q2 = orc_v4_set1(x2r[d]);
                    s0 = orc_v4_fma(qd, k0, s0); s1 = orc_v4_fma(qd, k1, s1);
                    a0 = orc_v4_fma(aq, orc_v4_abs(k0), a0); a1 = orc_v4_fma(aq, orc_v4_abs(k1), a1);
                    u0 = orc_v4_fma(q2, k0, u0); u1 = orc_v4_fma(q2, k1, u1);
                }
            } else {
                for (int64_t d = 0; d < D; d++) {
                    orc_v4 k0 = orc_v4_load(blk + d * 8), k1 = orc_v4_load(blk + d * 8 + 4);
                    orc_v4 qd = orc_v4_set1(xr[d]), aq = orc_v4_set1(fabs(xr[d]));
                    s0 = orc_v4_fma(qd, k0, s0); s1 = orc_v4_fma(qd, k1, s1);
                    a0 = orc_v4_fma(aq, orc_v4_abs(k0), a0); a1 = orc_v4_fma(aq, orc_v4_abs(k1), a1);
                }
            }
            double vs[8], va[8], vu[8];
            orc_v4_store(vs, s0); orc_v4_store(vs + 4, s1);
            orc_v4_store(va, a0); orc_v4_store(va + 4, a1);
            orc_v4_store(vu, u0); orc_v4_store(vu + 4, u1);
            for (int k = 0; k < 8; k++) {
                int64_t t = pj * 8 + k - jlo;
                if (t < 0 || t >= span) continue;
                S[r * ld_s + t] = vs[k];
                A[r * ld_s + t] = va[k];
                if (x2r) S2[r * ld_s + t] = vu[k];
            }
        }
    }
}

/* orc_wsum over rows kb .. ke-1 of ONE P64 block (ORC_PB rows, nch chunks of 8
 * columns); weights and vis are read at index (k + off). Same outputs as
 * orc_wsum (o0 overwritten with the block sum, o1..o3 accumulated). */
static inline void orc_wsum_p64(int64_t kb, int64_t ke, int64_t off, const uint8_t *vis, const double *w0,
                                const double *w1, const double *w2, const double *w3, int64_t ldw,
                                const double *blk, int64_t dim, double *o0, double *o1, double *o2, double *o3) {
    int64_t nch = orc_nch(dim);
    for (int64_t c = 0; c < nch; c++) {
        const double *base = blk + c * ORC_PB * 8;
        orc_wsum8 a = {{0}};
        for (int64_t k = kb; k < ke; k++) {
            int64_t t = k + off;
            if (!vis[t]) continue;
            orc_wsum8_add(&a, base + k * 8, w0[t * ldw], w1[t * ldw], w2[t * ldw], w3 ? w3 + t * ldw : NULL);
        }
        double vs[8], vb[8], vc[8], ve[8];
        orc_v4_store(vs, a.s0); orc_v4_store(vs + 4, a.s1);
        orc_v4_store(vb, a.b0); orc_v4_store(vb + 4, a.b1);
        orc_v4_store(vc, a.c0); orc_v4_store(vc + 4, a.c1);
        orc_v4_store(ve, a.e0); orc_v4_store(ve + 4, a.e1);
        for (int k = 0; k < 8 && c * 8 + k < dim; k++) {
            int64_t d = c * 8 + k;
            o0[d] = vs[k]; o1[d] += vb[k]; o2[d] += vc[k];
            if (w3) o3[d] += ve[k];
        }
    }
}

#endif /* FLASHCHECK_ORC_SIMD_H */
