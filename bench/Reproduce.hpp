// The main job (`kortex reproduce`, the README's): the validation suite, the CT filters' paper tables
// and the registration tables, their Markdown streamed as each part finishes, and one report folder:
// report.md (the three parts) and reproduce.json ({quick, validation, bench_ct, bench_register,
// pass}), written together at the end, all or none. The folder is made (and checked) before any part runs.
#pragma once

#include <ostream>
#include <string>

namespace kortex::bench {

struct ReproduceJob {
  bool quick = false;
  std::string dataDir;  // empty: embedded phantoms only
  std::string outDir = "kortex-reproduce";
};

struct ReproduceResult {
  bool validationPass = false, benchPass = false;
  bool pass() const { return validationPass && benchPass; }
  std::string reportPath, jsonPath;
};

// `out`: the report's Markdown as each part finishes; `progress`: the benchmarks' progress lines.
ReproduceResult runReproduceJob(ReproduceJob const& job, std::ostream& out, std::ostream* progress);

}  // namespace kortex::bench
