//===- TaskVectorPlan.cpp - Lanes of a parallel task ----------------------===//
#include "qd/analysis/TaskVectorPlan.h"

namespace qd {

TaskVectorPlan planTaskVectorization(const ForStmt &task) {
  TaskVectorPlan plan;
  plan.ownership = ElementOwnership::compute(task);
  plan.refused = plan.ownership.lanesRefused();
  if (plan.ok())
    plan.uniformity = Uniformity::compute(task, plan.ownership);
  return plan;
}

} // namespace qd
