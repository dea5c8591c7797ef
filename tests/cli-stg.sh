#!/bin/bash
# placesim inspect on STG task graphs prints the critical path of the trailer's "CP Length".
set -u
PSIM=${PSIM:-build/placesim}
DATA=${PSIM_DATA:-../shared/data}
[ -d "$DATA/stg/50" ] || exit 77
fail=0
for f in rand0000 rand0057 rand0179; do
    file="$DATA/stg/50/$f.stg"
    want=$(sed -n 's/^# CP Length *: *\([0-9]*\).*/\1/p' "$file")
    got=$("$PSIM" inspect --json "$file" | sed -n 's/.*"critical_path_us":\([0-9.]*\).*/\1/p')
    if [ -z "$want" ] || [ "${got%.0}" != "$want" ]; then
        echo "$f: critical_path_us '$got', trailer says '$want'"; fail=1
    fi
    "$PSIM" inspect "$file" | grep -q "^critical path $want us$" || { echo "$f: text output lacks the critical path"; fail=1; }
done
# A bad STG file: exit 2 and one error line naming the file.
tmp=$(mktemp --suffix=.stg); trap 'rm -f "$tmp"' EXIT
printf '3\n0 0 0\n1 4 1 9\n' > "$tmp"
"$PSIM" inspect "$tmp" 2>"$tmp.err"; rc=$?
[ $rc -eq 2 ] || { echo "bad file: exit $rc, want 2"; fail=1; }
grep -q "^placesim: $tmp: " "$tmp.err" || { echo "bad file: error '$(cat "$tmp.err")' does not name the file"; fail=1; }
rm -f "$tmp.err"
exit $fail
