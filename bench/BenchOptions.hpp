// What every `kortex bench` benchmark takes and gives back (ct, multires, register, surface).
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

#include "gpu/Communicator.hpp"

namespace kortex::bench {

struct BenchOptions {
  bool quick = false;         // smaller budgets / sizes (minutes on a CPU-only machine)
  bool tiny = false;          // the smallest sizes, 1-2 repetitions: the ctest smoke tests (seconds)
  std::string jsonPath;       // write JSON here (atomic); empty: none
  std::string markdownPath;   // write Markdown here (atomic); empty: none
  std::string peersJsonPath;  // optional: output of the benchmark's bench/peers/ script to merge
  std::string only;           // non-empty: only cases whose label contains it
  std::string dataDir;        // real data folder (register: the IXI pair target); empty: none
  std::string dumpDir;        // surface: records + exact neighbours of the largest case, for its peer;
                              // atlas: the Scaling templates (float32, raw)
  std::ostream* progress = nullptr;  // live progress lines, when set
  gpu::Communicator* comm = nullptr;  // atlas: the process group (one rank per GPU) for the "Scaling" section
  // Overrides of the mode's budgets (ct, multires; seconds; <= 0: the mode's default).
  double deviceCaseBudgetS = 0.0;
  double cpuCaseBudgetS = 0.0;
  double totalBudgetS = 0.0;
};

struct BenchReport {
  bool ok = false;  // every measured output passed its check, nothing threw, something measured
  double wallSeconds = 0.0;
  int measured = 0, skipped = 0, failed = 0;
  nlohmann::json json;
  std::string markdown;  // the full report (tables); also what the CLI prints
};

}  // namespace kortex::bench
