#!/usr/bin/env bash
# Kernel speed, side by side in one run (figures for docs/perf.md):
#  1. MatMul 1024^3 float32 on one core: our kernel vs plain OpenBLAS cblas_sgemm (bench-kernels).
#  2. Single-core inference of resnet50, inception_v1 and vgg19 from ../shared/data/onnx-light:
#     placesim's executor and CPU kernels vs ONNX Runtime with one intra-op thread
#     (bench/ort-time.py), runs interleaved ROUNDS times, the median of each side's per-round
#     medians reported, as wall time and as the CPU time of the thread that runs the kernels
#     (the figure to trust on a shared, loaded machine).
# Usage: bench/bench-kernels.sh [BUILD_DIR] [ROUNDS] [STEPS]. Needs onnxruntime and numpy for
# $PYTHON (default: python3; e.g. PYTHON=/path/venv/bin/python); it is not a build dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
ROUNDS="${2:-5}"
STEPS="${3:-5}"
PYTHON="${PYTHON:-python3}"
DATA="${PSIM_DATA:-../shared/data}/onnx-light"
CORE="${PSIM_BENCH_CORE:-0}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

pin() { taskset -c "$CORE" "$@"; }

echo "# host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg), pinned to core $CORE"
echo "# onnxruntime $("$PYTHON" -c 'import onnxruntime; print(onnxruntime.__version__)')"
pin "$BUILD/bench-kernels" matmul 1024 $((ROUNDS * 3)) | tee "$TMP/matmul.json"

for m in resnet50 inception_v1 vgg19; do
    : >"$TMP/$m.ours"
    : >"$TMP/$m.ort"
    for r in $(seq "$ROUNDS"); do
        pin "$BUILD/bench-kernels" model "$DATA/$m.onnx" "$STEPS" >>"$TMP/$m.ours"
        pin "$PYTHON" bench/ort-time.py "$DATA/$m.onnx" "$STEPS" 2>/dev/null >>"$TMP/$m.ort"
    done
    "$PYTHON" - "$m" "$TMP/$m.ours" "$TMP/$m.ort" <<'PY'
import json, statistics, sys
name, ours, ort = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])], [json.loads(l) for l in open(sys.argv[3])]
def med(rows, key): return statistics.median(r[key] for r in rows)
o_w, o_c, r_w, r_c = med(ours, "wall_ms"), med(ours, "cpu_ms"), med(ort, "wall_ms"), med(ort, "cpu_ms")
print(json.dumps({"model": name, "rounds": len(ours), "placesim_wall_ms": o_w, "placesim_cpu_ms": o_c,
                  "ort_wall_ms": r_w, "ort_cpu_ms": r_c, "ratio_wall": round(o_w / r_w, 3),
                  "ratio_cpu": round(o_c / r_c, 3)}))
PY
done
