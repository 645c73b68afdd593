//===- SimPeerMpm.cuh - 2-D MLS-MPM by hand, forward and reverse --*- CUDA -*-===//
//
// bench/workloads/Mpm.cpp and MpmEmitter.cpp written by hand: the same
// particles, grid, constants and float operations (the stencil column's
// x offset stepped by dx as the qd kernel's loop-carried local is), every
// step's particles and grid kept, and the gradient of the loss with
// respect to the initial velocities by hand-written reverse kernels, the
// steps in reverse order. One kernel per phase:
//
//   forward  clear the step's grid (cudaMemsetAsync), P2G (a thread per
//            particle, atomic adds into the 3x3 nodes), grid update (a
//            thread per node), G2P (a thread per particle); the loss a block
//            sum per block and one atomic add
//   reverse  G2P (atomic adds into the nodes' velocity adjoints: a node's
//            particles are many), the grid update (a thread per node, which
//            also clears the adjoints it consumed), P2G (a thread per
//            particle gathering the nodes' adjoints: no atomics)
//
// The particles' adjoints are two slices (this step's and the next's); the
// nodes' adjoints one.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "SimPeerCommon.cuh"

namespace qdpeers::mpm {

enum Slot {
  X,
  V,
  C,
  F,
  GRIDV,
  GRIDM,
  GRIDO,
  TARGET,
  LOSS, // the simulation
  GX,
  GV,
  GC,
  GF,
  GGO,
  GGV,
  GGM, // adjoints
  kSlots
};

struct Dims {
  int n = 0, g = 0, steps = 0;
};

template <typename R> struct View {
  Dims d;
  R dx, invDx, dt, stressK, gravityDt, four;
  R *p[kSlots];

  /// Particle q's `width` values of step t.
  QD_HD R *at(Slot k, int width, int t, int q) const {
    return p[k] + (size_t(t) * d.n + q) * width;
  }
  /// Node `node`'s `width` values of step t.
  QD_HD R *node(Slot k, int width, int t, int node) const {
    return p[k] + (size_t(t) * d.g * d.g + node) * width;
  }
  /// Particle q's adjoint of step t (two slices).
  QD_HD R *adj(Slot k, int width, int t, int q) const {
    return p[k] + ((t % 2) * size_t(d.n) + q) * width;
  }
};

inline bool shapeOf(const std::string &size, int &side, int &grid) {
  if (size == "small")
    side = 8, grid = 32;
  else if (size == "large")
    side = 128, grid = 64;
  else if (size == "gpu")
    side = 512, grid = 256;
  else
    return false;
  return true;
}

/// The arrays and their initial contents, as Mpm::arrays builds them.
inline Layout layout(int side, int grid, int steps, Dims &d) {
  d = {side * side, grid, steps};
  std::vector<double> x0, v0, f0;
  for (int r = 0; r < side; ++r)
    for (int c = 0; c < side; ++c) {
      x0.insert(x0.end(), {0.3 + 0.2 * (c + 0.37) / side, 0.3 + 0.2 * (r + 0.41) / side});
      int64_t k = int64_t(r) * side + c;
      v0.insert(v0.end(), {1.0 + 0.2 * hashUniform(k, 21), 0.5 + 0.2 * hashUniform(k, 22)});
      f0.insert(f0.end(), {1, 0, 0, 1});
    }
  const size_t t1 = size_t(steps) + 1, n = size_t(d.n), g2 = size_t(grid) * grid;
  Layout l;
  l.add(t1 * n * 2, x0);
  l.add(t1 * n * 2, v0);
  l.add(t1 * n * 4);
  l.add(t1 * n * 4, f0);
  for (size_t k : {size_t(steps) * g2 * 2, size_t(steps) * g2, size_t(steps) * g2 * 2})
    l.add(k); // GRIDV, GRIDM, GRIDO
  l.add(2, {0.7, 0.6});
  l.add(1); // LOSS
  for (size_t k : {2 * n * 2, 2 * n * 2, 2 * n * 4, 2 * n * 4, g2 * 2, g2 * 2, g2})
    l.add(k); // GX .. GGM
  l.cleared = {LOSS};
  return l;
}

template <typename R> View<R> view(const Dims &d, R *const *slots) {
  View<R> s;
  s.d = d;
  // MpmEmitter.cpp's constants, computed in float as there.
  const float dt = 2e-4f, invDx = float(d.g);
  s.dx = R(1.0f / float(d.g));
  s.invDx = R(invDx);
  s.dt = R(dt);
  s.stressK = R(-dt * 1.0f * 4 * invDx * invDx);
  s.gravityDt = R(dt * 9.8f);
  s.four = R(4 * invDx);
  for (int k = 0; k < kSlots; ++k)
    s.p[k] = slots[k];
  return s;
}

//===--- per element: forward ---------------------------------------------===//

/// A particle's base node and quadratic B-spline weights per axis.
template <typename R> struct Stencil {
  int base[2];
  R fx[2], w[2][3];
};

template <typename R> QD_HD Stencil<R> stencil(const View<R> &s, const R *x) {
  Stencil<R> st;
  for (int e = 0; e < 2; ++e) {
    R xs = x[e] * s.invDx;
    st.base[e] = int(xs - R(0.5));
    R fx = xs - R(st.base[e]);
    st.fx[e] = fx;
    st.w[e][0] = R(0.5) * ((R(1.5) - fx) * (R(1.5) - fx));
    st.w[e][1] = R(0.75) - (fx - R(1)) * (fx - R(1));
    st.w[e][2] = R(0.5) * ((fx - R(0.5)) * (fx - R(0.5)));
  }
  return st;
}

/// d/d fx of the weights, times their adjoints, into gfx.
template <typename R> QD_HD void stencilBack(const Stencil<R> &st, const R gw[2][3], R gfx[2]) {
  for (int e = 0; e < 2; ++e) {
    R fx = st.fx[e];
    gfx[e] += gw[e][0] * (fx - R(1.5)) - gw[e][1] * (R(2) * (fx - R(1))) + gw[e][2] * (fx - R(0.5));
  }
}

/// f(li, lj, weight, dposx, dposy, node) for P2G's nine nodes, the column's
/// x offset stepped by dx as the qd kernel's loop-carried local is.
template <typename R, typename Fn>
QD_HD void p2gNodes(const View<R> &s, const Stencil<R> &st, Fn f) {
  R offset = -st.fx[0] * s.dx;
  for (int li = 0; li < 3; ++li) {
    R dposx = offset;
    for (int lj = 0; lj < 3; ++lj)
      f(li, lj, st.w[0][li] * st.w[1][lj], dposx, (R(lj) - st.fx[1]) * s.dx,
        (st.base[0] + li) * s.d.g + st.base[1] + lj);
    offset = dposx + s.dx;
  }
}

/// f(li, lj, weight, dpos, node) for G2P's nine nodes (dpos in cells).
template <typename R, typename Fn>
QD_HD void g2pNodes(const View<R> &s, const Stencil<R> &st, Fn f) {
  for (int li = 0; li < 3; ++li)
    for (int lj = 0; lj < 3; ++lj) {
      const R dpos[2] = {R(li) - st.fx[0], R(lj) - st.fx[1]};
      f(li, lj, st.w[0][li] * st.w[1][lj], dpos, (st.base[0] + li) * s.d.g + st.base[1] + lj);
    }
}

/// What P2G computes of a particle before its scatter.
template <typename R> struct Particle {
  Stencil<R> st;
  R c[4], fm[4], nf[4], j, aff[4], mv[2];
  /// The rows of I + dt C: nf[2r + col] = a[r][0] fm[col] + a[r][1] fm[2 + col].
  R a[2][2];
};

template <typename R> QD_HD Particle<R> particle(const View<R> &s, int t, int q) {
  Particle<R> P;
  P.st = stencil(s, s.at(X, 2, t, q));
  for (int k = 0; k < 4; ++k) {
    P.c[k] = s.at(C, 4, t, q)[k];
    P.fm[k] = s.at(F, 4, t, q)[k];
  }
  for (int r = 0; r < 2; ++r) {
    R a0 = s.dt * P.c[2 * r], a1 = s.dt * P.c[2 * r + 1];
    P.a[r][0] = r == 0 ? R(1) + a0 : a0;
    P.a[r][1] = r == 1 ? R(1) + a1 : a1;
    for (int col = 0; col < 2; ++col)
      P.nf[2 * r + col] = P.a[r][0] * P.fm[col] + P.a[r][1] * P.fm[2 + col];
  }
  P.j = P.nf[0] * P.nf[3] - P.nf[1] * P.nf[2];
  R stress = s.stressK * ((R(10) * (P.j - R(1))) * P.j);
  for (int k = 0; k < 4; ++k)
    P.aff[k] = R(1) * P.c[k] + (k == 0 || k == 3 ? stress : R(0));
  for (int e = 0; e < 2; ++e)
    P.mv[e] = R(1) * s.at(V, 2, t, q)[e];
  return P;
}

template <typename R> QD_HD void p2g(const View<R> &s, int t, int q) {
  Particle<R> P = particle(s, t, q);
  for (int k = 0; k < 4; ++k)
    s.at(F, 4, t + 1, q)[k] = P.nf[k];
  p2gNodes(s, P.st, [&](int, int, R weight, R dposx, R dposy, int node) {
    for (int e = 0; e < 2; ++e) {
      R m = P.mv[e] + (P.aff[2 * e] * dposx + P.aff[2 * e + 1] * dposy);
      addTo(&s.node(GRIDV, 2, t, node)[e], weight * m);
    }
    addTo(s.node(GRIDM, 1, t, node), weight * R(1));
  });
}

/// A node in the boundary layer whose velocity points into the wall.
template <typename R> QD_HD bool wall(int index, R v, int g) {
  return (index < 3 && v < R(0)) || (index > g - 3 && v > R(0));
}

template <typename R> QD_HD void gridUpdate(const View<R> &s, int t, int node) {
  const int g = s.d.g;
  R inv = R(1) / (s.node(GRIDM, 1, t, node)[0] + R(1e-10));
  R vx = s.node(GRIDV, 2, t, node)[0] * inv;
  R vy = s.node(GRIDV, 2, t, node)[1] * inv - s.gravityDt;
  s.node(GRIDO, 2, t, node)[0] = wall(node / g, vx, g) ? R(0) : vx;
  s.node(GRIDO, 2, t, node)[1] = wall(node % g, vy, g) ? R(0) : vy;
}

template <typename R> QD_HD void g2p(const View<R> &s, int t, int q) {
  Stencil<R> st = stencil(s, s.at(X, 2, t, q));
  R nv[2] = {0, 0}, nc[4] = {0, 0, 0, 0};
  g2pNodes(s, st, [&](int, int, R weight, const R *dpos, int node) {
    for (int e = 0; e < 2; ++e) {
      R wv = weight * s.node(GRIDO, 2, t, node)[e];
      nv[e] += wv;
      for (int f = 0; f < 2; ++f)
        nc[2 * e + f] += (s.four * wv) * dpos[f];
    }
  });
  for (int e = 0; e < 2; ++e) {
    s.at(V, 2, t + 1, q)[e] = nv[e];
    s.at(X, 2, t + 1, q)[e] = s.at(X, 2, t, q)[e] + s.dt * nv[e];
  }
  for (int k = 0; k < 4; ++k)
    s.at(C, 4, t + 1, q)[k] = nc[k];
}

template <typename R> QD_HD R lossTerm(const View<R> &s, int q) {
  const R *x = s.at(X, 2, s.d.steps, q);
  return (x[0] - s.p[TARGET][0]) * (x[0] - s.p[TARGET][0]) +
         (x[1] - s.p[TARGET][1]) * (x[1] - s.p[TARGET][1]);
}

//===--- per element: reverse ---------------------------------------------===//

/// d loss / d x[T] (t = T); the other adjoints of step T zero.
template <typename R> QD_HD void lossBack(const View<R> &s, int T, int q) {
  for (int e = 0; e < 2; ++e) {
    s.adj(GX, 2, T, q)[e] = R(2) * (s.at(X, 2, T, q)[e] - s.p[TARGET][e]);
    s.adj(GV, 2, T, q)[e] = 0;
  }
  for (int k = 0; k < 4; ++k)
    s.adj(GC, 4, T, q)[k] = s.adj(GF, 4, T, q)[k] = 0;
}

/// Stores x[t]'s adjoint (the first writer); adds into the nodes'.
template <typename R> QD_HD void g2pBack(const View<R> &s, int t, int q) {
  Stencil<R> st = stencil(s, s.at(X, 2, t, q));
  R gnv[2], gnc[4], gfx[2] = {0, 0}, gw[2][3] = {};
  for (int e = 0; e < 2; ++e)
    gnv[e] = s.adj(GV, 2, t + 1, q)[e] + s.dt * s.adj(GX, 2, t + 1, q)[e];
  for (int k = 0; k < 4; ++k)
    gnc[k] = s.adj(GC, 4, t + 1, q)[k];
  g2pNodes(s, st, [&](int li, int lj, R weight, const R *dpos, int node) {
    R gweight = 0, gdpos[2] = {0, 0};
    for (int e = 0; e < 2; ++e) {
      R go = s.node(GRIDO, 2, t, node)[e], wv = weight * go, gwv = gnv[e];
      for (int f = 0; f < 2; ++f) {
        gwv += gnc[2 * e + f] * s.four * dpos[f];
        gdpos[f] += gnc[2 * e + f] * (s.four * wv);
      }
      addTo(&s.p[GGO][node * 2 + e], gwv * weight);
      gweight += gwv * go;
    }
    gw[0][li] += gweight * st.w[1][lj];
    gw[1][lj] += gweight * st.w[0][li];
    gfx[0] -= gdpos[0];
    gfx[1] -= gdpos[1];
  });
  stencilBack(st, gw, gfx);
  for (int e = 0; e < 2; ++e)
    s.adj(GX, 2, t, q)[e] = s.adj(GX, 2, t + 1, q)[e] + gfx[e] * s.invDx;
}

/// The node's momentum and mass adjoints from its velocity's (cleared).
template <typename R> QD_HD void gridBack(const View<R> &s, int t, int node) {
  const int g = s.d.g;
  R go[2] = {s.p[GGO][node * 2], s.p[GGO][node * 2 + 1]};
  s.p[GGO][node * 2] = s.p[GGO][node * 2 + 1] = 0;
  R inv = R(1) / (s.node(GRIDM, 1, t, node)[0] + R(1e-10));
  R mom[2] = {s.node(GRIDV, 2, t, node)[0], s.node(GRIDV, 2, t, node)[1]};
  R vel[2] = {mom[0] * inv, mom[1] * inv - s.gravityDt};
  R ginv = 0;
  for (int e = 0; e < 2; ++e) {
    R gv = wall(e == 0 ? node / g : node % g, vel[e], g) ? R(0) : go[e];
    s.p[GGV][node * 2 + e] = gv * inv;
    ginv += gv * mom[e];
  }
  s.p[GGM][node] = -ginv * inv * inv;
}

/// Stores v, C and F's adjoints of step t; adds into x[t]'s.
template <typename R> QD_HD void p2gBack(const View<R> &s, int t, int q) {
  Particle<R> P = particle(s, t, q);
  R gaff[4] = {0, 0, 0, 0}, gmv[2] = {0, 0}, gfx[2] = {0, 0}, gw[2][3] = {}, gdposx = 0;
  p2gNodes(s, P.st, [&](int li, int lj, R weight, R dposx, R dposy, int node) {
    R gweight = s.p[GGM][node], gdposy = 0;
    for (int e = 0; e < 2; ++e) {
      R ggv = s.p[GGV][node * 2 + e];
      gweight += ggv * (P.mv[e] + (P.aff[2 * e] * dposx + P.aff[2 * e + 1] * dposy));
      R gm = ggv * weight;
      gmv[e] += gm;
      gaff[2 * e] += gm * dposx;
      gaff[2 * e + 1] += gm * dposy;
      gdposx += gm * P.aff[2 * e];
      gdposy += gm * P.aff[2 * e + 1];
    }
    gw[0][li] += gweight * P.st.w[1][lj];
    gw[1][lj] += gweight * P.st.w[0][li];
    gfx[1] -= gdposy * s.dx;
  });
  gfx[0] -= gdposx * s.dx; // every column's offset is -fx dx + li dx
  // affine = C (+ stress on the diagonal), stress = K E (J - 1) J.
  R gc[4], gj = s.stressK * (gaff[0] + gaff[3]) * R(10) * (R(2) * P.j - R(1));
  R gnf[4], gf[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; ++k) {
    gc[k] = gaff[k];
    gnf[k] = s.adj(GF, 4, t + 1, q)[k];
  }
  gnf[0] += gj * P.nf[3];
  gnf[3] += gj * P.nf[0];
  gnf[1] -= gj * P.nf[2];
  gnf[2] -= gj * P.nf[1];
  for (int r = 0; r < 2; ++r) {
    R ga0 = 0, ga1 = 0;
    for (int col = 0; col < 2; ++col) {
      R g = gnf[2 * r + col];
      gf[col] += g * P.a[r][0];
      gf[2 + col] += g * P.a[r][1];
      ga0 += g * P.fm[col];
      ga1 += g * P.fm[2 + col];
    }
    gc[2 * r] += s.dt * ga0;
    gc[2 * r + 1] += s.dt * ga1;
  }
  for (int k = 0; k < 4; ++k) {
    s.adj(GC, 4, t, q)[k] = gc[k];
    s.adj(GF, 4, t, q)[k] = gf[k];
  }
  stencilBack(P.st, gw, gfx);
  for (int e = 0; e < 2; ++e) {
    s.adj(GV, 2, t, q)[e] = gmv[e];
    s.adj(GX, 2, t, q)[e] += gfx[e] * s.invDx;
  }
}

//===--- kernels: those with block sums (the others: kEach) -------------===//

__global__ void kComputeLoss(View<float> s) {
  const int64_t q = globalId();
  float sum = blockSum(q < s.d.n ? lossTerm(s, int(q)) : 0.0f);
  if (threadIdx.x == 0)
    atomicAdd(s.p[LOSS], sum);
}

//===--- the simulation for sims_peers.cu ---------------------------------===//

struct Sim {
  static constexpr const char *kName = "mpm";
  static constexpr int kSlotCount = kSlots, kParam = V, kGrad = GV, kLoss = LOSS;
  Dims d;
  Layout l;

  bool make(const std::string &size, int steps) {
    int side = 0, grid = 0;
    if (!shapeOf(size, side, grid))
      return false;
    l = layout(side, grid, steps, d);
    return true;
  }
  int64_t n() const { return d.n; }
  size_t gradCount() const { return size_t(d.n) * 2; }
  template <typename R> View<R> bind(R *const *slots) const { return view(d, slots); }
  const char *note() const {
    return "every step's particles and grid kept; atomics in P2G and in G2P's adjoint";
  }

  static void forward(const View<float> &s) {
    const Dims &d = s.d;
    const size_t g2 = size_t(d.g) * d.g;
    for (int t = 0; t < d.steps; ++t) {
      cudaMemsetAsync(s.node(GRIDV, 2, t, 0), 0, g2 * 2 * sizeof(float));
      cudaMemsetAsync(s.node(GRIDM, 1, t, 0), 0, g2 * sizeof(float));
      each<View<float>, p2g<float>>(s, t, d.n);
      each<View<float>, gridUpdate<float>>(s, t, int64_t(g2));
      each<View<float>, g2p<float>>(s, t, d.n);
    }
    kComputeLoss<<<blocksFor(d.n), kBlock>>>(s);
  }
  static void reverse(const View<float> &s) {
    const Dims &d = s.d;
    each<View<float>, lossBack<float>>(s, d.steps, d.n);
    for (int t = d.steps - 1; t >= 0; --t) {
      each<View<float>, g2pBack<float>>(s, t, d.n);
      each<View<float>, gridBack<float>>(s, t, int64_t(d.g) * d.g);
      each<View<float>, p2gBack<float>>(s, t, d.n);
    }
  }

  template <typename R> static void hostForward(const View<R> &s) {
    const Dims &d = s.d;
    for (int t = 0; t < d.steps; ++t) {
      for (int q = 0; q < d.n; ++q)
        p2g(s, t, q);
      for (int node = 0; node < d.g * d.g; ++node)
        gridUpdate(s, t, node);
      for (int q = 0; q < d.n; ++q)
        g2p(s, t, q);
    }
    for (int q = 0; q < d.n; ++q)
      s.p[LOSS][0] += lossTerm(s, q);
  }
  template <typename R> static void hostReverse(const View<R> &s) {
    const Dims &d = s.d;
    for (int q = 0; q < d.n; ++q)
      lossBack(s, d.steps, q);
    for (int t = d.steps - 1; t >= 0; --t) {
      for (int q = 0; q < d.n; ++q)
        g2pBack(s, t, q);
      for (int node = 0; node < d.g * d.g; ++node)
        gridBack(s, t, node);
      for (int q = 0; q < d.n; ++q)
        p2gBack(s, t, q);
    }
  }
};

} // namespace qdpeers::mpm
