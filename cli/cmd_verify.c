/* cmd_verify.c: `flashcheck verify`: check attention outputs produced by any
 * framework (PyTorch, JAX, Triton, ...) and saved as .npy files against the
 * oracle's per-element bounds, without writing C. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/npy.h"
#include "oracle/oracle.h"

static const char *verify_help =
    "usage: flashcheck verify [--dir DIR] [--q F --k F --v F] [--o F] [--lse F] [--do F --dq F --dk F --dv F]\n"
    "                         [--mask F] [--layout bshd|bhsd] [--causal none|top_left|bottom_right]\n"
    "                         [--window LEFT RIGHT] [--window-align top_left|bottom_right] [--scale S]\n"
    "                         [--profile tensorcore|fp32] [--json FILE]\n"
    "\n"
    "Checks outputs of any attention implementation, saved with numpy.save, against the MPFR oracle\n"
    "with a per-element error bound. --dir DIR reads DIR/q.npy, k.npy, v.npy, o.npy, lse.npy,\n"
    "do.npy, dq.npy, dk.npy, dv.npy, mask.npy (those present); single options override.\n"
    "Forward needs q k v o (lse optional); backward needs q k v o do and any of dq dk dv (lse\n"
    "optional: computed by the oracle when absent).\n"
    "\n"
    "arrays: .npy v1/v2/v3, C or Fortran order; q k v o do dq dk dv as float16 ('<f2') or bfloat16\n"
    "(saved as uint16 bits '<u2', e.g. t.view(torch.uint16).numpy(), or '<V2'), all in one dtype;\n"
    "outputs may also be float32 if every value is exactly an fp16/bf16 value. lse is float32\n"
    "[B, Hq, Sq] (natural log). mask is float32 [B|1, Hq|1, Sq, Sk] (additive, -inf hides a key).\n"
    "\n"
    "options:\n"
    "  --layout L       bshd: [batch, seq, heads, dim] (FlashAttention; default)\n"
    "                   bhsd: [batch, heads, seq, dim] (PyTorch SDPA, JAX dot_product_attention)\n"
    "  --causal M       none (default) | top_left (PyTorch is_causal) | bottom_right (FlashAttention-2)\n"
    "  --window L R     sliding window: keys diag-L .. diag+R (negative = unbounded)\n"
    "  --window-align A diagonal of the window without causal: top_left (default) | bottom_right\n"
    "  --scale S        softmax scale (default 1/sqrt(head_dim))\n"
    "  --profile P      precision the implementation promises, which sets the bounds:\n"
    "                     tensorcore (default): fp32 scores, truncating fp32 accumulation (u = 2^-23),\n"
    "                       approximate exp (rel. err 2^-21), P and dS rounded to the input dtype,\n"
    "                       subnormals may flush to zero (ex2.approx.ftz; absolute floor ~2^-126)\n"
    "                     fp32: everything in fp32 round-to-nearest (u = 2^-24), P and dS not rounded\n"
    "  --json FILE      also write the result as JSON\n"
    "\n"
    "exit: 0 PASS (every element within its bound), 1 FAIL, 2 bad option or array (the message says\n"
    "      which file and what to fix), 4 internal error\n";

/* ------------------------------------------------------------------------- */
/* arrays                                                                    */

enum { VQ, VK, VV, VO, VLSE, VDO, VDQ, VDK, VDV, VMASK, VN };
static const char *vnames[VN] = { "q", "k", "v", "o", "lse", "do", "dq", "dk", "dv", "mask" };

typedef struct {
    const char *path[VN];
    npy_array a[VN];
    int have[VN];
    uint16_t *bits[VN];   /* 16-bit element patterns in the problem dtype (q..dv) */
} verify_arrays;

static int load_arrays(verify_arrays *va, char *msg, size_t msglen)
{
    for (int i = 0; i < VN; i++) {
        if (!va->path[i]) continue;
        if (npy_read(va->path[i], &va->a[i], msg, msglen) != 0) return -1;
        va->have[i] = 1;
    }
    return 0;
}

/* dims of a data tensor in the contract's order [B, S, H, D] */
static int data_dims(const npy_array *a, int bhsd, const char *name, int64_t out[4], char *msg, size_t msglen)
{
    if (a->ndim != 4) {
        snprintf(msg, msglen, "%s has %d dimensions; expected 4 ([batch, seq, heads, dim] with --layout bshd, "
                 "[batch, heads, seq, dim] with --layout bhsd; add a batch axis with x[None] if needed)", name, a->ndim);
        return -1;
    }
    out[0] = a->shape[0];
    out[1] = bhsd ? a->shape[2] : a->shape[1];
    out[2] = bhsd ? a->shape[1] : a->shape[2];
    out[3] = a->shape[3];
    return 0;
}

/* C-order strides of the array, mapped to the contract's [B, S, H, D] */
static void data_strides(const npy_array *a, int bhsd, int64_t st[4])
{
    int64_t s3 = 1, s2 = a->shape[3], s1 = a->shape[2] * s2, s0 = a->shape[1] * s1;
    st[0] = s0;
    st[1] = bhsd ? s2 : s1;
    st[2] = bhsd ? s1 : s2;
    st[3] = s3;
}

/* 16-bit patterns in dtype dt for array i (exact: f32 outputs must hold dtype values) */
static int to_bits(verify_arrays *va, int i, fa_dtype dt, char *msg, size_t msglen)
{
    npy_array *a = &va->a[i];
    int want = dt == FA_BF16 ? NPY_BF16 : NPY_F16;
    if ((int)a->kind == want) { va->bits[i] = a->bits; return 0; }
    if (a->kind != NPY_F32 || i == VQ || i == VK || i == VV || i == VDO) {
        snprintf(msg, msglen, "%s is %s but q is %s: all of q k v do must have one dtype (fp16 or bf16)%s",
                 va->path[i], npy_kind_name(a->kind), fa_dtype_name(dt),
                 a->kind == NPY_F32 ? "; save the tensors the kernel actually read, before any upcast" : "");
        return -1;
    }
    va->bits[i] = malloc((size_t)(a->count ? a->count : 1) * 2);
    for (int64_t e = 0; e < a->count; e++) {
        float x = a->data[e];
        uint16_t b = orc_encode(x, dt);
        double back = orc_decode(b, dt);
        if (!(back == (double)x || (isnan(back) && isnan(x)))) {
            snprintf(msg, msglen, "%s is float32 and element %lld (%.9g) is not a %s value: save the kernel's %s "
                     "output itself (x.numpy() before .float()) or as %s", va->path[i], (long long)e, (double)x,
                     fa_dtype_name(dt), fa_dtype_name(dt), dt == FA_BF16 ? "uint16 bits" : "float16");
            return -1;
        }
        va->bits[i][e] = b;
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* main                                                                      */

static int parse_enum(const char *v, const char *const *words, int n)
{
    for (int i = 0; i < n; i++) if (strcmp(v, words[i]) == 0) return i;
    return -1;
}

int cli_verify(int argc, char **argv)
{
    verify_arrays va;
    memset(&va, 0, sizeof va);
    static char dirpaths[VN][4096];
    const char *dir = NULL, *json_path = NULL;
    int bhsd = 0;
    const char *profile_name = "tensorcore";
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.window_left = p.window_right = -1;
    static const char *causal_w[3] = { "none", "top_left", "bottom_right" };
    static const char *align_w[2] = { "top_left", "bottom_right" };
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r, matched = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { fputs(verify_help, stdout); return CLI_OK; }
        for (int t = 0; t < VN && !matched; t++) {
            char opt[16];
            snprintf(opt, sizeof opt, "--%s", vnames[t]);
            if ((r = cli_opt(argc, argv, &i, opt, &v))) {
                if (r < 0) return cli_usage_error("verify", "%s needs a .npy file", opt);
                va.path[t] = v;
                matched = 1;
            }
        }
        if (matched) continue;
        if ((r = cli_opt(argc, argv, &i, "--dir", &v))) { if (r < 0) return cli_usage_error("verify", "--dir needs a directory"); dir = v; }
        else if ((r = cli_opt(argc, argv, &i, "--json", &v))) { if (r < 0) return cli_usage_error("verify", "--json needs a file name"); json_path = v; }
        else if ((r = cli_opt(argc, argv, &i, "--layout", &v))) {
            if (r < 0 || (strcmp(v, "bshd") && strcmp(v, "bhsd"))) return cli_usage_error("verify", "--layout must be bshd or bhsd");
            bhsd = strcmp(v, "bhsd") == 0;
        } else if ((r = cli_opt(argc, argv, &i, "--causal", &v))) {
            int k = r < 0 ? -1 : parse_enum(v, causal_w, 3);
            if (k < 0) return cli_usage_error("verify", "--causal must be none, top_left or bottom_right");
            p.causal = (fa_causal)k;
        } else if ((r = cli_opt(argc, argv, &i, "--window-align", &v))) {
            int k = r < 0 ? -1 : parse_enum(v, align_w, 2);
            if (k < 0) return cli_usage_error("verify", "--window-align must be top_left or bottom_right");
            p.window_align = (fa_align)k;
        } else if (strcmp(argv[i], "--window") == 0) {
            if (i + 2 >= argc || cli_parse_i64(argv[i + 1], INT64_MIN / 2, INT64_MAX / 2, &p.window_left) ||
                cli_parse_i64(argv[i + 2], INT64_MIN / 2, INT64_MAX / 2, &p.window_right))
                return cli_usage_error("verify", "--window needs two integers LEFT RIGHT (negative = unbounded)");
            i += 2;
        } else if ((r = cli_opt(argc, argv, &i, "--scale", &v))) {
            double s;
            if (r < 0 || cli_parse_double(v, &s) || s == 0) return cli_usage_error("verify", "--scale needs a finite non-zero number");
            p.softmax_scale = (float)s;
        } else if ((r = cli_opt(argc, argv, &i, "--profile", &v))) {
            fa_precision probe;
            fa_error perr;
            if (r < 0) return cli_usage_error("verify", "--profile needs a preset name");
            if (fa_precision_preset(v, &probe, &perr) != FA_OK) return cli_usage_error("verify", perr.msg);
            profile_name = v;
        } else {
            return cli_usage_error("verify", "unknown option or argument '%s'", argv[i]);
        }
    }
    if (dir) {
        for (int t = 0; t < VN; t++) {
            if (va.path[t]) continue;
            snprintf(dirpaths[t], sizeof dirpaths[t], "%s/%s.npy", dir, vnames[t]);
            if (access(dirpaths[t], F_OK) == 0) va.path[t] = dirpaths[t];
        }
    }
    if (!va.path[VQ] || !va.path[VK] || !va.path[VV])
        return cli_usage_error("verify", "q, k and v are required (--q/--k/--v, or --dir with q.npy k.npy v.npy)");
    int want_bwd = va.path[VDQ] || va.path[VDK] || va.path[VDV];
    if (!va.path[VO]) return cli_usage_error("verify", "o is required (the forward output; backward also needs it as input)");
    if (want_bwd && !va.path[VDO]) return cli_usage_error("verify", "dq/dk/dv given but no do (the output gradient)");

    char msg[1024];
    if (load_arrays(&va, msg, sizeof msg) != 0) { fprintf(stderr, "flashcheck verify: %s\n", msg); return CLI_USAGE; }

    /* shapes */
    int64_t dq_[4], dk_[4], dv_[4], d[4];
    if (data_dims(&va.a[VQ], bhsd, va.path[VQ], dq_, msg, sizeof msg) || data_dims(&va.a[VK], bhsd, va.path[VK], dk_, msg, sizeof msg) ||
        data_dims(&va.a[VV], bhsd, va.path[VV], dv_, msg, sizeof msg)) {
        fprintf(stderr, "flashcheck verify: %s\n", msg);
        return CLI_USAGE;
    }
    p.batch = dq_[0]; p.seqlen_q = dq_[1]; p.heads_q = dq_[2]; p.head_dim_qk = dq_[3];
    p.seqlen_k = dk_[1]; p.heads_kv = dk_[2]; p.head_dim_v = dv_[3];
    if (dk_[0] != p.batch || dv_[0] != p.batch || dk_[3] != p.head_dim_qk || dv_[1] != p.seqlen_k || dv_[2] != p.heads_kv) {
        fprintf(stderr, "flashcheck verify: shapes disagree: q %lldx%lldx%lldx%lld, k %lldx%lldx%lldx%lld, v %lldx%lldx%lldx%lld "
                "(as [B,S,H,D]); k needs q's batch and head dim, v needs k's batch, seq and heads%s\n",
                (long long)dq_[0], (long long)dq_[1], (long long)dq_[2], (long long)dq_[3], (long long)dk_[0], (long long)dk_[1],
                (long long)dk_[2], (long long)dk_[3], (long long)dv_[0], (long long)dv_[1], (long long)dv_[2], (long long)dv_[3],
                bhsd ? "" : " (arrays in [B,H,S,D] order? pass --layout bhsd)");
        return CLI_USAGE;
    }
    if (p.heads_kv <= 0 || p.heads_q % p.heads_kv) {
        fprintf(stderr, "flashcheck verify: q has %lld heads and k %lld: heads_q must be a multiple of heads_kv (GQA)%s\n",
                (long long)p.heads_q, (long long)p.heads_kv, bhsd ? "" : " (arrays in [B,H,S,D] order? pass --layout bhsd)");
        return CLI_USAGE;
    }
    if (va.a[VQ].kind == NPY_F32) {
        fprintf(stderr, "flashcheck verify: %s is float32; the kernels checked here take fp16 or bf16 inputs: save the "
                "tensors the kernel read (bf16 as x.view(torch.uint16).numpy())\n", va.path[VQ]);
        return CLI_USAGE;
    }
    p.dtype = va.a[VQ].kind == NPY_BF16 ? FA_BF16 : FA_F16;
    struct { int id; int64_t want[4]; } chk[] = {
        { VO, { p.batch, p.seqlen_q, p.heads_q, p.head_dim_v } },  { VDO, { p.batch, p.seqlen_q, p.heads_q, p.head_dim_v } },
        { VDQ, { p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk } }, { VDK, { p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk } },
        { VDV, { p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v } },
    };
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++) {
        int id = chk[i].id;
        if (!va.have[id]) continue;
        if (data_dims(&va.a[id], bhsd, va.path[id], d, msg, sizeof msg)) { fprintf(stderr, "flashcheck verify: %s\n", msg); return CLI_USAGE; }
        if (memcmp(d, chk[i].want, sizeof d) != 0) {
            fprintf(stderr, "flashcheck verify: %s has shape [B,S,H,D] = %lldx%lldx%lldx%lld; expected %lldx%lldx%lldx%lld from q, k, v\n",
                    va.path[id], (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3], (long long)chk[i].want[0],
                    (long long)chk[i].want[1], (long long)chk[i].want[2], (long long)chk[i].want[3]);
            return CLI_USAGE;
        }
    }
    for (int id = VQ; id <= VDV; id++) {
        if (!va.have[id] || id == VLSE) continue;
        if (to_bits(&va, id, p.dtype, msg, sizeof msg)) { fprintf(stderr, "flashcheck verify: %s\n", msg); return CLI_USAGE; }
    }
    if (va.have[VLSE]) {
        npy_array *l = &va.a[VLSE];
        if (l->kind != NPY_F32 || l->ndim != 3 || l->shape[0] != p.batch || l->shape[1] != p.heads_q || l->shape[2] != p.seqlen_q) {
            fprintf(stderr, "flashcheck verify: %s must be float32 [B, Hq, Sq] = [%lld, %lld, %lld] (natural log); it is %s with %d dims\n",
                    va.path[VLSE], (long long)p.batch, (long long)p.heads_q, (long long)p.seqlen_q, npy_kind_name(l->kind), l->ndim);
            return CLI_USAGE;
        }
    }
    fa_mask mask;
    memset(&mask, 0, sizeof mask);
    if (va.have[VMASK]) {
        npy_array *m = &va.a[VMASK];
        if (m->kind != NPY_F32 || m->ndim != 4 || (m->shape[0] != 1 && m->shape[0] != p.batch) ||
            (m->shape[1] != 1 && m->shape[1] != p.heads_q) || m->shape[2] != p.seqlen_q || m->shape[3] != p.seqlen_k) {
            fprintf(stderr, "flashcheck verify: %s must be float32 [B|1, Hq|1, Sq, Sk] = [%lld|1, %lld|1, %lld, %lld]\n",
                    va.path[VMASK], (long long)p.batch, (long long)p.heads_q, (long long)p.seqlen_q, (long long)p.seqlen_k);
            return CLI_USAGE;
        }
        mask.ptr = m->data;
        mask.stride[3] = 1;
        mask.stride[2] = m->shape[3];
        mask.stride[1] = m->shape[1] == 1 ? 0 : m->shape[2] * m->shape[3];
        mask.stride[0] = m->shape[0] == 1 ? 0 : m->shape[1] * m->shape[2] * m->shape[3];
    }

    /* views */
    fa_tensor t[VN];
    memset(t, 0, sizeof t);
    for (int id = VQ; id <= VDV; id++) {
        if (!va.have[id] || id == VLSE) continue;
        t[id].ptr = va.bits[id];
        data_strides(&va.a[id], bhsd, t[id].stride);
    }
    fa_precision prof;
    fa_precision_preset(profile_name, &prof, NULL);
    orc_options opt;
    orc_options_init(&opt);
    fa_error err;
    memset(&err, 0, sizeof err);

    printf("verify: B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld Dqk=%lld Dv=%lld %s, causal %s, window %lld %lld, scale %g, profile %s\n",
           (long long)p.batch, (long long)p.seqlen_q, (long long)p.seqlen_k, (long long)p.heads_q, (long long)p.heads_kv,
           (long long)p.head_dim_qk, (long long)p.head_dim_v, fa_dtype_name(p.dtype), causal_w[p.causal],
           (long long)p.window_left, (long long)p.window_right, (double)fa_effective_scale(&p),
           profile_name);

    fa_fwd_args fa;
    memset(&fa, 0, sizeof fa);
    fa.p = p; fa.q = t[VQ]; fa.k = t[VK]; fa.v = t[VV]; fa.mask = mask;
    /* the oracle ignores o/lse of the args, but validates them: give it the user's o and a scratch lse */
    float *scratch_lse = calloc((size_t)(p.batch * p.heads_q * p.seqlen_q) + 1, sizeof(float));
    fa.o = t[VO];
    fa.lse.ptr = scratch_lse;
    fa.lse.stride[0] = p.heads_q * p.seqlen_q; fa.lse.stride[1] = p.seqlen_q; fa.lse.stride[2] = 1;
    orc_fwd_result fr;
    if (orc_fwd(&fa, &prof, &opt, &fr, &err) != FA_OK) {
        fprintf(stderr, "flashcheck verify: the problem is invalid: %s: %s\n", err.arg, err.msg);
        return CLI_USAGE;
    }
    orc_stats st[VN];
    int checked[VN] = { 0 };
    fa_lse user_lse;
    memset(&user_lse, 0, sizeof user_lse);
    if (va.have[VLSE]) {
        user_lse.ptr = va.a[VLSE].data;
        user_lse.stride[0] = p.heads_q * p.seqlen_q; user_lse.stride[1] = p.seqlen_q; user_lse.stride[2] = 1;
    }
    if (orc_compare_fwd(&fr, &t[VO], va.have[VLSE] ? &user_lse : NULL, &st[VO], va.have[VLSE] ? &st[VLSE] : NULL, &err) != FA_OK) {
        fprintf(stderr, "flashcheck verify: comparing the forward failed: %s\n", err.msg);
        return CLI_INTERNAL;
    }
    checked[VO] = 1;
    checked[VLSE] = va.have[VLSE];

    double o_in = 0, lse_in = 0;
    if (want_bwd) {
        /* LSE for the backward: the user's, else the oracle's (rounded to fp32) */
        float *lse_buf = NULL;
        fa_lse lse_in_view = user_lse;
        if (!va.have[VLSE]) {
            lse_buf = calloc((size_t)(p.batch * p.heads_q * p.seqlen_q) + 1, sizeof(float));
            for (int64_t i = 0; i < fr.lse.n; i++) {
                orc_index ix = fr.lse.index[i];
                lse_buf[(ix.b * p.heads_q + ix.h) * p.seqlen_q + ix.s] = (float)fr.lse.ref[i];
            }
            lse_in_view.ptr = lse_buf;
            lse_in_view.stride[0] = p.heads_q * p.seqlen_q; lse_in_view.stride[1] = p.seqlen_q; lse_in_view.stride[2] = 1;
        }
        /* outputs the user did not give: scratch buffers (not compared) */
        void *scratch[3] = { NULL, NULL, NULL };
        int gids[3] = { VDQ, VDK, VDV };
        fa_tensor g[3];
        for (int k = 0; k < 3; k++) {
            if (va.have[gids[k]]) { g[k] = t[gids[k]]; continue; }
            const fa_tensor *like = k == 0 ? &t[VQ] : k == 1 ? &t[VK] : &t[VV];
            int64_t n = k == 0 ? p.batch * p.seqlen_q * p.heads_q * p.head_dim_qk
                      : p.batch * p.seqlen_k * p.heads_kv * (k == 1 ? p.head_dim_qk : p.head_dim_v);
            scratch[k] = calloc((size_t)n + 1, 2);
            g[k].ptr = scratch[k];
            memcpy(g[k].stride, like->stride, sizeof g[k].stride);
        }
        fa_bwd_args ba;
        memset(&ba, 0, sizeof ba);
        ba.p = p; ba.q = t[VQ]; ba.k = t[VK]; ba.v = t[VV]; ba.o = t[VO]; ba.dout = t[VDO]; ba.lse = lse_in_view;
        ba.mask = mask; ba.dq = g[0]; ba.dk = g[1]; ba.dv = g[2];
        orc_bwd_result br;
        if (orc_bwd(&ba, &prof, &opt, &br, &err) != FA_OK) {
            fprintf(stderr, "flashcheck verify: the backward problem is invalid: %s: %s\n", err.arg, err.msg);
            return CLI_USAGE;
        }
        if (orc_compare_bwd(&br, va.have[VDQ] ? &t[VDQ] : NULL, va.have[VDK] ? &t[VDK] : NULL, va.have[VDV] ? &t[VDV] : NULL,
                            va.have[VDQ] ? &st[VDQ] : NULL, va.have[VDK] ? &st[VDK] : NULL, va.have[VDV] ? &st[VDV] : NULL,
                            &err) != FA_OK) {
            fprintf(stderr, "flashcheck verify: comparing the backward failed: %s\n", err.msg);
            return CLI_INTERNAL;
        }
        checked[VDQ] = va.have[VDQ]; checked[VDK] = va.have[VDK]; checked[VDV] = va.have[VDV];
        o_in = br.o_input_ratio;
        lse_in = br.lse_input_ratio;
        orc_bwd_free(&br);
        free(lse_buf);
        for (int k = 0; k < 3; k++) free(scratch[k]);
    }

    /* report */
    int fail = 0;
    printf("  %-4s %12s %10s %10s %12s %12s %10s\n", "out", "checked", "failed", "nonfinite", "worst ratio", "max |err|", "FA-style");
    for (int id = 0; id < VN; id++) {
        if (!checked[id]) continue;
        orc_stats *s = &st[id];
        int bad = s->failed > 0;
        fail |= bad;
        printf("  %-4s %12lld %10lld %10lld %12.4g %12.4g %10s %s\n", vnames[id], (long long)s->checked, (long long)s->failed,
               (long long)(s->nan_unexpected + s->nan_missing), s->worst_ratio, s->max_err,
               s->has_baseline ? (s->baseline_pass ? "pass" : "fail") : "-", bad ? "FAIL" : "ok");
        if (bad && s->first_fail_at[0] >= 0)
            printf("       first failure at (b=%lld, s=%lld, h=%lld, d=%lld); worst: got %.9g, ref %.9g, bound %.3g\n",
                   (long long)s->first_fail_at[0], (long long)s->first_fail_at[1], (long long)s->first_fail_at[2],
                   (long long)s->first_fail_at[3], s->worst_kernel, s->worst_ref, s->worst_bound);
    }
    if (want_bwd && (o_in > 1 || lse_in > 1))
        printf("  note: the o%s given to the backward is not what a correct forward produces (error/bound o %.3g, lse %.3g);\n"
               "        the gradient check judges the backward for these inputs\n", va.have[VLSE] ? "/lse" : "", o_in, lse_in);
    printf("%s\n", fail ? "FAIL: some elements are outside their error bound (see above)" : "PASS: every element is within its error bound");

    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (!f) { fprintf(stderr, "flashcheck verify: cannot write %s\n", json_path); return CLI_INTERNAL; }
        fprintf(f, "{\"result\": \"%s\", \"tensors\": {", fail ? "FAIL" : "PASS");
        int first = 1;
        for (int id = 0; id < VN; id++) {
            if (!checked[id]) continue;
            const orc_stats *s = &st[id];
            fprintf(f, "%s\"%s\": {\"checked\": %lld, \"failed\": %lld, \"worst_ratio\": %.6g, \"max_err\": %.6g, "
                    "\"first_fail\": [%lld, %lld, %lld, %lld], \"worst_got\": %.9g, \"worst_ref\": %.9g, \"worst_bound\": %.6g}",
                    first ? "" : ", ", vnames[id], (long long)s->checked, (long long)s->failed, s->worst_ratio, s->max_err,
                    (long long)s->first_fail_at[0], (long long)s->first_fail_at[1], (long long)s->first_fail_at[2],
                    (long long)s->first_fail_at[3], s->worst_kernel, s->worst_ref, s->worst_bound);
            first = 0;
        }
        fprintf(f, "}}\n");
        fclose(f);
    }
    orc_fwd_free(&fr);
    free(scratch_lse);
    for (int i = 0; i < VN; i++) {
        if (va.bits[i] && va.bits[i] != va.a[i].bits) free(va.bits[i]);
        npy_free(&va.a[i]);
    }
    return fail ? CLI_FAIL : CLI_OK;
}
