#!/usr/bin/env bash
# qd against the hand-written vectorised loop on a noisy machine: runs
# `qd-bench-gradients --quick --only W --reps 3 --threads T` RUNS times and
# prints, per side, the four smallest gradient times and the ratio of the
# two minima (a single run's ratio moves by +-15% on a shared 2-core VM;
# docs/performance.md, "CPU gradients").
#   bench/min-series.sh [WORKLOAD=b] [THREADS=1] [RUNS=10]
#   QD_BENCH_GRADIENTS   the executable (default: build/bench/qd-bench-gradients)
set -euo pipefail
workload=${1:-b}
threads=${2:-1}
runs=${3:-10}
bench=${QD_BENCH_GRADIENTS:-$(dirname "$0")/../build/bench/qd-bench-gradients}
rows=""
for run in $(seq "$runs"); do
  # A run that fails (or a benchmark that is not built) stops the series.
  if ! out=$("$bench" --quick --only "$workload" --reps 3 --threads "$threads" 2>&1); then
    echo "min-series: run $run of $bench failed:" >&2
    echo "$out" | tail -5 >&2
    exit 1
  fi
  got=$(grep -E "^  (qd-cpu|hand-written vectorised)" <<<"$out" | head -2)
  if ! grep -q "qd-cpu" <<<"$got" || ! grep -q "hand-written" <<<"$got"; then
    echo "min-series: run $run of $bench printed no qd-cpu or hand-written timing" >&2
    exit 1
  fi
  rows+="$got"$'\n'
done
python3 -c '
import re, sys
times = {"qd": [], "hw": []}
for line in filter(str.strip, sys.stdin):
    cols = re.split(r"\s{2,}", line.strip())
    times["qd" if line.lstrip().startswith("qd-cpu") else "hw"].append(float(cols[3]))
q, h = sorted(times["qd"]), sorted(times["hw"])
print(f"qd {q[:4]} hand-written {h[:4]} ratio of minima {q[0] / h[0]:.3f}")
' <<<"$rows"
