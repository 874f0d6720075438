/* mutant_export.c: the backend table of one CUDA mutant (mutants.bzl), exported for loading by
 * path: the mutated library's own fa_backend_cuda() table (limits and precision profile of the
 * shipped backend: a mutant is judged by exactly what the real kernels promise) under the name
 * FC_MUTANT_NAME ("cuda-mutant-NAME"). */
#include "kernels/flash_api.h"

#ifndef FC_MUTANT_NAME
#error "FC_MUTANT_NAME must name the mutant (mutants.bzl sets it)"
#endif

__attribute__((visibility("default"))) const fa_backend *fa_backend_export(void);

const fa_backend *fa_backend_export(void) {
    static fa_backend b;
    const fa_backend *real = fa_backend_cuda();
    if (!real) return NULL;
    b = *real;
    b.name = FC_MUTANT_NAME;
    return &b;
}
