/* fa_api.c: small shared helpers of the flashcheck API (names, sizes, the
 * effective softmax scale, error filling). See kernels/flash_api.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/flash_api.h"

// ----------------------------------------------------------------------------
// names and sizes

const char *fa_status_name(fa_status s) {
    switch (s) {
    case FA_OK: return "FA_OK";
    case FA_ERR_INVALID: return "FA_ERR_INVALID";
    case FA_ERR_UNSUPPORTED: return "FA_ERR_UNSUPPORTED";
    case FA_ERR_NOMEM: return "FA_ERR_NOMEM";
    case FA_ERR_DEVICE: return "FA_ERR_DEVICE";
    case FA_ERR_INTERNAL: return "FA_ERR_INTERNAL";
    }
    return "FA_ERR_UNKNOWN";
}

const char *fa_dtype_name(fa_dtype d) {
    switch (d) {
    case FA_F16: return "fp16";
    case FA_BF16: return "bf16";
    }
    return "unknown-dtype";
}

/* Bytes per element; 0 for a value that is not a fa_dtype. */
size_t fa_dtype_size(fa_dtype d) {
    switch (d) {
    case FA_F16: return 2;
    case FA_BF16: return 2;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// softmax scale

/* p->softmax_scale when it is nonzero, else 1/sqrt(head_dim_qk).
 * Rounding: 1/sqrt(d) is computed in double (sqrt correctly rounded, the
 * division correctly rounded, relative error <= 2^-52) and then rounded to
 * float, so the result is within 0.5 ulp(float) + 2^-52 relative of the exact
 * value (it can differ from the correctly rounded float only when the exact
 * value lies within 2^-52 relative of a float midpoint). Returns 0 when
 * head_dim_qk <= 0 (a problem fa_validate_* rejects). */
float fa_effective_scale(const fa_problem *p) {
    if (p->softmax_scale != 0.0f) return p->softmax_scale;
    if (p->head_dim_qk <= 0) return 0.0f;
    return (float)(1.0 / sqrt((double)p->head_dim_qk));
}

// ----------------------------------------------------------------------------
// errors

fa_status fa_fail(fa_error *err, fa_status status, const char *arg, const char *fmt, ...) {
    if (err == NULL) return status;
    err->status = status;
    snprintf(err->arg, sizeof(err->arg), "%s", arg ? arg : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return status;
}
