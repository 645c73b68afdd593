//===- peers.cu - Hand-written CUDA gradients for qd-bench-gpu ------------===//
//
// The reverse-mode gradients of the workloads of bench/GradientWorkloads.h
// written by hand in CUDA, one thread per element, for the table of
// qd-bench-gpu (bench/run-gpu.sh compiles and runs this, then merges its
// JSON):
//
//  local_tape   (a), (b), (c): a per-thread tape in a local array (registers
//               or local memory, as nvcc places it): the forward stores what
//               the reverse sweep reads, then the reverse loop.
//               (a) float tape[64]: v before each step; grad *= cos(v_k).
//               (b) float tape[120] (16 * 15 / 2 entries for m = 16): the sin
//               argument of each inner iteration.
//               (c) float tape[64 * 16]: the state (8 positions, 8
//               velocities) before each step; the reverse reads the positions.
//  global_tape  (a): the tape in global memory, iteration-major: entry k of
//               element t at tape[k * N + t] (a warp's stores and loads
//               coalesce); 64 * N floats.
//
// The float operations are those of GradientWorkloads.h in its order
// (springStep is shared with the host code), with sinf/cosf (no fast-math
// intrinsics; nvcc's default FMA contraction). The gradient sum is checked
// against the CPU reference of bench/GradientReference.h (the hand-written
// scalar reverse loops of bench/GradientHandwritten.cpp on one period of
// the inputs) within a relative 1e-3. Times: cudaEvents around each launch,
// median and min over --reps launches after --warmup.
//
// Build and run (bench/run-gpu.sh does this):
//   nvcc -O3 -arch=sm_90 -o peers bench/gpu/peers.cu
//   ./peers [--reps 50] [--warmup 5] [--only a,b,c] [--device 0] > peers.json
// Prints one JSON object on stdout (progress on stderr); without a usable
// GPU: {"available": false, "reason": ..., "impls": [...]} and exit 0.
//
//===----------------------------------------------------------------------===//
#include "../GradientHandwritten.cpp" // the CPU reference's scalar reverse loops
#include "../GradientReference.h"
#include "../GradientWorkloads.h"
#include "CudaPeers.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace qdbench;

// A named namespace: nvcc's stubs find two anonymous ones ambiguous (the
// included GradientHandwritten.cpp has one inside qdbench).
namespace qdpeers {

constexpr int kTriTape = 16 * 15 / 2; // the most entries of (b): m = 16
constexpr int kSpringState = 2 * kChain;

//===--- kernels ----------------------------------------------------------===//

__global__ void sinLocalTape(const float *x, const float *yGrad, float *xGrad, int64_t n) {
  int64_t i = globalId();
  if (i >= n)
    return;
  float tape[kSinSteps];
  float v = x[i];
  for (int k = 0; k < kSinSteps; ++k) {
    tape[k] = v;
    v = sinf(v) + 0.1f;
  }
  float a = yGrad[i];
  for (int k = kSinSteps - 1; k >= 0; --k)
    a = a * cosf(tape[k]);
  xGrad[i] += a;
}

__global__ void sinGlobalTape(const float *x, const float *yGrad, float *xGrad, float *tape,
                              int64_t n) {
  int64_t i = globalId();
  if (i >= n)
    return;
  float v = x[i];
  for (int k = 0; k < kSinSteps; ++k) {
    tape[int64_t(k) * n + i] = v;
    v = sinf(v) + 0.1f;
  }
  float a = yGrad[i];
  for (int k = kSinSteps - 1; k >= 0; --k)
    a = a * cosf(tape[int64_t(k) * n + i]);
  xGrad[i] += a;
}

__global__ void triLocalTape(const float *x, const int32_t *m, const float *yGrad, float *xGrad,
                             int64_t n) {
  int64_t i = globalId();
  if (i >= n)
    return;
  float tape[kTriTape];
  int top = 0;
  float v = x[i];
  int mi = m[i];
  for (int j = 0; j < mi; ++j)
    for (int k = 0; k < j; ++k) {
      float arg = v + static_cast<float>(k) * 0.01f;
      tape[top++] = arg;
      v = sinf(arg) + 0.1f;
    }
  float a = yGrad[i];
  while (top > 0)
    a = a * cosf(tape[--top]);
  xGrad[i] += a;
}

/// p, q, pGrad, qGrad: [n][kChain] row-major, as the qd fields.
__global__ void springLocalTape(const float *p, const float *q, const float *outGrad, float *pGrad,
                                float *qGrad, int64_t n) {
  int64_t i = globalId();
  if (i >= n)
    return;
  float tape[kSpringSteps * kSpringState];
  float pp[kChain], qq[kChain];
  for (int k = 0; k < kChain; ++k) {
    pp[k] = p[i * kChain + k];
    qq[k] = q[i * kChain + k];
  }
  for (int t = 0; t < kSpringSteps; ++t) {
    for (int k = 0; k < kChain; ++k) {
      tape[t * kSpringState + k] = pp[k];
      tape[t * kSpringState + kChain + k] = qq[k];
    }
    springStep(pp, qq);
  }
  // Adjoints of the state after the last step (out = sum of the positions).
  float pb[kChain], qb[kChain];
  for (int k = 0; k < kChain; ++k) {
    pb[k] = outGrad[i];
    qb[k] = 0;
  }
  for (int t = kSpringSteps - 1; t >= 0; --t) {
    const float *pt = &tape[t * kSpringState];
    float e[kChain], fb[kChain], gb[kChain + 1];
    for (int k = 0; k < kChain; ++k) {
      e[k] = (k == 0 ? pt[0] : pt[k] - pt[k - 1]) - kSpringRest;
      gb[k] = 0;
    }
    gb[kChain] = 0;
    for (int k = 0; k < kChain; ++k) {
      // p' = p + dt qn, q' = qn, qn = q + (f - D q) dt.
      float qnb = qb[k] + kSpringDt * pb[k];
      float tb = qnb * kSpringDt;
      qb[k] = qnb - kSpringDamp * tb;
      fb[k] = tb;
    }
    for (int k = 0; k < kChain; ++k) {
      gb[k + 1] += fb[k] * kSpringK;
      gb[k] -= fb[k] * kSpringK;
    }
    for (int k = 0; k < kChain; ++k) {
      float eb = gb[k] * (1.0f + 3.0f * kSpringCubic * e[k] * e[k]);
      pb[k] += eb;
      if (k > 0)
        pb[k - 1] -= eb;
    }
  }
  for (int k = 0; k < kChain; ++k) {
    pGrad[i * kChain + k] += pb[k];
    qGrad[i * kChain + k] += qb[k];
  }
}

//===--- host -------------------------------------------------------------===//

struct Row {
  std::string workload, impl, note;
  int64_t n = 0;
  double medianMs = 0, minMs = 0, gradSum = 0, refSum = 0;
  bool pass = false;
};

struct Options {
  int reps = 50, warmup = 5, device = 0;
  std::string only = "a,b,c";
};

/// Zeroes the gradient arrays, launches once, sums them (the check), then
/// times the launches. `launch` enqueues one launch.
template <typename Launch>
bool measure(Row &row, const Options &o, const std::vector<DeviceArray *> &grads,
             const Reference &ref, Launch launch) {
  for (DeviceArray *g : grads)
    if (!ok(cudaMemset(g->ptr, 0, g->bytes), "cudaMemset"))
      return false;
  launch();
  if (!ok(cudaGetLastError(), "launch") || !ok(cudaDeviceSynchronize(), "first launch"))
    return false;
  row.gradSum = 0;
  for (DeviceArray *g : grads) {
    std::vector<float> h(g->bytes / sizeof(float));
    if (!ok(cudaMemcpy(h.data(), g->ptr, g->bytes, cudaMemcpyDeviceToHost), "cudaMemcpy"))
      return false;
    for (float v : h)
      row.gradSum += v;
  }
  row.refSum = ref.sum(row.n);
  double err = std::fabs(row.gradSum - row.refSum) / std::max(std::fabs(row.refSum), 1e-30);
  row.pass = err <= 1e-3;
  for (int w = 0; w < o.warmup; ++w)
    launch();
  cudaEvent_t start, stop;
  if (!ok(cudaEventCreate(&start), "cudaEventCreate") ||
      !ok(cudaEventCreate(&stop), "cudaEventCreate"))
    return false;
  std::vector<double> ms;
  for (int r = 0; r < o.reps; ++r) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    if (!ok(cudaEventSynchronize(stop), "cudaEventSynchronize"))
      return false;
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!ok(cudaGetLastError(), "timed launches"))
    return false;
  medianMin(ms, row.medianMs, row.minMs);
  return true;
}

void runSin(std::vector<Row> &rows, const Options &o, int64_t n, const Reference &ref) {
  std::vector<float> x(n), ones(n, 1.0f);
  for (int64_t i = 0; i < n; ++i)
    x[i] = sinInput(i);
  DeviceArray dx, dy, dg;
  if (!dx.upload(x) || !dy.upload(ones) || !dg.zeroed(n * sizeof(float)))
    return;
  {
    Row r{"a", "local_tape", "float tape[64] per thread", n};
    if (measure(r, o, {&dg}, ref,
                [&] { sinLocalTape<<<blocksFor(n), kBlock>>>(dx.f(), dy.f(), dg.f(), n); }))
      rows.push_back(r);
  }
  {
    Row r{"a", "global_tape", "tape[k * N + t], 64 * N floats", n};
    DeviceArray tape;
    if (!tape.alloc(size_t(kSinSteps) * size_t(n) * sizeof(float))) {
      std::fprintf(stderr, "peers: (a) N = %lld: global tape: %s\n", (long long)n, gError.c_str());
      gError.clear(); // not fatal: the row is left out
      cudaGetLastError();
      return;
    }
    if (measure(r, o, {&dg}, ref, [&] {
          sinGlobalTape<<<blocksFor(n), kBlock>>>(dx.f(), dy.f(), dg.f(), tape.f(), n);
        }))
      rows.push_back(r);
  }
}

void runTri(std::vector<Row> &rows, const Options &o, int64_t n, const Reference &ref) {
  std::vector<float> x(n), ones(n, 1.0f);
  std::vector<int32_t> m(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = sinInput(i);
    m[i] = triBound(i);
  }
  DeviceArray dx, dm, dy, dg;
  if (!dx.upload(x) || !dm.upload(m) || !dy.upload(ones) || !dg.zeroed(n * sizeof(float)))
    return;
  Row r{"b", "local_tape", "float tape[120] per thread", n};
  if (measure(r, o, {&dg}, ref,
              [&] { triLocalTape<<<blocksFor(n), kBlock>>>(dx.f(), dm.i(), dy.f(), dg.f(), n); }))
    rows.push_back(r);
}

void runSpring(std::vector<Row> &rows, const Options &o, int64_t n, const Reference &ref) {
  std::vector<float> p(n * kChain), q(n * kChain), ones(n, 1.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < kChain; ++k) {
      p[i * kChain + k] = springP(i, k);
      q[i * kChain + k] = springQ(i, k);
    }
  DeviceArray dp, dq, dy, dpg, dqg;
  size_t bytes = size_t(n) * kChain * sizeof(float);
  if (!dp.upload(p) || !dq.upload(q) || !dy.upload(ones) || !dpg.zeroed(bytes) ||
      !dqg.zeroed(bytes))
    return;
  Row r{"c", "local_tape", "float tape[64 * 16] per thread (p and q per step)", n};
  if (measure(r, o, {&dpg, &dqg}, ref, [&] {
        springLocalTape<<<blocksFor(n), kBlock>>>(dp.f(), dq.f(), dy.f(), dpg.f(), dqg.f(), n);
      }))
    rows.push_back(r);
}

void printUnavailable(const std::string &reason) {
  qdpeers::printUnavailable("peers.cu", reason, "[\"local_tape\", \"global_tape\"]");
}

} // namespace qdpeers

using namespace qdpeers;

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--reps" && v)
      o.reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warmup" && v)
      o.warmup = std::max(0, std::atoi(argv[++i]));
    else if (a == "--only" && v)
      o.only = argv[++i];
    else if (a == "--device" && v)
      o.device = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: peers [--reps N] [--warmup N] [--only a,b,c] [--device N]\n");
      return 2;
    }
  }
  std::string device;
  if (!openDevice(o.device, device)) {
    printUnavailable(gError);
    return 0;
  }

  std::vector<Row> rows;
  auto wanted = [&](const char *k) { return o.only.find(k) != std::string::npos; };
  if (wanted("a")) {
    Reference ref = reference("a");
    for (int64_t n : {int64_t(1) << 20, int64_t(1) << 24}) {
      std::fprintf(stderr, "peers: (a) N = %lld\n", (long long)n);
      runSin(rows, o, n, ref);
    }
  }
  if (wanted("b") && gError.empty()) {
    std::fprintf(stderr, "peers: (b) N = %lld\n", 1LL << 22);
    runTri(rows, o, int64_t(1) << 22, reference("b"));
  }
  if (wanted("c") && gError.empty()) {
    std::fprintf(stderr, "peers: (c) N = %lld chains\n", 1LL << 20);
    runSpring(rows, o, int64_t(1) << 20, reference("c"));
  }
  if (!gError.empty() && rows.empty()) {
    printUnavailable(gError);
    return 0;
  }

  char info[512];
  std::snprintf(info, sizeof info,
                "hand-written CUDA on %s; cudaEvent ms, median (min) of %d launches after %d "
                "warm-up; block %d",
                device.c_str(), o.reps, o.warmup, kBlock);
  std::string infoLine = info;
  if (!gError.empty())
    infoLine += "; stopped at an error: " + gError;
  std::printf("{\"source\": \"peers.cu\", \"info\": %s,\n \"rows\": [",
              jsonString(infoLine).c_str());
  bool allPass = true;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &r = rows[i];
    allPass = allPass && r.pass;
    std::printf("%s\n  {\"workload\": \"%s\", \"n\": %lld, \"impl\": \"%s\", \"ms_median\": %.6f, "
                "\"ms_min\": %.6f, \"grad_sum\": %.17g, \"ref_sum\": %.17g, \"pass\": %s, "
                "\"note\": %s}",
                i ? "," : "", r.workload.c_str(), (long long)r.n, r.impl.c_str(), r.medianMs,
                r.minMs, r.gradSum, r.refSum, r.pass ? "true" : "false",
                jsonString(r.note).c_str());
    std::fprintf(stderr,
                 "peers: (%s) N = %lld %s: %.4f ms (min %.4f), grad sum %.9g (ref %.9g) %s\n",
                 r.workload.c_str(), (long long)r.n, r.impl.c_str(), r.medianMs, r.minMs, r.gradSum,
                 r.refSum, r.pass ? "PASS" : "FAIL");
  }
  std::printf("\n ]}\n");
  return allPass ? 0 : 1;
}
