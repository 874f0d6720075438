/* bad_backend.c: broken backend libraries for the loader's error paths.
 * Built several times (tests/api/BUILD) with one of:
 *   BAD_NO_EXPORT  the export symbol is missing (misspelled)
 *   BAD_ABI        abi_version is FA_ABI_VERSION - 1 (a library built against the previous
 *                  header: ABI 4 had no fa_precision.masked_nonfinite)
 *   BAD_NO_FORWARD forward is NULL
 *   BAD_NULL       fa_backend_export returns NULL */
#include <stddef.h>

#include "kernels/flash_api.h"

static fa_status bad_forward(const fa_fwd_args *a, fa_error *err) {
    (void)a;
    return fa_fail(err, FA_ERR_INTERNAL, "", "bad backend");
}

static fa_backend bad_table = {
    .abi_version = FA_ABI_VERSION, .name = "bad", .memspace = FA_MEM_HOST, .forward = bad_forward};

#ifdef BAD_NO_EXPORT
__attribute__((visibility("default"))) const fa_backend *fa_backend_exprot(void) { return &bad_table; }
#else
__attribute__((visibility("default"))) const fa_backend *fa_backend_export(void) {
#if defined(BAD_ABI)
    bad_table.abi_version = FA_ABI_VERSION - 1;
#elif defined(BAD_NO_FORWARD)
    bad_table.forward = NULL;
#elif defined(BAD_NULL)
    return NULL;
#endif
    return &bad_table;
}
#endif
