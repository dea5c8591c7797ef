#!/bin/bash
# TensorFlow's unrolled LSTM and GRU (../shared/data/tf/lstm.pb, gru.pb: StridedSlice, Pack,
# Unpack, ExpandDims, Fill, RandomUniform among their ops) import, place, simulate and run, on
# one device and split over two, and match TensorFlow's own outputs (tests/data/tf, written by
# bench/tf-reference.py with TensorFlow 2.21 from PyPI). Bound: |a - b| <= 1e-4 + 1e-4 |b|; the
# outputs are O(10), so that is 1e-5 of their scale, for 28 recurrent steps of float32 MatMuls
# summed in another order than Eigen's (measured: 6.2e-6 for the LSTM, 1.6e-5 for the GRU).
set -u
PSIM=${PSIM:-build/placesim}
DATA=${PSIM_DATA:-../shared/data}
REF=$(dirname "$0")/data/tf
[ -f "$DATA/tf/lstm.pb" ] || exit 77
fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for m in lstm gru; do
    g="$DATA/tf/$m.pb"
    shape=(--shape X=2,784)
    feeds=("${shape[@]}" --feed "X=$REF/${m}_X.pb" --feed "keep_prob=$REF/${m}_keep_prob.pb")
    chk=(--check "$REF/${m}_output_0.pb" --rtol 1e-4 --atol 1e-4)
    "$PSIM" run "$g" "${feeds[@]}" "${chk[@]}" --steps 3 > "$tmp/$m.run" 2>&1 ||
        { echo "$m: run on one device failed: $(tail -1 "$tmp/$m.run")"; fail=1; }
    "$PSIM" place "$g" "${shape[@]}" --cluster local:2 --algo heft --plan "$tmp/$m.plan.json" > /dev/null 2>"$tmp/$m.err" ||
        { echo "$m: place failed: $(cat "$tmp/$m.err")"; fail=1; continue; }
    "$PSIM" sim --plan "$tmp/$m.plan.json" --json > "$tmp/$m.sim" 2>"$tmp/$m.err" ||
        { echo "$m: sim failed: $(cat "$tmp/$m.err")"; fail=1; }
    grep -q '"step_time_us":[0-9]' "$tmp/$m.sim" || { echo "$m: sim gave no step time"; fail=1; }
    # Split over two devices by round-robin: many Send/Recv pairs, the same numbers.
    "$PSIM" run "$g" "${feeds[@]}" "${chk[@]}" --cluster local:2 --algo round-robin --steps 2 > "$tmp/$m.rr" 2>&1 ||
        { echo "$m: round-robin run failed: $(tail -1 "$tmp/$m.rr")"; fail=1; }
done
exit $fail
