// Tuners of the multiresolution filter (issue 3): "multires.bilateral", the tile of the layer
// bilateral (gpu/multires/MultiresBilateral.hpp; candidates and pruning: pipeline/MultiresTileSpace.hpp, the
// paper's Fig 6 space), and "multires.pyramid", the coarse tile of the FusedExpand pyramid
// kernels (gpu/multires/MultiresPyramid.hpp). Inputs: a noisy Shepp-Logan phantom (SNR 25) on the
// default execution space; the bilateral uses the paper's sigma_d = 2, 5x5 window and
// sigma_r = 2 sigma_n with the default float variant (MultiresParams{}.bilateral).
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "pipeline/MultiresTileSpace.hpp"
#include "pipeline/Tune.hpp"
#include "core/Errors.hpp"
#include "core/Multires.hpp"
#include "core/Phantom.hpp"
#include "gpu/multires/MultiresBilateral.hpp"
#include "gpu/multires/MultiresPyramid.hpp"
#include "core/QualitySettings.hpp"

namespace kortex::pipeline::tune {

namespace {

namespace md = gpu::multires_detail;
using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;
using Layer = Kokkos::View<float**, Kokkos::LayoutRight, Mem>;

constexpr std::uint64_t kNoiseSeed = 0x4D52ull;

// Noisy phantom as a device layer (ny, nx) = (size, size); sigma_n returned.
Layer noisyLayer(int size, double* sigma) {
  if (size < 8) throw InvalidArgument("tuning multires: image size must be at least 8");
  const HostImage clean = sheppLogan2D(size);
  *sigma = noiseSigmaForSnr(clean, kQualitySnr);
  const HostImage noisy = addGaussianNoise(clean, *sigma, kNoiseSeed);
  Layer d("kortex::tune::multires::input", static_cast<std::size_t>(size), static_cast<std::size_t>(size));
  Kokkos::View<const float**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
      noisy.data.data(), static_cast<std::size_t>(size), static_cast<std::size_t>(size));
  Kokkos::deep_copy(d, h);
  return d;
}

HostImage layerToHost(Layer const& d) {
  HostImage h("kortex::tune::multires::result", Geometry::make2D(static_cast<Index>(d.extent(1)),
                                                                  static_cast<Index>(d.extent(0))));
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(
      h.data.data(), d.extent(0), d.extent(1));
  Kokkos::deep_copy(v, d);
  return h;
}

// ---- multires.bilateral -------------------------------------------------------------------------

Workload prepareBilateral(int size) {
  double sigma = 0.0;
  auto in = std::make_shared<Layer>(noisyLayer(size, &sigma));
  auto out = std::make_shared<Layer>("kortex::tune::multires::output", in->extent(0), in->extent(1));
  MultiresParams p;
  p.sigmaRange = static_cast<float>(kQualityBilateralRangeFactor * sigma);
  const auto host = multiresCloseness(p.radius, p.sigmaSpatial);
  auto closeness = std::make_shared<Kokkos::View<float*, Mem>>("kortex::tune::multires::closeness", host.size());
  Kokkos::deep_copy(*closeness, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                    host.data(), host.size()));
  Workload w;
  w.problem = "noisy Shepp-Logan " + std::to_string(size) + "^2 layer, r=2, sigma_d=2, sigma_r=2 sigma_n, " +
              toString(p.bilateral);
  w.launch = [=](Config const& c) {
    Exec exec;
    md::bilateralLayer(exec, md::ConstLayer<Mem>(*in), *out, md::ConstFloatTable<Mem>(*closeness), p,
                       md::LayerTile{configValue(c, "x"), configValue(c, "y")});
  };
  w.fence = [] { Exec().fence(); };
  w.result = [=] { return layerToHost(*out); };
  return w;
}

// ---- multires.pyramid -----------------------------------------------------------------------------

// Space: coarse tiles x in {8, ..., 256}, y in {1, ..., 64} (powers of two); kept when
//   1. x * y >= 32 (at least a warp of quads) and x * y <= 1024 (one quad per thread at most a
//      CUDA block),
//   2. the tile's scratch (pyramidScratchBytes) fits the execution space,
//   3. x <= coarse width and y <= coarse height (a larger tile only idles threads).
CandidateSet pyramidCandidates(int size) {
  if (size < 8) throw InvalidArgument("tuning multires: image size must be at least 8");
  CandidateSet s;
  const int coarse = (size + 1) / 2;
  const std::size_t maxBytes = md::pyramidScratchMax<Exec>();
  auto prune = [&](std::string const& rule) { countPruned(s, rule); };
  for (int x = 8; x <= 256; x *= 2)
    for (int y = 1; y <= 64; y *= 2) {
      ++s.enumerated;
      if (x * y < 32 || x * y > 1024) {
        prune("32 <= x*y <= 1024 quads per team");
        continue;
      }
      if (md::pyramidScratchBytes(md::PyramidTile{x, y}) > maxBytes) {
        prune("scratch exceeds scratch_size_max(0)");
        continue;
      }
      if (x > coarse || y > coarse) {
        prune("tile larger than the coarse level");
        continue;
      }
      s.candidates.push_back({{"x", x}, {"y", y}});
    }
  s.defaultConfig = {{"x", md::kDefaultPyramidTile.x}, {"y", md::kDefaultPyramidTile.y}};
  s.reference = Config{{"x", 16}, {"y", 16}};
  s.referenceName = "16x16 coarse pixels";
  return s;
}

// One launch: the level-0 Laplacian (l_0 = g_0 - expand(g_1)) and its reconstruction
// (g'_0 = l_0 + expand(g_1)): both fused expand kernels of the finest level, where the time goes.
Workload preparePyramid(int size) {
  double sigma = 0.0;
  auto fine = std::make_shared<Layer>(noisyLayer(size, &sigma));
  const std::size_t cn = static_cast<std::size_t>((size + 1) / 2);
  auto coarse = std::make_shared<Layer>("kortex::tune::multires::coarse", cn, cn);
  auto lap = std::make_shared<Layer>("kortex::tune::multires::laplacian", fine->extent(0), fine->extent(1));
  auto out = std::make_shared<Layer>("kortex::tune::multires::reconstructed", fine->extent(0), fine->extent(1));
  auto tmp = std::make_shared<md::UnfusedBuffers<float, Mem>>();
  md::PyramidConfig cfg;
  cfg.variant = PyramidVariant::FusedExpand;
  Exec exec;
  md::reduceLevel<Exec, float, float>(exec, md::ConstLevel<float, Mem>(*fine), *coarse, cfg);
  exec.fence();
  Workload w;
  w.problem = "noisy Shepp-Logan " + std::to_string(size) + "^2, FusedExpand decompose + reconstruct of level 0";
  w.launch = [=](Config const& c) {
    md::PyramidConfig k = cfg;
    k.tile = md::PyramidTile{configValue(c, "x"), configValue(c, "y")};
    Exec e;
    md::laplacianLevel<Exec, float, float>(e, md::ConstLevel<float, Mem>(*fine), md::ConstLevel<float, Mem>(*coarse),
                                           *lap, k, *tmp);
    md::reconstructLevel<Exec, float, float>(e, md::ConstLevel<float, Mem>(*lap),
                                             md::ConstLevel<float, Mem>(*coarse), *out, k, *tmp);
  };
  w.fence = [] { Exec().fence(); };
  w.result = [=] { return layerToHost(*out); };
  return w;
}

}  // namespace

void registerMultiresTuners() {
  Tuner b;
  b.name = "multires.bilateral";
  b.description = "multires layer bilateral: outputs per team (x, y), the paper's Fig 6 space";
  b.defaultSize = 1024;
  b.agreement = 1e-5;  // the tile changes no arithmetic: outputs agree to float rounding
  b.enumerate = [](int size) { return multiresBilateralCandidates(size); };
  b.prepare = prepareBilateral;
  registerTuner(b);

  Tuner p;
  p.name = "multires.pyramid";
  p.description = "multires FusedExpand pyramid kernels: coarse pixels per team (x, y)";
  p.defaultSize = 4096;  // 64 MiB per float image: beyond the GPU's L2, as a memory-bound kernel needs
  p.agreement = 1e-5;
  p.enumerate = pyramidCandidates;
  p.prepare = preparePyramid;
  registerTuner(p);
}

}  // namespace kortex::pipeline::tune
