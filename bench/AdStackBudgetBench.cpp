//===- AdStackBudgetBench.cpp - Adstack heap under a memory budget --------===//
//
// qd-bench-adstack-budget: the gradient of a Newton-like per-element loop
// whose trip count is skewed (most elements 3 iterations, one in
// --every=1024 elements 500): its tapes are measured at launch by the
// counting kernel. The benchmark prints, on one backend:
//   - the heap of the interleaved layout (threads x the largest need)
//     against the compacted heap (docs/runtime.md, "Compacted heap":
//     groups of G threads at their own largest need, G chosen per launch
//     or --group=G), both measured in
//     the same run, with the sum of each thread's own need, as byte
//     ratios, and the gradient's time with each (the median over rounds;
//     each ratio is the ratio of the two medians printed);
//   - the compacted heap under a budget of a tenth of the interleaved heap
//     (where it binds: a launch at least 10x smaller than the interleaved
//     one), and of a quarter and an eighth of its own size (fewer threads,
//     more waves), against the interleaved layout, as time ratios;
//   - the default path after a kernel's first launch, the optimistic launch
//     (no counting kernel; the layout from the needs the last launch
//     measured), with the interleaved layout and compacted, on programs of
//     their own, the compacted one as a ratio to the interleaved one.
// Each row names its layout: "groups of G" (a compacted heap) or
// "interleaved". Backends without a compacted heap (the CPU) print the
// interleaved layout twice.
//
//   qd-bench-adstack-budget [--backend=cpu|cuda|vulkan] [--n=N] [--every=K]
//                           [--deep=D] [--reps=R] [--group=G]
//
//===----------------------------------------------------------------------===//
#include "BenchChecks.h"
#include "qd/ir/Parser.h"
#include "qd/runtime/Program.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

// Element i takes @m[i] damped Newton-like steps on v.
constexpr const char *kKernel = R"(
field @x : f32[%N%] grad
field @m : i32[%N%]
field @y : f32[%N%] grad
kernel @k() {
  parallel for %i = 0 to %N% {
    %v = alloca f32
    %c = alloca i32
    %x = load @x[%i] : f32
    store %v, %x
    %m = load @m[%i] : i32
    while {
      %k = load %c : i32
      %done = cmp ge %k, %m : i32
      if %done {
        break
      }
      %a = load %v : f32
      %s = sin %a : f32
      %h = const 0.5 : f32
      %t = mul %s, %h : f32
      %b = add %t, %x : f32
      store %v, %b
      %one = const 1 : i32
      %k1 = add %k, %one : i32
      store %c, %k1
    }
    %r = load %v : f32
    store @y[%i], %r
  }
}
)";

using qdbench::check;
using qdbench::die;
using qdbench::median;

struct Options {
  std::string backend = "cpu";
  int64_t n = 1 << 16, every = 1024, deep = 500;
  int reps = 5;
  /// LaunchOptions::adStackGroupThreads (0: chosen per launch).
  int64_t group = 0;
};

Options parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *flag) { return qdbench::intFlag(a, flag); };
    if (a.rfind("--backend=", 0) == 0)
      o.backend = a.substr(10);
    else if (auto v = value("--n="))
      o.n = *v;
    else if (auto v = value("--every="))
      o.every = *v;
    else if (auto v = value("--deep="))
      o.deep = *v;
    else if (auto v = value("--reps="))
      o.reps = int(*v);
    else if (auto v = value("--group="))
      o.group = *v;
    else
      die("unknown option " + a + " (--backend= --n= --every= --deep= --reps= --group=)");
  }
  if (o.n < 1 || o.every < 1 || o.deep < 1 || o.reps < 1)
    die("--n, --every, --deep and --reps must be positive");
  return o;
}

/// The launch options of a round: counted at every launch (the compacted
/// heap reads each iteration's need), compacted or not, with a budget.
qd::LaunchOptions counted(bool compact, int64_t group, int64_t budget = 0) {
  qd::LaunchOptions o;
  o.optimisticAdStacks = false;
  o.compactAdStacks = compact;
  o.adStackGroupThreads = group;
  o.adStackMemoryBudget = budget;
  return o;
}

/// The options of an optimistic round (the default path after a kernel's
/// first launch), compacted or not.
qd::LaunchOptions optimistic(bool compact, int64_t group) {
  qd::LaunchOptions o;
  o.optimisticAdStacks = true;
  o.compactAdStacks = compact;
  o.adStackGroupThreads = group;
  return o;
}

/// Per case, the median time and its ratio to the median time of its base
/// case (base[f]): every printed ratio is the ratio of two printed medians.
void printTimes(const std::vector<std::string> &what, const std::vector<std::vector<double>> &ms,
                const std::vector<qd::AdStackHeapUsage> &used, const std::vector<size_t> &base) {
  for (size_t f = 0; f < what.size(); ++f) {
    size_t b = base[f];
    std::string layout =
        used[f].groups ? fmt::format("groups of {}, {} column(s), {} table run(s)",
                                     used[f].groupThreads, used[f].tableColumns, used[f].tableRuns)
                       : std::string("interleaved");
    fmt::print("  {} ({}): heap {} bytes ({:.1f}x smaller), own needs {} bytes, {} {}, {} waves: "
               "{:.3f} ms, {:.2f}x of {}\n",
               what[f], layout, used[f].bytes,
               double(used[b].bytes) / double(std::max<int64_t>(used[f].bytes, 1)),
               used[f].needBytes, used[f].threads, used[f].threadKind, used[f].waves, median(ms[f]),
               median(ms[f]) / median(ms[b]), what[b]);
  }
}

int run(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  std::string text = kKernel;
  for (size_t p; (p = text.find("%N%")) != std::string::npos;)
    text.replace(p, 3, std::to_string(o.n));
  auto module = check(qd::parseModule(text, {"budget.qd", 1}));
  check(qd::buildGradientKernel(*module, *module->findKernel("k")).status());
  std::unique_ptr<qd::Backend> created =
      qdbench::backendOrNothing("qd-bench-adstack-budget", o.backend);
  if (!created)
    return 0;
  qd::Backend &backend = *created;
  // One program for the counted cases, one per optimistic case (each keeps
  // what its last launch measured).
  std::vector<std::unique_ptr<qd::Program>> programs;
  for (int p = 0; p < 3; ++p) {
    programs.push_back(check(qd::Program::create(*module)));
    for (int64_t i = 0; i < o.n; ++i) {
      int64_t trips = i % o.every == o.every / 2 ? o.deep : 3;
      programs[p]->field("m")->set(i, qd::Scalar::ofInt(qd::ScalarType::I32, trips));
      programs[p]->field("x")->set(
          i, qd::Scalar::ofFloat(qd::ScalarType::F32, 0.001 * double(i % 97)));
    }
  }
  auto gradient = [&](qd::Program &program, const qd::LaunchOptions &options) {
    for (int64_t i = 0; i < o.n; ++i)
      program.field("y", qd::Component::Grad)->set(i, qd::Scalar::ofFloat(qd::ScalarType::F32, 1));
    auto t0 = std::chrono::steady_clock::now();
    check(program.launch("k_grad", {}, backend, options));
    check(program.field("x", qd::Component::Grad)->syncToHost());
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  gradient(*programs[0], counted(true, o.group)); // compiles the variants
  for (int p = 1; p < 3; ++p)                     // the first launches count
    gradient(*programs[p], optimistic(p == 2, o.group));
  fmt::print("qd-bench-adstack-budget on {}: {} elements, 1 in {} takes {} steps, the others 3\n",
             backend.name(), o.n, o.every, o.deep);
  // Counted: the interleaved layout, the compacted heap, and the compacted
  // heap under a tenth of the interleaved heap's bytes and under a quarter
  // and an eighth of its own; then the optimistic launches, interleaved
  // and compacted; taking turns per round.
  std::vector<std::string> what{"interleaved", "compacted"};
  constexpr size_t kCounted = 5, kCases = 7;
  std::vector<std::vector<double>> ms(kCases);
  std::vector<qd::AdStackHeapUsage> used(kCases);
  auto budgetOf = [&](size_t f) -> int64_t {
    if (f < 2 || f >= kCounted)
      return 0;
    int64_t b = f == 2 ? used[0].bytes / 10 : used[1].bytes / (f == 3 ? 4 : 8);
    // At least one thread's share (the CPU, which does not compact,
    // cannot run less than one worker's slice).
    return std::max(b, used[1].bytes / std::max<int64_t>(used[1].threads, 1));
  };
  for (int r = 0; r < o.reps; ++r)
    for (size_t f = 0; f < kCases; ++f) {
      ms[f].push_back(f < kCounted
                          ? gradient(*programs[0], counted(f > 0, o.group, budgetOf(f)))
                          : gradient(*programs[f - kCounted + 1], optimistic(f == 6, o.group)));
      used[f] = *backend.lastAdStackHeapUsage();
      if (r == 0 && f < 2 && used[f].bytes == 0)
        die("the gradient used no heap (local tapes?): nothing to compare");
    }
  what.push_back(
      fmt::format("compacted, budget {} bytes (the interleaved heap / 10)", used[2].budgetBytes));
  what.push_back(fmt::format("compacted, budget {} bytes", used[3].budgetBytes));
  what.push_back(fmt::format("compacted, budget {} bytes", used[4].budgetBytes));
  what.push_back("optimistic, interleaved");
  what.push_back("optimistic, compacted");
  printTimes(what, ms, used, {0, 0, 0, 0, 0, 5, 5});
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-adstack-budget", argc, argv, run);
}
