#!/usr/bin/env bash
# A long fuzzing campaign, the one to run on a schedule (CI's fuzz step runs
# each target for only 20 s). Builds the targets like scripts/fuzz.sh, runs
# every target for SECONDS (default 600) from its seeds, the regression
# inputs and the repository's corpus, JOBS targets at a time (default: the
# number of cores), then merges what the run found into fuzz/corpus/<target>
# (libFuzzer's -merge=1: only inputs that add coverage are kept), so the
# corpus grows from campaign to campaign; commit it. Fails on any crash,
# sanitizer report, leak, timeout or out-of-memory (the input is left in
# build-fuzz/artifacts/; add it to fuzz/regressions/<target>/ with the fix).
# Prints executions, coverage and corpus size per target (record them in
# docs/testing.md, "Fuzzing").
#   scripts/fuzz-campaign.sh [SECONDS] [TARGET...]
#   JOBS        targets run at once (default: nproc)
#   BUILD_DIR   build directory (default: build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-600}
[ $# -gt 0 ] && shift
export BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
ALL_TARGETS=(qd-fuzz-parser qd-fuzz-sizing qd-fuzz-sizeexpr qd-fuzz-reverse-ad)
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")

# Build the targets and their seed corpora (a 1-second run of fuzz.sh).
./scripts/fuzz.sh 1 "${TARGETS[@]}" >/dev/null

run_one() {
  local t=$1 seed dict=()
  case $t in
  qd-fuzz-sizeexpr) seed=$BUILD_DIR/seeds/sizeexpr ;;
  *) seed=$BUILD_DIR/seeds/text dict=(-dict=fuzz/qd.dict) ;;
  esac
  local found=$BUILD_DIR/campaign/$t kept=fuzz/corpus/$t log=$BUILD_DIR/logs/campaign-$t.log
  mkdir -p "$found" "$kept"
  local extra=()
  [ -d "fuzz/regressions/$t" ] && extra+=("fuzz/regressions/$t")
  local rc=0
  timeout $((SECONDS_PER_TARGET + 600)) "$BUILD_DIR/fuzz/$t" "$found" "$kept" "$seed" "${extra[@]}" \
    "${dict[@]}" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$BUILD_DIR/artifacts/$t-" >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer)|runtime error:' "$log"; then
    echo "--- $t FAILED (exit $rc); the end of $log:"
    tail -n 40 "$log"
    return 1
  fi
  # Keep what adds coverage to the repository's corpus.
  "$BUILD_DIR/fuzz/$t" -merge=1 "$kept" "$found" >>"$log" 2>&1
  local execs cov
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(sed -nE 's/.* cov: ([0-9]+) .*/\1/p' "$log" | tail -1)
  printf '%-20s %10s execs in %ss  cov %6s  corpus %s files, %s\n' "$t" "${execs:-?}" \
    "$SECONDS_PER_TARGET" "${cov:-?}" "$(find "$kept" -type f | wc -l)" "$(du -sh "$kept" | cut -f1)"
}

export -f run_one
export SECONDS_PER_TARGET
status=0
printf '%s\n' "${TARGETS[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one "$@"' _ {} || status=$?
if [ "$status" -ne 0 ]; then
  echo "fuzz-campaign: FAILED (inputs in $BUILD_DIR/artifacts/)"
  exit 1
fi
echo "fuzz-campaign: all ${#TARGETS[@]} targets ran clean; new inputs merged into fuzz/corpus/"
