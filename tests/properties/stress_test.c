/* stress_test.c: stress mode of fc_check_case (properties/check/check.h "stress") on the CPU backend.
 *   - fc_stress_case raises the batch toward FC_STRESS_ROWS rows within FC_STRESS_MAX_WORK, never
 *     lowers it, and changes nothing else;
 *   - the load runs (a host backend: copies counted) and stops;
 *   - the correct backend passes stress mode (forward + deterministic backward, and a
 *     nondeterministic backward judged against the oracle): no false alarm;
 *   - mutant fwd_order_varies_at_scale (a summation order that flips from call to call once a call
 *     has >= 4096 query rows, every result inside the oracle's bound) PASSES the plain checks of a
 *     small case (two reproducible runs) and FAILS them with stress mode, by the "stress" check;
 *   - mutant causal_off_by_one, caught by the plain checks, is not re-run (stress adds nothing). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "case/case.h"
#include "kernels/cpu/cpu_mutants.h"
#include "kernels/flash_api.h"
#include "properties/check/check.h"

static int failures;

#define EXPECT(cond, ...)                                  \
    do {                                                   \
        if (cond) {                                        \
            printf("ok    ");                              \
        } else {                                           \
            printf("FAIL  ");                              \
            failures++;                                    \
        }                                                  \
        printf(__VA_ARGS__);                               \
        printf("\n");                                      \
    } while (0)

static fc_case parse(const char *text) {
    fc_case c;
    char msg[300];
    if (fc_case_parse(text, &c, msg, sizeof msg)) {
        printf("FAIL  case does not parse: %s\n", msg);
        failures++;
        fc_case_default(&c);
    }
    return c;
}

static fc_outcome check(const char *mutant, const fc_case *c, int stress, fc_verdict *v) {
    fa_cpu_set_mutant(fa_cpu_mutant_id(mutant));
    fc_check_opts o;
    fc_check_opts_default(&o);
    o.stress = stress;
    fc_outcome got = fc_check_case(fa_backend_cpu(), c, &o, v);
    fa_cpu_set_mutant(0);
    return got;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* which cases stress re-runs: a pipeline of more than two 128-blocks */
    {
        fc_case a = parse("shape = 1 64 257 2 1 16 16\nbackward = 0\nseed = 1\n");
        fc_case b2 = parse("shape = 1 64 256 2 1 16 16\nbackward = 1\nseed = 1\n");
        fc_case q = parse("shape = 1 300 64 2 1 16 16\nbackward = 1\nseed = 1\n");
        fc_case qf = parse("shape = 1 300 64 2 1 16 16\nbackward = 0\nseed = 1\n");
        EXPECT(fc_stress_applies(&a) && !fc_stress_applies(&b2) && fc_stress_applies(&q) && !fc_stress_applies(&qf),
               "fc_stress_applies: Sk 257 %d (want 1), Sk 256 %d (0), bwd Sq 300 %d (1), fwd Sq 300 %d (0)",
               fc_stress_applies(&a), fc_stress_applies(&b2), fc_stress_applies(&q), fc_stress_applies(&qf));
    }
    /* the stress size */
    fc_case small = parse("shape = 1 64 96 2 1 16 16\nbackward = 1\nseed = 41\n"), big;
    int64_t b = fc_stress_case(&small, &big);
    EXPECT(b == 256 && big.p.batch == 256, "stress size of B=1 Hq=2 Sq=64: batch %lld (want 256: 32768 rows)", (long long)b);
    fc_case cmp = big;
    cmp.p.batch = small.p.batch;
    EXPECT(memcmp(&cmp, &small, sizeof cmp) == 0, "stress size changes the batch only");
    fc_case wide = parse("shape = 2 200 300 4 2 128 128\n"), wbig;
    b = fc_stress_case(&wide, &wbig);
    EXPECT(b == 2 && fc_case_work(&wbig) == fc_case_work(&wide), "a case above the work cap keeps its batch (%lld)", (long long)b);
    fc_case mid = parse("shape = 1 100 100 2 1 64 64\n"), mbig;
    b = fc_stress_case(&mid, &mbig);
    EXPECT(fc_case_work(&mbig) <= FC_STRESS_MAX_WORK && b > 1 && b * 2 * 100 < FC_STRESS_ROWS,
           "the work cap binds: batch %lld, work %lld <= %lld", (long long)b, (long long)fc_case_work(&mbig),
           (long long)FC_STRESS_MAX_WORK);
    fc_case empty = parse("shape = 1 0 17 2 1 16 16\n"), ebig;
    EXPECT(fc_stress_case(&empty, &ebig) == 1, "Sq = 0: nothing to grow");

    /* the load */
    fc_stress_load *l = fc_stress_load_start(fa_backend_cpu());
    struct timespec ts = {0, 100 * 1000 * 1000};
    for (int k = 0; k < 300 && fc_stress_load_copies(l) < 8; k++) nanosleep(&ts, NULL); /* a busy machine: wait up to 30 s */
    char msg[256];
    int64_t copies = fc_stress_load_stop(l, msg, sizeof msg);
    EXPECT(copies >= 8, "host load ran: %lld copies of 4 MiB (%s)", (long long)copies, msg);

    /* the correct backend: no false alarm */
    fc_verdict v;
    fc_outcome got = check("none", &small, 3, &v);
    EXPECT(got == FC_PASS, "correct backend, stress 3, forward + deterministic backward: %s", fc_outcome_name(got));
    if (got != FC_PASS) fc_verdict_print(&v, stdout);
    fc_case nondet = small;
    nondet.deterministic = 0;
    got = check("none", &nondet, 2, &v);
    EXPECT(got == FC_PASS, "correct backend, stress 2, nondeterministic backward (judged by the oracle): %s",
           fc_outcome_name(got));
    if (got != FC_PASS) fc_verdict_print(&v, stdout);

    /* the mutant only stress mode can see */
    small.backward = 0; /* a forward mutant: the backward adds only time */
    got = check("fwd_order_varies_at_scale", &small, 0, &v);
    EXPECT(got == FC_PASS, "fwd_order_varies_at_scale passes the plain checks (B=1, 128 rows): %s", fc_outcome_name(got));
    got = check("fwd_order_varies_at_scale", &small, 3, &v);
    EXPECT(got == FC_FAIL && fc_verdict_has(&v, "stress"), "fwd_order_varies_at_scale caught by stress 3: %s [%s]",
           fc_outcome_name(got), fc_verdict_first_check(&v));
    if (got == FC_FAIL) printf("      %s\n", v.reason[0].text);

    /* a mutant the plain checks catch: stress mode is not run on a failed case */
    fc_case causal = parse("shape = 1 40 40 2 1 16 16\ncausal = top_left\nbackward = 0\n");
    got = check("causal_off_by_one", &causal, 3, &v);
    EXPECT(got == FC_FAIL && !fc_verdict_has(&v, "stress"), "causal_off_by_one: %s by [%s], no stress re-runs",
           fc_outcome_name(got), fc_verdict_first_check(&v));
    printf("%d failed\n", failures);
    return failures != 0;
}
