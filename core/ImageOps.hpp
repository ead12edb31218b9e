// Element-wise image operators and the image gradient of the greedy registration framework
// (Ha et al. 2010, Figs 2-3 and the gradient table): the specification every back end
// implements and the per-voxel maths shared by every Kokkos variant. The CPU reference
// (reference_cpu/ImageOps.cpp) implements it independently.
//
// n-ary fused operators, one pass over memory each (float images of equal extents):
//   axpby      out = a y + b z
//   normalise  out = (x - lo) / (hi - lo)       (range normalisation; hi > lo)
//   average    out = (x_1 + ... + x_k) / k,     1 <= k <= kMaxAverageInputs, summed in input order
// Strategies (ImageOpsVariant):
//   Fused  - one kernel per operator;
//   Binary - the same result built from binary operators, one kernel each, through temporaries:
//            axpby = add(scale(a, y), scale(b, z)); normalise = scale(1 / (hi - lo), addScalar(x,
//            -lo)); average = scale(1/k, add(...add(x_1, x_2)..., x_k)).
// Bandwidth model, in image-sized units of traffic: fused axpby reads y, z and writes out (3);
// binary: scale reads 1 writes 1 (2), twice, then add reads 2 writes 1 (3): 7. Average of k:
// fused k + 1; binary 3 (k - 1) + 2.
// Fused and binary results agree to rounding (the fused kernel may contract a y + b z into one
// fused multiply-add).
//
// Gradient: central differences with the clamp rule of core/Boundary.hpp into a 3-component field
// (x first): (D_j a)(i) = ( a(c(i+1)) - a(c(i-1)) ) / 2. Strategies (GradientVariant):
//   Naive        - one voxel per work item, every neighbour read from global memory;
//   ScratchTiled - an xy tile (+ 1-voxel apron, clamp applied while loading) marches along z with a
//                  ring of 3 slices in team scratch; each slice is read once.
#pragma once

#include <Kokkos_Core.hpp>

#include <ostream>
#include <string>

#include "core/Boundary.hpp"

namespace kortex {

enum class ImageOpsVariant { Fused, Binary };
ImageOpsVariant parseImageOpsVariant(std::string const& s);  // fused|binary
const char* toString(ImageOpsVariant v);
inline std::ostream& operator<<(std::ostream& os, ImageOpsVariant v) { return os << toString(v); }

enum class GradientVariant { Naive, ScratchTiled };
GradientVariant parseGradientVariant(std::string const& s);  // naive|scratch-tiled
const char* toString(GradientVariant v);
inline std::ostream& operator<<(std::ostream& os, GradientVariant v) { return os << toString(v); }

inline constexpr int kMaxAverageInputs = 8;

// ---- per-voxel maths (shared by every Kokkos variant) --------------------------------------------

// Clamped central-difference gradient of a (nz, ny, nx) image at (z, y, x): g[0..2] = (x, y, z).
template <class Img>
KOKKOS_INLINE_FUNCTION void centralGradient(Img const& a, int z, int y, int x, float* g) {
  const int nz = static_cast<int>(a.extent(0)), ny = static_cast<int>(a.extent(1)),
            nx = static_cast<int>(a.extent(2));
  g[0] = 0.5f * (a(z, y, clampIndex(x + 1, nx)) - a(z, y, clampIndex(x - 1, nx)));
  g[1] = 0.5f * (a(z, clampIndex(y + 1, ny), x) - a(z, clampIndex(y - 1, ny), x));
  g[2] = 0.5f * (a(clampIndex(z + 1, nz), y, x) - a(clampIndex(z - 1, nz), y, x));
}

KOKKOS_INLINE_FUNCTION float axpbyValue(float a, float y, float b, float z) { return a * y + b * z; }
KOKKOS_INLINE_FUNCTION float normaliseValue(float x, float lo, float inv) { return (x - lo) * inv; }

}  // namespace kortex
