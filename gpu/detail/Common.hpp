// Helpers shared by the Kokkos implementations in gpu/: extent checks and dimension inference.
// (No Eigen, no OpenMP pragmas, no VTK in gpu/ headers.)
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/ViewChecks.hpp"

namespace kortex::gpu {

// Load through the read-only data cache: __ldg on CUDA devices (global memory only, data not
// written during the kernel), a plain load elsewhere.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION T readOnly(const T* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

// `policy` with Kokkos' HintLightWeight. On CUDA a kernel's closure (functor, reducer and policy) of 512 B
// or more is otherwise copied to constant memory under a lock, with an event synchronisation, at every
// launch; with the hint it goes as a kernel parameter up to 4 KB. The kernel is otherwise the same. Host
// back ends ignore the hint.
template <class Policy>
auto lightWeight(Policy const& policy) {
  return Kokkos::Experimental::require(policy, Kokkos::Experimental::WorkItemProperty::HintLightWeight);
}

// Throws InvalidArgument unless `in` and `out` are allocated, non-empty, have equal extents
// and do not alias.
template <class InView, class OutView>
void checkSameExtents(InView const& in, OutView const& out, const char* what) {
  if (in.data() == nullptr || out.data() == nullptr)
    throw InvalidArgument(std::string(what) + ": input or output view is not allocated");
  for (int r = 0; r < 3; ++r)
    if (in.extent(r) != out.extent(r))
      throw InvalidArgument(std::string(what) + ": input extents (" + std::to_string(in.extent(0)) +
                            "," + std::to_string(in.extent(1)) + "," + std::to_string(in.extent(2)) +
                            ") differ from output extents (" + std::to_string(out.extent(0)) + "," +
                            std::to_string(out.extent(1)) + "," + std::to_string(out.extent(2)) + ")");
  if (in.size() == 0) throw InvalidArgument(std::string(what) + ": image is empty");
  if (spansOverlap(in, out))
    throw InvalidArgument(std::string(what) + ": input and output views must not overlap");
}

// A window radius the kernels can size their scratch and taps for (parameters themselves are
// validated where a job enters the pipeline; this guards memory, not meaning).
inline void requireRadius(const char* what, int radius, int maxRadius) {
  if (radius < 0 || radius > maxRadius)
    throw InvalidArgument(std::string(what) + ": radius " + std::to_string(radius) + " outside [0, " +
                          std::to_string(maxRadius) + "]");
}

// Views are (nz, ny, nx); nz == 1 means a 2D image.
template <class View>
int imageDimension(View const& v) {
  return v.extent(0) == 1 ? 2 : 3;
}

// Adapts a functor f(z, y, x) to a flat RangePolicy index i = (z ny + y) nx + x (x fastest, so
// consecutive work items touch consecutive addresses of LayoutRight views). 32-bit indices: a
// 64-bit division costs ~5x a 32-bit one on GPUs, and these kernels do little else per voxel.
template <class F>
struct Flat3 {
  F f;
  int ny, nx;
  KOKKOS_INLINE_FUNCTION void operator()(int i) const {
    const int row = i / nx;
    f(row / ny, row % ny, i - row * nx);
  }
};

template <class Exec, class F>
void parallelForVoxels(std::string const& label, Exec const& exec, int nz, int ny, int nx, F const& f) {
  const long n = long(nz) * ny * nx;
  if (n > 2147483647L) throw InvalidArgument(label + ": more than 2^31 - 1 voxels");
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, int(n)), Flat3<F>{f, ny, nx});
}

// ---- reductions over voxels whose work runs in index order --------------------------------------
// Kokkos' RangePolicy reduction on CUDA launches one wave of blocks, each sweeping its own contiguous
// 1/gridDim of the range (1056 blocks of 256 threads on an H200). At any moment the work in flight is
// spread over the whole volume, so a stencil's neighbour one z-plane away, read by another block at
// another time, comes from DRAM once more: Nsight Compute put the TwoPass stress pass at 990 MB of
// DRAM traffic for 663 MB of data at 240^3, the difference being u's z neighbours. reduceVoxels gives
// each team kReduceTeamSize x kReduceItemsPerThread consecutive items instead (team t the t-th tile, so
// the teams in flight cover one contiguous stretch and a plane's neighbours are still in L2). Host spaces
// keep the RangePolicy: each thread there already owns one contiguous chunk, and their reduction order
// (the bits of a floating-point sum) stays what it was.
// F: operator()(int i, value_type&) with value_type, init and join (the functor form of a reduction).
inline constexpr int kReduceTeamSize = 256;
inline constexpr int kReduceItemsPerThread = 4;

template <class Exec, class F>
struct InOrderTiles {
  using member_type = typename Kokkos::TeamPolicy<Exec>::member_type;
  using value_type = typename F::value_type;
  F f;
  int n;
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const { f.init(v); }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& dst, const KORTEX_JOIN_VOLATILE value_type& src) const {
    f.join(dst, src);
  }
  KOKKOS_INLINE_FUNCTION void operator()(member_type const& team, value_type& acc) const {
    const int ts = team.team_size();
    int i = team.league_rank() * ts * kReduceItemsPerThread + team.team_rank();
    for (int k = 0; k < kReduceItemsPerThread && i < n; ++k, i += ts) f(i, acc);
  }
};

// The device launch of reduceVoxels over n items (benchmarks query its resources).
template <class Exec>
Kokkos::TeamPolicy<Exec> inOrderPolicy(Exec const& exec, int n) {
  constexpr int tile = kReduceTeamSize * kReduceItemsPerThread;
  return Kokkos::TeamPolicy<Exec>(exec, n / tile + (n % tile != 0 ? 1 : 0), kReduceTeamSize);
}

template <class Exec, class F>
void reduceVoxels(std::string const& label, Exec const& exec, int n, F const& f, typename F::value_type& result) {
  if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible)
    Kokkos::parallel_reduce(label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, n), f, result);
  else  // lightWeight: the fused z + rate kernel's closure crosses 512 B
    Kokkos::parallel_reduce(label, lightWeight(inOrderPolicy(exec, n)), InOrderTiles<Exec, F>{f, n}, result);
}

}  // namespace kortex::gpu
