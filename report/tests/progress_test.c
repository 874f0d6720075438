/* progress_test.c: the progress line is silent when stderr is not a terminal
 * or quiet, and redraws one line with '\r' on a pseudo-terminal. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/rp_progress.h"

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static void run(FILE *f, int quiet)
{
    rp_progress p;
    rp_progress_start(&p, f, "flashcheck test", "cases", 3, quiet);
    for (int i = 1; i <= 3; i++) { rp_progress_update(&p, i, i == 2 ? "a note" : NULL); usleep(120000); }
    rp_progress_end(&p);
}

/* everything readable from the pty master now */
static size_t drain(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        struct pollfd pf = { fd, POLLIN, 0 };
        if (poll(&pf, 1, 200) <= 0 || n + 1 >= cap) break;
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
    }
    buf[n] = 0;
    return n;
}

int main(void)
{
    /* not a terminal: a file gets nothing */
    FILE *f = tmpfile();
    run(f, 0);
    fflush(f);
    CHECK(ftell(f) == 0, "%ld bytes written to a non-terminal", ftell(f));
    fclose(f);

    char el[32];
    rp_progress_elapsed(5.9, el, sizeof el);
    CHECK(strcmp(el, "5s") == 0, "%s", el);
    rp_progress_elapsed(65, el, sizeof el);
    CHECK(strcmp(el, "1m05s") == 0, "%s", el);
    rp_progress_elapsed(7500, el, sizeof el);
    CHECK(strcmp(el, "2h05m") == 0, "%s", el);

    /* a pseudo-terminal */
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) || unlockpt(m)) {
        printf("no pseudo-terminal here: pty part not run\n");
        return failures ? 1 : 0;
    }
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    CHECK(s >= 0 && isatty(s), "pty slave");
    FILE *t = fdopen(s, "w");
    char buf[4096];
    run(t, 1);
    CHECK(drain(m, buf, sizeof buf) == 0, "quiet on a terminal printed '%s'", buf);
    run(t, 0);
    size_t n = drain(m, buf, sizeof buf);
    CHECK(n > 0, "nothing on the terminal");
    CHECK(strstr(buf, "\rflashcheck test: 1/3 cases, 0s") != NULL, "first update: '%s'", buf);
    CHECK(strstr(buf, "\rflashcheck test: 2/3 cases, 0s, a note") != NULL, "note: '%s'", buf);
    CHECK(strstr(buf, "\rflashcheck test: 3/3 cases, 0s") != NULL, "last update: '%s'", buf);
    /* one line: a single newline (the terminal turns it into \r\n), at the end */
    char *nl = strchr(buf, '\n');
    CHECK(nl && strchr(nl + 1, '\n') == NULL && nl[1] == 0, "exactly one final newline: '%s'", buf);

    /* clear: the line is erased, the next update draws it again */
    rp_progress p;
    rp_progress_start(&p, t, "flashcheck test", "runs", 10, 0);
    rp_progress_update(&p, 1, NULL);
    rp_progress_clear(&p);
    rp_progress_update(&p, 2, NULL);
    rp_progress_end(&p);
    drain(m, buf, sizeof buf);
    char want[200];
    snprintf(want, sizeof want, "1/10 runs, 0s\r%*s\r\rflashcheck test: 2/10 runs", (int)strlen("flashcheck test: 1/10 runs, 0s"), "");
    CHECK(strstr(buf, want) != NULL, "clear: '%s'", buf);

    /* ticker: redraws by itself while the caller is busy */
    rp_progress_start(&p, t, "flashcheck test", "steps", 2, 0);
    rp_progress_update(&p, 0, "busy");
    CHECK(rp_progress_ticker(&p, 0.1) == 0, "ticker");
    usleep(450000);
    rp_progress_end(&p);
    n = drain(m, buf, sizeof buf);
    int draws = 0;
    for (char *q = buf; (q = strstr(q, "0/2 steps, 0s, busy")) != NULL; q++) draws++;
    CHECK(draws >= 3, "%d draws in 0.45 s with a 0.1 s ticker: '%s'", draws, buf);
    /* the ticker never starts off a terminal */
    f = tmpfile();
    rp_progress_start(&p, f, "x", "y", 2, 0);
    CHECK(rp_progress_ticker(&p, 0.05) == 0 && !p.ticking, "ticker off a terminal");
    usleep(150000);
    rp_progress_end(&p);
    fflush(f);
    CHECK(ftell(f) == 0, "ticker wrote to a non-terminal");
    fclose(f);
    fclose(t);
    close(m);
    if (failures) { fprintf(stderr, "%d check(s) failed\n", failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
