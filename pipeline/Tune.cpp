// Tuner registry and the runner shared by every tuner (pipeline/Tune.hpp).
#include "pipeline/Tune.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "core/Backend.hpp"
#include "core/Errors.hpp"
#include "io/Output.hpp"
#include "pipeline/JobFiles.hpp"

namespace kortex::pipeline::tune {

namespace {

std::vector<Tuner>& registry() {
  static std::vector<Tuner> r;
  return r;
}

void registerBuiltinTuners() {
  registerCtTuners();
  registerMultiresTuners();
}

// Built-ins are registered before anything else, once; registerCtTuners() & co. call
// registerTuner() themselves (hence the recursive mutex and the `registering` flag).
std::recursive_mutex registryMutex;
bool builtinsDone = false, registering = false;

void ensureBuiltins() {
  std::lock_guard<std::recursive_mutex> lock(registryMutex);
  if (builtinsDone || registering) return;
  registering = true;
  try {
    registerBuiltinTuners();
  } catch (...) {
    registering = false;
    throw;
  }
  registering = false;
  builtinsDone = true;
}

double maxAbsDifference(HostImage const& a, HostImage const& b) {
  double m = 0.0;
  const float* pa = a.data.data();
  const float* pb = b.data.data();
  for (Index i = 0; i < a.numVoxels(); ++i) {
    const double d = std::abs(static_cast<double>(pa[i]) - static_cast<double>(pb[i]));
    if (!std::isfinite(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace

void registerTuner(Tuner t) {
  ensureBuiltins();
  std::lock_guard<std::recursive_mutex> lock(registryMutex);
  if (t.name.empty()) throw InvalidArgument("registerTuner: a tuner needs a name");
  if (!t.enumerate || !t.prepare)
    throw InvalidArgument("registerTuner: tuner '" + t.name + "' needs enumerate and prepare");
  if (t.defaultSize < 1 || (t.dim != 2 && t.dim != 3))
    throw InvalidArgument("registerTuner: tuner '" + t.name + "' has a bad size or dimension");
  for (auto const& x : registry())
    if (x.name == t.name) throw InvalidArgument("registerTuner: '" + t.name + "' is already registered");
  registry().push_back(std::move(t));
}

std::vector<Tuner> const& tuners() {
  ensureBuiltins();
  return registry();
}

Tuner const& findTuner(std::string const& name) {
  std::string known;
  for (auto const& t : tuners()) {
    if (t.name == name) return t;
    known += (known.empty() ? "" : ", ") + t.name;
  }
  throw InvalidArgument("unknown tuning kernel '" + name + "' (registered: " + known + ")");
}

void countPruned(CandidateSet& s, std::string const& rule) {
  for (auto& p : s.pruned)
    if (p.first == rule) {
      ++p.second;
      return;
    }
  s.pruned.emplace_back(rule, 1);
}

int configValue(Config const& c, const char* key) {
  auto it = c.find(key);
  if (it == c.end()) throw InvalidArgument(std::string("tuning: configuration has no '") + key + "'");
  return it->second;
}

std::string sizeClassFor(Tuner const& t, int size) {
  return tuning::sizeClass(size, size, t.dim == 3 ? size : 1);
}

TuneResult runTuner(Tuner const& t, Workload const& w, CandidateSet const& set, int size,
                    int warmup, int repetitions, std::ostream* progress) {
  TuneResult r;
  r.kernel = t.name;
  r.device = tuning::currentDevice();
  r.sizeClass = sizeClassFor(t, size);
  r.problem = w.problem;
  r.size = size;
  r.warmup = warmup;
  r.repetitions = repetitions;
  r.set = set;
  // The default is always timed: it is what the database entry has to beat.
  bool hasDefault = false;
  for (auto const& c : r.set.candidates) hasDefault = hasDefault || c == r.set.defaultConfig;
  if (!hasDefault) r.set.candidates.push_back(r.set.defaultConfig);

  // Reference output: the kernel's default configuration.
  w.launch(r.set.defaultConfig);
  w.fence();
  const HostImage expected = w.result();

  const int n = static_cast<int>(r.set.candidates.size());
  for (int i = 0; i < n; ++i) {
    Config const& c = r.set.candidates[i];
    Measurement m;
    m.config = c;
    m.stats = timeMedian([&] { w.launch(c); }, [&] { w.fence(); }, warmup, repetitions);
    m.maxAbsDiff = maxAbsDifference(w.result(), expected);
    m.accepted = m.maxAbsDiff <= t.agreement;
    if (progress) {
      std::ostringstream line;
      line << "  [" << std::setw(3) << i + 1 << "/" << n << "] " << std::left << std::setw(28)
           << tuning::toString(c) << std::right << std::fixed << std::setprecision(4)
           << std::setw(10) << m.stats.medianMs << " ms";
      if (!m.accepted)
        line << "  REJECTED: output differs from the default's by " << std::scientific
             << std::setprecision(2) << m.maxAbsDiff << " (> " << t.agreement << ")";
      *progress << line.str() << "\n" << std::flush;
    }
    r.measured.push_back(std::move(m));
  }
  for (int i = 0; i < n; ++i) {
    auto const& m = r.measured[i];
    if (m.config == r.set.defaultConfig) r.byDefault = i;
    if (r.set.reference && m.config == *r.set.reference) r.reference = i;
    if (!m.accepted) continue;
    if (r.best < 0 || m.stats.medianMs < r.measured[r.best].stats.medianMs) r.best = i;
    if (r.worst < 0 || m.stats.medianMs > r.measured[r.worst].stats.medianMs) r.worst = i;
  }
  if (r.best < 0)
    throw Unsupported("tuning " + t.name + ": no candidate reproduced the default configuration's "
                      "output; nothing recorded");
  return r;
}

namespace {
nlohmann::ordered_json configJson(Config const& c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (auto const& [k, v] : c) j[k] = v;
  return j;
}
}  // namespace

nlohmann::ordered_json toJson(TuneResult const& r) {
  nlohmann::ordered_json j;
  j["kernel"] = r.kernel;
  j["device"] = r.device;
  j["size_class"] = r.sizeClass;
  j["size"] = r.size;
  j["problem"] = r.problem;
  j["warmup"] = r.warmup;
  j["repetitions"] = r.repetitions;
  j["enumerated"] = r.set.enumerated;
  nlohmann::ordered_json pruned = nlohmann::ordered_json::object();
  for (auto const& [rule, n] : r.set.pruned) pruned[rule] = n;
  j["pruned"] = pruned;
  j["default"] = configJson(r.set.defaultConfig);
  j["reference"] = r.set.reference ? configJson(*r.set.reference) : nlohmann::ordered_json();
  j["best"] = configJson(r.measured[r.best].config);
  j["worst"] = configJson(r.measured[r.worst].config);
  j["chosen"] = configJson(r.measured[r.best].config);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (auto const& m : r.measured) {
    nlohmann::ordered_json c;
    c["config"] = configJson(m.config);
    c["median_ms"] = m.stats.medianMs;
    c["min_ms"] = m.stats.minMs;
    c["max_ms"] = m.stats.maxMs;
    c["samples_ms"] = m.stats.samplesMs;
    c["max_abs_diff_vs_default"] = m.maxAbsDiff;
    c["accepted"] = m.accepted;
    list.push_back(std::move(c));
  }
  j["candidates"] = std::move(list);
  return j;
}

std::string tuneDatabasePath(TuneJob const& job) {
  const std::string path = job.database.empty() ? tuning::userDatabasePath() : job.database;
  if (path.empty())
    throw InvalidArgument("tune: no tuning database path: name one, or set KORTEX_TUNING_DB, XDG_CACHE_HOME or HOME");
  return path;
}

tuning::Database loadTuningDatabase(std::string const& path) {
  try {
    return tuning::Database::load(path).value_or(tuning::Database{});
  } catch (IoError const& e) {
    throw IoError(std::string(e.what()) + "; fix or remove it (kortex tune leaves it untouched)");
  }
}

std::vector<TunePlan> planTuneJob(TuneJob const& job) {
  std::vector<Tuner const*> selected;
  if (job.kernels.empty()) {
    for (auto const& t : tuners()) selected.push_back(&t);
  } else {
    for (auto const& name : job.kernels) {
      auto const* t = &findTuner(name);
      if (std::find(selected.begin(), selected.end(), t) == selected.end()) selected.push_back(t);
    }
  }
  if (selected.empty()) throw Unsupported("no tuners are registered in this build");
  const std::string db = tuneDatabasePath(job);
  io::requireWritableFile(db, "tuning database", true);
  if (!job.outJson.empty()) io::requireWritableFile(job.outJson, "JSON report");
  (void)loadTuningDatabase(db);
  std::vector<TunePlan> plans;
  for (auto const* t : selected) {
    const int size = job.size > 0 ? job.size : t->defaultSize;
    TunePlan p{t, size, t->enumerate(size), t->prepare(size)};
    if (p.set.candidates.empty())
      throw Unsupported("tuning " + t->name + ": every candidate was pruned at size " + std::to_string(size));
    plans.push_back(std::move(p));
  }
  return plans;
}

TuneJobResult runTuneJob(TuneJob const& job, std::vector<TunePlan> const& plans, std::ostream* progress,
                         std::function<void(TunePlan const&)> const& started,
                         std::function<void(TuneResult const&)> const& finished) {
  const std::string dbPath = tuneDatabasePath(job);
  tuning::Database db = loadTuningDatabase(dbPath);
  const BuildInfo info = buildInfo();
  const std::string kokkos = info.kokkosVersion + " " + info.defaultExecutionSpace;
  const std::string date = io::utcTimestamp().substr(0, 10);
  TuneJobResult out;
  for (auto const& p : plans) {
    if (started) started(p);
    TuneResult r = runTuner(*p.tuner, p.work, p.set, p.size, job.warmup(), job.repetitions(), progress);
    if (finished) finished(r);
    int accepted = 0;
    for (auto const& m : r.measured) accepted += m.accepted ? 1 : 0;
    tuning::Entry e;
    e.kernel = r.kernel;
    e.device = r.device;
    e.sizeClass = r.sizeClass;
    e.config = r.measured[std::size_t(r.best)].config;
    e.medianMs = r.measured[std::size_t(r.best)].stats.medianMs;
    e.worstMs = r.measured[std::size_t(r.worst)].stats.medianMs;
    e.candidates = accepted;
    e.kokkos = kokkos;
    e.git = info.gitHash;
    e.date = date;
    db.put(e);
    out.results.push_back(std::move(r));
  }
  out.entriesInFile = db.entries().size();
  nlohmann::ordered_json report;
  if (!job.outJson.empty()) {
    report["schema"] = "kortex-tune-run";
    report["environment"] = io::environmentJson(false);
    report["database"] = dbPath;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (auto const& r : out.results) list.push_back(toJson(r));
    report["kernels"] = std::move(list);
  }
  writeAllOrNone({{"tuning database", dbPath, [&](std::filesystem::path const& t) { io::saveTuningDatabase(db, t); }},
                  {"JSON report", job.outJson, [&](std::filesystem::path const& t) { io::writeTextFileAtomic(t, report.dump(2) + "\n"); }}});
  return out;
}

}  // namespace kortex::pipeline::tune
