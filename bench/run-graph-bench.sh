#!/bin/bash
# Graph IR benchmark: builds bench-graph and runs it (1,000,000-node generated DAG: build and
# topological sort, median of 5 forked runs, peak RSS per node; then the import time of every
# shared model). Prints the machine first so that figures can be pasted into docs/perf.md.
# Usage: bench/run-graph-bench.sh [BUILD_DIR] [bench-graph options...]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
export PSIM_DATA=${PSIM_DATA:-$root/../shared/data}
if [ ! -x "$build/bench-graph" ]; then
    cmake -S "$root" -B "$build" -DPSIM_CUDA=OFF >/dev/null
    make -C "$build" -j2 bench-graph >/dev/null
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/run-graph-bench.sh $*"
"$build/bench-graph" "$@"
