// CPU reference (reference_cpu/): bilateral filter, non-local means and the multiresolution
// filter against brute-force evaluations of the definitions in core/Bilateral.hpp, core/Nlm.hpp
// and core/Multires.hpp written here again (direct loops, double or exact integers), plus
// analytic properties and bad-input handling.
#define BOOST_TEST_MODULE ReferenceCpu
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Phantom.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Multires.hpp"
#include "reference_cpu/Nlm.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using namespace kortex;

namespace {

// Reference and brute force both accumulate in double and round once to float; only the exp
// implementation and the summation order differ (~1e-14 relative), so at most the last bit of
// a result in [0, 1] may differ: 2 float ulps at 1.0.
constexpr double kRoundingTol = 2.0 * 1.1920929e-7;

// Clamp rule, written again for the brute force (core/Boundary.hpp is not used on purpose).
Index clampTo(Index i, Index n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

double sample(HostImage const& img, Index x, Index y, Index z) {
  const auto& d = img.data;
  return d(clampTo(z, Index(d.extent(0))), clampTo(y, Index(d.extent(1))),
           clampTo(x, Index(d.extent(2))));
}

HostImage emptyLike(HostImage const& in) { return HostImage("kortex::test::out", in.geometry); }

// out(x) = sum_o w I(x+o) / sum_o w, w = exp(-|o|^2/(2 ss^2)) exp(-(I(x+o)-I(x))^2/(2 sr^2)).
HostImage bruteBilateral(HostImage const& in, int r, double sigmaS, double sigmaR) {
  HostImage out = emptyLike(in);
  const Index nz = in.data.extent(0), ny = in.data.extent(1), nx = in.data.extent(2);
  const int rz = nz == 1 ? 0 : r;
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        const double c = in.data(z, y, x);
        double ws = 0.0, vs = 0.0;
        for (int dz = -rz; dz <= rz; ++dz)
          for (int dy = -r; dy <= r; ++dy)
            for (int dx = -r; dx <= r; ++dx) {
              const double v = sample(in, x + dx, y + dy, z + dz);
              const double spatial = std::exp(-double(dx * dx + dy * dy + dz * dz) /
                                              (2.0 * sigmaS * sigmaS));
              const double range =
                  std::isinf(sigmaR) ? 1.0 : std::exp(-(v - c) * (v - c) / (2.0 * sigmaR * sigmaR));
              ws += spatial * range;
              vs += spatial * range * v;
            }
        out.data(z, y, x) = static_cast<float>(vs / ws);
      }
  return out;
}

// out(x) = sum_o w I(x+o) / sum_o w, w(x,0) = 1, w(x,o) = exp(-D/(|P| h^2)),
// D = sum_p (I(x+p) - I(x+o+p))^2, every position clamped on its own.
HostImage bruteNlm(HostImage const& in, int r, int R, double h) {
  HostImage out = emptyLike(in);
  const Index nz = in.data.extent(0), ny = in.data.extent(1), nx = in.data.extent(2);
  const bool is3D = nz > 1;
  const int rz = is3D ? r : 0, Rz = is3D ? R : 0;
  const double patch = std::pow(2.0 * r + 1.0, is3D ? 3 : 2);
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        double ws = 1.0, vs = in.data(z, y, x);
        for (int oz = -Rz; oz <= Rz; ++oz)
          for (int oy = -R; oy <= R; ++oy)
            for (int ox = -R; ox <= R; ++ox) {
              if (oz == 0 && oy == 0 && ox == 0) continue;
              double D = 0.0;
              for (int pz = -rz; pz <= rz; ++pz)
                for (int py = -r; py <= r; ++py)
                  for (int px = -r; px <= r; ++px) {
                    const double d = sample(in, x + px, y + py, z + pz) -
                                     sample(in, x + ox + px, y + oy + py, z + oz + pz);
                    D += d * d;
                  }
              const double w = std::exp(-D / (patch * h * h));
              ws += w;
              vs += w * sample(in, x + ox, y + oy, z + oz);
            }
        out.data(z, y, x) = static_cast<float>(vs / ws);
      }
  return out;
}

// Truncated normalised Gaussian blur by separable 1D passes (clamp is per axis, and the kernel
// and its normalisation factor per axis): an algorithm different from the direct window sum.
HostImage separableGaussian(HostImage const& in, int r, double sigma) {
  const Index nz = in.data.extent(0), ny = in.data.extent(1), nx = in.data.extent(2);
  std::vector<double> g(2 * r + 1);
  double sum = 0.0;
  for (int d = -r; d <= r; ++d) sum += (g[d + r] = std::exp(-d * d / (2.0 * sigma * sigma)));
  for (auto& v : g) v /= sum;
  std::vector<double> a(static_cast<std::size_t>(nz * ny * nx)), b(a.size());
  auto idx = [&](Index z, Index y, Index x) { return static_cast<std::size_t>((z * ny + y) * nx + x); };
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) a[idx(z, y, x)] = in.data(z, y, x);
  for (Index z = 0; z < nz; ++z)  // x pass: a -> b
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        double s = 0.0;
        for (int d = -r; d <= r; ++d) s += g[d + r] * a[idx(z, y, clampTo(x + d, nx))];
        b[idx(z, y, x)] = s;
      }
  for (Index z = 0; z < nz; ++z)  // y pass: b -> a
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        double s = 0.0;
        for (int d = -r; d <= r; ++d) s += g[d + r] * b[idx(z, clampTo(y + d, ny), x)];
        a[idx(z, y, x)] = s;
      }
  if (nz > 1) {
    for (Index z = 0; z < nz; ++z)  // z pass: a -> b
      for (Index y = 0; y < ny; ++y)
        for (Index x = 0; x < nx; ++x) {
          double s = 0.0;
          for (int d = -r; d <= r; ++d) s += g[d + r] * a[idx(clampTo(z + d, nz), y, x)];
          b[idx(z, y, x)] = s;
        }
    a.swap(b);
  }
  HostImage out = emptyLike(in);
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) out.data(z, y, x) = static_cast<float>(a[idx(z, y, x)]);
  return out;
}

HostImage flipped(HostImage const& in, bool flipX, bool flipZ) {
  HostImage out = emptyLike(in);
  const Index nz = in.data.extent(0), ny = in.data.extent(1), nx = in.data.extent(2);
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x)
        out.data(z, y, x) = in.data(flipZ ? nz - 1 - z : z, y, flipX ? nx - 1 - x : x);
  return out;
}

HostImage constantImage(Geometry const& g, float value) {
  HostImage img("kortex::test::constant", g);
  Kokkos::deep_copy(img.data, value);
  return img;
}

// Number of voxels where a and b differ at all (bitwise on the float values).
Index countDifferent(HostImage const& a, HostImage const& b) {
  Index n = 0;
  for (Index i = 0; i < a.numVoxels(); ++i) n += a.data.data()[i] != b.data.data()[i];
  return n;
}

// Images of both kinds on sizes that are no multiple of 8 or 16.
std::vector<HostImage> testImages(Geometry const& g) {
  return {randomImage(g, 7), structuredImage(g, 11)};
}

using test::nlmParams;
BilateralParams bf(int radius, float sigmaS, float sigmaR) { return test::bilateralParams(radius, sigmaS, sigmaR); }

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

// ------------------------------------------------------------------ bilateral vs brute force

BOOST_AUTO_TEST_CASE(bilateral_matches_brute_force_2d) {
  for (auto const& img : testImages(Geometry::make2D(23, 17)))
    for (auto const& p : {bf(1, 1.0f, 0.1f), bf(3, 2.0f, 0.2f), bf(5, 1.5f, 0.05f), bf(2, 3.0f, kInf)}) {
      BOOST_TEST_CONTEXT("r=" << p.radius << " ss=" << p.sigmaSpatial << " sr=" << p.sigmaRange) {
        const auto ref = ref::bilateral(img, p);
        const auto brute = bruteBilateral(img, p.radius, p.sigmaSpatial, p.sigmaRange);
        BOOST_TEST(test::maxAbsDifference(ref, brute) <= kRoundingTol);
        BOOST_TEST(countDifferent(ref, img) > 0);  // it filtered something
      }
    }
}

BOOST_AUTO_TEST_CASE(bilateral_matches_brute_force_3d) {
  for (auto const& img : testImages(Geometry::make3D(13, 11, 9)))
    for (auto const& p : {bf(1, 1.0f, 0.1f), bf(2, 1.5f, 0.3f), bf(4, 2.0f, 0.08f)}) {
      BOOST_TEST_CONTEXT("r=" << p.radius << " ss=" << p.sigmaSpatial << " sr=" << p.sigmaRange) {
        const auto ref = ref::bilateral(img, p);
        const auto brute = bruteBilateral(img, p.radius, p.sigmaSpatial, p.sigmaRange);
        BOOST_TEST(test::maxAbsDifference(ref, brute) <= kRoundingTol);
      }
    }
}

// ------------------------------------------------------------------------ NLM vs brute force

BOOST_AUTO_TEST_CASE(nlm_matches_brute_force_2d) {
  for (auto const& img : testImages(Geometry::make2D(23, 17)))
    for (auto const& p : {nlmParams(1, 2, 0.3f), nlmParams(2, 4, 0.2f), nlmParams(0, 3, 0.1f),
                          nlmParams(3, 1, 0.5f), nlmParams(1, 7, 0.05f)}) {
      BOOST_TEST_CONTEXT("r=" << p.patchRadius << " R=" << p.searchRadius << " h=" << p.h) {
        const auto ref = ref::nlm(img, p);
        const auto brute = bruteNlm(img, p.patchRadius, p.searchRadius, p.h);
        BOOST_TEST(test::maxAbsDifference(ref, brute) <= kRoundingTol);
        BOOST_TEST(countDifferent(ref, img) > 0);
      }
    }
}

BOOST_AUTO_TEST_CASE(nlm_matches_brute_force_3d) {
  for (auto const& img : testImages(Geometry::make3D(13, 11, 9)))
    for (auto const& p : {nlmParams(1, 2, 0.3f), nlmParams(2, 3, 0.15f), nlmParams(0, 2, 0.1f),
                          nlmParams(2, 1, 0.4f)}) {
      BOOST_TEST_CONTEXT("r=" << p.patchRadius << " R=" << p.searchRadius << " h=" << p.h) {
        const auto ref = ref::nlm(img, p);
        const auto brute = bruteNlm(img, p.patchRadius, p.searchRadius, p.h);
        BOOST_TEST(test::maxAbsDifference(ref, brute) <= kRoundingTol);
      }
    }
}

// Images taller/deeper than the reference's internal blocks (64 rows in 2D, 16 planes x 32 rows
// in 3D), with a last block thinner than the search radius: every block boundary, the
// symmetric (o, -o) contributions that cross it and partly empty bounding boxes are exercised.
BOOST_AUTO_TEST_CASE(nlm_matches_brute_force_across_blocks) {
  {
    const auto img = randomImage(Geometry::make2D(37, 70), 3);
    const auto p = nlmParams(3, 8, 0.35f);
    BOOST_TEST(test::maxAbsDifference(ref::nlm(img, p), bruteNlm(img, 3, 8, 0.35)) <= kRoundingTol);
  }
  {
    const auto img = structuredImage(Geometry::make3D(11, 37, 19), 5);
    const auto p = nlmParams(1, 4, 0.1f);
    BOOST_TEST(test::maxAbsDifference(ref::nlm(img, p), bruteNlm(img, 1, 4, 0.1)) <= kRoundingTol);
  }
}

// ------------------------------------------------------------------------ analytic properties

BOOST_AUTO_TEST_CASE(constant_image_unchanged) {
  for (auto const& g : {Geometry::make2D(23, 17), Geometry::make3D(13, 11, 9)}) {
    const float c = 0.37f;
    const auto img = constantImage(g, c);
    const auto b = ref::bilateral(img, bf(3, 2.0f, 0.1f));
    const auto n = ref::nlm(img, nlmParams(2, 4, 0.1f));
    Index bad = 0;
    for (Index i = 0; i < img.numVoxels(); ++i)
      bad += (b.data.data()[i] != c) + (n.data.data()[i] != c);
    BOOST_TEST(bad == 0);
  }
}

BOOST_AUTO_TEST_CASE(zero_radius_is_identity) {
  for (auto const& g : {Geometry::make2D(23, 17), Geometry::make3D(13, 11, 9)})
    for (auto const& img : testImages(g)) {
      BOOST_TEST(countDifferent(ref::bilateral(img, bf(0, 2.0f, 0.1f)), img) == 0);
      BOOST_TEST(countDifferent(ref::nlm(img, nlmParams(2, 0, 0.3f)), img) == 0);
    }
}

BOOST_AUTO_TEST_CASE(bilateral_infinite_range_sigma_is_gaussian_blur) {
  for (auto const& g : {Geometry::make2D(23, 17), Geometry::make3D(13, 11, 9)})
    for (auto const& img : testImages(g)) {
      const auto ref = ref::bilateral(img, bf(3, 1.7f, kInf));
      BOOST_TEST(test::maxAbsDifference(ref, separableGaussian(img, 3, 1.7)) <= kRoundingTol);
    }
}

// Tiny h: every patch that differs from the centre patch gets weight exp(-large) = 0.
BOOST_AUTO_TEST_CASE(nlm_tiny_h_is_identity) {
  for (auto const& g : {Geometry::make2D(23, 17), Geometry::make3D(13, 11, 9)}) {
    const auto img = randomImage(g, 99);
    BOOST_TEST(countDifferent(ref::nlm(img, nlmParams(1, 3, 1e-4f)), img) == 0);
    BOOST_TEST(countDifferent(ref::nlm(img, nlmParams(1, 3, 0.3f)), img) > 0);  // h matters
  }
}

// The clamp rule and the windows are mirror-symmetric: filtering commutes with flips.
BOOST_AUTO_TEST_CASE(flip_commutes_with_filtering) {
  struct Case {
    Geometry g;
    bool flipX, flipZ;
  };
  for (auto const& c : {Case{Geometry::make2D(23, 17), true, false},
                        Case{Geometry::make3D(13, 11, 9), true, false},
                        Case{Geometry::make3D(13, 11, 9), false, true}}) {
    const auto img = structuredImage(c.g, 21);
    const auto flip = [&](HostImage const& i) { return flipped(i, c.flipX, c.flipZ); };
    const auto pb = bf(2, 1.5f, 0.2f);
    const auto pn = nlmParams(1, 3, 0.15f);
    BOOST_TEST(test::maxAbsDifference(ref::bilateral(flip(img), pb), flip(ref::bilateral(img, pb))) <=
               kRoundingTol);
    BOOST_TEST(test::maxAbsDifference(ref::nlm(flip(img), pn), flip(ref::nlm(img, pn))) <=
               kRoundingTol);
    // The flip is not a no-op on this image (otherwise the checks above prove nothing).
    BOOST_TEST(countDifferent(flip(img), img) > 0);
  }
}

BOOST_AUTO_TEST_CASE(host_image_overload_keeps_geometry_and_metadata) {
  auto g = Geometry::make3D(13, 11, 9);
  g.spacing = {0.5, 0.7, 1.2};
  g.origin = {-3.0, 4.0, 10.0};
  auto img = randomImage(g, 4);
  img.metadata["nifti.qform_code"] = "1";
  const auto pb = bf(2, 1.5f, 0.2f);
  const auto pn = nlmParams(1, 2, 0.2f);
  for (bool useNlm : {false, true}) {
    const auto out = useNlm ? ref::nlm(img, pn) : ref::bilateral(img, pb);
    BOOST_TEST(out.geometry.sameGrid(img.geometry, 0.0));
    BOOST_TEST((out.metadata == img.metadata));
    BOOST_TEST(out.data.data() != img.data.data());
    HostImage viaView = emptyLike(img);
    if (useNlm)
      ref::nlm(img.data, viaView.data, pn);
    else
      ref::bilateral(img.data, viaView.data, pb);
    BOOST_TEST(countDifferent(out, viaView) == 0);
  }
}

// --------------------------------------------------------------------------------- bad inputs

namespace {
bool mentions(InvalidArgument const& e, std::string const& what) {
  return std::string(e.what()).find(what) != std::string::npos;
}
}  // namespace

// Parameters and NaN/Inf inputs are refused where a job enters the pipeline (tstPipeline).

BOOST_AUTO_TEST_CASE(bad_views_rejected) {
  const auto img = randomImage(Geometry::make3D(7, 6, 5), 1);
  ImageView<> wrong("wrong", 5, 6, 8);
  BOOST_CHECK_THROW(ref::bilateral(img.data, wrong, bf(1, 1.0f, 0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::nlm(img.data, wrong, nlmParams(1, 1, 0.1f)), InvalidArgument);
  // In place (aliasing) is rejected.
  BOOST_CHECK_THROW(ref::bilateral(img.data, img.data, bf(1, 1.0f, 0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::nlm(img.data, img.data, nlmParams(1, 1, 0.1f)), InvalidArgument);
  // Partial overlap: the output is a sub-block of the input's allocation.
  ImageView<> big("big", 10, 6, 7);
  auto half = Kokkos::subview(big, Kokkos::pair<int, int>(5, 10), Kokkos::ALL, Kokkos::ALL);
  ImageView<> lower = Kokkos::subview(big, Kokkos::pair<int, int>(0, 5), Kokkos::ALL, Kokkos::ALL);
  ImageView<> upper = half;
  BOOST_CHECK_NO_THROW(ref::bilateral(lower, upper, bf(1, 1.0f, 0.1f)));  // disjoint halves
  ImageView<> shifted = Kokkos::subview(big, Kokkos::pair<int, int>(2, 7), Kokkos::ALL, Kokkos::ALL);
  BOOST_CHECK_THROW(ref::nlm(lower, shifted, nlmParams(1, 1, 0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::bilateral(shifted, lower, bf(1, 1.0f, 0.1f)), InvalidArgument);
  // Empty views.
  ImageView<> none;
  BOOST_CHECK_THROW(ref::bilateral(none, none, bf(1, 1.0f, 0.1f)), InvalidArgument);
  ImageView<> zero("zero", 0, 6, 7), zero2("zero2", 0, 6, 7);
  BOOST_CHECK_THROW(ref::nlm(zero, zero2, nlmParams(1, 1, 0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::nlm(HostImage{}, nlmParams(1, 1, 0.1f)), InvalidArgument);
}

// ------------------------------------------------------------------------ multiresolution filter

namespace {

// Round trip without filtering in double: every pyramid step rounds at ~1e-16 relative on
// values below 4, over at most 7 levels (~1e-14 absolute), then the result is rounded to float
// once; 1e-12 leaves a wide margin and is still 1e5 times below a float ulp at 1.0.
constexpr double kMultiresRoundTripTol = 1e-12;

// Brute-force multires, written from core/Multires.hpp's text with the 2D sums taken directly
// (no separable passes) and expand evaluated as "zero insertion, 5x5 binomial, times 4" on the
// clamp-extended coarse image (not the polyphase form the reference uses).
template <class T>
struct Grid {
  Index nx = 0, ny = 0;
  std::vector<T> v;
  Grid(Index nx_, Index ny_) : nx(nx_), ny(ny_), v(static_cast<std::size_t>(nx_ * ny_), T(0)) {}
  T& at(Index x, Index y) { return v[static_cast<std::size_t>(y * nx + x)]; }
  T at(Index x, Index y) const { return v[static_cast<std::size_t>(y * nx + x)]; }
  T clamped(Index x, Index y) const { return at(clampTo(x, nx), clampTo(y, ny)); }
};

constexpr std::int64_t kB16[5] = {1, 4, 6, 4, 1};  // 16 x binomial

double reduceNorm(double s) { return s / 256.0; }
std::int64_t reduceNorm(std::int64_t s) { return (s + 128) >> 8; }
double expandNorm(double s) { return 4.0 * s / 256.0; }  // the lowpass, times 4
std::int64_t expandNorm(std::int64_t s) { return (s + 32) >> 6; }

template <class T>
Grid<T> bruteReduce(Grid<T> const& g) {
  Grid<T> out((g.nx + 1) / 2, (g.ny + 1) / 2);
  for (Index j = 0; j < out.ny; ++j)
    for (Index i = 0; i < out.nx; ++i) {
      T s = 0;
      for (int m = -2; m <= 2; ++m)
        for (int n = -2; n <= 2; ++n) s += T(kB16[m + 2] * kB16[n + 2]) * g.clamped(2 * i + n, 2 * j + m);
      out.at(i, j) = reduceNorm(s);
    }
  return out;
}

template <class T>
Grid<T> bruteExpand(Grid<T> const& coarse, Index nx, Index ny) {
  // Zero-inserted image on every integer position: u(2a, 2b) = coarse(clamp(a), clamp(b)).
  auto u = [&](Index x, Index y) {
    return (x % 2 == 0 && y % 2 == 0) ? coarse.clamped(x / 2, y / 2) : T(0);
  };
  Grid<T> out(nx, ny);
  for (Index q = 0; q < ny; ++q)
    for (Index p = 0; p < nx; ++p) {
      T s = 0;
      for (int m = -2; m <= 2; ++m)
        for (int n = -2; n <= 2; ++n) s += T(kB16[m + 2] * kB16[n + 2]) * u(p + n, q + m);
      out.at(p, q) = expandNorm(s);
    }
  return out;
}

Grid<double> bruteBf(Grid<double> const& l, int r, double sigmaS, double sigmaR) {
  Grid<double> out(l.nx, l.ny);
  for (Index y = 0; y < l.ny; ++y)
    for (Index x = 0; x < l.nx; ++x) {
      double ws = 0.0, vs = 0.0;
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const double v = l.clamped(x + dx, y + dy), d = v - l.at(x, y);
          const double w = std::exp(-double(dx * dx + dy * dy) / (2.0 * sigmaS * sigmaS)) *
                           (std::isinf(sigmaR) ? 1.0 : std::exp(-d * d / (2.0 * sigmaR * sigmaR)));
          ws += w;
          vs += w * v;
        }
      out.at(x, y) = vs / ws;
    }
  return out;
}

std::int64_t fixedPoint(double x) { return std::llround(32768.0 * x); }

// What the integer test data exercised (so the integer checks cannot pass vacuously).
struct IntStats {
  Index clamped = 0;         // reconstruct values clamped to [0, maxValue]
  Index clampedHigh = 0;     // ... of which clamped to maxValue
  Index negativeTies = 0;    // num / den exactly halfway, num < 0 (rounded away from zero)
  Index positiveTies = 0;
  std::int64_t maxWeightedDiff = 0;  // largest |difference| that got a nonzero weight
};

Grid<std::int64_t> bruteBf(Grid<std::int64_t> const& l, int r, double sigmaS, double sigmaR,
                           IntStats* stats = nullptr) {
  Grid<std::int64_t> out(l.nx, l.ny);
  for (Index y = 0; y < l.ny; ++y)
    for (Index x = 0; x < l.nx; ++x) {
      std::int64_t num = 0, den = 0;
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const std::int64_t v = l.clamped(x + dx, y + dy), d = v - l.at(x, y);
          // Untruncated table entries: exp is decreasing in |d|, so the reference's table cut at
          // the first zero entry gives the same weights.
          const std::int64_t w = fixedPoint(std::exp(-double(dx * dx + dy * dy) / (2.0 * sigmaS * sigmaS))) *
                                 fixedPoint(std::exp(-double(d * d) / (2.0 * sigmaR * sigmaR)));
          num += w * v;
          den += w;
          if (stats && w != 0) stats->maxWeightedDiff = std::max(stats->maxWeightedDiff, d < 0 ? -d : d);
        }
      // Nearest integer, halves away from zero.
      const std::int64_t a = num < 0 ? -num : num;
      std::int64_t q = a / den;
      if (2 * (a % den) >= den) ++q;
      if (stats && 2 * (a % den) == den) ++(num < 0 ? stats->negativeTies : stats->positiveTies);
      out.at(x, y) = num < 0 ? -q : q;
    }
  return out;
}

// Decompose, filter every layer (if `filter`), reconstruct; `maxValue` > 0 clamps (integers).
template <class T>
Grid<T> bruteMultires(Grid<T> const& in, MultiresParams const& p, std::int64_t maxValue = 0,
                      IntStats* stats = nullptr) {
  std::vector<Grid<T>> layers;
  Grid<T> g = in;
  for (int k = 0; k < p.levels; ++k) {
    Grid<T> next = bruteReduce(g);
    const Grid<T> e = bruteExpand(next, g.nx, g.ny);
    for (std::size_t i = 0; i < g.v.size(); ++i) g.v[i] -= e.v[i];
    layers.push_back(g);
    g = next;
  }
  layers.push_back(g);
  if (p.filter)
    for (auto& l : layers) {
      if constexpr (std::is_same_v<T, double>)
        l = bruteBf(l, p.radius, p.sigmaSpatial, p.sigmaRange);
      else
        l = bruteBf(l, p.radius, p.sigmaSpatial, p.sigmaRange, stats);
    }
  g = layers.back();
  for (int k = p.levels - 1; k >= 0; --k) {
    Grid<T> out = layers[static_cast<std::size_t>(k)];
    const Grid<T> e = bruteExpand(g, out.nx, out.ny);
    for (std::size_t i = 0; i < out.v.size(); ++i) {
      out.v[i] += e.v[i];
      if (maxValue > 0 && (out.v[i] < T(0) || out.v[i] > T(maxValue))) {
        out.v[i] = std::min<T>(std::max<T>(out.v[i], T(0)), T(maxValue));
        if (stats) {
          ++stats->clamped;
          stats->clampedHigh += out.v[i] == T(maxValue);
        }
      }
    }
    g = out;
  }
  return g;
}

Grid<double> toGrid(HostImage const& img) {
  Grid<double> g(img.geometry.nx(), img.geometry.ny());
  for (Index y = 0; y < g.ny; ++y)
    for (Index x = 0; x < g.nx; ++x) g.at(x, y) = img.data(0, y, x);
  return g;
}

Grid<std::int64_t> toGrid(ConstU16ImageView<> const& img) {
  Grid<std::int64_t> g(Index(img.extent(2)), Index(img.extent(1)));
  for (Index y = 0; y < g.ny; ++y)
    for (Index x = 0; x < g.nx; ++x) g.at(x, y) = img(0, y, x);
  return g;
}

// 16-bit image (1, ny, nx) with values in [0, maxValue]: uniform random, structuredImage's
// blocks and ramp scaled, or a 0 / maxValue checkerboard (Laplacian values near +-maxValue/2,
// so layer differences beyond maxValue).
enum class Pattern { Random, Structured, Checker };

U16ImageView<> u16Image(Index nx, Index ny, std::uint32_t maxValue, std::uint64_t seed,
                        Pattern pattern = Pattern::Random) {
  U16ImageView<> v("kortex::test::u16", 1, ny, nx);
  SplitMix64 rng(seed);
  const HostImage s = structuredImage(Geometry::make2D(nx, ny), seed);
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x) {
      const double f = pattern == Pattern::Structured ? std::clamp(double(s.data(0, y, x)), 0.0, 1.0)
                       : pattern == Pattern::Checker  ? double((x + y) % 2)
                                                      : rng.uniform();
      v(0, y, x) = static_cast<std::uint16_t>(std::min<double>(std::floor(f * (maxValue + 1.0)), maxValue));
    }
  return v;
}

U16ImageView<> runInt(ConstU16ImageView<> in, MultiresParams const& p) {
  U16ImageView<> out("kortex::test::u16out", in.extent(0), in.extent(1), in.extent(2));
  ref::multires(in, out, p);
  return out;
}

Index countDifferentU16(ConstU16ImageView<> a, ConstU16ImageView<> b) {
  Index n = 0;
  for (std::size_t i = 0; i < a.span(); ++i) n += a.data()[i] != b.data()[i];
  return n;
}

MultiresParams mr(int levels, int radius, float sigmaS, float sigmaR, bool filter = true) {
  MultiresParams p;
  p.levels = levels;
  p.radius = radius;
  p.sigmaSpatial = sigmaS;
  p.sigmaRange = sigmaR;
  p.filter = filter;
  p.bilateral = MultiresBilateralVariant::Naive;
  p.pyramid = PyramidVariant::FusedDirect;
  return p;
}

MultiresParams mrInt(int levels, int radius, float sigmaS, float sigmaR, int bits, bool filter = true) {
  MultiresParams p = mr(levels, radius, sigmaS, sigmaR, filter);
  p.bits = bits;
  p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(multires_round_trip_without_filtering) {
  for (auto const& g : {Geometry::make2D(97, 61), Geometry::make2D(5, 3)}) {
    const int L = maxLevels(g.nx(), g.ny());
    for (int levels : {1, L}) {
      BOOST_TEST_CONTEXT(describe(g) << ", levels " << levels) {
        for (auto const& img : testImages(g)) {
          const auto out = ref::multires(img, mr(levels, 2, 2.0f, 0.05f, false));
          BOOST_TEST(test::maxAbsDifference(out, img) <= kMultiresRoundTripTol);
          BOOST_TEST(out.geometry.sameGrid(img.geometry, 0.0));
        }
        // Integer pipeline: exact, for a given and an automatic bit depth, and at 15 bits.
        struct IntCase {
          std::uint32_t maxValue;
          int bits;
          Pattern pattern;
        };
        for (auto const& c : {IntCase{1023, 10, Pattern::Random}, IntCase{1023, 10, Pattern::Structured},
                              IntCase{700, 0, Pattern::Structured}, IntCase{32767, 15, Pattern::Random},
                              IntCase{32767, 0, Pattern::Checker}, IntCase{1, 1, Pattern::Random}}) {
          const auto in = u16Image(g.nx(), g.ny(), c.maxValue, 17, c.pattern);
          BOOST_TEST(countDifferentU16(runInt(in, mrInt(levels, 2, 2.0f, 30.0f, c.bits, false)), in) == 0);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(multires_constant_image_unchanged) {
  for (auto const& g : {Geometry::make2D(97, 61), Geometry::make2D(5, 3)}) {
    const int L = maxLevels(g.nx(), g.ny());
    for (int levels : {1, L}) {
      BOOST_TEST_CONTEXT(describe(g) << ", levels " << levels) {
        const float c = 0.37f;
        const auto out = ref::multires(constantImage(g, c), mr(levels, 2, 2.0f, 0.05f));
        Index bad = 0;
        for (Index i = 0; i < out.numVoxels(); ++i) bad += out.data.data()[i] != c;
        BOOST_TEST(bad == 0);
        for (std::uint16_t v : {std::uint16_t(0), std::uint16_t(700), std::uint16_t(1023)}) {
          U16ImageView<> in("kortex::test::u16const", 1, g.ny(), g.nx());
          Kokkos::deep_copy(in, v);
          BOOST_TEST(countDifferentU16(runInt(in, mrInt(levels, 2, 2.0f, 30.0f, 10)), in) == 0);
        }
      }
    }
  }
}

// A linear ramp is reproduced by reduce (symmetric binomial: g_{k+1}(i) = g_k(2i)) and by expand
// (its even taps (1,6,1)/8 are symmetric, its odd taps average two neighbours), so away from the
// clamped border every Laplacian layer is 0. Border bands: the clamp makes at most 2 samples of
// each g_{k+1} per side non-linear (the band does not grow with k), and expand at fine p reads
// coarse p/2 - 1 .. p/2 + 1, so l_k is 0 from about 7 pixels in (measured: at most 6); 8 is
// safe. The ramp has dyadic slopes: every sum is exact in double, so the layers are exactly 0.
BOOST_AUTO_TEST_CASE(multires_layers_of_linear_ramp) {
  const Index nx = 97, ny = 61;
  const int levels = 3;
  HostImage ramp("kortex::test::ramp", Geometry::make2D(nx, ny));
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x) ramp.data(0, y, x) = 0.5f + float(x) / 64.0f - float(y) / 32.0f;
  const auto layers = ref::multiresLayers(ramp, mr(levels, 2, 2.0f, 0.05f));
  const auto sizes = levelSizes(nx, ny, levels);
  BOOST_TEST(layers.size() == std::size_t(levels + 1));
  for (std::size_t k = 0; k < layers.size(); ++k) {
    BOOST_TEST(layers[k].geometry.dimension == 2);
    BOOST_TEST(layers[k].geometry.nx() == sizes[k].nx);
    BOOST_TEST(layers[k].geometry.ny() == sizes[k].ny);
  }
  const Index margin = 8;
  Index checked = 0, nonzero = 0;
  for (int k = 0; k < levels; ++k) {
    auto const& l = layers[std::size_t(k)];
    for (Index y = margin; y < l.geometry.ny() - margin; ++y)
      for (Index x = margin; x < l.geometry.nx() - margin; ++x, ++checked)
        nonzero += l.data(0, y, x) != 0.0f;
  }
  BOOST_TEST(checked > 2000);  // levels 0 and 1 have interiors of 81x45 and 33x15 pixels
  BOOST_TEST(nonzero == 0);
  // At the border the clamp rule breaks linearity: per axis g_1(0) = (11 g(0) + 4 g(1) + g(2)) / 16
  // differs from g(0) on a ramp, and l_0 at the corner is not 0.
  BOOST_TEST(layers[0].data(0, 0, 0) != 0.0f);
  // g_L sits at the ramp's mean level in its interior: g_L(i, j) = ramp(2^L i, 2^L j).
  auto const& gL = layers.back();
  BOOST_TEST(gL.data(0, 3, 5) == 0.5f + 40.0f / 64.0f - 24.0f / 32.0f);

  // A constant image: every Laplacian layer is exactly 0 and g_L the constant.
  const auto flat = ref::multiresLayers(constantImage(Geometry::make2D(23, 17), 0.37f), mr(3, 2, 2.0f, 0.05f));
  Index bad = 0;
  for (std::size_t k = 0; k < flat.size(); ++k)
    for (Index i = 0; i < flat[k].numVoxels(); ++i)
      bad += flat[k].data.data()[i] != (k + 1 < flat.size() ? 0.0f : 0.37f);
  BOOST_TEST(bad == 0);
}

BOOST_AUTO_TEST_CASE(multires_layers_match_brute_force) {
  const auto img = structuredImage(Geometry::make2D(13, 11), 3);
  const auto layers = ref::multiresLayers(img, mr(2, 1, 1.0f, 0.1f));
  Grid<double> g = toGrid(img);
  for (std::size_t k = 0; k < layers.size(); ++k) {
    Grid<double> expected = g;
    if (k + 1 < layers.size()) {
      const Grid<double> next = bruteReduce(g);
      const Grid<double> e = bruteExpand(next, g.nx, g.ny);
      for (std::size_t i = 0; i < expected.v.size(); ++i) expected.v[i] -= e.v[i];
      g = next;
    }
    double err = 0.0;
    for (Index y = 0; y < expected.ny; ++y)
      for (Index x = 0; x < expected.nx; ++x)
        err = std::max(err, std::abs(double(layers[k].data(0, y, x)) - expected.at(x, y)));
    BOOST_TEST(err <= kRoundingTol);
  }
}

BOOST_AUTO_TEST_CASE(multires_matches_brute_force_float) {
  struct Case {
    Index nx, ny;
    int levels, radius;
    float sigmaS, sigmaR;
  };
  for (auto const& c : {Case{4, 4, 1, 1, 1.0f, kInf}, Case{4, 4, 1, 2, 1.5f, 0.2f}, Case{7, 5, 2, 2, 2.0f, kInf},
                        Case{7, 5, 2, 1, 1.0f, 0.1f}, Case{13, 11, 3, 3, 1.5f, 0.05f}}) {
    BOOST_TEST_CONTEXT(c.nx << "x" << c.ny << " L=" << c.levels << " r=" << c.radius << " sr=" << c.sigmaR) {
      const auto img = randomImage(Geometry::make2D(c.nx, c.ny), 5);
      const auto p = mr(c.levels, c.radius, c.sigmaS, c.sigmaR);
      const auto out = ref::multires(img, p);
      const Grid<double> expected = bruteMultires(toGrid(img), p);
      double err = 0.0;
      for (Index y = 0; y < c.ny; ++y)
        for (Index x = 0; x < c.nx; ++x)
          err = std::max(err, std::abs(double(out.data(0, y, x)) - expected.at(x, y)));
      BOOST_TEST(err <= kRoundingTol);
      BOOST_TEST(countDifferent(out, img) > 0);  // it filtered something
    }
  }
}

BOOST_AUTO_TEST_CASE(multires_matches_brute_force_integer) {
  struct Case {
    Index nx, ny;
    int levels, radius;
    float sigmaS, sigmaR;
    int bits;
    std::uint32_t maxValue;
  };
  // sigma_s = 1000 makes every closeness entry 2^15, and sigma_r = 0.8493218 (2 sigma_r^2 =
  // 1/ln 2) gives similarities 2^15, 2^14, 2^11, 2^6: small sums of powers of two, where
  // num / den often lands exactly halfway between two integers.
  IntStats total;
  Index beyondMaxValue = 0;  // cases where a layer difference > maxValue got a nonzero weight
  for (auto const& c : {Case{4, 4, 1, 1, 1.0f, kInf, 10, 1023}, Case{9, 7, 2, 2, 2.0f, 20.0f, 10, 1023},
                        Case{13, 11, 3, 1, 1.0f, 60.0f, 0, 1023}, Case{13, 11, 3, 2, 1.5f, 3000.0f, 15, 32767},
                        Case{16, 16, 2, 1, 1000.0f, 0.8493218f, 3, 7}}) {
    IntStats stats;
    Index changed = 0;
    const std::int64_t maxValue = (std::int64_t(1) << (c.bits > 0 ? c.bits : bitsFor(c.maxValue))) - 1;
    for (Pattern pattern : {Pattern::Random, Pattern::Structured, Pattern::Checker}) {
      BOOST_TEST_CONTEXT(c.nx << "x" << c.ny << " L=" << c.levels << " r=" << c.radius << " sr=" << c.sigmaR
                              << " bits=" << c.bits << " pattern " << int(pattern)) {
        const auto in = u16Image(c.nx, c.ny, c.maxValue, 9, pattern);
        const auto p = mrInt(c.levels, c.radius, c.sigmaS, c.sigmaR, c.bits);
        const auto out = runInt(in, p);
        const Grid<std::int64_t> expected = bruteMultires(toGrid(in), p, maxValue, &stats);
        Index mismatches = 0;
        for (Index y = 0; y < c.ny; ++y)
          for (Index x = 0; x < c.nx; ++x) mismatches += std::int64_t(out(0, y, x)) != expected.at(x, y);
        BOOST_TEST(mismatches == 0);
        changed += countDifferentU16(out, in);
      }
    }
    BOOST_TEST(changed > 0);  // it filtered something
    BOOST_TEST_MESSAGE("sr=" << c.sigmaR << ": clamped " << stats.clamped << " (high " << stats.clampedHigh << "), ties -" << stats.negativeTies
                             << " +" << stats.positiveTies << ", max weighted diff " << stats.maxWeightedDiff);
    total.clamped += stats.clamped;
    if (c.bits == 0) total.clampedHigh += stats.clampedHigh;  // automatic bit depth reached its top
    total.negativeTies += stats.negativeTies;
    total.positiveTies += stats.positiveTies;
    beyondMaxValue += stats.maxWeightedDiff > maxValue;
  }
  // The cases exercise the clamp of the reconstruction (at the top of an automatic bit depth
  // too), the rounding of exact halves on both sides of zero, and similarity weights for
  // differences beyond maxValue (up to 2 maxValue).
  BOOST_TEST(total.clamped > 0);
  BOOST_TEST(total.clampedHigh > 0);
  BOOST_TEST(total.negativeTies > 0);
  BOOST_TEST(total.positiveTies > 0);
  BOOST_TEST(beyondMaxValue > 0);
}

BOOST_AUTO_TEST_CASE(multires_bad_input_rejected) {
  const auto img = randomImage(Geometry::make2D(97, 61), 1);
  const int L = maxLevels(97, 61);
  auto hasText = [](std::string const& what) {
    return [what](InvalidArgument const& e) { return mentions(e, what); };
  };
  // The structure the filter needs (checked here; parameters are the pipeline's, tstPipeline):
  // levels that fit a 2D image.
  BOOST_CHECK_EXCEPTION(ref::multires(img, mr(L + 1, 2, 2.0f, 0.05f)), InvalidArgument, hasText("pyramid"));
  BOOST_CHECK_EXCEPTION(ref::multiresLayers(img, mr(L + 1, 2, 2.0f, 0.05f)), InvalidArgument,
                        hasText("pyramid"));
  BOOST_CHECK_THROW(ref::multires(img, mr(0, 2, 2.0f, 0.05f)), InvalidArgument);
  BOOST_CHECK_NO_THROW(ref::multires(img, mr(L, 2, 2.0f, 0.05f)));
  const auto vol = randomImage(Geometry::make3D(9, 8, 3), 1);
  BOOST_CHECK_THROW(ref::multires(vol, mr(1, 1, 1.0f, 0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::multiresLayers(vol, mr(1, 1, 1.0f, 0.1f)), InvalidArgument);
  // Float views: mismatched extents and aliasing.
  {
    ImageView<> wrong("wrong", 1, 61, 96);
    BOOST_CHECK_THROW(ref::multires(img.data, wrong, mr(2, 1, 1.0f, 0.1f)), InvalidArgument);
    BOOST_CHECK_THROW(ref::multires(img.data, img.data, mr(2, 1, 1.0f, 0.1f)), InvalidArgument);
  }

  // Integer pipeline.
  const auto in = u16Image(9, 8, 1023, 3);
  const auto pInt = mrInt(2, 1, 1.0f, 30.0f, 10);
  {
    // Value above 2^bits - 1: refused with the value and its position, nothing written.
    auto big = u16Image(9, 8, 1023, 3);
    big(0, 2, 3) = 1024;
    big(0, 5, 1) = 4000;  // later in memory order: the first one is reported
    U16ImageView<> out("kortex::test::u16out", 1, 8, 9);
    Kokkos::deep_copy(out, std::uint16_t(7));
    BOOST_CHECK_EXCEPTION(ref::multires(big, out, pInt), InvalidArgument, [](InvalidArgument const& e) {
      return mentions(e, "1024") && mentions(e, "(3,2)") && mentions(e, "10-bit");
    });
    // Automatic bit depth: values up to 2^15 - 1 are accepted, larger ones refused.
    auto pAuto = pInt;
    pAuto.bits = 0;
    BOOST_CHECK_NO_THROW(ref::multires(big, out, pAuto));
    Kokkos::deep_copy(out, std::uint16_t(7));
    big(0, 4, 6) = 40000;
    BOOST_CHECK_EXCEPTION(ref::multires(big, out, pAuto), InvalidArgument,
                          [](InvalidArgument const& e) { return mentions(e, "40000") && mentions(e, "(6,4)"); });
    Index touched = 0;
    for (std::size_t i = 0; i < out.span(); ++i) touched += out.data()[i] != 7;
    BOOST_TEST(touched == 0);
  }
  {
    auto p = pInt;
    p.pyramid = PyramidVariant::Packed16;  // accepted: the reference has no pyramid variants
    BOOST_CHECK_NO_THROW(runInt(in, p));
  }
  // 3D, too many levels, mismatched extents, aliasing.
  {
    U16ImageView<> vol16("kortex::test::vol16", 3, 8, 9), volOut("kortex::test::vol16out", 3, 8, 9);
    BOOST_CHECK_EXCEPTION(ref::multires(vol16, volOut, pInt), InvalidArgument, hasText("pyramid"));
    BOOST_CHECK_EXCEPTION(runInt(in, mrInt(maxLevels(9, 8) + 1, 1, 1.0f, 30.0f, 10)), InvalidArgument,
                          hasText("pyramid"));
    U16ImageView<> wrong("kortex::test::wrong16", 1, 8, 10);
    BOOST_CHECK_THROW(ref::multires(in, wrong, pInt), InvalidArgument);
    BOOST_CHECK_THROW(ref::multires(in, in, pInt), InvalidArgument);
  }
}
