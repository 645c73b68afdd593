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
// Usage: qd-bench-gradients --help (GradientOptions.cpp).
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "BenchRecord.h"
#include "GradientKernels.h"
#include "GradientOptions.h"
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

/// Prints a workload's table, and records its rows (`--json`): workload, n,
/// impl, shape (qd's rows), threads, fwd_ms, grad_ms, max_rel_err.
void printTable(const Workload &w, const std::vector<Row> &rows, double qdGrad,
                BenchRecord &record) {
  fmt::print("  {:<30} {:>3} {:>10} {:>11} {:>9} {:>12}  {}\n", "implementation", "thr", "fwd ms",
             "grad ms", "grad/qd", "max rel err", "note");
  const std::string qdPrefix = "qd-cpu (LLVM JIT) ";
  for (const Row &r : rows) {
    nlohmann::json row = {{"workload", w.key}, {"n", w.n}, {"impl", r.impl}};
    if (r.impl.rfind(qdPrefix, 0) == 0)
      row["shape"] = r.impl.substr(qdPrefix.size());
    row["threads"] = std::atoi(r.threads.c_str());
    if (r.fwdMs)
      row["fwd_ms"] = *r.fwdMs;
    if (r.gradMs)
      row["grad_ms"] = *r.gradMs;
    if (r.err)
      row["max_rel_err"] = *r.err;
    record.add(std::move(row));
    std::string ratio = r.gradMs ? fmt::format("{:.2f}x", *r.gradMs / qdGrad) : "n/a";
    std::string err = r.err ? fmt::format("{:.1e}", *r.err) : "-";
    fmt::print("  {:<30} {:>3} {:>10} {:>11} {:>9} {:>12}  {}\n", r.impl, r.threads, fmtMs(r.fwdMs),
               fmtMs(r.gradMs), ratio, err, r.note);
  }
}

} // namespace

namespace {

// The PyTorch results of --torch, or `available: false` with the reason.
json loadTorch(const std::string &torchFile) {
  if (torchFile.empty())
    return json{{"available", false}, {"reason", "not run (no --torch FILE)"}};
  std::ifstream in(torchFile);
  json torch = json::parse(in, nullptr, false);
  if (torch.is_discarded())
    return json{{"available", false}, {"reason", "unreadable " + torchFile}};
  return torch;
}

// A workload of GradientWorkloads.h with its element counts (each peer's).
Workload workload(std::string key, std::string title, int64_t n, int64_t nAdolc, int64_t nInterp) {
  Workload w;
  w.key = std::move(key);
  w.title = std::move(title);
  w.n = n;
  w.nAdolc = nAdolc;
  w.nInterp = nInterp;
  w.spec = &kernelSpec(w.key);
  return w;
}

std::vector<Workload> makeWorkloads() {
  return {workload("a", fmt::format("(a) sin: v = sin(v) + 0.1, K = {}", kSinSteps),
                   int64_t(1) << 20, int64_t(1) << 14, int64_t(1) << 10),
          workload("b",
                   "(b) triangular: for j < m[i] { for k < j { v = sin(v + 0.01k) + 0.1 } }, "
                   "m[i] = 4..16 from an array",
                   int64_t(1) << 20, int64_t(1) << 14, int64_t(1) << 10),
          workload("c",
                   fmt::format("(c) spring chain: {} masses (16 loop-carried f32), T = {} steps",
                               kChain, kSpringSteps),
                   int64_t(1) << 16, int64_t(1) << 10, int64_t(1) << 7)};
}

// --dump-ir: prints the module, the gradient kernel and its LLVM IR.
int dumpIR(const std::vector<Workload> &workloads, const Options &o) {
  for (const Workload &w : workloads)
    if (w.key == o.dump) {
      auto cpu = check(qd::CpuBackend::create({.threads = o.threads}), "CpuBackend::create");
      Workload small = w;
      small.n = o.dumpN;
      small.shape = o.shapes.front();
      QdResult r = runQd(small, *cpu, 1, true);
      fmt::print(";;; module (N = {}, {})\n{}\n;;; gradient kernel\n{}\n"
                 ";;; optimised LLVM IR of the gradient kernel\n{}\n",
                 small.n, shapeName(small.shape), w.spec->ir(small.n, small.shape), r.gradIR,
                 r.gradLLVM);
      return 0;
    }
  die("--dump-ir: unknown workload " + o.dump);
}

/// The qd-cpu backends of the rows: at the thread count, on one thread,
/// and without vectorised tasks.
struct Backends {
  std::unique_ptr<qd::CpuBackend> cpu, cpu1, scalar;
};

/// The inputs of the hand-written loops and the peers (the formulas of
/// init), and the gradient buffer they write (`g0`, `g1`: its fields).
struct HostData {
  std::vector<float> x, ygrad, y;
  std::vector<int32_t> m;
  std::vector<float> p, q, g;
  float *g0 = nullptr, *g1 = nullptr;
  void zero() { std::fill(g.begin(), g.end(), 0.0f); }
};

HostData makeHostData(const Workload &w) {
  const int64_t n = w.n, per = w.spec->gradElemsPerItem;
  HostData d;
  d.ygrad.assign(n, 1.0f);
  d.y.resize(n);
  if (w.key == "c") {
    d.p.resize(n * per);
    d.q.resize(n * per);
    for (int64_t i = 0; i < n; ++i)
      for (int k = 0; k < kChain; ++k) {
        d.p[i * per + k] = springP(i, k);
        d.q[i * per + k] = springQ(i, k);
      }
  } else {
    d.x.resize(n);
    for (int64_t i = 0; i < n; ++i)
      d.x[i] = sinInput(i);
    if (w.key == "b") {
      d.m.resize(n);
      for (int64_t i = 0; i < n; ++i)
        d.m[i] = triBound(i);
    }
  }
  d.g.resize(w.arrays() * n * per);
  d.g0 = d.g.data();
  d.g1 = d.g.data() + n * per;
  return d;
}

/// The hand-written scalar loops (forward, gradient): the reference.
std::pair<std::function<void()>, std::function<void()>>
handWrittenScalar(const Workload &w, HostData &d, unsigned threads) {
  const int64_t n = w.n;
  if (w.key == "a")
    return {
        [&d, n, threads] { sinForward(d.x.data(), d.y.data(), n, kSinSteps, threads); },
        [&d, n, threads] { sinGradient(d.x.data(), d.ygrad.data(), d.g0, n, kSinSteps, threads); }};
  if (w.key == "b")
    return {[&d, n, threads] { triForward(d.x.data(), d.m.data(), d.y.data(), n, threads); },
            [&d, n, threads] {
              triGradient(d.x.data(), d.m.data(), d.ygrad.data(), d.g0, n, threads);
            }};
  return {[&d, n, threads] {
            springForward(d.p.data(), d.q.data(), d.y.data(), n, kSpringSteps, threads);
          },
          [&d, n, threads] {
            springGradient(d.p.data(), d.q.data(), d.ygrad.data(), d.g0, d.g1, n, kSpringSteps,
                           threads);
          }};
}

/// The vectorised hand-written loop on `t` threads, min of `runs`.
Row vectorisedRow(const Workload &w, HostData &d, const std::vector<float> &ref, unsigned t,
                  int runs) {
  const int64_t n = w.n;
  auto zero = [&] { d.zero(); };
  Row vec{"hand-written vectorised", std::to_string(t), {}, {}, {}, {}};
  if (w.key == "a") {
    vec.fwdMs =
        timeMin(runs, nullptr, [&] { sinForwardVec(d.x.data(), d.y.data(), n, kSinSteps, t); });
    vec.gradMs = timeMin(
        runs, zero, [&] { sinGradientVec(d.x.data(), d.ygrad.data(), d.g0, n, kSinSteps, t); });
    vec.note = "-O3 -march=native -ffast-math, libmvec";
  } else if (w.key == "b") {
    vec.fwdMs =
        timeMin(runs, nullptr, [&] { triForwardVec(d.x.data(), d.m.data(), d.y.data(), n, t); });
    vec.gradMs = timeMin(
        runs, zero, [&] { triGradientVec(d.x.data(), d.m.data(), d.ygrad.data(), d.g0, n, t); });
    vec.note = "-O3 -march=native -ffast-math, lanes in lockstep under masks";
  } else if (w.key == "c") {
    vec.fwdMs = timeMin(runs, nullptr, [&] {
      springForwardVec(d.p.data(), d.q.data(), d.y.data(), n, kSpringSteps, t);
    });
    vec.gradMs = timeMin(runs, zero, [&] {
      springGradientVec(d.p.data(), d.q.data(), d.ygrad.data(), d.g0, d.g1, n, kSpringSteps, t);
    });
    vec.note = "-O3 -march=native -ffast-math, SoA blocks of 64";
  }
  if (vec.gradMs)
    vec.err = maxRelErr(d.g, ref);
  if (runs == 1 && vec.gradMs)
    vec.note += "; 1 run";
  return vec;
}

/// Rows of the other kernel shapes, against the first at the same thread
/// count (`qr`, `q1`); returns the summary's ratios.
std::string shapeRows(const Workload &w, const Options &o, Backends &b, const QdResult &qr,
                      const QdResult &q1, const std::vector<float> &ref, std::vector<Row> &rows) {
  std::string shapeRatios;
  for (size_t si = 1; si < o.shapes.size(); ++si) {
    Workload ws = w;
    ws.shape = o.shapes[si];
    std::string name = fmt::format("qd-cpu (LLVM JIT) {}", shapeName(ws.shape));
    std::string ratios;
    for (auto [backend, base] : {std::pair{b.cpu.get(), &qr}, std::pair{b.cpu1.get(), &q1}}) {
      QdResult qs = runQd(ws, *backend, o.reps, false);
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
  return shapeRatios;
}

/// ADOL-C, scaled; min over the reps like every other row (a run on the
/// 2^14-element subset takes 0.1 to 0.2 s).
Row adolcRow(const Workload &w, HostData &d, const std::vector<float> &ref, int reps) {
  if (!haveAdolc())
    return {"ADOL-C", "1", std::nullopt, std::nullopt, std::nullopt, "not built"};
  const int64_t n = w.n, per = w.spec->gradElemsPerItem, na = w.nAdolc;
  const size_t fields = w.arrays();
  std::vector<float> ga(fields * na * per, 0.0f);
  double ms = 0;
  auto zeroA = [&] { std::fill(ga.begin(), ga.end(), 0.0f); };
  if (w.key == "a")
    ms = timeMin(reps, zeroA,
                 [&] { sinGradientAdolc(d.x.data(), d.ygrad.data(), ga.data(), na, kSinSteps); });
  else if (w.key == "b")
    ms = timeMin(reps, zeroA,
                 [&] { triGradientAdolc(d.x.data(), d.m.data(), d.ygrad.data(), ga.data(), na); });
  else
    ms = timeMin(reps, zeroA, [&] {
      springGradientAdolc(d.p.data(), d.q.data(), d.ygrad.data(), ga.data(), ga.data() + na * per,
                          na, kSpringSteps);
    });
  return {"ADOL-C 2.7 (tape reuse)",
          "1",
          std::nullopt,
          ms * double(n) / double(na),
          maxRelErr(ga, prefix(ref, fields, n, na, per)),
          fmt::format("{} elements x{} (scaled), double", na, n / na)};
}

/// PyTorch's rows, from the --torch results.
void torchRows(const Workload &w, const json &torch, const std::vector<float> &ref,
               std::vector<Row> &rows) {
  if (w.key == "b") {
    rows.push_back({"PyTorch eager", "-", std::nullopt, std::nullopt, std::nullopt,
                    "n/a: per-element trip counts do not map to tensor ops"});
    return;
  }
  if (!torch.value("available", false) || !torch.contains(w.key)) {
    rows.push_back({"PyTorch eager", "-", std::nullopt, std::nullopt, std::nullopt,
                    "n/a: " + torch.value("reason", std::string("no result"))});
    return;
  }
  const int64_t n = w.n, per = w.spec->gradElemsPerItem;
  const json &t = torch[w.key];
  // Compare the sums of the gradients (per field) with the reference
  // over the elements torch ran (fewer than N: scaled).
  int64_t nt = std::min<int64_t>(t.value("n", n), n);
  double tscale = double(n) / double(nt);
  double err = 0;
  for (size_t f = 0; f < w.arrays(); ++f) {
    double s = 0;
    for (int64_t i = 0; i < nt * per; ++i)
      s += ref[f * n * per + i];
    double ts = t["grad_sums"][f].get<double>();
    err = std::max(err, std::fabs(ts - s) / std::max(std::fabs(s), 1e-30));
  }
  for (const auto &[thr, v] : t["threads"].items()) {
    double fg = tscale * v["fwd_graph_ms"].get<double>();
    double bw = tscale * v["bwd_ms"].get<double>();
    Row r{"PyTorch eager autograd",
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

/// Per-launch overhead: the same kernels on one element, many launches.
void printLaunchOverhead(const Workload &w, const std::vector<KernelShape> &shapes,
                         qd::CpuBackend &cpu) {
  for (KernelShape shape : shapes) {
    Workload tiny = w;
    tiny.n = 1;
    tiny.shape = shape;
    QdModule tm = makeModule(tiny, 1);
    qd::Program &tp = *tm.program;
    auto launchAll = [&](const qd::Kernel &k, int count) {
      for (int l = 0; l < count; ++l)
        check(tp.launch(k.name(), tm.args(), cpu), "tiny launch");
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
        check(cpu.launch(tp, *tm.grad, tm.args(), direct), "gradient");
    });
    fmt::print("  launch overhead ({}, N = 1, {} launches): forward {:.0f} us, gradient "
               "{:.0f} us per Program::launch ({:.0f} us in CpuBackend::launch alone)\n",
               shapeName(shape), launches, 1e3 * f / launches, 1e3 * gms / launches,
               1e3 * gb / launches);
  }
}

/// The reference gradient: the hand-written scalar loop's (timed into
/// `hw`), or with --quick one period of GradientReference.h, repeated.
std::vector<float> referenceGradient(const Workload &w, const Options &o, HostData &d, Row &hw,
                                     const std::function<void()> &hwFwd,
                                     const std::function<void()> &hwGrad) {
  if (!o.quick) {
    hw.fwdMs = timeMin(o.reps, nullptr, hwFwd);
    hw.gradMs = timeMin(
        o.reps, [&] { d.zero(); }, hwGrad);
    return d.g;
  }
  const int64_t n = w.n, per = w.spec->gradElemsPerItem;
  Reference period = reference(w.key);
  std::vector<float> ref(d.g.size());
  for (size_t f = 0; f < w.arrays(); ++f)
    for (int64_t e = 0; e < n * per; ++e)
      ref[f * n * per + e] = period.at(f, e);
  return ref;
}

/// Runs one workload on every implementation, prints its table and
/// returns its summary line.
std::string benchWorkload(Workload w, const Options &o, Backends &b, const json &torch,
                          BenchRecord &record) {
  w.shape = o.shapes.front();
  const int64_t n = w.n, per = w.spec->gradElemsPerItem;
  const size_t fields = w.arrays();
  fmt::print("\n{}, N = {}{}\n", w.title, n, w.key == "c" ? " chains" : " elements");
  std::vector<Row> rows;
  HostData d = makeHostData(w);
  Row hw{"hand-written scalar", std::to_string(o.threads), {}, {}, {}, {}};
  auto [hwFwd, hwGrad] = handWrittenScalar(w, d, o.threads);
  std::vector<float> ref = referenceGradient(w, o, d, hw, hwFwd, hwGrad);

  // qd-cpu.
  std::function<double()> pairWith;
  if (!o.quick)
    pairWith = [&d, &hwGrad = hwGrad] {
      d.zero();
      double t0 = nowMs();
      hwGrad();
      return nowMs() - t0;
    };
  QdResult qr = runQd(w, *b.cpu, o.reps, false, pairWith);
  const std::string qdName = fmt::format("qd-cpu (LLVM JIT) {}", shapeName(w.shape));
  rows.push_back({qdName,
                  std::to_string(b.cpu->numThreads()),
                  qr.fwdMs,
                  qr.gradMs,
                  maxRelErr(qr.grad, ref),
                  {}});
  if (!o.quick) {
    rows.push_back(hw);
    rows.back().err = 0.0;
    rows.back().note = "reference gradient";
  }
  // The vectorised hand-written loop; qd-cpu and that loop on one thread
  // (for the single-threaded peers).
  Row vec = vectorisedRow(w, d, ref, o.threads, o.reps);
  rows.push_back(vec);
  QdResult q1 = runQd(w, *b.cpu1, o.reps, false);
  rows.push_back({qdName, "1", q1.fwdMs, q1.gradMs, maxRelErr(q1.grad, ref), {}});
  Row vec1 = o.threads != 1 ? vectorisedRow(w, d, ref, 1, 1) : vec;
  if (o.threads != 1)
    rows.push_back(vec1);
  std::string shapeRatios = shapeRows(w, o, b, qr, q1, ref, rows);
  // Issue 19's targets: within 1.15x of the vectorised loop at the thread
  // count and on one thread, ADOL-C at least 50x slower.
  auto vecRatio = [](double qdMs, const Row &v) {
    double ratio = qdMs / *v.gradMs;
    return fmt::format("{:.2f}x at {} thr{}", ratio, v.threads, ratio <= 1.15 ? "" : " MISSED");
  };
  std::string vecRatios =
      fmt::format("qd/vectorised {}, {} (target <= 1.15x){}", vecRatio(qr.gradMs, vec),
                  vecRatio(q1.gradMs, vec1), shapeRatios);
  if (o.quick) {
    printTable(w, rows, qr.gradMs, record);
    return fmt::format("  ({}) {}", w.key, vecRatios);
  }
  rows.push_back(adolcRow(w, d, ref, o.reps));
  torchRows(w, torch, ref, rows);
  // qd-cpu without vectorised tasks: against the hand-written scalar loop.
  QdResult qs = runQd(w, *b.scalar, o.reps, false);
  rows.push_back({"qd-cpu scalar code", std::to_string(b.scalar->numThreads()), qs.fwdMs, qs.gradMs,
                  maxRelErr(qs.grad, ref),
                  fmt::format("vector width 1; {:.2f}x the hand-written scalar loop",
                              qs.gradMs / *hw.gradMs)});
  // Interpreter, scaled; also measures the exact adstack need.
  InterpResult ir = runInterp(w);
  double scale = double(n) / double(w.nInterp);
  rows.push_back({"interpreter", "1", ir.fwdMs * scale, ir.gradMs * scale,
                  maxRelErr(ir.grad, prefix(ref, fields, n, w.nInterp, per)),
                  fmt::format("{} elements x{} (scaled)", w.nInterp, n / w.nInterp)});

  for (Row &r : rows)
    if (r.err && *r.err > 1e-3)
      r.note = "WRONG GRADIENT" + (r.note.empty() ? "" : "; " + r.note);
  printTable(w, rows, qr.gradMs, record);
  int64_t exact = ir.exactPerWorker(qr.lanes) * b.cpu->numThreads();
  fmt::print("  adstack heap: {} bytes for {} stacks (capacities sum {}), exact need {} bytes "
             "(max depths sum {}, x {} lanes, x {} workers): {:.2f}x\n",
             qr.heapBytes, qr.stacks, qr.capacitySum, exact, ir.depthSum, qr.lanes,
             b.cpu->numThreads(), exact ? double(qr.heapBytes) / double(exact) : 0.0);
  fmt::print("  compile: forward kernel {:.1f} ms, gradient kernel {:.1f} ms\n", qr.compileFwdMs,
             qr.compileGradMs);
  printLaunchOverhead(w, o.shapes, *b.cpu);
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
  return fmt::format(
      "  ({}) qd/hand-written {:.2f}x paired median ({:.2f}x to {:.2f}x; ratio of minima "
      "{:.2f}x) (target <= 1.2x){}; {}; ADOL-C/qd {}{}; heap {:.2f}x of exact",
      w.key, paired, pr.front(), pr.back(), minRatio, paired <= 1.2 ? "" : " MISSED", vecRatios,
      haveAdolc() ? fmt::format("{:.1f}x", adolcMs / qr.gradMs) : "n/a",
      haveAdolc() ? (adolcMs / qr.gradMs >= 50 ? " (target >= 50x)" : " (target >= 50x) MISSED")
                  : "",
      exact ? double(qr.heapBytes) / double(exact) : 0.0);
}

} // namespace

static int runBench(int argc, char **argv) {
  Options o;
  if (!parseOptions(argc, argv, o))
    return 0;
  gCpuTime = o.cpuTime;
  BenchRecord record("gradients", argc, argv);
  record.setPath(o.json);
  json torch = loadTorch(o.torchFile);
  std::vector<Workload> workloads = makeWorkloads();
  if (!o.dump.empty())
    return dumpIR(workloads, o);
  Backends b;
  b.cpu = check(qd::CpuBackend::create({.threads = o.threads,
                                        .vectorWidth = o.width,
                                        .vectorIsa = o.isa,
                                        .fullOptimizationLimit = o.fullLimit}),
                "CpuBackend::create");
  b.cpu1 = check(qd::CpuBackend::create({.threads = 1,
                                         .vectorWidth = o.width,
                                         .vectorIsa = o.isa,
                                         .fullOptimizationLimit = o.fullLimit}),
                 "CpuBackend::create");
  b.scalar =
      check(qd::CpuBackend::create({.threads = o.threads, .vectorWidth = 1}), "CpuBackend::create");
  double start = nowMs();
  fmt::print("qd-bench-gradients: {} threads for qd-cpu and the hand-written loops "
             "({} hardware threads), min of {} runs, {} ms; qd-cpu: {} lanes, "
             "vector math {}\n",
             b.cpu->numThreads(), std::thread::hardware_concurrency(), o.reps,
             gCpuTime ? "process CPU" : "wall-clock", b.cpu->vectorWidth(), b.cpu->vectorMathIsa());
  if (!torch.value("available", false))
    fmt::print("PyTorch: n/a ({})\n", torch.value("reason", std::string("unknown")));
  else
    fmt::print("PyTorch {} (eager autograd, float32)\n", torch.value("version", std::string("?")));
  if (!haveAdolc())
    fmt::print("ADOL-C: n/a (built without libadolc-dev)\n");

  std::vector<std::string> summary;
  for (const Workload &w : workloads)
    if (o.only.find(w.key) != std::string::npos)
      summary.push_back(benchWorkload(w, o, b, torch, record));
  fmt::print("\nsummary (gradient times):\n");
  for (const auto &s : summary)
    fmt::print("{}\n", s);
  fmt::print("total benchmark time {:.1f} s\n", (nowMs() - start) / 1e3);
  record.write();
  return 0;
}

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-gradients", argc, argv, runBench);
}
