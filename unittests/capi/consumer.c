/* A C99 consumer of qd's C API (include/qd-c), compiled with -std=c99
 * -Wall -Wextra -Werror -pedantic: parses a kernel, builds its gradient
 * (launched directly and through a launch tape), builds a second kernel
 * with the builder, and launches both on every backend named on the
 * command line (cpu and interp under CTest), checking the values. Prints "ok <backend>" per backend
 * and exits 0 when all hold. */
#include "qd-c/qd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

/* Fails the run when `status` is an error, printing its message. */
static int ok(qd_status status, const char *what) {
  if (!status)
    return 1;
  fprintf(stderr, "FAIL %s: %s\n", what, qd_status_message(status));
  qd_status_free(status);
  ++failures;
  return 0;
}

static void expect_near(double got, double want, const char *what, int i) {
  if (fabs(got - want) > 1e-5 * (1.0 + fabs(want))) {
    fprintf(stderr, "FAIL %s[%d] = %.9g, expected %.9g\n", what, i, got, want);
    ++failures;
  }
}

static const char *kEnergy =
    "kernel @energy(%x: ndarray<f32, 1> grad, %w: f32, %loss: ndarray<f32, 1> grad) {\n"
    "  %n = shape %x, 0 : i32\n"
    "  parallel for %i = 0 to %n {\n"
    "    %xi = load %x[%i] : f32\n"
    "    %s = sin %xi : f32\n"
    "    %v = mul %s, %xi : f32\n"
    "    %e = mul %w, %v : f32\n"
    "    %zero = const 0 : i32\n"
    "    atomic_add %loss[%zero], %e : f32\n"
    "  }\n"
    "}\n";

/* @scale(%a: f64, %x: ndarray<f64, 1>, %y: ndarray<f64, 1>): y[i] = a * x[i] + 1. */
static void build_scale(qd_module module) {
  qd_kernel k;
  qd_value a, x, y, n, i, xi, ax, one, r;
  qd_builder b;
  qd_bound lo = {NULL, 0}, hi;
  qd_global gx = {NULL, NULL}, gy = {NULL, NULL};
  if (!ok(qd_module_add_kernel(module, "scale", &k), "add kernel") ||
      !ok(qd_kernel_add_scalar_arg(k, "a", QD_F64, &a), "add %a") ||
      !ok(qd_kernel_add_ndarray_arg(k, "x", QD_F64, 1, 0, 0, &x), "add %x") ||
      !ok(qd_kernel_add_ndarray_arg(k, "y", QD_F64, 1, 0, 0, &y), "add %y") ||
      !ok(qd_builder_create(k, &b), "builder"))
    return;
  gx.ndarray = x;
  gy.ndarray = y;
  ok(qd_build_shape(b, x, 0, &n), "shape");
  hi.value = n;
  hi.constant = 0;
  ok(qd_build_begin_parallel(b, 1, &lo, &hi, &i), "parallel");
  ok(qd_build_load(b, gx, 1, &i, &xi), "load");
  ok(qd_build_binary(b, "mul", a, xi, &ax), "mul");
  ok(qd_build_const(b, QD_F64, 1.0, &one), "const");
  ok(qd_build_binary(b, "add", ax, one, &r), "add");
  ok(qd_build_store(b, gy, 1, &i, r), "store");
  ok(qd_build_end(b), "end");
  qd_builder_free(b);
}

static void ndarray_arg(qd_arg *arg, const char *name, qd_buffer primal, qd_buffer grad) {
  memset(arg, 0, sizeof *arg);
  arg->name = name;
  arg->kind = QD_ARG_NDARRAY;
  arg->primal = primal;
  arg->grad = grad;
}

/* Records @energy twice on a launch tape (the loss adds up) and runs it
 * backward with loss.grad (the buffer `loss_grad`) seeded: x.grad is twice
 * one launch's gradient. */
static void tape_on(qd_program program, qd_backend backend, const qd_arg *args, qd_buffer loss_grad,
                    const float *x, const float *x_grad, int n) {
  qd_tape tape;
  qd_tape_options options = qd_tape_options_default();
  qd_tape_seed seed = {NULL, NULL, 1.0, NULL, 0};
  qd_tape_memory memory;
  int i;
  seed.buffer = loss_grad;
  options.launch_flags = QD_LAUNCH_BOUNDS_CHECKED;
  if (!ok(qd_tape_create(program, backend, &options, &tape), "tape"))
    return;
  if (ok(qd_tape_launch(tape, "energy", 3, args), "tape launch 0") &&
      ok(qd_tape_launch(tape, "energy", 3, args), "tape launch 1") &&
      ok(qd_tape_backward(tape, 1, &seed, 1), "tape backward") &&
      ok(qd_tape_memory_report(tape, &memory), "tape memory")) {
    for (i = 0; i < n; ++i)
      expect_near(x_grad[i], 2 * 0.5 * (sin(x[i]) + x[i] * cos(x[i])), "tape x.grad", i);
    expect_near((double)memory.held_bytes, 0, "tape held bytes", 0); /* nothing overwritten */
  }
  qd_tape_free(tape);
}

static void run_on(const char *backend_name, qd_module module) {
  enum { N = 5 };
  float x[N] = {0.5f, -1.0f, 2.0f, 0.25f, 3.0f}, x_grad[N];
  float loss = 0, loss_grad = 0;
  double sx[N] = {1, 2, 3, 4, 5}, sy[N] = {0};
  int64_t shape = N, one = 1;
  qd_backend backend;
  qd_program program;
  qd_buffer bx, bxg, bl, blg, bsx, bsy;
  qd_arg args[3], sargs[3];
  qd_seed seed = {"loss", 1.0};
  int i, before = failures;
  memset(x_grad, 0, sizeof x_grad);
  if (!ok(qd_backend_create(backend_name, NULL, &backend), "backend"))
    return;
  if (!ok(qd_program_create(module, &program), "program"))
    return;
  /* Host memory borrowed in place. */
  ok(qd_buffer_borrow(QD_F32, 1, &shape, x, &bx), "borrow x");
  ok(qd_buffer_borrow(QD_F32, 1, &shape, x_grad, &bxg), "borrow x.grad");
  ok(qd_buffer_borrow(QD_F32, 1, &one, &loss, &bl), "borrow loss");
  ok(qd_buffer_borrow(QD_F32, 1, &one, &loss_grad, &blg), "borrow loss.grad");
  ndarray_arg(&args[0], "x", bx, bxg);
  ndarray_arg(&args[1], "w", NULL, NULL);
  args[1].kind = QD_ARG_FLOAT;
  args[1].f = 0.5;
  ndarray_arg(&args[2], "loss", bl, blg);
  if (ok(qd_program_launch_with_gradient(program, backend, "energy", "energy_grad", 3, args, 1,
                                         &seed, 0),
         "launch with gradient")) {
    double want = 0;
    for (i = 0; i < N; ++i) {
      want += 0.5 * sin(x[i]) * x[i];
      expect_near(x_grad[i], 0.5 * (sin(x[i]) + x[i] * cos(x[i])), "x.grad", i);
    }
    expect_near(loss, want, "loss", 0);
  }
  tape_on(program, backend, args, blg, x, x_grad, N);
  /* The built kernel, with owned buffers written and read back. */
  ok(qd_buffer_create(QD_F64, 1, &shape, &bsx), "create sx");
  ok(qd_buffer_create(QD_F64, 1, &shape, &bsy), "create sy");
  ok(qd_buffer_write(bsx, sx, sizeof sx), "write sx");
  ndarray_arg(&sargs[0], "y", bsy, NULL);
  ndarray_arg(&sargs[1], "a", NULL, NULL);
  sargs[1].kind = QD_ARG_INT;
  sargs[1].i = 3;
  ndarray_arg(&sargs[2], "x", bsx, NULL);
  if (ok(qd_program_launch(program, backend, "scale", 3, sargs, QD_LAUNCH_BOUNDS_CHECKED),
         "launch scale") &&
      ok(qd_buffer_read(bsy, sy, sizeof sy), "read sy"))
    for (i = 0; i < N; ++i)
      expect_near(sy[i], 3 * sx[i] + 1, "scale y", i);
  qd_buffer_free(bx);
  qd_buffer_free(bxg);
  qd_buffer_free(bl);
  qd_buffer_free(blg);
  qd_buffer_free(bsx);
  qd_buffer_free(bsy);
  qd_program_free(program);
  qd_backend_free(backend);
  if (failures == before)
    printf("ok %s\n", backend_name);
}

int main(int argc, char **argv) {
  qd_module module;
  qd_kernel grad;
  char *text, *accumulated, *consumed;
  int a;
  if (strcmp(qd_version(), "0.3.0") != 0) {
    fprintf(stderr, "FAIL qd_version() = %s\n", qd_version());
    return 1;
  }
  if (!ok(qd_module_parse(kEnergy, "energy.qd", &module), "parse"))
    return 1;
  if (!ok(qd_module_gradient(module, "energy", NULL, 0, &grad), "gradient"))
    return 1;
  if (ok(qd_kernel_gradient_adjoints(grad, &accumulated, &consumed), "adjoints")) {
    if (strcmp(accumulated, "%x") != 0 || strcmp(consumed, "%loss") != 0) {
      fprintf(stderr, "FAIL adjoints: accumulated '%s', consumed '%s'\n", accumulated, consumed);
      ++failures;
    }
    qd_string_free(accumulated);
    qd_string_free(consumed);
  }
  build_scale(module);
  ok(qd_module_verify(module), "verify");
  if (ok(qd_module_print(module, &text), "print")) {
    if (!strstr(text, "kernel @energy_grad(") || !strstr(text, "kernel @scale(%a: f64")) {
      fprintf(stderr, "FAIL print:\n%s\n", text);
      ++failures;
    }
    qd_string_free(text);
  }
  for (a = 1; a < argc; ++a)
    run_on(argv[a], module);
  qd_module_free(module);
  return failures == 0 ? 0 : 1;
}
