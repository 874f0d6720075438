/* bench_gpu.cu: the benchmark's device helpers (prefix bench_): a spin kernel that holds the
 * stream while the host prepares the timed call, and a fill of 16-bit inputs with uniform values
 * in [-1, 1) (counter hash, so every run has the same inputs). C linkage. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void bench_spin_kernel(uint64_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

/* Queue a kernel that spins for us microseconds on st (one thread). */
extern "C" cudaError_t bench_spin(void *st, int us) {
    bench_spin_kernel<<<1, 1, 0, (cudaStream_t)st>>>((uint64_t)us * 1000u);
    return cudaGetLastError();
}

__global__ void bench_fill_kernel(uint16_t *x, int64_t n, uint64_t seed, int bf16) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) * 0x1p-24f * 2.f - 1.f; /* [-1, 1) */
        if (bf16) {
            __nv_bfloat16 h = __float2bfloat16_rn(u);
            x[i] = *reinterpret_cast<uint16_t *>(&h);
        } else {
            __half h = __float2half_rn(u);
            x[i] = *reinterpret_cast<uint16_t *>(&h);
        }
    }
}

/* x[0 .. n) = uniform [-1, 1) rounded to bf16 / fp16, a function of (seed, i). */
extern "C" cudaError_t bench_fill(uint16_t *x, int64_t n, uint64_t seed, int bf16) {
    bench_fill_kernel<<<1024, 256>>>(x, n, seed, bf16);
    return cudaGetLastError();
}
