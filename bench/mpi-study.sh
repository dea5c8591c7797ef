#!/bin/bash
# Simulated against measured step time of 2-task MPI runs (issue 16): the six onnx-light models
# and the built-in ones, placed by heft and by greedy over `mpirun -np 2`.
#   bash bench/mpi-study.sh OUT [STEPS [ROUNDS]]
# The kernels are profiled once on `local:2` (their rows serve the MPI tasks' CPU devices, which
# have the same fingerprint), the link between the tasks through run --mpi's transport
# (`profile --mpi`), then each run prints its plan's simulated step (the cost model with that
# DB, before it runs) beside the measured median. With ROUNDS > 1 (default 1) each model's plans
# run in ROUNDS rounds of STEPS / ROUNDS steps, heft and greedy in turn within a round, and a
# plan's measured step is the median of its rounds' medians: a slow spell of the host then falls
# on both plans instead of on one run. Writes OUT/results.csv and prints the table.
set -eu
OUT=${1:?usage: bench/mpi-study.sh OUT [STEPS]}
STEPS=${2:-30}
ROUNDS=${3:-1}
PER_ROUND=$(( STEPS / ROUNDS > 0 ? STEPS / ROUNDS : 1 ))
PSIM=${PSIM:-build/placesim}
DATA=${PSIM_DATA:-../shared/data}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -q -np 2)
mkdir -p "$OUT"
DB="$OUT/costs.db"
models=(zoo:mlp zoo:cnn zoo:transformer)
for f in bvlc_alexnet inception_v1 resnet50 squeezenet vgg19 zfnet512; do
    models+=("$DATA/onnx-light/$f.onnx")
done
"$PSIM" profile "${models[@]}" --cluster local:2 --db "$DB" --no-links ${PROFILE_FLAGS:-} >/dev/null
"${MPIRUN[@]}" "$PSIM" profile --mpi --db "$DB" --link-max-bytes 64M >/dev/null
echo "model,algo,simulated_us,measured_us,error_pct" >"$OUT/results.csv"
for g in "${models[@]}"; do
    name=$(basename "$g" .onnx)
    for r in $(seq 1 "$ROUNDS"); do
        for algo in heft greedy; do
            "${MPIRUN[@]}" "$PSIM" run "$g" --mpi --algo $algo --db "$DB" --steps "$PER_ROUND" \
                --json >"$OUT/run-$name-$algo-$r.json"
        done
    done
    for algo in heft greedy; do
        python3 - "$name" $algo "$OUT"/run-"$name"-$algo-*.json >>"$OUT/results.csv" <<'PY'
import json, statistics, sys
runs = [json.load(open(f)) for f in sys.argv[3:]]
sim = statistics.median(d["mpi"]["simulated_us"] for d in runs)
meas = statistics.median(d["step_time_us"]["median"] for d in runs)
print(f"{sys.argv[1]},{sys.argv[2]},{sim:.1f},{meas:.1f},{100 * (sim - meas) / meas:+.2f}")
PY
    done
done
python3 - "$OUT/results.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:
    print(f"{r['model']:16s} {r['algo']:7s} simulated {float(r['simulated_us']):10.1f} us  measured {float(r['measured_us']):10.1f} us  {float(r['error_pct']):+7.2f}%")
errs = [abs(float(r["error_pct"])) for r in rows]
print(f"median |error| {statistics.median(errs):.2f}%, worst {max(errs):.2f}% over {len(rows)} runs")
PY
