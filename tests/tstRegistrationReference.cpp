// CPU reference of the unbiased fluid registration (reference_cpu/Registration.cpp) against the
// specification in core/Registration.hpp: the force is the exact negative gradient of the energy
// (central finite differences, border voxels included), the building blocks on fields with known
// results (smoothing, rate, update, warp, Jacobian), the iteration loop against a transcription
// of the spec written here again from the public building blocks, the stop reasons, monotone
// energy, det J > 0, recovery of a known smooth deformation, and bad-input handling.
#define BOOST_TEST_MODULE RegistrationReference
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Phantom.hpp"
#include "reference_cpu/Registration.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace kortex;

namespace {

using Field = VectorField<Kokkos::HostSpace>;
using Vec = std::array<double, 3>;

constexpr double kPi = 3.14159265358979323846;
constexpr double kFloatEps = 1.1920929e-7;  // 2^-23, one float ulp at 1.0

// ---- construction helpers -------------------------------------------------------------------

HostImage makeImage(Index n, std::function<double(double, double, double)> const& fn) {
  HostImage img("kortex::test::image", Geometry::make3D(n, n, n));
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) img.data(z, y, x) = static_cast<float>(fn(double(x), double(y), double(z)));
  return img;
}

Field makeField(Geometry const& g, std::function<Vec(double, double, double)> const& fn) {
  Field u("kortex::test::field", g);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const Vec v = fn(double(x), double(y), double(z));
        for (int c = 0; c < 3; ++c) u.data(c, z, y, x) = static_cast<float>(v[c]);
      }
  return u;
}

Field zeroField(Geometry const& g) { return Field("kortex::test::zero", g); }  // Views start at 0

Field copyField(Field const& u) {
  Field c("kortex::test::copy", u.geometry);
  Kokkos::deep_copy(c.data, u.data);
  return c;
}

struct Blob {
  double cx, cy, cz, s, a;
  double operator()(double x, double y, double z) const {
    const double d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy) + (z - cz) * (z - cz);
    return a * std::exp(-d2 / (2.0 * s * s));
  }
};

std::vector<Blob> randomBlobs(SplitMix64& rng, int count, double n, double smin, double smax,
                              double amin, double amax) {
  std::vector<Blob> b;
  for (int k = 0; k < count; ++k)
    b.push_back({rng.uniform() * n, rng.uniform() * n, rng.uniform() * n,
                 smin + (smax - smin) * rng.uniform(), amin + (amax - amin) * rng.uniform()});
  return b;
}

// Smooth random image, a sum of Gaussians scaled to a maximum of 1 (intensities in [0, 1]).
HostImage smoothRandomImage(Index n, std::uint64_t seed) {
  SplitMix64 rng(seed);
  const auto blobs = randomBlobs(rng, 8, double(n), 1.5, 3.5, 0.3, 1.0);
  HostImage img = makeImage(n, [&](double x, double y, double z) {
    double s = 0.0;
    for (auto const& b : blobs) s += b(x, y, z);
    return s;
  });
  float peak = 0.0f;
  for (Index i = 0; i < img.numVoxels(); ++i) peak = std::max(peak, img.data.data()[i]);
  for (Index i = 0; i < img.numVoxels(); ++i) img.data.data()[i] /= peak;
  return img;
}

// Smooth random displacement, |u_c| <= amplitude: per component an offset of random sign plus
// three plane waves (wavelengths 6 to 12 voxels, random directions and phases), so that u is
// rarely near zero (sample points rarely on cell faces), also on the border.
Field smoothRandomField(Geometry const& g, std::uint64_t seed, double amplitude) {
  SplitMix64 rng(seed);
  struct Wave { double k[3], phase; };
  std::array<std::array<Wave, 3>, 3> waves;
  std::array<double, 3> offset;
  for (int c = 0; c < 3; ++c) {
    offset[c] = rng.uniform() < 0.5 ? -0.4 : 0.4;
    for (auto& w : waves[c]) {
      const double len = 6.0 + 6.0 * rng.uniform();
      double d[3], norm = 0.0;
      for (double& di : d) {
        di = rng.uniform() - 0.5;
        norm += di * di;
      }
      for (int a = 0; a < 3; ++a) w.k[a] = 2 * kPi / len * d[a] / std::sqrt(norm);
      w.phase = 2 * kPi * rng.uniform();
    }
  }
  return makeField(g, [&](double x, double y, double z) {
    Vec v;
    for (int c = 0; c < 3; ++c) {
      double s = 0.0;
      for (auto const& w : waves[c]) s += std::cos(w.k[0] * x + w.k[1] * y + w.k[2] * z + w.phase);
      v[c] = amplitude * (offset[c] + 0.6 * s / 3.0);
    }
    return v;
  });
}

double maxAbs(Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> const& f) {
  double m = 0.0;
  for (std::size_t i = 0; i < f.size(); ++i) m = std::max(m, std::abs(double(f.data()[i])));
  return m;
}

float minOf(HostImage const& img) {
  float m = std::numeric_limits<float>::infinity();
  for (Index i = 0; i < img.numVoxels(); ++i) m = std::min(m, img.data.data()[i]);
  return m;
}

bool sameBits(Field const& a, Field const& b) {
  for (std::size_t i = 0; i < a.data.size(); ++i)
    if (a.data.data()[i] != b.data.data()[i]) return false;
  return true;
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool mentions(InvalidArgument const& e, std::string const& what) {
  return std::string(e.what()).find(what) != std::string::npos;
}

}  // namespace

// ---- force = f_data + lambda f_reg, f_reg = -dE_reg/du ----------------------------------------------

// The data force of the spec, brute force: (T(p) - R(x)) times the trilinear interpolant (clamped
// corners) of the clamped central differences of T, at p = fl(x - u(x)).
static double dataForce(HostImage const& T, HostImage const& R, Field const& u, int c, Index x, Index y, Index z) {
  const Index n[3] = {T.geometry.nx(), T.geometry.ny(), T.geometry.nz()};
  const Index v[3] = {x, y, z};
  double p[3];
  for (int a = 0; a < 3; ++a) p[a] = double(static_cast<float>(v[a]) - u.data(a, z, y, x));
  auto at = [&](Index const* k) {
    Index q[3];
    for (int a = 0; a < 3; ++a) q[a] = std::min(std::max(k[a], Index(0)), n[a] - 1);
    return double(T.data(q[2], q[1], q[0]));
  };
  double value = 0.0, grad = 0.0;
  for (int corner = 0; corner < 8; ++corner) {
    Index k[3];
    double w = 1.0;
    for (int a = 0; a < 3; ++a) {
      const double fl = std::min(std::max(std::floor(p[a]), -1.0), double(n[a]));
      const int hi = (corner >> a) & 1;
      k[a] = std::min(std::max(Index(fl) + hi, Index(0)), n[a] - 1);
      const double t = p[a] - std::floor(p[a]);
      w *= hi ? t : 1.0 - t;
    }
    value += w * at(k);
    Index kp[3] = {k[0], k[1], k[2]}, km[3] = {k[0], k[1], k[2]};
    ++kp[c];
    --km[c];
    grad += w * 0.5 * (at(kp) - at(km));
  }
  return (value - double(R.data(z, y, x))) * grad;
}

// Central differences of the regulariser energy along single entries u_c(v) of the field; the
// data force against dataForce above.
//   Step: h = 1e-2 voxel; the perturbed entries are floats, so the quotient divides by the
//   step actually taken, float(u + h) - float(u - h), computed exactly in double.
//   Error budget: the energy is a double sum (~1e2) of double per-voxel terms: cancellation
//   ~1e-14 / 2e-2, negligible. Every J is affine along one entry (det is linear in one row of
//   A), so only Phi leaves a truncation error, lambda h^2/6 |Phi'''| |dJ/du|^3 <~ 1e-5 lambda per
//   voxel of the 7-voxel stencil. The force is rounded to float: 2^-24 |f|. Entries whose sample
//   point lies within 2h of a cell face are skipped (kept from the exact-gradient force; harmless).
// |FD - f| / max|f|: about twice the budget above, and 1e2x below a wrong stencil weight at a
// border voxel (an error of |W| / 2 ~ 1e-2 max|f|).
constexpr double kFdStep = 1e-2;
constexpr double kFdTol = 1e-4;

BOOST_AUTO_TEST_CASE(force_is_data_force_plus_regulariser_gradient) {
  const Index n = 12;
  const HostImage T = smoothRandomImage(n, 11), R = smoothRandomImage(n, 12);
  const Geometry g = T.geometry;
  const Field u0 = smoothRandomField(g, 13, 0.3);
  {
    Kokkos::View<float***, Kokkos::HostSpace> J("J", n, n, n);
    ref::jacobianDeterminant(u0.data, J);
    float mj = 1e9f;
    for (std::size_t i = 0; i < J.size(); ++i) mj = std::min(mj, J.data()[i]);
    BOOST_TEST_MESSAGE("FD field: min det J = " << mj);
    BOOST_TEST(mj > 0.5f);
  }

  // Entries: border-heavy positions from {0, 1, n/2, n-2, n-1}^3 and uniformly random voxels.
  SplitMix64 rng(14);
  const Index special[5] = {0, 1, n / 2, n - 2, n - 1};
  struct Entry { int c; Index x, y, z; };
  std::vector<Entry> entries;
  for (int k = 0; k < 90; ++k)
    entries.push_back({int(rng.next() % 3), special[rng.next() % 5], special[rng.next() % 5],
                       special[rng.next() % 5]});
  for (int c = 0; c < 3; ++c)  // every corner-most and face-most case once per component
    for (Index b : {Index(0), n - 1}) {
      entries.push_back({c, b, n / 2, n / 2});
      entries.push_back({c, n / 2, b, n / 2});
      entries.push_back({c, n / 2, n / 2, b});
      entries.push_back({c, b, b, b});
    }
  for (int k = 0; k < 60; ++k)
    entries.push_back({int(rng.next() % 3), Index(rng.next() % n), Index(rng.next() % n),
                       Index(rng.next() % n)});

  for (double lambda : {0.0, 0.1, 1.0}) {
    Field u = copyField(u0);
    Field f("kortex::test::force", g);
    const RegistrationEnergy e = ref::registrationForce(T.data, R.data, u.data, f.data, lambda);
    const RegistrationEnergy e2 = ref::registrationEnergy(T.data, R.data, u.data, lambda);
    BOOST_TEST(e.total == e2.total);  // the same sums in the same order
    BOOST_TEST(e.total > 0.0);
    const double fmax = maxAbs(f.data);
    BOOST_TEST(fmax > 1e-3);

    double worst = 0.0;
    int checked = 0, skipped = 0, border = 0;
    for (Entry const& q : entries) {
      float& entry = u.data(q.c, q.z, q.y, q.x);
      const float orig = entry;
      const double pos = q.c == 0 ? double(q.x) : (q.c == 1 ? double(q.y) : double(q.z));
      const double p = pos - double(orig);  // the sample coordinate this entry moves
      const double frac = p - std::floor(p);
      if (frac < 2 * kFdStep || frac > 1 - 2 * kFdStep) {
        ++skipped;
        continue;
      }
      const float up = static_cast<float>(double(orig) + kFdStep);
      const float um = static_cast<float>(double(orig) - kFdStep);
      entry = up;
      const double ep = lambda * ref::registrationEnergy(T.data, R.data, u.data, lambda).reg;
      entry = um;
      const double em = lambda * ref::registrationEnergy(T.data, R.data, u.data, lambda).reg;
      entry = orig;
      const double fd = -(ep - em) / (double(up) - double(um)) + dataForce(T, R, u, q.c, q.x, q.y, q.z);
      const double err = std::abs(fd - double(f.data(q.c, q.z, q.y, q.x))) / fmax;
      worst = std::max(worst, err);
      if (err > kFdTol)
        BOOST_ERROR("lambda " << lambda << " component " << q.c << " voxel (" << q.x << "," << q.y
                              << "," << q.z << "): FD " << fd << " force "
                              << f.data(q.c, q.z, q.y, q.x) << " (relative error " << err << ")");
      ++checked;
      const bool onBorder = q.x <= 1 || q.y <= 1 || q.z <= 1 || q.x >= n - 2 || q.y >= n - 2 ||
                            q.z >= n - 2;
      border += onBorder;
    }
    BOOST_TEST_MESSAGE("lambda " << lambda << ": " << checked << " entries (" << border
                                 << " on the two outer layers), " << skipped
                                 << " skipped near cell faces, max |FD - f| / max|f| = " << worst
                                 << ", max|f| = " << fmax);
    BOOST_TEST(checked >= int(entries.size()) * 95 / 100);
    BOOST_TEST(border >= 100);
    BOOST_TEST(worst <= kFdTol);
  }
}

BOOST_AUTO_TEST_CASE(force_zero_at_perfect_match) {
  const HostImage T = smoothRandomImage(9, 3);
  const Field u = zeroField(T.geometry);
  Field f("kortex::test::force", T.geometry);
  Kokkos::deep_copy(f.data, 7.0f);
  const RegistrationEnergy e = ref::registrationForce(T.data, T.data, u.data, f.data, 0.5);
  BOOST_TEST(e.total == 0.0);
  BOOST_TEST(e.minJacobian == 1.0f);
  BOOST_TEST(maxAbs(f.data) == 0.0);
}

BOOST_AUTO_TEST_CASE(energy_of_folded_field_is_infinite) {
  const HostImage T = smoothRandomImage(8, 3);
  // u_x = 2 x: A_00 = 1 - 2 = -1 in the interior, J = -1.
  const Field u = makeField(T.geometry, [](double x, double, double) { return Vec{2 * x, 0, 0}; });
  const RegistrationEnergy e = ref::registrationEnergy(T.data, T.data, u.data, 0.1);
  BOOST_TEST(e.folded());
  BOOST_TEST(e.minJacobian == -1.0f);
  BOOST_TEST(std::isinf(e.total));
  Field f("kortex::test::force", T.geometry);
  ref::registrationForce(T.data, T.data, u.data, f.data, 0.1);
  BOOST_TEST(std::isfinite(maxAbs(f.data)));  // folded voxels carry no stress: finite force
}

// ---- building blocks ------------------------------------------------------------------------------

// Float rounding of a weighted mean of values of magnitude <= 1 (double sums, one rounding).
constexpr double kSmoothTol = 2 * kFloatEps;

// Normalised 1D Gaussian taps w[k + r], k = -r..r, r = smoothingRadius(sigma), in double.
std::vector<double> normalisedTaps(float sigma) {
  const int r = smoothingRadius(sigma);
  std::vector<double> w(2 * r + 1);
  double sum = 0.0;
  for (int k = -r; k <= r; ++k) sum += (w[k + r] = std::exp(-k * k / (2.0 * sigma * sigma)));
  for (double& x : w) x /= sum;
  return w;
}

// Zero boundary: a constant c comes out as c S(x) S(y) S(z), S(p) = the sum of the normalised taps
// that land inside the grid (1 where all of them do).
BOOST_AUTO_TEST_CASE(gaussian_smooth_constant_field_zero_boundary) {
  const Geometry g = Geometry::make3D(9, 7, 6);
  const Field in = makeField(g, [](double, double, double) { return Vec{0.75, -1.5, 3.0}; });
  Field out("kortex::test::out", g);
  for (float sigma : {0.4f, 1.0f, 2.5f}) {  // radius 2, 3, 8: wider than the grid
    const int r = smoothingRadius(sigma);
    const std::vector<double> w = normalisedTaps(sigma);
    auto S = [&](Index p, Index n) {
      double s = 0.0;
      for (int k = -r; k <= r; ++k)
        if (p + k >= 0 && p + k < n) s += w[k + r];
      return s;
    };
    ref::gaussianSmooth(in.data, out.data, sigma);
    double err = 0.0, interior = 0.0;
    for (int c = 0; c < 3; ++c)
      for (Index z = 0; z < g.nz(); ++z)
        for (Index y = 0; y < g.ny(); ++y)
          for (Index x = 0; x < g.nx(); ++x) {
            const double c0 = in.data(c, z, y, x);
            const double e = c0 * S(x, g.nx()) * S(y, g.ny()) * S(z, g.nz());
            err = std::max(err, std::abs(double(out.data(c, z, y, x)) - e) / std::abs(c0));
            if (x >= r && x < g.nx() - r && y >= r && y < g.ny() - r && z >= r && z < g.nz() - r)
              interior = std::max(interior, std::abs(double(out.data(c, z, y, x)) - c0) / std::abs(c0));
          }
    BOOST_TEST(err <= kSmoothTol);
    BOOST_TEST(interior <= kSmoothTol);  // vacuous for radius 3 and 8 on this grid; radius 2 has voxels
  }
}

BOOST_AUTO_TEST_CASE(gaussian_smooth_impulse_response) {
  const Index n = 21, c0 = 10;
  const float sigma = 1.5f;
  const int r = smoothingRadius(sigma);
  BOOST_TEST(r == 5);
  const std::vector<double> w = normalisedTaps(sigma);
  auto g1 = [&](Index d) { return std::abs(d) <= r ? w[d + r] : 0.0; };

  const Geometry g = Geometry::make3D(n, n, n);
  Field in("kortex::test::impulse", g), out("kortex::test::out", g);
  in.data(1, c0, c0, c0) = 1.0f;  // y component: impulse at the centre
  in.data(2, 0, 0, 0) = 1.0f;     // z component: impulse at a corner (zero boundary)
  ref::gaussianSmooth(in.data, out.data, sigma);
  double errCentre = 0.0, sumCentre = 0.0, errX = 0.0, errCorner = 0.0;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const double expect = g1(x - c0) * g1(y - c0) * g1(z - c0);
        errCentre = std::max(errCentre, std::abs(double(out.data(1, z, y, x)) - expect));
        sumCentre += out.data(1, z, y, x);
        errX = std::max(errX, std::abs(double(out.data(0, z, y, x))));
        // Zero boundary: the corner impulse spreads as the truncated Gaussian, nothing folds back.
        errCorner = std::max(errCorner, std::abs(double(out.data(2, z, y, x)) - g1(x) * g1(y) * g1(z)));
      }
  BOOST_TEST(errCentre <= kSmoothTol * g1(0) * g1(0) * g1(0));
  BOOST_TEST(std::abs(sumCentre - 1.0) <= 1e-6);  // n^3 float values of <= 0.02: sum rounding
  BOOST_TEST(errX == 0.0);                        // components do not mix
  BOOST_TEST(errCorner <= kSmoothTol * g1(0) * g1(0) * g1(0));
  BOOST_TEST(out.data(2, 0, 0, r + 1) == 0.0f);
}

// The zero boundary makes G_sigma a symmetric matrix: <a, G b> = <G a, b> for any fields a, b
// (with the clamp rule it was not, and a corner weighed its own force 27 times more).
BOOST_AUTO_TEST_CASE(gaussian_smooth_is_self_adjoint) {
  const Geometry g = Geometry::make3D(13, 9, 11);
  const Field a = makeField(g, [](double x, double y, double z) {
    return Vec{std::sin(1.3 * x + 0.4 * y), std::cos(0.9 * z - y), 0.5 + std::sin(x * y + z)};
  });
  const Field b = makeField(g, [](double x, double y, double z) {
    return Vec{std::cos(0.7 * x * z), std::sin(2.1 * y) + 0.2 * x, std::cos(x + 2 * y - z)};
  });
  Field ga("kortex::test::ga", g), gb("kortex::test::gb", g);
  ref::gaussianSmooth(a.data, ga.data, 2.0f);
  ref::gaussianSmooth(b.data, gb.data, 2.0f);
  double lhs = 0.0, rhs = 0.0, scale = 0.0;
  const float* pa = a.data.data();
  const float* pb = b.data.data();
  const float* pga = ga.data.data();
  const float* pgb = gb.data.data();
  for (Index i = 0; i < 3 * g.numVoxels(); ++i) {
    lhs += double(pa[i]) * double(pgb[i]);
    rhs += double(pga[i]) * double(pb[i]);
    scale += std::abs(double(pa[i]) * double(pgb[i]));
  }
  BOOST_TEST(std::abs(lhs - rhs) <= 4 * kFloatEps * scale);  // each output rounded to float once
}

BOOST_AUTO_TEST_CASE(update_rate_on_known_fields) {
  const Geometry g = Geometry::make3D(8, 7, 6);
  // Velocity: arbitrary smooth values.
  const Field v = makeField(g, [](double x, double y, double z) {
    return Vec{std::sin(0.7 * x + 0.2 * z), std::cos(0.5 * y) - 0.3, 0.25 * std::sin(x + y + z)};
  });
  Field rate("kortex::test::rate", g);
  // u = const: G = 0, rate = v exactly.
  const Field uc = makeField(g, [](double, double, double) { return Vec{0.3, -1.25, 2.0}; });
  const double m = ref::updateRate(uc.data, v.data, rate.data);
  BOOST_TEST(sameBits(rate, v));
  double mExpect = 0.0;
  for (Index i = 0; i < g.numVoxels(); ++i) {
    double s = 0.0, l1 = 0.0;
    for (int c = 0; c < 3; ++c) {
      s += double(v.component(c).data()[i]) * double(v.component(c).data()[i]);
      l1 += std::abs(double(v.component(c).data()[i]));
    }
    mExpect = std::max({mExpect, std::sqrt(s), 0.5 * l1});  // step norm: max(|rate|, |v|_1 / 2)
  }
  BOOST_TEST(std::abs(m - mExpect) <= 1e-15 * mExpect);

  // u = B x + c, B in eighths (exact in float): the upwind difference along axis j is B[.][j]
  // except where it would reach outside the grid (x_j = 0 with v_j > 0, x_j = n_j - 1 with
  // v_j < 0): there the clamped neighbour is the voxel itself and the difference is 0.
  const double B[3][3] = {{0.125, -0.25, 0.0}, {0.375, 0.0, 0.125}, {-0.125, 0.25, -0.25}};
  const Field ul = makeField(g, [&](double x, double y, double z) {
    const double p[3] = {x, y, z};
    Vec r{0.5, -0.25, 1.0};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) r[i] += B[i][j] * p[j];
    return r;
  });
  const double ml = ref::updateRate(ul.data, v.data, rate.data);
  double worst = 0.0, mMax = 0.0;
  const Index ext[3] = {g.nx(), g.ny(), g.nz()};
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const Index p[3] = {x, y, z};
        double H[3][3], l1 = 0.0;
        for (int j = 0; j < 3; ++j) {
          const double vj = v.data(j, z, y, x);
          l1 += std::abs(vj);
          const bool outside = (p[j] == 0 && vj > 0) || (p[j] == ext[j] - 1 && vj < 0);
          for (int i = 0; i < 3; ++i) H[i][j] = outside ? 0.0 : B[i][j];
        }
        double norm2 = 0.0;
        for (int i = 0; i < 3; ++i) {
          double e = v.data(i, z, y, x);
          for (int j = 0; j < 3; ++j) e -= H[i][j] * v.data(j, z, y, x);
          worst = std::max(worst, std::abs(double(rate.data(i, z, y, x)) - e));
          norm2 += e * e;
        }
        mMax = std::max({mMax, std::sqrt(norm2), 0.5 * l1});  // the step norm of the spec
      }
  BOOST_TEST(worst <= kFloatEps);         // |rate| < 2: one float rounding
  BOOST_TEST(std::abs(ml - mMax) <= 4 * kFloatEps);

  // applyUpdate: u + dt rate, element-wise (in place allowed).
  Field out("kortex::test::out", g);
  const float dt = 0.37f;
  ref::applyUpdate(ul.data, rate.data, dt, out.data);
  double err = 0.0;
  for (std::size_t i = 0; i < out.data.size(); ++i)
    err = std::max(err, std::abs(double(out.data.data()[i]) -
                                 (double(ul.data.data()[i]) + double(dt) * double(rate.data.data()[i]))));
  BOOST_TEST(err <= 4 * kFloatEps);  // |u + dt rate| < 4: one float rounding
  Field inPlace = copyField(ul);
  ref::applyUpdate(inPlace.data, rate.data, dt, inPlace.data);
  BOOST_TEST(sameBits(inPlace, out));
}

BOOST_AUTO_TEST_CASE(warp_identity_and_shifts) {
  const Index n = 10;
  const HostImage T = smoothRandomImage(n, 5);
  HostImage out("kortex::test::out", T.geometry);
  // u = 0: identity, bit for bit.
  ref::warp(T.data, zeroField(T.geometry).data, out.data);
  BOOST_TEST(test::maxAbsDifference(out, T) == 0.0);
  // Integer shift s: out(x) = T(x - s) exactly where x - s is on the grid.
  const int s[3] = {2, -1, 3};
  const Field u = makeField(T.geometry, [&](double, double, double) { return Vec{double(s[0]), double(s[1]), double(s[2])}; });
  ref::warp(T.data, u.data, out.data);
  int interior = 0;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const Index sx = x - s[0], sy = y - s[1], sz = z - s[2];
        const auto cl = [n](Index i) { return i < 0 ? Index(0) : (i >= n ? n - 1 : i); };
        // Outside the grid the clamp-extended image is read: T at the clamped index.
        BOOST_TEST_REQUIRE(out.data(z, y, x) == T.data(cl(sz), cl(sy), cl(sx)));
        interior += sx >= 0 && sx < n && sy >= 0 && sy < n && sz >= 0 && sz < n;
      }
  BOOST_TEST(interior > 300);
  // Half-voxel shift along x: the mean of the two neighbours.
  const Field h = makeField(T.geometry, [](double, double, double) { return Vec{0.5, 0, 0}; });
  ref::warp(T.data, h.data, out.data);
  double err = 0.0;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 1; x < n; ++x)
        err = std::max(err, std::abs(double(out.data(z, y, x)) -
                                     0.5 * (double(T.data(z, y, x)) + double(T.data(z, y, x - 1)))));
  BOOST_TEST(err <= kFloatEps);
  // Far outside (huge displacement): the corner value, no overflow in the index conversion.
  const Field far = makeField(T.geometry, [](double, double, double) { return Vec{1e30, -1e30, 1e30}; });
  ref::warp(T.data, far.data, out.data);
  BOOST_TEST(out.data(3, 4, 5) == T.data(0, n - 1, 0));
}

BOOST_AUTO_TEST_CASE(jacobian_of_linear_field) {
  const Index n = 9;
  const Geometry g = Geometry::make3D(n, n, n);
  const double B[3][3] = {{0.2, -0.1, 0.05}, {0.15, -0.3, 0.1}, {-0.05, 0.2, 0.1}};
  const Field u = makeField(g, [&](double x, double y, double z) {
    const double p[3] = {x, y, z};
    Vec r{0.3, 0.1, -0.2};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) r[i] += B[i][j] * p[j];
    return r;
  });
  double A[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) A[i][j] = (i == j ? 1.0 : 0.0) - B[i][j];
  const double det = A[0][0] * (A[1][1] * A[2][2] - A[1][2] * A[2][1]) -
                     A[0][1] * (A[1][0] * A[2][2] - A[1][2] * A[2][0]) +
                     A[0][2] * (A[1][0] * A[2][1] - A[1][1] * A[2][0]);
  HostImage J("kortex::test::J", g);
  ref::jacobianDeterminant(u.data, J.data);
  double err = 0.0;
  for (Index z = 1; z < n - 1; ++z)
    for (Index y = 1; y < n - 1; ++y)
      for (Index x = 1; x < n - 1; ++x) err = std::max(err, std::abs(double(J.data(z, y, x)) - det));
  // u values up to ~3 are rounded to float (~2e-7 each); differences and the determinant add a
  // few such roundings.
  constexpr double kLinearJacobianTol = 1e-5;
  BOOST_TEST(err <= kLinearJacobianTol);
  BOOST_TEST_MESSAGE("linear field: det(I - B) = " << det << ", max interior error " << err);
}

// ---- the iteration ---------------------------------------------------------------------------------

namespace {

// The spec's loop written again from its text with the public building blocks.
struct SpecRun {
  RegistrationResult result;
  Field u;
};

SpecRun specLoop(HostImage const& T, HostImage const& R, Field const& u0, RegistrationParams const& p) {
  SpecRun s{{}, copyField(u0)};
  const Geometry g = T.geometry;
  Field f("f", g), v("v", g), rate("rate", g), cand("cand", g);
  RegistrationEnergy E = ref::registrationEnergy(T.data, R.data, s.u.data, p.lambda);
  s.result.initial = E;
  double delta = p.maxStep;
  int row = 0;
  s.result.stop = StopReason::IterationCap;
  for (int it = 1; it <= p.iterations; ++it) {
    RegistrationIteration rec;
    rec.iteration = it;
    s.result.iterations = it;
    ref::registrationForce(T.data, R.data, s.u.data, f.data, p.lambda);
    ref::gaussianSmooth(f.data, v.data, p.sigma);
    const double m = ref::updateRate(s.u.data, v.data, rate.data);
    const double cap = float(p.maxStep * (1 + std::cos(3.141592653589793 * (it - 1) / p.iterations)) / 2);
    delta = std::min(delta, cap);
    bool stop = false;
    if (m == 0.0) {
      s.result.stop = StopReason::ZeroVelocity;
      stop = true;
    } else {
      while (true) {
        rec.step = float(delta);
        ref::applyUpdate(s.u.data, rate.data, float(delta / m), cand.data);
        const RegistrationEnergy Ec = ref::registrationEnergy(T.data, R.data, cand.data, p.lambda);
        if (Ec.minJacobian > 0.0f && Ec.total < E.total) {
          row = (E.total - Ec.total) / E.total < p.tolerance ? row + 1 : 0;
          Kokkos::deep_copy(s.u.data, cand.data);
          E = Ec;
          rec.accepted = true;
          ++s.result.accepted;
          delta = std::min(2.0 * delta, cap);
          if (row >= p.patience) {
            s.result.stop = StopReason::Converged;
            stop = true;
          }
          break;
        }
        ++rec.rejected;
        ++s.result.rejected;
        delta /= 2;
        if (delta < p.minStep) {
          s.result.stop = StopReason::StepUnderflow;
          stop = true;
          break;
        }
      }
    }
    rec.energy = E;
    s.result.history.push_back(rec);
    if (stop) break;
  }
  s.result.final = E;
  return s;
}

// Gaussian blob and the same blob shifted and scaled.
struct BlobPair {
  HostImage moving, fixed;
};
BlobPair blobPair(Index n) {
  const double c = 0.5 * double(n - 1);
  const Blob a{c - 0.5, c, c + 0.5, 0.17 * n, 1.0};
  const Blob b{c + 1.0, c - 1.0, c, 0.2 * n, 1.0};
  return {makeImage(n, a), makeImage(n, b)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(loop_matches_spec_transcription) {
  const BlobPair pair = blobPair(12);
  const Field u0 = zeroField(pair.moving.geometry);
  // Large first step so that rejections and halving happen, a loose tolerance so that the run
  // converges within the cap.
  RegistrationParams p;
  p.lambda = 0.05;
  p.sigma = 1.0f;
  p.iterations = 40;
  p.maxStep = 4.0f;
  p.minStep = 1e-3f;
  p.tolerance = 2e-2;
  p.patience = 2;
  const SpecRun expect = specLoop(pair.moving, pair.fixed, u0, p);
  Field u = copyField(u0);
  int calls = 0;
  const RegistrationResult r = ref::fluidRegister(pair.moving, pair.fixed, u, p,
                                                  [&](RegistrationIteration const& it) {
                                                    ++calls;
                                                    BOOST_TEST(it.iteration == calls);
                                                  });
  BOOST_TEST_MESSAGE("spec loop: " << r.iterations << " iterations, " << r.accepted << " accepted, "
                                   << r.rejected << " rejected, stop " << toString(r.stop));
  BOOST_TEST(r.rejected > 0);  // the halving path was exercised
  BOOST_TEST(r.accepted > 3);
  BOOST_TEST(toString(r.stop) == toString(expect.result.stop));
  BOOST_TEST(r.iterations == expect.result.iterations);
  BOOST_TEST(r.accepted == expect.result.accepted);
  BOOST_TEST(r.rejected == expect.result.rejected);
  BOOST_TEST(r.final.total == expect.result.final.total);
  BOOST_TEST(sameBits(u, expect.u));
  BOOST_TEST_REQUIRE(r.history.size() == expect.result.history.size());
  BOOST_TEST(calls == int(r.history.size()));
  for (std::size_t i = 0; i < r.history.size(); ++i) {
    BOOST_TEST(r.history[i].energy.total == expect.result.history[i].energy.total);
    BOOST_TEST(r.history[i].step == expect.result.history[i].step);
    BOOST_TEST(r.history[i].rejected == expect.result.history[i].rejected);
    BOOST_TEST(r.history[i].accepted == expect.result.history[i].accepted);
  }
}

BOOST_AUTO_TEST_CASE(energy_decreases_monotonically_and_stays_diffeomorphic) {
  const Index n = 24;
  const BlobPair pair = blobPair(n);
  Field u = zeroField(pair.moving.geometry);
  RegistrationParams p;
  p.lambda = 0.05;
  p.sigma = 1.0f;
  p.iterations = 150;
  p.maxStep = 0.5f;
  p.tolerance = 1e-5;
  const auto t0 = std::chrono::steady_clock::now();
  const RegistrationResult r = ref::fluidRegister(pair.moving, pair.fixed, u, p);
  BOOST_TEST_MESSAGE("blob " << n << "^3: E " << r.initial.total << " -> " << r.final.total << " (data " << r.final.data << ", reg " << r.final.reg << ") in "
                             << r.iterations << " iterations (" << r.accepted << " accepted, "
                             << r.rejected << " rejected, stop " << toString(r.stop) << "), "
                             << seconds(t0) << " s");
  BOOST_TEST_REQUIRE(!r.history.empty());
  double prev = r.initial.total, prevSeconds = 0.0;
  int accepted = 0, rejected = 0;
  for (auto const& it : r.history) {
    if (it.accepted)
      BOOST_TEST(it.energy.total < prev);
    else
      BOOST_TEST(it.energy.total == prev);
    BOOST_TEST(it.energy.minJacobian > 0.0f);
    BOOST_TEST(it.seconds >= prevSeconds);
    prev = it.energy.total;
    prevSeconds = it.seconds;
    accepted += it.accepted;
    rejected += it.rejected;
  }
  BOOST_TEST(accepted == r.accepted);
  BOOST_TEST(rejected == r.rejected);
  BOOST_TEST(r.iterations == int(r.history.size()));
  BOOST_TEST(r.final.total == r.history.back().energy.total);
  BOOST_TEST(r.seconds >= r.history.back().seconds);
  // The registration does its job: most of the mismatch is gone.
  // Measured 0.32 (E 43.9 -> 14.1 = data 8.7 + 0.05 x KL 108: the scaled blob needs a volume
  // change, which the KL term resists).
  constexpr double kEnergyReduction = 0.5;
  BOOST_TEST(r.final.total < kEnergyReduction * r.initial.total);
  // The final field is the one the energy describes, and it does not fold.
  BOOST_TEST(ref::registrationEnergy(pair.moving.data, pair.fixed.data, u.data, p.lambda).total ==
             r.final.total);
  HostImage J("kortex::test::J", pair.moving.geometry);
  ref::jacobianDeterminant(u.data, J.data);
  BOOST_TEST(minOf(J) > 0.0f);
  BOOST_TEST(minOf(J) == r.final.minJacobian);
}

BOOST_AUTO_TEST_CASE(stop_reasons) {
  const BlobPair pair = blobPair(10);
  const Geometry g = pair.moving.geometry;
  RegistrationParams p;
  p.lambda = 0.05;
  p.sigma = 1.0f;

  {  // iterations == 0: nothing done, initial == final, u unchanged.
    const Field u0 = smoothRandomField(g, 4, 0.2);
    Field u = copyField(u0);
    p.iterations = 0;
    int calls = 0;
    const auto r = ref::fluidRegister(pair.moving, pair.fixed, u, p, [&](auto const&) { ++calls; });
    BOOST_TEST(r.iterations == 0);
    BOOST_TEST(r.history.empty());
    BOOST_TEST(calls == 0);
    BOOST_TEST(r.initial.total == r.final.total);
    BOOST_TEST(r.initial.total > 0.0);
    BOOST_TEST(sameBits(u, u0));
  }
  {  // identical images, u = 0: zero force, zero velocity at the first iteration.
    Field u = zeroField(g);
    p.iterations = 10;
    const auto r = ref::fluidRegister(pair.moving, pair.moving, u, p);
    BOOST_TEST(toString(r.stop) == toString(StopReason::ZeroVelocity));
    BOOST_TEST(r.iterations == 1);
    BOOST_TEST(r.accepted == 0);
    BOOST_TEST(r.final.total == 0.0);
    BOOST_TEST(maxAbs(u.data) == 0.0);
  }
  {  // the cap
    Field u = zeroField(g);
    p.iterations = 3;
    p.tolerance = 0.0;
    const auto r = ref::fluidRegister(pair.moving, pair.fixed, u, p);
    BOOST_TEST(toString(r.stop) == toString(StopReason::IterationCap));
    BOOST_TEST(r.iterations == 3);
    BOOST_TEST(r.accepted == 3);
  }
  {  // converged: every step decreases E by less than 90 %, two in a row.
    Field u = zeroField(g);
    p.iterations = 50;
    p.tolerance = 0.9;
    p.patience = 2;
    const auto r = ref::fluidRegister(pair.moving, pair.fixed, u, p);
    BOOST_TEST(toString(r.stop) == toString(StopReason::Converged));
    BOOST_TEST(r.iterations == 2);
    BOOST_TEST(r.accepted == 2);
  }
  {  // step underflow: no halving allowed (minStep == maxStep) and a first step of 4 voxels on a
     // white-noise pair, which cannot lower the energy.
    const HostImage noise = randomImage(g, 21), noise2 = randomImage(g, 22);
    Field u = zeroField(g);
    p.iterations = 10;
    p.tolerance = 1e-5;
    p.patience = 5;
    p.maxStep = 4.0f;
    p.minStep = 4.0f;
    p.lambda = 1.0;
    const auto r = ref::fluidRegister(noise, noise2, u, p);
    BOOST_TEST(toString(r.stop) == toString(StopReason::StepUnderflow));
    BOOST_TEST(r.iterations == 1);
    BOOST_TEST(r.rejected == 1);
    BOOST_TEST(r.accepted == 0);
    BOOST_TEST(r.history.back().step == 4.0f);
    BOOST_TEST(maxAbs(u.data) == 0.0);  // the last accepted field (the initial one) is kept
    BOOST_TEST(r.final.total == r.initial.total);
  }
}

// ---- recovery of a known deformation ------------------------------------------------------------

namespace {

// Textured ellipsoid with a smooth edge (about 1.5 voxels): inside, the texture has a gradient
// almost everywhere, so the displacement is observable (no flat regions).
struct Phantom {
  double n;
  double ellipse(double x, double y, double z) const {  // 1 on the surface
    const double c = 0.5 * (n - 1);
    const double ax = 0.38 * n, ay = 0.34 * n, az = 0.31 * n;
    return std::sqrt((x - c) * (x - c) / (ax * ax) + (y - c) * (y - c) / (ay * ay) +
                     (z - c) * (z - c) / (az * az));
  }
  double operator()(double x, double y, double z) const {
    const double edge = 0.5 * (1.0 - std::tanh((ellipse(x, y, z) - 1.0) * 0.31 * n / 1.5));
    const double texture = 0.55 +
                           0.2 * std::sin(2 * kPi * x / 11.0) * std::sin(2 * kPi * y / 13.0 + 0.5) +
                           0.15 * std::cos(2 * kPi * z / 9.0 + 0.3 * x / 7.0);
    return edge * texture;
  }
};

// Smooth displacement, max |u| about 3.1 voxels: a Gaussian shear bump along x (2.5 voxels), a
// sinusoidal shear along y and a translation. u_x depends on (y, z), u_y on z, u_z is constant:
// grad u is strictly upper triangular, so det(I - grad u) = 1 exactly, also for the discrete
// differences. E_reg(u_true) = 0, hence u_true minimises E up to the interpolation mismatch of
// the data term. (A volume-changing truth is not a minimiser of E for lambda > 0: the KL term
// penalises any J != 1, and the registration then converges away from it.)
struct TrueDisplacement {
  double n;
  Vec operator()(double, double y, double z) const {
    const double c = 0.5 * (n - 1), s = 0.2 * n;
    const double bump = 2.5 * std::exp(-((y - c) * (y - c) + (z - c - 1) * (z - c - 1)) / (2 * s * s));
    return Vec{bump + 0.4, 1.5 * std::sin(2 * kPi * z / n + 0.3), 0.8};
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(recovers_known_smooth_deformation) {
  const Index n = 40;
  const Phantom phantom{double(n)};
  const TrueDisplacement truth{double(n)};
  // moving T(x) = phantom(x); fixed R(x) = phantom(x - u_true(x)), sampled analytically (the
  // data term at u_true is then not exactly zero: trilinear T vs the analytic phantom).
  const HostImage T = makeImage(n, phantom);
  const HostImage R = makeImage(n, [&](double x, double y, double z) {
    const Vec d = truth(x, y, z);
    return phantom(x - d[0], y - d[1], z - d[2]);
  });
  const Field uTrue = makeField(T.geometry, truth);

  RegistrationParams p;
  p.lambda = 0.01;
  p.sigma = 3.0f;
  p.iterations = 150;
  p.maxStep = 0.5f;
  p.tolerance = 1e-5;
  p.patience = 5;
  Field u = zeroField(T.geometry);
  const auto t0 = std::chrono::steady_clock::now();
  const RegistrationResult r = ref::fluidRegister(T, R, u, p);
  const double elapsed = seconds(t0);

  // RMSE of u - u_true over the object's interior.
  double se = 0.0, se0 = 0.0;
  Index count = 0;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        if (phantom.ellipse(double(x), double(y), double(z)) > 0.85) continue;
        for (int c = 0; c < 3; ++c) {
          const double t = uTrue.data(c, z, y, x), d = double(u.data(c, z, y, x)) - t;
          se += d * d;
          se0 += t * t;
        }
        ++count;
      }
  const double rmse = std::sqrt(se / double(count)), rmse0 = std::sqrt(se0 / double(count));
  HostImage J("kortex::test::J", T.geometry);
  ref::jacobianDeterminant(u.data, J.data);
  const RegistrationEnergy atTruth = ref::registrationEnergy(T.data, R.data, uTrue.data, p.lambda);
  BOOST_TEST_MESSAGE("recovery " << n << "^3 (lambda " << p.lambda << ", sigma " << p.sigma << ", "
                                 << r.iterations << " iterations, " << r.accepted << " accepted, "
                                 << r.rejected << " rejected, stop " << toString(r.stop) << ", "
                                 << elapsed << " s): E " << r.initial.total << " -> " << r.final.total
                                 << " (E(u_true) = " << atTruth.total << "); RMSE(u - u_true) over "
                                 << count << " interior voxels " << rmse << " voxel (" << rmse0
                                 << " at u = 0), min det J " << minOf(J));
  BOOST_TEST(atTruth.reg < 1e-6);  // the truth preserves volume (float rounding of u only)
  BOOST_TEST(minOf(J) > 0.0f);
  // Measured 0.12 voxel (Debian Kokkos Serial, Release); 2x margin.
  constexpr double kRecoveryRmse = 0.25;
  BOOST_TEST(rmse <= kRecoveryRmse);
  BOOST_TEST(rmse < 0.1 * rmse0);
}

// ---- bad inputs ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bad_inputs_rejected) {
  const BlobPair pair = blobPair(8);
  const Geometry g = pair.moving.geometry;
  RegistrationParams p;
  p.iterations = 3;
  Field u = zeroField(g);

  // Mismatched extents.
  const HostImage other = makeImage(9, [](double, double, double) { return 0.0; });
  BOOST_CHECK_EXCEPTION(ref::fluidRegister(pair.moving, other, u, p), InvalidArgument,
                        [](InvalidArgument const& e) { return mentions(e, "fixed image extents"); });
  Field uWrong("kortex::test::u", Geometry::make3D(8, 8, 7));
  BOOST_CHECK_THROW(ref::fluidRegister(pair.moving, pair.fixed, uWrong, p), InvalidArgument);
  Field u2("kortex::test::u2", g, 2);
  BOOST_CHECK_EXCEPTION(ref::fluidRegister(pair.moving, pair.fixed, u2, p), InvalidArgument,
                        [](InvalidArgument const& e) { return mentions(e, "3 components"); });
  Field f("kortex::test::f", Geometry::make3D(8, 8, 9));
  BOOST_CHECK_THROW(ref::registrationForce(pair.moving.data, pair.fixed.data, u.data, f.data, 0.1),
                    InvalidArgument);
  BOOST_CHECK_THROW(ref::registrationForce(pair.moving.data, pair.fixed.data, u.data, u.data, 0.1),
                    InvalidArgument);  // in place
  BOOST_CHECK_THROW(ref::registrationEnergy(pair.moving.data, pair.fixed.data, u.data, -1.0),
                    InvalidArgument);
  BOOST_CHECK_THROW(ref::gaussianSmooth(u.data, u.data, 1.0f), InvalidArgument);
  Field tmp("kortex::test::tmp", g);
  BOOST_CHECK_THROW(ref::gaussianSmooth(u.data, tmp.data, 0.0f), InvalidArgument);
  BOOST_CHECK_THROW(ref::gaussianSmooth(u.data, tmp.data, 11.0f), InvalidArgument);  // radius 33

  // Not 3D / too small.
  HostImage flat("kortex::test::flat", Geometry::make2D(8, 8));
  Field uFlat("kortex::test::uflat", Geometry::make2D(8, 8), 3);
  BOOST_CHECK_EXCEPTION(ref::fluidRegister(flat, flat, uFlat, p), InvalidArgument,
                        [](InvalidArgument const& e) { return mentions(e, "3D"); });
  const HostImage small = makeImage(3, [](double, double, double) { return 0.0; });
  Field uSmall("kortex::test::usmall", small.geometry);
  BOOST_CHECK_THROW(ref::fluidRegister(small, small, uSmall, p), InvalidArgument);

  // Parameters and NaN/Inf inputs are refused where the job enters the pipeline (tstPipeline).

  // Folded initial field: u_x = 2x folds every interior voxel (J = -1).
  Field folded = makeField(g, [](double x, double, double) { return Vec{2 * x, 0, 0}; });
  const Field foldedCopy = copyField(folded);
  BOOST_CHECK_EXCEPTION(ref::fluidRegister(pair.moving, pair.fixed, folded, p), InvalidArgument,
                        [](InvalidArgument const& e) { return mentions(e, "folds"); });
  BOOST_TEST(sameBits(folded, foldedCopy));  // untouched
}
