#include "core/Intensity.hpp"

#include <algorithm>
#include <cmath>
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

double percentile(std::vector<float>& values, double q) {
  if (values.empty()) throw InvalidArgument("percentile of an empty set of values");
  const double h = (static_cast<double>(values.size()) - 1.0) * q / 100.0;
  const std::size_t k = static_cast<std::size_t>(std::floor(h));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  const double lo = values[k];
  if (k + 1 >= values.size()) return lo;
  // The next order statistic is the minimum of the part after k.
  const double hi = *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(k + 1), values.end());
  return lo + (h - static_cast<double>(k)) * (hi - lo);
}

IntensityWindow intensityWindow(HostImage const& img, IntensityParams const& params,
                                std::string const& name) {
  params.validate();
  const Index n = img.numVoxels();
  if (n <= 0 || img.data.data() == nullptr || static_cast<Index>(img.data.size()) != n)
    throw InvalidArgument(name + " is empty or its data does not match its geometry");
  const float* p = img.data.data();
  Index nans = 0, infs = 0;
  double mn = INFINITY, mx = -INFINITY;
  for (Index i = 0; i < n; ++i) {
    const float v = p[i];
    if (std::isnan(v)) ++nans;
    else if (std::isinf(v)) ++infs;
    else {
      mn = std::min(mn, double(v));
      mx = std::max(mx, double(v));
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
  std::vector<float> values(p, p + n);
  w.lo = percentile(values, params.pLow);
  w.hi = percentile(values, params.pHigh);
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
  for (Index i = 0; i < n; ++i) {
    const double v = (double(in[i]) - w.lo) * scale;
    o[i] = static_cast<float>(v < 0.0 ? 0.0 : (v > 1.0 ? 1.0 : v));
  }
  if (window) *window = w;
  return out;
}

}  // namespace kortex
