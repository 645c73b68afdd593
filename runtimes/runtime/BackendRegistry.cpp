//===- BackendRegistry.cpp - Backends by name -----------------------------===//
#include "qd/runtime/BackendRegistry.h"

#include <absl/strings/numbers.h>

#include <algorithm>
#include <mutex>

namespace qd {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<BackendInfo> backends; // registration order
};

Registry &registry() {
  static Registry r;
  return r;
}

/// "a, b, c".
template <typename Names> std::string joined(const Names &names) {
  std::string out;
  for (const auto &n : names)
    out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

/// "a, b, c" or "none".
std::string listOrNone(const std::vector<std::string> &names) {
  return names.empty() ? "none" : joined(names);
}

} // namespace

//===----------------------------------------------------------------------===//
// BackendOptions
//===----------------------------------------------------------------------===//

absl::StatusOr<BackendOptions> BackendOptions::parse(std::string_view text) {
  BackendOptions options;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    if (absl::Status s = options.add(item); !s.ok())
      return s;
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return options;
}

void BackendOptions::set(std::string key, std::string value) {
  entries_.emplace_back(std::move(key), std::move(value));
}

absl::Status BackendOptions::add(std::string_view item) {
  size_t eq = item.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return absl::InvalidArgumentError("backend option '" + std::string(item) +
                                      "' is not KEY=VALUE (e.g. threads=4)");
  set(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  return absl::OkStatus();
}

const std::string *BackendOptions::find(std::string_view key) const {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if (it->first == key)
      return &it->second;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// BackendOptionReader
//===----------------------------------------------------------------------===//

const std::string *BackendOptionReader::value(std::string_view key) const {
  return status_.ok() ? options_.find(key) : nullptr;
}

void BackendOptionReader::fail(std::string_view key, const std::string &expects,
                               const std::string &got) {
  status_ = absl::InvalidArgumentError("backend '" + backend_ + "': option '" + std::string(key) +
                                       "' expects " + expects + ", got '" + got + "'");
}

bool BackendOptionReader::readInteger(std::string_view key, int64_t lo, int64_t hi, int64_t &out) {
  const std::string *text = value(key);
  if (!text)
    return false;
  int64_t v = 0;
  if (!absl::SimpleAtoi(*text, &v) || v < lo || v > hi) {
    fail(key, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi), *text);
    return false;
  }
  out = v;
  return true;
}

void BackendOptionReader::boolean(std::string_view key, bool &out) {
  choice(
      key, out,
      {{"true", true}, {"false", false}, {"on", true}, {"off", false}, {"1", true}, {"0", false}});
}

void BackendOptionReader::string(std::string_view key, std::string &out) {
  if (const std::string *text = value(key))
    out = *text;
}

void BackendOptionReader::badValue(std::string_view key,
                                   const std::vector<std::string_view> &accepted,
                                   const std::string &got) {
  fail(key, "one of " + joined(accepted), got);
}

//===----------------------------------------------------------------------===//
// The registry
//===----------------------------------------------------------------------===//

absl::Status registerBackend(BackendInfo info) {
  if (info.name.empty() || !info.create)
    return absl::InvalidArgumentError("registerBackend: a backend needs a name and a factory (" +
                                      (info.name.empty() ? "no name" : "'" + info.name + "'") +
                                      ")");
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const BackendInfo &b : r.backends)
    if (b.name == info.name)
      return absl::AlreadyExistsError("a backend named '" + info.name + "' is already registered");
  r.backends.push_back(std::move(info));
  return absl::OkStatus();
}

std::vector<std::string> registeredBackends() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const BackendInfo &b : r.backends)
    names.push_back(b.name);
  return names;
}

absl::StatusOr<BackendInfo> findBackend(std::string_view name) {
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const BackendInfo &b : r.backends)
      if (b.name == name)
        return b;
  }
  return absl::NotFoundError("unknown backend '" + std::string(name) +
                             "'; available backends: " + listOrNone(registeredBackends()));
}

absl::StatusOr<std::unique_ptr<Backend>> createBackend(std::string_view name,
                                                       const BackendOptions &options) {
  absl::StatusOr<BackendInfo> info = findBackend(name);
  if (!info.ok())
    return info.status();
  std::vector<std::string> known;
  for (const BackendOptionInfo &o : info->options)
    known.push_back(o.name);
  for (const auto &[key, value] : options.entries())
    if (std::find(known.begin(), known.end(), key) == known.end())
      return absl::InvalidArgumentError("backend '" + info->name + "' has no option '" + key +
                                        "'; its options: " + listOrNone(known));
  return info->create(options);
}

std::string backendHelp(int indent) {
  std::vector<BackendInfo> backends;
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    backends = r.backends;
  }
  std::string pad(static_cast<size_t>(indent), ' '), out;
  for (const BackendInfo &b : backends) {
    out += pad + b.name + ": " + b.summary + "\n";
    for (const BackendOptionInfo &o : b.options) {
      std::string spelled = o.name + "=" + o.values;
      out += pad + "    " + spelled;
      out += spelled.size() < 26 ? std::string(26 - spelled.size(), ' ')
                                 : "\n" + pad + "    " + std::string(26, ' ');
      out += o.help + "\n";
    }
  }
  return out;
}

} // namespace qd
