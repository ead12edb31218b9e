#include "core/Intensity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

#include "core/Errors.hpp"

namespace kortex {

void IntensityParams::validate() const {
  if (!(pLow >= 0.0 && pLow < 100.0))
    throw InvalidArgument("intensity normalisation: low percentile must be in [0, 100), got " +
                          std::to_string(pLow));
  if (!(pHigh > pLow && pHigh <= 100.0))
    throw InvalidArgument("intensity normalisation: high percentile must be in (low percentile, 100], got " +
                          std::to_string(pHigh));
  if (!(std::isfinite(biasSigmaMm) && biasSigmaMm >= 0.0 && biasSigmaMm <= kMaxBiasSigmaMm))
    throw InvalidArgument("intensity normalisation: the bias correction's sigma must be in [0, " +
                          std::to_string(int(kMaxBiasSigmaMm)) + "] mm (0: none), got " + std::to_string(biasSigmaMm));
}

namespace {

// Order-preserving map of finite floats to unsigned keys (and back): negative values' bits are
// inverted, non-negative values get the sign bit set.
std::uint32_t floatKey(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
float keyFloat(std::uint32_t k) {
  const std::uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// The order statistics of ranks `ranks` (0-based, each < n) of n finite values, exactly: a radix
// selection on the keys, 11 + 11 + 10 bits, one histogram pass over the values per digit for all
// ranks at once (each rank narrows its own key prefix), OpenMP threads over the values. Ranks whose
// prefixes agree share one histogram (all of them at the first digit; a percentile's two neighbouring
// ranks nearly always), so a pass counts each value once per distinct prefix.
std::vector<float> orderStatistics(const float* p, Index n, std::vector<Index> ranks) {
  constexpr int kShift[3] = {21, 10, 0}, kBits[3] = {11, 11, 10};
  const std::size_t m = ranks.size();
  std::vector<std::uint32_t> prefix(m, 0);
  std::uint32_t decided = 0;  // the key bits fixed by the digits done
  for (int level = 0; level < 3; ++level) {
    const std::size_t bins = std::size_t(1) << kBits[level];
    const std::uint32_t digitMask = static_cast<std::uint32_t>(bins - 1);
    std::vector<std::uint32_t> distinct;  // the ranks' distinct prefixes; rank r counts in histogram of[r]
    std::vector<std::size_t> of(m);
    for (std::size_t r = 0; r < m; ++r) {
      std::size_t u = 0;
      while (u < distinct.size() && distinct[u] != prefix[r]) ++u;
      if (u == distinct.size()) distinct.push_back(prefix[r]);
      of[r] = u;
    }
    const std::size_t h = distinct.size();
    std::vector<Index> hist(h * bins, 0);
#pragma omp parallel
    {
      std::vector<Index> local(h * bins, 0);
#pragma omp for schedule(static) nowait
      for (Index i = 0; i < n; ++i) {
        const std::uint32_t k = floatKey(p[i]);
        const std::size_t digit = (k >> kShift[level]) & digitMask;
        for (std::size_t u = 0; u < h; ++u)
          if ((k & decided) == distinct[u]) ++local[u * bins + digit];
      }
#pragma omp critical(kortex_intensity_histogram)
      for (std::size_t j = 0; j < h * bins; ++j) hist[j] += local[j];
    }
    for (std::size_t r = 0; r < m; ++r) {
      const Index* const hr = hist.data() + of[r] * bins;
      std::size_t d = 0;
      while (ranks[r] >= hr[d]) ranks[r] -= hr[d++];
      prefix[r] |= static_cast<std::uint32_t>(d) << kShift[level];
    }
    decided |= digitMask << kShift[level];
  }
  std::vector<float> out(m);
  for (std::size_t r = 0; r < m; ++r) out[r] = keyFloat(prefix[r]);
  return out;
}

// The percentile of the definition from the order statistics at floor(h) and floor(h) + 1.
struct PercentileRanks {
  Index k = 0, next = 0;
  double frac = 0.0;
};
PercentileRanks percentileRanks(Index n, double q) {
  const double h = (static_cast<double>(n) - 1.0) * q / 100.0;
  PercentileRanks r;
  r.k = static_cast<Index>(std::floor(h));
  r.next = std::min(r.k + 1, n - 1);
  r.frac = h - static_cast<double>(r.k);
  return r;
}
// x_k + frac (x_{k+1} - x_k) from the two order statistics.
double interpolate(PercentileRanks const& r, float atK, float atNext) {
  return double(atK) + r.frac * (double(atNext) - double(atK));
}

}  // namespace

double percentile(std::vector<float> const& values, double q) {
  if (values.empty()) throw InvalidArgument("percentile of an empty set of values");
  const PercentileRanks r = percentileRanks(static_cast<Index>(values.size()), q);
  const auto x = orderStatistics(values.data(), static_cast<Index>(values.size()), {r.k, r.next});
  return interpolate(r, x[0], x[1]);
}

namespace {

// The input rules of the definition (not empty, no NaN or infinite voxel, not constant); returns the
// image's [min, max].
std::pair<float, float> checkedRange(HostImage const& img, std::string const& name) {
  const Index n = img.numVoxels();
  if (n <= 0 || img.data.data() == nullptr || static_cast<Index>(img.data.size()) != n)
    throw InvalidArgument(name + " is empty or its data does not match its geometry");
  const float* p = img.data.data();
  Index nans = 0, infs = 0;
  float mn = INFINITY, mx = -INFINITY;
#pragma omp parallel for schedule(static) reduction(+ : nans, infs) reduction(min : mn) reduction(max : mx)
  for (Index i = 0; i < n; ++i) {
    const float v = p[i];
    if (std::isnan(v)) ++nans;
    else if (std::isinf(v)) ++infs;
    else {
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
  }
  if (nans > 0)
    throw InvalidArgument(name + " contains NaN voxels (" + std::to_string(nans) + " of " +
                          std::to_string(n) + ")");
  if (infs > 0)
    throw InvalidArgument(name + " contains infinite voxels (" + std::to_string(infs) + " of " +
                          std::to_string(n) + ")");
  if (!(mx > mn)) {
    std::ostringstream os;
    os << name << " is constant: nothing to register (every voxel is " << mn << ")";
    throw InvalidArgument(os.str());
  }
  return {mn, mx};
}

}  // namespace

IntensityWindow intensityWindow(HostImage const& img, IntensityParams const& params,
                                std::string const& name) {
  params.validate();
  const auto [mn, mx] = checkedRange(img, name);
  const Index n = img.numVoxels();
  const float* p = img.data.data();
  IntensityWindow w;
  w.min = mn;
  w.max = mx;
  const PercentileRanks lo = percentileRanks(n, params.pLow), hi = percentileRanks(n, params.pHigh);
  const auto x = orderStatistics(p, n, {lo.k, lo.next, hi.k, hi.next});
  w.lo = interpolate(lo, x[0], x[1]);
  w.hi = interpolate(hi, x[2], x[3]);
  if (!(w.hi > w.lo)) {
    w.lo = mn;
    w.hi = mx;
    w.fellBack = true;
  }
  return w;
}

namespace {

// A scalar volume (x fastest) and the separable Gaussian blur of it, zero outside (bias correction).
struct Volume {
  int n[3] = {1, 1, 1};
  std::vector<double> v;
  double& at(int x, int y, int z) { return v[(std::size_t(z) * n[1] + y) * n[0] + x]; }
  double at(int x, int y, int z) const { return v[(std::size_t(z) * n[1] + y) * n[0] + x]; }
};

void blurAxis(Volume& vol, int axis, double sigma) {
  const int r = int(std::ceil(3.0 * sigma));
  std::vector<double> k(2 * r + 1);
  double sum = 0.0;
  for (int i = -r; i <= r; ++i) sum += (k[i + r] = std::exp(-0.5 * i * i / (sigma * sigma)));
  for (double& w : k) w /= sum;
  const Volume in = vol;
  const int len = vol.n[axis];
#pragma omp parallel for collapse(2)
  for (int z = 0; z < vol.n[2]; ++z)
    for (int y = 0; y < vol.n[1]; ++y)
      for (int x = 0; x < vol.n[0]; ++x) {
        int c[3] = {x, y, z};
        const int at = c[axis];
        double acc = 0.0;
        for (int i = std::max(-r, -at); i <= std::min(r, len - 1 - at); ++i) {
          c[axis] = at + i;
          acc += k[i + r] * in.at(c[0], c[1], c[2]);
        }
        vol.at(x, y, z) = acc;
      }
}

// Trilinear sample of a coarse volume at the fine voxel (x, y, z) (block centres, clamped).
double sampleCoarse(Volume const& vol, const int f[3], int x, int y, int z) {
  const int p[3] = {x, y, z};
  int lo[3], hi[3];
  double t[3];
  for (int a = 0; a < 3; ++a) {
    const double c = std::clamp((p[a] + 0.5) / f[a] - 0.5, 0.0, double(vol.n[a] - 1));
    lo[a] = int(std::floor(c));
    hi[a] = std::min(lo[a] + 1, vol.n[a] - 1);
    t[a] = c - lo[a];
  }
  double acc = 0.0;
  for (int k = 0; k < 8; ++k) {
    const int dx = k & 1, dy = (k >> 1) & 1, dz = (k >> 2) & 1;
    acc += (dx ? t[0] : 1 - t[0]) * (dy ? t[1] : 1 - t[1]) * (dz ? t[2] : 1 - t[2]) *
           vol.at(dx ? hi[0] : lo[0], dy ? hi[1] : lo[1], dz ? hi[2] : lo[2]);
  }
  return acc;
}

}  // namespace

HostImage biasCorrected(HostImage const& img, double sigmaMm, std::string const& name) {
  const Index n = img.numVoxels();
  const float* p = img.data.data();
  const PercentileRanks r99 = percentileRanks(n, 99.5);
  const auto x99 = orderStatistics(p, n, {r99.k, r99.next});
  const double top = interpolate(r99, x99[0], x99[1]);
  if (!(top > 0.0))
    throw InvalidArgument(name + ": the bias correction needs positive intensities (its 99.5th percentile is " +
                          std::to_string(top) + ")");
  const double threshold = kBiasHeadFraction * top;
  Geometry const& g = img.geometry;
  const int nf[3] = {int(g.nx()), int(g.ny()), int(g.nz())};
  int f[3];
  double sigma[3];
  Volume sum, count;
  for (int a = 0; a < 3; ++a) {
    f[a] = std::max(1, int(std::floor(sigmaMm / (2.0 * g.spacing[a]))));
    sigma[a] = sigmaMm / (g.spacing[a] * f[a]);
    sum.n[a] = count.n[a] = (nf[a] + f[a] - 1) / f[a];
  }
  sum.v.assign(std::size_t(sum.n[0]) * sum.n[1] * sum.n[2], 0.0);
  count.v = sum.v;
  for (int z = 0; z < nf[2]; ++z)
    for (int y = 0; y < nf[1]; ++y)
      for (int x = 0; x < nf[0]; ++x) {
        const double v = p[(std::size_t(z) * nf[1] + y) * nf[0] + x];
        if (!(v > threshold)) continue;
        sum.at(x / f[0], y / f[1], z / f[2]) += v;
        count.at(x / f[0], y / f[1], z / f[2]) += 1.0;
      }
  for (int a = 0; a < 3; ++a) {
    blurAxis(sum, a, sigma[a]);
    blurAxis(count, a, sigma[a]);
  }
  HostImage out("kortex::Intensity::bias_corrected", g);
  out.metadata = img.metadata;
  float* o = out.data.data();
#pragma omp parallel for collapse(2)
  for (int z = 0; z < nf[2]; ++z)
    for (int y = 0; y < nf[1]; ++y)
      for (int x = 0; x < nf[0]; ++x) {
        const std::size_t i = (std::size_t(z) * nf[1] + y) * nf[0] + x;
        const double v = p[i];
        const double s = v > threshold ? sampleCoarse(sum, f, x, y, z) / sampleCoarse(count, f, x, y, z) : 0.0;
        o[i] = s > 0.0 ? float(v / s) : 0.0f;
      }
  return out;
}

HostImage normaliseIntensity(HostImage const& img, IntensityParams const& params,
                             std::string const& name, IntensityWindow* window) {
  if (params.biasSigmaMm > 0.0) {
    params.validate();
    checkedRange(img, name);  // the input's rules first
    IntensityParams plain = params;
    plain.biasSigmaMm = 0.0;
    return normaliseIntensity(biasCorrected(img, params.biasSigmaMm, name), plain, name, window);
  }
  const IntensityWindow w = intensityWindow(img, params, name);
  HostImage out("kortex::Intensity::normalised", img.geometry);
  out.metadata = img.metadata;
  const Index n = img.numVoxels();
  const float* in = img.data.data();
  float* o = out.data.data();
  const double scale = 1.0 / (w.hi - w.lo);
#pragma omp parallel for schedule(static)
  for (Index i = 0; i < n; ++i) {
    const double v = (double(in[i]) - w.lo) * scale;
    o[i] = static_cast<float>(v < 0.0 ? 0.0 : (v > 1.0 ? 1.0 : v));
  }
  if (window) *window = w;
  return out;
}

}  // namespace kortex
