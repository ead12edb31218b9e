// Atlas benchmark, Whole: the whole multi-scale atlas of the large cohort (images on the host), and
// Fig 13: a small cohort single scale (200 iterations) vs multi-scale (25 + 50).
#include "bench/atlas/AtlasBench.hpp"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace kortex::bench::atlas {

using common::fixedDecimals;

void runWhole(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  const bool onDevice = ctx.onDevice;
  const int large = ctx.large, small = ctx.small;
  std::vector<HostImage> const& big = ctx.big;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto run = [&](std::vector<HostImage> const& imgs, AtlasParams const& p) { return ctx.run(imgs, p); };
  md << "## Whole atlases (images on the host; the template comes back, the fields stay on the device)\n\n| cohort | schedule | iterations | seconds | final RMSE | min det | mean displacement RMS |\n"
     << "|---|---|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  auto row = [&](std::string const& name, std::vector<HostImage> const& imgs, std::vector<int> scales,
                 std::vector<int> iters) {
    AtlasParams p;
    p.greedy.scales = scales;
    p.greedy.iterations = iters;
    say("whole atlas: " + name);
    const auto [r, secs] = run(imgs, p);
    std::ostringstream sched;
    for (std::size_t k = 0; k < scales.size(); ++k) sched << (k ? " + " : "") << iters[k] << " at x" << scales[k];
    md << "| " << name << " | " << sched.str() << " | " << r.iterations << " | " << fixedDecimals(secs, 2) << " | "
       << fixedDecimals(r.history.back().mismatch, 4) << " | " << fixedDecimals(r.minJacobian) << " | " << fixedDecimals(r.meanDisplacementRms, 4)
       << " |\n";
    rows.push_back({{"cohort", name}, {"schedule", sched.str()}, {"iterations", r.iterations}, {"seconds", secs},
                    {"template_fnv1a", ctx.templateHash},
                    {"final_mismatch", r.history.back().mismatch}, {"min_jacobian", r.minJacobian},
                    {"mean_displacement_rms", r.meanDisplacementRms}});
    ++rep.measured;
    return secs;
  };
  const std::vector<int> multi = opt.tiny ? std::vector<int>{2, 3} : std::vector<int>{25, 50};
  const double whole = row(std::to_string(large) + " subjects", big, {2, 1}, multi);
  if (onDevice && large == 315)
    j["target_whole"] = {{"target_s", kTargetWholeS}, {"measured_s", whole}, {"met", whole <= kTargetWholeS}};
  const std::vector<HostImage> few(big.begin(), big.begin() + std::min<std::size_t>(big.size(), std::size_t(small)));
  const double tMulti = row(std::to_string(few.size()) + " subjects", few, {2, 1}, multi);
  const double tSingle = row(std::to_string(few.size()) + " subjects", few, {1}, {opt.tiny ? 8 : 200});
  md << "\nFig 13: single scale / multi-scale time " << fixedDecimals(tSingle / tMulti, 2) << "x (the paper: "
     << kPaperMultiscaleGain << "x).\n\n";
  j["whole"] = rows;
  j["multiscale_gain"] = {{"measured", tSingle / tMulti}, {"paper", kPaperMultiscaleGain}};
}

}  // namespace kortex::bench::atlas
