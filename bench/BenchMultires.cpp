// `kortex bench multires`: the multiresolution filter's paper figures and table (see
// bench/BenchMultires.hpp for what is measured and how).
#include "bench/BenchMultires.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "pipeline/MultiresTileSpace.hpp"
#include "bench/PaperMultires.hpp"
#include "core/Backend.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Multires.hpp"
#include "core/Phantom.hpp"
#include "io/Output.hpp"
#include "core/Tuning.hpp"
#include "gpu/multires/Multires.hpp"
#include "gpu/multires/MultiresBilateral.hpp"
#include "gpu/multires/MultiresPyramid.hpp"
#include "reference_cpu/Multires.hpp"
#include "validation/Metrics.hpp"
#include "validation/Quality.hpp"
#include "validation/Report.hpp"

namespace kortex::bench {

namespace {

using common::Budget;
using common::cell;
using common::kDeviceIsHostMemory;
using common::Measurement;
using common::Mode;
using common::OmpThreads;
using common::repsText;
using validation::fmt;
using validation::fmtMs;
namespace paper = paper_multires;
namespace md = gpu::multires_detail;

using Exec = common::DeviceExec;
using Mem = common::DeviceMem;
using HostU16 = U16ImageView<Kokkos::HostSpace>;
template <class T>
using DevImage = Kokkos::View<T***, Kokkos::LayoutRight, Mem>;
template <class T>
using DevLevel = md::Level<T, Mem>;

// ---- the benchmark's fixed problem ----------------------------------------------------------
constexpr int kLevels = 5;            // the paper's 5 layers
constexpr int kRadius = 2;            // 5x5 window
constexpr int kWindowTaps = (2 * kRadius + 1) * (2 * kRadius + 1);
constexpr float kSigmaSpatial = 2.0f; // sigma_d of Table 2 and Figs 4-6
constexpr int kBits = 10;             // the paper's 10-bit data
constexpr int kMaxValue = (1 << kBits) - 1;
constexpr double kSigmaRangePerNoise = kQualityBilateralRangeFactor;  // sigma_r = 2 sigma_n
constexpr std::uint64_t kNoiseSeed = 0x3D17ull;  // + image edge
// Kokkos float pipeline vs the CPU reference, and float round trips: the tests' bound
// (tests/tstMultires.cpp kReferenceTol), relative to the reference's peak.
constexpr double kFloatRelTol = 1e-5;
// Tuning-database keys of the two tuned kernels (gpu/multires/detail/MultiresDriver.hpp).
constexpr const char* kBilateralKernel = "multires.bilateral";
constexpr const char* kPyramidKernel = "multires.pyramid";

// Operations per window tap of each layer-bilateral variant (what the kernels in
// gpu/multires/detail/MultiresBilateralKernels.hpp execute per tap; an exp counts as one operation; loads and
// table reads are not counted, nor the 5 per-pixel row-sum additions and the final division).
struct TapOps {
  double ops;
  const char* unit;  // "flop" or "int op"
  const char* counted;
};
TapOps tapOps(MultiresBilateralVariant v) {
  switch (v) {
    case MultiresBilateralVariant::Naive:
      return {10.0, "flop",
              "d = l(q) - l(p); closeness exp(|o|^2 c_s): 1 mul + 1 exp; similarity exp(d^2 c_r): 2 mul + "
              "1 exp; w = c s; sum w d: 1 fma = 2; sum w: 1 add"};
    case MultiresBilateralVariant::FastMath:
      return {10.0, "flop", "as Naive, with the fast intrinsic exp (__expf on CUDA)"};
    case MultiresBilateralVariant::ClosenessLut:
      return {8.0, "flop",
              "d; closeness from the scratch table (not counted); exp(d^2 c_r): 2 mul + 1 exp; w = c s; "
              "sum w d: 2; sum w: 1"};
    case MultiresBilateralVariant::ClosenessSimilarityLut:
      return {6.0, "int op",
              "d = l(q) - l(p); |d|; w = cQ sQ (both from tables, not counted); num += w l (int64 mul + "
              "add); den += w"};
  }
  return {0.0, "?", "?"};
}

std::string sq(Index n) { return std::to_string(n) + "^2"; }
std::string sqU(Index n) { return std::to_string(n) + "²"; }

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

std::unique_ptr<Input> makeInput(Index n) {
  auto in = std::make_unique<Input>();
  in->n = n;
  const HostImage unit = sheppLogan2D(n);
  in->clean = HostImage("kortex::bench::multires::clean", unit.geometry);
  const Index count = unit.numVoxels();
  const float* u = unit.data.data();
  float* c = in->clean.data.data();
  for (Index i = 0; i < count; ++i) c[i] = static_cast<float>(double(kMaxValue) * u[i]);
  in->sigma = noiseSigmaForSnr(in->clean, kQualitySnr);
  const HostImage raw = addGaussianNoise(in->clean, in->sigma, kNoiseSeed + static_cast<std::uint64_t>(n));
  in->noisy = HostImage("kortex::bench::multires::noisy", unit.geometry);
  in->noisy16 = HostU16("kortex::bench::multires::noisy16", 1, n, n);
  const float* r = raw.data.data();
  float* f = in->noisy.data.data();
  std::uint16_t* q = in->noisy16.data();
  for (Index i = 0; i < count; ++i) {
    const float v = std::min(std::max(std::nearbyint(r[i]), 0.0f), float(kMaxValue));
    f[i] = v;
    q[i] = static_cast<std::uint16_t>(v);
  }
  in->range = validation::dataRange(in->clean);
  if (!(in->range > 0.0)) in->range = kMaxValue;
  in->psnrNoisy = validation::psnr(in->noisy, in->clean, in->range);
  return in;
}

MultiresParams baseParams(double sigma, bool integer) {
  MultiresParams p;
  p.levels = kLevels;
  p.radius = kRadius;
  p.sigmaSpatial = kSigmaSpatial;
  p.sigmaRange = static_cast<float>(kSigmaRangePerNoise * sigma);
  p.bits = integer ? kBits : 0;
  p.filter = true;
  // Pyramid variant and level concurrency: the library's defaults (core/Multires.hpp), so Table 2
  // reports what gpu::multires runs (Table 2 also times concurrentLevels on and off).
  p.bilateral = integer ? MultiresBilateralVariant::ClosenessSimilarityLut : MultiresBilateralVariant::ClosenessLut;
  return p;
}

// ---- checks ---------------------------------------------------------------------------------
HostImage toFloat(HostU16 const& v) {
  HostImage out("kortex::bench::multires::as_float", Geometry::make2D(static_cast<Index>(v.extent(2)),
                                                                      static_cast<Index>(v.extent(1))));
  const std::uint16_t* p = v.data();
  float* q = out.data.data();
  for (std::size_t i = 0; i < v.size(); ++i) q[i] = p[i];
  return out;
}

// End-to-end outputs: finite; the PSNR against the clean phantom is recorded for the report but
// is no pass criterion (with 5 levels and one sigma_r for every layer, small images can come out
// below the noisy input's PSNR: the 2x2 / 4x4 top level is smoothed across the whole image).
// Correctness comes from the CPU reference comparisons.
std::string checkFinite(HostImage const& out, Input const& in, double* psnrOut) {
  if (!validation::allFinite(out)) return "non-finite output pixel";
  if (psnrOut) *psnrOut = validation::psnr(out, in.clean, in.range);
  return "";
}

HostImage copyOf(HostImage const& a) {
  HostImage c("kortex::bench::multires::kept_output", a.geometry);
  Kokkos::deep_copy(c.data, a.data);
  return c;
}

std::string checkClose(HostImage const& a, HostImage const& ref, double tolRel, std::string const& what) {
  const auto e = validation::compare(a, ref);
  if (e.nonFinite > 0) return what + ": " + std::to_string(e.nonFinite) + " non-finite pixels";
  if (!(e.maxRel <= tolRel))
    return what + ": max relative error " + validation::fmtSci(e.maxRel) + " > " + validation::fmtSci(tolRel);
  return "";
}

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

// Minimum traffic of the pyramid kernels (bytes): every kernel reads its inputs once and writes
// its outputs once. Level sizes s_k (pixels), b bytes per pixel:
//   level-0 expand operator (decompose l_0 or reconstruct g'_0): 2 s_0 + s_1;
//   decompose: sum_{k<L} reduce (s_k + s_{k+1}) + laplacian (2 s_k + s_{k+1});
//   reconstruct: sum_{k<L} (2 s_k + s_{k+1}).
double levelPixels(LevelSize const& s) { return static_cast<double>(s.nx) * static_cast<double>(s.ny); }
double expandOpBytes(Index n, double b) {
  const auto s = levelSizes(n, n, 1);
  return b * (2.0 * levelPixels(s[0]) + levelPixels(s[1]));
}
double decomposeBytes(Index n, double b) {
  const auto s = levelSizes(n, n, kLevels);
  double t = 0.0;
  for (int k = 0; k < kLevels; ++k) t += 3.0 * levelPixels(s[k]) + 2.0 * levelPixels(s[k + 1]);
  return b * t;
}
double reconstructBytes(Index n, double b) {
  const auto s = levelSizes(n, n, kLevels);
  double t = 0.0;
  for (int k = 0; k < kLevels; ++k) t += 2.0 * levelPixels(s[k]) + levelPixels(s[k + 1]);
  return b * t;
}

// ---- result rows ----------------------------------------------------------------------------
struct TileInfo {
  int bilateralX = 0, bilateralY = 0, pyramidX = 0, pyramidY = 0;
  std::string bilateralSource, pyramidSource;
  std::string bilateral() const { return std::to_string(bilateralX) + "x" + std::to_string(bilateralY); }
  std::string pyramid() const {
    return pyramidX > 0 ? std::to_string(pyramidX) + "x" + std::to_string(pyramidY) : std::string("-");
  }
};

struct Fig4Row {
  MultiresBilateralVariant variant;
  Index n;
  Measurement m;
  TileInfo tiles;
  bool integer() const { return variant == MultiresBilateralVariant::ClosenessSimilarityLut; }
};

enum class PyrOp { ExpandDecompose, ExpandReconstruct, Decompose, Reconstruct };
constexpr PyrOp kPyrOps[] = {PyrOp::ExpandDecompose, PyrOp::ExpandReconstruct, PyrOp::Decompose,
                             PyrOp::Reconstruct};
const char* opName(PyrOp o) {
  switch (o) {
    case PyrOp::ExpandDecompose: return "expand-decompose";
    case PyrOp::ExpandReconstruct: return "expand-reconstruct";
    case PyrOp::Decompose: return "decompose";
    case PyrOp::Reconstruct: return "reconstruct";
  }
  return "?";
}

struct Fig5Row {
  Index n;
  bool integer;
  PyramidVariant variant;
  Measurement ops[4];  // kPyrOps order
  bool selected[4] = {false, false, false, false};
  std::string tile;  // FusedExpand tile (coarse pixels per team), else "-"
  double bytesPerPixel() const { return integer ? 2.0 : 4.0; }
  double traffic(PyrOp o) const {
    switch (o) {
      case PyrOp::ExpandDecompose:
      case PyrOp::ExpandReconstruct: return expandOpBytes(n, bytesPerPixel());
      case PyrOp::Decompose: return decomposeBytes(n, bytesPerPixel());
      case PyrOp::Reconstruct: return reconstructBytes(n, bytesPerPixel());
    }
    return 0.0;
  }
};

// Paper's Fig 5 value for an operator / variant at 512^2 (ms), or -1.
double paperFig5(Index n, PyramidVariant v, PyrOp o) {
  if (n != paper::kFig5Size) return -1.0;
  switch (o) {
    case PyrOp::ExpandDecompose:
    case PyrOp::ExpandReconstruct:
      if (v == PyramidVariant::Unfused) return paper::kFig5ExpandUnfusedMs;
      if (v == PyramidVariant::FusedDirect) return paper::kFig5ExpandFusedMs;
      if (v == PyramidVariant::FusedExpand) return paper::kFig5ExpandFusedSharedMs;
      return -1.0;
    case PyrOp::Decompose:
      if (v == PyramidVariant::Unfused) return paper::kFig5DecomposeUnfusedMs;
      if (v == PyramidVariant::FusedExpand) return paper::kFig5DecomposeFusedSharedMs;
      return -1.0;
    case PyrOp::Reconstruct:
      if (v == PyramidVariant::Unfused) return paper::kFig5ReconstructUnfusedMs;
      if (v == PyramidVariant::FusedExpand) return paper::kFig5ReconstructFusedSharedMs;
      return -1.0;
  }
  return -1.0;
}

struct Fig6Row {
  int x = 0, y = 0;
  bool candidate = true;  // false: the chosen tile, outside the candidate space
  Measurement m;
  std::string tile() const { return std::to_string(x) + "x" + std::to_string(y); }
};

struct E2eConfig {
  const char* name;
  bool integer;
  bool concurrent;
};
// Index 0 / 2: the library's default plan (levels filtered in order, MultiresParams); 1 / 3: the
// layers filtered concurrently on separate execution-space instances.
constexpr E2eConfig kE2e[] = {{"kokkos float", false, false},
                              {"kokkos float concurrent levels", false, true},
                              {"kokkos uint16", true, false},
                              {"kokkos uint16 concurrent levels", true, true}};
constexpr int kNumE2e = 4;
const char* phaseName(int p) { return p == 0 ? "decompose" : (p == 1 ? "filter" : "reconstruct"); }

struct Table2Row {
  Index n = 0;
  Measurement e2e[kNumE2e];
  bool e2eSelected[kNumE2e] = {false, false, false, false};
  std::string referenceCheck[kNumE2e];  // "" none; "passed: ..." or the failure
  double psnr[kNumE2e] = {0, 0, 0, 0};
  TileInfo tiles[kNumE2e];
  Measurement phases[2][3];  // [float, uint16][decompose, filter, reconstruct]
  bool phasesSelected[2] = {false, false};
  Measurement cpu4, cpuAll;
  bool cpuSelected[2] = {false, false};
  double psnrNoisy = 0.0, sigma = 0.0;
  bool inputMade = false;
  std::shared_ptr<HostImage> kokkosFloatOut;  // "kokkos float" output awaiting the CPU comparison
};

// Best measured Kokkos end-to-end configuration of a row; -1 when none.
int bestE2e(Table2Row const& r) {
  int b = -1;
  for (int c = 0; c < kNumE2e; ++c)
    if (r.e2e[c].measured() && (b < 0 || r.e2e[c].timing.medianMs < r.e2e[b].timing.medianMs)) b = c;
  return b;
}

double fps(Measurement const& m) { return m.measured() ? 1e3 / m.timing.medianMs : -1.0; }
std::string fpsCell(Measurement const& m) {
  if (!m.measured()) return cell(m);
  return fmt(fps(m), 4) + (m.status == "single" ? " (1 run)" : "");
}

Mode modeFor(BenchOptions const& o) {
  Mode m;
  if (o.tiny)
    m = {"tiny", 0.5, 1.0, 0.5, 1.0, 60.0, 1, 1, 2, 2, 0.6};
  else if (o.quick)
    m = {"quick", 1.5, 4.0, 1.5, 4.0, 200.0, 1, 3, 10, 3, 0.6};
  else
    m = {"full", 10.0, 30.0, 8.0, 45.0, 330.0, 2, 5, 30, 5, 0.5};
  if (o.deviceCaseBudgetS > 0) m.devBudget = m.devSingle = o.deviceCaseBudgetS;
  if (o.cpuCaseBudgetS > 0) m.cpuBudget = m.cpuSingle = o.cpuCaseBudgetS;
  if (o.totalBudgetS > 0) m.total = o.totalBudgetS;
  return m;
}

// Device-time shares of the sections, in measurement order (a section may also use what the
// earlier ones left): Fig 4, Fig 5, Fig 6, Table 2.
constexpr double kSectionShare[] = {0.10, 0.30, 0.25, 0.35};

std::vector<Index> fig5Sizes(bool tiny) { return tiny ? std::vector<Index>{64, 128} : std::vector<Index>{512, 4096}; }
Index fig4Size(bool tiny) { return tiny ? 64 : 512; }
Index fig6Size(bool tiny) { return tiny ? 128 : paper::kFig6Size; }
std::vector<Index> table2Sizes(bool tiny) {
  return tiny ? std::vector<Index>{64, 128} : std::vector<Index>{512, 1024, 2048, 4096, 8192};
}
std::vector<PyramidVariant> pyramidVariants(bool integer) {
  std::vector<PyramidVariant> v{PyramidVariant::Unfused, PyramidVariant::FusedDirect, PyramidVariant::FusedExpand};
  if (integer) v.push_back(PyramidVariant::Packed16);
  return v;
}
constexpr MultiresBilateralVariant kFig4Variants[] = {
    MultiresBilateralVariant::Naive, MultiresBilateralVariant::ClosenessLut, MultiresBilateralVariant::FastMath,
    MultiresBilateralVariant::ClosenessSimilarityLut};

std::string fig4Label(Index n, MultiresBilateralVariant v) { return "Fig4 " + sq(n) + " " + toString(v); }
std::string fig5Label(Index n, bool integer, PyramidVariant v, PyrOp o) {
  return "Fig5 " + sq(n) + " " + (integer ? "int16 " : "float ") + toString(v) + " " + opName(o);
}
std::string fig6Label(Index n, int x, int y) {
  return "Fig6 " + sq(n) + " tile " + std::to_string(x) + "x" + std::to_string(y);
}
std::string e2eLabel(Index n, int c) { return "Table2 " + sq(n) + " " + kE2e[c].name; }
std::string phasesLabel(Index n, bool integer) {
  return "Table2 " + sq(n) + (integer ? " kokkos uint16 phases" : " kokkos float phases");
}
std::string cpuLabel(Index n, bool all) {
  return "Table2 " + sq(n) + (all ? " cpu all threads" : " cpu 4 threads");
}

// One measured case: `run` launches one run (enqueue, no fence on the device; the CPU reference
// runs synchronously), `check` inspects the last run's output ("" when fine, else the reason).
struct Case {
  std::function<void()> run;
  std::function<std::string()> check;
  int maxRepsCap = 0;
};

class Engine {
 public:
  Engine(BenchOptions const& o, nlohmann::json peers)
      : opt_(o), mode_(modeFor(o)), budget_(mode_), peers_(std::move(peers)), t0_(Clock::now()),
        cache_(common::cacheBytes()), cpuThreads_(common::maxOmpThreads()) {}

  BenchReport run();

 private:
  bool selected(std::string const& label) const {
    return opt_.only.empty() || label.find(opt_.only) != std::string::npos;
  }
  void progress(std::string const& s) {
    if (opt_.progress) {
      *opt_.progress << s << "\n";
      opt_.progress->flush();
    }
  }
  int maxSlots() const { return opt_.tiny ? 8 : 128; }
  int slots(double setBytes) {
    const int k = common::rotationSlots(setBytes, cache_, maxSlots());
    slotsUsedMax_ = std::max(slotsUsedMax_, k);
    return k;
  }
  Input& input(Index n) {
    auto it = inputs_.find(n);
    if (it == inputs_.end()) {
      it = inputs_.emplace(n, makeInput(n)).first;
      noise_[n] = {it->second->sigma, it->second->psnrNoisy};
    }
    return *it->second;
  }
  // Large inputs are rebuilt when needed again rather than kept (8192^2: ~0.7 GB on the host).
  void releaseLargeInputs() {
    for (auto it = inputs_.begin(); it != inputs_.end();)
      it = it->first > 2048 ? inputs_.erase(it) : std::next(it);
  }
  void setSectionCap(int section) {
    double cum = 0.0;
    for (int s = 0; s <= section; ++s) cum += kSectionShare[s];
    budget_.setPhaseLimit(true, cum * mode_.total * mode_.deviceShare);
  }
  TileInfo const& tilesAt(Index n);
  TileInfo withSources(Index n, MultiresTiles const& mt) const;

  void measure(Measurement& m, std::string const& label, bool device, std::string const& key, double units,
               std::function<Case()> const& build, std::function<double()> const& probeRate = {});

  void fig4();
  void fig5();
  void fig6();
  void table2Device();
  void table2Cpu();

  Case fig4Float(Fig4Row& row);
  Case fig4Int(Fig4Row& row);
  template <class FineT, class LayerT>
  Case fig5Operator(Fig5Row& row, PyrOp op);
  template <class T>
  Case fig5Phase(Fig5Row& row, PyrOp op);
  template <class T>
  Case e2eCase(Table2Row& row, int config, Index n);
  template <class T>
  void phaseCases(Table2Row& row, int pipeline);
  Case cpuCase(Index n, int threads, Table2Row* row = nullptr);
  double probeE2e(int config, Index target);
  double probeCpu(int threads, Index target);

  nlohmann::json toJson() const;
  std::string toMarkdown() const;

  BenchOptions opt_;
  Mode mode_;
  Budget budget_;
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
  std::map<Index, std::pair<double, double>> noise_;  // sigma_n and the noisy PSNR of every input made
  // CPU reference outputs at the smallest Table 2 size (computed once, on demand).
  Index refSize_ = 0;
  std::unique_ptr<HostImage> refFloat_;
  HostU16 refInt_;

  std::vector<Fig4Row> fig4_;
  std::vector<Fig5Row> fig5_;
  std::vector<Fig6Row> fig6_;
  pipeline::tune::CandidateSet fig6Set_;
  TileInfo fig6Chosen_;
  bool fig6Run_ = false;
  std::vector<Table2Row> table2_;
};

// The tiles gpu::multires uses at n x n (MultiresPlan::tiles() of a float FusedExpand plan) and
// where they come from: the user's or the shipped tuning database, or the documented default.
TileInfo const& Engine::tilesAt(Index n) {
  auto it = tiles_.find(n);
  if (it != tiles_.end()) return it->second;
  MultiresTiles mt;
  {
    MultiresParams p = baseParams(1.0, false);
    p.pyramid = PyramidVariant::FusedExpand;  // the variant that has a tile (whatever the default)
    gpu::MultiresPlan<Exec, float> plan(exec_, n, n, p);
    mt = plan.tiles();
  }
  return tiles_.emplace(n, withSources(n, mt)).first->second;
}

// Where a plan's tiles came from: the same lookup the plan made (core/Tuning.hpp), compared with
// what it resolved to.
TileInfo Engine::withSources(Index n, MultiresTiles const& mt) const {
  TileInfo t;
  t.bilateralX = mt.bilateralX;
  t.bilateralY = mt.bilateralY;
  t.pyramidX = mt.pyramidX;
  t.pyramidY = mt.pyramidY;
  auto source = [&](const char* kernel, int x, int y, int defX, int defY) {
    if (x <= 0 || y <= 0) return std::string("none (not a tiled kernel in this configuration)");
    std::string src;
    const tuning::Config c = tuning::lookup(kernel, tuning::sizeClass(n, n),
                                            tuning::Config{{"x", defX}, {"y", defY}}, &src);
    const auto cx = c.find("x"), cy = c.find("y");
    const bool same = cx != c.end() && cy != c.end() && cx->second == x && cy->second == y;
    if (!same) return std::string("default: the tuning entry was unusable");
    if (src == "default") return std::string("default: no tuning entry");
    return src + " tuning database, " + tuning::sizeClass(n, n);
  };
  t.bilateralSource = source(kBilateralKernel, t.bilateralX, t.bilateralY, md::kDefaultBilateralTile.x,
                             md::kDefaultBilateralTile.y);
  t.pyramidSource = source(kPyramidKernel, t.pyramidX, t.pyramidY, md::kDefaultPyramidTile.x,
                           md::kDefaultPyramidTile.y);
  return t;
}

void Engine::measure(Measurement& m, std::string const& label, bool device, std::string const& key, double units,
                     std::function<Case()> const& build, std::function<double()> const& probeRate) {
  auto phase = budget_.clock(device);
  try {
    double est = -1.0;
    auto it = rate_.find(key);
    if (it == rate_.end() && probeRate) {
      const double r = probeRate();
      if (r > 0.0) it = rate_.emplace(key, r).first;
    }
    if (it != rate_.end()) est = it->second * units;
    if (!budget_.plan(m, est, device)) {
      ++skipped_;
      progress("  " + label + ": skipped (" + m.note + ")");
      return;
    }
    Case c = build();
    budget_.timeAdaptive(
        m, device, c.run,
        [&] {
          if (device) exec_.fence();
        },
        c.maxRepsCap);
    const std::string why = c.check ? c.check() : std::string();
    if (!why.empty()) {
      m.status = "check failed";
      m.note = why;
      ++failed_;
    } else {
      ++measured_;
      if (m.timing.medianMs > 0.0 && units > 0.0) rate_[key] = m.timing.medianMs / units;
    }
    progress("  " + label + (device ? std::string(" [") + Exec::name() + "]" : std::string()) + ": " +
             fmtMs(m.timing.medianMs) + " ms (" + repsText(m) + ")" +
             (m.status == "check failed" ? "  CHECK FAILED: " + why : std::string()));
  } catch (std::exception const& e) {
    m.status = "error";
    m.note = e.what();
    ++failed_;
    progress("  " + label + ": ERROR " + e.what());
  }
}

// ---- Fig 4 ----------------------------------------------------------------------------------

template <class T>
Kokkos::View<T*, Mem> tableToDevice(std::vector<T> const& host, const char* label) {
  Kokkos::View<T*, Mem> d(std::string(label), host.size());
  Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(host.data(), host.size());
  Kokkos::deep_copy(d, h);
  return d;
}

Case Engine::fig4Float(Fig4Row& row) {
  const Index n = row.n;
  Input& in = input(n);
  row.tiles = tilesAt(n);
  struct State {
    std::vector<LayerView<Mem>> in, out;
    Kokkos::View<float*, Mem> closeness;
    MultiresParams p;
    md::LayerTile tile;
    int next = 0, last = 0, k = 1;
  };
  auto st = std::make_shared<State>();
  st->p = baseParams(in.sigma, false);
  st->p.bilateral = row.variant;
  st->tile = md::LayerTile{row.tiles.bilateralX, row.tiles.bilateralY};
  st->k = slots(2.0 * 4.0 * double(n) * double(n));
  Kokkos::View<const float**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
      in.noisy.data.data(), n, n);
  for (int s = 0; s < st->k; ++s) {
    st->in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::layer_in"), Kokkos::WithoutInitializing), n, n);
    st->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::layer_out"), Kokkos::WithoutInitializing), n, n);
    Kokkos::deep_copy(st->in.back(), h);
  }
  st->closeness = tableToDevice(multiresCloseness(kRadius, kSigmaSpatial), "kortex::bench::multires::closeness");
  Kokkos::fence();
  Case c;
  c.run = [this, st] {
    st->last = st->next++ % st->k;
    md::bilateralLayer(exec_, st->in[st->last], st->out[st->last], st->closeness, st->p, st->tile);
  };
  c.check = [st] {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->out[st->last]);
    return checkConvex(h, 0.0, double(kMaxValue));
  };
  return c;
}

Case Engine::fig4Int(Fig4Row& row) {
  const Index n = row.n;
  Input& in = input(n);
  row.tiles = tilesAt(n);
  struct State {
    std::vector<IntLayerView<Mem>> in, out;
    Kokkos::View<std::int32_t*, Mem> closenessQ, similarityQ;
    MultiresParams p;
    md::LayerTile tile;
    int next = 0, last = 0, k = 1;
  };
  auto st = std::make_shared<State>();
  st->p = baseParams(in.sigma, true);
  st->p.bilateral = row.variant;
  st->tile = md::LayerTile{row.tiles.bilateralX, row.tiles.bilateralY};
  st->k = slots(2.0 * 2.0 * double(n) * double(n));
  IntLayerView<Kokkos::HostSpace> h("kortex::bench::multires::int_layer", n, n);
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = static_cast<std::int16_t>(in.noisy16.data()[i]);
  for (int s = 0; s < st->k; ++s) {
    st->in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::int_layer_in"), Kokkos::WithoutInitializing), n, n);
    st->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::int_layer_out"), Kokkos::WithoutInitializing), n, n);
    Kokkos::deep_copy(st->in.back(), h);
  }
  st->closenessQ = tableToDevice(multiresClosenessQ(kRadius, kSigmaSpatial), "kortex::bench::multires::closenessQ");
  st->similarityQ = tableToDevice(multiresSimilarityQ(st->p.sigmaRange, 2 * kMaxValue),
                                  "kortex::bench::multires::similarityQ");
  Kokkos::fence();
  Case c;
  c.run = [this, st] {
    st->last = st->next++ % st->k;
    md::bilateralLayer(exec_, st->in[st->last], st->out[st->last], st->closenessQ, st->similarityQ, st->p,
                       st->tile);
  };
  c.check = [st] {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->out[st->last]);
    return checkConvex(h, 0.0, double(kMaxValue));
  };
  return c;
}

void Engine::fig4() {
  const Index n = fig4Size(opt_.tiny);
  for (auto v : kFig4Variants) {
    const std::string label = fig4Label(n, v);
    if (!selected(label)) continue;
    fig4_.push_back(Fig4Row{v, n, Measurement{}, TileInfo{}});
    Fig4Row& row = fig4_.back();
    row.m.impl = toString(v);
    row.m.threads = kx::concurrency(exec_);
    measure(row.m, label, true, std::string("layer-bf|") + toString(v),
            double(n) * double(n) * kWindowTaps,
            [&] { return row.integer() ? fig4Int(row) : fig4Float(row); });
  }
}

// ---- Fig 5 ----------------------------------------------------------------------------------

// The level-0 expand operator alone: decompose's l_0 = g_0 - expand(g_1) (inputs rotate) or
// reconstruct's g'_0 = l_0 + expand(g_1) (outputs rotate). FineT: the level-0 type (float or
// uint16); LayerT: the layers' (float or int16).
template <class FineT, class LayerT>
Case Engine::fig5Operator(Fig5Row& row, PyrOp op) {
  const Index n = row.n;
  Input& in = input(n);
  const TileInfo& ti = tilesAt(n);
  const auto sizes = levelSizes(n, n, 1);
  struct State {
    std::vector<DevLevel<FineT>> fine;     // g_0 (decompose: rotating inputs) or g'_0 (outputs)
    std::vector<DevLevel<LayerT>> lap;     // l_0 (decompose: rotating outputs)
    DevLevel<FineT> g0;
    DevLevel<LayerT> g1, l0;
    md::UnfusedBuffers<LayerT, Mem> tmp;
    md::PyramidConfig cfg;
    int next = 0, last = 0, k = 1;
  };
  auto st = std::make_shared<State>();
  st->cfg.variant = row.variant;
  if (row.variant == PyramidVariant::FusedExpand) {
    st->cfg.tile = md::PyramidTile{ti.pyramidX, ti.pyramidY};
    row.tile = ti.pyramid();
  }
  st->cfg.maxValue = row.integer ? kMaxValue : 0;
  if (row.variant == PyramidVariant::Unfused) st->tmp = md::allocateUnfusedBuffers<LayerT, Mem>(n, n);
  // g_0 on the device from the host image.
  st->g0 = DevLevel<FineT>(Kokkos::view_alloc(std::string("kortex::bench::multires::g0"), Kokkos::WithoutInitializing), n, n);
  {
    auto h = Kokkos::create_mirror_view(st->g0);
    for (std::size_t i = 0; i < h.size(); ++i) {
      if constexpr (std::is_same_v<FineT, float>)
        h.data()[i] = in.noisy.data.data()[i];
      else
        h.data()[i] = in.noisy16.data()[i];
    }
    Kokkos::deep_copy(st->g0, h);
  }
  st->g1 = DevLevel<LayerT>(Kokkos::view_alloc(std::string("kortex::bench::multires::g1"), Kokkos::WithoutInitializing),
                            sizes[1].ny, sizes[1].nx);
  md::reduceLevel<Exec, FineT, LayerT>(exec_, st->g0, st->g1, st->cfg);
  const double setBytes = 2.0 * sizeof(FineT) * double(n) * double(n);
  st->k = slots(setBytes);
  if (op == PyrOp::ExpandDecompose) {
    for (int s = 0; s < st->k; ++s) {
      st->fine.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::fine_in"), Kokkos::WithoutInitializing), n, n);
      st->lap.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::lap_out"), Kokkos::WithoutInitializing), n, n);
      Kokkos::deep_copy(exec_, st->fine.back(), st->g0);
    }
  } else {
    st->l0 = DevLevel<LayerT>(Kokkos::view_alloc(std::string("kortex::bench::multires::l0"), Kokkos::WithoutInitializing), n, n);
    md::laplacianLevel<Exec, FineT, LayerT>(exec_, st->g0, st->g1, st->l0, st->cfg, st->tmp);
    for (int s = 0; s < st->k; ++s)
      st->fine.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::fine_out"), Kokkos::WithoutInitializing), n, n);
  }
  exec_.fence();
  Case c;
  if (op == PyrOp::ExpandDecompose) {
    c.run = [this, st] {
      st->last = st->next++ % st->k;
      md::laplacianLevel<Exec, FineT, LayerT>(exec_, st->fine[st->last], st->g1, st->lap[st->last], st->cfg, st->tmp);
    };
    // The layer must be finite, and reconstructing level 0 from it must return g_0.
    c.check = [this, st, n] {
      DevLevel<FineT> back("kortex::bench::multires::check", n, n);
      md::reconstructLevel<Exec, LayerT, FineT>(exec_, st->lap[st->last], st->g1, back, st->cfg, st->tmp);
      exec_.fence();
      auto lap = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->lap[st->last]);
      for (std::size_t i = 0; i < lap.size(); ++i)
        if (!std::isfinite(static_cast<double>(lap.data()[i]))) return std::string("non-finite layer pixel");
      auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), back);
      auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->g0);
      if constexpr (std::is_same_v<FineT, float>) {
        double peak = 0.0, err = 0.0;
        for (std::size_t i = 0; i < a.size(); ++i) {
          peak = std::max(peak, std::abs(double(b.data()[i])));
          err = std::max(err, std::abs(double(a.data()[i]) - double(b.data()[i])));
        }
        if (!(err <= kFloatRelTol * std::max(peak, 1.0)))
          return "l_0 + expand(g_1) differs from g_0 by " + validation::fmtSci(err);
        return std::string();
      } else {
        return checkEqual(a, b, "l_0 + expand(g_1) vs g_0");
      }
    };
  } else {
    c.run = [this, st] {
      st->last = st->next++ % st->k;
      md::reconstructLevel<Exec, LayerT, FineT>(exec_, st->l0, st->g1, st->fine[st->last], st->cfg, st->tmp);
    };
    c.check = [st] {
      auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->fine[st->last]);
      auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->g0);
      if constexpr (std::is_same_v<FineT, float>) {
        double peak = 0.0, err = 0.0;
        for (std::size_t i = 0; i < a.size(); ++i) {
          if (!std::isfinite(a.data()[i])) return std::string("non-finite output pixel");
          peak = std::max(peak, std::abs(double(b.data()[i])));
          err = std::max(err, std::abs(double(a.data()[i]) - double(b.data()[i])));
        }
        if (!(err <= kFloatRelTol * std::max(peak, 1.0)))
          return "l_0 + expand(g_1) differs from g_0 by " + validation::fmtSci(err);
        return std::string();
      } else {
        return checkEqual(a, b, "l_0 + expand(g_1) vs g_0");
      }
    };
  }
  return c;
}

// The whole decompose (inputs rotate) or reconstruct (outputs rotate) phase of a plan without
// filtering; the check reconstructs and compares with the input (the round trip is the identity).
template <class T>
Case Engine::fig5Phase(Fig5Row& row, PyrOp op) {
  const Index n = row.n;
  Input& in = input(n);
  constexpr bool kInt = std::is_same_v<T, std::uint16_t>;
  struct State {
    std::unique_ptr<gpu::MultiresPlan<Exec, T>> plan;
    std::vector<DevImage<T>> in, out;
    int next = 0, last = 0, k = 1;
  };
  auto st = std::make_shared<State>();
  MultiresParams p = baseParams(in.sigma, kInt);
  p.filter = false;
  p.pyramid = row.variant;
  st->plan = std::make_unique<gpu::MultiresPlan<Exec, T>>(exec_, n, n, p);
  const MultiresTiles mt = st->plan->tiles();
  if (row.variant == PyramidVariant::FusedExpand)
    row.tile = std::to_string(mt.pyramidX) + "x" + std::to_string(mt.pyramidY);
  DevImage<T> src(Kokkos::view_alloc(std::string("kortex::bench::multires::image"), Kokkos::WithoutInitializing), 1, n, n);
  if constexpr (kInt)
    Kokkos::deep_copy(src, in.noisy16);
  else
    Kokkos::deep_copy(src, in.noisy.data);
  st->k = slots(2.0 * sizeof(T) * double(n) * double(n));
  for (int s = 0; s < st->k; ++s) {
    if (op == PyrOp::Decompose) {
      st->in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::in"), Kokkos::WithoutInitializing), 1, n, n);
      Kokkos::deep_copy(st->in.back(), src);
    } else {
      st->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::out"), Kokkos::WithoutInitializing), 1, n, n);
    }
  }
  if (op == PyrOp::Decompose) {
    st->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::out"), Kokkos::WithoutInitializing), 1, n, n);
  } else {
    st->in.push_back(src);
    st->plan->decompose(src);
  }
  Kokkos::fence();
  Case c;
  if (op == PyrOp::Decompose) {
    c.run = [st] {
      st->last = st->next++ % st->k;
      st->plan->decompose(st->in[st->last]);
    };
  } else {
    c.run = [st] {
      st->last = st->next++ % st->k;
      st->plan->reconstruct(st->out[st->last]);
    };
  }
  c.check = [this, st, op, &in] {
    DevImage<T> out = op == PyrOp::Decompose ? st->out[0] : st->out[st->last];
    if (op == PyrOp::Decompose) st->plan->reconstruct(out);
    exec_.fence();
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
    if constexpr (kInt) {
      return checkEqual(h, in.noisy16, "decompose + reconstruct (no filter) vs the input");
    } else {
      HostImage a;
      a.geometry = in.noisy.geometry;
      a.data = h;
      return checkClose(a, in.noisy, kFloatRelTol, "decompose + reconstruct (no filter) vs the input");
    }
  };
  return c;
}

void Engine::fig5() {
  for (Index n : fig5Sizes(opt_.tiny)) {
    for (bool integer : {false, true})
      for (auto v : pyramidVariants(integer)) {
        Fig5Row row{n, integer, v, {}, {false, false, false, false}, "-"};
        bool any = false;
        for (int o = 0; o < 4; ++o) {
          row.selected[o] = selected(fig5Label(n, integer, v, kPyrOps[o]));
          any = any || row.selected[o];
          row.ops[o].impl = opName(kPyrOps[o]);
          row.ops[o].threads = kx::concurrency(exec_);
        }
        if (!any) continue;
        fig5_.push_back(row);
      }
  }
  // Ascending sizes: the 512^2 rates estimate the 4096^2 costs.
  for (auto& row : fig5_)
    for (int o = 0; o < 4; ++o) {
      if (!row.selected[o]) continue;
      const PyrOp op = kPyrOps[o];
      const std::string key = std::string("pyr|") + (row.integer ? "int|" : "float|") + toString(row.variant) + "|" +
                              opName(op);
      measure(row.ops[o], fig5Label(row.n, row.integer, row.variant, op), true, key, double(row.n) * double(row.n),
              [&] {
                if (op == PyrOp::ExpandDecompose || op == PyrOp::ExpandReconstruct)
                  return row.integer ? fig5Operator<std::uint16_t, std::int16_t>(row, op)
                                     : fig5Operator<float, float>(row, op);
                return row.integer ? fig5Phase<std::uint16_t>(row, op) : fig5Phase<float>(row, op);
              });
    }
  releaseLargeInputs();
}

// ---- Fig 6 ----------------------------------------------------------------------------------

void Engine::fig6() {
  const Index n = fig6Size(opt_.tiny);
  fig6Set_ = pipeline::tune::multiresBilateralCandidates(static_cast<int>(n));
  for (auto const& cfg : fig6Set_.candidates) {
    Fig6Row r;
    r.x = cfg.at("x");
    r.y = cfg.at("y");
    if (selected(fig6Label(n, r.x, r.y))) fig6_.push_back(r);
  }
  if (fig6_.empty()) return;
  fig6Run_ = true;
  fig6Chosen_ = tilesAt(n);
  // The tile gpu::multires uses is timed too when it lies outside the candidate space (e.g. a
  // database entry from another search).
  bool chosenInSpace = false;
  for (auto const& c : fig6Set_.candidates)
    chosenInSpace = chosenInSpace || (c.at("x") == fig6Chosen_.bilateralX && c.at("y") == fig6Chosen_.bilateralY);
  if (!chosenInSpace && selected(fig6Label(n, fig6Chosen_.bilateralX, fig6Chosen_.bilateralY))) {
    Fig6Row r;
    r.x = fig6Chosen_.bilateralX;
    r.y = fig6Chosen_.bilateralY;
    r.candidate = false;
    fig6_.push_back(r);
  }
  // Shared by every tile: rotating layers, the table, and the default tile's output.
  struct State {
    std::vector<LayerView<Mem>> in, out;
    Kokkos::View<float*, Mem> closeness;
    MultiresParams p;
    HostImage baseline;
    int next = 0, last = 0, k = 1;
  };
  std::shared_ptr<State> st;
  auto state = [&]() -> std::shared_ptr<State> {
    if (st) return st;
    Input& in = input(n);
    auto s = std::make_shared<State>();
    s->p = baseParams(in.sigma, false);  // the float pipeline's layer filter (ClosenessLut)
    s->k = slots(2.0 * 4.0 * double(n) * double(n));
    Kokkos::View<const float**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
        in.noisy.data.data(), n, n);
    for (int i = 0; i < s->k; ++i) {
      s->in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::layer_in"), Kokkos::WithoutInitializing), n, n);
      s->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::layer_out"), Kokkos::WithoutInitializing), n, n);
      Kokkos::deep_copy(s->in.back(), h);
    }
    s->closeness = tableToDevice(multiresCloseness(kRadius, kSigmaSpatial), "kortex::bench::multires::closeness");
    md::bilateralLayer(exec_, s->in[0], s->out[0], s->closeness, s->p, md::kDefaultBilateralTile);
    exec_.fence();
    s->baseline = HostImage("kortex::bench::multires::baseline", Geometry::make2D(n, n));
    auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s->out[0]);
    std::copy(b.data(), b.data() + b.size(), s->baseline.data.data());
    st = s;
    return st;
  };
  // Fig 6 times many candidates: in quick and tiny modes each gets the minimum repetitions.
  const int cap = mode_.name == "full" ? 0 : mode_.minReps;
  for (auto& r : fig6_) {
    r.m.impl = r.tile();
    r.m.threads = kx::concurrency(exec_);
    const std::string label = fig6Label(n, r.x, r.y) + (r.candidate ? "" : " (chosen)");
    measure(r.m, label, true, std::string("layer-bf|") + toString(MultiresBilateralVariant::ClosenessLut),
            double(n) * double(n) * kWindowTaps, [&] {
              auto s = state();
              const md::LayerTile tile{r.x, r.y};
              Case c;
              c.maxRepsCap = cap;
              c.run = [this, s, tile] {
                s->last = s->next++ % s->k;
                md::bilateralLayer(exec_, s->in[s->last], s->out[s->last], s->closeness, s->p, tile);
              };
              c.check = [s] {
                HostImage a("kortex::bench::multires::tile_out", s->baseline.geometry);
                auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s->out[s->last]);
                std::copy(h.data(), h.data() + h.size(), a.data.data());
                return checkClose(a, s->baseline, kFloatRelTol, "output vs the default tile's");
              };
              return c;
            });
  }
}

// ---- Table 2 --------------------------------------------------------------------------------

// End to end through a plan built once: run(in, out) with inputs and outputs rotating.
template <class T>
Case Engine::e2eCase(Table2Row& row, int config, Index n) {
  constexpr bool kInt = std::is_same_v<T, std::uint16_t>;
  Input& in = input(n);
  row.inputMade = true;
  row.psnrNoisy = in.psnrNoisy;
  row.sigma = in.sigma;
  struct State {
    std::unique_ptr<gpu::MultiresPlan<Exec, T>> plan;
    std::vector<DevImage<T>> in, out;
    int next = 0, last = 0, k = 1;
  };
  auto st = std::make_shared<State>();
  MultiresParams p = baseParams(in.sigma, kInt);
  p.concurrentLevels = kE2e[config].concurrent;
  st->plan = std::make_unique<gpu::MultiresPlan<Exec, T>>(exec_, n, n, p);
  row.tiles[config] = withSources(n, st->plan->tiles());
  st->k = slots(2.0 * sizeof(T) * double(n) * double(n));
  for (int s = 0; s < st->k; ++s) {
    st->in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::in"), Kokkos::WithoutInitializing), 1, n, n);
    st->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::out"), Kokkos::WithoutInitializing), 1, n, n);
    if constexpr (kInt)
      Kokkos::deep_copy(st->in.back(), in.noisy16);
    else
      Kokkos::deep_copy(st->in.back(), in.noisy.data);
  }
  Kokkos::fence();
  const bool compareToReference = n == table2Sizes(opt_.tiny).front();
  Case c;
  c.run = [st] {
    st->last = st->next++ % st->k;
    st->plan->run(st->in[st->last], st->out[st->last]);
  };
  c.check = [this, st, &in, &row, config, n, compareToReference] {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->out[st->last]);
    HostImage a;
    if constexpr (kInt) {
      a = toFloat(h);
    } else {
      a.geometry = in.noisy.geometry;
      a.data = h;
    }
    std::string why = checkFinite(a, in, &row.psnr[config]);
    if (!why.empty()) return why;
    if (!compareToReference) {
      // Larger sizes: the default float configuration is compared with the CPU reference's
      // output once the CPU pass has timed it (table2Cpu).
      if (config == 0) row.kokkosFloatOut = std::make_shared<HostImage>(copyOf(a));
      return why;
    }
    // Once, at the smallest size: the CPU reference (same parameters).
    MultiresParams rp = st->plan->params();
    if (refSize_ != n) {
      refFloat_.reset();
      refInt_ = HostU16();
      refSize_ = n;
    }
    if constexpr (kInt) {
      if (refInt_.data() == nullptr) {
        refInt_ = HostU16("kortex::bench::multires::reference16", 1, n, n);
        ref::multires(in.noisy16, refInt_, rp);
      }
      why = checkEqual(h, refInt_, "Kokkos vs the CPU reference (integer pipeline, exact)");
      row.referenceCheck[config] = why.empty() ? "passed: identical to the CPU reference at " + sq(n) : why;
    } else {
      if (!refFloat_) refFloat_ = std::make_unique<HostImage>(ref::multires(in.noisy, rp));
      const auto e = validation::compare(a, *refFloat_);
      why = e.maxRel <= kFloatRelTol ? std::string()
                                     : "Kokkos vs the CPU reference: max relative error " +
                                           validation::fmtSci(e.maxRel) + " > " + validation::fmtSci(kFloatRelTol);
      row.referenceCheck[config] = why.empty() ? "passed: max relative error " + validation::fmtSci(e.maxRel) +
                                                     " vs the CPU reference at " + sq(n)
                                               : why;
    }
    return why;
  };
  return c;
}

// decompose / filterLayers / reconstruct timed one by one on one plan (default concurrency).
template <class T>
void Engine::phaseCases(Table2Row& row, int pipeline) {
  constexpr bool kInt = std::is_same_v<T, std::uint16_t>;
  const Index n = row.n;
  struct State {
    std::unique_ptr<gpu::MultiresPlan<Exec, T>> plan;
    std::vector<DevImage<T>> in, out;
    int next = 0, last = 0, k = 1;
  };
  std::shared_ptr<State> st;
  auto state = [&]() -> std::shared_ptr<State> {
    if (st) return st;
    Input& in = input(n);
    row.inputMade = true;
    row.psnrNoisy = in.psnrNoisy;
    row.sigma = in.sigma;
    auto s = std::make_shared<State>();
    s->plan = std::make_unique<gpu::MultiresPlan<Exec, T>>(exec_, n, n, baseParams(in.sigma, kInt));
    s->k = slots(2.0 * sizeof(T) * double(n) * double(n));
    for (int i = 0; i < s->k; ++i) {
      s->in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::in"), Kokkos::WithoutInitializing), 1, n, n);
      s->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::out"), Kokkos::WithoutInitializing), 1, n, n);
      if constexpr (kInt)
        Kokkos::deep_copy(s->in.back(), in.noisy16);
      else
        Kokkos::deep_copy(s->in.back(), in.noisy.data);
    }
    s->plan->decompose(s->in[0]);  // filterLayers and reconstruct need a decomposition
    s->plan->filterLayers();
    Kokkos::fence();
    st = s;
    return st;
  };
  auto check = [this, n](std::shared_ptr<State> const& s) {
    // Complete a frame from the current state and check it as an end-to-end output.
    Input& in = input(n);
    s->plan->decompose(s->in[s->last]);
    s->plan->filterLayers();
    s->plan->reconstruct(s->out[s->last]);
    exec_.fence();
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s->out[s->last]);
    HostImage a;
    if constexpr (kInt) {
      a = toFloat(h);
    } else {
      a.geometry = in.noisy.geometry;
      a.data = h;
    }
    return checkFinite(a, in, nullptr);
  };
  const std::string pipe = kInt ? "uint16" : "float";
  for (int ph = 0; ph < 3; ++ph) {
    Measurement& m = row.phases[pipeline][ph];
    m.impl = phaseName(ph);
    m.threads = kx::concurrency(exec_);
    measure(m, phasesLabel(n, kInt) + " " + phaseName(ph), true, "phase|" + pipe + "|" + phaseName(ph),
            double(n) * double(n), [&, ph] {
              auto s = state();
              Case c;
              if (ph == 0)
                c.run = [s] {
                  s->last = s->next++ % s->k;
                  s->plan->decompose(s->in[s->last]);
                };
              else if (ph == 1)
                c.run = [s] { s->plan->filterLayers(); };
              else
                c.run = [s] {
                  s->last = s->next++ % s->k;
                  s->plan->reconstruct(s->out[s->last]);
                };
              c.check = [s, check] { return check(s); };
              return c;
            });
  }
}

// Rate probes (ms per pixel) when no smaller size of the same configuration has run (e.g. with
// --only): one warm run and one timed run at a smaller size (256^2 / 128^2 at most).
double Engine::probeE2e(int config, Index target) {
  const Index n = std::max<Index>(32, std::min<Index>(256, target / 2));
  Table2Row scratch;
  scratch.n = n;
  Case c = kE2e[config].integer ? e2eCase<std::uint16_t>(scratch, config, n) : e2eCase<float>(scratch, config, n);
  c.run();
  exec_.fence();
  const auto t = Clock::now();
  c.run();
  exec_.fence();
  return secondsSince(t) * 1e3 / (double(n) * double(n));
}

double Engine::probeCpu(int threads, Index target) {
  const Index n = std::max<Index>(32, std::min<Index>(128, target / 2));
  Case c = cpuCase(n, threads);
  c.run();
  const auto t = Clock::now();
  c.run();
  return secondsSince(t) * 1e3 / (double(n) * double(n));
}

void Engine::table2Device() {
  const auto sizes = table2Sizes(opt_.tiny);
  for (Index n : sizes) {
    Table2Row row;
    row.n = n;
    for (int c = 0; c < kNumE2e; ++c) {
      row.e2eSelected[c] = selected(e2eLabel(n, c));
      row.e2e[c].impl = kE2e[c].name;
    }
    for (int p = 0; p < 2; ++p) {
      row.phasesSelected[p] = false;
      for (int ph = 0; ph < 3; ++ph)
        row.phasesSelected[p] = row.phasesSelected[p] || selected(phasesLabel(n, p == 1) + " " + phaseName(ph));
    }
    row.cpuSelected[0] = selected(cpuLabel(n, false));
    row.cpuSelected[1] = selected(cpuLabel(n, true));
    row.cpu4.impl = "cpu-4";
    row.cpuAll.impl = "cpu-all";
    table2_.push_back(std::move(row));
  }
  for (auto& row : table2_) {
    const Index n = row.n;
    for (int c = 0; c < kNumE2e; ++c) {
      if (!row.e2eSelected[c]) continue;
      Measurement& m = row.e2e[c];
      m.threads = kx::concurrency(exec_);
      if (kE2e[c].concurrent && !kx::hasConcurrentInstances<Exec>) {
        m.status = "not applicable";
        m.note = std::string("the levels run in order on `") + Exec::name() +
                 "` either way (no concurrent execution-space instances here), so this is the column before";
        continue;
      }
      const bool smallest = n == table2Sizes(opt_.tiny).front();
      measure(m, e2eLabel(n, c), true, std::string("e2e|") + kE2e[c].name, double(n) * double(n),
              [&] { return kE2e[c].integer ? e2eCase<std::uint16_t>(row, c, n) : e2eCase<float>(row, c, n); },
              smallest ? std::function<double()>() : std::function<double()>([this, c, n] { return probeE2e(c, n); }));
    }
    if (row.phasesSelected[0]) phaseCases<float>(row, 0);
    if (row.phasesSelected[1]) phaseCases<std::uint16_t>(row, 1);
    releaseLargeInputs();
  }
}

// The CPU reference, float pipeline. With `row`, its output also checks the row's Kokkos float
// output (kept by e2eCase) once: a mismatch fails that Kokkos measurement.
Case Engine::cpuCase(Index n, int threads, Table2Row* row) {
  Input& in = input(n);
  struct State {
    std::vector<HostImage> out;
    MultiresParams p;
    int next = 0, last = 0, k = 1;
  };
  auto st = std::make_shared<State>();
  st->p = baseParams(in.sigma, false);
  st->k = common::rotationSlots(8.0 * double(n) * double(n), std::size_t(32) << 20, 4);
  for (int s = 0; s < st->k; ++s) st->out.emplace_back("kortex::bench::multires::cpu_out", in.noisy.geometry);
  Case c;
  c.run = [st, &in, threads] {
    OmpThreads t(threads);
    st->last = st->next++ % st->k;
    ref::multires(in.noisy.data, st->out[st->last].data, st->p);
  };
  c.check = [this, st, &in, row, n, threads] {
    std::string why = checkFinite(st->out[st->last], in, nullptr);
    if (!why.empty() || !row || !row->kokkosFloatOut || !row->referenceCheck[0].empty()) return why;
    const auto e = validation::compare(*row->kokkosFloatOut, st->out[st->last]);
    if (e.maxRel <= kFloatRelTol) {
      row->referenceCheck[0] = "passed: max relative error " + validation::fmtSci(e.maxRel) +
                               " vs the CPU reference (" + std::to_string(threads) + " thr) at " + sq(n);
    } else {
      row->referenceCheck[0] = "Kokkos vs the CPU reference: max relative error " + validation::fmtSci(e.maxRel) +
                               " > " + validation::fmtSci(kFloatRelTol);
      Measurement& k = row->e2e[0];
      if (k.measured()) {
        k.status = "check failed";
        k.note = row->referenceCheck[0];
        --measured_;
        ++failed_;
        progress("  " + e2eLabel(n, 0) + ": CHECK FAILED: " + k.note);
      }
    }
    row->kokkosFloatOut.reset();
    return why;
  };
  return c;
}

void Engine::table2Cpu() {
  for (bool all : {false, true}) {
    const int threads = all ? cpuThreads_ : paper::kTable2CpuThreads;
    for (auto& row : table2_) {
      if (!row.cpuSelected[all ? 1 : 0]) continue;
      Measurement& m = all ? row.cpuAll : row.cpu4;
      m.threads = threads;
      const Index n = row.n;
      const bool smallest = n == table2Sizes(opt_.tiny).front();
      measure(m, cpuLabel(n, all) + " (" + std::to_string(threads) + ")", false,
              "cpu|" + std::to_string(threads), double(n) * double(n),
              [&] {
                Case c = cpuCase(n, threads, &row);
                Input& in = input(n);
                row.inputMade = true;
                row.psnrNoisy = in.psnrNoisy;
                row.sigma = in.sigma;
                return c;
              },
              smallest ? std::function<double()>()
                       : std::function<double()>([this, threads, n] { return probeCpu(threads, n); }));
      if (n > 2048) releaseLargeInputs();
    }
  }
  for (auto& row : table2_) row.kokkosFloatOut.reset();
  releaseLargeInputs();
}

// ---- run --------------------------------------------------------------------------------------

BenchReport Engine::run() {
  progress(std::string("Kortex multiresolution benchmark (") + mode_.name + "), device space " + Exec::name() +
           ", CPU reference threads: " + std::to_string(paper::kTable2CpuThreads) + " and " +
           std::to_string(cpuThreads_));
  copyGBs_ = common::measureCopyBandwidth(exec_, opt_.tiny);
  progress("  device copy bandwidth (read+write): " + fmt(copyGBs_, 4) + " GB/s");

  setSectionCap(0);
  fig4();
  setSectionCap(1);
  fig5();
  setSectionCap(2);
  fig6();
  setSectionCap(3);
  table2Device();
  table2Cpu();
  refFloat_.reset();
  refInt_ = HostU16();

  BenchReport rep;
  rep.measured = measured_;
  rep.skipped = skipped_;
  rep.failed = failed_;
  rep.ok = failed_ == 0 && measured_ > 0;
  rep.wallSeconds = secondsSince(t0_);
  rep.json = toJson();
  rep.markdown = toMarkdown();
  return rep;
}

// ---- reporting --------------------------------------------------------------------------------

// Kokkos's best end-to-end ms at `n` (any configuration), or -1.
double bestE2eMs(std::vector<Table2Row> const& rows, Index n, std::string* config) {
  for (auto const& r : rows)
    if (r.n == n) {
      const int b = bestE2e(r);
      if (b < 0) return -1.0;
      if (config) *config = kE2e[b].name;
      return r.e2e[b].timing.medianMs;
    }
  return -1.0;
}

// Peer entries of the multires pipeline.
std::vector<nlohmann::json const*> peerEntries(nlohmann::json const& peers) {
  std::vector<nlohmann::json const*> out;
  if (peers.is_null() || !peers.contains("results") || !peers["results"].is_array()) return out;
  for (auto const& e : peers["results"])
    if (e.is_object() && e.value("algorithm", std::string()) == "multires") out.push_back(&e);
  return out;
}

nlohmann::json Engine::toJson() const {
  nlohmann::json j;
  j["kind"] = "kortex-bench-multires";
  j["mode"] = mode_.name;
  j["environment"] = io::environmentJson(true);
  j["device_execution_space"] = Exec::name();
  j["device_concurrency"] = kx::concurrency(exec_);
  j["concurrent_level_instances"] = kx::hasConcurrentInstances<Exec>;
  j["cpu_reference_threads"] = {paper::kTable2CpuThreads, cpuThreads_};
  j["device_copy_bandwidth_gb_per_s"] = copyGBs_;
  j["cache_bytes_for_rotation"] = cache_;
  j["max_rotation_slots"] = slotsUsedMax_;
  j["budgets_s"] = {{"device_case", mode_.devBudget}, {"device_single", mode_.devSingle},
                    {"cpu_case", mode_.cpuBudget},    {"cpu_single", mode_.cpuSingle},
                    {"total", mode_.total},           {"device_share", mode_.deviceShare},
                    {"device_section_shares", {{"fig4", kSectionShare[0]}, {"fig5", kSectionShare[1]},
                                               {"fig6", kSectionShare[2]}, {"table2", kSectionShare[3]}}}};
  j["input"] = "Shepp-Logan phantom scaled to 10 bits (0..1023) + Gaussian noise at SNR 25 (sigma_n = mean / 25), "
               "rounded and clamped to 0..1023; float and uint16 copies of the same values";
  j["params"] = {{"levels", kLevels},
                 {"radius", kRadius},
                 {"window", 2 * kRadius + 1},
                 {"sigma_spatial", kSigmaSpatial},
                 {"sigma_range_rule", "2 x sigma_n (grey levels)"},
                 {"bits", kBits},
                 {"float_pipeline", std::string(toString(MultiresParams{}.pyramid)) + " + ClosenessLut"},
                 {"integer_pipeline", std::string(toString(MultiresParams{}.pyramid)) + " + ClosenessSimilarityLut"}};
  nlohmann::json noise = nlohmann::json::array();
  for (auto const& kv : noise_)
    noise.push_back({{"size", kv.first}, {"sigma_n", kv.second.first},
                     {"sigma_range", kSigmaRangePerNoise * kv.second.first}, {"psnr_noisy_db", kv.second.second}});
  j["inputs"] = noise;
  j["paper"] = {{"device", paper::kDevice}, {"cpu", paper::kCpu}, {"source", paper::kCitation}};
  j["definitions"] = {
      {"gtaps_per_s", "pixels x 25 window taps / median time"},
      {"gflop_per_s", "gtaps_per_s x the variant's operations per tap (ops_per_tap; an exp counts as 1)"},
      {"pyramid_min_traffic",
       "every kernel reads its inputs once and writes its outputs once; level sizes s_k, b bytes per pixel (4 "
       "float, 2 int16/uint16): level-0 expand operator 2 s_0 + s_1; decompose sum_{k<5} (3 s_k + 2 s_{k+1}) "
       "(reduce s_k + s_{k+1}, laplacian 2 s_k + s_{k+1}); reconstruct sum_{k<5} (2 s_k + s_{k+1}); the same "
       "count for every variant (Unfused moves more through its temporaries)"},
      {"gb_per_s", "minimum traffic / median time"},
      {"fraction_of_copy_bandwidth", "gb_per_s / device_copy_bandwidth_gb_per_s"},
      {"fps", "1000 / median ms"}};

  // Fig 4
  nlohmann::json f4 = nlohmann::json::array();
  for (auto const& r : fig4_) {
    nlohmann::json e = common::timingJson(r.m);
    const TapOps ops = tapOps(r.variant);
    e["variant"] = toString(r.variant);
    e["layer"] = r.integer() ? "int16 (10-bit data)" : "float";
    e["size"] = r.n;
    e["ops_per_tap"] = ops.ops;
    e["op_unit"] = ops.unit;
    e["ops_counted"] = ops.counted;
    if (r.tiles.bilateralX > 0) e["tile"] = {{"x", r.tiles.bilateralX}, {"y", r.tiles.bilateralY}, {"source", r.tiles.bilateralSource}};
    if (r.m.measured()) {
      const double s = r.m.timing.medianMs * 1e-3;
      const double gtaps = double(r.n) * double(r.n) * kWindowTaps / s * 1e-9;
      e["gtaps_per_s"] = gtaps;
      e["gops_per_s"] = gtaps * ops.ops;
    }
    if (r.variant == MultiresBilateralVariant::FastMath)
      e["paper_gflops"] = {{"value", paper::kFig4NaiveIntrinsicsGflops}, {"what", "naive + intrinsics"}};
    if (r.variant == MultiresBilateralVariant::ClosenessLut)
      e["paper_gflops"] = {{"value", paper::kFig4LutIntrinsicsGflops},
                           {"what", "LUT + intrinsics (ours: LUT with the standard exp)"}};
    f4.push_back(e);
  }
  j["fig4"] = f4;

  // Fig 5
  nlohmann::json f5 = nlohmann::json::array();
  for (auto const& r : fig5_)
    for (int o = 0; o < 4; ++o) {
      if (!r.selected[o]) continue;
      nlohmann::json e = common::timingJson(r.ops[o]);
      e["size"] = r.n;
      e["pipeline"] = r.integer ? "int16" : "float";
      e["variant"] = toString(r.variant);
      e["operator"] = opName(kPyrOps[o]);
      e["tile"] = r.tile;
      e["min_traffic_bytes"] = r.traffic(kPyrOps[o]);
      if (r.ops[o].measured()) {
        const double gbs = r.traffic(kPyrOps[o]) / (r.ops[o].timing.medianMs * 1e-3) * 1e-9;
        e["gb_per_s"] = gbs;
        if (copyGBs_ > 0) e["fraction_of_copy_bandwidth"] = gbs / copyGBs_;
      }
      const double p = paperFig5(r.n, r.variant, kPyrOps[o]);
      if (p > 0) e["paper_ms"] = p;
      f5.push_back(e);
    }
  j["fig5"] = f5;

  // Fig 6
  if (fig6Run_) {
    nlohmann::json f6;
    const auto counts = pipeline::tune::multiresBilateralCounts(fig6Set_);
    f6["size"] = fig6Size(opt_.tiny);
    f6["kernel"] = std::string(kBilateralKernel) + " (float layer, ClosenessLut)";
    f6["rule"] = pipeline::tune::multiresBilateralPruningRule();
    f6["grid"] = counts.grid;
    f6["space_before_pruning"] = counts.inSpace;
    f6["candidates_after_pruning"] = counts.candidates;
    nlohmann::json pr = nlohmann::json::array();
    for (auto const& p : fig6Set_.pruned) pr.push_back({{"rule", p.first}, {"removed", p.second}});
    f6["pruned"] = pr;
    f6["chosen"] = {{"tile", fig6Chosen_.bilateral()}, {"source", fig6Chosen_.bilateralSource}};
    f6["default"] = std::to_string(md::kDefaultBilateralTile.x) + "x" + std::to_string(md::kDefaultBilateralTile.y);
    f6["paper"] = {{"configurations", paper::kFig6Configurations}, {"relevant", paper::kFig6Relevant},
                   {"best_c870", paper::kFig6BestC870}, {"best_geforce_8400", paper::kFig6Best8400},
                   {"best_vs_16x16_percent", paper::kFig6BestVs16x16Percent},
                   {"best_vs_worst_percent_at_least", paper::kFig6BestVsWorstPercent}};
    nlohmann::json table = nlohmann::json::array();
    Fig6Row const *best = nullptr, *worst = nullptr, *ref16 = nullptr, *chosen = nullptr, *def = nullptr;
    for (auto const& r : fig6_) {
      nlohmann::json e = common::timingJson(r.m);
      e["x"] = r.x;
      e["y"] = r.y;
      e["in_candidate_space"] = r.candidate;
      if (r.m.measured())
        e["gtaps_per_s"] = double(fig6Size(opt_.tiny)) * double(fig6Size(opt_.tiny)) * kWindowTaps /
                           (r.m.timing.medianMs * 1e-3) * 1e-9;
      table.push_back(e);
      if (!r.m.measured()) continue;
      if (r.candidate && (!best || r.m.timing.medianMs < best->m.timing.medianMs)) best = &r;
      if (r.candidate && (!worst || r.m.timing.medianMs > worst->m.timing.medianMs)) worst = &r;
      if (r.x == 16 && r.y == 16) ref16 = &r;
      if (r.x == fig6Chosen_.bilateralX && r.y == fig6Chosen_.bilateralY) chosen = &r;
      if (r.x == md::kDefaultBilateralTile.x && r.y == md::kDefaultBilateralTile.y) def = &r;
    }
    f6["table"] = table;
    auto pick = [](Fig6Row const* r) -> nlohmann::json {
      if (!r) return nullptr;
      return {{"tile", r->tile()}, {"median_ms", r->m.timing.medianMs}};
    };
    f6["best"] = pick(best);
    f6["worst"] = pick(worst);
    f6["tile_16x16"] = pick(ref16);
    f6["chosen_measured"] = pick(chosen);
    f6["default_measured"] = pick(def);
    f6["percent_definition"] = "(t_other - t_best) / t_other x 100: time the best tile saves";
    if (best && ref16)
      f6["best_vs_16x16_percent"] = 100.0 * (ref16->m.timing.medianMs - best->m.timing.medianMs) / ref16->m.timing.medianMs;
    if (best && worst)
      f6["best_vs_worst_percent"] = 100.0 * (worst->m.timing.medianMs - best->m.timing.medianMs) / worst->m.timing.medianMs;
    if (best && chosen)
      f6["chosen_vs_best_slower_percent"] =
          100.0 * (chosen->m.timing.medianMs - best->m.timing.medianMs) / best->m.timing.medianMs;
    j["fig6"] = f6;
  }

  // Table 2
  nlohmann::json t2 = nlohmann::json::array();
  for (auto const& r : table2_) {
    nlohmann::json e;
    e["size"] = r.n;
    if (r.inputMade) {
      e["sigma_n"] = r.sigma;
      e["sigma_range"] = kSigmaRangePerNoise * r.sigma;
      e["psnr_noisy_db"] = r.psnrNoisy;
    }
    nlohmann::json k = nlohmann::json::object();
    for (int c = 0; c < kNumE2e; ++c) {
      if (!r.e2eSelected[c]) continue;
      nlohmann::json m = common::timingJson(r.e2e[c]);
      m["pipeline"] = std::string(kE2e[c].integer ? "uint16 (" : "float (") + toString(MultiresParams{}.pyramid) +
                      (kE2e[c].integer ? " + ClosenessSimilarityLut)" : " + ClosenessLut)");
      m["concurrent_levels"] = kE2e[c].concurrent;
      if (r.e2e[c].measured()) {
        m["fps"] = fps(r.e2e[c]);
        m["psnr_db"] = r.psnr[c];
      }
      if (!r.referenceCheck[c].empty()) m["reference_check"] = r.referenceCheck[c];
      if (r.tiles[c].bilateralX > 0)
        m["tiles"] = {{"bilateral", r.tiles[c].bilateral()}, {"bilateral_source", r.tiles[c].bilateralSource},
                      {"pyramid", r.tiles[c].pyramid()}, {"pyramid_source", r.tiles[c].pyramidSource}};
      k[kE2e[c].name] = m;
    }
    e["kokkos"] = k;
    nlohmann::json ph = nlohmann::json::object();
    for (int p = 0; p < 2; ++p) {
      if (!r.phasesSelected[p]) continue;
      nlohmann::json q = nlohmann::json::object();
      for (int s = 0; s < 3; ++s) q[phaseName(s)] = common::timingJson(r.phases[p][s]);
      ph[p == 0 ? "float" : "uint16"] = q;
    }
    e["phases"] = ph;
    auto cpuJson = [&](Measurement const& m) {
      nlohmann::json c = common::timingJson(m);
      if (m.measured()) c["fps"] = fps(m);
      return c;
    };
    if (r.cpuSelected[0]) e["cpu_4_threads"] = cpuJson(r.cpu4);
    if (r.cpuSelected[1]) e["cpu_all_threads"] = cpuJson(r.cpuAll);
    const int b = bestE2e(r);
    if (b >= 0) {
      e["best_kokkos"] = kE2e[b].name;
      e["best_kokkos_fps"] = fps(r.e2e[b]);
      if (r.cpu4.measured()) e["speedup_best_vs_cpu_4"] = r.cpu4.timing.medianMs / r.e2e[b].timing.medianMs;
      if (r.cpuAll.measured()) e["speedup_best_vs_cpu_all"] = r.cpuAll.timing.medianMs / r.e2e[b].timing.medianMs;
      if (r.e2e[0].measured() && r.cpu4.measured())
        e["speedup_float_vs_cpu_4"] = r.cpu4.timing.medianMs / r.e2e[0].timing.medianMs;
    }
    if (auto const* p = paper::findTable2(static_cast<int>(r.n)))
      e["paper"] = {{"cpu_fps", p->cpuFps}, {"gpu_fps", p->gpuFps}, {"speedup", p->speedup}};
    t2.push_back(e);
  }
  j["table2"] = t2;

  // Targets
  nlohmann::json tg = nlohmann::json::array();
  for (auto const& t : paper::kTargets) {
    nlohmann::json e{{"name", t.name}, {"size", t.size}, {"limit_ms", t.maxMs}, {"min_fps", 1e3 / t.maxMs}};
    std::string cfg;
    const double ms = bestE2eMs(table2_, t.size, &cfg);
    if (ms > 0) {
      e.update({{"best_ms", ms}, {"fps", 1e3 / ms}, {"configuration", cfg}, {"met", ms <= t.maxMs},
                {"factor_over_limit", ms / t.maxMs}});
    } else {
      e["status"] = "not measured in this run";
    }
    tg.push_back(e);
  }
  j["targets"] = tg;
  if (!peers_.is_null()) j["peers"] = peers_;
  return j;
}

std::string Engine::toMarkdown() const {
  std::ostringstream os;
  const std::string cpuN = "CPU " + std::to_string(cpuThreads_) + " thr";
  os << "# Kortex multiresolution benchmark (" << mode_.name << ")\n\n"
     << io::environmentMarkdown()
     << "- Kokkos runs on `" << Exec::name() << "` (concurrency " << kx::concurrency(exec_)
     << "); concurrent level filtering on separate execution-space instances: "
     << (kx::hasConcurrentInstances<Exec> ? "available" : "not available here (levels run in order)")
     << "; measured device copy bandwidth (read + write) " << fmt(copyGBs_, 4) << " GB/s.\n"
     << "- Input: Shepp-Logan phantom scaled to 10 bits (0..1023) + Gaussian noise at SNR 25 (sigma_n = mean / 25), "
        "rounded and clamped to 0..1023 (float and uint16 copies of the same values). Filter: 5 levels, 5x5 window, "
        "sigma_d = 2, sigma_r = 2 sigma_n; float pipeline "
     << toString(MultiresParams{}.pyramid) << " + ClosenessLut, 16-bit pipeline " << toString(MultiresParams{}.pyramid)
     << " + ClosenessSimilarityLut (10-bit); the pyramid variant is the library's default.\n"
     << "- Times in ms: median after warm-up, fenced, data resident on the device; inputs/outputs rotate over up "
        "to "
     << slotsUsedMax_ << " buffer sets (> 2x the " << (cache_ >> 20)
     << " MiB cache; a plan's own pyramid is reused across frames). CPU = reference_cpu (Eigen + OpenMP, float "
        "pipeline in double) at "
     << paper::kTable2CpuThreads << " threads (the paper's setup) and " << cpuThreads_ << " threads (all).\n"
     << "- Paper columns: " << paper::kCitation
     << " (not measured here). Time ratios are paper / ours and rate ratios ours / paper (> 1: ours faster).\n"
     << "- 'skipped': the cost estimated from this run's measured rates exceeded the " << mode_.name
     << " budget or the section's time share (details in the JSON); '(1 run)': measured once without warm-up; "
        "'n/a': not applicable on this backend.\n"
     << "- Checks: layer filters inside the input range; pyramid round trips return the input (float <= 1e-5 "
        "relative, integer exact); end to end: finite, every configuration against the CPU reference at the "
        "smallest Table 2 size (float <= 1e-5 relative, integer exact) and the default float configuration "
        "against the CPU reference's output wherever both were timed; Fig 6 tiles agree with the default tile. "
        "PSNR is reported, not checked.\n\n";

  // Fig 4
  if (!fig4_.empty()) {
    const Index n = fig4_.front().n;
    os << "## Fig 4: layer bilateral variants, one " << sqU(n) << " layer, 5x5, sigma_d = 2\n\n"
       << "| variant | layer | tile (source) | ms | Gtaps/s | ops/tap | G ops/s | paper GFLOPS (C870) | ours / paper |\n"
       << "|---|---|---|---:|---:|---:|---:|---:|---:|\n";
    for (auto const& r : fig4_) {
      const TapOps ops = tapOps(r.variant);
      os << "| " << toString(r.variant) << " | " << (r.integer() ? "int16 (10-bit)" : "float") << " | "
         << (r.tiles.bilateralX > 0 ? r.tiles.bilateral() + " (" + r.tiles.bilateralSource + ")" : std::string("-"))
         << " | " << cell(r.m) << " | ";
      double gops = -1.0;
      if (r.m.measured()) {
        const double gtaps = double(r.n) * double(r.n) * kWindowTaps / (r.m.timing.medianMs * 1e-3) * 1e-9;
        gops = gtaps * ops.ops;
        os << fmt(gtaps, 4) << " | " << fmt(ops.ops, 3) << " " << ops.unit << " | " << fmt(gops, 4) << " | ";
      } else {
        os << "- | " << fmt(ops.ops, 3) << " " << ops.unit << " | - | ";
      }
      double p = -1.0;
      std::string what;
      if (r.variant == MultiresBilateralVariant::FastMath) {
        p = paper::kFig4NaiveIntrinsicsGflops;
        what = " (naive + intrinsics)";
      } else if (r.variant == MultiresBilateralVariant::ClosenessLut) {
        p = paper::kFig4LutIntrinsicsGflops;
        what = " (LUT + intrinsics)";
      }
      os << (p > 0 ? fmt(p, 3) + what : std::string("-")) << " | "
         << (p > 0 && gops > 0 ? fmt(gops / p, 3) : std::string("-")) << " |\n";
    }
    os << "\nOperations per tap (an exp counts as 1; loads, table reads, per-row sums and the final division are "
          "not counted):\n";
    for (auto v : kFig4Variants) os << "- " << toString(v) << ": " << tapOps(v).ops << " " << tapOps(v).unit << "s: " << tapOps(v).counted << ".\n";
    os << "\n";
  }

  // Fig 5
  if (!fig5_.empty()) {
    os << "## Fig 5: pyramid kernels per variant\n\n"
       << "Operators: the level-0 expand of decompose (l_0 = g_0 - expand(g_1)) and of reconstruct (g'_0 = l'_0 + "
          "expand(g'_1)), and the whole decompose / reconstruct phases (5 levels, no filter). Each cell: ms · GB/s "
          "of the minimum traffic · % of the measured copy bandwidth ("
       << fmt(copyGBs_, 4)
       << " GB/s). Minimum traffic (every kernel reads its inputs and writes its outputs once; s_k pixels of level "
          "k; 4 B float, 2 B int16): expand operator 2 s_0 + s_1; decompose sum (3 s_k + 2 s_{k+1}); reconstruct "
          "sum (2 s_k + s_{k+1}); the same count for every variant. Paper (C870, 512²): expand 0.38 -> 0.19 -> "
          "0.09 ms (unfused -> fused -> fused + shared memory), decompose 4.36 -> 0.20 ms, reconstruct 2.29 -> "
          "0.10 ms.\n\n"
       << "| image | pipeline | variant | tile | expand l_0 | expand g'_0 | decompose | reconstruct | paper ms "
          "(expand / decompose / reconstruct) | paper / ours (expand l_0 / decompose / reconstruct) |\n"
       << "|---|---|---|---|---:|---:|---:|---:|---:|---:|\n";
    for (auto const& r : fig5_) {
      os << "| " << sqU(r.n) << " | " << (r.integer ? "int16" : "float") << " | " << toString(r.variant) << " | "
         << r.tile << " |";
      for (int o = 0; o < 4; ++o) {
        Measurement const& m = r.ops[o];
        if (!r.selected[o]) {
          os << " - |";
        } else if (m.measured()) {
          const double gbs = r.traffic(kPyrOps[o]) / (m.timing.medianMs * 1e-3) * 1e-9;
          os << " " << cell(m) << " · " << fmt(gbs, 3) << " · " << fmt(100.0 * gbs / copyGBs_, 3) << "% |";
        } else {
          os << " " << cell(m) << " |";
        }
      }
      auto pv = [&](PyrOp o) {
        const double p = paperFig5(r.n, r.variant, o);
        return p > 0 ? fmt(p, 3) : std::string("-");
      };
      os << " " << pv(PyrOp::ExpandDecompose) << " / " << pv(PyrOp::Decompose) << " / " << pv(PyrOp::Reconstruct)
         << " | " << common::ratio(paperFig5(r.n, r.variant, PyrOp::ExpandDecompose), r.ops[0]) << " / "
         << common::ratio(paperFig5(r.n, r.variant, PyrOp::Decompose), r.ops[2]) << " / "
         << common::ratio(paperFig5(r.n, r.variant, PyrOp::Reconstruct), r.ops[3]) << " |\n";
    }
    os << "\n";
  }

  // Fig 6
  if (fig6Run_) {
    const Index n = fig6Size(opt_.tiny);
    const auto counts = pipeline::tune::multiresBilateralCounts(fig6Set_);
    os << "## Fig 6: configuration space of the layer bilateral (" << sqU(n) << ", float, ClosenessLut)\n\n"
       << "Space: " << pipeline::tune::multiresBilateralPruningRule() << ". Counts: " << counts.grid << " shapes in the grid, "
       << counts.inSpace << " in the space (before pruning), " << counts.candidates << " candidates after pruning (";
    bool first = true;
    for (auto const& p : fig6Set_.pruned) {
      os << (first ? "" : "; ") << p.first << ": " << p.second;
      first = false;
    }
    os << "). Paper: " << paper::kFig6Configurations << " configurations, " << paper::kFig6Relevant
       << " relevant; best " << paper::kFig6BestC870 << " on the C870 (" << paper::kFig6Best8400
       << " on a GeForce 8400), " << paper::kFig6BestVs16x16Percent << "% faster than 16x16 and > "
       << paper::kFig6BestVsWorstPercent << "% faster than the worst coalesced one. Every tile's time: JSON "
       << "`fig6.table`.\n\n";
    Fig6Row const *best = nullptr, *worst = nullptr;
    int measuredTiles = 0;
    for (auto const& r : fig6_)
      if (r.candidate && r.m.measured()) {
        ++measuredTiles;
        if (!best || r.m.timing.medianMs < best->m.timing.medianMs) best = &r;
        if (!worst || r.m.timing.medianMs > worst->m.timing.medianMs) worst = &r;
      }
    auto find = [&](int x, int y) -> Fig6Row const* {
      for (auto const& r : fig6_)
        if (r.x == x && r.y == y) return &r;
      return nullptr;
    };
    os << "| role | tile | ms | Gtaps/s | time saved by the best (%) |\n|---|---|---:|---:|---:|\n";
    auto line = [&](std::string const& role, Fig6Row const* r) {
      os << "| " << role << " | " << (r ? r->tile() : std::string("-")) << " | " << (r ? cell(r->m) : std::string("-"))
         << " | ";
      if (r && r->m.measured()) {
        os << fmt(double(n) * double(n) * kWindowTaps / (r->m.timing.medianMs * 1e-3) * 1e-9, 4) << " | ";
        os << (best ? fmt(100.0 * (r->m.timing.medianMs - best->m.timing.medianMs) / r->m.timing.medianMs, 3)
                    : std::string("-"))
           << " |\n";
      } else {
        os << "- | - |\n";
      }
    };
    line("best of " + std::to_string(measuredTiles) + " measured", best);
    line("worst", worst);
    line("16x16 (paper's assumed optimum)", find(16, 16));
    line("default (no tuning entry)", find(md::kDefaultBilateralTile.x, md::kDefaultBilateralTile.y));
    line("chosen by gpu::multires (" + fig6Chosen_.bilateralSource + ")",
         find(fig6Chosen_.bilateralX, fig6Chosen_.bilateralY));
    // Compact grid: rows x, columns y.
    std::vector<int> xs, ys;
    for (auto const& r : fig6_)
      if (r.candidate) {
        if (std::find(xs.begin(), xs.end(), r.x) == xs.end()) xs.push_back(r.x);
        if (std::find(ys.begin(), ys.end(), r.y) == ys.end()) ys.push_back(r.y);
      }
    std::sort(xs.begin(), xs.end());
    std::sort(ys.begin(), ys.end());
    if (!xs.empty()) {
      os << "\nms by tile (rows x, columns y):\n\n| x \\ y |";
      for (int y : ys) os << " " << y << " |";
      os << "\n|---|";
      for (std::size_t i = 0; i < ys.size(); ++i) os << "---:|";
      os << "\n";
      for (int x : xs) {
        os << "| " << x << " |";
        for (int y : ys) {
          Fig6Row const* r = find(x, y);
          os << " " << (r && r->candidate ? cell(r->m) : std::string("")) << " |";
        }
        os << "\n";
      }
    }
    os << "\n";
  }

  // Table 2
  if (!table2_.empty()) {
    os << "## Table 2: frames per second (sigma_d = 2), end to end, image on the device\n\n"
       << "| image | CPU 4 thr | paper CPU (4 thr) | " << cpuN
       << " | Kokkos float | float, concurrent levels | Kokkos uint16 | uint16, concurrent levels | paper GPU (C870) | "
          "best / paper GPU | best vs CPU 4 thr | best vs "
       << cpuN << " | paper speedup |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (auto const& r : table2_) {
      auto const* p = paper::findTable2(static_cast<int>(r.n));
      const int b = bestE2e(r);
      os << "| " << sqU(r.n) << " | " << (r.cpuSelected[0] ? fpsCell(r.cpu4) : "-") << " | "
         << (p ? fmt(p->cpuFps, 4) : "-") << " | " << (r.cpuSelected[1] ? fpsCell(r.cpuAll) : "-") << " |";
      for (int c = 0; c < kNumE2e; ++c) os << " " << (r.e2eSelected[c] ? fpsCell(r.e2e[c]) : "-") << " |";
      os << " " << (p ? fmt(p->gpuFps, 5) : "-") << " | "
         << (p && b >= 0 ? fmt(fps(r.e2e[b]) / p->gpuFps, 4) + " (" + kE2e[b].name + ")" : std::string("-")) << " | "
         << (b >= 0 && r.cpu4.measured() ? fmt(r.cpu4.timing.medianMs / r.e2e[b].timing.medianMs, 4) + "x" : "-")
         << " | "
         << (b >= 0 && r.cpuAll.measured() ? fmt(r.cpuAll.timing.medianMs / r.e2e[b].timing.medianMs, 4) + "x"
                                           : "-")
         << " | " << (p ? fmt(p->speedup, 4) + "x" : "-") << " |\n";
    }
    os << "\nTime split (ms, one phase at a time, each fenced; levels filtered as in the default "
          "plan) and the tiles in use:\n\n"
       << "| image | pipeline | decompose | filter | reconstruct | sum | end to end | tiles: bilateral, pyramid "
          "(source) | check vs CPU reference |\n|---|---|---:|---:|---:|---:|---:|---|---|\n";
    for (auto const& r : table2_)
      for (int p = 0; p < 2; ++p) {
        const int cfg = p == 0 ? 0 : 2;
        if (!r.phasesSelected[p] && !r.e2eSelected[cfg]) continue;
        os << "| " << sqU(r.n) << " | " << (p == 0 ? "float" : "uint16") << " |";
        double sum = 0.0;
        bool all = r.phasesSelected[p];
        for (int s = 0; s < 3; ++s) {
          Measurement const& m = r.phases[p][s];
          os << " " << (r.phasesSelected[p] ? cell(m) : "-") << " |";
          if (m.measured())
            sum += m.timing.medianMs;
          else
            all = false;
        }
        os << " " << (all ? fmtMs(sum) : "-") << " | " << (r.e2eSelected[cfg] ? cell(r.e2e[cfg]) : "-") << " | ";
        TileInfo const& t = r.tiles[cfg];
        if (t.bilateralX > 0)
          os << t.bilateral() << " (" << t.bilateralSource << "), "
             << (t.pyramidX > 0 ? t.pyramid() + " (" + t.pyramidSource + ")"
                                : std::string(toString(MultiresParams{}.pyramid)) + ": untiled");
        else
          os << "-";
        os << " | " << (r.referenceCheck[cfg].empty() ? "-" : r.referenceCheck[cfg]) << " |\n";
      }
    os << "\nPSNR (dB) vs the clean phantom, noisy input -> Kokkos float output:";
    for (auto const& r : table2_)
      if (r.inputMade && r.e2e[0].measured())
        os << " " << sqU(r.n) << " " << fmt(r.psnrNoisy, 4) << " -> " << fmt(r.psnr[0], 4) << ";";
    os << " (sigma_n of the inputs:";
    for (auto const& r : table2_)
      if (r.inputMade) os << " " << sqU(r.n) << " " << fmt(r.sigma, 4) << ";";
    os << " sigma_r = 2 sigma_n).\n\n";
  }

  // Targets
  os << "## Targets (issue 3, for an H100/H200; best Kokkos end-to-end configuration)\n\n"
     << "| target | limit ms (FPS) | measured ms (FPS) | configuration | verdict |\n|---|---:|---:|---|---|\n";
  for (auto const& t : paper::kTargets) {
    std::string cfg;
    const double ms = bestE2eMs(table2_, t.size, &cfg);
    os << "| " << t.name << " | " << fmt(t.maxMs, 3) << " (" << fmt(1e3 / t.maxMs, 4) << ") | ";
    if (ms > 0) {
      const double f = ms / t.maxMs;
      os << fmtMs(ms) << " (" << fmt(1e3 / ms, 4) << ") | " << cfg << " | "
         << (f <= 1.0 ? "met" : "missed by " + fmt(f, 3) + "x") << " |\n";
    } else {
      os << "- | - | not measured in this run |\n";
    }
  }
  os << "\n";

  // Peers
  const auto entries = peerEntries(peers_);
  if (!peers_.is_null()) {
    auto str = [](nlohmann::json const& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    os << "## Peers (bench/peers/multires_opencv.py, same input and parameters)\n\n";
    if (peers_.contains("cpu")) os << "- CPU: " << str(peers_["cpu"]) << "\n";
    if (peers_.contains("versions")) os << "- Versions: " << peers_["versions"].dump() << "\n";
    if (peers_.contains("pipeline")) os << "- Pipeline: " << str(peers_["pipeline"]) << "\n";
    os << "- Peer times are medians measured by the peer script (wall clock); Kortex speedup = peer ms / Kortex "
          "best end-to-end ms (this run).\n\n";
    if (entries.empty()) {
      os << "The peers JSON holds no multires entries (algorithm \"multires\").\n\n";
    } else {
      os << "| peer | threads | image | peer ms | peer FPS | Kortex best ms | Kortex speedup |\n"
            "|---|---:|---|---:|---:|---:|---:|\n";
      for (auto const* e : entries) {
        const Index n = e->value("size", Index(0));
        const bool has = e->contains("median_ms") && (*e)["median_ms"].is_number();
        const double pms = has ? (*e)["median_ms"].get<double>() : -1.0;
        const double ms = bestE2eMs(table2_, n, nullptr);
        os << "| " << e->value("peer", std::string("?")) << " | "
           << (e->contains("threads") && (*e)["threads"].is_number() ? (*e)["threads"].dump() : std::string("-"))
           << " | " << sqU(n) << " | " << (has ? fmtMs(pms) : e->value("status", std::string("-"))) << " | "
           << (has ? fmt(1e3 / pms, 4) : std::string("-")) << " | " << (ms > 0 ? fmtMs(ms) : std::string("-")) << " | "
           << (has && ms > 0 ? fmt(pms / ms, 4) + "x" : std::string("-")) << " |\n";
      }
      os << "\n";
    }
  }
  os << "Measured " << measured_ << ", skipped " << skipped_ << ", failed " << failed_ << "; wall time "
     << fmt(secondsSince(t0_), 3) << " s.\n";
  return os.str();
}

}  // namespace

std::vector<std::string> multiresBenchLabels(bool tiny) {
  std::vector<std::string> l;
  for (auto v : kFig4Variants) l.push_back(fig4Label(fig4Size(tiny), v));
  for (Index n : fig5Sizes(tiny))
    for (bool integer : {false, true})
      for (auto v : pyramidVariants(integer))
        for (auto o : kPyrOps) l.push_back(fig5Label(n, integer, v, o));
  const Index n6 = fig6Size(tiny);
  for (auto const& c : pipeline::tune::multiresBilateralCandidates(static_cast<int>(n6)).candidates)
    l.push_back(fig6Label(n6, c.at("x"), c.at("y")));
  for (Index n : table2Sizes(tiny)) {
    for (int c = 0; c < kNumE2e; ++c) l.push_back(e2eLabel(n, c));
    for (bool integer : {false, true})
      for (int ph = 0; ph < 3; ++ph) l.push_back(phasesLabel(n, integer) + " " + phaseName(ph));
    l.push_back(cpuLabel(n, false));
    l.push_back(cpuLabel(n, true));
  }
  return l;
}

std::string defaultMultiresResultStem() {
  return "bench/results/multires_" + validation::sanitizeForFileName(buildInfo().device);
}

BenchReport runMultiresBench(BenchOptions const& opt) {
  nlohmann::json peers = common::checkOptions(opt, "multires");
  if (!opt.peersJsonPath.empty()) {
    if (!peers.is_object() || !peers.contains("results") || !peers["results"].is_array())
      throw IoError("peers JSON '" + opt.peersJsonPath +
                    "' has no \"results\" array (expected the output of bench/peers/multires_opencv.py)");
  }
  common::requireOnlyMatches(opt, multiresBenchLabels(opt.tiny), "multires",
                             "'Fig4 512^2 ClosenessLut', 'Fig5 4096^2 int16 Packed16 decompose', "
                             "'Fig6 1024^2 tile 64x1', 'Table2 2048^2 kokkos float'");
  Engine e(opt, std::move(peers));
  BenchReport rep = e.run();
  common::writeReport(rep, opt);
  return rep;
}

}  // namespace kortex::bench
