#!/usr/bin/env python3
"""One line per row of a `placesim study --json` report: graph, algorithm, simulated, measured,
error, transfers (bench/dp-study.sh, bench/dp-mpi-study.sh).
    python3 bench/study-rows.py STUDY.json RUN"""
import json
import sys

d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    print(f"run {sys.argv[2]}  {r['graph']:8s} {r['algo']:12s} simulated {r['sim_us']:10.1f} us"
          f"  measured {r['measured_us']:10.1f} us  error {r['error_pct']:+6.2f}%  transfers {r['transfers']}")
