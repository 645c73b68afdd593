#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (GCC, -DQD_SANITIZE=ON) in build-asan/. UBSan is fatal (the build passes
# -fno-sanitize-recover=undefined and UBSAN_OPTIONS halts on the first
# report), ASan's leak detection is on, and both abort so that a report from
# a tool run under lit's `not` is a crash, never an expected failure.
#   BUILD_DIR   build directory (default: build-asan)
#   extra arguments are passed to CMake's configure step
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export BUILD_DIR=${BUILD_DIR:-build-asan}
./scripts/build.sh -DQD_SANITIZE=ON -DQD_BUILD_BENCH=OFF "$@"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
export LSAN_OPTIONS=${LSAN_OPTIONS:-}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
