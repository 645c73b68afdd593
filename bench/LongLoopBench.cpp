//===- LongLoopBench.cpp - A long per-element loop under a memory budget --===//
//
// qd-bench-long-loop: a per-element simulation of --steps time steps
// (10^4) carrying 3 f32 values over --n elements (2^20); its gradient is
// built with reverse-ad{checkpoint}, so each launch chooses from the
// adstack memory budget how many iterations run at a time (waves) and, when
// one iteration's tape alone does not fit, the checkpoint interval
// (docs/autodiff.md, "Checkpointing long loops"). The benchmark prints, on
// one backend:
//   - per budget of --budgets-mib (1, 4 and 16 GiB): the gradient's time
//     (median of --reps) and the launch's heap bytes (its peak: one launch),
//     threads, waves and checkpoint interval (chosen by the launch, or
//     --budget-interval's);
//   - at --taped-n elements (2^16), where the fully taped gradient fits:
//     the fully taped gradient (reverse-ad without checkpoint) and the
//     checkpointed one at interval --interval (default: about the square
//     root of the steps), whether their gradients are the same bit for bit,
//     and the ratio of their median times.
//
//   qd-bench-long-loop [--backend=cpu|cuda|vulkan] [--n=N] [--steps=S]
//                      [--taped-n=M] [--budgets-mib=A,B,...] [--interval=K]
//                      [--budget-interval=K] [--reps=R]
//
// A CPU run here: --n=4096 --steps=1000 --taped-n=1024 --budgets-mib=1,4,16.
//
//===----------------------------------------------------------------------===//
#include "BenchChecks.h"
#include "qd/ir/Parser.h"
#include "qd/runtime/Program.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

// Element i carries (p, q, r) through %S% steps of a damped oscillator
// with a nonlinear coupling.
constexpr const char *kKernel = R"(
field @x : f32[%N%] grad
field @y : f32[%N%] grad
kernel @k() {
  parallel for %i = 0 to %N% {
    %p = alloca f32
    %q = alloca f32
    %r = alloca f32
    %x = load @x[%i] : f32
    store %p, %x
    %half = const 0.5 : f32
    %q0 = mul %x, %half : f32
    store %q, %q0
    %one = const 1.0 : f32
    %r0 = sub %one, %x : f32
    store %r, %r0
    %h = const 0.001 : f32
    %damp = const 0.999 : f32
    for %t = 0 to %S% {
      %pa = load %p : f32
      %qa = load %q : f32
      %ra = load %r : f32
      %sq = sin %qa : f32
      %dp = mul %sq, %h : f32
      %pb = add %pa, %dp : f32
      %cr = cos %ra : f32
      %cp = mul %cr, %pa : f32
      %dq = mul %cp, %h : f32
      %qb = add %qa, %dq : f32
      %pq = mul %pa, %qa : f32
      %dr = mul %pq, %h : f32
      %rd = mul %ra, %damp : f32
      %rb = add %rd, %dr : f32
      store %p, %pb
      store %q, %qb
      store %r, %rb
    }
    %pf = load %p : f32
    %qf = load %q : f32
    %rf = load %r : f32
    %s1 = add %pf, %qf : f32
    %s2 = add %s1, %rf : f32
    store @y[%i], %s2
  }
}
)";

using qdbench::check;
using qdbench::die;
using qdbench::median;

struct Options {
  std::string backend = "cpu";
  int64_t n = 1 << 20, steps = 10000, tapedN = 1 << 16, interval = 0, budgetInterval = 0;
  std::vector<int64_t> budgetsMib{1024, 4096, 16384};
  int reps = 3;
};

Options parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *flag) { return qdbench::intFlag(a, flag); };
    if (a.rfind("--backend=", 0) == 0) {
      o.backend = a.substr(10);
    } else if (a.rfind("--budgets-mib=", 0) == 0) {
      o.budgetsMib.clear();
      std::stringstream list(a.substr(14));
      for (std::string item; std::getline(list, item, ',');)
        o.budgetsMib.push_back(std::atoll(item.c_str()));
    } else if (auto v = value("--n=")) {
      o.n = *v;
    } else if (auto v = value("--steps=")) {
      o.steps = *v;
    } else if (auto v = value("--taped-n=")) {
      o.tapedN = *v;
    } else if (auto v = value("--budget-interval=")) {
      o.budgetInterval = *v;
    } else if (auto v = value("--interval=")) {
      o.interval = *v;
    } else if (auto v = value("--reps=")) {
      o.reps = int(*v);
    } else {
      die("unknown option " + a +
          " (--backend= --n= --steps= --taped-n= --budgets-mib= --budget-interval= --interval= "
          "--reps=)");
    }
  }
  if (o.n < 1 || o.steps < 1 || o.tapedN < 0 || o.reps < 1 || o.interval < 0 ||
      o.budgetInterval < 0)
    die("--n, --steps and --reps must be positive, --taped-n and the intervals not negative");
  for (int64_t b : o.budgetsMib)
    if (b < 1)
      die("--budgets-mib takes positive sizes in MiB, separated by commas");
  if (o.interval == 0)
    o.interval = std::max<int64_t>(1, int64_t(std::lround(std::sqrt(double(o.steps)))));
  return o;
}

/// The kernel over `n` elements and `steps` steps with its gradient
/// `k_grad`, checkpointed or fully taped.
std::unique_ptr<qd::Module> gradientModule(int64_t n, int64_t steps, bool checkpoint) {
  std::string text = kKernel;
  for (auto [marker, value] : {std::pair{"%N%", n}, std::pair{"%S%", steps}})
    for (size_t p; (p = text.find(marker)) != std::string::npos;)
      text.replace(p, 3, std::to_string(value));
  auto module = check(qd::parseModule(text, {"long-loop.qd", 1}));
  qd::ReverseADOptions ro;
  ro.checkpointLoops = checkpoint;
  check(qd::buildGradientKernel(*module, *module->findKernel("k"), ro).status());
  return module;
}

/// A program of `module` with @x[i] set (the same for every program of n
/// elements).
std::unique_ptr<qd::Program> makeProgram(const qd::Module &module, int64_t n) {
  auto program = check(qd::Program::create(module));
  for (int64_t i = 0; i < n; ++i)
    program->field("x")->set(
        i, qd::Scalar::ofFloat(qd::ScalarType::F32, 0.05 + 0.9 * double(i % 1013) / 1013.0));
  return program;
}

struct Run {
  std::vector<double> ms;
  qd::AdStackHeapUsage usage;
  int64_t interval = 0;
  std::vector<double> grad;
};

/// `reps` launches of k_grad (@y's adjoint 1), each timed with the copy of
/// @x's adjoint back; the last launch's heap, interval and gradient.
Run gradient(qd::Program &program, qd::Backend &backend, int64_t n, const qd::LaunchOptions &o,
             int reps) {
  Run run;
  for (int r = 0; r <= reps; ++r) { // the first launch compiles
    for (int64_t i = 0; i < n; ++i) {
      program.field("y", qd::Component::Grad)->set(i, qd::Scalar::ofFloat(qd::ScalarType::F32, 1));
      program.field("x", qd::Component::Grad)->set(i, qd::Scalar::ofFloat(qd::ScalarType::F32, 0));
    }
    auto t0 = std::chrono::steady_clock::now();
    check(program.launch("k_grad", {}, backend, o));
    qd::Buffer &g = *program.field("x", qd::Component::Grad);
    check(g.syncToHost());
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0)
      run.ms.push_back(ms);
  }
  run.usage = backend.lastAdStackHeapUsage().value_or(qd::AdStackHeapUsage());
  run.interval = program.lastCheckpointInterval();
  qd::Buffer &g = *program.field("x", qd::Component::Grad);
  for (int64_t i = 0; i < n; ++i)
    run.grad.push_back(g.get(i).f);
  return run;
}

void printRow(const std::string &what, const Run &r) {
  fmt::print("  {}: {:.3f} ms, heap {} bytes, {} {}, {} waves, checkpoint interval {}\n", what,
             median(r.ms), r.usage.bytes, r.usage.threads, r.usage.threadKind, r.usage.waves,
             r.interval ? fmt::format("{}", r.interval) : std::string("none (fully taped)"));
}

int run(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  std::unique_ptr<qd::Backend> created = qdbench::backendOrNothing("qd-bench-long-loop", o.backend);
  if (!created)
    return 0;
  qd::Backend &backend = *created;
  fmt::print("qd-bench-long-loop on {}: {} steps carrying 3 f32 values per element\n",
             backend.name(), o.steps);
  {
    auto module = gradientModule(o.n, o.steps, true);
    auto program = makeProgram(*module, o.n);
    fmt::print(" {} elements, checkpointed gradient under a budget:\n", o.n);
    for (int64_t mib : o.budgetsMib) {
      qd::LaunchOptions lo;
      lo.adStackMemoryBudget = mib << 20;
      lo.checkpointInterval = o.budgetInterval;
      printRow(fmt::format("budget {} MiB", mib), gradient(*program, backend, o.n, lo, o.reps));
    }
  }
  if (o.tapedN == 0)
    return 0;
  auto tapedModule = gradientModule(o.tapedN, o.steps, false);
  auto checkpointedModule = gradientModule(o.tapedN, o.steps, true);
  auto tapedProgram = makeProgram(*tapedModule, o.tapedN);
  auto checkpointedProgram = makeProgram(*checkpointedModule, o.tapedN);
  fmt::print(" {} elements, fully taped against checkpointed at interval {}:\n", o.tapedN,
             o.interval);
  Run taped = gradient(*tapedProgram, backend, o.tapedN, {}, o.reps);
  qd::LaunchOptions every;
  every.checkpointInterval = o.interval;
  Run checkpointed = gradient(*checkpointedProgram, backend, o.tapedN, every, o.reps);
  printRow("fully taped", taped);
  printRow(fmt::format("checkpointed, interval {}", o.interval), checkpointed);
  size_t differ = 0;
  for (size_t i = 0; i < taped.grad.size(); ++i)
    differ += taped.grad[i] != checkpointed.grad[i];
  fmt::print("  gradients: {}; time checkpointed / fully taped: {:.2f}x (ratio of the medians)\n",
             differ ? fmt::format("{} of {} differ", differ, taped.grad.size())
                    : std::string("the same bit for bit"),
             median(checkpointed.ms) / median(taped.ms));
  return differ ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-long-loop", argc, argv, run);
}
