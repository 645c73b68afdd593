//===- CooperativeKernels.h - A hidden layer, the cooperative task's shape -*- C++ -*-===//
//
// The mass-spring controller's hidden layer (a task over 8 units, each
// summing over every input) and a run of it and its gradient on a backend:
// what the GPU targets run cooperatively, a group of threads per unit
// (docs/runtime.md, "Cooperative tasks"). CooperativeTaskTest (CUDA) and
// VulkanBackendTest compare a backend's results with the interpreter's.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Program.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace qd {

/// Each of 8 hidden units: tanh(b[u] + sum_j w[u, j] x[j]) (the mass-spring
/// controller's shape). `loopBody` replaces the loop's body when given.
inline std::string hiddenKernel(const std::string &taskEnd = "8", const std::string &loopBody = "",
                                const std::string &after = "    store %h[%u], %y\n") {
  std::string body = loopBody.empty() ? R"(      %wv = load %w[%u, %j] : f32
      %xv = load %x[%j] : f32
      %t = mul %wv, %xv : f32
      %old = load %s : f32
      %new = add %old, %t : f32
      store %s, %new
)"
                                      : loopBody;
  return fmt::format(
      R"(kernel @hidden(%w: ndarray<f32, 2> grad, %x: ndarray<f32, 1> grad, %b: ndarray<f32, 1> grad, %h: ndarray<f32, 1> grad) {{
  %n = shape %x, 0 : i32
  %units = shape %b, 0 : i32
  parallel for %u = 0 to {} {{
    %s = alloca f32
    %b0 = load %b[%u] : f32
    store %s, %b0
    for %j = 0 to %n {{
{}    }}
    %f = load %s : f32
    %y = tanh %f : f32
{}  }}
}}
)",
      taskEnd, body, after);
}

/// hiddenKernel's loop body that adds only the positive terms (a sum under
/// a test of data, billiards' contact test in miniature).
inline std::string positiveTermsOnly() {
  return R"(      %wv = load %w[%u, %j] : f32
      %xv = load %x[%j] : f32
      %t = mul %wv, %xv : f32
      %lim = const 0.0 : f32
      %c = cmp gt %t, %lim : f32
      if %c {
        %old = load %s : f32
        %new = add %old, %t : f32
        store %s, %new
      }
)";
}

/// @hidden and its gradient with h.grad = 1 over `n` inputs: h, then the
/// gradients of w, x and b.
inline std::vector<float> runHidden(Module &m, Backend &backend, int64_t n, int64_t units = 8) {
  auto program = Program::create(m);
  EXPECT_TRUE(program.ok());
  auto make = [](std::vector<int64_t> shape) { return *Buffer::create(ScalarType::F32, shape); };
  Buffer w = make({units, n}), wg = make({units, n}), x = make({n}), xg = make({n}),
         b = make({units}), bg = make({units}), h = make({units}), hg = make({units});
  for (int64_t i = 0; i < units * n; ++i)
    w.set(i, Scalar::ofFloat(ScalarType::F32, 0.01 * double((i * 7) % 13) - 0.06));
  for (int64_t i = 0; i < n; ++i)
    x.set(i, Scalar::ofFloat(ScalarType::F32, 0.02 * double(i % 17) - 0.15));
  for (int64_t i = 0; i < units; ++i)
    b.set(i, Scalar::ofFloat(ScalarType::F32, 0.1 * double(i) - 0.3));
  hg.fill(Scalar::ofFloat(ScalarType::F32, 1.0));
  NdarrayArg wa{&w, &wg}, xa{&x, &xg}, ba{&b, &bg}, ha{&h, &hg};
  const LaunchArg args[] = {LaunchArg::ndarray(&wa), LaunchArg::ndarray(&xa),
                            LaunchArg::ndarray(&ba), LaunchArg::ndarray(&ha)};
  EXPECT_TRUE((*program)->launch("hidden", args, backend).ok());
  absl::Status s = (*program)->launch("hidden_grad", args, backend);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<float> out;
  for (const Buffer *buf : {&h, &wg, &xg, &bg})
    for (int64_t i = 0; i < buf->numElements(); ++i)
      out.push_back(float(buf->get(i).f));
  return out;
}

} // namespace qd
