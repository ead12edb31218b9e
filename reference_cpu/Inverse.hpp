// CPU reference of the inversion of a registration's map (specification: core/Inverse.hpp): for
// every voxel q of the moving grid (the extents of `preimage`), the fixed-grid point p with
// p - u(p) = M q (M the affine map moving index -> fixed index), as preimage(:, q) (fixed index
// units, x first). Newton's method with a central-difference Jacobian of the reference's own
// trilinear interpolant, Eigen for the 3x3 solve, OpenMP over the points; written independently of
// the Kokkos code.
#pragma once

#include "core/Affine.hpp"
#include "core/Image.hpp"
#include "core/Inverse.hpp"

namespace kortex::ref {

InverseStats invertMap(Kokkos::View<const float****, Kokkos::LayoutRight, Kokkos::HostSpace> u,
                       AffineTransform const& movingToS,
                       Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> preimage, InverseParams const& params);

}  // namespace kortex::ref
