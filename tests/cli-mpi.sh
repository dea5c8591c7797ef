#!/bin/bash
# `run --mpi` under mpirun (issue 16): every rank a task with its own CPU device.
#  - The six ../shared/data/onnx-light models and the built-in models, placed by heft and by
#    greedy over 2 and 3 tasks, give outputs bit-identical to a one-process run on one device.
#  - Rank 0 sends each task exactly one setup message (the plan with its graph) and then one
#    message per step holding only the handle, the step id and that task's feeds: no graph bytes
#    after the first step.
#  - study --mpi studies plans over the tasks' devices, with the links timed through the transport;
#    run --mpi --trace (and the study's measured timelines) hold every task's part of the step.
#  - Bad use is one line and exit 2.
# Skipped (77) only when mpirun is absent.
set -u
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
PSIM=${PSIM:-build/placesim}
DATA=${PSIM_DATA:-../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -q)
# In the AddressSanitizer build: OpenMPI's own allocations kept until exit are not placesim's.
# Its components stay loaded (no dlclose) and stacks are unwound whole, so that the suppressions
# can name its libraries; a leak with no MPI library on its stack is still reported.
export LSAN_OPTIONS="suppressions=${PSIM_SRC:-.}/tests/lsan-mpi.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
export OMPI_MCA_mca_base_component_disable_dlclose=1

models=(zoo:mlp zoo:cnn zoo:transformer)
for f in bvlc_alexnet inception_v1 resnet50 squeezenet vgg19 zfnet512; do
    [ -f "$DATA/onnx-light/$f.onnx" ] && models+=("$DATA/onnx-light/$f.onnx")
done
[ ${#models[@]} -eq 9 ] || { echo "onnx-light models missing under $DATA"; fail=1; }

steps=3
for g in "${models[@]}"; do
    name=$(basename "$g" .onnx)
    rm -rf "$tmp/one"
    "$PSIM" run "$g" --save-outputs "$tmp/one" >/dev/null 2>"$tmp/err" || { echo "$name: one-process run failed: $(cat "$tmp/err")"; fail=1; continue; }
    for np in 2 3; do
        for algo in heft greedy; do
            out="$tmp/$name-$np-$algo"
            if ! timeout 300 "${MPIRUN[@]}" -np $np "$PSIM" run "$g" --mpi --algo $algo --steps $steps \
                    --save-outputs "$out" --json >"$out.json" 2>"$out.err"; then
                echo "$name -np $np $algo: failed: $(head -3 "$out.err")"; fail=1; continue
            fi
            for o in "$tmp/one"/output_*.pb; do
                cmp -s "$o" "$out/$(basename "$o")" || { echo "$name -np $np $algo: $(basename "$o") differs from the one-process run"; fail=1; }
            done
            # One setup message per task, then one message per step (warm-up + steps), whose
            # bytes are the 24-byte header plus that task's feeds only.
            python3 - "$out.json" "$np" $((steps + 1)) <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1])); np, n_steps = int(sys.argv[2]), int(sys.argv[3])
tasks = d["mpi"]["tasks"]
assert len(tasks) == np - 1, tasks
for t in tasks:
    assert t["setup_messages"] == 1, t
    assert t["step_messages"] == n_steps, t
    assert t["step_bytes"] % n_steps == 0, t
    per = t["step_bytes"] // n_steps
    assert per < t["setup_bytes"], t
    # a step message carries no graph: its header (handle, step, count) and feed tensors only
    assert per == 24 or per > 24 and per < 64 + 16 * 1024 * 1024, t
PY
        done
    done
done

# The step messages hold feeds only: a task holding no graph input gets 24 bytes per step.
"${MPIRUN[@]}" -np 2 "$PSIM" run zoo:cnn --mpi --algo round-robin --steps 5 --json >"$tmp/rr.json" 2>"$tmp/rr.err" \
    || { echo "round-robin cnn failed: $(cat "$tmp/rr.err")"; fail=1; }
python3 - "$tmp/rr.json" <<'PY' || fail=1
import json, sys
t = json.load(open(sys.argv[1]))["mpi"]["tasks"][0]
assert t["step_messages"] == 6 and t["setup_messages"] == 1, t
assert t["step_bytes"] in (6 * 24, 6 * (24 + 40 + 3 * 64 * 64 * 4)), t
PY

# cluster --mpi lists every task's device and the links between tasks.
"${MPIRUN[@]}" -np 3 "$PSIM" cluster --mpi --json >"$tmp/c.json" 2>"$tmp/c.err" || { echo "cluster --mpi failed: $(cat "$tmp/c.err")"; fail=1; }
python3 - "$tmp/c.json" <<'PY' || fail=1
import json, sys
c = json.load(open(sys.argv[1]))
names = sorted(d["name"] for d in c["devices"])
assert names == [f"/job:worker/replica:0/task:{t}/device:CPU:0" for t in range(3)], names
assert len(c.get("links", [])) == 6, c.get("links")
PY

# profile --mpi stores the link between the tasks, both ways, at 1 KiB .. 1 MiB (x4: 6 sizes);
# run --mpi --db then simulates its plan with it and says so.
"${MPIRUN[@]}" -np 2 "$PSIM" profile --mpi --db "$tmp/links.db" --link-max-bytes 1M >"$tmp/p.out" 2>"$tmp/p.err" \
    || { echo "profile --mpi failed: $(cat "$tmp/p.err")"; fail=1; }
grep -q "^links *12 timings between 2 MPI tasks" "$tmp/p.out" || { echo "profile --mpi: $(cat "$tmp/p.out")"; fail=1; }
# With three tasks every pair is timed, not only rank 0's: tasks 1 and 2 (here sharing the host's
# cores with task 0) have a link of their own, 2 x 3 pairs x 2 sizes rows.
"${MPIRUN[@]}" -np 3 "$PSIM" profile --mpi --db "$tmp/links3.db" --link-max-bytes 4K >"$tmp/p3.out" 2>"$tmp/p3.err" \
    || { echo "profile --mpi -np 3 failed: $(cat "$tmp/p3.err")"; fail=1; }
grep -q "^links *12 timings between 3 MPI tasks" "$tmp/p3.out" || { echo "profile --mpi -np 3: $(cat "$tmp/p3.out")"; fail=1; }
python3 - "$tmp/links3.db" <<'PY' || fail=1
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
names = dict(db.execute("SELECT id, name FROM devices"))
pairs = {(names[a][-20:], names[b][-20:]) for a, b in db.execute("SELECT src_id, dst_id FROM links WHERE source = 'mpi'")}
tasks = sorted({n[-20:] for n in names.values()})
assert len(tasks) == 3, names
want = {(a, b) for a in tasks for b in tasks if a != b}
assert pairs == want, (sorted(pairs), sorted(want))
PY
"${MPIRUN[@]}" -np 2 "$PSIM" run zoo:cnn --mpi --algo round-robin --db "$tmp/links.db" --json >"$tmp/s.json" 2>"$tmp/s.err" \
    || { echo "run --mpi --db failed: $(cat "$tmp/s.err")"; fail=1; }
python3 - "$tmp/s.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
assert d["mpi"]["simulated_us"] > 0, d["mpi"]
PY

# study --mpi: rank 0 studies the plans over the MPI tasks' devices, the other ranks serve them;
# the links between the tasks are timed through the transport (rows of source 'mpi', both ways)
# before placing and again in passes between the rounds,
# every row is simulated and measured, and a split plan's transfers cross the tasks.
"${MPIRUN[@]}" -np 2 "$PSIM" study zoo:mlp --mpi --algos single,round-robin --steps 3 --rounds 3 \
    --profile-budget-ms 5 -o "$tmp/study" --json >"$tmp/st.json" 2>"$tmp/st.err" \
    || { echo "study --mpi failed: $(tail -3 "$tmp/st.err")"; fail=1; }
python3 - "$tmp/st.json" "$tmp/study" <<'PY' || fail=1
import json, os, sqlite3, sys
d = json.load(open(sys.argv[1])); out = sys.argv[2]
rows = {r["algo"]: r for r in d["rows"]}
assert set(rows) == {"single", "round-robin"}, rows
for r in rows.values():
    assert "error" not in r, r
    assert r["sim_us"] > 0 and r["measured_us"] > 0, r
assert rows["round-robin"]["transfers"] > 0, rows["round-robin"]
db = sqlite3.connect(os.path.join(out, "costs.db"))
n = db.execute("SELECT COUNT(*) FROM links WHERE source = 'mpi'").fetchone()[0]
assert n >= 2, n
# Timed again in 3 passes, one before each round, samples pooled: 1 KiB's 50 ping-pongs as
# 3 x 17 (the timing before placing alone stores 50).
k = db.execute("SELECT MIN(n), MAX(n) FROM links WHERE source = 'mpi' AND bytes = 1024").fetchone()
assert k == (51, 51), k
assert os.path.exists(os.path.join(out, "mlp-round-robin.plan.json"))
# The measured timeline of its last round holds both tasks' ops, on one clock within the step.
t = json.load(open(os.path.join(out, "mlp-round-robin.run.json")))
ops = [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "op"]
assert {e["pid"] for e in ops} == {0, 1}, {e["pid"] for e in ops}
step = t["otherData"]["placesim"]["step_time_us"]
assert all(-1 <= e["ts"] and e["ts"] + e["dur"] <= step + 1 for e in ops), step
PY

# run --mpi --trace: the last step of every task on rank 0's clock, one op per node that ran.
"${MPIRUN[@]}" -np 2 "$PSIM" run zoo:cnn --mpi --algo round-robin --steps 3 --trace "$tmp/mt.json" >/dev/null 2>"$tmp/mt.err" \
    || { echo "run --mpi --trace failed: $(cat "$tmp/mt.err")"; fail=1; }
python3 - "$tmp/mt.json" <<'PY' || fail=1
import json, sys
t = json.load(open(sys.argv[1]))
ops = [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "op"]
names = [e["name"] for e in ops]
assert len(names) == len(set(names)) and len(names) > 10, len(names)
assert {e["pid"] for e in ops} == {0, 1}
step = t["otherData"]["placesim"]["step_time_us"]
assert step > 0 and min(e["ts"] for e in ops) < 0.5 * step, step
assert all(e["ts"] + e["dur"] <= step + 1 for e in ops), step
PY

# Failures. Killing task 1 (SIGKILL) as step 7 starts ends every rank within 2 s of the kill:
# the job's time less that of the same job stopped after 7 steps. One line from rank 0 names the
# task and the step: rank 0 watches the process of a task on its host, and so speaks before
# mpirun starts ending the job (about 1 s after the kill); every placesim process exits 1
# (mpirun's own status is the killed rank's, 137).
ms() { date +%s%N | cut -b1-13; }
t0=$(ms); "${MPIRUN[@]}" -np 3 "$PSIM" run zoo:cnn --mpi --algo round-robin --steps 6 >/dev/null 2>&1; t1=$(ms)
PSIM_FAULT=rank:1,step:7 timeout 60 "${MPIRUN[@]}" -np 3 "$PSIM" run zoo:cnn --mpi --algo round-robin --steps 50 \
    >"$tmp/k.out" 2>"$tmp/k.err"
rc=$?; t2=$(ms)
[ $rc -ne 0 ] || { echo "a killed task: the job exited 0"; fail=1; }
[ $(( (t2 - t1) - (t1 - t0) )) -lt 2000 ] || { echo "a killed task: the job took $((t2 - t1)) ms against $((t1 - t0)) ms for 7 steps"; fail=1; }
grep -q "^placesim: mpi: task 1 (rank 1) died at step 7 (its process ended)" "$tmp/k.err" && [ "$(grep -c . "$tmp/k.err")" -eq 1 ] \
    || { echo "a killed task: expected one line: $(cat "$tmp/k.err")"; fail=1; }
# A task that stops answering (SIGSTOP at step 7) is found by rank 0's heartbeat watch within
# PSIM_MPI_DEADLINE_US (1 s): one line naming the task and the step, exit 1.
PSIM_FAULT=rank:1,hang:7 timeout 60 "${MPIRUN[@]}" -np 3 "$PSIM" run zoo:cnn --mpi --algo round-robin --steps 50 \
    >"$tmp/h.out" 2>"$tmp/h.err"
rc=$?
[ $rc -eq 1 ] || { echo "a silent task: exit $rc, expected 1: $(cat "$tmp/h.err")"; fail=1; }
grep -q "placesim: mpi: task 1 (rank 1) stopped responding at step 7" "$tmp/h.err" \
    && [ "$(grep -c '^placesim: mpi' "$tmp/h.err")" -eq 1 ] \
    || { echo "a silent task: expected one line naming task 1: $(cat "$tmp/h.err")"; fail=1; }

# Bad use: one line, exit 2.
for args in "--mpi" "--mpi --algo heft --cluster local:2" "--mpi --algo nosuch" \
            "--mpi --algo heft --trace $tmp/x.json --trace-steps 2 --steps 3"; do
    "${MPIRUN[@]}" -np 2 "$PSIM" run zoo:mlp $args >"$tmp/o" 2>"$tmp/e"
    rc=$?
    [ $rc -eq 2 ] || { echo "run zoo:mlp $args: exit $rc, expected 2: $(cat "$tmp/e")"; fail=1; }
    [ "$(grep -c . "$tmp/e")" -eq 1 ] || { echo "run zoo:mlp $args: not one line: $(cat "$tmp/e")"; fail=1; }
done
# The lines placesim wrote: in the AddressSanitizer build a process that started MPI ends with
# LeakSanitizer's table of the suppressions it used (dashes, a header, counts), which is not
# placesim's output.
placesim_lines() { grep -v -E '^(-+|Suppressions used:| *count +bytes +template| +[0-9]+ +[0-9]+ +[^ ]+)$' "$1" | grep -c .; }
for cmd in "cluster --mpi --cluster local:2" "profile --mpi --db $tmp/x.db zoo:mlp" \
           "study --mpi --cluster local:2 zoo:mlp -o $tmp/bad" "study --mpi nosuch.onnx -o $tmp/bad" \
           "study --mpi --order dynamic zoo:mlp -o $tmp/bad"; do
    "${MPIRUN[@]}" -np 2 "$PSIM" $cmd >"$tmp/o" 2>"$tmp/e"
    rc=$?
    [ $rc -eq 2 ] && [ "$(placesim_lines "$tmp/e")" -eq 1 ] || { echo "$cmd: exit $rc, expected 2 and one line: $(cat "$tmp/e")"; fail=1; }
done
exit $fail
