// `kortex bench multires`: the multiresolution filter's paper figures and table (see
// bench/BenchMultires.hpp for what is measured and how). This file checks the options and runs
// the sections in order, each under its share of the device budget; the sections live in
// bench/multires/ (Fig4.cpp, Fig5.cpp, Fig6.cpp, Table2.cpp: MultiresSections.hpp), the context
// they share in bench/multires/MultiresBench.hpp and the report in bench/multires/Report.cpp.
#include "bench/BenchMultires.hpp"

#include <string>
#include <utility>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "bench/PaperMultires.hpp"
#include "bench/multires/MultiresBench.hpp"
#include "bench/multires/MultiresSections.hpp"
#include "core/Backend.hpp"
#include "core/Errors.hpp"
#include "pipeline/MultiresTileSpace.hpp"
#include "validation/Report.hpp"

namespace kortex::bench {

std::vector<std::string> multiresBenchLabels(bool tiny) {
  using namespace multires;
  std::vector<std::string> l;
  for (auto v : kFig4Variants) l.push_back(fig4Label(fig4Size(tiny), v));
  for (Index n : fig5Sizes(tiny))
    for (bool integer : {false, true})
      for (auto v : pyramidVariants(integer))
        for (auto o : kPyrOps) l.push_back(fig5Label(n, integer, v, o));
  const Index n6 = fig6Size(tiny);
  for (auto const& c : pipeline::tune::multiresBilateralCandidates(static_cast<int>(n6)).candidates)
    l.push_back(fig6Label(n6, c.at("x"), c.at("y")));
  for (Index n : table2Sizes(tiny)) {
    for (int c = 0; c < kNumE2e; ++c) l.push_back(e2eLabel(n, c));
    for (bool integer : {false, true})
      for (int ph = 0; ph < 3; ++ph) l.push_back(phasesLabel(n, integer) + " " + phaseName(ph));
    l.push_back(cpuLabel(n, false));
    l.push_back(cpuLabel(n, true));
  }
  return l;
}

std::string defaultMultiresResultStem() {
  return "bench/results/multires_" + validation::sanitizeForFileName(buildInfo().device);
}

BenchReport runMultiresBench(BenchOptions const& opt) {
  nlohmann::json peers = common::checkOptions(opt, "multires");
  if (!opt.peersJsonPath.empty()) {
    if (!peers.is_object() || !peers.contains("results") || !peers["results"].is_array())
      throw IoError("peers JSON '" + opt.peersJsonPath +
                    "' has no \"results\" array (expected the output of bench/peers/multires_opencv.py)");
  }
  common::requireOnlyMatches(opt, multiresBenchLabels(opt.tiny), "multires",
                             "'Fig4 512^2 ClosenessLut', 'Fig5 4096^2 int16 Packed16 decompose', "
                             "'Fig6 1024^2 tile 64x1', 'Table2 2048^2 kokkos float'");
  multires::Context ctx(opt, std::move(peers));
  ctx.progress(std::string("Kortex multiresolution benchmark (") + ctx.mode().name + "), device space " +
               multires::Exec::name() + ", CPU reference threads: " +
               std::to_string(paper_multires::kTable2CpuThreads) + " and " + std::to_string(ctx.cpuThreads()));
  ctx.measureCopyBandwidth();
  ctx.progress("  device copy bandwidth (read+write): " + validation::fmt(ctx.copyGBs(), 4) + " GB/s");

  // Each section under its cumulated share of the device budget (multires::kSectionShare).
  multires::Results res;
  ctx.setSectionCap(0);
  res.fig4 = multires::runFig4(ctx);
  ctx.setSectionCap(1);
  res.fig5 = multires::runFig5(ctx);
  ctx.setSectionCap(2);
  res.fig6 = multires::runFig6(ctx);
  ctx.setSectionCap(3);
  res.table2 = multires::runTable2(ctx);

  BenchReport rep;
  rep.measured = ctx.measured();
  rep.skipped = ctx.skipped();
  rep.failed = ctx.failed();
  rep.ok = ctx.failed() == 0 && ctx.measured() > 0;
  rep.wallSeconds = secondsSince(ctx.start());
  rep.json = multires::toJson(ctx, res);
  rep.markdown = multires::toMarkdown(ctx, res);
  common::writeReport(rep, opt);
  return rep;
}

}  // namespace kortex::bench
