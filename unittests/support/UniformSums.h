//===- UniformSums.h - Atomic adds to one element, on a backend -*- C++ -*-===//
//
// A kernel whose iterations add into one element (a float loss, an i64
// count, inside and outside divergent control flow) and into elements that
// depend on the iteration, and the check that a backend's results equal
// the interpreter's: integer sums exactly, float sums within rounding. GPU
// backends sum the adds to one element over a warp or subgroup first
// (docs/runtime.md; Vulkan only for 32-bit types).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/runtime/Program.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace qd {

inline constexpr const char *kUniformSums =
    R"(kernel @sums(%x: ndarray<f32, 1>, %s: ndarray<f32, 1>, %c: ndarray<i64, 1>, %d: ndarray<f64, 1>) {
  %n = shape %x, 0 : i32
  parallel for %i = 0 to %n {
    %v = load %x[%i] : f32
    %z = const 0 : i32
    atomic_add %s[%z], %v : f32
    %w = cast %i : i32 to i64
    %one = const 1 : i32
    atomic_add %c[%one], %w : i64
    %three = const 3 : i32
    %r = rem %i, %three : i32
    %f = cast %v : f32 to f64
    atomic_add %d[%r], %f : f64
    %half = const 0.5 : f32
    %big = cmp gt %v, %half : f32
    if %big {
      atomic_add %c[%z], %w : i64
    }
  }
}
)";

/// @sums over `n` elements: s[0], c[0], c[1], d[0..2].
inline std::vector<double> runUniformSums(Module &m, Backend &backend, int64_t n) {
  auto program = Program::create(m);
  EXPECT_TRUE(program.ok());
  Buffer x = *Buffer::create(ScalarType::F32, {n}), s = *Buffer::create(ScalarType::F32, {1});
  Buffer c = *Buffer::create(ScalarType::I64, {2}), d = *Buffer::create(ScalarType::F64, {3});
  for (int64_t i = 0; i < n; ++i)
    x.set(i, Scalar::ofFloat(ScalarType::F32, double(i % 97) / 97.0));
  NdarrayArg xa{&x}, sa{&s}, ca{&c}, da{&d};
  const LaunchArg args[] = {LaunchArg::ndarray(&xa), LaunchArg::ndarray(&sa),
                            LaunchArg::ndarray(&ca), LaunchArg::ndarray(&da)};
  absl::Status st = (*program)->launch("sums", args, backend);
  EXPECT_TRUE(st.ok()) << st.message();
  return {s.get(0).f, double(c.get(0).i), double(c.get(1).i), d.get(0).f, d.get(1).f, d.get(2).f};
}

/// `backend`'s sums equal the interpreter's at several sizes.
inline void expectUniformSumsMatch(Backend &backend) {
  auto m = parseModule(kUniformSums, {"sums.qd", 1});
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (int64_t n : {1, 31, 1000, 100003}) {
    SCOPED_TRACE(fmt::format("{} elements", n));
    Interpreter interp;
    std::vector<double> want = runUniformSums(**m, interp, n),
                        got = runUniformSums(**m, backend, n);
    EXPECT_NEAR(got[0], want[0], 1e-5 * std::fabs(want[0]));
    EXPECT_EQ(got[1], want[1]);
    EXPECT_EQ(got[2], want[2]);
    for (int k = 3; k < 6; ++k)
      EXPECT_NEAR(got[k], want[k], 1e-9 * std::fabs(want[k]) + 1e-12);
  }
}

} // namespace qd
