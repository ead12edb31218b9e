// Surface benchmark: one band size (the noisy sphere, the variants of Fig 4, the default variant's
// neighbours and output for the check, the records and exact neighbours the peer reads at the
// largest size with --dump, then the CPU runs and the check of Fig 5).
#include "bench/surface/SurfaceBench.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "reference_cpu/SurfaceNlm.hpp"

namespace kortex::bench::surface {

using common::fixedDecimals;

HostImage noisySphere(double target, unsigned seed) {
  const double R = std::sqrt(target / (24.0 * M_PI));
  const Index n = static_cast<Index>(std::ceil(2.0 * R + 16.0));
  HostImage phi("kortex::bench::surface::phi", Geometry::make3D(n, n, n));
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, kNoiseSd);
  const double c = (double(n) - 1.0) / 2.0;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x)
        phi.data(z, y, x) = static_cast<float>(std::hypot(x - c, y - c, z - c) - R + noise(rng));
  return phi;
}

void runCase(Context& ctx, std::size_t ci) {
  BenchOptions const& opt = ctx.opt;
  Exec& exec = ctx.exec;
  SurfaceNlmParams const& base = ctx.base;
  const int pv = ctx.pv;
  std::vector<double> const& targets = ctx.targets;
  auto say = [&](std::string const& s) { ctx.say(s); };
  Case c;
  c.ci = ci;
  c.target = targets[ci];
  c.phi = noisySphere(c.target, 100 + static_cast<unsigned>(ci));
  c.in = Kokkos::create_mirror_view_and_copy(Mem(), c.phi.data);
  c.out = ImageView<Mem>("kortex::bench::surface::out", c.in.extent(0), c.in.extent(1), c.in.extent(2));
  c.cj["target"] = c.target;
  c.cj["grid"] = c.in.extent(0);
  runVariants(ctx, c);
  if (c.n == 0) {
    ctx.cases.push_back(c.cj);
    return;
  }
  HostImage const& phi = c.phi;
  ImageView<Mem> const& in = c.in;
  ImageView<Mem>& out = c.out;
  gpu::SurfaceNlmNeighbours<Kokkos::HostSpace>& bestNb = c.bestNb;
  HostImage& bestOut = c.bestOut;
  // Neighbours and output of the default variant, for the CPU check and the peer dump.
  {
    gpu::SurfaceNlmNeighbours<Mem> nb;
    gpu::surfaceDenoise(exec, ConstImageView<Mem>(in), out, base, nullptr, {}, &nb);
    bestNb.index = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nb.index);
    bestNb.distance = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nb.distance);
    bestOut = HostImage("kortex::bench::surface::kokkosOut", phi.geometry);
    Kokkos::deep_copy(bestOut.data, out);
  }
  if (!opt.dumpDir.empty() && ci + 1 == targets.size()) {
    namespace fs = std::filesystem;
    const auto ids = ref::narrowBand(phi, base.band);
    const auto rec = ref::bandPatches(phi, ids, base.patch);
    std::ofstream(fs::path(opt.dumpDir) / "records.f32", std::ios::binary)
        .write(reinterpret_cast<const char*>(rec.data()), static_cast<std::streamsize>(rec.size() * sizeof(float)));
    std::ofstream(fs::path(opt.dumpDir) / "neighbours.i32", std::ios::binary)
        .write(reinterpret_cast<const char*>(bestNb.index.data()),
               static_cast<std::streamsize>(bestNb.index.size() * sizeof(std::int32_t)));
    std::ofstream(fs::path(opt.dumpDir) / "meta.json")
        << nlohmann::json{{"n", ids.size()}, {"patch_voxels", pv}, {"m", base.neighbors}}.dump() << "\n";
    say("dumped records of N = " + std::to_string(ids.size()) + " to " + opt.dumpDir);
  }
  runCpu(ctx, c);
  ctx.cases.push_back(c.cj);
}

}  // namespace kortex::bench::surface
