#!/usr/bin/env bash
# Why single-device steps were over-predicted (docs/validation.md, "In-situ costs"): for each
# graph, on one device, the step simulated from kernels timed alone (profile), the step simulated
# from the same kernels timed in situ (profile --in-situ: the executor's own per-op times in
# whole-model runs), and the measured step (run, median of 30 steps, a run of its own). Then the
# kernel-alone / in-situ ratio per op type, summed over the signatures of the graph.
#   bash bench/insitu-vs-kernel.sh [BUILD] [GRAPH...]
set -euo pipefail
B="${1:-build}"; shift || true
PSIM="$B/placesim"
graphs=("$@")
[ ${#graphs[@]} -gt 0 ] || graphs=(zoo:cnn zoo:transformer "${PSIM_DATA:-../shared/data}/onnx-light/inception_v1.onnx")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step() {  # DB -> simulated step of the single plan
    "$PSIM" sim "$1" --cluster local:1 --algo single --db "$2" --json 2>/dev/null |
        python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["step_time_us"])'
}
echo "| graph | simulated, kernels alone (us) | simulated, in situ (us) | measured (us) | error alone | error in situ |"
echo "|---|---|---|---|---|---|"
for g in "${graphs[@]}"; do
    k="$tmp/k.db"; i="$tmp/i.db"
    rm -f "$k"* "$i"*
    "$PSIM" profile "$g" --cluster local:1 --db "$k" --no-links --no-calibrate --budget-ms 200 --rounds 20 > /dev/null 2>&1
    cp "$k" "$i"
    "$PSIM" profile "$g" --cluster local:1 --db "$i" --no-links --no-calibrate --in-situ > /dev/null 2>&1
    sk=$(step "$g" "$k"); si=$(step "$g" "$i")
    m=$("$PSIM" run "$g" --steps 30 --json 2>/dev/null |
        python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["step_time_us"]["median"])')
    python3 - "$g" "$sk" "$si" "$m" <<'PY'
import sys, os
g, sk, si, m = sys.argv[1], *map(float, sys.argv[2:])
print("| %s | %.1f | %.1f | %.1f | %+.1f%% | %+.1f%% |" % (os.path.basename(g), sk, si, m, 100 * (sk - m) / m, 100 * (si - m) / m))
PY
    echo "per op type, kernel alone / in situ (sum of signature medians): $(sqlite3 "$i" "
        SELECT group_concat(op || ' ' || printf('%.2f', r), ', ') FROM (
          SELECT k.op AS op, sum(k.median_us) / sum(s.median_us) AS r, sum(s.median_us) AS w
          FROM kernels k JOIN kernels s ON s.signature = k.signature AND s.device_id = k.device_id
          WHERE k.method = 'kernel' AND s.method = 'insitu' GROUP BY k.op ORDER BY w DESC LIMIT 6)")"
done
