//===- GradientReference.h - Reference gradients of the GPU benchmarks -*- C++ -*-===//
//
// The exact gradient of every element of a workload of GradientWorkloads.h
// at any N, from one period of its inputs: the inputs depend on the element
// index only modulo 1000 (a: x), 13000 (b: x and m) and 187 (c: i mod 17
// for p, i mod 11 for q), and so does the gradient (the output adjoint is 1
// everywhere). The period is computed with the hand-written scalar reverse
// loops of GradientHandwritten.cpp, on one thread. Used by qd-bench-gpu and
// by the hand-written CUDA of bench/gpu/peers.cu.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "GradientWorkloads.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace qdbench {

/// The gradient of every element from one period of the inputs.
struct Reference {
  int64_t period = 1;
  int64_t per = 1; // floats per element and field
  /// Per field, `period * per` values.
  std::vector<std::vector<float>> fields;
  float scale = 0; // the largest |value|

  float at(size_t field, int64_t flat) const {
    int64_t i = flat / per, k = flat % per;
    return fields[field][size_t((i % period) * per + k)];
  }
  /// The sum of every field's gradient over `n` elements, in double.
  double sum(int64_t n) const {
    double s = 0;
    for (int64_t r = 0; r < period; ++r) {
      double count = double(n / period + (r < n % period ? 1 : 0));
      double v = 0;
      for (const auto &f : fields)
        for (int64_t k = 0; k < per; ++k)
          v += f[size_t(r * per + k)];
      s += count * v;
    }
    return s;
  }
};

inline Reference reference(const std::string &key) {
  Reference r;
  if (key == "a" || key == "b") {
    r.period = key == "a" ? 1000 : 13000;
    std::vector<float> x(r.period), ones(r.period, 1.0f), g(r.period, 0.0f);
    std::vector<int32_t> m(r.period);
    for (int64_t i = 0; i < r.period; ++i) {
      x[i] = sinInput(i);
      m[i] = triBound(i);
    }
    if (key == "a")
      sinGradient(x.data(), ones.data(), g.data(), r.period, kSinSteps, 1);
    else
      triGradient(x.data(), m.data(), ones.data(), g.data(), r.period, 1);
    r.fields.push_back(std::move(g));
  } else {
    r.period = 17 * 11;
    r.per = kChain;
    size_t count = size_t(r.period * kChain);
    std::vector<float> p(count), q(count), ones(r.period, 1.0f), pg(count, 0.0f), qg(count, 0.0f);
    for (int64_t i = 0; i < r.period; ++i)
      for (int k = 0; k < kChain; ++k) {
        p[i * kChain + k] = springP(i, k);
        q[i * kChain + k] = springQ(i, k);
      }
    springGradient(p.data(), q.data(), ones.data(), pg.data(), qg.data(), r.period, kSpringSteps,
                   1);
    r.fields.push_back(std::move(pg));
    r.fields.push_back(std::move(qg));
  }
  for (const auto &f : r.fields)
    for (float v : f)
      r.scale = std::max(r.scale, std::fabs(v));
  return r;
}

} // namespace qdbench
