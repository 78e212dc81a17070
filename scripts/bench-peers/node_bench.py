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

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from harness import arguments, cells, finished, log, measure, medians, run_driver, versions  # noqa: E402
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


def run_one(args, cluster, job, round_no):
    family, scenario, tasks, shared = job
    prefix = f"bench:{family}:{tasks}:{shared}:{round_no}"
    command = [
        "node", str(DRIVER), "--client", family,
        "--ports", ",".join(str(s.port) for s in cluster.servers), "--n", str(len(cluster.servers)),
        "--tasks", str(tasks), "--shared", str(shared), "--seconds", str(args.seconds),
        "--warmup", str(args.warmup), "--prefix", prefix,
    ]  # fmt: skip
    row = run_driver("bench-node", f"{family} {scenario}", command, args, cluster, prefix,
                     {"family": family, "scenario": scenario})
    row["scenario"] = scenario
    row["round"] = round_no
    log("bench-node", row)
    return row


def report(rows, args):
    med = medians(rows, lambda r: (r["family"], r["scenario"]), "refused")
    print("| scenario | client | cycles/s (min-max) | acquire p50 ms | cycle p50 ms | cycle p99 ms | CPU µs/cycle | refused | keys left |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for scenario, _, _ in scenarios(args.tasks):
        for family, label in CLIENTS:
            m = med.get((family, scenario))
            if m is None:
                continue
            print(f"| {scenario} | {label} | {cells(m)}")
    print(versions(med))
    goals = {"one caller": "2x node-redlock's cycles/s", f"{args.tasks} tasks": "5x, with a lower p99",
             f"{args.tasks} tasks, contended": "more cycles and a lower p99"}
    factors = {"one caller": 2.0, f"{args.tasks} tasks": 5.0, f"{args.tasks} tasks, contended": 1.0}
    for scenario, _, _ in scenarios(args.tasks):
        ours = med.get(("ours", scenario))
        if ours is None or not finished(ours):
            continue
        for peer in PEERS:
            theirs = med.get((peer, scenario))
            if theirs is None or not finished(theirs):
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
    args = arguments(lambda ap: ap.add_argument("--tasks", type=int, default=64))
    jobs = [(f, *s) for s in scenarios(args.tasks) for f, _ in CLIENTS]
    rows, header = measure(args, jobs, 5, lambda cluster, job, round_no: run_one(args, cluster, job, round_no))
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    header.print(f"Node.js {node}",
                 "acquire + release cycles after a warm-up (each task on 4 resources of its own; contended: "
                 f"{args.tasks} tasks on {SHARED} shared resources, retrying); TTL 10 s; runs interleaved, "
                 "order rotating.")
    report(rows, args)


if __name__ == "__main__":
    main()
