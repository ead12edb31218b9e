// Kernels of the multires layer bilateral (entry points: gpu/multires/MultiresBilateral.hpp; definition:
// core/Multires.hpp, "BF"; per-tap maths: the layer bilateral block of core/Multires.hpp).
// Internal header: tests and benchmarks include it to force the similarity-table placement of
// the integer kernel (bilateralLayerQ). No Eigen, no OpenMP pragmas, no VTK here.
//
// Every variant: TeamPolicy, one team per output tile of tile.x * tile.y pixels (league rank ->
// tile, x fastest), one TeamThreadRange over the tile's outputs (x fastest: on CUDA consecutive
// threads of a warp own consecutive x, so loads and stores coalesce). team_rank() is never a
// tile index: the team size is min(tile.x * tile.y, team_size_max) for the functor and scratch
// footprint, so on CUDA every thread owns one output (tiles are at most 1024 outputs) and on
// Kokkos 3.4 Serial (team size 1) the one thread walks the whole tile.
//
// Input reads: straight from global memory through the read-only data cache (readOnly(): __ldg,
// ld.global.nc, on CUDA; a plain load elsewhere), clamp rule applied to each tap's index, as the
// paper's configuration exploration measured (texture / global reads). The Views are plain const
// Views: the RandomAccess memory trait no longer selects the __ldg path in the mdspan-based View
// of Kokkos 4.6.99 (kokkos/kokkos#8964; the PTX of these kernels had no ld.global.nc with it), so
// the kernels ask for it explicitly. No apron in scratch: for the paper's 5x5 window an apron
// of a 32x8 tile is 36x12 = 1.7 loads per output plus a barrier,
// while the L1 read-only cache already serves the 25 taps of neighbouring threads (each input
// is read by 25 outputs of the same or an adjacent tile); the per-tap cost is dominated by the
// exp calls (SFU) of the float variants and by the int64 accumulation of the integer variant,
// not by the load. Scratch is kept for the weight tables, which every thread of a team reads:
//   Naive                  - no scratch; per tap: 1 load, 2 exp (closeness and similarity),
//                            ~6 FP ops (d, d^2, the two exponent products, w*d, sums).
//   FastMath               - as Naive with __expf (one MUFU.EX2 + one FMUL each) on CUDA.
//   Reuse                  - no scratch; kReuseRows outputs per thread along y share each input row
//                            (below); per tap 1 exp2Flush of the summed exponent (one MUFU.EX2).
//   ClosenessLut           - the (2r+1)^2 float closeness table copied cooperatively into
//                            level-0 scratch, team_barrier(); per tap: 1 global load, 1 scratch
//                            load (same address across the warp: broadcast), 1 exp.
//   ClosenessSimilarityLut - int16 layers; closenessQ ((2r+1)^2 int32) and, when both fit in
//                            scratch_size_max(0) - kScratchMarginBytes, similarityQ copied into
//                            scratch, else similarityQ read from global memory (readOnly);
//                            per tap: 1 global int16 load, 1 scratch load (closeness), 1 scratch
//                            or global load (similarity, data-dependent index), w = cQ * sQ in
//                            int32, num += w * l and den += w in int64.
// Float sums run in float, window row by window row (row sums added to the totals), in the
// centred form of multiresBFResult. Radii 1..kMaxFixedRadius run a compile-time-radius kernel
// (loops fully unrolled, table offsets constant); other radii loop at run time.
// What nvcc 13 makes of it (sm_90, Kokkos 4.6.99, ptxas -v and the PTX; not profiled): 32-56
// registers per thread (r = 2: Naive 51, ClosenessLut 40, FastMath 40, integer 40 / 44 with
// the table in scratch / global), no spills, no stack. Per output at r = 2: 26 ld.global.nc
// (25 taps + the centre); Naive and FastMath 31 ex2 (25 similarity + one closeness per distinct
// |o|^2: with the loops unrolled the compiler evaluates exp(|o|^2 k) once per distance);
// ClosenessLut 25 ex2 + 25 ld.shared (broadcast); integer 25 ld.shared (closeness) + 25
// similarity loads (ld.shared or ld.global.nc), 25 mul.wide.s32 and two int64 adds per tap.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "core/Multires.hpp"
#include "gpu/multires/MultiresBilateral.hpp"

namespace kortex::gpu::multires_detail {

// Largest tile (outputs per team): the CUDA block limit, one output per thread.
inline constexpr int kMaxTileOutputs = 1024;
// Radii with a compile-time-radius kernel (the paper's 5x5 window is r = 2).
inline constexpr int kMaxFixedRadius = 3;

// Calls run(std::integral_constant<int, R>{}) with R = radius for the compile-time radii 1..kMaxFixedRadius,
// R = 0 (the run-time-radius loops) for any other radius.
template <class Run>
void withRadius(int radius, Run&& run) {
  static_assert(kMaxFixedRadius == 3, "update the radius switch");
  switch (radius) {
    case 1: return run(std::integral_constant<int, 1>{});
    case 2: return run(std::integral_constant<int, 2>{});
    case 3: return run(std::integral_constant<int, 3>{});
    default: return run(std::integral_constant<int, 0>{});
  }
}
// Scratch headroom kept free when deciding whether the similarity table goes into scratch:
// the byte counts below include the 16-B alignment of the block already, the margin covers
// Kokkos' own per-team bookkeeping beyond its documented reserve.
inline constexpr std::size_t kScratchMarginBytes = 512;
// Longest useful similarity table: one entry per |difference| of two int16 values.
inline constexpr std::size_t kMaxSimilarityEntries = 65536;

// Integer kernel: where the similarity table is read from. Auto: scratch when it fits (see
// similarityFitsScratch), else global. Scratch / Global force one (benchmarks, tests).
enum class SimilarityPlacement { Auto, Scratch, Global };

template <class ExecSpace>
using LayerPolicy = Kokkos::TeamPolicy<ExecSpace>;



// Extents and tiling of one launch (league rank -> tile: x fastest).
struct LayerShape {
  int nx = 1, ny = 1;
  int tileX = 1, tileY = 1;
  int tilesX = 1;
};

// Tables as callables for multiresSimilarityQAt: in team scratch, or in global memory read
// through the read-only cache.
struct ScratchTableQ {
  const std::int32_t* p;
  KOKKOS_INLINE_FUNCTION std::int32_t operator()(int i) const { return p[i]; }
};
struct GlobalTableQ {
  const std::int32_t* p;
  KOKKOS_INLINE_FUNCTION std::int32_t operator()(int i) const { return readOnly(p + i); }
};

inline int windowTaps(int radius) { return (2 * radius + 1) * (2 * radius + 1); }

// Level-0 scratch one team requests for `n` 4-byte table entries: the block is taken with
// get_shmem_aligned(n * 4, 16), so 16 B more always suffice.
inline std::size_t tableScratchBytes(std::size_t n) { return n * 4 + 16; }

// Whether closenessQ and a similarity table of `simEntries` entries both fit the team scratch
// of `ExecSpace` with kScratchMarginBytes to spare.
template <class ExecSpace>
bool similarityFitsScratch(int radius, std::size_t simEntries) {
  const std::size_t maxBytes = kx::scratchSizeMax<LayerPolicy<ExecSpace>>(0);
  const std::size_t need =
      tableScratchBytes(static_cast<std::size_t>(windowTaps(radius)) + simEntries);
  return maxBytes >= kScratchMarginBytes && need <= maxBytes - kScratchMarginBytes;
}

inline std::string describe(LayerTile const& t) {
  return std::to_string(t.x) + "x" + std::to_string(t.y);
}

// 0 per axis -> kDefaultBilateralTile; refuses negative extents and more than kMaxTileOutputs.
inline LayerTile resolveTile(LayerTile t) {
  if (t.x < 0 || t.y < 0)
    throw InvalidArgument("multires bilateral: tile " + describe(t) +
                          " must have extents >= 0 (0: default " +
                          describe(kDefaultBilateralTile) + ")");
  if (t.x == 0) t.x = kDefaultBilateralTile.x;
  if (t.y == 0) t.y = kDefaultBilateralTile.y;
  if (static_cast<std::int64_t>(t.x) * t.y > kMaxTileOutputs)
    throw InvalidArgument("multires bilateral: tile " + describe(t) + " has more than " +
                          std::to_string(kMaxTileOutputs) + " outputs per team");
  return t;
}

// In and out: allocated, same extents, non-empty, not overlapping, 32-bit indexable.
template <class InView, class OutView>
void checkLayers(InView const& in, OutView const& out) {
  if (in.extent(0) != out.extent(0) || in.extent(1) != out.extent(1))
    throw InvalidArgument("multires bilateral: input layer extents " +
                          std::to_string(in.extent(1)) + "x" + std::to_string(in.extent(0)) +
                          " differ from output extents " + std::to_string(out.extent(1)) + "x" +
                          std::to_string(out.extent(0)) + " (nx x ny)");
  if (in.size() == 0) throw InvalidArgument("multires bilateral: the layer is empty");
  if (in.data() == nullptr || out.data() == nullptr)
    throw InvalidArgument("multires bilateral: input or output layer is not allocated");
  if (spansOverlap(in, out))
    throw InvalidArgument("multires bilateral: input and output layers must not overlap");
  if (in.extent(0) > static_cast<std::size_t>(INT_MAX / 2) ||
      in.extent(1) > static_cast<std::size_t>(INT_MAX / 2))
    throw InvalidArgument("multires bilateral: layer too large for 32-bit indexing");
}

template <class Table>
void checkTable(Table const& t, std::size_t expected, const char* name, int radius) {
  if (t.extent(0) != expected || t.data() == nullptr)
    throw InvalidArgument(std::string("multires bilateral: the ") + name + " table has " +
                          std::to_string(t.extent(0)) + " entries, radius " +
                          std::to_string(radius) + " needs " + std::to_string(expected));
}

inline LayerShape makeShape(std::size_t ny, std::size_t nx, LayerTile const& t) {
  LayerShape s;
  s.nx = static_cast<int>(nx);
  s.ny = static_cast<int>(ny);
  s.tileX = t.x;
  s.tileY = t.y;
  const std::int64_t tilesX = (static_cast<std::int64_t>(s.nx) + t.x - 1) / t.x;
  const std::int64_t tilesY = (static_cast<std::int64_t>(s.ny) + t.y - 1) / t.y;
  if (tilesX * tilesY > INT_MAX)
    throw InvalidArgument("multires bilateral: " + std::to_string(tilesX * tilesY) + " tiles of " +
                          describe(t) + " exceed the league size limit; use a larger tile");
  s.tilesX = static_cast<int>(tilesX);
  return s;
}

inline int leagueSize(LayerShape const& s) {
  return s.tilesX * ((s.ny + s.tileY - 1) / s.tileY);
}

// `league` teams of min(items, team_size_max for this functor and scratch footprint) threads; the
// policy is lightWeight (a Reuse batch's closure crosses 512 B).
template <class ExecSpace, class Functor>
void launchLeague(ExecSpace const& exec, const char* label, Functor const& f, int league, int items,
                  std::size_t scratchBytes) {
  static_assert(sizeof(Functor) < 2048, "keep the kernel closure well under the 4 KB kernel-parameter limit");
  const int bytes = static_cast<int>(scratchBytes);  // <= scratch_size_max(0), checked
  auto policyOf = [&](int teamSize) {
    return lightWeight(LayerPolicy<ExecSpace>(exec, league, teamSize)).set_scratch_size(0, Kokkos::PerTeam(bytes));
  };
  const int maxTeam = policyOf(1).team_size_max(f, Kokkos::ParallelForTag());
  const int teamSize = std::max(1, std::min(items, maxTeam));
  Kokkos::parallel_for(label, policyOf(teamSize), f);
}

// One team per tile of `s`; team size: min(tile outputs, team_size_max). `items`: work items per
// team (0: one per output of the tile).
template <class ExecSpace, class Functor>
void launch(ExecSpace const& exec, const char* label, Functor const& f, LayerShape const& s,
            std::size_t scratchBytes, int items = 0) {
  launchLeague(exec, label, f, leagueSize(s), items > 0 ? items : s.tileX * s.tileY, scratchBytes);
}

// ----------------------------------------------------------------------------------------------
// Float layers: Naive, ClosenessLut, FastMath (Reuse below). R: compile-time radius, 0 for run-time loops.

template <class ExecSpace, MultiresBilateralVariant V, int R>
struct FloatLayerFunctor {
  static_assert(V != MultiresBilateralVariant::ClosenessSimilarityLut, "float variants only");
  using Mem = typename ExecSpace::memory_space;
  using Member = typename LayerPolicy<ExecSpace>::member_type;

  ConstLayer<Mem> in;
  LayerView<Mem> out;
  ConstFloatTable<Mem> closeness;  // ClosenessLut only
  MultiresBFCoeffs coeffs;
  LayerShape shape;
  int radius;

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int r = R > 0 ? R : radius;
    const float* lut = nullptr;
    if constexpr (V == MultiresBilateralVariant::ClosenessLut) {
      const int n = (2 * r + 1) * (2 * r + 1);
      float* const s = static_cast<float*>(
          team.team_scratch(0).get_shmem_aligned(static_cast<std::size_t>(n) * sizeof(float), 16));
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n),
                           [&](const int i) { s[i] = closeness(i); });
      team.team_barrier();
      lut = s;
    }
    const int league = team.league_rank();
    const int x0 = (league % shape.tilesX) * shape.tileX;
    const int y0 = (league / shape.tilesX) * shape.tileY;
    const int tileN = shape.tileX * shape.tileY;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tileN), [&](const int i) {
      const int x = x0 + i % shape.tileX;
      const int y = y0 + i / shape.tileX;
      if (x >= shape.nx || y >= shape.ny) return;
      out(y, x) = filter(x, y, r, lut);
    });
  }

  // Weight of tap (dx, dy) with intensity difference d.
  KOKKOS_INLINE_FUNCTION float weight(const int dx, const int dy, const int r, const float d,
                                      const float* const lut) const {
    if constexpr (V == MultiresBilateralVariant::ClosenessLut) {
      return lut[(dy + r) * (2 * r + 1) + (dx + r)] *
             multiresSimilarityWeight(d, coeffs.similarity);
    } else if constexpr (V == MultiresBilateralVariant::FastMath) {
      return multiresClosenessWeightFast(dx * dx + dy * dy, coeffs.closeness) *
             multiresSimilarityWeightFast(d, coeffs.similarity);
    } else {
      return multiresClosenessWeight(dx * dx + dy * dy, coeffs.closeness) *
             multiresSimilarityWeight(d, coeffs.similarity);
    }
  }

  KOKKOS_INLINE_FUNCTION float filter(const int x, const int y, const int r,
                                      const float* const lut) const {
    const float c = readOnly(&in(y, x));
    float sumWD = 0.0f;
    float sumW = 0.0f;
    KORTEX_UNROLL
    for (int dy = -r; dy <= r; ++dy) {
      const int yy = clampIndex(y + dy, shape.ny);
      float rowWD = 0.0f;
      float rowW = 0.0f;
      KORTEX_UNROLL
      for (int dx = -r; dx <= r; ++dx) {
        const float d = readOnly(&in(yy, clampIndex(x + dx, shape.nx))) - c;
        const float w = weight(dx, dy, r, d, lut);
        rowWD += w * d;
        rowW += w;
      }
      sumWD += rowWD;
      sumW += rowW;
    }
    return multiresBFResult(c, sumWD, sumW);
  }
};

inline const char* floatLabel(MultiresBilateralVariant v) {
  switch (v) {
    case MultiresBilateralVariant::Naive: return "kortex::Multires::Bilateral::Naive";
    case MultiresBilateralVariant::ClosenessLut: return "kortex::Multires::Bilateral::ClosenessLut";
    case MultiresBilateralVariant::FastMath: return "kortex::Multires::Bilateral::FastMath";
    case MultiresBilateralVariant::Reuse: return "kortex::Multires::Bilateral::Reuse";
    case MultiresBilateralVariant::ClosenessSimilarityLut: break;
  }
  return "kortex::Multires::Bilateral::?";
}

template <class ExecSpace, MultiresBilateralVariant V, int R>
void launchFloat(ExecSpace const& exec, ConstLayer<typename ExecSpace::memory_space> in,
                 LayerView<typename ExecSpace::memory_space> out,
                 ConstFloatTable<typename ExecSpace::memory_space> closeness,
                 MultiresBFCoeffs const& coeffs, LayerShape const& shape, int radius) {
  const std::size_t bytes = V == MultiresBilateralVariant::ClosenessLut
                                ? tableScratchBytes(static_cast<std::size_t>(windowTaps(radius)))
                                : 0;
  const FloatLayerFunctor<ExecSpace, V, R> f{in, out, closeness, coeffs, shape, radius};
  launch(exec, floatLabel(V), f, shape, bytes);
}

template <class ExecSpace, MultiresBilateralVariant V>
void dispatchFloatRadius(ExecSpace const& exec, ConstLayer<typename ExecSpace::memory_space> in,
                         LayerView<typename ExecSpace::memory_space> out,
                         ConstFloatTable<typename ExecSpace::memory_space> closeness,
                         MultiresBFCoeffs const& coeffs, LayerShape const& shape, int radius) {
  withRadius(radius, [&](auto R) {
    launchFloat<ExecSpace, V, decltype(R)::value>(exec, in, out, closeness, coeffs, shape, radius);
  });
}

// ----------------------------------------------------------------------------------------------
// Float layers: Reuse. One work item = kReuseRows outputs of one tile column (rows ly .. ly + P - 1).
// The item walks the P + 2r input rows its windows cover once: each row's 2r + 1 taps are loaded
// (read-only cache) and used by every output p whose window holds the row (window row dy = jj - r - p),
// so an output costs (P + 2r)(2r + 1) / P loads instead of (2r + 1)^2. A tap's weight is one
// exp2Flush of |o|^2 closenessLog2 + d^2 similarityLog2 (multiresWeightReuse). Per output the sums
// run as Naive's: window rows in order, each row's sums added to the totals. R: compile-time radius
// (taps of a row held in registers), 0 for run-time loops (taps loaded per output).

inline constexpr int kReuseRows = 4;

// Reuse's tile: at least kReuseRows rows (one item's outputs; the tuned tiles of the other variants
// may have one or two), x halved while the tile holds more than kMaxTileOutputs outputs.
inline LayerTile reuseTile(LayerTile t) {
  if (t.y < kReuseRows) t.y = kReuseRows;
  while (t.x > 1 && static_cast<std::int64_t>(t.x) * t.y > kMaxTileOutputs) t.x /= 2;
  return t;
}

// Called by the kernel as well: a host-only function there compiles (nvcc warning 20011, now an error
// in kortex_gpu) and yields garbage on the device (Cuda wrote no output at all).
KOKKOS_INLINE_FUNCTION int reuseItems(int tileX, int tileY) {
  return tileX * ((tileY + kReuseRows - 1) / kReuseRows);
}

// Reuse filters a batch of layers in one launch (bilateralLayers; bilateralLayer is a batch of one):
// the league holds every layer's tiles, layer 0's first, and a team finds its layer by its league
// rank. The layers are raw pointers and row pitches so that kMaxBatchLayers of them keep the closure
// small (well under the 4 KB of a lightWeight launch); each layer's outputs are computed exactly as alone
// (the same reads, the same sums).
struct ReuseLayer {
  const float* in = nullptr;
  float* out = nullptr;
  std::ptrdiff_t inPitch = 0, outPitch = 0;  // elements between rows
  int nx = 1, ny = 1;
  int tilesX = 1;
  int teamsEnd = 0;  // league ranks [previous layer's teamsEnd, teamsEnd) are this layer's tiles
};
struct ReuseBatch {
  ReuseLayer layers[kMaxBatchLayers];
  int count = 0;
  int tileX = 1, tileY = 1;
};

// Reuse's outputs of one column: the filtered layer at (x, y + p), p < rows (<= P; AllRows: rows == P),
// into f[p], from the layer at `in` (row pitch `pitch`, nx x ny, clamped reads through the read-only
// cache). The walk over the P + 2r rows described above; per output the window rows in order, each
// row's taps in order, the row sums added to the totals, multiresBFResult. The per-output arithmetic
// does not depend on P: every caller (the layer kernel, P = kReuseRows; the reconstruct that filters
// as it expands, P = 2) gets the same bits for the same output.
template <int P, int R, bool AllRows>
KOKKOS_INLINE_FUNCTION void reuseColumn(const float* in, std::ptrdiff_t pitch, int nx, int ny, int x, int y,
                                        int rowsIn, int radius, MultiresBFCoeffs const& coeffs, float* f) {
  constexpr int kD = 2 * (R > 0 ? R : 1) + 1;
  const int rows = AllRows ? P : rowsIn;
  const int r = R > 0 ? R : radius;
  const float kc = coeffs.closenessLog2, kr = coeffs.similarityLog2;
  auto at = [&](const int yy, const int xx) { return readOnly(in + yy * pitch + xx); };
  float c[P], sumWD[P], sumW[P];
  KORTEX_UNROLL
  for (int p = 0; p < P; ++p) {
    c[p] = at(clampIndex(y + p, ny), x);
    sumWD[p] = 0.0f;
    sumW[p] = 0.0f;
  }
  KORTEX_UNROLL
  for (int jj = 0; jj < P + 2 * r; ++jj) {
    const int yy = clampIndex(y - r + jj, ny);
    float v[kD];
    if constexpr (R > 0) {
      KORTEX_UNROLL
      for (int i = 0; i < kD; ++i) v[i] = at(yy, clampIndex(x - R + i, nx));
    }
    KORTEX_UNROLL
    for (int p = 0; p < P; ++p) {
      const int dy = jj - r - p;
      if (p >= rows || dy < -r || dy > r) continue;
      const float ey = static_cast<float>(dy * dy) * kc;
      float rowWD = 0.0f, rowW = 0.0f;
      if constexpr (R > 0) {
        KORTEX_UNROLL
        for (int i = 0; i < kD; ++i) {
          const float d = v[i] - c[p];
          const float w = multiresWeightReuse(static_cast<float>((i - R) * (i - R)) * kc + ey, d, kr);
          rowWD += w * d;
          rowW += w;
        }
      } else {
        for (int dx = -r; dx <= r; ++dx) {
          const float d = at(yy, clampIndex(x + dx, nx)) - c[p];
          const float w = multiresWeightReuse(static_cast<float>(dx * dx) * kc + ey, d, kr);
          rowWD += w * d;
          rowW += w;
        }
      }
      sumWD[p] += rowWD;
      sumW[p] += rowW;
    }
  }
  KORTEX_UNROLL
  for (int p = 0; p < P; ++p) f[p] = p < rows ? multiresBFResult(c[p], sumWD[p], sumW[p]) : 0.0f;
}

template <class ExecSpace, int R>
struct ReuseLayerFunctor {
  using Mem = typename ExecSpace::memory_space;
  using Member = typename LayerPolicy<ExecSpace>::member_type;
  static constexpr int P = kReuseRows;

  ReuseBatch batch;
  MultiresBFCoeffs coeffs;
  int radius;

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int league = team.league_rank();
    int b = 0;
    while (b + 1 < batch.count && league >= batch.layers[b].teamsEnd) ++b;
    ReuseLayer const& L = batch.layers[b];
    const int tile = league - (b > 0 ? batch.layers[b - 1].teamsEnd : 0);
    const int tileX = batch.tileX, tileY = batch.tileY;
    const int x0 = (tile % L.tilesX) * tileX;
    const int y0 = (tile / L.tilesX) * tileY;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, reuseItems(tileX, tileY)), [&](const int item) {
      const int lx = item % tileX;
      const int ly = (item / tileX) * P;
      const int x = x0 + lx, y = y0 + ly;
      if (x >= L.nx || y >= L.ny) return;
      const int left = tileY - ly < L.ny - y ? tileY - ly : L.ny - y;
      const int perItem = P;  // a value, not the static member as an lvalue (no device odr-use)
      filter(L, x, y, left < perItem ? left : perItem);
    });
  }

  // Items with all P rows (all but a tile's or the image's last rows) run with `rows` a constant: with a
  // compile-time radius the row loop then unrolls completely and every window-row test and closeness
  // exponent is resolved at compile time. The same operations in the same order either way.
  KOKKOS_INLINE_FUNCTION void filter(ReuseLayer const& L, const int x, const int y, const int rows) const {
    if (rows == P)
      filterRows<true>(L, x, y, P);
    else
      filterRows<false>(L, x, y, rows);
  }

  template <bool AllRows>
  KOKKOS_INLINE_FUNCTION void filterRows(ReuseLayer const& L, const int x, const int y, const int rows) const {
    float f[P];
    reuseColumn<P, R, AllRows>(L.in, L.inPitch, L.nx, L.ny, x, y, rows, radius, coeffs, f);
    KORTEX_UNROLL
    for (int p = 0; p < P; ++p)
      if (p < (AllRows ? P : rows)) L.out[(y + p) * L.outPitch + x] = f[p];
  }
};

template <class ExecSpace, int R>
void launchReuse(ExecSpace const& exec, ReuseBatch const& batch, MultiresBFCoeffs const& coeffs, int radius) {
  const ReuseLayerFunctor<ExecSpace, R> f{batch, coeffs, radius};
  launchLeague(exec, floatLabel(MultiresBilateralVariant::Reuse), f, batch.layers[batch.count - 1].teamsEnd,
               reuseItems(batch.tileX, batch.tileY), 0);
}

template <class ExecSpace>
void dispatchReuseRadius(ExecSpace const& exec, ReuseBatch const& batch, MultiresBFCoeffs const& coeffs, int radius) {
  withRadius(radius, [&](auto R) { launchReuse<ExecSpace, decltype(R)::value>(exec, batch, coeffs, radius); });
}

// Appends layer (in, out) with tile t to `batch` (checked layers; teams counted in int).
template <class Mem>
void addReuseLayer(ReuseBatch& batch, ConstLayer<Mem> const& in, LayerView<Mem> const& out, LayerTile const& t) {
  const LayerShape shape = makeShape(in.extent(0), in.extent(1), t);
  const std::int64_t begin = batch.count > 0 ? batch.layers[batch.count - 1].teamsEnd : 0;
  const std::int64_t end = begin + leagueSize(shape);
  if (end > INT_MAX)
    throw InvalidArgument("multires bilateral: " + std::to_string(end) + " tiles of " + describe(t) +
                          " in one launch exceed the league size limit; use a larger tile");
  ReuseLayer& L = batch.layers[batch.count++];
  L.in = in.data();
  L.out = out.data();
  L.inPitch = static_cast<std::ptrdiff_t>(in.stride(0));
  L.outPitch = static_cast<std::ptrdiff_t>(out.stride(0));
  L.nx = shape.nx;
  L.ny = shape.ny;
  L.tilesX = shape.tilesX;
  L.teamsEnd = static_cast<int>(end);
  batch.tileX = t.x;
  batch.tileY = t.y;
}

// Every check of the float entry point; returns the resolved tile. Nothing is enqueued.
template <class ExecSpace>
LayerTile checkFloat(ConstLayer<typename ExecSpace::memory_space> const& in,
                     LayerView<typename ExecSpace::memory_space> const& out,
                     ConstFloatTable<typename ExecSpace::memory_space> const& closeness,
                     MultiresParams const& params, LayerTile tile) {
  requireRadius("multires bilateral", params.radius, MultiresParams::kMaxRadius);
  if (params.bilateral != MultiresBilateralVariant::Naive &&
      params.bilateral != MultiresBilateralVariant::ClosenessLut &&
      params.bilateral != MultiresBilateralVariant::FastMath && params.bilateral != MultiresBilateralVariant::Reuse)
    throw InvalidArgument(std::string("multires bilateral: float layers use the Naive, ClosenessLut, FastMath or "
                                      "Reuse variant; got ") + toString(params.bilateral));
  checkLayers(in, out);
  if (params.bilateral == MultiresBilateralVariant::ClosenessLut) {
    checkTable(closeness, static_cast<std::size_t>(windowTaps(params.radius)), "closeness",
               params.radius);
    if (tableScratchBytes(static_cast<std::size_t>(windowTaps(params.radius))) >
        kx::scratchSizeMax<LayerPolicy<ExecSpace>>(0))
      throw Unsupported("multires bilateral ClosenessLut: the closeness table of radius " +
                        std::to_string(params.radius) + " does not fit the team scratch of " +
                        kx::spaceName<ExecSpace>() + "; use naive or fastmath");
  }
  const LayerTile t = resolveTile(tile);
  makeShape(in.extent(0), in.extent(1), t);  // league size check
  return t;
}

template <class ExecSpace>
LayerTile bilateralLayerFloat(ExecSpace const& exec,
                              ConstLayer<typename ExecSpace::memory_space> in,
                              LayerView<typename ExecSpace::memory_space> out,
                              ConstFloatTable<typename ExecSpace::memory_space> closeness,
                              MultiresParams const& params, LayerTile tile) {
  LayerTile t = checkFloat<ExecSpace>(in, out, closeness, params, tile);
  if (params.bilateral == MultiresBilateralVariant::Reuse) t = reuseTile(t);
  const LayerShape shape = makeShape(in.extent(0), in.extent(1), t);
  const MultiresBFCoeffs coeffs = multiresBFCoeffs(params.sigmaSpatial, params.sigmaRange);
  switch (params.bilateral) {
    case MultiresBilateralVariant::Naive:
      dispatchFloatRadius<ExecSpace, MultiresBilateralVariant::Naive>(exec, in, out, closeness,
                                                                      coeffs, shape, params.radius);
      break;
    case MultiresBilateralVariant::ClosenessLut:
      dispatchFloatRadius<ExecSpace, MultiresBilateralVariant::ClosenessLut>(
          exec, in, out, closeness, coeffs, shape, params.radius);
      break;
    case MultiresBilateralVariant::FastMath:
      dispatchFloatRadius<ExecSpace, MultiresBilateralVariant::FastMath>(
          exec, in, out, closeness, coeffs, shape, params.radius);
      break;
    case MultiresBilateralVariant::Reuse: {
      ReuseBatch batch;
      addReuseLayer(batch, in, out, t);
      dispatchReuseRadius<ExecSpace>(exec, batch, coeffs, params.radius);
      break;
    }
    case MultiresBilateralVariant::ClosenessSimilarityLut:
      break;  // refused by checkFloat
  }
  return t;
}

template <class ExecSpace>
LayerTile bilateralLayersFloat(ExecSpace const& exec, std::vector<ConstLayer<typename ExecSpace::memory_space>> const& in,
                               std::vector<LayerView<typename ExecSpace::memory_space>> const& out,
                               MultiresParams const& params, LayerTile tile) {
  if (params.bilateral != MultiresBilateralVariant::Reuse)
    throw InvalidArgument(std::string("multires bilateral: layers are batched with the Reuse variant only; got ") +
                          toString(params.bilateral));
  if (in.size() != out.size() || in.empty())
    throw InvalidArgument("multires bilateral: " + std::to_string(in.size()) + " input and " +
                          std::to_string(out.size()) + " output layers (equal, non-zero counts)");
  LayerTile t;
  for (std::size_t b = 0; b < in.size(); ++b)
    t = reuseTile(checkFloat<ExecSpace>(in[b], out[b], ConstFloatTable<typename ExecSpace::memory_space>(), params, tile));
  std::vector<ReuseBatch> batches;
  for (std::size_t b = 0; b < in.size(); ++b) {
    if (b % kMaxBatchLayers == 0) batches.emplace_back();
    addReuseLayer(batches.back(), in[b], out[b], t);  // throws before any launch
  }
  const MultiresBFCoeffs coeffs = multiresBFCoeffs(params.sigmaSpatial, params.sigmaRange);
  for (ReuseBatch const& batch : batches) dispatchReuseRadius<ExecSpace>(exec, batch, coeffs, params.radius);
  return t;
}

// ----------------------------------------------------------------------------------------------
// Integer layers: ClosenessSimilarityLut. SimScratch: similarity table in scratch (else global).

template <class ExecSpace, bool SimScratch, int R>
struct IntLayerFunctor {
  using Mem = typename ExecSpace::memory_space;
  using Member = typename LayerPolicy<ExecSpace>::member_type;

  ConstIntLayer<Mem> in;
  IntLayerView<Mem> out;
  ConstTable<Mem> closenessQ;
  ConstTable<Mem> similarityQ;
  LayerShape shape;
  int radius;
  int simSize;

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int r = R > 0 ? R : radius;
    const int nC = (2 * r + 1) * (2 * r + 1);
    const int nTables = nC + (SimScratch ? simSize : 0);
    // closenessQ, then (SimScratch) similarityQ, in one block.
    std::int32_t* const tables = static_cast<std::int32_t*>(team.team_scratch(0).get_shmem_aligned(
        static_cast<std::size_t>(nTables) * sizeof(std::int32_t), 16));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nTables), [&](const int i) {
      tables[i] = i < nC ? closenessQ(i) : similarityQ(i - nC);
    });
    team.team_barrier();
    const ScratchTableQ simScratch{tables + nC};
    const GlobalTableQ simGlobal{similarityQ.data()};
    const int league = team.league_rank();
    const int x0 = (league % shape.tilesX) * shape.tileX;
    const int y0 = (league / shape.tilesX) * shape.tileY;
    const int tileN = shape.tileX * shape.tileY;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tileN), [&](const int i) {
      const int x = x0 + i % shape.tileX;
      const int y = y0 + i / shape.tileX;
      if (x >= shape.nx || y >= shape.ny) return;
      const std::int16_t c = readOnly(&in(y, x));
      std::int64_t num = 0;
      std::int64_t den = 0;
      KORTEX_UNROLL
      for (int dy = -r; dy <= r; ++dy) {
        const int yy = clampIndex(y + dy, shape.ny);
        const std::int32_t* const cRow = tables + (dy + r) * (2 * r + 1) + r;
        KORTEX_UNROLL
        for (int dx = -r; dx <= r; ++dx) {
          const int v = readOnly(&in(yy, clampIndex(x + dx, shape.nx)));
          const int ad = v >= c ? v - c : c - v;
          std::int32_t sQ;
          if constexpr (SimScratch)
            sQ = multiresSimilarityQAt(simScratch, simSize, ad);
          else
            sQ = multiresSimilarityQAt(simGlobal, simSize, ad);
          const std::int32_t w = multiresWeightQ(cRow[dx], sQ);
          num += static_cast<std::int64_t>(w) * v;
          den += w;
        }
      }
      out(y, x) = multiresBFResultQ(num, den, c);
    });
  }
};

template <class ExecSpace, bool SimScratch, int R>
void launchInt(ExecSpace const& exec, ConstIntLayer<typename ExecSpace::memory_space> in,
               IntLayerView<typename ExecSpace::memory_space> out,
               ConstTable<typename ExecSpace::memory_space> closenessQ,
               ConstTable<typename ExecSpace::memory_space> similarityQ, LayerShape const& shape,
               int radius) {
  const int simSize = static_cast<int>(similarityQ.extent(0));
  const std::size_t bytes = tableScratchBytes(static_cast<std::size_t>(windowTaps(radius)) +
                                              (SimScratch ? static_cast<std::size_t>(simSize) : 0));
  const IntLayerFunctor<ExecSpace, SimScratch, R> f{
      in, out, closenessQ, similarityQ, shape, radius, simSize};
  launch(exec,
         SimScratch ? "kortex::Multires::Bilateral::ClosenessSimilarityLut"
                    : "kortex::Multires::Bilateral::ClosenessSimilarityLut::GlobalSimilarity",
         f, shape, bytes);
}

template <class ExecSpace, bool SimScratch>
void dispatchIntRadius(ExecSpace const& exec, ConstIntLayer<typename ExecSpace::memory_space> in,
                       IntLayerView<typename ExecSpace::memory_space> out,
                       ConstTable<typename ExecSpace::memory_space> closenessQ,
                       ConstTable<typename ExecSpace::memory_space> similarityQ,
                       LayerShape const& shape, int radius) {
  withRadius(radius, [&](auto R) {
    launchInt<ExecSpace, SimScratch, decltype(R)::value>(exec, in, out, closenessQ, similarityQ, shape, radius);
  });
}

// Every check of the integer entry point; returns the resolved tile and whether the similarity
// table goes into scratch. Nothing is enqueued.
template <class ExecSpace>
LayerTile checkInt(ConstIntLayer<typename ExecSpace::memory_space> const& in,
                   IntLayerView<typename ExecSpace::memory_space> const& out,
                   ConstTable<typename ExecSpace::memory_space> const& closenessQ,
                   ConstTable<typename ExecSpace::memory_space> const& similarityQ,
                   MultiresParams const& params, LayerTile tile, SimilarityPlacement placement,
                   bool& simInScratch) {
  requireRadius("multires bilateral", params.radius, MultiresParams::kMaxRadius);
  if (params.bilateral != MultiresBilateralVariant::ClosenessSimilarityLut)
    throw InvalidArgument(std::string("multires bilateral: integer layers use the "
                                      "closeness+similarity LUT variant (lut); '") +
                          toString(params.bilateral) + "' is a float-layer variant");
  checkLayers(in, out);
  checkTable(closenessQ, static_cast<std::size_t>(windowTaps(params.radius)), "closenessQ",
             params.radius);
  const std::size_t simEntries = similarityQ.extent(0);
  if (simEntries == 0 || simEntries > kMaxSimilarityEntries || similarityQ.data() == nullptr)
    throw InvalidArgument("multires bilateral: the similarityQ table must have 1 to " +
                          std::to_string(kMaxSimilarityEntries) + " entries, got " +
                          std::to_string(simEntries));
  const bool fits = similarityFitsScratch<ExecSpace>(params.radius, simEntries);
  const std::size_t maxBytes = kx::scratchSizeMax<LayerPolicy<ExecSpace>>(0);
  if (placement == SimilarityPlacement::Scratch && !fits)
    throw Unsupported("multires bilateral: a similarity table of " + std::to_string(simEntries) +
                      " entries does not fit the team scratch of " + kx::spaceName<ExecSpace>() +
                      " (" + std::to_string(maxBytes) + " B)");
  if (tableScratchBytes(static_cast<std::size_t>(windowTaps(params.radius))) > maxBytes)
    throw Unsupported("multires bilateral: the closenessQ table of radius " +
                      std::to_string(params.radius) + " does not fit the team scratch of " +
                      kx::spaceName<ExecSpace>());
  simInScratch = placement == SimilarityPlacement::Scratch ||
                 (placement == SimilarityPlacement::Auto && fits);
  const LayerTile t = resolveTile(tile);
  makeShape(in.extent(0), in.extent(1), t);  // league size check
  return t;
}

// The integer layer bilateral with an explicit similarity-table placement.
template <class ExecSpace>
LayerTile bilateralLayerQ(ExecSpace const& exec, ConstIntLayer<typename ExecSpace::memory_space> in,
                          IntLayerView<typename ExecSpace::memory_space> out,
                          ConstTable<typename ExecSpace::memory_space> closenessQ,
                          ConstTable<typename ExecSpace::memory_space> similarityQ,
                          MultiresParams const& params, LayerTile tile,
                          SimilarityPlacement placement) {
  bool simInScratch = false;
  const LayerTile t =
      checkInt<ExecSpace>(in, out, closenessQ, similarityQ, params, tile, placement, simInScratch);
  const LayerShape shape = makeShape(in.extent(0), in.extent(1), t);
  const int r = params.radius;
  if (simInScratch)
    dispatchIntRadius<ExecSpace, true>(exec, in, out, closenessQ, similarityQ, shape, r);
  else
    dispatchIntRadius<ExecSpace, false>(exec, in, out, closenessQ, similarityQ, shape, r);
  return t;
}

}  // namespace kortex::gpu::multires_detail

#undef KORTEX_UNROLL
