#include "validation/Greedy.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>

#include "core/Affine.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Timing.hpp"
#include "io/ImageIO.hpp"
#include "pipeline/ParamsJson.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::validation {

const char* toString(StudyMethod m) {
  switch (m) {
    case StudyMethod::Affine: return "affine";
    case StudyMethod::GreedySsd: return "greedy_ssd";
    case StudyMethod::GreedyLncc: return "greedy_lncc";
    case StudyMethod::Unbiased: return "unbiased";
    case StudyMethod::Elastix: return "elastix";
    case StudyMethod::FireAnts: return "fireants";
  }
  return "?";
}

const char* toString(GoalState g) {
  switch (g) {
    case GoalState::Met: return "met";
    case GoalState::Missed: return "missed";
    case GoalState::NotApplicable: return "n/a";
  }
  return "?";
}

namespace {

namespace fs = std::filesystem;

constexpr std::array<StudyMethod, kStudyMethods> kMethods = {StudyMethod::Affine,   StudyMethod::GreedySsd,
                                                             StudyMethod::GreedyLncc, StudyMethod::Unbiased,
                                                             StudyMethod::Elastix,  StudyMethod::FireAnts};
const char* title(StudyMethod m) {
  switch (m) {
    case StudyMethod::Affine: return "affine";
    case StudyMethod::GreedySsd: return "greedy SSD";
    case StudyMethod::GreedyLncc: return "greedy LNCC";
    case StudyMethod::Unbiased: return "unbiased";
    case StudyMethod::Elastix: return "elastix";
    case StudyMethod::FireAnts: return "FireANTs";
  }
  return "?";
}
bool isKortex(StudyMethod m) { return m != StudyMethod::Elastix && m != StudyMethod::FireAnts; }

std::string stats(DistanceStats const& d) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << d.max << " / " << d.mean << " / " << d.p99;
  return o.str();
}

nlohmann::json statsJson(DistanceStats const& d) {
  return {{"max", d.max}, {"mean", d.mean}, {"p99", d.p99}, {"voxels", d.count}, {"worst_voxel", d.worst}};
}

std::string num(bool ran, double v, int prec) {
  if (!ran) return std::string("-");
  std::ostringstream o;
  o << std::fixed << std::setprecision(prec) << v;
  return o.str();
}

// ---- the setup ------------------------------------------------------------------------------------

// The study's subjects (mri/ixi_2mm_more: T1 volumes, DLMUSE labels; 4 mm in quick mode) and the
// Kokkos registrations it runs on each pair.
struct GreedyStudySetup : IxiStudyData {
  RegistrationPipelineOptions affineOnly, ssd, lncc, unbiased;
  RegistrationPipelineOptions const& options(StudyMethod m) const {
    switch (m) {
      case StudyMethod::GreedySsd: return ssd;
      case StudyMethod::GreedyLncc: return lncc;
      case StudyMethod::Unbiased: return unbiased;
      default: return affineOnly;
    }
  }
};

GreedyStudySetup makeSetup(GreedyStudyOptions const& opt) {
  GreedyStudySetup st{IxiStudyData(opt.dataDir, opt.quick)};
  st.ssd.backend = Backend::Kokkos;
  st.ssd.method = pipeline::RegistrationMethod::Greedy;
  st.ssd.greedy = opt.greedy;
  st.ssd.greedy.metric = GreedyMetric::Ssd;
  st.lncc = st.ssd;
  st.lncc.greedy.metric = GreedyMetric::Lncc;
  st.unbiased.backend = Backend::Kokkos;
  st.unbiased.fluid = opt.unbiased;
  st.affineOnly = st.ssd;
  st.affineOnly.useFluid = false;
  return st;
}

// ---- measurements of one registration -------------------------------------------------------------

// det of the total map's Jacobian from its ITK/ANTs world displacement d on the fixed grid:
// det(I + grad d) = det(I - grad u) with u = -(D diag(s))^-1 d in fixed voxels.
JacobianStudyStats totalJacobianStats(VectorField<Kokkos::HostSpace> const& world, HostImage const& head) {
  const auto u = io::worldDisplacementToIndex(world, world.geometry);
  HostImage det("kortex::study::jacobian", world.geometry);
  ref::jacobianDeterminant(u.data, det.data);
  JacobianStudyStats s;
  Index foldsHead = 0, foldsAll = 0;
  s.minHead = std::numeric_limits<double>::infinity();
  s.maxHead = -std::numeric_limits<double>::infinity();
  const float* d = det.data.data();
  const float* m = head.data.data();
  for (Index i = 0; i < det.numVoxels(); ++i) {
    const bool fold = !(d[i] > 0.0f);
    foldsAll += fold;
    ++s.voxels;
    if (!(m[i] > 0.0f)) continue;
    ++s.headVoxels;
    foldsHead += fold;
    s.minHead = std::min(s.minHead, double(d[i]));
    s.maxHead = std::max(s.maxHead, double(d[i]));
  }
  s.foldShareAll = s.voxels ? double(foldsAll) / double(s.voxels) : 0.0;
  s.foldShareHead = s.headVoxels ? double(foldsHead) / double(s.headVoxels) : 0.0;
  if (!s.headVoxels) s.minHead = s.maxHead = 0.0;
  return s;
}

// A Kokkos registration of the pair: Dice, the total map's det, the inverse and its consistency.
void measureKortex(MethodResult& mr, RegistrationPipelineResult const& r, HostImage const& fixedLabels,
                   HostImage const& movingLabels, HostImage const& head) {
  mr.ran = true;
  mr.dice = diceSummary(fixedLabels, pipeline::warpedLabels(r, movingLabels));
  mr.seconds = r.secondsTotal;
  mr.jacobian = totalJacobianStats(pipeline::worldDisplacement(r), head);
  mr.hasJacobian = true;
  const auto inv = pipeline::invertRegistration(r);
  mr.inverse = pipeline::inverseConsistency(r, inv, &head);
  mr.inverseUnconverged = inv.stats.unconverged;
  mr.hasInverse = true;
  if (r.method == pipeline::RegistrationMethod::Greedy && !r.greedy.scales.empty()) {
    mr.foldRefusals = r.greedy.refused;
    mr.stoppedOnFold = r.greedy.folded();
    mr.minJacobianFluid = r.greedy.minJacobian;
  } else if (r.method == pipeline::RegistrationMethod::Unbiased && r.fluid.iterations > 0) {
    mr.minJacobianFluid = r.fluid.final.minJacobian;
  }
}

// Every second voxel of a 2 mm field (quick mode: the grid of loadStudyImage's 4 mm images).
VectorField<Kokkos::HostSpace> subsampleField(VectorField<Kokkos::HostSpace> const& f) {
  Geometry g = f.geometry;
  for (int a = 0; a < 3; ++a) {
    g.size[a] = (g.size[a] + 1) / 2;
    g.spacing[a] *= 2;
  }
  VectorField<Kokkos::HostSpace> o("kortex::study::peer_field", g, 3);
  for (int c = 0; c < 3; ++c)
    for (Index z = 0; z < g.nz(); ++z)
      for (Index y = 0; y < g.ny(); ++y)
        for (Index x = 0; x < g.nx(); ++x) o.data(c, z, y, x) = f.data(c, 2 * z, 2 * y, 2 * x);
  return o;
}

// A peer's files for the pair (see Greedy.hpp), when present. Problems with a file are notes, not
// errors: the peer's column then stays empty for that pair.
void readPeer(MethodResult& mr, std::string const& dir, GreedyPairResult const& pr, bool quick,
              HostImage const& fixedLabels, HostImage const& head, std::vector<std::string>& notes) {
  if (dir.empty()) return;
  const std::string stem = pr.moving + "_to_" + pr.fixed;
  const fs::path labels = fs::path(dir) / (stem + "_labels.nii.gz"), field = fs::path(dir) / (stem + "_field.nii.gz");
  if (!fs::exists(labels)) return;
  try {
    const HostImage warped = loadStudyImage(labels, true, quick);
    if (!warped.geometry.sameGrid(fixedLabels.geometry, 1e-3)) {
      notes.push_back(labels.string() + ": not on the fixed grid (" + describe(warped.geometry) + ")");
      return;
    }
    mr.dice = diceSummary(fixedLabels, warped);
    mr.ran = true;
    std::ifstream js(fs::path(dir) / (stem + ".json"));
    if (js) {
      mr.peerRecord = nlohmann::json::parse(js);
      if (mr.peerRecord.contains("seconds") && mr.peerRecord["seconds"].is_number())
        mr.seconds = mr.peerRecord["seconds"].get<double>();
      if (mr.peerRecord.contains("seconds_total") && mr.peerRecord["seconds_total"].is_number())
        mr.secondsTotal = mr.peerRecord["seconds_total"].get<double>();
    }
    if (fs::exists(field)) {
      auto d = io::readDisplacementField(field);
      if (quick) d = subsampleField(d);
      if (d.geometry.sameGrid(head.geometry, 1e-3)) {
        d.geometry = head.geometry;
        mr.jacobian = totalJacobianStats(d, head);
        mr.hasJacobian = true;
      } else {
        notes.push_back(field.string() + ": not on the fixed grid (" + describe(d.geometry) + ")");
      }
    }
  } catch (std::exception const& e) {
    notes.push_back(stem + " (" + dir + "): " + e.what());
  }
}

// ---- CPU reference vs Kokkos ----------------------------------------------------------------------

// Each Kokkos registration run again on the CPU reference, as a user runs it; the CPU greedy SSD
// stage from the Kokkos affine when `sameInput` (or when the SSD bound fails).
void compareCpuKokkos(CpuKokkosComparison& c, GreedyStudySetup const& st, HostImage const& moving,
                      HostImage const& fixed, std::array<std::optional<RegistrationPipelineResult>, 4> const& runs,
                      HostImage const& head, bool sameInput) {
  c.ran = true;
  auto cpuRun = [&](StudyMethod m, DistanceStats& out, double& seconds) {
    RegistrationPipelineOptions o = st.options(m);
    o.backend = Backend::Cpu;
    const auto r = pipeline::registerPair(moving, fixed, o);
    seconds = r.secondsTotal;
    out = mapDifference(r, *runs[std::size_t(m)], &head);
    return r;
  };
  const auto rs = cpuRun(StudyMethod::GreedySsd, c.greedySsd, c.secondsGreedySsd);
  auto const& ks = *runs[std::size_t(StudyMethod::GreedySsd)];
  c.affineRms = rmsMappedPointDistance(rs.affine, ks.affine, fixed.geometry);
  cpuRun(StudyMethod::GreedyLncc, c.greedyLncc, c.secondsGreedyLncc);
  if (runs[std::size_t(StudyMethod::Unbiased)]) {
    c.unbiasedCpu = cpuRun(StudyMethod::Unbiased, c.unbiased, c.secondsUnbiased).fluid;
    c.unbiasedKokkos = runs[std::size_t(StudyMethod::Unbiased)]->fluid;
    c.unbiasedCpu.history.clear();
    c.unbiasedKokkos.history.clear();
    c.unbiasedRan = true;
  }
  if (sameInput || c.greedySsd.max > kMaxMapDifferenceVoxels) {
    RegistrationPipelineOptions o = st.ssd;
    o.backend = Backend::Cpu;
    o.presetAffine = ks.affine;
    c.greedySsdSameInput = mapDifference(pipeline::registerPair(moving, fixed, o), ks, &head);
    c.sameInputRan = true;
  }
}

bool cpuWithinBounds(CpuKokkosComparison const& c) {
  return !c.ran || (c.greedySsd.max <= kMaxMapDifferenceVoxels && c.greedyLncc.max <= kMaxMapDifferenceVoxels &&
                    (!c.unbiasedRan || c.unbiased.max <= kMaxMapDifferenceVoxels));
}

// ---- one pair -------------------------------------------------------------------------------------

void printPair(std::ostream& os, GreedyPairResult const& pr) {
  os << (pr.pass ? "  pass  " : "  FAIL  ") << "greedy " << pr.moving << " -> " << pr.fixed << ": Dice";
  for (StudyMethod m : kMethods) {
    auto const& r = pr.method(m);
    if (!r.ran) continue;
    os << " " << title(m) << " " << std::fixed << std::setprecision(4) << r.dice.meanAllLabels;
    if (r.hasJacobian) os << " (det<=0 " << std::setprecision(5) << r.jacobian.foldShareAll << ")";
    if (r.seconds >= 0) os << " " << std::setprecision(2) << r.seconds << " s";
    os << ";";
  }
  if (pr.cpu.ran) {
    os << " CPU vs Kokkos (max / mean / p99 vx) SSD " << stats(pr.cpu.greedySsd) << ", LNCC " << stats(pr.cpu.greedyLncc);
    if (pr.cpu.unbiasedRan)
      os << ", unbiased " << stats(pr.cpu.unbiased) << " (iterations / rejected / stop: CPU "
         << pr.cpu.unbiasedCpu.iterations << " / " << pr.cpu.unbiasedCpu.rejected << " / "
         << toString(pr.cpu.unbiasedCpu.stop) << ", Kokkos " << pr.cpu.unbiasedKokkos.iterations << " / "
         << pr.cpu.unbiasedKokkos.rejected << " / " << toString(pr.cpu.unbiasedKokkos.stop) << ")";
  }
  os << std::endl;
}

// Pair k (moving ids[k] to the fixed ids[0]): the Kokkos methods, the peers, then CPU vs Kokkos.
GreedyPairResult runStudyPair(int k, GreedyStudyOptions const& opt, GreedyStudySetup const& st,
                              HostImage const& fixed, HostImage const& fixedLabels, std::vector<std::string>& notes) {
  GreedyPairResult pr;
  pr.fixed = st.ids[0];
  pr.moving = st.ids[std::size_t(k)];
  const HostImage moving = st.image(pr.moving), movingLabels = st.labels(pr.moving);
  std::array<std::optional<RegistrationPipelineResult>, 4> runs;
  for (StudyMethod m : {StudyMethod::GreedySsd, StudyMethod::Affine, StudyMethod::GreedyLncc, StudyMethod::Unbiased})
    if (m != StudyMethod::Unbiased || opt.runUnbiased) runs[std::size_t(m)] = pipeline::registerPair(moving, fixed, st.options(m));
  // Inside the head: the fixed image's normalised intensity (the same in every Kokkos run).
  const HostImage head = headMask(*runs[std::size_t(StudyMethod::GreedySsd)]);
  for (StudyMethod m : {StudyMethod::Affine, StudyMethod::GreedySsd, StudyMethod::GreedyLncc, StudyMethod::Unbiased})
    if (runs[std::size_t(m)]) measureKortex(pr.method(m), *runs[std::size_t(m)], fixedLabels, movingLabels, head);
  readPeer(pr.method(StudyMethod::Elastix), opt.elastixDir, pr, opt.quick, fixedLabels, head, notes);
  readPeer(pr.method(StudyMethod::FireAnts), opt.fireantsDir, pr, opt.quick, fixedLabels, head, notes);
  const int nth = k - opt.firstPair + 1;  // this run's pair number
  if (opt.cpuPairs < 0 || nth <= opt.cpuPairs) compareCpuKokkos(pr.cpu, st, moving, fixed, runs, head, nth == 1);
  const double affine = pr.method(StudyMethod::Affine).dice.meanAllLabels;
  auto greedyOk = [&](StudyMethod m) {
    auto const& r = pr.method(m);
    return r.dice.meanAllLabels > affine && r.minJacobianFluid > 0.0f;
  };
  pr.pass = greedyOk(StudyMethod::GreedySsd) && greedyOk(StudyMethod::GreedyLncc) && cpuWithinBounds(pr.cpu);
  return pr;
}

// ---- the goals ------------------------------------------------------------------------------------

GoalState goal(bool applicable, bool met) {
  return !applicable ? GoalState::NotApplicable : (met ? GoalState::Met : GoalState::Missed);
}

// All pairs' states: n/a when none applies, else met when every applicable pair met it.
GoalState allPairs(std::vector<GreedyPairResult> const& pairs, GoalState StudyGoals::*g) {
  GoalState out = GoalState::NotApplicable;
  for (auto const& p : pairs) {
    if (p.goals.*g == GoalState::Missed) return GoalState::Missed;
    if (p.goals.*g == GoalState::Met) out = GoalState::Met;
  }
  return out;
}

double meanDice(std::vector<GreedyPairResult> const& pairs, StudyMethod m, int* count = nullptr) {
  double sum = 0;
  int n = 0;
  for (auto const& p : pairs)
    if (p.method(m).ran) sum += p.method(m).dice.meanAllLabels, ++n;
  if (count) *count = n;
  return n ? sum / n : 0.0;
}

void evaluateGoals(GreedyStudyReport& rep) {
  rep.bestGreedy = meanDice(rep.pairs, StudyMethod::GreedyLncc) > meanDice(rep.pairs, StudyMethod::GreedySsd)
                       ? StudyMethod::GreedyLncc
                       : StudyMethod::GreedySsd;
  std::vector<double> speedups;
  for (auto& p : rep.pairs) {
    auto const& k = p.method(rep.bestGreedy);
    auto const& fa = p.method(StudyMethod::FireAnts);
    auto const& el = p.method(StudyMethod::Elastix);
    p.goals.diceVsFireants = goal(fa.ran, k.dice.meanAllLabels >= fa.dice.meanAllLabels);
    p.goals.diceVsElastix = goal(el.ran, k.dice.meanAllLabels >= el.dice.meanAllLabels + kGoalDiceOverElastix);
    p.goals.noFold = goal(k.hasJacobian, k.jacobian.foldShareAll == 0.0);
    const bool timed = fa.ran && fa.seconds > 0 && k.seconds > 0;
    if (timed) p.goals.speedup = fa.seconds / k.seconds, speedups.push_back(p.goals.speedup);
    p.goals.speedVsFireants = goal(timed, timed && p.goals.speedup >= kGoalSpeedupOverFireants);
  }
  StudyGoals& g = rep.goals;
  g.diceVsFireants = allPairs(rep.pairs, &StudyGoals::diceVsFireants);
  int nE = 0;
  const double meanE = meanDice(rep.pairs, StudyMethod::Elastix, &nE);
  g.diceVsElastix = goal(nE > 0, meanDice(rep.pairs, rep.bestGreedy) >= meanE + kGoalDiceOverElastix);
  g.noFold = allPairs(rep.pairs, &StudyGoals::noFold);
  g.speedVsFireants = allPairs(rep.pairs, &StudyGoals::speedVsFireants);
  if (!speedups.empty()) {
    std::sort(speedups.begin(), speedups.end());
    g.speedup = speedups[speedups.size() / 2];  // the median pair
  }
}

// ---- the report -----------------------------------------------------------------------------------

// One Markdown table: a row per pair, a column per method that ran on some pair; `cell` formats one
// method's result; `mean` (optional) the last row.
void methodTable(std::ostream& md, std::string const& caption, GreedyStudyReport const& rep,
                 std::function<std::string(MethodResult const&)> const& cell,
                 std::function<std::string(StudyMethod)> const& mean = {}) {
  std::vector<StudyMethod> cols;
  for (StudyMethod m : kMethods)
    if (std::any_of(rep.pairs.begin(), rep.pairs.end(), [&](GreedyPairResult const& p) { return p.method(m).ran; }))
      cols.push_back(m);
  md << "\n" << caption << "\n\n| moving |";
  for (StudyMethod m : cols) md << " " << title(m) << " |";
  md << "\n|---|";
  for (std::size_t i = 0; i < cols.size(); ++i) md << "---|";
  md << "\n";
  for (auto const& p : rep.pairs) {
    md << "| " << p.moving << " |";
    for (StudyMethod m : cols) md << " " << (p.method(m).ran ? cell(p.method(m)) : std::string("-")) << " |";
    md << "\n";
  }
  if (mean) {
    md << "| **mean** |";
    for (StudyMethod m : cols) md << " " << mean(m) << " |";
    md << "\n";
  }
}

void goalsTable(std::ostream& md, GreedyStudyReport const& rep) {
  md << "\nGoals of issue 28 for the better greedy metric (" << title(rep.bestGreedy)
     << ", by mean Dice): Dice >= FireANTs' on every pair; mean Dice >= elastix's mean + " << kGoalDiceOverElastix
     << " (per pair: the pair's Dice); no voxel with det <= 0 (whole grid); >= " << kGoalSpeedupOverFireants
     << "x faster than FireANTs (Kortex's end-to-end registerPair seconds against the \"seconds\" of FireANTs' "
        "JSON; overall: every pair, the median speed-up shown). Not part of the pass.\n\n"
        "| moving | Dice >= FireANTs | Dice >= elastix + 0.05 | no fold | speed-up vs FireANTs | >= 5x |\n"
        "|---|---|---|---|---|---|\n";
  auto row = [&md](std::string const& name, StudyGoals const& g) {
    md << "| " << name << " | " << toString(g.diceVsFireants) << " | " << toString(g.diceVsElastix) << " | "
       << toString(g.noFold) << " | " << num(g.speedup > 0, g.speedup, 1) << " | " << toString(g.speedVsFireants)
       << " |\n";
  };
  for (auto const& p : rep.pairs) row(p.moving, p.goals);
  row("**overall**", rep.goals);
}

void cpuTable(std::ostream& md, GreedyStudyReport const& rep) {
  if (std::none_of(rep.pairs.begin(), rep.pairs.end(), [](GreedyPairResult const& p) { return p.cpu.ran; })) return;
  md << "\nCPU reference vs Kokkos end to end (each back end its own normalisation and affine, as a user runs it; "
        "|Phi_cpu - Phi_kokkos| inside the head, max / mean / p99, voxels of the moving grid; bound "
     << kMaxMapDifferenceVoxels
     << " on the max; the greedy SSD stage alone from the Kokkos affine on the first pair and wherever the SSD "
        "bound fails):\n\n| moving | affines apart (RMS vx) | greedy SSD | greedy SSD, same affine | greedy LNCC | "
        "unbiased | CPU s (SSD / LNCC / unbiased) |\n|---|---|---|---|---|---|---|\n";
  for (auto const& p : rep.pairs) {
    if (!p.cpu.ran) continue;
    auto const& c = p.cpu;
    md << "| " << p.moving << " | " << std::scientific << std::setprecision(2) << c.affineRms << std::fixed << " | "
       << stats(c.greedySsd) << " | " << (c.sameInputRan ? stats(c.greedySsdSameInput) : "-") << " | "
       << stats(c.greedyLncc) << " | " << (c.unbiasedRan ? stats(c.unbiased) : "-") << " | "
       << num(true, c.secondsGreedySsd, 1) << " / " << num(true, c.secondsGreedyLncc, 1) << " / "
       << num(c.unbiasedRan, c.secondsUnbiased, 1) << " |\n";
  }
}

std::string greedyHeading(GreedyStudyOptions const& opt, std::string const& fixedId) {
  GreedyParams const& g = opt.greedy;
  std::string sc, it;
  for (std::size_t s = 0; s < g.scales.size(); ++s) {
    sc += (s ? "," : "") + std::to_string(g.scales[s]);
    it += (s ? "," : "") + std::to_string(g.iterations[s]);
  }
  std::ostringstream md;
  md << "### Greedy registration (IXI " << (opt.quick ? "4 mm, quick" : "2 mm") << ", fixed " << fixedId << "; alpha "
     << g.fluid.alpha << ", beta " << g.fluid.beta << ", gamma " << g.fluid.gamma << ", scales " << sc
     << ", iterations " << it << ", max step " << g.maxStep << ", solver " << toString(g.solver) << ", LNCC radius "
     << g.lnccRadius << ")\n";
  return md.str();
}

void greedyMarkdown(GreedyStudyReport& rep, GreedyStudyOptions const& opt, std::string const& fixedId) {
  std::ostringstream md;
  md << greedyHeading(opt, fixedId);
  auto fixed = [](int prec) { return [prec](double v) { return num(true, v, prec); }; };
  methodTable(
      md, "Mean Dice over the DLMUSE labels:", rep,
      [&](MethodResult const& r) { return fixed(4)(r.dice.meanAllLabels); },
      [&](StudyMethod m) { return "**" + fixed(4)(meanDice(rep.pairs, m)) + "**"; });
  methodTable(md,
              "Share of voxels with det(Jacobian) <= 0, total map on the fixed grid (inside the head / whole grid; "
              "peers: from their field when given):",
              rep, [&](MethodResult const& r) {
                return r.hasJacobian ? fixed(6)(r.jacobian.foldShareHead) + " / " + fixed(6)(r.jacobian.foldShareAll)
                                     : std::string("-");
              });
  methodTable(md, "min / max det(Jacobian) inside the head (total map, world volume ratio):", rep,
              [&](MethodResult const& r) {
                return r.hasJacobian ? fixed(3)(r.jacobian.minHead) + " / " + fixed(2)(r.jacobian.maxHead)
                                     : std::string("-");
              });
  methodTable(md, "Inverse consistency |p - Phi^-1(Phi(p))| inside the head, mean / p99 (fixed voxels):", rep,
              [&](MethodResult const& r) {
                return r.hasInverse ? fixed(3)(r.inverse.mean) + " / " + fixed(3)(r.inverse.p99) : std::string("-");
              });
  methodTable(
      md,
      "Wall time end to end, seconds (Kortex: registerPair on the Kokkos back end, read excluded; peers: the "
      "\"seconds\" of their JSON, with their \"seconds_total\" in brackets when given):",
      rep, [&](MethodResult const& r) {
        std::string s = num(r.seconds >= 0, r.seconds, r.seconds >= 10 ? 1 : 3);
        if (r.secondsTotal >= 0) s += " (" + num(true, r.secondsTotal, r.secondsTotal >= 10 ? 1 : 3) + ")";
        return s;
      });
  goalsTable(md, rep);
  cpuTable(md, rep);
  md << "\nPass per pair (greedy SSD and LNCC above the affine Dice with det Dh > 0, CPU vs Kokkos within the bound): ";
  for (std::size_t i = 0; i < rep.pairs.size(); ++i)
    md << (i ? ", " : "") << rep.pairs[i].moving << " " << (rep.pairs[i].pass ? "yes" : "**no**");
  md << ".\n";
  rep.markdown = md.str();
}

nlohmann::json methodJson(MethodResult const& r) {
  nlohmann::json x = {{"dice", r.dice.meanAllLabels}, {"labels", r.dice.labels}};
  if (r.seconds >= 0) x["seconds"] = r.seconds;
  if (r.hasJacobian)
    x["jacobian"] = {{"fold_share_head", r.jacobian.foldShareHead}, {"fold_share_all", r.jacobian.foldShareAll},
                     {"min_head", r.jacobian.minHead},              {"max_head", r.jacobian.maxHead},
                     {"head_voxels", r.jacobian.headVoxels},        {"voxels", r.jacobian.voxels}};
  if (r.hasInverse)
    x["inverse_consistency"] = {{"mean", r.inverse.mean}, {"p99", r.inverse.p99}, {"max", r.inverse.max},
                                {"voxels", r.inverse.voxels}, {"unconverged", r.inverseUnconverged}};
  if (!r.peerRecord.is_null()) x["peer_record"] = r.peerRecord;
  return x;
}

nlohmann::json goalsJson(StudyGoals const& g) {
  nlohmann::json x = {{"dice_vs_fireants", toString(g.diceVsFireants)},
                      {"dice_vs_elastix_plus_0.05", toString(g.diceVsElastix)},
                      {"no_fold", toString(g.noFold)},
                      {"speed_5x_vs_fireants", toString(g.speedVsFireants)}};
  if (g.speedup > 0) x["speedup_vs_fireants"] = g.speedup;
  return x;
}

nlohmann::json pairJson(GreedyPairResult const& p) {
  nlohmann::json methods = nlohmann::json::object();
  for (StudyMethod m : kMethods)
    if (p.method(m).ran) methods[toString(m)] = methodJson(p.method(m));
  auto const& s = p.method(StudyMethod::GreedySsd);
  nlohmann::json x = {{"fixed", p.fixed},
                      {"moving", p.moving},
                      {"methods", methods},
                      {"goals", goalsJson(p.goals)},
                      {"dice_affine", p.method(StudyMethod::Affine).dice.meanAllLabels},
                      {"dice_greedy", s.dice.meanAllLabels},
                      {"min_jacobian", s.minJacobianFluid},
                      {"fold_refusals", s.foldRefusals},
                      {"folded", s.stoppedOnFold},
                      {"lncc_min_jacobian", p.method(StudyMethod::GreedyLncc).minJacobianFluid},
                      {"lncc_fold_refusals", p.method(StudyMethod::GreedyLncc).foldRefusals},
                      {"pass", p.pass}};
  if (p.cpu.ran) {
    auto const& c = p.cpu;
    x["cpu_vs_kokkos"] = {{"greedy_ssd", statsJson(c.greedySsd)},
                          {"greedy_lncc", statsJson(c.greedyLncc)},
                          {"affine_rms", c.affineRms},
                          {"seconds_cpu", {{"greedy_ssd", c.secondsGreedySsd}, {"greedy_lncc", c.secondsGreedyLncc}}}};
    if (c.unbiasedRan) {
      x["cpu_vs_kokkos"]["unbiased"] = statsJson(c.unbiased);
      x["cpu_vs_kokkos"]["seconds_cpu"]["unbiased"] = c.secondsUnbiased;
      auto trace = [](RegistrationResult const& r) {
        return nlohmann::json{{"iterations", r.iterations}, {"accepted", r.accepted}, {"rejected", r.rejected},
                              {"stop", toString(r.stop)}, {"energy_final", r.final.total}};
      };
      x["cpu_vs_kokkos"]["unbiased_runs"] = {{"cpu", trace(c.unbiasedCpu)}, {"kokkos", trace(c.unbiasedKokkos)}};
    }
    if (c.sameInputRan) x["cpu_vs_kokkos"]["greedy_ssd_same_affine"] = statsJson(c.greedySsdSameInput);
  }
  return x;
}

void greedyJson(GreedyStudyReport& rep, GreedyStudyOptions const& opt, std::string const& fixedId) {
  nlohmann::json jp = nlohmann::json::array();
  for (auto const& p : rep.pairs) jp.push_back(pairJson(p));
  nlohmann::json means = nlohmann::json::object();
  for (StudyMethod m : kMethods) {
    int n = 0;
    const double v = meanDice(rep.pairs, m, &n);
    if (n) means[toString(m)] = v;
  }
  if (means.contains("greedy_ssd")) means["greedy"] = means["greedy_ssd"];  // the key of earlier reports
  rep.json = {{"pairs", jp},
              {"quick", opt.quick},
              {"fixed", fixedId},
              {"first_pair", opt.firstPair},
              {"mean_dice", means},
              {"best_greedy", toString(rep.bestGreedy)},
              {"goals", goalsJson(rep.goals)},
              {"goal_seconds", "Kortex: registerPair end to end (Kokkos); FireANTs: the \"seconds\" of its JSON"},
              {"cpu_bound_voxels", kMaxMapDifferenceVoxels},
              {"pass", rep.pass}};
  rep.json.update(pipeline::toJson(opt.greedy));  // the greedy parameters, flat (alpha, scales, solver, ...)
  rep.json.erase("metric");                       // both metrics ran
}

}  // namespace

// Stages: the setup, the pairs (each: Kokkos methods, peers, CPU vs Kokkos), the goals, the report.
// One short untimed run of each Kokkos method before the first timed pair (as the FireANTs peer does):
// the process's first device work (context, kernel loading, FFT plans and library) is not charged to
// pair 1. Two affine evaluations per level and one iteration per scale: the same kernels, little time.
void warmUp(GreedyStudyOptions const& opt, GreedyStudySetup const& st, HostImage const& fixed, HostImage const& moving) {
  kx::ScopedRegion region("kortex::validation::greedyStudy::warmUp");
  for (StudyMethod m : {StudyMethod::GreedySsd, StudyMethod::GreedyLncc, StudyMethod::Unbiased}) {
    if (m == StudyMethod::Unbiased && !opt.runUnbiased) continue;
    RegistrationPipelineOptions o = st.options(m);
    o.affine.iterationsPerLevel = 2;
    o.greedy.iterations.assign(o.greedy.scales.size(), 1);
    o.fluid.iterations = 1;
    pipeline::registerPair(moving, fixed, o);
  }
}

GreedyStudyReport runGreedyStudy(GreedyStudyOptions const& opt) {
  GreedyStudyReport rep;
  const GreedyStudySetup st = makeSetup(opt);
  auto const& ids = st.ids;
  rep.note = st.skipNote(opt.dataDir, "greedy");
  if (!rep.note.empty()) return rep;
  rep.ran = true;
  const int last = st.lastPair(opt.firstPair, opt.pairs, "greedy");
  const HostImage fixed = st.image(ids[0]), fixedLabels = st.labels(ids[0]);
  std::vector<std::string> notes;
  bool allPass = true;
  warmUp(opt, st, fixed, st.image(ids[std::size_t(opt.firstPair)]));
  for (int k = opt.firstPair; k <= last; ++k) {
    rep.pairs.push_back(runStudyPair(k, opt, st, fixed, fixedLabels, notes));
    allPass = allPass && rep.pairs.back().pass;
    if (opt.progress) printPair(*opt.progress, rep.pairs.back());
  }
  rep.pass = allPass;
  evaluateGoals(rep);
  greedyMarkdown(rep, opt, ids[0]);
  greedyJson(rep, opt, ids[0]);
  if (!notes.empty()) {
    rep.json["peer_notes"] = notes;
    rep.markdown += "\nPeer files left out:\n";
    for (auto const& n : notes) rep.markdown += "- " + n + "\n";
  }
  return rep;
}

}  // namespace kortex::validation
