#include "bench/Bench.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include "bench/BenchCommon.hpp"
#include "bench/PaperCt.hpp"
#include "core/Backend.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "io/Output.hpp"
#include "core/Timing.hpp"
#include "validation/Metrics.hpp"
#include "validation/Quality.hpp"
#include "validation/Report.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace kortex::bench {

using validation::fmt;
using validation::fmtMs;

namespace detail {

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

// Microbenchmark of the device's exp() throughput, the operation both filters are built on
// (one range weight per bilateral tap, one weight per NLM search offset): every thread runs
// kExpChain dependent float exp() evaluations (the same kx::exp as the filters), enough threads
// to fill the device; the result is written so nothing is optimised away.
struct ExpRateFunctor {
  static constexpr int kExpChain = 64;
  Kokkos::View<float*, DeviceMem> out;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    // Four independent chains so the rate is throughput-, not latency-bound on a CPU core.
    float x0 = 0.0009765625f * static_cast<float>(i & 1023), x1 = x0 + 0.25f, x2 = x0 + 0.5f,
          x3 = x0 + 0.75f;
    for (int k = 0; k < kExpChain / 4; ++k) {
      x0 = kx::exp(-x0);  // each stays in (0.1, 1]: no under/overflow
      x1 = kx::exp(-x1);
      x2 = kx::exp(-x2);
      x3 = kx::exp(-x3);
    }
    out(i) = x0 + x1 + x2 + x3;
  }
};

}  // namespace detail

using namespace detail;

namespace {

// Shared with `kortex bench multires` (bench/BenchCommon.hpp).
using common::Budget;
using common::cacheBytes;
using common::cell;
using common::kDeviceIsHostMemory;
using common::Measurement;
using common::Mode;
using common::OmpThreads;
using common::ratio;
using common::repsText;

// Budgets per mode. A measurement is skipped when its estimated run time exceeds `single` (or
// the time left); otherwise its first run is timed, and the warm-up + repetitions follow when
// they fit `budget` (else the first run is reported alone, marked "1 run"). Nothing starts once
// the run has used `total` seconds.

Mode modeFor(BenchOptions const& o) {
  Mode m;
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


struct Row {
  RowSpec spec;
  std::vector<Measurement> device;  // one per variant
  Measurement cpuAll, cpu1;
};

struct Transfer {
  int dim;
  Index n;
  bool hostMemory = true;
  double uploadMs = -1.0, downloadMs = -1.0;
};


// Number of (input, output) buffer pairs so that successive runs touch > 2x the cache.
int rotationSlots(Index voxels, std::size_t cache, int maxSlots) {
  return common::rotationSlots(2.0 * 4.0 * static_cast<double>(voxels), cache, maxSlots);
}

// The noisy phantom of one (dim, n), plus its buffers.
struct InputSet {
  int dim = 2;
  Index n = 0;
  bool made = false;
  HostImage image;
  double sigma = 0.0;
  float lo = 0.0f, hi = 0.0f;
  std::vector<ImageView<DeviceMem>> dIn, dOut;
  std::vector<ImageView<Kokkos::HostSpace>> hIn, hOut;

  void make() {
    if (made) return;
    HostImage clean = dim == 2 ? sheppLogan2D(n) : sheppLogan3D(n);
    sigma = noiseSigmaForSnr(clean, kQualitySnr);
    image = addGaussianNoise(clean, sigma, 0xC7B3ull + static_cast<std::uint64_t>(n * 10 + dim));
    lo = static_cast<float>(validation::minValue(image));
    hi = static_cast<float>(validation::maxValue(image));
    made = true;
  }
  void releaseDevice() { dIn.clear(); dOut.clear(); }
  void releaseHost() { hIn.clear(); hOut.clear(); }
};

// Finite and inside [lo, hi] up to float rounding (convex combination of input voxels).
bool saneOutput(HostImage const& out, float lo, float hi, std::string* why) {
  const double slack = 1e-4 * std::max(1.0, double(hi) - double(lo)) + 1e-6 * std::abs(double(hi));
  const float* p = out.data.data();
  for (Index i = 0; i < out.numVoxels(); ++i) {
    if (!std::isfinite(p[i])) {
      *why = "non-finite output voxel " + std::to_string(i);
      return false;
    }
    if (p[i] < lo - slack || p[i] > hi + slack) {
      *why = "output voxel " + std::to_string(i) + " = " + fmt(p[i]) + " outside the input range [" +
             fmt(lo) + ", " + fmt(hi) + "]";
      return false;
    }
  }
  return true;
}

class Engine {
 public:
  Engine(BenchOptions const& o, nlohmann::json peers)
      : opt_(o), peers_(std::move(peers)), mode_(modeFor(o)), budget_(mode_), t0_(Clock::now()), cache_(cacheBytes()),
        cpuThreads_(omp_get_max_threads()) {}

  BenchReport run();

 private:
  // ---- cost model ----
  std::string key(std::string const& impl, RowSpec const& r) const {
    // Window and patch are part of the key: a variant's rate per tap changes with them (e.g. the
    // tile that fits in scratch), so only a smaller image with the same window predicts a cost.
    return impl + "|" + (r.algo == Algo::Bilateral ? "bf" : "nlm") + "|" + std::to_string(r.dim) +
           "|w" + std::to_string(r.window) + "|p" + std::to_string(r.patchRadius);
  }
  static std::vector<DeviceVariant> const& variants(Algo a) {
    return a == Algo::Bilateral ? bilateralVariants() : nlmVariants();
  }
  static WorkUnits referenceUnits(Algo a) { return a == Algo::Bilateral ? &bilateralUnits : &nlmUnits; }
  void progress(std::string const& s) {
    if (opt_.progress) {
      *opt_.progress << s << "\n";
      opt_.progress->flush();
    }
  }

  InputSet& input(int dim, Index n) {
    for (auto& s : inputs_)
      if (s->dim == dim && s->n == n) return *s;
    inputs_.push_back(std::make_unique<InputSet>());
    inputs_.back()->dim = dim;
    inputs_.back()->n = n;
    return *inputs_.back();
  }
  bool inputMade(int dim, Index n) const {
    for (auto const& s : inputs_)
      if (s->dim == dim && s->n == n) return s->made;
    return false;
  }
  void setParams(RowSpec& r, double sigma) {
    r.noiseSigma = sigma;
    if (r.algo == Algo::Bilateral)
      setBilateralParams(r);
    else
      setNlmParams(r);
  }

  // Estimated ms of one run from the measured rate of this implementation, or a probe.
  double estimateMs(std::string const& impl, RowSpec const& r, WorkUnits units,
                    std::function<double(RowSpec const&)> const& probe) {
    const std::string k = key(impl, r);
    auto it = rate_.find(k);
    if (it == rate_.end()) {
      // Probe: same parameters on a small phantom whose extents exceed the radii.
      RowSpec p = r;
      const int rad = std::max((r.window - 1) / 2, std::max(r.patchRadius, 0));
      p.n = std::max<Index>(r.dim == 2 ? 48 : 12, rad + 2);
      if (p.n >= r.n) return -1.0;  // the row itself is the smallest: just run it
      const double ms = probe(p);
      rate_[k] = ms / units(p);
      it = rate_.find(k);
    }
    return it->second * units(r);
  }
  void learn(std::string const& impl, RowSpec const& r, WorkUnits units, double ms) {
    if (ms > 0.0) rate_[key(impl, r)] = ms / units(r);
  }

  // Budget rules (bench/BenchCommon.hpp).
  bool plan(Measurement& m, double estMs, bool device) { return budget_.plan(m, estMs, device); }
  template <class Run, class Fence>
  void timeAdaptive(Measurement& m, bool device, Run&& run, Fence&& fence) {
    budget_.timeAdaptive(m, device, run, fence);
  }

  void measureDevice(Row& row, InputSet& in, std::size_t variant);
  void measureCpu(Row& row, InputSet& in, bool allThreads);
  void allocateDevice(InputSet& in, Transfer& tr);
  void allocateHost(InputSet& in);
  double probeDevice(RowSpec const& p, DeviceVariant const& variant);
  double probeCpu(RowSpec const& p, int threads);
  void reference(RowSpec const& r, ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out) {
    if (r.algo == Algo::Bilateral)
      referenceBilateral(in, out, r);
    else
      referenceNlm(in, out, r);
  }
  double measureCopyBandwidth();
  double measureExpRate();

  nlohmann::json toJson(std::vector<Row> const& rows, std::vector<Transfer> const& transfers,
                        nlohmann::json const& peers) const;
  std::string toMarkdown(std::vector<Row> const& rows, std::vector<Transfer> const& transfers,
                         nlohmann::json const& peers) const;

  BenchOptions opt_;
  nlohmann::json peers_;  // bench/peers/run_peers.py output (null: none)
  Mode mode_;
  Budget budget_;
  Clock::time_point t0_;
  std::size_t cache_;
  int cpuThreads_;
  DeviceExec exec_;
  std::map<std::string, double> rate_;  // ms per work unit, per implementation/algorithm/dim
  std::vector<std::unique_ptr<InputSet>> inputs_;
  double copyGBs_ = 0.0;
  double expRate_ = 0.0;  // measured G exp/s of the device
  int slotsUsedMax_ = 1;
  int measured_ = 0, skipped_ = 0, failed_ = 0;
};

void Engine::allocateDevice(InputSet& in, Transfer& tr) {
  in.make();
  const auto& h = in.image.data;
  const int k = rotationSlots(in.image.numVoxels(), cache_, opt_.tiny ? 8 : 128);
  slotsUsedMax_ = std::max(slotsUsedMax_, k);
  in.dIn.clear();
  in.dOut.clear();
  for (int s = 0; s < k; ++s) {
    in.dIn.emplace_back("kortex::bench::input", h.extent(0), h.extent(1), h.extent(2));
    in.dOut.emplace_back("kortex::bench::output", h.extent(0), h.extent(1), h.extent(2));
  }
  Kokkos::deep_copy(in.dIn[0], h);
  for (int s = 1; s < k; ++s) Kokkos::deep_copy(in.dIn[s], in.dIn[0]);
  Kokkos::fence();
  tr.dim = in.dim;
  tr.n = in.n;
  tr.hostMemory = kDeviceIsHostMemory;
  if (!kDeviceIsHostMemory) {
    HostImage back("kortex::bench::download", in.image.geometry);
    const int reps = opt_.tiny ? 2 : 5;
    tr.uploadMs = timeMedian([&] { Kokkos::deep_copy(in.dIn[0], h); }, [&] { exec_.fence(); }, 1, reps).medianMs;
    tr.downloadMs =
        timeMedian([&] { Kokkos::deep_copy(back.data, in.dIn[0]); }, [&] { exec_.fence(); }, 1, reps).medianMs;
  }
}

void Engine::allocateHost(InputSet& in) {
  in.make();
  const auto& h = in.image.data;
  const int k = rotationSlots(in.image.numVoxels(), std::size_t(32) << 20, 4);
  in.hIn.clear();
  in.hOut.clear();
  for (int s = 0; s < k; ++s) {
    in.hIn.emplace_back("kortex::bench::cpu_input", h.extent(0), h.extent(1), h.extent(2));
    in.hOut.emplace_back("kortex::bench::cpu_output", h.extent(0), h.extent(1), h.extent(2));
    Kokkos::deep_copy(in.hIn.back(), h);
  }
}

double Engine::probeDevice(RowSpec const& p0, DeviceVariant const& variant) {
  InputSet probe;
  probe.dim = p0.dim;
  probe.n = p0.n;
  probe.make();
  RowSpec p = p0;
  setParams(p, probe.sigma);
  const auto& h = probe.image.data;
  ImageView<DeviceMem> din("kortex::bench::probe_in", h.extent(0), h.extent(1), h.extent(2));
  ImageView<DeviceMem> dout("kortex::bench::probe_out", h.extent(0), h.extent(1), h.extent(2));
  Kokkos::deep_copy(din, h);
  auto once = [&] {
    exec_.fence();
    const auto t = Clock::now();
    variant.launch(exec_, din, dout, p);
    exec_.fence();
    return secondsSince(t) * 1e3;
  };
  double ms = once();
  if (ms < 50.0) ms = once();  // the first launch may carry one-time costs
  return ms;
}

double Engine::probeCpu(RowSpec const& p0, int threads) {
  InputSet probe;
  probe.dim = p0.dim;
  probe.n = p0.n;
  probe.make();
  RowSpec p = p0;
  setParams(p, probe.sigma);
  HostImage out("kortex::bench::probe_out", probe.image.geometry);
  OmpThreads t(threads);
  auto once = [&] {
    const auto t1 = Clock::now();
    reference(p, probe.image.data, out.data);
    return secondsSince(t1) * 1e3;
  };
  double ms = once();
  if (ms < 50.0) ms = once();
  return ms;
}

void Engine::measureDevice(Row& row, InputSet& in, std::size_t v) {
  Measurement& m = row.device[v];
  const RowSpec& r = row.spec;
  DeviceVariant const& variant = variants(r.algo)[v];
  m.threads = kx::concurrency(exec_);
  auto phase = budget_.clock(true);
  try {
    const double est = estimateMs(m.impl, r, variant.units, [&](RowSpec const& p) { return probeDevice(p, variant); });
    if (!plan(m, est, true)) {
      ++skipped_;
      progress("  " + r.label() + " " + m.impl + ": skipped (" + m.note + ")");
      return;
    }
    const int k = static_cast<int>(in.dIn.size());
    int next = 0;
    int last = 0;
    timeAdaptive(
        m, true,
        [&] {
          last = next++ % k;
          variant.launch(exec_, in.dIn[last], in.dOut[last], r);
        },
        [&] { exec_.fence(); });
    HostImage out("kortex::bench::check", in.image.geometry);
    Kokkos::deep_copy(out.data, in.dOut[last]);
    std::string why;
    if (!saneOutput(out, in.lo, in.hi, &why)) {
      m.status = "check failed";
      m.note = why;
      ++failed_;
    } else {
      ++measured_;
      learn(m.impl, r, variant.units, m.timing.medianMs);
    }
    progress("  " + r.label() + " " + m.impl + " [" + DeviceExec::name() + "]: " +
             fmtMs(m.timing.medianMs) + " ms (" + repsText(m) + ")" +
             (m.status == "check failed" ? "  CHECK FAILED: " + why : ""));
  } catch (std::exception const& e) {
    m.status = "error";
    m.note = e.what();
    ++failed_;
    progress("  " + r.label() + " " + m.impl + ": ERROR " + e.what());
  }
}

void Engine::measureCpu(Row& row, InputSet& in, bool allThreads) {
  Measurement& m = allThreads ? row.cpuAll : row.cpu1;
  const RowSpec& r = row.spec;
  const int threads = allThreads ? cpuThreads_ : 1;
  m.threads = threads;
  auto phase = budget_.clock(false);
  try {
    const double est =
        estimateMs(m.impl, r, referenceUnits(r.algo), [&](RowSpec const& p) { return probeCpu(p, threads); });
    if (!plan(m, est, false)) {
      ++skipped_;
      progress("  " + r.label() + " " + m.impl + ": skipped (" + m.note + ")");
      return;
    }
    if (in.hIn.empty()) allocateHost(in);
    const int k = static_cast<int>(in.hIn.size());
    int next = 0, last = 0;
    {
      OmpThreads t(threads);
      timeAdaptive(
          m, false,
          [&] {
            last = next++ % k;
            reference(r, in.hIn[last], in.hOut[last]);
          },
          [] {});
    }
    HostImage out("kortex::bench::check", in.image.geometry);
    Kokkos::deep_copy(out.data, in.hOut[last]);
    std::string why;
    if (!saneOutput(out, in.lo, in.hi, &why)) {
      m.status = "check failed";
      m.note = why;
      ++failed_;
    } else {
      ++measured_;
      learn(m.impl, r, referenceUnits(r.algo), m.timing.medianMs);
    }
    progress("  " + r.label() + " CPU reference " + std::to_string(threads) + " thread(s): " +
             fmtMs(m.timing.medianMs) + " ms (" + repsText(m) + ")");
  } catch (std::exception const& e) {
    m.status = "error";
    m.note = e.what();
    ++failed_;
    progress("  " + r.label() + " CPU reference: ERROR " + e.what());
  }
}

double Engine::measureExpRate() {
  const int n = kDeviceIsHostMemory ? (1 << (opt_.tiny ? 16 : 20)) : (1 << 24);
  ExpRateFunctor f{Kokkos::View<float*, DeviceMem>("kortex::bench::exp_rate", n)};
  auto t = timeMedian(
      [&] {
        Kokkos::parallel_for("kortex::bench::expRate", Kokkos::RangePolicy<DeviceExec>(exec_, 0, n), f);
      },
      [&] { exec_.fence(); }, 1, opt_.tiny ? 2 : 5);
  return static_cast<double>(n) * ExpRateFunctor::kExpChain / (t.medianMs * 1e6);  // G exp / s
}

double Engine::measureCopyBandwidth() { return common::measureCopyBandwidth(exec_, opt_.tiny); }

BenchReport Engine::run() {
  std::vector<Row> rows;
  for (auto const& s : bilateralRows(opt_.tiny))
    if (s.label().find(opt_.only) != std::string::npos) rows.push_back(Row{s, {}, {}, {}});
  for (auto const& s : nlmRows(opt_.tiny))
    if (s.label().find(opt_.only) != std::string::npos) rows.push_back(Row{s, {}, {}, {}});
  // Group rows by input (dim, n) so each input is made and uploaded once per pass.
  std::stable_sort(rows.begin(), rows.end(), [](Row const& a, Row const& b) {
    if (a.spec.dim != b.spec.dim) return a.spec.dim < b.spec.dim;
    return a.spec.n < b.spec.n;
  });
  for (auto& r : rows) {
    for (auto const& variant : variants(r.spec.algo)) {
      Measurement m;
      m.impl = variant.name;
      r.device.push_back(m);
    }
    r.cpuAll.impl = "cpu-all";
    r.cpu1.impl = "cpu-1";
  }

  progress(std::string("Kortex CT benchmark (") + mode_.name + "), device space " + DeviceExec::name() +
           ", CPU reference threads: 1 and " + std::to_string(cpuThreads_));
  copyGBs_ = measureCopyBandwidth();
  progress("  device copy bandwidth (read+write): " + fmt(copyGBs_, 4) + " GB/s");
  expRate_ = measureExpRate();
  progress("  device exp() rate: " + fmt(expRate_, 4) + " G/s");

  // Pass 1: Kokkos variants on the device; pass 2: CPU reference, all threads; pass 3: 1 thread.
  std::vector<Transfer> transfers;
  for (std::size_t i = 0; i < rows.size();) {
    std::size_t j = i;
    while (j < rows.size() && rows[j].spec.dim == rows[i].spec.dim && rows[j].spec.n == rows[i].spec.n) ++j;
    InputSet& in = input(rows[i].spec.dim, rows[i].spec.n);
    bool allocated = false;
    for (std::size_t q = i; q < j; ++q) {
      // Probe and estimate before touching (possibly large) inputs.
      for (std::size_t v = 0; v < rows[q].device.size(); ++v) {
        Measurement& m = rows[q].device[v];
        RowSpec& spec = rows[q].spec;
        if (!in.made) setParams(spec, 0.01);  // provisional (cost does not depend on sigmas)
        // Estimate first: skipped measurements must not build the input.
        double est = 0.0;
        try {
          DeviceVariant const& variant = variants(spec.algo)[v];
          est = estimateMs(m.impl, spec, variant.units, [&](RowSpec const& p) { return probeDevice(p, variant); });
        } catch (std::exception const& e) {
          m.status = "error";
          m.note = e.what();
          ++failed_;
          continue;
        }
        Measurement tmp = m;
        if (!plan(tmp, est, true)) {
          m = tmp;
          ++skipped_;
          progress("  " + spec.label() + " " + m.impl + ": skipped (" + m.note + ")");
          continue;
        }
        if (!allocated) {
          in.make();
          Transfer tr;
          allocateDevice(in, tr);
          transfers.push_back(tr);
          allocated = true;
        }
        setParams(spec, in.sigma);
        measureDevice(rows[q], in, v);
      }
    }
    in.releaseDevice();
    i = j;
  }
  for (bool all : {true, false}) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      RowSpec& spec = rows[i].spec;
      InputSet& in = input(spec.dim, spec.n);
      Measurement& m = all ? rows[i].cpuAll : rows[i].cpu1;
      const int threads = all ? cpuThreads_ : 1;
      if (!in.made) setParams(spec, 0.01);
      double est = 0.0;
      try {
        est = estimateMs(m.impl, spec, referenceUnits(spec.algo), [&](RowSpec const& p) { return probeCpu(p, threads); });
      } catch (std::exception const& e) {
        m.status = "error";
        m.note = e.what();
        ++failed_;
        continue;
      }
      Measurement tmp = m;
      if (!plan(tmp, est, false)) {
        m = tmp;
        m.threads = threads;
        ++skipped_;
        progress("  " + spec.label() + " CPU reference " + std::to_string(threads) +
                 " thread(s): skipped (" + m.note + ")");
        continue;
      }
      in.make();
      setParams(spec, in.sigma);
      measureCpu(rows[i], in, all);
      // Free host buffers once the last row of this input is done.
      if (i + 1 == rows.size() || rows[i + 1].spec.dim != spec.dim || rows[i + 1].spec.n != spec.n)
        in.releaseHost();
    }
  }
  for (auto& r : rows) {
    InputSet& in = input(r.spec.dim, r.spec.n);
    if (in.made) setParams(r.spec, in.sigma);
  }

  nlohmann::json const& peers = peers_;
  BenchReport rep;
  rep.measured = measured_;
  rep.skipped = skipped_;
  rep.failed = failed_;
  rep.ok = failed_ == 0 && measured_ > 0;
  rep.wallSeconds = secondsSince(t0_);
  rep.json = toJson(rows, transfers, peers);
  rep.markdown = toMarkdown(rows, transfers, peers);
  return rep;
}

// ---------------------------------------------------------------------------------------------
// Reporting

nlohmann::json measurementJson(Measurement const& m, RowSpec const& r, double copyGBs, double expRate) {
  nlohmann::json j = common::timingJson(m);
  if (m.measured()) {
    const double s = m.timing.medianMs * 1e-3;
    const double gbs = 8.0 * static_cast<double>(r.voxels()) / s * 1e-9;
    const double gtaps = static_cast<double>(r.voxels()) * static_cast<double>(r.taps()) / s * 1e-9;
    j["gb_per_s"] = gbs;
    j["gtaps_per_s"] = gtaps;
    if (m.impl != "cpu-1" && m.impl != "cpu-all") {
      if (copyGBs > 0) j["fraction_of_copy_bandwidth"] = gbs / copyGBs;
      if (expRate > 0) j["fraction_of_exp_rate"] = gtaps / expRate;
    }
  }
  return j;
}

// Best (fastest) measured device variant of a row; nullptr when none.
Measurement const* best(Row const& r) {
  Measurement const* b = nullptr;
  for (auto const& m : r.device)
    if (m.measured() && (!b || m.timing.medianMs < b->timing.medianMs)) b = &m;
  return b;
}

std::string peerAlgoName(RowSpec const& r) { return r.algo == Algo::Bilateral ? "bilateral" : "nlm"; }

Row const* findRow(std::vector<Row> const& rows, std::string const& algo, int dim, Index n, int window,
                   int patch) {
  for (auto const& r : rows) {
    if (peerAlgoName(r.spec) != algo || r.spec.dim != dim || r.spec.n != n || r.spec.window != window)
      continue;
    if (r.spec.algo == Algo::Nlm && patch >= 0 && r.spec.patchRadius != patch) continue;
    return &r;
  }
  return nullptr;
}

// Median ms of the OpenCV peer (bilateralFilter / fastNlMeansDenoising) for a case, at the
// largest thread count measured; -1 when absent.
double openCvMs(nlohmann::json const& peers, std::string const& algo, int dim, Index n, int window,
                int patch, int* threads) {
  double ms = -1.0;
  *threads = 0;
  if (peers.is_null() || !peers.contains("results") || !peers["results"].is_array()) return ms;
  for (auto const& e : peers["results"]) {
    if (!e.is_object() || !e.contains("median_ms") || !e["median_ms"].is_number()) continue;
    if (e.value("peer", std::string()).rfind("opencv.", 0) != 0) continue;
    if (e.value("algorithm", std::string()) != algo || e.value("dim", 0) != dim ||
        e.value("size", Index(0)) != n || e.value("window", 0) != window)
      continue;
    if (algo == "nlm" && e.contains("patch_radius") && e["patch_radius"].is_number() &&
        e["patch_radius"].get<int>() != patch)
      continue;
    const int t = e.contains("threads") && e["threads"].is_number() ? e["threads"].get<int>() : 0;
    if (t > *threads) {
      *threads = t;
      ms = e["median_ms"].get<double>();
    }
  }
  return ms;
}

nlohmann::json Engine::toJson(std::vector<Row> const& rows, std::vector<Transfer> const& transfers,
                              nlohmann::json const& peers) const {
  nlohmann::json j;
  j["kind"] = "kortex-bench-ct";
  j["mode"] = mode_.name;
  j["environment"] = io::environmentJson(true);
  j["device_execution_space"] = DeviceExec::name();
  j["device_concurrency"] = kx::concurrency(exec_);
  j["cpu_reference_threads"] = {1, cpuThreads_};
  j["device_copy_bandwidth_gb_per_s"] = copyGBs_;
  j["device_exp_rate_g_per_s"] = expRate_;
  j["cache_bytes_for_rotation"] = cache_;
  j["max_rotation_slots"] = slotsUsedMax_;
  j["budgets_s"] = {{"device_case", mode_.devBudget}, {"device_single", mode_.devSingle},
                    {"cpu_case", mode_.cpuBudget},    {"cpu_single", mode_.cpuSingle},
                    {"total", mode_.total}, {"device_share", mode_.deviceShare}};
  j["input"] = "Shepp-Logan phantom + Gaussian noise, SNR 25 (sigma = mean / 25)";
  j["params_rule"] = "BF sigma_s = r/2, sigma_r = 2 sigma_n; NLM h = sigma_n";
  j["throughput_definitions"] = {
      {"gb_per_s", "(input + output bytes) / median time: 8 bytes per voxel"},
      {"gtaps_per_s", "voxels x window^dim / median time (BF taps; NLM weights, one exp each)"},
      {"fraction_of_copy_bandwidth", "gb_per_s / device_copy_bandwidth_gb_per_s"},
      {"fraction_of_exp_rate", "gtaps_per_s / device_exp_rate_g_per_s"}};
  j["paper"] = {{"device", paper::kDevice}, {"source", paper::kCitation}};
  j["rows"] = nlohmann::json::array();
  for (auto const& r : rows) {
    nlohmann::json jr;
    jr["algorithm"] = r.spec.algo == Algo::Bilateral ? "bilateral" : "nlm";
    jr["dim"] = r.spec.dim;
    jr["size"] = r.spec.n;
    jr["window"] = r.spec.window;
    jr["label"] = r.spec.label();
    // The sigmas follow from the input's noise level, known once the input was built (i.e.
    // when anything of the row was measured).
    const bool made = inputMade(r.spec.dim, r.spec.n);
    if (made) jr["noise_sigma"] = r.spec.noiseSigma;
    if (r.spec.algo == Algo::Bilateral) {
      jr["params"] = {{"radius", r.spec.bilateral.radius}};
      if (made)
        jr["params"].update({{"sigma_spatial", r.spec.bilateral.sigmaSpatial},
                             {"sigma_range", r.spec.bilateral.sigmaRange}});
    } else {
      jr["patch_radius"] = r.spec.patchRadius;
      jr["params"] = {{"patch_radius", r.spec.nlm.patchRadius}, {"search_radius", r.spec.nlm.searchRadius}};
      if (made) jr["params"]["h"] = r.spec.nlm.h;
    }
    if (r.spec.dim == 2) {
      if (auto const* p = paper::findRow(r.spec.algo == Algo::Nlm, static_cast<int>(r.spec.n), r.spec.window))
        jr["paper"] = {{"straightforward_ms", p->straightforwardMs}, {"optimized_ms", p->optimizedMs}};
    }
    jr["device"] = nlohmann::json::object();
    for (auto const& m : r.device) jr["device"][m.impl] = measurementJson(m, r.spec, copyGBs_, expRate_);
    jr["cpu_all_threads"] = measurementJson(r.cpuAll, r.spec, 0, 0);
    jr["cpu_1_thread"] = measurementJson(r.cpu1, r.spec, 0, 0);
    if (auto const* b = best(r)) {
      jr["best_device_variant"] = b->impl;
      if (r.cpuAll.measured()) jr["speedup_best_vs_cpu_all"] = r.cpuAll.timing.medianMs / b->timing.medianMs;
      if (r.cpu1.measured()) jr["speedup_best_vs_cpu_1"] = r.cpu1.timing.medianMs / b->timing.medianMs;
    }
    j["rows"].push_back(jr);
  }
  j["transfers"] = nlohmann::json::array();
  for (auto const& t : transfers) {
    nlohmann::json jt{{"dim", t.dim}, {"size", t.n}, {"host_memory", t.hostMemory}};
    if (!t.hostMemory)
      jt.update({{"upload_ms", t.uploadMs}, {"download_ms", t.downloadMs}, {"total_ms", t.uploadMs + t.downloadMs}});
    if (t.dim == 2 && paper::transferMs(static_cast<int>(t.n)) > 0) jt["paper_ms"] = paper::transferMs(static_cast<int>(t.n));
    j["transfers"].push_back(jt);
  }
  j["targets"] = nlohmann::json::array();
  for (auto const& t : paper::kTargets) {
    nlohmann::json jt{{"name", t.name}, {"limit_ms", t.maxMs}};
    Row const* r = findRow(rows, t.nlm ? "nlm" : "bilateral", t.dim, t.size, t.window, t.patchRadius);
    Measurement const* b = r ? best(*r) : nullptr;
    if (b) {
      jt.update({{"best_ms", b->timing.medianMs}, {"variant", b->impl}, {"met", b->timing.medianMs <= t.maxMs},
                 {"factor_over_limit", b->timing.medianMs / t.maxMs}});
    } else {
      jt["status"] = "not measured in this run";
    }
    int threads = 0;
    const double cv = openCvMs(peers, t.nlm ? "nlm" : "bilateral", t.dim, t.size, t.window, t.patchRadius, &threads);
    if (cv > 0.0) {
      jt["opencv_ms"] = cv;
      jt["opencv_threads"] = threads;
      if (b) jt["speedup_vs_opencv"] = cv / b->timing.medianMs;
      jt["speedup_vs_opencv_target"] = paper::kTargetSpeedupOverOpenCv;
    }
    j["targets"].push_back(jt);
  }
  if (!peers.is_null()) j["peers"] = peers;
  return j;
}

std::string Engine::toMarkdown(std::vector<Row> const& rows, std::vector<Transfer> const& transfers,
                               nlohmann::json const& peers) const {
  std::ostringstream os;
  const std::string cpuN = "CPU " + std::to_string(cpuThreads_) + " thr";
  os << "# Kortex CT benchmark (" << mode_.name << ")\n\n"
     << io::environmentMarkdown()
     << "- Kokkos variants run on `" << DeviceExec::name() << "` (concurrency " << kx::concurrency(exec_)
     << "); measured device peaks: copy bandwidth (read + write) " << fmt(copyGBs_, 4)
     << " GB/s, float exp() rate " << fmt(expRate_, 4) << " G/s\n"
     << "- Input: Shepp-Logan phantom + Gaussian noise at SNR 25; BF sigma_s = r/2, sigma_r = 2 "
        "sigma_n; NLM h = sigma_n.\n"
     << "- Times in ms: median after warm-up, fenced, kernel only (data resident on the device); "
        "successive runs rotate over up to "
     << slotsUsedMax_ << " buffer pairs (> 2x the " << (cache_ >> 20)
     << " MiB cache). CPU = reference_cpu (Eigen + OpenMP) at 1 and " << cpuThreads_ << " threads.\n"
     << "- Paper columns: " << paper::kCitation
     << " (not measured here). Ratio = paper / ours (> 1: ours faster).\n"
     << "- 'skipped': the cost estimated from this run's measured rates exceeded the " << mode_.name
     << " budget (details in the JSON); '(1 run)': measured once without warm-up.\n"
     << "- GB/s = 8 bytes per voxel (input + output) / time, with % of the measured copy bandwidth; "
        "Gtaps/s = voxels x window^d / time (BF taps; NLM weights), with % of the measured exp() rate "
        "(each tap / weight needs one exp).\n\n";

  auto table = [&](std::string const& title, Algo algo, int dim, int patch) {
    std::vector<Row const*> sel;
    for (auto const& r : rows)
      if (r.spec.algo == algo && r.spec.dim == dim && (algo == Algo::Bilateral || r.spec.patchRadius == patch))
        sel.push_back(&r);
    if (sel.empty()) return;
    const bool withPaper = dim == 2;
    std::vector<std::string> names;
    for (auto const& variant : variants(algo)) names.push_back(variant.name);
    os << "## " << title << "\n\n| image | window |";
    if (withPaper) os << " paper SF | paper opt. |";
    for (auto const& n : names) os << " " << n << " |";
    if (withPaper) {
      os << " SF / Naive |";
      for (std::size_t v = 1; v < names.size(); ++v) os << " opt. / " << names[v] << " |";
    }
    os << " CPU 1 thr | " << cpuN << " | best vs " << cpuN << " | GB/s (best) | Gtaps/s (best) |\n|---|---|";
    const std::size_t ncol = (withPaper ? 2 : 0) + names.size() + (withPaper ? names.size() : 0) + 5;
    for (std::size_t c = 0; c < ncol; ++c) os << "---:|";
    os << "\n";
    for (auto const* r : sel) {
      os << "| " << r->spec.n << (dim == 2 ? "²" : "³") << " | " << r->spec.window << (dim == 2 ? "²" : "³")
         << " |";
      paper::CtRow const* p = withPaper ? paper::findRow(algo == Algo::Nlm, static_cast<int>(r->spec.n), r->spec.window)
                                        : nullptr;
      if (withPaper) os << " " << (p ? fmt(p->straightforwardMs, 4) : "-") << " | " << (p ? fmt(p->optimizedMs, 4) : "-") << " |";
      for (auto const& m : r->device) os << " " << cell(m) << " |";
      if (withPaper) {
        os << " " << (p ? ratio(p->straightforwardMs, r->device[0]) : "-") << " |";
        for (std::size_t v = 1; v < r->device.size(); ++v)
          os << " " << (p ? ratio(p->optimizedMs, r->device[v]) : "-") << " |";
      }
      os << " " << cell(r->cpu1) << " | " << cell(r->cpuAll) << " |";
      Measurement const* b = best(*r);
      if (b && r->cpuAll.measured())
        os << " " << fmt(r->cpuAll.timing.medianMs / b->timing.medianMs, 3) << "x |";
      else
        os << " - |";
      if (b) {
        const double s = b->timing.medianMs * 1e-3;
        const double gbs = 8.0 * r->spec.voxels() / s * 1e-9;
        const double gtaps = static_cast<double>(r->spec.voxels()) * r->spec.taps() / s * 1e-9;
        os << " " << fmt(gbs, 3) << " (" << fmt(100.0 * gbs / copyGBs_, 2) << "%, " << b->impl << ") | "
           << fmt(gtaps, 3) << " (" << fmt(100.0 * gtaps / expRate_, 2) << "%) |";
      } else {
        os << " - | - |";
      }
      os << "\n";
    }
    os << "\n";
  };
  table("Table I: bilateral filter, 2D", Algo::Bilateral, 2, -1);
  table("Table II: non-local means, 2D, patch 7x7", Algo::Nlm, 2, 3);
  table("Bilateral filter, 3D", Algo::Bilateral, 3, -1);
  table("Non-local means, 3D, patch 5x5x5", Algo::Nlm, 3, 2);
  table("Non-local means, 3D, patch 7x7x7", Algo::Nlm, 3, 3);

  os << "## Host <-> device transfers (one image)\n\n";
  if (kDeviceIsHostMemory) {
    os << "The default execution space `" << DeviceExec::name()
       << "` uses host memory: no transfer is needed (none measured).\n\n";
  } else {
    os << "| image | upload ms | download ms | total ms | paper (GTX 480) ms |\n|---|---:|---:|---:|---:|\n";
    for (auto const& t : transfers) {
      const double p = t.dim == 2 ? paper::transferMs(static_cast<int>(t.n)) : -1.0;
      os << "| " << t.n << (t.dim == 2 ? "²" : "³") << " | " << fmtMs(t.uploadMs) << " | " << fmtMs(t.downloadMs)
         << " | " << fmtMs(t.uploadMs + t.downloadMs) << " | " << (p > 0 ? fmt(p, 2) : "-") << " |\n";
    }
    os << "\n";
  }

  os << "## Targets (issue 2, for an H100/H200; best Kokkos variant)\n\n"
     << "| target | limit ms | measured ms | variant | verdict | OpenCV ms (most threads) | "
        "speedup vs OpenCV (target >= "
     << fmt(paper::kTargetSpeedupOverOpenCv, 2) << "x) |\n|---|---:|---:|---|---|---:|---:|\n";
  for (auto const& t : paper::kTargets) {
    Row const* r = findRow(rows, t.nlm ? "nlm" : "bilateral", t.dim, t.size, t.window, t.patchRadius);
    Measurement const* b = r ? best(*r) : nullptr;
    os << "| " << t.name << " | " << fmt(t.maxMs, 3) << " | ";
    if (b) {
      const double f = b->timing.medianMs / t.maxMs;
      os << fmtMs(b->timing.medianMs) << " | " << b->impl << " | "
         << (f <= 1.0 ? "met" : "missed by " + fmt(f, 3) + "x") << " | ";
    } else {
      os << "- | - | not measured in this run | ";
    }
    int threads = 0;
    const double cv = openCvMs(peers, t.nlm ? "nlm" : "bilateral", t.dim, t.size, t.window, t.patchRadius, &threads);
    if (cv > 0.0) {
      os << fmtMs(cv) << " (" << threads << " thr) | ";
      if (b) {
        const double sp = cv / b->timing.medianMs;
        os << fmt(sp, 3) << "x " << (sp >= paper::kTargetSpeedupOverOpenCv ? "(met)" : "(missed)") << " |\n";
      } else {
        os << "- |\n";
      }
    } else {
      os << (peers.is_null() ? "no peers JSON given" : (t.dim == 3 ? "OpenCV has no 3D filter" : "not measured"))
         << " | - |\n";
    }
  }
  os << "\n";

  if (!peers.is_null() && peers.contains("results") && peers["results"].is_array()) {
    auto str = [](nlohmann::json const& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    os << "## Peers (bench/peers/run_peers.py, same inputs and parameters)\n\n";
    if (peers.contains("device")) os << "- GPU: " << str(peers["device"]) << "\n";
    if (peers.contains("cpu")) os << "- CPU: " << str(peers["cpu"]) << "\n";
    if (peers.contains("versions")) os << "- Versions: " << peers["versions"].dump() << "\n";
    os << "- Peer times are medians measured by the peer script (CPU: wall clock; GPU: CUDA events, "
          "data resident); Kortex speedup = peer ms / Kortex best ms (this run).\n\n"
       << "| peer | threads | case | peer ms | Kortex best ms | Kortex speedup |\n|---|---:|---|---:|---:|---:|\n";
    for (auto const& e : peers["results"]) {
      if (!e.is_object() || !e.contains("median_ms") || !e["median_ms"].is_number()) continue;
      const std::string algo = e.value("algorithm", "");
      const int dim = e.value("dim", 2);
      const Index n = e.value("size", 0);
      const int window = e.value("window", 0);
      const int patch = e.contains("patch_radius") && e["patch_radius"].is_number() ? e["patch_radius"].get<int>() : -1;
      const double pms = e["median_ms"].get<double>();
      Row const* r = findRow(rows, algo, dim, n, window, patch);
      Measurement const* b = r ? best(*r) : nullptr;
      os << "| " << e.value("peer", std::string("?")) << " | "
         << (e.contains("threads") && e["threads"].is_number() ? e["threads"].dump() : std::string("GPU")) << " | " << algo << " " << dim
         << "D " << n << " w" << window << (patch >= 0 ? " p" + std::to_string(2 * patch + 1) : std::string())
         << " | " << fmtMs(pms) << " | " << (b ? fmtMs(b->timing.medianMs) : "-") << " | "
         << (b ? fmt(pms / b->timing.medianMs, 3) + "x" : "-") << " |\n";
    }
    os << "\n";
  }
  os << "Measured " << measured_ << ", skipped " << skipped_ << ", failed " << failed_ << "; wall time "
     << fmt(secondsSince(t0_), 3) << " s.\n";
  return os.str();
}

}  // namespace

std::string defaultResultStem() {
  return "bench/results/ct_" + validation::sanitizeForFileName(buildInfo().device);
}

BenchReport runCtBench(BenchOptions const& opt) {
  nlohmann::json peers = common::checkOptions(opt, "ct");
  std::vector<std::string> labels;
  for (auto const& s : detail::bilateralRows(opt.tiny)) labels.push_back(s.label());
  for (auto const& s : detail::nlmRows(opt.tiny)) labels.push_back(s.label());
  common::requireOnlyMatches(opt, labels, "ct", "'NLM 2D 1024^2 patch 7 window 17'");
  Engine e(opt, std::move(peers));
  BenchReport rep = e.run();
  common::writeReport(rep, opt);
  return rep;
}

}  // namespace kortex::bench
