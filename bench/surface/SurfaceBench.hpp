// Internal pieces of `kortex bench surface` (bench/BenchSurfaceNlm.hpp says what is measured and
// how): the input (a noisy sphere), the Context of one run (options, report, JSON, the one Markdown
// stream and the Fig 4 / Fig 5 / Check tables every case appends to, the CPU budget and what the
// cases leave for the target) and the parts of the report, one translation unit each:
//   Case.cpp     one band size: the input, Fig4.cpp's variants, the default variant's neighbours
//                (and the peer's dump), then Fig5.cpp's CPU runs and check;
//   Fig4.cpp     every search variant timed, its split, certificate failures, distances, GB/s;
//   Fig5.cpp     the CPU reference at 2 and all threads within the budget, speedups, and the check
//                of the Kokkos neighbours and output against it;
//   Report.cpp   the tables, the paper's numbers, the 175k weights target and the peer.
// bench/BenchSurfaceNlm.cpp checks the options, writes the header and runs the cases in order.
#pragma once

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "bench/BenchOptions.hpp"
#include "core/Image.hpp"
#include "core/SurfaceNlm.hpp"
#include "core/Timing.hpp"
#include "gpu/surface_nlm/SurfaceNlm.hpp"

namespace kortex::bench::surface {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;

// The paper (Lee et al., surface part; GTX 480 against a dual-thread CPU): whole run times.
struct PaperPoint {
  double n, cpuS, gpuS;
};
inline constexpr PaperPoint kPaper[] = {{17500, 4.3 * 60, 4.0}, {175000, 7.3 * 3600, 4.6 * 60}};
inline constexpr double kPaperGBs = 50.0;
inline constexpr double kTargetWeightsS = 0.5;  // N = 175,000, m = 96
inline constexpr double kPaperPhiBound = 0.25;  // voxel
inline constexpr double kNoiseSd = 0.3;         // voxel, on phi

// Noisy sphere whose band |phi| <= 3 has about `target` elements (thickness 6: N ~ 24 pi R^2).
HostImage noisySphere(double target, unsigned seed);

// ---- one run ----------------------------------------------------------------------------------
struct Context : common::SectionRun {
  Context(BenchOptions const& o, BenchReport& r, nlohmann::json p);

  Exec exec;
  bool onDevice = false;
  std::vector<double> targets;  // band sizes
  int warm = 0, reps = 0;
  // CPU reference budget: one run at most cpuSingle seconds (estimated from the previous size by
  // N^2), at most cpuTotal in all. Never extrapolated into the tables.
  double cpuSingle = 0.0, cpuTotal = 0.0;
  int allThreads = 0;
  std::vector<int> cpuThreads;
  const SurfaceNlmParams base{};
  int pv = 0;  // patch voxels
  nlohmann::json j;
  std::ostringstream fig4, fig5, check;  // the tables the cases append to
  nlohmann::json cases = nlohmann::json::array();
  double cpuSpent = 0.0;
  std::vector<double> cpuPerPair;  // per CPU thread count: seconds per pair of the last run (-1: none)
  double weights175 = NAN;         // the 175k weights target: best search + weights seconds
  std::string weights175Variant;
  std::int64_t weights175N = 0;

};

// One band size: what Fig4.cpp leaves for the CPU runs, the check and the dump.
struct Case {
  std::size_t ci = 0;  // index in Context::targets
  double target = 0.0;
  HostImage phi;
  ImageView<Mem> in, out;
  nlohmann::json cj;
  double bestTotal = INFINITY;
  std::string bestVariant;
  std::int64_t n = 0;  // band size (0: no variant ran)
  gpu::SurfaceNlmNeighbours<Kokkos::HostSpace> bestNb;
  HostImage bestOut;
};

void runCase(Context& ctx, std::size_t ci);
void runVariants(Context& ctx, Case& c);  // Fig 4
void runCpu(Context& ctx, Case& c);       // Fig 5 and Check
void writeTables(Context& ctx);           // the tables, the paper, the target and the peer

}  // namespace kortex::bench::surface
