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
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

}  // namespace kortex
