//===- GradientAdolc.cpp - ADOL-C baselines (libadolc-dev) ----------------===//
//
// Operator-overloading reverse mode with ADOL-C's tapes (double precision,
// single thread: ADOL-C's tapes are global state). The control flow of each
// workload does not depend on the inputs, only on integer data, so each
// function is taped once (one tape per distinct bound m for (b)) and
// gradient() (zos_forward + fos_reverse over the tape) runs per element: the
// cheapest correct use of ADOL-C here; retaping per element costs more.
//
//===----------------------------------------------------------------------===//
#include "GradientWorkloads.h"

#ifdef QD_BENCH_HAVE_ADOLC
#include <adolc/adolc.h>
#endif

#include <vector>

namespace qdbench {

#ifdef QD_BENCH_HAVE_ADOLC

bool haveAdolc() {
  return true;
}

void sinGradientAdolc(const float *x, const float *yGrad, float *xGrad, int64_t n, int steps) {
  const short tag = 1;
  double x0 = x[0], y0 = 0;
  trace_on(tag);
  adouble v;
  v <<= x0;
  for (int k = 0; k < steps; ++k)
    v = sin(v) + 0.1;
  v >>= y0;
  trace_off();
  for (int64_t i = 0; i < n; ++i) {
    double xi = x[i], g = 0;
    gradient(tag, 1, &xi, &g);
    xGrad[i] += static_cast<float>(yGrad[i] * g);
  }
}

void triGradientAdolc(const float *x, const int32_t *m, const float *yGrad, float *xGrad,
                      int64_t n) {
  constexpr int kMaxBound = 64;
  bool taped[kMaxBound] = {};
  for (int64_t i = 0; i < n; ++i) {
    int32_t mi = m[i];
    short tag = static_cast<short>(10 + mi);
    if (!taped[mi]) {
      double x0 = x[i], y0 = 0;
      trace_on(tag);
      adouble v;
      v <<= x0;
      for (int j = 0; j < mi; ++j)
        for (int k = 0; k < j; ++k)
          v = sin(v + static_cast<float>(k) * 0.01f) + 0.1;
      v >>= y0;
      trace_off();
      taped[mi] = true;
    }
    double xi = x[i], g = 0;
    gradient(tag, 1, &xi, &g);
    xGrad[i] += static_cast<float>(yGrad[i] * g);
  }
}

void springGradientAdolc(const float *p, const float *q, const float *outGrad, float *pGrad,
                         float *qGrad, int64_t n, int steps) {
  const short tag = 2;
  constexpr int kIn = 2 * kChain;
  double in[kIn], g[kIn], y0 = 0;
  for (int k = 0; k < kChain; ++k) {
    in[k] = p[k];
    in[kChain + k] = q[k];
  }
  trace_on(tag);
  {
    std::vector<adouble> pp(kChain), qq(kChain), gg(kChain + 1);
    for (int k = 0; k < kChain; ++k)
      pp[k] <<= in[k];
    for (int k = 0; k < kChain; ++k)
      qq[k] <<= in[kChain + k];
    for (int t = 0; t < steps; ++t) {
      for (int k = 0; k < kChain; ++k) {
        adouble e = (k == 0 ? pp[0] : pp[k] - pp[k - 1]) - kSpringRest;
        gg[k] = e + e * e * e * kSpringCubic;
      }
      gg[kChain] = 0;
      for (int k = 0; k < kChain; ++k) {
        adouble f = (gg[k + 1] - gg[k]) * kSpringK;
        qq[k] = qq[k] + (f - kSpringDamp * qq[k]) * kSpringDt;
        pp[k] = pp[k] + kSpringDt * qq[k];
      }
    }
    adouble s = 0;
    for (int k = 0; k < kChain; ++k)
      s += pp[k];
    s >>= y0;
  }
  trace_off();
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < kChain; ++k) {
      in[k] = p[i * kChain + k];
      in[kChain + k] = q[i * kChain + k];
    }
    gradient(tag, kIn, in, g);
    for (int k = 0; k < kChain; ++k) {
      pGrad[i * kChain + k] += static_cast<float>(outGrad[i] * g[k]);
      qGrad[i * kChain + k] += static_cast<float>(outGrad[i] * g[kChain + k]);
    }
  }
}

#else

bool haveAdolc() {
  return false;
}
void sinGradientAdolc(const float *, const float *, float *, int64_t, int) {}
void triGradientAdolc(const float *, const int32_t *, const float *, float *, int64_t) {}
void springGradientAdolc(const float *, const float *, const float *, float *, float *, int64_t,
                         int) {}

#endif

} // namespace qdbench
