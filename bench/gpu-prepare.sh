#!/usr/bin/env bash
# Everything the GPU checks need, made here (no GPU needed): exports the torchvision models with
# random weights (bench/export-torchvision.py, into tv-models/), strips their weights into fill
# manifests (bench/gpu-models.py, into gpu-models/: a few MB instead of ~1 GB, under the 64 MiB a
# lent GPU machine receives), builds placesim with CUDA and bundles it (tools/gpu-bundle.sh).
# Then, on the GPU machine from the repository root: bash bench/gpu-check.sh OUT; and back here:
# /usr/bin/python3 bench/gpu-compare.py OUT (the table of docs/perf.md, "GPU").
#
#   bash bench/gpu-prepare.sh [MODEL...]     (default: the 13 below)
set -euo pipefail
cd "$(dirname "$0")/.."
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    # issue 19's twelve, and a vision transformer
    models=(resnet18 mobilenet_v2 squeezenet1_1 googlenet shufflenet_v2_x1_0 densenet121
            efficientnet_b0 mnasnet1_0 convnext_tiny regnet_y_400mf resnext50_32x4d alexnet vit_b_16)
fi
bash bench/tv-setup.sh
bash tools/apt-install.sh gpu-prepare python3-onnx
/usr/bin/python3 bench/export-torchvision.py --skip-existing "${models[@]}"
rm -rf gpu-models
/usr/bin/python3 bench/gpu-models.py tv-models gpu-models "${models[@]}"
bash tools/gpu-bundle.sh
