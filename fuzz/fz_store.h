/* fz_store.h: findings, deduplicated by a numerical crash state, saved
 * atomically as human-readable repro files (prefix fz_).
 *
 * Stack-based deduplication is useless here (every failure is a check, not
 * a crash site), so a finding is keyed by WHAT went wrong numerically:
 *     backend, pass, tensor, failure class, shape bucket, mask kind.
 * Two findings with the same state are the same bug for triage; the first
 * one saved wins and later ones only bump a counter.
 *
 * Files: DIR/<16 hex digits of the state hash>.case, the case text
 * (case/case.h format) preceded by '#' comment lines naming the state and
 * the message, so `flashcheck repro FILE` replays it directly.
 * Saving is atomic and crash-safe: the text is written to a temporary file in
 * DIR, fsync'ed, and then link()ed to its final name (atomic, and it never
 * replaces an existing finding, even when several workers race on the same
 * state); on file systems without hard links it falls back to rename() after
 * an existence check. A reader never sees a half-written finding, and a
 * worker killed mid-write leaves at most a stale DIR/.tmp-* file.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_STORE_H
#define FLASHCHECK_FZ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "case/case.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char backend[32];   /* "cpu", "cuda", or the .so's backend name */
    char pass[8];       /* "fwd", "bwd", "api" */
    char tensor[24];    /* "o", "lse", "dq", "dk", "dv", "-", or (misuse) the corruption */
    char failure[32];   /* failure class: "bound", "nan", "unwritten", "oob_write", "crash", "hang", ... */
    char shape[48];     /* fz_shape_bucket() */
    char mask[40];      /* fz_mask_bucket() */
} fz_crash_state;

/* Shape bucket of a case: per length "0", "1", or "<=2^k" plus ",tail" when it is
 * not a multiple of 16 (a partial tile for every tile size >= 16); Dqk/Dv exactly;
 * "gqa" when Hq > Hkv. E.g. "sq=<=2^7,tail sk=1 d=72/72 gqa". */
void fz_shape_bucket(const fc_case *c, char *buf, size_t len);
/* Mask bucket: additive mask kind, causal mode, window: e.g. "full_rows+bottom_right+win". */
void fz_mask_bucket(const fc_case *c, char *buf, size_t len);

/* Fill the shape and mask buckets from the case and the rest from the arguments. */
void fz_crash_state_make(fz_crash_state *s, const fc_case *c, const char *backend,
                         const char *pass, const char *tensor, const char *failure);

/* FNV-1a 64 of the six fields (each with its terminating NUL). */
uint64_t fz_crash_state_hash(const fz_crash_state *s);
/* "backend/pass/tensor/failure/shape/mask" */
void fz_crash_state_format(const fz_crash_state *s, char *buf, size_t len);

/* Save a finding. Returns 1 when new (path filled, if non-NULL), 0 when a
 * finding with the same state already exists (path names it), -1 on error
 * (msg filled). `detail` (one or more lines, may be NULL) is written as
 * comment lines after the state. Creates DIR if it does not exist. */
int fz_store_save(const char *dir, const fz_crash_state *s, const fc_case *c, const char *detail,
                  char *path, size_t pathlen, char *msg, size_t msglen);

/* Write `text` to `path` atomically (temp file in the same directory, fsync,
 * rename). Replaces an existing file. 0 or -1 with msg. */
int fz_write_atomic(const char *path, const char *text, size_t len, char *msg, size_t msglen);
/* Same, but never replaces: 1 written, 0 exists, -1 error. */
int fz_write_new(const char *path, const char *text, size_t len, char *msg, size_t msglen);

/* mkdir -p (0755). 0 or -1 with msg. */
int fz_mkdirs(const char *dir, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_STORE_H */
