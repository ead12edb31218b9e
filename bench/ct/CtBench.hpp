// Internals of `kortex bench ct` (bench/Bench.hpp says what it measures and how). The pieces:
//   - the cases: RowSpec, the bilateral and NLM rows and launches (bench/BenchBilateral.cpp,
//     bench/BenchNlm.cpp), the algorithm dispatch and the budgets per mode (bench/Bench.cpp);
//   - the cost model: measured rates per implementation, estimates and probes (CostModel.cpp);
//   - the inputs: one noisy phantom per (dim, n) and its rotated buffers (Inputs.cpp);
//   - the measurement passes: device variants, CPU reference at all threads and at 1 (Passes.cpp);
//   - the device peaks the throughputs are compared with: copy bandwidth
//     (bench/BenchCommon.hpp) and exp() rate (Microbench.cpp);
//   - the report: JSON and Markdown (Report.cpp).
// bench/Bench.cpp runs them in that order (runCtBench).
#pragma once

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "bench/BenchOptions.hpp"
#include "core/Bilateral.hpp"
#include "core/Image.hpp"
#include "core/Nlm.hpp"
#include "core/Timing.hpp"

namespace kortex::bench::ct {

using DeviceExec = Kokkos::DefaultExecutionSpace;
using DeviceMem = DeviceExec::memory_space;

// ---- the cases (bench/Bench.cpp, BenchBilateral.cpp, BenchNlm.cpp) ---------------------------

enum class Algo { Bilateral, Nlm };

struct RowSpec {
  Algo algo = Algo::Bilateral;
  int dim = 2;
  Index n = 256;           // n^dim voxels
  int window = 7;          // 2r+1 (BF) or 2R+1 (NLM)
  int patchRadius = -1;    // NLM only
  double noiseSigma = 0.0; // filled in once the input exists
  BilateralParams bilateral;
  NlmParams nlm;

  Index voxels() const { return dim == 2 ? n * n : n * n * n; }
  long long taps() const;  // window^dim: BF taps / NLM search offsets per voxel
  std::string label() const;  // "NLM 3D 256^3 patch 5 window 11"
};

// One implementation of a row's filter: its name, its launch (device variants) and its work
// units for the cost model (run time ~ rate x units).
using WorkUnits = double (*)(RowSpec const&);
struct DeviceVariant {
  std::string name;
  void (*launch)(DeviceExec const&, ConstImageView<DeviceMem>, ImageView<DeviceMem>, RowSpec const&);
  WorkUnits units;
};

// bilateral (BenchBilateral.cpp)
std::vector<RowSpec> bilateralRows(bool tiny);
void setBilateralParams(RowSpec& row);  // from window + noiseSigma
std::vector<DeviceVariant> const& bilateralVariants();  // Naive, ScratchTiled
void referenceBilateral(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
                        RowSpec const& row);
// Work units of the CPU reference and every variant: voxels x taps.
double bilateralUnits(RowSpec const& row);

// NLM (BenchNlm.cpp)
std::vector<RowSpec> nlmRows(bool tiny);
void setNlmParams(RowSpec& row);
std::vector<DeviceVariant> const& nlmVariants();  // Naive, ScratchTiled, BoxSum
void referenceNlm(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
                  RowSpec const& row);
// Work units of the box-sum CPU reference (and BoxSum): voxels x offsets.
double nlmUnits(RowSpec const& row);

// Dispatch on the algorithm (bench/Bench.cpp).
std::vector<DeviceVariant> const& variants(Algo a);
WorkUnits referenceUnits(Algo a);
void setParams(RowSpec& r, double sigma);  // noise sigma, then the filter's parameters
void reference(RowSpec const& r, ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out);

// Budgets per mode (bench/Bench.cpp).
common::Mode modeFor(BenchOptions const& o);

// One row of the tables: its case and its measurements.
struct Row {
  RowSpec spec;
  std::vector<common::Measurement> device;  // one per variant
  common::Measurement cpuAll, cpu1;
  bool inputMade = false;  // its input was built (its sigmas are final)
};

struct Transfer {
  int dim;
  Index n;
  bool hostMemory = true;
  double uploadMs = -1.0, downloadMs = -1.0;
};

// ---- cost model (CostModel.cpp) ---------------------------------------------------------------

// Rates (ms per work unit) measured in this run, per implementation, algorithm, dim, window and
// patch; the estimate of a case without a rate comes from a probe run on a small phantom.
class CostModel {
 public:
  static std::string key(std::string const& impl, RowSpec const& r);

  // Estimated ms of one run from the measured rate of this implementation, or a probe.
  double estimateMs(std::string const& impl, RowSpec const& r, WorkUnits units,
                    std::function<double(RowSpec const&)> const& probe);
  // The same for a device variant (probed on the device) and for the CPU reference (probed at
  // `threads`).
  double estimateDeviceMs(DeviceExec const& exec, RowSpec const& r, DeviceVariant const& variant);
  double estimateCpuMs(std::string const& impl, RowSpec const& r, int threads);
  void learn(std::string const& impl, RowSpec const& r, WorkUnits units, double ms);

  // One run of the probe case `p` (its noise and sigmas are those of its own phantom).
  static double probeDevice(DeviceExec const& exec, RowSpec const& p, DeviceVariant const& variant);
  static double probeCpu(RowSpec const& p, int threads);

 private:
  std::map<std::string, double> rate_;  // ms per work unit, per implementation/algorithm/dim
};

// ---- inputs (Inputs.cpp) ----------------------------------------------------------------------

// The noisy phantom of one (dim, n), plus its buffers.
struct InputSet {
  InputSet(int d, Index size) : dim(d), n(size) {}

  int dim = 2;
  Index n = 0;
  bool made = false;
  HostImage image;
  double sigma = 0.0;
  float lo = 0.0f, hi = 0.0f;
  std::vector<ImageView<DeviceMem>> dIn, dOut;
  std::vector<ImageView<Kokkos::HostSpace>> hIn, hOut;

  void make();
  void releaseDevice() { dIn.clear(); dOut.clear(); }
  void releaseHost() { hIn.clear(); hOut.clear(); }
};

// The inputs of one run, one per (dim, n), and their buffer rotation.
class Inputs {
 public:
  Inputs(std::size_t cache, bool tiny) : cache_(cache), tiny_(tiny) {}

  InputSet& get(int dim, Index n);
  // Builds `in` and uploads it into enough device buffer pairs to exceed twice the cache; the
  // transfer times of one image (none when the device works in host memory).
  Transfer allocateDevice(InputSet& in, DeviceExec const& exec);
  void allocateHost(InputSet& in);

  std::size_t cache() const { return cache_; }
  int slotsUsedMax() const { return slotsUsedMax_; }

 private:
  std::size_t cache_;
  bool tiny_;
  int slotsUsedMax_ = 1;
  std::vector<std::unique_ptr<InputSet>> sets_;
};

// ---- microbenchmarks (Microbench.cpp) ---------------------------------------------------------

// Measured G exp/s of the device (float kx::exp, as in the filters).
double measureExpRate(DeviceExec const& exec, bool tiny);

// ---- measurement passes (Passes.cpp) ----------------------------------------------------------

struct Tally {
  int measured = 0, skipped = 0, failed = 0;
};

// Live progress line, when the options ask for them.
void progress(BenchOptions const& opt, std::string const& s);

// Runs the passes over the rows under the mode's budget: pass 1, the Kokkos variants on the
// device; passes 2 and 3, the CPU reference at all threads and at 1 thread.
class Runner {
 public:
  Runner(BenchOptions const& opt, common::Mode const& mode, int cpuThreads);

  DeviceExec const& exec() const { return exec_; }
  Inputs const& inputs() const { return inputs_; }
  Tally const& tally() const { return tally_; }

  // Pass 1; the transfer of every input uploaded is appended to `transfers`.
  void devicePass(std::vector<Row>& rows, std::vector<Transfer>& transfers);
  // Pass 2 (allThreads) or 3.
  void cpuPass(std::vector<Row>& rows, bool allThreads);
  // Final parameters (and inputMade) of every row whose input was built.
  void settleParams(std::vector<Row>& rows);

 private:
  // Estimate first, before the input is built: false (m recorded as an error or as skipped,
  // `what` naming it in the progress line) when the measurement is not to run.
  bool admit(common::Measurement& m, bool device, std::function<double()> const& estimate,
             std::string const& what);
  // The budget's decision on an estimate; a skip is counted and reported.
  bool planned(common::Measurement& m, double estMs, bool device, std::string const& what);
  void measureDevice(Row& row, InputSet& in, std::size_t variant);
  void measureCpu(Row& row, InputSet& in, bool allThreads);
  // Checks the last output after timing: a pass is counted and teaches the cost model its rate.
  template <class OutView>
  bool accept(common::Measurement& m, RowSpec const& r, WorkUnits units, InputSet const& in,
              OutView const& last, std::string* why);
  void fail(common::Measurement& m, std::exception const& e);

  BenchOptions const& opt_;
  common::Budget budget_;
  CostModel costs_;
  Inputs inputs_;
  DeviceExec exec_;
  int cpuThreads_;
  Tally tally_;
};

// ---- report (Report.cpp) ----------------------------------------------------------------------

// Everything the report shows of one run.
struct Results {
  common::Mode mode;
  Clock::time_point t0;
  int deviceConcurrency = 0;
  int cpuThreads = 0;
  double copyGBs = 0.0;
  double expRate = 0.0;  // measured G exp/s of the device
  std::size_t cache = 0;
  int slotsUsedMax = 1;
  Tally tally;
  std::vector<Row> rows;
  std::vector<Transfer> transfers;
};

// `peers`: bench/peers/run_peers.py output (null: none).
nlohmann::json toJson(Results const& res, nlohmann::json const& peers);
std::string toMarkdown(Results const& res, nlohmann::json const& peers);

}  // namespace kortex::bench::ct
