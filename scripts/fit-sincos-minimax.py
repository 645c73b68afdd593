#!/usr/bin/env python3
"""Fits the sin and cos polynomials of lib/codegen/spirv/SpirvMath.cpp.

On |r| <= pi/4 with z = r^2:
    sin r ~ r + r^3 (s1 + s2 z + ... )      (coefficients s1, s2, ...)
    cos r ~ 1 + z (c1 + c2 z + ... )        (coefficients c1, c2, ...)
The fitted part P(z) approximates g(z) = (sin r - r) / r^3, or
(cos r - 1) / z, so that the error w(z) (g(z) - P(z)) with w = r^3 / sin r,
or z / cos r, is the error relative to sin r (cos r). A Remez exchange
minimizes its largest magnitude on 0 < z <= (pi/4)^2. The coefficients are
then rounded to the target float one at a time, lowest degree first, and
after each rounding the higher ones are fitted again with it held.

Needs mpmath (pip install mpmath); takes a minute or two. Prints each
polynomial's coefficients (decimal and hex) and the largest relative error
of the rounded polynomial, sampled on 20000 points.
"""
import struct

from mpmath import cos, lu_solve, matrix, mp, mpf, nstr, pi, sin, sqrt

mp.dps = 60
Z = (pi / 4)**2  # the interval in z


def to_float(v, bits):
    """v rounded to f32 (bits 24) or f64 (bits 53)."""
    if bits == 24:
        return mpf(struct.unpack('f', struct.pack('f', float(v)))[0])
    return mpf(float(v))


def sine():
    """g, w and g(0) for sin."""
    return (lambda z: (sin(sqrt(z)) - sqrt(z)) / z**mpf(1.5),
            lambda z: z**mpf(1.5) / sin(sqrt(z)), mpf(-1) / 6)


def cosine():
    """g, w and g(0) for cos."""
    return lambda z: (cos(sqrt(z)) - 1) / z, lambda z: z / cos(sqrt(z)), mpf(-1) / 2


def polynomial(coeffs, z):
    return sum(c * z**k for k, c in enumerate(coeffs))


def largest_error(err, samples=20000):
    return max(abs(err(Z * i / samples)) for i in range(1, samples + 1))


def extrema(err, grid_size=2000):
    """The local maxima of |err| on (0, Z]: a grid, then golden sections."""
    grid = [Z * i / grid_size for i in range(1, grid_size + 1)]
    vals = [err(z) for z in grid]
    found = []
    for i, v in enumerate(vals):
        if i > 0 and abs(vals[i - 1]) > abs(v):
            continue
        if i + 1 < len(vals) and abs(vals[i + 1]) > abs(v):
            continue
        if i == 0 or i + 1 == len(vals):
            found.append(grid[i])
            continue
        lo, hi, sign = grid[i - 1], grid[i + 1], 1 if v > 0 else -1
        for _ in range(60):
            a, b = lo + (hi - lo) * mpf('0.381966'), lo + (hi - lo) * mpf('0.618034')
            if sign * err(a) > sign * err(b):
                hi = b
            else:
                lo = a
        found.append((lo + hi) / 2)
    return found


def remez(g, w, g0, held, n, steps=30):
    """P of n coefficients, the first ones `held`, minimizing max |w (g - P)|."""
    free = n - len(held)
    gz = lambda z: g0 if z == 0 else g(z)
    # free + 1 reference points (Chebyshev-like, away from z = 0 where w = 0).
    ref = [Z * (1 - mp.cos(mp.pi * (i + mpf(0.5)) / (free + 1))) / 2 for i in range(free)] + [Z]
    coeffs = list(held)
    for _ in range(steps):
        # P(z_i) + (-1)^i E / w(z_i) = g(z_i) for the free coefficients and E.
        a, rhs = matrix(free + 1, free + 1), matrix(free + 1, 1)
        for i, z in enumerate(ref):
            for j in range(free):
                a[i, j] = z**(len(held) + j)
            a[i, free] = (-1)**i / w(z)
            rhs[i] = gz(z) - polynomial(held, z)
        sol = lu_solve(a, rhs)
        coeffs = list(held) + [sol[j] for j in range(free)]
        err = lambda z: w(z) * (gz(z) - polynomial(coeffs, z))
        # The new reference: the largest extremum of each run of one sign.
        runs = []
        for z in extrema(err):
            e = err(z)
            if runs and (runs[-1][1] > 0) == (e > 0):
                if abs(e) > abs(runs[-1][1]):
                    runs[-1] = (z, e)
            else:
                runs.append((z, e))
        while len(runs) > free + 1:
            runs.pop(0 if abs(runs[0][1]) < abs(runs[-1][1]) else -1)
        if len(runs) < free + 1:
            break
        new_ref = [z for z, _ in runs]
        if all(abs(a - b) < Z * mpf(10)**-40 for a, b in zip(new_ref, ref)):
            break
        ref = new_ref
    return coeffs


def fit(kind, n, bits):
    g, w, g0 = kind()
    held = []
    while len(held) < n:
        held.append(to_float(remez(g, w, g0, held, n)[len(held)], bits))
    return held, largest_error(lambda z: w(z) * (g(z) - polynomial(held, z)))


def main():
    for name, kind, n, bits in [('f32 sin', sine, 3, 24), ('f32 cos', cosine, 4, 24),
                                ('f64 sin', sine, 6, 53), ('f64 cos', cosine, 7, 53)]:
        coeffs, err = fit(kind, n, bits)
        print(f'{name}: {n} coefficients, largest relative error {nstr(err, 5)} '
              f'= 2^{float(mp.log(err, 2)):.2f}')
        for c in coeffs:
            print(f'    {float(c)!r:>24}  {float(c).hex()}')


if __name__ == '__main__':
    main()
