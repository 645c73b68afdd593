//===- ProgramGen.cpp - Random well-formed qd programs for properties -----===//
//
// Generation, shrinking and properties of random programs; printing is in
// ProgramGenPrint.cpp, running in ProgramGenRun.cpp.
//
// Choice slots. Every statement reads its choices at fixed positions, so
// shrinking one choice never changes what the others mean:
//
//   operand  (4): kind (local, @x, SSA value, %u, %s), which, index (2)
//   intref   (2): kind (variable in scope, %ic), which
//   expr    (10): op, operand a (4), operand b (4), constant
//   bound    (3): kind, which, constant
//   cond    (10): kind, comparison, operand a (4), operand b (4)
//
//   Assign    local, expr@1
//   Let       expr@0
//   Output    target, which field, operand@2 (or cond@6 for the i1 output)
//   IntUpdate local (%ic / %im), op, constant, operand@3
//   Stack     element type
//   Push      stack, operand@1 (f64) / intref@1 (i32)
//   Pop       stack, extra (none, load_top to an output, adjoint ops), operand@2
//   WriteData element
//   For       begin kind, begin bound@1, end bound@4
//   If        cond@0
//   While     trip limit, data break, cond@2
//   Jump      break or continue, push before, stack, cond@3, push operand@13
//   task      top bound kind, top constant, locals, then 6 slots per local
//             (init intref (2), init source, final output, 2 spare)
//
//===----------------------------------------------------------------------===//
#include "ProgramGen.h"
#include "ProgramGenPrinter.h"

#include "qd/ir/Printer.h"
#include "qd/ir/Scalar.h"
#include "qd/ir/Verifier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_map>

namespace rc::detail {
TestListener &globalTestListener();
} // namespace rc::detail

namespace qd::testgen {

const char *toString(StmtKind k) {
  static const char *names[kNumStmtKinds] = {"assign", "let",  "output", "int-update",
                                             "stack",  "push", "pop",    "write-data",
                                             "for",    "if",   "while",  "jump"};
  return names[static_cast<int>(k)];
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

GenConfig GenConfig::autodiff() {
  GenConfig c;
  c.name = "autodiff";
  c.maxTasks = 2;
  c.serialTasks = true;
  c.threads = 2;
  c.f32 = false; // f32 rounding makes finite differences meaningless
  c.integerOutputs = false;
  return c;
}

GenConfig GenConfig::sizing() {
  GenConfig c;
  c.name = "sizing";
  c.maxTasks = 2;
  c.serialTasks = true;
  c.threads = 5;
  c.launchTimeTop = true;
  c.adstacks = true;
  c.writesBoundData = true;
  c.maxBoundValue = 6;
  c.maxNdarrayLen = 5;
  c.maxBlock = 4;
  //         asg let out int stk psh pop wrt for if whl jmp
  int w[] = {1, 0, 1, 1, 1, 4, 2, 1, 4, 2, 2, 2};
  std::copy(std::begin(w), std::end(w), c.weights);
  return c;
}

GenConfig GenConfig::cpu(bool adstacks) {
  GenConfig c;
  c.name = adstacks ? "cpu-adstacks" : "cpu";
  c.maxTasks = 2;
  c.serialTasks = true;
  c.threads = 6;
  c.launchTimeTop = true;
  c.maxNdarrayLen = 6;
  c.adstacks = adstacks;
  if (adstacks) {
    c.weights[static_cast<int>(StmtKind::Stack)] = 1;
    c.weights[static_cast<int>(StmtKind::Push)] = 2;
    c.weights[static_cast<int>(StmtKind::Pop)] = 1;
  }
  return c;
}

GenConfig GenConfig::everything() {
  GenConfig c;
  c.name = "everything";
  c.maxTasks = 3;
  c.serialTasks = true;
  c.threads = 4;
  c.launchTimeTop = true;
  c.adstacks = true;
  c.writesBoundData = true;
  c.adstackPercent = 40; // reverse-ad and forward-ad refuse kernels with adstacks
  c.dualCompanions = true;
  c.maxBoundValue = 4;
  //         asg let out int stk psh pop wrt for if whl jmp
  int w[] = {3, 1, 1, 1, 1, 1, 1, 1, 3, 2, 2, 1};
  std::copy(std::begin(w), std::end(w), c.weights);
  return c;
}

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

namespace {

uint8_t at(const std::vector<uint8_t> &v, size_t i) {
  return i < v.size() ? v[i] : 0;
}

/// 0, -1, 1, -2, 2, ... for 0, 1, 2, 3, 4, ...: choices near 0 are small.
int zigzag(int k) {
  return k % 2 == 0 ? k / 2 : -(k + 1) / 2;
}

} // namespace

double xValue(const GenProgram &p, int k) {
  return (zigzag(at(p.inputs.x, size_t(k)) % 200) + 0.5) / 97;
}
std::vector<double> xValues(const GenProgram &p) {
  std::vector<double> v;
  for (int k = 0; k < p.config.xLen; ++k)
    v.push_back(xValue(p, k));
  return v;
}
std::vector<int64_t> cntValues(const GenProgram &p) {
  std::vector<int64_t> v;
  for (size_t k = 0; k < 3; ++k)
    v.push_back(at(p.inputs.cnt, k) % (p.config.maxBoundValue + 1));
  return v;
}
std::vector<int64_t> bitValues(const GenProgram &p) {
  std::vector<int64_t> v;
  for (size_t k = 0; k < 3; ++k)
    v.push_back(at(p.inputs.cnt, k) / 7 % 2);
  return v;
}
int64_t nValue(const GenProgram &p) {
  return p.inputs.n % (p.config.maxBoundValue + 1);
}
double sValue(const GenProgram &p) {
  return zigzag(p.inputs.s % 199) / 101.0;
}
std::vector<int64_t> aShape(const GenProgram &p) {
  return {1 + p.inputs.aLen % std::max(1, p.config.maxNdarrayLen)};
}
std::vector<int64_t> aValues(const GenProgram &p) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < aShape(p)[0]; ++k)
    v.push_back(at(p.inputs.a, size_t(k)) % (p.config.maxBoundValue + 1));
  return v;
}
std::vector<int64_t> mShape(const GenProgram &p) {
  return {1 + p.inputs.rows % 3, 1 + p.inputs.cols % 3};
}
std::vector<int64_t> mValues(const GenProgram &p) {
  std::vector<int64_t> v, s = mShape(p);
  for (int64_t k = 0; k < s[0] * s[1]; ++k)
    v.push_back(at(p.inputs.m, size_t(k)) % (p.config.maxBoundValue + 1));
  return v;
}
std::vector<int64_t> uShape(const GenProgram &p) {
  return {1 + p.inputs.uLen % std::max(1, p.config.maxNdarrayLen)};
}
std::vector<double> uValues(const GenProgram &p) {
  std::vector<double> v;
  for (int64_t k = 0; k < uShape(p)[0]; ++k)
    v.push_back((zigzag(at(p.inputs.u, size_t(k)) % 200) + 0.5) / 89);
  return v;
}
std::vector<int64_t> wShape(const GenProgram &p) {
  return {p.config.threads};
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

namespace {

class Builder {
public:
  Builder(const GenConfig &cfg, const rc::Random &random, int size)
      : cfg_(cfg), rnd_(random), size_(std::clamp(size, 0, 400)) {}

  GenProgram build() {
    GenProgram p;
    p.config = cfg_;
    p.config.adstacks = cfg_.adstacks && below(100) < cfg_.adstackPercent;
    cfg_ = p.config;
    // RapidCheck's size (0 to max_size, 100 by default) scales the number of
    // tasks, the statements per task and the nesting depth; with
    // RC_PARAMS="max_size=200" task bodies get longer still.
    int maxTasks = std::min(cfg_.maxTasks, 1 + (cfg_.maxTasks - 1) * size_ / 100);
    int numTasks = 1 + below(maxTasks);
    depthLimit_ = std::min(cfg_.maxDepth, 1 + size_ / 25);
    for (int t = 0; t < numTasks; ++t) {
      GenTask task;
      task.parallel = t == 0 || !cfg_.serialTasks || below(2) == 0;
      task.c = choices(25);
      if (cfg_.adstacks)
        for (int k = 1 + below(3); k > 0; --k)
          task.body.push_back(leaf(StmtKind::Stack));
      parallelTask_ = task.parallel;
      auto body = block(0, 0, topLength());
      task.body.insert(task.body.end(), body.begin(), body.end());
      p.tasks.push_back(std::move(task));
    }
    GenInputs &in = p.inputs;
    in.x = choices(cfg_.xLen);
    in.cnt = choices(3);
    in.n = uint8_t(below(240));
    in.s = uint8_t(below(240));
    in.aLen = uint8_t(below(240));
    in.a = choices(cfg_.maxNdarrayLen);
    in.rows = uint8_t(below(240));
    in.cols = uint8_t(below(240));
    in.m = choices(9);
    in.uLen = uint8_t(below(240));
    in.u = choices(cfg_.maxNdarrayLen);
    return p;
  }

private:
  int below(int n) { return n <= 1 ? 0 : int(rnd_.next() % uint64_t(n)); }
  std::vector<uint8_t> choices(int n) {
    std::vector<uint8_t> c(static_cast<size_t>(n));
    for (uint8_t &x : c)
      x = uint8_t(below(240)); // 240: divisible by 2, 3, 4, 5, 6, 8, 10, 12, 15, 16
    return c;
  }
  int topLength() { return 1 + below(1 + (2 * cfg_.maxBlock - 1) * (size_ + 10) / 110); }
  int nestedLength() { return 1 + below(cfg_.maxBlock); }

  GenStmt leaf(StmtKind k) {
    GenStmt s;
    s.kind = k;
    s.c = choices(16);
    return s;
  }

  /// A task body has a loop (or an if) somewhere at its top level.
  std::vector<GenStmt> block(int depth, int loopDepth, int length) {
    std::vector<GenStmt> out;
    int control = depth == 0 ? below(length) : -1;
    for (int i = 0; i < length; ++i)
      out.push_back(stmt(depth, loopDepth, i == control));
    return out;
  }

  GenStmt stmt(int depth, int loopDepth, bool control = false) {
    int w[kNumStmtKinds];
    int total = 0;
    for (int k = 0; k < kNumStmtKinds; ++k) {
      auto kind = static_cast<StmtKind>(k);
      bool ok = true;
      switch (kind) {
      case StmtKind::Assign:
        ok = cfg_.floatLocals;
        break;
      case StmtKind::IntUpdate:
        ok = cfg_.intLocals;
        break;
      case StmtKind::Stack:
      case StmtKind::Push:
      case StmtKind::Pop:
        ok = cfg_.adstacks;
        break;
      case StmtKind::WriteData:
        ok = cfg_.writesBoundData;
        break;
      case StmtKind::For:
        ok = depth < depthLimit_;
        break;
      case StmtKind::If:
        ok = cfg_.ifs && depth < depthLimit_;
        break;
      case StmtKind::While:
        ok = cfg_.whileLoops && depth < depthLimit_;
        break;
      case StmtKind::Jump:
        ok = cfg_.jumps && (loopDepth > 0 || parallelTask_); // `continue` in a parallel for
        break;
      default:
        break;
      }
      if (control && kind != StmtKind::For && kind != StmtKind::While && kind != StmtKind::If)
        ok = false;
      w[k] = ok ? cfg_.weights[k] : 0;
      total += w[k];
    }
    if (total == 0)
      return leaf(StmtKind::Output);
    int r = below(total), k = 0;
    while (r >= w[k])
      r -= w[k++];
    GenStmt s = leaf(static_cast<StmtKind>(k));
    switch (s.kind) {
    case StmtKind::For:
      if (cfg_.adstacks && below(4) == 0)
        s.body.push_back(leaf(StmtKind::Stack));
      for (GenStmt &b : block(depth + 1, loopDepth + 1, nestedLength()))
        s.body.push_back(std::move(b));
      break;
    case StmtKind::While:
      if (cfg_.adstacks && below(4) == 0)
        s.body.push_back(leaf(StmtKind::Stack));
      for (GenStmt &b : block(depth + 1, loopDepth + 1, nestedLength()))
        s.body.push_back(std::move(b));
      break;
    case StmtKind::If:
      s.body = block(depth + 1, loopDepth, nestedLength());
      if (below(2))
        s.orelse = block(depth + 1, loopDepth, nestedLength());
      break;
    case StmtKind::Jump:
      if (below(2) && depth + 1 < cfg_.maxDepth + 1)
        s.body = block(depth + 1, 0, 1); // no nested jump: it would leave the if
      break;
    default:
      break;
    }
    return s;
  }

  GenConfig cfg_;
  rc::Random rnd_;
  int size_;
  int depthLimit_ = 1;
  bool parallelTask_ = false;
};

} // namespace

rc::Gen<GenProgram> genProgram(GenConfig config) {
  return rc::Gen<GenProgram>([config](const rc::Random &random, int size) {
    GenProgram p = Builder(config, random, size).build();
    return rc::shrinkable::shrinkRecur(
        std::move(p), [](const GenProgram &q) { return rc::seq::fromContainer(shrinks(q)); });
  });
}

std::vector<GenConfig> presetConfigs() {
  return {GenConfig::autodiff(), GenConfig::sizing(), GenConfig::cpu(), GenConfig::cpu(true),
          GenConfig::everything()};
}

rc::Gen<GenProgram> genAnyProgram() {
  return rc::gen::mapcat(rc::gen::inRange<size_t>(0, presetConfigs().size()),
                         [](size_t k) { return genProgram(presetConfigs()[k]); });
}

//===----------------------------------------------------------------------===//
// Shrinking
//===----------------------------------------------------------------------===//

namespace {

using Path = std::vector<std::pair<int, int>>; // (0 body | 1 orelse, index) from a task body

/// Every statement of `tasks[t]`, with its path, in preorder.
void collect(const std::vector<GenStmt> &block, int which, Path &path,
             std::vector<std::pair<Path, const GenStmt *>> &out) {
  for (size_t i = 0; i < block.size(); ++i) {
    path.push_back({which, int(i)});
    out.push_back({path, &block[i]});
    collect(block[i].body, 0, path, out);
    collect(block[i].orelse, 1, path, out);
    path.pop_back();
  }
}

std::vector<GenStmt> &blockAt(GenTask &t, const Path &path, size_t len) {
  std::vector<GenStmt> *b = &t.body;
  for (size_t k = 0; k < len; ++k) {
    GenStmt &s = (*b)[size_t(path[k].second)];
    b = path[k + 1].first == 0 ? &s.body : &s.orelse;
  }
  return *b;
}

/// The parent block of the statement at `path` and its index in it.
std::pair<std::vector<GenStmt> *, size_t> locate(GenTask &t, const Path &path) {
  return {&blockAt(t, path, path.size() - 1), size_t(path.back().second)};
}

void shrinkChoices(std::vector<uint8_t> &c, int used, const std::function<void()> &emit) {
  for (int i = 0; i < std::min<int>(used, int(c.size())); ++i) {
    uint8_t v = c[size_t(i)];
    if (v == 0)
      continue;
    std::set<uint8_t> tried;
    for (uint8_t to : {uint8_t(0), uint8_t(v / 2), uint8_t(v - 1)}) {
      if (!tried.insert(to).second || to == v)
        continue;
      c[size_t(i)] = to;
      emit();
    }
    c[size_t(i)] = v;
  }
}

} // namespace

std::vector<GenProgram> shrinks(const GenProgram &p) {
  std::vector<GenProgram> out;
  // Which choices the printer reads.
  detail::Usage usage = detail::choicesRead(p);

  // 1. Whole tasks.
  if (p.tasks.size() > 1)
    for (size_t t = 0; t < p.tasks.size(); ++t) {
      GenProgram q = p;
      q.tasks.erase(q.tasks.begin() + long(t));
      out.push_back(std::move(q));
    }
  std::vector<std::vector<std::pair<Path, const GenStmt *>>> stmts(p.tasks.size());
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    Path path;
    collect(p.tasks[t].body, 0, path, stmts[t]);
  }
  // 2. Statements (with everything inside them).
  for (size_t t = 0; t < p.tasks.size(); ++t)
    for (auto &[path, s] : stmts[t]) {
      GenProgram q = p;
      auto [block, i] = locate(q.tasks[t], path);
      block->erase(block->begin() + long(i));
      out.push_back(std::move(q));
    }
  // 3. A loop or if replaced by its body (or else arm); an else arm dropped.
  for (size_t t = 0; t < p.tasks.size(); ++t)
    for (auto &[path, s] : stmts[t]) {
      for (int arm = 0; arm < 2; ++arm) {
        const auto &inner = arm == 0 ? s->body : s->orelse;
        if (inner.empty())
          continue;
        GenProgram q = p;
        auto [block, i] = locate(q.tasks[t], path);
        std::vector<GenStmt> hoisted = inner;
        block->erase(block->begin() + long(i));
        block->insert(block->begin() + long(i), hoisted.begin(), hoisted.end());
        out.push_back(std::move(q));
      }
      if (!s->orelse.empty()) {
        GenProgram q = p;
        auto [block, i] = locate(q.tasks[t], path);
        (*block)[i].orelse.clear();
        out.push_back(std::move(q));
      }
    }
  // 4. Serial tasks instead of parallel ones.
  for (size_t t = 0; t < p.tasks.size(); ++t)
    if (p.tasks[t].parallel && p.config.serialTasks) {
      GenProgram q = p;
      q.tasks[t].parallel = false;
      out.push_back(std::move(q));
    }
  // 5. Simpler choices.
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    GenProgram q = p;
    auto it = usage.find(&p.tasks[t].c);
    shrinkChoices(q.tasks[t].c, it == usage.end() ? 0 : it->second, [&] { out.push_back(q); });
    for (auto &[path, s] : stmts[t]) {
      auto u = usage.find(&s->c);
      if (u == usage.end())
        continue;
      GenProgram r = p;
      auto [block, i] = locate(r.tasks[t], path);
      GenStmt &target = (*block)[i];
      shrinkChoices(target.c, u->second, [&] { out.push_back(r); });
    }
  }
  // 6. Simpler inputs.
  GenProgram q = p;
  auto emit = [&] { out.push_back(q); };
  GenInputs &in = q.inputs;
  for (std::vector<uint8_t> *v : {&in.x, &in.cnt, &in.a, &in.m, &in.u})
    shrinkChoices(*v, int(v->size()), emit);
  for (uint8_t *v : {&in.n, &in.s, &in.aLen, &in.rows, &in.cols, &in.uLen}) {
    std::vector<uint8_t> one{*v};
    uint8_t orig = *v;
    shrinkChoices(one, 1, [&] {
      *v = one[0];
      emit();
    });
    *v = orig;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Properties
//===----------------------------------------------------------------------===//

int caseCount(int fallback) {
  const char *params = std::getenv("RC_PARAMS");
  if (params && std::string(params).find("max_success") != std::string::npos)
    return rc::detail::configuration().testParams.maxSuccess;
  return fallback;
}

void checkProperty(void (*property)(), int defaultCases) {
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  params.maxSuccess = caseCount(defaultCases);
  // Named before the cases run: a run that a time limit stops still says
  // how to repeat it.
  std::cout << metadata.id << ": " << params.maxSuccess
            << " cases; to repeat them: RC_PARAMS=\"seed=" << params.seed << "\"" << std::endl;
  const auto result =
      rc::detail::checkTestable(property, metadata, params, rc::detail::globalTestListener(),
                                rc::detail::configuration().reproduce);
  std::ostringstream ss;
  rc::detail::printResultMessage(result, ss);
  if (result.template is<rc::detail::SuccessResult>()) {
    std::cout << ss.str() << std::endl;
  } else {
    FAIL() << ss.str() << std::endl;
  }
}

void reportCounterexample(const GenProgram &p, const std::string &what) {
  const char *dir = std::getenv("QD_COUNTEREXAMPLE_DIR");
  if (!dir || !*dir)
    return;
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "property";
  std::filesystem::create_directories(dir);
  std::ofstream out(std::filesystem::path(dir) / (name + ".qd"));
  std::istringstream lines(what);
  out << "// Counterexample of " << name << " (generator config " << p.config.name << "):\n";
  for (std::string l; std::getline(lines, l);)
    out << "//   " << l << "\n";
  out << "// RUN: qd-run %s --kernel=k" << qdRunInputs(p) << "\n\n" << print(p).text;
}

void fail(const GenProgram &p, const std::string &what) {
  reportCounterexample(p, what);
  std::ostringstream os;
  showValue(p, os);
  RC_FAIL(what + "\n" + os.str());
}

std::string nestedLoopsKernel(int depth) {
  std::string s = "field @x : f32[64] grad\nfield @y : f32[64] grad\nfield @m : i32\n"
                  "kernel @k() {\n  parallel for %i = 0 to 64 {\n    %v = load @x[%i] : f32\n"
                  "    %m = load @m[] : i32\n    %a = alloca f32\n    store %a, %v\n";
  for (int d = 0; d < depth; ++d)
    s += fmt::format("for %j{0} = 0 to %m {{\n%l{0} = load %a : f32\n%s{0} = sin %l{0} : f32\n"
                     "store %a, %s{0}\n",
                     d);
  s += std::string(depth, '}');
  return s + "\n    %r = load %a : f32\n    store @y[%i], %r\n  }\n}\n";
}

} // namespace qd::testgen
