//===- StopChecks.cpp - Which loops read the stop word --------------------===//
#include "qd/analysis/StopChecks.h"

#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/Casting.h"
#include "qd/ir/Module.h"

namespace qd {
namespace {

uint64_t saturatingMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

class Planner {
public:
  Planner(uint64_t minWork, std::unordered_set<const Stmt *> &checked)
      : minWork_(minWork), checked_(checked) {}

  /// The iterations of unchecked loops one run of `block` takes at most,
  /// marking the loops in it that check.
  uint64_t blockWork(const Block &block) {
    uint64_t work = 0;
    for (const Stmt &s : const_cast<Block &>(block)) // Block has no const iteration
      work = saturatingAdd(work, stmtWork(s));
    return work;
  }

private:
  uint64_t stmtWork(const Stmt &s) {
    uint64_t inner = 0; // both branches of an `if` count
    for (unsigned i = 0; i < s.numBlocks(); ++i)
      inner = saturatingAdd(inner, blockWork(s.block(i)));
    auto *loop = dyn_cast<ForStmt>(&s);
    if (!loop && !isa<WhileStmt>(s))
      return inner;
    std::optional<int64_t> trips = loop ? constantTripCount(*loop) : std::nullopt;
    // Each iteration counts, with the unchecked iterations of its body.
    uint64_t work =
        trips ? saturatingMul(static_cast<uint64_t>(*trips), saturatingAdd(inner, 1)) : UINT64_MAX;
    if (work < minWork_)
      return work;
    checked_.insert(&s);
    return 0; // its iterations check
  }

  uint64_t minWork_;
  std::unordered_set<const Stmt *> &checked_;
};

} // namespace

StopCheckPlan::StopCheckPlan(const Kernel &kernel, uint64_t minWork) {
  Planner(minWork, checked_).blockWork(kernel.body());
}

} // namespace qd
