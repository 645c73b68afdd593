//===- lib/capi/Runtime.cpp - Backends, buffers, programs, launches ------===//
#include "Internal.h"

#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/GradientLaunch.h"
#if QD_C_HAS_GPU
#include "qd/runtime/GpuBackend.h"
#endif

#include <absl/strings/str_join.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>

using namespace qd::capi;

namespace qd::capi {

absl::StatusOr<Buffer> borrowDevice(const char *call, qd_backend backend, ScalarType elem,
                                    std::vector<int64_t> shape, uint64_t pointer) {
  if (!backend)
    return absl::InvalidArgumentError(fmt::format("{}: backend is NULL", call));
#if QD_C_HAS_GPU
  if (auto *gpu = dynamic_cast<GpuBackend *>(backend->backend.get()))
    return gpu->borrowDeviceArray(elem, std::move(shape), pointer);
#endif
  return absl::FailedPreconditionError(fmt::format(
      "{}: backend '{}' has no device memory to borrow; pass host memory (qd_buffer_borrow) or "
      "use a GPU backend (cuda, amdgpu)",
      call, backend->name));
}

namespace {

absl::StatusOr<qd::Buffer *> argBuffer(const char *call, LaunchArgs &out, qd_buffer handle) {
  if (!handle)
    return nullptr;
  auto buffer = lookupBuffer(call, handle);
  if (!buffer.ok())
    return buffer.status();
  out.keep.push_back(*buffer);
  return buffer->get();
}

/// A scalar argument's value, converted to the type `kernel` declares.
absl::StatusOr<qd::Scalar> scalarArg(const char *call, const qd::Kernel &kernel,
                                     const qd_arg &arg) {
  const qd::Argument *a = kernel.findArgument(arg.name);
  if (!a || !a->type().isScalar()) // orderLaunchArgs and validation report these
    return arg.kind == QD_ARG_FLOAT ? qd::Scalar::ofFloat(qd::ScalarType::F64, arg.f)
                                    : qd::Scalar::ofInt(qd::ScalarType::I64, arg.i);
  qd::ScalarType t = a->type().element();
  if (qd::isFloat(t))
    return qd::Scalar::ofFloat(t, arg.kind == QD_ARG_FLOAT ? arg.f : double(arg.i));
  if (arg.kind == QD_ARG_FLOAT)
    return absl::InvalidArgumentError(
        fmt::format("{}: kernel @{}: argument %{} is {}; pass an integer, not the float {}", call,
                    kernel.name(), arg.name, qd::toString(t), arg.f));
  return qd::Scalar::ofInt(t, arg.i);
}

} // namespace

absl::StatusOr<LaunchArgs> launchArgs(const char *call, const qd::Kernel &kernel, size_t nargs,
                                      const qd_arg *args) {
  if (nargs > 0 && !args)
    return absl::InvalidArgumentError(fmt::format("{}: args is NULL", call));
  LaunchArgs out;
  out.ndarrays.reserve(nargs); // NdarrayArg pointers stay valid
  for (size_t i = 0; i < nargs; ++i) {
    const qd_arg &arg = args[i];
    if (!arg.name)
      return absl::InvalidArgumentError(fmt::format("{}: args[{}].name is NULL", call, i));
    if (arg.kind == QD_ARG_NDARRAY) {
      qd::NdarrayArg nd;
      for (auto [slot, handle] : {std::pair{&nd.primal, arg.primal}, std::pair{&nd.grad, arg.grad},
                                  std::pair{&nd.dual, arg.dual}}) {
        auto buffer = argBuffer(call, out, handle);
        if (!buffer.ok())
          return absl::Status(buffer.status().code(),
                              fmt::format("kernel @{}: argument %{}: {}", kernel.name(), arg.name,
                                          std::string(buffer.status().message())));
        *slot = *buffer;
      }
      if (!nd.primal)
        return absl::InvalidArgumentError(
            fmt::format("{}: kernel @{}: argument %{} is an ndarray without a primal buffer", call,
                        kernel.name(), arg.name));
      out.ndarrays.push_back(nd);
      out.named.push_back({arg.name, qd::LaunchArg::ndarray(&out.ndarrays.back())});
      continue;
    }
    if (arg.kind != QD_ARG_FLOAT && arg.kind != QD_ARG_INT)
      return absl::InvalidArgumentError(fmt::format("{}: args[{}] (%{}) has kind {}, which is "
                                                    "none of QD_ARG_NDARRAY, FLOAT, INT",
                                                    call, i, arg.name, int(arg.kind)));
    auto value = scalarArg(call, kernel, arg);
    if (!value.ok())
      return value.status();
    out.named.push_back({arg.name, qd::LaunchArg::scalar(*value)});
  }
  return out;
}

absl::StatusOr<LaunchArgs> orderedLaunchArgs(const char *call, const qd::Kernel &kernel,
                                             size_t nargs, const qd_arg *args) {
  auto launch = launchArgs(call, kernel, nargs, args);
  if (!launch.ok())
    return launch.status();
  auto ordered = qd::orderLaunchArgs(kernel, launch->named);
  if (!ordered.ok())
    return ordered.status();
  launch->ordered = std::move(*ordered);
  return launch;
}

absl::StatusOr<qd::Kernel *> moduleKernel(const char *call, const qd::Module &module,
                                          const char *name) {
  if (!name)
    return absl::InvalidArgumentError(fmt::format("{}: kernel name is NULL", call));
  if (qd::Kernel *k = module.findKernel(name))
    return k;
  return absl::NotFoundError(fmt::format("{}: the program's module has no kernel @{}", call, name));
}

qd::LaunchOptions launchOptions(unsigned flags) {
  qd::LaunchOptions options;
  options.boundsChecked = (flags & QD_LAUNCH_BOUNDS_CHECKED) != 0;
  options.async = (flags & QD_LAUNCH_ASYNC) != 0;
  return options;
}

absl::StatusOr<qd::LaunchOptions> launchOptions(const char *call,
                                                const qd_launch_options *options) {
  if (!options)
    return qd::LaunchOptions();
  // A caller compiled against 0.2 passes the struct up to size_adstacks:
  // the fields appended since keep their defaults.
  qd_launch_options o = qd_launch_options_default();
  if (options->size != sizeof(qd_launch_options) && options->size != QD_LAUNCH_OPTIONS_SIZE_0_2)
    return absl::InvalidArgumentError(fmt::format(
        "{}: options->size is {}, but this library ({}) takes a qd_launch_options of {} bytes "
        "(or {}, the size of 0.2's); start from qd_launch_options_default(), which sets it",
        call, options->size, qd_version(), sizeof(qd_launch_options), QD_LAUNCH_OPTIONS_SIZE_0_2));
  std::memcpy(&o, options, options->size);
  static_assert(offsetof(qd_launch_options, adstack_memory_budget) == QD_LAUNCH_OPTIONS_SIZE_0_2);
  if (o.optimistic_adstacks < -1 || o.optimistic_adstacks > 1)
    return absl::InvalidArgumentError(
        fmt::format("{}: options->optimistic_adstacks is {}; pass -1 (the backend's choice), 0 "
                    "(count) or 1 (optimistic)",
                    call, o.optimistic_adstacks));
  for (auto [value, name] : {std::pair{o.default_adstack_capacity, "default_adstack_capacity"},
                             {o.optimistic_initial_capacity, "optimistic_initial_capacity"},
                             {o.adstack_memory_budget, "adstack_memory_budget"},
                             {o.refine_adstacks_above_bytes, "refine_adstacks_above_bytes"}})
    if (value < 0)
      return absl::InvalidArgumentError(fmt::format("{}: options->{} is negative", call, name));
  qd::LaunchOptions l = launchOptions(o.flags);
  l.stream = o.stream;
  l.timeout = std::chrono::nanoseconds(int64_t(std::min<uint64_t>(o.timeout_ns, INT64_MAX)));
  l.defaultAdStackCapacity = o.default_adstack_capacity;
  l.optimisticInitialCapacity = o.optimistic_initial_capacity;
  if (o.optimistic_adstacks >= 0)
    l.optimisticAdStacks = o.optimistic_adstacks == 1;
  l.sizeAdStacks = o.size_adstacks != 0;
  l.adStackMemoryBudget = o.adstack_memory_budget;
  l.refineAdStacksAboveBytes = o.refine_adstacks_above_bytes;
  return l;
}

void keepForAsync(qd_backend backend, const std::shared_ptr<qd::Module> &module,
                  const qd::LaunchOptions &options) {
  if (!options.async)
    return;
  std::lock_guard<std::mutex> lock(backend->mutex);
  auto &kept = backend->asyncModules;
  if (std::find(kept.begin(), kept.end(), module) == kept.end())
    kept.push_back(module);
}

} // namespace qd::capi

namespace {

/// A new buffer handle from `make(type, extents)` after checking the
/// element type, the shape and `out`.
template <typename Make>
qd_status newBuffer(const char *call, qd_dtype dtype, int ndim, const int64_t *shape,
                    qd_buffer *out, Make &&make) {
  return guard(call, [&]() -> qd_status {
    if (!out)
      return nullArgument(call, "out");
    auto type = scalarType(call, dtype);
    auto extents = shapeOf(call, ndim, shape);
    if (!type.ok() || !extents.ok())
      return toStatus(!type.ok() ? type.status() : extents.status());
    absl::StatusOr<qd::Buffer> buffer = make(*type, std::move(*extents));
    if (!buffer.ok())
      return toStatus(buffer.status());
    *out = registerBuffer(std::make_shared<qd::Buffer>(std::move(*buffer)));
    return nullptr;
  });
}

} // namespace

extern "C" {

char *qd_backend_names(void) {
  qd::registerAllBackends();
  return copyString(absl::StrJoin(qd::registeredBackends(), " "));
}

qd_status qd_backend_create(const char *name, const char *options, qd_backend *out) {
  constexpr const char *call = "qd_backend_create";
  return guard(call, [&]() -> qd_status {
    if (!name)
      return nullArgument(call, "name");
    if (!out)
      return nullArgument(call, "out");
    qd::registerAllBackends();
    auto parsed = qd::BackendOptions::parse(options ? options : "");
    if (!parsed.ok())
      return toStatus(parsed.status());
    auto backend = qd::createBackend(name, *parsed);
    if (!backend.ok())
      return toStatus(backend.status());
    *out = new qd_backend_s{std::move(*backend), name};
    return nullptr;
  });
}

void qd_backend_free(qd_backend backend) {
  delete backend;
}

const char *qd_backend_name(qd_backend backend) {
  return backend ? backend->name.c_str() : "";
}

qd_status qd_backend_sizing_report(qd_backend backend, qd_kernel kernel, char **out) {
  constexpr const char *call = "qd_backend_sizing_report";
  return guard(call, [&]() -> qd_status {
    if (!backend || !kernel || !out)
      return nullArgument(call, !backend ? "backend" : !kernel ? "kernel" : "out");
    auto report = backend->backend->sizingReport(*unwrap(kernel));
    if (!report.ok())
      return toStatus(report.status());
    *out = copyString(*report);
    return nullptr;
  });
}

qd_status qd_buffer_create(qd_dtype dtype, int ndim, const int64_t *shape, qd_buffer *out) {
  return newBuffer("qd_buffer_create", dtype, ndim, shape, out,
                   [](qd::ScalarType t, std::vector<int64_t> extents) {
                     return qd::Buffer::create(t, std::move(extents));
                   });
}

qd_status qd_buffer_borrow(qd_dtype dtype, int ndim, const int64_t *shape, void *data,
                           qd_buffer *out) {
  return newBuffer("qd_buffer_borrow", dtype, ndim, shape, out,
                   [&](qd::ScalarType t, std::vector<int64_t> extents) {
                     return qd::Buffer::borrow(t, std::move(extents), data);
                   });
}

qd_status qd_buffer_borrow_device(qd_backend backend, qd_dtype dtype, int ndim,
                                  const int64_t *shape, uint64_t device_pointer, qd_buffer *out) {
  constexpr const char *call = "qd_buffer_borrow_device";
  return newBuffer(call, dtype, ndim, shape, out,
                   [&](qd::ScalarType t, std::vector<int64_t> extents) {
                     return borrowDevice(call, backend, t, std::move(extents), device_pointer);
                   });
}

qd_status qd_buffer_dtype(qd_buffer buffer, qd_dtype *out) {
  return guard("qd_buffer_dtype", [&]() -> qd_status {
    auto b = lookupBuffer("qd_buffer_dtype", buffer);
    if (!b.ok())
      return toStatus(b.status());
    if (!out)
      return nullArgument("qd_buffer_dtype", "out");
    *out = toDtype((*b)->elementType());
    return nullptr;
  });
}

qd_status qd_buffer_shape(qd_buffer buffer, int *ndim, int64_t *shape, int max) {
  return guard("qd_buffer_shape", [&]() -> qd_status {
    auto b = lookupBuffer("qd_buffer_shape", buffer);
    if (!b.ok())
      return toStatus(b.status());
    if (!ndim)
      return nullArgument("qd_buffer_shape", "ndim");
    *ndim = static_cast<int>((*b)->ndim());
    for (int d = 0; shape && d < max && d < *ndim; ++d)
      shape[d] = (*b)->shape()[d];
    return nullptr;
  });
}

qd_status qd_buffer_data(qd_buffer buffer, void **out) {
  return guard("qd_buffer_data", [&]() -> qd_status {
    auto b = lookupBuffer("qd_buffer_data", buffer);
    if (!b.ok())
      return toStatus(b.status());
    if (!out)
      return nullArgument("qd_buffer_data", "out");
    if (absl::Status s = (*b)->syncToHost(); !s.ok())
      return toStatus(s);
    *out = (*b)->data();
    return nullptr;
  });
}

/// Copies between a buffer and host memory of the buffer's size.
static qd_status copyBuffer(const char *call, qd_buffer buffer, void *to, const void *from,
                            size_t bytes) {
  return guard(call, [&]() -> qd_status {
    auto b = lookupBuffer(call, buffer);
    if (!b.ok())
      return toStatus(b.status());
    if (bytes != (*b)->sizeInBytes())
      return error(QD_INVALID_ARGUMENT, fmt::format("{}: the buffer holds {} bytes; {} were given",
                                                    call, (*b)->sizeInBytes(), bytes));
    if (bytes == 0)
      return nullptr;
    if (!to && !from)
      return nullArgument(call, "data");
    if (absl::Status s = (*b)->syncToHost(); !s.ok())
      return toStatus(s);
    if (to)
      std::memcpy(to, static_cast<const qd::Buffer &>(**b).data(), bytes);
    else
      std::memcpy((*b)->data(), from, bytes);
    return nullptr;
  });
}

qd_status qd_buffer_read(qd_buffer buffer, void *data, size_t bytes) {
  return copyBuffer("qd_buffer_read", buffer, data, nullptr, bytes);
}

qd_status qd_buffer_write(qd_buffer buffer, const void *data, size_t bytes) {
  return copyBuffer("qd_buffer_write", buffer, nullptr, data, bytes);
}

qd_status qd_program_create(qd_module module, qd_program *out) {
  constexpr const char *call = "qd_program_create";
  return guard(call, [&]() -> qd_status {
    if (!module || !out)
      return nullArgument(call, !module ? "module" : "out");
    auto program = qd::Program::create(*module->module);
    if (!program.ok())
      return toStatus(program.status());
    std::shared_ptr<qd::Module> keep = module->module;
    auto shared = std::shared_ptr<qd::Program>(program->release(), [keep](qd::Program *p) mutable {
      delete p;
      keep.reset();
    });
    *out = new qd_program_s{std::move(shared), module->module};
    return nullptr;
  });
}

void qd_program_free(qd_program program) {
  delete program;
}

qd_status qd_program_field(qd_program program, const char *name, qd_component component,
                           qd_buffer *out) {
  constexpr const char *call = "qd_program_field";
  return guard(call, [&]() -> qd_status {
    if (!program || !name || !out)
      return nullArgument(call, !program ? "program" : !name ? "name" : "out");
    if (component != QD_PRIMAL && component != QD_GRAD && component != QD_DUAL)
      return error(QD_INVALID_ARGUMENT,
                   fmt::format("{}: component {} is none of QD_PRIMAL, QD_GRAD, QD_DUAL", call,
                               int(component)));
    auto c = static_cast<qd::Component>(component);
    qd::Buffer *b = program->program->field(name, c);
    if (!b)
      return error(QD_NOT_FOUND,
                   program->module->findField(name)
                       ? fmt::format("{}: field @{} has no {} companion (declare it `{}`)", call,
                                     name, qd::toString(c), qd::toString(c))
                       : fmt::format("{}: the module has no field @{}", call, name));
    *out = registerBuffer(std::shared_ptr<qd::Buffer>(program->program, b));
    return nullptr;
  });
}

} // extern "C"

namespace {

qd_status launchProgram(const char *call, qd_program program, qd_backend backend,
                        const char *kernel, size_t nargs, const qd_arg *args,
                        const absl::StatusOr<qd::LaunchOptions> &options) {
  return guard(call, [&]() -> qd_status {
    if (!program || !backend)
      return nullArgument(call, !program ? "program" : "backend");
    if (!options.ok())
      return toStatus(options.status());
    auto k = moduleKernel(call, *program->module, kernel);
    if (!k.ok())
      return toStatus(k.status());
    auto launch = launchArgs(call, **k, nargs, args);
    if (!launch.ok())
      return toStatus(launch.status());
    keepForAsync(backend, program->module, *options);
    return toStatus(
        program->program->launchByName(kernel, launch->named, *backend->backend, *options));
  });
}

qd_status launchWithGradient(const char *call, qd_program program, qd_backend backend,
                             const char *forward, const char *gradient, size_t nargs,
                             const qd_arg *args, size_t nseeds, const qd_seed *seeds,
                             const absl::StatusOr<qd::LaunchOptions> &options) {
  return guard(call, [&]() -> qd_status {
    if (!options.ok())
      return toStatus(options.status());
    if (!program || !backend)
      return nullArgument(call, !program ? "program" : "backend");
    if (nseeds > 0 && !seeds)
      return nullArgument(call, "seeds");
    auto fwd = moduleKernel(call, *program->module, forward);
    auto grad = fwd.ok() ? moduleKernel(call, *program->module, gradient) : fwd.status();
    if (!grad.ok())
      return toStatus(grad.status());
    auto launch = orderedLaunchArgs(call, **fwd, nargs, args);
    if (!launch.ok())
      return toStatus(launch.status());
    std::vector<qd::AdjointSeed> adjointSeeds;
    for (size_t i = 0; i < nseeds; ++i) {
      if (!seeds[i].name)
        return error(QD_INVALID_ARGUMENT, fmt::format("{}: seeds[{}].name is NULL", call, i));
      adjointSeeds.push_back({seeds[i].name, seeds[i].value});
    }
    keepForAsync(backend, program->module, *options);
    return toStatus(qd::launchWithGradient(*program->program, **fwd, **grad, launch->ordered,
                                           adjointSeeds, *backend->backend, *options));
  });
}

} // namespace

extern "C" {

qd_launch_options qd_launch_options_default(void) {
  qd_launch_options o{};
  o.size = sizeof(qd_launch_options);
  o.optimistic_adstacks = -1;
  o.size_adstacks = 1;
  o.refine_adstacks_above_bytes = qd::LaunchOptions().refineAdStacksAboveBytes;
  return o;
}

qd_status qd_backend_synchronize(qd_backend backend) {
  constexpr const char *call = "qd_backend_synchronize";
  return guard(call, [&]() -> qd_status {
    if (!backend)
      return nullArgument(call, "backend");
    qd_status s = toStatus(backend->backend->synchronize());
    std::lock_guard<std::mutex> lock(backend->mutex);
    backend->asyncModules.clear();
    return s;
  });
}

qd_status qd_program_launch(qd_program program, qd_backend backend, const char *kernel,
                            size_t nargs, const qd_arg *args, unsigned flags) {
  return launchProgram("qd_program_launch", program, backend, kernel, nargs, args,
                       launchOptions(flags));
}

qd_status qd_program_launch_with_options(qd_program program, qd_backend backend, const char *kernel,
                                         size_t nargs, const qd_arg *args,
                                         const qd_launch_options *options) {
  constexpr const char *call = "qd_program_launch_with_options";
  return launchProgram(call, program, backend, kernel, nargs, args, launchOptions(call, options));
}

qd_status qd_program_launch_with_gradient(qd_program program, qd_backend backend,
                                          const char *forward, const char *gradient, size_t nargs,
                                          const qd_arg *args, size_t nseeds, const qd_seed *seeds,
                                          unsigned flags) {
  return launchWithGradient("qd_program_launch_with_gradient", program, backend, forward, gradient,
                            nargs, args, nseeds, seeds, launchOptions(flags));
}

qd_status qd_program_launch_with_gradient_options(qd_program program, qd_backend backend,
                                                  const char *forward, const char *gradient,
                                                  size_t nargs, const qd_arg *args, size_t nseeds,
                                                  const qd_seed *seeds,
                                                  const qd_launch_options *options) {
  constexpr const char *call = "qd_program_launch_with_gradient_options";
  return launchWithGradient(call, program, backend, forward, gradient, nargs, args, nseeds, seeds,
                            launchOptions(call, options));
}

} // extern "C"
