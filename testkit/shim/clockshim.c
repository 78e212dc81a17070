/*
 * LD_PRELOAD clock shim for tests: moves a process's wall clock at run time.
 *
 * CLOCKSHIM_FILE names a file holding one signed integer: milliseconds added
 * to CLOCK_REALTIME (and to gettimeofday and time). Writing a new number into
 * the file jumps the clock; the file is re-read at most every 5 ms. The
 * monotonic clocks are left alone: that is the point of the tests that use it
 * (lock validity must follow the monotonic clock, not the wall clock).
 *
 * An optional second number is a rate in parts per million: the monotonic
 * clocks then run that much fast (8000: 0.8% fast), a node whose oscillator
 * drifts, within the 1% + 2 ms that the quorum client budgets for drift. The
 * rate is read once, at the first monotonic reading, and never changes: the
 * clock stays monotonic and every thread scales it the same way (a pure
 * function of the raw reading). Wall-clock readings are not scaled.
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
/* -1 until read; then the monotonic rate in ppm (0: real rate). */
static volatile long long rate_ppm = -1;

static int raw_clock(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

/* Parses the signed integer at s[*at..n] and moves *at past it. */
static long long parse_at(const char *s, long n, long *at) {
    long long v = 0;
    int neg = 0;
    long i = *at;
    while (i < n && (s[i] == ' ' || s[i] == '\n')) i++;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) v = v * 10 + (s[i] - '0');
    *at = i;
    return neg ? -v : v;
}

/* Reads the clock file into buf; the number of bytes, or -1. */
static long read_file(char *buf, long size) {
    const char *path = getenv("CLOCKSHIM_FILE");
    if (!path) return -1;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    if (fd < 0) return -1;
    long n = (long)syscall(SYS_read, fd, buf, size);
    syscall(SYS_close, fd);
    return n;
}

static long long monotonic_rate_ppm(void) {
    long long rate = rate_ppm;
    if (rate >= 0) return rate;
    char buf[64];
    long n = read_file(buf, sizeof buf);
    long at = 0;
    rate = 0;
    if (n > 0) {
        parse_at(buf, n, &at);
        rate = parse_at(buf, n, &at);
        if (rate < 0 || rate > 100000) rate = 0;
    }
    rate_ppm = rate;
    return rate;
}

static long long current_offset_ms(void) {
    struct timespec mono;
    if (raw_clock(CLOCK_MONOTONIC, &mono) != 0) return offset_ms;
    long long now = (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec;
    if (now < next_read_ns) return offset_ms;
    next_read_ns = now + 5000000LL;
    char buf[64];
    long n = read_file(buf, sizeof buf);
    long at = 0;
    if (n > 0) offset_ms = parse_at(buf, n, &at);
    return offset_ms;
}

static int is_monotonic(clockid_t id) {
    return id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_RAW || id == CLOCK_MONOTONIC_COARSE ||
           id == CLOCK_BOOTTIME;
}

/* ns + ns * rate / 1e6, computed per whole microsecond so that it cannot
 * overflow and never runs backwards. */
static void scale(struct timespec *ts, long long rate) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec;
    ns += (ns / 1000LL) * rate / 1000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

static void shift(struct timespec *ts, long long ms) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + ms * 1000000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = raw_clock(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts, current_offset_ms());
    if (rc == 0 && is_monotonic(id)) {
        long long rate = monotonic_rate_ppm();
        if (rate > 0) scale(ts, rate);
    }
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
