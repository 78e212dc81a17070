#!/usr/bin/env python3
"""The measurements and the table of scripts/bench-node (run by it; see that
script for the knobs), the Rust client's rows beside the Node.js clients'.

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

import os  # noqa: E402

from harness import (  # noqa: E402
    arguments, cells, comparable, finished, log, measure, medians, run_driver, rust_command, rust_row, server_pids,
    versions,
)
from report import fmt  # noqa: E402  (scripts/bench-client's number format)

DRIVER = Path(__file__).with_name("node_locks.js")
# (family, label) in table order.
CLIENTS = [
    ("rust", "the Rust client (same scenario)"),
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
    if family == "rust":
        command = rust_command(args, cluster, tasks, shared, prefix)
    else:
        command = [
            "node", str(DRIVER), "--client", family,
            "--ports", ",".join(str(s.port) for s in cluster.servers), "--n", str(len(cluster.servers)),
            "--tasks", str(tasks), "--shared", str(shared), "--seconds", str(args.seconds),
            "--warmup", str(args.warmup), "--prefix", prefix,
            *server_pids(cluster), "--tick-us", str(1e6 / os.sysconf("SC_CLK_TCK")),
        ]  # fmt: skip
    row = run_driver("bench-node", f"{family} {scenario}", command, args, cluster, prefix,
                     {"family": family, "scenario": scenario})
    if family == "rust":
        row = rust_row(row)
    row["family"] = family
    row["scenario"] = scenario
    row["round"] = round_no
    log("bench-node", row)
    return row


def report(rows, args):
    med = medians(rows, lambda r: (r["family"], r["scenario"]), "refused")
    print("| scenario | client | cycles/s (min-max) | acquire p50 ms | cycle p50 ms | cycle p99 ms "
          "| client CPU µs/cycle | servers' CPU µs/cycle | refused | keys left |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario, _, _ in scenarios(args.tasks):
        for family, label in CLIENTS:
            m = med.get((family, scenario))
            if m is None:
                continue
            print(f"| {scenario} | {label}{comparable(m)} | {cells(m)}")
    print(versions(med))
    for scenario, _, _ in scenarios(args.tasks):
        ours = med.get(("ours", scenario))
        if ours is None or not finished(ours):
            continue
        rust = med.get(("rust", scenario))
        if rust is not None and finished(rust):
            # The goal: within 10% of the Rust client with one caller and
            # with many tasks on resources of their own.
            verdict = ""
            if scenario in ("one caller", f"{args.tasks} tasks"):
                met = ours["ops_per_s"] >= 0.9 * rust["ops_per_s"]
                verdict = f" (goal: at least 0.9x: {judged(met, ours, rust)})"
            print(f"- {scenario}: redlock-client {fmt(ours['ops_per_s'])}/s vs the Rust client "
                  f"{fmt(rust['ops_per_s'])}/s: {ours['ops_per_s'] / rust['ops_per_s']:.2f}x{verdict}; "
                  f"CPU/cycle (client + servers) {cpu_cycle(ours)} vs {cpu_cycle(rust)} µs")
        for peer in PEERS:
            theirs = med.get((peer, scenario))
            if theirs is None or not finished(theirs):
                continue
            ratio = ours["ops_per_s"] / theirs["ops_per_s"]
            p99 = ours["cycle_p99_ms"] / theirs["cycle_p99_ms"]
            verdict = ""
            if peer == "node-redlock":
                met = ours["cycle_p99_ms"] < theirs["cycle_p99_ms"]
                verdict = f" (goal: a lower p99: {judged(met, ours, theirs)})"
            print(f"- {scenario}: redlock-client {fmt(ours['ops_per_s'])}/s vs {peer} {fmt(theirs['ops_per_s'])}/s: "
                  f"{ratio:.2f}x; p99 {fmt(ours['cycle_p99_ms'], 3)} vs {fmt(theirs['cycle_p99_ms'], 3)} ms "
                  f"({p99:.2f}x){verdict}; CPU/cycle (client + servers) {cpu_cycle(ours)} vs {cpu_cycle(theirs)} µs")


def judged(met, *rows):
    """A goal's verdict; none from runs taken under load."""
    load = max(m["load"] for m in rows)
    return f"no verdict{comparable({'load': load})}" if comparable({"load": load}) else ("met" if met else "NOT met")


def cpu_cycle(m):
    """The client's and the servers' CPU time per cycle, summed (the
    client's alone when the servers' is unknown)."""
    client, servers = m["cpu_us_per_cycle"], m["server_cpu_us_per_cycle"]
    if client is None:
        return "-"
    return fmt(client + servers, 0) if servers is not None else f"{fmt(client, 0)} (client only)"


def main():
    def more(ap):
        ap.add_argument("--tasks", type=int, default=64)
        ap.add_argument("--clients", default=",".join(f for f, _ in CLIENTS),
                        help="the clients measured, comma-separated (default: all; rust needs --rust-bin)")

    args = arguments(more)
    families = args.clients.split(",")
    unknown = [f for f in families if f not in dict(CLIENTS)]
    if unknown:
        raise SystemExit(f"bench-node: unknown clients {unknown} (known: {', '.join(f for f, _ in CLIENTS)})")
    if "rust" in families and not args.rust_bin:
        families.remove("rust")
    jobs = [(f, *s) for s in scenarios(args.tasks) for f, _ in CLIENTS if f in families]
    rows, header = measure(args, jobs, 5, lambda cluster, job, round_no: run_one(args, cluster, job, round_no))
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    header.print(f"Node.js {node}",
                 "acquire + release cycles after a warm-up (each task on 4 resources of its own; contended: "
                 f"{args.tasks} tasks on {SHARED} shared resources, retrying); TTL 10 s; runs interleaved, "
                 "order rotating.")
    report(rows, args)


if __name__ == "__main__":
    main()
