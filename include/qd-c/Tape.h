/*===- qd-c/Tape.h - Gradients through several launches ----------*- C -*-===
 *
 * A launch tape (qd/runtime/LaunchTape.h; docs/runtime.md, "Launch
 * tapes") records launches on one program and backend and runs their
 * gradient kernels in reverse order (backward) or their tangent kernels in
 * order (jvp), each on the data its own forward launch saw.
 *
 *   qd_tape tape;
 *   qd_tape_create(program, backend, NULL, &tape);   (default options)
 *   qd_tape_launch(tape, "step", nargs, args);       (runs @step, records it)
 *   ...
 *   qd_tape_seed seed = {"loss", NULL, 1.0, NULL, 0};
 *   qd_tape_backward(tape, 1, &seed, 1);             (@loss_grad, @step_grad, ...)
 *   qd_tape_free(tape);
 *
 * The tape keeps the program and the buffers of recorded ndarray
 * arguments alive; the backend must outlive it.
 *
 *===----------------------------------------------------------------------===*/
#ifndef QD_C_TAPE_H
#define QD_C_TAPE_H

#include "qd-c/Runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qd_tape_s *qd_tape;

/* LaunchTapeOptions. */
typedef struct qd_tape_options {
  /* Non-zero: copy a buffer before a recorded launch overwrites what an
   * earlier launch's gradient reads; 0: refuse that launch, with an error
   * naming both launches and the buffer. */
  int snapshots;
  /* Bytes the tape may hold between recording and backward (0: no limit);
   * with a limit the tape checkpoints every k launches and recomputes. */
  uint64_t checkpoint_budget;
  /* Non-zero: keep each buffer's contents from before the tape first
   * writes it, so that qd_tape_jvp can start from there. */
  int keep_initial_state;
  /* Non-zero: a buffer the tape needs that changed from outside the tape
   * is an error naming it and the launch. */
  int check_unchanged;
  /* Flags of every launch the tape makes (QD_LAUNCH_BOUNDS_CHECKED; a tape
   * launches synchronously, so QD_LAUNCH_ASYNC is refused). */
  unsigned launch_flags;
} qd_tape_options;

/* The defaults: snapshots, no budget, no initial state, check_unchanged,
 * no launch flags. */
QD_C_API qd_tape_options qd_tape_options_default(void);

/* A tape over `program` and `backend`; `options` NULL for the defaults. */
QD_C_API qd_status qd_tape_create(qd_program program, qd_backend backend,
                                  const qd_tape_options *options, qd_tape *out);
/* Frees a tape (NULL is ignored); the buffers keep their contents. */
QD_C_API void qd_tape_free(qd_tape tape);

/* Runs kernel `kernel` with `nargs` arguments by name (as
 * qd_program_launch takes them) and records it, with `@kernel_grad` and
 * `@kernel_dual` where the module has them. An error leaves the tape as it
 * was, except for a launch that failed while it ran: the tape then
 * refuses everything until qd_tape_clear. */
QD_C_API qd_status qd_tape_launch(qd_tape tape, const char *kernel, size_t nargs,
                                  const qd_arg *args);

/* A seed of qd_tape_backward (an adjoint) or qd_tape_jvp (a tangent): the
 * grad (backward) or dual (jvp) companion of field `field` or the buffer
 * `buffer` (an ndarray's grad or dual buffer as passed in its qd_arg);
 * exactly one of the two. Every element is `value`, or, when `values` is
 * not NULL, `nvalues` values in row-major order (as many as it has). */
typedef struct qd_tape_seed {
  const char *field; /* without '@' */
  qd_buffer buffer;
  double value;
  const double *values;
  size_t nvalues;
} qd_tape_seed;

/* Runs the recorded launches' gradients in reverse order: first zeroes the
 * adjoints they add into or read (unless `zero_adjoints` is 0: then they
 * add to what the adjoints hold), then sets the seeded ones. Afterwards
 * the buffers hold what the last launch left: backward may run again and
 * recording may go on. */
QD_C_API qd_status qd_tape_backward(qd_tape tape, size_t nseeds, const qd_tape_seed *seeds,
                                    int zero_adjoints);
/* Forward mode: from the state the tape started from (it needs
 * keep_initial_state or a checkpoint budget), zeroes the duals the tangent
 * kernels touch, sets the seeded tangents and runs the tangent kernels in
 * recording order; the outputs' duals then hold the Jacobian-vector
 * product. */
QD_C_API qd_status qd_tape_jvp(qd_tape tape, size_t ntangents, const qd_tape_seed *tangents);

/* TapeMemory: the copies the tape holds. */
typedef struct qd_tape_memory {
  uint64_t held_bytes;         /* snapshots, checkpoints, initial contents held now */
  uint64_t peak_bytes;         /* the most held at once, backward and jvp included */
  int64_t checkpoint_interval; /* launches per checkpoint segment (0: none) */
  int64_t checkpoints;         /* segments backward recomputes, the start included */
} qd_tape_memory;

QD_C_API qd_status qd_tape_memory_report(qd_tape tape, qd_tape_memory *out);
/* The adstack heap of the backend's last launch (TapeMemory::adStackHeap):
 * its bytes and the threads it was laid out for (GPU threads, CPU
 * workers); both -1 for a backend without one (the interpreter). Either
 * pointer may be NULL. */
QD_C_API qd_status qd_tape_adstack_heap(qd_tape tape, int64_t *bytes, int64_t *threads);
/* The number of launches recorded. */
QD_C_API qd_status qd_tape_size(qd_tape tape, size_t *out);
/* Forgets every launch and copy (the buffers keep their contents). */
QD_C_API qd_status qd_tape_clear(qd_tape tape);

#ifdef __cplusplus
}
#endif

#endif /* QD_C_TAPE_H */
