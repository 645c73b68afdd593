#!/usr/bin/env bash
# Installs every Debian 12 package qd needs to build, test, fuzz and benchmark.
# Idempotent and non-interactive; run as root (or through sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git python3 pkg-config
  llvm-19-dev llvm-19-tools clang-19 libclang-rt-19-dev libfuzzer-19-dev
  libabsl-dev libfmt-dev libboost-graph-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  zlib1g-dev libzstd-dev libedit-dev libxml2-dev libffi-dev libncurses-dev
  libadolc-dev python3-torch  # peers of bench/run-gradients.sh
  libdlpack-dev python3-numpy python3-pytest  # the C API's DLPack buffers, the Python package's tests
  spirv-tools spirv-headers libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers  # SPIR-V/Vulkan
  rocm-device-libs libamdhip64-dev lld-19  # AMDGPU: ocml/ockl bitcode, HIP headers, ld.lld
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
