#!/usr/bin/env bash
# placesim cluster: local:N, cluster files, --json round trip, exit 2 naming the file and field
# for bad files, and --db: calibrated rates from a cost DB, said to be calibrated, read-only.
set -euo pipefail
PSIM="${PSIM:-./build/placesim}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$PSIM" cluster --cluster local:2 > "$tmp/out.txt"
grep -q "CPU:0" "$tmp/out.txt" && grep -q "CPU:1" "$tmp/out.txt"
# Devices of one host on one core are listed as sharing it; local:2 has disjoint cores.
[ "$(nproc)" -lt 2 ] || ! grep -q "shared with" "$tmp/out.txt"
cat > "$tmp/shared.json" <<'EOF2'
{"format": "placesim.cluster/1", "devices": [
 {"name": "/job:w/replica:0/task:0/device:CPU:0", "cores": [0], "host": "h"},
 {"name": "/job:w/replica:0/task:1/device:CPU:0", "cores": [1], "host": "h"},
 {"name": "/job:w/replica:0/task:2/device:CPU:0", "cores": [0], "host": "h"}]}
EOF2
"$PSIM" cluster --cluster "$tmp/shared.json" > "$tmp/shared.txt"
[ "$(grep -c "shared with" "$tmp/shared.txt")" = 2 ] || { echo "two devices share core 0"; cat "$tmp/shared.txt"; exit 1; }
grep -q "cores 0 of host h, shared with /job:w/replica:0/task:2/device:CPU:0" "$tmp/shared.txt"
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

# --db: the devices' rates come from the DB's calibration rows (issue 20 item 22). A short
# profile makes the rows with this machine's fingerprints; the values are then set to known ones.
"$PSIM" profile zoo:mlp --cluster local:2 --db "$tmp/cal.db" --no-links --rounds 1 --budget-ms 1 \
    --reps 3 > /dev/null 2>&1
python3 - "$tmp/cal.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n = db.execute("UPDATE calibration SET value = CASE kind WHEN 'gemm_gflops' THEN 146"
               " WHEN 'copy_GBps' THEN 12.5 ELSE 3.25 END WHERE kind NOT LIKE 'cold%'").rowcount
assert n == 6, n
# and the cold-block curve, five points per device (issue 14)
assert db.execute("SELECT count(*) FROM calibration WHERE kind LIKE 'cold_%MiB_us_per_MiB'").fetchone()[0] == 10
db.commit()
PY
"$PSIM" cluster --cluster local:2 > "$tmp/plain.txt"
grep -q "peak 50.0 GFLOP/s," "$tmp/plain.txt" || { echo "default peak expected"; cat "$tmp/plain.txt"; exit 1; }
! grep -q calibrated "$tmp/plain.txt"
"$PSIM" cluster --cluster local:2 --db "$tmp/cal.db" > "$tmp/cal.txt"
[ "$(grep -c 'peak 146.0 GFLOP/s (calibrated), memory bandwidth 12.5 GB/s (calibrated), launch 3.25 us (calibrated)' "$tmp/cal.txt")" = 2 ] ||
    { echo "calibrated rates expected on both devices"; cat "$tmp/cal.txt"; exit 1; }
"$PSIM" cluster --cluster local:2 --db "$tmp/cal.db" --json | grep -q '"peak_gflops" : 146' ||
    { echo "calibrated peak expected in --json"; exit 1; }
# Only what was calibrated is said to be: a DB without the copy rows keeps the default bandwidth.
python3 -c 'import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute("DELETE FROM calibration WHERE kind = \"copy_GBps\""); d.commit()' "$tmp/cal.db"
"$PSIM" cluster --cluster local:2 --db "$tmp/cal.db" | grep -q 'peak 146.0 GFLOP/s (calibrated), memory bandwidth [0-9.]* GB/s, launch' ||
    { echo "uncalibrated bandwidth shown as calibrated"; exit 1; }
# A read-only DB serves cluster --db (issue 20 item 11); root writes any file, so check as nobody.
chmod 444 "$tmp/cal.db"
chmod 755 "$tmp"
as_user=()
if [ "$(id -u)" = 0 ]; then
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
if [ "$(id -u)" != 0 ] || command -v setpriv > /dev/null; then
    "${as_user[@]}" "$PSIM" cluster --cluster local:2 --db "$tmp/cal.db" | grep -q 'peak 146.0 GFLOP/s (calibrated)' ||
        { echo "read-only DB refused"; exit 1; }
fi
set +e
"$PSIM" cluster --cluster local:2 --db "$tmp/missing.db" 2> "$tmp/err.txt"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "missing.db" "$tmp/err.txt" && [ "$(wc -l < "$tmp/err.txt")" = 1 ] ||
    { echo "missing DB: exit $rc"; cat "$tmp/err.txt"; exit 1; }
[ ! -e "$tmp/missing.db" ]
echo ok
