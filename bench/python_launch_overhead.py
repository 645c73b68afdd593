#!/usr/bin/env python3
"""Per-launch overhead of the Python package (python/qd) on the CPU backend.

Times a kernel with 4 arguments (a scalar and three 16-element arrays) called from Python
with NumPy arrays, with PyTorch tensors and with qd.Buffers, against the same launch made
by one ctypes call of qd_program_launch with the arguments prepared beforehand (what the
C API itself costs: validation, sizing, the CPU backend's dispatch). The overhead printed
is the difference: what the package adds per call. Best of 5 runs of N launches each.

  PYTHONPATH=python /usr/bin/python3 bench/python_launch_overhead.py [N]

The library is found as the package finds it (QD_C_LIBRARY, or build/lib/capi of the
checkout).
"""
import os
import sys
import timeit

import qd
from qd._lib import Arg, lib

SAXPY = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests",
                          "saxpy.qd")).read()


def best_us(fn, n):
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    backend = qd.backend("cpu")
    kernel = qd.Module.parse(SAXPY).kernel("saxpy", backend)
    buffers = [qd.Buffer.zeros((16,), "f32") for _ in range(3)]
    x, y, out = buffers
    args = (Arg * 4)(Arg(b"a", 1, 2.0, 0, None, None, None),
                     Arg(b"x", 0, 0.0, 0, x.handle, None, None),
                     Arg(b"y", 0, 0.0, 0, y.handle, None, None),
                     Arg(b"out", 0, 0.0, 0, out.handle, None, None))
    program, handle = kernel.program.handle, backend.handle
    launch = lib.qd_program_launch
    c_us = best_us(lambda: launch(program, handle, b"saxpy", 4, args, 0), n)
    print(f"C API launch (one ctypes call, arguments prepared): {c_us:6.2f} us")
    rows = [("qd.Buffer", buffers)]
    try:
        import numpy as np
        rows.append(("NumPy", [np.zeros(16, np.float32) for _ in range(3)]))
    except ImportError:
        print("NumPy: skipped (not installed)")
    try:
        import torch
        rows.append(("PyTorch", [torch.zeros(16) for _ in range(3)]))
    except ImportError:
        print("PyTorch: skipped (not installed)")
    for name, (ax, ay, aout) in rows:
        us = best_us(lambda: kernel(a=2.0, x=ax, y=ay, out=aout), n)
        print(f"Python call, 4 arguments, {name + ':':10s} {us:6.2f} us per launch, "
              f"overhead {us - c_us:6.2f} us")


if __name__ == "__main__":
    main()
