#!/usr/bin/env bash
# Runs the six onnx-light models against ONNX's reference outputs and, when exported (see
# tests/export_torchvision.py), the torchvision models against PyTorch's outputs, with
# `placesim run --check` (rtol 1e-3, atol 1e-7). Prints one row per model; exit 1 if any fails.
#   bench/check-models.sh [BUILD_DIR] [STEPS]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
STEPS="${2:-3}"
PSIM="$BUILD/placesim"
DATA="${PSIM_DATA:-../shared/data}"
TV="$BUILD/torchvision"
fail=0
printf "%-31s %-6s %12s %12s %12s %12s\n" model check max_abs_err max_rel_err median_ms min_ms
row() { # NAME ARGS...
    local name=$1; shift
    local out
    out=$("$PSIM" run "$@" --steps "$STEPS" --json 2> /tmp/psim-check-$$.err)
    local rc=$?
    if [ -z "$out" ]; then
        printf "%-31s %-6s %s\n" "$name" ERROR "$(head -1 /tmp/psim-check-$$.err)"
        fail=1
        return
    fi
    [ "$rc" = 0 ] || fail=1
    python3 - "$name" "$out" <<'EOF'
import json, sys
name, r = sys.argv[1], json.loads(sys.argv[2])
c, t = r["check"], r["step_time_us"]
f = lambda v: "%12.3g" % v if v is not None else "%12s" % "inf"
print("%-31s %-6s %s %s %12.1f %12.1f" % (name, "ok" if c["ok"] else "FAIL", f(c["max_abs_err"]),
      f(c["max_rel_err"]), t["median"] / 1e3, t["min"] / 1e3))
EOF
}
for m in bvlc_alexnet inception_v1 resnet50 squeezenet vgg19 zfnet512; do
    row "$m" "$DATA/onnx-light/$m.onnx" --check "$DATA/onnx-light/${m}_output_0.pb"
done
for m in resnet18 mobilenet_v2 googlenet densenet121 shufflenet_v2_x1_0 vit_b_16; do
    [ -f "$TV/$m.onnx" ] || continue
    row "torchvision/$m" "$TV/$m.onnx" --feed "input=$TV/${m}_input_0.pb" \
        --check "$TV/${m}_output_0.pb"
done
rm -f /tmp/psim-check-$$.err
exit $fail
