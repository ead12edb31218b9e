// `kortex bench surface`: the surface part of Lee et al. (see bench/BenchSurfaceNlm.hpp for what is
// measured and how). This file checks the options, writes the report's header and runs the band
// sizes in order; each size and the report's parts live in bench/surface/ (SurfaceBench.hpp:
// Case.cpp, Fig4.cpp, Fig5.cpp, Report.cpp), sharing one surface::Context.
#include "bench/BenchSurfaceNlm.hpp"

#include <filesystem>

#include "bench/BenchCommon.hpp"
#include "bench/surface/SurfaceBench.hpp"
#include "core/Errors.hpp"
#include "io/Output.hpp"

namespace kortex::bench {
namespace surface {

Context::Context(BenchOptions const& o, BenchReport& r, nlohmann::json p) : common::SectionRun(o, r, std::move(p)) {
  onDevice = !common::kDeviceIsHostMemory;
  if (opt.tiny)
    targets = {1500, 3000};
  else if (opt.quick || !onDevice)
    targets = {17500, 35000};
  else
    targets = {17500, 35000, 70000, 105000, 140000, 175000};
  warm = opt.tiny ? 0 : 1;
  reps = opt.tiny ? 1 : 3;
  cpuSingle = opt.tiny ? 30.0 : (opt.quick ? 30.0 : 70.0);
  cpuTotal = opt.tiny ? 60.0 : (opt.quick ? 90.0 : 160.0);
  allThreads = common::maxOmpThreads();
  cpuThreads = allThreads > 2 ? std::vector<int>{2, allThreads} : std::vector<int>{allThreads};
  pv = base.patch * base.patch * base.patch;
  cpuPerPair.assign(cpuThreads.size(), -1.0);
}

}  // namespace surface

BenchReport runSurfaceBench(BenchOptions const& opt) {
  using surface::kNoiseSd;
  const auto tStart = Clock::now();
  nlohmann::json peers = common::checkOptions(opt, "surface");
  if (!opt.dumpDir.empty() && !std::filesystem::is_directory(opt.dumpDir))
    throw IoError("--dump folder '" + opt.dumpDir + "' does not exist");

  BenchReport rep;
  surface::Context ctx(opt, rep, std::move(peers));
  SurfaceNlmParams const& base = ctx.base;
  nlohmann::json& j = ctx.j;
  j["kind"] = "kortex-bench-surface";
  j["environment"] = io::environmentJson(true);
  j["params"] = {{"band", base.band},          {"patch", base.patch},   {"neighbors", base.neighbors},
                 {"c1", base.c1},              {"c2", base.c2},         {"iterations", base.iterations},
                 {"pass_candidates", base.passCandidates}, {"kept", base.neighbors + gpu::kSurfaceNlmExtraCandidates},
                 {"noise_sd", kNoiseSd}};
  ctx.md << "# Kortex surface NLM benchmark (Lee et al., surface part: Figs 4 and 5)\n\n"
         << "Device: " << j["environment"].value("device", std::string("?")) << ", Kokkos " << surface::Exec::name()
         << ", git " << j["environment"].value("git_hash", std::string("?")) << ". Input: sphere signed distance + N(0, "
         << kNoiseSd << ") on phi; band " << base.band << ", patch " << base.patch << "^3, m " << base.neighbors << " (kept "
         << base.neighbors + gpu::kSurfaceNlmExtraCandidates << " by the float pre-selection), c1 " << base.c1 << ", c2 "
         << base.c2 << ", " << base.iterations << " iterations. Times: median of " << ctx.reps << " after " << ctx.warm
         << " warm-up, fenced.\n\n";
  ctx.fig4 << "## Fig 4: time vs band size (Kokkos " << surface::Exec::name() << ")\n\n"
           << "| N | variant | total ms | search ms | weights ms | iterations ms | certificate failures | launches | "
              "distances computed (% of N^2) | GB/s (paper's measure) | GFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  ctx.fig5 << "## Fig 5: speedup against the CPU reference\n\n"
           << "| N | Kokkos best total ms | variant | CPU threads | CPU total ms | speedup |\n"
           << "|---|---|---|---|---|---|\n";
  ctx.check << "## Check: Kokkos against the CPU reference (sizes where the CPU ran)\n\n"
            << "| N | variant | rows identical | rows reordered inside ties | rows differing | max rel. distance diff | "
               "max abs dphi (band) | bound |\n|---|---|---|---|---|---|---|---|\n";

  for (std::size_t ci = 0; ci < ctx.targets.size(); ++ci) surface::runCase(ctx, ci);
  j["cases"] = ctx.cases;
  surface::writeTables(ctx);
  common::finishReport(rep, j, ctx.md.str(), tStart, opt);
  return rep;
}

}  // namespace kortex::bench
