// Kokkos non-local means (definition: core/Nlm.hpp). Variants, chosen by NlmParams::variant:
//   Naive        - RangePolicy, one output voxel per thread, patch distances from global memory.
//   ScratchTiled - TeamPolicy; the apron (tile + 2R + 2r per filtered axis) is prefetched
//                  cooperatively into level-0 team scratch with the clamp rule applied during the
//                  load; distances computed from scratch.
//   BoxSum       - TeamPolicy; for each search offset the squared differences over the tile
//                  (+ patch halo) are box-summed inside team scratch (running sums), so the cost
//                  per voxel does not grow with the patch size. Same weights as Naive up to float
//                  rounding; never allocates an image-sized buffer per offset.
// Device memory: no variant allocates more than input + output (+ small tables).
// The call enqueues work on `exec` and returns (no fence). Explicitly instantiated for every
// enabled execution space in gpu/nlm/Nlm.cpp.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Image.hpp"
#include "core/Nlm.hpp"

namespace kortex::gpu {

template <class ExecSpace>
void nlm(ExecSpace const& exec,
         ConstImageView<typename ExecSpace::memory_space> in,
         ImageView<typename ExecSpace::memory_space> out,
         NlmParams const& params);

}  // namespace kortex::gpu
