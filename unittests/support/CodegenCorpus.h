//===- CodegenCorpus.h - Every corpus kernel through a code generator -*- C++ -*-===//
//
// What the GPU code generator tests share: the kernels of every .qd file
// under test/ and examples/ that parses and verifies, with the gradient and
// dual kernels autodiff builds for them, handed to a compile function on
// several threads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"

#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace qd::corpus {

/// A corpus kernel: the source chunk that holds it, where the chunk starts
/// (`file:line`) and its name. Derived kernels are rebuilt from the chunk
/// by the thread that compiles them.
struct CorpusKernel {
  std::string tag, source, name;
};

/// The kernels of the corpus, in file order.
std::vector<CorpusKernel> corpusKernels();

/// The counts and failures of a compile run (compile functions add theirs
/// under `mutex`).
struct CompileResults {
  std::mutex mutex;
  std::vector<std::string> failures;
  int kernels = 0, derived = 0;
  void fail(std::string what);
};

/// Calls `compile(kernel, tag, id)` on every kernel of `kernels` and on the
/// gradient and dual kernels autodiff builds for it (unless its module has
/// them already), on up to 8 threads; `id` is unique per call.
void compileCorpus(const std::vector<CorpusKernel> &kernels, CompileResults &results,
                   const std::function<void(const Kernel &, const std::string &, int)> &compile);

} // namespace qd::corpus
