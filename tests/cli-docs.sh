#!/bin/bash
# The architecture document lives in the repository and stays current: README points to
# docs/design.md (not outside the checkout), design.md names every source folder of the tree,
# and every folder and file it names exists.
set -u
fail() { echo "FAIL: $*"; exit 1; }
cd "$PSIM_SRC" || fail "no source tree"
design=docs/design.md
[ -f "$design" ] || fail "$design is missing"
grep -q '\.\./shared/DESIGN' README.md && fail "README still sends readers outside the repository"
sed -n '/^## Layout/,/^## /p' README.md | grep -q 'docs/design.md' || fail "README's Layout does not point to $design"
# Every folder holding C sources (and the other top-level folders) is described.
for d in $(find . -name '*.c' -not -path './build*' -not -path './.git/*' -printf '%h\n' | sed 's|^\./||' | sort -u) \
         include tests bench docs; do
    case "$d" in tests/*|bench/*|kernels/*/*|profiler/*/*|devices/*) continue ;; esac
    grep -q "\`$d/" "$design" || fail "$design does not describe folder $d/"
done
# Every path it names in backquotes exists (folders as dir/, files as dir/file.ext).
for p in $(grep -o '`[a-z][a-z/._-]*/[a-z._-]*`' "$design" | tr -d '`' | sort -u); do
    case "$p" in ../*) continue ;; esac
    [ -e "$p" ] || fail "$design names $p, which does not exist"
done
# The files a folder row lists (name.c) exist in that folder.
while IFS= read -r row; do
    d=$(echo "$row" | grep -o '^| `[a-z/]*/`' | sed 's/^| `//; s/`$//')
    [ -n "$d" ] || continue
    for f in $(echo "$row" | grep -oE '\b[a-z][a-z0-9-]*\.c\b' | sort -u); do
        [ -e "$d$f" ] || [ -n "$(find "$d" -name "$f" -print -quit)" ] || fail "$design: $d has no $f"
    done
done < "$design"
# Device classes (docs/exec.md): no module outside devices/ asks which kind a device is, and
# kernels/ includes nothing from the executor.
branches=$(grep -rnE 'cmp\([^;]*"(CPU|GPU)"|"(CPU|GPU)"[^;]*cmp\(' \
               --include='*.c' --include='*.h' cluster cost exec formats graph placer profiler sim tools traces)
[ -z "$branches" ] || fail "a device-kind branch outside devices/: $branches"
incl=$(grep -rnE '#include *"(placesim/exec\.h|exec/)' kernels)
[ -z "$incl" ] || fail "kernels/ includes the executor: $incl"
for d in devices/*/; do
    name=$(basename "$d")
    grep -qE "^ *X\($name\)" devices/registry.c || fail "devices/$name/ is not registered in devices/registry.c"
done
echo ok
