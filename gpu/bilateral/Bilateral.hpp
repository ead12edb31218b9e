// Kokkos bilateral filter (definition: core/Bilateral.hpp). Variants, chosen by
// BilateralParams::variant:
//   Naive        - RangePolicy, one output voxel per thread, global reads, exp for both factors.
//   ScratchTiled - TeamPolicy; the apron (tile + 2r per filtered axis) is loaded cooperatively
//                  into level-0 team scratch with the clamp rule applied during the load; the
//                  spatial Gaussian is precomputed once into a LUT in scratch; the range factor
//                  is exact. The tile is sized from scratchBytes() and checked against
//                  scratch_size_max(0).
// The call enqueues work on `exec` and returns (no fence). Explicitly instantiated for every
// enabled execution space in gpu/bilateral/Bilateral.cpp.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Bilateral.hpp"
#include "core/Image.hpp"

namespace kortex::gpu {

template <class ExecSpace>
void bilateral(ExecSpace const& exec,
               ConstImageView<typename ExecSpace::memory_space> in,
               ImageView<typename ExecSpace::memory_space> out,
               BilateralParams const& params);

}  // namespace kortex::gpu
