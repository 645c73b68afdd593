//===- CudaStreamTest.cpp - Launches on a caller's stream, asynchronously -===//
//
// LaunchOptions::stream and ::async on the CUDA backend. A gate kernel
// (hand-written PTX) spins on a flag in pinned host memory, then fills an
// array: queued on a stream before a qd launch, it proves that the qd
// launch waits for it on the device (the launch sees what it wrote) and not
// on the host (the stream is still busy, cuStreamQuery says so, when the
// launch call returns: no timing involved). A watchdog opens the gate after
// 20 s, so an implementation that waits on the host fails instead of
// hanging. Skips without a GPU, saying so.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/CudaBackend.h"

#include "qd/ir/Parser.h"
#include "qd/transforms/AutoDiff.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace qd {
namespace {

constexpr cuda::CUresult kNotReady = 600; // CUDA_ERROR_NOT_READY

// Waits until *flag != 0, then stores `value` (f32 bits) in out[0, n).
constexpr const char *kGatePtx = R"(.version 6.0
.target sm_50
.address_size 64
.visible .entry qd_test_gate(.param .u64 flag, .param .u64 out, .param .u64 n,
                             .param .u64 value) {
  .reg .pred %gp;
  .reg .b32 %gv, %gw;
  .reg .b64 %gf, %go, %gn, %gi, %ga, %gx;
  ld.param.u64 %gf, [flag];
  ld.param.u64 %go, [out];
  ld.param.u64 %gn, [n];
  ld.param.u64 %gx, [value];
  cvt.u32.u64 %gw, %gx;
WAIT:
  ld.volatile.global.u32 %gv, [%gf];
  setp.eq.u32 %gp, %gv, 0;
  @%gp bra WAIT;
  mov.u64 %gi, 0;
  setp.ge.u64 %gp, %gi, %gn;
  @%gp bra DONE;
LOOP:
  shl.b64 %ga, %gi, 2;
  add.u64 %ga, %go, %ga;
  st.global.u32 [%ga], %gw;
  add.u64 %gi, %gi, 1;
  setp.lt.u64 %gp, %gi, %gn;
  @%gp bra LOOP;
DONE:
  ret;
}
)";

/// The kernels (unittests/capi/launch-options.qd, shared with
/// CApiLaunchOptionsTest).
std::string kernels() {
  std::ifstream in(QD_SOURCE_DIR "/unittests/capi/launch-options.qd");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

constexpr int64_t kN = 1000;

/// The backend, the driver (the same primary context), a non-blocking
/// stream, the gate and device arrays x, y, z of kN floats borrowed by the
/// backend. Null backend without a GPU.
struct Fixture {
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<cuda::Device> device;
  std::unique_ptr<cuda::Module> gateModule;
  cuda::CUfunction gate = nullptr;
  std::unique_ptr<gpu::MappedHostMemory> flag;
  cuda::CUstream stream = nullptr;
  cuda::DeviceBuffer x, y, z;
  std::optional<Buffer> bx, by, bz;
  std::unique_ptr<Module> module;
  std::unique_ptr<Program> program;

  absl::Status open() {
    auto b = CudaBackend::create();
    if (!b.ok())
      return b.status();
    backend = *std::move(b);
    device = *cuda::Device::open(0);
    gateModule = *cuda::Module::load(*device, kGatePtx);
    gate = *gateModule->function("qd_test_gate");
    flag = *gpu::MappedHostMemory::allocate(*device, 4);
    constexpr unsigned kNonBlocking = 1; // CU_STREAM_NON_BLOCKING: no order with stream 0
    if (absl::Status s = device->makeCurrent(); !s.ok())
      return s;
    if (absl::Status s =
            device->check(device->api().cuStreamCreate(&stream, kNonBlocking), "cuStreamCreate");
        !s.ok())
      return s;
    for (auto [mem, buf] : {std::pair{&x, &bx}, {&y, &by}, {&z, &bz}}) {
      *mem = *cuda::DeviceBuffer::allocate(*device, kN * 4);
      if (absl::Status s = device->zero(mem->get(), kN * 4); !s.ok())
        return s;
      *buf = *backend->borrowDeviceArray(ScalarType::F32, {kN}, mem->get());
    }
    module = *parseModule(kernels(), {"launch-options.qd", 1});
    program = *Program::create(*module);
    return absl::OkStatus();
  }
  ~Fixture() {
    if (stream && device->makeCurrent().ok()) {
      device->api().cuStreamSynchronize(stream);
      device->api().cuStreamDestroy(stream);
    }
  }

  /// Queues the gate on the stream: it stores `value` in `out` once open.
  void closeGate(const cuda::DeviceBuffer &out, float value) {
    std::atomic_ref<int32_t>(*static_cast<int32_t *>(flag->host())).store(0);
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    uint64_t args[] = {flag->device(), out.get(), uint64_t(kN), bits};
    ASSERT_TRUE(device->launch(gate, 1, 1, args, "qd_test_gate", stream).ok());
  }
  void openGate() { std::atomic_ref<int32_t>(*static_cast<int32_t *>(flag->host())).store(1); }
  /// Whether work queued on the stream is still to finish.
  bool streamBusy() const {
    (void)device->makeCurrent();
    return device->api().cuStreamQuery(stream) == kNotReady;
  }
  LaunchOptions onStream(bool async) const {
    LaunchOptions o;
    o.stream = stream;
    o.async = async;
    return o;
  }
  std::vector<float> read(const cuda::DeviceBuffer &b) const {
    std::vector<float> out(kN);
    (void)device->makeCurrent();
    device->api().cuStreamSynchronize(stream);
    EXPECT_TRUE(device->copyToHost(out.data(), b.get(), kN * 4).ok());
    return out;
  }
};

/// Opens the gate after 20 s unless stopped first; fired() says whether it
/// had to (a launch that waited on the host for the gate).
class GateWatchdog {
public:
  explicit GateWatchdog(Fixture &f)
      : thread_([this, &f] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!cv_.wait_for(lock, std::chrono::seconds(20), [this] { return stopped_; })) {
            fired_ = true;
            f.openGate();
          }
        }) {}
  ~GateWatchdog() { stop(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }
  bool fired() const { return fired_; }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

#define OPEN_OR_SKIP(f)                                                                            \
  Fixture f;                                                                                       \
  if (absl::Status s = f.open(); !s.ok())                                                          \
  GTEST_SKIP() << "no CUDA device or driver on this machine: " << s.message()

std::vector<LaunchArg> ndarrays(std::vector<NdarrayArg> &nd) {
  std::vector<LaunchArg> args;
  for (NdarrayArg &a : nd)
    args.push_back(LaunchArg::ndarray(&a));
  return args;
}

TEST(CudaStreamTest, AnAsyncLaunchWaitsForItsStreamOnTheDeviceNotTheHost) {
  OPEN_OR_SKIP(f);
  std::vector<NdarrayArg> nd = {{&*f.bx}, {&*f.by}};
  std::vector<LaunchArg> args = ndarrays(nd);
  // Compiled and run once first, synchronously on the stream: y = 2 * 0.
  ASSERT_TRUE(f.program->launch("twice", args, *f.backend, f.onStream(false)).ok());
  EXPECT_EQ(f.read(f.y)[7], 0.0f);
  GateWatchdog watchdog(f);
  f.closeGate(f.x, 21.0f);
  absl::Status s = f.program->launch("twice", args, *f.backend, f.onStream(true));
  ASSERT_TRUE(s.ok()) << s.message();
  // The call returned while the gate still holds the stream.
  EXPECT_TRUE(f.streamBusy());
  EXPECT_EQ(f.backend->pendingLaunches(), 1u);
  f.openGate();
  s = f.backend->synchronize();
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(f.backend->pendingLaunches(), 0u);
  watchdog.stop();
  EXPECT_FALSE(watchdog.fired()) << "the launch waited on the host for the gate";
  std::vector<float> y = f.read(f.y);
  EXPECT_EQ(y[0], 42.0f); // after the gate's stores: ordered on the stream
  EXPECT_EQ(y[kN - 1], 42.0f);
}

TEST(CudaStreamTest, LaunchesOnTwoStreamsStayInOrderAndHostReadsWait) {
  OPEN_OR_SKIP(f);
  std::vector<NdarrayArg> first = {{&*f.bx}, {&*f.by}}, second = {{&*f.by}, {&*f.bz}};
  std::vector<LaunchArg> a1 = ndarrays(first), a2 = ndarrays(second);
  ASSERT_TRUE(f.program->launch("twice", a1, *f.backend).ok()); // compiles
  GateWatchdog watchdog(f);
  f.closeGate(f.x, 21.0f);
  ASSERT_TRUE(f.program->launch("twice", a1, *f.backend, f.onStream(true)).ok());
  // On the backend's own stream (the default one), after the first launch.
  LaunchOptions own;
  own.async = true;
  ASSERT_TRUE(f.program->launch("twice", a2, *f.backend, own).ok());
  EXPECT_TRUE(f.streamBusy());
  EXPECT_EQ(f.backend->pendingLaunches(), 2u);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    f.openGate();
  });
  // A host read waits for the launches in flight.
  EXPECT_EQ(f.bz->get(3).f, 84.0f);
  opener.join();
  EXPECT_TRUE(f.backend->synchronize().ok());
  watchdog.stop();
  EXPECT_FALSE(watchdog.fired());
  EXPECT_EQ(f.read(f.z)[kN - 1], 84.0f);
}

TEST(CudaStreamTest, ADeferredIndexErrorSurfacesAtSynchronizeWithItsOwnMessage) {
  OPEN_OR_SKIP(f);
  NdarrayArg x{&*f.bx};
  std::vector<LaunchArg> bad = {LaunchArg::ndarray(&x), LaunchArg::i32(kN + 5)};
  LaunchOptions sync = f.onStream(false);
  sync.boundsChecked = true;
  absl::Status direct = f.program->launch("poke", bad, *f.backend, sync);
  ASSERT_FALSE(direct.ok());
  EXPECT_NE(std::string(direct.message())
                .find("launch-options.qd:26:5: error: index [1005] is out of "
                      "range for '%x' of shape [1000]"),
            std::string::npos)
      << direct.message();
  LaunchOptions async = sync;
  async.async = true;
  GateWatchdog watchdog(f);
  f.closeGate(f.y, 1.0f);
  ASSERT_TRUE(f.program->launch("poke", bad, *f.backend, async).ok());
  EXPECT_TRUE(f.streamBusy());
  f.openGate();
  absl::Status deferred = f.backend->synchronize();
  watchdog.stop();
  ASSERT_FALSE(deferred.ok());
  EXPECT_EQ(deferred.code(), direct.code());
  std::string text(deferred.message());
  EXPECT_EQ(text.substr(0, direct.message().size()), direct.message()) << text;
  EXPECT_NE(text.find("reported by a later call: the launch was asynchronous"), std::string::npos)
      << text;
  EXPECT_TRUE(f.backend->synchronize().ok()); // reported once
  // A synchronous launch reports an earlier asynchronous failure before it
  // runs, then the backend works again.
  ASSERT_TRUE(f.program->launch("poke", bad, *f.backend, async).ok());
  std::vector<LaunchArg> good = {LaunchArg::ndarray(&x), LaunchArg::i32(5)};
  absl::Status next = f.program->launch("poke", good, *f.backend, sync);
  ASSERT_FALSE(next.ok());
  EXPECT_NE(std::string(next.message()).find("index [1005]"), std::string::npos) << next.message();
  ASSERT_TRUE(f.program->launch("poke", good, *f.backend, sync).ok());
  EXPECT_EQ(f.read(f.x)[5], 1.0f);
}

TEST(CudaStreamTest, ADeferredAdStackOverflowSurfacesAtSynchronize) {
  OPEN_OR_SKIP(f);
  auto grad = buildGradientKernel(*f.module, *f.module->findKernel("sinloop"));
  ASSERT_TRUE(grad.ok()) << grad.status().message();
  ASSERT_EQ((*grad)->name(), "sinloop_grad");
  NdarrayArg x{&*f.bx, &*f.bz}, y{&*f.by, &*f.bz};
  std::vector<LaunchArg> args = {LaunchArg::ndarray(&x), LaunchArg::i32(10),
                                 LaunchArg::ndarray(&y)};
  // Every stack gets 2 entries; the loop pushes 10.
  LaunchOptions sync = f.onStream(false);
  sync.sizeAdStacks = false;
  sync.defaultAdStackCapacity = 2;
  absl::Status direct = f.program->launch("sinloop_grad", args, *f.backend, sync);
  ASSERT_FALSE(direct.ok());
  EXPECT_NE(std::string(direct.message()).find("overflow"), std::string::npos) << direct.message();
  LaunchOptions async = sync;
  async.async = true;
  ASSERT_TRUE(f.program->launch("sinloop_grad", args, *f.backend, async).ok());
  absl::Status deferred = f.backend->synchronize();
  ASSERT_FALSE(deferred.ok());
  EXPECT_EQ(deferred.code(), direct.code());
  EXPECT_EQ(std::string(deferred.message()).substr(0, direct.message().size()), direct.message());
  sync.defaultAdStackCapacity = 10;
  EXPECT_TRUE(f.program->launch("sinloop_grad", args, *f.backend, sync).ok());
}

TEST(CudaStreamTest, SixteenLaunchesStayInFlightAndMoreCollectTheOldest) {
  OPEN_OR_SKIP(f);
  std::vector<NdarrayArg> nd = {{&*f.bx}, {&*f.by}};
  std::vector<LaunchArg> args = ndarrays(nd);
  ASSERT_TRUE(f.program->launch("twice", args, *f.backend, f.onStream(false)).ok());
  GateWatchdog watchdog(f);
  f.closeGate(f.x, 3.0f);
  for (int i = 0; i < 16; ++i)
    ASSERT_TRUE(f.program->launch("twice", args, *f.backend, f.onStream(true)).ok()) << i;
  EXPECT_TRUE(f.streamBusy());
  EXPECT_EQ(f.backend->pendingLaunches(), 16u);
  f.openGate();
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(f.program->launch("twice", args, *f.backend, f.onStream(true)).ok()) << i;
  EXPECT_LE(f.backend->pendingLaunches(), 16u);
  EXPECT_TRUE(f.backend->synchronize().ok());
  watchdog.stop();
  EXPECT_FALSE(watchdog.fired());
  EXPECT_EQ(f.read(f.y)[kN / 2], 6.0f);
}

// A launch shape queued before goes as one recorded graph
// (CudaBackendOptions::launchGraphs): each replay still runs with its own
// arguments (the launch block it copies is the launch's), in order on the
// stream, and an error a replayed launch raises is reported as a direct
// launch reports it.
TEST(CudaStreamTest, RepeatedLaunchShapesGoAsGraphsWithTheirOwnArguments) {
  OPEN_OR_SKIP(f);
  NdarrayArg x{&*f.bx};
  // Compiled first: loading a module may wait for the device.
  std::vector<LaunchArg> first = {LaunchArg::ndarray(&x), LaunchArg::i32(0)};
  ASSERT_TRUE(f.program->launch("poke", first, *f.backend, f.onStream(false)).ok());
  const int64_t before = f.backend->graphLaunches();
  GateWatchdog watchdog(f);
  f.closeGate(f.z, 1.0f); // the first ten launches wait for it on the stream
  for (int k = 0; k < 60; ++k) {
    if (k == 10)
      f.openGate();
    std::vector<LaunchArg> args = {LaunchArg::ndarray(&x), LaunchArg::i32(k)};
    ASSERT_TRUE(f.program->launch("poke", args, *f.backend, f.onStream(true)).ok()) << k;
  }
  ASSERT_TRUE(f.backend->synchronize().ok());
  watchdog.stop();
  EXPECT_FALSE(watchdog.fired());
  EXPECT_GT(f.backend->graphLaunches(), before + 20);
  std::vector<float> got = f.read(f.x);
  for (int k = 0; k < 80; ++k)
    EXPECT_EQ(got[k], k < 60 ? 1.0f : 0.0f) << k;

  LaunchOptions sync = f.onStream(false);
  sync.boundsChecked = true;
  std::vector<LaunchArg> bad = {LaunchArg::ndarray(&x), LaunchArg::i32(kN + 7)};
  const int64_t direct = f.backend->graphLaunches();
  for (int round = 0; round < 3; ++round) {
    absl::Status s = f.program->launch("poke", bad, *f.backend, sync);
    ASSERT_FALSE(s.ok()) << round;
    EXPECT_NE(std::string(s.message()).find("index [1007] is out of range"), std::string::npos)
        << s.message();
  }
  EXPECT_GT(f.backend->graphLaunches(), direct); // the same shape: recorded, replayed
  std::vector<LaunchArg> good = {LaunchArg::ndarray(&x), LaunchArg::i32(kN - 1)};
  ASSERT_TRUE(f.program->launch("poke", good, *f.backend, sync).ok());
  EXPECT_EQ(f.read(f.x)[kN - 1], 1.0f);
}

// A recorded launch copies its launch block through its queue slot's
// pinned staging memory into the device's launch block. A larger launch
// block in between (400 scalar arguments) grows both, which frees the old
// memory, whose addresses the driver may hand out again: the graphs recorded
// before are dropped (GpuKernel::graphsMemory), and the first shape records
// a new one instead of replaying copies between freed memory (which crashed
// inside cuGraphLaunch on an H200).
TEST(CudaStreamTest, AGraphIsRecordedAgainWhenItsMemoryMoved) {
  OPEN_OR_SKIP(f);
  std::string text = "field @out : i32[4]\n"
                     "kernel @small(%v: i32) {\n"
                     "  parallel for %i = 0 to 4 {\n"
                     "    store @out[%i], %v\n"
                     "  }\n"
                     "}\n"
                     "kernel @big(";
  for (int a = 0; a < 400; ++a)
    text += (a ? ", %a" : "%a") + std::to_string(a) + ": i32";
  text += ") {\n"
          "  parallel for %i = 0 to 4 {\n"
          "    %s = add %a0, %a399 : i32\n"
          "    store @out[%i], %s\n"
          "  }\n"
          "}\n";
  std::unique_ptr<Module> m = *parseModule(text, {"staging.qd", 1});
  std::unique_ptr<Program> p = *Program::create(*m);
  auto expectOut = [&](int32_t want, const char *what) {
    Buffer &out = *p->field("out");
    ASSERT_TRUE(out.syncToHost().ok()) << what;
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out.get(i).i, want) << what << " " << i;
  };
  const int64_t before = f.backend->graphLaunches();
  for (int32_t v : {1, 2, 3, 4}) {
    std::vector<LaunchArg> one = {LaunchArg::i32(v)};
    ASSERT_TRUE(p->launch("small", one, *f.backend).ok()) << v;
    expectOut(v, "small");
  }
  EXPECT_GT(f.backend->graphLaunches(), before); // recorded, replayed
  std::vector<LaunchArg> many(400, LaunchArg::i32(0));
  many[0] = LaunchArg::i32(10);
  many[399] = LaunchArg::i32(20);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(p->launch("big", many, *f.backend).ok()) << round;
    expectOut(30, "big");
  }
  const int64_t afterBig = f.backend->graphLaunches();
  for (int32_t v : {5, 6, 7, 8}) {
    std::vector<LaunchArg> one = {LaunchArg::i32(v)};
    absl::Status s = p->launch("small", one, *f.backend);
    ASSERT_TRUE(s.ok()) << v << ": " << s.message();
    expectOut(v, "small after big");
  }
  EXPECT_GT(f.backend->graphLaunches(), afterBig); // recorded again, replayed
}

} // namespace
} // namespace qd
