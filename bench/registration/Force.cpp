// Registration benchmark, Fig 1 and Table 1: the force kernel (f = -dE/du and E(u), one launch) vs
// volume size per variant (default tile), and per explored tile at the largest size with the
// kernels' resources and occupancy (CUDA builds; queried from this translation unit, which
// instantiates and launches the same kernels).
#include "bench/registration/RegistrationBench.hpp"

#include <cmath>
#include <exception>
#include <string>

#include "core/Occupancy.hpp"
#include "core/Timing.hpp"
#include "gpu/Resources.hpp"

namespace kortex::bench::registration {

using common::fixedDecimals;
using common::selected;

namespace {

#if KORTEX_CUDA_KERNEL_RESOURCES
template <class Policy, class Functor>
nlohmann::json kernelJson(Policy const& policy, Functor const& f) {
  ri::EnergySums sums;
  const auto info = gpu::cudaParallelReduceInfo(policy, f, sums);
  const auto lim = gpu::currentDeviceLimits();
  if (!info || !lim) return {};
  const OccupancyReport r = occupancy(*lim, info->resources);
  return {{"registers", info->resources.registersPerThread},
          {"static_shared_bytes", info->resources.staticSharedBytes},
          {"dynamic_shared_bytes", info->resources.dynamicSharedBytes},
          {"local_bytes", info->resources.localBytesPerThread},
          {"threads_per_block", info->resources.threadsPerBlock},
          {"blocks_per_sm_model", r.blocksPerSm},
          {"blocks_per_sm_api", info->occupancyApiBlocksPerSm},
          {"occupancy_model", r.occupancy},
          {"limiter", toString(r.limiter)},
          {"launch_mechanism", info->launchMechanism},
          {"closure_bytes", info->closureBytes}};
}
#endif

// Resources of one force launch as computeForce makes it (CUDA builds; queried from this
// translation unit, which instantiates and launches the same kernels), else empty.
nlohmann::json resourcesJson(Exec const& exec, DeviceVolume const& d, ri::ForceLaunchInfo const& info) {
  (void)exec;
  (void)d;
  (void)info;
#if KORTEX_CUDA_KERNEL_RESOURCES
  const ri::ForceViews<Mem> views{d.samples, d.fixed, d.u, d.f};
  const float lam = float(kLambda);
  switch (info.variant) {
    case RegistrationVariant::Naive:
      return kernelJson(Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, d.e.voxels()),
                        ri::NaiveForceFunctor<Mem>{views, d.e, lam});
    case RegistrationVariant::Recompute:
      return kernelJson(ri::forceTeamPolicy(exec, info),
                        ri::forceTeamFunctor<ri::RecomputeForceFunctor<Exec>>(views, d.e, lam, info));
    case RegistrationVariant::Reuse:
      return kernelJson(ri::forceTeamPolicy(exec, info),
                        ri::forceTeamFunctor<ri::ReuseForceFunctor<Exec>>(views, d.e, lam, info));
    case RegistrationVariant::TwoPass: {  // its second pass (f from the stress field), as reduceVoxels launches it
      const int n = static_cast<int>(d.e.voxels());
      return kernelJson(gpu::inOrderPolicy(exec, n),
                        gpu::InOrderTiles<Exec, ri::DivergencePassFunctor<Mem>>{
                            ri::DivergencePassFunctor<Mem>{views, ri::RandomField<Mem>(d.u), d.e, lam}, n});
    }
  }
#endif
  return {};
}

}  // namespace

void runForce(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  Exec& exec = ctx.exec;
  std::ostringstream& md = ctx.md;
  const int reps = ctx.reps, warm = ctx.warm;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto fail = [&](std::string const& what) { ctx.fail(what); };
  std::vector<Index> const& forceSizes = ctx.forceSizes;
const std::vector<RegistrationVariant> variants = {RegistrationVariant::Naive, RegistrationVariant::Recompute,
                                                   RegistrationVariant::Reuse, RegistrationVariant::TwoPass};
// Tiles explored per team variant (the first entry with zeros = the variant's default).
const std::vector<ri::ForceTile> tiles = {{0, 0, 0}, {32, 4, 0}, {32, 2, 0}, {16, 8, 0}, {16, 4, 0}, {64, 2, 0}};
nlohmann::json fig1 = nlohmann::json::array();
nlohmann::json table1 = nlohmann::json::array();
md << "## Fig 1: force kernel (f = -dE/du and E(u), one launch) vs volume size\n\n"
   << "| size | variant | tile | team | scratch B | teams | ms | GFLOP/s (158/voxel) | GB/s (32 B/voxel) |\n"
   << "|---|---|---|---|---|---|---|---|---|\n";
std::ostringstream t1;
t1 << "## Table 1: force kernels, resources and occupancy at the largest Fig 1 size\n\n"
   << "| variant | tile (x*y, z chunk) | team | registers | static smem B | scratch B | local B | teams/SM model "
      "| teams/SM CUDA API | limiter | ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
const Index nLargest = forceSizes.back();
for (Index n : forceSizes) {
  const std::string label = "Fig1 " + std::to_string(n) + "^3";
  if (!selected(opt.only, label) && !selected(opt.only, "Table1")) continue;
  say("force kernels at " + std::to_string(n) + "^3");
  Volume h = makeVolume(n);
  DeviceVolume d = upload(h);
  for (auto v : variants) {
    const bool explore = (n == nLargest) && v != RegistrationVariant::Naive && v != RegistrationVariant::TwoPass;
    const std::vector<ri::ForceTile> mine = explore ? tiles : std::vector<ri::ForceTile>{{0, 0, 0}};
    for (auto const& t : mine) {
      ri::ForceLaunchInfo info;
      try {
        info = ri::forceLaunchInfo(exec, d.e, v, t);
      } catch (std::exception const& ex) {
        continue;  // tile does not fit this backend's scratch
      }
      if (t.x > 0 && v != RegistrationVariant::Naive && v != RegistrationVariant::TwoPass) {
        ri::ForceLaunchInfo def = ri::forceLaunchInfo(exec, d.e, v, {});
        if (def.tileX == info.tileX && def.tileY == info.tileY) continue;  // the default again
      }
      RegistrationEnergy energy;
      const ri::ForceViews<Mem> views = forceViews(d, v);
      auto run = [&] { energy = ri::computeForce(exec, views, d.e, kLambda, info); };
      TimingStats ts = timeMedian(run, [&] { exec.fence(); }, warm, reps);
      const double vox = double(n) * n * n;
      if (!std::isfinite(energy.total)) fail("force " + std::string(toString(v)) + " at " + label + ": energy not finite");
      ++rep.measured;
      const double gflops = kPaperFlopsPerVoxel * vox / (ts.medianMs * 1e-3) * 1e-9;
      const double gbs = kForceBytesPerVoxel * vox / (ts.medianMs * 1e-3) * 1e-9;
      nlohmann::json row = {{"size", n},          {"variant", toString(v)},
                            {"tile", {info.tileX, info.tileY, info.chunk}},
                            {"team_size", info.teamSize}, {"scratch_bytes", info.scratchBytes},
                            {"teams", info.teams}, {"median_ms", ts.medianMs},
                            {"min_ms", ts.minMs},  {"reps", ts.repetitions},
                            {"gflops_paper", gflops}, {"GBs", gbs},
                            {"default_tile", t.x == 0}};
      nlohmann::json res = resourcesJson(exec, d, info);
      if (!res.empty()) row["resources"] = res;
      fig1.push_back(row);
      const std::string tile = std::to_string(info.tileX) + "x" + std::to_string(info.tileY) + ", " +
                               std::to_string(info.chunk);
      if (t.x == 0)
        md << "| " << n << "^3 | " << toString(v) << " | " << tile << " | " << info.teamSize << " | "
           << info.scratchBytes << " | " << info.teams << " | " << fixedDecimals(ts.medianMs) << " | " << fixedDecimals(gflops, 0)
           << " | " << fixedDecimals(gbs, 0) << " |\n";
      if (n == nLargest) {
        table1.push_back(row);
        auto get = [&](const char* k) -> std::string {
          if (!res.contains(k)) return "-";
          return res[k].is_string() ? res[k].get<std::string>() : res[k].dump();
        };
        t1 << "| " << toString(v) << (t.x == 0 ? " (default)" : "") << " | " << tile << " | " << info.teamSize
           << " | " << get("registers") << " | " << get("static_shared_bytes") << " | " << info.scratchBytes
           << " | " << get("local_bytes") << " | " << get("blocks_per_sm_model") << " | "
           << get("blocks_per_sm_api") << " | " << get("limiter") << " | " << fixedDecimals(ts.medianMs) << " |\n";
      }
    }
  }
}
md << "\n" << t1.str() << "\n";
  ctx.j["fig1"] = fig1;
  ctx.j["table1"] = table1;
}

}  // namespace kortex::bench::registration
