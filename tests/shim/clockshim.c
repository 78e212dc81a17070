/*
 * LD_PRELOAD clock shim for tests: moves a process's wall clock at run time.
 *
 * CLOCKSHIM_FILE names a file holding one signed integer: milliseconds added
 * to CLOCK_REALTIME (and to gettimeofday and time). Writing a new number into
 * the file jumps the clock; the file is re-read at most every 5 ms. The
 * monotonic clocks are left alone: that is the point of the tests that use it
 * (lock validity must follow the monotonic clock, not the wall clock).
 *
 * Built on raw syscalls, with no dlsym and no malloc: libfaketime's approach
 * hangs Debian's redis-server (jemalloc initialisation re-enters it).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms;
static long long next_read_ns;

static int raw_clock(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static long long parse(const char *s, long n) {
    long long v = 0;
    int neg = 0, i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\n')) i++;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) v = v * 10 + (s[i] - '0');
    return neg ? -v : v;
}

static long long current_offset_ms(void) {
    struct timespec mono;
    if (raw_clock(CLOCK_MONOTONIC, &mono) != 0) return offset_ms;
    long long now = (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec;
    if (now < next_read_ns) return offset_ms;
    next_read_ns = now + 5000000LL;
    const char *path = getenv("CLOCKSHIM_FILE");
    if (!path) return offset_ms;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    if (fd < 0) return offset_ms;
    char buf[32];
    long n = (long)syscall(SYS_read, fd, buf, sizeof buf);
    syscall(SYS_close, fd);
    if (n > 0) offset_ms = parse(buf, n);
    return offset_ms;
}

static void shift(struct timespec *ts, long long ms) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + ms * 1000000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = raw_clock(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts, current_offset_ms());
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    /* glibc declares tv nonnull, but callers do pass NULL. */
    struct timeval *volatile out = tv;
    if (rc == 0 && out) {
        out->tv_sec = ts.tv_sec;
        out->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
