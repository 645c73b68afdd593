//===- CudaPeers.cuh - What the hand-written CUDA peers share -----*- CUDA -*-===//
//
// The host side of bench/gpu/peers.cu and bench/gpu/sims_peers.cu: CUDA
// error handling (the first error's message, for the JSON), device arrays
// freed on scope exit, the median of timed runs, the device's description
// and JSON strings. Standard C++ and the CUDA runtime only: the GPU machine
// compiles these with nvcc alone.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace qdpeers {

constexpr int kBlock = 256;

__device__ __forceinline__ int64_t globalId() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

inline unsigned blocksFor(int64_t n) {
  return unsigned((n + kBlock - 1) / kBlock);
}

/// A CUDA error: the message for the JSON, set once.
inline std::string gError;

inline bool ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  if (gError.empty())
    gError = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  return false;
}

/// Device memory freed on scope exit.
struct DeviceArray {
  void *ptr = nullptr;
  size_t bytes = 0;
  DeviceArray() = default;
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;
  bool alloc(size_t b) {
    bytes = b;
    return ok(cudaMalloc(&ptr, b), "cudaMalloc");
  }
  template <typename T> bool upload(const std::vector<T> &v) {
    return alloc(v.size() * sizeof(T)) &&
           ok(cudaMemcpy(ptr, v.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  bool zeroed(size_t b) { return alloc(b) && ok(cudaMemset(ptr, 0, b), "cudaMemset"); }
  template <typename T> bool download(std::vector<T> &v) const {
    v.resize(bytes / sizeof(T));
    return ok(cudaMemcpy(v.data(), ptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  float *f() const { return static_cast<float *>(ptr); }
  int32_t *i() const { return static_cast<int32_t *>(ptr); }
  ~DeviceArray() {
    if (ptr)
      cudaFree(ptr);
  }
};

/// Median and min of `ms` (zeros when empty).
inline void medianMin(std::vector<double> ms, double &median, double &min) {
  median = min = 0;
  if (ms.empty())
    return;
  std::sort(ms.begin(), ms.end());
  size_t h = ms.size() / 2;
  median = ms.size() % 2 ? ms[h] : 0.5 * (ms[h - 1] + ms[h]);
  min = ms.front();
}

inline std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      c = ' ';
    out += c;
  }
  return out + "\"";
}

/// {"source": source, "available": false, "reason": ..., "impls": impls}
/// on stdout (`impls`: a JSON list).
inline void printUnavailable(const char *source, const std::string &reason, const char *impls) {
  std::printf("{\"source\": \"%s\", \"available\": false, \"reason\": %s, \"impls\": %s}\n", source,
              jsonString(reason).c_str(), impls);
}

/// Selects `device` and describes it ("NAME (sm_XY), CUDA runtime R,
/// driver D"); false (gError set) when there is none.
inline bool openDevice(int device, std::string &description) {
  int count = 0;
  cudaDeviceProp prop;
  if (!ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount") ||
      !ok(cudaSetDevice(device), "cudaSetDevice") ||
      !ok(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"))
    return false;
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  char text[384];
  std::snprintf(text, sizeof text, "%s (sm_%d%d), CUDA runtime %d, driver %d", prop.name,
                prop.major, prop.minor, runtime, driver);
  description = text;
  return true;
}

} // namespace qdpeers
