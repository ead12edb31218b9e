// Atlas benchmark, Iteration (continued): the same iteration (fft) with only some subjects resident
// on the device, the others streamed from pinned host memory; the template must keep its bits.
#include "bench/atlas/AtlasBench.hpp"

#include <string>
#include <vector>

#include "gpu/atlas/Atlas.hpp"

namespace kortex::bench::atlas {

using common::fixedDecimals;

void runStreaming(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  Exec& exec = ctx.exec;
  const double voxels = ctx.voxels;
  const int large = ctx.large;
  std::vector<HostImage> const& big = ctx.big;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto fail = [&](std::string const& what) { ctx.fail(what); };
  // Streaming: the same iteration (fft) with only some subjects resident, the others streamed
  // from pinned host memory (56 B per voxel and subject cross the bus per iteration: I_i and
  // u_i up twice, u_i down twice).
  const std::vector<int> residents = opt.tiny ? std::vector<int>{large, 1, 0} : std::vector<int>{large, (2 * large) / 3, 0};
  md << "\nStreaming (fft): subjects beyond the resident ones live in pinned host memory and cross the bus twice per "
     << "iteration (I_i and u_i up, u_i down: 56 B per voxel), the next subject's upload overlapping the current one's "
     << "kernels.\n\n| resident | streamed | iteration ms (median) | per subject ms | bus GB/s (streamed bytes / iteration) "
     << "| same template as all resident |\n|---|---|---|---|---|---|\n";
  nlohmann::json srows = nlohmann::json::array();
  HostImage reference;
  for (int resident : residents) {
    AtlasParams p;
    p.greedy.scales = {1};
    p.greedy.iterations = {opt.tiny ? 3 : 4};
    gpu::AtlasRun solo;
    solo.returnFields = false;
    solo.residentSubjects = resident;
    say("iteration, fft, " + std::to_string(resident) + " resident");
    HostImage t;
    std::vector<VectorField<Kokkos::HostSpace>> f;
    exec.fence();
    const AtlasResult r = gpu::buildAtlas(exec, big, p, t, f, solo);
    const TimingStats ts = iterationStats(r);
    const int streamed = large - resident;
    const double busGBs = streamed > 0 ? 56.0 * voxels * streamed / (ts.medianMs * 1e-3) / 1e9 : 0.0;
    if (resident == large) reference = t;
    const bool same = reference.data.size() == t.data.size() && sameBits(reference, t);
    if (!same) fail("streamed atlas (" + std::to_string(resident) + " resident) differs from the all-resident one");
    md << "| " << resident << " | " << streamed << " | " << fixedDecimals(ts.medianMs, 1) << " | "
       << fixedDecimals(ts.medianMs / large, 3) << " | " << (streamed > 0 ? fixedDecimals(busGBs, 1) : std::string("-")) << " | "
       << (same ? "yes (same bits)" : "**NO**") << " |\n";
    srows.push_back({{"resident", resident}, {"streamed", streamed}, {"iteration_ms", ts.medianMs}, {"samples_ms", ts.samplesMs},
                     {"bus_GBs", busGBs}, {"same_template", same}, {"setup_s", r.secondsSetup}});
    ++rep.measured;
  }
  j["streaming"] = srows;
}

}  // namespace kortex::bench::atlas
