//===- TapeVersions.cpp - What a launch tape keeps of each launch ---------===//
#include "TapeVersions.h"

#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace qd::runtime_detail {

uint64_t contentHash(const Buffer &b) {
  const std::byte *p = b.data();
  size_t n = b.sizeInBytes(), i = 0;
  uint64_t h = 0x243F6A8885A308D3ull ^ n;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i)
    h = (h ^ uint64_t(p[i])) * 0x100000001B3ull;
  return h;
}

Bytes copyOf(const Buffer &b) {
  const std::byte *p = b.data();
  return Bytes(p, p + b.sizeInBytes());
}

void restore(Buffer &b, const Bytes &bytes) {
  if (!bytes.empty())
    std::memcpy(b.data(), bytes.data(), bytes.size());
}

std::string TapeRecord::label() const {
  return fmt::format("launch {} (@{})", index, kernels.forward->name());
}

std::string TapeRecord::nameOf(const Buffer *b) const {
  for (const std::vector<TapeUse> *list : {&touched, &gradientReads})
    for (const TapeUse &u : *list)
      if (u.buffer == b)
        return u.name;
  return "";
}

std::vector<KernelGlobal> kernelGlobals(const Kernel &kernel) {
  std::vector<KernelGlobal> out;
  size_t position = 0;
  walk(const_cast<Kernel &>(kernel).body(), [&](Stmt &s) {
    auto *g = dyn_cast<GlobalAccessStmt>(&s);
    if (!g)
      return;
    const Field *field = g->isField() ? g->field() : nullptr;
    const Argument *ndarray = g->isField() ? nullptr : cast<Argument>(g->ndarray());
    auto it = std::find_if(out.begin(), out.end(), [&](const KernelGlobal &k) {
      return k.field == field && k.ndarray == ndarray && k.component == g->component();
    });
    if (it == out.end())
      it = out.insert(out.end(), {field, ndarray, g->component()});
    size_t at = position++;
    if (isa<GlobalLoadStmt>(g) || isa<AtomicRmwStmt>(g))
      it->firstRead = std::min(it->firstRead, at);
    if (!isa<GlobalLoadStmt>(g))
      it->firstWrite = std::min(it->firstWrite, at);
  });
  return out;
}

std::vector<TapeUse> kernelUses(std::span<const KernelGlobal> globals, Program &program,
                                std::span<const LaunchArg> args, Component component, bool reads,
                                bool writes) {
  std::vector<std::pair<size_t, const KernelGlobal *>> used;
  for (const KernelGlobal &g : globals) {
    size_t first = std::min(reads ? g.firstRead : SIZE_MAX, writes ? g.firstWrite : SIZE_MAX);
    if (g.component == component && first != SIZE_MAX)
      used.emplace_back(first, &g);
  }
  std::sort(used.begin(), used.end());
  std::vector<TapeUse> out;
  for (auto [first, g] : used) {
    TapeUse use;
    if (g->field) {
      use.buffer = program.field(*g->field, component);
      use.name = "@" + g->field->name();
    } else {
      unsigned i = g->ndarray->index();
      if (i < args.size() && args[i].isNdarray())
        use.buffer = args[i].ndarrayValue().component(component);
      use.name = "%" + g->ndarray->name();
    }
    if (component != Component::Primal)
      use.name += fmt::format(".{}", toString(component));
    if (use.buffer && std::none_of(out.begin(), out.end(),
                                   [&](const TapeUse &u) { return u.buffer == use.buffer; }))
      out.push_back(std::move(use));
  }
  return out;
}

absl::Status VersionLog::beforeLaunch(const TapeRecord &writer,
                                      const std::vector<TapeRecord> &records, bool allowCopies) {
  // Everything is checked before anything is copied.
  for (const TapeUse &w : writer.writes) {
    auto it = liveReaders_.find(w.buffer);
    if (it == liveReaders_.end() || it->second.empty())
      continue;
    const TapeRecord &reader = records[it->second.back()];
    std::string readerName = reader.nameOf(w.buffer);
    std::string what =
        fmt::format("{} writes {}, which the gradient of {} reads as that launch left it{}",
                    writer.label(), w.name, reader.label(),
                    readerName == w.name ? std::string() : fmt::format(" (as {})", readerName));
    if (!allowCopies)
      return absl::FailedPreconditionError(fmt::format(
          "{}, and the tape keeps no copies (LaunchTapeOptions::snapshots is false); allow "
          "snapshots, or write the new values to another buffer",
          what));
    if (std::string why = hostAllocationProblem(w.buffer->sizeInBytes()); !why.empty())
      return absl::ResourceExhaustedError(
          fmt::format("{}, and the tape cannot copy it ({} bytes: {}); set "
                      "LaunchTapeOptions::checkpointBudget to recompute instead of copying",
                      what, w.buffer->sizeInBytes(), why));
  }
  for (const TapeUse &w : writer.writes) {
    auto it = liveReaders_.find(w.buffer);
    if (it == liveReaders_.end() || it->second.empty())
      continue;
    auto snapshot = std::make_shared<const Bytes>(copyOf(*w.buffer));
    snapshotBytes_ += snapshot->size();
    for (size_t reader : it->second)
      snapshots_[{reader, w.buffer}] = snapshot;
    it->second.clear();
  }
  return absl::OkStatus();
}

void VersionLog::afterLaunch(const TapeRecord &r) {
  for (const TapeUse &u : r.gradientReads)
    liveReaders_[u.buffer].push_back(r.index);
}

bool VersionLog::readsLive(const Buffer *b) const {
  auto it = liveReaders_.find(b);
  return it != liveReaders_.end() && !it->second.empty();
}

void VersionLog::restoreFor(const TapeRecord &r) {
  for (const TapeUse &u : r.gradientReads) {
    auto it = snapshots_.find({r.index, u.buffer});
    const Bytes *want = it == snapshots_.end() ? nullptr : it->second.get();
    auto held = holds_.find(u.buffer);
    const Bytes *has = held == holds_.end() ? nullptr : held->second;
    if (want == has)
      continue;
    if (!want) { // the live contents, saved when the first snapshot went in
      restore(*u.buffer, savedLive_.at(u.buffer));
      holds_.erase(held);
      continue;
    }
    if (!has && !savedLive_.count(u.buffer)) {
      savedLive_[u.buffer] = copyOf(*u.buffer);
      savedLiveBytes_ += u.buffer->sizeInBytes();
    }
    restore(*u.buffer, *want);
    holds_[u.buffer] = want;
  }
}

void VersionLog::finish() {
  for (const auto &[b, held] : holds_)
    restore(*b, savedLive_.at(b));
  holds_.clear();
  savedLive_.clear();
  savedLiveBytes_ = 0;
}

} // namespace qd::runtime_detail
