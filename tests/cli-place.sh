#!/bin/bash
# placesim place: the HEFT paper's example gives 80, --plan and --out write files that load
# back, `all` lists every algorithm, and bad input exits 2 with one line naming the node.
set -u
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ex="$PSIM_SRC/tests/data/heft-example.json"
out=$("$PSIM" place "$ex" --cluster uniform:3:0.001 --algo heft --json --plan "$tmp/plan.json" --out "$tmp/p.json") || fail "place heft"
echo "$out" | grep -q '"makespan_us":80.0' || fail "heft makespan: $out"
echo "$out" | grep -q '"n_send":9' || fail "heft sends: $out"
grep -q '"format": "placesim.plan/1"' "$tmp/plan.json" || fail "plan file"
grep -q '"format" : "placesim.placement/1"' "$tmp/p.json" || fail "placement file"
out=$("$PSIM" place "$ex" --cluster uniform:3:0.001 --algo file --placement "$tmp/p.json" --json) || fail "file"
echo "$out" | grep -q '"makespan_us":80.0' || fail "file makespan: $out"
n=$("$PSIM" place "$ex" --cluster uniform:3:0.001 --algo all --budget-ms 20 --json | grep -o '"algo"' | wc -l)
[ "$n" = 9 ] || fail "all lists $n algorithms"
# A request no device can meet: exit 2, one line naming the node.
sed 's/"name": "n5", "op": "Task"/"name": "n5", "op": "Task", "device": "GPU:0"/' "$ex" > "$tmp/bad.json"
err=$("$PSIM" place "$tmp/bad.json" --cluster uniform:3 --algo heft 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] || fail "bad request exit $rc"
echo "$err" | grep -q "node 'n5'.*GPU:0" || fail "bad request message: $err"
[ "$(echo "$err" | wc -l)" = 1 ] || fail "more than one line: $err"
"$PSIM" place "$ex" --cluster uniform:3 --algo nope >/dev/null 2>&1; [ $? = 2 ] || fail "unknown algo"
"$PSIM" place "$ex" --cluster uniform:x --algo heft >/dev/null 2>&1; [ $? = 2 ] || fail "bad cluster"
# A graph with no nodes is bad input (it once placed nothing and exited 0, UBSan reporting a null
# pointer in partition.c): exit 2, one line naming the file.
echo '{"format": "placesim.graph/1", "name": "empty", "nodes": []}' > "$tmp/empty.json"
err=$("$PSIM" place "$tmp/empty.json" --cluster uniform:2 --algo all 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] || fail "empty graph exit $rc"
[ "$err" = "placesim: $tmp/empty.json: graph has no nodes" ] || fail "empty graph message: $err"
"$PSIM" sim "$tmp/empty.json" --cluster uniform:2 --algo heft >/dev/null 2>&1; [ $? = 2 ] || fail "sim of an empty graph"
echo ok
