//===- Interpreter.cpp - Reference interpreter ----------------------------===//
#include "qd/interp/Interpreter.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/analysis/AdStackSizing.h"
#include "qd/ir/Printer.h"
#include "qd/ir/ScalarOps.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <map>
#include <vector>

namespace qd {
namespace {

enum class Flow { Normal, Break, Continue, Error };

struct AdStack {
  const AdStackAllocaStmt *stmt = nullptr;
  int64_t capacity = 0;
  std::vector<std::pair<Scalar, Scalar>> entries; // (primal, adjoint)
};

class Execution {
public:
  Execution(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
            const LaunchOptions &options,
            std::unordered_map<const AdStackAllocaStmt *, int64_t> &maxDepths,
            std::unordered_map<const AdStackAllocaStmt *, int64_t> &capacities)
      : program_(program), kernel_(kernel), options_(options), maxDepths_(maxDepths),
        capacities_(capacities) {
    for (unsigned i = 0; i < kernel.numArguments(); ++i) {
      slot(kernel.argument(i));
      if (args[i].isNdarray())
        ndarrays_[kernel.argument(i)] = &args[i].ndarrayValue();
      else
        regs_[slotOf_[kernel.argument(i)]] = args[i].scalarValue();
    }
    walk(const_cast<Kernel &>(kernel), [&](Stmt &s) {
      if (!s.type().isVoid())
        slot(&s);
    });
    regs_.resize(slotOf_.size());
    stacks_.resize(slotOf_.size());
  }

  absl::Status run() {
    for (Stmt &s : const_cast<Block &>(kernel_.body())) {
      task_ = s.isTask() ? &s : nullptr;
      if (exec(s) == Flow::Error)
        return error_;
    }
    return absl::OkStatus();
  }

private:
  void slot(const Value *v) {
    auto [it, inserted] = slotOf_.emplace(v, static_cast<unsigned>(slotOf_.size()));
    if (inserted && regs_.size() <= it->second)
      regs_.resize(it->second + 1);
  }
  Scalar &reg(const Value *v) { return regs_[slotOf_.at(v)]; }

  Flow fail(const Stmt &s, const std::string &what) {
    error_ = statementError(kernel_, s, task_, what);
    return Flow::Error;
  }

  Flow execBlock(const Block &b) {
    for (Stmt &s : const_cast<Block &>(b)) {
      Flow f = exec(s);
      if (f != Flow::Normal)
        return f;
    }
    return Flow::Normal;
  }

  std::optional<int64_t> bound(Bound b) { return b.isConstant() ? b.constant : reg(b.value).i; }

  /// Resolves the buffer and flat element index of a global access.
  Buffer *access(const GlobalAccessStmt &s, int64_t &flat, Flow &flow) {
    flow = Flow::Normal;
    Buffer *buf = s.isField() ? program_.field(*s.field(), s.component())
                              : ndarrays_.at(s.ndarray())->component(s.component());
    std::string name = globalAccessName(s);
    if (!buf) {
      flow = fail(s, fmt::format("'{}' has no storage", name));
      return nullptr;
    }
    std::vector<int64_t> idx;
    for (unsigned i = 0; i < s.numIndices(); ++i)
      idx.push_back(reg(s.index(i)).i);
    std::optional<int64_t> f = buf->flatIndex(idx);
    if (!f) {
      flow = fail(s, indexOutOfRangeText(name, idx, buf->shape()));
      return nullptr;
    }
    flat = *f;
    return buf;
  }

  static std::string globalName(const GlobalAccessStmt &s) {
    return s.isField() ? "@" + s.field()->name() : "%" + s.ndarray()->name();
  }
  static std::string elementText(const Buffer &buf, int64_t flat) {
    std::vector<int64_t> idx(buf.ndim());
    for (unsigned d = buf.ndim(); d-- > 0;) {
      idx[d] = flat % buf.shape()[d];
      flat /= buf.shape()[d];
    }
    return fmt::format("{}", fmt::join(idx, ", "));
  }

  AdStack &stackOf(const AdStackOpStmt &s) { return stacks_[slotOf_.at(s.stack())]; }

  Flow exec(Stmt &s) {
    switch (s.kind()) {
    case StmtKind::Const:
      reg(&s) = cast<ConstStmt>(s).value();
      return Flow::Normal;
    case StmtKind::Binary: {
      auto &b = cast<BinaryStmt>(s);
      ScalarResult r = evalBinary(b.op(), reg(b.lhs()), reg(b.rhs()));
      if (auto *msg = std::get_if<std::string>(&r))
        return fail(s, *msg);
      reg(&s) = std::get<Scalar>(r);
      return Flow::Normal;
    }
    case StmtKind::Unary: {
      auto &u = cast<UnaryStmt>(s);
      reg(&s) = evalUnary(u.op(), reg(u.input()));
      return Flow::Normal;
    }
    case StmtKind::Cmp: {
      auto &c = cast<CmpStmt>(s);
      reg(&s) = Scalar::ofInt(ScalarType::I1, evalCmp(c.predicate(), reg(c.lhs()), reg(c.rhs())));
      return Flow::Normal;
    }
    case StmtKind::Select: {
      auto &sel = cast<SelectStmt>(s);
      reg(&s) = reg(sel.cond()).i ? reg(sel.trueValue()) : reg(sel.falseValue());
      return Flow::Normal;
    }
    case StmtKind::Cast: {
      auto &c = cast<CastStmt>(s);
      reg(&s) = evalCast(reg(c.input()), c.to());
      return Flow::Normal;
    }
    case StmtKind::Alloca: {
      ScalarType t = cast<AllocaStmt>(s).elementType();
      reg(&s) = isFloat(t) ? Scalar::ofFloat(t, 0) : Scalar::ofInt(t, 0);
      return Flow::Normal;
    }
    case StmtKind::LocalLoad:
      reg(&s) = reg(cast<LocalLoadStmt>(s).local());
      return Flow::Normal;
    case StmtKind::LocalStore: {
      auto &st = cast<LocalStoreStmt>(s);
      reg(st.local()) = reg(st.value());
      return Flow::Normal;
    }
    case StmtKind::GlobalLoad:
    case StmtKind::GlobalStore:
    case StmtKind::AtomicAdd: {
      auto &g = cast<GlobalAccessStmt>(s);
      int64_t flat;
      Flow flow;
      Buffer *buf = access(g, flat, flow);
      if (!buf)
        return flow;
      if (options_.checkGlobalAccesses && g.component() == Component::Primal) {
        auto key = std::pair<const Buffer *, int64_t>(buf, flat);
        if (s.kind() == StmtKind::GlobalLoad) {
          firstReads_.try_emplace(key, &s);
        } else if (auto it = firstReads_.find(key); it != firstReads_.end()) {
          return fail(
              s, fmt::format("{}[{}] is written here after it was read at {} in the same launch; "
                             "reverse mode replays that read from memory, so the gradient would "
                             "use the new value. Write the result to another field or ndarray",
                             globalName(g), elementText(*buf, flat), it->second->loc().str()));
        }
      }
      if (s.kind() == StmtKind::GlobalLoad)
        reg(&s) = buf->get(flat);
      else if (auto *st = dyn_cast<GlobalStoreStmt>(&s))
        buf->set(flat, reg(st->value()));
      else
        buf->set(flat, evalAdd(buf->get(flat), reg(cast<AtomicAddStmt>(s).value())));
      return Flow::Normal;
    }
    case StmtKind::Shape: {
      auto &sh = cast<ShapeStmt>(s);
      int64_t extent = ndarrays_.at(sh.ndarray())->primal->shape()[sh.axis()];
      if (sh.type().isScalar(ScalarType::I32) && extent > std::numeric_limits<int32_t>::max())
        return fail(s, fmt::format("extent {} does not fit in i32", extent));
      reg(&s) = Scalar::ofInt(sh.type().element(), extent);
      return Flow::Normal;
    }
    case StmtKind::For: {
      auto &loop = cast<ForStmt>(s);
      int64_t begin = *bound(loop.begin()), end = *bound(loop.end());
      for (int64_t i = begin; i < end; ++i) {
        reg(&s) = Scalar::ofInt(ScalarType::I32, i);
        Flow f = execBlock(loop.body());
        if (f == Flow::Error)
          return f;
        if (f == Flow::Break)
          break;
      }
      return Flow::Normal;
    }
    case StmtKind::Serial:
      return execBlock(cast<SerialStmt>(s).body()) == Flow::Error ? Flow::Error : Flow::Normal;
    case StmtKind::While:
      while (true) {
        Flow f = execBlock(cast<WhileStmt>(s).body());
        if (f == Flow::Error)
          return f;
        if (f == Flow::Break)
          return Flow::Normal;
      }
    case StmtKind::Break:
      return Flow::Break;
    case StmtKind::Continue:
      return Flow::Continue;
    case StmtKind::If: {
      auto &i = cast<IfStmt>(s);
      return execBlock(reg(i.cond()).i ? i.thenBlock() : i.elseBlock());
    }
    case StmtKind::AdStackAlloca: {
      auto &a = cast<AdStackAllocaStmt>(s);
      int64_t cap = a.capacity();
      if (auto it = options_.adStackCapacities.find(&a); it != options_.adStackCapacities.end())
        cap = it->second;
      else if (cap == 0)
        cap = options_.defaultAdStackCapacity;
      if (cap <= 0)
        return fail(s, "adstack has no capacity: size it (qd sizing passes) or set "
                       "LaunchOptions::defaultAdStackCapacity");
      AdStack &st = stacks_[slotOf_.at(&s)];
      st.stmt = &a;
      st.capacity = cap;
      st.entries.clear();
      capacities_[&a] = cap;
      maxDepths_.try_emplace(&a, 0);
      return Flow::Normal;
    }
    case StmtKind::AdStackPush: {
      auto &p = cast<AdStackPushStmt>(s);
      AdStack &st = stackOf(p);
      if (static_cast<int64_t>(st.entries.size()) >= st.capacity)
        return fail(s, adStackPushOverflowText(*st.stmt, st.capacity));
      Scalar v = reg(p.value());
      ScalarType t = v.type;
      st.entries.emplace_back(v, isFloat(t) ? Scalar::ofFloat(t, 0) : Scalar::ofInt(t, 0));
      int64_t &depth = maxDepths_[st.stmt];
      depth = std::max(depth, static_cast<int64_t>(st.entries.size()));
      return Flow::Normal;
    }
    case StmtKind::AdStackPop:
    case StmtKind::AdStackLoadTop:
    case StmtKind::AdStackLoadTopAdj:
    case StmtKind::AdStackAccAdjoint: {
      auto &op = cast<AdStackOpStmt>(s);
      AdStack &st = stackOf(op);
      if (st.entries.empty())
        return fail(s, adStackUnderflowText(st.stmt));
      auto &top = st.entries.back();
      if (s.kind() == StmtKind::AdStackPop)
        st.entries.pop_back();
      else if (s.kind() == StmtKind::AdStackLoadTop)
        reg(&s) = top.first;
      else if (s.kind() == StmtKind::AdStackLoadTopAdj)
        reg(&s) = top.second;
      else
        top.second = evalAdd(top.second, reg(cast<AdStackAccAdjointStmt>(s).value()));
      return Flow::Normal;
    }
    }
    return fail(s, "statement not supported by the interpreter");
  }

  Program &program_;
  const Kernel &kernel_;
  const LaunchOptions &options_;
  std::unordered_map<const AdStackAllocaStmt *, int64_t> &maxDepths_;
  std::unordered_map<const AdStackAllocaStmt *, int64_t> &capacities_;
  std::unordered_map<const Value *, unsigned> slotOf_;
  std::vector<Scalar> regs_;
  std::vector<AdStack> stacks_;
  std::unordered_map<const Value *, const NdarrayArg *> ndarrays_;
  const Stmt *task_ = nullptr;
  absl::Status error_;
  std::map<std::pair<const Buffer *, int64_t>, const Stmt *> firstReads_;
};

} // namespace

absl::Status Interpreter::launch(Program &program, const Kernel &kernel,
                                 std::span<const LaunchArg> args, const LaunchOptions &options) {
  std::lock_guard<std::mutex> lock(mutex_);
  maxDepths_.clear();
  capacities_.clear();
  if (absl::Status s = validateLaunchArgs(kernel, args); !s.ok())
    return s;
  return Execution(program, kernel, args, options, maxDepths_, capacities_).run();
}

absl::StatusOr<const KernelSizing *> Interpreter::adStackSizing(const Kernel &kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto &slot = sizing_[kernel.uniqueId()];
  if (!slot)
    slot = std::make_unique<KernelSizing>(sizeAdStacks(kernel));
  return slot.get();
}

} // namespace qd
