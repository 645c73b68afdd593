//===- AdStackSizingHarness.h - Adstack sizing test harness -----*- C++ -*-===//
//
// The harness the AdStackSizing*Test files share: a module launched on the
// interpreter through Program::launch, with the sizing and the observed
// depth of each stack, and owned ndarray arguments.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/AdStackSizing.h"
#include "qd/analysis/NetPushPaths.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"

#include "ProgramGen.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace qd::sizingtest {

inline std::string message(const absl::Status &s) {
  return std::string(s.message());
}

/// Parses and verifies a module, instantiates it and launches kernels on the
/// interpreter through Program::launch (which sizes the adstacks).
class Harness {
public:
  explicit Harness(std::string_view text) : text_(text) {
    auto m = parseModule(text, {"t.qd", 1});
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok())
      return;
    module = *std::move(m);
    absl::Status v = verify(*module);
    EXPECT_TRUE(v.ok()) << v.message();
    auto p = Program::create(*module);
    EXPECT_TRUE(p.ok()) << p.status().message();
    if (p.ok())
      program = *std::move(p);
  }

  bool ok() const { return module && program; }

  const Kernel &kernel(std::string_view name = "k") const {
    Kernel *k = module->findKernel(name);
    EXPECT_NE(k, nullptr) << "no kernel @" << name;
    return *k;
  }
  const KernelSizing &sizing(std::string_view name = "k") {
    return **interp.adStackSizing(kernel(name));
  }
  /// The sizing of the stack printed as `%name`.
  const AdStackSize &stack(std::string_view name, std::string_view kernelName = "k") {
    for (const AdStackSize &s : sizing(kernelName).stacks())
      if (s.name() == name)
        return s;
    ADD_FAILURE() << "no adstack " << name;
    static AdStackSize none;
    return none;
  }

  absl::Status run(std::vector<LaunchArg> args = {}, const LaunchOptions &options = {},
                   std::string_view name = "k") {
    return program->launch(name, args, interp, options);
  }

  /// The capacity the last launch gave `s` (the sized one, or the declared).
  int64_t capacity(const AdStackSize &s) const {
    auto it = program->lastAdStackCapacities().find(s.stack);
    if (it != program->lastAdStackCapacities().end())
      return it->second;
    return interp.adStackCapacities().at(s.stack);
  }
  /// The depth the interpreter observed in the last launch (-1: the
  /// alloca never executed).
  int64_t observed(const AdStackSize &s) const {
    auto it = interp.adStackMaxDepths().find(s.stack);
    return it == interp.adStackMaxDepths().end() ? -1 : it->second;
  }

  /// Soundness and tightness of every stack of the last launch of `name`.
  void checkLaunch(std::string_view name = "k") {
    const KernelSizing &ks = sizing(name);
    for (const AdStackSize &s : ks.stacks()) {
      int64_t depth = observed(s);
      if (depth < 0)
        continue;
      int64_t cap = capacity(s);
      EXPECT_EQ(interp.adStackCapacities().at(s.stack), cap) << ks.describe(s);
      EXPECT_GE(cap, depth) << "unsound: " << ks.describe(s) << "\n" << text_;
      if (s.exact) {
        EXPECT_EQ(cap, std::max<int64_t>(depth, 1)) << "not tight: " << ks.describe(s);
      }
    }
  }

  void setI(std::string_view field, std::vector<int64_t> values) {
    Buffer *b = program->field(field);
    for (size_t i = 0; i < values.size(); ++i)
      b->set(static_cast<int64_t>(i), Scalar::ofInt(b->elementType(), values[i]));
  }

  std::unique_ptr<Module> module;
  std::unique_ptr<Program> program;
  Interpreter interp;

private:
  std::string text_;
};

inline LaunchOptions withDefault(int64_t capacity) {
  LaunchOptions o;
  o.defaultAdStackCapacity = capacity;
  return o;
}

inline SizingOptions onlyTier1(bool structural, bool bellmanFord) {
  SizingOptions o;
  o.structural = structural;
  o.bellmanFord = bellmanFord;
  return o;
}

/// An owned i32 ndarray argument.
struct IntArray {
  Buffer buffer;
  NdarrayArg arg;
  IntArray(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
    auto b = Buffer::create(ScalarType::I32, std::move(shape));
    EXPECT_TRUE(b.ok());
    buffer = *std::move(b);
    EXPECT_EQ(buffer.numElements(), static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i)
      buffer.set(static_cast<int64_t>(i), Scalar::ofInt(ScalarType::I32, values[i]));
    arg.primal = &buffer;
  }
  IntArray(const IntArray &) = delete;
  LaunchArg launchArg() const { return LaunchArg::ndarray(&arg); }
};

} // namespace qd::sizingtest
