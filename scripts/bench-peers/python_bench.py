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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from harness import arguments, cells, comparable, finished, log, measure, medians, run_driver, versions  # noqa: E402
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


def run_one(args, cluster, job, round_no):
    family, n, concurrency = job
    prefix = f"bench:{family}:{n}:{concurrency}:{round_no}"
    command = [
        sys.executable, str(DRIVER), "--client", family,
        "--ports", ",".join(str(s.port) for s in cluster.servers), "--n", str(n),
        "--concurrency", str(concurrency), "--seconds", str(args.seconds), "--prefix", prefix,
        "--warmup", str(args.warmup if concurrency == 1 else max(2, args.warmup // 10)),
    ]  # fmt: skip
    key = {"family": family, "n": n, "concurrency": concurrency}
    row = run_driver("bench-python", f"{family} N={n} x{concurrency}", command, args, cluster, prefix, key)
    row["round"] = round_no
    log("bench-python", row)
    return row


def report(rows, args):
    med = medians(rows, lambda r: (r["family"], r["n"], r["concurrency"]), "failures")
    print("| client | N | callers | cycles/s (min-max) | acquire p50 ms | cycle p50 ms | cycle p99 ms "
          "| client CPU µs/cycle | servers' CPU µs/cycle | refused | keys left |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for family, ns, label in CLIENTS:
        for n in ns:
            for conc in (1, args.concurrency):
                m = med.get((family, n, conc))
                if m is None:
                    continue
                print(f"| {label}{comparable(m)} | {n} | {conc} | {cells(m)}")
    print(versions(med))
    for n in (1, 5):
        for conc, goal in ((1, 3.0), (args.concurrency, 5.0)):
            candidates = [f for f in OURS if (f, n, conc) in med and finished(med[(f, n, conc)])]
            peers = [(f, med[(f, n, conc)]["ops_per_s"]) for f, _, _ in CLIENTS
                     if f not in OURS and (f, n, conc) in med and finished(med[(f, n, conc)])]
            late = [f for f, _, _ in CLIENTS if f not in OURS and (f, n, conc) in med
                    and not finished(med[(f, n, conc)])]
            if not candidates or not peers:
                continue
            ours = max(candidates, key=lambda f: med[(f, n, conc)]["ops_per_s"])
            peer, peer_ops = max(peers, key=lambda p: p[1])
            ours_ops = med[(ours, n, conc)]["ops_per_s"]
            callers = "one caller" if conc == 1 else f"{conc} callers on one client"
            goal_text = f" (goal at N=5: {goal:.0f}x: {'met' if ours_ops / peer_ops >= goal else 'NOT met'})" if n == 5 else ""
            unfinished = f" ({', '.join(late)}: no run finished)" if late else ""
            print(f"- N={n}, {callers}: {ours} {fmt(ours_ops)}/s vs the fastest peer, {peer}, "
                  f"{fmt(peer_ops)}/s: {ours_ops / peer_ops:.2f}x{goal_text}{unfinished}")


def main():
    args = arguments(lambda ap: ap.add_argument("--concurrency", type=int, default=64))
    jobs = [(f, n, c) for f, ns, _ in CLIENTS for n in ns for c in (1, args.concurrency)]
    rows, header = measure(args, jobs, 3, lambda cluster, job, round_no: run_one(args, cluster, job, round_no))
    header.print(f"Python {sys.version.split()[0]}",
                 "uncontended acquire + release cycles (each caller on 4 resources of its own) after a warm-up; "
                 "TTL 10 s; runs interleaved, order rotating.")
    report(rows, args)


if __name__ == "__main__":
    main()
