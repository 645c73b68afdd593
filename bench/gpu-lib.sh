# shellcheck shell=bash
# Shell functions of the GPU benchmark drivers (bench/run-gpu.sh,
# bench/run-sims-gpu.sh), sourced by them. They expect $python (a python3)
# and $note_prefix (the driver's name in its messages).
# shellcheck disable=SC2154,SC2034

# Sets device (DEVICE, default 0), pyenv (the python peers' environment:
# CUDA_VISIBLE_DEVICES=DEVICE when DEVICE is set), out (OUT_DIR, default a
# new /tmp/PREFIX-XXXXXX, created) and start (for the durations).
gpu_setup() { # PREFIX
  device="${DEVICE:-0}"
  pyenv=()
  if [ -n "${DEVICE:-}" ]; then
    pyenv=(env CUDA_VISIBLE_DEVICES="$DEVICE")
  fi
  out="${OUT_DIR:-$(mktemp -d "/tmp/$1-XXXXXX")}"
  mkdir -p "$out"
  start=$SECONDS
}

note() { echo "$note_prefix: $*" >&2; }

# Writes {"available": false, ...} into FILE for a peer program that did not
# give JSON.
unavailable() { # FILE SOURCE REASON IMPLS (a JSON list)
  "$python" - "$@" <<'EOF'
import json, sys
f, source, reason, impls = sys.argv[1:5]
json.dump({"source": source, "available": False, "reason": reason,
           "impls": json.loads(impls)}, open(f, "w"))
EOF
}

# Keeps FILE if it is one JSON value, else replaces it with unavailable().
check_json() { # FILE SOURCE REASON IMPLS
  if ! "$python" -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; then
    unavailable "$@"
  fi
}

# Merges JSON files into one list.
merge_json() { # OUT FILE...
  "$python" - "$@" <<'EOF'
import json, sys
json.dump([json.load(open(f)) for f in sys.argv[2:]], open(sys.argv[1], "w"), indent=1)
EOF
}

# Prints the qd executable NAME: $OVERRIDE when set, else NAME on PATH, else
# build-rel/bench/NAME or build/bench/NAME under ROOT; nothing when none.
find_bench() { # NAME OVERRIDE ROOT
  if [ -n "$2" ]; then
    echo "$2"
  elif command -v "$1" >/dev/null; then
    echo "$1"
  elif [ -x "$3/build-rel/bench/$1" ]; then
    echo "$3/build-rel/bench/$1"
  elif [ -x "$3/build/bench/$1" ]; then
    echo "$3/build/bench/$1"
  fi
}

# Says how to bring NAME to this machine.
missing_bench() { # NAME
  note "$1 not found: build it on the build machine, pack it with"
  note "  ../shared/device/pack.sh DIR build/bench/$1"
  note "and eval \"\$(bash DIR/unpack.sh DIR)\" here (docs/performance.md)"
}

# nvcc: $NVCC, else on PATH, else /usr/local/cuda/bin/nvcc.
find_nvcc() {
  if [ -n "${NVCC:-}" ]; then
    echo "$NVCC"
  elif command -v nvcc >/dev/null; then
    echo nvcc
  else
    echo /usr/local/cuda/bin/nvcc
  fi
}

# sm_XY of GPU DEVICE (nvidia-smi's compute_cap; sm_90 when unknown).
gpu_arch() { # DEVICE
  local cap
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i "$1" 2>/dev/null |
    head -n 1 | tr -d ' .')"
  case "$cap" in
    [0-9][0-9] | [0-9][0-9][0-9]) echo "sm_$cap" ;;
    *) echo sm_90 ;;
  esac
}

# Compiles bench/gpu/NAME.cu into $out/NAME for GPU $device (nvcc -O3 for
# its architecture; log $out/nvcc-NAME.log); fails when nvcc does.
compile_peer() { # NAME
  local nvcc arch
  nvcc="$(find_nvcc)"
  arch="$(gpu_arch "$device")"
  note "compiling bench/gpu/$1.cu for $arch"
  if ! timeout 300 "$nvcc" -O3 -arch="$arch" -o "$out/$1" "bench/gpu/$1.cu" \
    >"$out/nvcc-$1.log" 2>&1; then
    note "nvcc failed for $arch (see $out/nvcc-$1.log)"
    return 1
  fi
}

# One line on the GPU and one on the Vulkan driver, to stderr.
describe_machine() { # DEVICE
  local gpu
  if gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
    --format=csv,noheader -i "$1" 2>&1); then
    note "GPU: $gpu"
  else
    note "GPU: nvidia-smi could not describe device $1: $gpu"
  fi
  note "Vulkan driver manifest: ${VK_DRIVER_FILES:-${VK_ICD_FILENAMES:-unset: the loader searches its usual places}}"
}
