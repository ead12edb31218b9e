// Kokkos level-set NLM surface denoising (gpu/surface_nlm/SurfaceNlm.hpp) on every enabled execution space:
// every storage variant against the CPU reference (neighbour sets identical ties aside, phi within
// a named tolerance), the exact fallback on a band made of exact ties, the heat-iteration
// properties, the paper's two noisy blocks (Fig 6) and a noisy sphere, and bad input.
#define BOOST_TEST_MODULE SurfaceNlm
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "core/SurfaceNlm.hpp"
#include "gpu/surface_nlm/SurfaceNlm.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

using namespace kortex;

namespace {

// Both back ends compute the weights and iterations in double from the same neighbour sets; the
// output is rounded to float once: phi (|phi| <= 7 here) agrees to a few float ulps.
constexpr double kPhiTolerance = 1e-5;

const SurfaceNlmVariant kVariants[] = {SurfaceNlmVariant::Global, SurfaceNlmVariant::RandomAccess,
                                       SurfaceNlmVariant::ScratchBroadcast, SurfaceNlmVariant::Pruned,
                                       SurfaceNlmVariant::PrunedBlocks};

using test::noisySphere;

template <class Space>
HostImage runKokkos(HostImage const& phi, SurfaceNlmParams const& p, gpu::SurfaceNlmInfo* info = nullptr,
                    gpu::SurfaceNlmNeighbours<Kokkos::HostSpace>* nbHost = nullptr) {
  using Mem = typename Space::memory_space;
  const auto in = test::toSpace<Space>(phi, "kortex::test::phi");
  ImageView<Mem> out("kortex::test::out", in.extent(0), in.extent(1), in.extent(2));
  gpu::SurfaceNlmNeighbours<Mem> nb;
  gpu::surfaceDenoise(Space(), ConstImageView<Mem>(in), out, p, info, {}, nbHost ? &nb : nullptr);
  if (nbHost) {
    nbHost->index = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nb.index);
    nbHost->distance = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nb.distance);
  }
  return test::toHost(out, phi.geometry);
}

// Neighbour rows against the reference's: the sorted distances agree within the tie tolerance at
// every rank, and the index sets agree except for candidates tied with the m-th distance (whose
// order the spec leaves to the back end). Returns the rows whose indices differ at some rank.
int compareNeighbours(ref::SurfaceNeighbours const& r, gpu::SurfaceNlmNeighbours<Kokkos::HostSpace> const& g) {
  const int m = r.m;
  const int n = static_cast<int>(r.index.size()) / m;
  BOOST_REQUIRE_EQUAL(static_cast<int>(g.index.extent(0)), n);
  BOOST_REQUIRE_EQUAL(static_cast<int>(g.index.extent(1)), m);
  int rowsDiffering = 0;
  for (int j = 0; j < n; ++j) {
    const double* rd = &r.distance[static_cast<std::size_t>(j) * m];
    const std::int32_t* ri = &r.index[static_cast<std::size_t>(j) * m];
    const double dm = rd[m - 1];
    const double tie = kSurfaceNlmTieRelative * dm;
    bool differs = false;
    std::vector<std::int32_t> a, b;
    for (int k = 0; k < m; ++k) {
      const double gd = g.distance(j, k);
      if (!(std::abs(gd - rd[k]) <= kSurfaceNlmTieRelative * std::max(rd[k], 1e-300) + 1e-300)) {
        BOOST_ERROR("element " << j << " rank " << k << ": distance " << gd << " vs reference " << rd[k]);
        return n;
      }
      differs = differs || g.index(j, k) != ri[k];
      if (rd[k] < dm - tie) a.push_back(ri[k]);
      if (gd < dm - tie) b.push_back(g.index(j, k));
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) {
      BOOST_ERROR("element " << j << ": neighbour set differs from the reference below the m-th distance " << dm);
      return n;
    }
    rowsDiffering += differs;
  }
  return rowsDiffering;
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(variants_match_reference, Space, test::ExecutionSpaces) {
  HostImage clean, noisy;
  noisySphere(20, 6.0, 0.3, 5, clean, noisy);
  SurfaceNlmParams p;
  p.band = 3.0f;
  p.c2 = 8.0;
  p.neighbors = 40;
  p.iterations = 10;
  p.seedRadius = 32;  // small next to the band (~3k), so the passes and the pruned scan do the work
  ref::SurfaceDenoiseInfo rinfo;
  ref::SurfaceNeighbours rnb;
  const HostImage want = ref::surfaceDenoise(noisy, p, &rinfo, &rnb);
  std::int64_t bruteForcePairs = 0, prunedPairs = 0;
  for (SurfaceNlmVariant v : kVariants) {
    for (int perPass : {16384, 700}) {  // one pass, and five passes with a partial last chunk
      p.variant = v;
      p.passCandidates = perPass;
      gpu::SurfaceNlmInfo info;
      gpu::SurfaceNlmNeighbours<Kokkos::HostSpace> nb;
      const HostImage got = runKokkos<Space>(noisy, p, &info, &nb);
      BOOST_TEST(info.bandSize == rinfo.bandSize);
      if (v == SurfaceNlmVariant::Pruned) {
        // One launch (passCandidates does not apply) and fewer distances than all pairs.
        BOOST_TEST(info.passes == 1);
        BOOST_TEST(info.pairsEvaluated < bruteForcePairs);
        prunedPairs = info.pairsEvaluated;
      } else if (v == SurfaceNlmVariant::PrunedBlocks) {
        // The block bound is at least the sum bound: fewer distances than Pruned on this sphere.
        BOOST_TEST(info.passes == 1);
        BOOST_TEST(info.pairsEvaluated < prunedPairs);
      } else {
        BOOST_TEST(info.passes == static_cast<int>((rinfo.bandSize + perPass - 1) / perPass));
        bruteForcePairs = info.pairsEvaluated;
      }
      const int differing = compareNeighbours(rnb, nb);
      const double err = test::maxAbsDifference(got, want);
      BOOST_TEST_MESSAGE(Space::name() << " " << v << " " << perPass << "/pass: band " << info.bandSize
                                       << ", certificate failures " << info.certificateFailures
                                       << ", distances " << info.pairsEvaluated
                                       << ", rows with tie reorderings " << differing << ", max |dphi| " << err);
      BOOST_TEST(err <= kPhiTolerance);
      BOOST_TEST(std::abs(info.dt - rinfo.dt) <= 1e-12 * rinfo.dt);
    }
  }
}

// The block-sum bound (core/SurfaceNlm.hpp, PrunedBlocks) never exceeds the spec's D by more than
// the slack of its skip rule, on random records, on records of large values that differ little
// (where the block sums' rounding matters: the margin must absorb it), on permutations within a
// block (real block sums equal, D > 0) and on identical records; and it is at least the sum bound.
BOOST_AUTO_TEST_CASE(block_bound_below_exact_distance) {
  constexpr int PV4 = 32, p = 125;
  using Layout = SurfaceNlmBlocks<PV4>;
  constexpr int B = Layout::kCount;
  BOOST_TEST(B == 8);
  float invN[B];
  for (int b = 0; b < B; ++b) invN[b] = 1.0f / static_cast<float>(Layout::voxels(b, p));
  auto blockSums = [&](std::vector<float> const& r, float (&t)[B]) {
    for (int b = 0; b < B; ++b) {
      double s = 0.0;
      for (int k = 4 * Layout::kWidth4 * b; k < std::min(4 * Layout::kWidth4 * (b + 1), p); ++k) s += r[k];
      t[b] = static_cast<float>(s);
    }
  };
  auto absSum = [&](std::vector<float> const& r) {
    double a = 0.0;
    for (int k = 0; k < p; ++k) a += std::abs(double(r[k]));
    return a;
  };
  std::mt19937 rng(7);
  int boundsAboveSumBound = 0, cases = 0;
  auto check = [&](std::vector<float> const& a, std::vector<float> const& c) {
    float ta[B], tc[B];
    blockSums(a, ta);
    blockSums(c, tc);
    const float margin = surfaceNlmBlockMargin(std::max(absSum(a), absSum(c)));
    const float lb = surfaceNlmBlockBound<B>(ta, tc, invN, margin);
    const double d = surfaceNlmDistanceExact(a.data(), c.data(), p);
    BOOST_TEST(static_cast<double>(lb) <= d * kSurfaceNlmBlockSlack);
    double sa = 0.0, sc = 0.0;
    for (int k = 0; k < p; ++k) { sa += a[k]; sc += c[k]; }
    boundsAboveSumBound += static_cast<double>(lb) >= (sa - sc) * (sa - sc) / p * (1.0 - 1e-4);
    ++cases;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<float> a(p), c(p);
    const int kind = trial % 4;
    std::normal_distribution<float> g(0.0f, 1.0f);
    const float scale = kind == 1 ? 1e6f : 3.0f;
    for (int k = 0; k < p; ++k) {
      a[k] = scale + g(rng) * (kind == 1 ? 1.0f : scale);
      c[k] = kind == 1 ? a[k] + g(rng) * 1e-1f : kind == 3 ? a[k] : g(rng) * scale;
    }
    if (kind == 2) {  // c: a permuted within each block
      c = a;
      for (int b = 0; b < B; ++b) {
        const int b0 = 4 * Layout::kWidth4 * b, b1 = std::min(4 * Layout::kWidth4 * (b + 1), p);
        std::shuffle(c.begin() + b0, c.begin() + b1, rng);
      }
    }
    check(a, c);
  }
  // Random records: the block bound is the tighter one (up to the sum bound's rounding).
  BOOST_TEST(boundsAboveSumBound >= cases / 2);
}

// phi = x - 9.5 (planes): every voxel of a plane has the same patch, so each element has 35 exact
// zero distances in its own plane and 72 equal distances (125) in the two planes beside it; with
// m = 40 the m-th neighbour falls inside that tie group, beyond the m' = 72 kept by the float
// pre-selection: the certificate must fail and the exact fallback must reproduce the reference,
// index for index (integer distances are exact in float and double on every back end).
BOOST_AUTO_TEST_CASE_TEMPLATE(exact_fallback_on_ties, Space, test::ExecutionSpaces) {
  HostImage phi("kortex::test::planes", Geometry::make3D(20, 6, 6));
  for (Index z = 0; z < 6; ++z)
    for (Index y = 0; y < 6; ++y)
      for (Index x = 0; x < 20; ++x) phi.data(z, y, x) = static_cast<float>(x) - 9.5f;
  SurfaceNlmParams p;
  p.band = 2.5f;  // planes x = 7..12: 216 elements
  p.neighbors = 40;
  p.iterations = 3;
  ref::SurfaceNeighbours rnb;
  const HostImage want = ref::surfaceDenoise(phi, p, nullptr, &rnb);
  for (SurfaceNlmVariant v : kVariants) {
    p.variant = v;
    gpu::SurfaceNlmInfo info;
    gpu::SurfaceNlmNeighbours<Kokkos::HostSpace> nb;
    const HostImage got = runKokkos<Space>(phi, p, &info, &nb);
    BOOST_TEST_MESSAGE(Space::name() << " " << v << ": certificate failures " << info.certificateFailures << " of "
                                     << info.bandSize);
    BOOST_TEST(info.bandSize == 216);
    BOOST_TEST(info.certificateFailures > 0);
    for (int j = 0; j < 216; ++j)
      for (int k = 0; k < p.neighbors; ++k) {
        BOOST_REQUIRE_EQUAL(nb.index(j, k), rnb.index[static_cast<std::size_t>(j) * p.neighbors + k]);
        BOOST_REQUIRE_EQUAL(nb.distance(j, k), rnb.distance[static_cast<std::size_t>(j) * p.neighbors + k]);
      }
    BOOST_TEST(test::maxAbsDifference(got, want) <= kPhiTolerance);
  }
}

// Constant phi stays constant; voxels outside the band are copied; the band's range never widens.
BOOST_AUTO_TEST_CASE_TEMPLATE(heat_iteration_properties, Space, test::ExecutionSpaces) {
  const Geometry g = Geometry::make3D(9, 8, 7);
  HostImage flat("kortex::test::flat", g);
  Kokkos::deep_copy(flat.data, -0.25f);
  SurfaceNlmParams p;
  p.band = 1.0f;
  p.patch = 3;
  p.neighbors = 30;
  p.iterations = 5;
  const HostImage same = runKokkos<Space>(flat, p);
  for (Index i = 0; i < g.numVoxels(); ++i) BOOST_REQUIRE_EQUAL(same.data.data()[i], -0.25f);

  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  HostImage phi("kortex::test::random", g);
  for (Index i = 0; i < g.numVoxels(); ++i) phi.data.data()[i] = u(rng);
  p.band = 1.5f;
  p.c2 = 40.0;
  p.iterations = 8;
  const HostImage out = runKokkos<Space>(phi, p);
  const auto ids = ref::narrowBand(phi, p.band);
  std::vector<bool> inBand(static_cast<std::size_t>(g.numVoxels()), false);
  double lo = INFINITY, hi = -INFINITY, lo1 = INFINITY, hi1 = -INFINITY;
  for (auto id : ids) {
    inBand[static_cast<std::size_t>(id)] = true;
    lo = std::min(lo, double(phi.data.data()[id]));
    hi = std::max(hi, double(phi.data.data()[id]));
    lo1 = std::min(lo1, double(out.data.data()[id]));
    hi1 = std::max(hi1, double(out.data.data()[id]));
  }
  BOOST_TEST(lo1 >= lo);
  BOOST_TEST(hi1 <= hi);
  BOOST_TEST(hi1 - lo1 < hi - lo);
  for (Index i = 0; i < g.numVoxels(); ++i)
    if (!inBand[static_cast<std::size_t>(i)]) BOOST_REQUIRE_EQUAL(out.data.data()[i], phi.data.data()[i]);
}

namespace {

// Mean and max |phi - truth| over the voxels within `near` of the true surface.
struct SurfaceError {
  double mean = 0.0, max = 0.0;
};
SurfaceError surfaceError(HostImage const& phi, HostImage const& truth, float near) {
  SurfaceError e;
  int count = 0;
  for (Index i = 0; i < truth.numVoxels(); ++i) {
    if (std::abs(truth.data.data()[i]) > near) continue;
    const double d = std::abs(double(phi.data.data()[i]) - double(truth.data.data()[i]));
    e.mean += d;
    e.max = std::max(e.max, d);
    ++count;
  }
  e.mean /= std::max(count, 1);
  return e;
}

}  // namespace

// The paper's synthetic case (Fig 6): two square blocks, phi from the exact distance transform of
// their mask, Gaussian noise on phi. The denoised phi is closer to the clean one near the surface.
BOOST_AUTO_TEST_CASE_TEMPLATE(two_noisy_blocks_get_closer, Space, test::ExecutionSpaces) {
  HostImage mask("kortex::test::blocks", Geometry::make3D(28, 18, 18));
  for (Index z = 4; z < 14; ++z)
    for (Index y = 4; y < 14; ++y) {
      for (Index x = 3; x < 12; ++x) mask.data(z, y, x) = 1.0f;
      for (Index x = 16; x < 25; ++x) mask.data(z, y, x) = 1.0f;
    }
  const HostImage clean = ref::signedDistanceFromMask(mask);
  HostImage noisy("kortex::test::noisyBlocks", clean.geometry);
  std::mt19937 rng(21);
  std::normal_distribution<double> noise(0.0, 0.25);
  for (Index i = 0; i < clean.numVoxels(); ++i)
    noisy.data.data()[i] = static_cast<float>(clean.data.data()[i] + noise(rng));
  SurfaceNlmParams p;
  p.band = 3.0f;
  p.c2 = 8.0;
  p.iterations = 10;
  gpu::SurfaceNlmInfo info;
  const HostImage out = runKokkos<Space>(noisy, p, &info);
  const SurfaceError before = surfaceError(noisy, clean, 1.5f), after = surfaceError(out, clean, 1.5f);
  BOOST_TEST_MESSAGE(Space::name() << " two blocks, band " << info.bandSize << ": mean |phi - clean| " << before.mean
                                   << " -> " << after.mean << ", max " << before.max << " -> " << after.max);
  BOOST_TEST(after.mean < 0.7 * before.mean);
  BOOST_TEST(after.max < before.max);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(noisy_sphere_gets_closer, Space, test::ExecutionSpaces) {
  HostImage clean, noisy;
  noisySphere(22, 7.0, 0.3, 13, clean, noisy);
  SurfaceNlmParams p;
  p.c2 = 8.0;
  gpu::SurfaceNlmInfo info;
  const HostImage out = runKokkos<Space>(noisy, p, &info);
  const SurfaceError before = surfaceError(noisy, clean, 1.5f), after = surfaceError(out, clean, 1.5f);
  BOOST_TEST_MESSAGE(Space::name() << " sphere, band " << info.bandSize << ": mean " << before.mean << " -> "
                                   << after.mean << ", max " << before.max << " -> " << after.max);
  BOOST_TEST(after.mean < 0.7 * before.mean);
  BOOST_TEST(after.max < before.max);
}

// The kernels refuse what their buffers cannot hold (parameters, NaN and memory: tstPipeline).
BOOST_AUTO_TEST_CASE_TEMPLATE(bad_input_is_refused, Space, test::ExecutionSpaces) {
  HostImage phi("kortex::test::far", Geometry::make3D(8, 8, 8));
  Kokkos::deep_copy(phi.data, 5.0f);
  SurfaceNlmParams p;
  auto message = [&](HostImage const& im, SurfaceNlmParams const& q) {
    try {
      runKokkos<Space>(im, q);
    } catch (std::exception const& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  BOOST_TEST(message(phi, p).find("band of 0 elements") != std::string::npos);  // empty band
  for (Index z = 0; z < 2; ++z)
    for (Index y = 0; y < 2; ++y)
      for (Index x = 0; x < 2; ++x) phi.data(z, y, x) = 0.5f;
  BOOST_TEST(message(phi, p).find("cannot hold 96") != std::string::npos);  // m = 96 >= N = 8
  p.neighbors = 4;
  BOOST_TEST(message(phi, p).empty());
  p.patch = 6;
  BOOST_TEST(!message(phi, p).empty());  // no kernel for an even patch
}
