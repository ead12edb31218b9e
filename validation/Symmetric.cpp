// The symmetric study (validation/Symmetric.hpp).
#include "validation/Symmetric.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "core/Errors.hpp"
#include "pipeline/Register.hpp"
#include "validation/Registration.hpp"

namespace kortex::validation {

using pipeline::RegistrationPipelineOptions;
using pipeline::RegistrationPipelineResult;

namespace {

std::string fmt(double v, int digits = 4) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

SymmetricModeResult runMode(HostImage const& a, HostImage const& b, HostImage const& aLabels, HostImage const& bLabels,
                            GreedyParams greedy, bool symmetric) {
  RegistrationPipelineOptions o;
  o.backend = Backend::Kokkos;
  o.method = pipeline::RegistrationMethod::Greedy;
  o.greedy = greedy;
  o.greedy.symmetric = symmetric;
  const RegistrationPipelineResult ba = pipeline::registerPair(b, a, o);  // B (moving) to A (fixed)
  const RegistrationPipelineResult ab = pipeline::registerPair(a, b, o);
  SymmetricModeResult m;
  m.dice = diceSummary(aLabels, pipeline::warpedLabels(ba, bLabels)).meanAllLabels;
  const HostImage head = pipeline::headMask(ba);
  const DistanceStats c = inverseConsistency(ba, ab, &head);
  m.consistencyMean = c.mean;
  m.consistencyP99 = c.p99;
  m.seconds = ba.secondsTotal;
  m.minJacobian = std::min(ba.greedy.minJacobian, ab.greedy.minJacobian);
  return m;
}

void addTo(SymmetricModeResult& mean, SymmetricModeResult const& r, double n) {
  mean.dice += r.dice / n;
  mean.consistencyMean += r.consistencyMean / n;
  mean.consistencyP99 += r.consistencyP99 / n;
  mean.seconds += r.seconds / n;
  mean.minJacobian = std::min(mean.minJacobian, r.minJacobian);
}

nlohmann::json toJson(SymmetricModeResult const& r) {
  return {{"dice", r.dice},
          {"inverse_consistency_mean_mm", r.consistencyMean},
          {"inverse_consistency_p99_mm", r.consistencyP99},
          {"seconds", r.seconds},
          {"min_jacobian", r.minJacobian}};
}

void report(SymmetricStudyReport& rep, SymmetricStudyOptions const& opt) {
  const double n = double(rep.pairs.size());
  rep.meanPlain.minJacobian = rep.meanSymmetric.minJacobian = 1.0f;
  nlohmann::json pairs = nlohmann::json::array();
  std::ostringstream md;
  md << "Each pair registered both ways on the Kokkos back end (the study's greedy schedule"
     << (opt.quick ? "; quick: images at 4 mm" : "") << "), in the default mode and with `--symmetric`. Dice: "
     << "mean over the fixed subject's DLMUSE labels; inverse consistency |Phi_AB(Phi_BA(p)) - p| over the fixed "
     << "subject's head, mm:\n\n"
     << "| moving | Dice default | Dice symmetric | consistency default (mean / p99) | consistency symmetric "
        "(mean / p99) | min det default / symmetric | s default / symmetric | pass |\n"
     << "|---|---|---|---|---|---|---|---|\n";
  for (auto const& p : rep.pairs) {
    addTo(rep.meanPlain, p.plain, n);
    addTo(rep.meanSymmetric, p.symmetric, n);
    md << "| " << p.moving << " | " << fmt(p.plain.dice) << " | " << fmt(p.symmetric.dice) << " | "
       << fmt(p.plain.consistencyMean, 3) << " / " << fmt(p.plain.consistencyP99, 3) << " | "
       << fmt(p.symmetric.consistencyMean, 3) << " / " << fmt(p.symmetric.consistencyP99, 3) << " | "
       << fmt(p.plain.minJacobian, 3) << " / " << fmt(p.symmetric.minJacobian, 3) << " | " << fmt(p.plain.seconds, 2)
       << " / " << fmt(p.symmetric.seconds, 2) << " | " << (p.pass ? "yes" : "NO") << " |\n";
    pairs.push_back({{"fixed", p.fixed},
                     {"moving", p.moving},
                     {"default", toJson(p.plain)},
                     {"symmetric", toJson(p.symmetric)},
                     {"pass", p.pass}});
  }
  md << "| **mean** | " << fmt(rep.meanPlain.dice) << " | " << fmt(rep.meanSymmetric.dice) << " | "
     << fmt(rep.meanPlain.consistencyMean, 3) << " / " << fmt(rep.meanPlain.consistencyP99, 3) << " | "
     << fmt(rep.meanSymmetric.consistencyMean, 3) << " / " << fmt(rep.meanSymmetric.consistencyP99, 3) << " | | | |\n\n"
     << "**Result: " << (rep.pass ? "PASS" : "FAIL")
     << "** (every pair: the symmetric mode's mean inverse consistency below the default mode's, det > 0)\n";
  rep.markdown = md.str();
  rep.json = {{"pairs", pairs},
              {"first_pair", opt.firstPair},
              {"quick", opt.quick},
              {"mean", {{"default", toJson(rep.meanPlain)}, {"symmetric", toJson(rep.meanSymmetric)}}},
              {"pass", rep.pass}};
}

}  // namespace

SymmetricStudyReport runSymmetricStudy(SymmetricStudyOptions const& opt) {
  SymmetricStudyReport rep;
  const IxiStudyData st(opt.dataDir, opt.quick);
  rep.note = st.skipNote(opt.dataDir, "symmetric");
  if (!rep.note.empty()) return rep;
  const int last = st.lastPair(opt.firstPair, opt.pairs, "symmetric");
  rep.ran = true;
  const HostImage a = st.image(st.ids[0]), aLabels = st.labels(st.ids[0]);
  rep.pass = true;
  for (int k = opt.firstPair; k <= last; ++k) {
    SymmetricPairResult p;
    p.fixed = st.ids[0];
    p.moving = st.ids[std::size_t(k)];
    const HostImage b = st.image(p.moving), bLabels = st.labels(p.moving);
    p.plain = runMode(a, b, aLabels, bLabels, opt.greedy, false);
    p.symmetric = runMode(a, b, aLabels, bLabels, opt.greedy, true);
    p.pass = p.symmetric.consistencyMean < p.plain.consistencyMean && p.symmetric.minJacobian > 0.0f;
    rep.pass = rep.pass && p.pass;
    rep.pairs.push_back(p);
    if (opt.progress)
      *opt.progress << "  symmetric " << p.moving << ": Dice default " << fmt(p.plain.dice) << ", symmetric "
                    << fmt(p.symmetric.dice) << "; inverse consistency (mean, mm) default "
                    << fmt(p.plain.consistencyMean, 3) << ", symmetric " << fmt(p.symmetric.consistencyMean, 3)
                    << std::endl;
  }
  report(rep, opt);
  return rep;
}

}  // namespace kortex::validation
