/* phase_time_test.c: fc_check_phase_seconds (check.h), the per-phase split of fc_check_case's
 * time that `flashcheck fuzz` prints as its "phases" line. On the CPU backend: the phases of
 * one call add up to the call's wall time (laps cover it: at least 90% of it, and not more
 * than it); a case with backward spends time in every backward phase but the buffer checks
 * (which may be below the clock's resolution), a forward-only case none in any; names. */
#include <stdio.h>
#include <string.h>

#include "properties/check/tests/check_test.h"

static void one(const char *text, int backward) {
    fc_case c;
    char msg[300];
    CHECK(fc_case_parse(text, &c, msg, sizeof msg) == 0, "%s", msg);
    double a[FC_PH_COUNT], b[FC_PH_COUNT];
    fc_check_phase_seconds(a);
    fc_verdict v;
    double t0 = fc_clock_s();
    fc_outcome out = fc_check_case(fa_backend_cpu(), &c, NULL, &v);
    double wall = fc_clock_s() - t0;
    fc_check_phase_seconds(b);
    CHECK(out == FC_PASS, "outcome %s", fc_outcome_name(out));
    double sum = 0, d[FC_PH_COUNT];
    for (int k = 0; k < FC_PH_COUNT; k++) {
        d[k] = b[k] - a[k];
        CHECK(d[k] >= 0, "phase %s went back", fc_check_phase_name(k));
        sum += d[k];
        printf("  %-24s %.6f s\n", fc_check_phase_name(k), d[k]);
    }
    printf("backward %d: phases %.6f s, call %.6f s\n", backward, sum, wall);
    CHECK(sum <= wall && sum >= 0.9 * wall, "phases %.6f s against the call's %.6f s", sum, wall);
    CHECK(d[FC_PH_INPUTS] > 0 && d[FC_PH_FWD_CALL] > 0 && d[FC_PH_FWD_ORACLE] > 0 && d[FC_PH_FWD_COMPARE] > 0,
          "a forward phase has no time");
    if (backward)
        CHECK(d[FC_PH_BWD_CALL] > 0 && d[FC_PH_BWD_ORACLE] > 0 && d[FC_PH_BWD_COMPARE] > 0, "a backward phase has no time");
    else
        CHECK(d[FC_PH_BWD_CALL] == 0 && d[FC_PH_BWD_CHECKS] == 0 && d[FC_PH_BWD_ORACLE] == 0 && d[FC_PH_BWD_COMPARE] == 0,
              "a forward-only case has backward time");
}

int main(void) {
    one("shape = 2 96 80 4 2 64 64\nseed = 3\ncausal = top_left\nbackward = 1\n", 1);
    one("shape = 1 64 70 2 1 32 32\nseed = 5\nbackward = 0\n", 0);
    CHECK(!strcmp(fc_check_phase_name(FC_PH_INPUTS), "inputs") && !strcmp(fc_check_phase_name(FC_PH_BWD_ORACLE),
          "oracle backward") && !strcmp(fc_check_phase_name(FC_PH_COUNT), "?"), "phase names");
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
