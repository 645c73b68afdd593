//===- CorpusRoundTripTest.cpp - Every .qd file of the repository ---------===//
//
// Walks every `*.qd` file under the source tree (skipping build*/ and hidden
// directories such as .git) and checks the text format on it:
//  - files that qd-opt is expected to reject (a `RUN: not qd-opt ...` line
//    without a pass pipeline) must fail to parse or verify in every chunk;
//  - every other chunk parses, verifies, and round-trips: print (P1) ->
//    parse -> print (P2) gives P1 == P2, and parse(original) is equivalent
//    to parse(P1).
// Files whose RUN lines use `--split-input-file` are split on `// -----`
// lines, exactly as qd-opt does.
//
//===----------------------------------------------------------------------===//
#include "qd/ir/Clone.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace qd {
namespace {

namespace fs = std::filesystem;

using Chunk = SourceChunk;

struct CorpusFile {
  fs::path path;
  std::string text;
  std::vector<std::string> runLines; // commands after `RUN:`
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<fs::path> findQdFiles(const fs::path &root) {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    std::string name = it->path().filename().string();
    if (it->is_directory()) {
      if (name.starts_with("build") || name.starts_with("."))
        it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".qd")
      out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

CorpusFile readFile(const fs::path &path) {
  CorpusFile f;
  f.path = path;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  f.text = ss.str();
  std::istringstream lines(f.text);
  std::string line;
  while (std::getline(lines, line)) {
    std::string_view l = trim(line);
    if (!l.starts_with("//"))
      continue;
    size_t run = l.find("RUN:");
    if (run != std::string_view::npos)
      f.runLines.emplace_back(trim(l.substr(run + 4)));
  }
  return f;
}

bool anyRunLine(const CorpusFile &f, const auto &pred) {
  return std::any_of(f.runLines.begin(), f.runLines.end(), pred);
}

/// qd-opt is expected to reject the input itself (not a pass, and not
/// another tool such as qd-run failing at run time).
bool expectsParseOrVerifyFailure(const CorpusFile &f) {
  // Files a RUN line generates with python3 (`python3 ... > %t.x.qd`) and
  // the test's directory (%S) are not this file: a qd-opt run that rejects
  // them says nothing about it.
  std::vector<std::string> generated{"%S"};
  for (const std::string &cmd : f.runLines)
    if (size_t gt = cmd.rfind('>'); cmd.starts_with("python3") && gt != std::string::npos) {
      std::string target = cmd.substr(gt + 1);
      target.erase(0, target.find_first_not_of(' '));
      generated.push_back(target.substr(0, target.find(' ')));
    }
  return anyRunLine(f, [&](const std::string &cmd) {
    if (!cmd.starts_with("not qd-opt") || cmd.find("--passes") != std::string::npos)
      return false;
    std::string opt = cmd.substr(0, cmd.find('|'));
    return std::none_of(generated.begin(), generated.end(),
                        [&](const std::string &g) { return opt.find(g) != std::string::npos; });
  });
}

bool usesSplitInput(const CorpusFile &f) {
  return anyRunLine(f, [](const std::string &cmd) {
    return cmd.find("--split-input-file") != std::string::npos;
  });
}

std::vector<Chunk> splitChunks(const std::string &text, bool split) {
  return split ? splitSourceChunks(text) : std::vector<Chunk>{{text, 1}};
}

/// Parses and verifies; returns the module or the first error.
absl::StatusOr<std::unique_ptr<Module>> load(const Chunk &chunk, const std::string &filename) {
  ParseOptions options;
  options.filename = filename;
  options.firstLine = chunk.firstLine;
  absl::StatusOr<std::unique_ptr<Module>> m = parseModule(chunk.text, options);
  if (!m.ok())
    return m.status();
  if (absl::Status v = verify(**m); !v.ok())
    return v;
  return m;
}

void checkValidChunk(const Chunk &chunk, const std::string &where, const std::string &filename) {
  absl::StatusOr<std::unique_ptr<Module>> original = load(chunk, filename);
  if (!original.ok()) {
    ADD_FAILURE() << where << ": expected to parse and verify, got:\n"
                  << std::string(original.status().message());
    return;
  }
  std::string p1 = printModule(**original);
  absl::StatusOr<std::unique_ptr<Module>> reparsed = parseModule(p1);
  if (!reparsed.ok()) {
    ADD_FAILURE() << where
                  << ": printed form does not parse: " << std::string(reparsed.status().message())
                  << "\nprinted:\n"
                  << p1;
    return;
  }
  if (absl::Status v = verify(**reparsed); !v.ok())
    ADD_FAILURE() << where << ": printed form does not verify: " << std::string(v.message());
  std::string p2 = printModule(**reparsed);
  EXPECT_EQ(p1, p2) << where << ": print -> parse -> print is not the identity";
  std::string why;
  EXPECT_TRUE(isEquivalent(**original, **reparsed, &why))
      << where << ": reparsed module differs: " << why;
}

TEST(CorpusRoundTripTest, EveryQdFileRoundTrips) {
  const fs::path root = QD_SOURCE_DIR;
  ASSERT_TRUE(fs::is_directory(root)) << root;
  size_t files = 0, validChunks = 0, invalidChunks = 0;
  for (const fs::path &path : findQdFiles(root)) {
    CorpusFile f = readFile(path);
    std::string filename = fs::relative(path, root).string();
    bool expectFailure = expectsParseOrVerifyFailure(f);
    ++files;
    for (const Chunk &chunk : splitChunks(f.text, usesSplitInput(f))) {
      std::string where = filename + ":" + std::to_string(chunk.firstLine);
      SCOPED_TRACE(where);
      if (expectFailure) {
        ++invalidChunks;
        if (load(chunk, filename).ok())
          ADD_FAILURE() << where << ": chunk of a 'RUN: not qd-opt' file parses and verifies; "
                        << "every chunk of such a file must be rejected";
        continue;
      }
      ++validChunks;
      checkValidChunk(chunk, where, filename);
    }
  }
  EXPECT_GT(files, 0u) << "no .qd files found under " << root;
  EXPECT_GT(validChunks, 0u) << "no valid .qd chunk was checked";
  RecordProperty("files", static_cast<int>(files));
  RecordProperty("valid_chunks", static_cast<int>(validChunks));
  RecordProperty("invalid_chunks", static_cast<int>(invalidChunks));
  std::cout << "checked " << files << " files: " << validChunks << " valid chunks, "
            << invalidChunks << " rejected chunks\n";
}

} // namespace
} // namespace qd
