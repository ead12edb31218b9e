// Internal pieces of `kortex bench atlas` (bench/BenchAtlas.hpp says what is measured and how): the
// cohorts (Cohort.cpp: base images, subjects, FNV-1a, the iteration clock's statistics), the Context
// of one run (options, report, JSON, the one Markdown stream every section writes to in order, the
// grid, the cohort sizes, the large cohort) and the sections, one translation unit each:
//   Iteration.cpp  one atlas iteration per solver, then Streaming.cpp (resident vs streamed
//                  subjects) and the PyTorch peer (section "Iteration");
//   Whole.cpp      whole multi-scale atlases and Fig 13 (section "Whole");
//   Cpu.cpp        the CPU reference's iteration (section "CPU");
//   Scaling.cpp    the whole atlas over the ranks of a process group, with the cost model
//                  (section "Scaling");
//   Sums.cpp       one iteration's sums over the ranks per reduction path, the host-staged
//                  path's chunk sweep (section "Sums over ranks").
// bench/BenchAtlas.cpp checks the options, builds the cohorts, writes the header and runs the
// sections in order.
#pragma once

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "bench/BenchOptions.hpp"
#include "core/Atlas.hpp"
#include "core/Image.hpp"
#include "core/Timing.hpp"

namespace kortex::bench::atlas {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;

// The targets on one H100 / H200.
// The Iteration section's solvers, each a case of its own ("Iteration fft", ...).
inline constexpr GreedySolver kIterationSolvers[] = {GreedySolver::Fft, GreedySolver::Sor, GreedySolver::Cg,
                                                     GreedySolver::HybridSor, GreedySolver::HybridCg};
inline std::string iterationLabel(GreedySolver s) { return std::string("Iteration ") + toString(s); }
inline constexpr double kTargetIterationS = 0.12;  // one iteration over 315 subjects at 144x192x160
inline constexpr double kTargetTorchRatio = 2.5;    // at least 2.5x faster than the batched PyTorch step
inline constexpr double kTargetWholeS = 8.0;       // the whole 315-subject multi-scale atlas (25 + 50)
inline constexpr double kTargetSumsS = 0.025;      // one iteration's host-staged sums over ranks ...
inline constexpr int kTargetSumsRanks = 4;         // ... at 4 ranks
inline constexpr double kPaperMultiscaleGain = 3.5;  // Fig 13: single scale 200 vs 25 + 50
// Memory traffic per voxel and subject of one atlas iteration (float32, the passes of
// gpu/atlas/Atlas.cpp at their minimum): template sum (read W: 4; the int64 sum's read + write
// shared by 8 subjects: 2), force (W, T -> F: 20), spectral solve (R2C + C2R of 3 components, real
// field and half spectrum read and written: 48), max |v| (12), composition (u gathered, v read, u'
// written: 36), fold check (12), mean displacement sum (u: 12; its sum: 6), centring composition
// (36), then the centred candidate's warp + snap + mismatch + fold check in one pass (u' read, I
// gathered, W written, T read: 24). Total 208 (236 before the snap, the mismatch and the centring's
// fold check were fused into the warp).
inline constexpr double kIterationBytesPerVoxel = 208.0;

// ---- cohorts (Cohort.cpp) -------------------------------------------------------------------
// img resampled (trilinear, centre to centre, clamp) onto g.
HostImage resampleTo(HostImage const& img, Geometry const& g);
// The base images: the IXI volumes (normalised, resampled to g) or one structured phantom.
std::vector<HostImage> baseImages(BenchOptions const& opt, Geometry const& g, std::string& source);
// Subject i: base[i mod B] under the seeded smooth diffeomorphic displacement of seed 1000 + i.
// The subjects `indices` (any order), built in parallel (each subject's result depends on i only).
std::vector<HostImage> subjects(std::vector<HostImage> const& base, std::vector<int> const& indices);
std::vector<HostImage> cohort(std::vector<HostImage> const& base, int n);
// FNV-1a 64 of an image's bytes: equal templates from runs over different rank counts.
std::string fnv1a(HostImage const& img);
// Median seconds of one iteration at each scale (differences of the iteration clock).
std::vector<double> iterationSecondsPerScale(AtlasResult const& r, std::size_t scales);
bool sameBits(HostImage const& a, HostImage const& b);
// Per-iteration seconds: differences of the iteration clock, after the first iteration.
TimingStats iterationStats(AtlasResult const& r);

// ---- one run ----------------------------------------------------------------------------------
struct Context : common::SectionRun {
  Context(BenchOptions const& o, BenchReport& r, nlohmann::json p, gpu::Communicator* c);

  gpu::Communicator* comm = nullptr;   // the process group when it has more than one rank
  Exec exec;
  bool onDevice = false;
  double copyGBs = 0.0;
  Geometry g;
  int large = 0, small = 0;  // the cohorts' sizes
  double voxels = 0.0;
  std::vector<HostImage> base;  // baseImages()
  std::vector<HostImage> big;   // the large cohort (empty when only "Scaling" runs)
  nlohmann::json j;

  // One atlas of imgs on the device, fenced, timed; the template comes back, the fields stay on
  // the device; a folded field fails the report.
  std::pair<AtlasResult, double> run(std::vector<HostImage> const& imgs, AtlasParams const& p);
  std::string templateHash;  // of the last run's template: FNV-1a 64 of its float bits, hex (to compare builds)
};

// The sections, in report order.
void runIteration(Context& ctx);
void runStreaming(Context& ctx);
void runWhole(Context& ctx);
void runCpu(Context& ctx);
void runScaling(Context& ctx);
void runSums(Context& ctx);

}  // namespace kortex::bench::atlas
