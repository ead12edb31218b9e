// The Kokkos LNCC force of greedy registration (specification: core/Greedy.hpp, "Metrics"; the
// per-voxel maths: lnccWindowTerms, lnccTransposeWeight, lnccForceAt there). Two team passes over
// xy tiles of one slice (gpu/greedy/detail/LnccKernels.hpp):
//   windows   - the window sums of W, I1, W^2, I1^2, W I1 (tile + halo of W and I1 in team scratch,
//               clamp rule, separable x then y sums, the 2R+1 slices of the window added in turn),
//               and each window's coefficients a, a mF, a b, a b mW into `terms`;
//   transpose - the transposed (clamp-adjoint) window sums of the coefficients, the same way, and
//               the force F = G grad W.
// Each pass in one of three variants, the same terms and force bit for bit: Recompute (a team per
// tile of one slice: a source slice's 2D sums formed for each of the 2R+1 windows that hold it),
// Reuse (a team per tile of a slab of slices: each source slice's 2D sums formed once and kept for
// the window in a ring of 2R+1 slices in team scratch: up to (2R+1) x fewer loads and sums) and
// Separable (three passes over the grid, x, y, z, a voxel per work item, the partial sums in the
// workspace: no scratch, no barrier, every voxel in flight at once) and
// ScratchTiled (a team per tile of one slice forms its x and y sums in team scratch and writes them to
// the workspace, then Separable's z pass: 4 kernels instead of 6, the x sums never in memory).
#pragma once

#include <Kokkos_Core.hpp>

#include <array>

#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

// The workspace (components, nz, ny, nx), double: the coefficients of every window in components
// 0-3 (the force is a difference of their sums), and for Separable two buffers of 5 partial sums
// (ScratchTiled: one).
template <class Mem>
using LnccTerms = Kokkos::View<double****, Kokkos::LayoutRight, Mem>;

enum class LnccVariant { Recompute, Reuse, Separable, ScratchTiled };
const char* toString(LnccVariant v);

// The workspace's components for these variants ({windows, transpose}): 14 with Separable, else 9 with
// ScratchTiled, else 4.
int lnccWorkspaceComponents(std::array<LnccVariant, 2> variants);

// The variant of each pass ({windows, transpose}) at every radius: on devices ScratchTiled windows and
// a Separable transpose (H200, both passes against Separable's: 1.06-1.11x from 64x64x48 to 160x192x144
// at R 2 and 4, 1.20-1.23x at 32x32x24; ScratchTiled's transpose was 0.90-0.98x from 120x120x90 up), on host back ends
// Separable (against Recompute: 10 full-resolution iterations on Kokkos Serial 3.8 -> 2.7 s).
template <class Exec>
std::array<LnccVariant, 2> lnccVariantsFor(int radius);
// Whether each pass's Reuse ring fits the back end's team scratch at this radius.
template <class Exec>
std::array<bool, 2> lnccReuseFits(int radius);

// F = G grad W of the LNCC metric with window radius `radius` (1..kMaxLnccRadius) into f; `terms`
// is the workspace (lnccWorkspaceComponents(variants) x the grid); the passes' variants as given, Reuse's slabs `slabZ` slices
// deep (1..16; 0: as deep as the grid allows while a device gets a wave of teams). With `energy`,
// E = sum_x cc(x) is stored there (a fence); without, the passes are only enqueued on `exec`. Throws
// InvalidArgument on extents, overlap, a radius out of range or a tile that does not fit the back
// end's team scratch.
template <class Exec>
void lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
               ConstImageView<typename Exec::memory_space> fixed, int radius,
               LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f,
               std::array<LnccVariant, 2> variants, double* energy, int slabZ = 0);

// The same with lnccVariantsFor's variants; returns the energy (fences).
template <class Exec>
double lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, int radius,
                 LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f);

// The same with its own workspace.
template <class Exec>
double lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, int radius, Field<typename Exec::memory_space> f);

}  // namespace kortex::gpu
