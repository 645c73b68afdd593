//===- qd/transforms/PassOptions.h - Declared options of a pass -*- C++ -*-===//
//
// A pass declares its options (name, type, default, help) once, in
// qd/transforms/Passes.def; a pipeline sets them in braces after the pass
// name: `reverse-ad{tape-nested-loops=false}`. The registry checks every
// option against the declaration before the pass's factory runs, so a
// factory reads complete, well-typed values.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace qd {

enum class PassOptionType : uint8_t {
  Bool, ///< `true`/`false` (also `1`/`0`); a bare name means true
  Int,  ///< a decimal 64-bit integer
};
std::string_view toString(PassOptionType type);

/// One option as a pass declares it.
struct PassOptionInfo {
  std::string name;         ///< as written in pipelines: `tape-nested-loops`
  PassOptionType type;      ///<
  std::string defaultValue; ///< spelled as in a pipeline: `true`, `16`
  std::string help;         ///< one line for `qd-opt --list-passes`
};

/// A typed option value.
using PassOptionValue = std::variant<bool, int64_t>;

/// Parses `text` as a value of `type`; the error says what the type takes.
absl::StatusOr<PassOptionValue> parsePassOptionValue(PassOptionType type, std::string_view text);
/// The pipeline spelling of a value (`true`, `-3`).
std::string formatPassOptionValue(const PassOptionValue &value);

/// The values of every declared option of one pass: the defaults, replaced
/// by what the pipeline sets. Built by the PassRegistry.
class PassOptionValues {
public:
  /// All defaults of `declared` (which the registry has already checked).
  static PassOptionValues defaults(const std::vector<PassOptionInfo> &declared);

  /// The value of a declared option. Asking for an undeclared option or
  /// with the wrong type is a bug in the pass's factory: it aborts naming
  /// the option.
  bool getBool(std::string_view name) const;
  int64_t getInt(std::string_view name) const;

  /// Sets a declared option (the type must match).
  void set(std::string_view name, PassOptionValue value);

  /// The options that differ from their defaults, in declaration order,
  /// spelled as in a pipeline and separated by spaces ("" when none).
  std::string nonDefaultText() const;

private:
  struct Slot {
    PassOptionInfo info;
    PassOptionValue value;
    PassOptionValue defaultValue;
  };
  const Slot &slot(std::string_view name, PassOptionType type) const;
  std::vector<Slot> slots_;
};

} // namespace qd
