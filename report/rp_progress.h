/* rp_progress.h: one progress line for long runs (prefix rp_progress_).
 *
 * On a terminal the line is redrawn in place with '\r':
 *   "flashcheck certify: 37/212 cases, 1m05s, mask"
 * (done/total, elapsed time, an optional note) and finished with a newline by
 * rp_progress_end. When the stream is not a terminal (a log file, a pipe, CI)
 * or the caller is quiet, nothing at all is printed: logs keep only the
 * commands' own result lines.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_RP_PROGRESS_H
#define FLASHCHECK_RP_PROGRESS_H

#include <pthread.h>
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
    int64_t done;
    int width;         /* characters on the terminal line now (0: none) */
    char what[96];     /* "flashcheck certify" */
    char unit[32];     /* "cases" */
    char note[96];
    /* ticker (rp_progress_ticker) */
    pthread_mutex_t mu;
    pthread_t th;
    int ticking;
    int stop;          /* atomic accesses only */
} rp_progress;

/* Start a line for `what` counting `unit` up to total (<= 0: unknown).
 * on = !quiet && isatty(fileno(f)). Prints nothing yet. */
void rp_progress_start(rp_progress *p, FILE *f, const char *what, const char *unit, int64_t total, int quiet);
/* Redraw with done items and an optional note (NULL: none), at most ten times a
 * second, always for the first and the last (done == total) update. */
void rp_progress_update(rp_progress *p, int64_t done, const char *note);
/* A new total (e.g. a phase that learns its size late). */
void rp_progress_total(rp_progress *p, int64_t total);
/* Erase the line so that other output can be printed; the next update redraws it. */
void rp_progress_clear(rp_progress *p);
/* Redraw every `period` seconds from a background thread (the elapsed time keeps
 * moving during one long call that cannot report, e.g. the oracle) until
 * rp_progress_end. Only when on; never across fork(). 0, or -1 when no thread
 * could be started (the line then just does not tick). */
int rp_progress_ticker(rp_progress *p, double period);
/* Stop the ticker; end the line (newline) if anything is drawn. */
void rp_progress_end(rp_progress *p);
/* "12s", "3m05s", "2h07m" into buf. */
void rp_progress_elapsed(double seconds, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_RP_PROGRESS_H */
