/* rp_progress.h: one progress line for long runs (prefix rp_progress_).
 *
 * On a terminal the line is redrawn in place with '\r':
 *   "flashcheck certify: 37/212 cases, 1m05s"
 * and finished with a newline by rp_progress_end. When the stream is not a
 * terminal (a log file, a pipe, CI) or the caller is quiet, nothing at all is
 * printed: logs keep only the commands' own result lines.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_RP_PROGRESS_H
#define FLASHCHECK_RP_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    FILE *f;
    int on;            /* 1: f is a terminal and not quiet */
    double t0, last;   /* CLOCK_MONOTONIC seconds: start, last redraw */
    int64_t total;     /* <= 0: unknown (no "/total") */
    int width;         /* characters of the last line drawn (to blank its tail) */
    char what[96];     /* "flashcheck certify" */
    char unit[32];     /* "cases" */
} rp_progress;

/* Start a line for `what` counting `unit` up to total (<= 0: unknown).
 * on = !quiet && isatty(fileno(f)). Prints nothing yet. */
void rp_progress_start(rp_progress *p, FILE *f, const char *what, const char *unit, int64_t total, int quiet);
/* Redraw with done items and an optional note (NULL: none), at most ten times a
 * second, always for the first and the last (done == total) update. */
void rp_progress_update(rp_progress *p, int64_t done, const char *note);
/* A new total (e.g. a phase that learns its size late). */
void rp_progress_total(rp_progress *p, int64_t total);
/* End the line (newline) if anything was drawn. */
void rp_progress_end(rp_progress *p);
/* "12s", "3m05s", "2h07m" into buf. */
void rp_progress_elapsed(double seconds, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_RP_PROGRESS_H */
