//===- TaskPrinting.h - Shared helpers of the analysis printers -*- C++ -*-===//
#pragma once

#include "qd/ir/Printer.h"
#include "qd/ir/Stmt.h"

#include <string>

namespace qd::analysis_detail {

/// The first line of a statement's text, without the ` {` that opens its
/// blocks: `if %p`, `for %j = 0 to %n`, `store @x[%i], %a`.
std::string headline(const Stmt &s, const ValueNamer &names);

/// `line:col` of `s` (the file is named once per task).
std::string lineCol(const Stmt &s);

} // namespace qd::analysis_detail
