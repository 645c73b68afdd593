//===- lib/capi/Builder.cpp - Building kernels through the C API ---------===//
//
// A thin layer over qd::IRBuilder: operands are checked for what the
// builder itself assumes (non-NULL, scalars where a scalar is needed, a
// local for local loads and stores, an ndarray argument or a field for
// globals); the verifier checks the rest (qd_module_verify).
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "qd/ir/Ops.h"

#include <fmt/format.h>

using namespace qd::capi;

namespace {

/// Runs `build` on the builder after checking it and `out`; `build` returns
/// the status of the call and sets *out.
template <typename F>
qd_status building(const char *call, qd_builder builder, qd_value *out, F &&build) {
  return guard(call, [&]() -> qd_status {
    if (!builder)
      return nullArgument(call, "builder");
    if (!out)
      return nullArgument(call, "out");
    return build(builder->builder);
  });
}

/// InvalidArgument unless every one of `values` is a non-NULL scalar.
absl::Status scalars(const char *call, std::initializer_list<qd_value> values) {
  for (qd_value v : values) {
    if (!v)
      return absl::InvalidArgumentError(fmt::format("{}: an operand is NULL", call));
    if (!unwrap(v)->type().isScalar())
      return absl::InvalidArgumentError(
          fmt::format("{}: operand {} is a {}, not a scalar", call,
                      unwrap(v)->name().empty() ? "(unnamed)" : "%" + unwrap(v)->name(),
                      unwrap(v)->type().str()));
  }
  return absl::OkStatus();
}

absl::StatusOr<qd::Value *> local(const char *call, qd_value v) {
  if (!v || !unwrap(v)->type().isLocal())
    return absl::InvalidArgumentError(
        fmt::format("{}: the local is {}; pass a value qd_build_alloca returned", call,
                    v ? "a " + unwrap(v)->type().str() : std::string("NULL")));
  return unwrap(v);
}

/// The GlobalRef of `global` in the builder's module, with its indices.
absl::StatusOr<qd::GlobalRef> globalRef(const char *call, qd_builder b, qd_global global,
                                        size_t nindices, const qd_value *indices) {
  if (nindices > 0 && !indices)
    return absl::InvalidArgumentError(fmt::format("{}: indices is NULL", call));
  for (size_t i = 0; i < nindices; ++i)
    if (absl::Status s = scalars(call, {indices[i]}); !s.ok())
      return s;
  if (global.ndarray) {
    if (!unwrap(global.ndarray)->type().isNdarray())
      return absl::InvalidArgumentError(
          fmt::format("{}: the global is a {}, not an ndarray argument", call,
                      unwrap(global.ndarray)->type().str()));
    return qd::GlobalRef::ofNdarray(unwrap(global.ndarray));
  }
  if (!global.field)
    return absl::InvalidArgumentError(
        fmt::format("{}: the global names neither an ndarray nor a field", call));
  qd::Module *m = b->kernel->module();
  qd::Field *f = m ? m->findField(global.field) : nullptr;
  if (!f)
    return absl::NotFoundError(fmt::format("{}: the module of kernel @{} has no field @{}", call,
                                           b->kernel->name(), global.field));
  return qd::GlobalRef::ofField(f);
}

template <typename T> qd_status done(T *stmt, qd_value *out) {
  *out = wrap(stmt);
  return nullptr;
}

} // namespace

extern "C" {

qd_status qd_builder_create(qd_kernel kernel, qd_builder *out) {
  return guard("qd_builder_create", [&]() -> qd_status {
    if (!kernel)
      return nullArgument("qd_builder_create", "kernel");
    if (!out)
      return nullArgument("qd_builder_create", "out");
    *out = new qd_builder_s(*unwrap(kernel));
    return nullptr;
  });
}

void qd_builder_free(qd_builder builder) {
  if (!builder)
    return;
  while (!builder->open.empty())
    builder->open.pop_back(); // innermost first: each scope restores its parent's position
  delete builder;
}

qd_status qd_builder_set_location(qd_builder builder, const char *file, uint32_t line,
                                  uint32_t col) {
  return guard("qd_builder_set_location", [&]() -> qd_status {
    if (!builder)
      return nullArgument("qd_builder_set_location", "builder");
    builder->builder.setLocation(
        qd::Location(std::make_shared<const std::string>(file ? file : "<input>"), line, col));
    return nullptr;
  });
}

qd_status qd_value_set_name(qd_value value, const char *name) {
  if (!value || !name)
    return nullArgument("qd_value_set_name", !value ? "value" : "name");
  unwrap(value)->setName(name);
  return nullptr;
}

qd_status qd_build_const(qd_builder builder, qd_dtype dtype, double value, qd_value *out) {
  return building("qd_build_const", builder, out, [&](qd::IRBuilder &b) -> qd_status {
    auto type = scalarType("qd_build_const", dtype);
    if (!type.ok())
      return toStatus(type.status());
    if (qd::isFloat(*type))
      return done(b.constFloat(*type, value), out);
    return done(b.constInt(*type, static_cast<int64_t>(value)), out);
  });
}

qd_status qd_build_binary(qd_builder builder, const char *op, qd_value lhs, qd_value rhs,
                          qd_value *out) {
  constexpr const char *call = "qd_build_binary";
  return building(call, builder, out, [&](qd::IRBuilder &b) -> qd_status {
    if (!op)
      return nullArgument(call, "op");
    if (absl::Status s = scalars(call, {lhs, rhs}); !s.ok())
      return toStatus(s);
    if (auto binary = qd::parseBinaryOp(op))
      return done(b.binary(*binary, unwrap(lhs), unwrap(rhs)), out);
    if (auto pred = qd::parseCmpPredicate(op))
      return done(b.cmp(*pred, unwrap(lhs), unwrap(rhs)), out);
    return error(QD_INVALID_ARGUMENT,
                 fmt::format("{}: '{}' is no binary operation or comparison (docs/ir.md lists "
                             "them: add, sub, mul, div, ..., lt, le, eq, ...)",
                             call, op));
  });
}

qd_status qd_build_unary(qd_builder builder, const char *op, qd_value operand, qd_value *out) {
  constexpr const char *call = "qd_build_unary";
  return building(call, builder, out, [&](qd::IRBuilder &b) -> qd_status {
    if (!op)
      return nullArgument(call, "op");
    if (absl::Status s = scalars(call, {operand}); !s.ok())
      return toStatus(s);
    if (auto unary = qd::parseUnaryOp(op))
      return done(b.unary(*unary, unwrap(operand)), out);
    return error(QD_INVALID_ARGUMENT,
                 fmt::format("{}: '{}' is no unary operation (docs/ir.md lists them: neg, sin, "
                             "cos, exp, log, sqrt, ...)",
                             call, op));
  });
}

qd_status qd_build_cast(qd_builder builder, qd_value value, qd_dtype to, qd_value *out) {
  return building("qd_build_cast", builder, out, [&](qd::IRBuilder &b) -> qd_status {
    auto type = scalarType("qd_build_cast", to);
    absl::Status s = type.ok() ? scalars("qd_build_cast", {value}) : type.status();
    if (!s.ok())
      return toStatus(s);
    return done(b.cast(unwrap(value), *type), out);
  });
}

qd_status qd_build_select(qd_builder builder, qd_value cond, qd_value if_true, qd_value if_false,
                          qd_value *out) {
  return building("qd_build_select", builder, out, [&](qd::IRBuilder &b) -> qd_status {
    if (absl::Status s = scalars("qd_build_select", {cond, if_true, if_false}); !s.ok())
      return toStatus(s);
    return done(b.select(unwrap(cond), unwrap(if_true), unwrap(if_false)), out);
  });
}

qd_status qd_build_shape(qd_builder builder, qd_value ndarray, int axis, qd_value *out) {
  constexpr const char *call = "qd_build_shape";
  return building(call, builder, out, [&](qd::IRBuilder &b) -> qd_status {
    if (!ndarray || !unwrap(ndarray)->type().isNdarray())
      return error(QD_INVALID_ARGUMENT, fmt::format("{}: pass an ndarray argument", call));
    int rank = static_cast<int>(unwrap(ndarray)->type().ndim());
    if (axis < 0 || axis >= rank)
      return error(QD_OUT_OF_RANGE, fmt::format("{}: axis {} of %{}, which has {} dimensions", call,
                                                axis, unwrap(ndarray)->name(), rank));
    return done(b.shape(unwrap(ndarray), static_cast<unsigned>(axis)), out);
  });
}

qd_status qd_build_alloca(qd_builder builder, qd_dtype dtype, qd_value *out) {
  return building("qd_build_alloca", builder, out, [&](qd::IRBuilder &b) -> qd_status {
    auto type = scalarType("qd_build_alloca", dtype);
    if (!type.ok())
      return toStatus(type.status());
    return done(b.alloca(*type), out);
  });
}

qd_status qd_build_load_local(qd_builder builder, qd_value local_, qd_value *out) {
  return building("qd_build_load_local", builder, out, [&](qd::IRBuilder &b) -> qd_status {
    auto l = local("qd_build_load_local", local_);
    if (!l.ok())
      return toStatus(l.status());
    return done(b.load(*l), out);
  });
}

qd_status qd_build_store_local(qd_builder builder, qd_value local_, qd_value value) {
  qd_value unused = nullptr;
  return building("qd_build_store_local", builder, &unused, [&](qd::IRBuilder &b) -> qd_status {
    auto l = local("qd_build_store_local", local_);
    absl::Status s = l.ok() ? scalars("qd_build_store_local", {value}) : l.status();
    if (!s.ok())
      return toStatus(s);
    b.store(*l, unwrap(value));
    return nullptr;
  });
}

qd_status qd_build_load(qd_builder builder, qd_global global, size_t nindices,
                        const qd_value *indices, qd_value *out) {
  return building("qd_build_load", builder, out, [&](qd::IRBuilder &b) -> qd_status {
    auto ref = globalRef("qd_build_load", builder, global, nindices, indices);
    if (!ref.ok())
      return toStatus(ref.status());
    auto idx = reinterpret_cast<qd::Value *const *>(indices);
    return done(b.load(*ref, std::span<qd::Value *const>(idx, nindices)), out);
  });
}

/// A store (`atomic` false) or an atomic add of `value` to a global.
static qd_status writeGlobal(const char *call, qd_builder builder, qd_global global,
                             size_t nindices, const qd_value *indices, qd_value value,
                             bool atomic) {
  qd_value unused = nullptr;
  return building(call, builder, &unused, [&](qd::IRBuilder &b) -> qd_status {
    auto ref = globalRef(call, builder, global, nindices, indices);
    absl::Status s = ref.ok() ? scalars(call, {value}) : ref.status();
    if (!s.ok())
      return toStatus(s);
    std::span<qd::Value *const> idx(reinterpret_cast<qd::Value *const *>(indices), nindices);
    if (atomic)
      b.atomicAdd(*ref, idx, unwrap(value));
    else
      b.store(*ref, idx, unwrap(value));
    return nullptr;
  });
}

qd_status qd_build_store(qd_builder builder, qd_global global, size_t nindices,
                         const qd_value *indices, qd_value value) {
  return writeGlobal("qd_build_store", builder, global, nindices, indices, value, false);
}

qd_status qd_build_atomic_add(qd_builder builder, qd_global global, size_t nindices,
                              const qd_value *indices, qd_value value) {
  return writeGlobal("qd_build_atomic_add", builder, global, nindices, indices, value, true);
}

} // extern "C"

namespace {

absl::StatusOr<qd::Bound> bound(const char *call, qd_bound b) {
  if (!b.value)
    return qd::Bound(b.constant);
  if (absl::Status s = scalars(call, {b.value}); !s.ok())
    return s;
  return qd::Bound(unwrap(b.value));
}

/// Calls `body` on the builder after checking it.
template <typename F> qd_status scoped(const char *call, qd_builder builder, F &&body) {
  return guard(call, [&]() -> qd_status {
    if (!builder)
      return nullArgument(call, "builder");
    return body(builder->builder);
  });
}

} // namespace

extern "C" {

qd_status qd_build_begin_parallel(qd_builder builder, int ndim, const qd_bound *begins,
                                  const qd_bound *ends, qd_value *indices) {
  constexpr const char *call = "qd_build_begin_parallel";
  return scoped(call, builder, [&](qd::IRBuilder &b) -> qd_status {
    if (ndim < 1 || ndim > 8)
      return error(QD_INVALID_ARGUMENT,
                   fmt::format("{}: a band has 1 to 8 dimensions, not {}", call, ndim));
    if (!begins || !ends || !indices)
      return nullArgument(call, !begins ? "begins" : !ends ? "ends" : "indices");
    std::vector<qd::Bound> lo, hi;
    for (int d = 0; d < ndim; ++d) {
      auto l = bound(call, begins[d]), h = bound(call, ends[d]);
      if (!l.ok() || !h.ok())
        return toStatus(!l.ok() ? l.status() : h.status());
      lo.push_back(*l);
      hi.push_back(*h);
    }
    qd_builder_s::Open open;
    open.loop.emplace(ndim == 1 ? b.parallelFor(lo[0], hi[0]) : b.parallelBand(lo, hi));
    for (int d = 0; d < ndim; ++d)
      indices[d] = wrap(open.loop->index(static_cast<unsigned>(d)));
    builder->open.push_back(std::move(open));
    return nullptr;
  });
}

qd_status qd_build_begin_for(qd_builder builder, qd_bound begin, qd_bound end, qd_value *index) {
  constexpr const char *call = "qd_build_begin_for";
  return scoped(call, builder, [&](qd::IRBuilder &b) -> qd_status {
    if (!index)
      return nullArgument(call, "index");
    auto lo = bound(call, begin), hi = bound(call, end);
    if (!lo.ok() || !hi.ok())
      return toStatus(!lo.ok() ? lo.status() : hi.status());
    qd_builder_s::Open open;
    open.loop.emplace(b.forRange(*lo, *hi));
    *index = wrap(open.loop->index());
    builder->open.push_back(std::move(open));
    return nullptr;
  });
}

qd_status qd_build_begin_if(qd_builder builder, qd_value cond) {
  constexpr const char *call = "qd_build_begin_if";
  return scoped(call, builder, [&](qd::IRBuilder &b) -> qd_status {
    if (absl::Status s = scalars(call, {cond}); !s.ok())
      return toStatus(s);
    qd_builder_s::Open open;
    open.branch.emplace(b.ifThen(unwrap(cond)));
    builder->open.push_back(std::move(open));
    return nullptr;
  });
}

qd_status qd_build_else(qd_builder builder) {
  constexpr const char *call = "qd_build_else";
  return scoped(call, builder, [&](qd::IRBuilder &) -> qd_status {
    if (builder->open.empty() || !builder->open.back().branch || builder->open.back().inElse)
      return error(QD_FAILED_PRECONDITION,
                   fmt::format("{}: the innermost open statement is no `if` without an else "
                               "block; call qd_build_begin_if first",
                               call));
    builder->open.back().branch->otherwise();
    builder->open.back().inElse = true;
    return nullptr;
  });
}

qd_status qd_build_end(qd_builder builder) {
  constexpr const char *call = "qd_build_end";
  return scoped(call, builder, [&](qd::IRBuilder &) -> qd_status {
    if (builder->open.empty())
      return error(QD_FAILED_PRECONDITION,
                   fmt::format("{}: no loop or `if` is open (every qd_build_end needs a "
                               "qd_build_begin_*)",
                               call));
    builder->open.pop_back();
    return nullptr;
  });
}

} // extern "C"
