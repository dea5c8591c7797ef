#!/usr/bin/env bash
# Runs the six onnx-light models against ONNX's reference outputs with `placesim run --check`
# (rtol 1e-3, atol 1e-7: ONNX's backend test runner) and, when exported (see
# tests/export_torchvision.py), the torchvision models against PyTorch's float32 outputs with
# rtol 1e-3 and atol 1e-5: the tolerances PyTorch's own ONNX export tutorial checks an exported
# model against PyTorch with (np.testing.assert_allclose(torch_out, ort_out, rtol=1e-03,
# atol=1e-05)). Prints one row per model; exit 1 if any fails.
# For a torchvision model with PyTorch's float64 output beside it (*_output_f64_0.pb), a second
# line compares, against that float64 reference, our output and PyTorch's float32 output: max and
# mean absolute error and the elements outside rtol 1e-3 with atol 1e-7 and with atol 1e-5. It
# only informs: a float32 implementation is not expected to do better than PyTorch's own float32
# output does against float64 (docs/validation.md, "torchvision exports").
#   bench/check-models.sh [BUILD_DIR] [STEPS]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
STEPS="${2:-3}"
PSIM="$BUILD/placesim"
DATA="${PSIM_DATA:-../shared/data}"
TV="$BUILD/torchvision"
TMP=$(mktemp -d /tmp/psim-check.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# An interpreter with numpy and onnx for the float64 comparison (Debian's has them).
PYONNX=""
for p in python3 /usr/bin/python3; do
    if "$p" -c "import numpy, onnx" 2> /dev/null; then PYONNX=$p; break; fi
done
fail=0
printf "%-31s %-6s %12s %12s %12s %12s\n" model check max_abs_err max_rel_err median_ms min_ms
row() { # NAME ARGS...
    local name=$1; shift
    local out
    out=$("$PSIM" run "$@" --steps "$STEPS" --json 2> "$TMP/err")
    local rc=$?
    if [ -z "$out" ]; then
        printf "%-31s %-6s %s\n" "$name" ERROR "$(head -1 "$TMP/err")"
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
    # (fed arange(n)/n: how ONNX made these reference outputs)
    row "$m" "$DATA/onnx-light/$m.onnx" --feed ramp --check "$DATA/onnx-light/${m}_output_0.pb"
done
f64row() { # OURS.pb PYTORCH_FP32.pb PYTORCH_FP64.pb
    if [ -z "$PYONNX" ]; then
        echo "    vs float64: skipped (no python3 with numpy and onnx)"
        return
    fi
    "$PYONNX" - "$@" <<'EOF'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t).astype(np.float64).ravel()
ours, pt32, ref = (load(p) for p in sys.argv[1:4])
def err(a):
    e = np.abs(a - ref)
    bad = np.flatnonzero(e > 1e-7 + 1e-3 * np.abs(ref))
    bad5 = np.flatnonzero(e > 1e-5 + 1e-3 * np.abs(ref))
    return "max %.3g mean %.3g, outside rtol 1e-3: %d at atol 1e-7%s, %d at atol 1e-5" % (
        e.max(), e.mean(), bad.size, " %s" % bad[:5].tolist() if bad.size else "", bad5.size)
print("    vs float64 (|max| %.3g): ours %s; PyTorch float32 %s" % (np.abs(ref).max(), err(ours), err(pt32)))
EOF
}
for m in resnet18 mobilenet_v2 googlenet densenet121 shufflenet_v2_x1_0 vit_b_16; do
    [ -f "$TV/$m.onnx" ] || continue
    rm -f "$TMP/output_0.pb"
    row "torchvision/$m" "$TV/$m.onnx" --feed "input=$TV/${m}_input_0.pb" \
        --check "$TV/${m}_output_0.pb" --rtol 1e-3 --atol 1e-5 --save-outputs "$TMP"
    if [ -f "$TV/${m}_output_f64_0.pb" ] && [ -f "$TMP/output_0.pb" ]; then
        f64row "$TMP/output_0.pb" "$TV/${m}_output_0.pb" "$TV/${m}_output_f64_0.pb"
    fi
done
exit $fail
