//===- ReverseAD.cpp - Reverse-mode automatic differentiation -------------===//
//
// Terms used below (see also AutoDiff.h):
//  - the *source* kernel is a private copy of the user's kernel in which
//    break/continue were lowered to flags (lowerJumps), so that every loop
//    body is straight-line code and ifs, plus at most one final
//    `if <flag> { break }`;
//  - a *frame* is a block of the gradient kernel that runs the forward code
//    of a source block (Fwd) followed by its reverse (Adj): a task body, or
//    one iteration of a reversed loop. Forward values at the frame's top
//    level dominate the reverse code; values computed inside if arms are
//    saved to locals ("backups") declared at the frame's top;
//  - *Record(L)* runs loop L forward once, pushing the loop-carried locals
//    the reverse needs at the start of every iteration; *Rev(L)* runs the
//    iterations backwards, each one a new frame.
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackSizing.h"
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace qd {
namespace {

bool isFloatValue(const Value *v) {
  return v && v->type().isFloatScalar();
}

//===----------------------------------------------------------------------===//
// Lowering break/continue to flags
//===----------------------------------------------------------------------===//

class JumpLowering {
public:
  /// Lowers the jumps of every loop; returns the loops that may break.
  std::unordered_set<const Stmt *> run(Kernel &k) {
    std::vector<Stmt *> loops;
    walkPostOrder(k.body(), [&](Stmt &s) {
      if (s.kind() == StmtKind::For || s.kind() == StmtKind::While)
        loops.push_back(&s);
    });
    for (Stmt *loop : loops)
      lowerLoop(*loop);
    return breaking_;
  }

private:
  static bool hasJump(Block &b) {
    for (Stmt &s : b) {
      if (s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue)
        return true;
      if (s.kind() == StmtKind::If &&
          (hasJump(cast<IfStmt>(s).thenBlock()) || hasJump(cast<IfStmt>(s).elseBlock())))
        return true;
    }
    return false;
  }

  void lowerLoop(Stmt &loop) {
    Block &body = loop.block(0);
    if (!hasJump(body))
      return;
    IRBuilder b(body);
    b.setInsertionPoint(body, body.begin());
    b.setLocation(loop.loc());
    state_ = b.alloca(ScalarType::I32); // fresh (0) every iteration
    bool mayBreak = false;
    lowerBlock(body, mayBreak);
    if (mayBreak) {
      IRBuilder e(body);
      e.setLocation(loop.loc());
      Value *st = e.load(state_);
      Value *isBreak = e.cmp(CmpPredicate::Eq, st, e.i32(2));
      auto scope = e.ifThen(isBreak);
      e.brk();
      breaking_.insert(&loop);
    }
  }

  /// Replaces jumps by flag stores and guards what follows a statement that
  /// may jump. Returns whether `b` may jump.
  bool lowerBlock(Block &b, bool &mayBreak) {
    bool jumps = false;
    for (auto it = b.begin(); it != b.end();) {
      Stmt &s = *it;
      ++it;
      bool here = false;
      if (s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue) {
        IRBuilder::before(s).store(state_,
                                   IRBuilder::before(s).i32(s.kind() == StmtKind::Break ? 2 : 1));
        mayBreak |= s.kind() == StmtKind::Break;
        s.erase();
        here = true; // the verifier guarantees nothing follows a jump
      } else if (auto *i = dyn_cast<IfStmt>(&s)) {
        bool t = lowerBlock(i->thenBlock(), mayBreak);
        bool e = lowerBlock(i->elseBlock(), mayBreak);
        here = t || e;
      }
      if (here && it != b.end()) {
        // Guard the rest of the block: `if state == 0 { ... }`.
        IRBuilder g = IRBuilder::before(*it);
        g.setLocation(it->loc());
        Value *st = g.load(state_);
        Value *running = g.cmp(CmpPredicate::Eq, st, g.i32(0));
        IfStmt *guard = g.insert(std::make_unique<IfStmt>(running));
        while (it != b.end()) {
          Stmt &moved = *it;
          ++it;
          guard->thenBlock().push_back(moved.remove());
        }
        lowerBlock(guard->thenBlock(), mayBreak);
      }
      jumps |= here;
    }
    return jumps;
  }

  AllocaStmt *state_ = nullptr;
  std::unordered_set<const Stmt *> breaking_;
};

//===----------------------------------------------------------------------===//
// Analyses on the source kernel
//===----------------------------------------------------------------------===//

bool hasGrad(const GlobalAccessStmt &g) {
  if (g.isField())
    return g.field()->hasGrad();
  auto *a = dyn_cast<Argument>(g.ndarray());
  return a && a->hasGrad();
}

/// Which float values carry a derivative that reaches an output.
struct Activity {
  std::unordered_set<const Value *> varied, useful;
  bool active(const Value *v) const { return varied.count(v) && useful.count(v); }

  explicit Activity(Kernel &k) {
    std::vector<Stmt *> stmts;
    walk(k.body(), [&](Stmt &s) { stmts.push_back(&s); });
    bool changed = true;
    while (changed) {
      changed = false;
      auto mark = [&](std::unordered_set<const Value *> &set, const Value *v) {
        if (v && set.insert(v).second)
          changed = true;
      };
      for (Stmt *s : stmts) {
        switch (s->kind()) {
        case StmtKind::GlobalLoad:
          if (isFloatValue(s) && hasGrad(cast<GlobalAccessStmt>(*s)))
            mark(varied, s);
          break;
        case StmtKind::GlobalStore:
        case StmtKind::AtomicAdd: {
          auto &g = cast<GlobalAccessStmt>(*s);
          Value *v = s->operand(s->numOperands() - 1);
          if (hasGrad(g) && isFloatValue(v))
            mark(useful, v);
          break;
        }
        case StmtKind::LocalStore: {
          auto &st = cast<LocalStoreStmt>(*s);
          if (varied.count(st.value()))
            mark(varied, st.local());
          if (useful.count(st.local()))
            mark(useful, st.value());
          break;
        }
        case StmtKind::LocalLoad: {
          auto &ld = cast<LocalLoadStmt>(*s);
          if (varied.count(ld.local()))
            mark(varied, s);
          if (useful.count(s))
            mark(useful, ld.local());
          break;
        }
        case StmtKind::Binary:
        case StmtKind::Unary:
        case StmtKind::Select:
        case StmtKind::Cast: {
          if (!isFloatValue(s))
            break;
          unsigned first = s->kind() == StmtKind::Select ? 1 : 0;
          if (auto *c = dyn_cast<CastStmt>(s); c && !isFloat(c->from()))
            break; // int -> float: a constant as far as derivatives go
          for (unsigned i = first; i < s->numOperands(); ++i) {
            if (varied.count(s->operand(i)))
              mark(varied, s);
            if (useful.count(s) && isFloatValue(s->operand(i)))
              mark(useful, s->operand(i));
          }
          break;
        }
        default:
          break;
        }
      }
    }
  }
};

//===----------------------------------------------------------------------===//
// The generator
//===----------------------------------------------------------------------===//

struct Frame {
  Frame *parent = nullptr;
  Block *block = nullptr;
  std::unordered_map<const Value *, Value *> direct;
  std::unordered_map<const Value *, AllocaStmt *> backup;
  std::unordered_map<const Value *, AllocaStmt *> adj;
};

/// Per source loop: what Record/Rev need.
struct LoopPlan {
  std::vector<AllocaStmt *> perIteration; // source locals pushed every iteration
  std::vector<AllocaStmt *> atEntry;      // source locals saved once before the loop
  bool counted = false;                   // while loop or a loop that may break
  /// Taped: a range-for nested in another range-for P whose iterations it
  /// records while P is recorded (pushes in Plain(P)), so that the reverse
  /// frames of P reverse it without running it again (see decideTaping).
  bool taped = false;
  /// Values defined outside the loop that its reverse needs.
  std::vector<const Value *> outsideNeeds;
};

class GradientBuilder {
public:
  GradientBuilder(Kernel &source, Kernel &grad, const std::unordered_set<const Stmt *> &breaking,
                  const ReverseADOptions &options,
                  const std::unordered_set<const Stmt *> &neverTape)
      : src_(source), grad_(grad), breaking_(breaking), options_(options), neverTape_(neverTape),
        activity_(source) {}

  /// Taped source loops and the stacks they push (for the sizing check in
  /// buildGradientKernel).
  const std::unordered_map<const AdStackAllocaStmt *, const Stmt *> &tapedStacks() const {
    return tapedStacks_;
  }

  absl::Status run() {
    if (absl::Status s = check(); !s.ok())
      return s;
    computeNeeded();
    planLoops();
    // Launch-time statements first, then the tasks in reverse order.
    Frame kernelFrame;
    kernelFrame.block = &grad_.body();
    for (unsigned i = 0; i < src_.numArguments(); ++i)
      kernelFrame.direct[src_.argument(i)] = grad_.argument(i);
    std::vector<Stmt *> tasks;
    IRBuilder top(grad_);
    for (Stmt &s : src_.body()) {
      if (s.isTask()) {
        tasks.push_back(&s);
        continue;
      }
      top.setLocation(s.loc());
      cloneLeaf(s, top, kernelFrame, /*inArm=*/false);
    }
    for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) {
      Stmt &task = **it;
      top.setLocation(task.loc());
      Frame f;
      f.parent = &kernelFrame;
      if (auto *loop = dyn_cast<ForStmt>(&task)) {
        auto scope = top.parallelFor(bound(loop->begin(), kernelFrame, top),
                                     bound(loop->end(), kernelFrame, top));
        f.block = &scope.stmt()->body();
        f.direct[loop] = scope.index();
        markOwner(loop->body(), &f);
        frame(loop->body(), f);
      } else {
        auto scope = top.serial();
        f.block = &cast<SerialStmt>(scope.stmt())->body();
        markOwner(task.block(0), &f);
        frame(task.block(0), f);
      }
    }
    return absl::OkStatus();
  }

private:
  //===--- checks ---------------------------------------------------------===//

  absl::Status error(const Stmt &s, const std::string &what) {
    return absl::InvalidArgumentError(fmt::format("{}: error: reverse-ad: {} (in kernel @{}: {})",
                                                  s.loc().str(), what, src_.name(), printStmt(s)));
  }

  absl::Status check() {
    absl::Status status;
    walk(src_.body(), [&](Stmt &s) {
      if (!status.ok())
        return;
      if (isa<AdStackOpStmt>(&s) || isa<AdStackAllocaStmt>(&s)) {
        status = error(s, "the kernel already uses adstacks; differentiate the kernel before "
                          "adding them");
        return;
      }
      if (!activity_.active(&s))
        return;
      if (!s.parentStmt() && !s.isTask()) {
        status = error(s, "this launch-time statement computes a value that the gradient flows "
                          "through; load it inside the task that uses it");
        return;
      }
      if (auto *u = dyn_cast<UnaryStmt>(&s);
          u && (u->op() == UnaryOp::Floor || u->op() == UnaryOp::Ceil))
        status = error(s, fmt::format("'{}' is not differentiable; cast the value to an integer "
                                      "to stop its gradient explicitly",
                                      toString(u->op())));
      if (auto *b = dyn_cast<BinaryStmt>(&s); b && b->op() == BinaryOp::Rem)
        status = error(s, "'rem' is not differentiable; compute it from values without a "
                          "gradient");
    });
    return status;
  }

  //===--- what the reverse needs ------------------------------------------===//

  void need(const Value *v) {
    if (!v || !isa<Stmt>(v))
      return;
    if (needScope_ && !needScope_->count(cast<Stmt>(v))) {
      if (outsideNeeds_ && outsideSeen_.insert(v).second)
        outsideNeeds_->push_back(v);
      return;
    }
    if (needTarget_->insert(v).second)
      work_.push_back(v);
  }

  void computeNeeded() {
    std::vector<Stmt *> stmts;
    walk(src_.body(), [&](Stmt &s) { stmts.push_back(&s); });
    computeNeededIn(stmts, nullptr, needed_, neededLocals_);
  }

  /// The values whose primal the reverse of `stmts` needs (non-linear
  /// operands, conditions, bounds, indices, and what they are computed
  /// from), following operands only within `scope` when it is given.
  /// `roots` are needed in any case; values outside `scope` that would be
  /// needed are listed in `outside`.
  void computeNeededIn(const std::vector<Stmt *> &stmts,
                       const std::unordered_set<const Stmt *> *scope,
                       std::unordered_set<const Value *> &values,
                       std::unordered_set<const Value *> &locals,
                       const std::vector<const Value *> &roots = {},
                       std::vector<const Value *> *outside = nullptr) {
    needTarget_ = &values;
    needScope_ = scope;
    outsideNeeds_ = outside;
    outsideSeen_.clear();
    for (const Value *r : roots)
      need(r);
    std::unordered_map<const Value *, std::vector<LocalStoreStmt *>> storesTo;
    for (Stmt *s : stmts) {
      if (auto *st = dyn_cast<LocalStoreStmt>(s))
        storesTo[st->local()].push_back(st);
      switch (s->kind()) {
      case StmtKind::If:
        need(cast<IfStmt>(s)->cond());
        break;
      case StmtKind::For: {
        auto *f = cast<ForStmt>(s);
        need(f->beginValue());
        need(f->endValue());
        break;
      }
      case StmtKind::GlobalLoad:
      case StmtKind::GlobalStore:
      case StmtKind::AtomicAdd: {
        auto &g = cast<GlobalAccessStmt>(*s);
        for (unsigned i = 0; i < g.numIndices(); ++i)
          need(g.index(i));
        break;
      }
      case StmtKind::Binary: {
        if (!activity_.active(s))
          break;
        auto *b = cast<BinaryStmt>(s);
        bool la = activity_.active(b->lhs()), ra = activity_.active(b->rhs());
        switch (b->op()) {
        case BinaryOp::Mul:
          if (la)
            need(b->rhs());
          if (ra)
            need(b->lhs());
          break;
        case BinaryOp::Div:
          need(b->rhs());
          if (ra)
            need(b->lhs());
          break;
        case BinaryOp::Min:
        case BinaryOp::Max:
        case BinaryOp::Pow:
        case BinaryOp::Atan2:
          need(b->lhs());
          need(b->rhs());
          break;
        default:
          break;
        }
        break;
      }
      case StmtKind::Unary: {
        if (!activity_.active(s))
          break;
        auto *u = cast<UnaryStmt>(s);
        switch (u->op()) {
        case UnaryOp::Exp:
        case UnaryOp::Sqrt:
        case UnaryOp::Tanh:
          need(u); // the derivative is written with the result
          break;
        case UnaryOp::Neg:
          break;
        default:
          need(u->input());
        }
        break;
      }
      case StmtKind::Select:
        if (activity_.active(s))
          need(cast<SelectStmt>(s)->cond());
        break;
      default:
        break;
      }
    }
    // Within one iteration of the loop `scope` covers, a store reaches a
    // load if it comes first, or if both sit in a loop nested in the scope
    // (through that loop's back edge). A store that comes later reaches the
    // load only through the scope loop's back edge, that is, through the
    // value at the start of the next iteration, which Rev(L) restores from
    // the loop's adstack: its value is not needed for this loop.
    std::unordered_map<const Stmt *, size_t> position;
    if (scope)
      for (size_t i = 0; i < stmts.size(); ++i)
        position[stmts[i]] = i;
    auto reaches = [&](const LocalStoreStmt *st, const LocalLoadStmt *ld) {
      if (!scope || position.at(st) < position.at(ld))
        return true;
      for (const Stmt *p = ld->parentStmt(); p && scope->count(p); p = p->parentStmt())
        if ((p->kind() == StmtKind::For || p->kind() == StmtKind::While) &&
            st->parent()->isNestedIn(&p->block(0)))
          return true;
      return false;
    };
    while (!work_.empty()) {
      const Value *v = work_.back();
      work_.pop_back();
      const auto *s = cast<Stmt>(v);
      for (unsigned i = 0; i < s->numOperands(); ++i)
        need(s->operand(i));
      if (auto *ld = dyn_cast<LocalLoadStmt>(s)) {
        locals.insert(ld->local());
        for (LocalStoreStmt *st : storesTo[ld->local()])
          if (reaches(st, ld))
            need(st->value());
      }
    }
    needScope_ = nullptr;
    outsideNeeds_ = nullptr;
  }

  void planLoops() {
    walk(src_.body(), [&](Stmt &s) {
      if ((s.kind() == StmtKind::For || s.kind() == StmtKind::While) && !s.isTask())
        plans_[&s] = planLoop(s);
    });
    if (!options_.tapeNestedLoops)
      return;
    decideTaping();
    // A loop with taped loops inside needs less: plan again, inner loops
    // first, each taped loop seen as a black box.
    std::unordered_set<const Stmt *> holdsTaped;
    for (const auto &[loop, plan] : plans_) {
      // Stop at an ancestor already marked: its own ancestors are too.
      const Stmt *p = plan.taped ? loop->parentStmt() : nullptr;
      while (p && holdsTaped.insert(p).second)
        p = p->parentStmt();
    }
    walkPostOrder(src_.body(), [&](Stmt &s) {
      if (!holdsTaped.count(&s) || s.isTask() ||
          (s.kind() != StmtKind::For && s.kind() != StmtKind::While))
        return;
      bool taped = plans_.at(&s).taped;
      plans_[&s] = planLoop(s);
      plans_[&s].taped = taped;
    });
  }

  /// What Record(L)/Rev(L) keep for `loop`. A loop-carried local is saved
  /// only if the reverse of the loop's own body needs its value; what later
  /// code needs is recomputed by the forward run of the loop. A loop taped
  /// inside (through taped loops only) is a black box: Plain(L) filled its
  /// stacks and its reverse restores its locals from them, so it needs from
  /// `loop`'s reverse frame only its bounds, the locals it saves at entry
  /// and the outside values its reverse reads.
  LoopPlan planLoop(Stmt &s) {
    std::vector<Stmt *> inside;
    std::vector<const Value *> roots;
    // `boxing`: no untaped loop lies between `s` and `block`. Below an
    // untaped loop Q, the taped loops are pushed by Record(Q), which runs
    // in the reverse frames of `s` and needs their values from them.
    auto collect = [&](auto &self, Block &block, bool boxing) -> void {
      for (Stmt &inner : block) {
        inside.push_back(&inner);
        auto it = plans_.find(&inner);
        if (it == plans_.end() || !it->second.taped || !boxing) {
          bool loop = inner.kind() == StmtKind::For || inner.kind() == StmtKind::While;
          for (unsigned i = 0; i < inner.numBlocks(); ++i)
            self(self, inner.block(i), boxing && !loop);
          continue;
        }
        const LoopPlan &child = it->second;
        walk(inner.block(0), [&](Stmt &t) {
          auto *ld = dyn_cast<LocalLoadStmt>(&t);
          if (ld && std::find(child.atEntry.begin(), child.atEntry.end(), ld->local()) !=
                        child.atEntry.end()) {
            inside.push_back(&t);
            roots.push_back(&t);
          }
        });
        roots.insert(roots.end(), child.outsideNeeds.begin(), child.outsideNeeds.end());
      }
    };
    collect(collect, s.block(0), /*boxing=*/true);
    std::unordered_set<const Stmt *> scope(inside.begin(), inside.end());
    std::unordered_set<const Value *> neededInside, read;
    LoopPlan plan;
    computeNeededIn(inside, &scope, neededInside, read, roots, &plan.outsideNeeds);
    std::unordered_set<const Value *> written;
    std::vector<AllocaStmt *> order;
    walk(s.block(0), [&](Stmt &inner) {
      Value *local = nullptr;
      if (auto *ld = dyn_cast<LocalLoadStmt>(&inner)) {
        local = ld->local();
      } else if (auto *st = dyn_cast<LocalStoreStmt>(&inner)) {
        local = st->local();
        written.insert(local);
      }
      if (local) {
        auto *a = cast<AllocaStmt>(local);
        if (!a->parent()->isNestedIn(&s.block(0)) &&
            std::find(order.begin(), order.end(), a) == order.end())
          order.push_back(a);
      }
    });
    // A written local is pushed only if a needed load can see the value it
    // had when the iteration started: not if a store at the top level of
    // the body (which every iteration runs: jumps are flags by now) comes
    // first. Rev(L) replays that store before the load.
    std::unordered_map<const Stmt *, size_t> position;
    for (size_t i = 0; i < inside.size(); ++i)
      position.emplace(inside[i], i);
    std::unordered_map<const Value *, size_t> firstKill;
    for (Stmt &t : s.block(0))
      if (auto *st = dyn_cast<LocalStoreStmt>(&t))
        firstKill.emplace(st->local(), position.at(&t));
    std::unordered_set<const Value *> exposed;
    for (Stmt *t : inside)
      if (auto *ld = dyn_cast<LocalLoadStmt>(t); ld && neededInside.count(ld)) {
        auto kill = firstKill.find(ld->local());
        if (kill == firstKill.end() || kill->second > position.at(t))
          exposed.insert(ld->local());
      }
    plan.counted = s.kind() == StmtKind::While || breaking_.count(&s);
    for (AllocaStmt *a : order) {
      if (!read.count(a))
        continue;
      if (!written.count(a))
        plan.atEntry.push_back(a);
      else if (exposed.count(a))
        plan.perIteration.push_back(a);
    }
    return plan;
  }

  /// A range-for L without a break whose nearest enclosing loop P is a
  /// non-task range-for without a break is taped, unless code after L in
  /// P's body reads a local that L writes. Without taping, every reverse
  /// frame of P runs Record(L) again: L's forward code runs twice in all,
  /// and L's stacks hold one iteration of P at a time. Taped, Plain(P)
  /// pushes L's locals in every iteration of P (the stacks hold all of P's
  /// iterations, sized by a sum over P's range), and the reverse frames of
  /// P only save L's entry locals where L was: the locals L writes keep
  /// the values they had before L, which is why nothing after L may read
  /// them. P must not be a while loop: a stack pushed in a while loop has
  /// no launch-time size.
  void decideTaping() {
    walk(src_.body(), [&](Stmt &s) {
      if (s.kind() != StmtKind::For || s.isTask() || neverTape_.count(&s))
        return;
      LoopPlan &plan = plans_.at(&s);
      Stmt *parent = enclosingLoop(s);
      if (plan.counted || !parent || parent->isTask() || parent->kind() != StmtKind::For ||
          plans_.at(parent).counted)
        return;
      std::unordered_set<const Value *> writes;
      walk(s.block(0), [&](Stmt &inner) {
        if (auto *st = dyn_cast<LocalStoreStmt>(&inner))
          writes.insert(st->local());
      });
      bool after = false, readAfter = false;
      walk(parent->block(0), [&](Stmt &t) {
        if (&t == &s) {
          after = true;
          return;
        }
        if (!after || t.parent()->isNestedIn(&s.block(0)))
          return;
        if (auto *ld = dyn_cast<LocalLoadStmt>(&t); ld && writes.count(ld->local()))
          readAfter = true;
      });
      plan.taped = !readAfter;
    });
  }

  void markOwner(Block &b, Frame *f) {
    for (Stmt &s : b) {
      owner_[&s] = f;
      if (s.kind() == StmtKind::If)
        for (unsigned i = 0; i < 2; ++i)
          markOwner(s.block(i), f);
    }
  }

  //===--- value lookup -----------------------------------------------------===//

  /// The forward value of source value `v` at the builder's position.
  Value *primal(const Value *v, Frame &f, IRBuilder &b) {
    if (!v)
      return nullptr;
    for (auto it = armScopes_.rbegin(); it != armScopes_.rend(); ++it)
      if (auto found = it->find(v); found != it->end())
        return found->second;
    for (Frame *fr = &f; fr; fr = fr->parent) {
      if (auto it = fr->direct.find(v); it != fr->direct.end())
        return it->second;
      if (auto it = fr->backup.find(v); it != fr->backup.end())
        return b.load(it->second);
    }
    // A value computed inside an if arm and not visible here is recomputed:
    // nothing the gradient kernel runs writes primal memory, and only loads
    // of locals (which do change) are saved in backups.
    if (auto *s = dyn_cast<Stmt>(v); s && isRecomputable(*s)) {
      ValueMap map;
      for (unsigned i = 0; i < s->numOperands(); ++i)
        if (Value *op = s->operand(i); op && !map.count(op))
          map[op] = primal(op, f, b);
      return b.insert(cloneStmt(*s, map));
    }
    internalError_ = fmt::format("no forward value for {}", printStmt(*cast<Stmt>(v)));
    return b.constInt(ScalarType::I32, 0);
  }

  Bound bound(Bound src, Frame &f, IRBuilder &b) {
    return src.isConstant() ? src : Bound(primal(src.value, f, b));
  }

  IRBuilder atTop(Frame &f) {
    IRBuilder b(*f.block);
    b.setInsertionPoint(*f.block, f.block->begin());
    return b;
  }

  //===--- forward code ----------------------------------------------------===//

  bool wanted(const Stmt &s) const {
    if (needed_.count(&s))
      return true;
    if (auto *a = dyn_cast<AllocaStmt>(&s))
      return neededLocals_.count(a) > 0;
    if (auto *st = dyn_cast<LocalStoreStmt>(&s))
      return neededLocals_.count(st->local()) > 0;
    return false;
  }

  /// Clones a non-container statement with operands looked up in `f`.
  Value *cloneLeaf(const Stmt &s, IRBuilder &b, Frame &f, bool inArm) {
    ValueMap map;
    for (unsigned i = 0; i < s.numOperands(); ++i)
      if (Value *op = s.operand(i); op && !map.count(op))
        map[op] = primal(op, f, b);
    Stmt *c = b.insert(cloneStmt(s, map));
    if (!c->type().isVoid()) {
      if (!inArm) {
        f.direct[&s] = c;
      } else {
        armScopes_.back()[&s] = c;
        if (s.kind() == StmtKind::LocalLoad) { // the only value that cannot be recomputed
          AllocaStmt *save = atTop(f).alloca(c->type().element());
          b.store(save, c);
          f.backup[&s] = save;
        }
      }
    }
    return c;
  }

  /// Fwd(B): the forward code of a frame's block (and of its if arms).
  void forward(Block &block, IRBuilder &b, Frame &f, bool inArm) {
    for (Stmt &s : block) {
      b.setLocation(s.loc());
      switch (s.kind()) {
      case StmtKind::If: {
        auto &i = cast<IfStmt>(s);
        auto scope = b.ifThen(primal(i.cond(), f, b));
        armScopes_.emplace_back();
        forward(i.thenBlock(), b, f, true);
        armScopes_.back().clear();
        scope.otherwise();
        forward(i.elseBlock(), b, f, true);
        armScopes_.pop_back();
        break;
      }
      case StmtKind::For:
      case StmtKind::While:
        if (plans_.at(&s).taped)
          saveAtEntry(s, b, f); // its iterations were pushed by Plain(parent)
        else
          record(s, b, f);
        break;
      case StmtKind::Break:
      case StmtKind::Continue:
        break; // the iteration ends here anyway
      case StmtKind::Alloca:
        if (wanted(s)) // hoisted: a frame runs each statement at most once
          f.direct[&s] = atTop(f).alloca(cast<AllocaStmt>(s).elementType());
        break;
      default:
        if (wanted(s))
          cloneLeaf(s, b, f, inArm);
      }
    }
  }

  /// Plain(B): forward code inside a recorded loop (loop exits are real).
  /// Nothing is kept for the reverse except, while `taping` (B belongs to
  /// the recorded loop or to loops taped inside it), the iterations of
  /// taped loops, whose stacks live in the recording frame `f`.
  void plain(Block &block, IRBuilder &b, Frame &f, ValueMap &map, bool taping) {
    for (Stmt &s : block) {
      b.setLocation(s.loc());
      switch (s.kind()) {
      case StmtKind::If: {
        auto &i = cast<IfStmt>(s);
        auto scope = b.ifThen(lookup(i.cond(), f, b, map));
        plain(i.thenBlock(), b, f, map, taping);
        scope.otherwise();
        plain(i.elseBlock(), b, f, map, taping);
        break;
      }
      case StmtKind::For: {
        auto &l = cast<ForStmt>(s);
        Bound lo = l.begin().isConstant() ? l.begin() : Bound(lookup(l.beginValue(), f, b, map));
        Bound hi = l.end().isConstant() ? l.end() : Bound(lookup(l.endValue(), f, b, map));
        bool tape = taping && plans_.at(&l).taped;
        if (tape)
          allocateStacks(l, f, /*taped=*/true);
        auto scope = b.forRange(lo, hi);
        map[&l] = scope.index();
        if (tape)
          for (AllocaStmt *a : plans_.at(&l).perIteration)
            b.adstackPush(stacks_.at({&l, a}), b.load(lookup(a, f, b, map)));
        plain(l.body(), b, f, map, tape);
        break;
      }
      case StmtKind::While: {
        auto scope = b.whileLoop();
        plain(s.block(0), b, f, map, /*taping=*/false);
        break;
      }
      case StmtKind::Break:
        b.brk();
        break;
      case StmtKind::Continue:
        b.cont();
        break;
      default:
        if (!wanted(s))
          break;
        ValueMap m;
        for (unsigned i = 0; i < s.numOperands(); ++i)
          if (Value *op = s.operand(i); op && !m.count(op))
            m[op] = lookup(op, f, b, map);
        map[&s] = b.insert(cloneStmt(s, m));
      }
    }
  }

  Value *lookup(const Value *v, Frame &f, IRBuilder &b, ValueMap &map) {
    if (auto it = map.find(v); it != map.end())
      return it->second;
    return primal(v, f, b);
  }

  AllocaStmt *counterOf(const Stmt &loop, Frame &f) {
    auto &c = counters_[&loop];
    if (!c)
      c = atTop(f).alloca(ScalarType::I32);
    return c;
  }

  /// Saves the locals that `loop` reads and does not write, which Rev(L)
  /// restores before running the iterations backwards.
  void saveAtEntry(Stmt &loop, IRBuilder &b, Frame &f) {
    for (AllocaStmt *a : plans_.at(&loop).atEntry) {
      AllocaStmt *&save = entrySaves_[{&loop, a}];
      save = atTop(f).alloca(a->elementType());
      b.store(save, b.load(primal(a, f, b)));
    }
  }

  /// The stacks of `loop`'s per-iteration locals, at the top of frame `f`.
  void allocateStacks(Stmt &loop, Frame &f, bool taped) {
    for (AllocaStmt *a : plans_.at(&loop).perIteration) {
      AdStackAllocaStmt *stack = atTop(f).adstackAlloca(a->elementType());
      stack->setLoc(loop.loc());
      stacks_[{&loop, a}] = stack;
      if (taped)
        tapedStacks_[stack] = &loop;
    }
  }

  /// Record(L).
  void record(Stmt &loop, IRBuilder &b, Frame &f) {
    const LoopPlan &plan = plans_.at(&loop);
    saveAtEntry(loop, b, f);
    allocateStacks(loop, f, /*taped=*/false);
    AllocaStmt *counter = plan.counted ? counterOf(loop, f) : nullptr;
    if (counter)
      b.store(counter, b.i32(0));
    ValueMap map;
    std::optional<IRBuilder::LoopScope> forScope;
    std::optional<IRBuilder::BlockScope> whileScope;
    if (auto *l = dyn_cast<ForStmt>(&loop)) {
      forScope.emplace(b.forRange(bound(l->begin(), f, b), bound(l->end(), f, b)));
      map[l] = forScope->index();
    } else {
      whileScope.emplace(b.whileLoop());
    }
    if (counter)
      b.store(counter, b.add(b.load(counter), b.i32(1)));
    for (AllocaStmt *a : plan.perIteration)
      b.adstackPush(stacks_.at({&loop, a}), b.load(primal(a, f, b)));
    plain(loop.block(0), b, f, map, /*taping=*/true);
  }

  //===--- reverse code ----------------------------------------------------===//

  AllocaStmt *adjointOf(const Value *v) {
    Frame *owner = owner_.count(cast<Stmt>(v)) ? owner_.at(cast<Stmt>(v)) : nullptr;
    if (!owner) {
      internalError_ = "no frame owns " + printStmt(*cast<Stmt>(v));
      return nullptr;
    }
    AllocaStmt *&a = owner->adj[v];
    if (!a) { // a local's adjoint has the local's element type
      IRBuilder top = atTop(*owner);
      a = top.alloca(v->type().element());
      top.store(a, zeroAdjoint(top, v->type().element()));
    }
    return a;
  }

  /// The value an adjoint starts from (and is reset to): -0.0, not +0.0.
  /// -0.0 + x is x for every x (+0.0 + -0.0 is +0.0), so the first
  /// accumulation folds away without fast-math; the sum that reaches a grad
  /// companion is the same, since +0.0 + -0.0 = +0.0 there.
  static Value *zeroAdjoint(IRBuilder &b, ScalarType t) { return b.constFloat(t, -0.0); }

  /// adj(v) += x, for active float values (and locals).
  void accumulate(const Value *v, Value *x, IRBuilder &b) {
    if (!v || !activity_.active(v))
      return;
    AllocaStmt *a = adjointOf(v);
    if (!a)
      return;
    b.store(a, b.add(b.load(a), x));
  }

  /// The adjoint of `s` if anything accumulated into it, else null.
  Value *adjointValue(const Stmt &s, IRBuilder &b) {
    Frame *owner = owner_.count(&s) ? owner_.at(&s) : nullptr;
    if (!owner)
      return nullptr;
    auto it = owner->adj.find(&s);
    return it == owner->adj.end() ? nullptr : b.load(it->second);
  }

  void reverse(Block &block, IRBuilder &b, Frame &f) {
    std::vector<Stmt *> stmts;
    for (Stmt &s : block)
      stmts.push_back(&s);
    for (auto it = stmts.rbegin(); it != stmts.rend(); ++it) {
      Stmt &s = **it;
      b.setLocation(s.loc());
      switch (s.kind()) {
      case StmtKind::If: {
        auto &i = cast<IfStmt>(s);
        auto scope = b.ifThen(primal(i.cond(), f, b));
        reverse(i.thenBlock(), b, f);
        scope.otherwise();
        reverse(i.elseBlock(), b, f);
        break;
      }
      case StmtKind::For:
      case StmtKind::While:
        reverseLoop(s, b, f);
        break;
      default:
        adjoint(s, b, f);
      }
    }
  }

  /// Rev(L).
  void reverseLoop(Stmt &loop, IRBuilder &b, Frame &f) {
    const LoopPlan &plan = plans_.at(&loop);
    for (AllocaStmt *a : plan.atEntry)
      b.store(primal(a, f, b), b.load(entrySaves_.at({&loop, a})));
    auto *l = dyn_cast<ForStmt>(&loop);
    // Iteration k of the reverse loop runs index `last - k`; `last` is
    // computed once, before the loop.
    auto value = [&](Bound bd) {
      return bd.isConstant() ? b.i32(static_cast<int32_t>(bd.constant)) : bd.value;
    };
    Value *last = nullptr;
    std::optional<IRBuilder::LoopScope> scope;
    if (plan.counted) {
      Value *count = b.load(counters_.at(&loop));
      if (l)
        last = b.sub(b.add(value(bound(l->begin(), f, b)), count), b.i32(1));
      scope.emplace(b.forRange(b.i32(0), count));
    } else {
      Bound lo = bound(l->begin(), f, b), hi = bound(l->end(), f, b);
      last = b.sub(b.add(value(lo), value(hi)), b.i32(1));
      scope.emplace(b.forRange(lo, hi));
    }
    Frame inner;
    inner.parent = &f;
    inner.block = &scope->stmt()->body();
    IRBuilder body(*inner.block);
    body.setLocation(loop.loc());
    if (l) {
      // Keep the restores below the frame's hoisted allocas: build the index
      // and restores first, then the frame appends after them.
      Value *k = scope->index();
      inner.direct[l] = body.sub(last, k);
    }
    for (AllocaStmt *a : plan.perIteration)
      body.store(primal(a, f, body), body.adstackLoadTop(stacks_.at({&loop, a})));
    markOwner(loop.block(0), &inner);
    frame(loop.block(0), inner, &body);
    body.setInsertionPointToEnd(*inner.block);
    for (AllocaStmt *a : plan.perIteration)
      body.adstackPop(stacks_.at({&loop, a}));
  }

  /// One frame: Fwd(B) then Adj(B), appended at the end of the frame block.
  void frame(Block &src, Frame &f, IRBuilder *at = nullptr) {
    IRBuilder b(*f.block);
    if (at)
      b = *at;
    forward(src, b, f, false);
    reverse(src, b, f);
  }

  void adjoint(Stmt &s, IRBuilder &b, Frame &f) {
    switch (s.kind()) {
    case StmtKind::LocalStore: {
      auto &st = cast<LocalStoreStmt>(s);
      if (!activity_.active(st.local()))
        return;
      // The local's adjoint may only be read here: in a loop, the loads
      // that feed it can come earlier in the body (later iterations of the
      // forward run reach this store's reverse through the back edge), so
      // it is created if it does not exist yet.
      AllocaStmt *adj = adjointOf(st.local());
      if (!adj)
        return;
      Value *g = b.load(adj);
      accumulate(st.value(), g, b);
      b.store(adj, zeroAdjoint(b, st.value()->type().element()));
      return;
    }
    case StmtKind::GlobalStore:
    case StmtKind::AtomicAdd: {
      auto &g = cast<GlobalAccessStmt>(s);
      Value *v = s.operand(s.numOperands() - 1);
      bool store = s.kind() == StmtKind::GlobalStore;
      // A store overwrites the element: the values stored before it (reversed
      // after it) get none of its adjoint, so the store also zeroes it.
      if (!hasGrad(g) || !isFloatValue(v) || (!store && !activity_.active(v)))
        return;
      std::vector<Value *> idx;
      for (unsigned i = 0; i < g.numIndices(); ++i)
        idx.push_back(primal(g.index(i), f, b));
      GlobalRef ref = g.ref();
      ref.component = Component::Grad;
      if (ref.ndarray)
        ref.ndarray = primal(ref.ndarray, f, b);
      if (activity_.active(v))
        accumulate(v, b.load(ref, idx), b);
      if (store)
        b.store(ref, idx, b.constFloat(v->type().element(), 0));
      return;
    }
    default:
      break;
    }
    if (!activity_.active(&s))
      return;
    Value *g = adjointValue(s, b);
    if (!g)
      return;
    ScalarType t = s.type().element();
    auto c = [&](double x) { return b.constFloat(t, x); };
    auto p = [&](const Value *v) { return primal(v, f, b); };
    switch (s.kind()) {
    case StmtKind::LocalLoad:
      accumulate(cast<LocalLoadStmt>(s).local(), g, b);
      return;
    case StmtKind::GlobalLoad: {
      auto &ld = cast<GlobalLoadStmt>(s);
      std::vector<Value *> idx;
      for (unsigned i = 0; i < ld.numIndices(); ++i)
        idx.push_back(p(ld.index(i)));
      GlobalRef ref = ld.ref();
      ref.component = Component::Grad;
      if (ref.ndarray)
        ref.ndarray = p(ref.ndarray);
      b.atomicAdd(ref, idx, g);
      return;
    }
    case StmtKind::Cast: {
      auto &cs = cast<CastStmt>(s);
      if (isFloat(cs.from()))
        accumulate(cs.input(), b.cast(g, cs.from()), b);
      return;
    }
    case StmtKind::Select: {
      auto &sel = cast<SelectStmt>(s);
      Value *cond = p(sel.cond());
      accumulate(sel.trueValue(), b.select(cond, g, c(0)), b);
      accumulate(sel.falseValue(), b.select(cond, c(0), g), b);
      return;
    }
    case StmtKind::Unary: {
      auto &u = cast<UnaryStmt>(s);
      const Value *x = u.input();
      switch (u.op()) {
      case UnaryOp::Neg:
        accumulate(x, b.neg(g), b);
        return;
      case UnaryOp::Abs: {
        Value *neg = b.cmp(CmpPredicate::Lt, p(x), c(0));
        accumulate(x, b.select(neg, b.neg(g), g), b);
        return;
      }
      case UnaryOp::Sin:
        accumulate(x, b.mul(g, b.cos(p(x))), b);
        return;
      case UnaryOp::Cos:
        accumulate(x, b.neg(b.mul(g, b.sin(p(x)))), b);
        return;
      case UnaryOp::Tan: {
        Value *cx = b.cos(p(x));
        accumulate(x, b.div(g, b.mul(cx, cx)), b);
        return;
      }
      case UnaryOp::Exp:
        accumulate(x, b.mul(g, p(&s)), b);
        return;
      case UnaryOp::Log:
        accumulate(x, b.div(g, p(x)), b);
        return;
      case UnaryOp::Sqrt:
        accumulate(x, b.div(g, b.mul(c(2), p(&s))), b);
        return;
      case UnaryOp::Tanh: {
        Value *y = p(&s);
        accumulate(x, b.mul(g, b.sub(c(1), b.mul(y, y))), b);
        return;
      }
      default:
        return; // rejected by check() when active
      }
    }
    case StmtKind::Binary: {
      auto &bin = cast<BinaryStmt>(s);
      const Value *x = bin.lhs(), *y = bin.rhs();
      bool xa = activity_.active(x), ya = activity_.active(y);
      switch (bin.op()) {
      case BinaryOp::Add:
        accumulate(x, g, b);
        accumulate(y, g, b);
        return;
      case BinaryOp::Sub:
        accumulate(x, g, b);
        if (ya)
          accumulate(y, b.neg(g), b);
        return;
      case BinaryOp::Mul:
        if (xa)
          accumulate(x, b.mul(g, p(y)), b);
        if (ya)
          accumulate(y, b.mul(g, p(x)), b);
        return;
      case BinaryOp::Div: {
        Value *yv = p(y);
        if (xa)
          accumulate(x, b.div(g, yv), b);
        if (ya)
          accumulate(y, b.neg(b.div(b.mul(g, p(x)), b.mul(yv, yv))), b);
        return;
      }
      case BinaryOp::Min:
      case BinaryOp::Max: {
        // The operand the result came from gets the adjoint (lhs on ties).
        Value *xv = p(x), *yv = p(y);
        Value *takesX =
            b.cmp(bin.op() == BinaryOp::Min ? CmpPredicate::Le : CmpPredicate::Ge, xv, yv);
        accumulate(x, b.select(takesX, g, c(0)), b);
        accumulate(y, b.select(takesX, c(0), g), b);
        return;
      }
      case BinaryOp::Pow: {
        Value *xv = p(x), *yv = p(y);
        if (xa) // y * x^(y-1)
          accumulate(x, b.mul(g, b.mul(yv, b.binary(BinaryOp::Pow, xv, b.sub(yv, c(1))))), b);
        if (ya) { // x^y * log(x), for x > 0
          Value *pos = b.cmp(CmpPredicate::Gt, xv, c(0));
          Value *safe = b.select(pos, xv, c(1));
          Value *d = b.mul(b.binary(BinaryOp::Pow, safe, yv), b.unary(UnaryOp::Log, safe));
          accumulate(y, b.mul(g, b.select(pos, d, c(0))), b);
        }
        return;
      }
      case BinaryOp::Atan2: { // atan2(x, y): d/dx = y / r2, d/dy = -x / r2
        Value *xv = p(x), *yv = p(y);
        Value *r2 = b.add(b.mul(xv, xv), b.mul(yv, yv));
        if (xa)
          accumulate(x, b.div(b.mul(g, yv), r2), b);
        if (ya)
          accumulate(y, b.neg(b.div(b.mul(g, xv), r2)), b);
        return;
      }
      default:
        return;
      }
    }
    default:
      return;
    }
  }

public:
  const std::string &internalError() const { return internalError_; }

private:
  Kernel &src_;
  Kernel &grad_;
  const std::unordered_set<const Stmt *> &breaking_;
  ReverseADOptions options_;
  const std::unordered_set<const Stmt *> &neverTape_;
  Activity activity_;
  std::unordered_set<const Value *> needed_;
  std::unordered_set<const Value *> neededLocals_;
  std::unordered_set<const Value *> *needTarget_ = nullptr;
  const std::unordered_set<const Stmt *> *needScope_ = nullptr;
  std::vector<const Value *> *outsideNeeds_ = nullptr;
  std::unordered_set<const Value *> outsideSeen_;
  std::vector<const Value *> work_;
  std::unordered_map<const Stmt *, LoopPlan> plans_;
  std::unordered_map<const Stmt *, Frame *> owner_;
  std::vector<std::unordered_map<const Value *, Value *>> armScopes_;
  struct PairHash {
    size_t operator()(const std::pair<const Stmt *, const AllocaStmt *> &p) const {
      return std::hash<const void *>()(p.first) * 31 + std::hash<const void *>()(p.second);
    }
  };
  std::unordered_map<std::pair<const Stmt *, const AllocaStmt *>, AdStackAllocaStmt *, PairHash>
      stacks_;
  std::unordered_map<std::pair<const Stmt *, const AllocaStmt *>, AllocaStmt *, PairHash>
      entrySaves_;
  std::unordered_map<const Stmt *, AllocaStmt *> counters_;
  std::unordered_map<const AdStackAllocaStmt *, const Stmt *> tapedStacks_;
  std::string internalError_;
};

} // namespace

absl::StatusOr<Kernel *> buildGradientKernel(Module &module, const Kernel &kernel,
                                             std::string gradName) {
  return buildGradientKernel(module, kernel, ReverseADOptions{}, std::move(gradName));
}

absl::StatusOr<Kernel *> buildGradientKernel(Module &module, const Kernel &kernel,
                                             const ReverseADOptions &options,
                                             std::string gradName) {
  if (gradName.empty())
    gradName = kernel.name() + "_grad";
  if (module.findKernel(gradName))
    return absl::AlreadyExistsError(fmt::format(
        "reverse-ad: the module already has a kernel named '@{}'; remove it or pick another name",
        gradName));
  std::unique_ptr<Kernel> source = cloneKernel(kernel, kernel.name());
  std::unordered_set<const Stmt *> breaking = JumpLowering().run(*source);
  // A taped stack holds the iterations of its loop for a whole range of the
  // enclosing loop, so it needs a launch-time size; a loop whose taped
  // stacks would fall to the default capacity (tier 3) is recomputed
  // instead, and the kernel is built again.
  std::unordered_set<const Stmt *> neverTape;
  while (true) {
    auto grad = std::make_unique<Kernel>(gradName);
    grad->setLoc(kernel.loc());
    for (unsigned i = 0; i < kernel.numArguments(); ++i) {
      const Argument *a = kernel.argument(i);
      auto copy = std::make_unique<Argument>(a->name(), a->type(), a->hasGrad(), a->hasDual());
      copy->setLoc(a->loc());
      grad->addArgument(std::move(copy));
    }
    GradientBuilder builder(*source, *grad, breaking, options, neverTape);
    if (absl::Status s = builder.run(); !s.ok())
      return s;
    if (!builder.internalError().empty())
      return absl::InternalError("reverse-ad: internal error: " + builder.internalError());
    size_t before = neverTape.size();
    if (!builder.tapedStacks().empty()) {
      KernelSizing sizing = sizeAdStacks(*grad);
      for (const AdStackSize &size : sizing.stacks())
        if (size.tier == SizingTier::Default)
          if (auto it = builder.tapedStacks().find(size.stack); it != builder.tapedStacks().end())
            neverTape.insert(it->second);
    }
    if (neverTape.size() == before)
      return module.addKernel(std::move(grad));
  }
}

} // namespace qd
