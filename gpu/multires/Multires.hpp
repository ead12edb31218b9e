// Kokkos multiresolution filter (definitions: core/Multires.hpp). Variants are chosen by
// MultiresParams::pyramid (Unfused | FusedDirect | FusedExpand | Packed16 | FusedReduce) and
// MultiresParams::bilateral (Naive | ClosenessLut | ClosenessSimilarityLut | FastMath | Reuse); tiles
// come from MultiresParams::tiles, else the tuning database (core/Tuning.hpp), else the
// documented defaults. Every check runs before anything is written (the integer input's range
// check is a device max-reduction that waits for `exec`): a refused call leaves `out` untouched.
// The one-shot calls fence `exec` before returning (they free their pyramid); MultiresPlan
// enqueues on `exec` without fencing, except that concurrent level filtering
// (params.concurrentLevels on a Kokkos 4 device backend) fences `exec` before and its own
// instances after filterLayers (gpu/multires/detail/MultiresDriver.hpp). Explicitly instantiated for every enabled
// execution space in gpu/multires/Multires.cpp.
#pragma once

#include <Kokkos_Core.hpp>

#include <memory>

#include "core/Image.hpp"
#include "core/Multires.hpp"

namespace kortex::gpu {

// Float pipeline: in/out extents (1, ny, nx).
template <class ExecSpace>
void multires(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
              ImageView<typename ExecSpace::memory_space> out, MultiresParams const& params);

// Integer pipeline (16-bit input, `bits`-bit data): in/out extents (1, ny, nx).
template <class ExecSpace>
void multires(ExecSpace const& exec, ConstU16ImageView<typename ExecSpace::memory_space> in,
              U16ImageView<typename ExecSpace::memory_space> out, MultiresParams const& params);

// Where a plan filters the float layers (the integer pipeline, and every other layer bilateral, always
// Separate):
//   Separate      - filterLayers filters every layer (the Reuse bilateral: all of them in one launch) into
//                   the plan's filtered layers; reconstruct reads them.
//   InReconstruct - filterLayers filters g_L only; reconstruct filters each l_k where it expands
//                   (gpu/multires/detail/MultiresFilterReconstruct.hpp): the filtered layers are never
//                   stored. The same bits as Separate.
//   Auto          - InReconstruct where it applies (float layers, the Reuse bilateral, the FusedDirect or
//                   FusedReduce pyramid, layers filtered in order on one instance), else Separate.
enum class FilterSchedule { Auto, Separate, InReconstruct };

// Reusable plan: allocates the pyramid once for one image size and parameter set, so repeated
// frames (benchmarks, video) do not allocate. Phases are exposed for the benchmarks (with
// InReconstruct the layer filtering is part of reconstruct).
template <class ExecSpace, class T>  // T = float (float pipeline) or std::uint16_t (integer)
class MultiresPlan {
 public:
  using memory_space = typename ExecSpace::memory_space;
  using in_view = Kokkos::View<const T***, Kokkos::LayoutRight, memory_space>;
  using out_view = Kokkos::View<T***, Kokkos::LayoutRight, memory_space>;

  MultiresPlan(ExecSpace const& exec, Index nx, Index ny, MultiresParams const& params,
               FilterSchedule schedule = FilterSchedule::Auto);
  ~MultiresPlan();
  MultiresPlan(MultiresPlan&&) noexcept;
  MultiresPlan& operator=(MultiresPlan&&) noexcept;

  void run(in_view in, out_view out);  // decompose + filterLayers + reconstruct
  void decompose(in_view in);          // g_0 .. g_L, l_0 .. l_{L-1}
  void filterLayers();                 // l'_k, g'_L (InReconstruct: g'_L only)
  void reconstruct(out_view out);      // g'_0 -> out (InReconstruct: forms each l'_k as it expands it)
  MultiresParams const& params() const;
  FilterSchedule schedule() const;  // the resolved schedule (never Auto)
  // The tiles in use (resolved from params / tuning database / defaults; 0 for a kernel the
  // variants do not run: the pyramid tile is FusedExpand's, the bilateral tile needs filter).
  MultiresTiles tiles() const;
  // Device bytes held by the plan.
  std::size_t bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kortex::gpu
