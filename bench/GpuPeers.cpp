//===- GpuPeers.cpp - qd-bench-gpu's peer results -------------------------===//
//
// Reads the peers' JSON results (GpuPeers.h).
//
//===----------------------------------------------------------------------===//
#include "GpuPeers.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <type_traits>

namespace qdbench {
namespace {

using json = nlohmann::json;

void addPeerObject(Peers &peers, const json &o, const std::string &file) {
  if (!o.is_object())
    return;
  std::string source = o.value("source", file);
  if (o.contains("available") && !o.value("available", true)) {
    std::string reason = o.value("reason", std::string("not available"));
    if (o.contains("impls") && o["impls"].is_array())
      for (const auto &i : o["impls"])
        if (i.is_string())
          peers.unavailable.emplace(i.get<std::string>(), reason);
    peers.info.push_back(fmt::format("{}: not available: {}", source, reason));
    return;
  }
  if (o.contains("info") && o["info"].is_string())
    peers.info.push_back(fmt::format("{}: {}", source, o["info"].get<std::string>()));
  if (o.contains("status") && o["status"].is_object())
    for (const auto &[impl, st] : o["status"].items())
      if (st.is_object() && !st.value("available", true))
        peers.unavailable.emplace(impl, st.value("reason", std::string("not available")));
  if (!o.contains("rows") || !o["rows"].is_array())
    return;
  for (const json &r : o["rows"]) {
    if (!r.is_object() || !r.contains("workload") || !r.contains("n") || !r.contains("impl") ||
        !r.contains("ms_median"))
      continue;
    PeerRow row;
    row.medianMs = r["ms_median"].get<double>();
    row.minMs = r.value("ms_min", row.medianMs);
    if (r.contains("grad_sum") && r["grad_sum"].is_number())
      row.gradSum = r["grad_sum"].get<double>();
    if (r.contains("compile_s") && r["compile_s"].is_number())
      row.compileS = r["compile_s"].get<double>();
    row.note = r.value("note", std::string());
    auto number = [&](const char *key, auto &slot) {
      if (r.contains(key) && r[key].is_number())
        slot = r[key].get<typename std::decay_t<decltype(slot)>::value_type>();
    };
    number("fwd_ms", row.fwdMs);
    number("loss", row.loss);
    number("grad_norm", row.gradNorm);
    number("steps", row.steps);
    number("mem_bytes", row.memBytes);
    peers.rows[{r["workload"].get<std::string>(), r["n"].get<int64_t>(),
                r["impl"].get<std::string>()}] = row;
  }
}

void addPeers(Peers &peers, const json &j, const std::string &source) {
  if (j.is_array())
    for (const json &o : j)
      addPeerObject(peers, o, source);
  else
    addPeerObject(peers, j, source);
}

} // namespace

void loadPeers(Peers &peers, const std::string &file) {
  std::ifstream in(file);
  json j = in ? json::parse(in, nullptr, false) : json(nullptr);
  if (!in || j.is_discarded()) {
    peers.info.push_back(fmt::format("{}: unreadable (missing or not JSON)", file));
    return;
  }
  addPeers(peers, j, file);
}

void loadPeersText(Peers &peers, const std::string &text, const std::string &source) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    peers.info.push_back(fmt::format("{}: printed no JSON", source));
    return;
  }
  addPeers(peers, j, source);
}

} // namespace qdbench
