// Non-local means: parameters and the per-voxel maths shared by every Kokkos variant.
//
// Definition (2D and 3D, float32; d = 2 or 3 from the image geometry):
//   out(x) = sum_{o in S} w(x,o) * I(x+o) / sum_{o in S} w(x,o),   S = {-R..R}^d (search window)
//   D(x,o) = sum_{p in P} (I(x+p) - I(x+o+p))^2,                    P = {-r..r}^d (patch)
//   w(x,o) = exp(-D(x,o) / (|P| h^2))  for o != 0,   |P| = (2r+1)^d
//   w(x,0) = 1                          (centre weight, set explicitly, D is not evaluated)
// i.e. the weight uses the MEAN squared patch difference with uniform patch weights. Every
// sample position (x+p, x+o, x+o+p) is clamped independently (core/Boundary.hpp), so
// D(x,o) is a box sum over p of S_o(y) = (I(y) - I(y+o))^2 evaluated at unclamped y:
// the BoxSum variant relies on exactly this.
// Symmetry: D(x+o, -o) == D(x, o) exactly (same multiset of clamped sample pairs), so a
// weight computed for (x, o) is also the weight for (x+o, -o).
// Consequences used by the tests: h -> 0 gives the identity (only patches identical to the
// centre patch keep weight, and their centres equal I(x)); R = 0 gives the identity.
#pragma once

#include <ostream>
#include <string>

#include "core/Backend.hpp"
#include "core/Compat.hpp"
#include "core/FastMath.hpp"
#include "core/Image.hpp"

namespace kortex {

enum class NlmVariant { Naive, ScratchTiled, BoxSum };
NlmVariant parseNlmVariant(std::string const& s);  // "naive" | "scratch" | "boxsum"
const char* toString(NlmVariant v);
inline std::ostream& operator<<(std::ostream& os, NlmVariant v) { return os << toString(v); }

struct NlmParams {
  int patchRadius = 3;   // r: patch (2r+1)^d
  int searchRadius = 5;  // R: search window (2R+1)^d
  float h = 0.1f;        // filtering parameter, intensity units
  NlmVariant variant = NlmVariant::BoxSum;

  static constexpr int kMaxRadius = 32;

  void validate() const;                     // throws InvalidArgument
  void validateFor(Geometry const& g) const; // + radii < every filtered extent
};

inline int patchSize(int patchRadius, int dim) {
  const int w = 2 * patchRadius + 1;
  return dim == 2 ? w * w : w * w * w;
}

// -log2(e) / (|P| h^2): log2(e) is folded in so that the weight is one exp2Flush (a single
// special-function instruction on GPUs; exp adds a range reduction around it).
inline float nlmLog2Coefficient(NlmParams const& p, int dim) {
  const double h = p.h;
  return static_cast<float>(-1.4426950408889634074 /
                            (static_cast<double>(patchSize(p.patchRadius, dim)) * h * h));
}

// Weight exp(-D / (|P| h^2)) from the summed squared patch difference D(x,o), evaluated as
// exp2Flush(D * log2Coefficient) (core/FastMath.hpp: within 2 ulp of the exp form; weights below
// 2^-126 flushed to 0, invisible beside the centre's weight 1).
KOKKOS_INLINE_FUNCTION float nlmWeight(float patchDistance, float log2Coefficient) {
  return exp2Flush(patchDistance * log2Coefficient);
}

KOKKOS_INLINE_FUNCTION float squaredDifference(float a, float b) {
  const float d = a - b;
  return d * d;
}

}  // namespace kortex
