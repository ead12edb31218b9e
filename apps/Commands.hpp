// Subcommand implementations of the `kortex` CLI. Each returns the process exit code and
// throws kortex errors (caught in main: one message, non-zero exit).
#pragma once

#include <string>
#include <vector>

namespace kortex::app {

struct ValidateOptions {
  bool quick = false;
  std::string dataDir;   // empty: embedded phantoms only
  std::string jsonPath;  // empty: no JSON
  std::string markdownPath;
};
int cmdValidate(ValidateOptions const& o);

struct BenchOptions {
  bool quick = false;
  bool tiny = false;
  std::string jsonPath;
  std::string markdownPath;
  std::string peersJsonPath;  // merge bench/peers/run_peers.py output
  std::string only;           // only rows whose label contains this
};
int cmdBenchCt(BenchOptions const& o);
// `kortex bench multires` (same options; --peers takes bench/peers/multires_opencv.py output).
int cmdBenchMultires(BenchOptions const& o);

struct ReproduceOptions {
  bool quick = false;
  std::string dataDir;
  std::string outDir = "kortex-reproduce";
};
int cmdReproduce(ReproduceOptions const& o);

int cmdInfo(std::string const& jsonPath);

// `kortex tune` (apps/Tune.cpp): tuned-kernel configuration search and the tuning database.
struct TuneOptions {
  std::vector<std::string> kernels;  // empty: every registered tuner
  std::string dbPath;                // empty: tuning::userDatabasePath()
  bool show = false;                 // print the merged database, time nothing
  bool quick = false;                // fewer repetitions
  int size = 0;                      // image edge; 0: each tuner's default
  std::string jsonPath;              // every timed candidate; empty: none
};
int cmdTune(TuneOptions const& o);

}  // namespace kortex::app
