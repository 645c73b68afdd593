//===- TaskVectorPlan.cpp - Lanes of a parallel task ----------------------===//
#include "qd/analysis/TaskVectorPlan.h"

namespace qd {

TaskVectorPlan planTaskVectorization(const ForStmt &task, TaskAssumptions assume) {
  TaskVectorPlan plan;
  plan.ownership = ElementOwnership::compute(task, assume);
  if (plan.ok())
    plan.uniformity = Uniformity::compute(task, plan.ownership);
  return plan;
}

} // namespace qd
