//===- OptimisticLaunchHarness.h - Optimistic launch harness ----*- C++ -*-===//
//
// What the OptimisticLaunch*Test files share: the gradient of a
// data-dependent while loop (whileKernel) launched on each backend, the backends
// this machine has, and the reference gradient.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/AdStackSizing.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/transforms/AutoDiff.h"

#include "ProgramGen.h"

#include "VerifiedModule.h"
#include <fmt/format.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <iostream>
#include <vector>

namespace qd::optimistictest {

inline std::string message(const absl::Status &s) {
  return std::string(s.message());
}

// Element i of n iterates m[i] times: the tape of `v` and of the counter
// are measured at launch, each needing max(m) entries.
inline std::string whileKernel(int n) {
  return fmt::format(R"(
field @x : f32[{0}] grad
field @m : i32[{0}]
field @y : f32[{0}] grad

kernel @k() {{
  parallel for %i = 0 to {0} {{
    %v = alloca f32
    %c = alloca i32
    %x = load @x[%i] : f32
    store %v, %x
    %m = load @m[%i] : i32
    while {{
      %k = load %c : i32
      %done = cmp ge %k, %m : i32
      if %done {{
        break
      }}
      %a = load %v : f32
      %s = sin %a : f32
      %b = add %s, %x : f32
      store %v, %b
      %one = const 1 : i32
      %k1 = add %k, %one : i32
      store %c, %k1
    }}
    %r = load %v : f32
    store @y[%i], %r
  }}
}}
)",
                     n);
}

inline std::unique_ptr<Module> parseWithGradient(const char *text) {
  std::unique_ptr<Module> m = parseVerified(text);
  if (!m)
    return nullptr;
  auto g = buildGradientKernel(*m, *m->findKernel("k"));
  EXPECT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(verify(*m).ok());
  return m;
}

inline CpuBackend &cpu(unsigned lanes) {
  static std::map<unsigned, std::unique_ptr<CpuBackend>> backends;
  std::unique_ptr<CpuBackend> &b = backends[lanes];
  if (!b) {
    CpuBackendOptions o;
    o.threads = 2;
    o.vectorWidth = lanes;
    o.vectorMath = false;
    b = *CpuBackend::create(o);
  }
  return *b;
}

/// Registered backend `name` with its defaults, or null (saying why) on a
/// machine without its device or in a build without it.
inline std::unique_ptr<Backend> registered(const char *name, const BackendOptions &options = {}) {
  registerAllBackends();
  auto b = createBackend(name, options);
  if (!b.ok()) {
    std::cout << "[" << name << "] " << b.status().message() << "\n";
    return nullptr;
  }
  return *std::move(b);
}

/// The CUDA backend, or null.
inline Backend *cuda() {
  static std::unique_ptr<Backend> backend = registered("cuda");
  return backend.get();
}

/// The Vulkan backend (lavapipe where that is the only device), or null.
inline Backend *vulkan() {
  static std::unique_ptr<Backend> backend = registered("vulkan");
  return backend.get();
}

/// The CPU's 8 lanes, the interpreter and the GPU backends this machine has.
inline std::vector<Backend *> compiledBackends(Interpreter &interp) {
  std::vector<Backend *> out{&cpu(8), &interp};
  for (Backend *gpu : {cuda(), vulkan()})
    if (gpu)
      out.push_back(gpu);
  return out;
}

#define REQUIRE(backend, what)                                                                     \
  if (!(backend))                                                                                  \
  GTEST_SKIP() << "no " what " backend on this machine"

/// One instance of whileKernel(16)'s module: sets @x and @m, seeds @y's adjoint,
/// launches @k_grad and reads @x's adjoint.
class WhileGradient {
public:
  WhileGradient() : module_(parseWithGradient(whileKernel(16).c_str())) {
    program_ = *Program::create(*module_);
    for (int i = 0; i < 16; ++i)
      program_->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.1 * (i % 5) - 0.2));
  }
  const Kernel &grad() const { return *module_->findKernel("k_grad"); }
  Program &program() { return *program_; }

  absl::Status launch(Backend &backend, const std::vector<int> &m, const LaunchOptions &options) {
    for (int i = 0; i < 16; ++i) {
      program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, m[i]));
      program_->field("y", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 1.0));
      program_->field("x", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 0.0));
    }
    return program_->launch("k_grad", {}, backend, options);
  }
  std::vector<double> xGrad() {
    std::vector<double> out;
    Buffer &b = *program_->field("x", Component::Grad);
    EXPECT_TRUE(b.syncToHost().ok());
    for (int i = 0; i < 16; ++i)
      out.push_back(b.get(i).f);
    return out;
  }
  /// The capacities the last launch recorded for the measured stacks.
  std::vector<int64_t> measuredCapacities(Backend &backend) {
    std::vector<int64_t> out;
    for (const AdStackSize &s : (*backend.adStackSizing(grad()))->stacks())
      if (s.tier == SizingTier::Measured)
        out.push_back(program_->lastAdStackCapacities().at(s.stack));
    return out;
  }

private:
  std::unique_ptr<Module> module_;
  std::unique_ptr<Program> program_;
};

/// The gradient the interpreter computes with the counting kernel.
inline std::vector<double> reference(const std::vector<int> &m) {
  WhileGradient ref;
  Interpreter interp;
  EXPECT_TRUE(ref.launch(interp, m, {}).ok());
  EXPECT_EQ(ref.program().lastMeasuredLaunch().path, Program::MeasuredLaunch::Path::Counted);
  return ref.xGrad();
}

inline LaunchOptions optimistic(int64_t initial = 0) {
  LaunchOptions o;
  o.optimisticAdStacks = true;
  o.optimisticInitialCapacity = initial;
  return o;
}

inline void expectNear(const std::vector<double> &got, const std::vector<double> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << "element " << i;
}

} // namespace qd::optimistictest
