//===- BenchRecord.cpp - Machine-readable results of the benchmarks -------===//
//
// See BenchRecord.h.
//
//===----------------------------------------------------------------------===//
#include "BenchRecord.h"

#include "BenchMain.h"

#include <fmt/format.h>

#include <sys/utsname.h>

#include <ctime>
#include <fstream>
#include <thread>

namespace qdbench {

BenchRecord::BenchRecord(std::string bench, int argc, char **argv)
    : bench_(std::move(bench)), machine_(hostMachine()) {
  // The 1-minute load average when the benchmark starts: other work on a
  // shared machine moves wall times by tens of percent.
  std::ifstream loadavg("/proc/loadavg");
  loadavg >> load_;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i == 0)
      arg = arg.substr(arg.find_last_of('/') + 1);
    command_ += (i ? " " : "") + arg;
  }
}

void BenchRecord::add(nlohmann::json row) {
  if (enabled())
    rows_.push_back(std::move(row));
}

void BenchRecord::write() const {
  if (!enabled())
    return;
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", &utc);
  nlohmann::json out = {{"bench", bench_},     {"command", command_}, {"date", date},
                        {"machine", machine_}, {"load", load_},       {"rows", rows_}};
  std::ofstream file(path_);
  file << out.dump(1) << "\n";
  if (!file)
    die(fmt::format("cannot write the results to '{}' (--json)", path_));
}

std::string BenchRecord::hostMachine() {
  std::string model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  utsname u{};
  uname(&u);
  return fmt::format("{}, {} hardware threads, {} {}", model, std::thread::hardware_concurrency(),
                     u.sysname, u.release);
}

} // namespace qdbench
