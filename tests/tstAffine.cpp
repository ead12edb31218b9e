#define BOOST_TEST_MODULE Affine
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Affine.hpp"
#include "core/Apply.hpp"
#include "core/Intensity.hpp"
#include "core/Phantom.hpp"
#include "gpu/affine/Affine.hpp"
#include "reference_cpu/Affine.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace kortex;

namespace {

// Central differences of the reference NCC (double) vs its analytic gradient, relative to the
// largest gradient component: truncation is O(h^2) ~ 1e-8; voxels crossing a trilinear cell face
// within h add O(h) ~ 1e-4 of a smooth image's gradient jump; a wrong term is O(1).
constexpr double kFdTol = 2e-3;
// Kokkos vs the reference, both double throughout: NCC in [-1, 1] differs by the order of the
// interpolation arithmetic and of the sums (~1e-16 per term over ~1e4 voxels; FMA contraction on
// GPUs included), far below this bound; float interpolation would miss it (~1e-7 per voxel).
constexpr double kMetricTol = 1e-10;
// ... and the gradient, relative to its largest component (the same rounding, amplified by the
// cancellation in S_fk - Sf S_1k / n).
constexpr double kGradTol = 1e-8;
// Overlap counts: both classify p_m computed in double by the same formula; only a point within
// rounding of the box face can differ.
constexpr Index kCountTol = 2;
// Resampled values in [0, 1]: both interpolate in double and round to float once (one float ulp
// where the two double values straddle a rounding boundary).
constexpr double kResampleTol = 1e-7;
// Known affine recovered: RMS over the fixed grid of the mapped-point error, voxels. Analytic
// phantom (no interpolation bias), so the optimum is the truth up to the trilinear model of the
// moving image: errors of a few hundredths of a voxel; a level that did not converge is >= 0.5.
constexpr double kRecoveryTol = 0.3;
// Reference and Kokkos optimisers take the same decisions; their metrics differ in the last
// digits only, which the fixed-length steps can amplify near convergence (steps of <= minStep =
// 0.01 voxel then differ).
constexpr double kBackendTol = 0.01;

// MI (Parzen-window histogram, core/Affine.hpp "Mutual information"): central differences against the
// analytic gradient, relative to its largest component. The cubic window is C2, but a bin's weight
// moves with m, so h ~1e-5 voxel still sees the trilinear cell faces (as NCC) and the histogram's
// curvature: measured 3e-4; a wrong term is O(1).
constexpr double kMiFdTol = 5e-3;
// Kokkos vs the reference: the Kokkos histogram rounds each w beta3 to 2^-30 (relative 1e-9 of a
// voxel's weight; MI moves by ~1e-9 over ~1e4 voxels); the gradient's sums are double in another order.
constexpr double kMiTol = 1e-7;
// ... the gradient, relative to its largest component: a sparsely filled bin's count carries ~0.5 unit
// of 2^-30 per contribution, ~1e-6 of its log ratio (measured 1.4e-6 at 32 bins).
constexpr double kMiGradTol = 1e-5;
// The moving image inverted in float (1 - v rounds by up to 6e-8): MI and its gradient mirror exactly
// in real numbers; that rounding moves them (measured: MI 1.1e-9 relative, the gradient 4.9e-8).
constexpr double kMirrorTol = 1e-6;

// ---- analytic phantom ---------------------------------------------------------------------------

struct Blob {
  double value, cx, cy, cz, rx, ry, rz;  // centre offset and radii as fractions of the extent
};
// An asymmetric "head": shell, interior and three blobs at irregular places (no symmetry that
// would make several transforms equally good).
const Blob kBlobs[] = {{1.0, 0.0, 0.0, 0.0, 0.30, 0.36, 0.26},
                       {-0.5, 0.02, -0.03, 0.01, 0.22, 0.28, 0.19},
                       {0.6, 0.10, 0.12, -0.05, 0.06, 0.09, 0.05},
                       {0.8, -0.12, -0.05, 0.08, 0.05, 0.05, 0.10},
                       {0.4, 0.05, -0.18, -0.06, 0.08, 0.04, 0.06}};

// Texture: 60 smaller blobs at deterministic pseudo-random places inside the head (radii 2-8 % of
// the extent), so that the image has structure everywhere, as a brain does.
std::vector<Blob> const& blobs() {
  static const std::vector<Blob> all = [] {
    std::vector<Blob> b(std::begin(kBlobs), std::end(kBlobs));
    SplitMix64 rng(20240607);
    while (b.size() < 65) {
      const double cx = 0.5 * (rng.uniform() - 0.5), cy = 0.6 * (rng.uniform() - 0.5),
                   cz = 0.45 * (rng.uniform() - 0.5);
      if ((cx / 0.25) * (cx / 0.25) + (cy / 0.3) * (cy / 0.3) + (cz / 0.22) * (cz / 0.22) > 1.0) continue;
      const double v = (rng.uniform() < 0.5 ? -1.0 : 1.0) * (0.2 + 0.4 * rng.uniform());
      b.push_back({v, cx, cy, cz, 0.02 + 0.06 * rng.uniform(), 0.02 + 0.06 * rng.uniform(),
                   0.02 + 0.06 * rng.uniform()});
    }
    return b;
  }();
  return all;
}

// F(q) at q in index coordinates of a grid of n^3 voxels: smooth-edged ellipsoids (logistic edge
// about 1 voxel wide).
double phantomValue(double x, double y, double z, double n) {
  const double c = 0.5 * (n - 1.0);
  double v = 0.0;
  for (Blob const& b : blobs()) {
    const double dx = (x - c - b.cx * n) / (b.rx * n), dy = (y - c - b.cy * n) / (b.ry * n),
                 dz = (z - c - b.cz * n) / (b.rz * n);
    const double r = std::sqrt(dx * dx + dy * dy + dz * dz);
    const double dist = (r - 1.0) * std::min({b.rx, b.ry, b.rz}) * n;  // ~voxels
    if (dist > 30.0) continue;
    v += b.value / (1.0 + std::exp(dist));
  }
  return v;
}

// Image on `g` whose voxel p holds F(T(p)) (T = identity: F itself); F lives on an n^3 grid.
HostImage phantom(Geometry const& g, AffineTransform const& t, double n) {
  HostImage img("phantom", g);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const auto q = t.apply({double(x), double(y), double(z)});
        img.data(z, y, x) = static_cast<float>(phantomValue(q[0], q[1], q[2], n));
      }
  return img;
}

std::array<double, 9> matmul(std::array<double, 9> const& a, std::array<double, 9> const& b) {
  std::array<double, 9> r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) r[3 * i + j] += a[3 * i + k] * b[3 * k + j];
  return r;
}

std::array<double, 9> rotZ(double deg) {
  const double a = deg * M_PI / 180.0, c = std::cos(a), s = std::sin(a);
  return {c, -s, 0, s, c, 0, 0, 0, 1};
}
std::array<double, 9> rotX(double deg) {
  const double a = deg * M_PI / 180.0, c = std::cos(a), s = std::sin(a);
  return {1, 0, 0, 0, c, -s, 0, s, c};
}

// The known affine of the recovery tests: rotation 10 deg about z then 4 deg about x, scale 1.1,
// shear 0.05 (x by y), translation (5, -4, 3) voxels.
AffineTransform truthTransform(Geometry const& g) {
  AffineTransform t = AffineTransform::identity(g);
  const std::array<double, 9> scaleShear{1.1, 0.055, 0, 0, 1.1, 0, 0, 0, 1.1};
  t.matrix = matmul(matmul(rotX(4.0), rotZ(10.0)), scaleShear);
  t.translation = {5.0, -4.0, 3.0};
  return t;
}

struct PhantomPair {
  HostImage moving, fixed;
  AffineTransform truth;
};

PhantomPair phantomPair(Index n) {
  const Geometry g = Geometry::make3D(n, n, n);
  PhantomPair p;
  p.truth = truthTransform(g);
  p.moving = phantom(g, AffineTransform::identity(g), double(n));
  p.fixed = phantom(g, p.truth, double(n));
  return p;
}

template <class F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (InvalidArgument const& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

bool contains(std::string const& s, std::string const& part) { return s.find(part) != std::string::npos; }

// A moving volume and a smaller fixed volume mapped well inside it (overlap 1, Omega frozen
// under small perturbations), with a generic transform.
struct FdSetup {
  HostImage moving, fixed;
  AffineTransform t;
};

FdSetup fdSetup() {
  FdSetup s;
  const Geometry gm = Geometry::make3D(40, 36, 32);
  const Geometry gf = Geometry::make3D(22, 20, 18);
  AffineTransform toMoving = AffineTransform::identity(gf);  // fixed content: F at a scaled pose
  toMoving.matrix = matmul(rotZ(-7.0), {1.05, 0.02, 0, 0, 0.97, 0, 0.01, 0, 1.02});
  toMoving.translation = {9.0, 8.0, 7.0};
  s.moving = phantom(gm, AffineTransform::identity(gm), 36.0);
  s.fixed = phantom(gf, toMoving, 36.0);
  s.t = AffineTransform::identity(gf);
  s.t.matrix = matmul(rotZ(5.0), {0.95, 0.03, -0.02, 0.01, 1.04, 0.02, 0, -0.03, 1.0});
  s.t.translation = {9.6, 7.7, 6.8};
  return s;
}

// The image's intensities mapped linearly onto [0, 1] (what the registration's normalisation gives MI);
// `invert`: onto [1, 0] (another contrast: bright and dark swapped).
HostImage unitRange(HostImage const& img, bool invert = false) {
  HostImage out("unit", img.geometry);
  const float* p = img.data.data();
  const auto [lo, hi] = std::minmax_element(p, p + img.numVoxels());
  for (Index i = 0; i < img.numVoxels(); ++i) {
    const float v = (p[i] - *lo) / (*hi - *lo);
    out.data.data()[i] = invert ? 1.0f - v : v;
  }
  return out;
}

}  // namespace

// ---- intensity normalisation ----------------------------------------------------------------------

// The radix selection against sorting: every percentile of the definition equals the one computed
// from the sorted values, on values with negatives, signed zeros, ties, denormals and a wide range.
BOOST_AUTO_TEST_CASE(percentile_matches_sorting) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v;
  for (int i = 0; i < 20000; ++i) {
    const float x = u(rng);
    v.push_back(i % 7 == 0 ? 0.0f : (i % 11 == 0 ? -0.0f : (i % 13 == 0 ? 3.0f : x * std::pow(10.0f, float(i % 9) - 4.0f))));
  }
  v.push_back(std::numeric_limits<float>::denorm_min());
  v.push_back(-std::numeric_limits<float>::max());
  v.push_back(std::numeric_limits<float>::max());
  std::vector<float> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (double q : {0.0, 0.5, 1.0, 13.7, 50.0, 99.5, 99.99, 100.0}) {
    const double h = (double(sorted.size()) - 1.0) * q / 100.0;
    const std::size_t k = static_cast<std::size_t>(std::floor(h));
    const double lo = sorted[k], hi = sorted[std::min(k + 1, sorted.size() - 1)];
    BOOST_TEST_INFO("q " << q);
    BOOST_TEST(percentile(v, q) == lo + (h - double(k)) * (hi - lo));
  }
}

BOOST_AUTO_TEST_CASE(intensity_percentiles_and_errors) {
  HostImage img("ramp", Geometry::make3D(10, 10, 10));
  for (Index i = 0; i < 1000; ++i) img.data.data()[i] = static_cast<float>(i);
  // NumPy: np.percentile(arange(1000), 0.5) = 4.995, 99.5 -> 994.005.
  const IntensityWindow w = intensityWindow(img, IntensityParams{}, "ramp");
  BOOST_TEST(w.lo == 4.995, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(w.hi == 994.005, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(!w.fellBack);
  const HostImage n = normaliseIntensity(img, IntensityParams{}, "ramp");
  BOOST_TEST(n.data.data()[0] == 0.0f);     // clamped below
  BOOST_TEST(n.data.data()[999] == 1.0f);   // clamped above
  BOOST_TEST(n.data.data()[500] == float((500 - 4.995) / (994.005 - 4.995)),
             boost::test_tools::tolerance(1e-6f));

  // 99.6 % of the voxels share one value: the window falls back to [min, max].
  HostImage spiky("spiky", Geometry::make3D(10, 10, 10));
  Kokkos::deep_copy(spiky.data, 2.0f);
  for (int i = 0; i < 4; ++i) spiky.data.data()[i * 7] = 10.0f + i;
  const IntensityWindow ws = intensityWindow(spiky, IntensityParams{}, "spiky");
  BOOST_TEST(ws.fellBack);
  BOOST_TEST(ws.lo == 2.0);
  BOOST_TEST(ws.hi == 13.0);

  HostImage flat("flat", Geometry::make3D(8, 8, 8));
  Kokkos::deep_copy(flat.data, 3.0f);
  BOOST_TEST(contains(errorOf([&] { normaliseIntensity(flat, {}, "moving image"); }),
                      "moving image is constant"));
  HostImage bad = normaliseIntensity(img, {}, "x");
  bad.data(3, 4, 5) = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(contains(errorOf([&] { intensityWindow(bad, {}, "fixed image"); }), "fixed image contains NaN voxels"));
  bad.data(3, 4, 5) = std::numeric_limits<float>::infinity();
  BOOST_TEST(contains(errorOf([&] { intensityWindow(bad, {}, "fixed image"); }), "infinite voxels"));
  IntensityParams p;
  p.pLow = 60;
  p.pHigh = 50;
  BOOST_CHECK_THROW(intensityWindow(img, p, "x"), InvalidArgument);
}

// Bias correction (core/Intensity.hpp): a head of one value comes out 1 everywhere in it (its local
// mean is itself) and 0 outside; a two-class head times a smooth bias of +-20 % comes out close to the
// same head without the bias (about a third of the bias is left in the ratio of the two corrected images);
// a non-positive image and a bad sigma are refused.
constexpr double kBiasConstantTol = 1e-5;    // float rounding of v / S with S = v
constexpr double kBiasLeftFraction = 0.45;   // SD of log(ratio) / SD of log(bias): edges and the tissue pattern (measured 0.33)
BOOST_AUTO_TEST_CASE(bias_correction_removes_a_smooth_bias) {
  const int n = 100, nz = 80;  // 200 x 200 x 160 mm: a head's size
  Geometry g = Geometry::make3D(n, n, nz);
  g.spacing = {2.0, 2.0, 2.0};
  auto head = [&](int x, int y, int z) {
    return std::pow(x - 50.0, 2) + std::pow(y - 50.0, 2) + std::pow((z - 40.0) * 1.2, 2) < 44.0 * 44.0;
  };
  auto bias = [&](int x, int y) { return 1.0 + 0.2 * std::sin(M_PI * x / n + 0.4) * std::sin(M_PI * y / n + 1.1); };
  HostImage flat("flat head", g), plain("head", g), biased("biased head", g);
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        const bool in = head(x, y, z);
        const double tissue = ((x / 6 + y / 6 + z / 6) % 2) ? 1.0 : 0.6;
        flat.data(z, y, x) = in ? 0.8f : 0.0f;
        plain.data(z, y, x) = in ? float(tissue) : 0.0f;
        biased.data(z, y, x) = in ? float(tissue * bias(x, y)) : 0.0f;
      }
  const HostImage cf = biasCorrected(flat, 30.0, "flat"), cp = biasCorrected(plain, 30.0, "plain"),
                  cb = biasCorrected(biased, 30.0, "biased");
  // The spread as a standard deviation over the head: of log(ratio) against log(bias).
  double worstFlat = 0.0, sr = 0.0, srr = 0.0, sb = 0.0, sbb = 0.0;
  long count = 0;
  bool background = true;
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        if (!head(x, y, z)) {
          background = background && cf.data(z, y, x) == 0.0f && cb.data(z, y, x) == 0.0f;
          continue;
        }
        worstFlat = std::max(worstFlat, std::fabs(double(cf.data(z, y, x)) - 1.0));
        const double r = std::log(double(cb.data(z, y, x)) / double(cp.data(z, y, x))), b = std::log(bias(x, y));
        sr += r;
        srr += r * r;
        sb += b;
        sbb += b * b;
        ++count;
      }
  const double sdLeft = std::sqrt(srr / count - std::pow(sr / count, 2)), sdBias = std::sqrt(sbb / count - std::pow(sb / count, 2));
  BOOST_TEST_MESSAGE("SD of log bias " << sdBias << ", left after the correction " << sdLeft);
  BOOST_TEST(worstFlat <= kBiasConstantTol);
  BOOST_TEST(background);
  BOOST_TEST(sdLeft <= kBiasLeftFraction * sdBias);
  // Through the normalisation: the window of the corrected image.
  IntensityParams p;
  p.biasSigmaMm = 30.0;
  const HostImage nb = normaliseIntensity(biased, p, "biased");
  BOOST_TEST(nb.data(40, 50, 50) > 0.0f);
  HostImage negative("negative", g);
  Kokkos::deep_copy(negative.data, -1.0f);
  negative.data(3, 3, 3) = -2.0f;
  BOOST_TEST(contains(errorOf([&] { normaliseIntensity(negative, p, "moving image"); }),
                      "moving image: the bias correction needs positive intensities"));
  p.biasSigmaMm = -1.0;
  BOOST_TEST(contains(errorOf([&] { p.validate(); }), "the bias correction's sigma"));
  p.biasSigmaMm = std::numeric_limits<double>::quiet_NaN();
  BOOST_CHECK_THROW(p.validate(), InvalidArgument);
}

// ---- transforms ---------------------------------------------------------------------------------------

// affineMean (the symmetric mode's affine part): the mean of a map with itself is the map; of two
// translations their midpoint; of two rotations about one axis the rotation by the mean angle (with
// different translations); mean(b^-1, a^-1) is mean(a, b)^-1 (what makes the symmetric mode's affine
// part inverse-consistent); a singular map is refused.
BOOST_AUTO_TEST_CASE(affine_mean_is_inverse_consistent) {
  auto rotZ = [](double angle, double tx, double ty, double tz) {
    const double c = std::cos(angle), s = std::sin(angle);
    return Matrix4{c, -s, 0, tx, s, c, 0, ty, 0, 0, 1, tz, 0, 0, 0, 1};
  };
  auto maxDiff4 = [](Matrix4 const& a, Matrix4 const& b) {
    double d = 0.0;
    for (std::size_t i = 0; i < 16; ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
  };
  auto inv = [](Matrix4 const& m) { return inverseAffine(m, "test"); };
  const Matrix4 a{1.1, 0.05, -0.02, 3.0, 0.01, 0.95, 0.1, -2.0, 0.03, -0.08, 1.02, 5.0, 0, 0, 0, 1};
  const Matrix4 b{0.98, -0.04, 0.03, -1.0, 0.02, 1.05, -0.06, 4.0, -0.05, 0.07, 0.97, 2.5, 0, 0, 0, 1};
  BOOST_TEST(maxDiff4(affineMean(a, a), a) <= 1e-12);
  BOOST_TEST(maxDiff4(affineMean(rotZ(0, 2, 4, -6), rotZ(0, 4, 0, 2)), rotZ(0, 3, 2, -2)) <= 1e-12);
  // Rotations about z through the origin by 10 and 30 degrees: the mean turns by 20 degrees.
  BOOST_TEST(maxDiff4(affineMean(rotZ(0.1745329251994330, 0, 0, 0), rotZ(0.5235987755982988, 0, 0, 0)),
                      rotZ(0.3490658503988659, 0, 0, 0)) <= 1e-12);
  BOOST_TEST(maxDiff4(affineMean(inv(b), inv(a)), inv(affineMean(a, b))) <= 1e-12);
  const Matrix4 singular{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  BOOST_CHECK_THROW(affineMean(singular, a), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(world_matrices_and_header_alignment) {
  Geometry gf = Geometry::make3D(30, 25, 20);
  gf.spacing = {1.2, 0.9, 2.5};
  gf.origin = {-20.0, 35.0, 7.0};
  const auto r = matmul(rotZ(30.0), rotX(-20.0));
  gf.direction = r;
  Geometry gm = Geometry::make3D(16, 40, 22);
  gm.spacing = {2.0, 1.1, 1.3};
  gm.origin = {12.0, -8.0, 30.0};
  gm.direction = {0, 1, 0, -1, 0, 0, 0, 0, 1};  // axes permuted and flipped

  auto world = [](Geometry const& g, std::array<double, 3> const& p) {
    std::array<double, 3> w{};
    for (int i = 0; i < 3; ++i) {
      w[i] = g.origin[i];
      for (int j = 0; j < 3; ++j) w[i] += g.direction[3 * i + j] * g.spacing[j] * p[j];
    }
    return w;
  };
  // Header alignment: fixed voxel p and its mapped moving point are the same world point.
  const AffineTransform t0 = initialTransform(gf, gm);
  for (auto const& p : std::vector<std::array<double, 3>>{{0, 0, 0}, {29, 24, 19}, {3.5, 17.25, 8}}) {
    const auto wf = world(gf, p), wm = world(gm, t0.apply(p));
    for (int i = 0; i < 3; ++i) BOOST_TEST(wf[i] == wm[i], boost::test_tools::tolerance(1e-9));
  }
  // A generic transform: world matrix maps world(p) to world(T p); round trip back.
  AffineTransform t = t0;
  t.matrix = matmul(t.matrix, {1.1, 0.05, 0, -0.02, 0.9, 0.1, 0, 0.03, 1.05});
  t.translation = {1.5, -2.0, 0.7};
  const Matrix4 w = toWorldMatrix(t, gf, gm);
  const std::array<double, 3> p{7.0, 11.0, 13.0};
  const auto wf = world(gf, p), wm = world(gm, t.apply(p));
  for (int i = 0; i < 3; ++i) {
    const double mapped = w[4 * i] * wf[0] + w[4 * i + 1] * wf[1] + w[4 * i + 2] * wf[2] + w[4 * i + 3];
    BOOST_TEST(mapped == wm[i], boost::test_tools::tolerance(1e-9));
  }
  const AffineTransform back = fromWorldMatrix(w, gf, gm);
  BOOST_TEST(rmsMappedPointDistance(back, t, gf) < 1e-9);
  BOOST_TEST(contains(itkTransformText(w), "Transform: AffineTransform_double_3_3"));
  BOOST_TEST(rmsMappedPointDistance(t, t, gf) == 0.0);
}

// ---- metric ----------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(reference_gradient_matches_finite_differences) {
  const FdSetup s = fdSetup();
  const AffineMetric m = ref::affineMetric(s.moving.data, s.fixed.data, s.t);
  BOOST_TEST_REQUIRE(m.overlap == 1.0);  // Omega cannot change under the perturbations below
  BOOST_TEST(m.value > 0.5);
  double gmax = 0.0;
  for (double g : m.gradient) gmax = std::max(gmax, std::abs(g));
  BOOST_TEST_REQUIRE(gmax > 0.0);
  for (int k = 0; k < 12; ++k) {
    const double h = k < 9 ? 1e-5 : 1e-4;  // ~1e-4 voxel of motion at the fixed grid's radius
    auto at = [&](double d) {
      auto theta = s.t.parameters();
      theta[k] += d;
      AffineTransform tt = s.t;
      tt.setParameters(theta);
      const AffineMetric mm = ref::affineMetric(s.moving.data, s.fixed.data, tt);
      BOOST_TEST_REQUIRE(mm.overlap == 1.0);
      return mm.value;
    };
    const double fd = (at(h) - at(-h)) / (2.0 * h);
    BOOST_TEST_INFO("parameter " << k << ": analytic " << m.gradient[k] << ", FD " << fd);
    BOOST_TEST(std::abs(fd - m.gradient[k]) <= kFdTol * gmax);
  }
}

BOOST_AUTO_TEST_CASE(reference_metric_properties) {
  const FdSetup s = fdSetup();
  // Same image, identity: NCC 1, zero gradient... up to rounding.
  const AffineMetric self = ref::affineMetric(s.moving.data, s.moving.data,
                                              AffineTransform::identity(s.moving.geometry));
  BOOST_TEST(self.value == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(self.overlap == 1.0);
  // Invariant to a positive linear change of either image's intensities.
  HostImage scaled("scaled", s.moving.geometry);
  for (Index i = 0; i < scaled.numVoxels(); ++i) scaled.data.data()[i] = 3.0f * s.moving.data.data()[i] + 0.25f;
  const AffineMetric a = ref::affineMetric(s.moving.data, s.fixed.data, s.t);
  const AffineMetric b = ref::affineMetric(scaled.data, s.fixed.data, s.t);
  BOOST_TEST(a.value == b.value, boost::test_tools::tolerance(1e-6));
  // Half the fixed grid pushed out of the moving volume along x.
  AffineTransform shifted = AffineTransform::identity(s.fixed.geometry);
  shifted.translation = {-11.0, 0.0, 0.0};
  const AffineMetric half = ref::affineMetric(s.moving.data, s.fixed.data, shifted);
  BOOST_TEST(half.overlap == 11.0 / 22.0, boost::test_tools::tolerance(1e-12));
  // Fully outside: empty overlap, NCC 0.
  shifted.translation = {100.0, 0.0, 0.0};
  const AffineMetric none = ref::affineMetric(s.moving.data, s.fixed.data, shifted);
  BOOST_TEST(none.count == 0);
  BOOST_TEST(none.value == 0.0);
}

BOOST_AUTO_TEST_CASE(reference_mi_gradient_matches_finite_differences) {
  const FdSetup s = fdSetup();
  const HostImage moving = unitRange(s.moving), fixed = unitRange(s.fixed);
  for (int bins : {16, 32}) {
    const AffineMetric m = ref::affineMutualInformation(moving.data, fixed.data, s.t, bins);
    BOOST_TEST_REQUIRE(m.overlap == 1.0);
    BOOST_TEST(m.value > 0.1);
    double gmax = 0.0;
    for (double g : m.gradient) gmax = std::max(gmax, std::abs(g));
    BOOST_TEST_REQUIRE(gmax > 0.0);
    for (int k = 0; k < 12; ++k) {
      const double h = k < 9 ? 1e-5 : 1e-4;
      auto at = [&](double d) {
        auto theta = s.t.parameters();
        theta[k] += d;
        AffineTransform tt = s.t;
        tt.setParameters(theta);
        return ref::affineMutualInformation(moving.data, fixed.data, tt, bins).value;
      };
      const double fd = (at(h) - at(-h)) / (2.0 * h);
      BOOST_TEST_INFO(bins << " bins, parameter " << k << ": analytic " << m.gradient[k] << ", FD " << fd);
      BOOST_TEST(std::abs(fd - m.gradient[k]) <= kMiFdTol * gmax);
    }
  }
}

BOOST_AUTO_TEST_CASE(reference_mi_properties) {
  const FdSetup s = fdSetup();
  const HostImage moving = unitRange(s.moving), fixed = unitRange(s.fixed), inverted = unitRange(s.moving, true);
  // MI sees through a change of contrast: the moving image inverted mirrors the histogram's columns
  // (u -> B - u, the window symmetric), the same MI and gradient; NCC changes sign.
  const AffineMetric a = ref::affineMutualInformation(moving.data, fixed.data, s.t, 32);
  const AffineMetric b = ref::affineMutualInformation(inverted.data, fixed.data, s.t, 32);
  BOOST_TEST(a.value == b.value, boost::test_tools::tolerance(kMirrorTol));
  double gmax = 0.0;
  for (double g : a.gradient) gmax = std::max(gmax, std::abs(g));
  for (int k = 0; k < 12; ++k) BOOST_TEST(std::abs(a.gradient[k] - b.gradient[k]) <= kMirrorTol * gmax);
  BOOST_TEST(ref::affineMetric(moving.data, fixed.data, s.t).value > 0.5);
  BOOST_TEST(ref::affineMetric(inverted.data, fixed.data, s.t).value < -0.5);
  // The image with itself: MI is its entropy's share, above any misaligned pose.
  const AffineTransform same = AffineTransform::identity(moving.geometry);
  const double self = ref::affineMutualInformation(moving.data, moving.data, same, 32).value;
  AffineTransform off = same;
  off.translation = {2.5, -1.5, 1.0};
  BOOST_TEST(self > ref::affineMutualInformation(moving.data, moving.data, off, 32).value);
  // Fully outside: no histogram, MI 0, zero gradient.
  off.translation = {100.0, 0.0, 0.0};
  const AffineMetric none = ref::affineMutualInformation(moving.data, fixed.data, off, 32);
  BOOST_TEST(none.count == 0);
  BOOST_TEST(none.value == 0.0);
  BOOST_TEST(none.gradient[9] == 0.0);
  for (int bins : {kMinMiBins - 1, kMaxMiBins + 1})
    BOOST_TEST(contains(errorOf([&] { ref::affineMutualInformation(moving.data, fixed.data, s.t, bins); }), "bins must be in"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_mi_matches_reference, Space, test::ExecutionSpaces) {
  const FdSetup s = fdSetup();
  const HostImage moving = unitRange(s.moving), fixed = unitRange(s.fixed);
  const auto md = test::toSpace<Space>(moving, "moving");
  const auto fd = test::toSpace<Space>(fixed, "fixed");
  AffineTransform partial = s.t;  // partial overlap
  partial.translation = {-6.3, 20.2, 3.1};
  // 128 bins: the histogram does not fit a device's team scratch and is summed in global memory.
  for (int bins : {8, 32, kMaxMiBins})
    for (AffineTransform const& t : {s.t, AffineTransform::identity(fixed.geometry), partial}) {
      const AffineMetric r = ref::affineMutualInformation(moving.data, fixed.data, t, bins);
      const AffineMetric k = gpu::affineMutualInformation(Space(), md, fd, t, bins);
      const AffineMetric again = gpu::affineMutualInformation(Space(), md, fd, t, bins);
      BOOST_TEST_INFO(bins << " bins, transform " << t << " on " << Space::name());
      BOOST_TEST(r.count == k.count);
      BOOST_TEST(std::abs(r.value - k.value) <= kMiTol);
      double gmax = 0.0, err = 0.0;
      for (int i = 0; i < 12; ++i) {
        gmax = std::max(gmax, std::abs(r.gradient[i]));
        err = std::max(err, std::abs(r.gradient[i] - k.gradient[i]));
        BOOST_TEST(k.gradient[i] == again.gradient[i]);  // the same bits run to run (integer histogram)
      }
      BOOST_TEST(k.value == again.value);
      BOOST_TEST(err <= kMiGradTol * gmax);
    }
}

// The field-of-view weight makes the metric continuous in theta: sliding the fixed grid across
// the moving grid's x faces by steps of 1e-4 voxel moves whole planes of voxels in and out of the
// overlap (at integer shifts), yet NCC changes by at most kContinuityTol per step. With a hard
// overlap (a ramp of width 1e-9), a plane entering changes NCC by 0.023 at once on this phantom.
BOOST_AUTO_TEST_CASE_TEMPLATE(metric_continuous_across_field_of_view_edge, Space, test::ExecutionSpaces) {
  constexpr double kContinuityTol = 1e-5;  // slope ~0.05 per voxel x 1e-4 step, with margin
  const FdSetup s = fdSetup();
  const auto md = test::toSpace<Space>(s.moving, "moving");
  const auto fd = test::toSpace<Space>(s.fixed, "fixed");
  AffineTransform t = AffineTransform::identity(s.fixed.geometry);
  double worstRef = 0.0, worstKokkos = 0.0;
  for (double shift : {-3.0, -4.0, 20.0}) {  // integer shifts: planes of voxels on the x faces
    AffineMetric prevR, prevK;
    for (int i = -3; i <= 3; ++i) {
      t.translation = {shift + 1e-4 * i, 0.0, 0.0};
      const AffineMetric r = ref::affineMetric(s.moving.data, s.fixed.data, t);
      const AffineMetric k = gpu::affineMetric(Space(), md, fd, t);
      if (i > -3) {
        worstRef = std::max(worstRef, std::abs(r.value - prevR.value));
        worstKokkos = std::max(worstKokkos, std::abs(k.value - prevK.value));
      }
      prevR = r;
      prevK = k;
    }
  }
  BOOST_TEST(worstRef <= kContinuityTol);
  BOOST_TEST(worstKokkos <= kContinuityTol);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_metric_matches_reference, Space, test::ExecutionSpaces) {
  const FdSetup s = fdSetup();
  const auto md = test::toSpace<Space>(s.moving, "moving");
  const auto fd = test::toSpace<Space>(s.fixed, "fixed");
  std::vector<AffineTransform> ts{s.t, AffineTransform::identity(s.fixed.geometry)};
  AffineTransform partial = s.t;  // partial overlap
  partial.translation = {-6.3, 20.2, 3.1};
  ts.push_back(partial);
  AffineTransform sameGrid = AffineTransform::identity(s.moving.geometry);  // exact grid points
  for (AffineTransform const& t : ts) {
    const AffineMetric r = ref::affineMetric(s.moving.data, s.fixed.data, t);
    const AffineMetric k = gpu::affineMetric(Space(), md, fd, t);
    BOOST_TEST_INFO("transform " << t << " on " << Space::name());
    BOOST_TEST(std::abs(r.count - k.count) <= kCountTol);
    BOOST_TEST(std::abs(r.value - k.value) <= kMetricTol);
    double gmax = 0.0, err = 0.0;
    for (int i = 0; i < 12; ++i) {
      gmax = std::max(gmax, std::abs(r.gradient[i]));
      err = std::max(err, std::abs(r.gradient[i] - k.gradient[i]));
    }
    BOOST_TEST(err <= kGradTol * gmax);
  }
  const AffineMetric self = gpu::affineMetric(Space(), md, md, sameGrid);
  BOOST_TEST(self.value == 1.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(self.overlap == 1.0);
}

// The batched NCC (what the Kokkos back end's evaluateMany runs for the optimiser's speculative
// candidates, read back once) gives every transform exactly what affineMetric gives it: the same sums in
// the same order, so the same bits.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_metrics_at_once_are_single_metrics, Space, test::ExecutionSpaces) {
  const FdSetup s = fdSetup();
  const auto md = test::toSpace<Space>(s.moving, "moving");
  const auto fd = test::toSpace<Space>(s.fixed, "fixed");
  std::vector<AffineTransform> ts;
  for (int i = 0; i < kAffineSpeculation; ++i) {
    AffineTransform t = s.t;
    t.translation[0] += 0.37 * i;
    t.matrix[1] += 0.01 * i;
    ts.push_back(t);
  }
  const std::vector<AffineMetric> many = gpu::affineMetrics(Space(), md, fd, ts);
  BOOST_TEST_REQUIRE(many.size() == ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const AffineMetric one = gpu::affineMetric(Space(), md, fd, ts[i]);
    BOOST_TEST_INFO("transform " << i << " on " << Space::name());
    BOOST_TEST(many[i].value == one.value);
    BOOST_TEST(many[i].overlap == one.overlap);
    BOOST_TEST(many[i].count == one.count);
    for (int k = 0; k < 12; ++k) BOOST_TEST(many[i].gradient[std::size_t(k)] == one.gradient[std::size_t(k)]);
  }
  ts.push_back(s.t);  // more than the workspace holds
  BOOST_CHECK_THROW(gpu::affineMetrics(Space(), md, fd, ts), InvalidArgument);
}

// ---- resampling ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_resample_matches_reference, Space, test::ExecutionSpaces) {
  const FdSetup s = fdSetup();
  const auto md = test::toSpace<Space>(s.moving, "moving");
  for (AffineTransform t : {s.t, AffineTransform::identity(s.fixed.geometry)}) {
    t.translation[0] += -14.0;  // part of the fixed grid outside: zeros there
    const HostImage r = ref::resampleAffine(s.moving, s.fixed.geometry, t);
    auto out = test::poisonedImage<Space>(s.fixed.geometry);
    gpu::resampleAffine(Space(), md, t, out);
    const HostImage k = test::toHost(out, s.fixed.geometry);
    BOOST_TEST(test::maxAbsDifference(k, r) <= kResampleTol);
    Index zeros = 0;
    for (Index i = 0; i < r.numVoxels(); ++i) zeros += r.data.data()[i] == 0.0f;
    BOOST_TEST(zeros > 0);
  }
  // Identity on the moving grid itself returns the image (up to float rounding of a + 1 (b - a)
  // on the upper faces).
  ImageView<typename Space::memory_space> same("same", s.moving.data.extent(0), s.moving.data.extent(1),
                                               s.moving.data.extent(2));
  gpu::resampleAffine(Space(), md, AffineTransform::identity(s.moving.geometry), same);
  BOOST_TEST(test::maxAbsDifference(test::toHost(same, s.moving.geometry), s.moving) <= 1e-6);
  BOOST_TEST(test::maxAbsDifference(ref::resampleAffine(s.moving, s.moving.geometry,
                                                        AffineTransform::identity(s.moving.geometry)),
                                    s.moving) == 0.0);
  BOOST_CHECK_THROW(gpu::resampleAffine(Space(), md, s.t, ImageView<typename Space::memory_space>()),
                    InvalidArgument);
}

BOOST_AUTO_TEST_CASE(labels_nearest_neighbour_and_dice) {
  const Geometry g = Geometry::make3D(12, 10, 8);
  HostImage labels("labels", g);
  for (Index z = 0; z < 8; ++z)
    for (Index y = 0; y < 10; ++y)
      for (Index x = 0; x < 12; ++x) labels.data(z, y, x) = static_cast<float>((x / 3) + 10 * (y / 5) + 100 * z);
  AffineTransform t = AffineTransform::identity(g);
  t.translation = {2.4, -1.3, 0.6};  // nearest: +2, -1, +1
  const HostImage out = ref::resampleAffineLabels(labels, g, t);
  for (Index z = 0; z < 8; ++z)
    for (Index y = 0; y < 10; ++y)
      for (Index x = 0; x < 12; ++x) {
        const Index sx = x + 2, sy = y - 1, sz = z + 1;
        const bool in = sx < 12 && sy >= 0 && sz < 8;
        BOOST_TEST(out.data(z, y, x) == (in ? labels.data(sz, sy, sx) : 0.0f));
      }
  BOOST_TEST(ref::labelDice(labels, labels, {1, 2, 11}) == 1.0);
  // Set {0}: voxels x < 3, y < 5 at z = 0 only: 3*5 = 15 voxels; shifted by +2 in x keeps 1 column.
  HostImage shifted("shifted", g);
  Kokkos::deep_copy(shifted.data, 999.0f);
  for (Index y = 0; y < 5; ++y)
    for (Index x = 2; x < 5; ++x) shifted.data(0, y, x) = 0.0f;
  BOOST_TEST(ref::labelDice(labels, shifted, {0}) == 2.0 * 5.0 / 30.0, boost::test_tools::tolerance(1e-12));
}

// ---- registration ----------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(reference_recovers_known_affine) {
  const PhantomPair p = phantomPair(48);
  AffineParams params;
  const auto t0 = std::chrono::steady_clock::now();
  const AffineResult r = ref::affineRegister(p.moving, p.fixed, params);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double errStart = rmsMappedPointDistance(r.start, p.truth, p.fixed.geometry);
  const double err = rmsMappedPointDistance(r.transform, p.truth, p.fixed.geometry);
  std::cout << "phantom 48^3 (ref): NCC " << r.valueInitial << " -> " << r.valueFinal << ", RMS error "
            << errStart << " -> " << err << " voxels, " << r.evaluations << " evaluations, " << s << " s\n";
  for (auto const& l : r.perLevel)
    std::cout << "  level " << l.level << ": NCC " << l.valueStart << " -> " << l.valueEnd << ", "
              << l.evaluations << " evaluations (" << l.accepted << " accepted), stop "
              << toString(l.stop) << "\n";
  BOOST_TEST(r.levelsUsed == 3);
  BOOST_TEST(errStart > 3.0);  // the test starts far from the truth
  BOOST_TEST(err < kRecoveryTol);
  BOOST_TEST(r.valueFinal > r.valueInitial);
  BOOST_TEST(r.valueFinal > 0.99);
  // The finest level converges (not capped). The coarse levels of this small phantom (12^3 and 24^3,
  // smoothed once more for the metric) ascend a narrow valley in 1-voxel zig-zag steps that keep
  // improving NCC: measured 200 evaluations (191 accepted) each, so they may reach the cap; every
  // level must still raise NCC.
  for (auto const& l : r.perLevel) {
    BOOST_TEST_INFO("level " << l.level);
    BOOST_TEST(l.valueEnd > l.valueStart);
    if (l.level == 0) BOOST_TEST(l.stop == AffineStop::MinStep);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_optimiser_matches_reference, Space, test::ExecutionSpaces) {
  const PhantomPair p = phantomPair(48);
  AffineParams params;
  const AffineResult r = ref::affineRegister(p.moving, p.fixed, params);
  const AffineResult k = gpu::affineRegister(Space(), p.moving, p.fixed, params);
  const double between = rmsMappedPointDistance(r.transform, k.transform, p.fixed.geometry);
  std::cout << Space::name() << ": ref vs Kokkos transform RMS " << between << " voxels; evaluations "
            << r.evaluations << " / " << k.evaluations << "\n";
  BOOST_TEST(between < kBackendTol);
  BOOST_TEST(rmsMappedPointDistance(k.transform, p.truth, p.fixed.geometry) < kRecoveryTol);
  BOOST_TEST(std::abs(r.valueFinal - k.valueFinal) <= 1e-4);
  // Speculation: the runs of rejected steps were evaluated several at a time (fewer back-end calls).
  std::cout << Space::name() << ": back-end calls " << r.batches << " / " << k.batches << "\n";
  BOOST_TEST(r.batches < r.evaluations);
  BOOST_TEST(k.batches < k.evaluations);
}

BOOST_AUTO_TEST_CASE(different_grids_through_headers) {
  // Moving on a coarser, shifted and axis-permuted grid: the header alignment and resampling
  // must still find the same physical transform.
  const PhantomPair p = phantomPair(40);
  HostImage moving("moving", [] {
    Geometry g = Geometry::make3D(40, 40, 40);
    g.direction = {0, 1, 0, 1, 0, 0, 0, 0, -1};  // x <-> y swapped, z flipped
    g.origin = {5.0, -3.0, 39.0};
    return g;
  }());
  for (Index z = 0; z < 40; ++z)
    for (Index y = 0; y < 40; ++y)
      for (Index x = 0; x < 40; ++x) moving.data(z, y, x) = p.moving.data(39 - z, x, y);
  // world of moving voxel (x, y, z) = (5 + y, -3 + x, 39 - z): it holds p.moving at (y, x, 39 - z),
  // i.e. the old moving voxel at world (5 + y, -3 + x, 39 - z) - (5, -3, 0). Shift the fixed origin
  // by the same (5, -3, 0) so the truth in world coordinates is the truth of the identity grids.
  HostImage fixed = p.fixed;
  fixed.geometry.origin = {5.0, -3.0, 0.0};
  const AffineResult r = ref::affineRegister(moving, fixed, AffineParams{});
  // Express in the original (identity) grids: same world transform.
  Geometry g0 = p.moving.geometry;
  Geometry gf0 = p.fixed.geometry;
  gf0.origin = {5.0, -3.0, 0.0};
  g0.origin = {5.0, -3.0, 0.0};
  const AffineTransform inOld = fromWorldMatrix(r.world, gf0, g0);
  const double err = rmsMappedPointDistance(inOld, p.truth, p.fixed.geometry);
  std::cout << "permuted grids: RMS error " << err << " voxels, NCC " << r.valueFinal << "\n";
  BOOST_TEST(err < kRecoveryTol);
}

// The moving image stored mirrored (x axis reversed, det(direction) = -1, as a RAS-stored file
// against an LPS-stored one): the index transform has det M < 0 from the header alignment on, and
// the optimiser must still move and find the same physical transform on every back end.
BOOST_AUTO_TEST_CASE_TEMPLATE(mirrored_grid_through_headers, Space, test::ExecutionSpaces) {
  const PhantomPair p = phantomPair(40);
  HostImage moving("moving", [] {
    Geometry g = Geometry::make3D(40, 40, 40);
    g.direction = {-1, 0, 0, 0, 1, 0, 0, 0, 1};
    g.origin = {39.0, 0.0, 0.0};  // world x of voxel x: 39 - x
    return g;
  }());
  for (Index z = 0; z < 40; ++z)
    for (Index y = 0; y < 40; ++y)
      for (Index x = 0; x < 40; ++x) moving.data(z, y, x) = p.moving.data(z, y, 39 - x);
  const AffineResult r = ref::affineRegister(moving, p.fixed, AffineParams{});
  const AffineResult k = gpu::affineRegister(Space(), moving, p.fixed, AffineParams{});
  BOOST_TEST(r.start.determinant() < 0.0);  // the case under test
  for (AffineResult const* res : {&r, &k}) {
    const double err = rmsMappedPointDistance(fromWorldMatrix(res->world, p.fixed.geometry, p.moving.geometry),
                                              p.truth, p.fixed.geometry);
    std::cout << "mirrored grid (" << (res == &r ? "ref" : Space::name()) << "): RMS error " << err
              << " voxels, " << res->evaluations << " evaluations\n";
    BOOST_TEST(err < kRecoveryTol);
  }
}

BOOST_AUTO_TEST_CASE(bad_inputs) {
  const PhantomPair p = phantomPair(24);
  AffineParams params;
  HostImage flat("flat", p.fixed.geometry);
  Kokkos::deep_copy(flat.data, 0.5f);
  BOOST_TEST(contains(errorOf([&] { ref::affineRegister(flat, p.fixed, params); }),
                      "moving image is constant: nothing to register"));
  BOOST_TEST(contains(errorOf([&] { gpu::affineRegister(Kokkos::DefaultHostExecutionSpace(), p.moving, flat, params); }),
                      "fixed image is constant: nothing to register"));
  HostImage nan("nan", p.fixed.geometry);
  Kokkos::deep_copy(nan.data, p.fixed.data);
  nan.data(5, 6, 7) = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(contains(errorOf([&] { ref::affineRegister(p.moving, nan, params); }),
                      "fixed image contains NaN voxels"));
  // Headers 500 mm apart and no centre-of-mass initialisation: no overlap.
  HostImage far = p.moving;
  far.geometry.origin = {500.0, 0.0, 0.0};
  params.centreOfMass = false;
  const std::string e = errorOf([&] { ref::affineRegister(far, p.fixed, params); });
  BOOST_TEST(contains(e, "no overlap after alignment"), e);
  BOOST_TEST(contains(errorOf([&] { gpu::affineRegister(Kokkos::DefaultHostExecutionSpace(), far, p.fixed, params); }),
                      "no overlap after alignment"));
  // ... which the centre-of-mass initialisation repairs.
  params.centreOfMass = true;
  BOOST_CHECK_NO_THROW(ref::affineRegister(far, p.fixed, params));
  // 2D images, tiny volumes; bad parameters (refused by validate(), which the registration job
  // calls: tstPipeline).
  HostImage flat2d("2d", Geometry::make2D(32, 32));
  BOOST_TEST(contains(errorOf([&] { ref::affineRegister(flat2d, p.fixed, params); }), "3D"));
  HostImage tiny("tiny", Geometry::make3D(4, 30, 30));
  BOOST_TEST(contains(errorOf([&] { ref::affineRegister(tiny, p.fixed, params); }), "extent"));
  AffineParams bad;
  bad.levels = 0;
  BOOST_CHECK_THROW(bad.validate(), InvalidArgument);
  bad = AffineParams{};
  bad.minStep = 2.0;
  BOOST_CHECK_THROW(bad.validate(), InvalidArgument);
  bad = AffineParams{};
  bad.maxStep = std::numeric_limits<double>::quiet_NaN();
  BOOST_CHECK_THROW(bad.validate(), InvalidArgument);
}

// Rigid and similarity fits (AffineParams::dof): a phantom moved by 20 degrees (about z, then 8
// about x) and 10 voxels (10 mm at 1 mm) comes back within kRigidTol on the reference and every
// Kokkos space, and the fitted matrix stays a rotation (times one scale for the similarity).
constexpr double kRigidTol = 0.1;  // voxels RMS over the grid (0.1 mm at 1 mm): the bound
// MI registers a pair of different contrasts: the phantom pair with the moving image inverted (bright
// and dark swapped), which NCC cannot align, comes back within kRecoveryTol on the reference and
// every Kokkos space, and the two agree.
BOOST_AUTO_TEST_CASE_TEMPLATE(mi_recovers_known_affine_across_contrasts, Space, test::ExecutionSpaces) {
  const PhantomPair p = phantomPair(48);
  const HostImage moving = unitRange(p.moving, true), fixed = unitRange(p.fixed);
  AffineParams params;
  params.metric = AffineMetricKind::Mi;
  const AffineResult r = ref::affineRegister(moving, fixed, params);
  const AffineResult k = gpu::affineRegister(Space(), moving, fixed, params);
  for (AffineResult const* res : {&r, &k}) {
    const double err = rmsMappedPointDistance(res->transform, p.truth, fixed.geometry);
    std::cout << Space::name() << (res == &r ? " reference" : " Kokkos") << " MI: " << res->valueInitial << " -> "
              << res->valueFinal << ", RMS error " << rmsMappedPointDistance(res->start, p.truth, fixed.geometry) << " -> "
              << err << " voxels, " << res->evaluations << " evaluations\n";
    BOOST_TEST(err < kRecoveryTol);
    BOOST_TEST(res->valueFinal > res->valueInitial);
  }
  BOOST_TEST(rmsMappedPointDistance(r.transform, k.transform, fixed.geometry) < kBackendTol);
  AffineParams ncc;  // the same pair by NCC: the contrast defeats it
  BOOST_TEST(rmsMappedPointDistance(ref::affineRegister(moving, fixed, ncc).transform, p.truth, fixed.geometry) > 1.0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rigid_and_similarity_recover_known_motion, Space, test::ExecutionSpaces) {
  const Index n = 48;
  const Geometry g = Geometry::make3D(n, n, n);
  for (AffineDof dof : {AffineDof::Rigid, AffineDof::Similarity}) {
    const double scale = dof == AffineDof::Similarity ? 1.06 : 1.0;
    AffineTransform truth = AffineTransform::identity(g);
    truth.matrix = matmul(rotX(8.0), rotZ(20.0));
    for (double& v : truth.matrix) v *= scale;
    truth.translation = {6.0, -7.0, 4.5};  // |t| = 10.3 voxels
    const HostImage moving = phantom(g, AffineTransform::identity(g), double(n));
    const HostImage fixed = phantom(g, truth, double(n));
    AffineParams params;
    params.dof = dof;
    const AffineResult r = ref::affineRegister(moving, fixed, params);
    const AffineResult k = gpu::affineRegister(Space(), moving, fixed, params);
    BOOST_TEST(rmsMappedPointDistance(r.start, truth, g) > 5.0);  // the test starts far from the truth
    for (AffineResult const* res : {&r, &k}) {
      const double err = rmsMappedPointDistance(res->transform, truth, g);
      std::cout << Space::name() << " " << toString(dof) << (res == &r ? " reference" : " Kokkos") << ": RMS error "
                << rmsMappedPointDistance(res->start, truth, g) << " -> " << err << " voxels, " << res->evaluations
                << " evaluations\n";
      BOOST_TEST_INFO(toString(dof) << (res == &r ? " reference" : " Kokkos") << ": RMS error " << err << " voxels, "
                                    << res->evaluations << " evaluations");
      BOOST_TEST(err < kRigidTol);
      // M M^T = s^2 I: the fit stayed in its family.
      auto const& m = res->transform.matrix;
      double s2 = 0, worst = 0;
      for (int a = 0; a < 3; ++a) s2 += m[std::size_t(a)] * m[std::size_t(a)];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          double d = 0;
          for (int a = 0; a < 3; ++a) d += m[std::size_t(3 * i + a)] * m[std::size_t(3 * j + a)];
          worst = std::max(worst, std::abs(d - (i == j ? s2 : 0.0)));
        }
      BOOST_TEST(worst < 1e-9);
      if (dof == AffineDof::Rigid) BOOST_TEST(std::abs(s2 - 1.0) < 1e-9);
    }
  }
}

// Cost-function masks (AffineMasks): a lesion (radius 7 voxels: a cavity of 0, or a blob brighter
// than any tissue) painted into the moving image pulls the rigid fit away from the truth; a moving
// mask that leaves it out (one voxel wider) restores the fit within kRigidTol, and the reference and
// every Kokkos space agree. A mask off its image's grid, and an empty one, are refused. (A lesion far
// brighter than the image, 3x its maximum, still moves the fit by 0.33 voxel through the intensity
// normalisation's percentiles, which masks do not reach: docs/greedy.md.)
BOOST_AUTO_TEST_CASE_TEMPLATE(masks_leave_a_lesion_out, Space, test::ExecutionSpaces) {
  const Index n = 48;
  const Geometry g = Geometry::make3D(n, n, n);
  AffineTransform truth = AffineTransform::identity(g);
  truth.matrix = rotZ(12.0);
  truth.translation = {3.0, -2.0, 1.5};
  const HostImage clean = phantom(g, AffineTransform::identity(g), double(n));
  const HostImage fixed = phantom(g, truth, double(n));
  AffineParams params;
  params.dof = AffineDof::Rigid;
  const double free = rmsMappedPointDistance(ref::affineRegister(clean, fixed, params).transform, truth, g);
  for (float lesion : {0.0f, 1.2f}) {
    HostImage lesioned("lesioned", g), mask("mask", g);
    const double cx = 30, cy = 20, cz = 26, radius = 7;  // inside the head, 15 % of the extent
    for (Index z = 0; z < n; ++z)
      for (Index y = 0; y < n; ++y)
        for (Index x = 0; x < n; ++x) {
          const double r = std::sqrt((x - cx) * (x - cx) + (y - cy) * (y - cy) + (z - cz) * (z - cz));
          lesioned.data(z, y, x) = r < radius ? lesion : clean.data(z, y, x);
          mask.data(z, y, x) = r < radius + 1 ? 0.0f : 1.0f;
        }
    const double hit = rmsMappedPointDistance(ref::affineRegister(lesioned, fixed, params).transform, truth, g);
    AffineMasks masks;
    masks.moving = mask;
    const AffineResult r = ref::affineRegister(lesioned, fixed, params, {}, masks);
    const AffineResult k = gpu::affineRegister(Space(), lesioned, fixed, params, {}, masks);
    const double masked = rmsMappedPointDistance(r.transform, truth, g);
    std::cout << Space::name() << " lesion " << lesion << ": no lesion " << free << ", unmasked " << hit << ", masked "
              << masked << " (Kokkos " << rmsMappedPointDistance(k.transform, truth, g) << ") voxels RMS\n";
    BOOST_TEST_INFO("lesion intensity " << lesion);
    BOOST_TEST(hit > 1.0);  // the lesion costs something without the mask
    BOOST_TEST(masked < kRigidTol);
    BOOST_TEST(rmsMappedPointDistance(k.transform, r.transform, g) < kBackendTol);
    AffineMasks both = masks;  // a fixed mask too: the two back ends still agree
    both.fixed = mask;
    BOOST_TEST(rmsMappedPointDistance(ref::affineRegister(lesioned, fixed, params, {}, both).transform,
                                      gpu::affineRegister(Space(), lesioned, fixed, params, {}, both).transform, g) <
               kBackendTol);
  }
  AffineMasks bad;
  bad.fixed = HostImage("small", Geometry::make3D(n - 1, n, n));
  BOOST_CHECK_THROW(ref::affineRegister(clean, fixed, params, {}, bad), InvalidArgument);
  bad.fixed = HostImage("empty", g);
  BOOST_CHECK_THROW(gpu::affineRegister(Space(), clean, fixed, params, {}, bad), InvalidArgument);
}

// The pyramid built on the back end (gpu::affinePyramid, what affineRegister's metric evaluates) is
// the host's affineReduce / affineSmooth bit for bit, on odd and even extents down to 2 voxels.
BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_pyramid_is_the_host_pyramid, Space, test::ExecutionSpaces) {
  Space exec;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (auto const& size : std::vector<std::array<int, 3>>{{13, 10, 7}, {16, 16, 16}, {9, 20, 11}}) {
    HostImage img("img", Geometry::make3D(size[0], size[1], size[2]));
    for (Index i = 0; i < img.numVoxels(); ++i) img.data.data()[i] = U(rng);
    const int levels = 3;
    const auto got = gpu::affinePyramid(exec, img, levels);
    BOOST_TEST_REQUIRE(int(got.size()) == levels);
    HostImage level = img;
    for (int l = 0; l < levels; ++l) {
      if (l > 0) level = affineReduce(level);
      const HostImage want = affineSmooth(level);
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), got[std::size_t(l)]);
      BOOST_TEST_REQUIRE(h.extent(0) == want.data.extent(0));
      BOOST_TEST_REQUIRE(h.extent(1) == want.data.extent(1));
      BOOST_TEST_REQUIRE(h.extent(2) == want.data.extent(2));
      Index differ = 0;
      for (Index i = 0; i < want.numVoxels(); ++i) differ += h.data()[i] != want.data.data()[i];
      BOOST_TEST(differ == 0, size[0] << "x" << size[1] << "x" << size[2] << " level " << l);
    }
  }
}
