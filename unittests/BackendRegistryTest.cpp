//===- BackendRegistryTest.cpp - Backends by name and their options -------===//
//
// The registry (qd/runtime/BackendRegistry.h): what registerAllBackends
// puts in it, the errors of unknown names, unknown options and bad values,
// and options reaching the backend they configure.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/CpuBackend.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace qd {
namespace {

std::string message(const absl::Status &s) {
  return std::string(s.message());
}

TEST(BackendRegistryTest, EveryBuiltBackendIsRegisteredInOrder) {
  registerAllBackends();
  registerAllBackends(); // once per process
  // (A test may have registered its own after them.)
  std::vector<std::string> names = registeredBackends();
  ASSERT_GE(names.size(), builtBackends().size());
  names.resize(builtBackends().size());
  EXPECT_EQ(names, builtBackends());
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "interp");
  EXPECT_EQ(names[1], "cpu");
  // Registering one again is refused, naming it.
  absl::Status again = registerCpuBackend();
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(message(again), "a backend named 'cpu' is already registered");
}

TEST(BackendRegistryTest, AnUnknownNameListsTheRegisteredBackends) {
  registerAllBackends();
  auto b = createBackend("tpu");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kNotFound);
  std::string want = "unknown backend 'tpu'; available backends: interp, cpu";
  for (size_t i = 2; i < builtBackends().size(); ++i)
    want += ", " + builtBackends()[i];
  EXPECT_EQ(message(b.status()).substr(0, want.size()), want);
}

TEST(BackendRegistryTest, OptionsAreCheckedAgainstTheBackendsDeclaration) {
  registerAllBackends();
  BackendOptions o;
  o.set("thread", "2");
  auto b = createBackend("cpu", o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(message(b.status()),
            "backend 'cpu' has no option 'thread'; its options: threads, chunk, vector-width, "
            "vector-math, vector-isa, light, available-memory-bytes, perf-map");
  EXPECT_EQ(message(createBackend("interp", o).status()),
            "backend 'interp' has no option 'thread'; its options: none");

  for (auto [key, value, want] : {
           std::tuple<const char *, const char *, const char *>{
               "threads", "2000", "option 'threads' expects an integer from 0 to 1024, got '2000'"},
           {"threads", "two", "option 'threads' expects an integer from 0 to 1024, got 'two'"},
           {"vector-math", "maybe",
            "option 'vector-math' expects one of true, false, on, off, 1, 0, got 'maybe'"},
       }) {
    BackendOptions bad;
    bad.set(key, value);
    auto made = createBackend("cpu", bad);
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_EQ(message(made.status()), std::string("backend 'cpu': ") + want);
  }
}

TEST(BackendRegistryTest, OptionsReachTheBackend) {
  registerAllBackends();
  auto options = BackendOptions::parse("threads=3,vector-width=1,threads=2");
  ASSERT_TRUE(options.ok()) << options.status();
  auto b = createBackend("cpu", *options);
  ASSERT_TRUE(b.ok()) << b.status();
  auto *cpu = dynamic_cast<CpuBackend *>(b->get());
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->numThreads(), 2u); // the last value given
  EXPECT_EQ(cpu->vectorWidth(), 1u);
  EXPECT_EQ((*b)->name(), "cpu");
}

TEST(BackendRegistryTest, OptionTextIsKeyValueItems) {
  auto empty = BackendOptions::parse("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->entries().empty());
  auto parsed = BackendOptions::parse("device=NVIDIA H100,validation=required");
  ASSERT_TRUE(parsed.ok());
  ASSERT_NE(parsed->find("device"), nullptr);
  EXPECT_EQ(*parsed->find("device"), "NVIDIA H100");
  EXPECT_EQ(parsed->find("arch"), nullptr);
  for (const char *bad : {"threads", "=2", "a=1,,b=2"}) {
    auto p = BackendOptions::parse(bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(message(p.status()).find("is not KEY=VALUE"), std::string::npos) << bad;
  }
}

TEST(BackendRegistryTest, HelpNamesEveryBackendAndOption) {
  registerAllBackends();
  std::string help = backendHelp();
  for (const std::string &name : registeredBackends())
    EXPECT_NE(help.find("  " + name + ": "), std::string::npos) << name << "\n" << help;
  EXPECT_NE(help.find("threads=0..1024"), std::string::npos) << help;
}

TEST(BackendRegistryTest, ARegistrationNeedsANameAndAFactory) {
  EXPECT_EQ(registerBackend({}).code(), absl::StatusCode::kInvalidArgument);
  BackendInfo unnamed;
  unnamed.create = [](const BackendOptions &) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return absl::UnimplementedError("never");
  };
  EXPECT_EQ(registerBackend(unnamed).code(), absl::StatusCode::kInvalidArgument);
  BackendInfo custom = unnamed;
  custom.name = "registry-test-custom";
  ASSERT_TRUE(registerBackend(custom).ok());
  EXPECT_EQ(createBackend("registry-test-custom").status().code(),
            absl::StatusCode::kUnimplemented);
  std::vector<std::string> names = registeredBackends();
  EXPECT_NE(std::find(names.begin(), names.end(), "registry-test-custom"), names.end());
}

} // namespace
} // namespace qd
