/* npy.c: see npy.h. */
#include "cli/npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* errors                                                                    */

static int npy_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *npy_kind_name(npy_kind k)
{
    switch (k) {
    case NPY_F16: return "float16";
    case NPY_BF16: return "bfloat16";
    case NPY_F32: return "float32";
    case NPY_I32: return "int32";
    }
    return "?";
}

/* ------------------------------------------------------------------------- */
/* exact 16-bit -> 32-bit conversions                                        */

float npy_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);            /* inf / nan (payload kept) */
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {                                            /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float npy_bf16_to_f32(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* ------------------------------------------------------------------------- */
/* header parsing: a Python dict literal with exactly the keys               */
/* 'descr', 'fortran_order', 'shape'                                          */

typedef struct { const char *p, *end; } npy_cursor;

static void npy_skip_ws(npy_cursor *c)
{
    while (c->p < c->end && isspace((unsigned char)*c->p)) c->p++;
}

static int npy_accept(npy_cursor *c, char ch)
{
    npy_skip_ws(c);
    if (c->p < c->end && *c->p == ch) { c->p++; return 1; }
    return 0;
}

/* a quoted string ('...' or "...") into out (no escapes: none occur in valid headers) */
static int npy_string(npy_cursor *c, char *out, size_t outlen)
{
    npy_skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= outlen) return -1;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return -1;
    c->p++;
    out[n] = 0;
    return 0;
}

static int npy_header(const char *name, const char *h, size_t hlen, char *descr, size_t dlen,
                      int *fortran, int *ndim, int64_t *shape, char *err, size_t errlen)
{
    npy_cursor c = { h, h + hlen };
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    if (!npy_accept(&c, '{'))
        return npy_err(err, errlen, "%s: header is not a dict literal (expected '{'): not a .npy file written by numpy.save?", name);
    while (!npy_accept(&c, '}')) {
        char key[32];
        if (npy_string(&c, key, sizeof key) != 0 || !npy_accept(&c, ':'))
            return npy_err(err, errlen, "%s: header does not parse (expected 'key': value)", name);
        if (strcmp(key, "descr") == 0) {
            if (npy_string(&c, descr, dlen) != 0)
                return npy_err(err, errlen, "%s: 'descr' is not a simple type string (structured dtypes are not supported; save a plain float16/float32/bfloat16 array)", name);
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            npy_skip_ws(&c);
            if ((size_t)(c.end - c.p) >= 4 && strncmp(c.p, "True", 4) == 0) { *fortran = 1; c.p += 4; }
            else if ((size_t)(c.end - c.p) >= 5 && strncmp(c.p, "False", 5) == 0) { *fortran = 0; c.p += 5; }
            else return npy_err(err, errlen, "%s: 'fortran_order' must be True or False", name);
            have_fortran = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!npy_accept(&c, '('))
                return npy_err(err, errlen, "%s: 'shape' must be a tuple", name);
            *ndim = 0;
            while (!npy_accept(&c, ')')) {
                npy_skip_ws(&c);
                if (c.p >= c.end || !isdigit((unsigned char)*c.p))
                    return npy_err(err, errlen, "%s: 'shape' holds something that is not a non-negative integer", name);
                if (*ndim >= NPY_MAX_DIMS)
                    return npy_err(err, errlen, "%s: more than %d dimensions", name, NPY_MAX_DIMS);
                int64_t v = 0;
                while (c.p < c.end && isdigit((unsigned char)*c.p)) {
                    if (v > (INT64_MAX - 9) / 10)
                        return npy_err(err, errlen, "%s: a dimension in 'shape' overflows 64 bits", name);
                    v = v * 10 + (*c.p++ - '0');
                }
                npy_skip_ws(&c);
                if (c.p < c.end && *c.p == 'L') c.p++;  /* python 2 long suffix */
                shape[(*ndim)++] = v;
                npy_accept(&c, ',');
            }
            have_shape = 1;
        } else {
            return npy_err(err, errlen, "%s: unexpected header key '%s'", name, key);
        }
        npy_accept(&c, ',');
        if (c.p >= c.end)
            return npy_err(err, errlen, "%s: header ends before its closing '}'", name);
    }
    if (!have_descr || !have_fortran || !have_shape)
        return npy_err(err, errlen, "%s: header lacks %s", name,
                       !have_descr ? "'descr'" : !have_fortran ? "'fortran_order'" : "'shape'");
    return 0;
}

/* ------------------------------------------------------------------------- */
/* parse                                                                      */

int npy_parse(const char *name, const unsigned char *buf, size_t len, npy_array *out,
              char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    static const unsigned char magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };
    if (len < 10 || memcmp(buf, magic, 6) != 0)
        return npy_err(err, errlen, "%s: not a .npy file (bad magic; write it with numpy.save)", name);
    int major = buf[6];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = (size_t)buf[8] | ((size_t)buf[9] << 8);
        hoff = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return npy_err(err, errlen, "%s: truncated header", name);
        hlen = (size_t)buf[8] | ((size_t)buf[9] << 8) | ((size_t)buf[10] << 16) | ((size_t)buf[11] << 24);
        hoff = 12;
    } else {
        return npy_err(err, errlen, "%s: .npy format version %d.%d is not supported (1.0, 2.0, 3.0 are)", name, major, buf[7]);
    }
    if (hlen > len - hoff)
        return npy_err(err, errlen, "%s: truncated header (%zu bytes announced, %zu present)", name, hlen, len - hoff);

    char descr[32] = "";
    int fortran = 0, ndim = 0;
    int64_t shape[NPY_MAX_DIMS];
    if (npy_header(name, (const char *)buf + hoff, hlen, descr, sizeof descr, &fortran, &ndim,
                   shape, err, errlen) != 0)
        return -1;

    /* element type */
    npy_kind kind;
    size_t esize;
    char order = descr[0];
    const char *t = descr + 1;
    if (order == '>')
        return npy_err(err, errlen, "%s: dtype '%s' is big endian; save with .astype('<%s')", name, descr, t);
    if (strcmp(t, "V2") == 0 && (order == '<' || order == '|' || order == '=')) { kind = NPY_BF16; esize = 2; }
    else if (order != '<' && order != '=')
        return npy_err(err, errlen, "%s: dtype '%s' is not supported (use float16 '<f2', float32 '<f4', or bfloat16 saved as '<u2'/'<V2')", name, descr);
    else if (strcmp(t, "f2") == 0) { kind = NPY_F16; esize = 2; }
    else if (strcmp(t, "f4") == 0) { kind = NPY_F32; esize = 4; }
    else if (strcmp(t, "u2") == 0) { kind = NPY_BF16; esize = 2; }
    else if (strcmp(t, "i4") == 0) { kind = NPY_I32; esize = 4; }
    else if (strcmp(t, "i8") == 0 || strcmp(t, "u4") == 0 || strcmp(t, "u8") == 0)
        return npy_err(err, errlen, "%s: dtype '%s' is not supported: integer arrays (cu_seqlens, seqused_k, block_table) "
                       "must be int32 '<i4' (x.astype(numpy.int32), t.to(torch.int32))", name, descr);
    else
        return npy_err(err, errlen, "%s: dtype '%s' is not supported (use float16 '<f2', float32 '<f4', bfloat16 saved as '<u2'/'<V2', or int32 '<i4' for index arrays; e.g. t.float().numpy() for fp32, t.view(torch.uint16).numpy() for bf16)", name, descr);

    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && count > INT64_MAX / 8 / shape[i])
            return npy_err(err, errlen, "%s: shape too large", name);
        count *= shape[i];
    }
    size_t need = (size_t)count * esize, have = len - hoff - hlen;
    if (have < need)
        return npy_err(err, errlen, "%s: truncated data: shape needs %zu bytes, file has %zu", name, need, have);
    if (have > need)
        return npy_err(err, errlen, "%s: %zu bytes of trailing data after the array (corrupt file?)", name, have - need);

    int ints = kind == NPY_I32;
    out->data = ints ? NULL : malloc((size_t)(count ? count : 1) * sizeof(float));
    out->bits = esize == 2 ? malloc((size_t)(count ? count : 1) * 2) : NULL;
    out->ints = ints ? malloc((size_t)(count ? count : 1) * sizeof(int32_t)) : NULL;
    if ((!ints && !out->data) || (esize == 2 && !out->bits) || (ints && !out->ints)) {
        npy_free(out);
        return npy_err(err, errlen, "%s: out of memory for %lld elements", name, (long long)count);
    }
    const unsigned char *src = buf + hoff + hlen;
    for (int64_t i = 0; i < count; i++) {
        /* destination index i is C order; find the source index */
        int64_t s = i;
        if (fortran && ndim > 1) {
            int64_t rem = i, idx[NPY_MAX_DIMS];
            for (int d = ndim - 1; d >= 0; d--) { idx[d] = shape[d] ? rem % shape[d] : 0; rem = shape[d] ? rem / shape[d] : 0; }
            s = 0;
            for (int d = ndim - 1; d >= 0; d--) s = s * shape[d] + idx[d];
        }
        const unsigned char *e = src + (size_t)s * esize;
        if (esize == 2) {
            uint16_t b = (uint16_t)(e[0] | (e[1] << 8));
            out->bits[i] = b;
            out->data[i] = kind == NPY_F16 ? npy_f16_to_f32(b) : npy_bf16_to_f32(b);
        } else {
            uint32_t b = (uint32_t)e[0] | ((uint32_t)e[1] << 8) | ((uint32_t)e[2] << 16) | ((uint32_t)e[3] << 24);
            memcpy(ints ? (void *)&out->ints[i] : (void *)&out->data[i], &b, 4);
        }
    }
    out->kind = kind;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
    out->count = count;
    return 0;
}

int npy_read(const char *path, npy_array *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return npy_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) { fclose(f); return npy_err(err, errlen, "%s: out of memory", path); }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        unsigned char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) { free(buf); return npy_err(err, errlen, "%s: read error", path); }
    int r = npy_parse(path, buf, len, out, err, errlen);
    free(buf);
    return r;
}

void npy_free(npy_array *a)
{
    free(a->data);
    free(a->bits);
    free(a->ints);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------------- */
/* write (used by tests and by `flashcheck repro --dump`)                     */

int npy_write(const char *path, npy_kind kind, int ndim, const int64_t *shape,
              const float *f32, const uint16_t *bits, char *err, size_t errlen)
{
    char hdr[256], sh[160] = "";
    int64_t count = 1;
    size_t o = 0;
    for (int i = 0; i < ndim; i++) {
        o += (size_t)snprintf(sh + o, sizeof sh - o, "%lld,%s", (long long)shape[i], (ndim > 1 && i < ndim - 1) ? " " : "");
        count *= shape[i];
    }
    if (ndim > 1) sh[o - 1] = 0; /* "(2, 3)" not "(2, 3,)" */
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     kind == NPY_F32 ? "<f4" : kind == NPY_F16 ? "<f2" : "<u2", sh);
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return npy_err(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    unsigned hl = (unsigned)(n + pad + 1);
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8) };
    fwrite(pre, 1, 10, f);
    fwrite(hdr, 1, (size_t)n, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    for (int64_t i = 0; i < count; i++) {
        if (kind == NPY_F32) {
            uint32_t b; memcpy(&b, &f32[i], 4);
            unsigned char e[4] = { (unsigned char)b, (unsigned char)(b >> 8), (unsigned char)(b >> 16), (unsigned char)(b >> 24) };
            fwrite(e, 1, 4, f);
        } else {
            unsigned char e[2] = { (unsigned char)bits[i], (unsigned char)(bits[i] >> 8) };
            fwrite(e, 1, 2, f);
        }
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) { unlink(tmp); return npy_err(err, errlen, "%s: write error", tmp); }
    if (rename(tmp, path) != 0) { unlink(tmp); return npy_err(err, errlen, "%s: rename failed: %s", path, strerror(errno)); }
    return 0;
}
