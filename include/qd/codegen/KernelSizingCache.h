//===- qd/codegen/KernelSizingCache.h - Sizing once per kernel --*- C++ -*-===//
//
// Every backend needs a kernel's adstack sizing (docs/sizing.md) next to its
// code: Program::launch evaluates it against each launch's data, and every
// variant the backend compiles (bounds checks, stop checks, local tapes)
// shares it. KernelSizingCache computes it once per kernel, at the first
// request, and keeps it for the cache's lifetime, so that the runtimes take
// the sizing from code generation instead of running the analysis
// themselves (they link no analysis library).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/KernelSizing.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace qd {

class Kernel;

class KernelSizingCache {
public:
  /// The sizing of `kernel` (computed at the first call for it; a kernel
  /// must not change after that). Thread-safe; the reference stays valid
  /// while the cache lives.
  const KernelSizing &of(const Kernel &kernel);

private:
  std::mutex mutex_;
  std::map<uint64_t, std::unique_ptr<KernelSizing>> sizings_;
};

} // namespace qd
