//===- unittests/CApiTapeTest.cpp - Launch tapes through the C API --------===//
//
// qd_tape from C: a 3-step simulation that overwrites the state the
// previous step's gradient reads, differentiated with snapshots, refused
// without them, checkpointed under a budget (the same gradient bit for
// bit), run forward (jvp); NULL handles are errors naming the call.
//
//===----------------------------------------------------------------------===//
#include "qd-c/qd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::string message(qd_status status) {
  std::string text = qd_status_message(status);
  qd_status_free(status);
  return text;
}

/// The simulation (unittests/capi/tape-sim.qd, shared with
/// python/tests/test_tape.py): dst = c * src * src per element; @total adds
/// the elements into @loss.
std::string simText() {
  std::ifstream in(QD_SOURCE_DIR "/unittests/capi/tape-sim.qd");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

constexpr double kX0[4] = {0.5, 1.25, -1.5, 2.0};
constexpr double kC[3] = {1.0, 0.5, 2.0};

/// d loss / d x of the simulation by hand: loss = sum c2 (c1 (c0 x^2)^2)^2
/// = sum c2 c1^2 c0^4 x^8 = sum 0.5 x^8, so the gradient is 4 x^7 (exact in
/// binary for kX0).
double expectedGradient(double x) {
  return 4 * x * x * x * x * x * x * x;
}

/// Two states used in turn: step 0 maps a to b, step 1 b to a (overwriting
/// the a that step 0's gradient reads), step 2 a to b.
struct CApiTapeTest : ::testing::TestWithParam<const char *> {
  void SetUp() override {
    ASSERT_EQ(message(qd_module_parse(simText().c_str(), "tape-sim.qd", &module)), "");
    for (const char *k : {"step", "total"}) {
      qd_kernel out = nullptr;
      ASSERT_EQ(message(qd_module_gradient(module, k, nullptr, 0, &out)), "");
      ASSERT_EQ(message(qd_module_forward(module, k, nullptr, &out)), "");
    }
    ASSERT_EQ(message(qd_program_create(module, &program)), "");
    ASSERT_EQ(message(qd_backend_create(GetParam(), nullptr, &backend)), "");
    int64_t n = 4;
    a.assign(kX0, kX0 + 4);
    for (auto [data, handle] :
         {std::pair{&a, &ha}, {&ag, &hag}, {&ad, &had}, {&b, &hb}, {&bg, &hbg}, {&bd, &hbd}})
      ASSERT_EQ(message(qd_buffer_borrow(QD_F64, 1, &n, data->data(), handle)), "");
  }
  void TearDown() override {
    for (qd_buffer h : {ha, hag, had, hb, hbg, hbd})
      qd_buffer_free(h);
    qd_backend_free(backend);
    qd_program_free(program);
    qd_module_free(module);
  }
  qd_arg state(const char *name, bool first) {
    return first ? qd_arg{name, QD_ARG_NDARRAY, 0, 0, ha, hag, had}
                 : qd_arg{name, QD_ARG_NDARRAY, 0, 0, hb, hbg, hbd};
  }
  /// Records the three steps (and the loss, with `loss`) on `tape`; the
  /// first error's message, "" when all ran.
  std::string record(qd_tape tape, bool loss = true) {
    for (int t = 0; t < 3; ++t) {
      qd_arg args[] = {{"c", QD_ARG_FLOAT, kC[t], 0, nullptr, nullptr, nullptr},
                       state("src", t % 2 == 0),
                       state("dst", t % 2 != 0)};
      if (std::string m = message(qd_tape_launch(tape, "step", 3, args)); !m.empty())
        return m;
    }
    qd_arg last[] = {state("x", false)};
    return loss ? message(qd_tape_launch(tape, "total", 1, last)) : "";
  }
  qd_tape newTape(qd_tape_options options) {
    qd_tape tape = nullptr;
    EXPECT_EQ(message(qd_tape_create(program, backend, &options, &tape)), "");
    return tape;
  }
  qd_module module = nullptr;
  qd_program program = nullptr;
  qd_backend backend = nullptr;
  std::vector<double> a, ag{0, 0, 0, 0}, ad{0, 0, 0, 0}, b{0, 0, 0, 0}, bg{0, 0, 0, 0},
      bd{0, 0, 0, 0};
  qd_buffer ha = nullptr, hag = nullptr, had = nullptr, hb = nullptr, hbg = nullptr, hbd = nullptr;
};

TEST_P(CApiTapeTest, SimulationGradientWithSnapshots) {
  qd_tape_options options = qd_tape_options_default();
  EXPECT_EQ(options.snapshots, 1);
  EXPECT_EQ(options.check_unchanged, 1);
  options.keep_initial_state = 1;
  qd_tape tape = newTape(options);
  ASSERT_EQ(record(tape), "");
  size_t size = 0;
  ASSERT_EQ(message(qd_tape_size(tape, &size)), "");
  EXPECT_EQ(size, 4u);
  double loss = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(b[i], 0.5 * std::pow(kX0[i], 8)); // the forward result
    loss += b[i];
  }
  qd_tape_seed seed = {"loss", nullptr, 1.0, nullptr, 0};
  ASSERT_EQ(message(qd_tape_backward(tape, 1, &seed, 1)), "");
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(ag[i], expectedGradient(kX0[i])) << i;
  // The buffers hold what the last launch left.
  EXPECT_DOUBLE_EQ(b[3], 128.0);

  qd_tape_memory memory{};
  ASSERT_EQ(message(qd_tape_memory_report(tape, &memory)), "");
  EXPECT_GT(memory.held_bytes, 0u);
  EXPECT_GE(memory.peak_bytes, memory.held_bytes);
  EXPECT_EQ(memory.checkpoint_interval, 0);

  // Forward mode from the initial state: a.dual = 1 gives loss.dual = the
  // sum of the gradient.
  qd_tape_seed tangent = {nullptr, had, 1.0, nullptr, 0};
  ASSERT_EQ(message(qd_tape_jvp(tape, 1, &tangent)), "");
  qd_buffer lossDual = nullptr;
  ASSERT_EQ(message(qd_program_field(program, "loss", QD_DUAL, &lossDual)), "");
  double dual = 0;
  ASSERT_EQ(message(qd_buffer_read(lossDual, &dual, sizeof dual)), "");
  qd_buffer_free(lossDual);
  double sum = 0;
  for (double x : kX0)
    sum += expectedGradient(x);
  EXPECT_DOUBLE_EQ(dual, sum);

  ASSERT_EQ(message(qd_tape_clear(tape)), "");
  ASSERT_EQ(message(qd_tape_size(tape, &size)), "");
  EXPECT_EQ(size, 0u);
  ASSERT_EQ(message(qd_tape_memory_report(tape, &memory)), "");
  EXPECT_EQ(memory.held_bytes, 0u);
  qd_tape_free(tape);
}

TEST_P(CApiTapeTest, SeedByBufferAndPerElementValues) {
  qd_tape tape = newTape(qd_tape_options_default());
  ASSERT_EQ(record(tape, /*loss=*/false), "");
  const double weights[4] = {1.0, 2.0, 0.0, -1.0};
  qd_tape_seed seed = {nullptr, hbg, 0.0, weights, 4};
  ASSERT_EQ(message(qd_tape_backward(tape, 1, &seed, 1)), "");
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(ag[i], weights[i] * expectedGradient(kX0[i])) << i;
  qd_tape_free(tape);
}

TEST_P(CApiTapeTest, WithoutSnapshotsTheOverwriteIsRefusedNamingBothLaunches) {
  qd_tape_options options = qd_tape_options_default();
  options.snapshots = 0;
  qd_tape tape = newTape(options);
  std::string m = record(tape);
  EXPECT_NE(m.find("launch 1 (@step) writes %dst, which the gradient of launch 0 (@step) reads"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("snapshots"), std::string::npos) << m;
  size_t size = 0;
  ASSERT_EQ(message(qd_tape_size(tape, &size)), "");
  EXPECT_EQ(size, 1u); // the refused launch did not run
  qd_tape_free(tape);
}

TEST_P(CApiTapeTest, CheckpointBudgetGivesTheSameGradientBitForBit) {
  qd_tape full = newTape(qd_tape_options_default());
  ASSERT_EQ(record(full), "");
  qd_tape_seed seed = {"loss", nullptr, 1.0, nullptr, 0};
  ASSERT_EQ(message(qd_tape_backward(full, 1, &seed, 1)), "");
  std::vector<double> reference = ag;
  qd_tape_free(full);

  a.assign(kX0, kX0 + 4);
  qd_buffer loss = nullptr;
  ASSERT_EQ(message(qd_program_field(program, "loss", QD_PRIMAL, &loss)), "");
  double zero = 0;
  ASSERT_EQ(message(qd_buffer_write(loss, &zero, sizeof zero)), "");
  qd_buffer_free(loss);
  qd_tape_options options = qd_tape_options_default();
  options.checkpoint_budget = 160;
  qd_tape tape = newTape(options);
  ASSERT_EQ(record(tape), "");
  ag.assign(4, 99.0); // zeroed by backward
  ASSERT_EQ(message(qd_tape_backward(tape, 1, &seed, 1)), "");
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ag[i], reference[i]) << i;
    EXPECT_EQ(ag[i], expectedGradient(kX0[i])) << i;
  }
  qd_tape_memory memory{};
  ASSERT_EQ(message(qd_tape_memory_report(tape, &memory)), "");
  EXPECT_GE(memory.checkpoint_interval, 1);
  EXPECT_GE(memory.checkpoints, 1);
  EXPECT_LE(memory.held_bytes, 160u);
  qd_tape_free(tape);
}

TEST_P(CApiTapeTest, NullHandlesAndBadSeedsAreErrors) {
  qd_tape tape = nullptr;
  EXPECT_EQ(message(qd_tape_create(nullptr, backend, nullptr, &tape)),
            "qd_tape_create: program is NULL");
  EXPECT_EQ(message(qd_tape_create(program, nullptr, nullptr, &tape)),
            "qd_tape_create: backend is NULL");
  EXPECT_EQ(tape, nullptr);
  qd_status s = qd_tape_launch(nullptr, "step", 0, nullptr);
  EXPECT_EQ(qd_status_get_code(s), QD_INVALID_ARGUMENT);
  EXPECT_EQ(message(s), "qd_tape_launch: tape is NULL");
  EXPECT_EQ(message(qd_tape_backward(nullptr, 0, nullptr, 1)), "qd_tape_backward: tape is NULL");
  EXPECT_EQ(message(qd_tape_clear(nullptr)), "qd_tape_clear: tape is NULL");
  qd_tape_free(nullptr);

  tape = newTape(qd_tape_options_default());
  EXPECT_EQ(message(qd_tape_memory_report(tape, nullptr)), "qd_tape_memory_report: out is NULL");
  EXPECT_EQ(message(qd_tape_backward(tape, 1, nullptr, 1)), "qd_tape_backward: seeds is NULL");
  qd_tape_seed both = {"loss", hbg, 1.0, nullptr, 0};
  EXPECT_EQ(message(qd_tape_backward(tape, 1, &both, 1)),
            "qd_tape_backward: seeds[0] gives both a field and a buffer; give a field name or a "
            "buffer");
  EXPECT_NE(message(qd_tape_launch(tape, "nope", 0, nullptr)).find("no kernel @nope"),
            std::string::npos);
  ASSERT_EQ(record(tape), "");
  qd_tape_seed unknown = {"nope", nullptr, 1.0, nullptr, 0};
  std::string m = message(qd_tape_backward(tape, 1, &unknown, 1));
  EXPECT_NE(m.find("@loss.grad"), std::string::npos) << m; // lists the adjoints
  qd_tape_free(tape);
}

INSTANTIATE_TEST_SUITE_P(Backends, CApiTapeTest, ::testing::Values("interp", "cpu"));

} // namespace
