#!/usr/bin/env python3
"""PyTorch CPU (eager autograd, float32) for qd-bench-gradients.

Times workloads (a) sin and (c) spring chain of bench/GradientWorkloads.h
(same inputs and float operation order, vectorised over the elements) on 1
and 2 threads and prints one JSON object that qd-bench-gradients merges into
its table (--torch FILE):

  {"available": true, "version": ..., "a": {"n": N, "grad_sums": [...],
   "threads": {"1": {"fwd_ms", "fwd_graph_ms", "bwd_ms"}, "2": {...}}}, ...}

fwd_ms is the forward without autograd, fwd_graph_ms the forward recording
the graph, bwd_ms backward(); each the minimum over --reps runs. Without
torch it prints {"available": false, "reason": ...}. Workload (b) has
per-element trip counts and is not run.
"""
import argparse
import json
import sys
import time

K_SIN = 64
CHAIN, T_SPRING = 8, 64
SK, DT, DAMP, REST, CUBIC = 10.0, 0.01, 0.1, 1.0, 0.5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--n-sin", type=int, default=1 << 20)
    ap.add_argument("--n-spring", type=int, default=1 << 14)
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - report any import failure
        print(json.dumps({"available": False,
                          "reason": "python3-torch not importable: %s" % e}))
        return

    def timed(fn, reps):
        best, out = float("inf"), None
        for _ in range(reps):
            t0 = time.perf_counter()
            out = fn()
            best = min(best, (time.perf_counter() - t0) * 1e3)
        return best, out

    def sin_inputs(n):
        return (torch.arange(n) % 1000).float() * 0.001 - 0.5

    def sin_f(x):
        v = x
        for _ in range(K_SIN):
            v = torch.sin(v) + 0.1
        return v

    def spring_inputs(n):
        i = torch.arange(n).unsqueeze(1)
        k = torch.arange(CHAIN).unsqueeze(0)
        p = (k + 1).float() + 0.05 * ((i * (k + 3)) % 17).float() / 17.0
        q = 0.01 * ((i + k) % 11).float() - 0.05
        return p, q

    def spring_f(p, q):
        zeros = torch.zeros(p.shape[0], 1)
        for _ in range(T_SPRING):
            e = torch.cat([p[:, :1], p[:, 1:] - p[:, :-1]], 1) - REST
            g = e + e * e * e * CUBIC
            f = (torch.cat([g[:, 1:], zeros], 1) - g) * SK
            q = q + (f - DAMP * q) * DT
            p = p + DT * q
        return p.sum(1)

    def run(inputs, fn):
        res = {}
        grads = None
        for t in [int(s) for s in args.threads.split(",")]:
            torch.set_num_threads(t)
            with torch.no_grad():
                fwd, _ = timed(lambda: fn(*inputs), args.reps)
            fg, bw = float("inf"), float("inf")
            for _ in range(args.reps):
                leaves = [a.clone().requires_grad_(True) for a in inputs]
                t0 = time.perf_counter()
                out = fn(*leaves)
                t1 = time.perf_counter()
                out.backward(torch.ones_like(out))
                t2 = time.perf_counter()
                fg, bw = min(fg, (t1 - t0) * 1e3), min(bw, (t2 - t1) * 1e3)
                grads = [float(a.grad.double().sum()) for a in leaves]
            res[str(t)] = {"fwd_ms": fwd, "fwd_graph_ms": fg, "bwd_ms": bw}
        return res, grads

    out = {"available": True, "version": torch.__version__}
    for key, n, inputs, fn in [("a", args.n_sin, (sin_inputs(args.n_sin),), sin_f),
                               ("c", args.n_spring, spring_inputs(args.n_spring), spring_f)]:
        threads, sums = run(inputs, fn)
        out[key] = {"n": n, "threads": threads, "grad_sums": sums}
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
