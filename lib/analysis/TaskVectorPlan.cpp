//===- TaskVectorPlan.cpp - Lanes of a parallel task ----------------------===//
#include "qd/analysis/TaskVectorPlan.h"

namespace qd {

TaskVectorPlan planTaskVectorization(const ForStmt &task, NdarrayAliasing aliasing) {
  TaskVectorPlan plan;
  plan.ownership = ElementOwnership::compute(task, aliasing);
  if (plan.ok())
    plan.uniformity = Uniformity::compute(task, plan.ownership);
  return plan;
}

} // namespace qd
