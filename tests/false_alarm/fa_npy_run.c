/* fa_npy_run.c: run one backend (default: flashcheck's CUDA backend) on a case saved as .npy
 * (DIR/q.npy k.npy v.npy do.npy [mask.npy], as `flashcheck verify` reads them) and write its
 * outputs DIR/o.npy lse.npy dq.npy dk.npy dv.npy, so the false-alarm suite (fa_suite.py) checks
 * our backend with `flashcheck verify` exactly like the PyTorch backends.
 *
 * usage: fa_npy_run --dir DIR [--backend cuda|cpu|PATH.so] [--layout bshd|bhsd]
 *                   [--causal none|top_left|bottom_right] [--scale S]
 * exit: 0 outputs written; 3 the backend refused the case (FA_ERR_UNSUPPORTED / FA_ERR_INVALID:
 *       the message says why; nothing written); 2 bad usage or input file; 4 device or internal error. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/npy.h"
#include "kernels/flash_api.h"

enum { IQ, IK, IV, IDO, IMASK, IN_N };
static const char *in_names[IN_N] = {"q", "k", "v", "do", "mask"};

static int die(int rc, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "fa_npy_run: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return rc;
}

/* device (or host) copy of n bytes */
static void *to_space(const fa_backend *be, const void *src, size_t n) {
    void *p = NULL;
    if (be->memspace == FA_MEM_CUDA) {
        if (cudaMalloc(&p, n ? n : 16) != cudaSuccess) return NULL;
        if (src && cudaMemcpy(p, src, n, cudaMemcpyHostToDevice) != cudaSuccess) return NULL;
        if (!src) cudaMemset(p, 0xFF, n); /* poison: every output element must be written */
    } else {
        p = malloc(n ? n : 16);
        if (p && src) memcpy(p, src, n);
        else if (p) memset(p, 0xFF, n);
    }
    return p;
}

static int from_space(const fa_backend *be, void *dst, const void *src, size_t n) {
    if (be->memspace == FA_MEM_CUDA) return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
    memcpy(dst, src, n);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *backend = "cuda";
    int bhsd = 0;
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.window_left = p.window_right = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return die(2, "%s needs a value%s", a, "");
        i++;
        if (!strcmp(a, "--dir")) dir = v;
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--layout")) {
            if (strcmp(v, "bshd") && strcmp(v, "bhsd")) return die(2, "--layout must be bshd or bhsd, not %s%s", v, "");
            bhsd = !strcmp(v, "bhsd");
        } else if (!strcmp(a, "--causal")) {
            if (!strcmp(v, "none")) p.causal = FA_CAUSAL_NONE;
            else if (!strcmp(v, "top_left")) p.causal = FA_CAUSAL_TOP_LEFT;
            else if (!strcmp(v, "bottom_right")) p.causal = FA_CAUSAL_BOTTOM_RIGHT;
            else return die(2, "--causal must be none, top_left or bottom_right, not %s%s", v, "");
        } else if (!strcmp(a, "--scale")) {
            char *end;
            double s = strtod(v, &end);
            if (*end || !isfinite(s) || s == 0) return die(2, "--scale needs a finite non-zero number, not %s%s", v, "");
            p.softmax_scale = (float)s;
        } else return die(2, "unknown option %s%s", a, "");
    }
    if (!dir) return die(2, "usage: fa_npy_run --dir DIR [--backend B] [--layout bshd|bhsd] [--causal M] [--scale S]%s%s", "", "");
    const fa_backend *be;
    fa_error err;
    memset(&err, 0, sizeof err);
    if (fa_backend_by_name(backend, &be, &err) != FA_OK) return die(2, "backend %s: %s", backend, err.msg);

    npy_array in[IN_N];
    memset(in, 0, sizeof in);
    char path[4096], msg[1024];
    for (int t = 0; t < IN_N; t++) {
        snprintf(path, sizeof path, "%s/%s.npy", dir, in_names[t]);
        FILE *f = fopen(path, "rb");
        if (!f) {
            if (t == IMASK) continue;
            return die(2, "%s is missing (q, k, v and do are required)%s", path, "");
        }
        fclose(f);
        if (npy_read(path, &in[t], msg, sizeof msg)) return die(2, "%s%s", msg, "");
        if (in[t].kind == NPY_I32) return die(2, "%s is int32; fp16/bf16 (an fp32 mask) expected%s", path, "");
        if (in[t].ndim != 4) return die(2, "%s must have 4 dimensions%s", path, "");
        if (t != IMASK && in[t].kind != in[IQ].kind) return die(2, "%s: q, k, v, do must share one dtype (fp16 or bf16)%s", path, "");
    }
    if (in[IQ].kind == NPY_F32) return die(2, "%s/q.npy is float32; fp16 or bf16 expected%s", dir, "");
    /* [B, S, H, D] of each data tensor and its element strides in that order */
    int64_t dims[4][4], st[4][4];
    for (int t = 0; t < 4; t++) {
        const int64_t *s = in[t].shape;
        dims[t][0] = s[0]; dims[t][1] = bhsd ? s[2] : s[1]; dims[t][2] = bhsd ? s[1] : s[2]; dims[t][3] = s[3];
        const int64_t s3 = 1, s2 = s[3], s1 = s[2] * s[3], s0 = s[1] * s[2] * s[3];
        st[t][0] = s0; st[t][1] = bhsd ? s2 : s1; st[t][2] = bhsd ? s1 : s2; st[t][3] = s3;
    }
    p.batch = dims[IQ][0]; p.seqlen_q = dims[IQ][1]; p.heads_q = dims[IQ][2]; p.head_dim_qk = dims[IQ][3];
    p.seqlen_k = dims[IK][1]; p.heads_kv = dims[IK][2]; p.head_dim_v = dims[IV][3];
    p.dtype = in[IQ].kind == NPY_BF16 ? FA_BF16 : FA_F16;

    fa_tensor q = {0}, k = {0}, v = {0}, d_o = {0}, o = {0}, dq = {0}, dk = {0}, dv = {0};
    fa_tensor *ins[4] = {&q, &k, &v, &d_o};
    for (int t = 0; t < 4; t++) {
        ins[t]->ptr = to_space(be, in[t].bits, (size_t)in[t].count * 2);
        memcpy(ins[t]->stride, st[t], sizeof st[t]);
        if (!ins[t]->ptr) return die(4, "out of memory for %s%s", in_names[t], "");
    }
    /* outputs: O and dQ like q/do, dK like k, dV like v */
    const size_t n_o = (size_t)in[IDO].count, n_q = (size_t)in[IQ].count, n_k = (size_t)in[IK].count, n_v = (size_t)in[IV].count;
    o.ptr = to_space(be, NULL, n_o * 2); memcpy(o.stride, st[IDO], sizeof st[IDO]);
    dq.ptr = to_space(be, NULL, n_q * 2); memcpy(dq.stride, st[IQ], sizeof st[IQ]);
    dk.ptr = to_space(be, NULL, n_k * 2); memcpy(dk.stride, st[IK], sizeof st[IK]);
    dv.ptr = to_space(be, NULL, n_v * 2); memcpy(dv.stride, st[IV], sizeof st[IV]);
    const size_t n_lse = (size_t)(p.batch * p.heads_q * p.seqlen_q);
    fa_lse lse = {0};
    lse.ptr = (float *)to_space(be, NULL, n_lse * 4);
    lse.stride[0] = p.heads_q * p.seqlen_q; lse.stride[1] = p.seqlen_q; lse.stride[2] = 1;
    fa_mask mask = {0};
    if (in[IMASK].count) {
        const npy_array *m = &in[IMASK];
        mask.ptr = (const float *)to_space(be, m->data, (size_t)m->count * 4);
        mask.stride[3] = 1; mask.stride[2] = m->shape[3];
        mask.stride[1] = m->shape[1] == 1 ? 0 : m->shape[2] * m->shape[3];
        mask.stride[0] = m->shape[0] == 1 ? 0 : m->shape[1] * m->shape[2] * m->shape[3];
    }
    if (!o.ptr || !dq.ptr || !dk.ptr || !dv.ptr || !lse.ptr || (in[IMASK].count && !mask.ptr)) return die(4, "out of memory%s%s", "", "");

    fa_fwd_args fa;
    memset(&fa, 0, sizeof fa);
    fa.p = p; fa.q = q; fa.k = k; fa.v = v; fa.mask = mask; fa.o = o; fa.lse = lse;
    fa_status s = be->forward(&fa, &err);
    if (s == FA_ERR_UNSUPPORTED || s == FA_ERR_INVALID) return die(3, "forward refused: %s: %s", err.arg, err.msg);
    if (s != FA_OK) return die(4, "forward failed: %s: %s", fa_status_name(s), err.msg);
    if (!be->backward) return die(3, "backend %s has no backward%s", be->name, "");
    fa_bwd_args ba;
    memset(&ba, 0, sizeof ba);
    ba.p = p; ba.q = q; ba.k = k; ba.v = v; ba.o = o; ba.dout = d_o; ba.lse = lse; ba.mask = mask;
    ba.dq = dq; ba.dk = dk; ba.dv = dv;
    s = be->backward(&ba, &err);
    if (s == FA_ERR_UNSUPPORTED || s == FA_ERR_INVALID) return die(3, "backward refused: %s: %s", err.arg, err.msg);
    if (s != FA_OK) return die(4, "backward failed: %s: %s", fa_status_name(s), err.msg);

    /* write the outputs (same layout as the inputs) */
    struct { const char *name; void *dev; size_t n; const int64_t *shape; } outs[4] = {
        {"o", o.ptr, n_o, in[IDO].shape}, {"dq", dq.ptr, n_q, in[IQ].shape},
        {"dk", dk.ptr, n_k, in[IK].shape}, {"dv", dv.ptr, n_v, in[IV].shape}};
    for (int t = 0; t < 4; t++) {
        uint16_t *h = malloc(outs[t].n * 2 + 2);
        if (!h || from_space(be, h, outs[t].dev, outs[t].n * 2)) return die(4, "copying %s back failed%s", outs[t].name, "");
        snprintf(path, sizeof path, "%s/%s.npy", dir, outs[t].name);
        if (npy_write(path, in[IQ].kind, 4, outs[t].shape, NULL, h, msg, sizeof msg)) return die(4, "%s%s", msg, "");
        free(h);
    }
    float *hl = malloc(n_lse * 4 + 4);
    if (!hl || from_space(be, hl, lse.ptr, n_lse * 4)) return die(4, "copying lse back failed%s%s", "", "");
    int64_t lshape[3] = {p.batch, p.heads_q, p.seqlen_q};
    snprintf(path, sizeof path, "%s/lse.npy", dir);
    if (npy_write(path, NPY_F32, 3, lshape, hl, NULL, msg, sizeof msg)) return die(4, "%s%s", msg, "");
    free(hl);
    return 0;
}
