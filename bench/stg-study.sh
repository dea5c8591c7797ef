#!/bin/bash
# The STG study: every algorithm on the 180 random 50-task graphs of the Standard Task Graph Set
# on 2, 4, 8 and 16 identical devices with no communication cost, against the optimal schedule
# lengths. Prints, per algorithm, the mean and worst ratio of makespan to the optimum and the
# number of optimal schedules. Usage: bench/stg-study.sh [BUDGET_MS] (default 1000; search's
# budget per graph). Env: PSIM (the CLI, default build/placesim), PSIM_DATA (default
# ../shared/data), JOBS (parallel runs, default 2), PROCS ("2 4 8 16"), LIMIT (graphs, all).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PSIM=${PSIM:-$here/build/placesim}
DATA=${PSIM_DATA:-$here/../shared/data}
BUDGET=${1:-1000}
JOBS=${JOBS:-2}
PROCS=${PROCS:-"2 4 8 16"}
LIMIT=${LIMIT:-1000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
graphs=("$DATA"/stg/50/*.stg)
graphs=("${graphs[@]:0:$LIMIT}")
for p in $PROCS; do
  for g in "${graphs[@]}"; do echo "$p $g"; done
done | xargs -P "$JOBS" -L 1 bash -c '
  p=$0; g=$1; b=$(basename "$g" .stg)
  "'"$PSIM"'" place "$g" --cluster stg:$p --algo all --budget-ms '"$BUDGET"' --json > "'"$out"'/$b.$p.json"'
python3 - "$out" "$DATA/stg/opt" <<'PY'
import json, os, sys, glob
out, optdir = sys.argv[1], sys.argv[2]
opt = {}
# "50/randNNNN.stg,P,OPT", or "...,P,LOW,HIGH" where the optimum is not proven: LOW is a lower
# bound and HIGH the best known schedule. Ratios are taken against OPT, or HIGH when unproven.
for f in glob.glob(os.path.join(optdir, "*.csv")):
    for line in open(f):
        parts = line.strip().split(",")
        if len(parts) >= 3:
            lo, hi = float(parts[2]), float(parts[-1])
            opt[(os.path.basename(parts[0])[:-4], int(parts[1]))] = (lo, hi)
def table(title, rows, keep):
    stats = {}
    for b, p, lo, hi, r in rows:
        if not keep(lo, hi):
            continue
        s = stats.setdefault(r["algo"], {"n": 0, "sum": 0.0, "worst": 0.0, "opt": 0, "ms": 0.0, "cpu": 0.0,
                                         "better": 0, "worst_at": ""})
        ratio = r["makespan_us"] / hi
        s["n"] += 1; s["sum"] += ratio
        if ratio > s["worst"]:
            s["worst"], s["worst_at"] = ratio, f"{b} P={p}"
        s["opt"] += ratio <= 1 + 1e-9
        s["ms"] = max(s["ms"], r["elapsed_ms"])
        s["cpu"] = max(s["cpu"], r.get("cpu_ms", 0))
        s["better"] += ratio < 1 - 1e-9
    print(f"\n{title}\n")
    print("| algorithm | runs | mean ratio | worst ratio (graph) | optimal or best known | better than best known | max CPU ms | max wall ms |")
    print("|---|---|---|---|---|---|---|---|")
    for a, s in sorted(stats.items(), key=lambda kv: kv[1]["sum"] / kv[1]["n"]):
        print(f"| {a} | {s['n']} | {s['sum']/s['n']:.5f} | {s['worst']:.4f} ({s['worst_at']}) | {s['opt']} | {s['better']} | {s['cpu']:.0f} | {s['ms']:.0f} |")

rows = []
bad = 0
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    b, p, _ = os.path.basename(f).rsplit(".", 2)
    lo, hi = opt[(b, int(p))]
    for r in json.load(open(f))["results"]:
        if "error" in r:
            continue
        rows.append((b, int(p), lo, hi, r))
        if r["makespan_us"] < lo - 1e-9:
            bad += 1
            print(f"ERROR: {r['algo']} on {b} P={p}: {r['makespan_us']} is below the optimum {lo}", file=sys.stderr)
table("All instances (ratio to the optimum, or to the best known schedule where unproven):", rows, lambda lo, hi: True)
table("Instances with a proven optimum only:", rows, lambda lo, hi: lo == hi)
for p in sorted({r[1] for r in rows}):
    table(f"P = {p}:", [r for r in rows if r[1] == p and r[4]["algo"] in ("search", "heft", "etf", "greedy")],
          lambda lo, hi: True)
sys.exit(1 if bad else 0)
PY
