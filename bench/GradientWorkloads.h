//===- GradientWorkloads.h - Workloads of qd-bench-gradients ----*- C++ -*-===//
//
// The three gradient workloads of bench/GradientBench.cpp, defined once for
// every implementation (qd, the hand-written loops, ADOL-C; the PyTorch
// scripts bench/torch_gradients.py and bench/gpu/framework_peers.py repeat the
// definitions; the hand-written CUDA of bench/gpu/peers.cu includes this):
//
//  (a) sin:        y[i] = f(x[i]), f applies v = sin(v) + 0.1 K times.
//  (b) triangular: y[i] = g(x[i]), g runs for j < m[i] { for k < j {
//                  v = sin(v + 0.01 k) + 0.1 } } with m[i] read from a field.
//  (c) spring:     a chain of 8 masses (positions p, velocities q: 16
//                  loop-carried f32 values) on cubic springs, hung from a
//                  wall at 0, stepped T times with symplectic Euler;
//                  out[i] = sum of the final positions.
//
// Gradients: x.grad (p.grad, q.grad) for y.grad (out.grad) = 1. Every
// implementation accumulates (+=) into zeroed gradient arrays and must
// evaluate the float operations in the order written here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

// springStep also runs in device code (bench/gpu/peers.cu, compiled by nvcc).
#ifdef __CUDACC__
#define QDBENCH_HOST_DEVICE __host__ __device__
#else
#define QDBENCH_HOST_DEVICE
#endif

namespace qdbench {

inline constexpr int kSinSteps = 64;    // K of (a)
inline constexpr int kChain = 8;        // masses of (c)
inline constexpr int kSpringSteps = 64; // T of (c)
inline constexpr float kSpringK = 10.0f, kSpringDt = 0.01f, kSpringDamp = 0.1f, kSpringRest = 1.0f,
                       kSpringCubic = 0.5f;

/// Inputs, the same formulas in every implementation.
inline float sinInput(int64_t i) {
  return 0.001f * static_cast<float>(i % 1000) - 0.5f;
}
inline int32_t triBound(int64_t i) {
  return 4 + static_cast<int32_t>((i * 7) % 13);
} // 4..16
inline float springP(int64_t i, int k) {
  return static_cast<float>(k + 1) + 0.05f * static_cast<float>((i * (k + 3)) % 17) / 17.0f;
}
inline float springQ(int64_t i, int k) {
  return 0.01f * static_cast<float>((i + k) % 11) - 0.05f;
}

/// One spring step on a chain (positions p, velocities q), in the float
/// operation order of the qd kernel.
QDBENCH_HOST_DEVICE inline void springStep(float *p, float *q) {
  float g[kChain + 1];
  for (int k = 0; k < kChain; ++k) {
    float e = (k == 0 ? p[0] : p[k] - p[k - 1]) - kSpringRest;
    g[k] = e + e * e * e * kSpringCubic;
  }
  g[kChain] = 0;
  for (int k = 0; k < kChain; ++k) {
    float f = (g[k + 1] - g[k]) * kSpringK;
    float qn = q[k] + (f - kSpringDamp * q[k]) * kSpringDt;
    q[k] = qn;
    p[k] = p[k] + kSpringDt * qn;
  }
}

// Hand-written baselines (GradientHandwritten.cpp: scalar; GradientVectorised.cpp:
// -O3 -ffast-math, #pragma omp simd, glibc libmvec). All run on `threads`
// std::threads, each on a contiguous half of the elements.
void sinForward(const float *x, float *y, int64_t n, int steps, unsigned threads);
void sinGradient(const float *x, const float *yGrad, float *xGrad, int64_t n, int steps,
                 unsigned threads);
void triForward(const float *x, const int32_t *m, float *y, int64_t n, unsigned threads);
void triGradient(const float *x, const int32_t *m, const float *yGrad, float *xGrad, int64_t n,
                 unsigned threads);
/// p, q, pGrad, qGrad: [n][kChain] row-major.
void springForward(const float *p, const float *q, float *out, int64_t n, int steps,
                   unsigned threads);
void springGradient(const float *p, const float *q, const float *outGrad, float *pGrad,
                    float *qGrad, int64_t n, int steps, unsigned threads);

void sinGradientVec(const float *x, const float *yGrad, float *xGrad, int64_t n, int steps,
                    unsigned threads);
void sinForwardVec(const float *x, float *y, int64_t n, int steps, unsigned threads);
void triForwardVec(const float *x, const int32_t *m, float *y, int64_t n, unsigned threads);
void triGradientVec(const float *x, const int32_t *m, const float *yGrad, float *xGrad, int64_t n,
                    unsigned threads);
void springGradientVec(const float *p, const float *q, const float *outGrad, float *pGrad,
                       float *qGrad, int64_t n, int steps, unsigned threads);
void springForwardVec(const float *p, const float *q, float *out, int64_t n, int steps,
                      unsigned threads);

/// ADOL-C (GradientAdolc.cpp), single thread; false when not built with it.
bool haveAdolc();
/// Tapes f once (tape reuse: the control flow does not depend on x) and
/// calls gradient() per element.
void sinGradientAdolc(const float *x, const float *yGrad, float *xGrad, int64_t n, int steps);
/// One tape per distinct bound m (4..16), reused for the elements with it.
void triGradientAdolc(const float *x, const int32_t *m, const float *yGrad, float *xGrad,
                      int64_t n);
void springGradientAdolc(const float *p, const float *q, const float *outGrad, float *pGrad,
                         float *qGrad, int64_t n, int steps);

} // namespace qdbench
