#!/bin/bash
# Memory limits, for every algorithm (issue 15): GNMT (../shared/data/pipedream/gnmt.txt: 775 MB
# of parameters, 133 MB in its largest layer) on uniform:4 at 600 MB and at 400 MB, and zoo:mlp
# on local:2 at 1.1 MB, place; `placesim sim` of each plan reports every device's peak at or
# under the limit (the plan carries its cluster, each device's memory the limit, so `sim --plan`
# needs no --cluster and reports no point over capacity). An impossible limit (zoo:mlp at 800 kB: one weight alone is 802,816 bytes)
# exits 2 with one line giving the bytes needed and the bytes a device offers.
set -u
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
algos="heft greedy etf m-etf m-sct m-topo single round-robin search"
check() { # GRAPH CLUSTER LIMIT
  for a in $algos; do
    "$PSIM" place "$1" --cluster "$2" --algo $a --mem-limit "$3" --budget-ms 100 \
        --plan "$tmp/plan.json" >/dev/null 2>"$tmp/err" || fail "$1 $2 $3 $a: $(cat "$tmp/err")"
    "$PSIM" sim --plan "$tmp/plan.json" --json >"$tmp/sim.json" 2>"$tmp/err" || fail "sim $1 $a: $(cat "$tmp/err")"
    python3 - "$tmp/sim.json" "$3" "$1 $a" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
peaks = d["peak_memory_bytes"]
limit = int(sys.argv[2])
over = {d: b for d, b in peaks.items() if b > limit}
if over or not peaks or d["over_capacity"] is not None:
    print("FAIL: %s: peaks over %d: %s" % (sys.argv[3], limit, over or peaks))
    sys.exit(1)
PY
  done
}
gnmt="$PSIM_DATA/pipedream/gnmt.txt"
if [ -f "$gnmt" ]; then
  check "$gnmt" uniform:4 600000000
  check "$gnmt" uniform:4 400000000
else
  echo "no $gnmt: GNMT cases not run"
fi
check zoo:mlp local:2 1100000
for a in $algos all; do
  err=$("$PSIM" place zoo:mlp --cluster local:2 --algo $a --mem-limit 800000 2>&1 >/dev/null); rc=$?
  [ $rc = 2 ] || fail "mlp at 800000 with $a: exit $rc"
  [ "$err" = "placesim: zoo:mlp: node 'fc1/W': needs 802816 bytes on one device (its inputs, outputs and parameters at once); the cluster offers at most 800000 bytes per device" ] \
      || fail "mlp at 800000 with $a: $err"
done
echo ok
