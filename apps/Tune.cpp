// `kortex tune`: explores the configurations of every registered tuned kernel (pipeline/Tune.hpp)
// on the default execution space and stores the fastest per (kernel, device, size class) in the
// tuning database (core/Tuning.hpp); `kortex tune --show` prints the database.
//
// The job (its files, checks and writes) is pipeline::tune::TuneJob; this file binds the flags and prints.
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
  const tuning::Database user = pipeline::tune::loadTuningDatabase(dbPath);
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
  pipeline::tune::TuneJob job;
  job.kernels = o.kernels;
  job.database = o.dbPath;
  job.size = o.size;
  job.quick = o.quick;
  job.outJson = o.jsonPath;
  const std::string dbPath = pipeline::tune::tuneDatabasePath(job);
  if (o.show) return showDatabase(o, dbPath);
  const auto plans = pipeline::tune::planTuneJob(job);  // everything that can fail cheaply, before any timing
  const BuildInfo info = buildInfo();
  std::cout << "Tuning on " << tuning::currentDevice() << " (Kokkos " << info.kokkosVersion << ", "
            << info.defaultExecutionSpace << "); each candidate: " << job.warmup()
            << " warm-up run(s), median of " << job.repetitions() << "\n";
  auto started = [](pipeline::tune::TunePlan const& p) {
    auto const& t = *p.tuner;
    std::cout << "\n" << t.name << ": " << t.description << "\n"
              << "  problem: " << p.work.problem << " (size class " << pipeline::tune::sizeClassFor(t, p.size) << ")\n"
              << "  " << p.set.enumerated << " shapes enumerated";
    int prunedTotal = 0;
    for (auto const& q : p.set.pruned) prunedTotal += q.second;
    std::cout << ", " << prunedTotal << " pruned";
    for (std::size_t i = 0; i < p.set.pruned.size(); ++i)
      std::cout << (i ? "; " : " (") << p.set.pruned[i].second << " " << p.set.pruned[i].first
                << (i + 1 == p.set.pruned.size() ? ")" : "");
    std::cout << ", " << p.set.candidates.size() << " to time\n" << std::flush;
  };
  const auto result = pipeline::tune::runTuneJob(job, plans, &std::cout, started,
                                                 [&](pipeline::tune::TuneResult const& r) { printSummary(r, dbPath); });
  std::cout << "\nWrote " << result.results.size() << " entr" << (result.results.size() == 1 ? "y" : "ies") << " to "
            << dbPath << " (" << result.entriesInFile << " in the file)\n";
  if (!o.jsonPath.empty()) std::cout << "Wrote every timed candidate to " << o.jsonPath << "\n";
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
