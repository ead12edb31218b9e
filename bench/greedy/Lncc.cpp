// Greedy benchmark, Lncc: the LNCC force (gpu/greedy/Lncc.hpp, both passes, no energy) per variant
// and window radius, at an IXI pair's full-scale grid and the iteration's target grid; each variant's
// force checked bit for bit against Separable's.
#include "bench/greedy/GreedyBench.hpp"

#include <string>
#include <vector>

#include "core/Timing.hpp"
#include "gpu/greedy/Lncc.hpp"

namespace kortex::bench::greedy {

using common::fixedDecimals;

namespace {

// Whether two device fields hold the same bits.
bool sameBits(gpu::Field<Mem> const& a, gpu::Field<Mem> const& b) {
  const auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  const auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  for (std::size_t i = 0; i < ha.size(); ++i)
    if (ha.data()[i] != hb.data()[i]) return false;
  return true;
}

}  // namespace

void runLncc(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  ctx.say("LNCC force variants");
  // 128x128x96: an IXI pair's 2 mm full scale as the registration pads it; the iteration's target grid.
  std::vector<GridExtents> grids = opt.tiny ? std::vector<GridExtents>{{16, 20, 24}}
                                            : (ctx.onDevice ? std::vector<GridExtents>{{96, 128, 128}, ctx.target}
                                                            : std::vector<GridExtents>{{48, 64, 64}});
  const gpu::LnccVariant variants[] = {gpu::LnccVariant::Separable, gpu::LnccVariant::Reuse, gpu::LnccVariant::Recompute};
  ctx.md << "## LNCC force\n\nBoth passes of the force (window sums and coefficients, their transpose and F = G grad W; "
            "no energy), median ms, each variant for both passes (gpu/greedy/Lncc.hpp; Reuse where its ring fits the team "
            "scratch); \"same bits\": the force equals Separable's bit for bit.\n\n"
         << "| grid | R | variant | ms | vs Separable | same bits |\n|---|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  for (GridExtents const& g : grids) {
    Geometry geo;
    geo.size = {g.nx, g.ny, g.nz};
    auto [fixed, moving] = makePair(geo, 3.0, 17);
    const auto dFixed = Kokkos::create_mirror_view_and_copy(Mem(), fixed.data);
    const auto dMoving = Kokkos::create_mirror_view_and_copy(Mem(), moving.data);
    gpu::Field<Mem> want("kortex::bench::lncc_want", 3, g.nz, g.ny, g.nx), f("kortex::bench::lncc_f", 3, g.nz, g.ny, g.nx);
    for (int R : {2, 4}) {
      double separableMs = 0.0;
      for (gpu::LnccVariant v : variants) {
        if (v == gpu::LnccVariant::Reuse && !(gpu::lnccReuseFits<Exec>(R)[0] && gpu::lnccReuseFits<Exec>(R)[1])) continue;
        const std::array<gpu::LnccVariant, 2> both{v, v};
        gpu::LnccTerms<Mem> terms("kortex::bench::lncc_terms", gpu::lnccWorkspaceComponents(both), g.nz, g.ny, g.nx);
        auto& out = v == gpu::LnccVariant::Separable ? want : f;
        const double ms = timeMedian([&] { gpu::lnccForce(ctx.exec, dMoving, dFixed, R, terms, out, both, nullptr, 0); },
                                     [&] { ctx.fence(); }, ctx.warm, ctx.reps)
                              .medianMs;
        ++ctx.rep.measured;
        if (v == gpu::LnccVariant::Separable) separableMs = ms;
        const bool same = v == gpu::LnccVariant::Separable || sameBits(f, want);
        if (!same) ctx.fail("LNCC force: " + std::string(gpu::toString(v)) + " differs from Separable at R " + std::to_string(R));
        ctx.md << "| " << g.nx << "x" << g.ny << "x" << g.nz << " | " << R << " | " << gpu::toString(v) << " | " << fixedDecimals(ms, 4)
               << " | " << fixedDecimals(separableMs / ms, 2) << " | " << (same ? "yes" : "NO") << " |\n";
        rows.push_back({{"grid", {g.nx, g.ny, g.nz}}, {"radius", R}, {"variant", gpu::toString(v)}, {"median_ms", ms},
                        {"same_bits_as_separable", same}});
      }
    }
  }
  ctx.md << "\n";
  ctx.j["lncc_force"] = rows;
}

}  // namespace kortex::bench::greedy
