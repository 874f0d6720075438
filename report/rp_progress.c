/* rp_progress.c: the progress line (rp_progress.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "case/case.h"
#include "report/rp_progress.h"

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
    p->t0 = fc_clock_s();
    p->last = -1;
    p->total = total;
    snprintf(p->what, sizeof p->what, "%s", what ? what : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
    pthread_mutex_init(&p->mu, NULL);
}

void rp_progress_total(rp_progress *p, int64_t total)
{
    pthread_mutex_lock(&p->mu);
    p->total = total;
    pthread_mutex_unlock(&p->mu);
}

/* draw the current state; caller holds mu */
static void draw(rp_progress *p, double now)
{
    char el[32], line[400];
    rp_progress_elapsed(now - p->t0, el, sizeof el);
    int n;
    const char *sep = p->note[0] ? ", " : "";
    if (p->total > 0)
        n = snprintf(line, sizeof line, "%s: %lld/%lld %s, %s%s%s", p->what, (long long)p->done, (long long)p->total, p->unit,
                     el, sep, p->note);
    else
        n = snprintf(line, sizeof line, "%s: %lld %s, %s%s%s", p->what, (long long)p->done, p->unit, el, sep, p->note);
    if (n < 0) return;
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    /* blank what is left of a longer previous line */
    fprintf(p->f, "\r%s%*s", line, p->width > n ? p->width - n : 0, "");
    if (p->width > n) fprintf(p->f, "\r%s", line);
    p->width = n;
    p->last = now;
    fflush(p->f);
}

void rp_progress_update(rp_progress *p, int64_t done, const char *note)
{
    if (!p->on) return;
    pthread_mutex_lock(&p->mu);
    p->done = done;
    snprintf(p->note, sizeof p->note, "%s", note ? note : "");
    double now = fc_clock_s();
    int final = p->total > 0 && done >= p->total;
    if (p->last < 0 || p->width == 0 || now - p->last >= 0.1 || final) draw(p, now);
    pthread_mutex_unlock(&p->mu);
}

void rp_progress_clear(rp_progress *p)
{
    if (!p->on) return;
    pthread_mutex_lock(&p->mu);
    if (p->width > 0) {
        fprintf(p->f, "\r%*s\r", p->width, "");
        fflush(p->f);
        p->width = 0;
    }
    pthread_mutex_unlock(&p->mu);
}

typedef struct { rp_progress *p; double period; } tick_arg;
static tick_arg tick_args[1];

static void *tick(void *arg)
{
    rp_progress *p = ((tick_arg *)arg)->p;
    double period = ((tick_arg *)arg)->period;
    double next = fc_clock_s() + period;
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        double now = fc_clock_s();
        if (now < next) continue;
        next = now + period;
        pthread_mutex_lock(&p->mu);
        if (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) draw(p, now);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

int rp_progress_ticker(rp_progress *p, double period)
{
    if (!p->on || p->ticking) return 0;
    /* one ticker at a time in a process (a progress line owns the terminal line anyway) */
    tick_args[0].p = p;
    tick_args[0].period = period > 0.05 ? period : 0.05;
    __atomic_store_n(&p->stop, 0, __ATOMIC_RELEASE);
    if (pthread_create(&p->th, NULL, tick, &tick_args[0]) != 0) return -1;
    p->ticking = 1;
    return 0;
}

void rp_progress_end(rp_progress *p)
{
    if (p->ticking) {
        __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
        pthread_join(p->th, NULL);
        p->ticking = 0;
    }
    if (p->on && p->width > 0) {
        fputc('\n', p->f);
        fflush(p->f);
    }
    p->width = 0;
}
