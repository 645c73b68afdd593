set -x
Q=
for f in test/Analysis/count-kernel.qd; do
  qd-run $f --backend=cuda --set 'x=[0,5,9.5,20]' --report-adstacks --print=y
  qd-run $f --backend=cuda --set 'x=[-290,5,9.5,20]' --report-adstacks --print=y
done
qd-run test/qd-run/atomic-max.qd --backend=cuda --set 'x=[3,-7,12,5,12,-1,0,9,4,11]' --print=m,b
qd-opt .devin/wgrad.qd --passes=reverse-ad -o /tmp/wg.qd
qd-run /tmp/wg.qd --backend=cuda --kernel=k --kernel=k_grad --set 'x=[0,1.5,2.99]' --set 'y.grad=[1,1,1]' --print=y,x.grad --report-adstacks
qd-bench-measured --backend=cuda --n=1048576 --reps=9
qd-bench-measured --backend=cuda --n=65536 --reps=9
CudaBackendTest 2>&1 | tail -5
