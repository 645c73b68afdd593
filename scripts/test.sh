#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs the Debian packages qd
# needs, builds, and runs every test (GoogleTest, lit/FileCheck, the
# install-and-consume test) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh "$@"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
