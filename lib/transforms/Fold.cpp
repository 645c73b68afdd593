//===- Fold.cpp - Constant folding ----------------------------------------===//
#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/Passes.h"

#include <limits>

namespace qd {
namespace {

bool isFoldable(const Stmt &s) {
  switch (s.kind()) {
  case StmtKind::Binary:
  case StmtKind::Unary:
  case StmtKind::Cmp:
  case StmtKind::Select:
  case StmtKind::Cast:
    return true;
  default:
    return false;
  }
}

std::unique_ptr<ConstStmt> materialize(const ConstantValue &c) {
  return c.isFloat() ? ConstStmt::getFloat(c.type, c.f) : ConstStmt::getInt(c.type, c.i);
}

/// Replaces a constant-valued loop bound by a literal.
bool literalizeBound(ForStmt &loop, bool isBegin, unsigned dim) {
  Bound b = isBegin ? loop.begin(dim) : loop.end(dim);
  if (b.isConstant())
    return false;
  std::optional<int64_t> c = evaluateConstantInt(b.value);
  if (!c || !b.value->type().isScalar(ScalarType::I32) ||
      *c < std::numeric_limits<int32_t>::min() || *c > std::numeric_limits<int32_t>::max())
    return false;
  isBegin ? loop.setBegin(Bound(*c), dim) : loop.setEnd(Bound(*c), dim);
  return true;
}

class FoldPass : public KernelPass {
public:
  std::string_view name() const override { return "fold"; }

  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    bool changed = false;
    walkMutable(kernel.body(), [&](Stmt &s) {
      if (auto *loop = dyn_cast<ForStmt>(&s)) {
        for (unsigned d = 0; d < loop->numDims(); ++d) {
          changed |= literalizeBound(*loop, true, d);
          changed |= literalizeBound(*loop, false, d);
        }
        return false;
      }
      if (!isFoldable(s))
        return false;
      // A select on a constant condition is its chosen arm, constant or not.
      if (auto *sel = dyn_cast<SelectStmt>(&s)) {
        if (auto c = evaluateConstantInt(sel->cond())) {
          sel->replaceAndErase(*c ? sel->trueValue() : sel->falseValue());
          changed = true;
          return true;
        }
      }
      std::optional<ConstantValue> value = evaluateConstant(&s);
      if (!value)
        return false;
      std::unique_ptr<ConstStmt> c = materialize(*value);
      c->setName(s.name());
      c->setLoc(s.loc());
      ConstStmt *inserted = IRBuilder::before(s).insert(std::move(c));
      s.replaceAndErase(inserted);
      changed = true;
      return true;
    });
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createFoldPass() {
  return std::make_unique<FoldPass>();
}

} // namespace qd
