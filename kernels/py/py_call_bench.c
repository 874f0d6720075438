/* py_call_bench.c: the py backend's cost per call (prefix pcb_): N forward calls of a Python
 * kernel that does nothing (python/tests/kernels_for_tests.py:noop) on a 1x1x1x8 problem in host
 * memory. That is the bridge alone: argument validation, the GIL, six DLPack capsules and numpy
 * views, the argument tuples, the call and its answer.
 *   bazel run -c opt //kernels/py:py_call_bench -- py:$PWD/python/tests/kernels_for_tests.py:noop [N] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/flash_api.h"

static double pcb_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double pcb_time(const fa_backend *be, const fa_fwd_args *a, int n) {
    fa_error err;
    double t0 = pcb_now();
    for (int i = 0; i < n; i++)
        if (be->forward(a, &err) != FA_OK) {
            fprintf(stderr, "py_call_bench: %s: %s\n", be->name, err.msg);
            exit(1);
        }
    return (pcb_now() - t0) / n;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: py_call_bench py:FILE:noop [N]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 20000;
    const fa_backend *py = NULL;
    fa_error err;
    memset(&err, 0, sizeof err);
    if (fa_backend_by_name(argv[1], &py, &err) != FA_OK) {
        fprintf(stderr, "py_call_bench: %s\n", err.msg);
        return 3;
    }
    static uint16_t q[8], k[8], v[8], o[8];
    static float lse[1];
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.p = (fa_problem){.batch = 1, .seqlen_q = 1, .seqlen_k = 1, .heads_q = 1, .heads_kv = 1, .head_dim_qk = 8,
                       .head_dim_v = 8, .dtype = FA_F16, .window_left = -1, .window_right = -1};
    fa_tensor *t[4] = {&a.q, &a.k, &a.v, &a.o};
    void *p[4] = {q, k, v, o};
    for (int i = 0; i < 4; i++) {
        t[i]->ptr = p[i];
        t[i]->stride[0] = t[i]->stride[1] = t[i]->stride[2] = 8;
        t[i]->stride[3] = 1;
    }
    a.lse.ptr = lse;
    a.lse.stride[0] = a.lse.stride[1] = a.lse.stride[2] = 1;
    pcb_time(py, &a, 100); /* warm: first calls import and cache */
    double tpy = pcb_time(py, &a, n);
    printf("py_call_bench: %d forward calls of the no-op kernel %s (1x1x1x8 fp16, host): %.2f us/call\n", n,
           py->name, 1e6 * tpy);
    return 0;
}
