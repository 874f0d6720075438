/* bench_small.c: cost of the oracle alone on the fuzz campaign's small cases.
 *
 *   bench_small [ncases [seed [reps]]]        (default 200 1 3)
 *   bench_small -case FILE [reps]             (one case file, e.g. a slow one)
 *
 * A fixed set of cases drawn like the `flashcheck fuzz` campaign's fresh cases
 * (fz_case_random + fz_case_fit with the default budget: S <= 256, D <= 128,
 * backward always on), each run once on the CPU backend; then, timed, what the
 * checks ask of the oracle: orc_fwd + orc_compare_fwd + orc_bwd +
 * orc_compare_bwd, every element, no baseline (as properties/check/check.c),
 * best of `reps`. One OpenMP thread unless OMP_NUM_THREADS says otherwise (a
 * fuzz worker runs with one). Prints the mean per case and per phase, the
 * slowest cases (their text) and the escalation counts. Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "case/case.h"
#include "fuzz/fz_gen.h"
#include "kernels/flash_api.h"
#include "oracle/oracle.h"
#include "properties/check/check.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); /* CPU time: robust on a shared machine */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fa_tensor view(const fc_buf *b) {
    fa_tensor t;
    t.ptr = b->alloc ? fc_buf_view(b) : NULL;
    for (int k = 0; k < 4; k++) t.stride[k] = b->stride[k];
    return t;
}

typedef struct {
    double t[4]; /* orc_fwd, compare fwd, orc_bwd, compare bwd (best of reps) */
    int64_t esc, elems;
    int64_t failed;
} timing;

/* Time the oracle on a case already run on the backend. Returns 0, -1 on error. */
static int time_case(const fc_run *r, const fa_precision *prec, int reps, timing *out) {
    char msg[512];
    memset(out, 0, sizeof *out);
    for (int k = 0; k < 4; k++) out->t[k] = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        orc_fwd_result fr;
        orc_bwd_result br;
        orc_stats so, sl, sq, sk, sv;
        double t0 = now();
        if (fc_oracle_fwd(r, prec, &fr, msg, sizeof msg)) { fprintf(stderr, "%s\n", msg); return -1; }
        double t1 = now();
        fa_tensor o = view(&r->buf[FC_T_O]);
        fa_lse lse;
        lse.ptr = r->buf[FC_T_LSE].alloc ? fc_buf_view(&r->buf[FC_T_LSE]) : NULL;
        for (int k = 0; k < 3; k++) lse.stride[k] = r->buf[FC_T_LSE].stride[k];
        orc_compare_fwd(&fr, &o, &lse, &so, &sl, NULL);
        double t2 = now();
        if (fc_oracle_bwd(r, prec, &br, msg, sizeof msg)) { fprintf(stderr, "%s\n", msg); return -1; }
        double t3 = now();
        fa_tensor dq = view(&r->buf[FC_T_DQ]), dk = view(&r->buf[FC_T_DK]), dv = view(&r->buf[FC_T_DV]);
        orc_compare_bwd(&br, &dq, &dk, &dv, &sq, &sk, &sv, NULL);
        double t4 = now();
        double d[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        for (int k = 0; k < 4; k++) if (d[k] < out->t[k]) out->t[k] = d[k];
        out->esc = fr.escalations + br.escalations + so.escalations + sl.escalations + sq.escalations +
                   sk.escalations + sv.escalations;
        out->elems = fr.elements + br.elements;
        out->failed = so.failed + sl.failed + sq.failed + sk.failed + sv.failed;
        orc_fwd_free(&fr);
        orc_bwd_free(&br);
    }
    return 0;
}

static int prepare(const fc_case *c, const fa_backend *be, fc_run *r) {
    char msg[512];
    if (fc_run_init(r, c, 0, msg, sizeof msg)) { fprintf(stderr, "case: %s\n", msg); return -1; }
    if (fc_run_forward(r, be) != FA_OK || fc_run_backward(r, be) != FA_OK) {
        fprintf(stderr, "backend: %s\n", r->err.msg);
        fc_run_free(r);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
#ifdef _OPENMP
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(1); /* libgomp read the env before main */
#endif
    const fa_backend *be = fa_backend_cpu();
    if (argc >= 3 && !strcmp(argv[1], "-case")) {
        fc_case c;
        char msg[512];
        if (fc_case_load(argv[2], &c, msg, sizeof msg)) { fprintf(stderr, "%s\n", msg); return 2; }
        c.backward = 1;
        fc_run r;
        if (prepare(&c, be, &r)) return 2;
        timing t;
        if (time_case(&r, &be->precision, argc > 3 ? atoi(argv[3]) : 1, &t)) return 2;
        printf("orc_fwd %.3f ms, compare fwd %.3f ms, orc_bwd %.3f ms, compare bwd %.3f ms; %lld elements, "
               "%lld escalations, %lld failed\n", 1e3 * t.t[0], 1e3 * t.t[1], 1e3 * t.t[2], 1e3 * t.t[3],
               (long long)t.elems, (long long)t.esc, (long long)t.failed);
        fc_run_free(&r);
        return 0;
    }
    int ncases = argc > 1 ? atoi(argv[1]) : 200;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    fz_budget bud;
    fz_budget_default(&bud);
    bud.backward = 1;
    fz_rng rng;
    fz_rng_seed(&rng, seed);
    double sum[4] = {0, 0, 0, 0}, worst[5] = {0};
    fc_case worst_case[5];
    int64_t esc = 0, elems = 0, failed = 0, done = 0;
    for (int k = 0; k < ncases; k++) {
        fc_case c;
        fz_case_random(&rng, &c);
        fz_case_fit(&c, &bud, &be->limits, 1);
        c.backward = 1;
        fc_run r;
        if (prepare(&c, be, &r)) continue;
        timing t;
        if (time_case(&r, &be->precision, reps, &t)) { fc_run_free(&r); continue; }
        double tot = t.t[0] + t.t[1] + t.t[2] + t.t[3];
        if (getenv("BENCH_VERBOSE"))
            fprintf(stderr, "case %d: %.2f ms (fwd %.2f cmp %.2f bwd %.2f cmp %.2f) esc %lld\n", k, 1e3 * tot,
                    1e3 * t.t[0], 1e3 * t.t[1], 1e3 * t.t[2], 1e3 * t.t[3], (long long)t.esc);
        for (int p = 0; p < 4; p++) sum[p] += t.t[p];
        for (int w = 0; w < 5; w++)
            if (tot > worst[w]) {
                for (int x = 4; x > w; x--) { worst[x] = worst[x - 1]; worst_case[x] = worst_case[x - 1]; }
                worst[w] = tot; worst_case[w] = c;
                break;
            }
        esc += t.esc; elems += t.elems; failed += t.failed; done++;
        fc_run_free(&r);
    }
    double all = sum[0] + sum[1] + sum[2] + sum[3];
    printf("%lld cases (seed %llu, best of %d): oracle %.3f ms/case mean = orc_fwd %.3f + compare fwd %.3f + "
           "orc_bwd %.3f + compare bwd %.3f; %.1f cases/s on one core; %lld elements, %lld escalations, "
           "%lld failed\n", (long long)done, (unsigned long long)seed, reps, 1e3 * all / done, 1e3 * sum[0] / done,
           1e3 * sum[1] / done, 1e3 * sum[2] / done, 1e3 * sum[3] / done, done / all, (long long)elems,
           (long long)esc, (long long)failed);
    for (int w = 0; w < 5 && worst[w] > 0; w++) {
        char text[4096];
        fc_case_write(&worst_case[w], text, sizeof text);
        printf("slow #%d: %.2f ms\n%s\n", w + 1, 1e3 * worst[w], text);
    }
    return 0;
}
