#!/usr/bin/env bash
# Builds placesim with CUDA (here: CUDA 13, as on the lent GPU machines) and bundles what the GPU
# checks (bench/gpu-check.sh) need into dist-gpu/ (git-ignored): the CLI, the CUDA kernel and
# CUPTI tests, fill-weights, the shared libraries they load (from ldd, minus glibc and the
# CUDA/NVIDIA libraries, which the GPU machine has), the onnx-light models with their expected
# outputs, and the torchvision models of gpu-models/ without their weights (bench/gpu-models.py). The tree is about 95 MiB (OpenBLAS and
# ICU's data are most of it), so dist-gpu/ holds it as one xz tarball (about a third of that);
# the printed command unpacks it on the GPU machine first. Prints the one command to run there.
#
#   tools/gpu-bundle.sh [BUILD_DIR]      (default build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=dist-gpu
data=${PSIM_DATA:-../shared/data}
limit_mib=60

command -v /usr/local/cuda/bin/nvcc >/dev/null || { echo "gpu-bundle: no CUDA toolkit at /usr/local/cuda" >&2; exit 2; }
/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*' >&2
cmake -S . -B "$build" -DPSIM_CUDA=ON >/dev/null
make -C "$build" -j"$(nproc)" placesim_cli test-kernels-cuda test-profiler-cuda fill-weights >/dev/null

bins=("$build/placesim" "$build/test-kernels-cuda" "$build/test-profiler-cuda" "$build/fill-weights")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
final=$out
out=$stage/dist-gpu
mkdir -p "$out/lib" "$out/data"
for b in "${bins[@]}"; do
    cp "$b" "$out/"
    strip --strip-unneeded "$out/$(basename "$b")" 2>/dev/null || true
done
# Libraries: everything ldd resolves except glibc's own and CUDA/NVIDIA's.
skip='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[^ ]*|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libcudnn[^ ]*|libcupti|libnvidia[^ ]*|libnvrtc[^ ]*|libnvJitLink)\.so'
for b in "${bins[@]}"; do
    ldd "$b" | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r name path; do
    if [[ $name =~ $skip ]]; then
        continue
    fi
    cp -L "$path" "$out/lib/$name"
done
for f in "$data"/onnx-light/*.onnx "$data"/onnx-light/*_output_0.pb; do
    cp "$f" "$out/data/"
done
# Torchvision models without their weights (bench/gpu-models.py): fill-weights recreates them.
models=${PSIM_GPU_MODELS:-gpu-models}
if ls "$models"/*.fill >/dev/null 2>&1; then
    mkdir -p "$out/models"
    cp "$models"/*.onnx "$models"/*.fill "$out/models/"
fi

tree_kib=$(du -sk "$out" | cut -f1)
rm -rf "$final"
mkdir -p "$final"
tar -C "$stage" -cf - dist-gpu | xz -6 -T0 > "$final/bundle.tar.xz"
size_kib=$(du -sk "$final" | cut -f1)
if (( size_kib > limit_mib * 1024 )); then
    echo "gpu-bundle: $final is $((size_kib / 1024)) MiB, above the $limit_mib MiB limit" >&2
    exit 1
fi
echo "gpu-bundle: $final/bundle.tar.xz: $(ls "$out/lib" | wc -l) libraries, $((tree_kib / 1024)) MiB unpacked, $((size_kib / 1024)) MiB packed" >&2
# What the GPU machine runs from the repository root (its CUDA 13 runtime, cuBLAS and cuDNN
# libraries come from its own installation).
cmd='bash bench/gpu-check.sh "$OUT"'
echo "$cmd"
