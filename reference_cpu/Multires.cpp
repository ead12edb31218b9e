// CPU reference of the multiresolution filter (core/Multires.hpp's definitions), written
// independently of the Kokkos kernels: it shares only MultiresParams, the level sizes and the
// clamp rule. Every step is written here again from the text of core/Multires.hpp.
//
// Images are row-major Eigen arrays (rows = y, columns = x): `Plane<double>` for the float
// pipeline, `Plane<int32_t>` for the integer pipeline. The pyramid steps are templates over the
// scalar type with integer tap weights; only the final normalisation differs:
//   reduce:  S = sum b'(m) b'(n) g(clamp(2i+m), clamp(2j+n)), b' = (1,4,6,4,1); evaluated as an
//            x pass then a y pass (clamping is per axis, so this is the same sum);
//            double: S / 256, integer: (S + 128) >> 8.
//   expand:  per axis, fine p = 2i: weights (1,6,1) on coarse (i-1, i, i+1); p = 2i+1: (4,4) on
//            (i, i+1); coarse indices clamped; x pass then y pass, T = sum of products;
//            double: T / 64, integer: (T + 32) >> 6.
// The bilateral filter of a layer reads a clamped, padded copy of the layer (r pixels on each
// side), so every window tap is a plain array access:
//   float:   w = c(o) s(d), c and s exp() in double from their definitions, sums in double;
//   integer: w = cQ(o) sQ(|d|) from fixed-point tables built here with std::lround, int64 sums,
//            nearest-integer division with halves away from zero.
// Parallelism: OpenMP over the rows of every pass. Each output value is computed by one thread
// in a fixed order, so results do not depend on the number of threads.
#include "reference_cpu/Multires.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/Errors.hpp"
#include "reference_cpu/Checks.hpp"

namespace kortex::ref {

using namespace detail;

namespace {

template <class T>
using Plane = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using PlaneD = Plane<double>;
using PlaneI = Plane<std::int32_t>;

using ConstRowD = Eigen::Map<const Eigen::ArrayXd>;

// 16 x the 5-tap binomial (1, 4, 6, 4, 1) / 16, m = -2 .. 2.
constexpr int kBinomial16[5] = {1, 4, 6, 4, 1};

// Normalisation of the reduce sum (weights total 16 * 16 = 256) and of the expand sum (weights
// total 8 * 8 = 64).
inline double reduceFinish(double s) { return s / 256.0; }
inline std::int32_t reduceFinish(std::int32_t s) { return (s + 128) >> 8; }  // s >= 0
inline double expandFinish(double t) { return t / 64.0; }
inline std::int32_t expandFinish(std::int32_t t) { return (t + 32) >> 6; }  // t >= 0

// Expand taps along one axis for fine index p from a coarse axis of m samples: coarse indices
// (clamped to [0, m-1]) and integer weights summing to 8.
struct AxisTaps {
  Index idx[3];
  int w[3];
  int n;
};

AxisTaps axisTaps(Index p, Index m) {
  const Index i = p / 2;
  if (p % 2 == 0) return {{clampIndex(i - 1, m), clampIndex(i, m), clampIndex(i + 1, m)}, {1, 6, 1}, 3};
  return {{clampIndex(i, m), clampIndex(i + 1, m), 0}, {4, 4, 0}, 2};
}

// g_{k+1} = reduce(g_k): size ceil(ny/2) x ceil(nx/2).
template <class T>
Plane<T> reduce(Plane<T> const& g) {
  const Index ny = g.rows(), nx = g.cols(), cy = (ny + 1) / 2, cx = (nx + 1) / 2;
  Plane<T> h(ny, cx);  // x pass: h(y, j) = sum_n b'(n) g(y, clamp(2j + n))
#pragma omp parallel for schedule(static)
  for (Index y = 0; y < ny; ++y)
    for (Index j = 0; j < cx; ++j) {
      T s = 0;
      for (int n = -2; n <= 2; ++n) s += T(kBinomial16[n + 2]) * g(y, clampIndex(2 * j + n, nx));
      h(y, j) = s;
    }
  Plane<T> out(cy, cx);  // y pass: S(i, j) = sum_m b'(m) h(clamp(2i + m), j)
#pragma omp parallel for schedule(static)
  for (Index i = 0; i < cy; ++i)
    for (Index j = 0; j < cx; ++j) {
      T s = 0;
      for (int m = -2; m <= 2; ++m) s += T(kBinomial16[m + 2]) * h(clampIndex(2 * i + m, ny), j);
      out(i, j) = reduceFinish(s);
    }
  return out;
}

// fine(q, p) = combine(fine(q, p), expand(coarse)(q, p)), fine of the size of level k.
template <class T, class Combine>
void expandCombine(Plane<T> const& coarse, Plane<T>& fine, Combine combine) {
  const Index cy = coarse.rows(), cx = coarse.cols(), ny = fine.rows(), nx = fine.cols();
  std::vector<AxisTaps> tx(static_cast<std::size_t>(nx));
  for (Index p = 0; p < nx; ++p) tx[static_cast<std::size_t>(p)] = axisTaps(p, cx);
  Plane<T> h(cy, nx);  // x pass
#pragma omp parallel for schedule(static)
  for (Index i = 0; i < cy; ++i)
    for (Index p = 0; p < nx; ++p) {
      AxisTaps const& t = tx[static_cast<std::size_t>(p)];
      T s = 0;
      for (int a = 0; a < t.n; ++a) s += T(t.w[a]) * coarse(i, t.idx[a]);
      h(i, p) = s;
    }
#pragma omp parallel for schedule(static)
  for (Index q = 0; q < ny; ++q) {  // y pass
    const AxisTaps t = axisTaps(q, cy);
    for (Index p = 0; p < nx; ++p) {
      T s = 0;
      for (int a = 0; a < t.n; ++a) s += T(t.w[a]) * h(t.idx[a], p);
      fine(q, p) = combine(fine(q, p), expandFinish(s));
    }
  }
}

// l_0 .. l_{L-1}, g_L from g_0.
template <class T>
std::vector<Plane<T>> decompose(Plane<T> g, int levels) {
  std::vector<Plane<T>> layers;
  layers.reserve(static_cast<std::size_t>(levels) + 1);
  for (int k = 0; k < levels; ++k) {
    Plane<T> next = reduce(g);
    expandCombine(next, g, [](T gk, T e) { return gk - e; });  // g becomes l_k
    layers.push_back(std::move(g));
    g = std::move(next);
  }
  layers.push_back(std::move(g));
  return layers;
}

// g'_k = combine(l'_k, expand(g'_{k+1})), k = L-1 .. 0; consumes the layers, returns g'_0.
template <class T, class Combine>
Plane<T> reconstruct(std::vector<Plane<T>>& layers, Combine combine) {
  Plane<T> g = std::move(layers.back());
  for (std::size_t k = layers.size() - 1; k-- > 0;) {
    expandCombine(g, layers[k], combine);
    g = std::move(layers[k]);
  }
  return g;
}

// Copy of `l` padded by r pixels on every side with the clamp rule.
template <class T>
Plane<T> padClamped(Plane<T> const& l, int r) {
  const Index ny = l.rows(), nx = l.cols();
  Plane<T> p(ny + 2 * r, nx + 2 * r);
#pragma omp parallel for schedule(static)
  for (Index y = 0; y < ny + 2 * r; ++y)
    for (Index x = 0; x < nx + 2 * r; ++x) p(y, x) = l(clampIndex(y - r, ny), clampIndex(x - r, nx));
  return p;
}

// ---- float pipeline: bilateral of one layer in double -----------------------------------------

struct FloatBf {
  int r = 0;
  std::vector<double> closeness;  // (2r+1)^2, index (dy + r)(2r+1) + (dx + r)
  bool rangeIsInf = false;
  double negInvTwoSigmaR2 = 0.0;  // -1 / (2 sigma_r^2)

  explicit FloatBf(MultiresParams const& p) : r(p.radius) {
    const int w = 2 * r + 1;
    const double sigmaS = p.sigmaSpatial;
    closeness.resize(static_cast<std::size_t>(w * w));
    for (int dy = -r; dy <= r; ++dy)
      for (int dx = -r; dx <= r; ++dx) {
        const double arg = -static_cast<double>(dx * dx + dy * dy) / (2.0 * sigmaS * sigmaS);
        closeness[static_cast<std::size_t>((dy + r) * w + (dx + r))] =
            arg < kMinExpArgument ? 0.0 : std::exp(arg);
      }
    rangeIsInf = std::isinf(p.sigmaRange);
    const double sigmaR = p.sigmaRange;
    negInvTwoSigmaR2 = rangeIsInf ? 0.0 : -1.0 / (2.0 * sigmaR * sigmaR);
  }
};

PlaneD bilateralLayer(PlaneD const& l, FloatBf const& bf) {
  const Index ny = l.rows(), nx = l.cols();
  const int r = bf.r, w = 2 * r + 1;
  const PlaneD pad = padClamped(l, r);
  const Index stride = pad.cols();
  PlaneD out(ny, nx);
  // Exceptions (std::bad_alloc) must not leave an OpenMP region: the first one is kept and
  // rethrown after it.
  std::exception_ptr failure;
#pragma omp parallel
  {
    Eigen::ArrayXd arg, weight, wsum, vsum;
    bool ready = false;
    try {
      arg.resize(nx);
      weight.resize(nx);
      wsum.resize(nx);
      vsum.resize(nx);
      ready = true;
    } catch (...) {
#pragma omp critical(kortex_ref_multires_failure)
      if (!failure) failure = std::current_exception();
    }
#pragma omp for schedule(static)
    for (Index y = 0; y < ny; ++y) {
      if (!ready) continue;
      const ConstRowD centre(pad.data() + (y + r) * stride + r, nx);
      wsum.setZero();
      vsum.setZero();
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const double c = bf.closeness[static_cast<std::size_t>((dy + r) * w + (dx + r))];
          const ConstRowD values(pad.data() + (y + r + dy) * stride + r + dx, nx);
          if (bf.rangeIsInf) {
            wsum += c;
            vsum += c * values;
          } else {
            arg = (values - centre).square() * bf.negInvTwoSigmaR2;
            weight = c * arg.max(kMinExpArgument).exp();
            for (Index x = 0; x < nx; ++x)
              if (arg[x] < kMinExpArgument) weight[x] = 0.0;
            wsum += weight;
            vsum += weight * values;
          }
        }
      // wsum >= 1: the centre tap has closeness 1 and similarity 1.
      Eigen::Map<Eigen::ArrayXd>(out.data() + y * nx, nx) = vsum / wsum;
    }
  }
  if (failure) std::rethrow_exception(failure);
  return out;
}

PlaneD toPlane(HostConstView const& in) {
  const Index ny = static_cast<Index>(in.extent(1)), nx = static_cast<Index>(in.extent(2));
  PlaneD g(ny, nx);
#pragma omp parallel for schedule(static)
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x) g(y, x) = static_cast<double>(in(0, y, x));
  return g;
}

// Structural checks of the entry points (parameters are validated where the job enters the
// pipeline): a 2D image whose pyramid has `levels` levels. Returns the image's geometry.
Geometry checkPyramid(Geometry const& g, MultiresParams const& params) {
  if (g.dimension != 2 || !levelsFit(g.nx(), g.ny(), params.levels) || params.levels < 1)
    throw InvalidArgument("multires: a " + describe(g) + " image has no " + std::to_string(params.levels) +
                          "-level pyramid");
  return g;
}

Geometry checkFloat(HostConstView const& in, HostView const& out, MultiresParams const& params) {
  return checkPyramid(checkViews(in, out, "multires"), params);
}

// ---- integer pipeline -----------------------------------------------------------------------

constexpr std::int64_t kWeightOne = 1 << 15;  // fixed-point 1.0 of the tables

// Nearest integer to num / den (den > 0), halves away from zero.
std::int64_t roundDiv(std::int64_t num, std::int64_t den) {
  const std::int64_t a = num < 0 ? -num : num;
  const std::int64_t q = (2 * a + den) / (2 * den);  // floor(a / den + 1/2)
  return num < 0 ? -q : q;
}

struct IntBf {
  int r = 0;
  std::vector<std::int64_t> closeness;   // cQ, (2r+1)^2, same layout as FloatBf
  std::vector<std::int64_t> similarity;  // sQ(d), d = 0 .. size-1; 0 beyond

  IntBf(MultiresParams const& p, int maxValue) : r(p.radius) {
    const int w = 2 * r + 1;
    const double sigmaS = p.sigmaSpatial, sigmaR = p.sigmaRange;
    const double kS = -1.0 / (2.0 * sigmaS * sigmaS);
    closeness.resize(static_cast<std::size_t>(w * w));
    for (int dy = -r; dy <= r; ++dy)
      for (int dx = -r; dx <= r; ++dx)
        closeness[static_cast<std::size_t>((dy + r) * w + (dx + r))] =
            std::lround(static_cast<double>(kWeightOne) * std::exp(static_cast<double>(dx * dx + dy * dy) * kS));
    // Differences within a layer reach 2 maxValue (Laplacian layers hold [-maxValue, maxValue]).
    // exp is decreasing in d, so once an entry rounds to 0 every later one does: the table
    // stops there. sigma_r = +inf: kR = -0, every entry is kWeightOne.
    const double kR = -1.0 / (2.0 * sigmaR * sigmaR);
    for (std::int64_t d = 0; d <= 2 * std::int64_t(maxValue); ++d) {
      const double dd = static_cast<double>(d);
      const long v = std::lround(static_cast<double>(kWeightOne) * std::exp(dd * dd * kR));
      if (v == 0) break;
      similarity.push_back(v);
    }
  }
};

PlaneI bilateralLayer(PlaneI const& l, IntBf const& bf) {
  const Index ny = l.rows(), nx = l.cols();
  const int r = bf.r, w = 2 * r + 1;
  const PlaneI pad = padClamped(l, r);
  const auto tableSize = static_cast<std::int64_t>(bf.similarity.size());
  PlaneI out(ny, nx);
#pragma omp parallel for schedule(static)
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x) {
      const std::int64_t centre = pad(y + r, x + r);
      std::int64_t num = 0, den = 0;
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const std::int64_t v = pad(y + r + dy, x + r + dx);
          const std::int64_t d = v > centre ? v - centre : centre - v;
          if (d >= tableSize) continue;  // similarity 0
          const std::int64_t wt = bf.closeness[static_cast<std::size_t>((dy + r) * w + (dx + r))] *
                                  bf.similarity[static_cast<std::size_t>(d)];
          num += wt * v;
          den += wt;
        }
      // den >= kWeightOne^2: the centre tap.
      out(y, x) = static_cast<std::int32_t>(roundDiv(num, den));
    }
  return out;
}

}  // namespace

// ---- float pipeline -------------------------------------------------------------------------

void multires(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
              MultiresParams const& params) {
  checkFloat(in, out, params);

  std::vector<PlaneD> layers = decompose(toPlane(in), params.levels);
  if (params.filter) {
    const FloatBf bf(params);
    for (auto& l : layers) l = bilateralLayer(l, bf);
  }
  const PlaneD result = reconstruct(layers, [](double l, double e) { return l + e; });

  const Index ny = result.rows(), nx = result.cols();
#pragma omp parallel for schedule(static)
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x) out(0, y, x) = static_cast<float>(result(y, x));
}

HostImage multires(HostImage const& in, MultiresParams const& params) {
  checkImage(in, "multires");
  HostImage out("kortex::ref::Multires::out", in.geometry);
  out.metadata = in.metadata;
  multires(in.data, out.data, params);
  return out;
}

std::vector<HostImage> multiresLayers(HostImage const& in, MultiresParams const& params) {
  checkImage(in, "multiresLayers");
  const HostConstView view = in.data;
  // The geometry its extents describe (a 3D geometry with nz == 1 is a 2D image).
  checkPyramid(Geometry::fromSize(static_cast<Index>(view.extent(2)), static_cast<Index>(view.extent(1)),
                                  static_cast<Index>(view.extent(0))),
               params);

  const std::vector<PlaneD> layers = decompose(toPlane(view), params.levels);
  std::vector<HostImage> result;
  result.reserve(layers.size());
  for (std::size_t k = 0; k < layers.size(); ++k) {
    PlaneD const& l = layers[k];
    const Index ny = l.rows(), nx = l.cols();
    HostImage img(k + 1 < layers.size() ? "kortex::ref::Multires::laplacian"
                                        : "kortex::ref::Multires::gaussian",
                  Geometry::make2D(nx, ny));
#pragma omp parallel for schedule(static)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) img.data(0, y, x) = static_cast<float>(l(y, x));
    result.push_back(std::move(img));
  }
  return result;
}

// ---- integer pipeline -----------------------------------------------------------------------

void multires(ConstU16ImageView<Kokkos::HostSpace> in, U16ImageView<Kokkos::HostSpace> out,
              MultiresParams const& params) {
  const Geometry g = checkPyramid(checkViews(in, out, "multires"), params);

  // Bit depth and range: the first value (memory order) above the limit is reported.
  const Index ny = g.ny(), nx = g.nx();
  const std::uint32_t limit = params.bits > 0 ? (std::uint32_t(1) << params.bits) - 1
                                              : (std::uint32_t(1) << MultiresParams::kMaxBits) - 1;
  const Index none = std::numeric_limits<Index>::max();
  Index first = none;
  std::uint32_t maxInput = 0;
#pragma omp parallel for schedule(static) reduction(min : first) reduction(max : maxInput)
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x) {
      const std::uint32_t v = in(0, y, x);
      maxInput = std::max(maxInput, v);
      if (v > limit) first = std::min(first, y * nx + x);
    }
  if (first != none) {
    const Index x = first % nx, y = first / nx;
    const std::string where = "multires: input value " + std::to_string(in(0, y, x)) +
                              " at pixel (" + std::to_string(x) + "," + std::to_string(y) + ")";
    if (params.bits > 0)
      throw InvalidArgument(where + " is outside the " + std::to_string(params.bits) +
                            "-bit range [0, " + std::to_string(limit) + "] (bits = " +
                            std::to_string(params.bits) + ")");
    throw InvalidArgument(where + " needs 16 bits; the integer pipeline holds at most " +
                          std::to_string(MultiresParams::kMaxBits) + "-bit data [0, " +
                          std::to_string(limit) + "]");
  }
  const int bits = params.bits > 0 ? params.bits : bitsFor(maxInput);
  const std::int32_t maxValue = (std::int32_t(1) << bits) - 1;

  PlaneI g0(ny, nx);
#pragma omp parallel for schedule(static)
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x) g0(y, x) = static_cast<std::int32_t>(in(0, y, x));

  std::vector<PlaneI> layers = decompose(std::move(g0), params.levels);
  if (params.filter) {
    const IntBf bf(params, maxValue);
    for (auto& l : layers) l = bilateralLayer(l, bf);
  }
  const PlaneI result = reconstruct(layers, [maxValue](std::int32_t l, std::int32_t e) {
    return std::clamp(l + e, std::int32_t(0), maxValue);
  });

#pragma omp parallel for schedule(static)
  for (Index y = 0; y < ny; ++y)
    for (Index x = 0; x < nx; ++x) out(0, y, x) = static_cast<std::uint16_t>(result(y, x));
}

}  // namespace kortex::ref
