# Shared by tests/cli-*.sh that need Debian's Python modules (source it after `set -euo
# pipefail`): PSIM, SRC, PY, fail, a temporary folder $tmp removed on exit, and
# need_python MODULES HINT, which skips the test (exit 77) when /usr/bin/python3 cannot import
# MODULES (comma-separated) as real modules: a bare folder of that name (a namespace package, as
# libonnx-testdata leaves /usr/lib/python3/dist-packages/onnx without python3-onnx) is not one.
PSIM="${PSIM:-./build/placesim}"
SRC="${PSIM_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
PY=/usr/bin/python3
fail() { echo "FAIL: $*"; exit 1; }
need_python() {
    if ! "$PY" -c "import importlib, sys
for m in '$1'.replace(' ', '').split(','):
    if getattr(importlib.import_module(m), '__file__', None) is None:
        sys.exit(1)" 2> /dev/null; then
        echo "SKIP: $PY has no $1 ($2)"
        exit 77
    fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
