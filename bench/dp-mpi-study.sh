#!/bin/bash
# Data-parallel training over MPI simulated against measured (issue 18): two workers and a
# parameter server as three tasks (`mpirun -np 3`), the mlp's and the cnn's training step with
# 2 synchronous replicas of batch 32 (replica r on task r, the variables on task 2, read once per
# worker: `--caching-device worker`), placed by heft and measured with the study's method over
# MPI (`placesim study --mpi`: in-situ profile, the links between the tasks timed through the
# transport, interleaved rounds). On a host with fewer cores than tasks the tasks share cores
# (docs/sim.md, "Shared cores").
#   bash bench/dp-mpi-study.sh OUT [RUNS [MODELS]]
# Prints one line per run and model: simulated, measured, error (bench/study-rows.py).
set -eu
OUT=${1:?usage: bench/dp-mpi-study.sh OUT [RUNS [MODELS]]}
RUNS=${2:-1}
MODELS=${3:-mlp cnn}
PSIM=${PSIM:-build/placesim}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -q -np 3)
mkdir -p "$OUT"
"${MPIRUN[@]}" "$PSIM" cluster --mpi --json >"$OUT/mpi3.json"
for m in $MODELS; do
    "$PSIM" export "$m" --batch 32 --train-step --replicas 2 --cluster "$OUT/mpi3.json" \
        --caching-device worker -o "$OUT/$m-dp2.json" 2>/dev/null
    for i in $(seq "$RUNS"); do
        "${MPIRUN[@]}" "$PSIM" study "$OUT/$m-dp2.json" --mpi --algos heft \
            --feed replica_0/labels=zeros --feed replica_1/labels=zeros \
            -o "$OUT/$m-$i" --json >"$OUT/$m-$i.json" 2>/dev/null
        python3 "$(dirname "$0")/study-rows.py" "$OUT/$m-$i.json" "$i"
    done
done
