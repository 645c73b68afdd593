//===- SizeExprSerialisationTest.cpp - SizeExpr serialisation -------------===//
//
// The binary encoding of SizeExprs: round trips of hand-picked
// expressions, and the rejection of malformed encodings.
//
//===----------------------------------------------------------------------===//
#include "SizeExprTestInputs.h"

namespace qd {
namespace {

using namespace sizeexprtest;

//===----------------------------------------------------------------------===//
// Serialisation
//===----------------------------------------------------------------------===//

std::vector<SizeExprRef> handPicked() {
  return {
      c(0),
      c(-1),
      c(63),
      c(64),
      c(-65),
      c(I64::max()),
      c(I64::min()),
      arg(0),
      arg(1u << 20),
      SizeExpr::fieldLoad("s", {}),
      SizeExpr::fieldLoad("m", {c(1), arg(0)}),
      SizeExpr::fieldLoad("", {}),
      SizeExpr::ndarrayShape(3, 1),
      SizeExpr::ndarrayRead(3, {c(1), c(2)}),
      SizeExpr::tripCount(arg(0), arg(1)),
      SizeExpr::add(c(I64::max()), c(1)),
      SizeExpr::mul(c(2), SizeExpr::max(SizeExpr::sub(arg(0), c(1)), c(0))),
      SizeExpr::maxOverRange(0, c(0), SizeExpr::ndarrayShape(1, 0), read(1, var(0))),
      SizeExpr::maxOverRange(
          0, c(0), arg(0),
          SizeExpr::maxOverRange(1, var(0), SizeExpr::ndarrayShape(1, 0),
                                 SizeExpr::sub(read(1, var(1)), read(1, var(0))))),
      SizeExpr::maxOverRange(0, c(0), c(3), SizeExpr::maxOverRange(0, c(0), var(0), var(0))),
  };
}

TEST(SizeExprTest, SerialisationRoundTripsHandPicked) {
  FakeInputs in = sampleInputs();
  for (const SizeExprRef &e : handPicked()) {
    std::vector<uint8_t> bytes = serializeSizeExpr(*e);
    ASSERT_GE(bytes.size(), 10u);
    EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "QDSX");
    EXPECT_EQ(bytes[4], kSizeExprFormatVersion);
    EXPECT_EQ(bytes[5] | bytes[6] | bytes[7], 0);
    auto back = deserializeSizeExpr(bytes);
    ASSERT_TRUE(back.ok()) << back.status() << " for " << print(e);
    EXPECT_TRUE((*back)->equals(*e)) << print(*back) << " vs " << print(e);
    EXPECT_EQ(print(*back), print(e));
    EXPECT_EQ(evalText(**back, in, 10000), evalText(*e, in, 10000)) << print(e);
    EXPECT_EQ(serializeSizeExpr(**back), bytes);
  }
}

TEST(SizeExprTest, SerialisationEncodesConstantsCompactly) {
  // Header (8) + count (1) + kind (1) + zigzag varint.
  EXPECT_EQ(serializeSizeExpr(*c(0)).size(), 11u);
  EXPECT_EQ(serializeSizeExpr(*c(-64)).size(), 11u);
  EXPECT_EQ(serializeSizeExpr(*c(64)).size(), 12u);
  EXPECT_EQ(serializeSizeExpr(*c(I64::min())).size(), 20u);
  std::vector<uint8_t> expected = {'Q', 'D', 'S', 'X', 3, 0, 0, 0, 1, 0, 3};
  EXPECT_EQ(serializeSizeExpr(*c(-2)), expected);
}

TEST(SizeExprTest, SharedSubtreesSerialiseOnce) {
  auto build = [] {
    return SizeExpr::add(SizeExpr::mul(c(3), arg(1)),
                         SizeExpr::maxOverRange(0, c(0), arg(0), read(2, var(0))));
  };
  auto s = build();
  auto dag = SizeExpr::make(K::Max, {s, s});
  auto tree = SizeExpr::make(K::Max, {s, build()});
  EXPECT_TRUE(dag->equals(*tree));
  EXPECT_EQ(dag->size(), tree->size());
  std::vector<uint8_t> dagBytes = serializeSizeExpr(*dag);
  std::vector<uint8_t> treeBytes = serializeSizeExpr(*tree);
  EXPECT_LT(dagBytes.size(), treeBytes.size());
  // 9 nodes in s: shared, the DAG has 10 nodes, the tree 19.
  EXPECT_EQ(dagBytes[8], 10);
  EXPECT_EQ(treeBytes[8], 19);
  auto back = deserializeSizeExpr(dagBytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE((*back)->equals(*tree));
  // Sharing survives the round trip.
  EXPECT_EQ((*back)->operands()[0].get(), (*back)->operands()[1].get());
  EXPECT_EQ(serializeSizeExpr(**back), dagBytes);
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, std::initializer_list<uint8_t> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The deserialiser's error for `bytes`; fails the test if it succeeded.
std::string rejection(const std::vector<uint8_t> &bytes) {
  auto r = deserializeSizeExpr(bytes);
  EXPECT_FALSE(r.ok()) << "accepted " << print(*r);
  if (r.ok())
    return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

constexpr uint8_t kConst = 0, kArg = 1, kField = 2, kRead = 4, kVar = 5, kAdd = 6, kMor = 10,
                  kSor = 11;

TEST(SizeExprTest, HandWrittenEncodingsDecode) {
  // add(arg 3, const -2) as nodes [arg 3, const -2, add(0, 1)].
  auto e = deserializeSizeExpr(cat(header(3), {kArg, 3, kConst, 3, kAdd, 0, 1}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(print(*e), "%arg3 + -2");
  // max(%v1 in [0, 4): %v1) as [const 0, const 4, var 1, mor 1 (0, 1, 2)].
  auto m = deserializeSizeExpr(cat(header(4), {kConst, 0, kConst, 8, kVar, 1, kMor, 1, 0, 1, 2}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(print(*m), "max(%v1 in [0, 4): %v1)");
  // A field load: name length, name, index count, indices.
  auto f = deserializeSizeExpr(cat(header(2), {kConst, 2, kField, 2, 'a', 'b', 1, 0}));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(print(*f), "@ab[1]");
  // sum(%v0 in [0, 4): %v0), format version 2.
  auto sum = deserializeSizeExpr(cat(header(4), {kConst, 0, kConst, 8, kVar, 0, kSor, 0, 0, 1, 2}));
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(print(*sum), "sum(%v0 in [0, 4): %v0)");
}

TEST(SizeExprTest, DeserialiserRejectsNonCanonicalVarints) {
  // const 1 is [kind 0, zigzag 2]; 0x82 0x00 is the same value padded.
  ASSERT_TRUE(deserializeSizeExpr(cat(header(1), {kConst, 2})).ok());
  std::string msg = rejection(cat(header(1), {kConst, 0x82, 0x00}));
  EXPECT_TRUE(contains(msg, "const")) << msg;
  // A padded node count.
  std::vector<uint8_t> padded = {'Q', 'D', 'S', 'X', 2, 0, 0, 0, 0x81, 0x00, kConst, 2};
  msg = rejection(padded);
  EXPECT_TRUE(contains(msg, "node count")) << msg;
  // Ten bytes whose last one carries bits past 64.
  msg = rejection(
      cat(header(1), {kConst, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}));
  EXPECT_TRUE(contains(msg, "const")) << msg;
  // The largest value still decodes: zigzag(INT64_MIN) = 2^64 - 1.
  auto big = deserializeSizeExpr(
      cat(header(1), {kConst, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ((*big)->value(), I64::min());
}

TEST(SizeExprTest, VersionOneDataStillDecodesButHasNoSums) {
  // Kernels cached by a version-1 library size their stacks as before.
  auto m = deserializeSizeExpr(
      cat(header(4, /*version=*/1), {kConst, 0, kConst, 8, kVar, 1, kMor, 1, 0, 1, 2}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(print(*m), "max(%v1 in [0, 4): %v1)");
  std::string msg =
      rejection(cat(header(4, /*version=*/1), {kConst, 0, kConst, 8, kVar, 0, kSor, 0, 0, 1, 2}));
  EXPECT_TRUE(contains(msg, "unknown node kind 11 in format version 1")) << msg;
  msg = rejection(cat(header(1), {12}));
  EXPECT_TRUE(contains(msg, "unknown node kind 12 in format version 2")) << msg;
}

TEST(SizeExprTest, DeserialiserRejectsBadHeaders) {
  EXPECT_TRUE(contains(rejection({}), "QDSX"));
  EXPECT_TRUE(contains(rejection({'Q', 'D', 'S'}), "QDSX"));
  EXPECT_TRUE(contains(rejection(cat({'Q', 'D', 'S', 'Y', 1, 0, 0, 0, 1}, {kConst, 0})), "QDSX"));
  std::vector<uint8_t> good = serializeSizeExpr(*c(5));
  ASSERT_TRUE(deserializeSizeExpr(good).ok());
  std::vector<uint8_t> v4 = good;
  v4[4] = 4;
  std::string msg = rejection(v4);
  EXPECT_TRUE(contains(msg, "version 4")) << msg;
  EXPECT_TRUE(contains(msg, "versions 1 to 3")) << msg;
  std::vector<uint8_t> v0 = good;
  v0[4] = 0;
  msg = rejection(v0);
  EXPECT_TRUE(contains(msg, "version 0")) << msg;
  std::vector<uint8_t> vHigh = good;
  vHigh[7] = 1; // version 0x01000003
  msg = rejection(vHigh);
  EXPECT_TRUE(contains(msg, "version 16777219")) << msg;
  // No nodes.
  msg = rejection(header(0));
  EXPECT_TRUE(contains(msg, "node count")) << msg;
  msg = rejection({'Q', 'D', 'S', 'X', 1, 0, 0, 0});
  EXPECT_TRUE(contains(msg, "node count")) << msg;
  // More nodes than bytes.
  msg = rejection(cat(header(1000), {kConst, 0}));
  EXPECT_TRUE(contains(msg, "1000 nodes")) << msg;
  msg = rejection(cat(header(~uint64_t(0)), {kConst, 0}));
  EXPECT_FALSE(msg.empty());
}

TEST(SizeExprTest, DeserialiserRejectsEveryTruncation) {
  for (const SizeExprRef &e : handPicked()) {
    std::vector<uint8_t> bytes = serializeSizeExpr(*e);
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
      EXPECT_FALSE(deserializeSizeExpr(prefix).ok()) << print(e) << " cut at " << n;
    }
  }
}

TEST(SizeExprTest, DeserialiserRejectsBadReferences) {
  // Self reference.
  std::string msg = rejection(cat(header(1), {kAdd, 0, 0}));
  EXPECT_TRUE(contains(msg, "node 0 refers to node 0")) << msg;
  // Forward reference.
  msg = rejection(cat(header(3), {kConst, 1, kAdd, 0, 2, kConst, 2}));
  EXPECT_TRUE(contains(msg, "node 1 refers to node 2")) << msg;
  // A reference past every node.
  msg = rejection(cat(header(2), {kConst, 1, kAdd, 0, 0x80, 0x80, 0x04}));
  EXPECT_TRUE(contains(msg, "refers to node 65536")) << msg;
  // Missing operands.
  msg = rejection(cat(header(2), {kConst, 1, kAdd, 0}));
  EXPECT_TRUE(contains(msg, "truncated")) << msg;
}

TEST(SizeExprTest, DeserialiserRejectsBadNodes) {
  std::string msg = rejection(cat(header(1), {16}));
  EXPECT_TRUE(contains(msg, "unknown node kind 16")) << msg;
  msg = rejection(cat(header(1), {0xff}));
  EXPECT_TRUE(contains(msg, "unknown node kind 255")) << msg;
  // Trailing bytes after a valid encoding.
  std::vector<uint8_t> bytes = serializeSizeExpr(*SizeExpr::add(arg(0), c(1)));
  bytes.push_back(0);
  msg = rejection(bytes);
  EXPECT_TRUE(contains(msg, "trailing")) << msg;
  // An unbound variable, alone or next to a range binding another one.
  msg = rejection(cat(header(1), {kVar, 0}));
  EXPECT_TRUE(contains(msg, "%v0")) << msg;
  msg = rejection(cat(header(4), {kConst, 0, kConst, 8, kVar, 1, kMor, 2, 0, 1, 2}));
  EXPECT_TRUE(contains(msg, "%v1")) << msg;
  // The variable of a range in its own bounds.
  msg = rejection(cat(header(4), {kConst, 0, kVar, 1, kConst, 0, kMor, 1, 0, 1, 2}));
  EXPECT_TRUE(contains(msg, "%v1")) << msg;
  // A payload past its limit: an argument index over 2^20.
  msg = rejection(cat(header(1), {kArg, 0x81, 0x80, 0x80, 0x01}));
  EXPECT_TRUE(contains(msg, "scalar_arg")) << msg;
  // A varint longer than 10 bytes.
  msg = rejection(
      cat(header(1), {kConst, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0}));
  EXPECT_TRUE(contains(msg, "const")) << msg;
  // A field name longer than the input.
  msg = rejection(cat(header(1), {kField, 20, 'a', 0}));
  EXPECT_TRUE(contains(msg, "field_load")) << msg;
}

TEST(SizeExprTest, DeserialiserLimitsOperandCounts) {
  auto reads = [](uint8_t kind, unsigned count) {
    std::vector<uint8_t> b = cat(header(2), {kConst, 2, kind});
    if (kind == kField)
      b.insert(b.end(), {1, 'f'});
    else
      b.push_back(0); // argument 0
    b.push_back(static_cast<uint8_t>(count));
    b.insert(b.end(), count, 0); // every index is node 0
    return b;
  };
  for (uint8_t kind : {kField, kRead}) {
    auto ok = deserializeSizeExpr(reads(kind, 64));
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ((*ok)->operands().size(), 64u);
    std::string msg = rejection(reads(kind, 65));
    EXPECT_TRUE(contains(msg, "bad or truncated payload")) << msg;
  }
}

TEST(SizeExprTest, DeserialiserLimitsNesting) {
  // A chain add(add(...(1, 1)...), 1) of the given depth.
  auto chain = [](unsigned depth) {
    SizeExprRef e = c(1);
    for (unsigned d = 1; d < depth; ++d)
      e = SizeExpr::make(K::Add, {e, c(1)});
    return e;
  };
  auto deepest = deserializeSizeExpr(serializeSizeExpr(*chain(4096)));
  ASSERT_TRUE(deepest.ok()) << deepest.status();
  EXPECT_EQ((*deepest)->size(), 2u * 4096 - 1);
  FakeInputs in;
  EXPECT_EQ(valueOf(*deepest, in), 4096);
  std::string msg = rejection(serializeSizeExpr(*chain(4097)));
  EXPECT_TRUE(contains(msg, "nesting exceeds 4096")) << msg;
  msg = rejection(serializeSizeExpr(*chain(6000)));
  EXPECT_TRUE(contains(msg, "nesting exceeds 4096")) << msg;
}

} // namespace
} // namespace qd
