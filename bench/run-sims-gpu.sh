#!/usr/bin/env bash
# The simulations on the GPU (docs/performance.md, "Simulations"), run ON THE
# GPU MACHINE from the repository root, with a prebuilt qd-bench-sims on PATH
# or in QD_BENCH_SIMS (built on the build machine and brought over with
# ../shared/device/pack.sh DIR build/bench/qd-bench-sims, then
# eval "$(bash DIR/unpack.sh DIR)" here). In order, each step under a time
# limit, its output and log in OUT_DIR:
#   1. bench/gpu/sims_peers.cu, hand-written CUDA for mass_spring and mpm:
#      compiled with nvcc for the GPU's architecture (nvidia-smi's
#      compute_cap; sm_90 when unknown) and run. It checks its gradients
#      against its host reference and, at the small size, finite
#      differences: sims_peers.log has PASS or FAIL per case.
#   2. bench/gpu/sims_framework_peers.py for JAX, then for PyTorch eager on
#      CUDA, each in its own process. Their small-size losses and gradients
#      are checked against the values recorded on the build machine (jax.log,
#      torch.log: "reference ... PASS" or "FAIL").
#   3. qd-bench-sims --peers merged.json, once per qd backend of BACKENDS
#      (table-cuda.txt, table-vulkan.txt): qd's times per step, adstack heap,
#      tape copies, data, first-launch compile time, the peers' times, the
#      ratios qd/cuda, qd/jax, qd/torch, and each peer's loss and gradient
#      checked against qd's.
#   4. CPU=1: PyTorch eager on the CPU and qd-bench-sims --backends cpu at the
#      small and large sizes (table-cpu.txt).
# table.txt gathers the tables. A peer or backend that cannot run (no nvcc,
# no JAX, no Vulkan driver, ...) reads n/a with the reason; a step that runs
# past its limit is cut (its log says so) and the others still run. The exit
# status is 0 when every step ran and every check passed; the summary at
# the end names the steps that did not.
# Environment:
#   STEPS=32 SIZES=small,gpu ONLY=mass_spring,mpm,wave,smoke,billiards,newton
#   REPS=10 WARMUP=2   timed runs of every implementation, after warm-up
#   BACKENDS=cuda,vulkan  qd's backends, one qd-bench-sims run each
#   ASYNC=1            qd's launches queued (LaunchOptions::async); 0: each
#                      launch waits for its kernels
#   CPU=0              1: step 4
#   CUDA_PEERS=0 JAX=0 TORCH=0   skip those peers
#   PEERS_FROM=DIR     take the peers' JSON (sims_peers.json, jax.json,
#                      torch.json, torch_cpu.json) from an earlier run's
#                      OUT_DIR instead of steps 1 and 2 (e.g. BACKENDS=vulkan
#                      PEERS_FROM=... after a run that a time limit cut)
#   DEVICE=0           the GPU (CUDA ordinal; when set, the python peers run
#                      with CUDA_VISIBLE_DEVICES=DEVICE)
#   OUT_DIR=DIR        where everything goes (default: a new
#                      /tmp/qd-sims-gpu-XXXXXX)
#   QD_BENCH_SIMS=FILE the qd-bench-sims executable (default: on PATH, else
#                      build-rel/bench or build/bench); NVCC, PYTHON likewise
#   VK_DRIVER_FILES=FILE  the Vulkan loader's driver manifest (as in
#                      bench/run-gpu.sh: /usr/local/nvidia/share/vulkan/
#                      icd.d/nvidia_icd.json where the loader finds none)
# How long it takes on an H200: not yet measured. Each step is capped (nvcc
# 300 s, sims_peers 90, JAX 180, PyTorch 120, qd-bench-sims 180 per
# backend), and every step's output is in OUT_DIR as soon as it ends, so a
# run cut by an outer limit keeps what it finished (see PEERS_FROM).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
steps="${STEPS:-32}"
sizes="${SIZES:-small,gpu}"
only="${ONLY:-mass_spring,mpm,wave,smoke,billiards,newton}"
reps="${REPS:-10}"
warmup="${WARMUP:-2}"
python="${PYTHON:-python3}"
note_prefix=run-sims-gpu
# shellcheck source=bench/gpu-lib.sh
. "$root/bench/gpu-lib.sh"
gpu_setup qd-sims-gpu
failed=()

bench="$(find_bench qd-bench-sims "${QD_BENCH_SIMS:-}" "$root")"
if [ -z "$bench" ]; then
  missing_bench qd-bench-sims
  exit 1
fi
describe_machine "$device"
note "qd-bench-sims: $bench; results in $out"

# Runs a step: the status of `timeout LIMIT COMMAND...` with stdout into
# OUTPUT and stderr into LOG, noting on the terminal (fd 3) a cut or a failure.
exec 3>&2
step() { # NAME LIMIT OUTPUT LOG COMMAND...
  local name=$1 limit=$2 output=$3 log=$4 t0=$SECONDS status
  shift 4
  timeout "$limit" "$@" >"$output" 2>"$log"
  status=$?
  if [ "$status" = 124 ]; then
    note "$name: cut after $limit s (see $log)" 2>&3
  elif [ "$status" != 0 ]; then
    note "$name: exit status $status (see $log)" 2>&3
  fi
  [ "$status" = 0 ] || failed+=("$name ($status)")
  note "$name took $((SECONDS - t0)) s" 2>&3
  return "$status"
}

# 1. Hand-written CUDA.
cuda_json="$out/sims_peers.json"
if [ -n "${PEERS_FROM:-}" ]; then
  note "the peers' JSON from $PEERS_FROM (steps 1 and 2 skipped)"
  for f in sims_peers jax torch torch_cpu; do
    [ -f "$PEERS_FROM/$f.json" ] && cp "$PEERS_FROM/$f.json" "$out/$f.json"
  done
  [ -f "$cuda_json" ] || unavailable "$cuda_json" sims_peers.cu "not in $PEERS_FROM" '["cuda"]'
elif [ "${CUDA_PEERS:-1}" = 0 ]; then
  unavailable "$cuda_json" sims_peers.cu "skipped (CUDA_PEERS=0)" '["cuda"]'
elif ! compile_peer sims_peers; then
  failed+=("nvcc")
  unavailable "$cuda_json" sims_peers.cu "nvcc failed (see $out/nvcc-sims_peers.log)" '["cuda"]'
else
  note "running the hand-written CUDA simulations"
  step sims_peers 90 "$cuda_json" "$out/sims_peers.log" "$out/sims_peers" --sizes "$sizes" \
    --steps "$steps" --reps "$((reps < 20 ? 20 : reps))" --warmup "$warmup" --device "$device"
  grep -E 'PASS|FAIL' "$out/sims_peers.log" >&2
  check_json "$cuda_json" sims_peers.cu "sims_peers failed (see $out/sims_peers.log)" '["cuda"]'
fi

# 2. JAX and PyTorch on CUDA, one process each.
frameworks() { # NAME DEVICE SIZES LIMIT IMPLS RUN (0: skipped)
  local json="$out/$1.json"
  if [ "$6" = 0 ]; then
    unavailable "$json" sims_framework_peers.py "skipped (${1^^}=0)" "$5"
    return
  fi
  note "running $1 ($2)"
  step "$1" "$4" "$json" "$out/$1.log" "${pyenv[@]}" env XLA_PYTHON_CLIENT_PREALLOCATE=false \
    "$python" bench/gpu/sims_framework_peers.py --frameworks "${1%_cpu}" --device "$2" \
    --sizes "$3" --only "$only" --steps "$steps" --reps "$reps" --warmup "$warmup"
  grep -E 'reference|not available|Error' "$out/$1.log" >&2
  if grep -q 'reference .*FAIL' "$out/$1.log"; then
    failed+=("$1's reference check")
  fi
  check_json "$json" sims_framework_peers.py "$1 failed (see $out/$1.log)" "$5"
}
if [ -z "${PEERS_FROM:-}" ]; then
  frameworks jax cuda "$sizes" 180 '["jax"]' "${JAX:-1}"
  frameworks torch cuda "$sizes" 120 '["torch"]' "${TORCH:-1}"
  if [ "${CPU:-0}" = 1 ]; then
    frameworks torch_cpu cpu small,large 300 '["torch_cpu"]' "${TORCH:-1}"
  fi
fi
for f in jax torch; do
  [ -f "$out/$f.json" ] || unavailable "$out/$f.json" sims_framework_peers.py "not run" "[\"$f\"]"
done

# 3. and 4. qd, one run per backend.
merged="$out/merged.json"
peer_files=("$cuda_json" "$out/jax.json" "$out/torch.json")
[ -f "$out/torch_cpu.json" ] && peer_files+=("$out/torch_cpu.json")
merge_json "$merged" "${peer_files[@]}"
# A peer that did not run is a failure of the run too (its reason).
while IFS= read -r line; do
  [ -n "$line" ] && failed+=("$line")
done < <("$python" - "$merged" <<'EOF'
import json, sys
for o in json.load(open(sys.argv[1])):
    if not o.get("available", True):
        print("%s did not run: %s" % (",".join(o.get("impls", [])), o.get("reason")))
    for impl, st in o.get("status", {}).items():
        if not st.get("available", True):
            print("%s did not run: %s" % (impl, st.get("reason")))
EOF
)
async=()
[ "${ASYNC:-1}" = 1 ] && async=(--async)
tables=()
qd_run() { # BACKEND SIZES
  note "running qd-bench-sims on $1 ($2)"
  step "qd-bench-sims $1" 180 "$out/table-$1.txt" "$out/qd-$1.log" "$bench" --backends "$1" \
    --sizes "$2" --only "$only" --steps "$steps" --reps "$reps" --warmup "$warmup" \
    "${async[@]}" --peers "$merged" --json "$out/sims-$1.json"
  tail -n 3 "$out/qd-$1.log" | grep -i error >&2
  tables+=("$out/table-$1.txt")
}
IFS=, read -r -a backends <<<"${BACKENDS:-cuda,vulkan}"
for b in "${backends[@]}"; do
  qd_run "$b" "$sizes"
done
if [ "${CPU:-0}" = 1 ]; then
  qd_run cpu small,large
fi
cat "${tables[@]}" >"$out/table.txt" 2>/dev/null
# The tables without their per-row checks (those are in table.txt).
for t in "${tables[@]}"; do
  sed '/^checks/,/^targets/{/^targets/!d}' "$t"
done

note "total $((SECONDS - start)) s; tables in $out/table.txt, peers' JSON in $merged"
if [ "${#failed[@]}" -gt 0 ]; then
  note "NOT ALL STEPS PASSED (logs in $out):"
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
note "every step ran and every check passed"
