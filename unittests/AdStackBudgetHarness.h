//===- AdStackBudgetHarness.h - Workloads of the adstack budget tests -*- C++ -*-===//
//
// What AdStackBudgetTest and AdStackBudgetGroupsTest share: the backends (every
// stack in the heap), the skewed gradient (most elements iterate 3 times,
// every 37th 60) and PushCounts (iteration i pushes need(i) entries), the
// launch options and the compacted heap's table bytes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "OptimisticLaunchHarness.h"

#include "qd/runtime/LaunchPlan.h"

#include <functional>

namespace qd::budgettest {

using optimistictest::cpu;

/// Registered backend `name` with every stack in the heap (no local
/// tapes), or null (saying why) on a machine without its device.
inline std::unique_ptr<Backend> heapOnly(const char *name, const char *maxThreads = nullptr) {
  BackendOptions o;
  o.set("local-tape-bytes", "0");
  if (maxThreads)
    o.set("max-threads", maxThreads);
  return optimistictest::registered(name, o);
}

inline Backend *vulkan() {
  static std::unique_ptr<Backend> backend = heapOnly("vulkan");
  return backend.get();
}

/// Vulkan with a grid of 64 invocations: a task of more iterations runs
/// in waves with the interleaved layout.
inline Backend *smallGridVulkan() {
  static std::unique_ptr<Backend> backend = heapOnly("vulkan", "64");
  return backend.get();
}

inline Backend *cuda() {
  static std::unique_ptr<Backend> backend = heapOnly("cuda");
  return backend.get();
}

inline constexpr int kElements = 256;

/// Most elements need 3 iterations, every 37th needs 60.
inline int skewedNeed(int i) {
  return i % 37 == 5 ? 60 : 3;
}

class SkewedGradient {
public:
  SkewedGradient()
      : module_(optimistictest::parseWithGradient(optimistictest::whileKernel(kElements).c_str())) {
    program_ = *Program::create(*module_);
    for (int i = 0; i < kElements; ++i) {
      program_->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.1 * (i % 5) - 0.2));
      program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, skewedNeed(i)));
    }
  }
  /// Launches @k_grad with @y's adjoint 1 and returns @x's adjoint.
  absl::StatusOr<std::vector<double>> gradient(Backend &backend, const LaunchOptions &options) {
    for (int i = 0; i < kElements; ++i) {
      program_->field("y", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 1.0));
      program_->field("x", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 0.0));
    }
    if (absl::Status s = program_->launch("k_grad", {}, backend, options); !s.ok())
      return s;
    Buffer &b = *program_->field("x", Component::Grad);
    if (absl::Status s = b.syncToHost(); !s.ok())
      return s;
    std::vector<double> out;
    for (int i = 0; i < kElements; ++i)
      out.push_back(b.get(i).f);
    return out;
  }

  /// Element i iterates m times.
  void setIterations(int i, int m) {
    program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, m));
  }
  Program &program() { return *program_; }

private:
  std::unique_ptr<Module> module_;
  std::unique_ptr<Program> program_;
};

/// The interleaved layout (every thread at the largest need), whose waves
/// the first tests check; `bytes` of budget (0: the default).
inline LaunchOptions withBudget(int64_t bytes) {
  LaunchOptions o;
  o.adStackMemoryBudget = bytes;
  o.compactAdStacks = false;
  return o;
}

/// The counting kernel at every launch (a compacted heap needs its
/// per-iteration needs), compacted or not, with `bytes` of budget, in
/// groups of `group` threads (0: chosen per launch).
inline LaunchOptions counted(bool compact, int64_t bytes = 0, int64_t group = 32) {
  LaunchOptions o;
  o.optimisticAdStacks = false;
  o.compactAdStacks = compact;
  o.adStackMemoryBudget = bytes;
  o.adStackGroupThreads = group;
  return o;
}

/// The default path (optimistic after a kernel's first launch) in groups
/// of 32 threads, with `bytes` of budget.
inline LaunchOptions groupsOf32(int64_t bytes = 0) {
  LaunchOptions o;
  o.adStackGroupThreads = 32;
  o.adStackMemoryBudget = bytes;
  return o;
}

/// The interpreter's gradient (the oracle).
inline std::vector<double> reference() {
  SkewedGradient g;
  Interpreter interp;
  absl::StatusOr<std::vector<double>> r = g.gradient(interp, {});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<double>();
}

/// Iteration i pushes need(i) f32 values (4 bytes an entry) in a while
/// loop (a measured stack), then pops and sums them: y[i] = need(i) *
/// (need(i) - 1) / 2.
class PushCounts {
public:
  enum Extra {
    None,
    /// The kernel stores to @w before its task: a serial entry ahead of
    /// the parallel one.
    SerialFirst,
    /// An f64 stack takes the same values alongside (8 bytes an entry,
    /// pushed and popped with the f32 one): y[i] = need(i) * (need(i) - 1).
    F64Twin,
  };
  PushCounts(int n, const std::function<int(int)> &need, Extra extra = None)
      : n_(n), factor_(extra == F64Twin ? 2 : 1) {
    const bool twin = extra == F64Twin;
    module_ = parseVerified(fmt::format(
        R"(
field @m : i32[{0}]
field @y : f32[{0}]
field @w : i32
kernel @k() {{
  {1}
  parallel for %i = 0 to {0} {{
    %s = adstack.alloca f32, capacity 0
    {2}
    %c = alloca i32
    %acc = alloca f32
    %n = load @m[%i] : i32
    while {{
      %k = load %c : i32
      %done = cmp ge %k, %n : i32
      if %done {{
        break
      }}
      %f = cast %k : i32 to f32
      adstack.push %s, %f
      {3}
      %one = const 1 : i32
      %k1 = add %k, %one : i32
      store %c, %k1
    }}
    for %q = 0 to %n {{
      %t = adstack.load_top %s : f32
      {4}
      %a = load %acc : f32
      %b = add %a, {5} : f32
      store %acc, %b
      adstack.pop %s
    }}
    %r = load %acc : f32
    store @y[%i], %r
  }}
}}
)",
        n, extra == SerialFirst ? "serial {\n    %z = const 7 : i32\n    store @w[], %z\n  }" : "",
        twin ? "%d = adstack.alloca f64, capacity 0" : "",
        twin ? "%g = cast %k : i32 to f64\n      adstack.push %d, %g" : "",
        twin ? "%h = adstack.load_top %d : f64\n      %hf = cast %h : f64 to f32\n"
               "      %t2 = add %t, %hf : f32\n      adstack.pop %d"
             : "",
        twin ? "%t2" : "%t"));
    program_ = *Program::create(*module_);
    for (int i = 0; i < n; ++i) {
      needs_.push_back(need(i));
      program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, needs_.back()));
    }
  }
  /// Iteration i pushes `need` values from the next launch on.
  void setNeed(int i, int need) {
    needs_.at(size_t(i)) = need;
    program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, need));
  }
  /// Launches @k and checks @y.
  void launch(Backend &backend, const LaunchOptions &options) {
    ASSERT_TRUE(program_->launch("k", {}, backend, options).ok());
    Buffer &y = *program_->field("y");
    ASSERT_TRUE(y.syncToHost().ok());
    for (int i = 0; i < n_; ++i)
      ASSERT_EQ(y.get(i).f, double(factor_ * int64_t(needs_[i]) * (needs_[i] - 1) / 2)) << i;
  }
  /// The regions of a compacted heap on `threads` threads in groups of
  /// `lanes`: thread t runs iterations t, t + threads, ...; each group
  /// holds `lanes` rows of its largest need (at least 1 where it runs an
  /// iteration), rounded up to `unit` bytes.
  int64_t groupNeedBytes(int64_t threads, int64_t lanes = 32, int64_t unit = 8) const {
    int64_t bytes = 0;
    for (int64_t g = 0; g * lanes < threads; ++g) {
      int64_t most = 0;
      for (int64_t t = g * lanes; t < std::min<int64_t>(threads, g * lanes + lanes); ++t)
        for (int64_t i = t; i < n_; i += threads)
          most = std::max<int64_t>(most, std::max(needs_[i], 1));
      bytes += (lanes * most * 4 + unit - 1) / unit * unit;
    }
    return bytes;
  }
  /// The bytes of each thread's own need (its largest iteration's, rounded
  /// to `unit` bytes), summed: the needs of the iterations in flight.
  int64_t ownNeedBytes(int64_t threads, int64_t unit = 8) const {
    int64_t bytes = 0;
    for (int64_t t = 0; t < std::min<int64_t>(threads, n_); ++t) {
      int64_t most = 1;
      for (int64_t i = t; i < n_; i += threads)
        most = std::max<int64_t>(most, needs_[i]);
      bytes += (most * 4 + unit - 1) / unit * unit;
    }
    return bytes;
  }

  /// The own needs (rounded to `unit` bytes) of iterations [first, last)
  /// on a thread each: a window's regions in groups of one thread.
  int64_t windowNeedBytes(int64_t first, int64_t last, int64_t unit) const {
    int64_t bytes = 0;
    for (int64_t i = first; i < std::min<int64_t>(last, n_); ++i)
      bytes += (std::max(needs_[size_t(i)], 1) * 4 + unit - 1) / unit * unit;
    return bytes;
  }

private:
  int n_;
  int64_t factor_;
  std::vector<int> needs_;
  std::unique_ptr<Module> module_;
  std::unique_ptr<Program> program_;
};

/// The table's bytes for `threads` threads in groups of `lanes` and one
/// stack: an i64 per group.
/// The bytes of a compacted heap's table (docs/runtime.md, "Compacted
/// heap") for `threads` threads in groups of `lanes`, `stacks` stacks in
/// `columns` columns: u32 words, a header of 1 + 3 x stacks, one offset
/// per group and column, and the heap's end.
inline int64_t tableBytes(int64_t threads, int64_t lanes = 32, int64_t stacks = 1,
                          int64_t columns = 1) {
  return (1 + 3 * stacks + (threads + lanes - 1) / lanes * columns + 1) * 4;
}

/// The unit of a compacted heap's offsets and regions on `backend`: words
/// on Vulkan, 8 bytes on CUDA and HIP.
inline int64_t regionUnit(const Backend &backend) {
  return backend.name() == "vulkan" ? 4 : 8;
}

} // namespace qd::budgettest
