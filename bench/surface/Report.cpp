// Surface benchmark: the report's tables (Fig 4, Fig 5, Check), the paper's numbers, the 175k weights
// target and the peer (bench/peers/surface_torch.py).
#include "bench/surface/SurfaceBench.hpp"

#include <cmath>
#include <string>

namespace kortex::bench::surface {

using common::fixedDecimals;

void writeTables(Context& ctx) {
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  nlohmann::json const& peers = ctx.peers;
  const bool onDevice = ctx.onDevice;
  SurfaceNlmParams const& base = ctx.base;
  const double weights175 = ctx.weights175;
  std::string const& weights175Variant = ctx.weights175Variant;
  const std::int64_t weights175N = ctx.weights175N;
  std::ostringstream const& fig4 = ctx.fig4;
  std::ostringstream const& fig5 = ctx.fig5;
  std::ostringstream const& check = ctx.check;
  md << fig4.str() << "\n" << fig5.str() << "\n" << check.str() << "\n";

  md << "## Paper (GTX 480, dual-thread CPU)\n\n| N | CPU | GPU | speedup |\n|---|---|---|---|\n";
  for (auto const& p : kPaper)
    md << "| " << p.n << " | " << fixedDecimals(p.cpuS, 0) << " s | " << fixedDecimals(p.gpuS, 1) << " s | " << fixedDecimals(p.cpuS / p.gpuS, 0)
       << "x |\n";
  md << "\nPaper bandwidth: about " << kPaperGBs << " GB/s; speedup per iteration 77-93x.\n\n";

  // Target and peer.
  md << "## Target and peer\n\n";
  nlohmann::json tj;
  if (std::isfinite(weights175)) {
    md << "- Weights for N = " << weights175N << ", m = " << base.neighbors << ", exact (search + re-rank + fallback + "
       << "weights, " << weights175Variant << "): " << fixedDecimals(weights175, 3) << " s (target <= " << kTargetWeightsS
       << " s): " << (weights175 <= kTargetWeightsS ? "met" : "missed") << "\n";
    tj["weights_175k_s"] = weights175;
    tj["variant"] = weights175Variant;
    tj["band_size"] = weights175N;
  } else {
    md << "- Weights target (N = 175,000): not run at this size (" << (onDevice ? "--quick/--tiny" : "host space")
       << ")\n";
  }
  if (!peers.is_null()) {
    j["peers"] = peers;
    for (auto const& p : peers.value("results", nlohmann::json::array()))
      md << "- Peer " << p.value("name", std::string("?")) << " (N = " << p.value("n", 0) << ", m = " << p.value("m", 0)
         << "): " << fixedDecimals(p.value("median_s", NAN), 3) << " s for the neighbour search; agreement with Kortex's exact "
         << "sets " << fixedDecimals(100.0 * p.value("agreement", NAN), 3) << "% of neighbours, "
         << fixedDecimals(100.0 * p.value("rows_identical_sets", NAN), 2) << "% of rows identical as sets\n";
  }
  j["targets"] = tj;
}

}  // namespace kortex::bench::surface
