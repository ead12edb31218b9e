// Greedy diffeomorphic registration (core/Greedy.hpp): the CPU reference (reference_cpu/Greedy.hpp)
// on analytic cases, and every Kokkos kernel (gpu/greedy/Greedy.hpp) against it on every enabled
// execution space: force, composition, max |v|, min det, RMSE, down- and up-sampling, whole
// multi-scale registrations with every solver, the fold refusal, and bad inputs.
#define BOOST_TEST_MODULE Greedy
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "FieldTestUtils.hpp"
#include "TestUtils.hpp"
#include "core/Greedy.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "gpu/registration/Registration.hpp"
#include "reference_cpu/Greedy.hpp"
#include "reference_cpu/Registration.hpp"

using namespace kortex;
using HostField = ref::HostField;
using test::maxAbs;
using test::maxDiff;
using test::randomField;
using test::toDevice;
using test::toHostField;

namespace {

// ---- tolerances ----------------------------------------------------------------------------------
// Force: float central differences and one float product vs double, relative to the peak |F|
// (measured 9e-10 absolute).
constexpr double kForceTol = 1e-6;
// Composition: float trilinear sample (7 lerps) of |u| <= 3 vs double, and the float step eps v
// formed identically on both sides: a few ulps of 3 (2.4e-7 each).
constexpr double kComposeTol = 2e-6;  // voxels
// Down-sampling: the recursive blur (its own float-vs-double tolerance in tstGaussian) then one
// float trilinear sample; relative to the image range [0, 1].
constexpr double kDownsampleTol = 1e-5;
// Up-sampling: float trilinear sample and one float scaling.
constexpr double kUpsampleTol = 2e-6;  // voxels
// Whole registrations, Kokkos (float FFT / sweeps) vs the reference (double FFT / sweeps, float
// storage), 18 steps of <= 1 voxel: measured 1.1e-6 (fft), 1.9e-6 (cg), 1.1e-5 (sor, hybrid-sor)
// voxels on Serial; a different fold decision would move the field by >= half a step.
constexpr double kFieldTol = 1e-4;  // voxels
// The two Kokkos step variants evaluate the same per-voxel functions on the same inputs; they may
// differ only where a compiler contracts a multiply-add differently in the two kernels (float
// ulps of |u| <= a few voxels, carried through the iterations).
constexpr double kStepVariantTol = 1e-5;  // voxels
// One candidate step vs the reference: u' within kComposeTol, so W moves by <= kComposeTol x
// |grad I0| (<= ~0.3 per voxel here) and the force, a product of W differences, by a few 1e-7 of
// its peak; det(I - grad u') by differences of u' (2 x 2e-6 per entry, entries <= ~2).
constexpr double kStepForceTol = 1e-5;      // relative to max |F|
constexpr double kStepJacobianTol = 2e-5;
constexpr double kStepSseTol = 1e-5;        // relative
// Linear functions are reproduced exactly by trilinear interpolation away from the clamp: float
// rounding of |u| <= 2 only.
constexpr double kLinearTol = 1e-5;

Geometry grid(int nx, int ny, int nz) { return Geometry::make3D(nx, ny, nz); }

// A smooth blob image with structure in every direction, values in [0, 1].
HostImage blobs(int nx, int ny, int nz, double shift = 0.0) {
  HostImage img("blobs", grid(nx, ny, nz));
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) {
        const double cx = nx / 2.0 + shift, cy = ny / 2.0, cz = nz / 2.0;
        const double r2 = std::pow((x - cx) / (0.3 * nx), 2) + std::pow((y - cy) / (0.25 * ny), 2) +
                          std::pow((z - cz) / (0.3 * nz), 2);
        const double d2 = std::pow((x - cx - 0.15 * nx) / (0.1 * nx), 2) + std::pow((y - cy) / (0.1 * ny), 2) +
                          std::pow((z - cz) / (0.12 * nz), 2);
        img.data(z, y, x) = float(0.7 * std::exp(-r2) + 0.3 * std::exp(-d2));
      }
  return img;
}

// A smooth field (sines), amplitude `amp` voxels.
HostField smoothField(int nz, int ny, int nx, float amp) {
  HostField u("smooth", 3, nz, ny, nx);
  const double tw = 6.283185307179586;
  for (int c = 0; c < 3; ++c)
    for (int z = 0; z < nz; ++z)
      for (int y = 0; y < ny; ++y)
        for (int x = 0; x < nx; ++x)
          u(c, z, y, x) = float(amp * std::sin(tw * x / nx + c) * std::cos(tw * y / ny) * std::sin(tw * z / nz + 0.5));
  return u;
}

// The paper's operator (alpha 0.01, gamma 0.001: smoothing length ~3 voxels) suits these small
// grids, and SOR converges in the paper's sweep counts there (omega - 1 = 0.69 per sweep; at the
// library's alpha 0.1 it is 0.89).
GreedyParams smallParams(GreedySolver solver) {
  GreedyParams p;
  p.fluid = FluidParams{};
  p.scales = {2, 1};
  p.iterations = {8, 10};
  p.solver = solver;
  p.coldSweeps = 60;
  p.warmSweeps = 6;
  p.cgTolerance = 1e-5;
  return p;
}

// smallParams(Fft) for each metric (LNCC at radius 1) and step variant, and their name.
std::vector<std::pair<std::string, GreedyParams>> metricStepCases() {
  std::vector<std::pair<std::string, GreedyParams>> cases;
  for (GreedyMetric metric : {GreedyMetric::Ssd, GreedyMetric::Lncc})
    for (GreedyStepVariant step : {GreedyStepVariant::Naive, GreedyStepVariant::ScratchTiled}) {
      GreedyParams p = smallParams(GreedySolver::Fft);
      p.metric = metric;
      p.stepVariant = step;
      p.lnccRadius = 1;
      cases.emplace_back(std::string(toString(metric)) + " " + toString(step), p);
    }
  return cases;
}

// The folding case: sharp 12^3 images and a huge step (4 voxels per iteration, the paper's operator
// at alpha 0.001), which folds h unless steps are refused.
struct SharpCase {
  HostImage fixed{"sharp_fixed", grid(12, 12, 12)}, moving{"sharp_moving", grid(12, 12, 12)};
  GreedyParams params;
  SharpCase() {
    for (int z = 0; z < 12; ++z)
      for (int y = 0; y < 12; ++y)
        for (int x = 0; x < 12; ++x) {
          fixed.data(z, y, x) = float((x + y + z) % 3 == 0);
          moving.data(z, y, x) = float((x + 2 * y + z) % 4 == 0);
        }
    params.scales = {1};
    params.iterations = {30};
    params.maxStep = 4.0f;
    params.minStep = 0.5f;
    params.fluid.alpha = 0.001;
  }
};

}  // namespace

// ---- reference and spec ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(params_validation) {
  GreedyParams p;
  BOOST_CHECK_NO_THROW(p.validate());
  p.scales = {1, 2};
  p.iterations = {5, 5};
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"decrease"});
  p = GreedyParams{};
  p.scales = {2};
  p.iterations = {5};
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"must be 1"});
  p = GreedyParams{};
  p.iterations = {5};
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"one per scale"});
  p = GreedyParams{};
  p.fluid.beta = 0.1;
  p.solver = GreedySolver::HybridSor;
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"beta = 0"});
  p = GreedyParams{};
  p.maxStep = 0.0f;
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"max step"});
  p = GreedyParams{};
  p.fluid.gamma = 0.0;
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"gamma"});
  p = GreedyParams{};
  test::expectThrowWith<InvalidArgument>([&] { p.validateFor(grid(20, 21, 20)); }, {"does not divide"});
  p.solver = GreedySolver::Sor;
  test::expectThrowWith<InvalidArgument>([&] { p.validateFor(grid(20, 18, 22)); }, {"even extents"});
  BOOST_CHECK_NO_THROW(p.validateFor(grid(20, 16, 24)));
  BOOST_TEST(toString(parseGreedySolver("hybrid-cg")) == std::string("hybrid-cg"));
  test::expectThrowWith<InvalidArgument>([] { parseGreedySolver("multigrid"); }, {"unknown fluid solver"});
}

BOOST_AUTO_TEST_CASE(reference_composition_of_linear_maps_is_exact) {
  // u(x) = A x (linear), v constant: u(x + eps v) - eps v = A x + (A - I) eps v, exactly, wherever
  // x + eps v stays inside the grid (no clamp).
  const int n = 12;
  HostField u("u", 3, n, n, n), v("v", 3, n, n, n), out("out", 3, n, n, n);
  const double A[3][3] = {{0.02, -0.01, 0.03}, {0.01, 0.015, -0.02}, {-0.025, 0.01, 0.01}};
  const double vc[3] = {0.7, -0.4, 0.3};
  const float eps = 1.5f;
  for (int z = 0; z < n; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x)
        for (int c = 0; c < 3; ++c) {
          u(c, z, y, x) = float(A[c][0] * x + A[c][1] * y + A[c][2] * z);
          v(c, z, y, x) = float(vc[c]);
        }
  ref::greedyCompose(u, v, eps, out);
  double err = 0.0;
  for (int z = 2; z < n - 2; ++z)
    for (int y = 2; y < n - 2; ++y)
      for (int x = 2; x < n - 2; ++x)
        for (int c = 0; c < 3; ++c) {
          const double p[3] = {x + eps * vc[0], y + eps * vc[1], z + eps * vc[2]};
          const double want = A[c][0] * p[0] + A[c][1] * p[1] + A[c][2] * p[2] - eps * vc[c];
          err = std::max(err, std::fabs(out(c, z, y, x) - want));
        }
  BOOST_TEST(err <= kLinearTol);
}

BOOST_AUTO_TEST_CASE(reference_downsample_and_upsample_rules) {
  // Factor 2 of a linear ramp: the blur keeps a ramp (away from the clamp), the sample at 2x + 1/2.
  const int n = 16;
  HostImage ramp("ramp", grid(n, n, n));
  for (int z = 0; z < n; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) ramp.data(z, y, x) = float(0.01 * x + 0.02 * y - 0.005 * z);
  const HostImage d = ref::downsampleImage(ramp, 2);
  BOOST_TEST(d.geometry.nx() == n / 2);
  BOOST_TEST(d.geometry.spacing[0] == 2.0);
  double err = 0.0;
  for (int z = 2; z < n / 2 - 2; ++z)
    for (int y = 2; y < n / 2 - 2; ++y)
      for (int x = 2; x < n / 2 - 2; ++x)
        err = std::max(err, std::fabs(d.data(z, y, x) - (0.01 * (2 * x + 0.5) + 0.02 * (2 * y + 0.5) - 0.005 * (2 * z + 0.5))));
  BOOST_TEST(err <= 1e-4);  // the recursive Gaussian keeps ramps to its own accuracy
  // A constant coarse field of 1 voxel becomes a constant fine field of 2 voxels.
  HostField coarse("coarse", 3, 4, 4, 4), fine("fine", 3, 8, 8, 8);
  Kokkos::deep_copy(coarse, 1.0f);
  ref::upsampleField(coarse, 2, 1, fine);
  for (std::size_t i = 0; i < fine.size(); ++i) BOOST_TEST(fine.data()[i] == 2.0f);
}

BOOST_AUTO_TEST_CASE(reference_registration_recovers_a_shift_and_stays_diffeomorphic) {
  const int n = 24;
  const HostImage fixed = blobs(n, n, n), moving = blobs(n, n, n, 1.5);
  for (GreedySolver s : {GreedySolver::Fft, GreedySolver::HybridSor, GreedySolver::Cg}) {
    VectorField<Kokkos::HostSpace> u;
    GreedyParams p = smallParams(s);
    p.iterations = {15, 25};  // (the paper's operator, see smallParams)
    const GreedyResult r = ref::greedyRegister(moving, fixed, u, p);
    BOOST_TEST(r.scales.size() == 2u);
    BOOST_TEST(r.scales.back().rmseEnd < 0.25 * r.scales.front().rmseStart, toString(s));
    BOOST_TEST(r.minJacobian > 0.0f);
    // The moving blob sits 1.5 voxels further along +x: I0(x - u) = I1 needs u_x ~ -1.5 in the blob.
    const double ux = u.data(0, n / 2, n / 2, n / 2);
    BOOST_TEST(std::fabs(ux + 1.5) < 0.3, toString(s) << ": u_x at the centre " << ux);
  }
}

// ---- Kokkos, every execution space ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_kernels_match_reference, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  const int nz = 10, ny = 12, nx = 14;
  const HostImage fixed = blobs(nx, ny, nz), moving = blobs(nx, ny, nz, 1.0);
  auto dFixed = test::toSpace<Space>(fixed), dMoving = test::toSpace<Space>(moving);
  // Force
  {
    gpu::Field<Mem> f("f", 3, nz, ny, nx);
    gpu::greedyForce(exec, dMoving, dFixed, f);
    HostField want("want", 3, nz, ny, nx);
    ref::greedyForce(moving.data, fixed.data, want);
    BOOST_TEST(maxDiff(toHostField(f), want) <= kForceTol * maxAbs(want));
  }
  // Composition, max norm, min det
  {
    const HostField u = smoothField(nz, ny, nx, 1.5f), v = randomField(nz, ny, nx, 3, 1.0f);
    auto du = toDevice<Space>(u);
    auto dv = toDevice<Space>(v);
    gpu::Field<Mem> out("out", 3, nz, ny, nx);
    gpu::greedyCompose(exec, du, dv, 0.8f, out);
    HostField want("want", 3, nz, ny, nx);
    ref::greedyCompose(u, v, 0.8f, want);
    BOOST_TEST(maxDiff(toHostField(out), want) <= kComposeTol);
    BOOST_TEST(std::fabs(gpu::fieldMaxNorm(exec, dv) - ref::fieldMaxNorm(v)) <= 1e-6 * ref::fieldMaxNorm(v));
    ImageView<Kokkos::HostSpace> jac("jac", nz, ny, nx);
    ref::jacobianDeterminant(u, jac);
    float mj = jac(0, 0, 0);
    for (std::size_t i = 0; i < jac.size(); ++i) mj = std::min(mj, jac.data()[i]);
    BOOST_TEST(std::fabs(gpu::minJacobian(exec, du) - mj) <= 2e-6);
    BOOST_TEST(std::fabs(gpu::imageRmse(exec, dMoving, dFixed) - ref::imageRmse(moving.data, fixed.data)) <= 1e-9);
  }
  // One candidate step, every variant, against the reference's composition, warp, det and force.
  {
    const HostField u = smoothField(nz, ny, nx, 1.0f), v = randomField(nz, ny, nx, 5, 1.0f);
    const float eps = 0.7f;
    HostField wantU("wantU", 3, nz, ny, nx), wantF("wantF", 3, nz, ny, nx);
    ref::greedyCompose(u, v, eps, wantU);
    HostImage w("w", moving.geometry);
    ref::warp(moving.data, wantU, w.data);
    ref::greedyForce(w.data, fixed.data, wantF);
    ImageView<Kokkos::HostSpace> jac("jac", nz, ny, nx);
    ref::jacobianDeterminant(wantU, jac);
    float wantJ = jac(0, 0, 0);
    double wantSse = 0.0;
    for (std::size_t i = 0; i < jac.size(); ++i) {
      wantJ = std::min(wantJ, jac.data()[i]);
      const double d = double(w.data.data()[i]) - double(fixed.data.data()[i]);
      wantSse += d * d;
    }
    for (GreedyStepVariant step : {GreedyStepVariant::Naive, GreedyStepVariant::ScratchTiled}) {
      gpu::Field<Mem> out("out", 3, nz, ny, nx), f("f", 3, nz, ny, nx);
      const gpu::GreedyStepSums got =
          gpu::greedyStep(exec, dMoving, dFixed, toDevice<Space>(u), toDevice<Space>(v), eps, out, f, step);
      BOOST_TEST_CONTEXT(toString(step)) {
        BOOST_TEST(maxDiff(toHostField(out), wantU) <= kComposeTol);
        BOOST_TEST(maxDiff(toHostField(f), wantF) <= kStepForceTol * maxAbs(wantF));
        BOOST_TEST(std::fabs(got.minJacobian - wantJ) <= kStepJacobianTol);
        BOOST_TEST(std::fabs(got.sse - wantSse) <= kStepSseTol * wantSse);
      }
    }
  }
  // Down- and up-sampling
  {
    const HostImage img = blobs(16, 12, 8);
    auto d = test::toSpace<Space>(img);
    ImageView<Mem> blurred("blurred", 8, 12, 16), out("out", 4, 6, 8);
    gpu::downsampleImage(exec, d, 2, blurred, out);
    const HostImage want = ref::downsampleImage(img, 2);
    const HostImage got = test::toHost(out, want.geometry);
    BOOST_TEST(test::maxAbsDifference(got, want) <= kDownsampleTol);
    const HostField c = smoothField(4, 6, 8, 1.0f);
    gpu::Field<Mem> fine("fine", 3, 8, 12, 16);
    gpu::upsampleField(exec, toDevice<Space>(c), 2, 1, fine);
    HostField wantFine("wantFine", 3, 8, 12, 16);
    ref::upsampleField(c, 2, 1, wantFine);
    BOOST_TEST(maxDiff(toHostField(fine), wantFine) <= kUpsampleTol);
  }
}

// The trilinear samplers address corners by the views' strides (core/Greedy.hpp
// greedySampleField, core/Registration.hpp regSampleTrilinear): the same bits as indexing the
// view, on contiguous views and on strided subviews, inside the grid and past its edges (clamp).
namespace {
void viewIndexedCorner(float p, int n, int& i0, int& i1, float& t) {
  const float lo = p < -1.0f ? -1.0f : (p > float(n) ? float(n) : p);
  const float f = std::floor(lo);
  t = lo - f;
  i0 = clampIndex(int(f), n);
  i1 = clampIndex(int(f) + 1, n);
}
template <class V>
float viewIndexedTrilinear(V const& a, float px, float py, float pz) {  // a(z, y, x), the samplers' operations
  int x0, x1, y0, y1, z0, z1;
  float tx, ty, tz;
  viewIndexedCorner(px, int(a.extent(2)), x0, x1, tx);
  viewIndexedCorner(py, int(a.extent(1)), y0, y1, ty);
  viewIndexedCorner(pz, int(a.extent(0)), z0, z1, tz);
  const float e00 = a(z0, y0, x0) + tx * (a(z0, y0, x1) - a(z0, y0, x0));
  const float e01 = a(z0, y1, x0) + tx * (a(z0, y1, x1) - a(z0, y1, x0));
  const float e10 = a(z1, y0, x0) + tx * (a(z1, y0, x1) - a(z1, y0, x0));
  const float e11 = a(z1, y1, x0) + tx * (a(z1, y1, x1) - a(z1, y1, x0));
  const float f0 = e00 + ty * (e01 - e00), f1 = e10 + ty * (e11 - e10);
  return f0 + tz * (f1 - f0);
}
}  // namespace

BOOST_AUTO_TEST_CASE(sampling_by_strides_is_view_indexing) {
  Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> big("big", 3, 9, 8, 11);
  for (std::size_t k = 0; k < big.size(); ++k) big.data()[k] = float(std::sin(0.37 * double(k)) * 10.0);
  auto whole = Kokkos::subview(big, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
  auto strided = Kokkos::subview(big, Kokkos::ALL, std::make_pair(2, 7), std::make_pair(1, 7), std::make_pair(3, 10));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> in(-2.5f, 12.5f);
  int checked = 0;
  auto check = [&](auto const& u) {
    for (int t = 0; t < 400; ++t) {
      const float px = in(rng), py = in(rng), pz = in(rng);
      float got[3];
      greedySampleField(u, px, py, pz, got);
      for (int c = 0; c < 3; ++c) {
        auto comp = Kokkos::subview(u, c, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
        const float want = viewIndexedTrilinear(comp, px, py, pz);
        float g[3];
        BOOST_TEST_REQUIRE(got[c] == want);
        BOOST_TEST_REQUIRE(regSampleTrilinear(comp, px, py, pz, g) == want);
        ++checked;
      }
    }
  };
  check(whole);
  check(strided);
  BOOST_TEST(strided.stride_3() == 1u);
  BOOST_TEST(strided.stride_2() == big.stride_2());  // rows of the parent: not contiguous
  BOOST_TEST(checked == 2400);
}

// The one-pass step's schedule (slices per team) changes the order of the work, not the values:
// every schedule writes the same bits and returns the same sums, on a grid with partial tiles and
// a partial last chunk.
BOOST_AUTO_TEST_CASE_TEMPLATE(step_tiled_schedule_changes_no_bit, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  const int nz = 11, ny = 13, nx = 37;
  const HostImage fixed = blobs(nx, ny, nz), moving = blobs(nx, ny, nz, 1.2);
  auto dFixed = test::toSpace<Space>(fixed);
  auto dMoving = test::toSpace<Space>(moving);
  auto du = toDevice<Space>(smoothField(nz, ny, nx, 1.0f));
  auto dv = toDevice<Space>(randomField(nz, ny, nx, 7, 1.0f));
  const float eps = 0.5f;
  gpu::Field<Mem> u0("u0", 3, nz, ny, nx), f0("f0", 3, nz, ny, nx);
  const gpu::GreedyStepSums want =
      gpu::greedyStep(exec, dMoving, dFixed, du, dv, eps, u0, f0, GreedyStepVariant::ScratchTiled, nz);  // one chunk
  const HostField wantU = toHostField(u0), wantF = toHostField(f0);
  for (int chunk : {0, 1, 3, 4, 16}) {  // 0: the registration's choice
    gpu::Field<Mem> u1("u1", 3, nz, ny, nx), f1("f1", 3, nz, ny, nx);
    const gpu::GreedyStepSums got =
        gpu::greedyStep(exec, dMoving, dFixed, du, dv, eps, u1, f1, GreedyStepVariant::ScratchTiled, chunk);
    BOOST_TEST_CONTEXT("chunk " << chunk) {
      BOOST_TEST(maxDiff(toHostField(u1), wantU) == 0.0);
      BOOST_TEST(maxDiff(toHostField(f1), wantF) == 0.0);
      BOOST_TEST(got.minJacobian == want.minJacobian);
      BOOST_TEST(std::fabs(got.sse - want.sse) <= 1e-12 * want.sse);  // a double sum: the reduction order may differ
    }
  }
  BOOST_TEST(want.minJacobian < 3.0e38f);
  BOOST_TEST(want.sse > 0.0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_registration_matches_reference, Space, test::ExecutionSpaces) {
  Space exec;
  const int n = 16;
  const HostImage fixed = blobs(n, n, n), moving = blobs(n, n, n, 1.2);
  for (GreedyStepVariant step : {GreedyStepVariant::Naive, GreedyStepVariant::ScratchTiled})
    for (GreedySolver s : {GreedySolver::Fft, GreedySolver::Sor, GreedySolver::HybridSor, GreedySolver::Cg,
                           GreedySolver::HybridCg}) {
      GreedyParams p = smallParams(s);
      p.stepVariant = step;
      VectorField<Kokkos::HostSpace> uRef, uGpu;
      const GreedyResult want = ref::greedyRegister(moving, fixed, uRef, p);
      const GreedyResult got = gpu::greedyRegister(exec, moving, fixed, uGpu, p);
      BOOST_TEST_CONTEXT(toString(step) << " " << toString(s)) {
        BOOST_TEST(got.iterations == want.iterations);
        BOOST_TEST(got.refused == want.refused);
        BOOST_TEST(maxDiff(uGpu.data, uRef.data) <= kFieldTol, maxDiff(uGpu.data, uRef.data));
        BOOST_TEST(std::fabs(got.scales.back().rmseEnd - want.scales.back().rmseEnd) <= 1e-4 * want.scales.front().rmseStart);
        BOOST_TEST(got.minJacobian > 0.0f);
        for (auto const& it : got.history) BOOST_TEST(it.minJacobian > 0.0f);
      }
    }
}

// The force masks (the registration's cost-function masks, pipeline/Register.hpp): all ones, as the
// fixed or as the moving mask, gives the unmasked bits on both back ends; a mask with a hole gives the
// reference's field on every step variant and metric, and another field than the unmasked one; the
// same hole as the moving mask (carried by the deformation, sampled at x - u(x)) gives yet another
// field than as the fixed mask (static), on both back ends alike.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_force_mask_matches_reference, Space, test::ExecutionSpaces) {
  Space exec;
  const int n = 16;
  const HostImage fixed = blobs(n, n, n), moving = blobs(n, n, n, 1.2);
  HostImage ones("ones", fixed.geometry), hole("hole", fixed.geometry);
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        ones.data(z, y, x) = 1.0f;
        hole.data(z, y, x) = (x >= 4 && x < 10 && y >= 5 && y < 11 && z >= 3 && z < 9) ? 0.0f : 1.0f;
      }
  for (auto const& [name, p] : metricStepCases()) {
    VectorField<Kokkos::HostSpace> plainRef, onesRef, onesGpu, holeRef, holeGpu, plainGpu;
    ref::greedyRegister(moving, fixed, plainRef, p);
    ref::greedyRegister(moving, fixed, onesRef, p, {}, &ones);
    ref::greedyRegister(moving, fixed, holeRef, p, {}, &hole);
    VectorField<Kokkos::HostSpace> movingOnesRef, movingHoleRef, movingOnesGpu, movingHoleGpu;
    ref::greedyRegister(moving, fixed, movingOnesRef, p, {}, nullptr, &ones);
    ref::greedyRegister(moving, fixed, movingHoleRef, p, {}, nullptr, &hole);
    gpu::GreedyWorkspace<Space>* const noWorkspace = nullptr;
    gpu::greedyRegister(exec, moving, fixed, plainGpu, p);
    gpu::greedyRegister(exec, moving, fixed, onesGpu, p, {}, noWorkspace, &ones);
    gpu::greedyRegister(exec, moving, fixed, holeGpu, p, {}, noWorkspace, &hole);
    gpu::greedyRegister(exec, moving, fixed, movingOnesGpu, p, {}, noWorkspace, nullptr, &ones);
    gpu::greedyRegister(exec, moving, fixed, movingHoleGpu, p, {}, noWorkspace, nullptr, &hole);
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(maxDiff(onesRef.data, plainRef.data) == 0.0);
      BOOST_TEST(maxDiff(onesGpu.data, plainGpu.data) == 0.0);
      BOOST_TEST(maxDiff(movingOnesRef.data, plainRef.data) == 0.0);
      BOOST_TEST(maxDiff(movingOnesGpu.data, plainGpu.data) == 0.0);
      BOOST_TEST(maxDiff(holeGpu.data, holeRef.data) <= kFieldTol, maxDiff(holeGpu.data, holeRef.data));
      BOOST_TEST(maxDiff(movingHoleGpu.data, movingHoleRef.data) <= kFieldTol,
                 maxDiff(movingHoleGpu.data, movingHoleRef.data));
      BOOST_TEST(maxDiff(holeRef.data, plainRef.data) > 1e-3);        // the mask changed the field
      BOOST_TEST(maxDiff(movingHoleRef.data, holeRef.data) > 1e-4);  // the moving hole moved with u
    }
  }
}

// The symmetric mode (core/Greedy.hpp "Symmetric mode"): every Kokkos back end gives the reference's
// field (SSD and LNCC) with det > 0, a field other than the default mode's, and refuses masks as the
// reference does.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_symmetric_matches_reference, Space, test::ExecutionSpaces) {
  Space exec;
  const int n = 16;
  const HostImage fixed = blobs(n, n, n), moving = blobs(n, n, n, 2.0);
  HostImage ones("ones", fixed.geometry);
  Kokkos::deep_copy(ones.data, 1.0f);
  for (GreedyMetric metric : {GreedyMetric::Ssd, GreedyMetric::Lncc}) {
    GreedyParams p = smallParams(GreedySolver::Fft);
    p.metric = metric;
    p.lnccRadius = 1;
    VectorField<Kokkos::HostSpace> plain, ref, got, unused;
    ref::greedyRegister(moving, fixed, plain, p);
    p.symmetric = true;
    const GreedyResult rr = ref::greedyRegister(moving, fixed, ref, p);
    const GreedyResult rg = gpu::greedyRegister(exec, moving, fixed, got, p);
    BOOST_TEST_CONTEXT(toString(metric)) {
      BOOST_TEST(maxDiff(got.data, ref.data) <= kFieldTol, maxDiff(got.data, ref.data));
      BOOST_TEST(maxDiff(ref.data, plain.data) > 1e-3);
      BOOST_TEST(rr.minJacobian > 0.0f);
      BOOST_TEST(rg.minJacobian > 0.0f);
      BOOST_TEST(rr.midpointInverse.unconverged == 0);
      BOOST_TEST(rg.midpointInverse.unconverged == 0);
      BOOST_TEST(rg.scales.back().rmseEnd < 0.5 * rg.scales.front().rmseStart);
      BOOST_TEST(std::fabs(rg.scales.back().rmseEnd - rr.scales.back().rmseEnd) <= 1e-4 * rr.scales.front().rmseStart);
      BOOST_CHECK_THROW(ref::greedyRegister(moving, fixed, unused, p, {}, &ones), InvalidArgument);
      BOOST_CHECK_THROW(gpu::greedyRegister(exec, moving, fixed, unused, p, {}, static_cast<gpu::GreedyWorkspace<Space>*>(nullptr),
                                            nullptr, &ones),
                        InvalidArgument);
    }
  }
}

namespace {
// mean over the voxels at least `margin` from every face of |u_ab(x) + u_ba(x - u_ab(x))|: how far
// Phi_ba(Phi_ab(x)) lands from x (Phi(x) = x - u(x); u_ba trilinear, clamped).
double inverseConsistency(HostField const& uab, HostField const& uba, int margin) {
  const int nz = int(uab.extent(1)), ny = int(uab.extent(2)), nx = int(uab.extent(3));
  double sum = 0.0;
  long count = 0;
  for (int z = margin; z < nz - margin; ++z)
    for (int y = margin; y < ny - margin; ++y)
      for (int x = margin; x < nx - margin; ++x) {
        const double p[3] = {x - uab(0, z, y, x), y - uab(1, z, y, x), z - uab(2, z, y, x)};
        int lo[3], n[3] = {nx, ny, nz};
        double t[3];
        for (int a = 0; a < 3; ++a) {
          const double c = std::clamp(p[a], 0.0, double(n[a] - 1));
          lo[a] = std::min(int(std::floor(c)), n[a] - 2);
          t[a] = c - lo[a];
        }
        double e2 = 0.0;
        for (int c = 0; c < 3; ++c) {
          double v = 0.0;
          for (int k = 0; k < 8; ++k) {
            const int dx = k & 1, dy = (k >> 1) & 1, dz = (k >> 2) & 1;
            v += (dx ? t[0] : 1 - t[0]) * (dy ? t[1] : 1 - t[1]) * (dz ? t[2] : 1 - t[2]) *
                 uba(c, lo[2] + dz, lo[1] + dy, lo[0] + dx);
          }
          e2 += std::pow(uab(c, z, y, x) + v, 2);
        }
        sum += std::sqrt(e2);
        ++count;
      }
  return sum / double(count);
}
}  // namespace

// Exchanging the images exchanges the symmetric mode's two sides, so the map b -> a inverts a -> b
// up to the inversion's residual and the interpolation of the fields: its inverse consistency (mean
// over the interior) is below kSymmetricConsistencyTol voxels, and well below the default mode's.
constexpr double kSymmetricConsistencyTol = 0.02;  // voxels (measured 0.0094; the default mode 3.2)
BOOST_AUTO_TEST_CASE(symmetric_mode_is_inverse_consistent) {
  const int n = 16;
  const HostImage a = blobs(n, n, n), b = blobs(n, n, n, 2.0);
  GreedyParams p = smallParams(GreedySolver::Fft);
  p.metric = GreedyMetric::Lncc;
  p.lnccRadius = 1;
  VectorField<Kokkos::HostSpace> ab, ba, abSym, baSym;
  ref::greedyRegister(b, a, ab, p);
  ref::greedyRegister(a, b, ba, p);
  p.symmetric = true;
  ref::greedyRegister(b, a, abSym, p);
  ref::greedyRegister(a, b, baSym, p);
  const double plain = inverseConsistency(ab.data, ba.data, 2), sym = inverseConsistency(abSym.data, baSym.data, 2);
  BOOST_TEST_MESSAGE("inverse consistency (mean, voxels): default " << plain << ", symmetric " << sym);
  BOOST_TEST(sym <= kSymmetricConsistencyTol);
  BOOST_TEST(sym < 0.5 * plain);
}

namespace {
// Two boxes, the second one at the x = 0 face (values 1 and 0.5 on 0); `moved`: both shifted and
// resized (core/Greedy.hpp "Symmetric mode": a pair whose symmetric map folds though neither side does).
HostImage boxes(int n, bool moved) {
  HostImage img("boxes", grid(n, n, n));
  auto in = [](int v, int lo, int hi) { return v >= lo && v < hi; };
  for (int z = 0; z < n; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        const bool big = moved ? in(x, 6, 22) && in(y, 9, 25) && in(z, 8, 24) : in(x, 8, 24) && in(y, 8, 24) && in(z, 8, 24);
        const bool small = moved ? in(x, 0, 10) && in(y, 4, 12) && in(z, 14, 22) : in(x, 2, 8) && in(y, 10, 20) && in(z, 10, 20);
        img.data(z, y, x) = big ? 1.0f : (small ? 0.5f : 0.0f);
      }
  return img;
}
}  // namespace

// The symmetric map's own fold check (core/Greedy.hpp "Symmetric mode"): on the boxes the sides'
// steps keep det > 0 but their composed map folds after some 60 iterations, so the last scale runs
// again and stops before the iteration that folds it. The result is then the run capped at the
// iterations before (the same bits, by the replay's construction), with det > 0 and the stop named;
// every back end stops at the reference's iteration with its field.
constexpr double kMapFoldFieldTol = 1e-3;  // voxels: ~60 steep SSD steps at alpha 0.001 (measured 1.4e-4)
BOOST_AUTO_TEST_CASE_TEMPLATE(symmetric_map_stops_before_it_folds, Space, test::ExecutionSpaces) {
  Space exec;
  const int n = 32;
  const HostImage fixed = boxes(n, false), moving = boxes(n, true);
  GreedyParams p;
  p.fluid = FluidParams{0.001, 0.0, 0.001};
  p.scales = {1};
  p.iterations = {200};
  p.symmetric = true;
  VectorField<Kokkos::HostSpace> ref, capped, got;
  const GreedyResult rr = ref::greedyRegister(moving, fixed, ref, p);
  BOOST_REQUIRE(rr.scales.size() == 1u);
  const int stopped = rr.scales.back().iterations;  // the refused iteration included
  BOOST_TEST_MESSAGE("the map folds at iteration " << stopped << ", min det " << rr.minJacobian);
  BOOST_TEST((rr.scales.back().stop == GreedyStop::MapFolded));
  BOOST_TEST(rr.folded());
  BOOST_TEST(rr.minJacobian > 0.0f);
  BOOST_REQUIRE(stopped > 1);
  BOOST_TEST(rr.iterations == stopped);  // the first run's iterations dropped
  BOOST_TEST(int(rr.history.size()) == stopped);
  GreedyParams cap = p;
  cap.iterations = {stopped - 1};
  const GreedyResult rc = ref::greedyRegister(moving, fixed, capped, cap);
  BOOST_TEST((rc.scales.back().stop == GreedyStop::IterationCap));
  BOOST_TEST(maxDiff(capped.data, ref.data) == 0.0);
  const GreedyResult rg = gpu::greedyRegister(exec, moving, fixed, got, p);
  BOOST_TEST((rg.scales.back().stop == GreedyStop::MapFolded));
  BOOST_TEST(rg.scales.back().iterations == stopped);
  BOOST_TEST(rg.minJacobian > 0.0f);
  BOOST_TEST(maxDiff(got.data, ref.data) <= kMapFoldFieldTol, maxDiff(got.data, ref.data));
}

// The one-pass step against the three-pass one and the reference on a grid that is not a multiple
// of its tile (32 x 8, chunks of 16 slices) in any direction, with a non-cubic clamp at every face.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_step_variants_agree_on_partial_tiles, Space, test::ExecutionSpaces) {
  Space exec;
  const int nx = 37, ny = 13, nz = 20;
  const HostImage fixed = blobs(nx, ny, nz), moving = blobs(nx, ny, nz, 1.5);
  GreedyParams p = smallParams(GreedySolver::Fft);
  p.scales = {1};
  p.iterations = {12};
  VectorField<Kokkos::HostSpace> uRef, uNaive, uTiled;
  const GreedyResult want = ref::greedyRegister(moving, fixed, uRef, p);
  p.stepVariant = GreedyStepVariant::Naive;
  const GreedyResult naive = gpu::greedyRegister(exec, moving, fixed, uNaive, p);
  p.stepVariant = GreedyStepVariant::ScratchTiled;
  const GreedyResult tiled = gpu::greedyRegister(exec, moving, fixed, uTiled, p);
  BOOST_TEST(tiled.iterations == want.iterations);
  BOOST_TEST(tiled.refused == want.refused);
  BOOST_TEST(tiled.iterations == naive.iterations);
  BOOST_TEST(maxDiff(uTiled.data, uRef.data) <= kFieldTol, maxDiff(uTiled.data, uRef.data));
  BOOST_TEST(maxDiff(uTiled.data, uNaive.data) <= kStepVariantTol, maxDiff(uTiled.data, uNaive.data));
  BOOST_TEST(std::fabs(tiled.scales.back().rmseEnd - naive.scales.back().rmseEnd) <= 1e-6 * naive.scales.front().rmseStart);
  for (std::size_t i = 0; i < tiled.history.size() && i < naive.history.size(); ++i)
    BOOST_TEST(tiled.history[i].minJacobian == naive.history[i].minJacobian, i);
  BOOST_TEST(want.scales.back().rmseEnd < 0.8 * want.scales.back().rmseStart);  // the case moves
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_fold_is_refused_and_the_last_field_kept, Space, test::ExecutionSpaces) {
  // A huge step (4 voxels per iteration on a tiny grid with sharp images) folds h unless refused:
  // every accepted field must have det > 0, and a refusal must be reported as such.
  Space exec;
  const SharpCase sharp;
  HostImage const &fixed = sharp.fixed, &moving = sharp.moving;
  GreedyParams p = sharp.params;
  VectorField<Kokkos::HostSpace> uRef;
  const GreedyResult want = ref::greedyRegister(moving, fixed, uRef, p);
  BOOST_TEST(want.refused > 0);
  BOOST_TEST(want.minJacobian > 0.0f);
  for (GreedyStepVariant step : {GreedyStepVariant::Naive, GreedyStepVariant::ScratchTiled}) {
    p.stepVariant = step;
    VectorField<Kokkos::HostSpace> uGpu;
    const GreedyResult got = gpu::greedyRegister(exec, moving, fixed, uGpu, p);
    BOOST_TEST_CONTEXT(toString(step)) {
      BOOST_TEST(got.refused > 0);
      BOOST_TEST(got.minJacobian > 0.0f);
      for (auto const& it : got.history)
        if (it.step > 0.0f) BOOST_TEST(it.minJacobian > 0.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_refusals, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  const HostImage a = blobs(12, 12, 12), b = blobs(12, 12, 14);
  VectorField<Kokkos::HostSpace> u;
  GreedyParams p;
  p.scales = {1};
  p.iterations = {2};
  test::expectThrowWith<InvalidArgument>([&] { gpu::greedyRegister(exec, a, b, u, p); }, {"different grids"});
  p.scales = {5, 1};
  p.iterations = {2, 2};
  test::expectThrowWith<InvalidArgument>([&] { gpu::greedyRegister(exec, a, a, u, p); }, {"does not divide"});
  gpu::Field<Mem> f("f", 3, 12, 12, 13);
  auto d = test::toSpace<Space>(a);
  test::expectThrowWith<InvalidArgument>([&] { gpu::greedyForce(exec, d, d, f); }, {"grid"});
  gpu::Field<Mem> v("v", 3, 12, 12, 12);
  test::expectThrowWith<InvalidArgument>([&] { gpu::greedyCompose(exec, v, v, 1.0f, v); }, {"overlaps"});
}

// Speculative blocks (gpu/greedy/Greedy.hpp): the registration with blocks of 2, 3 and 5 iterations
// per read-back gives the bits of one read-back per iteration (u, every record but its seconds, the
// stops) on every back end: both step variants and metrics (ScratchTiled SSD keeps the next force
// from the step), masks and a warm SOR; blocks with a fold refusal (the sharp case above) or zero
// velocity (identical images) go back to their start and replay one iteration at a time.
BOOST_AUTO_TEST_CASE_TEMPLATE(speculative_blocks_change_no_bit, Space, test::ExecutionSpaces) {
  Space exec;
  const int n = 16;
  const HostImage fixed = blobs(n, n, n), moving = blobs(n, n, n, 1.2);
  HostImage hole("hole", fixed.geometry);
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) hole.data(z, y, x) = (x >= 4 && x < 10 && y >= 5 && y < 11) ? 0.0f : 1.0f;
  const SharpCase sharpCase;
  struct Case {
    std::string name;
    GreedyParams p;
    HostImage const *m, *f, *mask;
  };
  std::vector<Case> cases;
  for (auto const& [name, p] : metricStepCases()) cases.push_back({name, p, &moving, &fixed, nullptr});
  GreedyParams sor = smallParams(GreedySolver::HybridSor);
  cases.push_back({"hybrid-sor, masked", sor, &moving, &fixed, &hole});
  GreedyParams sharp = sharpCase.params;
  for (GreedyStepVariant step : {GreedyStepVariant::Naive, GreedyStepVariant::ScratchTiled}) {
    sharp.stepVariant = step;
    cases.push_back({std::string("folds ") + toString(step), sharp, &sharpCase.moving, &sharpCase.fixed, nullptr});
  }
  cases.push_back({"zero velocity", smallParams(GreedySolver::Fft), &fixed, &fixed, nullptr});
  for (Case const& c : cases) {
    gpu::GreedyWorkspace<Space> one;
    one.speculation = 0;
    VectorField<Kokkos::HostSpace> uOne;
    const GreedyResult want = gpu::greedyRegister(exec, *c.m, *c.f, uOne, c.p, {}, &one, c.mask);
    for (int block : {2, 3, 5}) {
      gpu::GreedyWorkspace<Space> ws;
      ws.speculation = block;
      VectorField<Kokkos::HostSpace> u;
      const GreedyResult got = gpu::greedyRegister(exec, *c.m, *c.f, u, c.p, {}, &ws, c.mask);
      BOOST_TEST_CONTEXT(c.name << ", blocks of " << block) {
        BOOST_TEST(ws.reg->speculation() == block);
        BOOST_TEST(maxDiff(u.data, uOne.data) == 0.0);
        BOOST_TEST(got.iterations == want.iterations);
        BOOST_TEST(got.refused == want.refused);
        BOOST_TEST(got.minJacobian == want.minJacobian);
        BOOST_TEST_REQUIRE(got.history.size() == want.history.size());
        for (std::size_t i = 0; i < got.history.size(); ++i) {
          BOOST_TEST(got.history[i].rmse == want.history[i].rmse, i);
          BOOST_TEST(got.history[i].minJacobian == want.history[i].minJacobian, i);
          BOOST_TEST(got.history[i].step == want.history[i].step, i);
          BOOST_TEST(got.history[i].refused == want.history[i].refused, i);
        }
        BOOST_TEST_REQUIRE(got.scales.size() == want.scales.size());
        for (std::size_t s = 0; s < got.scales.size(); ++s) {
          BOOST_TEST(got.scales[s].iterations == want.scales[s].iterations, s);
          BOOST_TEST(int(got.scales[s].stop) == int(want.scales[s].stop), s);
        }
      }
    }
    // The cases exercise what they are named for.
    if (c.name.rfind("folds", 0) == 0) BOOST_TEST(want.refused > 0, c.name);
    if (c.name == "zero velocity") BOOST_TEST(int(want.scales.front().stop) == int(GreedyStop::ZeroVelocity));
  }
}

// Recorded blocks (gpu/greedy/Greedy.hpp; a CUDA graph per scale where the back end records, else the
// blocks enqueued as they come): the bits of one read-back per iteration for both metrics and step
// variants, with the workspace kept for a second pair and for a masked pair after an unmasked one
// (each scale recorded again); blocks of 4 over scales of 10 and 12 iterations.
BOOST_AUTO_TEST_CASE_TEMPLATE(recorded_blocks_change_no_bit, Space, test::ExecutionSpaces) {
  Space exec;
  const int n = 16;
  const HostImage fixed = blobs(n, n, n), moving = blobs(n, n, n, 1.2), other = blobs(n, n, n, -0.8);
  HostImage hole("hole", fixed.geometry);
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) hole.data(z, y, x) = (x >= 4 && x < 10 && y >= 5 && y < 11) ? 0.0f : 1.0f;
  for (auto const& c : metricStepCases()) {
    GreedyParams p = c.second;
    p.iterations = {10, 12};
    gpu::GreedyWorkspace<Space> one, rec;
    rec.speculation = 4;
    rec.recording = true;
    auto same = [&](HostImage const& m, HostImage const* mask, const char* what) {
      VectorField<Kokkos::HostSpace> uOne, uRec;
      const GreedyResult want = gpu::greedyRegister(exec, m, fixed, uOne, p, {}, &one, mask);
      const GreedyResult got = gpu::greedyRegister(exec, m, fixed, uRec, p, {}, &rec, mask);
      BOOST_TEST_CONTEXT(c.first << ", " << what) {
        BOOST_TEST(rec.reg->recording());
        // Recorded where the back end records (the blocks from iteration 5 of each scale), never elsewhere.
        if constexpr (gpu::GreedyRegistration<Space>::recordingSupported())
          BOOST_TEST(got.recordedBlocks > 0);
        else
          BOOST_TEST(got.recordedBlocks == 0);
        BOOST_TEST(want.recordedBlocks == 0);
        BOOST_TEST(maxDiff(uRec.data, uOne.data) == 0.0);
        BOOST_TEST(got.iterations == want.iterations);
        BOOST_TEST_REQUIRE(got.history.size() == want.history.size());
        for (std::size_t i = 0; i < got.history.size(); ++i) {
          BOOST_TEST(got.history[i].rmse == want.history[i].rmse, i);
          BOOST_TEST(got.history[i].minJacobian == want.history[i].minJacobian, i);
        }
      }
    };
    same(moving, nullptr, "first pair");
    same(other, nullptr, "second pair, kept workspace");
    same(moving, &hole, "masked pair");
  }
  // Fold refusals between recorded blocks (the sharp case of kokkos_fold_is_refused_...): a block that is
  // not accepted replays one step at a time and the scale records again.
  const SharpCase sharpCase;
  GreedyParams sharp = sharpCase.params;
  HostImage const &sharpFixed = sharpCase.fixed, &sharpMoving = sharpCase.moving;
  for (GreedyStepVariant step : {GreedyStepVariant::Naive, GreedyStepVariant::ScratchTiled}) {
    sharp.stepVariant = step;
    gpu::GreedyWorkspace<Space> rec;
    rec.speculation = 2;
    rec.recording = true;
    VectorField<Kokkos::HostSpace> uOne, uRec;
    const GreedyResult want = gpu::greedyRegister(exec, sharpMoving, sharpFixed, uOne, sharp);
    const GreedyResult got = gpu::greedyRegister(exec, sharpMoving, sharpFixed, uRec, sharp, {}, &rec);
    BOOST_TEST_CONTEXT("folds, " << toString(step)) {
      BOOST_TEST(want.refused > 0);
      BOOST_TEST(got.refused == want.refused);
      BOOST_TEST(got.iterations == want.iterations);
      BOOST_TEST(maxDiff(uRec.data, uOne.data) == 0.0);
    }
  }
}
