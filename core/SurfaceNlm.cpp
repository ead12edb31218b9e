#include "core/SurfaceNlm.hpp"

#include <cmath>
#include <string>

#include "core/Errors.hpp"

namespace kortex {

SurfaceNlmVariant parseSurfaceNlmVariant(std::string const& s) {
  if (s == "global") return SurfaceNlmVariant::Global;
  if (s == "randomaccess" || s == "random-access") return SurfaceNlmVariant::RandomAccess;
  if (s == "scratch" || s == "scratchbroadcast" || s == "scratch-broadcast") return SurfaceNlmVariant::ScratchBroadcast;
  if (s == "pruned") return SurfaceNlmVariant::Pruned;
  if (s == "prunedblocks" || s == "pruned-blocks") return SurfaceNlmVariant::PrunedBlocks;
  throw InvalidArgument("unknown surface NLM variant '" + s + "' (expected global|randomaccess|scratch|pruned|prunedblocks)");
}

const char* toString(SurfaceNlmVariant v) {
  switch (v) {
    case SurfaceNlmVariant::Global: return "Global";
    case SurfaceNlmVariant::RandomAccess: return "RandomAccess";
    case SurfaceNlmVariant::ScratchBroadcast: return "ScratchBroadcast";
    case SurfaceNlmVariant::Pruned: return "Pruned";
    case SurfaceNlmVariant::PrunedBlocks: return "PrunedBlocks";
  }
  return "?";
}

void SurfaceNlmParams::validate() const {
  if (!(band > 0.0f) || !std::isfinite(band))
    throw InvalidArgument("surface NLM: the band half-width must be a finite number > 0 voxels, got " + std::to_string(band));
  if (patch < 1 || patch % 2 == 0 || patch > kMaxPatch)
    throw InvalidArgument("surface NLM: the patch edge n must be odd and in [1, " + std::to_string(kMaxPatch) + "], got " +
                          std::to_string(patch));
  if (neighbors < 1 || neighbors > kMaxNeighbors)
    throw InvalidArgument("surface NLM: the neighbour count m must be in [1, " + std::to_string(kMaxNeighbors) + "], got " +
                          std::to_string(neighbors));
  if (!(c1 > 0.0) || !std::isfinite(c1))
    throw InvalidArgument("surface NLM: the spatial weight scale c1 must be a finite number > 0, got " + std::to_string(c1));
  if (!(c2 > 0.0) || !std::isfinite(c2))
    throw InvalidArgument("surface NLM: the patch-distance weight scale c2 must be a finite number > 0, got " + std::to_string(c2));
  if (seedRadius < 0)
    throw InvalidArgument("surface NLM: the seed radius must be >= 0, got " + std::to_string(seedRadius));
  if (passCandidates < 1)
    throw InvalidArgument("surface NLM: candidates per pass must be >= 1, got " + std::to_string(passCandidates));
  if (iterations < 0 || iterations > kMaxIterations)
    throw InvalidArgument("surface NLM: the iteration count K must be in [0, " + std::to_string(kMaxIterations) + "], got " +
                          std::to_string(iterations));
}

}  // namespace kortex
