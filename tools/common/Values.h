//===- Values.h - The tools' JSON values, names and failures ----*- C++ -*-===//
//
// What the qd tools (qd-run's option parser, launch-script reader and
// runner; qd-check-grad) share: the failure they stop with, JSON input read defensively, names of
// field and ndarray components (`x`, `x.grad`), JSON values checked against a type and shape, and
// buffer contents as JSON text.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"
#include "qd/runtime/Buffer.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qd::tool {

using json = nlohmann::json;

/// Stops the tool with `message` (main prints it and exits with 1).
struct Failure {
  std::string message;
};
[[noreturn]] void die(std::string message);

/// `message` as a diagnostic line: as it is when it carries
/// `file:line:col: error:`, else after `<tool>: error: `.
std::string diagnostic(const std::string &message, std::string_view tool);

std::string readFile(const std::string &path);

/// Parses `text`, or fails naming `what` (malformed or too deeply nested).
json parseJson(const std::string &text, const std::string &what);

/// `j` as JSON text, cut short after 60 characters (for messages).
std::string brief(const json &j);
/// `text` as a JSON string (bytes that are not UTF-8 replaced).
std::string quoted(const std::string &text);

/// `x.grad` -> {x, Grad}; `x.dual` -> {x, Dual}; anything else is a primal.
std::pair<std::string, qd::Component> splitName(const std::string &name);
/// The inverse: `base`, `base.grad` or `base.dual`.
std::string componentName(const std::string &base, qd::Component c);

/// `j` as a scalar of type `t`; failures start with `what`.
qd::Scalar toScalar(const json &j, qd::ScalarType t, const std::string &what);

/// Shape of a nested JSON array as its first elements give it (a scalar
/// has shape []); `toValue` checks that the rest agrees.
std::vector<int64_t> shapeOf(const json &j);

/// A JSON value checked against an element type and a shape: its elements
/// in row-major order.
struct Value {
  std::vector<int64_t> shape;
  std::vector<qd::Scalar> elements;
};
Value toValue(const json &j, qd::ScalarType t, std::vector<int64_t> shape, const std::string &what);
/// Writes `v` into `buf`, which has `v`'s shape.
void store(qd::Buffer &buf, const Value &v);

/// The contents of `buf` as JSON text (floats shortest round-trip; NaN and
/// infinities as "nan", "inf", "-inf").
std::string bufferText(const qd::Buffer &buf);

} // namespace qd::tool
