// Layer bilateral filter of the multiresolution filter (definitions: core/Multires.hpp, "BF"),
// one 2D layer in, one out, on any Kokkos execution space. Variants (MultiresParams::bilateral):
//   float layers:   Naive, ClosenessLut, FastMath, Reuse
//   integer layers: ClosenessSimilarityLut (fixed-point tables, exact integer result)
// One team per output tile of tile.x * tile.y pixels (TeamPolicy); the closeness table (and the
// similarity table when it fits) is loaded into team scratch, then team_barrier(). The tile is
// the tuned parameter (`kortex tune --kernel multires.bilateral`). Calls enqueue on `exec`, no
// fence; extents are checked first (InvalidArgument). Explicitly instantiated for every enabled
// execution space in gpu/multires/MultiresBilateral.cpp.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <vector>

#include "core/Multires.hpp"

namespace kortex::gpu::multires_detail {

struct LayerTile {
  int x = 0, y = 0;  // outputs per team; 0: kDefaultBilateralTile
};
// Documented default when neither the params nor the tuning database give a tile.
inline constexpr LayerTile kDefaultBilateralTile{32, 8};

template <class Mem>
using ConstLayer = Kokkos::View<const float**, Kokkos::LayoutRight, Mem>;
template <class Mem>
using ConstIntLayer = Kokkos::View<const std::int16_t**, Kokkos::LayoutRight, Mem>;
template <class Mem>
using ConstTable = Kokkos::View<const std::int32_t*, Mem>;
template <class Mem>
using ConstFloatTable = Kokkos::View<const float*, Mem>;

// Float layer; `closeness` holds multiresCloseness(radius, sigmaSpatial) on the device (used by
// ClosenessLut; the other variants ignore it). Returns the tile used.
template <class ExecSpace>
LayerTile bilateralLayer(ExecSpace const& exec, ConstLayer<typename ExecSpace::memory_space> in,
                         LayerView<typename ExecSpace::memory_space> out,
                         ConstFloatTable<typename ExecSpace::memory_space> closeness,
                         MultiresParams const& params, LayerTile tile);

// Float layers in[b] -> out[b] (equal counts), Reuse only (else InvalidArgument): each layer exactly as
// bilateralLayer filters it (the same tile, the same bits), up to kMaxBatchLayers layers per launch
// (one league holding every layer's tiles, in[0]'s first: the small layers of a pyramid fill the
// device beside the large one instead of each taking a launch of a few microseconds). Every layer
// is checked before anything is enqueued. Returns the tile used.
inline constexpr int kMaxBatchLayers = 8;
template <class ExecSpace>
LayerTile bilateralLayers(ExecSpace const& exec, std::vector<ConstLayer<typename ExecSpace::memory_space>> const& in,
                          std::vector<LayerView<typename ExecSpace::memory_space>> const& out,
                          MultiresParams const& params, LayerTile tile);

// Integer layer (ClosenessSimilarityLut): tables multiresClosenessQ / multiresSimilarityQ on the
// device. Returns the tile used.
template <class ExecSpace>
LayerTile bilateralLayer(ExecSpace const& exec, ConstIntLayer<typename ExecSpace::memory_space> in,
                         IntLayerView<typename ExecSpace::memory_space> out,
                         ConstTable<typename ExecSpace::memory_space> closenessQ,
                         ConstTable<typename ExecSpace::memory_space> similarityQ,
                         MultiresParams const& params, LayerTile tile);

}  // namespace kortex::gpu::multires_detail
