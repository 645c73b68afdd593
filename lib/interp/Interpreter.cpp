//===- Interpreter.cpp - Reference interpreter ----------------------------===//
#include "qd/interp/Interpreter.h"
#include "qd/runtime/LaunchWatchdog.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/ir/Printer.h"
#include "qd/ir/ScalarOps.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <vector>

namespace qd {
namespace {

enum class Flow { Normal, Break, Continue, Error };

struct AdStack {
  const AdStackAllocaStmt *stmt = nullptr;
  int64_t capacity = 0;
  std::vector<std::pair<Scalar, Scalar>> entries; // (primal, adjoint)
  /// Pushes past the capacity: stored nowhere, taken back first by pops
  /// (what compiled code does, so the launch can report its real need).
  int64_t excess = 0;
};

/// Runs one launch. Exhaustive: a new statement kind does not compile until
/// it runs here.
class Execution : public ExhaustiveStmtVisitor<Execution, Flow> {
  friend class ExhaustiveStmtVisitor<Execution, Flow>; // calls the private hooks

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

  /// From the launch's watchdog thread: stop before the next iteration.
  void requestStop(StopReason why) {
    stop_.store(static_cast<int32_t>(why), std::memory_order_relaxed);
  }

  absl::Status run() {
    Flow f = Flow::Normal;
    for (Stmt &s : const_cast<Block &>(kernel_.body())) {
      task_ = s.isTask() ? &s : nullptr;
      if ((f = exec(s)) == Flow::Error)
        break;
    }
    // An overflow comes first, with the depth the launch needed, as on
    // the compiled backends (an error after it may come from reading
    // entries that were never stored).
    if (overflow_)
      return adStackOverflowError(kernel_, *overflow_->stack, overflow_->task, overflow_->capacity,
                                  maxDepths_.at(overflow_->stack));
    return f == Flow::Error ? error_ : absl::OkStatus();
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

  Flow exec(Stmt &s) { return visit(s); }

  // --- one hook per statement kind (exhaustive: a new kind must run here) --
  Flow visitConstStmt(ConstStmt &s) {
    reg(&s) = s.value();
    return Flow::Normal;
  }
  Flow visitBinaryStmt(BinaryStmt &s) {
    ScalarResult r = evalBinary(s.op(), reg(s.lhs()), reg(s.rhs()));
    if (auto *msg = std::get_if<std::string>(&r))
      return fail(s, *msg);
    reg(&s) = std::get<Scalar>(r);
    return Flow::Normal;
  }
  Flow visitUnaryStmt(UnaryStmt &s) {
    reg(&s) = evalUnary(s.op(), reg(s.input()));
    return Flow::Normal;
  }
  Flow visitCmpStmt(CmpStmt &s) {
    reg(&s) = Scalar::ofInt(ScalarType::I1, evalCmp(s.predicate(), reg(s.lhs()), reg(s.rhs())));
    return Flow::Normal;
  }
  Flow visitSelectStmt(SelectStmt &s) {
    reg(&s) = reg(s.cond()).i ? reg(s.trueValue()) : reg(s.falseValue());
    return Flow::Normal;
  }
  Flow visitCastStmt(CastStmt &s) {
    reg(&s) = evalCast(reg(s.input()), s.to());
    return Flow::Normal;
  }
  Flow visitAllocaStmt(AllocaStmt &s) {
    ScalarType t = s.elementType();
    reg(&s) = isFloat(t) ? Scalar::ofFloat(t, 0) : Scalar::ofInt(t, 0);
    return Flow::Normal;
  }
  Flow visitLocalLoadStmt(LocalLoadStmt &s) {
    reg(&s) = reg(s.local());
    return Flow::Normal;
  }
  Flow visitLocalStoreStmt(LocalStoreStmt &s) {
    reg(s.local()) = reg(s.value());
    return Flow::Normal;
  }
  Flow visitGlobalLoadStmt(GlobalLoadStmt &s) { return execGlobalAccess(s); }
  Flow visitGlobalStoreStmt(GlobalStoreStmt &s) { return execGlobalAccess(s); }
  Flow visitAtomicAddStmt(AtomicAddStmt &s) { return visitAtomicRmwStmt(s); }
  Flow visitAtomicMaxStmt(AtomicMaxStmt &s) { return visitAtomicRmwStmt(s); }
  Flow visitAtomicRmwStmt(AtomicRmwStmt &s) { return execGlobalAccess(s); }
  Flow visitShapeStmt(ShapeStmt &s) {
    int64_t extent = ndarrays_.at(s.ndarray())->primal->shape()[s.axis()];
    if (s.type().isScalar(ScalarType::I32) && extent > std::numeric_limits<int32_t>::max())
      return fail(s, fmt::format("extent {} does not fit in i32", extent));
    reg(&s) = Scalar::ofInt(s.type().element(), extent);
    return Flow::Normal;
  }
  /// Before each iteration of `loop`: the launch's loop budget and the
  /// watchdog's stop request.
  bool stopped(const Stmt &loop) {
    StopReason why = static_cast<StopReason>(stop_.load(std::memory_order_relaxed));
    if (why == StopReason::None && options_.maxLoopIterations > 0 &&
        ++iterations_ > options_.maxLoopIterations)
      why = StopReason::LoopLimit;
    if (why == StopReason::None)
      return false;
    error_ = launchStoppedError(kernel_, loop, task_, why, stopLimit(options_, why));
    return true;
  }

  Flow visitForStmt(ForStmt &s) {
    if (s.numDims() > 1)
      return band(s);
    int64_t begin = *bound(s.begin()), end = *bound(s.end());
    for (int64_t i = begin; i < end; ++i) {
      if (stopped(s))
        return Flow::Error;
      reg(&s) = Scalar::ofInt(ScalarType::I32, i);
      Flow f = execBlock(s.body());
      if (f == Flow::Error)
        return f;
      if (f == Flow::Break)
        break;
    }
    return Flow::Normal;
  }
  /// Every point of a parallel band, in row-major order (dimension 0
  /// outermost). A parallel for has no break.
  Flow band(ForStmt &s) {
    unsigned n = s.numDims();
    std::array<int64_t, ForStmt::kMaxDims> begin{}, end{};
    for (unsigned d = 0; d < n; ++d) {
      begin[d] = *bound(s.begin(d));
      end[d] = *bound(s.end(d));
      if (end[d] <= begin[d])
        return Flow::Normal;
    }
    bandIndex_ = begin;
    while (true) {
      if (stopped(s))
        return Flow::Error;
      reg(&s) = Scalar::ofInt(ScalarType::I32, bandIndex_[0]);
      if (execBlock(s.body()) == Flow::Error)
        return Flow::Error;
      unsigned d = n;
      while (d > 0 && ++bandIndex_[d - 1] == end[d - 1]) {
        bandIndex_[d - 1] = begin[d - 1];
        --d;
      }
      if (d == 0)
        return Flow::Normal;
    }
  }
  Flow visitTaskIndexStmt(TaskIndexStmt &s) {
    // task_ is the parallel for running (the verifier puts task_index in
    // one); its own value is index 0.
    reg(&s) = Scalar::ofInt(ScalarType::I32, s.dim() == 0 ? reg(task_).i : bandIndex_[s.dim()]);
    return Flow::Normal;
  }
  Flow visitSerialStmt(SerialStmt &s) {
    return execBlock(s.body()) == Flow::Error ? Flow::Error : Flow::Normal;
  }
  Flow visitWhileStmt(WhileStmt &s) {
    while (true) {
      if (stopped(s))
        return Flow::Error;
      Flow f = execBlock(s.body());
      if (f == Flow::Error)
        return f;
      if (f == Flow::Break)
        return Flow::Normal;
    }
  }
  Flow visitBreakStmt(BreakStmt &) { return Flow::Break; }
  Flow visitContinueStmt(ContinueStmt &) { return Flow::Continue; }
  Flow visitIfStmt(IfStmt &s) { return execBlock(reg(s.cond()).i ? s.thenBlock() : s.elseBlock()); }
  Flow visitAdStackAllocaStmt(AdStackAllocaStmt &s) {
    int64_t cap = s.capacity();
    if (auto it = options_.adStackCapacities.find(&s); it != options_.adStackCapacities.end())
      cap = it->second;
    else if (Value *arg = s.capacityArgument())
      cap = std::max<int64_t>(reg(arg).i, 1);
    else if (cap == 0)
      cap = options_.defaultAdStackCapacity;
    if (cap <= 0)
      return fail(s, "adstack has no capacity: size it (qd sizing passes) or set "
                     "LaunchOptions::defaultAdStackCapacity");
    if (cap > kMaxAdStackCapacity) { // the limit of every backend
      error_ = adStackTooLargeError(kernel_, s, task_, cap);
      return Flow::Error;
    }
    AdStack &st = stacks_[slotOf_.at(&s)];
    st.stmt = &s;
    st.capacity = cap;
    st.entries.clear();
    st.excess = 0;
    capacities_[&s] = cap;
    maxDepths_.try_emplace(&s, 0);
    return Flow::Normal;
  }
  Flow visitAdStackPushStmt(AdStackPushStmt &s) {
    AdStack &st = stackOf(s);
    int64_t &depth = maxDepths_[st.stmt];
    if (static_cast<int64_t>(st.entries.size()) >= st.capacity) {
      if (!overflow_)
        overflow_ = Overflow{st.stmt, task_, st.capacity};
      depth = std::max(depth, st.capacity + ++st.excess);
      return Flow::Normal;
    }
    Scalar v = reg(s.value());
    ScalarType t = v.type;
    try {
      st.entries.emplace_back(v, isFloat(t) ? Scalar::ofFloat(t, 0) : Scalar::ofInt(t, 0));
    } catch (const std::bad_alloc &) {
      return fail(s, fmt::format("cannot allocate memory for entry {} of the adstack (capacity "
                                 "{}); the host is out of memory",
                                 st.entries.size() + 1, st.capacity));
    }
    depth = std::max(depth, static_cast<int64_t>(st.entries.size()));
    return Flow::Normal;
  }
  Flow visitAdStackPopStmt(AdStackPopStmt &s) {
    return onTop(s, [&](AdStack &st, auto &) {
      if (st.excess > 0)
        --st.excess;
      else
        st.entries.pop_back();
    });
  }
  Flow visitAdStackLoadTopStmt(AdStackLoadTopStmt &s) {
    return onTop(s, [&](AdStack &, auto &top) { reg(&s) = top.first; });
  }
  Flow visitAdStackLoadTopAdjStmt(AdStackLoadTopAdjStmt &s) {
    return onTop(s, [&](AdStack &, auto &top) { reg(&s) = top.second; });
  }
  Flow visitAdStackAccAdjointStmt(AdStackAccAdjointStmt &s) {
    return onTop(s,
                 [&](AdStack &, auto &top) { top.second = evalAdd(top.second, reg(s.value())); });
  }

private:
  /// Runs `fn(stack, topEntry)` on the non-empty adstack of `s`.
  template <typename Fn> Flow onTop(const AdStackOpStmt &s, Fn fn) {
    AdStack &st = stackOf(s);
    if (st.entries.empty())
      return fail(s, adStackUnderflowText(st.stmt));
    fn(st, st.entries.back());
    return Flow::Normal;
  }

  Flow execGlobalAccess(GlobalAccessStmt &g) {
    int64_t flat = 0;
    Flow flow;
    Buffer *buf = access(g, flat, flow);
    if (!buf)
      return flow;
    if (options_.checkGlobalAccesses && g.component() == Component::Primal) {
      auto key = std::pair<const Buffer *, int64_t>(buf, flat);
      if (g.kind() == StmtKind::GlobalLoad) {
        firstReads_.try_emplace(key, &g);
      } else if (auto it = firstReads_.find(key); it != firstReads_.end()) {
        return fail(
            g, fmt::format("{}[{}] is written here after it was read at {} in the same launch; "
                           "reverse mode replays that read from memory, so the gradient would "
                           "use the new value. Write the result to another field or ndarray",
                           globalName(g), elementText(*buf, flat), it->second->loc().str()));
      }
    }
    if (g.kind() == StmtKind::GlobalLoad)
      reg(&g) = buf->get(flat);
    else if (auto *st = dyn_cast<GlobalStoreStmt>(&g))
      buf->set(flat, reg(st->value()));
    else
      buf->set(flat, evalAtomic(cast<AtomicRmwStmt>(g), buf->get(flat)));
    return Flow::Normal;
  }

  /// The element's new value after atomic `rmw` on `old`.
  Scalar evalAtomic(const AtomicRmwStmt &rmw, const Scalar &old) {
    const Scalar &v = reg(rmw.value());
    switch (rmw.op()) {
    case AtomicOp::Add:
      return evalAdd(old, v);
    case AtomicOp::Max:
      return std::get<Scalar>(evalBinary(BinaryOp::Max, old, v));
    }
    return old;
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
  std::array<int64_t, ForStmt::kMaxDims> bandIndex_{};
  absl::Status error_;
  /// The first stack that overflowed (its need is its maxDepths_ entry).
  struct Overflow {
    const AdStackAllocaStmt *stack;
    const Stmt *task;
    int64_t capacity;
  };
  std::optional<Overflow> overflow_;
  int64_t iterations_ = 0;
  /// Set by the launch's watchdog (a StopReason).
  std::atomic<int32_t> stop_{0};
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
  if (absl::Status s = refuseLaunchStream(kernel, options, "interpreter"); !s.ok())
    return s;
  if (absl::Status s = syncLaunchBuffersToHost(program, kernel, args); !s.ok())
    return s;
  Execution execution(program, kernel, args, options, maxDepths_, capacities_);
  LaunchWatchdog watchdog(options, [&](StopReason why) { execution.requestStop(why); });
  return execution.run();
}

absl::StatusOr<const KernelSizing *> Interpreter::adStackSizing(const Kernel &kernel) {
  return &sizings_.of(kernel);
}

} // namespace qd
