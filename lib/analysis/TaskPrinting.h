//===- TaskPrinting.h - Shared helpers of the analysis printers -*- C++ -*-===//
#pragma once

#include "qd/ir/Casting.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Stmt.h"

#include <fmt/format.h>

#include <ostream>
#include <string>
#include <string_view>

namespace qd::analysis_detail {

/// The first line of a statement's text, without the ` {` that opens its
/// blocks: `if %p`, `for %j = 0 to %n`, `store @x[%i], %a`.
std::string headline(const Stmt &s, const ValueNamer &names);

/// `line:col` of `s` (the file is named once per task).
std::string lineCol(const Stmt &s);

/// For every parallel task of `kernel`: prints the heading
/// `<what> of task %t in @k at file:line:col:`, then calls `print(task)`.
template <typename Print>
void forEachPrintedTask(const Kernel &kernel, const ValueNamer &names, std::ostream &os,
                        std::string_view what, Print &&print) {
  for (Stmt &top : const_cast<Kernel &>(kernel).body()) {
    auto *task = dyn_cast<ForStmt>(&top);
    if (!task || !task->isParallel())
      continue;
    os << fmt::format("{} of task {} in @{} at {}:\n", what, names[task], kernel.name(),
                      task->loc().str());
    print(*task);
  }
}

} // namespace qd::analysis_detail
