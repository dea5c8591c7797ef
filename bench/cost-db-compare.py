#!/usr/bin/env python3
"""Repeatability of two cost DBs: for every (signature, device name) present in both, the
relative difference of the medians |a - b| / mean(a, b); reports its distribution for kernels of
at least --min-us (default 100) microseconds, and the share within --tol (default 3%)."""
import argparse
import json
import sqlite3
import statistics


def rows(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    q = ("SELECT d.name, k.signature, k.op, k.median_us FROM kernels k "
         "JOIN devices d ON d.id = k.device_id")
    return {(name, sig): (op, med) for name, sig, op, med in db.execute(q)}


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--min-us", type=float, default=100)
    ap.add_argument("--tol", type=float, default=0.03)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    a, b = rows(args.a), rows(args.b)
    common = sorted(set(a) & set(b))
    diffs = []
    per_op = {}
    for key in common:
        op, ma = a[key]
        _, mb = b[key]
        if (ma + mb) / 2 < args.min_us:
            continue
        d = abs(ma - mb) / ((ma + mb) / 2)
        diffs.append(d)
        per_op.setdefault(op, []).append(d)
    out = {
        "rows_a": len(a), "rows_b": len(b), "common": len(common),
        "compared": len(diffs), "min_us": args.min_us, "tol": args.tol,
        "within_tol": sum(d <= args.tol for d in diffs),
        "share_within_tol": (sum(d <= args.tol for d in diffs) / len(diffs)) if diffs else None,
        "median": pct(diffs, 50), "p75": pct(diffs, 75), "p90": pct(diffs, 90),
        "max": max(diffs) if diffs else None,
        "per_op_median": {op: statistics.median(v) for op, v in sorted(per_op.items())},
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"rows: {len(a)} and {len(b)}, in both: {len(common)}, "
          f">= {args.min_us:g} us: {len(diffs)}")
    if diffs:
        print(f"|a-b|/mean: median {out['median']:.2%}, p75 {out['p75']:.2%}, "
              f"p90 {out['p90']:.2%}, max {out['max']:.2%}")
        print(f"within {args.tol:.0%}: {out['within_tol']}/{len(diffs)} "
              f"({out['share_within_tol']:.0%})")
        for op, v in sorted(per_op.items()):
            print(f"  {op:20s} n={len(v):3d} median {statistics.median(v):.2%}")


if __name__ == "__main__":
    main()
