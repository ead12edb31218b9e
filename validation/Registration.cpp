#include "validation/Registration.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "core/Errors.hpp"
#include "core/Intensity.hpp"
#include "gpu/affine/Affine.hpp"
#include "gpu/registration/Registration.hpp"
#include "reference_cpu/Affine.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::validation {

using pipeline::jacobianMap;
using pipeline::mapPoint;
using pipeline::registerPair;
using pipeline::warpedLabels;

namespace {
DistanceStats finish(std::vector<double>& d) {
  DistanceStats s;
  s.count = static_cast<Index>(d.size());
  if (d.empty()) return s;
  double sum = 0;
  for (double v : d) {
    sum += v;
    s.max = std::max(s.max, v);
  }
  s.mean = sum / d.size();
  const std::size_t k = std::min(d.size() - 1, static_cast<std::size_t>(std::ceil(0.99 * d.size())) - 1);
  std::nth_element(d.begin(), d.begin() + k, d.end());
  s.p99 = d[k];
  return s;
}
bool masked(HostImage const* mask, Index x, Index y, Index z) {
  return mask && !(mask->data(z, y, x) > 0.0f);
}
}  // namespace

DistanceStats mapDifference(RegistrationPipelineResult const& a, RegistrationPipelineResult const& b,
                            HostImage const* mask) {
  if (!a.fixedGrid.sameGrid(b.fixedGrid) || !a.movingGrid.sameGrid(b.movingGrid))
    throw InvalidArgument("mapDifference: the two registrations are not of the same grids");
  std::vector<double> d;
  double worstValue = 0.0;
  std::array<Index, 3> worst{};
  const Geometry& g = a.fixedGrid;
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        if (masked(mask, x, y, z)) continue;
        const auto p = mapPoint(a, x, y, z), q = mapPoint(b, x, y, z);
        const double e = std::hypot(p[0] - q[0], p[1] - q[1], p[2] - q[2]);
        if (d.empty() || e > worstValue) {
          worstValue = e;
          worst = {x, y, z};
        }
        d.push_back(e);
      }
  DistanceStats s = finish(d);
  s.worst = worst;
  return s;
}

DistanceStats inverseConsistency(RegistrationPipelineResult const& ab, RegistrationPipelineResult const& ba,
                                 HostImage const* mask) {
  if (!ab.fixedGrid.sameGrid(ba.movingGrid) || !ab.movingGrid.sameGrid(ba.fixedGrid))
    throw InvalidArgument("inverseConsistency: the second registration must swap the first one's images");
  const Geometry& g = ab.fixedGrid;
  std::vector<double> d;
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        if (masked(mask, x, y, z)) continue;
        const auto q = mapPoint(ab, x, y, z);
        const auto back = mapPoint(ba, q);
        double s = 0;
        for (int r = 0; r < 3; ++r) {
          double e = 0;
          const double dp[3] = {back[0] - x, back[1] - y, back[2] - z};
          for (int c = 0; c < 3; ++c) e += g.direction[3 * r + c] * g.spacing[c] * dp[c];
          s += e * e;
        }
        d.push_back(std::sqrt(s));
      }
  return finish(d);
}

DiceSummary diceSummary(HostImage const& fixedLabels, HostImage const& warped) {
  if (!fixedLabels.geometry.sameGrid(warped.geometry))
    throw InvalidArgument("diceSummary: label maps on different grids");
  const float* a = fixedLabels.data.data();
  const float* b = warped.data.data();
  const pipeline::LabelDice all = pipeline::meanLabelDice(fixedLabels, warped);
  DiceSummary s;
  s.meanAllLabels = all.mean;
  s.labels = all.labels;
  auto group = [&](const char* name, std::vector<int> const& set) {
    Index A = 0, B = 0, AB = 0;
    std::set<int> in(set.begin(), set.end());
    for (Index i = 0; i < fixedLabels.numVoxels(); ++i) {
      const bool ia = in.count(int(std::lround(a[i]))) > 0, ib = in.count(int(std::lround(b[i]))) > 0;
      A += ia;
      B += ib;
      AB += ia && ib;
    }
    if (A + B > 0) s.groups.emplace_back(name, 2.0 * AB / double(A + B));
  };
  // DLMUSE (shared/data README): cerebral white matter 81-88 (+ 89, 90 fornix, 95 corpus callosum);
  // lateral ventricles 51, 52.
  group("white matter", {81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 95});
  group("lateral ventricles", {51, 52});
  return s;
}

LogJacobianStats logJacobianStats(HostImage const& jac, HostImage const* mask) {
  LogJacobianStats s;
  double sum = 0, sum2 = 0;
  s.min = INFINITY;
  s.max = -INFINITY;
  const Geometry& g = jac.geometry;
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        if (masked(mask, x, y, z)) continue;
        const double v = std::log(double(jac.data(z, y, x)));
        sum += v;
        sum2 += v * v;
        s.min = std::min(s.min, v);
        s.max = std::max(s.max, v);
        ++s.count;
      }
  if (s.count) {
    s.mean = sum / s.count;
    s.sd = std::sqrt(std::max(0.0, sum2 / s.count - s.mean * s.mean));
  }
  return s;
}

}  // namespace kortex::validation

#include <filesystem>
#include <iomanip>
#include <sstream>

#include "core/Phantom.hpp"
#include "io/ImageIO.hpp"

namespace kortex::validation {

std::vector<std::string> studySubjectIds(std::filesystem::path const& t1) {
  std::vector<std::string> ids;
  if (!std::filesystem::is_directory(t1)) return ids;
  const std::string suffix = "-T1_ds.nii.gz";
  for (auto const& e : std::filesystem::directory_iterator(t1)) {
    const std::string n = e.path().filename().string();
    if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      ids.push_back(n.substr(0, n.size() - suffix.size()));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

IxiStudyData::IxiStudyData(std::string const& dataDir, bool q)
    : root(std::filesystem::path(dataDir) / "mri" / "ixi_2mm_more"), ids(studySubjectIds(root / "t1")), quick(q) {}

bool IxiStudyData::complete() const {
  return !root.empty() && ids.size() >= 2 && std::filesystem::exists(root / "labels" / (ids[0] + "-T1_ds_DLMUSE.nii.gz"));
}

std::string IxiStudyData::skipNote(std::string const& dataDir, std::string const& study) const {
  if (!dataDir.empty() && complete()) return "";
  return study + " study skipped: IXI volumes and labels not found under " + (root / "t1").string();
}

int IxiStudyData::lastPair(int firstPair, int pairs, std::string const& study) const {
  const int n = int(ids.size()) - 1;
  if (firstPair < 1 || firstPair > n)
    throw InvalidArgument(study + " study: the first pair must be in [1, " + std::to_string(n) + "], got " +
                          std::to_string(firstPair));
  return std::min<int>(firstPair - 1 + (quick ? std::min(pairs, 2) : pairs), n);
}

HostImage IxiStudyData::image(std::string const& id) const {
  return loadStudyImage(root / "t1" / (id + "-T1_ds.nii.gz"), false, quick);
}

HostImage IxiStudyData::labels(std::string const& id) const {
  return loadStudyImage(root / "labels" / (id + "-T1_ds_DLMUSE.nii.gz"), true, quick);
}

HostImage loadStudyImage(std::filesystem::path const& path, bool labels, bool quick) {
  HostImage h = io::readImage(path);
  if (!quick) return h;
  if (!labels) return affineReduce(h);
  // Labels at 4 mm: every second voxel (the grid of affineReduce: coarse i = fine 2i).
  Geometry g = h.geometry;
  for (int a = 0; a < 3; ++a) {
    g.size[a] = (g.size[a] + 1) / 2;
    g.spacing[a] *= 2;
  }
  HostImage o("kortex::study::labels", g);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) o.data(z, y, x) = h.data(2 * z, 2 * y, 2 * x);
  return o;
}

namespace {

namespace fs = std::filesystem;

// The study's subjects: the first is the fixed image of every pair.
const std::vector<std::string> kStudyIds = {"IXI012-HH-1211", "IXI013-HH-1212", "IXI014-HH-1236", "IXI015-HH-1258",
                                            "IXI033-HH-1259", "IXI034-HH-1260", "IXI039-HH-1261"};

// The study's images: a subject's T1 volume or its DLMUSE labels (4 mm in quick mode).
struct StudyImages {
  fs::path img, lab;
  bool quick = false;
  HostImage load(std::string const& id, bool labels) const {
    return labels ? loadStudyImage(lab / (id + "-T1_ds_DLMUSE.nii.gz"), true, quick)
                  : loadStudyImage(img / (id + "-T1_ds.nii.gz"), false, quick);
  }
};

// |u_cpu - u_kokkos| per voxel (voxels), over the whole fixed grid.
DistanceStats fieldDifference(RegistrationPipelineResult const& rc, RegistrationPipelineResult const& rf,
                              Geometry const& g) {
  std::vector<double> du;
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        double s2 = 0;
        for (int c = 0; c < 3; ++c) {
          const double d = double(rc.u.data(c, z, y, x)) - double(rf.u.data(c, z, y, x));
          s2 += d * d;
        }
        du.push_back(std::sqrt(s2));
      }
  return finish(du);
}

// CPU reference vs Kokkos on one pair, both for min(cap, kCompareIterations) fluid iterations with
// tolerance 0: whole pipelines, the fluid displacement alone, and the CPU fluid stage from the
// Kokkos affine (same input; and its distance to the CPU run from the CPU affine).
void compareCpuKokkos(RegistrationPairResult& pr, HostImage const& moving, HostImage const& fixed,
                      RegistrationPipelineOptions const& po, HostImage const& mask) {
  RegistrationPipelineOptions pc = po;
  pc.fluid.iterations = std::min(po.fluid.iterations, kCompareIterations);
  pc.fluid.tolerance = 0.0;
  RegistrationPipelineOptions pk = pc;
  pc.backend = Backend::Cpu;
  const auto rc = registerPair(moving, fixed, pc);
  const auto rf = registerPair(moving, fixed, pk);
  pr.secondsCpu = rc.secondsTotal;
  pr.cpuCompared = true;
  pr.cpuVsKokkos = mapDifference(rc, rf);
  pr.cpuVsKokkosHead = mapDifference(rc, rf, &mask);
  pr.affineCpuVsKokkos = rmsMappedPointDistance(rc.affine, rf.affine, fixed.geometry);
  pr.fluidCpuVsKokkos = fieldDifference(rc, rf, fixed.geometry);
  auto runText = [](RegistrationResult const& f) {
    return std::to_string(f.iterations) + "/" + std::to_string(f.accepted) + "/" + std::to_string(f.rejected) + " " +
           toString(f.stop);
  };
  pr.cpuRun = runText(rc.fluid);
  {
    RegistrationPipelineOptions ps = pc;
    ps.presetAffine = rf.affine;
    const auto rs = registerPair(moving, fixed, ps);
    pr.sameInputCpuVsKokkos = mapDifference(rs, rf);
    pr.cpuAffineSensitivity = mapDifference(rc, rs);
  }
  pr.kokkosRun = runText(rf.fluid);
}

// One progress line per pair.
void printPair(std::ostream& os, RegistrationPairResult const& pr) {
  os << (pr.pass ? "  pass  " : "  FAIL  ") << "registration " << pr.moving << " -> " << pr.fixed << ": Dice "
     << std::fixed << std::setprecision(4) << pr.diceAffine.meanAllLabels << " -> " << pr.diceFull.meanAllLabels
     << ", min det J " << pr.minJacobian
     << (pr.cpuCompared
             ? ", CPU vs Kokkos max " + std::to_string(pr.cpuVsKokkos.max) + " vx (head " +
                   std::to_string(pr.cpuVsKokkosHead.max) + ", affine rms " + std::to_string(pr.affineCpuVsKokkos) +
                   ", fluid u max " + std::to_string(pr.fluidCpuVsKokkos.max) + " p99 " +
                   std::to_string(pr.fluidCpuVsKokkos.p99) + ", worst at (" + std::to_string(pr.cpuVsKokkos.worst[0]) +
                   "," + std::to_string(pr.cpuVsKokkos.worst[1]) + "," + std::to_string(pr.cpuVsKokkos.worst[2]) +
                   "); same input max " + std::to_string(pr.sameInputCpuVsKokkos.max) + " p99 " +
                   std::to_string(pr.sameInputCpuVsKokkos.p99) + "; CPU vs CPU from the two affines max " +
                   std::to_string(pr.cpuAffineSensitivity.max) + " p99 " +
                   std::to_string(pr.cpuAffineSensitivity.p99) + "; runs cpu " + pr.cpuRun + ", kokkos " +
                   pr.kokkosRun + ")"
             : "")
     << std::endl;
}

// Pair k (moving kStudyIds[k] to the fixed kStudyIds[0]): affine only vs affine + unbiased on
// Kokkos, and CPU vs Kokkos when k <= cpuPairs. `full` receives the Kokkos affine + unbiased run.
RegistrationPairResult runStudyPair(int k, RegistrationStudyOptions const& opt, StudyImages const& images,
                                    RegistrationPipelineOptions const& po, HostImage const& fixed,
                                    HostImage const& fixedLabels, HostImage const& moving,
                                    RegistrationPipelineResult& full) {
  RegistrationPairResult pr;
  pr.fixed = kStudyIds[0];
  pr.moving = kStudyIds[std::size_t(k)];
  const HostImage movingLabels = images.load(kStudyIds[std::size_t(k)], true);
  RegistrationPipelineOptions aff = po;
  aff.useFluid = false;
  const auto ra = registerPair(moving, fixed, aff);
  pr.diceAffine = diceSummary(fixedLabels, warpedLabels(ra, movingLabels));
  full = registerPair(moving, fixed, po);
  RegistrationPipelineResult const& rf = full;
  pr.secondsKokkos = rf.secondsTotal;
  pr.diceFull = diceSummary(fixedLabels, warpedLabels(rf, movingLabels));
  const HostImage jac = jacobianMap(rf);
  const HostImage mask = headMask(rf);
  pr.logJ = logJacobianStats(jac, &mask);
  pr.minJacobian = rf.fluid.final.minJacobian;
  pr.iterations = rf.fluid.iterations;
  pr.stop = toString(rf.fluid.stop);
  if (k <= opt.cpuPairs) compareCpuKokkos(pr, moving, fixed, po, mask);
  pr.pass = pr.diceFull.meanAllLabels > pr.diceAffine.meanAllLabels && pr.minJacobian > 0.0f &&
            (!pr.cpuCompared || pr.sameInputCpuVsKokkos.max <= kMaxMapDifferenceVoxels);
  if (opt.progress) printPair(*opt.progress, pr);
  return pr;
}

// Inverse consistency of the first pair: A->B composed with B->A, affine only and affine + unbiased.
void inverseConsistencyStage(RegistrationStudyReport& rep, RegistrationPipelineOptions const& po,
                             HostImage const& fixed, HostImage const& firstMoving,
                             RegistrationPipelineResult const& firstFull) {
  RegistrationPipelineOptions aff = po;
  aff.useFluid = false;
  const auto abA = registerPair(firstMoving, fixed, aff);
  const auto baA = registerPair(fixed, firstMoving, aff);
  const auto baF = registerPair(fixed, firstMoving, po);
  const HostImage mask = headMask(firstFull);
  rep.icAffine = inverseConsistency(abA, baA, &mask);
  rep.icFull = inverseConsistency(firstFull, baF, &mask);
  rep.icRan = true;
}

// Unbiasedness: the fixed image against a noisy copy of itself (no affine), with the study's
// lambda and with lambda = 0.
void unbiasednessStage(RegistrationStudyReport& rep, RegistrationPipelineOptions const& po, HostImage const& fixed) {
  const double sigma = 0.05 * meanValue(fixed);
  const HostImage noisy = addGaussianNoise(fixed, sigma, 4242);
  RegistrationPipelineOptions pu = po;
  pu.useAffine = false;
  const auto r1 = registerPair(noisy, fixed, pu);
  const HostImage mask = headMask(r1);
  rep.logJLambda = logJacobianStats(jacobianMap(r1), &mask);
  pu.fluid.lambda = 0.0;
  const auto r0 = registerPair(noisy, fixed, pu);
  rep.logJZero = logJacobianStats(jacobianMap(r0), &mask);
  rep.noiseSigma = sigma;
  rep.unbiasedRan = true;
}

double groupDice(DiceSummary const& d, std::size_t i) { return i < d.groups.size() ? d.groups[i].second : NAN; }

std::string registrationMarkdown(RegistrationStudyReport const& rep, RegistrationStudyOptions const& opt,
                                 RegistrationPipelineOptions const& po) {
  std::ostringstream md;
  md << "### Registration (IXI " << (opt.quick ? "4 mm, quick" : "2 mm") << ", lambda " << po.fluid.lambda
     << ", sigma " << po.fluid.sigma << ", cap " << po.fluid.iterations << " iterations)\n\n"
     << "| moving -> fixed | Dice affine | Dice affine + unbiased | WM affine | WM full | ventricles affine | "
        "ventricles full | min det J | mean log J (head) | its | CPU vs Kokkos, same input: max / mean / p99 vx | pass |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (auto const& p : rep.pairs) {
    md << "| " << p.moving << " -> " << p.fixed << " | " << std::fixed << std::setprecision(4)
       << p.diceAffine.meanAllLabels << " | " << p.diceFull.meanAllLabels << " | " << groupDice(p.diceAffine, 0)
       << " | " << groupDice(p.diceFull, 0) << " | " << groupDice(p.diceAffine, 1) << " | "
       << groupDice(p.diceFull, 1) << " | " << std::setprecision(3) << p.minJacobian << " | " << std::setprecision(4)
       << p.logJ.mean << " | " << p.iterations << " | ";
    if (p.cpuCompared)
      md << std::setprecision(4) << p.sameInputCpuVsKokkos.max << " / " << p.sameInputCpuVsKokkos.mean << " / "
         << p.sameInputCpuVsKokkos.p99;
    else
      md << "-";
    md << " | " << (p.pass ? "yes" : "**no**") << " |\n";
  }
  for (auto const& p : rep.pairs) {
    if (!p.cpuCompared) continue;
    auto stats = [](DistanceStats const& d) {
      std::ostringstream o;
      o << std::fixed << std::setprecision(4) << d.max << " / " << d.mean << " / " << d.p99;
      return o.str();
    };
    md << "\nCPU vs Kokkos, " << p.moving << " -> " << p.fixed << " (max / mean / p99 of |Phi_cpu - Phi_kokkos|, "
       << "voxels, " << std::min(po.fluid.iterations, kCompareIterations) << " fluid iterations, tolerance 0):\n\n"
       << "- same input (both fluid stages from the Kokkos affine; bound " << std::setprecision(2)
       << kMaxMapDifferenceVoxels << "): " << stats(p.sameInputCpuVsKokkos) << "\n"
       << "- whole pipelines (each its own affine; the two affines differ by " << std::scientific
       << std::setprecision(2) << p.affineCpuVsKokkos << std::fixed << " voxel RMS): " << stats(p.cpuVsKokkos) << "\n"
       << "- CPU vs CPU, fluid stage from the CPU affine vs from the Kokkos affine (the problem's sensitivity to "
          "that difference): "
       << stats(p.cpuAffineSensitivity) << "\n"
       << "- runs (iterations/accepted/rejected): CPU " << p.cpuRun << ", Kokkos " << p.kokkosRun << "\n";
  }
  if (rep.icRan)
    md << "\nInverse consistency of the first pair (|Phi_ba(Phi_ab(p)) - p| in mm inside the head): affine only "
       << std::setprecision(3) << rep.icAffine.mean << " mean / " << rep.icAffine.p99 << " p99 / " << rep.icAffine.max
       << " max; affine + unbiased " << rep.icFull.mean << " / " << rep.icFull.p99 << " / " << rep.icFull.max << ".\n";
  if (rep.unbiasedRan)
    md << "\nUnbiasedness (" << kStudyIds[0] << " registered to a copy of itself with Gaussian noise, sigma = 5 % of "
          "the mean; no affine): log det J inside the head, mean / sd / min / max: lambda "
       << po.fluid.lambda << ": " << std::setprecision(5) << rep.logJLambda.mean << " / " << rep.logJLambda.sd << " / "
       << rep.logJLambda.min << " / " << rep.logJLambda.max << "; lambda 0: " << rep.logJZero.mean << " / "
       << rep.logJZero.sd << " / " << rep.logJZero.min << " / " << rep.logJZero.max << ".\n";
  return md.str();
}

nlohmann::json pairJson(RegistrationPairResult const& p) {
  return {{"fixed", p.fixed},
          {"moving", p.moving},
          {"dice_affine", p.diceAffine.meanAllLabels},
          {"dice_full", p.diceFull.meanAllLabels},
          {"labels", p.diceFull.labels},
          {"wm_affine", groupDice(p.diceAffine, 0)},
          {"wm_full", groupDice(p.diceFull, 0)},
          {"ventricles_affine", groupDice(p.diceAffine, 1)},
          {"ventricles_full", groupDice(p.diceFull, 1)},
          {"min_jacobian", p.minJacobian},
          {"log_jacobian_mean", p.logJ.mean},
          {"log_jacobian_sd", p.logJ.sd},
          {"iterations", p.iterations},
          {"stop", p.stop},
          {"seconds_kokkos", p.secondsKokkos},
          {"seconds_cpu", p.secondsCpu},
          {"cpu_vs_kokkos", p.cpuCompared ? nlohmann::json{{"max", p.cpuVsKokkos.max},
                                                           {"mean", p.cpuVsKokkos.mean},
                                                           {"p99", p.cpuVsKokkos.p99},
                                                           {"head_max", p.cpuVsKokkosHead.max},
                                                           {"affine_rms", p.affineCpuVsKokkos},
                                                           {"same_input_max", p.sameInputCpuVsKokkos.max},
                                                           {"same_input_mean", p.sameInputCpuVsKokkos.mean},
                                                           {"same_input_p99", p.sameInputCpuVsKokkos.p99},
                                                           {"cpu_affine_sensitivity_max", p.cpuAffineSensitivity.max},
                                                           {"cpu_affine_sensitivity_mean", p.cpuAffineSensitivity.mean},
                                                           {"cpu_affine_sensitivity_p99", p.cpuAffineSensitivity.p99},
                                                           {"fluid_u_max", p.fluidCpuVsKokkos.max},
                                                           {"fluid_u_p99", p.fluidCpuVsKokkos.p99},
                                                           {"worst_voxel", p.cpuVsKokkos.worst},
                                                           {"cpu_run", p.cpuRun},
                                                           {"kokkos_run", p.kokkosRun}}
                                          : nlohmann::json()},
          {"pass", p.pass}};
}

nlohmann::json registrationJson(RegistrationStudyReport const& rep, RegistrationStudyOptions const& opt,
                                RegistrationPipelineOptions const& po) {
  nlohmann::json jp = nlohmann::json::array();
  for (auto const& p : rep.pairs) jp.push_back(pairJson(p));
  auto ljs = [](LogJacobianStats const& l) {
    return nlohmann::json{{"mean", l.mean}, {"sd", l.sd}, {"min", l.min}, {"max", l.max}, {"voxels", l.count}};
  };
  nlohmann::json j;
  j["unbiased"] = {{"lambda", ljs(rep.logJLambda)}, {"lambda_zero", ljs(rep.logJZero)},
                   {"noise_sigma", rep.noiseSigma}};
  j.update({{"pairs", jp},
            {"quick", opt.quick},
            {"lambda", po.fluid.lambda},
            {"sigma", po.fluid.sigma},
            {"iterations_cap", po.fluid.iterations},
            {"inverse_consistency_mm",
             {{"affine", {{"mean", rep.icAffine.mean}, {"p99", rep.icAffine.p99}, {"max", rep.icAffine.max}}},
              {"full", {{"mean", rep.icFull.mean}, {"p99", rep.icFull.p99}, {"max", rep.icFull.max}}}}},
            {"pass", rep.pass}});
  return j;
}

}  // namespace

// Stages: the pairs (each: affine vs unbiased, CPU vs Kokkos), inverse consistency of the first
// pair, unbiasedness, then the report.
RegistrationStudyReport runRegistrationStudy(RegistrationStudyOptions const& opt) {
  RegistrationStudyReport rep;
  StudyImages images;
  images.img = fs::path(opt.dataDir) / "mri" / "ixi_2mm";
  images.lab = fs::path(opt.dataDir) / "mri" / "ixi_2mm_labels";
  images.quick = opt.quick;
  auto const& ids = kStudyIds;
  if (opt.dataDir.empty() || !fs::exists(images.img / (ids[0] + "-T1_ds.nii.gz")) ||
      !fs::exists(images.lab / (ids[0] + "-T1_ds_DLMUSE.nii.gz"))) {
    rep.note = "registration study skipped: IXI volumes and labels not found under " + opt.dataDir;
    return rep;
  }
  rep.ran = true;
  RegistrationPipelineOptions po;
  po.fluid = opt.fluid;
  if (opt.quick) po.fluid.iterations = std::min(po.fluid.iterations, 80);
  po.backend = Backend::Kokkos;
  const HostImage fixed = images.load(ids[0], false), fixedLabels = images.load(ids[0], true);
  const int nPairs = std::min<int>(opt.quick ? 2 : opt.pairs, int(ids.size()) - 1);
  bool allPass = true;
  RegistrationPipelineResult firstFull;
  HostImage firstMoving;
  for (int k = 1; k <= nPairs; ++k) {
    const HostImage moving = images.load(ids[std::size_t(k)], false);
    RegistrationPipelineResult full;
    rep.pairs.push_back(runStudyPair(k, opt, images, po, fixed, fixedLabels, moving, full));
    allPass = allPass && rep.pairs.back().pass;
    if (k == 1) {
      firstFull = full;
      firstMoving = moving;
    }
  }
  if (nPairs >= 1) inverseConsistencyStage(rep, po, fixed, firstMoving, firstFull);
  unbiasednessStage(rep, po, fixed);
  rep.pass = allPass;
  rep.markdown = registrationMarkdown(rep, opt, po);
  rep.json = registrationJson(rep, opt, po);
  return rep;
}

}  // namespace kortex::validation
