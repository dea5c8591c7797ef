#!/bin/bash
# Data-parallel training simulated against measured (issue 18): the mlp and the cnn training
# steps with 2 synchronous replicas of batch 32 on local:2 (`export --train-step --replicas 2
# --cluster local:2`: replica r requested on CPU:r, the variables on CPU:0), studied beside the
# same model's one-copy step at the global batch, 64, placed by the default four algorithms
# (model parallelism), in one `placesim study` per model: same rounds, same host minutes.
# The replicated step's rows are one placement (every node requested) measured four times.
#   bash bench/dp-study.sh OUT [RUNS]
# Prints one line per run and row: graph, algorithm, simulated, measured, error.
set -eu
OUT=${1:?usage: bench/dp-study.sh OUT [RUNS]}
RUNS=${2:-1}
PSIM=${PSIM:-build/placesim}
mkdir -p "$OUT"
for m in mlp cnn; do
    "$PSIM" export $m --batch 32 --train-step --replicas 2 --cluster local:2 --caching-device worker \
        -o "$OUT/$m-dp2.json" 2>/dev/null
    "$PSIM" export $m --batch 64 --train-step -o "$OUT/$m-b64.json" 2>/dev/null
    for i in $(seq "$RUNS"); do
        "$PSIM" study "$OUT/$m-dp2.json" "$OUT/$m-b64.json" --cluster local:2 \
            --feed replica_0/labels=zeros --feed replica_1/labels=zeros --feed labels=zeros \
            -o "$OUT/$m-$i" --json >"$OUT/$m-$i.json" 2>/dev/null
        python3 "$(dirname "$0")/study-rows.py" "$OUT/$m-$i.json" "$i"
    done
done
