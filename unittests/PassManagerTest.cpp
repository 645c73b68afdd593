//===- PassManagerTest.cpp - Registry, pipelines and the pass manager -----===//
#include "qd/analysis/GlobalAccess.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/Passes.h"

#include "ProgramGen.h"

#include <gtest/gtest.h>

#include <iostream>
#include <set>
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

/// Sends what the print-* passes write to std::cout nowhere, for a scope.
class SilenceStdout {
public:
  SilenceStdout() : old_(std::cout.rdbuf(sink_.rdbuf())) {}
  ~SilenceStdout() { std::cout.rdbuf(old_); }

private:
  std::ostringstream sink_;
  std::streambuf *old_;
};

PassRegistry builtinRegistry() {
  PassRegistry r;
  EXPECT_TRUE(registerBuiltinPasses(r).ok());
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
            "unknown pass 'fodl'; registered passes: bound-capped-loops, check-global-accesses, "
            "dce, fold, "
            "forward-ad, "
            "print-activity, print-cooperative-tasks, print-element-ownership, "
            "print-uniformity, reverse-ad, simplify, size-adstacks; aliases: "
            "reverse-ad-recompute");

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
  // One line per pass, in order, then the total; simplify finds nothing to
  // do in kFoldable and says so.
  EXPECT_EQ(pm.timings()[0].result, PassManager::Timing::Result::Unchanged);
  EXPECT_EQ(pm.timings()[1].result, PassManager::Timing::Result::Changed);
  size_t simplify = table.find("%  simplify (no change)\n");
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

//===----------------------------------------------------------------------===//
// Generated programs (unittests/support/ProgramGen.h)
//===----------------------------------------------------------------------===//

std::string message(const absl::Status &s) {
  return std::string(s.message());
}

/// Launches `kernels` in order on one instance of `m` with the program's
/// inputs (output adjoints seeded after @k, input tangents before @k_dual).
absl::StatusOr<std::unique_ptr<testgen::Instance>>
runKernels(const testgen::GenProgram &p, const Module &m, const std::vector<std::string> &kernels,
           const LaunchOptions &options = testgen::defaultLaunchOptions()) {
  auto in = testgen::instantiate(p, m);
  if (!in.ok())
    return in.status();
  Interpreter interp;
  for (const std::string &k : kernels) {
    if (k.ends_with("_dual"))
      testgen::seedInputTangents(m, **in);
    if (absl::Status s = (*in)->program->launch(k, (*in)->args, interp, options); !s.ok())
      return absl::Status(s.code(), "@" + k + ": " + message(s));
    if (k == "k")
      testgen::seedOutputAdjoints(m, **in);
  }
  return in;
}

/// What to launch to observe every kernel of a module made from a generated
/// program: @k, @k then @k_grad, @k_dual.
std::vector<std::vector<std::string>> launchSequences(const Module &m) {
  std::vector<std::vector<std::string>> out{{"k"}};
  if (m.findKernel("k_grad"))
    out.push_back({"k", "k_grad"});
  if (m.findKernel("k_dual"))
    out.push_back({"k_dual"});
  return out;
}

std::unique_ptr<Module> parseGenerated(const testgen::GenProgram &p, const std::string &text) {
  auto m = parseModule(text, {"gen.qd", 1});
  if (!m.ok())
    testgen::fail(p, "does not parse: " + message(m.status()));
  if (absl::Status v = verify(**m); !v.ok())
    testgen::fail(p, "does not verify: " + message(v));
  return *std::move(m);
}

/// The passes that add derived kernels (and refuse kernels with adstacks).
bool addsKernels(const std::string &pass) {
  return pass.starts_with("reverse-ad") || pass == "forward-ad";
}

// Every pass of the global registry, run alone on a generated program
// (GenConfig::everything: every statement kind, adstacks, dual companions,
// a kernel that may write its own bounds), leaves a module that verifies
// and in which @k computes exactly what it computed before (the interpreter
// on the same inputs, every field and ndarray compared bit for bit).
// Passes that add kernels (reverse-ad[-recompute], forward-ad) leave @k unchanged, and
// their kernels run: @k_grad after @k without an error (its adstacks are
// sized at launch: an overflow is an unsound size), @k_dual computing the
// same primal results as @k. They may only refuse a kernel with adstacks.
// check-global-accesses changes nothing and is sound: when it accepts a
// kernel, the interpreter's exact dynamic check accepts the launch.
QD_PROPERTY(PassManagerTest, EveryRegisteredPassPreservesSemantics, 100) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::everything());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> m = parseGenerated(p, printed.text);
  auto ref = runKernels(p, *m, {"k"});
  if (!ref.ok())
    testgen::fail(p, "the generated program fails: " + message(ref.status()));
  LaunchOptions checked = testgen::defaultLaunchOptions();
  checked.checkGlobalAccesses = true;
  bool dynamicOk = runKernels(p, *m, {"k"}, checked).ok();
  RC_CLASSIFY(!dynamicOk, "writes a global after reading it");
  RC_CLASSIFY(printed.hasStacks, "adstacks");
  // Every pass, and every alias (passes with other options).
  std::vector<std::string> names;
  for (const auto &[name, entry] : PassRegistry::global().entries())
    names.push_back(name);
  for (const auto &[name, expansion] : PassRegistry::global().aliases())
    names.push_back(name);
  RC_ASSERT(names.size() >= 8u);
  for (const std::string &name : names) {
    std::unique_ptr<Module> q = cloneModule(*m);
    std::unique_ptr<Pass> pass = *PassRegistry::global().create(name);
    absl::StatusOr<bool> changed = [&] {
      SilenceStdout quiet; // the print-* passes
      return pass->run(*q);
    }();
    if (changed.ok() && !*changed && !isEquivalent(*m, *q))
      testgen::fail(p, name + " reported no change but changed the module");
    std::string why;
    if (name == "check-global-accesses") {
      if (changed.ok() && !dynamicOk)
        testgen::fail(p, "check-global-accesses accepts a kernel whose launch writes a global "
                         "after reading it");
      // The launches pass distinct buffers; the static check also reports
      // a read and a write through two ndarrays that may be one buffer.
      bool onlyThroughAliases = true;
      for (const GlobalAccessConflict &c : findGlobalAccessConflicts(*m->findKernel("k")))
        onlyThroughAliases &= c.throughAliases();
      if (!changed.ok() && dynamicOk && !printed.writesBoundData && !onlyThroughAliases)
        testgen::fail(p, "check-global-accesses rejects a kernel that writes no global it "
                         "reads:\n" +
                             message(changed.status()));
      if (!isEquivalent(*m, *q, &why))
        testgen::fail(p, "check-global-accesses changed the module: " + why);
      continue;
    }
    bool derives = addsKernels(name);
    if (!changed.ok()) {
      if (derives && printed.hasStacks)
        continue; // documented: a kernel that already has adstacks
      testgen::fail(p, name + " fails: " + message(changed.status()));
    }
    if (absl::Status v = verify(*q); !v.ok())
      testgen::fail(p, "after " + name + ", the module does not verify: " + message(v) + "\n" +
                           printModule(*q));
    const Kernel *k = q->findKernel("k");
    if (!k)
      testgen::fail(p, name + " removed @k");
    if (derives && !isEquivalent(*m->findKernel("k"), *k, &why))
      testgen::fail(p, name + " changed @k: " + why);
    for (const auto &seq : launchSequences(*q)) {
      auto out = runKernels(p, *q, seq);
      if (!out.ok())
        testgen::fail(p, "after " + name + ": " + message(out.status()) + "\n" + printModule(*q));
      // @k and @k_dual compute what @k computed; @k_grad's results are
      // checked against finite differences in AutoDiffTest.
      if (seq.back() == "k_grad")
        continue;
      if (std::string d = testgen::compareInstances(*m, **ref, *q, **out, 0, /*primalOnly=*/true);
          !d.empty())
        testgen::fail(p, "after " + name + ", @" + seq.back() + " computes another result: " + d +
                             "\n" + printModule(*q));
    }
  }
}

// Random pipelines of the registered passes that keep kernels and add none
// (fold, dce, simplify, size-adstacks, ...), run by the PassManager with
// verification after every pass, optionally after reverse-ad or forward-ad:
// every kernel (@k, @k_grad, @k_dual) computes exactly what it computed
// before the pipeline, in every field component and ndarray.
QD_PROPERTY(PassManagerTest, RandomPipelinesPreserveEveryKernel, 100) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::everything());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> m = parseGenerated(p, printed.text);
  std::vector<std::string> cleanup;
  for (const auto &[name, entry] : PassRegistry::global().entries())
    if (!addsKernels(name) && name != "check-global-accesses")
      cleanup.push_back(name);
  const char *derived[] = {"reverse-ad", "forward-ad", "reverse-ad-recompute"};
  int ad = printed.hasStacks ? 0 : *rc::gen::inRange(0, 4);
  std::vector<std::string> pipeline = *rc::gen::container<std::vector<std::string>>(
      size_t(*rc::gen::inRange(1, 7)), rc::gen::elementOf(cleanup));
  if (ad) {
    PassManager pm;
    RC_ASSERT(pm.addPipeline(derived[ad - 1]).ok());
    if (absl::Status s = pm.run(*m); !s.ok())
      testgen::fail(p, message(s));
  }
  std::unique_ptr<Module> q = cloneModule(*m);
  std::string text;
  for (const std::string &n : pipeline)
    text += (text.empty() ? "" : ",") + n;
  RC_LOG() << "pipeline: " << text << "\n";
  // Passes that report no change are not verified again: check that they
  // changed nothing.
  PassManagerOptions options;
  options.checkUnchanged = true;
  PassManager pm(options);
  RC_ASSERT(pm.addPipeline(text).ok());
  SilenceStdout quiet; // the print-* passes
  if (absl::Status s = pm.run(*q); !s.ok())
    testgen::fail(p, "--passes=" + text + ": " + message(s));
  RC_CLASSIFY(ad == 1, "after reverse-ad");
  RC_CLASSIFY(ad == 3, "after reverse-ad-recompute");
  RC_CLASSIFY(ad == 2, "after forward-ad");
  for (const auto &seq : launchSequences(*m)) {
    auto before = runKernels(p, *m, seq);
    if (!before.ok())
      testgen::fail(p, "before --passes=" + text + ": " + message(before.status()));
    auto after = runKernels(p, *q, seq);
    if (!after.ok())
      testgen::fail(p, "after --passes=" + text + ": " + message(after.status()) + "\n" +
                           printModule(*q));
    if (std::string d = testgen::compareInstances(*m, **before, *q, **after); !d.empty())
      testgen::fail(p, "after --passes=" + text + ", @" + seq.back() +
                           " computes another result: " + d + "\nbefore:\n" + printModule(*m) +
                           "\nafter:\n" + printModule(*q));
  }
}

} // namespace
} // namespace qd
