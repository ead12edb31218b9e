#include "validation/Atlas.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "gpu/atlas/Atlas.hpp"
#include "io/ImageIO.hpp"
#include "pipeline/Register.hpp"
#include "reference_cpu/Registration.hpp"
#include "validation/QualitySupport.hpp"
#include "validation/Registration.hpp"

namespace kortex::validation {
namespace {

namespace fs = std::filesystem;
using Exec = Kokkos::DefaultExecutionSpace;
using Clock = std::chrono::steady_clock;

constexpr double kMaskThreshold = 0.1;  // normalised intensity: the head of the pool's affine average
constexpr int kEntropyBins = 64;

struct Aligned {
  HostImage image;   // normalised, on the reference grid
  HostImage labels;  // on the reference grid (nearest voxel)
};

// Labels at x - u(x) (voxels of the grid), nearest voxel, 0 outside.
HostImage warpLabelsNearest(HostImage const& labels, VectorField<Kokkos::HostSpace> const& u) {
  HostImage out("kortex::atlas_study::labels", labels.geometry);
  const Index nx = labels.geometry.nx(), ny = labels.geometry.ny(), nz = labels.geometry.nz();
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        const Index sx = Index(std::lround(x - u.data(0, z, y, x))), sy = Index(std::lround(y - u.data(1, z, y, x))),
                    sz = Index(std::lround(z - u.data(2, z, y, x)));
        out.data(z, y, x) = (sx < 0 || sy < 0 || sz < 0 || sx >= nx || sy >= ny || sz >= nz) ? 0.0f : labels.data(sz, sy, sx);
      }
  return out;
}

// Per voxel the most frequent label of the maps (ties: the smaller label).
HostImage majorityVote(std::vector<HostImage> const& maps) {
  HostImage out("kortex::atlas_study::majority", maps.front().geometry);
  const std::size_t n = out.data.size(), m = maps.size();
#pragma omp parallel for
  for (std::size_t k = 0; k < n; ++k) {
    float best = 0.0f;
    std::size_t bestCount = 0;
    for (std::size_t a = 0; a < m; ++a) {
      const float v = maps[a].data.data()[k];
      std::size_t c = 0;
      for (std::size_t b = 0; b < m; ++b) c += maps[b].data.data()[k] == v;
      if (c > bestCount || (c == bestCount && v < best)) {
        best = v;
        bestCount = c;
      }
    }
    out.data.data()[k] = best;
  }
  return out;
}

AtlasTemplateStats templateStats(HostImage const& T, std::vector<HostImage const*> const& members, HostImage const& mask) {
  AtlasTemplateStats s;
  const Index nx = T.geometry.nx(), ny = T.geometry.ny(), nz = T.geometry.nz();
  std::vector<double> hist(kEntropyBins, 0.0);
  double count = 0.0, var = 0.0, grad = 0.0;
  auto at = [&](Index z, Index y, Index x) {
    return double(T.data(std::clamp<Index>(z, 0, nz - 1), std::clamp<Index>(y, 0, ny - 1), std::clamp<Index>(x, 0, nx - 1)));
  };
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        if (!(mask.data(z, y, x) > 0.0f)) continue;
        const double t = T.data(z, y, x);
        hist[std::size_t(std::clamp(int(std::floor(t * kEntropyBins)), 0, kEntropyBins - 1))] += 1.0;
        double v = 0.0;
        for (auto const* m : members) {
          const double d = double(m->data(z, y, x)) - t;
          v += d * d;
        }
        var += v / double(members.size());
        const double gx = 0.5 * (at(z, y, x + 1) - at(z, y, x - 1)), gy = 0.5 * (at(z, y + 1, x) - at(z, y - 1, x)),
                     gz = 0.5 * (at(z + 1, y, x) - at(z - 1, y, x));
        grad += std::sqrt(gx * gx + gy * gy + gz * gz);
        count += 1.0;
      }
  for (double h : hist)
    if (h > 0.0) s.entropy -= (h / count) * std::log2(h / count);
  s.variance = var / count;
  s.sharpness = grad / count;
  return s;
}

double meanPairwiseDice(std::vector<HostImage> const& maps) {
  double sum = 0.0;
  int pairs = 0;
  for (std::size_t a = 0; a < maps.size(); ++a)
    for (std::size_t b = a + 1; b < maps.size(); ++b) {
      sum += diceSummary(maps[a], maps[b]).meanAllLabels;
      ++pairs;
    }
  return pairs ? sum / pairs : 0.0;
}

std::string fmt(double v, int decimals) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(decimals) << v;
  return o.str();
}

std::string meanSd(std::vector<double> const& v, int decimals) {
  const double m = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double ss = 0.0;
  for (double x : v) ss += (x - m) * (x - m);
  return fmt(m, decimals) + (v.size() > 1 ? " ± " + fmt(std::sqrt(ss / double(v.size() - 1)), decimals) : "");
}

template <class F>
std::vector<double> pick(std::vector<AtlasTemplateStats> const& s, F f) {
  std::vector<double> out;
  for (auto const& x : s) out.push_back(f(x));
  return out;
}

double mean(std::vector<double> const& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }

// The study's inputs: the pool (every subject of mri/ixi_2mm_more but the last, which is held
// out; 5 in quick mode), the atlas parameters (quick: one scale, 15 iterations), the reader.
struct AtlasStudySetup {
  fs::path root;
  std::vector<std::string> ids;  // the pool; ids[0]: the reference subject
  std::string heldOut;
  int largest = 0;               // the largest cohort size
  AtlasParams params;
  bool quick = false;
  std::ostream* progress = nullptr;
  HostImage image(std::string const& id) const {
    return loadStudyImage(root / "t1" / (id + "-T1_ds.nii.gz"), false, quick);
  }
  HostImage labels(std::string const& id) const {
    return loadStudyImage(root / "labels" / (id + "-T1_ds_DLMUSE.nii.gz"), true, quick);
  }
  void say(std::string const& s) const {
    if (progress) *progress << "  atlas study: " << s << std::endl;
  }
};

// Checks the options and finds the data; false (with rep.note) when the data is missing.
bool setUp(AtlasStudyOptions const& opt, AtlasStudySetup& st, AtlasStudyReport& rep) {
  st.root = fs::path(opt.dataDir) / "mri" / "ixi_2mm_more";
  st.ids = studySubjectIds(st.root / "t1");
  st.largest = opt.sizes.empty() ? 0 : *std::max_element(opt.sizes.begin(), opt.sizes.end());
  auto const& ids = st.ids;
  if (opt.dataDir.empty() || ids.size() < 3 || !fs::exists(st.root / "labels" / (ids[0] + "-T1_ds_DLMUSE.nii.gz"))) {
    rep.note = "atlas study skipped: IXI volumes and labels not found under " + (st.root / "t1").string();
    return false;
  }
  if (opt.sizes.empty() || *std::min_element(opt.sizes.begin(), opt.sizes.end()) < AtlasParams::kMinSubjects)
    throw InvalidArgument("atlas study: cohort sizes must be >= " + std::to_string(AtlasParams::kMinSubjects));
  if (opt.repeats < 1) throw InvalidArgument("atlas study: at least one cohort per size");
  const std::size_t poolSize = opt.quick ? std::min<std::size_t>(5, ids.size() - 1) : ids.size() - 1;
  if (std::size_t(st.largest) > poolSize)
    throw InvalidArgument("atlas study: cohorts of " + std::to_string(st.largest) + " subjects but only " +
                          std::to_string(poolSize) + " subjects in the pool");
  st.params = opt.params;
  if (opt.quick) {  // 4 mm grids have an odd extent (45 slices): one scale
    st.params.greedy.scales = {1};
    st.params.greedy.iterations = {15};
  }
  st.params.validate();
  st.quick = opt.quick;
  st.progress = opt.progress;
  st.heldOut = st.ids.back();
  st.ids.resize(poolSize);
  return true;
}

// The pool aligned once to its first subject (affine, Kokkos), and the head mask: the pool's
// affine average > kMaskThreshold.
struct AlignedPool {
  HostImage reference;
  std::vector<Aligned> subjects;
  HostImage mask;
};

AlignedPool alignPool(AtlasStudySetup const& st) {
  AlignedPool p;
  pipeline::RegistrationPipelineOptions affineOnly;
  affineOnly.backend = Backend::Kokkos;
  affineOnly.method = pipeline::RegistrationMethod::Greedy;
  affineOnly.useFluid = false;
  p.reference = st.image(st.ids[0]);
  st.say("aligning " + std::to_string(st.ids.size()) + " subjects to " + st.ids[0]);
  for (auto const& id : st.ids) {
    const auto r = pipeline::registerPair(st.image(id), p.reference, affineOnly);
    p.subjects.push_back({r.movingResampled, pipeline::warpedLabels(r, st.labels(id))});
  }
  const Geometry g = p.reference.geometry;
  p.mask = HostImage("kortex::atlas_study::mask", g);
  std::vector<double> avg(std::size_t(g.numVoxels()), 0.0);
  for (auto const& a : p.subjects)
    for (std::size_t k = 0; k < avg.size(); ++k) avg[k] += a.image.data.data()[k];
  for (std::size_t k = 0; k < avg.size(); ++k)
    p.mask.data.data()[k] = avg[k] / double(p.subjects.size()) > kMaskThreshold ? 1.0f : 0.0f;
  return p;
}

// One cohort's templates: the affine average and the greedy atlas (with its fields and result).
struct Cohort {
  std::vector<int> members;  // indices into the pool, sorted
  HostImage affine, greedy;
  std::vector<VectorField<Kokkos::HostSpace>> fields;
  AtlasResult result;
};

// l distinct subjects of the pool (a partial Fisher-Yates shuffle), both templates, their
// statistics appended to sr.
Cohort runCohort(Exec const& exec, int l, AlignedPool const& pool, AtlasParams const& params, SplitMix64& rng,
                 AtlasSizeResult& sr) {
  const Geometry g = pool.reference.geometry;
  Cohort c;
  std::vector<int> idx(pool.subjects.size());
  std::iota(idx.begin(), idx.end(), 0);
  for (int k = 0; k < l; ++k)
    std::swap(idx[std::size_t(k)],
              idx[std::size_t(k) + std::size_t(rng.next() % (pool.subjects.size() - std::size_t(k)))]);
  idx.resize(std::size_t(l));
  std::sort(idx.begin(), idx.end());
  c.members = idx;
  std::vector<HostImage> imgs;
  std::vector<HostImage const*> affineMembers;
  for (int i : idx) {
    imgs.push_back(pool.subjects[std::size_t(i)].image);
    affineMembers.push_back(&pool.subjects[std::size_t(i)].image);
  }
  // Affine template: the plain (double) average of the aligned images.
  c.affine = HostImage("kortex::atlas_study::average", g);
  for (std::size_t k = 0; k < c.affine.data.size(); ++k) {
    double s = 0.0;
    for (auto const* m : affineMembers) s += m->data.data()[k];
    c.affine.data.data()[k] = float(s / double(l));
  }
  c.result = gpu::buildAtlas(exec, imgs, params, c.greedy, c.fields);
  // The subjects in template space: W_i = I_i(x - u_i(x)).
  std::vector<HostImage> warped;
  for (std::size_t i = 0; i < imgs.size(); ++i) {
    warped.emplace_back("kortex::atlas_study::warped", g);
    ref::warp(imgs[i].data, c.fields[i].data, warped.back().data);
  }
  std::vector<HostImage const*> greedyMembers;
  for (auto const& w : warped) greedyMembers.push_back(&w);
  sr.affine.push_back(templateStats(c.affine, affineMembers, pool.mask));
  sr.greedy.push_back(templateStats(c.greedy, greedyMembers, pool.mask));
  return c;
}

nlohmann::json sizeJson(AtlasSizeResult const& sr) {
  nlohmann::json a = nlohmann::json::array(), gr = nlohmann::json::array();
  for (std::size_t k = 0; k < sr.affine.size(); ++k) {
    a.push_back({{"entropy", sr.affine[k].entropy}, {"variance", sr.affine[k].variance}, {"sharpness", sr.affine[k].sharpness}});
    gr.push_back({{"entropy", sr.greedy[k].entropy}, {"variance", sr.greedy[k].variance}, {"sharpness", sr.greedy[k].sharpness}});
  }
  return {{"size", sr.size}, {"affine", a}, {"greedy", gr}, {"seconds", sr.secondsAtlas}, {"pass", sr.pass}};
}

// The random-permutation test: `repeats` cohorts of every size. Appends to rep.sizes, the
// montage rows (first cohort of each size) and allPass (det > 0, variance, sharpness); returns
// the first cohort of the largest size, for the label and Jacobian parts.
Cohort permutationTest(AtlasStudyOptions const& opt, AtlasStudySetup const& st, AlignedPool const& pool,
                       AtlasStudyReport& rep, std::vector<std::vector<HostImage>>& montageRows,
                       nlohmann::json& sizesJson, bool& allPass) {
  Exec exec;
  SplitMix64 rng(opt.seed);
  Cohort kept;
  for (int l : opt.sizes) {
    AtlasSizeResult sr;
    sr.size = l;
    const auto t0 = Clock::now();
    for (int rep0 = 0; rep0 < opt.repeats; ++rep0) {
      Cohort c = runCohort(exec, l, pool, st.params, rng, sr);
      if (!(c.result.minJacobian > 0.0f)) allPass = false;
      if (rep0 == 0) montageRows.push_back({detail::middleSlice(c.affine), detail::middleSlice(c.greedy)});
      if (l == st.largest && rep0 == 0) kept = std::move(c);
    }
    sr.secondsAtlas = std::chrono::duration<double>(Clock::now() - t0).count();
    const double shA = mean(pick(sr.affine, [](auto const& s) { return s.sharpness; }));
    const double shG = mean(pick(sr.greedy, [](auto const& s) { return s.sharpness; }));
    const double vaA = mean(pick(sr.affine, [](auto const& s) { return s.variance; }));
    const double vaG = mean(pick(sr.greedy, [](auto const& s) { return s.variance; }));
    // Variance at every size; sharpness where averaging blurs (the largest size: the affine average
    // of 2 subjects keeps both subjects' edges, which mean |grad T| counts as sharp).
    sr.pass = vaG < vaA && (l != st.largest || shG > shA);
    allPass = allPass && sr.pass;
    st.say(std::to_string(l) + " subjects x " + std::to_string(opt.repeats) + ": sharpness affine " + fmt(shA, 4) +
           " greedy " + fmt(shG, 4) + ", variance affine " + fmt(vaA, 5) + " greedy " + fmt(vaG, 5) + " (" +
           fmt(sr.secondsAtlas, 1) + " s)");
    sizesJson.push_back(sizeJson(sr));
    rep.sizes.push_back(sr);
  }
  return kept;
}

// Labels in template space, the held-out subject and the Jacobians, on the kept cohort.
struct TemplateSpaceResults {
  double diceAffine = 0.0, diceGreedy = 0.0;  // mean pairwise Dice in template space
  double heldAffine = 0.0, heldGreedy = 0.0;  // the held-out subject's majority-vote Dice
  float minDet = 3.4e38f;
  double sdLog = 0.0;
};

TemplateSpaceResults templateSpaceStage(AtlasStudySetup const& st, AlignedPool const& pool, Cohort const& kept) {
  TemplateSpaceResults t;
  const Geometry g = pool.reference.geometry;
  st.say("labels in template space and the held-out subject " + st.heldOut);
  std::vector<HostImage> affineLabels, greedyLabels;
  for (std::size_t i = 0; i < kept.members.size(); ++i) {
    HostImage const& L = pool.subjects[std::size_t(kept.members[i])].labels;
    affineLabels.push_back(L);
    greedyLabels.push_back(warpLabelsNearest(L, kept.fields[i]));
  }
  t.diceAffine = meanPairwiseDice(affineLabels);
  t.diceGreedy = meanPairwiseDice(greedyLabels);

  pipeline::RegistrationPipelineOptions toSubject;
  toSubject.backend = Backend::Kokkos;
  toSubject.method = pipeline::RegistrationMethod::Greedy;
  const HostImage held = st.image(st.heldOut), heldLabels = st.labels(st.heldOut);
  auto heldOutDice = [&](HostImage const& templ, std::vector<HostImage> const& maps) {
    HostImage tm = templ;
    tm.geometry = g;
    tm.metadata = pool.reference.metadata;
    const auto r = pipeline::registerPair(tm, held, toSubject);
    return diceSummary(heldLabels, pipeline::warpedLabels(r, majorityVote(maps))).meanAllLabels;
  };
  t.heldAffine = heldOutDice(kept.affine, affineLabels);
  t.heldGreedy = heldOutDice(kept.greedy, greedyLabels);

  double sumLog = 0.0, sumLog2 = 0.0, nLog = 0.0;
  for (auto const& u : kept.fields) {
    HostImage det("kortex::atlas_study::det", g);
    ref::jacobianDeterminant(u.data, det.data);
    for (std::size_t k = 0; k < det.data.size(); ++k) {
      const float d = det.data.data()[k];
      t.minDet = std::min(t.minDet, d);
      if (pool.mask.data.data()[k] > 0.0f && d > 0.0f) {
        const double ld = std::log(double(d));
        sumLog += ld;
        sumLog2 += ld * ld;
        nLog += 1.0;
      }
    }
  }
  t.sdLog = nLog > 1 ? std::sqrt(std::max(0.0, (sumLog2 - sumLog * sumLog / nLog) / (nLog - 1.0))) : 0.0;
  return t;
}

// The montage (rows: sizes; affine average | greedy template), PNG where the build has image I/O.
std::string writeMontage(std::string const& montageDir, std::vector<std::vector<HostImage>> const& montageRows) {
  float hi = 0.0f;
  for (auto const& row : montageRows)
    for (auto const& t : row)
      for (std::size_t k = 0; k < t.data.size(); ++k) hi = std::max(hi, t.data.data()[k]);
#if KORTEX_VALIDATION_HAVE_IO
  const char* ext = ".png";
#else
  const char* ext = ".pgm";
#endif
  const fs::path file = fs::path(montageDir) / (std::string("atlas_templates") + ext);
  io::writePngMontage({detail::composeGrid(montageRows, hi)}, file, 0.0f, hi > 0.0f ? hi : 1.0f);
  return file.string();
}

std::string atlasMarkdown(AtlasStudyReport const& rep, AtlasStudyOptions const& opt, AtlasStudySetup const& st,
                          std::size_t poolSize, Cohort const& kept, TemplateSpaceResults const& t,
                          Clock::time_point tStart) {
  std::ostringstream md;
  AtlasParams const& params = st.params;
  md << "Cohorts from `mri/ixi_2mm_more` (" << (opt.quick ? "4 mm, " : "2 mm, ") << poolSize
     << " subjects aligned to " << st.ids[0] << " by the affine stage; " << st.heldOut << " held out), "
     << opt.repeats << " random cohorts per size (seed " << opt.seed << "), atlas scales";
  for (int f : params.greedy.scales) md << " x" << f;
  md << ", iterations";
  for (int it : params.greedy.iterations) md << " " << it;
  md << ", metric " << toString(params.greedy.metric) << ", solver " << toString(params.greedy.solver) << ", back end " << Exec::name()
     << ". Over the head mask (affine average of the pool > " << kMaskThreshold << "): entropy of the template's "
     << "intensities (64 bins, bits), variance of the subjects around it, mean |grad T|; mean ± SD over the cohorts.\n\n"
     << "| subjects | entropy affine | entropy greedy | variance affine | variance greedy | sharpness affine | sharpness greedy | pass |\n"
     << "|---|---|---|---|---|---|---|---|\n";
  for (auto const& sr : rep.sizes) {
    md << "| " << sr.size << " | " << meanSd(pick(sr.affine, [](auto const& s) { return s.entropy; }), 3) << " | "
       << meanSd(pick(sr.greedy, [](auto const& s) { return s.entropy; }), 3) << " | "
       << meanSd(pick(sr.affine, [](auto const& s) { return s.variance; }), 5) << " | "
       << meanSd(pick(sr.greedy, [](auto const& s) { return s.variance; }), 5) << " | "
       << meanSd(pick(sr.affine, [](auto const& s) { return s.sharpness; }), 4) << " | "
       << meanSd(pick(sr.greedy, [](auto const& s) { return s.sharpness; }), 4) << " | " << (sr.pass ? "yes" : "**NO**") << " |\n";
  }
  md << "\nFirst cohort of " << st.largest << " subjects:\n\n"
     << "| measure | affine | greedy |\n|---|---|---|\n"
     << "| mean Dice between subjects in template space (all labels) | " << fmt(t.diceAffine, 4) << " | " << fmt(t.diceGreedy, 4) << " |\n"
     << "| held-out " << st.heldOut << ": Dice of the majority-vote labels carried by registering the template to it | "
     << fmt(t.heldAffine, 4) << " | " << fmt(t.heldGreedy, 4) << " |\n\n"
     << "Jacobians of the greedy atlas: min det Dh_i " << fmt(t.minDet, 3) << ", SD of log det Dh_i over the mask "
     << fmt(t.sdLog, 4) << ", RMS of the mean displacement " << fmt(kept.result.meanDisplacementRms, 4)
     << " voxel (its subjects' own RMS displacement is larger: the atlas is unbiased), " << kept.result.refused
     << " fold refusals.\n";
  if (!rep.montagePath.empty())
    md << "\nMontage (middle axial slice; rows: cohort sizes " << opt.sizes.front() << ".." << st.largest
       << ", first cohort each; left: affine average, right: greedy template): `" << fs::path(rep.montagePath).filename().string() << "`\n";
  md << "\nPass (the subjects closer to the greedy template than to the affine average at every size, the greedy "
     << "template sharper at the largest size, higher template-space Dice, det > 0): " << (rep.pass ? "yes" : "**NO**") << ". Time " << fmt(std::chrono::duration<double>(Clock::now() - tStart).count(), 1)
     << " s.\n";
  return md.str();
}

}  // namespace

// Stages: set up (options, data), align the pool, the random-permutation test, labels / held-out
// subject / Jacobians on the first cohort of the largest size, the montage, the report.
AtlasStudyReport runAtlasStudy(AtlasStudyOptions const& opt) {
  AtlasStudyReport rep;
  AtlasStudySetup st;
  if (!setUp(opt, st, rep)) return rep;
  rep.ran = true;
  const auto tStart = Clock::now();
  const AlignedPool pool = alignPool(st);

  bool allPass = true;
  std::vector<std::vector<HostImage>> montageRows;
  nlohmann::json sizesJson = nlohmann::json::array();
  const Cohort kept = permutationTest(opt, st, pool, rep, montageRows, sizesJson, allPass);

  const TemplateSpaceResults t = templateSpaceStage(st, pool, kept);
  allPass = allPass && t.diceGreedy > t.diceAffine;
  allPass = allPass && t.minDet > 0.0f;

  if (!opt.montageDir.empty() && !montageRows.empty()) rep.montagePath = writeMontage(opt.montageDir, montageRows);

  rep.pass = allPass;
  rep.markdown = atlasMarkdown(rep, opt, st, pool.subjects.size(), kept, t, tStart);
  rep.json = {{"pool", st.ids}, {"held_out", st.heldOut}, {"quick", opt.quick}, {"repeats", opt.repeats}, {"seed", opt.seed},
              {"metric", toString(st.params.greedy.metric)},
              {"scales", st.params.greedy.scales}, {"iterations", st.params.greedy.iterations}, {"sizes", sizesJson},
              {"dice_template_space", {{"affine", t.diceAffine}, {"greedy", t.diceGreedy}}},
              {"held_out_dice", {{"affine", t.heldAffine}, {"greedy", t.heldGreedy}}},
              {"jacobian", {{"min_det", t.minDet}, {"sd_log_det", t.sdLog}, {"mean_displacement_rms", kept.result.meanDisplacementRms},
                            {"refused", kept.result.refused}}},
              {"montage", rep.montagePath}, {"pass", rep.pass}};
  return rep;
}

}  // namespace kortex::validation
