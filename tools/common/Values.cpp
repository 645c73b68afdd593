//===- Values.cpp - The tools' JSON values, names and failures -------------===//
#include "Values.h"

#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>

namespace qd::tool {

void die(std::string message) {
  throw Failure{std::move(message)};
}

std::string diagnostic(const std::string &message, std::string_view tool) {
  // Diagnostics that already carry `file:line:col: error:` stand alone.
  bool located = message.find(": error: ") != std::string::npos;
  return located ? message : std::string(tool) + ": error: " + message;
}

std::string readFile(const std::string &path) {
  absl::StatusOr<std::string> text = qd::readTextFile(path);
  if (!text.ok())
    die(std::string(text.status().message()));
  return *std::move(text);
}

/// Deepest nesting of arrays and objects accepted in JSON input: far more
/// than any value a tool takes (an ndarray of rank r nests r + 2 levels in
/// an inputs file, r + 4 in a launch script), and shallow enough that
/// handling the value never exhausts the stack.
constexpr int kMaxJsonNesting = 512;

json parseJson(const std::string &text, const std::string &what) {
  // Reject deep nesting before building the value (copying or printing a
  // json value recurses once per level).
  int depth = 0;
  bool inString = false, escaped = false;
  for (char ch : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        inString = false;
    } else if (ch == '"') {
      inString = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxJsonNesting)
        die("JSON in " + what + " nests arrays and objects more than " +
            std::to_string(kMaxJsonNesting) + " levels deep; qd-run's inputs need at most the " +
            "ndarray rank + 4");
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    die("malformed JSON in " + what + ": '" + text.substr(0, 80) + "'");
  return j;
}

std::string brief(const json &j) {
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

std::string quoted(const std::string &text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::pair<std::string, qd::Component> splitName(const std::string &name) {
  size_t dot = name.rfind('.');
  if (dot != std::string::npos) {
    std::string suffix = name.substr(dot + 1);
    if (suffix == "grad")
      return {name.substr(0, dot), qd::Component::Grad};
    if (suffix == "dual")
      return {name.substr(0, dot), qd::Component::Dual};
  }
  return {name, qd::Component::Primal};
}

std::string componentName(const std::string &base, qd::Component c) {
  return c == qd::Component::Primal ? base : base + "." + std::string(qd::toString(c));
}

qd::Scalar toScalar(const json &j, qd::ScalarType t, const std::string &what) {
  using qd::ScalarType;
  if (t == ScalarType::I1) {
    if (j.is_boolean())
      return qd::Scalar::ofInt(t, j.get<bool>());
    if (j.is_number_integer() && (j.get<int64_t>() == 0 || j.get<int64_t>() == 1))
      return qd::Scalar::ofInt(t, j.get<int64_t>());
    die(what + " must be true or false, got " + brief(j));
  }
  if (qd::isInteger(t)) {
    if (!j.is_number_integer())
      die(what + " must be an integer (" + std::string(qd::toString(t)) + "), got " + brief(j));
    if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      die(what + " does not fit in " + std::string(qd::toString(t)) + ": " + j.dump());
    int64_t v = j.get<int64_t>();
    if (t == ScalarType::I32 && static_cast<int32_t>(v) != v)
      die(what + " does not fit in i32: " + j.dump());
    return qd::Scalar::ofInt(t, v);
  }
  if (j.is_number()) {
    // A number too large for the type is an error, not an infinity (JSON
    // has no infinities: write "inf").
    double d = j.get<double>();
    if (std::isinf(d) || (t == ScalarType::F32 && std::isinf(static_cast<float>(d))))
      die(fmt::format("{} is out of range for {} (largest finite value {}): {}; write \"inf\" or "
                      "\"-inf\" for an infinity",
                      what, qd::toString(t),
                      t == ScalarType::F32 ? "3.4028235e+38" : "1.7976931348623157e+308",
                      j.dump()));
    return qd::Scalar::ofFloat(t, d);
  }
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    double inf = std::numeric_limits<double>::infinity();
    if (s == "nan" || s == "-nan") // the sign of a NaN carries no meaning here
      return qd::Scalar::ofFloat(t, std::numeric_limits<double>::quiet_NaN());
    if (s == "inf")
      return qd::Scalar::ofFloat(t, inf);
    if (s == "-inf")
      return qd::Scalar::ofFloat(t, -inf);
  }
  die(what + " must be a number, got " + brief(j));
}

std::vector<int64_t> shapeOf(const json &j) {
  std::vector<int64_t> shape;
  const json *cur = &j;
  while (cur->is_array()) {
    shape.push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty())
      break;
    cur = &(*cur)[0];
  }
  return shape;
}

namespace {

void flatten(const json &j, const std::vector<int64_t> &shape, size_t dim,
             std::vector<const json *> &out, const std::string &what) {
  if (dim == shape.size()) {
    if (j.is_array())
      die(what + " is not rectangular: nested deeper than its first element");
    out.push_back(&j);
    return;
  }
  if (!j.is_array() || static_cast<int64_t>(j.size()) != shape[dim])
    die(what + " is not rectangular: expected " + std::to_string(shape[dim]) +
        " elements at depth " + std::to_string(dim));
  for (const json &e : j)
    flatten(e, shape, dim + 1, out, what);
}

} // namespace

Value toValue(const json &j, qd::ScalarType t, std::vector<int64_t> shape,
              const std::string &what) {
  std::vector<const json *> elems;
  flatten(j, shape, 0, elems, what);
  Value v{std::move(shape), {}};
  v.elements.reserve(elems.size());
  for (size_t i = 0; i < elems.size(); ++i)
    v.elements.push_back(toScalar(*elems[i], t, what + " element " + std::to_string(i)));
  return v;
}

void store(qd::Buffer &buf, const Value &v) {
  for (size_t i = 0; i < v.elements.size(); ++i)
    buf.set(static_cast<int64_t>(i), v.elements[i]);
}

namespace {

// Output is written as text, not through nlohmann::json: its number printer
// (Grisu2) is not always shortest and knows nothing of f32, so 0.89722383f
// would print as 0.8972238300000001.
std::string scalarText(const qd::Scalar &s) {
  if (!s.isFloat())
    return s.type == qd::ScalarType::I1 ? (s.i ? "true" : "false") : std::to_string(s.i);
  if (std::isnan(s.f)) // whatever its sign bit (x86 gives 0/0 a negative NaN)
    return "\"nan\"";
  std::string text = qd::formatFloat(s.f, s.type);
  if (std::isinf(s.f))
    return '"' + text + '"';
  return text;
}

} // namespace

std::string bufferText(const qd::Buffer &buf) {
  if (buf.ndim() == 0)
    return scalarText(buf.get(0));
  std::function<std::string(size_t, int64_t &)> build = [&](size_t dim, int64_t &flat) {
    std::string arr = "[";
    for (int64_t i = 0; i < buf.shape()[dim]; ++i) {
      if (i)
        arr += ',';
      arr += dim + 1 == buf.ndim() ? scalarText(buf.get(flat++)) : build(dim + 1, flat);
    }
    return arr + "]";
  };
  int64_t flat = 0;
  return build(0, flat);
}

} // namespace qd::tool
