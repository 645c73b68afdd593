//===- TaskPrinting.cpp - Shared helpers of the analysis printers ---------===//
#include "TaskPrinting.h"

#include <fmt/format.h>

namespace qd::analysis_detail {

std::string headline(const Stmt &s, const ValueNamer &names) {
  std::string text = printStmt(s, names);
  text = text.substr(0, text.find('\n'));
  size_t first = text.find_first_not_of(' ');
  text = first == std::string::npos ? "" : text.substr(first);
  if (text.size() >= 2 && text.compare(text.size() - 2, 2, " {") == 0)
    text.resize(text.size() - 2);
  return text;
}

std::string lineCol(const Stmt &s) {
  if (!s.loc().isKnown())
    return "?:?";
  return fmt::format("{}:{}", s.loc().line(), s.loc().col());
}

} // namespace qd::analysis_detail
