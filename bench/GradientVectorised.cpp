//===- GradientVectorised.cpp - Vectorised hand-written reverse loops -----===//
//
// Compiled with -O3 -march=native -ffast-math (bench/CMakeLists.txt) and
// linked with glibc's libmvec: `#pragma omp simd` loops over a block of
// kBlock elements at a time, so sinf/cosf become the host's widest libmvec
// variants (_ZGVdN8v_sinf on AVX2, _ZGVeN16v_sinf on AVX-512), kBlock / 8
// (or / 16) independent calls per step in flight. Same algorithm as GradientHandwritten.cpp
// (forward replay into a per-thread buffer, reverse loop), lanes = elements;
// (b)'s per-element trip counts run in lockstep under a mask (triGradientVec). Nothing here is
// `inline` in a header shared with the other files (fast-math copies of
// shared inline functions could replace the strict ones at link time).
//
//===----------------------------------------------------------------------===//
#include "GradientWorkloads.h"

#include <algorithm>
#include <math.h>
#include <thread>
#include <vector>

namespace qdbench {

namespace {

constexpr int kBlock = 64;

template <typename Fn> void parallelRangesVec(int64_t n, unsigned threads, Fn &&fn) {
  threads = threads == 0 ? 1 : threads;
  std::vector<std::thread> pool;
  int64_t per = (n + threads - 1) / threads;
  per = (per + kBlock - 1) / kBlock * kBlock;
  for (unsigned t = 1; t < threads; ++t) {
    int64_t b = n < per * t ? n : per * t, e = n < per * (t + 1) ? n : per * (t + 1);
    pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(0, n < per ? n : per);
  for (auto &t : pool)
    t.join();
}

} // namespace

void sinForwardVec(const float *x, float *y, int64_t n, int steps, unsigned threads) {
  parallelRangesVec(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      int len = static_cast<int>(e - i0 < kBlock ? e - i0 : kBlock);
      float v[kBlock];
#pragma omp simd
      for (int l = 0; l < len; ++l)
        v[l] = x[i0 + l];
      for (int k = 0; k < steps; ++k)
#pragma omp simd
        for (int l = 0; l < len; ++l)
          v[l] = sinf(v[l]) + 0.1f;
#pragma omp simd
      for (int l = 0; l < len; ++l)
        y[i0 + l] = v[l];
    }
  });
}

void sinGradientVec(const float *x, const float *yGrad, float *xGrad, int64_t n, int steps,
                    unsigned threads) {
  parallelRangesVec(n, threads, [&](int64_t b, int64_t e) {
    std::vector<float> tapeStorage(size_t(steps) * kBlock);
    float *tape = tapeStorage.data();
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      int len = static_cast<int>(e - i0 < kBlock ? e - i0 : kBlock);
      float v[kBlock], a[kBlock];
#pragma omp simd
      for (int l = 0; l < len; ++l)
        v[l] = x[i0 + l];
      for (int k = 0; k < steps; ++k) {
        float *row = tape + size_t(k) * kBlock;
#pragma omp simd
        for (int l = 0; l < len; ++l) {
          row[l] = v[l];
          v[l] = sinf(v[l]) + 0.1f;
        }
      }
#pragma omp simd
      for (int l = 0; l < len; ++l)
        a[l] = yGrad[i0 + l];
      for (int k = steps - 1; k >= 0; --k) {
        const float *row = tape + size_t(k) * kBlock;
#pragma omp simd
        for (int l = 0; l < len; ++l)
          a[l] = a[l] * cosf(row[l]);
      }
#pragma omp simd
      for (int l = 0; l < len; ++l)
        xGrad[i0 + l] += a[l];
    }
  });
}

namespace {

// (b) keeps the lanes of a block in lockstep: every lane runs the nest of the
// block's largest bound M, and lane l takes the steps of (j, k) only while
// j < m[l] (a blend, so inactive lanes keep their value). The tape holds one
// row of kBlock arguments per (j, k) step, M(M-1)/2 rows, at one depth for
// all lanes: the reverse sweep walks the same rows backwards with a common
// descending counter (j from M-1 down, k from j-1 down) and the same mask.

/// The bounds of a block (0 past the end of the range: those lanes never
/// run) and their largest value.
int loadBounds(const int32_t *m, int64_t i0, int len, int32_t *mb) {
  int top = 0;
  for (int l = 0; l < kBlock; ++l) {
    mb[l] = l < len ? m[i0 + l] : 0;
    top = std::max(top, static_cast<int>(mb[l]));
  }
  return top;
}

/// One forward step (j, k) of a block, storing the sin arguments in `row`
/// (nullptr: no tape).
void triStep(float *v, const int32_t *mb, int j, int k, float *row) {
  float kd = static_cast<float>(k) * 0.01f;
#pragma omp simd
  for (int l = 0; l < kBlock; ++l) {
    float arg = v[l] + kd;
    if (row)
      row[l] = arg;
    float next = sinf(arg) + 0.1f;
    v[l] = j < mb[l] ? next : v[l];
  }
}

} // namespace

void triForwardVec(const float *x, const int32_t *m, float *y, int64_t n, unsigned threads) {
  parallelRangesVec(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      int len = static_cast<int>(e - i0 < kBlock ? e - i0 : kBlock);
      int32_t mb[kBlock];
      float v[kBlock];
      int top = loadBounds(m, i0, len, mb);
      for (int l = 0; l < kBlock; ++l)
        v[l] = l < len ? x[i0 + l] : 0.0f;
      for (int j = 0; j < top; ++j)
        for (int k = 0; k < j; ++k)
          triStep(v, mb, j, k, nullptr);
      for (int l = 0; l < len; ++l)
        y[i0 + l] = v[l];
    }
  });
}

void triGradientVec(const float *x, const int32_t *m, const float *yGrad, float *xGrad, int64_t n,
                    unsigned threads) {
  parallelRangesVec(n, threads, [&](int64_t b, int64_t e) {
    std::vector<float> tapeStorage;
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      int len = static_cast<int>(e - i0 < kBlock ? e - i0 : kBlock);
      int32_t mb[kBlock];
      float v[kBlock], a[kBlock];
      int top = loadBounds(m, i0, len, mb);
      size_t rows = size_t(top) * size_t(top > 0 ? top - 1 : 0) / 2;
      if (tapeStorage.size() < rows * kBlock)
        tapeStorage.resize(rows * kBlock);
      float *tape = tapeStorage.data();
      for (int l = 0; l < kBlock; ++l) {
        v[l] = l < len ? x[i0 + l] : 0.0f;
        a[l] = l < len ? yGrad[i0 + l] : 0.0f;
      }
      size_t row = 0;
      for (int j = 0; j < top; ++j)
        for (int k = 0; k < j; ++k, ++row)
          triStep(v, mb, j, k, tape + row * kBlock);
      for (int j = top - 1; j >= 0; --j)
        for (int k = j - 1; k >= 0; --k) {
          const float *r = tape + --row * kBlock;
#pragma omp simd
          for (int l = 0; l < kBlock; ++l) {
            float next = a[l] * cosf(r[l]);
            a[l] = j < mb[l] ? next : a[l];
          }
        }
      for (int l = 0; l < len; ++l)
        xGrad[i0 + l] += a[l];
    }
  });
}

namespace {

// Structure-of-arrays state of a block of chains: [kChain][kBlock].
struct Block {
  float p[kChain][kBlock], q[kChain][kBlock];
};

void loadBlock(Block &s, const float *p, const float *q, int64_t i0, int len) {
  for (int k = 0; k < kChain; ++k)
    for (int l = 0; l < len; ++l) {
      s.p[k][l] = p[(i0 + l) * kChain + k];
      s.q[k][l] = q[(i0 + l) * kChain + k];
    }
}

void stepBlock(Block &s) {
  float g[kChain + 1][kBlock];
  for (int k = 0; k < kChain; ++k) {
#pragma omp simd
    for (int l = 0; l < kBlock; ++l) {
      float e = (k == 0 ? s.p[0][l] : s.p[k][l] - s.p[k - 1][l]) - kSpringRest;
      g[k][l] = e + e * e * e * kSpringCubic;
    }
  }
#pragma omp simd
  for (int l = 0; l < kBlock; ++l)
    g[kChain][l] = 0;
  for (int k = 0; k < kChain; ++k) {
#pragma omp simd
    for (int l = 0; l < kBlock; ++l) {
      float f = (g[k + 1][l] - g[k][l]) * kSpringK;
      float qn = s.q[k][l] + (f - kSpringDamp * s.q[k][l]) * kSpringDt;
      s.q[k][l] = qn;
      s.p[k][l] = s.p[k][l] + kSpringDt * qn;
    }
  }
}

} // namespace

void springForwardVec(const float *p, const float *q, float *out, int64_t n, int steps,
                      unsigned threads) {
  parallelRangesVec(n, threads, [&](int64_t b, int64_t e) {
    Block s{};
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      int len = static_cast<int>(e - i0 < kBlock ? e - i0 : kBlock);
      loadBlock(s, p, q, i0, len);
      for (int t = 0; t < steps; ++t)
        stepBlock(s);
      for (int l = 0; l < len; ++l) {
        float sum = 0;
        for (int k = 0; k < kChain; ++k)
          sum += s.p[k][l];
        out[i0 + l] = sum;
      }
    }
  });
}

void springGradientVec(const float *p, const float *q, const float *outGrad, float *pGrad,
                       float *qGrad, int64_t n, int steps, unsigned threads) {
  parallelRangesVec(n, threads, [&](int64_t b, int64_t e) {
    std::vector<float> tapeStorage(size_t(steps) * kChain * kBlock);
    float *tape = tapeStorage.data();
    Block s{};
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      int len = static_cast<int>(e - i0 < kBlock ? e - i0 : kBlock);
      loadBlock(s, p, q, i0, len);
      for (int t = 0; t < steps; ++t) {
        std::copy(&s.p[0][0], &s.p[0][0] + kChain * kBlock, tape + size_t(t) * kChain * kBlock);
        stepBlock(s);
      }
      float pb[kChain][kBlock], qb[kChain][kBlock];
      for (int k = 0; k < kChain; ++k)
#pragma omp simd
        for (int l = 0; l < kBlock; ++l) {
          pb[k][l] = l < len ? outGrad[i0 + l] : 0.0f;
          qb[k][l] = 0;
        }
      for (int t = steps - 1; t >= 0; --t) {
        const float *pt = tape + size_t(t) * kChain * kBlock;
        float gb[kChain + 1][kBlock] = {};
        for (int k = 0; k < kChain; ++k) {
#pragma omp simd
          for (int l = 0; l < kBlock; ++l) {
            float qnb = qb[k][l] + kSpringDt * pb[k][l];
            float tb = qnb * kSpringDt;
            qb[k][l] = qnb - kSpringDamp * tb;
            gb[k + 1][l] += tb * kSpringK;
            gb[k][l] -= tb * kSpringK;
          }
        }
        for (int k = 0; k < kChain; ++k) {
#pragma omp simd
          for (int l = 0; l < kBlock; ++l) {
            float pk = pt[k * kBlock + l];
            float e = (k == 0 ? pk : pk - pt[(k - 1) * kBlock + l]) - kSpringRest;
            float eb = gb[k][l] * (1.0f + 3.0f * kSpringCubic * e * e);
            pb[k][l] += eb;
            if (k > 0)
              pb[k - 1][l] -= eb;
          }
        }
      }
      for (int l = 0; l < len; ++l)
        for (int k = 0; k < kChain; ++k) {
          pGrad[(i0 + l) * kChain + k] += pb[k][l];
          qGrad[(i0 + l) * kChain + k] += qb[k][l];
        }
    }
  });
}

} // namespace qdbench
