// `kortex bench ct`: the cases and their dispatch, the budgets per mode, and the run: the
// device peaks, pass 1 (Kokkos variants on the device), passes 2 and 3 (CPU reference at all
// threads and at 1 thread), then the report. The pieces live in bench/ct/ (CtBench.hpp).
#include "bench/Bench.hpp"

#include <algorithm>
#include <sstream>

#include "bench/BenchCommon.hpp"
#include "bench/ct/CtBench.hpp"
#include "core/Backend.hpp"
#include "core/Compat.hpp"
#include "validation/Report.hpp"

namespace kortex::bench {

namespace ct {

long long RowSpec::taps() const {
  const long long w = window;
  return dim == 2 ? w * w : w * w * w;
}

std::string RowSpec::label() const {
  std::ostringstream os;
  os << (algo == Algo::Bilateral ? "BF " : "NLM ") << dim << "D " << n << "^" << dim;
  if (algo == Algo::Nlm) os << " patch " << 2 * patchRadius + 1;
  os << " window " << window;
  return os.str();
}

std::vector<DeviceVariant> const& variants(Algo a) {
  return a == Algo::Bilateral ? bilateralVariants() : nlmVariants();
}

WorkUnits referenceUnits(Algo a) { return a == Algo::Bilateral ? &bilateralUnits : &nlmUnits; }

void setParams(RowSpec& r, double sigma) {
  r.noiseSigma = sigma;
  if (r.algo == Algo::Bilateral)
    setBilateralParams(r);
  else
    setNlmParams(r);
}

void reference(RowSpec const& r, ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out) {
  if (r.algo == Algo::Bilateral)
    referenceBilateral(in, out, r);
  else
    referenceNlm(in, out, r);
}

// Budgets per mode. A measurement is skipped when its estimated run time exceeds `single` (or
// the time left); otherwise its first run is timed, and the warm-up + repetitions follow when
// they fit `budget` (else the first run is reported alone, marked "1 run"). Nothing starts once
// the run has used `total` seconds.
common::Mode modeFor(BenchOptions const& o) {
  common::Mode m;
  if (o.tiny)
    m = {"tiny", 1.0, 1.0, 1.0, 1.0, 90.0, 1, 1, 2, 2};
  else if (o.quick)
    m = {"quick", 3.0, 5.0, 2.0, 4.0, 150.0, 1, 3, 10, 3};
  else
    m = {"full", 15.0, 30.0, 8.0, 45.0, 420.0, 2, 5, 30, 5};
  if (o.deviceCaseBudgetS > 0) m.devBudget = m.devSingle = o.deviceCaseBudgetS;
  if (o.cpuCaseBudgetS > 0) m.cpuBudget = m.cpuSingle = o.cpuCaseBudgetS;
  if (o.totalBudgetS > 0) m.total = o.totalBudgetS;
  return m;
}

namespace {

// The rows --only selects, each with one measurement per device variant and the two CPU ones.
std::vector<Row> selectRows(BenchOptions const& opt) {
  std::vector<Row> rows;
  for (auto const& s : bilateralRows(opt.tiny))
    if (s.label().find(opt.only) != std::string::npos) rows.push_back(Row{s, {}, {}, {}});
  for (auto const& s : nlmRows(opt.tiny))
    if (s.label().find(opt.only) != std::string::npos) rows.push_back(Row{s, {}, {}, {}});
  // Group rows by input (dim, n) so each input is made and uploaded once per pass.
  std::stable_sort(rows.begin(), rows.end(), [](Row const& a, Row const& b) {
    if (a.spec.dim != b.spec.dim) return a.spec.dim < b.spec.dim;
    return a.spec.n < b.spec.n;
  });
  for (auto& r : rows) {
    for (auto const& variant : variants(r.spec.algo)) {
      common::Measurement m;
      m.impl = variant.name;
      r.device.push_back(m);
    }
    r.cpuAll.impl = "cpu-all";
    r.cpu1.impl = "cpu-1";
  }
  return rows;
}

// The whole run: peaks, the three passes, the report.
BenchReport run(BenchOptions const& opt, nlohmann::json const& peers) {
  using validation::fmt;
  Results res;
  res.mode = modeFor(opt);
  res.t0 = Clock::now();
  res.cpuThreads = common::maxOmpThreads();
  Runner runner(opt, res.mode, res.cpuThreads);
  res.rows = selectRows(opt);

  progress(opt, std::string("Kortex CT benchmark (") + res.mode.name + "), device space " +
                    DeviceExec::name() + ", CPU reference threads: 1 and " + std::to_string(res.cpuThreads));
  res.copyGBs = common::measureCopyBandwidth(runner.exec(), opt.tiny);
  progress(opt, "  device copy bandwidth (read+write): " + fmt(res.copyGBs, 4) + " GB/s");
  res.expRate = measureExpRate(runner.exec(), opt.tiny);
  progress(opt, "  device exp() rate: " + fmt(res.expRate, 4) + " G/s");

  // Pass 1: Kokkos variants on the device; pass 2: CPU reference, all threads; pass 3: 1 thread.
  runner.devicePass(res.rows, res.transfers);
  for (bool all : {true, false}) runner.cpuPass(res.rows, all);
  runner.settleParams(res.rows);

  res.deviceConcurrency = kx::concurrency(runner.exec());
  res.cache = runner.inputs().cache();
  res.slotsUsedMax = runner.inputs().slotsUsedMax();
  res.tally = runner.tally();
  BenchReport rep;
  rep.measured = res.tally.measured;
  rep.skipped = res.tally.skipped;
  rep.failed = res.tally.failed;
  rep.ok = rep.failed == 0 && rep.measured > 0;
  rep.wallSeconds = secondsSince(res.t0);
  rep.json = toJson(res, peers);
  rep.markdown = toMarkdown(res, peers);
  return rep;
}

}  // namespace
}  // namespace ct

std::string defaultResultStem() {
  return "bench/results/ct_" + validation::sanitizeForFileName(buildInfo().device);
}

BenchReport runCtBench(BenchOptions const& opt) {
  nlohmann::json peers = common::checkOptions(opt, "ct");
  std::vector<std::string> labels;
  for (auto const& s : ct::bilateralRows(opt.tiny)) labels.push_back(s.label());
  for (auto const& s : ct::nlmRows(opt.tiny)) labels.push_back(s.label());
  common::requireOnlyMatches(opt, labels, "ct", "'NLM 2D 1024^2 patch 7 window 17'");
  BenchReport rep = ct::run(opt, peers);
  common::writeReport(rep, opt);
  return rep;
}

}  // namespace kortex::bench
