#!/usr/bin/env bash
# placesim profile: fills a cost DB (one kernel row per signature and device, readable with
# sqlite3), skips what is measured, --json figures, and exit 2 naming the file for DBs that are
# not SQLite, corrupt, foreign or of a newer schema.
set -euo pipefail
PSIM="${PSIM:-./build/placesim}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/g.json" <<'JSON'
{"format": "placesim.graph/1", "name": "g", "nodes": [
 {"name": "x", "op": "Placeholder", "outputs": [{"dtype": "float32", "shape": [64, 64]}]},
 {"name": "w", "op": "Const", "attrs": {"fill": 0.5}, "outputs": [{"dtype": "float32", "shape": [64, 64]}]},
 {"name": "m", "op": "MatMul", "inputs": ["x:0", "w:0"], "outputs": [{"dtype": "float32", "shape": [64, 64]}]},
 {"name": "r", "op": "Relu", "inputs": ["m:0"], "outputs": [{"dtype": "float32", "shape": [64, 64]}]}]}
JSON
opts=(--cluster local:2 --budget-ms 30 --warmup-ms 1 --link-max-bytes 16384)
"$PSIM" profile "$tmp/g.json" "${opts[@]}" --db "$tmp/c.db" --json > "$tmp/out.json" 2> "$tmp/err.txt"
python3 - "$tmp/out.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for k in ("measured", "skipped", "devices", "elapsed_ms"):
    assert k in r, k
assert r["measured"] == 4 and r["skipped"] == 0, r
assert len(r["devices"]) >= 2 and r["link_pairs"] == 2, r
PY
# Not a terminal: plain progress lines, no carriage returns; the last one is 4 pairs x 100 passes.
grep -q "placesim profile: kernels 400/400" "$tmp/err.txt"
! grep -q $'\r' "$tmp/err.txt"
if command -v sqlite3 > /dev/null; then
    [ "$(sqlite3 "$tmp/c.db" "SELECT count(*) FROM kernels")" = 4 ]
    [ "$(sqlite3 "$tmp/c.db" "SELECT count(*) FROM (SELECT 1 FROM kernels GROUP BY signature, device_id HAVING count(*) > 1)")" = 0 ]
    [ "$(sqlite3 "$tmp/c.db" "PRAGMA journal_mode")" = wal ]
fi
"$PSIM" profile "$tmp/g.json" "${opts[@]}" --db "$tmp/c.db" --no-links --no-calibrate --json > "$tmp/again.json" 2>/dev/null
grep -q '"measured":0,"skipped":4' "$tmp/again.json"
# --weights: the rows timed warm (AUTO on this small graph) are measured again cold, and the
# mode is recorded per row; a bad mode is a usage error.
"$PSIM" profile "$tmp/g.json" "${opts[@]}" --db "$tmp/c.db" --no-links --no-calibrate --weights cold --json > "$tmp/cold.json" 2>/dev/null
python3 - "$tmp/cold.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["measured"] == 4 and r["measured_cold"] == 4 and r["skipped"] == 0, r
assert r["weights"] == [{"graph": "g", "mode": "cold", "constant_bytes": 64 * 64 * 4}], r
assert r["llc_bytes"] >= 1 << 20, r
PY
if command -v sqlite3 > /dev/null; then
    [ "$(sqlite3 "$tmp/c.db" "SELECT group_concat(DISTINCT weights) FROM kernel_times")" = cold ]
fi
set +e
"$PSIM" profile "$tmp/g.json" "${opts[@]}" --db "$tmp/c.db" --weights hot > /dev/null 2> "$tmp/err.txt"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "weights must be auto, cold or warm" "$tmp/err.txt"

# --in-situ: the graph runs whole; one in-situ row per signature and device (the built-in mlp;
# each device runs alone), kept beside no kernel row (the kernels timed alone are skipped: the
# model would not read them), the dispatch gap of each device, the slow-down after a wait of both
# (one run: the same hardware) and both devices' busy factors. A graph that cannot run whole (an int64 input
# without a default feed) falls back to kernels timed alone, with a warning.
"$PSIM" profile zoo:mlp "${opts[@]}" --db "$tmp/i.db" --no-links --no-calibrate --in-situ \
    --in-situ-steps 5 --in-situ-passes 3 --json > "$tmp/insitu.json" 2>/dev/null
python3 - "$tmp/insitu.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["in_situ"][0]
# each device alone (its own rows), the runs after a wait once (one kind of hardware)
assert s["ran"] and s["devices_run"] == 2 and s["rows"] % 2 == 0, s
sigs = s["rows"] // 2
assert sigs >= 2 and s["ops"] >= sigs and s["passes"] == 3, s
assert s["step_us"] > 0 and s["dispatch_us"] >= 0 and s["busy_factor"] > 0 and s["idle_extra_us"] >= 0, s
assert s["idle_rows"] == 4 * sigs, s
assert r["measured"] == 0 and r["skipped"] == 2 * sigs, r
open(sys.argv[1] + ".rows", "w").write(str(sigs))
PY
if command -v sqlite3 > /dev/null; then
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(*) FROM kernels WHERE method = 'insitu'")" = $((2 * $(cat "$tmp/insitu.json.rows"))) ]
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(DISTINCT device_id) FROM kernels WHERE method = 'insitu'")" = 2 ]
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(*) FROM kernels WHERE method = 'kernel'")" = 0 ]
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(*) FROM calibration WHERE kind = 'dispatch_us'")" = 2 ]
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(*) FROM calibration WHERE kind = 'idle_extra_us' AND value >= 0")" = 2 ]
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(*) FROM calibration WHERE kind = 'idle_gap_us' AND value = 50")" = 2 ]
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(*) FROM calibration WHERE kind = 'busy_factor' AND value > 0")" = 2 ]
    # Each signature's own extra after each of the two waits, on both devices, never negative
    # and never less after the long wait than after the short one.
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(*) FROM kernels WHERE method = 'idle' AND median_us >= 0")" = \
        $((4 * $(cat "$tmp/insitu.json.rows"))) ]
    [ "$(sqlite3 "$tmp/i.db" "SELECT count(*) FROM kernels a JOIN kernels b ON a.device_id = b.device_id
        AND b.signature = replace(a.signature, char(31) || 'idle=50', char(31) || 'idle=500')
        WHERE a.method = 'idle' AND a.signature LIKE '%idle=50' AND b.median_us >= a.median_us")" = \
        $((2 * $(cat "$tmp/insitu.json.rows"))) ]
fi
# The simulator reaches those rows through the cost model: the single plan of mlp is all
# measured, and its step is the rows plus one dispatch gap per op, the figure profile --in-situ
# reported (ops_us) for the first device it ran on, CPU:0 (`single` alone takes whichever device
# its own rows make faster).
"$PSIM" place zoo:mlp --cluster local:2 --algo single --request '*=CPU:0' --db "$tmp/i.db" \
    --plan "$tmp/single0.json" > /dev/null 2>&1
"$PSIM" sim --plan "$tmp/single0.json" --db "$tmp/i.db" --json > "$tmp/sim.json" 2>/dev/null
python3 - "$tmp/insitu.json" "$tmp/sim.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["in_situ"][0]
r = json.load(open(sys.argv[2]))
assert r["cost_sources"]["measured"] == s["ops"] and r["cost_sources"]["estimated"] == 0, r
assert abs(r["step_time_us"] - s["ops_us"]) <= 0.01 * s["ops_us"] + 1, (r["step_time_us"], s)
PY
"$PSIM" profile "$tmp/g.json" --cluster local:2 --db "$tmp/i.db" --no-links --no-calibrate --in-situ-steps 0 \
    2> "$tmp/err.txt" && exit 1
grep -q "in-situ-steps" "$tmp/err.txt"
"$PSIM" profile "$tmp/g.json" --cluster local:2 --db "$tmp/i.db" --no-links --no-calibrate --in-situ-passes 1001 \
    2> "$tmp/err.txt" && exit 1
[ "$(wc -l < "$tmp/err.txt")" = 1 ] && grep -q "in-situ-passes" "$tmp/err.txt"
cat > "$tmp/int.json" <<'JSON'
{"format": "placesim.graph/1", "name": "int", "nodes": [
 {"name": "i", "op": "Placeholder", "outputs": [{"dtype": "int64", "shape": [64]}]},
 {"name": "c", "op": "Cast", "attrs": {"to": 1}, "inputs": ["i:0"], "outputs": [{"dtype": "float32", "shape": [64]}]},
 {"name": "r", "op": "Relu", "inputs": ["c:0"], "outputs": [{"dtype": "float32", "shape": [64]}]}]}
JSON
"$PSIM" profile "$tmp/int.json" "${opts[@]}" --db "$tmp/int.db" --no-links --no-calibrate --in-situ \
    --json > "$tmp/int-out.json" 2> "$tmp/err.txt"
grep -q "warning: int: cannot run whole" "$tmp/err.txt"
grep -q '"measured":4' "$tmp/int-out.json"
grep -q '"in_situ":\[{"graph":"int","ran":false}\]' "$tmp/int-out.json"
expect2() {  # FILE NEEDLE
    set +e
    "$PSIM" profile "$tmp/g.json" "${opts[@]}" --db "$1" 2> "$tmp/err.txt" > /dev/null
    local rc=$?
    set -e
    [ "$rc" = 2 ] || { echo "expected exit 2 for $1, got $rc"; cat "$tmp/err.txt"; exit 1; }
    grep -q "$1" "$tmp/err.txt" && grep -q "$2" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
}
echo "just text" > "$tmp/text.db"
expect2 "$tmp/text.db" "not an SQLite database"
if command -v sqlite3 > /dev/null; then
    cp "$tmp/c.db" "$tmp/newer.db"
    sqlite3 "$tmp/newer.db" "PRAGMA user_version = 7"
    expect2 "$tmp/newer.db" "newer"
    sqlite3 "$tmp/foreign.db" "CREATE TABLE t(x); INSERT INTO t VALUES (1)"
    expect2 "$tmp/foreign.db" "not a placesim cost DB"
fi
head -c 100 "$tmp/c.db" > "$tmp/trunc.db"
expect2 "$tmp/trunc.db" "$tmp/trunc.db"
# --feed as run takes it: kernels fed zeros, x fed ones; exit 2 naming the flag for bad values.
"$PSIM" profile "$tmp/g.json" "${opts[@]}" --no-links --db "$tmp/feed.db" --feed zeros --feed x=ones \
    > /dev/null 2> "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
# In situ too: the graph runs whole fed as --feed says (x, an unlisted Placeholder, included).
"$PSIM" profile "$tmp/g.json" "${opts[@]}" --no-links --db "$tmp/feed2.db" --feed ones --in-situ --json \
    > "$tmp/out.json" 2> "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
grep -q '"ran":true' "$tmp/out.json" || { cat "$tmp/out.json" "$tmp/err.txt"; exit 1; }
for bad in bogus nope=ones x=; do
    set +e; "$PSIM" profile "$tmp/g.json" --db "$tmp/feed.db" --feed "$bad" > /dev/null 2> "$tmp/err.txt"; rc=$?; set -e
    [ "$rc" = 2 ] && [ "$(wc -l < "$tmp/err.txt")" = 1 ] && grep -q -- "--feed" "$tmp/err.txt" \
        || { echo "FAIL: profile --feed $bad: exit $rc"; cat "$tmp/err.txt"; exit 1; }
done
echo ok
