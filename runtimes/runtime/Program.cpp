//===- Program.cpp - Module instances and launches ------------------------===//
#include "qd/runtime/Program.h"

#include <fmt/format.h>

namespace qd {

absl::StatusOr<std::unique_ptr<Program>> Program::create(const Module &module) {
  std::unique_ptr<Program> p(new Program(module));
  for (const auto &f : module.fields()) {
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      if (!f->hasComponent(c))
        continue;
      absl::StatusOr<Buffer> b = Buffer::create(f->elementType(), f->shape());
      if (!b.ok())
        return absl::InvalidArgumentError(fmt::format("cannot allocate field '@{}': {}", f->name(),
                                                      std::string(b.status().message())));
      p->fields_.emplace(std::pair(f.get(), c), *std::move(b));
    }
  }
  return p;
}

Buffer *Program::field(const Field &f, Component c) {
  auto it = fields_.find({&f, c});
  return it == fields_.end() ? nullptr : &it->second;
}

Buffer *Program::field(std::string_view name, Component c) {
  Field *f = module_.findField(name);
  return f ? field(*f, c) : nullptr;
}

absl::Status validateLaunchArgs(const Kernel &kernel, std::span<const LaunchArg> args) {
  if (args.size() != kernel.numArguments())
    return absl::InvalidArgumentError(fmt::format(
        "kernel @{} takes {} argument{} but {} {} given", kernel.name(), kernel.numArguments(),
        kernel.numArguments() == 1 ? "" : "s", args.size(), args.size() == 1 ? "was" : "were"));
  for (unsigned i = 0; i < kernel.numArguments(); ++i) {
    const Argument &param = *kernel.argument(i);
    const LaunchArg &arg = args[i];
    std::string what =
        fmt::format("argument {} (%{}) of kernel @{}", i, param.name(), kernel.name());
    if (!param.isNdarray()) {
      if (arg.isNdarray())
        return absl::InvalidArgumentError(fmt::format(
            "{} is a scalar of type {}, but an ndarray was given", what, param.type().str()));
      if (arg.scalarValue().type != param.type().element())
        return absl::InvalidArgumentError(fmt::format("{} has type {}, but a {} value was given",
                                                      what, param.type().str(),
                                                      toString(arg.scalarValue().type)));
      continue;
    }
    if (!arg.isNdarray() || !arg.ndarrayValue().primal)
      return absl::InvalidArgumentError(
          fmt::format("{} is an {}, but a scalar was given", what, param.type().str()));
    const NdarrayArg &nd = arg.ndarrayValue();
    const Buffer &primal = *nd.primal;
    if (primal.elementType() != param.type().element() || primal.ndim() != param.type().ndim())
      return absl::InvalidArgumentError(
          fmt::format("{} is an {}, but the buffer given holds {} with {} dimension{}", what,
                      param.type().str(), toString(primal.elementType()), primal.ndim(),
                      primal.ndim() == 1 ? "" : "s"));
    for (Component c : {Component::Grad, Component::Dual}) {
      if (!param.hasComponent(c))
        continue;
      const Buffer *b = nd.component(c);
      if (!b)
        return absl::InvalidArgumentError(
            fmt::format("{} declares a {} companion, but no {} buffer was given", what, toString(c),
                        toString(c)));
      if (b->elementType() != primal.elementType() || b->shape() != primal.shape())
        return absl::InvalidArgumentError(
            fmt::format("the {} buffer of {} must have the primal's element type and shape",
                        toString(c), what));
    }
  }
  return absl::OkStatus();
}

absl::Status Program::launch(std::string_view name, std::span<const LaunchArg> args,
                             Backend &backend, const LaunchOptions &options) {
  Kernel *k = module_.findKernel(name);
  if (!k)
    return absl::NotFoundError(fmt::format("no kernel named '@{}' in the module", name));
  if (absl::Status s = validateLaunchArgs(*k, args); !s.ok())
    return s;
  return backend.launch(*this, *k, args, options);
}

} // namespace qd
