//===- CodegenCorpus.cpp - Every corpus kernel through a code generator ---===//
#include "CodegenCorpus.h"

#include "Corpus.h"

#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

namespace qd::corpus {

std::vector<CorpusKernel> corpusKernels() {
  std::vector<CorpusKernel> kernels;
  for (const auto &path : corpusFiles()) {
    std::string rel = std::filesystem::relative(path, QD_SOURCE_DIR).string();
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    for (const SourceChunk &chunk : splitSourceChunks(text.str())) {
      auto parsed = parseModule(chunk.text, {rel, chunk.firstLine});
      if (!parsed.ok() || !verify(**parsed).ok())
        continue;
      for (auto &k : (*parsed)->kernels())
        kernels.push_back({fmt::format("{}:{}", rel, chunk.firstLine), chunk.text, k->name()});
    }
  }
  return kernels;
}

void CompileResults::fail(std::string what) {
  std::lock_guard<std::mutex> lock(mutex);
  failures.push_back(std::move(what));
}

void compileCorpus(const std::vector<CorpusKernel> &kernels, CompileResults &r,
                   const std::function<void(const Kernel &, const std::string &, int)> &compile) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < kernels.size();) {
      const CorpusKernel &ck = kernels[i];
      auto module = parseModule(ck.source, {ck.tag, 1});
      if (!module.ok())
        continue;
      Kernel *k = (*module)->findKernel(ck.name);
      std::vector<Kernel *> all = {k};
      if (!(*module)->findKernel(ck.name + "_grad") && !(*module)->findKernel(ck.name + "_dual")) {
        if (auto g = buildGradientKernel(**module, *k); g.ok())
          all.push_back(*g);
        if (auto d = buildDualKernel(**module, *k); d.ok())
          all.push_back(*d);
      }
      if (absl::Status v = verify(**module); !v.ok()) {
        r.fail(fmt::format("{} @{}: derived kernels do not verify: {}", ck.tag, ck.name,
                           std::string(v.message())));
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(r.mutex);
        r.kernels += static_cast<int>(all.size());
        r.derived += static_cast<int>(all.size()) - 1;
      }
      for (size_t j = 0; j < all.size(); ++j)
        compile(*all[j], ck.tag, static_cast<int>(i * 4 + j));
    }
  };
  unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back(worker);
  for (std::thread &t : threads)
    t.join();
}

} // namespace qd::corpus
