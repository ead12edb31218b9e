#define BOOST_TEST_MODULE Core
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Bilateral.hpp"
#include "core/Boundary.hpp"
#include "core/FastMath.hpp"
#include "core/Nlm.hpp"
#include "core/Phantom.hpp"
#include "core/Registration.hpp"
#include "core/WorkerPool.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include <limits>

using namespace kortex;

BOOST_AUTO_TEST_CASE(geometry_2d_normalisation) {
  auto g = Geometry::fromSize(7, 5, 1);
  BOOST_TEST(g.dimension == 2);
  auto g3 = Geometry::fromSize(7, 5, 3);
  BOOST_TEST(g3.dimension == 3);
  BOOST_CHECK_THROW(Geometry::make2D(0, 5).validate(), InvalidArgument);
  Geometry bad = Geometry::make3D(4, 4, 4);
  bad.spacing[1] = -1.0;
  BOOST_CHECK_THROW(bad.validate(), InvalidArgument);
  bad = Geometry::make3D(4, 4, 4);
  bad.direction = {1, 0, 0, 1, 0, 0, 0, 0, 1};
  BOOST_CHECK_THROW(bad.validate(), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(clamp_boundary) {
  BOOST_TEST(clampIndex(-3, 10) == 0);
  BOOST_TEST(clampIndex(0, 10) == 0);
  BOOST_TEST(clampIndex(9, 10) == 9);
  BOOST_TEST(clampIndex(12, 10) == 9);
}

// Vector field: one allocation, component c at offset c * N (structure of arrays).
BOOST_AUTO_TEST_CASE(vector_field_soa) {
  VectorField<> v("v", Geometry::make3D(5, 4, 3));
  BOOST_TEST(v.components() == 3);
  const Index n = 5 * 4 * 3;
  for (int c = 0; c < 3; ++c) {
    auto comp = v.component(c);
    BOOST_TEST(comp.data() == v.data.data() + c * n);
    BOOST_TEST(comp.span_is_contiguous());
  }
  VectorField<> v2("v2", Geometry::make2D(5, 4));
  BOOST_TEST(v2.components() == 2);
}

BOOST_AUTO_TEST_CASE(parameter_validation) {
  BilateralParams b;
  BOOST_CHECK_NO_THROW(b.validate());
  b.sigmaRange = std::numeric_limits<float>::infinity();
  BOOST_CHECK_NO_THROW(b.validate());
  b.sigmaRange = 0.0f;
  BOOST_CHECK_THROW(b.validate(), InvalidArgument);
  b.sigmaRange = -1.0f;
  BOOST_CHECK_THROW(b.validate(), InvalidArgument);
  b.sigmaRange = std::numeric_limits<float>::quiet_NaN();
  BOOST_CHECK_THROW(b.validate(), InvalidArgument);
  b = BilateralParams{};
  b.sigmaSpatial = 0.0f;
  BOOST_CHECK_THROW(b.validate(), InvalidArgument);
  b = BilateralParams{};
  b.radius = 10;
  BOOST_CHECK_THROW(b.validateFor(Geometry::make2D(8, 64)), InvalidArgument);
  BOOST_CHECK_NO_THROW(b.validateFor(Geometry::make2D(11, 64)));
  // nz == 1 is not filtered, so a large radius is fine there in 2D.
  BOOST_CHECK_NO_THROW(b.validateFor(Geometry::make2D(64, 64)));

  NlmParams n;
  BOOST_CHECK_NO_THROW(n.validate());
  n.h = 0.0f;
  BOOST_CHECK_THROW(n.validate(), InvalidArgument);
  n.h = -0.5f;
  BOOST_CHECK_THROW(n.validate(), InvalidArgument);
  n = NlmParams{};
  n.searchRadius = 20;
  BOOST_CHECK_THROW(n.validateFor(Geometry::make3D(32, 32, 16)), InvalidArgument);
  BOOST_CHECK_THROW(parseNlmVariant("fast"), InvalidArgument);
  BOOST_TEST(parseNlmVariant("boxsum") == NlmVariant::BoxSum);
  BOOST_TEST(parseBilateralVariant("scratch") == BilateralVariant::ScratchTiled);
  BOOST_CHECK_THROW(parseBackend("gpu"), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(phantoms_and_noise) {
  auto p = sheppLogan2D(64);
  BOOST_TEST(p.dimension() == 2);
  float lo = 1e9f, hi = -1e9f;
  for (Index i = 0; i < p.numVoxels(); ++i) {
    lo = std::min(lo, p.data.data()[i]);
    hi = std::max(hi, p.data.data()[i]);
  }
  BOOST_TEST(lo >= -1e-6f);
  BOOST_TEST(hi == 1.0f, boost::test_tools::tolerance(1e-5f));
  const double sigma = noiseSigmaForSnr(p, 25.0);
  BOOST_TEST(sigma == meanValue(p) / 25.0, boost::test_tools::tolerance(1e-12));
  auto noisy = addGaussianNoise(p, sigma, 42);
  double s2 = 0.0;
  for (Index i = 0; i < p.numVoxels(); ++i) {
    const double d = noisy.data.data()[i] - p.data.data()[i];
    s2 += d * d;
  }
  const double measured = std::sqrt(s2 / p.numVoxels());
  BOOST_TEST(measured == sigma, boost::test_tools::tolerance(0.05));  // 4096 samples: ~1% std
  auto v = sheppLogan3D(24);
  BOOST_TEST(v.dimension() == 3);
}

// The generated tuple runs one body on every enabled execution space.
BOOST_AUTO_TEST_CASE_TEMPLATE(execution_spaces_run, Space, test::ExecutionSpaces) {
  Space exec;
  Kokkos::View<int*, typename Space::memory_space> v("v", 100);
  Kokkos::parallel_for("kortex::test::iota", Kokkos::RangePolicy<Space>(exec, 0, 100),
                       KOKKOS_LAMBDA(int i) { v(i) = i; });
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  for (int i = 0; i < 100; ++i) BOOST_TEST(h(i) == i);
}

// exp2Flush on every execution space against exp2 in double: within kExp2FlushUlps where 2^x is a
// normal float, exactly 0 below 2^-126, NaN for NaN.
BOOST_AUTO_TEST_CASE_TEMPLATE(exp2_flush_bounds, Space, test::ExecutionSpaces) {
  constexpr double kExp2FlushUlps = 2.0;  // PTX ex2.approx.ftz.f32's stated bound (and CUDA exp2f's)
  constexpr int n = 200001;
  constexpr float lo = -140.0f, hi = 40.0f;
  Space exec;
  // The arguments formed once on the host (a device's rounding of x would move 2^x by many ulps).
  Kokkos::View<float*, Kokkos::HostSpace> xs("kortex::test::exp2_flush_x", n + 2);
  for (int i = 0; i < n; ++i) xs(i) = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1);
  xs(n) = -std::numeric_limits<float>::infinity();
  xs(n + 1) = std::numeric_limits<float>::quiet_NaN();
  auto x = Kokkos::create_mirror_view_and_copy(typename Space::memory_space(), xs);
  Kokkos::View<float*, typename Space::memory_space> y("kortex::test::exp2_flush", n + 2);
  Kokkos::parallel_for("kortex::test::exp2_flush", Kokkos::RangePolicy<Space>(exec, 0, n + 2),
                       KOKKOS_LAMBDA(int i) { y(i) = exp2Flush(x(i)); });
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  double worst = 0.0;
  int flushedWrong = 0;
  for (int i = 0; i < n; ++i) {
    const double exact = std::exp2(static_cast<double>(xs(i)));
    if (xs(i) < -126.0f) {
      flushedWrong += h(i) != 0.0f;
    } else if (xs(i) >= -125.0f) {  // a normal result: relative error in units of float's last place
      const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
      worst = std::max(worst, std::abs(static_cast<double>(h(i)) - exact) / ulp);
    } else {  // [-126, -125): 0 where the approximation fell below the smallest normal, else close
      BOOST_TEST((h(i) == 0.0f || std::abs(h(i) - exact) <= 4.0 * std::ldexp(1.0, -126 - 23)));
    }
  }
  BOOST_TEST(flushedWrong == 0);
  BOOST_TEST(worst <= kExp2FlushUlps, "worst error " << worst << " ulp");
  BOOST_TEST(h(n) == 0.0f);
  BOOST_TEST(std::isnan(h(n + 1)));
}

// Evaluates f(a(i), b(i)) on `Space` for host-formed arguments; the results on the host.
template <class Space, class F>
Kokkos::View<float*, Kokkos::HostSpace> onSpace(std::vector<float> const& a, std::vector<float> const& b, F f) {
  const int n = static_cast<int>(a.size());
  Kokkos::View<float*, Kokkos::HostSpace> ha("kortex::test::fast_a", n), hb("kortex::test::fast_b", n);
  for (int i = 0; i < n; ++i) {
    ha(i) = a[std::size_t(i)];
    hb(i) = b[std::size_t(i)];
  }
  auto da = Kokkos::create_mirror_view_and_copy(typename Space::memory_space(), ha);
  auto db = Kokkos::create_mirror_view_and_copy(typename Space::memory_space(), hb);
  Kokkos::View<float*, typename Space::memory_space> y("kortex::test::fast_y", n);
  Kokkos::parallel_for("kortex::test::fast_math", Kokkos::RangePolicy<Space>(Space(), 0, n),
                       KOKKOS_LAMBDA(int i) { y(i) = f(da(i), db(i)); });
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
}

// x = 2^e for e spread over [e0, e1] (n points), formed on the host.
std::vector<float> powersOfTwo(double e0, double e1, int n) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) x[std::size_t(i)] = static_cast<float>(std::exp2(e0 + (e1 - e0) * i / (n - 1)));
  return x;
}

double ulpOf(double v) { return std::ldexp(1.0, std::ilogb(v) - 23); }

struct FastLogOp {
  KOKKOS_INLINE_FUNCTION float operator()(float x, float) const { return fastLog(x); }
};
struct FastDivideOp {
  KOKKOS_INLINE_FUNCTION float operator()(float a, float b) const { return fastDivide(a, b); }
};
struct PhiPrimeOp {
  KOKKOS_INLINE_FUNCTION float operator()(float J, float) const { return regPhiPrime(J); }
};

// fastLog and fastDivide on every execution space within CUDA's stated bounds of its intrinsics (the log's
// far range as measured, below), the standard functions on hosts within them too.
BOOST_AUTO_TEST_CASE_TEMPLATE(fast_log_and_divide_bounds, Space, test::ExecutionSpaces) {
  constexpr double kLogAbsNearOne = 3.6e-7;  // CUDA __logf: 2^-21.41 absolute on [0.5, 2]
  // CUDA __logf elsewhere: its guide states 3 ulp; this test, counting ulps of the exact value, measured
  // 3.14 on an H200 (git 41b7214, bench/results/kernels43_s62_tests_nvidia-h200.log), hence 3.5.
  constexpr double kLogUlps = 3.5;
  constexpr double kDivideUlps = 2.0;       // CUDA __fdividef: 2 ulp for |b| in [2^-126, 2^126]
  const std::vector<float> x = powersOfTwo(-120.0, 120.0, 200001);
  const auto l = onSpace<Space>(x, x, FastLogOp{});
  double worstNear = 0.0, worstFar = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double exact = std::log(static_cast<double>(x[i])), err = std::abs(l(int(i)) - exact);
    if (x[i] >= 0.5f && x[i] <= 2.0f) worstNear = std::max(worstNear, err);
    else worstFar = std::max(worstFar, err / ulpOf(std::abs(exact)));
  }
  BOOST_TEST(worstNear <= kLogAbsNearOne, "worst absolute error on [0.5, 2] " << worstNear);
  BOOST_TEST(worstFar <= kLogUlps, "worst error elsewhere " << worstFar << " ulp");
  std::vector<float> a(x.size()), b = powersOfTwo(-125.0, 125.0, int(x.size()));
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i % 7 == 0 ? -1.0 : 1.0) * (1.0 + 0.37 * double(i % 101)));
    if (i % 3 == 0) b[i] = -b[i];
  }
  const auto q = onSpace<Space>(a, b, FastDivideOp{});
  double worstDivide = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double exact = static_cast<double>(a[i]) / static_cast<double>(b[i]);
    if (std::abs(exact) < std::ldexp(1.0, -125) || std::abs(exact) > std::numeric_limits<float>::max())
      continue;  // a subnormal or overflowing quotient: outside the bound
    worstDivide = std::max(worstDivide, std::abs(q(int(i)) - exact) / ulpOf(std::abs(exact)));
  }
  BOOST_TEST(worstDivide <= kDivideUlps, "worst division error " << worstDivide << " ulp");
}

// regPhiPrime on every execution space against 1 + log J - 1/J in double, within its stated bounds,
// from folds in the making (J = 2^-40) to strong expansion (J = 2^40).
BOOST_AUTO_TEST_CASE_TEMPLATE(reg_phi_prime_bounds, Space, test::ExecutionSpaces) {
  std::vector<float> J = powersOfTwo(-40.0, 40.0, 100001);
  for (int i = 0; i <= 2000; ++i) J.push_back(0.999f + 0.000001f * static_cast<float>(i));  // around J = 1
  const auto p = onSpace<Space>(J, J, PhiPrimeOp{});
  double worstNear = 0.0, worstFar = 0.0;
  for (std::size_t i = 0; i < J.size(); ++i) {
    const double j = J[i], exact = 1.0 + std::log(j) - 1.0 / j, err = std::abs(p(int(i)) - exact);
    if (j >= 0.5 && j <= 2.0) worstNear = std::max(worstNear, err);
    else worstFar = std::max(worstFar, err / std::abs(exact));
  }
  BOOST_TEST(worstNear <= double(kRegPhiPrimeAbsError), "worst absolute error on [0.5, 2] " << worstNear);
  BOOST_TEST(worstFar <= double(kRegPhiPrimeRelError), "worst relative error elsewhere " << worstFar);
}

// The pool runs the job once per thread index, the caller as index 0, on distinct threads, and
// again for every later run (threads sleep between runs); a pool of one is the caller alone.
BOOST_AUTO_TEST_CASE(worker_pool_runs_each_index_once_per_run) {
  for (int threads : {1, 4}) {
    WorkerPool pool(threads);
    BOOST_TEST(pool.size() >= 1);
    BOOST_TEST(pool.size() <= threads);
    for (int run = 0; run < 3; ++run) {
      std::vector<std::atomic<int>> calls(std::size_t(pool.size()));
      std::vector<std::thread::id> who(std::size_t(pool.size()));
      pool.run([&](int t) {
        calls[std::size_t(t)]++;
        who[std::size_t(t)] = std::this_thread::get_id();
      });
      for (int t = 0; t < pool.size(); ++t) BOOST_TEST(calls[std::size_t(t)].load() == 1);
      BOOST_TEST((who[0] == std::this_thread::get_id()));
      for (int t = 1; t < pool.size(); ++t) BOOST_TEST((who[std::size_t(t)] != std::this_thread::get_id()));
    }
  }
}
