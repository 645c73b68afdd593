//===- sims_peers.cu - Hand-written CUDA simulations for qd-bench-sims ----===//
//
// The mass_spring and mpm simulations of bench/workloads written by hand in
// CUDA (SimPeerMassSpring.cuh, SimPeerMpm.cuh: the same data, sizes,
// constants and float operations; one kernel per phase of a step, every
// step's state kept, the gradient by hand-written reverse kernels over the
// steps in reverse order), for qd-bench-sims' table (bench/run-sims-gpu.sh
// compiles and runs this, and passes its JSON with --peers).
//
// Per simulation and size (--sizes, default small,gpu; --steps 32): after
// --warmup runs, --reps runs of the forward (every step, then the loss) and
// of the reverse, each between two cudaEvents; before each run the arrays
// that accumulate are cleared (untimed, as qd-bench-sims' @reset is).
// Reported per time step: fwd_ms, rev_ms, ms_median (fwd + rev: one
// gradient of the loss), their median (and min); the loss and the sum and
// L2 norm of the gradient (mass_spring: d loss / d w1; mpm: d loss / d the
// initial velocities), which qd-bench-sims compares with qd's.
//
// The check, in the same run: the same per-element code run by plain loops
// on the host in float (the host reference: the GPU's kernels, reductions
// and atomics differ only in their order) gives the loss and gradient the
// GPU's must match within kTolerance (loss, checksum sum relative to the
// larger of its magnitude and the norm, norm; and the largest element
// difference relative to the largest element within kElementTolerance);
// at the small size the reverse itself is checked too, in double on the
// host, against central finite differences of the loss along a seeded
// direction (Richardson over h and h/2) within kFdTolerance.
//
// Build and run (bench/run-sims-gpu.sh does this):
//   nvcc -O3 -arch=sm_90 -o sims_peers bench/gpu/sims_peers.cu
//   ./sims_peers [--sizes small,gpu] [--steps 32] [--reps 20] [--warmup 3]
//                [--only mass_spring,mpm] [--device 0] [--reference all|small|none]
//                [--host-only] > sims_peers.json
// --host-only runs the host reference alone (no GPU needed; impl "host").
// Prints one JSON object on stdout (progress on stderr); without a usable
// GPU {"available": false, "reason": ..., "impls": ["cuda"]} and exit 0;
// exit 1 when a check fails.
//
//===----------------------------------------------------------------------===//
#include "../BenchMain.h" // splitList
#include "SimPeerMassSpring.cuh"
#include "SimPeerMpm.cuh"

#include <cstdlib>
#include <cstring>

namespace qdpeers {

constexpr double kTolerance = 1e-3, kElementTolerance = 1e-2, kFdTolerance = 1e-4;

struct Options {
  int reps = 20, warmup = 3, device = 0, steps = 32;
  std::string sizes = "small,gpu", only = "mass_spring,mpm", reference = "all";
  bool hostOnly = false;
};

/// The loss and the gradient of one host run in R, from `sim`'s layout
/// (`init` replacing the parameter's initial contents when given).
template <typename S, typename R>
void hostRun(const S &sim, R &loss, std::vector<R> &grad,
             const std::vector<double> *init = nullptr) {
  Layout l = sim.l;
  if (init)
    l.init[S::kParam] = *init;
  HostArrays<R> h(l);
  R *slots[S::kSlotCount];
  for (int k = 0; k < S::kSlotCount; ++k)
    slots[k] = h[k];
  auto v = sim.template bind<R>(slots);
  S::hostForward(v);
  loss = h[S::kLoss][0];
  if (init)
    return;
  S::hostReverse(v);
  grad.assign(h[S::kGrad], h[S::kGrad] + sim.gradCount());
}

/// The double reverse against central differences of the double loss
/// along hashUniform(k, 99), Richardson over h and h/2: the relative error.
template <typename S> double fdCheck(const S &sim) {
  double loss = 0;
  std::vector<double> grad;
  hostRun(sim, loss, grad);
  const std::vector<double> &p0 = sim.l.init[S::kParam];
  double analytic = 0, scale = 1;
  std::vector<double> dir(p0.size());
  for (size_t k = 0; k < p0.size(); ++k) {
    dir[k] = hashUniform(int64_t(k), 99);
    analytic += dir[k] * grad[k];
    scale = std::max(scale, std::fabs(p0[k]));
  }
  double central[2];
  for (int level = 0; level < 2; ++level) {
    const double h = 1e-6 * scale / (1 << level);
    double up = 0, down = 0;
    std::vector<double> p = p0;
    for (size_t k = 0; k < p.size(); ++k)
      p[k] = p0[k] + h * dir[k];
    hostRun(sim, up, grad, &p);
    for (size_t k = 0; k < p.size(); ++k)
      p[k] = p0[k] - h * dir[k];
    hostRun(sim, down, grad, &p);
    central[level] = (up - down) / (2 * h);
  }
  const double fd = (4 * central[1] - central[0]) / 3;
  return std::fabs(analytic - fd) / std::max({std::fabs(fd), std::fabs(analytic), 1e-30});
}

/// The timed GPU runs; the first one's loss and gradient.
template <typename S>
bool gpuRuns(const S &sim, const Options &o, SimResult &r, std::vector<float> &grad) {
  DeviceArrays dev;
  if (!dev.upload(sim.l))
    return false;
  r.memBytes = int64_t(dev.bytes);
  float *slots[S::kSlotCount];
  for (int k = 0; k < S::kSlotCount; ++k)
    slots[k] = dev[k];
  auto v = sim.template bind<float>(slots);
  cudaEvent_t ev[3];
  for (cudaEvent_t &e : ev)
    if (!ok(cudaEventCreate(&e), "cudaEventCreate"))
      return false;
  std::vector<double> fwd, rev, total;
  for (int k = 0; k < o.warmup + o.reps; ++k) {
    if (!dev.clear(sim.l))
      return false;
    cudaEventRecord(ev[0]);
    S::forward(v);
    cudaEventRecord(ev[1]);
    S::reverse(v);
    cudaEventRecord(ev[2]);
    if (!ok(cudaEventSynchronize(ev[2]), "a run") || !ok(cudaGetLastError(), "a launch"))
      return false;
    float f = 0, b = 0;
    cudaEventElapsedTime(&f, ev[0], ev[1]);
    cudaEventElapsedTime(&b, ev[1], ev[2]);
    if (k == 0) {
      float loss = 0;
      grad.resize(sim.gradCount());
      if (!ok(cudaMemcpy(&loss, dev[S::kLoss], sizeof loss, cudaMemcpyDeviceToHost), "loss") ||
          !ok(cudaMemcpy(grad.data(), dev[S::kGrad], grad.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              "gradient"))
        return false;
      r.loss = loss;
    }
    if (k >= o.warmup) {
      fwd.push_back(f / o.steps);
      rev.push_back(b / o.steps);
      total.push_back((f + b) / o.steps);
    }
  }
  for (cudaEvent_t &e : ev)
    cudaEventDestroy(e);
  double unused = 0;
  medianMin(fwd, r.fwdMs, r.fwdMin);
  medianMin(rev, r.revMs, unused);
  medianMin(total, r.gradMs, r.gradMin);
  return true;
}

double relative(double a, double ref, double scale) {
  double e = std::fabs(a - ref) / std::max(scale, 1e-30);
  return std::isnan(e) ? INFINITY : e;
}

template <typename S> bool runCase(const Options &o, const std::string &size, SimResult &r) {
  S sim;
  if (!sim.make(size, o.steps)) {
    std::fprintf(stderr, "sims_peers: no size '%s' (small, large, gpu)\n", size.c_str());
    return false;
  }
  r.workload = S::kName;
  r.size = size;
  r.n = sim.n();
  r.steps = o.steps;
  r.note = sim.note();
  std::fprintf(stderr, "sims_peers: %s %s: host reference\n", S::kName, size.c_str());
  float refLoss = 0;
  std::vector<float> ref, grad;
  if (o.reference == "all" || (o.reference == "small" && size == "small") || o.hostOnly) {
    hostRun(sim, refLoss, ref);
    r.refLoss = refLoss;
    checksum(ref, r.refSum, r.refNorm);
  }
  if (size == "small" && o.reference != "none")
    r.fdErr = fdCheck(sim);
  if (o.hostOnly) {
    r.loss = refLoss;
    grad = ref;
  } else {
    std::fprintf(stderr, "sims_peers: %s %s: GPU runs\n", S::kName, size.c_str());
    if (!gpuRuns(sim, o, r, grad))
      return false;
  }
  checksum(grad, r.gradSum, r.gradNorm);
  r.pass = r.fdErr < 0 || r.fdErr <= kFdTolerance;
  if (!ref.empty()) {
    double largest = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
      largest = std::max(largest, double(std::fabs(ref[k])));
      r.refMaxErr = std::max(r.refMaxErr, double(std::fabs(grad[k] - ref[k])));
    }
    r.refMaxErr = relative(r.refMaxErr, 0, largest);
    r.pass =
        r.pass && relative(r.loss, r.refLoss, std::fabs(r.refLoss)) <= kTolerance &&
        relative(r.gradSum, r.refSum, std::max(std::fabs(r.refSum), r.refNorm)) <= kTolerance &&
        relative(r.gradNorm, r.refNorm, r.refNorm) <= kTolerance &&
        r.refMaxErr <= kElementTolerance;
  }
  return true;
}

void printRows(const std::vector<SimResult> &rows, const char *impl, const std::string &info) {
  std::printf("{\"source\": \"sims_peers.cu\", \"info\": %s,\n \"rows\": [",
              jsonString(info).c_str());
  for (size_t i = 0; i < rows.size(); ++i) {
    const SimResult &r = rows[i];
    std::printf("%s\n  {\"workload\": \"%s\", \"size\": \"%s\", \"n\": %lld, \"steps\": %d, "
                "\"impl\": \"%s\", \"fwd_ms\": %.6g, \"fwd_ms_min\": %.6g, \"rev_ms\": %.6g, "
                "\"ms_median\": %.6g, \"ms_min\": %.6g, \"loss\": %.9g, \"grad_sum\": %.9g, "
                "\"grad_norm\": %.9g, \"mem_bytes\": %lld, \"ref_loss\": %.9g, \"ref_grad_sum\": "
                "%.9g, \"ref_grad_norm\": %.9g, \"ref_max_err\": %.3g, \"fd_err\": %.3g, "
                "\"pass\": %s, \"note\": %s}",
                i ? "," : "", r.workload.c_str(), r.size.c_str(), (long long)r.n, r.steps, impl,
                r.fwdMs, r.fwdMin, r.revMs, r.gradMs, r.gradMin, r.loss, r.gradSum, r.gradNorm,
                (long long)r.memBytes, r.refLoss, r.refSum, r.refNorm, r.refMaxErr, r.fdErr,
                r.pass ? "true" : "false", jsonString(r.note).c_str());
    std::fprintf(stderr,
                 "sims_peers: %s %s: fwd %.4f ms, grad %.4f ms per step; loss %.7g (host %.7g), "
                 "grad sum %.7g (host %.7g), norm %.7g (host %.7g), element err %.1e, fd err "
                 "%.1e: %s\n",
                 r.workload.c_str(), r.size.c_str(), r.fwdMs, r.gradMs, r.loss, r.refLoss,
                 r.gradSum, r.refSum, r.gradNorm, r.refNorm, r.refMaxErr, r.fdErr,
                 r.pass ? "PASS" : "FAIL");
  }
  std::printf("\n ]}\n");
}

bool parse(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--host-only")
      o.hostOnly = true;
    else if (!v)
      return false;
    else if (a == "--reps")
      o.reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warmup")
      o.warmup = std::max(0, std::atoi(argv[++i]));
    else if (a == "--steps")
      o.steps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--sizes")
      o.sizes = argv[++i];
    else if (a == "--only")
      o.only = argv[++i];
    else if (a == "--device")
      o.device = std::atoi(argv[++i]);
    else if (a == "--reference")
      o.reference = argv[++i];
    else
      return false;
  }
  return true;
}

} // namespace qdpeers

using namespace qdpeers;

int main(int argc, char **argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: sims_peers [--sizes small,gpu] [--steps 32] [--reps 20] "
                         "[--warmup 3] [--only mass_spring,mpm] [--device 0] "
                         "[--reference all|small|none] [--host-only]\n");
    return 2;
  }
  std::string device = "the host (--host-only)";
  if (!o.hostOnly && !openDevice(o.device, device)) {
    printUnavailable("sims_peers.cu", gError, "[\"cuda\"]");
    return 0;
  }
  std::vector<SimResult> rows;
  bool allPass = true;
  for (const std::string &size : qdbench::splitList(o.sizes))
    for (const std::string &sim : qdbench::splitList(o.only)) {
      SimResult r;
      bool ran = sim == "mass_spring" ? runCase<massspring::Sim>(o, size, r)
                 : sim == "mpm"       ? runCase<mpm::Sim>(o, size, r)
                                      : false;
      if (!ran) {
        std::fprintf(stderr, "sims_peers: %s %s did not run: %s\n", sim.c_str(), size.c_str(),
                     gError.empty() ? "unknown simulation or size" : gError.c_str());
        allPass = false;
        if (!gError.empty())
          break; // the device is unusable now
        continue;
      }
      allPass = allPass && r.pass;
      rows.push_back(r);
    }
  if (rows.empty() && !gError.empty()) {
    printUnavailable("sims_peers.cu", gError, "[\"cuda\"]");
    return 0;
  }
  char info[512];
  std::snprintf(info, sizeof info,
                "hand-written CUDA on %s; %d steps; cudaEvent ms per step, median (min) of %d "
                "runs after %d warm-up; block %d; checked against the host reference within "
                "%.0e (elements %.0e), finite differences %.0e",
                device.c_str(), o.steps, o.reps, o.warmup, kBlock, kTolerance, kElementTolerance,
                kFdTolerance);
  std::string infoLine = info;
  if (!gError.empty())
    infoLine += "; stopped at an error: " + gError;
  printRows(rows, o.hostOnly ? "host" : "cuda", infoLine);
  return allPass ? 0 : 1;
}
