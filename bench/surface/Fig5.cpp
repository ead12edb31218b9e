// Surface benchmark, Fig 5 and Check: one band size, the CPU reference at 2 threads (the paper's
// dual-thread CPU) and at all threads where the run fits the budget (never extrapolated), speedups,
// and at the first CPU run the neighbour sets (identical ties aside) and max |dphi| over the band
// against the Kokkos default variant (paper bound 1/4 voxel).
#include "bench/surface/SurfaceBench.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "reference_cpu/SurfaceNlm.hpp"
#include "validation/Report.hpp"
#include "validation/SurfaceNlm.hpp"

namespace kortex::bench::surface {

using common::fixedDecimals;

void runCpu(Context& ctx, Case& c) {
  BenchReport& rep = ctx.rep;
  SurfaceNlmParams const& base = ctx.base;
  std::vector<int> const& cpuThreads = ctx.cpuThreads;
  std::vector<double>& cpuPerPair = ctx.cpuPerPair;
  double& cpuSpent = ctx.cpuSpent;
  const double cpuSingle = ctx.cpuSingle, cpuTotal = ctx.cpuTotal;
  std::ostringstream& fig5 = ctx.fig5;
  std::ostringstream& check = ctx.check;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto fail = [&](std::string const& what) { ctx.fail(what); };
  HostImage const& phi = c.phi;
  nlohmann::json& cj = c.cj;
  double& bestTotal = c.bestTotal;
  std::string& bestVariant = c.bestVariant;
  std::int64_t& n = c.n;
  gpu::SurfaceNlmNeighbours<Kokkos::HostSpace>& bestNb = c.bestNb;
  HostImage& bestOut = c.bestOut;
  // CPU reference at 2 threads and all threads, within the budget.
  nlohmann::json cpuj = nlohmann::json::array();
  bool checked = false;
  for (std::size_t ti = 0; ti < cpuThreads.size(); ++ti) {
    const int threads = cpuThreads[ti];
    const double pairs = double(n) * double(n);
    const double est = cpuPerPair[ti] > 0 ? cpuPerPair[ti] * pairs : -1.0;
    // Without a smaller size to estimate from, the CPU runs only bands up to 40k (about 60 s at
    // 2 threads on the H200's host).
    if (est > cpuSingle || (est > 0 && cpuSpent + est > cpuTotal) || (est < 0 && n > 40000)) {
      fig5 << "| " << n << " | " << fixedDecimals(bestTotal, 1) << " | " << bestVariant << " | " << threads
           << " | not run (" << (est < 0 ? std::string("no smaller size to estimate from") : "estimated " + fixedDecimals(est, 0) + " s > budget")
           << ") | - |\n";
      cpuj.push_back({{"threads", threads}, {"status", "skipped"}, {"estimate_s", est}});
      continue;
    }
    say("surface CPU reference N = " + std::to_string(n) + ", " + std::to_string(threads) + " threads");
    common::OmpThreads scope(threads);
    ref::SurfaceNeighbours rnb;
    ref::SurfaceDenoiseInfo rinfo;
    const auto t0 = Clock::now();
    const HostImage want = ref::surfaceDenoise(phi, base, &rinfo, checked ? nullptr : &rnb);
    const double cpuS = secondsSince(t0);
    cpuSpent += cpuS;
    cpuPerPair[ti] = cpuS / pairs;
    say("  CPU " + std::to_string(threads) + " threads: " + fixedDecimals(cpuS, 2) + " s");
    ++rep.measured;
    fig5 << "| " << n << " | " << fixedDecimals(bestTotal, 1) << " | " << bestVariant << " | " << threads << " | "
         << fixedDecimals(cpuS * 1e3, 0) << " | " << fixedDecimals(cpuS * 1e3 / bestTotal, 1) << "x |\n";
    cpuj.push_back({{"threads", threads}, {"status", "ok"}, {"total_ms", cpuS * 1e3},
                    {"speedup_total", cpuS * 1e3 / bestTotal}});
    if (!checked) {
      checked = true;
      const validation::NeighbourComparison c = validation::compareNeighbours(rnb, bestNb);
      double maxDphi = 0.0;
      for (auto id : ref::narrowBand(phi, base.band))
        maxDphi = std::max(maxDphi, std::abs(double(bestOut.data.data()[id]) - double(want.data.data()[id])));
      check << "| " << n << " | " << toString(base.variant) << " | " << (n - c.rowsReordered - c.rowsDiffering)
            << " | " << c.rowsReordered << " | " << c.rowsDiffering << " | " << validation::fmtSci(c.maxDistanceRel)
            << " | " << validation::fmtSci(maxDphi) << " | " << kPaperPhiBound << " |\n";
      cj["check"] = {{"rows_reordered_in_ties", c.rowsReordered}, {"rows_differing", c.rowsDiffering},
                     {"max_rel_distance_diff", c.maxDistanceRel}, {"max_abs_dphi", maxDphi}};
      say("  check vs CPU: rows differing " + std::to_string(c.rowsDiffering) + ", reordered in ties " +
          std::to_string(c.rowsReordered) + ", max |dphi| " + validation::fmtSci(maxDphi));
      if (c.rowsDiffering > 0 || !(maxDphi <= kPaperPhiBound))
        fail("N = " + std::to_string(n) + ": Kokkos differs from the CPU reference (" + std::to_string(c.rowsDiffering) +
             " neighbour rows, max |dphi| " + std::to_string(maxDphi) + ")");
    }
  }
  cj["cpu"] = cpuj;
}

}  // namespace kortex::bench::surface
