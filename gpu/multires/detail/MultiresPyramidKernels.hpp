// Kernels of the multiresolution pyramid (design and variants: gpu/multires/MultiresPyramid.hpp; per-pixel
// maths: core/Multires.hpp, "pyramid kernels" block). Internal header: included by
// gpu/multires/MultiresPyramid.cpp (explicit instantiations) and by benchmarks that launch one kernel.
// No Eigen, no OpenMP pragmas, no VTK here.
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Multires.hpp"
#include "gpu/multires/MultiresPyramid.hpp"

namespace kortex::gpu::multires_detail {

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "Packed16 stores pixel 2q in the low half of a 32-bit word (little endian)");
#endif

// Read-only levels read around a pixel (stencils): the read-only / texture path on CUDA.
template <class T, class Mem>
using StencilLevel =
    Kokkos::View<const T**, Kokkos::LayoutRight, Mem, Kokkos::MemoryTraits<Kokkos::RandomAccess>>;
template <class T, class Mem>
using UnmanagedLevel =
    Kokkos::View<T**, Kokkos::LayoutRight, Mem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// FusedExpand team policy: team size Kokkos::AUTO (1 on Kokkos 3.4 Serial), at most 256 threads
// (one per quad of the default 32x8 tile).
template <class ExecSpace>
using PyramidPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::LaunchBounds<256, 1>>;

template <class ExecSpace>
std::size_t pyramidScratchMax() {
  return kx::scratchSizeMax<PyramidPolicy<ExecSpace>>(0);
}

// ---- shared pieces --------------------------------------------------------------------------

constexpr int ceilHalf(int n) { return (n + 1) / 2; }

// One output of the expand kernels: decompose l = g - e; reconstruct g' = l' + e (integer:
// clamped to [0, maxValue]). `e` is the expand value (float, or the rounded integer).
template <class OutT, bool Reconstruct, class PointT, class AccT>
KOKKOS_INLINE_FUNCTION OutT combine(PointT point, AccT e, int maxValue) {
  if constexpr (std::is_same_v<AccT, float>) {
    (void)maxValue;
    return Reconstruct ? static_cast<float>(point) + e : static_cast<float>(point) - e;
  } else {
    const int p = static_cast<int>(point);
    return static_cast<OutT>(Reconstruct ? multiresClampValue(p + e, maxValue) : p - e);
  }
}

// 32-bit word access of Packed16 (the pointer is 4-byte aligned). Device: one 32-bit load or
// store; host: memcpy (one move, and no type punning through a cast pointer).
KOKKOS_INLINE_FUNCTION std::uint32_t loadWord(const void* p) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return *static_cast<const std::uint32_t*>(p);
#else
  std::uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
#endif
}
KOKKOS_INLINE_FUNCTION void storeWord(void* p, std::uint32_t w) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  *static_cast<std::uint32_t*>(p) = w;
#else
  std::memcpy(p, &w, sizeof w);
#endif
}
// Pixel 2q in the low half, 2q + 1 in the high half (little endian: memory order).
template <class T>
KOKKOS_INLINE_FUNCTION std::uint32_t packPair(T lo, T hi) {
  return static_cast<std::uint32_t>(static_cast<std::uint16_t>(lo)) |
         (static_cast<std::uint32_t>(static_cast<std::uint16_t>(hi)) << 16);
}
template <class T>
KOKKOS_INLINE_FUNCTION T lowHalf(std::uint32_t w) {
  return static_cast<T>(static_cast<std::uint16_t>(w & 0xffffu));
}
template <class T>
KOKKOS_INLINE_FUNCTION T highHalf(std::uint32_t w) {
  return static_cast<T>(static_cast<std::uint16_t>(w >> 16));
}
// 1 when a 16-bit array starts 2 bytes into a 32-bit word (its pixel 0 is then a single head).
inline int packedHead(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 3u) != 0 ? 1 : 0;
}

template <class View>
void checkExtents2(View const& v, Index ny, Index nx, const char* what) {
  if (static_cast<Index>(v.extent(0)) != ny || static_cast<Index>(v.extent(1)) != nx)
    throw InvalidArgument(std::string("multires pyramid: ") + what + " has extents (" +
                          std::to_string(v.extent(0)) + ", " + std::to_string(v.extent(1)) +
                          "), expected (" + std::to_string(ny) + ", " + std::to_string(nx) + ")");
}

// The 2x2 fine outputs of coarse pixel (i, j) (FusedDirect, FusedReduce): its 3x3 neighbourhood at
// clamped coarse indices from coarseAt(row, col), multiresExpandQuad, then out(y, x) = combine(pointAt(y, x),
// e) on the fine pixels inside the level.
template <class Acc, class OutT, bool Reconstruct, class CoarseAt, class PointAt, class OutLevel>
KOKKOS_INLINE_FUNCTION void expandQuadAt(int i, int j, int my, int mx, int ny, int nx, int maxValue,
                                         CoarseAt const& coarseAt, PointAt const& pointAt, OutLevel const& out) {
  Acc nb[3][3], q[2][2];
  for (int r = 0; r < 3; ++r) {
    const int yy = clampIndex(i - 1 + r, my);
    for (int c = 0; c < 3; ++c) nb[r][c] = coarseAt(yy, clampIndex(j - 1 + c, mx));
  }
  if constexpr (std::is_same_v<Acc, float>)
    multiresExpandQuad(nb, q);
  else
    multiresExpandQuadQ(nb, q);
  for (int a = 0; a < 2; ++a) {
    const int y = 2 * i + a;
    if (y >= ny) break;
    for (int b = 0; b < 2; ++b) {
      const int x = 2 * j + b;
      if (x < nx) out(y, x) = combine<OutT, Reconstruct>(pointAt(y, x), q[a][b], maxValue);
    }
  }
}

// ---- reduce (Unfused, FusedDirect, FusedExpand) ------------------------------------------------

// One work item per coarse pixel, x fastest. I: the flat index type (int where the level allows it:
// a 64-bit division costs several times a 32-bit one on GPUs).
template <class Mem, class FineT, class LayerT, class I = std::int64_t>
struct ReduceFunctor {
  StencilLevel<FineT, Mem> fine;
  Level<LayerT, Mem> coarse;
  int ny, nx, mx;

  KOKKOS_INLINE_FUNCTION void operator()(const I n) const {
    const int i = static_cast<int>(n / mx);
    const int j = static_cast<int>(n - static_cast<I>(i) * mx);
    if constexpr (std::is_same_v<LayerT, float>)
      coarse(i, j) = multiresReduceAt(fine, i, j, ny, nx);
    else
      coarse(i, j) = static_cast<LayerT>(multiresReduceAtQ(fine, i, j, ny, nx));
  }
};

// ---- Unfused: upsample, lowpass, scale, subtract / add ----------------------------------------

template <class Mem, class LayerT>
struct UpsampleFunctor {
  StencilLevel<LayerT, Mem> coarse;
  UnmanagedLevel<LayerT, Mem> up;  // (ny + 4, nx + 4)
  int my, mx, upNx;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const int Y = static_cast<int>(n / upNx);
    const int X = static_cast<int>(n - static_cast<std::int64_t>(Y) * upNx);
    up(Y, X) = multiresUpsampleAt(coarse, Y, X, my, mx);
  }
};

template <class Mem, class LayerT>
struct LowpassFunctor {
  using Acc = PyramidAcc<LayerT>;
  StencilLevel<LayerT, Mem> up;
  UnmanagedLevel<Acc, Mem> lowpass;  // (ny, nx)
  int nx;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const int y = static_cast<int>(n / nx);
    const int x = static_cast<int>(n - static_cast<std::int64_t>(y) * nx);
    if constexpr (std::is_same_v<LayerT, float>)
      lowpass(y, x) = multiresLowpassAt(up, y, x);
    else
      lowpass(y, x) = multiresLowpassAtQ(up, y, x);
  }
};

template <class Mem, class Acc>
struct ScaleFunctor {
  Kokkos::View<Acc*, Mem, Kokkos::MemoryTraits<Kokkos::Unmanaged>> lowpass;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    if constexpr (std::is_same_v<Acc, float>)
      lowpass(n) = multiresScaleExpand(lowpass(n));
    else
      lowpass(n) = multiresScaleExpandQ(lowpass(n));
  }
};

// Subtract (decompose) or add (reconstruct): out = combine(point, expand).
template <class Mem, class PointT, class Acc, class OutT, bool Reconstruct>
struct CombineFunctor {
  ConstLevel<PointT, Mem> point;
  UnmanagedLevel<const Acc, Mem> expand;
  Level<OutT, Mem> out;
  int nx, maxValue;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const int y = static_cast<int>(n / nx);
    const int x = static_cast<int>(n - static_cast<std::int64_t>(y) * nx);
    out(y, x) = combine<OutT, Reconstruct>(point(y, x), expand(y, x), maxValue);
  }
};

// ---- FusedDirect -------------------------------------------------------------------------------

// One work item per coarse pixel (i, j): clamped 3x3 neighbourhood from global memory, 2x2 fine
// outputs written straight to global memory.
template <class Mem, class PointT, class LayerT, class OutT, bool Reconstruct, class I = std::int64_t>
struct FusedDirectFunctor {
  ConstLevel<PointT, Mem> point;
  StencilLevel<LayerT, Mem> coarse;
  Level<OutT, Mem> out;
  int ny, nx, my, mx, maxValue;

  KOKKOS_INLINE_FUNCTION void operator()(const I n) const {
    using Acc = PyramidAcc<LayerT>;
    const int i = static_cast<int>(n / mx);
    const int j = static_cast<int>(n - static_cast<I>(i) * mx);
    expandQuadAt<Acc, OutT, Reconstruct>(i, j, my, mx, ny, nx, maxValue,
                                         [&](int y, int x) { return static_cast<Acc>(coarse(y, x)); }, point, out);
  }
};

// ---- FusedExpand -------------------------------------------------------------------------------

// One team per tile of tx x ty coarse pixels (league index -> tile, x fastest). Scratch (4-byte
// words): halo[(ty + 2) * (tx + 2)] (coarse rows cj0 - 1 .. cj0 + ty, columns ci0 - 1 .. ci0 + tx,
// clamp rule applied at the load), then 4 staging planes q[a][b] at stride planeStride, quad of
// coarse pixel (lx, ly) at index ly * tx + lx of plane 2a + b.
template <class ExecSpace, class PointT, class LayerT, class OutT, bool Reconstruct>
struct FusedExpandFunctor {
  using Mem = typename ExecSpace::memory_space;
  using Member = typename PyramidPolicy<ExecSpace>::member_type;
  using Acc = PyramidAcc<LayerT>;

  ConstLevel<PointT, Mem> point;
  ConstLevel<LayerT, Mem> coarse;
  Level<OutT, Mem> out;
  int ny, nx, my, mx;
  int tx, ty, tilesX;
  int haloWords;    // 16-byte aligned start of the staging planes, in words
  int planeStride;  // words per staging plane
  int scratchBytes;
  int maxValue;

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int league = team.league_rank();
    const int ci0 = (league % tilesX) * tx;  // coarse column of the tile's first pixel
    const int cj0 = (league / tilesX) * ty;  // coarse row
    const int hw = tx + 2;
    Acc* const halo = static_cast<Acc*>(team.team_scratch(0).get_shmem_aligned(scratchBytes - 16, 16));
    Acc* const stage = halo + haloWords;

    // (1) coarse tile + halo, clamp rule at the load; consecutive items read consecutive x.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hw * (ty + 2)), [&](const int n) {
      const int hy = n / hw;
      const int hx = n - hy * hw;
      halo[n] = static_cast<Acc>(coarse(clampIndex(cj0 - 1 + hy, my), clampIndex(ci0 - 1 + hx, mx)));
    });
    team.team_barrier();

    // (2) one quad per coarse pixel of the tile, staged by parity.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tx * ty), [&](const int n) {
      const int ly = n / tx;
      const int lx = n - ly * tx;
      const Acc* const h = halo + ly * hw + lx;  // neighbourhood corner (-1, -1)
      Acc nb[3][3], q[2][2];
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) nb[r][c] = h[r * hw + c];
      if constexpr (std::is_same_v<Acc, float>)
        multiresExpandQuad(nb, q);
      else
        multiresExpandQuadQ(nb, q);
      stage[n] = q[0][0];
      stage[planeStride + n] = q[0][1];
      stage[2 * planeStride + n] = q[1][0];
      stage[3 * planeStride + n] = q[1][1];
    });
    team.team_barrier();

    // (3) the 2tx x 2ty fine block, row by row: coalesced reads of `point`, coalesced writes.
    const int fw = 2 * tx;
    const int fx0 = 2 * ci0, fy0 = 2 * cj0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, fw * 2 * ty), [&](const int n) {
      const int ly = n / fw;
      const int lx = n - ly * fw;
      const int y = fy0 + ly, x = fx0 + lx;
      if (y >= ny || x >= nx) return;
      const Acc e = stage[((ly & 1) * 2 + (lx & 1)) * planeStride + (ly >> 1) * tx + (lx >> 1)];
      out(y, x) = combine<OutT, Reconstruct>(point(y, x), e, maxValue);
    });
  }
};

// ---- Packed16 ----------------------------------------------------------------------------------

// Every level is a flat row-major array of `total` int16 (level 0: uint16) pixels. Work item 0
// is pixel 0 alone when the output starts 2 bytes into a word (head == 1); every other item
// covers the pair (p, p + 1), p = head + 2 (item - head), written as one 32-bit word, or the
// single last pixel when it has no partner (tail).

// expand (decompose l = g - e, or reconstruct g' = clamp(l' + e)): `point` read as one word when
// its alignment matches the output's (pairedPoint), else as two 16-bit loads.
template <class Mem, class PointT, class OutT, bool Reconstruct>
struct Packed16ExpandFunctor {
  const PointT* point;
  OutT* out;
  StencilLevel<std::int16_t, Mem> coarse;
  int nx, my, mx;
  int head, pairedPoint, maxValue;
  std::int64_t total;

  KOKKOS_INLINE_FUNCTION OutT valueAt(const std::int64_t p, const PointT v) const {
    const int y = static_cast<int>(p / nx);
    const int x = static_cast<int>(p - static_cast<std::int64_t>(y) * nx);
    const int e = multiresExpandAtQ(coarse, expandTaps(y, my), expandTaps(x, mx));
    return combine<OutT, Reconstruct>(v, e, maxValue);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    if (head != 0 && item == 0) {
      out[0] = valueAt(0, point[0]);
      return;
    }
    const std::int64_t p = head + 2 * (item - head);
    if (p + 1 >= total) {
      out[p] = valueAt(p, point[p]);
      return;
    }
    PointT a, b;
    if (pairedPoint != 0) {
      const std::uint32_t w = loadWord(point + p);
      a = lowHalf<PointT>(w);
      b = highHalf<PointT>(w);
    } else {
      a = point[p];
      b = point[p + 1];
    }
    storeWord(out + p, packPair(valueAt(p, a), valueAt(p + 1, b)));
  }
};

// reduce: pairs of coarse pixels, one word each; the fine level is read as a stencil.
template <class Mem, class FineT>
struct Packed16ReduceFunctor {
  StencilLevel<FineT, Mem> fine;
  std::int16_t* coarse;
  int ny, nx, mx;
  int head;
  std::int64_t total;

  KOKKOS_INLINE_FUNCTION std::int16_t valueAt(const std::int64_t p) const {
    const int i = static_cast<int>(p / mx);
    const int j = static_cast<int>(p - static_cast<std::int64_t>(i) * mx);
    return static_cast<std::int16_t>(multiresReduceAtQ(fine, i, j, ny, nx));
  }

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    if (head != 0 && item == 0) {
      coarse[0] = valueAt(0);
      return;
    }
    const std::int64_t p = head + 2 * (item - head);
    if (p + 1 >= total) {
      coarse[p] = valueAt(p);
      return;
    }
    storeWord(coarse + p, packPair(valueAt(p), valueAt(p + 1)));
  }
};

inline std::int64_t packedItems(std::int64_t total, int head) {
  return head + (total - head + 1) / 2;
}

template <class View>
void checkContiguous(View const& v, const char* what) {
  if (!v.span_is_contiguous())
    throw InvalidArgument(std::string("multires Packed16: ") + what +
                          " must be a contiguous (unpadded) view: pixels are addressed as one flat array");
}

// ---- FusedReduce: g_{k+1} and l_k in one kernel --------------------------------------------------

// A level held in team scratch, read by global (already clamped) pixel indices: the region's pixel
// (y0 + r, x0 + c) at p[r * pitch + c].
template <class T>
struct ScratchLevel {
  const T* p;
  int pitch, y0, x0;
  KOKKOS_INLINE_FUNCTION T operator()(int y, int x) const { return p[(y - y0) * pitch + (x - x0)]; }
};

// One team per tile of kFusedReduceTileX x kFusedReduceTileY coarse pixels (league index -> tile, x fastest):
// (1) fine rows and columns 2 c0 - 4 .. 2 (c0 + tile) + 2 of g_k (the reduce's 5-tap reach around the
//     coarse tile and its 1-pixel apron), clamp rule applied at the load, into scratch;
// (2) barrier; g_{k+1} at the clamped coarse indices of the tile and its apron from scratch
//     (multiresReduceAt, the reduce kernel's maths: the same values), the tile's written out;
// (3) barrier; per coarse pixel of the tile its 3x3 neighbourhood from (2), multiresExpandQuad and
//     l_k = g_k - e on its 2x2 fine pixels (FusedDirect's maths), g_k from scratch.
// The apron's coarse values are formed by both neighbouring tiles (the same operations): 1.6x the
// reduce's taps at the default tile, for one read of g_k and one launch fewer per level.
inline constexpr int kFusedReduceTileX = 32;
inline constexpr int kFusedReduceTileY = 8;  // 256 coarse pixels: one per thread of a 256-team

template <class ExecSpace, class FineT, class LayerT>
struct FusedReduceFunctor {
  using Mem = typename ExecSpace::memory_space;
  using Member = typename PyramidPolicy<ExecSpace>::member_type;
  using Acc = PyramidAcc<LayerT>;
  template <class T>
  using ScratchView = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr int TX = kFusedReduceTileX, TY = kFusedReduceTileY;
  static constexpr int FW = 2 * TX + 7, FH = 2 * TY + 7, FP = FW | 1;  // fine region (odd pitch)
  static constexpr int CW = TX + 2, CH = TY + 2;                       // coarse tile + apron

  ConstLevel<FineT, Mem> fine;
  Level<LayerT, Mem> coarse;
  Level<LayerT, Mem> laplacian;
  int ny, nx, my, mx, tilesX;

  static std::size_t scratchBytes() {
    return ScratchView<FineT>::shmem_size(static_cast<std::size_t>(FH) * FP) +
           ScratchView<Acc>::shmem_size(static_cast<std::size_t>(CH) * CW);
  }

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    ScratchView<FineT> F(team.team_scratch(0), static_cast<std::size_t>(FH) * FP);
    ScratchView<Acc> C(team.team_scratch(0), static_cast<std::size_t>(CH) * CW);
    const int league = team.league_rank();
    const int cx0 = (league % tilesX) * TX, cy0 = (league / tilesX) * TY;
    const int gy0 = 2 * cy0 - 4, gx0 = 2 * cx0 - 4;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, FH * FW), [&](const int i) {
      const int r = i / FW, c = i - r * FW;
      F(r * FP + c) = fine(clampIndex(gy0 + r, ny), clampIndex(gx0 + c, nx));
    });
    team.team_barrier();
    const ScratchLevel<FineT> g{F.data(), FP, gy0, gx0};
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, CH * CW), [&](const int i) {
      const int a = i / CW, b = i - a * CW;
      const int ci = cy0 - 1 + a, cj = cx0 - 1 + b;
      const int qi = clampIndex(ci, my), qj = clampIndex(cj, mx);
      LayerT v;
      if constexpr (std::is_same_v<LayerT, float>)
        v = multiresReduceAt(g, qi, qj, ny, nx);
      else
        v = static_cast<LayerT>(multiresReduceAtQ(g, qi, qj, ny, nx));
      C(a * CW + b) = static_cast<Acc>(v);
      if (a >= 1 && a <= TY && b >= 1 && b <= TX && ci < my && cj < mx) coarse(ci, cj) = v;
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, TY * TX), [&](const int i) {
      const int ly = i / TX, lx = i - ly * TX;
      const int ci = cy0 + ly, cj = cx0 + lx;
      if (ci >= my || cj >= mx) return;
      // C holds coarse pixel (cy0 - 1 + a, cx0 - 1 + b) at a * CW + b.
      expandQuadAt<Acc, LayerT, false>(ci, cj, my, mx, ny, nx, 0,
                                       [&](int y, int x) { return C((y - (cy0 - 1)) * CW + x - (cx0 - 1)); }, g,
                                       laplacian);
    });
  }
};

// ---- value check -------------------------------------------------------------------------------

template <class Mem>
struct MaxValueFunctor {
  ConstU16ImageView<Mem> in;
  int nx;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n, std::uint32_t& m) const {
    const int y = static_cast<int>(n / nx);
    const int x = static_cast<int>(n - static_cast<std::int64_t>(y) * nx);
    const std::uint32_t v = in(0, y, x);
    if (v > m) m = v;
  }
};

// ---- launchers ---------------------------------------------------------------------------------

inline const char* reduceLabel(PyramidVariant v) {
  switch (v) {
    case PyramidVariant::Unfused: return "kortex::Multires::Unfused::reduce";
    case PyramidVariant::FusedDirect: return "kortex::Multires::FusedDirect::reduce";
    case PyramidVariant::FusedExpand: return "kortex::Multires::FusedExpand::reduce";
    case PyramidVariant::Packed16: return "kortex::Multires::Packed16::reduce";
    case PyramidVariant::FusedReduce: return "kortex::Multires::FusedReduce::reduce";
  }
  return "kortex::Multires::reduce";
}

template <class ExecSpace>
using FlatPolicy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
template <class ExecSpace>
using FlatPolicy32 = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<int>>;

template <class ExecSpace, class FineT, class LayerT>
void reduceLevel(ExecSpace const& exec, ConstLevel<FineT, typename ExecSpace::memory_space> fine,
                 Level<LayerT, typename ExecSpace::memory_space> coarse, PyramidConfig const& cfg) {
  using Mem = typename ExecSpace::memory_space;
  const int ny = static_cast<int>(fine.extent(0)), nx = static_cast<int>(fine.extent(1));
  const int my = ceilHalf(ny), mx = ceilHalf(nx);
  checkExtents2(coarse, my, mx, "coarse level");
  const std::int64_t total = static_cast<std::int64_t>(my) * mx;
  if (cfg.variant == PyramidVariant::Packed16) {
    if constexpr (std::is_same_v<LayerT, std::int16_t>) {
      checkContiguous(coarse, "coarse level");
      const int head = packedHead(coarse.data());
      Packed16ReduceFunctor<Mem, FineT> f{fine, coarse.data(), ny, nx, mx, head, total};
      Kokkos::parallel_for(reduceLabel(cfg.variant), FlatPolicy<ExecSpace>(exec, 0, packedItems(total, head)), f);
      return;
    } else {
      throw InvalidArgument("multires: the packed16 pyramid needs the integer pipeline");
    }
  }
  if (total <= INT_MAX)  // 32-bit indices where the level allows them
    Kokkos::parallel_for(reduceLabel(cfg.variant), FlatPolicy32<ExecSpace>(exec, 0, static_cast<int>(total)),
                         ReduceFunctor<Mem, FineT, LayerT, int>{fine, coarse, ny, nx, mx});
  else
    Kokkos::parallel_for(reduceLabel(cfg.variant), FlatPolicy<ExecSpace>(exec, 0, total),
                         ReduceFunctor<Mem, FineT, LayerT>{fine, coarse, ny, nx, mx});
}

// expand-and-combine of one level, shared by decompose (Reconstruct = false: point = g_k,
// out = l_k) and reconstruct (Reconstruct = true: point = l'_k, out = g'_k).
template <bool Reconstruct, class ExecSpace, class PointT, class LayerT, class OutT>
void expandLevel(ExecSpace const& exec, ConstLevel<PointT, typename ExecSpace::memory_space> point,
                 ConstLevel<LayerT, typename ExecSpace::memory_space> coarse,
                 Level<OutT, typename ExecSpace::memory_space> out, PyramidConfig const& cfg,
                 UnfusedBuffers<LayerT, typename ExecSpace::memory_space> const& tmp) {
  using Mem = typename ExecSpace::memory_space;
  using Acc = PyramidAcc<LayerT>;
  const int ny = static_cast<int>(point.extent(0)), nx = static_cast<int>(point.extent(1));
  const int my = ceilHalf(ny), mx = ceilHalf(nx);
  checkExtents2(coarse, my, mx, "coarse level");
  checkExtents2(out, ny, nx, Reconstruct ? "reconstructed level" : "Laplacian layer");
  const std::int64_t fineN = static_cast<std::int64_t>(ny) * nx;
  const char* const phase = Reconstruct ? "reconstruct" : "decompose";

  switch (cfg.variant) {
    case PyramidVariant::Unfused: {
      const std::int64_t upN = static_cast<std::int64_t>(ny + 4) * (nx + 4);
      if (static_cast<std::int64_t>(tmp.upsampled.extent(0)) < upN ||
          static_cast<std::int64_t>(tmp.lowpass.extent(0)) < fineN)
        throw InvalidArgument("multires Unfused: temporaries smaller than level " +
                              std::to_string(nx) + "x" + std::to_string(ny));
      UnmanagedLevel<LayerT, Mem> up(tmp.upsampled.data(), ny + 4, nx + 4);
      UnmanagedLevel<Acc, Mem> lp(tmp.lowpass.data(), ny, nx);
      Kokkos::parallel_for("kortex::Multires::Unfused::upsample", FlatPolicy<ExecSpace>(exec, 0, upN),
                           UpsampleFunctor<Mem, LayerT>{coarse, up, my, mx, nx + 4});
      Kokkos::parallel_for("kortex::Multires::Unfused::lowpass", FlatPolicy<ExecSpace>(exec, 0, fineN),
                           LowpassFunctor<Mem, LayerT>{up, lp, nx});
      Kokkos::parallel_for(
          "kortex::Multires::Unfused::scale", FlatPolicy<ExecSpace>(exec, 0, fineN),
          ScaleFunctor<Mem, Acc>{Kokkos::View<Acc*, Mem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
              tmp.lowpass.data(), static_cast<std::size_t>(fineN))});
      Kokkos::parallel_for(Reconstruct ? "kortex::Multires::Unfused::add" : "kortex::Multires::Unfused::subtract",
                           FlatPolicy<ExecSpace>(exec, 0, fineN),
                           CombineFunctor<Mem, PointT, Acc, OutT, Reconstruct>{point, lp, out, nx, cfg.maxValue});
      return;
    }
    case PyramidVariant::FusedDirect:
    case PyramidVariant::FusedReduce: {  // FusedReduce's standalone expand (reconstruct) is FusedDirect's
      const std::int64_t items = static_cast<std::int64_t>(my) * mx;
      const std::string label = std::string("kortex::Multires::FusedDirect::") + phase;
      if (items <= INT_MAX)  // 32-bit indices where the level allows them
        Kokkos::parallel_for(label, FlatPolicy32<ExecSpace>(exec, 0, static_cast<int>(items)),
                             FusedDirectFunctor<Mem, PointT, LayerT, OutT, Reconstruct, int>{
                                 point, coarse, out, ny, nx, my, mx, cfg.maxValue});
      else
        Kokkos::parallel_for(label, FlatPolicy<ExecSpace>(exec, 0, items),
                             FusedDirectFunctor<Mem, PointT, LayerT, OutT, Reconstruct>{point, coarse, out, ny, nx, my,
                                                                                        mx, cfg.maxValue});
      return;
    }
    case PyramidVariant::FusedExpand: {
      const PyramidTile t = cfg.tile;
      checkPyramidTile(t, pyramidScratchMax<ExecSpace>());
      const std::int64_t tilesX = (mx + t.x - 1) / t.x;
      const std::int64_t tilesY = (my + t.y - 1) / t.y;
      if (tilesX * tilesY > INT_MAX)
        throw InvalidArgument("multires FusedExpand: too many tiles for one launch; use a larger tile");
      const std::size_t bytes = pyramidScratchBytes(t);
      const int haloWords = static_cast<int>(((static_cast<std::size_t>(t.x + 2) * (t.y + 2) * 4 + 15) / 16) * 4);
      using F = FusedExpandFunctor<ExecSpace, PointT, LayerT, OutT, Reconstruct>;
      static_assert(sizeof(F) < 512, "keep the kernel closure small (CUDA constant-memory copies above 512 B)");
      F f{point, coarse, out, ny, nx, my, mx, t.x, t.y, static_cast<int>(tilesX),
          haloWords, stagingPlaneStride(t), static_cast<int>(bytes), cfg.maxValue};
      PyramidPolicy<ExecSpace> policy(exec, static_cast<int>(tilesX * tilesY), Kokkos::AUTO);
      policy.set_scratch_size(0, Kokkos::PerTeam(static_cast<int>(bytes)));
      Kokkos::parallel_for(std::string("kortex::Multires::FusedExpand::") + phase, policy, f);
      return;
    }
    case PyramidVariant::Packed16: {
      if constexpr (std::is_same_v<LayerT, std::int16_t>) {
        checkContiguous(point, Reconstruct ? "Laplacian layer" : "fine level");
        checkContiguous(out, Reconstruct ? "reconstructed level" : "Laplacian layer");
        const int head = packedHead(out.data());
        const int paired = packedHead(point.data()) == head ? 1 : 0;
        Packed16ExpandFunctor<Mem, PointT, OutT, Reconstruct> f{point.data(), out.data(), coarse, nx, my, mx,
                                                                head, paired, cfg.maxValue, fineN};
        Kokkos::parallel_for(std::string("kortex::Multires::Packed16::") + phase,
                             FlatPolicy<ExecSpace>(exec, 0, packedItems(fineN, head)), f);
        return;
      } else {
        throw InvalidArgument("multires: the packed16 pyramid needs the integer pipeline");
      }
    }
  }
  throw InvalidArgument("multires: unknown pyramid variant " + std::to_string(static_cast<int>(cfg.variant)));
}

template <class ExecSpace, class FineT, class LayerT>
void laplacianLevel(ExecSpace const& exec, ConstLevel<FineT, typename ExecSpace::memory_space> fine,
                    ConstLevel<LayerT, typename ExecSpace::memory_space> coarse,
                    Level<LayerT, typename ExecSpace::memory_space> laplacian, PyramidConfig const& cfg,
                    UnfusedBuffers<LayerT, typename ExecSpace::memory_space> const& tmp) {
  expandLevel<false, ExecSpace, FineT, LayerT, LayerT>(exec, fine, coarse, laplacian, cfg, tmp);
}

template <class ExecSpace, class FineT, class LayerT>
void decomposeLevel(ExecSpace const& exec, ConstLevel<FineT, typename ExecSpace::memory_space> fine,
                    Level<LayerT, typename ExecSpace::memory_space> coarse,
                    Level<LayerT, typename ExecSpace::memory_space> laplacian, PyramidConfig const& cfg,
                    UnfusedBuffers<LayerT, typename ExecSpace::memory_space> const& tmp) {
  if (cfg.variant != PyramidVariant::FusedReduce) {
    reduceLevel<ExecSpace, FineT, LayerT>(exec, fine, coarse, cfg);
    laplacianLevel<ExecSpace, FineT, LayerT>(exec, fine, coarse, laplacian, cfg, tmp);
    return;
  }
  using F = FusedReduceFunctor<ExecSpace, FineT, LayerT>;
  const int ny = static_cast<int>(fine.extent(0)), nx = static_cast<int>(fine.extent(1));
  const int my = ceilHalf(ny), mx = ceilHalf(nx);
  checkExtents2(coarse, my, mx, "coarse level");
  checkExtents2(laplacian, ny, nx, "Laplacian layer");
  if (F::scratchBytes() > pyramidScratchMax<ExecSpace>())
    throw Unsupported("multires FusedReduce: its tile (" + std::to_string(F::scratchBytes()) +
                      " B) does not fit the team scratch of this backend");
  const std::int64_t tilesX = (mx + F::TX - 1) / F::TX, tilesY = (my + F::TY - 1) / F::TY;
  if (tilesX * tilesY > INT_MAX) throw InvalidArgument("multires FusedReduce: too many tiles for one launch");
  PyramidPolicy<ExecSpace> policy = [&] {
    const int league = static_cast<int>(tilesX * tilesY);
    if constexpr (Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible)
      return PyramidPolicy<ExecSpace>(exec, league, Kokkos::AUTO);
    else  // one coarse pixel of the tile per thread in the last phase
      return PyramidPolicy<ExecSpace>(exec, league, F::TX * F::TY);
  }();
  Kokkos::parallel_for("kortex::Multires::FusedReduce::decompose",
                       policy.set_scratch_size(0, Kokkos::PerTeam(F::scratchBytes())),
                       F{fine, coarse, laplacian, ny, nx, my, mx, static_cast<int>(tilesX)});
}

template <class ExecSpace, class LayerT, class OutT>
void reconstructLevel(ExecSpace const& exec, ConstLevel<LayerT, typename ExecSpace::memory_space> laplacian,
                      ConstLevel<LayerT, typename ExecSpace::memory_space> coarse,
                      Level<OutT, typename ExecSpace::memory_space> out, PyramidConfig const& cfg,
                      UnfusedBuffers<LayerT, typename ExecSpace::memory_space> const& tmp) {
  expandLevel<true, ExecSpace, LayerT, LayerT, OutT>(exec, laplacian, coarse, out, cfg, tmp);
}

template <class ExecSpace>
std::uint32_t maxValue(ExecSpace const& exec, ConstU16ImageView<typename ExecSpace::memory_space> in) {
  using Mem = typename ExecSpace::memory_space;
  const std::int64_t n = static_cast<std::int64_t>(in.extent(0) * in.extent(1) * in.extent(2));
  if (in.extent(0) != 1)
    throw InvalidArgument("multires: the value check expects a 2D image (1, ny, nx)");
  std::uint32_t result = 0;
  Kokkos::parallel_reduce("kortex::Multires::maxValue", FlatPolicy<ExecSpace>(exec, 0, n),
                          MaxValueFunctor<Mem>{in, static_cast<int>(in.extent(2))},
                          Kokkos::Max<std::uint32_t>(result));
  return result;
}

}  // namespace kortex::gpu::multires_detail
