//===- AdStackBudgetBench.cpp - Adstack heap under a memory budget --------===//
//
// qd-bench-adstack-budget: the gradient of a Newton-like per-element loop
// whose trip count is skewed (most elements 3 iterations, one in
// --every=1024 elements 500): its tapes are measured at launch, and every
// thread's heap slice holds the deepest iteration. The benchmark prints,
// on one backend:
//   - the heap of today's layout (threads x the largest need) against the
//     sum of the real needs of the iterations in flight, exact per
//     iteration and interleaved in groups of 32 at the group's largest need
//     (what a compacted heap would hold; docs/runtime.md, "Adstack memory
//     budget"), as ratios;
//   - the gradient with a budget that holds a quarter (and an eighth) of
//     the threads, against one wave, as time ratios.
//
//   qd-bench-adstack-budget [--backend=cpu|cuda|vulkan] [--n=N] [--every=K]
//                           [--deep=D] [--reps=R]
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "qd/ir/Parser.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/runtime/Program.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
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

using qdbench::die;

template <typename T> T check(absl::StatusOr<T> v) {
  if (!v.ok())
    die(std::string(v.status().message()));
  return *std::move(v);
}

void check(const absl::Status &s) {
  if (!s.ok())
    die(std::string(s.message()));
}

struct Options {
  std::string backend = "cpu";
  int64_t n = 1 << 16, every = 1024, deep = 500;
  int reps = 5;
};

Options parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *flag) {
      size_t len = std::string(flag).size();
      return a.rfind(flag, 0) == 0 ? std::optional(std::atoll(a.c_str() + len)) : std::nullopt;
    };
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
    else
      die("unknown option " + a + " (--backend= --n= --every= --deep= --reps=)");
  }
  if (o.n < 1 || o.every < 1 || o.deep < 1 || o.reps < 1)
    die("--n, --every, --deep and --reps must be positive");
  return o;
}

/// What a compacted heap would hold for the iterations in flight: the
/// largest over waves of `inFlight` consecutive iterations of the sum of
/// their needs, exact (`group` 1) or in groups of `group` at the group's
/// largest need.
int64_t compactedBytes(const std::vector<int64_t> &need, int64_t inFlight, int64_t group) {
  int64_t most = 0;
  for (size_t w = 0; w < need.size(); w += size_t(inFlight)) {
    int64_t sum = 0;
    size_t end = std::min(need.size(), w + size_t(inFlight));
    for (size_t g = w; g < end; g += size_t(group)) {
      size_t gend = std::min(end, g + size_t(group));
      sum += *std::max_element(need.begin() + g, need.begin() + gend) * int64_t(gend - g);
    }
    most = std::max(most, sum);
  }
  return most;
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  std::string text = kKernel;
  for (size_t p; (p = text.find("%N%")) != std::string::npos;)
    text.replace(p, 3, std::to_string(o.n));
  auto module = check(qd::parseModule(text, {"budget.qd", 1}));
  check(qd::buildGradientKernel(*module, *module->findKernel("k")).status());
  qd::registerAllBackends();
  auto created = qd::createBackend(o.backend);
  if (!created.ok()) {
    fmt::print("qd-bench-adstack-budget: no {} backend ({}); nothing measured\n", o.backend,
               std::string(created.status().message()));
    return 0;
  }
  qd::Backend &backend = **created;
  auto program = check(qd::Program::create(*module));
  std::vector<int64_t> trips(o.n);
  for (int64_t i = 0; i < o.n; ++i) {
    trips[i] = i % o.every == o.every / 2 ? o.deep : 3;
    program->field("m")->set(i, qd::Scalar::ofInt(qd::ScalarType::I32, trips[i]));
    program->field("x")->set(i, qd::Scalar::ofFloat(qd::ScalarType::F32, 0.001 * double(i % 97)));
  }
  auto gradient = [&](const qd::LaunchOptions &options) {
    for (int64_t i = 0; i < o.n; ++i)
      program->field("y", qd::Component::Grad)->set(i, qd::Scalar::ofFloat(qd::ScalarType::F32, 1));
    auto t0 = std::chrono::steady_clock::now();
    check(program->launch("k_grad", {}, backend, options));
    check(program->field("x", qd::Component::Grad)->syncToHost());
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  gradient({}); // counts
  gradient({}); // the optimistic launch at the measured needs
  qd::AdStackHeapUsage today = *backend.lastAdStackHeapUsage();
  if (today.bytes == 0)
    die("the gradient used no heap (local tapes?): nothing to compare");
  // One thread's slice holds `lanes` iterations (a CPU group of SIMD lanes)
  // at the largest need; each tape takes one entry per Newton step, so an
  // iteration needs its trip count's share of the slice.
  int64_t lanes = 1;
  if (auto *cpu = dynamic_cast<qd::CpuBackend *>(&backend); cpu && !cpu->lastTaskLanes().empty())
    lanes = std::max(cpu->lastTaskLanes().front(), 1);
  int64_t perThread = today.bytes / today.threads;
  double perStep = double(perThread) / double(lanes) / double(o.deep);
  std::vector<int64_t> needBytes(o.n);
  for (int64_t i = 0; i < o.n; ++i)
    needBytes[i] = int64_t(perStep * double(trips[i]));
  int64_t inFlight = today.threads * lanes;
  int64_t exact = compactedBytes(needBytes, inFlight, 1);
  int64_t grouped = compactedBytes(needBytes, inFlight, 32);
  fmt::print("qd-bench-adstack-budget on {}: {} elements, 1 in {} takes {} steps, the others 3\n",
             backend.name(), o.n, o.every, o.deep);
  fmt::print("  today's layout: {} bytes ({} {}, {} bytes each, {} iterations in flight)\n",
             today.bytes, today.threads, today.threadKind, perThread, inFlight);
  fmt::print("  compacted, exact per iteration: {} bytes ({:.1f}x smaller)\n", exact,
             double(today.bytes) / double(std::max<int64_t>(exact, 1)));
  fmt::print("  compacted, groups of 32 at their largest need: {} bytes ({:.1f}x smaller)\n",
             grouped, double(today.bytes) / double(std::max<int64_t>(grouped, 1)));
  // Waves: a budget for a quarter and an eighth of the threads, against one
  // wave, taking turns per round.
  std::vector<int64_t> fractions{1, 4, 8};
  std::vector<std::vector<double>> ms(fractions.size());
  std::vector<qd::AdStackHeapUsage> used(fractions.size());
  for (int r = 0; r < o.reps; ++r)
    for (size_t f = 0; f < fractions.size(); ++f) {
      qd::LaunchOptions opts;
      if (fractions[f] > 1)
        opts.adStackMemoryBudget = perThread * std::max<int64_t>(today.threads / fractions[f], 1);
      ms[f].push_back(gradient(opts));
      used[f] = *backend.lastAdStackHeapUsage();
    }
  for (size_t f = 0; f < fractions.size(); ++f) {
    std::vector<double> ratio;
    for (int r = 0; r < o.reps; ++r)
      ratio.push_back(ms[f][r] / ms[0][r]);
    fmt::print("  budget for 1/{} of the threads: heap {} bytes, {} {}, {} waves: {:.3f} ms, "
               "{:.2f}x of one wave\n",
               fractions[f], used[f].bytes, used[f].threads, used[f].threadKind, used[f].waves,
               medianOf(ms[f]), medianOf(ratio));
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-adstack-budget", argc, argv, run);
}
