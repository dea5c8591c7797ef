#!/bin/bash
# Simulated against measured step time of 2-task MPI runs (issue 16): the six onnx-light models
# and the built-in ones, placed by heft and by greedy over `mpirun -np 2`, with the study's own
# method (`placesim study --mpi`): each graph profiled in situ in rank 0's process on each task
# device's cores, the link between the tasks timed through the transport, the plans measured in
# interleaved rounds and simulated again with the profile refreshed between the rounds.
#   bash bench/mpi-study.sh OUT [STEPS [ALGOS]]
# Writes OUT/study (the study's report, results.csv, plans) and OUT/study.json, and prints the
# table with the median and worst |error|.
set -eu
OUT=${1:?usage: bench/mpi-study.sh OUT [STEPS [ALGOS]]}
STEPS=${2:-30}
ALGOS=${3:-heft,greedy}
PSIM=${PSIM:-build/placesim}
DATA=${PSIM_DATA:-../shared/data}
NP=${NP:-2}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -q -np "$NP")
mkdir -p "$OUT"
models=(zoo:mlp zoo:cnn zoo:transformer)
for f in bvlc_alexnet inception_v1 resnet50 squeezenet vgg19 zfnet512; do
    models+=("$DATA/onnx-light/$f.onnx")
done
"${MPIRUN[@]}" "$PSIM" study "${models[@]}" --mpi --algos "$ALGOS" --steps "$STEPS" -o "$OUT/study" \
    ${STUDY_FLAGS:-} --json >"$OUT/study.json"
python3 - "$OUT/study.json" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
errs = []
for r in d["rows"]:
    if "error" in r:
        print(f"{r['graph']:16s} {r['algo']:7s} failed: {r['error']}")
        continue
    errs.append(abs(r["error_pct"]))
    print(f"{r['graph']:16s} {r['algo']:7s} simulated {r['sim_us']:10.1f} us  measured {r['measured_us']:10.1f} us"
          f"  {r['error_pct']:+7.2f}%  transfers {r['transfers']}")
print(f"median |error| {statistics.median(errs):.2f}%, worst {max(errs):.2f}% over {len(errs)} plans"
      f" ({d.get('mpi_tasks')} MPI tasks)")
PY
