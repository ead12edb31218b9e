#include "core/Multires.hpp"

#include <cmath>
#include <limits>

#include "core/Errors.hpp"

namespace kortex {

PyramidVariant parsePyramidVariant(std::string const& s) {
  if (s == "unfused") return PyramidVariant::Unfused;
  if (s == "fused" || s == "fused-direct") return PyramidVariant::FusedDirect;
  if (s == "fused-expand" || s == "fused-scratch") return PyramidVariant::FusedExpand;
  if (s == "packed16") return PyramidVariant::Packed16;
  if (s == "fused-reduce") return PyramidVariant::FusedReduce;
  throw InvalidArgument("unknown pyramid variant '" + s + "' (expected unfused|fused|fused-expand|packed16|fused-reduce)");
}

const char* toString(PyramidVariant v) {
  switch (v) {
    case PyramidVariant::Unfused: return "Unfused";
    case PyramidVariant::FusedDirect: return "FusedDirect";
    case PyramidVariant::FusedExpand: return "FusedExpand";
    case PyramidVariant::Packed16: return "Packed16";
    case PyramidVariant::FusedReduce: return "FusedReduce";
  }
  return "?";
}

MultiresBilateralVariant parseMultiresBilateralVariant(std::string const& s) {
  if (s == "naive") return MultiresBilateralVariant::Naive;
  if (s == "closeness-lut") return MultiresBilateralVariant::ClosenessLut;
  if (s == "lut" || s == "closeness-similarity-lut") return MultiresBilateralVariant::ClosenessSimilarityLut;
  if (s == "fastmath" || s == "fast-math") return MultiresBilateralVariant::FastMath;
  if (s == "reuse") return MultiresBilateralVariant::Reuse;
  throw InvalidArgument("unknown multires bilateral variant '" + s +
                        "' (expected naive|closeness-lut|lut|fastmath|reuse)");
}

const char* toString(MultiresBilateralVariant v) {
  switch (v) {
    case MultiresBilateralVariant::Naive: return "Naive";
    case MultiresBilateralVariant::ClosenessLut: return "ClosenessLut";
    case MultiresBilateralVariant::ClosenessSimilarityLut: return "ClosenessSimilarityLut";
    case MultiresBilateralVariant::FastMath: return "FastMath";
    case MultiresBilateralVariant::Reuse: return "Reuse";
  }
  return "?";
}

void MultiresParams::validate() const {
  if (levels < 1 || levels > kMaxLevels)
    throw InvalidArgument("multires levels must be in [1, " + std::to_string(kMaxLevels) + "], got " +
                          std::to_string(levels));
  if (radius < 0 || radius > kMaxRadius)
    throw InvalidArgument("multires radius must be in [0, " + std::to_string(kMaxRadius) + "], got " +
                          std::to_string(radius));
  if (!(sigmaSpatial > 0.0f) || !std::isfinite(sigmaSpatial))
    throw InvalidArgument("multires closeness sigma (sigmaSpatial) must be positive and finite, got " +
                          std::to_string(sigmaSpatial));
  if (!(sigmaRange > 0.0f))  // rejects NaN, 0 and negatives; +inf is allowed
    throw InvalidArgument("multires similarity sigma (sigmaRange) must be positive (inf allowed), got " +
                          std::to_string(sigmaRange));
  if (bits < 0 || bits > kMaxBits)
    throw InvalidArgument("multires bits must be 0 (automatic) or in [1, " + std::to_string(kMaxBits) +
                          "], got " + std::to_string(bits));
  if (tiles.bilateralX < 0 || tiles.bilateralY < 0 || tiles.pyramidX < 0 || tiles.pyramidY < 0)
    throw InvalidArgument("multires tile sizes must be >= 0 (0: tuned default)");
  if (static_cast<int>(pyramid) < 0 || static_cast<int>(pyramid) > static_cast<int>(PyramidVariant::FusedReduce))
    throw InvalidArgument("multires: unknown pyramid variant " + std::to_string(static_cast<int>(pyramid)));
  if (static_cast<int>(bilateral) < 0 || static_cast<int>(bilateral) > static_cast<int>(MultiresBilateralVariant::Reuse))
    throw InvalidArgument("multires: unknown bilateral variant " + std::to_string(static_cast<int>(bilateral)));
}

void MultiresParams::validateFor(Geometry const& g) const {
  validate();
  g.validate();
  if (g.dimension != 2)
    throw InvalidArgument("multires filters 2D images only; got " + describe(g));
  const Index nx = g.size[0], ny = g.size[1];
  if (!levelsFit(nx, ny, levels)) {
    const int m = maxLevels(nx, ny);
    throw InvalidArgument("multires: " + std::to_string(levels) + " levels are too many for a " +
                          std::to_string(nx) + "x" + std::to_string(ny) + " image (at most " +
                          std::to_string(m) + ": a level must be at least 2 pixels along both axes to be halved)");
  }
}

void MultiresParams::validateVariants(bool integerPipeline) const {
  if (integerPipeline) {
    if (bilateral != MultiresBilateralVariant::ClosenessSimilarityLut)
      throw InvalidArgument(std::string("multires: 16-bit integer input uses the closeness+similarity LUT "
                                        "bilateral (variant lut); '") +
                            toString(bilateral) + "' is a float-pipeline variant");
  } else {
    if (bilateral == MultiresBilateralVariant::ClosenessSimilarityLut)
      throw InvalidArgument("multires: the closeness+similarity LUT bilateral (variant lut) needs 16-bit "
                            "integer input; use naive, closeness-lut, fastmath or reuse for float input");
    if (pyramid == PyramidVariant::Packed16)
      throw InvalidArgument("multires: the packed16 pyramid needs 16-bit integer input");
  }
}

std::vector<LevelSize> levelSizes(Index nx, Index ny, int levels) {
  std::vector<LevelSize> s;
  s.push_back({nx, ny});
  for (int k = 0; k < levels; ++k) s.push_back({(s.back().nx + 1) / 2, (s.back().ny + 1) / 2});
  return s;
}

int maxLevels(Index nx, Index ny) {
  int L = 0;
  while (nx >= 2 && ny >= 2) {
    nx = (nx + 1) / 2;
    ny = (ny + 1) / 2;
    ++L;
  }
  return L;
}

std::vector<std::int32_t> multiresClosenessQ(int radius, float sigmaSpatial) {
  const int w = 2 * radius + 1;
  const double k = -1.0 / (2.0 * double(sigmaSpatial) * double(sigmaSpatial));
  std::vector<std::int32_t> t(static_cast<std::size_t>(w) * w);
  for (int dy = -radius; dy <= radius; ++dy)
    for (int dx = -radius; dx <= radius; ++dx)
      t[(dy + radius) * w + (dx + radius)] =
          static_cast<std::int32_t>(std::lround(kMultiresWeightOne * std::exp(double(dx * dx + dy * dy) * k)));
  return t;
}

std::vector<std::int32_t> multiresSimilarityQ(float sigmaRange, int maxDiff) {
  std::vector<std::int32_t> t;
  if (maxDiff < 0) maxDiff = 0;
  if (sigmaRange == std::numeric_limits<float>::infinity()) {
    t.assign(static_cast<std::size_t>(maxDiff) + 1, kMultiresWeightOne);
    return t;
  }
  const double k = -1.0 / (2.0 * double(sigmaRange) * double(sigmaRange));
  for (int d = 0; d <= maxDiff; ++d) {
    const auto v = static_cast<std::int32_t>(std::lround(kMultiresWeightOne * std::exp(double(d) * d * k)));
    if (v == 0) break;
    t.push_back(v);
  }
  return t;  // never empty: entry 0 is kMultiresWeightOne
}

std::vector<float> multiresCloseness(int radius, float sigmaSpatial) {
  const int w = 2 * radius + 1;
  const double k = -1.0 / (2.0 * double(sigmaSpatial) * double(sigmaSpatial));
  std::vector<float> t(static_cast<std::size_t>(w) * w);
  for (int dy = -radius; dy <= radius; ++dy)
    for (int dx = -radius; dx <= radius; ++dx)
      t[(dy + radius) * w + (dx + radius)] = static_cast<float>(std::exp(double(dx * dx + dy * dy) * k));
  return t;
}

int bitsFor(std::uint32_t maxValue) {
  int b = 1;
  while (b < 32 && (std::uint64_t(1) << b) - 1 < maxValue) ++b;
  return b;
}

}  // namespace kortex
