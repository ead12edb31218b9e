#include "core/Greedy.hpp"

#include <cmath>

#include "core/Errors.hpp"

namespace kortex {

GreedySolver parseGreedySolver(std::string const& s) {
  if (s == "fft") return GreedySolver::Fft;
  if (s == "sor") return GreedySolver::Sor;
  if (s == "cg") return GreedySolver::Cg;
  if (s == "hybrid-sor") return GreedySolver::HybridSor;
  if (s == "hybrid-cg") return GreedySolver::HybridCg;
  throw InvalidArgument("unknown fluid solver '" + s + "' (expected fft|sor|cg|hybrid-sor|hybrid-cg)");
}

GreedyStepVariant parseGreedyStepVariant(std::string const& s) {
  if (s == "naive") return GreedyStepVariant::Naive;
  if (s == "scratch-tiled") return GreedyStepVariant::ScratchTiled;
  throw InvalidArgument("unknown greedy step variant '" + s + "' (expected naive|scratch-tiled)");
}

const char* toString(GreedyStepVariant v) {
  switch (v) {
    case GreedyStepVariant::Naive: return "Naive";
    case GreedyStepVariant::ScratchTiled: return "ScratchTiled";
  }
  return "?";
}

const char* toString(GreedySolver s) {
  switch (s) {
    case GreedySolver::Fft: return "fft";
    case GreedySolver::Sor: return "sor";
    case GreedySolver::Cg: return "cg";
    case GreedySolver::HybridSor: return "hybrid-sor";
    case GreedySolver::HybridCg: return "hybrid-cg";
  }
  return "?";
}

bool usesSor(GreedySolver s) { return s == GreedySolver::Sor || s == GreedySolver::HybridSor; }
bool usesCg(GreedySolver s) { return s == GreedySolver::Cg || s == GreedySolver::HybridCg; }

void GreedyParams::validate() const {
  fluid.validate();
  if (scales.empty()) throw InvalidArgument("greedy registration needs at least one scale");
  if (scales.size() != iterations.size())
    throw InvalidArgument("greedy registration: " + std::to_string(scales.size()) + " scales but " +
                          std::to_string(iterations.size()) + " iteration counts (one per scale)");
  for (std::size_t s = 0; s < scales.size(); ++s) {
    if (scales[s] < 1 || scales[s] > kMaxScaleFactor)
      throw InvalidArgument("greedy scale factors must be in [1, " + std::to_string(kMaxScaleFactor) +
                            "], got " + std::to_string(scales[s]));
    if (s > 0 && !(scales[s] < scales[s - 1]))
      throw InvalidArgument("greedy scale factors must decrease strictly from coarse to fine");
    if (iterations[s] < 0 || iterations[s] > kMaxIterations)
      throw InvalidArgument("greedy iterations must be in [0, " + std::to_string(kMaxIterations) + "] per scale, got " +
                            std::to_string(iterations[s]));
  }
  if (scales.back() != 1) throw InvalidArgument("the last greedy scale factor must be 1 (the full grid)");
  if (!(maxStep > 0.0f) || !std::isfinite(maxStep) || maxStep > 4.0f)
    throw InvalidArgument("greedy max step must be in (0, 4] voxels, got " + std::to_string(maxStep));
  if (!(minStep > 0.0f) || !(minStep <= maxStep))
    throw InvalidArgument("greedy min step must be in (0, max step], got " + std::to_string(minStep));
  if (usesSor(solver) && fluid.beta != 0.0)
    throw InvalidArgument("the SOR solver handles beta = 0 only (the components decouple); use the "
                          "fft or cg solver for beta > 0");
  if (coldSweeps < 1 || warmSweeps < 1)
    throw InvalidArgument("SOR sweep counts must be >= 1");
  if (cgMaxIterations < 1) throw InvalidArgument("CG iteration cap must be >= 1");
  if (!(cgTolerance > 0.0) || !(cgTolerance < 1.0))
    throw InvalidArgument("CG tolerance must be in (0, 1), got " + std::to_string(cgTolerance));
}

void GreedyParams::validateFor(Geometry const& g) const {
  validate();
  if (g.dimension != 3) throw InvalidArgument("greedy registration needs 3D images");
  const int n[3] = {int(g.nz()), int(g.ny()), int(g.nx())};
  for (int f : scales) {
    for (int a = 0; a < 3; ++a) {
      if (n[a] % f != 0)
        throw InvalidArgument("greedy scale factor " + std::to_string(f) + " does not divide the extent " +
                              std::to_string(n[a]) + " (pad the images)");
      const int m = n[a] / f;
      if (m < kFluidMinExtent)
        throw InvalidArgument("greedy scale factor " + std::to_string(f) + " leaves an extent of " +
                              std::to_string(m) + " (< " + std::to_string(kFluidMinExtent) + ")");
      if (usesSor(solver) && m % 2 != 0)
        throw InvalidArgument("the SOR solver needs even extents at every scale (red-black colouring "
                              "of the periodic grid); extent " + std::to_string(m) + " at factor " +
                              std::to_string(f));
    }
  }
}

GridExtents scaledExtents(Geometry const& g, int factor) {
  return GridExtents{int(g.nz()) / factor, int(g.ny()) / factor, int(g.nx()) / factor};
}

Geometry scaledGeometry(Geometry const& g, int factor) {
  Geometry s = g;
  const double shift = 0.5 * (factor - 1);
  for (int a = 0; a < 3; ++a) {
    s.size[a] = g.size[a] / factor;
    s.spacing[a] = g.spacing[a] * factor;
  }
  for (int r = 0; r < 3; ++r)
    for (int a = 0; a < 3; ++a) s.origin[r] += g.direction[3 * r + a] * g.spacing[a] * shift;
  return s;
}

float scaleSigma(int factor) { return factor > 1 ? 0.5f * static_cast<float>(factor) : 0.0f; }

const char* toString(GreedyStop s) {
  switch (s) {
    case GreedyStop::IterationCap: return "iteration-cap";
    case GreedyStop::ZeroVelocity: return "zero-velocity";
    case GreedyStop::Folded: return "folded";
  }
  return "?";
}

std::string explain(GreedyStop s) {
  switch (s) {
    case GreedyStop::IterationCap: return "ran the requested iterations";
    case GreedyStop::ZeroVelocity: return "the force vanished (the images already match)";
    case GreedyStop::Folded:
      return "every step down to the minimum step would fold the deformation (det Dh <= 0); "
             "the last valid deformation is kept";
  }
  return "?";
}

bool GreedyResult::folded() const {
  for (auto const& s : scales)
    if (s.stop == GreedyStop::Folded) return true;
  return false;
}

}  // namespace kortex
