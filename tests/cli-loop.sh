#!/usr/bin/env bash
# ONNX Loops (issue 19): a torch.jit.script loop exported by PyTorch and a Loop written with onnx's
# helper (bench/export-loop.py) import, run on one device and split over two, match PyTorch's and
# numpy's outputs, and simulate; a loop whose trip count is known only when the graph runs is
# refused with one line and exit 2. Skipped (77) without Debian's python3-torch and python3-onnx.
set -euo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
need_python "torch, onnx, numpy" "Debian's python3-torch, python3-onnx"
"$PY" "$SRC/bench/export-loop.py" "$tmp" 2> "$tmp/log" || { cat "$tmp/log"; fail "export"; }
grep -q 'Loop' "$tmp/rnn_loop.onnx" || fail "PyTorch exported no Loop node"

# The recurrent loop: one device, then heft over two (the iterations' nodes split).
for args in "--cluster local:1" "--cluster local:2 --algo heft" "--cluster local:2 --algo round-robin"; do
    # shellcheck disable=SC2086
    "$PSIM" run "$tmp/rnn_loop.onnx" $args --feed "x=$tmp/rnn_loop_input_0.pb" \
        --check "$tmp/rnn_loop_output_0.pb" --rtol 1e-4 --atol 1e-6 > "$tmp/out" \
        || fail "rnn_loop ($args): $(cat "$tmp/out")"
    grep -q ': ok ' "$tmp/out" || fail "rnn_loop ($args): $(cat "$tmp/out")"
done
# Unrolled: 8 iterations of the body, each named after its iteration.
"$PSIM" inspect "$tmp/rnn_loop.onnx" > "$tmp/inspect"
grep -Eq '^ +Tanh +8$' "$tmp/inspect" || fail "rnn_loop: not 8 Tanh nodes: $(cat "$tmp/inspect")"
"$PSIM" export "$tmp/rnn_loop.onnx" -o "$tmp/rnn.json" > /dev/null
grep -q '"/Loop/7//Tanh"' "$tmp/rnn.json" || fail "rnn_loop: no node named /Loop/7//Tanh"
# Simulated, and placed into a plan that runs.
"$PSIM" sim "$tmp/rnn_loop.onnx" --cluster local:2 --algo heft > "$tmp/sim" || fail "sim"
grep -q '^simulated' "$tmp/sim" || fail "sim printed no step: $(cat "$tmp/sim")"
"$PSIM" place "$tmp/rnn_loop.onnx" --cluster local:2 --algo greedy --plan "$tmp/p.json" > /dev/null
"$PSIM" run --plan "$tmp/p.json" --feed "x=$tmp/rnn_loop_input_0.pb" \
    --check "$tmp/rnn_loop_output_0.pb" --rtol 1e-4 --atol 1e-6 > "$tmp/out" || fail "run --plan: $(cat "$tmp/out")"

# The helper's loop: both outputs, the loop-carried value and the stacked scan output.
"$PSIM" run "$tmp/scan_loop.onnx" --feed "x=$tmp/scan_loop_input_0.pb" --save-outputs "$tmp/so" \
    > "$tmp/out" || fail "scan_loop: $(cat "$tmp/out")"
"$PY" - "$tmp" <<'PY' || fail "scan_loop: outputs differ from numpy's"
import sys, onnx, numpy as np
from onnx import numpy_helper as nh
d = sys.argv[1]
for k in (0, 1):
    got = nh.to_array(onnx.load_tensor(f"{d}/so/output_{k}.pb"))
    want = nh.to_array(onnx.load_tensor(f"{d}/scan_loop_output_{k}.pb"))
    assert got.shape == want.shape and np.array_equal(got, want), (k, got, want)
PY

# A trip count known only when the graph runs: one line naming the Loop, exit 2.
cat > "$tmp/dyn.py" <<'PY'
import sys, torch
class Sum(torch.nn.Module):
    def forward(self, x):
        acc = torch.zeros(x.size(1))
        for t in range(x.size(0)):
            acc = acc + x[t]
        return acc
torch.onnx.export(torch.jit.script(Sum()), (torch.randn(5, 3),), sys.argv[1], opset_version=13,
                  input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "T"}})
PY
"$PY" "$tmp/dyn.py" "$tmp/dyn.onnx" 2> /dev/null
set +e
"$PSIM" run "$tmp/dyn.onnx" > "$tmp/out" 2> "$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "dynamic trip count: exit $rc, not 2"
[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "dynamic trip count: not one line: $(cat "$tmp/err")"
grep -q "dyn.onnx: node '/Loop' (Loop): its trip count .* is not a constant" "$tmp/err" \
    || fail "dynamic trip count: $(cat "$tmp/err")"
echo "cli-loop: ok"
