// CT benchmark behind `kortex bench ct [--quick|--tiny] [--json FILE] [--markdown FILE]`:
// the paper's Table I (bilateral) and Table II (NLM, patch 7x7) at 256^2 / 512^2 / 1024^2 with
// windows 7 / 11 / 17, and the same windows in 3D at 64^3 / 128^3 / 256^3 (NLM 3D with patch
// 5^3 and 7^3), for every Kokkos variant (Naive, ScratchTiled, and BoxSum for NLM) on the
// default Kokkos execution space, beside the paper's straightforward / optimized numbers and
// the ratios paper / ours; the CPU reference (Eigen + OpenMP) at 1 thread and at all threads;
// host <-> device transfer times; throughput; the targets; and, when given a JSON from
// bench/peers/run_peers.py, the peers (OpenCV, scikit-image, PyTorch) side by side.
//
// Method (every printed number except the paper's and the targets is measured in this run):
//   - input: the Shepp-Logan phantom (core/Phantom.hpp) + Gaussian noise at SNR 25, with the
//     parameters of the quality study (validation/Quality.hpp: BF sigma_s = r/2,
//     sigma_r = 2 sigma_n; NLM h = sigma_n);
//   - device: data resident on the device, kernel time only: exec.fence() before and after each
//     run, warm-up first, median of the repetitions (core/Timing.hpp); successive runs rotate
//     over enough input/output buffer pairs to exceed twice the last-level cache (GPU L2 from
//     the device; 32 MiB assumed for host spaces), so small images do not just measure cache;
//   - every measured implementation's output is checked once after timing: finite and inside
//     [min(input), max(input)] (both filters are convex combinations of input voxels);
//   - costs are estimated from the measured rate of the same implementation on a smaller case
//     (or a small probe run), and a case whose estimate exceeds the mode's budget is reported
//     as "skipped (est. N s)" - never filled in - or run once with no repetition when it fits
//     the single-run budget (marked "1 run");
//   - throughput: GB/s = (input + output bytes) / time, the minimum traffic; Gtaps/s = voxels x
//     window taps (bilateral) or voxels x search offsets (NLM: one weight, one exp each) / time.
#pragma once

#include "bench/BenchOptions.hpp"

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "core/Bilateral.hpp"
#include "core/Image.hpp"
#include "core/Nlm.hpp"

namespace kortex::bench {



// Runs the benchmark and writes the requested files (checked for writability before running).
// Throws IoError for an unwritable output path or unreadable peers JSON.
BenchReport runCtBench(BenchOptions const& opt);

// "bench/results/ct_<device>" (device name made file-name safe): the stem under which GPU
// results are committed (add ".json" / ".md").
std::string defaultResultStem();

// ---- shared by Bench.cpp, BenchBilateral.cpp, BenchNlm.cpp --------------------------------
namespace detail {

using DeviceExec = Kokkos::DefaultExecutionSpace;
using DeviceMem = DeviceExec::memory_space;

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

}  // namespace detail
}  // namespace kortex::bench
