// CPU reference of the multiresolution filter: Eigen + OpenMP, written independently of the
// Kokkos code. It shares with gpu/ only the parameter struct and the definitions stated in
// core/Multires.hpp (pyramid sizes, binomial reduce, polyphase expand with the clamp rule,
// bilateral on every layer, the integer pipeline's rounding and fixed-point tables).
// Float pipeline in double; integer pipeline in exact integer arithmetic.
#pragma once

#include <vector>

#include "core/Image.hpp"
#include "core/Multires.hpp"

namespace kortex::ref {

// Float pipeline. `in` has extents (1, ny, nx). Throws InvalidArgument on invalid parameters
// (validateFor, validateVariants(false)), mismatched or overlapping views, or NaN/Inf input.
// Threads: OpenMP.
void multires(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
              MultiresParams const& params);
HostImage multires(HostImage const& in, MultiresParams const& params);

// Integer pipeline. `in` has extents (1, ny, nx); every value must be <= 2^bits - 1 (bits = 0:
// bitsFor(max of the input)). Throws InvalidArgument as above (validateVariants(true)) and for
// values out of range.
void multires(ConstU16ImageView<Kokkos::HostSpace> in, U16ImageView<Kokkos::HostSpace> out,
              MultiresParams const& params);

// The decomposition alone (float pipeline, computed in double, returned as float): layers
// l_0 .. l_{L-1} followed by g_L, each a 2D image of its level's size.
std::vector<HostImage> multiresLayers(HostImage const& in, MultiresParams const& params);

}  // namespace kortex::ref
