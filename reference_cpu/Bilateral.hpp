// CPU reference bilateral filter: Eigen + OpenMP, written independently of the Kokkos code.
// It shares with gpu/ only the parameter struct and the definitions stated in
// core/Bilateral.hpp (weights, voxel-unit distances, clamp boundary). Accumulates in double.
#pragma once

#include "core/Bilateral.hpp"
#include "core/Image.hpp"

namespace kortex::ref {

// `in` and `out` have extents (nz, ny, nx); nz == 1 means 2D. Throws InvalidArgument on
// mismatched or overlapping views, invalid parameters, or NaN/Inf input voxels. Threads: OpenMP (omp_set_num_threads / OMP_NUM_THREADS).
void bilateral(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
               BilateralParams const& params);

HostImage bilateral(HostImage const& in, BilateralParams const& params);

}  // namespace kortex::ref
