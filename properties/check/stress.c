/* stress.c: stress mode of fc_check_case (check.h, "stress"): the case at a size with many CTAs,
 * run many times under a concurrent device load, outputs compared bitwise across the runs and
 * against the oracle. A race (a missing barrier between consuming a shared-memory tile and
 * refilling it), a reduction whose order follows the scheduler, a result that depends on what
 * else runs on the device: none of these is guaranteed to show in two runs of a small case. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/check/check.h"

#if defined(__has_include)
#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define FC_HAVE_CUDA 1
#endif
#endif
#ifndef FC_HAVE_CUDA
#define FC_HAVE_CUDA 0
#endif

/* ---------------------------------------------------------------------------
 * The stress size
 * ------------------------------------------------------------------------- */
int64_t fc_case_work(const fc_case *c) {
    const fa_problem *p = &c->p;
    const int64_t d = p->head_dim_qk > p->head_dim_v ? p->head_dim_qk : p->head_dim_v;
    /* in double: the product of five int64 can exceed int64 (the result only bounds a cost) */
    const double w = (double)p->batch * (double)p->heads_q * (double)p->seqlen_q * (double)p->seqlen_k * (double)d;
    return w >= 0x1p62 ? ((int64_t)1 << 62) : (int64_t)w;
}

int64_t fc_stress_case(const fc_case *c, fc_case *out) {
    *out = *c;
    const fa_problem *p = &c->p;
    if (p->batch <= 0 || p->heads_q <= 0 || p->seqlen_q <= 0) return p->batch;
    const int64_t rows_per_b = p->heads_q * p->seqlen_q;
    int64_t want = (FC_STRESS_ROWS + rows_per_b - 1) / rows_per_b;
    fc_case one = *c;
    one.p.batch = 1;
    const int64_t work_per_b = fc_case_work(&one) > 0 ? fc_case_work(&one) : 1;
    const int64_t cap = FC_STRESS_MAX_WORK / work_per_b;
    if (want > cap) want = cap;
    if (want < p->batch) want = p->batch;
    out->p.batch = want;
    return want;
}

int fc_stress_applies(const fc_case *c) {
    return c->p.seqlen_k > 256 || (c->backward && c->p.seqlen_q > 256);
}

/* ---------------------------------------------------------------------------
 * The load
 * ------------------------------------------------------------------------- */
struct fc_stress_load {
    pthread_t thread;
    int started;
    volatile int stop;
    int cuda, device;
    int64_t copies;
    char msg[200];
};

static void *load_host(void *arg) {
    fc_stress_load *l = arg;
    const size_t n = (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        snprintf(l->msg, sizeof l->msg, "host load: cannot allocate 2 x 64 MiB");
        free(a);
        free(b);
        return NULL;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    const size_t chunk = (size_t)4 << 20; /* 4 MiB a copy: a stop request is seen within one */
    for (size_t off = 0; !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE); off = (off + chunk) % n) {
        memcpy(b + off, a + off, chunk);
        __atomic_add_fetch(&l->copies, 1, __ATOMIC_RELAXED);
    }
    free(a);
    free(b);
    return NULL;
}

#if FC_HAVE_CUDA
static void *load_cuda(void *arg) {
    fc_stress_load *l = arg;
    cudaError_t e = cudaSetDevice(l->device);
    size_t free_b = 0, total_b = 0;
    if (e == cudaSuccess) e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        snprintf(l->msg, sizeof l->msg, "device load: %s", cudaGetErrorString(e));
        return NULL;
    }
    /* two buffers of an eighth of the free memory each (a quarter in all), at most 1 GiB each */
    size_t n = free_b / 8;
    if (n > ((size_t)1 << 30)) n = (size_t)1 << 30;
    n &= ~(((size_t)1 << 20) - 1);
    if (n == 0) {
        snprintf(l->msg, sizeof l->msg, "device load: too little free device memory (%zu bytes)", free_b);
        return NULL;
    }
    cudaStream_t s = NULL;
    cudaEvent_t done = NULL;
    void *a = NULL, *b = NULL;
    e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    /* a blocking-sync event: this thread sleeps while its copies run (a spinning wait would take
       a core from the harness's own threads: the load is for the device, not the host) */
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&done, cudaEventBlockingSync | cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaMalloc(&a, n);
    if (e == cudaSuccess) e = cudaMalloc(&b, n);
    if (e == cudaSuccess) e = cudaMemsetAsync(a, 0x3c, n, s);
    while (e == cudaSuccess && !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
        e = cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s);
        if (e == cudaSuccess) e = cudaMemcpyAsync(a, b, n, cudaMemcpyDeviceToDevice, s);
        if (e == cudaSuccess) e = cudaEventRecord(done, s);
        if (e == cudaSuccess) e = cudaEventSynchronize(done);
        if (e == cudaSuccess) __atomic_add_fetch(&l->copies, 2, __ATOMIC_RELAXED);
    }
    if (e != cudaSuccess) snprintf(l->msg, sizeof l->msg, "device load stopped: %s", cudaGetErrorString(e));
    if (s) cudaStreamSynchronize(s);
    if (done) cudaEventDestroy(done);
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    if (s) cudaStreamDestroy(s);
    return NULL;
}
#endif

fc_stress_load *fc_stress_load_start(const fa_backend *be) {
    fc_stress_load *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->cuda = be->memspace == FA_MEM_CUDA;
    void *(*fn)(void *) = load_host;
#if FC_HAVE_CUDA
    if (l->cuda) {
        if (cudaGetDevice(&l->device) != cudaSuccess) {
            cudaGetLastError();
            l->device = 0;
        }
        fn = load_cuda;
    }
#else
    if (l->cuda) {
        snprintf(l->msg, sizeof l->msg, "no device load: built without the CUDA runtime");
        return l;
    }
#endif
    if (pthread_create(&l->thread, NULL, fn, l) == 0) l->started = 1;
    else snprintf(l->msg, sizeof l->msg, "no load: pthread_create failed");
    return l;
}

int64_t fc_stress_load_copies(const fc_stress_load *l) {
    return l ? __atomic_load_n(&l->copies, __ATOMIC_RELAXED) : 0;
}

int64_t fc_stress_load_stop(fc_stress_load *l, char *msg, size_t msglen) {
    if (!l) {
        if (msg && msglen) snprintf(msg, msglen, "no load: out of memory");
        return -1;
    }
    __atomic_store_n(&l->stop, 1, __ATOMIC_RELEASE);
    if (l->started) pthread_join(l->thread, NULL);
    int64_t n = l->copies > 0 ? l->copies : -1;
    if (msg && msglen) snprintf(msg, msglen, "%s", l->msg);
    free(l);
    return n;
}

/* ---------------------------------------------------------------------------
 * The stress check
 * ------------------------------------------------------------------------- */
/* v gets t's failures as "stress" reasons (harness errors stay "harness": never findings);
 * skips and overflow-sensitive notes of the larger case are not the small case's verdict. */
static int64_t merge_stress(fc_verdict *v, const fc_verdict *t, const char *tag) {
    int64_t n = 0;
    for (int i = 0; i < t->n_reasons; i++) {
        const fc_reason *r = &t->reason[i];
        if (!fc_reason_fails(r->kind)) continue;
        if (r->kind == FC_REASON_HARNESS) fc_verdict_add(v, r->phase, FC_REASON_HARNESS, "harness", "%s: %s", tag, r->text);
        else fc_verdict_add(v, r->phase, r->kind, "stress", "%s: %s: %s", tag, r->check, r->text);
        n++;
    }
    if (t->n_dropped) fc_verdict_fail(v, "stress", "%s: %d more problem(s) not listed", tag, t->n_dropped);
    return n + t->n_dropped;
}

/* 1 when the status of a stress run is acceptable; else a reason in t. UNSUPPORTED and NOMEM at
 * the stress size say nothing about the small case's kernel: the stress check stops there. */
static int stress_status(const fc_run *r, fc_phase ph, int run, fc_verdict *t, int *stop) {
    if (r->status == FA_OK) return 1;
    if (r->status == FA_ERR_UNSUPPORTED || r->status == FA_ERR_NOMEM) {
        *stop = 1;
        return 0;
    }
    fc_verdict_add(t, ph, fc_run_status_kind(r), r->harness_err ? "harness" : "status",
                   "%s run %d: backend returned %s (arg '%s'): %s", fc_phase_name(ph), run + 1,
                   fa_status_name(r->status), r->err.arg, r->err.msg);
    *stop = 1;
    return 0;
}

int64_t fc_check_stress(const fa_backend *be, const fc_case *c0, int runs, fc_verdict *v) {
    if (runs < 1) return 0;
    fc_case c;
    const int64_t batch = fc_stress_case(c0, &c);
    const int bwd = c.backward && be->backward != NULL;
    char tag[128], msg[512];
    snprintf(tag, sizeof tag, "stress (batch %lld, %d run%s under load)", (long long)batch, runs, runs > 1 ? "s" : "");
    fc_verdict *t = malloc(sizeof *t);
    fc_run *first = malloc(sizeof *first), *cur = malloc(sizeof *cur);
    if (!t || !first || !cur) {
        free(t);
        free(first);
        free(cur);
        fc_verdict_fail(v, "harness", "%s: harness: out of memory", tag);
        return 1;
    }
    fc_verdict_init(t);
    if (fc_run_init(first, &c, FC_POISON_A, msg, sizeof msg)) {
        fc_verdict_fail(v, "harness", "%s: %s", tag, msg);
        free(t);
        free(first);
        free(cur);
        return 1;
    }
    const int fwd_outs[2] = {FC_T_O, FC_T_LSE}, bwd_outs[3] = {FC_T_DQ, FC_T_DK, FC_T_DV};
    int stop = 0, have_fres = 0, have_bres = 0;
    orc_fwd_result fres;
    orc_bwd_result bres;
    fc_stress_load *load = fc_stress_load_start(be);

    /* run 1, judged in full (the oracle's work is done while the load runs) */
    fc_run_forward(first, be);
    fc_check_guards(first, t);
    fc_check_inputs_unchanged(first, t);
    if (stress_status(first, FC_PHASE_FORWARD, 0, t, &stop)) {
        for (int i = 0; i < 2; i++) fc_check_written(first, fwd_outs[i], t);
        if (fc_oracle_fwd_sampled(first, fc_check_profile(be), FC_STRESS_ORACLE_ROWS, &fres, msg, sizeof msg)) {
            fc_verdict_fail(t, "harness", "%s", msg);
            stop = 1;
        } else {
            have_fres = 1;
            fc_check_fwd_outputs(first, &fres, t);
        }
    }
    if (!stop && bwd) {
        fc_run_backward(first, be);
        fc_check_guards(first, t);
        fc_check_inputs_unchanged(first, t);
        if (stress_status(first, FC_PHASE_BACKWARD, 0, t, &stop)) {
            for (int i = 0; i < 3; i++) fc_check_written(first, bwd_outs[i], t);
            if (fc_oracle_bwd_sampled(first, fc_check_profile(be), FC_STRESS_ORACLE_ROWS, &bres, msg, sizeof msg)) {
                fc_verdict_fail(t, "harness", "%s", msg);
                stop = 1;
            } else {
                have_bres = 1;
                fc_check_bwd_outputs(first, &bres, t);
            }
        }
    }

    /* runs 2..N: fresh buffers, alternating poison, bitwise against run 1 */
    for (int k = 1; k < runs && !stop && t->outcome != FC_FAIL; k++) {
        if (fc_run_init(cur, &c, (k & 1) ? FC_POISON_B : FC_POISON_A, msg, sizeof msg)) {
            fc_verdict_fail(t, "harness", "%s", msg);
            break;
        }
        char what[48];
        fc_run_forward(cur, be);
        if (stress_status(cur, FC_PHASE_FORWARD, k, t, &stop)) {
            fc_check_guards(cur, t);
            snprintf(what, sizeof what, "run %d vs run 1", k + 1);
            for (int i = 0; i < 2; i++) fc_check_same_bits(first, cur, fwd_outs[i], what, t);
        }
        if (!stop && bwd && t->outcome != FC_FAIL) {
            fc_run_backward(cur, be);
            if (stress_status(cur, FC_PHASE_BACKWARD, k, t, &stop)) {
                fc_check_guards(cur, t);
                if (c.deterministic) {
                    for (int i = 0; i < 3; i++) fc_check_same_bits(first, cur, bwd_outs[i], what, t);
                } else if (have_bres) {
                    /* no bitwise promise: this run's gradients against run 1's oracle (its
                       inputs, O and LSE are run 1's bit for bit: checked above) */
                    fc_check_bwd_outputs(cur, &bres, t);
                }
            }
        }
        fc_run_free(cur);
    }
    int64_t copies = fc_stress_load_stop(load, msg, sizeof msg);
    (void)copies; /* the load is an aggravation, not a check: running without it is no finding */
    if (have_fres) orc_fwd_free(&fres);
    if (have_bres) orc_bwd_free(&bres);
    fc_run_free(first);
    int64_t n = merge_stress(v, t, tag);
    free(t);
    free(first);
    free(cur);
    return n;
}
