#!/usr/bin/env bash
# Hostile input files for every file kind the CLI reads (graph, cluster, plan, placement, trace,
# tensor): /dev/zero, JSON nested 100,000 levels deep, wrong-typed fields, absurd numbers. Each
# must end at once with exit 2 and exactly one stderr line naming the file; no crash, no hang, no
# Json-CRITICAL (fatal here).
set -uo pipefail
PSIM="${PSIM:-./build/placesim}"
export G_DEBUG=fatal-criticals
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect_bad NEEDLE... -- COMMAND...: exit 2 within 5 s, one stderr line holding every needle.
expect_bad() {
    local needles=()
    while [ "$1" != "--" ]; do needles+=("$1"); shift; done
    shift
    local t0 rc ms
    t0=$(date +%s%N)
    timeout 5 "$@" > /dev/null 2> "$tmp/err.txt" < /dev/null
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    local why=""
    [ "$rc" = 2 ] || why="exit $rc, expected 2"
    [ -z "$why" ] && [ "$(wc -l < "$tmp/err.txt")" != 1 ] && why="$(wc -l < "$tmp/err.txt") stderr lines"
    for n in "${needles[@]}"; do
        [ -z "$why" ] && ! grep -qF -- "$n" "$tmp/err.txt" && why="no '$n' in stderr"
    done
    [ -z "$why" ] && [ "$ms" -gt 2000 ] && why="took $ms ms"
    if [ -n "$why" ]; then
        echo "FAIL: $*: $why"; sed 's/^/  stderr: /' "$tmp/err.txt" | head -5
        failures=$((failures + 1))
    fi
}

# Good files to damage: a graph, a cluster, a placement, a plan and a trace.
"$PSIM" export zoo:mlp > "$tmp/g.json" || exit 1
printf '%s\n' '{"format": "placesim.cluster/1", "devices": [{"name": "CPU:0"}, {"name": "CPU:1"}]}' > "$tmp/c.json"
"$PSIM" place "$tmp/g.json" --cluster "$tmp/c.json" --algo round-robin -o "$tmp/pl.json" -p "$tmp/plan.json" > /dev/null || exit 1
"$PSIM" sim "$tmp/g.json" --cluster "$tmp/c.json" --plan "$tmp/plan.json" --trace "$tmp/t.json" > /dev/null || exit 1
# Damages a copy: damage SRC DST PYTHON-EXPR-ON-d (d is the parsed JSON).
damage() {
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); $3; json.dump(d, open(sys.argv[2], 'w'))" "$1" "$2" ||
        { echo "FAIL: could not make $2"; failures=$((failures + 1)); }
}
deep() { python3 -c "import sys; sys.stdout.write('{\"format\": \"placesim.$1/1\", \"x\": ' + '[' * 100000)" > "$2"; }

# Reading a graph from stdin still works.
"$PSIM" inspect - < "$tmp/g.json" | grep -q "nodes" || { echo "FAIL: inspect - (stdin)"; failures=$((failures + 1)); }

# /dev/zero and deep nesting, for each file kind.
G=("$PSIM" inspect)
C=("$PSIM" cluster --cluster)
PLAN=("$PSIM" sim "$tmp/g.json" --cluster "$tmp/c.json" --plan)
PLACE=("$PSIM" place "$tmp/g.json" --cluster "$tmp/c.json" --algo file --placement)
TRACE=("$PSIM" compare "$tmp/t.json")
expect_bad /dev/zero -- "${G[@]}" /dev/zero
expect_bad /dev/zero -- "${C[@]}" /dev/zero
expect_bad /dev/zero -- "${PLAN[@]}" /dev/zero
expect_bad /dev/zero -- "${PLACE[@]}" /dev/zero
expect_bad /dev/zero -- "${TRACE[@]}" /dev/zero
expect_bad /dev/zero -- "$PSIM" run "$tmp/g.json" --feed input=/dev/zero
for k in graph cluster plan placement trace; do deep "$k" "$tmp/deep-$k.json"; done
expect_bad deep-graph.json "nested deeper than 512" -- "${G[@]}" "$tmp/deep-graph.json"
expect_bad deep-cluster.json "nested deeper than 512" -- "${C[@]}" "$tmp/deep-cluster.json"
expect_bad deep-plan.json "nested deeper than 512" -- "${PLAN[@]}" "$tmp/deep-plan.json"
expect_bad deep-placement.json "nested deeper than 512" -- "${PLACE[@]}" "$tmp/deep-placement.json"
expect_bad deep-trace.json "nested deeper than 512" -- "${TRACE[@]}" "$tmp/deep-trace.json"

# Wrong-typed fields: an error naming the file, the node or device, and the field.
damage "$tmp/g.json" "$tmp/g-type.json" "d['nodes'][1]['outputs'] = [{'name': {}}]"
n1=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['nodes'][1]['name'])" "$tmp/g.json")
expect_bad g-type.json "node '$n1'" "'name'" -- "${G[@]}" "$tmp/g-type.json"
damage "$tmp/g.json" "$tmp/g-cost.json" "d['nodes'][1]['cost_us'] = {'CPU': 'fast'}"
expect_bad g-cost.json "node '$n1'" "'CPU'" -- "${G[@]}" "$tmp/g-cost.json"
damage "$tmp/c.json" "$tmp/c-type.json" "d['devices'][0]['peak_gflops'] = '50'"
expect_bad c-type.json "device 'CPU:0'" "'peak_gflops'" -- "${C[@]}" "$tmp/c-type.json"
damage "$tmp/c.json" "$tmp/c-name.json" "d['devices'][0]['name'] = {'a': 1}"
expect_bad c-name.json "devices[0]" "'name'" -- "${C[@]}" "$tmp/c-name.json"
damage "$tmp/plan.json" "$tmp/plan-type.json" "d['transfers']['after'][0] = 'no'"
expect_bad plan-type.json "transfers.after[0]" -- "${PLAN[@]}" "$tmp/plan-type.json"
damage "$tmp/plan.json" "$tmp/plan-order.json" "d['seq'][0] = {}"
expect_bad plan-order.json "seq[0]" -- "${PLAN[@]}" "$tmp/plan-order.json"
damage "$tmp/pl.json" "$tmp/pl-type.json" "d['format'] = ['placesim.placement/1']"
expect_bad pl-type.json "'format'" -- "${PLACE[@]}" "$tmp/pl-type.json"
damage "$tmp/pl.json" "$tmp/pl-ms.json" "d['makespan_us'] = 'soon'"
expect_bad pl-ms.json "'makespan_us'" -- "${PLACE[@]}" "$tmp/pl-ms.json"
damage "$tmp/pl.json" "$tmp/pl-dev.json" "d['devices'][next(iter(d['devices']))] = 0"
expect_bad pl-dev.json "must be a string" -- "${PLACE[@]}" "$tmp/pl-dev.json"
damage "$tmp/t.json" "$tmp/t-type.json" "[e.update(ts='0') for e in d['traceEvents'] if e.get('cat') == 'op']"
expect_bad t-type.json "traceEvents[" "'ts'" -- "${TRACE[@]}" "$tmp/t-type.json"
damage "$tmp/t.json" "$tmp/t-dev.json" "d['otherData']['placesim']['devices'][0] = {}"
expect_bad t-dev.json "devices" -- "${TRACE[@]}" "$tmp/t-dev.json"

# Numbers out of range are stopped at the door (1e308 overran the placer).
damage "$tmp/g.json" "$tmp/g-big.json" "d['nodes'][1]['cost_us'] = {'CPU': 1e308}"
expect_bad g-big.json "node '$n1'" "out of range" -- "${G[@]}" "$tmp/g-big.json"
damage "$tmp/c.json" "$tmp/c-launch.json" "d['devices'][0]['launch_us'] = 1e308"
expect_bad c-launch.json "device 'CPU:0'" "'launch_us'" "out of range" -- "${C[@]}" "$tmp/c-launch.json"
damage "$tmp/c.json" "$tmp/c-lat.json" "d['default_link'] = {'latency_us': 1e308}"
expect_bad c-lat.json "default_link" "'latency_us'" -- "${C[@]}" "$tmp/c-lat.json"
damage "$tmp/c.json" "$tmp/c-mem.json" "d['devices'][1]['memory_bytes'] = 2**63 - 1"
expect_bad c-mem.json "device 'CPU:1'" "'memory_bytes'" -- "${C[@]}" "$tmp/c-mem.json"
damage "$tmp/plan.json" "$tmp/plan-bytes.json" "d['placement'][0] = 2**62 + 1"
expect_bad plan-bytes.json "placement[0]" -- "${PLAN[@]}" "$tmp/plan-bytes.json"

# Messages stay on one line and name the file: json-glib's errors, names holding line breaks,
# missing files, folders.
printf '{"format": "placesim.cluster/1",\n "devices": [,]}\n' > "$tmp/syntax.json"
expect_bad syntax.json "line 2" -- "${C[@]}" "$tmp/syntax.json"
expect_bad syntax.json -- "${G[@]}" "$tmp/syntax.json"
expect_bad syntax.json -- "${PLAN[@]}" "$tmp/syntax.json"
expect_bad syntax.json -- "${PLACE[@]}" "$tmp/syntax.json"
expect_bad syntax.json -- "${TRACE[@]}" "$tmp/syntax.json"
damage "$tmp/c.json" "$tmp/c-nl.json" "d['devices'][0]['bad\\nkey'] = 1"
expect_bad c-nl.json "unknown field" -- "${C[@]}" "$tmp/c-nl.json"
damage "$tmp/pl.json" "$tmp/pl-nl.json" "d['devices']['no\\nsuch'] = 'CPU:0'"
expect_bad pl-nl.json "not in graph" -- "${PLACE[@]}" "$tmp/pl-nl.json"
damage "$tmp/g.json" "$tmp/g-nl.json" "d['nodes'][1]['name'] = 'a\\nb'; d['nodes'][1]['op'] = 7"
expect_bad g-nl.json "'op'" -- "${G[@]}" "$tmp/g-nl.json"
damage "$tmp/t.json" "$tmp/t-nostep.json" "d['otherData']['placesim']['step_time_us'] = 0"
expect_bad t-nostep.json "no step time" -- "${TRACE[@]}" "$tmp/t-nostep.json"
for f in "$tmp/missing.json" "$tmp"; do
    expect_bad "$f" -- "${G[@]}" "$f"
    expect_bad "$f" -- "${C[@]}" "$f"
    expect_bad "$f" -- "${PLAN[@]}" "$f"
    expect_bad "$f" -- "${PLACE[@]}" "$f"
    expect_bad "$f" -- "${TRACE[@]}" "$f"
    expect_bad "$f" -- "$PSIM" run "$tmp/g.json" --feed input="$f"
done

[ "$failures" = 0 ] || { echo "$failures failures"; exit 1; }
echo ok
