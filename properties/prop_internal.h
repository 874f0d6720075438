/* prop_internal.h: what the property files (properties.c, prop_v3.c, prop_nonfinite.c) share.
 * Not part of the public API (properties.h). */
#ifndef FLASHCHECK_PROP_INTERNAL_H
#define FLASHCHECK_PROP_INTERNAL_H

#include "properties/properties.h"

/* Add a failure to v under the check "property:<prop>", its text formatted like printf (cut
 * at 255 characters). */
void fc_prop_fail(fc_verdict *v, const char *prop, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Forward (and the backward when bwd; a backend without one declines it) on r. 1: every call
 * succeeded; 2: the forward succeeded and the backend declined the backward (a decline of phase
 * backward in v); 0: otherwise (the forward's decline, or a failure, recorded in v). */
int fc_prop_call(const fa_backend *be, fc_run *r, int bwd, fc_verdict *v, const char *prop);

#endif /* FLASHCHECK_PROP_INTERNAL_H */
