#!/usr/bin/env bash
# Long property-based campaign: runs every RapidCheck property of unittests/
# (QD_PROPERTY and RC_GTEST_PROP, found in the sources) with N cases each,
# one property at a time, and prints cases, wall time and result per property.
#
#   scripts/property-campaign.sh N [REGEX]
#
#   N            cases per property (RC_PARAMS max_success)
#   REGEX        only properties whose Suite.Name matches (grep -E)
#   BUILD_DIR    build directory with the unit tests (default: build); the
#                test executables are (re)built first
#   RC_PARAMS    more RapidCheck parameters (e.g. seed=42 or max_size=100);
#                max_success is set from N
#   QD_COUNTEREXAMPLE_DIR
#                where a failing generated program is written as
#                <Suite>.<Name>.qd (default: $BUILD_DIR/counterexamples)
#
# Logs: $BUILD_DIR/campaign/<Suite>.<Name>.log (with RapidCheck's seed and
# the shrunk counterexample). Exit status 1 when a property fails.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 N [REGEX]" >&2
  exit 2
fi
N=$1
FILTER=${2:-.}
BUILD_DIR=${BUILD_DIR:-build}
export QD_COUNTEREXAMPLE_DIR=${QD_COUNTEREXAMPLE_DIR:-$BUILD_DIR/counterexamples}
LOGS=$BUILD_DIR/campaign
mkdir -p "$LOGS"

mapfile -t props < <(grep -hoE '(QD_PROPERTY|RC_GTEST_PROP)\([A-Za-z0-9_]+, [A-Za-z0-9_]+' unittests/*.cpp |
  sed -E 's/.*\(([A-Za-z0-9_]+), ([A-Za-z0-9_]+)/\1.\2/' | grep -E -- "$FILTER" | sort -u)
if [[ ${#props[@]} -eq 0 ]]; then
  echo "no property matches '$FILTER'" >&2
  exit 2
fi
mapfile -t suites < <(printf '%s\n' "${props[@]}" | cut -d. -f1 | sort -u)
cmake --build "$BUILD_DIR" --target "${suites[@]}" >/dev/null || {
  echo "build failed" >&2
  exit 1
}

failed=0
total_start=$(date +%s.%N)
printf '%-62s %8s %9s  %s\n' property cases seconds result
for prop in "${props[@]}"; do
  suite=${prop%%.*}
  log=$LOGS/$prop.log
  start=$(date +%s.%N)
  RC_PARAMS="max_success=$N${RC_PARAMS:+ $RC_PARAMS}" \
    "$BUILD_DIR/unittests/$suite" --gtest_filter="$prop" --gtest_color=no >"$log" 2>&1
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  # RC_GTEST_PROP prints "OK, passed N tests" only with classifications.
  cases=$(grep -oE 'OK, passed [0-9]+ tests' "$log" | grep -oE '[0-9]+' | tail -1)
  if [[ $rc -eq 0 ]] && grep -q '^\[       OK \]' "$log"; then
    result=ok
    cases=${cases:-$N}
  else
    failed=1
    cases=$(grep -oE 'Falsifiable after [0-9]+ tests' "$log" | grep -oE '[0-9]+' | tail -1)
    result="FAILED (log: $log"
    [[ -f $QD_COUNTEREXAMPLE_DIR/$prop.qd ]] && result+=", counterexample: $QD_COUNTEREXAMPLE_DIR/$prop.qd"
    result+=")"
  fi
  printf '%-62s %8s %9.1f  %s\n' "$prop" "${cases:-?}" "$secs" "$result"
done
printf 'total: %.0f s\n' "$(echo "$(date +%s.%N) - $total_start" | bc)"
exit $failed
