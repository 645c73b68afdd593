//===- qd/ir/Location.h - Source locations ----------------------*- C++ -*-===//
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace qd {

/// A `file:line:col` position. Statements parsed from text carry the position
/// of their first token; statements made by a transform inherit the location
/// of the statement they were derived from. Default-constructed locations are
/// "unknown" and print as such.
class Location {
public:
  Location() = default;
  Location(std::shared_ptr<const std::string> file, uint32_t line, uint32_t col)
      : file_(std::move(file)), line_(line), col_(col) {}

  bool isKnown() const { return line_ != 0; }
  const std::string &file() const;
  uint32_t line() const { return line_; }
  uint32_t col() const { return col_; }

  /// `file:line:col`, or `<unknown>`.
  std::string str() const;

  friend bool operator==(const Location &a, const Location &b) {
    return a.line_ == b.line_ && a.col_ == b.col_ && a.file() == b.file();
  }

private:
  std::shared_ptr<const std::string> file_;
  uint32_t line_ = 0;
  uint32_t col_ = 0;
};

} // namespace qd
