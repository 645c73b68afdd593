//===- BackendConformance.h - One suite over every backend ------*- C++ -*-===//
//
// The fixture of BackendConformanceTest: a GoogleTest value-parameterised
// over every backend in the registry (qd/runtime/AllBackends.h), plus CPU
// configurations that run in the interpreter's order (one worker, scalar
// code) and in many threads. Each backend is created once, by name through
// the registry; a GPU backend whose device or driver this machine lacks
// skips every case, saying why. Vulkan runs under the validation layer
// where it is installed, and a case fails on any message it reports.
//
// A case runs hand-written kernels on the backend and on the interpreter
// (Pair) and expects exact values on both. What a device may lack (i64,
// f64, long loops) is a BackendCapabilities flag the case asks for.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Corpus.h"
#include "ProgramGen.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/BackendRegistry.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qd::conformance {

/// One backend configuration under test.
struct Subject {
  std::string label;   ///< the test name's suffix: `cpu_serial`
  std::string backend; ///< the registry name
  std::string options; ///< BackendOptions::parse text
};

/// For GoogleTest's messages: the label.
inline void PrintTo(const Subject &s, std::ostream *os) {
  *os << s.label;
}

/// Every registered backend with its defaults, plus the CPU's serial and
/// parallel configurations.
std::vector<Subject> subjects();

class BackendConformanceTest : public ::testing::TestWithParam<Subject> {
protected:
  void SetUp() override;
  void TearDown() override;
  Backend &backend() { return *backend_; }

private:
  Backend *backend_ = nullptr;
};

/// Skips the case on a backend whose device lacks `capability` (a
/// BackendCapabilities member).
#define REQUIRE_CAPABILITY(capability)                                                             \
  do {                                                                                             \
    if (!backend().capabilities().capability)                                                      \
      GTEST_SKIP() << GetParam().label << ": the device lacks " #capability;                       \
  } while (0)

/// A module instantiated twice: for the interpreter and for the backend
/// under test, with the same field values.
class Pair {
public:
  Pair(Backend &backend, std::string_view text);
  /// Runs `kernel` on both; the interpreter's and the backend's status.
  std::pair<absl::Status, absl::Status>
  run(std::string_view kernel, std::vector<LaunchArg> args = {}, LaunchOptions options = {});
  /// Runs `kernel` on both, which must succeed.
  void runOk(std::string_view kernel, std::vector<LaunchArg> args = {}, LaunchOptions options = {});
  /// Sets elements of `field` on both from doubles (integer fields
  /// truncate) or from exact scalars.
  void set(std::string_view field, const std::vector<double> &values);
  void setRaw(std::string_view field, const std::vector<Scalar> &values);
  Scalar value(std::string_view field, int64_t i = 0) { return mine->field(field)->get(i); }
  Scalar refValue(std::string_view field, int64_t i = 0) { return ref->field(field)->get(i); }
  /// Both computed exactly the same values in every field.
  void expectSame();

  std::unique_ptr<Module> module;
  std::unique_ptr<Program> ref, mine;

private:
  Backend &backend_;
  Interpreter interp_;
};

/// Expects element `i` of `field` to be `want` on both.
#define EXPECT_BOTH(p, field, i, want)                                                             \
  do {                                                                                             \
    Scalar w_ = (want);                                                                            \
    EXPECT_TRUE(testgen::sameScalar((p).refValue(field, i), w_, 0))                                \
        << "interp " << field << "[" << i << "] = " << (p).refValue(field, i).str() << ", want "   \
        << w_.str();                                                                               \
    EXPECT_TRUE(testgen::sameScalar((p).value(field, i), w_, 0))                                   \
        << GetParam().label << " " << field << "[" << i << "] = " << (p).value(field, i).str()     \
        << ", want " << w_.str();                                                                  \
  } while (0)

inline Scalar I32(int64_t v) {
  return Scalar::ofInt(ScalarType::I32, v);
}
inline Scalar I64(int64_t v) {
  return Scalar::ofInt(ScalarType::I64, v);
}
inline Scalar I1(bool v) {
  return Scalar::ofInt(ScalarType::I1, v);
}
inline Scalar F32(double v) {
  return Scalar::ofFloat(ScalarType::F32, v);
}
inline Scalar F64(double v) {
  return Scalar::ofFloat(ScalarType::F64, v);
}

constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();

} // namespace qd::conformance
