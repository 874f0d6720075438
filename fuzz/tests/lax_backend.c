/* lax_backend.c: a deliberately broken third-party backend (loaded as a .so
 * through FLASHCHECK_BACKEND=path) for testing the API-misuse target:
 *   LAX_MODE=accept  validates nothing and returns FA_OK for every call
 *   LAX_MODE=write   writes one output element BEFORE validating, then returns
 *                    the validator's status (a rejected call that wrote)
 * The misuse target must record findings ("accepted_invalid", "write_on_reject")
 * for both; it computes nothing, so only invalid calls may be sent to it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/flash_api.h"

const fa_backend *fa_backend_export(void);

static int lax_write_mode(void)
{
    const char *m = getenv("LAX_MODE");
    return m && strcmp(m, "write") == 0;
}

static fa_status lax_forward(const fa_fwd_args *a, fa_error *err)
{
    if (!lax_write_mode()) return FA_OK;
    if (a->o.ptr) memset(a->o.ptr, 0, 2);
    return fa_validate_fwd(a, &fa_backend_export()->limits, err);
}

static fa_status lax_backward(const fa_bwd_args *a, fa_error *err)
{
    if (!lax_write_mode()) return FA_OK;
    if (a->dq.ptr) memset(a->dq.ptr, 0, 2);
    return fa_validate_bwd(a, &fa_backend_export()->limits, err);
}

static const fa_backend lax = {
    .abi_version = FA_ABI_VERSION,
    .name = "lax",
    .memspace = FA_MEM_HOST,
    .precision = { .u_acc = 0x1p-24, .exp_rel_err = 0x1p-23, .scores_fp32 = 1, .max_rescales = -1 },
    .limits = { .max_head_dim = 256, .head_dim_multiple = 1, .ptr_align_bytes = 2 },
    .forward = lax_forward,
    .backward = lax_backward,
};

const fa_backend *fa_backend_export(void) { return &lax; }
