// Kokkos multiresolution filter (gpu/multires/Multires.hpp) on every enabled execution space: every pyramid
// x layer-bilateral variant pair of each pipeline, with and without concurrent level filtering,
// against the independent CPU reference (reference_cpu/Multires.hpp) on odd sizes (float: within
// kReferenceTol; 16-bit integer: exact); decompose + reconstruct without filtering returns the
// input; a constant image passes unchanged; FusedExpand tiles do not change the result; a plan
// reused over frames (and phase by phase) repeats the one-shot results; bad inputs are refused
// with InvalidArgument and leave the output untouched. Outputs are poisoned before every run, so
// a pixel that is never written fails the comparison.
#define BOOST_TEST_MODULE Multires
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Multires.hpp"
#include "core/Phantom.hpp"
#include "core/Tuning.hpp"
#include "io/Output.hpp"
#include "gpu/multires/Multires.hpp"
#include "reference_cpu/Multires.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using namespace kortex;

namespace {

// Tuning lookups fall back to the documented defaults with a notice per kernel and size class;
// the notices would only clutter the test log.
struct QuietTuning {
  QuietTuning() { setenv("KORTEX_TUNING_QUIET", "1", 1); }
};

// Kokkos float32 vs the reference in double: every pyramid step and the layer BF round in float
// (a few ulp of the peak per level, ~1e-7), which moves the similarity weights only to that
// order; 1e-5 of the peak is the project's validation bound (issue 3).
constexpr double kReferenceTol = 1e-5;
// Round trip without filtering, float: per level, l = g - e and g' = l + e' round once each, and
// e' = expand(g'_{k+1}) differs from e by the coarser level's error plus the expand's own
// rounding (a convex combination: no growth). That is at most ~8 float roundings of
// peak-sized values per level: 8 * L * 2^-24 of the peak (2.9e-6 at L = 6).
double roundTripTol(int levels) { return 8.0 * levels * std::ldexp(1.0, -24); }
// Constant image, float: the fused variants' reduce/expand are centred (exact for a constant,
// core/Multires.hpp) and so is the layer BF, but Unfused's lowpass sums 1/256-weighted samples
// of the zero-inserted image: a few roundings of the constant per level. 4 * L * 2^-24.
double constantTol(int levels) { return 4.0 * levels * std::ldexp(1.0, -24); }

const PyramidVariant kFloatPyramids[] = {PyramidVariant::Unfused, PyramidVariant::FusedDirect,
                                         PyramidVariant::FusedExpand, PyramidVariant::FusedReduce};
const PyramidVariant kIntegerPyramids[] = {PyramidVariant::Unfused, PyramidVariant::FusedDirect,
                                           PyramidVariant::FusedExpand, PyramidVariant::Packed16,
                                           PyramidVariant::FusedReduce};
const MultiresBilateralVariant kFloatBilaterals[] = {
    MultiresBilateralVariant::Naive, MultiresBilateralVariant::ClosenessLut, MultiresBilateralVariant::FastMath,
    MultiresBilateralVariant::Reuse};

using U16Host = U16ImageView<Kokkos::HostSpace>;

std::string describe(MultiresParams const& p, Index nx, Index ny) {
  std::ostringstream os;
  os << p.pyramid << "/" << p.bilateral << (p.concurrentLevels ? " concurrent" : " in order") << " L=" << p.levels
     << " r=" << p.radius << " ss=" << p.sigmaSpatial << " sr=" << p.sigmaRange << " bits=" << p.bits
     << (p.filter ? "" : " no-filter") << " on " << nx << "x" << ny;
  return os.str();
}

constexpr std::uint16_t kPoison16 = 0xBEEF;  // above every 15-bit value

template <class Space>
U16ImageView<typename Space::memory_space> u16ToDevice(U16Host const& h) {
  U16ImageView<typename Space::memory_space> d(std::string("kortex::test::Multires::in16"), h.extent(0),
                                               h.extent(1), h.extent(2));
  Kokkos::deep_copy(d, h);
  return d;
}

template <class Space>
U16ImageView<typename Space::memory_space> poisonedU16(std::size_t nz, std::size_t ny, std::size_t nx) {
  using View = U16ImageView<typename Space::memory_space>;
  return test::poisoned(View(std::string("kortex::test::Multires::out16"), nz, ny, nx), kPoison16);
}

U16Host u16ToHost(U16ImageView<Kokkos::HostSpace> const& h) { return h; }
template <class View>
U16Host u16ToHost(View const& d) {
  U16Host h(std::string("kortex::test::Multires::host16"), d.extent(0), d.extent(1), d.extent(2));
  Kokkos::deep_copy(h, d);
  return h;
}

template <class Space>
HostImage runFloat(HostImage const& in, MultiresParams const& p) {
  Space exec;
  auto din = test::toSpace<Space>(in, "kortex::test::Multires::in");
  auto dout = test::poisonedImage<Space>(in.geometry, "kortex::test::Multires::out");
  gpu::multires(exec, din, dout, p);
  exec.fence();
  return test::toHost(dout, in.geometry);
}

template <class Space>
U16Host runInteger(U16Host const& in, MultiresParams const& p) {
  Space exec;
  auto din = u16ToDevice<Space>(in);
  auto dout = poisonedU16<Space>(1, in.extent(1), in.extent(2));
  gpu::multires(exec, din, dout, p);
  exec.fence();
  return u16ToHost(dout);
}

U16Host referenceInteger(U16Host const& in, MultiresParams const& p) {
  U16Host out(std::string("kortex::test::Multires::ref16"), 1, in.extent(1), in.extent(2));
  ref::multires(in, out, p);
  return out;
}

// Pixels that differ, and the largest difference.
struct Mismatch {
  Index count = 0;
  int maxDiff = 0;
};
Mismatch compare(U16Host const& a, U16Host const& b) {
  Mismatch m;
  for (std::size_t y = 0; y < a.extent(1); ++y)
    for (std::size_t x = 0; x < a.extent(2); ++x) {
      const int d = std::abs(int(a(0, y, x)) - int(b(0, y, x)));
      if (d != 0) ++m.count;
      if (d > m.maxDiff) m.maxDiff = d;
    }
  return m;
}

bool identical(HostImage const& a, HostImage const& b) {
  for (Index i = 0; i < a.numVoxels(); ++i) {
    const float u = a.data.data()[i], v = b.data.data()[i];
    if (!(u == v)) return false;  // NaN never equal
  }
  return true;
}

// Float test image: structured content plus noise, so every layer carries signal.
HostImage floatImage(Index nx, Index ny, std::uint64_t seed) {
  return addGaussianNoise(structuredImage(Geometry::make2D(nx, ny), seed), 0.05, seed + 1);
}

// Integer test image with `bits`-bit data: the float image scaled to [0, 2^bits - 1].
U16Host integerImage(Index nx, Index ny, int bits, std::uint64_t seed) {
  const HostImage f = floatImage(nx, ny, seed);
  float lo = f.data(0, 0, 0), hi = lo;
  for (Index i = 0; i < f.numVoxels(); ++i) {
    lo = std::min(lo, f.data.data()[i]);
    hi = std::max(hi, f.data.data()[i]);
  }
  const double maxV = double((1 << bits) - 1);
  U16Host h(std::string("kortex::test::Multires::img16"), 1, static_cast<std::size_t>(ny), static_cast<std::size_t>(nx));
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x)
      h(0, y, x) = static_cast<std::uint16_t>(std::lround((f.data(0, y, x) - lo) / (hi - lo) * maxV));
  return h;
}

struct Case {
  Index nx, ny;
  int levels;     // -1: maxLevels(nx, ny)
  int radius;
  float sigmaSpatial;
  float sigmaRange;  // float pipeline: intensity units; integer: grey levels at 10 bits (scaled)
};

int levelsOf(Case const& c) { return c.levels < 0 ? maxLevels(c.nx, c.ny) : c.levels; }

// Odd sizes (multiples of no tile); 33x5 and the -1 cases run as many levels as the image allows.
const std::vector<Case> kCases = {
    {97, 61, 4, 2, 2.0f, 0.1f}, {33, 5, -1, 2, 2.0f, 0.15f}, {97, 61, -1, 1, 1.5f, 0.2f}, {40, 23, 3, 3, 2.5f, 0.08f}};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(QuietTuning);

BOOST_AUTO_TEST_CASE(test_cases_reach_the_level_limit) {
  // The "-1" cases above are the largest pyramids these sizes allow (and one more is refused).
  BOOST_TEST(maxLevels(33, 5) == 3);
  BOOST_TEST(maxLevels(97, 61) == 6);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(float_variants_match_reference, Space, test::ExecutionSpaces) {
  std::uint64_t seed = 100;
  for (auto const& c : kCases) {
    const HostImage img = floatImage(c.nx, c.ny, ++seed);
    MultiresParams p;
    p.levels = levelsOf(c);
    p.radius = c.radius;
    p.sigmaSpatial = c.sigmaSpatial;
    p.sigmaRange = c.sigmaRange;
    const HostImage expected = ref::multires(img, p);
    for (PyramidVariant pv : kFloatPyramids)
      for (MultiresBilateralVariant bv : kFloatBilaterals)
        for (bool concurrent : {false, true}) {
          p.pyramid = pv;
          p.bilateral = bv;
          p.concurrentLevels = concurrent;
          const HostImage got = runFloat<Space>(img, p);
          const double err = test::maxRelativeError(got, expected);
          BOOST_TEST_MESSAGE(describe(p, c.nx, c.ny) << " on " << Space::name() << ": max rel err " << err);
          BOOST_TEST_INFO(describe(p, c.nx, c.ny) << " on " << Space::name() << ": max rel err " << err);
          BOOST_TEST(err <= kReferenceTol);
        }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(integer_variants_match_reference_exactly, Space, test::ExecutionSpaces) {
  std::uint64_t seed = 200;
  const int bitsOfCase[] = {10, 10, 12, 0};  // 0: automatic (the 10-bit image gives bits = 10)
  int i = 0;
  for (auto const& c : kCases) {
    const int bits = bitsOfCase[i++];
    const int dataBits = bits == 0 ? 10 : bits;
    const U16Host img = integerImage(c.nx, c.ny, dataBits, ++seed);
    MultiresParams p;
    p.levels = levelsOf(c);
    p.radius = c.radius;
    p.sigmaSpatial = c.sigmaSpatial;
    p.sigmaRange = c.sigmaRange * float((1 << dataBits) - 1);
    p.bits = bits;
    p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
    const U16Host expected = referenceInteger(img, p);
    for (PyramidVariant pv : kIntegerPyramids)
      for (bool concurrent : {false, true}) {
        p.pyramid = pv;
        p.concurrentLevels = concurrent;
        const Mismatch m = compare(runInteger<Space>(img, p), expected);
        BOOST_TEST_INFO(describe(p, c.nx, c.ny) << " on " << Space::name() << ": " << m.count
                                                << " pixels differ, by up to " << m.maxDiff);
        BOOST_TEST(m.count == 0);
      }
  }
  // sigma_r = inf (similarity table of 2^(bits+1) - 1 ones): the pyramid + closeness-only BF.
  const U16Host img = integerImage(53, 41, 10, 299);
  MultiresParams p;
  p.levels = 3;
  p.bits = 10;
  p.sigmaRange = std::numeric_limits<float>::infinity();
  p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  const U16Host expected = referenceInteger(img, p);
  for (PyramidVariant pv : kIntegerPyramids) {
    p.pyramid = pv;
    const Mismatch m = compare(runInteger<Space>(img, p), expected);
    BOOST_TEST_INFO(describe(p, 53, 41) << ": " << m.count << " pixels differ, by up to " << m.maxDiff);
    BOOST_TEST(m.count == 0);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(round_trip_without_filtering_returns_the_input, Space, test::ExecutionSpaces) {
  for (auto const& c : kCases) {
    MultiresParams p;
    p.levels = levelsOf(c);
    p.filter = false;
    const HostImage img = floatImage(c.nx, c.ny, 300 + c.nx);
    for (PyramidVariant pv : kFloatPyramids) {
      p.pyramid = pv;
      p.bilateral = MultiresBilateralVariant::ClosenessLut;
      const double err = test::maxRelativeError(runFloat<Space>(img, p), img);
      BOOST_TEST_MESSAGE(describe(p, c.nx, c.ny) << ": round trip max rel err " << err);
      BOOST_TEST_INFO(describe(p, c.nx, c.ny) << ": round trip max rel err " << err);
      BOOST_TEST(err <= roundTripTol(p.levels));
    }
    // Integer: exact, at the widest bit depth (15) as well as at 10 bits.
    for (int bits : {10, 15}) {
      const U16Host img16 = integerImage(c.nx, c.ny, bits, 400 + c.nx);
      p.bits = bits;
      p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
      for (PyramidVariant pv : kIntegerPyramids) {
        p.pyramid = pv;
        const Mismatch m = compare(runInteger<Space>(img16, p), img16);
        BOOST_TEST_INFO(describe(p, c.nx, c.ny) << ": " << m.count << " pixels differ, by up to " << m.maxDiff);
        BOOST_TEST(m.count == 0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(constant_image_passes_unchanged, Space, test::ExecutionSpaces) {
  const Index nx = 45, ny = 29;
  const float value = 0.37f;
  HostImage img("kortex::test::Multires::constant", Geometry::make2D(nx, ny));
  Kokkos::deep_copy(img.data, value);
  MultiresParams p;
  p.levels = maxLevels(nx, ny);
  for (PyramidVariant pv : kFloatPyramids)
    for (MultiresBilateralVariant bv : kFloatBilaterals)
      for (bool concurrent : {false, true}) {
        p.pyramid = pv;
        p.bilateral = bv;
        p.concurrentLevels = concurrent;
        const HostImage got = runFloat<Space>(img, p);
        double err = 0.0;
        for (Index i = 0; i < got.numVoxels(); ++i)
          err = std::max(err, std::abs(double(got.data.data()[i]) - value) / value);
        if (std::isnan(got.data(0, 0, 0))) err = INFINITY;
        BOOST_TEST_INFO(describe(p, nx, ny) << ": max rel deviation " << err);
        BOOST_TEST(err <= constantTol(p.levels));
        if (pv != PyramidVariant::Unfused) BOOST_TEST(err == 0.0);  // centred forms: exact
      }
  U16Host img16(std::string("kortex::test::Multires::constant16"), 1, ny, nx);
  Kokkos::deep_copy(img16, std::uint16_t(700));
  p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  for (int bits : {0, 10}) {
    p.bits = bits;
    for (PyramidVariant pv : kIntegerPyramids) {
      p.pyramid = pv;
      const Mismatch m = compare(runInteger<Space>(img16, p), img16);
      BOOST_TEST_INFO(describe(p, nx, ny) << ": " << m.count << " pixels differ");
      BOOST_TEST(m.count == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fused_expand_tiles_agree, Space, test::ExecutionSpaces) {
  const Index nx = 97, ny = 61;
  const HostImage img = floatImage(nx, ny, 500);
  const U16Host img16 = integerImage(nx, ny, 10, 501);
  MultiresParams p;
  p.levels = 4;
  p.pyramid = PyramidVariant::FusedExpand;
  p.tiles.bilateralX = 16;
  p.tiles.bilateralY = 4;
  p.tiles.pyramidX = 32;
  p.tiles.pyramidY = 8;
  const HostImage reference = runFloat<Space>(img, p);
  MultiresParams pi = p;
  pi.bits = 10;
  pi.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  const U16Host reference16 = runInteger<Space>(img16, pi);
  // One pixel per team, tiles wider or taller than the levels, odd extents.
  const int tiles[][2] = {{1, 1}, {5, 3}, {64, 2}, {3, 40}, {7, 1}};
  for (auto const& t : tiles) {
    p.tiles.pyramidX = pi.tiles.pyramidX = t[0];
    p.tiles.pyramidY = pi.tiles.pyramidY = t[1];
    BOOST_TEST_INFO("pyramid tile " << t[0] << "x" << t[1]);
    BOOST_TEST(identical(runFloat<Space>(img, p), reference));
    BOOST_TEST_INFO("pyramid tile " << t[0] << "x" << t[1] << ", integer");
    BOOST_TEST(compare(runInteger<Space>(img16, pi), reference16).count == 0);
    gpu::MultiresPlan<Space, float> plan(Space(), nx, ny, p);
    BOOST_TEST(plan.tiles().pyramidX == t[0]);
    BOOST_TEST(plan.tiles().pyramidY == t[1]);
  }
  // A tile whose scratch exceeds the backend's is refused, not shrunk.
  p.tiles.pyramidX = 1024;
  p.tiles.pyramidY = 1024;
  BOOST_CHECK_THROW((gpu::MultiresPlan<Space, float>(Space(), nx, ny, p)), InvalidArgument);
  p.tiles.pyramidX = 0;  // one extent from the database / default, the other explicit
  p.tiles.pyramidY = 2;
  gpu::MultiresPlan<Space, float> plan(Space(), nx, ny, p);
  BOOST_TEST(plan.tiles().pyramidY == 2);
  BOOST_TEST(plan.tiles().pyramidX > 0);
}

// FusedReduce forms g_{k+1} in scratch (the apron by both neighbouring tiles) and l_k in the same kernel:
// the same values as FusedDirect's reduce and expand kernels, so the same output bits, float and integer,
// on images of one tile, several tiles (x and y), a tile's edge and the smallest level sizes.
BOOST_AUTO_TEST_CASE_TEMPLATE(fused_reduce_equals_fused_direct_bitwise, Space, test::ExecutionSpaces) {
  const Index sizes[][2] = {{2, 2}, {3, 5}, {64, 16}, {65, 17}, {131, 77}, {200, 9}, {9, 200}};
  for (auto const& sz : sizes) {
    const Index nx = sz[0], ny = sz[1];
    for (bool filter : {false, true}) {
      BOOST_TEST_CONTEXT(Space::name() << " " << nx << "x" << ny << (filter ? " filtered" : " decompose + reconstruct")) {
        MultiresParams p;
        p.levels = maxLevels(nx, ny);
        p.filter = filter;
        p.pyramid = PyramidVariant::FusedDirect;
        const HostImage img = floatImage(nx, ny, 600 + static_cast<std::uint64_t>(nx));
        const HostImage direct = runFloat<Space>(img, p);
        p.pyramid = PyramidVariant::FusedReduce;
        BOOST_TEST(identical(runFloat<Space>(img, p), direct));
        MultiresParams pi = p;
        pi.bits = 10;
        pi.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
        pi.sigmaRange = 30.0f;
        const U16Host img16 = integerImage(nx, ny, 10, 700 + static_cast<std::uint64_t>(ny));
        pi.pyramid = PyramidVariant::FusedDirect;
        const U16Host direct16 = runInteger<Space>(img16, pi);
        pi.pyramid = PyramidVariant::FusedReduce;
        BOOST_TEST(compare(runInteger<Space>(img16, pi), direct16).count == 0);
      }
    }
  }
}

// A plan that filters the layers in reconstruct (FilterSchedule::InReconstruct, the default where it applies)
// gives the same bits as one that filters them first (Separate): odd sizes, every radius kernel (compile-time
// 1..3, run-time 4), both pyramids it applies to, tiles that divide nothing; the phases run twice (a plan is
// reused across frames). Auto resolves to InReconstruct here, and a request it does not apply to is refused.
BOOST_AUTO_TEST_CASE_TEMPLATE(filter_in_reconstruct_equals_separate_filter_bitwise, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  const Index sizes[][2] = {{2, 2}, {3, 5}, {64, 16}, {65, 17}, {131, 77}, {200, 9}, {9, 200}};
  for (auto const& sz : sizes)
    for (int radius : {1, 2, 3, 4})
      for (PyramidVariant pyr : {PyramidVariant::FusedDirect, PyramidVariant::FusedReduce}) {
        const Index nx = sz[0], ny = sz[1];
        BOOST_TEST_CONTEXT(Space::name() << " " << nx << "x" << ny << " r=" << radius << " " << pyr) {
          MultiresParams p;
          p.levels = maxLevels(nx, ny);
          p.radius = radius;
          p.sigmaRange = 0.2f;
          p.pyramid = pyr;
          p.tiles.bilateralX = 7;
          p.tiles.bilateralY = 5;
          const HostImage img = floatImage(nx, ny, 900 + static_cast<std::uint64_t>(nx * radius));
          auto din = test::toSpace<Space>(img, "kortex::test::Multires::in");
          auto run = [&](gpu::FilterSchedule schedule, gpu::FilterSchedule expected) {
            gpu::MultiresPlan<Space, float> plan(exec, nx, ny, p, schedule);
            BOOST_TEST((plan.schedule() == expected));
            auto dout = test::poisonedImage<Space>(img.geometry, "kortex::test::Multires::out");
            for (int frame = 0; frame < 2; ++frame) plan.run(din, dout);
            exec.fence();
            return test::toHost(dout, img.geometry);
          };
          const HostImage separate = run(gpu::FilterSchedule::Separate, gpu::FilterSchedule::Separate);
          BOOST_TEST(identical(run(gpu::FilterSchedule::Auto, gpu::FilterSchedule::InReconstruct), separate));
          BOOST_TEST(identical(run(gpu::FilterSchedule::InReconstruct, gpu::FilterSchedule::InReconstruct), separate));
          BOOST_TEST(test::maxRelativeError(separate, img) > 1e-3);  // the filter changed the image
        }
      }
  // Where it does not apply: Auto gives Separate, an explicit request is refused.
  MultiresParams p;
  p.levels = 2;
  p.bilateral = MultiresBilateralVariant::ClosenessLut;
  BOOST_TEST((gpu::MultiresPlan<Space, float>(exec, 16, 16, p).schedule() == gpu::FilterSchedule::Separate));
  BOOST_CHECK_THROW((gpu::MultiresPlan<Space, float>(exec, 16, 16, p, gpu::FilterSchedule::InReconstruct)),
                    InvalidArgument);
  p.bilateral = MultiresBilateralVariant::Reuse;
  p.pyramid = PyramidVariant::FusedExpand;
  BOOST_CHECK_THROW((gpu::MultiresPlan<Space, float>(exec, 16, 16, p, gpu::FilterSchedule::InReconstruct)),
                    InvalidArgument);
  p.pyramid = PyramidVariant::FusedDirect;
  p.filter = false;
  BOOST_TEST((gpu::MultiresPlan<Space, float>(exec, 16, 16, p).schedule() == gpu::FilterSchedule::Separate));
  (void)sizeof(Mem);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_inputs_are_refused_and_output_untouched, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  const Index nx = 33, ny = 5;
  const HostImage img = floatImage(nx, ny, 600);
  auto din = test::toSpace<Space>(img, "kortex::test::Multires::in");
  auto dout = test::poisonedImage<Space>(img.geometry, "kortex::test::Multires::out");
  auto untouched = [&]() {
    const HostImage h = test::toHost(dout, img.geometry);
    for (Index i = 0; i < h.numVoxels(); ++i)
      if (!std::isnan(h.data.data()[i])) return false;
    return true;
  };
  auto refuses = [&](MultiresParams const& p, const char* what) {
    bool threw = false;
    try {
      gpu::multires(exec, din, dout, p);
    } catch (InvalidArgument const& e) {
      threw = true;
      BOOST_TEST_MESSAGE(what << ": " << e.what());
    }
    BOOST_TEST_INFO(what);
    BOOST_TEST(threw);
    BOOST_TEST_INFO(what << ": output untouched");
    BOOST_TEST(untouched());
  };
  MultiresParams p;
  p.levels = 4;  // maxLevels(33, 5) == 3
  refuses(p, "too many levels");
  p.levels = 0;
  refuses(p, "zero levels");
  p.levels = 2;
  p.pyramid = PyramidVariant::Packed16;
  refuses(p, "packed16 on float input");
  p.pyramid = PyramidVariant::FusedExpand;
  p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  refuses(p, "integer LUT bilateral on float input");
  p.bilateral = MultiresBilateralVariant::ClosenessLut;
  p.tiles.pyramidX = 1024;
  p.tiles.pyramidY = 1024;
  refuses(p, "pyramid tile beyond the team scratch");
  p.tiles = MultiresTiles{};

  // Aliasing: the same view as input and output.
  {
    bool threw = false;
    try {
      gpu::multires(exec, dout, dout, p);
    } catch (InvalidArgument const&) {
      threw = true;
    }
    BOOST_TEST(threw);
    BOOST_TEST(untouched());
  }
  // 3D image and mismatched extents.
  {
    ImageView<Mem> in3("kortex::test::Multires::in3", 2, 17, 19), out3("kortex::test::Multires::out3", 2, 17, 19);
    Kokkos::deep_copy(in3, 0.5f);
    Kokkos::deep_copy(out3, -1.0f);
    BOOST_CHECK_THROW(gpu::multires(exec, in3, out3, p), InvalidArgument);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out3);
    bool same = true;
    for (std::size_t i = 0; i < h.span(); ++i) same = same && h.data()[i] == -1.0f;
    BOOST_TEST(same);
    ImageView<Mem> narrower("kortex::test::Multires::narrow", 1, ny, nx - 1);
    BOOST_CHECK_THROW(gpu::multires(exec, din, narrower, p), InvalidArgument);
    gpu::MultiresPlan<Space, float> plan(exec, nx, ny, p);
    BOOST_CHECK_THROW(plan.run(din, narrower), InvalidArgument);
    BOOST_CHECK_THROW(plan.reconstruct(dout), InvalidArgument);  // before any decompose
    BOOST_TEST(untouched());
  }

  // Integer pipeline.
  U16Host img16 = integerImage(nx, ny, 10, 601);
  auto din16 = u16ToDevice<Space>(img16);
  auto dout16 = poisonedU16<Space>(1, ny, nx);
  auto untouched16 = [&]() {
    const U16Host h = u16ToHost(dout16);
    for (std::size_t y = 0; y < h.extent(1); ++y)
      for (std::size_t x = 0; x < h.extent(2); ++x)
        if (h(0, y, x) != kPoison16) return false;
    return true;
  };
  auto refuses16 = [&](MultiresParams const& q, const char* what) {
    bool threw = false;
    try {
      gpu::multires(exec, din16, dout16, q);
    } catch (InvalidArgument const& e) {
      threw = true;
      BOOST_TEST_MESSAGE(what << ": " << e.what());
    }
    BOOST_TEST_INFO(what);
    BOOST_TEST(threw);
    BOOST_TEST_INFO(what << ": output untouched");
    BOOST_TEST(untouched16());
  };
  MultiresParams q;
  q.levels = 2;
  q.bits = 10;
  q.bilateral = MultiresBilateralVariant::Naive;
  refuses16(q, "float bilateral on integer input");
  q.bilateral = MultiresBilateralVariant::ClosenessLut;
  refuses16(q, "closeness-LUT bilateral on integer input");
  q.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  q.levels = 4;
  refuses16(q, "too many levels (integer)");
  q.levels = 2;
  for (PyramidVariant pv : kIntegerPyramids) {
    q.pyramid = pv;
    q.bits = 9;  // the 10-bit image exceeds 511
    refuses16(q, "value above 2^bits - 1");
  }
  // A single pixel above the range, and a value that needs 16 bits with automatic bits.
  img16(0, 2, 7) = 1024;
  Kokkos::deep_copy(din16, img16);
  q.bits = 10;
  refuses16(q, "one pixel above 2^bits - 1");
  img16(0, 2, 7) = 40000;
  Kokkos::deep_copy(din16, img16);
  q.bits = 0;
  refuses16(q, "16-bit value with automatic bits");
  {
    bool threw = false;
    try {
      gpu::multires(exec, dout16, dout16, q);
    } catch (InvalidArgument const&) {
      threw = true;
    }
    BOOST_TEST(threw);
    BOOST_TEST(untouched16());
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(plan_reuse_repeats_one_shot_results, Space, test::ExecutionSpaces) {
  const Index nx = 61, ny = 37;
  const HostImage a = floatImage(nx, ny, 700), b = floatImage(nx, ny, 701);
  for (PyramidVariant pv : kFloatPyramids)
    for (bool concurrent : {false, true}) {
      MultiresParams p;
      p.levels = 4;
      p.pyramid = pv;
      p.concurrentLevels = concurrent;
      const HostImage oneA = runFloat<Space>(a, p), oneB = runFloat<Space>(b, p);
      Space exec;
      gpu::MultiresPlan<Space, float> plan(exec, nx, ny, p);
      // l_0 and l'_0 at least (InReconstruct stores no l'_k)
      const std::size_t layers = plan.schedule() == gpu::FilterSchedule::InReconstruct ? 1 : 2;
      BOOST_TEST(plan.bytes() > std::size_t(layers * nx * ny * sizeof(float)));
      const auto t = plan.tiles();
      BOOST_TEST(t.bilateralX > 0);
      BOOST_TEST(t.bilateralY > 0);
      BOOST_TEST((pv == PyramidVariant::FusedExpand) == (t.pyramidX > 0 && t.pyramidY > 0));
      auto da = test::toSpace<Space>(a, "kortex::test::Multires::a");
      auto db = test::toSpace<Space>(b, "kortex::test::Multires::b");
      auto out = test::poisonedImage<Space>(a.geometry, "kortex::test::Multires::out");
      const HostImage* expected[] = {&oneA, &oneB, &oneA};
      int frame = 0;
      for (auto const& in : {da, db, da}) {
        Kokkos::deep_copy(out, std::numeric_limits<float>::quiet_NaN());
        plan.run(in, out);
        exec.fence();
        BOOST_TEST_INFO(describe(p, nx, ny) << ", frame " << frame);
        BOOST_TEST(identical(test::toHost(out, a.geometry), *expected[frame]));
        ++frame;
      }
      // Phase by phase, each phase repeated: the same image.
      Kokkos::deep_copy(out, std::numeric_limits<float>::quiet_NaN());
      plan.decompose(db);
      plan.decompose(db);
      plan.filterLayers();
      plan.filterLayers();
      plan.reconstruct(out);
      plan.reconstruct(out);
      exec.fence();
      BOOST_TEST_INFO(describe(p, nx, ny) << ", phases");
      BOOST_TEST(identical(test::toHost(out, b.geometry), oneB));
    }
  // Integer, automatic bit depth changing between frames (10-bit, 12-bit, 10-bit): the plan
  // rebuilds its similarity table and matches the reference exactly.
  const U16Host a16 = integerImage(nx, ny, 10, 710), b16 = integerImage(nx, ny, 12, 711);
  MultiresParams p;
  p.levels = 4;
  p.bits = 0;
  p.sigmaRange = 60.0f;
  p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  const U16Host refA = referenceInteger(a16, p), refB = referenceInteger(b16, p);
  for (PyramidVariant pv : kIntegerPyramids) {
    p.pyramid = pv;
    Space exec;
    gpu::MultiresPlan<Space, std::uint16_t> plan(exec, nx, ny, p);
    auto da = u16ToDevice<Space>(a16), db = u16ToDevice<Space>(b16);
    auto out = poisonedU16<Space>(1, ny, nx);
    const U16Host* expected[] = {&refA, &refB, &refA};
    int frame = 0;
    for (auto const& in : {da, db, da}) {
      Kokkos::deep_copy(out, kPoison16);
      plan.run(in, out);
      exec.fence();
      const Mismatch m = compare(u16ToHost(out), *expected[frame]);
      BOOST_TEST_INFO(describe(p, nx, ny) << ", frame " << frame << ": " << m.count << " pixels differ");
      BOOST_TEST(m.count == 0);
      ++frame;
    }
  }
}

// Tiles not given in the params come from the tuning database (here a user database named by
// KORTEX_TUNING_DB); an entry the kernels cannot use gives the documented default, not an error.
BOOST_AUTO_TEST_CASE_TEMPLATE(tiles_come_from_the_tuning_database, Space, test::ExecutionSpaces) {
  const Index nx = 97, ny = 61;
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("kortex-tstMultires-" + std::string(Space::name()) + "-" + std::to_string(::getpid()) + ".json"))
          .string();
  auto entry = [&](const char* kernel, int x, int y) {
    tuning::Entry e;
    e.kernel = kernel;
    e.device = tuning::deviceFor<Space>();  // the key the plan of this space looks up
    e.sizeClass = tuning::sizeClass(nx, ny);
    e.config = {{"x", x}, {"y", y}};
    e.medianMs = 0.1;
    e.worstMs = 0.2;
    e.candidates = 2;
    e.kokkos = "test";
    e.git = "test";
    e.date = "2026-11-22";
    return e;
  };
  tuning::Database db;
  db.put(entry("multires.pyramid", 16, 4));
  db.put(entry("multires.bilateral", 64, 2));
  io::saveTuningDatabase(db, path);
  const char* previous = std::getenv("KORTEX_TUNING_DB");
  const std::string saved = previous ? previous : "";
  setenv("KORTEX_TUNING_DB", path.c_str(), 1);
  tuning::resetCache();

  MultiresParams p;
  p.levels = 4;
  p.pyramid = PyramidVariant::FusedExpand;  // the variant with a pyramid tile
  {
    gpu::MultiresPlan<Space, float> plan(Space(), nx, ny, p);
    const MultiresTiles t = plan.tiles();
    BOOST_TEST(t.pyramidX == 16);
    BOOST_TEST(t.pyramidY == 4);
    BOOST_TEST(t.bilateralX == 64);
    BOOST_TEST(t.bilateralY == 2);
  }
  // The tuned tiles change which team computes a pixel, never its value.
  const HostImage img = floatImage(nx, ny, 800);
  const HostImage tuned = runFloat<Space>(img, p);
  MultiresParams explicitTiles = p;
  explicitTiles.tiles = MultiresTiles{32, 8, 32, 8};
  BOOST_TEST(identical(tuned, runFloat<Space>(img, explicitTiles)));

  // Unusable entries (tiles beyond the kernels' limits): the defaults, with a warning.
  db.put(entry("multires.pyramid", 4096, 1));
  db.put(entry("multires.bilateral", 512, 512));
  io::saveTuningDatabase(db, path);
  tuning::resetCache();
  {
    gpu::MultiresPlan<Space, float> plan(Space(), nx, ny, p);
    const MultiresTiles t = plan.tiles();
    BOOST_TEST(t.pyramidX == 32);
    BOOST_TEST(t.pyramidY == 8);
    BOOST_TEST(t.bilateralX == 32);
    BOOST_TEST(t.bilateralY == 8);
  }

  if (previous)
    setenv("KORTEX_TUNING_DB", saved.c_str(), 1);
  else
    unsetenv("KORTEX_TUNING_DB");
  tuning::resetCache();
  std::filesystem::remove(path);
}

// Packed16 addresses level 0 as 32-bit words: images starting 2 bytes into a word (a view into a
// larger allocation) take the single-pixel head, and an input and output of different alignment
// read the input pixel by pixel. Every combination gives the aligned result.
BOOST_AUTO_TEST_CASE_TEMPLATE(packed16_handles_any_alignment, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  using Flat = Kokkos::View<std::uint16_t*, Mem>;
  using Unmanaged = Kokkos::View<std::uint16_t***, Kokkos::LayoutRight, Mem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  for (Index nx : {Index(33), Index(34)}) {  // odd and even pixel counts per level
    const Index ny = 21;
    const U16Host img = integerImage(nx, ny, 10, 900 + nx);
    MultiresParams p;
    p.levels = 3;
    p.bits = 10;
    p.pyramid = PyramidVariant::Packed16;
    p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
    const U16Host expected = referenceInteger(img, p);
    const std::size_t n = static_cast<std::size_t>(nx * ny);
    Flat inBuf("kortex::test::Multires::inBuf", n + 2), outBuf("kortex::test::Multires::outBuf", n + 2);
    for (int inOff : {0, 1})
      for (int outOff : {0, 1}) {
        Unmanaged in(inBuf.data() + inOff, 1, ny, nx), out(outBuf.data() + outOff, 1, ny, nx);
        Kokkos::deep_copy(in, img);
        Kokkos::deep_copy(outBuf, kPoison16);
        Space exec;
        gpu::multires(exec, ConstU16ImageView<Mem>(in), U16ImageView<Mem>(out), p);
        exec.fence();
        const Mismatch m = compare(u16ToHost(out), expected);
        BOOST_TEST_INFO(nx << "x" << ny << ", input offset " << inOff << ", output offset " << outOff << ": "
                           << m.count << " pixels differ");
        BOOST_TEST(m.count == 0);
        // Nothing outside the output image was written.
        auto buf = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), outBuf);
        const std::size_t last = static_cast<std::size_t>(outOff) + n;
        BOOST_TEST((outOff == 0 || buf(0) == kPoison16));
        for (std::size_t i = last; i < n + 2; ++i) BOOST_TEST(buf(i) == kPoison16);
      }
  }
}
