/* rp_progress.c: the progress line (rp_progress.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report/rp_progress.h"

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void rp_progress_elapsed(double s, char *buf, size_t n)
{
    long t = s > 0 ? (long)s : 0;
    if (t < 60) snprintf(buf, n, "%lds", t);
    else if (t < 3600) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
}

void rp_progress_start(rp_progress *p, FILE *f, const char *what, const char *unit, int64_t total, int quiet)
{
    memset(p, 0, sizeof *p);
    p->f = f;
    p->on = !quiet && f && isatty(fileno(f));
    p->t0 = mono_s();
    p->last = -1;
    p->total = total;
    snprintf(p->what, sizeof p->what, "%s", what ? what : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
}

void rp_progress_total(rp_progress *p, int64_t total) { p->total = total; }

void rp_progress_update(rp_progress *p, int64_t done, const char *note)
{
    if (!p->on) return;
    double now = mono_s();
    int final = p->total > 0 && done >= p->total;
    if (p->last >= 0 && now - p->last < 0.1 && !final) return;
    p->last = now;
    char el[32], line[400];
    rp_progress_elapsed(now - p->t0, el, sizeof el);
    int n;
    if (p->total > 0)
        n = snprintf(line, sizeof line, "%s: %lld/%lld %s, %s%s%s", p->what, (long long)done, (long long)p->total, p->unit, el,
                     note ? ", " : "", note ? note : "");
    else
        n = snprintf(line, sizeof line, "%s: %lld %s, %s%s%s", p->what, (long long)done, p->unit, el, note ? ", " : "",
                     note ? note : "");
    if (n < 0) return;
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    /* blank what is left of a longer previous line */
    fprintf(p->f, "\r%s%*s", line, p->width > n ? p->width - n : 0, "");
    if (p->width > n) fprintf(p->f, "\r%s", line);
    p->width = n;
    fflush(p->f);
}

void rp_progress_end(rp_progress *p)
{
    if (p->on && p->width > 0) {
        fputc('\n', p->f);
        fflush(p->f);
    }
    p->width = 0;
}
