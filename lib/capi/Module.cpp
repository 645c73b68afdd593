//===- lib/capi/Module.cpp - Modules, kernels, passes, autodiff -----------===//
#include "Internal.h"

#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/GradientLaunch.h"
#include "qd/transforms/AutoDiff.h"
#include "qd/transforms/Pass.h"

#include <fmt/format.h>

using namespace qd::capi;

namespace {

/// Kernel `name` of `module`, or NotFound listing the kernels it has.
absl::StatusOr<qd::Kernel *> findKernel(const char *call, const qd::Module &module,
                                        const char *name) {
  if (!name)
    return absl::InvalidArgumentError(fmt::format("{}: kernel name is NULL", call));
  if (qd::Kernel *k = module.findKernel(name))
    return k;
  std::string names;
  for (const auto &k : module.kernels())
    names += (names.empty() ? "@" : ", @") + k->name();
  return absl::NotFoundError(fmt::format("{}: the module has no kernel @{} (it has: {})", call,
                                         name, names.empty() ? "none" : names));
}

std::string adjointNames(const std::vector<qd::AdjointRef> &refs) {
  std::string out;
  for (const qd::AdjointRef &ref : refs)
    out += (out.empty() ? "" : " ") + std::string(ref.field ? "@" : "%") + std::string(ref.name());
  return out;
}

/// Adds the argument `make(name)` to `kernel` unless an argument has its
/// name.
template <typename Make>
qd_status addArgument(const char *call, qd_kernel kernel, const char *name, qd_value *out,
                      Make &&make) {
  return guard(call, [&]() -> qd_status {
    if (!kernel || !name || !out)
      return nullArgument(call, !kernel ? "kernel" : !name ? "name" : "out");
    qd::Kernel *k = unwrap(kernel);
    if (k->findArgument(name))
      return error(QD_ALREADY_EXISTS,
                   fmt::format("{}: kernel @{} has an argument %{} already; pick another name",
                               call, k->name(), name));
    *out = wrap(make(*k));
    return nullptr;
  });
}

/// Adds the kernel `build(module, kernel)` derives from kernel `name`
/// (its gradient or dual kernel) and returns it.
template <typename Build>
qd_status derive(const char *call, qd_module module, const char *name, qd_kernel *out,
                 Build &&build) {
  return guard(call, [&]() -> qd_status {
    if (!module || !out)
      return nullArgument(call, !module ? "module" : "out");
    auto k = findKernel(call, *module->module, name);
    if (!k.ok())
      return toStatus(k.status());
    absl::StatusOr<qd::Kernel *> derived = build(*module->module, **k);
    if (!derived.ok())
      return toStatus(derived.status());
    *out = wrap(*derived);
    return nullptr;
  });
}

} // namespace

extern "C" {

qd_status qd_module_parse(const char *text, const char *filename, qd_module *out) {
  return guard("qd_module_parse", [&]() -> qd_status {
    if (!text)
      return nullArgument("qd_module_parse", "text");
    if (!out)
      return nullArgument("qd_module_parse", "out");
    qd::ParseOptions options;
    options.filename = filename ? filename : "<input>";
    auto module = qd::parseModule(text, options);
    if (!module.ok())
      return toStatus(module.status());
    *out = new qd_module_s{std::shared_ptr<qd::Module>(std::move(*module))};
    return nullptr;
  });
}

qd_status qd_module_create(qd_module *out) {
  return guard("qd_module_create", [&]() -> qd_status {
    if (!out)
      return nullArgument("qd_module_create", "out");
    *out = new qd_module_s{std::make_shared<qd::Module>()};
    return nullptr;
  });
}

void qd_module_free(qd_module module) {
  delete module;
}

qd_status qd_module_print(qd_module module, char **out) {
  return guard("qd_module_print", [&]() -> qd_status {
    if (!module)
      return nullArgument("qd_module_print", "module");
    if (!out)
      return nullArgument("qd_module_print", "out");
    *out = copyString(qd::printModule(*module->module));
    return nullptr;
  });
}

qd_status qd_module_verify(qd_module module) {
  return guard("qd_module_verify", [&]() -> qd_status {
    if (!module)
      return nullArgument("qd_module_verify", "module");
    return toStatus(qd::verify(*module->module));
  });
}

qd_status qd_module_run_passes(qd_module module, const char *pipeline, int verify_each) {
  return guard("qd_module_run_passes", [&]() -> qd_status {
    if (!module)
      return nullArgument("qd_module_run_passes", "module");
    if (!pipeline)
      return nullArgument("qd_module_run_passes", "pipeline");
    qd::PassManagerOptions options;
    options.verifyEach = verify_each != 0;
    qd::PassManager pm(options);
    if (absl::Status s = pm.addPipeline(pipeline); !s.ok())
      return toStatus(s);
    return toStatus(pm.run(*module->module));
  });
}

qd_status qd_module_find_kernel(qd_module module, const char *name, qd_kernel *out) {
  return guard("qd_module_find_kernel", [&]() -> qd_status {
    if (!module)
      return nullArgument("qd_module_find_kernel", "module");
    if (!out)
      return nullArgument("qd_module_find_kernel", "out");
    auto k = findKernel("qd_module_find_kernel", *module->module, name);
    if (!k.ok())
      return toStatus(k.status());
    *out = wrap(*k);
    return nullptr;
  });
}

size_t qd_module_num_kernels(qd_module module) {
  return module ? module->module->kernels().size() : 0;
}

qd_kernel qd_module_kernel(qd_module module, size_t index) {
  if (!module || index >= module->module->kernels().size())
    return nullptr;
  return wrap(module->module->kernels()[index].get());
}

const char *qd_kernel_name(qd_kernel kernel) {
  return kernel ? unwrap(kernel)->name().c_str() : "";
}

size_t qd_kernel_num_args(qd_kernel kernel) {
  return kernel ? unwrap(kernel)->numArguments() : 0;
}

qd_status qd_kernel_arg(qd_kernel kernel, size_t index, qd_arg_info *out) {
  return guard("qd_kernel_arg", [&]() -> qd_status {
    if (!kernel)
      return nullArgument("qd_kernel_arg", "kernel");
    if (!out)
      return nullArgument("qd_kernel_arg", "out");
    qd::Kernel *k = unwrap(kernel);
    if (index >= k->numArguments())
      return error(
          QD_OUT_OF_RANGE,
          fmt::format("qd_kernel_arg: kernel @{} has {} arguments; there is no argument {}",
                      k->name(), k->numArguments(), index));
    const qd::Argument *a = k->argument(static_cast<unsigned>(index));
    *out = qd_arg_info{a->name().c_str(),
                       a->isNdarray() ? 1 : 0,
                       toDtype(a->type().element()),
                       static_cast<int>(a->type().ndim()),
                       a->hasGrad() ? 1 : 0,
                       a->hasDual() ? 1 : 0};
    return nullptr;
  });
}

qd_status qd_module_add_field(qd_module module, const char *name, qd_dtype dtype, int ndim,
                              const int64_t *shape, int grad, int dual) {
  constexpr const char *call = "qd_module_add_field";
  return guard(call, [&]() -> qd_status {
    if (!module)
      return nullArgument(call, "module");
    if (!name)
      return nullArgument(call, "name");
    auto type = scalarType(call, dtype);
    auto extents = shapeOf(call, ndim, shape);
    if (!type.ok() || !extents.ok())
      return toStatus(!type.ok() ? type.status() : extents.status());
    if (module->module->findField(name))
      return error(
          QD_ALREADY_EXISTS,
          fmt::format("{}: the module has a field @{} already; pick another name", call, name));
    module->module->addField(
        std::make_unique<qd::Field>(name, *type, std::move(*extents), grad != 0, dual != 0));
    return nullptr;
  });
}

qd_status qd_module_add_kernel(qd_module module, const char *name, qd_kernel *out) {
  constexpr const char *call = "qd_module_add_kernel";
  return guard(call, [&]() -> qd_status {
    if (!module)
      return nullArgument(call, "module");
    if (!name)
      return nullArgument(call, "name");
    if (!out)
      return nullArgument(call, "out");
    if (module->module->findKernel(name))
      return error(
          QD_ALREADY_EXISTS,
          fmt::format("{}: the module has a kernel @{} already; pick another name", call, name));
    *out = wrap(module->module->addKernel(std::make_unique<qd::Kernel>(name)));
    return nullptr;
  });
}

qd_status qd_kernel_add_scalar_arg(qd_kernel kernel, const char *name, qd_dtype dtype,
                                   qd_value *out) {
  constexpr const char *call = "qd_kernel_add_scalar_arg";
  auto type = scalarType(call, dtype);
  if (!type.ok())
    return toStatus(type.status());
  return addArgument(call, kernel, name, out,
                     [&](qd::Kernel &k) { return k.addScalarArgument(name, *type); });
}

qd_status qd_kernel_add_ndarray_arg(qd_kernel kernel, const char *name, qd_dtype dtype, int rank,
                                    int grad, int dual, qd_value *out) {
  constexpr const char *call = "qd_kernel_add_ndarray_arg";
  auto type = scalarType(call, dtype);
  if (!type.ok())
    return toStatus(type.status());
  if (rank < 1 || rank > 8)
    return error(QD_INVALID_ARGUMENT,
                 fmt::format("{}: %{} has rank {}; an ndarray has 1 to 8 dimensions", call,
                             name ? name : "?", rank));
  return addArgument(call, kernel, name, out, [&](qd::Kernel &k) {
    return k.addNdarrayArgument(name, *type, static_cast<unsigned>(rank), grad != 0, dual != 0);
  });
}

qd_status qd_module_gradient(qd_module module, const char *name, const char *grad_name,
                             unsigned flags, qd_kernel *out) {
  return derive("qd_module_gradient", module, name, out, [&](qd::Module &m, qd::Kernel &k) {
    qd::ReverseADOptions options;
    options.tapeNestedLoops = !(flags & QD_GRADIENT_NO_TAPE_NESTED_LOOPS);
    options.tapeFactors = !(flags & QD_GRADIENT_NO_TAPE_FACTORS);
    return qd::buildGradientKernel(m, k, options, grad_name ? grad_name : "");
  });
}

qd_status qd_module_forward(qd_module module, const char *name, const char *dual_name,
                            qd_kernel *out) {
  return derive("qd_module_forward", module, name, out, [&](qd::Module &m, qd::Kernel &k) {
    return qd::buildDualKernel(m, k, dual_name ? dual_name : "");
  });
}

qd_status qd_kernel_gradient_adjoints(qd_kernel gradient, char **accumulated, char **consumed) {
  constexpr const char *call = "qd_kernel_gradient_adjoints";
  return guard(call, [&]() -> qd_status {
    if (!gradient)
      return nullArgument(call, "gradient");
    if (!accumulated || !consumed)
      return nullArgument(call, !accumulated ? "accumulated" : "consumed");
    qd::GradientAdjoints adjoints = qd::gradientAdjoints(*unwrap(gradient));
    *accumulated = copyString(adjointNames(adjoints.accumulated));
    *consumed = copyString(adjointNames(adjoints.consumed));
    return nullptr;
  });
}

} // extern "C"
