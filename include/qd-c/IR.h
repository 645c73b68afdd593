/*===- qd-c/IR.h - Modules, kernels, a builder, passes, autodiff -*- C -*-===
 *
 * Modules parsed from the text format (docs/ir.md) or built statement by
 * statement, verified, transformed by a pass pipeline (docs/passes.md) and
 * differentiated (docs/autodiff.md). docs/c-api.md describes the API.
 *
 * Ownership: a qd_module is the caller's (qd_module_free). A qd_kernel and
 * a qd_value point into their module: valid while it lives (a pass that
 * rewrites a kernel may remove values; take kernels by name again after a
 * pipeline).
 *
 *===----------------------------------------------------------------------===*/
#ifndef QD_C_IR_H
#define QD_C_IR_H

#include "qd-c/Core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qd_module_s *qd_module;
typedef struct qd_kernel_s *qd_kernel;
typedef struct qd_value_s *qd_value;
typedef struct qd_builder_s *qd_builder;

/* ---- modules ------------------------------------------------------------- */

/* Parses `text` (the text format); `filename` (NULL: "<input>") is what
 * error locations name: "k.qd:3:7: error: ...". */
QD_C_API qd_status qd_module_parse(const char *text, const char *filename, qd_module *out);
/* An empty module, for the builder. */
QD_C_API qd_status qd_module_create(qd_module *out);
/* Frees a module; NULL is ignored. Programs made from it keep it alive. */
QD_C_API void qd_module_free(qd_module module);
/* The module in the text format (parses back to the same module). */
QD_C_API qd_status qd_module_print(qd_module module, char **out);
/* Runs the verifier: errors name the statement and its location. */
QD_C_API qd_status qd_module_verify(qd_module module);
/* Runs a pass pipeline, as qd-opt --passes takes it: "fold,dce",
 * "reverse-ad{tape-nested-loops=false}". The module is verified after
 * each pass when `verify_each` is non-zero. */
QD_C_API qd_status qd_module_run_passes(qd_module module, const char *pipeline, int verify_each);

/* ---- kernels ------------------------------------------------------------- */

/* Kernel `name` (without '@'): NOT_FOUND lists the module's kernels. */
QD_C_API qd_status qd_module_find_kernel(qd_module module, const char *name, qd_kernel *out);
QD_C_API size_t qd_module_num_kernels(qd_module module);
/* Kernel `index` (< qd_module_num_kernels), or NULL. */
QD_C_API qd_kernel qd_module_kernel(qd_module module, size_t index);
/* Its name, valid while the kernel lives. */
QD_C_API const char *qd_kernel_name(qd_kernel kernel);

/* One kernel argument, as qd_kernel_arg describes it. */
typedef struct qd_arg_info {
  const char *name; /* without '%', valid while the kernel lives */
  int is_ndarray;   /* 1: an ndarray of `rank` dimensions; 0: a scalar */
  qd_dtype dtype;   /* the scalar's type or the ndarray's element type */
  int rank;
  int has_grad; /* the ndarray has a grad / dual companion */
  int has_dual;
} qd_arg_info;

QD_C_API size_t qd_kernel_num_args(qd_kernel kernel);
QD_C_API qd_status qd_kernel_arg(qd_kernel kernel, size_t index, qd_arg_info *out);

/* ---- building ------------------------------------------------------------ */

/* Adds field `name` of `ndim` extents `shape` (ndim 0: a scalar field)
 * with optional grad and dual companions. */
QD_C_API qd_status qd_module_add_field(qd_module module, const char *name, qd_dtype dtype, int ndim,
                                       const int64_t *shape, int grad, int dual);
/* Adds an empty kernel; ALREADY_EXISTS when the name is taken. */
QD_C_API qd_status qd_module_add_kernel(qd_module module, const char *name, qd_kernel *out);
/* Adds a scalar argument `%name: dtype` and returns it as a value. */
QD_C_API qd_status qd_kernel_add_scalar_arg(qd_kernel kernel, const char *name, qd_dtype dtype,
                                            qd_value *out);
/* Adds `%name: ndarray<dtype, rank>` with optional companions. */
QD_C_API qd_status qd_kernel_add_ndarray_arg(qd_kernel kernel, const char *name, qd_dtype dtype,
                                             int rank, int grad, int dual, qd_value *out);

/* A builder inserts at the end of a kernel's body, or of the innermost
 * loop or branch it has begun. */
QD_C_API qd_status qd_builder_create(qd_kernel kernel, qd_builder *out);
/* Frees a builder (closing what it left open); NULL is ignored. */
QD_C_API void qd_builder_free(qd_builder builder);
/* The source location of the statements built from now on: the verifier's
 * and the passes' errors name it (a front-end's file:line:col). */
QD_C_API qd_status qd_builder_set_location(qd_builder builder, const char *file, uint32_t line,
                                           uint32_t col);
/* Names a value (what the printer calls it: "%name"). */
QD_C_API qd_status qd_value_set_name(qd_value value, const char *name);

/* A constant; integer types take `value` truncated towards zero. */
QD_C_API qd_status qd_build_const(qd_builder builder, qd_dtype dtype, double value, qd_value *out);
/* A binary operation by its text-format name: "add", "sub", "mul", "div",
 * "max", "pow", ...; or a comparison: "lt", "le", "eq", "ne", "gt", "ge". */
QD_C_API qd_status qd_build_binary(qd_builder builder, const char *op, qd_value lhs, qd_value rhs,
                                   qd_value *out);
/* A unary operation by name: "neg", "sin", "cos", "exp", "log", "sqrt", ... */
QD_C_API qd_status qd_build_unary(qd_builder builder, const char *op, qd_value operand,
                                  qd_value *out);
QD_C_API qd_status qd_build_cast(qd_builder builder, qd_value value, qd_dtype to, qd_value *out);
QD_C_API qd_status qd_build_select(qd_builder builder, qd_value cond, qd_value if_true,
                                   qd_value if_false, qd_value *out);
/* Extent `axis` of an ndarray argument, as an i32. */
QD_C_API qd_status qd_build_shape(qd_builder builder, qd_value ndarray, int axis, qd_value *out);

/* A local variable and its loads and stores. */
QD_C_API qd_status qd_build_alloca(qd_builder builder, qd_dtype dtype, qd_value *out);
QD_C_API qd_status qd_build_load_local(qd_builder builder, qd_value local, qd_value *out);
QD_C_API qd_status qd_build_store_local(qd_builder builder, qd_value local, qd_value value);

/* A global element: an ndarray argument (`ndarray` non-NULL) or the field
 * named `field`, with `nindices` indices. */
typedef struct qd_global {
  qd_value ndarray;
  const char *field;
} qd_global;
QD_C_API qd_status qd_build_load(qd_builder builder, qd_global global, size_t nindices,
                                 const qd_value *indices, qd_value *out);
QD_C_API qd_status qd_build_store(qd_builder builder, qd_global global, size_t nindices,
                                  const qd_value *indices, qd_value value);
QD_C_API qd_status qd_build_atomic_add(qd_builder builder, qd_global global, size_t nindices,
                                       const qd_value *indices, qd_value value);

/* A loop bound: `value` when non-NULL (an i32 or i64 value), else
 * `constant`. */
typedef struct qd_bound {
  qd_value value;
  int64_t constant;
} qd_bound;
/* Begins a parallel band of `ndim` dimensions (a task at the top level of
 * the kernel): indices[d] receives the index of dimension d. */
QD_C_API qd_status qd_build_begin_parallel(qd_builder builder, int ndim, const qd_bound *begins,
                                           const qd_bound *ends, qd_value *indices);
/* Begins a serial range-for inside a task; `index` receives its index. */
QD_C_API qd_status qd_build_begin_for(qd_builder builder, qd_bound begin, qd_bound end,
                                      qd_value *index);
/* Begins `if cond`; qd_build_else switches to its else block. */
QD_C_API qd_status qd_build_begin_if(qd_builder builder, qd_value cond);
QD_C_API qd_status qd_build_else(qd_builder builder);
/* Ends the innermost loop or branch; FAILED_PRECONDITION when none is open. */
QD_C_API qd_status qd_build_end(qd_builder builder);

/* ---- autodiff ------------------------------------------------------------ */

/* Flags of qd_module_gradient (ReverseADOptions, docs/autodiff.md). */
#define QD_GRADIENT_NO_TAPE_NESTED_LOOPS 1u
#define QD_GRADIENT_NO_TAPE_FACTORS 2u

/* Adds the reverse-mode gradient kernel of kernel `name` (named
 * `grad_name`, NULL: "<name>_grad") and returns it. Errors name the
 * statement that cannot be differentiated. */
QD_C_API qd_status qd_module_gradient(qd_module module, const char *name, const char *grad_name,
                                      unsigned flags, qd_kernel *out);
/* Adds the forward-mode kernel (NULL `dual_name`: "<name>_dual"). */
QD_C_API qd_status qd_module_forward(qd_module module, const char *name, const char *dual_name,
                                     qd_kernel *out);

/* The adjoints a gradient kernel adds into (the inputs' grad companions)
 * and consumes (the outputs', which the caller seeds), as names of fields
 * ("@x") and ndarray arguments ("%x"), space-separated, in the order the
 * code touches them. */
QD_C_API qd_status qd_kernel_gradient_adjoints(qd_kernel gradient, char **accumulated,
                                               char **consumed);

#ifdef __cplusplus
}
#endif

#endif /* QD_C_IR_H */
