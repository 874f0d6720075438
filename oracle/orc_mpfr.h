/* orc_mpfr.h: helpers of the MPFR tier (orc_mpfr.c) beside its entry points in
 * orc_internal.h, declared apart so that the GPU tier's nvcc objects do not depend on them. */
#ifndef FLASHCHECK_ORC_MPFR_H
#define FLASHCHECK_ORC_MPFR_H

#include <stdint.h>
#include <mpfr.h>

#include "oracle/orc_internal.h"

/* r = x[0] + ... + x[n-1] summed left to right from +0, each add correctly rounded to r's
 * precision (RNDN): how the MPFR tier sums exact double products (scores q.k, dO.v). */
void orc_mpfr_sum(mpfr_t r, const double *x, int64_t n);

/* The same value by an exact fixed-point sum, where it applies: every x[k] a multiple of
 * 2^-60 with |x[k]| < 2^100 and sum |x[k]| < 2^min(prec(r), 120), so that every partial sum
 * of the loop is exact. Returns 1 with r set, or 0 with r untouched (then the loop runs). */
int orc_mpfr_sum_fixed(mpfr_t r, const double *x, int64_t n);

/* K and V of one (batch b, kv head hk) as exact MPFR numbers (53 bits hold every fp16 / bf16
 * value), converted once and shared read-only by the rows of that head: a correctly rounded
 * operation on them gives the bits it gives on the doubles they hold (mpfr_mul for mpfr_mul_d,
 * mpfr_fma on them for mpfr_set_d + mpfr_fma), so the rows' values do not change. k: [Sk][D]
 * (NULL unless asked for), v: [Sk][Dv]; one allocation (mpfr_custom_*). */
typedef struct orc_mp_head {
    int64_t b, hk;
    mpfr_t *k, *v;
    void *mem;
} orc_mp_head;
/* 0, or -1 out of memory (hd then holds nothing; the rows are computed without it). */
int orc_mp_head_init(orc_mp_head *hd, const orc_ctx *c, int64_t b, int64_t hk, int with_k);
void orc_mp_head_free(orc_mp_head *hd);
/* 1 when the exact dQ row (b, h, i) is 0 by the structure of its inputs (BOUNDS.md 6.1):
 * finite inputs, a visible key, and dO_i = 0, or no sink and the visible keys all equal or the
 * visible values all equal. The dQ row functions then return +0 without MPFR work. */
int orc_mpfr_dq_row_zero(const orc_ctx *c, int64_t b, int64_t h, int64_t i);
/* 1 when the exact dK column j of kv head hk (batch b) is 0 by structure (6.1): every row of
 * the G heads that sees key j has finite inputs and q_i = 0, dO_i = 0, or (no sink) its visible
 * values all equal. rows: NULL, or [G * Sq] per-row answers of this (b, hk), -1 where not yet
 * known, filled as they are computed (the caller's cache across the columns of one head). */
int orc_mpfr_dk_col_zero(const orc_ctx *c, int64_t b, int64_t hk, int64_t j, int8_t *rows);
/* orc_mpfr_dq_row with the head of (b, h / G) (hd may be NULL): the same values. */
void orc_mpfr_dq_row_head(const orc_ctx *c, const orc_mp_head *hd, int64_t b, int64_t h, int64_t i, int prec,
                          double *dq_out);
/* The MPFR sum of a dQ row at prec bits, rounded once to double, whatever the row's structure
 * (the dQ row functions call it unless orc_mpfr_dq_row_zero holds; test_dq_zero compares). */
void orc_mpfr_dq_row_sum(const orc_ctx *c, const orc_mp_head *hd, int64_t b, int64_t h, int64_t i, int prec,
                         double *dq_out);

#endif /* FLASHCHECK_ORC_MPFR_H */
