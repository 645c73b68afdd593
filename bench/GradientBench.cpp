//===- GradientBench.cpp - Gradients: qd-cpu vs hand-written and peers ----===//
//
// qd-bench-gradients: reverse-mode gradients computed by the LLVM CPU backend
// (qd-cpu) against a hand-written scalar reverse loop with the same thread
// count, a vectorised hand-written loop (-ffast-math, libmvec), ADOL-C,
// PyTorch CPU (numbers from bench/torch_gradients.py, merged with --torch)
// and the reference interpreter, on the workloads of GradientWorkloads.h:
//
//  (a) sin        v = sin(v) + 0.1 repeated K = 64 times (K read from a field)
//  (b) triangular for j < m[i] { for k < j { v = sin(v + 0.01 k) + 0.1 } },
//                 m[i] = 4 + 7i mod 13 read from a field (4..16)
//  (c) spring     8-mass chain with cubic springs, 16 loop-carried f32
//                 values (positions, velocities), T = 64 steps (from a field)
//
// The qd kernels are IR text (f32 fields with grad companions); the gradient
// kernel comes from buildGradientKernel. For each workload the table shows
// the forward and the gradient time (min over --reps runs, wall clock; a
// "gradient" is everything from the inputs and the output adjoints to the
// input adjoints: qd's gradient kernel replays the forward itself), the
// ratio to qd-cpu's gradient time, and the largest relative error of the
// gradient against the hand-written scalar loop (every implementation is
// checked, so a fast wrong answer shows). ADOL-C and the interpreter run a
// smaller element count and are scaled linearly (the row says so). Below
// each table: the adstack heap the gradient launch used against the exact
// need (the deepest each stack got, measured by the interpreter, in the
// backend's layout, times the workers) and the compile time of each kernel.
//
// A last line per workload times launches on one element (per-launch
// overhead of Program::launch and of CpuBackend::launch alone).
//
// Usage: qd-bench-gradients --help (kUsage below).
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "GradientKernels.h"
#include "GradientReference.h"
#include "GradientWorkloads.h"

#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace qdbench;
using json = nlohmann::json;

namespace {

template <typename T> T check(absl::StatusOr<T> s, const char *what) {
  if (!s.ok())
    die(fmt::format("{}: {}", what, s.status().ToString()));
  return std::move(*s);
}
void check(const absl::Status &s, const char *what) {
  if (!s.ok())
    die(fmt::format("{}: {}", what, s.ToString()));
}

/// --cpu-time: time the process's CPU time (all its threads) instead of the
/// wall clock, which a busy shared machine inflates by whatever else runs.
bool gCpuTime = false;

double nowMs() {
  if (gCpuTime)
    return 1e3 * double(std::clock()) / CLOCKS_PER_SEC;
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Min over `reps` runs of `fn`, with `before` (untimed) before each run.
double timeMin(int reps, const std::function<void()> &before, const std::function<void()> &fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    if (before)
      before();
    double t0 = nowMs();
    fn();
    best = std::min(best, nowMs() - t0);
  }
  return best;
}

//===--- qd runs ---------------------------------------------------------===//

struct Workload {
  std::string key, title;
  int64_t n = 0;       // elements (chains for (c))
  int64_t nAdolc = 0;  // elements ADOL-C runs (scaled to n)
  int64_t nInterp = 0; // elements the interpreter runs (scaled to n)
  KernelShape shape = KernelShape::Fields;
  const KernelSpec *spec = nullptr;
  size_t arrays() const { return spec->gradFields.size(); }
};

struct QdResult {
  double fwdMs = 0, gradMs = 0, compileFwdMs = 0, compileGradMs = 0;
  int64_t heapBytes = 0;
  std::vector<float> grad; // gradFields concatenated
  std::string gradIR, gradLLVM;
  int64_t stacks = 0, capacitySum = 0;
  int32_t lanes = 1; // SIMD lanes of the gradient task (entries per stack slot)
  /// Per rep, qd's gradient time over the hand-written one timed right
  /// after it (both see the same moment of a noisy machine); sorted.
  std::vector<double> pairedRatios;
};

struct QdModule {
  std::unique_ptr<qd::Module> module;
  const qd::Kernel *fwd = nullptr;
  const qd::Kernel *grad = nullptr;
  std::unique_ptr<qd::Program> program;
  std::unique_ptr<WorkloadData> data;
  std::span<const qd::LaunchArg> args() const { return data->args(); }
};

QdModule makeModule(const Workload &w, int64_t n) {
  QdModule m;
  m.module = check(qd::parseModule(w.spec->ir(n, w.shape), {.filename = w.key + ".qd"}), "parse");
  m.fwd = m.module->findKernel(w.spec->kernel);
  if (!m.fwd)
    die("no kernel " + w.spec->kernel);
  m.grad = check(qd::buildGradientKernel(*m.module, *m.fwd), "buildGradientKernel");
  m.program = check(qd::Program::create(*m.module), "Program::create");
  m.data = std::make_unique<WorkloadData>(w.key, w.shape, *m.program, n);
  return m;
}

std::vector<float> collectGrads(const Workload &w, WorkloadData &d) {
  std::vector<float> out;
  for (const auto &f : w.spec->gradFields) {
    qd::Buffer &b = d.buffer(f, qd::Component::Grad);
    const float *g = reinterpret_cast<const float *>(std::as_const(b).data());
    out.insert(out.end(), g, g + b.numElements());
  }
  return out;
}

/// `pairWith`, when given, times the hand-written gradient once (ms); it
/// runs after each timed qd gradient launch (QdResult::pairedRatios).
QdResult runQd(const Workload &w, qd::CpuBackend &cpu, int reps, bool keepIR,
               const std::function<double()> &pairWith = {}) {
  QdModule m = makeModule(w, w.n);
  qd::Program &p = *m.program;
  QdResult r;
  auto launch = [&](const qd::Kernel &k, const char *what) {
    check(p.launch(k.name(), m.args(), cpu), what);
  };
  // Warm-up launches (compile), then timed ones.
  launch(*m.fwd, "forward launch");
  m.data->zeroGradsAndSeed();
  launch(*m.grad, "gradient launch");
  r.compileFwdMs = 1e3 * cpu.compileSeconds(*m.fwd);
  r.compileGradMs = 1e3 * cpu.compileSeconds(*m.grad);
  r.fwdMs = timeMin(reps, nullptr, [&] { launch(*m.fwd, "forward"); });
  r.gradMs = 1e300;
  for (int rep = 0; rep < reps; ++rep) {
    m.data->zeroGradsAndSeed();
    double t0 = nowMs();
    launch(*m.grad, "gradient");
    double ms = nowMs() - t0;
    r.gradMs = std::min(r.gradMs, ms);
    if (pairWith)
      r.pairedRatios.push_back(ms / pairWith());
  }
  std::sort(r.pairedRatios.begin(), r.pairedRatios.end());
  r.heapBytes = cpu.lastAdStackHeapBytes();
  for (int32_t l : cpu.lastTaskLanes())
    r.lanes = std::max(r.lanes, l);
  for (const auto &[stack, cap] : p.lastAdStackCapacities()) {
    ++r.stacks;
    r.capacitySum += cap;
  }
  r.grad = collectGrads(w, *m.data);
  if (keepIR) {
    r.gradIR = qd::printKernel(*m.grad);
    r.gradLLVM = check(cpu.llvmIR(*m.grad), "llvmIR");
  }
  return r;
}

struct InterpResult {
  double fwdMs = 0, gradMs = 0; // at nInterp elements
  std::vector<float> grad;      // nInterp * gradElemsPerItem values per field
  /// Per stack: bytes of one lane's entry, and its max depth.
  std::vector<std::pair<unsigned, int64_t>> stackNeeds;
  int64_t depthSum = 0;
  /// The exact heap of one worker running `lanes` elements at a time.
  int64_t exactPerWorker(int64_t lanes) const {
    int64_t bytes = 0;
    for (auto [entryBytes, depth] : stackNeeds)
      bytes += qd::adStackBytes(static_cast<unsigned>(entryBytes * lanes), depth);
    return bytes;
  }
};

InterpResult runInterp(const Workload &w) {
  QdModule m = makeModule(w, w.nInterp);
  qd::Program &p = *m.program;
  qd::Interpreter interp;
  InterpResult r;
  r.fwdMs =
      timeMin(1, nullptr, [&] { check(p.launch(m.fwd->name(), m.args(), interp), "interp fwd"); });
  m.data->zeroGradsAndSeed();
  r.gradMs = timeMin(1, nullptr,
                     [&] { check(p.launch(m.grad->name(), m.args(), interp), "interp grad"); });
  for (const auto &[stack, depth] : interp.adStackMaxDepths()) {
    r.stackNeeds.emplace_back(qd::adStackEntryBytes(*stack), depth);
    r.depthSum += depth;
  }
  r.grad = collectGrads(w, *m.data);
  return r;
}

/// Largest |a - ref| / max(|ref|, 1e-6 max|ref|) over the elements of
/// `a`; `refStride` / `stride` map element e of field f (of `perField`
/// values) to its position.
double maxRelErr(const std::vector<float> &a, const std::vector<float> &ref) {
  double scale = 0;
  for (float v : ref)
    scale = std::max(scale, double(std::fabs(v)));
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    double d = std::fabs(double(a[i]) - double(ref[i]));
    double den = std::max(double(std::fabs(ref[i])), 1e-6 * scale);
    double e = den > 0 ? d / den : d;
    if (std::isnan(e))
      return INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

/// The gradient of the hand-written loop restricted to the first `n`
/// elements of each field (fields of `fullN * per` values).
std::vector<float> prefix(const std::vector<float> &g, size_t fields, int64_t fullN, int64_t n,
                          int64_t per) {
  std::vector<float> out;
  for (size_t f = 0; f < fields; ++f)
    out.insert(out.end(), g.begin() + f * fullN * per, g.begin() + f * fullN * per + n * per);
  return out;
}

struct Row {
  std::string impl;
  std::string threads;
  std::optional<double> fwdMs, gradMs;
  std::optional<double> err;
  std::string note;
};

std::string fmtMs(std::optional<double> v) {
  if (!v)
    return "n/a";
  return *v >= 100 ? fmt::format("{:.0f}", *v) : fmt::format("{:.1f}", *v);
}

void printTable(const std::vector<Row> &rows, double qdGrad) {
  fmt::print("  {:<30} {:>3} {:>10} {:>11} {:>9} {:>12}  {}\n", "implementation", "thr", "fwd ms",
             "grad ms", "grad/qd", "max rel err", "note");
  for (const Row &r : rows) {
    std::string ratio = r.gradMs ? fmt::format("{:.2f}x", *r.gradMs / qdGrad) : "n/a";
    std::string err = r.err ? fmt::format("{:.1e}", *r.err) : "-";
    fmt::print("  {:<30} {:>3} {:>10} {:>11} {:>9} {:>12}  {}\n", r.impl, r.threads, fmtMs(r.fwdMs),
               fmtMs(r.gradMs), ratio, err, r.note);
  }
}

} // namespace

static constexpr const char *kUsage =
    "usage: qd-bench-gradients [options]\n"
    "  --threads N        worker threads of qd-cpu and the hand-written loops (2)\n"
    "  --vector-width W   qd-cpu's lanes (default: the backend's choice for the host)\n"
    "  --vector-isa NAME  CpuBackendOptions::vectorIsa: auto, avx512, avx2, sse4, none\n"
    "  --reps N           runs per timing, the minimum is shown (3)\n"
    "  --only a,b,c       the workloads to run\n"
    "  --shapes LIST      the kernel shapes qd-cpu runs (GradientKernels.h): fields,\n"
    "                     ndarray (constant trip count), ndarray-n (trip count an\n"
    "                     argument); the first is the one compared with the peers, each\n"
    "                     other gets rows at the thread count and on one thread and a\n"
    "                     ratio to the first (fields,ndarray)\n"
    "  --torch FILE       PyTorch results of bench/torch_gradients.py (JSON) to merge\n"
    "  --quick            qd-cpu and the hand-written vectorised loop only (checked against\n"
    "                     the reference gradient of GradientReference.h): for iterating on\n"
    "                     code generation\n"
    "  --full-limit N     CpuBackendOptions::fullOptimizationLimit (0: every kernel\n"
    "                     with the light compile tier)\n"
    "  --cpu-time         time process CPU time (all threads: a run on T threads counts\n"
    "                     about T times its wall time) instead of the wall clock, which\n"
    "                     other work on a shared machine inflates\n"
    "  --dump-ir a|b|c    print the module, its gradient kernel and the gradient's\n"
    "                     optimised LLVM IR at --dump-n N elements (1024), and exit\n";

static int runBench(int argc, char **argv) {
  unsigned threads = 2;
  unsigned width = 0; // the backend's choice
  int reps = 3;
  bool quick = false;
  std::string torchFile, only = "a,b,c", dump;
  int64_t dumpN = 1024;
  size_t fullLimit = qd::CpuBackendOptions().fullOptimizationLimit;
  std::string isa = "auto";
  std::vector<KernelShape> shapes = {KernelShape::Fields, KernelShape::Ndarray};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--threads")
      threads = static_cast<unsigned>(std::stoi(next()));
    else if (a == "--vector-width")
      width = static_cast<unsigned>(std::stoi(next()));
    else if (a == "--vector-isa") // CpuBackendOptions::vectorIsa
      isa = next();
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--torch")
      torchFile = next();
    else if (a == "--only")
      only = next();
    else if (a == "--shapes")
      shapes = parseShapes(next());
    else if (a == "--dump-ir")
      dump = next();
    else if (a == "--dump-n")
      dumpN = std::stoll(next());
    else if (a == "--full-limit") // CpuBackendOptions::fullOptimizationLimit
      fullLimit = std::stoull(next());
    else if (a == "--quick")
      quick = true;
    else if (a == "--cpu-time")
      gCpuTime = true;
    else if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    } else
      die(fmt::format("unknown option '{}'\n{}", a, kUsage));
  }

  json torch;
  if (!torchFile.empty()) {
    std::ifstream in(torchFile);
    torch = json::parse(in, nullptr, false);
    if (torch.is_discarded())
      torch = json{{"available", false}, {"reason", "unreadable " + torchFile}};
  } else {
    torch = json{{"available", false}, {"reason", "not run (no --torch FILE)"}};
  }

  std::vector<Workload> workloads;
  {
    Workload w;
    w.key = "a";
    w.title = fmt::format("(a) sin: v = sin(v) + 0.1, K = {}", kSinSteps);
    w.n = int64_t(1) << 20;
    w.nAdolc = int64_t(1) << 14;
    w.nInterp = int64_t(1) << 10;
    w.spec = &kernelSpec(w.key);
    workloads.push_back(w);
  }
  {
    Workload w;
    w.key = "b";
    w.title = "(b) triangular: for j < m[i] { for k < j { v = sin(v + 0.01k) + 0.1 } }, "
              "m[i] = 4..16 from an array";
    w.n = int64_t(1) << 20;
    w.nAdolc = int64_t(1) << 14;
    w.nInterp = int64_t(1) << 10;
    w.spec = &kernelSpec(w.key);
    workloads.push_back(w);
  }
  {
    Workload w;
    w.key = "c";
    w.title = fmt::format("(c) spring chain: {} masses (16 loop-carried f32), T = {} steps", kChain,
                          kSpringSteps);
    w.n = int64_t(1) << 16;
    w.nAdolc = int64_t(1) << 10;
    w.nInterp = int64_t(1) << 7;
    w.spec = &kernelSpec(w.key);
    workloads.push_back(w);
  }

  if (!dump.empty()) {
    for (const Workload &w : workloads)
      if (w.key == dump) {
        auto cpu = check(qd::CpuBackend::create({.threads = threads}), "CpuBackend::create");
        Workload small = w;
        small.n = dumpN;
        small.shape = shapes.front();
        QdResult r = runQd(small, *cpu, 1, true);
        fmt::print(";;; module (N = {}, {})\n{}\n;;; gradient kernel\n{}\n"
                   ";;; optimised LLVM IR of the gradient kernel\n{}\n",
                   small.n, shapeName(small.shape), w.spec->ir(small.n, small.shape), r.gradIR,
                   r.gradLLVM);
        return 0;
      }
    die("--dump-ir: unknown workload " + dump);
  }

  auto cpu = check(qd::CpuBackend::create({.threads = threads,
                                           .vectorWidth = width,
                                           .vectorIsa = isa,
                                           .fullOptimizationLimit = fullLimit}),
                   "CpuBackend::create");
  auto cpu1 = check(qd::CpuBackend::create({.threads = 1,
                                            .vectorWidth = width,
                                            .vectorIsa = isa,
                                            .fullOptimizationLimit = fullLimit}),
                    "CpuBackend::create");
  auto cpuScalar =
      check(qd::CpuBackend::create({.threads = threads, .vectorWidth = 1}), "CpuBackend::create");
  double start = nowMs();
  fmt::print("qd-bench-gradients: {} threads for qd-cpu and the hand-written loops "
             "({} hardware threads), min of {} runs, {} ms; qd-cpu: {} lanes, "
             "vector math {}\n",
             cpu->numThreads(), std::thread::hardware_concurrency(), reps,
             gCpuTime ? "process CPU" : "wall-clock", cpu->vectorWidth(), cpu->vectorMathIsa());
  if (!torch.value("available", false))
    fmt::print("PyTorch: n/a ({})\n", torch.value("reason", std::string("unknown")));
  else
    fmt::print("PyTorch {} (eager autograd, float32)\n", torch.value("version", std::string("?")));
  if (!haveAdolc())
    fmt::print("ADOL-C: n/a (built without libadolc-dev)\n");

  std::vector<std::string> summary;
  for (Workload w : workloads) {
    if (only.find(w.key) == std::string::npos)
      continue;
    w.shape = shapes.front();
    const int64_t n = w.n, per = w.spec->gradElemsPerItem;
    const size_t fields = w.arrays();
    fmt::print("\n{}, N = {}{}\n", w.title, n, w.key == "c" ? " chains" : " elements");
    std::vector<Row> rows;

    // Inputs for the hand-written loops and peers (same formulas as init).
    std::vector<float> x, ygrad(n, 1.0f), y(n);
    std::vector<int32_t> m;
    std::vector<float> p, q;
    if (w.key == "c") {
      p.resize(n * per);
      q.resize(n * per);
      for (int64_t i = 0; i < n; ++i)
        for (int k = 0; k < kChain; ++k) {
          p[i * per + k] = springP(i, k);
          q[i * per + k] = springQ(i, k);
        }
    } else {
      x.resize(n);
      for (int64_t i = 0; i < n; ++i)
        x[i] = sinInput(i);
      if (w.key == "b") {
        m.resize(n);
        for (int64_t i = 0; i < n; ++i)
          m[i] = triBound(i);
      }
    }
    std::vector<float> g(fields * n * per);
    auto zero = [&] { std::fill(g.begin(), g.end(), 0.0f); };
    float *g0 = g.data(), *g1 = g.data() + n * per;

    // Hand-written scalar: the reference gradient.
    Row hw{"hand-written scalar", std::to_string(threads), {}, {}, {}, {}};
    std::function<void()> hwFwd, hwGrad;
    if (w.key == "a") {
      hwFwd = [&] { sinForward(x.data(), y.data(), n, kSinSteps, threads); };
      hwGrad = [&] { sinGradient(x.data(), ygrad.data(), g0, n, kSinSteps, threads); };
    } else if (w.key == "b") {
      hwFwd = [&] { triForward(x.data(), m.data(), y.data(), n, threads); };
      hwGrad = [&] { triGradient(x.data(), m.data(), ygrad.data(), g0, n, threads); };
    } else {
      hwFwd = [&] { springForward(p.data(), q.data(), y.data(), n, kSpringSteps, threads); };
      hwGrad = [&] {
        springGradient(p.data(), q.data(), ygrad.data(), g0, g1, n, kSpringSteps, threads);
      };
    }
    std::vector<float> ref;
    if (quick) {
      // One period of the reference gradient (GradientReference.h), repeated.
      Reference period = reference(w.key);
      ref.resize(g.size());
      for (size_t f = 0; f < fields; ++f)
        for (int64_t e = 0; e < n * per; ++e)
          ref[f * n * per + e] = period.at(f, e);
    } else {
      hw.fwdMs = timeMin(reps, nullptr, hwFwd);
      hw.gradMs = timeMin(reps, zero, hwGrad);
      ref = g;
    }

    // qd-cpu.
    std::function<double()> pairWith;
    if (!quick)
      pairWith = [&] {
        zero();
        double t0 = nowMs();
        hwGrad();
        return nowMs() - t0;
      };
    QdResult qr = runQd(w, *cpu, reps, false, pairWith);
    const std::string qdName = fmt::format("qd-cpu (LLVM JIT) {}", shapeName(w.shape));
    Row qdRow{qdName,    std::to_string(cpu->numThreads()), qr.fwdMs,
              qr.gradMs, maxRelErr(qr.grad, ref),           {}};
    rows.push_back(qdRow);
    if (!quick) {
      rows.push_back(hw);
      rows.back().err = 0.0;
      rows.back().note = "reference gradient";
    }

    // Vectorised hand-written loop, at the thread count and on one thread.
    auto vectorised = [&](unsigned t, int runs) {
      Row vec{"hand-written vectorised", std::to_string(t), {}, {}, {}, {}};
      if (w.key == "a") {
        vec.fwdMs =
            timeMin(runs, nullptr, [&] { sinForwardVec(x.data(), y.data(), n, kSinSteps, t); });
        vec.gradMs = timeMin(runs, zero,
                             [&] { sinGradientVec(x.data(), ygrad.data(), g0, n, kSinSteps, t); });
        vec.err = maxRelErr(g, ref);
        vec.note = "-O3 -march=native -ffast-math, libmvec";
      } else if (w.key == "b") {
        vec.fwdMs =
            timeMin(runs, nullptr, [&] { triForwardVec(x.data(), m.data(), y.data(), n, t); });
        vec.gradMs = timeMin(runs, zero,
                             [&] { triGradientVec(x.data(), m.data(), ygrad.data(), g0, n, t); });
        vec.err = maxRelErr(g, ref);
        vec.note = "-O3 -march=native -ffast-math, lanes in lockstep under masks";
      } else if (w.key == "c") {
        vec.fwdMs = timeMin(runs, nullptr, [&] {
          springForwardVec(p.data(), q.data(), y.data(), n, kSpringSteps, t);
        });
        vec.gradMs = timeMin(runs, zero, [&] {
          springGradientVec(p.data(), q.data(), ygrad.data(), g0, g1, n, kSpringSteps, t);
        });
        vec.err = maxRelErr(g, ref);
        vec.note = "-O3 -march=native -ffast-math, SoA blocks of 64";
      }
      if (runs == 1 && vec.gradMs)
        vec.note += "; 1 run";
      return vec;
    };
    Row vec = vectorised(threads, reps);
    rows.push_back(vec);

    // qd-cpu and the vectorised loop on one thread (for the single-threaded
    // peers).
    QdResult q1 = runQd(w, *cpu1, reps, false);
    rows.push_back({qdName, "1", q1.fwdMs, q1.gradMs, maxRelErr(q1.grad, ref), {}});
    Row vec1 = threads != 1 ? vectorised(1, 1) : vec;
    if (threads != 1)
      rows.push_back(vec1);
    // The other kernel shapes, against the first at the same thread count.
    std::string shapeRatios;
    for (size_t si = 1; si < shapes.size(); ++si) {
      Workload ws = w;
      ws.shape = shapes[si];
      std::string name = fmt::format("qd-cpu (LLVM JIT) {}", shapeName(ws.shape));
      std::string ratios;
      for (auto [backend, base] : {std::pair{cpu.get(), &qr}, std::pair{cpu1.get(), &q1}}) {
        QdResult qs = runQd(ws, *backend, reps, false);
        double ratio = qs.gradMs / base->gradMs;
        rows.push_back({name, std::to_string(backend->numThreads()), qs.fwdMs, qs.gradMs,
                        maxRelErr(qs.grad, ref),
                        fmt::format("{:.2f}x {}", ratio, shapeName(w.shape))});
        ratios += fmt::format("{}{:.2f}x at {} thr{}", ratios.empty() ? "" : ", ", ratio,
                              backend->numThreads(), ratio <= 1.05 ? "" : " MISSED");
      }
      shapeRatios += fmt::format("; {}/{} {} (target <= 1.05x)", shapeName(ws.shape),
                                 shapeName(w.shape), ratios);
    }
    // Issue 19's targets: within 1.15x of the vectorised loop at the thread
    // count and on one thread, ADOL-C at least 50x slower.
    auto vecRatio = [](double qdMs, const Row &v) {
      double ratio = qdMs / *v.gradMs;
      return fmt::format("{:.2f}x at {} thr{}", ratio, v.threads, ratio <= 1.15 ? "" : " MISSED");
    };
    std::string vecRatios =
        fmt::format("qd/vectorised {}, {} (target <= 1.15x){}", vecRatio(qr.gradMs, vec),
                    vecRatio(q1.gradMs, vec1), shapeRatios);
    if (quick) {
      printTable(rows, qr.gradMs);
      summary.push_back(fmt::format("  ({}) {}", w.key, vecRatios));
      continue;
    }

    // ADOL-C, scaled; min over the reps like every other row (a run on the
    // 2^14-element subset takes 0.1 to 0.2 s).
    if (haveAdolc()) {
      int64_t na = w.nAdolc;
      std::vector<float> ga(fields * na * per, 0.0f);
      double ms = 0;
      auto zeroA = [&] { std::fill(ga.begin(), ga.end(), 0.0f); };
      if (w.key == "a")
        ms = timeMin(reps, zeroA,
                     [&] { sinGradientAdolc(x.data(), ygrad.data(), ga.data(), na, kSinSteps); });
      else if (w.key == "b")
        ms = timeMin(reps, zeroA,
                     [&] { triGradientAdolc(x.data(), m.data(), ygrad.data(), ga.data(), na); });
      else
        ms = timeMin(reps, zeroA, [&] {
          springGradientAdolc(p.data(), q.data(), ygrad.data(), ga.data(), ga.data() + na * per, na,
                              kSpringSteps);
        });
      Row r{"ADOL-C 2.7 (tape reuse)",
            "1",
            std::nullopt,
            ms * double(n) / double(na),
            maxRelErr(ga, prefix(ref, fields, n, na, per)),
            fmt::format("{} elements x{} (scaled), double", na, n / na)};
      rows.push_back(r);
    } else {
      rows.push_back({"ADOL-C", "1", std::nullopt, std::nullopt, std::nullopt, "not built"});
    }

    // PyTorch.
    if (w.key == "b") {
      rows.push_back({"PyTorch eager", "-", std::nullopt, std::nullopt, std::nullopt,
                      "n/a: per-element trip counts do not map to tensor ops"});
    } else if (!torch.value("available", false) || !torch.contains(w.key)) {
      rows.push_back({"PyTorch eager", "-", std::nullopt, std::nullopt, std::nullopt,
                      "n/a: " + torch.value("reason", std::string("no result"))});
    } else {
      const json &t = torch[w.key];
      // Compare the sums of the gradients (per field) with the reference
      // over the elements torch ran (fewer than N: scaled).
      int64_t nt = std::min<int64_t>(t.value("n", n), n);
      double tscale = double(n) / double(nt);
      double err = 0;
      for (size_t f = 0; f < fields; ++f) {
        double s = 0;
        for (int64_t i = 0; i < nt * per; ++i)
          s += ref[f * n * per + i];
        double ts = t["grad_sums"][f].get<double>();
        err = std::max(err, std::fabs(ts - s) / std::max(std::fabs(s), 1e-30));
      }
      for (const auto &[thr, v] : t["threads"].items()) {
        double fg = tscale * v["fwd_graph_ms"].get<double>();
        double bw = tscale * v["bwd_ms"].get<double>();
        Row r{
            "PyTorch eager autograd",
            thr,
            tscale * v["fwd_ms"].get<double>(),
            fg + bw,
            err,
            fmt::format("grad = fwd with graph {:.0f} + backward {:.0f}; err of the sum", fg, bw)};
        if (nt != n)
          r.note += fmt::format("; {} elements x{} (scaled)", nt, n / nt);
        rows.push_back(r);
      }
    }

    // qd-cpu without vectorised tasks: against the hand-written scalar loop.
    {
      QdResult qs = runQd(w, *cpuScalar, reps, false);
      rows.push_back({"qd-cpu scalar code", std::to_string(cpuScalar->numThreads()), qs.fwdMs,
                      qs.gradMs, maxRelErr(qs.grad, ref),
                      fmt::format("vector width 1; {:.2f}x the hand-written scalar loop",
                                  qs.gradMs / *hw.gradMs)});
    }

    // Interpreter, scaled; also measures the exact adstack need.
    InterpResult ir = runInterp(w);
    double scale = double(n) / double(w.nInterp);
    rows.push_back({"interpreter", "1", ir.fwdMs * scale, ir.gradMs * scale,
                    maxRelErr(ir.grad, prefix(ref, fields, n, w.nInterp, per)),
                    fmt::format("{} elements x{} (scaled)", w.nInterp, n / w.nInterp)});

    for (Row &r : rows)
      if (r.err && *r.err > 1e-3)
        r.note = "WRONG GRADIENT" + (r.note.empty() ? "" : "; " + r.note);
    printTable(rows, qr.gradMs);
    int64_t exact = ir.exactPerWorker(qr.lanes) * cpu->numThreads();
    fmt::print("  adstack heap: {} bytes for {} stacks (capacities sum {}), exact need {} bytes "
               "(max depths sum {}, x {} lanes, x {} workers): {:.2f}x\n",
               qr.heapBytes, qr.stacks, qr.capacitySum, exact, ir.depthSum, qr.lanes,
               cpu->numThreads(), exact ? double(qr.heapBytes) / double(exact) : 0.0);
    fmt::print("  compile: forward kernel {:.1f} ms, gradient kernel {:.1f} ms\n", qr.compileFwdMs,
               qr.compileGradMs);
    // Per-launch overhead: the same kernels on one element, many launches.
    for (KernelShape shape : shapes) {
      Workload tiny = w;
      tiny.n = 1;
      tiny.shape = shape;
      QdModule tm = makeModule(tiny, 1);
      qd::Program &tp = *tm.program;
      auto launchAll = [&](const qd::Kernel &k, int count) {
        for (int l = 0; l < count; ++l)
          check(tp.launch(k.name(), tm.args(), *cpu), "tiny launch");
      };
      launchAll(*tm.fwd, 1);
      launchAll(*tm.grad, 1);
      const int launches = 200;
      double f = timeMin(1, nullptr, [&] { launchAll(*tm.fwd, launches); });
      double gms = timeMin(1, nullptr, [&] { launchAll(*tm.grad, launches); });
      // The backend alone (capacities of the last sized launch, no sizing).
      qd::LaunchOptions direct;
      direct.adStackCapacities = tp.lastAdStackCapacities();
      double gb = timeMin(1, nullptr, [&] {
        for (int l = 0; l < launches; ++l)
          check(cpu->launch(tp, *tm.grad, tm.args(), direct), "gradient");
      });
      fmt::print("  launch overhead ({}, N = 1, {} launches): forward {:.0f} us, gradient "
                 "{:.0f} us per Program::launch ({:.0f} us in CpuBackend::launch alone)\n",
                 shapeName(shape), launches, 1e3 * f / launches, 1e3 * gms / launches,
                 1e3 * gb / launches);
    }
    // The target is judged on the paired runs: each qd gradient is timed
    // right before a hand-written one, so both see the same moment of a
    // shared machine, where the two minima may come from different ones.
    double minRatio = qr.gradMs / *hw.gradMs;
    double adolcMs = 0;
    for (const Row &r : rows)
      if (r.impl.rfind("ADOL-C", 0) == 0)
        adolcMs = r.gradMs.value_or(0);
    const std::vector<double> &pr = qr.pairedRatios;
    double paired = pr[pr.size() / 2];
    summary.push_back(fmt::format(
        "  ({}) qd/hand-written {:.2f}x paired median ({:.2f}x to {:.2f}x; ratio of minima "
        "{:.2f}x) (target <= 1.2x){}; {}; ADOL-C/qd {}{}; heap {:.2f}x of exact",
        w.key, paired, pr.front(), pr.back(), minRatio, paired <= 1.2 ? "" : " MISSED", vecRatios,
        haveAdolc() ? fmt::format("{:.1f}x", adolcMs / qr.gradMs) : "n/a",
        haveAdolc() ? (adolcMs / qr.gradMs >= 50 ? " (target >= 50x)" : " (target >= 50x) MISSED")
                    : "",
        exact ? double(qr.heapBytes) / double(exact) : 0.0));
  }
  fmt::print("\nsummary (gradient times):\n");
  for (const auto &s : summary)
    fmt::print("{}\n", s);
  fmt::print("total benchmark time {:.1f} s\n", (nowMs() - start) / 1e3);
  return 0;
}

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-gradients", argc, argv, runBench);
}
