//===- SimsTable.cpp - qd-bench-sims' table and record -------------------===//
#include "SimsTable.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace qdbench {
namespace {

/// The peers of a row, as the table's columns (cuda, jax, torch): on the
/// CPU and the interpreter, the frameworks on the CPU and no CUDA.
std::array<std::string, 3> peerImpls(const SimRow &r) {
  if (r.backend == "cpu" || r.backend == "interp")
    return {"", "jax_cpu", "torch_cpu"};
  return {"cuda", "jax", "torch"};
}

double relative(double a, double ref, double scale) {
  double e = std::fabs(a - ref) / std::max(scale, 1e-30);
  return std::isnan(e) ? INFINITY : e;
}

/// The largest relative difference of a peer's loss and gradient checksum
/// from qd's.
double peerError(const SimRow &r, const PeerRow &p) {
  double e = 0;
  if (p.loss)
    e = std::max(e, relative(*p.loss, r.loss, std::fabs(r.loss)));
  if (p.gradSum)
    e = std::max(e, relative(*p.gradSum, r.gradSum, std::max(std::fabs(r.gradSum), r.gradNorm)));
  if (p.gradNorm)
    e = std::max(e, relative(*p.gradNorm, r.gradNorm, r.gradNorm));
  return e;
}

/// The peer `impl`'s result for the row, if it ran the same steps.
const PeerRow *peerOf(const SimRow &r, const Peers &peers, const std::string &impl) {
  if (impl.empty())
    return nullptr;
  const PeerRow *p = peers.find(r.sim, r.n, impl);
  return p && (!p->steps || *p->steps == r.steps) ? p : nullptr;
}

std::string ratio(const SimRow &r, const PeerRow *p) {
  return p && p->medianMs > 0 ? fmt::format("{:.2f}x", r.grad.medianMs / p->medianMs) : "-";
}

std::string bytes(int64_t b) {
  if (b < 0)
    return "-";
  return b < 1 << 20 ? std::to_string(b) : fmt::format("{:.1f}M", double(b) / 1048576.0);
}

/// The row's check: UNSTABLE, OFF (a peer disagrees), ok, or '-' (no peer).
std::string checkCell(const SimRow &r, const Peers &peers, double rtol) {
  if (!r.stable)
    return "UNSTABLE";
  bool any = false;
  for (const std::string &impl : peerImpls(r))
    if (const PeerRow *p = peerOf(r, peers, impl)) {
      if (peerError(r, *p) > rtol)
        return "OFF";
      any = true;
    }
  return any ? "ok" : "-";
}

void printRow(const SimRow &r, const Peers &peers, double rtol) {
  std::string head =
      fmt::format("{:<11} {:<5} {:>7} {:<7}", r.sim, qdsim::sizeName(r.size), r.n, r.backend);
  if (!r.error.empty()) {
    fmt::print("{} n/a: {}\n", head, r.error);
    return;
  }
  std::array<std::string, 3> cells, ratios;
  const std::array<std::string, 3> impls = peerImpls(r);
  for (size_t k = 0; k < impls.size(); ++k) {
    const PeerRow *p = peerOf(r, peers, impls[k]);
    cells[k] = p ? fmtMs(p->medianMs) + (peerError(r, *p) > rtol ? "!" : "") : "-";
    ratios[k] = ratio(r, p);
  }
  fmt::print("{} {:>9} {:>9} {:>9} {:>8.0f} {:>8} {:>8} {:>8} {:>12.6g} {:>8} | {:>9} {:>9} {:>9} "
             "| {:>7} {:>7} {:>8}\n",
             head, fmtMs(r.fwd.medianMs), fmtMs(r.rev.medianMs), fmtMs(r.grad.medianMs),
             r.compileMs, bytes(r.heapBytes), bytes(r.tapeBytes), bytes(r.dataBytes), r.loss,
             checkCell(r, peers, rtol), cells[0], cells[1], cells[2], ratios[0], ratios[1],
             ratios[2]);
}

/// Below the table: qd's loss and checksum and each peer's, per row.
void printChecks(const std::vector<SimRow> &rows, const Peers &peers, double rtol) {
  fmt::print("\nchecks (loss; sum and norm of d loss / d the parameter's initial contents; a "
             "peer agrees within a relative {:.0e}):\n",
             rtol);
  for (const SimRow &r : rows) {
    if (!r.error.empty())
      continue;
    fmt::print("  {} {} {}: loss {:.7g}, d/d {}: sum {:.7g}, norm {:.7g}{}\n", r.sim,
               qdsim::sizeName(r.size), r.backend, r.loss, r.parameter, r.gradSum, r.gradNorm,
               r.stable ? "" : "; UNSTABLE: the timed runs ended elsewhere");
    if (!r.tapeError.empty())
      fmt::print("      the run on a LaunchTape failed: {}\n", r.tapeError);
    for (const std::string &impl : peerImpls(r)) {
      const PeerRow *p = impl.empty() ? nullptr : peers.find(r.sim, r.n, impl);
      if (!p)
        continue;
      if (p->steps && *p->steps != r.steps) {
        fmt::print("      {}: ran {} steps, not {}: not compared\n", impl, *p->steps, r.steps);
        continue;
      }
      const double e = peerError(r, *p);
      fmt::print("      {}: loss {:.7g}, sum {:.7g}, norm {:.7g}: rel diff {:.1e} {}; fwd {} ms, "
                 "grad {} ms per step{}{}\n",
                 impl, p->loss.value_or(NAN), p->gradSum.value_or(NAN), p->gradNorm.value_or(NAN),
                 e, e <= rtol ? "agrees" : "OFF", p->fwdMs ? fmtMs(*p->fwdMs) : "-",
                 fmtMs(p->medianMs),
                 p->memBytes ? fmt::format(", device memory {}", bytes(*p->memBytes)) : "",
                 p->compileS ? fmt::format(", first call (compiles) {:.1f} s", *p->compileS) : "");
    }
  }
}

/// The targets of issue 42 for a row that has the peers.
void printTargets(const std::vector<SimRow> &rows, const Peers &peers) {
  std::vector<std::string> lines;
  for (const SimRow &r : rows) {
    if (!r.error.empty())
      continue;
    std::string line;
    const std::array<std::string, 3> impls = peerImpls(r);
    const std::array<double, 3> bound = {1.3, 1.0, 1.0};
    for (size_t k = 0; k < impls.size(); ++k)
      if (const PeerRow *p = peerOf(r, peers, impls[k]); p && p->medianMs > 0) {
        double x = r.grad.medianMs / p->medianMs;
        bool met = k == 0 ? x <= bound[k] : x < bound[k];
        line += fmt::format(" qd/{} {:.2f}x (target {} {}x{});", impls[k], x, k == 0 ? "<=" : "<",
                            bound[k], met ? "" : ", MISSED");
      }
    if (r.compileMs >= 1000)
      line += fmt::format(" compile {:.0f} ms (target < 1000 ms, on the 2-core build machine);",
                          r.compileMs);
    if (!line.empty())
      lines.push_back(fmt::format("{} {} {}:{}", r.sim, qdsim::sizeName(r.size), r.backend, line));
  }
  if (lines.empty())
    return;
  fmt::print("\ntargets (grad per step, forward included, over the peer's):\n");
  for (const std::string &l : lines)
    fmt::print("  {}\n", l);
}

nlohmann::json recordOf(const SimRow &r, const Peers &peers) {
  nlohmann::json j = {{"sim", r.sim},
                      {"size", std::string(qdsim::sizeName(r.size))},
                      {"n", r.n},
                      {"steps", r.steps},
                      {"backend", r.backend}};
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  j.update({{"fwd_ms", r.fwd.medianMs},
            {"fwd_min_ms", r.fwd.minMs},
            {"rev_ms", r.rev.medianMs},
            {"grad_ms", r.grad.medianMs},
            {"grad_min_ms", r.grad.minMs},
            {"compile_ms", r.compileMs},
            {"heap_bytes", r.heapBytes},
            {"tape_bytes", r.tapeBytes},
            {"data_bytes", r.dataBytes},
            {"loss", r.loss},
            {"grad_sum", r.gradSum},
            {"grad_norm", r.gradNorm},
            {"stable", r.stable}});
  if (!r.tapeError.empty())
    j["tape_error"] = r.tapeError;
  for (const std::string &impl : peerImpls(r))
    if (const PeerRow *p = peerOf(r, peers, impl)) {
      j[impl + "_grad_ms"] = p->medianMs;
      if (p->fwdMs)
        j[impl + "_fwd_ms"] = *p->fwdMs;
      if (p->loss)
        j[impl + "_loss"] = *p->loss;
      j[impl + "_rel_diff"] = peerError(r, *p);
    }
  return j;
}

} // namespace

bool printSimTable(const std::vector<SimRow> &rows, const Peers &peers, double rtol,
                   BenchRecord &record) {
  for (const std::string &l : peers.info)
    fmt::print("peers: {}\n", l);
  fmt::print("{:<11} {:<5} {:>7} {:<7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>12} {:>8} | "
             "{:>9} {:>9} {:>9} | {:>7} {:>7} {:>8}\n",
             "sim", "size", "n", "backend", "fwd ms", "rev ms", "grad ms", "compile", "heap B",
             "tape B", "data B", "loss", "check", "cuda", "jax", "torch", "qd/cuda", "qd/jax",
             "qd/torch");
  bool ok = true;
  for (const SimRow &r : rows) {
    printRow(r, peers, rtol);
    std::string check = r.error.empty() ? checkCell(r, peers, rtol) : "n/a";
    ok = ok && check != "n/a" && check != "OFF" && check != "UNSTABLE";
    record.add(recordOf(r, peers));
  }
  fmt::print("  (ms per time step, median of the timed runs; grad = fwd + rev, one gradient of the "
             "loss, as the peers time theirs; compile: the first launch of @step_grad, ms; heap: "
             "the largest adstack heap of a launch; tape: the copies a LaunchTape keeps for the "
             "run (-: not run, --tape-max-mib); data: the arrays and adjoints; peers: their "
             "gradient per step, '!': loss or "
             "gradient off qd's; cuda, jax, torch on a cpu row: -, jax_cpu, torch_cpu; qd/X below "
             "1: qd is faster)\n");
  for (const auto &[impl, reason] : peers.unavailable)
    fmt::print("  {}: n/a ({})\n", impl, reason);
  printChecks(rows, peers, rtol);
  printTargets(rows, peers);
  return ok;
}

} // namespace qdbench
