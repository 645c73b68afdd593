/*===- qd-c/Check.h - The gradient checker -----------------------*- C -*-===
 *
 * Checks a kernel's reverse- and forward-mode derivatives against finite
 * differences (qd/check/GradCheck.h; docs/autodiff.md, "Checking a
 * gradient").
 *
 *===----------------------------------------------------------------------===*/
#ifndef QD_C_CHECK_H
#define QD_C_CHECK_H

#include "qd-c/Runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The value of a kernel argument or the initial contents of a field:
 * `ndim` extents (0: a scalar) and their row-major elements, converted to
 * the declared type (an integer type takes integral values only). */
typedef struct qd_check_value {
  const char *name; /* the argument or field, without '%'/'@' */
  int is_field;
  int ndim;
  const int64_t *shape;
  const double *values;
} qd_check_value;

typedef struct qd_check_options {
  double rtol, atol;    /* 0: the defaults of the kernel's precision */
  int64_t max_elements; /* elements checked one by one per input */
  uint64_t seed;
  int reverse, forward; /* which modes to check (non-zero: checked) */
} qd_check_options;

/* The defaults: rtol = atol = 0, 64 elements, seed 0, both modes. */
QD_C_API qd_check_options qd_check_options_default(void);

/* Checks kernel `kernel` of `module` (unchanged) launched with `values` on
 * `backend` (NULL: the reference interpreter). `passed` receives 1 when
 * every derivative agrees, `report` (may be NULL) the readable report. An
 * error status means the check could not run (no such kernel, a missing
 * argument value, a kernel the passes cannot differentiate); a failed
 * check is a success with `passed` 0. */
QD_C_API qd_status qd_check_gradient(qd_module module, const char *kernel, size_t nvalues,
                                     const qd_check_value *values, const qd_check_options *options,
                                     qd_backend backend, int *passed, char **report);

#ifdef __cplusplus
}
#endif

#endif /* QD_C_CHECK_H */
