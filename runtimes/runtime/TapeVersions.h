//===- TapeVersions.h - What a launch tape keeps of each launch -*- C++ -*-===//
//
// Private to qd::runtime (LaunchTape.cpp): the recorded launches, the
// buffers each one touches, and the versions of those buffers each
// gradient reads (snapshots taken before a later launch overwrites them).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/LaunchTape.h"

#include <absl/status/status.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace qd::runtime_detail {

using Bytes = std::vector<std::byte>;

/// A cheap content hash (not cryptographic): tells whether a buffer changed.
uint64_t contentHash(const Buffer &b);
/// The host contents of `b`, and putting them back.
Bytes copyOf(const Buffer &b);
void restore(Buffer &b, const Bytes &bytes);

/// A primal buffer a recorded launch touches, with its name there (`@x`,
/// `%a`).
struct TapeUse {
  Buffer *buffer = nullptr;
  std::string name;
  /// The values its first index takes in the accesses (every element when
  /// unknown): a launch that writes slice t + 1 of a buffer leaves alone
  /// what a gradient reading slice t reads.
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  bool overlaps(const TapeUse &o) const { return !(hi < o.lo || o.hi < lo); }
};

/// One recorded launch. Moved, never copied: `args` point into
/// `ndarrays`.
struct TapeRecord {
  TapeRecord() = default;
  TapeRecord(TapeRecord &&) noexcept = default;
  TapeRecord &operator=(TapeRecord &&) noexcept = default;
  TapeRecord(const TapeRecord &) = delete;
  TapeRecord &operator=(const TapeRecord &) = delete;

  size_t index = 0;
  TapeKernels kernels;
  /// The ndarray arguments, copied (`args` points into them).
  std::vector<NdarrayArg> ndarrays;
  std::vector<LaunchArg> args;
  /// Primal buffers its gradient reads (the forward's values it replays).
  std::vector<TapeUse> gradientReads;
  /// Primal buffers the forward kernel writes, and those it reads or
  /// writes.
  std::vector<TapeUse> writes, touched;

  /// "launch 3 (@step)".
  std::string label() const;
  /// The name `b` has in this launch, or "".
  std::string nameOf(const Buffer *b) const;
};

/// A field or ndarray component a kernel accesses, and where in program
/// order it first reads it (loads, atomics) and first writes it (stores,
/// atomics); SIZE_MAX for never.
struct KernelGlobal {
  const Field *field = nullptr;
  const Argument *ndarray = nullptr;
  Component component = Component::Primal;
  size_t firstRead = SIZE_MAX, firstWrite = SIZE_MAX;
  /// The first index of its reads and of its writes, over all of them:
  /// scalar argument `argument` (-1: none) plus lo..hi, when every access
  /// has that form (a constant, an argument, an argument plus or minus a
  /// constant).
  struct FirstIndex {
    bool seen = false, known = true;
    int argument = -1;
    int64_t lo = 0, hi = 0;
  };
  FirstIndex readIndex, writeIndex;
};
/// Every global `kernel` accesses, one walk of it: what its launches use
/// does not change from launch to launch (kernelUses maps it to buffers).
std::vector<KernelGlobal> kernelGlobals(const Kernel &kernel);

/// The uses of `component` buffers by a kernel whose globals are `globals`
/// (a launch of it with `args`): its reads, writes or both, each buffer
/// once, in program order of their first such access. Ndarrays without
/// that companion are left out.
std::vector<TapeUse> kernelUses(std::span<const KernelGlobal> globals, Program &program,
                                std::span<const LaunchArg> args, Component component, bool reads,
                                bool writes);

/// The versions of buffers the recorded gradients read: a buffer's live
/// contents, or a snapshot taken when a later launch was about to
/// overwrite it.
class VersionLog {
public:
  /// Before `writer` runs: snapshots each buffer it writes whose live
  /// contents a recorded gradient reads. With `allowCopies` false, or
  /// where a copy cannot be allocated, refuses instead, naming both
  /// launches and the buffer; nothing is copied then.
  absl::Status beforeLaunch(const TapeRecord &writer, const std::vector<TapeRecord> &records,
                            bool allowCopies);
  /// After `r` ran: its gradient reads the live contents of its reads.
  void afterLaunch(const TapeRecord &r);
  /// Whether a recorded gradient reads the live contents of `b`.
  bool readsLive(const Buffer *b) const;
  /// Puts into every buffer `r`'s gradient reads the version `r` left,
  /// saving live contents first (finish() puts them back).
  void restoreFor(const TapeRecord &r);
  /// Puts the live contents back into every buffer restoreFor changed.
  void finish();
  /// Bytes of the snapshots, and of the live contents saved while a
  /// snapshot is restored.
  uint64_t snapshotBytes() const { return snapshotBytes_; }
  uint64_t savedLiveBytes() const { return savedLiveBytes_; }

private:
  using Snapshot = std::shared_ptr<const Bytes>;
  /// Per buffer, the launches whose gradient reads its live contents.
  std::map<const Buffer *, std::vector<size_t>> liveReaders_;
  /// Per (launch, buffer), the snapshot its gradient reads.
  std::map<std::pair<size_t, const Buffer *>, Snapshot> snapshots_;
  /// Live contents saved while a buffer holds a snapshot, and which.
  std::map<Buffer *, Bytes> savedLive_;
  std::map<Buffer *, const Bytes *> holds_;
  uint64_t snapshotBytes_ = 0, savedLiveBytes_ = 0;
};

} // namespace qd::runtime_detail
