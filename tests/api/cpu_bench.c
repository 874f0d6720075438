/* cpu_bench.c: wall time of the CPU backend's forward and backward.
 * usage: cpu_bench [B Sq Sk Hq Hkv D causal(0/1/2) reps] */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "tests/api/api_test_util.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int64_t v[8] = {1, 1024, 1024, 8, 8, 128, 1, 3};
    for (int i = 1; i < argc && i <= 8; i++) v[i - 1] = atoll(argv[i]);
    fa_problem p = tt_problem(v[0], v[1], v[2], v[3], v[4], v[5], v[5], FA_F16);
    p.causal = (fa_causal)v[6];
    tt_case c;
    tt_case_init(&c, p, TT_CONTIGUOUS, 1);
    fa_fwd_args fa = tt_fwd_args(&c);
    fa_bwd_args ba = tt_bwd_args(&c);
    fa_error err;
    double best_f = 1e30, best_b = 1e30;
    for (int64_t r = 0; r < v[7]; r++) {
        double t0 = now();
        if (fa_backend_cpu()->forward(&fa, &err) != FA_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
        double t1 = now();
        if (fa_backend_cpu()->backward(&ba, &err) != FA_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
        double t2 = now();
        if (t1 - t0 < best_f) best_f = t1 - t0;
        if (t2 - t1 < best_b) best_b = t2 - t1;
    }
    /* useful flops: 4 B Hq Sq Sk D forward (x0.5 causal), 2.5x that backward (FA2 convention) */
    double flops = 4.0 * (double)(v[0] * v[3] * v[1] * v[2] * v[5]) * (p.causal ? 0.5 : 1.0);
    printf("B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld D=%lld causal=%lld: fwd %.3f s (%.2f GFLOP/s), "
           "bwd %.3f s (%.2f GFLOP/s), best of %lld\n", (long long)v[0], (long long)v[1], (long long)v[2],
           (long long)v[3], (long long)v[4], (long long)v[5], (long long)v[6], best_f, flops / best_f * 1e-9,
           best_b, 2.5 * flops / best_b * 1e-9, (long long)v[7]);
    tt_case_free(&c);
    return 0;
}
