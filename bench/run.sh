#!/usr/bin/env bash
# Builds qd-bench-sizing in a Release build directory and prints the adstack
# sizing table (docs/performance.md). Extra arguments go to the benchmark,
# e.g. `bench/run.sh --phases` or `bench/run.sh --sizes 1000,10000`.
# BUILD_DIR overrides the build directory (default: build-bench).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build "$build" --target qd-bench-sizing
"$build/bench/qd-bench-sizing" "$@"
