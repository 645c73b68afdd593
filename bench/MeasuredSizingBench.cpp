//===- MeasuredSizingBench.cpp - Adstacks measured at launch --------------===//
//
// qd-bench-measured: the gradient of a per-element relaxation iteration that
// runs until it converges (a `while` loop with a data-dependent trip count,
// 1 to about 105 iterations per element), whose tape no launch-time
// expression bounds. Its adstack is measured before every launch by the
// counting kernel (docs/sizing.md). The benchmark prints, in one run:
//   - the gradient launch with measured sizing, against the same launch with
//     the capacity given by hand (the exact need, known in advance), and
//     the ratio;
//   - the counting kernel's share;
//   - the optimistic launch (LaunchOptions::optimisticAdStacks): with the
//     capacities already right (the previous launch measured the same
//     needs), and after needs grew for about 1% and for all of the
//     iterations (they overflow and are rerun);
//   - heap bytes against the exact need (threads x need x entry bytes),
//     also for the launch after the needs shrank.
//
//   qd-bench-measured [--backend=cpu|cuda|vulkan] [--n=N] [--reps=R]
//
//===----------------------------------------------------------------------===//
#include "BenchChecks.h"
#include "qd/analysis/KernelSizing.h"
#include "qd/ir/Parser.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/runtime/Program.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

// v <- v + 0.035 (t - v) + 0.001 sin(v) until |t - v| < 1e-3.
constexpr const char *kKernel = R"(
field @t : f32[%N%] grad
field @y : f32[%N%] grad
kernel @k() {
  parallel for %i = 0 to %N% {
    %v = alloca f32
    %t = load @t[%i] : f32
    while {
      %c = load %v : f32
      %d = sub %t, %c : f32
      %ad = abs %d : f32
      %tol = const 0.001 : f32
      %done = cmp lt %ad, %tol : f32
      if %done {
        break
      }
      %h = const 0.035 : f32
      %step = mul %d, %h : f32
      %s = sin %c : f32
      %e = const 0.001 : f32
      %w = mul %s, %e : f32
      %n1 = add %c, %step : f32
      %n2 = add %n1, %w : f32
      store %v, %n2
    }
    %r = load %v : f32
    store @y[%i], %r
  }
}
)";

using qdbench::check;
using qdbench::die;
using qdbench::median;

// The options: --backend=cpu|cuda|vulkan --n=N --reps=R.
void parseArgs(int argc, char **argv, std::string &backendName, int64_t &n, int &reps) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--backend=", 0) == 0)
      backendName = a.substr(10);
    else if (a.rfind("--n=", 0) == 0)
      n = std::atoll(a.c_str() + 4);
    else if (a.rfind("--reps=", 0) == 0)
      reps = std::atoi(a.c_str() + 7);
    else
      die("unknown option " + a + " (--backend=cpu|cuda|vulkan --n=N --reps=R)");
  }
}

// The adstack heaps against the exact need (none on a GPU running local
// tapes).
void printHeaps(int64_t exactHeap, int64_t steadyHeap, int64_t shrunkHeap, int64_t shrunkExact) {
  if (exactHeap == 0 || shrunkExact == 0) {
    // The GPU backends run stacks that fit from local tapes: no heap.
    fmt::print("  heap: none (the stacks ran from local tapes)\n");
    return;
  }
  fmt::print("  heap: exact {} bytes; optimistic steady state {} bytes ({:.3f}x); the launch "
             "after needs shrank {} bytes against {} exact ({:.2f}x, once)\n",
             exactHeap, steadyHeap,
             static_cast<double>(steadyHeap) / static_cast<double>(exactHeap), shrunkHeap,
             shrunkExact, static_cast<double>(shrunkHeap) / static_cast<double>(shrunkExact));
}

// Opens the backend named on the command line and says where it runs;
// false (with a message) when its device is missing.
bool openBackend(const std::string &name, std::unique_ptr<qd::Backend> &backend,
                 std::string &where) {
  // Any backend of the build (qd/runtime/BackendRegistry.h); a GPU backend
  // without its device measures nothing.
  qd::registerAllBackends();
  auto created = qd::createBackend(name);
  if (!created.ok()) {
    if (created.status().code() != absl::StatusCode::kFailedPrecondition)
      die(std::string(created.status().message()));
    fmt::print("qd-bench-measured: no {} device ({}); nothing measured\n", name,
               std::string(created.status().message()));
    return false;
  }
  backend = *std::move(created);
  where = std::string(backend->name());
  return true;
}

// The adstack heap of the backend's last launch.
int64_t heapBytesOf(const qd::Backend &backend) {
  std::optional<qd::AdStackHeapUsage> heap = backend.lastAdStackHeapUsage();
  return heap ? heap->bytes : 0;
}

// Each case: `before` runs untimed, then `run` is timed. The cases take
// turns within each round, so that a machine busy with other work slows
// them alike; ratios are taken per round.
struct Case {
  Case(std::string w, std::function<void()> b, std::function<void()> r)
      : what(std::move(w)), before(std::move(b)), run(std::move(r)) {}
  std::string what;
  std::function<void()> before, run;
  std::vector<double> ms;
  int64_t reruns = 0;
};

// Times every case `reps` times, the cases taking turns within each round.
void timeRounds(std::vector<Case> &cases, int reps, qd::Program &program,
                const std::function<void()> &seed) {
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < reps; ++r)
    for (Case &c : cases) {
      c.before();
      seed();
      auto t0 = Clock::now();
      c.run();
      c.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      c.reruns = program.lastMeasuredLaunch().rerunIterations;
    }
}

// Per case, the median time and the median of its per-round ratio to the
// first case.
void printCases(const std::vector<Case> &cases, int reps) {
  for (const Case &c : cases) {
    std::vector<double> ratio;
    for (int r = 0; r < reps; ++r)
      ratio.push_back(c.ms[r] / cases[0].ms[r]);
    fmt::print("  {:<44} {:>10.3f} ms   {:.2f}x of by hand", c.what, median(c.ms), median(ratio));
    if (c.what.rfind("optimistic", 0) == 0)
      fmt::print(", {} iterations rerun", c.reruns);
    fmt::print("\n");
  }
}

// On the CPU backend, the SIMD lanes of the gradient and its variants.
void printLanes(qd::Backend &backend, const qd::Kernel &grad, const qd::KernelSizing &sizing) {
  if (auto *cpu = dynamic_cast<qd::CpuBackend *>(&backend))
    for (const qd::Kernel *kk : std::vector<const qd::Kernel *>{
             &grad, sizing.optimistic()->tryKernel.get(), sizing.optimistic()->rerunKernel.get(),
             sizing.countKernel()}) {
      const qd::KernelLayout &l = *check(cpu->layout(*kk));
      fmt::print("  @{}: {} lanes{}\n", kk->name(), l.tasks.at(0).lanes, l.tasks.at(0).whyScalar);
    }
}

int run(int argc, char **argv) {
  std::string backendName = "cpu";
  int64_t n = 1 << 16;
  int reps = 7;
  parseArgs(argc, argv, backendName, n, reps);
  std::string text = kKernel;
  for (size_t p; (p = text.find("%N%")) != std::string::npos;)
    text.replace(p, 3, std::to_string(n));
  auto module = check(qd::parseModule(text, {"measured.qd", 1}));
  check(qd::buildGradientKernel(*module, *module->findKernel("k")).status());
  const qd::Kernel &grad = *module->findKernel("k_grad");

  std::unique_ptr<qd::Backend> backend;
  std::string where;
  if (!openBackend(backendName, backend, where))
    return 0;
  auto heapBytes = [&] { return heapBytesOf(*backend); };

  auto program = check(qd::Program::create(*module));
  // Targets spread so that the trip counts run from 1 to about 105.
  std::vector<float> targets(n);
  for (int64_t i = 0; i < n; ++i)
    targets[i] = 0.0011f + 0.9f * static_cast<float>((i * 7919) % 1000) / 1000.0f;
  // Host writes go through a fresh data() each time: it marks the host
  // copy newer, so a GPU backend uploads it before the next launch (a
  // pointer kept from an earlier call writes behind the runtime's back).
  auto setTargets = [&](float cap) {
    float *t = reinterpret_cast<float *>(program->field("t")->data());
    for (int64_t i = 0; i < n; ++i)
      t[i] = std::min(targets[i], cap);
  };
  setTargets(1.0f);
  auto seed = [&] {
    float *yg = reinterpret_cast<float *>(program->field("y", qd::Component::Grad)->data());
    for (int64_t i = 0; i < n; ++i)
      yg[i] = 1.0f;
  };
  check(program->launch("k", {}, *backend));
  const qd::KernelSizing &sizing = *check(backend->adStackSizing(grad));
  const qd::AdStackSize *tape = nullptr;
  for (const qd::AdStackSize &s : sizing.stacks())
    if (s.measuredAtLaunch())
      tape = &s;
  if (!tape)
    die("the gradient's tape is not measured at launch");
  if (!sizing.optimistic())
    die("the gradient has no optimistic launch: " + sizing.optimisticRefusal());

  // One measured launch gives the exact need, used as the hand-given one.
  seed();
  check(program->launch("k_grad", {}, *backend));
  int64_t need = program->lastAdStackCapacities().at(tape->stack);
  int64_t exactHeap = heapBytes();

  qd::LaunchOptions byHand, counted, optimistic;
  byHand.adStackCapacities[tape->stack] = need;
  counted.optimisticAdStacks = false;
  optimistic.optimisticAdStacks = true;
  // A launch whose targets stop at `cap` (smaller needs), then the real ones.
  auto shrinkTo = [&](float cap) {
    return [&, cap] {
      setTargets(cap);
      seed();
      check(program->launch("k_grad", {}, *backend, optimistic));
      setTargets(1.0f);
    };
  };
  // The counting kernel alone, as Program::launch runs it.
  const qd::Kernel &counter = *sizing.countKernel();
  auto needBuf = check(qd::Buffer::create(qd::ScalarType::I64,
                                          {sizing.numCounted() * qd::KernelSizing::kCountSpread}));
  qd::NdarrayArg needArg;
  needArg.primal = &needBuf;
  std::vector<qd::LaunchArg> countArgs{qd::LaunchArg::ndarray(&needArg)};
  auto countOnly = [&] {
    check(backend->launch(*program, counter, countArgs, {}));
    check(needBuf.maxInteger(0, qd::KernelSizing::kCountSpread).status());
  };
  auto gradient = [&](const qd::LaunchOptions &o) {
    return [&] { check(program->launch("k_grad", {}, *backend, o)); };
  };
  auto nothing = [] {};
  std::vector<Case> cases = {
      {"capacity given by hand", nothing, gradient(byHand)},
      {"counting kernel first", nothing, gradient(counted)},
      {"  of which the counting kernel", nothing, countOnly},
      // Steady state: the previous launch (of the case before) measured the
      // same needs.
      {"optimistic, capacities already right", nothing, gradient(optimistic)},
      // Needs that grew since the previous launch: the targets above 0.8
      // (about 11% of the iterations overflow and rerun), and all of them
      // (the previous launch needed 1 entry: every iteration reruns).
      {"optimistic, needs grew for ~11% (rerun)", shrinkTo(0.8f), gradient(optimistic)},
      {"optimistic, needs grew for all (rerun)", shrinkTo(0.0f), gradient(optimistic)},
  };
  check(program->launch("k_grad", {}, *backend, optimistic)); // counts: the first launch
  timeRounds(cases, reps, *program, seed);
  check(program->launch("k_grad", {}, *backend, optimistic));
  int64_t steadyHeap = heapBytes();
  // Needs that shrank: the launch after one with the real targets, with
  // targets stopping at 0.01, runs with the larger capacity.
  setTargets(0.01f);
  seed();
  check(program->launch("k_grad", {}, *backend, optimistic));
  int64_t shrunkHeap = heapBytes();
  check(program->launch("k_grad", {}, *backend, counted));
  int64_t shrunkExact = heapBytes();
  setTargets(1.0f);

  printLanes(*backend, grad, sizing);
  fmt::print("qd-bench-measured: gradient of a relaxation loop until convergence, {} elements, "
             "{} ({} rounds, median)\n",
             n, where, reps);
  fmt::print("  tape need (largest trip count): {} entries\n", need);
  printCases(cases, reps);
  printHeaps(exactHeap, steadyHeap, shrunkHeap, shrunkExact);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-measured", argc, argv, run);
}
