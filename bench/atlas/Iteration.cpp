// Atlas benchmark, Iteration: one atlas iteration over the large cohort per solver, its time per
// subject and memory traffic, then the streaming runs (Streaming.cpp) and the batched PyTorch peer.
#include "gpu/atlas/Atlas.hpp"
#include "bench/atlas/AtlasBench.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/Resources.hpp"

namespace kortex::bench::atlas {

using common::fixedDecimals;

void runIteration(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  nlohmann::json const& peers = ctx.peers;
  const bool onDevice = ctx.onDevice;
  const double copyGBs = ctx.copyGBs, voxels = ctx.voxels;
  Geometry const& g = ctx.g;
  const int large = ctx.large;
  std::vector<HostImage> const& big = ctx.big;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto run = [&](std::vector<HostImage> const& imgs, AtlasParams const& p) { return ctx.run(imgs, p); };
  md << "## One atlas iteration, " << large << " subjects at " << describe(g) << "\n\n"
     << "| solver | iteration ms (median) | per subject ms | GB/s (" << kIterationBytesPerVoxel
     << " B/voxel/subject) | % of copy | device bytes | min det |\n|---|---|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  for (GreedySolver s : kIterationSolvers) {
    if (!common::selected(opt.only, iterationLabel(s))) continue;
    AtlasParams p;
    p.greedy.solver = s;
    p.greedy.scales = {1};
    p.greedy.iterations = {opt.tiny ? 3 : 6};
    const AtlasMemory m = gpu::atlasMemory(g, p);
    const std::int64_t need = m.total(large), avail = gpu::availableMemoryBytes<Mem>();
    if (avail > 0 && need > avail) {
      md << "| " << toString(s) << " | skipped: needs " << need / (1 << 20) << " MiB, " << avail / (1 << 20)
         << " MiB free | | | | | |\n";
      ++rep.skipped;
      continue;
    }
    say(std::string("iteration, ") + toString(s));
    const auto [r, secs] = run(big, p);
    const TimingStats t = iterationStats(r);
    const double gbs = kIterationBytesPerVoxel * voxels * large / (t.medianMs * 1e-3) / 1e9;
    md << "| " << toString(s) << " | " << fixedDecimals(t.medianMs, 1) << " | " << fixedDecimals(t.medianMs / large, 3) << " | "
       << fixedDecimals(gbs, 0) << " | " << fixedDecimals(100.0 * gbs / copyGBs, 0) << " | " << need / (1 << 20) << " MiB | "
       << fixedDecimals(r.minJacobian) << " |\n";
    rows.push_back({{"solver", toString(s)}, {"iteration_ms", t.medianMs}, {"samples_ms", t.samplesMs},
                    {"template_fnv1a", ctx.templateHash},
                    {"per_subject_ms", t.medianMs / large}, {"GBs", gbs}, {"device_bytes", need},
                    {"min_jacobian", r.minJacobian}, {"run_seconds", secs}});
    ++rep.measured;
    if (s == GreedySolver::Fft && onDevice && large == 315) {
      const bool met = t.medianMs * 1e-3 <= kTargetIterationS;
      j["target_iteration"] = {{"target_s", kTargetIterationS}, {"measured_s", t.medianMs * 1e-3}, {"met", met}};
    }
  }
  j["iteration"] = rows;
  if (common::selected(opt.only, iterationLabel(GreedySolver::Fft))) runStreaming(ctx);
  if (peers.is_object()) {
    for (auto const& pr : peers.value("results", nlohmann::json::array()))
      if (pr.value("algorithm", "") == "atlas-iteration" && pr.value("per_subject_ms", nlohmann::json()).is_number()) {
        const double ps = pr["per_subject_ms"].get<double>();
        md << "\nPeer (" << peers.value("source", std::string("bench/peers/atlas_torch.py")) << ", "
           << peers.value("device", std::string("?")) << ", torch "
           << peers["versions"].value("torch", std::string("?")) << "): the same iteration batched over "
           << pr.value("batch", 0) << " subjects, " << fixedDecimals(pr.value("median_ms", NAN), 2) << " ms per batch = "
           << fixedDecimals(ps, 3) << " ms per subject, " << fixedDecimals(315.0 * ps, 1) << " ms for 315 subjects.";
        if (!rows.empty()) {
          const double ours = rows.front()["per_subject_ms"].get<double>();
          md << " Kortex fft: " << fixedDecimals(ours, 3) << " ms per subject: " << fixedDecimals(ps / ours, 2) << "x";
          if (onDevice && !opt.tiny)
            md << " (target >= " << kTargetTorchRatio << "x: " << (ps / ours >= kTargetTorchRatio ? "met" : "missed") << ")";
          md << ".";
          j["peer_ratio_fft"] = ps / ours;
        }
        md << "\n";
        j["peer"] = pr;
      }
  }
  md << "\n";
}

}  // namespace kortex::bench::atlas
