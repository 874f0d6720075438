/* bench_oracle.c: cost and tightness of the oracle on a full-size case.
 *
 *   bazel run -c opt //oracle:bench_oracle -- [B Hq Hkv S D causal]
 *   (default 2 8 8 1024 128 0: B=2, Hq=8, Sq=Sk=1024, D=128, fp16)
 *
 * Full verification (every element) of the forward and the backward of the
 * CPU backend's outputs (fa_backend_cpu) on random Gaussian inputs: wall time
 * of orc_fwd / orc_bwd (certified tier, baseline on) and of the comparison,
 * escalation counts, error/bound median and maximum per tensor, and the MPFR
 * tier's cost per multiply-add (one thread). Not a test: prints figures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/flash_api.h"
#include "oracle/oracle.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the process (all threads): meaningful when the machine is shared */
static double cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 42;
static double gauss(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = ((z >> 11) + 0.5) * 0x1p-53, v = ((z & 0x7ff) + 0.5) / 2048.0;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static uint16_t *filled(size_t n, fa_dtype dt) {
    uint16_t *x = malloc(n * 2);
    for (size_t i = 0; i < n; i++) x[i] = orc_encode(gauss(), dt);
    return x;
}

static void contiguous(fa_tensor *t, void *p, int64_t S, int64_t H, int64_t D) {
    t->ptr = p;
    t->stride[3] = 1; t->stride[2] = D; t->stride[1] = H * D; t->stride[0] = S * H * D;
}

static void report(const char *name, const orc_stats *s) {
    char buf[700];
    orc_stats_format(s, name, buf, sizeof buf);
    printf("  %s\n", buf);
}

int main(int argc, char **argv) {
    int64_t B = 2, Hq = 8, Hkv = 8, S = 1024, D = 128;
    int causal = 0;
    if (argc == 7) {
        B = atoll(argv[1]); Hq = atoll(argv[2]); Hkv = atoll(argv[3]); S = atoll(argv[4]);
        D = atoll(argv[5]); causal = atoi(argv[6]);
    }
    fa_dtype dt = FA_F16;
    const fa_backend *be = fa_backend_cpu();
    if (!be) { fprintf(stderr, "no CPU backend\n"); return 1; }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("bench_oracle: B=%lld Hq=%lld Hkv=%lld Sq=Sk=%lld D=Dv=%lld fp16 causal=%d, %d threads, backend '%s'\n",
           (long long)B, (long long)Hq, (long long)Hkv, (long long)S, (long long)D, causal, threads, be->name);

    size_t nq = (size_t)(B * S * Hq * D), nk = (size_t)(B * S * Hkv * D);
    uint16_t *q = filled(nq, dt), *k = filled(nk, dt), *v = filled(nk, dt), *dout = filled(nq, dt);
    uint16_t *o = calloc(nq, 2), *dq = calloc(nq, 2), *dk = calloc(nk, 2), *dv = calloc(nk, 2);
    float *lse = calloc((size_t)(B * Hq * S), sizeof(float));
    fa_problem p = {B, S, S, Hq, Hkv, D, D, dt, 0.0f, causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE, -1, -1,
                    FA_ALIGN_TOP_LEFT};
    fa_fwd_args fa;
    memset(&fa, 0, sizeof fa);
    fa.p = p;
    contiguous(&fa.q, q, S, Hq, D); contiguous(&fa.k, k, S, Hkv, D); contiguous(&fa.v, v, S, Hkv, D);
    contiguous(&fa.o, o, S, Hq, D);
    fa.lse.ptr = lse; fa.lse.stride[2] = 1; fa.lse.stride[1] = S; fa.lse.stride[0] = Hq * S;
    fa_error err;

    // ------------------------------------------------------------------ forward
    double t0 = now();
    if (be->forward(&fa, &err)) { fprintf(stderr, "backend forward: %s: %s\n", err.arg, err.msg); return 1; }
    double t_kfwd = now() - t0;
    orc_options opt;
    orc_options_init(&opt);
    orc_fwd_result fr;
    t0 = now();
    double c0 = cpu();
    if (orc_fwd(&fa, &be->precision, &opt, &fr, &err)) { fprintf(stderr, "orc_fwd: %s\n", err.msg); return 1; }
    double t_ofwd = now() - t0, c_ofwd = cpu() - c0;
    orc_stats so, sl;
    t0 = now();
    orc_compare_fwd(&fr, &fa.o, &fa.lse, &so, &sl, &err);
    double t_cfwd = now() - t0;
    printf("forward: backend %.2f s | orc_fwd (certified, every element, baseline on) %.3f s wall, %.3f s cpu | compare %.3f s\n",
           t_kfwd, t_ofwd, c_ofwd, t_cfwd);
    printf("  elements %lld, escalations at reference time %lld, at compare %lld\n", (long long)fr.elements,
           (long long)fr.escalations, (long long)(so.escalations + sl.escalations));
    report("O", &so);
    report("LSE", &sl);

    // ----------------------------------------------------------------- backward
    fa_bwd_args ba;
    memset(&ba, 0, sizeof ba);
    ba.p = p;
    ba.q = fa.q; ba.k = fa.k; ba.v = fa.v; ba.o = fa.o; ba.lse = fa.lse;
    contiguous(&ba.dout, dout, S, Hq, D);
    contiguous(&ba.dq, dq, S, Hq, D); contiguous(&ba.dk, dk, S, Hkv, D); contiguous(&ba.dv, dv, S, Hkv, D);
    t0 = now();
    if (be->backward(&ba, &err)) { fprintf(stderr, "backend backward: %s: %s\n", err.arg, err.msg); return 1; }
    double t_kbwd = now() - t0;
    orc_bwd_result br;
    t0 = now();
    c0 = cpu();
    if (orc_bwd(&ba, &be->precision, &opt, &br, &err)) { fprintf(stderr, "orc_bwd: %s\n", err.msg); return 1; }
    double t_obwd = now() - t0, c_obwd = cpu() - c0;
    orc_stats s3[3];
    t0 = now();
    orc_compare_bwd(&br, &ba.dq, &ba.dk, &ba.dv, &s3[0], &s3[1], &s3[2], &err);
    double t_cbwd = now() - t0;
    printf("backward: backend %.2f s | orc_bwd (certified, every element, baseline on) %.3f s wall, %.3f s cpu | compare %.3f s\n",
           t_kbwd, t_obwd, c_obwd, t_cbwd);
    printf("  elements %lld, escalations at reference time %lld, at compare %lld; given O/LSE vs exact: %.3g / %.3g of the forward bound\n",
           (long long)br.elements, (long long)br.escalations,
           (long long)(s3[0].escalations + s3[1].escalations + s3[2].escalations), br.o_input_ratio,
           br.lse_input_ratio);
    report("dQ", &s3[0]);
    report("dK", &s3[1]);
    report("dV", &s3[2]);

    // ------------------------------------------------- the same, baseline off
    orc_options ob = opt;
    ob.baseline = 0;
    orc_fwd_result fr2;
    orc_bwd_result br2;
    t0 = now();
    c0 = cpu();
    orc_fwd(&fa, &be->precision, &ob, &fr2, &err);
    double t_f2 = now() - t0, c_f2 = cpu() - c0;
    t0 = now();
    c0 = cpu();
    orc_bwd(&ba, &be->precision, &ob, &br2, &err);
    double t_b2 = now() - t0, c_b2 = cpu() - c0;
    printf("baseline off: orc_fwd %.3f s wall, %.3f s cpu | orc_bwd %.3f s wall, %.3f s cpu\n", t_f2, c_f2, t_b2, c_b2);
    orc_fwd_free(&fr2);
    orc_bwd_free(&br2);

    // ---------------------------------------------------------- MPFR tier cost
    orc_options om = opt;
    om.tier = ORC_TIER_MPFR;
    om.threads = 1;
    om.max_rows = 4;
    om.baseline = 0;
    orc_fwd_result mr;
    t0 = cpu();
    orc_fwd(&fa, &be->precision, &om, &mr, &err);
    double t_m = cpu() - t0;
    /* subtract the certified part of the same 4 rows */
    om.tier = ORC_TIER_CERTIFIED;
    orc_fwd_result cr;
    double t1 = cpu();
    orc_fwd(&fa, &be->precision, &om, &cr, &err);
    double t_c = cpu() - t1;
    double madds = 4.0 * (double)S * (double)(D + D);
    printf("MPFR tier (%d bits, 1 thread, cpu time): %.1f ns per multiply-add (forward rows: %.0f multiply-adds in %.3f s)\n",
           opt.mpfr_prec, 1e9 * (t_m - t_c) / madds, madds, t_m - t_c);
    orc_fwd_free(&mr);
    orc_fwd_free(&cr);
    orc_fwd_free(&fr);
    orc_bwd_free(&br);
    free(q); free(k); free(v); free(dout); free(o); free(dq); free(dk); free(dv); free(lse);
    return 0;
}
