// CPU reference non-local means: Eigen + OpenMP, written independently of the Kokkos code.
// It shares with gpu/ only the parameter struct and the definitions stated in core/Nlm.hpp.
// Patch distances are computed per search offset with separable box sums in double precision
// over slabs (cost independent of the patch size), weights and sums in double.
#pragma once

#include "core/Image.hpp"
#include "core/Nlm.hpp"

namespace kortex::ref {

// `in` and `out` have extents (nz, ny, nx); nz == 1 means 2D. `params.variant` is ignored
// (the reference has one algorithm). Throws InvalidArgument on bad or overlapping views,
// invalid parameters, or NaN/Inf input voxels. Uses the exact symmetry D(x+o,-o) = D(x,o)
// (every sample clamped independently) to evaluate half of the offsets.
void nlm(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
         NlmParams const& params);

HostImage nlm(HostImage const& in, NlmParams const& params);

}  // namespace kortex::ref
