// Internal pieces of `kortex bench greedy` (bench/BenchGreedy.hpp says what is measured and how):
// the Context of one run (options, report, JSON, the one Markdown stream every section writes to
// in order, the device, repetitions, the target grid) and the sections, one translation unit each:
//   Matvec.cpp     Helmholtz matvec GFLOP/s (implicit, explicit CSR);
//   Solvers.cpp    spectral, SOR and CG solves cold and warm;
//   Iteration.cpp  one greedy iteration per solver beside the PyTorch step, and the targets;
//   Split.cpp      the kernel split of one iteration and the ScratchTiled step's launch sweep;
//   Kernels.cpp    gradient, 3D Gaussian and n-ary vs binary operators;
//   Lncc.cpp       the LNCC force per variant and radius;
//   Ixi.cpp        the IXI pair end to end (--data), multi-scale vs single scale;
//   Pairs.cpp      IXI pairs end to end with the defaults, and the cohort's pairs per second (--data).
// bench/BenchGreedy.cpp checks the options, writes the header and runs the sections in order.
#pragma once

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include "bench/BenchCommon.hpp"
#include "bench/BenchOptions.hpp"
#include "core/Fluid.hpp"
#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"

namespace kortex::bench::greedy {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;

// The targets (H100 / H200).
inline constexpr double kTargetIterationMs = 0.35;  // one greedy iteration at 144x192x160
inline constexpr double kTargetTorchRatio = 3.0;    // at least 3x faster than the PyTorch step
inline constexpr double kTargetIxiPairS = 0.3;      // IXI pair end to end, affine + 2 scales
inline constexpr double kTargetBandwidthShare = 0.6;

// Minimum traffic per voxel of one greedy iteration (float32), with the step in one pass
// (GreedyStepVariant::ScratchTiled):
//   spectral R2C + C2R of 3 components: each at least one read + one write of the real field and
//            of the half spectrum (~ 12 + 12 + 12 + 12)                      = 48
//   max |v|  reads v                                                          = 12
//   step     reads v, u (24 B), I1, I0 (8 B); writes u', F (24 B)            = 56
// Total 116 B per voxel. The three-pass step (Naive) moves 80 B instead of 56: compose (u, v ->
// u': 36), warp + check (u', I0, I1 -> W: 24), force (W, I1 -> F: 20).
inline constexpr double kIterationBytesPerVoxel = 116.0;
inline constexpr double kMatvecBytesPerVoxel = 24.0;
// Greedy iterations run before the solver comparison's warm-start problem is taken.
inline constexpr int kWarmupIterations = 10;

// One run of the benchmark: what every section reads, and where it writes.
struct Context : common::SectionRun {
  Context(BenchOptions const& o, BenchReport& r, nlohmann::json p);

  Exec exec;
  bool onDevice = false;
  int reps = 0, warm = 0;
  double copyGBs = 0.0;
  GridExtents target;  // the target grid; host execution spaces and the smoke test use smaller ones
  Geometry targetGrid;
  FluidParams fp;  // the paper's alpha 0.01, beta 0, gamma 0.001
  nlohmann::json j;

  void fence() const { exec.fence(); }
};

// A structured image and the same image warped by a smooth displacement (maxVoxels), on grid g.
std::pair<HostImage, HostImage> makePair(Geometry const& g, double maxVoxels, std::uint64_t seed);

void runMatvec(Context& ctx);
void runSolvers(Context& ctx);
void runIteration(Context& ctx);
// The kernel split of one iteration at the target grid and the ScratchTiled step's launch sweep
// (u: the iteration section's field, overwritten).
void runIterationSplit(Context& ctx, ImageView<Mem> const& dMoving, ImageView<Mem> const& dFixed, gpu::Field<Mem>& u);
void runKernels(Context& ctx);
void runLncc(Context& ctx);
void runIxi(Context& ctx);
void runPairs(Context& ctx);
void runCohort(Context& ctx);

}  // namespace kortex::bench::greedy
