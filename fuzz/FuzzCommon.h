//===- fuzz/FuzzCommon.h - Shared helpers of the qd fuzz targets -*- C++ -*-===//
//
// Property violations print what went wrong and abort, so that libFuzzer
// records the input as a crash (see docs/testing.md, "Fuzzing").
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/SizeExpr.h"
#include "qd/ir/Module.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace qd::fuzz {

/// Prints `what` (and `detail`) to stderr and aborts.
[[noreturn]] inline void fail(std::string_view what, std::string_view detail = {}) {
  std::fprintf(stderr, "qd-fuzz: property violated: %.*s\n", static_cast<int>(what.size()),
               what.data());
  if (!detail.empty())
    std::fprintf(stderr, "%.*s\n", static_cast<int>(detail.size()), detail.data());
  std::fflush(stderr);
  std::abort();
}

/// The module in `data` if it parses and verifies, otherwise null.
inline std::unique_ptr<Module> parseAndVerify(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  auto parsed = parseModule(text, {.filename = "<fuzz>"});
  if (!parsed.ok())
    return nullptr;
  if (!verify(**parsed).ok())
    return nullptr;
  return std::move(*parsed);
}

/// Deterministic launch data for evaluating SizeExprs: a few scalar
/// arguments (one huge, one negative), ndarrays of small shapes and
/// elements derived from the indices, and fields whose elements hash their
/// name and indices. Indices outside [0, 64) per axis do not exist.
class FakeInputs final : public SizeExprInputs {
public:
  std::optional<int64_t> scalarArg(unsigned argIndex) const override {
    static constexpr int64_t kArgs[] = {3, 0, -2, 17, 1000, int64_t(1) << 40};
    if (argIndex < std::size(kArgs))
      return kArgs[argIndex];
    return std::nullopt;
  }
  std::optional<int64_t> fieldElement(const std::string &field,
                                      std::span<const int64_t> indices) const override {
    if (field.empty() || indices.size() > 4)
      return std::nullopt;
    uint64_t h = 1469598103934665603ull;
    for (char c : field)
      h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    for (int64_t i : indices) {
      if (i < 0 || i >= 64)
        return std::nullopt;
      h = (h ^ static_cast<uint64_t>(i)) * 1099511628211ull;
    }
    return static_cast<int64_t>(h % 41) - 8;
  }
  std::optional<int64_t> ndarrayShape(unsigned argIndex, unsigned axis) const override {
    if (argIndex >= 8 || axis >= 3)
      return std::nullopt;
    return static_cast<int64_t>((argIndex * 7 + axis * 3) % 13);
  }
  std::optional<int64_t> ndarrayElement(unsigned argIndex,
                                        std::span<const int64_t> indices) const override {
    if (argIndex >= 8 || indices.empty() || indices.size() > 3)
      return std::nullopt;
    int64_t v = argIndex;
    for (size_t a = 0; a < indices.size(); ++a) {
      int64_t shape = *ndarrayShape(argIndex, static_cast<unsigned>(a));
      if (indices[a] < 0 || indices[a] >= shape)
        return std::nullopt;
      v = v * 5 + indices[a];
    }
    return v % 23 - 3;
  }
};

} // namespace qd::fuzz
