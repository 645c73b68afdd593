#!/usr/bin/env bash
# The GPU gradient benchmark (docs/performance.md, "GPU benchmark"), run ON
# THE GPU MACHINE from the repository root, with a prebuilt qd-bench-gpu on
# PATH (built and packed on the build machine: see
# /work/shared/device/README.md and docs/performance.md). It
#   1. compiles bench/gpu/peers.cu (hand-written CUDA) with nvcc for the
#      GPU's architecture (nvidia-smi's compute_cap; sm_90 when unknown) and
#      runs it,
#   2. runs bench/gpu/framework_peers.py for JAX and for PyTorch (eager and
#      torch.compile), each in its own python3 process,
#   3. merges their JSON and runs `qd-bench-gpu --peers merged.json`, which
#      prints one table: qd's CUDA and Vulkan backends (a row each) against
#      the local tape, the global tape, JAX, PyTorch eager and torch.compile,
#      with the ratios, the adstack heap and the launch overhead.
# A peer or a qd backend that cannot run (no nvcc, no JAX, no Vulkan driver,
# ...) shows as n/a with the reason. Extra arguments go to qd-bench-gpu
# (e.g. --only a, --backends cuda, --vulkan-threads 65536,262144). Environment:
#   REPS=20          timed runs of every implementation
#   WARMUP=3         warm-up runs (qd-bench-gpu, framework_peers.py)
#   TORCH_COMPILE=0  skip torch.compile (it compiles for ~90 s)
#   JAX=0 TORCH=0 CUDA_PEERS=0   skip those peers
#   DEVICE=0         the GPU (CUDA ordinal; when set, the python peers run with
#                    CUDA_VISIBLE_DEVICES=DEVICE)
#   OUT_DIR=DIR      where the JSON, the logs and table.txt go (default: a
#                    new /tmp/qd-gpu-bench-XXXXXX)
#   QD_BENCH_GPU=... the qd-bench-gpu executable (default: on PATH, else
#                    build-rel/bench/qd-bench-gpu, else build/bench/qd-bench-gpu);
#                    NVCC, PYTHON likewise.
#   QD_VULKAN_DEVICE=NAME  the Vulkan device (index or part of its name;
#                    default: the first discrete GPU), as --vulkan-device
#   VK_DRIVER_FILES=FILE   the Vulkan loader's driver manifest, read by the
#                    loader itself (older loaders read VK_ICD_FILENAMES):
#                    where the loader finds no driver on the GPU machine,
#                    /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json.
#                    Unset, the loader searches its usual places; without a
#                    loader (libvulkan.so.1) or a driver the Vulkan rows read
#                    n/a and the rest runs.
# Takes about 3 to 6 minutes on an H100 (torch.compile most of it).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
reps="${REPS:-20}"
warmup="${WARMUP:-3}"
python="${PYTHON:-python3}"
note_prefix=run-gpu
# shellcheck source=bench/gpu-lib.sh
. "$root/bench/gpu-lib.sh"
gpu_setup qd-gpu-bench

bench="$(find_bench qd-bench-gpu "${QD_BENCH_GPU:-}" "$root")"
if [ -z "$bench" ]; then
  missing_bench qd-bench-gpu
  exit 1
fi
describe_machine "$device"

# 1. Hand-written CUDA.
peers_json="$out/peers.json"
if [ "${CUDA_PEERS:-1}" = 0 ]; then
  unavailable "$peers_json" peers.cu "skipped (CUDA_PEERS=0)" '["local_tape", "global_tape"]'
elif ! compile_peer peers; then
  unavailable "$peers_json" peers.cu "nvcc failed (see $out/nvcc-peers.log)" \
    '["local_tape", "global_tape"]'
else
  note "running the hand-written CUDA peers"
  timeout 300 "$out/peers" --reps "$((reps < 50 ? 50 : reps))" --device "$device" \
    >"$peers_json" 2> >(tee "$out/peers.log" >&2)
  check_json "$peers_json" peers.cu "peers failed (see $out/peers.log)" \
    '["local_tape", "global_tape"]'
fi

# 2. JAX and PyTorch, one process each.
jax_json="$out/jax.json"
torch_json="$out/torch.json"
if [ "${JAX:-1}" = 0 ]; then
  unavailable "$jax_json" framework_peers.py "skipped (JAX=0)" '["jax"]'
else
  note "running JAX"
  "${pyenv[@]}" timeout 300 "$python" \
    bench/gpu/framework_peers.py --frameworks jax --reps "$reps" --warmup "$warmup" \
    >"$jax_json" 2> >(tee "$out/jax.log" >&2)
  check_json "$jax_json" framework_peers.py "JAX run failed (see $out/jax.log)" '["jax"]'
fi
if [ "${TORCH:-1}" = 0 ]; then
  unavailable "$torch_json" framework_peers.py "skipped (TORCH=0)" \
    '["torch_eager", "torch_compile"]'
else
  compile_flag=()
  if [ "${TORCH_COMPILE:-1}" = 0 ]; then
    compile_flag=(--no-torch-compile)
    note "running PyTorch eager (TORCH_COMPILE=0: no torch.compile)"
  else
    note "running PyTorch eager and torch.compile (the compile takes a minute or two)"
  fi
  "${pyenv[@]}" timeout 420 "$python" \
    bench/gpu/framework_peers.py --frameworks torch --reps "$reps" --warmup "$warmup" \
    "${compile_flag[@]}" >"$torch_json" 2> >(tee "$out/torch.log" >&2)
  check_json "$torch_json" framework_peers.py "PyTorch run failed (see $out/torch.log)" \
    '["torch_eager", "torch_compile"]'
fi

# 3. One table.
merged="$out/merged.json"
merge_json "$merged" "$peers_json" "$jax_json" "$torch_json"
note "peers took $((SECONDS - start)) s; running qd-bench-gpu (results in $out)"
"$bench" --peers "$merged" --reps "$reps" --warmup "$warmup" --device "$device" "$@" |
  tee "$out/table.txt"
status=${PIPESTATUS[0]}
note "total $((SECONDS - start)) s; table in $out/table.txt, peers' JSON in $merged"
exit "$status"
