//===- unittests/CApiTest.cpp - The C API's errors ------------------------===//
//
// Every error path of the C API returns a status carrying qd's message:
// bad text (with file:line:col), unknown backends and options, wrong
// argument names and element types, freed buffers, non-contiguous DLPack
// tensors. unittests/capi/consumer.c runs the API's success paths from C.
//
//===----------------------------------------------------------------------===//
#include "qd-c/qd.h"

#include "capi/CApiStatus.h"

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using qd::capitest::message;
using qd::capitest::take;

constexpr const char *kScale = R"(kernel @scale(%a: f32, %x: ndarray<f32, 1>, %y: ndarray<f32, 1>) {
  %n = shape %x, 0 : i32
  parallel for %i = 0 to %n {
    %xi = load %x[%i] : f32
    %r = mul %a, %xi : f32
    store %y[%i], %r
  }
}
)";

struct CApiTest : ::testing::Test {
  void SetUp() override {
    ASSERT_EQ(message(qd_module_parse(kScale, "scale.qd", &module)), "");
    ASSERT_EQ(message(qd_program_create(module, &program)), "");
    ASSERT_EQ(message(qd_backend_create("interp", nullptr, &backend)), "");
    int64_t n = 4;
    ASSERT_EQ(message(qd_buffer_borrow(QD_F32, 1, &n, x.data(), &bx)), "");
    ASSERT_EQ(message(qd_buffer_borrow(QD_F32, 1, &n, y.data(), &by)), "");
  }
  void TearDown() override {
    qd_buffer_free(bx);
    qd_buffer_free(by);
    qd_backend_free(backend);
    qd_program_free(program);
    qd_module_free(module);
  }
  std::vector<qd_arg> args(float a) {
    std::vector<qd_arg> out(3, qd_arg{});
    out[0] = {"a", QD_ARG_FLOAT, a, 0, nullptr, nullptr, nullptr};
    out[1] = {"x", QD_ARG_NDARRAY, 0, 0, bx, nullptr, nullptr};
    out[2] = {"y", QD_ARG_NDARRAY, 0, 0, by, nullptr, nullptr};
    return out;
  }
  qd_module module = nullptr;
  qd_program program = nullptr;
  qd_backend backend = nullptr;
  std::vector<float> x{1, 2, 3, 4}, y{0, 0, 0, 0};
  qd_buffer bx = nullptr, by = nullptr;
};

TEST_F(CApiTest, SuccessIsNull) {
  EXPECT_EQ(qd_status_get_code(nullptr), QD_OK);
  EXPECT_STREQ(qd_status_message(nullptr), "");
  qd_status_free(nullptr);
  EXPECT_STREQ(qd_dtype_name(QD_F32), "f32");
  EXPECT_STREQ(qd_dtype_name(static_cast<qd_dtype>(42)), "?");
}

TEST_F(CApiTest, ParseErrorsNameTheLocation) {
  qd_module m = nullptr;
  auto [code, text] =
      take(qd_module_parse("kernel @k() {\n  %a = frob 1 : f32\n}\n", "bad.qd", &m));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_NE(text.find("bad.qd:2:"), std::string::npos) << text;
  EXPECT_EQ(m, nullptr); // outputs are written only on success
  EXPECT_EQ(take(qd_module_parse(nullptr, nullptr, &m)).second, "qd_module_parse: text is NULL");
}

TEST_F(CApiTest, UnknownBackendAndOptions) {
  qd_backend b = nullptr;
  auto [code, text] = take(qd_backend_create("tpu", nullptr, &b));
  EXPECT_EQ(code, QD_NOT_FOUND);
  EXPECT_NE(text.find("tpu"), std::string::npos) << text;
  EXPECT_NE(text.find("cpu"), std::string::npos) << text; // lists what there is
  auto [code2, text2] = take(qd_backend_create("cpu", "colour=blue", &b));
  EXPECT_EQ(code2, QD_INVALID_ARGUMENT);
  EXPECT_NE(text2.find("colour"), std::string::npos) << text2;
  char *names = qd_backend_names();
  EXPECT_EQ(std::string(names).rfind("interp cpu", 0), 0u) << names;
  qd_string_free(names);
}

TEST_F(CApiTest, CudaWithoutAGpuFailsClearly) {
  qd_backend b = nullptr;
  qd_status s = qd_backend_create("cuda", nullptr, &b);
  if (!s) { // a machine with a GPU
    qd_backend_free(b);
    GTEST_SKIP() << "this machine has a CUDA device";
  }
  auto [code, text] = take(s);
  EXPECT_NE(code, QD_OK);
  EXPECT_NE(text.find("cuda"), std::string::npos) << text;
}

TEST_F(CApiTest, LaunchComputesInPlace) {
  auto a = args(2.5f);
  ASSERT_EQ(message(qd_program_launch(program, backend, "scale", 3, a.data(), 0)), "");
  EXPECT_EQ(y, (std::vector<float>{2.5f, 5, 7.5f, 10}));
  void *data = nullptr;
  ASSERT_EQ(message(qd_buffer_data(by, &data)), "");
  EXPECT_EQ(data, y.data());
}

TEST_F(CApiTest, WrongArgumentNamesAndTypes) {
  auto a = args(1);
  a[0].name = "alpha";
  auto [code, text] = take(qd_program_launch(program, backend, "scale", 3, a.data(), 0));
  EXPECT_EQ(code, QD_INVALID_ARGUMENT);
  EXPECT_NE(text.find("alpha"), std::string::npos) << text;
  EXPECT_NE(text.find("scale"), std::string::npos) << text;

  a = args(1);
  int64_t n = 4;
  std::vector<double> wide(4);
  qd_buffer bw = nullptr;
  ASSERT_EQ(message(qd_buffer_borrow(QD_F64, 1, &n, wide.data(), &bw)), "");
  a[1].primal = bw;
  text = message(qd_program_launch(program, backend, "scale", 3, a.data(), 0));
  EXPECT_NE(text.find("%x"), std::string::npos) << text;
  EXPECT_NE(text.find("f64"), std::string::npos) << text;
  qd_buffer_free(bw);

  a = args(1);
  a[0].kind = QD_ARG_NDARRAY; // a scalar given a buffer
  a[0].primal = bx;
  EXPECT_NE(message(qd_program_launch(program, backend, "scale", 3, a.data(), 0)), "");
  EXPECT_NE(message(qd_program_launch(program, backend, "scale", 2, args(1).data(), 0)), "");
  EXPECT_EQ(take(qd_program_launch(program, backend, "nope", 0, nullptr, 0)).first, QD_NOT_FOUND);
}

TEST_F(CApiTest, DeviceMemoryNeedsAGpuBackend) {
  int64_t n = 4;
  qd_buffer b = nullptr;
  auto [code, text] = take(qd_buffer_borrow_device(backend, QD_F32, 1, &n, 0x1000, &b));
  EXPECT_EQ(code, QD_FAILED_PRECONDITION);
  EXPECT_NE(text.find("backend 'interp' has no device memory"), std::string::npos) << text;
  EXPECT_EQ(b, nullptr);
}

TEST_F(CApiTest, FreedBufferIsAnError) {
  auto a = args(1);
  qd_buffer_free(bx);
  auto [code, text] = take(qd_program_launch(program, backend, "scale", 3, a.data(), 0));
  EXPECT_EQ(code, QD_FAILED_PRECONDITION);
  EXPECT_NE(text.find("was freed"), std::string::npos) << text;
  EXPECT_NE(text.find("%x"), std::string::npos) << text;
  qd_dtype t;
  EXPECT_EQ(take(qd_buffer_dtype(bx, &t)).first, QD_FAILED_PRECONDITION);
  qd_buffer_free(bx); // twice: ignored
  bx = nullptr;
  EXPECT_EQ(take(qd_buffer_dtype(reinterpret_cast<qd_buffer>(uintptr_t(1) << 60), &t)).first,
            QD_INVALID_ARGUMENT);
}

TEST_F(CApiTest, FieldsAndCompanions) {
  qd_module m = nullptr;
  ASSERT_EQ(message(qd_module_parse("field @u : f64[3] grad\n", nullptr, &m)), "");
  qd_program p = nullptr;
  ASSERT_EQ(message(qd_program_create(m, &p)), "");
  qd_module_free(m); // the program keeps it alive
  qd_buffer u = nullptr;
  ASSERT_EQ(message(qd_program_field(p, "u", QD_GRAD, &u)), "");
  qd_program_free(p); // the buffer keeps the program alive
  double values[3] = {1, 2, 3}, back[3] = {};
  ASSERT_EQ(message(qd_buffer_write(u, values, sizeof values)), "");
  ASSERT_EQ(message(qd_buffer_read(u, back, sizeof back)), "");
  EXPECT_EQ(back[2], 3);
  EXPECT_NE(message(qd_buffer_read(u, back, 8)).find("holds 24 bytes"), std::string::npos);
  qd_buffer_free(u);
  EXPECT_EQ(take(qd_program_field(program, "u", QD_DUAL, &u)).first, QD_NOT_FOUND);
}

TEST_F(CApiTest, DlpackRoundTripAndRejects) {
  std::vector<double> data{1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3}, strides[2] = {1, 2};
  static int deleted = 0;
  DLManagedTensor t{};
  t.dl_tensor.data = data.data();
  t.dl_tensor.device = {kDLCPU, 0};
  t.dl_tensor.ndim = 2;
  t.dl_tensor.dtype = {kDLFloat, 64, 1};
  t.dl_tensor.shape = shape;
  t.dl_tensor.strides = strides; // column-major: refused
  t.deleter = [](DLManagedTensor *) { ++deleted; };
  qd_buffer b = nullptr;
  std::string text = message(qd_buffer_from_dlpack(&t, nullptr, &b));
  EXPECT_NE(text.find("not contiguous"), std::string::npos) << text;
  EXPECT_EQ(deleted, 0); // the caller keeps a tensor that was refused
  t.dl_tensor.strides = nullptr;
  t.dl_tensor.dtype = {kDLUInt, 16, 1};
  EXPECT_NE(message(qd_buffer_from_dlpack(&t, nullptr, &b)).find("element type"),
            std::string::npos);
  t.dl_tensor.dtype = {kDLFloat, 64, 1};
  ASSERT_EQ(message(qd_buffer_from_dlpack(&t, nullptr, &b)), "");
  void *p = nullptr;
  ASSERT_EQ(message(qd_buffer_data(b, &p)), "");
  EXPECT_EQ(p, data.data());
  DLManagedTensor *out = nullptr;
  ASSERT_EQ(message(qd_buffer_to_dlpack(b, &out)), "");
  qd_buffer_free(b);
  EXPECT_EQ(deleted, 0); // the exported tensor keeps the buffer
  EXPECT_EQ(out->dl_tensor.data, data.data());
  EXPECT_EQ(out->dl_tensor.shape[1], 3);
  out->deleter(out);
  EXPECT_EQ(deleted, 1);
  t.dl_tensor.device = {kDLCUDA, 0};
  EXPECT_EQ(take(qd_buffer_from_dlpack(&t, nullptr, &b)).first, QD_INVALID_ARGUMENT);
}

TEST_F(CApiTest, BuilderErrors) {
  qd_module m = nullptr;
  qd_kernel k = nullptr;
  ASSERT_EQ(message(qd_module_create(&m)), "");
  ASSERT_EQ(message(qd_module_add_kernel(m, "k", &k)), "");
  EXPECT_EQ(take(qd_module_add_kernel(m, "k", &k)).first, QD_ALREADY_EXISTS);
  qd_builder b = nullptr;
  ASSERT_EQ(message(qd_builder_create(k, &b)), "");
  qd_value c = nullptr, v = nullptr;
  ASSERT_EQ(message(qd_build_const(b, QD_F32, 1.5, &c)), "");
  EXPECT_NE(message(qd_build_binary(b, "frob", c, c, &v)).find("'frob'"), std::string::npos);
  EXPECT_NE(message(qd_build_load_local(b, c, &v)).find("qd_build_alloca"), std::string::npos);
  EXPECT_EQ(take(qd_build_end(b)).first, QD_FAILED_PRECONDITION);
  EXPECT_EQ(take(qd_build_load(b, qd_global{nullptr, "nofield"}, 0, nullptr, &v)).first,
            QD_NOT_FOUND);
  // An ill-typed kernel builds, and the verifier names its location.
  qd_value i = nullptr, s = nullptr;
  ASSERT_EQ(message(qd_builder_set_location(b, "front.py", 7, 3)), "");
  ASSERT_EQ(message(qd_build_const(b, QD_I32, 2, &i)), "");
  ASSERT_EQ(message(qd_build_binary(b, "add", c, i, &s)), "");
  std::string text = message(qd_module_verify(m));
  EXPECT_NE(text.find("front.py:7:3"), std::string::npos) << text;
  // A value of another kernel is the verifier's error too, not a crash.
  qd_kernel other = nullptr;
  qd_builder ob = nullptr;
  ASSERT_EQ(message(qd_module_add_kernel(m, "other", &other)), "");
  ASSERT_EQ(message(qd_builder_create(other, &ob)), "");
  ASSERT_EQ(message(qd_build_unary(ob, "neg", c, &v)), "");
  text = message(qd_module_verify(m));
  EXPECT_NE(text.find("it belongs to kernel @k"), std::string::npos) << text;
  qd_builder_free(ob);
  qd_builder_free(b);
  qd_module_free(m);
}

TEST_F(CApiTest, PassesAndGradientErrors) {
  qd_module m = nullptr;
  ASSERT_EQ(message(qd_module_parse(kScale, nullptr, &m)), "");
  EXPECT_NE(message(qd_module_run_passes(m, "no-such-pass", 1)).find("no-such-pass"),
            std::string::npos);
  EXPECT_EQ(message(qd_module_run_passes(m, "fold,dce", 1)), "");
  qd_kernel g = nullptr;
  auto [code, text] = take(qd_module_gradient(m, "missing", nullptr, 0, &g));
  EXPECT_EQ(code, QD_NOT_FOUND);
  EXPECT_NE(text.find("@scale"), std::string::npos) << text;
  ASSERT_EQ(message(qd_module_forward(m, "scale", nullptr, &g)), "");
  EXPECT_STREQ(qd_kernel_name(g), "scale_dual");
  qd_arg_info info;
  ASSERT_EQ(message(qd_kernel_arg(g, 1, &info)), "");
  EXPECT_STREQ(info.name, "x");
  EXPECT_EQ(info.is_ndarray, 1);
  EXPECT_EQ(info.dtype, QD_F32);
  EXPECT_EQ(take(qd_kernel_arg(g, 9, &info)).first, QD_OUT_OF_RANGE);
  qd_module_free(m);
}

TEST_F(CApiTest, GradientCheck) {
  qd_module m = nullptr;
  ASSERT_EQ(message(qd_module_parse(R"(kernel @sq(%x: ndarray<f64, 1>, %y: ndarray<f64, 1>) {
  %n = shape %x, 0 : i32
  parallel for %i = 0 to %n {
    %xi = load %x[%i] : f64
    %r = mul %xi, %xi : f64
    store %y[%i], %r
  }
}
)",
                                    nullptr, &m)),
            "");
  int64_t n = 3;
  double xs[3] = {1, -2, 0.5}, ys[3] = {};
  qd_check_value values[2] = {{"x", 0, 1, &n, xs}, {"y", 0, 1, &n, ys}};
  int passed = 0;
  char *report = nullptr;
  ASSERT_EQ(message(qd_check_gradient(m, "sq", 2, values, nullptr, nullptr, &passed, &report)), "");
  EXPECT_EQ(passed, 1) << report;
  EXPECT_NE(std::string(report).find("%x"), std::string::npos) << report;
  qd_string_free(report);
  values[0].name = "z";
  EXPECT_EQ(take(qd_check_gradient(m, "sq", 2, values, nullptr, nullptr, &passed, nullptr)).first,
            QD_NOT_FOUND);
  qd_module_free(m);
}

} // namespace
