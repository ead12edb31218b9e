// Atlas benchmark, Scaling: one rank per GPU (under mpirun; one process alone gives the 1-GPU
// baseline): the whole multi-scale atlas of 20 and 315 subjects split evenly over the ranks, every
// reduction path the group can take, the time split (set-up, compute, sums over ranks: the max over
// ranks), the template's hash (equal for every rank count and path: the fixed-point sums), and the
// run-time model of core/Atlas.hpp from a dry run on each rank's device.
#include "bench/atlas/AtlasBench.hpp"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/atlas/Atlas.hpp"
#include "io/Output.hpp"

namespace kortex::bench::atlas {

using common::fixedDecimals;
namespace fs = std::filesystem;

namespace {

// The schedule of the Scaling section and this rank's place in the group.
struct Plan {
  int K = 1, rank = 0;
  std::vector<int> sizes, scales, iters;
  int dryIters = 0, dryLarge = 0;
};

// The group's run-time model for n subjects (this rank's first subject: `first`): a dry run on this
// rank alone (iteration time on 2 and dryLarge subjects -> t0 + n ts per scale), every rank's costs
// gathered.
AtlasCostModel costModel(Context& ctx, Plan const& plan, int n, int first) {
  Exec& exec = ctx.exec;
  gpu::Communicator* comm = ctx.comm;
  std::vector<HostImage> const& base = ctx.base;
  const int K = plan.K, rank = plan.rank, dryIters = plan.dryIters, dryLarge = plan.dryLarge;
  std::vector<int> const& scales = plan.scales;
  std::vector<int> const& iters = plan.iters;
  std::vector<int> dry(static_cast<std::size_t>(dryLarge));
  for (int i = 0; i < dryLarge; ++i) dry[std::size_t(i)] = (first + i) % n;
  AtlasRankCost cost;
  {
    const std::vector<HostImage> dryImgs = subjects(base, dry);
    AtlasParams p;
    p.greedy.scales = scales;
    p.greedy.iterations = {dryIters, dryIters};
    auto dryRun = [&](int m) {
      const std::vector<HostImage> some(dryImgs.begin(), dryImgs.begin() + m);
      HostImage t;
      std::vector<VectorField<Kokkos::HostSpace>> f;
      gpu::AtlasRun solo;
      solo.returnFields = false;
      return gpu::buildAtlas(exec, some, p, t, f, solo);
    };
    const AtlasResult a = dryRun(2), b = dryRun(dryLarge);
    const auto ta = iterationSecondsPerScale(a, scales.size()), tb = iterationSecondsPerScale(b, scales.size());
    for (std::size_t sc = 0; sc < scales.size(); ++sc) {
      const double ts = std::max(0.0, (tb[sc] - ta[sc]) / double(dryLarge - 2));
      cost.perSubjectS.push_back(ts);
      cost.fixedS.push_back(std::max(0.0, ta[sc] - 2.0 * ts));
    }
    cost.setupPerSubjectS = b.secondsSetup / double(dryLarge);
  }
  // Gather every rank's costs: [t0_s..., ts_s..., c] per rank.
  const std::size_t per = 2 * scales.size() + 1;
  std::vector<double> costSlots(per * std::size_t(K), 0.0);
  for (std::size_t sc = 0; sc < scales.size(); ++sc) {
    costSlots[per * std::size_t(rank) + sc] = cost.fixedS[sc];
    costSlots[per * std::size_t(rank) + scales.size() + sc] = cost.perSubjectS[sc];
  }
  costSlots[per * std::size_t(rank) + per - 1] = cost.setupPerSubjectS;
  if (comm) comm->sum(costSlots.data(), costSlots.size());
  AtlasCostModel model;
  model.iterations = iters;
  for (int r = 0; r < K; ++r) {
    AtlasRankCost c;
    for (std::size_t sc = 0; sc < scales.size(); ++sc) {
      c.fixedS.push_back(costSlots[per * std::size_t(r) + sc]);
      c.perSubjectS.push_back(costSlots[per * std::size_t(r) + scales.size() + sc]);
    }
    c.setupPerSubjectS = costSlots[per * std::size_t(r) + per - 1];
    model.ranks.push_back(c);
  }
  return model;
}

// The whole atlas of this rank's subjects `imgs` for n subjects split as `counts`, over every
// reduction path the group can take: a row each (Markdown and `rows`), the template dumped where
// the options ask.
void runPaths(Context& ctx, Plan const& plan, int n, std::vector<int> const& counts, int first,
              std::vector<HostImage> const& imgs, AtlasCostModel& model, nlohmann::json& rows) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  std::ostringstream& md = ctx.md;
  Exec& exec = ctx.exec;
  gpu::Communicator* comm = ctx.comm;
  const bool onDevice = ctx.onDevice;
  Geometry const& g = ctx.g;
  const int K = plan.K, rank = plan.rank;
  std::vector<int> const& scales = plan.scales;
  std::vector<int> const& iters = plan.iters;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto fail = [&](std::string const& what) { ctx.fail(what); };
  std::vector<gpu::ReductionPath> paths{gpu::ReductionPath::HostStaged};
  if (comm && onDevice) paths = {gpu::ReductionPath::HostStaged, gpu::ReductionPath::Nccl, gpu::ReductionPath::DeviceMpi};
  for (gpu::ReductionPath path : paths) {
    const std::string pathName = comm ? toString(path) : "none";
    if (comm && !comm->useReduction(path)) {
      md << "| " << n << " | " << K << " | " << pathName << " | | not available on this machine | | | | | | |\n";
      rows.push_back({{"subjects", n}, {"ranks", K}, {"path", pathName}, {"available", false}});
      continue;
    }
    // T_network: the two sums of one iteration (template: voxels; mean displacement: 3 voxels).
    model.networkS.clear();
    for (int f : scales) {
      const std::size_t v = std::size_t(scaledExtents(g, f).voxels());
      model.networkS.push_back(gpu::atlasSumSeconds(exec, comm, v, 5) + gpu::atlasSumSeconds(exec, comm, 3 * v, 5));
    }
    const auto pred = model.predict(counts);
    AtlasParams p;
    p.greedy.scales = scales;
    p.greedy.iterations = iters;
    gpu::AtlasRun run;
    run.comm = comm;
    run.first = first;
    run.total = n;
    run.returnFields = false;  // as in the Whole section: the template comes back
    HostImage t;
    std::vector<VectorField<Kokkos::HostSpace>> f;
    say(std::to_string(n) + " subjects over " + std::to_string(K) + " ranks, path " + pathName);
    exec.fence();
    if (comm) comm->barrier();
    const auto t0 = Clock::now();
    const AtlasResult r = gpu::buildAtlas(exec, imgs, p, t, f, run);
    exec.fence();
    if (comm) comm->barrier();
    const double wall = secondsSince(t0);
    const auto itS = iterationSecondsPerScale(r, scales.size());
    // Per rank: wall, set-up, compute, sums; the max and every rank's in the JSON.
    std::vector<double> slots(4 * std::size_t(K), 0.0);
    slots[4 * std::size_t(rank) + 0] = wall;
    slots[4 * std::size_t(rank) + 1] = r.secondsSetup;
    slots[4 * std::size_t(rank) + 2] = r.secondsCompute;
    slots[4 * std::size_t(rank) + 3] = r.secondsReduce;
    if (comm) comm->sum(slots.data(), slots.size());
    double mx[4] = {0, 0, 0, 0};
    nlohmann::json perRank = nlohmann::json::array();
    for (int q = 0; q < K; ++q) {
      for (int c = 0; c < 4; ++c) mx[c] = std::max(mx[c], slots[4 * std::size_t(q) + std::size_t(c)]);
      perRank.push_back({{"seconds", slots[4 * std::size_t(q)]}, {"setup_s", slots[4 * std::size_t(q) + 1]},
                         {"compute_s", slots[4 * std::size_t(q) + 2]}, {"reduce_s", slots[4 * std::size_t(q) + 3]},
                         {"subjects", counts[std::size_t(q)]}});
    }
    const std::string hash = fnv1a(t);
    if (!(r.minJacobian > 0.0f)) fail("a field folded (min det " + fixedDecimals(r.minJacobian) + ")");
    std::ostringstream cnt;
    cnt << counts.front();
    if (counts.back() != counts.front()) cnt << "-" << counts.back();
    md << "| " << n << " | " << K << " | " << pathName << " | " << cnt.str() << " | " << fixedDecimals(mx[0], 2) << " | "
       << fixedDecimals(mx[1], 2) << " | " << fixedDecimals(mx[2], 2) << " | " << fixedDecimals(mx[3], 2) << " | "
       << fixedDecimals(1e3 * itS.back(), 1) << " | " << fixedDecimals(pred.total(), 2) << " (" << fixedDecimals(pred.gpu, 2)
       << " + " << fixedDecimals(pred.cpu, 2) << " + " << fixedDecimals(pred.network, 2) << ") | `" << hash << "` |\n";
    nlohmann::json costs = nlohmann::json::array();
    for (auto const& c : model.ranks)
      costs.push_back({{"fixed_s", c.fixedS}, {"per_subject_s", c.perSubjectS}, {"setup_per_subject_s", c.setupPerSubjectS}});
    rows.push_back({{"subjects", n}, {"ranks", K}, {"path", pathName}, {"available", true}, {"counts", counts},
                    {"seconds", mx[0]}, {"setup_s", mx[1]}, {"compute_s", mx[2]}, {"reduce_s", mx[3]},
                    {"iteration_s_per_scale", itS}, {"per_rank", perRank}, {"template_fnv1a", hash},
                    {"final_mismatch", r.history.back().mismatch}, {"min_jacobian", r.minJacobian},
                    {"mean_displacement_rms", r.meanDisplacementRms},
                    {"model", {{"gpu_s", pred.gpu}, {"cpu_s", pred.cpu}, {"network_s", pred.network}, {"total_s", pred.total()},
                               {"network_per_iteration_s", model.networkS}, {"ranks", costs}, {"iterations", iters}}}});
    ++rep.measured;
    if (!opt.dumpDir.empty() && rank == 0) {
      const fs::path out = fs::path(opt.dumpDir) / ("atlas_template_" + std::to_string(n) + "_ranks" + std::to_string(K) + "_" + pathName + ".f32");
      std::string bytes(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
      io::writeTextFileAtomic(out, bytes);
    }
  }
}

}  // namespace

void runScaling(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  gpu::Communicator* comm = ctx.comm;
  const bool onDevice = ctx.onDevice;
  Geometry const& g = ctx.g;
  const int large = ctx.large, small = ctx.small;
  std::vector<HostImage> const& base = ctx.base;
  auto say = [&](std::string const& s) { ctx.say(s); };
  Plan plan;
  plan.K = comm ? comm->size() : 1;
  plan.rank = comm ? comm->rank() : 0;
  const int K = plan.K, rank = plan.rank;
  plan.sizes = opt.tiny ? std::vector<int>{4, 6} : (onDevice ? std::vector<int>{small, large} : std::vector<int>{4, 6});
  plan.scales = {2, 1};
  plan.iters = opt.tiny ? std::vector<int>{2, 3} : std::vector<int>{25, 50};
  plan.dryIters = opt.tiny ? 3 : 4;
  plan.dryLarge = opt.tiny ? 3 : 6;
  std::vector<int> const& sizes = plan.sizes;
  std::vector<int> const& scales = plan.scales;
  std::vector<int> const& iters = plan.iters;
  const int dryIters = plan.dryIters, dryLarge = plan.dryLarge;
  md << "## Scaling over " << K << (K == 1 ? " process" : " processes (one per GPU)") << ": whole atlas, "
     << iters[0] << " + " << iters[1] << " iterations at x2, x1\n\n"
     << "Group: " << (opt.comm ? opt.comm->describe() : std::string("1 process")) << ". Times are the max over ranks "
     << "(fenced; the sums include waiting for the slowest rank). Model: T = T_GPU + T_CPU + T_network (core/Atlas.hpp) "
     << "from a dry run (" << dryIters << " iterations per scale on 2 and " << dryLarge << " subjects on each rank's device, "
     << "alone) and the sums of one iteration timed on the group.\n\n"
     << "| subjects | ranks | path | subjects per rank | seconds | set-up s | compute s | sums s | iteration ms (x1) "
     << "| model s (GPU + CPU + network) | template FNV-1a |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  for (int n : sizes) {
    if (n < K) {
      md << "| " << n << " | " << K << " | skipped: fewer subjects than ranks | | | | | | | | |\n";
      continue;
    }
    // Even split (equal speeds); the dry run below measures whether the ranks differ.
    const std::vector<int> counts = atlasBalance(n, std::vector<double>(std::size_t(K), 1.0));
    int first = 0;
    for (int r = 0; r < rank; ++r) first += counts[std::size_t(r)];
    const int local = counts[std::size_t(rank)];
    std::vector<int> mine(static_cast<std::size_t>(local));
    for (int i = 0; i < local; ++i) mine[std::size_t(i)] = first + i;
    say(std::to_string(n) + " subjects, rank " + std::to_string(rank) + " of " + std::to_string(K) + ": building " +
        std::to_string(local) + " subjects");
    const std::vector<HostImage> imgs = subjects(base, mine);
    AtlasCostModel model = costModel(ctx, plan, n, first);
    runPaths(ctx, plan, n, counts, first, imgs, model, rows);
  }
  j["scaling"] = {{"ranks", K}, {"group", opt.comm ? opt.comm->describe() : std::string("1 process")}, {"grid", describe(g)},
                  {"schedule", {{"scales", scales}, {"iterations", iters}}}, {"rows", rows}};
  md << "\n";
}

}  // namespace kortex::bench::atlas
