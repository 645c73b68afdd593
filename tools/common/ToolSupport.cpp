//===- ToolSupport.cpp - JSON inputs and options of the qd tools ------------===//
#include "ToolSupport.h"

#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/AllBackends.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

namespace qd::tool {
std::unique_ptr<Module> readModule(const std::string &path) {
  auto parsed = parseModule(readFile(path), {path, 1});
  if (!parsed.ok())
    die(std::string(parsed.status().message()));
  if (absl::Status v = verify(**parsed); !v.ok())
    die(std::string(v.message()));
  return *std::move(parsed);
}

std::unique_ptr<Backend> createBackendOrDie(const std::string &name,
                                            const BackendOptions &options) {
  registerAllBackends();
  return orDie(createBackend(name, options));
}

std::string backendUsage() {
  registerAllBackends();
  return "backends (--backend=NAME) and their options (--backend-option KEY=VALUE):\n" +
         backendHelp(2);
}

std::string onlyKernel(const Module &module) {
  if (module.kernels().size() != 1)
    die("the module has " + std::to_string(module.kernels().size()) +
        " kernels; choose with --kernel=NAME");
  return module.kernels()[0]->name();
}

void fillBuffer(qd::Buffer &buf, const json &j, const std::string &what) {
  store(buf, toValue(j, buf.elementType(), buf.shape(), what));
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

JsonInputs readInputsFile(const std::string &path) {
  JsonInputs out;
  json in = parseJson(readFile(path), "'" + path + "'");
  if (!in.is_object())
    die("'" + path + "' must hold a JSON object with \"fields\" and/or \"args\"");
  for (auto &[key, val] : in.items()) {
    if (key != "fields" && key != "args")
      die("unknown key \"" + key + "\" in '" + path + "' (expected fields, args)");
    if (!val.is_object())
      die("\"" + key + "\" in '" + path + "' must be an object");
    for (auto &[name, v] : val.items())
      (key == "fields" ? out.fields : out.args)[name] = v;
  }
  return out;
}

JsonInputs readJsonInputs(const std::string &inputsFile,
                          const std::vector<std::pair<std::string, std::string>> &sets,
                          const std::vector<std::pair<std::string, std::string>> &argValues) {
  JsonInputs out = inputsFile.empty() ? JsonInputs() : readInputsFile(inputsFile);
  for (auto &[name, text] : sets)
    out.fields[name] = parseJson(text, "--set " + name);
  for (auto &[name, text] : argValues)
    out.args[name] = parseJson(text, "--arg " + name);
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
    std::cerr << diagnostic(f.message, tool) << '\n';
    return 1;
  } catch (const json::exception &e) {
    // Inputs are checked before use; this is the net under that.
    std::cerr << tool << ": error: " << e.what() << '\n';
    return 1;
  }
}

} // namespace qd::tool
