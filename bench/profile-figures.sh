#!/usr/bin/env bash
# The profiler's done-when figures (docs/validation.md):
#  1. profile the six onnx-light models on local:2 into A.db: one kernel row per
#     (signature, device), checked with sqlite3;
#  2. profile them again into B.db: repeatability of the medians (kernels >= 100 us);
#  3. resnet50: the cost model's time per node (from A.db) against a fresh standalone
#     measurement of each node.
# Usage: bash bench/profile-figures.sh [OUT_DIR]   (CLOCK=monotonic|thread-cpu, ROUNDS=100,
#        BUILD=build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
CLOCK="${CLOCK:-monotonic}"
ROUNDS="${ROUNDS:-100}"
OUT="${1:-/tmp/psim-profile-figures-$CLOCK}"
DATA="${PSIM_DATA:-../shared/data}/onnx-light"
PSIM="$BUILD/placesim"
mkdir -p "$OUT"
rm -f "$OUT"/A.db* "$OUT"/B.db*
models=("$DATA"/*.onnx)
echo "== $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), clock $CLOCK, rounds $ROUNDS"

for db in A B; do
    extra=()
    [ "$db" = B ] && extra=(--no-links --no-calibrate)
    "$PSIM" profile "${models[@]}" --cluster local:2 --db "$OUT/$db.db" --clock "$CLOCK" --rounds "$ROUNDS" --json \
        "${extra[@]}" > "$OUT/$db.json" 2> "$OUT/$db.log"
    echo "profile $db: $(cat "$OUT/$db.json")"
done

echo "== rows"
sqlite3 "$OUT/A.db" "SELECT 'kernel rows', count(*), 'distinct (signature, device)',
                     count(DISTINCT signature || '|' || device_id) FROM kernels"
sqlite3 "$OUT/A.db" "SELECT device, count(*) FROM kernel_times GROUP BY device"
sqlite3 "$OUT/A.db" "SELECT 'duplicates', count(*) FROM (SELECT 1 FROM kernels GROUP BY signature, device_id HAVING count(*) > 1)"
sqlite3 "$OUT/A.db" "SELECT 'link fits', src_id, dst_id, round(latency_us, 3), round(bandwidth_GBps, 2), round(rms_rel_error, 3) FROM link_fits"
sqlite3 "$OUT/A.db" "SELECT 'calibration', d.name, c.kind, round(c.value, 3) FROM calibration c JOIN devices d ON d.id = c.device_id"

echo "== repeatability (A vs B, medians, kernels >= 100 us)"
python3 bench/cost-db-compare.py "$OUT/A.db" "$OUT/B.db"

echo "== prediction (resnet50, CPU:0: cost model from A.db vs fresh measurement)"
"$BUILD/bench-cost-predict" "$DATA/resnet50.onnx" --db "$OUT/A.db" --cluster local:2 --device CPU:0 \
    --clock "$CLOCK" --rounds "$ROUNDS" > "$OUT/predict.txt"
tail -1 "$OUT/predict.txt"
echo "== $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
