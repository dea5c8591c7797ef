#!/usr/bin/env bash
# Installs what is missing (Debian packages, as root), then configures and builds placesim in
# ./build. Safe to run again: it only installs and rebuilds what is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="build-essential cmake pkg-config libglib2.0-dev libjson-glib-dev libyajl-dev libigraph-dev
libopenblas-dev libsleef-dev libdnnl-dev libsqlite3-dev sqlite3 libprotobuf-c-dev protobuf-c-compiler gnuplot-nox
libopenmpi-dev openmpi-bin dataset-fashion-mnist ${PSIM_EXTRA_PKGS:-}"
bash tools/apt-install.sh setup $PKGS

BUILD="${PSIM_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${PSIM_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
echo "setup: built $BUILD/placesim" >&2
