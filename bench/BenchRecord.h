//===- BenchRecord.h - Machine-readable results of the benchmarks -*- C++ -*-===//
//
// Every benchmark executable takes `--json FILE` and writes what its tables
// show there as well: one object per run,
//
//   {"bench": "gradients", "command": "qd-bench-gradients --quick ...",
//    "date": "2026-11-27", "machine": "...", "load": 0.4, "rows": [ROW, ...]}
//
// (`load`: the host's 1-minute load average when the run started)
//
// where each ROW is an object of string and number fields (the workload,
// the shape, the implementation, sizes and times; the keys each benchmark
// writes are listed in its header comment). bench/table-of-record.py turns
// such files into the table of record of docs/performance.md, and
// bench/check-claims compares their ratios with the documented bands.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace qdbench {

class BenchRecord {
public:
  /// The benchmark's name and its command line (argv joined by spaces).
  BenchRecord(std::string bench, int argc, char **argv);

  /// Where the file goes (`--json FILE`); empty: nowhere.
  void setPath(std::string path) { path_ = std::move(path); }
  bool enabled() const { return !path_.empty(); }
  /// What ran the benchmark: the host CPU unless a GPU benchmark names its
  /// device.
  void setMachine(std::string machine) { machine_ = std::move(machine); }
  /// One row; ignored when no file was asked for.
  void add(nlohmann::json row);
  /// Writes the file (dies when it cannot); nothing without a path.
  void write() const;

  /// The host: CPU model, hardware threads and kernel name.
  static std::string hostMachine();

private:
  std::string bench_, command_, machine_, path_;
  double load_ = 0;
  nlohmann::json rows_ = nlohmann::json::array();
};

} // namespace qdbench
