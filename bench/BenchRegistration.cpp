// `kortex bench register`: the registration part of Lee et al. (see bench/BenchRegistration.hpp for
// what is measured and how). This file checks the options, writes the report's header and runs the
// sections in order; the sections live in bench/registration/ (RegistrationBench.hpp: Force.cpp,
// Iteration.cpp, Targets.cpp; the inputs in Volume.cpp), sharing one registration::Context.
#include "bench/BenchRegistration.hpp"

#include "bench/BenchCommon.hpp"
#include "bench/registration/RegistrationBench.hpp"
#include "core/Timing.hpp"
#include "io/Output.hpp"

namespace kortex::bench {
namespace registration {

Context::Context(BenchOptions const& o, BenchReport& r, nlohmann::json p) : common::SectionRun(o, r, std::move(p)) {
  onDevice = !common::kDeviceIsHostMemory;
  if (opt.tiny) {
    forceSizes = {24, 32};
    iterSizes = {24, 32};
  } else if (opt.quick) {
    forceSizes = {64, 128, 240};
    iterSizes = {128, 240};
  } else {
    forceSizes = {64, 96, 128, 160, 192, 224, 240, 256};
    iterSizes = {128, 160, 192, 224, 240, 256};
  }
  if (!onDevice && !opt.tiny) {  // host Kokkos: keep the sizes a CPU can do in minutes
    forceSizes = {32, 64, 96};
    iterSizes = {32, 64};
  }
  reps = opt.tiny ? 2 : 10;
  warm = opt.tiny ? 1 : 3;
  copyGBs = common::measureCopyBandwidth(exec, opt.tiny || !onDevice);
}

}  // namespace registration

BenchReport runRegistrationBench(BenchOptions const& opt) {
  using common::fixedDecimals;
  using registration::kLambda;
  using registration::kSigma;
  const auto tStart = Clock::now();
  nlohmann::json peers = common::checkOptions(opt, "register");

  BenchReport rep;
  registration::Context ctx(opt, rep, std::move(peers));
  nlohmann::json& j = ctx.j;
  j["kind"] = "kortex-bench-register";
  j["environment"] = io::environmentJson(true);
  j["copy_bandwidth_GBs"] = ctx.copyGBs;
  j["params"] = {{"lambda", kLambda}, {"sigma", kSigma}, {"flops_per_voxel_paper", registration::kPaperFlopsPerVoxel},
                 {"iteration_bytes_per_voxel", registration::kIterationBytesPerVoxel}};
  ctx.md << "# Kortex registration benchmark (Lee et al.: Table 1, Figs 1, 2a, 2b)\n\n"
         << "Device: " << j["environment"].value("device", std::string("?")) << ", Kokkos "
         << registration::Exec::name() << ", git " << j["environment"].value("git_hash", std::string("?"))
         << ". Measured copy bandwidth " << fixedDecimals(ctx.copyGBs, 0) << " GB/s. lambda " << kLambda << ", sigma "
         << kSigma << " voxel. Inputs: 3D Shepp-Logan n^3 and the same warped by a smooth 3-voxel displacement.\n\n";

  registration::runForce(ctx);
  const double seq240 = registration::runIteration(ctx);
  registration::runTargets(ctx, seq240);
  common::finishReport(rep, j, ctx.md.str(), tStart, opt);
  return rep;
}

}  // namespace kortex::bench
