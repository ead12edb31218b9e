#include "core/MutualInformation.hpp"

#include <cmath>
#include <string>

#include "core/Errors.hpp"

namespace kortex {

void validateMiBins(int bins) {
  if (bins < kMinMiBins || bins > kMaxMiBins)
    throw InvalidArgument("mutual information bins must be in [" + std::to_string(kMinMiBins) + ", " +
                          std::to_string(kMaxMiBins) + "], got " + std::to_string(bins));
}

double miFromHistogram(std::vector<double> const& p, int bins, std::vector<double>& logRatio) {
  const std::size_t b = static_cast<std::size_t>(bins);
  std::vector<double> pf(b, 0.0), pm(b, 0.0);
  for (std::size_t i = 0; i < b; ++i)
    for (std::size_t k = 0; k < b; ++k) {
      pf[i] += p[i * b + k];
      pm[k] += p[i * b + k];
    }
  logRatio.assign(b * b, 0.0);
  double mi = 0.0;
  for (std::size_t i = 0; i < b; ++i)
    for (std::size_t k = 0; k < b; ++k) {
      const double v = p[i * b + k];
      if (!(v > 0.0)) continue;
      logRatio[i * b + k] = std::log(v / pm[k]);
      mi += v * std::log(v / (pf[i] * pm[k]));
    }
  return mi;
}

}  // namespace kortex
