//===- SizeExprTestInputs.h - SizeExpr test inputs --------------*- C++ -*-===//
//
// What the SizeExpr*Test files share: short builders of expressions, fake
// launch inputs (arguments, fields, ndarrays) and the evaluation result as
// a value, an error or text, and the header of a serialised expression.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/KernelSizing.h"
#include "qd/analysis/SizeExpr.h"
#include "qd/ir/Parser.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace qd::sizeexprtest {

using I64 = std::numeric_limits<int64_t>;
using K = SizeExprKind;

inline SizeExprRef c(int64_t v) {
  return SizeExpr::constant(v);
}
inline SizeExprRef arg(unsigned i) {
  return SizeExpr::scalarArg(i);
}
inline SizeExprRef var(unsigned v) {
  return SizeExpr::boundVar(v);
}
inline SizeExprRef read(unsigned a, SizeExprRef index) {
  return SizeExpr::ndarrayRead(a, {std::move(index)});
}
inline std::string print(const SizeExprRef &e) {
  return printSizeExpr(*e);
}

/// A dense row-major int64 array.
struct Array {
  std::vector<int64_t> shape;
  std::vector<int64_t> data;
};

/// The launch data of a test: scalar arguments, fields and ndarrays by
/// name or index. Every element request is recorded; out-of-range or
/// missing elements are nullopt.
class FakeInputs : public SizeExprInputs {
public:
  std::map<unsigned, int64_t> args;
  std::map<std::string, Array> fields;
  std::map<unsigned, Array> ndarrays;
  mutable std::vector<std::pair<unsigned, std::vector<int64_t>>> ndarrayRequests;
  mutable std::vector<std::pair<std::string, std::vector<int64_t>>> fieldRequests;
  /// Offer direct views (the fast path) besides the element accessors.
  bool views = false;
  /// Views ask ndarrayRangeMax for range maxima (SizeExprBufferView::
  /// rangeMaxElsewhere), which answers from `ndarrays` and counts its calls.
  bool maxElsewhere = false;
  mutable int rangeMaxCalls = 0;

  std::optional<int64_t> scalarArg(unsigned argIndex) const override {
    auto it = args.find(argIndex);
    if (it == args.end())
      return std::nullopt;
    return it->second;
  }
  std::optional<int64_t> fieldElement(const std::string &field,
                                      std::span<const int64_t> indices) const override {
    fieldRequests.emplace_back(field, std::vector<int64_t>(indices.begin(), indices.end()));
    auto it = fields.find(field);
    return it == fields.end() ? std::nullopt : element(it->second, indices);
  }
  std::optional<int64_t> ndarrayShape(unsigned argIndex, unsigned axis) const override {
    auto it = ndarrays.find(argIndex);
    if (it == ndarrays.end() || axis >= it->second.shape.size())
      return std::nullopt;
    return it->second.shape[axis];
  }
  std::optional<int64_t> ndarrayElement(unsigned argIndex,
                                        std::span<const int64_t> indices) const override {
    ndarrayRequests.emplace_back(argIndex, std::vector<int64_t>(indices.begin(), indices.end()));
    auto it = ndarrays.find(argIndex);
    return it == ndarrays.end() ? std::nullopt : element(it->second, indices);
  }

  std::optional<SizeExprBufferView> fieldView(const std::string &field) const override {
    auto it = fields.find(field);
    if (!views || it == fields.end())
      return std::nullopt;
    return view(it->second);
  }
  std::optional<SizeExprBufferView> ndarrayView(unsigned argIndex) const override {
    auto it = ndarrays.find(argIndex);
    if (!views || it == ndarrays.end())
      return std::nullopt;
    return view(it->second);
  }
  std::optional<int64_t> ndarrayRangeMax(unsigned argIndex, int64_t begin,
                                         int64_t end) const override {
    auto it = ndarrays.find(argIndex);
    if (!maxElsewhere || it == ndarrays.end())
      return std::nullopt;
    ++rangeMaxCalls;
    return *std::max_element(it->second.data.begin() + begin, it->second.data.begin() + end);
  }

private:
  SizeExprBufferView view(const Array &a) const {
    return {reinterpret_cast<const std::byte *>(a.data.data()), ScalarType::I64, a.shape,
            maxElsewhere};
  }
  static std::optional<int64_t> element(const Array &a, std::span<const int64_t> indices) {
    if (indices.size() != a.shape.size())
      return std::nullopt;
    int64_t flat = 0;
    for (size_t d = 0; d < indices.size(); ++d) {
      if (indices[d] < 0 || indices[d] >= a.shape[d])
        return std::nullopt;
      flat = flat * a.shape[d] + indices[d];
    }
    return a.data.at(static_cast<size_t>(flat));
  }
};

inline Array vec(std::vector<int64_t> data) {
  int64_t n = static_cast<int64_t>(data.size());
  return Array{{n}, std::move(data)};
}

/// The evaluation's value; fails the test on an error.
inline int64_t valueOf(const SizeExprRef &e, const SizeExprInputs &in, int64_t limit = 1 << 20) {
  absl::StatusOr<int64_t> v = evaluateSizeExpr(*e, in, limit);
  EXPECT_TRUE(v.ok()) << v.status() << " for " << print(e);
  return v.ok() ? *v : -999999;
}

/// The evaluation's error; fails the test if it succeeded.
inline absl::Status errorOf(const SizeExprRef &e, const SizeExprInputs &in,
                            int64_t limit = 1 << 20) {
  absl::StatusOr<int64_t> v = evaluateSizeExpr(*e, in, limit);
  EXPECT_FALSE(v.ok()) << "unexpected value " << (v.ok() ? *v : 0) << " for " << print(e);
  return v.status();
}

inline bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

/// The whole evaluation result as text, for comparisons.
inline std::string evalText(const SizeExpr &e, const SizeExprInputs &in, int64_t limit) {
  absl::StatusOr<int64_t> v = evaluateSizeExpr(e, in, limit);
  return v.ok() ? std::to_string(*v) : v.status().ToString();
}

inline FakeInputs sampleInputs() {
  FakeInputs in;
  in.args = {{0, 3}, {1, -2}, {2, I64::max()}, {3, 1}};
  in.ndarrays[0] = Array{{2, 1, 3}, {3, 1, 4, 1, 5, 9}};
  in.ndarrays[2] = Array{{3, 2, 1}, {2, 7, 1, 8, 2, 8}};
  in.fields["x"] = vec({4, -1, 6});
  in.fields["m"] = Array{{2, 2}, {1, 2, 3, 4}};
  in.fields["s"] = Array{{}, {5}};
  in.ndarrays[1] = vec({7, 0, 2, 9});
  in.ndarrays[3] = Array{{2, 3}, {1, 2, 3, 4, 5, 6}};
  return in;
}

inline std::vector<uint8_t> header(uint64_t count, uint8_t version = 2) {
  std::vector<uint8_t> b = {'Q', 'D', 'S', 'X', version, 0, 0, 0};
  while (count >= 0x80) {
    b.push_back(static_cast<uint8_t>(count | 0x80));
    count >>= 7;
  }
  b.push_back(static_cast<uint8_t>(count));
  return b;
}

} // namespace qd::sizeexprtest
