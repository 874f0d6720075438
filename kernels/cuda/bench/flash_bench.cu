/* flash_bench.cu: forward TFLOP/s of the CUDA backend on the standard grid.
 *
 *   B*S = 16k tokens, hidden 2048 (H = 2048 / D), D in {64, 128},
 *   S in {512, 1k, 2k, 4k, 8k, 16k}, causal and not, bf16 and fp16.
 *   FLOPs = 4 * B * H * S * S * D, halved for causal.
 *
 * Timing: CUDA events around one fa_cuda_forward call, median of --iters runs
 * after --warmup runs. fa_cuda_forward validates on the host and synchronizes;
 * so that host work is not timed, a short GPU spin kernel is queued before the
 * start event: the forward kernel is already queued behind it when the start
 * event fires, and the events bracket the kernel alone.
 * Inputs are uniform in [-1, 1) from a hash (never zeros), layout BSHD.
 * Sanity (not a certification, that is kernels/cuda/tests/): 4 sampled rows per
 * shape against a double-precision host reference; a NaN or an error above
 * 0.05 (far above any fp16/bf16 rounding of outputs bounded by max|V| = 1)
 * marks the row FAIL and makes the exit status 1.
 *
 * usage: flash_bench [--iters N] [--warmup N] [--d 64|128] [--s S] [--causal 0|1] [--dtype bf16|fp16]
 *                    [--quick] [--family 0..3] [--sm90 -1|0|1]
 *   --d, --s, --causal, --dtype: run only the matching shapes (e.g. one shape under ncu).
 *   --family forces a tile family of the forward (see fwd/flash_fwd.cu); default: the tuned choice.
 *   --sm90 0 runs the mma.sync kernels on an H100 too (the wgmma kernel's comparison), 1 also
 *   uses the wgmma kernel at D = 64; default -1: wgmma at padded D = 128 on sm_90.
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"

/* Benchmark knob in fwd/flash_fwd.cu (not part of the API): tile family 0 or 1, -1 default. */
extern "C" void fa_cuda_fwd_set_family(int family);
/* Benchmark knob in fwd/flash_fwd.cu: the sm_90a (wgmma) kernel, -1 default, 0 never, 1 also at D = 64. */
extern "C" void fa_cuda_fwd_set_sm90(int mode);

#define CHECK(x)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

// ----------------------------------------------------------------------------
// device helpers: fill, spin

static __device__ uint32_t hash32(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}

__global__ void fill_uniform(uint16_t *p, int64_t n, uint64_t seed, int bf16) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float u = (hash32(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i) >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        if (bf16) { __nv_bfloat16 h = __float2bfloat16_rn(u); p[i] = *(uint16_t *)&h; }
        else { __half h = __float2half_rn(u); p[i] = *(uint16_t *)&h; }
    }
}

__global__ void spin_kernel(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

// ----------------------------------------------------------------------------
// host reference for a few rows

static double dec(uint16_t b, int bf16) {
    if (bf16) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
    __half_raw r; r.x = b; return (double)__half2float(__half(r));
}

/* Max |O - ref| over sampled rows of (b, h) = (0, 0) and (B-1, H-1). */
static double check_rows(const uint16_t *hq, const uint16_t *hk, const uint16_t *hv, const uint16_t *ho,
                         int64_t B, int64_t S, int64_t H, int64_t D, int causal, int bf16) {
    double worst = 0;
    double scale = 1.0 / sqrt((double)D);
    int64_t rows[4] = {0, S / 3, S - 2, S - 1};
    int64_t bs[2] = {0, B - 1}, hs[2] = {0, H - 1};
    double *s = (double *)malloc(sizeof(double) * S);
    for (int bi = 0; bi < 2; ++bi)
        for (int r = 0; r < 4; ++r) {
            int64_t b = bs[bi], h = hs[bi], i = rows[r];
            int64_t nk = causal ? i + 1 : S;
            double mx = -INFINITY, l = 0;
            for (int64_t j = 0; j < nk; ++j) {
                double acc = 0;
                for (int64_t d = 0; d < D; ++d)
                    acc += dec(hq[((b * S + i) * H + h) * D + d], bf16) * dec(hk[((b * S + j) * H + h) * D + d], bf16);
                s[j] = acc * scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int64_t j = 0; j < nk; ++j) { s[j] = exp(s[j] - mx); l += s[j]; }
            for (int64_t d = 0; d < D; ++d) {
                double o = 0;
                for (int64_t j = 0; j < nk; ++j) o += s[j] * dec(hv[((b * S + j) * H + h) * D + d], bf16);
                o /= l;
                double got = dec(ho[((b * S + i) * H + h) * D + d], bf16);
                double e = fabs(got - o);
                if (!(e <= worst)) worst = e;  // NaN propagates
            }
        }
    free(s);
    return worst;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

// ----------------------------------------------------------------------------
// one shape

static int bench_one(int64_t D, int64_t S, int causal, int bf16, int warmup, int iters) {
    const int64_t B = 16384 / S, H = 2048 / D;
    const int64_t n = B * S * H * D;
    uint16_t *q, *k, *v, *o;
    float *lse;
    CHECK(cudaMalloc(&q, n * 2)); CHECK(cudaMalloc(&k, n * 2)); CHECK(cudaMalloc(&v, n * 2));
    CHECK(cudaMalloc(&o, n * 2)); CHECK(cudaMalloc(&lse, B * H * S * 4));
    fill_uniform<<<1024, 256>>>(q, n, 1, bf16);
    fill_uniform<<<1024, 256>>>(k, n, 2, bf16);
    fill_uniform<<<1024, 256>>>(v, n, 3, bf16);
    CHECK(cudaMemset(o, 0xff, n * 2));
    CHECK(cudaDeviceSynchronize());

    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p.batch = B; a.p.seqlen_q = S; a.p.seqlen_k = S; a.p.heads_q = H; a.p.heads_kv = H;
    a.p.head_dim_qk = D; a.p.head_dim_v = D; a.p.dtype = bf16 ? FA_BF16 : FA_F16;
    a.p.causal = causal ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_NONE;
    a.p.window_left = -1; a.p.window_right = -1;
    fa_tensor *ts[4] = {&a.q, &a.k, &a.v, &a.o};
    void *ps[4] = {q, k, v, o};
    for (int t = 0; t < 4; ++t) {
        ts[t]->ptr = ps[t];
        ts[t]->stride[0] = S * H * D; ts[t]->stride[1] = H * D; ts[t]->stride[2] = D; ts[t]->stride[3] = 1;
    }
    a.lse.ptr = lse; a.lse.stride[0] = H * S; a.lse.stride[1] = S; a.lse.stride[2] = 1;

    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    a.stream = stream;
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * iters);
    fa_error err;
    for (int it = 0; it < warmup + iters; ++it) {
        spin_kernel<<<1, 1, 0, stream>>>(200000);  // ~100 us: covers the host-side validation
        CHECK(cudaEventRecord(e0, stream));
        fa_status st = fa_cuda_forward(&a, &err);
        CHECK(cudaEventRecord(e1, stream));
        if (st != FA_OK) {
            fprintf(stderr, "forward failed: %s %s: %s\n", fa_status_name(st), err.arg, err.msg);
            exit(2);
        }
        CHECK(cudaEventSynchronize(e1));
        if (it >= warmup) CHECK(cudaEventElapsedTime(&ms[it - warmup], e0, e1));
    }
    qsort(ms, iters, sizeof(float), cmp_float);
    const double med = ms[iters / 2];
    const double flops = 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0);
    const double tflops = flops / (med * 1e-3) / 1e12;

    uint16_t *hq = (uint16_t *)malloc(n * 2), *hk = (uint16_t *)malloc(n * 2);
    uint16_t *hv = (uint16_t *)malloc(n * 2), *ho = (uint16_t *)malloc(n * 2);
    CHECK(cudaMemcpy(hq, q, n * 2, cudaMemcpyDeviceToHost)); CHECK(cudaMemcpy(hk, k, n * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hv, v, n * 2, cudaMemcpyDeviceToHost)); CHECK(cudaMemcpy(ho, o, n * 2, cudaMemcpyDeviceToHost));
    const double worst = check_rows(hq, hk, hv, ho, B, S, H, D, causal, bf16);
    const int ok = worst <= 0.05;
    printf("| %3lld | %5lld | %3lld | %3lld | %-6s | %-4s | %8.3f | %6.1f | %.2e %s |\n", (long long)D, (long long)S,
           (long long)B, (long long)H, causal ? "yes" : "no", bf16 ? "bf16" : "fp16", med, tflops, worst,
           ok ? "ok" : "FAIL");
    fflush(stdout);
    free(hq); free(hk); free(hv); free(ho); free(ms);
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(lse);
    cudaEventDestroy(e0); cudaEventDestroy(e1); cudaStreamDestroy(stream);
    return ok;
}

// ----------------------------------------------------------------------------
// main

int main(int argc, char **argv) {
    int iters = 30, warmup = 5, only_d = 0, quick = 0, only_s = 0, only_causal = -1, only_bf16 = -1;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--d") && i + 1 < argc) only_d = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--s") && i + 1 < argc) only_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--causal") && i + 1 < argc) only_causal = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) only_bf16 = !strcmp(argv[++i], "bf16");
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--family") && i + 1 < argc) fa_cuda_fwd_set_family(atoi(argv[++i]));
        else if (!strcmp(argv[i], "--sm90") && i + 1 < argc) fa_cuda_fwd_set_sm90(atoi(argv[++i]));
        else {
            fprintf(stderr, "usage: %s [--iters N] [--warmup N] [--d 64|128] [--s S] [--causal 0|1] "
                            "[--dtype bf16|fp16] [--quick] [--family 0..3] [--sm90 -1|0|1]\n", argv[0]);
            return 2;
        }
    }
    if (iters < 1) iters = 1;
    if (fa_cuda_device_count() < 1) { fprintf(stderr, "no CUDA device\n"); return 2; }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; median of %d runs after %d warm-up\n", prop.name, prop.multiProcessorCount, iters,
           warmup);
    printf("| D | S | B | H | causal | dtype | ms | TFLOP/s | max err (sampled rows) |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    const int64_t ds[2] = {64, 128};
    const int64_t ss[6] = {512, 1024, 2048, 4096, 8192, 16384};
    int all_ok = 1;
    for (int bf16 = 1; bf16 >= 0; --bf16)
        for (int di = 0; di < 2; ++di) {
            if (only_d && ds[di] != only_d) continue;
            if (only_bf16 >= 0 && bf16 != only_bf16) continue;
            for (int causal = 0; causal < 2; ++causal)
                for (int si = 0; si < 6; ++si) {
                    if (quick && ss[si] != 2048 && ss[si] != 8192) continue;
                    if ((only_s && ss[si] != only_s) || (only_causal >= 0 && causal != only_causal)) continue;
                    all_ok &= bench_one(ds[di], ss[si], causal, bf16, warmup, iters);
                }
        }
    printf(all_ok ? "all sampled rows within 0.05\n" : "SOME SAMPLED ROWS FAILED\n");
    return all_ok ? 0 : 1;
}
