// Pyramid kernels of the Kokkos multiresolution filter (definitions: core/Multires.hpp):
// decompose (g_{k+1} = reduce(g_k), l_k = g_k - expand(g_{k+1})) and reconstruct
// (g'_k = l'_k + expand(g'_{k+1})), one level per call, in the variants of PyramidVariant.
// Kernels: gpu/multires/detail/MultiresPyramidKernels.hpp; explicit instantiations for every enabled execution
// space and the pipelines' value types: gpu/multires/MultiresPyramid.cpp. Used by MultiresPlan
// (gpu/multires/Multires.hpp) and by the benchmarks (expand operator: Unfused / FusedDirect /
// FusedExpand / Packed16). Calls enqueue on `exec`, no fence, after checking extents.
//
// Value types: float pipeline: every level float. Integer pipeline: layers int16 (g_k, l_k,
// g'_k; |values| <= 2^bits - 1 <= 32767), level 0 read from / written to the uint16 image.
//
//   Unfused      reduce kernel; expand as separate kernels: upsample (zero insertion into a
//                temporary of the fine size plus a 2-pixel margin holding the clamp-extended
//                coarse image, so the lowpass never clamps), lowpass (direct 5x5 binomial, one
//                thread per fine pixel: no second temporary for a separable pass), scale by 4
//                (in place; integer: the (T + 32) >> 6 rounding), then subtract (l = g - e) or
//                add (g' = l' + e). The paper's baseline; temporaries come from the plan.
//   FusedDirect  reduce kernel (shared with Unfused and FusedExpand: fusing it with the expand of
//                the same level, which reads g_{k+1} around each pixel, needs a tile: FusedReduce); one
//                expand kernel per level: one thread per coarse pixel reads its clamped 3x3
//                neighbourhood from global memory and writes its 2x2 fine outputs straight to
//                global memory (pairs of stride-2 stores).
//   FusedExpand  reduce kernel as above; one team per tile of tile.x * tile.y coarse pixels:
//                (1) the coarse tile plus a 1-pixel halo, clamp rule applied at the load, into
//                team scratch; (2) barrier; one work item per coarse pixel computes its 2x2 fine
//                outputs (multiresExpandQuad) and stages them in scratch; (3) barrier; the
//                2 tile.x x 2 tile.y fine block is written back row by row (consecutive work
//                items = consecutive fine pixels: coalesced reads of g_k / l'_k and coalesced
//                writes). Staging layout: four parity planes q[a][b] (fine row parity a, column
//                parity b), each tile.x * tile.y words at a plane stride = 16 (mod 32) words, so
//                both the quad stores (consecutive coarse pixels) and the row-wise reads
//                (alternating column parity) are free of bank conflicts.
//   FusedReduce  decompose's reduce and expand-subtract in one kernel per level (decomposeLevel): a
//                team loads its fine tile with the reduce's apron into scratch, forms g_{k+1} on the
//                coarse tile and a 1-pixel apron (the apron twice, by both neighbouring tiles), writes
//                the tile's g_{k+1} and its l_k. reduceLevel, laplacianLevel and reconstructLevel alone
//                run FusedDirect's kernels.
//   Packed16     integer pipeline only: reduce, decompose and reconstruct with every level
//                treated as a flat row-major array of int16, so the pixel pairs (2q, 2q + 1) are
//                4-byte aligned whatever the row width: each work item writes one 32-bit word
//                (two pixels, possibly in two rows) and reads its pointwise operand (g_k or
//                l'_k) as one word; the stencil reads of the other level are 16-bit loads
//                through the read-only path. An odd pixel count ends with a single-pixel tail,
//                and a level-0 image starting 2 bytes into a word with a single-pixel head.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/Errors.hpp"
#include "core/Image.hpp"
#include "core/Multires.hpp"

namespace kortex::gpu::multires_detail {

template <class T, class Mem>
using Level = Kokkos::View<T**, Kokkos::LayoutRight, Mem>;
template <class T, class Mem>
using ConstLevel = Kokkos::View<const T**, Kokkos::LayoutRight, Mem>;

// Accumulator / staging type of a pipeline: float layers -> float, int16 layers -> int32.
template <class LayerT>
using PyramidAcc = std::conditional_t<std::is_same_v<LayerT, float>, float, std::int32_t>;

// FusedExpand: coarse pixels per team (x, y); 0 means kDefaultPyramidTile.
struct PyramidTile {
  int x = 0, y = 0;
};
// Documented default (not measured yet: `kortex tune --kernel multires.pyramid` replaces it per
// GPU): 32 coarse columns give 64-pixel fine rows (two full 128-byte lines per float row, a
// 32-thread warp per half row in the write pass), 8 coarse rows give 256 quads and 1,024 fine
// outputs per team, 9.6 KB of scratch (several teams per SM on CUDA; fits Serial's 32 KiB).
inline constexpr PyramidTile kDefaultPyramidTile{32, 8};
// Largest tile extent accepted (a bound on the league arithmetic, not a performance choice).
inline constexpr int kMaxPyramidTileExtent = 1024;

// Words of one staging plane: the smallest count >= x * y that is 16 (mod 32) (see above).
inline int stagingPlaneStride(PyramidTile t) {
  const int n = t.x * t.y;
  return n + ((16 - n % 32) + 32) % 32;
}
// Level-0 scratch one FusedExpand team requests (4-byte words: the coarse tile with its halo,
// then the four staging planes; +16 B so the 16-byte aligned block always fits).
inline std::size_t pyramidScratchBytes(PyramidTile t) {
  const std::size_t halo = static_cast<std::size_t>(t.x + 2) * static_cast<std::size_t>(t.y + 2);
  const std::size_t haloBytes = ((halo * 4 + 15) / 16) * 16;
  return haloBytes + 4 * static_cast<std::size_t>(stagingPlaneStride(t)) * 4 + 16;
}
// Scratch one team of ExecSpace may request (scratch_size_max(0) of the FusedExpand policy).
template <class ExecSpace>
std::size_t pyramidScratchMax();
inline std::string describe(PyramidTile t) { return std::to_string(t.x) + "x" + std::to_string(t.y); }
// Throws InvalidArgument unless the tile has extents in [1, kMaxPyramidTileExtent] and its
// scratch fits in maxScratchBytes.
inline void checkPyramidTile(PyramidTile t, std::size_t maxScratchBytes) {
  if (t.x < 1 || t.y < 1 || t.x > kMaxPyramidTileExtent || t.y > kMaxPyramidTileExtent)
    throw InvalidArgument("multires: pyramid tile " + describe(t) + " must have extents in [1, " +
                          std::to_string(kMaxPyramidTileExtent) + "]");
  if (pyramidScratchBytes(t) > maxScratchBytes)
    throw InvalidArgument("multires: pyramid tile " + describe(t) + " needs " +
                          std::to_string(pyramidScratchBytes(t)) +
                          " B of team scratch, more than the " + std::to_string(maxScratchBytes) +
                          " B this execution space offers; use a smaller tile");
}

// Unfused temporaries, sized once for the finest level (each level uses their leading part):
// `upsampled` (ny + 4) * (nx + 4) layer values, `lowpass` ny * nx accumulators.
template <class LayerT, class Mem>
struct UnfusedBuffers {
  Kokkos::View<LayerT*, Mem> upsampled;
  Kokkos::View<PyramidAcc<LayerT>*, Mem> lowpass;
};
template <class LayerT, class Mem>
UnfusedBuffers<LayerT, Mem> allocateUnfusedBuffers(Index nx, Index ny) {
  UnfusedBuffers<LayerT, Mem> b;
  b.upsampled = Kokkos::View<LayerT*, Mem>(
      Kokkos::view_alloc(std::string("kortex::Multires::Unfused::upsampled"), Kokkos::WithoutInitializing),
      static_cast<std::size_t>((nx + 4) * (ny + 4)));
  b.lowpass = Kokkos::View<PyramidAcc<LayerT>*, Mem>(
      Kokkos::view_alloc(std::string("kortex::Multires::Unfused::lowpass"), Kokkos::WithoutInitializing),
      static_cast<std::size_t>(nx * ny));
  return b;
}

struct PyramidConfig {
  PyramidVariant variant = PyramidVariant::FusedExpand;
  PyramidTile tile = kDefaultPyramidTile;  // FusedExpand (checked by checkPyramidTile)
  int maxValue = 0;  // integer pipeline: 2^bits - 1, the reconstruct clamp; float: unused
};

// g_{k+1} = reduce(g_k): `coarse` has extents (ceil(ny/2), ceil(nx/2)) of fine's (ny, nx).
// FineT: float (float pipeline), std::uint16_t (integer, level 0) or std::int16_t (integer).
template <class ExecSpace, class FineT, class LayerT>
void reduceLevel(ExecSpace const& exec, ConstLevel<FineT, typename ExecSpace::memory_space> fine,
                 Level<LayerT, typename ExecSpace::memory_space> coarse, PyramidConfig const& cfg);

// l_k = g_k - expand(g_{k+1}): `laplacian` has fine's extents. `tmp` is used by Unfused only.
template <class ExecSpace, class FineT, class LayerT>
void laplacianLevel(ExecSpace const& exec, ConstLevel<FineT, typename ExecSpace::memory_space> fine,
                    ConstLevel<LayerT, typename ExecSpace::memory_space> coarse,
                    Level<LayerT, typename ExecSpace::memory_space> laplacian, PyramidConfig const& cfg,
                    UnfusedBuffers<LayerT, typename ExecSpace::memory_space> const& tmp);

// Both steps of decompose for one level: FusedReduce in one kernel (its scratch tile checked against
// the backend's limit: Unsupported), every other variant reduceLevel then laplacianLevel.
template <class ExecSpace, class FineT, class LayerT>
void decomposeLevel(ExecSpace const& exec, ConstLevel<FineT, typename ExecSpace::memory_space> fine,
                    Level<LayerT, typename ExecSpace::memory_space> coarse,
                    Level<LayerT, typename ExecSpace::memory_space> laplacian, PyramidConfig const& cfg,
                    UnfusedBuffers<LayerT, typename ExecSpace::memory_space> const& tmp);

// g'_k = l'_k + expand(g'_{k+1}) (integer: clamped to [0, cfg.maxValue]): `out` has the
// extents of `laplacian`. OutT: the layer type, or std::uint16_t for level 0 (integer).
template <class ExecSpace, class LayerT, class OutT>
void reconstructLevel(ExecSpace const& exec, ConstLevel<LayerT, typename ExecSpace::memory_space> laplacian,
                      ConstLevel<LayerT, typename ExecSpace::memory_space> coarse,
                      Level<OutT, typename ExecSpace::memory_space> out, PyramidConfig const& cfg,
                      UnfusedBuffers<LayerT, typename ExecSpace::memory_space> const& tmp);

// Largest value of a 16-bit image (device max-reduction, "kortex::Multires::maxValue"). The
// result comes back to the host: waits for `exec`.
template <class ExecSpace>
std::uint32_t maxValue(ExecSpace const& exec, ConstU16ImageView<typename ExecSpace::memory_space> in);

}  // namespace kortex::gpu::multires_detail
