// Element-wise n-ary operators and the gradient (core/ImageOps.hpp): every Kokkos strategy
// (gpu/imageops/ImageOps.hpp: Fused vs Binary, gradient Naive vs ScratchTiled) against the CPU
// reference (reference_cpu/ImageOps.hpp) on every enabled execution space, fused == composed
// binary operators, analytic properties, refusals.
#define BOOST_TEST_MODULE ImageOps
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "TestUtils.hpp"
#include "core/ImageOps.hpp"
#include "gpu/imageops/ImageOps.hpp"
#include "reference_cpu/ImageOps.hpp"

using namespace kortex;
using HostField = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;

namespace {

// Float results vs the double reference: one rounding of a few operations on values in [-2, 2]
// (a few ulps of 2, 2.4e-7 each).
constexpr double kFloatTol = 1e-6;
// Fused vs Binary: the same float operations in the same order; only a fused multiply-add
// contraction of a*y + b*z may differ, by at most one rounding of |a y| + |b z| <= 4.
constexpr double kFusedVsBinaryTol = 5e-7;

HostImage randomImage(int nx, int ny, int nz, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  HostImage img("random", Geometry::make3D(nx, ny, nz));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (Index i = 0; i < img.numVoxels(); ++i) img.data.data()[i] = d(rng);
  return img;
}

template <class Space>
ImageView<typename Space::memory_space> alloc(Geometry const& g) {
  return ImageView<typename Space::memory_space>("out", g.nz(), g.ny(), g.nx());
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(nary_fused_binary_and_reference, Space, test::ExecutionSpaces) {
  Space exec;
  const HostImage y = randomImage(37, 11, 9, 1), z = randomImage(37, 11, 9, 2);
  const Geometry& g = y.geometry;
  auto dy = test::toSpace<Space>(y);
  auto dz = test::toSpace<Space>(z);
  // axpby
  auto fused = alloc<Space>(g), t1 = alloc<Space>(g), t2 = alloc<Space>(g), binary = alloc<Space>(g);
  gpu::axpby(exec, 0.7f, dy, -1.3f, dz, fused);
  gpu::scale(exec, 0.7f, dy, t1);
  gpu::scale(exec, -1.3f, dz, t2);
  gpu::add(exec, t1, t2, binary);
  HostImage want("want", g);
  ref::axpby(0.7, y.data, -1.3, z.data, want.data);
  BOOST_TEST(test::maxAbsDifference(test::toHost(fused, g), want) <= kFloatTol);
  BOOST_TEST(test::maxAbsDifference(test::toHost(fused, g), test::toHost(binary, g)) <= kFusedVsBinaryTol);
  // normalise: fused vs addScalar + scale (in place), vs reference; the range from minMax.
  const auto [lo, hi] = gpu::minMax(exec, dy);
  float rlo = y.data.data()[0], rhi = rlo;
  for (Index i = 0; i < g.numVoxels(); ++i) rlo = std::min(rlo, y.data.data()[i]), rhi = std::max(rhi, y.data.data()[i]);
  BOOST_TEST(lo == rlo);
  BOOST_TEST(hi == rhi);
  gpu::normaliseRange(exec, dy, lo, hi, fused);
  gpu::addScalar(exec, dy, -lo, binary);
  gpu::scale(exec, 1.0f / (hi - lo), binary, binary);
  ref::normaliseRange(y.data, lo, hi, want.data);
  BOOST_TEST(test::maxAbsDifference(test::toHost(fused, g), want) <= kFloatTol);
  BOOST_TEST(test::maxAbsDifference(test::toHost(fused, g), test::toHost(binary, g)) == 0.0);
  // average of 1..8: fused vs add chain + scale, vs reference; k identical images give the image.
  std::vector<HostImage> hs;
  std::vector<ConstImageView<typename Space::memory_space>> ds;
  for (int k = 1; k <= kMaxAverageInputs; ++k) {
    hs.push_back(randomImage(37, 11, 9, 10 + k));
    ds.push_back(test::toSpace<Space>(hs.back()));
    gpu::average(exec, ds, fused);
    Kokkos::deep_copy(exec, binary, ds[0]);
    for (int j = 1; j < k; ++j) gpu::add(exec, binary, ds[j], binary);
    gpu::scale(exec, 1.0f / float(k), binary, binary);
    std::vector<ConstImageView<Kokkos::HostSpace>> hv;
    for (auto const& h : hs) hv.push_back(h.data);
    ref::average(hv, want.data);
    BOOST_TEST(test::maxAbsDifference(test::toHost(fused, g), want) <= kFloatTol, "average of " << k);
    BOOST_TEST(test::maxAbsDifference(test::toHost(fused, g), test::toHost(binary, g)) == 0.0, "average of " << k);
  }
  std::vector<ConstImageView<typename Space::memory_space>> same(5, dy);
  gpu::average(exec, same, fused);
  BOOST_TEST(test::maxAbsDifference(test::toHost(fused, g), y) <= kFloatTol);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gradient_variants_and_reference, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  // Extents that are not multiples of the 32 x 8 tile.
  for (auto e : {std::array<int, 3>{37, 11, 9}, std::array<int, 3>{64, 16, 3}, std::array<int, 3>{5, 3, 2},
                 std::array<int, 3>{12, 10, 37}}) {  // the last: 3 z chunks of the tiled variant
    const HostImage a = randomImage(e[0], e[1], e[2], 7);
    auto d = test::toSpace<Space>(a);
    HostField want("want", 3, e[2], e[1], e[0]);
    ref::gradient(a.data, want);
    HostField got[2];
    int i = 0;
    for (GradientVariant v : {GradientVariant::Naive, GradientVariant::ScratchTiled}) {
      gpu::Field<Mem> out("grad", 3, e[2], e[1], e[0]);
      Kokkos::deep_copy(out, std::nanf(""));
      gpu::gradient(exec, d, out, v);
      got[i] = HostField("got", 3, e[2], e[1], e[0]);
      Kokkos::deep_copy(got[i], out);
      double err = 0.0;
      for (std::size_t k = 0; k < want.size(); ++k) {
        const double diff = std::fabs(double(got[i].data()[k]) - want.data()[k]);
        err = std::isnan(diff) ? INFINITY : std::max(err, diff);
      }
      BOOST_TEST(err <= kFloatTol, toString(v) << " " << e[0] << "x" << e[1] << "x" << e[2] << ": " << err);
      ++i;
    }
    bool identical = true;  // the same float operation on the same values
    for (std::size_t k = 0; k < want.size(); ++k) identical = identical && got[0].data()[k] == got[1].data()[k];
    BOOST_TEST(identical);
  }
  // A linear ramp: exact in the interior, half the slope at the clamped ends.
  HostImage ramp("ramp", Geometry::make3D(10, 9, 8));
  for (int z = 0; z < 8; ++z)
    for (int y = 0; y < 9; ++y)
      for (int x = 0; x < 10; ++x) ramp.data(z, y, x) = 0.5f * x - 0.25f * y + 2.0f * z;
  gpu::Field<Mem> out("grad", 3, 8, 9, 10);
  gpu::gradient(exec, test::toSpace<Space>(ramp), out, GradientVariant::ScratchTiled);
  HostField h("h", 3, 8, 9, 10);
  Kokkos::deep_copy(h, out);
  BOOST_TEST(h(0, 4, 4, 4) == 0.5f);
  BOOST_TEST(h(1, 4, 4, 4) == -0.25f);
  BOOST_TEST(h(2, 4, 4, 4) == 2.0f);
  BOOST_TEST(h(0, 4, 4, 0) == 0.25f);
  BOOST_TEST(h(2, 7, 4, 4) == 1.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(refusals, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  const HostImage a = randomImage(8, 8, 8, 1), b = randomImage(8, 8, 9, 1);
  auto da = test::toSpace<Space>(a);
  auto db = test::toSpace<Space>(b);
  test::expectThrowWith<InvalidArgument>([&] { gpu::axpby(exec, 1.0f, da, 1.0f, db, da); }, {"different extents"});
  test::expectThrowWith<InvalidArgument>([&] { gpu::normaliseRange(exec, da, 1.0f, 1.0f, da); }, {"hi > lo"});
  std::vector<ConstImageView<Mem>> none, nine(9, da);
  test::expectThrowWith<InvalidArgument>([&] { gpu::average(exec, none, da); }, {"between 1 and 8"});
  test::expectThrowWith<InvalidArgument>([&] { gpu::average(exec, nine, da); }, {"between 1 and 8"});
  gpu::Field<Mem> wrong("wrong", 3, 8, 8, 9);
  test::expectThrowWith<InvalidArgument>([&] { gpu::gradient(exec, da, wrong, GradientVariant::Naive); }, {"3-component"});
  std::vector<ConstImageView<Kokkos::HostSpace>> refNone;
  HostImage out("out", a.geometry);
  test::expectThrowWith<InvalidArgument>([&] { ref::average(refNone, out.data); }, {"between 1 and 8"});
}
