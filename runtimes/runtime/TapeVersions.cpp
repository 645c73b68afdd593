//===- TapeVersions.cpp - What a launch tape keeps of each launch ---------===//
#include "TapeVersions.h"

#include "qd/ir/Casting.h"
#include "qd/ir/Stmt.h"
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

namespace {

/// Widens `f` by the first index of `g`.
void widen(KernelGlobal::FirstIndex &f, const GlobalAccessStmt &g) {
  int argument = -1;
  int64_t offset = 0;
  bool known = true;
  if (g.numIndices() > 0) {
    const Value *i = g.index(0);
    auto *b = dyn_cast<BinaryStmt>(i);
    auto *c = b ? dyn_cast<ConstStmt>(b->rhs()) : nullptr;
    if (auto *k = dyn_cast<ConstStmt>(i)) {
      offset = k->intValue();
    } else if (auto *a = dyn_cast<Argument>(i); a && a->type().isIntegerScalar()) {
      argument = int(a->index());
    } else if (b && c && isa<Argument>(b->lhs()) && b->lhs()->type().isIntegerScalar() &&
               (b->op() == BinaryOp::Add || b->op() == BinaryOp::Sub)) {
      argument = int(cast<Argument>(b->lhs())->index());
      offset = b->op() == BinaryOp::Add ? c->intValue() : -c->intValue();
    } else {
      known = false;
    }
  }
  if (!known || (f.seen && f.argument != argument)) {
    f.known = false;
  } else if (!f.seen) {
    f.argument = argument;
    f.lo = f.hi = offset;
  } else {
    f.lo = std::min(f.lo, offset);
    f.hi = std::max(f.hi, offset);
  }
  f.seen = true;
}

/// The range `f` gives with `args` into `use` (widened where `use`
/// already has one).
void rangeOf(const KernelGlobal::FirstIndex &f, std::span<const LaunchArg> args, TapeUse &use) {
  int64_t base = 0;
  bool known = f.known && f.seen;
  if (known && f.argument >= 0) {
    known = size_t(f.argument) < args.size() && !args[f.argument].isNdarray() &&
            isInteger(args[f.argument].scalarValue().type);
    if (known)
      base = args[f.argument].scalarValue().i;
  }
  if (!known) {
    use.lo = INT64_MIN;
    use.hi = INT64_MAX;
    return;
  }
  use.lo = base + f.lo;
  use.hi = base + f.hi;
}

} // namespace

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
    if (it == out.end()) {
      KernelGlobal k;
      k.field = field;
      k.ndarray = ndarray;
      k.component = g->component();
      it = out.insert(out.end(), k);
    }
    size_t at = position++;
    if (isa<GlobalLoadStmt>(g) || isa<AtomicRmwStmt>(g)) {
      it->firstRead = std::min(it->firstRead, at);
      widen(it->readIndex, *g);
    }
    if (!isa<GlobalLoadStmt>(g)) {
      it->firstWrite = std::min(it->firstWrite, at);
      widen(it->writeIndex, *g);
    }
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
    if (!use.buffer)
      continue;
    // The first index's range: of the reads, of the writes, or of both.
    TapeUse range;
    if (reads && g->firstRead != SIZE_MAX)
      rangeOf(g->readIndex, args, range);
    if (writes && g->firstWrite != SIZE_MAX) {
      TapeUse w;
      rangeOf(g->writeIndex, args, w);
      bool first = !(reads && g->firstRead != SIZE_MAX);
      range.lo = first ? w.lo : std::min(range.lo, w.lo);
      range.hi = first ? w.hi : std::max(range.hi, w.hi);
    }
    use.lo = range.lo;
    use.hi = range.hi;
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const TapeUse &u) { return u.buffer == use.buffer; });
    if (same == out.end()) {
      out.push_back(std::move(use));
    } else { // two arguments over one buffer: both ranges
      same->lo = std::min(same->lo, use.lo);
      same->hi = std::max(same->hi, use.hi);
    }
  }
  return out;
}

absl::Status VersionLog::beforeLaunch(const TapeRecord &writer,
                                      const std::vector<TapeRecord> &records, bool allowCopies) {
  // A reader whose gradient reads other slices of the buffer than the
  // writer writes (the first index's ranges apart) keeps the live
  // contents.
  auto overlapping = [&](const TapeUse &w) {
    std::vector<size_t> out;
    auto it = liveReaders_.find(w.buffer);
    if (it == liveReaders_.end())
      return out;
    for (size_t reader : it->second) {
      bool meets = true;
      for (const TapeUse &u : records[reader].gradientReads)
        if (u.buffer == w.buffer)
          meets = u.overlaps(w);
      if (meets)
        out.push_back(reader);
    }
    return out;
  };
  // Everything is checked before anything is copied.
  std::vector<std::vector<size_t>> readersOf;
  for (const TapeUse &w : writer.writes) {
    const std::vector<size_t> &readers = readersOf.emplace_back(overlapping(w));
    if (readers.empty())
      continue;
    const TapeRecord &reader = records[readers.back()];
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
  for (size_t k = 0; k < writer.writes.size(); ++k) {
    const TapeUse &w = writer.writes[k];
    const std::vector<size_t> &readers = readersOf[k];
    if (readers.empty())
      continue;
    auto snapshot = std::make_shared<const Bytes>(copyOf(*w.buffer));
    snapshotBytes_ += snapshot->size();
    for (size_t reader : readers)
      snapshots_[{reader, w.buffer}] = snapshot;
    std::erase_if(liveReaders_[w.buffer], [&](size_t reader) {
      return std::find(readers.begin(), readers.end(), reader) != readers.end();
    });
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
