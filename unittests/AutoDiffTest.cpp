//===- AutoDiffTest.cpp - Reverse-mode autodiff against finite differences ===//
//
// Every gradient kernel built here is verified, run on the interpreter after
// its primal kernel, and compared with central finite differences of
// sum(output * seed) over every element of every grad-bearing input.
//
//===----------------------------------------------------------------------===//
#include "qd/transforms/AutoDiff.h"
#include "qd/analysis/AdStackSizing.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"

#include "ProgramGen.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace qd {
namespace {

//===----------------------------------------------------------------------===//
// Harness
//===----------------------------------------------------------------------===//

/// An ndarray argument: its shape, primal values and, for outputs, the seed
/// of its grad companion (inputs get a zeroed grad companion).
struct NdSpec {
  std::vector<int64_t> shape;
  std::vector<double> values;
  std::vector<double> seed; // empty: an input (or no grad companion)
};

/// A kernel argument: a scalar or an ndarray.
struct ArgSpec {
  std::optional<Scalar> scalar;
  NdSpec nd;
  static ArgSpec i32(int32_t v) { return {Scalar::ofInt(ScalarType::I32, v), {}}; }
  static ArgSpec f64(double v) { return {Scalar::ofFloat(ScalarType::F64, v), {}}; }
  static ArgSpec ndarray(NdSpec s) { return {std::nullopt, std::move(s)}; }
};

/// One gradient check: the module, the kernel, its arguments, the initial
/// field contents and the seeds of the outputs (fields with a seed are
/// outputs; every other grad-bearing field, and every grad-bearing ndarray
/// without a seed, is an input).
struct GradCase {
  std::string text;
  std::string kernel = "k";
  std::vector<ArgSpec> args;
  std::map<std::string, std::vector<double>> init;
  std::map<std::string, std::vector<double>> seeds;
  LaunchOptions options;
  ReverseADOptions reverse;
  double rtol = 1e-6, atol = 1e-8;
  double step = 1e-5;
  /// Skip elements where the finite differences at `step` and `step / 4`
  /// disagree (a kink or a jump near the input; used by the property).
  bool skipNonSmooth = false;
};

/// An ndarray element of type `t` (integer ndarrays hold bounds).
Scalar element(ScalarType t, double v) {
  return isFloat(t) ? Scalar::ofFloat(t, v) : Scalar::ofInt(t, static_cast<int64_t>(v));
}

/// The reverse gradient of every input element, by input name
/// (`x` for field @x, `%a` for ndarray argument %a).
using Grads = std::map<std::string, std::vector<double>>;

struct Instance {
  std::unique_ptr<Program> program;
  std::vector<Buffer> primals, grads; // per argument (empty for scalars)
  std::vector<NdarrayArg> nds;
  std::vector<LaunchArg> args;
};

class GradChecker {
public:
  explicit GradChecker(GradCase c) : c_(std::move(c)) {
    // Every kernel here obeys the rule reverse mode relies on.
    c_.options.checkGlobalAccesses = true;
  }

  /// Parses, differentiates and verifies; returns an error text or "".
  std::string build() {
    auto m = parseModule(c_.text, {"t.qd", 1});
    if (!m.ok())
      return "parse: " + std::string(m.status().message());
    module_ = *std::move(m);
    if (absl::Status v = verify(*module_); !v.ok())
      return "verify (source): " + std::string(v.message());
    Kernel *k = module_->findKernel(c_.kernel);
    if (!k)
      return "no kernel @" + c_.kernel;
    auto g = buildGradientKernel(*module_, *k, c_.reverse);
    if (!g.ok())
      return "reverse-ad: " + std::string(g.status().message());
    grad_ = *g;
    if (absl::Status v = verify(*module_); !v.ok())
      return "verify (gradient): " + std::string(v.message()) + "\n" + printModule(*module_);
    return "";
  }

  Module &module() { return *module_; }
  Kernel &gradKernel() { return *grad_; }
  std::string gradText() { return printKernel(*grad_); }

  /// A fresh program with the case's inputs, with `perturb` added to one
  /// input element (field name or `%arg`, flat index).
  absl::StatusOr<Instance> instantiate(const std::string &pname = "", int64_t pidx = 0,
                                       double delta = 0) {
    Instance in;
    auto p = Program::create(*module_);
    if (!p.ok())
      return p.status();
    in.program = *std::move(p);
    for (auto &[name, values] : c_.init) {
      Buffer *b = in.program->field(name);
      if (!b)
        return absl::InvalidArgumentError("no field " + name);
      for (size_t i = 0; i < values.size(); ++i)
        b->set(static_cast<int64_t>(i), isFloat(b->elementType())
                                            ? Scalar::ofFloat(b->elementType(), values[i])
                                            : Scalar::ofInt(b->elementType(), int64_t(values[i])));
    }
    if (!pname.empty() && pname[0] != '%') {
      Buffer *b = in.program->field(pname);
      b->set(pidx, Scalar::ofFloat(b->elementType(), b->get(pidx).f + delta));
    }
    Kernel *k = module_->findKernel(c_.kernel);
    in.primals.resize(c_.args.size());
    in.grads.resize(c_.args.size());
    in.nds.resize(c_.args.size());
    for (size_t i = 0; i < c_.args.size(); ++i) {
      const ArgSpec &a = c_.args[i];
      if (a.scalar)
        continue;
      const Argument *formal = k->argument(static_cast<unsigned>(i));
      ScalarType elem = formal->type().element();
      auto pb = Buffer::create(elem, a.nd.shape);
      auto gb = Buffer::create(elem, a.nd.shape);
      if (!pb.ok() || !gb.ok())
        return absl::InvalidArgumentError("bad ndarray shape");
      in.primals[i] = *std::move(pb);
      in.grads[i] = *std::move(gb);
      for (size_t j = 0; j < a.nd.values.size(); ++j)
        in.primals[i].set(int64_t(j), element(elem, a.nd.values[j]));
      if (pname == "%" + formal->name())
        in.primals[i].set(pidx, Scalar::ofFloat(elem, in.primals[i].get(pidx).f + delta));
      in.nds[i].primal = &in.primals[i];
      if (formal->hasGrad())
        in.nds[i].grad = &in.grads[i];
    }
    for (size_t i = 0; i < c_.args.size(); ++i)
      in.args.push_back(c_.args[i].scalar ? LaunchArg::scalar(*c_.args[i].scalar)
                                          : LaunchArg::ndarray(&in.nds[i]));
    return in;
  }

  /// sum(output * seed) after the primal kernel, with one input perturbed.
  absl::StatusOr<double> objective(const std::string &pname, int64_t pidx, double delta) {
    auto in = instantiate(pname, pidx, delta);
    if (!in.ok())
      return in.status();
    if (absl::Status s = in->program->launch(c_.kernel, in->args, interp_, c_.options); !s.ok())
      return s;
    double sum = 0;
    for (auto &[name, seed] : c_.seeds) {
      Buffer *b = in->program->field(name);
      for (size_t i = 0; i < seed.size(); ++i)
        sum += b->get(int64_t(i)).f * seed[i];
    }
    for (size_t i = 0; i < c_.args.size(); ++i)
      for (size_t j = 0; j < c_.args[i].nd.seed.size(); ++j)
        sum += in->primals[i].get(int64_t(j)).f * c_.args[i].nd.seed[j];
    return sum;
  }

  /// Runs @k then @k_grad with the seeds; returns the input gradients.
  absl::StatusOr<Grads> gradients() {
    auto in = instantiate();
    if (!in.ok())
      return in.status();
    for (auto &[name, seed] : c_.seeds) {
      Buffer *b = in->program->field(name, Component::Grad);
      if (!b)
        return absl::InvalidArgumentError("no grad companion for " + name);
      for (size_t i = 0; i < seed.size(); ++i)
        b->set(int64_t(i), Scalar::ofFloat(b->elementType(), seed[i]));
    }
    for (size_t i = 0; i < c_.args.size(); ++i)
      for (size_t j = 0; j < c_.args[i].nd.seed.size(); ++j)
        in->grads[i].set(int64_t(j),
                         Scalar::ofFloat(in->grads[i].elementType(), c_.args[i].nd.seed[j]));
    if (absl::Status s = in->program->launch(c_.kernel, in->args, interp_, c_.options); !s.ok())
      return s;
    if (absl::Status s = in->program->launch(grad_->name(), in->args, interp_, c_.options); !s.ok())
      return s;
    lastDepths_ = interp_.adStackMaxDepths();
    Grads out;
    for (const auto &f : module_->fields()) {
      if (!f->hasGrad() || c_.seeds.count(f->name()))
        continue;
      Buffer *b = in->program->field(*f, Component::Grad);
      for (int64_t i = 0; i < b->numElements(); ++i)
        out[f->name()].push_back(b->get(i).f);
    }
    Kernel *k = module_->findKernel(c_.kernel);
    for (size_t i = 0; i < c_.args.size(); ++i) {
      if (c_.args[i].scalar || !k->argument(unsigned(i))->hasGrad() || !c_.args[i].nd.seed.empty())
        continue;
      auto &v = out["%" + k->argument(unsigned(i))->name()];
      for (int64_t j = 0; j < in->grads[i].numElements(); ++j)
        v.push_back(in->grads[i].get(j).f);
    }
    return out;
  }

  /// Central difference with step h.
  double central(const std::string &name, int64_t i, double h, std::string &err) {
    auto plus = objective(name, i, h), minus = objective(name, i, -h);
    if (!plus.ok() || !minus.ok()) {
      err = "forward run failed: " +
            std::string((plus.ok() ? minus.status() : plus.status()).message());
      return 0;
    }
    return (*plus - *minus) / (2 * h);
  }

  /// Richardson-extrapolated central differences (error O(h^4)).
  double fd(const std::string &name, int64_t i, double h, std::string &err) {
    double coarse = central(name, i, h, err);
    double fine = central(name, i, h / 2, err);
    return (4 * fine - coarse) / 3;
  }

  /// Builds, runs and compares; returns "" or a description of the mismatch.
  std::string check(Grads *result = nullptr) {
    if (!module_)
      if (std::string e = build(); !e.empty())
        return e;
    auto g = gradients();
    if (!g.ok())
      return "gradient run failed: " + std::string(g.status().message()) + "\n" +
             printModule(*module_);
    if (result)
      *result = *g;
    std::ostringstream bad;
    for (auto &[name, values] : *g) {
      for (size_t i = 0; i < values.size(); ++i) {
        std::string err;
        double h = c_.step;
        double expect = fd(name, int64_t(i), h, err);
        if (!err.empty())
          return err;
        if (c_.skipNonSmooth) {
          double fine = fd(name, int64_t(i), h / 4, err);
          if (std::abs(fine - expect) > 1e-4 * std::max(1.0, std::abs(expect))) {
            ++skipped_;
            continue;
          }
        }
        if (!std::isfinite(values[i]) ||
            std::abs(values[i] - expect) > c_.atol + c_.rtol * std::abs(expect))
          bad << fmt::format("  d/d{}[{}]: reverse {:.17g}, finite differences {:.17g}\n", name, i,
                             values[i], expect);
      }
    }
    if (!bad.str().empty())
      return "wrong gradients:\n" + bad.str() + printModule(*module_);
    return forwardMismatch(*g);
  }

  /// Forward mode must agree with reverse mode: for every input element,
  /// the dual kernel run with a unit tangent on that element gives
  /// sum(output.dual * seed) equal to the reverse gradient of the element.
  std::string forwardMismatch(const Grads &reverse) {
    auto m = parseModule(c_.text, {"t.qd", 1});
    if (!m.ok())
      return "parse: " + std::string(m.status().message());
    std::unique_ptr<Module> dualModule = *std::move(m);
    for (const auto &f : dualModule->fields())
      if (f->hasGrad())
        f->setHasDual(true);
    Kernel *k = dualModule->findKernel(c_.kernel);
    for (unsigned i = 0; i < k->numArguments(); ++i)
      if (k->argument(i)->hasGrad())
        k->argument(i)->setHasDual(true);
    auto dual = buildDualKernel(*dualModule, *k);
    if (!dual.ok())
      return "forward-ad: " + std::string(dual.status().message());
    if (absl::Status v = verify(*dualModule); !v.ok())
      return "verify (dual): " + std::string(v.message()) + "\n" + printModule(*dualModule);
    std::ostringstream bad;
    for (auto &[name, values] : reverse) {
      for (size_t e = 0; e < values.size(); ++e) {
        auto p = Program::create(*dualModule);
        if (!p.ok())
          return std::string(p.status().message());
        Program &prog = **p;
        for (auto &[fname, init] : c_.init) {
          Buffer *b = prog.field(fname);
          for (size_t i = 0; i < init.size(); ++i)
            b->set(int64_t(i), isFloat(b->elementType())
                                   ? Scalar::ofFloat(b->elementType(), init[i])
                                   : Scalar::ofInt(b->elementType(), int64_t(init[i])));
        }
        if (name[0] != '%') {
          Buffer *d = prog.field(name, Component::Dual);
          d->set(int64_t(e), Scalar::ofFloat(d->elementType(), 1));
        }
        std::vector<Buffer> primals(c_.args.size()), duals(c_.args.size());
        std::vector<NdarrayArg> nds(c_.args.size());
        std::vector<LaunchArg> args;
        for (size_t i = 0; i < c_.args.size(); ++i) {
          const ArgSpec &a = c_.args[i];
          if (a.scalar) {
            args.push_back(LaunchArg::scalar(*a.scalar));
            continue;
          }
          const Argument *formal = k->argument(unsigned(i));
          ScalarType elem = formal->type().element();
          primals[i] = *Buffer::create(elem, a.nd.shape);
          duals[i] = *Buffer::create(elem, a.nd.shape);
          for (size_t j = 0; j < a.nd.values.size(); ++j)
            primals[i].set(int64_t(j), element(elem, a.nd.values[j]));
          if (name == "%" + formal->name())
            duals[i].set(int64_t(e), Scalar::ofFloat(elem, 1));
          nds[i].primal = &primals[i];
          if (formal->hasDual())
            nds[i].dual = &duals[i];
          if (formal->hasGrad()) // declared; unused by the dual kernel
            nds[i].grad = &duals[i];
          args.push_back(LaunchArg::ndarray(&nds[i]));
        }
        if (absl::Status st = prog.launch((*dual)->name(), args, interp_, c_.options); !st.ok())
          return "dual run failed: " + std::string(st.message());
        double tangent = 0;
        for (auto &[sname, seed] : c_.seeds) {
          Buffer *b = prog.field(sname, Component::Dual);
          for (size_t i = 0; i < seed.size(); ++i)
            tangent += b->get(int64_t(i)).f * seed[i];
        }
        for (size_t i = 0; i < c_.args.size(); ++i)
          for (size_t j = 0; j < c_.args[i].nd.seed.size(); ++j)
            tangent += duals[i].get(int64_t(j)).f * c_.args[i].nd.seed[j];
        if (!(std::abs(tangent - values[e]) <= 1e-12 + 1e-9 * std::abs(values[e])))
          bad << fmt::format("  d/d{}[{}]: reverse {:.17g}, forward {:.17g}\n", name, e, values[e],
                             tangent);
      }
    }
    if (!bad.str().empty())
      return "forward and reverse mode disagree:\n" + bad.str() + printModule(*dualModule);
    return "";
  }

  int skipped() const { return skipped_; }
  const std::unordered_map<const AdStackAllocaStmt *, int64_t> &lastDepths() const {
    return lastDepths_;
  }

private:
  GradCase c_;
  std::unique_ptr<Module> module_;
  Kernel *grad_ = nullptr;
  Interpreter interp_;
  std::unordered_map<const AdStackAllocaStmt *, int64_t> lastDepths_;
  int skipped_ = 0;
};

/// "" if two runs' gradients agree to rounding, else the differences.
std::string compareGrads(const Grads &a, const Grads &b) {
  std::string bad;
  for (const auto &[name, values] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != values.size())
      return "different inputs for " + name;
    for (size_t e = 0; e < values.size(); ++e)
      if (!(std::abs(values[e] - it->second[e]) <= 1e-13 + 1e-11 * std::abs(values[e])))
        bad += fmt::format("  d/d{}[{}]: {:.17g} vs {:.17g}\n", name, e, values[e], it->second[e]);
  }
  return bad;
}

/// Checks `c` against finite differences and returns the gradients; also
/// checks that reverse-ad without taping nested loops gives the same ones.
Grads expectGradOk(GradCase c) {
  GradCase recompute = c;
  recompute.reverse.tapeNestedLoops = false;
  GradChecker g(std::move(c));
  Grads out;
  std::string e = g.check(&out);
  EXPECT_EQ(e, "");
  GradChecker r(std::move(recompute));
  Grads again;
  EXPECT_EQ(r.check(&again), "") << "(nested loops recomputed)";
  EXPECT_EQ(compareGrads(out, again), "") << "taped and recomputed nested loops disagree";
  return out;
}

std::vector<const AdStackAllocaStmt *> stacksOf(const Kernel &k) {
  std::vector<const AdStackAllocaStmt *> out;
  walk(const_cast<Kernel &>(k), [&](Stmt &s) {
    if (auto *a = dyn_cast<AdStackAllocaStmt>(&s))
      out.push_back(a);
  });
  return out;
}

std::string buildError(const std::string &text, const std::string &kernel = "k") {
  auto m = parseModule(text, {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return "";
  EXPECT_TRUE(verify(**m).ok());
  auto g = buildGradientKernel(**m, *(*m)->findKernel(kernel));
  if (g.ok())
    return "<no error>";
  return std::string(g.status().message());
}

//===----------------------------------------------------------------------===//
// Differentiable operations, one kernel each
//===----------------------------------------------------------------------===//

/// y[] += f(x0, x1) for an expression over %a = x[0], %b = x[1].
GradCase binaryCase(const std::string &body, std::vector<double> x) {
  GradCase c;
  c.text = "field @x : f64[2] grad\nfield @y : f64 grad\n"
           "kernel @k() {\n  serial {\n    %i0 = const 0 : i32\n    %i1 = const 1 : i32\n"
           "    %a = load @x[%i0] : f64\n    %b = load @x[%i1] : f64\n" +
           body + "    atomic_add @y[], %r : f64\n  }\n}\n";
  c.init["x"] = std::move(x);
  c.seeds["y"] = {1.5};
  return c;
}

struct OpCase {
  const char *name;
  const char *body;
  std::vector<double> x;
};

class OpTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpTest, MatchesFiniteDifferences) {
  const OpCase &o = GetParam();
  Grads g = expectGradOk(binaryCase(o.body, o.x));
  // Every op here depends on %a: its gradient is not trivially zero.
  ASSERT_EQ(g.count("x"), 1u);
  EXPECT_NE(g["x"][0], 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    AutoDiffTest, OpTest,
    ::testing::Values(
        OpCase{"add", "    %r = add %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"add_same", "    %r = add %a, %a : f64\n", {0.3, -1.2}},
        OpCase{"sub", "    %r = sub %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"sub_same", "    %t = mul %a, %a : f64\n    %r = sub %t, %a : f64\n", {0.3, 1}},
        OpCase{"mul", "    %r = mul %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"mul_same", "    %r = mul %a, %a : f64\n", {0.7, -1.2}},
        OpCase{"div", "    %r = div %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"div_same", "    %t = sin %a : f64\n    %r = div %t, %a : f64\n", {0.3, 1}},
        OpCase{"neg", "    %t = neg %a : f64\n    %r = mul %t, %b : f64\n", {0.3, -1.2}},
        OpCase{"min_lhs", "    %r = min %a, %b : f64\n", {-2.0, 1.0}},
        OpCase{"min_rhs", "    %r = min %b, %a : f64\n", {-2.0, 1.0}},
        OpCase{"max_lhs", "    %r = max %a, %b : f64\n", {2.0, 1.0}},
        OpCase{"max_rhs", "    %r = max %b, %a : f64\n", {2.0, 1.0}},
        OpCase{"abs_neg", "    %r = abs %a : f64\n", {-0.7, 1}},
        OpCase{"abs_pos", "    %r = abs %a : f64\n", {0.7, 1}},
        OpCase{"select_true",
               "    %p = cmp lt %a, %b : f64\n    %s = sin %a : f64\n"
               "    %r = select %p, %s, %b : f64\n",
               {0.3, 1.2}},
        OpCase{"select_false",
               "    %p = cmp lt %a, %b : f64\n    %s = sin %b : f64\n"
               "    %r = select %p, %s, %a : f64\n",
               {1.3, 1.2}},
        OpCase{"sin", "    %r = sin %a : f64\n", {0.3, 0}},
        OpCase{"cos", "    %r = cos %a : f64\n", {0.3, 0}},
        OpCase{"tan", "    %r = tan %a : f64\n", {0.3, 0}},
        OpCase{"exp", "    %r = exp %a : f64\n", {0.3, 0}},
        OpCase{"log", "    %r = log %a : f64\n", {0.3, 0}},
        OpCase{"sqrt", "    %r = sqrt %a : f64\n", {0.3, 0}},
        OpCase{"tanh", "    %r = tanh %a : f64\n", {0.3, 0}},
        OpCase{"pow", "    %r = pow %a, %b : f64\n", {1.3, 2.5}},
        OpCase{"pow_same", "    %r = pow %a, %a : f64\n", {1.3, 0}},
        OpCase{"pow_int_exponent", "    %r = pow %a, %b : f64\n", {-1.3, 3.0}},
        OpCase{"atan2", "    %r = atan2 %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"atan2_same", "    %t = mul %a, %a : f64\n    %r = atan2 %a, %t : f64\n", {0.3, 0}},
        OpCase{"chain",
               "    %t = mul %a, %b : f64\n    %u = exp %t : f64\n    %v = tanh %u : f64\n"
               "    %w = sqrt %u : f64\n    %s = add %v, %w : f64\n    %r = mul %s, %a : f64\n",
               {0.3, -1.2}}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(AutoDiffTest, PowGradientOfBothOperandsIsExact) {
  // d/da a^b = b a^(b-1) = 2.5 * 1.3^1.5; d/db = a^b log a.
  Grads g = expectGradOk(binaryCase("    %r = pow %a, %b : f64\n", {1.3, 2.5}));
  EXPECT_NEAR(g["x"][0], 1.5 * 2.5 * std::pow(1.3, 1.5), 1e-12);
  EXPECT_NEAR(g["x"][1], 1.5 * std::pow(1.3, 2.5) * std::log(1.3), 1e-12);
}

TEST(AutoDiffTest, F32CastsCarryTheGradientInF32) {
  GradCase c = binaryCase("    %t = cast %a : f64 to f32\n    %u = mul %t, %t : f32\n"
                          "    %r = cast %u : f32 to f64\n",
                          {0.75, 0});
  GradChecker g(c);
  ASSERT_EQ(g.build(), "");
  auto grads = g.gradients();
  ASSERT_TRUE(grads.ok()) << grads.status().message();
  EXPECT_EQ((*grads)["x"][0], 1.5 * 2 * 0.75); // exact in f32
  EXPECT_EQ((*grads)["x"][1], 0.0);
}

TEST(AutoDiffTest, F64ToF32ToF64MatchesFiniteDifferencesInF32Precision) {
  GradCase c = binaryCase("    %t = cast %a : f64 to f32\n    %u = sin %t : f32\n"
                          "    %r = cast %u : f32 to f64\n",
                          {0.5, 0});
  c.step = 1e-2;
  c.rtol = 1e-5;
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["x"][0], double(1.5f * std::cos(0.5f)));
}

TEST(AutoDiffTest, IntegerCastsStopTheGradient) {
  // y = float(int(a * 10)) + b: d/da is exactly 0 (a stopped gradient, not
  // a finite difference), d/db is 1.
  GradCase c = binaryCase("    %ten = const 10.0 : f64\n    %t = mul %a, %ten : f64\n"
                          "    %n = cast %t : f64 to i32\n    %f = cast %n : i32 to f64\n"
                          "    %r = add %f, %b : f64\n",
                          {0.37, 2});
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["x"][0], 0.0);
  EXPECT_EQ(g["x"][1], 1.5);
  // Through i64 and i1 too.
  Grads g2 =
      expectGradOk(binaryCase("    %n = cast %a : f64 to i64\n    %f = cast %n : i64 to f64\n"
                              "    %p = cast %b : f64 to i1\n    %q = cast %p : i1 to f64\n"
                              "    %s = add %f, %q : f64\n    %r = mul %s, %b : f64\n",
                              {3.5, 2}));
  EXPECT_EQ(g2["x"][0], 0.0);
  EXPECT_EQ(g2["x"][1], 1.5 * 4); // (3 + 1) * d(b)/db
}

TEST(AutoDiffTest, NdarrayArgumentsWithGradCompanions) {
  GradCase c;
  c.text = R"(
field @y : f64 grad
kernel @k(%a: ndarray<f64, 2> grad, %w: ndarray<f64, 1> grad, %o: ndarray<f64, 1> grad) {
  parallel for %i = 0 to 2 {
    %cols = shape %a, 1 : i32
    %acc = alloca f64
    for %j = 0 to %cols {
      %v = load %a[%i, %j] : f64
      %ww = load %w[%j] : f64
      %p = mul %v, %ww : f64
      %s = sin %p : f64
      %old = load %acc : f64
      %n = add %old, %s : f64
      store %acc, %n
    }
    %r = load %acc : f64
    store %o[%i], %r
    %r2 = mul %r, %r : f64
    atomic_add @y[], %r2 : f64
  }
}
)";
  c.args = {ArgSpec::ndarray({{2, 3}, {0.1, 0.2, 0.3, -0.4, 0.5, 0.6}, {}}),
            ArgSpec::ndarray({{3}, {1.0, -0.5, 0.25}, {}}),
            ArgSpec::ndarray({{2}, {0, 0}, {0.5, -2.0}})};
  c.seeds["y"] = {1.0};
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["%a"].size(), 6u);
  EXPECT_EQ(g["%w"].size(), 3u);
  EXPECT_EQ(g.count("%o"), 0u);
}

TEST(AutoDiffTest, AtomicAddAndStoreOutputs) {
  GradCase c;
  c.text = R"(
field @x : f64[3] grad
field @s : f64 grad
field @z : f64[3] grad
kernel @k() {
  parallel for %i = 0 to 3 {
    %v = load @x[%i] : f64
    %e = exp %v : f64
    atomic_add @s[], %e : f64
    atomic_add @s[], %v : f64
    %t = tanh %v : f64
    store @z[%i], %t
  }
}
)";
  c.init["x"] = {0.1, -0.2, 0.3};
  c.seeds["s"] = {2.0};
  c.seeds["z"] = {1.0, -1.0, 3.0};
  Grads g = expectGradOk(c);
  for (int i = 0; i < 3; ++i) {
    double x = c.init["x"][i], t = std::tanh(x);
    EXPECT_NEAR(g["x"][i], 2.0 * (std::exp(x) + 1) + c.seeds["z"][i] * (1 - t * t), 1e-12);
  }
}

// Only the last store to an element reaches the output: the values stored
// before it, or added to it before it, get no gradient (regression: every
// store used to read the seed).
TEST(AutoDiffTest, OverwrittenOutputsGetNoGradient) {
  GradCase c;
  c.text = R"(
field @x : f64[4] grad
field @z : f64[2] grad
field @w : f64 grad
kernel @k(%o: ndarray<f64, 1> grad) {
  serial {
    %zero = const 0 : i32
    %one = const 1 : i32
    for %j = 0 to 3 {
      %v = load @x[%j] : f64
      %s = sin %v : f64
      store @z[%zero], %s
      store %o[%zero], %v
    }
    %a = load @x[%zero] : f64
    atomic_add @z[%one], %a : f64
    %b = load @x[%one] : f64
    %e = exp %b : f64
    store @z[%one], %e
    %three = const 3 : i32
    %d = load @x[%three] : f64
    store @w[], %d
    %c = const 2.0 : f64
    store @w[], %c
  }
}
)";
  c.args = {ArgSpec::ndarray({{1}, {0}, {3.0}})};
  c.init["x"] = {0.1, 0.2, 0.3, 0.4};
  c.seeds["z"] = {1.0, 10.0};
  c.seeds["w"] = {100.0};
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["x"], (std::vector<double>{0, 10 * std::exp(0.2), std::cos(0.3) + 3, 0}));
}

TEST(AutoDiffTest, LaunchTimeIntegerStatementsAndScalarArguments) {
  GradCase c;
  c.text = R"(
field @x : f64[4] grad
field @y : f64 grad
kernel @k(%n: i32, %scale: f64) {
  %m = sub %n, %n : i32
  parallel for %i = %m to %n {
    %v = load @x[%i] : f64
    %w = mul %v, %scale : f64
    %c = cos %w : f64
    atomic_add @y[], %c : f64
  }
}
)";
  c.args = {ArgSpec::i32(3), ArgSpec::f64(0.7)};
  c.init["x"] = {0.1, 0.2, 0.3, 0.4};
  c.seeds["y"] = {1.0};
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["x"][3], 0.0); // outside the range
  EXPECT_NEAR(g["x"][0], -std::sin(0.07) * 0.7, 1e-12);
}

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

GradCase loopCase(std::string text) {
  GradCase c;
  c.text = std::move(text);
  c.init["x"] = {0.3, -0.2, 0.45, 0.1};
  c.seeds["y"] = {1.0};
  return c;
}

constexpr const char *kHeader = "field @x : f64[4] grad\nfield @y : f64 grad\n"
                                "field @n : i32[4]\n";

TEST(AutoDiffTest, NestedDynamicBoundsFromFieldsArgsAndShapes) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k(%m: i32, %a: ndarray<f64, 1> grad) {
  parallel for %i = 0 to 2 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %z = const 0 : i32
    %nb = load @n[%z] : i32
    for %j = 0 to %nb {
      %len = shape %a, 0 : i32
      for %k = 0 to %len {
        for %l = 0 to %m {
          %cur = load %v : f64
          %av = load %a[%k] : f64
          %p = mul %cur, %av : f64
          %s = sin %p : f64
          %h = const 0.5 : f64
          %q = mul %s, %h : f64
          %t = add %q, %cur : f64
          store %v, %t
        }
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  c.args = {ArgSpec::i32(2), ArgSpec::ndarray({{3}, {0.5, -0.25, 0.75}, {}})};
  c.init["n"] = {2, 0, 0, 0};
  expectGradOk(c);
}

TEST(AutoDiffTest, WhileWithBreakOnData) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %cnt = alloca i32
    %x0 = load @x[%i] : f64
    store %v, %x0
    while {
      %c = load %cnt : i32
      %one = const 1 : i32
      %c1 = add %c, %one : i32
      store %cnt, %c1
      %cur = load %v : f64
      %s = sin %cur : f64
      %k = const 0.3 : f64
      %t = add %s, %k : f64
      store %v, %t
      %lim = const 0.9 : f64
      %big = cmp gt %t, %lim : f64
      %ten = const 10 : i32
      %many = cmp ge %c1, %ten : i32
      %stop = or %big, %many : i1
      if %stop {
        break
      }
    }
    %r = load %v : f64
    %cf = load %cnt : i32
    %cff = cast %cf : i32 to f64
    %rr = mul %r, %cff : f64
    atomic_add @y[], %rr : f64
  }
}
)");
  expectGradOk(c);
}

TEST(AutoDiffTest, IfElseOnLoopCarriedValue) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 6 {
      %cur = load %v : f64
      %z = const 0.0 : f64
      %pos = cmp gt %cur, %z : f64
      if %pos {
        %s = sin %cur : f64
        %k = const -0.4 : f64
        %t = add %s, %k : f64
        store %v, %t
      } else {
        %c = cos %cur : f64
        %t2 = mul %c, %cur : f64
        %k2 = const 0.35 : f64
        %t3 = add %t2, %k2 : f64
        store %v, %t3
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  expectGradOk(c);
}

TEST(AutoDiffTest, ContinueInsideLoops) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 7 {
      %one = const 1 : i32
      %par = and %j, %one : i32
      %odd = cast %par : i32 to i1
      %cur = load %v : f64
      %s = sin %cur : f64
      %k = const 0.2 : f64
      %t = add %s, %k : f64
      store %v, %t
      if %odd {
        continue
      }
      %cur2 = load %v : f64
      %sq = mul %cur2, %cur2 : f64
      %t2 = add %sq, %k : f64
      store %v, %t2
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  expectGradOk(c);
}

TEST(AutoDiffTest, LoopCarriedIntegerIndexesAField) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %idx = alloca i32
    store %idx, %i
    for %j = 0 to 5 {
      %cur = load %v : f64
      %ix = load %idx : i32
      %xv = load @x[%ix] : f64
      %p = mul %cur, %xv : f64
      %s = sin %p : f64
      %t = add %s, %xv : f64
      store %v, %t
      %three = const 3 : i32
      %four = const 4 : i32
      %n1 = add %ix, %three : i32
      %n2 = rem %n1, %four : i32
      store %idx, %n2
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  GradChecker g(c);
  ASSERT_EQ(g.build(), "");
  bool hasI32Stack = false;
  for (const AdStackAllocaStmt *s : stacksOf(g.gradKernel()))
    hasI32Stack |= s->elementType() == ScalarType::I32;
  EXPECT_TRUE(hasI32Stack) << g.gradText();
  EXPECT_EQ(g.check(), "");
}

// Counted loops replay index last - k from a non-zero dynamic begin.
TEST(AutoDiffTest, BreakingLoopWithDynamicBegin) {
  for (double lo : {0, 1, 2}) {
    GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 2 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %z = const 0 : i32
    %lo = load @n[%z] : i32
    %o = const 1 : i32
    %hi = load @n[%o] : i32
    for %j = %lo to %hi {
      %cur = load %v : f64
      %xj = load @x[%j] : f64
      %p = mul %cur, %xj : f64
      %s = sin %p : f64
      %t = add %s, %xj : f64
      store %v, %t
      %lim = const 0.9 : f64
      %big = cmp gt %t, %lim : f64
      if %big {
        break
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
    c.init["n"] = {lo, 4, 0, 0};
    SCOPED_TRACE(lo);
    expectGradOk(c);
  }
}

TEST(AutoDiffTest, TriangularLoops) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 4 {
      for %k = 0 to %j {
        %cur = load %v : f64
        %xk = load @x[%k] : f64
        %p = mul %cur, %xk : f64
        %s = sin %p : f64
        %t = add %s, %cur : f64
        %h = const 0.5 : f64
        %t2 = mul %t, %h : f64
        store %v, %t2
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  expectGradOk(c);
}

/// Stacks whose alloca sits directly in a task body (not in a reversed
/// loop's iteration).
size_t taskLevelStacks(const Kernel &k) {
  size_t n = 0;
  for (const AdStackAllocaStmt *a : stacksOf(k))
    n += a->parentStmt() && a->parentStmt()->isTask();
  return n;
}

/// Builds the gradient of @k in `text` with `options`; returns the module.
std::unique_ptr<Module> gradientModule(const std::string &text, ReverseADOptions options) {
  auto m = parseModule(text, {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return nullptr;
  auto g = buildGradientKernel(**m, *(*m)->findKernel("k"), options);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *std::move(m) : nullptr;
}

constexpr const char *kTriangle = R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %z = const 0 : i32
    %nb = load @n[%z] : i32
    for %j = 0 to %nb {
      for %k = 0 to %j {
        %cur = load %v : f64
        %xk = load @x[%k] : f64
        %p = mul %cur, %xk : f64
        %s = sin %p : f64
        store %v, %s
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";

// Taping: the inner loop of a triangular nest pushes its local while the
// outer loop is recorded, into one stack at the task level sized by a sum
// over the outer range (exact); the outer loop needs no stack at all.
// Recomputing: each reversed outer iteration runs the inner loop again,
// with the outer value restored from a second stack.
TEST(AutoDiffTest, TapedNestedLoopUsesOneExactlySizedStack) {
  std::string text = std::string(kHeader) + kTriangle;
  auto taped = gradientModule(text, {});
  auto recomputed = gradientModule(text, {.tapeNestedLoops = false});
  ASSERT_TRUE(taped && recomputed);
  const Kernel &t = *taped->findKernel("k_grad");
  const Kernel &r = *recomputed->findKernel("k_grad");
  EXPECT_EQ(stacksOf(t).size(), 1u) << printKernel(t);
  EXPECT_EQ(taskLevelStacks(t), 1u) << printKernel(t);
  EXPECT_EQ(stacksOf(r).size(), 2u) << printKernel(r);
  EXPECT_EQ(taskLevelStacks(r), 1u) << printKernel(r);
  KernelSizing sizing = sizeAdStacks(t);
  ASSERT_EQ(sizing.stacks().size(), 1u);
  const AdStackSize &size = sizing.stacks()[0];
  EXPECT_EQ(size.tier, SizingTier::LaunchTime) << sizing.describe(size);
  EXPECT_TRUE(size.exact) << sizing.describe(size);
  EXPECT_NE(sizing.describe(size).find("sum("), std::string::npos) << sizing.describe(size);
  for (int n : {0, 1, 5}) {
    GradCase c = loopCase(text);
    c.init["n"] = {double(n), 0, 0, 0};
    SCOPED_TRACE(n);
    GradChecker g(c);
    ASSERT_EQ(g.check(), "");
    // The deepest the taped stack got: 0 + 1 + ... + (n - 1) pushes.
    ASSERT_EQ(g.lastDepths().size(), 1u);
    EXPECT_EQ(g.lastDepths().begin()->second, n * (n - 1) / 2);
    expectGradOk(c); // both modes, against finite differences
  }
}

// Code after the inner loop reads the local it writes: the reversed outer
// iterations need the inner loop's result, so it is run again (its stack
// lives in the reversed iteration), and the gradient is right.
TEST(AutoDiffTest, NestedLoopWhoseResultIsReadAfterItIsNotTaped) {
  std::string text = std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 3 {
      for %k = 0 to 2 {
        %cur = load %v : f64
        %s = sin %cur : f64
        store %v, %s
      }
      %after = load %v : f64
      %sq = mul %after, %after : f64
      %h = const 0.7 : f64
      %t = add %sq, %h : f64
      store %v, %t
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
  auto m = gradientModule(text, {});
  ASSERT_TRUE(m);
  const Kernel &g = *m->findKernel("k_grad");
  EXPECT_EQ(stacksOf(g).size(), 2u) << printKernel(g);
  EXPECT_EQ(taskLevelStacks(g), 1u) << printKernel(g);
  expectGradOk(loopCase(text));
}

// Adjoints start from -0.0, so that the first accumulation folds without
// fast-math (-0.0 + x is x for every x). An adjoint that got nothing reaches
// the grad companion as +0.0 + -0.0 = +0.0: a zero gradient stays +0.0.
TEST(AutoDiffTest, UntouchedAdjointsLeaveAPositiveZeroGradient) {
  std::string text = std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %a = load @x[%i] : f64
    %lim = const 10.0 : f64
    %big = cmp gt %a, %lim : f64
    if %big {
      %s = sin %a : f64
      store %v, %s
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
  auto m = gradientModule(text, {});
  ASSERT_TRUE(m);
  EXPECT_NE(printKernel(*m->findKernel("k_grad")).find("const -0.0 : f64"), std::string::npos);
  Grads g = expectGradOk(loopCase(text));
  ASSERT_EQ(g["x"].size(), 4u);
  for (double d : g["x"]) {
    EXPECT_EQ(d, 0.0);
    EXPECT_FALSE(std::signbit(d));
  }
}

// Found by the property (taped and recomputed gradients differed by 1e-10,
// inside the finite-difference tolerance): %j4 is taped in %j3, but %j3 is
// not taped in %j2 (its result is read after it), so %j4's stack is filled
// by Record(%j3) in %j2's reversed iterations, which must restore %v for
// it. %j2's plan treated %j4 as a black box and restored nothing: the
// stack got sin(x) instead of x, and the gradient was cos(sin(x)).
TEST(AutoDiffTest, LoopTapedBelowAnUntapedLoopGetsItsValuesRestored) {
  std::string text = std::string(kHeader) + R"(
kernel @k() {
  serial {
    %v = alloca f64
    %c0 = const 0 : i32
    %x0 = load @x[%c0] : f64
    store %v, %x0
    for %j2 = 0 to 1 {
      for %j3 = 0 to 1 {
        for %j4 = 0 to 1 {
          %cur = load %v : f64
          %s = sin %cur : f64
          store %v, %s
        }
      }
      %after = load %v : f64
      %m1 = const -1.0 : f64
      %unused = mul %after, %m1 : f64
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
  GradCase c = loopCase(text);
  Grads g = expectGradOk(c);
  ASSERT_EQ(g["x"].size(), 4u);
  EXPECT_DOUBLE_EQ(g["x"][0], std::cos(0.3));
}

// An inner loop in a while loop is not taped: its tape would be pushed a
// number of times known only when the while loop ends (no launch-time
// size), so the while loop's reversed iterations run it again.
TEST(AutoDiffTest, NestedLoopInAWhileLoopIsNotTaped) {
  std::string text = std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %cnt = alloca i32
    %x0 = load @x[%i] : f64
    store %v, %x0
    %zero = const 0 : i32
    store %cnt, %zero
    while {
      %c = load %cnt : i32
      %one = const 1 : i32
      %c1 = add %c, %one : i32
      store %cnt, %c1
      for %k = 0 to 3 {
        %cur = load %v : f64
        %s = sin %cur : f64
        store %v, %s
      }
      %lim = const 3 : i32
      %done = cmp ge %c1, %lim : i32
      if %done {
        break
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
  auto m = gradientModule(text, {});
  ASSERT_TRUE(m);
  const Kernel &g = *m->findKernel("k_grad");
  KernelSizing sizing = sizeAdStacks(g);
  for (const AdStackSize &s : sizing.stacks()) {
    if (s.stack->parentStmt() && !s.stack->parentStmt()->isTask()) {
      EXPECT_EQ(s.tier, SizingTier::Constant) << sizing.describe(s); // the inner loop's: 3
    }
  }
  EXPECT_LT(taskLevelStacks(g), stacksOf(g).size()) << printKernel(g);
  expectGradOk(loopCase(text));
}

// The outer trip count is outside the SizeExpr grammar (a float cast), so
// no launch-time expression bounds the taped inner stack; it is measured at
// launch by the counting kernel instead (tier 3 would make reverse-ad
// recompute the inner loop), and no stack is left with the default.
TEST(AutoDiffTest, NestedLoopWhoseTapeIsOutsideTheGrammarIsTapedAndMeasured) {
  std::string text = std::string(kHeader) + R"(
field @f : f64
kernel @k() {
  parallel for %i = 0 to 4 {
    %u = alloca f64
    %fv = load @f[] : f64
    %q = cast %fv : f64 to i32
    for %j = 0 to %q {
      %xj = load @x[%j] : f64
      store %u, %xj
      for %k = 0 to 3 {
        %cur = load %u : f64
        %s = sin %cur : f64
        atomic_add @y[], %s : f64
        %h = const 0.5 : f64
        %t = mul %s, %h : f64
        store %u, %t
      }
    }
  }
}
)";
  auto m = gradientModule(text, {});
  ASSERT_TRUE(m);
  const Kernel &g = *m->findKernel("k_grad");
  KernelSizing sizing = sizeAdStacks(g);
  ASSERT_FALSE(sizing.stacks().empty()) << printKernel(g);
  int measured = 0;
  for (const AdStackSize &s : sizing.stacks()) {
    EXPECT_NE(s.tier, SizingTier::Default) << sizing.describe(s) << "\n" << printKernel(g);
    measured += s.tier == SizingTier::Measured;
  }
  EXPECT_GE(measured, 1) << printKernel(g);
  EXPECT_EQ(taskLevelStacks(g), 1u) << printKernel(g);
  GradCase c = loopCase(text);
  c.init["f"] = {3.5};
  expectGradOk(c);
}

// Seed 001: sibling loops with a dynamic trip count, and a statement between
// them that the second loop uses in its body and as a nested loop's bound.
TEST(AutoDiffTest, SiblingLoopsWithStatementsBetween) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 2 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %z = const 0 : i32
    %n0 = load @n[%z] : i32
    for %j = 0 to %n0 {
      %cur = load %v : f64
      %s = sin %cur : f64
      %k = const 0.1 : f64
      %t = add %s, %k : f64
      store %v, %t
    }
    %o = const 1 : i32
    %trip = load @n[%o] : i32
    %w = load @x[%o] : f64
    %w2 = mul %w, %w : f64
    for %j2 = 0 to %n0 {
      for %k2 = 0 to %trip {
        %cur2 = load %v : f64
        %p = mul %cur2, %w2 : f64
        %s2 = sin %p : f64
        %q = add %s2, %cur2 : f64
        store %v, %q
      }
      %cur3 = load %v : f64
      %p3 = mul %cur3, %w : f64
      %c3 = cos %p3 : f64
      store %v, %c3
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  c.init["n"] = {3, 2, 0, 0};
  expectGradOk(c);
}

TEST(AutoDiffTest, RuntimeIfWrapsLoopWithLoopCarriedValues) {
  for (double gate : {1.0, -1.0}) {
    GradCase c = loopCase(std::string(kHeader) + R"(
field @g : f64
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %u = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    store %u, %x0
    %gv = load @g[] : f64
    %z = const 0.0 : f64
    %on = cmp gt %gv, %z : f64
    %zi = const 0 : i32
    %nn = load @n[%zi] : i32
    if %on {
      for %j = 0 to %nn {
        %cur = load %v : f64
        %s = sin %cur : f64
        %uu = load %u : f64
        %m = mul %s, %uu : f64
        %t = add %m, %cur : f64
        store %v, %t
        %c = cos %uu : f64
        store %u, %c
      }
    } else {
      %cur0 = load %v : f64
      %e = exp %cur0 : f64
      store %v, %e
    }
    %after = load %v : f64
    %uu2 = load %u : f64
    %r = mul %after, %uu2 : f64
    atomic_add @y[], %r : f64
  }
}
)");
    c.init["n"] = {3, 0, 0, 0};
    c.init["g"] = {gate};
    SCOPED_TRACE(gate);
    expectGradOk(c);
  }
}

// The condition is computed inside the if body from loop-carried values and
// controls a later if (a lowered `a && b`).
TEST(AutoDiffTest, ShortCircuitLikeCondition) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %flag = alloca i1
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 6 {
      %f = const false : i1
      store %flag, %f
      %cur = load %v : f64
      %z = const 0.0 : f64
      %a = cmp gt %cur, %z : f64
      if %a {
        %cur1 = load %v : f64
        %s = sin %cur1 : f64
        %lim = const 0.2 : f64
        %b = cmp gt %s, %lim : f64
        store %flag, %b
        %h = const 0.9 : f64
        %t = mul %cur1, %h : f64
        store %v, %t
      }
      %fl = load %flag : i1
      if %fl {
        %cur2 = load %v : f64
        %sq = mul %cur2, %cur2 : f64
        %k = const 0.1 : f64
        %t2 = sub %sq, %k : f64
        store %v, %t2
      } else {
        %cur3 = load %v : f64
        %c = cos %cur3 : f64
        %t3 = mul %c, %cur3 : f64
        store %v, %t3
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  c.init["x"] = {0.9, -0.2, 0.45, 1.4};
  expectGradOk(c);
}

constexpr const char *kSinLoop = R"(
field @x : f64[4] grad
field @y : f64 grad
field @n : i32
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %nn = load @n[] : i32
    for %j = 0 to %nn {
      %cur = load %v : f64
      %s = sin %cur : f64
      %k = const 0.1 : f64
      %t = add %s, %k : f64
      store %v, %t
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";

TEST(AutoDiffTest, SinLoopWithDefaultCapacityOneIsSized) {
  std::string text = kSinLoop;
  text.replace(text.find("%nn = load @n[] : i32"), 21, "%nn = const 5 : i32");
  GradCase c = loopCase(text);
  c.options.defaultAdStackCapacity = 1;
  GradChecker g(c);
  EXPECT_EQ(g.check(), "");
  ASSERT_EQ(stacksOf(g.gradKernel()).size(), 1u);
  EXPECT_EQ(g.lastDepths().at(stacksOf(g.gradKernel())[0]), 5);
}

TEST(AutoDiffTest, RangeBoundReadFromAField) {
  for (double n : {0, 1, 2, 7}) {
    GradCase c = loopCase(kSinLoop);
    c.init["n"] = {n};
    c.options.defaultAdStackCapacity = 1;
    SCOPED_TRACE(n);
    Grads g = expectGradOk(c);
    if (n == 0) {
      EXPECT_EQ(g["x"], (std::vector<double>{1, 1, 1, 1}));
    }
  }
}

//===----------------------------------------------------------------------===//
// Stack counts
//===----------------------------------------------------------------------===//

std::string loopWith(const std::string &update) {
  return R"(
field @x : f64[4] grad
field @y : f64 grad
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 8 {
      %cur = load %v : f64
)" + update +
         R"(      store %v, %t
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
}

TEST(AutoDiffTest, LinearLoopCarriedValueNeedsNoStack) {
  GradChecker g(loopCase(loopWith("      %a = const 0.95 : f64\n      %m = mul %cur, %a : f64\n"
                                  "      %b = const 0.01 : f64\n      %t = add %m, %b : f64\n")));
  ASSERT_EQ(g.build(), "");
  EXPECT_EQ(stacksOf(g.gradKernel()).size(), 0u) << g.gradText();
  Grads out;
  EXPECT_EQ(g.check(&out), "");
  EXPECT_NEAR(out["x"][0], std::pow(0.95, 8), 1e-14);
}

TEST(AutoDiffTest, NonLinearLoopCarriedValueNeedsOneStack) {
  GradChecker g(loopCase(loopWith("      %s = sin %cur : f64\n      %b = const 0.01 : f64\n"
                                  "      %t = add %s, %b : f64\n")));
  ASSERT_EQ(g.build(), "");
  auto stacks = stacksOf(g.gradKernel());
  ASSERT_EQ(stacks.size(), 1u) << g.gradText();
  EXPECT_EQ(stacks[0]->elementType(), ScalarType::F64);
  EXPECT_EQ(g.check(), "");
}

// A linear inner loop inside a non-linear outer loop: the outer loop saves
// v once per iteration (sin needs it); the inner loop's reverse needs no
// primal value, and the value after it is recomputed by its forward run, so
// it gets no stack of its own.
TEST(AutoDiffTest, LinearInnerLoopInsideNonLinearOuterLoopNeedsNoInnerStack) {
  GradChecker g(loopCase(R"(
field @x : f64[4] grad
field @y : f64 grad
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 3 {
      for %k = 0 to 4 {
        %a = load %v : f64
        %h = const 0.75 : f64
        %b = mul %a, %h : f64
        %c = neg %b : f64
        store %v, %c
      }
      %cur = load %v : f64
      %s = sin %cur : f64
      store %v, %s
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)"));
  ASSERT_EQ(g.build(), "");
  auto stacks = stacksOf(g.gradKernel());
  ASSERT_EQ(stacks.size(), 1u) << g.gradText();
  EXPECT_EQ(g.check(), "");
  // The outer loop's stack holds one value per outer iteration.
  EXPECT_EQ(g.lastDepths().at(stacks[0]), 3);
}

// Regression (found by the gradient benchmark's mass-spring chain): a local
// that is stored in a loop but only loaded earlier in the body (and never
// after the loop) reaches its store's reverse through the back edge; the
// reverse of the store used to be skipped because no adjoint existed yet
// when it was emitted, losing d/dp through q (6 instead of 7).
TEST(AutoDiffTest, StoreWhoseLocalIsOnlyLoadedEarlierInTheLoop) {
  GradCase c;
  c.text = R"(
field @x : f64[2] grad
field @y : f64 grad
kernel @k() {
  serial {
    %z = const 0 : i32
    %o = const 1 : i32
    %P = alloca f64
    %Q = alloca f64
    %x0 = load @x[%z] : f64
    %x1 = load @x[%o] : f64
    store %P, %x0
    store %Q, %x1
    for %t = 0 to 2 {
      %p = load %P : f64
      %q = load %Q : f64
      %pp = mul %p, %p : f64
      %qn = add %q, %pp : f64
      store %Q, %qn
      %pn = add %p, %qn : f64
      store %P, %pn
    }
    %r = load %P : f64
    atomic_add @y[], %r : f64
  }
}
)";
  c.init["x"] = {0.5, 0.25};
  c.seeds["y"] = {1.0};
  Grads g = expectGradOk(c);
  EXPECT_NEAR(g["x"][0], 7.0, 1e-12);
  EXPECT_NEAR(g["x"][1], 4.0, 1e-12);
}

// Symplectic Euler: q' = q + p*p (non-linear in p), p' = p + q'. The
// reverse of an iteration needs p at its start, and q only to recompute p'
// for the next iteration, which Rev(L) restores from p's stack anyway: one
// stack, not two (the spring-chain benchmark pushed 16 values per step where
// 8 are needed).
TEST(AutoDiffTest, LocalOnlyFeedingTheNextIterationGetsNoStack) {
  GradCase c;
  c.text = R"(
field @x : f64[2] grad
field @y : f64 grad
kernel @k() {
  serial {
    %z = const 0 : i32
    %o = const 1 : i32
    %P = alloca f64
    %Q = alloca f64
    %x0 = load @x[%z] : f64
    %x1 = load @x[%o] : f64
    store %P, %x0
    store %Q, %x1
    for %t = 0 to 5 {
      %p = load %P : f64
      %q = load %Q : f64
      %pp = mul %p, %p : f64
      %c = const 0.1 : f64
      %f = mul %pp, %c : f64
      %qn = add %q, %f : f64
      store %Q, %qn
      %pn = add %p, %qn : f64
      store %P, %pn
    }
    %r = load %P : f64
    %s = load %Q : f64
    %rs = mul %r, %s : f64
    atomic_add @y[], %rs : f64
  }
}
)";
  c.init["x"] = {0.5, 0.25};
  c.seeds["y"] = {1.0};
  GradChecker g(c);
  ASSERT_EQ(g.build(), "");
  auto stacks = stacksOf(g.gradKernel());
  ASSERT_EQ(stacks.size(), 1u) << g.gradText();
  EXPECT_EQ(stacks[0]->elementType(), ScalarType::F64);
  expectGradOk(c); // finite differences and forward mode agree
}

TEST(AutoDiffTest, IntegerLoopCarriedIndexGetsAnI32Stack) {
  GradChecker g(loopCase(R"(
field @x : f64[4] grad
field @y : f64 grad
kernel @k() {
  parallel for %i = 0 to 4 {
    %idx = alloca i32
    for %j = 0 to 6 {
      %ix = load %idx : i32
      %xv = load @x[%ix] : f64
      %s = mul %xv, %xv : f64
      atomic_add @y[], %s : f64
      %one = const 1 : i32
      %three = const 3 : i32
      %a = add %ix, %one : i32
      %b = and %a, %three : i32
      store %idx, %b
    }
  }
}
)"));
  ASSERT_EQ(g.build(), "");
  auto stacks = stacksOf(g.gradKernel());
  ASSERT_EQ(stacks.size(), 1u) << g.gradText();
  EXPECT_EQ(stacks[0]->elementType(), ScalarType::I32);
  Grads out;
  EXPECT_EQ(g.check(&out), "");
  // Each thread visits indices 0,1,2,3,0,1: x0 and x1 twice, x2 and x3 once.
  std::vector<double> x = {0.3, -0.2, 0.45, 0.1};
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(out["x"][i], 4 * (i < 2 ? 2 : 1) * 2 * x[i], 1e-14);
}

//===----------------------------------------------------------------------===//
// Cost
//===----------------------------------------------------------------------===//

/// The nesting series of qd-bench-compile: `depth` nested loops with a
/// run-time trip count, each loading, `sin`ing and storing one local (its
/// gradient has a stack per level, pushed inside that many loops).
ReverseADWork reverseWork(int depth) {
  auto m = parseModule(testgen::nestedLoopsKernel(depth));
  EXPECT_TRUE(m.ok()) << m.status();
  ReverseADWork work;
  if (!m.ok())
    return work;
  ReverseADOptions options;
  options.work = &work;
  auto grad = buildGradientKernel(**m, *(*m)->findKernel("k"), options);
  EXPECT_TRUE(grad.ok()) << grad.status();
  if (grad.ok()) {
    EXPECT_TRUE(verify(**grad).ok());
  }
  return work;
}

// Deep nests once made reverse-ad quadratic in their depth: the planner
// walked every loop's body to plan and tape it, and every forward value
// from outside a loop was looked up through all the frames in between.
// Every level of the nest adds the same work now (docs/performance.md).
TEST(AutoDiffTest, ReverseAdWorkGrowsLinearlyWithNestingDepth) {
  ReverseADWork w50 = reverseWork(50), w100 = reverseWork(100), w200 = reverseWork(200);
  EXPECT_EQ(w200.plannerVisits - w100.plannerVisits, 2 * (w100.plannerVisits - w50.plannerVisits));
  EXPECT_EQ(w200.frameProbes - w100.frameProbes, 2 * (w100.frameProbes - w50.frameProbes));
  // Per level: its 4 statements in the walk, 4 in its plan, 1 search;
  // 11 forward values, each found in the first frame looked into.
  EXPECT_EQ(w200.plannerVisits - w100.plannerVisits, 9u * 100);
  EXPECT_EQ(w200.frameProbes - w100.frameProbes, 11u * 100);
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(AutoDiffTest, NonDifferentiableOpsNameTheStatement) {
  std::string floorK = R"(field @x : f64[2] grad
field @y : f64 grad
kernel @k() {
  serial {
    %i = const 0 : i32
    %a = load @x[%i] : f64
    %f = floor %a : f64
    atomic_add @y[], %f : f64
  }
}
)";
  EXPECT_EQ(buildError(floorK),
            "t.qd:7:5: error: reverse-ad: 'floor' is not differentiable; cast the value to an "
            "integer to stop its gradient explicitly (in kernel @k: %f = floor %a : f64)");
  std::string ceilK = floorK;
  ceilK.replace(ceilK.find("floor"), 5, "ceil");
  EXPECT_EQ(buildError(ceilK),
            "t.qd:7:5: error: reverse-ad: 'ceil' is not differentiable; cast the value to an "
            "integer to stop its gradient explicitly (in kernel @k: %f = ceil %a : f64)");
  std::string remK = floorK;
  remK.replace(remK.find("floor %a"), 8, "rem %a, %a");
  EXPECT_EQ(buildError(remK),
            "t.qd:7:5: error: reverse-ad: 'rem' is not differentiable; compute it from values "
            "without a gradient (in kernel @k: %f = rem %a, %a : f64)");
  // Off the differentiated path, floor is fine.
  std::string inactive = floorK;
  inactive.replace(inactive.find("atomic_add @y[], %f"), 19, "atomic_add @y[], %a");
  EXPECT_EQ(buildError(inactive), "<no error>");
}

TEST(AutoDiffTest, KernelWithAdStacksIsRejected) {
  EXPECT_EQ(buildError(R"(field @y : f64 grad
kernel @k() {
  serial {
    %s = adstack.alloca f64, capacity 4
    %one = const 1.0 : f64
    adstack.push %s, %one
    %t = adstack.load_top %s : f64
    atomic_add @y[], %t : f64
    adstack.pop %s
  }
}
)"),
            "t.qd:4:5: error: reverse-ad: the kernel already uses adstacks; differentiate the "
            "kernel before adding them (in kernel @k: %s = adstack.alloca f64, capacity 4)");
}

TEST(AutoDiffTest, NameClashIsAnError) {
  std::string text = "kernel @k() {\n}\nkernel @k_grad() {\n}\n";
  EXPECT_EQ(buildError(text), "reverse-ad: the module already has a kernel named '@k_grad'; "
                              "remove it or pick another name");
  auto m = parseModule(text);
  ASSERT_TRUE(m.ok());
  auto g = buildGradientKernel(**m, *(*m)->findKernel("k"), "k_adj");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ((*g)->name(), "k_adj");
  EXPECT_EQ(buildGradientKernel(**m, *(*m)->findKernel("k"), "k_adj").status().code(),
            absl::StatusCode::kAlreadyExists);
}

//===----------------------------------------------------------------------===//
// Property: random kernels against finite differences
//===----------------------------------------------------------------------===//

/// The gradient check of a generated program (GenConfig::autodiff): every
/// field and ndarray output gets a seed, every grad-bearing input (@x, %u)
/// is checked element by element.
GradCase gradCaseOf(const testgen::GenProgram &p, const std::string &text, const Module &m) {
  GradCase c;
  c.text = text;
  if (m.findField("x"))
    c.init["x"] = testgen::xValues(p);
  if (m.findField("cnt"))
    for (int64_t v : testgen::cntValues(p))
      c.init["cnt"].push_back(double(v));
  if (m.findField("bit"))
    for (int64_t v : testgen::bitValues(p))
      c.init["bit"].push_back(double(v));
  if (m.findField("y"))
    c.seeds["y"] = {1.0};
  for (int l = 0; l < 3; ++l)
    if (const Field *f = m.findField(fmt::format("z{}", l)))
      for (int64_t i = 0; i < f->numElements(); ++i)
        c.seeds[f->name()].push_back(0.5 + l - 0.25 * double(i));
  const Kernel *k = m.findKernel("k");
  auto doubles = [](const std::vector<int64_t> &v) {
    return std::vector<double>(v.begin(), v.end());
  };
  for (unsigned i = 0; i < k->numArguments(); ++i) {
    const std::string &name = k->argument(i)->name();
    if (name == "n")
      c.args.push_back(ArgSpec::i32(int32_t(testgen::nValue(p))));
    else if (name == "s")
      c.args.push_back(ArgSpec::f64(testgen::sValue(p)));
    else if (name == "a")
      c.args.push_back(ArgSpec::ndarray({testgen::aShape(p), doubles(testgen::aValues(p)), {}}));
    else if (name == "m")
      c.args.push_back(ArgSpec::ndarray({testgen::mShape(p), doubles(testgen::mValues(p)), {}}));
    else if (name == "u")
      c.args.push_back(ArgSpec::ndarray({testgen::uShape(p), testgen::uValues(p), {}}));
    else { // %w: an output
      NdSpec w{testgen::wShape(p), {}, {}};
      for (int64_t j = 0; j < w.shape[0]; ++j)
        w.seed.push_back(0.75 - 0.5 * double(j));
      c.args.push_back(ArgSpec::ndarray(w));
    }
  }
  // The sizing default (256) is for real programs; nested loops inside
  // while loops may go deeper here.
  c.options.defaultAdStackCapacity = int64_t(1) << 16;
  c.skipNonSmooth = true;
  c.rtol = 1e-5;
  c.atol = 1e-7;
  return c;
}

// Random f64 kernels (every differentiable operation in a bounded form,
// loop-carried float and integer locals, nested loops with dynamic bounds,
// while loops, breaks and continues, data-dependent ifs, several tasks,
// field and ndarray inputs and outputs): reverse-mode gradients agree with
// Richardson-extrapolated central differences, and forward mode agrees with
// reverse mode on every input element.
QD_PROPERTY(AutoDiffTest, RandomKernelsMatchFiniteDifferences, 150) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::autodiff());
  testgen::Printed printed = testgen::print(p);
  auto m = parseModule(printed.text, {"t.qd", 1});
  if (!m.ok())
    testgen::fail(p, "does not parse: " + std::string(m.status().message()));
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasFor, "for");
  RC_CLASSIFY(printed.hasJump, "break/continue");
  GradCase c = gradCaseOf(p, printed.text, **m);
  GradCase recompute = c;
  recompute.reverse.tapeNestedLoops = false;
  GradCase noFactors = c;
  noFactors.reverse.tapeFactors = !c.reverse.tapeFactors;
  GradChecker g(std::move(c));
  Grads taped;
  std::string err = g.check(&taped);
  RC_CLASSIFY(g.skipped() > 0, "non-smooth elements skipped");
  if (!err.empty())
    testgen::fail(p, err);
  // Taping nested loops, or derivative factors, changes what is stored,
  // not the gradient.
  auto sameGradients = [&](GradCase variant, const std::string &what) {
    GradChecker v(std::move(variant));
    Grads grads;
    if (std::string e = v.check(&grads); !e.empty())
      testgen::fail(p, "(" + what + ") " + e);
    if (std::string d = compareGrads(taped, grads); !d.empty())
      testgen::fail(p, "the gradients change with " + what + ":\n" + d);
  };
  sameGradients(std::move(recompute), "nested loops recomputed");
  sameGradients(std::move(noFactors), "derivative factors taped or not, the other way");
}

} // namespace
} // namespace qd
