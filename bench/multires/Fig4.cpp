// `kortex bench multires`, Fig 4: each layer-bilateral variant on one image (512^2; sigma_d = 2,
// 5x5), with the tile gpu::multires uses; the report derives Gtaps/s and the stated operations
// per tap (tapOps) from the median.
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/multires/MultiresBench.hpp"
#include "bench/multires/MultiresSections.hpp"
#include "core/Compat.hpp"
#include "gpu/multires/MultiresBilateral.hpp"

namespace kortex::bench::multires {

namespace md = gpu::multires_detail;

TapOps tapOps(MultiresBilateralVariant v) {
  switch (v) {
    case MultiresBilateralVariant::Naive:
      return {10.0, "flop",
              "d = l(q) - l(p); closeness exp(|o|^2 c_s): 1 mul + 1 exp; similarity exp(d^2 c_r): 2 mul + "
              "1 exp; w = c s; sum w d: 1 fma = 2; sum w: 1 add"};
    case MultiresBilateralVariant::FastMath:
      return {10.0, "flop", "as Naive, with the fast intrinsic exp (__expf on CUDA)"};
    case MultiresBilateralVariant::Reuse:
      return {7.0, "flop",
              "d; exponent |o|^2 c_s + d^2 c_r: 1 mul + 1 fma (the row's |o|^2 c_s: 1 add); 1 exp2; sum w d: 2; "
              "sum w: 1 (4 outputs per thread share each input row's loads)"};
    case MultiresBilateralVariant::ClosenessLut:
      return {8.0, "flop",
              "d; closeness from the scratch table (not counted); exp(d^2 c_r): 2 mul + 1 exp; w = c s; "
              "sum w d: 2; sum w: 1"};
    case MultiresBilateralVariant::ClosenessSimilarityLut:
      return {6.0, "int op",
              "d = l(q) - l(p); |d|; w = cQ sQ (both from tables, not counted); num += w l (int64 mul + "
              "add); den += w"};
  }
  return {0.0, "?", "?"};
}

namespace {

// What a row's kernel runs with: the parameters of its pipeline with its variant, and the tile
// gpu::multires uses at its size (recorded in the row).
struct LayerSetup {
  MultiresParams p;
  md::LayerTile tile;
};
LayerSetup layerSetup(Context& ctx, Fig4Row& row, Input const& in) {
  row.tiles = ctx.tilesAt(row.n);
  LayerSetup s;
  s.p = baseParams(in.sigma, row.integer());
  s.p.bilateral = row.variant;
  s.tile = md::LayerTile{row.tiles.bilateralX, row.tiles.bilateralY};
  return s;
}

// A float variant (Naive, FastMath, ClosenessLut, Reuse) on rotating layers.
Case fig4Float(Context& ctx, Fig4Row& row) {
  Input& in = ctx.input(row.n);
  struct State : FloatLayers, LayerSetup {};
  auto st = std::make_shared<State>();
  static_cast<LayerSetup&>(*st) = layerSetup(ctx, row, in);
  makeFloatLayers(ctx, in, *st);
  Kokkos::fence();
  Case c;
  c.run = [&ctx, st] {
    st->advance();
    md::bilateralLayer(ctx.exec(), st->in[st->last], st->out[st->last], st->closeness, st->p, st->tile);
  };
  c.check = [st] {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->out[st->last]);
    return checkConvex(h, 0.0, double(kMaxValue));
  };
  return c;
}

// The integer variant (ClosenessSimilarityLut) on rotating int16 layers of the 10-bit data.
Case fig4Int(Context& ctx, Fig4Row& row) {
  const Index n = row.n;
  Input& in = ctx.input(n);
  struct State : Rotation, LayerSetup {
    std::vector<IntLayerView<Mem>> in, out;
    Kokkos::View<std::int32_t*, Mem> closenessQ, similarityQ;
  };
  auto st = std::make_shared<State>();
  static_cast<LayerSetup&>(*st) = layerSetup(ctx, row, in);
  st->k = ctx.slots(2.0 * 2.0 * double(n) * double(n));
  IntLayerView<Kokkos::HostSpace> h("kortex::bench::multires::int_layer", n, n);
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = static_cast<std::int16_t>(in.noisy16.data()[i]);
  for (int s = 0; s < st->k; ++s) {
    st->in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::int_layer_in"), Kokkos::WithoutInitializing), n, n);
    st->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::int_layer_out"), Kokkos::WithoutInitializing), n, n);
    Kokkos::deep_copy(st->in.back(), h);
  }
  st->closenessQ = tableToDevice(multiresClosenessQ(kRadius, kSigmaSpatial), "kortex::bench::multires::closenessQ");
  st->similarityQ = tableToDevice(multiresSimilarityQ(st->p.sigmaRange, 2 * kMaxValue),
                                  "kortex::bench::multires::similarityQ");
  Kokkos::fence();
  Case c;
  c.run = [&ctx, st] {
    st->advance();
    md::bilateralLayer(ctx.exec(), st->in[st->last], st->out[st->last], st->closenessQ, st->similarityQ, st->p,
                       st->tile);
  };
  c.check = [st] {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->out[st->last]);
    return checkConvex(h, 0.0, double(kMaxValue));
  };
  return c;
}

}  // namespace

std::vector<Fig4Row> runFig4(Context& ctx) {
  std::vector<Fig4Row> rows;
  const Index n = fig4Size(ctx.tiny());
  for (auto v : kFig4Variants) {
    const std::string label = fig4Label(n, v);
    if (!ctx.selected(label)) continue;
    rows.push_back(Fig4Row{v, n, common::Measurement{}, TileInfo{}});
    Fig4Row& row = rows.back();
    row.m.impl = toString(v);
    row.m.threads = kx::concurrency(ctx.exec());
    ctx.measure(row.m, label, true, std::string("layer-bf|") + toString(v), double(n) * double(n) * kWindowTaps,
                [&] { return row.integer() ? fig4Int(ctx, row) : fig4Float(ctx, row); });
  }
  return rows;
}

}  // namespace kortex::bench::multires
