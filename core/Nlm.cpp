#include "core/Nlm.hpp"

#include <cmath>

namespace kortex {

NlmVariant parseNlmVariant(std::string const& s) {
  if (s == "naive") return NlmVariant::Naive;
  if (s == "scratch" || s == "scratchtiled" || s == "scratch-tiled") return NlmVariant::ScratchTiled;
  if (s == "boxsum" || s == "box-sum") return NlmVariant::BoxSum;
  throw InvalidArgument("unknown NLM variant '" + s + "' (expected naive|scratch|boxsum)");
}

const char* toString(NlmVariant v) {
  switch (v) {
    case NlmVariant::Naive: return "Naive";
    case NlmVariant::ScratchTiled: return "ScratchTiled";
    case NlmVariant::BoxSum: return "BoxSum";
  }
  return "?";
}

void NlmParams::validate() const {
  if (patchRadius < 0 || searchRadius < 0)
    throw InvalidArgument("NLM patch and search radii must be >= 0");
  if (patchRadius > kMaxRadius || searchRadius > kMaxRadius)
    throw InvalidArgument("NLM radii must be <= " + std::to_string(kMaxRadius));
  if (!(h > 0.0f) || !std::isfinite(h))
    throw InvalidArgument("NLM h must be positive and finite, got " + std::to_string(h));
}

void NlmParams::validateFor(Geometry const& g) const {
  validate();
  g.validate();
  for (int a = 0; a < g.dimension; ++a) {
    if (searchRadius >= g.size[a])
      throw InvalidArgument("NLM search radius " + std::to_string(searchRadius) +
                            " is larger than the image (" + describe(g) +
                            "): it must be smaller than every extent");
    if (patchRadius >= g.size[a])
      throw InvalidArgument("NLM patch radius " + std::to_string(patchRadius) +
                            " is larger than the image (" + describe(g) +
                            "): it must be smaller than every extent");
  }
}

}  // namespace kortex
