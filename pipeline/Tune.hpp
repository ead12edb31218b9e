// The tune job: tuner registry and runner behind `kortex tune` (the per-GPU tuning database that
// gpu/ reads at run time: core/Tuning.hpp).
//
// A tuner explores the configurations (tile / team / batch shapes) of one tuned kernel:
//   name          the database key the kernel looks up at run time ("ct.bilateral.scratch");
//   enumerate     the candidate space for a problem size, pruned by rules stated in a comment
//                 next to the enumerator; it also names the kernel's default configuration (what
//                 the kernel runs without a database entry) and, if there is one, a classic
//                 reference shape (the paper's "assumed optimal 16x16");
//   prepare       builds the input once on the default execution space and returns a Workload:
//                 `launch(config)` enqueues one run of the kernel with that configuration (no
//                 fence), `fence()` waits for it, `result()` copies the last output to the host.
//                 A memory-bound kernel's launch may rotate over several input/output buffers
//                 (as `kortex bench` does) so that a small image is not timed from the cache.
// The runner (runTuner) times every candidate the same way: warm-up runs, a fence before and
// after each repetition, the median of the repetitions (core/Timing.hpp timeMedian); it checks
// each candidate's output against the output of the kernel's default configuration (a faster
// but wrong configuration is rejected, never chosen) and picks the fastest accepted one.
//
// Built-in tuners: pipeline/TuneCt.cpp ("ct.bilateral.scratch", "ct.nlm.boxsum") and
// pipeline/TuneMultires.cpp ("multires.bilateral", "multires.pyramid").
// Adding a tuner (e.g. "multires.bilateral", "multires.pyramid"): write a function that calls
// registerTuner() for each (e.g. `void registerMultiresTuners()` in pipeline/TuneMultires.cpp,
// added to kortex_pipeline in pipeline/CMakeLists.txt), declare it below next to registerCtTuners()
// and call it in registerBuiltinTuners() (pipeline/Tune.cpp). The kernel then looks its
// configuration up with tuning::lookupOn(tuning::deviceFor<ExecSpace>(), name,
// tuning::sizeClass(...), <its default as a Config>) on the host side of its launcher (see
// gpu/bilateral/Bilateral.cpp scratchTile()); nothing else changes: `kortex tune` lists, runs, stores and
// shows every registered tuner.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/Image.hpp"
#include "core/Timing.hpp"
#include "core/Tuning.hpp"

namespace kortex::pipeline::tune {

using tuning::Config;

// The candidate space of one tuner for one problem size, after pruning.
struct CandidateSet {
  std::vector<Config> candidates;  // to time, in enumeration order, distinct
  int enumerated = 0;              // shapes before pruning
  // Pruning rule -> shapes it removed (each shape counted under the first rule it breaks).
  std::vector<std::pair<std::string, int>> pruned;
  Config defaultConfig;            // what the kernel runs without a database entry
  std::optional<Config> reference; // a classic hand-picked shape, e.g. the paper's 16x16
  std::string referenceName;       // how reports name it ("16x16, one output per thread")
};

// Counts one shape removed by `rule` (rules keep their first-seen order in s.pruned).
void countPruned(CandidateSet& s, std::string const& rule);
// The value of `key` in a candidate configuration; InvalidArgument when it is missing.
int configValue(Config const& c, const char* key);

// One prepared problem on the default execution space.
struct Workload {
  std::string problem;                       // for reports: "noisy Shepp-Logan 1024^2, radius 8"
  std::function<void(Config const&)> launch; // enqueue one run (no fence)
  std::function<void()> fence;
  std::function<HostImage()> result;         // output of the last run, on the host
};

struct Tuner {
  std::string name;         // database key
  std::string description;  // one line
  int defaultSize = 1024;   // image edge when `kortex tune --size` is not given
  int dim = 2;              // dimension of the timed image (size class "<dim>d-<N>")
  // Largest |candidate - default| output difference accepted, in intensity units of the
  // (roughly [0, 1]) test image; a larger one rejects the candidate as broken.
  double agreement = 1e-4;
  std::function<CandidateSet(int size)> enumerate;
  // Throws InvalidArgument when the size does not suit the tuner's problem.
  std::function<Workload(int size)> prepare;
};

// Adds a tuner (after the built-ins, which are registered first whatever calls first); throws
// InvalidArgument for an empty or duplicate name or a missing function. Register before
// `kortex tune` reads the list; registration is not meant to race with tuners().
void registerTuner(Tuner t);
// Every registered tuner, built-ins first, in registration order.
std::vector<Tuner> const& tuners();
// Throws InvalidArgument naming the registered tuners when `name` is not one of them.
Tuner const& findTuner(std::string const& name);

// Built-in registration functions (called once by tuners()).
void registerCtTuners();        // pipeline/TuneCt.cpp
void registerMultiresTuners();  // pipeline/TuneMultires.cpp

struct Measurement {
  Config config;
  TimingStats stats;
  double maxAbsDiff = 0.0;  // vs the default configuration's output
  bool accepted = true;     // maxAbsDiff within the tuner's agreement and finite
};

struct TuneResult {
  std::string kernel, device, sizeClass, problem;
  int size = 0;
  int warmup = 0, repetitions = 0;
  CandidateSet set;
  std::vector<Measurement> measured;  // every timed candidate, in enumeration order
  // Indices into `measured` (-1: none): fastest and slowest accepted, reference, default.
  int best = -1, worst = -1, reference = -1, byDefault = -1;
};

// Size class of a tuner's problem of edge `size`.
std::string sizeClassFor(Tuner const& t, int size);

// Times every candidate of `t` on `w` (prepared for `size`). `progress`: one line per candidate.
// Throws Unsupported when no candidate is accepted.
TuneResult runTuner(Tuner const& t, Workload const& w, CandidateSet const& set, int size,
                    int warmup, int repetitions, std::ostream* progress);

// Every timed candidate of a run, as the tune job's JSON report lists it.
nlohmann::ordered_json toJson(TuneResult const& r);

// ---- the tune job (`kortex tune`, the pipeline's job shape) ------------------------------------------
// The database is read first and must be valid (a corrupt one is refused and left untouched); it is
// rewritten, merged with the new entries, only after every requested tuner has run, together with
// the JSON report (all or none). Every path is checked before timing.

// Warm-up runs and timed repetitions per candidate. 21: the median the code's tile comments were
// measured with; quick trades precision for a smoke run.
constexpr int kTuneWarmup = 3, kTuneRepetitions = 21;
constexpr int kTuneQuickWarmup = 1, kTuneQuickRepetitions = 3;

struct TuneJob {
  std::vector<std::string> kernels;  // empty: every registered tuner
  std::string database;              // empty: tuning::userDatabasePath()
  int size = 0;                      // image edge; 0: each tuner's default
  bool quick = false;
  std::string outJson;               // every timed candidate; empty: none
  int warmup() const { return quick ? kTuneQuickWarmup : kTuneWarmup; }
  int repetitions() const { return quick ? kTuneQuickRepetitions : kTuneRepetitions; }
};

// One kernel of the job: its tuner, problem size, candidates and prepared workload.
struct TunePlan {
  Tuner const* tuner = nullptr;
  int size = 0;
  CandidateSet set;
  Workload work;
};

struct TuneJobResult {
  std::vector<TuneResult> results;  // in plan order
  std::size_t entriesInFile = 0;    // the database's entries after the merge
};

// The job's database path (its own, else tuning::userDatabasePath()); InvalidArgument without one.
std::string tuneDatabasePath(TuneJob const& job);
// The database at `path` (empty if absent); IoError for a corrupt or unreadable one.
tuning::Database loadTuningDatabase(std::string const& path);
// The cheap checks, before any timing: the tuners named exist, each keeps a candidate at its size,
// the database and the report can be written. Returns one plan per kernel.
std::vector<TunePlan> planTuneJob(TuneJob const& job);
// Times every plan (`started` before and `finished` after each one: the caller's printing; `progress`:
// one line per candidate), then writes the merged database and the JSON report.
TuneJobResult runTuneJob(TuneJob const& job, std::vector<TunePlan> const& plans, std::ostream* progress,
                         std::function<void(TunePlan const&)> const& started,
                         std::function<void(TuneResult const&)> const& finished);

}  // namespace kortex::pipeline::tune
