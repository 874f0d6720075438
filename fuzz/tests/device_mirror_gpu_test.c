/* device_mirror_gpu_test.c (GPU): the device mirrors of properties/check/run.c (the packed
 * one-copy staging, the device gate) through fc_check_case, with a CUDA-memory backend built
 * in this test from the CPU backend (device buffers copied to the host, the CPU backend run on
 * them, its outputs copied back: no kernel of the project), so its verdict is known:
 *   mirror_roundtrip          random dense cases (GQA, masks, layouts, forward and backward,
 *                             the determinism run) pass: inputs reach the device, outputs
 *                             come back, guards and gaps intact;
 *   mirror_guard_write        a write one element before O's view (device memory) is a
 *                             "guard" failure;
 *   mirror_input_write        a write to Q's first element is "input_modified";
 *   mirror_gate               the device gate is entered before and left after every backend
 *                             call, balanced.
 * Requires a CUDA device (target_compatible_with @local_gpu//:present). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/check/check.h"

static int failures, checks;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static int mode;           /* 0 faithful, 1 write a guard of O, 2 write Q */
static int gate_depth, enters, leaves, calls, outside;

/* elements spanned by a view: 1 + sum (dim_k - 1) * stride_k (0 for an empty view) */
static int64_t extent(const int64_t *dim, const int64_t *st, int n)
{
    int64_t e = 1;
    for (int k = 0; k < n; k++) {
        if (dim[k] == 0) return 0;
        e += (dim[k] - 1) * st[k];
    }
    return e;
}

typedef struct { void *dev, *host; size_t bytes; } hcopy;

/* a host copy of the device view ptr (n elements of es bytes); returns the host view */
static void *pull(hcopy *h, const void *ptr, int64_t n, size_t es)
{
    h->dev = (void *)ptr;
    h->bytes = (size_t)n * es;
    h->host = NULL;
    if (!ptr || n <= 0) return NULL;
    h->host = malloc(h->bytes);
    if (cudaMemcpy(h->host, ptr, h->bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return NULL;
    return h->host;
}
static void push(hcopy *h)
{
    if (h->host) cudaMemcpy(h->dev, h->host, h->bytes, cudaMemcpyHostToDevice);
}
static void drop(hcopy *h) { free(h->host); h->host = NULL; }

/* the dense extents of a call's tensors (dims of Q, K, V, O / dO, LSE, mask) */
typedef struct { int64_t q[4], k[4], v[4], o[4], l[3], m[4]; } emu_dims;
static emu_dims dims_of(const fa_problem *p)
{
    const emu_dims d = { { p->batch, p->seqlen_q, p->heads_q, p->head_dim_qk }, { p->batch, p->seqlen_k, p->heads_kv, p->head_dim_qk },
                         { p->batch, p->seqlen_k, p->heads_kv, p->head_dim_v }, { p->batch, p->seqlen_q, p->heads_q, p->head_dim_v },
                         { p->batch, p->heads_q, p->seqlen_q }, { p->batch, p->heads_q, p->seqlen_q, p->seqlen_k } };
    return d;
}

/* host copies of the inputs both passes take (Q, K, V, mask) into the host views h* */
static void pull_inputs(const emu_dims *d, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v, const fa_mask *m,
                        hcopy c[4], fa_tensor *hq, fa_tensor *hk, fa_tensor *hv, fa_mask *hm)
{
    hq->ptr = pull(&c[0], q->ptr, extent(d->q, q->stride, 4), 2);
    hk->ptr = pull(&c[1], k->ptr, extent(d->k, k->stride, 4), 2);
    hv->ptr = pull(&c[2], v->ptr, extent(d->v, v->stride, 4), 2);
    hm->ptr = pull(&c[3], m->ptr, extent(d->m, m->stride, 4), 4);
}

static fa_status emu_fwd(const fa_fwd_args *a, fa_error *e)
{
    calls++;
    outside += gate_depth != 1;
    const emu_dims d = dims_of(&a->p);
    hcopy in[4], o, l;
    fa_fwd_args h = *a;
    pull_inputs(&d, &a->q, &a->k, &a->v, &a->mask, in, &h.q, &h.k, &h.v, &h.mask);
    h.o.ptr = pull(&o, a->o.ptr, extent(d.o, a->o.stride, 4), 2);
    h.lse.ptr = pull(&l, a->lse.ptr, extent(d.l, a->lse.stride, 3), 4);
    fa_status st = fa_backend_cpu()->forward(&h, e);
    push(&o);
    push(&l);
    drop(&in[0]); drop(&in[1]); drop(&in[2]); drop(&in[3]); drop(&o); drop(&l);
    if (mode == 1 && a->o.ptr) cudaMemset((char *)a->o.ptr - 2, 0x11, 2);
    if (mode == 2 && a->q.ptr) cudaMemset(a->q.ptr, 0x22, 2);
    return st;
}

static fa_status emu_bwd(const fa_bwd_args *a, fa_error *e)
{
    calls++;
    outside += gate_depth != 1;
    const emu_dims d = dims_of(&a->p);
    hcopy in[4], o, l, g, gq, gk, gv;
    fa_bwd_args h = *a;
    pull_inputs(&d, &a->q, &a->k, &a->v, &a->mask, in, &h.q, &h.k, &h.v, &h.mask);
    h.o.ptr = pull(&o, a->o.ptr, extent(d.o, a->o.stride, 4), 2);
    h.lse.ptr = pull(&l, a->lse.ptr, extent(d.l, a->lse.stride, 3), 4);
    h.dout.ptr = pull(&g, a->dout.ptr, extent(d.o, a->dout.stride, 4), 2);
    h.dq.ptr = pull(&gq, a->dq.ptr, extent(d.q, a->dq.stride, 4), 2);
    h.dk.ptr = pull(&gk, a->dk.ptr, extent(d.k, a->dk.stride, 4), 2);
    h.dv.ptr = pull(&gv, a->dv.ptr, extent(d.v, a->dv.stride, 4), 2);
    fa_status st = fa_backend_cpu()->backward(&h, e);
    push(&gq); push(&gk); push(&gv);
    drop(&in[0]); drop(&in[1]); drop(&in[2]); drop(&in[3]); drop(&o); drop(&l); drop(&g); drop(&gq); drop(&gk); drop(&gv);
    return st;
}

static void g_enter(void *u) { (void)u; gate_depth++; enters++; }
static void g_leave(void *u) { (void)u; gate_depth--; leaves++; }

static uint64_t rs = 12345;
static uint64_t rnd(uint64_t n) { rs = rs * 6364136223846793005ull + 1442695040888963407ull; return (rs >> 33) % n; }

static void random_case(fc_case *c, int i)
{
    fc_case_default(c);
    c->seed = 1000 + (uint64_t)i;
    c->p.batch = 1 + (int64_t)rnd(2);
    c->p.heads_kv = 1 + (int64_t)rnd(2);
    c->p.heads_q = c->p.heads_kv * (1 + (int64_t)rnd(3));
    c->p.seqlen_q = 1 + (int64_t)rnd(70);
    c->p.seqlen_k = 1 + (int64_t)rnd(70);
    c->p.head_dim_qk = c->p.head_dim_v = 8 * (1 + (int64_t)rnd(8));
    c->p.dtype = rnd(2) ? FA_BF16 : FA_F16;
    c->mask.kind = (fc_mask_kind)rnd(FC_MASK_COUNT);
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (rnd(2)) c->layout[t].pad[rnd(t == FC_T_LSE ? 3 : 4)] = 1 + (int64_t)rnd(3);
        c->layout[t].offset = rnd(2) ? (int64_t)rnd(9) : 0;
    }
    c->backward = (int)rnd(2);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("device_mirror_gpu_test: no CUDA device\n");
        return 1;   /* built only where a GPU is present: not having one is a failure */
    }
    fa_backend emu = *fa_backend_cpu();
    emu.name = "emu-cuda";
    emu.memspace = FA_MEM_CUDA;
    emu.forward = emu_fwd;
    emu.backward = emu_bwd;
    fc_device_gate gate = { g_enter, g_leave, NULL };
    fc_run_set_device_gate(&gate);
    fc_check_opts o;
    fc_check_opts_default(&o);
    o.determinism = 1;
    fc_verdict *v = malloc(sizeof *v);
    int passed = 0, total = 0;
    for (int i = 0; i < 40; i++) {
        fc_case c;
        random_case(&c, i);
        char why[256];
        if (fc_case_check(&c, why, sizeof why)) continue;
        total++;
        fc_outcome out = fc_check_case(&emu, &c, &o, v);
        if (out == FC_PASS || out == FC_SKIP) passed++;
        else { printf("case %d:\n", i); fc_verdict_print(v, stdout); }
    }
    CHECK(total >= 20 && passed == total, "mirror_roundtrip: %d of %d random cases passed through the device mirrors", passed, total);
    CHECK(calls > 0 && outside == 0 && enters == leaves && gate_depth == 0,
          "mirror_gate: %d backend calls, %d outside the gate, %d enters, %d leaves", calls, outside, enters, leaves);

    fc_case c;
    fc_case_default(&c);
    c.p.batch = 1; c.p.heads_q = 2; c.p.heads_kv = 1; c.p.seqlen_q = 33; c.p.seqlen_k = 40;
    c.p.head_dim_qk = c.p.head_dim_v = 32;
    mode = 1;
    fc_outcome out = fc_check_case(&emu, &c, &o, v);
    const char *first = fc_verdict_first_check(v);
    CHECK(out == FC_FAIL && first && !strcmp(first, "guard"), "mirror_guard_write: outcome %d, first check '%s'", (int)out,
          first ? first : "");
    mode = 2;
    out = fc_check_case(&emu, &c, &o, v);
    first = fc_verdict_first_check(v);
    CHECK(out == FC_FAIL && first && !strcmp(first, "input_modified"), "mirror_input_write: outcome %d, first check '%s'",
          (int)out, first ? first : "");
    fc_run_set_device_gate(NULL);
    free(v);
    printf("device_mirror_gpu_test: %d checks, %d failures (%d random cases)\n", checks, failures, total);
    return failures ? 1 : 0;
}
