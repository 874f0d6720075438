/* npy.h: a small, strict reader for NumPy .npy files (prefix npy_).
 *
 * Reads format versions 1.0, 2.0 and 3.0 with one of these element types:
 *   '<f2'            IEEE binary16                 -> NPY_F16
 *   '<f4'            IEEE binary32                 -> NPY_F32
 *   '<u2' '<V2' '|V2' bfloat16 bit patterns          -> NPY_BF16
 *   '<i4'            int32 (cu_seqlens, seqused_k, block tables) -> NPY_I32
 * The byte-order character may be '<' or '=' (this machine is little endian);
 * '|' is accepted for the void type only; '>' (big endian) is rejected.
 * C order and Fortran order are both read; the values are returned in C
 * (row-major) order converted to float. The conversion is exact: every fp16
 * and bf16 value is representable in binary32. int32 arrays are returned as
 * int32 (`ints`), not converted (a float cannot hold every int32).
 * Anything else (other dtypes, object arrays, truncated data, a header that
 * does not parse) is an error whose message names the file and what to fix.
 */
#ifndef FLASHCHECK_NPY_H
#define FLASHCHECK_NPY_H

#include <stdint.h>
#include <stddef.h>

#define NPY_MAX_DIMS 8

typedef enum { NPY_F16 = 0, NPY_BF16 = 1, NPY_F32 = 2, NPY_I32 = 3 } npy_kind;

typedef struct {
    npy_kind kind;          /* element type as stored in the file */
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    int64_t count;          /* product of shape (1 for a 0-d array) */
    float *data;            /* count values, C order, malloc'd (NULL for NPY_I32) */
    uint16_t *bits;         /* for NPY_F16/NPY_BF16: the raw 16-bit patterns in C order, else NULL */
    int32_t *ints;          /* for NPY_I32: count values in C order, else NULL */
} npy_array;

/* Read `path` into *out. Returns 0 on success; on failure returns -1, writes
 * a one-line message into err (errlen bytes) and leaves *out zeroed. */
int npy_read(const char *path, npy_array *out, char *err, size_t errlen);

/* Parse an in-memory .npy image (same contract as npy_read; `name` is used in
 * messages). */
int npy_parse(const char *name, const unsigned char *buf, size_t len, npy_array *out,
              char *err, size_t errlen);

void npy_free(npy_array *a);

const char *npy_kind_name(npy_kind k);

/* Write a C-order float32 or raw-16-bit array (v1.0 header). kind NPY_F32 takes
 * `f32`, NPY_F16/NPY_BF16 take `bits` (bf16 is written as '<u2').
 * Returns 0 or -1 with err filled. Written to a temporary name then renamed. */
int npy_write(const char *path, npy_kind kind, int ndim, const int64_t *shape,
              const float *f32, const uint16_t *bits, char *err, size_t errlen);

/* Exact conversions (no rounding: every half and bfloat16 value is a float). */
float npy_f16_to_f32(uint16_t h);
float npy_bf16_to_f32(uint16_t b);

#endif /* FLASHCHECK_NPY_H */
