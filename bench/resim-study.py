#!/usr/bin/python3
"""Re-simulates a finished `placesim study` under another build of the simulator, without
measuring anything again: what a change to the cost model or the simulator would have made of
that study's rows, in seconds rather than the study's half hour.

    /usr/bin/python3 bench/resim-study.py STUDY_DIR OLD_PLACESIM NEW_PLACESIM

For each row's plan (STUDY_DIR/GRAPH-ALGO.plan.json, written by the study), both builds run
`sim --plan PLAN --db STUDY_DIR/costs.db`; the row's simulated step is scaled by new / old and
compared with the row's measured step (results.csv). The ratio, not the new build's figure, is
what counts: in a study of several graphs the DB ends with the last graph's device calibrations
(the in-situ gap between ops, the idle and busy figures), so only the last graph's rows simulate
from it exactly as the study simulated them; the ratio carries the change over to the others.
The placements stay the study's: a change that would have made the placers choose differently
is not seen (compare `single` and `round-robin`, whose placements do not depend on costs).
Prints per row the old and new errors, then per algorithm the median |error|, worst and mean
signed error both ways. Exit 2 on a missing directory, file or build.
"""
import csv
import json
import os
import re
import statistics
import subprocess
import sys


def fail(msg):
    print("resim-study: " + msg, file=sys.stderr)
    sys.exit(2)


def safe(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def step_us(psim, plan, db):
    r = subprocess.run([psim, "sim", "--plan", plan, "--db", db, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        fail("%s sim --plan %s: %s" % (psim, plan, (r.stderr.strip() or "exit %d" % r.returncode)))
    return json.loads(r.stdout)["step_time_us"]


def summary(errs):
    return "median |e| %5.2f%%  worst %6.2f%%  mean signed %+6.2f%%" % (
        statistics.median(abs(e) for e in errs), max(abs(e) for e in errs), statistics.mean(errs))


def main():
    if len(sys.argv) != 4:
        fail("usage: resim-study.py STUDY_DIR OLD_PLACESIM NEW_PLACESIM")
    out, old, new = sys.argv[1:]
    db, results = os.path.join(out, "costs.db"), os.path.join(out, "results.csv")
    for f in (db, results):
        if not os.path.isfile(f):
            fail("%s: no such file (a study's output folder, with its default --db, is expected)" % f)
    for b in (old, new):
        if not (os.path.isfile(b) and os.access(b, os.X_OK)):
            fail("%s: not an executable placesim" % b)
    by_algo = {}
    with open(results, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("measured_us")]
    if not rows:
        fail("%s: no measured rows" % results)
    print("%-24s %-12s %12s %12s %9s %9s" % ("graph", "algorithm", "measured us", "sim x new/old", "old", "new"))
    for r in rows:
        plan = os.path.join(out, safe("%s-%s" % (r["graph"], r["algo"])) + ".plan.json")
        if not os.path.isfile(plan):
            fail("%s: no such file (studies before the plan files were written cannot be re-simulated)" % plan)
        ratio = step_us(new, plan, db) / step_us(old, plan, db)
        sim, measured = float(r["sim_us"]), float(r["measured_us"])
        e_old = 100 * (sim - measured) / measured
        e_new = 100 * (sim * ratio - measured) / measured
        by_algo.setdefault(r["algo"], []).append((e_old, e_new))
        print("%-24s %-12s %12.1f %12.4f %+8.2f%% %+8.2f%%" % (r["graph"], r["algo"], measured, ratio, e_old, e_new))
    print()
    for algo, es in list(by_algo.items()) + [("all", [e for v in by_algo.values() for e in v])]:
        print("%-12s %3d rows  old: %s" % (algo, len(es), summary([e[0] for e in es])))
        print("%-12s           new: %s" % ("", summary([e[1] for e in es])))


if __name__ == "__main__":
    main()
