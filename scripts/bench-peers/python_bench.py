#!/usr/bin/env python3
"""The measurements and the table of scripts/bench-python (run by it, with
the bench venv's interpreter; see that script for the knobs).

Starts 5 masters with the module (python/tests/nodes.py: free loopback
ports, own temp dirs, killed by PID at the end), then runs
scripts/bench-peers/python_locks.py once per client, N and concurrency,
for several rounds in a rotating order, each run in a process of its own
(pinned with taskset when asked) under a timeout; after each run the
client's keys still on the masters are counted (each is a lock left
behind). Prints the markdown table (medians over the rounds) and the ratio
lines of the goals.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(Path(__file__).parent))

from nodes import Cluster, server_name  # noqa: E402
from report import fmt  # noqa: E402  (scripts/bench-client's number format)

DRIVER = Path(__file__).with_name("python_locks.py")
# (family, N values, label) in table order.
CLIENTS = [
    ("ours", (1, 5), "redlock_client (sync; 64 = threads)"),
    ("ours-async", (1, 5), "redlock_client (asyncio; 64 = tasks)"),
    ("pottery", (1, 5), "pottery.Redlock (threads)"),
    ("aioredlock", (1, 5), "aioredlock (tasks)"),
    ("python-redis-lock", (1,), "python-redis-lock (one node; threads)"),
    ("redis-py", (1,), "redis-py Lock (one node; threads)"),
]
OURS = ("ours", "ours-async")


def run_one(args, cluster, family, n, concurrency, round_no):
    prefix = f"bench:{family}:{n}:{concurrency}:{round_no}"
    command = [
        *args.client_prefix, sys.executable, str(DRIVER), "--client", family,
        "--ports", ",".join(str(s.port) for s in cluster.servers), "--n", str(n),
        "--concurrency", str(concurrency), "--seconds", str(args.seconds), "--prefix", prefix,
        "--warmup", str(args.warmup if concurrency == 1 else max(2, args.warmup // 10)),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.seconds * 10 + 60)
    if done.returncode != 0 or not done.stdout.strip().startswith("{"):
        raise SystemExit(f"bench-python: {family} N={n} x{concurrency} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["left_keys"] = sum(len(s.call("KEYS", f"{prefix}:*")) for s in cluster.servers)  # type: ignore[arg-type]
    row["round"] = round_no
    print(f"bench-python: {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def report(rows, args):
    by = {}
    for r in rows:
        by.setdefault((r["family"], r["n"], r["concurrency"]), []).append(r)
    med = {}
    for key, rs in by.items():
        m = {f: statistics.median(r[f] for r in rs if r.get(f) is not None)
             for f in ("ops_per_s", "acquire_p50_ms", "cycle_p50_ms", "cycle_p99_ms", "cpu_us_per_cycle")}
        ops = [r["ops_per_s"] for r in rs]
        m.update(lo=min(ops), hi=max(ops), runs=len(rs), failures=sum(r["failures"] for r in rs),
                 left=sum(r["left_keys"] for r in rs), client=rs[0]["client"])
        med[key] = m
    print("| client | N | callers | cycles/s (min-max) | acquire p50 ms | cycle p50 ms | cycle p99 ms | CPU µs/cycle | refused | keys left |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for family, ns, label in CLIENTS:
        for n in ns:
            for conc in (1, args.concurrency):
                m = med.get((family, n, conc))
                if m is None:
                    continue
                print(f"| {label} | {n} | {conc} | {fmt(m['ops_per_s'])} ({fmt(m['lo'])}-{fmt(m['hi'])}) "
                      f"| {fmt(m['acquire_p50_ms'], 3)} | {fmt(m['cycle_p50_ms'], 3)} | {fmt(m['cycle_p99_ms'], 3)} "
                      f"| {fmt(m['cpu_us_per_cycle'], 0)} | {m['failures']} | {m['left']} |")
    versions = sorted({m["client"] for m in med.values()})
    print(f"\nVersions: {'; '.join(versions)}.\n")
    for n in (1, 5):
        for conc, goal in ((1, 3.0), (args.concurrency, 5.0)):
            candidates = [f for f in OURS if (f, n, conc) in med]
            peers = [(f, med[(f, n, conc)]["ops_per_s"]) for f, _, _ in CLIENTS
                     if f not in OURS and (f, n, conc) in med]
            if not candidates or not peers:
                continue
            ours = max(candidates, key=lambda f: med[(f, n, conc)]["ops_per_s"])
            peer, peer_ops = max(peers, key=lambda p: p[1])
            ours_ops = med[(ours, n, conc)]["ops_per_s"]
            callers = "one caller" if conc == 1 else f"{conc} callers on one client"
            goal_text = f" (goal at N=5: {goal:.0f}x: {'met' if ours_ops / peer_ops >= goal else 'NOT met'})" if n == 5 else ""
            print(f"- N={n}, {callers}: {ours} {fmt(ours_ops)}/s vs the fastest peer, {peer}, "
                  f"{fmt(peer_ops)}/s: {ours_ops / peer_ops:.2f}x{goal_text}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--pin", action="store_true", help="servers on CPU 0, the clients on CPU 1 (taskset)")
    args = ap.parse_args()
    server_prefix = ["taskset", "-c", "0"] if args.pin else []
    args.client_prefix = ["taskset", "-c", "1"] if args.pin else []
    cluster = Cluster(5, prefix=server_prefix)
    try:
        load_before = os.getloadavg()
        started = time.monotonic()
        jobs = [(f, n, c) for f, ns, _ in CLIENTS for n in ns for c in (1, args.concurrency)]
        rows = []
        for round_no in range(1, args.runs + 1):
            # A rotating order: no client always runs first or last.
            shift = (round_no - 1) * 3 % len(jobs)
            for family, n, conc in jobs[shift:] + jobs[:shift]:
                rows.append(run_one(args, cluster, family, n, conc, round_no))
        took = time.monotonic() - started
        load_after = os.getloadavg()
        pinning = "servers on CPU 0, each client on CPU 1 (taskset)" if args.pin else "not pinned"
        print(f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores ({pinning}), "
              f"5 masters ({server_name().split(' (')[0]}) with the module, loopback; Python {sys.version.split()[0]}.")
        print(f"Each cell: median of {args.runs} runs of {args.seconds:g} s of uncontended acquire + release cycles "
              f"(each caller on 4 resources of its own) after a warm-up; TTL 10 s; runs interleaved, order rotating.")
        print(f"Measurements took {took:.0f} s; load average before {load_before[0]:.2f} {load_before[1]:.2f} "
              f"{load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}.")
        print()
        report(rows, args)
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
