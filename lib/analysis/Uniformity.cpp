//===- Uniformity.cpp - What differs between lanes ------------------------===//
#include "qd/analysis/Uniformity.h"

#include "TaskPrinting.h"
#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <map>
#include <unordered_map>
#include <vector>

namespace qd {
namespace {

/// An i32 value as a sum of values with integer coefficients plus a
/// constant, modulo 2^32 (i32 arithmetic wraps): enough to see that
/// `sub (add %lo, %hi), 1` and `add %hi, -1` with a literal begin 0 are both
/// begin + end - 1.
struct LinearSum {
  std::map<const Value *, uint32_t> terms;
  uint32_t constant = 0;

  void add(const Value *v, uint32_t coef, unsigned depth = 0) {
    if (auto c = evaluateConstantInt(v)) {
      constant += coef * static_cast<uint32_t>(*c);
      return;
    }
    auto *bin = dyn_cast<BinaryStmt>(v);
    if (bin && depth < 8 && bin->type() == Type::i32() &&
        (bin->op() == BinaryOp::Add || bin->op() == BinaryOp::Sub)) {
      add(bin->lhs(), coef, depth + 1);
      add(bin->rhs(), bin->op() == BinaryOp::Add ? coef : 0u - coef, depth + 1);
      return;
    }
    terms[v] += coef;
  }
  void add(Bound b, uint32_t coef) {
    if (b.isConstant())
      constant += coef * static_cast<uint32_t>(b.constant);
    else
      add(b.value, coef);
  }
  bool operator==(const LinearSum &o) const {
    auto nonZero = [](const LinearSum &s) {
      std::map<const Value *, uint32_t> t;
      for (auto [v, c] : s.terms)
        if (c != 0)
          t.emplace(v, c);
      return t;
    };
    return constant == o.constant && nonZero(*this) == nonZero(o);
  }
};

} // namespace

class UniformityBuilder {
public:
  UniformityBuilder(const ForStmt &task, const ElementOwnership &ownership, Uniformity &out)
      : task_(task), ownership_(ownership), out_(out) {}

  void run() {
    // Lanes run consecutive iterations: of a band, consecutive innermost
    // indices in one row (its outer indices are the same in every lane).
    if (task_.numDims() == 1)
      out_.varying_.insert(&task_);
    // The jumps of each loop, found once: asking each loop's body for them
    // walked a nest once per level (quadratic in its depth).
    bool loops = false;
    size_t statements = 0;
    walk(const_cast<ForStmt &>(task_).body(), [&](Stmt &s) {
      if (s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue) {
        const Stmt *loop = jumpTarget(s);
        jumpsTo_[loop].push_back(&s);
        for (const Stmt *p = s.parentStmt(); p && p != loop; p = p->parentStmt())
          if (p->kind() == StmtKind::If)
            ifsAroundJumps_.insert(p);
      }
      loops |= s.kind() == StmtKind::For || s.kind() == StmtKind::While;
      ++statements;
    });
    // Most statements of a task vary (those of a gradient, all but its
    // constants): room for them all, not a rehash per doubling.
    out_.varying_.reserve(statements);
    do {
      needPass_ = false;
      // Recomputed on every pass: a begin found varying later undoes them.
      out_.descendingLoops_.clear();
      out_.descendingCounters_.clear();
      // A continue only some lanes take masks the rest of the body.
      bool masked = hasDivergentJump(task_);
      if (masked)
        mark<const Stmt *>(out_.maskedLoops_, &task_);
      visitBlock(task_.body(), masked);
      // Until a pass ends that left no control flow to revisit: what a
      // statement reads is defined before it, so only a value marked after
      // its definition was visited (a local a later store makes varying, as
      // every gradient's adjoints) can change what an earlier statement
      // concluded, and markLater revisits the data that reads it at once.
    } while (needPass_);
    if (loops) // else no loop to find: a walk less of a huge straight-line task
      findAllLanesStores();
  }

private:
  template <typename T> void mark(absl::flat_hash_set<T> &set, T v) { set.insert(v); }

  /// Marks varying `v`, defined before the statement being visited, and
  /// everything that reads it as data, through its uses (a pass visited some
  /// of them already). Control flow that reads it needs another pass.
  void markLater(const Value *v) {
    if (!out_.varying_.insert(v).second)
      return;
    work_.push_back(v);
    while (!work_.empty()) {
      const Value *w = work_.back();
      work_.pop_back();
      for (const Use &u : w->uses())
        if (const Value *next = madeVarying(*u.user(), u);
            next && out_.varying_.insert(next).second)
          work_.push_back(next);
    }
  }

  /// What `user` makes varying when its operand `u` becomes varying (null:
  /// nothing), as visit concludes; null and another pass for control flow
  /// and for arithmetic on a loop index (descending counters are found per
  /// pass).
  const Value *madeVarying(const Stmt &user, const Use &u) {
    if (user.numBlocks() > 0) {
      needPass_ = true;
      return nullptr;
    }
    switch (user.kind()) {
    case StmtKind::Alloca:
    case StmtKind::AdStackAlloca:
    case StmtKind::AdStackPush:
    case StmtKind::AdStackPop:
    case StmtKind::AdStackAccAdjoint:
    case StmtKind::AdStackLoadTop:
    case StmtKind::AdStackLoadTopAdj:
    case StmtKind::TaskIndex:
      return nullptr; // decided by the mask, or varying anyway
    case StmtKind::LocalStore: {
      auto &st = cast<LocalStoreStmt>(user);
      return u.get() == st.value() ? st.local() : nullptr;
    }
    case StmtKind::LocalLoad:
    case StmtKind::GlobalLoad:
      return &user;
    default:
      for (unsigned i = 0; i < user.numOperands(); ++i)
        if (isa<ForStmt>(user.operand(i))) {
          needPass_ = true;
          return nullptr;
        }
      return &user;
    }
  }
  bool varying(const Value *v) const { return v && out_.isVarying(v); }
  bool anyOperandVarying(const Stmt &s) const {
    for (unsigned i = 0; i < s.numOperands(); ++i)
      if (varying(s.operand(i)))
        return true;
    return false;
  }

  /// A break or continue that only some of the lanes in its loop reach.
  bool jumpDivergesIn(const Stmt &jump, const Stmt &loop) const {
    for (const Stmt *p = jump.parentStmt(); p && p != &loop; p = p->parentStmt())
      if (auto *i = dyn_cast<IfStmt>(p); i && varying(i->cond()))
        return true;
    return false;
  }
  bool hasDivergentJump(const Stmt &loop) const {
    auto it = jumpsTo_.find(&loop);
    if (it == jumpsTo_.end())
      return false;
    for (const Stmt *jump : it->second)
      if (jumpDivergesIn(*jump, loop))
        return true;
    return false;
  }

  void visitBlock(Block &b, bool div) {
    for (Stmt &s : b)
      visit(s, div);
  }

  void visit(Stmt &s, bool div) {
    if (div)
      mark<const Stmt *>(out_.divergent_, &s);
    switch (s.kind()) {
    case StmtKind::If: {
      auto &i = cast<IfStmt>(s);
      bool d = div || varying(i.cond());
      // A jump inside now diverges: the loops it leaves, visited before
      // this if, are masked after all.
      if (varying(i.cond()) && ifsAroundJumps_.contains(&i) && varyingJumpIfs_.insert(&i).second)
        needPass_ = true;
      visitBlock(i.thenBlock(), d);
      visitBlock(i.elseBlock(), d);
      return;
    }
    case StmtKind::For: {
      auto &f = cast<ForStmt>(s);
      if (varying(f.beginValue()))
        mark<const Value *>(out_.varying_, &s); // each lane counts from its own start
      bool masked = varying(f.beginValue()) || varying(f.endValue()) || hasDivergentJump(s);
      if (masked)
        mark<const Stmt *>(out_.maskedLoops_, &s);
      if (masked && descends(f)) {
        out_.descendingLoops_.insert(&s);
        mark<const Value *>(out_.varying_, &s); // lane l's index is last_l - J
        for (const Use &u : f.uses())
          out_.descendingCounters_.emplace(u.user(), &f);
      }
      visitBlock(f.body(), div || masked);
      return;
    }
    case StmtKind::While: {
      bool masked = hasDivergentJump(s);
      if (masked)
        mark<const Stmt *>(out_.maskedLoops_, &s);
      visitBlock(cast<WhileStmt>(s).body(), div || masked);
      return;
    }
    case StmtKind::Serial:
      visitBlock(s.block(0), div);
      return;
    case StmtKind::Alloca:
      if (div) // zeroed under a partial mask: the lanes hold different values
        mark<const Value *>(out_.varying_, &s);
      return;
    case StmtKind::LocalStore: {
      auto &st = cast<LocalStoreStmt>(s);
      if (div || varying(st.value()))
        markLater(st.local());
      return;
    }
    case StmtKind::LocalLoad:
      if (varying(cast<LocalLoadStmt>(s).local()))
        mark<const Value *>(out_.varying_, &s);
      return;
    case StmtKind::GlobalLoad: {
      // A load of memory the task writes sees what the lanes wrote.
      if (anyOperandVarying(s) || ownership_.mayBeWritten(cast<GlobalLoadStmt>(s)))
        mark<const Value *>(out_.varying_, &s);
      return;
    }
    case StmtKind::AdStackAlloca:
      if (div)
        mark<const Value *>(out_.laneStacks_, &s);
      return;
    case StmtKind::AdStackPush:
    case StmtKind::AdStackPop:
    case StmtKind::AdStackAccAdjoint:
    case StmtKind::AdStackLoadTop:
    case StmtKind::AdStackLoadTopAdj: {
      if (div)
        mark<const Value *>(out_.laneStacks_, cast<AdStackOpStmt>(s).stack());
      // Entries are per lane: what a lane reads back is its own.
      if (s.kind() == StmtKind::AdStackLoadTop || s.kind() == StmtKind::AdStackLoadTopAdj)
        mark<const Value *>(out_.varying_, &s);
      return;
    }
    case StmtKind::TaskIndex: {
      int dim = taskDimOf(&s, task_);
      if (dim < 0 || unsigned(dim) + 1 == task_.numDims())
        mark<const Value *>(out_.varying_, &s);
      return;
    }
    default:
      if (anyOperandVarying(s) && !out_.descendingCounterOf(&s))
        mark<const Value *>(out_.varying_, &s);
      return;
    }
  }

  /// A loop from a uniform begin to a varying end, left by no lane alone,
  /// whose index is used only as `last - index` with last = begin + end - 1
  /// (see Uniformity.h, descending loop).
  bool descends(const ForStmt &f) const {
    if (varying(f.beginValue()) || !varying(f.endValue()) || hasDivergentJump(f) || !f.hasUses())
      return false;
    LinearSum last;
    last.add(f.begin(), 1);
    last.add(f.end(), 1);
    last.constant -= 1;
    for (const Use &u : f.uses()) {
      auto *sub = dyn_cast<BinaryStmt>(u.user());
      if (!sub || sub->op() != BinaryOp::Sub || u.index() != 1 || sub->lhs() == &f)
        return false;
      LinearSum lhs;
      lhs.add(sub->lhs(), 1);
      if (!(lhs == last))
        return false;
    }
    return true;
  }

  /// The local a statement writes (a store, or an alloca zeroing itself),
  /// or reads.
  static const Value *written(const Stmt &s) {
    if (auto *st = dyn_cast<LocalStoreStmt>(&s))
      return st->local();
    return s.kind() == StmtKind::Alloca ? &s : nullptr;
  }
  static const Value *read(const Stmt &s) {
    auto *ld = dyn_cast<LocalLoadStmt>(&s);
    return ld ? ld->local() : nullptr;
  }

  void findAllLanesStores() {
    std::vector<const Stmt *> loops; // masked, or under a partial mask
    walk(task_.body(), [&](Stmt &s) {
      if ((s.kind() == StmtKind::For || s.kind() == StmtKind::While) &&
          (out_.isMaskedLoop(&s) || out_.isDivergent(&s)))
        loops.push_back(&s);
    });
    if (loops.empty()) // most tasks: no map of every statement
      return;
    std::unordered_map<const Stmt *, size_t> order; // pre-order position in the task
    walk(task_.body(), [&](Stmt &s) { order.emplace(&s, order.size()); });
    for (const Stmt *loop : loops) {
      Block &body = loop->block(0);
      for (Stmt &s : body) {
        const Value *local = written(s);
        if (local && out_.isVarying(local) && killedAtStart(local, body) &&
            deadAfter(local, *loop, order))
          out_.allLanesStores_.insert(&s);
      }
    }
  }

  /// The first access to `local` in `body` (in program order) is a write at
  /// its top level.
  static bool killedAtStart(const Value *local, Block &body) {
    for (Stmt &s : body) {
      if (written(s) == local)
        return true;
      bool touched = read(s) == local;
      for (unsigned b = 0; b < s.numBlocks(); ++b)
        walk(s.block(b),
             [&](Stmt &inner) { touched |= written(inner) == local || read(inner) == local; });
      if (touched)
        return false;
    }
    return false;
  }

  /// No read of `local` can run after `loop`: every read outside it comes
  /// earlier in program order (a per-lane if runs its else arm after its
  /// then arm, which program order reflects), and no loop around `loop`
  /// reads it outside `loop` (its next iteration would).
  bool deadAfter(const Value *local, const Stmt &loop,
                 const std::unordered_map<const Stmt *, size_t> &order) const {
    bool dead = true;
    walk(task_.body(), [&](Stmt &s) {
      if (read(s) != local || s.parent()->isNestedIn(&loop.block(0)))
        return;
      if (order.at(&s) > order.at(&loop))
        dead = false;
      for (const Stmt *a = loop.parentStmt(); a && a != &task_; a = a->parentStmt())
        if ((a->kind() == StmtKind::For || a->kind() == StmtKind::While) &&
            s.parent()->isNestedIn(&a->block(0)))
          dead = false;
    });
    return dead;
  }

  const ForStmt &task_;
  std::unordered_map<const Stmt *, std::vector<const Stmt *>> jumpsTo_;
  const ElementOwnership &ownership_;
  Uniformity &out_;
  absl::flat_hash_set<const Stmt *> ifsAroundJumps_; // ifs with a jump out of a loop inside
  absl::flat_hash_set<const Stmt *> varyingJumpIfs_; // those of them found with a varying condition
  bool needPass_ = false;
  std::vector<const Value *> work_; // markLater's
};

Uniformity Uniformity::compute(const ForStmt &task, const ElementOwnership &ownership) {
  Uniformity out;
  UniformityBuilder(task, ownership, out).run();
  return out;
}

void printUniformity(const Kernel &kernel, std::ostream &os) {
  using namespace analysis_detail;
  ValueNamer names(kernel);
  forEachPrintedTask(kernel, names, os, "uniformity", [&](ForStmt &task) {
    Uniformity u = Uniformity::compute(task);
    auto line = [&](const Stmt &s) {
      std::string tags;
      auto tag = [&](bool on, const char *word) {
        if (on)
          tags += (tags.empty() ? "" : ", ") + std::string(word);
      };
      // Uniformity is a property of values (a stack's is its lane-stack tag).
      if (!s.type().isVoid() && !s.type().isAdStack())
        tag(true, u.isVarying(&s) ? "varying" : "uniform");
      tag(u.isDivergent(&s), "divergent");
      tag(u.isMaskedLoop(&s), "masked loop");
      tag(u.isDescendingLoop(&s), "descending loop");
      tag(u.descendingCounterOf(&s) != nullptr, "descending counter");
      tag(u.isLaneStack(&s), "lane stack");
      tag(u.storesAllLanes(&s), "all-lanes store");
      os << fmt::format("  {} {}  [{}]\n", lineCol(s), headline(s, names),
                        tags.empty() ? "-" : tags);
    };
    line(task);
    walk(task.body(), line);
  });
}

} // namespace qd
