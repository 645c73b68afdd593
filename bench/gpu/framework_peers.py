#!/usr/bin/env python3
"""JAX and PyTorch gradients on the GPU for qd-bench-gpu (bench/run-gpu.sh).

Workloads of bench/GradientWorkloads.h (same inputs, float32, the same float
operation order, vectorised over the elements):

  (a) sin:    y = f(x), f applies v = sin(v) + 0.1 64 times; N = 2^20, 2^24
      jax:           jax.jit(jax.grad(sum of f)) with f a lax.scan of 64 steps
      torch_eager:   autograd on CUDA: forward recording the graph, then
                     torch.autograd.grad with output adjoints 1
      torch_compile: the same with f = torch.compile(f, dynamic=False); its
                     compile time (the first call, forward and backward) is
                     reported separately (--no-torch-compile: skipped, ~90 s)
  (c) spring: 8-mass chain, 64 steps, out = sum of final positions; N = 2^20
      chains; jax (lax.scan) and torch_eager

A timed "gradient" is everything from the inputs to the input adjoints
(forward and backward). Each timing: synchronise (block_until_ready,
torch.cuda.synchronize), wall clock around one gradient, synchronise; min and
median over --reps runs after --warmup. The gradient sum (all input adjoints)
is checked against a float64 reference (forward-mode tangents along the
all-ones direction, which sum the gradient; pure Python over one period of
the inputs) within a relative 1e-3.

Prints one JSON object on stdout (progress on stderr):

  {"source": "framework_peers.py", "info": "...",
   "status": {"jax": {"available": true, "version": ...} | {"available": false,
              "reason": ...}, "torch_eager": ..., "torch_compile": ...},
   "rows": [{"workload": "a", "n": N, "impl": "jax", "ms_median", "ms_min",
             "grad_sum", "ref_sum", "pass", "compile_s", "note"}, ...]}

A framework that is missing, has no GPU or fails is reported as
{"available": false, "reason": ...} for its impls; the script never fails
because of one. --frameworks jax or torch runs one (bench/run-gpu.sh runs
each in its own process, so JAX's and PyTorch's GPU allocators do not meet).
--cpu runs on the CPU at --max-n elements (a check of this script on a
machine without a GPU; the times mean nothing).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

K_SIN = 64
CHAIN, T_SPRING = 8, 64
SK, DT, DAMP, REST, CUBIC = 10.0, 0.01, 0.1, 1.0, 0.5
TOLERANCE = 1e-3
SIZES = {"a": [1 << 20, 1 << 24], "c": [1 << 20]}


def log(msg):
    print("framework_peers: " + msg, file=sys.stderr, flush=True)


# --- the float64 reference ----------------------------------------------------

def f32(v):
    """Rounds a Python float to float32 (the inputs are float32 values)."""
    import struct
    return struct.unpack("f", struct.pack("f", v))[0]


def sin_input(i):
    return f32(f32(f32(0.001) * (i % 1000)) - 0.5)


def spring_p(i, k):
    return f32((k + 1) + f32(f32(f32(0.05) * ((i * (k + 3)) % 17)) / 17.0))


def spring_q(i, k):
    return f32(f32(f32(0.01) * ((i + k) % 11)) - f32(0.05))


def periodic_sum(period, n, value):
    """sum over i < n of value(i % period)."""
    total = 0.0
    for r in range(period):
        count = n // period + (1 if r < n % period else 0)
        if count:
            total += count * value(r)
    return total


def ref_sum_sin(n):
    def grad(i):
        v, d = sin_input(i), 1.0
        for _ in range(K_SIN):
            d *= math.cos(v)
            v = math.sin(v) + 0.1
        return d
    return periodic_sum(1000, n, grad)


def ref_sum_spring(n):
    def jvp(i):  # d out / d(p, q) along all-ones: the sum of the gradient
        p = [spring_p(i, k) for k in range(CHAIN)]
        q = [spring_q(i, k) for k in range(CHAIN)]
        dp, dq = [1.0] * CHAIN, [1.0] * CHAIN
        for _ in range(T_SPRING):
            g, dg = [], []
            for k in range(CHAIN):
                e = (p[k] - (p[k - 1] if k else 0.0)) - REST
                de = dp[k] - (dp[k - 1] if k else 0.0)
                g.append(e + e * e * e * CUBIC)
                dg.append(de * (1.0 + 3.0 * CUBIC * e * e))
            g.append(0.0)
            dg.append(0.0)
            for k in range(CHAIN):
                f = (g[k + 1] - g[k]) * SK
                df = (dg[k + 1] - dg[k]) * SK
                q[k] = q[k] + (f - DAMP * q[k]) * DT
                dq[k] = dq[k] + (df - DAMP * dq[k]) * DT
                p[k] = p[k] + DT * q[k]
                dp[k] = dp[k] + DT * dq[k]
        return sum(dp)
    return periodic_sum(17 * 11, n, jvp)


# --- timing ---------------------------------------------------------------------

def timed(fn, sync, reps, warmup):
    """(first call s, median ms, min ms, last result): fn() then sync()."""
    t0 = time.perf_counter()
    out = fn()
    sync(out)
    first = time.perf_counter() - t0
    for _ in range(warmup):
        sync(fn())
    ms = []
    for _ in range(reps):
        sync(None)
        t0 = time.perf_counter()
        out = fn()
        sync(out)
        ms.append((time.perf_counter() - t0) * 1e3)
    return first, statistics.median(ms), min(ms), out


def make_row(workload, n, impl, first, med, mn, grad_sum, ref, note, compile_s=None):
    err = abs(grad_sum - ref) / max(abs(ref), 1e-30)
    row = {"workload": workload, "n": n, "impl": impl, "ms_median": med, "ms_min": mn,
           "grad_sum": grad_sum, "ref_sum": ref, "pass": err <= TOLERANCE,
           "first_call_s": first, "note": note}
    if compile_s is not None:
        row["compile_s"] = compile_s
    log("(%s) N = %d %s: %.3f ms (min %.3f), grad sum %.9g (ref %.9g) %s"
        % (workload, n, impl, med, mn, grad_sum, ref, "PASS" if row["pass"] else "FAIL"))
    return row


# --- JAX --------------------------------------------------------------------------

def run_jax(args, refs, out):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp
        from jax import lax
    except Exception as e:  # noqa: BLE001 - any import failure is a reason
        out["status"]["jax"] = {"available": False, "reason": "jax not importable: %s" % e}
        return
    try:
        if args.cpu:
            dev = jax.devices("cpu")[0]
        else:
            try:
                dev = jax.devices("gpu")[0]
            except RuntimeError as e:
                out["status"]["jax"] = {"available": False,
                                        "reason": "jax %s has no GPU: %s" % (jax.__version__, e)}
                return
        out["status"]["jax"] = {"available": True, "version": jax.__version__,
                                "device": str(dev)}

        def sin_loss(x):
            def body(v, _):
                return jnp.sin(v) + jnp.float32(0.1), None
            v, _ = lax.scan(body, x, None, length=K_SIN)
            return jnp.sum(v)

        def spring_loss(p, q):
            def body(carry, _):
                p, q = carry
                e = jnp.concatenate([p[:, :1], p[:, 1:] - p[:, :-1]], 1) - jnp.float32(REST)
                g = e + e * e * e * jnp.float32(CUBIC)
                f = (jnp.concatenate([g[:, 1:], jnp.zeros_like(g[:, :1])], 1) - g) \
                    * jnp.float32(SK)
                q = q + (f - jnp.float32(DAMP) * q) * jnp.float32(DT)
                p = p + jnp.float32(DT) * q
                return (p, q), None
            (p, q), _ = lax.scan(body, (p, q), None, length=T_SPRING)
            return jnp.sum(p)

        def sync(o):
            if o is not None:
                jax.block_until_ready(o)

        grad_sin = jax.jit(jax.grad(sin_loss))
        grad_spring = jax.jit(jax.grad(spring_loss, argnums=(0, 1)))
        for n in sizes(args, "a"):
            i = jnp.arange(n, dtype=jnp.int32)
            x = jax.device_put(((i % 1000).astype(jnp.float32) * jnp.float32(0.001)
                                - jnp.float32(0.5)), dev)
            first, med, mn, g = timed(lambda: grad_sin(x), sync, args.reps, args.warmup)
            out["rows"].append(make_row("a", n, "jax", first, med, mn, sum_f64(g), refs[("a", n)],
                                        "jit(grad(sum of lax.scan, 64 steps)), float32",
                                        compile_s=first))
            del x, g
        for n in sizes(args, "c"):
            i = jnp.arange(n, dtype=jnp.int32)[:, None]
            k = jnp.arange(CHAIN, dtype=jnp.int32)[None, :]
            p = jax.device_put((k + 1).astype(jnp.float32) + jnp.float32(0.05)
                               * ((i * (k + 3)) % 17).astype(jnp.float32) / jnp.float32(17.0),
                               dev)
            q = jax.device_put(jnp.float32(0.01) * ((i + k) % 11).astype(jnp.float32)
                               - jnp.float32(0.05), dev)
            first, med, mn, g = timed(lambda: grad_spring(p, q), sync, args.reps, args.warmup)
            out["rows"].append(make_row("c", n, "jax", first, med, mn,
                                        sum_f64(g[0]) + sum_f64(g[1]), refs[("c", n)],
                                        "jit(grad(lax.scan, 64 steps)), float32",
                                        compile_s=first))
            del p, q, g
    except Exception as e:  # noqa: BLE001 - report, never crash
        traceback.print_exc(file=sys.stderr)
        out["status"]["jax"] = {"available": False, "reason": "jax failed: %s" % e}


def sum_f64(a):
    """The sum of an array (JAX or torch) in float64 on the host."""
    try:
        import numpy as np
        return float(np.asarray(a, dtype=np.float64).sum())
    except ImportError:
        return float(sum(float(v) for v in a.reshape(-1).tolist()))


# --- PyTorch ----------------------------------------------------------------------

def run_torch(args, refs, out):
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        reason = "torch not importable: %s" % e
        out["status"]["torch_eager"] = {"available": False, "reason": reason}
        out["status"]["torch_compile"] = {"available": False, "reason": reason}
        return
    if args.cpu:
        dev = torch.device("cpu")
    elif not torch.cuda.is_available():
        reason = "torch %s sees no CUDA device" % torch.__version__
        out["status"]["torch_eager"] = {"available": False, "reason": reason}
        out["status"]["torch_compile"] = {"available": False, "reason": reason}
        return
    else:
        dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    out["status"]["torch_eager"] = {"available": True, "version": torch.__version__,
                                    "device": name}

    def sync(_):
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def sin_f(x):
        v = x
        for _ in range(K_SIN):
            v = torch.sin(v) + 0.1
        return v

    def spring_f(p, q):
        zeros = torch.zeros(p.shape[0], 1, device=p.device, dtype=p.dtype)
        for _ in range(T_SPRING):
            e = torch.cat([p[:, :1], p[:, 1:] - p[:, :-1]], 1) - REST
            g = e + e * e * e * CUBIC
            f = (torch.cat([g[:, 1:], zeros], 1) - g) * SK
            q = q + (f - DAMP * q) * DT
            p = p + DT * q
        return p.sum(1)

    def gradient(fn, inputs):
        leaves = [a.detach().requires_grad_(True) for a in inputs]
        y = fn(*leaves)
        return torch.autograd.grad(y, leaves, grad_outputs=torch.ones_like(y))

    def sin_x(n):
        return ((torch.arange(n, device=dev) % 1000).float() * 0.001 - 0.5).contiguous()

    def spring_pq(n):
        i = torch.arange(n, device=dev).unsqueeze(1)
        k = torch.arange(CHAIN, device=dev).unsqueeze(0)
        p = (k + 1).float() + 0.05 * ((i * (k + 3)) % 17).float() / 17.0
        q = 0.01 * ((i + k) % 11).float() - 0.05
        return p.contiguous(), q.contiguous()

    def gsum(gs):
        return float(sum(float(g.double().sum()) for g in gs))

    # Eager.
    try:
        for n in sizes(args, "a"):
            x = sin_x(n)
            first, med, mn, g = timed(lambda: gradient(sin_f, [x]), sync, args.reps, args.warmup)
            out["rows"].append(make_row("a", n, "torch_eager", first, med, mn, gsum(g),
                                        refs[("a", n)], "autograd, float32, " + name))
            del x, g
        for n in sizes(args, "c"):
            p, q = spring_pq(n)
            first, med, mn, g = timed(lambda: gradient(spring_f, [p, q]), sync, args.reps,
                                      args.warmup)
            out["rows"].append(make_row("c", n, "torch_eager", first, med, mn, gsum(g),
                                        refs[("c", n)], "autograd, float32, " + name))
            del p, q, g
    except Exception as e:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        out["status"]["torch_eager"] = {"available": False, "reason": "torch eager failed: %s" % e}

    # torch.compile, (a) only.
    if args.no_torch_compile:
        out["status"]["torch_compile"] = {"available": False,
                                          "reason": "skipped (--no-torch-compile)"}
        return
    if not hasattr(torch, "compile"):
        out["status"]["torch_compile"] = {"available": False,
                                          "reason": "torch %s has no torch.compile"
                                          % torch.__version__}
        return
    out["status"]["torch_compile"] = {"available": True, "version": torch.__version__,
                                      "device": name}
    try:
        for n in sizes(args, "a"):
            torch._dynamo.reset()
            compiled = torch.compile(sin_f, dynamic=False)
            x = sin_x(n)
            first, med, mn, g = timed(lambda: gradient(compiled, [x]), sync, args.reps,
                                      args.warmup)
            out["rows"].append(make_row("a", n, "torch_compile", first, med, mn, gsum(g),
                                        refs[("a", n)],
                                        "torch.compile(f, dynamic=False) + autograd, float32",
                                        compile_s=first))
            del x, g, compiled
    except Exception as e:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        out["status"]["torch_compile"] = {"available": False,
                                          "reason": "torch.compile failed: %s" % e}


def sizes(args, workload):
    if workload not in args.only:
        return []
    ns = SIZES[workload]
    if args.max_n:
        ns = sorted({min(n, args.max_n) for n in ns})
    return ns


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="a,c", help="workloads: a and/or c")
    ap.add_argument("--frameworks", default="jax,torch")
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--cpu", action="store_true",
                    help="run on the CPU (a check of this script, not a measurement)")
    ap.add_argument("--max-n", type=int, default=0, help="cap every size (0: none)")
    args = ap.parse_args()
    args.reps = max(1, args.reps)
    args.warmup = max(0, args.warmup)
    if args.cpu and not args.max_n:
        args.max_n = 1 << 14

    out = {"source": "framework_peers.py", "status": {}, "rows": []}
    refs = {}
    for w in ("a", "c"):
        for n in sizes(args, w):
            refs[(w, n)] = ref_sum_sin(n) if w == "a" else ref_sum_spring(n)
    frameworks = args.frameworks.split(",")
    if "jax" in frameworks:
        run_jax(args, refs, out)
    if "torch" in frameworks:
        run_torch(args, refs, out)
    parts = []
    for impl, st in out["status"].items():
        if st.get("available"):
            parts.append("%s %s on %s" % (impl, st.get("version", "?"), st.get("device", "?")))
    parts.append("median (min) of %d runs after %d warm-up, wall clock with synchronisation"
                 % (args.reps, args.warmup))
    out["info"] = "; ".join(parts)
    if args.cpu:
        out["info"] += "; ON THE CPU (--cpu: not a measurement)"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
