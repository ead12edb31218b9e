#include "core/Greedy.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

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

GreedyMetric parseGreedyMetric(std::string const& s) {
  if (s == "ssd") return GreedyMetric::Ssd;
  if (s == "lncc") return GreedyMetric::Lncc;
  if (s == "mi") return GreedyMetric::Mi;
  throw InvalidArgument("unknown greedy metric '" + s + "' (expected ssd|lncc|mi)");
}

const char* toString(GreedyMetric m) {
  switch (m) {
    case GreedyMetric::Ssd: return "ssd";
    case GreedyMetric::Lncc: return "lncc";
    case GreedyMetric::Mi: return "mi";
  }
  return "?";
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

GreedyParams greedyRegistrationDefaults() {
  GreedyParams p;
  p.metric = GreedyMetric::Lncc;
  p.lnccRadius = 2;
  p.scales = {4, 2, 1};
  p.iterations = {50, 50, 100};
  p.maxStep = 0.5f;
  return p;
}

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
  if (usesSor(solver) && fluid.beta != 0.0)  // the grid part of the SOR rule: validateFor
    throw InvalidArgument(sorUnsuitable(fluid, 4, 4, 4) + "; use the fft or cg solver for beta > 0");
  if (coldSweeps < 1 || warmSweeps < 1)
    throw InvalidArgument("SOR sweep counts must be >= 1");
  if (cgMaxIterations < 1) throw InvalidArgument("CG iteration cap must be >= 1");
  if (!(cgTolerance > 0.0) || !(cgTolerance < 1.0))
    throw InvalidArgument("CG tolerance must be in (0, 1), got " + std::to_string(cgTolerance));
  if (lnccRadius < 1 || lnccRadius > kMaxLnccRadius)
    throw InvalidArgument("the LNCC window radius must be in [1, " + std::to_string(kMaxLnccRadius) + "] voxels, got " +
                          std::to_string(lnccRadius));
  validateMiBins(miBins);
}

GreedySolveKind greedySolveKind(GreedySolver solver, bool first) {
  switch (solver) {
    case GreedySolver::Fft: return GreedySolveKind::Spectral;
    case GreedySolver::Sor: return first ? GreedySolveKind::SorCold : GreedySolveKind::SorWarm;
    case GreedySolver::Cg: return GreedySolveKind::Cg;
    case GreedySolver::HybridSor: return first ? GreedySolveKind::Spectral : GreedySolveKind::SorWarm;
    case GreedySolver::HybridCg: return first ? GreedySolveKind::Spectral : GreedySolveKind::Cg;
  }
  return GreedySolveKind::Spectral;
}

std::string scaleMisfit(Geometry const& g, int factor) {
  if (factor < 1) return "scale factor " + std::to_string(factor) + " is not >= 1";
  for (Index n : {g.nz(), g.ny(), g.nx()}) {
    if (n % factor != 0)
      return "scale factor " + std::to_string(factor) + " does not divide the extent " + std::to_string(n) +
             " (pad the images)";
    if (n / factor < kFluidMinExtent)
      return "scale factor " + std::to_string(factor) + " leaves an extent of " + std::to_string(n / factor) + " (< " +
             std::to_string(kFluidMinExtent) + ")";
  }
  return {};
}

Index greedyGridQuantum(GreedyParams const& p) {
  Index m = 1;
  for (int f : p.scales) m = std::lcm(m, Index(std::max(f, 1)));
  return usesSor(p.solver) ? 2 * m : m;
}

Index greedyExtentFor(Index n, GreedyParams const& p) {
  const Index m = greedyGridQuantum(p);
  // The coarsest grid holds the fluid operator's minimum extent and, with LNCC, one window.
  const int coarse = p.metric == GreedyMetric::Lncc ? std::max(kFluidMinExtent, 2 * p.lnccRadius + 1) : kFluidMinExtent;
  const Index atLeast = std::max<Index>(n, Index(coarse) * m);
  return (atLeast + m - 1) / m * m;
}

void GreedyParams::validateFor(Geometry const& g) const {
  validate();
  if (g.dimension != 3) throw InvalidArgument("greedy registration needs 3D images");
  for (int f : scales) {
    if (const std::string why = scaleMisfit(g, f); !why.empty()) throw InvalidArgument("greedy " + why);
    if (usesSor(solver)) {
      const GridExtents e = scaledExtents(g, f);
      if (const std::string why = sorUnsuitable(fluid, e.nz, e.ny, e.nx); !why.empty())
        throw InvalidArgument("the SOR solver cannot run at scale factor " + std::to_string(f) + ": " + why);
    }
    if (metric == GreedyMetric::Lncc) {
      const GridExtents e = scaledExtents(g, f);
      const int side = 2 * lnccRadius + 1, smallest = std::min({e.nz, e.ny, e.nx});
      if (smallest < side)
        throw InvalidArgument("the LNCC window of radius " + std::to_string(lnccRadius) + " (" + std::to_string(side) +
                              " voxels a side at every scale) does not fit the scale-" + std::to_string(f) +
                              " grid (smallest extent " + std::to_string(smallest) + ")");
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
    case GreedyStop::MapFolded: return "map-folded";
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
    case GreedyStop::MapFolded:
      return "the next iteration would fold the symmetric map h_m(h_f^-1) (det <= 0); the last scale stopped "
             "before it";
  }
  return "?";
}

bool GreedyResult::folded() const {
  for (auto const& s : scales)
    if (s.stop == GreedyStop::Folded || s.stop == GreedyStop::MapFolded) return true;
  return false;
}

void dropLastScale(GreedyResult& r) {
  if (r.scales.empty()) return;
  const int last = int(r.scales.size()) - 1;
  while (!r.history.empty() && r.history.back().scale == last) {
    r.refused -= r.history.back().refused;
    --r.iterations;
    r.history.pop_back();
  }
  r.scales.pop_back();
}

}  // namespace kortex
