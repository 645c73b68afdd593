//===- fuzz/SizeExprSeeds.cpp - Seed corpus of qd-fuzz-sizeexpr ------------===//
//
// qd-fuzz-sizeexpr-seeds OUTDIR [FILE.qd...]
//
// Writes serialised SizeExprs into OUTDIR, one file each: hand-made
// expressions covering every node kind (nested and shared maxima, reads with
// indices, saturating constants), plus the launch-time bound of every
// adstack that sizeAdStacks gives a SizeExpr in the given .qd files (split on
// `// -----` lines).
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackSizing.h"
#include "qd/analysis/SizeExpr.h"
#include "qd/ir/Module.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using qd::SizeExpr;
using qd::SizeExprKind;
using qd::SizeExprRef;

namespace {

std::vector<SizeExprRef> handMade() {
  auto c = SizeExpr::constant;
  auto n = SizeExpr::scalarArg(0);
  auto m = SizeExpr::scalarArg(3);
  auto v0 = SizeExpr::boundVar(0);
  auto v1 = SizeExpr::boundVar(1);
  auto shape = SizeExpr::ndarrayShape(1, 0);
  std::vector<SizeExprRef> out;
  out.push_back(c(0));
  out.push_back(c(-5));
  out.push_back(c(std::numeric_limits<int64_t>::max()));
  out.push_back(n);
  out.push_back(SizeExpr::tripCount(c(1), n));
  out.push_back(SizeExpr::mul(c(2), SizeExpr::max(SizeExpr::sub(n, c(1)), c(0))));
  out.push_back(SizeExpr::add(SizeExpr::fieldLoad("n", {}), c(3)));
  out.push_back(SizeExpr::fieldLoad("counts", {SizeExpr::add(n, c(-1))}));
  out.push_back(shape);
  out.push_back(SizeExpr::mul(shape, SizeExpr::ndarrayShape(1, 1)));
  // max(%i in [0, shape(%a, 0)): %a[%i])
  out.push_back(SizeExpr::maxOverRange(0, c(0), shape, SizeExpr::ndarrayRead(1, {v0})));
  // Nested ranges, the inner one bounded by the outer variable.
  out.push_back(SizeExpr::maxOverRange(
      0, c(0), n,
      SizeExpr::add(SizeExpr::maxOverRange(1, c(0), v0, SizeExpr::fieldLoad("counts", {v0, v1})),
                    c(1))));
  // A monotone body (evaluated at the last iteration) and a huge range.
  out.push_back(SizeExpr::maxOverRange(0, c(0), SizeExpr::scalarArg(5), SizeExpr::mul(c(2), v0)));
  out.push_back(SizeExpr::maxOverRange(
      0, SizeExpr::scalarArg(2), SizeExpr::scalarArg(4),
      SizeExpr::sub(SizeExpr::ndarrayRead(2, {SizeExpr::sub(v0, c(1))}), v0)));
  // A taped triangular nest: max over i of the sum over j < a[i] of j, and
  // a sum over a huge range (bounded by trip * max).
  out.push_back(SizeExpr::maxOverRange(
      0, c(0), shape,
      SizeExpr::sumOverRange(1, c(0), SizeExpr::ndarrayRead(1, {v0}), SizeExpr::max(v1, c(0)))));
  out.push_back(SizeExpr::sumOverRange(0, c(0), SizeExpr::scalarArg(5), v0));
  // Saturation: a product of two launch-time values.
  out.push_back(SizeExpr::mul(SizeExpr::scalarArg(5), SizeExpr::scalarArg(5)));
  // A shared subtree (serialised once, referred to twice).
  auto shared = SizeExpr::max(SizeExpr::add(n, m), SizeExpr::fieldLoad("n", {}));
  out.push_back(SizeExpr::add(shared, SizeExpr::mul(shared, c(3))));
  // A flattened index (rows plan), min and a narrowing cast (format v3).
  out.push_back(SizeExpr::maxOverRange(
      0, c(0), SizeExpr::mul(n, m),
      SizeExpr::add(SizeExpr::div(v0, m), SizeExpr::min(SizeExpr::rem(v0, m), c(7)))));
  out.push_back(SizeExpr::trunc32(SizeExpr::mul(n, SizeExpr::scalarArg(5))));
  // Unsimplified nodes as deserialisation builds them.
  out.push_back(SizeExpr::make(SizeExprKind::Add, {c(1), c(2)}));
  out.push_back(SizeExpr::make(SizeExprKind::MaxOverRange, {c(0), c(4), v0}, 0, 0));
  return out;
}

std::string readFile(const char *path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUTDIR [FILE.qd...]\n", argv[0]);
    return 2;
  }
  std::string outDir = argv[1];
  std::vector<SizeExprRef> exprs = handMade();
  for (int i = 2; i < argc; ++i) {
    std::string text = readFile(argv[i]);
    for (const qd::SourceChunk &chunk : qd::splitSourceChunks(text)) {
      auto m = qd::parseModule(chunk.text);
      if (!m.ok() || !qd::verify(**m).ok())
        continue;
      for (const auto &kernel : (*m)->kernels()) {
        qd::KernelSizing sizing = qd::sizeAdStacks(*kernel);
        for (const qd::AdStackSize &s : sizing.stacks())
          if (s.tier == qd::SizingTier::LaunchTime && s.expr)
            exprs.push_back(s.expr);
      }
    }
  }
  unsigned written = 0;
  for (const SizeExprRef &e : exprs) {
    std::vector<uint8_t> bytes = qd::serializeSizeExpr(*e);
    std::ostringstream name;
    name << outDir << "/sizeexpr-" << written++ << ".bin";
    std::ofstream out(name.str(), std::ios::binary);
    out.write(reinterpret_cast<const char *>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", name.str().c_str());
      return 1;
    }
  }
  std::printf("qd-fuzz-sizeexpr-seeds: %u seeds in %s\n", written, outDir.c_str());
  return 0;
}
