#!/usr/bin/env python3
"""pottery (PyPI `pottery`, its Redlock class, on redis-py) driver for
scripts/bench-client.

Uncontended acquire + release cycles over the first N of the given loopback
ports; prints one JSON object in the shape of
client/examples/bench_quorum.rs:

    target/bench-peers/py/bin/python scripts/bench-peers/pottery_bench.py \\
        --ports 7000,7001,7002 --n 3 --iterations 2000 --warmup 200

One cycle: Redlock.acquire(blocking=False) (SET key uuid NX PX on all N at
once, each in a thread of a fresh ThreadPoolExecutor; returns as soon as a
majority granted) then Redlock.release() (a compare-and-delete Lua script
on all N the same way; returns at a majority). Acquire latency = the
acquire call alone. pottery prefixes keys with "redlock:".
"""

import argparse
import json
import sys
import time
from importlib.metadata import version

from pottery import Redlock
from redis import Redis


def percentile_ms(sorted_ns, p):
    if not sorted_ns:
        return None
    i = min(len(sorted_ns) - 1, round((len(sorted_ns) - 1) * p))
    return sorted_ns[i] / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", required=True, help="comma-separated ports")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--ttl-ms", type=int, default=10_000)
    ap.add_argument("--prefix", default="bench:py")
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    ports = [int(p) for p in args.ports.split(",") if p]
    if not 1 <= args.n <= len(ports):
        ap.error(f"--n {args.n} must be 1..{len(ports)} (the ports given)")

    masters = [
        Redis(host="127.0.0.1", port=p, socket_timeout=2, socket_connect_timeout=2)
        for p in ports[: args.n]
    ]
    for m in masters:
        m.ping()
    # One Redlock object per resource, made up front (a Redlock's key is fixed).
    locks = [
        Redlock(key=f"{args.prefix}:{i}", masters=masters, auto_release_time=args.ttl_ms / 1000)
        for i in range(16)
    ]

    for i in range(args.warmup):
        lock = locks[i % 16]
        if not lock.acquire(blocking=False):
            raise SystemExit(f"pottery: warm-up acquire of {lock.key} failed")
        lock.release()

    acquire, release, failures = [], [], 0
    started = time.perf_counter_ns()
    deadline = started + int(args.max_seconds * 1e9)
    for i in range(args.iterations):
        if time.perf_counter_ns() > deadline:
            break
        lock = locks[i % 16]
        t0 = time.perf_counter_ns()
        ok = lock.acquire(blocking=False)
        t1 = time.perf_counter_ns()
        if not ok:
            failures += 1
            print(f"pottery: acquire {lock.key}: no quorum", file=sys.stderr)
            continue
        acquire.append(t1 - t0)
        try:
            lock.release()
        except Exception as e:  # ReleaseUnlockedLock, redis errors
            failures += 1
            print(f"pottery: release {lock.key}: {e!r}", file=sys.stderr)
        release.append(time.perf_counter_ns() - t1)
    wall = (time.perf_counter_ns() - started) / 1e9
    acquire.sort()
    release.sort()
    print(json.dumps({
        "client": f"pottery {version('pottery')} (redis-py {version('redis')})",
        "label": args.label, "n": args.n, "iterations": args.iterations,
        "completed": len(acquire), "failures": failures, "seconds": wall,
        "ops_per_s": len(acquire) / wall,
        "acquire_p50_ms": percentile_ms(acquire, 0.5),
        "acquire_p99_ms": percentile_ms(acquire, 0.99),
        "release_p50_ms": percentile_ms(release, 0.5),
    }), flush=True)


if __name__ == "__main__":
    main()
