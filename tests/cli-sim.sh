#!/usr/bin/env bash
# placesim sim from the command line: the HEFT paper example takes exactly 80 in static order,
# the figures and files it promises exist, and bad input is exit 2 with one line.
set -u
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
heft="$PSIM_SRC/tests/data/heft-example.json"

out=$("$PSIM" sim "$heft" --cluster uniform:3:0.001:0 --algo heft --order static --json) || fail "sim heft"
step=$(echo "$out" | sed -n 's/.*"step_time_us":\([0-9.e+-]*\).*/\1/p')
[ "$step" = "80.0" ] || [ "$step" = "80" ] || fail "heft example step time $step, expected 80"

# Through a plan file and a placement file: same step time.
"$PSIM" place "$heft" --cluster uniform:3:0.001:0 --algo heft --plan "$tmp/plan.json" --out "$tmp/p.json" >/dev/null || fail "place"
out=$("$PSIM" sim "$heft" --cluster uniform:3:0.001:0 --plan "$tmp/plan.json" --json --trace "$tmp/t.json" --sqlite "$tmp/t.sqlite") || fail "sim --plan"
echo "$out" | grep -q '"step_time_us":80' || fail "sim --plan: $out"
# The plan carries its graph: GRAPH may be left out.
out=$("$PSIM" sim --cluster uniform:3:0.001:0 --plan "$tmp/plan.json" --json) || fail "sim --plan without GRAPH"
echo "$out" | grep -q '"step_time_us":80' || fail "sim --plan without GRAPH: $out"
out=$("$PSIM" sim "$heft" --cluster uniform:3:0.001:0 --placement "$tmp/p.json" --json) || fail "sim --placement"
echo "$out" | grep -q '"step_time_us":80' || fail "sim --placement: $out"
[ -s "$tmp/t.json" ] || fail "no trace written"
"$PSIM" compare "$tmp/t.json" "$tmp/t.json" --json | grep -q '"error_pct":0' || fail "compare of a trace with itself"

# Bad input: one line on stderr, exit 2.
expect2() {
    "$@" >"$tmp/o" 2>"$tmp/e"; rc=$?
    [ $rc = 2 ] || fail "exit $rc (expected 2): $*"
    [ "$(wc -l <"$tmp/e")" = 1 ] || fail "expected one error line: $(cat "$tmp/e")"
}
expect2 "$PSIM" sim "$heft" --cluster uniform:3 --algo heft --order sideways
expect2 "$PSIM" sim "$heft" --cluster uniform:3 --algo nosuch
expect2 "$PSIM" sim "$heft" --cluster uniform:3 --plan "$tmp/missing.json"
expect2 "$PSIM" sim "$heft" --cluster uniform:3
echo '{"format": "placesim.plan/1", "nodes": 3}' >"$tmp/bad.json"
expect2 "$PSIM" sim "$heft" --cluster uniform:3 --plan "$tmp/bad.json"
expect2 "$PSIM" compare "$tmp/bad.json" "$tmp/t.json"

# GRAPH given beside --plan must be the plan's graph (it was silently ignored): exit 2 naming both.
echo '{"format": "placesim.graph/1", "name": "other", "nodes": [{"name": "t", "op": "Task", "cost_us": {"P": 1}}]}' >"$tmp/other.json"
expect2 "$PSIM" sim "$tmp/other.json" --cluster uniform:3:0.001:0 --plan "$tmp/plan.json"
grep -q "plan.json: .*other.json" "$tmp/e" || fail "GRAPH mismatch message: $(cat "$tmp/e")"

# One plan check for sim and run (graph/plan.c): a plan whose order puts a Send before the node
# it sends was simulated (the simulator sends eagerly) but hung the executor; both refuse it now,
# with the same message, as they refuse crossed orders that deadlock (cli-run.sh).
cat >"$tmp/crossed.json" <<'EOF'
{"format": "placesim.graph/1", "name": "crossed", "inputs": ["x"], "outputs": ["out:0"],
 "nodes": [
  {"name": "x", "op": "Placeholder", "outputs": [{"dtype": "float32", "shape": [4]}], "device": "CPU:0"},
  {"name": "a0", "op": "Relu", "inputs": ["x:0"], "device": "CPU:0"},
  {"name": "a1", "op": "Relu", "inputs": ["x:0"], "device": "CPU:1"},
  {"name": "b0", "op": "Relu", "inputs": ["a1:0"], "device": "CPU:0"},
  {"name": "b1", "op": "Relu", "inputs": ["a0:0"], "device": "CPU:1"},
  {"name": "out", "op": "Add", "inputs": ["b0:0", "b1:0"], "device": "CPU:0"}]}
EOF
"$PSIM" place "$tmp/crossed.json" --cluster local:2 --algo heft --plan "$tmp/cplan.json" >/dev/null || fail "place crossed"
"$PSIM" sim --cluster local:2 --plan "$tmp/cplan.json" >/dev/null || fail "sim of the crossed plan as placed"
sed 's|\["x", "a0", "x/_send_0_to_CPU_1", "a0/_send_0_to_CPU_1", |["x", "a0/_send_0_to_CPU_1", "a0", "x/_send_0_to_CPU_1", |' \
    "$tmp/cplan.json" >"$tmp/early-send.json"
cmp -s "$tmp/cplan.json" "$tmp/early-send.json" && fail "the plan's order is not as expected: $(grep -A2 '"order"' "$tmp/cplan.json")"
expect2 "$PSIM" sim --cluster local:2 --plan "$tmp/early-send.json"
grep -q "node 'a0/_send_0_to_CPU_1'.*deadlocks" "$tmp/e" || fail "early Send message: $(cat "$tmp/e")"
echo "cli-sim: ok"
