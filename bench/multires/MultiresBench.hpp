// Internal pieces of `kortex bench multires` (bench/BenchMultires.hpp says what is measured and
// how) that every section uses: the benchmark's fixed problem (parameters, input, output checks)
// and the Context of one run (options, budget, inputs, the tiles gpu::multires uses, counters,
// progress and `measure`, which plans, times and checks one case). The sections and the report:
// bench/multires/MultiresSections.hpp.
#pragma once

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "bench/BenchOptions.hpp"
#include "core/Image.hpp"
#include "core/Multires.hpp"
#include "core/QualitySettings.hpp"
#include "core/Timing.hpp"
#include "gpu/multires/Multires.hpp"
#include "validation/Report.hpp"

namespace kortex::bench::multires {

using Exec = common::DeviceExec;
using Mem = common::DeviceMem;
using HostU16 = U16ImageView<Kokkos::HostSpace>;
template <class T>
using DevImage = Kokkos::View<T***, Kokkos::LayoutRight, Mem>;

// ---- the benchmark's fixed problem ----------------------------------------------------------
inline constexpr int kLevels = 5;            // the paper's 5 layers
inline constexpr int kRadius = 2;            // 5x5 window
inline constexpr int kWindowTaps = (2 * kRadius + 1) * (2 * kRadius + 1);
inline constexpr float kSigmaSpatial = 2.0f; // sigma_d of Table 2 and Figs 4-6
inline constexpr int kBits = 10;             // the paper's 10-bit data
inline constexpr int kMaxValue = (1 << kBits) - 1;
inline constexpr double kSigmaRangePerNoise = kQualityBilateralRangeFactor;  // sigma_r = 2 sigma_n
inline constexpr std::uint64_t kNoiseSeed = 0x3D17ull;  // + image edge
// Kokkos float pipeline vs the CPU reference, and float round trips: the tests' bound
// (tests/tstMultires.cpp kReferenceTol), relative to the reference's peak.
inline constexpr double kFloatRelTol = 1e-5;
// Tuning-database keys of the two tuned kernels (gpu/multires/detail/MultiresDriver.hpp).
inline constexpr const char* kBilateralKernel = "multires.bilateral";
inline constexpr const char* kPyramidKernel = "multires.pyramid";

// Device-time shares of the sections, in measurement order (a section may also use what the
// earlier ones left): Fig 4, Fig 5, Fig 6, Table 2.
inline constexpr double kSectionShare[] = {0.10, 0.30, 0.25, 0.35};

inline std::string sq(Index n) { return std::to_string(n) + "^2"; }
inline std::string sqU(Index n) { return std::to_string(n) + "²"; }

// Budgets of the mode the options ask for (tiny, quick or full), with their overrides.
common::Mode modeFor(BenchOptions const& o);

// ---- input ----------------------------------------------------------------------------------
struct Input {
  Index n = 0;
  HostImage clean;   // 10-bit phantom, float
  HostImage noisy;   // integers 0..1023, float
  HostU16 noisy16;   // the same values, uint16
  double sigma = 0.0;
  double range = 0.0;      // data range of the clean image (PSNR's L)
  double psnrNoisy = 0.0;  // noisy vs clean, dB
};

// The Shepp-Logan phantom at n x n scaled to 10 bits, plus Gaussian noise at SNR 25 (seed
// kNoiseSeed + n), rounded and clamped to 0..1023 (bench/peers/kortex_inputs.py builds the same).
std::unique_ptr<Input> makeInput(Index n);

// The benchmark's parameters for noise sigma `sigma`: float (ClosenessLut) or 10-bit integer
// pipeline (ClosenessSimilarityLut); pyramid variant and level concurrency are the library's defaults.
MultiresParams baseParams(double sigma, bool integer);

// ---- checks ---------------------------------------------------------------------------------
HostImage toFloat(HostU16 const& v);

// An end-to-end output read back from the device as a HostImage of the input's geometry (uint16
// outputs converted to float).
template <class HostView>
HostImage asHostImage(HostView const& h, Input const& in) {
  HostImage a;
  if constexpr (std::is_same_v<typename HostView::non_const_value_type, std::uint16_t>) {
    a = toFloat(h);
  } else {
    a.geometry = in.noisy.geometry;
    a.data = h;
  }
  return a;
}

// End-to-end outputs: finite; the PSNR against the clean phantom is recorded for the report but
// is no pass criterion (with 5 levels and one sigma_r for every layer, small images can come out
// below the noisy input's PSNR: the 2x2 / 4x4 top level is smoothed across the whole image).
// Correctness comes from the CPU reference comparisons.
std::string checkFinite(HostImage const& out, Input const& in, double* psnrOut);

HostImage copyOf(HostImage const& a);

std::string checkClose(HostImage const& a, HostImage const& ref, double tolRel, std::string const& what);

template <class A, class B>
std::string checkEqual(A const& a, B const& b, std::string const& what) {
  long long bad = 0, first = -1;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (static_cast<long long>(a.data()[i]) != static_cast<long long>(b.data()[i])) {
      if (first < 0) first = static_cast<long long>(i);
      ++bad;
    }
  if (bad == 0) return "";
  return what + ": " + std::to_string(bad) + " pixels differ (first at index " + std::to_string(first) + ")";
}

// Finite and inside [lo, hi] (the layer bilateral is a convex combination of input samples).
template <class V>
std::string checkConvex(V const& h, double lo, double hi) {
  using validation::fmt;
  const double slack = 1e-4 * std::max(1.0, hi - lo);
  for (std::size_t i = 0; i < h.size(); ++i) {
    const double v = static_cast<double>(h.data()[i]);
    if (!std::isfinite(v)) return "non-finite output pixel " + std::to_string(i);
    if (v < lo - slack || v > hi + slack)
      return "output pixel " + std::to_string(i) + " = " + fmt(v) + " outside the input range [" + fmt(lo) +
             ", " + fmt(hi) + "]";
  }
  return "";
}

// ---- buffers --------------------------------------------------------------------------------
// Round robin over k buffer sets (inputs and / or outputs): `last` is the set the latest run used.
struct Rotation {
  int next = 0, last = 0, k = 1;
  int advance() { return last = next++ % k; }
};

// A host table on the device.
template <class T>
Kokkos::View<T*, Mem> tableToDevice(std::vector<T> const& host, const char* label) {
  Kokkos::View<T*, Mem> d(std::string(label), host.size());
  Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(host.data(), host.size());
  Kokkos::deep_copy(d, h);
  return d;
}

// Copies the noisy input into a device image (uint16 or float values).
template <class T>
void copyInput(DevImage<T> const& dst, Input const& in) {
  if constexpr (std::is_same_v<T, std::uint16_t>)
    Kokkos::deep_copy(dst, in.noisy16);
  else
    Kokkos::deep_copy(dst, in.noisy.data);
}

// A plan built once and the device images its runs rotate over.
template <class T>
struct PlanImages : Rotation {
  std::unique_ptr<gpu::MultiresPlan<Exec, T>> plan;
  std::vector<DevImage<T>> in, out;
};

// ---- one run's context ----------------------------------------------------------------------
// The tiles a configuration of gpu::multires uses and where they come from.
struct TileInfo {
  int bilateralX = 0, bilateralY = 0, pyramidX = 0, pyramidY = 0;
  std::string bilateralSource, pyramidSource;
  std::string bilateral() const { return std::to_string(bilateralX) + "x" + std::to_string(bilateralY); }
  std::string pyramid() const {
    return pyramidX > 0 ? std::to_string(pyramidX) + "x" + std::to_string(pyramidY) : std::string("-");
  }
};

// One measured case: `run` launches one run (enqueue, no fence on the device; the CPU reference
// runs synchronously), `check` inspects the last run's output ("" when fine, else the reason).
struct Case {
  std::function<void()> run;
  std::function<std::string()> check;
  int maxRepsCap = 0;
};

// What the sections share: the options and their budget, the inputs (made on demand), the tiles
// gpu::multires uses per size, the measured rates behind the cost estimates, the counters and
// the progress lines.
class Context {
 public:
  Context(BenchOptions const& o, nlohmann::json peers);

  BenchOptions const& opt() const { return opt_; }
  bool tiny() const { return opt_.tiny; }
  common::Mode const& mode() const { return mode_; }
  nlohmann::json const& peers() const { return peers_; }
  Exec const& exec() const { return exec_; }
  Clock::time_point start() const { return t0_; }
  std::size_t cacheBytes() const { return cache_; }
  int cpuThreads() const { return cpuThreads_; }
  double copyGBs() const { return copyGBs_; }
  int slotsUsedMax() const { return slotsUsedMax_; }
  int measured() const { return measured_; }
  int skipped() const { return skipped_; }
  int failed() const { return failed_; }
  // sigma_n and the noisy PSNR of every input made, by size.
  std::map<Index, std::pair<double, double>> const& noise() const { return noise_; }

  // True when --only is empty or part of `label`.
  bool selected(std::string const& label) const {
    return opt_.only.empty() || label.find(opt_.only) != std::string::npos;
  }
  void progress(std::string const& s) const;

  // Measures the device copy bandwidth (the reference of the pyramid kernels' GB/s).
  void measureCopyBandwidth();
  // Caps the device phase at the cumulated shares of the sections up to `section` (kSectionShare).
  void setSectionCap(int section);

  // Buffer sets of `setBytes` each for a rotation that defeats the last-level cache.
  int slots(double setBytes);
  Input& input(Index n);
  // Large inputs are rebuilt when needed again rather than kept (8192^2: ~0.7 GB on the host).
  void releaseLargeInputs();

  // The tiles gpu::multires uses at n x n (MultiresPlan::tiles() of a float FusedExpand plan) and
  // where they come from: the user's or the shipped tuning database, or the documented default.
  TileInfo const& tilesAt(Index n);
  // Where a plan's tiles came from: the same lookup the plan made (core/Tuning.hpp), compared with
  // what it resolved to.
  TileInfo withSources(Index n, MultiresTiles const& mt) const;

  // Measures one case under the budget: the estimate is `units` times the rate last measured for
  // `key` (or what `probeRate` measures, ms per unit, when none was); the case is skipped when the
  // estimate does not fit, else built, timed (Budget::timeAdaptive) and checked; the counters and
  // the progress line follow.
  void measure(common::Measurement& m, std::string const& label, bool device, std::string const& key, double units,
               std::function<Case()> const& build, std::function<double()> const& probeRate = {});
  // A case counted as measured failed a later check (its output compared with another's).
  void recountAsFailed() {
    --measured_;
    ++failed_;
  }

 private:
  BenchOptions opt_;
  common::Mode mode_;
  common::Budget budget_;
  nlohmann::json peers_;
  Clock::time_point t0_;
  std::size_t cache_;
  int cpuThreads_;
  Exec exec_;
  double copyGBs_ = 0.0;
  int slotsUsedMax_ = 1;
  int measured_ = 0, skipped_ = 0, failed_ = 0;
  std::map<std::string, double> rate_;  // ms per unit, per case key
  std::map<Index, std::unique_ptr<Input>> inputs_;
  std::map<Index, TileInfo> tiles_;
  std::map<Index, std::pair<double, double>> noise_;
};

// k rotating copies of the noisy n x n image as a float layer beside k output layers, and the
// closeness table: what the float layer bilateral reads (Figs 4 and 6).
struct FloatLayers : Rotation {
  std::vector<LayerView<Mem>> in, out;
  Kokkos::View<float*, Mem> closeness;
};
void makeFloatLayers(Context& ctx, Input const& in, FloatLayers& l);

}  // namespace kortex::bench::multires
