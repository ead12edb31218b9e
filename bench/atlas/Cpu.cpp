// Atlas benchmark, CPU: the CPU reference's iteration (reference_cpu/Atlas.cpp) on 2 subjects, at all
// threads (and at 1 thread in the full mode).
#include "bench/atlas/AtlasBench.hpp"

#include <string>
#include <vector>

#include "reference_cpu/Atlas.hpp"

namespace kortex::bench::atlas {

using common::fixedDecimals;

void runCpu(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  Geometry const& g = ctx.g;
  std::vector<HostImage> const& big = ctx.big;
  auto say = [&](std::string const& s) { ctx.say(s); };
  md << "## CPU reference (reference_cpu/Atlas.cpp), 2 subjects at " << describe(g) << "\n\n"
     << "| threads | iteration s (2 subjects) | per subject s | 315 subjects (x 315 / 2) s |\n|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  const std::vector<HostImage> two(big.begin(), big.begin() + 2);
  std::vector<int> threads{common::maxOmpThreads()};
  if (!opt.quick && !opt.tiny && common::maxOmpThreads() > 1) threads.insert(threads.begin(), 1);
  for (int th : threads) {
    common::OmpThreads scope(th);
    AtlasParams p;
    p.greedy.scales = {1};
    p.greedy.iterations = {2};
    HostImage t;
    std::vector<VectorField<Kokkos::HostSpace>> f;
    say("CPU reference, " + std::to_string(th) + " threads");
    const AtlasResult r = ref::buildAtlas(two, p, t, f);
    const double s = r.history[1].seconds - r.history[0].seconds;
    md << "| " << th << " | " << fixedDecimals(s, 2) << " | " << fixedDecimals(s / 2, 2) << " | " << fixedDecimals(s / 2 * 315, 0) << " |\n";
    rows.push_back({{"threads", th}, {"iteration_s_2_subjects", s}, {"per_subject_s", s / 2}});
    ++rep.measured;
  }
  j["cpu"] = rows;
  md << "\n";
}

}  // namespace kortex::bench::atlas
