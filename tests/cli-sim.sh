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

# critical_path_us has one meaning (docs/sim.md): the graph's longest chain of costs and
# transfers, a lower bound; --json, the trace and the SQLite run agree, and on the HEFT example
# it (77) is below the step time (80), which the binding chain sets.
"$PSIM" sim "$heft" --cluster uniform:3:0.001:0 --algo heft --json --trace "$tmp/cp.json" \
    --sqlite "$tmp/cp.sqlite" >"$tmp/cp.out" || fail "sim --trace for critical_path_us"
cp_json=$(sed -n 's/.*"critical_path_us":\([0-9.e+-]*\).*/\1/p' "$tmp/cp.out")
cp_trace=$(sed -n 's/.*"critical_path_us": *\([0-9.e+-]*\).*/\1/p' "$tmp/cp.json")
cp_lb=$(sed -n 's/.*"lower_bound_us":\([0-9.e+-]*\).*/\1/p' "$tmp/cp.out")
awk -v a="$cp_json" -v b="$cp_trace" -v c="$cp_lb" 'BEGIN { exit !(a == 77 && b == 77 && c == 77) }' ||
    fail "critical_path_us: --json $cp_json, trace $cp_trace, lower bound $cp_lb (expected 77 each)"
if command -v sqlite3 >/dev/null; then
    [ "$(sqlite3 "$tmp/cp.sqlite" 'SELECT critical_path_us FROM runs')" = 77.0 ] || fail "SQLite critical_path_us"
fi

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
cp "$PSIM_SRC/tests/data/crossed.json" "$tmp/crossed.json"
"$PSIM" place "$tmp/crossed.json" --cluster local:2 --algo heft --plan "$tmp/cplan.json" --plan-orders >/dev/null || fail "place crossed"
"$PSIM" sim --cluster local:2 --plan "$tmp/cplan.json" >/dev/null || fail "sim of the crossed plan as placed"
sed 's|\["x", "a0", "x/_send_0_to_CPU_1", "a0/_send_0_to_CPU_1", |["x", "a0/_send_0_to_CPU_1", "a0", "x/_send_0_to_CPU_1", |' \
    "$tmp/cplan.json" >"$tmp/early-send.json"
cmp -s "$tmp/cplan.json" "$tmp/early-send.json" && fail "the plan's order is not as expected: $(grep -A2 '"order"' "$tmp/cplan.json")"
expect2 "$PSIM" sim --cluster local:2 --plan "$tmp/early-send.json"
grep -q "node 'a0/_send_0_to_CPU_1'.*deadlocks" "$tmp/e" || fail "early Send message: $(cat "$tmp/e")"
# Cost sources (issue 20 item 21): counted in --json, summarised on the terminal, tagged on each
# op of the trace with the DB row that gave a measured cost.
out=$("$PSIM" sim "$heft" --cluster uniform:3:0.001:0 --algo heft --json) || fail "sim heft json"
echo "$out" | grep -q '"cost_sources":{"measured":0,"estimated":0,"annotated":10,"free":0}' || fail "annotated sources: $out"
"$PSIM" profile zoo:mlp --cluster local:1 --db "$tmp/c.db" --no-links --no-calibrate --rounds 1 \
    --budget-ms 1 --reps 3 > /dev/null 2>&1 || fail "profile"
python3 -c 'import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); assert d.execute("DELETE FROM kernels WHERE op = \"Add\"").rowcount == 1; d.commit()' "$tmp/c.db" ||
    fail "no Add row to delete"
out=$("$PSIM" sim zoo:mlp --cluster local:1 --algo single --db "$tmp/c.db" --json --trace "$tmp/m.json") || fail "sim --db"
echo "$out" | grep -q '"cost_sources":{"measured":6,"estimated":1,"annotated":0,"free":7}' || fail "measured sources: $out"
"$PSIM" sim zoo:mlp --cluster local:1 --algo single | grep -q "^costs  *0 measured, 7 estimated, 0 annotated, 7 free" ||
    fail "terminal summary"
python3 - "$tmp/m.json" "$tmp/c.db" <<'PY' || fail "trace cost tags"
import json, sqlite3, sys
ops = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("cat") == "op"]
src = {e["name"]: e["args"].get("cost_source") for e in ops}
assert src["fc2/Add"] == "estimated" and "db_row" not in next(e for e in ops if e["name"] == "fc2/Add")["args"], src
measured = [e for e in ops if e["args"].get("cost_source") == "measured"]
assert len(measured) == 6, src
db = sqlite3.connect(sys.argv[2])
for e in measured:  # the row named is the node's op's row
    op = db.execute("SELECT op FROM kernels WHERE rowid = ?", (e["args"]["db_row"],)).fetchone()
    assert op and op[0] == e["args"]["op"], (e, op)
# The 7 free nodes (weights, the input) are evaluated or fed before the step: not in the trace.
assert sum(1 for e in ops if e["args"].get("cost_source") == "free") == 0 and len(ops) == 7, src
PY
# One model of a step (issue 14): on the HEFT paper's example with its links sharing one bus,
# `place` reported 80 where `sim` gave 91 for the same plan; now every algorithm's reported
# makespan is what `sim` gives for the plan it writes.
printf '%s\n' '{"format": "placesim.cluster/1", "devices": [{"name": "P:0", "type": "P"},' \
    '{"name": "P:1", "type": "P"}, {"name": "P:2", "type": "P"}],' \
    '"default_link": {"bandwidth_GBps": 0.001, "latency_us": 0, "independent": false}}' >"$tmp/bus.json"
# same_step WHAT PLAN PLACE-ARGS... -- SIM-ARGS...: place with PLACE-ARGS writing PLAN, simulate
# PLAN with SIM-ARGS; the makespan `place` reports must be the step `sim` gives, exactly.
same_step() {
    local what=$1 plan=$2 pl sm a b
    shift 2
    local pargs=() sargs=()
    while [ "$1" != "--" ]; do pargs+=("$1"); shift; done
    shift
    sargs=("$@")
    pl=$("$PSIM" place "${pargs[@]}" --plan "$plan" --json) || fail "place: $what"
    sm=$("$PSIM" sim --plan "$plan" "${sargs[@]}" --json) || fail "sim --plan: $what"
    a=$(echo "$pl" | sed -n 's/.*"makespan_us":\([0-9.e+-]*\).*/\1/p')
    b=$(echo "$sm" | sed -n 's/.*"step_time_us":\([0-9.e+-]*\).*/\1/p')
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "$what: place reports $a, sim --plan gives $b"
}
for algo in heft greedy etf search round-robin; do
    same_step "$algo on a bus" "$tmp/bus-plan.json" "$heft" --cluster "$tmp/bus.json" --algo $algo --budget-ms 20 \
        -- --cluster "$tmp/bus.json"
done

# The same with a cost DB: a plan file's embedded graph gives the cost model the values of its
# constants (a Reshape's shape is in its kernel signature), so `sim --plan` finds every row that
# `place` found (it estimated the transformer's Reshapes, 8 us over).
"$PSIM" profile transformer --db "$tmp/tr.db" --cluster local:1 --in-situ --in-situ-steps 3 --no-links \
    --no-calibrate --rounds 1 --budget-ms 1 >/dev/null 2>&1 || fail "profile transformer"
same_step "transformer with a cost DB" "$tmp/tr-plan.json" transformer --db "$tmp/tr.db" --cluster local:1 \
    --algo single -- --db "$tmp/tr.db"

# And on two devices with a profile in situ (idle curves, links, reclaim and cold-block curves):
# where the plan's held Recvs and priorities were dropped, `place` reported the placement's step
# as the plan's (the cnn's round-robin: 609.92 against sim's 611.83 us); it reports the plan's.
"$PSIM" profile cnn --db "$tmp/c2.db" --cluster local:2 --in-situ --in-situ-steps 3 \
    --no-calibrate --rounds 1 --budget-ms 1 >/dev/null 2>&1 || fail "profile cnn on local:2"
for algo in round-robin heft greedy; do
    same_step "cnn $algo on local:2 with a cost DB" "$tmp/c2.json" cnn --db "$tmp/c2.db" --cluster local:2 \
        --algo $algo -- --db "$tmp/c2.db"
done

# The simulator and the executor run the same nodes: what the executor evaluates before the step
# (constants, weights, known shapes) or takes as fed is not in either timeline, a Recv's consumer
# is never folded (the tensor arrives in every step), so `compare` matches every op, on one
# device and split over two.
DATA="${PSIM_DATA:-../shared/data}"
if [ -f "$DATA/onnx-light/inception_v1.onnx" ]; then
    for algo in single heft round-robin; do
        "$PSIM" place "$DATA/onnx-light/inception_v1.onnx" --cluster local:2 --algo $algo \
            --plan "$tmp/iv.json" >/dev/null || fail "place inception_v1 $algo"
        "$PSIM" sim --cluster local:2 --plan "$tmp/iv.json" --trace "$tmp/iv-sim.json" >/dev/null ||
            fail "sim inception_v1 $algo"
        "$PSIM" run --cluster local:2 --plan "$tmp/iv.json" --trace "$tmp/iv-run.json" >/dev/null ||
            fail "run inception_v1 $algo"
        out=$("$PSIM" compare "$tmp/iv-sim.json" "$tmp/iv-run.json" --json) || fail "compare $algo"
        echo "$out" | grep -q '"only_sim":0,' || fail "inception_v1 $algo: ops only simulated: $out"
        echo "$out" | grep -q '"only_run":0,' || fail "inception_v1 $algo: ops only measured: $out"
        echo "$out" | grep -q '"matched_ops":0,' && fail "inception_v1 $algo: nothing matched"
    done
fi
echo "cli-sim: ok"
