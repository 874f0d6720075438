/* gen_bench.c: input generation time per element, generator v1 against v2, every
 * distribution: `bazel run -c opt //case:gen_bench` (OMP_NUM_THREADS=1 for one core).
 * Fills Q, K, V, dO of a B=3 S=256 H=8 D=128 case (786432 elements each), best of 3. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

#include "case/case.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    printf("%-12s %-5s %12s %12s %8s\n", "dist", "dtype", "v1 ns/elem", "v2 ns/elem", "v1/v2");
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < FC_DIST_COUNT; k++) {
            double ns[3] = {0, 0, 0};
            for (int gen = 1; gen <= 2; gen++) {
                fc_case c;
                fc_case_default(&c);
                c.gen = gen;
                c.p.batch = 3; c.p.seqlen_q = c.p.seqlen_k = 256; c.p.heads_q = c.p.heads_kv = 8;
                c.p.head_dim_qk = c.p.head_dim_v = 128;
                c.p.dtype = dt ? FA_BF16 : FA_F16;
                for (int t = 0; t < FC_N_DIST_INPUTS; t++) c.dist[t].kind = (fc_dist_kind)k;
                double best = 1e30;
                int64_t n = 0;
                for (int rep = 0; rep < 3; rep++) {
                    double t0 = now();
                    n = 0;
                    for (int t = 0; t < FC_N_DIST_INPUTS; t++) {
                        fc_buf b;
                        char msg[256];
                        if (fc_buf_alloc(&c, t, 0, FC_POISON_A, &b, msg, sizeof msg)) { fprintf(stderr, "%s\n", msg); return 1; }
                        fc_case_fill(&c, &b);
                        n += fc_case_numel(&c, t);
                        fc_buf_free(&b);
                    }
                    double dtm = now() - t0;
                    if (dtm < best) best = dtm;
                }
                ns[gen] = 1e9 * best / (double)n;
            }
            printf("%-12s %-5s %12.2f %12.2f %8.2f\n", fc_dist_name((fc_dist_kind)k), dt ? "bf16" : "fp16", ns[1], ns[2],
                   ns[1] / ns[2]);
        }
    return 0;
}
