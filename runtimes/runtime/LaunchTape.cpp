//===- LaunchTape.cpp - Gradients through several launches ----------------===//
#include "qd/runtime/LaunchTape.h"

#include "AdjointFill.h"
#include "TapeVersions.h"

#include "qd/ir/Status.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace qd {

using namespace runtime_detail;

namespace {

/// A buffer the tape checks for changes from outside: its hash after the
/// last recorded launch that touched it.
struct Watched {
  uint64_t hash = 0;
  size_t launch = 0;
  std::string name;
};

/// The contents of buffers at one launch boundary.
struct Checkpoint {
  size_t start = 0;
  std::map<Buffer *, Bytes> state;
  uint64_t bytes = 0;
};

/// A companion buffer backward or jvp zeroes and seeds, with its name in
/// messages.
struct Companion {
  Buffer *buffer = nullptr;
  std::string name;
};

} // namespace

class LaunchTape::Impl {
public:
  Impl(Program &program, Backend &backend, LaunchTapeOptions options)
      : program_(program), backend_(backend), options_(std::move(options)) {}

  absl::Status launch(const TapeKernels &kernels, std::span<const LaunchArg> args);
  absl::Status backward(std::span<const TapeSeed> seeds, bool zeroAdjoints);
  absl::Status jvp(std::span<const TapeSeed> tangents);
  size_t size() const { return records_.size(); }
  const Module &module() const { return program_.module(); }
  void clear();
  TapeMemory memory() const;

private:
  /// kernelGlobals of `k`, walked at its first launch on this tape.
  const std::vector<KernelGlobal> &globalsOf(const Kernel &k) const {
    auto it = globals_.find(&k);
    if (it == globals_.end())
      it = globals_.emplace(&k, kernelGlobals(k)).first;
    return it->second;
  }
  bool checkpointing() const { return options_.checkpointBudget > 0; }
  bool keepsInitial() const { return checkpointing() || options_.keepInitialState; }
  uint64_t heldBytes() const { return log_.snapshotBytes() + initialBytes_ + checkpointBytes_; }
  void notePeak(uint64_t transient = 0) {
    peakBytes_ = std::max(peakBytes_, heldBytes() + transient);
  }
  absl::Status usable(std::string_view what) const;
  absl::StatusOr<TapeRecord> makeRecord(const TapeKernels &kernels,
                                        std::span<const LaunchArg> args) const;
  absl::Status checkArgs(const TapeRecord &r, const Kernel *k) const;
  /// Whether the tape needs the contents of `b` as they are now later on.
  bool needs(const Buffer *b) const { return keepsInitial() || log_.readsLive(b); }
  absl::Status verify(const Buffer *b, std::string_view when) const;
  void watch(const TapeRecord &r);
  absl::Status keepInitialContents(const TapeRecord &r);
  absl::Status takeCheckpoint(const TapeRecord &r);
  bool fits(uint64_t more) const { return heldBytes() + more <= options_.checkpointBudget; }
  /// Keeps every other checkpoint (k doubles).
  void halveCheckpoints();
  void restoreState(size_t start);
  absl::Status runForward(const TapeRecord &r, const Kernel &k, std::string_view role);
  absl::Status backwardCheckpointed();
  absl::Status backwardSegment(size_t begin, size_t end);
  absl::StatusOr<std::vector<Companion>> companions(Component c) const;
  absl::Status seed(std::span<const TapeSeed> seeds, Component c, bool zero);

  Program &program_;
  Backend &backend_;
  LaunchTapeOptions options_;
  std::vector<TapeRecord> records_;
  /// globalsOf's: a kernel's globals, found once (kernels do not change
  /// while a tape records them).
  mutable std::map<const Kernel *, std::vector<KernelGlobal>> globals_;
  /// Why the tape refuses everything (a launch that failed), until clear().
  absl::Status broken_;
  VersionLog log_;
  std::map<const Buffer *, Watched> watched_;
  /// Every buffer the tape writes, with the launch that wrote it first and,
  /// where kept (keepsInitial), its contents before that launch.
  std::map<Buffer *, size_t> firstWrite_;
  std::map<Buffer *, Bytes> initial_;
  std::vector<Checkpoint> checkpoints_;
  int64_t interval_ = 1;
  uint64_t initialBytes_ = 0, checkpointBytes_ = 0, peakBytes_ = 0;
};

absl::Status LaunchTape::Impl::usable(std::string_view what) const {
  if (!broken_.ok())
    return absl::FailedPreconditionError(fmt::format(
        "the launch tape cannot {}: {} failed ({}); clear() the tape and record "
        "again",
        what, records_.empty() ? "a launch" : "a recorded launch", std::string(broken_.message())));
  if (checkpointing() && !options_.snapshots)
    return absl::InvalidArgumentError(
        "LaunchTapeOptions: checkpointBudget needs snapshots (the tape recomputes each segment "
        "with snapshots); set snapshots to true");
  return absl::OkStatus();
}

/// The arguments of a gradient or tangent kernel, companions included.
absl::Status LaunchTape::Impl::checkArgs(const TapeRecord &r, const Kernel *k) const {
  if (!k)
    return absl::OkStatus();
  if (absl::Status s = validateLaunchArgs(*k, r.args); !s.ok())
    return absl::InvalidArgumentError(fmt::format("{}: {}", r.label(), std::string(s.message())));
  return absl::OkStatus();
}

absl::StatusOr<TapeRecord> LaunchTape::Impl::makeRecord(const TapeKernels &kernels,
                                                        std::span<const LaunchArg> args) const {
  TapeRecord r;
  r.index = records_.size();
  r.kernels = kernels;
  r.ndarrays.reserve(args.size());
  for (const LaunchArg &a : args)
    if (a.isNdarray())
      r.ndarrays.push_back(a.ndarrayValue());
  size_t next = 0;
  for (const LaunchArg &a : args)
    r.args.push_back(a.isNdarray() ? LaunchArg::ndarray(&r.ndarrays[next++]) : a);
  if (absl::Status s = validateLaunchArgs(*kernels.forward, r.args); !s.ok())
    return absl::InvalidArgumentError(fmt::format("{}: {}", r.label(), std::string(s.message())));
  for (const Kernel *k : {kernels.gradient, kernels.dual})
    if (k && k->module() != &program_.module())
      return absl::InvalidArgumentError(
          fmt::format("{}: kernel @{} is not of the program's module", r.label(), k->name()));
  for (const Kernel *k : {kernels.gradient, kernels.dual})
    if (absl::Status s = checkArgs(r, k); !s.ok())
      return s;
  const Kernel &fwd = *kernels.forward;
  r.writes = kernelUses(globalsOf(fwd), program_, r.args, Component::Primal, false, true);
  r.touched = kernelUses(globalsOf(fwd), program_, r.args, Component::Primal, true, true);
  if (kernels.gradient)
    r.gradientReads =
        kernelUses(globalsOf(*kernels.gradient), program_, r.args, Component::Primal, true, false);
  return r;
}

absl::Status LaunchTape::Impl::verify(const Buffer *b, std::string_view when) const {
  auto it = watched_.find(b);
  if (!options_.checkUnchanged || it == watched_.end() || contentHash(*b) == it->second.hash)
    return absl::OkStatus();
  const TapeRecord &r = records_[it->second.launch];
  return absl::FailedPreconditionError(fmt::format(
      "{} changed outside the tape after {}, {}: the tape needs it as that launch left it (a "
      "gradient reads it, or a recomputed launch does); write it in a recorded launch, put its "
      "contents back, or clear() the tape and record again",
      it->second.name, r.label(), when));
}

void LaunchTape::Impl::watch(const TapeRecord &r) {
  if (!options_.checkUnchanged)
    return;
  for (const std::vector<TapeUse> *list : {&r.touched, &r.gradientReads})
    for (const TapeUse &u : *list) {
      if (needs(u.buffer))
        watched_[u.buffer] = Watched{contentHash(*u.buffer), r.index, u.name};
      else
        watched_.erase(u.buffer);
    }
}

absl::Status LaunchTape::Impl::keepInitialContents(const TapeRecord &r) {
  uint64_t more = 0;
  for (const TapeUse &w : r.writes)
    if (!firstWrite_.count(w.buffer) && keepsInitial())
      more += w.buffer->sizeInBytes();
  if (checkpointing() && initialBytes_ + more > options_.checkpointBudget)
    return absl::ResourceExhaustedError(fmt::format(
        "{}: the contents of the buffers the tape writes, kept from before their first write, "
        "take {} bytes, more than the checkpoint budget of {} bytes; raise "
        "LaunchTapeOptions::checkpointBudget",
        r.label(), initialBytes_ + more, options_.checkpointBudget));
  if (std::string why = hostAllocationProblem(more); !why.empty())
    return absl::ResourceExhaustedError(fmt::format(
        "{}: the tape cannot keep the contents its writes overwrite: {}", r.label(), why));
  for (const TapeUse &w : r.writes) {
    if (!firstWrite_.emplace(w.buffer, r.index).second || !keepsInitial())
      continue;
    initial_[w.buffer] = copyOf(*w.buffer);
    initialBytes_ += w.buffer->sizeInBytes();
  }
  while (checkpointing() && !fits(0) && !checkpoints_.empty())
    halveCheckpoints();
  return absl::OkStatus();
}

void LaunchTape::Impl::halveCheckpoints() {
  interval_ *= 2;
  std::erase_if(checkpoints_, [&](const Checkpoint &c) {
    bool drop = int64_t(c.start) % interval_ != 0;
    checkpointBytes_ -= drop ? c.bytes : 0;
    return drop;
  });
}

absl::Status LaunchTape::Impl::takeCheckpoint(const TapeRecord &r) {
  if (!checkpointing() || r.index == 0)
    return absl::OkStatus();
  uint64_t bytes = 0;
  for (const auto &[b, first] : firstWrite_)
    bytes += b->sizeInBytes();
  // Fewer checkpoints until this one fits.
  while (int64_t(r.index) % interval_ == 0 && !fits(bytes))
    halveCheckpoints();
  if (int64_t(r.index) % interval_ != 0)
    return absl::OkStatus();
  if (std::string why = hostAllocationProblem(bytes); !why.empty())
    return absl::ResourceExhaustedError(
        fmt::format("{}: the tape cannot keep a checkpoint: {}", r.label(), why));
  Checkpoint c{r.index, {}, bytes};
  for (const auto &[b, first] : firstWrite_)
    c.state[b] = copyOf(*b);
  checkpointBytes_ += bytes;
  checkpoints_.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status LaunchTape::Impl::launch(const TapeKernels &kernels, std::span<const LaunchArg> args) {
  if (absl::Status s = usable("record a launch"); !s.ok())
    return s;
  if (!kernels.forward || kernels.forward->module() != &program_.module())
    return absl::InvalidArgumentError(
        fmt::format("launch {}: the forward kernel is {}", records_.size(),
                    kernels.forward ? "not of the program's module" : "missing"));
  absl::StatusOr<TapeRecord> made = makeRecord(kernels, args);
  if (!made.ok())
    return made.status();
  TapeRecord &r = *made;
  for (const std::vector<TapeUse> *list : {&r.touched, &r.gradientReads})
    for (const TapeUse &u : *list)
      if (absl::Status s = verify(u.buffer, "before " + r.label()); !s.ok())
        return s;
  if (!checkpointing())
    if (absl::Status s = log_.beforeLaunch(r, records_, options_.snapshots); !s.ok())
      return s;
  if (absl::Status s = takeCheckpoint(r); !s.ok())
    return s;
  if (absl::Status s = keepInitialContents(r); !s.ok())
    return s;
  notePeak();
  absl::Status s = program_.launch(kernels.forward->name(), r.args, backend_, options_.launch);
  records_.push_back(std::move(r));
  if (!s.ok()) {
    broken_ = s;
    return reworded(s, fmt::format("{}: {}", records_.back().label(), std::string(s.message())));
  }
  if (!checkpointing())
    log_.afterLaunch(records_.back());
  watch(records_.back());
  return absl::OkStatus();
}

absl::Status LaunchTape::Impl::runForward(const TapeRecord &r, const Kernel &k,
                                          std::string_view role) {
  absl::Status s = program_.launch(k.name(), r.args, backend_, options_.launch);
  if (s.ok())
    return s;
  return reworded(s, fmt::format("{} of {}: {}", role, r.label(), std::string(s.message())));
}

absl::StatusOr<std::vector<Companion>> LaunchTape::Impl::companions(Component c) const {
  std::vector<Companion> out;
  for (const TapeRecord &r : records_) {
    const Kernel *k = c == Component::Grad ? r.kernels.gradient : r.kernels.dual;
    if (!k)
      return absl::InvalidArgumentError(fmt::format(
          "{} has no {} kernel (@{}_{}); build it (buildGradientKernel, buildDualKernel) before "
          "recording, or give it in TapeKernels",
          r.label(), c == Component::Grad ? "gradient" : "tangent", r.kernels.forward->name(),
          toString(c)));
    for (TapeUse &u : kernelUses(globalsOf(*k), program_, r.args, c, true, true))
      if (std::none_of(out.begin(), out.end(),
                       [&](const Companion &o) { return o.buffer == u.buffer; }))
        out.push_back({u.buffer, u.name.front() == '@'
                                     ? u.name
                                     : fmt::format("{} of {}", u.name, r.label())});
  }
  return out;
}

absl::Status LaunchTape::Impl::seed(std::span<const TapeSeed> seeds, Component c, bool zero) {
  absl::StatusOr<std::vector<Companion>> all = companions(c);
  if (!all.ok())
    return all.status();
  std::vector<std::pair<Buffer *, const TapeSeed *>> values;
  for (const TapeSeed &s : seeds) {
    const Buffer *b = s.buffer;
    std::string name = s.buffer ? "the given buffer" : fmt::format("@{}.{}", s.field, toString(c));
    if (!b)
      b = program_.field(s.field, c);
    auto it = std::find_if(all->begin(), all->end(),
                           [&](const Companion &o) { return b && o.buffer == b; });
    if (it == all->end()) {
      std::string list;
      for (const Companion &o : *all)
        list += (list.empty() ? "" : ", ") + o.name;
      return absl::InvalidArgumentError(fmt::format(
          "the seed for {} names no {} companion the recorded {} kernels use (they use: {})", name,
          toString(c), c == Component::Grad ? "gradient" : "tangent",
          list.empty() ? "none" : list));
    }
    if (std::any_of(values.begin(), values.end(), [&](const auto &v) { return v.first == b; }))
      return absl::InvalidArgumentError(fmt::format("the seed for {} is given twice", it->name));
    if (!s.values.empty() && int64_t(s.values.size()) != b->numElements())
      return absl::InvalidArgumentError(fmt::format("the seed for {} has {} values for {} elements",
                                                    it->name, s.values.size(), b->numElements()));
    values.emplace_back(it->buffer, &s);
  }
  if (zero)
    for (const Companion &o : *all)
      fillWith(*o.buffer, 0.0);
  for (auto &[b, s] : values) {
    if (s->values.empty())
      fillWith(*b, s->value);
    for (size_t i = 0; i < s->values.size(); ++i)
      b->set(int64_t(i), isFloat(b->elementType())
                             ? Scalar::ofFloat(b->elementType(), s->values[i])
                             : Scalar::ofInt(b->elementType(), int64_t(s->values[i])));
  }
  return absl::OkStatus();
}

absl::Status LaunchTape::Impl::backward(std::span<const TapeSeed> seeds, bool zeroAdjoints) {
  if (absl::Status s = usable("run backward"); !s.ok())
    return s;
  for (const auto &[b, w] : watched_)
    if (absl::Status s = verify(b, "before backward"); !s.ok())
      return s;
  if (absl::Status s = seed(seeds, Component::Grad, zeroAdjoints); !s.ok())
    return s;
  if (checkpointing())
    return backwardCheckpointed();
  absl::Status status;
  for (size_t i = records_.size(); i-- > 0 && status.ok();) {
    log_.restoreFor(records_[i]);
    notePeak(log_.savedLiveBytes());
    status = runForward(records_[i], *records_[i].kernels.gradient, "the gradient");
  }
  log_.finish();
  return status;
}

void LaunchTape::Impl::restoreState(size_t start) {
  const Checkpoint *c = nullptr;
  for (const Checkpoint &k : checkpoints_)
    if (k.start == start)
      c = &k;
  for (const auto &[b, first] : firstWrite_)
    restore(*b, first >= start ? initial_.at(b) : c->state.at(b));
}

absl::Status LaunchTape::Impl::backwardSegment(size_t begin, size_t end) {
  restoreState(begin);
  VersionLog log;
  absl::Status status;
  for (size_t j = begin; j < end && status.ok(); ++j) {
    status = log.beforeLaunch(records_[j], records_, true);
    if (status.ok())
      status = runForward(records_[j], *records_[j].kernels.forward, "the recomputation");
    log.afterLaunch(records_[j]);
  }
  for (size_t i = end; i-- > begin && status.ok();) {
    log.restoreFor(records_[i]);
    notePeak(log.snapshotBytes() + log.savedLiveBytes());
    status = runForward(records_[i], *records_[i].kernels.gradient, "the gradient");
  }
  return status;
}

absl::Status LaunchTape::Impl::backwardCheckpointed() {
  std::vector<size_t> starts{0};
  for (const Checkpoint &c : checkpoints_)
    starts.push_back(c.start);
  size_t n = records_.size();
  absl::Status status;
  for (size_t k = starts.size(); k-- > 0 && status.ok();)
    status = backwardSegment(starts[k], k + 1 < starts.size() ? starts[k + 1] : n);
  // The last segment again, forward only: the state the forward left.
  restoreState(starts.back());
  absl::Status again;
  for (size_t j = starts.back(); j < n && again.ok(); ++j)
    again = runForward(records_[j], *records_[j].kernels.forward, "the recomputation");
  return status.ok() ? again : status;
}

absl::Status LaunchTape::Impl::jvp(std::span<const TapeSeed> tangents) {
  if (absl::Status s = usable("run jvp"); !s.ok())
    return s;
  if (!keepsInitial())
    return absl::FailedPreconditionError(
        "jvp replays the recorded launches from the state the tape started from, which this "
        "tape did not keep; set LaunchTapeOptions::keepInitialState (or checkpointBudget) "
        "before recording");
  for (const auto &[b, w] : watched_)
    if (absl::Status s = verify(b, "before jvp"); !s.ok())
      return s;
  if (absl::Status s = seed(tangents, Component::Dual, true); !s.ok())
    return s;
  std::map<Buffer *, Bytes> final;
  uint64_t finalBytes = 0;
  for (const auto &[b, first] : firstWrite_) {
    final[b] = copyOf(*b);
    finalBytes += b->sizeInBytes();
    restore(*b, initial_.at(b));
  }
  notePeak(finalBytes);
  absl::Status status;
  for (size_t j = 0; j < records_.size() && status.ok(); ++j)
    status = runForward(records_[j], *records_[j].kernels.dual, "the tangent kernel");
  for (auto &[b, bytes] : final)
    restore(*b, bytes);
  return status;
}

void LaunchTape::Impl::clear() {
  records_.clear();
  broken_ = absl::OkStatus();
  log_ = VersionLog();
  watched_.clear();
  firstWrite_.clear();
  initial_.clear();
  checkpoints_.clear();
  interval_ = 1;
  initialBytes_ = checkpointBytes_ = peakBytes_ = 0;
}

TapeMemory LaunchTape::Impl::memory() const {
  TapeMemory m;
  m.heldBytes = heldBytes();
  m.peakBytes = std::max(peakBytes_, m.heldBytes);
  m.checkpointInterval = checkpointing() ? interval_ : 0;
  m.checkpoints = checkpointing() ? int64_t(checkpoints_.size()) + 1 : 0;
  m.adStackHeap = backend_.lastAdStackHeapUsage();
  return m;
}

LaunchTape::LaunchTape(Program &program, Backend &backend, LaunchTapeOptions options)
    : impl_(std::make_unique<Impl>(program, backend, std::move(options))) {}
LaunchTape::~LaunchTape() = default;

absl::Status LaunchTape::launch(std::string_view kernel, std::span<const LaunchArg> args) {
  const Module &m = impl_->module();
  TapeKernels k;
  k.forward = m.findKernel(kernel);
  if (!k.forward)
    return absl::NotFoundError(
        fmt::format("launch {}: the module has no kernel @{}", size(), kernel));
  k.gradient = m.findKernel(fmt::format("{}_grad", kernel));
  k.dual = m.findKernel(fmt::format("{}_dual", kernel));
  return impl_->launch(k, args);
}

absl::Status LaunchTape::launch(const TapeKernels &kernels, std::span<const LaunchArg> args) {
  return impl_->launch(kernels, args);
}
absl::Status LaunchTape::backward(std::span<const TapeSeed> seeds, bool zeroAdjoints) {
  return impl_->backward(seeds, zeroAdjoints);
}
absl::Status LaunchTape::jvp(std::span<const TapeSeed> tangents) {
  return impl_->jvp(tangents);
}
size_t LaunchTape::size() const {
  return impl_->size();
}
void LaunchTape::clear() {
  impl_->clear();
}
TapeMemory LaunchTape::memory() const {
  return impl_->memory();
}

} // namespace qd
