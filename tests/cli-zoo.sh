#!/bin/bash
# The built-in models run for real on one CPU device and give their documented output shapes;
# inspect and export accept zoo:NAME and bare names; an unknown model is exit 2 naming it.
set -u
PSIM=${PSIM:-build/placesim}
fail=0
check() { # model, expected output shape as JSON
    out=$("$PSIM" run "zoo:$1" --json 2>&1) || { echo "run zoo:$1 failed: $out"; fail=1; return; }
    echo "$out" | grep -q "\"shape\":$2" || { echo "zoo:$1: output shape is not $2: $out"; fail=1; }
    n=$("$PSIM" inspect --json "zoo:$1" | sed -n 's/.*"nodes":\([0-9]*\).*/\1/p')
    [ "${n:-0}" -gt 10 ] || { echo "inspect zoo:$1: nodes '$n'"; fail=1; }
}
check mlp '\[64,10\]'
check cnn '\[1,10\]'
check transformer '\[2,16,64\]'
"$PSIM" inspect mlp | grep -q "^graph *mlp" || { echo "bare name 'mlp' not taken as zoo:mlp"; fail=1; }
"$PSIM" export zoo:mlp | grep -q '"placesim.graph/1"' || { echo "export zoo:mlp is not graph JSON"; fail=1; }
err=$("$PSIM" inspect zoo:nope 2>&1); rc=$?
[ $rc -eq 2 ] || { echo "unknown model: exit $rc"; fail=1; }
echo "$err" | grep -q "^placesim: zoo:nope: no such built-in model" || { echo "unknown model: '$err'"; fail=1; }
exit $fail
