//===- SimsBench.cpp - Simulations: forward and gradient per time step -----===//
//
// qd-bench-sims: the six simulations of bench/workloads (mass_spring, mpm,
// wave, smoke, billiards, newton; one kernel launch per time step, the
// gradient kernels in reverse step order) on one backend. Per simulation:
//
//   fwd/step    the forward launches of one run / steps (minimum over --reps)
//   grad/step   the gradient launches of one run / steps (after a forward;
//               the adjoints are zeroed and seeded on the host before the
//               clock starts: on a GPU backend the times include uploading
//               what the host changed)
//   compile     the first launch of @step_grad less one steady launch: its
//               compilation (on the interpreter: nothing)
//   heap        the largest adstack heap a launch used (Backend::
//               lastAdStackHeapUsage; the interpreter has none)
//   loss        the loss of the run
//
// and PyTorch eager on the CPU (bench/torch_sims.py, run by /usr/bin/python3
// in the same run, float32, same data and operation order) for mass_spring,
// wave and smoke: its forward (no autograd) and backward per step, its loss,
// and the ratios torch / qd (above 1: qd is faster).
//
// Usage: qd-bench-sims [--backend interp|cpu|cuda|vulkan] [--backend-options K=V,...]
//                      [--steps 32] [--size small|large] [--reps 3]
//                      [--only mass_spring,mpm,...] [--no-torch] [--json FILE]
//                      [--dump SIM]
// Rows of --json: sim, size, steps, backend, fwd_ms, grad_ms (per step),
// compile_ms, heap_bytes, loss, and torch_fwd_ms, torch_grad_ms, torch_loss
// where PyTorch ran.
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "BenchRecord.h"

#include "SimRun.h"
#include "Simulation.h"

#include "qd/ir/Printer.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using qdbench::die;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string backend = "cpu", backendOptions;
  int steps = 32, reps = 3;
  qdsim::SimSize size = qdsim::SimSize::Small;
  std::vector<std::string> only;
  bool torch = true;
  std::string json;
  std::string dump;
};

struct Row {
  std::string sim;
  double fwdMs = 0, gradMs = 0, compileMs = 0, loss = 0;
  int64_t heapBytes = 0;
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

Row measure(const std::string &name, const Options &o) {
  std::unique_ptr<qdsim::Simulation> sim = qdsim::makeSimulation(name, o.size);
  auto options = qd::BackendOptions::parse(o.backendOptions);
  check(options.status());
  auto backend = qd::createBackend(o.backend, *options);
  check(backend.status());
  auto run = qdsim::SimRun::create(*sim, o.steps);
  check(run.status());
  qdsim::SimRun &r = **run;
  Row row{name};
  check(r.forward(**backend)); // compiles @step and @loss
  check(r.runGradient(**backend));
  row.fwdMs = row.gradMs = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < o.reps; ++rep) {
    r.reset();
    row.fwdMs = std::min(row.fwdMs, timedMs([&] { check(r.runForward(**backend)); }));
    r.seedAdjoints();
    row.gradMs = std::min(row.gradMs, timedMs([&] { check(r.runReverse(**backend)); }));
  }
  row.fwdMs /= o.steps;
  row.gradMs /= o.steps;
  row.compileMs = std::max(0.0, r.firstLaunchSeconds("step_grad") * 1e3 - row.gradMs);
  row.heapBytes = r.maxAdStackHeapBytes();
  row.loss = r.loss();
  return row;
}

/// bench/torch_sims.py's JSON for `sims` (those it runs), or why not.
nlohmann::json runTorch(const Options &o, const std::vector<std::string> &sims) {
  std::string command =
      fmt::format("/usr/bin/python3 {}/bench/torch_sims.py --steps {} --size {} "
                  "--reps {} --only {}",
                  QD_SOURCE_DIR, o.steps, o.size == qdsim::SimSize::Small ? "small" : "large",
                  o.reps, fmt::join(sims, ","));
  std::string out;
  if (FILE *pipe = popen(command.c_str(), "r")) {
    std::array<char, 4096> buf;
    while (size_t n = fread(buf.data(), 1, buf.size(), pipe))
      out.append(buf.data(), n);
    if (pclose(pipe) != 0)
      return {{"available", false}, {"reason", "bench/torch_sims.py failed"}};
  }
  auto parsed = nlohmann::json::parse(out, nullptr, false);
  if (parsed.is_discarded())
    return {{"available", false}, {"reason", "bench/torch_sims.py printed no JSON"}};
  return parsed;
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--backend")
      o.backend = qdbench::optionValue(argc, argv, i);
    else if (a == "--backend-options")
      o.backendOptions = qdbench::optionValue(argc, argv, i);
    else if (a == "--steps")
      o.steps = std::stoi(qdbench::optionValue(argc, argv, i));
    else if (a == "--reps")
      o.reps = std::max(1, std::stoi(qdbench::optionValue(argc, argv, i)));
    else if (a == "--size") {
      std::string s = qdbench::optionValue(argc, argv, i);
      if (s != "small" && s != "large")
        die("--size takes small or large, not '" + s + "'");
      o.size = s == "small" ? qdsim::SimSize::Small : qdsim::SimSize::Large;
    } else if (a == "--only")
      o.only = qdbench::splitList(qdbench::optionValue(argc, argv, i));
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--json")
      o.json = qdbench::optionValue(argc, argv, i);
    else if (a == "--dump")
      o.dump = qdbench::optionValue(argc, argv, i);
    else
      die("unknown option '" + a +
          "'; usage: qd-bench-sims [--backend NAME] [--backend-options "
          "K=V,...] [--steps N] [--size small|large] [--reps N] [--only a,b] [--no-torch] "
          "[--json FILE] [--dump SIM]");
  }
  if (o.steps < 1)
    die("--steps takes a positive count");
  for (const std::string &s : o.only)
    if (!qdsim::makeSimulation(s, o.size))
      die("--only: no simulation '" + s + "'");
  return o;
}

std::string ratio(double torchMs, double qdMs) {
  return qdMs > 0 ? fmt::format("{:.2f}x", torchMs / qdMs) : "n/a";
}

/// --dump SIM: the module with its gradient kernels, then per kernel on the
/// CPU backend the lanes of each parallel task (and why a task has none)
/// and the optimised LLVM IR.
int dumpSim(const Options &o) {
  std::unique_ptr<qdsim::Simulation> sim = qdsim::makeSimulation(o.dump, o.size);
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
  std::vector<std::string> torchSims;
  for (const std::string &s : sims)
    if (s == "mass_spring" || s == "wave" || s == "smoke")
      torchSims.push_back(s);
  nlohmann::json torch =
      o.torch && !torchSims.empty() ? runTorch(o, torchSims) : nlohmann::json{{"available", false}};
  fmt::print("qd-bench-sims: backend {}, {} steps, size {}, min of {} reps; times per step\n",
             o.backend, o.steps, o.size == qdsim::SimSize::Small ? "small" : "large", o.reps);
  if (!torch.value("available", false) && o.torch)
    fmt::print("PyTorch: {}\n", torch.value("reason", std::string("not run")));
  fmt::print("{:<12} {:>10} {:>10} {:>11} {:>11} {:>13} | {:>10} {:>10} {:>8} {:>8} {:>13}\n",
             "sim", "fwd ms", "grad ms", "compile ms", "heap bytes", "loss", "torch fwd",
             "torch grad", "fwd x", "grad x", "torch loss");
  for (const std::string &name : sims) {
    Row row = measure(name, o);
    nlohmann::json j = {{"sim", name},
                        {"size", o.size == qdsim::SimSize::Small ? "small" : "large"},
                        {"steps", o.steps},
                        {"backend", o.backend},
                        {"fwd_ms", row.fwdMs},
                        {"grad_ms", row.gradMs},
                        {"compile_ms", row.compileMs},
                        {"heap_bytes", row.heapBytes},
                        {"loss", row.loss}};
    std::string peer = fmt::format("{:>10} {:>10} {:>8} {:>8} {:>13}", "-", "-", "-", "-", "-");
    if (torch.value("available", false) && torch.contains(name)) {
      const nlohmann::json &t = torch[name];
      double tf = t["fwd_ms"], tg = t["grad_ms"], tl = t["loss"];
      peer = fmt::format("{:>10.4f} {:>10.4f} {:>8} {:>8} {:>13.6g}", tf, tg, ratio(tf, row.fwdMs),
                         ratio(tg, row.gradMs), tl);
      j["torch_fwd_ms"] = tf;
      j["torch_grad_ms"] = tg;
      j["torch_loss"] = tl;
    }
    fmt::print("{:<12} {:>10.4f} {:>10.4f} {:>11.1f} {:>11} {:>13.6g} | {}\n", name, row.fwdMs,
               row.gradMs, row.compileMs, row.heapBytes, row.loss, peer);
    std::fflush(stdout);
    record.add(j);
  }
  record.write();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-sims", argc, argv, benchSims);
}
