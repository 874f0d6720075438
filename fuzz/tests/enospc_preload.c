/* enospc_preload.c: a test-only LD_PRELOAD shim that makes write() and pwrite() fail with
 * ENOSPC ("No space left on device") for every file under the directory named by
 * FC_TEST_ENOSPC_DIR, like a full disk there, and behave normally elsewhere. Used by the
 * tests of issue 12 (nothing lost on a full disk); never linked into a shipped binary. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int under_full_dir(int fd)
{
    const char *dir = getenv("FC_TEST_ENOSPC_DIR");
    if (!dir || !*dir) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    size_t l = strlen(dir);
    return strncmp(path, dir, l) == 0 && (path[l] == '/' || path[l] == 0);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    if (n > 0 && under_full_dir(fd)) { errno = ENOSPC; return -1; }
    return real(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    if (n > 0 && under_full_dir(fd)) { errno = ENOSPC; return -1; }
    return real(fd, buf, n, off);
}
