//===- lib/capi/Tape.cpp - Launch tapes ------------------------------------===//
#include "Internal.h"

#include "qd/runtime/LaunchTape.h"

#include <fmt/format.h>

using namespace qd::capi;

struct qd_tape_s {
  /// Keeps the program (and its module) alive; the backend is the caller's.
  std::shared_ptr<qd::Program> program;
  std::unique_ptr<qd::LaunchTape> tape;
  /// The buffers of the recorded launches' ndarray arguments.
  std::vector<std::shared_ptr<qd::Buffer>> keep;
};

namespace {

/// The TapeSeeds of `seeds` (named `what` in errors); `keep` holds the
/// seeded buffers while the tape uses them.
absl::StatusOr<std::vector<qd::TapeSeed>>
tapeSeeds(const char *call, const char *what, size_t n, const qd_tape_seed *seeds,
          std::vector<std::shared_ptr<qd::Buffer>> &keep) {
  if (n > 0 && !seeds)
    return absl::InvalidArgumentError(fmt::format("{}: {} is NULL", call, what));
  std::vector<qd::TapeSeed> out;
  for (size_t i = 0; i < n; ++i) {
    const qd_tape_seed &s = seeds[i];
    if (!s.field == !s.buffer)
      return absl::InvalidArgumentError(
          fmt::format("{}: {}[{}] gives {}; give a field name or a buffer", call, what, i,
                      s.field ? "both a field and a buffer" : "neither a field nor a buffer"));
    if (s.nvalues > 0 && !s.values)
      return absl::InvalidArgumentError(
          fmt::format("{}: {}[{}].values is NULL with nvalues {}", call, what, i, s.nvalues));
    qd::TapeSeed seed;
    if (s.field)
      seed.field = s.field;
    if (s.buffer) {
      auto buffer = lookupBuffer(call, s.buffer);
      if (!buffer.ok())
        return buffer.status();
      keep.push_back(*buffer);
      seed.buffer = buffer->get();
    }
    seed.value = s.value;
    if (s.values)
      seed.values = {s.values, s.nvalues};
    out.push_back(seed);
  }
  return out;
}

/// Runs `body(tape)` for a non-NULL `tape`, under guard.
template <typename F> qd_status withTape(const char *call, qd_tape tape, F &&body) {
  return guard(call, [&]() -> qd_status {
    if (!tape)
      return nullArgument(call, "tape");
    return body(*tape);
  });
}

/// backward or jvp with `seeds`.
template <typename F>
qd_status runSeeded(const char *call, const char *what, qd_tape tape, size_t n,
                    const qd_tape_seed *seeds, F &&run) {
  return withTape(call, tape, [&](qd_tape_s &t) -> qd_status {
    std::vector<std::shared_ptr<qd::Buffer>> keep;
    auto converted = tapeSeeds(call, what, n, seeds, keep);
    if (!converted.ok())
      return toStatus(converted.status());
    return toStatus(run(*t.tape, std::span<const qd::TapeSeed>(*converted)));
  });
}

} // namespace

extern "C" {

qd_tape_options qd_tape_options_default(void) {
  return {.snapshots = 1,
          .checkpoint_budget = 0,
          .keep_initial_state = 0,
          .check_unchanged = 1,
          .launch_flags = 0};
}

qd_status qd_tape_create(qd_program program, qd_backend backend, const qd_tape_options *options,
                         qd_tape *out) {
  constexpr const char *call = "qd_tape_create";
  return guard(call, [&]() -> qd_status {
    if (!program || !backend || !out)
      return nullArgument(call, !program ? "program" : !backend ? "backend" : "out");
    qd_tape_options o = options ? *options : qd_tape_options_default();
    if (o.launch_flags & QD_LAUNCH_ASYNC)
      return error(QD_INVALID_ARGUMENT,
                   fmt::format("{}: options->launch_flags has QD_LAUNCH_ASYNC, but a tape "
                               "launches synchronously (it reads and copies buffers between "
                               "launches); leave the flag out",
                               call));
    qd::LaunchTapeOptions opts;
    opts.launch = launchOptions(o.launch_flags);
    opts.snapshots = o.snapshots != 0;
    opts.checkpointBudget = o.checkpoint_budget;
    opts.keepInitialState = o.keep_initial_state != 0;
    opts.checkUnchanged = o.check_unchanged != 0;
    auto tape = std::make_unique<qd::LaunchTape>(*program->program, *backend->backend, opts);
    *out = new qd_tape_s{program->program, std::move(tape), {}};
    return nullptr;
  });
}

void qd_tape_free(qd_tape tape) {
  delete tape;
}

qd_status qd_tape_launch(qd_tape tape, const char *kernel, size_t nargs, const qd_arg *args) {
  constexpr const char *call = "qd_tape_launch";
  return withTape(call, tape, [&](qd_tape_s &t) -> qd_status {
    auto k = moduleKernel(call, t.program->module(), kernel);
    if (!k.ok())
      return toStatus(k.status());
    auto launch = orderedLaunchArgs(call, **k, nargs, args);
    if (!launch.ok())
      return toStatus(launch.status());
    t.keep.insert(t.keep.end(), launch->keep.begin(), launch->keep.end());
    return toStatus(t.tape->launch(kernel, launch->ordered));
  });
}

qd_status qd_tape_backward(qd_tape tape, size_t nseeds, const qd_tape_seed *seeds,
                           int zero_adjoints) {
  return runSeeded("qd_tape_backward", "seeds", tape, nseeds, seeds,
                   [&](qd::LaunchTape &t, std::span<const qd::TapeSeed> s) {
                     return t.backward(s, zero_adjoints != 0);
                   });
}

qd_status qd_tape_jvp(qd_tape tape, size_t ntangents, const qd_tape_seed *tangents) {
  return runSeeded("qd_tape_jvp", "tangents", tape, ntangents, tangents,
                   [](qd::LaunchTape &t, std::span<const qd::TapeSeed> s) { return t.jvp(s); });
}

qd_status qd_tape_memory_report(qd_tape tape, qd_tape_memory *out) {
  constexpr const char *call = "qd_tape_memory_report";
  return withTape(call, tape, [&](qd_tape_s &t) -> qd_status {
    if (!out)
      return nullArgument(call, "out");
    qd::TapeMemory m = t.tape->memory();
    *out = {m.heldBytes, m.peakBytes, m.checkpointInterval, m.checkpoints};
    return nullptr;
  });
}

qd_status qd_tape_adstack_heap(qd_tape tape, int64_t *bytes, int64_t *threads) {
  constexpr const char *call = "qd_tape_adstack_heap";
  return withTape(call, tape, [&](qd_tape_s &t) -> qd_status {
    std::optional<qd::AdStackHeapUsage> heap = t.tape->memory().adStackHeap;
    if (bytes)
      *bytes = heap ? heap->bytes : -1;
    if (threads)
      *threads = heap ? heap->threads : -1;
    return nullptr;
  });
}

qd_status qd_tape_size(qd_tape tape, size_t *out) {
  constexpr const char *call = "qd_tape_size";
  return withTape(call, tape, [&](qd_tape_s &t) -> qd_status {
    if (!out)
      return nullArgument(call, "out");
    *out = t.tape->size();
    return nullptr;
  });
}

qd_status qd_tape_clear(qd_tape tape) {
  return withTape("qd_tape_clear", tape, [](qd_tape_s &t) -> qd_status {
    t.tape->clear();
    t.keep.clear();
    return nullptr;
  });
}

} // extern "C"
