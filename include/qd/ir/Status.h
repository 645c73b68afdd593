//===- qd/ir/Status.h - Statuses reworded with their payloads -*- C++ -*-===//
//
// An error passed up through layers gets context ("kernel @k: ...") at each
// one; its payloads (a machine-readable kind, like the runtime's
// kOverBudgetPayload) must survive, so that a caller can still tell what
// failed without reading the message.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/status.h>
#include <absl/strings/cord.h>

#include <string>

namespace qd {

/// `s`'s code and payloads with `message` (which usually embeds s's own).
inline absl::Status reworded(const absl::Status &s, const std::string &message) {
  absl::Status out(s.code(), message);
  s.ForEachPayload(
      [&](absl::string_view url, const absl::Cord &payload) { out.SetPayload(url, payload); });
  return out;
}

} // namespace qd
