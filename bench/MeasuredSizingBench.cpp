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
//   - heap bytes against the exact need (threads x need x entry bytes).
//
//   qd-bench-measured [--backend=cpu|cuda] [--n=N] [--reps=R]
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "qd/analysis/KernelSizing.h"
#include "qd/ir/Parser.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/runtime/CudaBackend.h"
#include "qd/runtime/Program.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char **argv) {
  std::string backendName = "cpu";
  int64_t n = 1 << 16;
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--backend=", 0) == 0)
      backendName = a.substr(10);
    else if (a.rfind("--n=", 0) == 0)
      n = std::atoll(a.c_str() + 4);
    else if (a.rfind("--reps=", 0) == 0)
      reps = std::atoi(a.c_str() + 7);
    else
      die("unknown option " + a + " (--backend=cpu|cuda --n=N --reps=R)");
  }
  std::string text = kKernel;
  for (size_t p; (p = text.find("%N%")) != std::string::npos;)
    text.replace(p, 3, std::to_string(n));
  auto module = check(qd::parseModule(text, {"measured.qd", 1}));
  check(qd::buildGradientKernel(*module, *module->findKernel("k")).status());
  const qd::Kernel &grad = *module->findKernel("k_grad");

  std::unique_ptr<qd::Backend> backend;
  std::string where;
  if (backendName == "cuda") {
    auto cuda = qd::CudaBackend::create();
    if (!cuda.ok()) {
      fmt::print("qd-bench-measured: no CUDA device ({}); nothing measured\n",
                 std::string(cuda.status().message()));
      return 0;
    }
    where = (*cuda)->deviceInfo().name;
    backend = *std::move(cuda);
  } else {
    auto cpu = check(qd::CpuBackend::create());
    where = fmt::format("cpu, {} threads", cpu->numThreads());
    backend = std::move(cpu);
  }
  auto heapBytes = [&]() -> int64_t {
    if (auto *c = dynamic_cast<qd::CpuBackend *>(backend.get()))
      return c->lastAdStackHeapBytes();
    return static_cast<qd::CudaBackend *>(backend.get())->lastAdStackHeapBytes();
  };

  auto program = check(qd::Program::create(*module));
  // Targets spread so that the trip counts run from 1 to about 105.
  {
    float *t = reinterpret_cast<float *>(program->field("t")->data());
    for (int64_t i = 0; i < n; ++i)
      t[i] = 0.0011f + 0.9f * static_cast<float>((i * 7919) % 1000) / 1000.0f;
  }
  float *yg = reinterpret_cast<float *>(program->field("y", qd::Component::Grad)->data());
  auto seed = [&] {
    for (int64_t i = 0; i < n; ++i)
      yg[i] = 1.0f;
  };
  check(program->launch("k", {}, *backend));
  const qd::KernelSizing &sizing = *check(backend->adStackSizing(grad));
  const qd::AdStackSize *tape = nullptr;
  for (const qd::AdStackSize &s : sizing.stacks())
    if (s.tier == qd::SizingTier::Measured)
      tape = &s;
  if (!tape)
    die("the gradient's tape is not measured at launch");

  // One measured launch gives the exact need, used as the hand-given one.
  seed();
  check(program->launch("k_grad", {}, *backend));
  int64_t need = program->lastAdStackCapacities().at(tape->stack);
  int64_t measuredHeap = heapBytes();

  qd::LaunchOptions byHand;
  byHand.adStackCapacities[tape->stack] = need;
  using Clock = std::chrono::steady_clock;
  auto time = [&](const qd::LaunchOptions &o) {
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      seed();
      auto t0 = Clock::now();
      check(program->launch("k_grad", {}, *backend, o));
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return median(ms);
  };
  // The counting kernel alone, as Program::launch runs it.
  const qd::Kernel &counter = *sizing.countKernel();
  auto needBuf = check(qd::Buffer::create(qd::ScalarType::I64,
                                          {sizing.numCounted() * qd::KernelSizing::kCountSpread}));
  qd::NdarrayArg needArg;
  needArg.primal = &needBuf;
  std::vector<qd::LaunchArg> countArgs{qd::LaunchArg::ndarray(&needArg)};
  std::vector<double> countMs;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    check(backend->launch(*program, counter, countArgs, {}));
    check(needBuf.maxInteger(0, qd::KernelSizing::kCountSpread).status());
    countMs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  double hand = time(byHand), measured = time({}), count = median(countMs);
  int64_t handHeap = heapBytes();

  fmt::print("qd-bench-measured: gradient of a relaxation loop until convergence, {} elements, "
             "{} ({} reps, median)\n",
             n, where, reps);
  fmt::print("  tape need (largest trip count + 1): {} entries\n", need);
  fmt::print("  {:<40} {:>10.3f} ms\n", "capacity given by hand", hand);
  fmt::print("  {:<40} {:>10.3f} ms   ({:.2f}x of by hand)\n", "measured at launch", measured,
             measured / hand);
  fmt::print("  {:<40} {:>10.3f} ms   ({:.0f}% of the gradient by hand)\n",
             "  of which the counting kernel", count, 100.0 * count / hand);
  fmt::print("  heap: measured {} bytes, by hand {} bytes ({:.3f}x)\n", measuredHeap, handHeap,
             static_cast<double>(measuredHeap) / static_cast<double>(handHeap));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-measured", argc, argv, run);
}
