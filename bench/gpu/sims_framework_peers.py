#!/usr/bin/env python3
"""JAX and PyTorch peers of qd-bench-sims: the six simulations of bench/workloads.

The simulations of bench/workloads/*.cpp (mass_spring, mpm, wave, smoke,
billiards, newton) with the same sizes, initial data (hash_uniform), constants
and float32 operations, vectorised over the elements, written once against a
small array interface (Ops) that PyTorch and JAX both implement:

  jax          jax.jit(jax.value_and_grad(loss)), the steps a lax.scan of the
               step function (compile_s: the first call, which compiles)
  torch        PyTorch eager on CUDA: a Python loop over the steps recording
               the graph, then torch.autograd.grad
  torch_cpu    the same on the CPU (--device cpu; qd-bench-sims runs this for
               its CPU rows)

Per simulation and size it times the forward (fwd_ms: the loss without
autodiff) and the gradient (ms_median: the loss and its gradient with respect
to the simulation's parameter, forward included), each per time step, median
(and min) over --reps runs after --warmup, with a device synchronisation
around every run. It reports the loss and a checksum of the gradient of the
parameter's initial contents (grad_sum, grad_norm: its sum and L2 norm in
float64), which qd-bench-sims compares with its own:

  mass_spring  d loss / d w1            mpm, smoke, billiards  d loss / d v[0]
  wave         d loss / d p[0]          newton                 d loss / d k

newton's per-element `while` has no reverse mode in JAX (lax.while_loop) and
a data-dependent trip count in neither framework: both run M masked Newton
iterations, M the most iterations the forward needs (found by an untimed
forward with a host check per iteration), which differentiates exactly the
iterations qd's gradient does.

Prints one JSON object on stdout (progress on stderr), the schema of
bench/GpuPeers.h:

  {"source": "sims_framework_peers.py", "info": "...",
   "status": {"jax": {"available": true, "version": ...}, "torch": ...},
   "rows": [{"workload": "mpm", "size": "gpu", "n": 262144, "steps": 32,
             "impl": "jax", "fwd_ms", "fwd_ms_min", "ms_median", "ms_min",
             "loss", "grad_sum", "grad_norm", "mem_bytes", "compile_s",
             "note"}, ...]}

`n` is the size of the simulation's first array's second axis (masses,
particles, grid side, grid side, balls, elements), as qd-bench-sims keys
its rows. A framework that is missing, has no GPU or fails is reported as
{"available": false, "reason": ...}; the script never fails because of one.

Every small-size row of a 32-step run is compared with the loss and
gradient checksum recorded from PyTorch on the CPU (and checked against
qd's CPU backend) in REFERENCE, tolerance CHECK_RTOL: a line "reference
... PASS" or "FAIL" on stderr and "ref_pass" in the row. --check runs the
small size at 32 steps once and exits 1 on a mismatch or a framework that
did not run; one run on the GPU machine validates the JAX code:

  python3 bench/gpu/sims_framework_peers.py --check --frameworks jax,torch
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

import numpy as np

F32 = np.float32
SIZES = {  # as the factories of bench/workloads/*.cpp
    "mass_spring": {"small": (4, 2, 8, 4), "large": (32, 8, 32, 10), "gpu": (128, 32, 32, 10)},
    "mpm": {"small": (8, 32), "large": (128, 64), "gpu": (512, 256)},
    "wave": {"small": 16, "large": 256, "gpu": 2048},
    "smoke": {"small": (12, 4), "large": (110, 6), "gpu": (512, 6)},
    "billiards": {"small": 3, "large": 40, "gpu": 80},
    "newton": {"small": 16, "large": 65536, "gpu": 1 << 22},
}
# Loss and gradient checksum (sum, L2 norm) at the small size and 32 steps:
# PyTorch 1.13 on the CPU, float32 (bench/gpu/sims_framework_peers.py
# --frameworks torch --device cpu --sizes small), which qd's CPU backend and
# bench/gpu/sims_peers.cu's host reference give within 2e-6.
REFERENCE = {
    "mass_spring": (-0.25037694, 0.00304158081, 0.00714037166),
    "mpm": (8.60203838, -0.406457828, 0.0373719099),
    "wave": (0.00682462379, 0.0081584414, 0.00929343908),
    "smoke": (0.0643955246, 0.079887828, 0.0172243033),
    "billiards": (0.0960306823, -0.081804644, 0.087101848),
    "newton": (0.0803258047, 0.00135640394, 0.00036656359),
}
REFERENCE_STEPS = 32
CHECK_RTOL = 2e-3


def log(msg):
    print("sims_framework_peers: " + msg, file=sys.stderr, flush=True)


def hash_uniform(k, salt):
    """bench/workloads/Simulation.cpp's hashUniform, vectorised (float64)."""
    v = np.sin(np.asarray(k, dtype=np.float64) * 12.9898 + salt * 78.233) * 43758.5453
    return 2.0 * (v - np.floor(v)) - 1.0


def f32(v):
    return np.asarray(v, dtype=F32)


# --- the array interface ---------------------------------------------------------

class TorchOps:
    """What the simulations use, on PyTorch tensors of one device."""

    def __init__(self, torch, device):
        self.lib, self.t, self.device = torch, torch, device

    def arr(self, a):
        a = np.asarray(a)
        if a.dtype == np.bool_:
            return self.t.from_numpy(a).to(self.device)
        if a.dtype.kind in "iu":
            return self.t.from_numpy(a.astype(np.int64)).to(self.device)
        return self.t.from_numpy(a.astype(F32)).to(self.device)

    def zeros(self, *shape):
        return self.t.zeros(*shape, device=self.device)

    def to_int(self, a):
        return a.long()  # truncation, as qd's cast to i32

    def to_float(self, a):
        return a.float()

    def scatter_add(self, base, index, values):
        return base.index_add(0, index, values)

    def cat(self, parts, axis):
        return self.t.cat(parts, axis)

    def minimum(self, a, c):
        return self.t.clamp(a, max=c)

    def pad1(self, a):
        return self.t.nn.functional.pad(a, (1, 1, 1, 1))

    def phase(self, t, c):
        """float32(t) * float32(c), as qd's cast and multiply."""
        return float(F32(t) * F32(c))

    def loop(self, step, state, steps):
        for t in range(steps):
            state = step(state, t)
        return state

    def all(self, a):
        return bool(a.all())


class JaxOps:
    """What the simulations use, on JAX arrays (traced under jit)."""

    def __init__(self, jax, device):
        import jax.numpy as jnp
        self.jax, self.lib, self.device = jax, jnp, device

    def arr(self, a):
        a = np.asarray(a)
        if a.dtype.kind in "iu":
            a = a.astype(np.int32)
        elif a.dtype != np.bool_:
            a = a.astype(F32)
        return self.jax.device_put(a, self.device)

    def zeros(self, *shape):
        return self.lib.zeros(shape, dtype=self.lib.float32)

    def to_int(self, a):
        return a.astype(self.lib.int32)

    def to_float(self, a):
        return a.astype(self.lib.float32)

    def scatter_add(self, base, index, values):
        return base.at[index].add(values)

    def cat(self, parts, axis):
        return self.lib.concatenate(parts, axis)

    def minimum(self, a, c):
        return self.lib.minimum(a, F32(c))

    def pad1(self, a):
        return self.lib.pad(a, 1)

    def phase(self, t, c):
        if isinstance(t, int):
            return float(F32(t) * F32(c))
        return t.astype(self.lib.float32) * F32(c)

    def loop(self, step, state, steps):
        def body(s, t):
            return step(s, t), None
        state, _ = self.jax.lax.scan(body, state, self.lib.arange(steps, dtype=self.lib.int32))
        return state

    def all(self, a):
        return bool(a.all())


def run_loss(sim, xp, param, consts, steps):
    state = sim.init(xp, param, consts)
    state = xp.loop(lambda s, t: sim.step(xp, s, t, param, consts), state, steps)
    return sim.loss(xp, state, param, consts)


# --- the simulations ---------------------------------------------------------------

class MassSpring:
    """bench/workloads/MassSpring.cpp; parameter w1."""
    DT, DAMPING, GRAVITY, GROUND, OMEGA = 0.004, 15.0, -4.8, 0.1, 10.0
    SPACING, STIFFNESS, ACTUATION = 0.05, 3e4, 0.15

    def __init__(self, size, steps):
        cols, rows, hidden, waves = SIZES["mass_spring"][size]
        self.n, self.waves = cols * rows, waves
        springs = []
        for r in range(rows):
            for c in range(cols):
                node = r * cols + c
                if c + 1 < cols:
                    springs.append((node, node + 1, 1))
                if r + 1 < rows:
                    springs.append((node, node + cols, 0))
                if c + 1 < cols and r + 1 < rows:
                    springs.append((node, node + cols + 1, 0))
                    springs.append((node + 1, node + cols, 0))
        sp = np.array(springs, dtype=np.int64)
        s, inputs = len(springs), waves + 4 * self.n + 2
        pos = lambda k: (k % cols * self.SPACING, k // cols * self.SPACING)  # noqa: E731
        ax, ay = pos(sp[:, 0])
        bx, by = pos(sp[:, 1])
        cc, rr = np.meshgrid(np.arange(cols), np.arange(rows))
        scale1 = math.sqrt(2.0 / (hidden + inputs)) * 2
        scale2 = math.sqrt(2.0 / (hidden + s)) * 3
        self.param0 = f32(scale1 * hash_uniform(np.arange(hidden * inputs), 1)).reshape(
            hidden, inputs)
        self.consts = {
            "a": sp[:, 0], "b": sp[:, 1], "rest": f32(np.hypot(ax - bx, ay - by)),
            "k": f32(np.full(s, self.STIFFNESS)),
            "act": f32(np.where(sp[:, 2] == 1, self.ACTUATION, 0.0)),
            "x0": f32(np.stack([0.1 + cc.ravel() * self.SPACING,
                                self.GROUND + 0.01 + rr.ravel() * self.SPACING], 1)),
            "w2": f32(scale2 * hash_uniform(np.arange(s * hidden), 2)).reshape(s, hidden),
            "b1": f32(np.zeros(hidden)), "b2": f32(np.zeros(s)), "goal": f32([0.9, 0.2]),
            "shifts": F32(2 * math.pi / waves) * np.arange(waves, dtype=F32),
            "gravity": f32([0.0, F32(self.DT * self.GRAVITY)]),
        }

    def init(self, xp, w1, c):
        return (c["x0"], xp.zeros(self.n, 2))

    def step(self, xp, state, t, w1, c):
        lib, (x, v), n, waves = xp.lib, state, self.n, self.waves
        center = (x * float(F32(1.0 / n))).sum(0)
        hsum = c["b1"] + w1[:, :waves] @ lib.sin(xp.phase(t, self.OMEGA * self.DT) + c["shifts"])
        inputs = xp.cat([x - center, v], 1).reshape(-1) * 0.05
        hsum = hsum + w1[:, waves:waves + 4 * n] @ inputs + w1[:, waves + 4 * n:] @ (
            c["goal"] - center)
        act = lib.tanh(c["w2"] @ lib.tanh(hsum) + c["b2"])
        dist = x[c["a"]] - x[c["b"]]
        length = lib.sqrt(dist[:, 0] * dist[:, 0] + dist[:, 1] * dist[:, 1]) + 1e-4
        target = c["rest"] * (1.0 + c["act"] * act)
        scale = self.DT * (length - target) * c["k"] / length
        impulse = scale[:, None] * dist
        v_inc = xp.scatter_add(xp.scatter_add(xp.zeros(n, 2), c["a"], -impulse), c["b"], impulse)
        v = v_inc + float(F32(math.exp(-self.DT * self.DAMPING))) * v + c["gravity"]
        stop = (x[:, 1] < self.GROUND) & (v[:, 1] < 0)
        v = lib.where(stop[:, None], lib.zeros_like(v), v)
        return (x + self.DT * v, v)

    def loss(self, xp, state, w1, c):
        return -state[0][self.n - 1, 0]


class Mpm:
    """bench/workloads/Mpm.cpp and MpmEmitter.cpp; parameter v[0]."""

    def __init__(self, size, steps):
        side, grid = SIZES["mpm"][size]
        self.n, self.g = side * side, grid
        self.dx, self.inv_dx = F32(1.0) / F32(grid), F32(grid)
        self.dt = F32(2e-4)
        # As MpmEmitter.cpp computes them, in float32.
        self.stress_k = F32(F32(F32(F32(-self.dt) * F32(1.0)) * F32(4)) * self.inv_dx) * self.inv_dx
        self.gravity_dt = F32(self.dt * F32(9.8))
        cc, rr = np.meshgrid(np.arange(side), np.arange(side))
        c, r, k = cc.ravel(), rr.ravel(), np.arange(self.n)
        self.param0 = f32(np.stack([1.0 + 0.2 * hash_uniform(k, 21),
                                    0.5 + 0.2 * hash_uniform(k, 22)], 1))
        nodes = np.arange(grid * grid)
        self.consts = {
            "x0": f32(np.stack([0.3 + 0.2 * (c + 0.37) / side, 0.3 + 0.2 * (r + 0.41) / side], 1)),
            "F0": f32(np.tile([1.0, 0.0, 0.0, 1.0], (self.n, 1))), "target": f32([0.7, 0.6]),
            "node_i": nodes // grid, "node_j": nodes % grid,
        }

    def init(self, xp, v0, c):
        return (c["x0"], v0, xp.zeros(self.n, 4), c["F0"])

    def stencil(self, xp, x):
        xs = x * float(self.inv_dx)
        base = xp.to_int(xs - 0.5)
        fx = xs - xp.to_float(base)
        w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
        return base, fx, w

    def step(self, xp, state, t, v0, c):
        lib, (x, v, C, F), g, dx = xp.lib, state, self.g, float(self.dx)
        dt = float(self.dt)
        base, fx, w = self.stencil(xp, x)
        a00, a01 = 1.0 + dt * C[:, 0], dt * C[:, 1]
        a10, a11 = dt * C[:, 2], 1.0 + dt * C[:, 3]
        nf = [a00 * F[:, 0] + a01 * F[:, 2], a00 * F[:, 1] + a01 * F[:, 3],
              a10 * F[:, 0] + a11 * F[:, 2], a10 * F[:, 1] + a11 * F[:, 3]]
        j = nf[0] * nf[3] - nf[1] * nf[2]
        stress = float(self.stress_k) * ((10.0 * (j - 1.0)) * j)
        affine = [C[:, 0] + stress, C[:, 1], C[:, 2], C[:, 3] + stress]
        # P2G: the nine nodes' contributions, scattered in one add each.
        index, mom, mass = [], [], []
        dposx = -fx[:, 0] * dx
        for li in range(3):
            for lj in range(3):
                weight = w[li][:, 0] * w[lj][:, 1]
                dposy = (lj - fx[:, 1]) * dx
                index.append((base[:, 0] + li) * g + base[:, 1] + lj)
                mom.append(lib.stack([weight * (v[:, d] + (affine[2 * d] * dposx + affine[2 * d + 1]
                                                           * dposy)) for d in range(2)], 1))
                mass.append(weight)
            dposx = dposx + dx
        index = xp.cat(index, 0)
        grid_v = xp.scatter_add(xp.zeros(g * g, 2), index, xp.cat(mom, 0))
        grid_m = xp.scatter_add(xp.zeros(g * g), index, xp.cat(mass, 0))
        inv = 1.0 / (grid_m + 1e-10)
        out = []
        for d, node in enumerate((c["node_i"], c["node_j"])):
            vd = grid_v[:, d] * inv - (float(self.gravity_dt) if d else 0.0)
            wall = ((node < 3) & (vd < 0)) | ((node > g - 3) & (vd > 0))
            out.append(lib.where(wall, lib.zeros_like(vd), vd))
        grid_o = lib.stack(out, 1)
        # G2P: the nine nodes gathered at once.
        weight = lib.stack([w[li][:, 0] * w[lj][:, 1] for li in range(3) for lj in range(3)], 0)
        dpos = [lib.stack([li - fx[:, e] if e == 0 else lj - fx[:, e] for li in range(3)
                           for lj in range(3)], 0) for e in range(2)]
        go = grid_o[index].reshape(9, self.n, 2)
        wv = [weight * go[:, :, d] for d in range(2)]
        four = float(F32(4) * self.inv_dx)
        nv = lib.stack([wv[d].sum(0) for d in range(2)], 1)
        nc = lib.stack([((four * wv[d]) * dpos[e]).sum(0) for d in range(2) for e in range(2)], 1)
        return (x + dt * nv, nv, nc, lib.stack(nf, 1))

    def loss(self, xp, state, v0, c):
        e = (state[0] - c["target"]) ** 2
        return (e[:, 0] + e[:, 1]).sum()


class Wave:
    """bench/workloads/Wave.cpp; parameter p[0]."""

    def __init__(self, size, steps):
        n = self.n = SIZES["wave"][size]
        r, c = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        dr, dc = (r - 0.4 * n) / (0.1 * n), (c - 0.5 * n) / (0.1 * n)
        self.param0 = f32(np.exp(-0.5 * (dr * dr + dc * dc)))
        self.consts = {"target": f32(0.1 * np.sin(2 * np.pi * r / n) * np.cos(2 * np.pi * c / n))}

    def init(self, xp, p0, c):
        return (p0, p0)

    def step(self, xp, state, t, p0, c):
        prev, now = state
        q = xp.pad1(now)
        lap = -4.0 * now + q[:-2, 1:-1] + q[2:, 1:-1] + q[1:-1, :-2] + q[1:-1, 2:]
        return (now, 2.0 * now - prev + float(F32(1.0 / 3.0)) * lap)

    def loss(self, xp, state, p0, c):
        return (float(F32(1.0 / (self.n * self.n))) * (c["target"] - state[1]) ** 2).sum()


class Smoke:
    """bench/workloads/Smoke.cpp; parameter v[0]."""

    def __init__(self, size, steps):
        n, self.jacobi = SIZES["smoke"][size]
        self.n = n
        r, c = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")

        def blob(cr, cc):
            dr, dc = (r - cr * n) / (0.15 * n), (c - cc * n) / (0.15 * n)
            return f32(np.exp(-0.5 * (dr * dr + dc * dc)))
        tau = 2 * np.pi
        self.param0 = f32(np.stack([0.3 * np.sin(tau * c / n) + 0.1,
                                    0.5 + 0.3 * np.cos(tau * r / n)], -1))
        self.consts = {"s0": blob(0.5, 0.3), "target": blob(0.5, 0.7),
                       "rows": f32(r), "cols": f32(c)}

    def advect(self, xp, field, vel, c):
        n = self.n
        pr, pc = c["rows"] - vel[..., 0] + float(n), c["cols"] - vel[..., 1] + float(n)
        wr, wc = xp.to_int(pr), xp.to_int(pc)
        fr, fc = pr - xp.to_float(wr), pc - xp.to_float(wc)
        r0, c0 = (wr - n) % n, (wc - n) % n
        r1, c1 = (r0 + 1) % n, (c0 + 1) % n
        top = field[r0, c0] + fc * (field[r0, c1] - field[r0, c0])
        bottom = field[r1, c0] + fc * (field[r1, c1] - field[r1, c0])
        return top + fr * (bottom - top)

    def init(self, xp, v0, c):
        return (v0, c["s0"])

    def step(self, xp, state, t, v0, c):
        lib, (v, s) = xp.lib, state
        roll = lib.roll
        vu = lib.stack([self.advect(xp, v[..., 0], v, c), self.advect(xp, v[..., 1], v, c)], -1)
        div = -0.5 * ((roll(vu[..., 0], -1, 0) - roll(vu[..., 0], 1, 0))
                      + (roll(vu[..., 1], -1, 1) - roll(vu[..., 1], 1, 1)))
        p = xp.zeros(self.n, self.n)
        for _ in range(self.jacobi):
            p = (div + (roll(p, 1, 0) + roll(p, -1, 0)) + (roll(p, 1, 1) + roll(p, -1, 1))) * 0.25
        v = lib.stack([vu[..., 0] - 0.5 * (roll(p, -1, 0) - roll(p, 1, 0)),
                       vu[..., 1] - 0.5 * (roll(p, -1, 1) - roll(p, 1, 1))], -1)
        return (v, self.advect(xp, s, v, c))

    def loss(self, xp, state, v0, c):
        return (float(F32(1.0 / (self.n * self.n))) * (c["target"] - state[1]) ** 2).sum()


class Billiards:
    """bench/workloads/Billiards.cpp; parameter v[0]. Pairs as n x n masks."""
    DT, RADIUS, ELASTICITY = 0.003, 0.03, 0.8

    def __init__(self, size, steps):
        layers = SIZES["billiards"][size]
        self.n = 1 + layers * (layers + 1) // 2
        x0, gap = [(0.4, 0.5 - 0.004)], 2.04 * self.RADIUS
        for layer in range(layers):
            x0 += [(0.5 + layer * gap, 0.5 + j * gap - layer * self.RADIUS * 0.7)
                   for j in range(layer + 1)]
        v0 = np.zeros((self.n, 2))
        v0[0] = (2.0, 0.05)
        self.param0 = f32(v0)
        self.consts = {"x0": f32(x0), "goal": f32([0.9, 0.75]), "eye": np.eye(self.n, dtype=bool)}

    def init(self, xp, v0, c):
        return (c["x0"], v0)

    def step(self, xp, state, t, v0, c):
        lib, (x, v), dt, two_r = xp.lib, state, self.DT, 2 * self.RADIUS
        xi = x + dt * v
        dist = xi[:, None, :] - xi[None, :, :]
        rel = v[:, None, :] - v[None, :, :]
        eye = c["eye"]
        # 1 on the diagonal: no 0/0 there, forward or backward.
        norm = lib.sqrt(lib.where(eye, lib.ones_like(dist[..., 0]),
                                  dist[..., 0] * dist[..., 0] + dist[..., 1] * dist[..., 1]))
        direction = dist / norm[..., None]
        projected = direction[..., 0] * rel[..., 0] + direction[..., 1] * rel[..., 1]
        hit = (~eye) & (norm < two_r) & (projected < 0)
        strength = float(F32(-(1 + self.ELASTICITY) * 0.5)) * projected
        toi = (norm - two_r) / xp.minimum(projected, -1e-3)
        early = xp.minimum(toi - dt, 0.0)
        imp = strength[..., None] * direction
        zero = lib.zeros_like(imp)
        impulse = lib.where(hit[..., None], imp, zero).sum(1)
        shift = lib.where(hit[..., None], early[..., None] * imp, zero).sum(1)
        v = v + impulse
        return (x + dt * v + shift, v)

    def loss(self, xp, state, v0, c):
        e = (state[0][self.n - 1] - c["goal"]) ** 2
        return e[0] + e[1]


class Newton:
    """bench/workloads/Newton.cpp; parameter k. M masked iterations (see above)."""
    DT, DIFFUSION, OMEGA, MAX_ITERATIONS, TOL = 0.1, 0.2, 3.0, 30, 1e-5

    def __init__(self, size, steps):
        n = self.n = SIZES["newton"][size]
        e = np.arange(n)
        self.param0 = f32(27.5 + 22.5 * hash_uniform(e, 12))
        self.consts = {"y0": f32(1.0 + 0.5 * hash_uniform(e, 11)),
                       "amp": f32(0.5 + 0.5 * hash_uniform(e, 13)),
                       "target": f32(0.3 + 0.1 * hash_uniform(e, 14)), "e": f32(e)}
        self.iterations = self.MAX_ITERATIONS

    def prepare(self, xp, k, c, steps):
        """Sets the iterations to the most any element needs (an untimed forward)."""
        self.iterations, most, state = None, 0, self.init(xp, k, c)
        for t in range(steps):
            state, used = self.advance(xp, state, t, k, c)
            most = max(most, used)
        self.iterations = most
        return most

    def init(self, xp, k, c):
        return c["y0"]

    def advance(self, xp, y, t, k, c):
        lib, dt = xp.lib, self.DT
        phase = xp.phase(t, self.OMEGA * dt) + 0.7 * c["e"]
        rhs = y + (dt * c["amp"]) * lib.sin(phase)
        tol = float(F32(self.TOL)) * (1.0 + abs(rhs))
        dtk = dt * k
        z, done, used = y, None, 0
        count = self.MAX_ITERATIONS if self.iterations is None else self.iterations
        for it in range(count):
            g = (z + dtk * (z * (z * z))) - rhs
            done = (abs(g) <= tol) if done is None else done | (abs(g) <= tol)
            if self.iterations is None and xp.all(done):
                break
            z = lib.where(done, z, z - g / (1.0 + (3.0 * dtk) * (z * z)))
            used = it + 1
        lap = (lib.roll(z, 1, 0) + lib.roll(z, -1, 0)) - 2.0 * z
        return z + self.DIFFUSION * lap, used

    def step(self, xp, state, t, k, c):
        return self.advance(xp, state, t, k, c)[0]

    def loss(self, xp, state, k, c):
        return (float(F32(1.0 / self.n)) * (state - c["target"]) ** 2).sum()


SIMS = {"mass_spring": MassSpring, "mpm": Mpm, "wave": Wave, "smoke": Smoke,
        "billiards": Billiards, "newton": Newton}


# --- measuring ---------------------------------------------------------------------

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from framework_peers import timed  # noqa: E402 - the same timing as qd-bench-gpu's peers


def checksum(grad):
    if hasattr(grad, "detach"):  # a PyTorch tensor, on any device
        grad = grad.detach().cpu().numpy()
    g = np.asarray(grad, dtype=np.float64)
    return float(g.sum()), float(np.sqrt((g * g).sum()))


def first_axis_n(model):
    """The n of the rows: the first array's second axis in bench/workloads."""
    return model.n


def measure(impl, name, size, model, fns, args, note):
    """One row: fns has fwd() -> loss, grad() -> (loss, gradient), sync(out),
    and optionally reset_memory() and memory() -> bytes."""
    log("%s %s %s: forward" % (impl, name, size))
    _, fwd_med, fwd_min, _ = timed(fns["fwd"], fns["sync"], args.reps, args.warmup)
    log("%s %s %s: gradient" % (impl, name, size))
    if "reset_memory" in fns:
        fns["reset_memory"]()
    first, med, mn, (loss, grad) = timed(fns["grad"], fns["sync"], args.reps, args.warmup)
    gsum, gnorm = checksum(grad)
    steps = args.steps
    row = {"workload": name, "size": size, "n": first_axis_n(model), "steps": steps,
           "impl": impl, "fwd_ms": fwd_med / steps, "fwd_ms_min": fwd_min / steps,
           "ms_median": med / steps, "ms_min": mn / steps, "loss": float(loss),
           "grad_sum": gsum, "grad_norm": gnorm, "first_call_s": first, "note": note}
    if "memory" in fns:
        row["mem_bytes"] = fns["memory"]()
    if impl.startswith("jax"):
        row["compile_s"] = first
    log("%s %s %s: fwd %.4f ms, grad %.4f ms per step; loss %.7g, grad sum %.7g, norm %.7g"
        % (impl, name, size, row["fwd_ms"], row["ms_median"], row["loss"], gsum, gnorm))
    return row


def each_case(args):
    for name in args.only:
        for size in args.sizes:
            yield name, size


def run_cases(impl, args, out, make_fns, cleanup):
    """Measures every case with make_fns(model) -> (fns, note); a case that
    fails (out of memory, say) is left out with its reason in "errors"."""
    for name, size in each_case(args):
        try:
            model = SIMS[name](size, args.steps)
            fns, note = make_fns(model)
            out["rows"].append(measure(impl, name, size, model, fns, args, note))
        except Exception as e:  # noqa: BLE001 - one case's failure is reported, not fatal
            traceback.print_exc(file=sys.stderr)
            out.setdefault("errors", []).append("%s %s %s: %s" % (impl, name, size, e))
        finally:
            cleanup()


def run_torch(args, out):
    impl = "torch_cpu" if args.device == "cpu" else "torch"
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure is a reason
        out["status"][impl] = {"available": False, "reason": "torch not importable: %s" % e}
        return
    if args.device != "cpu" and not torch.cuda.is_available():
        out["status"][impl] = {"available": False,
                               "reason": "torch %s sees no CUDA device" % torch.__version__}
        return
    dev = torch.device("cpu" if args.device == "cpu" else "cuda")
    cuda = dev.type == "cuda"
    name = torch.cuda.get_device_name(0) if cuda else "cpu, %d threads" % torch.get_num_threads()
    out["status"][impl] = {"available": True, "version": torch.__version__, "device": name}
    xp = TorchOps(torch, dev)

    def make_fns(model):
        p0, c = xp.arr(model.param0), {k: xp.arr(v) for k, v in model.consts.items()}
        note = "eager autograd, float32, " + name
        if hasattr(model, "prepare"):
            with torch.no_grad():
                note += "; %d masked Newton iterations" % model.prepare(xp, p0, c, args.steps)

        def fwd():
            with torch.no_grad():
                return run_loss(model, xp, p0, c, args.steps)

        def grad():
            p = p0.detach().requires_grad_(True)
            loss = run_loss(model, xp, p, c, args.steps)
            (g,) = torch.autograd.grad(loss, [p])
            return loss.detach(), g

        def sync(_):
            if cuda:
                torch.cuda.synchronize()
        fns = {"fwd": fwd, "grad": grad, "sync": sync}
        if cuda:
            fns["reset_memory"] = torch.cuda.reset_peak_memory_stats
            fns["memory"] = torch.cuda.max_memory_allocated
        return fns, note

    run_cases(impl, args, out, make_fns, lambda: torch.cuda.empty_cache() if cuda else None)


def run_jax(args, out):
    impl = "jax_cpu" if args.device == "cpu" else "jax"
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
    except Exception as e:  # noqa: BLE001
        out["status"][impl] = {"available": False, "reason": "jax not importable: %s" % e}
        return
    try:
        dev = jax.devices("cpu" if args.device == "cpu" else "gpu")[0]
    except RuntimeError as e:
        out["status"][impl] = {"available": False,
                               "reason": "jax %s has no %s: %s" % (jax.__version__, args.device, e)}
        return
    out["status"][impl] = {"available": True, "version": jax.__version__, "device": str(dev)}
    # float32 matrix products in float32 (XLA may otherwise use TF32 on the GPU), as the
    # other implementations compute them.
    jax.config.update("jax_default_matmul_precision", "highest")
    xp = JaxOps(jax, dev)

    def make_fns(model):
        p0, c = xp.arr(model.param0), {k: xp.arr(v) for k, v in model.consts.items()}
        note = "jit(value_and_grad) of a lax.scan over the steps, float32 (matmul precision " \
            "highest)"
        if hasattr(model, "prepare"):
            note += "; %d masked Newton iterations" % model.prepare(xp, p0, c, args.steps)

        def loss(p, consts):
            return run_loss(model, xp, p, consts, args.steps)
        fwd_jit, grad_jit = jax.jit(loss), jax.jit(jax.value_and_grad(loss))

        def sync(o):
            if o is not None:
                jax.block_until_ready(o)
        fns = {"fwd": lambda: fwd_jit(p0, c), "grad": lambda: grad_jit(p0, c), "sync": sync}
        try:
            stats = dev.memory_stats()
        except Exception:  # noqa: BLE001 - a device without the statistics
            stats = None
        if stats:
            fns["memory"] = lambda: int(dev.memory_stats().get("peak_bytes_in_use", 0))
        return fns, note

    run_cases(impl, args, out, make_fns, lambda: None)


# --- --check -------------------------------------------------------------------------

def reference_rows(out):
    """Compares the small 32-step rows with REFERENCE (ref_pass); returns
    whether all of them agree."""
    ok = True
    for row in out["rows"]:
        ref = REFERENCE.get(row["workload"])
        if ref is None or row["size"] != "small" or row["steps"] != REFERENCE_STEPS:
            continue
        loss, gsum, gnorm = ref
        errs = (abs(row["loss"] - loss) / max(abs(loss), 1e-30),
                abs(row["grad_sum"] - gsum) / max(abs(gsum), gnorm, 1e-30),
                abs(row["grad_norm"] - gnorm) / max(gnorm, 1e-30))
        row["ref_pass"] = all(e <= CHECK_RTOL for e in errs)
        ok = ok and row["ref_pass"]
        log("reference %s %s: loss %.7g (ref %.7g), grad sum %.7g (ref %.7g), norm %.7g (ref "
            "%.7g): rel err %.1e %.1e %.1e %s" % (row["impl"], row["workload"], row["loss"], loss,
                                                 row["grad_sum"], gsum, row["grad_norm"], gnorm,
                                                 *errs, "PASS" if row["ref_pass"] else "FAIL"))
    return ok


def check_rows(out, references_ok):
    """--check: whether every framework ran and every row agrees."""
    ok = references_ok
    for impl, st in out["status"].items():
        if not st.get("available"):
            log("check %s: not available: %s" % (impl, st.get("reason")))
            ok = False
    for e in out.get("errors", []):
        log("check: failed: " + e)
        ok = False
    out["check"] = {"pass": ok, "rtol": CHECK_RTOL}
    log("check: %s" % ("PASS" if ok else "FAIL"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frameworks", default="jax,torch")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--sizes", default="small,gpu", help="small, large and/or gpu")
    ap.add_argument("--only", default=",".join(SIMS), help="simulations")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--check", action="store_true",
                    help="small size, 32 steps, one run: compare with REFERENCE (exit 1 if off)")
    args = ap.parse_args()
    args.only = [s for s in args.only.split(",") if s]
    args.sizes = [s for s in args.sizes.split(",") if s]
    for s in args.only:
        if s not in SIMS:
            ap.error("no simulation '%s' (%s)" % (s, ", ".join(SIMS)))
    for s in args.sizes:
        if s not in SIZES["wave"]:
            ap.error("no size '%s' (small, large, gpu)" % s)
    if args.check:
        args.sizes, args.steps, args.reps, args.warmup = ["small"], 32, 1, 0
    args.reps, args.warmup = max(1, args.reps), max(0, args.warmup)

    out = {"source": "sims_framework_peers.py", "status": {}, "rows": []}
    frameworks = args.frameworks.split(",")
    if "jax" in frameworks:
        run_jax(args, out)
    if "torch" in frameworks:
        run_torch(args, out)
    parts = ["%s %s on %s" % (impl, st.get("version", "?"), st.get("device", "?"))
             for impl, st in out["status"].items() if st.get("available")]
    parts.append("%d steps; ms per step, median (min) of %d runs after %d warm-up, wall clock "
                 "with synchronisation" % (args.steps, args.reps, args.warmup))
    out["info"] = "; ".join(parts)
    references_ok = reference_rows(out)
    status = 0 if not args.check or check_rows(out, references_ok) else 1
    print(json.dumps(out))
    return status


if __name__ == "__main__":
    sys.exit(main())
