// Kokkos inversion of a registration's map (specification: core/Inverse.hpp): for every voxel q of
// the moving grid (the extents of `preimage`), the fixed-grid point p with p - u(p) = M q, written
// as preimage(:, q) (index units of the fixed grid, x first). u (3, nz, ny, nx) is the displacement
// on the fixed grid; M the map from moving index to fixed index (A^-1 of the affine stage).
// Explicitly instantiated for every enabled execution space. Fences (returns the stats).
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Affine.hpp"
#include "core/Inverse.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

template <class Exec>
InverseStats invertMap(Exec const& exec, ConstField<typename Exec::memory_space> u, AffineTransform const& movingToS,
                       Field<typename Exec::memory_space> preimage, InverseParams const& params);

}  // namespace kortex::gpu
