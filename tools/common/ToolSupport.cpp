//===- ToolSupport.cpp - JSON inputs and options of the qd tools ------------===//
#include "ToolSupport.h"

#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

namespace qd::tool {
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

void die(std::string message) {
  throw Failure{std::move(message)};
}

std::string readFile(const std::string &path) {
  absl::StatusOr<std::string> text = qd::readTextFile(path);
  if (!text.ok())
    die(std::string(text.status().message()));
  return *std::move(text);
}

std::unique_ptr<Module> readModule(const std::string &path) {
  auto parsed = parseModule(readFile(path), {path, 1});
  if (!parsed.ok())
    die(std::string(parsed.status().message()));
  if (absl::Status v = verify(**parsed); !v.ok())
    die(std::string(v.message()));
  return *std::move(parsed);
}

std::string onlyKernel(const Module &module) {
  if (module.kernels().size() != 1)
    die("the module has " + std::to_string(module.kernels().size()) +
        " kernels; choose with --kernel=NAME");
  return module.kernels()[0]->name();
}

/// Deepest nesting of arrays and objects accepted in JSON input: far more
/// than any value a tool takes (an ndarray of rank r nests r + 2 levels),
/// and shallow enough that handling the value never exhausts the stack.
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
            std::to_string(kMaxJsonNesting) + " levels deep; qd inputs need at most the " +
            "ndarray rank + 2");
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    die("malformed JSON in " + what + ": '" + text.substr(0, 80) + "'");
  return j;
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

qd::Scalar toScalar(const json &j, qd::ScalarType t, const std::string &what) {
  using qd::ScalarType;
  if (t == ScalarType::I1) {
    if (j.is_boolean())
      return qd::Scalar::ofInt(t, j.get<bool>());
    if (j.is_number_integer() && (j.get<int64_t>() == 0 || j.get<int64_t>() == 1))
      return qd::Scalar::ofInt(t, j.get<int64_t>());
    die(what + " must be true or false, got " + j.dump());
  }
  if (qd::isInteger(t)) {
    if (!j.is_number_integer())
      die(what + " must be an integer (" + std::string(qd::toString(t)) + "), got " + j.dump());
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
  die(what + " must be a number, got " + j.dump());
}

/// Shape of a rectangular nested JSON array (a scalar has shape []).
std::vector<int64_t> shapeOf(const json &j, const std::string &what) {
  std::vector<int64_t> shape;
  const json *cur = &j;
  while (cur->is_array()) {
    shape.push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty())
      break;
    cur = &(*cur)[0];
  }
  (void)what;
  return shape;
}

void fillBuffer(qd::Buffer &buf, const json &j, const std::string &what) {
  std::vector<const json *> elems;
  if (buf.ndim() == 0 && !j.is_array()) {
    elems.push_back(&j);
  } else {
    flatten(j, buf.shape(), 0, elems, what);
  }
  for (size_t i = 0; i < elems.size(); ++i)
    buf.set(static_cast<int64_t>(i),
            toScalar(*elems[i], buf.elementType(), what + " element " + std::to_string(i)));
}

/// The whole of `text` as a decimal integer in [lo, hi], or a failure
/// naming `flag` (no trailing text, no silent wrap-around).
int64_t integerOption(const std::string &flag, const std::string &text, int64_t lo, int64_t hi) {
  size_t at = text.empty() || text[0] == '-' || text[0] == '+' ? 1 : 0;
  bool digits = at < text.size() && std::all_of(text.begin() + at, text.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
  if (!digits)
    die(fmt::format("{} expects an integer in [{}, {}], got '{}'", flag, lo, hi, text));
  int64_t v = 0;
  try {
    v = std::stoll(text);
  } catch (const std::out_of_range &) {
    die(fmt::format("{} '{}' does not fit in a 64-bit integer", flag, text));
  }
  if (v < lo || v > hi)
    die(fmt::format("{} must be in [{}, {}], got {}", flag, lo, hi, v));
  return v;
}

JsonInputs readJsonInputs(const std::string &inputsFile,
                          const std::vector<std::pair<std::string, std::string>> &sets,
                          const std::vector<std::pair<std::string, std::string>> &argValues) {
  JsonInputs out;
  std::map<std::string, json> &fieldInputs = out.fields, &argInputs = out.args;
  if (!inputsFile.empty()) {
    json in = parseJson(readFile(inputsFile), "'" + inputsFile + "'");
    if (!in.is_object())
      die("'" + inputsFile + "' must hold a JSON object with \"fields\" and/or \"args\"");
    for (auto &[key, val] : in.items()) {
      if (key != "fields" && key != "args")
        die("unknown key \"" + key + "\" in '" + inputsFile + "' (expected fields, args)");
      if (!val.is_object())
        die("\"" + key + "\" in '" + inputsFile + "' must be an object");
      for (auto &[name, v] : val.items())
        (key == "fields" ? fieldInputs : argInputs)[name] = v;
    }
  }
  for (auto &[name, text] : sets)
    fieldInputs[name] = parseJson(text, "--set " + name);
  for (auto &[name, text] : argValues)
    argInputs[name] = parseJson(text, "--arg " + name);
  return out;
}

int toolMain(std::string_view tool, int (*run)(int, char **), int argc, char **argv) {
  try {
    int rc = run(argc, argv);
    // A full disk or a closed pipe must not pass for success.
    if (!std::cout.flush())
      die("cannot write the output (standard output failed)");
    return rc;
  } catch (const Failure &f) {
    // Diagnostics that already carry `file:line:col: error:` stand alone.
    bool located = f.message.find(": error: ") != std::string::npos;
    std::cerr << (located ? "" : std::string(tool) + ": error: ") << f.message << '\n';
    return 1;
  }
}

} // namespace qd::tool
