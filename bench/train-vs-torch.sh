#!/usr/bin/env bash
# Training speed against PyTorch (issue 17): `placesim train MODEL` on one CPU device (local:1:
# one pinned core, OpenBLAS on one thread) and bench/torch-train.py with torch.set_num_threads(1),
# the same model, data (fashion-mnist, standardised), batch, optimizer and cosine schedule, alternating RUNS times; each run's
# examples/s leaves out evaluation and placesim's first step (plan preparation). Prints a
# Markdown table of medians and the ratio placesim / PyTorch.
# Usage: bench/train-vs-torch.sh [RUNS] [MODEL:STEPS ...]   (default 3 mlp:600 cnn:40)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shift || true
specs=("${@:-mlp:600 cnn:40}")
[ $# -gt 0 ] || specs=(mlp:600 cnn:40)
P=./build/placesim
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || { echo "PyTorch is missing: bash bench/tv-setup.sh" >&2; exit 1; }
exs() { grep -o '"examples_per_s": *[0-9.e+]*' | tail -1 | cut -d: -f2 | tr -d ' '; }
med() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "| model | batch | optimizer | steps | placesim ex/s | PyTorch ex/s | placesim / PyTorch |"
echo "|---|---|---|---|---|---|---|"
for spec in "${specs[@]}"; do
    model="${spec%%:*}"; steps="${spec##*:}"
    for opt in sgd adam; do
        ps=(); pt=()
        for r in $(seq "$runs"); do
            ps+=("$($P train "$model" --steps "$steps" --optimizer "$opt" --json 2>/dev/null | exs)")
            pt+=("$("$py" bench/torch-train.py "$model" --steps "$steps" --optimizer "$opt" | exs)")
        done
        a=$(printf '%s\n' "${ps[@]}" | med); b=$(printf '%s\n' "${pt[@]}" | med)
        printf '| %s | 64 | %s | %s | %.0f | %.0f | %.3f |\n' "$model" "$opt" "$steps" "$a" "$b" \
            "$(echo "$a / $b" | bc -l)"
    done
done
