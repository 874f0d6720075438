/* example_backend.c: a third-party backend as flashcheck loads it: a shared
 * library exporting fa_backend_export(). This one wraps the CPU backend under
 * another name (tests/api/loader_test.c loads it by path). */
#include "kernels/flash_api.h"

static fa_backend example_table;

__attribute__((visibility("default"))) const fa_backend *fa_backend_export(void) {
    example_table = *fa_backend_cpu();
    example_table.name = "example-cpu";
    return &example_table;
}
