#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite: a normal build; a Release
# build (what users build first); AddressSanitizer + UndefinedBehaviorSanitizer with leak
# detection on; the executor's tests under ThreadSanitizer; and the libFuzzer build with Debian's
# clang (built, and each fuzzer run over its seed corpus). Exit status is non-zero if any step
# fails. PSIM_TEST_QUICK=1 runs the normal build's suite only.
set -euo pipefail
cd "$(dirname "$0")/.."
export PSIM_EXTRA_PKGS="libonnx-testdata clang libclang-rt-14-dev ${PSIM_EXTRA_PKGS:-}"
NPROC="$(nproc)"

step() { echo "== test.sh: $*" >&2; }

step "normal build (RelWithDebInfo)"
bash tools/setup.sh
(cd build && ctest --output-on-failure -j"$NPROC")
[ "${PSIM_TEST_QUICK:-0}" = 1 ] && exit 0

step "Release build"
PSIM_BUILD_DIR=build-release PSIM_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Release -DPSIM_CUDA=OFF" \
    bash tools/setup.sh
(cd build-release && ctest --output-on-failure -j"$NPROC")

step "AddressSanitizer + UndefinedBehaviorSanitizer, leak detection on"
PSIM_BUILD_DIR=build-asan PSIM_CMAKE_ARGS="-DPSIM_SANITIZE=address,undefined -DPSIM_CUDA=OFF" \
    bash tools/setup.sh
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$NPROC")

step "ThreadSanitizer: the executor's tests"
PSIM_BUILD_DIR=build-tsan PSIM_CMAKE_ARGS="-DPSIM_SANITIZE=thread -DPSIM_CUDA=OFF" \
    bash tools/setup.sh
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1" ctest --output-on-failure -j"$NPROC" -R '^test-exec')

step "libFuzzer build (clang), each fuzzer over its seed corpus"
PSIM_BUILD_DIR=build-fuzz PSIM_CMAKE_ARGS="-DPSIM_FUZZ=ON -DPSIM_CUDA=OFF" CC=clang CXX=clang++ \
    bash tools/setup.sh
(cd build-fuzz && ctest --output-on-failure -j"$NPROC" -R 'corpus$')
step "all passed"
