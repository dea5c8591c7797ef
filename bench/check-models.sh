#!/usr/bin/env bash
# Runs the six onnx-light models against ONNX's reference outputs with `placesim run --check`
# (rtol 1e-3, atol 1e-7: ONNX's backend test runner) and, when exported (every TV/*.onnx, TV
# being $TV or tv-models; see bench/export-torchvision.py), the torchvision models against
# PyTorch's float32 outputs with rtol 1e-3 and atol 1e-5: the tolerances PyTorch's own ONNX
# export tutorial checks an exported model against PyTorch with
# (np.testing.assert_allclose(torch_out, ort_out, rtol=1e-03, atol=1e-05)). Prints one row per
# model; exit 1 if any fails.
# For a torchvision model with PyTorch's float64 output beside it (*_output_f64_0.pb), a second
# line compares, against that float64 reference, our output and PyTorch's float32 output: max and
# mean absolute error and the elements outside rtol 1e-3 with atol 1e-7 and with atol 1e-5. A
# model that fails the float32 check still passes when our max error against float64 is at most
# twice PyTorch float32's: a float32 implementation summing in another order is not expected to
# do better than PyTorch's own float32 output (deep nets with O(1) outputs, resnet50 and
# inception_v3, differ from PyTorch float32 by more than 1e-5 while ours is as close to float64
# as PyTorch's; docs/validation.md, "Held-out set: torchvision exports").
#   bench/check-models.sh [BUILD_DIR] [STEPS]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
STEPS="${2:-3}"
PSIM="$BUILD/placesim"
DATA="${PSIM_DATA:-../shared/data}"
TV="${TV:-tv-models}"
TMP=$(mktemp -d /tmp/psim-check.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# An interpreter with numpy for the float64 comparison (Debian's has it with python3-torch).
PYNP=""
for p in python3 /usr/bin/python3; do
    if "$p" -c "import numpy" 2> /dev/null; then PYNP=$p; break; fi
done
fail=0
printf "%-31s %-6s %12s %12s %12s %12s\n" model check max_abs_err max_rel_err median_ms min_ms
row() { # NAME ARGS...
    local name=$1; shift
    local out
    out=$("$PSIM" run "$@" --steps "$STEPS" --json 2> "$TMP/err")
    local rc=$?
    row_ok=$([ "$rc" = 0 ] && echo 1 || echo 0)
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
f64row() { # OURS.pb PYTORCH_FP32.pb PYTORCH_FP64.pb ok|FAIL
    if [ -z "$PYNP" ]; then
        echo "    vs float64: skipped (no python3 with numpy)"
        return
    fi
    "$PYNP" - "$@" <<'EOF'
import sys
import numpy as np
def load(path):
    # A TensorProto with raw_data (what PyTorch's exporter script and placesim write), read
    # without python3-onnx: data_type is field 2, raw_data field 9.
    b, i, dt, raw = open(path, "rb").read(), 0, None, None
    def varint():
        nonlocal i
        v = s = 0
        while True:
            c = b[i]; i += 1
            v |= (c & 0x7F) << s; s += 7
            if c < 0x80:
                return v
    while i < len(b):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            v = varint()
            if field == 2:
                dt = v
        elif wire == 2:
            n = varint()
            if field == 9:
                raw = b[i:i + n]
            i += n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            sys.exit("%s: wire type %d" % (path, wire))
    return np.frombuffer(raw, {1: "<f4", 11: "<f8"}[dt]).astype(np.float64)
ours, pt32, ref = (load(p) for p in sys.argv[1:4])
def err(a):
    e = np.abs(a - ref)
    bad = np.flatnonzero(e > 1e-7 + 1e-3 * np.abs(ref))
    bad5 = np.flatnonzero(e > 1e-5 + 1e-3 * np.abs(ref))
    return "max %.3g mean %.3g, outside rtol 1e-3: %d at atol 1e-7%s, %d at atol 1e-5" % (
        e.max(), e.mean(), bad.size, " %s" % bad[:5].tolist() if bad.size else "", bad5.size)
print("    vs float64 (|max| %.3g): ours %s; PyTorch float32 %s" % (np.abs(ref).max(), err(ours), err(pt32)))
ratio = np.abs(ours - ref).max() / max(np.abs(pt32 - ref).max(), 1e-300)
within = ratio <= 2
print("    vs float64: ours/PyTorch float32 max error %.2f%s" % (ratio, "" if sys.argv[4] == "ok" else
      ", within 2: ok" if within else ", not within 2: FAIL"))
sys.exit(0 if within else 1)
EOF
}
for f in "$TV"/*.onnx; do
    [ -f "$f" ] || continue
    m=$(basename "$f" .onnx)
    rm -f "$TMP/output_0.pb"
    fail_before=$fail
    row "torchvision/$m" "$TV/$m.onnx" --feed "input=$TV/${m}_input_0.pb" \
        --check "$TV/${m}_output_0.pb" --rtol 1e-3 --atol 1e-5 --save-outputs "$TMP"
    [ -f "$TV/${m}_output_f64_0.pb" ] || continue
    # A failed check keeps no output file: run once more for it.
    [ -f "$TMP/output_0.pb" ] || "$PSIM" run "$f" --feed "input=$TV/${m}_input_0.pb" \
        --save-outputs "$TMP" > /dev/null 2>&1
    [ -f "$TMP/output_0.pb" ] || continue
    verdict=ok; [ "$row_ok" = 1 ] || verdict=FAIL
    if f64row "$TMP/output_0.pb" "$TV/${m}_output_0.pb" "$TV/${m}_output_f64_0.pb" $verdict \
        && [ -n "$PYNP" ]; then
        fail=$fail_before
    fi
done
exit $fail
