#define BOOST_TEST_MODULE Validation
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "core/Phantom.hpp"
#include "io/Output.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Nlm.hpp"
#include "validation/Harness.hpp"
#include "validation/Metrics.hpp"
#include "validation/Lesion.hpp"
#include "validation/Multimodal.hpp"
#include "validation/Quality.hpp"
#include "validation/QualityMultires.hpp"
#include "pipeline/Denoise.hpp"
#include "validation/Report.hpp"
#include "validation/Suite.hpp"

using namespace kortex;
using namespace kortex::validation;

namespace {

// Metrics are computed in double from float data: values that are exact in float make the
// expected numbers exact up to double rounding.
constexpr double kMetricTol = 1e-12;
// SSIM via the separable filter vs the brute-force 2D/3D window sum: same maths, different
// summation order, in double.
constexpr double kSsimTol = 1e-12;

HostImage constant2D(Index nx, Index ny, float v) {
  HostImage img("const", Geometry::make2D(nx, ny));
  Kokkos::deep_copy(img.data, v);
  return img;
}

HostImage copyOf(HostImage const& a) {
  HostImage b("copy", a.geometry);
  Kokkos::deep_copy(b.data, a.data);
  return b;
}

// A smooth deterministic image with structure at several scales (2D or 3D).
HostImage analytic(Geometry const& g, double phase) {
  HostImage img("analytic", g);
  for (Index k = 0; k < g.nz(); ++k)
    for (Index j = 0; j < g.ny(); ++j)
      for (Index i = 0; i < g.nx(); ++i)
        img.data(k, j, i) = static_cast<float>(0.5 + 0.3 * std::sin(0.37 * i + phase) * std::cos(0.23 * j) +
                                               0.1 * std::sin(0.5 * k + 0.11 * i * j / 7.0) +
                                               (((i + 2 * j + 3 * k) % 5 == 0) ? 0.05 : 0.0));
  return img;
}

// Brute-force SSIM straight from Wang et al. 2004 with the (2r+1)^d Gaussian window evaluated as
// one product weight per tap (no separable filtering), population statistics, skimage's crop.
double bruteForceSsim(HostImage const& a, HostImage const& b, double L) {
  const int r = 5;
  std::vector<double> g1(2 * r + 1);
  double s = 0;
  for (int t = -r; t <= r; ++t) s += (g1[t + r] = std::exp(-t * t / (2.0 * 1.5 * 1.5)));
  for (auto& v : g1) v /= s;
  const bool is3D = a.geometry.nz() > 1;
  const int rz = is3D ? r : 0;
  const double C1 = (0.01 * L) * (0.01 * L), C2 = (0.03 * L) * (0.03 * L);
  double total = 0;
  long long count = 0;
  for (Index z = rz; z < a.geometry.nz() - rz; ++z)
    for (Index y = r; y < a.geometry.ny() - r; ++y)
      for (Index x = r; x < a.geometry.nx() - r; ++x) {
        double mx = 0, my = 0, mxx = 0, myy = 0, mxy = 0;
        for (int dz = -rz; dz <= rz; ++dz)
          for (int dy = -r; dy <= r; ++dy)
            for (int dx = -r; dx <= r; ++dx) {
              const double w = g1[dx + r] * g1[dy + r] * (is3D ? g1[dz + r] : 1.0);
              const double u = a.data(z + dz, y + dy, x + dx), v = b.data(z + dz, y + dy, x + dx);
              mx += w * u;
              my += w * v;
              mxx += w * u * u;
              myy += w * v * v;
              mxy += w * u * v;
            }
        const double vx = mxx - mx * mx, vy = myy - my * my, cxy = mxy - mx * my;
        total += ((2 * mx * my + C1) * (2 * cxy + C2)) / ((mx * mx + my * my + C1) * (vx + vy + C2));
        ++count;
      }
  return total / count;
}

}  // namespace

BOOST_AUTO_TEST_CASE(error_norms_hand_computed) {
  // ref = 10 everywhere (peak 10); a differs by +0.5 at one voxel and -0.25 at another.
  HostImage ref = constant2D(4, 3, 10.0f);
  HostImage a = copyOf(ref);
  a.data(0, 0, 0) = 10.5f;
  a.data(0, 2, 3) = 9.75f;
  BOOST_TEST(maxAbsError(a, ref) == 0.5, boost::test_tools::tolerance(kMetricTol));
  BOOST_TEST(maxRelativeError(a, ref) == 0.05, boost::test_tools::tolerance(kMetricTol));
  const double mse = (0.25 + 0.0625) / 12.0;
  BOOST_TEST(rmse(a, ref) == std::sqrt(mse), boost::test_tools::tolerance(kMetricTol));
  BOOST_TEST(psnr(a, ref, 2.0) == 10.0 * std::log10(4.0 / mse), boost::test_tools::tolerance(kMetricTol));
  const ErrorStats e = compare(a, ref, 2.0);
  BOOST_TEST(e.refPeak == 10.0);
  BOOST_TEST(e.nonFinite == 0);
  BOOST_TEST(std::isinf(psnr(ref, ref, 1.0)));  // identical: +inf dB
}

BOOST_AUTO_TEST_CASE(psnr_of_known_noise) {
  // Alternating +-s on a constant image: MSE = s^2 exactly, PSNR = 20 log10(L / s).
  const float s = 0.015625f;  // 2^-6, exact in float
  HostImage ref = constant2D(64, 48, 0.5f);
  HostImage a = copyOf(ref);
  for (Index j = 0; j < 48; ++j)
    for (Index i = 0; i < 64; ++i) a.data(0, j, i) += ((i + j) % 2 ? s : -s);
  BOOST_TEST(psnr(a, ref, 1.0) == 20.0 * std::log10(1.0 / s), boost::test_tools::tolerance(1e-10));
  BOOST_TEST(rmse(a, ref) == double(s), boost::test_tools::tolerance(kMetricTol));

  // Gaussian noise at a known sigma: PSNR within 0.1 dB of 20 log10(L / sigma) for 256^2 samples.
  HostImage clean = sheppLogan2D(256);
  const double sigma = 0.02;
  HostImage noisy = addGaussianNoise(clean, sigma, 99);
  BOOST_TEST(std::abs(psnr(noisy, clean, 1.0) - 20.0 * std::log10(1.0 / sigma)) < 0.1);
}

BOOST_AUTO_TEST_CASE(non_finite_and_mismatch) {
  HostImage ref = constant2D(8, 8, 1.0f);
  HostImage a = copyOf(ref);
  a.data(0, 3, 3) = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(std::isinf(maxAbsError(a, ref)));
  BOOST_TEST(std::isinf(maxRelativeError(a, ref)));
  BOOST_TEST(psnr(a, ref, 1.0) < 0);
  BOOST_TEST(compare(a, ref).nonFinite == 1);
  HostImage other = constant2D(8, 7, 1.0f);
  BOOST_CHECK_THROW(maxAbsError(other, ref), InvalidArgument);
  BOOST_CHECK_THROW(psnr(ref, ref, 0.0), InvalidArgument);
  BOOST_CHECK_THROW(ssim(ref, ref, -1.0), InvalidArgument);
  HostImage tiny = constant2D(10, 30, 1.0f);  // smaller than the 11-pixel window
  BOOST_CHECK_THROW(ssim(tiny, tiny, 1.0), InvalidArgument);
  BOOST_TEST(dataRange(sheppLogan2D(64)) == 1.0, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(ssim_identical_is_one_and_noisy_below) {
  HostImage a2 = analytic(Geometry::make2D(40, 33), 0.0);
  BOOST_TEST(ssim(a2, a2, 1.0) == 1.0, boost::test_tools::tolerance(1e-14));
  HostImage c = constant2D(20, 20, 3.0f);
  BOOST_TEST(ssim(c, c, 1.0) == 1.0, boost::test_tools::tolerance(1e-14));
  HostImage n2 = addGaussianNoise(a2, 0.05, 5);
  const double s2 = ssim(n2, a2, 1.0);
  BOOST_TEST(s2 < 1.0);
  BOOST_TEST(s2 > 0.0);
  // More noise, lower SSIM.
  BOOST_TEST(ssim(addGaussianNoise(a2, 0.2, 5), a2, 1.0) < s2);
  // Symmetric in its arguments.
  BOOST_TEST(ssim(a2, n2, 1.0) == s2, boost::test_tools::tolerance(1e-12));

  HostImage a3 = analytic(Geometry::make3D(14, 13, 12), 0.3);
  BOOST_TEST(ssim(a3, a3, 1.0) == 1.0, boost::test_tools::tolerance(1e-14));
  BOOST_TEST(ssim(addGaussianNoise(a3, 0.05, 6), a3, 1.0) < 1.0);
}

BOOST_AUTO_TEST_CASE(ssim_matches_independent_brute_force) {
  HostImage a = analytic(Geometry::make2D(31, 27), 0.0);
  HostImage b = addGaussianNoise(analytic(Geometry::make2D(31, 27), 0.4), 0.03, 11);
  BOOST_TEST(ssim(b, a, 1.0) == bruteForceSsim(b, a, 1.0), boost::test_tools::tolerance(kSsimTol));
  BOOST_TEST(ssim(b, a, 0.7) == bruteForceSsim(b, a, 0.7), boost::test_tools::tolerance(kSsimTol));
  HostImage a3 = analytic(Geometry::make3D(15, 14, 13), 0.2);
  HostImage b3 = addGaussianNoise(a3, 0.04, 12);
  BOOST_TEST(ssim(b3, a3, 1.0) == bruteForceSsim(b3, a3, 1.0), boost::test_tools::tolerance(kSsimTol));
}

// Values printed by scikit-image 0.26.0 (NumPy 2.5.2), for the same images rebuilt in NumPy from
// the same formulas and the same SplitMix64 noise stream (bench/peers/kortex_inputs.py), as
// float64 arrays:
//   structural_similarity(noisy, clean, data_range=L, gaussian_weights=True, sigma=1.5,
//                         use_sample_covariance=False)
// The images agree with the C++ ones up to libm rounding of sin/cos/log in the last float bit,
// hence the 1e-6 tolerance (our SSIM itself matches a brute-force sum to 1e-12 above).
BOOST_AUTO_TEST_CASE(ssim_matches_scikit_image_values) {
  constexpr double kSkimageTol = 1e-6;
  HostImage a = analytic(Geometry::make2D(31, 27), 0.0);
  HostImage b = addGaussianNoise(analytic(Geometry::make2D(31, 27), 0.4), 0.03, 11);
  BOOST_TEST(ssim(b, a, 1.0) == 0.890539143795227, boost::test_tools::tolerance(kSkimageTol));
  BOOST_TEST(ssim(b, a, 0.7) == 0.887446717828575, boost::test_tools::tolerance(kSkimageTol));
  HostImage a3 = analytic(Geometry::make3D(15, 14, 13), 0.2);
  HostImage b3 = addGaussianNoise(a3, 0.04, 12);
  BOOST_TEST(ssim(b3, a3, 1.0) == 0.907311598896041, boost::test_tools::tolerance(kSkimageTol));
  HostImage sl = sheppLogan2D(64);
  HostImage sln = addGaussianNoise(sl, 0.05, 7);
  BOOST_TEST(ssim(sln, sl, 1.0) == 0.676734473855213, boost::test_tools::tolerance(kSkimageTol));
}

BOOST_AUTO_TEST_CASE(check_against_reference_rejects_wrong_variant) {
  HostImage in = structuredImage(Geometry::make2D(37, 29), 3);
  BilateralParams p;
  p.radius = 2;
  p.sigmaSpatial = 1.5f;
  p.sigmaRange = 0.2f;
  HostImage reference = ref::bilateral(in, p);
  const double peak = maxValue(reference);

  HostImage same = copyOf(reference);
  BOOST_TEST(checkAgainstReference(same, reference).pass);
  // A rounding-sized perturbation (1e-7 of the peak) passes ...
  HostImage small = copyOf(reference);
  small.data(0, 10, 10) += static_cast<float>(1e-7 * peak);
  BOOST_TEST(checkAgainstReference(small, reference).pass);
  // ... a wrong tap-sized one (1e-3 of the peak) fails, and the message says why.
  HostImage wrong = copyOf(reference);
  wrong.data(0, 0, 36) += static_cast<float>(1e-3 * peak);
  const Check c = checkAgainstReference(wrong, reference);
  BOOST_TEST(!c.pass);
  BOOST_TEST(c.errors.maxRel > kMaxRelativeErrorTolerance);
  BOOST_TEST(c.message.find("max relative error") != std::string::npos);
  // NaN output fails.
  HostImage nan = copyOf(reference);
  nan.data(0, 5, 5) = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(!checkAgainstReference(nan, reference).pass);
  // Wrong size fails.
  BOOST_TEST(!checkAgainstReference(constant2D(36, 29, 0.0f), reference).pass);
  // A "variant" that ignores the range kernel (a plain Gaussian blur) is caught.
  BilateralParams blur = p;
  blur.sigmaRange = std::numeric_limits<float>::infinity();
  BOOST_TEST(!checkAgainstReference(ref::bilateral(in, blur), reference).pass);
}

BOOST_AUTO_TEST_CASE(harness_small_cases_pass_on_every_space) {
  const auto spaces = enabledExecutionSpaces();
  BOOST_TEST(!spaces.empty());
  HarnessOptions opt;
  opt.warmup = 1;
  opt.repetitions = 2;

  Case bf;
  bf.name = "bilateral 2D structured 23x19";
  bf.algorithm = Algorithm::Bilateral;
  bf.bilateral.radius = 3;
  bf.bilateral.sigmaSpatial = 2.0f;
  bf.bilateral.sigmaRange = 0.15f;
  bf.input = structuredImage(Geometry::make2D(23, 19), 1);
  CaseResult r = runCase(bf, opt);
  BOOST_TEST(r.pass);
  BOOST_TEST(r.variants.size() == spaces.size() * 2);
  BOOST_TEST(r.referenceTimed);
  BOOST_TEST(r.reference.repetitions >= 1);
  for (auto const& v : r.variants) {
    BOOST_TEST_CONTEXT(v.variant << " on " << v.space) {
      BOOST_TEST(v.ran);
      BOOST_TEST(v.check.pass);
      BOOST_TEST(v.check.errors.maxRel <= kMaxRelativeErrorTolerance);
      BOOST_TEST(v.timed);
      BOOST_TEST(v.timing.medianMs > 0.0);
      BOOST_TEST(v.speedup > 0.0);
    }
  }

  Case nl;
  nl.name = "nlm 3D random 11x9x7";
  nl.algorithm = Algorithm::Nlm;
  nl.nlm.patchRadius = 1;
  nl.nlm.searchRadius = 2;
  nl.nlm.h = 0.3f;
  nl.input = randomImage(Geometry::make3D(11, 9, 7), 2);
  CaseResult rn = runCase(nl, opt);
  BOOST_TEST(rn.pass);
  BOOST_TEST(rn.variants.size() == spaces.size() * 3);
  std::vector<std::string> names;
  for (auto const& v : rn.variants) names.push_back(v.variant);
  for (std::string n : {"Naive", "ScratchTiled", "BoxSum"})
    BOOST_TEST(std::count(names.begin(), names.end(), n) == static_cast<long>(spaces.size()));

  // Reports: every variant appears in the Markdown and the JSON.
  const std::string md = toMarkdown(std::vector<CaseResult>{r, rn});
  for (std::string n : {"Naive", "ScratchTiled", "BoxSum", "CPU reference"})
    BOOST_TEST(md.find(n) != std::string::npos);
  const auto j = toJson(rn);
  BOOST_TEST(j["variants"].size() == spaces.size() * 3);
  BOOST_TEST(j["pass"].get<bool>());
  BOOST_TEST(j["variants"][0]["errors"]["max_rel"].get<double>() <= kMaxRelativeErrorTolerance);
}

BOOST_AUTO_TEST_CASE(harness_multires_cases_pass_on_every_space) {
  setenv("KORTEX_TUNING_QUIET", "1", 1);
  const auto spaces = enabledExecutionSpaces();
  HarnessOptions opt;
  opt.time = false;

  Case f;
  f.name = "multires structured 37x29";
  f.algorithm = Algorithm::Multires;
  f.multires.levels = 3;
  f.multires.sigmaRange = 0.2f;
  f.input = structuredImage(Geometry::make2D(37, 29), 3);
  const CaseResult rf = runCase(f, opt);
  BOOST_TEST(rf.pass);
  BOOST_TEST(rf.variants.size() == spaces.size() * 16);  // 4 pyramid x 4 bilateral variants
  for (auto const& v : rf.variants)
    BOOST_TEST_CONTEXT(v.variant << " on " << v.space) { BOOST_TEST(v.check.errors.maxRel <= kMaxRelativeErrorTolerance); }

  // Integer pipeline: 10-bit values, every variant exactly equal to the reference.
  Case i;
  i.name = "multires-u16 random 31x27";
  i.algorithm = Algorithm::MultiresInteger;
  i.multires.levels = 3;
  i.multires.sigmaRange = 40.0f;
  i.multires.bits = 10;
  i.input = randomImage(Geometry::make2D(31, 27), 5);
  for (Index k = 0; k < i.input.numVoxels(); ++k)
    i.input.data.data()[k] = std::floor(i.input.data.data()[k] * 1023.0f);
  const CaseResult ri = runCase(i, opt);
  BOOST_TEST(ri.tolerance == 0.0);
  BOOST_TEST(ri.pass);
  BOOST_TEST(ri.variants.size() == spaces.size() * 5);  // 5 pyramid variants
  for (auto const& v : ri.variants)
    BOOST_TEST_CONTEXT(v.variant << " on " << v.space) { BOOST_TEST(v.check.errors.maxAbs == 0.0); }

  // A non-integer voxel cannot enter the integer pipeline.
  i.input.data.data()[3] = 0.5f;
  BOOST_CHECK_THROW(runCase(i, opt), InvalidArgument);
}

// Surface NLM in the harness: every search variant on every space against the CPU reference, on a
// case the filter changes by far more than the tolerance (the comparison is not vacuous).
BOOST_AUTO_TEST_CASE(harness_surface_nlm_case_passes_on_every_space) {
  const auto spaces = enabledExecutionSpaces();
  HarnessOptions opt;
  opt.time = false;
  Case c;
  c.name = "surface-nlm sphere 17x15x13";
  c.algorithm = Algorithm::SurfaceNlm;
  c.input = addGaussianNoise(sphereDistance(Geometry::make3D(17, 15, 13), 4.5), 0.3, 5);
  c.surface.neighbors = 24;
  c.surface.seedRadius = 16;
  const CaseResult r = runCase(c, opt);
  BOOST_TEST(r.pass);
  BOOST_TEST(r.variants.size() == spaces.size() * 5);  // Global, RandomAccess, ScratchBroadcast, Pruned, PrunedBlocks
  for (auto const& v : r.variants)
    BOOST_TEST_CONTEXT(v.variant << " on " << v.space) { BOOST_TEST(v.check.errors.maxRel <= kMaxRelativeErrorTolerance); }
  const HostImage denoised = ref::surfaceDenoise(c.input, c.surface);
  BOOST_TEST(compare(denoised, c.input).maxRel > 1e-2);
  c.surface.neighbors = 0;  // refused before any run
  BOOST_CHECK_THROW(runCase(c, opt), InvalidArgument);
}

// The registration force in the harness: every force kernel on every space against the CPU reference;
// the force is far from zero (the comparison is not vacuous); a displacement off the grid is refused.
BOOST_AUTO_TEST_CASE(harness_registration_force_case_passes_on_every_space) {
  const auto spaces = enabledExecutionSpaces();
  HarnessOptions opt;
  opt.time = false;
  Case c;
  c.name = "registration-force 15x13x11";
  c.algorithm = Algorithm::RegistrationForce;
  const Geometry g = Geometry::make3D(15, 13, 11);
  c.fixed = addGaussianNoise(sphereDistance(g, 4.0), 0.2, 3);
  c.input = addGaussianNoise(sphereDistance(g, 4.5), 0.2, 4);
  c.displacement = smoothDisplacement(g, 1.5, 9);
  c.registration.lambda = 0.5;
  const CaseResult r = runCase(c, opt);
  BOOST_TEST(r.pass);
  BOOST_TEST(r.variants.size() == spaces.size() * 4);  // Naive, Recompute, Reuse, TwoPass
  for (auto const& v : r.variants)
    BOOST_TEST_CONTEXT(v.variant << " on " << v.space) {
      BOOST_TEST(v.check.errors.maxRel <= kMaxRelativeErrorTolerance);
      BOOST_TEST(v.check.errors.refPeak > 1e-3);
    }
  c.displacement = smoothDisplacement(Geometry::make3D(15, 13, 10), 1.5, 9);
  BOOST_CHECK_THROW(runCase(c, opt), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(noise_estimate_recovers_added_noise) {
  HostImage flat("flat", Geometry::make2D(256, 256));
  Kokkos::deep_copy(flat.data, 0.5f);
  BOOST_TEST(pipeline::estimateNoiseSigma(flat) == 0.0);
  // Immerkaer's estimator on white Gaussian noise: unbiased; 254^2 samples give ~0.3% spread.
  constexpr double kNoiseEstimateTolerance = 0.03;
  for (double sigma : {0.01, 0.05}) {
    const HostImage noisy = addGaussianNoise(flat, sigma, 77);
    BOOST_TEST(pipeline::estimateNoiseSigma(noisy) == sigma, boost::test_tools::tolerance(kNoiseEstimateTolerance));
  }
}

BOOST_AUTO_TEST_CASE(multires_quality_on_embedded_phantom_raises_psnr) {
  setenv("KORTEX_TUNING_QUIET", "1", 1);
  MultiresQualityOptions q;
  q.backend = Backend::Cpu;
  const auto r = runMultiresQualityImage(sheppLogan2D(96), "shepp-logan-96", "embedded", q);
  BOOST_TEST(r.pass);
  BOOST_TEST(r.psnrMultires > r.psnrNoisy);
  BOOST_TEST(r.psnrBilateral > r.psnrNoisy);
  BOOST_TEST(r.multires.levels == 5);
  BOOST_TEST(toJson(r)["multires"]["levels"].get<int>() == 5);
  BOOST_TEST(toMarkdown(std::vector<MultiresQualityResult>{r}).find("multires") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(harness_rejects_bad_case) {
  Case c;
  c.name = "radius larger than the image";
  c.algorithm = Algorithm::Bilateral;
  c.bilateral.radius = 9;
  c.input = randomImage(Geometry::make2D(8, 30), 1);
  BOOST_CHECK_THROW(runCase(c), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(validation_cases_avoid_tile_multiples) {
  const auto cases = validationCases(true);
  int bilateral = 0, nlm = 0, twoD = 0, threeD = 0;
  for (auto const& c : cases) {
    (c.algorithm == Algorithm::Bilateral ? bilateral : nlm)++;
    (c.input.dimension() == 2 ? twoD : threeD)++;
    for (int a = 0; a < c.input.dimension(); ++a) {
      const Index n = c.input.geometry.size[a];
      BOOST_TEST_CONTEXT(c.name << " axis " << a) { BOOST_TEST(n % 2 == 1); }  // odd: no tile multiple
    }
  }
  BOOST_TEST(bilateral >= 4);
  BOOST_TEST(nlm >= 4);
  BOOST_TEST(twoD >= 4);
  BOOST_TEST(threeD >= 4);
}

BOOST_AUTO_TEST_CASE(quality_on_embedded_phantom_raises_psnr) {
  QualityOptions q;
  q.windows = {7};
  q.backend = Backend::Cpu;
  const HostImage clean = sheppLogan2D(96);
  const auto r = runQualityImage(clean, "shepp-logan-96", "embedded", q);
  BOOST_TEST(r.noiseSigma == meanValue(clean) / 25.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.filters.size() == 2u);
  BOOST_TEST(r.pass);
  for (auto const& f : r.filters) {
    BOOST_TEST_CONTEXT(f.filter) {
      BOOST_TEST(f.psnr > r.psnrNoisy);
      BOOST_TEST(f.ssim > r.ssimNoisy);
    }
  }
  const auto j = toJson(r);
  BOOST_TEST(j["filters"].size() == 2u);
  BOOST_TEST(toMarkdown(std::vector<QualityImageResult>{r}).find("bilateral") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(report_files_are_atomic_and_checked) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kortex-tstValidation-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "r.json";
  io::writeTextFileAtomic(file.string(), "{\"a\": 1}\n");
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  BOOST_TEST(ss.str() == "{\"a\": 1}\n");
  BOOST_CHECK_THROW(io::writeTextFileAtomic((dir / "missing" / "x.json").string(), "x"), IoError);
  BOOST_CHECK_THROW(io::requireWritableFile(dir.string()), IoError);
  BOOST_TEST(!fs::exists(dir / "missing"));
  std::size_t entries = 0;
  for ([[maybe_unused]] auto const& e : fs::directory_iterator(dir)) ++entries;
  BOOST_TEST(entries == 1u);  // no temp file left behind
  fs::remove_all(dir);
  BOOST_TEST(sanitizeForFileName("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3");
}

BOOST_AUTO_TEST_CASE(validation_studies_are_one_table) {
  std::vector<std::string> names;
  for (auto const& s : validationStudies()) {
    names.push_back(s.name);
    BOOST_TEST(s.run != nullptr);
    BOOST_TEST(std::string(s.description).size() > 0u);
    BOOST_TEST(findStudy(s.name) == &s);
  }
  // The order they run in (and the order of the report's sections and notes).
  BOOST_TEST(names == (std::vector<std::string>{"harness", "quality", "registration", "surface", "greedy", "multimodal",
                                                "lesion", "symmetric", "atlas"}),
             boost::test_tools::per_element());
  BOOST_TEST(findStudy("harness")->dataNeeded == nullptr);
  BOOST_TEST(findStudy("quality")->dataNeeded == nullptr);
  for (const char* n : {"registration", "surface", "greedy", "multimodal", "lesion", "symmetric", "atlas"})
    BOOST_TEST(findStudy(n)->dataNeeded != nullptr);
  BOOST_TEST(findStudy("nosuch") == nullptr);
  BOOST_TEST(findStudy("") == nullptr);
}

BOOST_AUTO_TEST_CASE(suite_runs_only_the_named_studies) {
  namespace fs = std::filesystem;
  SuiteOptions o;
  o.quick = true;
  o.timing = false;
  o.only = {"nosuch"};
  BOOST_CHECK_THROW(runValidationSuite(o), InvalidArgument);

  // A named study that needs data, without a data folder: not run, the suite fails, a note says why.
  o.only = {"registration"};
  SuiteReport r = runValidationSuite(o);
  BOOST_TEST(!r.pass);
  BOOST_TEST(r.studies.empty());
  BOOST_TEST(r.cases.empty());
  BOOST_TEST(r.quality.empty());
  BOOST_REQUIRE(r.notes.size() == 1u);
  BOOST_TEST(r.notes[0].find("registration") != std::string::npos);

  // Named studies run in the table's order whatever the order given; a data folder without their
  // data: each says so in a note, and the suite fails because a named study did not run.
  const fs::path empty = fs::temp_directory_path() / ("kortex-tstValidation-only-" + std::to_string(::getpid()));
  fs::create_directories(empty);
  o.dataDir = empty.string();
  o.only = {"greedy", "registration"};
  r = runValidationSuite(o);
  fs::remove_all(empty);
  BOOST_TEST(!r.pass);
  BOOST_REQUIRE(r.studies.size() == 2u);
  BOOST_TEST(r.studies[0].name == "registration");
  BOOST_TEST(r.studies[1].name == "greedy");
  BOOST_TEST(!r.studies[0].ran);
  BOOST_TEST(!r.studies[1].ran);
  BOOST_TEST(r.studies[0].pass);  // a study that did not run did not fail; naming it is what fails the suite
  BOOST_TEST(r.notes.size() == 2u);
  BOOST_TEST(!r.registration.ran);
  BOOST_TEST(!r.greedy.ran);
  BOOST_TEST(r.cases.empty());
  BOOST_TEST(r.quality.empty());
  BOOST_TEST(toJson(r).contains("registration") == false);
}

BOOST_AUTO_TEST_CASE(suite_quality_study_alone) {
  SuiteOptions o;
  o.quick = true;
  o.timing = false;
  o.only = {"quality"};
  const SuiteReport r = runValidationSuite(o);
  BOOST_TEST(r.cases.empty());  // the harness was not named
  BOOST_TEST(!r.quality.empty());
  BOOST_TEST(!r.multiresQuality.empty());
  BOOST_REQUIRE(r.studies.size() == 1u);
  BOOST_TEST(r.studies[0].name == "quality");
  BOOST_TEST(r.studies[0].ran);
  bool all = true;
  for (auto const& q : r.quality) all = all && q.pass;
  for (auto const& q : r.multiresQuality) all = all && q.pass;
  BOOST_TEST(r.pass == all);
  BOOST_TEST(r.pass);
}

// The validate job is checked once, before any study runs, each bad part with its own message, and
// nothing is written for a job refused.
BOOST_AUTO_TEST_CASE(validate_job_refuses_bad_parts_before_running) {
  namespace v = kortex::validation;
  auto message = [](v::ValidateJob const& job) {
    try {
      job.validate();
    } catch (std::exception const& e) {  // InvalidArgument; IoError for a report location
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  v::ValidateJob job;
  BOOST_TEST(message(job) == "accepted");
  job.suite.only = {"nosuch"};
  BOOST_TEST(message(job).find("unknown study 'nosuch' (the studies: harness") != std::string::npos);
  job.suite.only = {"atlas"};
  BOOST_TEST(message(job).find("the atlas study needs the data folder") != std::string::npos);
  job.suite.only = {"harness"};
  job.suite.atlas.sizes = {1, 4};
  BOOST_TEST(message(job).find("cohort sizes run from 2 to 32") != std::string::npos);
  job.suite.atlas.sizes = {4};
  job.suite.elastixDir = "no-such-folder";
  BOOST_TEST(message(job).find("elastix's results folder 'no-such-folder' is not a folder") != std::string::npos);
  job.suite.elastixDir.clear();
  job.outJson = "no-such-folder/v.json";
  BOOST_TEST(message(job) != "accepted");
  BOOST_CHECK_THROW(v::runValidateJob(job), std::exception);
  BOOST_TEST(!std::filesystem::exists("no-such-folder"));
}

// The multi-modal study's second contrast (validation/Multimodal.hpp syntheticContrast) on a T1-like
// phantom: a head of scalp (0.3), and inside a brain labelled 1..3 with CSF (0.2), grey (0.5) and white
// matter (0.8) bands. The T2-like image reverses the brain's classes (CSF brightest, white matter
// darkest), keeps the background near 0, is the same for a seed and differs for another; another noise
// seed changes the noise alone (the difference of two images has mean 0 and the standard deviation of two
// independent noises, sqrt(2) x 0.02); a label map off the grid, or one that labels nothing, is refused.
BOOST_AUTO_TEST_CASE(synthetic_contrast_reverses_the_tissue_classes) {
  const Index n = 40;
  const Geometry g = Geometry::make3D(n, n, n);
  HostImage t1("t1", g), labels("labels", g);
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const double r = std::sqrt(std::pow(x - 19.5, 2) + std::pow(y - 19.5, 2) + std::pow(z - 19.5, 2));
        float v = 0.0f, l = 0.0f;
        if (r < 6) v = 0.8f, l = 1.0f;          // white matter
        else if (r < 11) v = 0.5f, l = 2.0f;    // grey matter
        else if (r < 13) v = 0.2f, l = 3.0f;    // CSF
        else if (r < 17) v = 0.3f;              // scalp
        t1.data(z, y, x) = v;
        labels.data(z, y, x) = l;
      }
  const HostImage a = validation::syntheticContrast(t1, labels, 5), b = validation::syntheticContrast(t1, labels, 5),
                  c = validation::syntheticContrast(t1, labels, 6);
  BOOST_TEST(a.geometry.sameGrid(t1.geometry, 0.0));
  double same = 0.0, other = 0.0;
  std::array<double, 5> sum{}, count{};  // by label 0..3, and 4: background
  for (Index i = 0; i < a.numVoxels(); ++i) {
    same = std::max(same, double(std::fabs(a.data.data()[i] - b.data.data()[i])));
    other = std::max(other, double(std::fabs(a.data.data()[i] - c.data.data()[i])));
    const int l = int(labels.data.data()[i]);
    const int k = l > 0 ? l : (t1.data.data()[i] > 0.0f ? 0 : 4);
    sum[std::size_t(k)] += a.data.data()[i];
    count[std::size_t(k)] += 1;
  }
  BOOST_TEST(same == 0.0);
  BOOST_TEST(other > 0.0);
  const double white = sum[1] / count[1], grey = sum[2] / count[2], csf = sum[3] / count[3];
  BOOST_TEST_MESSAGE("means: white " << white << ", grey " << grey << ", CSF " << csf << ", scalp " << sum[0] / count[0]
                                     << ", background " << sum[4] / count[4]);
  BOOST_TEST(csf > grey);
  BOOST_TEST(grey > white);
  BOOST_TEST(std::fabs(sum[4] / count[4]) < 0.03);  // noise of mean 0; the blur spills the scalp's edge
  const HostImage d = validation::syntheticContrast(t1, labels, 5, 77);
  double s1 = 0.0, s2 = 0.0;
  for (Index i = 0; i < a.numVoxels(); ++i) {
    const double e = double(a.data.data()[i]) - double(d.data.data()[i]);
    s1 += e;
    s2 += e * e;
  }
  const double m = s1 / double(a.numVoxels()), sd = std::sqrt(s2 / double(a.numVoxels()) - m * m);
  BOOST_TEST_MESSAGE("noise seeds 5 and 77: difference mean " << m << ", standard deviation " << sd);
  // 64000 samples: the mean's standard error is 1.1e-4 and the deviation's 1e-4; 5 sigma either way.
  BOOST_TEST(std::fabs(m) < 6e-4);
  BOOST_TEST(std::fabs(sd - std::sqrt(2.0) * 0.02) < 6e-4);
  HostImage off("off", Geometry::make3D(n, n, n - 1));
  BOOST_CHECK_THROW(validation::syntheticContrast(t1, off, 1), InvalidArgument);
  HostImage none("none", g);
  BOOST_CHECK_THROW(validation::syntheticContrast(t1, none, 1), InvalidArgument);
}

// The lesion study's lesion (validation/Lesion.hpp paintLesion) in a labelled ball of radius 12 voxels
// at 2 mm: a 10 mm lesion (5 voxels) lies inside the labels, holds `level` at its centre and the T1
// outside r + 1 voxels, its mask is 0 exactly within r + 1 voxels of the centre, the same seed gives
// the same lesion; a label map off the grid, an empty one and a radius <= 0 are refused.
BOOST_AUTO_TEST_CASE(lesion_is_a_ball_inside_the_labels) {
  const Index n = 40;
  Geometry g = Geometry::make3D(n, n, n);
  g.spacing = {2.0, 2.0, 2.0};
  HostImage t1("t1", g), labels("labels", g);
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const double r = std::sqrt(std::pow(x - 19.5, 2) + std::pow(y - 19.5, 2) + std::pow(z - 19.5, 2));
        t1.data(z, y, x) = r < 16 ? 0.5f + 0.01f * float(x % 7) : 0.0f;
        labels.data(z, y, x) = r < 12 ? 1.0f : 0.0f;
      }
  const validation::Lesion a = validation::paintLesion(t1, labels, 10.0, 3.0f, 7),
                           b = validation::paintLesion(t1, labels, 10.0, 3.0f, 7);
  BOOST_TEST(a.radiusVoxels == 5.0);
  BOOST_TEST(a.centre[0] == b.centre[0]);
  BOOST_TEST(a.centre[1] == b.centre[1]);
  BOOST_TEST(a.centre[2] == b.centre[2]);
  const Index cx = Index(a.centre[0]), cy = Index(a.centre[1]), cz = Index(a.centre[2]);
  BOOST_TEST(labels.data(cz, cy, cx) == 1.0f);
  BOOST_TEST(a.image.data(cz, cy, cx) == 3.0f);
  Index inside = 0, ball = 0;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const double d = std::sqrt(std::pow(x - a.centre[0], 2) + std::pow(y - a.centre[1], 2) + std::pow(z - a.centre[2], 2));
        BOOST_TEST(a.mask.data(z, y, x) == (d <= 6.0 ? 0.0f : 1.0f));
        if (d > 6.0) BOOST_TEST(a.image.data(z, y, x) == t1.data(z, y, x));
        if (d <= 5.0) {
          ++ball;
          inside += labels.data(z, y, x) > 0.5f ? 1 : 0;
        }
      }
  BOOST_TEST(double(inside) >= 0.95 * double(ball));
  BOOST_TEST(a.voxels >= ball);
  HostImage off("off", Geometry::make3D(n, n, n - 1));
  BOOST_CHECK_THROW(validation::paintLesion(t1, off, 10.0, 3.0f, 1), InvalidArgument);
  HostImage none("none", g);
  BOOST_CHECK_THROW(validation::paintLesion(t1, none, 10.0, 3.0f, 1), InvalidArgument);
  BOOST_CHECK_THROW(validation::paintLesion(t1, labels, 0.0, 3.0f, 1), InvalidArgument);
}
