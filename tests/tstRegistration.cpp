// Kokkos unbiased fluid registration (gpu/registration/Registration.hpp) against the CPU reference
// (reference_cpu/Registration.hpp) on every enabled execution space, kernel by kernel (force and
// energy for each variant and for several tiles and z chunks, smoothing, rate, update, warp,
// Jacobian), plus whole registrations (same decisions as the reference, monotone energy,
// det J > 0, zero velocity), launch shapes and bad inputs.
#define BOOST_TEST_MODULE Registration
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "TestUtils.hpp"
#include "core/Registration.hpp"
#include "gpu/registration/Registration.hpp"
#include "gpu/registration/detail/Force.hpp"
#include "reference_cpu/Registration.hpp"

using namespace kortex;
namespace ri = kortex::gpu::registration_detail;

namespace {

// ---- tolerances --------------------------------------------------------------------------------

// Kokkos force (float W from float G, float log and 1/J, float trilinear sample) vs the double
// reference, relative to the peak |f|: measured <= 9e-7 on these problems (Serial); a wrong
// neighbour, boundary term, sign or lambda factor changes f by >= 1e-2 of its peak.
constexpr double kForceTol = 1e-5;
// E_data and E_reg: float per-voxel terms (rounding ~1e-7 relative each, not systematic) summed
// in double; the reference's terms are double. Measured <= 1.6e-7.
constexpr double kEnergyTol = 1e-5;
// det J: float cofactor expansion of det(I - G) with |G| < 0.5, absolute error a few float ulps
// (measured <= 3.6e-7).
constexpr double kJacobianTol = 2e-6;
// Variants and tiles against each other: the same float operations per voxel (only FMA
// contraction may differ between inlining contexts on a GPU), energies summed in other orders.
constexpr double kVariantTol = 1e-6;
// Smoothing: float taps (normalised in double, rounded) and float sums over <= 2r + 1 = 9 taps
// per pass vs double; relative to the peak of the field (measured <= 4e-7).
constexpr double kSmoothTol = 2e-6;
// Rate v - G v: float products of O(1) terms vs double, relative to the peak |rate| (measured
// <= 9e-8).
constexpr double kRateTol = 1e-6;
// u + dt rate: two float roundings (or one FMA) vs double rounded once: <= 1.5 ulp of
// |u'| < 4 (2.4e-7 each).
constexpr double kUpdateTol = 4.8e-7;
// Warp: float trilinear interpolation (7 lerps) of values in [0, 1] vs double (measured
// <= 2.1e-7).
constexpr double kWarpTol = 1e-6;
// Whole registration, final field: every accepted step is the same (same decisions checked
// separately); the float force, smoothing and rate errors above (<= 1e-6 relative per step)
// accumulate over <= 40 steps of <= 2 voxels each (measured <= 1e-6 voxels, 2e-8 relative
// energy on Serial). A single different decision moves the field by >= minStep = 1e-3.
constexpr double kFieldTol = 1e-4;        // voxels
constexpr double kFinalEnergyTol = 1e-5;  // relative

const RegistrationVariant kVariants[] = {RegistrationVariant::Naive, RegistrationVariant::Recompute,
                                         RegistrationVariant::Reuse, RegistrationVariant::TwoPass};

using HostField = VectorField<Kokkos::HostSpace>;

// ---- problems ----------------------------------------------------------------------------------

// Smooth random image in about [0, 1]: a sum of three plane waves with random directions,
// wavelengths of 6 to 20 voxels and phases.
HostImage smoothImage(Geometry const& g, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> k(-0.6, 0.6), ph(0.0, 6.283185307179586);
  double kk[3][3], p[3];
  for (int w = 0; w < 3; ++w) {
    for (int a = 0; a < 3; ++a) kk[w][a] = k(rng);
    p[w] = ph(rng);
  }
  HostImage img("kortex::test::image", g);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        double s = 0.5;
        for (int w = 0; w < 3; ++w)
          s += 0.16 * std::sin(kk[w][0] * x + kk[w][1] * y + kk[w][2] * z + p[w]);
        img.data(z, y, x) = static_cast<float>(s);
      }
  return img;
}

// Smooth random displacement: per component a plane wave of amplitude `amp` (gradient entries
// <= 0.5 amp) plus a constant `shift` (moves sample points beyond the border: clamp paths).
HostField smoothField(Geometry const& g, unsigned seed, double amp, double shift) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> k(-0.5, 0.5), ph(0.0, 6.283185307179586);
  HostField u("kortex::test::u", g);
  for (int c = 0; c < 3; ++c) {
    const double kx = k(rng), ky = k(rng), kz = k(rng), p = ph(rng);
    for (Index z = 0; z < g.nz(); ++z)
      for (Index y = 0; y < g.ny(); ++y)
        for (Index x = 0; x < g.nx(); ++x)
          u.data(c, z, y, x) = static_cast<float>(shift * (c == 0 ? 1.0 : -0.5) +
                                                  amp * std::sin(kx * x + ky * y + kz * z + p));
  }
  return u;
}

struct Problem {
  std::string name;
  HostImage moving, fixed;
  HostField u;
};

std::vector<Problem> problems() {
  std::vector<Problem> ps;
  struct S {
    Index nx, ny, nz;
    unsigned seed;
    double amp, shift;
  };
  // Extents that are multiples of no tile extent; one at the minimum extent (4) where the
  // 2-voxel apron is wider than half the volume; one with sample points beyond the border.
  const S sizes[] = {{13, 11, 9, 1, 0.6, 0.0},
                     {24, 20, 17, 2, 0.8, 0.0},
                     {4, 4, 4, 3, 0.3, 0.0},
                     {13, 11, 9, 4, 0.5, 1.7}};
  for (auto const& s : sizes) {
    const Geometry g = Geometry::make3D(s.nx, s.ny, s.nz);
    Problem p{std::to_string(s.nx) + "x" + std::to_string(s.ny) + "x" + std::to_string(s.nz) +
                  " seed " + std::to_string(s.seed),
              smoothImage(g, 100 + s.seed), smoothImage(g, 200 + s.seed),
              smoothField(g, 300 + s.seed, s.amp, s.shift)};
    ps.push_back(p);
  }
  return ps;
}

// ---- copies and norms
// ----------------------------------------------------------------------------

template <class Space>
using DField = gpu::Field<typename Space::memory_space>;
template <class Space>
using DImage = ImageView<typename Space::memory_space>;

// Host field -> Field in Space's memory (images: test::toSpace).
template <class Space>
DField<Space> toDevice(HostField const& h) {
  DField<Space> d(std::string("kortex::test::field"), 3, h.data.extent(1), h.data.extent(2),
                  h.data.extent(3));
  Kokkos::deep_copy(d, h.data);
  return d;
}

// A NaN-poisoned displacement field in Space's memory on the grid of g.
template <class Space>
DField<Space> poisonedField(Geometry const& g) {
  return test::poisoned(DField<Space>(std::string("kortex::test::out"), 3, g.nz(), g.ny(), g.nx()));
}

std::int64_t countNonFinite(const float* p, std::size_t n) {
  std::int64_t k = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) ++k;
  return k;
}

// max |a - b| / max |ref| over all values (max |a - b| when the reference is zero); inf where
// `a` holds a non-finite value.
double relError(const float* a, const float* ref, std::size_t n) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num = std::max(num, std::abs(double(a[i]) - double(ref[i])));
    den = std::max(den, std::abs(double(ref[i])));
  }
  return den > 0.0 ? num / den : num;
}

double relError(HostField const& a, HostField const& ref) {
  return relError(a.data.data(), ref.data.data(), ref.data.span());
}

double maxAbs(HostField const& a, HostField const& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.data.span(); ++i) {
    const double d = std::abs(double(a.data.data()[i]) - double(b.data.data()[i]));
    if (!std::isfinite(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

double relDiff(double a, double b) {
  if (a == b) return 0.0;
  return std::abs(a - b) / std::max(std::abs(b), 1e-300);
}

void checkEnergy(RegistrationEnergy const& got, RegistrationEnergy const& ref, double tol) {
  BOOST_TEST(relDiff(got.data, ref.data) <= tol, "E_data " << got.data << " vs " << ref.data);
  BOOST_TEST(relDiff(got.reg, ref.reg) <= tol, "E_reg " << got.reg << " vs " << ref.reg);
  BOOST_TEST(relDiff(got.total, ref.total) <= tol, "E " << got.total << " vs " << ref.total);
  BOOST_TEST(std::abs(double(got.minJacobian) - double(ref.minJacobian)) <= kJacobianTol,
             "min J " << got.minJacobian << " vs " << ref.minJacobian);
}

RegistrationParams paramsFor(RegistrationVariant v, double lambda) {
  RegistrationParams p;
  p.variant = v;
  p.lambda = lambda;
  return p;
}

// Force on `Space` with the entry point (default tile), NaN-poisoned output.
template <class Space>
RegistrationEnergy kokkosForce(Problem const& p, RegistrationParams const& params, HostField& f) {
  using Mem = typename Space::memory_space;
  Space exec;
  const auto dm = test::toSpace<Space>(p.moving, "kortex::test::moving");
  const auto df = test::toSpace<Space>(p.fixed, "kortex::test::fixed");
  const auto du = toDevice<Space>(p.u);
  auto dout = poisonedField<Space>(p.u.geometry);
  const RegistrationEnergy e =
      gpu::registrationForce(exec, ConstImageView<Mem>(dm), ConstImageView<Mem>(df),
                             gpu::ConstField<Mem>(du), dout, params);
  f = test::toHost<HostField>(dout, p.u.geometry);
  return e;
}

// Force on `Space` with an explicit tile and chunk (scratch variants).
template <class Space>
RegistrationEnergy kokkosForceTile(Problem const& p, RegistrationVariant v, double lambda,
                                   ri::ForceTile tile, HostField& f,
                                   ri::ForceLaunchInfo* used = nullptr) {
  using Mem = typename Space::memory_space;
  Space exec;
  const auto dm = test::toSpace<Space>(p.moving, "kortex::test::moving");
  const auto df = test::toSpace<Space>(p.fixed, "kortex::test::fixed");
  const auto du = toDevice<Space>(p.u);
  auto dout = poisonedField<Space>(p.u.geometry);
  const Geometry& g = p.u.geometry;
  const ri::Extents e{int(g.nx()), int(g.ny()), int(g.nz())};
  const ri::ForceLaunchInfo info = ri::forceLaunchInfo(exec, e, v, tile);
  if (used) *used = info;
  const RegistrationEnergy en =
      ri::computeForce(exec, ri::ForceViews<Mem>{ri::buildSamples(exec, ConstImageView<Mem>(dm)), df, du, dout}, e,
                       lambda, info);
  f = test::toHost<HostField>(dout, g);
  return en;
}

RegistrationEnergy referenceForce(Problem const& p, double lambda, HostField& f) {
  f = HostField("kortex::test::refForce", p.u.geometry);
  return ref::registrationForce(p.moving.data, p.fixed.data, p.u.data, f.data, lambda);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The data force's image gradient (core/Registration.hpp "Interpolation"): exact on a linear
// ramp away from the clamped faces, continuous across cell faces, and clamped at the border.

BOOST_AUTO_TEST_CASE(smooth_gradient_exact_on_ramps_and_continuous) {
  const int nz = 7, ny = 8, nx = 9;
  Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace> ramp("ramp", nz, ny, nx), rough("rough", nz, ny, nx);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) {
        ramp(z, y, x) = 0.25f * float(x) - 0.5f * float(y) + 0.125f * float(z);
        rough(z, y, x) = U(rng);
      }
  const auto rampS = ri::buildSamples(Kokkos::DefaultHostExecutionSpace(), ConstImageView<Kokkos::HostSpace>(ramp));
  const auto roughS = ri::buildSamples(Kokkos::DefaultHostExecutionSpace(), ConstImageView<Kokkos::HostSpace>(rough));
  Kokkos::fence();
  float g[3];
  // Interior points (every corner's neighbours inside): value and gradient of the ramp exactly
  // (dyadic coefficients and points: no rounding).
  for (float p : {1.0f, 1.25f, 2.5f, 4.75f}) {
    const float v = regSampleSmoothGradient(rampS, p + 1.0f, p, p * 0.5f + 1.0f, g);
    BOOST_TEST(v == 0.25f * (p + 1.0f) - 0.5f * p + 0.125f * (p * 0.5f + 1.0f));
    BOOST_TEST(g[0] == 0.25f);
    BOOST_TEST(g[1] == -0.5f);
    BOOST_TEST(g[2] == 0.125f);
  }
  // Border: one-sided halves of the clamp rule, (T(1) - T(0)) / 2 at voxel 0.
  regSampleSmoothGradient(rampS, 0.0f, 3.0f, 3.0f, g);
  BOOST_TEST(g[0] == 0.125f);
  // Continuity across the face x = 4 of a random image: the exact gradient of the interpolant
  // jumps there (by the change of the cell's x-difference), the smooth one moves by O(h).
  const float h = 1e-3f;
  float gl[3], gr[3], el[3], er[3];
  regSampleSmoothGradient(roughS, 4.0f - h, 3.3f, 2.6f, gl);
  regSampleSmoothGradient(roughS, 4.0f + h, 3.3f, 2.6f, gr);
  regSampleTrilinear(rough, 4.0f - h, 3.3f, 2.6f, el);
  regSampleTrilinear(rough, 4.0f + h, 3.3f, 2.6f, er);
  BOOST_TEST_REQUIRE(std::abs(el[0] - er[0]) > 0.05f);  // this image has a kink there
  // |D T| <= 1/2 and neighbouring D T differ by <= 1: the interpolant moves <= 2h over 2h.
  for (int a = 0; a < 3; ++a) BOOST_TEST(std::abs(gl[a] - gr[a]) <= 4.0f * h);
}

// ---------------------------------------------------------------------------------------------
// Force and energy: every variant vs the reference.

BOOST_AUTO_TEST_CASE_TEMPLATE(force_matches_reference, Space, test::ExecutionSpaces) {
  for (auto const& p : problems())
    for (double lambda : {0.0, 0.5}) {
      HostField fRef;
      const RegistrationEnergy eRef = referenceForce(p, lambda, fRef);
      BOOST_REQUIRE_MESSAGE(eRef.minJacobian > 0.2f, "test field must not be near a fold");
      for (auto v : kVariants) {
        BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << p.name << " lambda " << lambda) {
          HostField f;
          const RegistrationEnergy e = kokkosForce<Space>(p, paramsFor(v, lambda), f);
          BOOST_TEST(countNonFinite(f.data.data(), f.data.span()) == 0,
                     "force voxels left unwritten (NaN poison) or non-finite");
          const double err = relError(f, fRef);
          BOOST_TEST_MESSAGE("force error vs reference " << err);
          BOOST_TEST(err <= kForceTol);
          BOOST_TEST_MESSAGE("energy errors " << relDiff(e.data, eRef.data) << " "
                                              << relDiff(e.reg, eRef.reg) << " min J "
                                              << std::abs(e.minJacobian - eRef.minJacobian));
          checkEnergy(e, eRef, kEnergyTol);
        }
      }
    }
}

// The regulariser alone must be present with lambda: f(lambda) - f(0) is lambda f_reg, and it is
// not zero on these fields (guards against a variant that drops the regulariser consistently
// with a reference that did the same).
BOOST_AUTO_TEST_CASE_TEMPLATE(regulariser_force_is_nonzero, Space, test::ExecutionSpaces) {
  const Problem p = problems()[0];
  for (auto v : kVariants) {
    BOOST_TEST_CONTEXT(Space::name() << " " << v) {
      HostField f0, f1;
      kokkosForce<Space>(p, paramsFor(v, 0.0), f0);
      const RegistrationEnergy e1 = kokkosForce<Space>(p, paramsFor(v, 1.0), f1);
      BOOST_TEST(maxAbs(f0, f1) > 1e-2);
      BOOST_TEST(e1.reg > 0.0);
    }
  }
}

// Tiles and z chunks of the scratch variants (partial tiles, chunks that do not divide nz,
// chunk 1, whole columns) against Naive.
BOOST_AUTO_TEST_CASE_TEMPLATE(tiles_and_chunks_agree, Space, test::ExecutionSpaces) {
  const ri::ForceTile tiles[] = {{1, 1, 1},  {5, 3, 2},   {7, 4, 3},
                                 {32, 2, 1}, {8, 8, 100}, {3, 5, 0}};
  for (auto const& p : problems()) {
    const double lambda = 0.5;
    HostField fNaive;
    const RegistrationEnergy eNaive =
        kokkosForce<Space>(p, paramsFor(RegistrationVariant::Naive, lambda), fNaive);
    for (auto v : {RegistrationVariant::Recompute, RegistrationVariant::Reuse})
      for (auto const& t : tiles) {
        BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << p.name << " tile " << t.x << "x"
                                         << t.y << " chunk " << t.chunk) {
          HostField f;
          ri::ForceLaunchInfo info;
          const RegistrationEnergy e = kokkosForceTile<Space>(p, v, lambda, t, f, &info);
          BOOST_TEST(info.tileX == t.x);
          BOOST_TEST(info.tileY == t.y);
          BOOST_TEST(info.chunk ==
                     (t.chunk > 0 ? std::min<int>(t.chunk, int(p.u.geometry.nz())) : info.chunk));
          BOOST_TEST(relError(f, fNaive) <= kVariantTol);
          checkEnergy(e, eNaive, kVariantTol);
        }
      }
  }
}

// The force at the iteration's candidate (ForceViews::rate): every variant, tiled and not, gives the
// candidate u + dt * rate in uOut and the force and energy there, as the update followed by the force on
// the updated field (Recompute forms the candidate while loading u, the others run the update first).
BOOST_AUTO_TEST_CASE_TEMPLATE(force_at_candidate_equals_update_then_force, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  for (auto const& p : problems()) {
    const Geometry& g = p.u.geometry;
    const ri::Extents e{int(g.nx()), int(g.ny()), int(g.nz())};
    const HostField rate = smoothField(g, 91, 1.0, 0.2);
    const auto samples = ri::buildSamples(exec, ConstImageView<Mem>(test::toSpace<Space>(p.moving, "kortex::test::moving")));
    const auto df = test::toSpace<Space>(p.fixed, "kortex::test::fixed");
    const auto du = toDevice<Space>(p.u);
    const auto dr = toDevice<Space>(rate);
    const float dt = 0.3f;
    auto updated = poisonedField<Space>(g);
    gpu::applyUpdate(exec, gpu::ConstField<Mem>(du), gpu::ConstField<Mem>(dr), dt, updated);
    const HostField uRef = test::toHost<HostField>(updated, g);
    for (auto v : kVariants)
      for (ri::ForceTile t : {ri::ForceTile{}, ri::ForceTile{5, 3, 2}}) {
        BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << p.name << " tile " << t.x << "x" << t.y) {
          const ri::ForceLaunchInfo info = ri::forceLaunchInfo(exec, e, v, t);
          auto fRefD = poisonedField<Space>(g);
          ri::ForceViews<Mem> plain{samples, df, updated, fRefD};
          if (v == RegistrationVariant::TwoPass)
            plain.stress = gpu::Field<Mem>("kortex::test::stress", ri::kStressComponents, g.nz(), g.ny(), g.nx());
          const RegistrationEnergy eRef = ri::computeForce(exec, plain, e, 0.5, info);
          auto fD = poisonedField<Space>(g);
          auto uOut = poisonedField<Space>(g);
          ri::ForceViews<Mem> cand = plain;
          cand.u = du;
          cand.f = fD;
          cand.rate = dr;
          cand.dt = dt;
          cand.uOut = uOut;
          const RegistrationEnergy eCand = ri::computeForce(exec, cand, e, 0.5, info);
          BOOST_TEST(maxAbs(test::toHost<HostField>(uOut, g), uRef) <= kUpdateTol);
          BOOST_TEST(relError(test::toHost<HostField>(fD, g), test::toHost<HostField>(fRefD, g)) <= kVariantTol);
          checkEnergy(eCand, eRef, kVariantTol);
        }
      }
  }
}

// A folded field: min J <= 0 reported, E_reg and E infinite, the force finite.
BOOST_AUTO_TEST_CASE_TEMPLATE(folded_field_energy_is_infinite, Space, test::ExecutionSpaces) {
  Problem p = problems()[0];
  // u_x = 1.5 x near the centre: D_x u_x = 1.5 there, so J = 1 - 1.5 < 0.
  for (Index x = 4; x < 9; ++x) p.u.data(0, 4, 5, x) = static_cast<float>(1.5 * x);
  HostField fRef;
  const RegistrationEnergy eRef = referenceForce(p, 0.5, fRef);
  BOOST_REQUIRE(eRef.folded());
  for (auto v : kVariants) {
    BOOST_TEST_CONTEXT(Space::name() << " " << v) {
      HostField f;
      const RegistrationEnergy e = kokkosForce<Space>(p, paramsFor(v, 0.5), f);
      BOOST_TEST(e.folded());
      BOOST_TEST(std::isinf(e.total));
      BOOST_TEST(std::isinf(e.reg));
      BOOST_TEST(std::abs(double(e.minJacobian) - double(eRef.minJacobian)) <= kJacobianTol);
      BOOST_TEST(relDiff(e.data, eRef.data) <= kEnergyTol);
      BOOST_TEST(countNonFinite(f.data.data(), f.data.span()) == 0);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Element-wise kernels.

BOOST_AUTO_TEST_CASE_TEMPLATE(smoothing_matches_reference, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  for (auto const& p : problems())
    for (float sigma : {0.4f, 1.0f, 2.5f}) {
      BOOST_TEST_CONTEXT(Space::name() << " " << p.name << " sigma " << sigma) {
        const Geometry& g = p.u.geometry;
        HostField refOut("kortex::test::refSmooth", g);
        ref::gaussianSmooth(p.u.data, refOut.data, sigma);
        const auto din = toDevice<Space>(p.u);
        auto dout = poisonedField<Space>(g);
        auto dtmp = poisonedField<Space>(g);
        gpu::gaussianSmooth(exec, gpu::ConstField<Mem>(din), dout, dtmp, sigma);
        const HostField out = test::toHost<HostField>(dout, g);
        BOOST_TEST_MESSAGE("smoothing error " << relError(out, refOut));
        BOOST_TEST(relError(out, refOut) <= kSmoothTol);
      }
    }
}

// Zero boundary (spec): a constant field c comes out as c S(x) S(y) S(z), S(p) the sum of the
// taps that land inside the grid; c itself wherever every tap lands inside.
BOOST_AUTO_TEST_CASE_TEMPLATE(smoothing_constant_field_zero_boundary, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  const Geometry g = Geometry::make3D(15, 11, 9);
  const float sigma = 1.0f;
  const int r = smoothingRadius(sigma);  // 3: the grid has an interior
  std::vector<double> w(2 * r + 1);
  double sum = 0.0;
  for (int k = -r; k <= r; ++k) sum += (w[k + r] = std::exp(-k * k / (2.0 * sigma * sigma)));
  auto inside = [&](Index p, Index n) {
    double s = 0.0;
    for (int k = -r; k <= r; ++k)
      if (p + k >= 0 && p + k < n) s += w[k + r] / sum;
    return s;
  };
  HostField c("kortex::test::constant", g);
  Kokkos::deep_copy(c.data, 0.75f);
  const auto din = toDevice<Space>(c);
  auto dout = poisonedField<Space>(g);
  auto dtmp = poisonedField<Space>(g);
  gpu::gaussianSmooth(exec, gpu::ConstField<Mem>(din), dout, dtmp, sigma);
  const HostField out = test::toHost<HostField>(dout, g);
  double worst = 0.0, worstInterior = 0.0;
  for (int comp = 0; comp < 3; ++comp)
    for (Index z = 0; z < g.nz(); ++z)
      for (Index y = 0; y < g.ny(); ++y)
        for (Index x = 0; x < g.nx(); ++x) {
          const double e =
              std::abs(out.data(comp, z, y, x) - 0.75 * inside(x, g.nx()) * inside(y, g.ny()) * inside(z, g.nz()));
          worst = std::max(worst, e);
          const bool interior = x >= r && x < g.nx() - r && y >= r && y < g.ny() - r && z >= r && z < g.nz() - r;
          if (interior) worstInterior = std::max(worstInterior, std::abs(out.data(comp, z, y, x) - 0.75));
        }
  // Float taps and sums over <= 7 taps, three passes: ~3 x 8 roundings of values <= 0.75.
  BOOST_TEST(worst <= 3 * 8 * 0.75 * 6e-8);
  BOOST_TEST(worstInterior <= 3 * 8 * 0.75 * 6e-8);
}

// The compile-time-radius smoothing kernels (radius <= kMaxFixedSmoothRadius) add the same taps in the
// same order as the run-time-radius ones: the same bits, on extents below, at and above one run.
BOOST_AUTO_TEST_CASE_TEMPLATE(smoothing_fixed_radius_kernels_equal_run_time_loops, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  std::vector<std::pair<std::string, HostField>> fields;
  for (auto const& p : problems()) fields.emplace_back(p.name, p.u);
  // Many x tiles, and tiles mostly outside the grid in y and z.
  const Geometry wide = Geometry::make3D(6000, 3, 2);
  fields.emplace_back("6000x3x2", smoothField(wide, 17, 0.7, 0.0));
  for (auto const& [name, u] : fields)
    for (float sigma : {0.3f, 1.0f, 2.0f, 2.6f}) {
      BOOST_TEST_CONTEXT(Space::name() << " " << name << " sigma " << sigma) {
        const ri::GaussianTaps taps = ri::gaussianTaps(sigma);
        BOOST_TEST_REQUIRE(taps.radius <= ri::kMaxFixedSmoothRadius);
        const Geometry& g = u.geometry;
        const auto din = toDevice<Space>(u);
        auto fixedOut = poisonedField<Space>(g), runOut = poisonedField<Space>(g), tmp = poisonedField<Space>(g);
        ri::smooth(exec, gpu::ConstField<Mem>(din), fixedOut, tmp, taps);
        ri::smooth(exec, gpu::ConstField<Mem>(din), runOut, tmp, taps, true);
        const HostField a = test::toHost<HostField>(fixedOut, g), b = test::toHost<HostField>(runOut, g);
        std::size_t differing = 0;
        for (std::size_t i = 0; i < a.data.size(); ++i)
          if (std::memcmp(a.data.data() + i, b.data.data() + i, sizeof(float)) != 0) ++differing;
        BOOST_TEST(differing == 0u);
      }
    }
}

// gpu::reduceVoxels' device form, InOrderTiles (teams of consecutive items), visits every item exactly once
// whatever the team size and however many items the last team has; and reduceVoxels itself (the host
// RangePolicy here). On Cuda the same functor runs with kReduceTeamSize threads (every Cuda test above).
struct CountItems {
  using value_type = std::int64_t;
  Kokkos::View<int*, Kokkos::HostSpace> hits;
  KOKKOS_INLINE_FUNCTION void init(value_type& s) const { s = 0; }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    d += s;
  }
  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type& s) const {  // run on the host only (HostSpace view)
    hits(i) += 1;
    s += i;
  }
};

BOOST_AUTO_TEST_CASE(in_order_tiles_visit_every_item_once) {
  using Exec = Kokkos::DefaultHostExecutionSpace;
  Exec exec;
  for (int n : {1, 3, 4, 5, 1023, 1024, 1025, 4097}) {
    for (int teamSize : {1, 2}) {
      if (teamSize > Kokkos::TeamPolicy<Exec>(exec, 1, 1).team_size_max(CountItems{}, Kokkos::ParallelReduceTag())) continue;
      BOOST_TEST_CONTEXT("n " << n << " team size " << teamSize) {
        CountItems f{Kokkos::View<int*, Kokkos::HostSpace>("kortex::test::hits", n)};
        const int tile = teamSize * gpu::kReduceItemsPerThread;
        std::int64_t sum = -1;
        Kokkos::parallel_reduce(Kokkos::TeamPolicy<Exec>(exec, (n + tile - 1) / tile, teamSize),
                                gpu::InOrderTiles<Exec, CountItems>{f, n}, sum);
        BOOST_TEST(sum == std::int64_t(n) * (n - 1) / 2);
        int wrong = 0;
        for (int i = 0; i < n; ++i) wrong += f.hits(i) != 1;
        BOOST_TEST(wrong == 0);
        std::int64_t viaHelper = -1;
        gpu::reduceVoxels("kortex::test::reduceVoxels", exec, n, CountItems{f.hits}, viaHelper);
        BOOST_TEST(viaHelper == sum);
      }
    }
  }
}

// The iteration's fused velocity and rate (x-y pass, then the z pass and the rate in one kernel, v never
// stored) give the bits of the smoothing followed by the rate kernel, with the rate written over the force
// as FluidRegistration::run does; radius 9 (sigma 3) exercises the unfused fallback. Runs of 16 along z:
// one field of 37 planes (two whole runs and a partial one).
BOOST_AUTO_TEST_CASE_TEMPLATE(smooth_rate_fused_equals_smoothing_then_rate, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  using CF = gpu::ConstField<Mem>;
  Space exec;
  std::vector<std::pair<HostField, HostField>> cases;  // (u, force)
  for (auto const& p : problems()) cases.emplace_back(p.u, smoothField(p.u.geometry, 41, 2.0, 0.1));
  const Geometry deep = Geometry::make3D(21, 9, 37);
  cases.emplace_back(smoothField(deep, 42, 0.8, 0.0), smoothField(deep, 43, 2.0, -0.2));
  for (auto const& [u, f] : cases)
    for (float sigma : {0.3f, 1.0f, 2.0f, 2.6f, 3.0f}) {
      const Geometry& g = u.geometry;
      BOOST_TEST_CONTEXT(Space::name() << " " << g.nx() << "x" << g.ny() << "x" << g.nz() << " sigma " << sigma) {
        const ri::GaussianTaps taps = ri::gaussianTaps(sigma);
        const ri::Extents e{int(g.nx()), int(g.ny()), int(g.nz())};
        const auto du = toDevice<Space>(u);
        const auto df = toDevice<Space>(f);
        auto v = poisonedField<Space>(g), tmp = poisonedField<Space>(g), rate = poisonedField<Space>(g);
        ri::smooth(exec, CF(df), v, tmp, taps);
        const double mSeparate = ri::rate(exec, CF(du), CF(v), rate, e);
        const HostField a = test::toHost<HostField>(rate, g);
        // The shipped run length and the one the benchmark compares it with (runs of 8).
        auto check = [&](auto run) {
          constexpr int N = decltype(run)::value;
          BOOST_TEST_CONTEXT("runs of " << N) {
            auto fused = toDevice<Space>(f);  // the rate written over the force
            auto v2 = poisonedField<Space>(g), tmp2 = poisonedField<Space>(g);
            const double mFused = ri::smoothRate<Space, N>(exec, CF(fused), CF(du), v2, fused, tmp2, taps, e);
            const HostField b = test::toHost<HostField>(fused, g);
            std::size_t differing = 0;
            for (std::size_t i = 0; i < a.data.size(); ++i)
              if (std::memcmp(a.data.data() + i, b.data.data() + i, sizeof(float)) != 0) ++differing;
            BOOST_TEST(differing == 0u);
            BOOST_TEST(mFused == mSeparate);
            BOOST_TEST(mFused > 0.0);
          }
        };
        check(std::integral_constant<int, ri::kSmoothRateRun>{});
        check(std::integral_constant<int, 8>{});
      }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rate_matches_reference, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  for (auto const& p : problems()) {
    BOOST_TEST_CONTEXT(Space::name() << " " << p.name) {
      const Geometry& g = p.u.geometry;
      const HostField vel = smoothField(g, 77, 1.0, 0.3);
      HostField refRate("kortex::test::refRate", g);
      const double mRef = ref::updateRate(p.u.data, vel.data, refRate.data);
      const auto du = toDevice<Space>(p.u);
      const auto dv = toDevice<Space>(vel);
      auto dr = poisonedField<Space>(g);
      const double m =
          gpu::updateRate(exec, gpu::ConstField<Mem>(du), gpu::ConstField<Mem>(dv), dr);
      const HostField r = test::toHost<HostField>(dr, g);
      BOOST_TEST_MESSAGE("rate error " << relError(r, refRate) << " max " << relDiff(m, mRef));
      BOOST_TEST(relError(r, refRate) <= kRateTol);
      BOOST_TEST(relDiff(m, mRef) <= kRateTol);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(update_matches_reference, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  // Problem 1 has a multiple of 4 values (the four-at-a-time kernel), problem 0 not (one at a time).
  for (int pi : {0, 1})
  for (float dt : {0.0f, 0.37f, -1.25f}) {
    const Problem p = problems()[pi];
    const Geometry& g = p.u.geometry;
    const HostField rate = smoothField(g, 78, 1.0, 0.2);
    BOOST_TEST_CONTEXT(Space::name() << " " << p.name << " dt " << dt) {
      HostField refOut("kortex::test::refUpdate", g);
      ref::applyUpdate(p.u.data, rate.data, dt, refOut.data);
      const auto du = toDevice<Space>(p.u);
      const auto dr = toDevice<Space>(rate);
      auto dout = poisonedField<Space>(g);
      gpu::applyUpdate(exec, gpu::ConstField<Mem>(du), gpu::ConstField<Mem>(dr), dt, dout);
      const HostField out = test::toHost<HostField>(dout, g);
      BOOST_TEST_MESSAGE("update error " << maxAbs(out, refOut));
      BOOST_TEST(maxAbs(out, refOut) <= kUpdateTol);
      // In place (documented: uOut may be u).
      gpu::applyUpdate(exec, gpu::ConstField<Mem>(du), gpu::ConstField<Mem>(dr), dt, du);
      const HostField inPlace = test::toHost<HostField>(du, g);
      BOOST_TEST(maxAbs(inPlace, out) == 0.0);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(warp_and_jacobian_match_reference, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  for (auto const& p : problems()) {
    BOOST_TEST_CONTEXT(Space::name() << " " << p.name) {
      const Geometry& g = p.u.geometry;
      HostImage refWarp("kortex::test::refWarp", g), refJ("kortex::test::refJ", g);
      ref::warp(p.moving.data, p.u.data, refWarp.data);
      ref::jacobianDeterminant(p.u.data, refJ.data);
      const auto dm = test::toSpace<Space>(p.moving, "kortex::test::moving");
      const auto du = toDevice<Space>(p.u);
      auto dw = test::poisonedImage<Space>(g, "kortex::test::warp");
      auto dj = test::poisonedImage<Space>(g, "kortex::test::jac");
      gpu::warp(exec, ConstImageView<Mem>(dm), gpu::ConstField<Mem>(du), dw);
      gpu::jacobianDeterminant(exec, gpu::ConstField<Mem>(du), dj);
      const HostImage w = test::toHost(dw, g), j = test::toHost(dj, g);
      BOOST_TEST_MESSAGE("warp error " << test::maxAbsDifference(w, refWarp) << " Jacobian error "
                                       << test::maxAbsDifference(j, refJ));
      BOOST_TEST(test::maxAbsDifference(w, refWarp) <= kWarpTol);
      BOOST_TEST(test::maxAbsDifference(j, refJ) <= kJacobianTol);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Whole registrations.

namespace {

// Fixed: a smooth blob; moving: the same blob displaced by a smooth field (about 1.5 voxels).
void blobPair(Index n, HostImage& moving, HostImage& fixed) {
  const Geometry g = Geometry::make3D(n, n, n);
  moving = HostImage("kortex::test::moving", g);
  fixed = HostImage("kortex::test::fixed", g);
  const double c = 0.5 * double(n - 1), r = 0.3 * double(n);
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        auto blob = [&](double px, double py, double pz) {
          const double d2 =
              (px - c) * (px - c) + 0.8 * (py - c) * (py - c) + 1.2 * (pz - c) * (pz - c);
          return std::exp(-d2 / (2.0 * r * r));
        };
        fixed.data(z, y, x) = static_cast<float>(blob(x, y, z));
        const double sx = 1.5 * std::sin(0.3 * y), sy = 1.0 * std::cos(0.25 * z), sz = 0.7;
        moving.data(z, y, x) = static_cast<float>(blob(x + sx, y + sy, z + sz));
      }
}

void checkSameRun(RegistrationResult const& r, RegistrationResult const& ref) {
  BOOST_TEST(r.iterations == ref.iterations);
  BOOST_TEST(r.accepted == ref.accepted);
  BOOST_TEST(r.rejected == ref.rejected);
  BOOST_TEST(toString(r.stop) == toString(ref.stop));
  BOOST_REQUIRE(r.history.size() == ref.history.size());
  for (std::size_t i = 0; i < r.history.size(); ++i) {
    BOOST_TEST_CONTEXT("iteration " << i + 1) {
      BOOST_TEST(r.history[i].iteration == ref.history[i].iteration);
      BOOST_TEST(r.history[i].accepted == ref.history[i].accepted);
      BOOST_TEST(r.history[i].rejected == ref.history[i].rejected);
      BOOST_TEST(r.history[i].step == ref.history[i].step);
    }
  }
  checkEnergy(r.initial, ref.initial, kEnergyTol);
  BOOST_TEST(relDiff(r.final.total, ref.final.total) <= kFinalEnergyTol);
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(fluid_register_matches_reference, Space, test::ExecutionSpaces) {
  HostImage moving, fixed;
  blobPair(14, moving, fixed);
  RegistrationParams base;
  base.lambda = 0.05;
  base.sigma = 1.0f;
  base.iterations = 25;
  // The default first step, and a large one (more rejections and halvings before the steps are
  // accepted with the smaller delta).
  RegistrationParams large = base;
  large.maxStep = 3.0f;
  large.iterations = 20;
  for (RegistrationParams params : {base, large}) {
    HostField uRef("kortex::test::uRef", fixed.geometry);
    const RegistrationResult rRef = ref::fluidRegister(moving, fixed, uRef, params);
    BOOST_TEST_MESSAGE("reference: " << rRef.iterations << " iterations, " << rRef.accepted
                                     << " accepted, " << rRef.rejected << " rejected, E "
                                     << rRef.initial.total << " -> " << rRef.final.total << ", "
                                     << toString(rRef.stop));
    BOOST_REQUIRE(rRef.accepted >= 5);  // the test must exercise real steps
    BOOST_REQUIRE(rRef.final.total < 0.5 * rRef.initial.total);
    if (params.maxStep > 1.0f) BOOST_REQUIRE(rRef.rejected > 0);
    for (auto v : kVariants) {
      BOOST_TEST_CONTEXT(Space::name() << " " << v << " max step " << params.maxStep) {
        params.variant = v;
        HostField u("kortex::test::u", fixed.geometry);
        int calls = 0;
        double last = std::numeric_limits<double>::infinity();
        bool monotone = true;
        const RegistrationResult r = gpu::fluidRegister(Space(), moving, fixed, u, params,
                                                        [&](RegistrationIteration const& it) {
                                                          ++calls;
                                                          if (it.energy.total > last)
                                                            monotone = false;
                                                          last = it.energy.total;
                                                        });
        checkSameRun(r, rRef);
        BOOST_TEST(calls == r.iterations);
        BOOST_TEST(monotone);
        BOOST_TEST(r.final.minJacobian > 0.0f);
        BOOST_TEST(r.seconds >= 0.0);
        BOOST_TEST_MESSAGE("field difference " << maxAbs(u, uRef) << " voxels, final energy "
                                               << relDiff(r.final.total, rRef.final.total));
        BOOST_TEST(maxAbs(u, uRef) <= kFieldTol);
        // The returned field is the one whose energy is reported.
        HostField fTmp("kortex::test::f", fixed.geometry);
        const RegistrationEnergy eU =
            ref::registrationForce(moving.data, fixed.data, u.data, fTmp.data, params.lambda);
        BOOST_TEST(relDiff(r.final.total, eU.total) <= kEnergyTol);
      }
    }
  }
}

// A tolerance large enough to stop after `patience` accepted steps, and an underflow from a
// tiny step budget: same stop reasons and decisions as the reference.
BOOST_AUTO_TEST_CASE_TEMPLATE(stop_reasons_match_reference, Space, test::ExecutionSpaces) {
  HostImage moving, fixed;
  blobPair(10, moving, fixed);
  RegistrationParams conv;
  conv.lambda = 0.1;
  conv.iterations = 40;
  conv.tolerance = 0.5;  // every step counts as "small"
  conv.patience = 3;
  RegistrationParams under = conv;
  under.tolerance = 0.0;
  under.maxStep = 4.0f;  // steps of 4 voxels fold or overshoot ...
  under.minStep = 2.0f;  // ... and only one halving is allowed
  RegistrationParams zero = conv;
  zero.iterations = 0;
  struct Case {
    RegistrationParams params;
    StopReason expected;
  };
  for (auto const& [params, expected] :
       {Case{conv, StopReason::Converged}, Case{under, StopReason::StepUnderflow},
        Case{zero, StopReason::IterationCap}}) {
    HostField uRef("kortex::test::uRef", fixed.geometry);
    const RegistrationResult rRef = ref::fluidRegister(moving, fixed, uRef, params);
    BOOST_TEST_MESSAGE("reference: " << rRef.iterations << " iterations, " << rRef.accepted
                                     << " accepted, " << rRef.rejected << " rejected, "
                                     << toString(rRef.stop));
    BOOST_REQUIRE(toString(rRef.stop) == toString(expected));  // the case exercises its stop
    for (auto v : kVariants) {
      BOOST_TEST_CONTEXT(Space::name() << " " << v << " stop " << toString(rRef.stop)) {
        RegistrationParams p = params;
        p.variant = v;
        HostField u("kortex::test::u", fixed.geometry);
        const RegistrationResult r = gpu::fluidRegister(Space(), moving, fixed, u, p);
        checkSameRun(r, rRef);
        BOOST_TEST(maxAbs(u, uRef) <= kFieldTol);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(identical_images_stop_with_zero_velocity, Space,
                              test::ExecutionSpaces) {
  const Geometry g = Geometry::make3D(8, 7, 6);
  const HostImage img = smoothImage(g, 5);
  HostField u("kortex::test::u", g);
  RegistrationParams p;
  p.iterations = 10;
  const RegistrationResult r = gpu::fluidRegister(Space(), img, img, u, p);
  BOOST_TEST(toString(r.stop) == toString(StopReason::ZeroVelocity));
  BOOST_TEST(r.iterations == 1);
  BOOST_TEST(r.accepted == 0);
  BOOST_TEST(r.final.total == 0.0);
  HostField zero("kortex::test::zero", g);
  BOOST_TEST(maxAbs(u, zero) == 0.0);
}

// ---------------------------------------------------------------------------------------------
// Launch shapes.

BOOST_AUTO_TEST_CASE_TEMPLATE(launch_info_fits_scratch, Space, test::ExecutionSpaces) {
  Space exec;
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<Space>>(0);
  for (auto v : {RegistrationVariant::Recompute, RegistrationVariant::Reuse}) {
    const ri::ForceLaunchInfo i = ri::forceLaunchInfo(exec, Index(240), Index(240), Index(240), v);
    BOOST_TEST_MESSAGE(Space::name() << ": " << ri::describe(i));
    BOOST_TEST(i.scratchBytes <= maxBytes);
    BOOST_TEST(i.scratchBytes > 0u);
    BOOST_TEST(i.teamSize >= 1);
    BOOST_TEST(i.tileX == 32);  // x is never shrunk while y can be
    BOOST_TEST(i.chunk >= 1);
    BOOST_TEST(i.teams == std::int64_t((240 + i.tileX - 1) / i.tileX) *
                              ((240 + i.tileY - 1) / i.tileY) * ((240 + i.chunk - 1) / i.chunk));
    // A tile whose scratch cannot fit is refused.
    BOOST_CHECK_THROW(ri::forceLaunchInfo(exec, Index(240), Index(240), Index(240), v,
                                          ri::ForceTile{512, 512, 0}),
                      Unsupported);
  }
  const ri::ForceLaunchInfo n =
      ri::forceLaunchInfo(exec, Index(13), Index(11), Index(9), RegistrationVariant::Naive);
  BOOST_TEST(n.teams == 13 * 11 * 9);
  BOOST_TEST(n.scratchBytes == 0u);
  // The Reuse scratch of a 32x8 tile: 3 u slices (36x12), W columns x/y on the 1-apron (2
  // slices), z column on the tile (3 slices).
  BOOST_TEST(ri::ReuseForceFunctor<Space>::scratchFloats(32, 8) == std::size_t(9744));
  BOOST_TEST(ri::RecomputeForceFunctor<Space>::scratchFloats(32, 8) == std::size_t(6480));
}

// ---------------------------------------------------------------------------------------------
// Bad inputs: one clear exception, nothing run.

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_inputs_throw, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  const Problem p = problems()[0];
  const Geometry& g = p.u.geometry;
  const auto dm = test::toSpace<Space>(p.moving, "kortex::test::moving");
  const auto df = test::toSpace<Space>(p.fixed, "kortex::test::fixed");
  const auto du = toDevice<Space>(p.u);
  auto dout = poisonedField<Space>(g);
  const RegistrationParams params;
  // Mismatched image extents.
  DImage<Space> small(std::string("kortex::test::small"), 9, 11, 12);
  BOOST_CHECK_THROW(
      gpu::registrationForce(exec, ConstImageView<Mem>(small), ConstImageView<Mem>(df),
                             gpu::ConstField<Mem>(du), dout, params),
      InvalidArgument);
  // u with the wrong extents.
  DField<Space> wrongU(std::string("kortex::test::wrongU"), 3, 9, 11, 12);
  BOOST_CHECK_THROW(gpu::registrationForce(exec, ConstImageView<Mem>(dm), ConstImageView<Mem>(df),
                                           gpu::ConstField<Mem>(wrongU), dout, params),
                    InvalidArgument);
  // Output aliasing the input field.
  BOOST_CHECK_THROW(gpu::registrationForce(exec, ConstImageView<Mem>(dm), ConstImageView<Mem>(df),
                                           gpu::ConstField<Mem>(du), du, params),
                    InvalidArgument);
  // Too small a grid (extent 3 < kMinExtent).
  DImage<Space> thin(std::string("kortex::test::thin"), 3, 11, 13);
  DField<Space> thinU(std::string("kortex::test::thinU"), 3, 3, 11, 13);
  DField<Space> thinF(std::string("kortex::test::thinF"), 3, 3, 11, 13);
  BOOST_CHECK_THROW(
      gpu::registrationForce(exec, ConstImageView<Mem>(thin), ConstImageView<Mem>(thin),
                             gpu::ConstField<Mem>(thinU), thinF, params),
      InvalidArgument);
  // Smoothing: output aliasing the temporary, bad sigma.
  BOOST_CHECK_THROW(gpu::gaussianSmooth(exec, gpu::ConstField<Mem>(du), dout, dout, 1.0f),
                    InvalidArgument);
  auto dtmp = poisonedField<Space>(g);
  BOOST_CHECK_THROW(gpu::gaussianSmooth(exec, gpu::ConstField<Mem>(du), dout, dtmp, 20.0f),
                    InvalidArgument);
  BOOST_CHECK_THROW(gpu::gaussianSmooth(exec, gpu::ConstField<Mem>(du), dout, dtmp, 0.0f),
                    InvalidArgument);
  // Rate into its own input.
  BOOST_CHECK_THROW(gpu::updateRate(exec, gpu::ConstField<Mem>(du), gpu::ConstField<Mem>(dout), du),
                    InvalidArgument);
  // Warp / Jacobian with mismatched outputs.
  DImage<Space> wrongOut(std::string("kortex::test::wrongOut"), 9, 11, 12);
  BOOST_CHECK_THROW(gpu::warp(exec, ConstImageView<Mem>(dm), gpu::ConstField<Mem>(du), wrongOut),
                    InvalidArgument);
  BOOST_CHECK_THROW(gpu::jacobianDeterminant(exec, gpu::ConstField<Mem>(du), wrongOut),
                    InvalidArgument);

  // Whole registration: folded initial field, different grids (parameters and NaN voxels:
  // tstPipeline).
  HostField u0("kortex::test::u0", g);
  HostField folded("kortex::test::folded", g);
  for (Index x = 0; x < g.nx(); ++x) folded.data(0, 4, 5, x) = static_cast<float>(1.5 * x);
  BOOST_CHECK_THROW(gpu::fluidRegister(exec, p.moving, p.fixed, folded, params), InvalidArgument);
  const HostImage other = smoothImage(Geometry::make3D(12, 11, 9), 9);
  BOOST_CHECK_THROW(gpu::fluidRegister(exec, other, p.fixed, u0, params), InvalidArgument);
  RegistrationParams bad;
  bad.sigma = -1.0f;
  BOOST_CHECK_THROW(gpu::fluidRegister(exec, p.moving, p.fixed, u0, bad), InvalidArgument);
  // Nothing was written into u0.
  HostField zero("kortex::test::zero", g);
  BOOST_TEST(maxAbs(u0, zero) == 0.0);
}
