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
echo "$out" | python3 -c 'import json, sys; t = json.load(sys.stdin)["timings"]; sys.exit(set(t) != {"load_ms", "problem_ms", "place_ms", "plan_ms", "write_ms"} or min(t.values()) < 0)' \
    || fail "place --json timings: $out"
out=$("$PSIM" sim --plan "$tmp/plan.json" --json) || fail "sim --plan"
echo "$out" | python3 -c 'import json, sys; t = json.load(sys.stdin)["timings"]; sys.exit(set(t) != {"load_ms", "place_ms", "plan_ms", "simulate_ms"} or t["place_ms"] != 0 or t["load_ms"] <= 0)' \
    || fail "sim --json timings: $out"
grep -q '"format": "placesim.plan/2"' "$tmp/plan.json" || fail "plan file"
# The plan refers to its graph file (read as it is) by path and SHA-256; a changed or missing
# graph is one error line, exit 2; a graph changed by options (--cse) is held in the plan.
python3 - "$tmp/plan.json" "$ex" <<'PY' || fail "plan's graph reference"
import hashlib, json, os, sys
g = json.load(open(sys.argv[1]))["graph"]
assert g["source"] == os.path.realpath(sys.argv[2]), g
assert g["sha256"] == hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest(), g
PY
cp "$ex" "$tmp/g.json"
"$PSIM" place "$tmp/g.json" --cluster uniform:3:0.001 --algo heft --plan "$tmp/gplan.json" >/dev/null || fail "place g.json"
"$PSIM" sim --plan "$tmp/gplan.json" >/dev/null || fail "sim of a plan referring to g.json"
echo " " >> "$tmp/g.json"
"$PSIM" sim --plan "$tmp/gplan.json" >/dev/null 2>"$tmp/e" && fail "sim of a plan whose graph changed"
[ "$?" = 2 ] && grep -q "gplan.json: its graph '.*g.json' has changed since the plan was made" "$tmp/e" && [ "$(wc -l < "$tmp/e")" = 1 ] \
    || fail "changed graph: $(cat "$tmp/e")"
rm "$tmp/g.json"
"$PSIM" sim --plan "$tmp/gplan.json" >/dev/null 2>"$tmp/e" && fail "sim of a plan whose graph is gone"
[ "$?" = 2 ] && grep -q "gplan.json: its graph '.*g.json' cannot be read" "$tmp/e" || fail "missing graph: $(cat "$tmp/e")"
# The graph given beside the plan stands for a source that moved, when its bytes are the same.
"$PSIM" sim "$ex" --plan "$tmp/gplan.json" --json | grep -q '"step_time_us":80.0' || fail "sim of a plan with its moved graph"
"$PSIM" sim zoo:mlp --plan "$tmp/gplan.json" >/dev/null 2>"$tmp/e" && fail "sim of a plan with another graph"
[ "$?" = 2 ] && grep -q "gplan.json: graph 'zoo:mlp' is not the plan's graph" "$tmp/e" || fail "other graph: $(cat "$tmp/e")"
"$PSIM" place "$ex" --cse --cluster uniform:3:0.001 --algo heft --plan "$tmp/cplan.json" >/dev/null || fail "place --cse"
python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["graph"]; sys.exit(g.get("format") != "placesim.graph/1")' "$tmp/cplan.json" \
    || fail "a plan of a changed graph holds it"
"$PSIM" sim --plan "$tmp/cplan.json" --json | grep -q '"step_time_us":80.0' || fail "sim of a plan holding its graph"
# A graph fused for the cluster (the transformer's GELU) is referred to as fused, not held: the
# reader fuses its source again; the plan is a few kB, and simulates and runs as placed.
out=$("$PSIM" place zoo:transformer --cluster local:2 --algo round-robin --plan "$tmp/fplan.json" --json) || fail "place transformer"
python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["graph"]; sys.exit(g != {"source": "zoo:transformer", "sha256": g.get("sha256"), "fused": True, "nodes": g.get("nodes")})' \
    "$tmp/fplan.json" || fail "a fused graph's reference: $(head -c 600 "$tmp/fplan.json")"
[ "$(wc -c < "$tmp/fplan.json")" -lt 20000 ] || fail "a plan that refers to its fused graph holds it: $(wc -c < "$tmp/fplan.json") bytes"
sim=$("$PSIM" sim --plan "$tmp/fplan.json" --json) || fail "sim of a plan of a fused graph"
python3 -c 'import json, sys; a = json.loads(sys.argv[1])["makespan_us"]; b = json.loads(sys.argv[2])["plan_makespan_us"]; sys.exit(abs(a - b) > 1e-9 * a)' \
    "$out" "$sim" || fail "the fused plan read back is not the plan placed: $out / $sim"
"$PSIM" run --plan "$tmp/fplan.json" --steps 1 >/dev/null || fail "run of a plan of a fused graph"
sed 's/"fused": true/"fused": "yes"/' "$tmp/fplan.json" > "$tmp/fbad.json"
"$PSIM" sim --plan "$tmp/fbad.json" >/dev/null 2>"$tmp/e" && fail "sim of a plan with a bad 'fused'"
[ "$?" = 2 ] && grep -q "fbad.json" "$tmp/e" && grep -q "fused" "$tmp/e" && [ "$(wc -l < "$tmp/e")" = 1 ] || fail "bad fused: $(cat "$tmp/e")"
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
# --request and --colocate on the command line: the constraints a graph file carries. Unasked,
# HEFT puts n1 and n10 on P:2 and n2 and n5 apart; asked, every algorithm obeys.
for a in heft greedy etf m-etf m-sct m-topo single round-robin search; do
  "$PSIM" place "$ex" --cluster uniform:3:0.001 --algo $a --budget-ms 20 --request 'n1*=P:0' \
      --colocate 'n2,n5' --out "$tmp/req.json" >/dev/null || fail "$a with --request/--colocate"
  python3 - "$tmp/req.json" "$a" <<'PY' || fail "$a: request or colocation not obeyed"
import json, sys
d = json.load(open(sys.argv[1]))["devices"]
ok = d["n1"].endswith("P:0") and d["n10"].endswith("P:0") and d["n2"] == d["n5"]
sys.exit(0 if ok else 1)
PY
done
out=$("$PSIM" place "$ex" --cluster uniform:3:0.001 --algo heft --json) || fail "heft unasked"
echo "$out" | grep -q '"makespan_us":80.0' || fail "heft unasked makespan: $out"
err=$("$PSIM" place "$ex" --cluster uniform:3 --request 'zz*=P:0' 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] && [ "$err" = "placesim: place: --request 'zz*=P:0': no node of 'heft-example' matches 'zz*'" ] \
    || fail "request matching nothing: $rc $err"
err=$("$PSIM" place "$ex" --cluster uniform:3 --request 'n1' 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] && echo "$err" | grep -q "NODE_GLOB=DEVICE" || fail "request without '=': $rc $err"
err=$("$PSIM" place "$ex" --cluster uniform:3 --request 'n1=GPU:0' 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] && echo "$err" | grep -q "node 'n1'.*GPU:0" || fail "request of a missing device: $rc $err"
err=$("$PSIM" place "$ex" --cluster uniform:3 --colocate 'q*' 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] && echo "$err" | grep -q "colocate 'q\*': no node" || fail "colocate matching nothing: $rc $err"
"$PSIM" place "$ex" --cluster uniform:3 --algo nope >/dev/null 2>&1; [ $? = 2 ] || fail "unknown algo"
"$PSIM" place "$ex" --cluster uniform:x --algo heft >/dev/null 2>&1; [ $? = 2 ] || fail "bad cluster"
# Compression's rounding is recorded in the plan: truncate by default, rne when asked.
"$PSIM" place zoo:mlp --cluster local:2 --algo round-robin --compress --plan "$tmp/t.json" >/dev/null || fail "compress"
grep -q '"compress": true, "rounding": "truncate"' "$tmp/t.json" || fail "truncate not recorded"
"$PSIM" place zoo:mlp --cluster local:2 --algo round-robin --compress-rounding rne --plan "$tmp/r.json" >/dev/null \
    || fail "compress-rounding rne"
grep -q '"compress": true, "rounding": "rne"' "$tmp/r.json" || fail "rne not recorded"
"$PSIM" sim --plan "$tmp/r.json" --json >/dev/null || fail "sim of the rne plan"
"$PSIM" place "$ex" --cluster uniform:3 --compress-rounding up >/dev/null 2>&1; [ $? = 2 ] || fail "bad rounding"
# A graph with no nodes is bad input (it once placed nothing and exited 0, UBSan reporting a null
# pointer in partition.c): exit 2, one line naming the file.
echo '{"format": "placesim.graph/1", "name": "empty", "nodes": []}' > "$tmp/empty.json"
err=$("$PSIM" place "$tmp/empty.json" --cluster uniform:2 --algo all 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] || fail "empty graph exit $rc"
[ "$err" = "placesim: $tmp/empty.json: graph has no nodes" ] || fail "empty graph message: $err"
"$PSIM" sim "$tmp/empty.json" --cluster uniform:2 --algo heft >/dev/null 2>&1; [ $? = 2 ] || fail "sim of an empty graph"

# Where costs come from (issue 20 item 21): the HEFT example is all annotations; a built-in model
# without a DB is all estimates (and its sources, parameters, free); with a DB, measured rows.
"$PSIM" place "$ex" --cluster uniform:3:0.001 --algo heft --json | grep -q '"cost_sources":{"measured":0,"estimated":0,"annotated":10,"free":0}' ||
    fail "annotated graph's cost sources"
out=$("$PSIM" place zoo:mlp --cluster local:1 --algo single --json) || fail "place mlp"
echo "$out" | grep -q '"cost_sources":{"measured":0,"estimated":7,"annotated":0,"free":7}' || fail "estimated: $out"
"$PSIM" profile zoo:mlp --cluster local:1 --db "$tmp/c.db" --no-links --no-calibrate --rounds 1 \
    --budget-ms 1 --reps 3 > /dev/null 2>&1 || fail "profile"
python3 -c 'import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); assert d.execute("DELETE FROM kernels WHERE op = \"Add\"").rowcount == 1; d.commit()' "$tmp/c.db" ||
    fail "no Add row to delete"
out=$("$PSIM" place zoo:mlp --cluster local:1 --algo single --db "$tmp/c.db" --json) || fail "place --db"
echo "$out" | grep -q '"cost_sources":{"measured":6,"estimated":1,"annotated":0,"free":7}' || fail "measured: $out"
"$PSIM" place zoo:mlp --cluster local:1 --algo single --db "$tmp/c.db" | grep -q "costs: 6 measured, 1 estimated, 0 annotated, 7 free" ||
    fail "terminal summary"

# The cost DB read-only (issue 20 item 11): place only reads it, so a DB that cannot be written
# serves it (checked as nobody when root: root writes any file), and is not migrated or changed.
chmod 444 "$tmp/c.db"; chmod 755 "$tmp"
as_user=()
[ "$(id -u)" = 0 ] && as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ "$(id -u)" != 0 ] || command -v setpriv > /dev/null; then
    out=$("${as_user[@]}" "$PSIM" place zoo:mlp --cluster local:1 --algo single --db "$tmp/c.db" --json 2>&1) ||
        fail "read-only DB refused: $out"
    echo "$out" | grep -q '"measured":6' || fail "read-only DB: $out"
fi
chmod 644 "$tmp/c.db"
# Bad DBs: one line naming the DB and what is wrong, exit 2 (items 4 and 11).
expect_db2() {  # SQL NEEDLE
    cp "$tmp/c.db" "$tmp/bad.db"
    python3 -c 'import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.executescript(sys.argv[2]); d.commit()' "$tmp/bad.db" "$1"
    err=$("$PSIM" place zoo:mlp --cluster local:1 --algo single --db "$tmp/bad.db" 2>&1 >/dev/null); rc=$?
    [ $rc = 2 ] || fail "$1: exit $rc: $err"
    echo "$err" | grep -q "bad.db: .*$2" || fail "$1: message: $err"
    [ "$(echo "$err" | wc -l)" = 1 ] || fail "$1: more than one line: $err"
}
expect_db2 "PRAGMA user_version = -3" "schema version -3 is not one this placesim knows (0..5)"
expect_db2 "PRAGMA user_version = 6" "schema version 6 is not one this placesim knows (0..5)"
expect_db2 "DROP TABLE calibration" "table 'calibration' is missing"
expect_db2 "DROP TABLE link_fits" "table 'link_fits' is missing"
head -c 20000 "$tmp/c.db" > "$tmp/bad.db"
"$PSIM" place zoo:mlp --cluster local:1 --algo single --db "$tmp/bad.db" > /dev/null 2>&1; rc=$?
[ $rc = 2 ] || fail "truncated DB: exit $rc"
echo ok
