// `kortex bench greedy`: the greedy registration tables of Ha et al. 2010 (see bench/BenchGreedy.hpp
// for what is measured and how). This file checks the options, writes the report's header and
// runs the sections in order; the sections live in bench/greedy/ (GreedyBench.hpp: Matvec.cpp,
// Solvers.cpp, Iteration.cpp + Split.cpp, Kernels.cpp, Ixi.cpp, Pairs.cpp), sharing one greedy::Context.
#include "bench/BenchGreedy.hpp"

#include "bench/BenchCommon.hpp"
#include "bench/greedy/GreedyBench.hpp"
#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "core/Timing.hpp"
#include "io/Output.hpp"
#include "pipeline/ParamsJson.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::bench {
namespace greedy {

Context::Context(BenchOptions const& o, BenchReport& r, nlohmann::json p)
    : common::SectionRun(o, r, std::move(p), "bench greedy: ") {
  onDevice = !common::kDeviceIsHostMemory;
  reps = opt.tiny ? 2 : 10;
  warm = opt.tiny ? 1 : 3;
  copyGBs = common::measureCopyBandwidth(exec, opt.tiny || !onDevice);
  target = opt.tiny ? GridExtents{24, 32, 28} : (onDevice ? GridExtents{144, 192, 160} : GridExtents{48, 64, 56});
  targetGrid = Geometry::make3D(target.nx, target.ny, target.nz);
}

std::pair<HostImage, HostImage> makePair(Geometry const& g, double maxVoxels, std::uint64_t seed) {
  HostImage fixed = structuredImage(g, seed);
  const auto u = smoothDisplacement(g, maxVoxels, seed + 1);
  HostImage moving("kortex::bench::moving", g);
  ref::warp(fixed.data, u.data, moving.data);
  return {fixed, moving};
}

}  // namespace greedy

BenchReport runGreedyBench(BenchOptions const& opt) {
  using common::fixedDecimals;
  using common::selected;
  const auto tStart = Clock::now();
  BenchReport rep;
  nlohmann::json peers = common::checkOptions(opt, "greedy");
  common::requireOnlyMatches(opt, {"Matvec", "Solvers", "Iteration", "Kernels", "Lncc", "IXI", "Pair", "Cohort"}, "greedy", "\"Solvers\"");
  greedy::Context ctx(opt, rep, std::move(peers));
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  j["kind"] = "kortex-bench-greedy";
  j["environment"] = io::environmentJson(true);
  j["copy_bandwidth_GBs"] = ctx.copyGBs;
  j["params"] = pipeline::toJson(ctx.fp);
  j["params"]["iteration_bytes_per_voxel"] = greedy::kIterationBytesPerVoxel;
  md << "# Kortex greedy registration benchmark (Ha et al. 2010)\n\n"
     << "Device: " << j["environment"].value("device", std::string("?")) << ", Kokkos " << greedy::Exec::name()
     << ", git " << j["environment"].value("git_hash", std::string("?")) << ". Measured copy bandwidth "
     << fixedDecimals(ctx.copyGBs, 0) << " GB/s (read + write). Fluid operator alpha " << ctx.fp.alpha << ", beta "
     << ctx.fp.beta << ", gamma " << ctx.fp.gamma
     << ", periodic (core/Fluid.hpp), for the matvec and solver sections; the iteration and IXI sections use the "
        "registration's defaults (alpha "
     << GreedyParams{}.fluid.alpha << ").\n\n";

  if (selected(opt.only, "Matvec")) greedy::runMatvec(ctx);
  if (selected(opt.only, "Solvers")) greedy::runSolvers(ctx);
  if (selected(opt.only, "Iteration")) greedy::runIteration(ctx);
  if (selected(opt.only, "Kernels")) greedy::runKernels(ctx);
  if (selected(opt.only, "Lncc")) greedy::runLncc(ctx);
  if (!opt.dataDir.empty() && selected(opt.only, "IXI")) greedy::runIxi(ctx);
  if (!opt.dataDir.empty() && selected(opt.only, "Pair")) greedy::runPairs(ctx);
  if (!opt.dataDir.empty() && selected(opt.only, "Cohort")) greedy::runCohort(ctx);
  md << "\nMemory-bound kernels are expected at >= " << fixedDecimals(100 * greedy::kTargetBandwidthShare, 0)
     << " % of the measured copy bandwidth (the GB/s columns above).\n";
  common::finishReport(rep, j, md.str(), tStart, opt);
  return rep;
}

}  // namespace kortex::bench
