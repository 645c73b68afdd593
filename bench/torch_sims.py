#!/usr/bin/env python3
"""PyTorch CPU (eager autograd, float32) peers of qd-bench-sims.

Runs the mass_spring, wave and smoke simulations of bench/workloads with
the same sizes, initial data (hash_uniform) and operations, each time
step's state a new tensor, and prints one JSON object that qd-bench-sims
reads:

  {"available": true, "version": ..., "threads": N,
   "wave": {"fwd_ms": ..., "grad_ms": ..., "loss": ...}, ...}

fwd_ms is the forward without autograd, grad_ms backward() after a forward
recording the graph, both per time step, each the minimum over --reps runs.
Without torch it prints {"available": false, "reason": ...}.
"""
import argparse
import json
import math
import time

SIZES = {  # as the factories of bench/workloads/*.cpp
    "mass_spring": {"small": (4, 2, 8, 4), "large": (32, 8, 32, 10)},
    "wave": {"small": 16, "large": 256},
    "smoke": {"small": (12, 4), "large": (110, 6)},
}


def hash_uniform(k, salt):
    v = math.sin(k * 12.9898 + salt * 78.233) * 43758.5453
    return 2.0 * (v - math.floor(v)) - 1.0


def mass_spring(torch, size, steps):
    cols, rows, hidden, waves = SIZES["mass_spring"][size]
    dt, damping, gravity, ground, omega = 0.004, 15.0, -4.8, 0.1, 10.0
    spacing, stiffness, actuation = 0.05, 3e4, 0.15
    n = cols * rows
    springs = []
    node = lambda c, r: r * cols + c  # noqa: E731
    for r in range(rows):
        for c in range(cols):
            if c + 1 < cols:
                springs.append((node(c, r), node(c + 1, r), 1))
            if r + 1 < rows:
                springs.append((node(c, r), node(c, r + 1), 0))
            if c + 1 < cols and r + 1 < rows:
                springs.append((node(c, r), node(c + 1, r + 1), 0))
                springs.append((node(c + 1, r), node(c, r + 1), 0))
    s = len(springs)
    inputs = waves + 4 * n + 2
    pos = lambda k: ((k % cols) * spacing, (k // cols) * spacing)  # noqa: E731
    a = torch.tensor([sp[0] for sp in springs])
    b = torch.tensor([sp[1] for sp in springs])
    rest = torch.tensor([math.hypot(pos(sp[0])[0] - pos(sp[1])[0], pos(sp[0])[1] - pos(sp[1])[1])
                         for sp in springs], dtype=torch.float32)
    act_scale = torch.tensor([actuation if sp[2] else 0.0 for sp in springs])
    x0 = torch.tensor([[0.1 + c * spacing, ground + 0.01 + r * spacing]
                       for r in range(rows) for c in range(cols)], dtype=torch.float32)
    scale1 = math.sqrt(2.0 / (hidden + inputs)) * 2
    w1 = torch.tensor([scale1 * hash_uniform(k, 1) for k in range(hidden * inputs)],
                      dtype=torch.float32).reshape(hidden, inputs)
    scale2 = math.sqrt(2.0 / (hidden + s)) * 3
    w2 = torch.tensor([scale2 * hash_uniform(k, 2) for k in range(s * hidden)],
                      dtype=torch.float32).reshape(s, hidden)
    goal = torch.tensor([0.9, 0.2])
    shifts = torch.arange(waves, dtype=torch.float32) * (2 * math.pi / waves)
    decay = math.exp(-dt * damping)

    def params():
        return [w1.clone().requires_grad_(), torch.zeros(hidden, requires_grad=True),
                w2.clone().requires_grad_(), torch.zeros(s, requires_grad=True)]

    def run(p):
        w1_, b1_, w2_, b2_ = p
        x, v = x0, torch.zeros(n, 2)
        for t in range(steps):
            center = x.mean(0)
            state = torch.cat([x - center, v], 1).reshape(-1) * 0.05
            h = torch.tanh(b1_ + w1_[:, :waves] @ torch.sin(t * omega * dt + shifts)
                           + w1_[:, waves:waves + 4 * n] @ state + w1_[:, -2:] @ (goal - center))
            act = torch.tanh(w2_ @ h + b2_)
            dist = x[a] - x[b]
            length = dist.norm(dim=1) + 1e-4
            target = rest * (1 + act_scale * act)
            imp = (dt * (length - target) * stiffness / length).unsqueeze(1) * dist
            v_inc = torch.zeros(n, 2).index_add(0, a, -imp).index_add(0, b, imp)
            v = decay * v + v_inc + torch.tensor([0.0, dt * gravity])
            stop = ((x[:, 1] < ground) & (v[:, 1] < 0)).unsqueeze(1)
            v = torch.where(stop, torch.zeros_like(v), v)
            x = x + dt * v
        return -x[-1, 0]
    return params, run


def wave(torch, size, steps):
    n = SIZES["wave"][size]
    k = 1.0 / 3.0
    p0 = torch.tensor([[math.exp(-0.5 * (((r - 0.4 * n) / (0.1 * n)) ** 2 + ((c - 0.5 * n) / (0.1 * n)) ** 2))
                        for c in range(n)] for r in range(n)], dtype=torch.float32)
    target = torch.tensor([[0.1 * math.sin(2 * math.pi * r / n) * math.cos(2 * math.pi * c / n)
                            for c in range(n)] for r in range(n)], dtype=torch.float32)
    pad = torch.nn.functional.pad

    def params():
        return [p0.clone().requires_grad_()]

    def run(p):
        prev = now = p[0]
        for _ in range(steps):
            q = pad(now, (1, 1, 1, 1))
            lap = -4 * now + q[:-2, 1:-1] + q[2:, 1:-1] + q[1:-1, :-2] + q[1:-1, 2:]
            prev, now = now, 2 * now - prev + k * lap
        return ((target - now) ** 2).mean()
    return params, run


def smoke(torch, size, steps):
    n, jacobi = SIZES["smoke"][size]

    def blob(r, c, cr, cc):
        return math.exp(-0.5 * (((r - cr * n) / (0.15 * n)) ** 2 + ((c - cc * n) / (0.15 * n)) ** 2))
    tau = 2 * math.pi
    v0 = torch.tensor([[[0.3 * math.sin(tau * c / n) + 0.1, 0.5 + 0.3 * math.cos(tau * r / n)]
                        for c in range(n)] for r in range(n)], dtype=torch.float32)
    s0 = torch.tensor([[blob(r, c, 0.5, 0.3) for c in range(n)] for r in range(n)])
    target = torch.tensor([[blob(r, c, 0.5, 0.7) for c in range(n)] for r in range(n)])
    cells = torch.arange(n, dtype=torch.float32)
    rows, cols = cells.unsqueeze(1).expand(n, n), cells.unsqueeze(0).expand(n, n)
    roll = torch.roll

    def advect(field, vel):
        pr = rows - vel[..., 0] + n
        pc = cols - vel[..., 1] + n
        wr, wc = pr.detach().floor(), pc.detach().floor()
        fr, fc = pr - wr, pc - wc
        r0, c0 = wr.long() % n, wc.long() % n
        r1, c1 = (r0 + 1) % n, (c0 + 1) % n
        at = lambda r, c: field[r, c]  # noqa: E731
        top = at(r0, c0) + fc * (at(r0, c1) - at(r0, c0))
        bottom = at(r1, c0) + fc * (at(r1, c1) - at(r1, c0))
        return top + fr * (bottom - top)

    def params():
        return [v0.clone().requires_grad_()]

    def run(p):
        v, s = p[0], s0
        for _ in range(steps):
            vu = torch.stack([advect(v[..., 0], v), advect(v[..., 1], v)], -1)
            div = -0.5 * ((roll(vu[..., 0], -1, 0) - roll(vu[..., 0], 1, 0))
                          + (roll(vu[..., 1], -1, 1) - roll(vu[..., 1], 1, 1)))
            pr = torch.zeros(n, n)
            for _ in range(jacobi):
                pr = (div + (roll(pr, 1, 0) + roll(pr, -1, 0))
                      + (roll(pr, 1, 1) + roll(pr, -1, 1))) * 0.25
            gr = roll(pr, -1, 0) - roll(pr, 1, 0)
            gc = roll(pr, -1, 1) - roll(pr, 1, 1)
            v = torch.stack([vu[..., 0] - 0.5 * gr, vu[..., 1] - 0.5 * gc], -1)
            s = advect(s, v)
        return ((target - s) ** 2).mean()
    return params, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--size", choices=["small", "large"], default="small")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="mass_spring,wave,smoke")
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - report any import failure
        print(json.dumps({"available": False, "reason": "python3-torch not importable: %s" % e}))
        return
    torch.set_default_dtype(torch.float32)
    out = {"available": True, "version": torch.__version__, "threads": torch.get_num_threads()}
    builders = {"mass_spring": mass_spring, "wave": wave, "smoke": smoke}
    for name in args.only.split(","):
        if name not in builders:
            continue
        params, run = builders[name](torch, args.size, args.steps)
        fwd = grad = float("inf")
        for _ in range(args.reps):
            with torch.no_grad():
                t0 = time.perf_counter()
                run(params())
                fwd = min(fwd, time.perf_counter() - t0)
            loss = run(params())
            t0 = time.perf_counter()
            loss.backward()
            grad = min(grad, time.perf_counter() - t0)
        out[name] = {"fwd_ms": fwd * 1e3 / args.steps, "grad_ms": grad * 1e3 / args.steps,
                     "loss": float(loss)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
