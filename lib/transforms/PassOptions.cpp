//===- PassOptions.cpp - Declared options of a pass -----------------------===//
#include "qd/transforms/PassOptions.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace qd {

std::string_view toString(PassOptionType type) {
  switch (type) {
  case PassOptionType::Bool:
    return "bool";
  case PassOptionType::Int:
    return "int";
  }
  return "?";
}

absl::StatusOr<PassOptionValue> parsePassOptionValue(PassOptionType type, std::string_view text) {
  switch (type) {
  case PassOptionType::Bool:
    if (text == "true" || text == "1")
      return PassOptionValue(true);
    if (text == "false" || text == "0")
      return PassOptionValue(false);
    return absl::InvalidArgumentError(fmt::format("takes true or false, got '{}'", text));
  case PassOptionType::Int: {
    int64_t v = 0;
    const char *end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || ptr != end)
      return absl::InvalidArgumentError(
          fmt::format("takes a 64-bit decimal integer, got '{}'", text));
    return PassOptionValue(v);
  }
  }
  return absl::InternalError("unknown option type");
}

std::string formatPassOptionValue(const PassOptionValue &value) {
  if (const bool *b = std::get_if<bool>(&value))
    return *b ? "true" : "false";
  return std::to_string(std::get<int64_t>(value));
}

PassOptionValues PassOptionValues::defaults(const std::vector<PassOptionInfo> &declared) {
  PassOptionValues values;
  for (const PassOptionInfo &info : declared) {
    // The registry parsed every default when the option was added.
    absl::StatusOr<PassOptionValue> v = parsePassOptionValue(info.type, info.defaultValue);
    PassOptionValue value = v.ok() ? *v : PassOptionValue(false);
    values.slots_.push_back({info, value, value});
  }
  return values;
}

const PassOptionValues::Slot &PassOptionValues::slot(std::string_view name,
                                                     PassOptionType type) const {
  for (const Slot &s : slots_)
    if (s.info.name == name && s.info.type == type)
      return s;
  // A factory asking for an option its pass does not declare is a bug in
  // that factory, found by the first test that creates the pass.
  std::fprintf(stderr, "qd: internal error: pass option '%.*s' of type %.*s is not declared\n",
               static_cast<int>(name.size()), name.data(), static_cast<int>(toString(type).size()),
               toString(type).data());
  std::abort();
}

bool PassOptionValues::getBool(std::string_view name) const {
  return std::get<bool>(slot(name, PassOptionType::Bool).value);
}

int64_t PassOptionValues::getInt(std::string_view name) const {
  return std::get<int64_t>(slot(name, PassOptionType::Int).value);
}

void PassOptionValues::set(std::string_view name, PassOptionValue value) {
  PassOptionType type =
      std::holds_alternative<bool>(value) ? PassOptionType::Bool : PassOptionType::Int;
  const_cast<Slot &>(slot(name, type)).value = value;
}

std::string PassOptionValues::nonDefaultText() const {
  std::string text;
  for (const Slot &s : slots_)
    if (s.value != s.defaultValue)
      text += (text.empty() ? "" : " ") + s.info.name + "=" + formatPassOptionValue(s.value);
  return text;
}

} // namespace qd
