// Unbiased fluid registration (gpu/registration/Registration.hpp) on a real IXI T1 volume, on every enabled
// execution space (issue 4):
//   1. a known smooth diffeomorphic displacement (max |u| = 4 voxels) applied to the volume is
//      recovered with RMSE <= 0.5 voxel inside the head, det J > 0 everywhere, energy decreasing;
//   2. registering the volume to a noisy copy of itself gives a log-Jacobian distribution inside
//      the head with mean ~ 0 (the unbiased property), tighter than the one of lambda = 0.
// Data: ../shared/data/mri/ixi_2mm (or $KORTEX_DATA_DIR); skipped (exit 77) when absent.
//
// Problem size: IXI012 (2 mm, 120x120x90) is intensity-normalised (core/Intensity.hpp) and reduced
// once with affineReduce (binomial, 4 mm, 60x60x45, 162k voxels). The reduction keeps the whole
// executable at ~30 s on Serial (Release, one core) where the 2 mm grid would cost 8x per
// iteration; the properties tested (recovery of a smooth field, the prior's effect on log J) do
// not depend on the resolution. Displacements are in voxels of the 4 mm grid.
#define BOOST_TEST_MODULE RegistrationRealData
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "RealDataFields.hpp"
#include "TestUtils.hpp"
#include "core/Affine.hpp"
#include "core/Timing.hpp"
#include "core/Intensity.hpp"
#include "core/Phantom.hpp"
#include "core/Registration.hpp"
#include "gpu/registration/Registration.hpp"
#include "io/ImageIO.hpp"
#include "reference_cpu/Registration.hpp"
#include "validation/Registration.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using namespace kortex;

namespace {

using HostField = VectorField<Kokkos::HostSpace>;
using test::countMask;
using test::curlDisplacement;
using test::maxNorm;
using test::maxValue;
using test::minValue;
using test::rmseInMask;

// ---- tolerances and parameters -----------------------------------------------------------------

// The acceptance bound: RMSE of u - u_true over the head, voxels.
constexpr double kMaxRecoveryRmse = 0.5;
// Head mask: normalised fixed intensity above this (the definition of validation::headMask), not
// eroded: the error is measured right up to the scalp.
constexpr double kHeadThreshold = 0.1;
// Amplitude of the known displacement (the issue: "max ~4 voxels").
constexpr double kTrueMaxVoxels = 4.0;
// |mean log det J| inside the head for lambda > 0 on the noisy copy: measured <= 0.0013 at lambda
// 0.05 (four noise seeds) and 0.0009 at lambda 0.2; 0.01 is a 1 % mean volume change. lambda = 0
// gives -0.028 to -0.033 on the same problems, so the bound separates the two.
constexpr double kUnbiasedMeanTol = 0.01;
// Noise of the moving copy, normalised intensity units (the image spans [0, 1]).
constexpr double kNoiseSigma = 0.05;

// Recovery: the default lambda; sigma 3 and 100 iterations. The true field is smooth (wavelengths
// of the order of the volume), and a wider velocity kernel carries the data force from edges into
// the flat tissue between them. Measured RMSE (seed 7): sigma 1: 1.07 (step underflow after 59
// iterations); sigma 1.5 / 2 with 150 iterations: 0.63 / 0.43 (0.35 with 300); sigma 3 with 100:
// 0.32 (these parameters); sigma 4 with 100: 0.22, at 30 % more time per iteration (radius 12).
// Seeds 1, 2, 3 give 0.25-0.29 with these parameters.
RegistrationParams recoveryParams() {
  RegistrationParams p;
  p.lambda = 0.05;
  p.sigma = 3.0f;
  p.iterations = 100;
  return p;
}
constexpr std::uint64_t kFieldSeed = 7;

// Unbiasedness: the default sigma; 150 iterations. With 300, the same picture: lambda 0.05 mean
// -0.0012, sd 0.018; lambda 0 mean -0.042, sd 0.32 (150: -0.0012, 0.020; -0.033, 0.29).
RegistrationParams unbiasedParams(double lambda) {
  RegistrationParams p;
  p.lambda = lambda;
  p.sigma = 1.0f;
  p.iterations = 150;
  return p;
}
constexpr std::uint64_t kNoiseSeed = 4242;

// ---- data and fields ---------------------------------------------------------------------------

HostImage reducedIxi012() {
  const HostImage raw =
      io::readImage(test::dataDir() / "mri/ixi_2mm/IXI012-HH-1211-T1_ds.nii.gz");
  return affineReduce(normaliseIntensity(raw, IntensityParams{}, "IXI012"));
}

// det(I - grad u) computed on `Space` (gpu::jacobianDeterminant), back on the host.
template <class Space>
HostImage jacobianOn(HostField const& u) {
  using Mem = typename Space::memory_space;
  const Geometry& g = u.geometry;
  gpu::Field<Mem> du(std::string("kortex::test::u"), 3, g.nz(), g.ny(), g.nx());
  Kokkos::deep_copy(du, u.data);
  auto dj = test::poisonedImage<Space>(g, "kortex::test::jacobian");
  Space exec;
  gpu::jacobianDeterminant(exec, gpu::ConstField<Mem>(du), dj);
  exec.fence();
  return test::toHost(dj, g);
}

// Registration with a monotone-energy check through the progress callback.
template <class Space>
RegistrationResult registerOn(HostImage const& moving, HostImage const& fixed, HostField& u,
                              RegistrationParams const& p, bool& monotone) {
  monotone = true;
  double last = std::numeric_limits<double>::infinity();
  return gpu::fluidRegister(Space(), moving, fixed, u, p, [&](RegistrationIteration const& it) {
    if (it.energy.total > last) monotone = false;
    last = it.energy.total;
  });
}


}  // namespace

// ---------------------------------------------------------------------------------------------
// 1. A known deformation is recovered. Moving T = the image, fixed R(x) = T(x - u_true(x))
// (reference warp), u from 0: the registration's u should be u_true.

BOOST_AUTO_TEST_CASE_TEMPLATE(known_deformation_recovered, Space, test::ExecutionSpaces) {
  if (!test::requireData("mri/ixi_2mm")) return;
  const auto t0 = std::chrono::steady_clock::now();
  const HostImage moving = reducedIxi012();
  const Geometry& g = moving.geometry;
  const HostField uTrue = curlDisplacement(g, kTrueMaxVoxels, kFieldSeed);
  HostImage jTrue("kortex::test::jTrue", g);
  ref::jacobianDeterminant(uTrue.data, jTrue.data);
  const double maxTrue = maxNorm(uTrue);
  BOOST_REQUIRE(minValue(jTrue) > 0.0f);  // the truth is a diffeomorphism
  HostImage fixed("kortex::test::fixed", g);
  ref::warp(moving.data, uTrue.data, fixed.data);
  const HostImage mask = test::headMask(fixed, kHeadThreshold);

  const RegistrationParams p = recoveryParams();
  HostField u("kortex::test::u", g);
  bool monotone = false;
  const RegistrationResult r = registerOn<Space>(moving, fixed, u, p, monotone);
  const HostImage jac = jacobianOn<Space>(u);
  const HostField zero("kortex::test::zero", g);
  const double rmse = rmseInMask(u, uTrue, mask), rmseStart = rmseInMask(zero, uTrue, mask);

  std::ostringstream msg;
  msg << Space::name() << " IXI012 " << describe(g) << ": u_true max |u| " << maxTrue
      << " voxels, J_true in [" << minValue(jTrue) << ", " << maxValue(jTrue) << "]; lambda " << p.lambda << " sigma "
      << p.sigma << ": " << r.iterations << " iterations (" << r.accepted << " accepted, "
      << r.rejected << " rejected, " << toString(r.stop) << "), E " << r.initial.total << " -> "
      << r.final.total << ", min J " << minValue(jac) << "; RMSE over the head (" << countMask(mask)
      << " voxels) " << rmse << " voxel (zero field: " << rmseStart << "); registration "
      << r.seconds << " s, case " << secondsSince(t0) << " s";
  BOOST_TEST_MESSAGE(msg.str());
  std::cout << msg.str() << std::endl;

  BOOST_TEST(std::abs(maxTrue - kTrueMaxVoxels) <= 1e-5 * kTrueMaxVoxels);
  BOOST_TEST(rmse <= kMaxRecoveryRmse);
  BOOST_TEST(minValue(jac) > 0.0f);
  BOOST_TEST(r.final.minJacobian > 0.0f);
  BOOST_TEST(r.final.total < r.initial.total);
  BOOST_TEST(monotone);
}

// ---------------------------------------------------------------------------------------------
// 2. Unbiased property. Fixed = the image, moving = the image + N(0, kNoiseSigma^2): there is no
// true deformation, and under the symmetric-KL prior the log-Jacobian inside the head should stay
// centred on 0. With lambda = 0 the fluid chases the noise: a much wider log J distribution
// (the spec's iteration still refuses folds at any lambda, so J > 0 there too; voxels with
// J <= 0 would be left out of the statistics and counted).

BOOST_AUTO_TEST_CASE_TEMPLATE(noisy_copy_is_unbiased, Space, test::ExecutionSpaces) {
  if (!test::requireData("mri/ixi_2mm")) return;
  const auto t0 = std::chrono::steady_clock::now();
  const HostImage fixed = reducedIxi012();
  const Geometry& g = fixed.geometry;
  const HostImage moving = addGaussianNoise(fixed, kNoiseSigma, kNoiseSeed);
  const HostImage head = test::headMask(fixed, kHeadThreshold);

  struct Run {
    double lambda;
    validation::LogJacobianStats stats;
    Index folds = 0;
    float minJ = 0.0f;
  };
  std::vector<Run> runs;
  for (double lambda : {0.05, 0.2, 0.0}) {
    BOOST_TEST_CONTEXT(Space::name() << " lambda " << lambda) {
      const RegistrationParams p = unbiasedParams(lambda);
      HostField u("kortex::test::u", g);
      bool monotone = false;
      const RegistrationResult r = registerOn<Space>(moving, fixed, u, p, monotone);
      const HostImage jac = jacobianOn<Space>(u);
      // log J is undefined where J <= 0: those voxels are left out and counted.
      HostImage mask("kortex::test::mask", g);
      Run run{lambda, {}, 0, minValue(jac)};
      for (Index i = 0; i < g.numVoxels(); ++i) {
        const bool inHead = head.data.data()[i] > 0.0f;
        const bool positive = jac.data.data()[i] > 0.0f;
        if (inHead && !positive) ++run.folds;
        mask.data.data()[i] = inHead && positive ? 1.0f : 0.0f;
      }
      run.stats = validation::logJacobianStats(jac, &mask);
      std::ostringstream msg;
      msg << Space::name() << " noisy copy (sigma " << kNoiseSigma << "), lambda " << lambda
          << ": log J over the head (" << run.stats.count << " voxels) mean " << run.stats.mean
          << " sd " << run.stats.sd << " range [" << run.stats.min << ", " << run.stats.max
          << "], min J " << run.minJ << ", folds in the head " << run.folds << "; "
          << r.iterations << " iterations (" << toString(r.stop) << "), E " << r.initial.total
          << " -> " << r.final.total << ", " << r.seconds << " s";
      BOOST_TEST_MESSAGE(msg.str());
      std::cout << msg.str() << std::endl;
      BOOST_TEST(r.final.total < r.initial.total);
      BOOST_TEST(monotone);
      BOOST_TEST(run.stats.count > 0);
      if (lambda > 0.0) {
        BOOST_TEST(run.minJ > 0.0f);
        BOOST_TEST(std::abs(run.stats.mean) <= kUnbiasedMeanTol);
      }
      runs.push_back(run);
    }
  }
  BOOST_REQUIRE(runs.size() == 3u);
  const Run &l005 = runs[0], &l02 = runs[1], &l0 = runs[2];
  // The prior tightens the distribution and removes the bias of the unregularised flow.
  BOOST_TEST(l005.stats.sd < l0.stats.sd);
  BOOST_TEST(l02.stats.sd < l0.stats.sd);
  BOOST_TEST(std::abs(l005.stats.mean) < std::abs(l0.stats.mean));
  BOOST_TEST(std::abs(l02.stats.mean) < std::abs(l0.stats.mean));
  // A stronger prior, a tighter distribution.
  BOOST_TEST(l02.stats.sd < l005.stats.sd);
  std::cout << Space::name() << " unbiasedness case " << secondsSince(t0) << " s" << std::endl;
}

KORTEX_REALDATA_TEST_MAIN()
