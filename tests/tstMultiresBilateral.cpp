// Multires layer bilateral (gpu/multires/MultiresBilateral.hpp) on every enabled execution space: each
// variant against a straightforward loop written here (double precision for float layers, int64
// with the same fixed-point tables for integer layers), on odd layer sizes and on a layer smaller
// than the window, with several tiles (one output per team, tiles larger than the layer, tiles
// that divide nothing); analytic properties (constant layer unchanged, sigma_r = inf is the
// normalised Gaussian blur, r = 0 is the identity); bad inputs throw and leave `out` untouched.
// Outputs are poisoned before every run, so a pixel that is never written fails the comparison.
#define BOOST_TEST_MODULE MultiresBilateral
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Multires.hpp"
#include "gpu/multires/MultiresBilateral.hpp"
#include "gpu/multires/detail/MultiresBilateralKernels.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace kortex;
namespace md = kortex::gpu::multires_detail;

namespace {

// Float kernels vs the double loop, relative to the layer's peak |value|: per tap a float exp
// (<= 2 ulp; CUDA's __expf for FastMath: 2 + 1.2|x| ulp, and taps with large |x| carry weights
// e^x; Reuse's one exp2 of the summed exponent, 2 ulp of it, the same) and float sums of <= 11 taps per row over <= 11 rows in centred form, so the error stays
// near (2r+1) * 2^-24 ~ 1e-6 of the peak, while a wrong tap, weight or clamped index moves an
// output by >= 1e-3 of it.
constexpr double kFloatTol = 1e-5;
// Constant layer: every difference is exactly 0, so the centred sum is exactly 0 and the output
// is the centre value bit for bit (float and integer).
constexpr double kIdentityTol = 0.0;

const std::vector<MultiresBilateralVariant> kFloatVariants = {
    MultiresBilateralVariant::Naive, MultiresBilateralVariant::ClosenessLut,
    MultiresBilateralVariant::FastMath, MultiresBilateralVariant::Reuse};
// (0, 0): the default tile; {1, 1}: one output per team; {64, 4} exceeds the small layers;
// {7, 5} divides no extent.
const std::vector<md::LayerTile> kTiles = {{0, 0}, {1, 1}, {32, 8}, {7, 5}, {64, 4}};
// 0: identity window; 1..3: the compile-time-radius kernels; 5: the run-time-radius kernel.
const std::vector<int> kRadii = {0, 1, 2, 3, 5};

struct Size {
  int nx, ny;
};
// Odd sizes (no tile divides them), a layer smaller than every window, a single row and column.
const std::vector<Size> kSizes = {{37, 23}, {3, 2}, {1, 9}, {19, 1}};

std::string str(Size s) { return std::to_string(s.nx) + "x" + std::to_string(s.ny); }

std::string describe(MultiresParams const& p, Size s, md::LayerTile t) {
  std::ostringstream os;
  os << p.bilateral << " r=" << p.radius << " sigma_s=" << p.sigmaSpatial
     << " sigma_r=" << p.sigmaRange << " on " << str(s) << " tile " << t.x << "x" << t.y;
  return os.str();
}

// Laplacian-like signed layer: a smooth wave, a step edge and uniform noise, values in about
// [-amp, amp].
std::vector<float> floatLayer(Size s, float amp, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> noise(-0.35f, 0.35f);
  std::vector<float> v(static_cast<std::size_t>(s.nx) * s.ny);
  for (int y = 0; y < s.ny; ++y)
    for (int x = 0; x < s.nx; ++x) {
      const float wave = 0.4f * std::sin(0.45f * x + 0.3f * y);
      const float step = x > s.nx / 2 ? 0.25f : -0.25f;
      v[static_cast<std::size_t>(y) * s.nx + x] = amp * (wave + step + noise(gen));
    }
  return v;
}

std::vector<std::int16_t> intLayer(Size s, int maxAbs, unsigned seed) {
  const std::vector<float> f = floatLayer(s, 1.0f, seed);
  std::vector<std::int16_t> v(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    const long q = std::lround(f[i] * static_cast<float>(maxAbs));
    v[i] = static_cast<std::int16_t>(q > maxAbs ? maxAbs : (q < -maxAbs ? -maxAbs : q));
  }
  return v;
}

int clampI(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

// BF by its definition, in double: sum c s l / sum c s over the clamped window.
std::vector<double> referenceFloat(std::vector<float> const& in, Size s, int r, double sigmaS,
                                   double sigmaR) {
  std::vector<double> out(in.size());
  for (int y = 0; y < s.ny; ++y)
    for (int x = 0; x < s.nx; ++x) {
      const double c = in[static_cast<std::size_t>(y) * s.nx + x];
      double num = 0.0, den = 0.0;
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const double v =
              in[static_cast<std::size_t>(clampI(y + dy, s.ny)) * s.nx + clampI(x + dx, s.nx)];
          const double closeness = std::exp(-(dx * dx + dy * dy) / (2.0 * sigmaS * sigmaS));
          const double similarity =
              std::isinf(sigmaR) ? 1.0 : std::exp(-(v - c) * (v - c) / (2.0 * sigmaR * sigmaR));
          num += closeness * similarity * v;
          den += closeness * similarity;
        }
      out[static_cast<std::size_t>(y) * s.nx + x] = num / den;
    }
  return out;
}

// Normalised Gaussian blur (clamped window): what BF reduces to for sigma_r = inf.
std::vector<double> gaussianBlur(std::vector<float> const& in, Size s, int r, double sigmaS) {
  std::vector<double> kernel;
  double total = 0.0;
  for (int dy = -r; dy <= r; ++dy)
    for (int dx = -r; dx <= r; ++dx) {
      kernel.push_back(std::exp(-(dx * dx + dy * dy) / (2.0 * sigmaS * sigmaS)));
      total += kernel.back();
    }
  std::vector<double> out(in.size(), 0.0);
  for (int y = 0; y < s.ny; ++y)
    for (int x = 0; x < s.nx; ++x) {
      double acc = 0.0;
      std::size_t k = 0;
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx, ++k)
          acc += kernel[k] *
                 in[static_cast<std::size_t>(clampI(y + dy, s.ny)) * s.nx + clampI(x + dx, s.nx)];
      out[static_cast<std::size_t>(y) * s.nx + x] = acc / total;
    }
  return out;
}

// Nearest integer to num / den (den > 0), halves away from zero, written out independently of
// multiresRoundDiv: q = floor((2|num| + den) / (2 den)), with num's sign.
std::int64_t roundHalfAway(std::int64_t num, std::int64_t den) {
  const std::int64_t a = num < 0 ? -num : num;
  const std::int64_t q = (2 * a + den) / (2 * den);
  return num < 0 ? -q : q;
}

// Integer BF with the fixed-point tables: w = cQ * sQ, sums in int64.
std::vector<std::int16_t> referenceInt(std::vector<std::int16_t> const& in, Size s, int r,
                                       std::vector<std::int32_t> const& cQ,
                                       std::vector<std::int32_t> const& sQ) {
  std::vector<std::int16_t> out(in.size());
  const int w = 2 * r + 1;
  for (int y = 0; y < s.ny; ++y)
    for (int x = 0; x < s.nx; ++x) {
      const std::int64_t c = in[static_cast<std::size_t>(y) * s.nx + x];
      std::int64_t num = 0, den = 0;
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const std::int64_t v =
              in[static_cast<std::size_t>(clampI(y + dy, s.ny)) * s.nx + clampI(x + dx, s.nx)];
          const std::int64_t d = v > c ? v - c : c - v;
          const std::int64_t sim =
              d < static_cast<std::int64_t>(sQ.size()) ? sQ[static_cast<std::size_t>(d)] : 0;
          const std::int64_t weight =
              std::int64_t{cQ[static_cast<std::size_t>((dy + r) * w + (dx + r))]} * sim;
          num += weight * v;
          den += weight;
        }
      out[static_cast<std::size_t>(y) * s.nx + x] =
          static_cast<std::int16_t>(roundHalfAway(num, den));
    }
  return out;
}

double maxRelError(std::vector<float> const& got, std::vector<double> const& ref) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num = std::max(num, std::abs(double(got[i]) - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return den > 0 ? num / den : num;
}

template <class Mem, class T>
Kokkos::View<T**, Kokkos::LayoutRight, Mem> toDevice2D(std::vector<T> const& h, Size s,
                                                       const char* label) {
  Kokkos::View<T**, Kokkos::LayoutRight, Mem> d(std::string(label), s.ny, s.nx);
  Kokkos::View<const T**, Kokkos::LayoutRight, Kokkos::HostSpace,
               Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      hv(h.data(), s.ny, s.nx);
  Kokkos::deep_copy(d, hv);
  return d;
}

template <class Mem, class T>
Kokkos::View<T*, Mem> tableToDevice(std::vector<T> const& h, const char* label) {
  Kokkos::View<T*, Mem> d(std::string(label), h.size());
  Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> hv(h.data(),
                                                                                        h.size());
  Kokkos::deep_copy(d, hv);
  return d;
}

template <class View>
std::vector<typename View::non_const_value_type> toHost2D(View const& d) {
  using T = typename View::non_const_value_type;
  std::vector<T> h(d.size());
  Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      hv(h.data(), d.extent(0), d.extent(1));
  Kokkos::deep_copy(hv, d);
  return h;
}

constexpr std::int16_t kIntPoison = std::numeric_limits<std::int16_t>::min();

// Runs the float layer bilateral on Space into a NaN-poisoned output; returns it on the host.
template <class Space>
std::vector<float> runFloat(std::vector<float> const& in, Size s, MultiresParams const& p,
                            md::LayerTile tile, md::LayerTile* used = nullptr) {
  using Mem = typename Space::memory_space;
  Space exec;
  auto din = toDevice2D<Mem>(in, s, "kortex::test::MultiresBilateral::in");
  auto dout = test::poisoned(LayerView<Mem>(std::string("kortex::test::MultiresBilateral::out"), s.ny, s.nx));
  auto table = tableToDevice<Mem>(multiresCloseness(p.radius, p.sigmaSpatial),
                                  "kortex::test::MultiresBilateral::closeness");
  const md::LayerTile t = md::bilateralLayer(exec, md::ConstLayer<Mem>(din), dout,
                                             md::ConstFloatTable<Mem>(table), p, tile);
  if (used) *used = t;
  exec.fence();
  return toHost2D(dout);
}

// Runs the integer layer bilateral (explicit placement through the Impl entry point, Auto
// through the public one) into a poisoned output.
template <class Space>
std::vector<std::int16_t> runInt(std::vector<std::int16_t> const& in, Size s,
                                 MultiresParams const& p, std::vector<std::int32_t> const& cQ,
                                 std::vector<std::int32_t> const& sQ, md::LayerTile tile,
                                 md::SimilarityPlacement placement) {
  using Mem = typename Space::memory_space;
  Space exec;
  auto din = toDevice2D<Mem>(in, s, "kortex::test::MultiresBilateral::inQ");
  auto dout = test::poisoned(IntLayerView<Mem>(std::string("kortex::test::MultiresBilateral::outQ"), s.ny, s.nx),
                             kIntPoison);
  auto dc = tableToDevice<Mem>(cQ, "kortex::test::MultiresBilateral::closenessQ");
  auto ds = tableToDevice<Mem>(sQ, "kortex::test::MultiresBilateral::similarityQ");
  if (placement == md::SimilarityPlacement::Auto)
    md::bilateralLayer(exec, md::ConstIntLayer<Mem>(din), dout, md::ConstTable<Mem>(dc),
                       md::ConstTable<Mem>(ds), p, tile);
  else
    md::bilateralLayerQ(exec, md::ConstIntLayer<Mem>(din), dout, md::ConstTable<Mem>(dc),
                        md::ConstTable<Mem>(ds), p, tile, placement);
  exec.fence();
  return toHost2D(dout);
}

std::size_t countDifferent(std::vector<std::int16_t> const& a, std::vector<std::int16_t> const& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

}  // namespace

// Every float variant, radius, layer size and tile against the double loop.
BOOST_AUTO_TEST_CASE_TEMPLATE(float_variants_match_double_loop, Space, test::ExecutionSpaces) {
  std::vector<double> worst(kFloatVariants.size(), 0.0);  // per variant, for the log
  for (Size s : kSizes) {
    const std::vector<float> in = floatLayer(s, 0.5f, 7u + static_cast<unsigned>(s.nx));
    for (int r : kRadii)
      for (float sigmaR : {0.08f, 0.3f}) {
        MultiresParams p;
        p.radius = r;
        p.sigmaSpatial = r == 5 ? 2.5f : 1.5f;
        p.sigmaRange = sigmaR;
        const std::vector<double> expected = referenceFloat(in, s, r, p.sigmaSpatial, p.sigmaRange);
        for (std::size_t k = 0; k < kFloatVariants.size(); ++k)
          for (md::LayerTile tile : kTiles) {
            p.bilateral = kFloatVariants[k];
            const double err = maxRelError(runFloat<Space>(in, s, p, tile), expected);
            worst[k] = std::max(worst[k], err);
            BOOST_TEST_INFO(describe(p, s, tile)
                            << " on " << Space::name() << ": max rel err " << err);
            BOOST_TEST(err <= kFloatTol);
          }
      }
  }
  BOOST_TEST_MESSAGE(Space::name() << ": max rel err Naive " << worst[0] << ", ClosenessLut "
                                   << worst[1] << ", FastMath " << worst[2] << ", Reuse " << worst[3]);
  // The filter does something here (the comparison is not vacuous): r = 2 moves the 37x23
  // layer by far more than the tolerance.
  const Size s{37, 23};
  const std::vector<float> in = floatLayer(s, 0.5f, 44u);
  MultiresParams p;
  p.sigmaRange = 0.3f;
  std::vector<double> asDouble(in.begin(), in.end());
  BOOST_TEST(maxRelError(runFloat<Space>(in, s, p, {}), asDouble) > 1e-2);
}

// Reuse on a batch of layers (one launch for up to kMaxBatchLayers, more launches beyond): every layer
// the same bits as bilateralLayer alone, for every radius (compile-time and run-time kernels) and tile,
// with layers of different sizes (a pyramid's and odd ones) and more layers than one launch holds.
BOOST_AUTO_TEST_CASE_TEMPLATE(batched_layers_equal_single_layers_bitwise, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  std::vector<Size> sizes = {{37, 23}, {19, 12}, {10, 6}, {5, 3}, {3, 2}, {1, 9}, {19, 1}, {64, 33}, {2, 2}, {11, 40}};
  BOOST_TEST(sizes.size() > static_cast<std::size_t>(md::kMaxBatchLayers));  // two launches
  for (int r : kRadii)
    for (md::LayerTile tile : kTiles) {
      MultiresParams p;
      p.radius = r;
      p.sigmaSpatial = r == 5 ? 2.5f : 1.5f;
      p.sigmaRange = 0.3f;
      p.bilateral = MultiresBilateralVariant::Reuse;
      std::vector<std::vector<float>> inputs;
      std::vector<md::ConstLayer<Mem>> ins;
      std::vector<LayerView<Mem>> outs;
      for (std::size_t b = 0; b < sizes.size(); ++b) {
        inputs.push_back(floatLayer(sizes[b], 0.5f, 91u + static_cast<unsigned>(b)));
        ins.emplace_back(toDevice2D<Mem>(inputs.back(), sizes[b], "kortex::test::MultiresBilateral::batch_in"));
        outs.push_back(test::poisoned(
            LayerView<Mem>(std::string("kortex::test::MultiresBilateral::batch_out"), sizes[b].ny, sizes[b].nx)));
      }
      const md::LayerTile used = md::bilateralLayers(exec, ins, outs, p, tile);
      exec.fence();
      md::LayerTile single;
      for (std::size_t b = 0; b < sizes.size(); ++b) {
        BOOST_TEST_CONTEXT(Space::name() << " " << describe(p, sizes[b], tile) << ", layer " << b) {
          const std::vector<float> alone = runFloat<Space>(inputs[b], sizes[b], p, tile, &single);
          const std::vector<float> batched = toHost2D(outs[b]);
          BOOST_TEST(std::memcmp(alone.data(), batched.data(), alone.size() * sizeof(float)) == 0);
          BOOST_TEST(used.x == single.x);
          BOOST_TEST(used.y == single.y);
        }
      }
    }
  // Refused: another variant, unequal or empty lists; nothing is written then.
  MultiresParams p;
  const Size s{7, 5};
  auto in = toDevice2D<Mem>(floatLayer(s, 0.5f, 3u), s, "kortex::test::MultiresBilateral::batch_in");
  auto out = test::poisoned(LayerView<Mem>(std::string("kortex::test::MultiresBilateral::batch_out"), s.ny, s.nx));
  std::vector<md::ConstLayer<Mem>> ins = {in};
  std::vector<LayerView<Mem>> outs = {out};
  p.bilateral = MultiresBilateralVariant::Naive;
  BOOST_CHECK_THROW(md::bilateralLayers(exec, ins, outs, p, {}), InvalidArgument);
  p.bilateral = MultiresBilateralVariant::Reuse;
  BOOST_CHECK_THROW(md::bilateralLayers(exec, ins, std::vector<LayerView<Mem>>{}, p, {}), InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayers(exec, std::vector<md::ConstLayer<Mem>>{}, std::vector<LayerView<Mem>>{}, p, {}),
                    InvalidArgument);
  std::vector<LayerView<Mem>> aliased = {LayerView<Mem>(Kokkos::View<float**, Kokkos::LayoutRight, Mem>(
      const_cast<float*>(in.data()), s.ny, s.nx))};
  BOOST_CHECK_THROW(md::bilateralLayers(exec, ins, aliased, p, {}), InvalidArgument);
  exec.fence();
  for (float v : toHost2D(out)) BOOST_TEST(std::isnan(v));
}

// The tile the call reports: 0 per axis -> kDefaultBilateralTile, anything else as given.
BOOST_AUTO_TEST_CASE_TEMPLATE(returns_the_tile_used, Space, test::ExecutionSpaces) {
  const Size s{37, 23};
  const std::vector<float> in = floatLayer(s, 0.5f, 3u);
  MultiresParams p;
  p.bilateral = MultiresBilateralVariant::ClosenessLut;  // a variant that runs every tile as given
  md::LayerTile used;
  runFloat<Space>(in, s, p, {0, 0}, &used);
  BOOST_TEST(used.x == md::kDefaultBilateralTile.x);
  BOOST_TEST(used.y == md::kDefaultBilateralTile.y);
  runFloat<Space>(in, s, p, {0, 5}, &used);
  BOOST_TEST(used.x == md::kDefaultBilateralTile.x);
  BOOST_TEST(used.y == 5);
  runFloat<Space>(in, s, p, {7, 0}, &used);
  BOOST_TEST(used.x == 7);
  BOOST_TEST(used.y == md::kDefaultBilateralTile.y);
  runFloat<Space>(in, s, p, {1024, 1}, &used);
  BOOST_TEST(used.x == 1024);
  BOOST_TEST(used.y == 1);
  // Reuse: at least kReuseRows rows, x halved to stay within kMaxTileOutputs.
  p.bilateral = MultiresBilateralVariant::Reuse;
  runFloat<Space>(in, s, p, {1024, 1}, &used);
  BOOST_TEST(used.x == 256);
  BOOST_TEST(used.y == md::kReuseRows);
  runFloat<Space>(in, s, p, {16, 8}, &used);
  BOOST_TEST(used.x == 16);
  BOOST_TEST(used.y == 8);
}

// The integer variant, with both similarity-table placements, is bit-identical to the int64
// loop with the same tables: 10-bit layers (values in [-1023, 1023], differences up to 2046)
// with a short, a long and an infinite-sigma table.
BOOST_AUTO_TEST_CASE_TEMPLATE(integer_matches_int64_loop, Space, test::ExecutionSpaces) {
  constexpr int kMax = 1023;
  for (Size s : kSizes) {
    const std::vector<std::int16_t> in = intLayer(s, kMax, 17u + static_cast<unsigned>(s.ny));
    for (int r : kRadii)
      for (float sigmaR : {6.0f, 150.0f, std::numeric_limits<float>::infinity()}) {
        MultiresParams p;
        p.radius = r;
        p.sigmaSpatial = r == 5 ? 2.5f : 1.5f;
        p.sigmaRange = sigmaR;
        p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
        const auto cQ = multiresClosenessQ(r, p.sigmaSpatial);
        const auto sQ = multiresSimilarityQ(sigmaR, 2 * kMax);
        const std::vector<std::int16_t> expected = referenceInt(in, s, r, cQ, sQ);
        BOOST_TEST_REQUIRE(md::similarityFitsScratch<Space>(r, sQ.size()));
        for (auto placement : {md::SimilarityPlacement::Auto, md::SimilarityPlacement::Scratch,
                               md::SimilarityPlacement::Global})
          for (md::LayerTile tile : kTiles) {
            const auto got = runInt<Space>(in, s, p, cQ, sQ, tile, placement);
            const std::size_t bad = countDifferent(got, expected);
            BOOST_TEST_INFO(describe(p, s, tile)
                            << " placement " << static_cast<int>(placement) << " (table "
                            << sQ.size() << ") on " << Space::name() << ": " << bad
                            << " pixels differ");
            BOOST_TEST(bad == 0u);
          }
      }
  }
  // Not vacuous: r = 2, sigma_r = 150 changes most pixels of the 37x23 layer.
  const Size s{37, 23};
  const std::vector<std::int16_t> in = intLayer(s, kMax, 5u);
  MultiresParams p;
  p.sigmaRange = 150.0f;
  p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  const auto got =
      runInt<Space>(in, s, p, multiresClosenessQ(2, p.sigmaSpatial),
                    multiresSimilarityQ(p.sigmaRange, 2 * kMax), {}, md::SimilarityPlacement::Auto);
  BOOST_TEST(countDifferent(got, in) > in.size() / 2);
}

// Full 16-bit range: a similarity table of 65,535 entries (256 KiB) exceeds every team scratch,
// so the automatic placement reads it from global memory; sums of w * l reach ~2^49 (int64).
BOOST_AUTO_TEST_CASE_TEMPLATE(integer_large_table_reads_global, Space, test::ExecutionSpaces) {
  constexpr int kMax = 32767;
  const Size s{37, 23};
  const std::vector<std::int16_t> in = intLayer(s, kMax, 29u);
  for (int r : {2, 4}) {
    MultiresParams p;
    p.radius = r;
    p.sigmaRange = 20000.0f;
    p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
    const auto cQ = multiresClosenessQ(r, p.sigmaSpatial);
    const auto sQ = multiresSimilarityQ(p.sigmaRange, 2 * kMax);
    BOOST_TEST_REQUIRE(sQ.size() == std::size_t{2 * kMax + 1});
    BOOST_TEST(!md::similarityFitsScratch<Space>(r, sQ.size()));
    const auto expected = referenceInt(in, s, r, cQ, sQ);
    for (md::LayerTile tile : {md::LayerTile{32, 8}, md::LayerTile{7, 5}}) {
      const auto got = runInt<Space>(in, s, p, cQ, sQ, tile, md::SimilarityPlacement::Auto);
      BOOST_TEST_INFO("r=" << r << " tile " << tile.x << "x" << tile.y);
      BOOST_TEST(countDifferent(got, expected) == 0u);
    }
    BOOST_CHECK_THROW(runInt<Space>(in, s, p, cQ, sQ, {}, md::SimilarityPlacement::Scratch),
                      Unsupported);
  }
}

// A constant layer comes out unchanged, bit for bit, in every variant.
BOOST_AUTO_TEST_CASE_TEMPLATE(constant_layer_unchanged, Space, test::ExecutionSpaces) {
  for (Size s : {Size{37, 23}, Size{3, 2}})
    for (int r : kRadii) {
      MultiresParams p;
      p.radius = r;
      p.sigmaRange = 0.05f;
      const std::vector<float> in(static_cast<std::size_t>(s.nx) * s.ny, -0.3127f);
      const std::vector<double> expected(in.begin(), in.end());
      for (MultiresBilateralVariant v : kFloatVariants)
        for (md::LayerTile tile : {md::LayerTile{0, 0}, md::LayerTile{7, 5}}) {
          p.bilateral = v;
          const double err = maxRelError(runFloat<Space>(in, s, p, tile), expected);
          BOOST_TEST_INFO(describe(p, s, tile) << ": " << err);
          BOOST_TEST(err <= kIdentityTol);
        }
      p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
      p.sigmaRange = 4.0f;
      const std::vector<std::int16_t> inQ(in.size(), std::int16_t{-517});
      const auto got = runInt<Space>(inQ, s, p, multiresClosenessQ(r, p.sigmaSpatial),
                                     multiresSimilarityQ(p.sigmaRange, 2046), {7, 5},
                                     md::SimilarityPlacement::Auto);
      BOOST_TEST_INFO("integer r=" << r << " on " << str(s));
      BOOST_TEST(countDifferent(got, inQ) == 0u);
    }
}

// sigma_r = inf: every similarity is 1 and BF is the normalised Gaussian blur (clamped window);
// r = 0 is the identity for any sigma_r.
BOOST_AUTO_TEST_CASE_TEMPLATE(infinite_sigma_range_is_gaussian_blur, Space, test::ExecutionSpaces) {
  for (Size s : {Size{37, 23}, Size{3, 2}}) {
    const std::vector<float> in = floatLayer(s, 0.5f, 99u);
    for (int r : kRadii)
      for (MultiresBilateralVariant v : kFloatVariants) {
        MultiresParams p;
        p.radius = r;
        p.sigmaSpatial = 1.7f;
        p.sigmaRange = std::numeric_limits<float>::infinity();
        p.bilateral = v;
        const double err =
            maxRelError(runFloat<Space>(in, s, p, {32, 8}), gaussianBlur(in, s, r, p.sigmaSpatial));
        BOOST_TEST_INFO(describe(p, s, {32, 8}) << ": " << err);
        BOOST_TEST(err <= kFloatTol);
        if (r == 0) {
          p.sigmaRange = 0.01f;
          const std::vector<double> same(in.begin(), in.end());
          BOOST_TEST(maxRelError(runFloat<Space>(in, s, p, {7, 5}), same) <= kIdentityTol);
        }
      }
  }
}

// Bad inputs: one clear exception before anything is enqueued; the output keeps its poison.
BOOST_AUTO_TEST_CASE_TEMPLATE(bad_inputs_throw, Space, test::ExecutionSpaces) {
  using Mem = typename Space::memory_space;
  Space exec;
  const Size s{37, 23};
  const std::vector<float> hostIn = floatLayer(s, 0.5f, 1u);
  auto din = toDevice2D<Mem>(hostIn, s, "kortex::test::MultiresBilateral::in");
  const md::ConstLayer<Mem> in = din;
  auto out = test::poisoned(LayerView<Mem>(std::string("kortex::test::MultiresBilateral::out"), s.ny, s.nx));
  MultiresParams good;
  good.bilateral = MultiresBilateralVariant::ClosenessLut;
  const md::ConstFloatTable<Mem> closeness =
      tableToDevice<Mem>(multiresCloseness(good.radius, good.sigmaSpatial), "kortex::test::c");
  const md::ConstFloatTable<Mem> wrongCloseness =
      tableToDevice<Mem>(multiresCloseness(good.radius + 1, good.sigmaSpatial), "kortex::test::c3");
  BOOST_CHECK_NO_THROW(md::checkFloat<Space>(in, out, closeness, good, {}));

  LayerView<Mem> wrong(std::string("kortex::test::wrong"), s.ny, s.nx - 1);
  LayerView<Mem> empty(std::string("kortex::test::empty"), 0, 0);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, in, wrong, closeness, good, {}), InvalidArgument);
  BOOST_CHECK_THROW(
      md::bilateralLayer(exec, md::ConstLayer<Mem>(empty), empty, closeness, good, {}),
      InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, md::ConstLayer<Mem>(), out, closeness, good, {}),
                    InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, md::ConstLayer<Mem>(out), out, closeness, good, {}),
                    InvalidArgument);  // aliasing
  // Overlapping but not identical: the output starts one row into the input.
  LayerView<Mem> big(std::string("kortex::test::big"), s.ny + 1, s.nx);
  Kokkos::View<float**, Kokkos::LayoutRight, Mem, Kokkos::MemoryTraits<Kokkos::Unmanaged>> shifted(
      big.data() + s.nx, s.ny, s.nx);
  BOOST_CHECK_THROW(
      md::bilateralLayer(
          exec, md::ConstLayer<Mem>(Kokkos::subview(big, std::make_pair(0, s.ny), Kokkos::ALL)),
          LayerView<Mem>(shifted), closeness, good, {}),
      InvalidArgument);
  // Tables: ClosenessLut needs (2r+1)^2 entries; the other float variants ignore the table.
  BOOST_CHECK_THROW(md::bilateralLayer(exec, in, out, wrongCloseness, good, {}), InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, in, out, md::ConstFloatTable<Mem>(), good, {}),
                    InvalidArgument);
  // Tiles.
  for (md::LayerTile t :
       {md::LayerTile{-1, 8}, md::LayerTile{32, -8}, md::LayerTile{64, 32}, md::LayerTile{1025, 1},
        md::LayerTile{1, 1025}, md::LayerTile{65536, 65536}})
    BOOST_CHECK_THROW(md::bilateralLayer(exec, in, out, closeness, good, t), InvalidArgument);
  // Parameters and the variant / layer-type pair.
  MultiresParams p = good;
  p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  BOOST_CHECK_THROW(md::bilateralLayer(exec, in, out, closeness, p, {}), InvalidArgument);
  p = good;
  p.radius = -1;
  BOOST_CHECK_THROW(md::bilateralLayer(exec, in, out, closeness, p, {}), InvalidArgument);
  p = good;
  p.radius = MultiresParams::kMaxRadius + 1;
  BOOST_CHECK_THROW(md::bilateralLayer(exec, in, out, closeness, p, {}), InvalidArgument);
  // (Sigmas are the pipeline's check: tstPipeline.)
  p = good;
  p.bilateral = static_cast<MultiresBilateralVariant>(9);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, in, out, closeness, p, {}), InvalidArgument);

  // Integer layers.
  const std::vector<std::int16_t> hostInQ = intLayer(s, 1023, 2u);
  auto dinQ = toDevice2D<Mem>(hostInQ, s, "kortex::test::MultiresBilateral::inQ");
  const md::ConstIntLayer<Mem> inQ = dinQ;
  auto outQ = test::poisoned(IntLayerView<Mem>(std::string("kortex::test::MultiresBilateral::outQ"), s.ny, s.nx),
                             kIntPoison);
  MultiresParams q;
  q.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  q.sigmaRange = 40.0f;
  const md::ConstTable<Mem> cQ =
      tableToDevice<Mem>(multiresClosenessQ(q.radius, q.sigmaSpatial), "kortex::test::cQ");
  const md::ConstTable<Mem> sQ =
      tableToDevice<Mem>(multiresSimilarityQ(q.sigmaRange, 2046), "kortex::test::sQ");
  const md::ConstTable<Mem> cQ3 =
      tableToDevice<Mem>(multiresClosenessQ(q.radius + 1, q.sigmaSpatial), "kortex::test::cQ3");
  const md::ConstTable<Mem> tooLong = tableToDevice<Mem>(
      std::vector<std::int32_t>(md::kMaxSimilarityEntries + 1, kMultiresWeightOne),
      "kortex::test::sQlong");
  bool simInScratch = false;
  BOOST_CHECK_NO_THROW(
      md::checkInt<Space>(inQ, outQ, cQ, sQ, q, {}, md::SimilarityPlacement::Auto, simInScratch));
  IntLayerView<Mem> wrongQ(std::string("kortex::test::wrongQ"), s.ny - 1, s.nx);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, wrongQ, cQ, sQ, q, {}), InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, md::ConstIntLayer<Mem>(outQ), outQ, cQ, sQ, q, {}),
                    InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, md::ConstIntLayer<Mem>(), outQ, cQ, sQ, q, {}),
                    InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, outQ, cQ3, sQ, q, {}), InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, outQ, md::ConstTable<Mem>(), sQ, q, {}),
                    InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, outQ, cQ, md::ConstTable<Mem>(), q, {}),
                    InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, outQ, cQ, tooLong, q, {}), InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, outQ, cQ, sQ, q, md::LayerTile{33, 32}),
                    InvalidArgument);
  BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, outQ, cQ, sQ, q, md::LayerTile{0, -1}),
                    InvalidArgument);
  for (MultiresBilateralVariant v : kFloatVariants) {
    MultiresParams pq = q;
    pq.bilateral = v;
    BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, outQ, cQ, sQ, pq, {}), InvalidArgument);
  }
  MultiresParams pq = q;
  pq.radius = 3;  // tables are for r = 2
  BOOST_CHECK_THROW(md::bilateralLayer(exec, inQ, outQ, cQ, sQ, pq, {}), InvalidArgument);

  exec.fence();
  const auto hostOut = toHost2D(out);
  bool allNaN = true;
  for (float v : hostOut) allNaN = allNaN && std::isnan(v);
  BOOST_TEST(allNaN);
  const auto hostBig = toHost2D(big);  // never written either (zero-initialised by Kokkos)
  bool allZero = true;
  for (float v : hostBig) allZero = allZero && v == 0.0f;
  BOOST_TEST(allZero);
  const auto hostOutQ = toHost2D(outQ);
  bool allPoison = true;
  for (std::int16_t v : hostOutQ) allPoison = allPoison && v == kIntPoison;
  BOOST_TEST(allPoison);
}

// The integer-kernel placement rule at the CUDA scratch limit of the Kokkos 4.6 snapshot
// (about 40,936 B): a 10-bit layer's full similarity table (2047 entries) goes into scratch,
// the 16-bit range's (65,535) does not; checked here on the host space's limit.
BOOST_AUTO_TEST_CASE(similarity_placement_rule) {
  using Space = Kokkos::DefaultHostExecutionSpace;
  const std::size_t maxBytes = kx::scratchSizeMax<md::LayerPolicy<Space>>(0);
  BOOST_TEST(md::similarityFitsScratch<Space>(2, 2047));
  BOOST_TEST(!md::similarityFitsScratch<Space>(2, 65535));
  // The boundary: the largest table that fits leaves the margin free, one more entry does not.
  const std::size_t taps = 25;
  const std::size_t largest = (maxBytes - md::kScratchMarginBytes - 16) / 4 - taps;
  BOOST_TEST(md::similarityFitsScratch<Space>(2, largest));
  BOOST_TEST(!md::similarityFitsScratch<Space>(2, largest + 1));
}
