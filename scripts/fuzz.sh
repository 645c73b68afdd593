#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang-19, -fsanitize=fuzzer,address,
# undefined, asserts on) in build-fuzz/ and runs each for SECONDS (default 30)
# from its seed corpus. Fails on any crash, sanitizer report, leak, timeout
# or out-of-memory, leaving the input in build-fuzz/artifacts/. Prints the
# executions of every target at the end. See docs/testing.md, "Fuzzing".
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   BUILD_DIR   build directory (default: build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-30}
[ $# -gt 0 ] && shift
BUILD_DIR=${BUILD_DIR:-build-fuzz}
ALL_TARGETS=(qd-fuzz-parser qd-fuzz-sizing qd-fuzz-sizeexpr qd-fuzz-reverse-ad)
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")

./scripts/install-deps.sh
# -O1 -g without NDEBUG: the library's assertions are checks the fuzzers hit.
CC=clang-19 CXX=clang++-19 cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DQD_BUILD_FUZZERS=ON -DQD_BUILD_TESTS=OFF -DQD_BUILD_BENCH=OFF -DQD_WERROR=OFF >/dev/null
cmake --build "$BUILD_DIR" --target qd-fuzzers

# Seed corpora, regenerated every run: text chunks of every .qd file, and
# serialised SizeExprs. Inputs the fuzzers find accumulate in corpus/<target>.
seeds=$BUILD_DIR/seeds
rm -rf "$seeds"
python3 fuzz/make-corpus.py "$seeds/text"
mkdir -p "$seeds/sizeexpr"
mapfile -t qd_files < <(find test examples -name '*.qd' | sort)
"$BUILD_DIR/fuzz/qd-fuzz-sizeexpr-seeds" "$seeds/sizeexpr" "${qd_files[@]}"

export ASAN_OPTIONS=detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
mkdir -p "$BUILD_DIR/artifacts" "$BUILD_DIR/logs"
summary=()
failed=()
for t in "${TARGETS[@]}"; do
  case $t in
  qd-fuzz-sizeexpr) seed=$seeds/sizeexpr dict=() ;;
  *) seed=$seeds/text dict=(-dict=fuzz/qd.dict) ;;
  esac
  # Inputs that once failed (fuzz/regressions/<target>/) run first, every time.
  regressions=()
  [ -d "fuzz/regressions/$t" ] && regressions=("fuzz/regressions/$t")
  # The corpus long campaigns keep (scripts/fuzz-campaign.sh), read only.
  [ -d "fuzz/corpus/$t" ] && regressions+=("fuzz/corpus/$t")
  corpus=$BUILD_DIR/corpus/$t
  log=$BUILD_DIR/logs/$t.log
  mkdir -p "$corpus"
  echo "=== $t: ${SECONDS_PER_TARGET}s (log: $log)"
  rc=0
  # -timeout: one input running longer is a hang (a failure); the outer
  # timeout only guards against libFuzzer itself not stopping.
  timeout $((SECONDS_PER_TARGET + 300)) "$BUILD_DIR/fuzz/$t" "$corpus" "$seed" "${regressions[@]}" "${dict[@]}" \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$BUILD_DIR/artifacts/$t-" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # grep's status 1 (no DONE line: libFuzzer stopped early, caught below via
  # rc) is expected; 2 (an unreadable log) still fails the script.
  done_line=$({ grep -E '^#[0-9]+[[:space:]]+DONE' "$log" || [ $? -eq 1 ]; } | tail -1)
  cov=$(sed -nE 's/.* cov: ([0-9]+) .*/\1/p' <<<"$done_line")
  corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9a-zA-Z]+) .*/\1/p' <<<"$done_line")
  rate=$(sed -nE 's/.* exec\/s: ([0-9]+) .*/\1/p' <<<"$done_line")
  if [ "$rc" -ne 0 ] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer)|runtime error:' "$log"; then
    failed+=("$t")
    echo "--- $t FAILED (exit $rc); the end of its log:"
    tail -n 60 "$log"
    for a in "$BUILD_DIR/artifacts/$t-"*; do
      [ -e "$a" ] && echo "artifact: $a"
    done
  fi
  summary+=("$(printf '%-20s %10s execs %8s exec/s  cov %6s  corpus %s  %s' "$t" "${execs:-?}" \
    "${rate:-?}" "${cov:-?}" "${corp:-?}" "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED ($rc)")")")
done

echo "=== fuzz summary (${SECONDS_PER_TARGET}s per target)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $BUILD_DIR/artifacts/; reproduce with $BUILD_DIR/fuzz/<target> <input>)"
  exit 1
fi
echo "fuzz: all ${#TARGETS[@]} targets ran clean"
