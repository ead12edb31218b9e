// The product jobs of pipeline/: each validates its parameters against the image and scans the
// input for NaN/Inf once, before anything runs, on either back end; then it gives exactly what the
// back end it picked gives when called directly (the jobs add no maths of their own).
#define BOOST_TEST_MODULE Pipeline
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "TestUtils.hpp"
#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "gpu/bilateral/Bilateral.hpp"
#include "gpu/multires/Multires.hpp"
#include "gpu/nlm/Nlm.hpp"
#include "gpu/surface_nlm/SurfaceNlm.hpp"
#include "io/ImageIO.hpp"
#include "pipeline/Atlas.hpp"
#include "pipeline/Denoise.hpp"
#include "pipeline/Register.hpp"
#include "pipeline/Surface.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Multires.hpp"
#include "reference_cpu/Nlm.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

using namespace kortex;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
const std::vector<Backend> kBackends{Backend::Cpu, Backend::Kokkos};

using test::nlmParams;
BilateralParams bf(int radius, float sigmaS, float sigmaR) { return test::bilateralParams(radius, sigmaS, sigmaR); }

MultiresParams mr(int levels, int radius, float sigmaS, float sigmaR) {
  MultiresParams p;
  p.levels = levels;
  p.radius = radius;
  p.sigmaSpatial = sigmaS;
  p.sigmaRange = sigmaR;
  return p;
}

bool mentions(std::exception const& e, std::string const& what) {
  return std::string(e.what()).find(what) != std::string::npos;
}

// `job` must throw InvalidArgument whose message contains `what`.
void expectRefused(std::function<void()> const& job, std::string const& what) {
  test::expectThrowWith<InvalidArgument>(job, {what});
}

}  // namespace

BOOST_AUTO_TEST_CASE(non_finite_input_rejected_on_every_backend) {
  for (Backend b : kBackends)
    for (float bad : {kNaN, kInf, -kInf}) {
      BOOST_TEST_CONTEXT(toString(b) << " value " << bad) {
        auto img = randomImage(Geometry::make3D(7, 6, 5), 1);
        img.data(1, 2, 3) = bad;  // (z, y, x): voxel (x, y, z) = (3, 2, 1)
        const std::string where = "NaN or Inf voxel at (x=3, y=2, z=1)";
        expectRefused([&] { pipeline::denoiseBilateral(img, bf(1, 1.0f, 0.1f), b); }, where);
        expectRefused([&] { pipeline::denoiseNlm(img, nlmParams(1, 2, 0.1f), b); }, where);
        auto flat = randomImage(Geometry::make2D(9, 8), 1);
        flat.data(0, 2, 3) = bad;
        pipeline::MultiresJob job;
        job.params = mr(2, 1, 1.0f, 0.1f);
        job.backend = b;
        expectRefused([&] { pipeline::denoiseMultires(flat, job); }, "NaN or Inf voxel at (x=3, y=2, z=0)");
      }
    }
}

BOOST_AUTO_TEST_CASE(bad_parameters_rejected_on_every_backend) {
  const auto img2 = randomImage(Geometry::make2D(9, 12), 1);
  const auto img3 = randomImage(Geometry::make3D(9, 12, 6), 1);
  for (Backend b : kBackends) {
    BOOST_TEST_CONTEXT(toString(b)) {
      auto bil = [&](HostImage const& img, BilateralParams const& p) {
        return [&img, p, b] { pipeline::denoiseBilateral(img, p, b); };
      };
      auto nlm = [&](HostImage const& img, NlmParams const& p) {
        return [&img, p, b] { pipeline::denoiseNlm(img, p, b); };
      };
      // Radius smaller than every filtered extent.
      expectRefused(bil(img2, bf(9, 1.0f, 0.1f)), "radius");
      BOOST_CHECK_NO_THROW(bil(img2, bf(8, 1.0f, 0.1f))());
      expectRefused(bil(img3, bf(6, 1.0f, 0.1f)), "radius");
      expectRefused(bil(img2, bf(-1, 1.0f, 0.1f)), "radius");
      expectRefused(nlm(img3, nlmParams(1, 6, 0.1f)), "search radius");
      expectRefused(nlm(img3, nlmParams(6, 1, 0.1f)), "patch radius");
      BOOST_CHECK_NO_THROW(nlm(img3, nlmParams(1, 5, 0.1f))());
      expectRefused(nlm(img2, nlmParams(1, -1, 0.1f)), "radii");
      expectRefused(nlm(img2, nlmParams(NlmParams::kMaxRadius + 1, 1, 0.1f)), "radii");
      // h positive and finite; sigmas: spatial positive finite, range positive (inf allowed).
      for (float h : {0.0f, -0.1f, kNaN, kInf}) expectRefused(nlm(img2, nlmParams(1, 2, h)), "NLM h");
      for (float s : {0.0f, -1.0f, kNaN, kInf}) expectRefused(bil(img2, bf(2, s, 0.1f)), "spatial sigma");
      for (float s : {0.0f, -0.1f, kNaN}) expectRefused(bil(img2, bf(2, 1.0f, s)), "range sigma");
      BOOST_CHECK_NO_THROW(bil(img2, bf(2, 1.0f, kInf))());

      // Multires: levels that fit, 2D, parameters, the variant of the pipeline that runs.
      const auto img = randomImage(Geometry::make2D(97, 61), 1);
      const int L = maxLevels(97, 61);
      auto mres = [&](HostImage const& in, MultiresParams const& p, bool bilateralGiven = false) {
        return [&in, p, b, bilateralGiven] {
          pipeline::MultiresJob job;
          job.params = p;
          job.backend = b;
          job.bilateralGiven = bilateralGiven;
          job.integer = pipeline::IntegerMode::No;
          pipeline::denoiseMultires(in, job);
        };
      };
      expectRefused(mres(img, mr(L + 1, 2, 2.0f, 0.05f)), "too many");
      expectRefused(mres(img, mr(0, 2, 2.0f, 0.05f)), "levels");
      BOOST_CHECK_NO_THROW(mres(img, mr(L, 2, 2.0f, 0.05f))());
      expectRefused(mres(randomImage(Geometry::make3D(9, 8, 3), 1), mr(1, 1, 1.0f, 0.1f)), "2D");
      expectRefused(mres(img, mr(2, -1, 2.0f, 0.05f)), "radius");
      expectRefused(mres(img, mr(2, 2, 0.0f, 0.05f)), "closeness sigma");
      expectRefused(mres(img, mr(2, 2, 2.0f, kNaN)), "similarity sigma");
      auto p = mr(2, 2, 2.0f, 0.05f);
      p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
      expectRefused(mres(img, p, true), "integer");
      p = mr(2, 2, 2.0f, 0.05f);
      p.pyramid = PyramidVariant::Packed16;
      expectRefused(mres(img, p), "packed16");
    }
  }
}

// The jobs add nothing to the back ends: the CPU job is ref:: exactly, the Kokkos job is gpu:: on
// the default execution space exactly (same inputs, same code: 0 difference).
BOOST_AUTO_TEST_CASE(jobs_give_what_the_back_ends_give) {
  using Exec = Kokkos::DefaultExecutionSpace;
  using Mem = Exec::memory_space;
  const auto img = randomImage(Geometry::make2D(40, 33), 7);
  auto direct = [&](auto&& filter) {
    auto din = test::toSpace<Exec>(img, "kortex::test::Pipeline::in");
    ImageView<Mem> dout("kortex::test::Pipeline::out", din.extent(0), din.extent(1), din.extent(2));
    filter(Exec(), ConstImageView<Mem>(din), dout);
    Exec().fence();
    return test::toHost(dout, img.geometry);
  };
  const auto pb = bf(3, 2.0f, 0.2f);
  const auto pn = nlmParams(1, 3, 0.15f);
  const auto pm = mr(3, 2, 2.0f, 0.1f);
  pipeline::RunReport cpu, kokkos;
  BOOST_TEST(test::maxAbsDifference(pipeline::denoiseBilateral(img, pb, Backend::Cpu, &cpu), ref::bilateral(img, pb)) == 0.0);
  BOOST_TEST(cpu.backend == Backend::Cpu);
  BOOST_TEST(test::maxAbsDifference(pipeline::denoiseBilateral(img, pb, Backend::Kokkos, &kokkos),
                                    direct([&](auto const& e, auto const& i, auto const& o) { gpu::bilateral(e, i, o, pb); })) == 0.0);
  BOOST_TEST(kokkos.backend == Backend::Kokkos);
  BOOST_TEST(kokkos.executionSpace == Exec::name());
  BOOST_TEST(test::maxAbsDifference(pipeline::denoiseNlm(img, pn, Backend::Cpu), ref::nlm(img, pn)) == 0.0);
  BOOST_TEST(test::maxAbsDifference(pipeline::denoiseNlm(img, pn, Backend::Kokkos),
                                    direct([&](auto const& e, auto const& i, auto const& o) { gpu::nlm(e, i, o, pn); })) == 0.0);
  pipeline::MultiresJob job;
  job.params = pm;
  job.bilateralGiven = true;  // the params' own variant (float: Reuse by default)
  job.integer = pipeline::IntegerMode::No;
  job.backend = Backend::Cpu;
  BOOST_TEST(test::maxAbsDifference(pipeline::denoiseMultires(img, job), ref::multires(img, pm)) == 0.0);
  job.backend = Backend::Kokkos;
  BOOST_TEST(test::maxAbsDifference(pipeline::denoiseMultires(img, job),
                                    direct([&](auto const& e, auto const& i, auto const& o) { gpu::multires(e, i, o, pm); })) == 0.0);
}

// Multires job policy: the integer pipeline runs for integer images in [0, 32767] (auto), is
// refused for others when forced, and sigma_r = 2 x the estimated noise when automatic.
BOOST_AUTO_TEST_CASE(multires_job_policy) {
  HostImage ints("kortex::test::Pipeline::ints", Geometry::make2D(64, 48));
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(0, 4095);
  for (Index i = 0; i < ints.numVoxels(); ++i) ints.data.data()[i] = static_cast<float>(u(rng));
  for (Backend b : kBackends) {
    BOOST_TEST_CONTEXT(toString(b)) {
      pipeline::MultiresJob job;
      job.params = mr(3, 2, 2.0f, 40.0f);
      job.backend = b;
      pipeline::MultiresRun run;
      const HostImage out = pipeline::denoiseMultires(ints, job, &run);
      BOOST_TEST(run.integer);
      BOOST_TEST((run.params.bilateral == MultiresBilateralVariant::ClosenessSimilarityLut));
      for (Index i = 0; i < out.numVoxels(); ++i)
        if (out.data.data()[i] != std::floor(out.data.data()[i])) {
          BOOST_ERROR("integer pipeline output " << out.data.data()[i] << " is not an integer");
          break;
        }
      job.integer = pipeline::IntegerMode::No;
      pipeline::denoiseMultires(ints, job, &run);
      BOOST_TEST(!run.integer);
      BOOST_TEST((run.params.bilateral == MultiresBilateralVariant::Reuse));

      HostImage half = ints;
      half.data = ImageView<Kokkos::HostSpace>("kortex::test::Pipeline::half", 1, 48, 64);
      Kokkos::deep_copy(half.data, ints.data);
      half.data(0, 5, 7) = 0.5f;
      job.integer = pipeline::IntegerMode::Yes;
      expectRefused([&] { pipeline::denoiseMultires(half, job); }, "integer in [0, 32767]");

      job.integer = pipeline::IntegerMode::Auto;
      job.autoSigmaRange = true;
      pipeline::denoiseMultires(ints, job, &run);
      BOOST_TEST(run.noiseSigma == pipeline::estimateNoiseSigma(ints));
      BOOST_TEST(run.params.sigmaRange == static_cast<float>(2.0 * run.noiseSigma));
      HostImage constant("kortex::test::Pipeline::constant", Geometry::make2D(16, 16));
      Kokkos::deep_copy(constant.data, 100.0f);
      expectRefused([&] { pipeline::denoiseMultires(constant, job); }, "no noise");
    }
  }
}

BOOST_AUTO_TEST_CASE(integer_mode_names) {
  BOOST_TEST((pipeline::parseIntegerMode("auto") == pipeline::IntegerMode::Auto));
  BOOST_TEST((pipeline::parseIntegerMode("yes") == pipeline::IntegerMode::Yes));
  BOOST_TEST((pipeline::parseIntegerMode("no") == pipeline::IntegerMode::No));
  BOOST_CHECK_THROW(pipeline::parseIntegerMode("maybe"), InvalidArgument);
}

// ---- surface denoise ----------------------------------------------------------------------------

namespace {
// phi of a cube of edge 2 (voxels 0..1) in an 8^3 grid: a band of 8 voxels at |phi| <= 0.5.
HostImage tinyBandPhi() {
  HostImage phi("kortex::test::Pipeline::phi", Geometry::make3D(8, 8, 8));
  Kokkos::deep_copy(phi.data, 5.0f);
  for (Index z = 0; z < 2; ++z)
    for (Index y = 0; y < 2; ++y)
      for (Index x = 0; x < 2; ++x) phi.data(z, y, x) = 0.5f;
  return phi;
}
}  // namespace

BOOST_AUTO_TEST_CASE(surface_job_checks_once_before_running) {
  for (Backend b : kBackends) {
    BOOST_TEST_CONTEXT(toString(b)) {
      pipeline::SurfaceJob job;
      job.backend = b;
      job.inputKind = pipeline::SurfaceInputKind::Phi;
      job.keepResult = true;
      auto denoise = [&](HostImage const& phi, pipeline::SurfaceRun* run = nullptr) {
        job.input = pipeline::ImageInput{{}, phi};
        return pipeline::runSurfaceJob(job, run);
      };
      HostImage far("kortex::test::Pipeline::far", Geometry::make3D(8, 8, 8));
      Kokkos::deep_copy(far.data, 5.0f);
      expectRefused([&] { denoise(far); }, "is empty");
      HostImage phi = tinyBandPhi();
      expectRefused([&] { denoise(phi); }, "smaller than the band size 8");  // m = 96
      job.params.neighbors = 4;
      job.maxMemoryMiB = 1000.0 / 1048576.0;  // 1000 bytes
      expectRefused([&] { denoise(phi); }, "is available");
      job.maxMemoryMiB = 0.0;
      pipeline::SurfaceRun run;
      BOOST_CHECK_NO_THROW(denoise(phi, &run));
      BOOST_TEST(run.bandSize == 8);
      BOOST_TEST((run.backend == b));
      phi.data(5, 5, 5) = kNaN;
      expectRefused([&] { denoise(phi); }, "NaN or Inf voxel at (x=5, y=5, z=5)");
      phi.data(5, 5, 5) = 5.0f;
      job.params.patch = 6;
      expectRefused([&] { denoise(phi); }, "patch edge");
      job.params.patch = 3;
      job.maxMemoryMiB = -1.0;
      expectRefused([&] { denoise(phi); }, "memory cap");
      job.maxMemoryMiB = 0.0;
      HostImage flat("kortex::test::Pipeline::flat", Geometry::make2D(8, 8));
      Kokkos::deep_copy(flat.data, 0.5f);
      expectRefused([&] { denoise(flat); }, "3D");
    }
  }
}

BOOST_AUTO_TEST_CASE(surface_job_gives_what_the_back_ends_give) {
  using Exec = Kokkos::DefaultExecutionSpace;
  using Mem = Exec::memory_space;
  HostImage clean, noisy;
  test::noisySphere(20, 6.0, 0.3, 11, clean, noisy);
  pipeline::SurfaceJob job;
  job.input = pipeline::ImageInput{{}, noisy};
  job.inputKind = pipeline::SurfaceInputKind::Phi;
  job.keepResult = true;
  job.params.neighbors = 16;
  job.params.iterations = 3;
  job.backend = Backend::Cpu;
  BOOST_TEST(test::maxAbsDifference(pipeline::runSurfaceJob(job).image, ref::surfaceDenoise(noisy, job.params)) == 0.0);
  job.backend = Backend::Kokkos;
  const auto in = test::toSpace<Exec>(noisy, "kortex::test::Pipeline::phiIn");
  ImageView<Mem> out("kortex::test::Pipeline::phiOut", in.extent(0), in.extent(1), in.extent(2));
  gpu::surfaceDenoise(Exec(), ConstImageView<Mem>(in), out, job.params);
  BOOST_TEST(test::maxAbsDifference(pipeline::runSurfaceJob(job).image, test::toHost(out, noisy.geometry)) == 0.0);
}

BOOST_AUTO_TEST_CASE(surface_phi_from_masks) {
  HostImage labels("kortex::test::Pipeline::labels", Geometry::make3D(10, 10, 10));
  Kokkos::deep_copy(labels.data, 0.0f);
  for (Index z = 3; z < 7; ++z)
    for (Index y = 3; y < 7; ++y)
      for (Index x = 3; x < 7; ++x) labels.data(z, y, x) = x < 5 ? 2.0f : 3.0f;
  // Not binary: refused as it is; a label or a threshold selects the inside.
  BOOST_CHECK_THROW(pipeline::surfacePhiFromMask(labels), InvalidArgument);
  const HostImage two = pipeline::surfacePhiFromMask(labels, 2.0);
  const HostImage both = pipeline::surfacePhiFromMask(labels, std::nullopt, 1.5);
  BOOST_TEST(two.data(4, 4, 3) < 0.0f);   // label 2: inside
  BOOST_TEST(two.data(4, 4, 6) > 0.0f);   // label 3: outside
  BOOST_TEST(both.data(4, 4, 6) < 0.0f);  // >= 1.5: inside
  BOOST_TEST(labels.data(4, 4, 6) == 3.0f);  // the input is not modified
  expectRefused([&] { pipeline::surfacePhiFromMask(labels, 2.0, 1.5); }, "exclude each other");
  labels.data(0, 0, 0) = kNaN;
  expectRefused([&] { pipeline::surfacePhiFromMask(labels, 2.0); }, "NaN");
  HostImage flat("kortex::test::Pipeline::flat", Geometry::make2D(8, 8));
  expectRefused([&] { pipeline::surfacePhiFromMask(flat); }, "3D");
}

// ---- register unbiased ----------------------------------------------------------------------------

namespace {
HostImage blob(Index n, double cx, unsigned) {
  HostImage img("kortex::test::Pipeline::blob", Geometry::make3D(n, n, n));
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const double dx = x - cx, dy = y - 0.5 * n, dz = z - 0.5 * n;
        img.data(z, y, x) = static_cast<float>(100.0 * std::exp(-(dx * dx + dy * dy + dz * dz) / 18.0));
      }
  return img;
}
}  // namespace

BOOST_AUTO_TEST_CASE(registration_job_checks_once_before_running) {
  const HostImage fixed = blob(16, 8.0, 1), moving = blob(16, 9.0, 2);
  for (Backend b : kBackends) {
    BOOST_TEST_CONTEXT(toString(b)) {
      pipeline::RegistrationPipelineOptions opt;
      opt.backend = b;
      opt.useAffine = false;
      opt.fluid.iterations = 3;
      BOOST_CHECK_NO_THROW(pipeline::registerPair(moving, fixed, opt));
      auto bad = opt;
      bad.fluid.lambda = -0.1;
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "lambda");
      bad = opt;
      bad.fluid.minStep = 2 * bad.fluid.maxStep;
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "step");
      bad = opt;
      bad.fluid.sigma = 11.0f;  // smoothing radius 33 > kMaxRadius
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "sigma");
      bad = opt;
      bad.useAffine = true;
      bad.affine.levels = 0;
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "levels");
      bad = opt;
      bad.intensity.pHigh = 101.0;
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "percentile");
      for (float v : {kNaN, kInf}) {
        HostImage m("kortex::test::Pipeline::m", moving.geometry);
        Kokkos::deep_copy(m.data, moving.data);
        m.data(1, 2, 3) = v;
        expectRefused([&] { pipeline::registerPair(m, fixed, opt); }, "moving image contains");
      }
      HostImage flat("kortex::test::Pipeline::flat", Geometry::make2D(16, 16));
      Kokkos::deep_copy(flat.data, 1.0f);
      expectRefused([&] { pipeline::registerPair(flat, fixed, opt); }, "3D");
      const HostImage small = blob(3, 1.0, 3);
      expectRefused([&] { pipeline::registerPair(small, small, opt); }, "extent");
    }
  }
}

// registerPair keeps the Kokkos greedy stage's workspace between calls (pipeline/Register.hpp): a pair
// run on the kept workspace, after one with other parameters or another grid, gives the bits of a fresh
// one; and speculative blocks change no bit through the job either.
BOOST_AUTO_TEST_CASE(kept_greedy_workspace_changes_no_bit) {
  const HostImage fixed = blob(15, 8.0, 1), moving = blob(15, 9.0, 2), small = blob(13, 6.0, 3);
  pipeline::RegistrationPipelineOptions a;
  a.backend = Backend::Kokkos;
  a.method = pipeline::RegistrationMethod::Greedy;
  a.greedy.metric = GreedyMetric::Lncc;
  a.greedy.lnccRadius = 1;
  a.greedy.iterations = {4, 4};
  auto b = a;
  b.greedy.metric = GreedyMetric::Ssd;
  pipeline::releaseRegisterPairWorkspace();
  const auto freshB = pipeline::registerPair(moving, fixed, b);
  pipeline::releaseRegisterPairWorkspace();
  const auto fresh = pipeline::registerPair(moving, fixed, a);
  const auto again = pipeline::registerPair(moving, fixed, a);   // the kept workspace
  const auto keptB = pipeline::registerPair(moving, fixed, b);   // other parameters: made again
  pipeline::registerPair(small, small, a);                       // another grid: made again
  const auto back = pipeline::registerPair(moving, fixed, a);
  auto blocks = a;
  blocks.greedySpeculation = 3;
  const auto speculative = pipeline::registerPair(moving, fixed, blocks);
  auto same = [&](pipeline::RegistrationPipelineResult const& r) {
    Index differ = 0;
    for (std::size_t i = 0; i < r.u.data.size(); ++i) differ += r.u.data.data()[i] != fresh.u.data.data()[i];
    return differ == 0 && r.greedy.iterations == fresh.greedy.iterations;
  };
  BOOST_TEST(same(again));
  BOOST_TEST(same(back));
  BOOST_TEST(same(speculative));
  Index differB = 0;
  for (std::size_t i = 0; i < keptB.u.data.size(); ++i) differB += keptB.u.data.data()[i] != freshB.u.data.data()[i];
  BOOST_TEST(differB == 0);
  BOOST_TEST(!same(keptB));  // the two metrics' fields differ: the comparisons can tell
  pipeline::releaseRegisterPairWorkspace();
}

BOOST_AUTO_TEST_CASE(greedy_job_checks_once_and_pads) {
  // 15^3 (odd): the job pads to 16^3 (scale 2; 16 for SOR: even at scale 2) and crops back.
  const HostImage fixed = blob(15, 8.0, 1), moving = blob(15, 9.0, 2);
  for (Backend b : kBackends) {
    BOOST_TEST_CONTEXT(toString(b)) {
      pipeline::RegistrationPipelineOptions opt;
      opt.backend = b;
      opt.method = pipeline::RegistrationMethod::Greedy;
      opt.useAffine = false;
      opt.greedy.iterations = {3, 3};
      for (GreedySolver s : {GreedySolver::Fft, GreedySolver::HybridSor}) {
        opt.greedy.solver = s;
        pipeline::RegistrationPipelineResult r;
        BOOST_CHECK_NO_THROW(r = pipeline::registerPair(moving, fixed, opt));
        BOOST_TEST(r.greedyGrid.nx() == 16);
        BOOST_TEST(r.u.data.extent(3) == 15u);
        BOOST_TEST(r.greedy.iterations == 6);
        BOOST_TEST(r.greedy.minJacobian > 0.0f);
      }
      opt.greedy.solver = GreedySolver::Fft;
      auto bad = opt;
      bad.greedy.fluid.gamma = 0.0;
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "gamma");
      bad = opt;
      bad.greedy.fluid.beta = -1.0;
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "beta");
      bad = opt;
      bad.greedy.scales = {1, 2};
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "decrease");
      bad = opt;
      bad.greedy.solver = GreedySolver::Sor;
      bad.greedy.fluid.beta = 0.1;
      expectRefused([&] { pipeline::registerPair(moving, fixed, bad); }, "beta = 0");
      for (float v : {kNaN, kInf}) {
        HostImage m("kortex::test::Pipeline::m", moving.geometry);
        Kokkos::deep_copy(m.data, moving.data);
        m.data(1, 2, 3) = v;
        expectRefused([&] { pipeline::registerPair(m, fixed, opt); }, "moving image contains");
      }
    }
  }
  BOOST_TEST(pipeline::greedyPaddedGrid(Geometry::make3D(120, 120, 90), GreedyParams{}).nz() == 90);
  GreedyParams sor;
  sor.solver = GreedySolver::HybridSor;
  BOOST_TEST(pipeline::greedyPaddedGrid(Geometry::make3D(120, 120, 90), sor).nz() == 92);
}

BOOST_AUTO_TEST_CASE(multires_integer_job_checks) {
  HostImage ints("kortex::test::Pipeline::ints", Geometry::make2D(32, 24));
  for (Index i = 0; i < ints.numVoxels(); ++i) ints.data.data()[i] = static_cast<float>((i * 37) % 1000);
  for (Backend b : kBackends) {
    BOOST_TEST_CONTEXT(toString(b)) {
      pipeline::MultiresJob job;
      job.params = mr(2, 1, 1.0f, 30.0f);
      job.backend = b;
      job.integer = pipeline::IntegerMode::Yes;
      job.params.bits = 16;
      expectRefused([&] { pipeline::denoiseMultires(ints, job); }, "bits");
      job.params.bits = 10;
      for (auto v : {MultiresBilateralVariant::Naive, MultiresBilateralVariant::ClosenessLut,
                     MultiresBilateralVariant::FastMath, MultiresBilateralVariant::Reuse}) {
        job.params.bilateral = v;
        job.bilateralGiven = true;
        expectRefused([&] { pipeline::denoiseMultires(ints, job); }, "lut");
      }
    }
  }
}

// ---- the atlas job (pipeline/Atlas.hpp), end to end on files -----------------------------------------
namespace {

// Three heads of a small cohort: an ellipsoid whose centre and radii differ per subject, 24^3 at
// 2 mm, written as NIfTI files in `dir`.
std::vector<std::string> writeAtlasCohort(std::filesystem::path const& dir) {
  std::vector<std::string> paths;
  for (int s = 0; s < 3; ++s) {
    HostImage img("cohort", Geometry::make3D(24, 24, 24));
    img.geometry.spacing = {2.0, 2.0, 2.0};
    const double cx = 11.5 + 0.8 * s, cy = 11.5 - 0.6 * s, cz = 11.5 + 0.4 * s, r = 6.0 + 0.7 * s;
    for (Index z = 0; z < 24; ++z)
      for (Index y = 0; y < 24; ++y)
        for (Index x = 0; x < 24; ++x) {
          const double d = std::sqrt((x - cx) * (x - cx) + 1.3 * (y - cy) * (y - cy) + (z - cz) * (z - cz)) / r;
          img.data(z, y, x) = float(100.0 / (1.0 + std::exp(8.0 * (d - 1.0))) + 5.0 * ((x + 2 * y + 3 * z) % 7));
        }
    paths.push_back((dir / ("subject" + std::to_string(s) + ".nii")).string());
    io::writeImage(img, paths.back());
  }
  return paths;
}

pipeline::AtlasJob atlasJob(std::vector<std::string> const& images, std::filesystem::path const& out) {
  pipeline::AtlasJob job;
  job.images = images;
  job.useAffine = false;
  job.backend = Backend::Kokkos;
  job.params.greedy.scales = {2, 1};
  job.params.greedy.iterations = {2, 3};
  job.outTemplate = out.string();
  return job;
}

bool sameBits(HostImage const& a, HostImage const& b) {
  return a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

}  // namespace

// The stages run in order and the job writes what it reports; a resume after a failure at any
// iteration gives the uninterrupted template bit for bit; a host back end refuses a memory cap
// below the cohort's need (only a device streams subjects).
BOOST_AUTO_TEST_CASE(atlas_job_resident_and_resumed) {
  test::TempDir dir("kortex-atlas-job");
  const auto images = writeAtlasCohort(dir.path);
  const pipeline::AtlasJobResult whole = pipeline::runAtlasJob(atlasJob(images, dir.path / "whole.nii"), nullptr);
  BOOST_TEST(whole.atlas.iterations == 5);
  BOOST_TEST(whole.local == 3);
  BOOST_TEST(whole.written.size() == 1u);
  const HostImage templ = io::readImage(dir.path / "whole.nii");
  BOOST_TEST(templ.geometry.sameGrid(io::readImage(images.front()).geometry));
  for (int stopAfter : {2, 3, 5}) {  // mid-scale, at the scale boundary, in the last iteration
    BOOST_TEST_CONTEXT("failure after iteration " << stopAfter) {
      const auto cp = dir.path / ("checkpoint" + std::to_string(stopAfter));
      pipeline::AtlasJob killed = atlasJob(images, dir.path / "killed.nii");
      killed.checkpointDir = cp.string();
      killed.checkpointEvery = 1;
      int seen = 0;
      killed.progress = [&](AtlasIteration const&) {
        if (++seen == stopAfter) throw std::runtime_error("stopped");
      };
      BOOST_CHECK_THROW(pipeline::runAtlasJob(killed, nullptr), std::runtime_error);
      BOOST_TEST(!std::filesystem::exists(dir.path / "killed.nii"));  // outputs all or none
      pipeline::AtlasJob resumed = atlasJob(images, dir.path / ("resumed" + std::to_string(stopAfter) + ".nii"));
      resumed.checkpointDir = cp.string();
      resumed.resume = true;
      const pipeline::AtlasJobResult r = pipeline::runAtlasJob(resumed, nullptr);
      BOOST_TEST(r.atlas.resumedAt == stopAfter - 1);
      BOOST_TEST(sameBits(io::readImage(resumed.outTemplate), templ));
    }
  }
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Kokkos::DefaultExecutionSpace::memory_space>::accessible) {
    pipeline::AtlasJob capped = atlasJob(images, dir.path / "capped.nii");
    capped.maxMemoryMiB = 1.0;
    expectRefused([&] { pipeline::runAtlasJob(capped, nullptr); }, "spread the subjects over more processes");
    BOOST_TEST(!std::filesystem::exists(dir.path / "capped.nii"));
    for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {  // one rule, in the job
      capped.maxMemoryMiB = bad;
      expectRefused([&] { pipeline::runAtlasJob(capped, nullptr); }, "memory cap must be a finite number of MiB");
    }
  }
}

// The alignment stage alone reads only the alignment's parameters (the atlas job validated its
// own once); registerPair validates the fluid stage's too.
BOOST_AUTO_TEST_CASE(align_pair_is_the_alignment_stage_alone) {
  test::TempDir dir("kortex-align-pair");
  const auto images = writeAtlasCohort(dir.path);
  const HostImage moving = io::readImage(images[1]), fixed = io::readImage(images[0]);
  pipeline::RegistrationPipelineOptions o;
  o.method = pipeline::RegistrationMethod::Greedy;
  o.useAffine = false;
  o.greedy.fluid.alpha = -1.0;  // the greedy stage would refuse it
  expectRefused([&] { pipeline::registerPair(moving, fixed, o); }, "alpha");
  const pipeline::RegistrationPipelineResult a = pipeline::alignPair(moving, fixed, o);
  o.useFluid = false;
  o.greedy = GreedyParams{};
  const pipeline::RegistrationPipelineResult b = pipeline::registerPair(moving, fixed, o);
  BOOST_TEST(a.movingResampled.geometry.sameGrid(fixed.geometry));
  BOOST_TEST(sameBits(a.movingResampled, b.movingResampled));  // the same stages, the same bits
  for (std::size_t k = 0; k < a.u.data.size(); ++k) BOOST_TEST_REQUIRE(a.u.data.data()[k] == 0.0f);
}

// Many pairs against one fixed image (the atlas's alignment; concurrent on a device back end): each
// result has the bits of alignPair on that pair, pairs are reported in index order, and a pair that
// fails is named by its label (the first failing one by index) with no other failure masking it.
BOOST_AUTO_TEST_CASE(align_pairs_is_align_pair_for_each) {
  test::TempDir dir("kortex-align-pairs");
  const auto images = writeAtlasCohort(dir.path);
  std::vector<HostImage> cohort;
  for (auto const& p : images) cohort.push_back(io::readImage(p));
  pipeline::RegistrationPipelineOptions o;
  o.backend = Backend::Kokkos;
  o.useAffine = true;
  std::vector<HostImage const*> moving;
  std::vector<std::string> labels;
  for (std::size_t i : {1, 2, 1, 2, 0}) {  // more pairs than the cohort: repeats run concurrently too
    moving.push_back(&cohort[i]);
    labels.push_back("subject " + std::to_string(i));
  }
  std::vector<int> order;
  const auto all = pipeline::alignPairs(moving, cohort[0], o, labels, [&](int i) { order.push_back(i); });
  BOOST_TEST_REQUIRE(all.size() == moving.size());
  for (std::size_t i = 0; i < moving.size(); ++i) {
    BOOST_TEST(order[i] == int(i));
    const pipeline::RegistrationPipelineResult one = pipeline::alignPair(*moving[i], cohort[0], o);
    BOOST_TEST(all[i].affineRan);
    BOOST_TEST(all[i].affineResult.evaluations == one.affineResult.evaluations);
    BOOST_TEST(sameBits(all[i].movingResampled, one.movingResampled));
    BOOST_TEST(sameBits(all[i].fixedNormalised, one.fixedNormalised));
  }
  // Pairs 1 and 2 (0-based) cannot be aligned (constant images): the first of them is reported.
  HostImage flat = cohort[2];
  flat.data = decltype(flat.data)("flat", flat.data.extent(0), flat.data.extent(1), flat.data.extent(2));
  std::vector<HostImage const*> bad = {&cohort[1], &flat, &flat, &cohort[2]};
  order.clear();
  expectRefused([&] { pipeline::alignPairs(bad, cohort[0], o, {"a", "b", "c", "d"}, [&](int i) { order.push_back(i); }); },
                "b: ");
  BOOST_TEST(order == std::vector<int>{0});
}

// A cohort in memory (AtlasJob::imageData) is the cohort of files it was read from: the same
// template bits, outputs named subject-<i>; files and images together are refused.
BOOST_AUTO_TEST_CASE(atlas_job_in_memory) {
  test::TempDir dir("kortex-atlas-memory");
  const auto images = writeAtlasCohort(dir.path);
  const pipeline::AtlasJobResult files = pipeline::runAtlasJob(atlasJob(images, dir.path / "files.nii"), nullptr);
  pipeline::AtlasJob memory = atlasJob({}, "");
  for (auto const& p : images) memory.imageData.push_back(io::readImage(p));
  memory.outFieldsDir = (dir.path / "fields").string();
  std::filesystem::create_directories(memory.outFieldsDir);
  const pipeline::AtlasJobResult r = pipeline::runAtlasJob(memory, nullptr);
  BOOST_TEST(sameBits(r.templateImage, files.templateImage));
  BOOST_TEST(sameBits(r.templateImage, io::readImage(dir.path / "files.nii")));
  BOOST_TEST(std::filesystem::exists(dir.path / "fields" / "subject-002_field.nii.gz"));
  pipeline::AtlasJob both = memory;
  both.images = images;
  expectRefused([&] { pipeline::runAtlasJob(both, nullptr); }, "either files or images in memory");
}

// registerPair with masks (RegistrationPipelineOptions::masks, the affine stage's): a lesion far
// brighter than any tissue (3x the image's maximum) in the moving image, left out by a moving mask,
// leaves the rigid fit within 0.1 voxel of the truth on both back ends; unmasked it moves the fit by
// voxels.
BOOST_AUTO_TEST_CASE(register_masks_leave_a_bright_lesion_out) {
  const Index n = 40;
  const Geometry g = Geometry::make3D(n, n, n);
  const HostImage base = structuredImage(g, 11);
  AffineTransform truth = AffineTransform::identity(g);
  const double a = 10.0 * M_PI / 180.0;
  truth.matrix = {std::cos(a), -std::sin(a), 0, std::sin(a), std::cos(a), 0, 0, 0, 1};
  truth.translation = {2.0, -1.5, 1.0};
  // fixed(p) = base(truth(p)): the fixed -> moving map is `truth` (trilinear sampling of the base).
  HostImage fixed("fixed", g), moving = base, mask("mask", g);
  float hi = 0.0f;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const auto q = truth.apply({double(x), double(y), double(z)});
        const auto c = [&](double v, Index m) { return std::clamp(v, 0.0, double(m - 1)); };
        const double qx = c(q[0], n), qy = c(q[1], n), qz = c(q[2], n);
        const Index x0 = std::min<Index>(Index(qx), n - 2), y0 = std::min<Index>(Index(qy), n - 2),
                    z0 = std::min<Index>(Index(qz), n - 2);
        const double fx = qx - x0, fy = qy - y0, fz = qz - z0;
        double v = 0;
        for (int k = 0; k < 8; ++k) {
          const int dx = k & 1, dy = (k >> 1) & 1, dz = (k >> 2) & 1;
          v += (dx ? fx : 1 - fx) * (dy ? fy : 1 - fy) * (dz ? fz : 1 - fz) * base.data(z0 + dz, y0 + dy, x0 + dx);
        }
        fixed.data(z, y, x) = float(v);
        hi = std::max(hi, base.data(z, y, x));
      }
  const double cx = 24, cy = 16, cz = 20, radius = 6;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const double r = std::sqrt((x - cx) * (x - cx) + (y - cy) * (y - cy) + (z - cz) * (z - cz));
        if (r < radius) moving.data(z, y, x) = 3.0f * hi;
        mask.data(z, y, x) = r < radius + 1 ? 0.0f : 1.0f;
      }
  pipeline::RegistrationPipelineOptions opt;
  opt.method = pipeline::RegistrationMethod::Greedy;
  opt.useFluid = false;
  opt.affine.dof = AffineDof::Rigid;
  for (Backend b : {Backend::Cpu, Backend::Kokkos}) {
    opt.backend = b;
    opt.masks = {};
    const double unmasked = rmsMappedPointDistance(pipeline::registerPair(moving, fixed, opt).affine, truth, g);
    opt.masks.moving = mask;
    const double masked = rmsMappedPointDistance(pipeline::registerPair(moving, fixed, opt).affine, truth, g);
    std::cout << "bright lesion, " << toString(b) << ": unmasked " << unmasked << ", masked " << masked << " voxels RMS\n";
    BOOST_TEST(unmasked > 0.5);
    BOOST_TEST(masked < 0.1);
  }
}
