// CPU reference of the level-set NLM surface denoising (core/SurfaceNlm.hpp): exact distance
// transform against brute force, signed distance of a voxelised ball, exact neighbour sets against
// a full sort, what the heat iteration conserves, the noisy-sphere property, and bad input.
#define BOOST_TEST_MODULE SurfaceNlmReference
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/Errors.hpp"
#include "core/SurfaceNlm.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

using namespace kortex;

namespace {

HostImage ball(Index n, double radius, double cx, double cy, double cz) {
  HostImage m("kortex::test::ball", Geometry::make3D(n, n, n));
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x)
        m.data(z, y, x) = std::hypot(x - cx, y - cy, z - cz) <= radius ? 1.0f : 0.0f;
  return m;
}

// Signed distance to the sphere |x - c| = R (negative inside).
using test::sphereDistance;

}  // namespace

BOOST_AUTO_TEST_CASE(distance_transform_matches_brute_force) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    const Index nx = 9 + trial, ny = 7, nz = 6 + trial % 2;
    std::vector<std::uint8_t> f(static_cast<std::size_t>(nx * ny * nz));
    std::bernoulli_distribution coin(trial == 3 ? 0.01 : 0.08);
    for (auto& v : f) v = coin(rng);
    f[5] = 1;  // at least one feature
    const auto d = ref::squaredDistanceTransform(f, nx, ny, nz);
    double worst = 0.0;
    for (Index i = 0; i < nx * ny * nz; ++i) {
      double best = INFINITY;
      for (Index j = 0; j < nx * ny * nz; ++j)
        if (f[static_cast<std::size_t>(j)]) {
          const double dx = double(i % nx - j % nx), dy = double((i / nx) % ny - (j / nx) % ny),
                       dz = double(i / (nx * ny) - j / (nx * ny));
          best = std::min(best, dx * dx + dy * dy + dz * dz);
        }
      worst = std::max(worst, std::abs(d[static_cast<std::size_t>(i)] - best));
    }
    BOOST_TEST(worst == 0.0);  // squared distances are small integers: exact in double
  }
  // No feature at all: +inf everywhere.
  const auto none = ref::squaredDistanceTransform(std::vector<std::uint8_t>(60, 0), 5, 4, 3);
  BOOST_TEST(std::all_of(none.begin(), none.end(), [](double v) { return std::isinf(v); }));
}

// The voxelised ball's phi follows the analytic sphere distance to within the voxelisation error:
// the zero level set is half way between voxel centres, so a boundary voxel's phi is off by at most
// ~half a voxel diagonal plus the staircase of the voxelised sphere.
constexpr double kBallDistanceTol = 1.0;

BOOST_AUTO_TEST_CASE(signed_distance_of_a_ball) {
  const Index n = 24;
  const double R = 7.3, c = 11.5;
  const HostImage m = ball(n, R, c, c, c);
  const HostImage phi = ref::signedDistanceFromMask(m);
  double worst = 0.0;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const float p = phi.data(z, y, x);
        BOOST_REQUIRE((m.data(z, y, x) == 1.0f) == (p < 0.0f));  // phi < 0 exactly inside
        BOOST_REQUIRE(std::abs(p) >= 0.5f);                     // centres are half a voxel off the surface
        const double e = sphereDistance(x, y, z, R, c);
        if (std::abs(e) <= 3.0) worst = std::max(worst, std::abs(p - e));
      }
  BOOST_TEST_MESSAGE("ball phi vs analytic distance, |d| <= 3: worst " << worst);
  BOOST_TEST(worst <= kBallDistanceTol);
}

BOOST_AUTO_TEST_CASE(bad_masks_are_refused) {
  HostImage m("kortex::test::mask", Geometry::make3D(6, 5, 4));
  BOOST_CHECK_THROW(ref::signedDistanceFromMask(m), InvalidArgument);  // no inside voxel
  Kokkos::deep_copy(m.data, 1.0f);
  BOOST_CHECK_THROW(ref::signedDistanceFromMask(m), InvalidArgument);  // no outside voxel
  m.data(1, 1, 1) = 0.0f;
  m.data(2, 2, 2) = 2.0f;
  BOOST_CHECK_THROW(ref::signedDistanceFromMask(m), InvalidArgument);  // not binary
  m.data(2, 2, 2) = NAN;
  BOOST_CHECK_THROW(ref::signedDistanceFromMask(m), InvalidArgument);  // NaN is not 0 or 1
}

// Neighbour sets against a full sort of every candidate by (D, band index).
BOOST_AUTO_TEST_CASE(neighbours_equal_a_full_sort) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const int pv = 27, n = 240, m = 17;
  std::vector<float> rec(static_cast<std::size_t>(n * pv));
  for (auto& v : rec) v = std::round(u(rng) * 4.0f) / 4.0f;  // coarse values: many exact ties
  const auto nb = ref::surfaceNeighbours(rec, n, pv, m);
  int tiesSeen = 0;
  for (int j = 0; j < n; ++j) {
    std::vector<std::pair<double, int>> all;
    for (int l = 0; l < n; ++l) {
      if (l == j) continue;
      double d = 0.0;
      for (int k = 0; k < pv; ++k) {
        const double e = double(rec[j * pv + k]) - double(rec[l * pv + k]);
        d += e * e;
      }
      all.emplace_back(d, l);
    }
    std::sort(all.begin(), all.end());  // (D, l) lexicographic = the spec's order
    for (int k = 0; k < m; ++k) {
      BOOST_REQUIRE_EQUAL(nb.index[j * m + k], all[k].second);
      BOOST_REQUIRE_EQUAL(nb.distance[j * m + k], all[k].first);
    }
    for (int k = 0; k + 1 < m; ++k) tiesSeen += all[k].first == all[k + 1].first;
  }
  BOOST_TEST_MESSAGE("exact ties inside the kept sets: " << tiesSeen);
  BOOST_TEST(tiesSeen > 0);  // the tie-break rule was exercised
  BOOST_CHECK_THROW(ref::surfaceNeighbours(rec, n, pv, n), InvalidArgument);  // m >= N
}

// Heat iteration: constants stay, the range never widens, voxels outside the band are copied, and
// with all pairs (m = N - 1, symmetric weights) the band sum is conserved.
BOOST_AUTO_TEST_CASE(heat_iteration_conserves) {
  const Geometry g = Geometry::make3D(8, 7, 6);
  {
    HostImage phi("kortex::test::const", g);
    Kokkos::deep_copy(phi.data, 0.75f);
    SurfaceNlmParams p;
    p.band = 1.0f;
    p.patch = 3;
    p.neighbors = 20;
    const HostImage out = ref::surfaceDenoise(phi, p);
    for (Index i = 0; i < g.numVoxels(); ++i) BOOST_REQUIRE_EQUAL(out.data.data()[i], 0.75f);
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  HostImage phi("kortex::test::random", g);
  for (Index i = 0; i < g.numVoxels(); ++i) phi.data.data()[i] = u(rng);
  SurfaceNlmParams p;
  p.band = 1.5f;
  p.patch = 3;
  p.c2 = 40.0;
  p.iterations = 7;
  const auto ids = ref::narrowBand(phi, p.band);
  const int n = static_cast<int>(ids.size());
  BOOST_REQUIRE(n > 20);
  double lo = INFINITY, hi = -INFINITY, sum0 = 0.0;
  for (auto id : ids) {
    lo = std::min(lo, double(phi.data.data()[id]));
    hi = std::max(hi, double(phi.data.data()[id]));
    sum0 += phi.data.data()[id];
  }
  for (int m : {5, n - 1}) {
    p.neighbors = m;
    ref::SurfaceDenoiseInfo info;
    const HostImage out = ref::surfaceDenoise(phi, p, &info);
    BOOST_TEST(info.bandSize == n);
    double sum = 0.0, lo1 = INFINITY, hi1 = -INFINITY;
    std::vector<bool> inBand(static_cast<std::size_t>(g.numVoxels()), false);
    for (auto id : ids) {
      inBand[static_cast<std::size_t>(id)] = true;
      sum += out.data.data()[id];
      lo1 = std::min(lo1, double(out.data.data()[id]));
      hi1 = std::max(hi1, double(out.data.data()[id]));
    }
    BOOST_TEST(lo1 >= lo);
    BOOST_TEST(hi1 <= hi);
    BOOST_TEST(hi1 - lo1 < hi - lo);  // it did smooth
    for (Index i = 0; i < g.numVoxels(); ++i)
      if (!inBand[static_cast<std::size_t>(i)]) BOOST_REQUIRE_EQUAL(out.data.data()[i], phi.data.data()[i]);
    // Symmetric weights: conserved up to the float rounding of n outputs of magnitude <= 3.
    if (m == n - 1) BOOST_TEST(std::abs(sum - sum0) <= n * 3.0 * 6e-8);
  }
}

// A sphere with noise on phi: the denoised zero level set is closer to the true sphere.
BOOST_AUTO_TEST_CASE(noisy_sphere_gets_closer) {
  HostImage clean, noisy;
  test::noisySphere(20, 6.0, 0.3, 5, clean, noisy);
  SurfaceNlmParams p;
  p.band = 3.0f;
  p.c2 = 8.0;
  p.iterations = 10;
  ref::SurfaceDenoiseInfo info;
  const HostImage out = ref::surfaceDenoise(noisy, p, &info);
  // Error of phi against the true distance over the voxels within 1.5 of the true surface.
  double before = 0.0, after = 0.0, maxBefore = 0.0, maxAfter = 0.0;
  int count = 0;
  for (Index i = 0; i < clean.numVoxels(); ++i) {
    if (std::abs(clean.data.data()[i]) > 1.5f) continue;
    const double b = std::abs(noisy.data.data()[i] - clean.data.data()[i]);
    const double a = std::abs(out.data.data()[i] - clean.data.data()[i]);
    before += b;
    after += a;
    maxBefore = std::max(maxBefore, b);
    maxAfter = std::max(maxAfter, a);
    ++count;
  }
  BOOST_TEST_MESSAGE("noisy sphere, band " << info.bandSize << ": mean |phi - d| " << before / count << " -> "
                                          << after / count << ", max " << maxBefore << " -> " << maxAfter);
  BOOST_TEST(after < 0.7 * before);
  BOOST_TEST(maxAfter < maxBefore);
}

BOOST_AUTO_TEST_CASE(bad_parameters_and_bands) {
  SurfaceNlmParams p;
  p.patch = 4;
  BOOST_CHECK_THROW(p.validate(), InvalidArgument);
  p = {};
  p.band = 0.0f;
  BOOST_CHECK_THROW(p.validate(), InvalidArgument);
  p = {};
  p.c2 = -1.0;
  BOOST_CHECK_THROW(p.validate(), InvalidArgument);
  p = {};
  p.neighbors = 0;
  BOOST_CHECK_THROW(p.validate(), InvalidArgument);
  BOOST_CHECK_THROW(parseSurfaceNlmVariant("texture"), InvalidArgument);
  BOOST_TEST(parseSurfaceNlmVariant("scratch") == SurfaceNlmVariant::ScratchBroadcast);
  // Empty band: every |phi| > band.
  HostImage phi("kortex::test::far", Geometry::make3D(6, 6, 6));
  Kokkos::deep_copy(phi.data, 5.0f);
  p = {};
  BOOST_CHECK_THROW(ref::surfaceDenoise(phi, p), InvalidArgument);
  // m >= N: a band of 8 voxels with the default m = 96.
  for (Index z = 0; z < 2; ++z)
    for (Index y = 0; y < 2; ++y)
      for (Index x = 0; x < 2; ++x) phi.data(z, y, x) = 0.5f;
  BOOST_CHECK_THROW(ref::surfaceDenoise(phi, p), InvalidArgument);
}
