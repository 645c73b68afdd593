//===- AdStackCompaction.cpp - The compacted heap of an accelerator launch ===//
//
// AcceleratorBackend's compacted adstack heap (docs/runtime.md, "Compacted
// heap"): the table kernel's runs, halving the grid until the heap fits,
// and the per-iteration capacities an optimistic launch checks its pushes
// against.
//
//===----------------------------------------------------------------------===//
#include "AcceleratorState.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <numeric>

namespace qd {

namespace {

/// A compacted launch takes the largest group whose heap is within this
/// factor of the fewest bytes any group size takes.
constexpr double kGroupSlack = 1.05;

/// Per-iteration needs of at least this many bytes are zeroed on the
/// device after the table kernel read them (one small dispatch); fewer
/// cost less to fill on the host and upload with the next counting kernel.
constexpr int64_t kZeroOnDeviceBytes = int64_t(1) << 20;

/// Whether a sum of own needs moved by more than the slack from `before`
/// (a remembered layout no longer applies).
bool moved(int64_t now, int64_t before) {
  return std::abs(double(now) - double(before)) > (kGroupSlack - 1) * double(before);
}

/// `b` as a buffer of `n` elements of `type` (exactly, or at least), kept
/// where it is one already.
absl::Status sizedBuffer(std::optional<Buffer> &b, int64_t n, bool exact,
                         ScalarType type = ScalarType::I64) {
  if (b && (exact ? b->numElements() == n : b->numElements() >= n))
    return absl::OkStatus();
  absl::StatusOr<Buffer> made = Buffer::create(type, {n});
  if (!made.ok())
    return made.status();
  b = *std::move(made);
  return absl::OkStatus();
}

/// Writes `values` to `b` where they differ (a device copy is uploaded
/// again only when something changed).
void writeValues(Buffer &b, std::span<const int64_t> values) {
  for (size_t i = 0; i < values.size(); ++i)
    if (b.get(int64_t(i)).i != values[i])
      b.set(int64_t(i), Scalar::ofInt(ScalarType::I64, values[i]));
}

} // namespace

absl::Status AcceleratorBackend::State::runOwnKernel(Program &program, const LaunchPlan &plan,
                                                     const Kernel &kernel,
                                                     std::span<const LaunchArg> args) {
  absl::StatusOr<Variant *> code = variant(kernel, false, false, {}, nullptr);
  if (!code.ok())
    return code.status();
  absl::Status s = launchLocked(program, kernel, args, LaunchOptions(), **code);
  if (!s.ok())
    return absl::Status(s.code(),
                        fmt::format("kernel @{}: laying out its compacted adstack heap: {}",
                                    plan.kernel().name(), std::string(s.message())));
  return s;
}

absl::Status AcceleratorBackend::State::runGroupTable(Program &program, const LaunchPlan &plan,
                                                      const accel::GroupTableShape &shape,
                                                      const LaunchOptions &options, int64_t threads,
                                                      int64_t lanes, int64_t base) {
  absl::StatusOr<const Kernel *> kernel = accel::groupTableKernel(shape.rows);
  if (!kernel.ok())
    return kernel.status();
  const MeasuredAdStackNeeds &needs = *options.measuredNeeds;
  const int64_t groups = (threads + lanes - 1) / lanes;
  const int64_t elements = accel::groupTableElements(groups, shape.stacks, lanes);
  const int64_t block = accel::groupTableBlock(groups);
  const int64_t words = accel::groupTableWords(groups, shape.stacks, shape.columns);
  for (absl::Status s : {sizedBuffer(tableDesc, int64_t(shape.desc.size()), true),
                         sizedBuffer(table, elements, false),
                         sizedBuffer(tableSums, accel::groupTableSums(groups, block), false),
                         sizedBuffer(tableOffsets, words, false, ScalarType::I32)})
    if (!s.ok())
      return s;
  writeValues(*tableDesc, shape.desc);
  // Rows nobody writes where the launch wants no capacities (every desc
  // row -1).
  Buffer *rows = options.iterationCapacities ? options.iterationCapacities->rows.get() : nullptr;
  if (rows)
    filledRows.reset();
  if (!rows && !noRows) {
    absl::StatusOr<Buffer> b = Buffer::create(ScalarType::I64, {1, 1});
    if (!b.ok())
      return b.status();
    noRows = *std::move(b);
  }
  NdarrayArg need{needs.need.get()}, desc{&*tableDesc}, out{&*table}, sums{&*tableSums},
      rowsArg{rows ? rows : &*noRows}, offsets{&*tableOffsets};
  const LaunchArg args[] = {LaunchArg::ndarray(&need),
                            LaunchArg::ndarray(&desc),
                            LaunchArg::ndarray(&out),
                            LaunchArg::ndarray(&sums),
                            LaunchArg::ndarray(&rowsArg),
                            LaunchArg::ndarray(&offsets),
                            LaunchArg::i32(int32_t(groups)),
                            LaunchArg::i32(int32_t(shape.stacks)),
                            LaunchArg::i32(int32_t(shape.columns)),
                            LaunchArg::i32(int32_t(threads)),
                            LaunchArg::i32(int32_t(shape.begin)),
                            LaunchArg::i32(int32_t(shape.end)),
                            LaunchArg::i32(int32_t(needs.spread)),
                            LaunchArg::i64(device.groupTableUnit()),
                            LaunchArg::i64(base),
                            LaunchArg::i32(int32_t(block)),
                            LaunchArg::i32(int32_t((groups + block - 1) / block)),
                            LaunchArg::i32(int32_t(lanes))};
  return runOwnKernel(program, plan, **kernel, args);
}

absl::Status AcceleratorBackend::State::zeroNeeds(Program &program, const LaunchPlan &plan,
                                                  const MeasuredAdStackNeeds &needs) {
  if (!needs.zeroAfterUse || needs.rows || !needs.need ||
      int64_t(needs.need->sizeInBytes()) < kZeroOnDeviceBytes)
    return absl::OkStatus();
  absl::StatusOr<const Kernel *> kernel = accel::zeroNeedsKernel();
  if (!kernel.ok())
    return kernel.status();
  NdarrayArg need{needs.need.get()};
  const LaunchArg args[] = {LaunchArg::ndarray(&need),
                            LaunchArg::i32(int32_t(needs.need->numElements()))};
  absl::Status s = runOwnKernel(program, plan, **kernel, args);
  needs.zeroed = s.ok();
  return s;
}

absl::Status
AcceleratorBackend::State::fillCapacities(Program &program, const LaunchPlan &plan,
                                          const AdStackIterationCapacities &capacities) {
  absl::StatusOr<const Kernel *> kernel = accel::fillRowsKernel();
  if (!kernel.ok())
    return kernel.status();
  const KernelLayout &layout = plan.layout();
  std::vector<int64_t> values(capacities.slots.size(), 1);
  for (size_t i = 0; i < layout.stacks.size(); ++i)
    if (auto slot = capacities.slots.find(layout.stacks[i].stmt); slot != capacities.slots.end())
      values.at(size_t(slot->second)) = plan.heap().capacities[i];
  if (filledRows.lock() == capacities.rows && filledFirst == capacities.firstRow &&
      filled == values)
    return absl::OkStatus();
  if (absl::Status s = sizedBuffer(fillValues, std::max<int64_t>(int64_t(values.size()), 1), true);
      !s.ok())
    return s;
  writeValues(*fillValues, values);
  Buffer &rows = *capacities.rows;
  NdarrayArg rowsArg{&rows}, valuesArg{&*fillValues};
  const LaunchArg args[] = {LaunchArg::ndarray(&rowsArg), LaunchArg::ndarray(&valuesArg),
                            LaunchArg::i32(int32_t(capacities.firstRow)),
                            LaunchArg::i32(int32_t(values.size())),
                            LaunchArg::i32(int32_t(rows.shape().at(1)))};
  absl::Status ran = runOwnKernel(program, plan, **kernel, args);
  filledRows = ran.ok() ? capacities.rows : nullptr;
  filledFirst = capacities.firstRow;
  filled = std::move(values);
  return ran;
}

absl::StatusOr<AcceleratorBackend::State::Compacted>
AcceleratorBackend::State::layOut(Program &program, const LaunchPlan &plan,
                                  const accel::GroupTableShape &shape, const LaunchOptions &options,
                                  int64_t threads, int64_t lanes) {
  Compacted c;
  c.threads = threads;
  c.lanes = lanes;
  c.groups = (threads + lanes - 1) / lanes;
  c.oneColumn = shape.columns == 1 && shape.stacks > 1;
  c.columns = shape.columns;
  c.tableBytes = accel::groupTableWords(c.groups, shape.stacks, shape.columns) * 4;
  int64_t base = device.groupTableInHeap() ? c.tableBytes : 0;
  if (absl::Status s = runGroupTable(program, plan, shape, options, threads, lanes, base); !s.ok())
    return s;
  // The totals in one copy: the heap's bytes, the own needs, the bytes of
  // each group size (from a run in groups of 32) and of either columns.
  absl::StatusOr<DeviceMirror *> sums = tableSums->prepareOnDevice(&device, [&] {
    return absl::StatusOr<std::unique_ptr<DeviceMirror>>(device.mirror(*tableSums));
  });
  if (!sums.ok())
    return sums.status();
  std::array<int64_t, 4 + accel::kGroupShifts> head{};
  if (absl::Status s = (*sums)->download(reinterpret_cast<std::byte *>(head.data()),
                                         head.size() * sizeof(int64_t));
      !s.ok())
    return s;
  c.heapBytes = base + head[0];
  c.bytes = c.tableBytes + head[0];
  c.needBytes = head[1];
  std::copy(head.begin() + 2, head.begin() + 2 + accel::kGroupShifts, c.candidates.begin());
  c.columnBytes = {head[2 + accel::kGroupShifts], head[3 + accel::kGroupShifts]};
  return c;
}

absl::StatusOr<AcceleratorBackend::State::Compacted>
AcceleratorBackend::State::chooseLayout(Program &program, const LaunchPlan &plan,
                                        const accel::GroupTableShape &shape,
                                        const LaunchOptions &options, int64_t t, int64_t &runs) {
  const int64_t group = abi::kAdStackGroupThreads;
  const int64_t forced = options.adStackGroupThreads;
  const accel::GroupTableShape shared = shape.shareColumn(device.groupTableUnit());
  auto run = [&](int64_t lanes, bool oneColumn) {
    ++runs;
    return layOut(program, plan, oneColumn && shape.stacks > 1 ? shared : shape, options, t, lanes);
  };
  auto tableBytes = [&](int64_t lanes, bool oneColumn) {
    return accel::groupTableWords((t + lanes - 1) / lanes, shape.stacks,
                                  oneColumn ? 1 : shape.stacks) *
           4;
  };
  // The layout the kernel's last launch of as many threads chose, where
  // the needs look the same (ChosenGroups).
  auto key = std::tuple(&plan.kernel(), t, forced);
  auto last = chosenGroups.find(key);
  bool again = last != chosenGroups.end();
  absl::StatusOr<Compacted> c =
      again ? run(last->second.lanes, last->second.oneColumn) : run(forced ? forced : group, false);
  if (!c.ok())
    return c.status();
  if (again && moved(c->needBytes, last->second.needBytes)) {
    again = false;
    if (!forced && c->lanes != group)
      c = run(group, c->oneColumn);
    if (!c.ok())
      return c.status();
  }
  int64_t lanes = c->lanes;
  bool oneColumn = c->oneColumn;
  if (!again) {
    // One column for every stack where its regions and table take fewer
    // bytes than one column each (stacks whose needs go together).
    oneColumn = shape.stacks > 1 && c->columnBytes[1] + tableBytes(lanes, true) <
                                        c->columnBytes[0] + tableBytes(lanes, false);
    if (!forced) {
      // The largest group whose regions and table are within 1.05x of
      // the fewest bytes any group size takes (groups of 1: the sum of
      // the needs, plus the largest table).
      std::array<int64_t, accel::kGroupShifts> total{};
      for (int k = 0; k < accel::kGroupShifts; ++k)
        total[size_t(k)] = c->candidates[size_t(k)] + tableBytes(int64_t(1) << k, oneColumn);
      int64_t fewest = *std::min_element(total.begin(), total.end());
      for (int k = 0; k < accel::kGroupShifts; ++k)
        if (double(total[size_t(k)]) <= kGroupSlack * double(fewest))
          lanes = int64_t(1) << k;
    }
  }
  if (lanes != c->lanes || oneColumn != c->oneColumn)
    c = run(lanes, oneColumn);
  if (!c.ok())
    return c.status();
  chosenGroups[key] = {lanes, c->needBytes, oneColumn};
  return c;
}

absl::StatusOr<std::vector<AcceleratorBackend::State::Compacted::Window>>
AcceleratorBackend::State::windowsOf(const Compacted &c, const accel::GroupTableShape &shape,
                                     int64_t largest) {
  using Window = Compacted::Window;
  const int64_t room = largest - c.tableBytes; // one window's regions
  const int64_t regions = c.bytes - c.tableBytes;
  if (room <= 0 || regions <= 0)
    return std::vector<Window>();
  absl::StatusOr<DeviceMirror *> table = tableOffsets->prepareOnDevice(&device, [&] {
    return absl::StatusOr<std::unique_ptr<DeviceMirror>>(device.mirror(*tableOffsets));
  });
  if (!table.ok())
    return table.status();
  // Windows of whole groups of the table and of the device.
  const int64_t unit =
      std::lcm<int64_t>(abi::kAdStackGroupThreads, std::max<int64_t>(limits.groupSize, 1));
  const int64_t header = accel::groupTableHeader(shape.stacks);
  const int64_t bytesPerUnit = device.groupTableUnit();
  // The fewest windows of equal threads whose regions each fit: from the
  // regions over the room up, a quarter more each time. Where window w's
  // regions start is the offset of its first group's first column
  // (group-major), and the last ends at the heap's end: one read of the
  // table per try.
  for (int64_t n = (regions + room - 1) / room; n <= kMaxWindows; n = std::max(n + 1, n * 5 / 4)) {
    const int64_t span = ((c.threads + n - 1) / n + unit - 1) / unit * unit;
    const int64_t count = (c.threads + span - 1) / span;
    std::vector<int64_t> words;
    for (int64_t k = 0; k <= count; ++k)
      words.push_back(header + std::min(k * span / c.lanes, c.groups) * c.columns);
    absl::StatusOr<std::vector<int64_t>> at = (*table)->readIntegers(ScalarType::I32, words);
    if (!at.ok())
      return at.status();
    auto offset = [&](size_t k) { return int64_t(uint32_t((*at)[k])) * bytesPerUnit; };
    std::vector<Window> windows;
    bool fit = true;
    for (size_t k = 0; k + 1 < words.size() && fit; ++k) {
      int64_t a = int64_t(k) * span;
      int64_t bytes = offset(k + 1) - offset(k);
      fit = bytes <= room;
      windows.push_back({a, std::min(a + span, c.threads) - a, offset(k) - offset(0), bytes});
    }
    if (fit)
      return windows;
    if (span <= unit)
      break;
  }
  return std::vector<Window>();
}

absl::StatusOr<std::optional<AcceleratorBackend::State::Compacted>>
AcceleratorBackend::State::compact(Program &program, const LaunchPlan &plan,
                                   const accel::GroupTableShape &shape,
                                   const LaunchOptions &options, int64_t threads, int64_t budget,
                                   int64_t windowBytes) {
  const int64_t group = abi::kAdStackGroupThreads;
  const int64_t forced = options.adStackGroupThreads;
  if (forced != 0 && (forced < 0 || forced > group || !std::has_single_bit(uint64_t(forced))))
    return absl::InvalidArgumentError(fmt::format(
        "kernel @{}: LaunchOptions::adStackGroupThreads is {}; give a power of two from 1 to {} "
        "(or 0: chosen per launch)",
        plan.kernel().name(), forced, group));
  int64_t largest = limits.maxHeapBytes == 0 || limits.maxHeapBytes > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : int64_t(limits.maxHeapBytes);
  // The table's offsets (the heap's end included) are 32 bits.
  largest = std::min({largest, budget, abi::kAdStackMaxCompactedBytes,
                      int64_t(UINT32_MAX) * int64_t(device.groupTableUnit())});
  int64_t runs = 0;
  auto fits = [&](Compacted c) -> absl::StatusOr<std::optional<Compacted>> {
    absl::StatusOr<DeviceMirror *> m = tableOffsets->prepareOnDevice(&device, [&] {
      return absl::StatusOr<std::unique_ptr<DeviceMirror>>(device.mirror(*tableOffsets));
    });
    if (!m.ok())
      return m.status();
    c.table = *m;
    c.runs = runs;
    return std::optional<Compacted>(c);
  };
  // Where the last such launch fitted fewer threads, with needs that look
  // the same, start there (FittedThreads).
  auto fitKey = std::tuple(&plan.kernel(), threads, largest, forced);
  if (auto f = fittedThreads.find(fitKey);
      f != fittedThreads.end() && f->second.threads < threads) {
    absl::StatusOr<Compacted> c =
        chooseLayout(program, plan, shape, options, f->second.threads, runs);
    if (!c.ok())
      return c.status();
    if (c->bytes <= largest && !moved(c->needBytes, f->second.needBytes))
      return fits(*c);
  }
  // Fewer threads hold fewer iterations at once: halve the grid (whole
  // groups of 32) until the heap fits.
  for (int64_t t = threads;; t = std::max(group, t / 2 / group * group)) {
    absl::StatusOr<Compacted> c = chooseLayout(program, plan, shape, options, t, runs);
    if (!c.ok())
      return c.status();
    if (c->bytes <= largest) {
      fittedThreads[fitKey] = {t, c->needBytes};
      return fits(*c);
    }
    // Windows of one wave's threads hold at most the regions of one
    // window at a time: every thread still runs only its own iterations.
    if (windowBytes > 0 && t == threads) {
      absl::StatusOr<std::vector<Compacted::Window>> windows =
          windowsOf(*c, shape, std::min(largest, windowBytes));
      if (!windows.ok())
        return windows.status();
      if (!windows->empty()) {
        int64_t most = 0;
        for (const Compacted::Window &w : *windows)
          most = std::max(most, w.bytes);
        c->heapBytes += most - (c->bytes - c->tableBytes);
        c->bytes = c->tableBytes + most;
        c->windows = *std::move(windows);
        return fits(*c);
      }
    }
    if (t <= group)
      return std::optional<Compacted>();
  }
}

} // namespace qd
