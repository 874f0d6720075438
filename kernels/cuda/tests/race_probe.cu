/* race_probe.cu: can a tensor-map copy (TMA) overwrite a shared-memory tile that an issued,
 * not yet waited-for wgmma chain still reads, on this GPU? The question behind the surviving
 * mutant fwd_sm90_ws_missing_barrier (tests/mutants/RESULTS-2026-11-25.md): the warp-specialized
 * forward's consumers released a K/V stage right after issuing the wgmma that reads it.
 * Prefix rp_.
 *
 * One trial = one CTA (one per SM: the dynamic shared memory is sized like the forward's), roles:
 *   warpgroup 1 (warps 4..7, the consumer): tile A[64 x 128] = 1.0 (K-major, 128-byte swizzle),
 *     tile X[128 x 128] = 0 ("old data": the K stage of the forward at head dim 128, two
 *     64-column boxes); it issues a chain of N passes, each pass 8 wgmma m64n128k16 over the 8
 *     k slices of X (one pass = the forward's S = Q K^T at head dim 128), D += A X^T, then commits.
 *   warp 0 (the producer) then overwrites X with "new data" (all 1.0) while the chain may still run.
 * With A = 1 and X in {0, 1}, every element of D counts, exactly (integers < 2^24 in fp32), the
 * elements of X that the wgmma reads saw as new: D[r][c] = sum over the 8N slice reads of the
 * ones in row c's 16-element slice. Sum over D = 0: every read saw old data (no race); > 0: some
 * read saw the overwrite (the race manifested; new or mixed data).
 *
 * Variants (the consumer's release and the overwrite):
 *   tma_mbar_l2   the forward's protocol with the mutant's bug: each consumer warp's lane 0 arrives
 *                 on the "empty" mbarrier right after the commit (no wgmma wait); the producer
 *                 waits on it, arms the "full" mbarrier (expect_tx) and issues the same two
 *                 cp.async.bulk.tensor boxes (64 x 128, 128-byte swizzle, L2 promotion 256 B) as
 *                 the forward's K load; source resident in L2 (read by a kernel just before).
 *   tma_mbar_hbm  the same, L2 flushed before the launch (source cold, from HBM).
 *   tma_self_l2   the consumer's thread 0 issues the TMA itself right after the commit.
 *   st_shared     CONTROL that must show the race: the producer warp waits on the empty mbarrier
 *                 and overwrites X with st.shared (then fence.proxy.async): no copy latency.
 *   tma_waited_l2 CONTROL that must not: the correct protocol (wgmma wait before the arrive).
 *   v_*           the same with X read as the V stage: D += P X, P = 1 in registers (gmma_rs,
 *                 X MN-major: one pass = the forward's O += P V at head dim 128).
 * The probe is valid only if st_shared and v_st_shared show the race at the largest N and
 * tma_waited_l2 / v_tma_waited_l2 never do; exit status 1 otherwise (it could not have seen a race, or it reports false ones).
 *
 * Timing (clock64 of the SM, cycles after the consumer's commit, medians over the trials):
 * "land" when the producer saw the overwrite complete (full mbarrier / its stores done),
 * "chain" when the consumer's wgmma wait returned (the last read of X is before it); "issue" is
 * the cycles from the first wgmma's issue to the commit (long when issue stalls on a full queue:
 * then the window after the release is shorter than N passes, and chain_med says how long).
 *
 * usage: race_probe [--reps R] [--max-n N]   (needs an sm_90 GPU; exit 2 elsewhere)
 * output: one table row per (variant, N): trials, raced (trials whose D saw new data),
 * frac_raced, new_reads (mean fraction of the chain's slice reads that saw new data, over the
 * raced trials), issue/land/chain medians; then a VERDICT line. */
#include <cuda.h>  // CUtensorMap (the encoder comes from the driver at run time)
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common/gmma.h"
#include "kernels/cuda/common/ptx.h"

#define RP_CHECK(x)                                                                            \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "race_probe: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,            \
                    cudaGetErrorString(e_));                                                   \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

enum { RP_TMA_MBAR = 0, RP_TMA_SELF = 1, RP_ST_SHARED = 2, RP_TMA_WAITED = 3 };

/* Per trial: sum over D (exact integer) and clock64 values of the SM (the host subtracts
 * t_commit). */
typedef struct {
    unsigned long long sum;  // D's elements as integers (exact)
    long long t_start, t_commit, t_land, t_done;
} rp_trial;

static constexpr uint32_t RP_A_BYTES = 64 * 128 * 2, RP_X_BYTES = 128 * 128 * 2;
static constexpr size_t RP_SMEM = 200 * 1024;  // one CTA per SM, like the forward (~193 KB)

typedef struct {
    CUtensorMap x;
} rp_maps;

/* N passes unrolled: a runtime loop lets the compiler move the accumulators between the wgmmas,
 * and ptxas then serializes them (a wait after each: no window, the probe could see nothing). */
template <int N>
__global__ void __launch_bounds__(256, 1)
    rp_kernel(const __grid_constant__ rp_maps maps, int variant, int v_layout, int n_src, rp_trial *out) {
#if GMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem[];
    const uint32_t sA = (ptx_smem(smem) + 1023u) & ~1023u, sX = sA + RP_A_BYTES;
    const uint32_t b_empty = sX + RP_X_BYTES, b_full = b_empty + 8;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint4 ones = make_uint4(0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u);  // bf16 1.0
    const uint4 zeros = make_uint4(0, 0, 0, 0);
    for (uint32_t o = (uint32_t)tid * 16u; o < RP_A_BYTES; o += 256u * 16u) ptx_st_shared16(sA + o, ones);
    for (uint32_t o = (uint32_t)tid * 16u; o < RP_X_BYTES; o += 256u * 16u) ptx_st_shared16(sX + o, zeros);
    if (tid == 0) {
        gmma_mbar_init(b_empty, 4);  // one arrival per consumer warp
        gmma_mbar_init(b_full, 1);
        gmma_mbar_init_fence();
    }
    gmma_fence_proxy();  // the old data -> the tensor cores' and the copy engine's view
    __syncthreads();
    const int src = (int)(blockIdx.x % (unsigned)n_src);
    const bool tma = variant != RP_ST_SHARED;

    if (warp == 0) {
        // ---- producer
        long long t_land = 0;
        if (variant == RP_ST_SHARED) {
            gmma_mbar_wait(b_empty, 0);
            for (uint32_t o = (uint32_t)lane * 16u; o < RP_X_BYTES; o += 32u * 16u) ptx_st_shared16(sX + o, ones);
            gmma_fence_proxy();
            __syncwarp();
            t_land = clock64();
        } else if (lane == 0) {
            if (variant != RP_TMA_SELF) {
                gmma_mbar_wait(b_empty, 0);
                gmma_mbar_arrive_tx(b_full, RP_X_BYTES);
                gmma_tma_load4(sX, &maps.x, b_full, 0, 0, src, 0);
                gmma_tma_load4(sX + 128 * 128, &maps.x, b_full, 64, 0, src, 0);
            }
            gmma_mbar_wait(b_full, 0);
            t_land = clock64();
        }
        if (lane == 0) out[blockIdx.x].t_land = t_land;
        return;
    }
    if (warp < 4) return;

    // ---- consumer warpgroup
    float acc[16][4];
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const long long t_start = clock64();
    gmma_fence();
    if (v_layout) {
        // X as the V stage: D += P X, P = 1 in registers, X MN-major (fwd_ws_issue_pv at head dim 128)
        const uint32_t pa[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
#pragma unroll
        for (int i = 0; i < N; ++i) {
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) gmma_rs<128, true, 1>(acc, pa, gmma_desc(sX + kk * 16 * 128, 128 * 128, 1024));
        }
    } else {
        // X as the K stage: D += A X^T, both K-major (fwd_ws_issue_qk at head dim 128)
#pragma unroll
        for (int i = 0; i < N; ++i) {
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) {
                const uint64_t da = gmma_desc(sA + gmma_kslice_offset<64>(kk), 16, 1024);
                const uint64_t dx = gmma_desc(sX + gmma_kslice_offset<128>(kk), 16, 1024);
                gmma_ss<128, true, 0, 0>(acc, da, dx, 1);
            }
        }
    }
    gmma_commit();
    const long long t_commit = clock64();
    if (variant == RP_TMA_WAITED) gmma_wait<0>();
    if (variant == RP_TMA_SELF) {
        if (tid == 128) {
            gmma_mbar_arrive_tx(b_full, RP_X_BYTES);
            gmma_tma_load4(sX, &maps.x, b_full, 0, 0, src, 0);
            gmma_tma_load4(sX + 128 * 128, &maps.x, b_full, 64, 0, src, 0);
        }
    } else if (lane == 0) {
        gmma_mbar_arrive(b_empty);
    }
    gmma_wait<0>();
    gmma_fence_operands(acc);
    const long long t_done = clock64();
    float s = 0.0f;  // at most 64 elements of at most 16 * 8 * 4: exact
#pragma unroll
    for (int i = 0; i < 16; ++i) s += (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]);
    atomicAdd(&out[blockIdx.x].sum, (unsigned long long)s);
    if (tma) gmma_mbar_wait(b_full, 0);  // no copy in flight when the CTA exits
    if (tid == 128) {
        out[blockIdx.x].t_start = t_start;
        out[blockIdx.x].t_commit = t_commit;
        out[blockIdx.x].t_done = t_done;
    }
#else
    (void)maps; (void)variant; (void)v_layout; (void)n_src; (void)out;
    __trap();
#endif
}

__global__ void rp_touch(const uint4 *p, size_t n, uint4 *sink) {  // reads the sources into L2
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    if (acc.x == 0x12345678u) *sink = acc;  // never: keeps the loads
}

// ----------------------------------------------------------------------------
// host

typedef CUresult (*rp_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The map of n_src source tiles (128 columns x 128 rows of bf16 each) with the forward's K map
 * settings (fwd_sm90_ws.cu fwd_ws_map): box 64 x 128, 128-byte swizzle, L2 promotion 256 B. */
static void rp_map(CUtensorMap *m, void *base, int n_src) {
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    RP_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess) {
        fprintf(stderr, "race_probe: no cuTensorMapEncodeTiled in the driver\n");
        exit(2);
    }
    const cuuint64_t dims[4] = {128, 128, (cuuint64_t)n_src, 1};
    const cuuint64_t strides[3] = {256, 128 * 256, (cuuint64_t)n_src * 128 * 256};
    const cuuint32_t box[4] = {64, 128, 1, 1}, estr[4] = {1, 1, 1, 1};
    const CUresult r = ((rp_encode_fn)f)(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, base, dims, strides, box, estr,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "race_probe: cuTensorMapEncodeTiled failed (%d)\n", (int)r);
        exit(2);
    }
}

static int rp_cmp_ll(const void *a, const void *b) {
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}
static long long rp_median(long long *v, int n) {
    if (n == 0) return -1;
    qsort(v, (size_t)n, sizeof *v, rp_cmp_ll);
    return v[n / 2];
}

typedef struct {
    const char *name;
    int variant, cold, v_layout;
} rp_variant;

static const rp_variant RP_VARIANTS[] = {
    {"tma_mbar_l2", RP_TMA_MBAR, 0, 0},     {"tma_mbar_hbm", RP_TMA_MBAR, 1, 0},    {"tma_self_l2", RP_TMA_SELF, 0, 0},
    {"v_tma_mbar_l2", RP_TMA_MBAR, 0, 1},   {"st_shared", RP_ST_SHARED, 0, 0},      {"v_st_shared", RP_ST_SHARED, 0, 1},
    {"tma_waited_l2", RP_TMA_WAITED, 0, 0}, {"v_tma_waited_l2", RP_TMA_WAITED, 0, 1},
};
/* N <= 4 (32 wgmmas in flight): from N = 6 on, ptxas serializes the chain (C7511, "insufficient
 * register resources for the wgmma pipeline": each in-flight wgmma keeps its descriptor registers),
 * which would close the window and make every row read "no race". N = 4 passes is the kernel's
 * longest window (RESULTS-2026-11-25.md). */
static const int RP_NS[] = {1, 2, 3, 4};
typedef void (*rp_kernel_fn)(const rp_maps, int, int, int, rp_trial *);
static rp_kernel_fn rp_kernel_of(int n) {
    switch (n) {
    case 1: return rp_kernel<1>;
    case 2: return rp_kernel<2>;
    case 3: return rp_kernel<3>;
    default: return rp_kernel<4>;
    }
}

int main(int argc, char **argv) {
    int reps = 24, max_n = 4;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-n") && i + 1 < argc) max_n = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: race_probe [--reps R] [--max-n N]\n");
            return 2;
        }
    }
    if (reps < 1 || max_n < 1 || max_n > 4) {
        fprintf(stderr, "race_probe: --reps >= 1, 1 <= --max-n <= 4\n");
        return 2;
    }
    int dev = 0;
    cudaDeviceProp prop;
    RP_CHECK(cudaGetDevice(&dev));
    RP_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9) {
        printf("race_probe: needs an sm_90 GPU (found sm_%d%d)\n", prop.major, prop.minor);
        return 2;
    }
    const int ctas = prop.multiProcessorCount, n_src = ctas;
    const size_t src_bytes = (size_t)n_src * RP_X_BYTES, flush_bytes = (size_t)4 * prop.l2CacheSize + (64u << 20);
    void *src = NULL, *flush = NULL, *sink = NULL;
    rp_trial *d_out = NULL;
    RP_CHECK(cudaMalloc(&src, src_bytes));
    RP_CHECK(cudaMalloc(&flush, flush_bytes));
    RP_CHECK(cudaMalloc(&sink, 16));
    RP_CHECK(cudaMalloc((void **)&d_out, (size_t)ctas * sizeof(rp_trial)));
    {
        uint16_t *h = (uint16_t *)malloc(src_bytes);
        for (size_t i = 0; i < src_bytes / 2; ++i) h[i] = 0x3F80;  // bf16 1.0: the new data
        RP_CHECK(cudaMemcpy(src, h, src_bytes, cudaMemcpyHostToDevice));
        free(h);
    }
    rp_maps maps;
    rp_map(&maps.x, src, n_src);
    for (int j = 0; j < (int)(sizeof RP_NS / sizeof RP_NS[0]); ++j)
        RP_CHECK(cudaFuncSetAttribute((const void *)rp_kernel_of(RP_NS[j]), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)RP_SMEM));
    rp_trial *h_out = (rp_trial *)malloc((size_t)ctas * sizeof(rp_trial));
    const int total = ctas * reps;
    long long *land = (long long *)malloc((size_t)total * sizeof(long long));
    long long *chain = (long long *)malloc((size_t)total * sizeof(long long));
    long long *issue = (long long *)malloc((size_t)total * sizeof(long long));

    printf("race_probe on %s (%d SMs, L2 %d MB): %d trials per row (%d CTAs x %d launches)\n", prop.name, ctas,
           prop.l2CacheSize >> 20, total, ctas, reps);
    printf("one pass = 8 wgmma m64n128k16 over X (the forward's S = Q K^T at head dim 128); cycles after the commit\n");
    printf("%-15s %3s %7s %7s %10s %9s %9s %10s %10s\n", "variant", "N", "trials", "raced", "frac_raced", "new_reads",
           "issue_med", "land_med", "chain_med");
    int tma_min_n[2] = {0, 0}, st_raced_max_n = -1, waited_raced = 0;  // st: the smaller of the two layouts
    const int nv = (int)(sizeof RP_VARIANTS / sizeof RP_VARIANTS[0]), nn = (int)(sizeof RP_NS / sizeof RP_NS[0]);
    int n_last = 1;
    for (int j = 0; j < nn; ++j)
        if (RP_NS[j] <= max_n) n_last = RP_NS[j];
    for (int v = 0; v < nv; ++v) {
        const rp_variant *V = &RP_VARIANTS[v];
        for (int j = 0; j < nn && RP_NS[j] <= max_n; ++j) {
            const int N = RP_NS[j];
            int raced = 0, k = 0;
            double newfrac = 0.0;
            for (int r = 0; r < reps; ++r) {
                if (V->cold) RP_CHECK(cudaMemset(flush, r & 0xff, flush_bytes));  // evicts the sources
                else rp_touch<<<ctas * 4, 256>>>((const uint4 *)src, src_bytes / 16, (uint4 *)sink);
                RP_CHECK(cudaMemset(d_out, 0, (size_t)ctas * sizeof(rp_trial)));
                rp_kernel_of(N)<<<ctas, 256, RP_SMEM>>>(maps, V->variant, V->v_layout, n_src, d_out);
                RP_CHECK(cudaGetLastError());
                RP_CHECK(cudaDeviceSynchronize());
                RP_CHECK(cudaMemcpy(h_out, d_out, (size_t)ctas * sizeof(rp_trial), cudaMemcpyDeviceToHost));
                for (int c = 0; c < ctas; ++c, ++k) {
                    const unsigned long long full = 8192ull * 128ull * (unsigned long long)N;
                    if (h_out[c].sum > full) {
                        fprintf(stderr, "race_probe: trial sum %llu > %llu: the probe is broken\n", h_out[c].sum, full);
                        return 1;
                    }
                    if (h_out[c].sum > 0) {
                        ++raced;
                        newfrac += (double)h_out[c].sum / (double)full;
                    }
                    land[k] = h_out[c].t_land - h_out[c].t_commit;
                    chain[k] = h_out[c].t_done - h_out[c].t_commit;
                    issue[k] = h_out[c].t_commit - h_out[c].t_start;
                }
            }
            printf("%-15s %3d %7d %7d %10.4f %9.4f %9lld %10lld %10lld\n", V->name, N, total, raced, (double)raced / total,
                   raced ? newfrac / raced : 0.0, rp_median(issue, total), rp_median(land, total), rp_median(chain, total));
            fflush(stdout);
            if (V->variant == RP_ST_SHARED && N == n_last && (st_raced_max_n < 0 || raced < st_raced_max_n)) st_raced_max_n = raced;
            if (V->variant == RP_TMA_WAITED) waited_raced += raced;
            int *mn = &tma_min_n[V->v_layout];
            if ((V->variant == RP_TMA_MBAR || V->variant == RP_TMA_SELF) && raced && (!*mn || N < *mn)) *mn = N;
        }
    }
    const int valid = st_raced_max_n > 0 && waited_raced == 0;
    printf("VERDICT probe=%s (st_shared raced in %d trials at N=%d; tma_waited raced in %d) tma_race=%s", valid ? "valid" : "INVALID",
           st_raced_max_n, n_last, waited_raced, tma_min_n[0] || tma_min_n[1] ? "yes" : "no");
    printf(" (smallest N with a TMA race: K layout %d, V layout %d; 0 = none)\n", tma_min_n[0], tma_min_n[1]);
    return valid ? 0 : 1;
}
