// The LNCC and MI metrics of greedy registration (core/Greedy.hpp, "Metrics"): the CPU reference's
// forces (reference_cpu/Greedy.hpp) against a central finite difference of their energies, the Kokkos
// forces (gpu/greedy/Lncc.hpp, Mi.hpp) against the reference on every enabled execution space, the
// invariance to an affine intensity change (LNCC) and to a change of contrast (MI), the stepper's rule
// (the force from W every iteration), whole registrations and an atlas with the metric, and its
// parameters.
#define BOOST_TEST_MODULE Lncc
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <vector>

#include "FieldTestUtils.hpp"
#include "TestUtils.hpp"
#include "core/Atlas.hpp"
#include "core/Greedy.hpp"
#include "core/Phantom.hpp"
#include "gpu/atlas/Atlas.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "gpu/greedy/GreedyStepper.hpp"
#include "gpu/greedy/Lncc.hpp"
#include "gpu/greedy/Mi.hpp"
#include "reference_cpu/Atlas.hpp"
#include "reference_cpu/Greedy.hpp"
#include "reference_cpu/ImageOps.hpp"

using namespace kortex;
using HostField = ref::HostField;
using test::maxAbs;
using test::maxDiff;
using test::toHostField;

namespace {

// ---- tolerances ----------------------------------------------------------------------------------
// Kokkos vs reference force: both sum the windows in double from the same float images; the
// Kokkos coefficients are summed in another order (tile x, y, then slices vs whole-axis passes)
// and G (a difference of sums of size ~N |a| |F|) is rounded to float before the float product
// with the gradient: a few float ulps of the peak |F|.
constexpr double kForceTol = 1e-5;   // relative to max |F|
constexpr double kEnergyTol = 1e-9;  // relative: double sums of the same terms in another order
// MI, Kokkos vs reference: the Kokkos histogram rounds each beta3 to 2^-30 (a sparsely filled bin's log
// ratio moves by ~1e-6), then h and F in double, rounded to float once.
constexpr double kMiForceTol = 1e-5;  // relative to max |F|
constexpr double kMiEnergyTol = 1e-7;  // absolute (MI ~ 1)
// MI registrations, Kokkos vs reference: the histogram is global, so its fixed-point rounding moves every
// voxel's force a little, and 30 steps amplify it (measured 0.0018 voxel; LNCC's are local: kFieldTol).
constexpr double kMiFieldTol = 0.01;  // voxels
// Finite difference of the reference energy (double) with step h = 1e-3 along a smooth
// perturbation: O(h^2) truncation plus the float rounding of the perturbed images (1e-7 / h).
constexpr double kFiniteDifferenceTol = 1e-3;  // relative to the directional derivative
// Affine intensity change of one image (a W + b, a > 0): cc and the force are invariant (G scales
// by 1/a, grad W by a); float rounding of the changed images and of G only.
constexpr double kInvarianceTol = 1e-4;  // relative to max |F|
// Whole LNCC registrations, Kokkos vs reference (float FFT vs double FFT, float force vs double),
// 18 steps of <= 1 voxel: measured 6.6e-7 voxel on Serial; the SSD bound of tstGreedy.
constexpr double kFieldTol = 1e-4;  // voxels
// The atlas with LNCC, Kokkos vs reference: tstAtlas's bounds (measured 1.8e-7 on the template
// on Serial).
constexpr double kAtlasTemplateTol = 5e-6;  // image units
constexpr double kAtlasFieldTol = 1e-4;     // voxels

Geometry grid(int nx, int ny, int nz) { return Geometry::make3D(nx, ny, nz); }

// A smooth analytic image with structure in every direction, values in about [0, 1].
double blobValue(double x, double y, double z, int nx, int ny, int nz) {
  const double r2 = std::pow((x - 0.5 * nx) / (0.3 * nx), 2) + std::pow((y - 0.5 * ny) / (0.25 * ny), 2) +
                    std::pow((z - 0.5 * nz) / (0.3 * nz), 2);
  const double d2 = std::pow((x - 0.65 * nx) / (0.12 * nx), 2) + std::pow((y - 0.5 * ny) / (0.12 * ny), 2) +
                    std::pow((z - 0.5 * nz) / (0.15 * nz), 2);
  return 0.6 * std::exp(-r2) + 0.3 * std::exp(-d2) + 0.05 * std::sin(0.4 * x + 0.3 * y + 0.2 * z);
}

HostImage blobs(int nx, int ny, int nz, double shift = 0.0, double scale = 1.0, double offset = 0.0) {
  HostImage img("blobs", grid(nx, ny, nz));
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) img.data(z, y, x) = float(scale * blobValue(x - shift, y, z, nx, ny, nz) + offset);
  return img;
}

// The paper's operator suits these small grids (tstGreedy's smallParams).
GreedyParams lnccParams(int radius) {
  GreedyParams p;
  p.fluid = FluidParams{};
  p.scales = {2, 1};
  p.iterations = {8, 10};
  p.metric = GreedyMetric::Lncc;
  p.lnccRadius = radius;
  return p;
}

double dot(HostField const& a, HostField const& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a.data()[i]) * b.data()[i];
  return s;
}

// A smooth displacement d of the sample points and the first-order change of W along it, dW = grad W . d
// (the forces' clamped central differences): the finite-difference tests move W along dW.
struct Direction {
  HostField d;
  ImageView<Kokkos::HostSpace> dW;
};
Direction direction(HostImage const& moving) {
  const int nz = int(moving.data.extent(0)), ny = int(moving.data.extent(1)), nx = int(moving.data.extent(2));
  Direction r{HostField("d", 3, nz, ny, nx), ImageView<Kokkos::HostSpace>("dW", nz, ny, nx)};
  auto& d = r.d;
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) {
        d(0, z, y, x) = float(0.8 * std::sin(0.3 * x + 0.2 * y));
        d(1, z, y, x) = float(0.6 * std::cos(0.25 * y - 0.1 * z));
        d(2, z, y, x) = float(0.5 * std::sin(0.2 * z + 0.3 * x + 1.0));
      }
  auto W = moving.data;
  auto c = [](int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); };
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x)
        r.dW(z, y, x) = float(0.5 * (W(z, y, c(x + 1, nx)) - W(z, y, c(x - 1, nx))) * d(0, z, y, x) +
                              0.5 * (W(z, c(y + 1, ny), x) - W(z, c(y - 1, ny), x)) * d(1, z, y, x) +
                              0.5 * (W(c(z + 1, nz), y, x) - W(c(z - 1, nz), y, x)) * d(2, z, y, x));
  return r;
}

// W + t dW.
HostImage movedAlong(HostImage const& moving, Direction const& dir, double t) {
  HostImage w("w", moving.geometry);
  for (std::size_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = float(moving.data.data()[i] + t * dir.dW.data()[i]);
  return w;
}

}  // namespace

// ---- the reference and the spec -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(params) {
  GreedyParams p;
  BOOST_TEST((p.metric == GreedyMetric::Ssd));
  BOOST_TEST(p.lnccRadius == 2);
  BOOST_TEST((parseGreedyMetric("lncc") == GreedyMetric::Lncc));
  BOOST_TEST(std::string(toString(GreedyMetric::Ssd)) == "ssd");
  test::expectThrowWith<InvalidArgument>([] { parseGreedyMetric("ncc"); }, {"unknown greedy metric 'ncc'", "ssd|lncc"});
  for (int r : {0, kMaxLnccRadius + 1}) {
    p.lnccRadius = r;
    test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"LNCC window radius"});
  }
  // The window must fit the coarsest grid: 2R+1 = 5 voxels, the scale-2 grid of 8^3 is 4^3.
  p = lnccParams(2);
  BOOST_CHECK_NO_THROW(p.validateFor(grid(12, 12, 12)));
  test::expectThrowWith<InvalidArgument>([&] { p.validateFor(grid(8, 12, 12)); }, {"LNCC window", "scale-2 grid"});
  // The jobs pad (registration) or clip (atlas) to a grid that holds one window at the coarse scale.
  BOOST_TEST(greedyExtentFor(8, p) == 10);
  BOOST_CHECK_NO_THROW(p.validateFor(grid(greedyExtentFor(8, p), 12, 12)));
  p.metric = GreedyMetric::Ssd;  // SSD has no window
  BOOST_CHECK_NO_THROW(p.validateFor(grid(8, 12, 12)));
  BOOST_TEST(greedyExtentFor(8, p) == 8);
}

// K(x, y): the transpose of the clamped box sum counts the offsets that clamp onto y.
BOOST_AUTO_TEST_CASE(transpose_weight_counts_the_clamped_offsets) {
  const int n = 9;
  for (int R : {1, 2, 4})
    for (int x = -2; x < n + 2; ++x)
      for (int y = 0; y < n; ++y) {
        int count = 0;
        if (x >= 0 && x < n)
          for (int o = -R; o <= R; ++o) count += clampIndex(x + o, n) == y ? 1 : 0;
        BOOST_TEST(lnccTransposeWeight(x, y, n, R) == count, "R " << R << " x " << x << " y " << y);
      }
}

// The force is the gradient of E: sum_x F(x) . d(x) = dE/dt for W_t = W + t grad W . d (a
// displacement d of the sample points, to first order), by a central difference of E.
BOOST_AUTO_TEST_CASE(reference_force_is_the_gradient_of_the_energy) {
  const int nx = 14, ny = 12, nz = 10;
  const HostImage fixed = blobs(nx, ny, nz), moving = blobs(nx, ny, nz, 1.3);
  const Direction dir = direction(moving);
  for (int R : {1, 2, 3}) {
    HostField f("f", 3, nz, ny, nx);
    ref::lnccForce(moving.data, fixed.data, R, f);
    const double h = 1e-3;
    auto energyAt = [&](double t) { return ref::lnccEnergy(movedAlong(moving, dir, t).data, fixed.data, R); };
    const double fd = (energyAt(h) - energyAt(-h)) / (2 * h), analytic = dot(f, dir.d);
    BOOST_TEST_MESSAGE("R " << R << ": dE/dt " << fd << ", sum F . d " << analytic);
    BOOST_TEST(std::fabs(analytic) > 1e-2);  // a non-trivial direction
    BOOST_TEST(std::fabs(fd - analytic) <= kFiniteDifferenceTol * std::fabs(analytic), "R " << R);
  }
}

// ---- Kokkos, every execution space ----------------------------------------------------------------

// On a grid that is not a multiple of the 16 x 8 tile, every radius up to the maximum.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_force_matches_reference, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  const int nx = 21, ny = 19, nz = 18;
  const HostImage fixed = blobs(nx, ny, nz), moving = blobs(nx, ny, nz, 1.5);
  auto dFixed = test::toSpace<Space>(fixed), dMoving = test::toSpace<Space>(moving);
  for (int R : {1, 2, 3, kMaxLnccRadius}) {
    HostField want("want", 3, nz, ny, nx);
    const double wantE = ref::lnccEnergy(moving.data, fixed.data, R);
    BOOST_TEST(ref::lnccForce(moving.data, fixed.data, R, want) == wantE);
    gpu::Field<Mem> f("f", 3, nz, ny, nx);
    const double gotE = gpu::lnccForce(exec, dMoving, dFixed, R, f);
    BOOST_TEST_CONTEXT("R " << R) {
      BOOST_TEST(maxAbs(want) > 0.0);
      BOOST_TEST(maxDiff(toHostField(f), want) <= kForceTol * maxAbs(want), maxDiff(toHostField(f), want) / maxAbs(want));
      BOOST_TEST(std::fabs(gotE - wantE) <= kEnergyTol * wantE);
    }
  }
  gpu::Field<Mem> f("f", 3, nz, ny, nx);
  test::expectThrowWith<InvalidArgument>([&] { gpu::lnccForce(exec, dMoving, dFixed, 0, f); }, {"radius 0"});
  gpu::Field<Mem> small("small", 3, nz, ny, nx - 1);
  test::expectThrowWith<InvalidArgument>([&] { gpu::lnccForce(exec, dMoving, dFixed, 2, small); }, {"one grid"});
}

// The variants of each pass give the same terms and force bit for bit (Reuse keeps each source
// slice's 2D sums for the windows that hold it and adds them in Recompute's order), on a grid whose
// depth is not a multiple of the slab; the energy to rounding (its sum runs in another order). A
// Reuse pass runs where its ring fits the back end's scratch (always for R = 1).
// MI (Mattes, core/MutualInformation.hpp): the force is the gradient of MI along a displacement, as
// LNCC's; the fixed image is another contrast of the moving one (bright and dark swapped, folded).
HostImage otherContrast(HostImage const& img) {
  HostImage out("other", img.geometry);
  const float* p = img.data.data();
  const auto [lo, hi] = std::minmax_element(p, p + img.numVoxels());
  for (Index i = 0; i < img.numVoxels(); ++i) {
    const double u = (p[i] - *lo) / double(*hi - *lo);
    out.data.data()[i] = float(0.9 - 0.6 * u + 0.1 * std::sin(5.0 * u));
  }
  return out;
}

BOOST_AUTO_TEST_CASE(reference_mi_force_is_the_gradient_of_mi) {
  const int nx = 14, ny = 12, nz = 10;
  const HostImage moving = blobs(nx, ny, nz, 1.3), fixed = otherContrast(blobs(nx, ny, nz));
  const Direction dir = direction(moving);
  for (int bins : {16, 32}) {
    HostField f("f", 3, nz, ny, nx);
    const double mi = ref::miForce(moving.data, fixed.data, bins, f);
    BOOST_TEST(mi == ref::miEnergy(moving.data, fixed.data, bins));
    const double h = 1e-4;
    auto energyAt = [&](double t) { return ref::miEnergy(movedAlong(moving, dir, t).data, fixed.data, bins); };
    const double fd = (energyAt(h) - energyAt(-h)) / (2 * h), analytic = dot(f, dir.d);
    BOOST_TEST_MESSAGE(bins << " bins: MI " << mi << ", dMI/dt " << fd << ", sum F . d " << analytic);
    BOOST_TEST(std::fabs(analytic) > 1e-4);  // a non-trivial direction
    BOOST_TEST(std::fabs(fd - analytic) <= kFiniteDifferenceTol * std::fabs(analytic), bins << " bins");
  }
  HostField f("f", 3, nz, ny, nx);
  test::expectThrowWith<InvalidArgument>([&] { ref::miForce(moving.data, fixed.data, 4, f); }, {"bins must be in"});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_mi_force_matches_reference, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  const int nx = 21, ny = 19, nz = 18;
  const HostImage moving = blobs(nx, ny, nz, 1.5), fixed = otherContrast(blobs(nx, ny, nz));
  auto dFixed = test::toSpace<Space>(fixed), dMoving = test::toSpace<Space>(moving);
  // 128 bins: the histogram does not fit a device's team scratch and is summed in global memory.
  for (int bins : {8, 32, kMaxMiBins}) {
    HostField want("want", 3, nz, ny, nx);
    const double wantE = ref::miForce(moving.data, fixed.data, bins, want);
    gpu::Field<Mem> f("f", 3, nz, ny, nx), again("again", 3, nz, ny, nx);
    const double gotE = gpu::miForce(exec, dMoving, dFixed, bins, f);
    gpu::miForce(exec, dMoving, dFixed, bins, again);
    BOOST_TEST_CONTEXT(bins << " bins") {
      BOOST_TEST(maxAbs(want) > 0.0);
      BOOST_TEST(maxDiff(toHostField(f), want) <= kMiForceTol * maxAbs(want), maxDiff(toHostField(f), want) / maxAbs(want));
      BOOST_TEST(std::fabs(gotE - wantE) <= kMiEnergyTol);
      BOOST_TEST(maxDiff(toHostField(f), toHostField(again)) == 0.0);  // the same bits run to run
    }
  }
  // MI sees through the contrast: the fixed image's own contrast and the other give forces pointing
  // the same way (their inner product is positive).
  HostField same("same", 3, nz, ny, nx), other("other", 3, nz, ny, nx);
  ref::miForce(moving.data, blobs(nx, ny, nz).data, 32, same);
  ref::miForce(moving.data, fixed.data, 32, other);
  BOOST_TEST(dot(same, other) > 0.0);
  gpu::Field<Mem> small("small", 3, nz, ny, nx - 1);
  test::expectThrowWith<InvalidArgument>([&] { gpu::miForce(exec, dMoving, dFixed, 32, small); }, {"one grid"});
}

// A registration with MI across contrasts: the 3D Shepp-Logan phantom moved by a smooth warp, the fixed
// image the phantom in another contrast (its levels mapped by a non-monotone curve). The reference and
// Kokkos maps raise MI, bring the moving image towards the phantom itself (the RMSE to it falls) and
// agree within kMiFieldTol. Measured (Serial): MI 0.514 -> 0.600 (the truth's 0.673), RMSE 0.1226 ->
// 0.1075, fields 0.0018 voxel apart. (On smooth blobs, without edges, the deformable MI sharpens the
// joint histogram past the true alignment: MI 0.18 -> 0.56 against the truth's 0.19.)
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_registration_with_mi_matches_reference, Space, test::ExecutionSpaces) {
  const Index n = 32;
  const HostImage target = sheppLogan3D(n);
  const auto warp = smoothDisplacement(target.geometry, 1.5, 7);
  HostImage moving("moving", target.geometry);
  ref::warp(target.data, warp.data, moving.data);
  const HostImage fixed = otherContrast(target);
  GreedyParams p = lnccParams(2);
  p.metric = GreedyMetric::Mi;
  p.miBins = 16;
  p.scales = {1};
  p.iterations = {30};
  p.maxStep = 0.5f;
  VectorField<Kokkos::HostSpace> uRef, uGpu;
  const GreedyResult want = ref::greedyRegister(moving, fixed, uRef, p);
  const GreedyResult got = gpu::greedyRegister(Space(), moving, fixed, uGpu, p);
  auto warped = [&](VectorField<Kokkos::HostSpace> const* u) {
    HostImage w("w", fixed.geometry);
    if (u)
      ref::warp(moving.data, u->data, w.data);
    else
      Kokkos::deep_copy(w.data, moving.data);
    return w;
  };
  auto rmseTo = [&](HostImage const& w) {
    double s = 0.0;
    for (Index i = 0; i < w.numVoxels(); ++i) s += std::pow(double(w.data.data()[i]) - target.data.data()[i], 2);
    return std::sqrt(s / double(w.numVoxels()));
  };
  const HostImage w0 = warped(nullptr), wRef = warped(&uRef), wGpu = warped(&uGpu);
  const double miBefore = ref::miEnergy(w0.data, fixed.data, p.miBins), miAfter = ref::miEnergy(wRef.data, fixed.data, p.miBins);
  BOOST_TEST_MESSAGE(Space::name() << ": MI " << miBefore << " -> " << miAfter << " (truth "
                                   << ref::miEnergy(target.data, fixed.data, p.miBins) << "); RMSE to the phantom "
                                   << rmseTo(w0) << " -> " << rmseTo(wRef) << " (reference), " << rmseTo(wGpu)
                                   << " (Kokkos); fields " << maxDiff(uGpu.data, uRef.data) << " voxel apart");
  BOOST_TEST(miAfter > miBefore);
  BOOST_TEST(rmseTo(wRef) < rmseTo(w0));
  BOOST_TEST(rmseTo(wGpu) < rmseTo(w0));
  BOOST_TEST(maxDiff(uGpu.data, uRef.data) <= kMiFieldTol, maxDiff(uGpu.data, uRef.data));
  BOOST_TEST(got.iterations == want.iterations);
  BOOST_TEST(got.minJacobian > 0.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_lncc_variants_agree_bit_for_bit, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  using gpu::LnccVariant;
  Space exec;
  const int nx = 21, ny = 19, nz = 37;
  const auto dFixed = test::toSpace<Space>(blobs(nx, ny, nz)), dMoving = test::toSpace<Space>(blobs(nx, ny, nz, 1.5));
  const bool device = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  const auto one = gpu::lnccVariantsFor<Space>(1);
  BOOST_TEST((one[0] == (device ? LnccVariant::ScratchTiled : LnccVariant::Separable) && one[1] == LnccVariant::Separable));
  const int components = gpu::lnccWorkspaceComponents({LnccVariant::Separable, LnccVariant::Separable});
  BOOST_TEST(components == 14);
  BOOST_TEST(gpu::lnccWorkspaceComponents({LnccVariant::ScratchTiled, LnccVariant::ScratchTiled}) == 9);
  BOOST_TEST(gpu::lnccWorkspaceComponents({LnccVariant::Recompute, LnccVariant::Reuse}) == 4);
  int reuseRuns = 0, separableRuns = 0, scratchTiledRuns = 0;
  for (int R : {1, 2, 3, kMaxLnccRadius}) {
    const auto reuseFits = gpu::lnccReuseFits<Space>(R);
    gpu::LnccTerms<Mem> wantTerms("want_terms", 4, nz, ny, nx), terms("terms", components, nz, ny, nx);
    gpu::Field<Mem> want("want", 3, nz, ny, nx), f("f", 3, nz, ny, nx);
    double wantE = 0.0, e = 0.0;
    gpu::lnccForce(exec, dMoving, dFixed, R, wantTerms, want, {LnccVariant::Recompute, LnccVariant::Recompute}, &wantE);
    const auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), wantTerms);
    for (LnccVariant a : {LnccVariant::Recompute, LnccVariant::Reuse, LnccVariant::Separable, LnccVariant::ScratchTiled})
      for (LnccVariant b : {LnccVariant::Recompute, LnccVariant::Reuse, LnccVariant::Separable, LnccVariant::ScratchTiled}) {
        // Reuse only where its ring fits the back end's scratch.
        if ((a == LnccVariant::Reuse && !reuseFits[0]) || (b == LnccVariant::Reuse && !reuseFits[1])) continue;
        for (int slab : {0, 1, 5, 16})  // 0: the back end's choice; 5: a partial last slab (37 slices)
        BOOST_TEST_CONTEXT("R " << R << ", windows " << gpu::toString(a) << ", transpose " << gpu::toString(b) << ", slab " << slab) {
          gpu::lnccForce(exec, dMoving, dFixed, R, terms, f, {a, b}, &e, slab);
          reuseRuns += (a == LnccVariant::Reuse) + (b == LnccVariant::Reuse);
          separableRuns += (a == LnccVariant::Separable) + (b == LnccVariant::Separable);
          scratchTiledRuns += (a == LnccVariant::ScratchTiled) + (b == LnccVariant::ScratchTiled);
          const auto ht = Kokkos::create_mirror_view_and_copy(
              Kokkos::HostSpace(), Kokkos::subview(terms, Kokkos::make_pair(0, 4), Kokkos::ALL, Kokkos::ALL, Kokkos::ALL));
          double worst = 0.0;
          for (int k = 0; k < 4; ++k)
            for (int z = 0; z < nz; ++z)
              for (int y = 0; y < ny; ++y)
                for (int x = 0; x < nx; ++x) worst = std::max(worst, std::fabs(ht(k, z, y, x) - hw(k, z, y, x)));
          BOOST_TEST(worst == 0.0);
          BOOST_TEST(maxDiff(toHostField(f), toHostField(want)) == 0.0);
          BOOST_TEST(std::fabs(e - wantE) <= kEnergyTol * wantE);
        }
      }
  }
  BOOST_TEST(reuseRuns >= 3);
  BOOST_TEST(separableRuns >= 3);
  BOOST_TEST(scratchTiledRuns >= 3);
  // A workspace of 4 components is refused for Separable.
  gpu::LnccTerms<Mem> small("small", 4, nz, ny, nx);
  gpu::Field<Mem> f("f", 3, nz, ny, nx);
  BOOST_CHECK_THROW(gpu::lnccForce(exec, dMoving, dFixed, 2, small, f, {LnccVariant::Separable, LnccVariant::Reuse}, nullptr),
                    InvalidArgument);
}

// cc is invariant to W -> W + b and the force is too (the window sums of deviations do not see b).
// A scale a W changes B relative to the noise floor e (core/Greedy.hpp), so cc is invariant to it
// only where the windows' variance dwarfs e: checked below on images scaled far above it.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_force_is_invariant_to_an_affine_intensity_change, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  const int nx = 16, ny = 12, nz = 10;
  const HostImage fixed = blobs(nx, ny, nz), moving = blobs(nx, ny, nz, 1.2);
  const HostImage changed = blobs(nx, ny, nz, 1.2, 1.0, 0.7), fixedChanged = blobs(nx, ny, nz, 0.0, 1.0, -0.2);
  gpu::Field<Mem> f("f", 3, nz, ny, nx), g("g", 3, nz, ny, nx), h("h", 3, nz, ny, nx);
  const double e = gpu::lnccForce(exec, test::toSpace<Space>(moving), test::toSpace<Space>(fixed), 2, f);
  const double eMoving = gpu::lnccForce(exec, test::toSpace<Space>(changed), test::toSpace<Space>(fixed), 2, g);
  const HostField a = toHostField(f), b = toHostField(g);
  BOOST_TEST(std::fabs(eMoving - e) <= 1e-5 * e);
  BOOST_TEST(maxDiff(a, b) <= kInvarianceTol * maxAbs(a), maxDiff(a, b) / maxAbs(a));
  // The fixed image's change F + t: A, B, C, F - mF unchanged: G the same.
  const double eFixed = gpu::lnccForce(exec, test::toSpace<Space>(moving), test::toSpace<Space>(fixedChanged), 2, h);
  const HostField c = toHostField(h);
  BOOST_TEST(std::fabs(eFixed - e) <= 1e-5 * e);
  BOOST_TEST(maxDiff(a, c) <= kInvarianceTol * maxAbs(a), maxDiff(a, c) / maxAbs(a));
  // Scales: far above the noise floor the energy is the same (x20 against x40 to a relative 1e-3:
  // the floor's share e / B falls 4x per doubling; measured 1.4e-3 at x10 against x20), while at
  // the noise level (x0.01) the floor lowers it by more than half.
  gpu::Field<Mem> k("k", 3, nz, ny, nx);
  const double e10 = gpu::lnccForce(exec, test::toSpace<Space>(blobs(nx, ny, nz, 1.2, 20.0, 0.0)),
                                    test::toSpace<Space>(blobs(nx, ny, nz, 0.0, 20.0, 0.0)), 2, k);
  const double e20 = gpu::lnccForce(exec, test::toSpace<Space>(blobs(nx, ny, nz, 1.2, 40.0, 0.0)),
                                    test::toSpace<Space>(blobs(nx, ny, nz, 0.0, 40.0, 0.0)), 2, k);
  const double e001 = gpu::lnccForce(exec, test::toSpace<Space>(blobs(nx, ny, nz, 1.2, 0.01, 0.0)),
                                     test::toSpace<Space>(blobs(nx, ny, nz, 0.0, 0.01, 0.0)), 2, k);
  BOOST_TEST(std::fabs(e10 - e20) <= 1e-3 * e20, e10 << " vs " << e20);
  BOOST_TEST(e001 < 0.5 * e20, e001 << " vs " << e20);
  // The SSD force is not invariant (the case can fail): the same change moves it.
  gpu::greedyForce(exec, test::toSpace<Space>(changed), test::toSpace<Space>(fixed), g);
  gpu::greedyForce(exec, test::toSpace<Space>(moving), test::toSpace<Space>(fixed), f);
  BOOST_TEST(maxDiff(toHostField(f), toHostField(g)) > 0.1 * maxAbs(toHostField(f)));
}

// The one-pass step hands back only the SSD force: with LNCC the force comes from W every
// iteration, whatever the step variant.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_stepper_computes_the_lncc_force_from_w, Space, test::ExecutionSpaces) {
  Space exec;
  using Stepper = gpu::GreedyStepper<Space>;
  const GridExtents e{8, 8, 8};
  for (GreedyStepVariant step : {GreedyStepVariant::Naive, GreedyStepVariant::ScratchTiled}) {
    GreedyParams p = lnccParams(2);
    p.stepVariant = step;
    BOOST_TEST(!Stepper(exec, e, p, Stepper::Use::Image).forceFromStep(), toString(step));
    p.metric = GreedyMetric::Ssd;
    BOOST_TEST(Stepper(exec, e, p, Stepper::Use::Image).forceFromStep() == (step == GreedyStepVariant::ScratchTiled),
               toString(step));
  }
}

// A registration of a shifted pair with LNCC: the mismatch falls on both back ends, the fields
// agree, and the step variant does not matter.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_registration_with_lncc_converges_and_matches_reference, Space,
                              test::ExecutionSpaces) {
  Space exec;
  const int n = 16;
  // The moving image also differs by an affine intensity change: LNCC does not see it.
  const HostImage fixed = blobs(n, n, n), moving = blobs(n, n, n, 1.5, 1.8, 0.3);
  GreedyParams p = lnccParams(2);
  VectorField<Kokkos::HostSpace> uRef, uGpu, uNaive;
  const GreedyResult want = ref::greedyRegister(moving, fixed, uRef, p);
  const GreedyResult got = gpu::greedyRegister(exec, moving, fixed, uGpu, p);
  p.stepVariant = GreedyStepVariant::Naive;
  const GreedyResult naive = gpu::greedyRegister(exec, moving, fixed, uNaive, p);
  // Mismatch: the energy of the warped image against the fixed one, before and after.
  auto energyOf = [&](VectorField<Kokkos::HostSpace> const* u) {
    HostImage w("w", fixed.geometry);
    if (u) {
      ref::warp(moving.data, u->data, w.data);
    } else {
      Kokkos::deep_copy(w.data, moving.data);
    }
    return ref::lnccEnergy(w.data, fixed.data, p.lnccRadius) / double(fixed.data.size());
  };
  const double before = energyOf(nullptr), afterRef = energyOf(&uRef), afterGpu = energyOf(&uGpu);
  BOOST_TEST_MESSAGE("mean cc " << before << " -> " << afterRef << " (reference), " << afterGpu << " (Kokkos)");
  BOOST_TEST(afterRef > before + 0.5 * (1.0 - before));  // more than half the way to cc = 1
  BOOST_TEST(afterGpu > before + 0.5 * (1.0 - before));
  BOOST_TEST_MESSAGE("fields: Kokkos vs reference " << maxDiff(uGpu.data, uRef.data) << " voxel");
  BOOST_TEST(got.iterations == want.iterations);
  BOOST_TEST(got.refused == want.refused);
  BOOST_TEST(maxDiff(uGpu.data, uRef.data) <= kFieldTol, maxDiff(uGpu.data, uRef.data));
  BOOST_TEST(maxDiff(uGpu.data, uNaive.data) == 0.0);  // the same passes whatever the variant
  BOOST_TEST(got.minJacobian > 0.0f);
  // The field recovers the shift in the middle of the grid: I0(x - u) = I1(x) for u_x = -1.5.
  BOOST_TEST(std::fabs(uGpu.data(0, n / 2, n / 2, n / 2) + 1.5f) < 0.5f, uGpu.data(0, n / 2, n / 2, n / 2));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_atlas_with_lncc_matches_reference, Space, test::ExecutionSpaces) {
  Space exec;
  const int n = 16;
  const std::vector<HostImage> imgs = {blobs(n, n, n, 1.2), blobs(n, n, n, -1.2, 1.5, 0.1), blobs(n, n, n, 0.6, 0.8),
                                       blobs(n, n, n, -0.6)};
  AtlasParams p;
  p.greedy = lnccParams(2);
  p.greedy.iterations = {5, 8};
  HostImage tRef, tGpu;
  std::vector<VectorField<Kokkos::HostSpace>> fRef, fGpu;
  const AtlasResult want = ref::buildAtlas(imgs, p, tRef, fRef);
  const AtlasResult got = gpu::buildAtlas(exec, imgs, p, tGpu, fGpu);
  BOOST_TEST(got.iterations == want.iterations);
  BOOST_TEST(got.refused == want.refused);
  BOOST_TEST(test::maxAbsDifference(tGpu, tRef) <= kAtlasTemplateTol, test::maxAbsDifference(tGpu, tRef));
  BOOST_TEST_REQUIRE(fGpu.size() == fRef.size());
  double moved = 0.0;
  for (std::size_t i = 0; i < fGpu.size(); ++i) {
    BOOST_TEST(maxDiff(fGpu[i].data, fRef[i].data) <= kAtlasFieldTol, i << ": " << maxDiff(fGpu[i].data, fRef[i].data));
    moved = std::max(moved, test::maxAbs(fRef[i].data));
  }
  BOOST_TEST_MESSAGE("atlas: template " << test::maxAbsDifference(tGpu, tRef) << ", fields (largest " << moved << " voxel)");
  BOOST_TEST(moved > 0.5);  // the subjects moved
  BOOST_TEST(got.minJacobian > 0.0f);
}
