//===- SizingReportTest.cpp - The sizing report and exact bounds ----------===//
//
// KernelSizing::describe and report, which bounds sizing proves exact, and
// Backend::sizingReport: the report from the sizing a backend keeps, with
// where each stack lived in the last launch.
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackSizing.h"
#include "qd/interp/Interpreter.h"
#include "qd/runtime/CpuBackend.h"

#include "support/VerifiedModule.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace qd {
namespace {

// Stacks whose compile-time bounds are reached on every path (%bal, %peak)
// and one whose bound is only an upper bound (%maybe); a declared capacity
// and a capacity argument.
constexpr const char *kStacks = R"(field @y : f32

kernel @k(%len: i32, %c: i32, %cap: i32) {
  serial {
    %x = const 1.0 : f32
    %zero = const 0 : i32
    %on = cmp ne %c, %zero : i32
    %bal = adstack.alloca f32, capacity 0
    for %j = 0 to %len {
      adstack.push %bal, %x
      adstack.pop %bal
    }
    %peak = adstack.alloca f32, capacity 0
    adstack.push %peak, %x
    adstack.push %peak, %x
    adstack.pop %peak
    adstack.pop %peak
    if %on {
      adstack.push %peak, %x
    }
    %maybe = adstack.alloca f32, capacity 0
    adstack.push %maybe, %x
    if %on {
      adstack.push %maybe, %x
    }
    %decl = adstack.alloca f32, capacity 7
    adstack.push %decl, %x
    %arg = adstack.alloca f32, capacity %cap
    adstack.push %arg, %x
    %t = adstack.load_top %maybe : f32
    store @y[], %t
  }
}
)";

const AdStackSize &named(const KernelSizing &sizing, std::string_view name) {
  for (const AdStackSize &s : sizing.stacks())
    if (s.name() == name)
      return s;
  ADD_FAILURE() << "no adstack " << name;
  static AdStackSize none;
  return none;
}

TEST(SizingReportTest, BoundsReachedOnEveryPathAreExact) {
  std::unique_ptr<Module> m = parseVerified(kStacks);
  ASSERT_TRUE(m);
  KernelSizing sizing = sizeAdStacks(*m->findKernel("k"));
  // A balanced loop of any trip count: capacity 1, the least there is.
  const AdStackSize &bal = named(sizing, "%bal");
  EXPECT_EQ(bal.method, SizingMethod::BellmanFord);
  EXPECT_EQ(bal.capacity, 1);
  EXPECT_TRUE(bal.exact);
  EXPECT_EQ(sizing.describe(bal),
            "adstack %bal (f32) at t.qd:8:5: tier 1 constant [bellman-ford] = 1 (exact)");
  // The if arms differ, but the peak of 2 comes before the if.
  const AdStackSize &peak = named(sizing, "%peak");
  EXPECT_EQ(peak.capacity, 2);
  EXPECT_TRUE(peak.exact);
  EXPECT_FALSE(peak.refined); // nothing left to measure
  EXPECT_EQ(sizing.describe(peak),
            "adstack %peak (f32) at t.qd:13:5: tier 1 constant [structural] = 2 (exact)");
  // 2 only where %c is set: an upper bound, refined at launch.
  const AdStackSize &maybe = named(sizing, "%maybe");
  EXPECT_EQ(maybe.capacity, 2);
  EXPECT_FALSE(maybe.exact);
  EXPECT_EQ(
      sizing.describe(maybe).find(
          "adstack %maybe (f32) at t.qd:21:5: tier 1 constant [structural] = 2 (upper bound)"),
      0u)
      << sizing.describe(maybe);
  // Declared capacities are what the IR asks for: neither mark.
  EXPECT_EQ(sizing.describe(named(sizing, "%decl")),
            "adstack %decl (f32) at t.qd:26:5: declared [declared] = 7");
  EXPECT_EQ(sizing.describe(named(sizing, "%arg")),
            "adstack %arg (f32) at t.qd:28:5: tier 2 launch-time [declared] = %cap");
}

TEST(SizingReportTest, ExactBoundsAreTheDepthsLaunchesReach) {
  std::unique_ptr<Module> m = parseVerified(kStacks);
  ASSERT_TRUE(m);
  const Kernel &k = *m->findKernel("k");
  for (int32_t len : {0, 3})
    for (int32_t c : {0, 1}) {
      auto program = Program::create(*m);
      ASSERT_TRUE(program.ok());
      Interpreter interp;
      std::vector<LaunchArg> args = {LaunchArg::i32(len), LaunchArg::i32(c), LaunchArg::i32(1)};
      ASSERT_TRUE((*program)->launch("k", args, interp).ok());
      const KernelSizing &sizing = **interp.adStackSizing(k);
      for (const AdStackSize &s : sizing.stacks()) {
        if (!s.exact)
          continue;
        int64_t depth = interp.adStackMaxDepths().at(s.stack);
        EXPECT_EQ(interp.adStackCapacities().at(s.stack), std::max<int64_t>(depth, 1))
            << sizing.describe(s) << " with len " << len << ", c " << c;
      }
      EXPECT_EQ(interp.adStackMaxDepths().at(named(sizing, "%peak").stack), 2);
      EXPECT_EQ(interp.adStackMaxDepths().at(named(sizing, "%bal").stack), len ? 1 : 0);
    }
}

TEST(SizingReportTest, ReportHasOneLinePerStackInProgramOrder) {
  std::unique_ptr<Module> m = parseVerified(kStacks);
  ASSERT_TRUE(m);
  KernelSizing sizing = sizeAdStacks(*m->findKernel("k"));
  std::string report = sizing.report("k", [](const AdStackSize &s) {
    return s.name() == "%decl" ? std::string("; noted") : std::string();
  });
  std::string expected;
  for (const AdStackSize &s : sizing.stacks())
    expected += "@k: " + sizing.describe(s) + (s.name() == "%decl" ? "; noted" : "") + "\n";
  EXPECT_EQ(report, expected);
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), 5);
  EXPECT_EQ(report.find("@k: adstack %bal"), 0u);
}

// A backend whose sizing was computed with other options than the default
// ones, and that counts the requests for it: its report must be that
// sizing's, not a fresh one.
class KeptSizingBackend : public Backend {
public:
  explicit KeptSizingBackend(KernelSizing sizing) : sizing_(std::move(sizing)) {}
  std::string_view name() const override { return "kept"; }
  absl::Status launch(Program &, const Kernel &, std::span<const LaunchArg>,
                      const LaunchOptions &) override {
    return absl::UnimplementedError("the kept-sizing backend launches nothing");
  }
  absl::StatusOr<const KernelSizing *> adStackSizing(const Kernel &) override {
    ++requests;
    return &sizing_;
  }
  std::vector<AdStackPlacement> lastAdStackPlacement() const override { return placement; }

  int requests = 0;
  std::vector<AdStackPlacement> placement;

private:
  KernelSizing sizing_;
};

// %s's loop reads @n, which the kernel writes: outside the grammar.
constexpr const char *kWritten = R"(field @n : i32

kernel @k() {
  serial {
    %x = const 1.0 : f32
    %s = adstack.alloca f32, capacity 0
    %m = load @n[] : i32
    for %j = 0 to %m {
      adstack.push %s, %x
    }
    store @n[], %m
    %t = adstack.alloca f32, capacity 0
    adstack.push %t, %x
  }
}
)";

TEST(SizingReportTest, BackendReportUsesTheSizingItKeeps) {
  std::unique_ptr<Module> m = parseVerified(kWritten);
  ASSERT_TRUE(m);
  const Kernel &k = *m->findKernel("k");
  SizingOptions options;
  options.countKernels = false;
  options.defaultCapacity = 9;
  KeptSizingBackend backend(sizeAdStacks(k, options));
  const KernelSizing &kept = **backend.adStackSizing(k);
  backend.requests = 0;
  AdStackPlacement tape;
  tape.stack = named(kept, "%s").stack;
  tape.memory = AdStackPlacement::Memory::LocalTape;
  tape.capacity = 9;
  tape.entries = 16;
  tape.bytesPerThread = 64;
  backend.placement = {tape};
  absl::StatusOr<std::string> report = backend.sizingReport(k);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(backend.requests, 1);
  // Sized again with the defaults, %s would be measured (need[0]).
  const AdStackSize &s = named(kept, "%s");
  EXPECT_EQ(kept.describe(s).find("adstack %s (f32) at t.qd:6:5: tier 3 default [default] = 9: "
                                  "the loop at t.qd:8:5 has a bound outside the SizeExpr grammar"),
            0u)
      << kept.describe(s);
  EXPECT_EQ(*report,
            "@k: " + kept.describe(s) +
                "; last launch: capacity 9, local tape of 16 entries (64 bytes per "
                "thread)\n@k: adstack %t (f32) at t.qd:12:5: tier 1 constant [structural] = 1 "
                "(exact)\n");
}

TEST(SizingReportTest, CpuReportSaysWhereTheLastLaunchPutEachStack) {
  std::unique_ptr<Module> m = parseVerified(kStacks);
  ASSERT_TRUE(m);
  const Kernel &k = *m->findKernel("k");
  auto cpu = CpuBackend::create();
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  auto program = Program::create(*m);
  ASSERT_TRUE(program.ok());
  std::vector<LaunchArg> args = {LaunchArg::i32(3), LaunchArg::i32(1), LaunchArg::i32(4)};
  ASSERT_TRUE((*program)->launch("k", args, **cpu).ok());
  const KernelSizing *before = *(*cpu)->adStackSizing(k);
  absl::StatusOr<std::string> report = (*cpu)->sizingReport(k);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(*(*cpu)->adStackSizing(k), before);
  // f32 entries with their adjoints: 8 bytes each, per lane.
  EXPECT_NE(report->find("@k: adstack %peak (f32) at t.qd:13:5: tier 1 constant [structural] = "
                         "2 (exact); last launch: capacity 2, heap ("),
            std::string::npos)
      << *report;
  EXPECT_NE(report->find("@k: adstack %arg (f32) at t.qd:28:5: tier 2 launch-time [declared] = "
                         "%cap; last launch: capacity 4, heap ("),
            std::string::npos)
      << *report;
}

} // namespace
} // namespace qd
