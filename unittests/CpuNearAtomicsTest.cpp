//===- CpuNearAtomicsTest.cpp - Neighbour scatters without atomics --------===//
//
// The CPU turns near atomics (ElementOwnership.h: adds to a neighbour's
// element, which only iterations at most a reach apart update) into plain
// read-modify-writes, and its thread pool runs such a task's chunks in two
// phases, even then odd, each chunk at least the reach long, so that no two
// iterations that update one element run at the same time. These tests
// check the schedule itself (for odd worker counts and chunk sizes below
// the reach, cyclic reaches included) and that kernels with near atomics
// compute what the interpreter does, exactly (their values are small
// integers, so that the order of the adds does not round).
//
//===----------------------------------------------------------------------===//
#include "ThreadPool.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/CpuBackend.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace qd {
namespace {

/// What the chunks of one ThreadPool::run did: how often each iteration
/// ran, and the closest two chunks that ran at the same time came
/// (cyclically, in iterations).
struct ScheduleLog {
  std::mutex mu;
  int64_t begin = 0, total = 0;
  std::vector<std::pair<int64_t, int64_t>> running; // [b, e) of the chunks now running
  std::vector<int> runs;                            // per iteration
  int64_t closest = INT64_MAX;
  int overlaps = 0; // chunks that ran while another did
};
ScheduleLog *gLog = nullptr;

/// The cyclic distance between the nearest iterations of two disjoint
/// chunks [b1, e1) and [b2, e2) of a task of `total` iterations.
int64_t chunkDistance(std::pair<int64_t, int64_t> x, std::pair<int64_t, int64_t> y, int64_t total) {
  if (x.first > y.first)
    std::swap(x, y);
  int64_t straight = y.first - (x.second - 1), around = x.first + total - (y.second - 1);
  return std::min(straight, around);
}

void recordChunk(QdLaunchContext *, const int64_t *, int64_t b, int64_t e, int32_t) {
  ScheduleLog &log = *gLog;
  {
    std::lock_guard lock(log.mu);
    for (auto other : log.running) {
      log.closest = std::min(log.closest, chunkDistance({b, e}, other, log.total));
      ++log.overlaps;
    }
    log.running.push_back({b, e});
    for (int64_t i = b; i < e; ++i)
      ++log.runs[i - log.begin];
  }
  // Long enough for the other workers to start their chunks meanwhile.
  std::this_thread::sleep_for(std::chrono::microseconds(300));
  std::lock_guard lock(log.mu);
  std::erase(log.running, std::pair{b, e});
}

TEST(CpuNearAtomicsTest, ChunksThatRunTogetherAreFartherApartThanTheReach) {
  QdErrorRecord error{};
  QdLaunchContext ctx{};
  ctx.error = &error;
  int checked = 0, overlapping = 0;
  for (unsigned workers : {2u, 3u, 5u})
    for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(3)}) {
      cpu::ThreadPool pool(workers, chunk, size_t(1) << 20);
      ASSERT_TRUE(pool.ok());
      for (int64_t lanes : {int64_t(1), int64_t(4)})
        for (int64_t reach : {int64_t(1), int64_t(2), int64_t(5)})
          for (int64_t total : {int64_t(7), int64_t(31), int64_t(100)}) {
            SCOPED_TRACE(fmt::format("{} workers, chunk {}, {} lanes, reach {}, {} iterations",
                                     workers, chunk, lanes, reach, total));
            ScheduleLog log;
            log.begin = 3;
            log.total = total;
            log.runs.assign(total, 0);
            gLog = &log;
            pool.run(&ctx, recordChunk, nullptr, 3, 3 + total, lanes, reach);
            gLog = nullptr;
            EXPECT_EQ(log.runs, std::vector<int>(total, 1)) << "each iteration runs once";
            EXPECT_GT(log.closest, reach) << "chunks that ran together were too close";
            ++checked;
            overlapping += log.overlaps > 0;
          }
    }
  EXPECT_EQ(checked, 162);
  // The check saw chunks run together (else it checked nothing).
  EXPECT_GT(overlapping, 10) << "of " << checked << " runs";
}

/// A task of `n` iterations whose atomic adds reach 2 iterations (@s, and
/// @c in i32) and 1 around the ends (@m: the next iteration's element,
/// modulo n), and a band whose adds reach one row and one column.
std::string nearKernels(int64_t n, int64_t rows, int64_t cols) {
  return fmt::format(R"(field @x : f32[{0}]
field @s : f32[{1}]
field @c : i32[{1}]
field @m : f32[{0}]
field @g : f32[{3}, {4}]

kernel @line() {{
  parallel for %i = 0 to {0} {{
    %a = load @x[%i] : f32
    %one = const 1 : i32
    %two = const 2 : i32
    %i1 = add %i, %one : i32
    %i2 = add %i, %two : i32
    atomic_add @s[%i2], %a : f32
    atomic_add @s[%i1], %a : f32
    atomic_add @s[%i], %a : f32
    atomic_add @c[%i2], %one : i32
    atomic_add @c[%i], %two : i32
    %n = const {0} : i32
    %inside = cmp lt %i1, %n : i32
    %back = sub %i1, %n : i32
    %next = select %inside, %i1, %back : i32
    atomic_add @m[%next], %a : f32
    atomic_add @m[%i], %a : f32
  }}
}}

kernel @band() {{
  parallel for (%i, %j) = (0, 0) to ({2}, {5}) {{
    %a = load @x[%j] : f32
    %one = const 1 : i32
    %i1 = add %i, %one : i32
    %j1 = add %j, %one : i32
    atomic_add @g[%i, %j1], %a : f32
    atomic_add @g[%i1, %j], %a : f32
    atomic_add @g[%i, %j], %a : f32
  }}
}}
)",
                     n, n + 2, rows, rows + 1, cols + 1, cols);
}

/// Every field after @line and @band on `backend`, as doubles.
std::vector<double> runNear(Module &m, Backend &backend) {
  auto program = Program::create(m);
  EXPECT_TRUE(program.ok()) << program.status().message();
  Buffer *x = (*program)->field("x");
  for (int64_t i = 0; i < x->numElements(); ++i)
    x->set(i, Scalar::ofFloat(ScalarType::F32, double(i % 7 - 3)));
  for (const char *k : {"line", "band"}) {
    absl::Status s = (*program)->launch(k, {}, backend);
    EXPECT_TRUE(s.ok()) << k << ": " << s.message();
  }
  std::vector<double> out;
  for (const char *f : {"s", "c", "m", "g"}) {
    const Buffer *b = (*program)->field(f);
    for (int64_t i = 0; i < b->numElements(); ++i) {
      Scalar v = b->get(i);
      out.push_back(b->elementType() == ScalarType::I32 ? double(v.i) : v.f);
    }
  }
  return out;
}

TEST(CpuNearAtomicsTest, NeighbourScattersMatchTheInterpreterForOddWorkersAndSmallChunks) {
  for (auto [n, rows, cols] :
       {std::tuple<int64_t, int64_t, int64_t>{37, 5, 7}, {101, 9, 13}, {1000, 31, 33}}) {
    auto m = parseModule(nearKernels(n, rows, cols), {"near.qd", 1});
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_TRUE(verify(**m).ok());
    Interpreter interp;
    std::vector<double> want = runNear(**m, interp);
    for (unsigned threads : {3u, 5u})
      for (int64_t chunk : {int64_t(1), int64_t(0)})
        for (unsigned width : {1u, 0u}) {
          SCOPED_TRACE(
              fmt::format("n {}, {} threads, chunk {}, vector width {}", n, threads, chunk, width));
          CpuBackendOptions o;
          o.threads = threads;
          o.chunk = chunk;
          o.vectorWidth = width;
          auto cpu = CpuBackend::create(o);
          ASSERT_TRUE(cpu.ok()) << cpu.status().message();
          // The adds are plain: nothing but the two-phase schedule keeps
          // them apart.
          for (const char *k : {"line", "band"}) {
            auto ir = (*cpu)->llvmIR(*(*m)->findKernel(k));
            ASSERT_TRUE(ir.ok()) << ir.status().message();
            EXPECT_EQ(ir->find("atomicrmw"), std::string::npos) << k;
          }
          for (int repeat = 0; repeat < 3; ++repeat)
            EXPECT_EQ(runNear(**m, **cpu), want);
        }
  }
}

// Clamped neighbours (`max(%i - 1, 0)`, `max(min(%i + 1, n - 1), 0)`): vector
// code loads and updates the lanes' consecutive elements where no lane is
// clamped and goes lane by lane at the edges (EmitMemory.cpp,
// clampedAccessLanes); lengths that are no multiple of the lanes put the
// edges inside a group and in the partial last group.
std::string clampedKernel(int64_t n) {
  return fmt::format(R"(field @x : f32[{0}]
field @y : f32[{0}]
field @s : f32[{0}]

kernel @clamped() {{
  parallel for %i = 0 to {0} {{
    %one = const 1 : i32
    %zero = const 0 : i32
    %last = const {1} : i32
    %l = sub %i, %one : i32
    %r = add %i, %one : i32
    %lc = max %l, %zero : i32
    %rh = min %r, %last : i32
    %rc = max %rh, %zero : i32
    %a = load @x[%lc] : f32
    %b = load @x[%rc] : f32
    %c = load @x[%i] : f32
    %ab = add %a, %b : f32
    %abc = add %ab, %c : f32
    store @y[%i], %abc
    atomic_add @s[%rc], %c : f32
    atomic_add @s[%lc], %c : f32
  }}
}}
)",
                     n, n - 1);
}

std::vector<double> runClamped(Module &m, Backend &backend) {
  auto program = Program::create(m);
  EXPECT_TRUE(program.ok()) << program.status().message();
  Buffer *x = (*program)->field("x");
  for (int64_t i = 0; i < x->numElements(); ++i)
    x->set(i, Scalar::ofFloat(ScalarType::F32, double(i % 11 - 5)));
  absl::Status s = (*program)->launch("clamped", {}, backend);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<double> out;
  for (const char *f : {"y", "s"}) {
    const Buffer *b = (*program)->field(f);
    for (int64_t i = 0; i < b->numElements(); ++i)
      out.push_back(b->get(i).f);
  }
  return out;
}

TEST(CpuNearAtomicsTest, ClampedNeighboursMatchTheInterpreterAtTheEdges) {
  for (int64_t n : {5, 37, 64, 1000}) {
    auto m = parseModule(clampedKernel(n), {"clamped.qd", 1});
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_TRUE(verify(**m).ok());
    Interpreter interp;
    std::vector<double> want = runClamped(**m, interp);
    for (unsigned width : {8u, 16u, 1u}) {
      SCOPED_TRACE(fmt::format("n {}, vector width {}", n, width));
      CpuBackendOptions o;
      o.threads = 2;
      o.vectorWidth = width;
      auto cpu = CpuBackend::create(o);
      ASSERT_TRUE(cpu.ok()) << cpu.status().message();
      auto ir = (*cpu)->llvmIR(*(*m)->findKernel("clamped"));
      ASSERT_TRUE(ir.ok()) << ir.status().message();
      // Vector code splits the clamped accesses; scalar code has nothing
      // to split.
      EXPECT_EQ(ir->find("clamp.inside") != std::string::npos, width > 1);
      EXPECT_EQ(runClamped(**m, **cpu), want);
    }
  }
}

} // namespace
} // namespace qd
