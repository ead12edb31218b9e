// pipeline/ParamsJson.hpp: every params struct survives toJson -> fromJson with every field changed
// from its default, absent keys keep the defaults, and unknown keys, wrong types and misspelt enums
// are refused with one message naming the key.
#define BOOST_TEST_MODULE Params
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "TestUtils.hpp"
#include "core/Errors.hpp"
#include "pipeline/ParamsJson.hpp"
#include "pipeline/Apply.hpp"
#include "pipeline/Denoise.hpp"
#include "pipeline/RegisterJob.hpp"
#include "pipeline/Surface.hpp"

using namespace kortex;
using nlohmann::json;
using pipeline::fromJson;
using pipeline::paramsFromJson;
using pipeline::toJson;

namespace {

// Every key toJson writes for `changed` differs from the default's: the fixture below changes
// every field the JSON holds (a field left at its default would round-trip trivially).
template <class P>
void requireEveryKeyChanged(P const& changed) {
  const json a = toJson(P{}), b = toJson(changed);
  BOOST_TEST(a.size() == b.size());
  for (auto const& item : a.items()) {
    BOOST_TEST_CONTEXT("key " << item.key()) {
      BOOST_TEST_REQUIRE(b.contains(item.key()));
      if (item.value().is_object()) {
        for (auto const& inner : item.value().items())
          BOOST_TEST(b.at(item.key()).at(inner.key()) != inner.value(), "unchanged: " << item.key() << "." << inner.key());
      } else {
        BOOST_TEST(b.at(item.key()) != item.value(), "unchanged: " << item.key());
      }
    }
  }
}

GreedyParams changedGreedy() {
  GreedyParams g;
  g.fluid = {0.25, 0.125, 0.0625};
  g.scales = {4, 2, 1};
  g.iterations = {3, 5, 7};
  g.maxStep = 0.75f;
  g.minStep = 1.0f / 128.0f;
  g.solver = GreedySolver::HybridCg;
  g.coldSweeps = 77;
  g.warmSweeps = 9;
  g.cgMaxIterations = 321;
  g.cgTolerance = 3e-6;
  g.sorVariant = SorVariant::Naive;
  g.matvecVariant = MatvecVariant::Explicit;
  g.stepVariant = GreedyStepVariant::Naive;
  g.recordResidual = true;
  g.metric = GreedyMetric::Lncc;
  g.lnccRadius = 4;
  g.miBins = 24;
  return g;
}

void requireEqual(GreedyParams const& a, GreedyParams const& b) {
  BOOST_TEST(a.fluid.alpha == b.fluid.alpha);
  BOOST_TEST(a.fluid.beta == b.fluid.beta);
  BOOST_TEST(a.fluid.gamma == b.fluid.gamma);
  BOOST_TEST(a.scales == b.scales, boost::test_tools::per_element());
  BOOST_TEST(a.iterations == b.iterations, boost::test_tools::per_element());
  BOOST_TEST(a.maxStep == b.maxStep);
  BOOST_TEST(a.minStep == b.minStep);
  BOOST_TEST(a.solver == b.solver);
  BOOST_TEST(a.coldSweeps == b.coldSweeps);
  BOOST_TEST(a.warmSweeps == b.warmSweeps);
  BOOST_TEST(a.cgMaxIterations == b.cgMaxIterations);
  BOOST_TEST(a.cgTolerance == b.cgTolerance);
  BOOST_TEST(a.sorVariant == b.sorVariant);
  BOOST_TEST(a.matvecVariant == b.matvecVariant);
  BOOST_TEST(a.stepVariant == b.stepVariant);
  BOOST_TEST(a.recordResidual == b.recordResidual);
  BOOST_TEST(a.metric == b.metric);
  BOOST_TEST(a.lnccRadius == b.lnccRadius);
  BOOST_TEST(a.miBins == b.miBins);
}

IntensityParams changedIntensity() {
  IntensityParams p;
  p.pLow = 1.25;
  p.pHigh = 97.5;
  return p;
}

AffineParams changedAffine() {
  AffineParams p;
  p.dof = AffineDof::Rigid;
  p.metric = AffineMetricKind::Mi;
  p.miBins = 40;
  p.levels = 2;
  p.iterationsPerLevel = 33;
  p.maxStep = 0.5;
  p.minStep = 0.002;
  p.centreOfMass = false;
  p.normalise = false;
  p.intensity = changedIntensity();
  return p;
}

RegistrationParams changedRegistration() {
  RegistrationParams p;
  p.lambda = 0.5;
  p.sigma = 1.5f;
  p.iterations = 42;
  p.maxStep = 0.25f;
  p.minStep = 2e-3f;
  p.tolerance = 2e-4;
  p.patience = 3;
  p.variant = RegistrationVariant::Reuse;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(fluid_params_round_trip) {
  const FluidParams p{0.25, 0.125, 0.0625};
  requireEveryKeyChanged(p);
  const auto q = paramsFromJson<FluidParams>(toJson(p));
  BOOST_TEST(q.alpha == p.alpha);
  BOOST_TEST(q.beta == p.beta);
  BOOST_TEST(q.gamma == p.gamma);
}

BOOST_AUTO_TEST_CASE(greedy_params_round_trip) {
  const GreedyParams g = changedGreedy();
  requireEveryKeyChanged(g);
  requireEqual(paramsFromJson<GreedyParams>(toJson(g)), g);
  // Through text too (what a checkpoint or a report holds): floats and doubles keep their bits.
  requireEqual(paramsFromJson<GreedyParams>(json::parse(toJson(g).dump())), g);
  // Every solver and variant spelling reads back.
  for (GreedySolver s : {GreedySolver::Fft, GreedySolver::Sor, GreedySolver::Cg, GreedySolver::HybridSor, GreedySolver::HybridCg}) {
    GreedyParams h;
    h.solver = s;
    BOOST_TEST(paramsFromJson<GreedyParams>(toJson(h)).solver == s);
  }
  for (GreedyStepVariant v : {GreedyStepVariant::Naive, GreedyStepVariant::ScratchTiled}) {
    GreedyParams h;
    h.stepVariant = v;
    BOOST_TEST(paramsFromJson<GreedyParams>(toJson(h)).stepVariant == v);
  }
  for (GreedyMetric m : {GreedyMetric::Ssd, GreedyMetric::Lncc}) {
    GreedyParams h;
    h.metric = m;
    BOOST_TEST(paramsFromJson<GreedyParams>(toJson(h)).metric == m);
  }
}

BOOST_AUTO_TEST_CASE(greedy_params_keep_the_report_keys) {
  // The reports (validate's greedy study, bench greedy) and the checkpoints read these names.
  const json j = toJson(GreedyParams{});
  for (const char* k : {"alpha", "beta", "gamma", "scales", "iterations", "max_step", "min_step", "solver"})
    BOOST_TEST(j.contains(k), k);
  BOOST_TEST(j.at("solver") == "fft");
  BOOST_TEST(j.at("metric") == "ssd");  // by name, as the solver
  BOOST_TEST(j.at("lncc_radius") == 2);
  BOOST_TEST(toJson(changedGreedy()).at("metric") == "lncc");
  BOOST_TEST(j.at("scales") == json({2, 1}));
}

BOOST_AUTO_TEST_CASE(atlas_params_round_trip) {
  AtlasParams p;
  p.greedy = changedGreedy();
  requireEveryKeyChanged(p);
  requireEqual(paramsFromJson<AtlasParams>(toJson(p)).greedy, p.greedy);
}

BOOST_AUTO_TEST_CASE(intensity_and_affine_params_round_trip) {
  const IntensityParams i = changedIntensity();
  requireEveryKeyChanged(i);
  const auto i2 = paramsFromJson<IntensityParams>(toJson(i));
  BOOST_TEST(i2.pLow == i.pLow);
  BOOST_TEST(i2.pHigh == i.pHigh);

  const AffineParams a = changedAffine();
  requireEveryKeyChanged(a);
  const auto a2 = paramsFromJson<AffineParams>(json::parse(toJson(a).dump()));
  BOOST_TEST(a2.dof == a.dof);
  BOOST_TEST(a2.metric == a.metric);
  BOOST_TEST(a2.miBins == a.miBins);
  BOOST_TEST(a2.levels == a.levels);
  BOOST_TEST(a2.iterationsPerLevel == a.iterationsPerLevel);
  BOOST_TEST(a2.maxStep == a.maxStep);
  BOOST_TEST(a2.minStep == a.minStep);
  BOOST_TEST(a2.centreOfMass == a.centreOfMass);
  BOOST_TEST(a2.normalise == a.normalise);
  BOOST_TEST(a2.intensity.pLow == a.intensity.pLow);
  BOOST_TEST(a2.intensity.pHigh == a.intensity.pHigh);
}

BOOST_AUTO_TEST_CASE(registration_params_round_trip) {
  const RegistrationParams p = changedRegistration();
  requireEveryKeyChanged(p);
  const auto q = paramsFromJson<RegistrationParams>(json::parse(toJson(p).dump()));
  BOOST_TEST(q.lambda == p.lambda);
  BOOST_TEST(q.sigma == p.sigma);
  BOOST_TEST(q.iterations == p.iterations);
  BOOST_TEST(q.maxStep == p.maxStep);
  BOOST_TEST(q.minStep == p.minStep);
  BOOST_TEST(q.tolerance == p.tolerance);
  BOOST_TEST(q.patience == p.patience);
  BOOST_TEST(q.variant == p.variant);
}

BOOST_AUTO_TEST_CASE(absent_keys_keep_the_defaults) {
  const auto g = paramsFromJson<GreedyParams>(json{{"alpha", 0.5}, {"iterations", {1, 2}}});
  GreedyParams want;
  want.fluid.alpha = 0.5;
  want.iterations = {1, 2};
  requireEqual(g, want);
  // An integer where a real number goes is a number.
  BOOST_TEST(paramsFromJson<GreedyParams>(json{{"gamma", 1}}).fluid.gamma == 1.0);
  const auto a = paramsFromJson<AffineParams>(json{{"intensity", {{"p_high", 90.0}}}});
  BOOST_TEST(a.intensity.pHigh == 90.0);
  BOOST_TEST(a.intensity.pLow == IntensityParams{}.pLow);
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_refused_by_name) {
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<GreedyParams>(json{{"alpah", 0.1}}); },
                                         {"greedy parameters", "unknown key 'alpah'", "alpha"});
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<FluidParams>(json{{"max_step", 1.0}}); },
                                         {"fluid operator parameters", "unknown key 'max_step'"});
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<AtlasParams>(json{{"greedy", {{"sweeps", 3}}}}); },
                                         {"greedy parameters", "unknown key 'sweeps'"});
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<AffineParams>(json{{"intensity", {{"low", 1.0}}}}); },
                                         {"intensity window parameters", "unknown key 'low'"});
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<RegistrationParams>(json{{"lambda_", 1.0}}); },
                                         {"registration parameters", "unknown key 'lambda_'"});
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<IntensityParams>(json{{"p_low", 1.0}, {"extra", 1}}); },
                                         {"unknown key 'extra'"});
}

BOOST_AUTO_TEST_CASE(wrong_types_are_refused_by_name) {
  auto greedy = [](json const& j) { return [j] { paramsFromJson<GreedyParams>(j); }; };
  test::expectThrowWith<InvalidArgument>(greedy({{"alpha", "0.1"}}), {"greedy parameters", "'alpha' must be a number", "string"});
  test::expectThrowWith<InvalidArgument>(greedy({{"alpha", true}}), {"'alpha' must be a number", "boolean"});
  test::expectThrowWith<InvalidArgument>(greedy({{"alpha", nullptr}}), {"'alpha' must be a number", "null"});
  test::expectThrowWith<InvalidArgument>(greedy({{"cold_sweeps", 2.5}}), {"'cold_sweeps' must be an integer"});
  test::expectThrowWith<InvalidArgument>(greedy({{"cold_sweeps", 1e12}}), {"'cold_sweeps' must be an integer"});
  test::expectThrowWith<InvalidArgument>(greedy({{"cold_sweeps", 4294967296LL}}), {"'cold_sweeps' must be an integer"});
  test::expectThrowWith<InvalidArgument>(greedy({{"scales", 2}}), {"'scales' must be a list of integers"});
  test::expectThrowWith<InvalidArgument>(greedy({{"scales", {2, "1"}}}), {"'scales' must be a list of integers"});
  test::expectThrowWith<InvalidArgument>(greedy({{"iterations", {25, 50.5}}}), {"'iterations' must be a list of integers"});
  test::expectThrowWith<InvalidArgument>(greedy({{"record_residual", 1}}), {"'record_residual' must be true or false"});
  test::expectThrowWith<InvalidArgument>(greedy({{"solver", 1}}), {"'solver' must be a string"});
  test::expectThrowWith<InvalidArgument>(greedy({{"solver", "multigrid"}}), {"'solver'", "multigrid", "fft|sor|cg"});
  test::expectThrowWith<InvalidArgument>(greedy({{"step_variant", "ScratchTiled"}}), {"'step_variant'", "naive|scratch-tiled"});
  test::expectThrowWith<InvalidArgument>(greedy({{"metric", "ncc"}}), {"'metric'", "unknown greedy metric 'ncc'", "ssd|lncc"});
  test::expectThrowWith<InvalidArgument>(greedy({{"lncc_radius", 2.5}}), {"'lncc_radius' must be an integer"});
  test::expectThrowWith<InvalidArgument>(greedy(json::array({1, 2})), {"greedy parameters must be a JSON object", "array"});
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<AtlasParams>(json{{"greedy", 3}}); },
                                         {"atlas parameters", "'greedy' must be a JSON object"});
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<AffineParams>(json{{"normalise", "yes"}}); },
                                         {"affine parameters", "'normalise' must be true or false"});
  test::expectThrowWith<InvalidArgument>([] { paramsFromJson<RegistrationParams>(json{{"variant", "fast"}}); },
                                         {"registration parameters", "'variant'", "naive|recompute|reuse"});
  // A refused read changes nothing (alpha was read before beta was refused).
  GreedyParams g;
  BOOST_CHECK_THROW(fromJson(json{{"alpha", 0.5}, {"beta", "x"}}, g), InvalidArgument);
  BOOST_TEST(g.fluid.alpha == GreedyParams{}.fluid.alpha);
}

// ---- job descriptions ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(register_job_round_trip) {
  for (auto method : {pipeline::RegistrationMethod::Greedy, pipeline::RegistrationMethod::Unbiased}) {
    pipeline::RegisterJob job;
    job.method = method;
    job.fixed.path = "f.nii.gz";
    job.moving.path = "dir/m.nii";
    job.fixedMask.path = "fm.nii";
    job.greedy.fluid.alpha = 0.37;
    job.greedy.scales = {4, 1};
    job.greedy.iterations = {3, 9};
    job.greedy.metric = GreedyMetric::Lncc;
    job.fluid.lambda = 2.5;
    job.fluid.variant = RegistrationVariant::Recompute;
    job.variantGiven = method == pipeline::RegistrationMethod::Unbiased;
    job.useAffine = false;
    job.transform = pipeline::RegistrationTransform::Similarity;
    job.symmetric = true;
    job.affineMetric = AffineMetricKind::Mi;
    job.miBins = 48;
    job.backend = Backend::Cpu;
    job.inverse = true;
    job.outputs.warped = "w.nii";
    job.outputs.field = "out/f.nii.gz";
    job.outputs.composite = "out/c.nii.gz";
    job.outputs.report = "r.json";
    const nlohmann::json j = pipeline::toJson(job);
    const pipeline::RegisterJob back = pipeline::registerJobFromJson(j);
    BOOST_TEST(pipeline::toJson(back) == j);  // every field is in the JSON and read back
    BOOST_TEST(back.outputs.field == job.outputs.field);
    BOOST_TEST(back.useAffine == false);
    BOOST_TEST(back.transform == pipeline::RegistrationTransform::Similarity);
    BOOST_TEST(back.symmetric);
    BOOST_TEST((back.affineMetric == AffineMetricKind::Mi && back.miBins == 48));
    BOOST_TEST(back.outputs.composite == job.outputs.composite);
    BOOST_TEST(back.fixedMask.path == job.fixedMask.path);
    BOOST_TEST(back.movingMask.inMemory());  // not given
    if (method == pipeline::RegistrationMethod::Greedy) BOOST_TEST(back.greedy.fluid.alpha == 0.37);
    else BOOST_TEST(back.fluid.lambda == 2.5);
  }
}

BOOST_AUTO_TEST_CASE(register_job_refuses_unknown_keys_and_images_in_memory) {
  pipeline::RegisterJob job;
  job.fixed.path = "f.nii";
  job.moving.image = HostImage("kortex::test::m", Geometry::make3D(4, 4, 4));
  nlohmann::json j = pipeline::toJson(job);
  BOOST_TEST(j["moving"].is_object());  // its grid and content hash
  BOOST_CHECK_EXCEPTION(pipeline::registerJobFromJson(j), InvalidArgument,
                        [](InvalidArgument const& e) { return std::string(e.what()).find("in memory") != std::string::npos; });
  j["moving"] = "m.nii";
  j["outputs"]["warpd"] = "x.nii";
  BOOST_CHECK_EXCEPTION(pipeline::registerJobFromJson(j), InvalidArgument,
                        [](InvalidArgument const& e) { return std::string(e.what()).find("'warpd'") != std::string::npos; });
  j["outputs"].erase("warpd");
  j["affine_metric"] = "nmi";
  test::expectThrowWith<InvalidArgument>([&] { pipeline::registerJobFromJson(j); }, {"'affine_metric'", "ncc or mi"});
  j["affine_metric"] = "mi";
  j["method"] = "syn";
  BOOST_CHECK_THROW(pipeline::registerJobFromJson(j), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(register_job_policies_are_checked_once_in_validate) {
  test::TempDir dir("kortex-params");
  const HostImage img("kortex::test::img", Geometry::make3D(8, 8, 8));
  pipeline::RegisterJob job;
  job.fixed.image = img;
  job.moving.image = img;
  BOOST_CHECK_THROW(job.validate(), InvalidArgument);  // no output, results not kept
  job.keepResults = true;
  job.validate();
  job.method = pipeline::RegistrationMethod::Unbiased;
  for (double lambda : {0.0, -1.0, std::nan("")}) {
    job.fluid.lambda = lambda;
    BOOST_CHECK_THROW(job.validate(), InvalidArgument);
  }
  job.fluid.lambda = 1.0;
  job.backend = Backend::Cpu;
  job.variantGiven = true;
  BOOST_CHECK_THROW(job.validate(), InvalidArgument);  // a Kokkos kernel with the CPU back end
  job.variantGiven = false;
  job.outputs.field = dir / "f.mha";
  BOOST_CHECK_THROW(job.validate(), IoError);  // a field is NIfTI
  job.outputs.field = dir / "f.nii";
  job.outputs.warped = dir / "f.nii";
  BOOST_CHECK_THROW(job.validate(), InvalidArgument);  // two outputs, one file
  job.outputs.warped.clear();
  job.outputs.composite = dir / "c.mha";
  BOOST_CHECK_THROW(job.validate(), IoError);  // a composite field is NIfTI
  job.outputs.composite.clear();
  job.method = pipeline::RegistrationMethod::Greedy;
  job.affineMetric = AffineMetricKind::Mi;
  job.miBins = kMaxMiBins + 1;
  test::expectThrowWith<InvalidArgument>([&] { job.validate(); }, {"mutual information bins must be in [8, 128], got 129"});
  job.miBins = kMinMiBins;
  job.transform = pipeline::RegistrationTransform::Rigid;
  job.validate();
  job.useAffine = false;
  BOOST_CHECK_THROW(job.validate(), InvalidArgument);  // rigid is the affine stage's fit
  job.useAffine = true;
  job.method = pipeline::RegistrationMethod::Unbiased;
  BOOST_CHECK_THROW(job.validate(), InvalidArgument);  // rigid alone is the greedy job's
  job.method = pipeline::RegistrationMethod::Greedy;
  job.transform = pipeline::RegistrationTransform::Deformable;
  job.symmetric = true;
  job.validate();
  job.transform = pipeline::RegistrationTransform::Affine;
  test::expectThrowWith<InvalidArgument>([&] { job.validate(); }, {"symmetric mode", "deformable stage"});
  job.transform = pipeline::RegistrationTransform::Deformable;
  job.method = pipeline::RegistrationMethod::Unbiased;
  BOOST_CHECK_THROW(job.validate(), InvalidArgument);  // the symmetric mode is the greedy job's
  job.method = pipeline::RegistrationMethod::Greedy;
  job.fixedMask.image = img;
  test::expectThrowWith<InvalidArgument>([&] { job.validate(); }, {"symmetric mode takes no cost-function masks"});
  job.symmetric = false;
  job.validate();  // masks reach both stages
  job.method = pipeline::RegistrationMethod::Unbiased;
  BOOST_CHECK_THROW(job.validate(), InvalidArgument);  // the unbiased job takes no masks
  job.method = pipeline::RegistrationMethod::Greedy;
  job.movingMask.path = dir / "missing_mask.nii";
  BOOST_CHECK_THROW(job.validate(), IoError);
  job.fixedMask = {};
  job.movingMask = {};
  job.transform = pipeline::RegistrationTransform::Deformable;
  job.fixed = {};
  job.fixed.path = dir / "missing.nii";
  BOOST_CHECK_THROW(job.validate(), IoError);
  job.fixed.path = dir.path;
  BOOST_CHECK_THROW(job.validate(), IoError);  // a folder
}

BOOST_AUTO_TEST_CASE(apply_job_round_trip) {
  pipeline::ApplyJob job;
  job.input.path = "m.nii.gz";
  job.reference.path = "f.nii";
  job.output = "out/w.nii";
  job.transforms = {pipeline::parseTransformSpec("warp.nii.gz"), pipeline::parseTransformSpec("[a.mat,1]")};
  job.interpolation = ApplyInterpolation::Label;
  job.backend = Backend::Kokkos;
  const nlohmann::json j = pipeline::toJson(job);
  BOOST_TEST(pipeline::toJson(pipeline::applyJobFromJson(j)) == j);
  BOOST_TEST(j["transforms"][1] == "[a.mat,1]");
  nlohmann::json bad = j;
  bad["transform"] = "x.txt";
  BOOST_CHECK_THROW(pipeline::applyJobFromJson(bad), InvalidArgument);
  bad = j;
  bad["transforms"] = "x.txt";
  BOOST_CHECK_THROW(pipeline::applyJobFromJson(bad), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(denoise_params_and_job_round_trip) {
  BilateralParams b;
  b.radius = 5;
  b.sigmaSpatial = 1.25f;
  b.sigmaRange = std::numeric_limits<float>::infinity();  // allowed; JSON holds it as "inf"
  b.variant = BilateralVariant::Naive;
  const BilateralParams b2 = paramsFromJson<BilateralParams>(json::parse(toJson(b).dump()));
  BOOST_TEST(b2.radius == 5);
  BOOST_TEST(std::isinf(b2.sigmaRange));
  BOOST_TEST((b2.variant == BilateralVariant::Naive));
  NlmParams n;
  n.patchRadius = 1;
  n.searchRadius = 7;
  n.h = 0.3f;
  n.variant = NlmVariant::ScratchTiled;
  const NlmParams n2 = paramsFromJson<NlmParams>(toJson(n));
  BOOST_TEST((n2.variant == NlmVariant::ScratchTiled));
  BOOST_TEST(n2.searchRadius == 7);
  MultiresParams m;
  m.levels = 3;
  m.sigmaRange = 7.5f;
  m.bits = 12;
  m.pyramid = PyramidVariant::Packed16;
  m.bilateral = MultiresBilateralVariant::FastMath;
  const MultiresParams m2 = paramsFromJson<MultiresParams>(toJson(m));
  BOOST_TEST((m2.pyramid == PyramidVariant::Packed16));
  BOOST_TEST((m2.bilateral == MultiresBilateralVariant::FastMath));
  BOOST_TEST(m2.sigmaRange == 7.5f);
  // Every pyramid variant: its name parses back to it, its JSON round-trips, validate() accepts it.
  for (auto pv : {PyramidVariant::Unfused, PyramidVariant::FusedDirect, PyramidVariant::FusedExpand, PyramidVariant::Packed16,
                  PyramidVariant::FusedReduce}) {
    MultiresParams mv;
    mv.pyramid = pv;
    BOOST_CHECK_NO_THROW(mv.validate());
    BOOST_TEST((paramsFromJson<MultiresParams>(toJson(mv)).pyramid == pv));
  }
  BOOST_TEST((parsePyramidVariant("fused-reduce") == PyramidVariant::FusedReduce));
  for (auto method : {pipeline::DenoiseMethod::Bilateral, pipeline::DenoiseMethod::Nlm, pipeline::DenoiseMethod::Multires}) {
    pipeline::DenoiseJob job;
    job.method = method;
    job.input.path = "ct/";
    job.output = "o.nii.gz";
    job.bilateral = b;
    job.nlm = n;
    job.multires.params = m;
    job.multires.integer = pipeline::IntegerMode::Yes;
    job.multires.autoSigmaRange = true;
    job.variantGiven = true;
    const json j = toJson(job);
    BOOST_TEST(toJson(pipeline::denoiseJobFromJson(json::parse(j.dump()))) == j);
  }
  json bad = toJson(pipeline::DenoiseJob{});
  bad["nlm"] = {{"patch_radius", 1.5}};
  BOOST_CHECK_THROW(pipeline::denoiseJobFromJson(bad), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(surface_job_round_trip) {
  pipeline::SurfaceJob job;
  job.input.path = "wm.nii.gz";
  job.threshold = 0.5;
  job.output = "phi.nii.gz";
  job.outMesh = "wm.vtp";
  job.params.band = 2.5f;
  job.params.neighbors = 32;
  job.params.variant = SurfaceNlmVariant::RandomAccess;
  job.variantGiven = true;
  job.backend = Backend::Kokkos;
  job.maxMemoryMiB = 256.0;
  const json j = toJson(job);
  const pipeline::SurfaceJob back = pipeline::surfaceJobFromJson(json::parse(j.dump()));
  BOOST_TEST(toJson(back) == j);
  BOOST_TEST(!back.label.has_value());
  BOOST_TEST(*back.threshold == 0.5);
  BOOST_TEST((back.params.variant == SurfaceNlmVariant::RandomAccess));
}
