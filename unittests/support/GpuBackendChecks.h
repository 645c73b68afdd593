//===- GpuBackendChecks.h - What every GPU backend must do ------*- C++ -*-===//
//
// The checks the CUDA and AMDGPU backend tests run on their device (the
// same runtime, runtimes/gpu/GpuRuntime.h, behind two driver APIs): the
// corpus against the interpreter, the adstack heap following launch-time
// bounds, overflow reported and recovered from.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Corpus.h"

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

/// SinLoop at growing %n matches the interpreter, and the heap holds n
/// entries for each thread the launch ran (`lastThreads()`): no more than
/// the grid's `gridThreads(kernel)`, and no more whole blocks than the 5000
/// elements need.
void expectTheHeapFollowsTheBounds(Backend &backend,
                                   const std::function<int64_t(const Kernel &)> &gridThreads,
                                   const std::function<int64_t()> &lastThreads,
                                   const std::function<int64_t()> &lastHeapBytes);

/// With local tapes of 2048 bytes per thread (the default of the CUDA and
/// Vulkan backends): SinLoop with up to 512 entries runs from local arrays
/// (no heap), with more from the heap, a bound that comes back reuses its
/// code, and an explicit capacity below the need overflows from a local
/// tape as from the heap, with the real need.
void expectLocalTapesWhereStacksFit(Backend &backend,
                                    const std::function<int64_t()> &lastHeapBytes);

/// A launch whose adstack is too small fails, naming the capacity needed,
/// and the next launch (sized) succeeds.
void expectOverflowIsAnErrorAndTheNextLaunchWorks(Backend &backend);

/// Kernel @s, a loop-free band over 2-D ndarrays: o[i, j] = 2 p[i, j] +
/// p[max(i - 1, 0), j].
extern const char *const kLoopFreeStencil;

/// kLoopFreeStencil over `rows` x `cols` on `backend`, every element
/// checked against the host; the threads the launch ran (`lastThreads()`),
/// or -1 when it failed.
int64_t expectLoopFreeStencilMatchesTheHost(Backend &backend, int64_t rows, int64_t cols,
                                            const std::function<int64_t()> &lastThreads);

} // namespace qd::corpus
