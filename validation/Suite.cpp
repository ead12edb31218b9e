#include "validation/Suite.hpp"

#include "pipeline/JobFiles.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "validation/Report.hpp"
#include "io/Output.hpp"

namespace kortex::validation {

namespace fs = std::filesystem;

namespace {

// Sub-image [x0, x0+nx) x [y0, y0+ny) x [z0, z0+nz) (sizes are clipped to the image).
HostImage crop(HostImage const& img, Index x0, Index y0, Index z0, Index nx, Index ny, Index nz) {
  nx = std::min(nx, img.geometry.nx() - x0);
  ny = std::min(ny, img.geometry.ny() - y0);
  nz = std::min(nz, img.geometry.nz() - z0);
  HostImage out("kortex::validation::crop", Geometry::fromSize(nx, ny, nz));
  for (Index k = 0; k < nz; ++k)
    for (Index j = 0; j < ny; ++j)
      for (Index i = 0; i < nx; ++i) out.data(k, j, i) = img.data(k + z0, j + y0, i + x0);
  return out;
}

std::string sizeString(Geometry const& g) {
  std::ostringstream os;
  os << g.nx() << "x" << g.ny();
  if (g.dimension == 3) os << "x" << g.nz();
  return os.str();
}

struct Input {
  std::string tag;          // "shepp-logan", "random", "structured", "head-ct"
  std::string description;  // for the report
  HostImage image;
  double scale = 1.0;       // typical intensity scale for sigma_r / h
};

Case bilateralCase(Input const& in, int r, float sigmaS, float sigmaR) {
  Case c;
  c.algorithm = Algorithm::Bilateral;
  c.bilateral.radius = r;
  c.bilateral.sigmaSpatial = sigmaS;
  c.bilateral.sigmaRange = sigmaR;
  c.input = in.image;
  c.inputDescription = in.description;
  c.name = "bilateral " + std::to_string(in.image.dimension()) + "D " + in.tag + " " +
           sizeString(in.image.geometry) + " r=" + std::to_string(r);
  return c;
}

Case nlmCase(Input const& in, int patch, int search, float h) {
  Case c;
  c.algorithm = Algorithm::Nlm;
  c.nlm.patchRadius = patch;
  c.nlm.searchRadius = search;
  c.nlm.h = h;
  c.input = in.image;
  c.inputDescription = in.description;
  c.name = "nlm " + std::to_string(in.image.dimension()) + "D " + in.tag + " " +
           sizeString(in.image.geometry) + " p=" + std::to_string(patch) +
           " R=" + std::to_string(search);
  return c;
}

Case multiresCase(Input const& in, int levels, float sigmaR, bool integer, int bits = 0) {
  Case c;
  c.algorithm = integer ? Algorithm::MultiresInteger : Algorithm::Multires;
  c.multires.levels = levels;
  c.multires.radius = 2;
  c.multires.sigmaSpatial = 2.0f;
  c.multires.sigmaRange = sigmaR;
  c.multires.bits = bits;
  c.input = in.image;
  c.inputDescription = in.description;
  c.name = std::string(integer ? "multires-u16 " : "multires ") + in.tag + " " +
           sizeString(in.image.geometry) + " L=" + std::to_string(levels);
  return c;
}

// Surface NLM: a sphere's signed distance + N(0, 0.3^2) voxel noise (the surface benchmark's noise) on a
// grid that is not a cube, m = 40 of a band of ~3-4k elements, and a seed window much smaller than the
// band, so that the search passes (and the pruned scans) do the work.
Case surfaceCase(bool quick) {
  Case c;
  c.algorithm = Algorithm::SurfaceNlm;
  const Geometry g = quick ? Geometry::make3D(21, 19, 17) : Geometry::make3D(27, 25, 23);
  const double radius = quick ? 6.0 : 8.5;
  c.input = addGaussianNoise(sphereDistance(g, radius), 0.3, 31);
  c.inputDescription = "sphere signed distance (radius " + fmt(radius, 3) + " voxels) + Gaussian noise (sd 0.3 voxel)";
  c.surface.neighbors = 40;
  c.surface.seedRadius = 32;
  c.surface.iterations = 10;
  c.name = "surface-nlm sphere " + sizeString(g) + " band " + fmt(c.surface.band, 3);
  return c;
}

// Registration force: a cropped 3D Shepp-Logan phantom (fixed) and another noisy copy of it (moving),
// at a smooth displacement of up to 2 voxels, lambda 1: both the data and the regulariser terms count.
Case registrationForceCase(bool quick) {
  Case c;
  c.algorithm = Algorithm::RegistrationForce;
  const Index n = quick ? 25 : 41;
  const HostImage clean = crop(sheppLogan3D(n), 1, 2, 1, n - 2, n - 4, n - 6);
  c.fixed = addGaussianNoise(clean, 0.02, 41);
  c.input = addGaussianNoise(clean, 0.02, 43);
  c.displacement = smoothDisplacement(c.input.geometry, 2.0, 47);
  c.registration.lambda = 1.0;
  c.inputDescription = "Shepp-Logan 3D (cropped) + Gaussian noise (sd 0.02), two noise draws, smooth displacement <= 2 voxels";
  c.name = "registration-force shepp-logan " + sizeString(c.input.geometry);
  return c;
}

// The image scaled to [0, 1023] and rounded: 10-bit data, as in the multires paper.
HostImage toTenBit(HostImage const& img) {
  HostImage out("kortex::validation::tenBit", img.geometry);
  float lo = img.data.data()[0], hi = lo;
  for (Index i = 0; i < img.numVoxels(); ++i) {
    lo = std::min(lo, img.data.data()[i]);
    hi = std::max(hi, img.data.data()[i]);
  }
  const float scale = hi > lo ? 1023.0f / (hi - lo) : 0.0f;
  for (Index i = 0; i < img.numVoxels(); ++i)
    out.data.data()[i] = std::round((img.data.data()[i] - lo) * scale);
  return out;
}

Input noisyPhantom(HostImage clean, std::string const& what, std::uint64_t seed) {
  Input in;
  in.tag = "shepp-logan";
  const double sigma = noiseSigmaForSnr(clean, kQualitySnr);
  in.image = addGaussianNoise(clean, sigma, seed);
  in.description = what + " + Gaussian noise (SNR 25, sigma " + fmt(sigma, 3) + ")";
  in.scale = sigma;
  return in;
}

}  // namespace

std::vector<Case> validationCases(bool quick, std::string const& dataDir,
                                  std::vector<std::string>* notes) {
  std::vector<Case> cases;
  const float inf = std::numeric_limits<float>::infinity();

  // --- 2D inputs (sizes are odd / prime-ish: never a multiple of any tile) ---
  const Index p2 = quick ? 101 : 269;
  Input phantom2 = noisyPhantom(crop(sheppLogan2D(p2), 2, 9, 0, quick ? 97 : 263, quick ? 83 : 241, 1),
                                "Shepp-Logan 2D (cropped)", 11);
  Input random2{"random", "uniform random [0,1)",
                randomImage(quick ? Geometry::make2D(61, 53) : Geometry::make2D(201, 187), 7), 1.0};
  Input struct2{"structured", "7-voxel blocks + ramp",
                structuredImage(quick ? Geometry::make2D(83, 47) : Geometry::make2D(157, 149), 5), 1.0};
  // --- 3D inputs ---
  // Full-mode 3D sizes are chosen so that the naive NLM (cost ~ voxels x window^3 x patch^3)
  // stays within a few seconds on one core: the Serial space runs every variant too.
  Input phantom3 = noisyPhantom(
      crop(sheppLogan3D(quick ? 25 : 49), 1, 2, 1, quick ? 23 : 47, quick ? 21 : 45, quick ? 19 : 43),
      "Shepp-Logan 3D (cropped)", 13);
  Input phantom3s = quick ? phantom3
                          : noisyPhantom(crop(sheppLogan3D(39), 1, 2, 1, 37, 35, 33),
                                         "Shepp-Logan 3D (cropped)", 14);
  Input random3{"random", "uniform random [0,1)",
                randomImage(quick ? Geometry::make3D(19, 17, 13) : Geometry::make3D(41, 37, 31), 17), 1.0};
  Input struct3{"structured", "7-voxel blocks + ramp",
                structuredImage(quick ? Geometry::make3D(21, 15, 11) : Geometry::make3D(33, 29, 27), 19),
                1.0};
  const float s2 = static_cast<float>(phantom2.scale), s3 = static_cast<float>(phantom3.scale);

  // Bilateral: sigma_r = 2 sigma_n on the noisy phantoms (edge-preserving regime), finite and
  // infinite sigma_r on the others (the latter is the Gaussian-blur limit).
  for (int r : quick ? std::vector<int>{1, 3, 5} : std::vector<int>{3, 5, 8})
    cases.push_back(bilateralCase(phantom2, r, std::max(0.5f, 0.5f * r), 2.0f * s2));
  cases.push_back(bilateralCase(random2, quick ? 3 : 5, 2.0f, 0.2f));
  cases.push_back(bilateralCase(struct2, quick ? 5 : 8, 3.0f, inf));
  for (int r : quick ? std::vector<int>{1, 2} : std::vector<int>{1, 3, 5})
    cases.push_back(bilateralCase(phantom3, r, std::max(0.5f, 0.5f * r), 2.0f * s3));
  cases.push_back(bilateralCase(random3, 2, 1.5f, 0.2f));
  cases.push_back(bilateralCase(struct3, 3, 2.0f, quick ? 0.1f : inf));

  // NLM: h = sigma_n on the noisy phantoms; h comparable to the contrast on the others.
  for (auto pr : quick ? std::vector<std::pair<int, int>>{{1, 3}, {3, 5}}
                       : std::vector<std::pair<int, int>>{{3, 3}, {3, 5}, {3, 8}, {2, 5}})
    cases.push_back(nlmCase(phantom2, pr.first, pr.second, s2));
  cases.push_back(nlmCase(random2, 2, 4, 0.3f));
  cases.push_back(nlmCase(struct2, 3, 8, 0.1f));
  const float s3s = static_cast<float>(phantom3s.scale);
  for (auto pr : quick ? std::vector<std::pair<int, int>>{{1, 2}}
                       : std::vector<std::pair<int, int>>{{1, 3}, {2, 3}})
    cases.push_back(nlmCase(phantom3s, pr.first, pr.second, s3s));
  cases.push_back(nlmCase(random3, 1, 3, 0.3f));
  cases.push_back(nlmCase(struct3, 2, 3, 0.1f));
  if (!quick) {
    // Larger windows and patches on smaller volumes (the naive cost grows with both).
    cases.push_back(nlmCase(Input{"structured", "7-voxel blocks + ramp",
                                  structuredImage(Geometry::make3D(25, 23, 21), 23), 1.0},
                            2, 5, 0.1f));
    cases.push_back(nlmCase(Input{"structured", "7-voxel blocks + ramp",
                                  structuredImage(Geometry::make3D(21, 19, 17), 29), 1.0},
                            3, 5, 0.1f));
  }

  // Multiresolution filter (2D): float pipeline on the noisy phantom (sigma_r = 2 sigma_n, the
  // quality study's rule) and on the structured image (sigma_r = inf: pure pyramid + blur, every
  // level at maxLevels), the integer pipeline on 10-bit versions of both (exact).
  cases.push_back(multiresCase(phantom2, quick ? 3 : 5, 2.0f * s2, false));
  cases.push_back(multiresCase(struct2, maxLevels(struct2.image.geometry.nx(), struct2.image.geometry.ny()),
                               inf, false));
  {
    Input p10{"shepp-logan-10bit", phantom2.description + ", scaled to 10 bits and rounded",
              toTenBit(phantom2.image), 1.0};
    Input s10{"structured-10bit", "7-voxel blocks + ramp, scaled to 10 bits and rounded",
              toTenBit(struct2.image), 1.0};
    // sigma_r in grey levels: 2 sigma_n of the phantom after the 10-bit scaling (about 2% of
    // the range), and a wide 200 on the blocks.
    cases.push_back(multiresCase(p10, quick ? 3 : 5, 20.0f, true, 10));
    cases.push_back(multiresCase(s10, 4, 200.0f, true, 0));
  }

  // Surface NLM (3D level set): every search variant against the CPU reference.
  cases.push_back(surfaceCase(quick));
  cases.push_back(registrationForceCase(quick));

  // Real head CT slice (HU, no added noise: the scan's own noise), when data is given.
  if (!dataDir.empty()) {
    const fs::path slice = fs::path(dataDir) / "ct" / "head_ge" / "01.dcm";
    if (!qualityHasImageIo()) {
      if (notes) notes->push_back("head CT cases skipped: Kortex was built without image I/O (VTK)");
    } else if (!fs::exists(slice)) {
      if (notes) notes->push_back("head CT cases skipped: " + slice.string() + " not found");
    } else {
      HostImage hu = qualityReadImage(slice.string());
      if (quick) {
        const Index nx = 157, ny = 131;
        hu = crop(hu, (hu.geometry.nx() - nx) / 2, (hu.geometry.ny() - ny) / 2, 0, nx, ny, 1);
      }
      Input ct{"head-ct", "head CT slice " + slice.filename().string() + " (HU)", hu, 1.0};
      // sigma_r = 50 HU and h = 25 HU: a few times the scan's own noise level (~10-20 HU).
      cases.push_back(bilateralCase(ct, quick ? 3 : 5, 2.0f, 50.0f));
      cases.push_back(nlmCase(ct, 3, quick ? 3 : 5, 25.0f));
    }
  }
  return cases;
}

namespace {

// ---- the studies: each runs into the report and says whether it ran and passed

StudyOutcome runHarnessStudy(SuiteOptions const& opt, SuiteReport& rep) {
  HarnessOptions ho;
  ho.time = opt.timing;
  ho.warmup = 1;
  ho.repetitions = opt.quick ? 3 : 7;
  ho.timeBudgetMs = opt.quick ? 500.0 : 1500.0;
  for (auto const& c : validationCases(opt.quick, opt.dataDir, &rep.notes)) {
    CaseResult r = runCase(c, ho);
    if (opt.progress) {
      *opt.progress << (r.pass ? "  pass  " : "  FAIL  ") << r.name << "  (" << r.params << ")";
      double worst = 0.0;
      for (auto const& v : r.variants) worst = std::max(worst, v.ran ? v.check.errors.maxRel : INFINITY);
      *opt.progress << "  worst max-rel " << fmtSci(worst) << "\n";
      opt.progress->flush();
    }
    (r.pass ? rep.casesPassed : rep.casesFailed)++;
    rep.cases.push_back(std::move(r));
  }
  StudyOutcome o;
  o.ran = !rep.cases.empty();
  o.pass = rep.casesFailed == 0 && o.ran;
  return o;
}

StudyOutcome runQualityStudies(SuiteOptions const& opt, SuiteReport& rep) {
  StudyOutcome o;
  QualityStudyOptions qo;
  qo.quick = opt.quick;
  qo.dataDir = opt.dataDir;
  qo.quality.montageDir = opt.montageDir;
  rep.quality = runQualityStudy(qo, &rep.notes);
  for (auto const& q : rep.quality) {
    o.pass = o.pass && q.pass;
    if (opt.progress) {
      *opt.progress << (q.pass ? "  pass  " : "  FAIL  ") << "quality " << q.name << ": noisy PSNR "
                    << fmt(q.psnrNoisy, 4) << " dB ->";
      for (auto const& f : q.filters)
        *opt.progress << " " << (f.filter == "bilateral" ? "BF" : "NLM") << f.window << " "
                      << fmt(f.psnr, 4);
      *opt.progress << "\n";
      opt.progress->flush();
    }
  }
  MultiresQualityOptions mo;
  mo.quick = opt.quick;
  mo.dataDir = opt.dataDir;
  mo.montageDir = opt.montageDir;
  rep.multiresQuality = runMultiresQualityStudy(mo, &rep.notes);
  for (auto const& q : rep.multiresQuality) {
    o.pass = o.pass && q.pass;
    if (opt.progress) {
      *opt.progress << (q.pass ? "  pass  " : "  FAIL  ") << "multires quality " << q.name << ": PSNR noisy "
                    << fmt(q.psnrNoisy, 4) << " bilateral " << fmt(q.psnrBilateral, 4) << " multires "
                    << fmt(q.psnrMultires, 4) << " dB\n";
      opt.progress->flush();
    }
  }
  o.ran = !rep.quality.empty() || !rep.multiresQuality.empty();
  return o;
}

// A study report with .ran, .pass and .note: its outcome, its note when it did not run.
template <class StudyReport>
StudyOutcome outcomeOf(StudyReport const& r, SuiteReport& rep) {
  if (!r.ran) rep.notes.push_back(r.note);
  StudyOutcome o;
  o.ran = r.ran;
  o.pass = !r.ran || r.pass;
  return o;
}

StudyOutcome runRegistration(SuiteOptions const& opt, SuiteReport& rep) {
  RegistrationStudyOptions ro;
  ro.quick = opt.quick;
  ro.dataDir = opt.dataDir;
  ro.progress = opt.progress;
  ro.fluid = opt.registration;
  ro.pairs = opt.registrationPairs;
  rep.registration = runRegistrationStudy(ro);
  return outcomeOf(rep.registration, rep);
}

StudyOutcome runSurface(SuiteOptions const& opt, SuiteReport& rep) {
  SurfaceStudyOptions so;
  so.quick = opt.quick;
  so.dataDir = opt.dataDir;
  so.progress = opt.progress;
  rep.surface = runSurfaceStudy(so);
  return outcomeOf(rep.surface, rep);
}

// The pairs and schedule of the greedy study's flags, for the studies over its pairs.
IxiPairStudyOptions pairStudyOptions(SuiteOptions const& opt) {
  IxiPairStudyOptions o;
  o.quick = opt.quick;
  o.dataDir = opt.dataDir;
  o.progress = opt.progress;
  o.greedy = opt.greedy;
  o.pairs = opt.greedyPairs;
  o.firstPair = opt.greedyFirstPair;
  return o;
}

StudyOutcome runGreedy(SuiteOptions const& opt, SuiteReport& rep) {
  GreedyStudyOptions go{pairStudyOptions(opt)};
  go.unbiased = opt.registration;
  go.cpuPairs = opt.greedyCpuPairs;
  go.elastixDir = opt.elastixDir;
  go.fireantsDir = opt.fireantsDir;
  go.runUnbiased = opt.greedyUnbiased;
  rep.greedy = runGreedyStudy(go);
  return outcomeOf(rep.greedy, rep);
}

StudyOutcome runMultimodal(SuiteOptions const& opt, SuiteReport& rep) {
  MultimodalStudyOptions mo{pairStudyOptions(opt)};
  mo.miBins = opt.greedy.miBins;
  mo.cpuPairs = opt.greedyCpuPairs;
  mo.imagesDir = opt.multimodalImagesDir;
  mo.elastixDir = opt.multimodalElastixDir;
  rep.multimodal = runMultimodalStudy(mo);
  return outcomeOf(rep.multimodal, rep);
}

StudyOutcome runLesion(SuiteOptions const& opt, SuiteReport& rep) {
  rep.lesion = runLesionStudy(LesionStudyOptions{pairStudyOptions(opt)});
  return outcomeOf(rep.lesion, rep);
}

StudyOutcome runSymmetric(SuiteOptions const& opt, SuiteReport& rep) {
  rep.symmetric = runSymmetricStudy(SymmetricStudyOptions{pairStudyOptions(opt)});
  return outcomeOf(rep.symmetric, rep);
}

StudyOutcome runAtlas(SuiteOptions const& opt, SuiteReport& rep) {
  AtlasStudyOptions ao = opt.atlas;
  ao.quick = opt.quick;
  ao.dataDir = opt.dataDir;
  ao.montageDir = opt.montageDir;
  ao.progress = opt.progress;
  if (opt.quick) {
    ao.sizes = {2, 4};
    ao.repeats = 2;
  }
  rep.atlas = runAtlasStudy(ao);
  return outcomeOf(rep.atlas, rep);
}

}  // namespace

std::vector<Study> const& validationStudies() {
  static const std::vector<Study> studies = {
      {"harness",
       "CPU reference vs every Kokkos variant on every execution space (bilateral, NLM, multires, surface NLM, the registration force; phantoms, and a "
       "head CT slice with --data), with speedups",
       nullptr, &runHarnessStudy},
      {"quality", "SNR-25 quality: the bilateral, NLM and multires filters must raise the PSNR", nullptr,
       &runQualityStudies},
      {"registration", "IXI pairs: Dice affine vs unbiased fluid, CPU vs Kokkos, inverse consistency",
       "the IXI volumes and labels", &runRegistration},
      {"surface", "ICBM152 and IXI white matter: distance to the clean surface, CPU vs Kokkos",
       "the ICBM152 template and the IXI label maps", &runSurface},
      {"greedy",
       "IXI pairs of mri/ixi_2mm_more: affine / greedy SSD / greedy LNCC / unbiased / elastix / FireANTs: Dice, det J, "
       "inverse consistency, time, the issue-28 goals; CPU vs Kokkos end to end",
       "the IXI volumes and labels of mri/ixi_2mm_more", &runGreedy},
      {"multimodal",
       "the greedy study's pairs, the moving subject in a second contrast made from its labels: Dice of affine NCC, "
       "affine MI, greedy MI (plain and bias-corrected) against the T1 pair's greedy LNCC (the pairs, schedule and --mi-bins of the greedy "
       "study's flags)",
       "the IXI volumes and labels of mri/ixi_2mm_more", &runMultimodal},
      {"lesion",
       "the greedy study's pairs with a synthetic lesion (a 1-3 cm ball, bright or a cavity) in the moving T1: Dice "
       "outside it lesion-free, unmasked and with the lesion's moving mask (the masked run within 0.01 of the "
       "lesion-free one; the greedy study's pairs and schedule)",
       "the IXI volumes and labels of mri/ixi_2mm_more", &runLesion},
      {"symmetric",
       "the greedy study's pairs registered both ways, the default mode against --symmetric: Dice and inverse "
       "consistency (the greedy study's pairs and schedule)",
       "the IXI volumes and labels of mri/ixi_2mm_more", &runSymmetric},
      {"atlas",
       "random-permutation entropy / variance / sharpness of greedy atlases vs affine averages, template-space "
       "Dice, held-out labels, Jacobians (the atlas's own schedule, AtlasParams; --atlas-metric picks its "
       "metric)",
       "the IXI volumes and labels of mri/ixi_2mm_more", &runAtlas},
  };
  return studies;
}

Study const* findStudy(std::string const& name) {
  for (auto const& s : validationStudies())
    if (name == s.name) return &s;
  return nullptr;
}

namespace {
Study const& requireStudy(std::string const& name) {
  if (Study const* s = findStudy(name)) return *s;
  std::string known;
  for (auto const& s : validationStudies()) known += std::string(known.empty() ? "" : ", ") + s.name;
  throw InvalidArgument("validate: unknown study '" + name + "' (the studies: " + known + ")");
}

void requireFolder(std::string const& dir, const char* what) {
  if (!dir.empty() && !fs::is_directory(dir)) throw InvalidArgument("validate: " + std::string(what) + " '" + dir + "' is not a folder");
}
}  // namespace

void ValidateJob::validate() const {
  SuiteOptions const& o = suite;
  for (auto const& name : o.only) {
    Study const& study = requireStudy(name);
    if (study.dataNeeded && o.dataDir.empty())
      throw InvalidArgument("validate: the " + name + " study needs the data folder (" + study.dataNeeded + ")");
  }
  o.greedy.validate();
  o.registration.validate();
  requireFolder(o.elastixDir, "elastix's results folder");
  requireFolder(o.fireantsDir, "FireANTs' results folder");
  requireFolder(o.multimodalElastixDir, "elastix's multi-modal results folder");
  if (!o.multimodalImagesDir.empty() && fs::exists(o.multimodalImagesDir) && !fs::is_directory(o.multimodalImagesDir))
    throw InvalidArgument("validate: the folder for the multi-modal images '" + o.multimodalImagesDir + "' is a file");
  for (int l : o.atlas.sizes)
    if (l < AtlasParams::kMinSubjects || l > 32)
      throw InvalidArgument("validate: the atlas study's cohort sizes run from " + std::to_string(AtlasParams::kMinSubjects) +
                            " to 32 (the subjects of mri/ixi_2mm_more but one), got " + std::to_string(l));
  if (!outJson.empty()) io::requireWritableFile(outJson, "JSON report");
  if (!outMarkdown.empty()) io::requireWritableFile(outMarkdown, "Markdown report");
}

ValidateResult runValidateJob(ValidateJob const& job) {
  job.validate();
  if (!job.suite.montageDir.empty()) {
    std::error_code ec;
    fs::create_directories(job.suite.montageDir, ec);
    if (ec || !fs::is_directory(job.suite.montageDir))
      throw InvalidArgument("validate: cannot create the montage folder '" + job.suite.montageDir + "'");
  }
  ValidateResult r;
  r.report = runValidationSuite(job.suite);
  r.markdown = toMarkdown(r.report);
  const std::string json = toJson(r.report).dump(2) + "\n";
  pipeline::writeAllOrNone({{"JSON report", job.outJson, [&](fs::path const& t) { io::writeTextFileAtomic(t, json); }},
                            {"Markdown report", job.outMarkdown, [&](fs::path const& t) { io::writeTextFileAtomic(t, r.markdown); }}});
  return r;
}

SuiteReport runValidationSuite(SuiteOptions const& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!opt.dataDir.empty() && !fs::is_directory(opt.dataDir))
    throw IoError("data folder '" + opt.dataDir + "' does not exist or is not a folder");
  for (auto const& name : opt.only) requireStudy(name);
  SuiteReport rep;
  rep.quick = opt.quick;
  rep.environment = io::environmentJson(true);

  auto named = [&](Study const& s) { return std::find(opt.only.begin(), opt.only.end(), s.name) != opt.only.end(); };
  rep.pass = true;
  for (auto const& s : validationStudies()) {
    if (!opt.only.empty() && !named(s)) continue;
    if (s.dataNeeded && opt.dataDir.empty()) {  // left out without a data folder
      if (named(s)) {
        rep.notes.push_back(std::string(s.name) + " study not run: it needs a data folder (" + s.dataNeeded + ")");
        rep.pass = false;
      }
      continue;
    }
    StudyOutcome o = s.run(opt, rep);
    o.name = s.name;
    rep.pass = rep.pass && o.pass && (!named(s) || o.ran);
    rep.studies.push_back(o);
  }
  rep.wallSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

nlohmann::json toJson(SuiteReport const& r) {
  nlohmann::json j;
  j["kind"] = "kortex-validation";
  j["pass"] = r.pass;
  j["quick"] = r.quick;
  j["wall_seconds"] = r.wallSeconds;
  j["environment"] = r.environment;
  j["tolerance"] = {{"max_relative_error", kMaxRelativeErrorTolerance},
                    {"definition", "max|kokkos - reference| / max|reference|"}};
  j["cases_passed"] = r.casesPassed;
  j["cases_failed"] = r.casesFailed;
  j["cases"] = nlohmann::json::array();
  for (auto const& c : r.cases) j["cases"].push_back(toJson(c));
  j["quality"] = nlohmann::json::array();
  for (auto const& q : r.quality) j["quality"].push_back(toJson(q));
  j["multires_quality"] = nlohmann::json::array();
  for (auto const& q : r.multiresQuality) j["multires_quality"].push_back(toJson(q));
  if (r.registration.ran) j["registration"] = r.registration.json;
  if (r.surface.ran) j["surface"] = r.surface.json;
  if (r.greedy.ran) j["greedy"] = r.greedy.json;
  if (r.multimodal.ran) j["multimodal"] = r.multimodal.json;
  if (r.lesion.ran) j["lesion"] = r.lesion.json;
  if (r.symmetric.ran) j["symmetric"] = r.symmetric.json;
  if (r.atlas.ran) j["atlas"] = r.atlas.json;
  j["notes"] = r.notes;
  return j;
}

std::string toMarkdown(SuiteReport const& r) {
  std::ostringstream os;
  os << "# Kortex validation report" << (r.quick ? " (quick)" : "") << "\n\n"
     << io::environmentMarkdown() << "\n"
     << "## CPU reference vs Kokkos variants\n\n"
     << "Tolerance: max relative error (max|kokkos - reference| / max|reference|) <= "
     << fmtSci(kMaxRelativeErrorTolerance)
     << " (the 16-bit integer multires pipeline: exact, tolerance 0). PSNR against the reference with L = max - min of the reference output. Times: median "
        "of the stated repetitions after warm-up, fenced; Kokkos times are the kernel alone "
        "(data resident), transfers (upload + download of one image) listed separately; "
        "speedup = reference median / variant median.\n\n"
     << toMarkdown(r.cases) << "\n"
     << r.casesPassed << " case(s) passed, " << r.casesFailed << " failed.\n\n";
  if (!r.quality.empty()) os << "## Quality (SNR 25)\n\n" << toMarkdown(r.quality) << "\n";
  if (!r.multiresQuality.empty())
    os << "## Multiresolution filter quality (SNR 25)\n\n" << toMarkdown(r.multiresQuality) << "\n";
  if (r.registration.ran) os << "## Registration (issue 4)\n\n" << r.registration.markdown << "\n";
  if (r.surface.ran) os << "## Surface denoising (issue 5)\n\n" << r.surface.markdown << "\n";
  if (r.greedy.ran) os << "## Greedy registration (issue 14)\n\n" << r.greedy.markdown << "\n";
  if (r.multimodal.ran) os << "## Multi-modal registration (issue 41)\n\n" << r.multimodal.markdown << "\n";
  if (r.lesion.ran) os << "## A lesion and its cost-function mask (issue 41)\n\n" << r.lesion.markdown << "\n";
  if (r.symmetric.ran) os << "## The symmetric mode (issue 41)\n\n" << r.symmetric.markdown << "\n";
  if (r.atlas.ran) os << "## Unbiased atlas (issue 15)\n\n" << r.atlas.markdown << "\n";
  if (!r.notes.empty()) {
    os << "## Notes\n\n";
    for (auto const& n : r.notes) os << "- " << n << "\n";
    os << "\n";
  }
  os << "**Result: " << (r.pass ? "PASS" : "FAIL") << "** (" << fmt(r.wallSeconds, 3) << " s)\n";
  return os.str();
}

}  // namespace kortex::validation
