// Kokkos non-local means (gpu/nlm/Nlm.hpp) on every enabled execution space: every variant against
// the independent CPU reference (reference_cpu/Nlm.hpp), BoxSum against Naive, analytic
// properties (h -> 0 and R = 0 are the identity, a constant image is unchanged, flipping the
// input flips the output) and bad inputs. Outputs are poisoned with NaN before every run, so a
// voxel that is never written fails the comparison.
#define BOOST_TEST_MODULE Nlm
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Nlm.hpp"
#include "core/Phantom.hpp"
#include "gpu/nlm/Nlm.hpp"
#include "gpu/nlm/detail/NlmBoxSum.hpp"
#include "gpu/nlm/detail/NlmScratchTiled.hpp"
#include "reference_cpu/Nlm.hpp"

#include <cmath>
#include <limits>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

using namespace kortex;

namespace {

// Kokkos (float32) vs the reference (double): patch distances carry a relative error of a few
// float ulps (|P| terms summed in float), which moves a weight by (exp argument) x that; the sums
// run in float per batch/row and in double across them. Measured here: <= 5e-7 of the peak
// (Naive/ScratchTiled, r = 4, 3D), <= 1e-7 (BoxSum); 1e-5 is the project's validation bound.
constexpr double kReferenceTol = 1e-5;
// BoxSum vs Naive: the same offsets, weights and sums; only the summation order of D differs
// (block window sums vs row by row), so the difference is bounded by the two distances' float
// rounding: measured <= 4.6e-7 (Naive's own error), 2e-6 leaves 4x.
constexpr double kBoxSumVsNaiveTol = 2e-6;
// h -> 0, R = 0, constant image: every weight is exactly 0 or 1 and every sample with weight 1
// equals I(x); the kernels sum the centred terms w * (I(x+o) - I(x)), all exactly 0, so the
// output is I(x) bit for bit.
constexpr double kIdentityTol = 0.0;
// Mirrored input: the offsets are visited in mirrored order, so the float sums round
// differently (same bound as the reference comparison).
constexpr double kFlipTol = 1e-5;

const NlmVariant kVariants[] = {NlmVariant::Naive, NlmVariant::ScratchTiled, NlmVariant::BoxSum};

struct Case {
  int r, R;
  float h;
};

std::string describe(NlmParams const& p, Geometry const& g) {
  std::ostringstream os;
  os << p.variant << " r=" << p.patchRadius << " R=" << p.searchRadius << " h=" << p.h << " on "
     << kortex::describe(g);
  return os.str();
}

// Runs gpu::nlm on `Space` into a NaN-poisoned output and copies the result back.
template <class Space>
HostImage runNlm(HostImage const& in, NlmParams const& p) {
  Space exec;
  auto din = test::toSpace<Space>(in, "kortex::test::Nlm::in");
  auto dout = test::poisonedImage<Space>(in.geometry, "kortex::test::Nlm::out");
  gpu::nlm(exec, din, dout, p);
  exec.fence();
  return test::toHost(dout, in.geometry);
}

HostImage reference(HostImage const& in, NlmParams const& p) { return ref::nlm(in, p); }

HostImage flipped(HostImage const& in, bool flipZ) {
  HostImage outImg("kortex::test::Nlm::flipped", in.geometry);
  const Index nx = in.geometry.nx(), ny = in.geometry.ny(), nz = in.geometry.nz();
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x)
        outImg.data(flipZ ? nz - 1 - z : z, y, nx - 1 - x) = in.data(z, y, x);
  return outImg;
}

HostImage constantImage(Geometry const& g, float value) {
  HostImage img("kortex::test::Nlm::constant", g);
  Kokkos::deep_copy(img.data, value);
  return img;
}

// Test images: sizes that are multiples of no tile (2D 53x41, 3D 23x19x13).
HostImage random2D() { return randomImage(Geometry::make2D(53, 41), 11); }
HostImage structured2D() { return structuredImage(Geometry::make2D(53, 41), 12); }
HostImage noisyPhantom2D() {
  auto p = sheppLogan2D(45);
  return addGaussianNoise(p, noiseSigmaForSnr(p, 10.0), 13);
}
HostImage random3D() { return randomImage(Geometry::make3D(23, 19, 13), 21); }
HostImage structured3D() { return structuredImage(Geometry::make3D(23, 19, 13), 22); }

// (r, R, h): r = 0 and R = 0 included; r = 1, 2, 3 run BoxSum's compile-time kernels, r = 0
// and r >= 4 its runtime-radius kernel.
const std::vector<Case> kCases2D = {{0, 3, 0.2f}, {1, 0, 0.2f}, {1, 4, 0.2f}, {2, 5, 0.25f},
                                    {3, 8, 0.3f}, {4, 3, 0.3f}, {6, 2, 0.3f}};
const std::vector<Case> kCases3D = {{0, 2, 0.2f}, {1, 0, 0.2f}, {1, 3, 0.25f},
                                    {2, 3, 0.3f}, {3, 2, 0.3f}, {4, 1, 0.3f}};

template <class Space>
void checkAgainstReference(HostImage const& img, std::vector<Case> const& cases, float hScale) {
  for (auto const& c : cases) {
    NlmParams p;
    p.patchRadius = c.r;
    p.searchRadius = c.R;
    p.h = c.h * hScale;
    const HostImage expected = reference(img, p);
    HostImage naive;
    for (NlmVariant v : kVariants) {
      p.variant = v;
      const HostImage got = runNlm<Space>(img, p);
      const double err = test::maxRelativeError(got, expected);
      BOOST_TEST_MESSAGE(describe(p, img.geometry) << " on " << Space::name() << ": max rel err " << err);
      BOOST_TEST_INFO(describe(p, img.geometry) << " on " << Space::name() << ": max rel err " << err);
      BOOST_TEST(err <= kReferenceTol);
      if (v == NlmVariant::Naive) naive = got;
      if (v == NlmVariant::BoxSum) {
        const double d = test::maxRelativeError(got, naive);
        BOOST_TEST_MESSAGE(describe(p, img.geometry) << ": BoxSum vs Naive " << d);
        BOOST_TEST_INFO(describe(p, img.geometry) << ": BoxSum vs Naive " << d);
        BOOST_TEST(d <= kBoxSumVsNaiveTol);
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(variants_match_reference_2d, Space, test::ExecutionSpaces) {
  checkAgainstReference<Space>(random2D(), kCases2D, 1.0f);
  checkAgainstReference<Space>(structured2D(), kCases2D, 0.5f);
  checkAgainstReference<Space>(noisyPhantom2D(), {{3, 5, 0.1f}, {2, 8, 0.1f}}, 1.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(variants_match_reference_3d, Space, test::ExecutionSpaces) {
  checkAgainstReference<Space>(random3D(), kCases3D, 1.0f);
  checkAgainstReference<Space>(structured3D(), {{1, 2, 0.1f}, {2, 2, 0.1f}, {3, 1, 0.1f}}, 1.0f);
}

// BoxSum's tiling: explicit tiles and batches (partial last batch, batch of 1, tiles larger than
// the image, one-row tiles) all give the same image as the automatic choice.
BOOST_AUTO_TEST_CASE_TEMPLATE(boxsum_tilings_agree, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  struct TileCase {
    int tx, ty, tz, batch;
  };
  for (int dim : {2, 3}) {
    const HostImage img = dim == 2 ? random2D() : random3D();
    for (int r : {0, 2, 3, 4}) {
      NlmParams p;
      p.patchRadius = r;
      p.searchRadius = dim == 2 ? 4 : 2;
      p.h = 0.25f;
      p.variant = NlmVariant::BoxSum;
      const HostImage automatic = runNlm<Space>(img, p);
      // (some exceed the 2D/3D image, one is a single column, one has a batch of 1)
      const std::vector<TileCase> tiles =
          dim == 2 ? std::vector<TileCase>{{1, 8, 1, 1}, {7, 8, 1, 3}, {64, 16, 1, 2}, {16, 48, 1, 9}}
                   : std::vector<TileCase>{{1, 4, 4, 1}, {7, 8, 4, 3}, {24, 8, 4, 2}, {8, 12, 8, 1}};
      for (auto const& t : tiles) {
        Space exec;
        auto din = test::toSpace<Space>(img, "kortex::test::Nlm::in");
        auto dout = test::poisonedImage<Space>(img.geometry, "kortex::test::Nlm::out");
        gpu::nlm_detail::BoxSumConfig cfg;
        cfg.tx = t.tx;
        cfg.ty = t.ty;
        cfg.tz = dim == 2 ? 1 : t.tz;
        cfg.batch = t.batch;
        const auto pb = gpu::nlm_detail::makeProblem(din, p);
        const gpu::nlm_detail::InputView<Mem> input = din;
        if (dim == 2)
          gpu::nlm_detail::launchBoxSum<2>(exec, input, dout, pb, cfg);
        else
          gpu::nlm_detail::launchBoxSum<3>(exec, input, dout, pb, cfg);
        exec.fence();
        const double d = test::maxRelativeError(test::toHost(dout, img.geometry), automatic);
        BOOST_TEST_INFO(dim << "D r=" << r << " tile " << t.tx << "x" << t.ty << "x" << t.tz
                            << " batch " << t.batch << ": " << d);
        BOOST_TEST(d <= kBoxSumVsNaiveTol);
      }
    }
  }
}

// The largest search window the parameters allow (R = kMaxRadius) with BoxSum's 2D apron kernel
// at its smallest tile, and a wide 3D window.
BOOST_AUTO_TEST_CASE_TEMPLATE(boxsum_large_windows, Space, test::ExecutionSpaces) {
  const HostImage img2 = addGaussianNoise(sheppLogan2D(NlmParams::kMaxRadius + 3), 0.05, 41);
  const HostImage img3 = structuredImage(Geometry::make3D(19, 17, 16), 42);
  for (auto const& [img, r, R] : {std::tuple<HostImage, int, int>{img2, 3, NlmParams::kMaxRadius},
                                  std::tuple<HostImage, int, int>{img2, 1, 20},
                                  std::tuple<HostImage, int, int>{img3, 2, 7}}) {
    NlmParams p;
    p.patchRadius = r;
    p.searchRadius = R;
    p.h = 0.1f;
    p.variant = NlmVariant::BoxSum;
    const double err = test::maxRelativeError(runNlm<Space>(img, p), reference(img, p));
    BOOST_TEST_MESSAGE(describe(p, img.geometry) << ": " << err);
    BOOST_TEST_INFO(describe(p, img.geometry) << ": " << err);
    BOOST_TEST(err <= kReferenceTol);
  }
}

// ScratchTiled with an apron that no tile fits (3D, R + r = 11: 23^3 floats > 40,936 B on CUDA
// and > 32 KiB on Serial) runs in its centre-only mode; a 3D patch radius of 11 does not fit even
// that and is refused with Unsupported.
BOOST_AUTO_TEST_CASE_TEMPLATE(scratch_tiled_fallbacks, Space, test::ExecutionSpaces) {
  const HostImage img = randomImage(Geometry::make3D(12, 12, 11), 31);
  NlmParams p;
  p.patchRadius = 1;
  p.searchRadius = 10;
  p.h = 0.25f;
  p.variant = NlmVariant::ScratchTiled;
  const double err = test::maxRelativeError(runNlm<Space>(img, p), reference(img, p));
  BOOST_TEST_MESSAGE("centre-only mode: " << err);
  BOOST_TEST_INFO("centre-only mode: " << err);
  BOOST_TEST(err <= kReferenceTol);

  const HostImage big = randomImage(Geometry::make3D(13, 12, 12), 32);
  p.patchRadius = 11;
  p.searchRadius = 1;
  BOOST_CHECK_THROW(runNlm<Space>(big, p), Unsupported);
  p.variant = NlmVariant::BoxSum;  // the other variants take it
  BOOST_CHECK_NO_THROW(runNlm<Space>(big, p));
}

// h -> 0: only patches identical to the centre patch keep a weight; their centres equal I(x).
BOOST_AUTO_TEST_CASE_TEMPLATE(tiny_h_is_identity, Space, test::ExecutionSpaces) {
  // (r = 0 is left out: single voxels within ~h of each other do keep a weight)
  for (const HostImage& img : {random2D(), random3D()})
    for (NlmVariant v : kVariants)
      for (int r : img.dimension() == 2 ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 2}) {
        NlmParams p;
        p.patchRadius = r;
        p.searchRadius = img.dimension() == 2 ? 4 : 2;
        p.h = 1e-4f;
        p.variant = v;
        const double err = test::maxRelativeError(runNlm<Space>(img, p), img);
        BOOST_TEST_INFO(describe(p, img.geometry) << ": " << err);
        BOOST_TEST(err <= kIdentityTol);
      }
}

// R = 0: the only offset is the centre, weight 1.
BOOST_AUTO_TEST_CASE_TEMPLATE(zero_search_radius_is_identity, Space, test::ExecutionSpaces) {
  for (const HostImage& img : {structured2D(), structured3D()})
    for (NlmVariant v : kVariants) {
      NlmParams p;
      p.patchRadius = 2;
      p.searchRadius = 0;
      p.h = 0.5f;
      p.variant = v;
      const HostImage got = runNlm<Space>(img, p);
      BOOST_TEST_INFO(describe(p, img.geometry));
      BOOST_TEST(test::maxAbsDifference(got, img) == 0.0);
    }
}

// Constant image: every distance is 0, every weight 1, every sample the constant.
BOOST_AUTO_TEST_CASE_TEMPLATE(constant_image_unchanged, Space, test::ExecutionSpaces) {
  for (const Geometry& g : {Geometry::make2D(37, 29), Geometry::make3D(17, 14, 9)})
    for (NlmVariant v : kVariants)
      for (int r : g.dimension == 2 ? std::vector<int>{1, 3, 5} : std::vector<int>{1, 3}) {
        const HostImage img = constantImage(g, 0.3f);
        NlmParams p;
        p.patchRadius = r;
        p.searchRadius = g.dimension == 2 ? 3 : 2;
        p.h = 0.05f;
        p.variant = v;
        const double err = test::maxRelativeError(runNlm<Space>(img, p), img);
        BOOST_TEST_INFO(describe(p, g) << ": " << err);
        BOOST_TEST(err <= kIdentityTol);
      }
}

// The clamp rule and the search window are symmetric: filtering the mirrored image gives the
// mirrored result (x in 2D; x and z in 3D).
BOOST_AUTO_TEST_CASE_TEMPLATE(flip_equivariance, Space, test::ExecutionSpaces) {
  for (const HostImage& img : {structured2D(), structured3D()}) {
    const bool is3D = img.dimension() == 3;
    for (NlmVariant v : kVariants) {
      NlmParams p;
      p.patchRadius = 2;
      p.searchRadius = is3D ? 2 : 4;
      p.h = 0.1f;
      p.variant = v;
      const HostImage a = flipped(runNlm<Space>(img, p), is3D);
      const HostImage b = runNlm<Space>(flipped(img, is3D), p);
      const double err = test::maxRelativeError(b, a);
      BOOST_TEST_INFO(describe(p, img.geometry) << ": " << err);
      BOOST_TEST(err <= kFlipTol);
      // And the filter does something here (the test is not vacuous).
      BOOST_TEST(test::maxAbsDifference(a, flipped(img, is3D)) > 1e-3);
    }
  }
}

// Bad inputs: one clear exception before anything runs; the output is left untouched.
BOOST_AUTO_TEST_CASE_TEMPLATE(bad_inputs_throw, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  const HostImage img = random2D();
  auto din = test::toSpace<Space>(img, "kortex::test::Nlm::in");
  auto dout = test::poisonedImage<Space>(img.geometry, "kortex::test::Nlm::out");
  for (NlmVariant v : kVariants) {
    NlmParams good;
    good.patchRadius = 2;
    good.searchRadius = 3;
    good.variant = v;

    ImageView<Mem> wrong(std::string("kortex::test::Nlm::wrong"), 1, img.geometry.ny(), img.geometry.nx() - 1);
    BOOST_CHECK_THROW(gpu::nlm(exec, din, wrong, good), InvalidArgument);
    BOOST_CHECK_THROW(gpu::nlm(exec, din, din, good), InvalidArgument);           // aliasing
    BOOST_CHECK_THROW(gpu::nlm(exec, din, ImageView<Mem>(), good), InvalidArgument);
    BOOST_CHECK_THROW(gpu::nlm(exec, ConstImageView<Mem>(), dout, good), InvalidArgument);

    // The radius bounds that size scratch (parameters: tstPipeline).
    NlmParams p = good;
    p.patchRadius = -1;
    BOOST_CHECK_THROW(gpu::nlm(exec, din, dout, p), InvalidArgument);
    p = good;
    p.patchRadius = NlmParams::kMaxRadius + 1;
    BOOST_CHECK_THROW(gpu::nlm(exec, din, dout, p), InvalidArgument);
    p = good;
    p.variant = static_cast<NlmVariant>(42);
    BOOST_CHECK_THROW(gpu::nlm(exec, din, dout, p), InvalidArgument);
  }
  exec.fence();
  // Nothing was written.
  auto h = test::toHost(dout, img.geometry);
  bool allNaN = true;
  for (Index i = 0; i < h.numVoxels(); ++i) allNaN = allNaN && std::isnan(h.data.data()[i]);
  BOOST_TEST(allNaN);
}

// ScratchTiled's tile choice at the CUDA scratch limit of the Kokkos 4.6 snapshot (40,936 B,
// see gpu/nlm/detail/NlmScratchTiled.hpp): a 3D search of radius 8 with patch radius 2 fits the apron only
// for a 1-voxel tile, so the centre-only mode must run instead (it was 12x slower than Naive
// on an H200); radius 5 keeps the apron with a tile of at least a warp.
BOOST_AUTO_TEST_CASE(scratch_tiled_never_picks_a_sub_warp_apron_tile) {
  using Space = Kokkos::DefaultHostExecutionSpace;
  constexpr std::size_t kCudaScratchMax = 40936;
  auto problem = [](int r, int R) {
    gpu::nlm_detail::Problem pb;
    pb.nx = pb.ny = pb.nz = 64;
    pb.dim = 3;
    pb.r = pb.rz = r;
    pb.R = pb.Rz = R;
    return pb;
  };
  namespace d = gpu::nlm_detail;
  const auto wide = d::chooseTiledConfig<Space>(problem(2, 8), kCudaScratchMax);
  BOOST_TEST((wide.mode == d::TiledMode::CentreOnly));
  BOOST_TEST(wide.tile[0] * wide.tile[1] * wide.tile[2] >= d::kMinApronTileOutputs);
  const auto mid = d::chooseTiledConfig<Space>(problem(2, 5), kCudaScratchMax);
  BOOST_TEST((mid.mode == d::TiledMode::Apron));
  BOOST_TEST(mid.tile[0] * mid.tile[1] * mid.tile[2] >= d::kMinApronTileOutputs);
  for (auto const& c : {wide, mid})
    BOOST_TEST(d::scratchBytes<Space>(c.tile, c.halo) <= kCudaScratchMax);

  // A requested starting tile (the tuning database's "ct.nlm.scratch" entry) replaces the default
  // when its apron fits, and is shrunk like the default when it does not.
  gpu::nlm_detail::Problem p2;
  p2.nx = p2.ny = 1024;
  p2.dim = 2;
  p2.r = 3;
  p2.R = 8;
  const auto asked = d::chooseTiledConfig<Space>(p2, kCudaScratchMax, {16, 8, 1});
  BOOST_TEST((asked.mode == d::TiledMode::Apron));
  BOOST_TEST(asked.tile[0] == 16);
  BOOST_TEST(asked.tile[1] == 8);
  const auto huge = d::chooseTiledConfig<Space>(p2, kCudaScratchMax, {1024, 512, 1});
  BOOST_TEST(huge.tile[0] * huge.tile[1] < 1024 * 512);
  BOOST_TEST(d::scratchBytes<Space>(huge.tile, huge.halo) <= kCudaScratchMax);
  const auto byDefault = d::chooseTiledConfig<Space>(p2, kCudaScratchMax);
  BOOST_TEST(byDefault.tile[0] == d::defaultTiledTile(2)[0]);
}
