//===- AdStackSizingRandomTest.cpp - Adstack sizing on random kernels -----===//
//
// RapidCheck properties of the adstack sizing over random kernels and
// gradients (unittests/support/ProgramGen.h), and the CFG tier's two
// longest-path algorithms (NetPushPaths.h) against each other.
//
//===----------------------------------------------------------------------===//
#include "AdStackSizingHarness.h"

namespace qd {
namespace {

using namespace sizingtest;

//===----------------------------------------------------------------------===//
// Random kernels (unittests/support/ProgramGen.h)
//===----------------------------------------------------------------------===//

/// Parses a generated program (RapidCheck fails the case if it does not).
std::unique_ptr<Module> parseGenerated(const testgen::GenProgram &p,
                                       const testgen::Printed &printed) {
  auto m = parseModule(printed.text, {"random.qd", 1});
  if (!m.ok())
    testgen::fail(p, "does not parse: " + message(m.status()));
  return *std::move(m);
}

/// The gradient of a generated program's @k (added to `m`).
const Kernel &generatedGradient(const testgen::GenProgram &p, Module &m) {
  auto g = buildGradientKernel(m, *m.findKernel("k"));
  if (!g.ok())
    testgen::fail(p, "no gradient: " + message(g.status()));
  return **g;
}

/// testgen::checkOptimisticLaunch on the interpreter (RapidCheck fails the
/// case on a difference); returns how many iterations ran twice.
int64_t checkOptimisticAgainstCounting(const testgen::GenProgram &p, const Module &module,
                                       const std::string &kernel) {
  Interpreter counting, optimistic;
  int64_t reruns = 0;
  if (std::string d =
          testgen::checkOptimisticLaunch(p, module, kernel, counting, optimistic, 1e-9, &reruns);
      !d.empty())
    testgen::fail(p, d);
  return reruns;
}

// Random kernels with adstacks (pushes and pops in loops and arms, stacks
// allocated inside loops, balanced while bodies) under loops of every bound
// kind: constants, %n, @cnt reads in the task and at launch, ndarray shapes,
// ndarray reads at enclosing indices (guarded or not), enclosing indices,
// the loop-carried integer local, a bound the kernel itself writes (tier 3).
// Every stack's capacity is at least the depth the interpreter observed,
// and equals max(depth, 1) when the sizing claims to be exact; the two
// tier-1 analyses agree where both resolve a stack; a kernel with an
// optimistic launch gives the counting kernel's results and capacities
// with it (checkOptimisticAgainstCounting).
QD_PROPERTY(AdStackSizingTest, RandomKernelsAreSoundAndTight, 300) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::sizing());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> module = parseGenerated(p, printed);
  if (absl::Status v = verify(*module); !v.ok())
    testgen::fail(p, "does not verify: " + message(v));
  auto in = testgen::instantiate(p, *module);
  if (!in.ok())
    testgen::fail(p, "instantiate: " + message(in.status()));
  Program &program = *(*in)->program;
  Interpreter interp;
  absl::Status st = program.launch("k", (*in)->args, interp, withDefault(int64_t(1) << 20));
  if (!st.ok())
    testgen::fail(p, "launch failed: " + message(st));

  const Kernel &k = *module->findKernel("k");
  const KernelSizing &ks = **interp.adStackSizing(k);
  if (const Kernel *counter = ks.countKernel())
    if (absl::Status v = verify(*counter); !v.ok())
      testgen::fail(p, "the counting kernel does not verify: " + message(v) + "\n" +
                           printKernel(*counter));
  KernelSizing structural = sizeAdStacks(k, onlyTier1(true, false));
  KernelSizing bf = sizeAdStacks(k, onlyTier1(false, true));
  bool exact = false, measured = false, tier3 = false;
  for (size_t i = 0; i < ks.stacks().size(); ++i) {
    const AdStackSize &s = ks.stacks()[i];
    measured |= s.tier == SizingTier::Measured;
    tier3 |= s.tier == SizingTier::Default;
    // Tier-1 analyses agree when both resolve the stack.
    const AdStackSize &s1 = structural.stacks()[i], &s2 = bf.stacks()[i];
    if (s1.method == SizingMethod::Structural && s2.method == SizingMethod::BellmanFord &&
        s1.exact && s2.capacity < s1.capacity)
      testgen::fail(p, "Bellman-Ford is below the exact structural bound: " +
                           structural.describe(s1) + " vs " + bf.describe(s2));
    auto it = interp.adStackMaxDepths().find(s.stack);
    if (it == interp.adStackMaxDepths().end())
      continue; // never executed
    int64_t depth = it->second;
    int64_t cap = interp.adStackCapacities().at(s.stack);
    if (program.lastAdStackCapacities().at(s.stack) != cap)
      testgen::fail(p, "the launch used another capacity than the sizing: " + ks.describe(s));
    if (cap < depth)
      testgen::fail(p, fmt::format("unsound: observed depth {}, capacity {}: {}", depth, cap,
                                   ks.describe(s)));
    if (s.exact && cap != std::max<int64_t>(depth, 1))
      testgen::fail(p, fmt::format("not tight: observed depth {}, capacity {}: {}", depth, cap,
                                   ks.describe(s)));
    exact |= s.exact;
  }
  RC_CLASSIFY(exact, "an exact stack");
  RC_CLASSIFY(measured, "a stack measured by the counting kernel (exact)");
  if (ks.optimistic())
    RC_CLASSIFY(checkOptimisticAgainstCounting(p, *module, "k") > 0,
                "an optimistic launch, iterations rerun");
  RC_CLASSIFY(ks.optimistic(), "an optimistic launch");
  RC_CLASSIFY(tier3, "a tier-3 stack");
  RC_CLASSIFY(printed.hasNdarrayBound, "ndarray-read bound");
  RC_CLASSIFY(printed.writesBoundData, "writes a bound");
  RC_CLASSIFY(printed.hasWhile, "while");
}

// Random gradients (GenConfig::autodiff: while loops, nested loops,
// several tasks) whose tapes are measured at launch, counted and launched
// optimistically (checkOptimisticAgainstCounting).
QD_PROPERTY(AdStackSizingTest, RandomGradientsLaunchOptimistically, 150) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::autodiff());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> module = parseGenerated(p, printed);
  KernelSizing ks = sizeAdStacks(generatedGradient(p, *module));
  RC_CLASSIFY(ks.numCounted() > 0, "a measured stack");
  RC_CLASSIFY(ks.optimistic(), "an optimistic launch");
  int64_t reruns = checkOptimisticAgainstCounting(p, *module, "k_grad");
  RC_CLASSIFY(reruns > 0, "iterations rerun");
}

// Random gradients (GenConfig::autodiff: while loops nested in loops,
// several tasks) launched on the interpreter after their kernel: no launch
// overflows, every stack that ran is sized soundly, and exactly where the
// sizing says so (counting in stages included), and no stack is left to
// the tier-3 default: one whose count reads its own values (or seems to: a
// local restored from a tape inside a nested loop of the reverse sweep looks
// like a dependence of the forward loops) is counted with a bound. The
// shares are printed (1000 cases: 19% counted in stages, 0.8% bounded).
QD_PROPERTY(AdStackSizingTest, RandomGradientsNeverOverflow, 200) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::autodiff());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> module = parseGenerated(p, printed);
  const Kernel &grad = generatedGradient(p, *module);
  auto in = testgen::instantiate(p, *module);
  if (!in.ok())
    testgen::fail(p, "instantiate: " + message(in.status()));
  Program &program = *(*in)->program;
  Interpreter interp;
  LaunchOptions o = testgen::defaultLaunchOptions();
  if (!program.launch("k", (*in)->args, interp, o).ok())
    return; // the kernel fails before its gradient runs
  testgen::seedOutputAdjoints(*module, **in);
  absl::Status st = program.launch("k_grad", (*in)->args, interp, o);
  const KernelSizing &ks = **interp.adStackSizing(grad);
  bool measured = false, staged = false;
  for (const AdStackSize &s : ks.stacks()) {
    measured |= s.tier == SizingTier::Measured;
    if (s.tier == SizingTier::Default)
      testgen::fail(p, "a tier-3 stack in a gradient: " + ks.describe(s));
  }
  const std::vector<int> &bounds = ks.countBoundArgs();
  bool bounded = std::any_of(bounds.begin(), bounds.end(), [](int a) { return a >= 0; });
  if (const Kernel *counter = ks.countKernel()) {
    if (absl::Status v = verify(*counter); !v.ok())
      testgen::fail(p, "the counting kernel does not verify: " + message(v) + "\n" +
                           printKernel(*counter));
    staged = (*interp.adStackSizing(*counter))->countKernel() != nullptr;
  }
  if (!st.ok()) {
    if (message(st).find("adstack overflow") != std::string::npos)
      testgen::fail(p, "the gradient overflowed: " + message(st));
    return; // the gradient fails as its kernel would (bounds, division)
  }
  for (const AdStackSize &s : ks.stacks()) {
    auto it = interp.adStackMaxDepths().find(s.stack);
    if (it == interp.adStackMaxDepths().end())
      continue;
    int64_t cap = interp.adStackCapacities().at(s.stack);
    if (cap < it->second || (s.exact && cap != std::max<int64_t>(it->second, 1)))
      testgen::fail(
          p, fmt::format("observed depth {}, capacity {}: {}", it->second, cap, ks.describe(s)));
  }
  RC_CLASSIFY(measured, "a measured stack");
  RC_CLASSIFY(staged, "counted in stages");
  RC_CLASSIFY(bounded, "counted with a bound (its count reads its own values)");
}

//===----------------------------------------------------------------------===//
// The CFG tier's two algorithms (NetPushPaths.h)
//===----------------------------------------------------------------------===//

/// A graph from adjacency lists (every edge u -> v, v != source).
NetPushGraph netGraph(const std::vector<std::vector<unsigned>> &succs, std::vector<int64_t> net,
                      std::vector<int64_t> peak, unsigned source = 0) {
  NetPushGraph g;
  for (const auto &row : succs) {
    g.succ.insert(g.succ.end(), row.begin(), row.end());
    g.succBegin.push_back(static_cast<unsigned>(g.succ.size()));
  }
  g.net = std::move(net);
  g.peak = std::move(peak);
  g.source = source;
  return g;
}

/// Textbook Bellman-Ford from the source, maximising: after n - 1 rounds
/// of relaxing every edge, an edge that still relaxes lies on (or after) a
/// positive cycle the source reaches.
std::optional<int64_t> plainBellmanFord(const NetPushGraph &g) {
  const unsigned n = g.numNodes();
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> d(n, kUnset);
  d[g.source] = 0;
  for (unsigned round = 0; round < n; ++round) {
    bool changed = false;
    for (unsigned u = 0; u < n; ++u)
      if (d[u] != kUnset)
        for (unsigned v : g.succs(u))
          if (d[u] + g.net[u] > d[v]) {
            d[v] = d[u] + g.net[u];
            changed = true;
          }
    if (!changed)
      break;
    if (round + 1 == n)
      return std::nullopt;
  }
  int64_t best = 0;
  for (unsigned u = 0; u < n; ++u)
    if (d[u] != kUnset)
      best = std::max(best, d[u] + g.peak[u]);
  return best;
}

std::string showGraph(const NetPushGraph &g) {
  std::string out = fmt::format("source {}\n", g.source);
  for (unsigned u = 0; u < g.numNodes(); ++u) {
    out += fmt::format("  {} (net {}, peak {}) ->", u, g.net[u], g.peak[u]);
    for (unsigned v : g.succs(u))
      out += fmt::format(" {}", v);
    out += "\n";
  }
  return out;
}

// A loop entered at both of its nodes (not reducible): the back edge b -> a
// relaxes although a does not dominate b, so the structured algorithm falls
// back to Bellman-Ford. With nets (a, b) = (-1, 1) the cycle is balanced;
// with (-1, 2) it pushes one more per round.
TEST(AdStackSizingTest, IrreducibleLoopFallsBackToBellmanFord) {
  const std::vector<std::vector<unsigned>> succs = {{1, 2}, {2}, {1}}; // src, a, b
  NetPushGraph balanced = netGraph(succs, {5, -1, 1}, {5, 0, 1});
  bool fellBack = false;
  EXPECT_EQ(longestNetPath(balanced, NetPathAlgorithm::Structured, &fellBack), 6); // src b a: 5+1
  EXPECT_TRUE(fellBack);
  EXPECT_EQ(longestNetPath(balanced, NetPathAlgorithm::BellmanFord), 6);
  EXPECT_EQ(plainBellmanFord(balanced), 6);
  NetPushGraph growing = netGraph(succs, {5, -1, 2}, {5, 0, 2});
  EXPECT_EQ(longestNetPath(growing, NetPathAlgorithm::Structured, &fellBack), std::nullopt);
  EXPECT_TRUE(fellBack);
  EXPECT_EQ(longestNetPath(growing, NetPathAlgorithm::BellmanFord), std::nullopt);
  // The same loop entered at its header only: decided without falling back.
  NetPushGraph reducible = netGraph({{1}, {2}, {1}}, {5, -1, 2}, {5, 0, 2});
  EXPECT_EQ(longestNetPath(reducible, NetPathAlgorithm::Structured, &fellBack), std::nullopt);
  EXPECT_FALSE(fellBack);
  reducible.net[2] = reducible.peak[2] = 1;
  EXPECT_EQ(longestNetPath(reducible, NetPathAlgorithm::Structured, &fellBack), 5);
  EXPECT_FALSE(fellBack);
}

// Random graphs of up to 9 nodes (self loops, loops with several entries,
// unreachable parts): both algorithms give the textbook Bellman-Ford's
// answer.
QD_PROPERTY(AdStackSizingTest, NetPathAlgorithmsAgreeOnRandomGraphs, 2000) {
  const unsigned n = *rc::gen::inRange(1u, 10u);
  const int density = *rc::gen::inRange(5, 60); // percent of the possible edges
  std::vector<std::vector<unsigned>> succs(n);
  std::vector<int64_t> net(n), peak(n);
  for (unsigned u = 0; u < n; ++u) {
    for (unsigned v = 1; v < n; ++v) // nothing enters the source (node 0)
      if (*rc::gen::inRange(0, 100) < density)
        succs[u].push_back(v);
    net[u] = *rc::gen::weightedElement<int64_t>({{4, 0}, {2, 1}, {2, -1}, {1, 2}, {1, -2}});
    peak[u] = std::max<int64_t>(net[u], 0) + *rc::gen::inRange<int64_t>(0, 2);
  }
  NetPushGraph g = netGraph(succs, net, peak);
  std::optional<int64_t> reference = plainBellmanFord(g);
  bool fellBack = false;
  std::optional<int64_t> structured = longestNetPath(g, NetPathAlgorithm::Structured, &fellBack);
  std::optional<int64_t> bellmanFord = longestNetPath(g, NetPathAlgorithm::BellmanFord);
  auto show = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : "unbounded"; };
  if (structured != reference || bellmanFord != reference)
    RC_FAIL(fmt::format("reference {}, structured {}, Boost Bellman-Ford {}\n{}", show(reference),
                        show(structured), show(bellmanFord), showGraph(g)));
  RC_CLASSIFY(!reference, "a positive cycle");
  RC_CLASSIFY(fellBack, "fell back (not reducible)");
}

/// Every adstack of `k`: the CFG tier by both algorithms must agree, and
/// the structured one must not fall back (qd's CFGs are reducible).
/// Returns whether some stack had a positive cycle.
bool checkCfgPaths(const testgen::GenProgram &p, const Kernel &k) {
  bool positive = false;
  walk(const_cast<Kernel &>(k), [&](Stmt &s) {
    auto *a = dyn_cast<AdStackAllocaStmt>(&s);
    if (!a)
      return;
    bool fellBack = false;
    std::optional<int64_t> structured =
        bellmanFordDepth(k, *a, NetPathAlgorithm::Structured, &fellBack);
    std::optional<int64_t> reference = bellmanFordDepth(k, *a, NetPathAlgorithm::BellmanFord);
    auto show = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : "unbounded"; };
    if (structured != reference)
      testgen::fail(p, fmt::format("@{}: adstack at {}: structured {}, Bellman-Ford {}", k.name(),
                                   a->loc().str(), show(structured), show(reference)));
    if (fellBack)
      testgen::fail(
          p, fmt::format("@{}: adstack at {}: the CFG is not reducible", k.name(), a->loc().str()));
    positive |= !reference;
    if (pushingCycleIsCertain(k, *a) && reference)
      testgen::fail(p, fmt::format("@{}: adstack at {}: tier 1b skipped it, but its longest path "
                                   "is {}",
                                   k.name(), a->loc().str(), *reference));
  });
  return positive;
}

// Random kernels with adstacks (GenConfig::sizing: pushes and pops in
// loops and arms, while loops, break and continue, up to 3 levels; and the
// same 6 levels deep) and random gradients (their tapes): the structured
// longest path gives Bellman-Ford's answer for every stack, without
// falling back; and where tier 1b skips the CFG, the longest path is
// unbounded indeed.
QD_PROPERTY(AdStackSizingTest, CfgPathsMatchBellmanFordOnRandomKernels, 1000) {
  testgen::GenConfig config = testgen::GenConfig::sizing();
  if (*rc::gen::arbitrary<bool>())
    config.maxDepth = 6;
  testgen::GenProgram p = *testgen::genProgram(config);
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> m = parseGenerated(p, printed);
  bool positive = checkCfgPaths(p, *m->findKernel("k"));
  RC_CLASSIFY(positive, "a positive cycle");
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasJump, "break/continue");
  RC_CLASSIFY(config.maxDepth == 6, "6 levels");
}

QD_PROPERTY(AdStackSizingTest, CfgPathsMatchBellmanFordOnRandomGradients, 300) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::autodiff());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> m = parseGenerated(p, printed);
  bool positive = checkCfgPaths(p, generatedGradient(p, *m));
  RC_CLASSIFY(positive, "a positive cycle");
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasJump, "break/continue");
}

// A gradient's tapes push in loops that pop nothing, and tier 1b used to
// build a graph of the whole task for every one of them before finding the
// positive cycle: quadratic in the depth of a nest. It now skips them.
TEST(AdStackSizingTest, LongestPathWorkGrowsLinearlyWithNestingDepth) {
  auto work = [](int depth) {
    auto m = parseModule(testgen::nestedLoopsKernel(depth));
    EXPECT_TRUE(m.ok()) << m.status();
    SizingWork w;
    if (!m.ok())
      return w;
    auto grad = buildGradientKernel(**m, *(*m)->findKernel("k"));
    EXPECT_TRUE(grad.ok()) << grad.status();
    if (!grad.ok())
      return w;
    SizingOptions options;
    options.work = &w;
    KernelSizing sizing = sizeAdStacks(**grad, options);
    // Every tape is sized by its launch-time product of trip counts.
    for (const AdStackSize &s : sizing.stacks())
      EXPECT_EQ(s.tier, SizingTier::LaunchTime) << s.name();
    return w;
  };
  SizingWork w25 = work(25), w50 = work(50), w100 = work(100);
  EXPECT_LE(w100.pathNodes - w50.pathNodes, 2 * (w50.pathNodes - w25.pathNodes) + 8);
  EXPECT_LT(w100.pathNodes, 100);
  // The tape of each level's value, and of its copy in the adjoint loop.
  EXPECT_EQ(w100.pathSkips - w50.pathSkips, 2 * (w50.pathSkips - w25.pathSkips));
  EXPECT_GE(w100.pathSkips, 100);
}

} // namespace
} // namespace qd
