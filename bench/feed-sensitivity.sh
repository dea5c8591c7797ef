#!/usr/bin/env bash
# Does a model's step time depend on its input data? (issue 14: efficientnet_b0 took 77 ms fed
# N(0,1) and 52 ms fed the arange ramp, its Sigmoid 42.7 vs 17.4 ms, through glibc's scalar expf
# slow paths and denormals.) Runs MODEL fed `random` and `ramp` RUNS times each and prints the
# medians over the runs and the ratios random / ramp of:
#   step, step min   `placesim run --feed F --steps STEPS`: median and fastest step (wall); the
#                    two feeds' processes alternate
#   steps in turn    `bench-kernels feeds`: one executor runs a step of each feed in turn,
#                    STEPS of each: the median wall step; a slow spell of a shared machine falls
#                    on both feeds alike (the step figure to trust on a loaded machine)
#   cpu in turn      the same steps' worker-thread CPU time
#   Sigmoid, Conv, Mul, all ops: the same steps, per op type the sum over its nodes of each
#                    node's fastest step
# Target: every ratio within 3% of 1. Figures in docs/perf.md ("Feed sensitivity").
# Usage: bench/feed-sensitivity.sh [MODEL.onnx] [BUILD_DIR] [RUNS] [STEPS]
# MODEL defaults to tv-models/efficientnet_b0.onnx (git-ignored) and is exported there when
# missing, by bench/export-torchvision.py where it exists, else by the few lines below (Debian's
# python3-torch and python3-torchvision; random weights, opset 13, batch 1).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${2:-build}"
MODEL="${1:-tv-models/efficientnet_b0.onnx}"
RUNS="${3:-5}"
STEPS="${4:-30}"
PSIM="$BUILD/placesim"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$MODEL" ] && [ -f bench/export-torchvision.py ] && [ "$(basename "$MODEL")" = efficientnet_b0.onnx ]; then
    /usr/bin/python3 bench/export-torchvision.py --out "$(dirname "$MODEL")" efficientnet_b0 >&2
fi
if [ ! -f "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    echo "# exporting efficientnet_b0 to $MODEL" >&2
    /usr/bin/python3 - "$MODEL" <<'PY'
import sys
import torch
import torchvision
torch.manual_seed(0)
m = torchvision.models.efficientnet_b0(weights=None).eval()
torch.onnx.export(m, torch.randn(1, 3, 224, 224), sys.argv[1], opset_version=13,
                  input_names=["input"], output_names=["output"])
PY
fi

echo "# host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $MODEL, $RUNS runs of $STEPS steps per feed, interleaved"
for r in $(seq "$RUNS"); do
    # Alternate which feed goes first, so that a drift of the machine's speed falls on both.
    if [ $((r % 2)) = 1 ]; then order="random ramp"; else order="ramp random"; fi
    for feed in $order; do
        "$PSIM" run "$MODEL" --feed "$feed" --steps "$STEPS" --json >> "$TMP/run.$feed"
    done
    "$BUILD/bench-kernels" feeds "$MODEL" "$STEPS" $order >> "$TMP/kern"
done
python3 - "$TMP" <<'PY'
import json, statistics, sys
tmp = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open("%s/%s" % (tmp, name)) if l.strip()]
fig = {}
for feed in ("random", "ramp"):
    run, kern = rows("run." + feed), [k["feeds"][feed] for k in rows("kern")]
    fig[feed] = {"step": statistics.median(r["step_time_us"]["median"] / 1e3 for r in run),
                 "step min": statistics.median(r["step_time_us"]["min"] / 1e3 for r in run),
                 "steps in turn": statistics.median(k["wall_ms"] for k in kern),
                 "cpu in turn": statistics.median(k["cpu_ms"] for k in kern)}
    for op in ("Sigmoid", "Conv", "Mul"):
        fig[feed][op] = statistics.median(k["per_op_min_ms"].get(op, 0) for k in kern)
    fig[feed]["all ops"] = statistics.median(sum(k["per_op_min_ms"].values()) for k in kern)
print("%-14s %12s %12s %8s" % ("figure", "random ms", "ramp ms", "ratio"))
worst = 0
for k in ("step", "step min", "steps in turn", "cpu in turn", "Sigmoid", "Conv", "Mul", "all ops"):
    a, b = fig["random"][k], fig["ramp"][k]
    ratio = a / b if b else float("nan")
    if k in ("steps in turn", "Sigmoid"):
        worst = max(worst, abs(ratio - 1))
    print("%-14s %12.2f %12.2f %8.3f" % (k, a, b, ratio))
print("worst |ratio - 1| of steps in turn and Sigmoid: %.1f%% (target 3%%): %s" %
      (100 * worst, "met" if worst <= 0.03 else "MISSED"))
PY
