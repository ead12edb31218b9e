// `kortex bench multires`, Fig 5: the pyramid kernels per PyramidVariant (float: Unfused /
// FusedDirect / FusedExpand / FusedReduce; int16: the same plus Packed16): the level-0 expand operator of
// decompose (l_0 = g_0 - expand(g_1)) and of reconstruct (g'_0 = l'_0 + expand(g'_1)), and the
// whole decompose and reconstruct phases; the report derives GB/s of the minimum traffic
// (expandOpBytes, decomposeBytes, reconstructBytes) and the share of the copy bandwidth.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/PaperMultires.hpp"
#include "bench/multires/MultiresBench.hpp"
#include "bench/multires/MultiresSections.hpp"
#include "core/Compat.hpp"
#include "gpu/multires/Multires.hpp"
#include "gpu/multires/MultiresPyramid.hpp"

namespace kortex::bench::multires {

namespace md = gpu::multires_detail;
namespace paper = paper_multires;

const char* opName(PyrOp o) {
  switch (o) {
    case PyrOp::ExpandDecompose: return "expand-decompose";
    case PyrOp::ExpandReconstruct: return "expand-reconstruct";
    case PyrOp::Decompose: return "decompose";
    case PyrOp::Reconstruct: return "reconstruct";
  }
  return "?";
}

namespace {
double levelPixels(LevelSize const& s) { return static_cast<double>(s.nx) * static_cast<double>(s.ny); }
}  // namespace

double expandOpBytes(Index n, double b) {
  const auto s = levelSizes(n, n, 1);
  return b * (2.0 * levelPixels(s[0]) + levelPixels(s[1]));
}
double decomposeBytes(Index n, double b) {
  const auto s = levelSizes(n, n, kLevels);
  double t = 0.0;
  for (int k = 0; k < kLevels; ++k) t += 3.0 * levelPixels(s[k]) + 2.0 * levelPixels(s[k + 1]);
  return b * t;
}
double reconstructBytes(Index n, double b) {
  const auto s = levelSizes(n, n, kLevels);
  double t = 0.0;
  for (int k = 0; k < kLevels; ++k) t += 2.0 * levelPixels(s[k]) + levelPixels(s[k + 1]);
  return b * t;
}

double paperFig5(Index n, PyramidVariant v, PyrOp o) {
  if (n != paper::kFig5Size) return -1.0;
  switch (o) {
    case PyrOp::ExpandDecompose:
    case PyrOp::ExpandReconstruct:
      if (v == PyramidVariant::Unfused) return paper::kFig5ExpandUnfusedMs;
      if (v == PyramidVariant::FusedDirect) return paper::kFig5ExpandFusedMs;
      if (v == PyramidVariant::FusedExpand) return paper::kFig5ExpandFusedSharedMs;
      return -1.0;
    case PyrOp::Decompose:
      if (v == PyramidVariant::Unfused) return paper::kFig5DecomposeUnfusedMs;
      if (v == PyramidVariant::FusedExpand) return paper::kFig5DecomposeFusedSharedMs;
      return -1.0;
    case PyrOp::Reconstruct:
      if (v == PyramidVariant::Unfused) return paper::kFig5ReconstructUnfusedMs;
      if (v == PyramidVariant::FusedExpand) return paper::kFig5ReconstructFusedSharedMs;
      return -1.0;
  }
  return -1.0;
}

namespace {

template <class T>
using DevLevel = md::Level<T, Mem>;

// Level 0 rebuilt from l_0 and g_1 (`a`) vs g_0 (`b`): float within kFloatRelTol of the peak
// (every pixel of `a` finite too when `requireFinite`), integer exactly.
template <class A, class B>
std::string checkLevel0(A const& a, B const& b, bool requireFinite) {
  if constexpr (std::is_same_v<typename A::non_const_value_type, float>) {
    double peak = 0.0, err = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (requireFinite && !std::isfinite(a.data()[i])) return std::string("non-finite output pixel");
      peak = std::max(peak, std::abs(double(b.data()[i])));
      err = std::max(err, std::abs(double(a.data()[i]) - double(b.data()[i])));
    }
    if (!(err <= kFloatRelTol * std::max(peak, 1.0)))
      return "l_0 + expand(g_1) differs from g_0 by " + validation::fmtSci(err);
    return std::string();
  } else {
    return checkEqual(a, b, "l_0 + expand(g_1) vs g_0");
  }
}

// The level-0 expand operator alone: decompose's l_0 = g_0 - expand(g_1) (inputs rotate) or
// reconstruct's g'_0 = l_0 + expand(g_1) (outputs rotate). FineT: the level-0 type (float or
// uint16); LayerT: the layers' (float or int16).
template <class FineT, class LayerT>
Case fig5Operator(Context& ctx, Fig5Row& row, PyrOp op) {
  const Index n = row.n;
  Input& in = ctx.input(n);
  const TileInfo& ti = ctx.tilesAt(n);
  const auto sizes = levelSizes(n, n, 1);
  Exec const& exec = ctx.exec();
  struct State : Rotation {
    std::vector<DevLevel<FineT>> fine;     // g_0 (decompose: rotating inputs) or g'_0 (outputs)
    std::vector<DevLevel<LayerT>> lap;     // l_0 (decompose: rotating outputs)
    DevLevel<FineT> g0;
    DevLevel<LayerT> g1, l0;
    md::UnfusedBuffers<LayerT, Mem> tmp;
    md::PyramidConfig cfg;
  };
  auto st = std::make_shared<State>();
  st->cfg.variant = row.variant;
  if (row.variant == PyramidVariant::FusedExpand) {
    st->cfg.tile = md::PyramidTile{ti.pyramidX, ti.pyramidY};
    row.tile = ti.pyramid();
  }
  st->cfg.maxValue = row.integer ? kMaxValue : 0;
  if (row.variant == PyramidVariant::Unfused) st->tmp = md::allocateUnfusedBuffers<LayerT, Mem>(n, n);
  // g_0 on the device from the host image.
  st->g0 = DevLevel<FineT>(Kokkos::view_alloc(std::string("kortex::bench::multires::g0"), Kokkos::WithoutInitializing), n, n);
  {
    auto h = Kokkos::create_mirror_view(st->g0);
    for (std::size_t i = 0; i < h.size(); ++i) {
      if constexpr (std::is_same_v<FineT, float>)
        h.data()[i] = in.noisy.data.data()[i];
      else
        h.data()[i] = in.noisy16.data()[i];
    }
    Kokkos::deep_copy(st->g0, h);
  }
  st->g1 = DevLevel<LayerT>(Kokkos::view_alloc(std::string("kortex::bench::multires::g1"), Kokkos::WithoutInitializing),
                            sizes[1].ny, sizes[1].nx);
  md::reduceLevel<Exec, FineT, LayerT>(exec, st->g0, st->g1, st->cfg);
  const double setBytes = 2.0 * sizeof(FineT) * double(n) * double(n);
  st->k = ctx.slots(setBytes);
  if (op == PyrOp::ExpandDecompose) {
    for (int s = 0; s < st->k; ++s) {
      st->fine.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::fine_in"), Kokkos::WithoutInitializing), n, n);
      st->lap.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::lap_out"), Kokkos::WithoutInitializing), n, n);
      Kokkos::deep_copy(exec, st->fine.back(), st->g0);
    }
  } else {
    st->l0 = DevLevel<LayerT>(Kokkos::view_alloc(std::string("kortex::bench::multires::l0"), Kokkos::WithoutInitializing), n, n);
    md::laplacianLevel<Exec, FineT, LayerT>(exec, st->g0, st->g1, st->l0, st->cfg, st->tmp);
    for (int s = 0; s < st->k; ++s)
      st->fine.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::fine_out"), Kokkos::WithoutInitializing), n, n);
  }
  exec.fence();
  Case c;
  if (op == PyrOp::ExpandDecompose) {
    c.run = [&ctx, st] {
      st->advance();
      md::laplacianLevel<Exec, FineT, LayerT>(ctx.exec(), st->fine[st->last], st->g1, st->lap[st->last], st->cfg,
                                              st->tmp);
    };
    // The layer must be finite, and reconstructing level 0 from it must return g_0.
    c.check = [&ctx, st, n] {
      DevLevel<FineT> back("kortex::bench::multires::check", n, n);
      md::reconstructLevel<Exec, LayerT, FineT>(ctx.exec(), st->lap[st->last], st->g1, back, st->cfg, st->tmp);
      ctx.exec().fence();
      auto lap = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->lap[st->last]);
      for (std::size_t i = 0; i < lap.size(); ++i)
        if (!std::isfinite(static_cast<double>(lap.data()[i]))) return std::string("non-finite layer pixel");
      auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), back);
      auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->g0);
      return checkLevel0(a, b, false);
    };
  } else {
    c.run = [&ctx, st] {
      st->advance();
      md::reconstructLevel<Exec, LayerT, FineT>(ctx.exec(), st->l0, st->g1, st->fine[st->last], st->cfg, st->tmp);
    };
    c.check = [st] {
      auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->fine[st->last]);
      auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->g0);
      return checkLevel0(a, b, true);
    };
  }
  return c;
}

// The whole decompose (inputs rotate) or reconstruct (outputs rotate) phase of a plan without
// filtering; the check reconstructs and compares with the input (the round trip is the identity).
template <class T>
Case fig5Phase(Context& ctx, Fig5Row& row, PyrOp op) {
  const Index n = row.n;
  Input& in = ctx.input(n);
  constexpr bool kInt = std::is_same_v<T, std::uint16_t>;
  auto st = std::make_shared<PlanImages<T>>();
  MultiresParams p = baseParams(in.sigma, kInt);
  p.filter = false;
  p.pyramid = row.variant;
  st->plan = std::make_unique<gpu::MultiresPlan<Exec, T>>(ctx.exec(), n, n, p);
  const MultiresTiles mt = st->plan->tiles();
  if (row.variant == PyramidVariant::FusedExpand)
    row.tile = std::to_string(mt.pyramidX) + "x" + std::to_string(mt.pyramidY);
  DevImage<T> src(Kokkos::view_alloc(std::string("kortex::bench::multires::image"), Kokkos::WithoutInitializing), 1, n, n);
  copyInput(src, in);
  st->k = ctx.slots(2.0 * sizeof(T) * double(n) * double(n));
  for (int s = 0; s < st->k; ++s) {
    if (op == PyrOp::Decompose) {
      st->in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::in"), Kokkos::WithoutInitializing), 1, n, n);
      Kokkos::deep_copy(st->in.back(), src);
    } else {
      st->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::out"), Kokkos::WithoutInitializing), 1, n, n);
    }
  }
  if (op == PyrOp::Decompose) {
    st->out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::out"), Kokkos::WithoutInitializing), 1, n, n);
  } else {
    st->in.push_back(src);
    st->plan->decompose(src);
  }
  Kokkos::fence();
  Case c;
  if (op == PyrOp::Decompose) {
    c.run = [st] { st->plan->decompose(st->in[st->advance()]); };
  } else {
    c.run = [st] { st->plan->reconstruct(st->out[st->advance()]); };
  }
  c.check = [&ctx, st, op, &in] {
    DevImage<T> out = op == PyrOp::Decompose ? st->out[0] : st->out[st->last];
    if (op == PyrOp::Decompose) st->plan->reconstruct(out);
    ctx.exec().fence();
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
    if constexpr (kInt)
      return checkEqual(h, in.noisy16, "decompose + reconstruct (no filter) vs the input");
    else
      return checkClose(asHostImage(h, in), in.noisy, kFloatRelTol, "decompose + reconstruct (no filter) vs the input");
  };
  return c;
}

}  // namespace

std::vector<Fig5Row> runFig5(Context& ctx) {
  std::vector<Fig5Row> rows;
  for (Index n : fig5Sizes(ctx.tiny())) {
    for (bool integer : {false, true})
      for (auto v : pyramidVariants(integer)) {
        Fig5Row row{n, integer, v, {}, {false, false, false, false}, "-"};
        bool any = false;
        for (int o = 0; o < 4; ++o) {
          row.selected[o] = ctx.selected(fig5Label(n, integer, v, kPyrOps[o]));
          any = any || row.selected[o];
          row.ops[o].impl = opName(kPyrOps[o]);
          row.ops[o].threads = kx::concurrency(ctx.exec());
        }
        if (!any) continue;
        rows.push_back(row);
      }
  }
  // Ascending sizes: the 512^2 rates estimate the 4096^2 costs.
  for (auto& row : rows)
    for (int o = 0; o < 4; ++o) {
      if (!row.selected[o]) continue;
      const PyrOp op = kPyrOps[o];
      const std::string key = std::string("pyr|") + (row.integer ? "int|" : "float|") + toString(row.variant) + "|" +
                              opName(op);
      ctx.measure(row.ops[o], fig5Label(row.n, row.integer, row.variant, op), true, key,
                  double(row.n) * double(row.n), [&] {
                    if (op == PyrOp::ExpandDecompose || op == PyrOp::ExpandReconstruct)
                      return row.integer ? fig5Operator<std::uint16_t, std::int16_t>(ctx, row, op)
                                         : fig5Operator<float, float>(ctx, row, op);
                    return row.integer ? fig5Phase<std::uint16_t>(ctx, row, op) : fig5Phase<float>(ctx, row, op);
                  });
    }
  ctx.releaseLargeInputs();
  return rows;
}

}  // namespace kortex::bench::multires
