//===- SizingBench.cpp - Adstack sizing time vs kernel size ---------------===//
//
// qd-bench-sizing: times sizeAdStacks on generated reverse-mode-like kernels
// of 1k, 10k and 100k statements with 1, 100 and 1000 adstacks, next to two
// baselines on the same kernel (a plain pre-order walk counting statements,
// and ControlFlowGraph::build + simplify).
//
// A generated kernel has a few `parallel for` tasks. Each task allocates its
// stacks at the top of its body, then runs a forward sweep and a reverse
// sweep. Each sweep is a sequence of filler chunks (a range-for with a
// constant, scalar-argument, field-load or task-index bound around filler
// arithmetic and an if/else); the forward pattern of each stack (its pushes)
// follows one chunk of the forward sweep and its reverse pattern (its pops)
// the mirrored chunk of the reverse sweep. The patterns cycle through the
// shapes sizing distinguishes, each with the tier and method it must get
// (every stack the structural tier-1 pass rejects also goes through the
// Bellman-Ford pass, which fails on its positive cycle, before tier 2):
//
//   arg-bound      for 0..%m { push }                    tier 2 size-expr
//   const-nest     for 0..8 { for 0..4 { push } }        tier 1 structural
//   balanced       for 0..%m { push; pop }               tier 1 bellman-ford
//   triangular     for i 0..%m { for 0..i { push } }     tier 2 size-expr
//   if-else        for 0..4 { if { push push } else { push } }   tier 1 structural
//   field-bound    for 0..@bounds[3] { push }            tier 2 size-expr
//   task-index     for 0..%t { push } (%t: task index)   tier 2 size-expr
//   while          while { push; pop; if { break } }     tier 1 structural
//   field-per-iter for i 0..4 { for 0..@bounds[i] { push } }     tier 2 size-expr
//   tri-const      for i 0..8 { for 0..i { push } }      tier 1 evaluated
//
// Filler arithmetic brings every kernel to exactly the requested number of
// statements (every statement counts, nested ones included), unless the
// stack patterns alone exceed it. No pattern is meant to reach tier 3; the
// benchmark aborts if a stack gets a tier or method other than its pattern's.
//
// Usage: qd-bench-sizing [--sizes 1000,10000,100000] [--stacks 1,100,1000]
//                        [--tasks 4] [--seconds 0.3] [--dump STMTS,STACKS]
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "qd/analysis/AdStackSizing.h"
#include "qd/analysis/CFG.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace qd;
using qdbench::die;

namespace {

//===----------------------------------------------------------------------===//
// Kernel generation
//===----------------------------------------------------------------------===//

enum class Pattern : uint8_t {
  ArgBound,
  ConstNest,
  Balanced,
  Triangular,
  IfElse,
  FieldBound,
  TaskIndex,
  While,
  FieldPerIter,
  TriConst,
};
constexpr unsigned kNumPatterns = 10;

struct Expected {
  SizingTier tier;
  SizingMethod method;
};

Expected expected(Pattern p) {
  switch (p) {
  case Pattern::ConstNest:
  case Pattern::IfElse:
  case Pattern::While: // net <= 0 per iteration: no trip count needed
    return {SizingTier::Constant, SizingMethod::Structural};
  case Pattern::Balanced: // a dynamic trip count: left to Bellman-Ford
    return {SizingTier::Constant, SizingMethod::BellmanFord};
  case Pattern::TriConst:
    return {SizingTier::Constant, SizingMethod::Evaluated};
  case Pattern::ArgBound:
  case Pattern::Triangular:
  case Pattern::FieldBound:
  case Pattern::TaskIndex:
  case Pattern::FieldPerIter:
    return {SizingTier::LaunchTime, SizingMethod::SizeExpr};
  }
  return {SizingTier::Default, SizingMethod::Default};
}

struct Params {
  int64_t statements = 1000;
  unsigned stacks = 1;
  unsigned tasks = 4;
  /// Average size of a filler chunk (loop + if/else + filler arithmetic).
  unsigned chunkSize = 40;
};

struct Generated {
  std::unique_ptr<Module> module;
  Kernel *kernel = nullptr;
  std::vector<Pattern> patterns; // per stack, in program order
  unsigned fillerSlots = 0;
};

class Generator {
public:
  Generator(const Params &p, int64_t fillerTotal) : p_(p), fillerTotal_(fillerTotal) {}

  Generated run() {
    Generated g;
    g.module = std::make_unique<Module>();
    Module &m = *g.module;
    bounds_ = m.addField(
        std::make_unique<Field>("bounds", ScalarType::I32, std::vector<int64_t>{64}, false, false));
    x_ = m.addField(
        std::make_unique<Field>("x", ScalarType::F32, std::vector<int64_t>{1024}, true, false));
    y_ = m.addField(
        std::make_unique<Field>("y", ScalarType::F32, std::vector<int64_t>{}, true, false));
    Kernel *k = m.addKernel(std::make_unique<Kernel>("bench"));
    n_ = k->addArgument(std::make_unique<Argument>("n", Type::i32()));
    m_ = k->addArgument(std::make_unique<Argument>("m", Type::i32()));
    file_ = std::make_shared<const std::string>("sizing-bench");
    IRBuilder b(*k);

    // Stacks go to tasks round-robin; the chunks of a sweep are spread evenly.
    const unsigned tasks = std::max(1u, p_.tasks);
    const int64_t perTask = std::max<int64_t>(1, p_.statements / tasks);
    const unsigned chunksPerSweep =
        static_cast<unsigned>(std::max<int64_t>(1, perTask / (2 * int64_t(p_.chunkSize))));
    unsigned nextStack = 0;
    for (unsigned t = 0; t < tasks; ++t) {
      unsigned count = p_.stacks / tasks + (t < p_.stacks % tasks ? 1 : 0);
      auto task = b.parallelFor(0, Bound(n_));
      Task ctx;
      ctx.index = task.index();
      std::vector<AdStackAllocaStmt *> stacks;
      std::vector<Pattern> pats;
      for (unsigned s = 0; s < count; ++s, ++nextStack) {
        b.setLocation(Location(file_, nextStack + 1, 1));
        stacks.push_back(b.adstackAlloca(ScalarType::F32));
        pats.push_back(static_cast<Pattern>(nextStack % kNumPatterns));
      }
      g.patterns.insert(g.patterns.end(), pats.begin(), pats.end());
      b.setLocation(Location());
      ctx.x = b.load(GlobalRef::ofField(x_), {ctx.index});
      ctx.one = b.f32(1.0f);
      ctx.three = b.i32(3);
      // Stack s is pushed after forward chunk at(s) and popped after the
      // mirrored reverse chunk.
      auto at = [&](unsigned s) {
        return static_cast<unsigned>(uint64_t(s) * chunksPerSweep / count);
      };
      std::vector<std::optional<Value *>> fieldBound(count);
      for (unsigned c = 0; c < chunksPerSweep; ++c) {
        chunk(b, ctx);
        for (unsigned s = 0; s < count; ++s)
          if (at(s) == c)
            forward(b, ctx, stacks[s], pats[s], fieldBound[s]);
      }
      for (unsigned c = chunksPerSweep; c-- > 0;) {
        chunk(b, ctx);
        for (unsigned s = count; s-- > 0;)
          if (at(s) == c)
            reverse(b, ctx, stacks[s], pats[s], fieldBound[s]);
      }
    }
    g.kernel = k;
    g.fillerSlots = slot_;
    return g;
  }

private:
  struct Task {
    Value *index = nullptr;
    Value *x = nullptr;
    Value *one = nullptr;
    Value *three = nullptr;
  };

  /// Emits this slot's share of the filler statements (a chain of f32
  /// arithmetic starting from `v`) and returns the last value.
  Value *filler(IRBuilder &b, const Task &ctx, Value *v) {
    unsigned s = slot_++;
    int64_t n = 0;
    if (numSlotsHint_ > 0)
      n = fillerTotal_ / numSlotsHint_ + (int64_t(s) < fillerTotal_ % numSlotsHint_ ? 1 : 0);
    for (int64_t i = 0; i < n; ++i) {
      switch ((s + i) % 5) {
      case 0:
        v = b.add(v, ctx.one);
        break;
      case 1:
        v = b.mul(v, ctx.x);
        break;
      case 2:
        v = b.sin(v);
        break;
      case 3:
        v = b.sub(v, ctx.x);
        break;
      default:
        v = b.max(v, ctx.one);
        break;
      }
    }
    return v;
  }

  /// A loop with filler arithmetic and an if/else; the loop bound cycles
  /// through the kinds sizing captures.
  void chunk(IRBuilder &b, const Task &ctx) {
    Bound end;
    switch (chunk_++ % 4) {
    case 0:
      end = Bound(16);
      break;
    case 1:
      end = Bound(m_);
      break;
    case 2:
      end = Bound(b.load(GlobalRef::ofField(bounds_), {ctx.three}));
      break;
    default:
      end = Bound(ctx.index);
      break;
    }
    auto loop = b.forRange(0, end);
    Value *v = filler(b, ctx, ctx.x);
    Value *c = b.cmp(CmpPredicate::Lt, v, ctx.one);
    {
      auto arm = b.ifThen(c);
      Value *t = filler(b, ctx, v);
      b.atomicAdd(GlobalRef::ofField(y_), std::span<Value *const>(), t);
      arm.otherwise();
      filler(b, ctx, ctx.one);
    }
  }

  void forward(IRBuilder &b, const Task &ctx, AdStackAllocaStmt *s, Pattern p,
               std::optional<Value *> &fieldBound) {
    auto push = [&] { b.adstackPush(s, ctx.x); };
    switch (p) {
    case Pattern::ArgBound: {
      auto l = b.forRange(0, Bound(m_));
      push();
      break;
    }
    case Pattern::ConstNest: {
      auto l = b.forRange(0, 8);
      auto l2 = b.forRange(0, 4);
      push();
      break;
    }
    case Pattern::Balanced: {
      auto l = b.forRange(0, Bound(m_));
      push();
      Value *top = b.adstackLoadTop(s);
      b.adstackAccAdjoint(s, top);
      b.adstackPop(s);
      break;
    }
    case Pattern::Triangular: {
      auto l = b.forRange(0, Bound(m_));
      auto l2 = b.forRange(0, Bound(l.index()));
      push();
      break;
    }
    case Pattern::IfElse: {
      auto l = b.forRange(0, 4);
      Value *c = b.cmp(CmpPredicate::Gt, ctx.x, ctx.one);
      auto arm = b.ifThen(c);
      push();
      push();
      arm.otherwise();
      push();
      break;
    }
    case Pattern::FieldBound: {
      Value *bound = b.load(GlobalRef::ofField(bounds_), {ctx.three});
      fieldBound = bound;
      auto l = b.forRange(0, Bound(bound));
      push();
      break;
    }
    case Pattern::TaskIndex: {
      auto l = b.forRange(0, Bound(ctx.index));
      push();
      break;
    }
    case Pattern::While: {
      auto w = b.whileLoop();
      push();
      b.adstackPop(s);
      Value *c = b.cmp(CmpPredicate::Gt, ctx.x, ctx.one);
      auto arm = b.ifThen(c);
      b.brk();
      break;
    }
    case Pattern::FieldPerIter: {
      auto l = b.forRange(0, 4);
      Value *bound = b.load(GlobalRef::ofField(bounds_), {l.index()});
      auto l2 = b.forRange(0, Bound(bound));
      push();
      break;
    }
    case Pattern::TriConst: {
      auto l = b.forRange(0, 8);
      auto l2 = b.forRange(0, Bound(l.index()));
      push();
      break;
    }
    }
  }

  /// The matching pops (load the primal, accumulate the adjoint, pop).
  void reverse(IRBuilder &b, const Task &ctx, AdStackAllocaStmt *s, Pattern p,
               const std::optional<Value *> &fieldBound) {
    auto pop = [&] {
      Value *top = b.adstackLoadTop(s);
      b.adstackAccAdjoint(s, top);
      b.adstackPop(s);
    };
    switch (p) {
    case Pattern::ArgBound: {
      auto l = b.forRange(0, Bound(m_));
      pop();
      break;
    }
    case Pattern::ConstNest: {
      auto l = b.forRange(0, 8);
      auto l2 = b.forRange(0, 4);
      pop();
      break;
    }
    case Pattern::Balanced:
    case Pattern::While:
      break; // balanced in the forward sweep
    case Pattern::Triangular: {
      auto l = b.forRange(0, Bound(m_));
      auto l2 = b.forRange(0, Bound(l.index()));
      pop();
      break;
    }
    case Pattern::IfElse: {
      auto l = b.forRange(0, 4);
      Value *c = b.cmp(CmpPredicate::Gt, ctx.x, ctx.one);
      auto arm = b.ifThen(c);
      pop();
      pop();
      arm.otherwise();
      pop();
      break;
    }
    case Pattern::FieldBound: {
      auto l = b.forRange(0, Bound(*fieldBound));
      pop();
      break;
    }
    case Pattern::TaskIndex: {
      auto l = b.forRange(0, Bound(ctx.index));
      pop();
      break;
    }
    case Pattern::FieldPerIter: {
      auto l = b.forRange(0, 4);
      Value *bound = b.load(GlobalRef::ofField(bounds_), {l.index()});
      auto l2 = b.forRange(0, Bound(bound));
      pop();
      break;
    }
    case Pattern::TriConst: {
      auto l = b.forRange(0, 8);
      auto l2 = b.forRange(0, Bound(l.index()));
      pop();
      break;
    }
    }
  }

  const Params p_;
  const int64_t fillerTotal_;

public:
  /// The number of filler slots (known from a first run with no filler).
  unsigned numSlotsHint_ = 0;

private:
  Field *bounds_ = nullptr;
  Field *x_ = nullptr;
  Field *y_ = nullptr;
  Argument *n_ = nullptr;
  Argument *m_ = nullptr;
  std::shared_ptr<const std::string> file_;
  unsigned slot_ = 0;
  unsigned chunk_ = 0;
};

int64_t countStatements(Kernel &k) {
  int64_t n = 0;
  walk(k, [&](Stmt &) { ++n; });
  return n;
}

/// A kernel of exactly `p.statements` statements (or the smallest the stack
/// patterns allow).
Generated generate(const Params &p) {
  Generator skeleton(p, 0);
  Generated g0 = skeleton.run();
  int64_t base = countStatements(*g0.kernel);
  int64_t fill = std::max<int64_t>(0, p.statements - base);
  Generator full(p, fill);
  full.numSlotsHint_ = g0.fillerSlots;
  Generated g = full.run();
  int64_t got = countStatements(*g.kernel);
  if (got != std::max(base, p.statements))
    die(fmt::format("generated {} statements, expected {}", got, std::max(base, p.statements)));
  if (absl::Status st = verify(*g.kernel); !st.ok())
    die("generated kernel does not verify:\n" + std::string(st.message()));
  return g;
}

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

/// Thread CPU time in ms: the machine is shared, and wall time would count
/// the time other processes hold the core (see docs/performance.md).
double cpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

struct Timing {
  double medianMs = 0, minMs = 0;
  int runs = 0;
};

volatile int64_t gSink = 0;

/// Runs `fn` once to calibrate, then enough times to fill about `seconds`
/// (at least 3 runs unless one run takes longer than `seconds`).
template <typename Fn> Timing measure(Fn &&fn, double seconds) {
  auto once = [&] {
    double t0 = cpuMs();
    gSink = gSink + fn();
    return cpuMs() - t0;
  };
  double first = once();
  int runs =
      first >= seconds * 1000 ? 1 : std::clamp(static_cast<int>(seconds * 1000 / first), 3, 5000);
  std::vector<double> samples;
  samples.reserve(runs);
  for (int i = 0; i < runs; ++i)
    samples.push_back(once());
  std::sort(samples.begin(), samples.end());
  Timing t;
  t.runs = runs;
  t.minMs = samples.front();
  size_t n = samples.size();
  t.medianMs = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  return t;
}

std::vector<int64_t> parseList(const char *text) {
  std::vector<int64_t> out;
  std::string s(text);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char *end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0)
      die(fmt::format("bad list '{}'", text));
    out.push_back(v);
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

std::string histogram(const KernelSizing &sizing) {
  std::map<SizingMethod, unsigned> byMethod;
  for (const AdStackSize &s : sizing.stacks())
    ++byMethod[s.method];
  // Short names, in tier order.
  static const std::array<std::pair<SizingMethod, const char *>, 7> names{{
      {SizingMethod::Declared, "decl"},
      {SizingMethod::Unused, "t1-unused"},
      {SizingMethod::Structural, "t1-struct"},
      {SizingMethod::BellmanFord, "t1-bf"},
      {SizingMethod::Evaluated, "t1-eval"},
      {SizingMethod::SizeExpr, "t2-expr"},
      {SizingMethod::Default, "t3"},
  }};
  std::string out;
  for (auto &[m, name] : names)
    if (unsigned n = byMethod[m]) {
      if (!out.empty())
        out += ' ';
      out += fmt::format("{}:{}", name, n);
    }
  return out;
}

/// Aborts if a stack did not land where its pattern says.
void checkTiers(const Generated &g, const KernelSizing &sizing) {
  if (sizing.stacks().size() != g.patterns.size())
    die(fmt::format("sized {} stacks, generated {}", sizing.stacks().size(), g.patterns.size()));
  for (size_t i = 0; i < g.patterns.size(); ++i) {
    const AdStackSize &s = sizing.stacks()[i];
    Expected e = expected(g.patterns[i]);
    if (s.tier == SizingTier::Default)
      die(fmt::format("stack #{} unexpectedly landed in tier 3: {}", i, sizing.describe(s)));
    if (s.tier != e.tier || s.method != e.method)
      die(fmt::format("stack #{} expected {} [{}], got: {}", i, toString(e.tier),
                      toString(e.method), sizing.describe(s)));
  }
  if (!sizing.warnings().empty())
    die("unexpected sizing warning: " + sizing.warnings().front());
}

/// Where the time of one sizing goes: the pieces sizeAdStacks is made of,
/// timed through the public API (each includes the walk KernelFacts does).
void printPhases(Kernel &k, double seconds) {
  auto row = [&](const char *what, Timing t) {
    std::printf("           %-44s %10.3f ms (min %.3f)\n", what, t.medianMs, t.minMs);
  };
  row("ValueNamer (names of every value)",
      measure([&] { return int64_t(ValueNamer(k)[nullptr].size()); }, seconds));
  row("CFG build",
      measure([&] { return int64_t(ControlFlowGraph::build(k).numNodes()); }, seconds));
  row("CFG build + simplify", measure(
                                  [&] {
                                    ControlFlowGraph c = ControlFlowGraph::build(k);
                                    c.simplify();
                                    return int64_t(c.numNodes());
                                  },
                                  seconds));
  auto sizing = [&](const char *what, SizingOptions o) {
    row(what, measure([&] { return int64_t(sizeAdStacks(k, o).stacks().size()); }, seconds));
  };
  sizing("sizing: structural only (no Bellman-Ford)", {.bellmanFord = false});
  sizing("sizing: Bellman-Ford only (no structural)", {.structural = false});
  sizing("sizing: tier 2 only", {.structural = false, .bellmanFord = false});
}

} // namespace

static int runBench(int argc, char **argv) {
  std::vector<int64_t> sizes{1000, 10000, 100000};
  std::vector<int64_t> stackCounts{1, 100, 1000};
  unsigned tasks = 4;
  double seconds = 0.3;
  std::optional<std::vector<int64_t>> dump;
  bool phases = false;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char *name) {
      if (std::strcmp(argv[i], name) != 0)
        return false;
      if (i + 1 >= argc)
        die(fmt::format("{} needs a value", name));
      return true;
    };
    if (arg("--sizes"))
      sizes = parseList(argv[++i]);
    else if (arg("--stacks"))
      stackCounts = parseList(argv[++i]);
    else if (arg("--tasks"))
      tasks = static_cast<unsigned>(parseList(argv[++i]).front());
    else if (arg("--seconds"))
      seconds = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--phases") == 0)
      phases = true;
    else if (arg("--dump"))
      dump = parseList(argv[++i]);
    else
      die(fmt::format("unknown argument '{}' (see the comment at the top of SizingBench.cpp)",
                      argv[i]));
  }

  if (dump) {
    if (dump->size() != 2)
      die("--dump takes STATEMENTS,STACKS");
    Params p;
    p.statements = (*dump)[0];
    p.stacks = static_cast<unsigned>((*dump)[1]);
    p.tasks = tasks;
    Generated g = generate(p);
    std::fputs(printModule(*g.module).c_str(), stdout);
    KernelSizing sizing = sizeAdStacks(*g.kernel);
    for (const AdStackSize &s : sizing.stacks())
      std::printf("// %s\n", sizing.describe(s).c_str());
    return 0;
  }

  std::printf("adstack sizing benchmark: %u task(s) per kernel, ~%.1f s per measured function; "
              "times are thread CPU time, median (min) over the runs\n\n",
              tasks, seconds);
  std::printf("%8s %6s %9s %7s %17s %8s %7s %14s %7s %14s  %s\n", "stmts", "stacks", "cfg-nodes",
              "runs", "sizing ms", "ns/stmt", "growth", "walk ms", "size/w", "cfg ms", "tiers");
  std::map<int64_t, double> previous; // stacks -> median ms at the previous size
  for (int64_t statements : sizes) {
    for (int64_t stacks : stackCounts) {
      if (stacks > statements / 4)
        continue;
      Params p;
      p.statements = statements;
      p.stacks = static_cast<unsigned>(stacks);
      p.tasks = tasks;
      Generated g = generate(p);
      Kernel &k = *g.kernel;
      int64_t actual = countStatements(k);

      KernelSizing sizing = sizeAdStacks(k);
      checkTiers(g, sizing);
      ControlFlowGraph cfg0 = ControlFlowGraph::build(k);
      cfg0.simplify();

      Timing sz = measure(
          [&] {
            KernelSizing r = sizeAdStacks(k);
            return static_cast<int64_t>(r.stacks().size());
          },
          seconds);
      Timing wk = measure([&] { return countStatements(k); }, seconds);
      Timing cf = measure(
          [&] {
            ControlFlowGraph c = ControlFlowGraph::build(k);
            c.simplify();
            return static_cast<int64_t>(c.numNodes());
          },
          seconds);

      std::string growth = "-";
      if (auto it = previous.find(stacks); it != previous.end())
        growth = fmt::format("{:.1f}x", sz.medianMs / it->second);
      previous[stacks] = sz.medianMs;
      std::string szText = fmt::format("{:.3f} ({:.3f})", sz.medianMs, sz.minMs);
      std::string wkText = fmt::format("{:.3f} ({:.3f})", wk.medianMs, wk.minMs);
      std::string cfText = fmt::format("{:.3f} ({:.3f})", cf.medianMs, cf.minMs);
      std::printf("%8lld %6lld %9u %7d %17s %8.0f %7s %14s %7.0f %14s  %s\n",
                  static_cast<long long>(actual), static_cast<long long>(stacks), cfg0.numNodes(),
                  sz.runs, szText.c_str(), sz.medianMs * 1e6 / double(actual), growth.c_str(),
                  wkText.c_str(), sz.medianMs / wk.medianMs, cfText.c_str(),
                  histogram(sizing).c_str());
      if (phases)
        printPhases(k, seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-sizing", argc, argv, runBench);
}
