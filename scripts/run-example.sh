#!/usr/bin/env bash
# The main job, from a fresh machine: installs dependencies, builds qd,
# optimises the example kernel with qd-opt, differentiates it (reverse-ad),
# and runs the kernel and its gradient with qd-run on the LLVM CPU backend
# (its default), printing the fields as JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh >/dev/null
bin=${BUILD_DIR:-build}/tools
kernel=examples/kernels/sin_loop.qd
echo "== qd-opt --passes=fold,simplify,dce $kernel"
"$bin/qd-opt/qd-opt" --passes=fold,simplify,dce "$kernel"
echo "== qd-run $kernel (n = 3, x = 0, 0.25, ..., 3.75)"
"$bin/qd-run/qd-run" "$kernel" --set n=3 \
  --set 'x=[0,0.25,0.5,0.75,1,1.25,1.5,1.75,2,2.25,2.5,2.75,3,3.25,3.5,3.75]' --print=x,y
grad=$(mktemp --suffix=.qd)
trap 'rm -f "$grad"' EXIT
echo "== qd-opt --passes=reverse-ad,simplify,dce $kernel (adds @compute_grad)"
"$bin/qd-opt/qd-opt" --passes=reverse-ad,simplify,dce "$kernel" -o "$grad"
sed -n '/kernel @compute_grad/,$p' "$grad"
echo "== qd-opt --report-ad-stacks (how the gradient's adstack is sized)"
"$bin/qd-opt/qd-opt" --report-ad-stacks "$grad"
echo "== qd-run: @compute then @compute_grad with y.grad = 1 (n = 3, then n = 500: the adstack is sized before each launch)"
"$bin/qd-run/qd-run" "$grad" --kernel=compute --kernel=compute_grad --set n=3 --set y.grad=1 \
  --set 'x=[0,0.25,0.5,0.75,1,1.25,1.5,1.75,2,2.25,2.5,2.75,3,3.25,3.5,3.75]' \
  --print=y,x.grad --report-adstacks
"$bin/qd-run/qd-run" "$grad" --kernel=compute --kernel=compute_grad --set n=500 --set y.grad=1 \
  --print=y --report-adstacks
