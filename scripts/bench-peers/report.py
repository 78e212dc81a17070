#!/usr/bin/env python3
"""Formats scripts/bench-client's results (one JSON object a line, from the
three drivers) as one markdown table plus the ratios of issue 5's targets.

    python3 scripts/bench-peers/report.py RESULTS.jsonl [--delay-ms 20]
"""

import argparse
import json
import statistics

ORDER = ["redlock-client", "node-redlock", "pottery"]
# Sequential rounds over the N nodes per cycle (acquire + release).
ROUNDS = {"redlock-client": 3, "node-redlock": 2, "pottery": 2}


def family(client):
    return client.split()[0]


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
    runs = {}
    for r in rows:
        runs.setdefault((r["label"], r["n"], family(r["client"])), []).append(r)
    names = {family(r["client"]): r["client"] for r in rows}

    # Each metric: the median over the runs; cycles, failures, keys left: summed.
    by = {}
    for key, rs in runs.items():
        m = {}
        for field in ("ops_per_s", "acquire_p50_ms", "acquire_p99_ms", "release_p50_ms"):
            values = [r[field] for r in rs if r.get(field) is not None]
            m[field] = statistics.median(values) if values else None
        ops = [r["ops_per_s"] for r in rs]
        m["ops_min"], m["ops_max"] = min(ops), max(ops)
        m["runs"] = len(rs)
        for field in ("completed", "failures", "left_keys"):
            m[field] = sum(r.get(field, 0) for r in rs)
        by[key] = m

    scenarios = [
        ("uncontended", "uncontended, loopback"),
        ("one-slow", f"one of 5 nodes +{args.delay_ms:g} ms per reply"),
        ("all-slow", f"every node +{args.delay_ms:g} ms per reply"),
    ]
    print("| scenario | N | client | cycles/s (acquire+release) | acquire p50 ms | acquire p99 ms "
          "| release p50 ms | rounds / cycle | cycles (failed) | keys left behind |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, title in scenarios:
        for n in (1, 3, 5):
            for fam in ORDER:
                r = by.get((label, n, fam))
                if r is None:
                    continue
                ops = fmt(r["ops_per_s"])
                if r["runs"] > 1:
                    ops += f" ({fmt(r['ops_min'])}-{fmt(r['ops_max'])})"
                print(f"| {title} | {n} | {names[fam]} | {ops} | "
                      f"{fmt(r['acquire_p50_ms'])} | {fmt(r['acquire_p99_ms'])} | "
                      f"{fmt(r['release_p50_ms'])} | {ROUNDS.get(fam, '?')} | {r['completed']} ({r['failures']}) | {r['left_keys']} |")

    def get(label, n, fam, key):
        r = by.get((label, n, fam))
        return None if r is None else r.get(key)

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    print()
    print("Ratios:")
    p5, p1 = get("uncontended", 5, "redlock-client", "acquire_p50_ms"), get("uncontended", 1, "redlock-client", "acquire_p50_ms")
    r = ratio(p5, p1)
    if r is not None:
        verdict = "met" if r <= 1.5 else "NOT met"
        print(f"- ours, acquire p50 N=5 / N=1 (loopback): {r:.2f}x (target <= 1.5x: {verdict})")
    for fam in ORDER[1:]:
        r = ratio(get("uncontended", 5, fam, "acquire_p50_ms"), get("uncontended", 1, fam, "acquire_p50_ms"))
        if r is not None:
            print(f"  - for comparison, {fam}: {r:.2f}x")
    s5, s1 = get("all-slow", 5, "redlock-client", "acquire_p50_ms"), get("all-slow", 1, "redlock-client", "acquire_p50_ms")
    r = ratio(s5, s1)
    if r is not None:
        # N=1 needs no fencing round (its node's own token is the quorum's),
        # N=5 does: two round trips against one. Parallel nodes: ~2x;
        # nodes asked one after another: ~10x.
        verdict = "parallel" if r <= 2.5 else "NOT parallel"
        print(f"- ours, acquire p50 N=5 / N=1 with every node +{args.delay_ms:g} ms: {r:.2f}x "
              f"({verdict}: N=5 takes 2 round trips, grant + fencing round, N=1 one, as its "
              f"node's own token is the quorum's; nodes asked one after another would be ~10x)")
    for n in (1, 3, 5):
        ours = get("uncontended", n, "redlock-client", "ops_per_s")
        parts = []
        for fam, target in (("node-redlock", 2.0), ("pottery", None)):
            r = ratio(ours, get("uncontended", n, fam, "ops_per_s"))
            if r is None:
                continue
            text = f"vs {fam} {r:.2f}x"
            if target is not None:
                text += f" (target >= {target:g}x: {'met' if r >= target else 'NOT met'})"
            parts.append(text)
        r = ratio(get("uncontended", n, "redlock-client", "acquire_p50_ms"), get("uncontended", n, "node-redlock", "acquire_p50_ms"))
        if r is not None:
            parts.append(f"acquire p50 ours / node-redlock's {r:.2f}x")
        if parts:
            print(f"- ours, cycles/s at N={n}: " + "; ".join(parts))
    for fam in ORDER:
        slow, fast = get("one-slow", 5, fam, "acquire_p50_ms"), get("uncontended", 5, fam, "acquire_p50_ms")
        if slow is not None and fast is not None:
            print(f"- {fam}, acquire p50 N=5 with one slow node: {fmt(slow)} ms (vs {fmt(fast)} ms without)")


if __name__ == "__main__":
    main()
