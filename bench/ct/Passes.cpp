// Measurement passes of the CT benchmark. Pass 1: the Kokkos variants on the device (data
// resident, kernel time only, fenced, rotating over the input's buffer pairs); pass 2: the CPU
// reference at all threads; pass 3: at 1 thread. Every measurement is estimated before its
// input is built (a skipped one must not build it) and checked after timing.
#include <algorithm>
#include <cmath>

#include "bench/ct/CtBench.hpp"
#include "core/Compat.hpp"
#include "validation/Report.hpp"

namespace kortex::bench::ct {

using common::Measurement;
using common::OmpThreads;
using common::repsText;
using validation::fmt;
using validation::fmtMs;

namespace {

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

// True when row i is the last of its input (dim, n): rows are grouped by input.
bool lastOfInput(std::vector<Row> const& rows, std::size_t i) {
  return i + 1 == rows.size() || rows[i + 1].spec.dim != rows[i].spec.dim ||
         rows[i + 1].spec.n != rows[i].spec.n;
}

}  // namespace

void progress(BenchOptions const& opt, std::string const& s) {
  if (opt.progress) {
    *opt.progress << s << "\n";
    opt.progress->flush();
  }
}

Runner::Runner(BenchOptions const& opt, common::Mode const& mode, int cpuThreads)
    : opt_(opt), budget_(mode), inputs_(common::cacheBytes(), opt.tiny), cpuThreads_(cpuThreads) {}

void Runner::fail(Measurement& m, std::exception const& e) {
  m.status = "error";
  m.note = e.what();
  ++tally_.failed;
}

bool Runner::planned(Measurement& m, double estMs, bool device, std::string const& what) {
  if (budget_.plan(m, estMs, device)) return true;
  ++tally_.skipped;
  progress(opt_, "  " + what + ": skipped (" + m.note + ")");
  return false;
}

bool Runner::admit(Measurement& m, bool device, std::function<double()> const& estimate,
                   std::string const& what) {
  double est = 0.0;
  try {
    est = estimate();
  } catch (std::exception const& e) {
    fail(m, e);
    return false;
  }
  Measurement tmp = m;
  if (planned(tmp, est, device, what)) return true;
  m = tmp;
  return false;
}

template <class OutView>
bool Runner::accept(Measurement& m, RowSpec const& r, WorkUnits units, InputSet const& in,
                    OutView const& last, std::string* why) {
  HostImage out("kortex::bench::check", in.image.geometry);
  Kokkos::deep_copy(out.data, last);
  if (!saneOutput(out, in.lo, in.hi, why)) {
    m.status = "check failed";
    m.note = *why;
    ++tally_.failed;
    return false;
  }
  ++tally_.measured;
  costs_.learn(m.impl, r, units, m.timing.medianMs);
  return true;
}

void Runner::measureDevice(Row& row, InputSet& in, std::size_t v) {
  Measurement& m = row.device[v];
  const RowSpec& r = row.spec;
  DeviceVariant const& variant = variants(r.algo)[v];
  m.threads = kx::concurrency(exec_);
  auto phase = budget_.clock(true);
  try {
    if (!planned(m, costs_.estimateDeviceMs(exec_, r, variant), true, r.label() + " " + m.impl)) return;
    const int k = static_cast<int>(in.dIn.size());
    int next = 0;
    int last = 0;
    budget_.timeAdaptive(
        m, true,
        [&] {
          last = next++ % k;
          variant.launch(exec_, in.dIn[last], in.dOut[last], r);
        },
        [&] { exec_.fence(); });
    std::string why;
    accept(m, r, variant.units, in, in.dOut[last], &why);
    progress(opt_, "  " + r.label() + " " + m.impl + " [" + DeviceExec::name() + "]: " +
                       fmtMs(m.timing.medianMs) + " ms (" + repsText(m) + ")" +
                       (m.status == "check failed" ? "  CHECK FAILED: " + why : ""));
  } catch (std::exception const& e) {
    fail(m, e);
    progress(opt_, "  " + r.label() + " " + m.impl + ": ERROR " + e.what());
  }
}

void Runner::measureCpu(Row& row, InputSet& in, bool allThreads) {
  Measurement& m = allThreads ? row.cpuAll : row.cpu1;
  const RowSpec& r = row.spec;
  const int threads = allThreads ? cpuThreads_ : 1;
  m.threads = threads;
  auto phase = budget_.clock(false);
  try {
    if (!planned(m, costs_.estimateCpuMs(m.impl, r, threads), false, r.label() + " " + m.impl)) return;
    if (in.hIn.empty()) inputs_.allocateHost(in);
    const int k = static_cast<int>(in.hIn.size());
    int next = 0, last = 0;
    {
      OmpThreads t(threads);
      budget_.timeAdaptive(
          m, false,
          [&] {
            last = next++ % k;
            reference(r, in.hIn[last], in.hOut[last]);
          },
          [] {});
    }
    std::string why;
    accept(m, r, referenceUnits(r.algo), in, in.hOut[last], &why);
    progress(opt_, "  " + r.label() + " CPU reference " + std::to_string(threads) + " thread(s): " +
                       fmtMs(m.timing.medianMs) + " ms (" + repsText(m) + ")");
  } catch (std::exception const& e) {
    fail(m, e);
    progress(opt_, "  " + r.label() + " CPU reference: ERROR " + e.what());
  }
}

void Runner::devicePass(std::vector<Row>& rows, std::vector<Transfer>& transfers) {
  for (std::size_t i = 0; i < rows.size();) {
    std::size_t j = i;
    while (j < rows.size() && rows[j].spec.dim == rows[i].spec.dim && rows[j].spec.n == rows[i].spec.n) ++j;
    InputSet& in = inputs_.get(rows[i].spec.dim, rows[i].spec.n);
    bool allocated = false;
    for (std::size_t q = i; q < j; ++q) {
      // Probe and estimate before touching (possibly large) inputs.
      for (std::size_t v = 0; v < rows[q].device.size(); ++v) {
        Measurement& m = rows[q].device[v];
        RowSpec& spec = rows[q].spec;
        if (!in.made) setParams(spec, 0.01);  // provisional (cost does not depend on sigmas)
        // Estimate first: skipped measurements must not build the input.
        DeviceVariant const& variant = variants(spec.algo)[v];
        auto estimate = [&] { return costs_.estimateDeviceMs(exec_, spec, variant); };
        if (!admit(m, true, estimate, spec.label() + " " + m.impl)) continue;
        if (!allocated) {
          in.make();
          transfers.push_back(inputs_.allocateDevice(in, exec_));
          allocated = true;
        }
        setParams(spec, in.sigma);
        measureDevice(rows[q], in, v);
      }
    }
    in.releaseDevice();
    i = j;
  }
}

void Runner::cpuPass(std::vector<Row>& rows, bool allThreads) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    RowSpec& spec = rows[i].spec;
    InputSet& in = inputs_.get(spec.dim, spec.n);
    Measurement& m = allThreads ? rows[i].cpuAll : rows[i].cpu1;
    const int threads = allThreads ? cpuThreads_ : 1;
    if (!in.made) setParams(spec, 0.01);
    auto estimate = [&] { return costs_.estimateCpuMs(m.impl, spec, threads); };
    if (!admit(m, false, estimate, spec.label() + " CPU reference " + std::to_string(threads) + " thread(s)")) {
      if (m.status == "skipped") m.threads = threads;
      continue;
    }
    in.make();
    setParams(spec, in.sigma);
    measureCpu(rows[i], in, allThreads);
    // Free host buffers once the last row of this input is done.
    if (lastOfInput(rows, i)) in.releaseHost();
  }
}

void Runner::settleParams(std::vector<Row>& rows) {
  for (auto& r : rows) {
    InputSet& in = inputs_.get(r.spec.dim, r.spec.n);
    if (in.made) setParams(r.spec, in.sigma);
    r.inputMade = in.made;
  }
}

}  // namespace kortex::bench::ct
