//===- HostLayoutTest.cpp - Alignment of host storage for vector code ----===//
//
// Buffer storage and the CPU adstack heap layout start vectors on
// abi::kHostVectorAlignment boundaries: a row of SIMD lanes that straddles
// an extra cache line costs the CPU gradient a quarter of its speed.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/Buffer.h"
#include "qd/runtime/LaunchPlan.h"
#include "qd/runtime/Program.h"

#include "qd/ir/Parser.h"
#include "qd/ir/Visitor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace qd {
namespace {

constexpr int64_t kAlign = int64_t(abi::kHostVectorAlignment);

bool aligned(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % kAlign == 0;
}

TEST(HostLayoutTest, OwnedBuffersAreAlignedForVectorCode) {
  // Sizes that malloc serves from its small bins, its large ones and mmap.
  for (int64_t n : {1, 3, 17, 1000, 100000, 1 << 20}) {
    absl::StatusOr<Buffer> b = Buffer::create(ScalarType::F32, {n});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(aligned(b->data())) << n << " elements at " << static_cast<void *>(b->data());
    Buffer moved = *std::move(b);
    EXPECT_TRUE(aligned(moved.data()));
  }
  auto p = parseModule("field @x : i32[5]\nfield @y : f64[7, 3] grad\n", {"t.qd", 1});
  ASSERT_TRUE(p.ok()) << p.status();
  auto program = Program::create(**p);
  ASSERT_TRUE(program.ok()) << program.status();
  for (const char *f : {"x", "y"})
    EXPECT_TRUE(aligned((*program)->field(f)->data())) << f;
  EXPECT_TRUE(aligned((*program)->field("y", Component::Grad)->data()));
}

/// The heap layout of a kernel whose task holds an i32 stack (8 lanes x 4
/// bytes x 3 = 96 bytes) and then an f32 one, with `lanes` lanes.
AdStackHeapLayout layoutWithLanes(int32_t lanes) {
  auto m = parseModule(R"(
kernel @k() {
  parallel for %i = 0 to 64 {
    %a = adstack.alloca i32, capacity 3
    %b = adstack.alloca f32, capacity 5
  }
}
)",
                       {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status();
  Kernel &k = *(*m)->findKernel("k");
  KernelLayout layout;
  const Stmt *task = &*k.body().begin();
  walk(k.body(), [&](Stmt &s) {
    if (auto *a = dyn_cast<AdStackAllocaStmt>(&s))
      layout.stacks.push_back({a, task, adStackEntryBytes(*a), 0});
  });
  auto program = Program::create(**m);
  EXPECT_TRUE(program.ok()) << program.status();
  LaunchOptions options;
  auto plan = LaunchPlan::bind(**program, k, layout, {}, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<int32_t> taskLanes = {lanes};
  absl::Status s = plan->layoutAdStacks(taskLanes);
  EXPECT_TRUE(s.ok()) << s;
  return plan->heap();
}

TEST(HostLayoutTest, StacksOfSimdLanesStartOnVectorBoundaries) {
  // 4 lanes: the i32 stack takes 3 x 16 = 48 bytes; the f32 stack starts at
  // the next boundary, 64, and the slice (64 + 5 x 16 = 144) rounds to 192.
  AdStackHeapLayout v = layoutWithLanes(4);
  EXPECT_EQ(v.offsets[0], 0);
  EXPECT_EQ(v.offsets[1], 64);
  EXPECT_EQ(v.stride, 192);
  // Scalar code packs them (a GPU's threads each hold one entry per row).
  AdStackHeapLayout s = layoutWithLanes(1);
  EXPECT_EQ(s.offsets[1], 16); // 3 x 4 = 12, rounded to 8
  EXPECT_EQ(s.stride, 16 + 24);
}

} // namespace
} // namespace qd
