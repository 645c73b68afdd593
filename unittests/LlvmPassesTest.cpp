//===- LlvmPassesTest.cpp - qd's own LLVM IR passes and tiers -------------===//
//
// promoteLocals must compute what LLVM's mem2reg computes: each function
// below runs through the JIT before and after promotion on many inputs and
// must return the same values, with every promotable local gone and the
// others untouched. splitLongBlocks and the tier choice are checked on
// their own.
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/Optimize.h"

#include <gtest/gtest.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <memory>
#include <string>
#include <vector>

namespace qd {
namespace {

std::unique_ptr<llvm::Module> parseIR(llvm::LLVMContext &ctx, const std::string &text) {
  llvm::SMDiagnostic err;
  auto m = llvm::parseAssemblyString(text, err, ctx);
  if (!m) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    err.print("test", os);
    ADD_FAILURE() << msg;
  }
  return m;
}

size_t countOpcode(const llvm::Function &f, unsigned opcode) {
  size_t n = 0;
  for (const llvm::BasicBlock &bb : f)
    for (const llvm::Instruction &i : bb)
      n += i.getOpcode() == opcode;
  return n;
}

/// `@f(i32, i32) -> i32` of `text`, compiled by the JIT.
class Jitted {
public:
  explicit Jitted(std::unique_ptr<llvm::Module> m, std::unique_ptr<llvm::LLVMContext> ctx) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jit = llvm::orc::LLJITBuilder().create();
    if (!jit) {
      ADD_FAILURE() << llvm::toString(jit.takeError());
      return;
    }
    jit_ = std::move(*jit);
    if (auto e = jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx)))) {
      ADD_FAILURE() << llvm::toString(std::move(e));
      return;
    }
    auto sym = jit_->lookup("f");
    if (!sym) {
      ADD_FAILURE() << llvm::toString(sym.takeError());
      return;
    }
    fn_ = sym->toPtr<int32_t (*)(int32_t, int32_t)>();
  }
  int32_t operator()(int32_t a, int32_t b) const { return fn_(a, b); }
  bool ok() const { return fn_ != nullptr; }

private:
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  int32_t (*fn_)(int32_t, int32_t) = nullptr;
};

/// Promotes `@f` of `text`, checks the result and compares both versions
/// on a grid of inputs. `kept`: allocas that must survive.
void checkPromotion(const std::string &text, size_t promoted, size_t kept = 0,
                    PromoteStats *stats = nullptr) {
  auto beforeCtx = std::make_unique<llvm::LLVMContext>();
  auto afterCtx = std::make_unique<llvm::LLVMContext>();
  auto before = parseIR(*beforeCtx, text);
  auto after = parseIR(*afterCtx, text);
  ASSERT_TRUE(before && after);
  llvm::Function &f = *after->getFunction("f");
  EXPECT_EQ(promoteLocals(f, stats), promoted);
  std::string bad;
  llvm::raw_string_ostream os(bad);
  ASSERT_FALSE(llvm::verifyFunction(f, &os)) << bad;
  EXPECT_EQ(countOpcode(f, llvm::Instruction::Alloca), kept);
  Jitted run0(std::move(before), std::move(beforeCtx));
  Jitted run1(std::move(after), std::move(afterCtx));
  ASSERT_TRUE(run0.ok() && run1.ok());
  for (int32_t a = -3; a <= 12; ++a)
    for (int32_t b = -2; b <= 9; ++b)
      ASSERT_EQ(run0(a, b), run1(a, b)) << "f(" << a << ", " << b << ")";
}

TEST(PromoteLocalsTest, ALoopCarryingLocalsThroughItsBody) {
  // s and t are loaded before they are stored in the loop body (live in
  // through a phi), and t is stored twice in the body.
  checkPromotion(R"(
define i32 @f(i32 %a, i32 %b) {
entry:
  %s = alloca i32
  %t = alloca i32
  %i = alloca i32
  store i32 0, ptr %s
  store i32 1, ptr %t
  store i32 0, ptr %i
  br label %header
header:
  %iv = load i32, ptr %i
  %c = icmp slt i32 %iv, %a
  br i1 %c, label %body, label %exit
body:
  %s0 = load i32, ptr %s
  %t0 = load i32, ptr %t
  %s1 = add i32 %s0, %t0
  store i32 %s1, ptr %s
  %t1 = mul i32 %t0, 3
  store i32 %t1, ptr %t
  %t2 = load i32, ptr %t
  %t3 = add i32 %t2, %b
  store i32 %t3, ptr %t
  %iv1 = add i32 %iv, 1
  store i32 %iv1, ptr %i
  br label %header
exit:
  %r0 = load i32, ptr %s
  %r1 = load i32, ptr %t
  %r = xor i32 %r0, %r1
  ret i32 %r
})",
                 3);
}

TEST(PromoteLocalsTest, BranchesNestedLoopsAndAStoreOfItsOwnLoad) {
  // x is stored its own value (a load of x) in the inner loop; y only on
  // one arm of a branch; the inner loop's header is its own latch.
  checkPromotion(R"(
define i32 @f(i32 %a, i32 %b) {
entry:
  %x = alloca i32
  %y = alloca i32
  %j = alloca i32
  store i32 %b, ptr %x
  store i32 7, ptr %y
  br label %outer
outer:
  store i32 0, ptr %j
  %c0 = icmp sgt i32 %a, 2
  br i1 %c0, label %then, label %inner
then:
  %y0 = load i32, ptr %y
  %y1 = sub i32 %y0, %a
  store i32 %y1, ptr %y
  br label %inner
inner:
  %x0 = load i32, ptr %x
  store i32 %x0, ptr %x
  %x1 = load i32, ptr %x
  %x2 = add i32 %x1, 1
  store i32 %x2, ptr %x
  %jv = load i32, ptr %j
  %jv1 = add i32 %jv, 1
  store i32 %jv1, ptr %j
  %c1 = icmp slt i32 %jv1, 3
  br i1 %c1, label %inner, label %latch
latch:
  %x3 = load i32, ptr %x
  %c2 = icmp slt i32 %x3, 40
  br i1 %c2, label %outer, label %exit
exit:
  %r0 = load i32, ptr %x
  %r1 = load i32, ptr %y
  %r = mul i32 %r0, %r1
  ret i32 %r
})",
                 3);
}

TEST(PromoteLocalsTest, LoadsNoStoreReachesAndUnreachableCode) {
  // u is read in the entry block before any store (undef, unused in the
  // result: multiplied by 0 is still undef, so it only feeds a dead
  // value); v is read in a block no store reaches on one path; the
  // unreachable block reads and writes both.
  checkPromotion(R"(
define i32 @f(i32 %a, i32 %b) {
entry:
  %u = alloca i32
  %v = alloca i32
  %dead = load i32, ptr %u
  store i32 %a, ptr %u
  %c = icmp sgt i32 %b, 0
  br i1 %c, label %set, label %join
set:
  store i32 %b, ptr %v
  br label %join
join:
  %u0 = load i32, ptr %u
  br i1 %c, label %use, label %exit
use:
  %v0 = load i32, ptr %v
  %s = add i32 %u0, %v0
  ret i32 %s
exit:
  ret i32 %u0
nowhere:
  %v1 = load i32, ptr %v
  store i32 %v1, ptr %u
  store i32 %v1, ptr %v
  br label %nowhere
})",
                 2);
}

TEST(PromoteLocalsTest, AChainOfChecksWhoseSideExitsReadALocal) {
  // The emitter's shape: a chain of blocks, each ending in a check whose
  // failing side leaves for one shared exit block, which reads %peak (the
  // value stored before that check) and %acc; %t is only read inside the
  // chain. Two unreachable blocks form a cycle of single predecessors.
  checkPromotion(R"(
define i32 @f(i32 %a, i32 %b) {
entry:
  %peak = alloca i32
  %acc = alloca i32
  %t = alloca i32
  store i32 0, ptr %peak
  store i32 %b, ptr %acc
  store i32 %a, ptr %t
  br label %c0
c0:
  store i32 1, ptr %peak
  %t0 = load i32, ptr %t
  %k0 = icmp sgt i32 %t0, 5
  br i1 %k0, label %exit, label %c1
c1:
  store i32 2, ptr %peak
  %acc0 = load i32, ptr %acc
  %acc1 = add i32 %acc0, %a
  store i32 %acc1, ptr %acc
  %k1 = icmp sgt i32 %acc1, 7
  br i1 %k1, label %exit, label %c2
c2:
  store i32 3, ptr %peak
  %t1 = load i32, ptr %t
  %t2 = mul i32 %t1, 2
  store i32 %t2, ptr %t
  %k2 = icmp sgt i32 %t2, 9
  br i1 %k2, label %exit, label %done
done:
  store i32 4, ptr %peak
  br label %exit
exit:
  %p = load i32, ptr %peak
  %q = load i32, ptr %acc
  %r = mul i32 %p, 1000
  %s = add i32 %r, %q
  ret i32 %s
lost1:
  %l1 = load i32, ptr %t
  store i32 %l1, ptr %acc
  br label %lost2
lost2:
  %l2 = load i32, ptr %acc
  store i32 %l2, ptr %t
  br label %lost1
})",
                 3);
}

TEST(PromoteLocalsTest, LocalsWhoseAddressEscapesOrWhoseTypeChangesStay) {
  // %p escapes into a call, %q is read with another type, %w is volatile:
  // only %ok is promoted.
  checkPromotion(R"(
define void @g(ptr %p) {
  ret void
}
define i32 @f(i32 %a, i32 %b) {
entry:
  %p = alloca i32
  %q = alloca i32
  %w = alloca i32
  %ok = alloca i32
  store i32 %a, ptr %p
  call void @g(ptr %p)
  store i32 %b, ptr %q
  %q0 = load i16, ptr %q
  %q1 = sext i16 %q0 to i32
  store volatile i32 %a, ptr %w
  %w0 = load volatile i32, ptr %w
  store i32 %a, ptr %ok
  %ok0 = load i32, ptr %ok
  %p0 = load i32, ptr %p
  %r0 = add i32 %p0, %q1
  %r1 = add i32 %r0, %w0
  %r = add i32 %r1, %ok0
  ret i32 %r
})",
                 1, 3);
}

/// `@f(a, b)`: `depth` nested loops of 1 + (a & 1) iterations each. Loop
/// k's body stores b + k to its own local x_k (which the entry block also
/// initialises, as the vector code does), adds k to %acc, runs loop k + 1,
/// then folds x_k into %acc and, on one arm, triples x_k before the latch
/// reads it. x_k is read after the loops inside it, which never store it.
std::string nestFunction(int depth) {
  std::string s = "define i32 @f(i32 %a, i32 %b) {\nentry:\n  %acc = alloca i32\n";
  for (int k = 0; k < depth; ++k)
    s += "  %x" + std::to_string(k) + " = alloca i32\n  %i" + std::to_string(k) + " = alloca i32\n";
  s += "  store i32 0, ptr %acc\n";
  for (int k = 0; k < depth; ++k)
    s += "  store i32 7, ptr %x" + std::to_string(k) + "\n";
  s += "  %odd = and i32 %a, 1\n  %trip = add i32 %odd, 1\n  br label %pre_0\n";
  for (int k = 0; k < depth; ++k) {
    // Names end in _k: %v2 of loop 0 and %v of loop 20 must differ.
    std::string num = std::to_string(k), n = "_" + num;
    std::string inner = k + 1 < depth ? "pre_" + std::to_string(k + 1) : "after" + n;
    std::string out = k > 0 ? "after_" + std::to_string(k - 1) : "done";
    s += "pre" + n + ":\n  store i32 0, ptr %i" + num + "\n  br label %header" + n + "\n";
    s += "header" + n + ":\n  %iv" + n + " = load i32, ptr %i" + num + "\n  %c" + n +
         " = icmp slt i32 %iv" + n + ", %trip\n  br i1 %c" + n + ", label %body" + n +
         ", label %exit" + n + "\n";
    s += "body" + n + ":\n  %bx" + n + " = add i32 %b, " + num + "\n  store i32 %bx" + n +
         ", ptr %x" + num + "\n  %v" + n + " = load i32, ptr %acc\n  %v2" + n + " = add i32 %v" +
         n + ", " + num + "\n  store i32 %v2" + n + ", ptr %acc\n  br label %" + inner + "\n";
    s += "after" + n + ":\n  %xv" + n + " = load i32, ptr %x" + num + "\n  %w" + n +
         " = load i32, ptr %acc\n  %w2" + n + " = xor i32 %w" + n + ", %xv" + n +
         "\n  store i32 %w2" + n + ", ptr %acc\n  %lo" + n + " = and i32 %w2" + n + ", 1\n  %z" +
         n + " = icmp eq i32 %lo" + n + ", 0\n  br i1 %z" + n + ", label %then" + n +
         ", label %latch" + n + "\n";
    s += "then" + n + ":\n  %m" + n + " = mul i32 %xv" + n + ", 3\n  store i32 %m" + n +
         ", ptr %x" + num + "\n  br label %latch" + n + "\n";
    s += "latch" + n + ":\n  %xx" + n + " = load i32, ptr %x" + num + "\n  %u" + n +
         " = load i32, ptr %acc\n  %u2" + n + " = add i32 %u" + n + ", %xx" + n +
         "\n  store i32 %u2" + n + ", ptr %acc\n  %ivn" + n + " = add i32 %iv" + n +
         ", 1\n  store i32 %ivn" + n + ", ptr %i" + num + "\n  br label %header" + n + "\n";
    s += "exit" + n + ":\n  br label %" + out + "\n";
  }
  return s + "done:\n  %r = load i32, ptr %acc\n  ret i32 %r\n}\n";
}

TEST(PromoteLocalsTest, LocalsOfNestedLoopBodiesReadAfterTheLoopsInside) {
  PromoteStats stats;
  checkPromotion(nestFunction(6), 13, 0, &stats);
  EXPECT_GT(stats.phisKept, 0u);
}

TEST(PromoteLocalsTest, PhisGrowLinearlyWithTheDepthOfANest) {
  // x_k needs one phi (at latch k); a placement that looked past x_k's
  // own loop would put one at every header around it: depth^2 / 2 phis.
  auto placed = [](int depth) {
    llvm::LLVMContext ctx;
    auto m = parseIR(ctx, nestFunction(depth));
    PromoteStats stats;
    EXPECT_EQ(promoteLocals(*m->getFunction("f"), &stats), size_t(2 * depth + 1));
    std::string bad;
    llvm::raw_string_ostream os(bad);
    EXPECT_FALSE(llvm::verifyFunction(*m->getFunction("f"), &os)) << bad;
    return stats.phisPlaced;
  };
  size_t at64 = placed(64), at128 = placed(128);
  EXPECT_LE(at64, 6u * 64);
  EXPECT_LE(at128, 2 * at64 + 8);
  EXPECT_GE(at128, 2 * at64 - 8);
}

TEST(SplitLongBlocksTest, CutsLongBlocksAndKeepsPhisAndAllocasInPlace) {
  llvm::LLVMContext ctx;
  std::string text = "define i32 @f(i32 %a, i32 %b) {\nentry:\n  %s = alloca i32\n"
                     "  br label %loop\nloop:\n  %p = phi i32 [ %a, %entry ], [ %x99, %loop ]\n"
                     "  %x0 = add i32 %p, %b\n";
  for (int k = 1; k < 100; ++k)
    text += "  %x" + std::to_string(k) + " = mul i32 %x" + std::to_string(k - 1) + ", 3\n";
  text += "  %c = icmp slt i32 %x99, 1000\n  br i1 %c, label %loop, label %exit\n"
          "exit:\n  ret i32 %x99\n}\n";
  auto m = parseIR(ctx, text);
  ASSERT_TRUE(m);
  llvm::Function &f = *m->getFunction("f");
  // The loop block: a phi, 100 instructions, a compare and a branch.
  EXPECT_EQ(splitLongBlocks(f, 30), 3u);
  std::string bad;
  llvm::raw_string_ostream os(bad);
  ASSERT_FALSE(llvm::verifyFunction(f, &os)) << bad;
  for (const llvm::BasicBlock &bb : f) {
    size_t body = 0;
    for (const llvm::Instruction &i : bb)
      body += !llvm::isa<llvm::PHINode>(i) && !i.isTerminator();
    EXPECT_LE(body, 30u) << bb.getName().str();
  }
  EXPECT_TRUE(llvm::isa<llvm::AllocaInst>(f.getEntryBlock().front()));
  EXPECT_EQ(splitLongBlocks(f, 30), 0u) << "nothing left to cut";
  EXPECT_EQ(splitLongBlocks(f, 0), 0u) << "0: no limit";
}

TEST(TierTest, DeepLoopNestsAndLargeFunctionsGetTheLightTier) {
  llvm::LLVMContext ctx;
  auto nest = [&](int depth) {
    std::string s = "define void @f(i32 %n) {\nentry:\n  br label %h0\n";
    for (int d = 0; d < depth; ++d)
      s += "h" + std::to_string(d) + ":\n  %i" + std::to_string(d) + " = phi i32 [ 0, %" +
           (d ? "h" + std::to_string(d - 1) : std::string("entry")) + " ], [ %n" +
           std::to_string(d) + ", %l" + std::to_string(d) + " ]\n" +
           (d + 1 < depth ? "  br label %h" + std::to_string(d + 1) + "\n"
                          : "  br label %l" + std::to_string(d) + "\n");
    for (int d = depth; d-- > 0;)
      s += "l" + std::to_string(d) + ":\n  %n" + std::to_string(d) + " = add i32 %i" +
           std::to_string(d) + ", 1\n  %c" + std::to_string(d) + " = icmp slt i32 %n" +
           std::to_string(d) + ", %n\n  br i1 %c" + std::to_string(d) + ", label %h" +
           std::to_string(d) + ", label %" + (d ? "l" + std::to_string(d - 1) : "x") + "\n";
    return s + "x:\n  ret void\n}\n";
  };
  auto three = parseIR(ctx, nest(3));
  ASSERT_TRUE(three);
  std::string bad;
  llvm::raw_string_ostream os(bad);
  ASSERT_FALSE(llvm::verifyModule(*three, &os)) << bad;
  EXPECT_EQ(deepestLoopNest(*three), 3u);
  EXPECT_EQ(chooseTier(*three, {.fullInstructions = 1000, .fullLoopDepth = 3}),
            OptimizationTier::Full);
  EXPECT_EQ(chooseTier(*three, {.fullInstructions = 1000, .fullLoopDepth = 2}),
            OptimizationTier::Light);
  EXPECT_EQ(chooseTier(*three, {.fullInstructions = 5, .fullLoopDepth = 16}),
            OptimizationTier::Light);
}

} // namespace
} // namespace qd
