// Kokkos non-local means: pieces shared by the three variants (gpu/nlm/detail/NlmNaive.hpp,
// gpu/nlm/detail/NlmScratchTiled.hpp, gpu/nlm/detail/NlmBoxSum.hpp). The per-voxel maths (nlmWeight,
// squaredDifference, nlmLog2Coefficient) come from core/Nlm.hpp; policies, scratch and tiling
// live here. Not a public header: include "gpu/nlm/Nlm.hpp" to call the filter.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <string>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/Timing.hpp"
#include "core/Errors.hpp"
#include "core/Image.hpp"
#include "core/Nlm.hpp"


namespace kortex::gpu::nlm_detail {

// Input seen by the kernels: read-only, random access (the read-only/texture path on CUDA).
template <class MemorySpace>
using InputView = Kokkos::View<const float***, Kokkos::LayoutRight, MemorySpace,
                               Kokkos::MemoryTraits<Kokkos::RandomAccess>>;

// Image extents and the radii actually used along each axis (z radii are 0 for a 2D image).
struct Problem {
  int nx = 1, ny = 1, nz = 1;
  int dim = 2;
  int r = 0, R = 0;    // patch / search radius in x and y
  int rz = 0, Rz = 0;  // the same along z: r and R in 3D, 0 in 2D
  float log2Coefficient = -1.0f;
};

template <class View>
Problem makeProblem(View const& in, NlmParams const& p) {
  Problem pb;
  pb.nz = static_cast<int>(in.extent(0));
  pb.ny = static_cast<int>(in.extent(1));
  pb.nx = static_cast<int>(in.extent(2));
  pb.dim = pb.nz == 1 ? 2 : 3;
  pb.r = p.patchRadius;
  pb.R = p.searchRadius;
  pb.rz = pb.dim == 3 ? p.patchRadius : 0;
  pb.Rz = pb.dim == 3 ? p.searchRadius : 0;
  pb.log2Coefficient = nlmLog2Coefficient(p, pb.dim);
  return pb;
}

// Accumulation precision, shared by every variant. The output is
//   out(x) = I(x) + sum_o w (I(x+o) - I(x)) / sum_o w,
// algebraically the definition; the centred terms are small where the weights are large, and a
// constant image, h -> 0 and R = 0 give exactly I(x). Terms are summed in float over short runs
// of offsets (one row of o_x in Naive/ScratchTiled, one batch in BoxSum) and the runs are added
// in double: with thousands of offsets (3D, R >= 5), plain float sums drift by >1e-5 of the peak.
KOKKOS_INLINE_FUNCTION float nlmNormalise(float centre, double sumW, double sumWI) {
  return static_cast<float>(static_cast<double>(centre) + sumWI / sumW);
}

// i / n for 0 <= i < 2^21 without an integer division (~20 instructions on GPUs): with
// inv = 1/n in float, (i + 0.5) * inv lies at least 0.5/n from an integer while its rounding
// error is below i * 2^-23 / n, so truncation gives the exact quotient (checked exhaustively for
// n <= 700, sampled up to 70000). Work-item indices of the team passes stay far below 2^21.
struct FastDivisor {
  int n = 1;
  float inv = 1.0f;
  FastDivisor() = default;
  explicit FastDivisor(int d) : n(d), inv(1.0f / static_cast<float>(d)) {}
  KOKKOS_INLINE_FUNCTION int div(int i) const {
    return static_cast<int>((static_cast<float>(i) + 0.5f) * inv);
  }
};
inline constexpr int kFastDivisorLimit = 1 << 21;


// Bytes of level-0 scratch for `n` floats as Kokkos lays it out (alignment included).
template <class ExecSpace>
std::size_t scratchFloatBytes(std::size_t n) {
  using ScratchView = Kokkos::View<float*, typename ExecSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return ScratchView::shmem_size(n);
}

// Team size for a team kernel: what the backend recommends for this functor and scratch
// footprint, capped at `preferred` (the number of work items a pass offers per team).
// Kokkos 3.4 Serial always answers 1.
template <class Policy, class Functor>
int chooseTeamSize(Policy const& policy, Functor const& f, int preferred) {
  const int rec = policy.team_size_recommended(f, Kokkos::ParallelForTag());
  return std::max(1, std::min(rec, preferred));
}

}  // namespace kortex::gpu::nlm_detail
