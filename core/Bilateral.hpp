// Bilateral filter: parameters and the per-voxel maths shared by every Kokkos variant.
//
// Definition (2D and 3D, float32; dimension d = 2 or 3 from the image geometry):
//   out(x) = sum_{o in W} w(x,o) * I(x+o) / sum_{o in W} w(x,o),  W = {-r..r}^d
//   w(x,o) = exp(-|o|^2 / (2 sigma_s^2)) * exp(-(I(x+o) - I(x))^2 / (2 sigma_r^2))
// |o| is measured in voxel units (index space; voxel spacing does not enter). Samples outside
// the image follow the clamp rule of core/Boundary.hpp. sigma_r = +inf is allowed and gives a
// pure (truncated, normalised) Gaussian blur. The centre tap has weight exactly 1.
// The spatial factor may be tabulated (ScratchTiled precomputes per-axis factors into a LUT:
// exp(-dx^2 k) * exp(-(dy^2+dz^2) k), within 2 ulp of the single exp); the range
// factor is evaluated per tap (no range LUT) by exp2Flush (core/FastMath.hpp: 2 ulp, factors below
// 2^-126 flushed to 0, which no sum holding the centre's weight 1 can see).
#pragma once

#include <limits>
#include <ostream>
#include <string>

#include "core/Backend.hpp"
#include "core/Compat.hpp"
#include "core/FastMath.hpp"
#include "core/Image.hpp"

namespace kortex {

enum class BilateralVariant { Naive, ScratchTiled };
BilateralVariant parseBilateralVariant(std::string const& s);  // "naive" | "scratch"
const char* toString(BilateralVariant v);
inline std::ostream& operator<<(std::ostream& os, BilateralVariant v) { return os << toString(v); }

struct BilateralParams {
  int radius = 3;               // window (2r+1)^d
  float sigmaSpatial = 2.0f;    // voxels
  float sigmaRange = 0.1f;      // intensity units; +inf allowed
  BilateralVariant variant = BilateralVariant::ScratchTiled;

  static constexpr int kMaxRadius = 64;

  // Parameter checks independent of the image: throws InvalidArgument.
  void validate() const;
  // validate() plus checks against the image: radius < every filtered extent.
  void validateFor(Geometry const& g) const;
};

// Coefficients precomputed once per call, with log2(e) folded in: every factor is evaluated as
// exp2Flush(d2 * coeff) == exp(-d2 / (2 sigma^2)) (within 2 ulp; one special-function instruction
// on GPUs, while exp adds a range reduction and exp2 a subnormal scaling).
struct BilateralCoeffs {
  float spatialLog2Coeff;  // -log2(e) / (2 sigma_s^2)
  float rangeLog2Coeff;    // -log2(e) / (2 sigma_r^2), 0 for sigma_r = inf
};

inline constexpr double kLog2e = 1.4426950408889634074;

inline BilateralCoeffs bilateralCoeffs(BilateralParams const& p) {
  BilateralCoeffs c;
  const double ss = p.sigmaSpatial, sr = p.sigmaRange;
  c.spatialLog2Coeff = static_cast<float>(-kLog2e / (2.0 * ss * ss));
  c.rangeLog2Coeff = (p.sigmaRange == std::numeric_limits<float>::infinity())
                         ? 0.0f
                         : static_cast<float>(-kLog2e / (2.0 * sr * sr));
  return c;
}

// Spatial factor for a squared offset length |o|^2 (integer).
KOKKOS_INLINE_FUNCTION float bilateralSpatialWeight(int dist2, float spatialLog2Coeff) {
  return exp2Flush(static_cast<float>(dist2) * spatialLog2Coeff);
}

// Range factor for an intensity difference, per tap (no LUT).
KOKKOS_INLINE_FUNCTION float bilateralRangeWeight(float diff, float rangeLog2Coeff) {
  return exp2Flush(diff * diff * rangeLog2Coeff);
}

// Full tap weight without LUT (Naive variant): the two factors multiplied, as the definition reads.
KOKKOS_INLINE_FUNCTION float bilateralWeight(int dist2, float diff, BilateralCoeffs const& c) {
  return bilateralSpatialWeight(dist2, c.spatialLog2Coeff) *
         bilateralRangeWeight(diff, c.rangeLog2Coeff);
}

}  // namespace kortex
