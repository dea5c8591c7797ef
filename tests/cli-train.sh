#!/bin/bash
# placesim train on fashion-mnist (Debian's dataset-fashion-mnist; skipped when absent): the
# built-in mlp learns (test accuracy well above chance after 150 steps); a job killed at step 7
# with checkpoints every 5 steps and --max-restarts 1 ends with variables bit-identical to an
# uninterrupted run; killed in the middle of its third checkpoint it resumes from the second;
# a damaged checkpoint is skipped with a warning; bad input exits 2 with one line.
set -u
fail() { echo "FAIL: $*"; exit 1; }
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "skipped: $data is absent (install dataset-fashion-mnist)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Learning: 150 steps of batch 64 (a sixth of an epoch) reach well above 10% (chance).
out=$("$PSIM" train mlp --steps 150 --json 2>/dev/null) || fail "train mlp"
acc=$(echo "$out" | grep -o '"test_accuracy":[0-9.]*' | tail -1 | cut -d: -f2)
python3 -c "import sys; sys.exit(0 if float('$acc') > 0.6 else 1)" || fail "accuracy $acc: $out"
echo "$out" | grep -q '"steps":150' || fail "steps: $out"
echo "$out" | grep -q '"variables":6' || fail "variables: $out"
# Adam trains too.
out=$("$PSIM" train mlp --steps 100 --optimizer adam --json 2>/dev/null) || fail "train adam"
acc=$(echo "$out" | grep -o '"test_accuracy":[0-9.]*' | tail -1 | cut -d: -f2)
python3 -c "import sys; sys.exit(0 if float('$acc') > 0.6 else 1)" || fail "adam accuracy $acc"

# Kill at step 7, checkpoints every 5, one restart: the same variables, bit for bit.
common="--steps 12 --checkpoint-every 5 --seed 7"
"$PSIM" train mlp $common --checkpoint-dir "$tmp/a" --save-variables "$tmp/va" >/dev/null 2>&1 \
    || fail "uninterrupted run"
PSIM_FAULT=step:7 "$PSIM" train mlp $common --checkpoint-dir "$tmp/b" --max-restarts 1 \
    --save-variables "$tmp/vb" --json > "$tmp/b.json" 2> "$tmp/b.err" || fail "restarted run: $(cat "$tmp/b.err")"
grep -q '"restarts":1' "$tmp/b.json" || fail "the restarted job's JSON: $(cat "$tmp/b.json")"
grep -q '"steps":12' "$tmp/b.json" || fail "the restarted job's steps: $(cat "$tmp/b.json")"
grep -q "killed at step 7" "$tmp/b.err" || fail "no fault: $(cat "$tmp/b.err")"
grep -q "resumed from .*ckpt-00000005.psck" "$tmp/b.err" || fail "not resumed from 5: $(cat "$tmp/b.err")"
[ "$(ls "$tmp/va" | wc -l)" -ge 13 ] || fail "variables written: $(ls "$tmp/va")"
for f in "$tmp"/va/*; do cmp -s "$f" "$tmp/vb/$(basename "$f")" || fail "$(basename "$f") differs"; done
# Without restarts the killed job fails.
rc=$(sh -c 'PSIM_FAULT=step:3 "$0" train mlp $1 --checkpoint-dir "$2" >/dev/null 2>&1; echo $?' \
    "$PSIM" "$common" "$tmp/n" 2>/dev/null)
[ "$rc" = 137 ] || fail "fault: exit $rc, not 137 (SIGKILL)"

# Killed in the middle of the third checkpoint: resumes from the second, same result.
"$PSIM" train mlp --steps 17 --checkpoint-every 5 --seed 7 --checkpoint-dir "$tmp/c0" \
    --save-variables "$tmp/vc0" >/dev/null 2>&1 || fail "uninterrupted 17"
PSIM_FAULT=save:3 "$PSIM" train mlp --steps 17 --checkpoint-every 5 --seed 7 --checkpoint-dir "$tmp/c" \
    --max-restarts 1 --save-variables "$tmp/vc" >/dev/null 2> "$tmp/c.err" || fail "save fault: $(cat "$tmp/c.err")"
grep -q "killed at save 3" "$tmp/c.err" || fail "no save fault"
grep -q "resumed from .*ckpt-00000010.psck" "$tmp/c.err" || fail "not resumed from 10: $(cat "$tmp/c.err")"
for f in "$tmp"/vc0/*; do cmp -s "$f" "$tmp/vc/$(basename "$f")" || fail "$(basename "$f") differs after save fault"; done

# A damaged newest checkpoint is skipped with a warning; the one before is used.
cp -r "$tmp/a" "$tmp/d"
python3 - "$tmp/d/ckpt-00000010.psck" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) // 2] ^= 0xff; open(p, 'wb').write(b)
PY
"$PSIM" train mlp $common --checkpoint-dir "$tmp/d" --resume >/dev/null 2> "$tmp/d.err" || fail "resume damaged"
grep -q "warning: skipping .*ckpt-00000010.psck: not a whole checkpoint: checksum mismatch" "$tmp/d.err" \
    || fail "no warning: $(cat "$tmp/d.err")"
grep -q "resumed from .*ckpt-00000005.psck" "$tmp/d.err" || fail "not resumed from 5 after damage"

# Synchronous data parallelism: two replicas of batch 32 on local:2 (one per device, variables
# on the first) end 20 steps with the variables of one device trained on batch 64, to float
# rounding: each gradient is the mean of two half-batch means where one device takes the mean
# of all 64, so the two differ by a few float32 roundings a step (3e-7 of each variable's largest
# value measured; the bound, 1e-5, is about 80 float32 ulps). One replica of batch 32 (another
# trajectory) must differ by far more.
rep="--steps 20 --seed 3"
"$PSIM" train mlp $rep --batch 32 --replicas 2 --cluster local:2 --save-variables "$tmp/r2" --json \
    > "$tmp/r2.json" 2> "$tmp/r2.err" || fail "replicas 2: $(cat "$tmp/r2.err")"
grep -q '"replicas":2' "$tmp/r2.json" || fail "replicas in the JSON: $(cat "$tmp/r2.json")"
"$PSIM" train mlp $rep --batch 64 --save-variables "$tmp/r1" >/dev/null 2>&1 || fail "batch 64"
"$PSIM" train mlp $rep --batch 32 --save-variables "$tmp/h" >/dev/null 2>&1 || fail "batch 32"
python3 "${PSIM_SRC:-.}/tests/compare-variables.py" "$tmp/r2" "$tmp/r1" 1e-5 > "$tmp/cmp.out" \
    || fail "replicas against the doubled batch: $(tail -3 "$tmp/cmp.out")"
python3 "${PSIM_SRC:-.}/tests/compare-variables.py" "$tmp/r2" "$tmp/h" 1e-3 --differ > "$tmp/cmp.out" \
    || fail "replicas against one replica's batch: $(tail -3 "$tmp/cmp.out")"

# Asynchronous replicas: each runs its own steps on the shared variables; 400 steps in all, every
# one counted by the shared global step (AssignAdd under the variable's lock: no update lost
# between the two sessions), both replicas ran steps, and the model learns.
"$PSIM" train mlp --batch 32 --replicas 2 --async --cluster local:2 --steps 400 --save-variables "$tmp/as" \
    --json > "$tmp/as.json" 2> "$tmp/as.err" || fail "async: $(cat "$tmp/as.err")"
[ "$(python3 "${PSIM_SRC:-.}/tests/compare-variables.py" --print "$tmp/as/global_step.pb")" = 400 ] \
    || fail "async: global_step is not 400"
python3 - "$tmp/as.json" <<'PY' || fail "async: $(cat "$tmp/as.json")"
import json, sys
d = json.load(open(sys.argv[1]))
e = d["epochs"][0]
assert d["steps"] == 400 and sum(e["replica_steps"]) == 400 and min(e["replica_steps"]) > 0, e
assert d["test_accuracy"] > 0.6, d
PY

# Asynchronous replicas with two parameter servers: each update (AssignAdd) beside its variable.
"$PSIM" train mlp --batch 32 --replicas 2 --async --ps 2 --cluster local:4 --steps 40 \
    --save-variables "$tmp/as2" >/dev/null 2> "$tmp/as2.err" || fail "async, 2 PS: $(cat "$tmp/as2.err")"
[ "$(python3 "${PSIM_SRC:-.}/tests/compare-variables.py" --print "$tmp/as2/global_step.pb")" = 40 ] \
    || fail "async, 2 PS: global_step is not 40"

# The same step as a graph for the placers and the simulator: `export --train-step --replicas 2
# --cluster local:2 --caching-device worker` requests replica r's nodes on CPU:r and the
# variables on CPU:0, so any algorithm places it so; 6 variables cross to replica 1 (one read
# each, on the worker), and its 6 gradients and its loss come back (its inputs are fed there):
# 13 Send/Recv pairs. Without a caching device each of replica 1's 8 reads (fc2/W and fc3/W
# have two readers) crosses on its own: 15.
"$PSIM" export mlp --batch 32 --train-step --replicas 2 --cluster local:2 --caching-device worker \
    -o "$tmp/r2g.json" 2>/dev/null || fail "export --replicas"
"$PSIM" place "$tmp/r2g.json" --cluster local:2 --algo round-robin -o "$tmp/r2p.json" >/dev/null 2>&1 \
    || fail "place the replicated step"
python3 - "$tmp/r2p.json" <<'PY' || fail "the replicated step's placement"
import json, sys
d = json.load(open(sys.argv[1]))["devices"]
for n, dev in d.items():
    want = "CPU:1" if n.startswith("replica_1/") else "CPU:0"
    assert dev.endswith(want), (n, dev)
assert sum(n.startswith("replica_1/") for n in d) == sum(n.startswith("replica_0/") for n in d) > 30, len(d)
PY
"$PSIM" place "$tmp/r2g.json" --cluster local:2 --algo heft --json 2>/dev/null | grep -q '"n_send":13,' \
    || fail "the replicated step's transfers"
"$PSIM" export mlp --batch 32 --train-step --replicas 2 --cluster local:2 -o "$tmp/r2n.json" 2>/dev/null \
    || fail "export --replicas, no caching device"
"$PSIM" place "$tmp/r2n.json" --cluster local:2 --algo heft --json 2>/dev/null | grep -q '"n_send":15,' \
    || fail "the replicated step's transfers without a caching device"

# Counters: the last step's transfers per link (--json "links"). Two replicas on local:3, the
# variables on CPU:2. With --caching-device worker each worker receives each of the 6 variables
# exactly once a step, though the replicated graph reads fc2/W and fc3/W twice in each replica
# (forward and backward), plus its batch (2 tensors); it sends back 6 gradients and its loss.
# Without it, as the plan says: each of the 8 reads crosses on its own.
for c in worker none; do
    "$PSIM" train mlp --batch 32 --replicas 2 --cluster local:3 --caching-device $c --steps 3 --json \
        > "$tmp/l3-$c.json" 2>/dev/null || fail "replicas on local:3, caching device $c"
done
python3 - "$tmp/l3-worker.json" "$tmp/r2g.json" "$tmp/l3-none.json" <<'PY' || fail "link counters: $(cat "$tmp/l3-worker.json" "$tmp/l3-none.json")"
import json, sys
def links(f):
    return {(l["from"][-5:], l["to"][-5:]): l for l in json.load(open(f))["links"]}
cached, none = links(sys.argv[1]), links(sys.argv[3])
assert sorted(cached) == [("CPU:0", "CPU:2"), ("CPU:1", "CPU:2"), ("CPU:2", "CPU:0"), ("CPU:2", "CPU:1")], cached
for w in ("CPU:0", "CPU:1"):
    assert cached[("CPU:2", w)]["variable_reads"] == 6 and cached[("CPU:2", w)]["messages"] == 8, cached
    assert cached[(w, "CPU:2")]["variable_reads"] == 0 and cached[(w, "CPU:2")]["messages"] == 7, cached
    assert none[("CPU:2", w)]["variable_reads"] == 8 and none[("CPU:2", w)]["messages"] == 10, none
g = json.load(open(sys.argv[2]))
readers = {}
for n in g["nodes"]:
    if n["name"].startswith("replica_1/"):
        for i in n.get("inputs", []):
            readers[i.split(":")[0]] = readers.get(i.split(":")[0], 0) + 1
assert readers.get("replica_1/fc2/W/cached", 0) >= 2 and readers.get("replica_1/fc3/W/cached", 0) >= 2, readers
PY

# Two parameter servers (local:4: CPU:2 and CPU:3): the variables round-robin, 3 on each (the
# weights, read 5 times by each worker without a caching device, on CPU:2; the biases on CPU:3); the
# first PS's train_op waits on the second's 6 updates through one control message (a NoOp per
# device, as TensorFlow's group()), and the second reads the global step from the first (the
# learning rate, a constant with --lr-schedule constant, has a copy on each device that reads it:
# it does not cross). With the cosine schedule the rate is computed once from the step, beside the
# step on the first PS, and crosses to the second with the step: 2 messages, 8 + 4 bytes.
for sch in constant cosine; do
"$PSIM" train mlp --batch 32 --replicas 2 --ps 2 --cluster local:4 --steps 2 --lr-schedule $sch --json \
    > "$tmp/l4.json" 2>/dev/null || fail "2 PS on local:4 ($sch)"
python3 - "$tmp/l4.json" $sch <<'PY' || fail "2 PS ($sch): $(cat "$tmp/l4.json")"
import json, sys
links = {(l["from"][-5:], l["to"][-5:]): l for l in json.load(open(sys.argv[1]))["links"]}
assert links[("CPU:3", "CPU:2")]["messages"] == 1 and links[("CPU:3", "CPU:2")]["bytes"] == 0, links
n = 1 if sys.argv[2] == "constant" else 2
assert links[("CPU:2", "CPU:3")]["messages"] == n and links[("CPU:2", "CPU:3")]["variable_reads"] == 1, links
assert links[("CPU:2", "CPU:3")]["bytes"] == 8 + 4 * (n - 1), links
for w in ("CPU:0", "CPU:1"):
    assert links[("CPU:2", w)]["variable_reads"] == 5 and links[("CPU:3", w)]["variable_reads"] == 3, links
PY
done

# Bad input: one line, exit 2.
check2() {
    "$PSIM" train "$@" > /dev/null 2> "$tmp/err"; rc=$?
    [ $rc = 2 ] || fail "exit $rc for: $*"
    [ "$(wc -l < "$tmp/err")" = 1 ] || fail "not one line for: $* ($(cat "$tmp/err"))"
}
check2 mlp --data "$tmp/nowhere"
check2 mlp --optimizer rmsprop
check2 mlp --resume
check2 mlp --lr -1
check2 mlp --lr-schedule step
check2 mlp --inputs raw
check2 mlp --replicas 3 --cluster local:2
check2 mlp --replicas 0
check2 mlp --async
check2 mlp --replicas 2 --cluster local:2 --caching-device gpu
check2 mlp --caching-device worker
check2 mlp --replicas 2 --async --cluster local:2 --caching-device worker
check2 mlp --async --replicas 2 --cluster local:2 --checkpoint-dir "$tmp/x"
"$PSIM" train mlp --steps 5 --checkpoint-every 5 --checkpoint-dir "$tmp/odd" >/dev/null 2>&1 || fail "5 steps"
check2 mlp --steps 8 --replicas 2 --cluster local:2 --checkpoint-dir "$tmp/odd" --resume
grep -q "resume with the --replicas it was written with" "$tmp/err" || fail "resume, other replicas: $(cat "$tmp/err")"
check2 transformer --steps 1
mkdir "$tmp/bad"; printf 'not idx' > "$tmp/bad/train-images-idx3-ubyte"
check2 mlp --data "$tmp/bad"
grep -q "train-images-idx3-ubyte" "$tmp/err" || fail "bad IDX not named: $(cat "$tmp/err")"
echo ok
