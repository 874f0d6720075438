/* case_text.c: the "key = value" text form of a case: parser and writer.
 *
 * Grammar (one setting per line; '#' to end of line is a comment; blank
 * lines ignored; tokens separated by spaces or tabs):
 *   shape = B Sq Sk Hq Hkv Dqk Dv
 *   dtype = fp16 | bf16
 *   scale = <float>                         (0: 1/sqrt(Dqk))
 *   causal = none | top_left | bottom_right
 *   window = <left> <right>
 *   window_align = top_left | bottom_right
 *   mask = <kind> [density=<x>] [amp=<x>] [width=<n>] [shift=<n>]
 *   mask_broadcast = none | batch | heads | batch heads
 *   layout.<tensor> = order <n>... pad <n>... offset <n>   (3 numbers for lse)
 *   dist = <kind> [amp=<x>] [prob=<x>]      (q, k, v and do at once; must come
 *                                            before any dist.<tensor>)
 *   dist.<q|k|v|do> = <kind> [amp=<x>] [prob=<x>]
 *   seed = <u64, decimal or 0x hex>
 *   generator = 1 | 2                       (input generator version, case.h FC_GEN_*;
 *                                            absent: 1, the generator of files written
 *                                            before versions existed)
 *   backward = 0 | 1
 *   deterministic = 0 | 1
 * Every key at most once. Errors name the line and what was expected.
 * ------------------------------------------------------------------------- */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"

/* ---------------------------------------------------------------------------
 * Tokens
 * ------------------------------------------------------------------------- */
#define MAX_TOK 24
#define LINE_MAX_LEN 1024

typedef struct {
    int line;
    char *msg;
    size_t msglen;
} parse_ctx;

static int perr(parse_ctx *x, const char *fmt, ...) {
    if (x->msg && x->msglen) {
        int n = snprintf(x->msg, x->msglen, "line %d: ", x->line);
        if (n < 0) n = 0;
        if ((size_t)n < x->msglen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(x->msg + n, x->msglen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

static int split(char *s, char **tok) {
    int n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) break;
        if (n == MAX_TOK) return -1;
        tok[n++] = s;
        while (*s && *s != ' ' && *s != '\t') s++;
        if (*s) *s++ = 0;
    }
    return n;
}

static int parse_i64(parse_ctx *x, const char *what, const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) return perr(x, "%s: '%s' is not an integer", what, s);
    *out = v;
    return 0;
}

static int parse_f64(parse_ctx *x, const char *what, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        return perr(x, "%s: '%s' is not a finite number", what, s);
    *out = v;
    return 0;
}

static int parse_bool(parse_ctx *x, const char *what, char **tok, int n, int *out) {
    if (n != 1 || (strcmp(tok[0], "0") && strcmp(tok[0], "1")))
        return perr(x, "%s expects 0 or 1", what);
    *out = tok[0][0] == '1';
    return 0;
}

/* "name=value" option; returns 1 with name/value split, 0 if no '='. */
static int opt_split(char *t, char **name, char **value) {
    char *eq = strchr(t, '=');
    if (!eq) return 0;
    *eq = 0;
    *name = t;
    *value = eq + 1;
    return 1;
}

/* ---------------------------------------------------------------------------
 * Keys
 * ------------------------------------------------------------------------- */
enum { K_SHAPE, K_DTYPE, K_SCALE, K_CAUSAL, K_WINDOW, K_ALIGN, K_MASK, K_MASK_BC, K_SEED, K_GEN,
       K_BACKWARD, K_DETERMINISTIC, K_DIST, K_DIST_T, K_LAYOUT_T = K_DIST_T + FC_N_DIST_INPUTS,
       K_COUNT = K_LAYOUT_T + FC_T_COUNT };

static const char *const KNOWN_KEYS =
    "shape, dtype, scale, causal, window, window_align, mask, mask_broadcast, layout.<tensor>, "
    "dist, dist.<q|k|v|do>, seed, generator, backward, deterministic; contract v3: seqlens_q, seqlens_k, seqused_k, "
    "softcap, sinks, paged, block_table.<b>";

static int parse_dist(parse_ctx *x, const char *key, char **tok, int n, fc_dist *d) {
    if (n < 1) return perr(x, "%s expects a distribution name", key);
    int k = fc_dist_by_name(tok[0]);
    if (k < 0)
        return perr(x, "%s: unknown distribution '%s' (gaussian, large, tiny, sparse_int, heavy_tail, "
                       "spikes, const_rows, ties)", key, tok[0]);
    fc_dist r = {(fc_dist_kind)k, 0.0, 0.0};
    for (int i = 1; i < n; i++) {
        char *name, *value;
        if (!opt_split(tok[i], &name, &value)) return perr(x, "%s: expected amp=<x> or prob=<x>, got '%s'", key, tok[i]);
        if (!strcmp(name, "amp")) {
            if (parse_f64(x, "amp", value, &r.amp)) return -1;
        } else if (!strcmp(name, "prob")) {
            if (parse_f64(x, "prob", value, &r.prob)) return -1;
        } else {
            return perr(x, "%s: unknown option '%s' (amp, prob)", key, name);
        }
    }
    *d = r;
    return 0;
}

static int parse_mask(parse_ctx *x, char **tok, int n, fc_mask_spec *m) {
    if (n < 1) return perr(x, "mask expects a kind");
    int k = fc_mask_by_name(tok[0]);
    if (k < 0)
        return perr(x, "mask: unknown kind '%s' (none, random_neginf, stripes, full_rows, full_cols, "
                       "random_finite)", tok[0]);
    m->kind = (fc_mask_kind)k;
    for (int i = 1; i < n; i++) {
        char *name, *value;
        if (!opt_split(tok[i], &name, &value)) return perr(x, "mask: expected option=value, got '%s'", tok[i]);
        if (!strcmp(name, "density")) {
            if (parse_f64(x, "density", value, &m->density)) return -1;
        } else if (!strcmp(name, "amp")) {
            if (parse_f64(x, "amp", value, &m->amp)) return -1;
        } else if (!strcmp(name, "width")) {
            if (parse_i64(x, "width", value, &m->width)) return -1;
        } else if (!strcmp(name, "shift")) {
            if (parse_i64(x, "shift", value, &m->shift)) return -1;
        } else {
            return perr(x, "mask: unknown option '%s' (density, amp, width, shift)", name);
        }
    }
    return 0;
}

static int parse_layout(parse_ctx *x, const char *key, int t, char **tok, int n, fc_layout *l) {
    int nd = t == FC_T_LSE ? 3 : 4;
    fc_layout r;
    memset(&r, 0, sizeof r);
    for (int k = 0; k < 4; k++) r.order[k] = k;
    int i = 0, seen_order = 0, seen_pad = 0, seen_offset = 0;
    while (i < n) {
        const char *w = tok[i++];
        if (!strcmp(w, "order") || !strcmp(w, "pad")) {
            int is_order = w[0] == 'o';
            if (is_order ? seen_order++ : seen_pad++) return perr(x, "%s: '%s' given twice", key, w);
            if (i + nd > n) return perr(x, "%s: '%s' needs %d numbers", key, w, nd);
            for (int k = 0; k < nd; k++) {
                int64_t v;
                if (parse_i64(x, key, tok[i++], &v)) return -1;
                if (is_order) {
                    if (v < 0 || v >= nd) return perr(x, "%s: order entry %lld is not in 0..%d", key, (long long)v, nd - 1);
                    r.order[k] = (int)v;
                } else {
                    if (v < 0) return perr(x, "%s: pad entry %lld is negative", key, (long long)v);
                    r.pad[k] = v;
                }
            }
        } else if (!strcmp(w, "offset")) {
            if (seen_offset++) return perr(x, "%s: 'offset' given twice", key);
            if (i >= n) return perr(x, "%s: 'offset' needs a number", key);
            if (parse_i64(x, key, tok[i++], &r.offset)) return -1;
            if (r.offset < 0) return perr(x, "%s: offset is negative", key);
        } else {
            return perr(x, "%s: expected 'order', 'pad' or 'offset', got '%s'", key, w);
        }
    }
    int seen = 0;
    for (int k = 0; k < nd; k++) {
        if ((seen >> r.order[k]) & 1) return perr(x, "%s: order is not a permutation of 0..%d", key, nd - 1);
        seen |= 1 << r.order[k];
    }
    *l = r;
    return 0;
}

/* ---------------------------------------------------------------------------
 * Parser
 * ------------------------------------------------------------------------- */
static int parse_text(const char *text, fc_case *out, int require_shape, char *msg, size_t msglen) {
    fc_case c;
    fc_case_default(&c);
    c.gen = FC_GEN_V1; /* a file without `generator` was written before versions existed */
    parse_ctx x = {0, msg, msglen};
    int seen[K_COUNT];
    fc_v3_seen v3_seen;
    memset(&v3_seen, 0, sizeof v3_seen);
    memset(seen, 0, sizeof seen);
    const char *p = text;
    while (*p) {
        x.line++;
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len >= LINE_MAX_LEN) return perr(&x, "line longer than %d characters", LINE_MAX_LEN - 1);
        char buf[LINE_MAX_LEN];
        memcpy(buf, p, len);
        buf[len] = 0;
        p = nl ? nl + 1 : p + len;
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char *cr = strchr(buf, '\r');
        if (cr) *cr = 0;
        char *eq = strchr(buf, '=');
        char *tok[MAX_TOK];
        if (!eq) {
            int n = split(buf, tok);
            if (n == 0) continue;
            return perr(&x, "expected 'key = value', got '%s'", tok[0]);
        }
        *eq = 0;
        char *ktok[MAX_TOK];
        int kn = split(buf, ktok);
        if (kn != 1) return perr(&x, kn == 0 ? "missing key before '='" : "key must be one word");
        const char *key = ktok[0];
        int n = split(eq + 1, tok);
        if (n < 0) return perr(&x, "too many values (at most %d)", MAX_TOK);
        if (n == 0) return perr(&x, "%s: missing value", key);

        int id = -1;
        if (!strcmp(key, "shape")) id = K_SHAPE;
        else if (!strcmp(key, "dtype")) id = K_DTYPE;
        else if (!strcmp(key, "scale")) id = K_SCALE;
        else if (!strcmp(key, "causal")) id = K_CAUSAL;
        else if (!strcmp(key, "window")) id = K_WINDOW;
        else if (!strcmp(key, "window_align")) id = K_ALIGN;
        else if (!strcmp(key, "mask")) id = K_MASK;
        else if (!strcmp(key, "mask_broadcast")) id = K_MASK_BC;
        else if (!strcmp(key, "seed")) id = K_SEED;
        else if (!strcmp(key, "generator")) id = K_GEN;
        else if (!strcmp(key, "backward")) id = K_BACKWARD;
        else if (!strcmp(key, "deterministic")) id = K_DETERMINISTIC;
        else if (!strcmp(key, "dist")) id = K_DIST;
        else if (!strncmp(key, "dist.", 5)) {
            int t = fc_tensor_by_name(key + 5);
            if (t < 0 || t >= FC_N_DIST_INPUTS)
                return perr(&x, "%s: no distribution for '%s' (dist.q, dist.k, dist.v, dist.do)", key, key + 5);
            id = K_DIST_T + t;
        } else if (!strncmp(key, "layout.", 7)) {
            int t = fc_tensor_by_name(key + 7);
            if (t < 0) return perr(&x, "%s: unknown tensor '%s' (q k v do mask o lse dq dk dv)", key, key + 7);
            id = K_LAYOUT_T + t;
        }
        if (id < 0) {
            char why[256];
            int v3 = fc_v3_parse_key(key, tok, n, &c, &v3_seen, why, sizeof why);
            if (v3 < 0) return perr(&x, "%s", why);
            if (v3 > 0) continue;
        }
        if (id < 0) return perr(&x, "unknown key '%s' (known: %s)", key, KNOWN_KEYS);
        if (seen[id]) return perr(&x, "%s given twice (first on line %d)", key, seen[id]);
        seen[id] = x.line;

        switch (id) {
        case K_SHAPE: {
            if (n != 7) return perr(&x, "shape expects 7 integers: B Sq Sk Hq Hkv Dqk Dv (got %d)", n);
            int64_t v[7];
            for (int i = 0; i < 7; i++) {
                if (parse_i64(&x, "shape", tok[i], &v[i])) return -1;
                if (v[i] < 0) return perr(&x, "shape: entry %d (%s) is negative", i + 1, tok[i]);
            }
            c.p.batch = v[0]; c.p.seqlen_q = v[1]; c.p.seqlen_k = v[2]; c.p.heads_q = v[3];
            c.p.heads_kv = v[4]; c.p.head_dim_qk = v[5]; c.p.head_dim_v = v[6];
            break;
        }
        case K_DTYPE:
            if (n != 1) return perr(&x, "dtype expects one word");
            if (!strcmp(tok[0], "fp16")) c.p.dtype = FA_F16;
            else if (!strcmp(tok[0], "bf16")) c.p.dtype = FA_BF16;
            else return perr(&x, "dtype: '%s' is not fp16 or bf16", tok[0]);
            break;
        case K_SCALE: {
            double s;
            if (n != 1) return perr(&x, "scale expects one number");
            if (parse_f64(&x, "scale", tok[0], &s)) return -1;
            float f = (float)s;
            if (!isfinite(f)) return perr(&x, "scale %s overflows fp32", tok[0]);
            /* 0 means the default 1/sqrt(Dqk): a nonzero scale must not round to 0 (or to a
               subnormal, which flushing backends treat as 0) */
            if (s != 0 && !isnormal(f))
                return perr(&x, "scale %s %s in fp32; 0 selects the default scale, give a normal fp32 value "
                            "(|scale| >= 2^-126)", tok[0], f == 0 ? "rounds to 0" : "is subnormal");
            c.p.softmax_scale = f;
            break;
        }
        case K_CAUSAL:
            if (n != 1) return perr(&x, "causal expects one word");
            if (!strcmp(tok[0], "none")) c.p.causal = FA_CAUSAL_NONE;
            else if (!strcmp(tok[0], "top_left")) c.p.causal = FA_CAUSAL_TOP_LEFT;
            else if (!strcmp(tok[0], "bottom_right")) c.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
            else return perr(&x, "causal: '%s' is not none, top_left or bottom_right", tok[0]);
            break;
        case K_WINDOW:
            if (n != 2) return perr(&x, "window expects two integers: left right (< 0: unbounded)");
            if (parse_i64(&x, "window", tok[0], &c.p.window_left)) return -1;
            if (parse_i64(&x, "window", tok[1], &c.p.window_right)) return -1;
            break;
        case K_ALIGN:
            if (n != 1) return perr(&x, "window_align expects one word");
            if (!strcmp(tok[0], "top_left")) c.p.window_align = FA_ALIGN_TOP_LEFT;
            else if (!strcmp(tok[0], "bottom_right")) c.p.window_align = FA_ALIGN_BOTTOM_RIGHT;
            else return perr(&x, "window_align: '%s' is not top_left or bottom_right", tok[0]);
            break;
        case K_MASK:
            if (parse_mask(&x, tok, n, &c.mask)) return -1;
            break;
        case K_MASK_BC:
            c.mask.broadcast_batch = c.mask.broadcast_heads = 0;
            if (n == 1 && !strcmp(tok[0], "none")) break;
            for (int i = 0; i < n; i++) {
                if (!strcmp(tok[i], "batch") && !c.mask.broadcast_batch) c.mask.broadcast_batch = 1;
                else if (!strcmp(tok[i], "heads") && !c.mask.broadcast_heads) c.mask.broadcast_heads = 1;
                else return perr(&x, "mask_broadcast: expected none, or batch and/or heads once each; got '%s'", tok[i]);
            }
            break;
        case K_SEED: {
            if (n != 1) return perr(&x, "seed expects one integer");
            char *end;
            errno = 0;
            unsigned long long v = strtoull(tok[0], &end, 0);
            if (end == tok[0] || *end || errno || tok[0][0] == '-')
                return perr(&x, "seed: '%s' is not an unsigned 64-bit integer", tok[0]);
            c.seed = v;
            break;
        }
        case K_GEN: {
            char *end;
            errno = 0;
            long v = n == 1 ? strtol(tok[0], &end, 10) : 0;
            if (n != 1 || end == tok[0] || *end || errno)
                return perr(&x, "generator expects one integer, the input generator version (1 or %d)", FC_GEN_LATEST);
            if (v < FC_GEN_V1 || v > FC_GEN_LATEST)
                return perr(&x, "generator = %s: unknown input generator version %ld (this build knows 1 to %d)", tok[0], v,
                            FC_GEN_LATEST);
            c.gen = (int)v;
            break;
        }
        case K_BACKWARD:
            if (parse_bool(&x, "backward", tok, n, &c.backward)) return -1;
            break;
        case K_DETERMINISTIC:
            if (parse_bool(&x, "deterministic", tok, n, &c.deterministic)) return -1;
            break;
        case K_DIST: {
            for (int t = 0; t < FC_N_DIST_INPUTS; t++)
                if (seen[K_DIST_T + t]) return perr(&x, "dist must come before dist.%s (line %d), which it would override",
                                                    fc_tensor_name(t), seen[K_DIST_T + t]);
            fc_dist d;
            if (parse_dist(&x, "dist", tok, n, &d)) return -1;
            for (int t = 0; t < FC_N_DIST_INPUTS; t++) c.dist[t] = d;
            break;
        }
        default:
            if (id >= K_DIST_T && id < K_DIST_T + FC_N_DIST_INPUTS) {
                if (parse_dist(&x, key, tok, n, &c.dist[id - K_DIST_T])) return -1;
            } else {
                int t = id - K_LAYOUT_T;
                if (parse_layout(&x, key, t, tok, n, &c.layout[t])) return -1;
            }
        }
    }
    {
        char why[256];
        if (fc_v3_parse_end(&c, &v3_seen, why, sizeof why)) {
            if (msg && msglen) snprintf(msg, msglen, "%s", why);
            return -1;
        }
    }
    if (require_shape && !seen[K_SHAPE]) {
        if (msg && msglen)
            snprintf(msg, msglen, "no 'shape = B Sq Sk Hq Hkv Dqk Dv' line: %s is not a case file",
                     x.line == 0 ? "an empty file" : "text without a shape");
        return -1;
    }
    char why[256];
    if (fc_case_check(&c, why, sizeof why)) {
        if (msg && msglen) snprintf(msg, msglen, "case: %s", why);
        return -1;
    }
    *out = c;
    return 0;
}

int fc_case_parse(const char *text, fc_case *out, char *msg, size_t msglen) {
    return parse_text(text, out, 0, msg, msglen);
}

int fc_case_parse_repro(const char *text, fc_case *out, char *msg, size_t msglen) {
    return parse_text(text, out, 1, msg, msglen);
}

/* ---------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------- */
typedef struct {
    char *buf;
    size_t cap, len;
} sbuf;

static void sb_printf(sbuf *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = s->len < s->cap ? s->buf + s->len : NULL;
    size_t room = s->len < s->cap ? s->cap - s->len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) s->len += (size_t)n;
}

static const char *const causal_words[3] = {"none", "top_left", "bottom_right"};
static const char *const align_words[2] = {"top_left", "bottom_right"};

size_t fc_case_write(const fc_case *c, char *buf, size_t buflen) {
    sbuf s = {buf, buflen, 0};
    if (buflen) buf[0] = 0;
    const fa_problem *p = &c->p;
    sb_printf(&s, "# flashcheck case\n");
    sb_printf(&s, "shape = %lld %lld %lld %lld %lld %lld %lld   # B Sq Sk Hq Hkv Dqk Dv\n",
              (long long)p->batch, (long long)p->seqlen_q, (long long)p->seqlen_k, (long long)p->heads_q,
              (long long)p->heads_kv, (long long)p->head_dim_qk, (long long)p->head_dim_v);
    sb_printf(&s, "dtype = %s\n", p->dtype == FA_BF16 ? "bf16" : "fp16");
    sb_printf(&s, "scale = %.9g\n", (double)p->softmax_scale);
    sb_printf(&s, "causal = %s\n", (unsigned)p->causal < 3 ? causal_words[p->causal] : "?");
    sb_printf(&s, "window = %lld %lld\n", (long long)p->window_left, (long long)p->window_right);
    sb_printf(&s, "window_align = %s\n", (unsigned)p->window_align < 2 ? align_words[p->window_align] : "?");
    sb_printf(&s, "mask = %s density=%.17g amp=%.17g width=%lld shift=%lld\n", fc_mask_name(c->mask.kind),
              c->mask.density, c->mask.amp, (long long)c->mask.width, (long long)c->mask.shift);
    sb_printf(&s, "mask_broadcast = %s%s%s\n",
              c->mask.broadcast_batch || c->mask.broadcast_heads ? "" : "none",
              c->mask.broadcast_batch ? "batch" : "",
              c->mask.broadcast_heads ? (c->mask.broadcast_batch ? " heads" : "heads") : "");
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_layout *l = &c->layout[t];
        int nd = t == FC_T_LSE ? 3 : 4;
        sb_printf(&s, "layout.%s = order", fc_tensor_name(t));
        for (int k = 0; k < nd; k++) sb_printf(&s, " %d", l->order[k]);
        sb_printf(&s, " pad");
        for (int k = 0; k < nd; k++) sb_printf(&s, " %lld", (long long)l->pad[k]);
        sb_printf(&s, " offset %lld\n", (long long)l->offset);
    }
    for (int t = 0; t < FC_N_DIST_INPUTS; t++)
        sb_printf(&s, "dist.%s = %s amp=%.17g prob=%.17g\n", fc_tensor_name(t), fc_dist_name(c->dist[t].kind),
                  c->dist[t].amp, c->dist[t].prob);
    sb_printf(&s, "seed = 0x%016" PRIx64 "\n", c->seed);
    if (c->gen != FC_GEN_V1) sb_printf(&s, "generator = %d\n", c->gen); /* v1 files are unchanged */
    sb_printf(&s, "backward = %d\n", c->backward ? 1 : 0);
    sb_printf(&s, "deterministic = %d\n", c->deterministic ? 1 : 0);
    s.len += fc_v3_write(c, s.len < s.cap ? s.buf + s.len : NULL, s.len < s.cap ? s.cap - s.len : 0);
    return s.len;
}

/* ---------------------------------------------------------------------------
 * Equality, files
 * ------------------------------------------------------------------------- */
int fc_case_equal(const fc_case *a, const fc_case *b) {
    const fa_problem *p = &a->p, *q = &b->p;
    if (p->batch != q->batch || p->seqlen_q != q->seqlen_q || p->seqlen_k != q->seqlen_k ||
        p->heads_q != q->heads_q || p->heads_kv != q->heads_kv || p->head_dim_qk != q->head_dim_qk ||
        p->head_dim_v != q->head_dim_v || p->dtype != q->dtype || p->softmax_scale != q->softmax_scale ||
        p->causal != q->causal || p->window_left != q->window_left || p->window_right != q->window_right ||
        p->window_align != q->window_align)
        return 0;
    const fc_mask_spec *m = &a->mask, *n = &b->mask;
    if (m->kind != n->kind || m->density != n->density || m->amp != n->amp || m->width != n->width ||
        m->shift != n->shift || m->broadcast_batch != n->broadcast_batch || m->broadcast_heads != n->broadcast_heads)
        return 0;
    for (int t = 0; t < FC_T_COUNT; t++) {
        int nd = t == FC_T_LSE ? 3 : 4;
        for (int k = 0; k < nd; k++)
            if (a->layout[t].order[k] != b->layout[t].order[k] || a->layout[t].pad[k] != b->layout[t].pad[k]) return 0;
        if (a->layout[t].offset != b->layout[t].offset) return 0;
    }
    for (int t = 0; t < FC_N_DIST_INPUTS; t++)
        if (a->dist[t].kind != b->dist[t].kind || a->dist[t].amp != b->dist[t].amp || a->dist[t].prob != b->dist[t].prob)
            return 0;
    return a->seed == b->seed && a->gen == b->gen && !!a->backward == !!b->backward && !!a->deterministic == !!b->deterministic &&
           fc_v3_equal(a, b);
}

int fc_case_load(const char *path, fc_case *c, char *msg, size_t msglen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (msg && msglen) snprintf(msg, msglen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            if (cap > (1u << 24)) {
                free(text);
                fclose(f);
                if (msg && msglen) snprintf(msg, msglen, "%s: larger than 16 MiB, not a case file", path);
                return -1;
            }
            char *nt = realloc(text, cap);
            if (!nt) {
                free(text);
                fclose(f);
                if (msg && msglen) snprintf(msg, msglen, "%s: out of memory", path);
                return -1;
            }
            text = nt;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    fclose(f);
    text[len] = 0;
    if (memchr(text, 0, len)) {
        free(text);
        if (msg && msglen) snprintf(msg, msglen, "%s: contains a NUL byte, not a case file", path);
        return -1;
    }
    char inner[400];
    int rc = fc_case_parse_repro(text, c, inner, sizeof inner);
    free(text);
    if (rc && msg && msglen) snprintf(msg, msglen, "%s: %s", path, inner);
    return rc;
}

int fc_case_save(const char *path, const fc_case *c, char *msg, size_t msglen) {
    size_t n = fc_case_write(c, NULL, 0);
    char *text = malloc(n + 1);
    if (!text) {
        if (msg && msglen) snprintf(msg, msglen, "%s: out of memory", path);
        return -1;
    }
    fc_case_write(c, text, n + 1);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(text);
        if (msg && msglen) snprintf(msg, msglen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    int ok = fwrite(text, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    free(text);
    if (!ok) {
        if (msg && msglen) snprintf(msg, msglen, "%s: write failed", path);
        return -1;
    }
    return 0;
}
