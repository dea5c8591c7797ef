#!/usr/bin/env python3
"""Repeatability of two cost DBs: for every (signature, device name) present in both, the
relative difference of the medians |a - b| / mean(a, b); reports its distribution for kernels of
at least --min-us (default 100) microseconds, and the share within --tol (default 3%).

Schema 4 rows carry the host-speed reference measured alongside them (ref_gemm_us,
ref_stream_us) and the kernel's memory weight w. Then B's median is also compared with A's
scaled to B's host speed, A * (w * refB_stream / refA_stream + (1 - w) * refB_gemm /
refA_gemm), as the cost model does (psim_speed_ref_factor): this is the "ratio against a
reference measured in the same run". Both figures are printed; rows without a reference are
compared raw in both."""
import argparse
import json
import sqlite3
import statistics
import sys


def fail(msg):
    print(f"cost-db-compare: {msg}", file=sys.stderr)
    sys.exit(2)


def rows(path):
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        cols = {r[1] for r in db.execute("PRAGMA table_info(kernels)")}
    except sqlite3.Error as e:
        fail(f"{path}: cannot read the cost DB: {e}")
    if not cols:
        fail(f"{path}: not a placesim cost DB (no kernels table)")
    ref = "ref_gemm_us" in cols
    q = ("SELECT d.name, k.signature, k.op, k.median_us" +
         (", k.ref_gemm_us, k.ref_stream_us, k.mem_weight" if ref else "") +
         " FROM kernels k JOIN devices d ON d.id = k.device_id")
    out = {}
    for r in db.execute(q):
        name, sig, op, med = r[:4]
        g, s, w = (r[4:7] if ref else (None, None, None))
        out[(name, sig)] = (op, med, g, s, w)
    return out


def factor(ra, rb):
    _, _, ga, sa, w = ra
    _, _, gb, sb, _ = rb
    if not (ga and sa and gb and sb) or w is None:
        return 1.0, False
    return w * sb / sa + (1 - w) * gb / ga, True


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(diffs, tol):
    return {
        "compared": len(diffs),
        "within_tol": sum(d <= tol for d in diffs),
        "share_within_tol": (sum(d <= tol for d in diffs) / len(diffs)) if diffs else None,
        "median": pct(diffs, 50), "p75": pct(diffs, 75), "p90": pct(diffs, 90),
        "max": max(diffs) if diffs else None,
    }


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
    raw, adj = [], []
    per_op_raw, per_op = {}, {}
    with_ref = 0
    for key in common:
        op, ma = a[key][:2]
        mb = b[key][1]
        if (ma + mb) / 2 < args.min_us:
            continue
        d = abs(ma - mb) / ((ma + mb) / 2)
        f, ok = factor(a[key], b[key])
        with_ref += ok
        sa = ma * f
        e = abs(sa - mb) / ((sa + mb) / 2)
        raw.append(d)
        adj.append(e)
        per_op_raw.setdefault(op, []).append(d)
        per_op.setdefault(op, []).append(e)
    out = {
        "rows_a": len(a), "rows_b": len(b), "common": len(common), "min_us": args.min_us,
        "tol": args.tol, "with_reference": with_ref,
        "referenced": summary(adj, args.tol), "raw": summary(raw, args.tol),
        "per_op_median": {op: statistics.median(v) for op, v in sorted(per_op.items())},
        "per_op_median_raw": {op: statistics.median(v) for op, v in sorted(per_op_raw.items())},
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"rows: {len(a)} and {len(b)}, in both: {len(common)}, "
          f">= {args.min_us:g} us: {len(raw)} ({with_ref} with a speed reference in both)")
    for name, s in (("against the speed reference", out["referenced"]), ("raw", out["raw"])):
        if s["compared"]:
            print(f"{name}: |a-b|/mean median {s['median']:.2%}, p75 {s['p75']:.2%}, "
                  f"p90 {s['p90']:.2%}, max {s['max']:.2%}; within {args.tol:.0%}: "
                  f"{s['within_tol']}/{s['compared']} ({s['share_within_tol']:.0%})")
    for op in sorted(per_op):
        print(f"  {op:20s} n={len(per_op[op]):3d} median {statistics.median(per_op[op]):.2%}"
              f" (raw {statistics.median(per_op_raw[op]):.2%})")


if __name__ == "__main__":
    main()
