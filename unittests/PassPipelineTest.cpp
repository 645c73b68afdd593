//===- PassPipelineTest.cpp - Pass options, aliases, "changed" results ----===//
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/transforms/AutoDiff.h"
#include "qd/transforms/Passes.h"

#include <gtest/gtest.h>

#include <sstream>

namespace qd {
namespace {

/// Records its name and option values when run; reports `changed`.
class OptionsPass : public Pass {
public:
  OptionsPass(std::string text, std::vector<std::string> *log, bool changed)
      : text_(std::move(text)), log_(log), changed_(changed) {}
  std::string_view name() const override { return "opts"; }
  absl::StatusOr<bool> run(Module &) override {
    log_->push_back(text_);
    return changed_;
  }

private:
  std::string text_;
  std::vector<std::string> *log_;
  bool changed_;
};

/// A registry with `opts` (options flag: bool = false, count: int = 3,
/// changed: bool = true), `plain` (no options) and the alias `opts-flag`.
PassRegistry testRegistry(std::vector<std::string> *log) {
  PassRegistry r;
  EXPECT_TRUE(r.add("opts", "takes options", [log](const PassOptionValues &o) {
                 return std::make_unique<OptionsPass>(
                     std::string("flag=") + (o.getBool("flag") ? "true" : "false") +
                         " count=" + std::to_string(o.getInt("count")),
                     log, o.getBool("changed"));
               }).ok());
  EXPECT_TRUE(r.addOption("opts", {"flag", PassOptionType::Bool, "false", "a flag"}).ok());
  EXPECT_TRUE(r.addOption("opts", {"count", PassOptionType::Int, "3", "a count"}).ok());
  EXPECT_TRUE(r.addOption("opts", {"changed", PassOptionType::Bool, "true", "report"}).ok());
  EXPECT_TRUE(r.add("plain", "no options", [log] {
                 return std::make_unique<OptionsPass>("plain", log, false);
               }).ok());
  EXPECT_TRUE(r.addAlias("opts-flag", "opts{flag=true}").ok());
  return r;
}

std::string error(const PassRegistry &r, std::string_view pipeline) {
  absl::StatusOr<std::vector<PassRegistry::Created>> p = r.parsePipeline(pipeline);
  EXPECT_FALSE(p.ok()) << pipeline;
  return p.ok() ? "" : std::string(p.status().message());
}

TEST(PassPipelineTest, OptionsAreParsedTyped) {
  std::vector<std::string> log;
  PassRegistry r = testRegistry(&log);
  PassManager pm;
  ASSERT_TRUE(pm.addPipeline("opts, opts{flag=true count=-12}, opts{ count=7,flag }, "
                             "opts{flag=0,count=0}, opts{}, plain, opts-flag",
                             r)
                  .ok());
  Module m;
  ASSERT_TRUE(pm.run(m).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"flag=false count=3", "flag=true count=-12",
                                           "flag=true count=7", "flag=false count=0",
                                           "flag=false count=3", "plain", "flag=true count=3"}));
}

TEST(PassPipelineTest, LabelsShowTheOptionsThatDifferFromTheDefaults) {
  std::vector<std::string> log;
  PassRegistry r = testRegistry(&log);
  auto p = r.parsePipeline("opts{count=3 flag=false},opts{count=4,flag},opts-flag");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].label, "opts");
  EXPECT_EQ((*p)[1].label, "opts{flag=true count=4}");
  EXPECT_EQ((*p)[2].label, "opts{flag=true}");
}

TEST(PassPipelineTest, ErrorsNameThePassTheOptionAndTheColumn) {
  std::vector<std::string> log;
  PassRegistry r = testRegistry(&log);
  EXPECT_EQ(error(r, "plain,opts{flg=true}"),
            "pass 'opts' has no option 'flg'; its options: flag, count, changed (column 12 of "
            "pipeline 'plain,opts{flg=true}')");
  EXPECT_EQ(error(r, "plain{x=1}"),
            "pass 'plain' has no option 'x'; it takes no options (column 7 of pipeline "
            "'plain{x=1}')");
  EXPECT_EQ(error(r, "opts{flag=maybe}"),
            "option 'flag' of pass 'opts' takes true or false, got 'maybe' (column 11 of pipeline "
            "'opts{flag=maybe}')");
  EXPECT_EQ(error(r, "opts{count=12x}"),
            "option 'count' of pass 'opts' takes a 64-bit decimal integer, got '12x' (column 12 "
            "of pipeline 'opts{count=12x}')");
  EXPECT_EQ(error(r, "opts{count=99999999999999999999}"),
            "option 'count' of pass 'opts' takes a 64-bit decimal integer, got "
            "'99999999999999999999' (column 12 of pipeline 'opts{count=99999999999999999999}')");
  EXPECT_EQ(error(r, "opts{count}"),
            "option 'count' of pass 'opts' needs a value: count=<int> (column 6 of pipeline "
            "'opts{count}')");
  EXPECT_EQ(error(r, "opts{flag flag=false}"),
            "option 'flag' of pass 'opts' is given twice (column 11 of pipeline 'opts{flag "
            "flag=false}')");
  EXPECT_EQ(error(r, "opts{=1}"), "missing option name before '=' in the options of pass 'opts' "
                                  "(column 6 of pipeline 'opts{=1}')");
  EXPECT_EQ(error(r, "plain,opts{flag"),
            "unbalanced '{' after pass 'opts': expected '}' (column 11 of pipeline "
            "'plain,opts{flag')");
  EXPECT_EQ(error(r, "opts{flag}}"),
            "unbalanced '}' after 'opts{flag}': no '{' opens it (column 11 of pipeline "
            "'opts{flag}}')");
  EXPECT_EQ(error(r, "opts{a{b}}"), "unexpected '{' inside the options of pass 'opts' (column 7 "
                                    "of pipeline 'opts{a{b}}')");
  EXPECT_EQ(error(r, "opts{flag} plain"),
            "expected ',' after the options of pass 'opts', found 'plain' (column 12 of pipeline "
            "'opts{flag} plain')");
  EXPECT_EQ(error(r, "opts-flag{count=1}"),
            "'opts-flag' is an alias of 'opts{flag=true}' and takes no options; set them on "
            "'opts' instead (column 10 of pipeline 'opts-flag{count=1}')");
  EXPECT_EQ(error(r, "{flag}"),
            "empty pass name in pipeline '{flag}'; separate names with single commas");
  EXPECT_EQ(error(r, "nope{x}"),
            "unknown pass 'nope'; registered passes: opts, plain; aliases: opts-flag");
  // An error adds nothing.
  PassManager pm;
  EXPECT_FALSE(pm.addPipeline("plain,opts{count=x}", r).ok());
  EXPECT_EQ(pm.size(), 0u);
}

TEST(PassPipelineTest, RegistrationErrors) {
  std::vector<std::string> log;
  PassRegistry r = testRegistry(&log);
  EXPECT_EQ(r.addOption("nope", {"x", PassOptionType::Bool, "true", ""}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(r.addOption("opts", {"flag", PassOptionType::Bool, "true", ""}).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(std::string(r.addOption("opts", {"n", PassOptionType::Int, "x", ""}).message()),
            "default of option 'n' of pass 'opts' takes a 64-bit decimal integer, got 'x'");
  EXPECT_EQ(r.addOption("opts", {"a=b", PassOptionType::Int, "1", ""}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.addAlias("plain", "opts").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(
      r.add("opts-flag", "", [&] { return std::make_unique<OptionsPass>("", &log, false); }).code(),
      absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(std::string(r.addAlias("bad", "opts{nope}").message()),
            "alias 'bad': pass 'opts' has no option 'nope'; its options: flag, count, changed "
            "(column 6 of pipeline 'opts{nope}')");
  EXPECT_EQ(r.addAlias("two", "opts,plain").code(), absl::StatusCode::kInvalidArgument);
}

TEST(PassPipelineTest, BuiltinReverseAdOptionAndAlias) {
  const PassRegistry &r = PassRegistry::global();
  const auto &options = r.entries().at("reverse-ad").options;
  ASSERT_EQ(options.size(), 3u);
  EXPECT_EQ(options[0].name, "tape-nested-loops");
  EXPECT_EQ(options[0].defaultValue, "true");
  EXPECT_EQ(options[1].name, "tape-factors");
  EXPECT_EQ(options[1].defaultValue, ReverseADOptions().tapeFactors ? "true" : "false");
  EXPECT_EQ(options[2].name, "checkpoint");
  EXPECT_EQ(options[2].defaultValue, "false");
  EXPECT_EQ(r.aliases().at("reverse-ad-recompute"), "reverse-ad{tape-nested-loops=false}");
  auto p = r.parsePipeline("reverse-ad-recompute,reverse-ad{tape-nested-loops=true}");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)[0].label, "reverse-ad{tape-nested-loops=false}");
  EXPECT_EQ((*p)[1].label, "reverse-ad");
  // Every built-in pass is created from its name alone.
  for (const auto &[name, entry] : r.entries()) {
    absl::StatusOr<std::unique_ptr<Pass>> pass = r.create(name);
    ASSERT_TRUE(pass.ok()) << pass.status();
    EXPECT_EQ((*pass)->name(), name);
    EXPECT_FALSE(entry.description.empty()) << name;
  }
}

TEST(PassPipelineTest, ListShowsOptionsAndAliases) {
  std::vector<std::string> log;
  PassRegistry r = testRegistry(&log);
  std::ostringstream os;
  r.printList(os);
  EXPECT_EQ(os.str(), "  opts - takes options\n"
                      "      flag=<bool> (default: false) - a flag\n"
                      "      count=<int> (default: 3) - a count\n"
                      "      changed=<bool> (default: true) - report\n"
                      "  opts-flag - alias of opts{flag=true}\n"
                      "  plain - no options\n");
}

//===----------------------------------------------------------------------===//
// What the pass manager does with "changed"
//===----------------------------------------------------------------------===//

/// Makes the IR invalid (a `break` at the kernel's top level) and claims
/// to have changed nothing.
class LyingPass : public KernelPass {
public:
  std::string_view name() const override { return "liar"; }
  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    IRBuilder(kernel).brk();
    return false;
  }
};

std::unique_ptr<Module> oneKernel() {
  auto m = parseModule("kernel @k() {\n}\n");
  EXPECT_TRUE(m.ok());
  return *std::move(m);
}

TEST(PassPipelineTest, UnchangedPassesAreNotVerifiedOrPrintedAfterChange) {
  std::vector<std::string> log;
  PassRegistry r = testRegistry(&log);
  std::ostringstream changes, all;
  PassManagerOptions options;
  options.printAfterChange = &changes;
  options.printAfterAll = &all;
  options.timePasses = true;
  PassManager pm(options);
  ASSERT_TRUE(pm.addPipeline("opts{changed=false},opts{count=1}", r).ok());
  std::unique_ptr<Module> m = oneKernel();
  ASSERT_TRUE(pm.run(*m).ok());
  EXPECT_EQ(changes.str(), "// ----- IR after opts{count=1} -----\nkernel @k() {\n}\n");
  EXPECT_EQ(all.str(), "// ----- IR after opts{changed=false} -----\nkernel @k() {\n}\n"
                       "// ----- IR after opts{count=1} -----\nkernel @k() {\n}\n");
  ASSERT_EQ(pm.timings().size(), 2u);
  EXPECT_EQ(pm.timings()[0].result, PassManager::Timing::Result::Unchanged);
  EXPECT_EQ(pm.timings()[1].result, PassManager::Timing::Result::Changed);
  std::ostringstream table;
  pm.printTimings(table);
  EXPECT_NE(table.str().find("%  opts{changed=false} (no change)\n"), std::string::npos)
      << table.str();
  EXPECT_NE(table.str().find("%  opts{count=1}\n"), std::string::npos) << table.str();

  // A pass that says "no change" is trusted: its output is not verified...
  PassManager trusting;
  trusting.addPass(std::make_unique<LyingPass>());
  std::unique_ptr<Module> broken = oneKernel();
  EXPECT_TRUE(trusting.run(*broken).ok());
  // ...unless checkUnchanged holds it to its word.
  PassManagerOptions strict;
  strict.checkUnchanged = true;
  PassManager checking(strict);
  checking.addPass(std::make_unique<LyingPass>());
  std::unique_ptr<Module> m2 = oneKernel();
  absl::Status s = checking.run(*m2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(std::string(s.message())
                  .starts_with("pass 'liar' reported no change but changed the module (this is "
                               "a bug in the pass): "))
      << s;
}

TEST(PassPipelineTest, FailedPassIsMarkedInTheTimings) {
  PassRegistry r;
  ASSERT_TRUE(r.add("fails", "", [] {
                 class Failing : public Pass {
                 public:
                   std::string_view name() const override { return "fails"; }
                   absl::StatusOr<bool> run(Module &) override { return absl::InternalError("no"); }
                 };
                 return std::make_unique<Failing>();
               }).ok());
  PassManagerOptions options;
  options.timePasses = true;
  PassManager pm(options);
  ASSERT_TRUE(pm.addPipeline("fails", r).ok());
  Module m;
  EXPECT_FALSE(pm.run(m).ok());
  std::ostringstream table;
  pm.printTimings(table);
  EXPECT_NE(table.str().find("%  fails (failed)\n"), std::string::npos) << table.str();
}

} // namespace
} // namespace qd
