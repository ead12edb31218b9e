// CPU reference of the element-wise operators, the gradient (specification: core/ImageOps.hpp) and
// the warp:
// double arithmetic, OpenMP loops, written independently of the Kokkos code.
#pragma once

#include <vector>

#include "core/ImageOps.hpp"
#include "core/Image.hpp"

namespace kortex::ref {

using ConstHostView = ConstImageView<Kokkos::HostSpace>;
using HostView = ImageView<Kokkos::HostSpace>;

void axpby(double a, ConstHostView y, double b, ConstHostView z, HostView out);
void normaliseRange(ConstHostView x, double lo, double hi, HostView out);
void average(std::vector<ConstHostView> const& inputs, HostView out);
// out (3, nz, ny, nx): clamped central differences.
void gradient(ConstHostView a, Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> out);
// out(x) = moving(x - u(x)): trilinear, clamp-extended, the sample point the float32 difference
// x - u(x), interpolated in double. u (3, nz, ny, nx) in voxels. out may not overlap an input.
void warp(ConstHostView moving, Kokkos::View<const float****, Kokkos::LayoutRight, Kokkos::HostSpace> u, HostView out);

}  // namespace kortex::ref
