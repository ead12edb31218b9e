// The Kokkos MI force of greedy registration (specification: core/Greedy.hpp "Metrics", Mi; the
// per-voxel maths: core/MutualInformation.hpp). Three kernels, no host round trip
// (gpu/greedy/detail/MiKernels.hpp):
//   histogram - the joint histogram of (fixed, W) over every voxel in fixed point (team scratch on
//               device back ends where bins^2 fits; the same bits in any order);
//   ratios    - one team: each column's sum, then L(i, k) = log(H(i, k) / sum_i H(i, k));
//   force     - F = (B - 4) h / N grad W per voxel.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "core/Image.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

template <class Mem>
struct MiWorkspace {
  Kokkos::View<unsigned long long*, Mem> hist;  // bins^2, row = fixed bin
  Kokkos::View<double*, Mem> logRatio;          // bins^2
  int bins = 0;
};

// Bytes of a workspace of `bins` bins.
std::int64_t miWorkspaceBytes(int bins);

template <class Exec>
MiWorkspace<typename Exec::memory_space> miWorkspace(Exec const& exec, int bins);

// F = dMI/dW grad W into f (enqueued on `exec`). InvalidArgument on extents, overlap or bins.
template <class Exec>
void miForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
             ConstImageView<typename Exec::memory_space> fixed, MiWorkspace<typename Exec::memory_space> const& work,
             Field<typename Exec::memory_space> f);

// The same with its own workspace; returns MI (from the histogram, on the host; fences).
template <class Exec>
double miForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
               ConstImageView<typename Exec::memory_space> fixed, int bins, Field<typename Exec::memory_space> f);

}  // namespace kortex::gpu
