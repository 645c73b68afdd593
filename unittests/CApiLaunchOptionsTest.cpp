//===- unittests/CApiLaunchOptionsTest.cpp - qd_launch_options ------------===//
//
// Launch options through the C API on the CPU backend and the interpreter:
// the defaults, the size check that keeps the struct extensible, bounds
// checks, timeouts, a stream refused by backends without streams, the
// asynchronous flag (synchronous there: results are readable at once and
// qd_backend_synchronize has nothing to report), the gradient launch with
// options, and the tape's adstack heap report. CudaBackendTest's
// Async* tests cover streams and asynchronous launches on a GPU.
//
//===----------------------------------------------------------------------===//
#include "qd-c/qd.h"

#include "capi/CApiStatus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

namespace {

using qd::capitest::message;
using qd::capitest::take;

/// The kernels (unittests/capi/launch-options.qd, shared with
/// CudaStreamTest and python/tests/test_launch_options.py).
std::string kernels() {
  std::ifstream in(QD_SOURCE_DIR "/unittests/capi/launch-options.qd");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct CApiLaunchOptionsTest : ::testing::TestWithParam<const char *> {
  void SetUp() override {
    ASSERT_EQ(message(qd_module_parse(kernels().c_str(), "launch-options.qd", &module)), "");
    qd_kernel grad = nullptr;
    ASSERT_EQ(message(qd_module_gradient(module, "sinloop", nullptr, 0, &grad)), "");
    ASSERT_EQ(message(qd_program_create(module, &program)), "");
    ASSERT_EQ(message(qd_backend_create(GetParam(), nullptr, &backend)), "");
    int64_t n = 4;
    for (auto [data, handle] : {std::pair{&x, &bx}, {&y, &by}, {&gx, &bgx}, {&gy, &bgy}})
      ASSERT_EQ(message(qd_buffer_borrow(QD_F32, 1, &n, data->data(), handle)), "");
  }
  void TearDown() override {
    for (qd_buffer b : {bx, by, bgx, bgy})
      qd_buffer_free(b);
    qd_backend_free(backend);
    qd_program_free(program);
    qd_module_free(module);
  }
  std::vector<qd_arg> scaleArgs(float a) {
    return {{"a", QD_ARG_FLOAT, a, 0, nullptr, nullptr, nullptr},
            {"x", QD_ARG_NDARRAY, 0, 0, bx, nullptr, nullptr},
            {"y", QD_ARG_NDARRAY, 0, 0, by, nullptr, nullptr}};
  }
  qd_status launch(const char *kernel, const std::vector<qd_arg> &args,
                   const qd_launch_options *options) {
    return qd_program_launch_with_options(program, backend, kernel, args.size(), args.data(),
                                          options);
  }
  qd_module module = nullptr;
  qd_program program = nullptr;
  qd_backend backend = nullptr;
  std::vector<float> x{1, 2, 3, 4}, y{0, 0, 0, 0}, gx{0, 0, 0, 0}, gy{0, 0, 0, 0};
  qd_buffer bx = nullptr, by = nullptr, bgx = nullptr, bgy = nullptr;
};

TEST(CApiLaunchOptions, Defaults) {
  qd_launch_options o = qd_launch_options_default();
  EXPECT_EQ(o.size, sizeof(qd_launch_options));
  EXPECT_EQ(o.flags, 0u);
  EXPECT_EQ(o.stream, nullptr);
  EXPECT_EQ(o.timeout_ns, 0u);
  EXPECT_EQ(o.default_adstack_capacity, 0);
  EXPECT_EQ(o.optimistic_initial_capacity, 0);
  EXPECT_EQ(o.optimistic_adstacks, -1);
  EXPECT_EQ(o.size_adstacks, 1);
  EXPECT_EQ(o.adstack_memory_budget, 0);
  EXPECT_EQ(o.refine_adstacks_above_bytes, int64_t(1) << 20);
  // The layout the Python package declares (python/qd/_lib.py, LaunchOptionsC).
  EXPECT_EQ(offsetof(qd_launch_options, stream), 8u);
  EXPECT_EQ(offsetof(qd_launch_options, optimistic_adstacks), 40u);
  EXPECT_EQ(offsetof(qd_launch_options, adstack_memory_budget), QD_LAUNCH_OPTIONS_SIZE_0_2);
  EXPECT_EQ(sizeof(qd_launch_options), 64u);
  EXPECT_STREQ(qd_version(), "0.3.0");
  auto [code, text] = take(qd_backend_synchronize(nullptr));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_EQ(text, "qd_backend_synchronize: backend is NULL");
}

TEST_P(CApiLaunchOptionsTest, NullOptionsAreTheDefaults) {
  ASSERT_EQ(message(launch("scale", scaleArgs(3), nullptr)), "");
  EXPECT_EQ(y, (std::vector<float>{3, 6, 9, 12}));
  qd_launch_options o = qd_launch_options_default();
  ASSERT_EQ(message(launch("scale", scaleArgs(-1), &o)), "");
  EXPECT_EQ(y, (std::vector<float>{-1, -2, -3, -4}));
}

TEST_P(CApiLaunchOptionsTest, SizeAndValuesAreChecked) {
  qd_launch_options o = qd_launch_options_default();
  o.size = 40; // an older or foreign struct
  auto [code, text] = take(launch("scale", scaleArgs(1), &o));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_NE(text.find("qd_program_launch_with_options: options->size is 40, but this library "
                      "(0.3.0) takes a qd_launch_options of 64 bytes (or 48, the size of 0.2's)"),
            std::string::npos)
      << text;
  o = qd_launch_options_default();
  o.optimistic_adstacks = 2;
  std::tie(code, text) = take(launch("scale", scaleArgs(1), &o));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_NE(text.find("optimistic_adstacks is 2"), std::string::npos) << text;
  o = qd_launch_options_default();
  o.default_adstack_capacity = -5;
  std::tie(code, text) = take(launch("scale", scaleArgs(1), &o));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_NE(text.find("default_adstack_capacity is negative"), std::string::npos) << text;
  o = qd_launch_options_default();
  o.adstack_memory_budget = -1;
  std::tie(code, text) = take(launch("scale", scaleArgs(1), &o));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_NE(text.find("adstack_memory_budget is negative"), std::string::npos) << text;
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 0})); // nothing ran
}

// A caller compiled against 0.2 passes 48 bytes: the fields appended since
// are not read (here they hold what would fail), and keep their defaults.
TEST_P(CApiLaunchOptionsTest, TheSizeOfAnOlderVersionReadsOnlyItsFields) {
  qd_launch_options o = qd_launch_options_default();
  o.size = QD_LAUNCH_OPTIONS_SIZE_0_2;
  o.adstack_memory_budget = -7;
  o.refine_adstacks_above_bytes = -7;
  ASSERT_EQ(message(launch("scale", scaleArgs(2), &o)), "");
  EXPECT_EQ(y, (std::vector<float>{2, 4, 6, 8}));
}

// adstack_memory_budget reaches the launch: on the CPU one iteration of the
// gradient's tape of sin's inputs (3 entries) does not fit in 1 byte.
TEST_P(CApiLaunchOptionsTest, TheAdStackBudgetReachesTheLaunch) {
  std::vector<qd_arg> args = {{"seeds", QD_ARG_NDARRAY, 0, 0, bx, bgx, nullptr},
                              {"n", QD_ARG_INT, 0, 3, nullptr, nullptr, nullptr},
                              {"y", QD_ARG_NDARRAY, 0, 0, by, bgy, nullptr}};
  qd_seed seed = {"y", 1.0};
  qd_launch_options o = qd_launch_options_default();
  o.adstack_memory_budget = 1;
  auto [code, text] = take(qd_program_launch_with_gradient_options(
      program, backend, "sinloop", "sinloop_grad", args.size(), args.data(), 1, &seed, &o));
  if (std::string(GetParam()) == "interp") { // it keeps each stack apart, unbudgeted
    EXPECT_EQ(code, QD_OK) << text;
    return;
  }
  EXPECT_EQ(code, QD_RESOURCE_EXHAUSTED) << text;
  EXPECT_NE(text.find("more than the adstack memory budget of 1 bytes"), std::string::npos) << text;
}

TEST_P(CApiLaunchOptionsTest, BoundsChecksNameTheStatement) {
  std::vector<qd_arg> args = {{"x", QD_ARG_NDARRAY, 0, 0, bx, nullptr, nullptr},
                              {"k", QD_ARG_INT, 0, 7, nullptr, nullptr, nullptr}};
  qd_launch_options o = qd_launch_options_default();
  o.flags = QD_LAUNCH_BOUNDS_CHECKED;
  auto [code, text] = take(launch("poke", args, &o));
  EXPECT_EQ(code, QD_FAILED_PRECONDITION) << text;
  EXPECT_NE(
      text.find("launch-options.qd:26:5: error: index [7] is out of range for '%x' of shape [4]"),
      std::string::npos)
      << text;
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  args[1].i = 2;
  ASSERT_EQ(message(launch("poke", args, &o)), "");
  EXPECT_EQ(x, (std::vector<float>{1, 2, 1, 4}));
}

TEST_P(CApiLaunchOptionsTest, TimeoutStopsTheLoop) {
  std::vector<qd_arg> args = {{"n", QD_ARG_INT, 0, -1, nullptr, nullptr, nullptr}};
  qd_launch_options o = qd_launch_options_default();
  o.timeout_ns = 50'000'000; // 50 ms
  auto [code, text] = take(launch("spin", args, &o));
  EXPECT_EQ(code, QD_DEADLINE_EXCEEDED) << text;
  EXPECT_NE(text.find("ran past its timeout of 50 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("`while` loop"), std::string::npos) << text;
  args[0].i = 1000;
  EXPECT_EQ(message(launch("spin", args, &o)), ""); // the backend is usable
}

TEST_P(CApiLaunchOptionsTest, StreamsAreRefusedWithoutThem) {
  int fake = 0;
  qd_launch_options o = qd_launch_options_default();
  o.stream = &fake;
  auto [code, text] = take(launch("scale", scaleArgs(2), &o));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  std::string name = std::string(GetParam()) == "cpu" ? "CPU" : "interpreter";
  EXPECT_NE(text.find("kernel @scale: the " + name +
                      " backend has no streams, so it cannot launch on the one given "
                      "(LaunchOptions::stream)"),
            std::string::npos)
      << text;
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 0}));
}

TEST_P(CApiLaunchOptionsTest, AsyncIsSynchronousWithoutStreams) {
  qd_launch_options o = qd_launch_options_default();
  o.flags = QD_LAUNCH_ASYNC;
  ASSERT_EQ(message(launch("scale", scaleArgs(2), &o)), "");
  EXPECT_EQ(y, (std::vector<float>{2, 4, 6, 8})); // readable at once
  // An error is the launch's own, not deferred.
  std::vector<qd_arg> bad = {{"x", QD_ARG_NDARRAY, 0, 0, bx, nullptr, nullptr},
                             {"k", QD_ARG_INT, 0, 9, nullptr, nullptr, nullptr}};
  o.flags = QD_LAUNCH_ASYNC | QD_LAUNCH_BOUNDS_CHECKED;
  auto [code, text] = take(launch("poke", bad, &o));
  EXPECT_EQ(code, QD_FAILED_PRECONDITION) << text;
  EXPECT_NE(text.find("index [9] is out of range"), std::string::npos) << text;
  EXPECT_EQ(text.find("reported by a later call"), std::string::npos) << text;
  EXPECT_EQ(message(qd_backend_synchronize(backend)), "");
  // The flag works through qd_program_launch too.
  std::vector<qd_arg> args = scaleArgs(5);
  ASSERT_EQ(message(qd_program_launch(program, backend, "scale", args.size(), args.data(),
                                      QD_LAUNCH_ASYNC)),
            "");
  EXPECT_EQ(y, (std::vector<float>{5, 10, 15, 20}));
}

TEST_P(CApiLaunchOptionsTest, GradientLaunchWithOptions) {
  x = {0.5f, 1.0f, 1.5f, 2.0f};
  std::vector<qd_arg> args = {{"seeds", QD_ARG_NDARRAY, 0, 0, bx, bgx, nullptr},
                              {"n", QD_ARG_INT, 0, 1, nullptr, nullptr, nullptr},
                              {"y", QD_ARG_NDARRAY, 0, 0, by, bgy, nullptr}};
  qd_seed seed = {"y", 1.0};
  qd_launch_options o = qd_launch_options_default();
  o.flags = QD_LAUNCH_BOUNDS_CHECKED;
  ASSERT_EQ(
      message(qd_program_launch_with_gradient_options(program, backend, "sinloop", "sinloop_grad",
                                                      args.size(), args.data(), 1, &seed, &o)),
      "");
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(gx[i], std::cos(x[i]), 1e-6) << i; // d sin(x) / dx
  o.size = 0;
  auto [code, text] = take(qd_program_launch_with_gradient_options(
      program, backend, "sinloop", "sinloop_grad", args.size(), args.data(), 1, &seed, &o));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_NE(text.find("qd_program_launch_with_gradient_options: options->size is 0"),
            std::string::npos)
      << text;
}

TEST_P(CApiLaunchOptionsTest, TapeReportsTheAdStackHeap) {
  qd_tape_options to = qd_tape_options_default();
  to.launch_flags = QD_LAUNCH_ASYNC;
  qd_tape tape = nullptr;
  auto [code, text] = take(qd_tape_create(program, backend, &to, &tape));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_NE(text.find("a tape launches synchronously"), std::string::npos) << text;
  ASSERT_EQ(message(qd_tape_create(program, backend, nullptr, &tape)), "");
  std::vector<qd_arg> args = {{"seeds", QD_ARG_NDARRAY, 0, 0, bx, bgx, nullptr},
                              {"n", QD_ARG_INT, 0, 3, nullptr, nullptr, nullptr},
                              {"y", QD_ARG_NDARRAY, 0, 0, by, bgy, nullptr}};
  ASSERT_EQ(message(qd_tape_launch(tape, "sinloop", args.size(), args.data())), "");
  qd_tape_seed seed = {nullptr, bgy, 1.0, nullptr, 0};
  ASSERT_EQ(message(qd_tape_backward(tape, 1, &seed, 1)), "");
  int64_t bytes = -2, threads = -2;
  ASSERT_EQ(message(qd_tape_adstack_heap(tape, &bytes, &threads)), "");
  if (std::string(GetParam()) == "interp") {
    EXPECT_EQ(bytes, -1); // the interpreter keeps each stack apart
    EXPECT_EQ(threads, -1);
  } else {
    // The gradient's stack of sin's inputs: 3 pushes of 4 bytes per thread at least.
    EXPECT_GE(bytes, 12 * threads);
    EXPECT_GE(threads, 1);
  }
  EXPECT_EQ(message(qd_tape_adstack_heap(tape, nullptr, nullptr)), "");
  std::tie(code, text) = take(qd_tape_adstack_heap(nullptr, &bytes, &threads));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT) << text;
  qd_tape_free(tape);
}

INSTANTIATE_TEST_SUITE_P(Backends, CApiLaunchOptionsTest, ::testing::Values("cpu", "interp"));

} // namespace
