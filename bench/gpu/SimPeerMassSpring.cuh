//===- SimPeerMassSpring.cuh - mass_spring by hand, forward and reverse -*- CUDA -*-===//
//
// bench/workloads/MassSpring.cpp written by hand: the same robot, data,
// constants and float operations, the state of every step kept (x, v,
// v_inc, center, hidden, act: what the reverse reads), and the gradient of
// the loss with respect to w1 by hand-written reverse kernels, the steps in
// reverse order. One kernel per phase:
//
//   forward  center (a block sum, one atomic add per block), nn1 (a block
//            per hidden unit, its masses summed by the block), nn2, springs
//            (atomic adds into v_inc, as the forward scatters), advance
//   reverse  advance, springs (atomic adds into the masses' adjoints),
//            nn2, the hidden units' adjoints (a block per unit over the
//            springs: no atomics), w1's adjoint (a thread per element),
//            the masses' adjoints from nn1 (a thread per mass over the
//            hidden units), center
//
// The adjoints of the state are two slices (this step's and the next's);
// only w1's gradient is accumulated (what the parameter needs).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "SimPeerCommon.cuh"

namespace qdpeers::massspring {

constexpr double kDt = 0.004, kDamping = 15, kGravity = -4.8, kGround = 0.1, kOmega = 10;
constexpr double kSpacing = 0.05, kStiffness = 3e4, kActuation = 0.15;
constexpr double kPi = 3.14159265358979323846;

enum Slot {
  X,
  V,
  VINC,
  CENTER,
  HIDDEN,
  ACT,
  ANCHORS,
  SPRING,
  W1,
  B1,
  W2,
  B2,
  GOAL,
  LOSS, // the simulation
  GX,
  GV,
  GVINC,
  GACT,
  GSUM2,
  GSUM1,
  GC,
  GW1, // adjoints
  kSlots
};

struct Dims {
  int n = 0, springs = 0, hidden = 0, waves = 0, inputs = 0, steps = 0;
};

template <typename R> struct View {
  Dims d;
  R invN, decay, shiftStep;
  R *p[kSlots];

  QD_HD R &x(int t, int j, int e) const { return p[X][(size_t(t) * d.n + j) * 2 + e]; }
  QD_HD R &v(int t, int j, int e) const { return p[V][(size_t(t) * d.n + j) * 2 + e]; }
  QD_HD R &vinc(int t, int j, int e) const { return p[VINC][(size_t(t) * d.n + j) * 2 + e]; }
  QD_HD R &center(int t, int e) const { return p[CENTER][size_t(t) * 2 + e]; }
  QD_HD R &hidden(int t, int h) const { return p[HIDDEN][size_t(t) * d.hidden + h]; }
  QD_HD R &act(int t, int s) const { return p[ACT][size_t(t) * d.springs + s]; }
  QD_HD int anchor(int s, int k) const { return int(p[ANCHORS][s * 2 + k]); }
  QD_HD R spring(int s, int k) const { return p[SPRING][s * 3 + k]; }
  QD_HD R w1(int h, int k) const { return p[W1][size_t(h) * d.inputs + k]; }
  QD_HD R w2(int s, int h) const { return p[W2][size_t(s) * d.hidden + h]; }
  QD_HD R &gx(int t, int j, int e) const { return p[GX][((t % 2) * size_t(d.n) + j) * 2 + e]; }
  QD_HD R &gv(int t, int j, int e) const { return p[GV][((t % 2) * size_t(d.n) + j) * 2 + e]; }
  QD_HD R &gvinc(int j, int e) const { return p[GVINC][size_t(j) * 2 + e]; }
  QD_HD R &gw1(int h, int k) const { return p[GW1][size_t(h) * d.inputs + k]; }
};

struct Shape {
  int cols, rows, hidden, waves;
};

/// The sizes of bench/workloads/MassSpring.cpp's factory.
inline bool shapeOf(const std::string &size, Shape &s) {
  if (size == "small")
    s = {4, 2, 8, 4};
  else if (size == "large")
    s = {32, 8, 32, 10};
  else if (size == "gpu")
    s = {128, 32, 32, 10};
  else
    return false;
  return true;
}

/// The arrays and their initial contents, as MassSpring::arrays builds them.
inline Layout layout(const Shape &sh, int steps, Dims &d) {
  struct Spring {
    int a, b;
    bool actuated;
  };
  std::vector<Spring> springs;
  auto node = [&](int c, int r) { return r * sh.cols + c; };
  for (int r = 0; r < sh.rows; ++r)
    for (int c = 0; c < sh.cols; ++c) {
      if (c + 1 < sh.cols)
        springs.push_back({node(c, r), node(c + 1, r), true});
      if (r + 1 < sh.rows)
        springs.push_back({node(c, r), node(c, r + 1), false});
      if (c + 1 < sh.cols && r + 1 < sh.rows) {
        springs.push_back({node(c, r), node(c + 1, r + 1), false});
        springs.push_back({node(c + 1, r), node(c, r + 1), false});
      }
    }
  d = {sh.cols * sh.rows, int(springs.size()), sh.hidden, sh.waves, 0, steps};
  d.inputs = d.waves + 4 * d.n + 2;
  std::vector<double> x0, anchors, spring, w1, w2;
  for (int r = 0; r < sh.rows; ++r)
    for (int c = 0; c < sh.cols; ++c)
      x0.insert(x0.end(), {0.1 + c * kSpacing, kGround + 0.01 + r * kSpacing});
  for (const Spring &s : springs) {
    anchors.insert(anchors.end(), {double(s.a), double(s.b)});
    double ax = (s.a % sh.cols) * kSpacing, ay = (s.a / sh.cols) * kSpacing;
    double bx = (s.b % sh.cols) * kSpacing, by = (s.b / sh.cols) * kSpacing;
    spring.insert(spring.end(),
                  {std::hypot(ax - bx, ay - by), kStiffness, s.actuated ? kActuation : 0.0});
  }
  const double scale1 = std::sqrt(2.0 / (d.hidden + d.inputs)) * 2;
  for (int64_t k = 0; k < int64_t(d.hidden) * d.inputs; ++k)
    w1.push_back(scale1 * hashUniform(k, 1));
  const double scale2 = std::sqrt(2.0 / double(d.hidden + d.springs)) * 3;
  for (int64_t k = 0; k < int64_t(d.springs) * d.hidden; ++k)
    w2.push_back(scale2 * hashUniform(k, 2));
  const size_t t1 = size_t(steps) + 1, n = size_t(d.n), s = size_t(d.springs);
  const size_t h = size_t(d.hidden);
  Layout l;
  l.add(t1 * n * 2, x0);                                            // X
  for (size_t k : {t1 * n * 2, t1 * n * 2, t1 * 2, t1 * h, t1 * s}) // V .. ACT
    l.add(k);
  l.add(s * 2, anchors);
  l.add(s * 3, spring);
  l.add(w1.size(), w1);
  l.add(h);
  l.add(w2.size(), w2);
  l.add(s);
  l.add(2, {0.9, 0.2});
  l.add(1);                                                                     // LOSS
  for (size_t k : {2 * n * 2, 2 * n * 2, n * 2, s, s, h, size_t(2), w1.size()}) // GX .. GW1
    l.add(k);
  l.cleared = {VINC, CENTER, LOSS, GW1};
  return l;
}

template <typename R> View<R> view(const Dims &d, R *const *slots) {
  View<R> s;
  s.d = d;
  s.invN = R(1.0 / d.n);
  s.decay = R(std::exp(-kDt * kDamping));
  s.shiftStep = R(2 * kPi / d.waves);
  for (int k = 0; k < kSlots; ++k)
    s.p[k] = slots[k];
  return s;
}

//===--- per element: forward ---------------------------------------------===//

template <typename R> QD_HD R phase(int t) {
  return R(t) * R(kOmega * kDt);
}

/// Mass j's terms of hidden unit h's sum (nn1).
template <typename R> QD_HD R nn1Mass(const View<R> &s, int t, int h, int j) {
  const int col = s.d.waves + 4 * j;
  R sum = 0;
  for (int e = 0; e < 2; ++e) {
    R offset = s.x(t, j, e) - s.center(t, e), vel = s.v(t, j, e);
    R term = s.w1(h, col + e) * offset + s.w1(h, col + 2 + e) * vel;
    sum += term * R(0.05);
  }
  return sum;
}

/// hidden[t][h] from the masses' terms: b1, the waves, the masses, the goal.
template <typename R> QD_HD void nn1Finish(const View<R> &s, int t, int h, R masses) {
  R sum = s.p[B1][h];
  for (int k = 0; k < s.d.waves; ++k)
    sum += s.w1(h, k) * sinR(phase<R>(t) + R(k) * s.shiftStep);
  sum += masses;
  for (int e = 0; e < 2; ++e)
    sum += s.w1(h, s.d.inputs - 2 + e) * (s.p[GOAL][e] - s.center(t, e));
  s.hidden(t, h) = tanhR(sum);
}

template <typename R> QD_HD void nn2(const View<R> &s, int t, int sp) {
  R sum = s.p[B2][sp];
  for (int h = 0; h < s.d.hidden; ++h)
    sum += s.w2(sp, h) * s.hidden(t, h);
  s.act(t, sp) = tanhR(sum);
}

template <typename R> struct Geometry {
  int a, b;
  R dist[2], q, len, scale;
};

template <typename R> QD_HD Geometry<R> geometry(const View<R> &s, int t, int sp) {
  Geometry<R> g;
  g.a = s.anchor(sp, 0);
  g.b = s.anchor(sp, 1);
  for (int e = 0; e < 2; ++e)
    g.dist[e] = s.x(t, g.a, e) - s.x(t, g.b, e);
  g.q = g.dist[0] * g.dist[0] + g.dist[1] * g.dist[1];
  g.len = sqrtR(g.q) + R(1e-4);
  R target = s.spring(sp, 0) * (R(1) + s.spring(sp, 2) * s.act(t, sp));
  g.scale = ((R(kDt) * (g.len - target)) * s.spring(sp, 1)) / g.len;
  return g;
}

template <typename R> QD_HD void springs(const View<R> &s, int t, int sp) {
  Geometry<R> g = geometry(s, t, sp);
  for (int e = 0; e < 2; ++e) {
    R impulse = g.scale * g.dist[e];
    addTo(&s.vinc(t + 1, g.a, e), -impulse);
    addTo(&s.vinc(t + 1, g.b, e), impulse);
  }
}

/// The velocity before the ground: v_inc + decay v (+ gravity).
template <typename R> QD_HD R velocity(const View<R> &s, int t, int p, int e) {
  R v = s.vinc(t + 1, p, e) + s.decay * s.v(t, p, e);
  return e == 1 ? v + R(kDt * kGravity) : v;
}

template <typename R> QD_HD bool stopped(const View<R> &s, int t, int p) {
  return s.x(t, p, 1) < R(kGround) && velocity(s, t, p, 1) < R(0);
}

template <typename R> QD_HD void advance(const View<R> &s, int t, int p) {
  const bool stop = stopped(s, t, p);
  for (int e = 0; e < 2; ++e) {
    R vd = stop ? R(0) : velocity(s, t, p, e);
    s.v(t + 1, p, e) = vd;
    s.x(t + 1, p, e) = s.x(t, p, e) + R(kDt) * vd;
  }
}

//===--- per element: reverse ---------------------------------------------===//

/// d loss / d x[T] (loss = -x[T][n-1][0]) and v[T] (t = T).
template <typename R> QD_HD void lossBack(const View<R> &s, int t, int p) {
  for (int e = 0; e < 2; ++e) {
    s.gx(t, p, e) = p == s.d.n - 1 && e == 0 ? R(-1) : R(0);
    s.gv(t, p, e) = 0;
  }
}

/// Stores this step's x and v adjoints (the first writer) and v_inc's.
template <typename R> QD_HD void advanceBack(const View<R> &s, int t, int p) {
  const bool stop = stopped(s, t, p);
  for (int e = 0; e < 2; ++e) {
    R gxn = s.gx(t + 1, p, e);
    R graw = stop ? R(0) : s.gv(t + 1, p, e) + R(kDt) * gxn;
    s.gx(t, p, e) = gxn;
    s.gvinc(p, e) = graw;
    s.gv(t, p, e) = s.decay * graw;
  }
  if (p == 0)
    s.p[GC][0] = s.p[GC][1] = 0;
}

template <typename R> QD_HD void springsBack(const View<R> &s, int t, int sp) {
  Geometry<R> g = geometry(s, t, sp);
  R gimp[2], gscale = 0;
  for (int e = 0; e < 2; ++e) {
    gimp[e] = s.gvinc(g.b, e) - s.gvinc(g.a, e);
    gscale += gimp[e] * g.dist[e];
  }
  R glen = -gscale * g.scale / g.len;
  R gdiff = gscale / g.len * s.spring(sp, 1) * R(kDt); // of len - target
  glen += gdiff;
  s.p[GACT][sp] = -gdiff * s.spring(sp, 0) * s.spring(sp, 2);
  R gq = glen * R(0.5) / sqrtR(g.q);
  for (int e = 0; e < 2; ++e) {
    R gdist = gimp[e] * g.scale + R(2) * g.dist[e] * gq;
    addTo(&s.gx(t, g.a, e), gdist);
    addTo(&s.gx(t, g.b, e), -gdist);
  }
}

template <typename R> QD_HD void nn2Back(const View<R> &s, int t, int sp) {
  R a = s.act(t, sp);
  s.p[GSUM2][sp] = s.p[GACT][sp] * (R(1) - a * a);
}

/// `ghid`: d loss / d hidden[t][h] (the sum over the springs); the goal
/// inputs' part of d loss / d center.
template <typename R> QD_HD void nn1BackHidden(const View<R> &s, int t, int h, R ghid) {
  R hv = s.hidden(t, h), g1 = ghid * (R(1) - hv * hv);
  s.p[GSUM1][h] = g1;
  for (int e = 0; e < 2; ++e)
    addTo(&s.p[GC][e], -g1 * s.w1(h, s.d.inputs - 2 + e));
}

/// w1[h][k]'s adjoint: hidden unit h's sum's adjoint times input k.
template <typename R> QD_HD void nn1BackW(const View<R> &s, int t, int h, int k) {
  const Dims &d = s.d;
  R in;
  if (k < d.waves) {
    in = sinR(phase<R>(t) + R(k) * s.shiftStep);
  } else if (k < d.waves + 4 * d.n) {
    int j = (k - d.waves) / 4, e = (k - d.waves) % 4;
    in = e < 2 ? (s.x(t, j, e) - s.center(t, e)) * R(0.05) : s.v(t, j, e - 2) * R(0.05);
  } else {
    int e = k - d.waves - 4 * d.n;
    in = s.p[GOAL][e] - s.center(t, e);
  }
  s.gw1(h, k) += s.p[GSUM1][h] * in;
}

/// nn1BackW of element i of w1 (row-major).
template <typename R> QD_HD void nn1BackWAt(const View<R> &s, int t, int i) {
  nn1BackW(s, t, i / s.d.inputs, i % s.d.inputs);
}

/// Mass j's x and v adjoints from nn1; `gc` gets its part of center's.
template <typename R> QD_HD void nn1BackX(const View<R> &s, int t, int j, R gc[2]) {
  const int col = s.d.waves + 4 * j;
  for (int e = 0; e < 2; ++e) {
    R gx = 0, gv = 0;
    for (int h = 0; h < s.d.hidden; ++h) {
      R g = s.p[GSUM1][h] * R(0.05);
      gx += g * s.w1(h, col + e);
      gv += g * s.w1(h, col + 2 + e);
    }
    s.gx(t, j, e) += gx;
    s.gv(t, j, e) += gv;
    gc[e] = -gx;
  }
}

template <typename R> QD_HD void centerBack(const View<R> &s, int t, int p) {
  for (int e = 0; e < 2; ++e)
    s.gx(t, p, e) += s.p[GC][e] * s.invN;
}

//===--- kernels: those with block sums (the others: kEach) -------------===//

__global__ void kCenter(View<float> s, int t) {
  const int64_t p = globalId();
  for (int e = 0; e < 2; ++e) {
    float sum = blockSum(p < s.d.n ? s.x(t, int(p), e) * s.invN : 0.0f);
    if (threadIdx.x == 0)
      atomicAdd(&s.center(t, e), sum);
  }
}
__global__ void kNn1(View<float> s, int t) { // a block per hidden unit
  float part = 0;
  for (int j = threadIdx.x; j < s.d.n; j += kBlock)
    part += nn1Mass(s, t, blockIdx.x, j);
  float masses = blockSum(part);
  if (threadIdx.x == 0)
    nn1Finish(s, t, blockIdx.x, masses);
}
__global__ void kComputeLoss(View<float> s) {
  s.p[LOSS][0] = -s.x(s.d.steps, s.d.n - 1, 0);
}
__global__ void kNn1BackHidden(View<float> s, int t) { // a block per hidden unit
  float part = 0;
  for (int sp = threadIdx.x; sp < s.d.springs; sp += kBlock)
    part += s.p[GSUM2][sp] * s.w2(sp, blockIdx.x);
  float ghid = blockSum(part);
  if (threadIdx.x == 0)
    nn1BackHidden(s, t, blockIdx.x, ghid);
}
__global__ void kNn1BackX(View<float> s, int t) {
  const int64_t j = globalId();
  float gc[2] = {0, 0};
  if (j < s.d.n)
    nn1BackX(s, t, int(j), gc);
  for (int e = 0; e < 2; ++e) {
    float sum = blockSum(gc[e]);
    if (threadIdx.x == 0)
      atomicAdd(&s.p[GC][e], sum);
  }
}

//===--- the simulation for sims_peers.cu ---------------------------------===//

struct Sim {
  static constexpr const char *kName = "mass_spring";
  static constexpr int kSlotCount = kSlots, kParam = W1, kGrad = GW1, kLoss = LOSS;
  Dims d;
  Layout l;

  bool make(const std::string &size, int steps) {
    Shape sh;
    if (!shapeOf(size, sh))
      return false;
    l = layout(sh, steps, d);
    return true;
  }
  int64_t n() const { return d.n; }
  size_t gradCount() const { return size_t(d.hidden) * d.inputs; }
  template <typename R> View<R> bind(R *const *slots) const { return view(d, slots); }
  const char *note() const {
    return "block sums for center, nn1 and the hidden units' adjoints; atomics in springs and "
           "their adjoints";
  }

  static void forward(const View<float> &s) {
    const Dims &d = s.d;
    for (int t = 0; t < d.steps; ++t) {
      kCenter<<<blocksFor(d.n), kBlock>>>(s, t);
      kNn1<<<d.hidden, kBlock>>>(s, t);
      each<View<float>, nn2<float>>(s, t, d.springs);
      each<View<float>, springs<float>>(s, t, d.springs);
      each<View<float>, advance<float>>(s, t, d.n);
    }
    kComputeLoss<<<1, 1>>>(s);
  }
  static void reverse(const View<float> &s) {
    const Dims &d = s.d;
    each<View<float>, lossBack<float>>(s, d.steps, d.n);
    for (int t = d.steps - 1; t >= 0; --t) {
      each<View<float>, advanceBack<float>>(s, t, d.n);
      each<View<float>, springsBack<float>>(s, t, d.springs);
      each<View<float>, nn2Back<float>>(s, t, d.springs);
      kNn1BackHidden<<<d.hidden, kBlock>>>(s, t);
      each<View<float>, nn1BackWAt<float>>(s, t, int64_t(d.hidden) * d.inputs);
      kNn1BackX<<<blocksFor(d.n), kBlock>>>(s, t);
      each<View<float>, centerBack<float>>(s, t, d.n);
    }
  }

  template <typename R> static void hostForward(const View<R> &s) {
    const Dims &d = s.d;
    for (int t = 0; t < d.steps; ++t) {
      for (int p = 0; p < d.n; ++p)
        for (int e = 0; e < 2; ++e)
          s.center(t, e) += s.x(t, p, e) * s.invN;
      for (int h = 0; h < d.hidden; ++h) {
        R masses = 0;
        for (int j = 0; j < d.n; ++j)
          masses += nn1Mass(s, t, h, j);
        nn1Finish(s, t, h, masses);
      }
      for (int sp = 0; sp < d.springs; ++sp)
        nn2(s, t, sp);
      for (int sp = 0; sp < d.springs; ++sp)
        springs(s, t, sp);
      for (int p = 0; p < d.n; ++p)
        advance(s, t, p);
    }
    s.p[LOSS][0] = -s.x(d.steps, d.n - 1, 0);
  }
  template <typename R> static void hostReverse(const View<R> &s) {
    const Dims &d = s.d;
    for (int p = 0; p < d.n; ++p)
      lossBack(s, d.steps, p);
    for (int t = d.steps - 1; t >= 0; --t) {
      for (int p = 0; p < d.n; ++p)
        advanceBack(s, t, p);
      for (int sp = 0; sp < d.springs; ++sp)
        springsBack(s, t, sp);
      for (int sp = 0; sp < d.springs; ++sp)
        nn2Back(s, t, sp);
      for (int h = 0; h < d.hidden; ++h) {
        R ghid = 0;
        for (int sp = 0; sp < d.springs; ++sp)
          ghid += s.p[GSUM2][sp] * s.w2(sp, h);
        nn1BackHidden(s, t, h, ghid);
      }
      for (int h = 0; h < d.hidden; ++h)
        for (int k = 0; k < d.inputs; ++k)
          nn1BackW(s, t, h, k);
      for (int j = 0; j < d.n; ++j) {
        R gc[2];
        nn1BackX(s, t, j, gc);
        s.p[GC][0] += gc[0];
        s.p[GC][1] += gc[1];
      }
      for (int p = 0; p < d.n; ++p)
        centerBack(s, t, p);
    }
  }
};

} // namespace qdpeers::massspring
