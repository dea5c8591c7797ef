#!/usr/bin/env python3
"""Compares a measured trace with a simulated one (or with a one-device run's), op by op,
grouped by what came before each op on its device in the measured trace: the gap since the
device's previous op ended (a wait, a copy) and the op time run since that gap (issue 14,
docs/validation.md). Both traces are Chrome traces as `placesim study` writes them
(OUT/GRAPH-ALGO.sim.json, .run.json) or `placesim run --trace`; ops are matched by name, the
reference's duration per name being its median.
Usage: trace-gaps.py REFERENCE.json MEASURED.json [GAP_US]  (a gap over GAP_US, 30 by default,
starts a new group)"""
import json
import statistics
import sys
from collections import defaultdict


def ops(path):
    try:
        events = json.load(open(path))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.stderr.write("trace-gaps: %s: %s\n" % (path, e))
        sys.exit(2)
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == "op"]


def bucket(x, edges):
    for t in edges:
        if x < t:
            return t
    return float("inf")


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__.split("Usage: ")[1] + "\n")
        return 2
    gap_min = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    ref = defaultdict(list)
    for e in ops(sys.argv[1]):
        ref[e["name"]].append(e["dur"])
    ref = {k: statistics.median(v) for k, v in ref.items()}
    by_dev = defaultdict(list)
    for e in ops(sys.argv[2]):
        by_dev[(e["pid"], e.get("tid"))].append(e)
    groups = defaultdict(lambda: [0, 0.0, 0.0])
    for evs in by_dev.values():
        evs.sort(key=lambda e: e["ts"])
        end, gap, since = None, 0.0, 0.0
        for e in evs:
            if end is not None and e["ts"] - end > gap_min:
                gap, since = e["ts"] - end, 0.0
            if e["name"] in ref:
                g = groups[(bucket(gap, (gap_min, 100, 500, 1500, 5000)), bucket(since, (1, 300, 1500)))]
                g[0] += 1
                g[1] += ref[e["name"]]
                g[2] += e["dur"]
            since += e["dur"]
            end = e["ts"] + e["dur"]
    print("%-12s %-14s %6s %12s %12s %10s %8s" % ("gap <", "op time since", "ops", "reference", "measured", "per op", ""))
    tot = [0.0, 0.0]
    for (gb, sb), (n, a, r) in sorted(groups.items()):
        tot[0] += a
        tot[1] += r
        print("%-12s %-14s %6d %12.0f %12.0f %+10.1f %+7.1f%%" % (
            "%g us" % gb if gb != float("inf") else "longer",
            "first op" if sb == 1 else "< %g us" % sb if sb != float("inf") else "later", n, a, r, (r - a) / n,
            100 * (r / a - 1) if a else 0))
    if tot[0]:
        print("all ops: measured %+.2f%% against the reference" % (100 * (tot[1] / tot[0] - 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
