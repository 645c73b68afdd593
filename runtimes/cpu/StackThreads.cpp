//===- StackThreads.cpp - Threads with the stack a kernel needs -----------===//
#include "StackThreads.h"

#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/DataExtractor.h>

#include <pthread.h>

#include <algorithm>

namespace qd::cpu {

std::optional<uint64_t> largestStackFrame(llvm::MemoryBufferRef object) {
  auto file = llvm::object::ObjectFile::createObjectFile(object);
  if (!file) {
    llvm::consumeError(file.takeError());
    return std::nullopt;
  }
  // Each entry is a function's address (a relocation against its section
  // and offset, in a relocatable object) and its frame size in ULEB128.
  // Every function's entry counts, so the addresses are not needed.
  uint64_t largest = 0;
  for (const llvm::object::SectionRef &section : (*file)->sections()) {
    llvm::Expected<llvm::StringRef> name = section.getName();
    if (!name) {
      llvm::consumeError(name.takeError());
      return std::nullopt;
    }
    if (*name != ".stack_sizes")
      continue;
    llvm::Expected<llvm::StringRef> contents = section.getContents();
    if (!contents) {
      llvm::consumeError(contents.takeError());
      return std::nullopt;
    }
    llvm::DataExtractor data(*contents, (*file)->isLittleEndian(),
                             static_cast<uint8_t>((*file)->getBytesInAddress()));
    llvm::DataExtractor::Cursor at(0);
    while (at.tell() < contents->size()) {
      data.getAddress(at);
      uint64_t frame = data.getULEB128(at);
      if (!at) {
        llvm::consumeError(at.takeError());
        return std::nullopt;
      }
      largest = std::max(largest, frame);
    }
  }
  return largest;
}

namespace {

/// The lowest address of the calling thread's stack (0: unknown), asked
/// once per thread: for the main thread glibc reads /proc/self/maps, about
/// 0.2 ms, which a launch must not pay each time.
uintptr_t stackBottom() {
  thread_local uintptr_t bottom = [] {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
      return uintptr_t(0);
    void *low = nullptr;
    size_t size = 0;
    int rc = pthread_attr_getstack(&attr, &low, &size);
    pthread_attr_destroy(&attr);
    return rc == 0 ? reinterpret_cast<uintptr_t>(low) : uintptr_t(0);
  }();
  return bottom;
}

} // namespace

std::optional<size_t> stackLeft() {
  uintptr_t bottom = stackBottom();
  if (!bottom)
    return std::nullopt;
  char here;
  auto top = reinterpret_cast<uintptr_t>(&here);
  return top > bottom ? size_t(top - bottom) : 0;
}

StackThread::StackThread(size_t bytes, std::function<void()> body) : body_(std::move(body)) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0)
    return;
  pthread_t thread;
  started_ = pthread_attr_setstacksize(&attr, std::max<size_t>(bytes, PTHREAD_STACK_MIN)) == 0 &&
             pthread_create(&thread, &attr, &StackThread::start, this) == 0;
  pthread_attr_destroy(&attr);
  if (started_)
    handle_ = static_cast<unsigned long>(thread);
}

StackThread::~StackThread() {
  if (started_)
    pthread_join(static_cast<pthread_t>(handle_), nullptr);
}

void *StackThread::start(void *self) {
  static_cast<StackThread *>(self)->body_();
  return nullptr;
}

} // namespace qd::cpu
