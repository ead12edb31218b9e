// The inverse of a real registration (pipeline/Inverse.hpp): IXI013 registered to IXI012 (2 mm,
// affine + greedy with the library's parameters, on the Kokkos back end), its map inverted on the
// Kokkos back end and by the CPU reference. The composition of the map and its inverse is near the
// identity inside the head (the bounds: mean <= 0.25 voxel, p99 <= 1 voxel), and the two
// back ends' inverses agree. Data: ../shared/data/mri/ixi_2mm (or $KORTEX_DATA_DIR); skipped (exit
// 77) when absent.
#define BOOST_TEST_MODULE InverseRealData
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <iostream>

#include "TestUtils.hpp"
#include "io/ImageIO.hpp"
#include "pipeline/Inverse.hpp"
#include "pipeline/Register.hpp"

using namespace kortex;

namespace {

constexpr double kMaxMeanInconsistency = 0.25;  // voxels: the bound on the mean inside the head
constexpr double kMaxP99Inconsistency = 1.0;    // voxels: the bound on the 99th percentile
// CPU vs Kokkos inverse of the same map: both solve to 1e-3 voxel (the default tolerance); |J^-1|
// stays below ~20 where det Dh >= 0.05, so the two roots differ by at most ~0.04 voxel.
constexpr double kBackendInverseTol = 0.05;

}  // namespace

BOOST_AUTO_TEST_CASE(inverse_of_a_real_greedy_registration) {
  if (!test::requireData("mri/ixi_2mm")) return;
  const auto dir = test::dataDir() / "mri/ixi_2mm";
  const HostImage fixed = io::readImage(dir / "IXI012-HH-1211-T1_ds.nii.gz");
  const HostImage moving = io::readImage(dir / "IXI013-HH-1212-T1_ds.nii.gz");
  pipeline::RegistrationPipelineOptions opt;
  opt.backend = Backend::Kokkos;
  opt.method = pipeline::RegistrationMethod::Greedy;
  pipeline::RegistrationPipelineResult r = pipeline::registerPair(moving, fixed, opt);
  BOOST_TEST(r.greedy.minJacobian > 0.0f);

  const pipeline::InverseMap inv = pipeline::invertRegistration(r);
  const HostImage head = pipeline::headMask(r);
  const pipeline::InverseConsistency ic = pipeline::inverseConsistency(r, inv, &head);
  std::cout << "IXI013 -> IXI012: min det " << r.greedy.minJacobian << "; inverse: " << inv.stats.unconverged << " of "
            << inv.stats.points << " points unconverged, max residual " << inv.stats.maxResidual << ", " << inv.seconds
            << " s; consistency inside the head (" << ic.voxels << " voxels): mean " << ic.mean << ", p99 " << ic.p99
            << ", max " << ic.max << std::endl;
  BOOST_TEST(ic.voxels > 100000);
  BOOST_TEST(ic.mean <= kMaxMeanInconsistency);
  BOOST_TEST(ic.p99 <= kMaxP99Inconsistency);

  // The CPU reference's inverse of the same map.
  pipeline::RegistrationPipelineResult rc = r;
  rc.backend = Backend::Cpu;
  const pipeline::InverseMap invCpu = pipeline::invertRegistration(rc);
  double worst = 0.0;
  const auto a = inv.preimage.data, b = invCpu.preimage.data;
  // Where both converged (a point that did not converge is reported by its residual, not compared).
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a.data()[i]) - b.data()[i]));
  std::cout << "CPU vs Kokkos inverse: max " << worst << " voxel; CPU unconverged " << invCpu.stats.unconverged
            << std::endl;
  BOOST_TEST(invCpu.stats.unconverged == inv.stats.unconverged);
  BOOST_TEST(worst <= kBackendInverseTol);

  // The world field of the inverse maps each moving voxel centre to the fixed point it came from.
  const auto e = pipeline::inverseWorldDisplacement(r, inv);
  BOOST_TEST(e.geometry.sameGrid(r.movingGrid));
}

KORTEX_REALDATA_TEST_MAIN()
