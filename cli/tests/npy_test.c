/* npy_test.c: the .npy reader on hand-built files: every accepted form and
 * every rejected one (with the message naming the problem). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/npy.h"

static int failures, checks;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

/* build an image: magic, version, header (padded to 64 with '\n'), data */
static size_t image(unsigned char *buf, int major, const char *header, const void *data, size_t dlen)
{
    size_t pre = major == 1 ? 10 : 12, hl = strlen(header);
    size_t total = pre + hl + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t H = hl + pad + 1;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major; buf[7] = 0;
    if (major == 1) { buf[8] = (unsigned char)(H & 255); buf[9] = (unsigned char)(H >> 8); }
    else { buf[8] = (unsigned char)(H & 255); buf[9] = (unsigned char)(H >> 8); buf[10] = 0; buf[11] = 0; }
    memcpy(buf + pre, header, hl);
    memset(buf + pre + hl, ' ', pad);
    buf[pre + hl + pad] = '\n';
    memcpy(buf + pre + H, data, dlen);
    return pre + H + dlen;
}

static int parse(const char *header, int major, const void *data, size_t dlen, npy_array *a, char *err)
{
    unsigned char buf[4096];
    size_t n = image(buf, major, header, data, dlen);
    return npy_parse("t.npy", buf, n, a, err, 256);
}

int main(void)
{
    npy_array a;
    char err[256];

    /* f2, C order, exact conversion incl. subnormal, inf, nan, -0 */
    uint16_t h[6] = { 0x3C00, 0x0001, 0x7C00, 0xFC00, 0x8000, 0x7E00 };
    CHECK(parse("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 1, h, sizeof h, &a, err) == 0, "%s", err);
    CHECK(a.kind == NPY_F16 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3 && a.count == 6, "f2 shape");
    CHECK(a.data[0] == 1.0f && a.data[1] == ldexpf(1.0f, -24) && isinf(a.data[2]) && a.data[2] > 0 &&
          isinf(a.data[3]) && a.data[3] < 0 && a.data[4] == 0 && signbit(a.data[4]) && isnan(a.data[5]), "f2 values");
    CHECK(a.bits[1] == 0x0001, "raw bits kept");
    npy_free(&a);

    /* Fortran order: stored column-major, returned row-major */
    float f[6] = { 1, 4, 2, 5, 3, 6 };   /* the 2x3 matrix [[1,2,3],[4,5,6]] in Fortran order */
    CHECK(parse("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1, f, sizeof f, &a, err) == 0, "%s", err);
    for (int i = 0; i < 6; i++) CHECK(a.data[i] == (float)(i + 1), "fortran element %d = %g", i, a.data[i]);
    npy_free(&a);

    /* bf16 as <u2, <V2, |V2; v2 and v3 headers; 0-d and empty arrays */
    uint16_t b[2] = { 0x3F80, 0xC000 };   /* 1.0, -2.0 */
    const char *forms[3] = { "'<u2'", "'<V2'", "'|V2'" };
    for (int k = 0; k < 3; k++) {
        char hd[128];
        snprintf(hd, sizeof hd, "{'descr': %s, 'fortran_order': False, 'shape': (2,), }", forms[k]);
        CHECK(parse(hd, k == 0 ? 1 : k + 1, b, sizeof b, &a, err) == 0, "%s: %s", forms[k], err);
        CHECK(a.kind == NPY_BF16 && a.data[0] == 1.0f && a.data[1] == -2.0f, "bf16 %s", forms[k]);
        npy_free(&a);
    }
    CHECK(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 1, f, 4, &a, err) == 0 && a.count == 1 && a.ndim == 0, "0-d");
    npy_free(&a);
    CHECK(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", 1, f, 0, &a, err) == 0 && a.count == 0, "empty");
    npy_free(&a);

    /* int32 (cu_seqlens, seqused_k, block tables): kept as int32, exact beyond 2^24 */
    int32_t iv[3] = { 0, 16777217, -5 };
    CHECK(parse("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 1, iv, sizeof iv, &a, err) == 0, "%s", err);
    CHECK(a.kind == NPY_I32 && a.ints && a.ints[1] == 16777217 && a.ints[2] == -5 && a.data == NULL && a.bits == NULL, "i4 values");
    CHECK(strcmp(npy_kind_name(a.kind), "int32") == 0, "i4 name");
    npy_free(&a);

    /* rejections, each with a message naming the problem */
    struct { const char *hdr; size_t dlen; const char *want; } bad[] = {
        { "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 8, "'<f8' is not supported" },
        { "{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }", 2, "big endian" },
        { "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", 8, "must be int32 '<i4'" },
        { "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8, "not supported" },
        { "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4, "structured" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8, "truncated data" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8, "trailing data" },
        { "{'descr': '<f4', 'shape': (1,), }", 4, "lacks 'fortran_order'" },
        { "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", 4, "True or False" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 4, "non-negative integer" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = parse(bad[i].hdr, 1, f, bad[i].dlen, &a, err);
        CHECK(r == -1 && strstr(err, bad[i].want) && strstr(err, "t.npy"), "case %zu: got '%s', want '%s'", i, err, bad[i].want);
        CHECK(a.data == NULL, "nothing returned on error");
    }
    unsigned char junk[16] = "not a npy file!";
    CHECK(npy_parse("j.npy", junk, sizeof junk, &a, err, sizeof err) == -1 && strstr(err, "bad magic"), "magic: %s", err);
    unsigned char v9[16] = "\x93NUMPY\x09\x00";
    CHECK(npy_parse("v.npy", v9, sizeof v9, &a, err, sizeof err) == -1 && strstr(err, "version 9"), "version: %s", err);
    CHECK(npy_read("/nonexistent/x.npy", &a, err, sizeof err) == -1 && strstr(err, "cannot open"), "open: %s", err);

    /* writer round trip */
    const char *path = "npy_test_roundtrip.npy";
    char tmpd[512];
    const char *td = getenv("TEST_TMPDIR");
    snprintf(tmpd, sizeof tmpd, "%s/%s", td ? td : "/tmp", path);
    int64_t shape[3] = { 2, 1, 3 };
    float vals[6] = { 0.5f, -1, 3, 1e-3f, 65504, -0.0f };
    CHECK(npy_write(tmpd, NPY_F32, 3, shape, vals, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(npy_read(tmpd, &a, err, sizeof err) == 0 && a.ndim == 3 && a.count == 6 && memcmp(a.data, vals, sizeof vals) == 0, "round trip: %s", err);
    npy_free(&a);

    printf("%d checks, %d failed\n", checks, failures);
    return failures != 0;
}
