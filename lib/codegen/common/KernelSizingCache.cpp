//===- KernelSizingCache.cpp - Sizing once per kernel ---------------------===//
#include "qd/codegen/KernelSizingCache.h"

#include "qd/analysis/AdStackSizing.h"
#include "qd/ir/Module.h"

namespace qd {

const KernelSizing &KernelSizingCache::of(const Kernel &kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<KernelSizing> &slot = sizings_[kernel.uniqueId()];
  if (!slot)
    slot = std::make_unique<KernelSizing>(sizeAdStacks(kernel));
  return *slot;
}

} // namespace qd
