#!/usr/bin/env bash
# placesim cluster: local:N, cluster files, --json round trip, and exit 2 naming the file and
# field for bad files.
set -euo pipefail
PSIM="${PSIM:-./build/placesim}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$PSIM" cluster --cluster local:2 > "$tmp/out.txt"
grep -q "CPU:0" "$tmp/out.txt" && grep -q "CPU:1" "$tmp/out.txt"
"$PSIM" cluster --cluster local:2 --json > "$tmp/c.json"
"$PSIM" cluster --cluster "$tmp/c.json" --json > "$tmp/c2.json"
cmp "$tmp/c.json" "$tmp/c2.json"

echo '{"format": "placesim.cluster/1", "devices": [{"name": "CPU:0", "peak_gflops": -1}]}' > "$tmp/bad.json"
set +e
"$PSIM" cluster --cluster "$tmp/bad.json" 2> "$tmp/err.txt"
rc=$?
set -e
[ "$rc" = 2 ] || { echo "expected exit 2, got $rc"; exit 1; }
grep -q "bad.json" "$tmp/err.txt" && grep -q "CPU:0" "$tmp/err.txt" && grep -q "peak_gflops" "$tmp/err.txt"
[ "$(wc -l < "$tmp/err.txt")" = 1 ]
echo ok
