#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite twice: a normal build, then one
# with AddressSanitizer + UndefinedBehaviorSanitizer. Exit status is non-zero if any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PSIM_EXTRA_PKGS="libonnx-testdata ${PSIM_EXTRA_PKGS:-}"

bash tools/setup.sh
(cd build && ctest --output-on-failure -j"$(nproc)")

PSIM_BUILD_DIR=build-asan PSIM_CMAKE_ARGS="-DPSIM_SANITIZE=address,undefined -DPSIM_CUDA=OFF" \
    bash tools/setup.sh
(cd build-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j"$(nproc)" -LE slow)
