#!/usr/bin/env python3
"""How much of a multi-device plan's simulated-vs-measured gap is the variability of op times.

The simulator runs a step with one time per op (the in-situ profile's mean over the steps it
keeps). Where devices wait for each other, the mean of the step times is larger than the step
of the mean op times (the mean of a maximum is at least the maximum of the means), so a plan
that synchronises devices often is predicted low even when every op's mean is right; a plan on
one device is a sum and is not.

This script measures that effect on a real run, without the cost DB's op rows: from a traced
run (`placesim run --plan P --steps N --trace T --trace-steps M`) it takes every op's duration
in each of the M steps, keeps the steps whose span the study's trimmed mean keeps (a tenth off
each end), and simulates the placement with the graph's ops annotated (cost_us) once with each
op's mean over those steps and once per kept step with that step's own durations (every op of
one step together: what slowed a step slows all its ops). It prints the measured steps' trimmed
mean, the replay of the means, the mean of the per-step replays and their ratio: the part of
the gap that one time per op cannot show. Transfers and links come from the DB as in any
simulation, and so do the calibrated terms charged beside an op's time (idle curves, reclaim,
cold blocks), which the measured op times already contain: the replays' level is not a
prediction, their ratio is the figure.

  bench/replay-variability.py --graph G.json --placement PL.json --cluster local:2 --db DB \
      --trace T.json [--every 3] [--psim build/placesim]
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile


def trimmed_mean(xs):
    xs = sorted(xs)
    c = len(xs) // 10
    return statistics.mean(xs[c:len(xs) - c])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--placement", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--every", type=int, default=3, help="replay every Nth kept step (default 3)")
    ap.add_argument("--psim", default=os.path.join(os.path.dirname(__file__), "..", "build", "placesim"))
    a = ap.parse_args()

    trace = json.load(open(a.trace))
    ops = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "op"),
                 key=lambda e: e["ts"])
    by_op = collections.defaultdict(list)
    for e in ops:
        by_op[e["name"]].append(e)
    n_steps = min(len(v) for v in by_op.values())
    if n_steps < 20:
        sys.exit("replay-variability: %s: %d traced steps; trace at least 20 (--trace-steps)" % (a.trace, n_steps))
    # The k-th occurrence of every op is step k (each traced step runs every op once).
    spans = []
    for k in range(n_steps):
        es = [v[k] for v in by_op.values()]
        spans.append(max(e["ts"] + e["dur"] for e in es) - min(e["ts"] for e in es))
    order = sorted(range(n_steps), key=lambda k: spans[k])
    cut = n_steps // 10
    kept = order[cut:n_steps - cut]

    graph = json.load(open(a.graph))
    names = {n["name"] for n in graph["nodes"]}
    missing = [n for n in by_op if n not in names]
    if missing:
        sys.exit("replay-variability: %s: ops of the trace not in the graph: %s" % (a.trace, ", ".join(missing[:5])))
    tmp = tempfile.mkdtemp(prefix="replay-")
    # The placement names the nodes `place` placed; a node it folded away (a constant fused into
    # its consumer) goes with its first consumer, as it carries no work.
    placement = json.load(open(a.placement))
    devices = placement["devices"]
    consumers = collections.defaultdict(list)
    for n in graph["nodes"]:
        for i in n.get("inputs", []):
            consumers[str(i).split(":")[0].lstrip("^")].append(n["name"])
    first = next(iter(devices.values()))
    for n in graph["nodes"]:
        if n["name"] not in devices:
            devices[n["name"]] = next((devices[c] for c in consumers[n["name"]] if c in devices), first)
    placement_path = os.path.join(tmp, "placement.json")
    with open(placement_path, "w") as f:
        json.dump(placement, f)

    def simulate(costs):
        g = json.loads(json.dumps(graph))
        for n in g["nodes"]:
            if n["name"] in costs:
                n["cost_us"] = {"*": max(costs[n["name"]], 0.0)}
        path = os.path.join(tmp, "g.json")
        with open(path, "w") as f:
            json.dump(g, f)
        out = subprocess.run([a.psim, "sim", path, "--cluster", a.cluster, "--db", a.db,
                              "--placement", placement_path, "--json"], capture_output=True, text=True)
        if out.returncode:
            sys.exit("replay-variability: placesim sim: " + out.stderr.strip())
        return json.loads(out.stdout)["step_time_us"]

    of_means = simulate({n: statistics.mean(v[k]["dur"] for k in kept) for n, v in by_op.items()})
    replays = [simulate({n: v[k]["dur"] for n, v in by_op.items()}) for k in kept[::a.every]]
    mean_replay = statistics.mean(replays)
    print("traced steps %d, kept %d, replayed %d" % (n_steps, len(kept), len(replays)))
    print("measured step (op span): median %.1f us, trimmed mean %.1f us" % (statistics.median(spans), trimmed_mean(spans)))
    print("replay of the kept steps' mean op times: %.1f us" % of_means)
    print("mean of the kept steps' replays:         %.1f us (median %.1f)" % (mean_replay, statistics.median(replays)))
    print("variability: mean of replays / replay of means = %.4f" % (mean_replay / of_means))
    print("measured trimmed mean / replay of means = %.4f; / mean of replays = %.4f"
          % (trimmed_mean(spans) / of_means, trimmed_mean(spans) / mean_replay))


if __name__ == "__main__":
    main()
