#!/usr/bin/env python3
"""One measurement of scripts/bench-python: acquire + release cycles of one
Python lock client against the first N of the given loopback masters, for
a fixed time, by one caller or by many threads / asyncio tasks sharing one
client. Prints one JSON object.

    python python_locks.py --client ours --ports 7000,7001,7002 --n 3 --concurrency 64 --seconds 2

Clients (each as its users would call it, one attempt per acquire, no
waiting):
  ours             redlock_client.Redlock: try_acquire + release (sync; many = threads)
  ours-async       redlock_client.AsyncRedlock: the same awaited (many = asyncio tasks)
  pottery          pottery.Redlock(masters=N): acquire(blocking=False) + release (threads)
  aioredlock       aioredlock.Aioredlock(N nodes, retry_count=1): lock(lock_timeout) + unlock (tasks)
  python-redis-lock  redis_lock.Lock(one node): acquire(blocking=False) + release (threads)
  redis-py         redis.Redis.lock(one node): acquire(blocking=False) + release (threads)

Each worker cycles over 4 resources of its own (never contended). The cycle
latency is one acquire plus its release; the CPU time is this process's
(all its threads, user + system) over the measured part, warm-up excluded.
"""

import argparse
import asyncio
import json
import resource
import sys
import threading
import time
from importlib.metadata import version

ASYNC_CLIENTS = {"ours-async", "aioredlock"}
ONE_NODE_CLIENTS = {"python-redis-lock", "redis-py"}


def percentile_ms(sorted_ns, p):
    if not sorted_ns:
        return None
    return sorted_ns[min(len(sorted_ns) - 1, round((len(sorted_ns) - 1) * p))] / 1e6


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- sync clients: make(urls/ports) -> cycle(resource) that returns
# (acquire ns, cycle ns) or None when refused -------------------------------


def sync_client(name, ports, ttl):
    if name == "ours":
        from redlock_client import LockHeldError, NoQuorumError, Redlock

        locks = Redlock([f"redis://127.0.0.1:{p}/" for p in ports])

        def cycle(key):
            t0 = time.perf_counter_ns()
            try:
                lock = locks.try_acquire(key, ttl=ttl)
            except (LockHeldError, NoQuorumError):
                return None
            t1 = time.perf_counter_ns()
            lock.release()
            return t1 - t0, time.perf_counter_ns() - t0

        return cycle, f"redlock_client {version('redlock-client')}"

    from redis import Redis

    masters = [Redis(host="127.0.0.1", port=p, socket_timeout=2, socket_connect_timeout=2) for p in ports]
    for m in masters:
        m.ping()
    objects = {}
    if name == "pottery":
        from pottery import Redlock

        def make(key):
            return Redlock(key=key, masters=masters, auto_release_time=ttl)

        label = f"pottery {version('pottery')} (redis-py {version('redis')})"
    elif name == "python-redis-lock":
        import redis_lock

        def make(key):
            return redis_lock.Lock(masters[0], key, expire=max(1, round(ttl)))

        label = f"python-redis-lock {version('python-redis-lock')}"
    elif name == "redis-py":

        def make(key):
            return masters[0].lock(key, timeout=ttl)

        label = f"redis-py {version('redis')} Lock"
    else:
        raise SystemExit(f"unknown client {name}")

    def cycle(key):
        lock = objects.get(key)
        if lock is None:
            lock = objects[key] = make(key)
        t0 = time.perf_counter_ns()
        if not lock.acquire(blocking=False):
            return None
        t1 = time.perf_counter_ns()
        lock.release()
        return t1 - t0, time.perf_counter_ns() - t0

    return cycle, label


def run_threads(cycle, args):
    results = [[] for _ in range(args.concurrency)]
    failures = [0] * args.concurrency
    start_line = threading.Barrier(args.concurrency + 1)
    bounds = {"end": float("inf")}

    warm_until = time.perf_counter() + args.warmup_seconds

    def worker(w):
        keys = [f"{args.prefix}:{w}:{k}" for k in range(4)]
        for i in range(args.warmup):
            if time.perf_counter() > warm_until:
                break
            cycle(keys[i % 4])
        start_line.wait()
        i = 0
        while time.perf_counter() < bounds["end"]:
            timing = cycle(keys[i % 4])
            i += 1
            if timing is None:
                failures[w] += 1
            else:
                results[w].append(timing)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.concurrency)]
    for t in threads:
        t.start()
    # Everyone warmed up: measure from here.
    start_line.wait()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    bounds["end"] = t0 + args.seconds
    for t in threads:
        t.join()
    return [r for rs in results for r in rs], sum(failures), time.perf_counter() - t0, cpu_seconds() - cpu0


# --- asyncio clients --------------------------------------------------------


async def async_client(name, ports, ttl):
    if name == "ours-async":
        from redlock_client import AsyncRedlock, LockHeldError, NoQuorumError

        locks = await AsyncRedlock.connect([f"redis://127.0.0.1:{p}/" for p in ports])

        async def cycle(key):
            t0 = time.perf_counter_ns()
            try:
                lock = await locks.try_acquire(key, ttl=ttl)
            except (LockHeldError, NoQuorumError):
                return None
            t1 = time.perf_counter_ns()
            await lock.release()
            return t1 - t0, time.perf_counter_ns() - t0

        return cycle, f"redlock_client {version('redlock-client')} (asyncio)", None

    from aioredlock import Aioredlock, LockError

    manager = Aioredlock([{"host": "127.0.0.1", "port": p} for p in ports], retry_count=1)

    async def cycle(key):
        t0 = time.perf_counter_ns()
        try:
            lock = await manager.lock(key, lock_timeout=ttl)
        except LockError:
            return None
        t1 = time.perf_counter_ns()
        await manager.unlock(lock)
        return t1 - t0, time.perf_counter_ns() - t0

    return cycle, f"aioredlock {version('aioredlock')} (aioredis {version('aioredis')})", manager.destroy


async def run_tasks(name, ports, args):
    cycle, label, close = await async_client(name, ports, args.ttl_ms / 1000)
    results = [[] for _ in range(args.concurrency)]
    failures = [0] * args.concurrency
    bounds = {"end": float("inf")}

    warm_until = time.perf_counter() + args.warmup_seconds

    async def warm(w):
        for i in range(args.warmup):
            if time.perf_counter() > warm_until:
                break
            await cycle(f"{args.prefix}:{w}:{i % 4}")

    async def worker(w):
        i = 0
        while time.perf_counter() < bounds["end"]:
            timing = await cycle(f"{args.prefix}:{w}:{i % 4}")
            i += 1
            if timing is None:
                failures[w] += 1
            else:
                results[w].append(timing)

    await asyncio.gather(*(warm(w) for w in range(args.concurrency)))
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    bounds["end"] = t0 + args.seconds
    await asyncio.gather(*(worker(w) for w in range(args.concurrency)))
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    if close is not None:
        await close()
    return label, [r for rs in results for r in rs], sum(failures), wall, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--client", required=True)
    ap.add_argument("--ports", required=True, help="comma-separated ports")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=50, help="cycles per worker before measuring")
    ap.add_argument("--warmup-seconds", type=float, default=10.0,
                    help="the warm-up ends after this long even if --warmup cycles were not all done "
                         "(a slow client with many workers)")
    ap.add_argument("--ttl-ms", type=int, default=10_000)
    ap.add_argument("--prefix", default="bench:py")
    args = ap.parse_args()
    ports = [int(p) for p in args.ports.split(",") if p][: args.n]
    if len(ports) != args.n:
        ap.error(f"--n {args.n}: only {len(ports)} ports given")
    if args.client in ONE_NODE_CLIENTS and args.n != 1:
        ap.error(f"{args.client} locks one node only")

    if args.client in ASYNC_CLIENTS:
        label, timings, failures, wall, cpu = asyncio.run(run_tasks(args.client, ports, args))
    else:
        cycle, label = sync_client(args.client, ports, args.ttl_ms / 1000)
        timings, failures, wall, cpu = run_threads(cycle, args)
    acquire = sorted(t[0] for t in timings)
    cycles = sorted(t[1] for t in timings)
    print(json.dumps({
        "client": label, "family": args.client, "n": args.n, "concurrency": args.concurrency,
        "completed": len(timings), "failures": failures, "seconds": wall,
        "ops_per_s": len(timings) / wall,
        "acquire_p50_ms": percentile_ms(acquire, 0.5),
        "cycle_p50_ms": percentile_ms(cycles, 0.5), "cycle_p99_ms": percentile_ms(cycles, 0.99),
        "cpu_us_per_cycle": cpu * 1e6 / max(1, len(timings)),
        "python": sys.version.split()[0],
    }), flush=True)


if __name__ == "__main__":
    main()
