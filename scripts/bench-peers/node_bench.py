#!/usr/bin/env python3
"""The measurements and the table of scripts/bench-node (run by it; see that
script for the knobs).

Starts 5 masters with the module (python/tests/nodes.py: free loopback
ports, own temp dirs, killed by PID at the end), then runs
scripts/bench-peers/node_locks.js once per client and scenario (one
caller; BENCH_TASKS tasks on resources of their own; the same tasks on 4
shared resources), for several rounds in a rotating order, each run in a
process of its own (pinned with taskset when asked) under a timeout; after
each run the client's keys still on the masters are counted (each is a
lock left behind). Prints the markdown table (medians over the rounds) and
the lines of the goals.
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

DRIVER = Path(__file__).with_name("node_locks.js")
# (family, label) in table order.
CLIENTS = [
    ("ours", "redlock-client"),
    ("ours-fenced", "redlock-client, fencing token read"),
    ("node-redlock", "node-redlock (redlock v5)"),
    ("redis-semaphore", "redis-semaphore RedlockMutex"),
]
PEERS = ("node-redlock", "redis-semaphore")
SHARED = 4


def scenarios(tasks):
    """(name, tasks, shared resources) in table order."""
    return [("one caller", 1, 0), (f"{tasks} tasks", tasks, 0), (f"{tasks} tasks, contended", tasks, SHARED)]


def run_one(args, cluster, family, scenario, tasks, shared, round_no):
    prefix = f"bench:{family}:{tasks}:{shared}:{round_no}"
    command = [
        *args.client_prefix, "node", str(DRIVER), "--client", family,
        "--ports", ",".join(str(s.port) for s in cluster.servers), "--n", str(len(cluster.servers)),
        "--tasks", str(tasks), "--shared", str(shared), "--seconds", str(args.seconds),
        "--warmup", str(args.warmup), "--prefix", prefix,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.seconds * 10 + 60)
    if done.returncode != 0 or not done.stdout.strip().startswith("{"):
        raise SystemExit(f"bench-node: {family} {scenario} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["left_keys"] = sum(len(s.call("KEYS", f"{prefix}:*")) for s in cluster.servers)  # type: ignore[arg-type]
    row["scenario"] = scenario
    row["round"] = round_no
    print(f"bench-node: {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def report(rows, args):
    by = {}
    for r in rows:
        by.setdefault((r["family"], r["scenario"]), []).append(r)
    med = {}
    for key, rs in by.items():
        m = {f: statistics.median(r[f] for r in rs if r.get(f) is not None)
             for f in ("ops_per_s", "acquire_p50_ms", "cycle_p50_ms", "cycle_p99_ms", "cpu_us_per_cycle")}
        ops = [r["ops_per_s"] for r in rs]
        m.update(lo=min(ops), hi=max(ops), refused=sum(r["refused"] for r in rs),
                 left=sum(r["left_keys"] for r in rs), client=rs[0]["client"])
        med[key] = m
    print("| scenario | client | cycles/s (min-max) | acquire p50 ms | cycle p50 ms | cycle p99 ms | CPU µs/cycle | refused | keys left |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for scenario, _, _ in scenarios(args.tasks):
        for family, label in CLIENTS:
            m = med.get((family, scenario))
            if m is None:
                continue
            print(f"| {scenario} | {label} | {fmt(m['ops_per_s'])} ({fmt(m['lo'])}-{fmt(m['hi'])}) "
                  f"| {fmt(m['acquire_p50_ms'], 3)} | {fmt(m['cycle_p50_ms'], 3)} | {fmt(m['cycle_p99_ms'], 3)} "
                  f"| {fmt(m['cpu_us_per_cycle'], 0)} | {m['refused']} | {m['left']} |")
    versions = sorted({m["client"] for m in med.values()})
    print(f"\nVersions: {'; '.join(versions)}.\n")
    goals = {"one caller": "2x node-redlock's cycles/s", f"{args.tasks} tasks": "5x, with a lower p99",
             f"{args.tasks} tasks, contended": "more cycles and a lower p99"}
    factors = {"one caller": 2.0, f"{args.tasks} tasks": 5.0, f"{args.tasks} tasks, contended": 1.0}
    for scenario, _, _ in scenarios(args.tasks):
        ours = med.get(("ours", scenario))
        if ours is None:
            continue
        for peer in PEERS:
            theirs = med.get((peer, scenario))
            if theirs is None:
                continue
            ratio = ours["ops_per_s"] / theirs["ops_per_s"]
            p99 = ours["cycle_p99_ms"] / theirs["cycle_p99_ms"]
            verdict = ""
            if peer == "node-redlock":
                lower_p99 = scenario == "one caller" or ours["cycle_p99_ms"] < theirs["cycle_p99_ms"]
                met = ratio >= factors[scenario] and lower_p99
                verdict = f" (goal: {goals[scenario]}: {'met' if met else 'NOT met'})"
            print(f"- {scenario}: redlock-client {fmt(ours['ops_per_s'])}/s vs {peer} {fmt(theirs['ops_per_s'])}/s: "
                  f"{ratio:.2f}x; p99 {fmt(ours['cycle_p99_ms'], 3)} vs {fmt(theirs['cycle_p99_ms'], 3)} ms "
                  f"({p99:.2f}x); CPU/cycle {fmt(ours['cpu_us_per_cycle'], 0)} vs "
                  f"{fmt(theirs['cpu_us_per_cycle'], 0)} µs{verdict}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--pin", action="store_true", help="servers on CPU 0, the clients on CPU 1 (taskset)")
    args = ap.parse_args()
    server_prefix = ["taskset", "-c", "0"] if args.pin else []
    args.client_prefix = ["taskset", "-c", "1"] if args.pin else []
    cluster = Cluster(5, prefix=server_prefix)
    try:
        load_before = os.getloadavg()
        started = time.monotonic()
        jobs = [(f, s, t, k) for s, t, k in scenarios(args.tasks) for f, _ in CLIENTS]
        rows = []
        for round_no in range(1, args.runs + 1):
            # A rotating order: no client always runs first or last.
            shift = (round_no - 1) * 5 % len(jobs)
            for family, scenario, tasks, shared in jobs[shift:] + jobs[:shift]:
                rows.append(run_one(args, cluster, family, scenario, tasks, shared, round_no))
        took = time.monotonic() - started
        load_after = os.getloadavg()
        node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
        pinning = "servers on CPU 0, each client on CPU 1 (taskset)" if args.pin else "not pinned"
        print(f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores ({pinning}), "
              f"5 masters ({server_name().split(' (')[0]}) with the module, loopback; Node.js {node}.")
        print(f"Each cell: median of {args.runs} runs of {args.seconds:g} s of acquire + release cycles after a warm-up "
              f"(each task on 4 resources of its own; contended: {args.tasks} tasks on {SHARED} shared resources, "
              f"retrying); TTL 10 s; runs interleaved, order rotating.")
        print(f"Measurements took {took:.0f} s; load average before {load_before[0]:.2f} {load_before[1]:.2f} "
              f"{load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}.")
        print()
        report(rows, args)
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
