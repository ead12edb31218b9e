#include "reference_cpu/Atlas.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/Errors.hpp"
#include "reference_cpu/Fluid.hpp"
#include "reference_cpu/Greedy.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::ref {
namespace {

using HostImageView = ImageView<Kokkos::HostSpace>;

// The fixed-point mean of core/Atlas.hpp, written out: q(a) = llround(a 2^28) (half away from
// zero) clamped to +-2^48, summed in int64, mean = float(ldexp(sum, -28) / N).
std::int64_t quantise(float a) {
  const double s = std::ldexp(double(a), kAtlasFixedBits), limit = std::ldexp(1.0, 48);
  return std::llround(std::clamp(s, -limit, limit));
}

void fixedMean(std::vector<const float*> const& terms, float* out, std::size_t length) {
  const double n = double(terms.size());
#pragma omp parallel for schedule(static)
  for (std::size_t k = 0; k < length; ++k) {
    std::int64_t s = 0;
    for (const float* t : terms) s += quantise(t[k]);
    out[k] = float(std::ldexp(double(s), -kAtlasFixedBits) / n);
  }
}

// W = snap(I(x - u)): the warped image put on the grid of the sums.
void warpSnapped(HostImageView const& I, HostField const& u, HostImageView const& W) {
  warp(I, u, W);
  const std::size_t n = W.size();
#pragma omp parallel for schedule(static)
  for (std::size_t k = 0; k < n; ++k) W.data()[k] = float(std::ldexp(double(quantise(W.data()[k])), -kAtlasFixedBits));
}

// out = the fixed-point mean of every subject's W (`warped`) or u.
void averageInOrder(std::vector<SubjectScale> const& subjects, bool warped, float* out, std::size_t length) {
  std::vector<const float*> terms;
  for (auto const& s : subjects) terms.push_back(warped ? s.W.data() : s.u.data());
  fixedMean(terms, out, length);
}

double rmsDifference(HostImageView const& a, HostImageView const& b) {
  double s = 0.0;
  const std::size_t n = a.size();
#pragma omp parallel for schedule(static) reduction(+ : s)
  for (std::size_t k = 0; k < n; ++k) {
    const double d = double(a.data()[k]) - double(b.data()[k]);
    s += d * d;
  }
  return std::sqrt(s / double(n));
}

float minOf(HostImageView const& a) {
  float m = a.data()[0];
  for (std::size_t k = 1; k < a.size(); ++k) m = std::min(m, a.data()[k]);
  return m;
}

}  // namespace

AtlasResult buildAtlas(std::vector<HostImage> const& images, AtlasParams const& params, HostImage& templ,
                       std::vector<VectorField<Kokkos::HostSpace>>& fields, AtlasProgress const& progress,
                       AtlasScaleTemplate const& scaleTemplate) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const char* who = "buildAtlas";
  if (images.size() < std::size_t(AtlasParams::kMinSubjects))
    throw InvalidArgument(std::string(who) + ": at least two images are needed");
  const Geometry g = images.front().geometry;
  for (auto const& img : images)
    if (!img.geometry.sameGrid(g)) throw InvalidArgument(std::string(who) + ": the images are on different grids");
  GreedyParams const& gp = params.greedy;
  for (int f : gp.scales)
    if (const std::string why = scaleMisfit(g, f); !why.empty())
      throw InvalidArgument(std::string(who) + ": " + why + " of " + describe(g));

  const std::size_t n = images.size();
  AtlasResult result;
  std::vector<SubjectScale> sub(n);
  int prevFactor = 0;
  for (std::size_t s = 0; s < gp.scales.size(); ++s) {
    const int f = gp.scales[s];
    for (std::size_t i = 0; i < n; ++i) {
      sub[i] = enterScale(images[i], f, sub[i], prevFactor, {"atlas u", "atlas v", "atlas W"});
      warpSnapped(sub[i].I.data, sub[i].u, sub[i].W);
    }
    const Index nz = sub[0].I.geometry.nz(), ny = sub[0].I.geometry.ny(), nx = sub[0].I.geometry.nx();
    std::vector<bool> frozen(n, false);
    HostImageView T("atlas template", nz, ny, nx), Tprev("atlas previous template", nz, ny, nx);
    GreedyStepper stepper(gp, nz, ny, nx);  // force, candidate, Jacobian
    HostField ubar("atlas mean displacement", 3, nz, ny, nx);
    int frozenCount = 0;
    for (int it = 1; it <= gp.iterations[s]; ++it) {
      AtlasIteration rec;
      rec.scale = int(s);
      rec.factor = f;
      rec.iteration = it;
      averageInOrder(sub, true, T.data(), T.size());
      rec.templateChange = it == 1 ? 0.0 : rmsDifference(T, Tprev);
      Kokkos::deep_copy(Tprev, T);
      // The greedy step of each subject against the template (a subject whose step folds at every
      // size is frozen; one whose velocity is zero stays).
      for (std::size_t i = 0; i < n; ++i) {
        if (frozen[i]) continue;
        stepper.computeForce(sub[i].W, T);
        stepper.solve(sub[i].v, it == 1, it == 1 && prevFactor == 0);
        const GreedyStepOutcome o = stepper.step(sub[i].u, sub[i].v);
        rec.refused += o.refused;
        if (!o.zeroVelocity && !o.accepted) {
          frozen[i] = true;
          ++frozenCount;
        }
      }
      // Centring: u_i <- u_i(x + ubar) - ubar, ubar the subjects' mean displacement.
      averageInOrder(sub, false, ubar.data(), ubar.size());
      for (std::size_t i = 0; i < n; ++i) {
        if (!stepper.composeUnfolded(sub[i].u, ubar)) ++rec.refused;
        warpSnapped(sub[i].I.data, sub[i].u, sub[i].W);
      }
      float minJ = 3.4e38f;
      double sse = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        minJ = std::min(minJ, stepper.minJacobian(sub[i].u));
        const double r = rmsDifference(sub[i].W, T);
        sse += r * r;
      }
      rec.mismatch = std::sqrt(sse / double(n));
      rec.minJacobian = minJ;
      rec.frozen = frozenCount;
      rec.seconds = elapsed();
      result.refused += rec.refused;
      ++result.iterations;
      result.history.push_back(rec);
      if (progress) progress(rec);
    }
    prevFactor = f;
    if (s + 1 == gp.scales.size()) {  // the last scale is the full grid (factor 1)
      templ = HostImage("atlas template", g);
      averageInOrder(sub, true, templ.data.data(), templ.data.size());
    }
    if (scaleTemplate) {
      HostImage t("atlas scale template", scaledGeometry(g, f));
      Kokkos::deep_copy(t.data, s + 1 == gp.scales.size() ? templ.data : T);
      scaleTemplate(int(s), f, t);
    }
  }
  fields.clear();
  result.minJacobian = 3.4e38f;
  HostImageView jac("atlas jacobian", g.nz(), g.ny(), g.nx());
  for (std::size_t i = 0; i < n; ++i) {
    fields.emplace_back("atlas displacement", g);
    Kokkos::deep_copy(fields.back().data, sub[i].u);
    jacobianDeterminant(sub[i].u, jac);
    result.minJacobian = std::min(result.minJacobian, minOf(jac));
  }
  // sqrt(mean_x |mean_i u_i(x)|^2), the mean by the fixed-point rule.
  const std::size_t voxels = std::size_t(g.nz()) * g.ny() * g.nx();
  HostField mean("atlas mean displacement", 3, g.nz(), g.ny(), g.nx());
  averageInOrder(sub, false, mean.data(), mean.size());
  double ss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : ss)
  for (std::size_t k = 0; k < 3 * voxels; ++k) ss += double(mean.data()[k]) * double(mean.data()[k]);
  result.meanDisplacementRms = std::sqrt(ss / double(voxels));
  result.seconds = elapsed();
  result.secondsCompute = result.seconds;  // one process, no transfers: all of it is compute
  return result;
}

}  // namespace kortex::ref
