#!/usr/bin/env bash
# The held-out set's exporter (bench/export-torchvision.py) and placesim on its files: a few small
# architectures exported with random weights run through `placesim run` and match PyTorch's
# output; a fixed seed gives the same files twice; graphs are named by their file's stem; an
# unknown architecture is refused. Skipped (77) without Debian's python3-torch/torchvision.
set -euo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
need_python "torch, torchvision" "bench/tv-setup.sh"
EXPORT=("$PY" "$SRC/bench/export-torchvision.py")

n=$("${EXPORT[@]}" --list | wc -l)
[ "$n" -ge 14 ] || fail "--list names $n architectures, fewer than 14"

# squeezenet1_1: plain convolutions and pooling with ceil_mode; mobilenet_v3_small: depthwise,
# HardSwish, HardSigmoid, squeeze-excite. Both export in about a second.
models="squeezenet1_1 mobilenet_v3_small"
# shellcheck disable=SC2086
"${EXPORT[@]}" --out "$tmp/a" $models 2> "$tmp/log" || { cat "$tmp/log"; fail "export"; }
for m in $models; do
    for f in "$m.onnx" "${m}_input_0.pb" "${m}_output_0.pb" "${m}_output_f64_0.pb"; do
        [ -s "$tmp/a/$f" ] || fail "$m: no $f"
    done
    "$PSIM" run "$tmp/a/$m.onnx" --cluster local:1 --feed "input=$tmp/a/${m}_input_0.pb" \
        --check "$tmp/a/${m}_output_0.pb" --rtol 1e-3 --atol 1e-5 --json > "$tmp/run.json" \
        || fail "$m: placesim run --check against PyTorch's output"
    grep -q '"ok" *: *true' "$tmp/run.json" || fail "$m: check not ok: $(cat "$tmp/run.json")"
    # The model's own graph name is torch_jit: placesim names it by the file's stem.
    name=$("$PSIM" inspect "$tmp/a/$m.onnx" | sed -n 's/^graph *//p')
    [ "$name" = "$m" ] || fail "$m: graph named '$name', not by its file's stem"
done
# A wrong input must fail the check: it compares numbers, not only shapes.
if "$PSIM" run "$tmp/a/squeezenet1_1.onnx" --check "$tmp/a/squeezenet1_1_output_0.pb" \
    --rtol 1e-3 --atol 1e-5 > /dev/null 2>&1; then
    fail "squeezenet1_1 on the default feed passed a check against PyTorch's output for another input"
fi

# The same seed gives the same files; --skip-existing leaves complete ones alone.
"${EXPORT[@]}" --out "$tmp/b" squeezenet1_1 2> /dev/null || fail "second export"
for f in squeezenet1_1.onnx squeezenet1_1_input_0.pb squeezenet1_1_output_0.pb; do
    cmp -s "$tmp/a/$f" "$tmp/b/$f" || fail "$f differs between two exports with seed 0"
done
"${EXPORT[@]}" --out "$tmp/b" --skip-existing squeezenet1_1 2> "$tmp/log" || fail "--skip-existing"
grep -q "squeezenet1_1: present" "$tmp/log" || fail "--skip-existing exported again: $(cat "$tmp/log")"

# An unknown architecture: exit 2, one line, nothing written.
set +e
"${EXPORT[@]}" --out "$tmp/c" no_such_net > /dev/null 2> "$tmp/err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "unknown architecture exited $rc, expected 2"
[ "$(wc -l < "$tmp/err")" = 1 ] || fail "unknown architecture: not one error line: $(cat "$tmp/err")"
[ ! -e "$tmp/c" ] || fail "unknown architecture created the output folder"
echo "ok"
