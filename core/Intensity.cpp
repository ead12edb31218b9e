#include "core/Intensity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
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
// ranks at once (each rank narrows its own key prefix), OpenMP threads over the values.
std::vector<float> orderStatistics(const float* p, Index n, std::vector<Index> ranks) {
  constexpr int kShift[3] = {21, 10, 0}, kBits[3] = {11, 11, 10};
  const std::size_t m = ranks.size();
  std::vector<std::uint32_t> prefix(m, 0);
  std::uint32_t decided = 0;  // the key bits fixed by the digits done
  for (int level = 0; level < 3; ++level) {
    const std::size_t bins = std::size_t(1) << kBits[level];
    const std::uint32_t digitMask = static_cast<std::uint32_t>(bins - 1);
    std::vector<Index> hist(m * bins, 0);
#pragma omp parallel
    {
      std::vector<Index> local(m * bins, 0);
#pragma omp for schedule(static) nowait
      for (Index i = 0; i < n; ++i) {
        const std::uint32_t k = floatKey(p[i]);
        const std::size_t digit = (k >> kShift[level]) & digitMask;
        for (std::size_t r = 0; r < m; ++r)
          if ((k & decided) == prefix[r]) ++local[r * bins + digit];
      }
#pragma omp critical(kortex_intensity_histogram)
      for (std::size_t j = 0; j < m * bins; ++j) hist[j] += local[j];
    }
    for (std::size_t r = 0; r < m; ++r) {
      std::size_t d = 0;
      while (ranks[r] >= hist[r * bins + d]) ranks[r] -= hist[r * bins + d++];
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

IntensityWindow intensityWindow(HostImage const& img, IntensityParams const& params,
                                std::string const& name) {
  params.validate();
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

HostImage normaliseIntensity(HostImage const& img, IntensityParams const& params,
                             std::string const& name, IntensityWindow* window) {
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
