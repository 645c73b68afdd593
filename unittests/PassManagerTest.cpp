//===- PassManagerTest.cpp - Registry, pipelines and the pass manager -----===//
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/transforms/Passes.h"

#include <gtest/gtest.h>

#include <sstream>

namespace qd {
namespace {

std::unique_ptr<Module> parse(std::string_view text) {
  auto m = parseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : std::make_unique<Module>();
}

constexpr const char *kFoldable = R"(field @out : i32

kernel @k(%n: i32) {
  serial {
    %a = const 2 : i32
    %b = const 3 : i32
    %c = add %a, %b : i32
    %d = mul %n, %c : i32
    store @out[], %d
  }
}
)";

/// A pass that records its name into a shared log when run.
class RecordingPass : public Pass {
public:
  RecordingPass(std::string name, std::vector<std::string> *log)
      : name_(std::move(name)), log_(log) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<bool> run(Module &) override {
    log_->push_back(name_);
    return false;
  }

private:
  std::string name_;
  std::vector<std::string> *log_;
};

/// A kernel pass that makes the IR invalid: a `break` at the kernel's top
/// level.
class BreakingPass : public KernelPass {
public:
  std::string_view name() const override { return "breaker"; }
  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    IRBuilder(kernel).brk();
    return true;
  }
};

/// A kernel pass that fails on a kernel named `bad`.
class PickyPass : public KernelPass {
public:
  explicit PickyPass(std::vector<std::string> *seen) : seen_(seen) {}
  std::string_view name() const override { return "picky"; }
  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    seen_->push_back(kernel.name());
    if (kernel.name() == "bad")
      return absl::FailedPreconditionError("kernel @bad needs sized adstacks");
    return kernel.name() == "changed";
  }

private:
  std::vector<std::string> *seen_;
};

PassRegistry builtinRegistry() {
  PassRegistry r;
  registerBuiltinPasses(r);
  return r;
}

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

TEST(PassManagerTest, GlobalRegistryHasTheBuiltinPasses) {
  const PassRegistry &global = PassRegistry::global();
  for (const char *name : {"fold", "dce", "simplify"}) {
    auto it = global.entries().find(name);
    ASSERT_NE(it, global.entries().end()) << name;
    EXPECT_FALSE(it->second.description.empty());
    absl::StatusOr<std::unique_ptr<Pass>> p = global.create(name);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->name(), name);
  }
  // The same object every time.
  EXPECT_EQ(&PassRegistry::global(), &global);
}

TEST(PassManagerTest, UnknownPassListsTheRegisteredOnes) {
  PassRegistry r = builtinRegistry();
  absl::StatusOr<std::unique_ptr<Pass>> p = r.create("fodl");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(p.status().message()),
            "unknown pass 'fodl'; registered passes: check-global-accesses, dce, fold, forward-ad, "
            "reverse-ad, simplify, size-adstacks");

  // The global registry may hold more passes; it lists at least these.
  PassManager pm;
  absl::Status s = pm.addPipeline("fold,nope");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  std::string message(s.message());
  EXPECT_TRUE(message.starts_with("unknown pass 'nope'; registered passes: ")) << message;
  for (const char *name : {"dce", "fold", "simplify"})
    EXPECT_NE(message.find(name), std::string::npos) << message;
}

TEST(PassManagerTest, LocalRegistryWithACustomPass) {
  std::vector<std::string> log;
  PassRegistry r;
  ASSERT_TRUE(r.add("rec", "records its name", [&] {
                 return std::make_unique<RecordingPass>("rec", &log);
               }).ok());
  absl::Status dup =
      r.add("rec", "again", [&] { return std::make_unique<RecordingPass>("rec", &log); });
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(std::string(dup.message()), "a pass named 'rec' is already registered");
  EXPECT_EQ(r.entries().at("rec").description, "records its name");

  PassManager pm;
  ASSERT_TRUE(pm.addPipeline("rec", r).ok());
  EXPECT_EQ(pm.size(), 1u);
  Module m;
  ASSERT_TRUE(pm.run(m).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"rec"}));

  // The local registry knows nothing about the built-in passes and the
  // global one nothing about `rec`.
  EXPECT_EQ(r.create("fold").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(r.create("fold").status().message()),
            "unknown pass 'fold'; registered passes: rec");
  EXPECT_EQ(PassRegistry::global().create("rec").status().code(), absl::StatusCode::kNotFound);
}

//===----------------------------------------------------------------------===//
// Pipelines
//===----------------------------------------------------------------------===//

TEST(PassManagerTest, EmptyPipelineElements) {
  for (const char *pipeline : {"fold,,dce", "fold,", ",fold", "fold, ,dce", ","}) {
    PassManager pm;
    absl::Status s = pm.addPipeline(pipeline);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << pipeline;
    EXPECT_EQ(std::string(s.message()), std::string("empty pass name in pipeline '") + pipeline +
                                            "'; separate names with single commas");
  }
  // An empty or blank pipeline is no pipeline.
  PassManager pm;
  EXPECT_TRUE(pm.addPipeline("").ok());
  EXPECT_TRUE(pm.addPipeline("   ").ok());
  EXPECT_EQ(pm.size(), 0u);
  // Spaces around names are fine.
  EXPECT_TRUE(pm.addPipeline(" fold , dce ").ok());
  EXPECT_EQ(pm.size(), 2u);
}

TEST(PassManagerTest, FailedPipelineAddsNothing) {
  // A pipeline is added whole or not at all, so a caller that reports the
  // error and carries on does not run half a pipeline.
  PassManager pm;
  ASSERT_TRUE(pm.addPipeline("simplify").ok());
  EXPECT_FALSE(pm.addPipeline("fold,dce,nope").ok());
  EXPECT_EQ(pm.size(), 1u);
  EXPECT_FALSE(pm.addPipeline("fold,,dce").ok());
  EXPECT_EQ(pm.size(), 1u);
}

TEST(PassManagerTest, PipelineOrderIsRespected) {
  std::vector<std::string> log;
  PassRegistry r;
  for (const char *name : {"a", "b", "c"})
    ASSERT_TRUE(
        r.add(name, "", [name, &log] { return std::make_unique<RecordingPass>(name, &log); }).ok());
  PassManager pm;
  ASSERT_TRUE(pm.addPipeline("c,a,b,a", r).ok());
  pm.addPass(std::make_unique<RecordingPass>("direct", &log));
  ASSERT_TRUE(pm.addPipeline("b", r).ok());
  EXPECT_EQ(pm.size(), 6u);
  Module m;
  ASSERT_TRUE(pm.run(m).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"c", "a", "b", "a", "direct", "b"}));
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

TEST(PassManagerTest, PrintAfterAll) {
  std::unique_ptr<Module> m = parse(kFoldable);
  std::ostringstream os;
  PassManagerOptions options;
  options.printAfterAll = &os;
  PassManager pm(options);
  ASSERT_TRUE(pm.addPipeline("fold,dce").ok());
  absl::Status s = pm.run(*m);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(os.str(), R"(// ----- IR after fold -----
field @out : i32

kernel @k(%n: i32) {
  serial {
    %a = const 2 : i32
    %b = const 3 : i32
    %c = const 5 : i32
    %d = mul %n, %c : i32
    store @out[], %d
  }
}
// ----- IR after dce -----
field @out : i32

kernel @k(%n: i32) {
  serial {
    %c = const 5 : i32
    %d = mul %n, %c : i32
    store @out[], %d
  }
}
)");
  EXPECT_EQ(printModule(*m), os.str().substr(os.str().rfind("-----\n") + 6));
}

TEST(PassManagerTest, NoPrintingByDefault) {
  std::unique_ptr<Module> m = parse(kFoldable);
  PassManager pm;
  ASSERT_TRUE(pm.addPipeline("fold").ok());
  ASSERT_TRUE(pm.run(*m).ok());
  EXPECT_TRUE(pm.timings().empty()); // timing is off by default
}

TEST(PassManagerTest, TimingsAreRecordedWhenEnabled) {
  std::unique_ptr<Module> m = parse(kFoldable);
  PassManagerOptions options;
  options.timePasses = true;
  PassManager pm(options);
  ASSERT_TRUE(pm.addPipeline("simplify,fold,dce").ok());
  ASSERT_TRUE(pm.run(*m).ok());
  ASSERT_EQ(pm.timings().size(), 3u);
  EXPECT_EQ(pm.timings()[0].pass, "simplify");
  EXPECT_EQ(pm.timings()[1].pass, "fold");
  EXPECT_EQ(pm.timings()[2].pass, "dce");
  for (const PassManager::Timing &t : pm.timings())
    EXPECT_GE(t.wall.count(), 0);

  std::ostringstream os;
  pm.printTimings(os);
  std::string table = os.str();
  EXPECT_TRUE(table.starts_with("===---")) << table;
  EXPECT_NE(table.find("qd pass execution timing"), std::string::npos) << table;
  // One line per pass, in order, then the total.
  size_t simplify = table.find("%  simplify\n");
  size_t fold = table.find("%  fold\n");
  size_t dce = table.find("%  dce\n");
  size_t total = table.find("100.0%  total\n");
  ASSERT_NE(simplify, std::string::npos) << table;
  ASSERT_NE(fold, std::string::npos) << table;
  ASSERT_NE(dce, std::string::npos) << table;
  ASSERT_NE(total, std::string::npos) << table;
  EXPECT_LT(simplify, fold);
  EXPECT_LT(fold, dce);
  EXPECT_LT(dce, total);
  EXPECT_TRUE(table.ends_with(" ms  100.0%  total\n")) << table;
}

TEST(PassManagerTest, VerifyEachCatchesABrokenPass) {
  std::unique_ptr<Module> m = parse(kFoldable);
  std::vector<std::string> log;
  PassManager pm;
  pm.addPass(std::make_unique<BreakingPass>());
  pm.addPass(std::make_unique<RecordingPass>("after", &log));
  absl::Status s = pm.run(*m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(std::string(s.message()),
            "pass 'breaker' produced invalid IR (this is a bug in the pass):\n"
            "kernel @k: error: 'break' cannot appear at the kernel's top level, which holds only "
            "tasks ('parallel for', 'serial') and launch-time scalar statements; move it into a "
            "task\n"
            "kernel @k: error: 'break' must be inside a 'for' or 'while' loop");
  EXPECT_TRUE(log.empty()) << "passes after the broken one must not run";

  // With verification off, the broken IR goes through.
  std::unique_ptr<Module> m2 = parse(kFoldable);
  PassManagerOptions options;
  options.verifyEach = false;
  PassManager lax(options);
  lax.addPass(std::make_unique<BreakingPass>());
  EXPECT_TRUE(lax.run(*m2).ok());
  EXPECT_EQ(m2->kernels()[0]->body().back().kind(), StmtKind::Break);
}

TEST(PassManagerTest, FailingPassStatusIsPropagated) {
  Module m;
  for (const char *name : {"ok", "bad", "never"})
    m.addKernel(std::make_unique<Kernel>(name));
  std::vector<std::string> seen, log;
  PassManagerOptions options;
  options.timePasses = true;
  PassManager pm(options);
  pm.addPass(std::make_unique<PickyPass>(&seen));
  pm.addPass(std::make_unique<RecordingPass>("after", &log));
  absl::Status s = pm.run(m);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(s.message()), "pass 'picky' failed: kernel @bad needs sized adstacks");
  // KernelPass stops at the first failing kernel; later passes do not run.
  EXPECT_EQ(seen, (std::vector<std::string>{"ok", "bad"}));
  EXPECT_TRUE(log.empty());
  // The failing pass was still timed.
  ASSERT_EQ(pm.timings().size(), 1u);
  EXPECT_EQ(pm.timings()[0].pass, "picky");
}

TEST(PassManagerTest, KernelPassReportsWhetherAnyKernelChanged) {
  std::vector<std::string> seen;
  PickyPass pass(&seen);
  Module m;
  m.addKernel(std::make_unique<Kernel>("same"));
  EXPECT_EQ(pass.run(m).value(), false);
  m.addKernel(std::make_unique<Kernel>("changed"));
  m.addKernel(std::make_unique<Kernel>("same2"));
  EXPECT_EQ(pass.run(m).value(), true);
  EXPECT_EQ(seen, (std::vector<std::string>{"same", "same", "changed", "same2"}));
}

TEST(PassManagerTest, BuiltinPassesReachAFixpoint) {
  std::unique_ptr<Module> m = parse(kFoldable);
  PassManager pm;
  ASSERT_TRUE(pm.addPipeline("simplify,fold,dce").ok());
  ASSERT_TRUE(pm.run(*m).ok());
  std::string once = printModule(*m);
  // Running the same pipeline again changes nothing, and each pass says so.
  for (const char *name : {"simplify", "fold", "dce"}) {
    auto p = PassRegistry::global().create(name);
    ASSERT_TRUE(p.ok());
    absl::StatusOr<bool> changed = (*p)->run(*m);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_FALSE(*changed) << name;
  }
  EXPECT_EQ(printModule(*m), once);
}

} // namespace
} // namespace qd
