/* bwd_bench.c: time fa_cuda_backward on the performance grid.
 *
 * Grid: bf16, B*S = 16384 tokens, hidden 2048 (H = 2048 / D), D in {64, 128},
 * S in {512, 1024, 2048, 4096, 8192, 16384}, causal off/on (top-left), both the
 * default (atomic dQ) and the deterministic mode. O and LSE come from
 * fa_cuda_forward on the same inputs (so P is the real softmax).
 * Timing: CUDA events around each call (the call includes its own stream
 * synchronisation, the dQ workspace clear and the preprocess), 5 warm-up calls,
 * median of REPS (default 30). FLOPs = 2.5 * 4 * B * H * S * S * D, halved for
 * causal (the FA2/FA3 convention).
 * Output: one line per configuration: D S causal mode ms TFLOP/s.
 * Usage: bwd_bench [reps] [D-filter] [S-filter] (0 = all) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static uint64_t rng = 88172645463325252ull;
static uint16_t rand_bf16(void) { /* uniform-ish in [-1, 1] as bf16 */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    float f = (float)((double)(rng >> 11) * 0x1p-52 * 2.0 - 1.0);
    uint32_t u; memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 30;
    int dfilter = argc > 2 ? atoi(argv[2]) : 0;
    int sfilter = argc > 3 ? atoi(argv[3]) : 0;
    if (reps < 20) reps = 20;
    const int64_t tokens = 16384, hidden = 2048, max_elems = tokens * hidden;
    uint16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
    CK(cudaMalloc((void **)&q, 2 * max_elems)); CK(cudaMalloc((void **)&k, 2 * max_elems));
    CK(cudaMalloc((void **)&v, 2 * max_elems)); CK(cudaMalloc((void **)&o, 2 * max_elems));
    CK(cudaMalloc((void **)&dout, 2 * max_elems)); CK(cudaMalloc((void **)&dq, 2 * max_elems));
    CK(cudaMalloc((void **)&dk, 2 * max_elems)); CK(cudaMalloc((void **)&dv, 2 * max_elems));
    CK(cudaMalloc((void **)&lse, 4 * tokens * 64));
    uint16_t *h = malloc(2 * max_elems);
    uint16_t *bufs[4] = {q, k, v, dout};
    for (int t = 0; t < 4; t++) {
        for (int64_t x = 0; x < max_elems; x++) h[x] = rand_bf16();
        CK(cudaMemcpy(bufs[t], h, 2 * max_elems, cudaMemcpyHostToDevice));
    }
    free(h);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const int dims[2] = {64, 128};
    const int64_t seqs[6] = {512, 1024, 2048, 4096, 8192, 16384};
    printf("%4s %6s %6s %-6s %9s %9s\n", "D", "S", "causal", "mode", "ms", "TFLOP/s");
    for (int di = 0; di < 2; di++) {
        if (dfilter && dims[di] != dfilter) continue;
        for (int si = 0; si < 6; si++)
            for (int causal = 0; causal < 2; causal++) {
                if (sfilter && seqs[si] != sfilter) continue;
                const int64_t D = dims[di], S = seqs[si], H = hidden / D, B = tokens / S;
                fa_problem p;
                memset(&p, 0, sizeof(p));
                p.batch = B; p.seqlen_q = p.seqlen_k = S; p.heads_q = p.heads_kv = H;
                p.head_dim_qk = p.head_dim_v = D; p.dtype = FA_BF16;
                p.causal = causal ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_NONE;
                p.window_left = p.window_right = -1;
                const int64_t st[4] = {S * H * D, H * D, D, 1};
                fa_fwd_args fa;
                memset(&fa, 0, sizeof(fa));
                fa.p = p;
                fa.q.ptr = q; fa.k.ptr = k; fa.v.ptr = v; fa.o.ptr = o;
                memcpy(fa.q.stride, st, 32); memcpy(fa.k.stride, st, 32); memcpy(fa.v.stride, st, 32);
                memcpy(fa.o.stride, st, 32);
                fa.lse.ptr = lse; fa.lse.stride[0] = H * S; fa.lse.stride[1] = S; fa.lse.stride[2] = 1;
                fa_error err;
                fa_status s = fa_cuda_forward(&fa, &err);
                if (s != FA_OK) { fprintf(stderr, "forward failed: %s %s\n", err.arg, err.msg); return 1; }
                fa_bwd_args ba;
                memset(&ba, 0, sizeof(ba));
                ba.p = p;
                ba.q = fa.q; ba.k = fa.k; ba.v = fa.v; ba.o = fa.o; ba.lse = fa.lse;
                ba.dout.ptr = dout; memcpy(ba.dout.stride, st, 32);
                ba.dq.ptr = dq; memcpy(ba.dq.stride, st, 32);
                ba.dk.ptr = dk; memcpy(ba.dk.stride, st, 32);
                ba.dv.ptr = dv; memcpy(ba.dv.stride, st, 32);
                const double flops = 2.5 * 4.0 * B * H * (double)S * S * D / (causal ? 2 : 1);
                for (int det = 0; det < 2; det++) {
                    ba.deterministic = det;
                    float *ms = malloc(sizeof(float) * reps);
                    for (int r = 0; r < 5 + reps; r++) {
                        CK(cudaEventRecord(e0, 0));
                        s = fa_cuda_backward(&ba, &err);
                        CK(cudaEventRecord(e1, 0));
                        if (s != FA_OK) { fprintf(stderr, "backward failed: %s %s\n", err.arg, err.msg); return 1; }
                        CK(cudaEventSynchronize(e1));
                        if (r >= 5) CK(cudaEventElapsedTime(&ms[r - 5], e0, e1));
                    }
                    qsort(ms, reps, sizeof(float), cmp_float);
                    float med = ms[reps / 2];
                    printf("%4lld %6lld %6d %-6s %9.3f %9.1f\n", (long long)D, (long long)S, causal,
                           det ? "det" : "atomic", med, flops / (med * 1e-3) / 1e12);
                    fflush(stdout);
                    free(ms);
                }
            }
    }
    return 0;
}
