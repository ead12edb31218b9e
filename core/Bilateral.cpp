#include "core/Bilateral.hpp"

#include <cmath>

namespace kortex {

BilateralVariant parseBilateralVariant(std::string const& s) {
  if (s == "naive") return BilateralVariant::Naive;
  if (s == "scratch" || s == "scratchtiled" || s == "scratch-tiled") return BilateralVariant::ScratchTiled;
  throw InvalidArgument("unknown bilateral variant '" + s + "' (expected naive|scratch)");
}

const char* toString(BilateralVariant v) {
  switch (v) {
    case BilateralVariant::Naive: return "Naive";
    case BilateralVariant::ScratchTiled: return "ScratchTiled";
  }
  return "?";
}

void BilateralParams::validate() const {
  if (radius < 0) throw InvalidArgument("bilateral radius must be >= 0, got " + std::to_string(radius));
  if (radius > kMaxRadius)
    throw InvalidArgument("bilateral radius " + std::to_string(radius) + " exceeds the maximum " +
                          std::to_string(kMaxRadius));
  if (!(sigmaSpatial > 0.0f) || !std::isfinite(sigmaSpatial))
    throw InvalidArgument("bilateral spatial sigma (sigmaSpatial) must be positive and finite, got " +
                          std::to_string(sigmaSpatial));
  if (!(sigmaRange > 0.0f))  // rejects NaN, 0 and negatives; +inf is allowed
    throw InvalidArgument("bilateral range sigma (sigmaRange) must be positive (inf allowed), got " +
                          std::to_string(sigmaRange));
}

void BilateralParams::validateFor(Geometry const& g) const {
  validate();
  g.validate();
  for (int a = 0; a < g.dimension; ++a)
    if (radius >= g.size[a])
      throw InvalidArgument("bilateral radius " + std::to_string(radius) +
                            " is larger than the image (" + describe(g) +
                            "): it must be smaller than every extent");
}

}  // namespace kortex
