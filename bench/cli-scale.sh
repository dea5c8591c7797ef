#!/bin/bash
# Command-line scale (issue 15): a generated task graph of N nodes (bench/gen-taskgraph.py) placed
# with heft on uniform:D, its plan written, then simulated from the plan alone. Prints, per step,
# the median wall time and peak memory (max RSS) of R runs, the plan file's size, and the steps'
# own timings from --json. Usage: bench/cli-scale.sh [N [D [R]]] (default 100000 16 3).
# Env: PSIM (the CLI, default build/placesim).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PSIM=${PSIM:-$here/build/placesim}
N=${1:-100000}
D=${2:-16}
R=${3:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/bench/gen-taskgraph.py" "$N" > "$tmp/g.json"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; graph: $N nodes, $(stat -c %s "$tmp/g.json") bytes of JSON; cluster uniform:$D"
measure() { # NAME CMD...: median wall s and max RSS MB of R runs; the last run's stdout in $tmp/out
  local name=$1; shift
  for r in $(seq "$R"); do
    /usr/bin/time -f "%e %M" -o "$tmp/time.$r" "$@" > "$tmp/out"
  done
  python3 - "$name" "$tmp" "$R" <<'PY'
import sys, statistics
name, tmp, r = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [open("%s/time.%d" % (tmp, i + 1)).read().split() for i in range(r)]
wall = statistics.median(float(x[0]) for x in rows)
rss = statistics.median(int(x[1]) for x in rows) / 1024
print("%-28s median %.2f s wall, %.0f MB max RSS (%d runs)" % (name, wall, rss, r))
PY
}
measure "inspect" "$PSIM" inspect "$tmp/g.json"
measure "place --algo heft --plan" "$PSIM" place "$tmp/g.json" --cluster uniform:$D --algo heft --plan "$tmp/p.json" --json
echo "  place timings: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timings"])' "$tmp/out")"
size=$(stat -c %s "$tmp/p.json")
echo "plan file                    $size bytes ($((size / N)) bytes per graph node)"
measure "sim --plan" "$PSIM" sim --plan "$tmp/p.json" --json
echo "  sim timings: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timings"])' "$tmp/out")"
