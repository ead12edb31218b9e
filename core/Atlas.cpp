#include "core/Atlas.hpp"

#include "core/Errors.hpp"

namespace kortex {

void AtlasParams::validate() const { greedy.validate(); }

void AtlasParams::validateFor(Geometry const& g, int subjects) const {
  if (subjects < kMinSubjects)
    throw InvalidArgument("an atlas needs at least " + std::to_string(kMinSubjects) + " subjects, got " +
                          std::to_string(subjects));
  if (subjects > kMaxSubjects)
    throw InvalidArgument("an atlas takes at most " + std::to_string(kMaxSubjects) + " subjects, got " +
                          std::to_string(subjects) + " (the fixed-point template sums are sized for that many)");
  greedy.validateFor(g);
}

bool atlasKeepsVelocity(GreedySolver s) { return s != GreedySolver::Fft; }

AtlasMemory atlasMemory(Geometry const& g, AtlasParams const& params) {
  const std::int64_t voxels = std::int64_t(g.nx()) * g.ny() * g.nz();
  AtlasMemory m;
  // I_i and W_i (float), u_i (3 floats) and v_i (3 floats) for the warm-started solvers.
  m.perSubject = voxels * (4 + 4 + 12 + (atlasKeepsVelocity(params.greedy.solver) ? 12 : 0));
  // Template, previous template, their int64 sum, force, candidate, mean displacement and its int64
  // sum, the blur and upload buffers: 4 + 4 + 8 + 12 + 12 + 12 + 24 + 4 + 4 bytes per voxel; the
  // fluid solver's spectra and work space (3 complex half-spectra and as much again): 24 bytes.
  m.shared = voxels * (84 + 24);
  return m;
}

}  // namespace kortex
