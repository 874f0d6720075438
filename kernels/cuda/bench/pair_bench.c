/* pair_bench.c: speed of the CUDA backend at Dqk != Dv (the MLA pair 192/128) beside the equal
 * head dims 128 and 192, forward and backward, dense [B, S, H, D] bf16, B = 2, H = 16. Prints one
 * line a (pass, Dqk/Dv, S, causal): median milliseconds of --iters calls after --warmup, and TFLOP/s
 * with the flops of the two products per pass: forward 2 B H Sq Sk (Dqk + Dv) (Q K^T and P V),
 * backward 2 B H Sq Sk (3 Dqk + 2 Dv) (S again, dP, dV, dQ, dK), both halved when causal
 * (Sq == Sk); "fwd1": the forward with tile family 1 (testing.h policy). Each call is the backend's own (fa_cuda_forward / fa_cuda_backward, which
 * synchronize), timed with CUDA events around it. PyTorch SDPA on the same problems:
 * pair_bench_torch.py. usage: pair_bench [--iters N] [--warmup N] [--s LIST] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/testing.h"

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "pair_bench: %s: %s\n", #x, cudaGetErrorString(e_));               \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

static int cmpf(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static fa_tensor t4(void *p, int64_t S, int64_t H, int64_t D) { return (fa_tensor){p, {S * H * D, H * D, D, 1}}; }

int main(int argc, char **argv) {
    int iters = 20, warmup = 3;
    int64_t slist[8] = {1024, 4096}, ns = 2;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--s") && i + 1 < argc) {
            ns = 0;
            for (char *tok = strtok(argv[++i], ","); tok && ns < 8; tok = strtok(NULL, ",")) slist[ns++] = atoll(tok);
        } else {
            fprintf(stderr, "usage: %s [--iters N] [--warmup N] [--s LIST]\n", argv[0]);
            return 2;
        }
    }
    if (iters < 1 || iters > 1000) iters = 20;
    const int64_t B = 2, H = 16;
    static const int64_t dims[3][2] = {{192, 128}, {128, 128}, {192, 192}};
    printf("%-4s %-8s %6s %6s %9s %8s\n", "pass", "Dqk/Dv", "S", "causal", "ms", "TFLOP/s");
    for (int si = 0; si < ns; ++si)
        for (int di = 0; di < 3; ++di)
            for (int causal = 0; causal < 2; ++causal) {
                const int64_t S = slist[si], Dqk = dims[di][0], Dv = dims[di][1];
                const size_t nq = (size_t)(B * S * H * Dqk), nv = (size_t)(B * S * H * Dv);
                uint16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
                float *lse;
                CK(cudaMalloc((void **)&q, nq * 2)); CK(cudaMalloc((void **)&k, nq * 2));
                CK(cudaMalloc((void **)&v, nv * 2)); CK(cudaMalloc((void **)&o, nv * 2));
                CK(cudaMalloc((void **)&dout, nv * 2)); CK(cudaMalloc((void **)&dq, nq * 2));
                CK(cudaMalloc((void **)&dk, nq * 2)); CK(cudaMalloc((void **)&dv, nv * 2));
                CK(cudaMalloc((void **)&lse, (size_t)(B * H * S) * 4));
                /* inputs: finite bf16 values in [2^-7, 2^-6) (exponent 0x3c0 fixed, 7 pseudo-random
                   mantissa bits), signs mixed: no NaN/Inf (which would take the fix-up and exact paths) */
                uint16_t *h = malloc((nq > nv ? nq : nv) * 2);
                for (size_t x = 0; x < (nq > nv ? nq : nv); ++x)
                    h[x] = (uint16_t)(0x3c00u | (((uint32_t)x * 2654435761u >> 13) & 0x7fu) | ((uint32_t)(x & 1) << 15));
                CK(cudaMemcpy(q, h, nq * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(k, h + 1, (nq - 1) * 2, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(v, h + 2, (nv - 2) * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dout, h + 3, (nv - 3) * 2, cudaMemcpyHostToDevice));
                free(h);
                fa_fwd_args a;
                memset(&a, 0, sizeof(a));
                a.p.batch = B; a.p.seqlen_q = a.p.seqlen_k = S; a.p.heads_q = a.p.heads_kv = H;
                a.p.head_dim_qk = Dqk; a.p.head_dim_v = Dv; a.p.dtype = FA_BF16;
                a.p.causal = causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
                a.p.window_left = a.p.window_right = -1;
                a.q = t4(q, S, H, Dqk); a.k = t4(k, S, H, Dqk); a.v = t4(v, S, H, Dv); a.o = t4(o, S, H, Dv);
                a.lse = (fa_lse){lse, {H * S, S, 1}};
                fa_bwd_args ba;
                memset(&ba, 0, sizeof(ba));
                ba.p = a.p; ba.q = a.q; ba.k = a.k; ba.v = a.v; ba.o = a.o; ba.lse = a.lse;
                ba.dout = t4(dout, S, H, Dv); ba.dq = t4(dq, S, H, Dqk); ba.dk = t4(dk, S, H, Dqk); ba.dv = t4(dv, S, H, Dv);
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
                /* pass 0: forward (default tile), 1: backward, 2: forward with tile family 1 (fwd_tiles.h) */
                fa_cuda_policy fam1 = fa_cuda_policy_default;
                fam1.fwd_family = 1;
                for (int pass = 0; pass < 3; ++pass) {
                    float *ms = malloc(sizeof(float) * iters);
                    fa_error err;
                    int bad = 0;
                    for (int it = -warmup; it < iters && !bad; ++it) {
                        CK(cudaEventRecord(e0, 0));
                        const fa_status st = pass == 1 ? fa_cuda_backward(&ba, &err)
                                             : pass == 2 ? fa_cuda_forward_policy(&a, &fam1, &err)
                                                         : fa_cuda_forward(&a, &err);
                        CK(cudaEventRecord(e1, 0));
                        CK(cudaEventSynchronize(e1));
                        if (st != FA_OK) {
                            printf("%-4s %3lld/%-4lld %6lld %6d  %s: %s\n", pass == 1 ? "bwd" : pass ? "fwd1" : "fwd", (long long)Dqk, (long long)Dv,
                                   (long long)S, causal, fa_status_name(st), err.msg);
                            bad = 1;
                        } else if (it >= 0) CK(cudaEventElapsedTime(&ms[it], e0, e1));
                    }
                    if (!bad) {
                        qsort(ms, (size_t)iters, sizeof(float), cmpf);
                        const double med = ms[iters / 2];
                        double flops = 2.0 * B * H * (double)S * (double)S * (double)(pass == 1 ? 3 * Dqk + 2 * Dv : Dqk + Dv);
                        if (causal) flops *= 0.5;
                        printf("%-4s %3lld/%-4lld %6lld %6d %9.3f %8.1f\n", pass == 1 ? "bwd" : pass ? "fwd1" : "fwd", (long long)Dqk,
                               (long long)Dv, (long long)S, causal, med, flops / (med * 1e-3) / 1e12);
                    }
                    free(ms);
                }
                fflush(stdout);
                cudaEventDestroy(e0); cudaEventDestroy(e1);
                cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(dout); cudaFree(dq); cudaFree(dk); cudaFree(dv);
                cudaFree(lse);
            }
    return 0;
}
