#define BOOST_TEST_MODULE Bilateral
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Bilateral.hpp"
#include "core/Phantom.hpp"
#include "gpu/bilateral/Bilateral.hpp"
#include "gpu/bilateral/detail/BilateralKernels.hpp"
#include "reference_cpu/Bilateral.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace kortex;
namespace bi = kortex::gpu::bilateral_detail;

namespace {

// Kokkos (float sums, float exp with <= 2 ulp error) vs the double CPU reference, relative to the
// image peak: float rounding over <= 125 taps stays near 1e-6, while a wrong tap, weight or
// boundary voxel changes results by >= 1e-3.
constexpr double kRefTol = 1e-5;
// Naive vs ScratchTiled: two float evaluations of the same sum (Naive: exp(spatial)*exp(range)
// per tap; ScratchTiled: per-axis spatial factors, window rows summed first), each as close to
// the exact value as to the reference above.
constexpr double kVariantTol = kRefTol;
// ScratchTiled's fixed-radius and run-time-radius kernels, and every tile shape: the same
// operations in the same order per output; only the compiler's FMA contraction may differ.
constexpr double kPathTol = 1e-6;

// Unit roundoff of float.
const double kU = std::ldexp(1.0, -24);
// Bound for the same positive float sums over n taps taken in two different orders (flip test)
// or against exact arithmetic with one extra product rounding (constant image): each of
// numerator and denominator is within gamma_n ~ n u of its exact value (Higham, Thm 3.1), the
// ratio within 2 gamma_{n+1}; two orderings differ by at most twice that.
double sumOrderTol(int nTaps) { return 4.0 * (nTaps + 1) * kU; }
double constantTol(int nTaps) { return 2.0 * (nTaps + 1) * kU; }

int numTaps(int radius, int dim) {
  int n = 1;
  for (int a = 0; a < dim; ++a) n *= 2 * radius + 1;
  return n;
}

const BilateralVariant kVariants[] = {BilateralVariant::Naive, BilateralVariant::ScratchTiled};

BilateralParams makeParams(int radius, float sigmaS, float sigmaR, BilateralVariant v) {
  return test::bilateralParams(radius, sigmaS, sigmaR, v);
}

Index countNonFinite(HostImage const& img) {
  Index n = 0;
  for (Index i = 0; i < img.numVoxels(); ++i)
    if (!std::isfinite(img.data.data()[i])) ++n;
  return n;
}

// Runs `launch(exec, in, out)` on `Space` with `out` poisoned by NaN first, checks that every
// voxel was written and returns the result on the host.
template <class Space, class Launch>
HostImage runPoisoned(HostImage const& in, Launch&& launch) {
  using Mem = typename Space::memory_space;
  Space exec;
  auto din = test::toSpace<Space>(in, "kortex::test::Bilateral::in");
  auto dout = test::poisonedImage<Space>(in.geometry, "kortex::test::Bilateral::out");
  launch(exec, ConstImageView<Mem>(din), dout);
  exec.fence();
  HostImage out = test::toHost(dout, in.geometry);
  BOOST_TEST(countNonFinite(out) == 0, "voxels left unwritten (NaN poison) or non-finite");
  return out;
}

template <class Space>
HostImage runGpu(HostImage const& in, BilateralParams const& p) {
  return runPoisoned<Space>(in, [&](Space const& exec, auto din, auto dout) {
    gpu::bilateral(exec, din, dout, p);
  });
}

template <class Space>
HostImage runTile(HostImage const& in, BilateralParams const& p, bi::TileShape const& t,
                  bi::TileShape* used = nullptr) {
  return runPoisoned<Space>(in, [&](Space const& exec, auto din, auto dout) {
    const bi::TileShape u = bi::scratchTiled(exec, din, dout, p, t);
    if (used) *used = u;
  });
}

HostImage flipX(HostImage const& in) {
  HostImage out("kortex::test::flipped", in.geometry);
  const Index nx = in.geometry.nx();
  for (Index k = 0; k < in.geometry.nz(); ++k)
    for (Index j = 0; j < in.geometry.ny(); ++j)
      for (Index i = 0; i < nx; ++i) out.data(k, j, i) = in.data(k, j, nx - 1 - i);
  return out;
}

HostImage constantImage(Geometry const& g, float value) {
  HostImage img("kortex::test::constant", g);
  Kokkos::deep_copy(img.data, value);
  return img;
}

// Truncated, normalised Gaussian blur with the clamp rule, in double: what sigma_r = inf must give.
HostImage gaussianBlurDouble(HostImage const& in, int r, double sigmaS) {
  const Geometry& g = in.geometry;
  const Index nx = g.nx(), ny = g.ny(), nz = g.nz();
  const int rz = g.dimension == 3 ? r : 0;
  auto cl = [](Index i, Index n) { return std::min(std::max<Index>(i, 0), n - 1); };
  HostImage out("kortex::test::blur", g);
  for (Index k = 0; k < nz; ++k)
    for (Index j = 0; j < ny; ++j)
      for (Index i = 0; i < nx; ++i) {
        double s = 0.0, ws = 0.0;
        for (int dz = -rz; dz <= rz; ++dz)
          for (int dy = -r; dy <= r; ++dy)
            for (int dx = -r; dx <= r; ++dx) {
              const double w = std::exp(-double(dx * dx + dy * dy + dz * dz) / (2 * sigmaS * sigmaS));
              s += w * in.data(cl(k + dz, nz), cl(j + dy, ny), cl(i + dx, nx));
              ws += w;
            }
        out.data(k, j, i) = static_cast<float>(s / ws);
      }
  return out;
}

struct Case {
  const char* name;
  HostImage image;
};

std::vector<Case> images2D() {
  const Geometry g = Geometry::make2D(67, 45);  // a multiple of no tile extent
  return {{"random 67x45", randomImage(g, 11)}, {"structured 67x45", structuredImage(g, 12)}};
}

std::vector<Case> images3D() {
  const Geometry g = Geometry::make3D(37, 29, 19);
  return {{"random 37x29x19", randomImage(g, 21)}, {"structured 37x29x19", structuredImage(g, 22)}};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CPU reference vs every variant.

BOOST_AUTO_TEST_CASE_TEMPLATE(matches_reference_2d, Space, test::ExecutionSpaces) {
  struct Setting {
    int radius;
    float sigmaS;
  };
  const Setting settings[] = {{0, 1.0f}, {1, 1.0f}, {3, 2.0f}, {5, 3.0f}};
  for (auto const& c : images2D())
    for (auto const& s : settings)
      for (float sigmaR : {0.1f, 0.3f}) {
        const auto ref = ref::bilateral(c.image, makeParams(s.radius, s.sigmaS, sigmaR,
                                                            BilateralVariant::Naive));
        for (auto v : kVariants) {
          BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << c.name << " r=" << s.radius
                                           << " sigma_s=" << s.sigmaS << " sigma_r=" << sigmaR) {
            const auto out = runGpu<Space>(c.image, makeParams(s.radius, s.sigmaS, sigmaR, v));
            const double err = test::maxRelativeError(out, ref);
            BOOST_TEST_MESSAGE("error vs reference " << err);
            BOOST_TEST(err <= kRefTol);
          }
        }
      }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(matches_reference_3d, Space, test::ExecutionSpaces) {
  struct Setting {
    int radius;
    float sigmaS;
  };
  const Setting settings[] = {{0, 1.0f}, {1, 1.0f}, {2, 1.5f}};
  for (auto const& c : images3D())
    for (auto const& s : settings)
      for (float sigmaR : {0.1f, 0.3f}) {
        const auto ref = ref::bilateral(c.image, makeParams(s.radius, s.sigmaS, sigmaR,
                                                            BilateralVariant::Naive));
        for (auto v : kVariants) {
          BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << c.name << " r=" << s.radius
                                           << " sigma_s=" << s.sigmaS << " sigma_r=" << sigmaR) {
            const auto out = runGpu<Space>(c.image, makeParams(s.radius, s.sigmaS, sigmaR, v));
            const double err = test::maxRelativeError(out, ref);
            BOOST_TEST_MESSAGE("error vs reference " << err);
            BOOST_TEST(err <= kRefTol);
          }
        }
      }
}

// CT-like intensities (HU range, sigma_r in HU): the coefficients scale correctly.
BOOST_AUTO_TEST_CASE_TEMPLATE(matches_reference_ct_range, Space, test::ExecutionSpaces) {
  const auto img = randomImage(Geometry::make2D(53, 41), 31, -1000.0f, 2000.0f);
  const auto ref = ref::bilateral(img, makeParams(4, 2.5f, 400.0f, BilateralVariant::Naive));
  for (auto v : kVariants) {
    BOOST_TEST_CONTEXT(Space::name() << " " << v) {
      const auto out = runGpu<Space>(img, makeParams(4, 2.5f, 400.0f, v));
      BOOST_TEST(test::maxRelativeError(out, ref) <= kRefTol);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Analytic properties.

BOOST_AUTO_TEST_CASE_TEMPLATE(constant_image_unchanged, Space, test::ExecutionSpaces) {
  struct Setting {
    Geometry g;
    int radius;
  };
  const Setting settings[] = {{Geometry::make2D(67, 45), 5}, {Geometry::make3D(37, 29, 19), 2}};
  for (auto const& s : settings)
    for (auto v : kVariants) {
      BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << describe(s.g)) {
        // 0.5: w * 0.5 is exact, so both sums are exactly 0.5 * (sum of w) and the ratio is 0.5.
        const auto half = runGpu<Space>(constantImage(s.g, 0.5f), makeParams(s.radius, 2.0f, 0.1f, v));
        BOOST_TEST(test::maxAbsDifference(half, constantImage(s.g, 0.5f)) == 0.0);
        const auto c = constantImage(s.g, 1234.567f);
        const auto out = runGpu<Space>(c, makeParams(s.radius, 2.0f, 0.1f, v));
        const double err = test::maxRelativeError(out, c);
        BOOST_TEST_MESSAGE("constant 1234.567 error " << err);
        BOOST_TEST(err <= constantTol(numTaps(s.radius, s.g.dimension)));
      }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(radius_zero_is_identity, Space, test::ExecutionSpaces) {
  for (auto const& cases : {images2D(), images3D()})
    for (auto const& c : cases)
      for (auto v : kVariants) {
        BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << c.name) {
          const auto out = runGpu<Space>(c.image, makeParams(0, 1.0f, 0.05f, v));
          BOOST_TEST(test::maxAbsDifference(out, c.image) == 0.0);  // weight 1, sum v, v / 1
        }
      }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(infinite_sigma_range_is_gaussian_blur, Space, test::ExecutionSpaces) {
  const float inf = std::numeric_limits<float>::infinity();
  struct Setting {
    HostImage image;
    int radius;
    float sigmaS;
  };
  const Setting settings[] = {{randomImage(Geometry::make2D(67, 45), 41), 3, 1.5f},
                              {randomImage(Geometry::make2D(67, 45), 42), 6, 4.0f},
                              {structuredImage(Geometry::make3D(37, 29, 19), 43), 2, 1.2f}};
  for (auto const& s : settings) {
    const auto blur = gaussianBlurDouble(s.image, s.radius, s.sigmaS);
    for (auto v : kVariants) {
      BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << describe(s.image.geometry)
                                       << " r=" << s.radius) {
        const auto out = runGpu<Space>(s.image, makeParams(s.radius, s.sigmaS, inf, v));
        const double err = test::maxRelativeError(out, blur);
        BOOST_TEST_MESSAGE("error vs double blur " << err);
        BOOST_TEST(err <= kRefTol);
      }
    }
  }
}

// Clamp boundary and window are symmetric: flipping the input along x flips the output. The
// weights are bit-identical (same |o|^2, same intensity differences); only the summation order
// of the taps along x reverses.
BOOST_AUTO_TEST_CASE_TEMPLATE(flip_x_equivariance, Space, test::ExecutionSpaces) {
  struct Setting {
    HostImage image;
    int radius;
  };
  const Setting settings[] = {{structuredImage(Geometry::make2D(67, 45), 51), 3},
                              {randomImage(Geometry::make3D(37, 29, 19), 52), 1}};
  for (auto const& s : settings)
    for (auto v : kVariants) {
      BOOST_TEST_CONTEXT(Space::name() << " " << v << " " << describe(s.image.geometry)) {
        const auto p = makeParams(s.radius, 1.5f, 0.2f, v);
        const auto out = runGpu<Space>(s.image, p);
        const auto outOfFlipped = runGpu<Space>(flipX(s.image), p);
        const double err = test::maxRelativeError(flipX(outOfFlipped), out);
        BOOST_TEST_MESSAGE("flip error " << err);
        BOOST_TEST(err <= sumOrderTol(numTaps(s.radius, s.image.geometry.dimension)));
        // The filter is not symmetric in y/x on this image: a wrong flip would show.
        BOOST_TEST(test::maxRelativeError(outOfFlipped, out) > 1e-3);
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Variants against each other, several tiles, tile shrinking, explicit tile shapes.

BOOST_AUTO_TEST_CASE_TEMPLATE(naive_and_scratch_tiled_agree, Space, test::ExecutionSpaces) {
  struct Setting {
    HostImage image;
    int radius;
    float sigmaS;
  };
  const Setting settings[] = {
      {addGaussianNoise(sheppLogan2D(131), 0.05, 61), 8, 4.0f},  // 17x17 window, many tiles
      {structuredImage(Geometry::make2D(97, 70), 62), 12, 6.0f},  // run-time-radius kernel
      {randomImage(Geometry::make3D(45, 33, 21), 63), 3, 2.0f},
      {randomImage(Geometry::make3D(19, 18, 17), 64), 8, 4.0f},   // z-streamed, fixed radius
      {randomImage(Geometry::make3D(23, 21, 20), 65), 9, 4.5f}};  // z-streamed, run-time radius
  for (auto const& s : settings) {
    BOOST_TEST_CONTEXT(Space::name() << " " << describe(s.image.geometry) << " r=" << s.radius) {
      const auto ref =
          ref::bilateral(s.image, makeParams(s.radius, s.sigmaS, 0.2f, BilateralVariant::Naive));
      const auto naive =
          runGpu<Space>(s.image, makeParams(s.radius, s.sigmaS, 0.2f, BilateralVariant::Naive));
      const auto tiled = runGpu<Space>(
          s.image, makeParams(s.radius, s.sigmaS, 0.2f, BilateralVariant::ScratchTiled));
      const double err = test::maxRelativeError(tiled, naive);
      BOOST_TEST_MESSAGE("naive vs tiled " << err << ", naive vs ref "
                                           << test::maxRelativeError(naive, ref)
                                           << ", tiled vs ref " << test::maxRelativeError(tiled, ref));
      BOOST_TEST(err <= kVariantTol);
      BOOST_TEST(test::maxRelativeError(naive, ref) <= kRefTol);
      BOOST_TEST(test::maxRelativeError(tiled, ref) <= kRefTol);
    }
  }
}

// Every radius with a fixed-radius kernel (perThread 4) against the run-time-radius kernel
// (perThread 2 and 8) on the same image; in 3D with the whole apron and z-streamed.
BOOST_AUTO_TEST_CASE_TEMPLATE(fixed_and_runtime_radius_kernels_agree, Space, test::ExecutionSpaces) {
  const auto img2 = addGaussianNoise(structuredImage(Geometry::make2D(67, 45), 91), 0.05, 92);
  const auto img3 = addGaussianNoise(structuredImage(Geometry::make3D(37, 29, 19), 93), 0.05, 94);
  for (int r = 1; r <= bi::kMaxFastRadius; ++r)
    for (int mode : {0, 1, 2}) {  // 2D, 3D whole apron, 3D z-streamed
      if (mode == 1 && r > 4) continue;  // the whole 3D apron would shrink below 4 rows
      if (mode == 2 && r > 6) continue;  // keeps the host test time down; r 8 runs below
      const int dim = mode == 0 ? 2 : 3;
      const auto& img = dim == 2 ? img2 : img3;
      const auto p = makeParams(r, 0.6f * r + 0.5f, 0.15f, BilateralVariant::ScratchTiled);
      const int z = dim == 2 ? 1 : 2;
      const bool stream = mode == 2;
      BOOST_TEST_CONTEXT(Space::name() << " " << dim << "D r=" << r << " stream=" << stream) {
        bi::TileShape used;
        const auto fixed = runTile<Space>(img, p, {32, 8, z, 4, stream}, &used);
        BOOST_TEST(used.perThread == 4);  // really ran the fixed-radius kernel
        BOOST_TEST(used.streamZ == stream);
        for (int perThread : {2, 8}) {
          const auto generic = runTile<Space>(img, p, {32, 8, z, perThread, stream}, &used);
          BOOST_TEST(used.perThread == perThread);
          BOOST_TEST(test::maxRelativeError(fixed, generic) <= kPathTol);
        }
        if (mode == 2) {  // z-streamed vs whole apron (run-time radius kernels, small tile)
          const auto whole = runTile<Space>(img, p, {8, 2, 2, 2, false}, &used);
          BOOST_TEST(!used.streamZ);
          BOOST_TEST(test::maxRelativeError(fixed, whole) <= kPathTol);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(explicit_tile_shapes, Space, test::ExecutionSpaces) {
  const auto img2 = structuredImage(Geometry::make2D(67, 45), 71);
  const auto img3 = randomImage(Geometry::make3D(37, 29, 19), 72);
  const auto p2 = makeParams(3, 2.0f, 0.2f, BilateralVariant::ScratchTiled);
  const auto p3 = makeParams(2, 1.5f, 0.2f, BilateralVariant::ScratchTiled);
  const auto tiled2 = runGpu<Space>(img2, p2);
  const auto tiled3 = runGpu<Space>(img3, p3);
  const auto ref2 = ref::bilateral(img2, p2);
  const auto ref3 = ref::bilateral(img3, p3);
  BOOST_TEST(test::maxRelativeError(tiled2, ref2) <= kRefTol);
  BOOST_TEST(test::maxRelativeError(tiled3, ref3) <= kRefTol);
  const std::size_t maxBytes = kx::scratchSizeMax<bi::TiledPolicy<Space>>(0);
  const bi::TileShape tiles2[] = {{1, 1, 1, 1}, {7, 3, 1, 1}, {5, 4, 1, 4}, {64, 4, 1, 2},
                                  {32, 8, 1, 8}, {100, 50, 1, 2}, {33, 40, 1, 8}};
  for (auto const& t : tiles2) {
    BOOST_TEST_CONTEXT(Space::name() << " 2D tile " << bi::describe(t)) {
      bi::TileShape used;
      const auto out = runTile<Space>(img2, p2, t, &used);
      BOOST_TEST(test::maxRelativeError(out, tiled2) <= kPathTol);
      BOOST_TEST(bi::scratchBytes(used, p2.radius, 2) <= maxBytes);
    }
  }
  const bi::TileShape tiles3[] = {
      {1, 1, 1, 1},        {8, 2, 3, 2},        {3, 5, 2, 1},       {32, 4, 4, 4},
      {16, 8, 2, 8},       {5, 8, 3, 4},        {1, 1, 1, 1, true}, {7, 3, 5, 1, true},
      {32, 8, 4, 4, true}, {16, 8, 2, 8, true}, {9, 4, 40, 2, true}};
  for (auto const& t : tiles3) {
    BOOST_TEST_CONTEXT(Space::name() << " 3D tile " << bi::describe(t)) {
      bi::TileShape used;
      const auto out = runTile<Space>(img3, p3, t, &used);
      BOOST_TEST(test::maxRelativeError(out, tiled3) <= kPathTol);
      BOOST_TEST(bi::scratchBytes(used, p3.radius, 3) <= maxBytes);
    }
  }
  BOOST_CHECK_THROW(runTile<Space>(img2, p2, {32, 6, 1, 4}), InvalidArgument);  // 4 !| 6
  BOOST_CHECK_THROW(runTile<Space>(img2, p2, {32, 8, 2, 2}), InvalidArgument);  // 2D, z = 2
  BOOST_CHECK_THROW(runTile<Space>(img2, p2, {32, 8, 1, 2, true}), InvalidArgument);  // 2D stream
  BOOST_CHECK_THROW(runTile<Space>(img3, p3, {32, 8, 2, 3}), InvalidArgument);  // 3 per thread
  BOOST_CHECK_THROW(runTile<Space>(img3, p3, {0, 8, 2, 1}), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(tile_fitting) {
  auto same = [](bi::TileShape a, bi::TileShape b) {
    return a.x == b.x && a.y == b.y && a.z == b.z && a.perThread == b.perThread &&
           a.streamZ == b.streamZ;
  };
  // 2D radius 8: the default tile fits in the smallest backend limit (32 KiB) untouched.
  const auto d2 = bi::defaultTile(2, 8, 32768);
  BOOST_TEST(same(bi::fitTile(d2, 8, 2, 32768), d2));
  // Apron 48x32 + lutX 17 + lutRow 65 floats = 6472 B, rounded up to 16 B (6480), + 16 B slack.
  BOOST_TEST(bi::scratchBytes({32, 16, 1, 2}, 8, 2) == 6496u);
  // z-streamed 32x16x2, r 8: 2 planes 48x32 + 3x1024 (centres, sums) + 17 + 129 LUT floats
  // = 6290 floats = 25160 B, rounded up to 25168, + 16.
  BOOST_TEST(bi::scratchBytes({32, 16, 2, 4, true}, 8, 3) == 25184u);
  // 3D: the whole apron while 32x8x4 fits unshrunk, z-streaming beyond; always fits.
  for (std::size_t maxBytes : {std::size_t(40936), std::size_t(32768)}) {
    for (int r = 0; r <= 12; ++r) {
      const auto t = bi::defaultTile(3, r, maxBytes);
      BOOST_TEST(t.streamZ == (r > 4), "r=" << r);
      BOOST_TEST(bi::scratchBytes(t, r, 3) <= maxBytes, "r=" << r);
    }
    // A whole-apron tile at r 8 shrinks, keeping 32 along x while it can.
    const auto t = bi::fitTile({32, 8, 4, 4, false}, 8, 3, maxBytes);
    BOOST_TEST(bi::scratchBytes(t, 8, 3) <= maxBytes);
    BOOST_TEST(t.y * t.z < 32);
    BOOST_TEST(t.y % t.perThread == 0);
    BOOST_TEST_MESSAGE("3D r=8 whole apron in " << maxBytes << " B: " << bi::describe(t));
  }
  // Small images on a device with H100-like concurrency (270336) get smaller tiles; large
  // images and host backends keep the default.
  const auto d3 = bi::defaultTile(3, 3, 40936);
  BOOST_TEST(same(d3, {32, 8, 4, 4, false}));
  BOOST_TEST(same(bi::adaptTile(d3, 64, 64, 64, 3, 270336), {32, 8, 2, 4, false}));
  BOOST_TEST(same(bi::adaptTile(d3, 96, 96, 96, 3, 270336), d3));
  BOOST_TEST(same(bi::adaptTile(d3, 64, 64, 64, 3, 16), d3));
  BOOST_TEST(same(bi::adaptTile(d2, 256, 256, 1, 2, 270336), {32, 4, 1, 4}));
  BOOST_TEST(same(bi::adaptTile(d2, 512, 512, 1, 2, 270336), d2));
  BOOST_TEST(same(bi::adaptTile(d2, 8, 8, 1, 2, 270336), {32, 4, 1, 4}));  // stops at perThread
  // 2D radius 64: even one voxel needs a 129x129 apron (66 KB) > 32 KiB.
  BOOST_CHECK_THROW(bi::fitTile(d2, 64, 2, 32768), Unsupported);
  BOOST_CHECK_THROW(bi::checkTile({32, 16, 1, 3}, 2), InvalidArgument);
  BOOST_CHECK_THROW(bi::checkTile({32, 16, 2, 2}, 2), InvalidArgument);
  BOOST_CHECK_THROW(bi::checkTile({32, 16, 1, 2, true}, 2), InvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Bad inputs: one clear exception, nothing written.

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_inputs_throw, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto img = randomImage(Geometry::make2D(16, 12), 81);
  auto in = test::toSpace<Space>(img, "kortex::test::Bilateral::in");
  ImageView<Mem> out("kortex::test::Bilateral::out", 1, 12, 16);
  ImageView<Mem> wrong("kortex::test::Bilateral::wrong", 1, 12, 15);
  ImageView<Mem> unallocated;
  auto in3 = test::toSpace<Space>(randomImage(Geometry::make3D(16, 12, 3), 82), "kortex::test::in3");
  ImageView<Mem> out3("kortex::test::Bilateral::out3", 3, 12, 16);
  Kokkos::deep_copy(out, nan);
  Kokkos::deep_copy(out3, nan);

  for (auto v : kVariants) {
    BOOST_TEST_CONTEXT(Space::name() << " " << v) {
      const auto ok = makeParams(2, 1.0f, 0.1f, v);
      BOOST_CHECK_THROW(gpu::bilateral(exec, in, wrong, ok), InvalidArgument);
      BOOST_CHECK_THROW(gpu::bilateral(exec, in, unallocated, ok), InvalidArgument);
      BOOST_CHECK_THROW(gpu::bilateral(exec, ConstImageView<Mem>(unallocated), out, ok),
                        InvalidArgument);
      BOOST_CHECK_THROW(gpu::bilateral(exec, in, in, ok), InvalidArgument);  // aliasing
      // The radius bound that sizes scratch and taps (parameters: tstPipeline).
      BOOST_CHECK_THROW(gpu::bilateral(exec, in, out, makeParams(-1, 1.0f, 0.1f, v)),
                        InvalidArgument);
      BOOST_CHECK_THROW(
          gpu::bilateral(exec, in, out, makeParams(BilateralParams::kMaxRadius + 1, 1.0f, 0.1f, v)),
          InvalidArgument);
    }
  }
  // A radius whose apron cannot fit in team scratch even for one voxel (101x101 apron + LUT
  // floats = 51 KB > the 32-40 KB every backend offers): ScratchTiled refuses, Naive runs.
  auto big = test::toSpace<Space>(randomImage(Geometry::make2D(60, 52), 83), "kortex::test::big");
  ImageView<Mem> bigOut("kortex::test::Bilateral::bigOut", 1, 52, 60);
  Kokkos::deep_copy(bigOut, nan);
  BOOST_CHECK_THROW(gpu::bilateral(exec, big, bigOut,
                                   makeParams(50, 20.0f, 0.1f, BilateralVariant::ScratchTiled)),
                    Unsupported);
  exec.fence();
  // Nothing was enqueued by any failing call: the outputs are still all NaN.
  for (auto const& v : {out, out3, bigOut}) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    Index finite = 0;
    for (std::size_t i = 0; i < h.size(); ++i)
      if (!std::isnan(h.data()[i])) ++finite;
    BOOST_TEST(finite == 0);
  }
  BOOST_CHECK_NO_THROW(
      gpu::bilateral(exec, big, bigOut, makeParams(50, 20.0f, 0.1f, BilateralVariant::Naive)));
  exec.fence();
}
