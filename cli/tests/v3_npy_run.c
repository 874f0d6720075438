/* v3_npy_run.c DIR [--causal none|top_left|bottom_right] [--softcap X] [--no-bwd]: test tool of
 * //cli:v3_verify_test. Runs the CPU backend on the contract-v3 inputs in DIR (q k v do .npy, and
 * cu_seqlens_q / cu_seqlens_k / seqused_k / block_table / sinks .npy when present, in the layout
 * `flashcheck verify --help` documents: packed rows [total, H, D], page pools [num_pages,
 * page_size, H, D], dense [B, S, H, D]) and writes its outputs o lse (dq dk dv dsinks) .npy into
 * DIR: a kernel's results that verify must pass. Exit 0, or 2 with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/npy.h"
#include "kernels/flash_api.h"

enum { Q, K, V, DO, CUQ, CUK, USED, TABLE, SINKS, N };
static const char *names[N] = {"q", "k", "v", "do", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table", "sinks"};

static int die(const char *m, const char *a) {
    fprintf(stderr, "v3_npy_run: %s%s\n", m, a);
    return 2;
}

/* C-order strides of a packed [T, H, D] ([0, H*D, D, 1]) or 4-d array */
static void strides(const npy_array *a, int64_t st[4]) {
    if (a->ndim == 3) { st[0] = 0; st[1] = a->shape[1] * a->shape[2]; st[2] = a->shape[2]; st[3] = 1; return; }
    st[3] = 1; st[2] = a->shape[3]; st[1] = a->shape[2] * a->shape[3]; st[0] = a->shape[1] * st[1];
}

static int save(const char *dir, const char *name, npy_kind kind, int nd, const int64_t *shape, const void *data) {
    char path[4096], msg[512];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    if (npy_write(path, kind, nd, shape, kind == NPY_F32 ? data : NULL, kind == NPY_F32 ? NULL : data, msg, sizeof msg))
        return die(msg, "");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return die("usage: v3_npy_run DIR [--causal M] [--softcap X] [--no-bwd]", "");
    const char *dir = argv[1];
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.window_left = p.window_right = -1;
    int bwd = 1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--causal") && i + 1 < argc) {
            i++;
            p.causal = !strcmp(argv[i], "top_left") ? FA_CAUSAL_TOP_LEFT : !strcmp(argv[i], "bottom_right") ? FA_CAUSAL_BOTTOM_RIGHT
                                                                                                            : FA_CAUSAL_NONE;
        } else if (!strcmp(argv[i], "--softcap") && i + 1 < argc) p.softcap = strtof(argv[++i], NULL);
        else if (!strcmp(argv[i], "--no-bwd")) bwd = 0;
        else return die("unknown argument ", argv[i]);
    }
    npy_array a[N];
    int have[N] = {0};
    memset(a, 0, sizeof a);
    for (int i = 0; i < N; i++) {
        char path[4096], msg[512];
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fclose(f);
        if (npy_read(path, &a[i], msg, sizeof msg)) return die(msg, "");
        have[i] = 1;
    }
    if (!have[Q] || !have[K] || !have[V]) return die("q, k, v are required in ", dir);
    bwd = bwd && have[DO];
    const int pq = have[CUQ], pk = have[CUK], paged = have[TABLE];
    const npy_array *q = &a[Q], *k = &a[K], *v = &a[V];
    p.dtype = q->kind == NPY_BF16 ? FA_BF16 : FA_F16;
    p.heads_q = q->shape[q->ndim - 2];
    p.head_dim_qk = q->shape[q->ndim - 1];
    p.heads_kv = k->shape[k->ndim - 2];
    p.head_dim_v = v->shape[v->ndim - 1];
    p.batch = pq ? a[CUQ].count - 1 : q->shape[0];
    const int64_t rows_q = pq ? q->shape[0] : q->shape[1];
    p.seqlen_q = rows_q;
    if (pq) {
        p.seqlen_q = 0;
        for (int64_t b = 0; b < p.batch; b++)
            if (a[CUQ].ints[b + 1] - a[CUQ].ints[b] > p.seqlen_q) p.seqlen_q = a[CUQ].ints[b + 1] - a[CUQ].ints[b];
    }
    fa_fwd_args fa;
    memset(&fa, 0, sizeof fa);
    if (paged) {
        p.page_size = k->shape[1];
        fa.paged.block_table = a[TABLE].ints;
        fa.paged.table_stride = fa.paged.max_pages_per_seq = a[TABLE].shape[1];
        fa.paged.num_pages = k->shape[0];
        p.seqlen_k = fa.paged.max_pages_per_seq * p.page_size;
        if (have[USED]) {
            p.seqlen_k = 0;
            for (int64_t b = 0; b < p.batch; b++) if (a[USED].ints[b] > p.seqlen_k) p.seqlen_k = a[USED].ints[b];
        }
    } else if (pk) {
        for (int64_t b = 0; b < p.batch; b++)
            if (a[CUK].ints[b + 1] - a[CUK].ints[b] > p.seqlen_k) p.seqlen_k = a[CUK].ints[b + 1] - a[CUK].ints[b];
    } else p.seqlen_k = k->shape[1];
    p.has_sinks = have[SINKS];
    fa.p = p;
    fa.varlen.cu_seqlens_q = pq ? a[CUQ].ints : NULL;
    fa.varlen.cu_seqlens_k = pk ? a[CUK].ints : NULL;
    fa.varlen.seqused_k = have[USED] ? a[USED].ints : NULL;
    fa.sinks = have[SINKS] ? a[SINKS].data : NULL;
    fa.q.ptr = q->bits; strides(q, fa.q.stride);
    fa.k.ptr = k->bits; strides(k, fa.k.stride);
    fa.v.ptr = v->bits; strides(v, fa.v.stride);
    /* outputs: o like q with Dv, lse [B, Hq, Sq] or [Hq, total_q] */
    int64_t oshape[4], nq = 1;
    memcpy(oshape, q->shape, sizeof oshape);
    oshape[q->ndim - 1] = p.head_dim_v;
    for (int i = 0; i < q->ndim; i++) nq *= oshape[i];
    uint16_t *o = calloc((size_t)nq + 1, 2);
    npy_array oa = *q;
    memcpy(oa.shape, oshape, sizeof oshape);
    fa.o.ptr = o; strides(&oa, fa.o.stride);
    const int64_t lse_b = pq ? 1 : p.batch;
    float *lse = calloc((size_t)(lse_b * p.heads_q * rows_q) + 1, 4);
    fa.lse.ptr = lse;
    fa.lse.stride[0] = pq ? 0 : p.heads_q * rows_q; fa.lse.stride[1] = rows_q; fa.lse.stride[2] = 1;
    const fa_backend *be = fa_backend_cpu();
    fa_error err;
    memset(&err, 0, sizeof err);
    if (be->forward(&fa, &err) != FA_OK) return die("forward: ", err.msg);
    if (save(dir, "o", p.dtype == FA_BF16 ? NPY_BF16 : NPY_F16, q->ndim, oshape, o)) return 2;
    int64_t lshape[3] = {p.batch, p.heads_q, rows_q}, lshape_p[2] = {p.heads_q, rows_q};
    if (save(dir, "lse", NPY_F32, pq ? 2 : 3, pq ? lshape_p : lshape, lse)) return 2;
    if (!bwd) return 0;
    fa_bwd_args ba;
    memset(&ba, 0, sizeof ba);
    ba.p = p; ba.q = fa.q; ba.k = fa.k; ba.v = fa.v; ba.o = fa.o; ba.lse = fa.lse;
    ba.dout.ptr = a[DO].bits; strides(&a[DO], ba.dout.stride);
    ba.varlen = fa.varlen; ba.paged = fa.paged; ba.sinks = fa.sinks;
    uint16_t *dq = calloc((size_t)q->count + 1, 2), *dk = calloc((size_t)k->count + 1, 2), *dv = calloc((size_t)v->count + 1, 2);
    float *dsinks = calloc((size_t)p.heads_q + 1, 4);
    ba.dq.ptr = dq; strides(q, ba.dq.stride);
    ba.dk.ptr = dk; strides(k, ba.dk.stride);
    ba.dv.ptr = dv; strides(v, ba.dv.stride);
    ba.dsinks = p.has_sinks ? dsinks : NULL;
    if (be->backward(&ba, &err) != FA_OK) return die("backward: ", err.msg);
    npy_kind kd = p.dtype == FA_BF16 ? NPY_BF16 : NPY_F16;
    if (save(dir, "dq", kd, q->ndim, q->shape, dq) || save(dir, "dk", kd, k->ndim, k->shape, dk) ||
        save(dir, "dv", kd, v->ndim, v->shape, dv))
        return 2;
    int64_t hs[1] = {p.heads_q};
    if (p.has_sinks && save(dir, "dsinks", NPY_F32, 1, hs, dsinks)) return 2;
    return 0;
}
