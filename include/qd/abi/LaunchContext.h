//===- qd/abi/LaunchContext.h - The launch ABI of generated code -*- C++ -*-===//
//
// The records generated code and a runtime share at launch, declared once.
// Each record is a field list (an X-macro) that generates both the C struct
// the runtime fills and, in the code generators, the LLVM struct type the
// generated code addresses by field index (qd/codegen/llvm: `abiStructType`).
// The `static_assert`s below check that the C layout is the natural layout
// of the field list, which is what every LLVM target qd emits for (x86-64,
// NVPTX64, AMDGPU) gives a literal struct of those types: a field added in
// the wrong place, or with a type the list does not say, fails to compile.
//
// The records only hold plain data and pointers, so a device runtime can
// place a copy in device memory with the pointers translated.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>

namespace qd::abi {

/// How a field of an ABI record is represented (the LLVM type is derived
/// from it: a pointer in the default address space, i32, i64, or an array
/// of i64).
enum class FieldRep : uint8_t { Ptr, I32, I64, I64Array };

/// Entries of QdErrorRecord::data.
inline constexpr unsigned kMaxErrorData = 16;

/// Alignment in bytes of host storage that generated code reads with
/// vector instructions: the CPU adstack heap, each thread's slice of it,
/// every stack of SIMD lanes in a slice, and the storage of every Buffer
/// (a cache line, and one AVX-512 register). A stack of 64 f32 lanes whose
/// base was only 16-byte aligned split every entry over five cache lines:
/// the gradient of benchmark (a) ran 1.3x slower on one thread whenever
/// the allocator handed out such a heap.
inline constexpr size_t kHostVectorAlignment = 64;

/// Back edges a thread of generated code runs between two reads of
/// QdLaunchContext::stop (powers of two): on the CPU, and on a GPU, where
/// the word is host memory the device reads across the bus.
inline constexpr unsigned kStopCheckInterval = 1024;
inline constexpr unsigned kDeviceStopCheckInterval = 65536;
/// A range-for whose bounds are constants checks the stop word only when
/// it runs at least this many iterations of loops without checks, its own
/// and those nested in it (StopCheckPlan); below that it stays free of
/// checks, which LLVM may unroll. So between two back edges that count, a
/// thread runs fewer than this many unchecked iterations per nest.
inline constexpr uint64_t kStopCheckMinWork = 4096;
/// On a GPU, one thread in this many (those whose index is a multiple of
/// it) reads the stop word at its first back edge instead of its
/// interval-th: a launch of one thread per task iteration, each running
/// fewer back edges than the interval, still stops (the first reader that
/// sees the word records the loop's error site, and every thread that
/// starts after that returns at once). Sparse because a read of host
/// memory costs about a microsecond of the whole GPU's time: a reader in
/// every 65536 back edges made the CUDA gradient of benchmark (a) 15x
/// slower.
inline constexpr unsigned kDeviceStopCheckSpread = 1u << 18;
/// On a GPU every thread polls at every this many back edges that count:
/// it leaves when the launch's error record (device memory) holds an error,
/// a stop that a reader recorded included, and the readers (above) read the
/// stop word there too; the other threads read it at every
/// kDeviceStopCheckInterval-th. So a grid whose loop iterations are slow
/// (contended atomics: 10 us per thread) stops within this many iterations
/// of a reader's, not 65536.
inline constexpr unsigned kDeviceStopPollInterval = 1024;

/// A compacted adstack heap (docs/runtime.md, "Compacted heap") gives each
/// group of G consecutive GPU threads its own region, sized by the largest
/// need among them, and interleaves the group's threads there (entry d of
/// lane l at region + (d * G + l) * entry bytes): a warp's accesses
/// coalesce within a group. G is a power of two chosen per launch
/// (QdLaunchContext::groupShift), at most this many.
inline constexpr unsigned kAdStackGroupThreads = 32;
/// A compacted heap's table (u32 words): word 0 the columns K; per stack
/// id s, words 1 + 3s..3 + 3s its column c, its prefix bytes P and its
/// column's entry bytes E; then, from word 1 + 3 * stacks, per group and
/// column (group-major) the region's offset from the heap's start in units
/// of this many bytes (GPU targets; SPIR-V: words), and last the heap's
/// end. A region's capacity is the distance to the next offset over G x E;
/// stack s keeps entry d of lane l at region + (d * G * E) + G * P + l x
/// its entry bytes. A compacted heap is at most kAdStackMaxCompactedBytes.
inline constexpr unsigned kAdStackGroupTableUnit = 8;
inline constexpr int64_t kAdStackMaxCompactedBytes = int64_t(1) << 34;

} // namespace qd::abi

namespace qd {

/// Why the host stopped a launch (QdLaunchContext::stop; 0: it did not).
enum class StopReason : int32_t {
  None = 0,
  Timeout = 1,   // LaunchOptions::timeout passed
  Cancelled = 2, // LaunchOptions::cancel was set
  LoopLimit = 3, // LaunchOptions::maxLoopIterations ran out (the interpreter)
};

} // namespace qd

// X(rep, C type, name, array length (1 for a scalar field))
#define QD_ERROR_RECORD_FIELDS(X)                                                                  \
  /* 0, or 1 + the id of the first error site hit (set with a compare-and-swap) */                 \
  X(I32, int32_t, site, 1)                                                                         \
  X(I32, int32_t, reserved, 1)                                                                     \
  /* what that site recorded (the indices of an index error) */                                    \
  X(I64Array, int64_t, data, qd::abi::kMaxErrorData)

#define QD_LAUNCH_CONTEXT_FIELDS(X)                                                                \
  /* data pointer of every global slot (KernelLayout::slots) */                                    \
  X(Ptr, void **, globals, 1)                                                                      \
  /* extents of the ndarray arguments, packed (KernelLayout::shapeOffset) */                       \
  X(Ptr, const int64_t *, ndShapes, 1)                                                             \
  /* kernel arguments: ints sign-extended, floats as raw bits */                                   \
  X(Ptr, const int64_t *, scalars, 1)                                                              \
  /* adstack heap; stack s of worker w starts at heap + w * stride + offsets[s] */                 \
  X(Ptr, char *, heap, 1)                                                                          \
  X(I64, int64_t, stride, 1)                                                                       \
  /* per stack id: byte offset in a worker's slice, capacity (entries) */                          \
  X(Ptr, const int64_t *, offsets, 1)                                                              \
  X(Ptr, const int64_t *, capacities, 1)                                                           \
  /* per stack id: the most pushes past the capacity, over threads and lanes (an atomic max; */    \
  /* 0 when every push fit): the launch needed capacities[s] + needed[s] entries */                \
  X(Ptr, int64_t *, needed, 1)                                                                     \
  /* the launch's error record */                                                                  \
  X(Ptr, QdErrorRecord *, error, 1)                                                                \
  /* opaque; passed back to the runtime's task launcher */                                         \
  X(Ptr, void *, runtime, 1)                                                                       \
  /* per parallel task: the lanes its adstack entries are laid out for (CPU) */                    \
  X(Ptr, const int32_t *, taskLanes, 1)                                                            \
  /* GPU: the threads of a parallel launch's grid (T of the interleaved heap layout) */            \
  X(I64, int64_t, threads, 1)                                                                      \
  /* GPU, a compacted heap: its table (kAdStackGroupTableUnit: a header, then per group of */      \
  /* 1 << groupShift threads and column its region's offset); null: the interleaved layout */      \
  X(Ptr, const uint32_t *, groupTable, 1)                                                          \
  /* GPU, a compacted heap: log2 of its group's threads (0-5: groups of 1-32 threads) */           \
  X(I64, int64_t, groupShift, 1)                                                                   \
  /* GPU: the top-level values of the kernel, one 8-byte slot each                */               \
  /* (KernelLayout::numValues), shared by the launches of one kernel              */               \
  X(Ptr, int64_t *, values, 1)                                                                     \
  /* nonzero once the host asks the launch to stop (qd::StopReason); code compiled with stop */    \
  /* checks reads it at loop back edges and raises the loop's stop site */                         \
  X(Ptr, const int32_t *, stop, 1)                                                                 \
  /* GPU: the first thread of the window of threads this dispatch runs (a compacted heap over */   \
  /* a budget, docs/runtime.md "Windows"); a parallel task with adstacks adds it to its thread */  \
  /* index. 0: the dispatch runs every thread */                                                   \
  X(I64, int64_t, threadOffset, 1)

namespace qd {

// A field is declared by its representation: arrays with their length.
#define QD_ABI_DECL_Ptr(ctype, name, n) ctype name;
#define QD_ABI_DECL_I32(ctype, name, n) ctype name;
#define QD_ABI_DECL_I64(ctype, name, n) ctype name;
#define QD_ABI_DECL_I64Array(ctype, name, n) ctype name[n];
#define QD_ABI_DECLARE(rep, ctype, name, n) QD_ABI_DECL_##rep(ctype, name, n)

/// The error record of a launch: the first error site a launch hits (the
/// runtime decodes it with KernelLayout::sites).
struct QdErrorRecord {
  QD_ERROR_RECORD_FIELDS(QD_ABI_DECLARE)
};

/// What the entry function of a compiled kernel receives.
struct QdLaunchContext {
  QD_LAUNCH_CONTEXT_FIELDS(QD_ABI_DECLARE)
};

#undef QD_ABI_DECLARE
#undef QD_ABI_DECL_Ptr
#undef QD_ABI_DECL_I32
#undef QD_ABI_DECL_I64
#undef QD_ABI_DECL_I64Array

namespace abi {

/// Field indices of the records, in declaration order (what generated code
/// passes to a struct GEP).
enum class ErrorRecordField : unsigned {
#define QD_ABI_ENUM(rep, ctype, name, n) name,
  QD_ERROR_RECORD_FIELDS(QD_ABI_ENUM) Count
};
enum class LaunchContextField : unsigned { QD_LAUNCH_CONTEXT_FIELDS(QD_ABI_ENUM) Count };
#undef QD_ABI_ENUM

struct FieldDesc {
  FieldRep rep;
  unsigned count;
  const char *name;
};

#define QD_ABI_DESC(rep, ctype, name, n) FieldDesc{FieldRep::rep, n, #name},
inline constexpr FieldDesc kErrorRecordFields[] = {QD_ERROR_RECORD_FIELDS(QD_ABI_DESC)};
inline constexpr FieldDesc kLaunchContextFields[] = {QD_LAUNCH_CONTEXT_FIELDS(QD_ABI_DESC)};
#undef QD_ABI_DESC

/// Size and alignment of one element of a field (64-bit pointers: every
/// target qd emits for has them).
constexpr size_t repSize(FieldRep r) {
  return r == FieldRep::I32 ? 4 : 8;
}

/// Byte offset of field `index` in the natural layout of `fields`.
template <size_t N> constexpr size_t naturalOffset(const FieldDesc (&fields)[N], size_t index) {
  size_t at = 0;
  for (size_t i = 0;; ++i) {
    size_t align = repSize(fields[i].rep);
    at = (at + align - 1) / align * align;
    if (i == index)
      return at;
    at += align * fields[i].count;
  }
}

static_assert(sizeof(void *) == 8, "qd's launch ABI assumes 64-bit pointers");
static_assert(std::is_standard_layout_v<QdErrorRecord> &&
              std::is_standard_layout_v<QdLaunchContext>);
static_assert(std::size(kErrorRecordFields) == size_t(ErrorRecordField::Count));
static_assert(std::size(kLaunchContextFields) == size_t(LaunchContextField::Count));

#define QD_ABI_CHECK_ERROR(rep, ctype, name, n)                                                    \
  static_assert(offsetof(QdErrorRecord, name) ==                                                   \
                        naturalOffset(kErrorRecordFields, size_t(ErrorRecordField::name)) &&       \
                    sizeof(QdErrorRecord::name) == repSize(FieldRep::rep) * (n),                   \
                "QdErrorRecord::" #name " does not match QD_ERROR_RECORD_FIELDS");
#define QD_ABI_CHECK_CONTEXT(rep, ctype, name, n)                                                  \
  static_assert(offsetof(QdLaunchContext, name) ==                                                 \
                        naturalOffset(kLaunchContextFields, size_t(LaunchContextField::name)) &&   \
                    sizeof(QdLaunchContext::name) == repSize(FieldRep::rep) * (n),                 \
                "QdLaunchContext::" #name " does not match QD_LAUNCH_CONTEXT_FIELDS");
QD_ERROR_RECORD_FIELDS(QD_ABI_CHECK_ERROR)
QD_LAUNCH_CONTEXT_FIELDS(QD_ABI_CHECK_CONTEXT)
#undef QD_ABI_CHECK_ERROR
#undef QD_ABI_CHECK_CONTEXT

} // namespace abi

/// Kept for code that spells the old name.
inline constexpr unsigned kMaxErrorData = abi::kMaxErrorData;

} // namespace qd
