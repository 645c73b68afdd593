//===- qd/codegen/CooperativeLayout.h - A task's second, cooperative form -*- C++ -*-===//
//
// What the GPU code generators (LLVM and SPIR-V) record in a launch whose
// task also has a cooperative form (qd/analysis/CooperativeTask.h), for the
// runtime to choose between the two at launch (KernelLayout::Launch).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/DeviceEntries.h"
#include "qd/abi/KernelLayout.h"
#include "qd/analysis/CooperativeTask.h"

namespace qd {

/// Records in `l` (the task's one-iteration-per-thread launch) its
/// cooperative function `<function>_coop`, the most iterations it pays
/// for, and its shared loops' bounds.
inline void addCooperativeForm(KernelLayout::Launch &l, const CooperativeTaskPlan &plan) {
  l.cooperativeFunction = l.function + "_coop";
  l.cooperativeIterations = plan.mostIterations;
  for (const CooperativeTaskPlan::SharedLoop &shared : plan.loops)
    for (const KernelLayout::TaskBound &b : boundsOf(*shared.loop))
      l.cooperativeLoops.push_back(b);
  l.cooperativeLeastLoopIterations = kLeastSharedLoopIterations;
}

} // namespace qd
