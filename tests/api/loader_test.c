/* loader_test.c: fa_backend_by_name, fa_backend_load, fa_backend_default
 * (CPU-only registry). argv[1] = example_backend.so, argv[2..5] = the broken
 * libraries (no export, wrong ABI, NULL forward, NULL table). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "tests/api/api_test_util.h"

static const char *lib_example, *lib_no_export, *lib_abi, *lib_no_forward, *lib_null;

static void test_by_name_builtin(void **state) {
    (void)state;
    const fa_backend *b = NULL;
    fa_error err;
    assert_int_equal(fa_backend_by_name("cpu", &b, &err), FA_OK);
    assert_ptr_equal(b, fa_backend_cpu());
    assert_null(fa_backend_cuda()); /* CPU-only registry */
    assert_int_equal(fa_backend_by_name("cuda", &b, &err), FA_ERR_UNSUPPORTED);
    assert_null(b);
    assert_string_equal(err.arg, "backend");
    assert_non_null(strstr(err.msg, "CUDA"));
    assert_ptr_equal(fa_backend_default(), fa_backend_cpu());
}

static void test_by_name_unknown(void **state) {
    (void)state;
    const fa_backend *b = fa_backend_cpu();
    fa_error err;
    assert_int_equal(fa_backend_by_name("gpu", &b, &err), FA_ERR_INVALID);
    assert_null(b);
    assert_string_equal(err.arg, "backend");
    assert_non_null(strstr(err.msg, "'gpu'"));
    assert_non_null(strstr(err.msg, "'cpu'")); /* lists the choices */
    assert_non_null(strstr(err.msg, "'cuda'"));
    assert_non_null(strstr(err.msg, ".so"));
    assert_int_equal(fa_backend_by_name(NULL, &b, &err), FA_ERR_INVALID);
    assert_int_equal(fa_backend_by_name("cpu", NULL, &err), FA_ERR_INVALID);
    assert_string_equal(err.arg, "out");
    /* ending in .so routes to dlopen even without a '/' */
    assert_int_equal(fa_backend_by_name("libflashcheck_no_such_backend.so", &b, &err), FA_ERR_INVALID);
    assert_string_equal(err.arg, "path");
    assert_non_null(strstr(err.msg, "cannot load"));
}

static void test_load_example(void **state) {
    (void)state;
    const fa_backend *b = NULL;
    fa_error err;
    if (fa_backend_load(lib_example, &b, &err) != FA_OK) fail_msg("load %s: %s", lib_example, err.msg);
    assert_string_equal(b->name, "example-cpu");
    assert_int_equal(b->abi_version, FA_ABI_VERSION);
    assert_int_equal(b->memspace, FA_MEM_HOST);
    /* the ABI-3 precision fields arrive where the loader reads them */
    assert_true(b->precision.exp_ulps == 1.0);
    assert_int_equal(b->precision.tc_terms, 0);
    assert_int_equal(b->precision.d_source, FA_D_FROM_O);
    assert_int_equal(b->precision.gqa_reduce, FA_GQA_FUSED);
    assert_int_equal(b->precision.lse_empty, FA_LSE_EMPTY_NEG_INF);
    /* ABI 5: a table that does not set masked_nonfinite declares the contract (isolated) */
    assert_int_equal(b->precision.masked_nonfinite, FA_MASKED_NF_ISOLATED);
    const fa_backend *b2 = NULL;
    assert_int_equal(fa_backend_by_name(lib_example, &b2, &err), FA_OK); /* contains '/' */
    assert_string_equal(b2->name, "example-cpu");
    /* it computes what the built-in CPU backend computes */
    fa_problem p = tt_problem(1, 20, 30, 2, 1, 16, 16, FA_BF16);
    p.causal = FA_CAUSAL_BOTTOM_RIGHT;
    tt_case x, y;
    tt_case_init(&x, p, TT_PADDED, 3);
    tt_case_init(&y, p, TT_PADDED, 3);
    fa_fwd_args ax = tt_fwd_args(&x), ay = tt_fwd_args(&y);
    assert_int_equal(b->forward(&ax, &err), FA_OK);
    assert_int_equal(fa_backend_cpu()->forward(&ay, &err), FA_OK);
    assert_memory_equal(x.o.buf, y.o.buf, x.o.n_elems * 2);
    assert_memory_equal(x.lse, y.lse, sizeof(float) * 40);
    /* and rejects what it rejects */
    ax.p.heads_kv = 3;
    assert_int_equal(b->forward(&ax, &err), FA_ERR_INVALID);
    assert_string_equal(err.arg, "heads_kv");
    tt_case_free(&x);
    tt_case_free(&y);
}

static void expect_load_error(const char *path, const char *needle) {
    const fa_backend *b = fa_backend_cpu();
    fa_error err;
    memset(&err, 0, sizeof(err));
    fa_status st = fa_backend_load(path, &b, &err);
    if (st != FA_ERR_INVALID) fail_msg("loading %s: status %s, expected FA_ERR_INVALID", path, fa_status_name(st));
    assert_null(b);
    assert_string_equal(err.arg, "path");
    if (strstr(err.msg, needle) == NULL) fail_msg("loading %s: message '%s' lacks '%s'", path, err.msg, needle);
    print_message("  %s -> %s\n", path, err.msg);
}

static void test_load_errors(void **state) {
    (void)state;
    expect_load_error("/nonexistent/dir/backend.so", "/nonexistent/dir/backend.so");
    expect_load_error("", "empty");
    expect_load_error(lib_no_export, FA_BACKEND_EXPORT_SYMBOL);
    /* an ABI-4 library (fa_precision without masked_nonfinite, so fa_limits and the function
       pointers sit 4 bytes earlier): rejected with the message to rebuild */
    expect_load_error(lib_abi, "abi_version 4 but this flashcheck needs 5 (ABI 5 is source compatible");
    expect_load_error(lib_abi, "rebuild the backend");
    expect_load_error(lib_no_forward, "forward");
    expect_load_error(lib_null, "returned NULL");
    const fa_backend *b;
    fa_error err;
    assert_int_equal(fa_backend_load(lib_example, NULL, &err), FA_ERR_INVALID);
    assert_int_equal(fa_backend_load(NULL, &b, &err), FA_ERR_INVALID);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: loader_test example.so no_export.so bad_abi.so no_forward.so null.so\n");
        return 2;
    }
    lib_example = argv[1]; lib_no_export = argv[2]; lib_abi = argv[3]; lib_no_forward = argv[4]; lib_null = argv[5];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_name_builtin),
        cmocka_unit_test(test_by_name_unknown),
        cmocka_unit_test(test_load_example),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
