#!/usr/bin/env bash
# The flags every command shares (issue 20): numeric flags checked for range (items 12), outputs
# written only when the command succeeds and never into a missing folder, one exit code per
# fault in every command (13), --plugin wherever kernels or costs are loaded (19), --batch and
# --shape before shape inference (23), the subgraph cache's counters and --cse (26).
set -u
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
heft="$PSIM_SRC/tests/data/heft-example.json"
DATA="${PSIM_DATA:-../shared/data}"
PLUGIN="${PSIM_BUILD:-build}/plugin-example.so"
# CODE CMD...: exit CODE, and for failures one line on stderr.
expect() {
    local want=$1; shift
    "$@" >"$tmp/o" 2>"$tmp/e"; local rc=$?
    [ $rc = "$want" ] || fail "exit $rc (expected $want): $* :: $(cat "$tmp/e")"
    if [ "$want" != 0 ]; then
        [ "$(wc -l <"$tmp/e")" = 1 ] || fail "expected one error line: $* :: $(cat "$tmp/e")"
        grep -q "CRITICAL" "$tmp/e" && fail "a critical warning: $*"
    fi
    return 0
}
u3="--cluster uniform:3:0.001"

# 12: numbers out of range, negative sizes, unbounded durations, non-numbers and empty lists.
expect 2 "$PSIM" place "$heft" $u3 --mem-limit -5
grep -q -- "--mem-limit" "$tmp/e" || fail "--mem-limit not named: $(cat "$tmp/e")"
expect 2 "$PSIM" place "$heft" $u3 --mem-limit -1
expect 2 "$PSIM" place "$heft" $u3 --mem-limit 0
expect 2 "$PSIM" place "$heft" $u3 --mem-limit 12X
expect 0 "$PSIM" place "$heft" $u3 --algo heft --mem-limit 1G
expect 2 "$PSIM" place "$heft" $u3 --budget-ms 1e99
expect 2 "$PSIM" place "$heft" $u3 --budget-ms nan
expect 2 "$PSIM" place "$heft" $u3 --budget-ms -3
expect 2 "$PSIM" place "$heft" $u3 --seed -1
expect 2 "$PSIM" place "$heft" $u3 --recv-margin-us inf
expect 2 "$PSIM" place "$heft" $u3 --algo ""
expect 2 "$PSIM" sim "$heft" $u3 --algo heft --streams 0
expect 2 "$PSIM" sim "$heft" $u3 --algo heft --streams 1e3
expect 2 "$PSIM" run zoo:mlp --steps -1
expect 2 "$PSIM" run zoo:mlp --steps 99999999999
expect 2 "$PSIM" run zoo:mlp --rtol nan
expect 2 "$PSIM" run zoo:mlp --atol -1
expect 2 "$PSIM" compare "$tmp/a.json" "$tmp/b.json" --top -1
for f in "--reps -1" "--reps 0" "--rounds -1" "--budget-ms 1e99" "--warmup-ms -1" \
         "--max-rel-stddev nan" "--link-max-bytes -5" "--link-max-bytes 1"; do
    expect 2 "$PSIM" profile zoo:mlp --db "$tmp/p.db" $f
done
[ -e "$tmp/p.db" ] && fail "profile created its DB before checking its flags"
expect 2 "$PSIM" study zoo:mlp --no-profile --out "$tmp/st" --algos ""
expect 2 "$PSIM" study zoo:mlp --no-profile --out "$tmp/st" --steps -3
expect 2 "$PSIM" study zoo:mlp --no-profile --out "$tmp/st" --profile-budget-ms 1e99

# 13 (a): outputs are written only when the command succeeds. Before, place wrote --out and
# then failed on --plan's folder; sim wrote --trace and then failed on --plot's.
echo old >"$tmp/keep.json"
expect 2 "$PSIM" place "$heft" $u3 --algo heft --out "$tmp/keep.json" --plan "$tmp/no/plan.json"
[ "$(cat "$tmp/keep.json")" = old ] || fail "place overwrote --out before failing"
expect 2 "$PSIM" sim "$heft" $u3 --algo heft --trace "$tmp/keep.json" --plot "$tmp/no/g.png"
[ "$(cat "$tmp/keep.json")" = old ] || fail "sim overwrote --trace before failing"
expect 2 "$PSIM" run zoo:mlp --trace "$tmp/keep.json" --save-outputs "$tmp/no/out"
[ "$(cat "$tmp/keep.json")" = old ] || fail "run overwrote --trace before failing"
expect 2 "$PSIM" export "$heft" --out "$tmp/no/g.dot"
# (b): a missing folder is named, not created.
grep -q "$tmp/no" "$tmp/e" || fail "missing folder not named: $(cat "$tmp/e")"
[ -e "$tmp/no" ] && fail "a missing output folder was created"
# Success leaves the files and no temporaries.
expect 0 "$PSIM" sim "$heft" $u3 --algo heft --trace "$tmp/keep.json" --sqlite "$tmp/s.sqlite"
grep -q traceEvents "$tmp/keep.json" || fail "sim did not write its trace"
expect 0 "$PSIM" sim "$heft" $u3 --algo heft --sqlite "$tmp/s.sqlite"
if command -v sqlite3 >/dev/null; then
    [ "$(sqlite3 "$tmp/s.sqlite" 'SELECT count(*) FROM runs')" = 2 ] || fail "--sqlite did not append"
fi
ls -a "$tmp" | grep -q '^\.placesim-' && fail "temporary files left: $(ls -a "$tmp")"

# (c): the same fault, the same exit code in every command: a missing graph file, a bad cluster.
for cmd in "inspect" "export" "place $u3" "sim $u3 --algo heft" "run" "profile --db $tmp/p.db" \
           "study --no-profile --out $tmp/st"; do
    expect 2 "$PSIM" $cmd "$tmp/missing.onnx"
    grep -q "missing.onnx" "$tmp/e" || fail "$cmd: the file is not named: $(cat "$tmp/e")"
done
for cmd in "place" "sim --algo heft" "run" "profile --db $tmp/p.db" "study --no-profile --out $tmp/st"; do
    expect 2 "$PSIM" $cmd zoo:mlp --cluster "$tmp/missing-cluster.json"
    expect 2 "$PSIM" $cmd zoo:mlp --cluster uniform:x
done
expect 2 "$PSIM" cluster --cluster "$tmp/missing-cluster.json"

# 19: every command that loads kernels or costs takes --plugin; without it an op that has no
# kernel fails naming the node, the op, the device type and the way out.
cat >"$tmp/sq.json" <<EOF
{"format": "placesim.graph/1", "name": "sq",
 "nodes": [{"name": "x", "op": "Placeholder", "outputs": [{"dtype": "float32", "shape": [2, 3]}]},
           {"name": "y", "op": "SquarePlusOne", "inputs": ["x:0"],
            "outputs": [{"dtype": "float32", "shape": [2, 3]}]}],
 "inputs": ["x"], "outputs": ["y:0"]}
EOF
for cmd in "place --cluster local:2 --algo heft" "sim --cluster local:2 --algo heft" "run"; do
    expect 2 "$PSIM" $cmd "$tmp/sq.json"
    for want in "node 'y'" "op 'SquarePlusOne'" "CPU" "--plugin PATH.so" "docs/ops.md"; do
        grep -qF -- "$want" "$tmp/e" || fail "$cmd: message lacks $want: $(cat "$tmp/e")"
    done
done
if [ -f "$PLUGIN" ]; then
    for cmd in "place --cluster local:2 --algo heft" "sim --cluster local:2 --algo heft" "run" \
               "profile --db $tmp/plugin.db --no-links --no-calibrate --budget-ms 1 --rounds 1" "inspect"; do
        expect 0 "$PSIM" $cmd "$tmp/sq.json" --plugin "$PLUGIN"
    done
    expect 2 "$PSIM" place "$tmp/sq.json" --cluster local:2 --plugin "$tmp/none.so"
fi

# 23: --batch and --shape fix unknown input dims before inference: FLOPs scale with the batch.
flops() { "$PSIM" inspect --json "$@" | sed -n 's/.*"flops":\([0-9.e+]*\).*/\1/p'; }
scales() { # FILE FLAG8... -- FLAG16...: FLOPs > 0 with the first flags, twice that with the second
    local f=$1 a b; shift
    a=$(flops "$f" $1); b=$(flops "$f" $2)
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b > 1.9 * a && b < 2.1 * a) }' ||
        fail "$f: FLOPs $(flops "$f") as loaded, $a with $1, $b with $2"
}
for m in ae0 fc-layers lstm; do
    [ -f "$DATA/tf/$m.pb" ] && scales "$DATA/tf/$m.pb" "--batch=8" "--batch=16"
done
# gru's input X has no shape at all (rank unknown): --batch cannot know where the batch is.
[ -f "$DATA/tf/gru.pb" ] && scales "$DATA/tf/gru.pb" "--shape=X=8,784" "--shape=X=16,784"
cat >"$tmp/mm.json" <<EOF
{"format": "placesim.graph/1", "name": "mm",
 "nodes": [{"name": "x", "op": "Placeholder", "outputs": [{"dtype": "float32", "shape": [null, 4]}]},
           {"name": "w", "op": "Const", "attrs": {"fill": 0.5}, "outputs": [{"dtype": "float32", "shape": [4, 5]}]},
           {"name": "y", "op": "MatMul", "inputs": ["x:0", "w:0"]}],
 "inputs": ["x"], "outputs": ["y:0"]}
EOF
expect 0 "$PSIM" inspect "$tmp/mm.json"
[ "$(flops "$tmp/mm.json" --shape x=3,4)" = "120.0" ] || fail "--shape x=3,4: $(flops "$tmp/mm.json" --shape x=3,4)"
[ "$(flops "$tmp/mm.json" --batch 2)" = "80.0" ] || fail "--batch 2: $(flops "$tmp/mm.json" --batch 2)"
expect 2 "$PSIM" inspect "$tmp/mm.json" --shape x=3,5
expect 2 "$PSIM" inspect "$tmp/mm.json" --shape x=3
expect 2 "$PSIM" inspect "$tmp/mm.json" --shape nope=3,4
expect 2 "$PSIM" inspect "$tmp/mm.json" --shape x=
expect 2 "$PSIM" inspect "$tmp/mm.json" --batch 0
for cmd in "export" "place --cluster local:1" "sim --cluster local:1 --algo single" "run" \
           "profile --db $tmp/mm.db --no-links --no-calibrate --budget-ms 1 --rounds 1"; do
    expect 0 "$PSIM" $cmd "$tmp/mm.json" --batch 2 --shape x=2,4
done
expect 0 "$PSIM" run "$tmp/mm.json" --batch 3 --json
grep -q '"shape":\[3,5\]' "$tmp/o" || fail "run --batch 3: $(cat "$tmp/o")"

# 26: run reports the subgraph cache (one signature: built once, missed once, then hits).
expect 0 "$PSIM" run zoo:mlp --steps 3 --json
grep -q '"cache":{"runs":4,"hits":3,"misses":1,"subgraphs_built":1}' "$tmp/o" || fail "run cache: $(cat "$tmp/o")"
expect 0 "$PSIM" run zoo:mlp --steps 2 --cluster local:2 --algo round-robin --json
grep -q '"cache":{"runs":3,"hits":2,"misses":1,"subgraphs_built":1}' "$tmp/o" || fail "run --algo cache: $(cat "$tmp/o")"
# --cse merges two equal subexpressions (y1 and y2) and says so.
cat >"$tmp/cse.json" <<EOF
{"format": "placesim.graph/1", "name": "cse",
 "nodes": [{"name": "x", "op": "Placeholder", "outputs": [{"dtype": "float32", "shape": [2, 3]}]},
           {"name": "y1", "op": "Relu", "inputs": ["x:0"]},
           {"name": "y2", "op": "Relu", "inputs": ["x:0"]},
           {"name": "z", "op": "Add", "inputs": ["y1:0", "y2:0"]}],
 "inputs": ["x"], "outputs": ["z:0"]}
EOF
for cmd in "inspect" "place --cluster local:2 --algo single" "sim --cluster local:2 --algo single" "run"; do
    expect 0 "$PSIM" $cmd "$tmp/cse.json" --cse --json
    grep -q '"cse_removed_nodes":1' "$tmp/o" || fail "$cmd --cse: $(cat "$tmp/o")"
done
expect 0 "$PSIM" export "$tmp/cse.json" --cse
grep -q "removed 1 node" "$tmp/e" || fail "export --cse: $(cat "$tmp/e")"
grep -q '"y2"' "$tmp/o" && fail "export --cse kept y2"
echo "cli-flags: ok"
