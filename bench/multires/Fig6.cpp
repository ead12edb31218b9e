// `kortex bench multires`, Fig 6: every candidate tile of the layer bilateral
// (pipeline/MultiresTileSpace.hpp) at 1024^2, float layer, ClosenessLut; the report picks the
// best, the worst, 16x16, the default and the tile gpu::multires uses (MultiresPlan::tiles()).
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "bench/multires/MultiresBench.hpp"
#include "bench/multires/MultiresSections.hpp"
#include "core/Compat.hpp"
#include "gpu/multires/MultiresBilateral.hpp"
#include "pipeline/MultiresTileSpace.hpp"

namespace kortex::bench::multires {

namespace md = gpu::multires_detail;

Fig6Result runFig6(Context& ctx) {
  Fig6Result res;
  const Index n = fig6Size(ctx.tiny());
  res.set = pipeline::tune::multiresBilateralCandidates(static_cast<int>(n));
  for (auto const& cfg : res.set.candidates) {
    Fig6Row r;
    r.x = cfg.at("x");
    r.y = cfg.at("y");
    if (ctx.selected(fig6Label(n, r.x, r.y))) res.rows.push_back(r);
  }
  if (res.rows.empty()) return res;
  res.run = true;
  res.chosen = ctx.tilesAt(n);
  // The tile gpu::multires uses is timed too when it lies outside the candidate space (e.g. a
  // database entry from another search).
  bool chosenInSpace = false;
  for (auto const& c : res.set.candidates)
    chosenInSpace = chosenInSpace || (c.at("x") == res.chosen.bilateralX && c.at("y") == res.chosen.bilateralY);
  if (!chosenInSpace && ctx.selected(fig6Label(n, res.chosen.bilateralX, res.chosen.bilateralY))) {
    Fig6Row r;
    r.x = res.chosen.bilateralX;
    r.y = res.chosen.bilateralY;
    r.candidate = false;
    res.rows.push_back(r);
  }
  // Shared by every tile: rotating layers, the table, and the default tile's output.
  struct State : FloatLayers {
    MultiresParams p;
    HostImage baseline;
  };
  std::shared_ptr<State> st;
  auto state = [&]() -> std::shared_ptr<State> {
    if (st) return st;
    Input& in = ctx.input(n);
    auto s = std::make_shared<State>();
    s->p = baseParams(in.sigma, false);
    s->p.bilateral = MultiresBilateralVariant::ClosenessLut;  // the paper's space, as the shipped tiles were tuned
    makeFloatLayers(ctx, in, *s);
    md::bilateralLayer(ctx.exec(), s->in[0], s->out[0], s->closeness, s->p, md::kDefaultBilateralTile);
    ctx.exec().fence();
    s->baseline = HostImage("kortex::bench::multires::baseline", Geometry::make2D(n, n));
    auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s->out[0]);
    std::copy(b.data(), b.data() + b.size(), s->baseline.data.data());
    st = s;
    return st;
  };
  // Fig 6 times many candidates: in quick and tiny modes each gets the minimum repetitions.
  const int cap = ctx.mode().name == "full" ? 0 : ctx.mode().minReps;
  for (auto& r : res.rows) {
    r.m.impl = r.tile();
    r.m.threads = kx::concurrency(ctx.exec());
    const std::string label = fig6Label(n, r.x, r.y) + (r.candidate ? "" : " (chosen)");
    ctx.measure(r.m, label, true, std::string("layer-bf|") + toString(MultiresBilateralVariant::ClosenessLut),
                double(n) * double(n) * kWindowTaps, [&] {
                  auto s = state();
                  const md::LayerTile tile{r.x, r.y};
                  Case c;
                  c.maxRepsCap = cap;
                  c.run = [&ctx, s, tile] {
                    s->advance();
                    md::bilateralLayer(ctx.exec(), s->in[s->last], s->out[s->last], s->closeness, s->p, tile);
                  };
                  c.check = [s] {
                    HostImage a("kortex::bench::multires::tile_out", s->baseline.geometry);
                    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s->out[s->last]);
                    std::copy(h.data(), h.data() + h.size(), a.data.data());
                    return checkClose(a, s->baseline, kFloatRelTol, "output vs the default tile's");
                  };
                  return c;
                });
  }
  return res;
}

}  // namespace kortex::bench::multires
