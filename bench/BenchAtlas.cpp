// `kortex bench atlas`: the atlas tables of Ha et al. 2010 (see bench/BenchAtlas.hpp for what is
// measured and how). This file checks the options, builds the cohorts, writes the report's header
// and its targets and runs the sections in order; the sections live in bench/atlas/
// (AtlasBench.hpp: Iteration.cpp + Streaming.cpp, Whole.cpp, Cpu.cpp, Scaling.cpp, Sums.cpp; the cohorts in
// Cohort.cpp), sharing one atlas::Context.
#include "bench/BenchAtlas.hpp"

#include <cstdint>
#include <cstdio>

#include "bench/BenchCommon.hpp"
#include "bench/atlas/AtlasBench.hpp"
#include "core/Errors.hpp"
#include "gpu/atlas/Atlas.hpp"
#include "io/Output.hpp"

namespace kortex::bench {
namespace atlas {

Context::Context(BenchOptions const& o, BenchReport& r, nlohmann::json p, gpu::Communicator* c)
    : common::SectionRun(o, r, std::move(p), "bench atlas: "), comm(c) {
  onDevice = !common::kDeviceIsHostMemory;
  copyGBs = common::measureCopyBandwidth(exec, opt.tiny || !onDevice);
  g = opt.tiny ? Geometry::make3D(24, 32, 28) : (onDevice ? Geometry::make3D(160, 192, 144) : Geometry::make3D(48, 64, 56));
  large = opt.tiny ? 3 : (onDevice ? (opt.quick ? 64 : 315) : 6);
  small = opt.tiny ? 3 : (onDevice ? 20 : 4);
  voxels = double(g.numVoxels());
}

std::pair<AtlasResult, double> Context::run(std::vector<HostImage> const& imgs, AtlasParams const& p) {
  HostImage t;
  std::vector<VectorField<Kokkos::HostSpace>> f;
  exec.fence();
  const auto t0 = Clock::now();
  gpu::AtlasRun solo;
  solo.returnFields = false;  // the template comes back; the fields stay on the device
  AtlasResult r = gpu::buildAtlas(exec, imgs, p, t, f, solo);
  exec.fence();
  const double s = secondsSince(t0);
  std::uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(t.data.data());
  for (std::size_t k = 0; k < t.data.size() * sizeof(float); ++k) h = (h ^ bytes[k]) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  templateHash = hex;
  if (!(r.minJacobian > 0.0f)) fail("a field folded (min det " + common::fixedDecimals(r.minJacobian) + ")");
  return std::make_pair(r, s);
}

}  // namespace atlas

BenchReport runAtlasBench(BenchOptions const& opt) {
  using common::fixedDecimals;
  using common::selected;
  const auto tStart = Clock::now();
  BenchReport rep;
  nlohmann::json peers = common::checkOptions(opt, "atlas");
  std::vector<std::string> labels = {"Whole", "CPU", "Scaling", "Sums over ranks"};
  for (GreedySolver s : atlas::kIterationSolvers) labels.push_back(atlas::iterationLabel(s));
  common::requireOnlyMatches(opt, labels, "atlas", "\"Whole\" or \"Iteration fft\"");
  bool iteration = false;
  for (GreedySolver s : atlas::kIterationSolvers) iteration = iteration || selected(opt.only, atlas::iterationLabel(s));
  gpu::Communicator* comm = opt.comm != nullptr && opt.comm->size() > 1 ? opt.comm : nullptr;
  const bool grouped = common::selected(opt.only, "Scaling") || common::selected(opt.only, "Sums over ranks");
  if (comm && (opt.only.empty() || !grouped || common::selected(opt.only, "Whole") || iteration ||
               common::selected(opt.only, "CPU")))
    throw InvalidArgument("bench atlas: under " + std::to_string(comm->size()) +
                          " processes only the \"Scaling\" or the \"Sums over ranks\" section runs (select one alone)");
  atlas::Context ctx(opt, rep, std::move(peers), comm);
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  j["kind"] = "kortex-bench-atlas";
  j["environment"] = io::environmentJson(true);
  j["copy_bandwidth_GBs"] = ctx.copyGBs;
  j["grid"] = describe(ctx.g);
  std::string source;
  ctx.say("building the cohorts");
  ctx.base = atlas::baseImages(opt, ctx.g, source);
  const bool single = iteration || selected(opt.only, "Whole") || selected(opt.only, "CPU");
  if (single) ctx.big = atlas::cohort(ctx.base, ctx.large);
  j["cohort"] = {{"source", source}, {"subjects", ctx.large}, {"perturbation", "smoothDisplacement max 3 voxels, seed 1000 + i"}};
  AtlasParams defaults;
  md << "# Kortex atlas benchmark (Ha et al. 2010)\n\n"
     << "Device: " << j["environment"].value("device", std::string("?")) << ", Kokkos " << atlas::Exec::name() << ", git "
     << j["environment"].value("git_hash", std::string("?")) << ", one process. Measured copy bandwidth "
     << fixedDecimals(ctx.copyGBs, 0) << " GB/s. Grid " << describe(ctx.g) << "; cohort of " << ctx.large << " subjects: " << source
     << ", subject i under a seeded random smooth diffeomorphic displacement (max 3 voxels, seed 1000 + i). Operator "
     << "alpha " << defaults.greedy.fluid.alpha << ", gamma " << defaults.greedy.fluid.gamma << ", max step "
     << defaults.greedy.maxStep << " voxel.\n\n";

  if (iteration) atlas::runIteration(ctx);
  if (selected(opt.only, "Whole")) atlas::runWhole(ctx);
  if (selected(opt.only, "CPU")) atlas::runCpu(ctx);
  if (selected(opt.only, "Scaling")) atlas::runScaling(ctx);
  if (selected(opt.only, "Sums over ranks")) atlas::runSums(ctx);
  // This report's own targets (the atlas's; the greedy iteration's are in bench greedy's report).
  for (const char* key : {"target_iteration", "target_whole"})
    if (j.contains(key))
      md << "Atlas target: " << (std::string(key) == "target_iteration" ? "one 315-subject iteration" : "the whole 315-subject atlas")
         << " <= " << j[key]["target_s"].get<double>() << " s: " << (j[key]["met"].get<bool>() ? "met" : "missed") << " ("
         << fixedDecimals(j[key]["measured_s"].get<double>(), 3) << " s).\n";
  common::finishReport(rep, j, md.str(), tStart, opt);
  return rep;
}

}  // namespace kortex::bench
