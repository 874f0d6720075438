/* sweep_fixtures.h: broken backends on the CPU backend shared by the sweep tests (sweep_test.c,
 * sweep_judgeable_test.c), and the 16-bit element access they use. Test only. */
#ifndef FLASHCHECK_SWEEP_FIXTURES_H
#define FLASHCHECK_SWEEP_FIXTURES_H

#include <math.h>
#include <stdint.h>

#include "case/case.h"
#include "kernels/flash_api.h"

static inline double get16(const void *base, int64_t off, fa_dtype dt) {
    uint16_t h = ((const uint16_t *)base)[off];
    return dt == FA_BF16 ? fc_bf16_to_double(h) : fc_f16_to_double(h);
}
static inline void set16(void *base, int64_t off, fa_dtype dt, double x) {
    ((uint16_t *)base)[off] = dt == FA_BF16 ? fc_bf16_from_double(x) : fc_f16_from_double(x);
}
static inline int64_t off4(const int64_t *st, int64_t b, int64_t s, int64_t h, int64_t d) {
    return b * st[0] + s * st[1] + h * st[2] + d * st[3];
}

/* forward that writes 0 where the exact O is NaN/Inf (the rows that see a NaN/Inf input): a kernel
   that clamps non-finite results. Rows that do not see the value are untouched, so the leak
   property cannot tell. */
static inline fa_status fwd_nan_to_zero(const fa_fwd_args *a, fa_error *err) {
    fa_status st = fa_backend_cpu()->forward(a, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t i = 0; i < p->seqlen_q; i++)
            for (int64_t h = 0; h < p->heads_q; h++)
                for (int64_t d = 0; d < p->head_dim_v; d++) {
                    int64_t o = off4(a->o.stride, b, i, h, d);
                    if (!isfinite(get16(a->o.ptr, o, p->dtype))) set16(a->o.ptr, o, p->dtype, 0.0);
                }
    return FA_OK;
}

#endif
