//===- qd/ir/Parser.h - Reading the text format -----------------*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"

#include <absl/status/statusor.h>

#include <memory>
#include <string_view>

namespace qd {

struct ParseOptions {
  /// File name used in locations and diagnostics.
  std::string_view filename = "<stdin>";
  /// Line number of the first line of `text` (for split input files).
  unsigned firstLine = 1;
};

/// Parses a module in the text format of docs/ir.md. On malformed input the
/// status is InvalidArgument with `file:line:col: error: <what was expected>`.
/// Parsing does not verify: run `verify()` on the result. Never aborts.
absl::StatusOr<std::unique_ptr<Module>> parseModule(std::string_view text,
                                                    const ParseOptions &options = {});

} // namespace qd
