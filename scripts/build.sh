#!/usr/bin/env bash
# Configures and builds qd with Ninja (and ccache when present).
#   BUILD_DIR   build directory (default: build)
#   BUILD_TYPE  CMake build type (default: RelWithDebInfo)
#   extra arguments are passed to CMake's configure step
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@"
cmake --build "$BUILD_DIR"
