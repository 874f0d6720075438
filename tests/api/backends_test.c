/* backends_test.c: the full registry (//kernels:backends, CUDA built in).
 * On a machine without a GPU the CUDA table exists but is not chosen; with a
 * GPU, "cuda" resolves to it and it is the default. Both branches assert. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/flash_api.h"

static void test_registry_with_cuda(void **state) {
    (void)state;
    const fa_backend *cuda = fa_backend_cuda();
    assert_non_null(cuda);
    assert_int_equal(cuda->abi_version, FA_ABI_VERSION);
    assert_int_equal(cuda->memspace, FA_MEM_CUDA);
    assert_non_null(cuda->forward);
    const fa_backend *b = NULL;
    fa_error err;
    assert_int_equal(fa_backend_by_name("cpu", &b, &err), FA_OK);
    assert_ptr_equal(b, fa_backend_cpu());
    int devices = fa_cuda_device_count();
    assert_true(devices >= 0);
    print_message("  CUDA devices visible: %d\n", devices);
    if (devices == 0) {
        assert_ptr_equal(fa_backend_default(), fa_backend_cpu());
        assert_int_equal(fa_backend_by_name("cuda", &b, &err), FA_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "no CUDA device"));
    } else {
        assert_ptr_equal(fa_backend_default(), cuda);
        assert_int_equal(fa_backend_by_name("cuda", &b, &err), FA_OK);
        assert_ptr_equal(b, cuda);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_registry_with_cuda)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
