/* fz_misuse.h: one API-misuse execution (prefix fz_misuse_): a valid case plus
 * ONE corruption the contract says must be rejected, run on a backend with
 * host buffers; checks that the call is rejected (INVALID or UNSUPPORTED),
 * that fa_error is filled (status, argument name, message) and that no byte
 * of any output allocation (guards included) changed. See fz_misuse.c for
 * the list of corruptions. Used by fz_target_misuse.c and `flashcheck repro`.
 *
 * Input: text with a "# misuse kind=K param=P" line plus a case, or bytes:
 * data[0] = kind, data[1] = param, data[2..] = the case (fz_case_from_input).
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_MISUSE_H
#define FLASHCHECK_FZ_MISUSE_H

#include <stddef.h>
#include <stdint.h>

#include "case/case.h"
#include "fuzz/fz_gen.h"
#include "kernels/flash_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int applied;          /* 0: the corruption does not apply to this case (nothing ran) */
    int kind;
    unsigned param;
    int backward;         /* the call was a backward */
    char kind_name[24];   /* "null_ptr", "neg_size", ... */
    char what[160];       /* the corruption, e.g. "o.stride[1] = 0 (two elements at one address)" */
    fc_case c;            /* the base case (before the corruption) */
    fa_status status;     /* what the backend returned */
    fa_error err;
    char failure[32];     /* "" when the call was correctly rejected; else "accepted_invalid",
                             "wrong_status", "write_on_reject", "err_status_mismatch",
                             "no_arg_name", "no_message" */
    char detail[768];
} fz_misuse_result;

/* Does the input carry a "# misuse kind=K param=P" line? Fills kind, param and
 * skip (bytes of the input that are not the case). 1 for text, 0 for bytes. */
int fz_misuse_params(const uint8_t *data, size_t size, int *kind, unsigned *param, size_t *skip);

/* Run one misuse input on be. Returns res->applied. */
int fz_misuse_run(const fa_backend *be, const uint8_t *data, size_t size, const fz_budget *budget,
                  fz_misuse_result *res);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_MISUSE_H */
