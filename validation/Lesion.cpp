// The lesion study (validation/Lesion.hpp).
#include "validation/Lesion.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/Errors.hpp"
#include "core/Intensity.hpp"
#include "core/Phantom.hpp"
#include "pipeline/Register.hpp"
#include "validation/Registration.hpp"

namespace kortex::validation {

using pipeline::RegistrationPipelineOptions;
using pipeline::RegistrationPipelineResult;

namespace {

constexpr double kInsideFraction = 0.95;  // of the ball's voxels labelled
constexpr int kDraws = 1000;
constexpr double kRadiiMm[3] = {5.0, 10.0, 15.0};  // diameters 1, 2 and 3 cm, pair after pair
constexpr double kBrightLevel = 2.0;               // x the T1's 99.5th percentile

template <class F>
void forBall(Geometry const& g, double const* c, double r, F&& f) {
  const Index z0 = std::max<Index>(0, Index(std::floor(c[2] - r))), z1 = std::min<Index>(g.nz() - 1, Index(std::ceil(c[2] + r)));
  const Index y0 = std::max<Index>(0, Index(std::floor(c[1] - r))), y1 = std::min<Index>(g.ny() - 1, Index(std::ceil(c[1] + r)));
  const Index x0 = std::max<Index>(0, Index(std::floor(c[0] - r))), x1 = std::min<Index>(g.nx() - 1, Index(std::ceil(c[0] + r)));
  for (Index z = z0; z <= z1; ++z)
    for (Index y = y0; y <= y1; ++y)
      for (Index x = x0; x <= x1; ++x) {
        const double d = std::sqrt((x - c[0]) * (x - c[0]) + (y - c[1]) * (y - c[1]) + (z - c[2]) * (z - c[2]));
        if (d <= r) f(z, y, x, d);
      }
}

// Share of the ball's voxels (those outside the grid count as outside) that are labelled.
double insideFraction(HostImage const& labels, double const* c, double r) {
  Index in = 0, all = 0;
  forBall(labels.geometry, c, r, [&](Index z, Index y, Index x, double) { in += labels.data(z, y, x) > 0.5f ? 1 : 0; });
  const Index span = Index(std::ceil(r));
  for (Index dz = -span; dz <= span; ++dz)
    for (Index dy = -span; dy <= span; ++dy)
      for (Index dx = -span; dx <= span; ++dx) all += double(dx * dx + dy * dy + dz * dz) <= r * r ? 1 : 0;
  return all > 0 ? double(in) / double(all) : 0.0;
}

std::string fmt(double v, int digits = 4) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

}  // namespace

Lesion paintLesion(HostImage const& t1, HostImage const& labels, double radiusMm, float level, std::uint64_t seed) {
  if (!t1.geometry.sameGrid(labels.geometry, 1e-3)) throw InvalidArgument("lesion: the label map is not on the T1's grid");
  if (!(radiusMm > 0.0)) throw InvalidArgument("lesion: the radius must be positive");
  Geometry const& g = t1.geometry;
  const double r = radiusMm / ((g.spacing[0] + g.spacing[1] + g.spacing[2]) / 3.0);
  std::vector<Index> labelled;
  for (Index i = 0; i < t1.numVoxels(); ++i)
    if (labels.data.data()[i] > 0.5f) labelled.push_back(i);
  if (labelled.empty()) throw InvalidArgument("lesion: the label map labels no voxel");
  Lesion out;
  out.radiusVoxels = r;
  SplitMix64 rng(seed);
  double best = -1.0;
  for (int k = 0; k < kDraws && best < kInsideFraction; ++k) {
    const Index i = labelled[std::size_t(rng.next() % labelled.size())];
    const double c[3] = {double(i % g.nx()), double((i / g.nx()) % g.ny()), double(i / (g.nx() * g.ny()))};
    const double f = insideFraction(labels, c, r);
    if (f > best) {
      best = f;
      std::copy(c, c + 3, out.centre);
    }
  }
  out.image = HostImage("kortex::study::lesion", g);
  out.image.metadata = t1.metadata;
  Kokkos::deep_copy(out.image.data, t1.data);
  out.mask = HostImage("kortex::study::lesion_mask", g);
  Kokkos::deep_copy(out.mask.data, 1.0f);
  forBall(g, out.centre, r + 1.0, [&](Index z, Index y, Index x, double d) {
    out.mask.data(z, y, x) = 0.0f;
    const double w = std::clamp(r + 0.5 - d, 0.0, 1.0);
    if (w > 0.0) {
      out.image.data(z, y, x) = float((1.0 - w) * out.image.data(z, y, x) + w * level);
      ++out.voxels;
    }
  });
  return out;
}

namespace {

// Mean label Dice over the fixed voxels outside `excluded` (warped: a fresh map, changed here).
double diceOutside(HostImage const& fixedLabels, HostImage warped, HostImage const& excluded) {
  HostImage f("kortex::study::fixed_labels", fixedLabels.geometry);
  Kokkos::deep_copy(f.data, fixedLabels.data);
  for (Index i = 0; i < f.numVoxels(); ++i)
    if (excluded.data.data()[i] > 0.5f) f.data.data()[i] = warped.data.data()[i] = 0.0f;
  return diceSummary(f, warped).meanAllLabels;
}

LesionPairResult runPair(int k, LesionStudyOptions const& opt, IxiStudyData const& st, HostImage const& fixed,
                         HostImage const& fixedLabels) {
  LesionPairResult pr;
  pr.fixed = st.ids[0];
  pr.moving = st.ids[std::size_t(k)];
  const HostImage t1 = st.image(pr.moving), labels = st.labels(pr.moving);
  pr.radiusMm = kRadiiMm[(k - 1) % 3];
  const bool bright = k % 2 == 1;
  pr.kind = bright ? "bright" : "cavity";
  std::vector<float> all(t1.data.data(), t1.data.data() + t1.numVoxels());
  const float level = bright ? float(kBrightLevel * percentile(all, 99.5)) : 0.0f;
  const Lesion lesion = paintLesion(t1, labels, pr.radiusMm, level, std::uint64_t(k));
  pr.lesionVoxels = lesion.voxels;

  RegistrationPipelineOptions o;
  o.backend = Backend::Kokkos;
  o.method = pipeline::RegistrationMethod::Greedy;
  o.greedy = opt.greedy;
  const RegistrationPipelineResult free = pipeline::registerPair(t1, fixed, o);
  const RegistrationPipelineResult unmasked = pipeline::registerPair(lesion.image, fixed, o);
  o.masks.moving = lesion.mask;
  const RegistrationPipelineResult masked = pipeline::registerPair(lesion.image, fixed, o);

  HostImage ball("kortex::study::lesion_ball", lesion.mask.geometry);
  for (Index i = 0; i < ball.numVoxels(); ++i) ball.data.data()[i] = lesion.mask.data.data()[i] == 0.0f ? 1.0f : 0.0f;
  const HostImage excluded = pipeline::warpedLabels(free, ball);
  for (Index i = 0; i < excluded.numVoxels(); ++i) pr.excludedFixedVoxels += excluded.data.data()[i] > 0.5f ? 1 : 0;
  pr.diceFree = diceOutside(fixedLabels, pipeline::warpedLabels(free, labels), excluded);
  pr.diceUnmasked = diceOutside(fixedLabels, pipeline::warpedLabels(unmasked, labels), excluded);
  pr.diceMasked = diceOutside(fixedLabels, pipeline::warpedLabels(masked, labels), excluded);
  pr.secondsMasked = masked.secondsTotal;
  pr.minJacobianMasked = masked.greedy.minJacobian;
  pr.pass = pr.diceMasked >= pr.diceFree - kLesionDiceTolerance;
  return pr;
}

void report(LesionStudyReport& rep, LesionStudyOptions const& opt) {
  const double n = double(rep.pairs.size());
  nlohmann::json pairs = nlohmann::json::array();
  std::ostringstream md;
  md << "A ball of another intensity painted into each moving T1 inside its brain (validation/Lesion.hpp), "
     << "registered to the fixed T1 on the Kokkos back end (the study's greedy schedule"
     << (opt.quick ? "; quick: images at 4 mm" : "") << ") lesion-free, lesioned without a mask and lesioned with "
     << "the lesion's moving mask. Mean Dice over the fixed subject's DLMUSE labels outside the lesion's image:\n\n"
     << "| moving | lesion | voxels | lesion-free | unmasked | masked | masked - free | min det masked | pass |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  for (auto const& p : rep.pairs) {
    rep.meanFree += p.diceFree / n;
    rep.meanUnmasked += p.diceUnmasked / n;
    rep.meanMasked += p.diceMasked / n;
    rep.worstMaskedLoss = std::max(rep.worstMaskedLoss, p.diceFree - p.diceMasked);
    rep.worstUnmaskedLoss = std::max(rep.worstUnmaskedLoss, p.diceFree - p.diceUnmasked);
    md << "| " << p.moving << " | " << fmt(2.0 * p.radiusMm / 10.0, 0) << " cm " << p.kind << " | " << p.lesionVoxels
       << " | " << fmt(p.diceFree) << " | " << fmt(p.diceUnmasked) << " | " << fmt(p.diceMasked) << " | "
       << fmt(p.diceMasked - p.diceFree) << " | " << fmt(p.minJacobianMasked, 3) << " | " << (p.pass ? "yes" : "NO") << " |\n";
    pairs.push_back({{"fixed", p.fixed},
                     {"moving", p.moving},
                     {"radius_mm", p.radiusMm},
                     {"kind", p.kind},
                     {"lesion_voxels", p.lesionVoxels},
                     {"excluded_fixed_voxels", p.excludedFixedVoxels},
                     {"dice_free", p.diceFree},
                     {"dice_unmasked", p.diceUnmasked},
                     {"dice_masked", p.diceMasked},
                     {"seconds_masked", p.secondsMasked},
                     {"min_jacobian_masked", p.minJacobianMasked},
                     {"pass", p.pass}});
  }
  md << "| **mean** | | | " << fmt(rep.meanFree) << " | " << fmt(rep.meanUnmasked) << " | " << fmt(rep.meanMasked) << " | "
     << fmt(rep.meanMasked - rep.meanFree) << " | | |\n\n"
     << "Largest loss against the lesion-free pair: masked " << fmt(rep.worstMaskedLoss) << ", unmasked "
     << fmt(rep.worstUnmaskedLoss) << ".\n\n**Result: " << (rep.pass ? "PASS" : "FAIL")
     << "** (every pair: the masked Dice at most " << kLesionDiceTolerance << " below the lesion-free Dice)\n";
  rep.markdown = md.str();
  rep.json = {{"pairs", pairs},
              {"first_pair", opt.firstPair},
              {"quick", opt.quick},
              {"tolerance", kLesionDiceTolerance},
              {"mean_dice", {{"free", rep.meanFree}, {"unmasked", rep.meanUnmasked}, {"masked", rep.meanMasked}}},
              {"worst_loss", {{"masked", rep.worstMaskedLoss}, {"unmasked", rep.worstUnmaskedLoss}}},
              {"pass", rep.pass}};
}

}  // namespace

LesionStudyReport runLesionStudy(LesionStudyOptions const& opt) {
  LesionStudyReport rep;
  const IxiStudyData st(opt.dataDir, opt.quick);
  rep.note = st.skipNote(opt.dataDir, "lesion");
  if (!rep.note.empty()) return rep;
  const int last = st.lastPair(opt.firstPair, opt.pairs, "lesion");
  rep.ran = true;
  const HostImage fixed = st.image(st.ids[0]), fixedLabels = st.labels(st.ids[0]);
  rep.pass = true;
  for (int k = opt.firstPair; k <= last; ++k) {
    rep.pairs.push_back(runPair(k, opt, st, fixed, fixedLabels));
    rep.pass = rep.pass && rep.pairs.back().pass;
    if (opt.progress) {
      auto const& p = rep.pairs.back();
      *opt.progress << "  lesion " << p.moving << " (" << p.kind << ", " << p.radiusMm << " mm): Dice lesion-free "
                    << fmt(p.diceFree) << ", unmasked " << fmt(p.diceUnmasked) << ", masked " << fmt(p.diceMasked)
                    << std::endl;
    }
  }
  report(rep, opt);
  return rep;
}

}  // namespace kortex::validation
