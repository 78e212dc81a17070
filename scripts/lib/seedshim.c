/*
 * LD_PRELOAD shim for the cost gate (scripts/cost-gate): the same random
 * bytes in every run, so that hash tables seeded from them (the server's
 * command table and keyspace, the module's own maps) lay out the same keys
 * the same way, and a call's instruction count does not move with the seed
 * (a command name that shares a bucket of the command table with another
 * costs a string comparison more on every lookup).
 *
 * getrandom() fills the buffer with a fixed pattern; fopen("/dev/urandom")
 * (Redis' getRandomBytes) opens /dev/zero instead. Never for anything but
 * measuring: nothing random is random under it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
    (void)flags;
    unsigned char *out = buf;
    for (size_t i = 0; i < len; i++) out[i] = (unsigned char)(i * 131 + 7);
    return (ssize_t)len;
}

static const char *instead(const char *path) {
    return path && strcmp(path, "/dev/urandom") == 0 ? "/dev/zero" : path;
}

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    if (!real) real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    return real(instead(path), mode);
}

FILE *fopen64(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    if (!real) real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen64");
    return real(instead(path), mode);
}
