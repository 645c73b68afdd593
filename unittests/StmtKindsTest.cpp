//===- StmtKindsTest.cpp - The tables generated from StmtKinds.def --------===//
//
// StmtKinds.def is the one list of statement kinds; these tests check that
// the tables generated from it agree with each other and with the classes.
//
//===----------------------------------------------------------------------===//
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Stmt.h"
#include "qd/ir/Visitor.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace qd {
namespace {

std::vector<StmtKind> allKinds() {
  std::vector<StmtKind> out;
  for (unsigned i = 0; i < kNumStmtKinds; ++i)
    out.push_back(static_cast<StmtKind>(i));
  return out;
}

TEST(StmtKindsTest, TableIsInEnumOrder) {
  ASSERT_EQ(kStmtKindInfos.size(), kNumStmtKinds);
  for (StmtKind k : allKinds())
    EXPECT_EQ(stmtKindInfo(k).kind, k) << mnemonic(k);
  EXPECT_EQ(mnemonic(StmtKind::Const), "const");
  EXPECT_EQ(mnemonic(StmtKind::AdStackLoadTopAdj), "adstack.load_top_adj");
}

TEST(StmtKindsTest, MnemonicsAreUniqueExceptLocalAndGlobalAccess) {
  std::map<std::string_view, std::set<StmtKind>> byName;
  for (StmtKind k : allKinds()) {
    EXPECT_FALSE(mnemonic(k).empty());
    byName[mnemonic(k)].insert(k);
  }
  for (auto &[name, kinds] : byName) {
    if (name == "load")
      EXPECT_EQ(kinds, (std::set{StmtKind::LocalLoad, StmtKind::GlobalLoad}));
    else if (name == "store")
      EXPECT_EQ(kinds, (std::set{StmtKind::LocalStore, StmtKind::GlobalStore}));
    else
      EXPECT_EQ(kinds.size(), 1u) << name;
  }
}

TEST(StmtKindsTest, TraitsOfSomeKinds) {
  EXPECT_FALSE(hasSideEffects(StmtKind::Binary));
  EXPECT_TRUE(isRecomputable(StmtKind::Binary));
  EXPECT_TRUE(isFoldable(StmtKind::Binary));
  EXPECT_TRUE(printsOperator(StmtKind::Binary));
  EXPECT_TRUE(printsResult(StmtKind::Binary));

  EXPECT_FALSE(hasSideEffects(StmtKind::GlobalLoad));
  EXPECT_TRUE(isRecomputable(StmtKind::GlobalLoad));
  EXPECT_FALSE(isFoldable(StmtKind::GlobalLoad));

  EXPECT_FALSE(hasSideEffects(StmtKind::LocalLoad));
  EXPECT_FALSE(isRecomputable(StmtKind::LocalLoad)); // a local may change in between

  EXPECT_TRUE(hasSideEffects(StmtKind::GlobalStore));
  EXPECT_FALSE(printsResult(StmtKind::GlobalStore));

  EXPECT_TRUE(hasSideEffects(StmtKind::For));
  EXPECT_FALSE(printsResult(StmtKind::For)); // `for %i = ...` defines its index itself
  EXPECT_EQ(numNestedBlocks(StmtKind::For), 1u);
  EXPECT_EQ(numNestedBlocks(StmtKind::If), 2u);
  EXPECT_EQ(numNestedBlocks(StmtKind::Const), 0u);

  EXPECT_FALSE(hasSideEffects(StmtKind::AdStackLoadTop));
  EXPECT_FALSE(isRecomputable(StmtKind::AdStackLoadTop));
  EXPECT_TRUE(hasSideEffects(StmtKind::AdStackPop));

  // Everything constant folding evaluates is recomputable and pure.
  for (StmtKind k : allKinds()) {
    if (isFoldable(k)) {
      EXPECT_TRUE(isRecomputable(k)) << mnemonic(k);
      EXPECT_FALSE(hasSideEffects(k)) << mnemonic(k);
    }
  }
}

TEST(StmtKindsTest, ConstructedStatementsMatchTheirRow) {
  auto c = ConstStmt::getInt(ScalarType::I32, 1);
  std::vector<std::unique_ptr<Stmt>> stmts;
  stmts.push_back(std::make_unique<ForStmt>(0, 4, false));
  stmts.push_back(std::make_unique<SerialStmt>());
  stmts.push_back(std::make_unique<WhileStmt>());
  stmts.push_back(std::make_unique<IfStmt>(c.get()));
  stmts.push_back(std::make_unique<BreakStmt>());
  auto st = std::make_unique<AdStackAllocaStmt>(ScalarType::F32, 2);
  stmts.push_back(std::make_unique<AdStackPopStmt>(st.get()));
  for (auto &s : stmts) {
    EXPECT_EQ(s->numBlocks(), numNestedBlocks(s->kind())) << mnemonic(s->kind());
    EXPECT_EQ(s->isContainer(), numNestedBlocks(s->kind()) > 0) << mnemonic(s->kind());
    EXPECT_EQ(s->type().isVoid(), !printsResult(s->kind()) && s->kind() != StmtKind::For)
        << mnemonic(s->kind());
  }
  EXPECT_TRUE(isa<AdStackOpStmt>(stmts.back().get()));
  EXPECT_FALSE(isa<AdStackOpStmt>(st.get()));
  stmts.clear();
}

TEST(StmtKindsTest, EveryMnemonicIsAParserKeywordOfItsKind) {
  for (StmtKind k : allKinds()) {
    if (printsOperator(k))
      continue; // `binary`/`unary` are not keywords; their operators are
    std::optional<StmtKind> parsed = stmtKindForKeyword(mnemonic(k));
    ASSERT_TRUE(parsed) << mnemonic(k);
    EXPECT_EQ(mnemonic(*parsed), mnemonic(k));
    EXPECT_EQ(printsResult(*parsed), printsResult(k)) << mnemonic(k);
    // Only load/store name two kinds; the access target picks one.
    if (mnemonic(k) != "load" && mnemonic(k) != "store") {
      EXPECT_EQ(*parsed, k) << mnemonic(k);
    }
  }
  for (int i = 0; i <= static_cast<int>(BinaryOp::Shr); ++i)
    EXPECT_EQ(stmtKindForKeyword(toString(static_cast<BinaryOp>(i))), StmtKind::Binary);
  for (int i = 0; i <= static_cast<int>(UnaryOp::Not); ++i)
    EXPECT_EQ(stmtKindForKeyword(toString(static_cast<UnaryOp>(i))), StmtKind::Unary);
  EXPECT_EQ(stmtKindForKeyword("parallel"), StmtKind::For);
  EXPECT_EQ(stmtKindForKeyword("binary"), std::nullopt);
  EXPECT_EQ(stmtKindForKeyword("lt"), std::nullopt); // a predicate, not a statement
  EXPECT_EQ(stmtKindForKeyword("field"), std::nullopt);
}

/// One statement of every kind, in the text form.
constexpr std::string_view kEveryKind = R"(field @x : f32[4] grad

kernel @k(%a: ndarray<f32, 1>, %n: i32, %b: ndarray<i32, 1>) {
  %c = const 1.5 : f32
  %m = shape %a, 0 : i32
  parallel for %i = 0 to %n {
    %v = alloca f32
    %lx = load @x[%i] : f32
    %s = add %lx, %c : f32
    %t = sin %s : f32
    %p = cmp lt %t, %c : f32
    %q = select %p, %s, %t : f32
    %w = cast %q : f32 to f64
    store %v, %q
    %lv = load %v : f32
    store @x.grad[%i], %lv
    atomic_add %a[%i], %lv : f32
    atomic_max %b[%i], %i : i32
    %st = adstack.alloca f32, capacity 4
    adstack.push %st, %lv
    %top = adstack.load_top %st : f32
    %adj = adstack.load_top_adj %st : f32
    adstack.acc_adjoint %st, %top
    adstack.pop %st
    for %j = 0 to 2 {
      if %p {
        break
      } else {
        continue
      }
    }
    while {
      break
    }
  }
  parallel for (%r, %t2) = (0, 0) to (%n, 2) {
    %t0 = task_index 0
  }
  serial {
  }
}
)";

TEST(StmtKindsTest, EveryKindParsesAndPrintsBack) {
  auto m = parseModule(kEveryKind);
  ASSERT_TRUE(m.ok()) << m.status();
  std::set<StmtKind> seen;
  walk(*(*m)->kernels()[0], [&](Stmt &s) { seen.insert(s.kind()); });
  // A kind added to StmtKinds.def needs a line above.
  EXPECT_EQ(seen.size(), kNumStmtKinds);
  EXPECT_EQ(printModule(**m), kEveryKind);
}

/// Names the hook each kind reaches; compiling it checks that the exhaustive
/// visitor accepts a class with one hook per kind.
class KindRecorder : public ExhaustiveStmtVisitor<KindRecorder, std::string> {
public:
#define QD_STMT(KIND, CLASS, ...)                                                                  \
  std::string visit##CLASS(CLASS &) {                                                              \
    return #CLASS;                                                                                 \
  }
#include "qd/ir/StmtKinds.def"
};

TEST(StmtKindsTest, ExhaustiveVisitorDispatchesToTheConcreteClass) {
  KindRecorder r;
  auto c = ConstStmt::getFloat(ScalarType::F32, 1.0);
  auto st = std::make_unique<AdStackAllocaStmt>(ScalarType::F32, 2);
  AdStackAccAdjointStmt acc(st.get(), c.get());
  WhileStmt w;
  EXPECT_EQ(r.visit(*c), "ConstStmt");
  EXPECT_EQ(r.visit(acc), "AdStackAccAdjointStmt");
  EXPECT_EQ(r.visit(w), "WhileStmt");
  acc.dropAllReferences();
}

} // namespace
} // namespace qd
