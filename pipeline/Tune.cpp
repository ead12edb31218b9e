// Tuner registry and the runner shared by every tuner (pipeline/Tune.hpp).
#include "pipeline/Tune.hpp"

#include <cmath>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "core/Errors.hpp"

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

}  // namespace kortex::pipeline::tune
