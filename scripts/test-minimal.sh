#!/usr/bin/env bash
# qd without the optional backends: configures with QD_ENABLE_CUDA,
# QD_ENABLE_HIP and QD_ENABLE_VULKAN off (no SPIRV-Tools, no Vulkan
# headers), builds everything that is left and runs its tests: the unit
# tests, the lit tests (those needing a missing backend report
# UNSUPPORTED) and the install-and-consume test. Most objects come from
# ccache (the same sources and flags as the full build).
#   BUILD_DIR       build directory (default: build-min)
#   CTEST_EXCLUDE   tests left out (default: the NVPTX and AMDGPU code
#                   generation corpora, 17 minutes on two cores: the same
#                   code, untouched by the options, as the full build's)
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-min}
./scripts/build.sh -DQD_ENABLE_CUDA=OFF -DQD_ENABLE_HIP=OFF -DQD_ENABLE_VULKAN=OFF "$@"
# The backends the build registered: interp and cpu only.
backends=$("$BUILD_DIR/tools/qd-run/qd-run" --list-backends | grep -E '^  [a-z]+:' | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')
if [ "$backends" != "interp cpu " ]; then
  echo "test-minimal: expected the backends 'interp cpu', got '$backends'" >&2
  exit 1
fi
exclude=${CTEST_EXCLUDE-CorpusKernelsCompileTo(CodeObjects|PtxAndAssemble)}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" ${exclude:+-E "$exclude"}
