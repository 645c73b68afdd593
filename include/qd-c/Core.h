/*===- qd-c/Core.h - Status objects, version, element types ------*- C -*-===
 *
 * The base of qd's C API (docs/c-api.md): C99, no C++ type crosses it.
 *
 * Every call that can fail returns a qd_status: NULL on success, otherwise
 * an object carrying an error code and qd's message (naming the kernel,
 * argument or backend, with `file:line:col` where there is a location, and
 * what to do). The caller owns it and frees it with qd_status_free; a
 * status that is ignored leaks, it never aborts. Output parameters are
 * written only on success.
 *
 * Strings qd returns (char *) are the caller's, freed with qd_string_free.
 * Strings qd takes are NUL-terminated UTF-8 and copied when kept.
 *
 *===----------------------------------------------------------------------===*/
#ifndef QD_C_CORE_H
#define QD_C_CORE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define QD_C_API __attribute__((visibility("default")))
#else
#define QD_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the C API: major.minor.patch of the qd it ships with. A
 * minor release only adds calls. */
#define QD_C_VERSION_MAJOR 0
#define QD_C_VERSION_MINOR 3
#define QD_C_VERSION_PATCH 0

/* "0.3.0": the version of the library loaded at run time. */
QD_C_API const char *qd_version(void);

/* ---- status objects ------------------------------------------------------ */

/* The error codes; the same numbers as absl::StatusCode (and gRPC). */
typedef enum qd_status_code {
  QD_OK = 0,
  QD_CANCELLED = 1,
  QD_UNKNOWN = 2,
  QD_INVALID_ARGUMENT = 3,
  QD_DEADLINE_EXCEEDED = 4,
  QD_NOT_FOUND = 5,
  QD_ALREADY_EXISTS = 6,
  QD_PERMISSION_DENIED = 7,
  QD_RESOURCE_EXHAUSTED = 8,
  QD_FAILED_PRECONDITION = 9,
  QD_ABORTED = 10,
  QD_OUT_OF_RANGE = 11,
  QD_UNIMPLEMENTED = 12,
  QD_INTERNAL = 13,
  QD_UNAVAILABLE = 14,
  QD_DATA_LOSS = 15,
  QD_UNAUTHENTICATED = 16
} qd_status_code;

/* An error; NULL stands for success. */
typedef struct qd_status_s *qd_status;

/* The code of `status` (QD_OK for NULL). */
QD_C_API qd_status_code qd_status_get_code(qd_status status);
/* Its message, valid until the status is freed ("" for NULL). */
QD_C_API const char *qd_status_message(qd_status status);
/* Frees a status; NULL is ignored. */
QD_C_API void qd_status_free(qd_status status);

/* Frees a string qd returned; NULL is ignored. */
QD_C_API void qd_string_free(char *text);

/* ---- element types ------------------------------------------------------- */

typedef enum qd_dtype {
  QD_I1 = 0, /* one byte per element, 0 or 1 */
  QD_I32 = 1,
  QD_I64 = 2,
  QD_F32 = 3,
  QD_F64 = 4
} qd_dtype;

/* "i1", "i32", "i64", "f32", "f64"; "?" for a value outside the enum. */
QD_C_API const char *qd_dtype_name(qd_dtype dtype);

/* The companions of a field or an ndarray argument. */
typedef enum qd_component { QD_PRIMAL = 0, QD_GRAD = 1, QD_DUAL = 2 } qd_component;

#ifdef __cplusplus
}
#endif

#endif /* QD_C_CORE_H */
