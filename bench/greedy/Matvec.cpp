// Greedy benchmark, Matvec: the Helmholtz matvec, implicit (matrix-free stencil) and explicit (CSR).
#include "bench/greedy/GreedyBench.hpp"

#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "core/Timing.hpp"
#include "gpu/fluid/Fluid.hpp"

namespace kortex::bench::greedy {

using common::fixedDecimals;

void runMatvec(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  Exec& exec = ctx.exec;
  std::ostringstream& md = ctx.md;
  const bool onDevice = ctx.onDevice;
  const int reps = ctx.reps, warm = ctx.warm;
  const double copyGBs = ctx.copyGBs;
  FluidParams const& fp = ctx.fp;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto fence = [&] { ctx.fence(); };
  std::vector<int> sizes = opt.tiny ? std::vector<int>{16, 24}
                                    : (onDevice ? std::vector<int>{64, 96, 128, 160, 192, 224, 256}
                                                : std::vector<int>{32, 48, 64});
  const double paper[] = {17, 37, 53, 42, 54, 51, 59};
  md << "## Helmholtz matvec (Fig 6): GFLOP/s, 2 flops per stored non-zero (7 per row)\n\n"
     << "| size | implicit ms | implicit GFLOP/s | implicit GB/s (24 B/voxel) | % of copy | explicit CSR ms | "
        "explicit GFLOP/s | paper implicit GFLOP/s |\n|---|---|---|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const int n = sizes[k];
    say("matvec " + std::to_string(n) + "^3");
    gpu::Field<Mem> v("kortex::bench::v", 3, n, n, n), out("kortex::bench::Lv", 3, n, n, n);
    Kokkos::deep_copy(v, 1.0f);
    const double vox = double(n) * n * n, flops = 2.0 * 7.0 * 3.0 * vox;
    const TimingStats ti = timeMedian([&] { gpu::fluidApply(exec, v, out, fp); }, fence, warm, reps);
    double te = NAN;
    try {
      gpu::FluidSolver<Exec> solver(exec, n, n, n, fp);
      solver.applyExplicit(v, out);  // assembles
      te = timeMedian([&] { solver.applyExplicit(v, out); }, fence, warm, reps).medianMs;
    } catch (std::exception const& ex) {
      md << "(explicit at " << n << "^3: " << ex.what() << ")\n";
    }
    ++rep.measured;
    const double gi = flops / (ti.medianMs * 1e-3) * 1e-9, ge = flops / (te * 1e-3) * 1e-9;
    const double gbs = kMatvecBytesPerVoxel * vox / (ti.medianMs * 1e-3) * 1e-9;
    const double p = onDevice && k < 7 ? paper[k] : NAN;
    md << "| " << n << "^3 | " << fixedDecimals(ti.medianMs) << " | " << fixedDecimals(gi, 0) << " | " << fixedDecimals(gbs, 0) << " | "
       << fixedDecimals(100 * gbs / copyGBs, 0) << " | " << fixedDecimals(te) << " | " << fixedDecimals(ge, 0) << " | " << fixedDecimals(p, 0) << " |\n";
    rows.push_back({{"size", n}, {"implicit_ms", ti.medianMs}, {"implicit_gflops", gi}, {"implicit_GBs", gbs},
                    {"explicit_ms", te}, {"explicit_gflops", ge}, {"paper_implicit_gflops", p}});
  }
  md << "\nPaper (Tesla C1060 class): implicit 17-59 GFLOP/s, explicit DIA 25-27, ELL 16-17.\n\n";
  ctx.j["matvec"] = rows;
}

}  // namespace kortex::bench::greedy
