/* tc_probe.cu: measures how the GPU's tensor cores accumulate fp16/bf16 products in fp32
 * (mma.sync m16n8k16 on sm_80+, wgmma m64n8k16 on sm_90a), with its own inline PTX (no
 * flashcheck kernel code), then asserts that the accumulation model a precision profile declares
 * (default `tensorcore`; fa_precision.tc_terms / tc_extra_bits / tc_align_rn / tc_norm_rn, or
 * IEEE adds of unit u_acc when tc_terms = 0; oracle/BOUNDS.md 10.2) covers what was measured.
 *
 * Method (Fasi, Higham, Mikaitis, Pranesh 2021, "Numerical behavior of NVIDIA tensor cores";
 * Khattak, Mikaitis 2025, "Accurate models of NVIDIA tensor cores"): one output element
 * d = c + sum_{k<16} a_k b_k per instruction (row 0 of A, column 0 of B, everything else 0),
 * with test vectors whose products are exact in fp32 and whose exact sums are known:
 *   F  (extra alignment bits): 1 - 1 + 2^-k is exact for k <= 23 + F, else 0;
 *   alignment rounding: 1 - 1 + 1.75*2^-(23+F) (and its negative);
 *   c in the alignment: the same with c = 1 instead of the product 1;
 *   adder width: 1 - 1 at positions 0, 1 and 2^-40 at position l: lost iff l is summed in
 *                one fused step with positions 0 and 1;
 *   final rounding: 1 + 0.75 ulp, -1 - 0.75 ulp, 1 + 0.5 ulp, 1 + 1.5 ulp;
 *   subnormals: fp16/bf16 subnormal inputs, an fp32-subnormal c and product.
 * Model derived from these (README.md beside this file): per instruction of 16 products plus c,
 * all aligned to the largest, |d - exact| <= delta * (|c| + sum|a_k b_k|) with
 *   delta = (ulp_final + 17 * 2^-(23+F)) (1 + 2^-23),  ulp_final = 2^-23 (truncation) or
 *   2^-24 (round to nearest).
 * Asserted (exit 1 if any fails): the layout sanity check is exact; the declared model is no
 * finer than the measured one (declared terms <= measured width, extra bits <= F, RN only where
 * measured RN; with tc_terms = 0: delta <= 16 u_acc, so a chain of N steps errs <=
 * N delta (1+delta)^N sum|x| <= gamma_16N(u_acc) sum|x|); every single-instruction test (directed
 * and random adversarial) errs <= delta and <= the oracle's own 16-term coefficient
 * (orc_acc_coef); every chained accumulation (n = 16 .. 4096 products, random and adversarial)
 * errs <= orc_acc_coef(n) sum|x|.
 * Exit 2: no usable GPU (cannot run here; never a pass).
 * usage: tc_probe [--profile NAME]   (default tensorcore) */
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/flash_api.h"

extern "C" {
#include "oracle/orc_internal.h"
}

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "tc_probe: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TCP_WGMMA 1
#else
#define TCP_WGMMA 0
#endif

enum { TCP_F16 = 0, TCP_BF16 = 1 };
enum { TCP_MMA = 0, TCP_WG = 1 };

/* ------------------------------------------------------------------------- */
/* device: test t computes d = c_t + sum over its steps s of sum_k a[16s+k] b[16s+k], one
 * instruction per step, the accumulator fed back as C. a, b hold 16-bit patterns. */

__global__ void tcp_mma_kernel(const uint16_t *a, const uint16_t *b, const float *c, const int *off,
                               const int *steps, float *d, int bf16) {
    const int t = blockIdx.x, lane = threadIdx.x, g = lane >> 2, q = lane & 3;
    float acc[4] = {g == 0 && q == 0 ? c[t] : 0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < steps[t]; s++) {
        const uint16_t *as = a + off[t] + 16 * s, *bs = b + off[t] + 16 * s;
        /* A fragment: row g (a0..a1 cols 2q,2q+1; a4..a5 cols 2q+8,2q+9), row g+8 zero.
         * B fragment: column g (b0..b1 rows 2q,2q+1; b2..b3 rows 2q+8,2q+9). Only row/column 0. */
        uint32_t ra0 = 0, ra2 = 0, rb0 = 0, rb1 = 0;
        if (g == 0) {
            ra0 = (uint32_t)as[2 * q] | ((uint32_t)as[2 * q + 1] << 16);
            ra2 = (uint32_t)as[2 * q + 8] | ((uint32_t)as[2 * q + 9] << 16);
            rb0 = (uint32_t)bs[2 * q] | ((uint32_t)bs[2 * q + 1] << 16);
            rb1 = (uint32_t)bs[2 * q + 8] | ((uint32_t)bs[2 * q + 9] << 16);
        }
        const uint32_t z = 0;
        if (bf16)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                         : "r"(ra0), "r"(z), "r"(ra2), "r"(z), "r"(rb0), "r"(rb1));
        else
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                         : "r"(ra0), "r"(z), "r"(ra2), "r"(z), "r"(rb0), "r"(rb1));
    }
    if (lane == 0) d[t] = acc[0];
}

/* wgmma m64n8k16, A from registers (warp w holds rows 16w.., the mma.sync A layout), B from
 * shared memory without swizzle: K-major, two 8x8 core matrices (k 0-7, k 8-15) of 8 rows (n)
 * x 16 bytes, 128 bytes apart. The descriptor gives both its strides (LBO, SBO) as 128 bytes,
 * so either reading of which one steps along K addresses the same bytes. */
__global__ void tcp_wgmma_kernel(const uint16_t *a, const uint16_t *b, const float *c, const int *off,
                                 const int *steps, float *d, int bf16) {
#if TCP_WGMMA
    __shared__ __align__(128) uint16_t sb[2 * 64];
    const int t = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    float acc[4] = {warp == 0 && g == 0 && q == 0 ? c[t] : 0.f, 0.f, 0.f, 0.f};
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(sb);
    const uint64_t desc = (uint64_t)((sbase & 0x3FFFFu) >> 4) | ((uint64_t)(128u >> 4) << 16) | ((uint64_t)(128u >> 4) << 32);
    for (int s = 0; s < steps[t]; s++) {
        const uint16_t *as = a + off[t] + 16 * s, *bs = b + off[t] + 16 * s;
        __syncthreads(); /* the previous step's wgmma has completed (wait_group 0) in every warp */
        if (tid < 128) { /* element (k, n): core matrix k/8, row n, column k%8 */
            const int k = tid & 15, n = tid >> 4;
            sb[(k >> 3) * 64 + n * 8 + (k & 7)] = n == 0 ? bs[k] : (uint16_t)0;
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        uint32_t ra0 = 0, ra2 = 0;
        if (warp == 0 && g == 0) {
            ra0 = (uint32_t)as[2 * q] | ((uint32_t)as[2 * q + 1] << 16);
            ra2 = (uint32_t)as[2 * q + 8] | ((uint32_t)as[2 * q + 9] << 16);
        }
        const uint32_t z = 0;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        if (bf16)
            asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;\n"
                         : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                         : "r"(ra0), "r"(z), "r"(ra2), "r"(z), "l"(desc));
        else
            asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;\n"
                         : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                         : "r"(ra0), "r"(z), "r"(ra2), "r"(z), "l"(desc));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        asm volatile("" : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])::"memory");
    }
    if (tid == 0) d[t] = acc[0];
#else
    (void)a; (void)b; (void)c; (void)off; (void)steps; (void)d; (void)bf16;
    __trap();
#endif
}

/* ------------------------------------------------------------------------- */
/* host: exact conversions (every value used is representable: checked) */

static int g_dtype; /* TCP_F16 / TCP_BF16 for the encoder */

static uint16_t enc(double x, int *ok) {
    float f = (float)x;
    uint16_t h;
    double back;
    if (g_dtype == TCP_BF16) {
        uint32_t u;
        memcpy(&u, &f, 4);
        h = (uint16_t)(u >> 16);
        uint32_t v = (uint32_t)h << 16;
        float fb;
        memcpy(&fb, &v, 4);
        back = fb;
    } else {
        __half hh = __float2half_rn(f);
        memcpy(&h, &hh, 2);
        back = (double)__half2float(hh);
    }
    if (back != x) *ok = 0;
    return h;
}

/* a*b = v exactly with a, b representable in the dtype (a carries v's significand). */
static void split(double v, uint16_t *ha, uint16_t *hb) {
    if (v == 0) { int ok = 1; *ha = enc(0, &ok); *hb = enc(0, &ok); return; }
    int e;
    double m = frexp(fabs(v), &e); /* v = m 2^e, m in [0.5,1) */
    int best = -1000;
    for (int ea = -40; ea <= 40; ea++) { /* prefer the split with both factors largest in range */
        int ok = 1;
        enc(copysign(m, v) * ldexp(1.0, ea), &ok);
        enc(ldexp(1.0, e - ea), &ok);
        if (ok && (best == -1000 || abs(ea - (e - ea)) < abs(best - (e - best)))) best = ea;
    }
    if (best == -1000) { fprintf(stderr, "tc_probe: internal: %.17g is not a product of two %s values\n", v, g_dtype ? "bf16" : "fp16"); exit(2); }
    int ok = 1;
    *ha = enc(copysign(m, v) * ldexp(1.0, best), &ok);
    *hb = enc(ldexp(1.0, e - best), &ok);
}

typedef struct {
    int n, cap, ncap;
    uint16_t *a, *b;
    float *c;
    int *off, *steps;
    int len;
    double *prod; /* exact products (host copy), len entries */
} batch;

static void batch_reset(batch *bt) { bt->n = 0; bt->len = 0; }

/* add a test: c and n products (n a multiple of 16) */
static int batch_add(batch *bt, double c, const double *p, int n) {
    if (bt->n == bt->ncap) {
        bt->ncap = bt->ncap ? 2 * bt->ncap : 256;
        bt->c = (float *)realloc(bt->c, bt->ncap * sizeof(float));
        bt->off = (int *)realloc(bt->off, bt->ncap * sizeof(int));
        bt->steps = (int *)realloc(bt->steps, bt->ncap * sizeof(int));
    }
    if (bt->len + n > bt->cap) {
        while (bt->len + n > bt->cap) bt->cap = bt->cap ? 2 * bt->cap : 4096;
        bt->a = (uint16_t *)realloc(bt->a, bt->cap * 2);
        bt->b = (uint16_t *)realloc(bt->b, bt->cap * 2);
        bt->prod = (double *)realloc(bt->prod, bt->cap * sizeof(double));
    }
    if ((double)(float)c != c) { fprintf(stderr, "tc_probe: internal: c %.17g not fp32\n", c); exit(2); }
    bt->c[bt->n] = (float)c;
    bt->off[bt->n] = bt->len;
    bt->steps[bt->n] = n / 16;
    for (int i = 0; i < n; i++) {
        split(p[i], &bt->a[bt->len + i], &bt->b[bt->len + i]);
        bt->prod[bt->len + i] = p[i];
    }
    bt->len += n;
    return bt->n++;
}

static void batch_run(const batch *bt, int kind, int bf16, float *out) {
    uint16_t *da, *db;
    float *dc, *dd;
    int *doff, *dst;
    CHECK(cudaMalloc(&da, bt->len * 2 + 2));
    CHECK(cudaMalloc(&db, bt->len * 2 + 2));
    CHECK(cudaMalloc(&dc, bt->n * 4));
    CHECK(cudaMalloc(&dd, bt->n * 4));
    CHECK(cudaMalloc(&doff, bt->n * 4));
    CHECK(cudaMalloc(&dst, bt->n * 4));
    CHECK(cudaMemcpy(da, bt->a, bt->len * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, bt->b, bt->len * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dc, bt->c, bt->n * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(doff, bt->off, bt->n * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dst, bt->steps, bt->n * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dd, 0xFF, bt->n * 4)); /* NaN poison: every result must be written */
    if (kind == TCP_MMA) tcp_mma_kernel<<<bt->n, 32>>>(da, db, dc, doff, dst, dd, bf16);
    else tcp_wgmma_kernel<<<bt->n, 128>>>(da, db, dc, doff, dst, dd, bf16);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(out, dd, bt->n * 4, cudaMemcpyDeviceToHost));
    cudaFree(da); cudaFree(db); cudaFree(dc); cudaFree(dd); cudaFree(doff); cudaFree(dst);
}

/* exact-enough reference: double-double accumulation (TwoSum), error ~2^-104 sum|x| */
static void dd_sum(double c, const double *p, int n, double *hi_out, double *abs_out) {
    double hi = c, lo = 0, ab = fabs(c);
    for (int i = 0; i < n; i++) {
        double s = hi + p[i], bb = s - hi, e = (hi - (s - bb)) + (p[i] - bb);
        hi = s;
        lo += e;
        ab += fabs(p[i]);
    }
    *hi_out = hi + lo;
    *abs_out = ab;
}

/* ------------------------------------------------------------------------- */

static double rnd_state_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (double)(*s >> 11) * 0x1p-53;
}

typedef struct {
    const char *name;
    int kind, bf16, ran;
    int F;              /* extra alignment bits (kmax - 23) */
    int F_c;            /* the same measured with c = 1 instead of the product 1 */
    const char *align;  /* alignment rounding: truncation toward zero / toward -inf / nearest */
    const char *final;  /* final rounding */
    int width;          /* products summed in one fused step with products 0 and 1 */
    char width_set[64];
    int sub_in, sub_c, sub_prod; /* 1: kept, 0: flushed, -1: n/a */
    double delta;       /* derived per-instruction bound / 1 */
    double worst_single;/* max over single-instruction tests of err / sum|x| */
    double worst_chain; /* max over chains of err / (orc_acc_coef(n) sum|x|) */
    double coef16;      /* the oracle's coefficient for one 16-product step */
    int fails;
} findings;


static void probe(findings *f, const fa_precision *pr, const orc_model *m) {
    const double u_acc = pr->u_acc;
    batch bt;
    memset(&bt, 0, sizeof bt);
    g_dtype = f->bf16 ? TCP_BF16 : TCP_F16;
    float *out = (float *)malloc(1 << 20);
    double p[4096 + 16];
    /* 0. layout sanity: small integers, exact */
    batch_reset(&bt);
    for (int i = 0; i < 16; i++) p[i] = (double)((i * 7) % 11 - 5) * (double)(i % 3 + 1);
    double want = 3;
    for (int i = 0; i < 16; i++) want += p[i];
    int t0 = batch_add(&bt, 3, p, 16);
    for (int i = 0; i < 32; i++) p[i] = (double)(i % 5) - 2;
    int t1 = batch_add(&bt, -1, p, 32);
    double want1 = -1;
    for (int i = 0; i < 32; i++) want1 += p[i];
    batch_run(&bt, f->kind, f->bf16, out);
    if (out[t0] != want || out[t1] != want1) {
        printf("  %s: layout sanity check FAILED (got %g and %g, want %g and %g): the probe's fragment layout is wrong\n",
               f->name, out[t0], out[t1], want, want1);
        f->fails++;
        return;
    }
    /* 1. extra alignment bits: 1 - 1 + 2^-k (products), and c = 1 - 1 + 2^-k */
    batch_reset(&bt);
    int tk[2][30];
    for (int k = 20; k < 48; k++) {
        memset(p, 0, 16 * sizeof(double));
        p[0] = 1; p[1] = -1; p[2] = ldexp(1, -k);
        tk[0][k - 20] = batch_add(&bt, 0, p, 16);
        memset(p, 0, 16 * sizeof(double));
        p[0] = -1; p[1] = ldexp(1, -k);
        tk[1][k - 20] = batch_add(&bt, 1, p, 16);
    }
    batch_run(&bt, f->kind, f->bf16, out);
    int kmax = 19, kmax_c = 19;
    for (int k = 20; k < 48; k++) {
        if (out[tk[0][k - 20]] == (float)ldexp(1, -k) && kmax == k - 1) kmax = k;
        if (out[tk[1][k - 20]] == (float)ldexp(1, -k) && kmax_c == k - 1) kmax_c = k;
    }
    f->F = kmax - 23;
    f->F_c = kmax_c - 23;
    /* 2. alignment rounding at the last kept bit, 3. final rounding, 4. adder width, 5. subnormals */
    batch_reset(&bt);
    const double g = ldexp(1, -kmax); /* the last kept bit below an exponent-0 leading term */
    int ta[2], tr[4], tw[16], ts[4] = {0, 0, 0, 0};
    for (int sgn = 0; sgn < 2; sgn++) {
        memset(p, 0, 16 * sizeof(double));
        p[0] = 1; p[1] = -1; p[2] = (sgn ? -1.75 : 1.75) * g;
        ta[sgn] = batch_add(&bt, 0, p, 16);
    }
    const double ulp = 0x1p-23;
    const double fr[4][2] = {{1, 0.75 * ulp}, {-1, -0.75 * ulp}, {1, 0.5 * ulp}, {1, 1.5 * ulp}};
    for (int i = 0; i < 4; i++) {
        memset(p, 0, 16 * sizeof(double));
        p[0] = fr[i][0]; p[5] = fr[i][1];
        tr[i] = batch_add(&bt, 0, p, 16);
    }
    for (int l = 2; l < 16; l++) {
        memset(p, 0, 16 * sizeof(double));
        p[0] = 1; p[1] = -1; p[l] = 0x1p-40;
        tw[l] = batch_add(&bt, 0, p, 16);
    }
    /* subnormals: bf16 input 2^-130 (fp16: 2^-24) times 1; c = 2^-140 (fp32 subnormal);
     * bf16 product 2^-70 * 2^-70 = 2^-140 */
    memset(p, 0, 16 * sizeof(double));
    p[3] = f->bf16 ? 0x1p-130 : 0x1p-24;
    ts[0] = batch_add(&bt, 0, p, 16);
    memset(p, 0, 16 * sizeof(double));
    ts[1] = batch_add(&bt, 0x1p-140, p, 16);
    if (f->bf16) {
        p[3] = 0x1p-140;
        ts[2] = batch_add(&bt, 0, p, 16);
    }
    batch_run(&bt, f->kind, f->bf16, out);
    {
        double r0 = out[ta[0]] / g, r1 = out[ta[1]] / g;
        f->align = r0 == 1 && r1 == -1 ? "truncation toward zero"
                 : r0 == 1 && r1 == -2 ? "truncation toward -inf (two's complement)"
                 : r0 == 2 && r1 == -2 ? "round to nearest"
                 : "unclassified";
        if (!strcmp(f->align, "unclassified")) printf("  %s: alignment rounding: 1.75 -> %g, -1.75 -> %g (units of 2^-%d)\n", f->name, r0, r1, kmax);
    }
    {
        const double up = 1 + ulp, up2 = 1 + 2 * ulp;
        const int pos_up = out[tr[0]] == (float)up, neg_up = out[tr[1]] == -(float)up;
        const int tie_even = out[tr[2]] == 1.0f && out[tr[3]] == (float)up2;
        if (f->F < 2) f->final = "undetermined (needs F >= 2)";
        else if (pos_up && neg_up) f->final = tie_even ? "round to nearest even" : "round to nearest (ties not even)";
        else if (!pos_up && !neg_up) f->final = "truncation toward zero";
        else if (!pos_up && neg_up) f->final = "toward -inf";
        else f->final = "toward +inf";
    }
    f->width = 2;
    char *w = f->width_set;
    w += sprintf(w, "{0,1");
    for (int l = 2; l < 16; l++)
        if (out[tw[l]] == 0.0f) { f->width++; w += sprintf(w, ",%d", l); }
        else if (out[tw[l]] != 0x1p-40f) { printf("  %s: width test l=%d gave %g\n", f->name, l, out[tw[l]]); }
    sprintf(w, "}");
    f->sub_in = out[ts[0]] == (float)(f->bf16 ? 0x1p-130 : 0x1p-24);
    f->sub_c = out[ts[1]] == 0x1p-140f;
    f->sub_prod = f->bf16 ? out[ts[2]] == 0x1p-140f : -1;

    /* derived per-instruction bound: m_all = 16 products + c aligned to the largest term;
     * truncation in alignment loses < 2^-(23+F) * 2^emax <= 2^-(23+F) max|x| per term,
     * the final rounding < ulp_final * |result|. */
    const int trunc_final = strstr(f->final, "nearest") == NULL;
    const double ulp_final = trunc_final ? 0x1p-23 : 0x1p-24;
    const int Fm = f->F < f->F_c ? f->F : f->F_c;
    f->delta = (ulp_final + 17 * ldexp(1, -23 - (Fm < 0 ? 0 : Fm))) * (1 + 0x1p-23);

    /* 6. single-instruction adversarial tests: a large term plus 15 terms just under the
     * alignment grid (all lose almost a whole grid step in one direction), random signs and
     * exponents; err / sum|x| must stay <= delta. */
    batch_reset(&bt);
    uint64_t rs = 0x9E3779B97F4A7C15ull ^ (uint64_t)(f->kind * 2 + f->bf16);
    const int nsingle = 4000;
    double cs[4000];
    for (int t = 0; t < nsingle; t++) {
        const int mode = t % 4;
        double c = 0;
        for (int i = 0; i < 16; i++) {
            double v;
            const double r = rnd_state_next(&rs);
            if (mode == 0) { /* one big term, the others a bit below its grid: 2^-(23+F) (1 - 2^-s) */
                v = i == 0 ? 1.0 : ldexp(1, -kmax) * (1 - ldexp(1, -(1 + (int)(r * 6))));
            } else if (mode == 1) { /* uniform magnitudes, random signs */
                v = (r - 0.5) * 2;
            } else if (mode == 2) { /* wide exponents, one sign */
                v = ldexp(1 + floor(r * 64) / 64, -(int)(rnd_state_next(&rs) * 30));
            } else { /* cancellation: big +-pairs plus a small tail */
                v = i < 8 ? (i & 1 ? -1 : 1) * (1 + floor(r * 128) / 128) : ldexp(r, -20);
            }
            /* make v a product of two dtype values: round its significand to 8 (bf16) / 11 bits */
            int e;
            double m = frexp(v, &e);
            const int bits = f->bf16 ? 8 : 11;
            m = ldexp(nearbyint(ldexp(m, bits)), -bits);
            p[i] = ldexp(m, e);
        }
        if (mode == 0) c = (float)(rnd_state_next(&rs) * 0.5);
        if (mode == 3) c = (float)ldexp(rnd_state_next(&rs), -22);
        cs[t] = c;
        batch_add(&bt, c, p, 16);
    }
    batch_run(&bt, f->kind, f->bf16, out);
    f->worst_single = 0;
    for (int t = 0; t < nsingle; t++) {
        double ex, ab;
        dd_sum(cs[t], bt.prod + bt.off[t], 16, &ex, &ab);
        const double r = fabs((double)out[t] - ex) / ab;
        if (r > f->worst_single) f->worst_single = r;
    }
    const double coef16 = orc_acc_coef(m, 16, 16, 0);
    f->coef16 = coef16;
    if (f->worst_single > coef16) {
        printf("  %s: FAIL: a single instruction erred %.3g sum|x| > the oracle's 16-term coefficient %.3g\n", f->name, f->worst_single, coef16);
        f->fails++;
    }
    if (f->worst_single > f->delta) {
        printf("  %s: FAIL: a single instruction erred %.3g sum|x| > the derived delta %.3g\n", f->name, f->worst_single, f->delta);
        f->fails++;
    }
    /* 7. chains: n = 16 .. 4096 products through n/16 instructions */
    batch_reset(&bt);
    const int ns[] = {16, 64, 256, 1024, 4096};
    int nt = 0, tn[512];
    for (int ni = 0; ni < 5; ni++)
        for (int rep = 0; rep < (ns[ni] >= 1024 ? 24 : 60); rep++) {
            const int n = ns[ni], mode = rep % 3;
            for (int i = 0; i < n; i++) {
                const double r = rnd_state_next(&rs);
                double v = mode == 0 ? r : mode == 1 ? (r - 0.5) : (i % 16 == 0 ? 1.0 : ldexp(1, -kmax) * (1 - ldexp(1, -3)));
                if (mode == 2 && i % 16 == 0) v = ldexp(1, -(i / 16) % 4);
                int e;
                double m = frexp(v, &e);
                const int bits = f->bf16 ? 8 : 11;
                m = ldexp(nearbyint(ldexp(m, bits)), -bits);
                p[i] = ldexp(m, e);
            }
            tn[nt++] = n;
            batch_add(&bt, 0, p, n);
        }
    batch_run(&bt, f->kind, f->bf16, out);
    f->worst_chain = 0;
    for (int t = 0; t < nt; t++) {
        double ex, ab;
        dd_sum(0, bt.prod + bt.off[t], tn[t], &ex, &ab);
        const double r = fabs((double)out[t] - ex) / (orc_acc_coef(m, tn[t], tn[t], 0) * ab);
        if (r > f->worst_chain) f->worst_chain = r;
    }
    if (f->worst_chain > 1) {
        printf("  %s: FAIL: a chained accumulation erred %.3g x the oracle's bound orc_acc_coef(n) sum|x|\n", f->name, f->worst_chain);
        f->fails++;
    }
    /* the declared model must be no finer than the measured one (BOUNDS.md 10.2: fewer terms per
     * step, fewer extra bits, truncation instead of RN each give a larger bound) */
    const int meas_align_rn = !strcmp(f->align, "round to nearest"), meas_norm_rn = strstr(f->final, "nearest") != NULL;
    if (pr->tc_terms > 0) {
        if (pr->tc_terms > f->width || pr->tc_extra_bits > Fm || (pr->tc_align_rn && !meas_align_rn) || (pr->tc_norm_rn && !meas_norm_rn)) {
            printf("  %s: FAIL: the profile declares %d terms, %d extra bits, %s alignment, %s normalisation; measured %d, %d, %s, %s\n",
                   f->name, pr->tc_terms, pr->tc_extra_bits, pr->tc_align_rn ? "RN" : "truncating", pr->tc_norm_rn ? "RN" : "truncating",
                   f->width, Fm, f->align, f->final);
            f->fails++;
        }
    } else if (f->delta > 16 * u_acc) {
        printf("  %s: FAIL: the derived per-instruction bound %.3g exceeds 16 u_acc = %.3g: the profile's gamma_n(u_acc) "
               "model does not cover this accumulation\n", f->name, f->delta, 16 * u_acc);
        f->fails++;
    }
    f->ran = 1;
    free(out);
    free(bt.a); free(bt.b); free(bt.c); free(bt.off); free(bt.steps); free(bt.prod);
}

int main(int argc, char **argv) {
    const char *profile = "tensorcore";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile = argv[++i];
        else { fprintf(stderr, "usage: tc_probe [--profile NAME]\n"); return 2; }
    }
    fa_precision prof;
    fa_error err;
    if (fa_precision_preset(profile, &prof, &err) != FA_OK) { fprintf(stderr, "tc_probe: %s\n", err.msg); return 2; }
    orc_ctx octx;
    memset(&octx, 0, sizeof octx);
    orc_model om[2];
    for (int dt = 0; dt < 2; dt++) {
        octx.dt = dt ? FA_BF16 : FA_F16;
        orc_model_kernel(&octx, &prof, &om[dt]);
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "tc_probe: no CUDA device: this probe measures the GPU and cannot run here\n");
        return 2;
    }
    cudaDeviceProp dp;
    CHECK(cudaGetDeviceProperties(&dp, 0));
    if (dp.major < 8) { fprintf(stderr, "tc_probe: %s is sm_%d%d; mma.sync m16n8k16 needs sm_80+\n", dp.name, dp.major, dp.minor); return 2; }
    const int has_wg = dp.major == 9 && dp.minor == 0;
    printf("tc_probe: %s (sm_%d%d), profile %s: u_acc = 2^%g, tc_terms %d, tc_extra_bits %d, tc_align_rn %d, tc_norm_rn %d\n",
           dp.name, dp.major, dp.minor, profile, log2(prof.u_acc), prof.tc_terms, prof.tc_extra_bits, prof.tc_align_rn, prof.tc_norm_rn);
    findings fs[4] = {{"mma.sync m16n8k16 f16", TCP_MMA, 0}, {"mma.sync m16n8k16 bf16", TCP_MMA, 1},
                      {"wgmma m64n8k16 f16", TCP_WG, 0}, {"wgmma m64n8k16 bf16", TCP_WG, 1}};
    int fails = 0;
    for (int i = 0; i < 4; i++) {
        if (fs[i].kind == TCP_WG && !has_wg) { printf("  %s: not run (needs sm_90)\n", fs[i].name); continue; }
        probe(&fs[i], &prof, &om[fs[i].bf16]);
        fails += fs[i].fails;
    }
    printf("\n%-24s %3s %5s %-26s %-24s %-6s %-8s %-9s %9s %10s %8s %10s\n", "instruction", "F", "F(c)", "alignment",
           "final rounding", "width", "sub in", "sub c/p", "delta/u", "worst 1/u", "orc16/u", "chain/orc");
    for (int i = 0; i < 4; i++) {
        findings *f = &fs[i];
        if (!f->ran) continue;
        char sc[16];
        snprintf(sc, sizeof sc, "%s/%s", f->sub_c ? "kept" : "flush", f->sub_prod < 0 ? "-" : f->sub_prod ? "kept" : "flush");
        printf("%-24s %3d %5d %-26.26s %-24.24s %-6d %-8s %-9s %9.3f %10.3f %8.3f %10.4f\n", f->name, f->F, f->F_c, f->align, f->final,
               f->width, f->sub_in ? "kept" : "flush", sc, f->delta / 0x1p-23, f->worst_single / 0x1p-23, f->coef16 / 0x1p-23, f->worst_chain);
        printf("%-24s     fused with products 0,1: %s\n", "", f->width_set);
    }
    printf("\nF: extra alignment bits below the 24-bit significand of the largest term; F(c): the same with c = 1 as the\n"
           "largest term; width: products summed in one step with products 0 and 1; delta/u: the derived per-instruction\n"
           "bound in units of u = 2^-23 (must be <= 16 u_acc/u); worst 1/u: measured single-instruction err / sum|x| in\n"
           "units of 2^-23 (<= delta/u and <= orc16/u, the oracle's coefficient of one 16-product step for this profile);\n"
           "chain/orc: max err / (orc_acc_coef(n) sum|x|) over n = 16..4096 (<= 1).\n");
    printf("%s\n", fails ? "tc_probe: FAIL: the hardware does not meet the profile's accumulation model (see above)"
                         : "tc_probe: PASS: the measured accumulation is within the profile's model");
    return fails ? 1 : 0;
}
