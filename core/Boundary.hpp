// Boundary convention used by every algorithm, every backend: CLAMP (replicate edge).
// A sample at index i outside [0, n) reads the voxel at clamp(i, 0, n-1).
// The CPU reference implements the same rule on its own (see reference_cpu/).
#pragma once

#include <Kokkos_Core.hpp>

namespace kortex {

enum class BoundaryRule { Clamp };

inline constexpr BoundaryRule kBoundaryRule = BoundaryRule::Clamp;
inline constexpr const char* kBoundaryRuleName = "clamp (replicate edge voxel)";

KOKKOS_INLINE_FUNCTION int clampIndex(int i, int n) {
  // max-then-min form: compiles to two integer min/max instructions on GPUs.
  const int lo = i > 0 ? i : 0;
  return lo < n - 1 ? lo : n - 1;
}

}  // namespace kortex
