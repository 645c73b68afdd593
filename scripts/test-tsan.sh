#!/usr/bin/env bash
# The tests of qd's threading contract (docs/runtime.md, "Threads") under
# ThreadSanitizer: clang-19 with -DQD_SANITIZE_THREAD=ON in build-tsan/.
# Builds only what those tests need (the unit tests of the objects threads
# may share) and fails on the first race report.
#   BUILD_DIR   build directory (default: build-tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export BUILD_DIR=${BUILD_DIR:-build-tsan}
tests=(ConcurrencyTest InterpreterTest CpuBackendTest RunawayLaunchTest)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DQD_SANITIZE_THREAD=ON -DQD_BUILD_BENCH=OFF "$@"
cmake --build "$BUILD_DIR" --target "${tests[@]}"
export TSAN_OPTIONS=halt_on_error=1:abort_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}
for t in "${tests[@]}"; do
  echo "test-tsan: $t"
  "$BUILD_DIR/unittests/$t" --gtest_brief=1
done
