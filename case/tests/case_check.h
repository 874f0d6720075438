/* case_check.h: the CHECK of the case tests (case_test.c, case_v3_test.c). Test-only.
 * CHECK(cond, fmt, ...) prints "FAIL file:line: cond: <text>" when cond is false and counts it
 * in `failures` (main returns failures ? 1 : 0); a passing check prints nothing. */
#ifndef FLASHCHECK_CASE_CHECK_H
#define FLASHCHECK_CASE_CHECK_H

#include <stdio.h>

static int failures = 0;
#define CHECK(cond, ...)                                           \
    do {                                                           \
        if (!(cond)) {                                             \
            failures++;                                            \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            printf(__VA_ARGS__);                                   \
            printf("\n");                                          \
        }                                                          \
    } while (0)

#endif /* FLASHCHECK_CASE_CHECK_H */
