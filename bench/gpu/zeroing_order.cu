// Where a gradient's zeroing store goes, on the GPU: the update gradient of
// the wave simulation (bench/workloads/Wave.cpp) written by hand, with the
// store of 0 into p.grad[t + 1] at three places in one iteration. Each
// variant runs the 32 reverse steps over [33][2048][2048] arrays on the
// grid qd launches (2112 blocks of 128 threads, a grid-stride loop) and
// prints microseconds per step (the least of 4 runs). docs/runtime.md,
// "Deferred stores", has the figures.
//
//   nvcc -O3 -arch=sm_90 -o zeroing_order bench/gpu/zeroing_order.cu && ./zeroing_order
#include <cstdio>
#include <cuda_runtime.h>

namespace {

constexpr int kCells = 2048 * 2048, kSteps = 32;

enum class Zeroing { AfterRead, AfterUpdates, Never };

template <Zeroing Z>
__global__ void updateGradient(int t, float *pGrad, float *lapGrad) {
  const size_t n = kCells;
  for (size_t k = blockIdx.x * size_t(blockDim.x) + threadIdx.x; k < n;
       k += size_t(gridDim.x) * blockDim.x) {
    size_t next = (t + 1) * n + k, now = t * n + k, prev = (t > 0 ? t - 1 : 0) * n + k;
    float a = pGrad[next];
    if (Z == Zeroing::AfterRead)
      pGrad[next] = 0;
    lapGrad[now] += a * (1.0f / 3);
    pGrad[now] += 2 * a;
    pGrad[prev] -= a;
    if (Z == Zeroing::AfterUpdates)
      pGrad[next] = 0;
  }
}

template <Zeroing Z>
float microsecondsPerStep(float *pGrad, float *lapGrad) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best = 1e30f;
  for (int run = 0; run < 4; ++run) {
    cudaEventRecord(start);
    for (int t = kSteps - 1; t >= 0; --t)
      updateGradient<Z><<<2112, 128>>>(t, pGrad, lapGrad);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    best = ms < best ? ms : best;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best * 1000 / kSteps;
}

} // namespace

int main() {
  size_t bytes = size_t(kSteps + 1) * kCells * sizeof(float);
  float *pGrad = nullptr, *lapGrad = nullptr;
  if (cudaMalloc(&pGrad, bytes) != cudaSuccess || cudaMalloc(&lapGrad, bytes) != cudaSuccess) {
    std::fprintf(stderr, "zeroing_order: no GPU memory for two arrays of %zu bytes\n", bytes);
    return 1;
  }
  cudaMemset(pGrad, 0, bytes);
  cudaMemset(lapGrad, 0, bytes);
  std::printf("zero store right after the read:     %6.1f us per step\n",
              microsecondsPerStep<Zeroing::AfterRead>(pGrad, lapGrad));
  std::printf("zero store after the updates:        %6.1f us per step\n",
              microsecondsPerStep<Zeroing::AfterUpdates>(pGrad, lapGrad));
  std::printf("no zero store (a lower bound):       %6.1f us per step\n",
              microsecondsPerStep<Zeroing::Never>(pGrad, lapGrad));
  cudaFree(pGrad);
  cudaFree(lapGrad);
  return 0;
}
