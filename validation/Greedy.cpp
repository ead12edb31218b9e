#include "validation/Greedy.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "core/Affine.hpp"
#include "core/Timing.hpp"
#include "pipeline/ParamsJson.hpp"
#include "io/ImageIO.hpp"

namespace kortex::validation {
namespace {

namespace fs = std::filesystem;

std::string stats(DistanceStats const& d) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << d.max << " / " << d.mean << " / " << d.p99;
  return o.str();
}

nlohmann::json statsJson(DistanceStats const& d) {
  return {{"max", d.max}, {"mean", d.mean}, {"p99", d.p99}, {"voxels", d.count}, {"worst_voxel", d.worst}};
}

// The study's subjects (mri/ixi_2mm_more: T1 volumes, DLMUSE labels; 4 mm in quick mode) and the
// three Kokkos registrations it runs on each pair.
struct GreedyStudySetup {
  fs::path root;
  std::vector<std::string> ids;  // ids[0]: the fixed subject
  bool quick = false;
  RegistrationPipelineOptions greedy, unbiased, affineOnly;
  HostImage image(std::string const& id) const {
    return loadStudyImage(root / "t1" / (id + "-T1_ds.nii.gz"), false, quick);
  }
  HostImage labels(std::string const& id) const {
    return loadStudyImage(root / "labels" / (id + "-T1_ds_DLMUSE.nii.gz"), true, quick);
  }
};

// elastix's warped labels of the pair (and its time, from the .json beside them), when present.
void elastixDice(GreedyPairResult& pr, GreedyStudyOptions const& opt, HostImage const& fixedLabels) {
  const fs::path warped = fs::path(opt.elastixDir) / (pr.moving + "_to_" + pr.fixed + "_labels.nii.gz");
  if (!fs::exists(warped)) return;
  HostImage el = io::readImage(warped);
  if (opt.quick) el = loadStudyImage(warped, true, true);
  if (el.geometry.nx() == fixedLabels.geometry.nx() && el.geometry.ny() == fixedLabels.geometry.ny() &&
      el.geometry.nz() == fixedLabels.geometry.nz()) {
    pr.diceElastix = diceSummary(fixedLabels, el);
    pr.elastixRan = true;
  }
  std::ifstream js(fs::path(opt.elastixDir) / (pr.moving + "_to_" + pr.fixed + ".json"));
  if (js) {
    try {
      pr.secondsElastix = nlohmann::json::parse(js).value("seconds", -1.0);
    } catch (std::exception const&) {
    }
  }
}

// CPU reference vs Kokkos end to end inside the head: the greedy registration (and its greedy
// stage alone, from the Kokkos affine), and register unbiased when it ran.
void compareCpuKokkos(GreedyPairResult& pr, GreedyStudySetup const& st, HostImage const& moving,
                      HostImage const& fixed, RegistrationPipelineResult const& rg,
                      std::optional<RegistrationPipelineResult> const& ru, HostImage const& head) {
  pr.cpuCompared = true;
  RegistrationPipelineOptions gc = st.greedy;
  gc.backend = Backend::Cpu;
  const auto rgc = pipeline::registerPair(moving, fixed, gc);
  pr.secondsCpuGreedy = rgc.secondsTotal;
  pr.greedyCpuVsKokkos = mapDifference(rgc, rg, &head);
  pr.affineCpuVsKokkos = rmsMappedPointDistance(rgc.affine, rg.affine, fixed.geometry);
  RegistrationPipelineOptions gs = gc;
  gs.presetAffine = rg.affine;
  pr.greedySameInput = mapDifference(pipeline::registerPair(moving, fixed, gs), rg, &head);
  if (ru) {
    RegistrationPipelineOptions uc = st.unbiased;
    uc.backend = Backend::Cpu;
    const auto ruc = pipeline::registerPair(moving, fixed, uc);
    pr.secondsCpuUnbiased = ruc.secondsTotal;
    pr.unbiasedCpuVsKokkos = mapDifference(ruc, *ru, &head);
  }
}

void printPair(std::ostream& os, GreedyPairResult const& pr) {
  os << (pr.pass ? "  pass  " : "  FAIL  ") << "greedy " << pr.moving << " -> " << pr.fixed << ": Dice affine "
     << std::fixed << std::setprecision(4) << pr.diceAffine.meanAllLabels << ", greedy " << pr.diceGreedy.meanAllLabels;
  if (pr.unbiasedRan) os << ", unbiased " << pr.diceUnbiased.meanAllLabels;
  if (pr.elastixRan) os << ", elastix " << pr.diceElastix.meanAllLabels;
  os << "; min det " << std::setprecision(3) << pr.minJacobian << ", " << pr.refused << " fold refusals"
     << (pr.folded ? " (stopped on a fold)" : "") << ", " << pr.secondsGreedy << " s";
  if (pr.cpuCompared) {
    os << "; CPU vs Kokkos (max / mean / p99 vx) greedy " << stats(pr.greedyCpuVsKokkos) << " (affines differ by "
       << std::scientific << std::setprecision(2) << pr.affineCpuVsKokkos << std::fixed
       << " vx RMS; greedy from the same affine " << stats(pr.greedySameInput) << ")";
    if (pr.unbiasedRan) os << ", unbiased " << stats(pr.unbiasedCpuVsKokkos);
  }
  os << std::endl;
}

// Pair k (moving ids[k] to the fixed ids[0]): affine only, greedy, register unbiased, elastix,
// then CPU vs Kokkos when k <= cpuPairs.
GreedyPairResult runStudyPair(int k, GreedyStudyOptions const& opt, GreedyStudySetup const& st,
                              HostImage const& fixed, HostImage const& fixedLabels) {
  GreedyPairResult pr;
  pr.fixed = st.ids[0];
  pr.moving = st.ids[std::size_t(k)];
  const HostImage moving = st.image(pr.moving), movingLabels = st.labels(pr.moving);
  const auto ra = pipeline::registerPair(moving, fixed, st.affineOnly);
  pr.diceAffine = diceSummary(fixedLabels, pipeline::warpedLabels(ra, movingLabels));
  const auto rg = pipeline::registerPair(moving, fixed, st.greedy);
  pr.diceGreedy = diceSummary(fixedLabels, pipeline::warpedLabels(rg, movingLabels));
  pr.secondsGreedy = rg.secondsTotal;
  pr.minJacobian = rg.greedy.minJacobian;
  pr.refused = rg.greedy.refused;
  pr.folded = rg.greedy.folded();
  std::optional<RegistrationPipelineResult> ru;
  if (opt.runUnbiased) {
    ru = pipeline::registerPair(moving, fixed, st.unbiased);
    pr.diceUnbiased = diceSummary(fixedLabels, pipeline::warpedLabels(*ru, movingLabels));
    pr.secondsUnbiased = ru->secondsTotal;
    pr.unbiasedRan = true;
  }
  if (!opt.elastixDir.empty()) elastixDice(pr, opt, fixedLabels);
  const HostImage head = headMask(rg);
  if (k <= opt.cpuPairs) compareCpuKokkos(pr, st, moving, fixed, rg, ru, head);
  pr.pass = pr.diceGreedy.meanAllLabels > pr.diceAffine.meanAllLabels && pr.minJacobian > 0.0f &&
            (!pr.cpuCompared || (pr.greedyCpuVsKokkos.max <= kMaxMapDifferenceVoxels &&
                                 (!ru || pr.unbiasedCpuVsKokkos.max <= kMaxMapDifferenceVoxels)));
  if (opt.progress) printPair(*opt.progress, pr);
  return pr;
}

std::string num(bool ran, double v, int prec) {
  if (!ran) return std::string("-");
  std::ostringstream o;
  o << std::fixed << std::setprecision(prec) << v;
  return o.str();
}

nlohmann::json pairJson(GreedyPairResult const& p) {
  nlohmann::json x = {{"fixed", p.fixed},
                      {"moving", p.moving},
                      {"dice_affine", p.diceAffine.meanAllLabels},
                      {"dice_greedy", p.diceGreedy.meanAllLabels},
                      {"min_jacobian", p.minJacobian},
                      {"fold_refusals", p.refused},
                      {"folded", p.folded},
                      {"seconds_greedy", p.secondsGreedy},
                      {"pass", p.pass}};
  if (p.unbiasedRan) x["dice_unbiased"] = p.diceUnbiased.meanAllLabels, x["seconds_unbiased"] = p.secondsUnbiased;
  if (p.elastixRan) x["dice_elastix"] = p.diceElastix.meanAllLabels, x["seconds_elastix"] = p.secondsElastix;
  if (p.cpuCompared) {
    x["greedy_cpu_vs_kokkos"] = statsJson(p.greedyCpuVsKokkos);
    x["affine_cpu_vs_kokkos_rms"] = p.affineCpuVsKokkos;
    x["greedy_same_input_cpu_vs_kokkos"] = statsJson(p.greedySameInput);
    x["seconds_cpu_greedy"] = p.secondsCpuGreedy;
    if (p.unbiasedRan) {
      x["unbiased_cpu_vs_kokkos"] = statsJson(p.unbiasedCpuVsKokkos);
      x["seconds_cpu_unbiased"] = p.secondsCpuUnbiased;
    }
  }
  return x;
}

// The report: the Dice table with its means, the CPU-vs-Kokkos paragraphs, the JSON.
void greedyReport(GreedyStudyReport& rep, GreedyStudyOptions const& opt, std::string const& fixedId) {
  std::ostringstream md;
  GreedyParams const& g = opt.greedy;
  std::string sc, it;
  for (std::size_t s = 0; s < g.scales.size(); ++s) {
    sc += (s ? "," : "") + std::to_string(g.scales[s]);
    it += (s ? "," : "") + std::to_string(g.iterations[s]);
  }
  md << "### Greedy registration (IXI " << (opt.quick ? "4 mm, quick" : "2 mm") << ", fixed " << fixedId
     << "; alpha " << g.fluid.alpha << ", beta " << g.fluid.beta << ", gamma " << g.fluid.gamma << ", scales " << sc
     << ", iterations " << it << ", max step " << g.maxStep << ", solver " << toString(g.solver) << ")\n\n"
     << "| moving | Dice affine | Dice greedy | Dice unbiased | Dice elastix | min det Dh | fold refusals | greedy s "
        "| unbiased s | elastix s | pass |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  double sumA = 0, sumG = 0, sumU = 0, sumE = 0;
  int nU = 0, nE = 0;
  nlohmann::json jp = nlohmann::json::array();
  for (auto const& p : rep.pairs) {
    sumA += p.diceAffine.meanAllLabels;
    sumG += p.diceGreedy.meanAllLabels;
    if (p.unbiasedRan) sumU += p.diceUnbiased.meanAllLabels, ++nU;
    if (p.elastixRan) sumE += p.diceElastix.meanAllLabels, ++nE;
    md << "| " << p.moving << " | " << num(true, p.diceAffine.meanAllLabels, 4) << " | "
       << num(true, p.diceGreedy.meanAllLabels, 4) << " | " << num(p.unbiasedRan, p.diceUnbiased.meanAllLabels, 4)
       << " | " << num(p.elastixRan, p.diceElastix.meanAllLabels, 4) << " | " << num(true, p.minJacobian, 3) << " | "
       << p.refused << (p.folded ? " (stopped)" : "") << " | " << num(true, p.secondsGreedy, 3) << " | "
       << num(p.unbiasedRan, p.secondsUnbiased, 3) << " | " << num(p.secondsElastix >= 0, p.secondsElastix, 1)
       << " | " << (p.pass ? "yes" : "**no**") << " |\n";
    jp.push_back(pairJson(p));
  }
  const double n = double(std::max<std::size_t>(1, rep.pairs.size()));
  md << "| **mean** | " << num(true, sumA / n, 4) << " | " << num(true, sumG / n, 4) << " | "
     << num(nU > 0, sumU / std::max(1, nU), 4) << " | " << num(nE > 0, sumE / std::max(1, nE), 4)
     << " | | | | | | |\n";
  for (auto const& p : rep.pairs) {
    if (!p.cpuCompared) continue;
    md << "\nCPU reference vs Kokkos end to end, " << p.moving << " -> " << p.fixed
       << " (each back end its own normalisation and affine, as a user runs it; |Phi_cpu - Phi_kokkos| inside the "
          "head, max / mean / p99, voxels; bound "
       << kMaxMapDifferenceVoxels << " on the max): greedy " << stats(p.greedyCpuVsKokkos) << " (CPU "
       << std::setprecision(1) << p.secondsCpuGreedy << " s; the affine stages differ by " << std::scientific
       << std::setprecision(2) << p.affineCpuVsKokkos << std::fixed << " voxel RMS; the greedy stage alone, from the "
       << "same affine: " << stats(p.greedySameInput) << ")";
    if (p.unbiasedRan)
      md << "; register unbiased " << stats(p.unbiasedCpuVsKokkos) << " (CPU " << std::setprecision(1)
         << p.secondsCpuUnbiased << " s)";
    md << ".\n";
  }
  rep.markdown = md.str();
  rep.json = {{"pairs", jp},
              {"quick", opt.quick},
              {"fixed", fixedId},
              {"mean_dice", {{"affine", sumA / n}, {"greedy", sumG / n}}},
              {"pass", rep.pass}};
  rep.json.update(pipeline::toJson(g));  // the greedy parameters, flat (alpha, scales, solver, ...)
  if (nU) rep.json["mean_dice"]["unbiased"] = sumU / nU;
  if (nE) rep.json["mean_dice"]["elastix"] = sumE / nE;
}

}  // namespace

// Stages: the pairs (each: affine, greedy, unbiased, elastix; CPU vs Kokkos), then the report.
GreedyStudyReport runGreedyStudy(GreedyStudyOptions const& opt) {
  GreedyStudyReport rep;
  GreedyStudySetup st;
  st.root = fs::path(opt.dataDir) / "mri" / "ixi_2mm_more";
  st.ids = studySubjectIds(st.root / "t1");
  st.quick = opt.quick;
  auto const& ids = st.ids;
  if (opt.dataDir.empty() || ids.size() < 2 || !fs::exists(st.root / "labels" / (ids[0] + "-T1_ds_DLMUSE.nii.gz"))) {
    rep.note = "greedy study skipped: IXI volumes and labels not found under " + (st.root / "t1").string();
    return rep;
  }
  rep.ran = true;
  const int nPairs = std::min<int>(opt.quick ? 2 : opt.pairs, int(ids.size()) - 1);
  const HostImage fixed = st.image(ids[0]), fixedLabels = st.labels(ids[0]);

  st.greedy.backend = Backend::Kokkos;
  st.greedy.method = pipeline::RegistrationMethod::Greedy;
  st.greedy.greedy = opt.greedy;
  st.unbiased.backend = Backend::Kokkos;
  st.unbiased.fluid = opt.unbiased;
  st.affineOnly = st.greedy;
  st.affineOnly.useFluid = false;

  bool allPass = true;
  for (int k = 1; k <= nPairs; ++k) {
    rep.pairs.push_back(runStudyPair(k, opt, st, fixed, fixedLabels));
    allPass = allPass && rep.pairs.back().pass;
  }
  rep.pass = allPass;
  greedyReport(rep, opt, ids[0]);
  return rep;
}

}  // namespace kortex::validation
