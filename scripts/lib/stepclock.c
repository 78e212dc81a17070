/*
 * LD_PRELOAD shim for the cost gate's client rows (scripts/cost-gate): a
 * clock that reads 1 microsecond later at every reading, from a fixed
 * start, whatever the time. The client's runtime decides on the time
 * (its timer wheel's ticks, its deadlines), and under callgrind, where
 * the client runs some 50 times slower, the real clock made those
 * decisions, and the count, move from one run to the next. Never for
 * anything but counting: every clock is this one under it, and a timer
 * due in N microseconds takes N readings to come.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>

static uint64_t readings;

int clock_gettime(clockid_t clock, struct timespec *now) {
    (void)clock;
    uint64_t ns = 1000000000000ull + (++readings) * 1000ull;
    now->tv_sec = (time_t)(ns / 1000000000ull);
    now->tv_nsec = (long)(ns % 1000000000ull);
    return 0;
}
