// Subcommand implementations of the `kortex` CLI. Each returns the process exit code and
// throws kortex errors (caught in main: one message, non-zero exit).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "apps/Options.hpp"
#include "bench/BenchOptions.hpp"
#include "validation/Suite.hpp"

namespace CLI {
class App;
}

namespace kortex::app {

// What the parsed command line asks for: set by the chosen subcommand's callback, run by main()
// once Kokkos is initialised. Each add* function declares its subcommand(s) on `app`.
using Action = std::function<int()>;
void addInfoCommand(CLI::App& app, Action& action);        // apps/Info.cpp
void addDenoiseCommands(CLI::App& app, Action& action);    // apps/Denoise.cpp
void addValidateCommand(CLI::App& app, Action& action);    // apps/Suite.cpp
void addBenchCommands(CLI::App& app, Action& action);      // apps/Suite.cpp
void addReproduceCommand(CLI::App& app, Action& action);   // apps/Suite.cpp
void addSurfaceCommands(CLI::App& app, Action& action);    // apps/Surface.cpp
void addRegisterCommands(CLI::App& app, Action& action);   // apps/Register.cpp
void addTuneCommand(CLI::App& app, Action& action);        // apps/Tune.cpp
void addAtlasCommands(CLI::App& app, Action& action);      // apps/Atlas.cpp
void addApplyCommand(CLI::App& app, Action& action);       // apps/Apply.cpp

struct ValidateOptions {
  bool quick = false;
  std::string dataDir;   // empty: embedded phantoms only
  std::string jsonPath;  // empty: no JSON
  std::string markdownPath;
  // The studies to run (--only NAME, repeatable; validation::validationStudies()); empty: all.
  std::vector<std::string> only;
  std::vector<std::string> onlyAliases;  // the same from the older --NAME-only flags
  // Part 3's fluid parameters and pair count: the CLI binds them here, defaults from the structs.
  RegistrationParams registration;
  int pairs = validation::SuiteOptions{}.registrationPairs;
  // Part 5: the greedy parameters (apps/Options.hpp; --greedy-iterations) and pairs.
  GreedyOptions greedy{greedyRegistrationDefaults()};  // the greedy study (the atlas study keeps AtlasParams')
  int greedyPairs = validation::SuiteOptions{}.greedyPairs;
  int greedyFirstPair = validation::SuiteOptions{}.greedyFirstPair;
  int greedyCpuPairs = validation::SuiteOptions{}.greedyCpuPairs;
  std::string elastixDir;
  std::string fireantsDir;
  std::string multimodalImagesDir, multimodalElastixDir;
  bool skipUnbiased = false;  // part 5 without the register-unbiased runs
  std::string atlasSizes = "2,4,6,8,10,12,14";
  int atlasRepeats = validation::AtlasStudyOptions{}.repeats;
  std::string atlasMetric = toString(AtlasParams{}.greedy.metric);  // the atlas study's greedy metric
  std::string montageDir;     // montages of the quality and atlas studies; empty: none
};
int cmdValidate(ValidateOptions const& o);

int cmdBenchCt(bench::BenchOptions o);
// `kortex bench multires` (same options; --peers takes bench/peers/multires_opencv.py output).
int cmdBenchMultires(bench::BenchOptions o);
// `kortex bench register` (--peers takes bench/peers/registration_torch.py output; --data adds the IXI pair).
int cmdBenchRegister(bench::BenchOptions o);
// `kortex bench surface` (--peers takes bench/peers/surface_torch.py output; dumpDir: records for it).
int cmdBenchSurface(bench::BenchOptions o);
// `kortex bench greedy` (--peers takes bench/peers/greedy_torch.py output; --data adds the IXI pair).
// `kortex bench atlas` (--peers takes bench/peers/atlas_torch.py output; --data: the IXI cohort).
int cmdBenchAtlas(bench::BenchOptions o);
int cmdBenchGreedy(bench::BenchOptions o);

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
