// Greedy benchmark, Lncc: the LNCC force (gpu/greedy/Lncc.hpp, both passes, no energy) per variant
// and window radius, at an IXI pair's full-scale grid and the iteration's target grid; each variant's
// force checked bit for bit against Separable's.
#include "bench/greedy/GreedyBench.hpp"

#include <array>
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
  // 120x120x90: an IXI volume at 2 mm; 128x128x96; the iteration's target grid.
  std::vector<GridExtents> grids = opt.tiny ? std::vector<GridExtents>{{16, 20, 24}}
                                            : (ctx.onDevice ? std::vector<GridExtents>{{90, 120, 120}, {96, 128, 128}, ctx.target}
                                                            : std::vector<GridExtents>{{48, 64, 64}});
  using V = gpu::LnccVariant;
  // {windows, transpose}: Separable first (the reference of the ratios and bits), the devices' default second.
  const std::array<V, 2> runs[] = {{V::Separable, V::Separable}, {V::ScratchTiled, V::Separable}, {V::ScratchTiled, V::ScratchTiled},
                                   {V::Reuse, V::Reuse}, {V::Recompute, V::Recompute}};
  ctx.md << "## LNCC force\n\nBoth passes of the force (window sums and coefficients, their transpose and F = G grad W; "
            "no energy), median ms, per variant of each pass (gpu/greedy/Lncc.hpp; Reuse where its ring fits the team "
            "scratch; the back end's default: lnccVariantsFor); \"same bits\": the force equals Separable's bit for bit.\n\n"
         << "| grid | R | windows / transpose | default | ms | vs Separable | same bits |\n|---|---|---|---|---|---|---|\n";
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
      for (auto const& both : runs) {
        if (both[0] == V::Reuse && !(gpu::lnccReuseFits<Exec>(R)[0] && gpu::lnccReuseFits<Exec>(R)[1])) continue;
        const bool reference = both[0] == V::Separable && both[1] == V::Separable, chosen = both == gpu::lnccVariantsFor<Exec>(R);
        const std::string name = std::string(gpu::toString(both[0])) + " / " + gpu::toString(both[1]);
        gpu::LnccTerms<Mem> terms("kortex::bench::lncc_terms", gpu::lnccWorkspaceComponents(both), g.nz, g.ny, g.nx);
        auto& out = reference ? want : f;
        const double ms = timeMedian([&] { gpu::lnccForce(ctx.exec, dMoving, dFixed, R, terms, out, both, nullptr, 0); },
                                     [&] { ctx.fence(); }, ctx.warm, ctx.reps)
                              .medianMs;
        ++ctx.rep.measured;
        if (reference) separableMs = ms;
        const bool same = reference || sameBits(f, want);
        if (!same) ctx.fail("LNCC force: " + name + " differs from Separable at R " + std::to_string(R));
        ctx.md << "| " << g.nx << "x" << g.ny << "x" << g.nz << " | " << R << " | " << name << " | " << (chosen ? "yes" : "") << " | "
               << fixedDecimals(ms, 4) << " | " << fixedDecimals(separableMs / ms, 2) << " | " << (same ? "yes" : "NO") << " |\n";
        rows.push_back({{"grid", {g.nx, g.ny, g.nz}}, {"radius", R}, {"windows", gpu::toString(both[0])}, {"transpose", gpu::toString(both[1])},
                        {"default", chosen}, {"median_ms", ms}, {"same_bits_as_separable", same}});
      }
    }
  }
  ctx.md << "\n";
  ctx.j["lncc_force"] = rows;
}

}  // namespace kortex::bench::greedy
