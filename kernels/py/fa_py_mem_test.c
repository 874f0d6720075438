/* fa_py_mem_test.c: the py backend's memory-space check (fa_py_mem.h) with a fake
 * pointer query: "device memory" is one array of this test, everything else is host.
 * Each pointer argument of forward and backward, put in host memory alone, is rejected
 * with FA_ERR_INVALID naming it and a message; tensors with no element are not checked;
 * a failed query is FA_ERR_DEVICE. Then the real driver query on a malloc'd buffer:
 * never "device" (on a machine without a driver: a failed query naming libcuda). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/py/fa_py_mem.h"

/* "device memory": one buffer, every tensor of a case carved from it */
static uint16_t dev_pool[1 << 16];
static uint16_t host_pool[1 << 16];
static int fail_query;

static int fake_space(const void *ptr, void *ctx, char *why, size_t whylen) {
    (void)ctx;
    if (fail_query) {
        snprintf(why, whylen, "planted query failure");
        return -1;
    }
    const uintptr_t p = (uintptr_t)ptr, lo = (uintptr_t)dev_pool, hi = lo + sizeof dev_pool;
    return p >= lo && p < hi;
}

static void problem(fa_problem *p, int64_t B, int64_t Sq, int64_t Sk) {
    memset(p, 0, sizeof *p);
    p->batch = B;
    p->seqlen_q = Sq;
    p->seqlen_k = Sk;
    p->heads_q = 2;
    p->heads_kv = 1;
    p->head_dim_qk = p->head_dim_v = 8;
    p->dtype = FA_BF16;
}

/* every tensor in "device memory" (distinct offsets; sizes do not matter to the check) */
static void fwd_args(fa_fwd_args *a, int64_t B, int64_t Sq, int64_t Sk) {
    memset(a, 0, sizeof *a);
    problem(&a->p, B, Sq, Sk);
    a->q.ptr = dev_pool + 0;
    a->k.ptr = dev_pool + 4096;
    a->v.ptr = dev_pool + 8192;
    a->o.ptr = dev_pool + 12288;
    a->lse.ptr = (float *)(dev_pool + 16384);
}

static void bwd_args(fa_bwd_args *a, int64_t B, int64_t Sq, int64_t Sk) {
    memset(a, 0, sizeof *a);
    problem(&a->p, B, Sq, Sk);
    a->q.ptr = dev_pool + 0;
    a->k.ptr = dev_pool + 4096;
    a->v.ptr = dev_pool + 8192;
    a->o.ptr = dev_pool + 12288;
    a->dout.ptr = dev_pool + 16384;
    a->lse.ptr = (float *)(dev_pool + 20480);
    a->dq.ptr = dev_pool + 24576;
    a->dk.ptr = dev_pool + 28672;
    a->dv.ptr = dev_pool + 32768;
}

static void expect_rejected(fa_status st, const fa_error *err, const char *arg) {
    assert_int_equal(st, FA_ERR_INVALID);
    assert_string_equal(err->arg, arg);
    assert_non_null(strstr(err->msg, "not CUDA device memory"));
    assert_non_null(strstr(err->msg, arg));
}

static void test_fwd_each_pointer(void **state) {
    (void)state;
    fa_fwd_args a;
    fa_error err;
    fwd_args(&a, 2, 5, 7);
    memset(&err, 0, sizeof err);
    assert_int_equal(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), FA_OK);
    assert_string_equal(err.arg, "");
    const char *names[5] = {"q.ptr", "k.ptr", "v.ptr", "o.ptr", "lse.ptr"};
    for (int i = 0; i < 5; i++) {
        fwd_args(&a, 2, 5, 7);
        if (i == 0) a.q.ptr = host_pool;
        if (i == 1) a.k.ptr = host_pool;
        if (i == 2) a.v.ptr = host_pool;
        if (i == 3) a.o.ptr = host_pool;
        if (i == 4) a.lse.ptr = (float *)host_pool;
        memset(&err, 0, sizeof err);
        expect_rejected(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), &err, names[i]);
    }
    /* the optional inputs: an additive mask and sinks in host memory */
    fwd_args(&a, 2, 5, 7);
    a.mask.ptr = (float *)host_pool;
    expect_rejected(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), &err, "mask.ptr");
    fwd_args(&a, 2, 5, 7);
    a.p.has_sinks = 1;
    a.sinks = (float *)host_pool;
    expect_rejected(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), &err, "sinks");
    /* the whole sweep case (properties/sweep misuse_host_ptr): q first */
    fwd_args(&a, 1, 64, 64);
    a.q.ptr = host_pool;
    a.k.ptr = host_pool + 4096;
    a.v.ptr = host_pool + 8192;
    a.o.ptr = host_pool + 12288;
    a.lse.ptr = (float *)(host_pool + 16384);
    expect_rejected(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), &err, "q.ptr");
}

static void test_bwd_each_pointer(void **state) {
    (void)state;
    fa_bwd_args a;
    fa_error err;
    bwd_args(&a, 2, 5, 7);
    memset(&err, 0, sizeof err);
    assert_int_equal(fa_py_mem_check_bwd(&a, fake_space, NULL, &err), FA_OK);
    const char *names[9] = {"q.ptr", "k.ptr", "v.ptr", "o.ptr", "dout.ptr", "lse.ptr", "dq.ptr", "dk.ptr", "dv.ptr"};
    for (int i = 0; i < 9; i++) {
        bwd_args(&a, 2, 5, 7);
        void *h = host_pool;
        switch (i) {
        case 0: a.q.ptr = h; break;
        case 1: a.k.ptr = h; break;
        case 2: a.v.ptr = h; break;
        case 3: a.o.ptr = h; break;
        case 4: a.dout.ptr = h; break;
        case 5: a.lse.ptr = h; break;
        case 6: a.dq.ptr = h; break;
        case 7: a.dk.ptr = h; break;
        default: a.dv.ptr = h; break;
        }
        memset(&err, 0, sizeof err);
        expect_rejected(fa_py_mem_check_bwd(&a, fake_space, NULL, &err), &err, names[i]);
    }
    bwd_args(&a, 2, 5, 7);
    a.p.has_sinks = 1;
    a.sinks = (float *)(dev_pool + 40000);
    a.dsinks = (float *)host_pool;
    expect_rejected(fa_py_mem_check_bwd(&a, fake_space, NULL, &err), &err, "dsinks");
}

/* a tensor with no element is never dereferenced: its pointer is not checked */
static void test_empty_tensors_not_checked(void **state) {
    (void)state;
    fa_fwd_args a;
    fa_error err;
    memset(&err, 0, sizeof err);
    fwd_args(&a, 0, 3, 17); /* B = 0: nothing at all */
    a.q.ptr = a.k.ptr = a.v.ptr = a.o.ptr = host_pool;
    a.lse.ptr = (float *)host_pool;
    assert_int_equal(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), FA_OK);
    fwd_args(&a, 2, 5, 0); /* Sk = 0: k, v have no element, q still does */
    a.k.ptr = a.v.ptr = host_pool;
    assert_int_equal(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), FA_OK);
    a.q.ptr = host_pool;
    expect_rejected(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), &err, "q.ptr");
    fa_bwd_args b;
    bwd_args(&b, 2, 0, 7); /* Sq = 0: q, o, dout, lse, dq have none; dk, dv do */
    b.q.ptr = b.o.ptr = b.dout.ptr = b.dq.ptr = host_pool;
    b.lse.ptr = (float *)host_pool;
    memset(&err, 0, sizeof err);
    assert_int_equal(fa_py_mem_check_bwd(&b, fake_space, NULL, &err), FA_OK);
    b.dk.ptr = host_pool;
    expect_rejected(fa_py_mem_check_bwd(&b, fake_space, NULL, &err), &err, "dk.ptr");
    /* packed: cu_seqlens_q[B] = 0 rows */
    const int32_t cu0[3] = {0, 0, 0};
    fwd_args(&a, 2, 5, 7);
    a.varlen.cu_seqlens_q = cu0;
    a.q.ptr = a.o.ptr = host_pool;
    a.lse.ptr = (float *)host_pool;
    assert_int_equal(fa_py_mem_check_fwd(&a, fake_space, NULL, &err), FA_OK);
}

static void test_query_failure(void **state) {
    (void)state;
    fa_fwd_args a;
    fa_error err;
    memset(&err, 0, sizeof err);
    fwd_args(&a, 1, 4, 4);
    fail_query = 1;
    const fa_status st = fa_py_mem_check_fwd(&a, fake_space, NULL, &err);
    fail_query = 0;
    assert_int_equal(st, FA_ERR_DEVICE);
    assert_string_equal(err.arg, "backend");
    assert_non_null(strstr(err.msg, "planted query failure"));
}

/* the driver's answer for plain host memory: never device-accessible */
static void test_cuda_query_on_host_memory(void **state) {
    (void)state;
    void *h = malloc(4096);
    assert_non_null(h);
    char why[200] = "";
    const int r = fa_py_mem_cuda_space(h, NULL, why, sizeof why);
    free(h);
    if (r < 0) {
        assert_true(strstr(why, "libcuda") != NULL || strstr(why, "cuPointerGetAttributes") != NULL);
        print_message("no usable CUDA driver here: %s\n", why);
    } else {
        assert_int_equal(r, 0);
        print_message("the CUDA driver reports the malloc'd buffer as host memory\n");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fwd_each_pointer),          cmocka_unit_test(test_bwd_each_pointer),
        cmocka_unit_test(test_empty_tensors_not_checked), cmocka_unit_test(test_query_failure),
        cmocka_unit_test(test_cuda_query_on_host_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
