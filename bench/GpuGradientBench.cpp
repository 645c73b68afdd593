//===- GpuGradientBench.cpp - Gradients on the GPU backends vs peers ------===//
//
// qd-bench-gpu: the reverse-mode gradients of the workloads of
// GradientWorkloads.h (the qd kernels of GradientKernels.h, the gradient
// kernel from buildGradientKernel, as qd-bench-gradients builds them) on
// qd's GPU backends, qd::CudaBackend and qd::VulkanBackend, at GPU sizes:
//
//  (a) sin        v = sin(v) + 0.1, K = 64 times; N = 2^20 and 2^24
//  (b) triangular for j < m[i] { for k < j { v = sin(v + 0.01k) + 0.1 } },
//                 m[i] = 4..16; N = 2^22
//  (c) spring     8-mass chain, 16 loop-carried f32, T = 64; N = 2^20 chains
//
// Per workload, size and backend: the module is parsed, the gradient kernel
// built, a Program created and filled; input adjoints are zeroed and the
// output adjoint seeded with 1, and the first gradient launch (which
// compiles: PTX and the driver's JIT, or SPIR-V and the Vulkan pipelines)
// is checked against a CPU reference; then --warmup launches, then --reps
// timed launches of the gradient kernel (and of the forward kernel), each
// Program::launch timed on the wall clock (a launch returns after its error
// record is copied back), the same way on every backend. The timed launches
// write no host data in between: the gradient kernel clears the output
// adjoint it consumed, so they run with a zero seed (the same work on a
// GPU), and the check reads the host side without marking it newer, so a
// backend that keeps data on the device (CUDA and Vulkan do) is timed
// without host copies.
//
// The reference: the hand-written scalar reverse loops of
// GradientHandwritten.cpp on one period of the inputs. The inputs of
// GradientWorkloads.h depend on the element index only modulo 1000 (a),
// 13000 (b, x and m) and 187 (c, i mod 17 and i mod 11), and so does the
// gradient, so one period gives every element exactly. PASS: the gradient's
// sum and every element within a relative error of 1e-3 (elements below
// 1e-3 of the largest are compared against that floor).
//
// Peers come from JSON files (--peers, repeatable; bench/run-gpu.sh makes
// one from bench/gpu/peers.cu and bench/gpu/framework_peers.py): an object
// or an array of objects, each with
//   "rows":   [{"workload": "a", "n": N, "impl": "local_tape", "ms_median": ..,
//               "ms_min": .., "grad_sum": .., "compile_s": .. (optional)}, ...]
//   "status": {"jax": {"available": false, "reason": ".."}, ...}
//   "source", "info" (printed)
// or {"available": false, "reason": "..", "impls": [...]} for a peer program
// that did not run. Impls: local_tape, global_tape, jax, torch_eager,
// torch_compile. A peer whose grad_sum is off the reference by more than
// 1e-3 is marked with '!'.
//
// Each workload runs in the kernel shapes of --shapes (GradientKernels.h:
// fields; ndarray arguments with a constant trip count; ndarray-n, the
// trip count an argument); the targets compare each shape's kernel time
// and launch overhead with the first's on the same backend.
//
// Usage: qd-bench-gpu [--reps 20] [--warmup 3] [--only a,b,c] [--peers FILE]...
//                     [--shapes fields,ndarray] [--max-n N] [--backends cuda,vulkan,cpu]
//                     [--device 0] [--block-size 128] [--max-registers 0]
//                     [--cuda-threads 0] [--cuda-grid-waves 0] [--cuda-narrow-offsets]
//                     [--cuda-tape-bytes-per-sm 0] [--json FILE]
//                     [--vulkan-device NAME] [--vulkan-threads N[,N...]]
//                     [--vulkan-workgroup 64] [--vulkan-no-read-only-buffers] [--timeout-ms 0]
// --cuda-threads, --cuda-grid-waves and --cuda-tape-bytes-per-sm:
// CudaBackendOptions::maxThreads, gridWaves and localTapeBytesPerSm (0: the
// backend's default grid). --cuda-narrow-offsets: CudaBackendOptions::
// narrowNdarrayOffsets (32-bit offsets where the ndarrays fit them).
// --backends (or --backend): the qd backends, one table row each per
// workload, in this order; the ratio column compares each with the first
// that runs. Default cuda,vulkan: every GPU backend that can be created; one
// that cannot (no driver, no device, a Vulkan device that is the CPU) reads
// n/a with the reason, and without any it says why and exits 0. cpu runs the
// CPU backend: a check of this program where there is no GPU, and with
// --backends cpu,vulkan the baseline of Vulkan on a CPU device (lavapipe;
// named in --backends, a CPU device runs). --device, --block-size and
// --max-registers are CUDA's; --vulkan-device picks the Vulkan device (an
// index or part of its name; default QD_VULKAN_DEVICE, else the first
// discrete GPU), --vulkan-threads its grid (VulkanBackendOptions::maxThreads;
// default 2^18 on a GPU, 65536 on a CPU device; several values give one
// Vulkan row each, labelled vulkan:64K ...), --vulkan-workgroup its
// workgroup size, --vulkan-no-read-only-buffers VulkanBackendOptions::
// readOnlyBuffers = false (for A/B runs). --timeout-ms launches with stop checks (every qd target).
// --max-n caps every size (a quick run).
// Exit status 1 when a qd gradient FAILs its check.
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "BenchRecord.h"
#include "BenchStats.h"
#include "GpuBenchOptions.h"
#include "GpuPeers.h"
#include "GpuTargets.h"
#include "GradientKernels.h"
#include "GradientReference.h"
#include "GradientWorkloads.h"

#include "qd/ir/Parser.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace qdbench;

namespace {

template <typename T> T check(absl::StatusOr<T> s, const std::string &what) {
  if (!s.ok())
    die(fmt::format("{}: {}", what, s.status().ToString()));
  return std::move(*s);
}
void check(const absl::Status &s, const std::string &what) {
  if (!s.ok())
    die(fmt::format("{}: {}", what, s.ToString()));
}

double nowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Median and min of `reps` timed calls of `fn`.
template <typename Fn> Timing timeRuns(int reps, Fn &&fn) {
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    double t0 = nowMs();
    fn();
    ms.push_back(nowMs() - t0);
  }
  return summarize(std::move(ms));
}

constexpr double kTolerance = 1e-3;

double relErr(double a, double ref, double floor) {
  double d = std::fabs(a - ref);
  double den = std::max(std::fabs(ref), floor);
  double e = den > 0 ? d / den : d;
  return std::isnan(e) ? INFINITY : e;
}

//===--- qd runs ----------------------------------------------------------===//

struct Case {
  std::string key;
  int64_t n = 0;
  KernelShape shape = KernelShape::Fields;
  bool same(const Case &o) const { return key == o.key && n == o.n && shape == o.shape; }
};

struct QdRow {
  Case c;
  size_t target = 0; // index into the targets
  bool pass = false;
  double sumErr = 0, maxElemErr = 0, qdSum = 0, refSum = 0;
  bool stable = false; // the gradient unchanged by the timed (zero-seed) launches
  std::string samples; // a few elements, qd against the reference
  double firstLaunchMs = 0;
  Timing grad, fwd;
  /// The gradient's kernels alone (Target::kernelMs; zeros without it).
  Timing gradKernel;
  int64_t heapBytes = 0, gridThreads = 0, hostBytes = 0;
};

std::string sizeName(int64_t n) {
  if (n > 0 && std::has_single_bit(uint64_t(n)))
    return fmt::format("2^{}", std::countr_zero(uint64_t(n)));
  return std::to_string(n);
}

std::string title(const std::string &key) {
  if (key == "a")
    return "(a) sin";
  if (key == "b")
    return "(b) triangular";
  return "(c) spring";
}

/// "(a) sin fields" and so on.
std::string title(const Case &c) {
  return fmt::format("{} {}", title(c.key), shapeName(c.shape));
}

/// The sum of the gradient arrays' host contents. Read through the const
/// accessor: the host side is not marked newer, so the next launch copies
/// nothing to the device.
double gradSum(WorkloadData &d, const KernelSpec &spec) {
  double sum = 0;
  for (const auto &f : spec.gradFields) {
    const qd::Buffer &b = d.buffer(f, qd::Component::Grad);
    const float *g = reinterpret_cast<const float *>(b.data());
    for (int64_t j = 0; j < b.numElements(); ++j)
      sum += g[j];
  }
  return sum;
}

QdRow runCase(const Case &c, size_t targetIndex, const Target &gpu, const Reference &ref,
              int warmup, int reps) {
  const KernelSpec &spec = kernelSpec(c.key);
  QdRow row;
  row.c = c;
  row.target = targetIndex;
  std::unique_ptr<qd::Module> module =
      check(qd::parseModule(spec.ir(c.n, c.shape), {.filename = spec.key + ".qd"}), "parse");
  const qd::Kernel *fwd = module->findKernel(spec.kernel);
  if (!fwd)
    die("no kernel " + spec.kernel);
  const qd::Kernel *grad = check(qd::buildGradientKernel(*module, *fwd), "buildGradientKernel");
  std::unique_ptr<qd::Program> program = check(qd::Program::create(*module), "Program::create");
  qd::Program &p = *program;
  WorkloadData data(c.key, c.shape, p, c.n);
  row.hostBytes = data.hostBytes();

  // Input adjoints zeroed, the output adjoint seeded with 1. Host data is
  // written only here, before the first launch.
  data.zeroGradsAndSeed();
  std::string gradName(grad->name()), fwdName(fwd->name());
  std::vector<double> kernelMs;
  auto launchGrad = [&] {
    check(p.launch(gradName, data.args(), *gpu.backend, gpu.launchOptions),
          gpu.label + " gradient launch");
    if (std::optional<double> k = gpu.kernelMs ? gpu.kernelMs() : std::nullopt)
      kernelMs.push_back(*k);
  };
  auto launchFwd = [&] {
    check(p.launch(fwdName, data.args(), *gpu.backend, gpu.launchOptions),
          gpu.label + " forward launch");
  };

  double t0 = nowMs();
  launchGrad(); // compiles
  row.firstLaunchMs = nowMs() - t0;

  // The check, against the periodic reference.
  const double floor = kTolerance * double(ref.scale);
  for (size_t f = 0; f < spec.gradFields.size(); ++f) {
    const qd::Buffer &b = data.buffer(spec.gradFields[f], qd::Component::Grad);
    const float *g = reinterpret_cast<const float *>(b.data());
    int64_t count = b.numElements();
    for (int64_t j = 0; j < count; ++j)
      row.maxElemErr = std::max(row.maxElemErr, relErr(g[j], ref.at(f, j), floor));
    for (int64_t j : {int64_t(0), count / 2 + 1, count - 1})
      row.samples +=
          fmt::format("{}{}.grad[{}] = {:.7g} (ref {:.7g})", row.samples.empty() ? "" : ", ",
                      spec.gradFields[f], j, g[j], ref.at(f, j));
  }
  row.qdSum = gradSum(data, spec);
  row.refSum = ref.sum(c.n);
  row.sumErr = relErr(row.qdSum, row.refSum, 0);
  row.pass = row.sumErr <= kTolerance && row.maxElemErr <= kTolerance;

  for (int w = 0; w < warmup; ++w)
    launchGrad();
  kernelMs.clear();
  row.grad = timeRuns(reps, launchGrad);
  row.gradKernel = summarize(kernelMs);
  // The later launches ran with a zero seed: the gradient must not have
  // moved (it would, were the seed not consumed, or a launch wrong).
  row.stable = gradSum(data, spec) == row.qdSum;
  row.pass = row.pass && row.stable;
  row.heapBytes = gpu.heapBytes();
  row.gridThreads = gpu.gridThreads(*grad);
  launchFwd(); // compiles
  for (int w = 0; w < warmup; ++w)
    launchFwd();
  row.fwd = timeRuns(reps, launchFwd);
  return row;
}

/// Median and min per Program::launch of a kernel storing one element:
/// into a field, or into an ndarray argument (`ndarray`).
Timing launchOverhead(const Target &t, int launches, bool ndarray) {
  const char *text = ndarray ? R"(kernel @tiny(%z: ndarray<f32, 1>) {
  parallel for %i = 0 to 1 {
    %c = const 1.0 : f32
    store %z[%i], %c
  }
}
)"
                             : R"(field @z : f32[1]

kernel @tiny() {
  parallel for %i = 0 to 1 {
    %c = const 1.0 : f32
    store @z[%i], %c
  }
}
)";
  std::unique_ptr<qd::Module> module =
      check(qd::parseModule(text, {.filename = "tiny.qd"}), "parse");
  std::unique_ptr<qd::Program> p = check(qd::Program::create(*module), "Program::create");
  qd::Buffer z = check(qd::Buffer::create(qd::ScalarType::F32, {1}), "Buffer::create");
  qd::NdarrayArg za{&z};
  std::vector<qd::LaunchArg> args;
  if (ndarray)
    args.push_back(qd::LaunchArg::ndarray(&za));
  auto launch = [&] { check(p->launch("tiny", args, *t.backend), t.label + " trivial launch"); };
  for (int w = 0; w < 5; ++w)
    launch();
  return timeRuns(launches, launch);
}

/// Why no target runs: each unavailable one's reason.
std::string whyNoTarget(const std::vector<Target> &targets) {
  std::string why;
  for (const Target &t : targets) // the backends' messages begin with their names
    why +=
        fmt::format("{}{}{}", why.empty() ? "" : "; ",
                    t.unavailable.starts_with(t.kind + ":") ? "" : t.label + ": ", t.unavailable);
  return why;
}

/// The cases --only and --shapes select, each size capped by --max-n.
std::vector<Case> makeCases(const Options &o) {
  std::vector<Case> cases;
  for (Case c : {Case{"a", int64_t(1) << 20}, Case{"a", int64_t(1) << 24},
                 Case{"b", int64_t(1) << 22}, Case{"c", int64_t(1) << 20}}) {
    if (o.only.find(c.key) == std::string::npos)
      continue;
    if (o.maxN > 0)
      c.n = std::min(c.n, o.maxN);
    for (KernelShape shape : o.shapes) {
      c.shape = shape;
      if (std::none_of(cases.begin(), cases.end(), [&](const Case &d) { return d.same(c); }))
        cases.push_back(c);
    }
  }
  return cases;
}

/// Prints the sizes of the cases, once per workload and size.
void printSizes(const std::vector<Case> &cases) {
  std::string sizes;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case &c = cases[i];
    if (i > 0 && cases[i - 1].key == c.key && cases[i - 1].n == c.n)
      continue; // the same size in another shape
    sizes += fmt::format("{}{} N = {} ({}{})", sizes.empty() ? "" : ", ", title(c.key),
                         sizeName(c.n), c.n, c.key == "c" ? " chains" : "");
  }
  fmt::print("  sizes: {}\n", sizes);
}

/// Measures and prints each running target's launch overhead (into a field
/// and into an ndarray); returns the medians for the last line.
std::string measureOverheads(std::vector<Target> &targets, const std::vector<size_t> &running) {
  std::string overheads, overheadMedians;
  for (size_t t : running)
    for (bool nd : {false, true}) {
      const Timing ot = launchOverhead(targets[t], 200, nd);
      if (!nd)
        targets[t].overhead = ot;
      const char *sep = overheads.empty() ? "" : ", ";
      std::string label = fmt::format("{} {}", targets[t].label, nd ? "ndarray" : "field");
      overheads += fmt::format("{}{} {:.1f} us (min {:.1f} us)", sep, label, 1e3 * ot.medianMs,
                               1e3 * ot.minMs);
      overheadMedians += fmt::format("{}{} {:.1f} us", sep, label, 1e3 * ot.medianMs);
    }
  fmt::print("  launch overhead: trivial kernel storing 1 element (into a field; into an ndarray "
             "argument), median per Program::launch over 200 launches: {}\n",
             overheads);
  return overheadMedians;
}

/// What the table prints below itself: notes on the peers' results, and
/// the targets each row is judged against.
struct TableNotes {
  std::vector<std::string> notes, goals;
  std::set<std::string> peerNotes;
};

/// The peers' cells of a row (kPeerImpls order); a case's first row notes
/// a peer's wrong gradient sum and its compile time.
std::vector<std::string> peerCells(const QdRow &r, const Peers &peers, bool firstOfCase,
                                   TableNotes &tn) {
  std::vector<std::string> cells;
  for (const auto &impl : kPeerImpls) {
    const PeerRow *pr = peers.find(r.c.key, r.c.n, impl);
    if (!pr) {
      cells.push_back("-");
      continue;
    }
    std::string cell = fmtMs(pr->medianMs);
    if (pr->gradSum && relErr(*pr->gradSum, r.refSum, 0) > kTolerance) {
      cell += "!";
      if (firstOfCase)
        tn.notes.push_back(fmt::format("{} N = {}: {} grad sum {:.9g} is off the reference {:.9g} "
                                       "(rel err {:.1e})",
                                       title(r.c.key), sizeName(r.c.n), impl, *pr->gradSum,
                                       r.refSum, relErr(*pr->gradSum, r.refSum, 0)));
    }
    if (pr->compileS && firstOfCase)
      tn.notes.push_back(fmt::format("{} N = {}: {} compile (first call) {:.1f} s", title(r.c.key),
                                     sizeName(r.c.n), impl, *pr->compileS));
    if (!pr->note.empty())
      tn.peerNotes.insert(fmt::format("{} {}: {}", title(r.c.key), impl, pr->note));
    cells.push_back(cell);
  }
  return cells;
}

/// The targets a row is judged against, with its numbers: CUDA (a) within
/// 1.3x of the local tape, 5x faster than JAX, its heap at 2^24 under
/// 128 MiB; Vulkan within 1.5x of the local tape on every workload; every
/// other shape within 1.05x of the first. Ends in ';' when there is one.
std::string goalsOf(const QdRow &r, const Target &t, const std::vector<QdRow> &rows,
                    const Options &o, const PeerRow *local, const PeerRow *jax) {
  const bool timed = r.gradKernel.medianMs > 0;
  std::string g = fmt::format("{} N = {}, {}:", title(r.c), sizeName(r.c.n), t.label);
  double vsLocal = local ? r.grad.medianMs / local->medianMs : 0;
  if (t.kind == "cuda" && r.c.key == "a") {
    // The peer's time is its kernel alone (cudaEvents): so is qd's where
    // the backend timed it, the launch overhead being reported apart.
    double kernVsLocal = timed && local ? r.gradKernel.medianMs / local->medianMs : vsLocal;
    if (local)
      g += fmt::format(" qd/local tape {:.2f}x{} (target <= 1.3x{});", kernVsLocal,
                       timed ? fmt::format(" kernel, {:.2f}x per launch", vsLocal) : "",
                       kernVsLocal <= 1.3 ? "" : ", MISSED");
    if (jax)
      g += fmt::format(" JAX/qd {:.1f}x (target >= 5x{});", jax->medianMs / r.grad.medianMs,
                       jax->medianMs / r.grad.medianMs >= 5 ? "" : ", MISSED");
    if (r.c.n == int64_t(1) << 24)
      g += fmt::format(" heap {:.1f} MiB (target < 128 MiB{});", double(r.heapBytes) / 1048576.0,
                       r.heapBytes < (int64_t(128) << 20) ? "" : ", MISSED");
  } else if (t.kind == "vulkan" && local) {
    double kernVsLocal = timed ? r.gradKernel.medianMs / local->medianMs : vsLocal;
    g += fmt::format(" qd/local tape {:.2f}x{} (target <= 1.5x{});", kernVsLocal,
                     timed ? fmt::format(" kernel, {:.2f}x per launch", vsLocal) : "",
                     kernVsLocal <= 1.5 ? "" : ", MISSED");
  }
  // Kernel time, and the launch overhead on top of it, against the first
  // shape on the same backend.
  for (const QdRow &f : rows)
    if (r.c.shape != o.shapes.front() && f.target == r.target && f.c.key == r.c.key &&
        f.c.n == r.c.n && f.c.shape == o.shapes.front()) {
      double ratio =
          timed ? r.gradKernel.medianMs / f.gradKernel.medianMs : r.grad.medianMs / f.grad.medianMs;
      g += fmt::format(" {}/{} {:.2f}x{} (target <= 1.05x{});", shapeName(r.c.shape),
                       shapeName(f.c.shape), ratio, timed ? " kernel" : "",
                       ratio <= 1.05 ? "" : ", MISSED");
      if (timed) // what a launch costs beyond its kernels
        g += fmt::format(" launch overhead {:.0f} us ({} {:.0f} us);",
                         1e3 * (r.grad.medianMs - r.gradKernel.medianMs), shapeName(f.c.shape),
                         1e3 * (f.grad.medianMs - f.gradKernel.medianMs));
    }
  return g;
}

/// The table: one row per case and backend, the peers' cells on each
/// (`running.front()`: the target the others are compared with).
TableNotes printTable(const Options &o, const std::vector<Target> &targets,
                      const std::vector<size_t> &running, const std::vector<QdRow> &rows,
                      const Peers &peers) {
  const std::vector<std::string> heads = {"local", "global", "JAX", "torch", "t.compile"};
  const std::string baseHead = "qd/" + targets[running.front()].label;
  size_t labelWidth = 7, baseWidth = std::max<size_t>(8, baseHead.size());
  for (size_t t : running)
    labelWidth = std::max(labelWidth, targets[t].label.size());
  fmt::print("\n{:<22} {:>5} {:<{}} {:>5} {:>8} {:>17} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} "
             "{:>9} {:>10} {:>{}} {:>7} {:>8} {:>9}\n",
             "workload", "N", "backend", labelWidth, "check", "qd fwd", "qd grad (min)", "kernel",
             heads[0], heads[1], heads[2], heads[3], heads[4], "qd/local", "kern/local", baseHead,
             baseWidth, "JAX/qd", "heap MiB", "grid thr");
  TableNotes tn;
  for (size_t i = 0; i < rows.size(); ++i) {
    const QdRow &r = rows[i];
    const Target &t = targets[r.target];
    const bool firstOfCase = i == 0 || rows[i - 1].c.key != r.c.key || rows[i - 1].c.n != r.c.n;
    std::vector<std::string> cells = peerCells(r, peers, firstOfCase, tn);
    const PeerRow *local = peers.find(r.c.key, r.c.n, "local_tape");
    const PeerRow *jax = peers.find(r.c.key, r.c.n, "jax");
    const QdRow *baseRow = nullptr;
    for (const QdRow &b : rows)
      if (b.target == running.front() && b.c.same(r.c))
        baseRow = &b;
    std::string qdLocal = local ? fmt::format("{:.2f}x", r.grad.medianMs / local->medianMs) : "-";
    std::string qdBase = baseRow && baseRow != &r
                             ? fmt::format("{:.2f}x", r.grad.medianMs / baseRow->grad.medianMs)
                             : "-";
    std::string jaxQd = jax ? fmt::format("{:.1f}x", jax->medianMs / r.grad.medianMs) : "-";
    const bool timed = r.gradKernel.medianMs > 0;
    std::string kernelCell = timed ? fmtMs(r.gradKernel.medianMs) : "-";
    std::string kernLocal =
        timed && local ? fmt::format("{:.2f}x", r.gradKernel.medianMs / local->medianMs) : "-";
    fmt::print("{:<22} {:>5} {:<{}} {:>5} {:>8} {:>17} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} "
               "{:>9} {:>10} {:>{}} {:>7} {:>8.1f} {:>9}\n",
               title(r.c), sizeName(r.c.n), t.label, labelWidth, r.pass ? "PASS" : "FAIL",
               fmtMs(r.fwd.medianMs),
               fmt::format("{} ({})", fmtMs(r.grad.medianMs), fmtMs(r.grad.minMs)), kernelCell,
               cells[0], cells[1], cells[2], cells[3], cells[4], qdLocal, kernLocal, qdBase,
               baseWidth, jaxQd, double(r.heapBytes) / 1048576.0, r.gridThreads);
    std::string g = goalsOf(r, t, rows, o, local, jax);
    if (g.back() == ';')
      tn.goals.push_back(g);
  }
  fmt::print("\n  (ms: median over the reps; qd: per Program::launch on the backend of the row, "
             "kernel: the gradient's kernels alone on the GPU (CUDA events, Vulkan timestamps), "
             "kern/local: that "
             "over the local tape, whose time is its kernel's; "
             "peers: their own timing, see bench/run-gpu.sh; '-': not run, '!': gradient sum off "
             "the reference; {}: the row's gradient time over the {} row's)\n",
             baseHead, targets[running.front()].label);
  return tn;
}

/// Below the table: each row's check and resources, the notes, what did
/// not run, and the targets.
void printDetails(const std::vector<Target> &targets, const std::vector<QdRow> &rows,
                  const Peers &peers, const TableNotes &tn) {
  for (const QdRow &r : rows) {
    fmt::print("  {} N = {}, {}: {}; grad sum {:.9g} (ref {:.9g}, rel err {:.1e}), max element "
               "rel err {:.1e}; {}\n",
               title(r.c), sizeName(r.c.n), targets[r.target].label, r.pass ? "PASS" : "FAIL",
               r.qdSum, r.refSum, r.sumErr, r.maxElemErr, r.samples);
    if (!r.stable)
      fmt::print("      FAIL: the gradient changed over the timed launches (which ran with the "
                 "output adjoint the first launch cleared)\n");
    fmt::print("      first gradient launch (compiles) {:.1f} ms; adstack heap {} bytes on {} "
               "grid threads ({} bytes per thread); host field storage {:.1f} MiB\n",
               r.firstLaunchMs, r.heapBytes, r.gridThreads,
               r.gridThreads ? r.heapBytes / r.gridThreads : 0, double(r.hostBytes) / 1048576.0);
  }
  for (const auto &n : tn.notes)
    fmt::print("  {}\n", n);
  for (const auto &n : tn.peerNotes)
    fmt::print("  {}\n", n);
  for (const auto &impl : kPeerImpls)
    if (auto it = peers.unavailable.find(impl); it != peers.unavailable.end())
      fmt::print("  {}: n/a ({})\n", impl, it->second);
  for (const Target &t : targets)
    if (!t.backend)
      fmt::print("  qd {}: n/a ({})\n", t.label, t.unavailable);
  if (!tn.goals.empty()) {
    fmt::print("\ntargets:\n");
    for (const auto &g : tn.goals)
      fmt::print("  {}\n", g);
  }
}

} // namespace

/// The rows of `--json` (BenchRecord.h): per qd row workload, n, shape,
/// impl (qd-cuda, qd-vulkan, ...), grad_ms and grad_min_ms (per
/// Program::launch), kernel_ms (the kernels alone, where timed), fwd_ms,
/// heap_bytes, grid_threads, pass; per peer result workload, n, impl,
/// grad_ms; per target its launch overhead (impl "overhead:<label>", ms).
void recordRows(BenchRecord &record, const std::vector<Target> &targets,
                const std::vector<QdRow> &rows, const Peers &peers) {
  for (const QdRow &r : rows) {
    nlohmann::json row = {{"workload", r.c.key},
                          {"n", r.c.n},
                          {"shape", std::string(shapeName(r.c.shape))},
                          {"impl", "qd-" + targets[r.target].label},
                          {"grad_ms", r.grad.medianMs},
                          {"grad_min_ms", r.grad.minMs},
                          {"fwd_ms", r.fwd.medianMs},
                          {"heap_bytes", r.heapBytes},
                          {"grid_threads", r.gridThreads},
                          {"pass", r.pass}};
    if (r.gradKernel.medianMs > 0)
      row["kernel_ms"] = r.gradKernel.medianMs;
    record.add(std::move(row));
  }
  for (const auto &[key, p] : peers.rows)
    record.add({{"workload", std::get<0>(key)},
                {"n", std::get<1>(key)},
                {"impl", std::get<2>(key)},
                {"grad_ms", p.medianMs}});
  for (const Target &t : targets)
    if (t.backend)
      record.add({{"impl", "overhead:" + t.label}, {"ms", t.overhead.medianMs}});
}

static int runBench(int argc, char **argv) {
  const Options o = parseOptions(argc, argv);
  std::vector<Target> targets = makeTargets(o);
  std::vector<size_t> running; // indices of the targets that run
  for (size_t t = 0; t < targets.size(); ++t)
    if (targets[t].backend)
      running.push_back(t);
  if (running.empty()) {
    fmt::print("qd-bench-gpu: no GPU to run on: {}\n"
               "qd-bench-gpu: nothing measured (run it on a machine with an NVIDIA GPU and its "
               "driver; see bench/run-gpu.sh)\n",
               whyNoTarget(targets));
    return 0;
  }
  Peers peers;
  for (const auto &f : o.peerFiles)
    loadPeers(peers, f);
  std::vector<Case> cases = makeCases(o);

  double start = nowMs();
  for (const Target &t : targets)
    if (t.backend)
      fmt::print("qd-bench-gpu: {}: {}\n", t.label, t.machine);
    else
      fmt::print("qd-bench-gpu: {}: n/a ({})\n", t.label, t.unavailable);
  fmt::print("  gradient of y (out) with adjoint 1 into zeroed input adjoints; median (min) of "
             "{} Program::launch calls after {} warm-up, wall-clock ms\n",
             o.reps, o.warmup);
  printSizes(cases);
  std::string overheadMedians = measureOverheads(targets, running);
  for (const auto &l : peers.info)
    fmt::print("  peers: {}\n", l);

  std::map<std::string, Reference> refs;
  std::vector<QdRow> rows;
  for (const Case &c : cases) {
    if (!refs.count(c.key))
      refs.emplace(c.key, reference(c.key));
    for (size_t t : running) {
      fmt::print(stderr, "qd-bench-gpu: {} N = {} on {} ...\n", title(c), sizeName(c.n),
                 targets[t].label);
      rows.push_back(runCase(c, t, targets[t], refs.at(c.key), o.warmup, o.reps));
    }
  }
  TableNotes tn = printTable(o, targets, running, rows, peers);
  BenchRecord record("gpu", argc, argv);
  record.setPath(o.json);
  std::string machines;
  for (size_t t : running)
    machines +=
        fmt::format("{}{}: {}", machines.empty() ? "" : "; ", targets[t].label, targets[t].machine);
  record.setMachine(machines);
  recordRows(record, targets, rows, peers);
  record.write();
  printDetails(targets, rows, peers, tn);
  bool allPass = std::all_of(rows.begin(), rows.end(), [](const QdRow &r) { return r.pass; });
  fmt::print("launch overhead {} (median); total benchmark time {:.1f} s; {}\n", overheadMedians,
             (nowMs() - start) / 1e3, allPass ? "all gradients PASS" : "SOME GRADIENTS FAIL");
  return allPass ? 0 : 1;
}

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-gpu", argc, argv, runBench);
}
