#!/usr/bin/env bash
# The main job, from a fresh machine: installs dependencies, builds qd, then
# optimises the example kernel with qd-opt and runs it on the reference
# interpreter with qd-run, printing the fields as JSON.
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
grad=examples/kernels/sin_loop_grad.qd
echo "== qd-opt --report-ad-stacks $grad"
"$bin/qd-opt/qd-opt" --report-ad-stacks "$grad"
echo "== qd-run $grad (n = 3, then n = 500: the adstack is sized before each launch)"
"$bin/qd-run/qd-run" "$grad" --set n=3 --set y.grad=1 \
  --set 'x=[0,0.25,0.5,0.75,1,1.25,1.5,1.75,2,2.25,2.5,2.75,3,3.25,3.5,3.75]' \
  --print=x.grad --report-adstacks
"$bin/qd-run/qd-run" "$grad" --set n=500 --set y.grad=1 --print=n --report-adstacks
