//===- qd/ir/Parser.h - Reading the text format -----------------*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"

#include <absl/status/statusor.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qd {

struct ParseOptions {
  /// File name used in locations and diagnostics.
  std::string_view filename = "<stdin>";
  /// Line number of the first line of `text` (for split input files).
  unsigned firstLine = 1;
};

/// A piece of a split input file and the line it starts on.
struct SourceChunk {
  std::string text;
  unsigned firstLine = 1;
};

/// The contents of the file at `path` (the tools' input files: `.qd` text,
/// JSON inputs). A path that is missing, a directory or not readable, and
/// a read that fails midway, are errors naming the path; never an
/// exception.
absl::StatusOr<std::string> readTextFile(const std::string &path);

/// Splits `text` on lines starting with `// -----` (the convention of
/// `qd-opt --split-input-file`); each chunk starts on the line after its
/// separator, so diagnostics keep the file's line numbers.
std::vector<SourceChunk> splitSourceChunks(std::string_view text);

/// The statement kind a keyword of the text form starts (after `%name =`
/// for kinds that printsResult()): a mnemonic of StmtKinds.def, a binary or
/// unary operator (`add`, `sin`), or `parallel` (of `parallel for`). `load`
/// and `store` give the local kinds; the parser picks the global kind when
/// the target is a field or ndarray element. Nullopt for other words.
std::optional<StmtKind> stmtKindForKeyword(std::string_view keyword);

/// Parses a module in the text format of docs/ir.md. On malformed input the
/// status is InvalidArgument with `file:line:col: error: <what was expected>`.
/// Parsing does not verify: run `verify()` on the result. Never aborts.
absl::StatusOr<std::unique_ptr<Module>> parseModule(std::string_view text,
                                                    const ParseOptions &options = {});

} // namespace qd
