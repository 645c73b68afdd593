#!/usr/bin/env bash
# The main job, from a fresh machine: installs dependencies, builds qd, then
# parses, verifies and optimises the example kernel and prints the result.
#   scripts/run-example.sh [kernel.qd] [pipeline]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh >/dev/null
kernel=${1:-examples/kernels/sin_loop.qd}
pipeline=${2:-fold,simplify,dce}
echo "== qd-opt --passes=$pipeline $kernel"
"${BUILD_DIR:-build}/tools/qd-opt/qd-opt" --passes="$pipeline" "$kernel"
