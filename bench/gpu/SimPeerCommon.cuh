//===- SimPeerCommon.cuh - The simulation peers' arrays and helpers -*- CUDA -*-===//
//
// What bench/gpu/sims_peers.cu's two simulations share. Each simulation's
// arrays are numbered slots of R (float on the GPU; float or double in the
// host reference) with their initial contents; the per-element code is
// __host__ __device__, run by the kernels on the GPU and by plain loops in
// the host reference, where an atomic add is a `+=`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CudaPeers.cuh"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace qdpeers {

#define QD_HD __host__ __device__ __forceinline__

/// `*a += v`: an atomic add on the GPU.
template <typename R> QD_HD void addTo(R *a, R v) {
#ifdef __CUDA_ARCH__
  atomicAdd(a, v);
#else
  *a += v;
#endif
}

template <typename R> QD_HD R sinR(R v) {
  if constexpr (sizeof(R) == 4)
    return sinf(v);
  else
    return sin(v);
}
template <typename R> QD_HD R tanhR(R v) {
  if constexpr (sizeof(R) == 4)
    return tanhf(v);
  else
    return tanh(v);
}
template <typename R> QD_HD R sqrtR(R v) {
  if constexpr (sizeof(R) == 4)
    return sqrtf(v);
  else
    return sqrt(v);
}

/// A thread per element i < count: Fn(s, t, i).
template <typename S, void (*Fn)(const S &, int, int)>
__global__ void kEach(S s, int t, int64_t count) {
  const int64_t i = globalId();
  if (i < count)
    Fn(s, t, int(i));
}

/// Launches kEach<S, Fn> over `count` elements.
template <typename S, void (*Fn)(const S &, int, int)> void each(const S &s, int t, int64_t count) {
  kEach<S, Fn><<<blocksFor(count), kBlock>>>(s, t, count);
}

/// The sum over the block (every thread gets it); kBlock threads.
__device__ inline float blockSum(float v) {
  __shared__ float partial[kBlock / 32];
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads(); // an earlier call's readers are done with `partial`
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kBlock / 32; ++w)
    total += partial[w];
  return total;
}

/// The arrays of a simulation: slot k holds sizes[k] elements, starting
/// with init[k] (the rest zero); `cleared` are zeroed before every run.
struct Layout {
  std::vector<size_t> sizes;
  std::vector<std::vector<double>> init;
  std::vector<int> cleared;
  size_t add(size_t count, std::vector<double> initial = {}) {
    sizes.push_back(count);
    init.push_back(std::move(initial));
    return sizes.size() - 1;
  }
};

/// The slots on the host, in R.
template <typename R> struct HostArrays {
  std::vector<std::vector<R>> a;
  explicit HostArrays(const Layout &l) {
    for (size_t k = 0; k < l.sizes.size(); ++k) {
      a.emplace_back(l.sizes[k], R(0));
      for (size_t i = 0; i < l.init[k].size(); ++i)
        a[k][i] = R(l.init[k][i]);
    }
  }
  void clear(const Layout &l) {
    for (int k : l.cleared)
      std::fill(a[k].begin(), a[k].end(), R(0));
  }
  R *operator[](size_t k) { return a[k].data(); }
};

/// The slots on the GPU, in float.
struct DeviceArrays {
  std::vector<DeviceArray> a;
  size_t bytes = 0;
  bool upload(const Layout &l) {
    a = std::vector<DeviceArray>(l.sizes.size());
    HostArrays<float> host(l);
    for (size_t k = 0; k < a.size(); ++k) {
      if (!a[k].upload(host.a[k]))
        return false;
      bytes += a[k].bytes;
    }
    return true;
  }
  bool clear(const Layout &l) {
    for (int k : l.cleared)
      if (!ok(cudaMemsetAsync(a[k].ptr, 0, a[k].bytes), "cudaMemsetAsync"))
        return false;
    return true;
  }
  float *operator[](size_t k) { return a[k].f(); }
};

/// One simulation at one size: the timed GPU runs, the host reference and
/// the JSON row.
struct SimResult {
  std::string workload, size, note;
  int64_t n = 0, memBytes = 0;
  int steps = 0;
  double fwdMs = 0, fwdMin = 0, revMs = 0, gradMs = 0, gradMin = 0; // per step
  double loss = 0, gradSum = 0, gradNorm = 0;
  double refLoss = 0, refSum = 0, refNorm = 0, refMaxErr = 0;
  double fdErr = -1; // the f64 reference against finite differences; -1: not checked
  bool pass = false;
};

/// Sum and L2 norm in double.
template <typename R> void checksum(const std::vector<R> &g, double &sum, double &norm) {
  double s = 0, q = 0;
  for (R v : g) {
    s += double(v);
    q += double(v) * double(v);
  }
  sum = s;
  norm = std::sqrt(q);
}

/// bench/workloads/Simulation.cpp's hashUniform.
inline double hashUniform(int64_t k, int salt) {
  double v = std::sin(double(k) * 12.9898 + double(salt) * 78.233) * 43758.5453;
  return 2.0 * (v - std::floor(v)) - 1.0;
}

} // namespace qdpeers
