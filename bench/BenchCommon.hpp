// Pieces shared by the benchmarks (`kortex bench ct`: bench/Bench.cpp; `kortex bench multires`:
// bench/BenchMultires.cpp): per-mode budgets and the skip / adaptive-repetition rules, one
// measurement's record and its table cell, the buffer rotation that defeats the last-level
// cache, the device copy-bandwidth probe, OpenMP thread scoping and the peers JSON reader.
//
// Budget rules (both benchmarks): a measurement is skipped when its estimated run time exceeds
// the mode's single-run budget or the time its phase (device or CPU) has left - never filled
// in; otherwise its first run is timed, and the warm-up + repetitions follow when they fit the
// case budget (else the first run is reported alone, marked "1 run"). Each phase may use its
// share of the mode's total; a benchmark may lower a phase's cap further (setPhaseLimit) to
// give its sections their own slices.
#pragma once

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/BenchOptions.hpp"
#include "core/Timing.hpp"

namespace kortex::bench::common {

// What the sections of every paper bench share: the options, the report, the --peers JSON (null
// when none), the one Markdown stream (the sections share its format state, in order), the progress
// lines (with an optional prefix, e.g. "bench atlas: ") and failures (counted, in the report, said).
struct SectionRun {
  SectionRun(BenchOptions const& o, BenchReport& r, nlohmann::json p, std::string progressPrefix = {})
      : opt(o), rep(r), peers(std::move(p)), prefix_(std::move(progressPrefix)) {}
  BenchOptions const& opt;
  BenchReport& rep;
  const nlohmann::json peers;
  std::ostringstream md;

  void say(std::string const& s) const {
    if (opt.progress) *opt.progress << prefix_ << s << std::endl;
  }
  void fail(std::string const& what) {
    ++rep.failed;
    md << "\n**FAILED:** " << what << "\n";
    say("FAILED: " + what);
  }

 private:
  std::string prefix_;
};

using DeviceExec = Kokkos::DefaultExecutionSpace;
using DeviceMem = DeviceExec::memory_space;

// True when the default execution space works in host memory (no transfers, host caches).
inline constexpr bool kDeviceIsHostMemory =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, DeviceMem>::accessible;


// Budgets of one mode (seconds), see the rules above.
struct Mode {
  std::string name;
  double devBudget, devSingle, cpuBudget, cpuSingle, total;
  int warmup, minReps, maxRepsDev, maxRepsCpu;
  // Shares of `total` for the device and the CPU-reference measurements: each phase has its own
  // cap, so slow device variants cannot starve the CPU columns (or the reverse).
  double deviceShare = 0.55;
};

// A table cell's number: fixed with `prec` decimals, "-" when not finite.
std::string fixedDecimals(double v, int prec = 3);
// True when the --only text is empty or part of `label`.
bool selected(std::string const& only, std::string const& label);

// One timed implementation of one case.
struct Measurement {
  std::string impl;               // what ran: "Naive", "cpu-all", "kokkos float", ...
  std::string status = "not run"; // "ok" | "single" | "skipped" | "error" | "check failed" |
                                  // "not applicable"
  std::string note;
  int threads = 0;
  TimingStats timing;
  double estimateS = -1.0;

  bool measured() const { return status == "ok" || status == "single"; }
};

// "5 reps, 1 warm-up" | "1 run, no warm-up".
std::string repsText(Measurement const& m);
// Markdown cell: the median in ms, or what happened instead ("skipped", "n/a", ...).
std::string cell(Measurement const& m);
// paper / ours, 3 digits; "-" when either is missing.
std::string ratio(double paperMs, Measurement const& m);
// The timing fields of a measurement as JSON (implementation, status, note, threads, estimate,
// median/min/max, warm-up, repetitions, samples).
nlohmann::json timingJson(Measurement const& m);

// Sets the OpenMP thread count for the lifetime of the object.
class OmpThreads {
 public:
  explicit OmpThreads(int n);
  ~OmpThreads();
  OmpThreads(OmpThreads const&) = delete;
  OmpThreads& operator=(OmpThreads const&) = delete;

 private:
  int saved_;
};
// omp_get_max_threads(): the CPU reference's "all threads".
int maxOmpThreads();

// Last-level cache the rotation must defeat: the GPU's L2 when CUDA is the default space,
// else 32 MiB (a typical server L3 share; only used to size the rotation).
std::size_t cacheBytes();
// Number of buffer sets of `setBytes` each so that successive runs touch > 2x `cache`.
int rotationSlots(double setBytes, std::size_t cache, int maxSlots);

// Device copy bandwidth (read + write, GB/s): median of Kokkos::deep_copy between two float
// Views of 512 MiB (128 MiB in host memory; 64 / 16 MiB when `tiny`).
double measureCopyBandwidth(DeviceExec const& exec, bool tiny);

// Checks every benchmark makes before anything runs: --quick and --tiny exclusive, report paths
// writable, the peers JSON readable (returned; null when none was given).
nlohmann::json checkOptions(BenchOptions const& opt, const char* bench);
// InvalidArgument unless the --only text of `opt` is empty or part of one of `labels`;
// `example` shows what the labels look like.
void requireOnlyMatches(BenchOptions const& opt, std::vector<std::string> const& labels, const char* bench,
                        const char* example);
// Completes a report: wall time, ok (nothing failed and something was measured), the JSON and
// Markdown, written atomically where the options ask.
void finishReport(BenchReport& rep, nlohmann::json& j, std::string markdown, Clock::time_point tStart,
                  BenchOptions const& opt);
// Writes the report's JSON and Markdown atomically where the options ask.
void writeReport(BenchReport const& rep, BenchOptions const& opt);

// Reads a peers JSON (bench/peers/*.py); throws IoError when unreadable or not JSON.
nlohmann::json readPeersJson(std::string const& path);

// Phase caps, skip decisions and adaptive repetitions of one benchmark run (rules above).
class Budget {
 public:
  explicit Budget(Mode m) : mode_(std::move(m)) {}
  Mode const& mode() const { return mode_; }

  double phaseCapS(bool device) const;
  double phaseLeftMs(bool device) const;
  // Caps a phase below its share of the total (seconds; <= 0: no extra cap).
  void setPhaseLimit(bool device, double capS) { (device ? limitDeviceS_ : limitCpuS_) = capS; }
  double spentS(bool device) const { return device ? spentDeviceS_ : spentCpuS_; }

  // Adds the wall time of one measurement (probe included) to its phase.
  class PhaseClock {
   public:
    explicit PhaseClock(double& spent) : spent_(spent), t0_(Clock::now()) {}
    ~PhaseClock() { spent_ += secondsSince(t0_); }
    PhaseClock(PhaseClock const&) = delete;
    PhaseClock& operator=(PhaseClock const&) = delete;

   private:
    double& spent_;
    Clock::time_point t0_;
  };
  // The clock of a phase: hold it for the duration of one measurement.
  PhaseClock clock(bool device) { return PhaseClock(device ? spentDeviceS_ : spentCpuS_); }

  // Skip decision from the estimate of one run: skipped (false, with the reason in m) when the
  // estimate exceeds the single-run budget or the time left; unknown estimates (< 0) run.
  bool plan(Measurement& m, double estMs, bool device) const;

  // Times `run` (fenced by `fence`): one first run (the first warm-up run), then, when the
  // measured first run shows that warm-up + minReps repetitions fit the case budget, the
  // remaining warm-up runs and as many repetitions as fit (up to maxReps, or `maxRepsCap` when
  // > 0 and smaller); otherwise the first run is the single reported sample (status "single").
  template <class Run, class Fence>
  void timeAdaptive(Measurement& m, bool device, Run&& run, Fence&& fence, int maxRepsCap = 0) const {
    const double budget = (device ? mode_.devBudget : mode_.cpuBudget) * 1e3;
    int maxReps = device ? mode_.maxRepsDev : mode_.maxRepsCpu;
    if (maxRepsCap > 0) maxReps = std::max(mode_.minReps, std::min(maxReps, maxRepsCap));
    fence();
    const auto t0 = Clock::now();
    run();
    fence();
    const double firstMs = std::max(secondsSince(t0) * 1e3, 1e-6);
    const double room = std::min(budget, phaseLeftMs(device));
    const int moreWarmup = std::max(0, mode_.warmup - 1);
    if (firstMs * (moreWarmup + mode_.minReps) <= room) {
      const int reps = std::clamp(static_cast<int>(room / firstMs) - moreWarmup, mode_.minReps, maxReps);
      m.timing = timeMedian(run, fence, moreWarmup, reps);
      m.timing.warmup += 1;
      m.status = "ok";
    } else {
      m.timing = TimingStats{};
      m.timing.medianMs = m.timing.minMs = m.timing.maxMs = firstMs;
      m.timing.samplesMs = {firstMs};
      m.timing.repetitions = 1;
      m.timing.warmup = 0;
      m.status = "single";
      m.note = "1 run, no warm-up (a run takes longer than the case budget allows repeating)";
    }
  }

 private:
  Mode mode_;
  double spentDeviceS_ = 0.0, spentCpuS_ = 0.0;
  double limitDeviceS_ = 0.0, limitCpuS_ = 0.0;
};

}  // namespace kortex::bench::common
