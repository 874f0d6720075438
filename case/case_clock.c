/* case_clock.c: the harness's one monotonic clock (case.h, fc_clock_ns). */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "case/case.h"

int64_t fc_clock_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
