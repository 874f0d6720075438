/* cmd_verify.c: `flashcheck verify`: check attention outputs produced by any
 * framework (PyTorch, JAX, Triton, ...) and saved as .npy files against the
 * oracle's per-element bounds, without writing C. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "fuzz/fz_store.h"
#include "cli/npy.h"
#include "oracle/oracle.h"
#include "report/rp_progress.h"

static const char *verify_help =
    "usage: flashcheck verify [--dir DIR] [--q F --k F --v F] [--o F] [--lse F] [--do F --dq F --dk F --dv F]\n"
    "                         [--mask F] [--layout bshd|bhsd] [--causal none|top_left|bottom_right]\n"
    "                         [--window LEFT RIGHT] [--window-align top_left|bottom_right] [--scale S]\n"
    "                         [--cu-seqlens-q F] [--cu-seqlens-k F] [--seqused-k F] [--block-table F]\n"
    "                         [--sinks F] [--dsinks F] [--softcap X]\n"
    "                         [--profile NAME] [--json FILE] [--quiet]\n"
    "\n"
    "Checks outputs of any attention implementation, saved with numpy.save, against the MPFR oracle\n"
    "with a per-element error bound. --dir DIR reads DIR/q.npy, k.npy, v.npy, o.npy, lse.npy,\n"
    "do.npy, dq.npy, dk.npy, dv.npy, mask.npy, cu_seqlens_q.npy, cu_seqlens_k.npy, seqused_k.npy,\n"
    "block_table.npy, sinks.npy, dsinks.npy (those present); single options override.\n"
    "Forward needs q k v o (lse optional); backward needs q k v o do and any of dq dk dv (lse\n"
    "optional: without it the backward is judged against any LSE a correct forward may give; the\n"
    "backend's own LSE makes the gradient bounds tighter).\n"
    "\n"
    "arrays: .npy v1/v2/v3, C or Fortran order; q k v o do dq dk dv as float16 ('<f2') or bfloat16\n"
    "(saved as uint16 bits '<u2', e.g. t.view(torch.uint16).numpy(), or '<V2'), all in one dtype;\n"
    "outputs may also be float32 if every value is exactly an fp16/bf16 value. lse is float32\n"
    "[B, Hq, Sq] (natural log). mask is float32 [B|1, Hq|1, Sq, Sk] (additive, -inf hides a key).\n"
    "\n"
    "contract v3 (kernels/flash_api.h: fa_varlen, fa_paged, softcap, sinks), each optional:\n"
    "  cu_seqlens_q  int32 [B+1]: q o do dq are packed rows [total_q, Hq, D] (sequence b: rows\n"
    "                cu[b] .. cu[b+1]-1, total_q = cu[B]); lse is float32 [Hq, total_q]\n"
    "  cu_seqlens_k  int32 [B+1]: k v dk dv are packed rows [total_k, Hkv, D]\n"
    "  seqused_k     int32 [B]: sequence b uses only its first seqused_k[b] keys\n"
    "  block_table   int32 [B, max_pages]: k v dk dv are page pools [num_pages, page_size, Hkv, D]\n"
    "                (always in that order), key j of sequence b in page table[b][j / page_size],\n"
    "                slot j % page_size; without seqused_k every sequence uses max_pages * page_size\n"
    "                keys. Exclusive with cu_seqlens_k\n"
    "  sinks         float32 [Hq]: a per-head logit in every row's softmax denominator\n"
    "  dsinks        float32 [Hq]: the sink gradient (backward output; needs sinks and do)\n"
    "  --softcap X   logit softcapping s = X tanh(scale q.k / X) (0: off)\n"
    "  Packed and pooled arrays are in the order above whatever --layout says. The arrays are\n"
    "  validated by the contract's own validation (fa_validate_fwd): a decreasing cu_seqlens, a\n"
    "  seqused_k above a sequence's keys, a table entry outside [0, num_pages), the mask with\n"
    "  cu_seqlens ... are rejected naming the file; nothing is written then.\n"
    "\n"
    "options:\n"
    "  --layout L       bshd: [batch, seq, heads, dim] (FlashAttention; default)\n"
    "                   bhsd: [batch, heads, seq, dim] (PyTorch SDPA, JAX dot_product_attention)\n"
    "  --causal M       none (default) | top_left (PyTorch is_causal) | bottom_right (FlashAttention-2)\n"
    "  --window L R     sliding window: keys diag-L .. diag+R (negative = unbounded)\n"
    "  --window-align A diagonal of the window without causal: top_left (default) | bottom_right\n"
    "  --scale S        softmax scale (default 1/sqrt(head_dim))\n"
    "  --profile P      precision the implementation promises, which sets the bounds (named presets,\n"
    "                   kernels/api/fa_profile.c gives each one's evidence; oracle/BOUNDS.md section 10):\n"
    "                     tensorcore (default): a flash kernel on tensor cores (multi-term truncating\n"
    "                       accumulation, ex2.approx.ftz, P and dS rounded to the input dtype, scale\n"
    "                       applied after dS.K, GQA accumulated in fp32, LSE -inf for empty rows)\n"
    "                     fp32: everything in fp32 round-to-nearest (u = 2^-24), P and dS not rounded\n"
    "                     torch-flash: PyTorch SDPA flash (FlashAttention-2: GQA per-head dK/dV rounded\n"
    "                       then summed, LSE +inf for empty rows)\n"
    "                     torch-efficient: PyTorch SDPA memory-efficient (scale folded into dS before\n"
    "                       its rounding, GQA per head, LSE 0 for empty rows)\n"
    "                     torch-cudnn: PyTorch SDPA cuDNN (closed source: the dominating choices)\n"
    "                     torch-math: PyTorch SDPA math (unfused, upcast to fp32 by default)\n"
    "                     torch-math-lowp: the math graph with allow_fp16_bf16_reduction_math_sdp(True)\n"
    "                     torch-flex: torch.compile(flex_attention) (tensorcore's arithmetic); the torch-*\n"
    "                       presets declare masked non-finite propagation (NaN through zero weights)\n"
    "  --json FILE      also write the result as JSON (strict: a non-finite number is written as the\n"
    "                   string \"inf\", \"-inf\" or \"nan\"). FILE is removed when the run starts and\n"
    "                   written atomically at the end, so it always describes the latest run or does not\n"
    "                   exist (a run that stops on an error leaves no FILE; a write error is exit 4)\n"
    "  --quiet          no progress line (on a terminal it shows the oracle and compare steps done\n"
    "                   and the elapsed time; there is none when stderr is not a terminal)\n"

    "\n"
    "exit: 0 PASS (every element within its bound), 1 FAIL, 2 bad option or array (the message says\n"
    "      which file and what to fix), 4 harness error (cannot write --json FILE, out of memory),\n"
    "      5 OVERFLOW-SENSITIVE (no element outside its bound, but NaN/Inf where the profile's own\n"
    "      intermediates may overflow: oracle/BOUNDS.md 11)\n";

/* ------------------------------------------------------------------------- */
/* arrays                                                                    */

enum { VQ, VK, VV, VO, VLSE, VDO, VDQ, VDK, VDV, VMASK, VCUQ, VCUK, VSEQUSED, VTABLE, VSINKS, VDSINKS, VN };
static const char *vnames[VN] = { "q", "k", "v", "o", "lse", "do", "dq", "dk", "dv", "mask",
                                  "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table", "sinks", "dsinks" };

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

/* How a data tensor is stored (contract v3): dense [B, S, H, D] ([B, H, S, D] with --layout bhsd),
   packed rows [total, H, D] (cu_seqlens given), or a page pool [num_pages, page_size, H, D]. */
typedef enum { FORM_DENSE, FORM_PACKED, FORM_POOL } data_form;

/* dims of a data tensor in the contract's order [B, S, H, D]; packed: [1, total, H, D], pool:
   [num_pages, page_size, H, D] (the views fa_validate and the oracle index) */
static int data_dims(const npy_array *a, data_form f, int bhsd, const char *name, int64_t out[4], char *msg,
                     size_t msglen)
{
    if (f == FORM_PACKED) {
        if (a->ndim != 3) {
            snprintf(msg, msglen, "%s has %d dimensions; with cu_seqlens it holds packed rows [total, heads, dim] "
                     "(3 dimensions: sequence b is rows cu_seqlens[b] .. cu_seqlens[b+1]-1)", name, a->ndim);
            return -1;
        }
        out[0] = 1; out[1] = a->shape[0]; out[2] = a->shape[1]; out[3] = a->shape[2];
        return 0;
    }
    if (f == FORM_POOL) {
        if (a->ndim != 4) {
            snprintf(msg, msglen, "%s has %d dimensions; with block_table it is the page pool [num_pages, page_size, "
                     "heads, dim] (4 dimensions)", name, a->ndim);
            return -1;
        }
        for (int k = 0; k < 4; k++) out[k] = a->shape[k];
        return 0;
    }
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

/* C-order strides of the array, mapped to the contract's [B, S, H, D] (packed: st[0] unused, 0) */
static void data_strides(const npy_array *a, data_form f, int bhsd, int64_t st[4])
{
    if (f == FORM_PACKED) {
        st[0] = 0; st[1] = a->shape[1] * a->shape[2]; st[2] = a->shape[2]; st[3] = 1;
        return;
    }
    if (f == FORM_POOL) bhsd = 0;
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

/* the shape a tensor of contract dims d ([B, S, H, D] as data_dims gives) has in its file */
static void form_text(data_form f, int bhsd, const int64_t d[4], char *buf, size_t len)
{
    if (f == FORM_PACKED) snprintf(buf, len, "[%lld, %lld, %lld]", (long long)d[1], (long long)d[2], (long long)d[3]);
    else if (f == FORM_DENSE && bhsd)
        snprintf(buf, len, "[%lld, %lld, %lld, %lld]", (long long)d[0], (long long)d[2], (long long)d[1], (long long)d[3]);
    else snprintf(buf, len, "[%lld, %lld, %lld, %lld]", (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3]);
}

/* "[2, 4, 33]" */
static void shape_text(const npy_array *a, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int k = 0; k < a->ndim && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", k ? ", " : "", (long long)a->shape[k]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* The first element of a result block whose non-finite value fails: the kernel has NaN/Inf
 * where the reference is finite (an Inf only when |ref| + bound stays below the dtype's
 * overflow threshold, as orc_compare judges it), or the reference is NaN/Inf and the kernel
 * differs. get(user, v, k) reads the kernel's element k of vector v. Returns 1 and fills
 * at/got/ref when there is one. */
typedef double (*elem_get)(const void *user, const orc_block *blk, int64_t v, int64_t k);
static int first_nonfinite_failure(const orc_block *blk, elem_get get, const void *user, double thr, int64_t at[4],
                                   double *got, double *ref)
{
    for (int64_t v = 0; v < blk->n; v++)
        for (int64_t k = 0; k < blk->dim; k++) {
            int64_t e = v * blk->dim + k;
            int inf_in = (blk->flags[e] & ORC_F_INF_INPUT) && isinf(blk->ref[e]);
            if ((blk->flags[e] & ORC_F_UNCHECKABLE) && !inf_in) continue;
            double kv = get(user, blk, v, k), r = blk->ref[e];
            int bad;
            if (inf_in) bad = !isnan(kv) && kv != r;   /* orc_compare: the same Inf or NaN */
            else if (isnan(r) || isinf(r)) bad = isnan(r) ? !isnan(kv) : kv != r;
            else if (isnan(kv)) bad = 1;
            else if (isinf(kv)) bad = (kv > 0 ? r : -r) + blk->bound[e] < thr;
            else bad = 0;
            if (!bad) continue;
            at[0] = blk->index[v].b; at[1] = blk->index[v].s; at[2] = blk->index[v].h; at[3] = k;
            *got = kv;
            *ref = r;
            return 1;
        }
    return 0;
}

/* cu: the packed tensor's cu_seqlens (the oracle's index b is then the sequence, s the position in
   it), else NULL (dense, or a pool: b = page, s = slot) */
typedef struct { const fa_tensor *t; fa_dtype dt; const int32_t *cu; } data_view;
static double data_get(const void *user, const orc_block *blk, int64_t v, int64_t k)
{
    const data_view *dv = user;
    const orc_index *ix = &blk->index[v];
    const int64_t *st = dv->t->stride;
    int64_t off = dv->cu ? ((int64_t)dv->cu[ix->b] + ix->s) * st[1] + ix->h * st[2] + k * st[3]
                         : ix->b * st[0] + ix->s * st[1] + ix->h * st[2] + k * st[3];
    return orc_decode(((const uint16_t *)dv->t->ptr)[off], dv->dt);
}
typedef struct { const fa_lse *l; const int32_t *cu; } lse_view;
static double lse_get(const void *user, const orc_block *blk, int64_t v, int64_t k)
{
    const lse_view *lv = user;
    const fa_lse *l = lv->l;
    const orc_index *ix = &blk->index[v];
    (void)k;
    int64_t row = lv->cu ? (int64_t)lv->cu[ix->b] + ix->s : ix->s, b = lv->cu ? 0 : ix->b;
    return ((const float *)l->ptr)[b * l->stride[0] + ix->h * l->stride[1] + row * l->stride[2]];
}

/* The file (or option) behind a contract argument fa_validate_* named: "varlen.cu_seqlens_q" ->
   cu_seqlens_q's path, "paged.*" / "page_size" -> the block table's, "q.stride[2]" -> q's, ... */
static const char *arg_source(const char *arg, const char *const path[VN])
{
    static const struct { const char *prefix; int id; } m[] = {
        { "varlen.cu_seqlens_q", VCUQ }, { "varlen.cu_seqlens_k", VCUK }, { "varlen.seqused_k", VSEQUSED },
        { "paged.", VTABLE }, { "page_size", VTABLE }, { "dsinks", VDSINKS }, { "sinks", VSINKS },
        { "has_sinks", VSINKS }, { "mask", VMASK }, { "lse", VLSE }, { "dout", VDO }, { "dq", VDQ }, { "dk", VDK },
        { "dv", VDV }, { "q", VQ }, { "k", VK }, { "v", VV }, { "o", VO },
    };
    if (strcmp(arg, "softcap") == 0) return "--softcap";
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        size_t n = strlen(m[i].prefix);
        if (strncmp(arg, m[i].prefix, n) == 0 && (m[i].prefix[n - 1] == '.' || arg[n] == 0 || arg[n] == '.' || arg[n] == '['))
            return path[m[i].id] ? path[m[i].id] : NULL;
    }
    return NULL;
}

/* JSON numbers must be finite: a non-finite value is written as the string "inf", "-inf"
 * or "nan" (documented in the help) */
/* mean of a rounding-bias sum (orc_stats.bias_*), NAN without elements; rounded to nearest */
static double bias_mean(double sum, int64_t n)
{
    return n > 0 ? sum / (double)n : NAN;
}

static void json_number(cJSON *o, const char *key, double x)
{
    if (isfinite(x)) cJSON_AddNumberToObject(o, key, x);
    else cJSON_AddStringToObject(o, key, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
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
    int bhsd = 0, quiet = 0;
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
            char opt[32];
            snprintf(opt, sizeof opt, "--%s", vnames[t]);
            for (char *c = opt + 2; *c; c++) if (*c == '_') *c = '-';   /* --cu-seqlens-q */
            if ((r = cli_opt(argc, argv, &i, opt, &v))) {
                if (r < 0) return cli_usage_error("verify", "%s needs a .npy file", opt);
                va.path[t] = cli_path(v);
                matched = 1;
            }
        }
        if (matched) continue;
        if ((r = cli_opt(argc, argv, &i, "--dir", &v))) { if (r < 0) return cli_usage_error("verify", "--dir needs a directory"); dir = cli_path(v); }
        else if ((r = cli_opt(argc, argv, &i, "--json", &v))) { if (r < 0) return cli_usage_error("verify", "--json needs a file name"); json_path = cli_path(v); }
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
            /* 0 means the default scale in the contract: a value that rounds to 0 (or to a
               subnormal, or overflows) in fp32 must not silently become it */
            if (!isnormal((float)s))
                return cli_usage_error("verify", "--scale %s %s in fp32 (the contract's scale is an fp32; 0 would select "
                                       "the default 1/sqrt(head_dim)): give a normal fp32 value", v,
                                       (float)s == 0 ? "rounds to 0" : isinf((float)s) ? "overflows" : "is subnormal");
            p.softmax_scale = (float)s;
        } else if ((r = cli_opt(argc, argv, &i, "--softcap", &v))) {
            double c;
            /* the contract's rules on the value (>= 0, finite) are fa_validate_fwd's, below */
            if (r < 0 || cli_parse_double(v, &c)) return cli_usage_error("verify", "--softcap needs a number (0: no capping)");
            p.softcap = (float)c;
        } else if ((r = cli_opt(argc, argv, &i, "--profile", &v))) {
            fa_precision probe;
            fa_error perr;
            if (r < 0) return cli_usage_error("verify", "--profile needs a preset name");
            if (fa_precision_preset(v, &probe, &perr) != FA_OK) return cli_usage_error("verify", perr.msg);
            profile_name = v;
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else {
            return cli_usage_error("verify", "unknown option or argument '%s'", argv[i]);
        }
    }
    /* --json FILE always describes THIS run: an older file is removed now, before anything can
       fail, and the result is written atomically at the end (temp file, fsync, rename) */
    if (json_path && unlink(json_path) != 0 && errno != ENOENT) {
        fprintf(stderr, "flashcheck verify: --json %s: cannot remove the older file: %s\n", json_path, strerror(errno));
        return CLI_INTERNAL;
    }
    if (dir) {
        struct stat dst;
        if (stat(dir, &dst) != 0)
            return cli_usage_error("verify", "--dir %s: %s", dir, errno == ENOENT ? "no such directory" : strerror(errno));
        if (!S_ISDIR(dst.st_mode)) return cli_usage_error("verify", "--dir %s is not a directory", dir);
        for (int t = 0; t < VN; t++) {
            if (va.path[t]) continue;
            snprintf(dirpaths[t], sizeof dirpaths[t], "%s/%s.npy", dir, vnames[t]);
            if (access(dirpaths[t], F_OK) == 0) va.path[t] = dirpaths[t];
        }
    }
    if (!va.path[VQ] || !va.path[VK] || !va.path[VV])
        return cli_usage_error("verify", "q, k and v are required (--q/--k/--v, or --dir with q.npy k.npy v.npy)%s%s%s",
                               dir ? "; " : "", dir ? dir : "", dir ? " has no q.npy, k.npy or v.npy" : "");
    int want_bwd = va.path[VDQ] || va.path[VDK] || va.path[VDV] || va.path[VDSINKS];
    if (!va.path[VO]) return cli_usage_error("verify", "o is required (the forward output; backward also needs it as input)");
    if (want_bwd && !va.path[VDO]) return cli_usage_error("verify", "dq/dk/dv/dsinks given but no do (the output gradient)");
    if (va.path[VDSINKS] && !va.path[VSINKS]) return cli_usage_error("verify", "dsinks given but no sinks (the sink logits)");

    char msg[1024];
    if (load_arrays(&va, msg, sizeof msg) != 0) { fprintf(stderr, "flashcheck verify: %s\n", msg); return CLI_USAGE; }

    /* contract-v3 index arrays: int32 of the right rank (their values are fa_validate_fwd's, below) */
    static const int iranks[4] = { 1, 1, 1, 2 };
    static const char *ishape[4] = { "[B+1]", "[B+1]", "[B]", "[B, max_pages]" };
    for (int id = VCUQ; id <= VTABLE; id++) {
        if (!va.have[id]) continue;
        npy_array *a = &va.a[id];
        if (a->kind != NPY_I32 || a->ndim != iranks[id - VCUQ]) {
            char got[128];
            shape_text(a, got, sizeof got);
            fprintf(stderr, "flashcheck verify: %s must be int32 %s (%s); it is %s %s%s\n", va.path[id], ishape[id - VCUQ],
                    vnames[id], npy_kind_name(a->kind), got, a->kind != NPY_I32 ? ": save it with x.astype(numpy.int32) or "
                    "t.to(torch.int32)" : "");
            return CLI_USAGE;
        }
    }
    const int packed_q = va.have[VCUQ], packed_k = va.have[VCUK], paged = va.have[VTABLE];
    const int32_t *cu_q = packed_q ? va.a[VCUQ].ints : NULL, *cu_k = packed_k ? va.a[VCUK].ints : NULL;
    const int32_t *used = va.have[VSEQUSED] ? va.a[VSEQUSED].ints : NULL;
    /* q, o, do, dq are packed with cu_seqlens_q; k, v, dk, dv pooled with a block table, else
       packed with cu_seqlens_k (both given: the pool, and fa_validate rejects the pair) */
    const data_form fq = packed_q ? FORM_PACKED : FORM_DENSE, fk = paged ? FORM_POOL : packed_k ? FORM_PACKED : FORM_DENSE;
    const char *layout_hint = bhsd ? "" : " (arrays in [B,H,S,D] order? pass --layout bhsd)";
    if (fq != FORM_DENSE && fk != FORM_DENSE) layout_hint = "";

    /* shapes */
    int64_t dq_[4], dk_[4], dv_[4], d[4];
    if (data_dims(&va.a[VQ], fq, bhsd, va.path[VQ], dq_, msg, sizeof msg) ||
        data_dims(&va.a[VK], fk, bhsd, va.path[VK], dk_, msg, sizeof msg) ||
        data_dims(&va.a[VV], fk, bhsd, va.path[VV], dv_, msg, sizeof msg)) {
        fprintf(stderr, "flashcheck verify: %s\n", msg);
        return CLI_USAGE;
    }
    if (packed_q && va.a[VCUQ].count < 1) {
        fprintf(stderr, "flashcheck verify: %s has no entries; it must hold B+1 offsets (0 first)\n", va.path[VCUQ]);
        return CLI_USAGE;
    }
    p.batch = packed_q ? va.a[VCUQ].count - 1 : dq_[0];
    p.heads_q = dq_[2]; p.head_dim_qk = dq_[3];
    p.heads_kv = dk_[2]; p.head_dim_v = dv_[3];
    if ((fk == FORM_DENSE && dk_[0] != p.batch) || dv_[0] != dk_[0] || dk_[3] != p.head_dim_qk || dv_[1] != dk_[1] ||
        dv_[2] != dk_[2]) {
        char tq[96], tk[96], tv[96];
        shape_text(&va.a[VQ], tq, sizeof tq); shape_text(&va.a[VK], tk, sizeof tk); shape_text(&va.a[VV], tv, sizeof tv);
        fprintf(stderr, "flashcheck verify: shapes disagree: q %s, k %s, v %s (q %s, k and v %s); k needs q's %shead dim, "
                "v needs k's %s and heads%s\n", tq, tk, tv,
                fq == FORM_PACKED ? "packed [total_q, Hq, Dqk]" : bhsd ? "[B,H,S,D]" : "[B,S,H,D]",
                fk == FORM_POOL ? "page pools [num_pages, page_size, Hkv, D]" : fk == FORM_PACKED ? "packed [total_k, Hkv, D]"
                : bhsd ? "[B,H,S,D]" : "[B,S,H,D]", fk == FORM_DENSE ? "batch and " : "",
                fk == FORM_POOL ? "pages, page size" : fk == FORM_PACKED ? "rows" : "batch, seq", layout_hint);
        return CLI_USAGE;
    }
    if (p.heads_kv <= 0 || p.heads_q % p.heads_kv) {
        fprintf(stderr, "flashcheck verify: q has %lld heads and k %lld: heads_q must be a multiple of heads_kv (GQA)%s\n",
                (long long)p.heads_q, (long long)p.heads_kv, layout_hint);
        return CLI_USAGE;
    }
    /* lengths of the per-sequence arrays: B from cu_seqlens_q, else from q's batch */
    struct { int id; int64_t want; } len[] = { { VCUK, p.batch + 1 }, { VSEQUSED, p.batch }, { VTABLE, p.batch } };
    for (size_t i = 0; i < sizeof len / sizeof len[0]; i++) {
        int id = len[i].id;
        if (!va.have[id] || va.a[id].shape[0] == len[i].want) continue;
        fprintf(stderr, "flashcheck verify: %s has %lld %s; expected %lld (B = %lld from %s)\n", va.path[id],
                (long long)va.a[id].shape[0], id == VTABLE ? "rows" : "entries", (long long)len[i].want, (long long)p.batch,
                packed_q ? va.path[VCUQ] : va.path[VQ]);
        return CLI_USAGE;
    }
    /* maxima over sequences (p.seqlen_q/k, the contract's upper bounds); a negative span or
       length is left to fa_validate_fwd, which names it */
    int64_t mq = 0, mk = 0;
    for (int64_t b = 0; packed_q && b < p.batch; b++) if ((int64_t)cu_q[b + 1] - cu_q[b] > mq) mq = (int64_t)cu_q[b + 1] - cu_q[b];
    for (int64_t b = 0; packed_k && b < p.batch; b++) if ((int64_t)cu_k[b + 1] - cu_k[b] > mk) mk = (int64_t)cu_k[b + 1] - cu_k[b];
    p.seqlen_q = packed_q ? mq : dq_[1];
    if (paged) {
        p.page_size = dk_[1];
        int64_t cap;
        if (__builtin_mul_overflow(va.a[VTABLE].shape[1], dk_[1], &cap)) cap = INT64_MAX;
        mk = 0;
        for (int64_t b = 0; used && b < p.batch; b++) if (used[b] > mk) mk = used[b];
        p.seqlen_k = used ? mk : cap;   /* without seqused_k every sequence uses its whole table row */
    } else {
        p.seqlen_k = packed_k ? mk : dk_[1];
    }
    if (va.a[VQ].kind != NPY_F16 && va.a[VQ].kind != NPY_BF16) {
        fprintf(stderr, "flashcheck verify: %s is %s; the kernels checked here take fp16 or bf16 inputs: save the "
                "tensors the kernel read (bf16 as x.view(torch.uint16).numpy())\n", va.path[VQ], npy_kind_name(va.a[VQ].kind));
        return CLI_USAGE;
    }
    p.dtype = va.a[VQ].kind == NPY_BF16 ? FA_BF16 : FA_F16;
    struct { int id; int64_t want[4]; data_form f; } chk[] = {
        { VO, { dq_[0], dq_[1], p.heads_q, p.head_dim_v }, fq },  { VDO, { dq_[0], dq_[1], p.heads_q, p.head_dim_v }, fq },
        { VDQ, { dq_[0], dq_[1], p.heads_q, p.head_dim_qk }, fq }, { VDK, { dk_[0], dk_[1], p.heads_kv, p.head_dim_qk }, fk },
        { VDV, { dk_[0], dk_[1], p.heads_kv, p.head_dim_v }, fk },
    };
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++) {
        int id = chk[i].id;
        if (!va.have[id]) continue;
        if (data_dims(&va.a[id], chk[i].f, bhsd, va.path[id], d, msg, sizeof msg)) { fprintf(stderr, "flashcheck verify: %s\n", msg); return CLI_USAGE; }
        if (memcmp(d, chk[i].want, sizeof d) != 0) {
            char got[128], want[128];
            shape_text(&va.a[id], got, sizeof got);
            form_text(chk[i].f, bhsd, chk[i].want, want, sizeof want);
            fprintf(stderr, "flashcheck verify: %s has shape %s; expected %s from q, k, v\n", va.path[id], got, want);
            return CLI_USAGE;
        }
    }
    for (int id = VQ; id <= VDV; id++) {
        if (!va.have[id] || id == VLSE) continue;
        if (to_bits(&va, id, p.dtype, msg, sizeof msg)) { fprintf(stderr, "flashcheck verify: %s\n", msg); return CLI_USAGE; }
    }
    if (va.have[VLSE]) {
        npy_array *l = &va.a[VLSE];
        int ok = l->kind == NPY_F32 && (packed_q ? l->ndim == 2 && l->shape[0] == p.heads_q && l->shape[1] == dq_[1]
                                                  : l->ndim == 3 && l->shape[0] == p.batch && l->shape[1] == p.heads_q &&
                                                        l->shape[2] == p.seqlen_q);
        if (!ok) {
            char got[128], want[128];
            shape_text(l, got, sizeof got);
            if (packed_q) snprintf(want, sizeof want, "[Hq, total_q] = [%lld, %lld] (packed)", (long long)p.heads_q, (long long)dq_[1]);
            else snprintf(want, sizeof want, "[B, Hq, Sq] = [%lld, %lld, %lld]", (long long)p.batch, (long long)p.heads_q,
                          (long long)p.seqlen_q);
            fprintf(stderr, "flashcheck verify: %s must be float32 %s (natural log); it is %s %s\n", va.path[VLSE], want,
                    npy_kind_name(l->kind), got);
            return CLI_USAGE;
        }
    }
    for (int id = VSINKS; id <= VDSINKS; id++) {
        npy_array *a = &va.a[id];
        if (!va.have[id] || (a->kind == NPY_F32 && a->ndim == 1 && a->shape[0] == p.heads_q)) continue;
        char got[128];
        shape_text(a, got, sizeof got);
        fprintf(stderr, "flashcheck verify: %s must be float32 [Hq] = [%lld] (one %s per query head); it is %s %s\n",
                va.path[id], (long long)p.heads_q, id == VSINKS ? "sink logit" : "sink gradient", npy_kind_name(a->kind), got);
        return CLI_USAGE;
    }
    fa_mask mask;
    memset(&mask, 0, sizeof mask);
    if (va.have[VMASK] && (packed_q || packed_k)) {
        /* not allowed with cu_seqlens: given as is, fa_validate_fwd rejects it naming "mask" */
        mask.ptr = va.a[VMASK].data ? va.a[VMASK].data : (const float *)va.a[VMASK].ints;
    } else if (va.have[VMASK]) {
        npy_array *m = &va.a[VMASK];
        if (m->kind != NPY_F32 || m->ndim != 4 || (m->shape[0] != 1 && m->shape[0] != p.batch) ||
            (m->shape[1] != 1 && m->shape[1] != p.heads_q) || m->shape[2] != p.seqlen_q || m->shape[3] != p.seqlen_k) {
            char got[128];
            shape_text(m, got, sizeof got);
            fprintf(stderr, "flashcheck verify: %s must be float32 [B|1, Hq|1, Sq, Sk] = [%lld|1, %lld|1, %lld, %lld]; it is %s %s\n",
                    va.path[VMASK], (long long)p.batch, (long long)p.heads_q, (long long)p.seqlen_q, (long long)p.seqlen_k,
                    npy_kind_name(m->kind), got);
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
        int kside = id == VK || id == VV || id == VDK || id == VDV;
        data_strides(&va.a[id], kside ? fk : fq, bhsd, t[id].stride);
    }
    fa_precision prof;
    fa_precision_preset(profile_name, &prof, NULL);
    orc_options opt;
    orc_options_init(&opt);
    fa_error err;
    memset(&err, 0, sizeof err);

    fa_fwd_args fa;
    memset(&fa, 0, sizeof fa);
    fa.p = p; fa.q = t[VQ]; fa.k = t[VK]; fa.v = t[VV]; fa.mask = mask;
    fa.varlen.cu_seqlens_q = cu_q;
    fa.varlen.cu_seqlens_k = cu_k;
    fa.varlen.seqused_k = used;
    if (paged) {
        fa.paged.block_table = va.a[VTABLE].ints;
        fa.paged.table_stride = fa.paged.max_pages_per_seq = va.a[VTABLE].shape[1];
        fa.paged.num_pages = dk_[0];
    }
    fa.p.has_sinks = va.have[VSINKS];
    fa.sinks = va.have[VSINKS] ? va.a[VSINKS].data : NULL;
    p = fa.p;
    /* the oracle ignores o/lse of the args, but validates them: give it the user's o and a scratch
       lse ([B, Hq, Sq], or [Hq, total_q] when packed) */
    const int64_t lse_rows = packed_q ? dq_[1] : p.seqlen_q, lse_b = packed_q ? 1 : p.batch;
    float *scratch_lse = calloc((size_t)(lse_b * p.heads_q * lse_rows) + 1, sizeof(float));
    fa.o = t[VO];
    fa.lse.ptr = scratch_lse;
    fa.lse.stride[0] = packed_q ? 0 : p.heads_q * lse_rows; fa.lse.stride[1] = lse_rows; fa.lse.stride[2] = 1;

    /* the contract's validation (every backend's, kernels/api/fa_validate.c) of the call these
       arrays describe, with limits that claim every feature: an error names the file it is about */
    fa_limits any;
    memset(&any, 0, sizeof any);
    any.head_dim_multiple = 1;
    any.ptr_align_bytes = 2;
    any.supports_varlen = any.supports_paged = any.supports_softcap = any.supports_sinks = 1;
    if (fa_validate_fwd(&fa, &any, &err) != FA_OK) {
        const char *src = arg_source(err.arg, va.path);
        fprintf(stderr, "flashcheck verify: %s%s%s\n", src ? src : "", src ? ": " : "", err.msg);
        free(scratch_lse);
        return CLI_USAGE;
    }
    /* packed arrays hold exactly the rows cu_seqlens announces (fa_validate cannot see a buffer's size) */
    struct { int on, cu, id; int64_t rows; } pk[] = { { packed_q, VCUQ, VQ, dq_[1] }, { packed_k && !paged, VCUK, VK, dk_[1] } };
    for (int i = 0; i < 2; i++) {
        if (!pk[i].on) continue;
        int64_t total = va.a[pk[i].cu].ints[p.batch];
        if (total == pk[i].rows) continue;
        fprintf(stderr, "flashcheck verify: %s has %lld packed rows but %s ends at %lld (its last entry, cu[B], is the "
                "rows of the %lld sequences together)\n", va.path[pk[i].id], (long long)pk[i].rows, va.path[pk[i].cu],
                (long long)total, (long long)p.batch);
        free(scratch_lse);
        return CLI_USAGE;
    }

    char v3[256] = "";
    size_t v3n = 0;
    if (packed_q) v3n += (size_t)snprintf(v3 + v3n, sizeof v3 - v3n, ", packed q (%lld rows)", (long long)dq_[1]);
    if (packed_k && v3n < sizeof v3) v3n += (size_t)snprintf(v3 + v3n, sizeof v3 - v3n, ", packed k (%lld rows)", (long long)dk_[1]);
    if (paged && v3n < sizeof v3)
        v3n += (size_t)snprintf(v3 + v3n, sizeof v3 - v3n, ", paged k/v (%lld pages of %lld, %lld per sequence)",
                                (long long)dk_[0], (long long)dk_[1], (long long)fa.paged.max_pages_per_seq);
    if (used && v3n < sizeof v3) v3n += (size_t)snprintf(v3 + v3n, sizeof v3 - v3n, ", seqused_k");
    if (p.softcap > 0 && v3n < sizeof v3) v3n += (size_t)snprintf(v3 + v3n, sizeof v3 - v3n, ", softcap %g", (double)p.softcap);
    if (p.has_sinks && v3n < sizeof v3) snprintf(v3 + v3n, sizeof v3 - v3n, ", sinks");
    printf("verify: B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld Dqk=%lld Dv=%lld %s, causal %s, window %lld %lld, scale %g, profile %s%s\n",
           (long long)p.batch, (long long)p.seqlen_q, (long long)p.seqlen_k, (long long)p.heads_q, (long long)p.heads_kv,
           (long long)p.head_dim_qk, (long long)p.head_dim_v, fa_dtype_name(p.dtype), causal_w[p.causal],
           (long long)p.window_left, (long long)p.window_right, (double)fa_effective_scale(&p),
           profile_name, v3);
    /* steps: oracle forward, compare, (oracle backward, compare); the ticker moves the elapsed time
       while the oracle runs (no fork here) */
    rp_progress prog;
    rp_progress_start(&prog, stderr, "flashcheck verify", "steps", want_bwd ? 4 : 2, quiet);
    rp_progress_update(&prog, 0, "oracle forward");
    rp_progress_ticker(&prog, 1.0);
    orc_fwd_result fr;
    if (orc_fwd(&fa, &prof, &opt, &fr, &err) != FA_OK) {
        rp_progress_end(&prog);
        fprintf(stderr, "flashcheck verify: the problem is invalid: %s: %s\n", err.arg, err.msg);
        return CLI_USAGE;
    }
    orc_stats st[VN];
    int checked[VN] = { 0 };
    fa_lse user_lse;
    memset(&user_lse, 0, sizeof user_lse);
    if (va.have[VLSE]) {
        user_lse.ptr = va.a[VLSE].data;
        user_lse.stride[0] = fa.lse.stride[0]; user_lse.stride[1] = fa.lse.stride[1]; user_lse.stride[2] = 1;
    }
    rp_progress_update(&prog, 1, "comparing the forward");
    if (orc_compare_fwd(&fr, &t[VO], va.have[VLSE] ? &user_lse : NULL, &st[VO], va.have[VLSE] ? &st[VLSE] : NULL, &err) != FA_OK) {
        rp_progress_end(&prog);
        fprintf(stderr, "flashcheck verify: comparing the forward failed: %s\n", err.msg);
        return CLI_INTERNAL;
    }
    checked[VO] = 1;
    checked[VLSE] = va.have[VLSE];
    /* the first non-finite failure of each tensor, shown before the worst FINITE element (the
       worst-ratio statistics cover finite elements only, which may all pass) */
    int nf_have[VN] = { 0 };
    int64_t nf_at[VN][4];
    double nf_got[VN], nf_ref[VN];
    if (st[VO].nan_unexpected + st[VO].nan_missing > 0) {
        data_view dvw = { &t[VO], p.dtype, cu_q };
        nf_have[VO] = first_nonfinite_failure(&fr.o, data_get, &dvw, orc_overflow_threshold(p.dtype), nf_at[VO],
                                              &nf_got[VO], &nf_ref[VO]);
    }
    if (checked[VLSE] && st[VLSE].nan_unexpected + st[VLSE].nan_missing > 0) {
        lse_view lvw = { &user_lse, cu_q };
        nf_have[VLSE] = first_nonfinite_failure(&fr.lse, lse_get, &lvw, orc_overflow_threshold(-1), nf_at[VLSE],
                                                &nf_got[VLSE], &nf_ref[VLSE]);
    }

    double o_in = 0, lse_in = 0;
    if (want_bwd) {
        /* LSE for the backward: the user's, else unknown: the backend's backward used the LSE of
           its own forward, which a correct forward may produce anywhere within the forward LSE
           bound, so the oracle judges the backward against any such LSE (orc_options.lse_unknown,
           oracle/BOUNDS.md 5.0) and reads no LSE values (the scratch buffer only fills the args) */
        fa_lse lse_in_view = user_lse;
        orc_options bopt = opt;
        if (!va.have[VLSE]) {
            bopt.lse_unknown = 1;
            lse_in_view = fa.lse;
        }
        /* outputs the user did not give: scratch buffers (not compared) */
        void *scratch[3] = { NULL, NULL, NULL };
        int gids[3] = { VDQ, VDK, VDV };
        fa_tensor g[3];
        for (int k = 0; k < 3; k++) {
            if (va.have[gids[k]]) { g[k] = t[gids[k]]; continue; }
            const fa_tensor *like = k == 0 ? &t[VQ] : k == 1 ? &t[VK] : &t[VV];
            /* the element count of the tensor's view: [B|1, S|total|page_size, H, D] or the pool */
            int64_t n = k == 0 ? dq_[0] * dq_[1] * p.heads_q * p.head_dim_qk
                      : dk_[0] * dk_[1] * p.heads_kv * (k == 1 ? p.head_dim_qk : p.head_dim_v);
            scratch[k] = calloc((size_t)n + 1, 2);
            g[k].ptr = scratch[k];
            memcpy(g[k].stride, like->stride, sizeof g[k].stride);
        }
        fa_bwd_args ba;
        memset(&ba, 0, sizeof ba);
        ba.p = p; ba.q = t[VQ]; ba.k = t[VK]; ba.v = t[VV]; ba.o = t[VO]; ba.dout = t[VDO]; ba.lse = lse_in_view;
        ba.mask = mask; ba.dq = g[0]; ba.dk = g[1]; ba.dv = g[2];
        ba.varlen = fa.varlen; ba.paged = fa.paged; ba.sinks = fa.sinks;
        orc_bwd_result br;
        rp_progress_update(&prog, 2, "oracle backward");
        if (orc_bwd(&ba, &prof, &bopt, &br, &err) != FA_OK) {
            rp_progress_end(&prog);
            fprintf(stderr, "flashcheck verify: the backward problem is invalid: %s: %s\n", err.arg, err.msg);
            return CLI_USAGE;
        }
        rp_progress_update(&prog, 3, "comparing the backward");
        if (orc_compare_bwd(&br, va.have[VDQ] ? &t[VDQ] : NULL, va.have[VDK] ? &t[VDK] : NULL, va.have[VDV] ? &t[VDV] : NULL,
                            va.have[VDQ] ? &st[VDQ] : NULL, va.have[VDK] ? &st[VDK] : NULL, va.have[VDV] ? &st[VDV] : NULL,
                            &err) != FA_OK) {
            rp_progress_end(&prog);
            fprintf(stderr, "flashcheck verify: comparing the backward failed: %s\n", err.msg);
            return CLI_INTERNAL;
        }
        checked[VDQ] = va.have[VDQ]; checked[VDK] = va.have[VDK]; checked[VDV] = va.have[VDV];
        if (va.have[VDSINKS] && orc_compare_dsinks(&br, va.a[VDSINKS].data, &st[VDSINKS], &err) != FA_OK) {
            rp_progress_end(&prog);
            fprintf(stderr, "flashcheck verify: comparing dsinks failed: %s\n", err.msg);
            return CLI_INTERNAL;
        }
        checked[VDSINKS] = va.have[VDSINKS];
        const orc_block *blocks[3] = { &br.dq, &br.dk, &br.dv };
        for (int k = 0; k < 3; k++) {
            int id = gids[k];
            if (!checked[id] || st[id].nan_unexpected + st[id].nan_missing == 0) continue;
            data_view dvw = { &t[id], p.dtype, k == 0 ? cu_q : fk == FORM_PACKED ? cu_k : NULL };
            nf_have[id] = first_nonfinite_failure(blocks[k], data_get, &dvw, orc_overflow_threshold(p.dtype), nf_at[id],
                                                  &nf_got[id], &nf_ref[id]);
        }
        o_in = br.o_input_ratio;
        lse_in = br.lse_input_ratio;
        orc_bwd_free(&br);
        for (int k = 0; k < 3; k++) free(scratch[k]);
    }

    rp_progress_update(&prog, want_bwd ? 4 : 2, "done");
    rp_progress_end(&prog);   /* stops the ticker */

    /* report */
    int fail = 0;
    int64_t ovf = 0, unchk = 0;
    printf("  %-4s %12s %10s %10s %12s %12s %10s %10s %10s\n", "out", "checked", "failed", "nonfinite", "worst ratio", "max |err|",
           "FA-style", "bias", "bias0");
    for (int id = 0; id < VN; id++) {
        if (!checked[id]) continue;
        orc_stats *s = &st[id];
        int bad = s->failed > 0;
        fail |= bad;
        ovf += s->overflow_sensitive;
        unchk += s->unchecked;
        if (s->overflow_sensitive)
            printf("       %lld elements NaN/Inf where the profile's own intermediates may overflow (overflow-sensitive, "
                   "oracle/BOUNDS.md 11); first at (b=%lld, s=%lld, h=%lld, d=%lld)\n", (long long)s->overflow_sensitive,
                   (long long)s->first_ovf_at[0], (long long)s->first_ovf_at[1], (long long)s->first_ovf_at[2],
                   (long long)s->first_ovf_at[3]);
        printf("  %-4s %12lld %10lld %10lld %12.4g %12.4g %10s %10.3g %10.3g %s\n", vnames[id], (long long)s->checked,
               (long long)s->failed, (long long)(s->nan_unexpected + s->nan_missing), s->worst_ratio, s->max_err,
               s->has_baseline ? (s->baseline_pass ? "pass" : "fail") : "-", bias_mean(s->bias_sum, s->bias_n),
               bias_mean(s->bias_zero_sum, s->bias_n), bad ? "FAIL" : "ok");
        if (s->unchecked)
            printf("       %lld elements not judged: no finite bound exists (a score that overflows fp32, an infinite\n"
                   "       input, or inconsistent backward inputs; oracle/BOUNDS.md 2, 5, 11)\n", (long long)s->unchecked);
        if (bad && nf_have[id])
            printf("       non-finite failure at (b=%lld, s=%lld, h=%lld, d=%lld): got %.9g, ref %.9g (%lld such)\n",
                   (long long)nf_at[id][0], (long long)nf_at[id][1], (long long)nf_at[id][2], (long long)nf_at[id][3],
                   nf_got[id], nf_ref[id], (long long)(s->nan_unexpected + s->nan_missing));
        if (bad && s->first_fail_at[0] >= 0 && s->failed > s->nan_unexpected + s->nan_missing)
            printf("       first failure at (b=%lld, s=%lld, h=%lld, d=%lld); worst: got %.9g, ref %.9g, bound %.3g\n",
                   (long long)s->first_fail_at[0], (long long)s->first_fail_at[1], (long long)s->first_fail_at[2],
                   (long long)s->first_fail_at[3], s->worst_kernel, s->worst_ref, s->worst_bound);
        else if (bad && !nf_have[id] && s->first_fail_at[0] >= 0)
            printf("       first failure at (b=%lld, s=%lld, h=%lld, d=%lld) (non-finite)\n", (long long)s->first_fail_at[0],
                   (long long)s->first_fail_at[1], (long long)s->first_fail_at[2], (long long)s->first_fail_at[3]);
    }
    if (packed_q || packed_k)
        printf("  packed %s: an index (b, s, h, d) there is sequence b, position s inside it (row cu_seqlens[b] + s)\n",
               packed_q && packed_k ? "q/o/dq and k/v/dk/dv" : packed_q ? "q/o/lse/dq" : "k/v/dk/dv");
    if (paged && (checked[VDK] || checked[VDV]))
        printf("  paged dk/dv: an index (b, s, h, d) there is page b, slot s of the pool\n");
    if (want_bwd && !va.have[VLSE])
        printf("  backward: no --lse given, so dq/dk/dv are judged against any LSE a correct forward may give\n"
               "        (within the forward LSE bound; oracle/BOUNDS.md 5.0); --lse with the backend's own LSE makes\n"
               "        their bounds tighter\n");
    if (want_bwd && (o_in > 1 || lse_in > 1))
        printf("  note: the o%s given to the backward is not what a correct forward produces (error/bound o %.3g, lse %.3g);\n"
               "        the gradient check judges the backward for these inputs\n", va.have[VLSE] ? "/lse" : "", o_in, lse_in);
    printf("  bias: mean signed error/bound (got - ref) / bound; bias0: the same oriented by the sign of ref (< 0: toward\n"
           "  zero). Near 0 for unbiased rounding; a statistic, not a verdict (properties/PROPERTIES.md, \"Rounding bias\").\n");
    printf("%s\n", fail ? "FAIL: some elements are outside their error bound (see above)"
                  : ovf ? "OVERFLOW-SENSITIVE: no element outside its bound, but NaN/Inf where the profile may overflow (see above)"
                        : unchk ? "PASS: every judged element is within its error bound; some elements could not be judged (see above)"
                                : "PASS: every element is within its error bound");

    int rc = fail ? CLI_FAIL : ovf ? CLI_OVERFLOW : CLI_OK;
    if (json_path) {
        cJSON *root = cJSON_CreateObject(), *tens = NULL;
        if (root) {
            cJSON_AddStringToObject(root, "result", fail ? "FAIL" : ovf ? "OVERFLOW-SENSITIVE" : "PASS");
            /* the LSE the backward was judged with: the given one, or any a correct forward may give */
            if (want_bwd) cJSON_AddStringToObject(root, "backward_lse", va.have[VLSE] ? "given" : "any-correct-forward");
            tens = cJSON_AddObjectToObject(root, "tensors");
        }
        for (int id = 0; id < VN && tens; id++) {
            if (!checked[id]) continue;
            cJSON *o = cJSON_AddObjectToObject(tens, vnames[id]);
            if (!o) continue;
            cJSON_AddNumberToObject(o, "checked", (double)st[id].checked);
            cJSON_AddNumberToObject(o, "failed", (double)st[id].failed);
            cJSON_AddNumberToObject(o, "nonfinite", (double)(st[id].nan_unexpected + st[id].nan_missing));
            cJSON_AddNumberToObject(o, "overflow_sensitive", (double)st[id].overflow_sensitive);
            cJSON_AddNumberToObject(o, "unchecked", (double)st[id].unchecked);
            json_number(o, "worst_ratio", st[id].worst_ratio);
            json_number(o, "median_ratio", st[id].median_ratio);
            json_number(o, "max_err", st[id].max_err);
            cJSON *ff = cJSON_AddArrayToObject(o, "first_fail");   /* [b, s, h, d]; -1s when none failed */
            for (int k = 0; k < 4 && ff; k++) cJSON_AddItemToArray(ff, cJSON_CreateNumber((double)st[id].first_fail_at[k]));
            json_number(o, "worst_got", st[id].worst_kernel);
            json_number(o, "worst_ref", st[id].worst_ref);
            json_number(o, "worst_bound", st[id].worst_bound);
            if (st[id].bias_n > 0) {   /* rounding bias (oracle.h orc_stats.bias_*); null when no element had a bound */
                json_number(o, "mean_bias", bias_mean(st[id].bias_sum, st[id].bias_n));
                json_number(o, "mean_bias_toward_zero", bias_mean(st[id].bias_zero_sum, st[id].bias_n));
            } else {
                cJSON_AddNullToObject(o, "mean_bias");
                cJSON_AddNullToObject(o, "mean_bias_toward_zero");
            }
        }
        char *text = root ? cJSON_Print(root) : NULL;
        cJSON_Delete(root);
        char wmsg[600];
        if (!text) {
            fprintf(stderr, "flashcheck verify: --json %s: out of memory building the JSON\n", json_path);
            rc = CLI_INTERNAL;
        } else {
            size_t tl = strlen(text);
            text[tl] = 0;
            char *nl = realloc(text, tl + 2);
            if (nl) { text = nl; text[tl++] = '\n'; text[tl] = 0; }
            if (fz_write_atomic(json_path, text, tl, wmsg, sizeof wmsg) != 0) {
                fprintf(stderr, "flashcheck verify: --json %s: %s (no JSON file was left)\n", json_path, wmsg);
                rc = CLI_INTERNAL;
            }
            free(text);
        }
    }
    orc_fwd_free(&fr);
    free(scratch_lse);
    for (int i = 0; i < VN; i++) {
        if (va.bits[i] && va.bits[i] != va.a[i].bits) free(va.bits[i]);
        npy_free(&va.a[i]);
    }
    return rc;
}
