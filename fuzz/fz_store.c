/* fz_store.c: see fz_store.h. */
#define _GNU_SOURCE
#include "fuzz/fz_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int st_err(char *msg, size_t len, const char *fmt, ...)
{
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ------------------------------------------------------------------------- */
/* crash state                                                               */

static void len_bucket(int64_t n, char *buf, size_t len)
{
    if (n <= 1) { snprintf(buf, len, "%lld", (long long)n); return; }
    int k = 0;
    while (((int64_t)1 << k) < n) k++;
    snprintf(buf, len, "<=2^%d%s", k, n % 16 ? ",tail" : "");
}

void fz_shape_bucket(const fc_case *c, char *buf, size_t len)
{
    char sq[24], sk[24];
    len_bucket(c->p.seqlen_q, sq, sizeof sq);
    len_bucket(c->p.seqlen_k, sk, sizeof sk);
    snprintf(buf, len, "sq=%s sk=%s d=%lld/%lld%s", sq, sk, (long long)c->p.head_dim_qk,
             (long long)c->p.head_dim_v, c->p.heads_q > c->p.heads_kv ? " gqa" : "");
}

void fz_mask_bucket(const fc_case *c, char *buf, size_t len)
{
    static const char *causal[] = { "", "+top_left", "+bottom_right" };
    int win = c->p.window_left >= 0 || c->p.window_right >= 0;
    snprintf(buf, len, "%s%s%s", fc_mask_name(c->mask.kind),
             (unsigned)c->p.causal <= 2 ? causal[c->p.causal] : "+?", win ? "+win" : "");
}

static void copy_field(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src && *src ? src : "-");
}

void fz_crash_state_make(fz_crash_state *s, const fc_case *c, const char *backend,
                         const char *pass, const char *tensor, const char *failure)
{
    memset(s, 0, sizeof *s);
    copy_field(s->backend, sizeof s->backend, backend);
    copy_field(s->pass, sizeof s->pass, pass);
    copy_field(s->tensor, sizeof s->tensor, tensor);
    copy_field(s->failure, sizeof s->failure, failure);
    fz_shape_bucket(c, s->shape, sizeof s->shape);
    fz_mask_bucket(c, s->mask, sizeof s->mask);
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (;; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001B3ull;
        if (!*s) return h;
    }
}

uint64_t fz_crash_state_hash(const fz_crash_state *s)
{
    uint64_t h = 0xCBF29CE484222325ull;
    h = fnv1a(h, s->backend);
    h = fnv1a(h, s->pass);
    h = fnv1a(h, s->tensor);
    h = fnv1a(h, s->failure);
    h = fnv1a(h, s->shape);
    h = fnv1a(h, s->mask);
    return h;
}

void fz_crash_state_format(const fz_crash_state *s, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s/%s/%s/%s/%s", s->backend, s->pass, s->tensor, s->failure, s->shape, s->mask);
}

/* ------------------------------------------------------------------------- */
/* files                                                                     */

int fz_mkdirs(const char *dir, char *msg, size_t msglen)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return st_err(msg, msglen, "%s: path too long", dir);
    for (char *p = path + 1; ; p++) {
        if (*p == '/' || *p == 0) {
            char saved = *p;
            *p = 0;
            if (mkdir(path, 0755) != 0 && errno != EEXIST)
                return st_err(msg, msglen, "cannot create directory %s: %s", path, strerror(errno));
            *p = saved;
            if (!saved) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return st_err(msg, msglen, "%s exists and is not a directory", dir);
    return 0;
}

/* write text to a fresh temp file next to path; returns its name in tmp */
static int write_temp(const char *path, const char *text, size_t len, char *tmp, size_t tmplen,
                      char *msg, size_t msglen)
{
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path) : 1;
    static unsigned counter;
    snprintf(tmp, tmplen, "%.*s/.tmp-%ld-%u-%s", dirlen, slash ? path : ".", (long)getpid(), counter++,
             slash ? slash + 1 : path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return st_err(msg, msglen, "cannot create %s: %s", tmp, strerror(errno));
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return st_err(msg, msglen, "cannot write %s: %s", tmp, strerror(e));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(tmp);
        return st_err(msg, msglen, "cannot flush %s: %s", tmp, strerror(errno));
    }
    return 0;
}

int fz_write_atomic(const char *path, const char *text, size_t len, char *msg, size_t msglen)
{
    char tmp[4400];
    if (write_temp(path, text, len, tmp, sizeof tmp, msg, msglen) != 0) return -1;
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return st_err(msg, msglen, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    return 0;
}

int fz_write_new(const char *path, const char *text, size_t len, char *msg, size_t msglen)
{
    char tmp[4400];
    if (access(path, F_OK) == 0) return 0;
    if (write_temp(path, text, len, tmp, sizeof tmp, msg, msglen) != 0) return -1;
    int r = 1;
    if (link(tmp, path) != 0) {
        if (errno == EEXIST) {
            r = 0;
        } else if (access(path, F_OK) == 0) {
            r = 0;
        } else if (rename(tmp, path) != 0) {     /* no hard links here: plain atomic rename */
            int e = errno;
            unlink(tmp);
            return st_err(msg, msglen, "cannot rename %s to %s: %s", tmp, path, strerror(e));
        } else {
            return 1;
        }
    }
    unlink(tmp);
    return r;
}

int fz_store_save(const char *dir, const fz_crash_state *s, const fc_case *c, const char *detail,
                  char *path, size_t pathlen, char *msg, size_t msglen)
{
    char local[4200];
    if (!path) { path = local; pathlen = sizeof local; }
    if (fz_mkdirs(dir, msg, msglen) != 0) return -1;
    uint64_t h = fz_crash_state_hash(s);
    snprintf(path, pathlen, "%s/%016llx.case", dir, (unsigned long long)h);

    char state[256];
    fz_crash_state_format(s, state, sizeof state);
    size_t cap = 4096 + (detail ? strlen(detail) * 2 : 0);
    size_t need = fc_case_write(c, NULL, 0);
    cap += need + 1;
    char *text = malloc(cap);
    if (!text) return st_err(msg, msglen, "out of memory");
    size_t n = (size_t)snprintf(text, cap, "# flashcheck finding %016llx\n# state: %s\n",
                                (unsigned long long)h, state);
    if (detail) {                     /* each detail line as a comment */
        const char *p = detail;
        while (*p && n + 8 < cap) {
            const char *e = strchr(p, '\n');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            n += (size_t)snprintf(text + n, cap - n, "# %.*s\n", (int)l, p);
            p = e ? e + 1 : p + l;
        }
    }
    n += fc_case_write(c, text + n, cap - n);
    int r = fz_write_new(path, text, n, msg, msglen);
    free(text);
    return r;
}
