// The C API alone (qd::c, libqd-c; include/qd-c): parses a kernel and runs
// it on the CPU backend with an array of the caller's, used in place:
// y[i] = 2 * x[i]. Needs nothing of qd's dependencies at build time.
#include <qd-c/qd.h>

#include <iostream>

int main() {
  const char *text = R"(kernel @twice(%x: ndarray<f64, 1>, %y: ndarray<f64, 1>) {
  %n = shape %x, 0 : i32
  parallel for %i = 0 to %n {
    %xi = load %x[%i] : f64
    %r = add %xi, %xi : f64
    store %y[%i], %r
  }
}
)";
  qd_module module = nullptr;
  qd_backend backend = nullptr;
  qd_program program = nullptr;
  qd_buffer x = nullptr, y = nullptr;
  double xs[3] = {1, 2, 3}, ys[3] = {};
  int64_t n = 3;
  qd_status status = qd_module_parse(text, "twice.qd", &module);
  if (!status)
    status = qd_backend_create("cpu", "threads=2", &backend);
  if (!status)
    status = qd_program_create(module, &program);
  if (!status)
    status = qd_buffer_borrow(QD_F64, 1, &n, xs, &x);
  if (!status)
    status = qd_buffer_borrow(QD_F64, 1, &n, ys, &y);
  const qd_arg args[] = {{"x", QD_ARG_NDARRAY, 0, 0, x, nullptr, nullptr},
                         {"y", QD_ARG_NDARRAY, 0, 0, y, nullptr, nullptr}};
  if (!status)
    status = qd_program_launch(program, backend, "twice", 2, args, 0);
  if (status) {
    std::cerr << qd_status_message(status) << '\n';
    qd_status_free(status);
    return 1;
  }
  std::cout << "qd " << qd_version() << ": y = " << ys[0] << ' ' << ys[1] << ' ' << ys[2] << '\n';
  qd_buffer_free(x);
  qd_buffer_free(y);
  qd_program_free(program);
  qd_backend_free(backend);
  qd_module_free(module);
  return 0;
}
