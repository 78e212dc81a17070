#!/usr/bin/env python3
"""Formats scripts/bench-client's results (one JSON object a line, from the
drivers) as one markdown table plus the ratios of the client's
performance goals.

    python3 scripts/bench-peers/report.py RESULTS.jsonl [--delay-ms 20]
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import loadavg  # noqa: E402

OURS, OURS_FENCED, NODE, PY = "redlock-client", "redlock-client, fenced", "node-redlock", "pottery"
# Three resources per cycle: one set, or three separate acquires.
OURS_SET, OURS_SINGLES = "redlock-client, set of 3", "redlock-client, 3 separate"
ORDER = [OURS, OURS_FENCED, NODE, PY, OURS_SET, OURS_SINGLES]


def family(row):
    name = row["client"].split()[0]
    if name == OURS and row.get("set", 1) > 1:
        return OURS_SINGLES if row.get("separate") else OURS_SET
    return OURS_FENCED if name == OURS and row.get("fenced") else name


def rounds(fam, n):
    """Sequential rounds over the N nodes per cycle (acquire + release)."""
    if fam == OURS_FENCED:
        return 2 if n == 1 else 3  # one node: its own token is T, no FENCE
    if fam == OURS_SINGLES:
        return 6
    return 2


def fmt(x, digits=3):
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.results) if line.strip().startswith("{")]
    for r in rows:
        cycles = r.get("completed", 0) + r.get("warmup", 0)
        if cycles and "client_cpu_s" in r:
            r["client_us"] = r["client_cpu_s"] * 1e6 / cycles
        if cycles and "server_usec" in r:
            r["server_us"] = r["server_usec"] / cycles
    runs = {}
    for r in rows:
        runs.setdefault((r["label"], r["n"], family(r)), []).append(r)
    names = {family(r): family(r) if family(r) in (OURS_FENCED, OURS_SET, OURS_SINGLES) else r["client"]
             for r in rows}
    tasks = max((r.get("tasks", 1) for r in rows), default=1)

    # Each metric: the median over the runs; cycles, failures, keys left: summed.
    by = {}
    for key, rs in runs.items():
        m = {}
        for field in ("ops_per_s", "acquire_p50_ms", "acquire_p99_ms", "release_p50_ms", "client_us", "server_us"):
            values = [r[field] for r in rs if r.get(field) is not None]
            m[field] = statistics.median(values) if values else None
        ops = [r["ops_per_s"] for r in rs]
        m["ops_min"], m["ops_max"] = min(ops), max(ops)
        m["runs"] = len(rs)
        for field in ("completed", "failures", "left_keys"):
            m[field] = sum(r.get(field, 0) for r in rs)
        m["load"] = max(r.get("load", 0.0) for r in rs)
        by[key] = m

    scenarios = [
        ("uncontended", "one caller, loopback"),
        ("tasks", f"{tasks} tasks, own resources"),
        ("contended", f"{tasks} tasks, 4 shared resources"),
        ("one-slow", f"one caller, one of 5 nodes +{args.delay_ms:g} ms per reply"),
        ("all-slow", f"one caller, every node +{args.delay_ms:g} ms per reply"),
        ("set3", "one caller, 3 resources per cycle"),
    ]
    print("| scenario | N | client | cycles/s (acquire+release) | acquire p50 ms | acquire p99 ms "
          "| release p50 ms | client CPU µs/cycle | server µs/cycle | rounds / cycle | cycles (failed) "
          "| keys left behind |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, title in scenarios:
        for n in (1, 3, 5):
            for fam in ORDER:
                r = by.get((label, n, fam))
                if r is None:
                    continue
                ops = fmt(r["ops_per_s"])
                if r["runs"] > 1:
                    ops += f" ({fmt(r['ops_min'])}-{fmt(r['ops_max'])})"
                print(f"| {title} | {n} | {names[fam]}{loadavg.mark(r['load'])} | {ops} | "
                      f"{fmt(r['acquire_p50_ms'])} | {fmt(r['acquire_p99_ms'])} | "
                      f"{fmt(r['release_p50_ms'])} | {fmt(r['client_us'])} | {fmt(r['server_us'])} | "
                      f"{rounds(fam, n)} | {r['completed']} ({r['failures']}) | {r['left_keys']} |")

    def get(label, n, fam, key):
        r = by.get((label, n, fam))
        return None if r is None else r.get(key)

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    def verdict(ok):
        return "met" if ok else "NOT met"

    print()
    print("Goals:")
    for fam, target in ((OURS, 2.0), (OURS_FENCED, 1.5)):
        r = ratio(get("uncontended", 5, fam, "ops_per_s"), get("uncontended", 5, NODE, "ops_per_s"))
        if r is not None:
            print(f"- N=5, one caller, {fam} vs node-redlock: {r:.2f}x cycles/s "
                  f"(target >= {target:g}x: {verdict(r >= target)})")
    for label in ("tasks", "contended"):
        node_ops, node_p99 = get(label, 5, NODE, "ops_per_s"), get(label, 5, NODE, "acquire_p99_ms")
        for fam in (OURS, OURS_FENCED):
            ops, p99 = get(label, 5, fam, "ops_per_s"), get(label, 5, fam, "acquire_p99_ms")
            r = ratio(ops, node_ops)
            if r is None or p99 is None or node_p99 is None:
                continue
            target = " (target: above node-redlock with a lower p99: " + verdict(r > 1 and p99 < node_p99) + ")"
            print(f"- {label}, {tasks} tasks, {fam} vs node-redlock: {r:.2f}x cycles/s; acquire p99 "
                  f"{fmt(p99)} vs {fmt(node_p99)} ms{target if label == 'tasks' else ''}")
    r = ratio(get("set3", 5, OURS_SET, "ops_per_s"), get("set3", 5, OURS_SINGLES, "ops_per_s"))
    if r is not None:
        p_set, p_singles = get("set3", 5, OURS_SET, "acquire_p50_ms"), get("set3", 5, OURS_SINGLES, "acquire_p50_ms")
        print(f"- 3 resources, N=5: one set vs 3 separate acquires: {r:.2f}x cycles/s; acquire p50 "
              f"{fmt(p_set)} vs {fmt(p_singles)} ms")
    print()
    print("Earlier goals:")
    p5, p1 = get("uncontended", 5, OURS_FENCED, "acquire_p50_ms"), get("uncontended", 1, OURS_FENCED, "acquire_p50_ms")
    r = ratio(p5, p1)
    if r is not None:
        print(f"- ours (fenced), acquire p50 N=5 / N=1 (loopback): {r:.2f}x (target <= 1.5x: {verdict(r <= 1.5)})")
    for fam in (NODE, PY):
        r = ratio(get("uncontended", 5, fam, "acquire_p50_ms"), get("uncontended", 1, fam, "acquire_p50_ms"))
        if r is not None:
            print(f"  - for comparison, {fam}: {r:.2f}x")
    s5, s1 = get("all-slow", 5, OURS_FENCED, "acquire_p50_ms"), get("all-slow", 1, OURS_FENCED, "acquire_p50_ms")
    r = ratio(s5, s1)
    if r is not None:
        # N=1 needs no fencing round (its node's own token is the quorum's),
        # N=5 does: two round trips against one. Parallel nodes: ~2x;
        # nodes asked one after another: ~10x.
        parallel = "parallel" if r <= 2.5 else "NOT parallel"
        print(f"- ours (fenced), acquire p50 N=5 / N=1 with every node +{args.delay_ms:g} ms: {r:.2f}x "
              f"({parallel}: N=5 takes 2 round trips, grant + fencing round, N=1 one, as its "
              f"node's own token is the quorum's; nodes asked one after another would be ~10x)")
    for n in (1, 3, 5):
        parts = []
        for fam in (OURS, OURS_FENCED):
            for peer in (NODE, PY):
                r = ratio(get("uncontended", n, fam, "ops_per_s"), get("uncontended", n, peer, "ops_per_s"))
                if r is not None:
                    parts.append(f"{fam} vs {peer} {r:.2f}x")
        if parts:
            print(f"- cycles/s at N={n}: " + "; ".join(parts))
    for fam in ORDER:
        slow, fast = get("one-slow", 5, fam, "acquire_p50_ms"), get("uncontended", 5, fam, "acquire_p50_ms")
        if slow is not None and fast is not None:
            print(f"- {fam}, acquire p50 N=5 with one slow node: {fmt(slow)} ms (vs {fmt(fast)} ms without)")


if __name__ == "__main__":
    main()
