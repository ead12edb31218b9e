// The Kokkos LNCC force of greedy registration (specification: core/Greedy.hpp, "Metrics"; the
// per-voxel maths: lnccWindowTerms, lnccTransposeWeight, lnccForceAt there). Two team passes over
// xy tiles of one slice (gpu/greedy/detail/LnccKernels.hpp):
//   windows   - the window sums of W, I1, W^2, I1^2, W I1 (tile + halo of W and I1 in team scratch,
//               clamp rule, separable x then y sums, the 2R+1 slices of the window added in turn),
//               and each window's coefficients a, a mF, a b, a b mW into `terms`;
//   transpose - the transposed (clamp-adjoint) window sums of the coefficients, the same way, and
//               the force F = G grad W.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

// The coefficients of every window (4, nz, ny, nx), double: the force is a difference of their sums.
template <class Mem>
using LnccTerms = Kokkos::View<double****, Kokkos::LayoutRight, Mem>;

// F = G grad W of the LNCC metric with window radius `radius` (1..kMaxLnccRadius) into f; `terms`
// is the workspace (4 x the grid). Returns the energy E = sum_x cc(x) (fences). Throws
// InvalidArgument on extents, overlap, a radius out of range or a tile that does not fit the back
// end's team scratch.
template <class Exec>
double lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, int radius,
                 LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f);

// The same with its own workspace.
template <class Exec>
double lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, int radius, Field<typename Exec::memory_space> f);

}  // namespace kortex::gpu
