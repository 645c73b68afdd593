/*===- qd-c/qd.h - qd's C API -----------------------------------*- C -*-===
 *
 * Everything of the C API (docs/c-api.md): status objects and element
 * types (Core.h), modules, the builder, passes and autodiff (IR.h),
 * backends, buffers, programs and launches (Runtime.h), the gradient
 * checker (Check.h), launch tapes (Tape.h). Link libqd-c (CMake: qd::c).
 *
 *===----------------------------------------------------------------------===*/
#ifndef QD_C_QD_H
#define QD_C_QD_H

#include "qd-c/Check.h"
#include "qd-c/Core.h"
#include "qd-c/IR.h"
#include "qd-c/Runtime.h"
#include "qd-c/Tape.h"

#endif /* QD_C_QD_H */
