// `kortex tune`: explores the configurations of every registered tuned kernel (pipeline/Tune.hpp)
// on the default execution space and stores the fastest per (kernel, device, size class) in the
// tuning database (core/Tuning.hpp); `kortex tune --show` prints the database.
//
// Files: the database (--db, default tuning::userDatabasePath()) is read first and must be valid
// (a corrupt one is refused and left untouched: fix or remove it); it is rewritten atomically,
// merged with the new entries, only after every requested tuner has run. --json (every timed
// candidate) is written atomically at the end as well. Every path is checked before timing.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include <memory>

#include "apps/Commands.hpp"
#include "pipeline/Tune.hpp"
#include "core/Backend.hpp"
#include "core/Errors.hpp"
#include "io/Output.hpp"
#include "core/Tuning.hpp"
#include "validation/Report.hpp"

namespace fs = std::filesystem;

namespace kortex::app {

namespace {

// Warm-up runs and timed repetitions per candidate. 21: the median the code's tile comments were
// measured with; --quick trades precision for a smoke run.
constexpr int kWarmup = 3, kRepetitions = 21;
constexpr int kQuickWarmup = 1, kQuickRepetitions = 3;


// The database at `path` (empty if absent); a corrupt or unreadable one is refused.
tuning::Database loadDatabase(std::string const& path) {
  try {
    return tuning::Database::load(path).value_or(tuning::Database{});
  } catch (IoError const& e) {
    throw IoError(std::string(e.what()) + "; fix or remove it (kortex tune leaves it untouched)");
  }
}

std::string percentOver(double ms, double bestMs) {
  std::ostringstream os;
  os << std::showpos << std::fixed << std::setprecision(1) << 100.0 * (ms / bestMs - 1.0) << "%";
  return os.str();
}

std::string ms(double v) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(4) << v;
  return os.str();
}

int sizeOfClass(std::string const& sc) { return std::atoi(sc.c_str() + 3); }

// ---- --show --------------------------------------------------------------------------------------

int showDatabase(TuneOptions const& o, std::string const& dbPath) {
  const bool exists = fs::exists(dbPath);
  const tuning::Database user = loadDatabase(dbPath);
  const tuning::Database& shipped = tuning::shippedDefaults();
  struct Row {
    tuning::Entry const* e;
    const char* source;
  };
  std::vector<Row> rows;
  auto wanted = [&](tuning::Entry const& e) {
    return o.kernels.empty() ||
           std::find(o.kernels.begin(), o.kernels.end(), e.kernel) != o.kernels.end();
  };
  for (auto const& e : user.entries())
    if (wanted(e)) rows.push_back({&e, "user"});
  for (auto const& e : shipped.entries())
    if (wanted(e) && !user.find(e.kernel, e.device, e.sizeClass)) rows.push_back({&e, "shipped"});
  std::sort(rows.begin(), rows.end(), [](Row const& a, Row const& b) {
    const auto ka = std::make_tuple(a.e->kernel, a.e->device, a.e->sizeClass.substr(0, 2),
                                    sizeOfClass(a.e->sizeClass));
    const auto kb = std::make_tuple(b.e->kernel, b.e->device, b.e->sizeClass.substr(0, 2),
                                    sizeOfClass(b.e->sizeClass));
    return ka < kb;
  });

  std::cout << "User database: " << dbPath << " ("
            << (exists ? std::to_string(user.entries().size()) + " entries" : "absent") << ")\n"
            << "Shipped defaults: core/tuning_defaults.json (" << shipped.entries().size()
            << " entries)\n"
            << "This device: " << tuning::currentDevice()
            << " (lookup order: user, shipped, the kernel's default)\n";
  if (rows.empty()) {
    std::cout << "(no entries" << (o.kernels.empty() ? "" : " for the requested kernels")
              << "; `kortex tune` measures this device)\n";
    return 0;
  }
  const std::vector<std::string> head = {"kernel", "device", "size class", "config",
                                         "median ms", "worst ms", "candidates", "source"};
  std::vector<std::vector<std::string>> cells;
  for (auto const& r : rows)
    cells.push_back({r.e->kernel, r.e->device, r.e->sizeClass, tuning::toString(r.e->config),
                     ms(r.e->medianMs), ms(r.e->worstMs), std::to_string(r.e->candidates),
                     r.source});
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (auto const& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto printRow = [&](std::vector<std::string> const& row) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const bool numeric = c >= 4 && c <= 6;
      std::ostringstream cell;
      if (numeric)
        cell << std::right << std::setw(static_cast<int>(width[c])) << row[c];
      else
        cell << std::left << std::setw(static_cast<int>(width[c])) << row[c];
      line += (c ? "  " : "") + cell.str();
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  };
  printRow(head);
  std::vector<std::string> rule;
  for (auto w : width) rule.push_back(std::string(w, '-'));
  printRow(rule);
  for (auto const& row : cells) printRow(row);
  return 0;
}

// ---- tuning run --------------------------------------------------------------------------------------

nlohmann::ordered_json configJson(tuning::Config const& c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (auto const& [k, v] : c) j[k] = v;
  return j;
}

nlohmann::ordered_json resultJson(pipeline::tune::TuneResult const& r) {
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

void printSummary(pipeline::tune::TuneResult const& r, std::string const& dbPath) {
  auto const& best = r.measured[r.best];
  const double bestMs = best.stats.medianMs;
  auto line = [&](const char* label, tuning::Config const& c, double v, std::string const& note) {
    std::cout << "  " << std::left << std::setw(10) << label << std::setw(28) << tuning::toString(c)
              << std::right << std::setw(10) << ms(v) << " ms" << (note.empty() ? "" : "  " + note)
              << "\n";
  };
  line("best", best.config, bestMs, "");
  auto const& worst = r.measured[r.worst];
  line("worst", worst.config, worst.stats.medianMs, "(" + percentOver(worst.stats.medianMs, bestMs) + " vs best)");
  if (r.reference >= 0) {
    auto const& m = r.measured[r.reference];
    line("reference", m.config, m.stats.medianMs,
         "(" + percentOver(m.stats.medianMs, bestMs) + " vs best; " + r.set.referenceName + ")");
  }
  if (r.byDefault >= 0) {
    auto const& m = r.measured[r.byDefault];
    line("default", m.config, m.stats.medianMs,
         "(" + percentOver(m.stats.medianMs, bestMs) + " vs best; used without a database entry)");
  }
  std::cout << "  " << std::left << std::setw(10) << "chosen" << tuning::toString(best.config)
            << "  -> " << dbPath << " [" << r.kernel << ", " << r.device << ", " << r.sizeClass
            << "]\n";
}

}  // namespace

int cmdTune(TuneOptions const& o) {
  std::string dbPath = o.dbPath.empty() ? tuning::userDatabasePath() : o.dbPath;
  if (dbPath.empty())
    throw InvalidArgument("no tuning database path: pass --db FILE or set KORTEX_TUNING_DB, "
                          "XDG_CACHE_HOME or HOME");
  if (o.show) return showDatabase(o, dbPath);

  // Everything that can fail cheaply fails before any timing.
  std::vector<pipeline::tune::Tuner const*> selected;
  if (o.kernels.empty()) {
    for (auto const& t : pipeline::tune::tuners()) selected.push_back(&t);
  } else {
    for (auto const& name : o.kernels) {
      auto const* t = &pipeline::tune::findTuner(name);
      if (std::find(selected.begin(), selected.end(), t) == selected.end()) selected.push_back(t);
    }
  }
  if (selected.empty()) throw Unsupported("no tuners are registered in this build");
  io::requireWritableFile(dbPath, "tuning database", true);
  if (!o.jsonPath.empty()) io::requireWritableFile(o.jsonPath, "JSON report");
  tuning::Database db = loadDatabase(dbPath);

  struct Job {
    pipeline::tune::Tuner const* tuner;
    int size;
    pipeline::tune::CandidateSet set;
    pipeline::tune::Workload work;
  };
  std::vector<Job> jobs;
  for (auto const* t : selected) {
    const int size = o.size > 0 ? o.size : t->defaultSize;
    Job j{t, size, t->enumerate(size), t->prepare(size)};
    if (j.set.candidates.empty())
      throw Unsupported("tuning " + t->name + ": every candidate was pruned at size " +
                        std::to_string(size));
    jobs.push_back(std::move(j));
  }

  const BuildInfo info = buildInfo();
  const int warmup = o.quick ? kQuickWarmup : kWarmup;
  const int reps = o.quick ? kQuickRepetitions : kRepetitions;
  std::cout << "Tuning on " << tuning::currentDevice() << " (Kokkos " << info.kokkosVersion << ", "
            << info.defaultExecutionSpace << "); each candidate: " << warmup
            << " warm-up run(s), median of " << reps << "\n";

  std::vector<pipeline::tune::TuneResult> results;
  const std::string kokkos = info.kokkosVersion + " " + info.defaultExecutionSpace;
  const std::string date = io::utcTimestamp().substr(0, 10);
  for (auto const& j : jobs) {
    auto const& t = *j.tuner;
    std::cout << "\n" << t.name << ": " << t.description << "\n"
              << "  problem: " << j.work.problem << " (size class "
              << pipeline::tune::sizeClassFor(t, j.size) << ")\n"
              << "  " << j.set.enumerated << " shapes enumerated";
    int prunedTotal = 0;
    for (auto const& p : j.set.pruned) prunedTotal += p.second;
    std::cout << ", " << prunedTotal << " pruned";
    for (std::size_t i = 0; i < j.set.pruned.size(); ++i)
      std::cout << (i ? "; " : " (") << j.set.pruned[i].second << " " << j.set.pruned[i].first
                << (i + 1 == j.set.pruned.size() ? ")" : "");
    std::cout << ", " << j.set.candidates.size() << " to time\n" << std::flush;
    pipeline::tune::TuneResult r =
        pipeline::tune::runTuner(t, j.work, j.set, j.size, warmup, reps, &std::cout);
    printSummary(r, dbPath);
    int accepted = 0;
    for (auto const& m : r.measured) accepted += m.accepted ? 1 : 0;
    tuning::Entry e;
    e.kernel = r.kernel;
    e.device = r.device;
    e.sizeClass = r.sizeClass;
    e.config = r.measured[r.best].config;
    e.medianMs = r.measured[r.best].stats.medianMs;
    e.worstMs = r.measured[r.worst].stats.medianMs;
    e.candidates = accepted;
    e.kokkos = kokkos;
    e.git = info.gitHash;
    e.date = date;
    db.put(e);
    results.push_back(std::move(r));
  }

  io::saveTuningDatabase(db, dbPath);
  std::cout << "\nWrote " << results.size() << " entr" << (results.size() == 1 ? "y" : "ies")
            << " to " << dbPath << " (" << db.entries().size() << " in the file)\n";
  if (!o.jsonPath.empty()) {
    nlohmann::ordered_json j;
    j["schema"] = "kortex-tune-run";
    j["environment"] = io::environmentJson(false);
    j["database"] = dbPath;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (auto const& r : results) list.push_back(resultJson(r));
    j["kernels"] = std::move(list);
    io::writeTextFileAtomic(o.jsonPath, j.dump(2) + "\n");
    std::cout << "Wrote every timed candidate to " << o.jsonPath << "\n";
  }
  return 0;
}

void addTuneCommand(CLI::App& app, Action& action) {
  auto* tune = app.add_subcommand("tune", "Find the fastest tile/team shapes of the tuned kernels on this device "
                                          "and store them in the tuning database (read at run time)");
  auto top = std::make_shared<TuneOptions>();
  TuneOptions& to = *top;
  std::string tunerNames;
  for (auto const& t : pipeline::tune::tuners()) tunerNames += (tunerNames.empty() ? "" : ", ") + t.name;
  tune->add_option("--kernel", to.kernels, "Tuned kernel, repeatable (default: every one: " + tunerNames + ")");
  tune->add_option("--db", to.dbPath, "Tuning database to update or show (default: $KORTEX_TUNING_DB, else "
                                      "$XDG_CACHE_HOME/kortex/tuning.json, else ~/.cache/kortex/tuning.json)");
  auto* tuneShow = tune->add_flag("--show", to.show, "Print the merged database (user + shipped defaults); time nothing");
  tune->add_flag("--quick", to.quick, "Fewer repetitions per candidate (a smoke run, noisier choice)")
      ->excludes(tuneShow);
  tune->add_option("--size", to.size, "Image edge of the timed problem (default: each kernel's, 1024 for the CT ones)")
      ->check(CLI::Range(1, 16384))
      ->excludes(tuneShow);
  tune->add_option("--json", to.jsonPath, "Write every timed candidate as JSON")->excludes(tuneShow);
  tune->callback([top, &action] { action = [top] { return cmdTune(*top); }; });
}

}  // namespace kortex::app
