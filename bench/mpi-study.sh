#!/bin/bash
# Simulated against measured step time of 2-task MPI runs (issue 16): the six onnx-light models
# and the built-in ones, placed by heft and by greedy over `mpirun -np 2`.
#   bash bench/mpi-study.sh OUT [STEPS]
# The kernels are profiled once on `local:2` (their rows serve the MPI tasks' CPU devices, which
# have the same fingerprint), the link between the tasks through run --mpi's transport
# (`profile --mpi`), then each run prints its plan's simulated step (the cost model with that
# DB, before it runs) beside the measured median. Writes OUT/results.csv and prints the table.
set -eu
OUT=${1:?usage: bench/mpi-study.sh OUT [STEPS]}
STEPS=${2:-30}
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
    for algo in heft greedy; do
        "${MPIRUN[@]}" "$PSIM" run "$g" --mpi --algo $algo --db "$DB" --steps "$STEPS" --json >"$OUT/run.json"
        python3 - "$OUT/run.json" "$(basename "$g" .onnx)" $algo >>"$OUT/results.csv" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
sim, meas = d["mpi"]["simulated_us"], d["step_time_us"]["median"]
print(f"{sys.argv[2]},{sys.argv[3]},{sim:.1f},{meas:.1f},{100 * (sim - meas) / meas:+.2f}")
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
