// The inversion of a registration's map (core/Inverse.hpp): the Kokkos kernel
// (gpu/imageops/Inverse.hpp) on every enabled execution space against the CPU reference
// (reference_cpu/Inverse.hpp), a closed-form inverse, a known smooth diffeomorphism, the affine
// part, the statistics and refusals.
#define BOOST_TEST_MODULE Inverse
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>

#include "TestUtils.hpp"
#include "core/Affine.hpp"
#include "core/Inverse.hpp"
#include "gpu/imageops/Inverse.hpp"
#include "reference_cpu/Inverse.hpp"

using namespace kortex;
using HostField = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
using gpu::ConstField;
using gpu::Field;

namespace {

constexpr double kPi = 3.14159265358979323846;
// The shear's closed form against the solve: trilinear interpolation of c sin(2 pi z / L) between
// nodes errs by at most c (2 pi / L)^2 / 8 = 0.0145 voxel (c = 3, L = 32), plus the float preimage.
constexpr double kShearTol = 0.02;
// The bound for a known smooth diffeomorphism: the true forward map of the returned point
// lands within 0.1 voxel of the target (interpolation of the field + the solve's tolerance).
constexpr double kKnownMapTol = 0.1;
// Kokkos vs reference at a solve tolerance of 1e-6 voxel: both land within |J^-1| 2e-6 of the same
// root; the preimage is stored as float (ulp 3.8e-6 at 40 voxels).
constexpr double kBackendTol = 1e-4;

using Mat = std::array<double, 12>;  // row-major 3x4 [M | t]
const Mat kIdentity{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};

AffineTransform asTransform(Mat const& m) {
  return affineOfMatrix({m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], m[10], m[11], 0, 0, 0, 1});
}

// u_x = c sin(2 pi z / L), u_y = u_z = 0: p - u(p) = s has p = (s_x + c sin(2 pi s_z / L), s_y, s_z).
HostField shearField(int n, double c, double L) {
  HostField u("shear", 3, n, n, n);
  for (int z = 0; z < n; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) u(0, z, y, x) = float(c * std::sin(2 * kPi * z / L));
  return u;
}

// A smooth diffeomorphism: u = a (sin(2 pi y / L), sin(2 pi z / L), sin(2 pi x / L)) with
// a 2 pi / L < 1 (det (I - grad u) > 0).
double smoothU(int comp, double x, double y, double z, double a, double L) {
  const double arg = comp == 0 ? y : (comp == 1 ? z : x);
  return a * std::sin(2 * kPi * arg / L);
}
HostField smoothField(int n, double a, double L) {
  HostField u("smooth", 3, n, n, n);
  for (int z = 0; z < n; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x)
        for (int c = 0; c < 3; ++c) u(c, z, y, x) = float(smoothU(c, x, y, z, a, L));
  return u;
}

template <class Space>
std::pair<HostField, InverseStats> runKokkos(HostField const& u, Mat const& m, int mz, int my, int mx, InverseParams const& p) {
  using Mem = typename Space::memory_space;
  auto du = Kokkos::create_mirror_view_and_copy(Mem(), u);
  Field<Mem> pre("pre", 3, mz, my, mx);
  const InverseStats st = gpu::invertMap(Space(), ConstField<Mem>(du), asTransform(m), pre, p);
  HostField h("pre_host", 3, mz, my, mx);
  Kokkos::deep_copy(h, pre);
  return {h, st};
}

std::array<double, 3> apply(Mat const& m, double x, double y, double z) {
  return {m[0] * x + m[1] * y + m[2] * z + m[3], m[4] * x + m[5] * y + m[6] * z + m[7], m[8] * x + m[9] * y + m[10] * z + m[11]};
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(shear_matches_its_closed_form, Space, test::ExecutionSpaces) {
  const int n = 24;
  const HostField u = shearField(n, 3.0, 32.0);
  // A rotation-free scaling + translation as the affine part: s = M q is off the grid nodes.
  const Mat m{0.9, 0, 0, 1.3, 0, 1.05, 0, -0.4, 0, 0, 0.95, 0.7};
  auto [pre, st] = runKokkos<Space>(u, m, n, n, n, InverseParams{});
  BOOST_TEST(st.points == long(n) * n * n);
  BOOST_TEST(st.unconverged == 0);
  double worst = 0;
  for (int z = 0; z < n; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        auto s = apply(m, x, y, z);
        s[2] = std::min(std::max(s[2], 0.0), double(n - 1));  // u is clamp-extended beyond the grid
        const double px = apply(m, x, y, z)[0] + 3.0 * std::sin(2 * kPi * s[2] / 32.0);
        worst = std::max(worst, std::fabs(pre(0, z, y, x) - px));
        worst = std::max(worst, std::fabs(pre(1, z, y, x) - apply(m, x, y, z)[1]));
        worst = std::max(worst, std::fabs(pre(2, z, y, x) - apply(m, x, y, z)[2]));
      }
  BOOST_TEST(worst <= kShearTol, Space::name() << ": worst " << worst);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(known_smooth_diffeomorphism_inverted_within_a_tenth_voxel, Space, test::ExecutionSpaces) {
  const int n = 32;
  const double a = 2.0, L = 24.0;  // a 2 pi / L = 0.52: a strong but folding-free deformation
  const HostField u = smoothField(n, a, L);
  auto [pre, st] = runKokkos<Space>(u, kIdentity, n, n, n, InverseParams{});
  BOOST_TEST(st.unconverged == 0);
  double worst = 0;
  // Interior points whose preimage stays inside the grid (u is clamp-extended outside it).
  for (int z = 4; z < n - 4; ++z)
    for (int y = 4; y < n - 4; ++y)
      for (int x = 4; x < n - 4; ++x) {
        const double p[3] = {pre(0, z, y, x), pre(1, z, y, x), pre(2, z, y, x)};
        const double s[3] = {double(x), double(y), double(z)};
        for (int c = 0; c < 3; ++c)
          worst = std::max(worst, std::fabs(p[c] - smoothU(c, p[0], p[1], p[2], a, L) - s[c]));
      }
  BOOST_TEST(worst <= kKnownMapTol, Space::name() << ": worst " << worst);
  BOOST_TEST(worst > 0.0);  // the interpolated field is not the analytic one: a real measurement
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_matches_the_reference, Space, test::ExecutionSpaces) {
  const int nz = 20, ny = 18, nx = 22;  // moving grid differs from the fixed one
  HostField u("u", 3, 16, 17, 19);
  for (int z = 0; z < 16; ++z)
    for (int y = 0; y < 17; ++y)
      for (int x = 0; x < 19; ++x) {
        u(0, z, y, x) = float(1.2 * std::sin(0.31 * y + 0.2 * z));
        u(1, z, y, x) = float(0.9 * std::cos(0.27 * x - 0.15 * z));
        u(2, z, y, x) = float(1.1 * std::sin(0.22 * x + 0.3 * y));
      }
  const Mat m{0.85, 0.05, 0.0, 0.6, -0.04, 0.9, 0.03, -1.1, 0.0, 0.02, 0.8, 0.4};
  InverseParams p;
  p.tolerance = 1e-6;
  auto [pk, sk] = runKokkos<Space>(u, m, nz, ny, nx, p);
  HostField pr("ref", 3, nz, ny, nx);
  const InverseStats sr = ref::invertMap(u, asTransform(m), pr, p);
  BOOST_TEST(sk.points == sr.points);
  BOOST_TEST(sk.unconverged == sr.unconverged);
  double worst = 0;
  for (std::size_t i = 0; i < pr.size(); ++i) worst = std::max(worst, std::fabs(double(pk.data()[i]) - pr.data()[i]));
  BOOST_TEST(worst <= kBackendTol, Space::name() << ": worst " << worst);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_folded_map_is_reported_unconverged, Space, test::ExecutionSpaces) {
  // u_x = 3 sin(2 pi x / 8): d u_x / dx up to 2.36 > 1, so x - u_x(x) is not monotone: some targets
  // have no solution near the start and the residual stays large at one step per point.
  const int n = 16;
  HostField u("folded", 3, n, n, n);
  for (int z = 0; z < n; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) u(0, z, y, x) = float(3.0 * std::sin(2 * kPi * x / 8.0));
  InverseParams p;
  p.maxIterations = 1;
  auto [pre, st] = runKokkos<Space>(u, kIdentity, n, n, n, p);
  HostField pr("ref", 3, n, n, n);
  const InverseStats sr = ref::invertMap(u, asTransform(kIdentity), pr, p);
  BOOST_TEST(st.unconverged > 0);
  BOOST_TEST(sr.unconverged > 0);
  BOOST_TEST(st.maxResidual > p.tolerance);
}

BOOST_AUTO_TEST_CASE(parameters_and_shapes_are_checked) {
  InverseParams p;
  p.maxIterations = 0;
  BOOST_CHECK_THROW(p.validate(), InvalidArgument);
  p = InverseParams{};
  p.tolerance = 0.0;
  BOOST_CHECK_THROW(p.validate(), InvalidArgument);
  BOOST_CHECK_NO_THROW(InverseParams{}.validate());
  HostField two("two", 2, 4, 4, 4), pre("pre", 3, 4, 4, 4);
  BOOST_CHECK_THROW(ref::invertMap(two, asTransform(kIdentity), pre, InverseParams{}), InvalidArgument);
  BOOST_CHECK_THROW(gpu::invertMap(Kokkos::DefaultHostExecutionSpace(), ConstField<Kokkos::HostSpace>(two), asTransform(kIdentity),
                                   Field<Kokkos::HostSpace>(pre), InverseParams{}),
                    InvalidArgument);
}
