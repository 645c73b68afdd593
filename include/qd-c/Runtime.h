/*===- qd-c/Runtime.h - Backends, buffers, programs, launches ---*- C -*-===
 *
 * Backends chosen by name (docs/runtime.md), buffers that own memory or use
 * the caller's (host or device memory, DLPack tensors) in place, programs
 * (a module's field storage) and launches with arguments by name.
 * docs/c-api.md describes the API.
 *
 * Ownership: every handle here is the caller's and freed with its _free
 * call. A program keeps its module alive; a buffer of a program's field
 * keeps the program alive. Using a freed buffer handle is detected: the
 * call fails with FAILED_PRECONDITION ("buffer #7 was freed"), it does not
 * touch freed memory. Launches are synchronous (a launch returns once the
 * kernel has finished and its results are readable) unless they ask for
 * QD_LAUNCH_ASYNC on a GPU backend: see qd_launch_options.
 *
 *===----------------------------------------------------------------------===*/
#ifndef QD_C_RUNTIME_H
#define QD_C_RUNTIME_H

#include "qd-c/IR.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qd_backend_s *qd_backend;
typedef struct qd_buffer_s *qd_buffer;
typedef struct qd_program_s *qd_program;
/* DLPack's tensor (dlpack/dlpack.h); only pointers to it cross the API. */
struct DLManagedTensor;

/* ---- backends ------------------------------------------------------------ */

/* The backends of this build, space-separated ("interp cpu cuda ..."). */
QD_C_API char *qd_backend_names(void);
/* Creates backend `name` with `options`, comma-separated key=value items
 * ("threads=4"; NULL or "" for none): NOT_FOUND lists the backends,
 * INVALID_ARGUMENT names a bad option, FAILED_PRECONDITION says which
 * device or driver is missing (cuda on a machine without a GPU). */
QD_C_API qd_status qd_backend_create(const char *name, const char *options, qd_backend *out);
QD_C_API void qd_backend_free(qd_backend backend);
/* Its name, valid while it lives. */
QD_C_API const char *qd_backend_name(qd_backend backend);
/* The adstack sizing report of `kernel` on this backend (docs/sizing.md):
 * per stack its bound, tier and method, and where the last launch put it. */
QD_C_API qd_status qd_backend_sizing_report(qd_backend backend, qd_kernel kernel, char **out);
/* Waits for the backend's asynchronous launches (QD_LAUNCH_ASYNC) and
 * returns the first error one of them reported, with the message the
 * launch would have returned, marked as reported late. NULL when all
 * succeeded, and on backends whose launches are all synchronous. */
QD_C_API qd_status qd_backend_synchronize(qd_backend backend);

/* ---- buffers ------------------------------------------------------------- */

/* A dense row-major array of `ndim` extents, owning zeroed host memory. */
QD_C_API qd_status qd_buffer_create(qd_dtype dtype, int ndim, const int64_t *shape, qd_buffer *out);
/* An array over the caller's host memory (`data`, dense, row-major), used
 * in place by launches; it must outlive the buffer. */
QD_C_API qd_status qd_buffer_borrow(qd_dtype dtype, int ndim, const int64_t *shape, void *data,
                                    qd_buffer *out);
/* An array over the caller's device memory on `backend`'s device (a device
 * address, e.g. a CUDA tensor's data pointer), used in place by launches
 * on that backend; host reads copy it back. FAILED_PRECONDITION for a
 * backend without device memory (cpu, interp). */
QD_C_API qd_status qd_buffer_borrow_device(qd_backend backend, qd_dtype dtype, int ndim,
                                           const int64_t *shape, uint64_t device_pointer,
                                           qd_buffer *out);
/* An array over a DLPack tensor's memory, used in place. On success the
 * buffer owns `tensor` and calls its deleter when freed; on failure the
 * caller keeps it. Host tensors (kDLCPU) need no backend; device tensors
 * (kDLCUDA) need the backend of their device. The tensor must be dense
 * and row-major (strides NULL or compact), of a qd element type. */
QD_C_API qd_status qd_buffer_from_dlpack(struct DLManagedTensor *tensor, qd_backend backend,
                                         qd_buffer *out);
/* A DLPack tensor over the buffer's host memory (brought up to date
 * first); it keeps the memory alive until its deleter is called, even
 * after qd_buffer_free. */
QD_C_API qd_status qd_buffer_to_dlpack(qd_buffer buffer, struct DLManagedTensor **out);
/* Frees a buffer handle; NULL and an already freed handle are ignored. */
QD_C_API void qd_buffer_free(qd_buffer buffer);

QD_C_API qd_status qd_buffer_dtype(qd_buffer buffer, qd_dtype *out);
/* Its rank; `shape` (may be NULL) receives up to `max` extents. */
QD_C_API qd_status qd_buffer_shape(qd_buffer buffer, int *ndim, int64_t *shape, int max);
/* Its host memory, brought up to date (a device copy is copied back): the
 * borrowed pointer for borrowed host memory. */
QD_C_API qd_status qd_buffer_data(qd_buffer buffer, void **out);
/* Copies `bytes` (the buffer's size) to or from host memory `data`. */
QD_C_API qd_status qd_buffer_read(qd_buffer buffer, void *data, size_t bytes);
QD_C_API qd_status qd_buffer_write(qd_buffer buffer, const void *data, size_t bytes);

/* ---- programs and launches ----------------------------------------------- */

/* A module's field storage (zeroed): kernels of the module launch on it.
 * The program keeps the module alive; kernels added to the module later
 * (gradients) launch too. */
QD_C_API qd_status qd_program_create(qd_module module, qd_program *out);
QD_C_API void qd_program_free(qd_program program);
/* The storage of field `name`'s component, as a buffer handle (which keeps
 * the program alive). NOT_FOUND names the field or the companion. */
QD_C_API qd_status qd_program_field(qd_program program, const char *name, qd_component component,
                                    qd_buffer *out);

/* What a launch argument holds. */
typedef enum qd_arg_kind {
  QD_ARG_NDARRAY = 0, /* primal, and grad/dual when the argument has them */
  QD_ARG_FLOAT = 1,   /* `f`, converted to the argument's float type */
  QD_ARG_INT = 2      /* `i`, to the argument's type (an f32/f64 takes it too) */
} qd_arg_kind;

/* One launch argument, by the name of the kernel argument (without '%'). */
typedef struct qd_arg {
  const char *name;
  qd_arg_kind kind;
  double f;
  int64_t i;
  qd_buffer primal, grad, dual; /* NULL where not given */
} qd_arg;

/* Flags of a launch (LaunchOptions). */
#define QD_LAUNCH_BOUNDS_CHECKED 1u /* out-of-range indices are errors */
/* Return once the launch is queued, without waiting for its kernels (GPU
 * backends; others run the launch synchronously). What the kernels report
 * (an index out of range, an adstack overflow) is returned later, with
 * the same message, by the first call on the backend that waits for the
 * launch: qd_backend_synchronize, a launch without the flag, or a launch
 * that must wait (docs/runtime.md, "Asynchronous launches"). */
#define QD_LAUNCH_ASYNC 2u

/* Launch options beyond the flags (qd::LaunchOptions). Start from
 * qd_launch_options_default(), which sets `size`, and change what you
 * need: `size` says which version of the struct the caller was compiled
 * with. Fields are only ever appended, and the library reads only those
 * the size covers (the others keep their defaults): it takes
 * QD_LAUNCH_OPTIONS_SIZE_0_2 (48, up to size_adstacks) and
 * sizeof(qd_launch_options). */
#define QD_LAUNCH_OPTIONS_SIZE_0_2 48u
typedef struct qd_launch_options {
  uint32_t size;  /* sizeof(qd_launch_options) */
  uint32_t flags; /* QD_LAUNCH_* */
  /* The stream the launch goes on, after the caller's work queued there:
   * a CUstream (cuda) or hipStream_t (amdgpu); NULL: the backend's own.
   * Other backends refuse a non-NULL stream (INVALID_ARGUMENT). */
  void *stream;
  /* Stop the launch after this many nanoseconds (0: no limit), with
   * QD_DEADLINE_EXCEEDED naming the loop; such a launch is synchronous. */
  uint64_t timeout_ns;
  /* Capacity of capacity-0 adstacks the sizing gives none (0: 256). */
  int64_t default_adstack_capacity;
  /* Capacity of stacks measured at launch at a kernel's first optimistic
   * launch (0: that launch counts first). */
  int64_t optimistic_initial_capacity;
  /* Stacks measured at launch: -1 the backend's choice, 0 count before
   * every launch, 1 the optimistic launch (docs/sizing.md). */
  int32_t optimistic_adstacks;
  /* Non-zero (the default): size capacity-0 adstacks before the launch;
   * 0: every such stack gets default_adstack_capacity. */
  int32_t size_adstacks;
  /* (Since 0.3.) The most adstack heap a launch may lay out, in bytes (0:
   * the default, half of what the device can spare); a launch one of whose
   * iterations needs more fails with QD_RESOURCE_EXHAUSTED. */
  int64_t adstack_memory_budget;
  /* (Since 0.3.) Stacks with a static upper bound run at it, unmeasured,
   * where it holds at most this many bytes over the launch's iterations
   * (default 1 MiB; 0: always measure; docs/sizing.md). */
  int64_t refine_adstacks_above_bytes;
} qd_launch_options;

/* The defaults: size set, no flags, no stream, no timeout, the sizing's
 * default capacity, the backend's choice of measuring, sizing on. */
QD_C_API qd_launch_options qd_launch_options_default(void);

/* Launches kernel `kernel` with `nargs` arguments by name on `backend`:
 * every argument once, in any order. Errors name the kernel and the
 * argument (an unknown or missing name, a wrong element type or rank, a
 * missing companion) or what the launch found (an adstack overflow, an
 * index out of range). */
QD_C_API qd_status qd_program_launch(qd_program program, qd_backend backend, const char *kernel,
                                     size_t nargs, const qd_arg *args, unsigned flags);
/* qd_program_launch with `options` (NULL: qd_launch_options_default()).
 * INVALID_ARGUMENT for a `size` this library does not know. */
QD_C_API qd_status qd_program_launch_with_options(qd_program program, qd_backend backend,
                                                  const char *kernel, size_t nargs,
                                                  const qd_arg *args,
                                                  const qd_launch_options *options);

/* A consumed adjoint (see qd_kernel_gradient_adjoints) and its seed. */
typedef struct qd_seed {
  const char *name; /* the field or ndarray argument, without '@'/'%' */
  double value;
} qd_seed;

/* Launches `forward`, then its gradient kernel `gradient`, with the same
 * arguments (GradientLaunch.h): first zeroes the accumulated adjoints and
 * seeds the consumed ones (the others consumed are zeroed). */
QD_C_API qd_status qd_program_launch_with_gradient(qd_program program, qd_backend backend,
                                                   const char *forward, const char *gradient,
                                                   size_t nargs, const qd_arg *args, size_t nseeds,
                                                   const qd_seed *seeds, unsigned flags);
/* qd_program_launch_with_gradient with `options` (NULL: the defaults). The
 * adjoints are zeroed and seeded on the host first, which waits for the
 * launches before; the two launches may then be asynchronous. */
QD_C_API qd_status qd_program_launch_with_gradient_options(
    qd_program program, qd_backend backend, const char *forward, const char *gradient, size_t nargs,
    const qd_arg *args, size_t nseeds, const qd_seed *seeds, const qd_launch_options *options);

#ifdef __cplusplus
}
#endif

#endif /* QD_C_RUNTIME_H */
