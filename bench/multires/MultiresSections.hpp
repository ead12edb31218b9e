// The sections of `kortex bench multires` (bench/BenchMultires.hpp says what each measures):
// their case labels (what --only matches), their result rows, the functions that measure them
// on a Context (bench/multires/MultiresBench.hpp) - bench/multires/Fig4.cpp, Fig5.cpp, Fig6.cpp,
// Table2.cpp - and the report built from the rows (bench/multires/Report.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "bench/PaperMultires.hpp"
#include "bench/multires/MultiresBench.hpp"
#include "core/Multires.hpp"
#include "gpu/multires/Multires.hpp"
#include "pipeline/MultiresTileSpace.hpp"

namespace kortex::bench::multires {

// ---- Fig 4: layer-bilateral variants --------------------------------------------------------
inline constexpr MultiresBilateralVariant kFig4Variants[] = {
    MultiresBilateralVariant::Naive, MultiresBilateralVariant::ClosenessLut, MultiresBilateralVariant::FastMath,
    MultiresBilateralVariant::Reuse, MultiresBilateralVariant::ClosenessSimilarityLut};
inline Index fig4Size(bool tiny) { return tiny ? 64 : 512; }
inline std::string fig4Label(Index n, MultiresBilateralVariant v) { return "Fig4 " + sq(n) + " " + toString(v); }

// Operations per window tap of each layer-bilateral variant (what the kernels in
// gpu/multires/detail/MultiresBilateralKernels.hpp execute per tap; an exp counts as one operation; loads and
// table reads are not counted, nor the 5 per-pixel row-sum additions and the final division).
struct TapOps {
  double ops;
  const char* unit;  // "flop" or "int op"
  const char* counted;
};
TapOps tapOps(MultiresBilateralVariant v);

struct Fig4Row {
  MultiresBilateralVariant variant;
  Index n;
  common::Measurement m;
  TileInfo tiles;
  bool integer() const { return variant == MultiresBilateralVariant::ClosenessSimilarityLut; }
};

// Each selected variant on one fig4Size() layer, with the tile gpu::multires uses.
std::vector<Fig4Row> runFig4(Context& ctx);

// ---- Fig 5: pyramid kernels per PyramidVariant ----------------------------------------------
enum class PyrOp { ExpandDecompose, ExpandReconstruct, Decompose, Reconstruct };
inline constexpr PyrOp kPyrOps[] = {PyrOp::ExpandDecompose, PyrOp::ExpandReconstruct, PyrOp::Decompose,
                                    PyrOp::Reconstruct};
const char* opName(PyrOp o);

inline std::vector<Index> fig5Sizes(bool tiny) {
  return tiny ? std::vector<Index>{64, 128} : std::vector<Index>{512, 4096};
}
inline std::vector<PyramidVariant> pyramidVariants(bool integer) {
  std::vector<PyramidVariant> v{PyramidVariant::Unfused, PyramidVariant::FusedDirect, PyramidVariant::FusedExpand,
                               PyramidVariant::FusedReduce};
  if (integer) v.push_back(PyramidVariant::Packed16);
  return v;
}
inline std::string fig5Label(Index n, bool integer, PyramidVariant v, PyrOp o) {
  return "Fig5 " + sq(n) + " " + (integer ? "int16 " : "float ") + toString(v) + " " + opName(o);
}

// Minimum traffic of the pyramid kernels (bytes): every kernel reads its inputs once and writes
// its outputs once. Level sizes s_k (pixels), b bytes per pixel:
//   level-0 expand operator (decompose l_0 or reconstruct g'_0): 2 s_0 + s_1;
//   decompose: sum_{k<L} reduce (s_k + s_{k+1}) + laplacian (2 s_k + s_{k+1});
//   reconstruct: sum_{k<L} (2 s_k + s_{k+1}).
double expandOpBytes(Index n, double b);
double decomposeBytes(Index n, double b);
double reconstructBytes(Index n, double b);

struct Fig5Row {
  Index n;
  bool integer;
  PyramidVariant variant;
  common::Measurement ops[4];  // kPyrOps order
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
double paperFig5(Index n, PyramidVariant v, PyrOp o);

// Every selected operator of every pipeline and variant at the fig5Sizes(), ascending sizes.
std::vector<Fig5Row> runFig5(Context& ctx);

// ---- Fig 6: the layer bilateral's tile space ------------------------------------------------
inline Index fig6Size(bool tiny) { return tiny ? 128 : paper_multires::kFig6Size; }
inline std::string fig6Label(Index n, int x, int y) {
  return "Fig6 " + sq(n) + " tile " + std::to_string(x) + "x" + std::to_string(y);
}

struct Fig6Row {
  int x = 0, y = 0;
  bool candidate = true;  // false: the chosen tile, outside the candidate space
  common::Measurement m;
  std::string tile() const { return std::to_string(x) + "x" + std::to_string(y); }
};

struct Fig6Result {
  bool run = false;  // some tile was selected
  pipeline::tune::CandidateSet set;
  TileInfo chosen;  // the tiles gpu::multires uses at fig6Size()
  std::vector<Fig6Row> rows;
};

// Every selected candidate tile, and the chosen tile when it lies outside the candidates.
Fig6Result runFig6(Context& ctx);

// ---- Table 2: frames per second, end to end -------------------------------------------------
struct E2eConfig {
  const char* name;
  bool integer;
  bool concurrent;
  bool closenessLut = false;  // float: the ClosenessLut layer bilateral (the default before Reuse)
  bool fusedReduce = false;   // float: the FusedReduce pyramid (reduce and expand-subtract in one kernel)
  bool separateFilter = false;  // float: the layers filtered before reconstruct (FilterSchedule::Separate)
};
// Index 0 / 2: the library's default plan (levels filtered in order, MultiresParams); 1 / 3: the
// layers filtered concurrently on separate execution-space instances; 4: the default float plan
// with the ClosenessLut layer bilateral (the float default until Reuse ran right on Cuda); 5: the
// default float plan with the FusedReduce pyramid; 6: the default float plan with the layers filtered
// before reconstruct (the default filters them in reconstruct: gpu/multires/Multires.hpp, FilterSchedule).
inline constexpr E2eConfig kE2e[] = {{"kokkos float", false, false},
                                     {"kokkos float concurrent levels", false, true},
                                     {"kokkos uint16", true, false},
                                     {"kokkos uint16 concurrent levels", true, true},
                                     {"kokkos float closeness-lut", false, false, true},
                                     {"kokkos float fused-reduce", false, false, false, true},
                                     {"kokkos float separate filter", false, false, false, false, true}};
inline constexpr int kNumE2e = 7;
inline gpu::FilterSchedule e2eSchedule(int c) {
  return kE2e[c].separateFilter ? gpu::FilterSchedule::Separate : gpu::FilterSchedule::Auto;
}
// The plan parameters of configuration c over the pipeline's base parameters.
inline MultiresParams e2eParams(MultiresParams p, int c) {
  p.concurrentLevels = kE2e[c].concurrent;
  if (kE2e[c].closenessLut) p.bilateral = MultiresBilateralVariant::ClosenessLut;
  if (kE2e[c].fusedReduce) p.pyramid = PyramidVariant::FusedReduce;
  return p;
}
inline const char* phaseName(int p) { return p == 0 ? "decompose" : (p == 1 ? "filter" : "reconstruct"); }

inline std::vector<Index> table2Sizes(bool tiny) {
  return tiny ? std::vector<Index>{64, 128} : std::vector<Index>{512, 1024, 2048, 4096, 8192};
}
inline std::string e2eLabel(Index n, int c) { return "Table2 " + sq(n) + " " + kE2e[c].name; }
inline std::string phasesLabel(Index n, bool integer) {
  return "Table2 " + sq(n) + (integer ? " kokkos uint16 phases" : " kokkos float phases");
}
inline std::string cpuLabel(Index n, bool all) {
  return "Table2 " + sq(n) + (all ? " cpu all threads" : " cpu 4 threads");
}

struct Table2Row {
  Index n = 0;
  common::Measurement e2e[kNumE2e];
  bool e2eSelected[kNumE2e] = {};
  std::string referenceCheck[kNumE2e];  // "" none; "passed: ..." or the failure
  double psnr[kNumE2e] = {};
  TileInfo tiles[kNumE2e];
  common::Measurement phases[2][3];  // [float, uint16][decompose, filter, reconstruct]
  bool phasesSelected[2] = {false, false};
  common::Measurement cpu4, cpuAll;
  bool cpuSelected[2] = {false, false};
  double psnrNoisy = 0.0, sigma = 0.0;
  bool inputMade = false;
  std::shared_ptr<HostImage> kokkosFloatOut;  // "kokkos float" output awaiting the CPU comparison
};

// Every selected case at the table2Sizes(): the Kokkos end-to-end configurations and phase
// splits first (device phase), then the CPU reference at 4 threads and at all threads.
std::vector<Table2Row> runTable2(Context& ctx);

// ---- report ---------------------------------------------------------------------------------
struct Results {
  std::vector<Fig4Row> fig4;
  std::vector<Fig5Row> fig5;
  Fig6Result fig6;
  std::vector<Table2Row> table2;
};

nlohmann::json toJson(Context const& ctx, Results const& r);
std::string toMarkdown(Context const& ctx, Results const& r);

}  // namespace kortex::bench::multires
