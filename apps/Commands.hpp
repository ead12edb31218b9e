// Subcommand implementations of the `kortex` CLI. Each returns the process exit code and
// throws kortex errors (caught in main: one message, non-zero exit).
#pragma once

#include <string>

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

struct ReproduceOptions {
  bool quick = false;
  std::string dataDir;
  std::string outDir = "kortex-reproduce";
};
int cmdReproduce(ReproduceOptions const& o);

int cmdInfo(std::string const& jsonPath);

}  // namespace kortex::app
