//===- GpuBackendChecks.h - What every GPU backend must do ------*- C++ -*-===//
//
// The checks the CUDA and AMDGPU backend tests run on their device (the
// same runtime, runtimes/gpu/GpuRuntime.h, behind two driver APIs): the
// corpus against the interpreter, the adstack heap following launch-time
// bounds, overflow reported and recovered from.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"
#include "qd/runtime/Program.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qd::corpus {

/// Every corpus kernel, with its gradient and dual kernels, on `backend`
/// and on the interpreter with the same data: the same results or both an
/// error. `tag` prefixes the summary line ("cuda").
void expectCorpusMatchesTheInterpreter(Backend &backend, const std::string &tag);

/// The text of kernel @`name`(%n: i32, %x: ndarray<f32, 1>, %out:
/// ndarray<f32, 1>): per element, the derivative of x -> sin(x) + 0.1
/// applied %n times, with the loop's values on an adstack (sized at launch
/// from %n).
std::string sinLoopKernel(const std::string &name);
/// Launches a sinLoopKernel named `kernel` of `program` on x into out.
absl::Status launchSinLoop(Program &program, Backend &b, const std::string &kernel, int n,
                           std::vector<float> &x, std::vector<float> &out,
                           const LaunchOptions &options = {});

/// A module holding sinLoopKernel("g").
struct SinLoop {
  std::unique_ptr<Module> module;
  std::unique_ptr<Program> program;
  SinLoop();
  absl::Status run(Backend &b, int n, std::vector<float> &x, std::vector<float> &out,
                   const LaunchOptions &options = {});
};

/// SinLoop at growing %n matches the interpreter, and the heap holds the
/// grid's `gridThreads(kernel)` threads (not the elements) of n entries.
void expectTheHeapFollowsTheBounds(Backend &backend,
                                   const std::function<int64_t(const Kernel &)> &gridThreads,
                                   const std::function<int64_t()> &lastHeapBytes);

/// A launch whose adstack is too small fails, naming the capacity needed,
/// and the next launch (sized) succeeds.
void expectOverflowIsAnErrorAndTheNextLaunchWorks(Backend &backend);

} // namespace qd::corpus
