// CPU reference (reference_cpu/): bilateral filter and non-local means against brute-force
// evaluations of the definitions in core/Bilateral.hpp and core/Nlm.hpp written here again
// (direct loops, double), plus analytic properties and bad-input handling.
#define BOOST_TEST_MODULE ReferenceCpu
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Phantom.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Nlm.hpp"

#include <cmath>
#include <limits>
#include <string>
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

BilateralParams bf(int radius, float sigmaS, float sigmaR) {
  BilateralParams p;
  p.radius = radius;
  p.sigmaSpatial = sigmaS;
  p.sigmaRange = sigmaR;
  return p;
}

NlmParams nlmParams(int patchRadius, int searchRadius, float h) {
  NlmParams p;
  p.patchRadius = patchRadius;
  p.searchRadius = searchRadius;
  p.h = h;
  return p;
}

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

BOOST_AUTO_TEST_CASE(non_finite_input_rejected) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf}) {
    auto img = randomImage(Geometry::make3D(7, 6, 5), 1);
    img.data(1, 2, 3) = bad;  // (z, y, x): voxel (x,y,z) = (3,2,1)
    HostImage out = emptyLike(img);
    Kokkos::deep_copy(out.data, -5.0f);
    auto check = [](InvalidArgument const& e) {
      return mentions(e, "NaN or Inf") && mentions(e, "(3,2,1)");
    };
    BOOST_CHECK_EXCEPTION(ref::bilateral(img.data, out.data, bf(1, 1.0f, 0.1f)), InvalidArgument, check);
    BOOST_CHECK_EXCEPTION(ref::nlm(img.data, out.data, nlmParams(1, 2, 0.1f)), InvalidArgument, check);
    BOOST_CHECK_EXCEPTION(ref::nlm(img, nlmParams(1, 2, 0.1f)), InvalidArgument, check);
    // Nothing was written to the output.
    Index touched = 0;
    for (Index i = 0; i < out.numVoxels(); ++i) touched += out.data.data()[i] != -5.0f;
    BOOST_TEST(touched == 0);
  }
}

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

BOOST_AUTO_TEST_CASE(bad_parameters_rejected) {
  const auto img2 = randomImage(Geometry::make2D(9, 12), 1);
  const auto img3 = randomImage(Geometry::make3D(9, 12, 6), 1);
  // Radius must be smaller than every filtered extent.
  BOOST_CHECK_THROW(ref::bilateral(img2, bf(9, 1.0f, 0.1f)), InvalidArgument);
  BOOST_CHECK_NO_THROW(ref::bilateral(img2, bf(8, 1.0f, 0.1f)));
  BOOST_CHECK_THROW(ref::bilateral(img3, bf(6, 1.0f, 0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::nlm(img3, nlmParams(1, 6, 0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::nlm(img3, nlmParams(6, 1, 0.1f)), InvalidArgument);
  BOOST_CHECK_NO_THROW(ref::nlm(img3, nlmParams(1, 5, 0.1f)));
  BOOST_CHECK_THROW(ref::nlm(img2, nlmParams(1, -1, 0.1f)), InvalidArgument);
  // h must be positive and finite.
  for (float h : {0.0f, -0.1f, std::numeric_limits<float>::quiet_NaN(), kInf})
    BOOST_CHECK_THROW(ref::nlm(img2, nlmParams(1, 2, h)), InvalidArgument);
  // Sigmas: spatial positive finite, range positive (inf allowed).
  BOOST_CHECK_THROW(ref::bilateral(img2, bf(2, 0.0f, 0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::bilateral(img2, bf(2, 1.0f, 0.0f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::bilateral(img2, bf(2, 1.0f, -0.1f)), InvalidArgument);
  BOOST_CHECK_THROW(ref::bilateral(img2, bf(-1, 1.0f, 0.1f)), InvalidArgument);
}
