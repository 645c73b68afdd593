//===- ProgramGenOps.cpp - The operators generated programs use -----------===//
#include "ProgramGen.h"

#include "qd/ir/Parser.h"
#include "qd/ir/Visitor.h"

namespace qd::testgen {

void collectOperators(const Module &m, OperatorUse &use) {
  for (const std::unique_ptr<Kernel> &k : m.kernels())
    walk(k->body(), [&](Stmt &s) {
      if (auto *b = dyn_cast<BinaryStmt>(&s))
        use.binary.insert(b->op());
      else if (auto *u = dyn_cast<UnaryStmt>(&s))
        use.unary.insert(u->op());
      else if (auto *c = dyn_cast<CmpStmt>(&s))
        use.cmp.insert(c->predicate());
      else if (auto *a = dyn_cast<AtomicRmwStmt>(&s))
        use.atomic.insert(a->op());
    });
}

OperatorUse generatedOperators(int count, uint64_t seed) {
  OperatorUse use;
  rc::Random random(seed);
  std::vector<GenConfig> presets = presetConfigs();
  constexpr int kMaxSize = 100; // RapidCheck's default max_size
  for (int i = 0; i < count; ++i) {
    const GenConfig &config = presets[size_t(i) % presets.size()];
    GenProgram p = genProgram(config)(random.split(), i * kMaxSize / std::max(count, 1)).value();
    absl::StatusOr<std::unique_ptr<Module>> m = parseModule(print(p).text);
    if (!m.ok()) {
      ADD_FAILURE() << "a generated " << config.name << " program does not parse: " << m.status()
                    << "\n"
                    << print(p).text;
      continue;
    }
    collectOperators(**m, use);
  }
  return use;
}

} // namespace qd::testgen
