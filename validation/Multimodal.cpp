// The multi-modal study (validation/Multimodal.hpp).
#include "validation/Multimodal.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <vector>

#include "core/Errors.hpp"
#include "core/Intensity.hpp"
#include "core/Phantom.hpp"
#include "io/ImageIO.hpp"
#include "pipeline/Register.hpp"
#include "reference_cpu/Gaussian.hpp"
#include "validation/Registration.hpp"

namespace kortex::validation {

namespace fs = std::filesystem;
using pipeline::RegistrationPipelineOptions;
using pipeline::RegistrationPipelineResult;

namespace {

// The contrast's constants (Multimodal.hpp states them).
constexpr double kCsfBelow = 15.0, kWhiteAbove = 60.0;  // brain T1 percentiles
constexpr double kCsf = 0.95, kGrey = 0.60, kWhite = 0.40, kLabelJitter = 0.04;
constexpr double kHeadFraction = 0.10;  // of the T1's 99.5th percentile
constexpr double kBias = 0.2, kBlurSigma = 0.75, kNoiseSigma = 0.02;

}  // namespace

HostImage syntheticContrast(HostImage const& t1, HostImage const& labels, std::uint64_t seed,
                            std::uint64_t noiseSeed) {
  if (!t1.geometry.sameGrid(labels.geometry, 1e-3))
    throw InvalidArgument("synthetic contrast: the label map is not on the T1's grid");
  const Index n = t1.numVoxels();
  const float* v = t1.data.data();
  const float* l = labels.data.data();
  std::vector<float> all(v, v + n), brain;
  for (Index i = 0; i < n; ++i)
    if (l[i] > 0.5f) brain.push_back(v[i]);
  if (brain.empty()) throw InvalidArgument("synthetic contrast: the label map labels no voxel");
  const double p995 = percentile(all, 99.5), csfBelow = percentile(brain, kCsfBelow),
               whiteAbove = percentile(brain, kWhiteAbove);
  SplitMix64 rng(seed);
  auto uniform = [&rng] { return rng.uniform(); };
  std::vector<double> jitter(65536);
  for (double& j : jitter) j = kLabelJitter * (2.0 * uniform() - 1.0);
  const double a = 2.0 * M_PI * uniform(), b = 2.0 * M_PI * uniform();
  HostImage out("kortex::study::contrast", t1.geometry);
  out.metadata = t1.metadata;
  const Index nx = t1.geometry.nx(), ny = t1.geometry.ny();
  for (Index i = 0; i < n; ++i) {
    double c = 0.0;
    if (l[i] > 0.5f) {
      c = v[i] <= csfBelow ? kCsf : v[i] > whiteAbove ? kWhite : kGrey;
      c += jitter[std::size_t(std::lround(l[i])) % jitter.size()];
    } else if (v[i] > kHeadFraction * p995) {
      c = std::clamp(0.35 + 0.3 * (1.0 - v[i] / p995), 0.35, 0.65);
    }
    const Index x = i % nx, y = (i / nx) % ny;
    c *= 1.0 + kBias * std::sin(M_PI * double(x) / double(nx) + a) * std::sin(M_PI * double(y) / double(ny) + b);
    out.data.data()[i] = float(c);
  }
  GaussianParams g;
  g.sigma = kBlurSigma;
  g.variant = GaussianVariant::Separable;
  ref::gaussianBlur(out.data, out.data, g);
  return addGaussianNoise(out, kNoiseSigma, noiseSeed);
}

namespace {

struct Setup : IxiStudyData {
  RegistrationPipelineOptions affineNcc, affineMi, greedyMi, greedyMiBias, greedyLncc, t1Lncc;
};

Setup makeSetup(MultimodalStudyOptions const& opt) {
  Setup st{IxiStudyData(opt.dataDir, opt.quick)};
  st.t1Lncc.backend = Backend::Kokkos;
  st.t1Lncc.method = pipeline::RegistrationMethod::Greedy;
  st.t1Lncc.greedy = opt.greedy;
  st.t1Lncc.greedy.metric = GreedyMetric::Lncc;
  st.greedyMi = st.t1Lncc;
  st.greedyMi.greedy.metric = GreedyMetric::Mi;
  st.greedyMi.greedy.miBins = opt.miBins;
  st.greedyMi.affine.metric = AffineMetricKind::Mi;
  st.greedyMi.affine.miBins = opt.miBins;
  st.greedyMiBias = st.greedyMi;
  st.greedyMiBias.intensity.biasSigmaMm = kStudyBiasSigmaMm;
  st.greedyLncc = st.greedyMi;
  st.greedyLncc.greedy.metric = GreedyMetric::Lncc;
  st.affineMi = st.greedyMi;
  st.affineMi.useFluid = false;
  st.affineNcc = st.t1Lncc;
  st.affineNcc.useFluid = false;
  return st;
}

double dice(RegistrationPipelineResult const& r, HostImage const& fixedLabels, HostImage const& movingLabels) {
  return diceSummary(fixedLabels, pipeline::warpedLabels(r, movingLabels)).meanAllLabels;
}

// elastix's files for the pair, when present (problems are notes: the column stays empty).
void readElastix(MultimodalPairResult& pr, MultimodalStudyOptions const& opt, HostImage const& fixedLabels,
                 std::vector<std::string>& notes) {
  if (opt.elastixDir.empty()) return;
  const std::string stem = pr.moving + "_to_" + pr.fixed;
  const fs::path labels = fs::path(opt.elastixDir) / (stem + "_labels.nii.gz");
  if (!fs::exists(labels)) return;
  try {
    const HostImage warped = loadStudyImage(labels, true, opt.quick);
    if (!warped.geometry.sameGrid(fixedLabels.geometry, 1e-3)) {
      notes.push_back(labels.string() + ": not on the fixed grid");
      return;
    }
    pr.diceElastixAffine = diceSummary(fixedLabels, warped).meanAllLabels;
    std::ifstream js(fs::path(opt.elastixDir) / (stem + ".json"));
    if (js) {
      const auto j = nlohmann::json::parse(js);
      if (j.contains("seconds") && j["seconds"].is_number()) pr.secondsElastixAffine = j["seconds"].get<double>();
    }
  } catch (std::exception const& e) {
    notes.push_back(stem + " (" + opt.elastixDir + "): " + e.what());
  }
}

MultimodalPairResult runPair(int k, MultimodalStudyOptions const& opt, Setup const& st, HostImage const& fixed,
                             HostImage const& fixedLabels, std::vector<std::string>& notes) {
  MultimodalPairResult pr;
  pr.fixed = st.ids[0];
  pr.moving = st.ids[std::size_t(k)];
  const HostImage t1 = st.image(pr.moving), labels = st.labels(pr.moving);
  const HostImage other = syntheticContrast(t1, labels, std::uint64_t(k));
  const HostImage fixedOther = syntheticContrast(fixed, fixedLabels, std::uint64_t(k), ~std::uint64_t(k));
  if (!opt.imagesDir.empty()) io::writeImage(other, fs::path(opt.imagesDir) / (pr.moving + "_contrast.nii.gz"));
  readElastix(pr, opt, fixedLabels, notes);
  pr.diceAffineNcc = dice(pipeline::registerPair(other, fixed, st.affineNcc), fixedLabels, labels);
  const auto affineMi = pipeline::registerPair(other, fixed, st.affineMi);
  pr.diceAffineMi = dice(affineMi, fixedLabels, labels);
  pr.secondsAffineMi = affineMi.secondsTotal;
  const auto greedyMi = pipeline::registerPair(other, fixed, st.greedyMi);
  pr.diceGreedyMi = dice(greedyMi, fixedLabels, labels);
  pr.secondsGreedyMi = greedyMi.secondsTotal;
  pr.minJacobianMi = greedyMi.greedy.minJacobian;
  const auto greedyMiBias = pipeline::registerPair(other, fixed, st.greedyMiBias);
  pr.diceGreedyMiBias = dice(greedyMiBias, fixedLabels, labels);
  pr.minJacobianMiBias = greedyMiBias.greedy.minJacobian;
  const auto greedyLncc = pipeline::registerPair(other, fixed, st.greedyLncc);
  pr.diceGreedyLncc = dice(greedyLncc, fixedLabels, labels);
  pr.secondsGreedyLncc = greedyLncc.secondsTotal;
  pr.minJacobianLncc = greedyLncc.greedy.minJacobian;
  const auto lncc = pipeline::registerPair(t1, fixed, st.t1Lncc);
  pr.diceT1Lncc = dice(lncc, fixedLabels, labels);
  pr.secondsT1Lncc = lncc.secondsTotal;
  pr.diceCeiling = dice(pipeline::registerPair(other, fixedOther, st.t1Lncc), fixedLabels, labels);
  if (opt.cpuPairs < 0 || k - opt.firstPair < opt.cpuPairs) {
    RegistrationPipelineOptions cpu = st.greedyMi;
    cpu.backend = Backend::Cpu;
    pr.diceGreedyMiCpu = dice(pipeline::registerPair(other, fixed, cpu), fixedLabels, labels);
  }
  pr.pass = pr.diceGreedyMi > pr.diceAffineMi && pr.minJacobianMi > 0.0f &&
            (pr.diceGreedyMiCpu < 0.0 || std::fabs(pr.diceGreedyMi - pr.diceGreedyMiCpu) <= kMiBackendDiceTol);
  return pr;
}

std::string fmt(double v, int digits = 4) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

void report(MultimodalStudyReport& rep, MultimodalStudyOptions const& opt) {
  const double n = double(rep.pairs.size());
  for (auto const& p : rep.pairs) {
    rep.meanAffineNcc += p.diceAffineNcc / n;
    rep.meanAffineMi += p.diceAffineMi / n;
    rep.meanGreedyMi += p.diceGreedyMi / n;
    rep.meanGreedyMiBias += p.diceGreedyMiBias / n;
    rep.meanGreedyLncc += p.diceGreedyLncc / n;
    rep.meanT1Lncc += p.diceT1Lncc / n;
    rep.meanCeiling += p.diceCeiling / n;
  }
  rep.goalMet = std::max(rep.meanGreedyMi, rep.meanGreedyMiBias) >= 0.95 * rep.meanT1Lncc;
  double elastix = 0.0, withElastix = 0.0, kortexAffine = 0.0;
  for (auto const& p : rep.pairs)
    if (p.diceElastixAffine >= 0.0) {
      elastix += p.diceElastixAffine;
      kortexAffine += p.diceAffineMi;
      ++withElastix;
    }
  if (withElastix > 0) rep.meanElastixAffine = elastix / withElastix;
  std::ostringstream md;
  md << "Moving subjects in a second contrast made from their T1 and labels (validation/Multimodal.hpp), "
     << "registered to the fixed T1 on the Kokkos back end; " << opt.miBins << " MI bins"
     << (opt.quick ? "; quick: images at 4 mm" : "") << ". Mean Dice over the fixed subject's DLMUSE labels:\n\n"
     << "| moving | affine NCC | affine MI | greedy MI | greedy MI, bias-corrected | greedy LNCC | T1 greedy LNCC | contrast to contrast LNCC "
        "| MI / T1 | MI bias-corrected / T1 | LNCC / T1 | MI bias-corrected / contrast to contrast | greedy MI s "
        "| min det MI / MI bias-corrected / LNCC | pass |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  nlohmann::json pairs = nlohmann::json::array();
  for (auto const& p : rep.pairs) {
    md << "| " << p.moving << " | " << fmt(p.diceAffineNcc) << " | " << fmt(p.diceAffineMi) << " | " << fmt(p.diceGreedyMi)
       << " | " << fmt(p.diceGreedyMiBias) << " | " << fmt(p.diceGreedyLncc) << " | " << fmt(p.diceT1Lncc) << " | "
       << fmt(p.diceCeiling) << " | " << fmt(p.diceGreedyMi / p.diceT1Lncc, 3) << " | "
       << fmt(p.diceGreedyMiBias / p.diceT1Lncc, 3) << " | " << fmt(p.diceGreedyLncc / p.diceT1Lncc, 3) << " | "
       << fmt(p.diceGreedyMiBias / p.diceCeiling, 3) << " | " << fmt(p.secondsGreedyMi, 3) << " | " << fmt(p.minJacobianMi, 3)
       << " / " << fmt(p.minJacobianMiBias, 3) << " / " << fmt(p.minJacobianLncc, 3) << " | " << (p.pass ? "yes" : "NO")
       << " |\n";
    pairs.push_back({{"fixed", p.fixed},
                     {"moving", p.moving},
                     {"dice_affine_ncc", p.diceAffineNcc},
                     {"dice_affine_mi", p.diceAffineMi},
                     {"dice_greedy_mi", p.diceGreedyMi},
                     {"dice_greedy_mi_bias_corrected", p.diceGreedyMiBias},
                     {"dice_greedy_mi_cpu", p.diceGreedyMiCpu >= 0 ? nlohmann::json(p.diceGreedyMiCpu) : nlohmann::json()},
                     {"min_jacobian_greedy_mi_bias_corrected", p.minJacobianMiBias},
                     {"dice_greedy_lncc", p.diceGreedyLncc},
                     {"seconds_greedy_lncc", p.secondsGreedyLncc},
                     {"min_jacobian_greedy_lncc", p.minJacobianLncc},
                     {"dice_elastix_affine_mi", p.diceElastixAffine >= 0 ? nlohmann::json(p.diceElastixAffine) : nlohmann::json()},
                     {"seconds_elastix_affine_mi",
                      p.secondsElastixAffine >= 0 ? nlohmann::json(p.secondsElastixAffine) : nlohmann::json()},
                     {"dice_t1_greedy_lncc", p.diceT1Lncc},
                     {"dice_contrast_to_contrast_lncc", p.diceCeiling},
                     {"seconds_affine_mi", p.secondsAffineMi},
                     {"seconds_greedy_mi", p.secondsGreedyMi},
                     {"seconds_t1_greedy_lncc", p.secondsT1Lncc},
                     {"min_jacobian_greedy_mi", p.minJacobianMi},
                     {"pass", p.pass}});
  }
  md << "| **mean** | " << fmt(rep.meanAffineNcc) << " | " << fmt(rep.meanAffineMi) << " | " << fmt(rep.meanGreedyMi) << " | "
     << fmt(rep.meanGreedyMiBias) << " | " << fmt(rep.meanGreedyLncc) << " | " << fmt(rep.meanT1Lncc) << " | "
     << fmt(rep.meanCeiling) << " | " << fmt(rep.meanGreedyMi / rep.meanT1Lncc, 3) << " | "
     << fmt(rep.meanGreedyMiBias / rep.meanT1Lncc, 3) << " | " << fmt(rep.meanGreedyLncc / rep.meanT1Lncc, 3) << " | "
     << fmt(rep.meanGreedyMiBias / rep.meanCeiling, 3) << " | | | |\n\n"
     << "Contrast to contrast: the moving contrast registered to the fixed subject given the same contrast (its "
        "structures' offsets and bias, its own noise) by the T1 pair's greedy LNCC: what the contrast holds, the "
        "ceiling of any metric across the contrasts (" << fmt(rep.meanCeiling / rep.meanT1Lncc, 3)
     << " x the T1 LNCC).\n"
     << "Bias-corrected: both images divided by their head's local mean first (--bias-correct " << kStudyBiasSigmaMm
     << ", core/Intensity.hpp), then MI affine and greedy MI.\n"
     << "Goal (issue 41): mean greedy MI Dice (plain or bias-corrected) >= 0.95 x the T1 LNCC mean: "
     << (rep.goalMet ? "met" : "missed") << ".\n"
     << "\n**Result: " << (rep.pass ? "PASS" : "FAIL") << "** (every pair: greedy MI above the MI affine Dice, det > 0, "
     << "and where the CPU reference ran, its greedy MI Dice within " << kMiBackendDiceTol << " of Kokkos')\n";
  bool anyCpu = false;
  for (auto const& p : rep.pairs) anyCpu = anyCpu || p.diceGreedyMiCpu >= 0.0;
  if (anyCpu) {
    md << "\nGreedy MI, CPU reference against Kokkos (label Dice; the bound is the quality's, " << kMiBackendDiceTol
       << ": bench/results/mi_parity_cpu.md):\n\n| moving | Kokkos | CPU reference | difference |\n|---|---|---|---|\n";
    for (auto const& p : rep.pairs)
      if (p.diceGreedyMiCpu >= 0.0)
        md << "| " << p.moving << " | " << fmt(p.diceGreedyMi) << " | " << fmt(p.diceGreedyMiCpu) << " | "
           << fmt(p.diceGreedyMi - p.diceGreedyMiCpu) << " |\n";
  }
  if (withElastix > 0) {
    md << "\nAffine MI against elastix's affine AdvancedMattesMutualInformation on the same images ("
       << int(withElastix) << " pairs with elastix files; bench/peers/elastix_multimodal.sh):\n\n"
       << "| moving | Kortex affine MI | s | elastix affine MI | s |\n|---|---|---|---|---|\n";
    for (auto const& p : rep.pairs)
      if (p.diceElastixAffine >= 0.0)
        md << "| " << p.moving << " | " << fmt(p.diceAffineMi) << " | " << fmt(p.secondsAffineMi, 3) << " | "
           << fmt(p.diceElastixAffine) << " | " << (p.secondsElastixAffine >= 0 ? fmt(p.secondsElastixAffine, 3) : "-") << " |\n";
    md << "| **mean** | " << fmt(kortexAffine / withElastix) << " | | " << fmt(rep.meanElastixAffine) << " | |\n";
  }
  for (auto const& n : rep.notes) md << "\nLeft out: " << n << "\n";
  rep.markdown = md.str();
  rep.json = {{"pairs", pairs},
              {"first_pair", opt.firstPair},
              {"quick", opt.quick},
              {"mi_bins", opt.miBins},
              {"mean_dice",
               {{"affine_ncc", rep.meanAffineNcc},
                {"affine_mi", rep.meanAffineMi},
                {"greedy_mi", rep.meanGreedyMi},
                {"greedy_mi_bias_corrected", rep.meanGreedyMiBias},
                {"greedy_lncc", rep.meanGreedyLncc},
                {"t1_greedy_lncc", rep.meanT1Lncc},
                {"contrast_to_contrast_lncc", rep.meanCeiling}}},
              {"goal_mi_over_lncc_0_95", rep.goalMet ? "met" : "missed"},
              {"mean_dice_elastix_affine_mi", rep.meanElastixAffine >= 0 ? nlohmann::json(rep.meanElastixAffine) : nlohmann::json()},
              {"notes", rep.notes},
              {"pass", rep.pass}};
}

}  // namespace

MultimodalStudyReport runMultimodalStudy(MultimodalStudyOptions const& opt) {
  MultimodalStudyReport rep;
  const Setup st = makeSetup(opt);
  rep.note = st.skipNote(opt.dataDir, "multimodal");
  if (!rep.note.empty()) return rep;
  const int last = st.lastPair(opt.firstPair, opt.pairs, "multimodal");
  rep.ran = true;
  if (!opt.imagesDir.empty()) fs::create_directories(opt.imagesDir);
  const HostImage fixed = st.image(st.ids[0]), fixedLabels = st.labels(st.ids[0]);
  rep.pass = true;
  for (int k = opt.firstPair; k <= last; ++k) {
    rep.pairs.push_back(runPair(k, opt, st, fixed, fixedLabels, rep.notes));
    rep.pass = rep.pass && rep.pairs.back().pass;
    if (opt.progress) {
      auto const& p = rep.pairs.back();
      *opt.progress << "  multimodal " << p.moving << ": Dice affine NCC " << fmt(p.diceAffineNcc) << ", affine MI "
                    << fmt(p.diceAffineMi) << ", greedy MI " << fmt(p.diceGreedyMi) << " (bias-corrected "
                    << fmt(p.diceGreedyMiBias) << "), greedy LNCC "
                    << fmt(p.diceGreedyLncc) << ", T1 LNCC " << fmt(p.diceT1Lncc)
                    << ", contrast to contrast LNCC " << fmt(p.diceCeiling)
                    << std::endl;
    }
  }
  report(rep, opt);
  return rep;
}

}  // namespace kortex::validation
