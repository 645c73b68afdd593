//===- GradientHandwritten.cpp - Scalar hand-written reverse loops --------===//
//
// The hand-written baselines of qd-bench-gradients, compiled with the
// project's Release flags (-O3, no fast-math): per element, a forward replay
// that stores the values the reverse sweep needs (the K sin arguments of
// (a), the inner-loop sin arguments of (b), the 8 positions per step of
// (c)) in a per-thread buffer, then the reverse loop. Elements are split
// into one contiguous range per std::thread.
//
//===----------------------------------------------------------------------===//
#include "GradientWorkloads.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace qdbench {

namespace {

template <typename Fn> void parallelRanges(int64_t n, unsigned threads, Fn &&fn) {
  threads = std::max(1u, threads);
  std::vector<std::thread> pool;
  int64_t per = (n + threads - 1) / threads;
  for (unsigned t = 1; t < threads; ++t) {
    int64_t b = std::min(n, per * t), e = std::min(n, per * (t + 1));
    pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(0, std::min(n, per));
  for (auto &t : pool)
    t.join();
}

} // namespace

void sinForward(const float *x, float *y, int64_t n, int steps, unsigned threads) {
  parallelRanges(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float v = x[i];
      for (int k = 0; k < steps; ++k)
        v = std::sin(v) + 0.1f;
      y[i] = v;
    }
  });
}

void sinGradient(const float *x, const float *yGrad, float *xGrad, int64_t n, int steps,
                 unsigned threads) {
  parallelRanges(n, threads, [&](int64_t b, int64_t e) {
    std::vector<float> tape(steps);
    for (int64_t i = b; i < e; ++i) {
      float v = x[i];
      for (int k = 0; k < steps; ++k) {
        tape[k] = v;
        v = std::sin(v) + 0.1f;
      }
      float a = yGrad[i];
      for (int k = steps - 1; k >= 0; --k)
        a = a * std::cos(tape[k]);
      xGrad[i] += a;
    }
  });
}

void triForward(const float *x, const int32_t *m, float *y, int64_t n, unsigned threads) {
  parallelRanges(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float v = x[i];
      for (int j = 0; j < m[i]; ++j)
        for (int k = 0; k < j; ++k)
          v = std::sin(v + static_cast<float>(k) * 0.01f) + 0.1f;
      y[i] = v;
    }
  });
}

void triGradient(const float *x, const int32_t *m, const float *yGrad, float *xGrad, int64_t n,
                 unsigned threads) {
  parallelRanges(n, threads, [&](int64_t b, int64_t e) {
    std::vector<float> tape;
    for (int64_t i = b; i < e; ++i) {
      int32_t mi = m[i];
      tape.resize(std::max<size_t>(tape.size(), size_t(mi) * size_t(mi) / 2 + 1));
      float v = x[i];
      size_t top = 0;
      for (int j = 0; j < mi; ++j)
        for (int k = 0; k < j; ++k) {
          float arg = v + static_cast<float>(k) * 0.01f;
          tape[top++] = arg;
          v = std::sin(arg) + 0.1f;
        }
      float a = yGrad[i];
      while (top > 0)
        a = a * std::cos(tape[--top]);
      xGrad[i] += a;
    }
  });
}

void springForward(const float *p, const float *q, float *out, int64_t n, int steps,
                   unsigned threads) {
  parallelRanges(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float pp[kChain], qq[kChain];
      std::copy(p + i * kChain, p + (i + 1) * kChain, pp);
      std::copy(q + i * kChain, q + (i + 1) * kChain, qq);
      for (int t = 0; t < steps; ++t)
        springStep(pp, qq);
      float s = 0;
      for (int k = 0; k < kChain; ++k)
        s += pp[k];
      out[i] = s;
    }
  });
}

void springGradient(const float *p, const float *q, const float *outGrad, float *pGrad,
                    float *qGrad, int64_t n, int steps, unsigned threads) {
  parallelRanges(n, threads, [&](int64_t b, int64_t e) {
    std::vector<float> tape(size_t(steps) * kChain);
    for (int64_t i = b; i < e; ++i) {
      float pp[kChain], qq[kChain];
      std::copy(p + i * kChain, p + (i + 1) * kChain, pp);
      std::copy(q + i * kChain, q + (i + 1) * kChain, qq);
      for (int t = 0; t < steps; ++t) {
        std::copy(pp, pp + kChain, &tape[size_t(t) * kChain]);
        springStep(pp, qq);
      }
      // Adjoints of the state after the last step.
      float pb[kChain], qb[kChain];
      for (int k = 0; k < kChain; ++k) {
        pb[k] = outGrad[i];
        qb[k] = 0;
      }
      for (int t = steps - 1; t >= 0; --t) {
        const float *pt = &tape[size_t(t) * kChain];
        float e[kChain], fb[kChain], gb[kChain + 1] = {};
        for (int k = 0; k < kChain; ++k)
          e[k] = (k == 0 ? pt[0] : pt[k] - pt[k - 1]) - kSpringRest;
        for (int k = 0; k < kChain; ++k) {
          // p' = p + dt qn, q' = qn, qn = q + (f - D q) dt.
          float qnb = qb[k] + kSpringDt * pb[k];
          float tb = qnb * kSpringDt;
          qb[k] = qnb - kSpringDamp * tb;
          fb[k] = tb;
        }
        for (int k = 0; k < kChain; ++k) {
          gb[k + 1] += fb[k] * kSpringK;
          gb[k] -= fb[k] * kSpringK;
        }
        for (int k = 0; k < kChain; ++k) {
          float eb = gb[k] * (1.0f + 3.0f * kSpringCubic * e[k] * e[k]);
          pb[k] += eb;
          if (k > 0)
            pb[k - 1] -= eb;
        }
      }
      for (int k = 0; k < kChain; ++k) {
        pGrad[i * kChain + k] += pb[k];
        qGrad[i * kChain + k] += qb[k];
      }
    }
  });
}

} // namespace qdbench
