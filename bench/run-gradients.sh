#!/usr/bin/env bash
# Builds qd-bench-gradients in a Release build directory, runs the PyTorch
# part (bench/torch_gradients.py, Debian's python3-torch) and prints the
# gradient table of docs/performance.md: qd-cpu against hand-written scalar
# and vectorised reverse loops, ADOL-C, PyTorch and the interpreter.
# Extra arguments go to the benchmark, e.g. `bench/run-gradients.sh --reps 5`
# or `--only a`. BUILD_DIR overrides the build directory (default:
# build-bench); PYTHON the interpreter that has torch (default: Debian's
# /usr/bin/python3, which sees python3-torch; a pyenv python3 does not);
# TORCH=0 skips PyTorch.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
python="${PYTHON:-/usr/bin/python3}"
[ -x "$python" ] || python="python3"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# -Wno-error=restrict: GCC 12 at -O3 reports a false -Wrestrict inside
# std::string concatenation in runtimes/cpu/CpuBackend.cpp (GCC PR 105651).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS=-Wno-error=restrict "${launcher[@]}" >/dev/null
cmake --build "$build" --target qd-bench-gradients
torch_json="$(mktemp /tmp/qd-torch-XXXXXX.json)"
trap 'rm -f "$torch_json"' EXIT
if [ "${TORCH:-1}" = 0 ]; then
  echo '{"available": false, "reason": "skipped (TORCH=0)"}' >"$torch_json"
elif ! "$python" "$root/bench/torch_gradients.py" >"$torch_json"; then
  echo '{"available": false, "reason": "bench/torch_gradients.py failed"}' >"$torch_json"
fi
"$build/bench/qd-bench-gradients" --torch "$torch_json" "$@"
