/* fz_misuse.c: API misuse executions (see fz_misuse.h).
 *
 * Each input is a valid case plus ONE corruption that the contract
 * (kernels/flash_api.h, "Validation") says must be rejected: a NULL pointer,
 * a negative or impossible size, Hq % Hkv != 0, a head dim outside the
 * backend's limits, a misaligned pointer, a negative stride, strides whose
 * extent overflows 64 bits, an output mapping two elements to one address,
 * an output overlapping an input or another output, a non-finite scale,
 * a bad mask stride, an out-of-range enum. The backend must return
 * FA_ERR_INVALID or FA_ERR_UNSUPPORTED, fill fa_error (status, argument name
 * for INVALID, a message), never crash (ASan/UBSan watch the host code) and
 * write NOTHING: every output allocation, guards included, is compared byte
 * for byte with its poisoned state after the call.
 *
 * Input: text "# misuse kind=K param=P" anywhere in a case file, or bytes:
 * data[0] = kind, data[1] = param, data[2..] = the case (fz_case_from_input).
 * With a device backend the buffers are still host memory: a wrongly
 * accepted call then faults on the device, which is also a finding.
 * ------------------------------------------------------------------------- */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"
#include "fuzz/fz_feat.h"
#include "fuzz/fz_gen.h"
#include "fuzz/fz_misuse.h"
#include "kernels/flash_api.h"

/* ------------------------------------------------------------------------- */
/* corruptions                                                               */

enum {
    MU_NULL_PTR, MU_NEG_SIZE, MU_HEADS_RATIO, MU_HEAD_DIM, MU_MISALIGNED, MU_NEG_STRIDE,
    MU_STRIDE_OVERFLOW, MU_OUTPUT_SELF_ALIAS, MU_OUTPUT_OVER_INPUT, MU_OUTPUT_OVER_OUTPUT,
    MU_SCALE, MU_MASK_STRIDE, MU_ENUM, MU_HEADS_KV_ZERO, MU_COUNT
};

static const char *mu_names[MU_COUNT] = {
    "null_ptr", "neg_size", "heads_ratio", "head_dim", "misaligned", "neg_stride", "stride_overflow",
    "output_self_alias", "output_over_input", "output_over_output", "scale", "mask_stride", "enum",
    "heads_kv_zero"
};

/* the 4-d tensors of a pass, in argument order */
typedef struct {
    fa_problem *p;
    fa_tensor *t[8];      /* q k v o (fwd) or q k v o dout dq dk dv (bwd) */
    const char *name[8];
    int is_out[8];
    int n;
    fa_lse *lse;
    int lse_is_out;
    fa_mask *mask;
} mu_view;

/* Apply corruption `kind` with parameter `param`; describe it in `what`.
 * Returns 0 when the corruption cannot apply to this case (then nothing changed). */
static int mu_apply(mu_view *v, const fa_limits *lim, int kind, unsigned param, char *what, size_t wlen)
{
    fa_problem *p = v->p;
    fa_tensor *t = v->t[param % (unsigned)v->n];
    const char *tn = v->name[param % (unsigned)v->n];
    int d = (int)((param >> 4) & 3);
    switch (kind) {
    case MU_NULL_PTR:
        if ((param & 8) && v->lse) { v->lse->ptr = NULL; snprintf(what, wlen, "lse.ptr = NULL"); return 1; }
        t->ptr = NULL;
        snprintf(what, wlen, "%s.ptr = NULL", tn);
        return 1;
    case MU_NEG_SIZE: {
        int64_t *f[7] = { &p->batch, &p->seqlen_q, &p->seqlen_k, &p->heads_q, &p->heads_kv,
                          &p->head_dim_qk, &p->head_dim_v };
        static const char *fn[7] = { "batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv",
                                     "head_dim_qk", "head_dim_v" };
        int i = (int)(param % 7);
        *f[i] = (param & 128) ? INT64_MIN : -1 - (int64_t)((param >> 3) & 15);
        snprintf(what, wlen, "%s = %lld", fn[i], (long long)*f[i]);
        return 1;
    }
    case MU_HEADS_RATIO:
        p->heads_kv = p->heads_q + 1 + (int64_t)(param & 3);
        snprintf(what, wlen, "heads_kv = %lld with heads_q = %lld", (long long)p->heads_kv, (long long)p->heads_q);
        return 1;
    case MU_HEAD_DIM:
        if (param & 1) {
            if (lim->max_head_dim <= 0 || lim->max_head_dim > (1 << 20)) return 0;
            p->head_dim_qk = lim->max_head_dim + 1 + (int64_t)((param >> 1) & 7) * (lim->head_dim_multiple > 0 ? lim->head_dim_multiple : 1);
            snprintf(what, wlen, "head_dim_qk = %lld > max_head_dim %lld", (long long)p->head_dim_qk, (long long)lim->max_head_dim);
        } else if (lim->head_dim_multiple > 1) {
            p->head_dim_v += 1;
            snprintf(what, wlen, "head_dim_v = %lld not a multiple of %lld", (long long)p->head_dim_v, (long long)lim->head_dim_multiple);
        } else if (lim->dqk_must_equal_dv) {
            p->head_dim_v = p->head_dim_qk + 1;
            snprintf(what, wlen, "head_dim_v = %lld != head_dim_qk (backend needs equal)", (long long)p->head_dim_v);
        } else {
            p->head_dim_v = lim->max_head_dim + 1;
            snprintf(what, wlen, "head_dim_v = %lld > max_head_dim %lld", (long long)p->head_dim_v, (long long)lim->max_head_dim);
        }
        return 1;
    case MU_MISALIGNED:
        if ((param & 8) && v->lse) {
            v->lse->ptr = (float *)((char *)v->lse->ptr + 2);
            snprintf(what, wlen, "lse.ptr misaligned by 2 bytes");
        } else {
            t->ptr = (char *)t->ptr + 1;
            snprintf(what, wlen, "%s.ptr misaligned by 1 byte", tn);
        }
        return 1;
    case MU_NEG_STRIDE:
        if ((param & 8) && v->lse) {
            v->lse->stride[d % 3] = -1 - (int64_t)(param >> 6);
            snprintf(what, wlen, "lse.stride[%d] = %lld", d % 3, (long long)v->lse->stride[d % 3]);
        } else {
            t->stride[d] = t->stride[d] > 0 ? -t->stride[d] : -1;
            snprintf(what, wlen, "%s.stride[%d] = %lld", tn, d, (long long)t->stride[d]);
        }
        return 1;
    case MU_STRIDE_OVERFLOW: {
        /* the sequence dim of q/o/dout/dq (seqlen_q >= 2) or k/v/dk/dv (seqlen_k >= 2) */
        t->stride[1] = INT64_MAX / 2 + 1 + (int64_t)(param >> 6);
        snprintf(what, wlen, "%s.stride[1] = %lld (extent overflows)", tn, (long long)t->stride[1]);
        return 1;
    }
    case MU_OUTPUT_SELF_ALIAS: {
        int outs[8], no = 0;
        for (int i = 0; i < v->n; i++) if (v->is_out[i]) outs[no++] = i;
        int i = outs[param % (unsigned)no];
        int dim = 1 + (int)((param >> 3) % 3);  /* seq, head or dim */
        if (dim == 2 && i >= 6 && v->p->heads_kv < 2) dim = 1;  /* dk/dv: heads_kv may be 1 */
        v->t[i]->stride[dim] = 0;
        snprintf(what, wlen, "%s.stride[%d] = 0 (two elements at one address)", v->name[i], dim);
        return 1;
    }
    case MU_OUTPUT_OVER_INPUT: {
        int outs[8], ins[8], no = 0, ni = 0;
        for (int i = 0; i < v->n; i++) { if (v->is_out[i]) outs[no++] = i; else ins[ni++] = i; }
        int o = outs[param % (unsigned)no], in = ins[(param >> 3) % (unsigned)ni];
        v->t[o]->ptr = v->t[in]->ptr;
        snprintf(what, wlen, "%s.ptr = %s.ptr (output over an input)", v->name[o], v->name[in]);
        return 1;
    }
    case MU_OUTPUT_OVER_OUTPUT: {
        if (v->lse_is_out && (param & 1)) {
            /* lse over o (4-byte aligned inside o's range) */
            fa_tensor *o = v->t[3];
            uintptr_t a = ((uintptr_t)o->ptr + 3) & ~(uintptr_t)3;
            v->lse->ptr = (float *)a;
            snprintf(what, wlen, "lse.ptr inside o (outputs overlap)");
            return 1;
        }
        int outs[8], no = 0;
        for (int i = 0; i < v->n; i++) if (v->is_out[i]) outs[no++] = i;
        if (no < 2) {
            if (!v->lse_is_out) return 0;
            uintptr_t a = ((uintptr_t)v->t[3]->ptr + 3) & ~(uintptr_t)3;
            v->lse->ptr = (float *)a;
            snprintf(what, wlen, "lse.ptr inside o (outputs overlap)");
            return 1;
        }
        int a = outs[param % (unsigned)no], b = outs[(param / (unsigned)no + 1) % (unsigned)no];
        if (a == b) b = outs[(param + 1) % (unsigned)no];
        v->t[a]->ptr = v->t[b]->ptr;
        snprintf(what, wlen, "%s.ptr = %s.ptr (outputs overlap)", v->name[a], v->name[b]);
        return 1;
    }
    case MU_SCALE: {
        static const float bad[3] = { NAN, INFINITY, -INFINITY };
        p->softmax_scale = bad[param % 3];
        snprintf(what, wlen, "softmax_scale = %g", (double)p->softmax_scale);
        return 1;
    }
    case MU_MASK_STRIDE:
        if (!v->mask || !v->mask->ptr) return 0;
        v->mask->stride[d] = -1 - (int64_t)(param >> 6);
        snprintf(what, wlen, "mask.stride[%d] = %lld", d, (long long)v->mask->stride[d]);
        return 1;
    case MU_ENUM:
        switch (param % 4) {
        case 0: p->causal = (fa_causal)(3 + (param >> 2) % 5); snprintf(what, wlen, "causal = %d", (int)p->causal); break;
        case 1: p->causal = (fa_causal)-1; snprintf(what, wlen, "causal = -1"); break;
        case 2: p->dtype = (fa_dtype)(2 + (param >> 2) % 5); snprintf(what, wlen, "dtype = %d", (int)p->dtype); break;
        default: p->window_align = (fa_align)(2 + (param >> 2) % 5); snprintf(what, wlen, "window_align = %d", (int)p->window_align); break;
        }
        return 1;
    case MU_HEADS_KV_ZERO:
        p->heads_kv = 0;
        snprintf(what, wlen, "heads_kv = 0 with heads_q = %lld", (long long)p->heads_q);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* the target                                                                */

int fz_misuse_params(const uint8_t *data, size_t size, int *kind, unsigned *param, size_t *skip)
{
    /* text form: a "# misuse kind=K param=P" line */
    const char *key = "# misuse kind=";
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl < size; i++) {
        if ((i == 0 || data[i - 1] == '\n') && memcmp(data + i, key, kl) == 0) {
            char line[64];
            size_t n = 0;
            while (i + kl + n < size && n + 1 < sizeof line && data[i + kl + n] != '\n') { line[n] = (char)data[i + kl + n]; n++; }
            line[n] = 0;
            unsigned k = 0, pr = 0;
            if (sscanf(line, "%u param=%u", &k, &pr) == 2) {
                *kind = (int)(k % MU_COUNT);
                *param = pr;
                *skip = 0;
                return 1;
            }
        }
    }
    *kind = size > 0 ? data[0] % MU_COUNT : 0;
    *param = size > 1 ? data[1] : 0;
    *skip = size >= 2 ? 2 : size;
    return 0;
}

int fz_misuse_run(const fa_backend *be, const uint8_t *data, size_t size, const fz_budget *budget,
                  fz_misuse_result *res)
{
    int kind;
    unsigned param;
    size_t skip;
    memset(res, 0, sizeof *res);
    fz_misuse_params(data, size, &kind, &param, &skip);
    res->kind = kind;
    res->param = param;
    snprintf(res->kind_name, sizeof res->kind_name, "%s", mu_names[kind]);

    fc_case c;
    fz_budget b = *budget;
    if (b.max_seq > 64) b.max_seq = 64;          /* validation does not need large cases */
    if (b.max_head_dim > 64) b.max_head_dim = 64;
    fz_case_from_input(data + skip, size - skip, &b, &be->limits, be->backward != NULL, &c);
    /* every tensor non-empty and every dim of the outputs >= 2, so each corruption is invalid */
    if (c.p.seqlen_q < 2) c.p.seqlen_q = 2;
    if (c.p.seqlen_k < 2) c.p.seqlen_k = 2;
    if (c.p.heads_q < 2) { c.p.heads_kv = 1; c.p.heads_q = 2; }
    int64_t m = be->limits.head_dim_multiple > 1 ? be->limits.head_dim_multiple : 1;
    if (c.p.head_dim_qk < 2) c.p.head_dim_qk = m >= 2 ? m : 2;
    if (c.p.head_dim_v < 2) c.p.head_dim_v = m >= 2 ? m : 2;
    if (be->limits.dqk_must_equal_dv) c.p.head_dim_v = c.p.head_dim_qk;
    res->c = c;
    if (be->limits.max_head_dim > 0 && c.p.head_dim_qk > be->limits.max_head_dim) return 0;
    int bwd = be->backward != NULL && c.backward;

    /* materialize */
    fc_buf buf[FC_T_COUNT];
    memset(buf, 0, sizeof buf);
    char msg[256];
    int ok = 1;
    for (int t = 0; t < FC_T_COUNT && ok; t++) {
        if (t == FC_T_MASK && c.mask.kind == FC_MASK_NONE) continue;
        if (!bwd && (t == FC_T_DO || t == FC_T_DQ || t == FC_T_DK || t == FC_T_DV)) continue;
        if (fc_buf_alloc(&c, t, 64, FC_POISON_A, &buf[t], msg, sizeof msg) != 0) ok = 0;
        else if (t <= FC_T_MASK) fc_case_fill(&c, &buf[t]);
        else if (bwd && (t == FC_T_O || t == FC_T_LSE)) fc_case_fill(&c, &buf[t]);
    }
    if (!ok) goto done;

    fa_problem p = c.p;
    fa_tensor q, k, v, o, dout, dq, dk, dv;
    fa_lse lse;
    fa_mask mask;
#define VIEW(T, id) do { (T).ptr = fc_buf_view(&buf[id]); memcpy((T).stride, buf[id].stride, sizeof (T).stride); } while (0)
    VIEW(q, FC_T_Q); VIEW(k, FC_T_K); VIEW(v, FC_T_V); VIEW(o, FC_T_O);
    lse.ptr = fc_buf_view(&buf[FC_T_LSE]);
    memcpy(lse.stride, buf[FC_T_LSE].stride, sizeof lse.stride);
    memset(&mask, 0, sizeof mask);
    if (c.mask.kind != FC_MASK_NONE) {
        mask.ptr = fc_buf_view(&buf[FC_T_MASK]);
        memcpy(mask.stride, buf[FC_T_MASK].stride, sizeof mask.stride);
    }
    memset(&dout, 0, sizeof dout); memset(&dq, 0, sizeof dq); memset(&dk, 0, sizeof dk); memset(&dv, 0, sizeof dv);
    if (bwd) { VIEW(dout, FC_T_DO); VIEW(dq, FC_T_DQ); VIEW(dk, FC_T_DK); VIEW(dv, FC_T_DV); }
#undef VIEW

    mu_view mv;
    memset(&mv, 0, sizeof mv);
    mv.p = &p;
    fa_tensor *ts[8] = { &q, &k, &v, &o, &dout, &dq, &dk, &dv };
    static const char *tn[8] = { "q", "k", "v", "o", "dout", "dq", "dk", "dv" };
    mv.n = bwd ? 8 : 4;
    for (int i = 0; i < mv.n; i++) {
        mv.t[i] = ts[i];
        mv.name[i] = tn[i];
        mv.is_out[i] = bwd ? i >= 5 : i == 3;
    }
    mv.lse = &lse;
    mv.lse_is_out = !bwd;
    mv.mask = &mask;
    char what[160] = "";
    if (!mu_apply(&mv, &be->limits, kind, param, what, sizeof what)) goto done;
    res->applied = 1;
    res->backward = bwd;
    snprintf(res->what, sizeof res->what, "%s", what);

    /* snapshot every output allocation (guards included) */
    int outs[5], no = 0;
    if (bwd) { outs[no++] = FC_T_DQ; outs[no++] = FC_T_DK; outs[no++] = FC_T_DV; }
    else { outs[no++] = FC_T_O; outs[no++] = FC_T_LSE; }
    void *snap[5] = { 0 };
    for (int i = 0; i < no; i++) {
        size_t bytes = (size_t)buf[outs[i]].alloc_elems * buf[outs[i]].elem_size;
        snap[i] = malloc(bytes ? bytes : 1);
        memcpy(snap[i], buf[outs[i]].alloc, bytes);
    }

    fa_error err;
    memset(&err, 0, sizeof err);
    fa_status st;
    if (bwd) {
        fa_bwd_args a;
        memset(&a, 0, sizeof a);
        a.p = p; a.q = q; a.k = k; a.v = v; a.o = o; a.dout = dout; a.lse = lse; a.mask = mask;
        a.dq = dq; a.dk = dk; a.dv = dv; a.deterministic = c.deterministic;
        st = be->backward(&a, &err);
    } else {
        fa_fwd_args a;
        memset(&a, 0, sizeof a);
        a.p = p; a.q = q; a.k = k; a.v = v; a.mask = mask; a.o = o; a.lse = lse;
        st = be->forward(&a, &err);
    }

    /* judge */
    char *failure = res->failure;
    int wrote = 0;
    for (int i = 0; i < no; i++) {
        size_t bytes = (size_t)buf[outs[i]].alloc_elems * buf[outs[i]].elem_size;
        if (memcmp(snap[i], buf[outs[i]].alloc, bytes) != 0) wrote = 1;
        free(snap[i]);
    }
    if (st == FA_OK) snprintf(failure, sizeof res->failure, "accepted_invalid");
    else if (st != FA_ERR_INVALID && st != FA_ERR_UNSUPPORTED) snprintf(failure, sizeof res->failure, "wrong_status");
    else if (wrote) snprintf(failure, sizeof res->failure, "write_on_reject");
    else if (err.status != st) snprintf(failure, sizeof res->failure, "err_status_mismatch");
    else if (st == FA_ERR_INVALID && err.arg[0] == 0) snprintf(failure, sizeof res->failure, "no_arg_name");
    else if (err.msg[0] == 0) snprintf(failure, sizeof res->failure, "no_message");
    res->status = st;
    res->err = err;
    if (failure[0]) {
        snprintf(res->detail, sizeof res->detail,
                 "misuse kind=%d param=%u (%s: %s)\n%s returned %s%s; arg '%s', message '%s'",
                 kind, param, mu_names[kind], what, bwd ? "backward" : "forward", fa_status_name(st),
                 wrote ? " and WROTE to an output" : "", err.arg, err.msg);
    }

done:
    for (int t = 0; t < FC_T_COUNT; t++) fc_buf_free(&buf[t]);
    return res->applied;
}
