/* orc_mpfr_sum.h: the MPFR tier's sums of exact products (orc_mpfr.c), declared apart
 * from orc_internal.h so that the GPU tier's nvcc objects do not depend on it. */
#ifndef FLASHCHECK_ORC_MPFR_SUM_H
#define FLASHCHECK_ORC_MPFR_SUM_H

#include <stdint.h>
#include <mpfr.h>

/* r = x[0] + ... + x[n-1] summed left to right from +0, each add correctly rounded to r's
 * precision (RNDN): how the MPFR tier sums exact double products (scores q.k, dO.v). */
void orc_mpfr_sum(mpfr_t r, const double *x, int64_t n);

/* The same value by an exact fixed-point sum, where it applies: every x[k] a multiple of
 * 2^-60 with |x[k]| < 2^100 and sum |x[k]| < 2^min(prec(r), 120), so that every partial sum
 * of the loop is exact. Returns 1 with r set, or 0 with r untouched (then the loop runs). */
int orc_mpfr_sum_fixed(mpfr_t r, const double *x, int64_t n);

#endif /* FLASHCHECK_ORC_MPFR_SUM_H */
