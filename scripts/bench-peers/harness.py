"""What scripts/bench-node and scripts/bench-python share (their
node_bench.py and python_bench.py): the common knobs, 5 masters with the
module, one run of a driver in a process of its own with the keys it left
behind counted, the rounds in a rotating order, the header lines, and the
medians of the table. Each bench keeps only its clients, its scenarios and
its goals.
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
sys.path.insert(0, str(REPO / "scripts" / "lib"))

import loadavg  # noqa: E402
from nodes import Cluster, server_name  # noqa: E402
from report import fmt  # noqa: E402  (scripts/bench-client's number format)

# The fields each driver's JSON line gives, whose medians the table shows.
MEASURED = ("ops_per_s", "acquire_p50_ms", "cycle_p50_ms", "cycle_p99_ms", "cpu_us_per_cycle",
            "server_cpu_us_per_cycle")


def arguments(more):
    """The knobs of both benches, and `more(parser)`'s; `client_prefix` and
    `server_prefix`: taskset with --pin."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--pin", action="store_true", help="servers on CPU 0, the clients on CPU 1 (taskset)")
    ap.add_argument("--run-limit", type=float, default=0,
                    help="seconds one run may take before it is killed and reported as not finished "
                         "(0: 10 x --seconds + 60)")
    ap.add_argument("--rust-bin", default="",
                    help="client/examples/bench_quorum, built: the Rust client's rows (none: no such rows)")
    more(ap)
    args = ap.parse_args()
    args.server_prefix = ["taskset", "-c", "0"] if args.pin else []
    args.client_prefix = ["taskset", "-c", "1"] if args.pin else []
    return args


def run_limit(args):
    """How long one driver run may take, warm-up, start and stop included."""
    return args.run_limit if args.run_limit else args.seconds * 10 + 60


def run_driver(bench, what, command, args, cluster, prefix, key):
    """One driver run (`command`, after the taskset prefix) under a
    timeout: its JSON line, with the keys under `prefix` still on the
    masters (each a lock left behind) as `left_keys`. A run that passes
    the timeout is killed and gives a row of its own, `did_not_finish_s`
    (the table says so in its cells) with `key`'s fields (those the
    table's rows are told apart by), and the bench goes on."""
    limit = run_limit(args)
    try:
        done = subprocess.run([*args.client_prefix, *command], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"{bench}: {what} did not finish in {limit:g} s: killed", file=sys.stderr, flush=True)
        row = {**key, "did_not_finish_s": limit}
    else:
        if done.returncode != 0 or not done.stdout.strip().startswith("{"):
            raise SystemExit(f"{bench}: {what} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
    row["left_keys"] = sum(len(s.call("KEYS", f"{prefix}:*")) for s in cluster.servers)  # type: ignore[arg-type]
    return row


def server_pids(cluster):
    """The driver arguments that make it report the servers' CPU time per
    cycle (from /proc/PID/stat, over the measured part)."""
    return ["--server-pids", ",".join(str(s.pid) for s in cluster.servers)]


def rust_command(args, cluster, tasks, shared, prefix):
    """The Rust client's run (client/examples/bench_quorum, `--rust-bin`)
    of the same scenario as the drivers': N=5, `tasks` tasks on one client,
    each on 4 resources of its own, or with `shared` on that many shared
    ones, retrying within 30 s after 2-10 ms; the drivers' warm-up (a tenth
    per task with many tasks), then cycles for `args.seconds`."""
    warmup = args.warmup if tasks == 1 else tasks * max(2, args.warmup // 10)
    return [
        args.rust_bin, "--ports", ",".join(str(s.port) for s in cluster.servers), "--n", str(len(cluster.servers)),
        "--tasks", str(tasks), "--shared", str(shared), "--iterations", str(10**9),
        "--max-seconds", str(args.seconds), "--warmup", str(warmup), "--prefix", prefix,
        *server_pids(cluster),
    ]  # fmt: skip


def rust_row(row):
    """A bench_quorum JSON line as a driver's row."""
    return {**row, "client": "the Rust client (redlock-client crate)", "refused": row.get("failures", 0)}


def log(bench, row):
    print(f"{bench}: {json.dumps(row)}", file=sys.stderr, flush=True)


def measure(args, jobs, step, run):
    """Starts 5 masters and runs every job `args.runs` times, a round at a
    time, the order rotating by `step` (no client always runs first or
    last): `run(cluster, job, round_no)` gives a row. Returns the rows and
    the table's header, the masters stopped."""
    cluster = Cluster(5, prefix=args.server_prefix)
    try:
        load_before = loadavg.now()
        started = time.monotonic()
        rows = []
        for round_no in range(1, args.runs + 1):
            shift = (round_no - 1) * step % len(jobs)
            for job in jobs[shift:] + jobs[:shift]:
                # Each row is judged by the load before the run began
                # (scripts/lib/loadavg.py says why).
                rows.append({**run(cluster, job, round_no), "load": load_before[0]})
        took = time.monotonic() - started
        load_after = loadavg.now()
        server = server_name().split(" (")[0]
    finally:
        cluster.close()
    return rows, Header(args, server, took, load_before, load_after)


class Header:
    """The lines above a table: when, where, how long, under which load."""

    def __init__(self, args, server, took, load_before, load_after):
        self.args, self.server, self.took = args, server, took
        self.load_before, self.load_after = load_before, load_after

    def print(self, runtime, cells):
        pinning = "servers on CPU 0, each client on CPU 1 (taskset)" if self.args.pin else "not pinned"
        b, a = self.load_before, self.load_after
        print(f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores ({pinning}), "
              f"5 masters ({self.server}) with the module, loopback; {runtime}.")
        print(f"Each cell: median of {self.args.runs} runs of {self.args.seconds:g} s of {cells}")
        print(f"Measurements took {self.took:.0f} s; {loadavg.line(b, a)}.")
        print()


def medians(rows, key, refused_field):
    """{key(row): the medians of MEASURED, the min and max cycles/s, the
    refusals (`refused_field` of each row) and keys left summed, the
    client's version}."""
    by = {}
    for r in rows:
        by.setdefault(key(r), []).append(r)
    med = {}
    for k, all_runs in by.items():
        rs = [r for r in all_runs if "did_not_finish_s" not in r]
        unfinished = [r["did_not_finish_s"] for r in all_runs if "did_not_finish_s" in r]
        m = {"runs": len(all_runs), "unfinished": len(unfinished), "limit": max(unfinished, default=None),
             "left": sum(r["left_keys"] for r in all_runs)}
        m["load"] = max((r["load"] for r in all_runs), default=0.0)
        if rs:
            m.update({f: median([r[f] for r in rs if r.get(f) is not None]) for f in MEASURED})
            ops = [r["ops_per_s"] for r in rs]
            m.update(lo=min(ops), hi=max(ops), refused=sum(r[refused_field] for r in rs), client=rs[0]["client"])
        med[k] = m
    return med


def median(values):
    return statistics.median(values) if values else None


def comparable(m):
    """A row's label suffix: empty, or that a run of it was taken above the
    load average that keeps runs comparable."""
    return loadavg.mark(m["load"])


def finished(m):
    """Whether a cell has figures (some of its runs finished)."""
    return "ops_per_s" in m


def cells(m):
    """A table row's measured cells, from cycles/s to keys left; runs that
    did not finish are said so (alone, or beside the others' medians)."""
    if not finished(m):
        return (f"did not finish in {m['limit']:g} s ({m['unfinished']} of {m['runs']} runs) "
                f"| - | - | - | - | - | - | {m['left']} |")
    late = f"; {m['unfinished']} of {m['runs']} runs did not finish in {m['limit']:g} s" if m["unfinished"] else ""
    return (f"{fmt(m['ops_per_s'])} ({fmt(m['lo'])}-{fmt(m['hi'])}{late}) | {fmt(m['acquire_p50_ms'], 3)} "
            f"| {fmt(m['cycle_p50_ms'], 3)} | {fmt(m['cycle_p99_ms'], 3)} | {fmt(m['cpu_us_per_cycle'], 0)} "
            f"| {fmt(m['server_cpu_us_per_cycle'], 0)} | {m['refused']} | {m['left']} |")


def versions(med):
    return f"\nVersions: {'; '.join(sorted({m['client'] for m in med.values() if finished(m)}))}.\n"
