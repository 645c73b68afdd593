//===- SimsBench.cpp - Simulations: forward and gradient per time step -----===//
//
// qd-bench-sims: the six simulations of bench/workloads (mass_spring, mpm,
// wave, smoke, billiards, newton; one kernel launch per time step, the
// gradient kernels in reverse step order) on qd's backends at one or more
// sizes (small, large: the CPU's; gpu: 16 to 64 times the large work),
// against peers. Per simulation, size and backend:
//
//   fwd, rev    the forward launches of one run, and the gradient launches
//               after it, per step; grad = fwd + rev (one gradient of the
//               loss, as the peers time theirs); median (and min) of --reps
//               runs after --warmup. Before each run @reset (SimRun::
//               resetOnDevice) puts the initial state back and seeds the
//               adjoints on the backend, untimed, so that a GPU's copies
//               stay on the device. --async queues the launches
//               (LaunchOptions::async) and ends each timed phase with
//               Backend::synchronize.
//   compile     the first launch of @step_grad less one steady launch
//   heap        the largest adstack heap a launch used
//   tape        the copies a qd::LaunchTape keeps over the same run (its
//               peak; one more untimed run, where the arrays and adjoints
//               take at most --tape-max-mib: the tape copies an array
//               where a step writes a row an earlier gradient reads, and
//               hashes what it keeps on the host after every launch)
//   data        the arrays and their adjoints
//   loss, and the sum and L2 norm of d loss / d (the parameter's initial
//               contents) (SimRun::parameterGradient), from the first run;
//               a row is UNSTABLE when the timed runs end elsewhere.
//
// Peers (--peers FILE, repeatable; bench/run-sims-gpu.sh writes them from
// bench/gpu/sims_peers.cu and bench/gpu/sims_framework_peers.py; the
// format of GpuPeers.h): hand-written CUDA ("cuda": mass_spring, mpm),
// JAX ("jax", "jax_cpu"), PyTorch eager ("torch" on CUDA, "torch_cpu"),
// keyed by simulation and n (the first array's second axis). Without
// --peers, a run with the cpu backend runs the PyTorch CPU peer itself
// (/usr/bin/python3 bench/gpu/sims_framework_peers.py --frameworks torch
// --device cpu) unless --no-torch. The table (SimsTable.h) sets each
// peer's gradient time beside qd's, with qd/cuda, qd/jax, qd/torch.
//
// Usage: qd-bench-sims [--backends cpu|cuda|vulkan|interp,...] [--backend-options K=V,...]
//                      [--sizes small,large,gpu] [--steps 32] [--reps 3] [--warmup 1]
//                      [--only mass_spring,mpm,...] [--peers FILE]... [--no-torch]
//                      [--async] [--rtol 2e-3] [--tape-max-mib 512] [--json FILE]
//                      [--dump SIM]
// (--backend and --size are --backends and --sizes of one.) Exit status 1
// when a case fails, is UNSTABLE or a peer's loss or gradient is OFF.
// Rows of --json: sim, size, n, steps, backend, fwd_ms, rev_ms, grad_ms
// (median), fwd_min_ms, grad_min_ms, compile_ms, heap_bytes, tape_bytes,
// data_bytes, loss, grad_sum, grad_norm, stable, and per peer X of the row
// X_grad_ms, X_fwd_ms, X_loss, X_rel_diff; `error` for a case that failed,
// `tape_error` for a run on the tape that failed (the times stand).
// --dump SIM prints the module, the CPU's lanes per task and the optimised
// LLVM IR of @step and @step_grad, and runs nothing else.
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "BenchRecord.h"
#include "SimsTable.h"

#include "SimRun.h"
#include "Simulation.h"

#include "qd/ir/Printer.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

using qdbench::die;
using qdbench::SimRow;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> backends = {"cpu"};
  std::string backendOptions;
  std::vector<qdsim::SimSize> sizes = {qdsim::SimSize::Small};
  int steps = 32, reps = 3, warmup = 1;
  std::vector<std::string> only, peerFiles;
  bool torch = true, async = false;
  double rtol = 2e-3;
  int64_t tapeMaxMib = 512;
  std::string json;
  std::string dump;
};

template <typename F> double timedMs(F &&body) {
  auto start = Clock::now();
  body();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void check(const absl::Status &status) {
  if (!status.ok())
    die(std::string(status.message()));
}

/// Sum and L2 norm.
std::array<double, 2> checksum(const std::vector<double> &g) {
  double sum = 0, squares = 0;
  for (double v : g) {
    sum += v;
    squares += v * v;
  }
  return {sum, std::sqrt(squares)};
}

/// The first run (which compiles) and its results, then the timed runs.
void timeRuns(qdsim::SimRun &r, qd::Backend &b, const Options &o, SimRow &row) {
  check(r.forwardAndGradient(b));
  check(b.synchronize());
  row.loss = r.loss();
  std::tie(row.gradSum, row.gradNorm) = std::apply(
      [](double s, double n) {
        return std::pair{s, n};
      },
      checksum(r.parameterGradient()));
  std::vector<double> fwd, rev, grad;
  for (int k = 0; k < o.warmup + o.reps; ++k) {
    check(r.resetOnDevice(b));
    check(b.synchronize());
    const double f = timedMs([&] {
      check(r.runForward(b));
      check(b.synchronize());
    });
    const double v = timedMs([&] {
      check(r.runReverse(b));
      check(b.synchronize());
    });
    if (k < o.warmup)
      continue;
    fwd.push_back(f / o.steps);
    rev.push_back(v / o.steps);
    grad.push_back((f + v) / o.steps);
  }
  row.fwd = qdbench::summarize(fwd);
  row.rev = qdbench::summarize(rev);
  row.grad = qdbench::summarize(grad);
  auto [sum, norm] = checksum(r.parameterGradient());
  const double tol = 1e-4;
  row.stable =
      std::fabs(r.loss() - row.loss) <= tol * std::fabs(row.loss) &&
      std::fabs(sum - row.gradSum) <= tol * std::max(std::fabs(row.gradSum), row.gradNorm) &&
      std::fabs(norm - row.gradNorm) <= tol * row.gradNorm;
}

/// The row of a case, before it runs.
SimRow caseRow(const qdsim::Simulation &sim, qdsim::SimSize size, const std::string &backend,
               const Options &o) {
  SimRow row;
  row.sim = sim.name();
  row.parameter = sim.parameter();
  row.backend = backend;
  row.size = size;
  row.n = sim.arrays(1).front().shape.at(1);
  row.steps = o.steps;
  return row;
}

SimRow measure(const std::string &name, qdsim::SimSize size, const std::string &backendName,
               const Options &o) {
  std::unique_ptr<qdsim::Simulation> sim = qdsim::makeSimulation(name, size);
  SimRow row = caseRow(*sim, size, backendName, o);
  auto options = qd::BackendOptions::parse(o.backendOptions);
  check(options.status());
  auto backend = qd::createBackend(backendName, *options);
  check(backend.status());
  auto run = qdsim::SimRun::create(*sim, o.steps);
  check(run.status());
  qdsim::SimRun &r = **run;
  qd::LaunchOptions launch;
  launch.async = o.async;
  r.setLaunchOptions(launch);
  timeRuns(r, **backend, o, row);
  row.compileMs = std::max(0.0, r.firstLaunchSeconds("step_grad") * 1e3 - row.rev.medianMs);
  row.heapBytes = r.maxAdStackHeapBytes();
  row.dataBytes = r.arrayBytes();
  row.tapeBytes = -1;
  if (row.dataBytes <= (o.tapeMaxMib << 20)) {
    qd::TapeMemory memory;
    absl::Status status = r.forwardAndGradientOnTape(**backend, &memory);
    if (status.ok())
      status = (*backend)->synchronize();
    if (status.ok())
      row.tapeBytes = static_cast<int64_t>(memory.peakBytes);
    else // the times stand; the row says why the tape has no figure
      row.tapeError = std::string(status.message());
  }
  return row;
}

/// bench/gpu/sims_framework_peers.py's PyTorch CPU results, into `peers`.
void runTorchCpu(const Options &o, const std::vector<std::string> &sims, qdbench::Peers &peers) {
  std::vector<std::string> sizes;
  for (qdsim::SimSize s : o.sizes)
    sizes.emplace_back(qdsim::sizeName(s));
  std::string command = fmt::format(
      "/usr/bin/python3 {}/bench/gpu/sims_framework_peers.py --frameworks torch --device cpu "
      "--steps {} --sizes {} --reps {} --warmup {} --only {}",
      QD_SOURCE_DIR, o.steps, fmt::join(sizes, ","), o.reps, o.warmup, fmt::join(sims, ","));
  std::string out;
  int status = -1;
  if (FILE *pipe = popen(command.c_str(), "r")) {
    std::array<char, 4096> buf;
    while (size_t n = fread(buf.data(), 1, buf.size(), pipe))
      out.append(buf.data(), n);
    status = pclose(pipe);
  }
  if (status != 0) {
    peers.info.push_back("sims_framework_peers.py (PyTorch on the CPU) failed: " + command);
    return;
  }
  qdbench::loadPeersText(peers, out, "sims_framework_peers.py");
}

[[noreturn]] void usage(const std::string &why) {
  die(why + "; usage: qd-bench-sims [--backends a,b] [--backend-options K=V,...] "
            "[--sizes small,large,gpu] [--steps N] [--reps N] [--warmup N] [--only a,b] "
            "[--peers FILE]... [--no-torch] [--async] [--rtol X] [--tape-max-mib N] "
            "[--json FILE] [--dump SIM]");
}

void parseSizes(Options &o, const std::string &list) {
  o.sizes.clear();
  for (const std::string &s : qdbench::splitList(list)) {
    std::optional<qdsim::SimSize> size = qdsim::parseSimSize(s);
    if (!size)
      usage("--sizes takes small, large and gpu, not '" + s + "'");
    o.sizes.push_back(*size);
  }
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return qdbench::optionValue(argc, argv, i); };
    if (a == "--backend" || a == "--backends")
      o.backends = qdbench::splitList(value());
    else if (a == "--backend-options")
      o.backendOptions = value();
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--reps")
      o.reps = std::max(1, std::stoi(value()));
    else if (a == "--warmup")
      o.warmup = std::max(0, std::stoi(value()));
    else if (a == "--size" || a == "--sizes")
      parseSizes(o, value());
    else if (a == "--only")
      o.only = qdbench::splitList(value());
    else if (a == "--peers")
      o.peerFiles.push_back(value());
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--async")
      o.async = true;
    else if (a == "--rtol")
      o.rtol = std::stod(value());
    else if (a == "--tape-max-mib")
      o.tapeMaxMib = std::stoll(value());
    else if (a == "--json")
      o.json = value();
    else if (a == "--dump")
      o.dump = value();
    else
      usage("unknown option '" + a + "'");
  }
  if (o.steps < 1)
    usage("--steps takes a positive count");
  if (o.backends.empty() || o.sizes.empty())
    usage("--backends and --sizes take at least one");
  for (const std::string &s : o.only)
    if (!qdsim::makeSimulation(s, qdsim::SimSize::Small))
      usage("--only: no simulation '" + s + "'");
  return o;
}

/// --dump SIM: the module with its gradient kernels, then per kernel on the
/// CPU backend the lanes of each parallel task (and why a task has none)
/// and the optimised LLVM IR.
int dumpSim(const Options &o) {
  std::unique_ptr<qdsim::Simulation> sim = qdsim::makeSimulation(o.dump, o.sizes.front());
  if (!sim)
    die("--dump: no simulation '" + o.dump + "'");
  auto run = qdsim::SimRun::create(*sim, o.steps);
  check(run.status());
  auto options = qd::BackendOptions::parse(o.backendOptions);
  check(options.status());
  auto backend = qd::createBackend("cpu", *options);
  check(backend.status());
  auto *cpu = dynamic_cast<qd::CpuBackend *>(backend->get());
  check((*run)->forwardAndGradient(**backend));
  fmt::print(";;; module\n{}\n", qd::printModule((*run)->module()));
  for (std::string_view name : {"step", "step_grad"}) {
    const qd::Kernel &kernel = (*run)->kernel(name);
    auto layout = cpu->layout(kernel);
    check(layout.status());
    fmt::print(";;; @{}: parallel tasks\n", name);
    for (size_t k = 0; k < (*layout)->tasks.size(); ++k)
      fmt::print(";;;   task {}: {} lanes {}\n", k, (*layout)->tasks[k].lanes,
                 (*layout)->tasks[k].whyScalar);
    auto ir = cpu->llvmIR(kernel);
    check(ir.status());
    fmt::print(";;; @{}: optimised LLVM IR\n{}\n", name, *ir);
  }
  return 0;
}

int benchSims(int argc, char **argv) {
  qdbench::BenchRecord record("sims", argc, argv);
  Options o = parse(argc, argv);
  record.setPath(o.json);
  qd::registerAllBackends();
  if (!o.dump.empty())
    return dumpSim(o);
  std::vector<std::string> sims = o.only.empty() ? qdsim::simulationNames() : o.only;
  qdbench::Peers peers;
  for (const std::string &f : o.peerFiles)
    qdbench::loadPeers(peers, f);
  if (o.peerFiles.empty() && o.torch &&
      std::find(o.backends.begin(), o.backends.end(), "cpu") != o.backends.end())
    runTorchCpu(o, sims, peers);
  std::vector<std::string> sizes;
  for (qdsim::SimSize s : o.sizes)
    sizes.emplace_back(qdsim::sizeName(s));
  fmt::print("qd-bench-sims: backends {}, sizes {}, {} steps, median of {} runs after {} warm-up"
             "{}\n",
             fmt::join(o.backends, ","), fmt::join(sizes, ","), o.steps, o.reps, o.warmup,
             o.async ? ", asynchronous launches" : "");
  std::vector<SimRow> rows;
  for (qdsim::SimSize size : o.sizes)
    for (const std::string &name : sims)
      for (const std::string &backend : o.backends) {
        fmt::print(stderr, "qd-bench-sims: {} {} on {} ...\n", name, qdsim::sizeName(size),
                   backend);
        try {
          rows.push_back(measure(name, size, backend, o));
        } catch (const qdbench::BenchFailure &f) {
          SimRow row = caseRow(*qdsim::makeSimulation(name, size), size, backend, o);
          row.error = f.message;
          rows.push_back(row);
        }
      }
  bool ok = qdbench::printSimTable(rows, peers, o.rtol, record);
  record.write();
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-sims", argc, argv, benchSims);
}
