#include "core/Fluid.hpp"

#include <cmath>
#include <string>

#include "core/Errors.hpp"

namespace kortex {

void FluidParams::validate() const {
  if (!(alpha > 0.0) || !std::isfinite(alpha))
    throw InvalidArgument("fluid alpha must be finite and > 0, got " + std::to_string(alpha));
  if (!(beta >= 0.0) || !std::isfinite(beta))
    throw InvalidArgument("fluid beta must be finite and >= 0, got " + std::to_string(beta));
  if (!(gamma > 0.0) || !std::isfinite(gamma))
    throw InvalidArgument("fluid gamma must be finite and > 0 (it makes the operator invertible), got " +
                          std::to_string(gamma));
}

SorVariant parseSorVariant(std::string const& s) {
  if (s == "naive") return SorVariant::Naive;
  if (s == "scratch-tiled") return SorVariant::ScratchTiled;
  throw InvalidArgument("unknown SOR variant '" + s + "' (expected naive|scratch-tiled)");
}

const char* toString(SorVariant v) {
  switch (v) {
    case SorVariant::Naive: return "Naive";
    case SorVariant::ScratchTiled: return "ScratchTiled";
  }
  return "?";
}

MatvecVariant parseMatvecVariant(std::string const& s) {
  if (s == "implicit") return MatvecVariant::Implicit;
  if (s == "explicit") return MatvecVariant::Explicit;
  throw InvalidArgument("unknown matvec variant '" + s + "' (expected implicit|explicit)");
}

const char* toString(MatvecVariant v) {
  switch (v) {
    case MatvecVariant::Implicit: return "Implicit";
    case MatvecVariant::Explicit: return "Explicit";
  }
  return "?";
}

FluidOperator makeFluidOperator(FluidParams const& p) {
  return FluidOperator{static_cast<float>(p.alpha), static_cast<float>(p.beta), static_cast<float>(p.gamma)};
}

std::string sorUnsuitable(FluidParams const& p, int nz, int ny, int nx) {
  if (p.beta != 0.0) return "SOR solves the fluid operator with beta = 0 only (the components decouple)";
  if (nz % 2 || ny % 2 || nx % 2)
    return "red-black SOR on a periodic grid needs even extents, got " + std::to_string(nx) + "x" + std::to_string(ny) +
           "x" + std::to_string(nz);
  return {};
}

double sorOmega(FluidParams const& p) {
  const double rho = 6.0 * p.alpha / (6.0 * p.alpha + p.gamma);
  return 2.0 / (1.0 + std::sqrt(1.0 - rho * rho));
}

}  // namespace kortex
