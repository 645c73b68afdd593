//===- AutoDiffHarness.h - Reverse-mode autodiff test harness ---*- C++ -*-===//
//
// The harness the AutoDiff*Test files share: a gradient case (module text,
// inputs, seeds) built, verified and run on the interpreter, its gradient
// compared with central finite differences.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/AdStackSizing.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"

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

namespace qd::adtest {

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
inline Scalar element(ScalarType t, double v) {
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
inline std::string compareGrads(const Grads &a, const Grads &b) {
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
inline Grads expectGradOk(GradCase c) {
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

inline std::vector<const AdStackAllocaStmt *> stacksOf(const Kernel &k) {
  std::vector<const AdStackAllocaStmt *> out;
  walk(const_cast<Kernel &>(k), [&](Stmt &s) {
    if (auto *a = dyn_cast<AdStackAllocaStmt>(&s))
      out.push_back(a);
  });
  return out;
}

inline std::string buildError(const std::string &text, const std::string &kernel = "k") {
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

inline GradCase loopCase(std::string text) {
  GradCase c;
  c.text = std::move(text);
  c.init["x"] = {0.3, -0.2, 0.45, 0.1};
  c.seeds["y"] = {1.0};
  return c;
}

constexpr const char *kHeader = "field @x : f64[4] grad\nfield @y : f64 grad\n"
                                "field @n : i32[4]\n";

} // namespace qd::adtest
