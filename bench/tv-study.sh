#!/usr/bin/env bash
# Issue 14's held-out study: exports the torchvision architectures of bench/export-torchvision.py
# (random weights; only those missing from TV) and runs `placesim study` on local:2 over them and
# the six ../shared/data/onnx-light models with single, round-robin, heft, greedy and search.
# Nothing of the cost model is fitted to these models (docs/validation.md, "Held-out set:
# torchvision exports"). Long: run it on a quiet machine. Prints where the report is.
#   bench/tv-study.sh [OUT_DIR] [-- more 'placesim study' options]   (OUT_DIR default tv-study)
# Env: PSIM (the CLI, default build/placesim), PSIM_DATA (default ../shared/data), TV (exports,
# default tv-models), MODELS (architectures, default the exporter's list), LIGHT (0: leave out
# the onnx-light models), CLUSTER (default local:2), ALGOS (default
# single,round-robin,heft,greedy,search), PYTHON (default /usr/bin/python3, with Debian's
# python3-torchvision: bench/tv-setup.sh installs it).
# Graphs that share a name get distinct rows: onnx-light's resnet50 comes first and keeps
# "resnet50", torchvision's is "resnet50-2" (see 'placesim study').
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
PSIM=${PSIM:-build/placesim}
DATA=${PSIM_DATA:-../shared/data}
TV=${TV:-tv-models}
CLUSTER=${CLUSTER:-local:2}
ALGOS=${ALGOS:-single,round-robin,heft,greedy,search}
PYTHON=${PYTHON:-/usr/bin/python3}
LIGHT=${LIGHT:-1}
OUT=tv-study
if [ $# -gt 0 ] && [ "$1" != "--" ]; then OUT=$1; shift; fi
[ "${1:-}" != "--" ] || shift
if [ ! -x "$PSIM" ]; then
    echo "tv-study: $PSIM: not built (cmake -S . -B build && cmake --build build)" >&2
    exit 2
fi
if ! "$PYTHON" -c "import torch, torchvision" 2> /dev/null; then
    echo "tv-study: $PYTHON: no torch or torchvision (run bench/tv-setup.sh)" >&2
    exit 2
fi
read -r -a models <<< "${MODELS:-$("$PYTHON" bench/export-torchvision.py --list | tr '\n' ' ')}"
"$PYTHON" bench/export-torchvision.py --out "$TV" --skip-existing "${models[@]}"
graphs=()
if [ "$LIGHT" != 0 ]; then
    for m in bvlc_alexnet inception_v1 resnet50 squeezenet vgg19 zfnet512; do
        graphs+=("$DATA/onnx-light/$m.onnx")
    done
fi
for m in "${models[@]}"; do graphs+=("$TV/$m.onnx"); done
mkdir -p "$OUT"
cmd=("$PSIM" study "${graphs[@]}" --cluster "$CLUSTER" --algos "$ALGOS" --out "$OUT" "$@")
{
    echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "commit:  $(git rev-parse --short HEAD 2> /dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "command: ${cmd[*]}"
} | tee "$OUT/tv-study.txt"
start=$(date +%s)
set +e
"${cmd[@]}" 2>&1 | tee -a "$OUT/tv-study.txt"
rc=${PIPESTATUS[0]}
set -e
echo "tv-study: $(( $(date +%s) - start )) s, exit $rc; report: $OUT/report.md (log: $OUT/tv-study.txt)" | tee -a "$OUT/tv-study.txt"
exit "$rc"
