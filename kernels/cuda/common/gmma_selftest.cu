/* gmma_selftest.cu: checks the wgmma wrappers and the descriptor layouts of gmma.h on the GPU
 * against a host reference, before any attention kernel relies on them.
 *
 * One warpgroup, one CTA:
 *   1. S[64 x 128] = Q[64 x 128] K[128 x 128]^T   (both K-major, gmma_ss_m64n128k16, 8 k-steps
 *      across two 64-column blocks of the swizzled tiles)
 *   2. O[64 x 128] = P[64 x 128] V[128 x 128]     (P in registers as A fragments, V MN-major,
 *      gmma_rs_m64n128k16: LBO steps to the second 64-column block of V)
 *   3. the same two with N = 64 (gmma_ss_m64n64k16 on the first 64 keys, gmma_rs_m64n64k16 on
 *      the first 64 columns of V).
 * Inputs are small integers (exact in bf16 and in fp32 sums), so the comparison is exact.
 * Exit status 0 iff every element matches; prints the first mismatches otherwise.
 * usage: gmma_selftest   (needs an sm_90 GPU) */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common/gmma.h"
#include "kernels/cuda/common/ptx.h"

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)

static uint16_t bf16_of_int(int v) {  // small integers are exact in bf16
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

// ----------------------------------------------------------------------------
// device: stage row-major [128 x 128] tiles into the swizzled layout, run the products

__global__ void selftest_kernel(const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *p,
                                float *s_out, float *o_out, float *s64_out, float *o64_out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + 64 * 256, sV = sK + 128 * 256;  // Q 64 rows, K and V 128 rows
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    for (int idx = tid; idx < 64 * 16; idx += 128) {
        const int r = idx / 16, ch = idx % 16;
        const uint4 x = *(const uint4 *)(q + r * 128 + ch * 8);
        ptx_st_shared16(sQ + gmma_tile_offset<64>(r, ch), x);
    }
    for (int idx = tid; idx < 128 * 16; idx += 128) {
        const int r = idx / 16, ch = idx % 16;
        const uint4 xk = *(const uint4 *)(k + r * 128 + ch * 8), xv = *(const uint4 *)(v + r * 128 + ch * 8);
        ptx_st_shared16(sK + gmma_tile_offset<128>(r, ch), xk);
        ptx_st_shared16(sV + gmma_tile_offset<128>(r, ch), xv);
    }
    gmma_fence_proxy();
    __syncthreads();

    // 1. S = Q K^T, N = 128
    float s[16][4];
    gmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const uint32_t off = (kk / 4) * 0 + (uint32_t)((kk & 3) * 32);
        const uint64_t da = gmma_desc(sQ + (kk / 4) * 64 * 128 + off, 16, 1024);
        const uint64_t db = gmma_desc(sK + (kk / 4) * 128 * 128 + off, 16, 1024);
        gmma_ss_m64n128k16<true, 0, 0>(s, da, db, kk > 0);
    }
    gmma_commit();
    gmma_wait<0>();
    gmma_fence_operands(s);
    // 3a. S64 = Q K[0:64]^T
    float s64[8][4];
    gmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const uint32_t off = (uint32_t)((kk & 3) * 32);
        const uint64_t da = gmma_desc(sQ + (kk / 4) * 64 * 128 + off, 16, 1024);
        const uint64_t db = gmma_desc(sK + (kk / 4) * 128 * 128 + off, 16, 1024);
        gmma_ss_m64n64k16<true, 0, 0>(s64, da, db, kk > 0);
    }
    gmma_commit();
    gmma_wait<0>();
    gmma_fence_operands(s64);

    // 2. O = P V: P's A fragments straight from global (row-major 64 x 128)
    const int r0 = warp * 16 + g;
    uint32_t pa[8][4];
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        pa[kk][0] = *(const uint32_t *)(p + r0 * 128 + kk * 16 + 2 * t);
        pa[kk][1] = *(const uint32_t *)(p + (r0 + 8) * 128 + kk * 16 + 2 * t);
        pa[kk][2] = *(const uint32_t *)(p + r0 * 128 + kk * 16 + 8 + 2 * t);
        pa[kk][3] = *(const uint32_t *)(p + (r0 + 8) * 128 + kk * 16 + 8 + 2 * t);
    }
    float o[16][4], o64[8][4];
#pragma unroll
    for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) o64[i][0] = o64[i][1] = o64[i][2] = o64[i][3] = 0.0f;
    gmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const uint64_t db = gmma_desc(sV + kk * 16 * 128, 128 * 128, 1024);
        gmma_rs_m64n128k16<true, 1>(o, pa[kk], db);
        gmma_rs_m64n64k16<true, 1>(o64, pa[kk], db);
    }
    gmma_commit();
    gmma_wait<0>();
    gmma_fence_operands(o);
    gmma_fence_operands(o64);

#pragma unroll
    for (int i = 0; i < 16; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = r0 + (e >> 1) * 8, c = i * 8 + 2 * t + (e & 1);
            s_out[r * 128 + c] = s[i][e];
            o_out[r * 128 + c] = o[i][e];
            if (i < 8) {
                s64_out[r * 64 + c] = s64[i][e];
                o64_out[r * 64 + c] = o64[i][e];
            }
        }
}

// ----------------------------------------------------------------------------
// host

static int compare(const char *what, const float *got, const double *want, int rows, int cols) {
    int bad = 0;
    for (int i = 0; i < rows * cols; ++i)
        if ((double)got[i] != want[i]) {
            if (bad < 5) printf("  %s[%d][%d] = %g, want %g\n", what, i / cols, i % cols, got[i], want[i]);
            ++bad;
        }
    printf("%-4s %d x %d: %s (%d mismatches)\n", what, rows, cols, bad ? "FAIL" : "ok", bad);
    return bad != 0;
}

int main(void) {
    int dev = 0;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9) {
        printf("gmma_selftest: needs an sm_90 GPU (found sm_%d%d)\n", prop.major, prop.minor);
        return 2;
    }
    static int qi[64 * 128], ki[128 * 128], vi[128 * 128], pi[64 * 128];
    static uint16_t qh[64 * 128], kh[128 * 128], vh[128 * 128], ph[64 * 128];
    uint32_t x = 12345;
    for (int i = 0; i < 128 * 128; ++i) {
        x = x * 1664525u + 1013904223u; ki[i] = (int)((x >> 24) % 7) - 3;
        x = x * 1664525u + 1013904223u; vi[i] = (int)((x >> 24) % 7) - 3;
        if (i < 64 * 128) {
            x = x * 1664525u + 1013904223u; qi[i] = (int)((x >> 24) % 7) - 3;
            x = x * 1664525u + 1013904223u; pi[i] = (int)((x >> 24) % 5) - 2;
        }
    }
    for (int i = 0; i < 128 * 128; ++i) { kh[i] = bf16_of_int(ki[i]); vh[i] = bf16_of_int(vi[i]); }
    for (int i = 0; i < 64 * 128; ++i) { qh[i] = bf16_of_int(qi[i]); ph[i] = bf16_of_int(pi[i]); }
    static double s_ref[64 * 128], o_ref[64 * 128], s64_ref[64 * 64], o64_ref[64 * 64];
    for (int r = 0; r < 64; ++r)
        for (int c = 0; c < 128; ++c) {
            double s = 0, o = 0;
            for (int kk = 0; kk < 128; ++kk) {
                s += (double)qi[r * 128 + kk] * ki[c * 128 + kk];
                o += (double)pi[r * 128 + kk] * vi[kk * 128 + c];
            }
            s_ref[r * 128 + c] = s;
            o_ref[r * 128 + c] = o;
            if (c < 64) { s64_ref[r * 64 + c] = s; o64_ref[r * 64 + c] = o; }
        }
    uint16_t *dq, *dk, *dv, *dp;
    float *ds, *dO, *ds64, *do64;
    CHECK(cudaMalloc(&dq, sizeof qh)); CHECK(cudaMalloc(&dk, sizeof kh));
    CHECK(cudaMalloc(&dv, sizeof vh)); CHECK(cudaMalloc(&dp, sizeof ph));
    CHECK(cudaMalloc(&ds, 64 * 128 * 4)); CHECK(cudaMalloc(&dO, 64 * 128 * 4));
    CHECK(cudaMalloc(&ds64, 64 * 64 * 4)); CHECK(cudaMalloc(&do64, 64 * 64 * 4));
    CHECK(cudaMemcpy(dq, qh, sizeof qh, cudaMemcpyHostToDevice)); CHECK(cudaMemcpy(dk, kh, sizeof kh, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv, vh, sizeof vh, cudaMemcpyHostToDevice)); CHECK(cudaMemcpy(dp, ph, sizeof ph, cudaMemcpyHostToDevice));
    const int smem = 1024 + 64 * 256 + 2 * 128 * 256;
    CHECK(cudaFuncSetAttribute((const void *)selftest_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    selftest_kernel<<<1, 128, smem>>>(dq, dk, dv, dp, ds, dO, ds64, do64);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    static float s_got[64 * 128], o_got[64 * 128], s64_got[64 * 64], o64_got[64 * 64];
    CHECK(cudaMemcpy(s_got, ds, sizeof s_got, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(o_got, dO, sizeof o_got, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(s64_got, ds64, sizeof s64_got, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(o64_got, do64, sizeof o64_got, cudaMemcpyDeviceToHost));
    int bad = compare("S", s_got, s_ref, 64, 128) + compare("O", o_got, o_ref, 64, 128) +
              compare("S64", s64_got, s64_ref, 64, 64) + compare("O64", o64_got, o64_ref, 64, 64);
    printf("gmma_selftest: %s\n", bad ? "FAILED" : "passed");
    return bad ? 1 : 0;
}
