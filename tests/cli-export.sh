#!/bin/bash
# placesim export: --placement writes each node's placed device, --plan exports the partitioned
# graph with TF's _Send/_Recv, --json gives the figures, BiasAdd stays BiasAdd in pbtxt, and
# bad input or usage exits 2 with one line.
set -u
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ex="$PSIM_SRC/tests/data/heft-example.json"
"$PSIM" place "$ex" --cluster uniform:3:0.001 --algo heft --plan "$tmp/plan.json" --out "$tmp/p.json" >/dev/null \
    || fail "place"

# --placement: every node gets the device the placement gives it.
"$PSIM" export "$ex" --placement "$tmp/p.json" -f pbtxt > "$tmp/placed.pbtxt" || fail "export --placement"
n=$(grep -c '^  name: ' "$tmp/placed.pbtxt")
[ "$n" = 10 ] || fail "placed nodes: $n"
[ "$(grep -c '^  device: "/job:localhost/replica:0/task:0/device:P:' "$tmp/placed.pbtxt")" = "$n" ] \
    || fail "not every node placed"
dev=$(grep -o '"n5" : "[^"]*"' "$tmp/p.json" | cut -d'"' -f4)
grep -A3 '^  name: "n5"$' "$tmp/placed.pbtxt" | grep -q "device: \"$dev\"" || fail "n5 not on $dev"
# The same in JSON: assigned_device.
"$PSIM" export "$ex" --placement "$tmp/p.json" | grep -q "\"assigned_device\": \"$dev\"" || fail "json placement"

# --plan: the partitioned graph, one _Send/_Recv per transfer, every node on its plan device.
out=$("$PSIM" export --plan "$tmp/plan.json" -o "$tmp/plan.pbtxt" --json) || fail "export --plan"
echo "$out" | grep -q '"format":"pbtxt"' || fail "json format: $out"
echo "$out" | grep -q '"nodes":28' || fail "json nodes: $out"
echo "$out" | grep -q '"devices":3' || fail "json devices: $out"
echo "$out" | grep -q "\"out\":\"$tmp/plan.pbtxt\"" || fail "json out: $out"
[ "$(grep -c 'op: "_Send"' "$tmp/plan.pbtxt")" = 9 ] || fail "sends"
[ "$(grep -c 'op: "_Recv"' "$tmp/plan.pbtxt")" = 9 ] || fail "recvs"
[ "$(grep -c 'key: "send_device_incarnation"' "$tmp/plan.pbtxt")" = 18 ] || fail "incarnation"
[ "$(grep -c '^  device: ' "$tmp/plan.pbtxt")" = 28 ] || fail "plan devices"
"$PSIM" inspect "$tmp/plan.pbtxt" >/dev/null || fail "plan pbtxt does not read back"
# GRAPH beside --plan must be the plan's graph.
"$PSIM" export "$ex" --plan "$tmp/plan.json" -f pbtxt | cmp -s - "$tmp/plan.pbtxt" || fail "plan with its graph"
err=$("$PSIM" export zoo:mlp --plan "$tmp/plan.json" 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] || fail "plan of another graph: exit $rc"
echo "$err" | grep -q "plan.json: node 'n1': not the plan of graph 'mlp'" || fail "message: $err"

# BiasAdd: exported as BiasAdd, data_format only there.
if [ -f "$PSIM_DATA/tf/lstm.pb" ]; then
    "$PSIM" export "$PSIM_DATA/tf/lstm.pb" -f pbtxt > "$tmp/lstm.pbtxt" || fail "lstm"
    b=$(grep -c 'op: "BiasAdd"' "$tmp/lstm.pbtxt")
    [ "$b" -gt 0 ] || fail "no BiasAdd"
    [ "$(grep -c 'key: "data_format"' "$tmp/lstm.pbtxt")" = "$b" ] || fail "data_format off BiasAdd"
fi

# Bad input and usage: exit 2, one line.
sed '/"n5"/d' "$tmp/p.json" > "$tmp/short.json"
err=$("$PSIM" export "$ex" --placement "$tmp/short.json" 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] || fail "missing node: exit $rc"
echo "$err" | grep -q "short.json: node 'n5': has no device" || fail "missing node: $err"
[ "$(echo "$err" | wc -l)" = 1 ] || fail "more than one line: $err"
"$PSIM" export "$ex" --placement "$tmp/p.json" --plan "$tmp/plan.json" >/dev/null 2>&1
[ $? = 2 ] || fail "--placement with --plan"
"$PSIM" export "$ex" --json >/dev/null 2>&1; [ $? = 2 ] || fail "--json without --out"
"$PSIM" export >/dev/null 2>&1; [ $? = 2 ] || fail "no graph"

# A training graph (issue 17): the classifier's loss against a 'labels' input and the gradients
# of its parameters as outputs; it places, simulates and runs like any graph.
"$PSIM" export zoo:mlp --gradients -o "$tmp/train.json" 2>"$tmp/e" || fail "export --gradients: $(cat "$tmp/e")"
grep -q "gradients of 6 parameters" "$tmp/e" || fail "export --gradients line: $(cat "$tmp/e")"
"$PSIM" inspect "$tmp/train.json" | grep -q "SoftmaxCrossEntropyLoss" || fail "training graph has no loss"
"$PSIM" place "$tmp/train.json" --cluster local:2 --algo heft --plan "$tmp/tplan.json" >/dev/null || fail "place the training graph"
"$PSIM" sim --plan "$tmp/tplan.json" >/dev/null || fail "sim the training graph"
out=$("$PSIM" run --plan "$tmp/tplan.json" --steps 2 --feed labels=ones --json) || fail "run the training graph"
echo "$out" | python3 -c 'import json, sys; d = json.load(sys.stdin); sys.exit(len(d["outputs"]) != 8)' \
    || fail "training graph outputs (the probabilities, the loss and 6 gradients): $out"
# What it cannot differentiate, and a loss that is not a scalar: one line, exit 2.
"$PSIM" export zoo:cnn --gradients -o "$tmp/cnn.json" 2>"$tmp/e" || fail "cnn gradients: $(cat "$tmp/e")"
grep -q "gradients of 29 parameters" "$tmp/e" || fail "cnn: the running statistics are not parameters to train: $(cat "$tmp/e")"
"$PSIM" export zoo:transformer --gradients -o "$tmp/x.json" 2>"$tmp/e"; [ $? = 2 ] || fail "transformer gradients"
grep -q "its first output is not a batch of class scores \[N, C\] (give --loss)" "$tmp/e" || fail "transformer: $(cat "$tmp/e")"
printf '{"format": "placesim.graph/1", "name": "cos", "nodes": [
 {"name": "w", "op": "Const", "parameter": true, "attrs": {"value": {"tensor": {"dtype": "float32", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]}}}},
 {"name": "c", "op": "Cos", "inputs": ["w"]}], "outputs": ["c"]}\n' > "$tmp/cos.json"
"$PSIM" export "$tmp/cos.json" --gradients -o "$tmp/x.json" 2>"$tmp/e"; [ $? = 2 ] || fail "uncovered op"
grep -q "node 'c': no gradient: op Cos is not covered yet" "$tmp/e" || fail "uncovered op: $(cat "$tmp/e")"
"$PSIM" export zoo:mlp --gradients --loss fc1/Gemm -o "$tmp/x.json" 2>"$tmp/e"; [ $? = 2 ] || fail "non-scalar loss"
grep -q "must be a scalar" "$tmp/e" || fail "non-scalar loss: $(cat "$tmp/e")"
"$PSIM" export zoo:mlp --loss x -o "$tmp/x.json" >/dev/null 2>&1; [ $? = 2 ] || fail "--loss without --gradients"
echo ok
