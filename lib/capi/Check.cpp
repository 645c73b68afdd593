//===- lib/capi/Check.cpp - The gradient checker through the C API --------===//
#include "Internal.h"

#include "qd/check/GradCheck.h"

#include <fmt/format.h>

using namespace qd::capi;

namespace {

/// The checker's value of `v`: integers where the argument or field it
/// names is of an integer type.
absl::StatusOr<qd::GradCheckValue> checkValue(const char *call, const qd::Module &module,
                                              const qd::Kernel &kernel, const qd_check_value &v) {
  if (!v.name)
    return absl::InvalidArgumentError(fmt::format("{}: a value's name is NULL", call));
  std::optional<qd::ScalarType> type;
  if (v.is_field) {
    if (const qd::Field *f = module.findField(v.name))
      type = f->elementType();
  } else if (const qd::Argument *a = kernel.findArgument(v.name)) {
    type = a->type().element();
  }
  if (!type)
    return absl::NotFoundError(fmt::format("{}: kernel @{} has no {} {}{}", call, kernel.name(),
                                           v.is_field ? "field" : "argument",
                                           v.is_field ? "@" : "%", v.name));
  auto shape = shapeOf(call, v.ndim, v.shape);
  if (!shape.ok())
    return shape.status();
  int64_t n = 1;
  for (int64_t e : *shape)
    n *= e < 0 ? 0 : e;
  if (n > 0 && !v.values)
    return absl::InvalidArgumentError(fmt::format("{}: the values of {} are NULL", call, v.name));
  std::vector<double> values(v.values, v.values + n);
  if (qd::isFloat(*type))
    return qd::GradCheckValue::array(std::move(*shape), values);
  std::vector<int64_t> ints;
  for (double x : values) {
    if (x != static_cast<double>(static_cast<int64_t>(x)))
      return absl::InvalidArgumentError(
          fmt::format("{}: {} is of type {}; its value {} is not an integer", call, v.name,
                      qd::toString(*type), x));
    ints.push_back(static_cast<int64_t>(x));
  }
  return qd::GradCheckValue::integers(std::move(*shape), ints);
}

} // namespace

extern "C" {

qd_check_options qd_check_options_default(void) {
  qd_check_options o;
  o.rtol = 0;
  o.atol = 0;
  o.max_elements = 64;
  o.seed = 0;
  o.reverse = 1;
  o.forward = 1;
  return o;
}

qd_status qd_check_gradient(qd_module module, const char *kernel, size_t nvalues,
                            const qd_check_value *values, const qd_check_options *options,
                            qd_backend backend, int *passed, char **report) {
  constexpr const char *call = "qd_check_gradient";
  return guard(call, [&]() -> qd_status {
    if (!module || !kernel || !passed)
      return nullArgument(call, !module ? "module" : !kernel ? "kernel" : "passed");
    if (nvalues > 0 && !values)
      return nullArgument(call, "values");
    const qd::Kernel *k = module->module->findKernel(kernel);
    if (!k)
      return error(QD_NOT_FOUND, fmt::format("{}: the module has no kernel @{}", call, kernel));
    qd::GradCheckInputs inputs;
    for (size_t i = 0; i < nvalues; ++i) {
      auto value = checkValue(call, *module->module, *k, values[i]);
      if (!value.ok())
        return toStatus(value.status());
      (values[i].is_field ? inputs.fields : inputs.args)[values[i].name] = std::move(*value);
    }
    qd_check_options o = options ? *options : qd_check_options_default();
    qd::GradCheckOptions opts;
    opts.rtol = o.rtol;
    opts.atol = o.atol;
    opts.maxElements = o.max_elements;
    opts.seed = o.seed;
    opts.reverse = o.reverse != 0;
    opts.forward = o.forward != 0;
    opts.backend = backend ? backend->backend.get() : nullptr;
    auto result = qd::checkGradient(*module->module, kernel, inputs, opts);
    if (!result.ok())
      return toStatus(result.status());
    *passed = result->passed ? 1 : 0;
    if (report)
      *report = copyString(qd::formatGradCheckReport(*result));
    return nullptr;
  });
}

} // extern "C"
