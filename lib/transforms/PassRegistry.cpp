//===- PassRegistry.cpp - Pass registry and pipeline parsing --------------===//
#include "qd/transforms/Passes.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <type_traits>

namespace qd {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

/// Offset of `part` (a view into `whole`) within `whole`.
size_t offsetIn(std::string_view whole, std::string_view part) {
  return static_cast<size_t>(part.data() - whole.data());
}

/// "column 12 of pipeline '...'": where an error is, 1-based.
std::string at(std::string_view pipeline, size_t pos) {
  return fmt::format("column {} of pipeline '{}'", pos + 1, pipeline);
}

absl::Status syntaxError(std::string what, std::string_view pipeline, size_t pos) {
  return absl::InvalidArgumentError(fmt::format("{} ({})", what, at(pipeline, pos)));
}

} // namespace

PassRegistry &PassRegistry::global() {
  static PassRegistry *registry = [] {
    auto *r = new PassRegistry();
    if (absl::Status s = registerBuiltinPasses(*r); !s.ok()) {
      // A malformed Passes.def: every test that uses a pass finds it.
      std::fprintf(stderr, "qd: internal error in Passes.def: %s\n",
                   std::string(s.message()).c_str());
      std::abort();
    }
    return r;
  }();
  return *registry;
}

absl::Status PassRegistry::add(std::string name, std::string description, Factory factory) {
  if (entries_.count(name) || aliases_.count(name))
    return absl::AlreadyExistsError(fmt::format("a pass named '{}' is already registered", name));
  entries_.emplace(std::move(name), Entry{std::move(description), std::move(factory), {}});
  return absl::OkStatus();
}

absl::Status PassRegistry::add(std::string name, std::string description,
                               std::function<std::unique_ptr<Pass>()> factory) {
  return add(std::move(name), std::move(description),
             Factory([f = std::move(factory)](const PassOptionValues &) { return f(); }));
}

absl::Status PassRegistry::addOption(std::string_view pass, PassOptionInfo option) {
  auto it = entries_.find(pass);
  if (it == entries_.end())
    return absl::NotFoundError(
        fmt::format("cannot add option '{}' to unknown pass '{}'", option.name, pass));
  if (option.name.empty() || option.name.find_first_of("{}=, \t") != std::string::npos)
    return absl::InvalidArgumentError(fmt::format(
        "option name '{}' of pass '{}' is empty or has one of '{{}}=, '", option.name, pass));
  for (const PassOptionInfo &o : it->second.options)
    if (o.name == option.name)
      return absl::AlreadyExistsError(
          fmt::format("pass '{}' already has an option '{}'", pass, option.name));
  if (auto v = parsePassOptionValue(option.type, option.defaultValue); !v.ok())
    return absl::InvalidArgumentError(fmt::format("default of option '{}' of pass '{}' {}",
                                                  option.name, pass,
                                                  std::string(v.status().message())));
  it->second.options.push_back(std::move(option));
  return absl::OkStatus();
}

absl::Status PassRegistry::addAlias(std::string name, std::string expansion) {
  if (entries_.count(name) || aliases_.count(name))
    return absl::AlreadyExistsError(fmt::format("a pass named '{}' is already registered", name));
  absl::StatusOr<std::vector<Created>> parsed = parsePipeline(expansion);
  if (!parsed.ok())
    return absl::InvalidArgumentError(
        fmt::format("alias '{}': {}", name, std::string(parsed.status().message())));
  if (parsed->size() != 1)
    return absl::InvalidArgumentError(
        fmt::format("alias '{}' must stand for one pass, not '{}'", name, expansion));
  aliases_.emplace(std::move(name), std::move(expansion));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Pass>> PassRegistry::create(std::string_view element) const {
  absl::StatusOr<std::vector<Created>> parsed = parsePipeline(element);
  if (!parsed.ok())
    return parsed.status();
  if (parsed->size() != 1)
    return absl::InvalidArgumentError(
        fmt::format("expected one pass, got the pipeline '{}'", element));
  return std::move(parsed->front().pass);
}

absl::StatusOr<std::vector<PassRegistry::Created>>
PassRegistry::parsePipeline(std::string_view pipeline) const {
  std::vector<Created> passes;
  if (trim(pipeline).empty())
    return passes;
  // Split at the commas outside braces; braces do not nest.
  size_t start = 0, open = std::string_view::npos;
  for (size_t i = 0; i <= pipeline.size(); ++i) {
    char c = i < pipeline.size() ? pipeline[i] : ',';
    if (c == '{') {
      if (open != std::string_view::npos)
        return syntaxError(fmt::format("unexpected '{{' inside the options of pass '{}'",
                                       trim(pipeline.substr(start, open - start))),
                           pipeline, i);
      open = i;
    } else if (c == '}') {
      if (open == std::string_view::npos)
        return syntaxError(fmt::format("unbalanced '}}' after '{}': no '{{' opens it",
                                       trim(pipeline.substr(start, i - start))),
                           pipeline, i);
      open = std::string_view::npos;
    } else if (c == ',' && open == std::string_view::npos) {
      absl::StatusOr<Created> p = createElement(pipeline, start, i);
      if (!p.ok())
        return p.status();
      passes.push_back(*std::move(p));
      start = i + 1;
    } else if (i == pipeline.size()) {
      return syntaxError(fmt::format("unbalanced '{{' after pass '{}': expected '}}'",
                                     trim(pipeline.substr(start, open - start))),
                         pipeline, open);
    }
  }
  return passes;
}

absl::StatusOr<PassRegistry::Created> PassRegistry::createElement(std::string_view pipeline,
                                                                  size_t begin, size_t end) const {
  std::string_view element = pipeline.substr(begin, end - begin);
  size_t brace = element.find('{');
  std::string_view name = trim(element.substr(0, brace));
  if (name.empty())
    return absl::InvalidArgumentError(fmt::format(
        "empty pass name in pipeline '{}'; separate names with single commas", pipeline));
  std::string_view options;
  if (brace != std::string_view::npos) {
    size_t close = element.find('}', brace);
    options = element.substr(brace + 1, close - brace - 1);
    if (std::string_view rest = trim(element.substr(close + 1)); !rest.empty())
      return syntaxError(
          fmt::format("expected ',' after the options of pass '{}', found '{}'", name, rest),
          pipeline, offsetIn(pipeline, rest));
  }

  if (auto alias = aliases_.find(name); alias != aliases_.end()) {
    if (brace != std::string_view::npos)
      return syntaxError(fmt::format("'{}' is an alias of '{}' and takes no options; set them on "
                                     "'{}' instead",
                                     name, alias->second,
                                     alias->second.substr(0, alias->second.find('{'))),
                         pipeline, begin + brace);
    return createElement(alias->second, 0, alias->second.size());
  }
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string known, aliases;
    for (const auto &[n, e] : entries_)
      known += (known.empty() ? "" : ", ") + n;
    for (const auto &[n, e] : aliases_)
      aliases += (aliases.empty() ? "; aliases: " : ", ") + n;
    return absl::NotFoundError(
        fmt::format("unknown pass '{}'; registered passes: {}{}", name, known, aliases));
  }
  const Entry &entry = it->second;

  PassOptionValues values = PassOptionValues::defaults(entry.options);
  std::set<std::string_view> seen;
  size_t pos = 0;
  while (pos < options.size()) {
    if (options[pos] == ',' || std::isspace(static_cast<unsigned char>(options[pos]))) {
      ++pos;
      continue;
    }
    size_t stop = options.find_first_of(", \t\n\r", pos);
    if (stop == std::string_view::npos)
      stop = options.size();
    std::string_view token = options.substr(pos, stop - pos);
    size_t where = offsetIn(pipeline, token);
    pos = stop;
    size_t eq = token.find('=');
    std::string_view key = token.substr(0, eq);
    if (key.empty())
      return syntaxError(
          fmt::format("missing option name before '=' in the options of pass '{}'", name), pipeline,
          where);
    const PassOptionInfo *info = nullptr;
    for (const PassOptionInfo &o : entry.options)
      if (o.name == key)
        info = &o;
    if (!info) {
      std::string known;
      for (const PassOptionInfo &o : entry.options)
        known += (known.empty() ? "" : ", ") + o.name;
      return syntaxError(
          fmt::format("pass '{}' has no option '{}'{}", name, key,
                      known.empty() ? "; it takes no options" : "; its options: " + known),
          pipeline, where);
    }
    if (!seen.insert(key).second)
      return syntaxError(fmt::format("option '{}' of pass '{}' is given twice", key, name),
                         pipeline, where);
    if (eq == std::string_view::npos) {
      if (info->type != PassOptionType::Bool)
        return syntaxError(fmt::format("option '{}' of pass '{}' needs a value: {}=<{}>", key, name,
                                       key, toString(info->type)),
                           pipeline, where);
      values.set(key, true);
      continue;
    }
    absl::StatusOr<PassOptionValue> v = parsePassOptionValue(info->type, token.substr(eq + 1));
    if (!v.ok())
      return syntaxError(
          fmt::format("option '{}' of pass '{}' {}", key, name, std::string(v.status().message())),
          pipeline, where + eq + 1);
    values.set(key, *v);
  }

  Created created{entry.factory(values), std::string(name)};
  if (std::string set = values.nonDefaultText(); !set.empty())
    created.label += "{" + set + "}";
  return created;
}

void PassRegistry::printList(std::ostream &os) const {
  std::map<std::string_view, std::string> lines;
  for (const auto &[name, entry] : entries_) {
    std::string text = fmt::format("  {} - {}\n", name, entry.description);
    for (const PassOptionInfo &o : entry.options)
      text += fmt::format("      {}=<{}> (default: {}) - {}\n", o.name, toString(o.type),
                          o.defaultValue, o.help);
    lines[name] = text;
  }
  for (const auto &[name, expansion] : aliases_)
    lines[name] = fmt::format("  {} - alias of {}\n", name, expansion);
  for (const auto &[name, text] : lines)
    os << text;
}

namespace {
/// Calls a factory of Passes.def, with the options if it takes them.
template <class F> std::unique_ptr<Pass> callFactory(F *factory, const PassOptionValues &options) {
  if constexpr (std::is_invocable_v<F *, const PassOptionValues &>)
    return factory(options);
  else
    return factory();
}
} // namespace

absl::Status registerBuiltinPasses(PassRegistry &registry) {
  absl::Status status;
#define QD_PASS(NAME, FACTORY, SUMMARY)                                                            \
  status.Update(registry.add(NAME, SUMMARY, PassRegistry::Factory([](const PassOptionValues &o) {  \
                               return callFactory(&FACTORY, o);                                    \
                             })));
#define QD_PASS_OPTION(PASS, NAME, TYPE, DEFAULT, HELP)                                            \
  status.Update(registry.addOption(PASS, {NAME, PassOptionType::TYPE, DEFAULT, HELP}));
#define QD_PASS_ALIAS(NAME, EXPANSION) status.Update(registry.addAlias(NAME, EXPANSION));
#include "qd/transforms/Passes.def"
  return status;
}

} // namespace qd
